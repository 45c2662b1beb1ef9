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
//!
//! Off by default: `CHATSHARDS_DIRECT_IO=1` turns it on (same bytes), so that both ways can be
//! measured like for like on a given machine; on a 16-core host buffered writes were faster.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Alignment of direct I/O buffers, offsets and lengths: the largest logical block size in
/// common use, so it suits any device.
const ALIGN: usize = 4096;
/// Bytes gathered before each write of an output: large enough that the device sees few
/// requests.
const BLOCK: usize = 1 << 20;
/// Bytes written between two starts of writeback ([`OutputFile::early_writeback`]).
const WRITEBACK_BYTES: u64 = 32 << 20;

/// Whether output files that must end durable start their writeback as they are written
/// (`CHATSHARDS_EARLY_WRITEBACK=0`: only at their final `fsync`, as before; same bytes).
fn early_writeback_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let value = std::env::var("CHATSHARDS_EARLY_WRITEBACK");
        !matches!(value.as_deref().map(str::trim), Ok("0" | "false"))
    })
}

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
    /// Bytes per write, a multiple of [`ALIGN`].
    block: usize,
    /// The furthest byte a [`OutputFile::sync_point`] wrote (padding included), so that the
    /// end of the file can be cut back to what was really written.
    high: u64,
    /// [`OutputFile::sync_point`] writes the staged bytes but does not sync them (see
    /// [`OutputFile::unsynced`]).
    unsynced: bool,
    /// With [`OutputFile::early_writeback`]: the end of the bytes already handed to the
    /// device's writeback.
    writeback_from: Option<u64>,
    /// Told the length of the bytes that will not change any more, for a digest taken
    /// meanwhile ([`super::follow`]).
    publish: Option<super::follow::Publish>,
}

impl OutputFile {
    /// Creates (or truncates) `path`, to be written in 1 MiB blocks.
    pub fn create(path: &Path) -> io::Result<OutputFile> {
        Self::create_with(path, direct_io(), BLOCK)
    }

    /// Creates (or truncates) `path`, to be written in blocks of `block` bytes (rounded up to
    /// a multiple of 4 KiB), e.g. smaller ones for many files open at once.
    pub fn with_block(path: &Path, block: usize) -> io::Result<OutputFile> {
        Self::create_with(path, direct_io(), block.max(1).next_multiple_of(ALIGN))
    }

    /// `direct: false` makes an ordinary buffered file (to compare the two in tests).
    fn create_with(path: &Path, direct: bool, block: usize) -> io::Result<OutputFile> {
        let (file, direct) = open(path, true, direct)?;
        Self::with_file(file, direct, block, 0)
    }

    /// [`OutputFile::reopen`] for a file written in 1 MiB blocks ([`OutputFile::create`]).
    pub fn resume(path: &Path, len: u64) -> io::Result<OutputFile> {
        Self::reopen(path, len, BLOCK)
    }

