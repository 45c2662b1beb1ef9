//! The SHA-256 of a file taken while it is being written: a thread reads, through the page
//! cache, the bytes its writer has declared final, so the digest costs the writer nothing and
//! is ready soon after the file is, instead of a second read of gigabytes at the build's end.

use sha2::{Digest, Sha256};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const RUNNING: u8 = 0;
const FINISHED: u8 = 1;
const CANCELLED: u8 = 2;

/// How long the reader sleeps when it has caught up with the writer.
const IDLE: Duration = Duration::from_millis(2);

struct Shared {
    /// Bytes from the start of the file that will not change any more.
    published: AtomicU64,
    state: AtomicU8,
}

/// The writer's side: declares how much of the file is final.
#[derive(Clone)]
pub struct Publish(Arc<Shared>);

impl Publish {
    /// The first `len` bytes of the file are written and will not change (it only grows).
    pub fn set(&self, len: u64) {
        self.0.published.store(len, Ordering::Release);
    }
}

/// The reading thread; dropping it unfinished stops the thread.
pub struct Follower {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<io::Result<(u64, String)>>>,
}

impl Follower {
    /// Starts hashing the file at `path` as its writer publishes it.
    pub fn start(path: &Path) -> io::Result<(Follower, Publish)> {
        let file = std::fs::File::open(path)?;
        let shared = Arc::new(Shared {
            published: AtomicU64::new(0),
            state: AtomicU8::new(RUNNING),
        });
        let reader = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("follow-sha256".to_owned())
            .spawn(move || follow(&file, &reader))?;
        let publish = Publish(Arc::clone(&shared));
        Ok((
            Follower {
                shared,
                thread: Some(thread),
            },
            publish,
        ))
    }

    /// Size and SHA-256 of the file's first bytes, as many as were published last: call it
    /// once the writer is done.
    pub fn finish(mut self) -> io::Result<(u64, String)> {
        self.shared.state.store(FINISHED, Ordering::Release);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            _ => Err(io::Error::other("the hashing thread failed")),
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.shared.state.store(CANCELLED, Ordering::Release);
        }
    }
}

fn follow(file: &std::fs::File, shared: &Shared) -> io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    loop {
        // The state before the length: once finished, the last length published is the end.
        let state = shared.state.load(Ordering::Acquire);
        let upto = shared.published.load(Ordering::Acquire);
        if at < upto {
            let len = (upto - at).min(buf.len() as u64) as usize;
            file.read_exact_at(&mut buf[..len], at)?;
            hasher.update(&buf[..len]);
            at += len as u64;
            continue;
        }
        match state {
            RUNNING => std::thread::sleep(IDLE),
            FINISHED => return Ok((at, hex::encode(hasher.finalize()))),
            _ => return Err(io::Error::other("cancelled")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_digest_is_of_the_published_bytes_read_while_they_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut file = std::fs::File::create(&path).unwrap();
        let (follower, publish) = Follower::start(&path).unwrap();
        let mut all = Vec::new();
        for i in 0..300u32 {
            let chunk: Vec<u8> = (0..(i * 97 % 9000)).map(|j| (i + j) as u8).collect();
            file.write_all(&chunk).unwrap();
            all.extend_from_slice(&chunk);
            publish.set(all.len() as u64);
        }
        // Bytes written but never published are not part of it.
        file.write_all(b"tail").unwrap();
        let (len, sha) = follower.finish().unwrap();
        assert_eq!(len, all.len() as u64);
        assert_eq!(sha, crate::model::digest::sha256_hex(&all));
    }

    #[test]
    fn a_dropped_follower_stops_its_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        let (follower, publish) = Follower::start(&path).unwrap();
        publish.set(3);
        let shared = Arc::clone(&follower.shared);
        drop(follower);
        // Only the test holds the shared state once the thread has gone.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&shared) > 2 && std::time::Instant::now() < deadline {
            std::thread::sleep(IDLE);
        }
        assert_eq!(Arc::strong_count(&shared), 2, "the publisher and the test");
    }
}
