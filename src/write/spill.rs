//! Bucketed spill files: the external shuffle. Rows go to one of up to 256 buckets by the top
//! bits of their key; reading a bucket back and sorting it yields the global key order.

use super::output_file::{read_prefix, BlockWriters, OutputFile};
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
    /// Written like the outputs (see `output_file`): the spill is as large as the shards.
    buckets: Vec<Option<OutputFile>>,
    rows: u64,
    /// Bucket files are not synced at sync points (see [`OutputFile::unsynced`]).
    unsynced: bool,
    /// One encoded row, written with a single call.
    scratch: Vec<u8>,
    /// Rows pushed to each bucket by this process (`None`: a resumed bucket, whose earlier
    /// rows were not counted here).
    bucket_rows: Vec<Option<u64>>,
    /// Where the buckets' blocks are written ([`Spill::write_behind`]).
    writers: Option<std::sync::Arc<BlockWriters>>,
}

impl Spill {
    pub fn new(dir: &Path, shuffled: bool) -> Result<Self, WriteError> {
        std::fs::create_dir_all(dir).map_err(|e| WriteError::Io(dir.to_owned(), e))?;
        Ok(Spill {
            dir: dir.to_owned(),
            shuffled,
            buckets: Vec::new(),
            rows: 0,
            unsynced: false,
            scratch: Vec::new(),
            bucket_rows: Vec::new(),
            writers: None,
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
        let mut scratch = std::mem::take(&mut self.scratch);
        encode(row, &mut scratch);
        let pushed = self.append(row.key, &scratch);
        self.scratch = scratch;
        pushed
    }

    /// Appends a row that was encoded elsewhere (see [`EncodedRow`]).
    pub fn push_encoded(&mut self, row: &EncodedRow) -> Result<(), WriteError> {
        self.append(row.key(), &row.bytes)
    }

    /// Appends one encoded row with this key to its bucket.
    fn append(&mut self, key: u64, encoded: &[u8]) -> Result<(), WriteError> {
        let b = self.bucket_of(key);
        if self.buckets.len() <= b {
            self.buckets.resize_with(b + 1, || None);
            self.bucket_rows.resize(b + 1, Some(0));
        }
        if self.buckets[b].is_none() {
            let path = self.path(b);
            let mut file =
                OutputFile::with_block(&path, BUCKET_BLOCK).map_err(|e| WriteError::Io(path, e))?;
            if self.unsynced {
                file.unsynced();
            }
            if let Some(writers) = &self.writers {
                file.write_behind(writers);
            }
            self.buckets[b] = Some(file);
        }
        // The bucket's path is formatted only for an error, not for every row.
        let Some(w) = self.buckets[b].as_mut() else {
            return Err(WriteError::Corrupt(self.path(b)));
        };
        if let Err(e) = w.write_all(encoded) {
            return Err(WriteError::Io(self.path(b), e));
        }
        if let Some(n) = &mut self.bucket_rows[b] {
            *n += 1;
        }
        self.rows += 1;
        Ok(())
    }

    /// Hands the buckets' full blocks to `writers` instead of writing them on the thread that
    /// pushes the rows (see [`OutputFile::write_behind`]).
    pub fn write_behind(&mut self, writers: std::sync::Arc<BlockWriters>) {
        for w in self.buckets.iter_mut().flatten() {
            w.write_behind(&writers);
        }
        self.writers = Some(writers);
    }

    /// Sync points hand the rows to the system without waiting for the device (see
    /// [`OutputFile::unsynced`]): the spill is scratch, read back once.
    pub fn unsynced(&mut self) {
        self.unsynced = true;
        for w in self.buckets.iter_mut().flatten() {
            w.unsynced();
        }
    }

    /// Makes every row pushed so far durable and says where each bucket stands, so that a
    /// killed build can go on from here ([`Spill::resume`]).
    pub fn sync_point(&mut self) -> Result<SpillState, WriteError> {
        let mut buckets = Vec::new();
        for b in 0..self.buckets.len() {
            if let Some(w) = self.buckets[b].as_mut() {
                let len = w
                    .sync_point()
                    .map_err(|e| WriteError::Io(self.path(b), e))?;
                buckets.push((b as u32, len));
            }
        }
        Ok(SpillState {
            rows: self.rows,
            buckets,
        })
    }

    /// The spill of a killed build, as it stood at `state`: later rows are dropped (buckets
    /// cut back, buckets opened since removed).
    pub fn resume(dir: &Path, shuffled: bool, state: &SpillState) -> Result<Self, WriteError> {
        let mut spill = Spill::new(dir, shuffled)?;
        spill.rows = state.rows;
        let io = |path: &Path, e| WriteError::Io(path.to_owned(), e);
        for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let path = entry.map_err(|e| io(dir, e))?.path();
            let bucket = path.file_name().and_then(|n| n.to_str()).and_then(|n| {
                n.strip_prefix("bucket-")?
                    .strip_suffix(".bin")?
                    .parse::<u32>()
                    .ok()
            });
            if let Some(b) = bucket {
                if !state.buckets.iter().any(|&(kept, _)| kept == b) {
                    std::fs::remove_file(&path).map_err(|e| io(&path, e))?;
                }
            }
        }
        for &(b, len) in &state.buckets {
            let b = b as usize;
            let path = spill.path(b);
            let file = OutputFile::reopen(&path, len, BUCKET_BLOCK).map_err(|e| io(&path, e))?;
            if spill.buckets.len() <= b {
                spill.buckets.resize_with(b + 1, || None);
                spill.bucket_rows.resize(b + 1, Some(0));
            }
            spill.buckets[b] = Some(file);
            spill.bucket_rows[b] = None;
        }
        Ok(spill)
    }

    /// Flushes all buckets and returns them in key order, ready for [`Bucket::load`].
    pub fn finish(mut self) -> Result<Vec<SpilledBucket>, WriteError> {
        let mut buckets = Vec::new();
        for (b, w) in std::mem::take(&mut self.buckets).into_iter().enumerate() {
            if let Some(mut w) = w {
                let path = self.path(b);
                let len = w.finish().map_err(|e| WriteError::Io(path.clone(), e))?;
                let rows = self.bucket_rows.get(b).copied().flatten();
                buckets.push(SpilledBucket { path, len, rows });
            }
        }
        Ok(buckets)
    }
}

/// Where a spill stood at a sync point: rows pushed, and the length of each open bucket.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SpillState {
    pub rows: u64,
    pub buckets: Vec<(u32, u64)>,
}