    /// Reopens a file at a length that [`OutputFile::sync_point`] returned (say, after the
    /// process was killed), dropping whatever was written after it, to go on writing as if the
    /// process had never stopped.
    ///
    /// The file is cut back to `len`, never shorter: the part of its last 4 KiB block below
    /// `len` is staged again in memory (direct writes start on a block boundary) and rewritten
    /// with the same bytes by the next write, so the recorded bytes stay on disk at every
    /// instant, however often the process is killed while resuming.
    pub fn reopen(path: &Path, len: u64, block: usize) -> io::Result<OutputFile> {
        use std::os::unix::fs::FileExt;
        let block = block.max(1).next_multiple_of(ALIGN);
        let aligned = len / ALIGN as u64 * ALIGN as u64;
        let (mut file, direct) = open(path, false, direct_io())?;
        let size = file.metadata()?.len();
        if size < len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{size} bytes where {len} were recorded"),
            ));
        }
        let mut tail = vec![0u8; (len - aligned) as usize];
        let mut read = crate::model::nofollow::options(0);
        read.read(true);
        crate::model::nofollow::open(&read, path)?.read_exact_at(&mut tail, aligned)?;
        file.set_len(len)?;
        file.seek(SeekFrom::Start(aligned))?;
        let mut out = Self::with_file(file, direct, block, aligned)?;
        out.buffer[out.start..out.start + tail.len()].copy_from_slice(&tail);
        out.len = tail.len();
        out.high = len;
        Ok(out)
    }

    fn with_file(file: File, direct: bool, block: usize, written: u64) -> io::Result<OutputFile> {
        let buffer = vec![0u8; block + ALIGN];
        let start = buffer.as_ptr().align_offset(ALIGN);
        // `align_offset` may in principle decline; the file then stays buffered.
        let direct = direct && start < ALIGN;
        let mut out = OutputFile {
            file,
            buffer,
            start: start.min(ALIGN),
            len: 0,
            written,
            direct,
            block,
            high: written,
            unsynced: false,
            writeback_from: None,
            publish: None,
        };
        if !direct {
            out.buffered()?;
        }
        Ok(out)
    }

    /// Makes [`OutputFile::sync_point`] hand its bytes to the system without waiting for the
    /// device: a scratch file that must survive the process being killed (the page cache
    /// keeps it) but not the machine restarting (a journal recorded under another boot is not
    /// gone on from: `engine::journal::same_boot`).
    pub fn unsynced(&mut self) {
        self.unsynced = true;
    }

    /// Starts the device writing each 32 MiB as soon as it is written through the page cache,
    /// without waiting for it, for a file that is synced at the end of the build: the kernel
    /// would otherwise hold gigabytes of dirty pages until that `fsync` (or its own
    /// thresholds), and the build would wait the whole write at its end instead of overlapping
    /// it with the work. Off with `CHATSHARDS_EARLY_WRITEBACK=0`.
    pub fn early_writeback(&mut self) {
        if early_writeback_on() {
            self.writeback_from = Some(self.written);
        }
    }

    /// Tells `publish` how much of the file is final as it is written (all bytes before
    /// `written`: a sync point's staged tail is rewritten later, and stays after it).
    pub fn publish_to(&mut self, publish: super::follow::Publish) {
        publish.set(self.written);
        self.publish = Some(publish);
    }

    /// Whether whole blocks still bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Ends a scratch file that only [`read_prefix`] reads back: the last block is padded with
    /// zeros to a whole number of 4 KiB, so that it too goes out directly. Returns the length
    /// of what was written before the padding, the length to read back.
    pub fn finish_padded(&mut self) -> io::Result<u64> {
        let len = self.written + self.len as u64;
        if self.direct && self.len > 0 {
            let padded = self.len.next_multiple_of(ALIGN);
            let at = self.start + self.len;
            self.buffer[at..self.start + padded].fill(0);
            self.len = padded;
            self.write_staged()?;
        }
        self.flush()?;
        self.cut_back()?;
        Ok(len)
    }

    /// Makes everything written so far durable (`fsync`) and returns the length to reopen the
    /// file at after a crash ([`OutputFile::reopen`]). The staged tail is written in place
    /// (padded to 4 KiB while direct) and stays staged, so the next block rewrites it whole:
    /// until then the file may hold zeros past the returned length.
    pub fn sync_point(&mut self) -> io::Result<u64> {
        use std::os::unix::fs::FileExt;
        let len = self.written + self.len as u64;
        if self.len > 0 {
            let staged = self.start..self.start + self.len;
            let padded = self.start + self.len.next_multiple_of(ALIGN);
            let result = if self.direct {
                self.buffer[staged.end..padded].fill(0);
                self.file
                    .write_all_at(&self.buffer[self.start..padded], self.written)
            } else {
                self.file
                    .write_all_at(&self.buffer[staged.clone()], self.written)
            };
            match result {
                Ok(()) => {}
                Err(e) if self.direct && e.raw_os_error() == Some(EINVAL) => {
                    self.buffered()?;
                    self.file.write_all_at(&self.buffer[staged], self.written)?;
                }
                Err(e) => return Err(e),
            }
            let end = if self.direct {
                padded
            } else {
                self.start + self.len
            } - self.start;
            self.high = self.high.max(self.written + end as u64);
        }
        if !self.unsynced {
            self.file.sync_data()?;
        }
        Ok(len)
    }

    /// Drops what a sync point wrote past the end of the data.
    fn cut_back(&mut self) -> io::Result<()> {
        if self.high > self.written {
            self.file.set_len(self.written)?;
            self.high = self.written;
        }
        Ok(())
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
                    if let Some(publish) = &self.publish {
                        publish.set(self.written);
                    }
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
        if let Some(publish) = &self.publish {
            publish.set(self.written);
        }
        if let Some(from) = self.writeback_from {
            if self.written - from >= WRITEBACK_BYTES {
                start_writeback(&self.file, from, self.written - from);
                self.writeback_from = Some(self.written);
            }
        }
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
        let n = data.len().min(self.block - self.len);
        let at = self.start + self.len;
        self.buffer[at..at + n].copy_from_slice(&data[..n]);
        self.len += n;
        if self.len == self.block {
            self.write_staged()?;
        }
        Ok(n)
    }

    /// Writes everything staged. The aligned part still goes out directly; the tail ends
    /// direct I/O for this file (later writes are buffered), so call it once, at the end.
    fn flush(&mut self) -> io::Result<()> {
        if self.len == 0 {
            return self.cut_back();
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
        self.cut_back()
    }
}

