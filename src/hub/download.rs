//! Getting one file into the cache, verified: reuse it if it is there and intact (whoever
//! downloaded it), otherwise download it into `blobs/<etag>.incomplete` — resuming what an
//! earlier run left there — and only after the size and hashes match rename it to
//! `blobs/<etag>` and link the snapshot path to it. A partial or corrupt file is never linked.
//!
//! The partial file is shared between processes and guarded by the blob's `flock`. Python
//! `huggingface_hub` 1.x stopped sharing it (it downloads to a per-process temporary name)
//! because `flock` silently succeeds on some network filesystems; here the final hash check is
//! what protects against that: two writers interleaving in one file produce a mismatch, the
//! file is deleted and downloaded again, and nothing unverified is ever published.

use super::cache::{hash_file, promise_of_pointer, FileDigest, Hasher};
use super::client::{error_chain, Context, Hub, Online, Stage};
use super::config::RepoKind;
use super::error::{Expected, FileRef, HubError};
use super::progress::FetchProgress;
use super::ResolvedFile;
use futures::StreamExt;
use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A file to have in the cache, with everything known about its content.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) kind: RepoKind,
    pub(crate) repo: String,
    /// As requested; recorded in the [`ResolvedFile`].
    pub(crate) revision: String,
    pub(crate) commit: String,
    pub(crate) path: String,
    pub(crate) size: u64,
    pub(crate) size_by: Expected,
    /// The blob name (the Hub's ETag).
    pub(crate) etag: String,
    pub(crate) sha256: Option<(String, Expected)>,
    /// The git blob id the Hub lists for non-LFS files.
    pub(crate) git_sha1: Option<String>,
}

impl Target {
    fn label(&self) -> String {
        format!("{}/{}", self.repo, self.path)
    }

    fn resolved(&self, sha256: String, local: PathBuf) -> ResolvedFile {
        ResolvedFile {
            repo: self.repo.clone(),
            kind: self.kind,
            revision: self.revision.clone(),
            commit: self.commit.clone(),
            path: self.path.clone(),
            size: self.size,
            sha256,
            local,
        }
    }

    fn file_ref(&self) -> Box<FileRef> {
        Box::new(FileRef {
            kind: self.kind,
            repo: self.repo.clone(),
            commit: self.commit.clone(),
            path: self.path.clone(),
        })
    }

    fn size_mismatch(&self, actual: u64) -> HubError {
        HubError::SizeMismatch {
            file: self.file_ref(),
            expected: self.size,
            actual,
            expected_by: self.size_by,
        }
    }

    fn hash_mismatch(
        &self,
        algorithm: &'static str,
        expected: &str,
        actual: &str,
        expected_by: Expected,
    ) -> HubError {
        HubError::HashMismatch {
            file: self.file_ref(),
            algorithm,
            expected: expected.to_owned(),
            actual: actual.to_owned(),
            expected_by,
        }
    }

    /// Checks a digest against every expectation.
    pub(crate) fn check(&self, digest: &FileDigest) -> Result<(), HubError> {
        if digest.size != self.size {
            return Err(self.size_mismatch(digest.size));
        }
        if let Some((expected, by)) = &self.sha256 {
            if !digest.sha256.eq_ignore_ascii_case(expected) {
                return Err(self.hash_mismatch("sha256", expected, &digest.sha256, *by));
            }
        }
        if let (Some(expected), Some(actual)) = (&self.git_sha1, &digest.git_sha1) {
            if !actual.eq_ignore_ascii_case(expected) {
                return Err(self.hash_mismatch("git blob sha1", expected, actual, Expected::Hub));
            }
        }
        Ok(())
    }

    /// Hashes `path` and checks it; `Ok(None)` when there is no such file.
    pub(crate) fn verify(&self, path: &Path) -> Result<Option<FileDigest>, HubError> {
        match std::fs::metadata(path) {
            Ok(meta) if meta.len() != self.size => return Err(self.size_mismatch(meta.len())),
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(HubError::Read {
                    path: path.to_owned(),
                    source,
                })
            }
        }
        let digest = hash_file(path, self.git_sha1.is_some()).map_err(|source| HubError::Read {
            path: path.to_owned(),
            source,
        })?;
        self.check(&digest)?;
        Ok(Some(digest))
    }
}

