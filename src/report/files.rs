//! The files a build writes beside the shards from its statistics (`stats.json`, the
//! token-frequency files, `report.html`), and the dataset files they are read back from.

use super::html::{self, Examples};
use super::stats::{DatasetStats, StatsFile};
use super::token_freq;
use anyhow::{Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Token counts over supervised positions, in speculators' format and under its file name.
pub const TOKEN_FREQ: &str = "token_freq.pt";
/// The same over every position.
pub const TOKEN_FREQ_ALL: &str = "token_freq_all.pt";
pub const STATS: &str = "stats.json";

/// Writes `stats.json` and the two token-frequency files into a dataset directory.
pub fn write_stats_files(dir: &Path, stats: &DatasetStats) -> Result<()> {
    let path = dir.join(STATS);
    let text = crate::model::digest::pretty(&serde_json::to_value(stats.file())?);
    crate::model::nofollow::write(&path, text.as_bytes())
        .with_context(|| format!("failed to write `{}`", path.display()))?;
    token_freq::write_pt(&dir.join(TOKEN_FREQ), stats.token_freq_supervised())?;
    token_freq::write_pt(&dir.join(TOKEN_FREQ_ALL), stats.token_freq_all())?;
    Ok(())
}

/// Reads `manifest.json` (as JSON, so fields added later show up) and `stats.json`, if any.
pub fn load(dir: &Path) -> Result<(Value, Option<StatsFile>)> {
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "failed to read `{}`: is `{}` a chatshards dataset?",
            path.display(),
            dir.display()
        )
    })?;
    let manifest: Value = serde_json::from_str(&text)
        .with_context(|| format!("`{}` is not valid JSON", path.display()))?;
    let path = dir.join(STATS);
    let stats =
        if path.exists() {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("failed to read `{}`", path.display()))?;
            Some(serde_json::from_str(&text).with_context(|| {
                format!("`{}` is not a stats file of this version", path.display())
            })?)
        } else {
            None
        };
    Ok((manifest, stats))
}

pub const REPORT: &str = "report.html";

/// The filters of the pipeline copy in `dir` (the manifest's `pipeline.copy`), each as (the
/// sources it runs on, its name, its kind and parameters as compact JSON), in the order they
/// run: the global ones, then each source's own. Empty when there is no readable copy.
fn filter_settings(dir: &Path, manifest: &Value) -> Vec<html::FilterRow> {
    let Some(copy) = manifest["pipeline"]["copy"].as_str() else {
        return Vec::new();
    };
    let Ok(bytes) = std::fs::read(dir.join(copy)) else {
        return Vec::new();
    };
    let Ok(pipeline) = serde_yaml_ng::from_slice::<Value>(&bytes) else {
        return Vec::new();
    };
    let rows = |applies: &str, list: &Value| -> Vec<html::FilterRow> {
        let Some(list) = list.as_array() else {
            return Vec::new();
        };
        list.iter()
            .filter_map(Value::as_object)
            .flat_map(|f| f.iter())
            .map(|(kind, params)| {
                let mut params = params.clone();
                let name = params
                    .as_object_mut()
                    .and_then(|p| p.shift_remove("name"))
                    .and_then(|n| n.as_str().map(str::to_owned))
                    .unwrap_or_else(|| kind.clone());
                html::FilterRow {
                    applies: applies.to_owned(),
                    name,
                    parameters: format!("{kind} {params}"),
                }
            })
            .collect()
    };
    let mut out = rows("every source", &pipeline["filters"]);
    for source in pipeline["sources"].as_array().into_iter().flatten() {
        let name = source["name"].as_str().unwrap_or("");
        out.extend(rows(name, &source["filters"]));
    }
    out
}

/// Example rows shown per source.
pub const EXAMPLE_ROWS: usize = 2;
/// Shard rows looked through for them: a source with fewer rows in the first ones than that
/// shows fewer examples, and a large dataset costs a bounded read.
const EXAMPLE_SCAN_ROWS: usize = 20_000;

