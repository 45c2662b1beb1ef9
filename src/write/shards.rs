//! The shard phase: spilled rows, bucket by bucket in key order, into the Arrow shards, with
//! the row statistics gathered on the way.
//!
//! Shards are written at the same time (up to [`MAX_WRITERS`]), each by a thread of its own:
//! one read of the spill first counts the kept rows of every bucket, which tells where each
//! shard's rows begin (bucket and row in it). A shard's writer then reads its buckets a window at a time, builds
//! and encodes its record batches in parallel on the build's pool and appends them in order
//! (a thread of its own hashes them). A shard's file is a SHA-256 stream, so it is written by
//! one thread; the shards are many (a 913K-row build has 10). Which rows go in which batch and
//! shard depends only on the rows' order, so the bytes are the same at any thread count.

use super::{
    shard_name, BatchBuilder, Bucket, ShardEncoder, ShardError, ShardSummary, ShardWriter, Spill,
    SpilledBucket, WriteError, SHARD_BATCH_ROWS,
};
use crate::model::split::{self, Split, Target};
use crate::report::stats::DatasetStats;
use anyhow::{anyhow, bail, Result};
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Bucket bytes read at once, per pool thread and in all (shared by the shards written at the
/// same time): about a bucket per thread for a large build (a 913K-row spill has buckets of
/// about 9 MB), few enough that the windows and their encoded batches (about 1.7 times their
/// bytes) stay well inside the memory budget.
const WINDOW_BYTES_PER_THREAD: u64 = 8 << 20;
/// Measured on a 16-core host (100K rows, BENCHMARKS.md): with half of these (64 MiB, 8
/// batches) instead of 128 MiB and 16, peak RSS 833–875 MiB instead of 1,089–1,147 MiB, and
/// the same wall time within its noise.
const MAX_WINDOW_BYTES: u64 = 64 << 20;

/// Encoded batches (of a few MB each) between the encoders and the writers, in all, so that a
/// writer has work while its next window is read. More is faster and larger: measured on a
/// 16-core host, 913K rows, 4 writers: 8 batches peak at 837–854 MiB with a 2.7–2.8 s shard
/// phase, 16 at 1,071–1,097 MiB and 2.4–2.6 s, 24 at 1,145–1,173 MiB and 2.2 s (BENCHMARKS.md).
const CHUNKS_IN_FLIGHT: usize = 8;

/// Shards written at the same time, at most: each holds its window of buckets and its encoded
/// batches (about 45 MB at 913K rows), so memory grows with the writers. Measured on a 16-core
/// host, 913K rows (10 shards), with [`crate::tune_allocator`]'s purge delay: 4 writers peak
/// at 828–870 MiB, 6 at 1,055–1,087 MiB, 10 at 1,250–1,318 MiB; the shard phase 3.0 s with 4
/// against 2.3–2.6 s with 10, the build's wall time within its noise (BENCHMARKS.md).
const MAX_WRITERS: usize = 4;

/// `default`, or the environment's `name` (at least 1): `CHATSHARDS_SHARD_WRITERS` and
/// `CHATSHARDS_SHARD_BATCHES` set [`MAX_WRITERS`] and [`CHUNKS_IN_FLIGHT`], to measure the
/// memory / speed trade-off.
fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(default, |n| n.max(1))
}

/// Encoded bytes of a shard for its writer.
struct ShardChunk {
    bytes: Result<Vec<u8>, WriteError>,
    rows: u64,
}

/// What the shard writer writes, besides the spilled rows.
pub struct ShardLayout<'a> {
    pub total_rows: u64,
    pub rows_per_shard: usize,
    pub mask_dtype: crate::tokenize::mask_config::MaskDtype,
    /// `source:file:row` of spilled conversations that were not selected (left out).
    pub excluded: &'a std::collections::HashSet<String>,
    /// `output.validation`'s target and seed: the validation conversations' rows are written
    /// after all the training rows (each side in key order).
    pub validation: Option<(Target, u64)>,
    /// Conversations split as one with another (pre-tokenized rows sharing an id).
    pub groups: &'a split::Groups,
    /// Told the rows of each batch written (the build's progress).
    pub written: Option<&'a (dyn Fn(u64) + Sync)>,
}

