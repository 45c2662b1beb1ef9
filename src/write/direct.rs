//! Large output files written around the page cache (`O_DIRECT` on Linux).
//!
//! A build writes each output byte once and never reads it back, yet a buffered write copies
//! it into freshly allocated page cache, which on virtual machines is often memory the host
//! must fault in first: 0.13–1.96 s of system time per 400 MB written with `dd` on the
//! benchmark machine (BENCHMARKS.md), against 0.05–0.10 s written directly. Direct writes need aligned buffers,
//! offsets and lengths, so whole 1 MiB blocks go out directly and the unaligned tail is
//! written through the page cache at the end. Where the filesystem refuses direct I/O (the
//! open or a write fails with `EINVAL`), the file silently becomes an ordinary buffered one:
//! the bytes written are the same either way.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::Path;

/// Alignment of direct I/O buffers, offsets and lengths: the largest logical block size in
/// common use, so it suits any device.
const ALIGN: usize = 4096;
/// Bytes gathered before each write: large enough that the device sees few requests.
const BLOCK: usize = 1 << 20;

/// A write-only file that takes whole blocks around the page cache; see the module docs.
pub struct OutputFile {
    file: File,
    /// `BLOCK + ALIGN` bytes; the staged bytes are `buffer[start..start + len]`, `start`
    /// being the first aligned offset.
    buffer: Vec<u8>,
    start: usize,
    len: usize,
    /// Bytes in the file so far.
    written: u64,
    direct: bool,
}

impl OutputFile {
    /// Creates (or truncates) `path`.
    pub fn create(path: &Path) -> io::Result<OutputFile> {
        Self::create_with(path, true)
    }

    /// `direct: false` makes an ordinary buffered file (to compare the two in tests).
    fn create_with(path: &Path, direct: bool) -> io::Result<OutputFile> {
        let (file, direct) = if direct {
            open(path)?
        } else {
            (File::create(path)?, false)
        };
        let buffer = vec![0u8; BLOCK + ALIGN];
        let start = buffer.as_ptr().align_offset(ALIGN);
        // `align_offset` may in principle decline; the file then stays buffered.
        let direct = direct && start < ALIGN;
        let mut out = OutputFile {
            file,
            buffer,
            start: start.min(ALIGN),
            len: 0,
            written: 0,
            direct,
        };
        if !direct {
            out.buffered()?;
        }
        Ok(out)
    }

    /// Whether whole blocks still bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Flushes everything, then waits until it is on disk (`fsync`).
    pub fn sync_all(&mut self) -> io::Result<()> {
        self.flush()?;
        self.file.sync_all()
    }

    /// Writes the staged bytes (a whole block, while direct).
    fn write_staged(&mut self) -> io::Result<()> {
        let staged = self.start..self.start + self.len;
        if self.direct {
            match self.file.write_all(&self.buffer[staged.clone()]) {
                Ok(()) => {
                    self.written += self.len as u64;
                    self.len = 0;
                    return Ok(());
                }
                // A refused or partial direct write: the file is buffered from here on, and
                // the block is written again whole from where it began.
                Err(e) if e.raw_os_error() == Some(EINVAL) => {
                    self.buffered()?;
                    self.file.set_len(self.written)?;
                    self.file.seek(SeekFrom::Start(self.written))?;
                }
                Err(e) => return Err(e),
            }
        }
        self.file.write_all(&self.buffer[staged])?;
        self.written += self.len as u64;
        self.len = 0;
        Ok(())
    }

    /// Turns direct I/O off for the rest of the file.
    fn buffered(&mut self) -> io::Result<()> {
        self.direct = false;
        clear_direct(&self.file)
    }
}

impl Write for OutputFile {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(BLOCK - self.len);
        let at = self.start + self.len;
        self.buffer[at..at + n].copy_from_slice(&data[..n]);
        self.len += n;
        if self.len == BLOCK {
            self.write_staged()?;
        }
        Ok(n)
    }

    /// Writes everything staged. The aligned part still goes out directly; the tail ends
    /// direct I/O for this file (later writes are buffered), so call it once, at the end.
    fn flush(&mut self) -> io::Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        if self.direct {
            let aligned = self.len / ALIGN * ALIGN;
            if aligned > 0 {
                let tail = self.len - aligned;
                self.len = aligned;
                self.write_staged()?;
                let from = self.start + aligned;
                self.buffer.copy_within(from..from + tail, self.start);
                self.len = tail;
            }
            if self.len > 0 && self.direct {
                self.buffered()?;
            }
        }
        if self.len > 0 {
            self.write_staged()?;
        }
        Ok(())
    }
}

#[cfg(target_os = "linux")]
const EINVAL: i32 = libc::EINVAL;
#[cfg(not(target_os = "linux"))]
const EINVAL: i32 = 22;

/// Opens `path` for direct writes where the filesystem allows it; says whether it did.
#[cfg(target_os = "linux")]
fn open(path: &Path) -> io::Result<(File, bool)> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    match options.clone().custom_flags(libc::O_DIRECT).open(path) {
        Ok(file) => Ok((file, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok((options.open(path)?, false)),
        Err(e) => Err(e),
    }
}

#[cfg(not(target_os = "linux"))]
fn open(path: &Path) -> io::Result<(File, bool)> {
    Ok((File::create(path)?, false))
}

#[cfg(target_os = "linux")]
fn clear_direct(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: `fcntl` on a descriptor this file owns, reading then setting its status flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    if flags & libc::O_DIRECT != 0 {
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn clear_direct(_file: &File) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic bytes, so that a misplaced block shows.
    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    /// Writes `pieces` (with a flush where a piece is empty) and returns what the file holds.
    fn written(pieces: &[Vec<u8>], direct: bool) -> (Vec<u8>, bool) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out");
        let mut f = OutputFile::create_with(&path, direct).expect("create");
        let was_direct = f.is_direct();
        for p in pieces {
            if p.is_empty() {
                f.flush().expect("flush");
            } else {
                f.write_all(p).expect("write");
            }
        }
        f.sync_all().expect("sync");
        drop(f);
        (std::fs::read(&path).expect("read back"), was_direct)
    }

    #[test]
    fn any_pieces_read_back_exactly_direct_or_not() {
        let sizes = [
            1,
            ALIGN - 1,
            ALIGN,
            ALIGN + 1,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            3 * BLOCK + 7,
            5,
        ];
        let pieces: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| bytes(n, i as u32))
            .collect();
        let want = pieces.concat();
        let (direct, was_direct) = written(&pieces, true);
        let (buffered, _) = written(&pieces, false);
        assert_eq!(direct.len(), want.len(), "direct I/O used: {was_direct}");
        assert!(direct == want, "direct I/O used: {was_direct}");
        assert!(buffered == want);
    }

    #[test]
    fn whole_blocks_empty_files_and_writes_after_a_flush() {
        for pieces in [
            vec![],
            vec![bytes(2 * BLOCK, 1)],
            vec![
                bytes(BLOCK + 100, 2),
                vec![],
                bytes(10, 3),
                vec![],
                bytes(BLOCK, 4),
            ],
        ] {
            let want = pieces.concat();
            for direct in [true, false] {
                let (got, _) = written(&pieces, direct);
                assert!(got == want, "{} bytes, direct {direct}", want.len());
            }
        }
    }
}
