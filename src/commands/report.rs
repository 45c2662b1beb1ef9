//! `chatshards report DIR`: (re)writes `DIR/report.html` from `manifest.json`, `stats.json` and
//! examples from `rejects.jsonl` / `filtered.jsonl`; a build writes it the same way.

use crate::printer::Printer;
pub use crate::report::files::{write_report, REPORT};
use anyhow::Result;
use std::path::Path;

pub fn run(dir: &Path, printer: &Printer) -> Result<()> {
    let path = write_report(dir)?;
    printer.info(&format!("wrote `{}`", path.display()));
    Ok(())
}