/// Why one streaming attempt ended before the file was complete.
enum Interruption {
    /// Worth resuming: the connection dropped, stalled, or the server had a transient error.
    /// The text says what happened, for the error if resuming never gets anywhere.
    Transient(HubError, String),
    /// Not worth retrying (404, 401, a full disk, more bytes than the file has).
    Fatal(HubError),
    /// The server answered a range request with the whole file.
    RangeIgnored,
}

fn is_mismatch(error: &HubError) -> bool {
    matches!(
        error,
        HubError::HashMismatch { .. } | HubError::SizeMismatch { .. }
    )
}

fn write_error(path: &Path, source: io::Error) -> HubError {
    // ENOSPC and EDQUOT: a full disk or an exhausted quota.
    if source.kind() == io::ErrorKind::StorageFull
        || source.kind() == io::ErrorKind::QuotaExceeded
        || matches!(source.raw_os_error(), Some(28 | 122))
    {
        HubError::DiskFull {
            path: path.to_owned(),
        }
    } else {
        HubError::Write {
            path: path.to_owned(),
            source,
        }
    }
}

fn remove_if_exists(path: &Path) -> Result<(), HubError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(HubError::Write {
            path: path.to_owned(),
            source,
        }),
    }
}

impl Hub {
    /// Makes `target` present and verified in the cache; returns it and whether it was
    /// downloaded.
    pub(crate) async fn ensure(
        &self,
        online: &Online,
        target: &Target,
        progress: &dyn FetchProgress,
    ) -> Result<(ResolvedFile, bool), HubError> {
        let (kind, repo) = (target.kind, target.repo.as_str());
        let pointer = self
            .cache
            .snapshot(kind, repo, &target.commit, &target.path);
        let blob = self.cache.blob(kind, repo, &target.etag);

        // Already linked (by us or by Python)? A corrupt copy is dropped and fetched again.
        match target.verify(&pointer) {
            Ok(Some(digest)) => return Ok((target.resolved(digest.sha256, pointer), false)),
            Ok(None) => {}
            Err(error) if is_mismatch(&error) => {
                let points_at_blob = std::fs::read_link(&pointer)
                    .ok()
                    .and_then(|link| link.file_name().map(|name| name == target.etag.as_str()))
                    .unwrap_or(false);
                remove_if_exists(&pointer)?;
                if points_at_blob {
                    remove_if_exists(&blob)?;
                }
            }
            Err(error) => return Err(error),
        }

        // Another revision may share the blob.
        if let Some(found) = self.reuse_blob(target, &blob)? {
            return Ok((found, false));
        }

        let _lock = self
            .cache
            .lock_blob(kind, repo, &target.etag)
            .await
            .map_err(|(path, source)| HubError::Write { path, source })?;
        // Whoever held the lock may just have finished this blob.
        if let Some(found) = self.reuse_blob(target, &blob)? {
            return Ok((found, false));
        }
        let digest = self.download(online, target, progress).await?;
        let partial = self.cache.incomplete(kind, repo, &target.etag);
        std::fs::rename(&partial, &blob).map_err(|source| HubError::Write {
            path: blob.clone(),
            source,
        })?;
        let pointer = self.link(target)?;
        Ok((target.resolved(digest.sha256, pointer), true))
    }

    fn link(&self, target: &Target) -> Result<PathBuf, HubError> {
        self.cache
            .link(
                target.kind,
                &target.repo,
                &target.commit,
                &target.path,
                &target.etag,
            )
            .map_err(|(path, source)| HubError::Write { path, source })
    }

