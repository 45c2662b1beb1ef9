//! What a person reads, checked whole: `check`'s report (the demo, a pipeline with several
//! config errors, a source that would lose every row), `build`'s summary (default and
//! `--wide`), `stats`, `diff` of two demo builds and `build --help`, as insta snapshots in
//! `tests/it/snapshots/` (each records the command, its exit status, stderr and stdout).
//!
//! The projects live in temporary directories with relative paths only (inputs, tokenizer and
//! template copied in), so the pipelines' bytes, and with them the build ids and hashes shown,
//! are the same on every machine. What still varies is redacted by filters: the temporary
//! directory, the repository's path and timings. Every command that takes `--threads` runs at
//! 1 and 2 threads against the same snapshot. A deliberate change of output: run the tests,
//! then `cargo insta review` (or read the `.snap.new` file beside the snapshot and rename it).

use crate::common::{self, ROOT};
use std::path::Path;

/// The demo pipeline in `dir`: its inputs under `data/`, the Qwen3.6 tokenizer and template
/// under `tpl/`, the output in `out/`.
fn demo_project(dir: &Path) {
    common::copy_demo_inputs(&dir.join("data"));
    std::fs::create_dir_all(dir.join("tpl")).expect("mkdir tpl");
    for (from, to) in [
        (
            "templates/qwen3.6/tokenizer.json.zst",
            "tpl/tokenizer.json.zst",
        ),
        (
            "templates/qwen3.6/chat_template.jinja",
            "tpl/chat_template.jinja",
        ),
        (
            "tests/fixtures/benchmarks/HumanEval.jsonl",
            "data/HumanEval.jsonl",
        ),
    ] {
        std::fs::copy(Path::new(ROOT).join(from), dir.join(to)).expect("copy");
    }
    let yaml = std::fs::read_to_string(Path::new(ROOT).join("pipelines/demo.yaml"))
        .expect("demo pipeline")
        .replace("../tests/fixtures/demo/", "data/")
        .replace("../tests/fixtures/benchmarks/", "data/")
        .replace("../templates/qwen3.6/", "tpl/")
        .replace("dir: ../out/demo", "dir: out");
    assert!(
        !yaml.contains("../"),
        "a path left outside the project:\n{yaml}"
    );
    std::fs::write(dir.join("pipeline.yaml"), yaml).expect("write pipeline");
}

/// A small pipeline `NAME.yaml` in `dir` with the tokenizer and template of `tpl/` and `body`.
fn small_pipeline(dir: &Path, name: &str, body: &str) {
    let yaml = format!(
        "name: test\nseed: 7\ntokenizer:\n  path: tpl/tokenizer.json.zst\ntemplate:\n  path: tpl/chat_template.jinja\n{body}"
    );
    std::fs::write(dir.join(format!("{name}.yaml")), yaml).expect("write pipeline");
}

/// `chatshards ARGS` run in `dir`, as the snapshot shows it: the command line (a `--threads`
/// value as `N`), the exit status, stderr, stdout.
fn cli(dir: &Path, args: &[&str]) -> String {
    let out = common::bin()
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run chatshards");
    let mut shown: Vec<&str> = args.to_vec();
    if let Some(i) = shown.iter().position(|&a| a == "--threads") {
        if i + 1 < shown.len() {
            shown[i + 1] = "N";
        }
    }
    format!(
        "$ chatshards {}\nexit status: {}\n--- stderr\n{}--- stdout\n{}",
        shown.join(" "),
        out.status
            .code()
            .map_or_else(|| "killed".to_owned(), |c| c.to_string()),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout),
    )
}

/// Snapshot settings: files named after the snapshot alone, and what varies from run to run
/// or machine to machine redacted.
fn redactions(dirs: &[&Path]) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_prepend_module_to_snapshot(false);
    s.set_omit_expression(true);
    for dir in dirs {
        for path in [dir.to_path_buf(), dir.canonicalize().expect("canonical")] {
            s.add_filter(&regex::escape(&path.display().to_string()), "[TMP]");
        }
    }
    s.add_filter(&regex::escape(ROOT), "[ROOT]");
    // `done chat: read 155, kept 106, tokens 23975, 0.4s`
    s.add_filter(r"(?m), \d+(\.\d+)?s$", ", [TIME]");
    // `... to `out` in 15.1s (16 rows/s, 0.00 M tokens/s)`
    s.add_filter(r"in \d+(\.\d+)?s \([^)]*/s\)", "in [TIME] ([RATE])");
    s
}

