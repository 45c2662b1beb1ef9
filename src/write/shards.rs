//! The shard phase: spilled rows, bucket by bucket in key order, into the Arrow shards, with
//! the row statistics gathered on the way. One thread loads and sorts the buckets and builds and
//! encodes the record batches while the caller's thread writes them.

use super::{
    shard_name, BatchBuilder, Bucket, LoadedBucket, ShardEncoder, ShardSummary, ShardWriter, Spill,
    SpilledBucket, WriteError, SHARD_BATCH_ROWS,
};
use crate::report::stats::DatasetStats;
use anyhow::{bail, Result};
use std::path::Path;
use std::sync::Arc;

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
    /// Told the rows of each batch written (the build's progress).
    pub written: Option<&'a (dyn Fn(u64) + Sync)>,
}

/// Appends the spilled rows to the shards in key order. A thread loads and sorts the buckets
/// and builds and encodes the record batches while this one writes them (and a third hashes).
pub fn write_shards(
    dir: &Path,
    spill: Spill,
    layout: &ShardLayout,
    sources: Arc<Vec<String>>,
    stats: &mut DatasetStats,
) -> Result<Vec<ShardSummary>> {
    let ShardLayout {
        total_rows,
        rows_per_shard,
        mask_dtype,
        excluded,
        written,
    } = *layout;
    let count = total_rows.div_ceil(rows_per_shard as u64) as usize;
    let buckets = spill.finish()?;
    let (tx, rx) = std::sync::mpsc::sync_channel::<ShardChunk>(2);
    std::thread::scope(|scope| {
        // The next bucket is read on a thread of their own while this one is written, since
        // direct reads wait for the disk. The hand-over is a rendezvous and each buffer goes
        // back for reuse before the next is taken, so two buffers exist, not more.
        let (loaded_tx, loaded) = std::sync::mpsc::sync_channel::<Result<LoadedBucket, _>>(0);
        let (spare_tx, spare) = std::sync::mpsc::channel::<Vec<u8>>();
        scope.spawn(move || {
            let fresh = || SpilledBucket::buffer_for(&buckets);
            for bucket in &buckets {
                let loaded = Bucket::load(bucket, spare.try_recv().unwrap_or_else(|_| fresh()));
                // The bucket files stay until the dataset is in place: a build killed
                // while writing shards resumes from them.
                let ok = loaded.is_ok();
                if loaded_tx.send(loaded).is_err() || !ok {
                    return;
                }
            }
        });
        scope.spawn(move || {
            let (mut shard, mut in_shard, mut seen) = (0usize, 0usize, 0u64);
            let mut builder = BatchBuilder::new(mask_dtype);
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
                    // Rows tokenized but not selected (CURATION.md): `source:file:row` of the
                    // `source:file:row:segment` id.
                    if !excluded.is_empty()
                        && row
                            .sample_id
                            .rsplit_once(':')
                            .is_some_and(|(conversation, _)| excluded.contains(conversation))
                    {
                        continue;
                    }
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
                            None => encoder.insert(ShardEncoder::new(mask_dtype)?),
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
            if let Some(written) = written {
                written(rows);
            }
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
                written: None,
            };
            let shards = write_shards(dir.path(), spill, &layout, Arc::new(vec![]), &mut stats)
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