    fn reuse_blob(&self, target: &Target, blob: &Path) -> Result<Option<ResolvedFile>, HubError> {
        match target.verify(blob) {
            Ok(Some(digest)) => {
                let pointer = self.link(target)?;
                Ok(Some(target.resolved(digest.sha256, pointer)))
            }
            Ok(None) => Ok(None),
            Err(error) if is_mismatch(&error) => {
                remove_if_exists(blob)?;
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// Downloads into `blobs/<etag>.incomplete`, resuming it, and checks the result. On a
    /// mismatch the partial file is deleted; a resumed download that fails the check is
    /// restarted once from zero, as the earlier bytes may be the bad ones.
    async fn download(
        &self,
        online: &Online,
        target: &Target,
        progress: &dyn FetchProgress,
    ) -> Result<FileDigest, HubError> {
        let partial = self
            .cache
            .incomplete(target.kind, &target.repo, &target.etag);
        if let Some(parent) = partial.parent() {
            std::fs::create_dir_all(parent).map_err(|source| write_error(parent, source))?;
        }
        let mut restarted = false;
        loop {
            let (digest, resumed) = self
                .download_once(online, target, &partial, progress)
                .await?;
            let checked = target.check(&digest);
            match checked {
                Ok(()) => return Ok(digest),
                Err(error) => {
                    remove_if_exists(&partial)?;
                    if resumed && !restarted {
                        restarted = true;
                        continue;
                    }
                    return Err(error);
                }
            }
        }
    }

    /// One pass until the file has `target.size` bytes or attempts run out; returns its digest
    /// and whether it resumed an earlier partial file.
    async fn download_once(
        &self,
        online: &Online,
        target: &Target,
        partial: &Path,
        progress: &dyn FetchProgress,
    ) -> Result<(FileDigest, bool), HubError> {
        let mut part = PartialFile::open(partial, target)?;
        let resumed = part.offset > 0;
        let label = target.label();
        progress.download_started(&label, target.size, part.offset);

        let context = Context {
            kind: target.kind,
            repo: &target.repo,
            revision: &target.commit,
            path: Some(&target.path),
            stage: Stage::Download,
        };
        let mut attempts = 0;
        let mut fruitless = 0;
        while part.offset < target.size {
            attempts += 1;
            let before = part.offset;
            // What ended this attempt early, and the connection error if there was one.
            let (what, transport) = match self
                .stream_into(online, target, context, &mut part, progress)
                .await
            {
                Ok(()) if part.offset >= target.size => break,
                Ok(()) => ("the connection closed early".to_owned(), None),
                Err(Interruption::Fatal(error)) => {
                    if is_mismatch(&error) {
                        drop(part);
                        remove_if_exists(partial)?;
                    }
                    return Err(error);
                }
                Err(Interruption::RangeIgnored) => {
                    part.restart(target)?;
                    continue;
                }
                Err(Interruption::Transient(error, what)) => (what, Some(error)),
            };
            // Progress resets the budget: a flaky connection that keeps delivering is resumed
            // as often as it takes; one that delivers nothing gives up after `retries`.
            if part.offset > before {
                fruitless = 0;
            } else {
                fruitless += 1;
            }
            if fruitless > self.config.retries {
                // Nothing ever arrived: report why the connection failed, not a truncation.
                if let (0, Some(error)) = (part.offset, transport) {
                    return Err(error);
                }
                return Err(HubError::Truncated {
                    file: target.file_ref(),
                    received: part.offset,
                    expected: target.size,
                    attempts,
                    partial: partial.to_owned(),
                    reason: what,
                });
            }
            tokio::time::sleep(self.backoff(fruitless)).await;
        }
        Ok((part.finish()?, resumed))
    }

    /// Streams the rest of the file (from `part.offset`) and appends it.
    async fn stream_into(
        &self,
        online: &Online,
        target: &Target,
        context: Context<'_>,
        part: &mut PartialFile<'_>,
        progress: &dyn FetchProgress,
    ) -> Result<(), Interruption> {
        let resumed_at = part.offset;
        let range = (resumed_at > 0).then_some(resumed_at..target.size);
        let (owner, name) = hf_hub::split_id(&target.repo);
        let opened = match target.kind {
            RepoKind::Model => open_stream(online.client.model(owner, name), target, range).await,
            RepoKind::Dataset => {
                open_stream(online.client.dataset(owner, name), target, range).await
            }
        };
        let (length, mut stream) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                let what = match &error {
                    hf_hub::HFError::Request { source, .. } => Some(format!(
                        "the request failed: {}",
                        self.redact(&error_chain(source))
                    )),
                    hf_hub::HFError::Http { context: http }
                        if super::client::is_transient_status(http.status.as_u16()) =>
                    {
                        Some(format!("the Hub answered HTTP {}", http.status.as_u16()))
                    }
                    _ => None,
                };
                let error = self.map_hf_error(error, context);
                return Err(match what {
                    Some(what) => Interruption::Transient(error, what),
                    None => Interruption::Fatal(error),
                });
            }
        };
        // A 206 is as long as the rest; the full length means the range was ignored.
        if resumed_at > 0 && length == Some(target.size) {
            return Err(Interruption::RangeIgnored);
        }
        let label = target.label();
        while let Some(chunk) = stream.next().await {
            let bytes = match chunk {
                Ok(bytes) => bytes,
                Err(hf_hub::HFError::Request { source, .. }) => {
                    let error = self.transport_error(&source, context);
                    let what = if matches!(error, HubError::Timeout { .. }) {
                        format!("no data for {:?}", self.config.read_timeout)
                    } else {
                        "the connection closed early".to_owned()
                    };
                    return Err(Interruption::Transient(error, what));
                }
                Err(other) => {
                    let detail = self.redact(&error_chain(&other));
                    let error = HubError::Protocol {
                        kind: target.kind,
                        repo: target.repo.clone(),
                        endpoint: self.config.endpoint.clone(),
                        doing: format!("downloading `{}`", target.path),
                        detail: detail.clone(),
                    };
                    return Err(Interruption::Transient(error, detail));
                }
            };
            let length = bytes.len() as u64;
            if part.offset + length > target.size {
                return Err(Interruption::Fatal(
                    target.size_mismatch(part.offset + length),
                ));
            }
            part.append(&bytes).map_err(Interruption::Fatal)?;
            progress.downloaded(&label, length);
        }
        Ok(())
    }
}

/// The file's bytes from `range.start` (all of them without a range), at the target's commit.
async fn open_stream<T: hf_hub::RepoType>(
    repo: hf_hub::HFRepository<T>,
    target: &Target,
    range: Option<std::ops::Range<u64>>,
) -> hf_hub::HFResult<(Option<u64>, hf_hub::repository::download::HFByteStream)> {
    repo.download_file_stream()
        .filename(target.path.clone())
        .revision(target.commit.clone())
        .maybe_range(range)
        .send()
        .await
}

/// `blobs/<etag>.incomplete` while it grows, with the hashes of what it holds so far.
struct PartialFile<'a> {
    file: File,
    path: &'a Path,
    hasher: Hasher,
    offset: u64,
}

