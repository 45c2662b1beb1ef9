//! Everything that can go wrong between a `hub:` entry and a verified file in the cache. Each
//! variant names the repo, revision and file involved; [`HubError::hint`] says what to do.
//! Messages never contain the token: text that comes from a server is redacted on the way in.

use super::config::RepoKind;
use std::fmt;
use std::path::{Path, PathBuf};

/// Which authority an expected size or hash came from, so a mismatch message can say who is
/// right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// The Hub's own metadata (tree listing, LFS oid).
    Hub,
    /// The pipeline's lockfile.
    Lockfile,
    /// The cache's own naming: blobs are named after their content hash.
    CacheName,
}

/// One file of one commit, as errors name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    pub kind: RepoKind,
    pub repo: String,
    pub commit: String,
    pub path: String,
}

impl fmt::Display for FileRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` from {} `{}` at commit `{}`",
            self.path, self.kind, self.repo, self.commit
        )
    }
}

/// Why a lockfile no longer matches the pipeline's `hub:` entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaleReason {
    /// The pipeline reads a repo at a revision the lockfile does not pin.
    Missing {
        kind: RepoKind,
        repo: String,
        revision: String,
    },
    /// The pipeline's `files` for this repo and revision differ from what was locked.
    FilesChanged {
        kind: RepoKind,
        repo: String,
        revision: String,
        locked: Vec<String>,
        wanted: Vec<String>,
    },
    /// The lockfile pins a repo at a revision the pipeline no longer reads.
    Unused {
        kind: RepoKind,
        repo: String,
        revision: String,
    },
    /// A version 1 lockfile (Hub files only) for a pipeline with local inputs or template
    /// variables.
    NoLocalPins,
    /// A local input file the lockfile does not pin.
    LocalMissing { path: String },
    /// A local input file whose size or SHA-256 differs from the pinned one.
    LocalChanged {
        path: String,
        locked: String,
        found: String,
    },
    /// The lockfile pins a local file the pipeline no longer reads.
    LocalUnused { path: String },
    /// The template variables differ from the pinned ones (canonical JSON).
    KwargsChanged { locked: String, wanted: String },
    /// A model served for `regenerate:` that the lockfile does not pin.
    ServerMissing { model: String },
    /// The lockfile pins a served model no `regenerate:` section uses any more.
    ServerUnused { model: String },
    /// The built-in tokenizer or template differs from the pinned one, or is used or not
    /// used where the lockfile says otherwise.
    EmbeddedChanged {
        input: String,
        locked: String,
        wanted: String,
    },
}

impl fmt::Display for StaleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StaleReason::Missing {
                kind,
                repo,
                revision,
            } => write!(f, "{kind} `{repo}` at `{revision}` is not in the lockfile"),
            StaleReason::FilesChanged {
                kind,
                repo,
                revision,
                locked,
                wanted,
            } => write!(
                f,
                "{kind} `{repo}` at `{revision}`: files changed from {} to {}",
                list(locked),
                list(wanted)
            ),
            StaleReason::Unused {
                kind,
                repo,
                revision,
            } => write!(
                f,
                "{kind} `{repo}` at `{revision}` is locked but no longer used"
            ),
            StaleReason::NoLocalPins => {
                f.write_str("the lockfile (version 1) pins no local files or template variables")
            }
            StaleReason::LocalMissing { path } => {
                write!(f, "local file `{path}` is not in the lockfile")
            }
            StaleReason::LocalChanged {
                path,
                locked,
                found,
            } => write!(
                f,
                "local file `{path}` changed: locked {locked}, found {found}"
            ),
            StaleReason::LocalUnused { path } => {
                write!(f, "local file `{path}` is locked but no longer used")
            }
            StaleReason::EmbeddedChanged {
                input,
                locked,
                wanted,
            } => write!(f, "{input}: locked {locked}, now {wanted}"),
            StaleReason::KwargsChanged { locked, wanted } => {
                write!(f, "template variables changed from {locked} to {wanted}")
            }
            StaleReason::ServerMissing { model } => {
                write!(f, "regenerate model `{model}` is not in the lockfile")
            }
            StaleReason::ServerUnused { model } => {
                write!(f, "regenerate model `{model}` is locked but no longer used")
            }
        }
    }
}

fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| format!("`{item}`")).collect();
    format!("[{}]", quoted.join(", "))
}

fn stale_lines(reasons: &[StaleReason]) -> String {
    reasons
        .iter()
        .map(|reason| format!("\n  - {reason}"))
        .collect()
}

fn with_message(message: &Option<String>) -> String {
    message
        .as_deref()
        .map(|message| format!(": {message}"))
        .unwrap_or_default()
}

fn lock_name(path: &Option<PathBuf>) -> String {
    path.as_deref()
        .map(|path| format!(" `{}`", path.display()))
        .unwrap_or_default()
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    #[error("invalid `hub:` entry: {reason}")]
    InvalidSpec { reason: String },

    #[error("the Hub endpoint `{endpoint}` is not an http(s) URL")]
    InvalidEndpoint { endpoint: String },

    #[error("cannot reach the Hub at `{endpoint}` while {doing}: {detail}")]
    Unreachable {
        endpoint: String,
        doing: String,
        detail: String,
    },

    #[error("the Hub at `{endpoint}` stopped answering while {doing}: {detail}")]
    Timeout {
        endpoint: String,
        doing: String,
        detail: String,
    },

    #[error("{kind} `{repo}` is gated: the Hub refused access (HTTP {status}){}", with_message(.message))]
    Gated {
        kind: RepoKind,
        repo: String,
        endpoint: String,
        status: u16,
        token_sent: bool,
        message: Option<String>,
    },

    #[error("the Hub refused access to {kind} `{repo}` (HTTP {status}){}", with_message(.message))]
    Unauthorized {
        kind: RepoKind,
        repo: String,
        status: u16,
        token_sent: bool,
        message: Option<String>,
    },

    #[error("{kind} `{repo}` does not exist on `{endpoint}`")]
    RepoNotFound {
        kind: RepoKind,
        repo: String,
        endpoint: String,
        token_sent: bool,
    },

    #[error("revision `{revision}` does not exist in {kind} `{repo}`")]
    RevisionNotFound {
        kind: RepoKind,
        repo: String,
        revision: String,
    },

    #[error("`{path}` does not exist in {kind} `{repo}` at revision `{revision}`")]
    FileNotFound {
        kind: RepoKind,
        repo: String,
        revision: String,
        path: String,
        /// Up to five repo paths sharing the file name or extension, for the hint.
        similar: Vec<String>,
    },

    #[error("no file in {kind} `{repo}` at revision `{revision}` matches `{pattern}`")]
    NoMatch {
        kind: RepoKind,
        repo: String,
        revision: String,
        pattern: String,
        /// The first few files the repo does have, for the hint.
        available: Vec<String>,
    },

    #[error("the Hub answered HTTP {status} for {kind} `{repo}` while {doing}{}", with_message(.message))]
    Http {
        kind: RepoKind,
        repo: String,
        doing: String,
        status: u16,
        message: Option<String>,
    },

    #[error("unexpected answer from `{endpoint}` for {kind} `{repo}` while {doing}: {detail}")]
    Protocol {
        kind: RepoKind,
        repo: String,
        endpoint: String,
        doing: String,
        detail: String,
    },

    #[error("download of {file} stopped at {received} of {expected} bytes after {attempts} attempts: {reason}")]
    Truncated {
        file: Box<FileRef>,
        received: u64,
        expected: u64,
        attempts: usize,
        /// The partial file, kept so the next run resumes.
        partial: PathBuf,
        /// What ended the last attempt.
        reason: String,
    },

    #[error("{file} has {algorithm} `{actual}`, but {} says `{expected}`", describe(.expected_by))]
    HashMismatch {
        file: Box<FileRef>,
        algorithm: &'static str,
        expected: String,
        actual: String,
        expected_by: Expected,
    },

    #[error("{file} is {actual} bytes, but {} says {expected}", describe(.expected_by))]
    SizeMismatch {
        file: Box<FileRef>,
        expected: u64,
        actual: u64,
        expected_by: Expected,
    },

    #[error("no space left on the device holding `{}`", .path.display())]
    DiskFull { path: PathBuf },

    #[error("{kind} `{repo}` at `{revision}`{} is not in the Hugging Face cache `{}`", .path.as_deref().map(|p| format!(", file `{p}`,")).unwrap_or_default(), .cache.display())]
    NotCached {
        kind: RepoKind,
        repo: String,
        /// The commit when known, else the requested revision.
        revision: String,
        path: Option<String>,
        cache: PathBuf,
        offline: bool,
    },

    #[error("the lockfile does not pin {kind} `{repo}` at `{revision}`{}", .pattern.as_deref().map(|p| format!(" with files matching `{p}`")).unwrap_or_default())]
    NotLocked {
        kind: RepoKind,
        repo: String,
        revision: String,
        pattern: Option<String>,
    },

    #[error("the lockfile{} is out of date:{}", lock_name(.path), stale_lines(.reasons))]
    StaleLock {
        path: Option<PathBuf>,
        reasons: Vec<StaleReason>,
    },

    #[error("the lockfile `{}` is invalid: {reason}", .path.display())]
    LockInvalid { path: PathBuf, reason: String },

    #[error("failed to read `{}`", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("failed to parse the `hub:` entries of `{}`", .path.display())]
    PipelineParse {
        path: PathBuf,
        #[source]
        source: serde_yaml_ng::Error,
    },

    #[error("`{}`: `{location}`: {error}", .path.display())]
    PipelineEntry {
        path: PathBuf,
        /// Where in the YAML, e.g. `sources[2].hub`.
        location: String,
        /// Shown inline rather than as a cause: the location alone says nothing.
        error: Box<HubError>,
    },

    #[error("failed to write `{}`", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("failed to start the HTTP client: {detail}")]
    Client { detail: String },
}

fn describe(expected_by: &Expected) -> &'static str {
    match expected_by {
        Expected::Hub => "the Hub",
        Expected::Lockfile => "the lockfile",
        Expected::CacheName => "its cache blob name",
    }
}

impl HubError {
    /// Fills in which lockfile a staleness error is about.
    pub fn with_lock_path(self, path: &Path) -> Self {
        match self {
            HubError::StaleLock { reasons, .. } => HubError::StaleLock {
                path: Some(path.to_owned()),
                reasons,
            },
            other => other,
        }
    }

    /// The error, its causes, and what to do, as one message (the `hint:` goes last, after
    /// the causes, as uv prints it).
    pub fn explained(&self, pipeline: &Path) -> String {
        let mut message = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            message.push_str(&format!("\n  caused by: {cause}"));
            source = cause.source();
        }
        if let Some(hint) = self.hint_for(Some(pipeline)) {
            message.push_str(&format!("\n\nhint: {hint}"));
        }
        message
    }

    /// What to do about it, with `PIPELINE.yaml` as a placeholder for the pipeline path.
    pub fn hint(&self) -> Option<String> {
        self.hint_for(None)
    }

    /// [`HubError::hint`], naming the actual pipeline file in suggested commands.
    pub fn hint_for(&self, pipeline: Option<&Path>) -> Option<String> {
        let pipeline = pipeline
            .map(|path| path.display().to_string())
            .unwrap_or_else(|| "PIPELINE.yaml".to_owned());
        let hint = match self {
            HubError::InvalidSpec { .. } | HubError::PipelineParse { .. } => {
                "fix the `hub:` entry: `hub: {repo: owner/name, kind: dataset, revision: main, files: [\"*.parquet\"]}`".to_owned()
            }
            HubError::PipelineEntry { error, .. } => return error.hint_for(Some(Path::new(&pipeline))),
            HubError::InvalidEndpoint { .. } => {
                "set `HF_ENDPOINT` to a URL such as `https://huggingface.co`, or unset it".to_owned()
            }
            HubError::Unreachable { .. } => format!(
                "check the network, or set `HF_ENDPOINT` to a reachable Hub mirror; to build from a warm cache instead, \
                 run `chatshards fetch {pipeline}` once while online, then build with `HF_HUB_OFFLINE=1`"
            ),
            HubError::Timeout { .. } => format!(
                "run the command again: finished files are kept and partial downloads resume; \
                 to build from a warm cache without the network, set `HF_HUB_OFFLINE=1` (run `chatshards fetch {pipeline}` online first)"
            ),
            HubError::Gated {
                kind,
                repo,
                endpoint,
                token_sent,
                ..
            } => {
                let page = match kind {
                    RepoKind::Model => format!("{endpoint}/{repo}"),
                    RepoKind::Dataset => format!("{endpoint}/datasets/{repo}"),
                };
                if *token_sent {
                    format!(
                        "the account behind `HF_TOKEN` has not been granted access: accept the terms on {page} \
                         with that account (and wait for approval if the repo asks for it)"
                    )
                } else {
                    format!(
                        "accept the terms on {page} with your Hugging Face account, then set `HF_TOKEN` to a \
                         read token of that account (or run `hf auth login`)"
                    )
                }
            }
            HubError::Unauthorized {
                status, token_sent, ..
            } => match (status, token_sent) {
                (401, false) => "this repo needs a token: set `HF_TOKEN` to a read token (or run `hf auth login`)".to_owned(),
                (401, true) => "the Hub rejected the token: check `HF_TOKEN` (it may be expired or revoked)".to_owned(),
                _ => "the token in `HF_TOKEN` lacks read access to this repo (a fine-grained token must list it)".to_owned(),
            },
            HubError::RepoNotFound { token_sent, .. } => {
                let private = if *token_sent {
                    ""
                } else {
                    "; private repos also look missing without `HF_TOKEN`"
                };
                format!("check `repo` (`owner/name`) and `kind` (`model` or `dataset`){private}")
            }
            HubError::RevisionNotFound { .. } => {
                "check `revision`: a branch, a tag or a full 40-character commit SHA".to_owned()
            }
            HubError::FileNotFound { similar, .. } => {
                if similar.is_empty() {
                    "check `files`; globs such as `data/*.parquet` are allowed".to_owned()
                } else {
                    format!("check `files`; the repo has {}", list(similar))
                }
            }
            HubError::NoMatch { available, .. } => {
                if available.is_empty() {
                    "the repo has no files at this revision".to_owned()
                } else {
                    format!("the repo has {}", list(available))
                }
            }
            HubError::Http { status, .. } => match status {
                429 => "the Hub is rate limiting: wait a minute and run again (a token in `HF_TOKEN` raises the limit)".to_owned(),
                500..=599 => "the Hub had a server error: run again later".to_owned(),
                _ => return None,
            },
            HubError::Protocol { .. } => {
                "`HF_ENDPOINT` may not point at a Hugging Face Hub (or a proxy rewrote the answer)".to_owned()
            }
            HubError::Truncated { .. } => {
                "run the command again: the download resumes from the partial `.incomplete` file in the cache".to_owned()
            }
            HubError::HashMismatch { expected_by, .. } | HubError::SizeMismatch { expected_by, .. } => {
                match expected_by {
                    Expected::Hub => "the bad download was deleted; run again, and if it repeats, a proxy or mirror \
                                      (`HF_ENDPOINT`) is serving different bytes than the Hub lists"
                        .to_owned(),
                    Expected::Lockfile => format!(
                        "the cached copy differs from what the lockfile pins: run `chatshards fetch {pipeline}` to \
                         download the pinned bytes again"
                    ),
                    Expected::CacheName => format!(
                        "the cached file is corrupt: run `chatshards fetch {pipeline}` to download it again"
                    ),
                }
            }
            HubError::DiskFull { .. } => {
                "free space on that disk or point `HF_HUB_CACHE` at a larger one; the partial download is kept and resumes"
                    .to_owned()
            }
            HubError::NotCached { offline, .. } => {
                if *offline {
                    format!("run `chatshards fetch {pipeline}` with network access (without `HF_HUB_OFFLINE`) first")
                } else {
                    format!("run `chatshards fetch {pipeline}` first")
                }
            }
            HubError::NotLocked { .. } | HubError::StaleLock { .. } => {
                format!("run `chatshards lock {pipeline}` to update the lockfile")
            }
            HubError::LockInvalid { .. } => {
                format!("regenerate it with `chatshards lock --upgrade {pipeline}`")
            }
            HubError::Read { .. } | HubError::Write { .. } | HubError::Client { .. } => return None,
        };
        Some(hint)
    }
}
