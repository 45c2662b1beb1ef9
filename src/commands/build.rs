//! `chatshards build PIPELINE.yaml`

use crate::journal::{InputStamp, Journal, ResumeKey};
use crate::pipeline::{self, Sinks};
use crate::plan::{self, HubAccess, Plan};
use crate::printer::Printer;
use crate::process::RowProcessor;
use crate::progress::BuildProgress;
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
}

pub fn run(args: &BuildArgs, printer: &Printer) -> Result<()> {
    let started = Instant::now();
    let access = HubAccess::locked_if(args.locked);
    let mut plan = plan::compile(&args.pipeline, access)?;
    if let Some(output) = &args.output {
        plan.output_dir = output.clone();
    }
    // Hashing the inputs for the manifest (gigabytes for a full build) runs beside the whole
    // build, off its critical path; an error cancels it.
    let cancel = AtomicBool::new(false);
    // Always measured (a few clock reads per batch); printed with `--timings`.
    let timings = Timings::default();
    std::thread::scope(|scope| {
        let hashing = scope.spawn(|| input_files(&plan, &cancel, &timings));
        let built = build(&plan, args, hashing, printer, started, &timings);
        cancel.store(true, Ordering::Relaxed);
        built
    })
}

/// The build proper; `hashing` yields the inputs' sizes and hashes.
fn build(
    plan: &Plan,
    args: &BuildArgs,
    hashing: std::thread::ScopedJoinHandle<Result<Vec<InputFile>>>,
    printer: &Printer,
    started: Instant,
    timings: &Timings,
) -> Result<()> {
    // First: a refused or locked output directory fails at once, before any work.
    let out = &plan.output_dir;
    let key = resume_key(plan)?;
    let parts = match &args.merge {
        Some((dir, count)) => {
            let dir = dir
                .clone()
                .unwrap_or_else(|| crate::partition::default_parts_dir(out));
            Some(crate::partition::Parts::open(&dir, *count, &key)?)
        }
        None => None,
    };
    let resume = if args.fresh {
        write::output::Resume::Fresh
    } else {
        write::output::Resume::IfSame(&key)
    };
    let output = write::output::Output::prepare(out, &placement(plan), resume)?;
    let staging = output.staging().to_owned();
    let work_dir = output.work_dir();
    let journal_dir = work_dir.join(write::output::JOURNAL);
    let mut journal = Journal::open(&journal_dir, &key, segment_rows()?)?;
    let restored = journal.positions()?;
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
    let (processor, backend) = processor(plan)?;
    printer.info(&format!("encoder: {backend}"));
    printer.info(&match processor.renderer.native() {
        Some(template) => format!(
            "renderer: native {template} template ({}% of rows re-rendered with minijinja to check it)",
            f64::from(plan.template.verify_basis_points) / 100.0
        ),
        None => "renderer: minijinja".to_owned(),
    });
    let threads = args.threads.unwrap_or(0);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("failed to start the thread pool")?;
    let progress = BuildProgress::new(printer, plan)?;
    let spill_dir = work_dir.join(write::output::SPILL);
    let rejects_path = staging.join("rejects.jsonl");
    let filtered_path = staging.join("filtered.jsonl");
    // Hundreds of MB for a large build, never read back: written around the page cache.
    let path = work_dir.join(write::output::CONVERSATIONS);
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
            Spill::resume(&spill_dir, plan.shuffle, &at.spill)?,
            write::reopen_side_output(&rejects_path, at.rejects)
                .with_context(|| resumed(&rejects_path))?,
            write::reopen_side_output(&filtered_path, at.filtered)
                .with_context(|| resumed(&filtered_path))?,
            write::OutputFile::resume(&path, at.conversations).with_context(|| resumed(&path))?,
        ),
    };
    // stats.json: rows are counted as the shards are written, conversations (turns and tool
    // calls) from the settled selection.
    let mut row_stats = DatasetStats::new(
        plan.sources.iter().map(|s| s.name.clone()).collect(),
        processor.tokenizer.reference().get_vocab_size(true),
    );
    let mut sinks = Sinks {
        spill: &mut spill,
        rejects: &mut rejects,
        filtered: &mut filtered,
        conversations: &mut conversations,
    };
    timings.end_phase(Phase::StartUp);
    let run = pipeline::run_journaled(
        plan,
        &processor,
        &mut sinks,
        &progress,
        &pool,
        timings,
        &mut journal,
        parts,
    )?;
    progress.finish();
    rejects.flush().context("failed to write rejects.jsonl")?;
    filtered.flush().context("failed to write filtered.jsonl")?;
    conversations
        .flush()
        .context("failed to write conversations.jsonl")?;
    drop(conversations);
    let settled = run.settled;
    let run_regenerate = run.regenerate;
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
    printer.info(&summary_table(&named));
    if let Some(target) = &plan.mix {
        printer.info(&crate::report::mix_table(target, &settled.mix));
    }
    for (name, s) in &named {
        if !s.balanced() {
            bail!("internal error: the accounting of source `{name}` does not balance: {s:?}");
        }
    }
    let total_rows = spill.rows() - settled.excluded_rows;
    if total_rows == 0 {
        bail!(
            "no rows were kept, so no dataset was written; see `{}` for the reasons",
            output.keep_rejects()?.display()
        );
    }

    let source_names = Arc::new(plan.sources.iter().map(|s| s.name.clone()).collect());
    // The side outputs are complete: they are hashed (read back, up to gigabytes) beside the
    // shard writing.
    let (shards, side_files) = std::thread::scope(|scope| {
        let side = scope.spawn(|| {
            summarize(
                &staging,
                &["conversations.jsonl", "rejects.jsonl", "filtered.jsonl"],
            )
        });
        let layout = write::ShardLayout {
            total_rows,
            rows_per_shard: plan.rows_per_shard,
            mask_dtype: plan.mask.dtype,
            excluded: &settled.excluded,
        };
        let shards = write::write_shards(&staging, spill, &layout, source_names, &mut row_stats);
        let side = match side.join() {
            Ok(side) => side,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        Ok::<_, anyhow::Error>((shards?, side?))
    })?;
    crate::commands::stats::write_stats_files(&staging, &row_stats)?;
    let input_files = match hashing.join() {
        Ok(files) => files?,
        Err(panic) => std::panic::resume_unwind(panic),
    };

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
    let pipeline = record_pipeline(plan, out, &staging)?;
    let files = summarize_files(&staging, side_files)?;
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
    let manifest_json = write::pretty(&serde_json::to_value(&manifest)?);
    write_file(&staging.join("manifest.json"), &manifest_json)?;
    crate::commands::report::write_report(&staging)?;

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
    if args.timings {
        printer.requested(&match timings.report(started) {
            Some(report) => report.to_string(),
            None => "--timings: the CPU clocks are read on Linux only".to_owned(),
        });
    }
    Ok(())
}

