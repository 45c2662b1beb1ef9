//! Accounting: the per-source counters ([`SourceStats`], in [`crate::model::stats`]), the
//! summary table printed at the end of a build; [`timings`], where its CPU time went.

pub mod files;
pub mod html;
pub mod stats;
pub mod timings;
pub mod token_freq;

pub use crate::model::stats::SourceStats;
use std::collections::BTreeMap;

/// The end-of-run table, one line per source plus a total.
pub fn summary_table(sources: &[(String, SourceStats)]) -> String {
    let mut total = SourceStats::default();
    let mut lines = vec![format!(
        "{:<24} {:>10} {:>10} {:>9} {:>9} {:>8} {:>8} {:>8} {:>10} {:>10} {:>6} {:>14} {:>14}",
        "source",
        "read",
        "kept",
        "rejected",
        "filtered",
        "dedup",
        "near-dup",
        "contam",
        "sampled",
        "rows",
        "x",
        "tokens",
        "supervised"
    )];
    let line = |name: &str, s: &SourceStats| {
        // Output rows per kept conversation (copies included): what `expand` / `turns` made.
        let per = s.rows as f64 / (s.kept + s.repeated).max(1) as f64;
        format!(
            "{:<24} {:>10} {:>10} {:>9} {:>9} {:>8} {:>8} {:>8} {:>10} {:>10} {:>6.2} {:>14} {:>14}",
            name,
            s.read,
            s.kept,
            s.rejected_total(),
            s.filtered_total(),
            s.deduplicated,
            s.near_duplicate,
            s.contaminated,
            s.sampled_out,
            s.rows,
            per,
            s.tokens,
            s.supervised_tokens
        )
    };
    for (name, s) in sources {
        lines.push(line(name, s));
        total += s;
    }
    lines.push(line("total", &total));
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for (_, s) in sources {
        for (k, v) in &s.rejected {
            *reasons.entry(format!("rejected {}", k.code())).or_default() += v;
        }
        for (k, v) in &s.filtered {
            *reasons.entry(format!("filtered {k}")).or_default() += v;
        }
    }
    for (k, v) in reasons.into_iter().filter(|(_, v)| *v > 0) {
        lines.push(format!("  {k}: {v}"));
    }
    lines.join("\n")
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
