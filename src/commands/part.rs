//! `chatshards build PIPELINE.yaml --part I/N`: one part of a partitioned build (see
//! [`crate::engine::partition`]).

use crate::engine::partition::{self, PartSpec, PartWriter};
use crate::engine::session::{processor, resume_key};
use crate::engine::{self, NoProgress};
use crate::plan::{self, HubAccess};
use crate::printer::Printer;
use crate::report::timings::Timings;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

pub struct PartArgs {
    pub pipeline: PathBuf,
    pub part: PartSpec,
    pub parts_dir: Option<PathBuf>,
    pub threads: Option<usize>,
    pub locked: bool,
}

pub fn run(args: &PartArgs, printer: &Printer) -> Result<()> {
    let started = Instant::now();
    let access = HubAccess::locked_if(args.locked);
    let mut plan = plan::compile(&args.pipeline, access)?;
    let dir = args
        .parts_dir
        .clone()
        .unwrap_or_else(|| partition::default_parts_dir(&plan.output_dir));
    let key = resume_key(&plan, None)?;
    let shares = partition::shares(&plan, args.part)?;
    plan.read_options.sample = Some(Arc::new(shares));
    let (processor, _) = processor(&plan)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads.unwrap_or(0))
        .build()
        .context("failed to start the thread pool")?;
    let part = args.part;
    let mut writer = PartWriter::create(&dir, part, &key)
        .with_context(|| format!("failed to create `{}`", part.path(&dir).display()))?;
    let timings = Timings::default();
    engine::scan_part(&plan, &processor, &NoProgress, &pool, &timings, &mut writer)?;
    let (path, rows) = writer
        .finish()
        .with_context(|| format!("failed to write `{}`", part.path(&dir).display()))?;
    printer.info(&format!(
        "part {}/{}: {rows} rows scanned into `{}` in {:.1}s",
        part.index,
        part.count,
        path.display(),
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}
