//! Bucketed spill files: the external shuffle. Rows go to one of up to 256 buckets by the top
//! bits of their key; reading a bucket back and sorting it yields the global key order.

use super::direct::{read_prefix, OutputFile, ReadBack};
use super::{TokenRow, WriteError};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Bytes per write of a bucket: 256 buckets open at once stay at 16 MiB of buffers.
const BUCKET_BLOCK: usize = 64 << 10;

/// Rows per bucket when not shuffling (keys are sequence numbers): small enough that a few
/// buckets in memory at once stay far below the memory budget, even for long rows.
const SEQUENTIAL_BUCKET_ROWS: u64 = 1 << 13;

/// The shuffle key of a row: the first 8 bytes of SHA-256(seed ‖ sample_id). Stable across
/// versions, platforms and thread counts by construction.
pub fn shuffle_key(seed: u64, sample_id: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(sample_id.as_bytes());
    let d = h.finalize();
    let mut k = [0u8; 8];
    k.copy_from_slice(&d[..8]);
    u64::from_be_bytes(k)
}

pub struct Spill {
    dir: PathBuf,
    shuffled: bool,
    /// Written around the page cache, like the outputs (see `direct`): the spill is as large
    /// as the shards, and read back once.
    buckets: Vec<Option<OutputFile>>,
    rows: u64,
    /// One encoded row, written with a single call.
    scratch: Vec<u8>,
}

impl Spill {
    pub fn new(dir: &Path, shuffled: bool) -> Result<Self, WriteError> {
        std::fs::create_dir_all(dir).map_err(|e| WriteError::Io(dir.to_owned(), e))?;
        Ok(Spill {
            dir: dir.to_owned(),
            shuffled,
            buckets: Vec::new(),
            rows: 0,
            scratch: Vec::new(),
        })
    }

    fn bucket_of(&self, key: u64) -> usize {
        if self.shuffled {
            (key >> 56) as usize
        } else {
            (key / SEQUENTIAL_BUCKET_ROWS) as usize
        }
    }

    fn path(&self, bucket: usize) -> PathBuf {
        self.dir.join(format!("bucket-{bucket:06}.bin"))
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn push(&mut self, row: &TokenRow) -> Result<(), WriteError> {
        let b = self.bucket_of(row.key);
        if self.buckets.len() <= b {
            self.buckets.resize_with(b + 1, || None);
        }
        if self.buckets[b].is_none() {
            let path = self.path(b);
            let file =
                OutputFile::with_block(&path, BUCKET_BLOCK).map_err(|e| WriteError::Io(path, e))?;
            self.buckets[b] = Some(file);
        }
        // The bucket's path is formatted only for an error, not for every row.
        let Some(w) = self.buckets[b].as_mut() else {
            return Err(WriteError::Corrupt(self.path(b)));
        };
        encode(row, &mut self.scratch);
        if let Err(e) = w.write_all(&self.scratch) {
            return Err(WriteError::Io(self.path(b), e));
        }
        self.rows += 1;
        Ok(())
    }

    /// Flushes all buckets and returns them in key order, ready for [`Bucket::load`].
    pub fn finish(mut self) -> Result<Vec<SpilledBucket>, WriteError> {
        let mut buckets = Vec::new();
        for (b, w) in std::mem::take(&mut self.buckets).into_iter().enumerate() {
            if let Some(mut w) = w {
                let path = self.path(b);
                let len = w
                    .finish_padded()
                    .map_err(|e| WriteError::Io(path.clone(), e))?;
                buckets.push(SpilledBucket { path, len });
            }
        }
        Ok(buckets)
    }
}

/// A finished bucket file and the length of its rows (the file may be padded past it).
#[derive(Debug, Clone)]
pub struct SpilledBucket {
    pub path: PathBuf,
    len: u64,
}

/// A bucket's bytes, read back but not yet indexed (so that the reading, which waits for the
/// disk, can run ahead on a thread of its own).
pub struct LoadedBucket {
    path: PathBuf,
    data: ReadBack,
}

/// One spilled row as stored in a [`Bucket`]: offsets into its bytes.
struct RowAt {
    key: u64,
    source: u16,
    /// Range of the sample id in [`Bucket::sample_ids`].
    sample_id: std::ops::Range<usize>,
    /// Offset of the first id in the bucket's bytes; the mask follows the ids.
    ids: usize,
    len: usize,
}

/// A spilled row read back, borrowed from its [`Bucket`].
pub struct SpilledRow<'a> {
    pub sample_id: &'a str,
    pub source: u16,
    /// The ids, 4 little-endian bytes each.
    ids_le: &'a [u8],
    pub mask: &'a [u8],
}

