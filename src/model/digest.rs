//! Digests and the JSON forms they are taken over, shared by the lockfile, the build's identity
//! and the files a build writes.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Compact JSON with object keys sorted at every depth.
pub fn canonical_json(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&map[k.as_str()])))
                        .collect(),
                )
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}

/// Pretty JSON with a final newline, as every JSON file chatshards writes.
pub fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    s.push('\n');
    s
}

/// Size and lowercase hex SHA-256 of a file, streamed (inputs can be gigabytes): the one
/// hash of a file's bytes that the manifest, the lockfile, a resume and `verify` compare.
pub fn hash_file(path: &std::path::Path) -> std::io::Result<(u64, String)> {
    hash_file_with(path, &mut || Ok(()))
}

/// [`hash_file`], calling `chunk` after each MiB read: its error (a cancelled build) stops it.
pub fn hash_file_with(
    path: &std::path::Path,
    chunk: &mut dyn FnMut() -> std::io::Result<()>,
) -> std::io::Result<(u64, String)> {
    hash_file_checked(path, chunk).map(|(bytes, sha256, _)| (bytes, sha256))
}

/// Bytes of a file per [`Checks`] digest.
pub const CHECK_CHUNK: u64 = 64 << 20;

/// Fast digests (64-bit xxh3) of a file's consecutive [`CHECK_CHUNK`]-byte chunks: enough to
/// tell that a file read twice did not change in between (an edit, not an attack, is the
/// risk), checked on several threads at memory speed rather than SHA-256's ~1.5 GB/s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checks {
    pub bytes: u64,
    /// Bytes per chunk ([`CHECK_CHUNK`] but in tests).
    chunk: u64,
    chunks: Vec<u64>,
}

/// [`hash_file_with`], also taking the file's [`Checks`] in the same read.
pub fn hash_file_checked(
    path: &std::path::Path,
    chunk: &mut dyn FnMut() -> std::io::Result<()>,
) -> std::io::Result<(u64, String, Checks)> {
    hash_in_chunks(path, CHECK_CHUNK, chunk)
}

fn hash_in_chunks(
    path: &std::path::Path,
    size: u64,
    chunk: &mut dyn FnMut() -> std::io::Result<()>,
) -> std::io::Result<(u64, String, Checks)> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    use xxhash_rust::xxh3::Xxh3;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut check = Xxh3::new();
    let mut chunks = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let mut rest = &buf[..n];
        hasher.update(rest);
        // The reads need not line up with the chunks.
        while !rest.is_empty() {
            let room = (size - bytes % size) as usize;
            let (this, next) = rest.split_at(room.min(rest.len()));
            check.update(this);
            bytes += this.len() as u64;
            if bytes.is_multiple_of(size) {
                chunks.push(check.digest());
                check.reset();
            }
            rest = next;
        }
        chunk()?;
    }
    if !bytes.is_multiple_of(size) {
        chunks.push(check.digest());
    }
    let checks = Checks {
        bytes,
        chunk: size,
        chunks,
    };
    Ok((bytes, hex::encode(hasher.finalize()), checks))
}

