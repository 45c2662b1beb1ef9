//! The per-source table that `build` and `stats` print: by default the columns that fit an
//! 80-column terminal, `--wide` every count; the column names are the manifest's keys, so a
//! number can be found in `manifest.json` under the name it is printed with. Below it, the
//! rows each source dropped, by reason.

use super::{thousands, SourceStats};
use serde_json::Value;
use std::collections::BTreeMap;

/// Terminal width the default table fits.
pub const WIDTH: usize = 80;

/// One source's counts, from a run ([`SourceStats`]) or a manifest's `sources` entry.
#[derive(Debug, Clone, Default)]
pub struct SourceRow {
    pub name: String,
    pub counts: BTreeMap<&'static str, u64>,
    /// `rejected X` / `filtered X` / `deduplicated`..., with their rows.
    pub dropped: Vec<(String, u64)>,
    /// Further columns, printed as given after the counts (`stats`' length percentiles).
    pub extra: Vec<(String, String)>,
}

/// The count columns of `--wide`, in order: every per-source count of the manifest.
const COLUMNS: [&str; 12] = [
    "read",
    "kept",
    "rejected",
    "filtered",
    "deduplicated",
    "near_duplicate",
    "contaminated",
    "sampled_out",
    "repeated",
    "rows",
    "tokens",
    "supervised_tokens",
];

/// `build`'s default columns: what fits 80 columns (the drops follow by reason).
pub const BUILD_COLUMNS: &[&str] = &[
    "read",
    "kept",
    "sampled_out",
    "rows",
    "tokens",
    "supervised_tokens",
];

impl SourceRow {
    pub fn from_stats(name: &str, s: &SourceStats) -> SourceRow {
        let counts = BTreeMap::from([
            ("read", s.read),
            ("kept", s.kept),
            ("rejected", s.rejected_total()),
            ("filtered", s.filtered_total()),
            ("deduplicated", s.deduplicated),
            ("near_duplicate", s.near_duplicate),
            ("contaminated", s.contaminated),
            ("sampled_out", s.sampled_out),
            ("repeated", s.repeated),
            ("rows", s.rows),
            ("tokens", s.tokens),
            ("supervised_tokens", s.supervised_tokens),
        ]);
        let mut dropped: Vec<(String, u64)> = s
            .rejected
            .iter()
            .map(|(k, v)| (format!("rejected {}", k.code()), *v))
            .chain(
                s.filtered
                    .iter()
                    .map(|(k, v)| (format!("filtered {k}"), *v)),
            )
            .collect();
        dropped.extend(singles(&counts));
        SourceRow {
            name: name.to_owned(),
            counts,
            dropped: ordered(dropped),
            extra: Vec::new(),
        }
    }

    /// A manifest's `sources.NAME` object (absent counts are 0).
    pub fn from_manifest(name: &str, v: &Value) -> SourceRow {
        let num = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
        let by_reason = |k: &str| -> Vec<(String, u64)> {
            v.get(k)
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(r, n)| (format!("{k} {r}"), n.as_u64().unwrap_or(0)))
                        .collect()
                })
                .unwrap_or_default()
        };
        let rejected = by_reason("rejected");
        let filtered = by_reason("filtered");
        let mut counts: BTreeMap<&'static str, u64> =
            COLUMNS.iter().map(|k| (*k, num(k))).collect();
        counts.insert("rejected", rejected.iter().map(|r| r.1).sum());
        counts.insert("filtered", filtered.iter().map(|r| r.1).sum());
        let mut dropped = rejected;
        dropped.extend(filtered);
        dropped.extend(singles(&counts));
        SourceRow {
            name: name.to_owned(),
            counts,
            dropped: ordered(dropped),
            extra: Vec::new(),
        }
    }
}

fn singles(counts: &BTreeMap<&'static str, u64>) -> Vec<(String, u64)> {
    ["deduplicated", "near_duplicate", "contaminated"]
        .iter()
        .map(|k| (k.to_string(), counts.get(k).copied().unwrap_or(0)))
        .collect()
}

