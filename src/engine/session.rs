//! A build from start to end: the output directory (staging, resume), the journal, the passes
//! ([`crate::engine::run_journaled`]) into the spill and the side files, then the shards, the
//! dataset files, the manifest with the build's identity, and the report. `build` and `merge`
//! (and `verify --rebuild`) are this with different [`BuildArgs`].

use crate::engine::journal::{InputStamp, Journal, ResumeKey};
use crate::engine::progress::BuildProgress;
use crate::engine::row_path::RowProcessor;
use crate::engine::{self, Sinks};
use crate::model::digest::{hash_file_checked, Checks};
use crate::plan::config::{LengthPolicy, RenderPolicy};
use crate::plan::{self, HubAccess, Plan};
use crate::printer::Printer;
use crate::render::Renderer;
use crate::report::stats::DatasetStats;
use crate::report::timings::{Phase, Timings};
use crate::report::{summary_table, SourceStats};
use crate::tokenize::{Backend, BackendReport, Tokenizer};
use crate::validate::Validator;
use crate::write::identity::{self, Identity, IdentityInput, InputKind};
use crate::write::manifest::{
    Encoder, FileSummary, HubInput, InputFile, Inputs, LockRecord, Manifest, PipelineRecord,
    Settings, Tool, LOCK_COPY, PIPELINE_COPY,
};
use crate::write::{self, Spill};
use anyhow::{bail, Context, Result};
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub struct BuildArgs {
    pub pipeline: PathBuf,
    pub threads: Option<usize>,
    pub locked: bool,
    /// Print the CPU time by stage at the end.
    pub timings: bool,
    /// Write here instead of the pipeline's `output.dir` (`verify --rebuild`).
    pub output: Option<PathBuf>,
    /// Discard an interrupted build's state instead of going on from it.
    pub fresh: bool,
    /// A merge: the parts directory and the part count (the scans replay the parts).
    pub merge: Option<(Option<PathBuf>, usize)>,
    /// Print every column of the summary, not only those that fit 80 columns.
    pub wide: bool,
}

pub fn run(args: &BuildArgs, printer: &Printer) -> Result<()> {
    let started = Instant::now();
    let access = HubAccess::locked_if(args.locked);
    let mut plan = plan::compile(&args.pipeline, access)?;
    if let Some(output) = &args.output {
        plan.output_dir = output.clone();
    }
    // Always measured (a few clock reads per batch); printed with `--timings`.
    let timings = Timings::default();
    build(&plan, args, printer, started, &timings)
}

/// The sources that kept less than their `min_keep`, with examples from the side outputs.
pub fn source_losses(
    plan: &Plan,
    stats: &[(String, SourceStats)],
    side_outputs: &[&Path],
) -> Vec<crate::report::loss::Loss> {
    use crate::report::loss::{self, Examples, SourceFacts};
    let failing = |i: usize, s: &SourceStats| {
        let facts = SourceFacts {
            name: plan.sources[i].name.clone(),
            min_keep: plan.sources[i].min_keep,
            ..SourceFacts::default()
        };
        loss::check(&facts, s, &Examples::default()).is_some()
    };
    if !stats.iter().enumerate().any(|(i, (_, s))| failing(i, s)) {
        return Vec::new();
    }
    // Only for a failing build: the side outputs are read back for one example per reason.
    let mut examples = Examples::default();
    for path in side_outputs {
        examples.add_file(path);
    }
    stats
        .iter()
        .enumerate()
        .filter(|(i, (_, s))| failing(*i, s))
        .filter_map(|(i, (_, s))| {
            let source = &plan.sources[i];
            let facts = SourceFacts {
                name: source.name.clone(),
                format: source.adapter.name().to_owned(),
                min_keep: source.min_keep,
                first_keys: loss::first_keys(&source.files),
            };
            loss::check(&facts, s, &examples)
        })
        .collect()
}

