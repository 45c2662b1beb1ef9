//! The four ways to turn a [`HubSpec`] into verified files in the cache:
//!
//! | call | network | reads exactly |
//! |---|---|---|
//! | [`Hub::resolve`] | yes, unless `HF_HUB_OFFLINE` | the revision's current commit |
//! | [`Hub::pin`] | yes, unless `HF_HUB_OFFLINE` | (metadata for the lockfile; downloads only non-LFS files) |
//! | [`Hub::fetch_locked`] | only for files missing from the cache | the lockfile's commit and hashes |
//! | [`Hub::resolve_locked`] | never | the lockfile's commit and hashes |

use super::cache::{hash_file, is_blob_name, promise_of_etag, promise_of_pointer, Algorithm};
use super::client::{Context, Hub, Online, Stage};
use super::config::{check_repo_path, compile_glob, is_commit, is_glob, HubSpec, RepoKind};
use super::download::{check_promise, Target};
use super::error::{Expected, FileRef, HubError};
use super::lockfile::{LockedFile, LockedRepo, Lockfile};
use super::progress::FetchProgress;
use futures::{StreamExt, TryStreamExt};
use hf_hub::repository::RepoTreeEntry;
use rayon::prelude::*;
use std::path::PathBuf;

/// A file a pipeline reads, present and verified in the HF cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedFile {
    pub repo: String,
    pub kind: RepoKind,
    /// The revision as requested (`main`).
    pub revision: String,
    /// The 40-hex commit it resolved to.
    pub commit: String,
    /// Path inside the repo.
    pub path: String,
    pub size: u64,
    /// Lowercase hex SHA-256 of the content.
    pub sha256: String,
    /// `HF_HUB_CACHE/datasets--owner--name/snapshots/<commit>/<path>`.
    pub local: PathBuf,
}

/// A file as the Hub lists it at a commit.
struct Listed {
    path: String,
    size: u64,
    /// Git object id: the blob id for regular files, the pointer's for LFS files.
    oid: String,
    lfs: bool,
}

/// A `files` entry that selected nothing.
struct Unmatched {
    pattern: String,
    glob: bool,
}

/// The paths `patterns` select from `available`, sorted and unique. Every pattern must select
/// something: an exact path that is missing or a glob that matches nothing is a mistake worth
/// reporting, not an empty dataset.
fn select(patterns: &[String], available: &[String]) -> Result<Vec<String>, Unmatched> {
    let mut selected = Vec::new();
    for pattern in patterns {
        let before = selected.len();
        if is_glob(pattern) {
            // Validated by `HubSpec::validate`; a pattern that fails here matches nothing.
            if let Ok(glob) = compile_glob(pattern) {
                selected.extend(available.iter().filter(|path| glob.is_match(path)).cloned());
            }
        } else if available.iter().any(|path| path == pattern) {
            selected.push(pattern.clone());
        }
        if selected.len() == before {
            return Err(Unmatched {
                pattern: pattern.clone(),
                glob: is_glob(pattern),
            });
        }
    }
    selected.sort();
    selected.dedup();
    Ok(selected)
}

/// Up to five paths with the same file name or extension as a path that was not found.
fn similar(pattern: &str, available: &[String]) -> Vec<String> {
    let name = pattern.rsplit('/').next().unwrap_or(pattern);
    let extension = name.rsplit_once('.').map(|(_, extension)| extension);
    available
        .iter()
        .filter(|path| {
            let other = path.rsplit('/').next().unwrap_or(path);
            other == name
                || extension.is_some_and(|extension| {
                    other.rsplit_once('.').map(|(_, e)| e) == Some(extension)
                })
        })
        .take(5)
        .cloned()
        .collect()
}

impl Hub {
    /// Resolves the revision to its current commit, lists and matches the files, and downloads
    /// whatever the cache lacks, verifying every file (size, and the LFS SHA-256 or git blob id
    /// the Hub lists). Records `refs/<revision>` in the cache like `huggingface_hub`.
    ///
    /// With `HF_HUB_OFFLINE`, answers from the cache alone: the last commit the revision
    /// resolved to, and the files of that snapshot.
    pub fn resolve(
        &self,
        spec: &HubSpec,
        progress: &dyn FetchProgress,
    ) -> Result<Vec<ResolvedFile>, HubError> {
        spec.validate()?;
        if self.config.offline {
            return self.resolve_offline(spec, progress).map(|(_, files)| files);
        }
        let online = self.online()?;
        online.runtime.block_on(async {
            let commit = self.commit_of(online, spec).await?;
            self.remember_ref(spec, &commit)?;
            let targets = self.targets_at(online, spec, &commit).await?;
            self.ensure_all(online, &targets, progress).await
        })
    }