/// The first [`EXAMPLE_ROWS`] rows of each source in the shards (in shard order), decoded
/// into spans of text with their loss mask, when the dataset was tokenized with the built-in
/// Qwen3.6 tokenizer (the only one a report can decode without being told); else `None`.
fn example_rows(
    dir: &Path,
    manifest: &Value,
    given: Option<&crate::tokenize::TokenBytes>,
) -> Option<Vec<html::ExampleRow>> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int8Type};
    let embedded = crate::model::digest::sha256_hex(crate::model::embedded::TOKENIZER_ZST);
    if manifest["inputs"]["tokenizer_sha256"].as_str() != Some(embedded.as_str()) {
        return None;
    }
    let loaded;
    let vocab = match given {
        Some(vocab) => vocab,
        None => {
            loaded = crate::tokenize::Tokenizer::embedded_token_bytes().ok()?;
            &loaded
        }
    };
    let sources: Vec<&String> = manifest["sources"].as_object()?.keys().collect();
    let mut found: Vec<html::ExampleRow> = Vec::new();
    let mut seen = 0;
    let shards = manifest["shards"].as_array()?;
    'shards: for shard in shards {
        let name = shard["file"].as_str()?;
        let file = std::fs::File::open(dir.join(name)).ok()?;
        let reader = arrow_ipc::reader::StreamReader::try_new(file, None).ok()?;
        for batch in reader {
            let batch = batch.ok()?;
            let column = |name: &str| batch.column_by_name(name).cloned();
            let (ids, mask) = (column("input_ids")?, column("loss_mask")?);
            let (ids, mask) = (ids.as_list_opt::<i32>()?, mask.as_list_opt::<i32>()?);
            let (sample, source) = (column("sample_id")?, column("source")?);
            let (sample, source) = (
                sample.as_string_opt::<i32>()?,
                source.as_string_opt::<i32>()?,
            );
            for i in 0..batch.num_rows() {
                seen += 1;
                let name = source.value(i);
                if found.iter().filter(|r| r.source == name).count() < EXAMPLE_ROWS {
                    let row_ids = ids.value(i);
                    let row_mask = mask.value(i);
                    // A bool mask reads as not supervised: the spans then show plain text.
                    let row_mask = row_mask.as_primitive_opt::<Int8Type>();
                    let row_ids = row_ids.as_primitive_opt::<Int32Type>()?.values();
                    let mut spans: Vec<(String, bool)> = Vec::new();
                    let mut start = 0;
                    let on = |k: usize| row_mask.is_some_and(|m| m.values().get(k) == Some(&1));
                    for k in 1..=row_ids.len() {
                        if k == row_ids.len() || on(k) != on(start) {
                            let bytes: Vec<u8> = row_ids[start..k]
                                .iter()
                                .flat_map(|&id| vocab.get(id as u32).iter().copied())
                                .collect();
                            spans.push((String::from_utf8_lossy(&bytes).into_owned(), on(start)));
                            start = k;
                        }
                    }
                    found.push(html::ExampleRow {
                        source: name.to_owned(),
                        sample_id: sample.value(i).to_owned(),
                        spans,
                    });
                }
                let complete = sources
                    .iter()
                    .all(|s| found.iter().filter(|r| &r.source == *s).count() >= EXAMPLE_ROWS);
                if complete || seen >= EXAMPLE_SCAN_ROWS {
                    break 'shards;
                }
            }
        }
    }
    // In the manifest's source order, then shard order.
    found.sort_by_key(|r| sources.iter().position(|s| **s == r.source));
    Some(found)
}

/// Writes `dir/report.html`; returns its path.
pub fn write_report(dir: &Path) -> Result<PathBuf> {
    write_report_with(dir, None)
}

/// [`write_report`], given the built-in tokenizer's token bytes when the caller has them (a
/// build that used it: loading them again was ~0.15 s at the end of every build).
pub fn write_report_with(
    dir: &Path,
    vocab: Option<&crate::tokenize::TokenBytes>,
) -> Result<PathBuf> {
    let (manifest, stats) = load(dir)?;
    let rejects = Examples::read(&dir.join("rejects.jsonl"));
    let filtered = Examples::read(&dir.join("filtered.jsonl"));
    let examples = example_rows(dir, &manifest, vocab);
    let page = html::render(
        &manifest,
        stats.as_ref(),
        &rejects,
        &filtered,
        examples.as_deref(),
        &filter_settings(dir, &manifest),
    );
    let path = dir.join(REPORT);
    crate::model::nofollow::write(&path, page.as_bytes())
        .with_context(|| format!("failed to write `{}`", path.display()))?;
    Ok(path)
}