/// One side's rows and its run of shards.
struct Pass {
    /// `None`: no split; else whether the pass writes the validation rows.
    side: Option<bool>,
    rows: u64,
    /// The output shard index of its first shard, and how many it writes.
    first_shard: usize,
    shards: usize,
}

impl Pass {
    fn new(side: Option<bool>, rows: u64, rows_per_shard: usize, first_shard: usize) -> Pass {
        Pass {
            side,
            rows,
            first_shard,
            shards: rows.div_ceil(rows_per_shard as u64) as usize,
        }
    }
}

/// One output shard's rows: the kept rows of a run of buckets, from the `skip`-th kept row of
/// the first.
struct ShardJob<'a> {
    /// The output shard index (numbered across the sides).
    shard: usize,
    side: Option<bool>,
    buckets: &'a [SpilledBucket],
    skip: usize,
    rows: u64,
}

/// The rows of one record batch: (bucket, row in it) in output order.
struct BatchPlan {
    rows: Vec<(Arc<Bucket>, usize)>,
    /// The first batch of its shard (its bytes open the stream with the schema).
    starts_shard: bool,
    ends_shard: bool,
}

/// What every shard's writer shares.
struct Shared<'a> {
    dir: &'a Path,
    pool: &'a rayon::ThreadPool,
    mask_dtype: crate::tokenize::mask_config::MaskDtype,
    sources: &'a [String],
    keep: &'a (dyn Fn(Option<bool>, &str) -> bool + Sync),
    locals: &'a [Mutex<DatasetStats>],
    written: Option<&'a (dyn Fn(u64) + Sync)>,
    /// Bucket bytes a writer reads at once, and its encoded batches in flight.
    window_bytes: u64,
    chunks_in_flight: usize,
    /// Set by the first writer that fails: the others stop at their next window.
    failed: &'a AtomicBool,
}

/// Appends the spilled rows to the shards in key order, on `pool` (see the module doc); with
/// `validation`, the training rows first and then the validation rows, and the split.
pub fn write_shards(
    dir: &Path,
    spill: Spill,
    layout: &ShardLayout,
    sources: Arc<Vec<String>>,
    stats: &mut DatasetStats,
    pool: &rayon::ThreadPool,
) -> Result<(Vec<ShardSummary>, Option<Split>)> {
    let threads = pool.current_num_threads().max(1) as u64;
    let window_bytes = (WINDOW_BYTES_PER_THREAD * threads).min(MAX_WINDOW_BYTES);
    write_windowed(dir, spill, layout, sources, stats, pool, window_bytes)
}

