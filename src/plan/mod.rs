//! Plan stage: parse the pipeline YAML into [`config::PipelineConfig`], then resolve and check
//! it into a [`Plan`] (paths, template hash, tokenizer, adapters). Every config problem is
//! reported with the file, and line and column where the YAML parser knows them.

pub mod config;
mod inputs;
pub mod paths;
mod positions;
mod suggest;

pub use crate::adapt::FormatOptions;
pub use crate::model::digest::sha256_hex;
pub use inputs::{
    embedded_inputs, local_files, regenerated_models, template_kwargs, HubAccess, InputFile,
    UsedLock,
};

use crate::adapt::Adapter;
use config::{
    ColumnsConfig, FormatName, LengthPolicy, PipelineConfig, RenderPolicy, SourceConfig,
    TagsConfig, Take,
};
use std::path::{Path, PathBuf};

/// A checked pipeline, ready to run. Later stages take only this.
#[derive(Debug)]
pub struct Plan {
    pub name: String,
    pub path: PathBuf,
    pub pipeline_sha256: String,
    /// The pipeline file's bytes, as read (copied into the output, hashed into `build_id`).
    pub pipeline_yaml: Vec<u8>,
    pub seed: u64,
    pub template: TemplatePlan,
    /// `None`: the Qwen3.6 tokenizer built into the binary (`model::embedded`).
    pub tokenizer_path: Option<PathBuf>,
    pub tokenizer_sha256: String,
    pub tokenizer_backend: crate::tokenize::Backend,
    /// Share of rows spot-checked against the `tokenizers` crate, in basis points.
    pub verify_basis_points: u32,
    /// Whether recurring segments are encoded once (`tokenizer.segment_cache`).
    pub segment_cache: bool,
    pub policy: RenderPolicy,
    /// The `mask:` settings, a preset resolved.
    pub mask: crate::tokenize::mask_config::MaskSettings,
    pub max_tokens: usize,
    pub length_policy: LengthPolicy,
    pub min_supervised_tokens: usize,
    /// Exact dedup key, when on.
    pub dedup: Option<crate::curate::exact::DedupKey>,
    pub near_dup: Option<crate::curate::near_dup::NearDupConfig>,
    pub decontaminate: Option<DecontamPlan>,
    pub mix: Option<crate::curate::select::MixConfig>,
    /// How input files are read (`max_row_bytes`).
    pub read_options: crate::read::ReadOptions,
    pub sources: Vec<SourcePlan>,
    pub output_dir: PathBuf,
    pub rows_per_shard: usize,
    pub shuffle: bool,
    /// `output.validation`: its target and seed (the pipeline's unless given).
    pub validation: Option<(crate::model::split::Target, u64)>,
    /// Every Hub file the plan reads, pinned to its commit (for the manifest).
    pub hub_files: Vec<crate::hub::ResolvedFile>,
    /// Things the user should know (e.g. a stale lockfile that was not used).
    pub notes: Vec<String>,
    /// The lockfile the inputs were read through, if any.
    pub lock: Option<UsedLock>,
}

#[derive(Debug)]
pub struct TemplatePlan {
    /// `None`: the Qwen3.6 template built into the binary (`model::embedded`).
    pub path: Option<PathBuf>,
    pub sha256: String,
    pub source: String,
    pub kwargs: serde_json::Map<String, serde_json::Value>,
    pub engine: crate::render::Engine,
    /// Share of rows whose native render is re-checked against minijinja, in basis points.
    pub verify_basis_points: u32,
}

#[derive(Debug)]
pub struct SourcePlan {
    pub name: String,
    pub files: Vec<PathBuf>,
    /// The files as written in the pipeline (relative paths), for manifests and reject files.
    pub display_files: Vec<String>,
    /// Each file's name in its rows' selection keys ([`selection_names`]).
    pub selection_names: Vec<String>,
    pub adapter: Adapter,
    /// Rows to keep (`None`: all, or the source's share of the mix).
    pub take: Option<u64>,
    pub sample: crate::curate::select::Sample,
    pub weight: Option<f64>,
    /// The global filters, then the source's own.
    pub filters: crate::curate::filters::Filters,
    /// Least share of the rows read to keep, or the build fails (`min_keep`).
    pub min_keep: f64,
    /// On-policy regeneration of the selected rows (`regenerate:`), if on for this source.
    pub regenerate: Option<crate::regenerate::Settings>,
}