/// The build proper. The renderer and the tokenizer (~0.5 s) are loaded on a thread of their
/// own while the output directory is prepared, which for a merge or a resume starts with
/// hashing the inputs.
fn build(
    plan: &Plan,
    args: &BuildArgs,
    printer: &Printer,
    started: Instant,
    timings: &Timings,
) -> Result<()> {
    std::thread::scope(|scope| {
        let loading = std::thread::Builder::new()
            .name("load-tokenizer".to_owned())
            .spawn_scoped(scope, || processor(plan))
            .context("failed to start a thread")?;
        let loaded = move || match loading.join() {
            Ok(loaded) => loaded,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        build_with(plan, args, printer, started, timings, loaded)
    })
}

/// [`build`], given the processor's load.
fn build_with(
    plan: &Plan,
    args: &BuildArgs,
    printer: &Printer,
    started: Instant,
    timings: &Timings,
    loaded: impl FnOnce() -> Result<(RowProcessor, BackendReport)>,
) -> Result<()> {
    let threads = args.threads.unwrap_or(0);
    // Threads are named for `top -H` and the benches' per-thread samples.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("worker-{i}"))
        .build()
        .context("failed to start the thread pool")?;
    // The inputs are hashed as the build starts reading them, and again once it has read
    // them: the manifest's hashes are of the bytes the rows came from, and a resume compares
    // content, not sizes and times. Before the build only where it must compare them with an
    // interrupted build's; else beside its first pass.
    let out = &plan.output_dir;
    let hashed_now = std::cell::RefCell::new(None);
    let key_now = || -> Result<ResumeKey> {
        if hashed_now.borrow().is_none() {
            let files = pool.install(|| hash_inputs(&input_paths(plan)))?;
            *hashed_now.borrow_mut() = Some(files);
        }
        let hashed = hashed_now.borrow();
        let files: Option<Vec<InputFile>> = hashed
            .as_ref()
            .map(|h| h.iter().map(|(f, _)| f.clone()).collect());
        resume_key(plan, files.as_deref())
    };
    let parts = match &args.merge {
        Some((dir, count)) => {
            let dir = dir
                .clone()
                .unwrap_or_else(|| crate::engine::partition::default_parts_dir(out));
            // A part's key has sizes and times, not content (`commands::part`), so the
            // inputs are not hashed first to compare with it.
            Some(crate::engine::partition::Parts::open(
                &dir,
                *count,
                &resume_key(plan, None)?,
            )?)
        }
        None => None,
    };
    let resume = if args.fresh {
        engine::output::Resume::Fresh
    } else {
        engine::output::Resume::IfSame(&key_now)
    };
    let output = engine::output::Output::prepare(out, &placement(plan), resume)?;
    let hashes = match hashed_now.into_inner() {
        Some(hashed) => {
            let files: Vec<InputFile> = hashed.iter().map(|(f, _)| f.clone()).collect();
            InputHashes::known(resume_key(plan, Some(&files))?, hashed)
        }
        None => InputHashes::spawn(plan)?,
    };
    let staging = output.staging().to_owned();
    if output.finished() {
        return swap_finished(output, printer);
    }
    let work_dir = output.work_dir();
    let journal_dir = work_dir.join(engine::output::JOURNAL);
    // An interrupted build that cannot be gone on from is kept as it is and the build refused:
    // its recorded passes are never deleted unasked.
    let unreadable = |e: anyhow::Error| {
        if !output.resumed() {
            return e;
        }
        output.keep_staging();
        e.context(format!(
            "cannot go on from the interrupted build in `{}`, which is kept as it is; build with `--fresh` to discard it and start over",
            staging.display()
        ))
    };
    let mut journal = match hashes.known_key() {
        Some(key) => Journal::open(&journal_dir, key, segment_rows()?),
        None => Journal::open_deferred(&journal_dir, hashes.clone(), segment_rows()?),
    }
    .map_err(|e| unreadable(e.into()))?;
    let restored = journal.positions().map_err(|e| unreadable(e.into()))?;
    if restored.is_some() {
        printer.info(&format!(
            "resuming the interrupted build in `{}`: {} pass(es) and {} row(s) of the next are recorded and replayed",
            staging.display(),
            journal.recorded(),
            journal.recorded_rows()
        ));
    }
    for note in &plan.notes {
        printer.info(&format!("note: {note}"));
    }
    let (processor, backend) = loaded()?;
    printer.info(&format!("encoder: {backend}"));
    printer.info(&match processor.renderer.native() {
        Some(template) => format!(
            "renderer: native {template} template ({}% of rows re-rendered with minijinja to check it)",
            f64::from(plan.template.verify_basis_points) / 100.0
        ),
        None => "renderer: minijinja".to_owned(),
    });
    let progress = BuildProgress::new(printer, plan)?;
    let spill_dir = work_dir.join(engine::output::SPILL);
    let rejects_path = staging.join("rejects.jsonl");
    let filtered_path = staging.join("filtered.jsonl");
    // Hundreds of MB for a large build, never read back.
    let path = work_dir.join(engine::output::CONVERSATIONS);
    let resumed = |p: &Path| format!("failed to resume `{}`", p.display());
    if restored.is_none() && spill_dir.exists() {
        // Nothing recorded to go on from: what an interrupted build spilled goes.
        fs::remove_dir_all(&spill_dir)
            .with_context(|| format!("failed to remove `{}`", spill_dir.display()))?;
    }
    let (mut spill, mut rejects, mut filtered, mut conversations) = match &restored {
        None => (
            Spill::new(&spill_dir, plan.shuffle)?,
            create(&rejects_path)?,
            create(&filtered_path)?,
            write::OutputFile::create(&path)
                .with_context(|| format!("failed to create `{}`", path.display()))?,
        ),
        Some(at) => (
            Spill::resume(&spill_dir, plan.shuffle, &at.spill).map_err(|e| unreadable(e.into()))?,
            write::reopen_side_output(&rejects_path, at.rejects)
                .with_context(|| resumed(&rejects_path))
                .map_err(unreadable)?,
            write::reopen_side_output(&filtered_path, at.filtered)
                .with_context(|| resumed(&filtered_path))
                .map_err(unreadable)?,
            write::OutputFile::resume(&path, at.conversations)
                .with_context(|| resumed(&path))
                .map_err(unreadable)?,
        ),
    };
    // Scratch until the dataset is finished (and then synced with it): handed to the system
    // at checkpoints without waiting for the device, where a restart can be told apart.
    if engine::journal::boot_id().is_some() {
        spill.unsynced();
        conversations.unsynced();
    }
    // Part of the dataset (synced when it is finished), unlike the spill.
    conversations.early_writeback();
    // Hashed as it is written: the manifest's digest of the output's copy when it is the
    // same bytes (a hard link: no conversation left out).
    let (follower, publish) = write::follow::Follower::start(&path)
        .with_context(|| format!("failed to read `{}`", path.display()))?;
    conversations
        .publish_to(publish)
        .with_context(|| format!("failed to write `{}`", path.display()))?;
    // The committing thread copies rows into blocks; threads of their own write them (the
    // system's copy into the page cache was most of its time: BENCHMARKS.md).
    let writers = write::BlockWriters::start(block_writers(threads))
        .context("failed to start the writer threads")?;
    if let Some(writers) = &writers {
        conversations.write_behind(writers);
        spill.write_behind(Arc::clone(writers));
    }
    // stats.json: rows are counted as the shards are written, conversations (turns and tool
    // calls) from the settled selection.
    let mut row_stats = DatasetStats::new(
        plan.sources.iter().map(|s| s.name.clone()).collect(),
        processor.tokenizer.vocab_size_with_added(),
    );
    let mut sinks = Sinks {
        spill: &mut spill,
        rejects: &mut rejects,
        filtered: &mut filtered,
        conversations: &mut conversations,
    };
    timings.end_phase(Phase::StartUp);
    let run = engine::run_journaled(
        plan,
        &processor,
        &mut sinks,
        &progress,
        &pool,
        timings,
        &mut journal,
        parts,
    )?;
    rejects.flush().context("failed to write rejects.jsonl")?;
    filtered.flush().context("failed to write filtered.jsonl")?;
    conversations
        .flush()
        .context("failed to write conversations.jsonl")?;
    drop(conversations);
    let settled = run.settled;
    let run_regenerate = run.regenerate;
    let input_files = hashes.wait().map_err(anyhow::Error::msg)?.clone();
    let input_checks = hashes.checks();
    journal.write_key()?;
    // Written in the working directory (a resumed build goes on from it), copied into the
    // output without the conversations that were not selected.
    let final_conversations = staging.join("conversations.jsonl");
    write::copy_without_ranges(&path, &final_conversations, &settled.excluded_lines)
        .with_context(|| format!("failed to write `{}`", final_conversations.display()))?;
    let stats = settled.stats.clone();
    for &(source, turns, tool_calls) in &settled.conversations {
        row_stats.add_conversation(source, u64::from(turns), u64::from(tool_calls));
    }
    timings.end_phase(Phase::Rows);

    let named: Vec<(String, SourceStats)> = plan
        .sources
        .iter()
        .map(|s| s.name.clone())
        .zip(stats.iter().cloned())
        .collect();
    progress.suspend(|| {
        printer.info(&summary_table(&named, args.wide));
        if let Some(target) = &plan.mix {
            printer.info(&crate::report::mix_table(target, &settled.mix));
        }
    });
    for (name, s) in &named {
        if !s.balanced() {
            bail!("internal error: the accounting of source `{name}` does not balance: {s:?}");
        }
    }
    // No silent loss: a source below its `min_keep` fails the build, as does an empty one;
    // the rejects are kept beside the output, since they are the whole answer then.
    let losses = source_losses(
        plan,
        &named,
        &[rejects_path.as_path(), filtered_path.as_path()],
    );
    let total_rows = spill.rows() - settled.excluded_rows;
    if total_rows == 0 || !losses.is_empty() {
        let kept = output.keep_rejects()?;
        let head = if total_rows == 0 {
            format!(
                "no rows were kept, so no dataset was written; see `{}` for the reasons",
                kept.display()
            )
        } else {
            format!(
                "no dataset was written; every reject is in `{}`",
                kept.display()
            )
        };
        if losses.is_empty() {
            bail!("{head}");
        }
        bail!("{}\n{head}", crate::report::loss::LossError(losses));
    }

    let source_names = Arc::new(plan.sources.iter().map(|s| s.name.clone()).collect());
    // The side outputs are complete: they are hashed (read back, up to gigabytes) beside the
    // shard writing, and so are the inputs, which must not have changed while they were read.
    let cancel = AtomicBool::new(false);
    crate::release_freed(&pool);
    let (shards, side_files) = std::thread::scope(|scope| {
        let named = |name: &str| std::thread::Builder::new().name(name.to_owned());
        let followed = settled.excluded_lines.is_empty();
        let (staged, copied) = (&staging, &final_conversations);
        let side = named("side-hash")
            .spawn_scoped(scope, move || {
                let mut files = summarize(staged, &["rejects.jsonl", "filtered.jsonl"])?;
                let conversations = match follower.finish() {
                    Ok((bytes, sha256))
                        if followed && fs::metadata(copied).is_ok_and(|m| m.len() == bytes) =>
                    {
                        FileSummary {
                            file: "conversations.jsonl".to_owned(),
                            bytes,
                            sha256,
                        }
                    }
                    _ => summarize(staged, &["conversations.jsonl"])?.remove(0),
                };
                files.insert(0, conversations);
                Ok::<_, anyhow::Error>(files)
            })
            .expect("failed to spawn thread");
        let reread = named("input-reread")
            .spawn_scoped(scope, || {
                inputs_unchanged(plan, &input_files, input_checks, &cancel, timings)
            })
            .expect("failed to spawn thread");
        let layout = write::ShardLayout {
            total_rows,
            rows_per_shard: plan.rows_per_shard,
            mask_dtype: plan.mask.dtype,
            excluded: &settled.excluded,
            validation: plan.validation,
            groups: &settled.groups,
            written: Some(&|rows: u64| progress.shard_rows(rows)),
        };
        progress.shards_started(total_rows);
        let shards = write::write_shards(
            &staging,
            spill,
            &layout,
            source_names,
            &mut row_stats,
            &pool,
        );
        if shards.is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        let (side, reread) = match (side.join(), reread.join()) {
            (Ok(side), Ok(reread)) => (side, reread),
            (Err(panic), _) | (_, Err(panic)) => std::panic::resume_unwind(panic),
        };
        let (shards, split) = shards?;
        reread?;
        Ok::<_, anyhow::Error>(((shards, split), side?))
    })?;
    let (shards, split) = shards;
    progress.finish();
    crate::report::files::write_stats_files(&staging, &row_stats)?;

    let shard_files: Vec<String> = shards.iter().map(|s| s.file.clone()).collect();
    let dataset_sha256 = identity::dataset_sha256(shards.iter().map(|s| s.sha256.as_str()));
    write_file(
        &staging.join("dataset_info.json"),
        &write::dataset_info_json(
            &format!("{} (built by chatshards)", plan.name),
            plan.mask.dtype,
        ),
    )?;
    write_file(
        &staging.join("state.json"),
        &write::state_json(&shard_files, &dataset_sha256[..identity::FINGERPRINT_CHARS]),
    )?;
    let validation_shards: Vec<&crate::write::ShardSummary> = shards
        .iter()
        .filter(|s| s.file.starts_with(&format!("{}/", write::VALIDATION_DIR)))
        .collect();
    if !validation_shards.is_empty() {
        // The validation rows' own dataset (`write::VALIDATION_DIR`), listing the same shards.
        let folder = staging.join(write::VALIDATION_DIR);
        write_file(
            &folder.join("dataset_info.json"),
            &write::dataset_info_json(
                &format!("{} validation split (built by chatshards)", plan.name),
                plan.mask.dtype,
            ),
        )?;
        let names: Vec<String> = validation_shards
            .iter()
            .map(|s| s.file.rsplit('/').next().unwrap_or(&s.file).to_owned())
            .collect();
        let sha = identity::dataset_sha256(validation_shards.iter().map(|s| s.sha256.as_str()));
        write_file(
            &folder.join("state.json"),
            &write::state_json(&names, &sha[..identity::FINGERPRINT_CHARS]),
        )?;
    }
    let pipeline = record_pipeline(plan, out, &staging)?;
    let mut files = summarize_files(&staging, side_files)?;
    if !validation_shards.is_empty() {
        files.extend(summarize(&staging, write::VALIDATION_FILES)?);
        files.sort_by(|a, b| a.file.cmp(&b.file));
    }
    let mut manifest = manifest(
        plan,
        Outputs {
            sources: named,
            shards,
            dataset_sha256,
            files,
            pipeline,
        },
        input_files,
        &backend,
        processor.renderer.native(),
        settled.mix,
    )?;
    if let Some((reports, summary)) = &run_regenerate {
        manifest.regenerate = Some(
            plan.sources
                .iter()
                .zip(reports)
                .filter_map(|(s, r)| Some((s.name.clone(), r.clone()?)))
                .collect(),
        );
        printer.info(summary);
    }
    if let (Some(split), Some((target, _))) = (&split, plan.validation) {
        manifest.validation = Some(validation_record(plan, target, split, &settled.groups));
    }
    let manifest_json = write::pretty(&write::manifest::sealed(serde_json::to_value(&manifest)?));
    write_file(&staging.join("manifest.json"), &manifest_json)?;
    // The tokenizer's bytes are the built-in one's when the report decodes examples (it
    // checks the tokenizer's hash first).
    crate::report::files::write_report_with(&staging, Some(&processor.tokenizer.bytes))?;

    output.commit()?;
    timings.end_phase(Phase::Shards);
    let secs = started.elapsed().as_secs_f64();
    printer.info(&format!(
        "wrote {} rows, {} tokens ({} supervised) in {} shard(s) to `{}` in {secs:.1}s ({:.0} rows/s, {:.2} M tokens/s)",
        manifest.rows,
        manifest.tokens,
        manifest.supervised_tokens,
        manifest.shards.len(),
        out.display(),
        manifest.rows as f64 / secs,
        manifest.tokens as f64 / secs / 1e6
    ));
    printer.info(&format!(
        "build_id {}, dataset_sha256 {}",
        manifest.build_id, manifest.dataset_sha256
    ));
    if let Some(v) = &manifest.validation {
        printer.info(&format!(
            "validation: the last {} rows ({} conversations) after {} training rows ({} conversations); speculators: --train-data-ratio {}",
            v.total.validation_rows,
            v.total.validation_conversations,
            v.total.train_rows,
            v.total.train_conversations,
            v.train_data_ratio
        ));
    }
    if args.timings {
        printer.requested(&match timings.report(started) {
            Some(report) => report.to_string(),
            None => "--timings: the CPU clocks are read on Linux only".to_owned(),
        });
    }
    Ok(())
}

/// Threads that write the spill's and `conversations.jsonl`'s blocks for a pool of `threads`
/// (0: one per core): a quarter of the pool, 1 to 4.
fn block_writers(threads: usize) -> usize {
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    (threads / 4).clamp(1, 4)
}

/// Puts in place the dataset an interrupted build finished but did not swap in.
fn swap_finished(output: engine::output::Output, printer: &Printer) -> Result<()> {
    let path = output.staging().join("manifest.json");
    let manifest: write::manifest::Recorded = fs::read(&path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .with_context(|| format!("failed to read `{}`", path.display()))?;
    printer.info(&format!(
        "the interrupted build in `{}` had finished its dataset: putting it in place",
        output.staging().display()
    ));
    let dir = output.dir().to_owned();
    output.commit()?;
    printer.info(&format!(
        "wrote {} rows in {} shard(s) to `{}`",
        manifest.rows,
        manifest.shards.len(),
        dir.display()
    ));
    printer.info(&format!(
        "build_id {}, dataset_sha256 {}",
        manifest.build_id, manifest.dataset_sha256
    ));
    Ok(())
}

/// Rows between two checkpoints inside a pass: `CHATSHARDS_CHECKPOINT_ROWS`, else
/// [`crate::engine::journal::SEGMENT_ROWS`].
fn segment_rows() -> Result<u64> {
    const VARIABLE: &str = "CHATSHARDS_CHECKPOINT_ROWS";
    match std::env::var(VARIABLE) {
        Err(_) => Ok(crate::engine::journal::SEGMENT_ROWS),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => bail!("`{VARIABLE}` must be a whole number of rows, at least 1 (it is `{v}`)"),
        },
    }
}

/// What an interrupted build must share with this one to be gone on from.
/// `hashed`: the inputs' hashes, in [`input_paths`]' order (a part, which does not hash its
/// inputs, has none and compares them by size and modification time).
pub fn resume_key(plan: &Plan, hashed: Option<&[InputFile]>) -> Result<ResumeKey> {
    let pipeline = identity::pipeline_value(&plan.pipeline_yaml)
        .with_context(|| format!("failed to read `{}`", plan.path.display()))?;
    let mut inputs = Vec::new();
    let sources = plan
        .sources
        .iter()
        .flat_map(|s| s.files.iter().zip(&s.display_files));
    let benchmarks = plan
        .decontaminate
        .iter()
        .flat_map(|d| d.files.iter().zip(&d.display_files))
        .flat_map(|(paths, shown)| paths.iter().zip(shown));
    for (i, (path, shown)) in sources.chain(benchmarks).enumerate() {
        let sha256 = hashed.and_then(|h| h.get(i)).map(|f| f.sha256.clone());
        inputs.push(
            InputStamp::of(path, shown, sha256)
                .with_context(|| format!("failed to read `{}`", path.display()))?,
        );
    }
    Ok(ResumeKey {
        tool_version: Tool::current().version,
        pipeline,
        lock_sha256: plan.lock.as_ref().map(|l| l.sha256.clone()),
        template_sha256: plan.template.sha256.clone(),
        template_kwargs: serde_json::Value::Object(plan.template.kwargs.clone()),
        tokenizer_sha256: plan.tokenizer_sha256.clone(),
        inputs,
    })
}

/// The chat template at `path`, or without a path the Qwen3.6 one built into the binary.
pub fn template_source(path: Option<&Path>) -> Result<String> {
    match path {
        Some(path) => fs::read_to_string(path)
            .with_context(|| format!("failed to read template `{}`", path.display())),
        None => Ok(crate::model::embedded::TEMPLATE.to_owned()),
    }
}

/// A per-row processor from a template and a tokenizer alone, without a pipeline (`render`,
/// `serve-render`): the files at their paths or the built-in Qwen3.6 ones, every row's full
/// length, the standard mask, no spot checks.
pub fn template_processor(
    template: Option<&Path>,
    tokenizer: Option<&Path>,
    policy: RenderPolicy,
    kwargs: Option<&str>,
) -> Result<RowProcessor> {
    let source = template_source(template)?;
    let kwargs = match kwargs {
        Some(k) => match serde_json::from_str::<serde_json::Value>(k)
            .context("--kwargs is not valid JSON")?
        {
            serde_json::Value::Object(o) => o,
            _ => anyhow::bail!("--kwargs must be a JSON object"),
        },
        None => Default::default(),
    };
    let renderer = Renderer::new(&source, kwargs).with_context(|| {
        let shown = crate::plan::shown_input(template, crate::model::embedded::TEMPLATE_SHOWN);
        format!("in template {shown}")
    })?;
    // The build's encoder choice (the fast encoder when the tokenizer qualifies and passes its
    // self-check; the same ids): the `tokenizers` crate keeps about 120 bytes per input byte
    // of a long text (its offsets and token strings), so a 60 MB line needed 9 GB.
    let tokenizer = Arc::new(Tokenizer::load_or_embedded(tokenizer, Backend::Auto)?.0);
    let validator = Validator::new(&tokenizer.forbidden);
    Ok(RowProcessor {
        renderer,
        tokenizer,
        validator,
        policy,
        max_tokens: usize::MAX,
        length_policy: LengthPolicy::Drop,
        min_supervised_tokens: 0,
        mask: crate::tokenize::mask::MaskRule::standard(),
        verify_basis_points: None,
        render_verify_basis_points: None,
    })
}

/// Builds the per-row processor (renderer, tokenizer, validator) for a plan.
pub fn processor(plan: &Plan) -> Result<(RowProcessor, BackendReport)> {
    let renderer = Renderer::with_engine(
        &plan.template.source,
        plan.template.kwargs.clone(),
        plan.template.engine,
    )
    .with_context(|| {
        let shown = crate::plan::shown_input(
            plan.template.path.as_deref(),
            crate::model::embedded::TEMPLATE_SHOWN,
        );
        format!("in template {shown}")
    })?;
    let render_verify_basis_points = renderer.native().map(|_| plan.template.verify_basis_points);
    let (mut tokenizer, mut report) =
        Tokenizer::load_or_embedded(plan.tokenizer_path.as_deref(), plan.tokenizer_backend)?;
    // The fast encoder caches per word already; measured, segments on top of it cost more
    // than they save.
    if plan.segment_cache && report.used == Backend::Hf {
        report.segment_cache = Some(tokenizer.cache_segments());
    }
    let tokenizer = std::sync::Arc::new(tokenizer);
    let validator = Validator::new(&tokenizer.forbidden);
    let mask = crate::engine::row_path::mask_rule(&plan.mask, &renderer, &tokenizer)?;
    let processor = RowProcessor {
        renderer,
        tokenizer,
        validator,
        policy: plan.policy,
        max_tokens: plan.max_tokens,
        length_policy: plan.length_policy,
        min_supervised_tokens: plan.min_supervised_tokens,
        mask,
        verify_basis_points: report
            .needs_spot_checks()
            .then_some(plan.verify_basis_points),
        render_verify_basis_points,
    };
    Ok((processor, report))
}

/// What the output directory must stay clear of: the pipeline and every file it reads.
fn placement(plan: &Plan) -> engine::output::Placement<'_> {
    let sources = plan.sources.iter().flat_map(|s| s.files.iter());
    engine::output::Placement {
        pipeline: &plan.path,
        inputs: sources
            .chain(plan.tokenizer_path.iter())
            .chain(plan.template.path.iter())
            .map(PathBuf::as_path)
            .collect(),
    }
}

