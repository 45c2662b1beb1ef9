//! Bucketed spill files: the external shuffle. Rows go to one of up to 256 buckets by the top
//! bits of their key; reading a bucket back and sorting it yields the global key order.

use super::{TokenRow, WriteError};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
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
        let path = self.path(b);
        let w = self.buckets[b]
            .as_mut()
            .ok_or_else(|| WriteError::Corrupt(path.clone()))?;
        encode(row, &mut self.scratch);
        w.write_all(&self.scratch)
            .map_err(|e| WriteError::Io(path, e))?;
        self.rows += 1;
        Ok(())
    }

    /// Flushes all buckets and returns them in key order, ready for [`read_bucket`].
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

/// Reads a bucket back, sorted by (key, sample_id).
pub fn read_bucket(path: &Path) -> Result<Vec<TokenRow>, WriteError> {
    let file = File::open(path).map_err(|e| WriteError::Io(path.to_owned(), e))?;
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut rows = Vec::new();
    loop {
        match decode(&mut r) {
            Ok(Some(row)) => rows.push(row),
            Ok(None) => break,
            Err(_) => return Err(WriteError::Corrupt(path.to_owned())),
        }
    }
    rows.sort_unstable_by(|a, b| (a.key, &a.sample_id).cmp(&(b.key, &b.sample_id)));
    Ok(rows)
}

fn encode(row: &TokenRow, out: &mut Vec<u8>) {
    out.clear();
    out.reserve(18 + row.sample_id.len() + row.ids.len() * 5);
    out.extend_from_slice(&row.key.to_le_bytes());
    out.extend_from_slice(&row.source.to_le_bytes());
    out.extend_from_slice(&(row.sample_id.len() as u32).to_le_bytes());
    out.extend_from_slice(row.sample_id.as_bytes());
    out.extend_from_slice(&(row.ids.len() as u32).to_le_bytes());
    for id in &row.ids {
        out.extend_from_slice(&id.to_le_bytes());
    }
    out.extend_from_slice(&row.mask);
}

fn decode(r: &mut impl Read) -> std::io::Result<Option<TokenRow>> {
    let mut key = [0u8; 8];
    match r.read_exact(&mut key) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut u16b = [0u8; 2];
    let mut u32b = [0u8; 4];
    r.read_exact(&mut u16b)?;
    let source = u16::from_le_bytes(u16b);
    r.read_exact(&mut u32b)?;
    let mut sid = vec![0u8; u32::from_le_bytes(u32b) as usize];
    r.read_exact(&mut sid)?;
    let sample_id = String::from_utf8(sid)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    r.read_exact(&mut u32b)?;
    let n = u32::from_le_bytes(u32b) as usize;
    let mut raw = vec![0u8; n * 4];
    r.read_exact(&mut raw)?;
    let ids = raw
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let mut mask = vec![0u8; n];
    r.read_exact(&mut mask)?;
    Ok(Some(TokenRow {
        key: u64::from_le_bytes(key),
        sample_id,
        source,
        ids,
        mask,
    }))
}
