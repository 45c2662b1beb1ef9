//! `manifest.json`: everything needed to trust and reproduce a build: input hashes, settings,
//! per-source accounting and per-shard hashes. No timestamps or timings, so that the same
//! inputs give the same bytes.
//!
//! The manifest seals itself: its last member, `manifest_sha256`, is the SHA-256 of the
//! canonical JSON text ([`super::identity::canonical_json`]: compact, object keys sorted by their
//! UTF-8 bytes at every depth, numbers as serde_json writes them) of the manifest without that
//! member. An edited field (a setting, a count, a name) changes that hash, which `verify`
//! checks.

use super::identity::InputKind;
use super::ShardSummary;
use crate::report::SourceStats;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Serialize)]
pub struct Manifest {
    pub tool: Tool,
    pub name: String,
    /// SHA-256 over everything that decides the output bytes (`src/write/identity.rs`).
    pub build_id: String,
    /// SHA-256 over the shards' SHA-256s in shard order.
    pub dataset_sha256: String,
    pub pipeline: PipelineRecord,
    pub inputs: Inputs,
    pub settings: Settings,
    pub rows: u64,
    pub tokens: u64,
    pub supervised_tokens: u64,
    pub encoder: Encoder,
    pub renderer: Renderer,
    pub sources: IndexMap<String, SourceStats>,
    /// The mix target and what each source realized, when the pipeline has a `mix`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mix: Option<Mix>,
    /// On-policy regeneration by source (`regenerate:`): model, sampling, template kwargs,
    /// server fingerprints and the request accounting; absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regenerate: Option<IndexMap<String, crate::regenerate::Report>>,
    /// `output.validation`: the split and its counts; absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validation: Option<Validation>,
    pub shards: Vec<ShardSummary>,
    /// Every other file of the output directory except this manifest, with its hash.
    pub files: Vec<FileSummary>,
}

/// `manifest.json` read back (`verify`, `diff`): the members of [`Manifest`] that are checked
/// against the directory and recomputed, through the same types. Members it does not name (the
/// encoder and renderer reports, the mix, regeneration, most settings, and whatever a newer
/// version adds) are not read: the seal covers them, over the JSON text. Counters and optional
/// members an older manifest lacks read as zero / absent; a value of the wrong type, or an
/// unknown reject or repair code, makes the manifest unreadable (named as such).
#[derive(Debug, Deserialize)]
pub struct Recorded {
    pub tool: Tool,
    pub build_id: String,
    pub dataset_sha256: String,
    pub pipeline: PipelineRecord,
    pub inputs: Inputs,
    pub settings: RecordedSettings,
    pub rows: u64,
    pub sources: IndexMap<String, SourceStats>,
    #[serde(default)]
    pub validation: Option<Validation>,
    pub shards: Vec<ShardSummary>,
    pub files: Vec<FileSummary>,
}

/// The settings `build_id` is recomputed from (the others are in the pipeline copy).
#[derive(Debug, Deserialize)]
pub struct RecordedSettings {
    #[serde(default)]
    pub template_kwargs: serde_json::Map<String, serde_json::Value>,
}

/// The manifest's member that holds the hash of the rest (see the module's documentation).
pub const SEAL: &str = "manifest_sha256";

/// SHA-256 (lowercase hex) of the canonical text of `manifest` without its [`SEAL`] member.
pub fn seal_of(manifest: &serde_json::Value) -> String {
    use sha2::{Digest, Sha256};
    let mut unsealed = manifest.clone();
    if let Some(object) = unsealed.as_object_mut() {
        object.shift_remove(SEAL);
    }
    let text = super::identity::canonical_json(&unsealed);
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// `manifest` with its [`SEAL`] member set (last).
pub fn sealed(mut manifest: serde_json::Value) -> serde_json::Value {
    let seal = seal_of(&manifest);
    if let Some(object) = manifest.as_object_mut() {
        object.shift_remove(SEAL);
        object.insert(SEAL.to_owned(), serde_json::Value::String(seal));
    }
    manifest
}

/// Where the pipeline was, and its copies in the output directory (`verify --rebuild`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PipelineRecord {
    /// The pipeline file relative to the output directory, when both are on one file system
    /// tree; a rebuild reads the inputs from there.
    pub path: Option<String>,
    /// Its copy in the output directory.
    pub copy: String,
    /// The lockfile the build read its inputs through, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<LockRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRecord {
    /// Its copy in the output directory.
    pub copy: String,
    pub sha256: String,
}