/// Every input file: its kind, the source (or benchmark set) it belongs to, its path and its
/// path as shown, in the order of the manifest (and of [`resume_key`]).
fn input_paths(plan: &Plan) -> Vec<(InputKind, &str, &Path, &str)> {
    let mut files = Vec::new();
    for source in &plan.sources {
        for (path, shown) in source.files.iter().zip(&source.display_files) {
            files.push((
                InputKind::Source,
                source.name.as_str(),
                path.as_path(),
                shown.as_str(),
            ));
        }
    }
    if let Some(d) = &plan.decontaminate {
        for (bench, (paths, shown)) in d
            .config
            .benchmarks
            .iter()
            .zip(d.files.iter().zip(&d.display_files))
        {
            for (path, shown) in paths.iter().zip(shown) {
                files.push((
                    InputKind::Benchmark,
                    bench.name.as_str(),
                    path.as_path(),
                    shown.as_str(),
                ));
            }
        }
    }
    files
}

/// Size and SHA-256 of every input file, for the manifest, hashed in parallel over the files
/// (on the current rayon pool).
/// Each input's size and SHA-256 (for the manifest and a resume), and the fast digests that
/// the check after the build compares.
fn hash_inputs(paths: &[(InputKind, &str, &Path, &str)]) -> Result<Vec<(InputFile, Checks)>> {
    use rayon::prelude::*;
    paths
        .par_iter()
        .map(|&(kind, source, path, shown)| {
            let (bytes, sha256, checks) = hash_file_checked(path, &mut || Ok(()))
                .with_context(|| format!("failed to read `{}`", path.display()))?;
            let file = InputFile {
                kind,
                source: source.to_owned(),
                path: shown.to_owned(),
                bytes,
                sha256,
            };
            Ok((file, checks))
        })
        .collect()
}