/// Most rows first, nothing empty.
fn ordered(mut reasons: Vec<(String, u64)>) -> Vec<(String, u64)> {
    reasons.retain(|r| r.1 > 0);
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    reasons
}

/// The table (a `total` line last, with `total_extra` as its extra columns), then the dropped
/// rows by source and reason. `compact`: the count columns without `wide`.
pub fn sources_table(
    rows: &[SourceRow],
    total_extra: &[(String, String)],
    compact: &[&str],
    wide: bool,
) -> String {
    let counted: Vec<&str> = if wide {
        COLUMNS.to_vec()
    } else {
        compact.to_vec()
    };
    let mut total = SourceRow {
        name: "total".to_owned(),
        extra: total_extra.to_vec(),
        ..SourceRow::default()
    };
    let mut columns: Vec<&str> = counted.clone();
    columns.extend(total_extra.iter().map(|(k, _)| k.as_str()));
    for r in rows {
        for (k, v) in &r.counts {
            *total.counts.entry(*k).or_default() += v;
        }
    }
    let layout = |short: bool| {
        let body: Vec<(String, Vec<String>)> = rows
            .iter()
            .chain([&total])
            .map(|r| {
                let mut cells: Vec<String> = counted
                    .iter()
                    .map(|c| {
                        let n = r.counts.get(c).copied().unwrap_or(0);
                        if short {
                            abbreviated(n)
                        } else {
                            thousands(n)
                        }
                    })
                    .collect();
                for (k, _) in total_extra {
                    let cell = r.extra.iter().find(|(e, _)| e == k).map(|(_, v)| v.clone());
                    cells.push(cell.unwrap_or_else(|| "-".to_owned()));
                }
                (r.name.clone(), cells)
            })
            .collect();
        let widths: Vec<usize> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                body.iter()
                    .map(|(_, cells)| cells[i].len())
                    .max()
                    .unwrap_or(0)
                    .max(c.len())
            })
            .collect();
        (body, widths)
    };
    let longest = rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(0)
        .max("source".len())
        .max("total".len());
    let numbers = |widths: &[usize]| widths.iter().map(|w| w + 2).sum::<usize>();
    let (mut body, mut widths) = layout(false);
    // Too wide for a terminal even with names cut to 12: 1.23M instead of 1,234,567.
    let short = !wide && numbers(&widths) + longest.min(12) > WIDTH;
    if short {
        (body, widths) = layout(true);
    }
    // The names give way first: the numbers are what the table is for.
    let name_width = if wide {
        longest
    } else {
        longest.min(WIDTH.saturating_sub(numbers(&widths)).max(12))
    };
    let line = |name: &str, cells: &[String]| -> String {
        let mut out = format!("{:<name_width$}", clip(name, name_width));
        for (cell, w) in cells.iter().zip(&widths) {
            out.push_str(&format!("  {cell:>w$}"));
        }
        out
    };
    let header: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
    let mut out = vec![line("source", &header)];
    out.extend(body.iter().map(|(n, c)| line(n, c)));
    if short {
        out.push(
            "(k = thousand, M = million, B = billion; `--wide` for every count, exact)".to_owned(),
        );
    }
    if rows.iter().any(|r| !r.dropped.is_empty()) {
        out.push("dropped rows, by source and reason:".to_owned());
        for r in rows.iter().filter(|r| !r.dropped.is_empty()) {
            let items: Vec<String> = r
                .dropped
                .iter()
                .map(|(k, v)| format!("{k} {}", thousands(*v)))
                .collect();
            out.extend(wrap(
                &format!("  {}: ", r.name),
                &items,
                if wide { usize::MAX } else { WIDTH },
            ));
        }
    }
    out.join("\n")
}