/// A file of the output directory other than a shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSummary {
    pub file: String,
    pub bytes: u64,
    pub sha256: String,
}

/// Names of the copies in the output directory.
pub const PIPELINE_COPY: &str = "pipeline.yaml";
pub const LOCK_COPY: &str = "pipeline.lock";

#[derive(Debug, Serialize)]
pub struct Mix {
    pub target: crate::curate::select::MixConfig,
    /// By source, in plan order.
    pub sources: IndexMap<String, crate::curate::ledger::MixLine>,
}

/// The grouped train/validation split: the shards hold `train_rows` training rows, then the
/// `validation_rows` rows of the validation conversations.
#[derive(Debug, Serialize, Deserialize)]
pub struct Validation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    pub seed: u64,
    /// speculators' `--train-data-ratio`: `int(rows * ratio)` is exactly `train_rows`.
    pub train_data_ratio: f64,
    #[serde(flatten)]
    pub total: crate::model::split::SideCounts,
    /// By source, in plan order.
    pub sources: IndexMap<String, crate::model::split::SideCounts>,
    /// Pre-tokenized rows' conversations split with the first of their id
    /// ([`crate::model::split::Groups`]); absent when none share an id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: crate::model::split::Groups,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Tool {
    pub name: String,
    pub version: String,
}

impl Tool {
    pub fn current() -> Self {
        Tool {
            name: env!("CARGO_PKG_NAME").to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Inputs {
    pub pipeline_sha256: String,
    pub template_sha256: String,
    pub tokenizer_sha256: String,
    /// The built-in template, when the pipeline gives no path (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<Embedded>,
    /// The built-in tokenizer, when the pipeline gives no path (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<Embedded>,
    /// Hub files pinned to their commits (tokenizer, template and sources read from the Hub).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hub: Vec<HubInput>,
    pub files: Vec<InputFile>,
}

/// A tokenizer or template built into the binary: `{embedded: "qwen3.6", sha256: ...}`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Embedded {
    pub embedded: String,
    pub sha256: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct HubInput {
    pub repo: String,
    pub kind: String,
    pub revision: String,
    pub commit: String,
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InputFile {
    pub kind: InputKind,
    pub source: String,
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Debug, Serialize)]
pub struct Settings {
    pub seed: u64,
    pub render_policy: crate::render::RenderPolicy,
    /// Loss-mask conventions (`mask:`, presets resolved).
    pub mask: crate::tokenize::mask_config::MaskSettings,
    pub template_kwargs: serde_json::Map<String, serde_json::Value>,
    pub max_tokens: usize,
    pub length_policy: crate::model::LengthPolicy,
    pub min_supervised_tokens: usize,
    /// Exact dedup key (`null`: off).
    pub dedup: Option<crate::curate::exact::DedupKey>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub near_dup: Option<crate::curate::near_dup::NearDupConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decontaminate: Option<crate::curate::decontaminate::DecontamConfig>,
    /// Each source's filters by count key, in the order they run.
    pub filters: IndexMap<String, Vec<String>>,
    pub shuffle: bool,
    pub rows_per_shard: usize,
}

/// Which engine rendered the chat template, and the in-build spot check of a native render.
#[derive(Debug, Serialize)]
pub struct Renderer {
    pub requested: crate::render::Engine,
    /// `minijinja`, or `native qwen3.6` / `native qwen3.5`.
    pub used: String,
    pub verify_percent: f64,
    /// Source rows also rendered with minijinja (all matched, or the build failed).
    pub verified_rows: u64,
    pub mismatches: u64,
}

/// Which encoder produced the ids, how it was checked before use, and the in-build spot check.
#[derive(Debug, Serialize)]
pub struct Encoder {
    pub requested: crate::tokenize::Backend,
    pub used: crate::tokenize::Backend,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
    pub probe_texts: usize,
    /// Whether recurring segments were encoded once and their ids reused.
    pub segment_cache: bool,
    pub verify_percent: f64,
    /// Source rows re-encoded with the `tokenizers` crate (all matched, or the build failed):
    /// of those chosen, the ones whose ids came from anything but the crate on the whole text.
    pub verified_rows: u64,
    pub mismatches: u64,
}
