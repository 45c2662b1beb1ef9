//! A build's identity. `build_id` is a SHA-256 over everything that decides the output bytes;
//! `dataset_sha256` is a SHA-256 over the shards' hashes. Both are documented in the README
//! ("Versions") and must only change together with [`ENCODING`].
//!
//! `build_id` = SHA-256 of the UTF-8 bytes of the compact JSON text (no spaces, object keys
//! sorted by their UTF-8 bytes at every depth, numbers as serde_json writes them) of
//!
//! ```text
//! {"encoding": 1,
//!  "tool": {"name": "chatshards", "version": "0.1.0"},
//!  "pipeline": <the pipeline YAML as a generic value, without output.dir>,
//!  "lock_sha256": <SHA-256 of the lockfile's bytes, or null when no lockfile was used>,
//!  "template": {"sha256": <template bytes>, "kwargs": <template variables>},
//!  "tokenizer": {"sha256": <tokenizer bytes>},
//!  "inputs": [{"kind": "source", "name": <source>, "path": <as written>, "sha256": <bytes>}, ...]}
//! ```
//!
//! The pipeline enters by meaning, not formatting: comments, key order, quoting and
//! whitespace do not change it; values are as YAML reads them (`1` and `1.0` differ, as they
//! do for a template variable). Paths enter as written in the pipeline (relative to it), so a
//! moved checkout keeps its ids. `output.dir` is left out: where a dataset is written does not
//! change its bytes, so a rebuild into another directory has the same `build_id`.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

pub use crate::model::digest::canonical_json;

/// Version of the encoding above.
pub const ENCODING: u32 = 1;

/// What kind of input file: each kind is one variant (benchmark sets will be one more).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    /// A file a source reads.
    Source,
    /// A benchmark file of `decontaminate`.
    Benchmark,
}

/// One input file that decides output bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityInput {
    pub kind: InputKind,
    /// The source (or set) the file belongs to.
    pub name: String,
    /// As written in the pipeline, or `hf://...@commit/path` for a Hub file.
    pub path: String,
    pub sha256: String,
}

impl From<&super::manifest::InputFile> for IdentityInput {
    fn from(f: &super::manifest::InputFile) -> Self {
        IdentityInput {
            kind: f.kind,
            name: f.source.clone(),
            path: f.path.clone(),
            sha256: f.sha256.clone(),
        }
    }
}

/// Everything [`build_id`] hashes.
#[derive(Debug, Clone)]
pub struct Identity<'a> {
    pub tool_name: &'a str,
    pub tool_version: &'a str,
    /// From [`pipeline_value`].
    pub pipeline: &'a Value,
    pub lock_sha256: Option<&'a str>,
    pub template_sha256: &'a str,
    pub template_kwargs: &'a Map<String, Value>,
    pub tokenizer_sha256: &'a str,
    pub inputs: &'a [IdentityInput],
}

impl Identity<'_> {
    /// The JSON document whose canonical text is hashed.
    pub fn document(&self) -> Value {
        json!({
            "encoding": ENCODING,
            "tool": {"name": self.tool_name, "version": self.tool_version},
            "pipeline": self.pipeline,
            "lock_sha256": self.lock_sha256,
            "template": {"sha256": self.template_sha256, "kwargs": self.template_kwargs},
            "tokenizer": {"sha256": self.tokenizer_sha256},
            "inputs": self.inputs,
        })
    }

    /// Lowercase hex SHA-256 of the canonical text of [`Self::document`].
    pub fn build_id(&self) -> String {
        crate::model::digest::sha256_hex(canonical_json(&self.document()).as_bytes())
    }
}

pub use crate::model::digest::{hash_file, hash_file_with};

/// The pipeline YAML as a generic value, without `output.dir`.
pub fn pipeline_value(yaml: &[u8]) -> Result<Value, serde_yaml_ng::Error> {
    let mut value: Value = serde_yaml_ng::from_slice(yaml)?;
    if let Some(output) = value.get_mut("output").and_then(Value::as_object_mut) {
        output.remove("dir");
    }
    Ok(value)
}