impl SpilledRow<'_> {
    pub fn len(&self) -> usize {
        self.mask.len()
    }

    pub fn is_empty(&self) -> bool {
        self.mask.is_empty()
    }

    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.ids_le
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }
}

/// A bucket file read back whole into one buffer, its rows indexed in (key, sample_id) order:
/// one read and no allocation per row, where decoding row by row cost more than the rest of
/// the shard writing together.
pub struct Bucket {
    data: ReadBack,
    sample_ids: String,
    rows: Vec<RowAt>,
}

impl Bucket {
    /// Reads `bucket` and indexes its rows; `buffer` is reused (its old contents dropped).
    pub fn read(bucket: &SpilledBucket, buffer: Vec<u8>) -> Result<Bucket, WriteError> {
        Bucket::index(Bucket::load(bucket, buffer)?)
    }

    /// Reads the bytes of `bucket` into `buffer`.
    pub fn load(bucket: &SpilledBucket, buffer: Vec<u8>) -> Result<LoadedBucket, WriteError> {
        let data = read_prefix(&bucket.path, bucket.len, buffer)
            .map_err(|e| WriteError::Io(bucket.path.clone(), e))?;
        Ok(LoadedBucket {
            path: bucket.path.clone(),
            data,
        })
    }

    /// Indexes the rows of a loaded bucket in (key, sample_id) order.
    pub fn index(loaded: LoadedBucket) -> Result<Bucket, WriteError> {
        let LoadedBucket { path, data } = loaded;
        let bytes = data.bytes();
        let corrupt = || WriteError::Corrupt(path.clone());
        let mut sample_ids = String::new();
        let mut rows = Vec::new();
        let mut at = 0usize;
        while at < bytes.len() {
            let row = parse_row(bytes, &mut at, &mut sample_ids).ok_or_else(corrupt)?;
            rows.push(row);
        }
        // Keys and sample ids are unique in a build; the position keeps any tie in write order.
        rows.sort_unstable_by(|a, b| {
            (a.key, &sample_ids[a.sample_id.clone()], a.ids).cmp(&(
                b.key,
                &sample_ids[b.sample_id.clone()],
                b.ids,
            ))
        });
        Ok(Bucket {
            data,
            sample_ids,
            rows,
        })
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows in (key, sample_id) order.
    pub fn rows(&self) -> impl Iterator<Item = SpilledRow<'_>> {
        let data = self.data.bytes();
        self.rows.iter().map(move |r| {
            let mask = r.ids + 4 * r.len;
            SpilledRow {
                sample_id: &self.sample_ids[r.sample_id.clone()],
                source: r.source,
                ids_le: &data[r.ids..mask],
                mask: &data[mask..mask + r.len],
            }
        })
    }

    /// The buffer, for the next bucket.
    pub fn into_buffer(self) -> Vec<u8> {
        self.data.into_buffer()
    }
}

/// Parses the row at `*at` (the layout [`encode`] writes), checking every length against the
/// buffer; `None` if the bytes are not a whole row.
fn parse_row(data: &[u8], at: &mut usize, sample_ids: &mut String) -> Option<RowAt> {
    let mut take = |n: usize| -> Option<(usize, &[u8])> {
        let start = *at;
        let end = start.checked_add(n)?;
        let bytes = data.get(start..end)?;
        *at = end;
        Some((start, bytes))
    };
    let key = u64::from_le_bytes(take(8)?.1.try_into().ok()?);
    let source = u16::from_le_bytes(take(2)?.1.try_into().ok()?);
    let id_len = u32::from_le_bytes(take(4)?.1.try_into().ok()?) as usize;
    let sample_id = std::str::from_utf8(take(id_len)?.1).ok()?;
    let start = sample_ids.len();
    sample_ids.push_str(sample_id);
    let len = u32::from_le_bytes(take(4)?.1.try_into().ok()?) as usize;
    let (ids, _) = take(len.checked_mul(4)?)?;
    take(len)?;
    Some(RowAt {
        key,
        source,
        sample_id: start..sample_ids.len(),
        ids,
        len,
    })
}

