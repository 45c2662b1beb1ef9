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

/// The aligned table.
pub fn summary_text(manifest: &Value, stats: Option<&StatsFile>) -> String {
    let mut out = Vec::new();
    let name = manifest.get("name").and_then(Value::as_str).unwrap_or("?");
    out.push(format!("dataset: {name}"));
    if let Some(id) = manifest.get("build_id").and_then(Value::as_str) {
        out.push(format!("build id: {id}"));
    }
    out.push(format!(
        "rows: {}   tokens: {}   supervised tokens: {}   shards: {}",
        num(manifest, "rows"),
        num(manifest, "tokens"),
        num(manifest, "supervised_tokens"),
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
    let mut extra_keys: Vec<String> = Vec::new();
    for s in sources.values() {
        for (k, _) in extra_counts(s) {
            if !extra_keys.contains(&k) {
                extra_keys.push(k);
            }
        }
    }
    let mut header: Vec<String> = ["source", "read", "kept", "rejected", "filtered", "dedup"]
        .map(String::from)
        .to_vec();
    header.extend(extra_keys.iter().cloned());
    header.extend(
        [
            "rows",
            "tokens",
            "supervised",
            "len p50",
            "len p90",
            "len p99",
            "len max",
            "sup p50",
        ]
        .map(String::from),
    );
    let mut rows = vec![header];
    let percentile_cells = |st: Option<&crate::report::stats::SourceSummary>| -> Vec<String> {
        match st {
            Some(st) => vec![
                st.seq_len.p50.to_string(),
                st.seq_len.p90.to_string(),
                st.seq_len.p99.to_string(),
                st.seq_len.max.to_string(),
                st.supervised_per_row.p50.to_string(),
            ],
            None => vec!["-".into(); 5],
        }
    };
    for (name, s) in sources {
        let mut row = vec![
            name.clone(),
            num(s, "read").to_string(),
            num(s, "kept").to_string(),
            total(s.get("rejected")).to_string(),
            total(s.get("filtered")).to_string(),
            num(s, "deduplicated").to_string(),
        ];
        let extra = extra_counts(s);
        for k in &extra_keys {
            let n = extra
                .iter()
                .find(|(key, _)| key == k)
                .map_or(0, |(_, n)| *n);
            row.push(n.to_string());
        }
        row.extend([
            num(s, "rows").to_string(),
            num(s, "tokens").to_string(),
            num(s, "supervised_tokens").to_string(),
        ]);
        row.extend(percentile_cells(
            stats.and_then(|st| st.sources.get(name.as_str())),
        ));
        rows.push(row);
    }
    let mut totals = vec!["total".to_owned()];
    for key in ["read", "kept"] {
        totals.push(
            sources
                .values()
                .map(|s| num(s, key))
                .sum::<u64>()
                .to_string(),
        );
    }
    for key in ["rejected", "filtered"] {
        totals.push(
            sources
                .values()
                .map(|s| total(s.get(key)))
                .sum::<u64>()
                .to_string(),
        );
    }
    totals.push(
        sources
            .values()
            .map(|s| num(s, "deduplicated"))
            .sum::<u64>()
            .to_string(),
    );
    for k in &extra_keys {
        let n: u64 = sources
            .values()
            .flat_map(extra_counts)
            .filter(|(key, _)| key == k)
            .map(|(_, n)| n)
            .sum();
        totals.push(n.to_string());
    }
    for key in ["rows", "tokens", "supervised_tokens"] {
        totals.push(num(manifest, key).to_string());
    }
    totals.extend(percentile_cells(stats.map(|st| &st.total)));
    rows.push(totals);
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &w))| {
                if i == 0 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        out.push(cells.join("  ").trim_end().to_owned());
    }
    // Reasons, summed over sources.
    let mut reasons: std::collections::BTreeMap<String, u64> = Default::default();
    for s in sources.values() {
        for kind in ["rejected", "filtered"] {
            if let Some(m) = s.get(kind).and_then(Value::as_object) {
                for (k, v) in m {
                    *reasons.entry(format!("{kind} {k}")).or_default() += v.as_u64().unwrap_or(0);
                }
            }
        }
    }
    if !reasons.is_empty() {
        out.push("reasons:".into());
        let w = reasons.keys().map(|k| k.len()).max().unwrap_or(0);
        for (k, v) in reasons {
            out.push(format!("  {k:<w$}  {v:>10}"));
        }
    }
    if stats.is_none() {
        out.push(format!(
            "(no {STATS}: built by an older version; percentiles not shown)"
        ));
    } else {
        out.push(
            "len = tokens per row, sup = supervised tokens per row; percentiles are bin tops, exact below 32 and at most 6.25% high above (stats.json)".into(),
        );
    }
    out.join("\n")
}

pub fn run(dir: &Path, as_json: bool) -> Result<()> {
    use std::io::Write;
    let (manifest, stats) = load(dir)?;
    let text = if as_json {
        crate::write::pretty(&summary_json(&manifest, stats.as_ref()))
            .trim_end()
            .to_owned()
    } else {
        summary_text(&manifest, stats.as_ref())
    };
    match writeln!(std::io::stdout().lock(), "{text}") {
        // `chatshards stats DIR | head` is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("failed to write to stdout"),
    }
}