/// [`write_shards`], reading windows of about `window_bytes` of buckets in all.
fn write_windowed(
    dir: &Path,
    spill: Spill,
    layout: &ShardLayout,
    sources: Arc<Vec<String>>,
    stats: &mut DatasetStats,
    pool: &rayon::ThreadPool,
    window_bytes: u64,
) -> Result<(Vec<ShardSummary>, Option<Split>)> {
    let ShardLayout {
        total_rows,
        rows_per_shard,
        mask_dtype,
        excluded,
        validation,
        groups,
        written,
    } = *layout;
    let buckets = spill.finish()?;
    // Rows tokenized but not selected (CURATION.md): `source:file:row` of the
    // `source:file:row:segment` id.
    let kept = |id: &str| excluded.is_empty() || !excluded.contains(split::conversation_of(id));
    let split = match validation {
        None => None,
        Some((target, seed)) => {
            let conversations =
                conversation_rows(&buckets, &kept, groups, seed, sources.len(), pool)?;
            Some(split::choose(target, seed, &conversations).map_err(|e| anyhow!(e))?)
        }
    };
    // Each side its own run of shards: the training shards, then the validation shards in
    // their folder.
    let passes: Vec<Pass> = match &split {
        None => vec![Pass::new(None, total_rows, rows_per_shard, 0)],
        Some(split) => {
            let t = split.total();
            let train = Pass::new(Some(false), t.train_rows, rows_per_shard, 0);
            let first = train.first_shard + train.shards;
            vec![
                train,
                Pass::new(Some(true), t.validation_rows, rows_per_shard, first),
            ]
        }
    };
    if passes.iter().any(|p| p.side == Some(true)) {
        let folder = dir.join(super::VALIDATION_DIR);
        std::fs::create_dir(&folder).map_err(|e| WriteError::Io(folder, e))?;
    }
    let chosen = &split;
    let keep = move |side: Option<bool>, id: &str| {
        kept(id)
            && match (side, chosen) {
                (Some(validation), Some(split)) => split.is_validation(groups, id) == validation,
                _ => true,
            }
    };
    // Every row is written where none is left out and there is no split: the spill's own
    // counts then spare a read of every bucket.
    let everything = excluded.is_empty() && split.is_none();
    let counts = match buckets
        .iter()
        .map(SpilledBucket::rows)
        .collect::<Option<Vec<u64>>>()
    {
        Some(rows) if everything => vec![rows.into_iter().map(|n| n as usize).collect()],
        _ => kept_rows(&buckets, &passes, &keep, pool)?,
    };
    let jobs = shard_jobs(&buckets, &passes, &counts, rows_per_shard)?;
    let threads = pool.current_num_threads().max(1);
    // Each pool thread counts into its own statistics (merged at the end: sums, minima and
    // maxima, so the order does not matter).
    let locals: Vec<Mutex<DatasetStats>> = (0..threads)
        .map(|_| Mutex::new(stats.empty_like()))
        .collect();
    let writers = jobs
        .len()
        .min(threads)
        .min(setting("CHATSHARDS_SHARD_WRITERS", MAX_WRITERS))
        .max(1);
    let failed = AtomicBool::new(false);
    let shared = Shared {
        dir,
        pool,
        mask_dtype,
        sources: &sources,
        keep: &keep,
        locals: &locals,
        written,
        window_bytes: (window_bytes / writers as u64).max(1),
        chunks_in_flight: (setting("CHATSHARDS_SHARD_BATCHES", CHUNKS_IN_FLIGHT) / writers).max(2),
        failed: &failed,
    };
    let name = |shard: usize| shard_file(&passes, shard);
    let next = AtomicUsize::new(0);
    // A job's outcome: `Ok(None)` when it stopped because another shard failed.
    let done: Vec<Mutex<Option<Result<Option<ShardSummary>>>>> =
        jobs.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..writers {
            let (shared, jobs, done, next, name) = (&shared, &jobs, &done, &next, &name);
            std::thread::Builder::new()
                .name("shard-writer".to_owned())
                .spawn_scoped(scope, move || loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    if shared.failed.load(Ordering::Relaxed) {
                        break;
                    }
                    let result = write_shard(shared, job, name(job.shard));
                    if result.is_err() {
                        shared.failed.store(true, Ordering::Relaxed);
                    }
                    *done[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
                })
                .expect("failed to spawn thread");
        }
    });
    let outcomes: Vec<_> = done
        .into_iter()
        .map(|slot| slot.into_inner().unwrap_or_else(|p| p.into_inner()))
        .collect();
    // The first failure, in shard order, is the one reported (not the shards it stopped).
    let mut shards = Vec::with_capacity(jobs.len());
    for outcome in outcomes {
        shards.push(outcome.transpose()?.flatten());
    }
    let Some(shards) = shards.into_iter().collect::<Option<Vec<_>>>() else {
        bail!("internal error: a shard was not written");
    };
    for local in locals {
        let local = local
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        stats.merge(&local);
    }
    Ok((shards, split))
}

/// The file of output shard `shard` (numbered across the sides).
fn shard_file(passes: &[Pass], shard: usize) -> String {
    let pass = passes
        .iter()
        .find(|p| shard < p.first_shard + p.shards)
        .unwrap_or(&passes[passes.len() - 1]);
    let file = shard_name(shard - pass.first_shard, pass.shards);
    match pass.side {
        Some(true) => format!("{}/{file}", super::VALIDATION_DIR),
        _ => file,
    }
}