/// Rows between two checkpoints inside a pass: `CHATSHARDS_CHECKPOINT_ROWS`, else
/// [`crate::journal::SEGMENT_ROWS`].
fn segment_rows() -> Result<u64> {
    const VARIABLE: &str = "CHATSHARDS_CHECKPOINT_ROWS";
    match std::env::var(VARIABLE) {
        Err(_) => Ok(crate::journal::SEGMENT_ROWS),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => bail!("`{VARIABLE}` must be a whole number of rows, at least 1 (it is `{v}`)"),
        },
    }
}

/// What an interrupted build must share with this one to be gone on from.
pub fn resume_key(plan: &Plan) -> Result<ResumeKey> {
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
    for (path, shown) in sources.chain(benchmarks) {
        inputs.push(
            InputStamp::of(path, shown)
                .with_context(|| format!("failed to read `{}`", path.display()))?,
        );
    }
    Ok(ResumeKey {
        tool_version: Tool::current().version.to_owned(),
        pipeline,
        lock_sha256: plan.lock.as_ref().map(|l| l.sha256.clone()),
        template_sha256: plan.template.sha256.clone(),
        template_kwargs: serde_json::Value::Object(plan.template.kwargs.clone()),
        tokenizer_sha256: plan.tokenizer_sha256.clone(),
        inputs,
    })
}

