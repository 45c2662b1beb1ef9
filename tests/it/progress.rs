//! Build progress where stderr is not a terminal (CI, logs): periodic plain lines with a
//! percent and ETA, one line per source when it is done, and `--quiet`.

use crate::common;
use common::root;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A pipeline over a generated JSON lines source of `rows` distinct chats and the demo's
/// Parquet source, written into `dir`.
fn pipeline(dir: &Path, rows: usize) -> PathBuf {
    let mut jsonl = String::new();
    for i in 0..rows {
        jsonl.push_str(&format!(
            "{{\"messages\": [{{\"role\": \"user\", \"content\": \"What is {i} plus {i}? Explain the steps.\"}}, {{\"role\": \"assistant\", \"content\": \"{i} plus {i} is {}: add the ones, then carry the tens.\"}}]}}\n",
            2 * i
        ));
    }
    let data = dir.join("generated.jsonl");
    std::fs::write(&data, jsonl).expect("write input");
    let yaml = format!(
        "name: progress\nseed: 7\ntokenizer:\n  path: {tok}\ntemplate:\n  path: {tpl}\nsources:\n  - name: generated\n    files: [{data}]\n    format: openai\n  - name: alpaca\n    files: [{alpaca}]\n    format: alpaca\n    take: 50\noutput:\n  dir: out\n",
        tok = root("templates/qwen3.6/tokenizer.json.zst"),
        tpl = root("templates/qwen3.6/chat_template.jinja"),
        data = data.display(),
        alpaca = root("tests/fixtures/demo/alpaca.parquet"),
    );
    let path = dir.join("pipeline.yaml");
    std::fs::write(&path, yaml).expect("write pipeline");
    path
}

/// Runs `chatshards ARGS` with stderr a pipe (not a terminal).
fn run(args: &[&str], pipeline: &Path, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_chatshards"));
    c.env_remove("CHATSHARDS_NO_PROGRESS")
        .env_remove("CHATSHARDS_PROGRESS_INTERVAL");
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(args).arg(pipeline).output().expect("run chatshards")
}

fn manifest(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("out/manifest.json")).expect("manifest"))
        .expect("json")
}

/// `progress: P% PHASE SOURCE: N rows, R rows/s, eta E` as (P, phase, source, N, E).
fn progress_line(line: &str) -> Option<(u64, String, String, u64, String)> {
    let rest = line.strip_prefix("progress: ")?;
    let (percent, rest) = rest.split_once("% ")?;
    let (phase, rest) = rest.split_once(' ')?;
    let (source, rest) = rest.split_once(": ")?;
    let (rows, rest) = rest.split_once(" rows, ")?;
    let (rate, eta) = rest.split_once(" rows/s, eta ")?;
    rate.parse::<u64>().ok()?;
    Some((
        percent.parse().ok()?,
        phase.to_owned(),
        source.to_owned(),
        rows.parse().ok()?,
        eta.to_owned(),
    ))
}

fn is_duration(eta: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(s) = eta.strip_suffix('s') {
        return match s.split_once('m') {
            Some((m, s)) => digits(m) && s.len() == 2 && digits(s),
            None => digits(s),
        };
    }
    eta.strip_suffix('m')
        .and_then(|s| s.split_once('h'))
        .is_some_and(|(h, m)| digits(h) && m.len() == 2 && digits(m))
}