/// The kept rows of each bucket for each pass (one read of the spill, in parallel).
fn kept_rows(
    buckets: &[SpilledBucket],
    passes: &[Pass],
    keep: &(dyn Fn(Option<bool>, &str) -> bool + Sync),
    pool: &rayon::ThreadPool,
) -> Result<Vec<Vec<usize>>, WriteError> {
    let counted: Vec<Result<Vec<usize>, WriteError>> = pool.install(|| {
        buckets
            .par_iter()
            .map(|spilled| {
                let bucket = Bucket::read(spilled, Vec::new())?;
                Ok(passes
                    .iter()
                    .map(|pass| {
                        bucket
                            .rows()
                            .filter(|r| keep(pass.side, r.sample_id))
                            .count()
                    })
                    .collect())
            })
            .collect()
    });
    // [pass][bucket]
    let mut counts = vec![Vec::with_capacity(buckets.len()); passes.len()];
    for bucket in counted {
        for (pass, n) in counts.iter_mut().zip(bucket?) {
            pass.push(n);
        }
    }
    Ok(counts)
}

/// Where each output shard's rows begin and end, from the kept rows of each bucket.
fn shard_jobs<'a>(
    buckets: &'a [SpilledBucket],
    passes: &[Pass],
    counts: &[Vec<usize>],
    rows_per_shard: usize,
) -> Result<Vec<ShardJob<'a>>> {
    let mut jobs = Vec::new();
    for (pass, counts) in passes.iter().zip(counts) {
        let held: u64 = counts.iter().map(|&n| n as u64).sum();
        if held != pass.rows {
            bail!(
                "internal error: the spill held {held} row(s) to write, not {}",
                pass.rows
            );
        }
        // (bucket, kept rows of it before the cursor)
        let (mut bucket, mut into) = (0usize, 0usize);
        for s in 0..pass.shards {
            let rows = (pass.rows - (s * rows_per_shard) as u64).min(rows_per_shard as u64);
            while bucket < counts.len() && into == counts[bucket] {
                (bucket, into) = (bucket + 1, 0);
            }
            let (first, skip) = (bucket, into);
            // Walk past this shard's rows.
            let mut left = rows as usize;
            while left > 0 {
                let here = (counts[bucket] - into).min(left);
                left -= here;
                into += here;
                if left > 0 {
                    (bucket, into) = (bucket + 1, 0);
                }
            }
            jobs.push(ShardJob {
                shard: pass.first_shard + s,
                side: pass.side,
                buckets: &buckets[first..=bucket],
                skip,
                rows,
            });
        }
    }
    Ok(jobs)
}

/// Writes one shard: its buckets read a window at a time, its batches encoded on the pool,
/// appended in order by this thread.
fn write_shard(shared: &Shared, job: &ShardJob, name: String) -> Result<Option<ShardSummary>> {
    let Shared {
        dir,
        pool,
        mask_dtype,
        sources,
        keep,
        locals,
        written,
        window_bytes,
        chunks_in_flight,
        failed,
    } = *shared;
    let arrow_err = |error: ShardError| WriteError::Arrow {
        path: dir.join(&name),
        error,
    };
    let (tx, rx) = std::sync::mpsc::sync_channel::<ShardChunk>(chunks_in_flight);
    std::thread::scope(|scope| {
        let planner = std::thread::Builder::new().name("shard-plan".to_owned());
        planner
            .spawn_scoped(scope, move || {
                let fail = |e: WriteError| {
                    let _ = tx.send(ShardChunk {
                        bytes: Err(e),
                        rows: 0,
                    });
                };
                let (mut skip, mut taken, mut batches) = (job.skip, 0u64, 0usize);
                let mut pending: Vec<(Arc<Bucket>, usize)> = Vec::new();
                for window in windows(job.buckets, window_bytes) {
                    if taken == job.rows || failed.load(Ordering::Relaxed) {
                        return;
                    }
                    let loaded: Vec<Result<Bucket, WriteError>> = pool.install(|| {
                        window
                            .par_iter()
                            .map(|spilled| {
                                let mut bucket = Bucket::read(spilled, Vec::new())?;
                                bucket.retain(|id| keep(job.side, id));
                                Ok(bucket)
                            })
                            .collect()
                    });
                    let mut plans = Vec::new();
                    for bucket in loaded {
                        let bucket = match bucket {
                            Ok(bucket) => Arc::new(bucket),
                            Err(e) => return fail(e),
                        };
                        let from = skip.min(bucket.len());
                        skip -= from;
                        for i in from..bucket.len() {
                            if taken == job.rows {
                                break;
                            }
                            pending.push((Arc::clone(&bucket), i));
                            taken += 1;
                            let ends_shard = taken == job.rows;
                            if pending.len() < SHARD_BATCH_ROWS && !ends_shard {
                                continue;
                            }
                            plans.push(BatchPlan {
                                rows: std::mem::take(&mut pending),
                                starts_shard: batches == 0,
                                ends_shard,
                            });
                            batches += 1;
                        }
                    }
                    // Encoded a few at a time, as many as the channel holds: a window's
                    // batches all encoded at once doubled its memory.
                    for group in plans.chunks(chunks_in_flight) {
                        let encoded: Vec<ShardChunk> = pool.install(|| {
                            group
                                .par_iter()
                                .map(|plan| ShardChunk {
                                    bytes: encode(plan, mask_dtype, sources, locals)
                                        .map_err(arrow_err),
                                    rows: plan.rows.len() as u64,
                                })
                                .collect()
                        });
                        for chunk in encoded {
                            let failed = chunk.bytes.is_err();
                            if tx.send(chunk).is_err() || failed {
                                return;
                            }
                        }
                    }
                }
            })
            .expect("failed to spawn thread");
        let mut writer = ShardWriter::create(dir, name.clone())?;
        let mut rows = 0u64;
        for chunk in rx {
            writer.append(chunk.bytes?, chunk.rows)?;
            rows += chunk.rows;
            if let Some(written) = written {
                written(chunk.rows);
            }
        }
        if rows != job.rows {
            if failed.load(Ordering::Relaxed) {
                // Another shard failed; its error is the one reported.
                return Ok(None);
            }
            bail!(
                "internal error: shard `{name}` got {rows} of its {} row(s)",
                job.rows
            );
        }
        Ok(Some(writer.finish()?))
    })
}

