//! `chatshards stats DIR`: the dataset's summary in the terminal (the numbers of report.html),
//! and the files a build writes with it: `stats.json`, `token_freq.pt`, `token_freq_all.pt`.

pub use crate::report::files::{load, write_stats_files, STATS, TOKEN_FREQ, TOKEN_FREQ_ALL};
use crate::report::stats::{HistogramSummary, StatsFile};
use anyhow::{Context, Result};
use serde_json::{json, Map, Value};
use std::path::Path;

/// A number from the manifest (0 when absent).
pub fn num(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// Sum of an object of counts (`rejected`, `filtered`), or the number itself.
pub fn total(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::Object(m)) => m.values().filter_map(Value::as_u64).sum(),
        Some(v) => v.as_u64().unwrap_or(0),
        None => 0,
    }
}

use crate::report::html::{KNOWN, SKIPPED};

/// Count keys of a source entry not in [`KNOWN`], in manifest order: plain numbers and objects
/// of counts (their total).
pub fn extra_counts(source: &Value) -> Vec<(String, u64)> {
    let Some(map) = source.as_object() else {
        return Vec::new();
    };
    map.iter()
        .filter(|(k, _)| !KNOWN.contains(&k.as_str()) && !SKIPPED.contains(&k.as_str()))
        .filter_map(|(k, v)| match v {
            Value::Number(n) => n.as_u64().map(|n| (k.clone(), n)),
            Value::Object(m) if m.values().all(Value::is_u64) => Some((k.clone(), total(Some(v)))),
            _ => None,
        })
        .collect()
}

fn percentiles(h: &HistogramSummary) -> Value {
    json!({"p50": h.p50, "p90": h.p90, "p99": h.p99, "max": h.max, "mean": h.mean})
}

/// The summary `--json` prints: the manifest's accounting with the statistics' percentiles.
pub fn summary_json(manifest: &Value, stats: Option<&StatsFile>) -> Value {
    let mut sources = Map::new();
    if let Some(map) = manifest.get("sources").and_then(Value::as_object) {
        for (name, s) in map {
            let mut entry = Map::new();
            for key in [
                "read",
                "kept",
                "rows",
                "tokens",
                "supervised_tokens",
                "deduplicated",
            ] {
                entry.insert(key.into(), json!(num(s, key)));
            }
            for key in ["rejected", "filtered"] {
                entry.insert(key.into(), s.get(key).cloned().unwrap_or(json!({})));
            }
            for (key, n) in extra_counts(s) {
                entry.insert(key, json!(n));
            }
            if let Some(st) = stats.and_then(|st| st.sources.get(name)) {
                entry.insert("seq_len".into(), percentiles(&st.seq_len));
                entry.insert(
                    "supervised_per_row".into(),
                    percentiles(&st.supervised_per_row),
                );
            }
            sources.insert(name.clone(), Value::Object(entry));
        }
    }
    let mut out = Map::new();
    out.insert(
        "name".into(),
        manifest.get("name").cloned().unwrap_or(Value::Null),
    );
    if let Some(id) = manifest.get("build_id") {
        out.insert("build_id".into(), id.clone());
    }
    for key in ["rows", "tokens", "supervised_tokens"] {
        out.insert(key.into(), json!(num(manifest, key)));
    }
    out.insert(
        "shards".into(),
        json!(manifest
            .get("shards")
            .and_then(Value::as_array)
            .map_or(0, Vec::len)),
    );
    if let Some(st) = stats {
        out.insert("seq_len".into(), percentiles(&st.total.seq_len));
        out.insert(
            "supervised_per_row".into(),
            percentiles(&st.total.supervised_per_row),
        );
    }
    out.insert("sources".into(), Value::Object(sources));
    Value::Object(out)
}

/// `stats`' default count columns: with two length percentiles they fit 80 columns.
const STATS_COLUMNS: &[&str] = &["read", "kept", "rows", "tokens", "supervised_tokens"];