impl<'a> PartialFile<'a> {
    /// Opens (or creates) the partial file and hashes what an earlier attempt left in it.
    fn open(path: &'a Path, target: &Target) -> Result<Self, HubError> {
        let read_error = |source: io::Error| HubError::Read {
            path: path.to_owned(),
            source,
        };
        let file = crate::model::nofollow::open(
            crate::model::nofollow::options()
                .read(true)
                .append(true)
                .create(true),
            path,
        )
        .map_err(|source| write_error(path, source))?;
        let mut part = PartialFile {
            offset: file.metadata().map_err(read_error)?.len(),
            file,
            path,
            hasher: Hasher::new(target.git_sha1.as_ref().map(|_| target.size)),
        };
        if part.offset > target.size {
            part.restart(target)?;
        } else if part.offset > 0 {
            part.file.seek(SeekFrom::Start(0)).map_err(read_error)?;
            part.hasher
                .feed_prefix(&mut part.file, part.offset)
                .map_err(read_error)?;
        }
        Ok(part)
    }

    fn restart(&mut self, target: &Target) -> Result<(), HubError> {
        self.file
            .set_len(0)
            .map_err(|source| write_error(self.path, source))?;
        self.hasher = Hasher::new(target.git_sha1.as_ref().map(|_| target.size));
        self.offset = 0;
        Ok(())
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), HubError> {
        self.file
            .write_all(bytes)
            .map_err(|source| write_error(self.path, source))?;
        self.hasher.update(bytes);
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Flushes to disk (the rename that follows must not publish unwritten data) and returns
    /// the digest.
    fn finish(self) -> Result<FileDigest, HubError> {
        self.file
            .sync_data()
            .map_err(|source| write_error(self.path, source))?;
        let (sha256, git_sha1) = self.hasher.finish();
        Ok(FileDigest {
            size: self.offset,
            sha256,
            git_sha1,
        })
    }
}

/// What a cached file's blob name promises, as a check on files we have no other record of.
pub(crate) fn check_promise(
    pointer: &Path,
    digest: &FileDigest,
    kind: RepoKind,
    repo: &str,
    commit: &str,
    path: &str,
) -> Result<(), HubError> {
    use super::cache::Algorithm;
    let Some((algorithm, expected)) = promise_of_pointer(pointer) else {
        return Ok(());
    };
    let actual = match algorithm {
        Algorithm::Sha256 => Some(digest.sha256.clone()),
        Algorithm::GitSha1 => digest.git_sha1.clone(),
    };
    match actual {
        Some(actual) if actual != expected => Err(HubError::HashMismatch {
            file: Box::new(FileRef {
                kind,
                repo: repo.to_owned(),
                commit: commit.to_owned(),
                path: path.to_owned(),
            }),
            algorithm: algorithm.name(),
            expected,
            actual,
            expected_by: Expected::CacheName,
        }),
        _ => Ok(()),
    }
}
