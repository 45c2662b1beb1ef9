//! The shard phase: spilled rows, bucket by bucket in key order, into the Arrow shards, with
//! the row statistics gathered on the way. Buckets are read and sorted, and record batches
//! built and encoded, in parallel on the build's pool, a window of buckets at a time; the
//! caller's thread writes the encoded batches in order (and a thread per shard hashes them).
//! Which rows go in which batch and shard depends only on the rows' order, so the bytes are the
//! same at any thread count.

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
use std::sync::{Arc, Mutex};

/// Bucket bytes read at once, per pool thread and in all: about a bucket per thread for a
/// large build (a 913K-row spill has buckets of about 9 MB), few enough that the window and
/// its encoded batches (about 1.7 times its bytes) stay well inside the memory budget.
const WINDOW_BYTES_PER_THREAD: u64 = 8 << 20;
const MAX_WINDOW_BYTES: u64 = 128 << 20;

/// Encoded batches (of a few MB each) between the encoders and the writer, so that the writer
/// has work while the next window is read.
const CHUNKS_IN_FLIGHT: usize = 16;

/// Encoded bytes of a shard for the writer, and whether they end it.
struct ShardChunk {
    shard: usize,
    bytes: Result<Vec<u8>, WriteError>,
    rows: u64,
    ends_shard: bool,
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

/// One side's pass over the spill and its run of shards.
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

/// The rows of one record batch: (bucket, row in it) in output order.
struct BatchPlan {
    shard: usize,
    rows: Vec<(Arc<Bucket>, usize)>,
    /// The first batch of its shard (its bytes open the stream with the schema).
    starts_shard: bool,
    ends_shard: bool,
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

/// [`write_shards`], reading windows of about `window_bytes` of buckets.
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
    // One pass over the buckets per side (whether its rows are validation rows), each side
    // its own run of shards: the training shards, then the validation shards in their folder.
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
    let count: usize = passes.iter().map(|p| p.shards).sum();
    let passes = &passes;
    // The file of output shard `shard` (numbered across the sides).
    let name = move |shard: usize| {
        let pass = passes
            .iter()
            .find(|p| shard < p.first_shard + p.shards)
            .unwrap_or(&passes[passes.len() - 1]);
        let file = shard_name(shard - pass.first_shard, pass.shards);
        match pass.side {
            Some(true) => format!("{}/{file}", super::VALIDATION_DIR),
            _ => file,
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
    let threads = pool.current_num_threads().max(1);
    // Each pool thread counts into its own statistics (merged at the end: sums, minima and
    // maxima, so the order does not matter).
    let locals: Vec<Mutex<DatasetStats>> = (0..threads)
        .map(|_| Mutex::new(stats.empty_like()))
        .collect();
    let (tx, rx) = std::sync::mpsc::sync_channel::<ShardChunk>(CHUNKS_IN_FLIGHT);
    let shards = std::thread::scope(|scope| {
        let locals = &locals;
        let planner = std::thread::Builder::new().name("shard-plan".to_owned());
        planner
            .spawn_scoped(scope, move || {
                let arrow_err = |shard: usize, error: ShardError| WriteError::Arrow {
                    path: dir.join(name(shard)),
                    error,
                };
                let fail = |shard: usize, e: WriteError| {
                    let _ = tx.send(ShardChunk {
                        shard,
                        bytes: Err(e),
                        rows: 0,
                        ends_shard: false,
                    });
                };
                let (mut shard, mut in_shard) = (0usize, 0usize);
                let mut batch_in_shard = 0usize;
                // Rows of a batch not full at the end of a window: it goes on in the next.
                let mut pending: Vec<(Arc<Bucket>, usize)> = Vec::new();
                let windows = windows(&buckets, window_bytes);
                // Rows written of the current side (a side's last row ends its last shard).
                let (mut seen, mut in_pass) = (0u64, 0usize);
                for (index, pass, window) in passes
                    .iter()
                    .enumerate()
                    .flat_map(|(i, pass)| windows.iter().map(move |w| (i, pass, w)))
                {
                    let side = pass.side;
                    if index != in_pass {
                        (in_pass, seen) = (index, 0);
                    }
                    let loaded: Vec<Result<Bucket, WriteError>> = pool.install(|| {
                        window
                            .par_iter()
                            .map(|spilled| {
                                let mut bucket = Bucket::read(spilled, Vec::new())?;
                                bucket.retain(|id| keep(side, id));
                                Ok(bucket)
                            })
                            .collect()
                    });
                    let mut plans = Vec::new();
                    for bucket in loaded {
                        let bucket = match bucket {
                            Ok(bucket) => Arc::new(bucket),
                            Err(e) => return fail(shard, e),
                        };
                        for i in 0..bucket.len() {
                            pending.push((Arc::clone(&bucket), i));
                            in_shard += 1;
                            seen += 1;
                            let ends_shard = in_shard == rows_per_shard || seen == pass.rows;
                            if pending.len() < SHARD_BATCH_ROWS && !ends_shard {
                                continue;
                            }
                            plans.push(BatchPlan {
                                shard,
                                rows: std::mem::take(&mut pending),
                                starts_shard: batch_in_shard == 0,
                                ends_shard,
                            });
                            batch_in_shard += 1;
                            if ends_shard {
                                shard += 1;
                                in_shard = 0;
                                batch_in_shard = 0;
                            }
                        }
                    }
                    let encoded: Vec<ShardChunk> = pool.install(|| {
                        plans
                            .par_iter()
                            .map(|plan| ShardChunk {
                                shard: plan.shard,
                                bytes: encode(plan, mask_dtype, &sources, locals)
                                    .map_err(|error| arrow_err(plan.shard, error)),
                                rows: plan.rows.len() as u64,
                                ends_shard: plan.ends_shard,
                            })
                            .collect()
                    });
                    drop(plans);
                    for chunk in encoded {
                        let failed = chunk.bytes.is_err();
                        if tx.send(chunk).is_err() || failed {
                            return;
                        }
                    }
                }
            })
            .expect("failed to spawn thread");
        // A finished shard is synced (and its hash completed) on a thread of its own, while
        // the next ones are written: the sync waits on the device.
        let mut finishing = Vec::with_capacity(count);
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
                None => current.insert(ShardWriter::create(dir, name(shard))?),
            };
            writer.append(bytes, rows)?;
            if let Some(written) = written {
                written(rows);
            }
            if ends_shard {
                if let Some(w) = current.take() {
                    let sync = std::thread::Builder::new().name("shard-sync".to_owned());
                    let finish = sync
                        .spawn_scoped(scope, move || w.finish())
                        .expect("failed to spawn thread");
                    finishing.push(finish);
                }
            }
        }
        let mut shards = Vec::with_capacity(finishing.len());
        for finish in finishing {
            match finish.join() {
                Ok(shard) => shards.push(shard?),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        if shards.len() != count {
            bail!(
                "internal error: the spill held {} shard(s) of rows, not {count}",
                shards.len()
            );
        }
        Ok(shards)
    })?;
    for local in locals {
        let local = local
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        stats.merge(&local);
    }
    Ok((shards, split))
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
        // that end inside buckets and windows.
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
                rows_per_shard: 700,
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
        assert_eq!(one.0.len(), 4);
        assert_eq!(one.0.iter().map(|s| s.rows).sum::<u64>(), 2600 - 2 * 186);
        for (threads, window) in [(3, 1), (4, 2000), (2, 1 << 20)] {
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