/// Builds `p` on 2 threads with a progress line every 0.1 s instead of every 5 s (so that a
/// build of about a second shows several); its stderr.
fn logged_build(p: &Path) -> String {
    let out = run(
        &["build", "--threads", "2"],
        p,
        &[("CHATSHARDS_PROGRESS_INTERVAL", "0.1")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

#[test]
fn a_log_gets_periodic_lines_with_percent_and_eta_and_a_line_per_source() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let rows = 20_000;
    let p = pipeline(tmp.path(), rows);
    let stderr = logged_build(&p);
    assert!(
        !stderr.contains('\r') && !stderr.contains('\u{1b}'),
        "no bar: {stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    let progress: Vec<_> = lines.iter().filter_map(|l| progress_line(l)).collect();
    assert_eq!(
        progress.len(),
        lines.iter().filter(|l| l.starts_with("progress: ")).count(),
        "every progress line has the format: {stderr}"
    );
    assert!(!progress.is_empty(), "{stderr}");
    for (percent, phase, source, n, eta) in &progress {
        assert!(*percent <= 100, "{stderr}");
        // The passes over a source, or the shard phase (`write shards`).
        assert!(
            (["scan", "work"].contains(&phase.as_str())
                && ["generated", "alpaca"].contains(&source.as_str()))
                || (phase == "write" && source == "shards"),
            "{stderr}"
        );
        assert!(*n <= rows as u64 + 60, "{stderr}");
        assert!(eta == "?" || is_duration(eta), "{eta}: {stderr}");
    }
    // One percent for the whole build: it never goes back.
    assert!(
        progress.windows(2).all(|w| w[0].0 <= w[1].0),
        "the percent went back: {stderr}"
    );
    assert!(
        progress.iter().any(|p| is_duration(&p.4)),
        "an ETA once rates are measured: {stderr}"
    );
    // The per-source lines, exactly (seconds vary), in source order, before the summary.
    let m = manifest(tmp.path());
    let done: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("done "))
        .collect();
    assert_eq!(done.len(), 2, "{stderr}");
    for (line, (name, read)) in done
        .iter()
        .zip([("generated", rows as u64), ("alpaca", 60)])
    {
        let tokens = m["sources"][name]["tokens"].as_u64().expect("tokens");
        let kept = m["sources"][name]["kept"].as_u64().expect("kept");
        let prefix = format!("done {name}: read {read}, kept {kept}, tokens {tokens}, ");
        let secs = line
            .strip_prefix(&prefix)
            .and_then(|s| s.strip_suffix('s'))
            .unwrap_or_else(|| panic!("`{line}` starts with `{prefix}`"));
        let secs: f64 = secs.parse().expect("seconds");
        assert!(secs > 0.0 && secs < 600.0, "{line}");
        assert!(tokens > 0, "{line}");
    }
    assert_eq!(m["sources"]["generated"]["read"], rows as u64);
    let last_done = lines
        .iter()
        .rposition(|l| l.starts_with("done "))
        .expect("done");
    let first_progress = lines
        .iter()
        .position(|l| l.starts_with("progress: "))
        .expect("progress");
    assert!(first_progress < last_done, "{stderr}");
    assert!(
        lines[last_done + 1..]
            .iter()
            .all(|l| !l.starts_with("progress: ") || l.contains(" write shards: ")),
        "no progress after the sources are done but the shard phase's: {stderr}"
    );
}

#[test]
fn a_build_with_nothing_decided_across_rows_shows_one_pass_per_source() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(tmp.path(), 20_000);
    let yaml = std::fs::read_to_string(&p).expect("pipeline");
    // Without the `take` and the default dedup.
    let yaml = yaml
        .replace("    take: 50\n", "")
        .replace("sources:", "dedup: false\nsources:");
    std::fs::write(&p, yaml).expect("pipeline");
    let stderr = logged_build(&p);
    let progress: Vec<_> = stderr.lines().filter_map(progress_line).collect();
    assert!(
        progress
            .iter()
            .any(|p| p.1 == "build" && p.2 == "generated"),
        "{stderr}"
    );
    for (_, phase, source, _, _) in &progress {
        assert!(
            (phase == "build" && ["generated", "alpaca"].contains(&source.as_str()))
                || (phase == "write" && source == "shards"),
            "{stderr}"
        );
    }
    assert!(
        progress.windows(2).all(|w| w[0].0 <= w[1].0),
        "the percent went back: {stderr}"
    );
    assert_eq!(manifest(tmp.path())["sources"]["alpaca"]["read"], 60);
}

#[test]
fn quiet_prints_nothing_for_a_successful_build() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(tmp.path(), 2_000);
    for args in [&["--quiet", "build"][..], &["build", "-q"][..]] {
        let _ = std::fs::remove_dir_all(tmp.path().join("out"));
        let out = run(args, &p, &[("CHATSHARDS_PROGRESS_INTERVAL", "0.01")]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{args:?}");
        let m = manifest(tmp.path());
        assert_eq!(m["sources"]["generated"]["read"], 2_000);
        assert_eq!(m["sources"]["alpaca"]["kept"], 50);
    }
    // Errors are still printed.
    std::fs::remove_file(tmp.path().join("generated.jsonl")).expect("rm");
    let _ = std::fs::remove_dir_all(tmp.path().join("out"));
    let out = run(&["--quiet", "build"], &p, &[]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("generated.jsonl"), "{stderr}");
}

#[test]
fn a_bad_progress_interval_is_an_error_naming_the_variable() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(tmp.path(), 10);
    for bad in ["0", "-1", "soon", "NaN"] {
        let out = run(&["build"], &p, &[("CHATSHARDS_PROGRESS_INTERVAL", bad)]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.ends_with(&format!(
                "error: CHATSHARDS_PROGRESS_INTERVAL must be a number of seconds above 0, not `{bad}`\n"
            )),
            "{stderr}"
        );
        assert!(!tmp.path().join("out").exists(), "{bad}");
    }
}