/// The kept conversations of each source, by their split key, with their numbers of rows
/// (one read of the spill).
fn conversation_rows(
    buckets: &[SpilledBucket],
    kept: &(dyn Fn(&str) -> bool + Sync),
    groups: &split::Groups,
    seed: u64,
    sources: usize,
    pool: &rayon::ThreadPool,
) -> Result<Vec<HashMap<u64, u64>>, WriteError> {
    let counted: Vec<Result<Vec<HashMap<u64, u64>>, WriteError>> = pool.install(|| {
        buckets
            .par_iter()
            .map(|spilled| {
                let bucket = Bucket::read(spilled, Vec::new())?;
                let mut counts = vec![HashMap::new(); sources];
                for i in 0..bucket.len() {
                    let row = bucket.row(i);
                    if !kept(row.sample_id) {
                        continue;
                    }
                    let key = split::conversation_key(seed, split::unit_of(groups, row.sample_id));
                    if let Some(source) = counts.get_mut(usize::from(row.source)) {
                        *source.entry(key).or_insert(0) += 1;
                    }
                }
                Ok(counts)
            })
            .collect()
    });
    let mut all = vec![HashMap::new(); sources];
    for counts in counted {
        for (into, from) in all.iter_mut().zip(counts?) {
            for (key, n) in from {
                *into.entry(key).or_insert(0) += n;
            }
        }
    }
    Ok(all)
}

/// Consecutive runs of buckets of about `bytes` in all (at least one bucket each).
fn windows(buckets: &[SpilledBucket], bytes: u64) -> Vec<&[SpilledBucket]> {
    let mut windows = Vec::new();
    let (mut start, mut size) = (0, 0u64);
    for (i, bucket) in buckets.iter().enumerate() {
        if i > start && size + bucket.len() > bytes {
            windows.push(&buckets[start..i]);
            (start, size) = (i, 0);
        }
        size += bucket.len();
    }
    if start < buckets.len() {
        windows.push(&buckets[start..]);
    }
    windows
}

