//! The `hub:` entries of a pipeline YAML, read on their own so `chatshards lock` and `fetch`
//! work before (and independently of) the planner. Only `tokenizer.hub`, `template.hub`,
//! `sources[].hub` and `decontaminate.benchmarks[].hub` are read; every other key is ignored here and checked by the planner.

use super::config::{HubEntry, HubSpec, RepoKind};
use super::error::HubError;
use serde::Deserialize;
use std::path::Path;

#[derive(Deserialize)]
struct PipelineHubs {
    #[serde(default)]
    tokenizer: Option<Holder>,
    #[serde(default)]
    template: Option<Holder>,
    #[serde(default)]
    sources: Vec<Holder>,
    #[serde(default)]
    decontaminate: Option<Benchmarks>,
}

#[derive(Deserialize)]
struct Benchmarks {
    #[serde(default)]
    benchmarks: Vec<Holder>,
}

/// Any mapping that may carry a `hub:` block.
#[derive(Deserialize)]
struct Holder {
    #[serde(default)]
    hub: Option<HubEntry>,
}

/// The Hub specs of a pipeline in file order: tokenizer, template, then sources. Kinds default
/// to `model` for the tokenizer and template and to `dataset` for sources.
pub fn hub_specs_of(yaml: &Path) -> Result<Vec<HubSpec>, HubError> {
    let text = std::fs::read_to_string(yaml).map_err(|source| HubError::Read {
        path: yaml.to_owned(),
        source,
    })?;
    hub_specs_in(&text, yaml)
}

/// [`hub_specs_of`] on text already read; `path` is only used in errors.
pub fn hub_specs_in(text: &str, path: &Path) -> Result<Vec<HubSpec>, HubError> {
    // Parsed straight from the text so errors keep their line and column.
    let hubs: PipelineHubs =
        serde_yaml_ng::from_str(text).map_err(|source| HubError::PipelineParse {
            path: path.to_owned(),
            source,
        })?;
    let mut located = Vec::new();
    if let Some(entry) = hubs.tokenizer.and_then(|holder| holder.hub) {
        located.push(("tokenizer.hub".to_owned(), entry, RepoKind::Model));
    }
    if let Some(entry) = hubs.template.and_then(|holder| holder.hub) {
        located.push(("template.hub".to_owned(), entry, RepoKind::Model));
    }
    for (index, holder) in hubs.sources.into_iter().enumerate() {
        if let Some(entry) = holder.hub {
            located.push((format!("sources[{index}].hub"), entry, RepoKind::Dataset));
        }
    }
    let benchmarks = hubs.decontaminate.map(|d| d.benchmarks).unwrap_or_default();
    for (index, holder) in benchmarks.into_iter().enumerate() {
        if let Some(entry) = holder.hub {
            located.push((
                format!("decontaminate.benchmarks[{index}].hub"),
                entry,
                RepoKind::Dataset,
            ));
        }
    }
    located
        .into_iter()
        .map(|(location, entry, default_kind)| {
            entry
                .into_spec(default_kind)
                .map_err(|error| HubError::PipelineEntry {
                    path: path.to_owned(),
                    location,
                    error: Box::new(error),
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_only_hub_entries_with_kind_defaults() {
        let yaml = r#"
name: mix
seed: 1
tokenizer:
  path: tok.json
  hub: {repo: Qwen/Qwen3.6-27B, files: [tokenizer.json]}
template:
  path: t.jinja
  sha256: abc
  hub: {repo: Qwen/Qwen3.6-27B, revision: v1, files: [chat_template.jinja]}
render: {policy: expand}
sources:
  - name: orca
    format: openorca
    files: [a.parquet]
    hub:
      repo: Open-Orca/OpenOrca
      files: ["*.parquet"]
  - name: local
    files: [x.jsonl]
    format: openai
  - name: odd
    hub: {repo: someone/models-as-data, kind: model, revision: 0123456789abcdef0123456789abcdef01234567, files: [data.json]}
output: {dir: out}
"#;
        let specs = hub_specs_in(yaml, Path::new("p.yaml")).expect("specs");
        let spec = |repo: &str, kind, revision: &str, file: &str| HubSpec {
            repo: repo.to_owned(),
            kind,
            revision: revision.to_owned(),
            files: vec![file.to_owned()],
        };
        assert_eq!(
            specs,
            vec![
                spec(
                    "Qwen/Qwen3.6-27B",
                    RepoKind::Model,
                    "main",
                    "tokenizer.json"
                ),
                spec(
                    "Qwen/Qwen3.6-27B",
                    RepoKind::Model,
                    "v1",
                    "chat_template.jinja"
                ),
                spec("Open-Orca/OpenOrca", RepoKind::Dataset, "main", "*.parquet"),
                spec(
                    "someone/models-as-data",
                    RepoKind::Model,
                    "0123456789abcdef0123456789abcdef01234567",
                    "data.json"
                ),
            ]
        );
    }

    #[test]
    fn errors_name_the_entry_and_position() {
        let yaml = "sources:\n  - name: a\n    hub: {repo: a/b, files: [x], revison: main}\n";
        let error = hub_specs_in(yaml, Path::new("p.yaml")).expect_err("typo");
        let source = std::error::Error::source(&error).map(ToString::to_string);
        assert_eq!(
            error.to_string(),
            "failed to parse the `hub:` entries of `p.yaml`"
        );
        assert_eq!(
            source.as_deref(),
            Some("sources[0].hub: unknown field `revison`, expected one of `repo`, `kind`, `revision`, `files` at line 3 column 34")
        );

        let yaml = "sources:\n  - name: a\n  - hub: {repo: a/b, files: []}\n";
        let error = hub_specs_in(yaml, Path::new("p.yaml")).expect_err("empty files");
        assert_eq!(
            error.to_string(),
            "`p.yaml`: `sources[1].hub`: invalid `hub:` entry: dataset `a/b`: `files` is empty; list the paths or globs to read, e.g. `[\"*.parquet\"]`"
        );
    }
}
