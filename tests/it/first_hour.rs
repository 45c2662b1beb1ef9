//! A data engineer's first hour (issue 42): no source lost in silence, config errors all at once
//! with "did you mean", tables that fit 80 columns, and `diff` that names settings and matches
//! rows by content.

use crate::common;
use common::{bin, pipeline_with, run, stderr};

use serde_json::Value;
use std::path::{Path, PathBuf};

/// A pipeline in `dir` with the shipped tokenizer and template (short answers count:
/// `min_supervised_tokens: 1`) and `body` appended.
fn pipeline(dir: &Path, body: &str) -> PathBuf {
    pipeline_with(
        dir,
        "name: first-hour\nseed: 7\nmin_supervised_tokens: 1\n",
        "",
        body,
    )
}

/// ShareGPT rows with `user`/`assistant` roles (the defaults are `human`/`gpt`).
fn user_assistant_rows(dir: &Path, n: usize) -> PathBuf {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(
            &serde_json::json!({"conversations": [
                {"from": "user", "value": format!("What is {i} times 3?")},
                {"from": "assistant", "value": format!("{i} times 3 is {}.", 3 * i)},
            ]})
            .to_string(),
        );
        text.push('\n');
    }
    let path = dir.join("ua.jsonl");
    std::fs::write(&path, text).expect("write rows");
    path
}

/// Chats in OpenAI format, one per line: its user text varies with `i`.
fn chat_line(i: usize, edit: &str) -> String {
    serde_json::json!({"messages": [
        {"role": "user", "content": format!("Question {i}{edit}: what is {i} plus {i}?")},
        {"role": "assistant", "content": format!("{i} plus {i} is {}, adding the ones then the tens.", 2 * i)},
    ]})
    .to_string()
}

#[test]
fn a_source_that_keeps_nothing_fails_the_build_naming_the_reason_an_example_and_the_fix() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ua = user_assistant_rows(tmp.path(), 30);
    let chat: String = (0..20).map(|i| chat_line(i, "") + "\n").collect();
    std::fs::write(tmp.path().join("chat.jsonl"), chat).expect("chat");
    let p = pipeline(
        tmp.path(),
        &format!(
            "sources:\n  - name: chat\n    files: [chat.jsonl]\n    format: openai\n  - name: chat_ua\n    files: [{}]\n    format: sharegpt\noutput:\n  dir: out\n",
            ua.display()
        ),
    );
    let out = run(&["build"], &p);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let ua_shown = ua.display().to_string();
    let expected = format!(
        "source `chat_ua` keeps 0 of 30 rows read (0.0%), below its `min_keep` of 1.0%\n    rejected unknown_role: 30 rows; e.g. {ua_shown} row 1: `conversations[0].from` is `user`; expected one of `human`, `gpt`, `system`, `function_call`, `observation`\n      fix: set the role tags the rows use: `tags: {{user_tag: user, assistant_tag: assistant}}`\n"
    );
    assert!(err.contains(&expected), "{err}");
    assert!(
        err.contains("no dataset was written; every reject is in `"),
        "{err}"
    );
    assert!(!tmp.path().join("out/manifest.json").exists());
    // `min_keep: 0` on the source accepts the loss: the build writes `chat` alone.
    let text = std::fs::read_to_string(&p).expect("read");
    std::fs::write(
        &p,
        text.replace(
            "    format: sharegpt\n",
            "    format: sharegpt\n    min_keep: 0\n",
        ),
    )
    .expect("write");
    let out = run(&["build"], &p);
    assert!(out.status.success(), "{}", stderr(&out));

    // `check` predicts it, exits non-zero and prints the failure once.
    std::fs::write(&p, text).expect("write");
    let out = run(&["check"], &p);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.matches("FAIL ").count(), 1, "{err}");
    assert!(
        err.contains("FAIL the build would fail: source `chat_ua` keeps 0 of 30 rows read (0.0%)"),
        "{err}"
    );
    assert!(
        err.contains("fix: set the role tags the rows use: `tags: {user_tag: user, assistant_tag: assistant}`"),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("FAIL"));
}

