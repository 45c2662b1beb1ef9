//! The large files a build appends to (`conversations.jsonl`, the spill's buckets, the
//! shards): written in whole blocks, made durable at sync points, reopened at a recorded
//! length after a kill, and, for those that end in the dataset, pushed to the device as they
//! are written.
//!
//! Blocks are at most 1 MiB: larger writes got 2 MiB page-cache folios that cost far more
//! system time (BENCHMARKS.md, "Shard writes in 256 KiB pieces").
//!
//! The thread that fills a file can hand its full blocks to [`BlockWriters`] instead of
//! writing them itself ([`OutputFile::write_behind`]): the build's rows are committed by one
//! thread, and the system's copy of ~10 GB into the page cache was most of that thread's time
//! on a large build (BENCHMARKS.md). Each file's blocks are written by one writer thread in
//! the order they were filled, at their own offsets, so the bytes are the same either way.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Bytes gathered before each write of an output.
const BLOCK: usize = 1 << 20;
/// Bytes written between two starts of writeback ([`OutputFile::early_writeback`]).
const WRITEBACK_BYTES: u64 = 32 << 20;
/// Blocks queued per writer thread before the filling thread waits (at most 32 MiB of 1 MiB
/// blocks per writer thread).
const QUEUED_BLOCKS: usize = 32;
/// Written blocks' buffers a file keeps for reuse.
const SPARE_BLOCKS: usize = 2;

/// Whether output files that must end durable start their writeback as they are written
/// (`CHATSHARDS_EARLY_WRITEBACK=0`: only at their final `fsync`; same bytes). Measured on a
/// 16-core host, 913K rows: 16.42 s with it against 19.05 s without (the shard phase 3.72
/// against 5.67 s), so it stays on by default.
fn early_writeback_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let value = std::env::var("CHATSHARDS_EARLY_WRITEBACK");
        !matches!(value.as_deref().map(str::trim), Ok("0" | "false"))
    })
}

/// Threads that write the full blocks of [`OutputFile`]s for the threads that fill them
/// (`CHATSHARDS_WRITE_BEHIND=0`: none, every block written by its filler; same bytes).
pub struct BlockWriters {
    queues: Vec<SyncSender<Block>>,
    /// The writer the next file is given to.
    next: AtomicUsize,
    threads: Vec<JoinHandle<()>>,
}

impl BlockWriters {
    /// `threads` writer threads, or `None` when switched off (or `threads` is 0).
    pub fn start(threads: usize) -> io::Result<Option<Arc<BlockWriters>>> {
        let off = matches!(
            std::env::var("CHATSHARDS_WRITE_BEHIND")
                .as_deref()
                .map(str::trim),
            Ok("0" | "false")
        );
        if off || threads == 0 {
            return Ok(None);
        }
        let (mut queues, mut handles) = (Vec::new(), Vec::new());
        for i in 0..threads {
            let (tx, rx) = sync_channel::<Block>(QUEUED_BLOCKS);
            handles.push(
                std::thread::Builder::new()
                    .name(format!("write-behind-{i}"))
                    .spawn(move || {
                        for block in rx {
                            block.write();
                        }
                    })?,
            );
            queues.push(tx);
        }
        Ok(Some(Arc::new(BlockWriters {
            queues,
            next: AtomicUsize::new(0),
            threads: handles,
        })))
    }

    /// The queue of the writer thread that takes a new file's blocks.
    fn queue(&self) -> SyncSender<Block> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.queues.len();
        self.queues[i].clone()
    }
}

