//! What a pipeline asks of the Hub ([`HubEntry`] as written, [`HubSpec`] once checked) and how
//! to reach it ([`HubConfig`], read from the same environment variables as Python's
//! `huggingface_hub`, so both tools share one cache and one token).

use super::error::HubError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// The two kinds of Hub repository a pipeline reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepoKind {
    /// A model repo (`tokenizer.json`, `chat_template.jinja`).
    Model,
    /// A dataset repo (parquet / JSON files).
    Dataset,
}

impl RepoKind {
    /// `model` / `dataset`, as written in YAML and lockfiles.
    pub fn as_str(self) -> &'static str {
        match self {
            RepoKind::Model => "model",
            RepoKind::Dataset => "dataset",
        }
    }

    /// The plural used by the Hub API (`/api/datasets/...`) and by cache folder names
    /// (`datasets--owner--name`).
    pub(crate) fn plural(self) -> &'static str {
        match self {
            RepoKind::Model => "models",
            RepoKind::Dataset => "datasets",
        }
    }

    /// The prefix of download URLs: models live at the Hub root, datasets under `datasets/`.
    pub(crate) fn url_prefix(self) -> &'static str {
        match self {
            RepoKind::Model => "",
            RepoKind::Dataset => "datasets/",
        }
    }
}

impl fmt::Display for RepoKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn default_revision() -> String {
    "main".to_owned()
}

/// A `hub:` block exactly as the pipeline YAML writes it, e.g.
/// `hub: {repo: Open-Orca/OpenOrca, revision: main, files: ["*.parquet"]}`.
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct HubEntry {
    /// The repository id, `owner/name`.
    pub repo: String,
    /// `model` or `dataset`. The default depends on where the block sits: `model` under
    /// `tokenizer` and `template`, `dataset` under `sources`.
    #[serde(default)]
    pub kind: Option<RepoKind>,
    /// A branch, tag or full commit SHA. `chatshards lock` pins it to a commit.
    #[serde(default = "default_revision")]
    pub revision: String,
    /// Files to read: exact paths in the repo or globs (`*.parquet`, `data/train-*`). As in
    /// `huggingface_hub`'s `allow_patterns`, `*` also matches `/`.
    pub files: Vec<String>,
}

impl HubEntry {
    /// Checks the entry and fills in the kind: `default_kind` when the YAML leaves it out.
    pub fn into_spec(self, default_kind: RepoKind) -> Result<HubSpec, HubError> {
        let spec = HubSpec {
            repo: self.repo,
            kind: self.kind.unwrap_or(default_kind),
            revision: self.revision,
            files: self.files,
        };
        spec.validate()?;
        Ok(spec)
    }
}

/// One checked request for files of one repo at one revision.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HubSpec {
    /// `owner/name`.
    pub repo: String,
    pub kind: RepoKind,
    /// Branch, tag or commit, as requested.
    pub revision: String,
    /// Exact paths or globs.
    pub files: Vec<String>,
}

impl HubSpec {
    /// Rejects anything that could not name a Hub repo or a file inside it. Paths end up as
    /// cache paths, so `..` and absolute paths are refused here, before any I/O.
    pub fn validate(&self) -> Result<(), HubError> {
        let invalid = |reason: String| Err(HubError::InvalidSpec { reason });
        if let Err(reason) = check_repo_id(&self.repo) {
            return invalid(reason.to_string());
        }
        if let Err(reason) = check_revision(&self.revision) {
            return invalid(format!("{} `{}`: {reason}", self.kind, self.repo));
        }
        if self.files.is_empty() {
            return invalid(format!(
                "{} `{}`: `files` is empty; list the paths or globs to read, e.g. `[\"*.parquet\"]`",
                self.kind, self.repo
            ));
        }
        for pattern in &self.files {
            if let Err(reason) = check_repo_path(pattern) {
                return invalid(format!(
                    "{} `{}`: file `{pattern}`: {reason}",
                    self.kind, self.repo
                ));
            }
            if let Err(error) = compile_glob(pattern) {
                return invalid(format!(
                    "{} `{}`: `{pattern}` is not a valid glob: {error}",
                    self.kind, self.repo
                ));
            }
        }
        Ok(())
    }

    /// What identifies a lockfile entry.
    pub(crate) fn key(&self) -> (RepoKind, &str, &str) {
        (self.kind, &self.repo, &self.revision)
    }
}