    /// What `chatshards lock` records for one spec: the commit, and each matched file's size and
    /// SHA-256. LFS files are not downloaded (the Hub publishes their SHA-256); regular files are,
    /// as only their git blob id is published — they are small, and the build needs them anyway.
    pub fn pin(
        &self,
        spec: &HubSpec,
        progress: &dyn FetchProgress,
    ) -> Result<LockedRepo, HubError> {
        spec.validate()?;
        let mut requested = spec.files.clone();
        requested.sort();
        requested.dedup();
        let entry = |commit: String, files: Vec<LockedFile>| LockedRepo {
            repo: spec.repo.clone(),
            kind: spec.kind,
            revision: spec.revision.clone(),
            commit,
            requested: requested.clone(),
            files,
        };
        let locked = |file: &ResolvedFile| LockedFile {
            path: file.path.clone(),
            size: file.size,
            sha256: file.sha256.clone(),
        };
        if self.config.offline {
            let (commit, files) = self.resolve_offline(spec, progress)?;
            return Ok(entry(commit, files.iter().map(locked).collect()));
        }
        let online = self.online()?;
        online.runtime.block_on(async {
            let commit = self.commit_of(online, spec).await?;
            self.remember_ref(spec, &commit)?;
            let targets = self.targets_at(online, spec, &commit).await?;
            let (known, unknown): (Vec<Target>, Vec<Target>) = targets
                .into_iter()
                .partition(|target| target.sha256.is_some());
            let mut files: Vec<LockedFile> = known
                .iter()
                .filter_map(|target| {
                    target.sha256.as_ref().map(|(sha256, _)| LockedFile {
                        path: target.path.clone(),
                        size: target.size,
                        sha256: sha256.clone(),
                    })
                })
                .collect();
            let fetched = self.ensure_all(online, &unknown, progress).await?;
            files.extend(fetched.iter().map(locked));
            files.sort_by(|a, b| a.path.cmp(&b.path));
            Ok(entry(commit, files))
        })
    }

    /// Makes the cache hold exactly what the lockfile pins for `spec`: files already cached are
    /// verified against the lockfile's hashes (no network when all are there); missing or
    /// corrupt ones are downloaded at the locked commit — even if the branch has moved since —
    /// and must match the lockfile's SHA-256.
    pub fn fetch_locked(
        &self,
        spec: &HubSpec,
        lock: &Lockfile,
        progress: &dyn FetchProgress,
    ) -> Result<Vec<ResolvedFile>, HubError> {
        spec.validate()?;
        let (entry, files) = locked_files(spec, lock)?;
        let mut ready = Vec::new();
        let mut missing = Vec::new();
        for file in files {
            let target = locked_target(entry, file, String::new());
            let pointer = self
                .cache
                .snapshot(entry.kind, &entry.repo, &entry.commit, &file.path);
            match target.verify(&pointer) {
                Ok(Some(digest)) => {
                    let resolved = resolved_file(entry, file, digest.sha256, pointer);
                    progress.file_ready(&resolved, false);
                    ready.push(resolved);
                }
                Ok(None) | Err(HubError::HashMismatch { .. } | HubError::SizeMismatch { .. }) => {
                    missing.push(file);
                }
                Err(error) => return Err(error),
            }
        }
        if self.config.offline && !missing.is_empty() {
            // Nothing can be downloaded: report the first missing or damaged file, in order.
            return self.resolve_locked(spec, lock);
        }
        if !missing.is_empty() {
            let online = self.online()?;
            let fetched = online.runtime.block_on(async {
                let context = Context {
                    kind: entry.kind,
                    repo: &entry.repo,
                    revision: &entry.commit,
                    path: None,
                    stage: Stage::Metadata,
                };
                let targets: Vec<Target> = futures::stream::iter(missing.iter().map(|file| {
                    let context = context.file(&file.path, Stage::Metadata);
                    async move {
                        let head = self.head(online, context).await?;
                        locked_target_checked(entry, file, head.etag, head.size)
                    }
                }))
                .buffer_unordered(self.config.jobs)
                .try_collect()
                .await?;
                self.ensure_all(online, &targets, progress).await
            })?;
            ready.extend(fetched);
        }
        ready.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(ready)
    }