/// Asks the device to start writing `len` bytes of `file` from `offset` and returns at once
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`): advisory, so a failure is ignored; the file's
/// final `fsync` reports real write errors.
#[cfg(target_os = "linux")]
fn start_writeback(file: &File, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
        return;
    };
    // SAFETY: a plain system call on an open descriptor; it reads and writes no memory of ours.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
fn start_writeback(_file: &File, _offset: u64, _len: u64) {}

/// The first bytes of a file, read into an aligned window of a reusable buffer.
pub struct ReadBack {
    buffer: Vec<u8>,
    start: usize,
    len: usize,
}

impl ReadBack {
    pub fn bytes(&self) -> &[u8] {
        &self.buffer[self.start..self.start + self.len]
    }

    /// The buffer, for the next read.
    pub fn into_buffer(self) -> Vec<u8> {
        self.buffer
    }
}

/// Reads the first `len` bytes of `path` (a file [`OutputFile::finish_padded`] wrote) around
/// the page cache where the filesystem allows it: a buffered read would allocate page cache
/// for bytes that are read once. `buffer` is reused (grown if needed, never shrunk).
pub fn read_prefix(path: &Path, len: u64, mut buffer: Vec<u8>) -> io::Result<ReadBack> {
    let too_large = || io::Error::new(io::ErrorKind::OutOfMemory, "file too large to read");
    let size = read_buffer_len(len).ok_or_else(too_large)?;
    let len = len as usize;
    let want = size - ALIGN;
    if buffer.len() < size {
        buffer.resize(size, 0);
    }
    let start = buffer.as_ptr().align_offset(ALIGN);
    let (mut file, mut direct) = open_read(path)?;
    if direct && start >= ALIGN {
        clear_direct(&file)?;
        direct = false;
    }
    let start = start.min(ALIGN);
    let mut got = 0;
    while got < len {
        // Direct reads ask for whole blocks; the file's padding makes them fit.
        let end = if direct { start + want } else { start + len };
        match file.read(&mut buffer[start + got..end]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // A short direct read leaves the offset unaligned: read on through the cache.
            Err(e) if direct && e.raw_os_error() == Some(EINVAL) => {
                clear_direct(&file)?;
                direct = false;
            }
            Err(e) => return Err(e),
        }
    }
    if got < len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{got} bytes where {len} were written"),
        ));
    }
    Ok(ReadBack { buffer, start, len })
}

/// The buffer length [`read_prefix`] needs for `len` bytes (whole blocks, plus room to align
/// them); `None` if that does not fit in memory's address space.
pub fn read_buffer_len(len: u64) -> Option<usize> {
    usize::try_from(len)
        .ok()?
        .checked_next_multiple_of(ALIGN)?
        .checked_add(ALIGN)
}

#[cfg(target_os = "linux")]
const EINVAL: i32 = libc::EINVAL;
#[cfg(not(target_os = "linux"))]
const EINVAL: i32 = 22;

/// Whether output files bypass the page cache: only with `CHATSHARDS_DIRECT_IO=1`. Buffered by
/// default: on a 16-core host a 913K-row build took 22.6 s buffered against 28.5 s direct
/// (BENCHMARKS.md), the one thread that appends the spill waiting on the device.
fn direct_io() -> bool {
    static DIRECT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DIRECT.get_or_init(|| {
        let value = std::env::var("CHATSHARDS_DIRECT_IO");
        matches!(value.as_deref().map(str::trim), Ok("1" | "true"))
    })
}

/// Opens `path` for writing, with direct writes if `direct` and the filesystem allows them;
/// says whether it did.
#[cfg(target_os = "linux")]
fn open(path: &Path, truncate: bool, direct: bool) -> io::Result<(File, bool)> {
    use crate::model::nofollow;
    let with = |flags| {
        let mut options = nofollow::options(flags);
        options.write(true).create(true).truncate(truncate);
        options
    };
    if !direct {
        return Ok((nofollow::open(&with(0), path)?, false));
    }
    match nofollow::open(&with(libc::O_DIRECT), path) {
        Ok(file) => Ok((file, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            Ok((nofollow::open(&with(0), path)?, false))
        }
        Err(e) => Err(e),
    }
}

#[cfg(not(target_os = "linux"))]
fn open(path: &Path, truncate: bool, _direct: bool) -> io::Result<(File, bool)> {
    let mut options = crate::model::nofollow::options(0);
    options.write(true).create(true).truncate(truncate);
    Ok((crate::model::nofollow::open(&options, path)?, false))
}

/// Opens `path` for direct reads where the filesystem allows it; says whether it did.
#[cfg(target_os = "linux")]
fn open_read(path: &Path) -> io::Result<(File, bool)> {
    use std::os::unix::fs::OpenOptionsExt;
    if !direct_io() {
        return Ok((File::open(path)?, false));
    }
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(file) => Ok((file, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok((File::open(path)?, false)),
        Err(e) => Err(e),
    }
}

#[cfg(not(target_os = "linux"))]
fn open_read(path: &Path) -> io::Result<(File, bool)> {
    Ok((File::open(path)?, false))
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
        let mut f = OutputFile::create_with(&path, direct, BLOCK).expect("create");
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
    fn sync_points_change_nothing_and_a_reopened_file_goes_on_exactly() {
        let sizes = [ALIGN + 3, 10, BLOCK - 5, 2 * BLOCK + 9, ALIGN, 1];
        let pieces: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| bytes(n, 10 + i as u32))
            .collect();
        let want = pieces.concat();
        for direct in [true, false] {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("out");
            // Uninterrupted, with a sync point after every piece.
            let mut f = OutputFile::create_with(&path, direct, BLOCK).expect("create");
            let mut points = Vec::new();
            for p in &pieces {
                f.write_all(p).expect("write");
                points.push(f.sync_point().expect("sync point"));
            }
            f.sync_all().expect("sync");
            drop(f);
            assert!(
                std::fs::read(&path).expect("read") == want,
                "direct {direct}"
            );
            // Killed after piece i (what followed it half written), reopened, finished.
            for (i, &at) in points.iter().enumerate() {
                let mut f = OutputFile::create_with(&path, direct, BLOCK).expect("create");
                for p in &pieces[..=i] {
                    f.write_all(p).expect("write");
                }
                assert_eq!(f.sync_point().expect("sync point"), at);
                f.write_all(&bytes(BLOCK + 17, 99)).expect("write junk");
                std::mem::forget(f);
                // Killed again right after each reopen, and again after a little more
                // writing: the recorded bytes are on disk every time.
                for _ in 0..2 {
                    let f = OutputFile::reopen(&path, at, BLOCK).expect("reopen");
                    std::mem::forget(f);
                    let got = std::fs::read(&path).expect("read");
                    assert!(got == want[..at as usize], "direct {direct}, piece {i}");
                }
                let mut f = OutputFile::reopen(&path, at, BLOCK).expect("reopen");
                f.write_all(&bytes(ALIGN + 5, 98)).expect("write junk");
                std::mem::forget(f);
                let got = std::fs::read(&path).expect("read");
                assert!(
                    got[..at as usize] == want[..at as usize],
                    "direct {direct}, piece {i}"
                );
                let mut f = OutputFile::reopen(&path, at, BLOCK).expect("reopen");
                for p in &pieces[i + 1..] {
                    f.write_all(p).expect("write");
                }
                f.sync_all().expect("sync");
                drop(f);
                let got = std::fs::read(&path).expect("read");
                assert!(got == want, "direct {direct}, reopened after piece {i}");
            }
        }
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

    #[test]
    fn padded_scratch_files_read_back_exactly_what_was_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("scratch");
        // One buffer throughout, as the shard writing reuses it: stale bytes must not show.
        let mut buffer = vec![0xAB; 3 * ALIGN];
        for direct in [true, false] {
            for n in [0, 1, ALIGN, ALIGN + 1, 3 * 8192 + 5] {
                let want = bytes(n, n as u32);
                let mut f = OutputFile::create_with(&path, direct, 8192).expect("create");
                f.write_all(&want).expect("write");
                assert_eq!(f.finish_padded().expect("finish"), n as u64);
                drop(f);
                let size = std::fs::metadata(&path).expect("metadata").len();
                assert!(
                    size >= n as u64 && size < (n + ALIGN) as u64,
                    "{size} for {n}"
                );
                let back = read_prefix(&path, n as u64, buffer).expect("read back");
                assert!(back.bytes() == want, "{n} bytes, direct {direct}");
                buffer = back.into_buffer();
            }
        }
        // A file shorter than its recorded length is refused by name of the lengths.
        std::fs::write(&path, b"abc").expect("write");
        let err = OutputFile::reopen(&path, 4, 8192).err().expect("too short");
        assert_eq!(err.to_string(), "3 bytes where 4 were recorded");
        // Fewer bytes on disk than asked for is an error, not a short read.
        std::fs::write(&path, b"abc").expect("write");
        let err = read_prefix(&path, 4, buffer).err().expect("too short");
        assert_eq!(err.to_string(), "3 bytes where 4 were written");
    }
}
