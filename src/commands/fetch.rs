//! `chatshards fetch PIPELINE.yaml`: everything the pipeline reads from the Hub, into the
//! Hugging Face cache — exactly what `PIPELINE.lock` pins, or the current revisions when there
//! is no lockfile — so that `build` afterwards needs no network (`HF_HUB_OFFLINE=1` works).

use crate::engine::progress::FetchBars;
use crate::hub::{self, Hub, HubError, Lockfile, ResolvedFile};
use crate::printer::Printer;
use anyhow::Result;
use indicatif::HumanBytes;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

pub struct FetchArgs {
    pub pipeline: PathBuf,
}

pub fn run(args: &FetchArgs, printer: &Printer) -> Result<()> {
    let pipeline = args.pipeline.as_path();
    let fail = |error: HubError| anyhow::anyhow!(error.explained(pipeline));
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
            .map_err(|error| fail(error.with_lock_path(&lock_path)))?;
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
