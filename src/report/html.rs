//! `report.html`: one self-contained page (inline CSS and SVG, no scripts, fonts or anything
//! fetched) showing a built dataset. Every number on it is read from `manifest.json` (as JSON,
//! so sections and counts added by later versions show up by name) or `stats.json`; the page
//! computes nothing but bar widths and shares of totals it shows.
//!
//! Histograms are drawn with plotters' SVG backend; bar lists (reasons, mix) are HTML tables
//! with CSS bars, so that every number stays text a reader can copy.

use crate::report::stats::{HistogramSummary, SourceSummary, StatsFile};
use plotters::prelude::*;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, Read};
use std::path::Path;

/// Example rows shown per reason.
pub const EXAMPLES_PER_REASON: usize = 3;
/// Characters of an example shown (the rest is cut with an ellipsis).
const EXAMPLE_CHARS: usize = 400;
/// Bytes of a side file read for examples, and of one line of it: a huge rejects file or one
/// enormous line costs a bounded read.
const MAX_READ_BYTES: u64 = 64 << 20;
const MAX_LINE_BYTES: u64 = 1 << 20;

/// Example lines of a side file (`rejects.jsonl`, `filtered.jsonl`), by reason.
#[derive(Debug, Default)]
pub struct Examples {
    pub by_reason: BTreeMap<String, Vec<String>>,
}

impl Examples {
    /// Reads up to [`EXAMPLES_PER_REASON`] lines per reason from a JSON-lines file whose
    /// records name their reason in `reason` (rejects), `filtered` or `filter`; a missing file
    /// gives none. Reading is bounded in bytes and per line.
    pub fn read(path: &Path) -> Examples {
        let mut out = Examples::default();
        let Ok(file) = std::fs::File::open(path) else {
            return out;
        };
        let mut reader = std::io::BufReader::new(file.take(MAX_READ_BYTES));
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = match (&mut reader)
                .take(MAX_LINE_BYTES)
                .read_until(b'\n', &mut line)
            {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if n as u64 == MAX_LINE_BYTES && line.last() != Some(&b'\n') {
                // Too long to show: skip to the end of the line.
                let mut skip = Vec::new();
                while let Ok(k) = (&mut reader)
                    .take(MAX_LINE_BYTES)
                    .read_until(b'\n', &mut skip)
                {
                    if k == 0 || skip.last() == Some(&b'\n') {
                        break;
                    }
                    skip.clear();
                }
                continue;
            }
            let Ok(record) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            let reason = ["reason", "filtered", "filter"]
                .iter()
                .find_map(|k| record.get(*k).and_then(Value::as_str));
            if let Some(reason) = reason {
                let list = out.by_reason.entry(reason.to_owned()).or_default();
                if list.len() < EXAMPLES_PER_REASON {
                    list.push(String::from_utf8_lossy(&line).trim_end().to_owned());
                }
            }
        }
        out
    }
}

/// HTML-escapes text for element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn truncate(s: &str, chars: usize) -> String {
    match s.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

/// A count with thin-space thousands separators, as text.
fn n(v: u64) -> String {
    let digits = v.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('\u{202f}');
        }
        out.push(c);
    }
    out
}