    /// The files the lockfile pins for `spec`, from the cache, each checked against the
    /// lockfile's size and SHA-256. Never touches the network: a locked build calls this.
    pub fn resolve_locked(
        &self,
        spec: &HubSpec,
        lock: &Lockfile,
    ) -> Result<Vec<ResolvedFile>, HubError> {
        spec.validate()?;
        let (entry, files) = locked_files(spec, lock)?;
        // Hash in parallel; keep the first error in file order so messages are stable.
        let results: Vec<Result<ResolvedFile, HubError>> = files
            .par_iter()
            .map(|file| {
                let target = locked_target(entry, file, String::new());
                let pointer =
                    self.cache
                        .snapshot(entry.kind, &entry.repo, &entry.commit, &file.path);
                match target.verify(&pointer)? {
                    Some(digest) => Ok(resolved_file(entry, file, digest.sha256, pointer)),
                    None => Err(HubError::NotCached {
                        kind: entry.kind,
                        repo: entry.repo.clone(),
                        revision: entry.commit.clone(),
                        path: Some(file.path.clone()),
                        cache: self.cache.root().to_owned(),
                        offline: self.config.offline,
                    }),
                }
            })
            .collect();
        results.into_iter().collect()
    }

    /// `resolve` without the network: the revision's last known commit (`refs/<revision>`),
    /// the files of its snapshot, each checked against the hash its blob is named after.
    fn resolve_offline(
        &self,
        spec: &HubSpec,
        progress: &dyn FetchProgress,
    ) -> Result<(String, Vec<ResolvedFile>), HubError> {
        let not_cached = |revision: &str, path: Option<String>| HubError::NotCached {
            kind: spec.kind,
            repo: spec.repo.clone(),
            revision: revision.to_owned(),
            path,
            cache: self.cache.root().to_owned(),
            offline: true,
        };
        let commit = if is_commit(&spec.revision) {
            spec.revision.to_ascii_lowercase()
        } else {
            self.cache
                .read_ref(spec.kind, &spec.repo, &spec.revision)
                .map_err(|(path, source)| HubError::Read { path, source })?
                .filter(|commit| is_commit(commit))
                .ok_or_else(|| not_cached(&spec.revision, None))?
        };
        let available = self
            .cache
            .list_snapshot(spec.kind, &spec.repo, &commit)
            .map_err(|(path, source)| HubError::Read { path, source })?
            .ok_or_else(|| not_cached(&commit, None))?;
        let selected = select(&spec.files, &available)
            .map_err(|unmatched| not_cached(&commit, Some(unmatched.pattern)))?;
        let results: Vec<Result<ResolvedFile, HubError>> = selected
            .par_iter()
            .map(|path| {
                let pointer = self.cache.snapshot(spec.kind, &spec.repo, &commit, path);
                let git = matches!(promise_of_pointer(&pointer), Some((Algorithm::GitSha1, _)));
                let digest = hash_file(&pointer, git).map_err(|source| HubError::Read {
                    path: pointer.clone(),
                    source,
                })?;
                check_promise(&pointer, &digest, spec.kind, &spec.repo, &commit, path)?;
                Ok(ResolvedFile {
                    repo: spec.repo.clone(),
                    kind: spec.kind,
                    revision: spec.revision.clone(),
                    commit: commit.clone(),
                    path: path.clone(),
                    size: digest.size,
                    sha256: digest.sha256,
                    local: pointer,
                })
            })
            .collect();
        let files = results.into_iter().collect::<Result<Vec<_>, _>>()?;
        for file in &files {
            progress.file_ready(file, false);
        }
        Ok((commit, files))
    }

    fn remember_ref(&self, spec: &HubSpec, commit: &str) -> Result<(), HubError> {
        if is_commit(&spec.revision) {
            return Ok(());
        }
        self.cache
            .write_ref(spec.kind, &spec.repo, &spec.revision, commit)
            .map_err(|(path, source)| HubError::Write { path, source })
    }

