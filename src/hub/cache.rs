//! The standard Hugging Face cache layout, shared with Python `huggingface_hub` and `hf-hub`:
//!
//! ```text
//! <cache>/datasets--owner--name/
//!     refs/<revision>                 the commit a branch or tag last resolved to
//!     blobs/<etag>                    file contents, named by git blob SHA-1 or LFS SHA-256
//!     blobs/<etag>.incomplete         a download in progress (resumed, never read as complete)
//!     snapshots/<commit>/<path>       relative symlink to ../../blobs/<etag>
//! <cache>/.locks/datasets--owner--name/<etag>.lock   held while a blob is written
//! ```
//!
//! Python locks with `filelock`, which on Unix is `flock(2)`, and so does `std::fs::File::lock`:
//! both tools can fill the same cache at the same time.

use super::config::RepoKind;
use sha1::Sha1;
use sha2::{Digest as _, Sha256};
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Paths in one cache directory.
#[derive(Debug, Clone)]
pub(crate) struct Cache {
    root: PathBuf,
}

impl Cache {
    pub(crate) fn new(root: impl Into<PathBuf>) -> Self {
        Cache { root: root.into() }
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// `datasets--owner--name`, as `huggingface_hub.file_download.repo_folder_name` spells it.
    pub(crate) fn folder_name(kind: RepoKind, repo: &str) -> String {
        std::iter::once(kind.plural())
            .chain(repo.split('/'))
            .collect::<Vec<_>>()
            .join("--")
    }

    pub(crate) fn repo_dir(&self, kind: RepoKind, repo: &str) -> PathBuf {
        self.root.join(Self::folder_name(kind, repo))
    }

    pub(crate) fn snapshot_dir(&self, kind: RepoKind, repo: &str, commit: &str) -> PathBuf {
        self.repo_dir(kind, repo).join("snapshots").join(commit)
    }

    /// Where a file of a commit is read from. `path` was checked by `check_repo_path`, so it
    /// stays inside the snapshot directory.
    pub(crate) fn snapshot(&self, kind: RepoKind, repo: &str, commit: &str, path: &str) -> PathBuf {
        let mut out = self.snapshot_dir(kind, repo, commit);
        out.extend(path.split('/'));
        out
    }

    pub(crate) fn blob(&self, kind: RepoKind, repo: &str, etag: &str) -> PathBuf {
        self.repo_dir(kind, repo).join("blobs").join(etag)
    }

    /// The partial download, resumed by the next run. (Python 1.x downloads to
    /// `<etag>.<random>.incomplete` instead and never resumes; the names cannot collide.)
    pub(crate) fn incomplete(&self, kind: RepoKind, repo: &str, etag: &str) -> PathBuf {
        self.repo_dir(kind, repo)
            .join("blobs")
            .join(format!("{etag}.incomplete"))
    }

    fn lock_file(&self, kind: RepoKind, repo: &str, etag: &str) -> PathBuf {
        self.root
            .join(".locks")
            .join(Self::folder_name(kind, repo))
            .join(format!("{etag}.lock"))
    }

    fn ref_file(&self, kind: RepoKind, repo: &str, revision: &str) -> PathBuf {
        let mut out = self.repo_dir(kind, repo).join("refs");
        out.extend(revision.split('/'));
        out
    }

    /// The commit a branch or tag resolved to when it was last online, if any.
    pub(crate) fn read_ref(
        &self,
        kind: RepoKind,
        repo: &str,
        revision: &str,
    ) -> Result<Option<String>, (PathBuf, io::Error)> {
        let path = self.ref_file(kind, repo, revision);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text.trim().to_owned())),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err((path, error)),
        }
    }

    /// Records `revision → commit` like `huggingface_hub` does (no trailing newline), replacing
    /// the file atomically so a concurrent reader never sees it half written.
    pub(crate) fn write_ref(
        &self,
        kind: RepoKind,
        repo: &str,
        revision: &str,
        commit: &str,
    ) -> Result<(), (PathBuf, io::Error)> {
        let path = self.ref_file(kind, repo, revision);
        write_atomic(&path, commit.as_bytes()).map_err(|error| (path, error))
    }

    /// Points `snapshots/<commit>/<path>` at `blobs/<etag>` with a relative symlink (what
    /// Python creates), replacing whatever was there.
    pub(crate) fn link(
        &self,
        kind: RepoKind,
        repo: &str,
        commit: &str,
        path: &str,
        etag: &str,
    ) -> Result<PathBuf, (PathBuf, io::Error)> {
        let pointer = self.snapshot(kind, repo, commit, path);
        let parent = pointer
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.snapshot_dir(kind, repo, commit));
        std::fs::create_dir_all(&parent).map_err(|error| (parent.clone(), error))?;
        // From snapshots/<commit>/<dirs…>/ up to the repo folder: one `..` per directory of
        // `path`, plus `<commit>` and `snapshots`.
        let depth = path.split('/').count() + 1;
        let mut target = PathBuf::new();
        for _ in 0..depth {
            target.push("..");
        }
        target.push("blobs");
        target.push(etag);
        let temporary = parent.join(format!(
            ".{}.{}.tmp",
            pointer
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id()
        ));
        let _ = std::fs::remove_file(&temporary);
        place_pointer(&target, &self.blob(kind, repo, etag), &temporary)
            .and_then(|()| std::fs::rename(&temporary, &pointer))
            .map_err(|error| {
                let _ = std::fs::remove_file(&temporary);
                (pointer.clone(), error)
            })?;
        Ok(pointer)
    }

    /// Every file of a cached snapshot, as `/`-separated repo paths, sorted; `None` when the
    /// commit is not cached at all.
    pub(crate) fn list_snapshot(
        &self,
        kind: RepoKind,
        repo: &str,
        commit: &str,
    ) -> Result<Option<Vec<String>>, (PathBuf, io::Error)> {
        let root = self.snapshot_dir(kind, repo, commit);
        if !root.is_dir() {
            return Ok(None);
        }
        let mut files = Vec::new();
        let mut pending = vec![(root, String::new())];
        while let Some((dir, prefix)) = pending.pop() {
            let entries = std::fs::read_dir(&dir).map_err(|error| (dir.clone(), error))?;
            for entry in entries {
                let entry = entry.map_err(|error| (dir.clone(), error))?;
                // Names that are not UTF-8 cannot be Hub paths.
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                if name.starts_with('.') && name.ends_with(".tmp") {
                    continue;
                }
                let path = if prefix.is_empty() {
                    name
                } else {
                    format!("{prefix}/{name}")
                };
                // `metadata` follows the pointer symlinks; a dangling one is skipped, as the
                // blob it promises is not there.
                match std::fs::metadata(entry.path()) {
                    Ok(meta) if meta.is_dir() => pending.push((entry.path(), path)),
                    Ok(_) => files.push(path),
                    Err(_) => {}
                }
            }
        }
        files.sort();
        Ok(Some(files))
    }

    /// Takes the per-blob lock, waiting (without blocking the runtime) while another process —
    /// `chatshards` or Python — writes the same blob.
    pub(crate) async fn lock_blob(
        &self,
        kind: RepoKind,
        repo: &str,
        etag: &str,
    ) -> Result<BlobLock, (PathBuf, io::Error)> {
        let path = self.lock_file(kind, repo, etag);
        let open = || -> io::Result<File> {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            crate::model::nofollow::open(
                crate::model::nofollow::options()
                    .create(true)
                    .truncate(false)
                    .write(true),
                &path,
            )
        };
        let file = open().map_err(|error| (path.clone(), error))?;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(BlobLock { _file: file }),
                Err(std::fs::TryLockError::WouldBlock) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(std::fs::TryLockError::Error(error)) => return Err((path, error)),
            }
        }
    }
}

