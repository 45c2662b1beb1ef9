//! `plan::compile`: a pipeline file becomes the checked plan the engine runs, with every path
//! resolved and every mistake reported at once.

use super::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A pipeline written to a folder of its own; paths in it may name `{ROOT}`.
fn pipeline(name: &str, yaml: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("chatshards-compile-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let path = dir.join("pipeline.yaml");
    std::fs::write(&path, yaml.replace("{ROOT}", ROOT)).expect("write pipeline");
    path
}

const HEAD: &str = "name: t
output: {dir: out}
tokenizer: {path: '{ROOT}/templates/qwen3.6/tokenizer.json.zst'}
template: {path: '{ROOT}/templates/qwen3.6/chat_template.jinja'}
";

#[test]
fn the_demo_compiles_to_its_plan() {
    let path = Path::new(ROOT).join("pipelines/demo.yaml");
    let plan = compile(&path, HubAccess::Auto).expect("the demo compiles");
    assert_eq!(plan.name, "chatshards-demo");
    assert_eq!(plan.seed, 42);
    assert_eq!(
        plan.template.sha256,
        "e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259"
    );
    assert_eq!(
        plan.template.path,
        Some(Path::new(ROOT).join("pipelines/../templates/qwen3.6/chat_template.jinja"))
    );
    assert_eq!(
        plan.pipeline_sha256,
        sha256_hex(&std::fs::read(&path).expect("read"))
    );
    assert_eq!(plan.max_tokens, 8192);
    assert_eq!(plan.min_supervised_tokens, 32);
    type Source<'a> = (&'a str, Option<u64>, Option<f64>, Vec<String>, &'a [String]);
    let sources: Vec<Source> = plan
        .sources
        .iter()
        .map(|s| {
            (
                s.name.as_str(),
                s.take,
                s.weight,
                s.filters.names(),
                s.display_files.as_slice(),
            )
        })
        .collect();
    let files = |f: &str| vec![format!("../tests/fixtures/demo/{f}")];
    assert_eq!(
        sources,
        [
            (
                "chat",
                None,
                Some(3.0),
                vec!["refusals".to_owned()],
                files("chat.jsonl").as_slice()
            ),
            (
                "tools",
                None,
                Some(1.0),
                vec!["refusals".to_owned()],
                files("tools.json").as_slice()
            ),
            (
                "alpaca",
                Some(50),
                None,
                vec!["refusals".to_owned()],
                files("alpaca.parquet").as_slice()
            ),
            (
                "curation",
                None,
                None,
                vec![
                    "refusals".to_owned(),
                    "language".to_owned(),
                    "repetition".to_owned()
                ],
                files("curation.jsonl").as_slice()
            ),
        ]
    );
    assert_eq!(plan.sources[0].selection_names, ["chat.jsonl"]);
    let mix = plan.mix.as_ref().expect("mix");
    assert_eq!((mix.target.as_str(), mix.total), ("rows", 220));
    let decontaminate = plan.decontaminate.as_ref().expect("decontaminate");
    assert_eq!(
        decontaminate.display_files,
        [["../tests/fixtures/benchmarks/HumanEval.jsonl"]]
    );
}

/// The errors of a pipeline that compile must refuse.
fn refused(name: &str, yaml: &str) -> (PathBuf, Vec<String>) {
    let path = pipeline(name, yaml);
    match compile(&path, HubAccess::Auto) {
        Err(PlanError::Invalid(at, errors)) => {
            assert_eq!(at, path);
            (path, errors)
        }
        other => panic!(
            "not refused as invalid: {:?}",
            other.err().map(|e| e.to_string())
        ),
    }
}

#[test]
fn every_mistake_is_reported_at_once_with_its_source() {
    let yaml = "name: t
output: {dir: out}
tokenizer: {path: '{ROOT}/templates/qwen3.6/tokenizer.json.zst', verify_percent: 150}
template: {path: '{ROOT}/templates/qwen3.6/chat_template.jinja'}
sources:
  - {name: chat, files: ['{ROOT}/tests/fixtures/demo/chat.jsonl'], format: openai, weight: 2}
  - {name: chat, files: ['{ROOT}/tests/fixtures/demo/chat.jsonl'], format: openai}
  - {name: 'a:b', files: ['{ROOT}/tests/fixtures/demo/chat.jsonl'], format: openai, min_keep: 2}
";
    let (path, errors) = refused("mistakes", yaml);
    // Each at the line of the setting it is about.
    let at = |line: usize, message: &str| format!("{}:{line}: {message}", path.display());
    assert_eq!(
        errors,
        [
            at(3, "`tokenizer.verify_percent` must be between 0 and 100"),
            at(6, "sources[0] (`chat`): `weight` needs a pipeline-level `mix` (e.g. `mix: {target: rows, total: 100000}`)"),
            at(7, "sources[1]: the name `chat` is used twice"),
            at(8, "sources[2]: name `a:b` must be non-empty and free of `:`, `/` and newlines"),
            at(8, "sources[2] (`a:b`): `min_keep` must be a share between 0 and 1, not 2"),
        ]
    );
}

#[test]
fn a_template_that_is_not_the_pinned_one_is_refused() {
    let yaml = HEAD.replace("chat_template.jinja'}", "chat_template.jinja', sha256: 00}")
        + "sources:
  - {name: chat, files: ['{ROOT}/tests/fixtures/demo/chat.jsonl'], format: openai}
";
    let (path, errors) = refused("pinned", &yaml);
    assert_eq!(
        errors,
        [format!(
            "{}:4: template `{ROOT}/templates/qwen3.6/chat_template.jinja` has sha256 \
             e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259, but the pipeline \
             expects 00",
            path.display()
        )]
    );
}

#[test]
fn an_empty_source_list_is_refused() {
    let (path, errors) = refused("empty", &format!("{HEAD}sources: []\n"));
    assert_eq!(
        errors,
        [format!(
            "{}:5: `sources` is empty: name at least one source",
            path.display()
        )]
    );
}

#[test]
fn flow_style_sources_are_located_at_their_items() {
    let (path, errors) = refused(
        "flow",
        &format!(
            "{HEAD}sources: [{{name: chat, files: ['{{ROOT}}/tests/fixtures/demo/chat.jsonl'], format: openai, min_keep: 2}},
  {{name: chat, files: ['{{ROOT}}/tests/fixtures/demo/chat.jsonl'], format: openai, weight: 2}}]
"
        ),
    );
    let at = |line: usize, message: &str| format!("{}:{line}: {message}", path.display());
    assert_eq!(
        errors,
        [
            at(5, "sources[0] (`chat`): `min_keep` must be a share between 0 and 1, not 2"),
            at(6, "sources[1]: the name `chat` is used twice"),
            at(6, "sources[1] (`chat`): `weight` needs a pipeline-level `mix` (e.g. `mix: {target: rows, total: 100000}`)"),
        ]
    );
}