/// One record batch's IPC bytes (with the stream's schema before it when it opens a shard, and
/// the stream's end after it when it closes one); its rows are counted in the calling pool
/// thread's statistics.
fn encode(
    plan: &BatchPlan,
    mask_dtype: crate::tokenize::mask_config::MaskDtype,
    sources: &[String],
    locals: &[Mutex<DatasetStats>],
) -> Result<Vec<u8>, ShardError> {
    let mut builder = BatchBuilder::new(mask_dtype);
    let (mut ids, mut mask) = (Vec::new(), Vec::new());
    let slot = rayon::current_thread_index().unwrap_or(0) % locals.len();
    let mut stats = locals[slot]
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for (bucket, i) in &plan.rows {
        let row = bucket.row(*i);
        builder.push(&row, sources)?;
        ids.clear();
        mask.clear();
        row.append_to(&mut ids, &mut mask);
        stats.add_row(usize::from(row.source), &ids, &mask);
    }
    drop(stats);
    let batch = builder.finish()?;
    let mut encoder = if plan.starts_shard {
        ShardEncoder::new(mask_dtype)?
    } else {
        ShardEncoder::continuing(mask_dtype)?
    };
    let mut bytes = encoder.encode(&batch)?;
    if plan.ends_shard {
        bytes.extend(encoder.finish()?);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::{shuffle_key, TokenRow};

    /// Rows per record batch in each shard, read back with the Arrow stream reader.
    fn batch_rows(path: &Path) -> Vec<usize> {
        let file = std::fs::File::open(path).expect("shard");
        arrow_ipc::reader::StreamReader::try_new(file, None)
            .expect("stream")
            .map(|b| b.expect("batch").num_rows())
            .collect()
    }

    #[test]
    fn shards_are_the_same_bytes_at_any_thread_count_and_window() {
        // Rows spread over all 256 buckets; some conversations left out; shards and batches
        // that end inside buckets and windows; more shards than writers (`MAX_WRITERS`).
        let write = |threads: usize, window_bytes: u64| {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut spill = Spill::new(&dir.path().join(".spill"), true).expect("spill");
            for i in 0..2600u32 {
                let sample_id = format!("s:0:{}:{}", i / 2, i % 2);
                spill
                    .push(&TokenRow {
                        key: shuffle_key(7, &sample_id),
                        sample_id,
                        source: (i % 2) as u16,
                        ids: (0..(i % 17) + 1).collect(),
                        mask: (0..(i % 17) + 1).map(|t| (t % 2) as u8).collect(),
                    })
                    .expect("push");
            }
            let excluded = (0..1300).step_by(7).map(|c| format!("s:0:{c}")).collect();
            let layout = ShardLayout {
                total_rows: 2600 - 2 * 186,
                rows_per_shard: 300,
                mask_dtype: Default::default(),
                excluded: &excluded,
                validation: None,
                groups: &Default::default(),
                written: None,
            };
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("pool");
            let mut stats = DatasetStats::new(vec!["a".into(), "b".into()], 20);
            let sources = Arc::new(vec!["a".to_owned(), "b".to_owned()]);
            let shards = write_windowed(
                dir.path(),
                spill,
                &layout,
                sources,
                &mut stats,
                &pool,
                window_bytes,
            )
            .expect("write")
            .0;
            let freq = (
                stats.token_freq_all().to_vec(),
                stats.token_freq_supervised().to_vec(),
            );
            let stats = serde_json::to_string(&stats.file()).expect("stats");
            (shards, stats, freq)
        };
        let one = write(1, u64::MAX);
        assert_eq!(one.0.len(), 8);
        assert!(one.0.len() > MAX_WRITERS);
        assert_eq!(one.0.iter().map(|s| s.rows).sum::<u64>(), 2600 - 2 * 186);
        for (threads, window) in [(3, 1), (4, 2000), (2, 1 << 20), (8, 3000)] {
            assert_eq!(
                write(threads, window),
                one,
                "{threads} threads, window {window}"
            );
        }
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
            let excluded = Default::default();
            let layout = ShardLayout {
                total_rows: total,
                rows_per_shard: per_shard,
                mask_dtype: Default::default(),
                excluded: &excluded,
                validation: None,
                groups: &Default::default(),
                written: None,
            };
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(3)
                .build()
                .expect("pool");
            let shards = write_shards(
                dir.path(),
                spill,
                &layout,
                Arc::new(vec![]),
                &mut stats,
                &pool,
            )
            .expect("write")
            .0;
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