#[test]
fn check_of_the_demo() {
    let tmp = tempfile::tempdir().expect("tempdir");
    demo_project(tmp.path());
    let settings = redactions(&[tmp.path()]);
    for threads in ["1", "2"] {
        let out = cli(
            tmp.path(),
            &["check", "--threads", threads, "pipeline.yaml"],
        );
        settings.bind(|| insta::assert_snapshot!("check_demo", out));
    }
}

/// Every config error at once, each with its line; nothing on stdout.
#[test]
fn check_of_a_pipeline_with_several_config_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    demo_project(tmp.path());
    small_pipeline(
        tmp.path(),
        "mistakes",
        "sources:\n  - name: a\n    files: [missing-a.jsonl]\n    format: openai\n  - name: a\n    files: [data/chat.jsonl]\n    format: openai\n    weight: 2\n  - name: c\n    files: [missing-c.parquet]\n    format: sharegpt\noutput:\n  dir: out\n",
    );
    let settings = redactions(&[tmp.path()]);
    for threads in ["1", "2"] {
        let out = cli(
            tmp.path(),
            &["check", "--threads", threads, "mistakes.yaml"],
        );
        settings.bind(|| insta::assert_snapshot!("check_config_errors", out));
    }
}

/// A source read with the wrong format: the report, then the failure with its reasons, an
/// example row and the fix.
#[test]
fn check_of_a_source_that_would_lose_every_row() {
    let tmp = tempfile::tempdir().expect("tempdir");
    demo_project(tmp.path());
    small_pipeline(
        tmp.path(),
        "wrong_format",
        "sources:\n  - name: alpaca\n    files: [data/alpaca.parquet]\n    format: alpaca\n  - name: chat\n    files: [data/chat.jsonl]\n    format: alpaca\noutput:\n  dir: out\n",
    );
    let settings = redactions(&[tmp.path()]);
    for threads in ["1", "2"] {
        let out = cli(
            tmp.path(),
            &["check", "--threads", threads, "wrong_format.yaml"],
        );
        settings.bind(|| insta::assert_snapshot!("check_loses_every_row", out));
    }
}

/// `build`'s summary, `stats` (default and `--wide`) on its output, and `diff` against the
/// same pipeline with `alpaca`'s `take: 50` made 40 (which the other sources make up for).
#[test]
fn build_stats_and_diff_of_the_demo() {
    for threads in ["1", "2"] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        demo_project(dir);
        let settings = redactions(&[dir]);
        let build = cli(dir, &["build", "--threads", threads, "pipeline.yaml"]);
        settings.bind(|| insta::assert_snapshot!("build_demo", build));
        let stats = cli(dir, &["stats", "out"]);
        settings.bind(|| insta::assert_snapshot!("stats_demo", stats));
        let stats = cli(dir, &["stats", "--wide", "out"]);
        settings.bind(|| insta::assert_snapshot!("stats_demo_wide", stats));

        // The same project with `take: 40`, written to `out-take40`.
        let yaml = std::fs::read_to_string(dir.join("pipeline.yaml")).expect("pipeline");
        assert!(
            yaml.contains("take: 50") && yaml.contains("dir: out\n"),
            "{yaml}"
        );
        let yaml = yaml
            .replace("take: 50", "take: 40")
            .replace("dir: out\n", "dir: out-take40\n");
        std::fs::write(dir.join("take40.yaml"), yaml).expect("write pipeline");
        common::ok(
            common::bin()
                .args(["build", "--quiet", "--threads", threads, "take40.yaml"])
                .current_dir(dir)
                .output()
                .expect("run chatshards"),
        );
        let diff = cli(dir, &["diff", "out", "out-take40"]);
        settings.bind(|| insta::assert_snapshot!("diff_demo_take", diff));
    }
}

#[test]
fn build_wide_summary_of_the_demo() {
    for threads in ["1", "2"] {
        let tmp = tempfile::tempdir().expect("tempdir");
        demo_project(tmp.path());
        let out = cli(
            tmp.path(),
            &["build", "--wide", "--threads", threads, "pipeline.yaml"],
        );
        redactions(&[tmp.path()]).bind(|| insta::assert_snapshot!("build_demo_wide", out));
    }
}

#[test]
fn build_help() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = cli(tmp.path(), &["build", "--help"]);
    redactions(&[tmp.path()]).bind(|| insta::assert_snapshot!("build_help", out));
}