fn num(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

const CSS: &str = r#"
:root { color-scheme: light; --fg:#1d2330; --muted:#5b6475; --line:#d9dee7; --bar:#3b6fd8; --bar2:#e08a2c; --bg:#fff; --soft:#f4f6fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); margin: 0; }
main { max-width: 1200px; margin: 0 auto; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 32px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
.muted { color: var(--muted); } .small { font-size: 12px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; }
.card { background: var(--soft); border-radius: 8px; padding: 10px 16px; min-width: 150px; }
.card .v { font-size: 22px; font-weight: 600; font-variant-numeric: tabular-nums; } .card .k { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; margin: 6px 0; }
th, td { padding: 3px 10px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; } th { font-weight: 600; background: var(--soft); }
tr.total td { font-weight: 600; border-top: 2px solid var(--fg); }
.wrap { overflow-x: auto; }
.bar { display: inline-block; height: 10px; background: var(--bar); border-radius: 2px; vertical-align: middle; }
.bar.b2 { background: var(--bar2); }
td.bars { text-align: left; min-width: 260px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 16px; }
figure { margin: 0; } figcaption { font-size: 12px; color: var(--muted); }
svg { max-width: 100%; height: auto; }
mark { background: #fde68a; color: inherit; }
pre { background: var(--soft); padding: 6px 8px; border-radius: 4px; white-space: pre-wrap; word-break: break-all; font-size: 12px; margin: 4px 0; }
.drop { display: grid; grid-template-columns: minmax(0, 3fr) minmax(0, 2fr); gap: 8px; align-items: start; }
pre.failing { border-left: 3px solid #c0392b; }
code { font-size: 12px; }
"#;

/// The whole page.
/// A row of the dataset as text spans, each supervised (loss mask 1) or not.
#[derive(Debug)]
pub struct ExampleRow {
    pub source: String,
    pub sample_id: String,
    pub spans: Vec<(String, bool)>,
}

/// A filter as the pipeline gives it: the sources it runs on, its name (its count key is
/// `filtered.NAME`), its kind and parameters.
#[derive(Debug)]
pub struct FilterRow {
    pub applies: String,
    pub name: String,
    pub parameters: String,
}

/// Characters of an example row shown (the rest is cut with an ellipsis).
const ROW_CHARS: usize = 1500;

pub fn render(
    manifest: &Value,
    stats: Option<&StatsFile>,
    rejects: &Examples,
    filtered: &Examples,
    rows: Option<&[ExampleRow]>,
    filters: &[FilterRow],
) -> String {
    let mut h = String::new();
    let name = manifest
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("dataset");
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} — chatshards report</title><style>{CSS}</style></head><body><main>\n",
        esc(name)
    );
    summary(&mut h, manifest, stats);
    accounting(&mut h, manifest);
    mix(&mut h, manifest);
    if let Some(stats) = stats {
        lengths(&mut h, stats);
    } else {
        h.push_str("<h2>Lengths</h2><p class=\"muted\">No stats.json in this directory (built by an older version): rebuild to see length statistics.</p>\n");
    }
    examples(&mut h, rows);
    reasons(&mut h, manifest, rejects, filtered);
    filter_table(&mut h, filters);
    inputs(&mut h, manifest);
    h.push_str("</main></body></html>\n");
    h
}

/// A few rows of each source as the model sees them, the supervised text marked.
fn examples(h: &mut String, rows: Option<&[ExampleRow]>) {
    h.push_str("<h2>Example rows</h2>");
    let Some(rows) = rows else {
        h.push_str("<p class=\"muted\">Rows are shown for datasets tokenized with the built-in Qwen3.6 tokenizer; <code>chatshards inspect DIR --tokenizer FILE</code> shows this one's.</p>\n");
        return;
    };
    let _ = write!(
        h,
        "<p class=\"muted small\">The first rows of each source in the shards, decoded, cut at {ROW_CHARS} characters; <mark>highlighted</mark> text is supervised (loss mask 1).</p>"
    );
    for row in rows {
        let _ = write!(
            h,
            "<div class=\"row\" data-sample=\"{}\"><b>{}</b> <code>{}</code><pre>",
            esc(&row.sample_id),
            esc(&row.source),
            esc(&row.sample_id)
        );
        let mut left = ROW_CHARS;
        for (text, supervised) in &row.spans {
            if left == 0 {
                break;
            }
            let count = text.chars().count();
            let shown = truncate(text, left);
            left = left.saturating_sub(count);
            if *supervised {
                let _ = write!(h, "<mark>{}</mark>", esc(&shown));
            } else {
                h.push_str(&esc(&shown));
            }
        }
        h.push_str("</pre></div>\n");
    }
}

/// Each filter with its parameters, from the pipeline copy.
fn filter_table(h: &mut String, filters: &[FilterRow]) {
    if filters.is_empty() {
        return;
    }
    h.push_str("<h3>Filters</h3><p class=\"muted small\">As the pipeline gives them, in the order they run; a row a filter drops is counted as <code>filtered.NAME</code>.</p><table id=\"filters\"><tr><th>runs on</th><th>name</th><th style=\"text-align:left\">kind and parameters</th></tr>");
    for f in filters {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td style=\"text-align:left\"><code>{}</code></td></tr>",
            esc(&f.applies),
            esc(&f.name),
            esc(&f.parameters)
        );
    }
    h.push_str("</table>\n");
}

fn card(h: &mut String, id: &str, label: &str, value: &str) {
    let _ = write!(
        h,
        "<div class=\"card\"><div class=\"v\" id=\"{id}\">{}</div><div class=\"k\">{}</div></div>",
        esc(value),
        esc(label)
    );
}

fn summary(h: &mut String, m: &Value, stats: Option<&StatsFile>) {
    let name = m.get("name").and_then(Value::as_str).unwrap_or("dataset");
    let _ = write!(h, "<h1>{}</h1>", esc(name));
    let tool = m.get("tool");
    let _ = write!(
        h,
        "<div class=\"muted\">built by {} {}",
        esc(tool
            .and_then(|t| t.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("chatshards")),
        esc(tool
            .and_then(|t| t.get("version"))
            .and_then(Value::as_str)
            .unwrap_or(""))
    );
    if let Some(id) = m.get("build_id").and_then(Value::as_str) {
        let _ = write!(h, " · build id <code id=\"build-id\">{}</code>", esc(id));
    }
    if let Some(sha) = m.get("dataset_sha256").and_then(Value::as_str) {
        let _ = write!(h, " · dataset sha256 <code>{}</code>", esc(sha));
    }
    h.push_str("</div><div class=\"cards\">");
    card(h, "total-rows", "rows", &n(num(m, "rows")));
    card(h, "total-tokens", "tokens", &n(num(m, "tokens")));
    card(
        h,
        "total-supervised",
        "supervised tokens",
        &n(num(m, "supervised_tokens")),
    );
    let shards = m
        .get("shards")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    card(h, "total-shards", "shards", &n(shards as u64));
    if let Some(st) = stats {
        card(
            h,
            "seq-p50",
            "tokens per row, p50",
            &n(st.total.seq_len.p50),
        );
        card(
            h,
            "seq-max",
            "tokens per row, max",
            &n(st.total.seq_len.max),
        );
        card(
            h,
            "distinct-supervised",
            "distinct supervised token ids",
            &n(st.distinct_supervised_ids),
        );
    }
    h.push_str("</div>\n");
}

/// Per-source count keys shown in their own columns (others follow under their own names).
pub(crate) const KNOWN: &[&str] = &["read", "kept", "rejected", "filtered", "deduplicated"];
/// Per-source keys that are not counts of rows dropped or kept (shown elsewhere or not at all).
pub(crate) const SKIPPED: &[&str] = &[
    "repaired",
    "rows",
    "tokens",
    "supervised_tokens",
    "truncated_rows",
    "encoder_checked_rows",
    "renderer_checked_rows",
];

/// Count-like keys of a source entry that are not in the fixed columns: numbers and objects
/// of numbers (by total), in manifest order.
fn extra_counts(s: &Value) -> Vec<(String, u64)> {
    let Some(map) = s.as_object() else {
        return Vec::new();
    };
    map.iter()
        .filter(|(k, _)| !KNOWN.contains(&k.as_str()) && !SKIPPED.contains(&k.as_str()))
        .filter_map(|(k, v)| match v {
            Value::Number(x) => x.as_u64().map(|x| (k.clone(), x)),
            Value::Object(o) if o.values().all(Value::is_u64) => {
                Some((k.clone(), o.values().filter_map(Value::as_u64).sum()))
            }
            _ => None,
        })
        .collect()
}

fn total(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::Object(o)) => o.values().filter_map(Value::as_u64).sum(),
        Some(v) => v.as_u64().unwrap_or(0),
        None => 0,
    }
}

fn accounting(h: &mut String, m: &Value) {
    let empty = Map::new();
    let sources = m
        .get("sources")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    h.push_str("<h2>Sources</h2><p class=\"muted small\">Every row read is kept or counted under the first step that dropped it: read = kept + rejected + filtered + deduplicated (+ the later steps' columns).</p><div class=\"wrap\"><table id=\"accounting\"><tr><th>source</th><th>read</th><th>kept</th><th>rejected</th><th>filtered</th><th>deduplicated</th>");
    let mut extra_keys: Vec<String> = Vec::new();
    for s in sources.values() {
        for (k, _) in extra_counts(s) {
            if !extra_keys.contains(&k) {
                extra_keys.push(k);
            }
        }
    }
    for k in &extra_keys {
        let _ = write!(h, "<th>{}</th>", esc(&k.replace('_', " ")));
    }
    h.push_str(
        "<th>rows</th><th>tokens</th><th>supervised</th><th>truncated</th><th>reasons</th></tr>\n",
    );
    for (name, s) in sources {
        let _ = write!(
            h,
            "<tr data-source=\"{}\"><td>{}</td>",
            esc(name),
            esc(name)
        );
        let cell = |h: &mut String, key: &str, v: u64| {
            let _ = write!(h, "<td data-key=\"{}\">{}</td>", esc(key), n(v));
        };
        cell(h, "read", num(s, "read"));
        cell(h, "kept", num(s, "kept"));
        cell(h, "rejected", total(s.get("rejected")));
        cell(h, "filtered", total(s.get("filtered")));
        cell(h, "deduplicated", num(s, "deduplicated"));
        let extra = extra_counts(s);
        for k in &extra_keys {
            let v = extra
                .iter()
                .find(|(key, _)| key == k)
                .map_or(0, |(_, v)| *v);
            cell(h, k, v);
        }
        cell(h, "rows", num(s, "rows"));
        cell(h, "tokens", num(s, "tokens"));
        cell(h, "supervised_tokens", num(s, "supervised_tokens"));
        cell(h, "truncated_rows", num(s, "truncated_rows"));
        let mut reasons = Vec::new();
        for kind in ["rejected", "filtered"] {
            if let Some(o) = s.get(kind).and_then(Value::as_object) {
                for (k, v) in o {
                    reasons.push(format!("{} {}", esc(k), n(v.as_u64().unwrap_or(0))));
                }
            }
        }
        let _ = writeln!(
            h,
            "<td class=\"small\" style=\"text-align:left\">{}</td></tr>",
            reasons.join(", ")
        );
    }
    let _ = write!(h, "<tr class=\"total\" data-source=\"\"><td>total</td>");
    let sum = |f: &dyn Fn(&Value) -> u64| sources.values().map(f).sum::<u64>();
    for v in [
        sum(&|s| num(s, "read")),
        sum(&|s| num(s, "kept")),
        sum(&|s| total(s.get("rejected"))),
        sum(&|s| total(s.get("filtered"))),
        sum(&|s| num(s, "deduplicated")),
    ] {
        let _ = write!(h, "<td>{}</td>", n(v));
    }
    for k in &extra_keys {
        let v: u64 = sources
            .values()
            .flat_map(extra_counts)
            .filter(|(key, _)| key == k)
            .map(|(_, v)| v)
            .sum();
        let _ = write!(h, "<td>{}</td>", n(v));
    }
    let _ = writeln!(
        h,
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td></td></tr></table></div>",
        n(num(m, "rows")),
        n(num(m, "tokens")),
        n(num(m, "supervised_tokens")),
        n(sum(&|s| num(s, "truncated_rows")))
    );
    // Repairs, when any.
    let mut repairs: BTreeMap<String, u64> = BTreeMap::new();
    for s in sources.values() {
        if let Some(o) = s.get("repaired").and_then(Value::as_object) {
            for (k, v) in o {
                *repairs.entry(k.clone()).or_default() += v.as_u64().unwrap_or(0);
            }
        }
    }
    if !repairs.is_empty() {
        h.push_str("<h3>Repairs (rows, all sources)</h3>");
        bar_table(h, "repairs", repairs.into_iter().collect());
    }
}

/// A table of labelled counts with bars scaled to the largest.
fn bar_table(h: &mut String, id: &str, rows: Vec<(String, u64)>) {
    let max = rows.iter().map(|r| r.1).max().unwrap_or(0).max(1);
    let _ = write!(h, "<table id=\"{}\">", esc(id));
    for (label, v) in rows {
        let width = (v as f64 / max as f64 * 240.0).round() as u64;
        let _ = write!(
            h,
            "<tr data-key=\"{}\"><td>{}</td><td>{}</td><td class=\"bars\"><span class=\"bar\" style=\"width:{width}px\"></span></td></tr>",
            esc(&label),
            esc(&label),
            n(v)
        );
    }
    h.push_str("</table>\n");
}

/// The realized mix: the manifest's `mix` section when it has one (target, quota and realized
/// figures per source, as bars), else each source's share of rows, tokens and supervised tokens.
fn mix(h: &mut String, m: &Value) {
    h.push_str("<h2>Mix</h2>");
    let empty = Map::new();
    let sources = m
        .get("sources")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    if let Some(mix) = m.get("mix").filter(|v| !v.is_null()) {
        // Per-source entries: `mix.sources.{name}` or `mix.{name}` objects of numbers.
        let per_source: Vec<(String, &Map<String, Value>)> = mix
            .get("sources")
            .and_then(Value::as_object)
            .or_else(|| mix.as_object())
            .into_iter()
            .flat_map(|o| o.iter())
            .filter_map(|(k, v)| v.as_object().map(|o| (k.clone(), o)))
            .collect();
        let scalars: Vec<(String, String)> = mix
            .as_object()
            .into_iter()
            .flat_map(|o| o.iter())
            .filter(|(_, v)| !v.is_object() && !v.is_array())
            .map(|(k, v)| (k.clone(), v.to_string().trim_matches('"').to_owned()))
            .collect();
        if !scalars.is_empty() {
            h.push_str("<p>");
            for (k, v) in &scalars {
                let _ = write!(h, "{}: <b>{}</b> &nbsp; ", esc(k), esc(v));
            }
            h.push_str("</p>");
        }
        if !per_source.is_empty() {
            let mut keys: Vec<String> = Vec::new();
            for (_, o) in &per_source {
                for (k, v) in o.iter() {
                    if v.is_number() && !keys.contains(k) {
                        keys.push(k.clone());
                    }
                }
            }
            // Bars compare each number with the largest of the same key.
            let target_key = keys
                .iter()
                .find(|k| k.contains("quota") || k.contains("target"))
                .cloned();
            let realized_key = keys.iter().find(|k| k.contains("realized")).cloned();
            h.push_str("<div class=\"wrap\"><table id=\"mix\"><tr><th>source</th>");
            for k in &keys {
                let _ = write!(h, "<th>{}</th>", esc(&k.replace('_', " ")));
            }
            h.push_str(
                "<th style=\"text-align:left\">target (orange) vs realized (blue)</th></tr>",
            );
            let max_of = |key: &Option<String>| -> f64 {
                key.as_ref().map_or(0.0, |k| {
                    per_source
                        .iter()
                        .filter_map(|(_, o)| o.get(k).and_then(Value::as_f64))
                        .fold(0.0, f64::max)
                })
            };
            let scale = max_of(&target_key).max(max_of(&realized_key)).max(1e-12);
            for (name, o) in &per_source {
                let _ = write!(
                    h,
                    "<tr data-source=\"{}\"><td>{}</td>",
                    esc(name),
                    esc(name)
                );
                for k in &keys {
                    let v = o.get(k).map_or(String::new(), |v| match v.as_u64() {
                        Some(x) => n(x),
                        None => v.to_string(),
                    });
                    let _ = write!(h, "<td data-key=\"{}\">{}</td>", esc(k), esc(&v));
                }
                h.push_str("<td class=\"bars\">");
                for (key, class) in [(&target_key, "bar b2"), (&realized_key, "bar")] {
                    if let Some(v) = key.as_ref().and_then(|k| o.get(k)).and_then(Value::as_f64) {
                        let _ = write!(
                            h,
                            "<span class=\"{class}\" style=\"width:{}px\"></span><br>",
                            (v / scale * 240.0).round() as u64
                        );
                    }
                }
                h.push_str("</td></tr>");
            }
            h.push_str("</table></div>\n");
        }
        let text = crate::model::digest::pretty(mix);
        let _ = writeln!(
            h,
            "<details><summary class=\"small muted\">mix section of manifest.json</summary><pre>{}</pre></details>",
            esc(&truncate(&text, 20_000))
        );
        return;
    }
    h.push_str("<p class=\"muted small\">No <code>mix</code> target in this build: each source's share of the dataset.</p><div class=\"wrap\"><table id=\"shares\"><tr><th>source</th><th>rows</th><th>share</th><th>tokens</th><th>share</th><th>supervised</th><th>share</th></tr>");
    let totals = [
        num(m, "rows").max(1),
        num(m, "tokens").max(1),
        num(m, "supervised_tokens").max(1),
    ];
    for (name, s) in sources {
        let _ = write!(
            h,
            "<tr data-source=\"{}\"><td>{}</td>",
            esc(name),
            esc(name)
        );
        for (i, key) in ["rows", "tokens", "supervised_tokens"].iter().enumerate() {
            let v = num(s, key);
            let share = v as f64 / totals[i] as f64;
            let _ = write!(
                h,
                "<td>{}</td><td class=\"bars\" style=\"min-width:140px\"><span class=\"bar\" style=\"width:{}px\"></span> {:.1}%</td>",
                n(v),
                (share * 100.0).round() as u64,
                share * 100.0
            );
        }
        h.push_str("</tr>");
    }
    h.push_str("</table></div>\n");
}

/// An SVG histogram of one statistic: log-x bins, with the percentiles marked.
fn histogram_svg(title: &str, hist: &HistogramSummary, color: RGBColor) -> String {
    let mut svg = String::new();
    if hist.count == 0 {
        return "<p class=\"muted small\">no rows</p>".to_owned();
    }
    let lo = hist.bins.first().map_or(1, |b| b[0]).max(1) as f64;
    let hi = hist.bins.last().map_or(2, |b| b[1]) as f64;
    let (x0, x1) = (lo * 0.8, (hi * 1.25).max(lo * 2.0));
    // Counts on a log scale, so that the tails' few rows stay visible beside the mode.
    let ymax = hist.bins.iter().map(|b| b[2]).max().unwrap_or(1).max(1) as f64 * 2.0;
    let y0 = 0.8;
    {
        let root = SVGBackend::with_string(&mut svg, (560, 240)).into_drawing_area();
        let drawn = (|| -> Result<(), Box<dyn std::error::Error + '_>> {
            root.fill(&WHITE)?;
            let mut chart = ChartBuilder::on(&root)
                .caption(title, ("sans-serif", 15))
                .margin(8)
                .x_label_area_size(32)
                .y_label_area_size(48)
                .build_cartesian_2d((x0..x1).log_scale(), (y0..ymax).log_scale())?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_desc("value (log scale)")
                .y_desc("rows (log scale)")
                .x_label_formatter(&|v| format!("{}", v.round() as u64))
                .y_label_formatter(&|v| format!("{}", v.round() as u64))
                .label_style(("sans-serif", 11))
                .draw()?;
            chart.draw_series(hist.bins.iter().filter(|b| b[2] > 0).map(|b| {
                let left = (b[0] as f64).max(lo * 0.9);
                Rectangle::new([(left, y0), (b[1] as f64, b[2] as f64)], color.filled())
            }))?;
            // Labels at three heights, so that close percentiles stay readable.
            // (Heights as shares of the log axis.)
            let at = |share: f64| y0 * (ymax / y0).powf(share);
            for (label, v, y) in [
                ("p50", hist.p50, 0.99),
                ("p90", hist.p90, 0.92),
                ("p99", hist.p99, 0.85),
            ] {
                let x = (v as f64).max(lo);
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(x, y0), (x, at(y - 0.06))],
                    BLACK.mix(0.6).stroke_width(1),
                )))?;
                chart.draw_series(std::iter::once(Text::new(
                    format!("{label} {v}"),
                    (x, at(y)),
                    ("sans-serif", 10),
                )))?;
            }
            root.present()?;
            Ok(())
        })();
        if let Err(e) = drawn {
            return format!(
                "<p class=\"muted small\">plot failed: {}</p>",
                esc(&e.to_string())
            );
        }
    }
    svg
}

