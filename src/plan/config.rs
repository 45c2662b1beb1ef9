//! The pipeline YAML, exactly as written. [`super::compile`] turns it into a [`super::Plan`];
//! no later stage sees these types.

pub use crate::adapt::{ColumnsConfig, FormatName, TagsConfig};
use crate::hub::HubEntry;
pub use crate::model::LengthPolicy;
pub use crate::render::RenderPolicy;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// Least share of the rows it read that a source must keep (before `take` / `mix`, which are
/// the user's own choice) unless `min_keep` says otherwise: 1%. Below it the build fails.
pub const DEFAULT_MIN_KEEP: f64 = 0.01;

/// A pipeline: where the data comes from, how it is rendered and tokenized, where it goes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// Dataset name, recorded in the manifest.
    pub name: String,
    /// Seed for the row shuffle. Same seed, same order.
    #[serde(default)]
    pub seed: u64,
    /// The tokenizer (`tokenizer.json`, optionally `.zst`); without `path` or `hub`, the
    /// Qwen3.6 one built into the binary.
    #[serde(default)]
    pub tokenizer: TokenizerConfig,
    /// The chat template (`chat_template.jinja`); without `path` or `hub`, the Qwen3.6 one
    /// built into the binary.
    #[serde(default)]
    pub template: TemplateConfig,
    #[serde(default)]
    pub render: RenderConfig,
    /// Loss-mask conventions (`mask:`): end-of-turn tokens, think prefill, boundary rule,
    /// dtype, or a peer's preset.
    #[serde(default)]
    pub mask: crate::tokenize::mask_config::MaskConfig,
    /// Longest row kept, in tokens (at least 1).
    #[serde(default = "default_max_tokens", deserialize_with = "at_least_one")]
    pub max_tokens: usize,
    /// What to do with longer rows.
    #[serde(default)]
    pub length_policy: LengthPolicy,
    /// Fewest supervised (loss-masked) tokens a row must have.
    #[serde(default = "default_min_supervised_tokens")]
    pub min_supervised_tokens: usize,
    /// Largest input record accepted, in bytes (a JSON line, an array element, a Parquet row
    /// as JSON); larger ones are rejected as `too_large` (a JSON line without being held).
    #[serde(
        default = "default_max_row_bytes",
        deserialize_with = "at_least_one_u64"
    )]
    pub max_row_bytes: u64,
    /// Exact dedup across all sources: `true` (the whole conversation, the default), `false`,
    /// or `{key: conversation | prompt}`. The copy at the smallest position survives.
    #[serde(default)]
    pub dedup: crate::curate::exact::DedupConfig,
    /// Filters applied to every source, before each source's own, in the order written.
    #[serde(default)]
    pub filters: Vec<crate::curate::filters::FilterConfig>,
    /// Near-duplicate removal across all sources (MinHash + LSH); off when absent.
    #[serde(default)]
    pub near_dup: Option<crate::curate::near_dup::NearDupConfig>,
    /// Benchmark decontamination; off when absent.
    #[serde(default)]
    pub decontaminate: Option<crate::curate::decontaminate::DecontamConfig>,
    /// A mix target shared by the sources' `weight`s; without it each source keeps its `take`.
    #[serde(default)]
    pub mix: Option<crate::curate::select::MixConfig>,
    /// Least share of its rows read that every source must keep (before `take` / `mix`), or
    /// the build fails naming why; a source's own `min_keep` overrides it. Default 0.01.
    #[serde(default)]
    pub min_keep: Option<f64>,
    /// On-policy regeneration of the selected rows' assistant turns by a served model; off
    /// when absent (docs/on-policy.md).
    #[serde(default)]
    pub regenerate: Option<crate::regenerate::RegenerateConfig>,
    pub sources: Vec<SourceConfig>,
    pub output: OutputConfig,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenizerConfig {
    /// Path to `tokenizer.json` (or `tokenizer.json.zst`), relative to the pipeline file.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Or a file of a Hub repo: `{repo: Qwen/Qwen3.6-27B, revision: main, files: [tokenizer.json]}`.
    #[serde(default)]
    pub hub: Option<HubEntry>,
    /// Encoder: `auto` (the fast exact encoder when the tokenizer qualifies and passes a
    /// load-time self-check against the `tokenizers` crate, else the `tokenizers` crate),
    /// `hf` (always the `tokenizers` crate) or `fast` (the fast encoder or an error).
    #[serde(default)]
    pub backend: crate::tokenize::Backend,
    /// Percent of rows (chosen by a hash of the row id) whose ids are re-checked against the
    /// `tokenizers` crate encoding the whole text during a build, where they came from
    /// anything else (the fast encoder, the segment cache); a difference stops the build.
    #[serde(default = "default_verify_percent")]
    pub verify_percent: f64,
    /// With the `tokenizers` crate as encoder: encode each long segment that recurs from row
    /// to row (a system prompt, tool schemas) once and reuse its ids (exact, and a share of
    /// rows re-encoded whole to check it; `false` encodes every row whole).
    #[serde(default = "default_true")]
    pub segment_cache: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateConfig {
    /// Path to the Jinja chat template, relative to the pipeline file.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// Or a file of a Hub repo: `{repo: Qwen/Qwen3.6-27B, files: [chat_template.jinja]}`.
    #[serde(default)]
    pub hub: Option<HubEntry>,
    /// Expected SHA-256 of the template file; the build stops if it differs.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Extra template variables (`enable_thinking`, `preserve_thinking`, ...).
    #[serde(default)]
    pub kwargs: BTreeMap<String, serde_json::Value>,
    /// `auto` (the official Qwen3.5/Qwen3.6 template files evaluated natively, byte-identical
    /// to minijinja; minijinja for any other template) or `minijinja` (always).
    #[serde(default)]
    pub engine: crate::render::Engine,
    /// Percent of rows (chosen by a hash of the row id) that a native render is re-checked
    /// against minijinja during a build; a difference stops the build.
    #[serde(default = "default_verify_percent")]
    pub verify_percent: f64,
}

impl TokenizerConfig {
    /// Neither `path` nor `hub`: the built-in tokenizer.
    pub fn is_embedded(&self) -> bool {
        self.path.is_none() && self.hub.is_none()
    }
}

impl TemplateConfig {
    /// Neither `path` nor `hub`: the built-in template.
    pub fn is_embedded(&self) -> bool {
        self.path.is_none() && self.hub.is_none()
    }
}

/// `tokenizer:` left out: the built-in one, every setting at its default.
impl Default for TokenizerConfig {
    fn default() -> Self {
        TokenizerConfig {
            path: None,
            hub: None,
            backend: Default::default(),
            verify_percent: default_verify_percent(),
            segment_cache: true,
        }
    }
}

/// `template:` left out: the built-in one, every setting at its default.
impl Default for TemplateConfig {
    fn default() -> Self {
        TemplateConfig {
            path: None,
            hub: None,
            sha256: None,
            kwargs: BTreeMap::new(),
            engine: Default::default(),
            verify_percent: default_verify_percent(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenderConfig {
    /// `None` when not written: `expand`, or what `mask.preset` sets.
    #[serde(default)]
    pub policy: Option<RenderPolicy>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// Unique name, used in `sample_id`, the `source` column and the manifest.
    pub name: String,
    /// Input files (`.jsonl`, `.json`, `.parquet`), relative to the pipeline file.
    #[serde(default)]
    pub files: Vec<PathBuf>,
    /// Or files of a Hub dataset: `{repo: Open-Orca/OpenOrca, revision: main, files: ["*.parquet"]}`
    /// (exact paths or globs; matched files are read in path order).
    #[serde(default)]
    pub hub: Option<HubEntry>,
    /// The row format: a generic one (`openai`, `sharegpt`, `alpaca`, which take `columns`
    /// and `tags`) or a source-specific one that reads its source's exact columns
    /// (`openorca`, `codealpaca`, `evol_codealpaca`, `magicoder_oss`, `magicoder_evol`,
    /// `agentic`, `glaive`, `qwen35_fc`, `hermes`, `xlam`), or `speculator` (pre-tokenized
    /// rows, which take `columns: {input_ids, loss_mask, id}`).
    pub format: FormatName,
    /// Column names, where they differ from the format's defaults.
    #[serde(default)]
    pub columns: ColumnsConfig,
    /// ShareGPT role tags, where they differ from the defaults.
    #[serde(default)]
    pub tags: TagsConfig,
    /// How many rows to keep from this source: a count, or `all`.
    #[serde(default)]
    pub take: Take,
    /// How `take` (or the source's share of a `mix`) picks rows: `random` (an exact seeded
    /// uniform sample, the default) or `first` (in file order).
    #[serde(default)]
    pub sample: crate::curate::select::Sample,
    /// The source's weight in the pipeline's `mix`.
    #[serde(default)]
    pub weight: Option<f64>,
    /// Filters for this source only, after the global ones.
    #[serde(default)]
    pub filters: Vec<crate::curate::filters::FilterConfig>,
    /// `agentic` only: keep only trajectories known to be resolved (others are filtered with
    /// reason `unresolved`, counted but not written as rejects).
    #[serde(default)]
    pub resolved_only: Option<bool>,
    /// This source's least share to keep (see the pipeline's `min_keep`).
    #[serde(default)]
    pub min_keep: Option<f64>,
    /// `false` (the dataset's own answers), `true` (the pipeline's `regenerate:`) or a section
    /// of its own; absent: the pipeline's, if any.
    #[serde(default)]
    pub regenerate: Option<crate::regenerate::SourceRegenerate>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Take {
    #[default]
    All,
    Rows(u64),
}

impl<'de> Deserialize<'de> for Take {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct TakeVisitor;
        impl Visitor<'_> for TakeVisitor {
            type Value = Take;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a row count or `all`")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Take, E> {
                match v {
                    // A source that may keep nothing is a mistake: leave it out instead.
                    0 => Err(E::invalid_value(
                        de::Unexpected::Unsigned(v),
                        &"a row count of at least 1, or `all`",
                    )),
                    _ => Ok(Take::Rows(v)),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Take, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Signed(v), &self)),
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Take, E> {
                match v {
                    "all" => Ok(Take::All),
                    _ => Err(E::invalid_value(de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(TakeVisitor)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// Output directory, relative to the pipeline file.
    pub dir: PathBuf,
    /// Rows per Arrow shard (at least 1).
    #[serde(default = "default_rows_per_shard", deserialize_with = "at_least_one")]
    pub rows_per_shard: usize,
    /// Shuffle rows with `seed` (training takes the first 90% as train).
    #[serde(default = "default_true")]
    pub shuffle: bool,
    /// A grouped, seeded train/validation split (`fraction` or `rows`, `seed`).
    #[serde(default)]
    pub validation: Option<crate::model::split::ValidationConfig>,
}

/// A count that must be at least 1, checked inside the parse (a visitor) so that the error
/// has the value's own YAML position.
fn at_least_one<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    struct AtLeastOne;
    impl Visitor<'_> for AtLeastOne {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a whole number of at least 1")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<usize, E> {
            match usize::try_from(v) {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(E::invalid_value(de::Unexpected::Unsigned(v), &self)),
            }
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<usize, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(E::invalid_value(de::Unexpected::Signed(v), &self)),
            }
        }
    }
    d.deserialize_u64(AtLeastOne)
}

/// [`at_least_one`] for byte counts.
fn at_least_one_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    at_least_one(d).map(|n| n as u64)
}

fn default_verify_percent() -> f64 {
    1.0
}
fn default_max_row_bytes() -> u64 {
    crate::read::DEFAULT_MAX_ROW_BYTES
}
fn default_max_tokens() -> usize {
    8192
}
fn default_min_supervised_tokens() -> usize {
    32
}
fn default_rows_per_shard() -> usize {
    100_000
}
fn default_true() -> bool {
    true
}