/// Threads that hash the inputs beside a build: a few, since one large file is hashed by
/// one thread anyway (its check after the build by a few), and the build's own pool has the
/// cores.
const HASHING_THREADS: usize = 4;

type Hashed = Result<Vec<(InputFile, Checks)>, String>;
/// The inputs' records for the manifest, and their fast digests in the same order.
type HashedInputs = (Vec<InputFile>, Vec<Checks>);
type Hashing = std::thread::JoinHandle<Hashed>;

/// The inputs' hashes and the build's resume key: known before the build, or being taken on
/// threads of their own beside it (then the journal writes its key once they are ready).
struct InputHashes {
    /// The key with each input's size and modification time, without hashes.
    base: ResumeKey,
    thread: std::sync::Mutex<Option<Hashing>>,
    done: std::sync::OnceLock<Result<HashedInputs, String>>,
    /// The whole key, once hashed.
    key: std::sync::OnceLock<ResumeKey>,
}

impl InputHashes {
    fn known(key: ResumeKey, hashed: Vec<(InputFile, Checks)>) -> Arc<InputHashes> {
        Arc::new(InputHashes {
            base: key.clone(),
            thread: std::sync::Mutex::new(None),
            done: std::sync::OnceLock::from(Ok(hashed.into_iter().unzip())),
            key: std::sync::OnceLock::from(key),
        })
    }