    /// Every file of the repo at `commit`.
    async fn list(
        &self,
        online: &Online,
        spec: &HubSpec,
        commit: &str,
    ) -> Result<Vec<Listed>, HubError> {
        let context = Context::new(spec, Stage::Listing).at(commit);
        let (owner, name) = hf_hub::split_id(&spec.repo);
        let entries = match spec.kind {
            RepoKind::Model => list_tree(&online.client.model(owner, name), commit).await,
            RepoKind::Dataset => list_tree(&online.client.dataset(owner, name), commit).await,
        }
        .map_err(|error| self.map_hf_error(error, context))?;
        let mut listed = Vec::new();
        for entry in entries {
            if let RepoTreeEntry::File {
                path,
                size,
                oid,
                lfs,
                ..
            } = entry
            {
                // A path that could escape the snapshot directory cannot be cached safely.
                if check_repo_path(&path).is_ok() {
                    listed.push(Listed {
                        path,
                        size,
                        oid,
                        lfs: lfs.is_some(),
                    });
                }
            }
        }
        listed.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(listed)
    }

    /// The selected files at `commit`, with what the Hub says about their content. LFS files
    /// get a HEAD for their SHA-256; regular files carry their git blob id in the listing.
    async fn targets_at(
        &self,
        online: &Online,
        spec: &HubSpec,
        commit: &str,
    ) -> Result<Vec<Target>, HubError> {
        let listed = self.list(online, spec, commit).await?;
        let available: Vec<String> = listed.iter().map(|file| file.path.clone()).collect();
        let selected = select(&spec.files, &available).map_err(|unmatched| {
            if unmatched.glob {
                HubError::NoMatch {
                    kind: spec.kind,
                    repo: spec.repo.clone(),
                    revision: spec.revision.clone(),
                    pattern: unmatched.pattern,
                    available: available.iter().take(10).cloned().collect(),
                }
            } else {
                HubError::FileNotFound {
                    kind: spec.kind,
                    repo: spec.repo.clone(),
                    revision: spec.revision.clone(),
                    similar: similar(&unmatched.pattern, &available),
                    path: unmatched.pattern,
                }
            }
        })?;
        let context = Context::new(spec, Stage::Metadata).at(commit);
        let chosen = listed
            .iter()
            .filter(|file| selected.binary_search(&file.path).is_ok());
        futures::stream::iter(chosen.map(|file| async move {
            if !file.lfs && !is_blob_name(&file.oid) {
                return Err(HubError::Protocol {
                    kind: spec.kind,
                    repo: spec.repo.clone(),
                    endpoint: self.config.endpoint.clone(),
                    doing: format!(
                        "listing the files of {} `{}` at `{commit}`",
                        spec.kind, spec.repo
                    ),
                    detail: format!("`{}` has an unusable object id `{}`", file.path, file.oid),
                });
            }
            let mut target = Target {
                kind: spec.kind,
                repo: spec.repo.clone(),
                revision: spec.revision.clone(),
                commit: commit.to_owned(),
                path: file.path.clone(),
                size: file.size,
                size_by: Expected::Hub,
                etag: file.oid.to_ascii_lowercase(),
                sha256: None,
                git_sha1: None,
            };
            if file.lfs {
                let head = self
                    .head(online, context.file(&file.path, Stage::Metadata))
                    .await?;
                if let Some(size) = head.size.filter(|&size| size != file.size) {
                    return Err(HubError::Protocol {
                        kind: spec.kind,
                        repo: spec.repo.clone(),
                        endpoint: self.config.endpoint.clone(),
                        doing: format!("looking up `{}` at `{commit}`", file.path),
                        detail: format!(
                            "the listing says {} bytes but the file answers {size}",
                            file.size
                        ),
                    });
                }
                if let Some((Algorithm::Sha256, sha256)) = promise_of_etag(&head.etag) {
                    target.sha256 = Some((sha256, Expected::Hub));
                }
                target.etag = head.etag;
            } else if let Some((Algorithm::GitSha1, oid)) = promise_of_etag(&file.oid) {
                target.git_sha1 = Some(oid);
            }
            Ok(target)
        }))
        .buffer_unordered(self.config.jobs)
        .try_collect::<Vec<Target>>()
        .await
        .map(|mut targets| {
            targets.sort_by(|a, b| a.path.cmp(&b.path));
            targets
        })
    }