/// A finished bucket file and the length of its rows.
#[derive(Debug, Clone)]
pub struct SpilledBucket {
    pub path: PathBuf,
    len: u64,
    /// Its number of rows, where the spill counted them all.
    rows: Option<u64>,
}

impl SpilledBucket {
    /// Bytes of its rows.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Its number of rows, when known without reading it (not for a resumed bucket).
    pub fn rows(&self) -> Option<u64> {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A buffer that [`Bucket::load`] can read any of `buckets` into without growing it: a
    /// reused buffer that had to grow would briefly exist twice.
    pub fn buffer_for(buckets: &[SpilledBucket]) -> Vec<u8> {
        let largest = buckets.iter().map(|b| b.len).max().unwrap_or(0);
        Vec::with_capacity(usize::try_from(largest).unwrap_or(0))
    }
}

/// A bucket's bytes, read back but not yet indexed (so that the reading, which waits for the
/// disk, can run ahead on a thread of its own).
pub struct LoadedBucket {
    path: PathBuf,
    data: Vec<u8>,
}

/// One spilled row as stored in a [`Bucket`]: offsets into its bytes.
struct RowAt {
    key: u64,
    source: u16,
    /// Range of the sample id in [`Bucket::sample_ids`].
    sample_id: std::ops::Range<usize>,
    /// Offset of the row's tokens in the bucket's bytes (also its write order).
    tokens: usize,
    len: usize,
    layout: Layout,
}

/// How a spilled row's tokens are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// 3 bytes per token, little-endian: the id in the low 23 bits, the loss-mask bit on top.
    /// Every vocabulary in use is far below 2^23 (8.4M) ids, so nearly every row is packed:
    /// 40% fewer bytes to write and, in the shard phase, which waits on the disk, to read back.
    Packed,
    /// 4-byte little-endian ids, then one mask byte per token: any other row.
    Wide,
}

impl Layout {
    const PACKED_IDS: u32 = 1 << 23;

    fn tag(self) -> u8 {
        match self {
            Layout::Packed => 3,
            Layout::Wide => 5,
        }
    }