/// Merges specs that name the same repo, kind and revision into one (file lists united, sorted,
/// deduplicated), so each revision is resolved once and the tokenizer and template of one model
/// repo can never be pinned to two different commits. Output is sorted.
pub fn merge_specs(specs: &[HubSpec]) -> Vec<HubSpec> {
    let mut merged: std::collections::BTreeMap<(RepoKind, String, String), Vec<String>> =
        std::collections::BTreeMap::new();
    for spec in specs {
        merged
            .entry((spec.kind, spec.repo.clone(), spec.revision.clone()))
            .or_default()
            .extend(spec.files.iter().cloned());
    }
    merged
        .into_iter()
        .map(|((kind, repo, revision), mut files)| {
            files.sort();
            files.dedup();
            HubSpec {
                repo,
                kind,
                revision,
                files,
            }
        })
        .collect()
}

/// Whether a `files` entry is a glob rather than an exact path.
pub(crate) fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '[', '{'])
}

/// `fnmatch` semantics like `huggingface_hub`'s `allow_patterns`: `*` crosses `/`.
pub(crate) fn compile_glob(pattern: &str) -> Result<globset::GlobMatcher, globset::Error> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .build()
        .map(|glob| glob.compile_matcher())
}

/// Why a repo id, revision or path of a Hub spec or lockfile is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("`{0}` is not a Hub repo id; expected `owner/name`, e.g. `Open-Orca/OpenOrca`")]
    RepoId(String),
    #[error("`{0}` is not a valid revision (a branch, tag or commit SHA)")]
    Revision(String),
    #[error("the path is empty")]
    EmptyPath,
    #[error("paths are relative to the repo root and use `/`")]
    NotRelative,
    #[error("paths may not contain empty, `.` or `..` segments")]
    DotSegment,
    #[error("paths may not contain control characters")]
    ControlCharacter,
}

/// Hub ids are `owner/name` (or a bare legacy `name`) made of letters, digits, `-`, `_`, `.`.
pub(crate) fn check_repo_id(repo: &str) -> Result<(), SpecError> {
    let parts: Vec<&str> = repo.split('/').collect();
    let well_formed = (1..=2).contains(&parts.len())
        && parts.iter().all(|part| {
            !part.is_empty()
                && *part != "."
                && *part != ".."
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        });
    if well_formed {
        Ok(())
    } else {
        Err(SpecError::RepoId(repo.to_owned()))
    }
}

/// Revisions become cache paths (`refs/<revision>`): no empty or `..` segments, no whitespace.
pub(crate) fn check_revision(revision: &str) -> Result<(), SpecError> {
    let bad_segment = revision
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..");
    if revision.is_empty()
        || bad_segment
        || revision
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
    {
        Err(SpecError::Revision(revision.to_owned()))
    } else {
        Ok(())
    }
}

/// A path inside a repo, relative, `/`-separated, never leaving the snapshot directory.
pub(crate) fn check_repo_path(path: &str) -> Result<(), SpecError> {
    if path.is_empty() {
        return Err(SpecError::EmptyPath);
    }
    if path.starts_with('/') || path.contains('\\') {
        return Err(SpecError::NotRelative);
    }
    if path
        .split('/')
        .any(|segment| segment.is_empty() || segment == "." || segment == "..")
    {
        return Err(SpecError::DotSegment);
    }
    if path.chars().any(char::is_control) {
        return Err(SpecError::ControlCharacter);
    }
    Ok(())
}

/// A full 40-character commit SHA, the only revision that never moves.
pub(crate) fn is_commit(revision: &str) -> bool {
    revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A Hub access token. It is sent as `Authorization: Bearer …` and nowhere else: `Debug` prints
/// `***` and there is no `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    pub fn new(token: impl Into<String>) -> Self {
        Token(token.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces the token in text that came from elsewhere (a server's error message could
    /// echo the header back); tokens too short to be real are left alone rather than blanking
    /// ordinary words.
    pub(crate) fn redact(&self, text: &str) -> String {
        if self.0.len() >= 8 {
            text.replace(&self.0, "***")
        } else {
            text.to_owned()
        }
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***)")
    }
}

/// How to reach the Hub and where the cache lives. Build it with [`HubConfig::from_env`] (the CLI)
/// or fill it in explicitly (tests, embedding), which never reads the process environment.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// Base URL, `https://huggingface.co` unless `HF_ENDPOINT` says otherwise.
    pub endpoint: String,
    /// `HF_TOKEN`, else the file `HF_TOKEN_PATH`, else `$HF_HOME/token`.
    pub token: Option<Token>,
    /// The standard HF cache: `HF_HUB_CACHE`, else `HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`.
    pub cache_dir: PathBuf,
    /// `HF_HUB_OFFLINE=1`: never open a connection; everything comes from the cache.
    pub offline: bool,
    /// Give up on a connection attempt after this long (an unreachable endpoint fails fast).
    pub connect_timeout: Duration,
    /// Give up on a response that sends nothing for this long (a stalled download resumes).
    pub read_timeout: Duration,
    /// Retries after a transient failure (connection error, timeout, HTTP 5xx/429), per request;
    /// for downloads, per stretch without progress.
    pub retries: usize,
    /// Base of the exponential backoff between retries.
    pub retry_base_delay: Duration,
    /// Files downloaded at once.
    pub jobs: usize,
}