#[test]
fn rows_of_another_format_get_a_format_hint() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let rows: String = (0..5)
        .map(|i| {
            serde_json::json!({"instruction": format!("Add {i} and 1."), "input": "", "output": format!("{}", i + 1)})
                .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(tmp.path().join("alpaca.jsonl"), rows).expect("rows");
    let p = pipeline(
        tmp.path(),
        "sources:\n  - name: a\n    files: [alpaca.jsonl]\n    format: openai\noutput:\n  dir: out\n",
    );
    let out = run(&["check"], &p);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("      fix: rows have `instruction/input/output`: `format: alpaca`?"),
        "{err}"
    );
}

#[test]
fn every_schema_error_at_once_with_did_you_mean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(
        tmp.path(),
        "max_tokenz: 10\nsources:\n  - name: a\n    files: [a.jsonl]\n    format: openaii\n    weigth: 2\noutput:\n  dir: out\n",
    );
    let out = run(&["check"], &p);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    let shown = p.display().to_string();
    for (line, what) in [
        (8, "unknown field `max_tokenz`"),
        (12, "sources[0].format: unknown variant `openaii`"),
        (13, "sources[0]: unknown field `weigth`"),
    ] {
        assert!(
            err.contains(&format!("{shown}:{line}:")) && err.contains(what),
            "{line} {what}:\n{err}"
        );
    }
    assert!(err.contains("did you mean `max_tokens`?"), "{err}");
    assert!(err.contains("did you mean `openai`?"), "{err}");
    assert!(err.contains("did you mean `weight`?"), "{err}");
}

#[test]
fn a_bad_global_filter_is_reported_once_at_its_own_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(tmp.path().join("a.jsonl"), chat_line(1, "") + "\n").expect("rows");
    std::fs::write(tmp.path().join("b.jsonl"), chat_line(2, "") + "\n").expect("rows");
    let p = pipeline(
        tmp.path(),
        "filters:\n  - regex: {name: bad, exclude: [\"(unclosed\"]}\nsources:\n  - name: a\n    files: [a.jsonl]\n    format: openai\n  - name: b\n    files: [b.jsonl]\n    format: openai\noutput:\n  dir: out\n",
    );
    let out = run(&["check"], &p);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.matches("filter `bad`").count(), 1, "{err}");
    assert!(
        err.contains(&format!("{}:8: filters: filter `bad` (regex)", p.display())),
        "{err}"
    );
}

/// The summary (all of stderr but the progress and note lines) and `stats` fit 80 columns.
#[test]
fn build_and_stats_tables_fit_80_columns_with_the_manifest_names() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = common::project(tmp.path(), "mix: {target: rows, total: 220}");
    let out = run(&["build"], &p);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let table: Vec<&str> = err
        .lines()
        .skip_while(|l| !l.starts_with("source "))
        .take_while(|l| !l.starts_with("mix: "))
        .collect();
    assert_eq!(
        table[0].split_whitespace().collect::<Vec<_>>(),
        [
            "source",
            "read",
            "kept",
            "sampled_out",
            "rows",
            "tokens",
            "supervised_tokens"
        ]
    );
    assert!(table.iter().all(|l| l.chars().count() <= 80), "{err}");
    assert!(
        table.contains(&"dropped rows, by source and reason:"),
        "{err}"
    );
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(tmp.path().join("out/manifest.json")).expect("manifest"),
    )
    .expect("json");
    let curation = &manifest["sources"]["curation"];
    let line = table
        .iter()
        .find(|l| l.starts_with("  curation: "))
        .expect("curation's reasons");
    assert!(
        line.contains(&format!("near_duplicate {}", curation["near_duplicate"])),
        "{line}"
    );
    let out = bin()
        .arg("stats")
        .arg(tmp.path().join("out"))
        .output()
        .expect("stats");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
    let wide = bin()
        .args(["stats", "--wide"])
        .arg(tmp.path().join("out"))
        .output()
        .expect("stats");
    let wide = String::from_utf8_lossy(&wide.stdout);
    assert!(wide.contains(" near_duplicate "), "{wide}");

    // `inspect` by sample_id and by source.
    let inspect = |args: &[&str]| {
        bin()
            .arg("inspect")
            .arg(tmp.path().join("out"))
            .args(args)
            .output()
            .expect("inspect")
    };
    let first = String::from_utf8_lossy(&inspect(&["--row", "7"]).stdout).into_owned();
    let id = first
        .split("sample_id ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("a sample_id")
        .to_owned();
    let by_id = inspect(&["--sample-id", &id]);
    assert!(by_id.status.success(), "{}", stderr(&by_id));
    assert_eq!(String::from_utf8_lossy(&by_id.stdout), first);
    let alpaca = String::from_utf8_lossy(&inspect(&["--source", "alpaca", "--row", "2"]).stdout)
        .into_owned();
    assert!(alpaca.contains("  source alpaca  "), "{alpaca}");
    let nothing = inspect(&["--source", "alpacca"]);
    assert_eq!(
        stderr(&nothing).trim_end(),
        "error: no row of the dataset comes from a source named `alpacca` (`chatshards stats` lists the sources)"
    );
    let past = inspect(&["--source", "alpaca", "--row", "50"]);
    assert!(
        stderr(&past)
            .contains("source `alpaca` has 50 row(s) in the dataset; --row 50 is past its last"),
        "{}",
        stderr(&past)
    );
}