/// At most 5 characters: exact below 10,000, else 3 significant digits and k, M or B.
fn abbreviated(n: u64) -> String {
    if n < 10_000 {
        return thousands(n);
    }
    let (value, unit) = match n {
        0..=999_999 => (n as f64 / 1e3, "k"),
        1_000_000..=999_999_999 => (n as f64 / 1e6, "M"),
        _ => (n as f64 / 1e9, "B"),
    };
    let digits = if value < 10.0 {
        2
    } else if value < 100.0 {
        1
    } else {
        0
    };
    format!("{value:.digits$}{unit}")
}

/// `name` cut to `width` characters, its end replaced by `…` when cut.
fn clip(name: &str, width: usize) -> String {
    if name.chars().count() <= width {
        return name.to_owned();
    }
    let mut s: String = name.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// `items` joined by `, ` after `lead`, in lines of at most `width` (an item longer than a
/// line gets its own line), continued under the first item.
fn wrap(lead: &str, items: &[String], width: usize) -> Vec<String> {
    let indent = " ".repeat(4);
    let mut lines = Vec::new();
    let mut current = lead.to_owned();
    let mut fresh = true;
    for (i, item) in items.iter().enumerate() {
        let sep = if i + 1 < items.len() { "," } else { "" };
        let piece = format!("{item}{sep}");
        let space = if fresh { "" } else { " " };
        if !fresh && current.chars().count() + 1 + piece.chars().count() > width {
            lines.push(std::mem::replace(&mut current, indent.clone()));
            current.push_str(&piece);
        } else {
            current.push_str(space);
            current.push_str(&piece);
        }
        fresh = false;
    }
    lines.push(current);
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reject::RejectReason;

    fn stats() -> SourceStats {
        let mut s = SourceStats {
            read: 1_234_567,
            kept: 1_000_000,
            deduplicated: 34_567,
            sampled_out: 0,
            rows: 1_500_000,
            tokens: 987_654_321,
            supervised_tokens: 123_456_789,
            ..Default::default()
        };
        s.rejected.insert(RejectReason::UnknownRole, 150_000);
        s.filtered.insert("too_long".to_owned(), 50_000);
        s
    }

    #[test]
    fn the_default_table_fits_80_columns_with_separators_and_reasons_per_source() {
        let table = sources_table(
            &[
                SourceRow::from_stats("a_rather_long_source_name_from_the_hub", &stats()),
                SourceRow::from_stats("b", &SourceStats::default()),
            ],
            &[],
            BUILD_COLUMNS,
            false,
        );
        assert_eq!(
            table,
            "\
source                read   kept  sampled_out   rows  tokens  supervised_tokens
a_rather_long_sour…  1.23M  1.00M            0  1.50M    988M               123M
b                        0      0            0      0       0                  0
total                1.23M  1.00M            0  1.50M    988M               123M
(k = thousand, M = million, B = billion; `--wide` for every count, exact)
dropped rows, by source and reason:
  a_rather_long_source_name_from_the_hub: rejected unknown_role 150,000,
    filtered too_long 50,000, deduplicated 34,567"
        );
        assert!(table.lines().all(|l| l.chars().count() <= 80), "{table}");
        // Small counts stay exact, with separators.
        let small = SourceStats {
            read: 12_345,
            kept: 12_000,
            rows: 12_000,
            tokens: 4_567_890,
            supervised_tokens: 1_234_567,
            ..Default::default()
        };
        assert_eq!(
            sources_table(
                &[SourceRow::from_stats("chat", &small)],
                &[],
                BUILD_COLUMNS,
                false
            ),
            "\
source    read    kept  sampled_out    rows     tokens  supervised_tokens
chat    12,345  12,000            0  12,000  4,567,890          1,234,567
total   12,345  12,000            0  12,000  4,567,890          1,234,567"
        );
        let wide = sources_table(
            &[SourceRow::from_stats("chat", &small)],
            &[],
            BUILD_COLUMNS,
            true,
        );
        assert!(wide.starts_with("source    read    kept  rejected  filtered  deduplicated  near_duplicate  contaminated  sampled_out  repeated    rows     tokens  supervised_tokens\n"), "{wide}");
    }
}