/// Benchmark decontamination with its files resolved.
#[derive(Debug)]
pub struct DecontamPlan {
    pub config: crate::curate::decontaminate::DecontamConfig,
    /// Per benchmark (in `config.benchmarks` order): the local files.
    pub files: Vec<Vec<PathBuf>>,
    /// The same files as written (or `hf://...`), for the manifest.
    pub display_files: Vec<Vec<String>>,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("failed to read pipeline `{}`", .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    #[error("{}", format_yaml_error(.0, .1, .2))]
    Yaml(PathBuf, Vec<u8>, serde_yaml_ng::Error),
    #[error("{}", hub_message(.0))]
    Hub(#[from] crate::hub::HubError),
    #[error("invalid pipeline `{}`:\n{}", .0.display(), .1.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n"))]
    Invalid(PathBuf, Vec<String>),
}

fn hub_message(e: &crate::hub::HubError) -> String {
    match e.hint() {
        Some(hint) => format!("{e}\n\nhint: {hint}"),
        None => e.to_string(),
    }
}

fn format_yaml_error(path: &Path, source: &[u8], e: &serde_yaml_ng::Error) -> String {
    // Every schema error at once where the text is valid UTF-8 and the errors have places.
    let all = std::str::from_utf8(source)
        .map(|text| suggest::schema_errors(text, e))
        .unwrap_or_default();
    if all.is_empty() {
        return format!(
            "{}: {}",
            path.display(),
            suggest::did_you_mean(&e.to_string())
        );
    }
    let positions = positions_of(source);
    all.into_iter()
        .map(|(line, column, text)| {
            let (line, column) =
                duplicate_key_position(&positions, &text).unwrap_or((line, column));
            format!(
                "{}:{line}:{column}: {}",
                path.display(),
                suggest::did_you_mean(&text)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// serde reports a duplicate key at the start of its mapping: the position of the key's second
/// occurrence instead. `message`: serde's, e.g. "sources[0]: duplicate field `name`".
fn duplicate_key_position(
    positions: &positions::Positions,
    message: &str,
) -> Option<(usize, usize)> {
    let (head, after) = message.split_once("duplicate field `")?;
    let key = after.split_once('`')?.0;
    let path = match head.trim_end_matches(": ") {
        "" => key.to_owned(),
        parent => format!("{parent}.{key}"),
    };
    positions.repeated(&path)
}

/// The settings of the pipeline `source` by position (none where it is not UTF-8).
fn positions_of(source: &[u8]) -> positions::Positions {
    std::str::from_utf8(source)
        .map(positions::Positions::of)
        .unwrap_or_default()
}

/// Reads and parses a pipeline file (no file-system checks beyond reading it).
pub fn parse(path: &Path) -> Result<(PipelineConfig, Vec<u8>), PlanError> {
    let bytes = std::fs::read(path).map_err(|e| PlanError::Read(path.to_owned(), e))?;
    let config = serde_yaml_ng::from_slice(&bytes)
        .map_err(|e| PlanError::Yaml(path.to_owned(), bytes.clone(), e))?;
    Ok((config, bytes))
}

/// Parses and checks a pipeline file, gathering every problem before failing.
pub fn compile(path: &Path, access: HubAccess) -> Result<Plan, PlanError> {
    let (config, bytes) = parse(path)?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut errors = Vec::new();
    let inputs = inputs::resolve(path, &config, access, &mut errors)?;

    // Each as (its path, `None` for the built-in one; its bytes). `None`: a Hub entry that
    // did not resolve (already an error).
    let embedded = crate::model::embedded::TEMPLATE.as_bytes();
    let template_input = match (&inputs.template, config.template.is_embedded()) {
        (_, true) => Some((None, Ok(embedded.to_vec()))),
        (Some(p), false) => Some((Some(p.clone()), read_input("template", p))),
        (None, false) => None,
    };
    let template = match template_input {
        None => None,
        Some((path, Ok(t))) => {
            let shown = shown_input(path.as_deref(), crate::model::embedded::TEMPLATE_SHOWN);
            let sha256 = sha256_hex(&t);
            if let Some(expected) = &config.template.sha256 {
                if !expected.eq_ignore_ascii_case(&sha256) {
                    errors.push(format!(
                        "template {shown} has sha256 {sha256}, but the pipeline expects {expected}"
                    ));
                }
            }
            match String::from_utf8(t) {
                Ok(source) => Some(TemplatePlan {
                    path,
                    sha256,
                    source,
                    kwargs: config.template.kwargs.clone().into_iter().collect(),
                    engine: config.template.engine,
                    verify_basis_points: (config.template.verify_percent * 100.0).round() as u32,
                }),
                Err(_) => {
                    errors.push(format!("template {shown} is not UTF-8"));
                    None
                }
            }
        }
        Some((_, Err(e))) => {
            errors.push(e);
            None
        }
    };

    let tokenizer_path = match config.tokenizer.is_embedded() {
        true => None,
        false => inputs.tokenizer.clone(),
    };
    let tokenizer_sha256 = match &tokenizer_path {
        None if config.tokenizer.is_embedded() => sha256_hex(crate::model::embedded::TOKENIZER_ZST),
        None => String::new(),
        Some(p) => match read_input("tokenizer", p) {
            Ok(t) => sha256_hex(&t),
            Err(e) => {
                errors.push(e);
                String::new()
            }
        },
    };

    if !(0.0..=100.0).contains(&config.tokenizer.verify_percent) {
        errors.push("`tokenizer.verify_percent` must be between 0 and 100".into());
    }
    if !(0.0..=100.0).contains(&config.template.verify_percent) {
        errors.push("`template.verify_percent` must be between 0 and 100".into());
    }
    if config.sources.is_empty() {
        errors.push("`sources` is empty: name at least one source".into());
    }
    // The global filters once, their errors at their own line (not at every source's).
    let global_filters = match crate::curate::filters::Filters::compile(&config.filters, &[]) {
        Ok(_) => config.filters.as_slice(),
        Err(e) => {
            errors.push(format!("filters: {e}"));
            &[]
        }
    };
    let mut sources = Vec::new();
    for (i, source) in config.sources.iter().enumerate() {
        if config.sources[..i].iter().any(|s| s.name == source.name) {
            errors.push(format!(
                "sources[{i}]: the name `{}` is used twice",
                source.name
            ));
        }
        if source.name.is_empty() || source.name.contains([':', '/', '\n']) {
            errors.push(format!(
                "sources[{i}]: name `{}` must be non-empty and free of `:`, `/` and newlines",
                source.name
            ));
        }
        if config.mix.is_none() && source.weight.is_some() {
            errors.push(format!(
                "sources[{i}] (`{}`): `weight` needs a pipeline-level `mix` (e.g. `mix: {{target: rows, total: 100000}}`)",
                source.name
            ));
        }
        if let Some(w) = source.weight {
            if let Err(e) = crate::curate::select::MixConfig::check_weight(&source.name, w) {
                errors.push(format!("sources[{i}]: {e}"));
            }
        }
        let mut regenerate = crate::regenerate::resolve(
            config.regenerate.as_ref(),
            source.regenerate.as_ref(),
            i,
            base,
            &base.join(&config.output.dir),
        )
        .map_err(|e| errors.extend(e))
        .ok()
        .flatten();
        // The served version the lockfile pins, checked against the servers at start.
        if let (Some(settings), Some(lock)) = (&mut regenerate, &inputs.lock) {
            settings.pinned = lock
                .servers
                .iter()
                .find(|s| s.model == settings.config.model)
                .map(|s| crate::regenerate::Pinned {
                    server_version: s.server_version.clone(),
                });
        }
        let min_keep = source
            .min_keep
            .or(config.min_keep)
            .unwrap_or(config::DEFAULT_MIN_KEEP);
        if !(0.0..=1.0).contains(&min_keep) {
            errors.push(format!(
                "sources[{i}] (`{}`): `min_keep` must be a share between 0 and 1, not {min_keep}",
                source.name
            ));
        }
        if source.format == FormatName::Speculator {
            errors.extend(
                pretokenized_conflicts(source, regenerate.is_some(), config.near_dup.as_ref())
                    .into_iter()
                    .map(|e| format!("sources[{i}] (`{}`): {e}", source.name)),
            );
        }
        match compile_source(&inputs.sources[i], source, global_filters, min_keep) {
            Ok(s) => sources.push(SourcePlan { regenerate, ..s }),
            Err(e) => errors.extend(
                e.into_iter()
                    .map(|e| format!("sources[{i}] (`{}`): {e}", source.name)),
            ),
        }
    }

    if let Some(names) = config.near_dup.as_ref().and_then(|n| n.sources.as_ref()) {
        for name in names {
            if !config.sources.iter().any(|s| &s.name == name) {
                errors.push(format!(
                    "near_dup.sources: `{name}` is not the name of a source"
                ));
            }
        }
    }
    if let Some(n) = &config.near_dup {
        if let Err(e) = n.check() {
            errors.push(e.to_string());
        }
    }
    if let Some(d) = &config.decontaminate {
        if let Err(e) = d.check() {
            errors.push(e.to_string());
        }
    }
    if let Some(mix) = &config.mix {
        if let Err(e) = mix.check() {
            errors.push(e.to_string());
        }
        errors.extend(takes_against_mix(mix, &config.sources));
    }
    let validation = config.output.validation.as_ref().and_then(|v| {
        v.target()
            .map_err(|e| errors.push(e))
            .ok()
            .map(|t| (t, v.seed.unwrap_or(config.seed)))
    });
    let (mask, policy) = config
        .mask
        .resolve(config.render.policy)
        .unwrap_or_else(|e| {
            errors.push(e.to_string());
            Default::default()
        });
    match (template, errors.is_empty()) {
        (Some(template), true) => Ok(Plan {
            name: config.name,
            path: path.to_owned(),
            pipeline_sha256: sha256_hex(&bytes),
            pipeline_yaml: bytes,
            seed: config.seed,
            template,
            tokenizer_path,
            tokenizer_sha256,
            tokenizer_backend: config.tokenizer.backend,
            verify_basis_points: (config.tokenizer.verify_percent * 100.0).round() as u32,
            segment_cache: config.tokenizer.segment_cache,
            policy,
            mask,
            max_tokens: config.max_tokens,
            length_policy: config.length_policy,
            min_supervised_tokens: config.min_supervised_tokens,
            dedup: config.dedup.key(),
            near_dup: config.near_dup,
            decontaminate: config.decontaminate.map(|config| DecontamPlan {
                files: inputs
                    .benchmarks
                    .iter()
                    .map(|f| f.iter().map(|f| f.local.clone()).collect())
                    .collect(),
                display_files: inputs
                    .benchmarks
                    .iter()
                    .map(|f| f.iter().map(|f| f.display.clone()).collect())
                    .collect(),
                config,
            }),
            mix: config.mix,
            read_options: crate::read::ReadOptions {
                max_row_bytes: config.max_row_bytes,
                sample: None,
                defer: false,
            },
            sources,
            output_dir: base.join(&config.output.dir),
            rows_per_shard: config.output.rows_per_shard,
            shuffle: config.output.shuffle,
            validation,
            hub_files: inputs.hub_files,
            notes: inputs.notes,
            lock: inputs.lock,
        }),
        _ => {
            let positions = positions_of(&bytes);
            Err(PlanError::Invalid(
                path.to_owned(),
                errors
                    .into_iter()
                    .map(|e| match positions.line(&positions::message_path(&e)) {
                        Some(line) => format!("{}:{line}: {e}", path.display()),
                        None => e,
                    })
                    .collect(),
            ))
        }
    }
}

impl Plan {
    /// A check's message about the pipeline (`sources[i].take: ...`), prefixed with the
    /// pipeline's path and the line of the setting it is about where the file has it.
    pub fn at_line(&self, message: &str) -> String {
        let at = positions_of(&self.pipeline_yaml).line(&positions::message_path(message));
        match at {
            Some(line) => format!("{}:{line}: {message}", self.path.display()),
            None => format!("{}: {message}", self.path.display()),
        }
    }
}

/// `take`s a row mix cannot honour, at the line of the `take` (or `weight`) concerned: a mix never
/// gives more than its total, nor nothing to a weighted source. (Token targets and sources with
/// neither `take` nor `weight` are known only once their rows are; the allocation checks those.)
fn takes_against_mix(
    mix: &crate::curate::select::MixConfig,
    sources: &[SourceConfig],
) -> Vec<String> {
    if mix.target != crate::curate::select::MixTarget::Rows {
        return Vec::new();
    }
    let total = mix.total;
    let mut errors = Vec::new();
    let mut served = 0u64;
    let mut named = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        let Take::Rows(n) = s.take else { continue };
        let before = served;
        served = served.saturating_add(n);
        named.push(format!("`{}`", s.name));
        if n > total {
            errors.push(format!(
                "sources[{i}].take: `take: {n}` of `{}` is more than the mix's `total: {total}` \
                 (a mix never gives more than its total): lower it, or give the source a \
                 `weight` instead",
                s.name
            ));
        } else if served > total && before <= total {
            errors.push(format!(
                "sources[{i}].take: the `take`s of {} add up to {served} rows, more than the \
                 mix's `total: {total}`: lower them, or give the sources `weight`s instead",
                named.join(", ")
            ));
        }
    }
    let weighted = sources
        .iter()
        .position(|s| s.take == Take::All && s.weight.is_some());
    if let (Some(i), true) = (weighted, served == total) {
        errors.push(format!(
            "sources[{i}].weight: the `take`s of {} add up to the mix's whole `total: {total}`, \
             leaving nothing for the weighted sources: lower the `take`s or raise `total`",
            named.join(", ")
        ));
    }
    errors
}

/// Reads an input file, or says what the path is instead (a directory, a FIFO, which would
/// block, missing...).
/// The settings of a `speculator` source that would need text it does not have. The
/// pipeline-wide ones (global text filters, `near_dup` over all sources, `decontaminate`, the
/// render policy and mask) skip its rows instead: they are about the conversation sources.
fn pretokenized_conflicts(
    source: &SourceConfig,
    regenerated: bool,
    near_dup: Option<&crate::curate::near_dup::NearDupConfig>,
) -> Vec<String> {
    let mut errors = Vec::new();
    for f in &source.filters {
        if f.reads_text() {
            errors.push(format!(
                "filter `{}` reads text, and format `speculator` rows are token ids (only {} filters apply)",
                f.name(),
                crate::curate::filters::FilterConfig::token_kinds()
            ));
        }
    }
    if regenerated {
        errors.push(
            "`regenerate` does not apply to format `speculator` (its rows are token ids, not conversations); set `regenerate: false` on this source".to_owned(),
        );
    }
    if near_dup
        .and_then(|n| n.sources.as_ref())
        .is_some_and(|names| names.contains(&source.name))
    {
        errors.push(
            "`near_dup.sources` names it, but near-duplicate removal reads text and format `speculator` rows are token ids (exact `dedup` applies)".to_owned(),
        );
    }
    errors
}

/// A tokenizer or template as messages name it: `` `PATH` `` or `builtin`.
pub fn shown_input(path: Option<&Path>, builtin: &str) -> String {
    match path {
        Some(path) => format!("`{}`", path.display()),
        None => builtin.to_owned(),
    }
}

fn read_input(what: &str, path: &Path) -> Result<Vec<u8>, String> {
    paths::require_file(path).map_err(|why| format!("{what} {why}"))?;
    std::fs::read(path).map_err(|e| format!("{what} `{}`: {e}", path.display()))
}

fn compile_source(
    files: &[InputFile],
    source: &SourceConfig,
    global_filters: &[crate::curate::filters::FilterConfig],
    min_keep: f64,
) -> Result<SourcePlan, Vec<String>> {
    let mut errors = Vec::new();
    let filters = crate::curate::filters::Filters::compile(global_filters, &source.filters)
        .map_err(|e| errors.push(format!("filters: {e}")))
        .ok();
    for f in files {
        if let Err(e) = paths::require_file(&f.local) {
            errors.push(format!("input file {e}"));
        }
    }
    let options = FormatOptions {
        resolved_only: source.resolved_only,
    };
    match (
        adapter(source.format, &source.columns, &source.tags, &options),
        filters,
    ) {
        (Ok(adapter), Some(filters)) if errors.is_empty() => Ok(SourcePlan {
            name: source.name.clone(),
            files: files.iter().map(|f| f.local.clone()).collect(),
            display_files: files.iter().map(|f| f.display.clone()).collect(),
            selection_names: selection_names(files.iter().map(|f| f.display.as_str())),
            adapter,
            take: match source.take {
                Take::All => None,
                Take::Rows(n) => Some(n),
            },
            sample: source.sample,
            weight: source.weight,
            filters,
            min_keep,
            regenerate: None,
        }),
        (Ok(_), _) => Err(errors),
        (Err(e), _) => {
            errors.extend(e);
            Err(errors)
        }
    }
}

/// The names of a source's files in their rows' selection keys (CURATION.md: "file name"): for
/// a Hub file its path in the repo; for local files the path relative to the folder all the
/// source's files share (a single file: its base name). Never where the checkout or the cache
/// is, nor the commit, so the same tree keeps the same sample wherever it is read from; yet two
/// files with the same base name in different folders get different keys.
pub fn selection_names<'a>(displays: impl Iterator<Item = &'a str> + Clone) -> Vec<String> {
    use std::path::Component;
    // A path's components as written, `./` steps left out (they name no folder).
    let parts = |display: &'a str| {
        Path::new(display)
            .components()
            .filter(|c| !matches!(c, Component::CurDir))
    };
    // How many leading folders every local file shares (never the file name itself).
    let common = displays
        .clone()
        .filter(|d| !d.starts_with("hf://"))
        .map(|d| parts(d).collect::<Vec<_>>())
        .reduce(|mut shared, next| {
            let same = shared.iter().zip(&next).take_while(|(a, b)| a == b).count();
            shared.truncate(same);
            shared
        })
        .map_or(0, |shared| shared.len());
    displays
        .map(|display| {
            if let Some(rest) = display.strip_prefix("hf://") {
                // `hf://<kind>s/<owner>/<name>@<commit>/<path>`
                return rest
                    .split_once('@')
                    .and_then(|(_, after)| after.split_once('/'))
                    .map_or(display, |(_, path)| path)
                    .to_owned();
            }
            let parts: Vec<_> = parts(display).collect();
            // A file's own name stays in its key even when it is the only file.
            let skip = common.min(parts.len().saturating_sub(1));
            parts[skip..]
                .iter()
                .collect::<PathBuf>()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// Builds the adapter for a format, rejecting mapping keys and options the format does not use.
pub fn adapter(
    format: FormatName,
    columns: &ColumnsConfig,
    tags: &TagsConfig,
    options: &FormatOptions,
) -> Result<Adapter, Vec<String>> {
    Adapter::configure(&crate::adapt::Settings {
        format,
        columns,
        tags,
        options,
    })
}

#[cfg(test)]
mod compile_tests;

#[cfg(test)]
mod tests {
    use super::selection_names;

    fn names(displays: &[&str]) -> Vec<String> {
        selection_names(displays.iter().copied())
    }

    #[test]
    fn a_single_file_is_keyed_by_its_base_name_wherever_it_is() {
        assert_eq!(names(&["../data/chat.jsonl"]), ["chat.jsonl"]);
        assert_eq!(
            names(&["/home/me/checkout/data/chat.jsonl"]),
            ["chat.jsonl"]
        );
        assert_eq!(names(&["chat.jsonl"]), ["chat.jsonl"]);
    }

    #[test]
    fn files_are_keyed_by_their_path_below_the_shared_folder() {
        let moved = [
            names(&["data/x/part.jsonl", "data/y/part.jsonl"]),
            names(&["./x/part.jsonl", "y/part.jsonl"]),
            names(&["/srv/corpus/x/part.jsonl", "/srv/corpus/y/part.jsonl"]),
        ];
        for keys in moved {
            assert_eq!(keys, ["x/part.jsonl", "y/part.jsonl"]);
        }
        assert_eq!(
            names(&["d/a.jsonl", "d/sub/a.jsonl"]),
            ["a.jsonl", "sub/a.jsonl"]
        );
    }

    #[test]
    fn hub_files_are_keyed_by_their_path_in_the_repo() {
        assert_eq!(
            names(&[
                "hf://datasets/Open-Orca/OpenOrca@0123abcd/data/1M-GPT4.parquet",
                "hf://datasets/Open-Orca/OpenOrca@0123abcd/data/3_5M.parquet",
            ]),
            ["data/1M-GPT4.parquet", "data/3_5M.parquet"]
        );
    }
}