/// `dataset_sha256`: SHA-256 of the shards' lowercase hex SHA-256s concatenated in shard
/// order (64 ASCII characters per shard, no separator). `state.json`'s `_fingerprint` is its
/// first 16 characters.
pub fn dataset_sha256<'a>(shard_sha256s: impl IntoIterator<Item = &'a str>) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for sha in shard_sha256s {
        hasher.update(sha.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// Characters of `dataset_sha256` in `state.json`'s `_fingerprint`.
pub const FINGERPRINT_CHARS: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "name: demo\nseed: 42\ntokenizer: {path: tok.json}\ntemplate:\n  path: t.jinja\n  kwargs: {preserve_thinking: false}\nsources:\n  - name: chat\n    files: [chat.jsonl]\n    format: openai\noutput:\n  dir: out\n  rows_per_shard: 100\n";

    fn id_of(yaml: &str, change: impl FnOnce(&mut Owned)) -> String {
        let mut owned = Owned {
            version: "0.1.0".to_owned(),
            pipeline: pipeline_value(yaml.as_bytes()).expect("yaml"),
            lock: None,
            template: "a".repeat(64),
            kwargs: Map::from_iter([("preserve_thinking".to_owned(), Value::Bool(false))]),
            tokenizer: "b".repeat(64),
            inputs: vec![IdentityInput {
                kind: InputKind::Source,
                name: "chat".to_owned(),
                path: "chat.jsonl".to_owned(),
                sha256: "c".repeat(64),
            }],
        };
        change(&mut owned);
        Identity {
            tool_name: "chatshards",
            tool_version: &owned.version,
            pipeline: &owned.pipeline,
            lock_sha256: owned.lock.as_deref(),
            template_sha256: &owned.template,
            template_kwargs: &owned.kwargs,
            tokenizer_sha256: &owned.tokenizer,
            inputs: &owned.inputs,
        }
        .build_id()
    }

    struct Owned {
        version: String,
        pipeline: Value,
        lock: Option<String>,
        template: String,
        kwargs: Map<String, Value>,
        tokenizer: String,
        inputs: Vec<IdentityInput>,
    }

    #[test]
    fn the_encoding_is_pinned() {
        let value = json!({"b": [{"z": 1, "a": 2.5}], "a": null, "é": "x", "Z": true});
        assert_eq!(
            canonical_json(&value),
            r#"{"Z":true,"a":null,"b":[{"a":2.5,"z":1}],"é":"x"}"#
        );
        // A change here changes every build_id: bump ENCODING and the README with it.
        assert_eq!(
            id_of(YAML, |_| {}),
            crate::plan::sha256_hex(
                format!(
                    r#"{{"encoding":1,"inputs":[{{"kind":"source","name":"chat","path":"chat.jsonl","sha256":"{c}"}}],"lock_sha256":null,"pipeline":{{"name":"demo","output":{{"rows_per_shard":100}},"seed":42,"sources":[{{"files":["chat.jsonl"],"format":"openai","name":"chat"}}],"template":{{"kwargs":{{"preserve_thinking":false}},"path":"t.jinja"}},"tokenizer":{{"path":"tok.json"}}}},"template":{{"kwargs":{{"preserve_thinking":false}},"sha256":"{a}"}},"tokenizer":{{"sha256":"{b}"}},"tool":{{"name":"chatshards","version":"0.1.0"}}}}"#,
                    a = "a".repeat(64),
                    b = "b".repeat(64),
                    c = "c".repeat(64)
                )
                .as_bytes()
            )
        );
    }

    #[test]
    fn formatting_does_not_change_the_build_id_but_meaning_does() {
        let base = id_of(YAML, |_| {});
        let reformatted = "# a comment\noutput: {rows_per_shard: 100, dir: \"elsewhere\"}\nsources:\n- format: \"openai\"\n  name: chat   # trailing\n  files:\n    - chat.jsonl\ntemplate: {kwargs: {preserve_thinking: false}, path: 't.jinja'}\ntokenizer:\n    path: tok.json\nseed: 42\nname: demo\n";
        assert_eq!(id_of(reformatted, |_| {}), base);

        let mut seen = vec![base.clone()];
        let mut changed = |what: &str, id: String| {
            assert!(!seen.contains(&id), "{what} did not change the build_id");
            seen.push(id);
        };
        changed("seed", id_of(&YAML.replace("seed: 42", "seed: 43"), |_| {}));
        changed(
            "a setting",
            id_of(
                &YAML.replace("rows_per_shard: 100", "rows_per_shard: 99"),
                |_| {},
            ),
        );
        changed(
            "a path",
            id_of(&YAML.replace("[chat.jsonl]", "[chat2.jsonl]"), |_| {}),
        );
        changed(
            "the template kwargs",
            id_of(YAML, |o| {
                o.kwargs
                    .insert("preserve_thinking".into(), Value::Bool(true));
            }),
        );
        changed(
            "the template bytes",
            id_of(YAML, |o| o.template = "d".repeat(64)),
        );
        changed(
            "the tokenizer bytes",
            id_of(YAML, |o| o.tokenizer = "d".repeat(64)),
        );
        changed(
            "a source file's bytes",
            id_of(YAML, |o| o.inputs[0].sha256 = "d".repeat(64)),
        );
        changed(
            "the tool version",
            id_of(YAML, |o| o.version = "0.1.1".into()),
        );
        changed(
            "the lockfile",
            id_of(YAML, |o| o.lock = Some("e".repeat(64))),
        );
    }

    #[test]
    fn dataset_sha256_is_the_hash_of_the_shard_hashes_in_order() {
        let (a, b) = ("1".repeat(64), "2".repeat(64));
        assert_eq!(
            dataset_sha256([a.as_str(), b.as_str()]),
            crate::plan::sha256_hex(format!("{a}{b}").as_bytes())
        );
        assert_ne!(
            dataset_sha256([a.as_str(), b.as_str()]),
            dataset_sha256([b.as_str(), a.as_str()])
        );
    }
}
