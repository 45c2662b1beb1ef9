//! Bucketed spill files: the external shuffle. Rows go to one of up to 256 buckets by the top
//! bits of their key; reading a bucket back and sorting it yields the global key order.

use super::{TokenRow, WriteError};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

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
    buckets: Vec<Option<BufWriter<File>>>,
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
            let file = File::create(&path).map_err(|e| WriteError::Io(path, e))?;
            self.buckets[b] = Some(BufWriter::with_capacity(64 << 10, file));
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

    /// Flushes all buckets and returns them in key order, ready for [`Bucket::read`].
    pub fn finish(mut self) -> Result<Vec<PathBuf>, WriteError> {
        let mut paths = Vec::new();
        for (b, w) in std::mem::take(&mut self.buckets).into_iter().enumerate() {
            if let Some(mut w) = w {
                let path = self.path(b);
                w.flush().map_err(|e| WriteError::Io(path.clone(), e))?;
                paths.push(path);
            }
        }
        Ok(paths)
    }
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
    data: Vec<u8>,
    sample_ids: String,
    rows: Vec<RowAt>,
}

impl Bucket {
    /// Reads the bucket at `path` into `buffer` (reused: its old contents are dropped).
    pub fn read(path: &Path, mut buffer: Vec<u8>) -> Result<Bucket, WriteError> {
        buffer.clear();
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut buffer))
            .map_err(|e| WriteError::Io(path.to_owned(), e))?;
        let corrupt = || WriteError::Corrupt(path.to_owned());
        let mut sample_ids = String::new();
        let mut rows = Vec::new();
        let mut at = 0usize;
        while at < buffer.len() {
            let row = parse_row(&buffer, &mut at, &mut sample_ids).ok_or_else(corrupt)?;
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
            data: buffer,
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
        self.rows.iter().map(|r| {
            let mask = r.ids + 4 * r.len;
            SpilledRow {
                sample_id: &self.sample_ids[r.sample_id.clone()],
                source: r.source,
                ids_le: &self.data[r.ids..mask],
                mask: &self.data[mask..mask + r.len],
            }
        })
    }

    /// The buffer, for the next bucket.
    pub fn into_buffer(self) -> Vec<u8> {
        self.data
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
            match Bucket::read(&path, Vec::new()) {
                Err(WriteError::Corrupt(p)) => assert_eq!(p, path),
                Err(e) => panic!("{name}: {e}"),
                Ok(b) => panic!("{name}: read {} rows", b.len()),
            }
        }
        let path = dir.path().join("good");
        std::fs::write(&path, &good).expect("write");
        assert_eq!(Bucket::read(&path, Vec::new()).expect("read").len(), 1);
    }
}
