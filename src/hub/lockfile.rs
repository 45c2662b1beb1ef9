//! `PIPELINE.lock`: for every repo and revision a pipeline reads, the commit it resolved to and
//! the path, size and SHA-256 of every file used; the size and SHA-256 of every local input
//! file (tokenizer, template, source files); and the template variables. A locked build reads
//! exactly these bytes, never asks the network, and refuses when anything differs.
//!
//! Version 2 added `local` and `template_kwargs`; version 1 files are still read (they pin
//! Hub files only, so a locked build of a pipeline with local inputs asks for a relock).
//! A pipeline with `regenerate:` also gets a `regenerate` list (written only when there is
//! one, so other lockfiles keep their bytes): each served model with the version its servers
//! reported (docs/on-policy.md). A pipeline that uses the tokenizer or template built into the
//! binary gets an `embedded` list the same way: each with its name and SHA-256, so a locked
//! build by a binary with other built-in files is refused.
//!
//! The file is YAML written by one canonical writer (sorted, every string JSON-quoted, fixed
//! field order), so locking twice gives the same bytes and diffs stay minimal. It is read
//! through a separate wire type and checked (version, hex digests, safe paths) while
//! converting, in the manner of uv's `LockWire`.

use super::config::{check_repo_id, check_repo_path, check_revision, is_commit, HubSpec, RepoKind};
use super::error::{HubError, StaleReason};
use crate::model::digest::hash_file;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The pinned Hub inputs of one pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lockfile {
    /// Format version; a different version is refused rather than misread.
    pub version: u32,
    /// Sorted by kind, repo, revision.
    pub repos: Vec<LockedRepo>,
    /// Local input files, sorted by path (empty in version 1).
    pub local: Vec<LockedFile>,
    /// The template variables as canonical JSON (`None` in version 1).
    pub template_kwargs: Option<String>,
    /// The served models of `regenerate:`, sorted by model.
    pub servers: Vec<LockedServer>,
    /// The built-in inputs used (tokenizer, template), sorted by input.
    pub embedded: Vec<LockedEmbedded>,
}

/// A tokenizer or template built into the binary, as a pipeline without its path uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedEmbedded {
    /// `tokenizer` or `template`.
    pub input: String,
    /// Which built-in file (`qwen3.6`).
    pub name: String,
    /// Lowercase hex SHA-256 of its bytes.
    pub sha256: String,
}

/// A model served for `regenerate:` and the version its servers reported when locked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedServer {
    pub model: String,
    /// vLLM's `/version`; `None` for a server that reports none.
    pub server_version: Option<String>,
}

/// One repo at one requested revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedRepo {
    pub repo: String,
    pub kind: RepoKind,
    /// The revision as the pipeline requests it (`main`, a tag, or a commit).
    pub revision: String,
    /// The 40-hex commit it resolved to.
    pub commit: String,
    /// The pipeline's `files` entries (paths and globs) this entry was resolved for, sorted.
    /// When they change, the entry is stale.
    pub requested: Vec<String>,
    /// What they matched, sorted by path.
    pub files: Vec<LockedFile>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedFile {
    /// Inside the repo, or for a local file as written in the pipeline (relative to it).
    pub path: String,
    pub size: u64,
    /// Lowercase hex SHA-256 of the content.
    pub sha256: String,
}

impl Lockfile {
    pub const VERSION: u32 = 2;

    /// A lockfile in canonical order, pinning no local files.
    pub fn new(repos: Vec<LockedRepo>) -> Self {
        Self::with_local(repos, Vec::new(), &serde_json::Map::new())
    }

