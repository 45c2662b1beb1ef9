//! Accounting: per-source counters that merge, the identity every run must satisfy, and the
//! summary table printed at the end of a build; [`timings`], where its CPU time went.

pub mod html;
pub mod loss;
pub mod stats;
pub mod table;
pub mod timings;
pub mod token_freq;

use crate::reject::{RejectReason, Repair};
use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::AddAssign;

/// What happened to one source's rows. Source rows are accounted, not output rows: a
/// conversation that `expand`s into three rows is one `kept` source row and three `rows`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SourceStats {
    pub read: u64,
    pub kept: u64,
    pub rejected: BTreeMap<RejectReason, u64>,
    /// Valid rows a rule left out, by filter name (`too_long`, `unresolved`, a named filter).
    pub filtered: BTreeMap<String, u64>,
    /// Exact duplicates of an earlier row (`dedup`).
    pub deduplicated: u64,
    /// In a near-duplicate group whose survivor is another row (`near_dup`).
    pub near_duplicate: u64,
    /// Sharing an n-gram with a benchmark item (`decontaminate`).
    pub contaminated: u64,
    /// Surviving rows that `take` or `mix` did not select.
    pub sampled_out: u64,
    /// Copies added by `mix.max_repeats` (output conversations beyond `kept`; not source rows).
    pub repeated: u64,
    /// Rows that needed a repair, by repair (a row can have several).
    pub repaired: BTreeMap<Repair, u64>,
    /// Output rows (after `expand`).
    pub rows: u64,
    pub tokens: u64,
    pub supervised_tokens: u64,
    /// Output rows cut at a turn boundary by `length_policy: truncate`.
    pub truncated_rows: u64,
    /// Output rows where a supervised span's edge fell inside a token (the header's newline
    /// merged with content starting with whitespace), decided by `mask.boundary`.
    pub mask_boundary_merged: u64,
    /// Source rows whose ids were also computed with the `tokenizers` crate and matched.
    pub encoder_checked_rows: u64,
    /// Source rows whose native render was also made with minijinja and matched.
    pub renderer_checked_rows: u64,
}

impl SourceStats {
    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }
    pub fn filtered_total(&self) -> u64 {
        self.filtered.values().sum()
    }
    /// `read = kept + Σ rejected + Σ filtered + deduplicated + near_duplicate + contaminated +
    /// sampled_out`.
    pub fn balanced(&self) -> bool {
        self.read
            == self.kept
                + self.rejected_total()
                + self.filtered_total()
                + self.deduplicated
                + self.near_duplicate
                + self.contaminated
                + self.sampled_out
    }
}

impl AddAssign<&SourceStats> for SourceStats {
    fn add_assign(&mut self, o: &SourceStats) {
        self.read += o.read;
        self.kept += o.kept;
        for (k, v) in &o.rejected {
            *self.rejected.entry(*k).or_default() += v;
        }
        for (k, v) in &o.filtered {
            *self.filtered.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &o.repaired {
            *self.repaired.entry(*k).or_default() += v;
        }
        self.deduplicated += o.deduplicated;
        self.near_duplicate += o.near_duplicate;
        self.contaminated += o.contaminated;
        self.sampled_out += o.sampled_out;
        self.repeated += o.repeated;
        self.rows += o.rows;
        self.tokens += o.tokens;
        self.supervised_tokens += o.supervised_tokens;
        self.truncated_rows += o.truncated_rows;
        self.mask_boundary_merged += o.mask_boundary_merged;
        self.encoder_checked_rows += o.encoder_checked_rows;
        self.renderer_checked_rows += o.renderer_checked_rows;
    }
}

/// `1234567` as `1,234,567`: counts read at a glance.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The end-of-run table, one line per source plus a total, then the rows each source dropped
/// by reason ([`table::sources_table`]).
pub fn summary_table(sources: &[(String, SourceStats)], wide: bool) -> String {
    let rows: Vec<table::SourceRow> = sources
        .iter()
        .map(|(name, s)| table::SourceRow::from_stats(name, s))
        .collect();
    table::sources_table(&rows, &[], table::BUILD_COLUMNS, wide)
}

/// The realized mix against its target, one line per source.
pub fn mix_table(
    target: &crate::curate::select::MixConfig,
    lines: &[crate::curate::ledger::MixLine],
) -> String {
    let mut out = vec![format!(
        "mix: {} {} (takes and sources without a weight first, the rest by weight)",
        target.total,
        target.target.as_str()
    )];
    out.push(format!(
        "{:<24} {:>8} {:>12} {:>12} {:>14} {:>8} {:>8} {:>8}",
        "source", "weight", "quota", "realized", "conversations", "conv %", "tok %", "sup %"
    ));
    for l in lines {
        out.push(format!(
            "{:<24} {:>8} {:>12} {:>12} {:>14} {:>7.2}% {:>7.2}% {:>7.2}%",
            l.source,
            l.weight.map_or_else(|| "-".to_owned(), |w| format!("{w}")),
            l.quota,
            l.realized,
            l.conversations,
            100.0 * l.share.conversations,
            100.0 * l.share.tokens,
            100.0 * l.share.supervised_tokens
        ));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_counts_every_outcome() {
        let mut s = SourceStats {
            read: 10,
            kept: 5,
            deduplicated: 1,
            ..Default::default()
        };
        s.rejected.insert(RejectReason::Template, 2);
        s.filtered.insert("too_long".into(), 1);
        assert!(!s.balanced());
        s.sampled_out = 1;
        assert!(s.balanced());
        let mut t = SourceStats::default();
        t += &s;
        t += &s;
        assert_eq!(t.read, 20);
        assert_eq!(t.rejected[&RejectReason::Template], 4);
        assert!(t.balanced());
    }
}