impl Drop for BlockWriters {
    fn drop(&mut self) {
        self.queues.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// A full block on its way to a writer thread.
struct Block {
    file: Arc<File>,
    at: u64,
    bytes: Vec<u8>,
    shared: Arc<Shared>,
}

impl Block {
    fn write(self) {
        let result = self.file.write_all_at(&self.bytes, self.at);
        let end = self.at + self.bytes.len() as u64;
        let mut bytes = self.bytes;
        bytes.clear();
        let mut state = self.shared.lock();
        state.queued -= 1;
        match result {
            Ok(()) => state.written(&self.file, end),
            Err(e) => {
                state.error.get_or_insert(e);
            }
        }
        // The filling thread takes it back for a later block (a fresh one would be faulted in
        // again page by page).
        if state.spare.len() < SPARE_BLOCKS {
            state.spare.push(bytes);
        }
        drop(state);
        self.shared.idle.notify_all();
    }
}

/// What the filling thread and a file's writer thread share.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when a queued block has been written.
    idle: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[derive(Default)]
struct State {
    /// Blocks handed to the writer thread and not written yet.
    queued: usize,
    /// The first failed write of a queued block, reported by the next call on the file.
    error: Option<io::Error>,
    /// With [`OutputFile::early_writeback`]: the end of the bytes already handed to the
    /// device's writeback.
    writeback_from: Option<u64>,
    /// Told the length of the bytes that will not change any more, for a digest taken
    /// meanwhile ([`super::follow`]).
    publish: Option<super::follow::Publish>,
    /// Written blocks' buffers, empty, for the next blocks.
    spare: Vec<Vec<u8>>,
}

impl State {
    /// The file's first `end` bytes are written: tell the digest, start the writeback.
    fn written(&mut self, file: &File, end: u64) {
        if let Some(publish) = &self.publish {
            publish.set(end);
        }
        if let Some(from) = self.writeback_from {
            if end - from >= WRITEBACK_BYTES {
                start_writeback(file, from, end - from);
                self.writeback_from = Some(end);
            }
        }
    }
}

/// A write-only file written in blocks of a fixed size; see the module docs.
pub struct OutputFile {
    file: Arc<File>,
    /// Bytes not written yet, fewer than `block`.
    buffer: Vec<u8>,
    /// Bytes per write.
    block: usize,
    /// Bytes in the file so far (or queued for it).
    written: u64,
    /// [`OutputFile::sync_point`] writes the buffered bytes but does not sync them (see
    /// [`OutputFile::unsynced`]).
    unsynced: bool,
    shared: Arc<Shared>,
    /// With [`OutputFile::write_behind`]: the queue of the thread that writes its blocks.
    behind: Option<SyncSender<Block>>,
}

impl OutputFile {
    /// Creates (or truncates) `path`, to be written in 1 MiB blocks.
    pub fn create(path: &Path) -> io::Result<OutputFile> {
        Self::with_block(path, BLOCK)
    }

    /// Creates (or truncates) `path`, to be written in blocks of `block` bytes, e.g. smaller
    /// ones for many files open at once.
    pub fn with_block(path: &Path, block: usize) -> io::Result<OutputFile> {
        Ok(Self::with_file(open(path, true)?, block, 0))
    }

    /// [`OutputFile::reopen`] for a file written in 1 MiB blocks ([`OutputFile::create`]).
    pub fn resume(path: &Path, len: u64) -> io::Result<OutputFile> {
        Self::reopen(path, len, BLOCK)
    }

    /// Reopens a file at a length that [`OutputFile::sync_point`] returned (say, after the
    /// process was killed), dropping whatever was written after it, to go on writing as if the
    /// process had never stopped. The file is cut back to `len`, never shorter, so the
    /// recorded bytes stay on disk however often the process is killed while resuming.
    pub fn reopen(path: &Path, len: u64, block: usize) -> io::Result<OutputFile> {
        let file = open(path, false)?;
        let size = file.metadata()?.len();
        if size < len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{size} bytes where {len} were recorded"),
            ));
        }
        file.set_len(len)?;
        Ok(Self::with_file(file, block, len))
    }

    fn with_file(file: File, block: usize, written: u64) -> OutputFile {
        let block = block.max(1);
        OutputFile {
            file: Arc::new(file),
            buffer: Vec::with_capacity(block),
            block,
            written,
            unsynced: false,
            shared: Arc::default(),
            behind: None,
        }
    }

    /// Hands every full block to one of `writers`' threads (in the order they fill) instead
    /// of writing it on the calling thread.
    pub fn write_behind(&mut self, writers: &BlockWriters) {
        self.behind = Some(writers.queue());
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
            self.shared.lock().writeback_from = Some(self.written);
        }
    }

    /// Tells `publish` how much of the file is final as it is written.
    pub fn publish_to(&mut self, publish: super::follow::Publish) -> io::Result<()> {
        self.wait()?;
        publish.set(self.written);
        self.shared.lock().publish = Some(publish);
        Ok(())
    }

    /// Writes everything and returns the file's length: the length to read back with
    /// [`read_prefix`].
    pub fn finish(&mut self) -> io::Result<u64> {
        self.flush()?;
        Ok(self.written)
    }

    /// Makes everything written so far durable (`fdatasync`, unless
    /// [`OutputFile::unsynced`]) and returns the length to reopen the file at after a crash
    /// ([`OutputFile::reopen`]).
    pub fn sync_point(&mut self) -> io::Result<u64> {
        self.flush()?;
        if !self.unsynced {
            self.file.sync_data()?;
        }
        Ok(self.written)
    }

    /// Flushes everything, then waits until it is on disk (`fsync`).
    pub fn sync_all(&mut self) -> io::Result<()> {
        self.flush()?;
        self.file.sync_all()
    }

    /// Writes the buffered bytes, or queues them for the writer thread.
    fn write_buffer(&mut self) -> io::Result<()> {
        let at = self.written;
        let len = self.buffer.len() as u64;
        match &self.behind {
            None => {
                self.file.write_all_at(&self.buffer, at)?;
                self.buffer.clear();
                self.shared.lock().written(&self.file, at + len);
            }
            Some(queue) => {
                let spare = {
                    let mut state = self.shared.lock();
                    if let Some(e) = state.error.take() {
                        return Err(e);
                    }
                    state.queued += 1;
                    state.spare.pop()
                };
                let next = spare.unwrap_or_else(|| Vec::with_capacity(self.block));
                let bytes = std::mem::replace(&mut self.buffer, next);
                let block = Block {
                    file: Arc::clone(&self.file),
                    at,
                    bytes,
                    shared: Arc::clone(&self.shared),
                };
                if queue.send(block).is_err() {
                    self.shared.lock().queued -= 1;
                    return Err(io::Error::other("the writer thread stopped"));
                }
            }
        }
        self.written += len;
        Ok(())
    }

    /// Waits until every queued block is written; the first failed write's error.
    fn wait(&self) -> io::Result<()> {
        let mut state = self.shared.lock();
        while state.queued > 0 {
            state = self
                .shared
                .idle
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        match state.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for OutputFile {
    /// Queued blocks land before the file is let go of: whoever reads it next sees them.
    fn drop(&mut self) {
        let _ = self.wait();
    }
}

impl Write for OutputFile {
    /// Takes what fits in the current block: every write to the file is a whole block but the
    /// last, whatever the sizes written here.
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(self.block - self.buffer.len());
        self.buffer.extend_from_slice(&data[..n]);
        if self.buffer.len() == self.block {
            self.write_buffer()?;
        }
        Ok(n)
    }

    /// Writes the buffered bytes and waits for the blocks queued before them.
    fn flush(&mut self) -> io::Result<()> {
        if !self.buffer.is_empty() {
            self.write_buffer()?;
        }
        self.wait()
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

/// Reads the first `len` bytes of `path` (a file [`OutputFile::finish`] wrote) into `buffer`,
/// which is reused: its old contents are dropped, and it grows only if it is too small.
pub fn read_prefix(path: &Path, len: u64, mut buffer: Vec<u8>) -> io::Result<Vec<u8>> {
    let want = usize::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "file too large to read"))?;
    buffer.clear();
    buffer.reserve_exact(want);
    let got = File::open(path)?.take(len).read_to_end(&mut buffer)?;
    if got < want {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{got} bytes where {len} were written"),
        ));
    }
    Ok(buffer)
}