fn percentile_row(h: &mut String, label: &str, id: &str, s: &HistogramSummary) {
    let _ = write!(
        h,
        "<tr data-stat=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        esc(id),
        esc(label),
        n(s.count),
        n(s.min),
        n(s.p50),
        n(s.p90),
        n(s.p99),
        n(s.max),
        s.mean
    );
}

fn lengths(h: &mut String, st: &StatsFile) {
    h.push_str("<h2>Lengths</h2><p class=\"muted small\">From stats.json. Bins are exact below 32 and 1/16 of a power of two wide above; a percentile is the top of the bin holding it (exact below 32, at most 6.25% high above), capped at the exact max.</p>");
    let entries: Vec<(&str, &SourceSummary)> = std::iter::once(("all sources", &st.total))
        .chain(st.sources.iter().map(|(k, v)| (k.as_str(), v)))
        .collect();
    h.push_str("<div class=\"wrap\"><table id=\"percentiles\"><tr><th>source · statistic</th><th>count</th><th>min</th><th>p50</th><th>p90</th><th>p99</th><th>max</th><th>mean</th></tr>");
    for (name, s) in &entries {
        percentile_row(
            h,
            &format!("{name} · tokens per row"),
            &format!("{name}/seq_len"),
            &s.seq_len,
        );
        percentile_row(
            h,
            &format!("{name} · supervised per row"),
            &format!("{name}/supervised_per_row"),
            &s.supervised_per_row,
        );
        if let Some(t) = &s.turns {
            percentile_row(
                h,
                &format!("{name} · turns per conversation"),
                &format!("{name}/turns"),
                t,
            );
        }
        if let Some(t) = &s.tool_calls {
            percentile_row(
                h,
                &format!("{name} · tool calls per conversation"),
                &format!("{name}/tool_calls"),
                t,
            );
        }
    }
    h.push_str("</table></div>\n");
    for (name, s) in &entries {
        let _ = write!(h, "<h3>{}</h3><div class=\"grid\">", esc(name));
        let mut figs = vec![
            ("tokens per row", &s.seq_len, RGBColor(59, 111, 216)),
            (
                "supervised tokens per row",
                &s.supervised_per_row,
                RGBColor(46, 160, 110),
            ),
        ];
        if let Some(t) = &s.turns {
            figs.push(("turns per conversation", t, RGBColor(224, 138, 44)));
        }
        if let Some(t) = &s.tool_calls {
            figs.push(("tool calls per conversation", t, RGBColor(150, 90, 200)));
        }
        for (title, hist, color) in figs {
            let _ = write!(
                h,
                "<figure>{}<figcaption>{} — p50 {}, p90 {}, p99 {}, max {}</figcaption></figure>",
                histogram_svg(&format!("{name}: {title}"), hist, color),
                esc(title),
                n(hist.p50),
                n(hist.p90),
                n(hist.p99),
                n(hist.max)
            );
        }
        h.push_str("</div>\n");
    }
}

