//! Where a pipeline's inputs live: local paths (relative to the pipeline file) or Hub files
//! pinned to a commit. With a fresh lockfile next to the pipeline, Hub files come from the
//! cache with no network at all; `--locked` demands one.

use super::config::PipelineConfig;
use super::PlanError;
use crate::hub::{Hub, HubEntry, HubSpec, Lockfile, NoProgress, RepoKind, ResolvedFile};
use std::path::{Path, PathBuf};

/// How a build may reach the Hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HubAccess {
    /// Use the lockfile when it is fresh; otherwise resolve revisions online (or from the
    /// cache with `HF_HUB_OFFLINE=1`).
    Auto,
    /// Use exactly what the lockfile pins, never the network; a missing or stale lockfile is an
    /// error.
    Locked,
}

impl HubAccess {
    /// `Locked` for `--locked`, else `Auto`.
    pub fn locked_if(locked: bool) -> HubAccess {
        if locked {
            HubAccess::Locked
        } else {
            HubAccess::Auto
        }
    }
}

/// One input file: where to read it and how to name it in manifests and reject files.
#[derive(Debug, Clone)]
pub struct InputFile {
    pub local: PathBuf,
    /// The path as written in the pipeline, or `hf://datasets/owner/name@commit/path`.
    pub display: String,
}

/// The lockfile a build used (the Hub files were read through it, or `--locked`).
#[derive(Debug, Clone)]
pub struct UsedLock {
    pub path: PathBuf,
    /// Its bytes, copied into the output directory.
    pub bytes: Vec<u8>,
    pub sha256: String,
    /// Its `regenerate` entries: the served models' versions.
    pub servers: Vec<crate::hub::LockedServer>,
}

pub(super) struct Inputs {
    pub tokenizer: Option<PathBuf>,
    pub template: Option<PathBuf>,
    pub sources: Vec<Vec<InputFile>>,
    /// Per benchmark of `decontaminate.benchmarks`.
    pub benchmarks: Vec<Vec<InputFile>>,
    pub hub_files: Vec<ResolvedFile>,
    pub notes: Vec<String>,
    pub lock: Option<UsedLock>,
}

/// Every local input file of a pipeline: (as written in it, where to read it). The lockfile
/// pins these.
pub fn local_files(pipeline: &Path, config: &PipelineConfig) -> Vec<(String, PathBuf)> {
    let base = pipeline.parent().unwrap_or(Path::new("."));
    let mut files = Vec::new();
    let mut push = |p: &Path| files.push((p.display().to_string(), base.join(p)));
    // Where a `hub:` is given too the plan refuses the pipeline; the Hub entry is locked.
    if let (Some(p), None) = (&config.tokenizer.path, &config.tokenizer.hub) {
        push(p);
    }
    if let (Some(p), None) = (&config.template.path, &config.template.hub) {
        push(p);
    }
    for source in config.sources.iter().filter(|s| s.hub.is_none()) {
        for f in &source.files {
            push(f);
        }
    }
    let benchmarks = config.decontaminate.iter().flat_map(|d| &d.benchmarks);
    for bench in benchmarks.filter(|b| b.hub.is_none()) {
        for f in &bench.files {
            push(f);
        }
    }
    files
}

/// The built-in inputs a pipeline uses: the tokenizer and template it gives no path or Hub
/// entry for (the lockfile pins these).
pub fn embedded_inputs(config: &PipelineConfig) -> Vec<crate::hub::LockedEmbedded> {
    use crate::model::embedded;
    let pin = |input: &str, bytes: &[u8]| crate::hub::LockedEmbedded {
        input: input.to_owned(),
        name: embedded::NAME.to_owned(),
        sha256: super::sha256_hex(bytes),
    };
    let mut pins = Vec::new();
    if config.template.is_embedded() {
        pins.push(pin("template", embedded::TEMPLATE.as_bytes()));
    }
    if config.tokenizer.is_embedded() {
        pins.push(pin("tokenizer", embedded::TOKENIZER_ZST));
    }
    pins
}