    fn from_tag(tag: u8) -> Option<Layout> {
        match tag {
            3 => Some(Layout::Packed),
            5 => Some(Layout::Wide),
            _ => None,
        }
    }

    /// The packed layout if every id and mask value fits it.
    fn of(ids: &[u32], mask: &[u8]) -> Layout {
        // Branch-free folds (vectorized), rather than a test per token.
        let ids_fit = ids.iter().fold(0, |acc, &id| acc | id) < Self::PACKED_IDS;
        let mask_fits = mask.iter().fold(0, |acc, &m| acc | m) <= 1;
        if ids_fit && mask_fits {
            Layout::Packed
        } else {
            Layout::Wide
        }
    }

    fn bytes_per_token(self) -> usize {
        self.tag() as usize
    }
}

/// A spilled row read back, borrowed from its [`Bucket`].
pub struct SpilledRow<'a> {
    pub sample_id: &'a str,
    pub source: u16,
    len: usize,
    layout: Layout,
    /// The row's tokens in its [`Layout`].
    tokens: &'a [u8],
}

impl SpilledRow<'_> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends the row's ids and loss mask to a record batch's columns.
    pub fn append_to(&self, ids: &mut Vec<i32>, mask: &mut Vec<i8>) {
        match self.layout {
            Layout::Packed => {
                let packed = self.tokens.chunks_exact(3);
                // Ids below 2^23 fit in i32.
                ids.extend(packed.clone().map(|c| {
                    (u32::from_le_bytes([c[0], c[1], c[2], 0]) & (Layout::PACKED_IDS - 1)) as i32
                }));
                mask.extend(packed.map(|c| (c[2] >> 7) as i8));
            }
            Layout::Wide => {
                let (ids_le, bytes) = self.tokens.split_at(4 * self.len);
                // Token ids fit in i32: vocabularies are far below 2^31.
                ids.extend(
                    ids_le
                        .chunks_exact(4)
                        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i32),
                );
                mask.extend(bytes.iter().map(|&m| m as i8));
            }
        }
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
        let bytes = &data[..];
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
            (a.key, &sample_ids[a.sample_id.clone()], a.tokens).cmp(&(
                b.key,
                &sample_ids[b.sample_id.clone()],
                b.tokens,
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

    /// Keeps only the rows whose sample id `keep` accepts (order unchanged).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        let ids = &self.sample_ids;
        self.rows.retain(|r| keep(&ids[r.sample_id.clone()]));
    }

    /// Row `i` in (key, sample_id) order.
    pub fn row(&self, i: usize) -> SpilledRow<'_> {
        let r = &self.rows[i];
        let data = &self.data[..];
        SpilledRow {
            sample_id: &self.sample_ids[r.sample_id.clone()],
            source: r.source,
            len: r.len,
            layout: r.layout,
            tokens: &data[r.tokens..r.tokens + r.len * r.layout.bytes_per_token()],
        }
    }

    /// The rows in (key, sample_id) order.
    pub fn rows(&self) -> impl Iterator<Item = SpilledRow<'_>> {
        let data = &self.data[..];
        self.rows.iter().map(move |r| SpilledRow {
            sample_id: &self.sample_ids[r.sample_id.clone()],
            source: r.source,
            len: r.len,
            layout: r.layout,
            tokens: &data[r.tokens..r.tokens + r.len * r.layout.bytes_per_token()],
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
    let layout = Layout::from_tag(take(1)?.1[0])?;
    let (tokens, _) = take(len.checked_mul(layout.bytes_per_token())?)?;
    Some(RowAt {
        key,
        source,
        sample_id: start..sample_ids.len(),
        tokens,
        len,
        layout,
    })
}

/// A row encoded for the spill where it was made (on a pool worker), so that the in-order
/// commit only appends its bytes. The key can still be set: when not shuffling it is the
/// arrival sequence, known only at the commit.
pub struct EncodedRow {
    bytes: Vec<u8>,
}

impl EncodedRow {
    pub fn new(key: u64, sample_id: &str, source: u16, ids: &[u32], mask: &[u8]) -> EncodedRow {
        let mut bytes = Vec::new();
        encode_parts(key, sample_id, source, ids, mask, &mut bytes);
        EncodedRow { bytes }
    }

    pub fn set_key(&mut self, key: u64) {
        self.bytes[..8].copy_from_slice(&key.to_le_bytes());
    }

    fn key(&self) -> u64 {
        let mut key = [0u8; 8];
        key.copy_from_slice(&self.bytes[..8]);
        u64::from_le_bytes(key)
    }
}

/// Appends `row` to `out` (cleared first): key, source, sample id, token count, [`Layout`] tag,
/// tokens.
fn encode(row: &TokenRow, out: &mut Vec<u8>) {
    encode_parts(
        row.key,
        &row.sample_id,
        row.source,
        &row.ids,
        &row.mask,
        out,
    );
}

fn encode_parts(
    key: u64,
    sample_id: &str,
    source: u16,
    ids: &[u32],
    mask: &[u8],
    out: &mut Vec<u8>,
) {
    debug_assert_eq!(ids.len(), mask.len());
    let layout = Layout::of(ids, mask);
    out.clear();
    out.reserve(19 + sample_id.len() + ids.len() * layout.bytes_per_token());
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(&source.to_le_bytes());
    out.extend_from_slice(&(sample_id.len() as u32).to_le_bytes());
    out.extend_from_slice(sample_id.as_bytes());
    out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
    out.push(layout.tag());
    let tokens = out.len();
    match layout {
        Layout::Packed => {
            out.resize(tokens + 3 * ids.len(), 0);
            let slots = out[tokens..].chunks_exact_mut(3);
            for ((slot, &id), &m) in slots.zip(ids).zip(mask) {
                let v = id | u32::from(m) << 23;
                slot.copy_from_slice(&v.to_le_bytes()[..3]);
            }
        }
        Layout::Wide => {
            out.resize(tokens + 4 * ids.len(), 0);
            for (slot, id) in out[tokens..].chunks_exact_mut(4).zip(ids) {
                slot.copy_from_slice(&id.to_le_bytes());
            }
            out.extend_from_slice(mask);
        }
    }
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
        let (mut ids, mut mask) = (Vec::new(), Vec::new());
        r.append_to(&mut ids, &mut mask);
        assert_eq!((ids.len(), mask.len()), (r.len(), r.len()));
        (
            r.sample_id.to_owned(),
            r.source,
            ids.into_iter().map(|i| i as u32).collect(),
            mask.into_iter().map(|m| m as u8).collect(),
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
            // 64 KiB blocks and a partial last one.
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
            assert!(bytes > 8 * BUCKET_BLOCK as u64, "{bytes} bytes");
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
    fn rows_are_packed_to_3_bytes_a_token_unless_an_id_or_mask_value_does_not_fit() {
        let top = (1 << 23) - 1;
        let with_mask = |ids: Vec<u32>, mask: Vec<u8>| TokenRow {
            mask,
            ..row(1, "s", ids)
        };
        let cases = [
            (with_mask(vec![top, 0, 5], vec![1, 0, 1]), 3),
            (with_mask(vec![], vec![]), 3),
            (with_mask(vec![top + 1, 0], vec![1, 0]), 5),
            (with_mask(vec![0, u32::MAX], vec![0, 0]), 5),
            // A mask value other than 0 and 1 is kept as it is.
            (with_mask(vec![1, 2], vec![1, 2]), 5),
        ];
        for (r, per_token) in cases {
            let mut bytes = Vec::new();
            encode(&r, &mut bytes);
            assert_eq!(bytes.len(), 19 + 1 + per_token * r.ids.len(), "{:?}", r.ids);
            assert_eq!(bytes[19], per_token as u8);
            let mut names = String::new();
            let mut at = 0;
            let parsed = parse_row(&bytes, &mut at, &mut names).expect("a whole row");
            assert_eq!(at, bytes.len());
            let read = SpilledRow {
                sample_id: &names[parsed.sample_id],
                source: parsed.source,
                len: parsed.len,
                layout: parsed.layout,
                tokens: &bytes[parsed.tokens..],
            };
            let want = (r.sample_id.clone(), r.source, r.ids.clone(), r.mask.clone());
            assert_eq!(owned(read), want);
        }
        // An unknown layout tag is not a row.
        let mut bytes = Vec::new();
        encode(&with_mask(vec![7], vec![1]), &mut bytes);
        bytes[19] = 4;
        assert!(parse_row(&bytes, &mut 0, &mut String::new()).is_none());
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
                rows: None,
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
            rows: None,
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