fn reasons(h: &mut String, m: &Value, rejects: &Examples, filtered: &Examples) {
    let empty = Map::new();
    let sources = m
        .get("sources")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    // Every reason with its count, per source (in the manifest's order) and over all of them.
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    // (source, rows read, its reasons)
    type Reasons = Vec<(String, u64)>;
    let mut by_source: Vec<(&String, u64, Reasons)> = Vec::new();
    for (name, s) in sources {
        let mut own: Vec<(String, u64)> = Vec::new();
        for kind in ["rejected", "filtered"] {
            if let Some(o) = s.get(kind).and_then(Value::as_object) {
                for (k, v) in o {
                    own.push((format!("{kind}: {k}"), v.as_u64().unwrap_or(0)));
                }
            }
        }
        if let Some(v) = s
            .get("deduplicated")
            .and_then(Value::as_u64)
            .filter(|&v| v > 0)
        {
            own.push(("deduplicated".into(), v));
        }
        own.extend(extra_counts(s).into_iter().filter(|&(_, v)| v > 0));
        own.retain(|&(_, v)| v > 0);
        for (k, v) in &own {
            *by.entry(k.clone()).or_default() += v;
        }
        own.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        by_source.push((name, num(s, "read"), own));
    }
    h.push_str("<h2>Why rows were dropped</h2>");
    if by.is_empty() {
        h.push_str("<p class=\"muted\">No row was dropped.</p>");
    } else {
        let mut rows: Vec<(String, u64)> = by.into_iter().collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        bar_table(h, "reasons", rows);
        h.push_str("<h3>By source</h3><p class=\"muted small\">Each reason's rows and their share of the rows the source read.</p><table id=\"reasons-by-source\"><tr><th>source</th><th>reason</th><th>rows</th><th>of read</th></tr>");
        for (name, read, own) in &by_source {
            for (reason, v) in own {
                let _ = write!(
                    h,
                    "<tr data-source=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td></tr>",
                    esc(name),
                    esc(name),
                    esc(reason),
                    n(*v),
                    *v as f64 * 100.0 / (*read).max(1) as f64
                );
            }
        }
        h.push_str("</table>\n");
    }
    for (title, file, ex) in [
        ("Rejected rows", "rejects.jsonl", rejects),
        ("Filtered rows", "filtered.jsonl", filtered),
    ] {
        if ex.by_reason.is_empty() {
            continue;
        }
        let _ = write!(
            h,
            "<h3>{title}: examples</h3><p class=\"muted small\">The first {EXAMPLES_PER_REASON} lines per reason of <code>{file}</code>, cut at {EXAMPLE_CHARS} characters; beside each, what failed: the text the filter judged, the kept row it duplicates, the benchmark item, or the field's value the reject names.</p>"
        );
        for (reason, lines) in &ex.by_reason {
            let _ = write!(
                h,
                "<div data-reason=\"{}\"><b>{}</b>",
                esc(reason),
                esc(reason)
            );
            for line in lines {
                let _ = write!(
                    h,
                    "<div class=\"drop\"><pre>{}</pre>",
                    esc(&truncate(line, EXAMPLE_CHARS))
                );
                if let Some((label, text)) = failing_text(line) {
                    let _ = write!(
                        h,
                        "<div><span class=\"muted small\">{}</span><pre class=\"failing\">{}</pre></div>",
                        esc(&label),
                        esc(&truncate(&text, EXAMPLE_CHARS))
                    );
                }
                h.push_str("</div>");
            }
            h.push_str("</div>");
        }
    }
}

