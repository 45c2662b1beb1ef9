//! `chatshards report DIR`: (re)writes `DIR/report.html` from `manifest.json`, `stats.json` and
//! examples from `rejects.jsonl` / `filtered.jsonl`; a build writes it the same way.

use crate::printer::Printer;
use crate::report::html::{self, Examples};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

pub const REPORT: &str = "report.html";

/// Writes `dir/report.html`; returns its path.
pub fn write_report(dir: &Path) -> Result<PathBuf> {
    let (manifest, stats) = crate::commands::stats::load(dir)?;
    let rejects = Examples::read(&dir.join("rejects.jsonl"));
    let filtered = Examples::read(&dir.join("filtered.jsonl"));
    let page = html::render(&manifest, stats.as_ref(), &rejects, &filtered);
    let path = dir.join(REPORT);
    crate::write::nofollow::write(&path, page.as_bytes())
        .with_context(|| format!("failed to write `{}`", path.display()))?;
    Ok(path)
}

pub fn run(dir: &Path, printer: &Printer) -> Result<()> {
    let path = write_report(dir)?;
    printer.info(&format!("wrote `{}`", path.display()));
    Ok(())
}