    fn spawn(plan: &Plan) -> Result<Arc<InputHashes>> {
        let base = resume_key(plan, None)?;
        let owned: Vec<(InputKind, String, PathBuf, String)> = input_paths(plan)
            .into_iter()
            .map(|(k, s, p, shown)| (k, s.to_owned(), p.to_owned(), shown.to_owned()))
            .collect();
        let threads = owned.len().clamp(1, HASHING_THREADS);
        let thread = std::thread::Builder::new()
            .name("chatshards-hash".to_owned())
            .spawn(move || {
                let paths: Vec<_> = owned
                    .iter()
                    .map(|(k, s, p, shown)| (*k, s.as_str(), p.as_path(), shown.as_str()))
                    .collect();
                let hash = || hash_inputs(&paths).map_err(|e| format!("{e:#}"));
                match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
                    Ok(pool) => pool.install(hash),
                    Err(_) => hash(),
                }
            })
            .context("failed to start the input hashing thread")?;
        Ok(Arc::new(InputHashes {
            base,
            thread: std::sync::Mutex::new(Some(thread)),
            done: std::sync::OnceLock::new(),
            key: std::sync::OnceLock::new(),
        }))
    }

    /// The key, when the inputs were hashed before the build.
    fn known_key(&self) -> Option<&ResumeKey> {
        self.key.get()
    }

    /// The hashes, waiting for them.
    fn wait(&self) -> Result<&Vec<InputFile>, String> {
        let done = self.done.get_or_init(|| {
            let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
            match thread.map(std::thread::JoinHandle::join) {
                Some(Ok(result)) => result.map(|hashed| hashed.into_iter().unzip()),
                Some(Err(_)) => Err("internal error: the input hashing thread failed".to_owned()),
                None => Err("internal error: the inputs were never hashed".to_owned()),
            }
        });
        done.as_ref().map(|(files, _)| files).map_err(Clone::clone)
    }

    /// The inputs' fast digests, once hashed.
    fn checks(&self) -> Option<&[Checks]> {
        match self.done.get() {
            Some(Ok((_, checks))) => Some(checks),
            _ => None,
        }
    }
}