/// What made a side file's line drop its row, as (a label, the text): the text a filter judged
/// (`text`), the kept row it duplicates (`duplicate_of`), the benchmark item it shares text
/// with, or for a reject the value its message names (`` `FIELD` is `VALUE` ``: FIELD, VALUE),
/// else the message itself.
fn failing_text(line: &str) -> Option<(String, String)> {
    let record: Value = serde_json::from_str(line).ok()?;
    let field = |k: &str| record.get(k).and_then(Value::as_str);
    let benchmark = field("benchmark").zip(field("item"));
    if let Some(text) = field("text") {
        let label = match benchmark {
            // A contaminated row: the passage it shares with the item, in context.
            Some((benchmark, item)) => format!("shares with {benchmark} {item}"),
            None => "judged text".to_owned(),
        };
        return Some((label, text.to_owned()));
    }
    if let Some(of) = field("duplicate_of") {
        return Some(("kept twin".to_owned(), of.to_owned()));
    }
    if let Some((benchmark, item)) = benchmark {
        return Some(("benchmark item".to_owned(), format!("{benchmark} {item}")));
    }
    let message = field("message")?;
    // `messages[0].role` is `developer`; ...: the field and its value.
    let named = message
        .strip_prefix('`')
        .and_then(|rest| rest.split_once("` is `"))
        .and_then(|(name, rest)| Some((name, rest.split_once('`')?.0)));
    Some(match named {
        Some((name, value)) => (name.to_owned(), value.to_owned()),
        None => ("message".to_owned(), message.to_owned()),
    })
}