impl HubConfig {
    pub const DEFAULT_ENDPOINT: &'static str = "https://huggingface.co";

    /// Defaults for everything but where to connect and where to cache.
    pub fn new(endpoint: impl Into<String>, cache_dir: impl Into<PathBuf>) -> Self {
        HubConfig {
            endpoint: endpoint.into(),
            token: None,
            cache_dir: cache_dir.into(),
            offline: false,
            // Two attempts at 3 s each, plus backoff, keep a dead endpoint under ~10 s while
            // leaving room for a slow but live TLS handshake.
            connect_timeout: Duration::from_secs(3),
            read_timeout: Duration::from_secs(30),
            retries: 3,
            retry_base_delay: Duration::from_millis(250),
            jobs: 4,
        }
    }

    /// Reads `HF_ENDPOINT`, `HF_TOKEN` / `HF_TOKEN_PATH` / `HF_HOME`, `HF_HUB_CACHE` and
    /// `HF_HUB_OFFLINE` with `huggingface_hub`'s precedence and meaning.
    pub fn from_env() -> Self {
        Self::from_env_with(|name| std::env::var(name).ok())
    }

    /// [`HubConfig::from_env`] over any variable lookup (tests pass a map).
    pub fn from_env_with(var: impl Fn(&str) -> Option<String>) -> Self {
        let set = |name: &str| var(name).filter(|value| !value.is_empty());
        let hf_home = set("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            let cache = set("XDG_CACHE_HOME").map(PathBuf::from).unwrap_or_else(|| {
                PathBuf::from(set("HOME").unwrap_or_else(|| "/tmp".to_owned())).join(".cache")
            });
            cache.join("huggingface")
        });
        let cache_dir = set("HF_HUB_CACHE")
            .or_else(|| set("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        let endpoint = set("HF_ENDPOINT")
            .map(|endpoint| endpoint.trim_end_matches('/').to_owned())
            .unwrap_or_else(|| Self::DEFAULT_ENDPOINT.to_owned());
        let truthy = |name: &str| {
            set(name).is_some_and(|value| {
                matches!(
                    value.to_ascii_uppercase().as_str(),
                    "1" | "ON" | "YES" | "TRUE"
                )
            })
        };
        let token = if truthy("HF_HUB_DISABLE_IMPLICIT_TOKEN") {
            None
        } else {
            set("HF_TOKEN")
                .or_else(|| {
                    let path = set("HF_TOKEN_PATH")
                        .map(PathBuf::from)
                        .unwrap_or_else(|| hf_home.join("token"));
                    std::fs::read_to_string(path).ok()
                })
                .map(|token| token.trim().to_owned())
                .filter(|token| !token.is_empty())
                .map(Token)
        };
        let mut config = HubConfig::new(endpoint, cache_dir);
        config.token = token;
        // `TRANSFORMERS_OFFLINE` is the older spelling `huggingface_hub` still honours.
        config.offline = truthy("HF_HUB_OFFLINE") || truthy("TRANSFORMERS_OFFLINE");
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn env_precedence_matches_huggingface_hub() {
        let config = HubConfig::from_env_with(env(&[("HOME", "/home/u")]));
        assert_eq!(config.endpoint, "https://huggingface.co");
        assert_eq!(
            config.cache_dir,
            PathBuf::from("/home/u/.cache/huggingface/hub")
        );
        assert!(!config.offline);

        let config = HubConfig::from_env_with(env(&[
            ("HOME", "/home/u"),
            ("XDG_CACHE_HOME", "/xdg"),
            ("HF_ENDPOINT", "http://127.0.0.1:9/"),
            ("HF_HUB_OFFLINE", "yes"),
        ]));
        assert_eq!(config.cache_dir, PathBuf::from("/xdg/huggingface/hub"));
        assert_eq!(config.endpoint, "http://127.0.0.1:9");
        assert!(config.offline);

        let config = HubConfig::from_env_with(env(&[
            ("HF_HOME", "/hf"),
            ("HUGGINGFACE_HUB_CACHE", "/legacy"),
            ("HF_TOKEN", " hf_abcdefgh \n"),
        ]));
        assert_eq!(config.cache_dir, PathBuf::from("/legacy"));
        assert_eq!(config.token, Some(Token::new("hf_abcdefgh")));

        let config = HubConfig::from_env_with(env(&[
            ("HF_HUB_CACHE", "/new"),
            ("HUGGINGFACE_HUB_CACHE", "/legacy"),
            ("HF_TOKEN", "hf_abcdefgh"),
            ("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1"),
            ("HF_HUB_OFFLINE", "0"),
        ]));
        assert_eq!(config.cache_dir, PathBuf::from("/new"));
        assert_eq!(config.token, None);
        assert!(!config.offline);
    }

    #[test]
    fn token_file_is_read_when_no_variable() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("token"), "hf_fromfile1234\n").expect("write token");
        let home = dir.path().display().to_string();
        let config = HubConfig::from_env_with(env(&[("HF_HOME", &home)]));
        assert_eq!(config.token, Some(Token::new("hf_fromfile1234")));
    }

    #[test]
    fn debug_never_shows_the_token() {
        let mut config = HubConfig::new("http://x", "/c");
        config.token = Some(Token::new("hf_SuperSecret123"));
        let debug = format!("{config:?}");
        assert!(!debug.contains("hf_SuperSecret123"), "{debug}");
        assert!(debug.contains("Token(***)"), "{debug}");
    }

    #[test]
    fn spec_validation_names_the_problem() {
        let spec = |repo: &str, revision: &str, files: &[&str]| HubSpec {
            repo: repo.to_owned(),
            kind: RepoKind::Dataset,
            revision: revision.to_owned(),
            files: files.iter().map(|f| f.to_string()).collect(),
        };
        assert!(spec("Open-Orca/OpenOrca", "main", &["*.parquet"])
            .validate()
            .is_ok());
        assert!(spec("gpt2", "refs/pr/1", &["data/a.json"])
            .validate()
            .is_ok());
        let message = |s: HubSpec| s.validate().map_err(|e| e.to_string()).err();
        assert_eq!(
            message(spec("a/b/c", "main", &["x"])).as_deref(),
            Some("invalid `hub:` entry: `a/b/c` is not a Hub repo id; expected `owner/name`, e.g. `Open-Orca/OpenOrca`")
        );
        assert_eq!(
            message(spec("a/b", "main", &[])).as_deref(),
            Some("invalid `hub:` entry: dataset `a/b`: `files` is empty; list the paths or globs to read, e.g. `[\"*.parquet\"]`")
        );
        assert_eq!(
            message(spec("a/b", "main", &["../x"])).as_deref(),
            Some("invalid `hub:` entry: dataset `a/b`: file `../x`: paths may not contain empty, `.` or `..` segments")
        );
        assert_eq!(
            message(spec("a/b", "../main", &["x"])).as_deref(),
            Some("invalid `hub:` entry: dataset `a/b`: `../main` is not a valid revision (a branch, tag or commit SHA)")
        );
        assert!(message(spec("a/b", "main", &["[x"])).is_some());
    }

    #[test]
    fn globs_cross_directories_like_fnmatch() {
        let glob = compile_glob("*.parquet").expect("glob");
        assert!(glob.is_match("data/train-00000.parquet"));
        assert!(glob.is_match("a.parquet"));
        assert!(!glob.is_match("a.parquet.json"));
        assert!(is_glob("data/*.json") && !is_glob("data/a.json"));
    }

    #[test]
    fn merge_unites_files_per_repo_and_revision() {
        let spec = |repo: &str, revision: &str, files: &[&str]| HubSpec {
            repo: repo.to_owned(),
            kind: RepoKind::Model,
            revision: revision.to_owned(),
            files: files.iter().map(|f| f.to_string()).collect(),
        };
        let merged = merge_specs(&[
            spec("q/m", "main", &["tokenizer.json"]),
            spec("q/m", "main", &["chat_template.jinja", "tokenizer.json"]),
            spec("q/m", "v1", &["tokenizer.json"]),
        ]);
        assert_eq!(
            merged,
            vec![
                spec("q/m", "main", &["chat_template.jinja", "tokenizer.json"]),
                spec("q/m", "v1", &["tokenizer.json"]),
            ]
        );
    }
}