/// The aligned table: 80 columns by default, every count and percentile with `wide`.
pub fn summary_text(manifest: &Value, stats: Option<&StatsFile>, wide: bool) -> String {
    use crate::report::table::{sources_table, SourceRow};
    use crate::report::thousands;
    let mut out = Vec::new();
    let name = manifest.get("name").and_then(Value::as_str).unwrap_or("?");
    out.push(format!("dataset: {name}"));
    if let Some(id) = manifest.get("build_id").and_then(Value::as_str) {
        out.push(format!("build_id: {id}"));
    }
    out.push(format!(
        "rows: {}   tokens: {}   supervised_tokens: {}   shards: {}",
        thousands(num(manifest, "rows")),
        thousands(num(manifest, "tokens")),
        thousands(num(manifest, "supervised_tokens")),
        manifest
            .get("shards")
            .and_then(Value::as_array)
            .map_or(0, Vec::len)
    ));
    let empty = Map::new();
    let sources = manifest
        .get("sources")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    // Percentiles without separators: token lengths, read as sizes.
    let percentiles = |st: Option<&crate::report::stats::SourceSummary>| -> Vec<(String, String)> {
        let mut cells: Vec<(&str, Option<u64>)> = vec![("len_p50", st.map(|st| st.seq_len.p50))];
        if wide {
            cells.push(("len_p90", st.map(|st| st.seq_len.p90)));
        }
        cells.push(("len_p99", st.map(|st| st.seq_len.p99)));
        if wide {
            cells.push(("len_max", st.map(|st| st.seq_len.max)));
            cells.push(("sup_p50", st.map(|st| st.supervised_per_row.p50)));
        }
        cells
            .into_iter()
            .map(|(k, v)| {
                (
                    k.to_owned(),
                    v.map_or_else(|| "-".to_owned(), |v| v.to_string()),
                )
            })
            .collect()
    };
    let rows: Vec<SourceRow> = sources
        .iter()
        .map(|(name, s)| {
            let mut row = SourceRow::from_manifest(name, s);
            row.extra = percentiles(stats.and_then(|st| st.sources.get(name.as_str())));
            row
        })
        .collect();
    out.push(sources_table(
        &rows,
        &percentiles(stats.map(|st| &st.total)),
        STATS_COLUMNS,
        wide,
    ));
    if wide {
        // Counts a later version added to the manifest, under their own names and heading:
        // they are not drops, so not under the table's `dropped rows`.
        let mut lines = Vec::new();
        for (name, s) in sources {
            let items: Vec<String> = extra_counts(s)
                .into_iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "near_duplicate" | "contaminated" | "sampled_out" | "repeated"
                    )
                })
                .map(|(k, n)| format!("{k} {}", thousands(n)))
                .collect();
            if !items.is_empty() {
                lines.push(format!("  {name}: {}", items.join(", ")));
            }
        }
        if !lines.is_empty() {
            out.push("other counts, by source:".to_owned());
            out.extend(lines);
        }
    }
    if stats.is_none() {
        out.push(format!(
            "(no {STATS}: built by an older version; percentiles not shown)"
        ));
    } else {
        // What the shown columns mean (the default shows len_p50 and len_p99 alone).
        out.push(if wide {
            "len_pN: tokens per row at percentile N, len_max the longest; sup_p50: the\nsupervised tokens per row. Percentiles are bin tops: exact below 32, at most\n6.25% high above."
        } else {
            "len_pN: tokens per row at percentile N; --wide adds len_p90, len_max and sup_p50\n(supervised tokens per row). Percentiles are bin tops: exact below 32, at most\n6.25% high above."
        }
        .into());
    }
    out.join("\n")
}

pub fn run(dir: &Path, as_json: bool, wide: bool) -> Result<()> {
    use std::io::Write;
    let (manifest, stats) = load(dir)?;
    let text = if as_json {
        crate::write::pretty(&summary_json(&manifest, stats.as_ref()))
            .trim_end()
            .to_owned()
    } else {
        summary_text(&manifest, stats.as_ref(), wide)
    };
    match writeln!(std::io::stdout().lock(), "{text}") {
        // `chatshards stats DIR | head` is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("failed to write to stdout"),
    }
}