/// Opens `path` for writing, never through a symbolic link.
fn open(path: &Path, truncate: bool) -> io::Result<File> {
    use crate::model::nofollow;
    let mut options = nofollow::options();
    options.write(true).create(true).truncate(truncate);
    nofollow::open(&options, path)
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

    /// One piece of each size, each of its own bytes (seeds from `seed` on).
    fn pieces(sizes: &[usize], seed: u32) -> Vec<Vec<u8>> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| bytes(n, seed + i as u32))
            .collect()
    }

    /// Writes `pieces` (with a flush where a piece is empty) and returns what the file holds.
    fn written(pieces: &[Vec<u8>]) -> Vec<u8> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out");
        let mut f = OutputFile::create(&path).expect("create");
        for p in pieces {
            if p.is_empty() {
                f.flush().expect("flush");
            } else {
                f.write_all(p).expect("write");
            }
        }
        f.sync_all().expect("sync");
        drop(f);
        std::fs::read(&path).expect("read back")
    }

    #[test]
    fn blocks_written_behind_are_the_same_bytes_and_published_in_order() {
        let writers = BlockWriters::start(2).expect("start").expect("switched on");
        let sizes = [1, BLOCK - 1, BLOCK, 3 * BLOCK + 7, 4096, 5];
        let pieces = pieces(&sizes, 40);
        let want = pieces.concat();
        let dir = tempfile::tempdir().expect("tempdir");
        // Several files on the same writers at once, the digest of one taken as it is written.
        let paths: Vec<_> = (0..3).map(|i| dir.path().join(format!("f{i}"))).collect();
        let mut files: Vec<OutputFile> = paths
            .iter()
            .map(|p| {
                let mut f = OutputFile::create(p).expect("create");
                f.write_behind(&writers);
                f
            })
            .collect();
        let (follower, publish) = super::super::follow::Follower::start(&paths[0]).expect("follow");
        files[0].publish_to(publish).expect("publish");
        let mut total = 0;
        for p in &pieces {
            for f in &mut files {
                f.write_all(p).expect("write");
            }
            total += p.len() as u64;
            assert_eq!(files[1].sync_point().expect("sync point"), total);
            assert_eq!(std::fs::metadata(&paths[1]).expect("len").len(), total);
        }
        for f in &mut files {
            assert_eq!(f.finish().expect("finish"), want.len() as u64);
        }
        drop(files);
        for p in &paths {
            assert!(std::fs::read(p).expect("read") == want, "{}", p.display());
        }
        let (len, sha) = follower.finish().expect("digest");
        assert_eq!(len, want.len() as u64);
        assert_eq!(sha, crate::model::digest::sha256_hex(&want));
    }

    #[test]
    fn any_pieces_read_back_exactly() {
        let sizes = [
            1,
            4095,
            4096,
            4097,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            3 * BLOCK + 7,
            5,
        ];
        let pieces = pieces(&sizes, 0);
        let want = pieces.concat();
        let got = written(&pieces);
        assert_eq!(got.len(), want.len());
        assert!(got == want);
    }

    #[test]
    fn sync_points_change_nothing_and_a_reopened_file_goes_on_exactly() {
        let sizes = [4099, 10, BLOCK - 5, 2 * BLOCK + 9, 4096, 1];
        let pieces = pieces(&sizes, 10);
        let want = pieces.concat();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("out");
        // Uninterrupted, with a sync point after every piece.
        let mut f = OutputFile::create(&path).expect("create");
        let mut points = Vec::new();
        for p in &pieces {
            f.write_all(p).expect("write");
            points.push(f.sync_point().expect("sync point"));
        }
        f.sync_all().expect("sync");
        drop(f);
        assert!(std::fs::read(&path).expect("read") == want);
        // Killed after piece i (what followed it half written), reopened, finished.
        for (i, &at) in points.iter().enumerate() {
            let mut f = OutputFile::create(&path).expect("create");
            for p in &pieces[..=i] {
                f.write_all(p).expect("write");
            }
            assert_eq!(f.sync_point().expect("sync point"), at);
            f.write_all(&bytes(BLOCK + 17, 99)).expect("write junk");
            std::mem::forget(f);
            // Killed again right after each reopen, and again after a little more writing:
            // the recorded bytes are on disk every time.
            for _ in 0..2 {
                let f = OutputFile::reopen(&path, at, BLOCK).expect("reopen");
                std::mem::forget(f);
                let got = std::fs::read(&path).expect("read");
                assert!(got == want[..at as usize], "piece {i}");
            }
            let mut f = OutputFile::reopen(&path, at, BLOCK).expect("reopen");
            f.write_all(&bytes(BLOCK + 5, 98)).expect("write junk");
            std::mem::forget(f);
            let got = std::fs::read(&path).expect("read");
            assert!(got[..at as usize] == want[..at as usize], "piece {i}");
            let mut f = OutputFile::reopen(&path, at, BLOCK).expect("reopen");
            for p in &pieces[i + 1..] {
                f.write_all(p).expect("write");
            }
            f.sync_all().expect("sync");
            drop(f);
            let got = std::fs::read(&path).expect("read");
            assert!(got == want, "reopened after piece {i}");
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
            assert!(written(&pieces) == want, "{} bytes", want.len());
        }
    }

    #[test]
    fn finished_files_read_back_exactly_what_was_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("scratch");
        // One buffer throughout, as the shard writing reuses it: stale bytes must not show.
        let mut buffer = vec![0xAB; 3 * 4096];
        for n in [0, 1, 4096, 4097, 3 * 8192 + 5] {
            let want = bytes(n, n as u32);
            let mut f = OutputFile::with_block(&path, 8192).expect("create");
            f.write_all(&want).expect("write");
            assert_eq!(f.finish().expect("finish"), n as u64);
            drop(f);
            assert_eq!(std::fs::metadata(&path).expect("metadata").len(), n as u64);
            let back = read_prefix(&path, n as u64, buffer).expect("read back");
            assert!(back == want, "{n} bytes");
            buffer = back;
        }
        // A file shorter than its recorded length is refused by name of the lengths.
        std::fs::write(&path, b"abc").expect("write");
        let err = OutputFile::reopen(&path, 4, 8192).err().expect("too short");
        assert_eq!(err.to_string(), "3 bytes where 4 were recorded");
        // Fewer bytes on disk than asked for is an error, not a short read.
        std::fs::write(&path, b"abc").expect("write");
        let err = read_prefix(&path, 4, buffer).expect_err("too short");
        assert_eq!(err.to_string(), "3 bytes where 4 were written");
    }
}
