//! Accounting: the per-source counters ([`SourceStats`], in [`crate::model::stats`]), the
//! summary table printed at the end of a build; [`timings`], where its CPU time went.

pub mod files;
pub mod html;
pub mod loss;
pub mod stats;
pub mod table;
pub mod timings;
pub mod token_freq;

pub use crate::model::stats::{RegenTally, SourceStats};

/// `1234567` as `1,234,567`: counts read at a glance.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
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