fn encode(row: &TokenRow, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(18 + row.sample_id.len() + row.ids.len() * 5);
    out.extend_from_slice(&row.key.to_le_bytes());
    out.extend_from_slice(&row.source.to_le_bytes());
    out.extend_from_slice(&(row.sample_id.len() as u32).to_le_bytes());
    out.extend_from_slice(row.sample_id.as_bytes());
    out.extend_from_slice(&(row.ids.len() as u32).to_le_bytes());
    let ids = out.len();
    out.resize(ids + 4 * row.ids.len(), 0);
    for (slot, id) in out[ids..].chunks_exact_mut(4).zip(&row.ids) {
        slot.copy_from_slice(&id.to_le_bytes());
    }
    out.extend_from_slice(&row.mask);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(key: u64, sample_id: &str, ids: Vec<u32>) -> TokenRow {
        let mask = ids.iter().map(|&i| (i % 2) as u8).collect();
        TokenRow {
            key,
            sample_id: sample_id.to_owned(),
            source: (key % 3) as u16,
            ids,
            mask,
        }
    }

    fn owned(r: SpilledRow<'_>) -> (String, u16, Vec<u32>, Vec<u8>) {
        (
            r.sample_id.to_owned(),
            r.source,
            r.ids().collect(),
            r.mask.to_vec(),
        )
    }

    #[test]
    fn a_bucket_reads_back_its_rows_in_key_then_sample_id_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut spill = Spill::new(dir.path(), true).expect("spill");
        // All in bucket 0 (top key byte 0); equal keys are ordered by sample id.
        let rows = [
            row(9, "b", vec![5, 6, 70000]),
            row(3, "é", vec![]),
            row(9, "a", vec![1]),
            row(4, "c", vec![u32::MAX, 0]),
        ];
        for r in &rows {
            spill.push(r).expect("push");
        }
        let paths = spill.finish().expect("finish");
        assert_eq!(paths.len(), 1);
        // A reused buffer's old contents do not leak into the bucket.
        let bucket = Bucket::read(&paths[0], vec![1, 2, 3]).expect("read");
        let got: Vec<_> = bucket.rows().map(owned).collect();
        let want: Vec<_> = [1, 3, 2, 0]
            .iter()
            .map(|&i| {
                let r = &rows[i];
                (r.sample_id.clone(), r.source, r.ids.clone(), r.mask.clone())
            })
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn buckets_of_many_blocks_read_back_whole_in_either_mode() {
        for shuffled in [true, false] {
            let dir = tempfile::tempdir().expect("tempdir");
            let mut spill = Spill::new(dir.path(), shuffled).expect("spill");
            // ~1 MB in one bucket (top key byte 0, or sequence numbers below 8,192): many
            // 64 KiB blocks and a padded last one.
            let rows: Vec<TokenRow> = (0..700u64)
                .map(|i| {
                    row(
                        699 - i,
                        &format!("s:0:{i}"),
                        (0..(i as u32 * 7) % 601).collect(),
                    )
                })
                .collect();
            for r in &rows {
                spill.push(r).expect("push");
            }
            let buckets = spill.finish().expect("finish");
            assert_eq!(buckets.len(), 1);
            let bytes = buckets[0].len;
            assert!(bytes > 10 * BUCKET_BLOCK as u64, "{bytes} bytes");
            let bucket = Bucket::read(&buckets[0], Vec::new()).expect("read");
            let got: Vec<_> = bucket.rows().map(owned).collect();
            let want: Vec<_> = rows
                .iter()
                .rev()
                .map(|r| (r.sample_id.clone(), r.source, r.ids.clone(), r.mask.clone()))
                .collect();
            assert!(got == want, "shuffled {shuffled}");
        }
    }

    #[test]
    fn a_truncated_or_bad_bucket_is_corrupt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut good = Vec::new();
        encode(&row(1, "s:0:1", vec![7, 8]), &mut good);
        let bad_utf8 = {
            let mut b = good.clone();
            b[14] = 0xff;
            b
        };
        for (name, bytes) in [
            ("cut", good[..good.len() - 1].to_vec()),
            ("header", good[..5].to_vec()),
            ("utf8", bad_utf8),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, &bytes).expect("write");
            let bucket = SpilledBucket {
                path: path.clone(),
                len: bytes.len() as u64,
            };
            match Bucket::read(&bucket, Vec::new()) {
                Err(WriteError::Corrupt(p)) => assert_eq!(p, path),
                Err(e) => panic!("{name}: {e}"),
                Ok(b) => panic!("{name}: read {} rows", b.len()),
            }
        }
        let path = dir.path().join("good");
        std::fs::write(&path, &good).expect("write");
        let mut bucket = SpilledBucket {
            path: path.clone(),
            len: good.len() as u64,
        };
        assert_eq!(Bucket::read(&bucket, Vec::new()).expect("read").len(), 1);
        // A file shorter than what was written to it is an I/O error naming it.
        bucket.len += 1;
        match Bucket::read(&bucket, Vec::new()) {
            Err(e @ WriteError::Io(..)) => assert_eq!(
                e.to_string(),
                format!("failed to write `{}`", path.display())
            ),
            Err(e) => panic!("{e}"),
            Ok(b) => panic!("read {} rows", b.len()),
        }
    }
}