#[test]
fn filter_errors_are_located_at_their_own_filters_key() {
    let (path, errors) = refused(
        "filters",
        &format!(
            "{HEAD}sources:
  - {{name: a, files: ['{{ROOT}}/tests/fixtures/demo/chat.jsonl'], format: openai}}
  - name: b
    files: ['{{ROOT}}/tests/fixtures/demo/chat.jsonl']
    format: openai
  - name: c
    files: ['{{ROOT}}/tests/fixtures/demo/chat.jsonl']
    format: openai
    filters:
      - turns: {{min: 2}}
      - regex: {{name: bad, exclude: ['(unclosed']}}
near_dup: {{sources: [a, nobody]}}
filters:
  - regex: {{name: global_bad, include: ['[']}}
"
        ),
    );
    let shown = path.display();
    let expected = [
        format!("{shown}:17: filters: filter `global_bad` (regex): pattern `[`: "),
        format!(
            "{shown}:13: sources[2] (`c`): filters: filter `bad` (regex): pattern `(unclosed`: "
        ),
        format!("{shown}:16: near_dup.sources: `nobody` is not the name of a source"),
    ];
    assert_eq!(errors.len(), expected.len(), "{errors:#?}");
    for (error, prefix) in errors.iter().zip(&expected) {
        assert!(
            error.starts_with(prefix.as_str()),
            "{error}\nnot at {prefix}"
        );
    }
}