impl engine::journal::KeySource for InputHashes {
    fn ready(&self) -> bool {
        self.done.get().is_some()
            || self
                .thread
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_none_or(std::thread::JoinHandle::is_finished)
    }

    fn key(&self) -> Result<ResumeKey, String> {
        let files = self.wait()?;
        let key = self.key.get_or_init(|| {
            let mut key = self.base.clone();
            for (stamp, file) in key.inputs.iter_mut().zip(files) {
                stamp.sha256 = Some(file.sha256.clone());
            }
            key
        });
        Ok(key.clone())
    }
}

/// Hashes every input again after the build read it: an input edited while it was read (the
/// rows may come from either version) fails the build instead of giving a dataset whose
/// manifest names bytes it was not built from. Stops early (with an error nobody sees) once
/// `cancel` is set.
fn inputs_unchanged(
    plan: &Plan,
    before: &[InputFile],
    checks: Option<&[Checks]>,
    cancel: &AtomicBool,
    timings: &Timings,
) -> Result<()> {
    let go_on = || {
        timings.hashing_progress();
        if cancel.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("cancelled"));
        }
        Ok(())
    };
    for (i, ((_, _, path, shown), then)) in input_paths(plan).into_iter().zip(before).enumerate() {
        // The fast digests settle it, on a few threads; only a difference is read again with
        // SHA-256, for the message.
        if let Some(checks) = checks.and_then(|c| c.get(i)) {
            let same = checks
                .same(path, HASHING_THREADS, &go_on)
                .with_context(|| format!("failed to read `{}`", path.display()))?;
            if same {
                continue;
            }
        }
        let (bytes, sha256) = identity::hash_file_with(path, &mut go_on.clone())
            .with_context(|| format!("failed to read `{}`", path.display()))?;
        if bytes != then.bytes || sha256 != then.sha256 {
            bail!(
                "input `{shown}` changed while the build read it ({} bytes with SHA-256 {} before, \
                 {bytes} bytes with SHA-256 {sha256} after): its rows may come from either \
                 version, so no dataset was written; build again once it no longer changes",
                then.bytes,
                then.sha256
            );
        }
    }
    Ok(())
}