/// Builds the per-row processor (renderer, tokenizer, validator) for a plan.
pub fn processor(plan: &Plan) -> Result<(RowProcessor, BackendReport)> {
    let renderer = Renderer::with_engine(
        &plan.template.source,
        plan.template.kwargs.clone(),
        plan.template.engine,
    )
    .with_context(|| format!("in template `{}`", plan.template.path.display()))?;
    let render_verify_basis_points = renderer.native().map(|_| plan.template.verify_basis_points);
    let (mut tokenizer, mut report) =
        Tokenizer::load_with_backend(&plan.tokenizer_path, plan.tokenizer_backend)?;
    // The fast encoder caches per word already; measured, segments on top of it cost more
    // than they save.
    if plan.segment_cache && report.used == Backend::Hf {
        report.segment_cache = Some(tokenizer.cache_segments());
    }
    let tokenizer = std::sync::Arc::new(tokenizer);
    let validator = Validator::new(&tokenizer.forbidden);
    let mask = crate::process::mask_rule(&plan.mask, &renderer, &tokenizer)?;
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
fn placement(plan: &Plan) -> write::output::Placement<'_> {
    let sources = plan.sources.iter().flat_map(|s| s.files.iter());
    write::output::Placement {
        pipeline: &plan.path,
        inputs: sources
            .chain([&plan.tokenizer_path, &plan.template.path])
            .map(PathBuf::as_path)
            .collect(),
    }
}

/// Size and SHA-256 of every input file, for the manifest. Stops early (with an error nobody
/// sees) once `cancel` is set.
fn input_files(plan: &Plan, cancel: &AtomicBool, timings: &Timings) -> Result<Vec<InputFile>> {
    let mut files = Vec::new();
    for source in &plan.sources {
        for (path, shown) in source.files.iter().zip(&source.display_files) {
            let (bytes, sha256) = hash_file(path, cancel, timings)?;
            files.push(InputFile {
                kind: InputKind::Source,
                source: source.name.clone(),
                path: shown.clone(),
                bytes,
                sha256,
            });
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
                let (bytes, sha256) = hash_file(path, cancel, timings)?;
                files.push(InputFile {
                    kind: InputKind::Benchmark,
                    source: bench.name.clone(),
                    path: shown.clone(),
                    bytes,
                    sha256,
                });
            }
        }
    }
    Ok(files)
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
    let never = AtomicBool::new(false);
    let timings = Timings::default();
    names
        .iter()
        .map(|&file| {
            let (bytes, sha256) = hash_file(&dir.join(file), &never, &timings)?;
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
    let inputs: Vec<IdentityInput> = files
        .iter()
        .map(|f| IdentityInput {
            kind: f.kind,
            name: f.source.clone(),
            path: f.path.clone(),
            sha256: f.sha256.clone(),
        })
        .collect();
    let tool = Tool::current();
    Ok(Identity {
        tool_name: tool.name,
        tool_version: tool.version,
        pipeline: &pipeline,
        lock_sha256: plan.lock.as_ref().map(|l| l.sha256.as_str()),
        template_sha256: &plan.template.sha256,
        template_kwargs: &plan.template.kwargs,
        tokenizer_sha256: &plan.tokenizer_sha256,
        inputs: &inputs,
    }
    .build_id())
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
        shards,
        files: output_files,
    })
}

/// Size and SHA-256 of a file, streamed (input files can be gigabytes).
fn hash_file(path: &Path, cancel: &AtomicBool, timings: &Timings) -> Result<(u64, String)> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let context = || format!("failed to read `{}`", path.display());
    let mut file = fs::File::open(path).with_context(context)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        if cancel.load(Ordering::Relaxed) {
            bail!("cancelled");
        }
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).with_context(context),
        };
        hasher.update(&buf[..n]);
        bytes += n as u64;
        timings.hashing_progress();
    }
    Ok((bytes, hex::encode(hasher.finalize())))
}

fn create(path: &Path) -> Result<BufWriter<fs::File>> {
    let f =
        fs::File::create(path).with_context(|| format!("failed to create `{}`", path.display()))?;
    Ok(BufWriter::with_capacity(1 << 20, f))
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    write_bytes(path, text.as_bytes())
}

fn write_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::write(path, bytes).with_context(|| format!("failed to write `{}`", path.display()))
}
