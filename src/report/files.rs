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

/// Writes `dir/report.html`; returns its path.
pub fn write_report(dir: &Path) -> Result<PathBuf> {
    let (manifest, stats) = load(dir)?;
    let rejects = Examples::read(&dir.join("rejects.jsonl"));
    let filtered = Examples::read(&dir.join("filtered.jsonl"));
    let page = html::render(&manifest, stats.as_ref(), &rejects, &filtered);
    let path = dir.join(REPORT);
    crate::model::nofollow::write(&path, page.as_bytes())
        .with_context(|| format!("failed to write `{}`", path.display()))?;
    Ok(path)
}