/// The manifest's record of the train/validation split.
fn validation_record(
    plan: &Plan,
    target: crate::model::split::Target,
    split: &crate::model::split::Split,
    groups: &crate::model::split::Groups,
) -> write::manifest::Validation {
    use crate::model::split::{train_data_ratio, Target};
    let total = split.total();
    write::manifest::Validation {
        fraction: match target {
            Target::Fraction(f) => Some(f),
            Target::Rows(_) => None,
        },
        rows: match target {
            Target::Rows(n) => Some(n),
            Target::Fraction(_) => None,
        },
        seed: split.seed,
        train_data_ratio: train_data_ratio(
            total.train_rows,
            total.train_rows + total.validation_rows,
        ),
        total,
        sources: plan
            .sources
            .iter()
            .map(|s| s.name.clone())
            .zip(split.by_source.iter().copied())
            .collect(),
        groups: groups.clone(),
    }
}

/// What a build wrote, for its manifest.
struct Outputs {
    sources: Vec<(String, SourceStats)>,
    shards: Vec<write::ShardSummary>,
    dataset_sha256: String,
    files: Vec<FileSummary>,
    pipeline: PipelineRecord,
}

/// Copies the pipeline (and the lockfile it used) into the output directory, and records where
/// the pipeline is relative to the output directory.
fn record_pipeline(plan: &Plan, out: &Path, staging: &Path) -> Result<PipelineRecord> {
    write_bytes(&staging.join(PIPELINE_COPY), &plan.pipeline_yaml)?;
    let lock = match &plan.lock {
        Some(lock) => {
            write_bytes(&staging.join(LOCK_COPY), &lock.bytes)?;
            Some(LockRecord {
                copy: LOCK_COPY.to_owned(),
                sha256: lock.sha256.clone(),
            })
        }
        None => None,
    };
    // The staging directory is a sibling of the output, so its parent exists.
    let absolute = |p: &Path| fs::canonicalize(p).ok();
    let out_abs = out
        .parent()
        .map(|parent| {
            if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            }
        })
        .and_then(absolute)
        .zip(out.file_name())
        .map(|(parent, name)| parent.join(name));
    let path = out_abs
        .zip(absolute(&plan.path))
        .and_then(|(out, pipeline)| pathdiff::diff_paths(pipeline, out))
        .and_then(|rel| rel.to_str().map(str::to_owned));
    Ok(PipelineRecord {
        path,
        copy: PIPELINE_COPY.to_owned(),
        lock,
    })
}

