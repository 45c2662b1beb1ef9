//! `chatshards build PIPELINE.yaml`

use crate::pipeline::{self, Sinks};
use crate::plan::{self, sha256_hex, HubAccess, Plan};
use crate::printer::Printer;
use crate::process::RowProcessor;
use crate::progress::BuildProgress;
use crate::render::Renderer;
use crate::report::stats::DatasetStats;
use crate::report::timings::{Phase, Timings};
use crate::report::{summary_table, SourceStats};
use crate::tokenize::{Backend, BackendReport, Tokenizer};
use crate::validate::Validator;
use crate::write::manifest::{Encoder, HubInput, InputFile, Inputs, Manifest, Settings, Tool};
use crate::write::{
    self, shard_name, BatchBuilder, Bucket, LoadedBucket, ShardEncoder, ShardWriter, Spill,
    SpilledBucket, WriteError, SHARD_BATCH_ROWS,
};
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
}

pub fn run(args: &BuildArgs, printer: &Printer) -> Result<()> {
    let started = Instant::now();
    let access = if args.locked {
        HubAccess::Locked
    } else {
        HubAccess::Auto
    };
    let plan = plan::compile(&args.pipeline, access)?;
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
    let out = &plan.output_dir;
    check_output_dir(out)?;
    let staging = sibling(out, "partial");
    if staging.exists() {
        fs::remove_dir_all(&staging)
            .with_context(|| format!("failed to remove stale `{}`", staging.display()))?;
    }
    fs::create_dir_all(&staging)
        .with_context(|| format!("failed to create `{}`", staging.display()))?;

    let threads = args.threads.unwrap_or(0);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("failed to start the thread pool")?;
    let progress = BuildProgress::new(printer);
    let spill_dir = staging.join(".spill");
    let mut spill = Spill::new(&spill_dir, plan.shuffle)?;
    let mut rejects = create(&staging.join("rejects.jsonl"))?;
    // Hundreds of MB for a large build, never read back: written around the page cache.
    let path = staging.join("conversations.jsonl");
    let mut conversations = write::OutputFile::create(&path)
        .with_context(|| format!("failed to create `{}`", path.display()))?;
    // stats.json: rows are counted as the shards are written; the pipeline can add each kept
    // conversation's turns and tool calls (`DatasetStats::add_conversation`).
    let mut row_stats = DatasetStats::new(
        plan.sources.iter().map(|s| s.name.clone()).collect(),
        processor.tokenizer.reference().get_vocab_size(true),
    );
    let mut sinks = Sinks {
        spill: &mut spill,
        rejects: &mut rejects,
        conversations: &mut conversations,
    };
    timings.end_phase(Phase::StartUp);
    let stats = pipeline::run(plan, &processor, &mut sinks, &progress, &pool, timings)?;
    progress.finish();
    rejects.flush().context("failed to write rejects.jsonl")?;
    conversations
        .flush()
        .context("failed to write conversations.jsonl")?;
    timings.end_phase(Phase::Rows);

    let named: Vec<(String, SourceStats)> = plan
        .sources
        .iter()
        .map(|s| s.name.clone())
        .zip(stats.iter().cloned())
        .collect();
    printer.info(&summary_table(&named));
    for (name, s) in &named {
        if !s.balanced() {
            bail!("internal error: the accounting of source `{name}` does not balance: {s:?}");
        }
    }
    let total_rows = spill.rows();
    if total_rows == 0 {
        bail!(
            "no rows were kept, so no dataset was written; see `{}` for the reasons",
            staging.join("rejects.jsonl").display()
        );
    }

    let source_names = Arc::new(plan.sources.iter().map(|s| s.name.clone()).collect());
    let shards = write_shards(
        &staging,
        spill,
        total_rows,
        plan.rows_per_shard,
        source_names,
        &mut row_stats,
    )?;
    crate::commands::stats::write_stats_files(&staging, &row_stats)?;
    let input_files = match hashing.join() {
        Ok(files) => files?,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    fs::remove_dir_all(&spill_dir).ok();

    let files: Vec<String> = shards.iter().map(|s| s.file.clone()).collect();
    let fingerprint = sha256_hex(
        shards
            .iter()
            .map(|s| s.sha256.as_str())
            .collect::<String>()
            .as_bytes(),
    );
    write_file(
        &staging.join("dataset_info.json"),
        &write::dataset_info_json(&format!("{} (built by chatshards)", plan.name)),
    )?;
    write_file(
        &staging.join("state.json"),
        &write::state_json(&files, &fingerprint[..16]),
    )?;
    let manifest = manifest(
        plan,
        named,
        shards,
        input_files,
        &backend,
        processor.renderer.native(),
    );
    let manifest_json = write::pretty(&serde_json::to_value(&manifest)?);
    write_file(&staging.join("manifest.json"), &manifest_json)?;
    crate::commands::report::write_report(&staging)?;

    if out.exists() {
        fs::remove_dir_all(out)
            .with_context(|| format!("failed to replace `{}`", out.display()))?;
    }
    fs::rename(&staging, out)
        .with_context(|| format!("failed to move the dataset into `{}`", out.display()))?;
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
    if args.timings {
        printer.requested(&match timings.report(started) {
            Some(report) => report.to_string(),
            None => "--timings: the CPU clocks are read on Linux only".to_owned(),
        });
    }
    Ok(())
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
    let processor = RowProcessor {
        renderer,
        tokenizer,
        validator,
        policy: plan.policy,
        max_tokens: plan.max_tokens,
        length_policy: plan.length_policy,
        min_supervised_tokens: plan.min_supervised_tokens,
        verify_basis_points: report
            .needs_spot_checks()
            .then_some(plan.verify_basis_points),
        render_verify_basis_points,
    };
    Ok((processor, report))
}

/// Refuses to overwrite a directory that is not a previous chatshards output, or one whose
/// rows are already referenced by extracted hidden states.
fn check_output_dir(out: &Path) -> Result<()> {
    if !out.exists() {
        return Ok(());
    }
    if out.join("hidden_states").exists() {
        bail!(
            "`{}` has a `hidden_states/` folder: its row order is in use and must not change. Choose another `output.dir`",
            out.display()
        );
    }
    let empty = fs::read_dir(out)
        .with_context(|| format!("failed to read `{}`", out.display()))?
        .next()
        .is_none();
    if !empty && !out.join("manifest.json").exists() {
        bail!(
            "`{}` exists and is not a chatshards dataset (no manifest.json); refusing to overwrite it",
            out.display()
        );
    }
    Ok(())
}

/// Encoded bytes of a shard for the writer, and whether they end it.
struct ShardChunk {
    shard: usize,
    bytes: Result<Vec<u8>, WriteError>,
    rows: u64,
    ends_shard: bool,
}

/// Appends the spilled rows to the shards in key order. A thread loads and sorts the buckets
/// and builds and encodes the record batches while this one writes them (and a third hashes).
fn write_shards(
    dir: &Path,
    spill: Spill,
    total_rows: u64,
    rows_per_shard: usize,
    sources: Arc<Vec<String>>,
    stats: &mut DatasetStats,
) -> Result<Vec<write::ShardSummary>> {
    let count = total_rows.div_ceil(rows_per_shard as u64) as usize;
    let buckets = spill.finish()?;
    let (tx, rx) = std::sync::mpsc::sync_channel::<ShardChunk>(2);
    std::thread::scope(|scope| {
        // Removing a file can wait for the disk (0.35 s per 400 MB of spill measured when it
        // went through the page cache), so it runs beside the writing instead of in its way.
        let (read_tx, read) = std::sync::mpsc::channel::<PathBuf>();
        scope.spawn(move || {
            for path in read {
                fs::remove_file(&path).ok();
            }
        });
        // The next bucket is read on a thread of their own while this one is written, since
        // direct reads wait for the disk. The hand-over is a rendezvous and each buffer goes
        // back for reuse before the next is taken, so two buffers exist, not more.
        let (loaded_tx, loaded) = std::sync::mpsc::sync_channel::<Result<LoadedBucket, _>>(0);
        let (spare_tx, spare) = std::sync::mpsc::channel::<Vec<u8>>();
        scope.spawn(move || {
            let fresh = || SpilledBucket::buffer_for(&buckets);
            for bucket in &buckets {
                let loaded = Bucket::load(bucket, spare.try_recv().unwrap_or_else(|_| fresh()));
                let ok = loaded.is_ok();
                if ok {
                    let _ = read_tx.send(bucket.path.clone());
                }
                if loaded_tx.send(loaded).is_err() || !ok {
                    return;
                }
            }
        });
        scope.spawn(move || {
            let (mut shard, mut in_shard, mut seen) = (0usize, 0usize, 0u64);
            let mut builder = BatchBuilder::default();
            let mut encoder: Option<ShardEncoder> = None;
            let (mut ids, mut mask) = (Vec::new(), Vec::new());
            let arrow_err = |shard: usize, message: String| WriteError::Arrow {
                path: dir.join(shard_name(shard, count)),
                message,
            };
            let fail = |shard: usize, e: WriteError| {
                let _ = tx.send(ShardChunk {
                    shard,
                    bytes: Err(e),
                    rows: 0,
                    ends_shard: false,
                });
            };
            for loaded in loaded {
                let bucket = match loaded.and_then(Bucket::index) {
                    Ok(bucket) => bucket,
                    Err(e) => return fail(shard, e),
                };
                for row in bucket.rows() {
                    if let Err(message) = builder.push(&row, &sources) {
                        return fail(shard, arrow_err(shard, message));
                    }
                    ids.clear();
                    mask.clear();
                    row.append_to(&mut ids, &mut mask);
                    stats.add_row(usize::from(row.source), &ids, &mask);
                    in_shard += 1;
                    seen += 1;
                    let ends_shard = in_shard == rows_per_shard || seen == total_rows;
                    if builder.rows() < SHARD_BATCH_ROWS && !ends_shard {
                        continue;
                    }
                    let rows = builder.rows() as u64;
                    let bytes = (|| {
                        let batch = builder.finish()?;
                        let enc = match encoder.as_mut() {
                            Some(enc) => enc,
                            None => encoder.insert(ShardEncoder::new()?),
                        };
                        let mut bytes = enc.encode(&batch)?;
                        if ends_shard {
                            if let Some(enc) = encoder.take() {
                                bytes.extend(enc.finish()?);
                            }
                        }
                        Ok(bytes)
                    })()
                    .map_err(|message| arrow_err(shard, message));
                    let chunk = ShardChunk {
                        shard,
                        bytes,
                        rows,
                        ends_shard,
                    };
                    if tx.send(chunk).is_err() {
                        return;
                    }
                    if ends_shard {
                        shard += 1;
                        in_shard = 0;
                    }
                }
                let _ = spare_tx.send(bucket.into_buffer());
            }
        });
        let mut shards = Vec::with_capacity(count);
        let mut current: Option<ShardWriter> = None;
        for ShardChunk {
            shard,
            bytes,
            rows,
            ends_shard,
        } in rx
        {
            let bytes = bytes?;
            let writer = match current.as_mut() {
                Some(w) => w,
                None => current.insert(ShardWriter::create(dir, shard_name(shard, count))?),
            };
            writer.append(bytes, rows)?;
            if ends_shard {
                if let Some(w) = current.take() {
                    shards.push(w.finish()?);
                }
            }
        }
        if shards.len() != count {
            bail!(
                "internal error: the spill held {} shard(s) of rows, not {count}",
                shards.len()
            );
        }
        Ok(shards)
    })
}

/// Size and SHA-256 of every input file, for the manifest. Stops early (with an error nobody
/// sees) once `cancel` is set.
fn input_files(plan: &Plan, cancel: &AtomicBool, timings: &Timings) -> Result<Vec<InputFile>> {
    let mut files = Vec::new();
    for source in &plan.sources {
        for (path, shown) in source.files.iter().zip(&source.display_files) {
            let (bytes, sha256) = hash_file(path, cancel, timings)?;
            files.push(InputFile {
                source: source.name.clone(),
                path: shown.clone(),
                bytes,
                sha256,
            });
        }
    }
    Ok(files)
}

fn manifest(
    plan: &Plan,
    sources: Vec<(String, SourceStats)>,
    shards: Vec<write::ShardSummary>,
    files: Vec<InputFile>,
    backend: &BackendReport,
    native: Option<&'static str>,
) -> Manifest {
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
    Manifest {
        tool: Tool::current(),
        name: plan.name.clone(),
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
            template_kwargs: plan.template.kwargs.clone(),
            max_tokens: plan.max_tokens,
            length_policy: plan.length_policy,
            min_supervised_tokens: plan.min_supervised_tokens,
            dedup: plan.dedup,
            shuffle: plan.shuffle,
            rows_per_shard: plan.rows_per_shard,
        },
        rows,
        tokens,
        supervised_tokens,
        encoder,
        renderer,
        sources: sources.into_iter().collect(),
        shards,
    }
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

fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{suffix}"));
    dir.with_file_name(name)
}