/// 3,000 rows; then line 1,501 deleted, 2 rows edited, 1 appended.
#[test]
fn diff_matches_rows_by_content_and_names_changed_settings() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let lines: Vec<String> = (0..3000).map(|i| chat_line(i, "")).collect();
    let write = |name: &str, lines: &[String]| {
        std::fs::write(tmp.path().join(name), lines.join("\n") + "\n").expect("rows");
    };
    write("a.jsonl", &lines);
    let mut edited = lines.clone();
    edited[100] = chat_line(100, " (edited)");
    edited[2500] = chat_line(2500, " (edited)");
    edited.remove(1500);
    edited.push(chat_line(5000, ""));
    write("b.jsonl", &edited);
    let body = |file: &str, out: &str, min: u32| {
        format!(
            "filters:\n  - assistant_chars: {{name: short, min: {min}}}\nsources:\n  - name: chat\n    files: [{file}]\n    format: openai\noutput:\n  dir: {out}\n  shuffle: false\n"
        )
    };
    let pa = pipeline(tmp.path(), &body("a.jsonl", "out-a", 1));
    assert!(run(&["build"], &pa).status.success());
    let pb = pipeline(tmp.path(), &body("b.jsonl", "out-b", 2));
    assert!(run(&["build"], &pb).status.success());
    let (a, b) = (tmp.path().join("out-a"), tmp.path().join("out-b"));
    let out = bin()
        .args(["diff", "--json"])
        .arg(&a)
        .arg(&b)
        .output()
        .expect("diff");
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    let rows = &report["rows"];
    assert_eq!(
        [&rows["added"], &rows["removed"], &rows["changed"]],
        [&Value::from(1), &Value::from(1), &Value::from(2)],
        "{rows}"
    );
    assert_eq!(rows["examples"]["removed"][0]["sample_id"], "chat:0:1500:0");
    let what: Vec<&str> = report["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .filter_map(|c| c["what"].as_str())
        .collect();
    assert!(what.contains(&"pipeline filters.short.min"), "{what:?}");
    assert!(what.contains(&"pipeline sources.chat.files"), "{what:?}");

    // A shard byte flipped after the build: not byte-identical, and said so.
    let copy = tmp.path().join("copy");
    std::fs::create_dir_all(&copy).expect("mkdir");
    for e in std::fs::read_dir(&a).expect("read") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), copy.join(e.file_name())).expect("copy");
    }
    let shard = std::fs::read_dir(&copy)
        .expect("read")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "arrow"))
        .expect("a shard");
    let mut bytes = std::fs::read(&shard).expect("shard");
    let at = bytes.len() / 2;
    bytes[at] ^= 1;
    std::fs::write(&shard, bytes).expect("write");
    let out = bin().arg("diff").arg(&a).arg(&copy).output().expect("diff");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("byte-identical"), "{text}");
    assert!(text.contains("is not what its manifest records"), "{text}");
}