/// Size and SHA-256 of every file in the staging directory but the shards and the manifest,
/// by name; `known` are those hashed already.
fn summarize_files(staging: &Path, known: Vec<FileSummary>) -> Result<Vec<FileSummary>> {
    let mut names = Vec::new();
    for entry in
        fs::read_dir(staging).with_context(|| format!("failed to read `{}`", staging.display()))?
    {
        let entry = entry.with_context(|| format!("failed to read `{}`", staging.display()))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_shard = name.starts_with("data-") && name.ends_with(".arrow");
        let listed = known.iter().any(|f| f.file == name);
        if entry.path().is_file() && !is_shard && !listed && name != "manifest.json" {
            names.push(name);
        }
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut files = summarize(staging, &names)?;
    files.extend(known);
    files.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(files)
}

/// Size and SHA-256 of the named files of a directory.
fn summarize(dir: &Path, names: &[&str]) -> Result<Vec<FileSummary>> {
    names
        .iter()
        .map(|&file| {
            let path = dir.join(file);
            let (bytes, sha256) = identity::hash_file(&path)
                .with_context(|| format!("failed to read `{}`", path.display()))?;
            Ok(FileSummary {
                file: file.to_owned(),
                bytes,
                sha256,
            })
        })
        .collect()
}

/// The identity of a build from its plan and its inputs' hashes (see `write::identity`).
pub fn build_id(plan: &Plan, files: &[InputFile]) -> Result<String> {
    let pipeline = identity::pipeline_value(&plan.pipeline_yaml)
        .with_context(|| format!("failed to read `{}`", plan.path.display()))?;
    let inputs: Vec<IdentityInput> = files.iter().map(IdentityInput::from).collect();
    let tool = Tool::current();
    Ok(Identity {
        tool_name: &tool.name,
        tool_version: &tool.version,
        pipeline: &pipeline,
        lock_sha256: plan.lock.as_ref().map(|l| l.sha256.as_str()),
        template_sha256: &plan.template.sha256,
        template_kwargs: &plan.template.kwargs,
        tokenizer_sha256: &plan.tokenizer_sha256,
        inputs: &inputs,
    }
    .build_id())
}

fn embedded(sha256: &str) -> write::manifest::Embedded {
    write::manifest::Embedded {
        embedded: crate::model::embedded::NAME.to_owned(),
        sha256: sha256.to_owned(),
    }
}

fn manifest(
    plan: &Plan,
    outputs: Outputs,
    files: Vec<InputFile>,
    backend: &BackendReport,
    native: Option<&'static str>,
    mix: Vec<crate::curate::ledger::MixLine>,
) -> Result<Manifest> {
    let Outputs {
        sources,
        shards,
        dataset_sha256,
        files: output_files,
        pipeline,
    } = outputs;
    let build_id = build_id(plan, &files)?;
    let renderer = write::manifest::Renderer {
        requested: plan.template.engine,
        used: native.map_or_else(|| "minijinja".to_owned(), |t| format!("native {t}")),
        verify_percent: f64::from(plan.template.verify_basis_points) / 100.0,
        verified_rows: sources.iter().map(|(_, s)| s.renderer_checked_rows).sum(),
        mismatches: 0,
    };
    let encoder = Encoder {
        requested: backend.requested,
        used: backend.used,
        fallback_reason: backend.fallback_reason.clone(),
        probe_texts: backend.probe_texts,
        segment_cache: matches!(backend.segment_cache, Some(Ok(()))),
        verify_percent: f64::from(plan.verify_basis_points) / 100.0,
        verified_rows: sources.iter().map(|(_, s)| s.encoder_checked_rows).sum(),
        mismatches: 0,
    };
    let rows = shards.iter().map(|s| s.rows).sum();
    let tokens = sources.iter().map(|(_, s)| s.tokens).sum();
    let supervised_tokens = sources.iter().map(|(_, s)| s.supervised_tokens).sum();
    Ok(Manifest {
        tool: Tool::current(),
        name: plan.name.clone(),
        build_id,
        dataset_sha256,
        pipeline,
        inputs: Inputs {
            hub: plan
                .hub_files
                .iter()
                .map(|f| HubInput {
                    repo: f.repo.clone(),
                    kind: f.kind.to_string(),
                    revision: f.revision.clone(),
                    commit: f.commit.clone(),
                    path: f.path.clone(),
                    bytes: f.size,
                    sha256: f.sha256.clone(),
                })
                .collect(),
            pipeline_sha256: plan.pipeline_sha256.clone(),
            template_sha256: plan.template.sha256.clone(),
            tokenizer_sha256: plan.tokenizer_sha256.clone(),
            template: plan
                .template
                .path
                .is_none()
                .then(|| embedded(&plan.template.sha256)),
            tokenizer: plan
                .tokenizer_path
                .is_none()
                .then(|| embedded(&plan.tokenizer_sha256)),
            files,
        },
        settings: Settings {
            seed: plan.seed,
            render_policy: plan.policy,
            mask: plan.mask,
            template_kwargs: plan.template.kwargs.clone(),
            max_tokens: plan.max_tokens,
            length_policy: plan.length_policy,
            min_supervised_tokens: plan.min_supervised_tokens,
            dedup: plan.dedup,
            near_dup: plan.near_dup.clone(),
            decontaminate: plan.decontaminate.as_ref().map(|d| d.config.clone()),
            filters: plan
                .sources
                .iter()
                .map(|s| (s.name.clone(), s.filters.names()))
                .collect(),
            shuffle: plan.shuffle,
            rows_per_shard: plan.rows_per_shard,
        },
        rows,
        tokens,
        supervised_tokens,
        encoder,
        renderer,
        sources: sources.into_iter().collect(),
        mix: plan.mix.clone().map(|target| write::manifest::Mix {
            target,
            sources: mix.into_iter().map(|l| (l.source.clone(), l)).collect(),
        }),
        regenerate: None,
        validation: None,
        shards,
        files: output_files,
    })
}

fn create(path: &Path) -> Result<BufWriter<fs::File>> {
    let f = crate::model::nofollow::create(path)
        .with_context(|| format!("failed to create `{}`", path.display()))?;
    Ok(BufWriter::with_capacity(1 << 20, f))
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    write_bytes(path, text.as_bytes())
}

fn write_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::model::nofollow::write(path, bytes)
        .with_context(|| format!("failed to write `{}`", path.display()))
}