/// Held while a blob is written; dropping it closes the file, which releases the `flock`.
pub(crate) struct BlobLock {
    _file: File,
}

#[cfg(unix)]
fn place_pointer(target: &Path, _blob: &Path, at: &Path) -> io::Result<()> {
    std::os::unix::fs::symlink(target, at)
}

/// Without symlinks, Python falls back to copying the blob; so do we.
#[cfg(not(unix))]
fn place_pointer(_target: &Path, blob: &Path, at: &Path) -> io::Result<()> {
    std::fs::copy(blob, at).map(|_| ())
}

/// Writes through a temporary file in the same directory and renames it into place.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let parent = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(parent)?;
    let file_name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = parent.join(format!(".{file_name}.{}.tmp", std::process::id()));
    let result = crate::model::nofollow::write(&temporary, bytes)
        .and_then(|()| std::fs::rename(&temporary, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

/// Whether a server-given ETag can name a file in `blobs/`: the Hub's are hex digests; anything
/// that could leave the directory or hide as a dotfile is refused.
pub(crate) fn is_blob_name(etag: &str) -> bool {
    !etag.is_empty()
        && etag.len() <= 128
        && !etag.starts_with('.')
        && etag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// What a blob's name promises about its content: Hub ETags are the LFS SHA-256 (64 hex) or the
/// git blob SHA-1 (40 hex). Anything else promises nothing.
pub(crate) fn promise_of_pointer(pointer: &Path) -> Option<(Algorithm, String)> {
    let target = std::fs::read_link(pointer).ok()?;
    let name = target.file_name()?.to_str()?;
    promise_of_etag(name)
}

pub(crate) fn promise_of_etag(etag: &str) -> Option<(Algorithm, String)> {
    let hex = etag.bytes().all(|b| b.is_ascii_hexdigit());
    match etag.len() {
        64 if hex => Some((Algorithm::Sha256, etag.to_ascii_lowercase())),
        40 if hex => Some((Algorithm::GitSha1, etag.to_ascii_lowercase())),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Algorithm {
    Sha256,
    /// SHA-1 of `blob <size>\0<content>`: the git object id the Hub lists for non-LFS files.
    GitSha1,
}

impl Algorithm {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "sha256",
            Algorithm::GitSha1 => "git blob sha1",
        }
    }
}

/// SHA-256 of everything, plus the git blob id when a check needs it. Both run in the one pass
/// that writes or reads the bytes.
pub(crate) struct Hasher {
    sha256: Sha256,
    git: Option<Sha1>,
}

impl Hasher {
    /// `git_size`: the total size, which the git object header needs before any content.
    pub(crate) fn new(git_size: Option<u64>) -> Self {
        Hasher {
            sha256: Sha256::new(),
            git: git_size.map(|size| {
                let mut git = Sha1::new();
                git.update(format!("blob {size}\0").as_bytes());
                git
            }),
        }
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.sha256.update(bytes);
        if let Some(git) = &mut self.git {
            git.update(bytes);
        }
    }

    pub(crate) fn finish(self) -> (String, Option<String>) {
        (
            hex::encode(self.sha256.finalize()),
            self.git.map(|git| hex::encode(git.finalize())),
        )
    }

    /// Feeds the first `len` bytes of `file` (a partial download being resumed).
    pub(crate) fn feed_prefix(&mut self, file: &mut File, len: u64) -> io::Result<()> {
        let mut reader = Read::by_ref(file).take(len);
        let mut buffer = vec![0u8; 1 << 20];
        loop {
            let read = reader.read(&mut buffer)?;
            if read == 0 {
                return Ok(());
            }
            self.update(&buffer[..read]);
        }
    }
}

/// Size and content hashes of a file on disk (following symlinks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileDigest {
    pub(crate) size: u64,
    pub(crate) sha256: String,
    pub(crate) git_sha1: Option<String>,
}

pub(crate) fn hash_file(path: &Path, with_git: bool) -> io::Result<FileDigest> {
    let mut file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut hasher = Hasher::new(with_git.then_some(size));
    hasher.feed_prefix(&mut file, u64::MAX)?;
    let (sha256, git_sha1) = hasher.finish();
    Ok(FileDigest {
        size,
        sha256,
        git_sha1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_huggingface_hub() {
        let cache = Cache::new("/c");
        assert_eq!(
            Cache::folder_name(RepoKind::Dataset, "Open-Orca/OpenOrca"),
            "datasets--Open-Orca--OpenOrca"
        );
        assert_eq!(Cache::folder_name(RepoKind::Model, "gpt2"), "models--gpt2");
        assert_eq!(
            cache.snapshot(RepoKind::Model, "q/m", "abc", "sub/dir/f.json"),
            PathBuf::from("/c/models--q--m/snapshots/abc/sub/dir/f.json")
        );
        assert_eq!(
            cache.incomplete(RepoKind::Dataset, "o/n", "e1"),
            PathBuf::from("/c/datasets--o--n/blobs/e1.incomplete")
        );
        assert_eq!(
            cache.lock_file(RepoKind::Dataset, "o/n", "e1"),
            PathBuf::from("/c/.locks/datasets--o--n/e1.lock")
        );
        assert_eq!(
            cache.ref_file(RepoKind::Dataset, "o/n", "refs/pr/1"),
            PathBuf::from("/c/datasets--o--n/refs/refs/pr/1")
        );
    }

    #[cfg(unix)]
    #[test]
    fn pointers_are_relative_symlinks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = Cache::new(dir.path());
        let blob = cache.blob(RepoKind::Dataset, "o/n", "etag1");
        std::fs::create_dir_all(blob.parent().expect("parent")).expect("mkdir");
        std::fs::write(&blob, b"hello").expect("write blob");
        let pointer = cache
            .link(RepoKind::Dataset, "o/n", "c0mmit", "a/b/file.txt", "etag1")
            .expect("link");
        assert_eq!(
            std::fs::read_link(&pointer).expect("readlink"),
            PathBuf::from("../../../../blobs/etag1")
        );
        assert_eq!(std::fs::read(&pointer).expect("read"), b"hello");
        // Relinking replaces the pointer.
        let pointer = cache
            .link(RepoKind::Dataset, "o/n", "c0mmit", "a/b/file.txt", "etag1")
            .expect("relink");
        assert_eq!(std::fs::read(&pointer).expect("read"), b"hello");
        assert_eq!(
            cache
                .list_snapshot(RepoKind::Dataset, "o/n", "c0mmit")
                .expect("list"),
            Some(vec!["a/b/file.txt".to_owned()])
        );
    }

    #[test]
    fn git_blob_id_matches_git() {
        // `printf 'hello\n' | git hash-object --stdin`
        let mut hasher = Hasher::new(Some(6));
        hasher.update(b"hello\n");
        let (sha256, git) = hasher.finish();
        assert_eq!(
            git.as_deref(),
            Some("ce013625030ba8dba906f756967f9e9ca394464a")
        );
        assert_eq!(
            sha256,
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        );
    }
}