impl Checks {
    /// Whether the file at `path` still has these bytes, reading its chunks on up to
    /// `threads` threads and stopping at the first difference. `chunk` runs after each chunk
    /// read (on the reading thread): its error (a cancelled build) stops the check.
    pub fn same(
        &self,
        path: &std::path::Path,
        threads: usize,
        chunk: &(dyn Fn() -> std::io::Result<()> + Sync),
    ) -> std::io::Result<bool> {
        use std::os::unix::fs::FileExt;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let file = std::fs::File::open(path)?;
        if file.metadata()?.len() != self.bytes {
            return Ok(false);
        }
        let next = AtomicUsize::new(0);
        let differs = AtomicBool::new(false);
        // A chunk is read a MiB at a time into a streaming digest (the same value as the
        // digest of the whole chunk): whole 64 MiB buffers on every thread were 256 MiB of the
        // build's peak memory.
        let read_chunk = |index: usize, buf: &mut [u8]| -> std::io::Result<bool> {
            let start = index as u64 * self.chunk;
            let end = start + self.chunk.min(self.bytes - start);
            let mut digest = xxhash_rust::xxh3::Xxh3::new();
            let mut at = start;
            while at < end {
                let n = (end - at).min(buf.len() as u64) as usize;
                let piece = &mut buf[..n];
                file.read_exact_at(piece, at)?;
                digest.update(piece);
                at += piece.len() as u64;
            }
            Ok(digest.digest() == self.chunks[index])
        };
        let work = || -> std::io::Result<()> {
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let index = next.fetch_add(1, Ordering::Relaxed);
                if index >= self.chunks.len() || differs.load(Ordering::Relaxed) {
                    return Ok(());
                }
                match read_chunk(index, &mut buf) {
                    Ok(true) => chunk()?,
                    // Grown or cut short meanwhile counts as changed.
                    Ok(false) => differs.store(true, Ordering::Relaxed),
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                        differs.store(true, Ordering::Relaxed)
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        let threads = threads.clamp(1, self.chunks.len().max(1));
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads).map(|_| scope.spawn(work)).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect::<std::io::Result<Vec<()>>>()
        })?;
        Ok(!differs.load(Ordering::Relaxed) && file.metadata()?.len() == self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `len` bytes (a pattern) in a temporary folder, and its hashes in chunks of
    /// `size` bytes.
    fn file_with_checks(
        size: u64,
        len: usize,
    ) -> (
        tempfile::TempDir,
        std::path::PathBuf,
        Vec<u8>,
        (u64, String, Checks),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let hashed = hash_in_chunks(&path, size, &mut || Ok(())).unwrap();
        (dir, path, bytes, hashed)
    }

    /// `checks` holds for the file as it is, and not once any one byte of `flips` changes.
    fn assert_each_flip_is_told(
        path: &std::path::Path,
        bytes: &[u8],
        checks: &Checks,
        flips: &[usize],
    ) {
        let ok = || Ok(());
        assert!(checks.same(path, 4, &ok).unwrap());
        for &at in flips {
            let mut changed = bytes.to_vec();
            changed[at] ^= 1;
            std::fs::write(path, &changed).unwrap();
            assert!(!checks.same(path, 4, &ok).unwrap(), "byte {at}");
        }
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn checks_of_chunks_longer_than_a_read_tell_a_changed_byte_in_any_read() {
        // Chunks of 2.5 MB read 1 MiB at a time: three reads each, the last one short.
        let size = 2_500_000;
        let len = 2 * size as usize + 777;
        let (_dir, path, bytes, (_, _, checks)) = file_with_checks(size, len);
        let flips = [
            (1 << 20) + 5,
            2 * (1 << 20) + 1,
            size as usize + (1 << 20),
            len - 1,
        ];
        assert_each_flip_is_told(&path, &bytes, &checks, &flips);
    }

    #[test]
    fn checks_tell_a_changed_byte_in_any_chunk_and_agree_with_the_sha256() {
        // Two whole chunks and a partial one, and reads (1 MiB) that cross chunk boundaries.
        let size = 1_000_000;
        let len = 2 * size as usize + 12_345;
        let (_dir, path, bytes, (n, sha, checks)) = file_with_checks(size, len);
        assert_eq!((n, sha.as_str()), (len as u64, sha256_hex(&bytes).as_str()));
        assert_eq!(checks.chunks.len(), 3);
        assert_each_flip_is_told(&path, &bytes, &checks, &[0, size as usize + 1, len - 1]);
        let ok = || Ok(());
        std::fs::write(&path, &bytes[..len - 1]).unwrap();
        assert!(!checks.same(&path, 2, &ok).unwrap());
        let mut longer = bytes.clone();
        longer.push(0);
        std::fs::write(&path, &longer).unwrap();
        assert!(!checks.same(&path, 1, &ok).unwrap());
        std::fs::write(&path, &bytes).unwrap();
        let stop = || Err(std::io::Error::other("cancelled"));
        assert_eq!(
            checks.same(&path, 2, &stop).unwrap_err().to_string(),
            "cancelled"
        );
    }
}