/// The served models of the pipeline's `regenerate:` sections in use, each with its
/// endpoints (the lockfile pins a version per model).
pub fn regenerated_models(
    config: &PipelineConfig,
) -> std::collections::BTreeMap<String, Vec<String>> {
    use crate::regenerate::SourceRegenerate as Own;
    let mut models: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for source in &config.sources {
        let section = match (&source.regenerate, &config.regenerate) {
            (Some(Own::Switch(false)), _) => None,
            (Some(Own::Own(c)), _) => Some(c.as_ref()),
            (_, global) => global.as_ref(),
        };
        if let Some(c) = section {
            let endpoints = models.entry(c.model.clone()).or_default();
            for e in &c.endpoints {
                if !endpoints.contains(e) {
                    endpoints.push(e.clone());
                }
            }
        }
    }
    models
}

/// The template variables as a JSON object.
pub fn template_kwargs(config: &PipelineConfig) -> serde_json::Map<String, serde_json::Value> {
    config.template.kwargs.clone().into_iter().collect()
}

/// Which input a Hub spec feeds.
#[derive(Clone, Copy)]
enum Slot {
    Tokenizer,
    Template,
    Source(usize),
    Benchmark(usize),
}

pub(super) fn resolve(
    pipeline: &Path,
    config: &PipelineConfig,
    access: HubAccess,
    errors: &mut Vec<String>,
) -> Result<Inputs, PlanError> {
    let base = pipeline.parent().unwrap_or(Path::new("."));
    let benchmarks = config
        .decontaminate
        .as_ref()
        .map_or(&[][..], |d| d.benchmarks.as_slice());
    let mut inputs = Inputs {
        tokenizer: None,
        template: None,
        sources: vec![Vec::new(); config.sources.len()],
        benchmarks: vec![Vec::new(); benchmarks.len()],
        hub_files: Vec::new(),
        notes: Vec::new(),
        lock: None,
    };
    let mut wanted: Vec<(Slot, HubSpec)> = Vec::new();
    let mut want =
        |slot: Slot, what: &str, entry: &HubEntry, kind: RepoKind, errors: &mut Vec<String>| {
            match entry.clone().into_spec(kind) {
                Ok(spec) => wanted.push((slot, spec)),
                Err(e) => errors.push(format!("{what}.hub: {e}")),
            }
        };
    match (&config.tokenizer.path, &config.tokenizer.hub) {
        (Some(p), None) => inputs.tokenizer = Some(base.join(p)),
        (None, Some(h)) => want(Slot::Tokenizer, "tokenizer", h, RepoKind::Model, errors),
        // The built-in one.
        (None, None) => {}
        _ => errors.push("`tokenizer` needs at most one of `path` and `hub`".into()),
    }
    match (&config.template.path, &config.template.hub) {
        (Some(p), None) => inputs.template = Some(base.join(p)),
        (None, Some(h)) => want(Slot::Template, "template", h, RepoKind::Model, errors),
        (None, None) => {}
        _ => errors.push("`template` needs at most one of `path` and `hub`".into()),
    }
    // Sources and benchmark sets alike: local `files` (relative to the pipeline) or a `hub:`.
    let mut files_or_hub = |what: String,
                            name: &str,
                            files: &[PathBuf],
                            hub: &Option<HubEntry>,
                            slot: Slot,
                            errors: &mut Vec<String>|
     -> Vec<InputFile> {
        match (files.is_empty(), hub) {
            (false, None) => files
                .iter()
                .map(|f| InputFile {
                    local: base.join(f),
                    display: f.display().to_string(),
                })
                .collect(),
            (true, Some(h)) => {
                want(slot, &what, h, RepoKind::Dataset, errors);
                Vec::new()
            }
            _ => {
                errors.push(format!(
                    "{what} (`{name}`): needs exactly one of a non-empty `files` and `hub`"
                ));
                Vec::new()
            }
        }
    };
    for (i, s) in config.sources.iter().enumerate() {
        let what = format!("sources[{i}]");
        inputs.sources[i] = files_or_hub(what, &s.name, &s.files, &s.hub, Slot::Source(i), errors);
    }
    for (i, b) in benchmarks.iter().enumerate() {
        let what = format!("decontaminate.benchmarks[{i}]");
        inputs.benchmarks[i] =
            files_or_hub(what, &b.name, &b.files, &b.hub, Slot::Benchmark(i), errors);
    }
    let lock_path = Lockfile::path_for(pipeline);
    if wanted.is_empty() && access == HubAccess::Auto {
        return Ok(inputs);
    }
    let lock = if lock_path.exists() {
        let bytes = std::fs::read(&lock_path).map_err(|source| crate::hub::HubError::Read {
            path: lock_path.clone(),
            source,
        })?;
        Some((Lockfile::from_bytes(&bytes, &lock_path)?, bytes))
    } else {
        None
    };
    let specs: Vec<HubSpec> = wanted.iter().map(|(_, s)| s.clone()).collect();
    let lock = match (lock, access) {
        (None, HubAccess::Locked) => {
            errors.push(format!(
                "`--locked` was given but there is no lockfile `{}`; run `chatshards lock {}` first",
                lock_path.display(),
                pipeline.display()
            ));
            return Ok(inputs);
        }
        (None, HubAccess::Auto) => None,
        (Some((lock, bytes)), HubAccess::Locked) => {
            // Everything that decides the bytes must match: Hub entries, local files, variables.
            let mut reasons = match lock.check(&specs) {
                Ok(()) => Vec::new(),
                Err(crate::hub::HubError::StaleLock { reasons, .. }) => reasons,
                Err(e) => return Err(e.into()),
            };
            reasons
                .extend(lock.check_local(&local_files(pipeline, config), &template_kwargs(config)));
            let models: Vec<String> = regenerated_models(config).into_keys().collect();
            reasons.extend(lock.check_servers(&models));
            reasons.extend(lock.check_embedded(&embedded_inputs(config)));
            if !reasons.is_empty() {
                return Err(crate::hub::HubError::StaleLock {
                    path: Some(lock_path),
                    reasons,
                }
                .into());
            }
            Some((lock, bytes))
        }
        (Some((lock, bytes)), HubAccess::Auto) => match lock.check(&specs) {
            Ok(()) => Some((lock, bytes)),
            Err(e) => {
                inputs.notes.push(format!(
                    "the lockfile `{}` is stale and was not used ({e}); run `chatshards lock` to pin the new inputs",
                    lock_path.display()
                ));
                None
            }
        },
    };
    let lock = lock.map(|(lock, bytes)| {
        inputs.lock = Some(UsedLock {
            path: lock_path.clone(),
            sha256: super::sha256_hex(&bytes),
            bytes,
            servers: lock.servers.clone(),
        });
        lock
    });
    if wanted.is_empty() {
        return Ok(inputs);
    }
    let hub = Hub::from_env()?;
    for (slot, spec) in &wanted {
        let files = match &lock {
            Some(lock) => hub.resolve_locked(spec, lock)?,
            None => hub.resolve(spec, &NoProgress)?,
        };
        let local: Vec<InputFile> = files
            .iter()
            .map(|f| InputFile {
                local: f.local.clone(),
                display: format!("hf://{}s/{}@{}/{}", f.kind, f.repo, f.commit, f.path),
            })
            .collect();
        let single = |what: &str, errors: &mut Vec<String>| match local.as_slice() {
            [one] => Some(one.local.clone()),
            _ => {
                errors.push(format!(
                    "`{what}.hub` must match exactly one file of `{}`, but it matches {}",
                    spec.repo,
                    local.len()
                ));
                None
            }
        };
        match slot {
            Slot::Tokenizer => inputs.tokenizer = single("tokenizer", errors),
            Slot::Template => inputs.template = single("template", errors),
            Slot::Source(i) => inputs.sources[*i] = local,
            Slot::Benchmark(i) => inputs.benchmarks[*i] = local,
        }
        inputs.hub_files.extend(files);
    }
    Ok(inputs)
}