    /// Ensures every target, `jobs` at a time; the result is sorted by path.
    async fn ensure_all(
        &self,
        online: &Online,
        targets: &[Target],
        progress: &dyn FetchProgress,
    ) -> Result<Vec<ResolvedFile>, HubError> {
        let mut files: Vec<ResolvedFile> =
            futures::stream::iter(targets.iter().map(|target| async move {
                let (file, downloaded) = self.ensure(online, target, progress).await?;
                progress.file_ready(&file, downloaded);
                Ok::<_, HubError>(file)
            }))
            .buffer_unordered(self.config.jobs)
            .try_collect()
            .await?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }
}

/// Every entry of the repo tree at `commit`, all pages.
async fn list_tree<T: hf_hub::RepoType>(
    repo: &hf_hub::HFRepository<T>,
    commit: &str,
) -> hf_hub::HFResult<Vec<RepoTreeEntry>> {
    let stream = repo
        .list_tree()
        .revision(commit.to_owned())
        .recursive(true)
        .send()?;
    futures::pin_mut!(stream);
    let mut entries = Vec::new();
    while let Some(entry) = stream.next().await {
        entries.push(entry?);
    }
    Ok(entries)
}

/// The lockfile entry for `spec` and the locked files its patterns select.
fn locked_files<'a>(
    spec: &HubSpec,
    lock: &'a Lockfile,
) -> Result<(&'a LockedRepo, Vec<&'a LockedFile>), HubError> {
    let not_locked = |pattern: Option<String>| HubError::NotLocked {
        kind: spec.kind,
        repo: spec.repo.clone(),
        revision: spec.revision.clone(),
        pattern,
    };
    let entry = lock
        .entry(spec.kind, &spec.repo, &spec.revision)
        .ok_or_else(|| not_locked(None))?;
    let paths: Vec<String> = entry.files.iter().map(|file| file.path.clone()).collect();
    let selected =
        select(&spec.files, &paths).map_err(|unmatched| not_locked(Some(unmatched.pattern)))?;
    let files = entry
        .files
        .iter()
        .filter(|file| selected.binary_search(&file.path).is_ok())
        .collect();
    Ok((entry, files))
}

fn locked_target(entry: &LockedRepo, file: &LockedFile, etag: String) -> Target {
    Target {
        kind: entry.kind,
        repo: entry.repo.clone(),
        revision: entry.revision.clone(),
        commit: entry.commit.clone(),
        path: file.path.clone(),
        size: file.size,
        size_by: Expected::Lockfile,
        etag,
        sha256: Some((file.sha256.clone(), Expected::Lockfile)),
        git_sha1: None,
    }
}

/// A locked file about to be downloaded, with the Hub's metadata cross-checked against the
/// lockfile first: if the Hub now describes different bytes, downloading them is pointless.
fn locked_target_checked(
    entry: &LockedRepo,
    file: &LockedFile,
    etag: String,
    size: Option<u64>,
) -> Result<Target, HubError> {
    let mut target = locked_target(entry, file, etag.clone());
    match promise_of_etag(&etag) {
        Some((Algorithm::Sha256, sha256)) if sha256 != file.sha256 => {
            return Err(HubError::HashMismatch {
                file: file_ref(entry, file),
                algorithm: "sha256",
                expected: file.sha256.clone(),
                actual: sha256,
                expected_by: Expected::Lockfile,
            });
        }
        Some((Algorithm::GitSha1, oid)) => target.git_sha1 = Some(oid),
        _ => {}
    }
    if let Some(size) = size.filter(|&size| size != file.size) {
        return Err(HubError::SizeMismatch {
            file: file_ref(entry, file),
            expected: file.size,
            actual: size,
            expected_by: Expected::Lockfile,
        });
    }
    Ok(target)
}

fn file_ref(entry: &LockedRepo, file: &LockedFile) -> Box<FileRef> {
    Box::new(FileRef {
        kind: entry.kind,
        repo: entry.repo.clone(),
        commit: entry.commit.clone(),
        path: file.path.clone(),
    })
}

fn resolved_file(
    entry: &LockedRepo,
    file: &LockedFile,
    sha256: String,
    local: PathBuf,
) -> ResolvedFile {
    ResolvedFile {
        repo: entry.repo.clone(),
        kind: entry.kind,
        revision: entry.revision.clone(),
        commit: entry.commit.clone(),
        path: file.path.clone(),
        size: file.size,
        sha256,
        local,
    }
}