    /// A lockfile in canonical order that also pins local files and the template variables.
    pub fn with_local(
        repos: Vec<LockedRepo>,
        local: Vec<LockedFile>,
        template_kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Self {
        let mut local = local;
        local.sort_by(|a, b| a.path.cmp(&b.path));
        local.dedup_by(|a, b| a.path == b.path);
        let mut repos = repos;
        for repo in &mut repos {
            repo.requested.sort();
            repo.requested.dedup();
            repo.files.sort_by(|a, b| a.path.cmp(&b.path));
            repo.files.dedup_by(|a, b| a.path == b.path);
        }
        repos.sort_by(|a, b| (a.kind, &a.repo, &a.revision).cmp(&(b.kind, &b.repo, &b.revision)));
        repos.dedup_by(|a, b| (a.kind, &a.repo, &a.revision) == (b.kind, &b.repo, &b.revision));
        Lockfile {
            version: Self::VERSION,
            repos,
            local,
            template_kwargs: Some(kwargs_json(template_kwargs)),
            servers: Vec::new(),
            embedded: Vec::new(),
        }
    }

    /// This lockfile pinning the built-in inputs `embedded` too (sorted, one per input).
    pub fn with_embedded(mut self, mut embedded: Vec<LockedEmbedded>) -> Self {
        embedded.sort_by(|a, b| a.input.cmp(&b.input));
        embedded.dedup_by(|a, b| a.input == b.input);
        self.embedded = embedded;
        self
    }

    /// Why the built-in inputs the pipeline uses (`wanted`) differ from the pinned ones
    /// (empty when they match).
    pub fn check_embedded(&self, wanted: &[LockedEmbedded]) -> Vec<StaleReason> {
        let shown = |e: Option<&LockedEmbedded>| {
            e.map_or("none".to_owned(), |e| {
                format!("built-in `{}` (sha256 {})", e.name, e.sha256)
            })
        };
        ["template", "tokenizer"]
            .into_iter()
            .filter_map(|input| {
                let locked = self.embedded.iter().find(|e| e.input == input);
                let now = wanted.iter().find(|e| e.input == input);
                (locked != now).then(|| StaleReason::EmbeddedChanged {
                    input: input.to_owned(),
                    locked: shown(locked),
                    wanted: shown(now),
                })
            })
            .collect()
    }

    /// This lockfile pinning `servers` too (sorted by model, one entry per model).
    pub fn with_servers(mut self, mut servers: Vec<LockedServer>) -> Self {
        servers.sort_by(|a, b| a.model.cmp(&b.model));
        servers.dedup_by(|a, b| a.model == b.model);
        self.servers = servers;
        self
    }

    /// The pinned entry of a served model.
    pub fn server(&self, model: &str) -> Option<&LockedServer> {
        self.servers.iter().find(|s| s.model == model)
    }

    /// `pipelines/demo.yaml` → `pipelines/demo.lock`.
    pub fn path_for(pipeline: &Path) -> PathBuf {
        pipeline.with_extension("lock")
    }

    /// The entry for a repo at a requested revision.
    pub fn entry(&self, kind: RepoKind, repo: &str, revision: &str) -> Option<&LockedRepo> {
        self.repos
            .iter()
            .find(|entry| entry.kind == kind && entry.repo == repo && entry.revision == revision)
    }

    pub fn read(path: &Path) -> Result<Self, HubError> {
        let bytes = std::fs::read(path).map_err(|source| HubError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_bytes(&bytes, path)
    }

    /// Parses and checks lockfile text; `path` is only used in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self, HubError> {
        let invalid = |reason: String| HubError::LockInvalid {
            path: path.to_owned(),
            reason,
        };
        let wire: LockWire =
            serde_yaml_ng::from_slice(bytes).map_err(|error| invalid(error.to_string()))?;
        if wire.version != Self::VERSION && wire.version != 1 {
            return Err(invalid(if wire.version > Self::VERSION {
                format!(
                    "version {} was written by a newer chatshards (this one reads versions 1 and {})",
                    wire.version,
                    Self::VERSION
                )
            } else {
                format!("unsupported version {}", wire.version)
            }));
        }
        let mut seen = BTreeSet::new();
        let mut repos = Vec::with_capacity(wire.repos.len());
        for entry in wire.repos {
            let name = format!("{} `{}` at `{}`", entry.kind, entry.repo, entry.revision);
            check_repo_id(&entry.repo).map_err(|reason| invalid(format!("{name}: {reason}")))?;
            check_revision(&entry.revision)
                .map_err(|reason| invalid(format!("{name}: {reason}")))?;
            if !seen.insert((entry.kind, entry.repo.clone(), entry.revision.clone())) {
                return Err(invalid(format!("{name} appears twice")));
            }
            if !is_commit(&entry.commit) || entry.commit.bytes().any(|b| b.is_ascii_uppercase()) {
                return Err(invalid(format!(
                    "{name}: `{}` is not a 40-character lowercase commit SHA",
                    entry.commit
                )));
            }
            if entry.requested.is_empty() {
                return Err(invalid(format!("{name}: `requested` is empty")));
            }
            let mut paths = BTreeSet::new();
            for file in &entry.files {
                check_repo_path(&file.path)
                    .map_err(|reason| invalid(format!("{name}: file `{}`: {reason}", file.path)))?;
                if !paths.insert(file.path.as_str()) {
                    return Err(invalid(format!(
                        "{name}: file `{}` appears twice",
                        file.path
                    )));
                }
                if !is_sha256(&file.sha256) {
                    return Err(invalid(format!(
                        "{name}: file `{}`: `{}` is not a lowercase hex SHA-256",
                        file.path, file.sha256
                    )));
                }
            }
            repos.push(LockedRepo {
                repo: entry.repo,
                kind: entry.kind,
                revision: entry.revision,
                commit: entry.commit,
                requested: entry.requested,
                files: entry
                    .files
                    .into_iter()
                    .map(|file| LockedFile {
                        path: file.path,
                        size: file.size,
                        sha256: file.sha256,
                    })
                    .collect(),
            });
        }
        if wire.version == 1 && (!wire.local.is_empty() || wire.template_kwargs.is_some()) {
            return Err(invalid(
                "version 1 has no `local` or `template_kwargs`".to_owned(),
            ));
        }
        if wire.version == 1 && !wire.regenerate.is_empty() {
            return Err(invalid("version 1 has no `regenerate`".to_owned()));
        }
        let mut models = BTreeSet::new();
        for server in &wire.regenerate {
            if !models.insert(server.model.as_str()) {
                return Err(invalid(format!(
                    "regenerate model `{}` appears twice",
                    server.model
                )));
            }
        }
        let mut local_paths = BTreeSet::new();
        for file in &wire.local {
            if !local_paths.insert(file.path.as_str()) {
                return Err(invalid(format!("local file `{}` appears twice", file.path)));
            }
            if !is_sha256(&file.sha256) {
                return Err(invalid(format!(
                    "local file `{}`: `{}` is not a lowercase hex SHA-256",
                    file.path, file.sha256
                )));
            }
        }
        let kwargs = match &wire.template_kwargs {
            None => serde_json::Map::new(),
            Some(text) => match serde_json::from_str(text) {
                Ok(serde_json::Value::Object(map)) => map,
                _ => {
                    return Err(invalid(format!(
                        "`template_kwargs` is not a JSON object: {text}"
                    )))
                }
            },
        };
        let local = wire
            .local
            .into_iter()
            .map(|file| LockedFile {
                path: file.path,
                size: file.size,
                sha256: file.sha256,
            })
            .collect();
        let servers = wire
            .regenerate
            .into_iter()
            .map(|s| LockedServer {
                model: s.model,
                server_version: s.server_version,
            })
            .collect();
        for e in &wire.embedded {
            if !matches!(e.input.as_str(), "tokenizer" | "template") || !is_sha256(&e.sha256) {
                return Err(invalid(format!(
                    "embedded `{}`: the input must be `tokenizer` or `template` and the sha256 lowercase hex",
                    e.input
                )));
            }
        }
        let embedded = wire
            .embedded
            .into_iter()
            .map(|e| LockedEmbedded {
                input: e.input,
                name: e.name,
                sha256: e.sha256,
            })
            .collect();
        let mut lock = Lockfile::with_local(repos, local, &kwargs)
            .with_servers(servers)
            .with_embedded(embedded);
        if wire.version == 1 {
            lock.version = 1;
            lock.template_kwargs = None;
        }
        Ok(lock)
    }

    /// The canonical text. Strings are JSON-quoted, which YAML reads as double-quoted
    /// scalars: no value can be mistaken for a number, a boolean or a comment.
    pub fn to_bytes(&self) -> Vec<u8> {
        let quote = |text: &str| {
            serde_json::to_string(text).unwrap_or_else(|_| format!("\"{}\"", text.escape_default()))
        };
        let mut out = String::new();
        out.push_str(
            "# Generated by `chatshards lock`: the Hub commits and files and the local files this pipeline reads.\n",
        );
        out.push_str(
            "# Do not edit. `chatshards lock` updates it; `chatshards fetch` downloads it.\n",
        );
        out.push_str(&format!("version: {}\n", self.version));
        if self.repos.is_empty() {
            out.push_str("repos: []\n");
        } else {
            out.push_str("repos:\n");
        }
        for entry in &self.repos {
            out.push_str(&format!("  - repo: {}\n", quote(&entry.repo)));
            out.push_str(&format!("    kind: {}\n", entry.kind));
            out.push_str(&format!("    revision: {}\n", quote(&entry.revision)));
            out.push_str(&format!("    commit: {}\n", quote(&entry.commit)));
            let requested: Vec<String> = entry.requested.iter().map(|r| quote(r)).collect();
            out.push_str(&format!("    requested: [{}]\n", requested.join(", ")));
            if entry.files.is_empty() {
                out.push_str("    files: []\n");
            } else {
                out.push_str("    files:\n");
            }
            for file in &entry.files {
                out.push_str(&format!("      - path: {}\n", quote(&file.path)));
                out.push_str(&format!("        size: {}\n", file.size));
                out.push_str(&format!("        sha256: {}\n", quote(&file.sha256)));
            }
        }
        if self.version >= 2 {
            if self.local.is_empty() {
                out.push_str("local: []\n");
            } else {
                out.push_str("local:\n");
            }
            for file in &self.local {
                out.push_str(&format!("  - path: {}\n", quote(&file.path)));
                out.push_str(&format!("    size: {}\n", file.size));
                out.push_str(&format!("    sha256: {}\n", quote(&file.sha256)));
            }
            let kwargs = self.template_kwargs.as_deref().unwrap_or("{}");
            out.push_str(&format!("template_kwargs: {}\n", quote(kwargs)));
            if !self.servers.is_empty() {
                out.push_str("regenerate:\n");
            }
            for server in &self.servers {
                out.push_str(&format!("  - model: {}\n", quote(&server.model)));
                let version = server
                    .server_version
                    .as_deref()
                    .map_or("null".into(), quote);
                out.push_str(&format!("    server_version: {version}\n"));
            }
            // Written only when used, so that other lockfiles keep their bytes.
            if !self.embedded.is_empty() {
                out.push_str("embedded:\n");
            }
            for e in &self.embedded {
                out.push_str(&format!("  - input: {}\n", quote(&e.input)));
                out.push_str(&format!("    name: {}\n", quote(&e.name)));
                out.push_str(&format!("    sha256: {}\n", quote(&e.sha256)));
            }
        }
        out.into_bytes()
    }

    /// Writes the canonical text atomically (a reader never sees half a lockfile).
    pub fn write(&self, path: &Path) -> Result<(), HubError> {
        super::cache::write_atomic(path, &self.to_bytes()).map_err(|source| HubError::Write {
            path: path.to_owned(),
            source,
        })
    }

    /// Whether this lockfile pins exactly what `specs` ask for. It never needs the network: a
    /// fresh entry stays valid as long as the pipeline asks for the same repo, revision and
    /// `files`, because its commit's content never changes.
    pub fn check(&self, specs: &[HubSpec]) -> Result<(), HubError> {
        let wanted = super::config::merge_specs(specs);
        let mut reasons = Vec::new();
        for spec in &wanted {
            match self.entry(spec.kind, &spec.repo, &spec.revision) {
                None => reasons.push(StaleReason::Missing {
                    kind: spec.kind,
                    repo: spec.repo.clone(),
                    revision: spec.revision.clone(),
                }),
                Some(entry) if entry.requested != spec.files => {
                    reasons.push(StaleReason::FilesChanged {
                        kind: spec.kind,
                        repo: spec.repo.clone(),
                        revision: spec.revision.clone(),
                        locked: entry.requested.clone(),
                        wanted: spec.files.clone(),
                    })
                }
                Some(_) => {}
            }
        }
        for entry in &self.repos {
            let used = wanted.iter().any(|spec| {
                spec.key() == (entry.kind, entry.repo.as_str(), entry.revision.as_str())
            });
            if !used {
                reasons.push(StaleReason::Unused {
                    kind: entry.kind,
                    repo: entry.repo.clone(),
                    revision: entry.revision.clone(),
                });
            }
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(HubError::StaleLock {
                path: None,
                reasons,
            })
        }
    }

    /// Why the local files and template variables differ from what this lockfile pins
    /// (empty when they match). Hashes every file: call it for `--locked` builds and checks.
    /// `files` are (as written in the pipeline, where to read it).
    pub fn check_local(
        &self,
        files: &[(String, PathBuf)],
        template_kwargs: &serde_json::Map<String, serde_json::Value>,
    ) -> Vec<StaleReason> {
        if self.version < 2 {
            return if files.is_empty() && template_kwargs.is_empty() {
                Vec::new()
            } else {
                vec![StaleReason::NoLocalPins]
            };
        }
        let mut reasons = Vec::new();
        for (shown, path) in files {
            let Some(locked) = self.local.iter().find(|f| &f.path == shown) else {
                reasons.push(StaleReason::LocalMissing {
                    path: shown.clone(),
                });
                continue;
            };
            match hash_file(path) {
                Ok((size, sha256)) if size == locked.size && sha256 == locked.sha256 => {}
                Ok((size, sha256)) => reasons.push(StaleReason::LocalChanged {
                    path: shown.clone(),
                    locked: format!("{} bytes, sha256 {}", locked.size, locked.sha256),
                    found: format!("{size} bytes, sha256 {sha256}"),
                }),
                Err(error) => reasons.push(StaleReason::LocalChanged {
                    path: shown.clone(),
                    locked: format!("{} bytes, sha256 {}", locked.size, locked.sha256),
                    found: format!("unreadable ({error})"),
                }),
            }
        }
        for locked in &self.local {
            if !files.iter().any(|(shown, _)| shown == &locked.path) {
                reasons.push(StaleReason::LocalUnused {
                    path: locked.path.clone(),
                });
            }
        }
        let wanted = kwargs_json(template_kwargs);
        let locked = self.template_kwargs.as_deref().unwrap_or("{}");
        if wanted != locked {
            reasons.push(StaleReason::KwargsChanged {
                locked: locked.to_owned(),
                wanted,
            });
        }
        reasons
    }
}

impl Lockfile {
    /// Why the pinned served models differ from the pipeline's `models` (empty when they
    /// match): a version is pinned per model, so each model needs its entry. A version 1
    /// lockfile pins none.
    pub fn check_servers(&self, models: &[String]) -> Vec<StaleReason> {
        let mut reasons: Vec<StaleReason> = models
            .iter()
            .filter(|m| self.server(m).is_none())
            .map(|m| StaleReason::ServerMissing { model: m.clone() })
            .collect();
        reasons.extend(
            self.servers
                .iter()
                .filter(|s| !models.contains(&s.model))
                .map(|s| StaleReason::ServerUnused {
                    model: s.model.clone(),
                }),
        );
        reasons
    }
}

/// Canonical JSON of template variables (keys sorted), as the lockfile records them.
pub fn kwargs_json(kwargs: &serde_json::Map<String, serde_json::Value>) -> String {
    crate::model::digest::canonical_json(&serde_json::Value::Object(kwargs.clone()))
}

fn is_sha256(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LockWire {
    version: u32,
    #[serde(default)]
    repos: Vec<LockedRepoWire>,
    #[serde(default)]
    local: Vec<LockedFileWire>,
    #[serde(default)]
    template_kwargs: Option<String>,
    #[serde(default)]
    regenerate: Vec<LockedServerWire>,
    #[serde(default)]
    embedded: Vec<LockedEmbeddedWire>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LockedEmbeddedWire {
    input: String,
    name: String,
    sha256: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LockedServerWire {
    model: String,
    server_version: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LockedRepoWire {
    repo: String,
    kind: RepoKind,
    revision: String,
    commit: String,
    requested: Vec<String>,
    files: Vec<LockedFileWire>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LockedFileWire {
    path: String,
    size: u64,
    sha256: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Lockfile {
        Lockfile::with_local(
            vec![
                LockedRepo {
                    repo: "Qwen/Qwen3.6-27B".to_owned(),
                    kind: RepoKind::Model,
                    revision: "main".to_owned(),
                    commit: "a".repeat(40),
                    requested: vec![
                        "tokenizer.json".to_owned(),
                        "chat_template.jinja".to_owned(),
                    ],
                    files: vec![
                        LockedFile {
                            path: "tokenizer.json".to_owned(),
                            size: 11,
                            sha256: "b".repeat(64),
                        },
                        LockedFile {
                            path: "chat_template.jinja".to_owned(),
                            size: 7,
                            sha256: "c".repeat(64),
                        },
                    ],
                },
                LockedRepo {
                    repo: "Open-Orca/OpenOrca".to_owned(),
                    kind: RepoKind::Dataset,
                    revision: "main".to_owned(),
                    commit: "d".repeat(40),
                    requested: vec!["*.parquet".to_owned()],
                    files: vec![LockedFile {
                        path: "1M-GPT4-Augmented.parquet".to_owned(),
                        size: 123,
                        sha256: "e".repeat(64),
                    }],
                },
            ],
            vec![LockedFile {
                path: "../data/chat.jsonl".to_owned(),
                size: 5,
                sha256: "f".repeat(64),
            }],
            &serde_json::Map::from_iter([(
                "preserve_thinking".to_owned(),
                serde_json::Value::Bool(true),
            )]),
        )
    }

    #[test]
    fn served_models_are_pinned_after_the_template_variables() {
        let plain = sample().to_bytes();
        let lock = sample().with_servers(vec![
            LockedServer {
                model: "tiny".to_owned(),
                server_version: None,
            },
            LockedServer {
                model: "Qwen/Qwen3.6-27B".to_owned(),
                server_version: Some("0.32.0".to_owned()),
            },
        ]);
        let text = String::from_utf8(lock.to_bytes()).expect("utf8");
        let added = text
            .strip_prefix(std::str::from_utf8(&plain).expect("utf8"))
            .expect("the plain lockfile's text comes first, unchanged");
        assert_eq!(
            added,
            "regenerate:\n  - model: \"Qwen/Qwen3.6-27B\"\n    server_version: \"0.32.0\"\n  - model: \"tiny\"\n    server_version: null\n"
        );
        let back = Lockfile::from_bytes(text.as_bytes(), Path::new("x.lock")).expect("parse");
        assert_eq!(back, lock);
        assert_eq!(
            back.server("tiny").map(|s| s.server_version.clone()),
            Some(None)
        );
        let models = ["tiny".to_owned(), "other".to_owned()];
        let reasons: Vec<String> = back
            .check_servers(&models)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            reasons,
            [
                "regenerate model `other` is not in the lockfile",
                "regenerate model `Qwen/Qwen3.6-27B` is locked but no longer used",
            ]
        );
        let twice = format!("{text}  - model: \"tiny\"\n    server_version: null\n");
        let error = Lockfile::from_bytes(twice.as_bytes(), Path::new("x.lock")).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("regenerate model `tiny` appears twice"),
            "{error}"
        );
    }

    #[test]
    fn canonical_text_round_trips() {
        let lock = sample();
        let text = String::from_utf8(lock.to_bytes()).expect("utf8");
        let expected = format!(
            "# Generated by `chatshards lock`: the Hub commits and files and the local files this pipeline reads.\n\
             # Do not edit. `chatshards lock` updates it; `chatshards fetch` downloads it.\n\
             version: 2\n\
             repos:\n\
             \x20 - repo: \"Qwen/Qwen3.6-27B\"\n\
             \x20   kind: model\n\
             \x20   revision: \"main\"\n\
             \x20   commit: \"{a}\"\n\
             \x20   requested: [\"chat_template.jinja\", \"tokenizer.json\"]\n\
             \x20   files:\n\
             \x20     - path: \"chat_template.jinja\"\n\
             \x20       size: 7\n\
             \x20       sha256: \"{c}\"\n\
             \x20     - path: \"tokenizer.json\"\n\
             \x20       size: 11\n\
             \x20       sha256: \"{b}\"\n\
             \x20 - repo: \"Open-Orca/OpenOrca\"\n\
             \x20   kind: dataset\n\
             \x20   revision: \"main\"\n\
             \x20   commit: \"{d}\"\n\
             \x20   requested: [\"*.parquet\"]\n\
             \x20   files:\n\
             \x20     - path: \"1M-GPT4-Augmented.parquet\"\n\
             \x20       size: 123\n\
             \x20       sha256: \"{e}\"\n\
             local:\n\
             \x20 - path: \"../data/chat.jsonl\"\n\
             \x20   size: 5\n\
             \x20   sha256: \"{f}\"\n\
             template_kwargs: \"{{\\\"preserve_thinking\\\":true}}\"\n",
            a = "a".repeat(40),
            b = "b".repeat(64),
            c = "c".repeat(64),
            d = "d".repeat(40),
            e = "e".repeat(64),
            f = "f".repeat(64),
        );
        assert_eq!(text, expected);
        let back = Lockfile::from_bytes(text.as_bytes(), Path::new("x.lock")).expect("parse");
        assert_eq!(back, lock);
        assert_eq!(back.to_bytes(), lock.to_bytes());
    }

    #[test]
    fn invalid_lockfiles_say_why() {
        let text = String::from_utf8(sample().to_bytes()).expect("utf8");
        let error = |text: &str| {
            Lockfile::from_bytes(text.as_bytes(), Path::new("p.lock"))
                .map(|_| ())
                .map_err(|e| e.to_string())
                .err()
                .unwrap_or_default()
        };
        assert_eq!(
            error(&text.replace("version: 2", "version: 3")),
            "the lockfile `p.lock` is invalid: version 3 was written by a newer chatshards (this one reads versions 1 and 2)"
        );
        assert_eq!(
            error(&text.replace("version: 2", "version: 1")),
            "the lockfile `p.lock` is invalid: version 1 has no `local` or `template_kwargs`"
        );
        assert_eq!(
            error(&text.replace(&"f".repeat(64), "F")),
            "the lockfile `p.lock` is invalid: local file `../data/chat.jsonl`: `F` is not a lowercase hex SHA-256"
        );
        assert_eq!(
            error(&text.replace(&"e".repeat(64), "xyz")),
            "the lockfile `p.lock` is invalid: dataset `Open-Orca/OpenOrca` at `main`: file `1M-GPT4-Augmented.parquet`: `xyz` is not a lowercase hex SHA-256"
        );
        assert_eq!(
            error(&text.replace("1M-GPT4-Augmented.parquet", "../escape")),
            "the lockfile `p.lock` is invalid: dataset `Open-Orca/OpenOrca` at `main`: file `../escape`: paths may not contain empty, `.` or `..` segments"
        );
        assert!(
            error(&text.replace("size: 7", "size: 7\n        extra: 1")).starts_with(
                "the lockfile `p.lock` is invalid: repos[0].files[0]: unknown field `extra`"
            )
        );
    }

    #[test]
    fn version_1_still_reads_and_pins_no_local_files() {
        let v2 = String::from_utf8(Lockfile::new(sample().repos).to_bytes()).expect("utf8");
        let v1 = v2
            .replace("version: 2", "version: 1")
            .replace("local: []\n", "")
            .replace("template_kwargs: \"{}\"\n", "");
        let lock = Lockfile::from_bytes(v1.as_bytes(), Path::new("p.lock")).expect("v1");
        assert_eq!((lock.version, lock.repos.len()), (1, 2));
        assert_eq!(lock.to_bytes(), v1.as_bytes());
        assert!(lock.check_local(&[], &serde_json::Map::new()).is_empty());
        let reasons = lock.check_local(
            &[("a.jsonl".to_owned(), PathBuf::from("a.jsonl"))],
            &serde_json::Map::new(),
        );
        assert_eq!(
            reasons.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["the lockfile (version 1) pins no local files or template variables"]
        );
    }

    #[test]
    fn check_local_names_every_changed_missing_and_unused_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path
        };
        let (a, b) = (write("a.jsonl", "hello"), write("b.jsonl", "world"));
        let pin = |path: &Path, shown: &str| {
            let (size, sha256) = hash_file(path).expect("hash");
            LockedFile {
                path: shown.to_owned(),
                size,
                sha256,
            }
        };
        let kwargs = serde_json::Map::from_iter([("x".to_owned(), serde_json::json!(1))]);
        let lock = Lockfile::with_local(
            Vec::new(),
            vec![
                pin(&a, "a.jsonl"),
                pin(&b, "b.jsonl"),
                pin(&b, "gone.jsonl"),
            ],
            &kwargs,
        );
        let wanted = [
            ("a.jsonl".to_owned(), a.clone()),
            ("b.jsonl".to_owned(), b.clone()),
        ];
        let gone = [
            ("a.jsonl".to_owned(), a.clone()),
            ("b.jsonl".to_owned(), b.clone()),
            ("gone.jsonl".to_owned(), b.clone()),
        ];
        assert!(lock.check_local(&gone, &kwargs).is_empty());
        std::fs::write(&b, "World").expect("edit");
        let c = write("c.jsonl", "new");
        let mut now = wanted.to_vec();
        now.push(("c.jsonl".to_owned(), c));
        let other = serde_json::Map::from_iter([("x".to_owned(), serde_json::json!(1.0))]);
        let reasons: Vec<String> = lock
            .check_local(&now, &other)
            .iter()
            .map(ToString::to_string)
            .collect();
        let old = crate::plan::sha256_hex(b"world");
        let new = crate::plan::sha256_hex(b"World");
        assert_eq!(
            reasons,
            [
                format!("local file `b.jsonl` changed: locked 5 bytes, sha256 {old}, found 5 bytes, sha256 {new}"),
                "local file `c.jsonl` is not in the lockfile".to_owned(),
                "local file `gone.jsonl` is locked but no longer used".to_owned(),
                "template variables changed from {\"x\":1} to {\"x\":1.0}".to_owned(),
            ]
        );
    }

    #[test]
    fn check_lists_every_reason() {
        let lock = sample();
        let spec = |repo: &str, kind, revision: &str, files: &[&str]| HubSpec {
            repo: repo.to_owned(),
            kind,
            revision: revision.to_owned(),
            files: files.iter().map(|f| f.to_string()).collect(),
        };
        let fresh = [
            spec(
                "Qwen/Qwen3.6-27B",
                RepoKind::Model,
                "main",
                &["tokenizer.json"],
            ),
            spec(
                "Qwen/Qwen3.6-27B",
                RepoKind::Model,
                "main",
                &["chat_template.jinja"],
            ),
            spec(
                "Open-Orca/OpenOrca",
                RepoKind::Dataset,
                "main",
                &["*.parquet"],
            ),
        ];
        assert!(lock.check(&fresh).is_ok());
        let stale = [
            spec(
                "Qwen/Qwen3.6-27B",
                RepoKind::Model,
                "main",
                &["tokenizer.json"],
            ),
            spec(
                "Open-Orca/OpenOrca",
                RepoKind::Dataset,
                "v2",
                &["*.parquet"],
            ),
        ];
        match lock.check(&stale) {
            Err(HubError::StaleLock { reasons, .. }) => assert_eq!(
                reasons
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>(),
                vec![
                    "model `Qwen/Qwen3.6-27B` at `main`: files changed from [`chat_template.jinja`, `tokenizer.json`] to [`tokenizer.json`]",
                    "dataset `Open-Orca/OpenOrca` at `v2` is not in the lockfile",
                    "dataset `Open-Orca/OpenOrca` at `main` is locked but no longer used",
                ]
            ),
            other => panic!("expected a stale lock, got {other:?}"),
        }
    }
}
