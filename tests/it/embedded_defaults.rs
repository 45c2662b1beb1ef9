//! A pipeline without `tokenizer:` or `template:` uses the Qwen3.6 files built into the binary:
//! the same shards as with their paths, the manifest and lockfile saying which was used, and
//! the README's first pipeline builds as written.

use crate::common;
use common::{bin, project, root, rows, stderr, ROOT};

use serde_json::Value;
use std::path::Path;

const TOKENIZER_SHA256: &str = "a9ce7851681be0ec29081c64c3f42a4ab6e5442065ebe0caf385ec51edd41e67";
const TEMPLATE_SHA256: &str = "e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259";

fn manifest(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("manifest.json")).expect("manifest");
    serde_json::from_str(&text).expect("manifest JSON")
}

fn ok(args: &[&str], pipeline: &Path) -> String {
    let out = bin().args(args).arg(pipeline).output().expect("run");
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stderr(&out)
}

/// The demo pipeline with its `tokenizer:` and `template:` sections removed.
fn without_paths(yaml: &str) -> String {
    let mut kept = Vec::new();
    let mut skipping = false;
    for line in yaml.lines() {
        if line.starts_with("tokenizer:") || line.starts_with("template:") {
            skipping = true;
            continue;
        }
        if skipping && line.starts_with("  ") {
            continue;
        }
        skipping = false;
        kept.push(line);
    }
    kept.join("\n") + "\n"
}

#[test]
fn the_built_in_files_give_the_same_shards_as_their_paths() {
    let given = tempfile::tempdir().expect("tempdir");
    let pipeline = project(given.path(), "mix: {target: rows, total: 220}");
    ok(&["build"], &pipeline);

    let builtin = tempfile::tempdir().expect("tempdir");
    let other = project(builtin.path(), "mix: {target: rows, total: 220}");
    let yaml = without_paths(&std::fs::read_to_string(&other).expect("pipeline"));
    assert!(!yaml.contains("tokenizer") && !yaml.contains("chat_template"));
    std::fs::write(&other, yaml).expect("write");
    ok(&["check"], &other);
    ok(&["build"], &other);

    let (a, b) = (given.path().join("out"), builtin.path().join("out"));
    let shards = rows(&a);
    assert_eq!(shards.len(), 243); // 220 conversations, `expand`ed
    assert_eq!(shards, rows(&b));
    for i in 0..3 {
        let shard = format!("data-0000{i}-of-00003.arrow");
        assert_eq!(
            std::fs::read(a.join(&shard)).expect("shard"),
            std::fs::read(b.join(&shard)).expect("shard"),
            "{shard}"
        );
    }
    let (ma, mb) = (manifest(&a), manifest(&b));
    assert_eq!(ma["dataset_sha256"], mb["dataset_sha256"]);
    // The identity covers the same bytes; only the pipeline text differs.
    assert_ne!(ma["build_id"], mb["build_id"]);
    for m in [&ma, &mb] {
        assert_eq!(m["inputs"]["tokenizer_sha256"], TOKENIZER_SHA256);
        assert_eq!(m["inputs"]["template_sha256"], TEMPLATE_SHA256);
    }
    // Which was used: the paths leave no `tokenizer`/`template` entry, the built-in ones do.
    assert!(ma["inputs"].get("tokenizer").is_none() && ma["inputs"].get("template").is_none());
    assert_eq!(
        mb["inputs"]["tokenizer"],
        serde_json::json!({"embedded": "qwen3.6", "sha256": TOKENIZER_SHA256})
    );
    assert_eq!(
        mb["inputs"]["template"],
        serde_json::json!({"embedded": "qwen3.6", "sha256": TEMPLATE_SHA256})
    );
    let out = bin()
        .args(["verify", "--rebuild"])
        .arg(&b)
        .output()
        .expect("verify");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("byte-identical"), "{}", stderr(&out));
}

#[test]
fn the_lockfile_pins_the_built_in_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pipeline = project(dir.path(), "mix: {target: rows, total: 80}");
    let yaml = without_paths(&std::fs::read_to_string(&pipeline).expect("pipeline"));
    std::fs::write(&pipeline, &yaml).expect("write");
    ok(&["lock"], &pipeline);
    let lock = std::fs::read_to_string(dir.path().join("pipeline.lock")).expect("lockfile");
    assert!(
        lock.ends_with(&format!(
            "embedded:\n  - input: \"template\"\n    name: \"qwen3.6\"\n    sha256: \"{TEMPLATE_SHA256}\"\n  - input: \"tokenizer\"\n    name: \"qwen3.6\"\n    sha256: \"{TOKENIZER_SHA256}\"\n"
        )),
        "{lock}"
    );
    ok(&["lock", "--check"], &pipeline);
    ok(&["build", "--locked"], &pipeline);

    // Giving the tokenizer's path now: the lockfile no longer says what is used.
    let tokenizer = root("templates/qwen3.6/tokenizer.json.zst");
    std::fs::write(
        &pipeline,
        format!("{yaml}tokenizer: {{path: {tokenizer}}}\n"),
    )
    .expect("write");
    for args in [&["lock", "--check"][..], &["build", "--locked"]] {
        let out = bin().args(args).arg(&pipeline).output().expect("run");
        assert!(!out.status.success(), "{args:?}");
        assert!(
            stderr(&out).contains(&format!(
                "tokenizer: locked built-in `qwen3.6` (sha256 {TOKENIZER_SHA256}), now none"
            )),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn render_without_paths_uses_the_built_in_files() {
    let line = r#"{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}"#;
    let render = |args: &[String]| {
        use std::io::Write;
        let mut child = bin()
            .arg("render")
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("render");
        let mut stdin = child.stdin.take().expect("stdin");
        writeln!(stdin, "{line}").expect("write");
        drop(stdin);
        let out = child.wait_with_output().expect("render");
        assert!(out.status.success());
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let with_paths = render(&[
        "--template".into(),
        root("templates/qwen3.6/chat_template.jinja"),
        "--tokenizer".into(),
        root("templates/qwen3.6/tokenizer.json.zst"),
    ]);
    let builtin = render(&[]);
    assert_eq!(builtin, with_paths);
    let row: Value = serde_json::from_str(builtin.trim()).expect("JSON");
    assert_eq!(
        row["text"],
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello<|im_end|>\n"
    );
}

/// The README's "Your first pipeline", as written: at most 15 lines, no tokenizer or template,
/// and `check` and `build` succeed with it saved in the repository.
#[test]
fn the_readme_first_pipeline_builds_as_written() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).expect("README");
    let section = readme
        .split("\n## Your first pipeline\n")
        .nth(1)
        .expect("the section");
    let yaml = section
        .split("```yaml\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("a YAML block");
    assert!(yaml.lines().count() <= 15, "{yaml}");
    assert!(
        !yaml.contains("tokenizer") && !yaml.contains("template"),
        "{yaml}"
    );
    // Saved as `first.yaml` in the repository: the same relative paths from a copy of it.
    let dir = tempfile::tempdir().expect("tempdir");
    common::copy_demo_inputs(&dir.path().join("tests/fixtures/demo"));
    let pipeline = dir.path().join("first.yaml");
    std::fs::write(&pipeline, yaml).expect("write");
    ok(&["check"], &pipeline);
    let summary = ok(&["build"], &pipeline);
    assert!(summary.contains("wrote "), "{summary}");
    let m = manifest(&dir.path().join("out/first"));
    assert_eq!(m["inputs"]["tokenizer"]["embedded"], "qwen3.6");
    assert!(!rows(&dir.path().join("out/first")).is_empty());
}