fn create(path: &Path) -> Result<BufWriter<fs::File>> {
    let f =
        fs::File::create(path).with_context(|| format!("failed to create `{}`", path.display()))?;
    Ok(BufWriter::with_capacity(1 << 20, f))
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).with_context(|| format!("failed to write `{}`", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::{shuffle_key, TokenRow};

    /// Rows per record batch in each shard, read back with the Arrow stream reader.
    fn batch_rows(path: &Path) -> Vec<usize> {
        let file = fs::File::open(path).expect("shard");
        arrow_ipc::reader::StreamReader::try_new(file, None)
            .expect("stream")
            .map(|b| b.expect("batch").num_rows())
            .collect()
    }

    #[test]
    fn shards_end_on_their_size_and_batches_restart_in_each_shard() {
        // (rows, rows per shard): a last batch that is full, one that is not, shard sizes that
        // are and are not multiples of the batch size.
        for (total, per_shard) in [
            (999u64, 100_000usize),
            (1000, 100_000),
            (2000, 100_000),
            (2000, 1000),
            (2001, 1000),
            (2500, 1200),
            (65, 64),
        ] {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut spill = Spill::new(&dir.path().join(".spill"), true).expect("spill");
            for i in 0..total {
                let sample_id = format!("s:0:{i}");
                spill
                    .push(&TokenRow {
                        key: shuffle_key(7, &sample_id),
                        sample_id,
                        source: 0,
                        ids: vec![i as u32, 1],
                        mask: vec![0, 1],
                    })
                    .expect("push");
            }
            let mut stats = DatasetStats::new(vec![], 0);
            let shards = write_shards(
                dir.path(),
                spill,
                total,
                per_shard,
                Arc::new(vec![]),
                &mut stats,
            )
            .expect("write");
            assert_eq!(stats.file().total.rows, total);
            assert_eq!(stats.file().total.tokens, 2 * total);
            let sizes: Vec<u64> = shards.iter().map(|s| s.rows).collect();
            let mut expected = vec![per_shard as u64; (total / per_shard as u64) as usize];
            if !total.is_multiple_of(per_shard as u64) {
                expected.push(total % per_shard as u64);
            }
            assert_eq!(sizes, expected, "{total} rows, {per_shard} per shard");
            for (shard, &rows) in shards.iter().zip(&expected) {
                let batches = batch_rows(&dir.path().join(&shard.file));
                let mut want = vec![SHARD_BATCH_ROWS; rows as usize / SHARD_BATCH_ROWS];
                if !(rows as usize).is_multiple_of(SHARD_BATCH_ROWS) {
                    want.push(rows as usize % SHARD_BATCH_ROWS);
                }
                assert_eq!(batches, want, "{} of {total} rows", shard.file);
            }
        }
    }
}
