//! `chatshards fetch PIPELINE.yaml`: everything the pipeline reads from the Hub, into the
//! Hugging Face cache — exactly what `PIPELINE.lock` pins, or the current revisions when there
//! is no lockfile — so that `build` afterwards needs no network (`HF_HUB_OFFLINE=1` works).

use crate::hub::{self, FetchProgress, Hub, HubError, Lockfile, ResolvedFile};
use crate::printer::Printer;
use anyhow::Result;
use indicatif::{HumanBytes, MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

pub struct FetchArgs {
    pub pipeline: PathBuf,
}

pub fn run(args: &FetchArgs, printer: &Printer) -> Result<()> {
    let pipeline = args.pipeline.as_path();
    let fail = |error: HubError| hinted(error, pipeline);
    let specs = hub::hub_specs_of(pipeline).map_err(fail)?;
    if specs.is_empty() {
        printer.info(&format!(
            "`{}` reads nothing from the Hub: nothing to fetch",
            pipeline.display()
        ));
        return Ok(());
    }
    let hub = Hub::from_env().map_err(fail)?;
    let lock_path = Lockfile::path_for(pipeline);
    let lock = if lock_path.exists() {
        let lock = Lockfile::read(&lock_path).map_err(fail)?;
        lock.check(&specs)
            .map_err(|error| fail(with_lock_path(error, &lock_path)))?;
        Some(lock)
    } else {
        None
    };

    let bars = FetchBars::new(printer);
    let mut files: Vec<ResolvedFile> = Vec::new();
    for spec in hub::merge_specs(&specs) {
        let fetched = match &lock {
            Some(lock) => hub.fetch_locked(&spec, lock, &bars),
            None => hub.resolve(&spec, &bars),
        };
        match fetched {
            Ok(fetched) => files.extend(fetched),
            Err(error) => {
                bars.clear();
                return Err(fail(error));
            }
        }
    }
    bars.clear();

    let downloaded = bars.downloaded_files.load(Ordering::Relaxed);
    let bytes = bars.downloaded_bytes.load(Ordering::Relaxed);
    printer.info(&format!(
        "Fetched {} files ({} downloaded, {} already cached, {}) into `{}`",
        files.len(),
        downloaded,
        files.len() as u64 - downloaded.min(files.len() as u64),
        HumanBytes(bytes),
        hub.config().cache_dir.display()
    ));
    if lock.is_none() {
        printer.info(&format!(
            "note: no lockfile, so these are the revisions' current commits; run `chatshards lock {}` to pin them",
            pipeline.display()
        ));
    }
    Ok(())
}

/// Fills in which lockfile a staleness error is about.
pub(crate) fn with_lock_path(error: HubError, path: &Path) -> HubError {
    match error {
        HubError::StaleLock { reasons, .. } => HubError::StaleLock {
            path: Some(path.to_owned()),
            reasons,
        },
        other => other,
    }
}

/// The error, its causes, and what to do, as one message (the `hint:` goes last, after the
/// causes, as uv prints it).
pub(crate) fn hinted(error: HubError, pipeline: &Path) -> anyhow::Error {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        message.push_str(&format!("\n  caused by: {cause}"));
        source = cause.source();
    }
    if let Some(hint) = error.hint_for(Some(pipeline)) {
        message.push_str(&format!("\n\nhint: {hint}"));
    }
    anyhow::anyhow!(message)
}

/// One bar per file being downloaded; a line per finished download.
pub(crate) struct FetchBars {
    multi: MultiProgress,
    printer: Printer,
    bars: Mutex<HashMap<String, ProgressBar>>,
    style: Option<ProgressStyle>,
    pub(crate) downloaded_files: AtomicU64,
    pub(crate) downloaded_bytes: AtomicU64,
}

impl FetchBars {
    pub(crate) fn new(printer: &Printer) -> Self {
        let target = if printer.progress_enabled() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let style = ProgressStyle::with_template(
            "{prefix:.bold} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .ok()
        .map(|style| style.progress_chars("=> "));
        FetchBars {
            multi: MultiProgress::with_draw_target(target),
            printer: *printer,
            bars: Mutex::new(HashMap::new()),
            style,
            downloaded_files: AtomicU64::new(0),
            downloaded_bytes: AtomicU64::new(0),
        }
    }

    pub(crate) fn clear(&self) {
        if let Ok(mut bars) = self.bars.lock() {
            for (_, bar) in bars.drain() {
                bar.finish_and_clear();
            }
        }
        let _ = self.multi.clear();
    }
}

impl FetchProgress for FetchBars {
    fn download_started(&self, label: &str, size: u64, resumed_from: u64) {
        let bar = self.multi.add(ProgressBar::new(size));
        if let Some(style) = &self.style {
            bar.set_style(style.clone());
        }
        bar.set_prefix(label.to_owned());
        bar.set_position(resumed_from);
        if let Ok(mut bars) = self.bars.lock() {
            if let Some(old) = bars.insert(label.to_owned(), bar) {
                old.finish_and_clear();
            }
        }
    }

    fn downloaded(&self, label: &str, bytes: u64) {
        self.downloaded_bytes.fetch_add(bytes, Ordering::Relaxed);
        if let Ok(bars) = self.bars.lock() {
            if let Some(bar) = bars.get(label) {
                bar.inc(bytes);
            }
        }
    }

    fn file_ready(&self, file: &ResolvedFile, downloaded: bool) {
        if !downloaded {
            return;
        }
        self.downloaded_files.fetch_add(1, Ordering::Relaxed);
        let label = format!("{}/{}", file.repo, file.path);
        if let Ok(mut bars) = self.bars.lock() {
            if let Some(bar) = bars.remove(&label) {
                bar.finish_and_clear();
            }
        }
        let line = format!(
            "Downloaded {} {label} ({})",
            file.kind,
            HumanBytes(file.size)
        );
        self.multi.suspend(|| self.printer.info(&line));
    }
}