fn inputs(h: &mut String, m: &Value) {
    h.push_str("<h2>Inputs and settings</h2>");
    let inputs = m.get("inputs");
    h.push_str("<table id=\"inputs\"><tr><th>input</th><th>bytes</th><th style=\"text-align:left\">sha256</th></tr>");
    for key in ["pipeline_sha256", "template_sha256", "tokenizer_sha256"] {
        if let Some(sha) = inputs.and_then(|i| i.get(key)).and_then(Value::as_str) {
            let _ = write!(
                h,
                "<tr><td>{}</td><td></td><td style=\"text-align:left\"><code>{}</code></td></tr>",
                esc(key.trim_end_matches("_sha256")),
                esc(sha)
            );
        }
    }
    for list in ["hub", "files"] {
        for f in inputs
            .and_then(|i| i.get(list))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let label = match (f.get("source"), f.get("repo")) {
                (Some(s), _) => format!(
                    "{}: {}",
                    s.as_str().unwrap_or(""),
                    f.get("path").and_then(Value::as_str).unwrap_or("")
                ),
                (None, Some(r)) => format!(
                    "{}@{} {}",
                    r.as_str().unwrap_or(""),
                    f.get("commit").and_then(Value::as_str).unwrap_or(""),
                    f.get("path").and_then(Value::as_str).unwrap_or("")
                ),
                _ => f.to_string(),
            };
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td style=\"text-align:left\"><code>{}</code></td></tr>",
                esc(&label),
                n(num(f, "bytes")),
                esc(f.get("sha256").and_then(Value::as_str).unwrap_or(""))
            );
        }
    }
    h.push_str("</table>");
    if let Some(settings) = m.get("settings").and_then(Value::as_object) {
        h.push_str("<h3>Settings</h3><table id=\"settings\">");
        for (k, v) in settings {
            let _ = write!(
                h,
                "<tr><td>{}</td><td style=\"text-align:left\"><code>{}</code></td></tr>",
                esc(k),
                esc(&truncate(&v.to_string(), 400))
            );
        }
        h.push_str("</table>");
    }
    for key in ["encoder", "renderer"] {
        if let Some(v) = m.get(key) {
            let _ = write!(
                h,
                "<p class=\"small\"><b>{key}</b>: <code>{}</code></p>",
                esc(&truncate(&v.to_string(), 600))
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escapes_and_shows_unknown_counts_by_name() {
        assert_eq!(
            esc("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
        assert_eq!(n(1234567), "1\u{202f}234\u{202f}567");
        assert_eq!(truncate("héllo", 2), "hé…");
        let m = json!({
            "name": "<x>", "rows": 3, "tokens": 30, "supervised_tokens": 12,
            "sources": {"a": {"read": 5, "kept": 2, "rejected": {"template": 1},
                              "filtered": {}, "deduplicated": 1, "near_duplicate": 1,
                              "rows": 3, "tokens": 30, "supervised_tokens": 12}},
            "shards": [{}],
        });
        let page = render(
            &m,
            None,
            &Examples::default(),
            &Examples::default(),
            None,
            &[],
        );
        assert!(page.contains("<h1>&lt;x&gt;</h1>"));
        assert!(page.contains("<th>near duplicate</th>"));
        assert!(page.contains("<td data-key=\"near_duplicate\">1</td>"));
        assert!(page.contains("<div class=\"v\" id=\"total-rows\">3</div>"));
        assert!(!page.contains("<script"));
    }

    #[test]
    fn a_mix_section_and_conversation_statistics_are_shown() {
        let mut st = crate::report::stats::DatasetStats::new(vec!["a".into()], 8);
        st.add_row(0, &[1, 2, 3], &[0, 1, 1]);
        st.add_conversation(0, 4, 2);
        let m = json!({
            "rows": 1, "sources": {"a": {"read": 1, "kept": 1, "rows": 1}},
            "mix": {"target": "rows", "total": 1,
                    "sources": {"a": {"weight": 1.0, "quota": 1, "realized": 1}}},
        });
        let page = render(
            &m,
            Some(&st.file()),
            &Examples::default(),
            &Examples::default(),
            None,
            &[],
        );
        assert!(page.contains("<table id=\"mix\">"));
        assert!(page.contains("<td data-key=\"quota\">1</td>"));
        assert!(page.contains("target: <b>rows</b>"));
        assert!(page.contains("data-stat=\"a/turns\""));
        assert!(page.contains("data-stat=\"a/tool_calls\""));
        assert!(page.contains("a: tool calls per conversation"));
    }

    #[test]
    fn each_drop_example_shows_what_failed_beside_it() {
        let reject = r#"{"source":"chat","row":23,"reason":"unknown_role","message":"`messages[0].role` is `developer`; expected system, user, assistant or tool"}"#;
        assert_eq!(
            failing_text(reject),
            Some(("messages[0].role".to_owned(), "developer".to_owned()))
        );
        let plain =
            r#"{"reason":"no_assistant_turn","message":"the conversation has no assistant turn"}"#;
        assert_eq!(
            failing_text(plain),
            Some((
                "message".to_owned(),
                "the conversation has no assistant turn".to_owned()
            ))
        );
        let regex = r#"{"reason":"refusals","message":"matches exclude pattern `x`","text":"Sorry. <As an AI language model>, I can't."}"#;
        assert_eq!(
            failing_text(regex),
            Some((
                "judged text".to_owned(),
                "Sorry. <As an AI language model>, I can't.".to_owned()
            ))
        );
        let twin = r#"{"reason":"near_duplicate","duplicate_of":"curation:0:24"}"#;
        assert_eq!(
            failing_text(twin),
            Some(("kept twin".to_owned(), "curation:0:24".to_owned()))
        );
        let item = r#"{"reason":"contaminated","benchmark":"humaneval","item":"HumanEval/0"}"#;
        assert_eq!(
            failing_text(item),
            Some((
                "benchmark item".to_owned(),
                "humaneval HumanEval/0".to_owned()
            ))
        );
        let shared = r#"{"reason":"contaminated","benchmark":"humaneval","item":"HumanEval/0","text":"…def has_close_elements(numbers: List[float], <b>"}"#;
        assert_eq!(
            failing_text(shared),
            Some((
                "shares with humaneval HumanEval/0".to_owned(),
                "…def has_close_elements(numbers: List[float], <b>".to_owned()
            ))
        );
        // In the page: beside its line, escaped.
        let mut filtered = Examples::default();
        filtered
            .by_reason
            .insert("refusals".to_owned(), vec![regex.to_owned()]);
        filtered
            .by_reason
            .insert("contaminated".to_owned(), vec![shared.to_owned()]);
        let mut h = String::new();
        reasons(
            &mut h,
            &serde_json::json!({"sources": {}}),
            &Examples::default(),
            &filtered,
        );
        assert!(
            h.contains(
                "<pre class=\"failing\">Sorry. &lt;As an AI language model&gt;, I can&#39;t.</pre>"
            ),
            "{h}"
        );
        assert!(
            h.contains("<span class=\"muted small\">judged text</span>"),
            "{h}"
        );
        assert!(
            h.contains("<span class=\"muted small\">shares with humaneval HumanEval/0</span><pre class=\"failing\">…def has_close_elements(numbers: List[float], &lt;b&gt;</pre>"),
            "{h}"
        );
    }

    #[test]
    fn example_reading_is_bounded_per_reason_and_per_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rejects.jsonl");
        let mut text = String::new();
        for i in 0..10 {
            text.push_str(&format!("{{\"reason\": \"a\", \"row\": {i}}}\n"));
        }
        text.push_str(&format!(
            "{{\"reason\": \"long\", \"m\": \"{}\"}}\n",
            "x".repeat(3 << 20)
        ));
        text.push_str("not json\n{\"filtered\": \"b\", \"row\": 1}\n");
        std::fs::write(&path, text).expect("write");
        let ex = Examples::read(&path);
        assert_eq!(ex.by_reason["a"].len(), EXAMPLES_PER_REASON);
        assert!(!ex.by_reason.contains_key("long"));
        assert_eq!(ex.by_reason["b"], vec!["{\"filtered\": \"b\", \"row\": 1}"]);
        assert!(Examples::read(&dir.path().join("missing"))
            .by_reason
            .is_empty());
    }
}
