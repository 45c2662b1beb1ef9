//! `chatshards check`: the preflight on the demo pipeline, on pipelines with mistakes, and on
//! generated JSON lines files large enough that reading them whole would show.

use crate::common;
use common::{bin, demo_pipeline_body, pipeline, root};

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;

fn check(pipeline: &Path, extra: &[&str]) -> Output {
    bin()
        .arg("check")
        .arg(pipeline)
        .args(extra)
        .output()
        .expect("run chatshards")
}

fn check_json(pipeline: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let out = check(pipeline, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json report")
}

fn source<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no source `{name}` in {report}"))
}

/// One generated chat per line: its user text and answer vary in length with `i`.
fn chat_line(i: u64) -> String {
    let words = 20 + (i * 7919) % 150;
    let answer: Vec<String> = (0..words).map(|w| format!("w{}", (i + w) % 997)).collect();
    serde_json::json!({"messages": [
        {"role": "user", "content": format!("Question number {i}: explain item {}.", i * 31)},
        {"role": "assistant", "content": format!("Answer {i}: {}", answer.join(" "))},
    ]})
    .to_string()
}

/// A JSON lines file of `rows` generated chats; its size.
fn write_chats(path: &Path, rows: u64) -> u64 {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    for i in 0..rows {
        writeln!(w, "{}", chat_line(i)).expect("write");
    }
    w.flush().expect("flush");
    std::fs::metadata(path).expect("size").len()
}

fn chats_pipeline(dir: &Path, file: &Path) -> PathBuf {
    pipeline(
        dir,
        &format!(
            "min_supervised_tokens: 1\nsources:\n  - name: gen\n    files: [{}]\n    format: openai\noutput:\n  dir: out\n",
            file.display()
        ),
    )
}

#[test]
fn demo_sample_of_small_sources_is_the_whole_source_and_matches_the_build() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(
        tmp.path(),
        &format!("{}output:\n  dir: out\n", demo_pipeline_body()),
    );
    let report = check_json(&p, &[]);
    let build = bin().arg("build").arg(&p).output().expect("run chatshards");
    assert!(
        build.status.success(),
        "{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(tmp.path().join("out/manifest.json")).expect("manifest"),
    )
    .expect("json");
    // Nothing was written beside the pipeline but the build's output.
    assert!(!tmp.path().join("out/.spill").exists());
    for name in ["chat", "tools", "alpaca", "curation"] {
        let (s, m) = (source(&report, name), &manifest["sources"][name]);
        let files = s["files"].as_array().expect("files");
        assert!(files.iter().all(|f| f["sampled_by"] == "all"), "{s}");
        assert!(files.iter().all(|f| f["rows_count"] == "exact"), "{s}");
        // What the scan decides (before any selection) is the build's.
        for key in [
            "read",
            "rejected",
            "filtered",
            "deduplicated",
            "near_duplicate",
            "contaminated",
        ] {
            assert_eq!(s["stats"][key], m[key], "{name}: {key}");
        }
        assert_eq!(s["projected"]["rows_read"], m["read"], "{name}");
        assert_eq!(s["projected"]["rows_read_estimated"], false);
        assert_eq!(
            s["stats"]["sampled_out"], 0,
            "{name}: the check selects nothing"
        );
    }
    // `curation` has neither `take` nor `weight`: the build keeps all it has, as the check.
    let (s, m) = (
        source(&report, "curation"),
        &manifest["sources"]["curation"],
    );
    assert_eq!(s["stats"], *m);
    assert_eq!(s["stats"]["kept"], 29);
    let kept_rate = s["rates"]["kept"].as_f64().expect("rate");
    assert!((kept_rate - 29.0 / 43.0).abs() < 1e-12);
    // `chat` and `tools` are sampled-out in the build; before selection the check keeps more.
    let kept = |n: &str| source(&report, n)["stats"]["kept"].as_u64().expect("kept");
    assert_eq!(
        kept("chat"),
        150,
        "155 rows less 5 rejected: {}",
        source(&report, "chat")
    );
    // The mix is projected from those: alpaca's take and curation's 29 first, the other 141
    // shared 3:1 (the build's own numbers).
    let conv = |n: &str| {
        report["mix"]["sources"][n]["conversations"]
            .as_u64()
            .unwrap_or_else(|| panic!("{n} in {}", report["mix"]))
    };
    assert_eq!(conv("chat"), 106);
    assert_eq!(conv("tools"), 35);
    assert_eq!(conv("alpaca"), 50);
    assert_eq!(conv("curation"), 29);
    // Quotas and what is realized of them, in the target's unit (rows), are the build's.
    for n in ["chat", "tools", "alpaca", "curation"] {
        for key in ["quota", "realized"] {
            assert_eq!(
                report["mix"]["sources"][n][key], manifest["mix"]["sources"][n][key],
                "{n}: {key}"
            );
        }
    }
    // Each source's example is a kept row, its mask shown in brackets.
    let e = &source(&report, "chat")["example"];
    assert!(e["sample_id"].as_str().expect("id").starts_with("chat:0:"));
    assert!(e["text"].as_str().expect("text").contains("⟦"), "{e}");
    assert!(e["supervised_tokens"].as_u64().expect("n") >= 32);
}

#[test]
fn the_text_report_names_every_source_and_marks_the_mask() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(
        tmp.path(),
        &format!("{}output:\n  dir: out\n", demo_pipeline_body()),
    );
    let out = check(&p, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    for name in ["chat", "tools", "alpaca", "curation"] {
        assert!(text.contains(&format!("source `{name}`")), "{text}");
    }
    assert!(
        text.contains("projected full build: 43 rows read, 29 kept"),
        "{text}"
    );
    assert!(text.contains("supervised in ⟦…⟧"), "{text}");
    assert!(text.contains("projected mix: 220 rows"), "{text}");
}

#[test]
fn min_keep_fails_naming_the_source_its_rate_and_reasons() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(
        tmp.path(),
        &format!("{}output:\n  dir: out\n", demo_pipeline_body()),
    );
    let out = check(&p, &["--min-keep", "0.99"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("source `curation` keeps 67.4% of its sample (29 of 43 rows), below --min-keep 99.0%; top reasons: filtered language 4, near_duplicate 4, contaminated 3"),
        "{err}"
    );
    // `alpaca` keeps all but one of its rows: below 99% too only if it has under 100.
    assert!(!err.contains("source `tools` keeps 100"), "{err}");
    // The default (0.5) passes.
    assert!(check(&p, &[]).status.success());
}

#[test]
fn a_pipeline_with_several_mistakes_reports_all_of_them_with_lines() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(
        tmp.path(),
        &format!(
            "sources:\n  - name: a\n    files: [missing-a.jsonl]\n    format: openai\n  - name: a\n    files: [{chat}]\n    format: openai\n    weight: 2\n  - name: c\n    files: [missing-c.parquet]\n    format: sharegpt\noutput:\n  dir: out\n",
            chat = root("tests/fixtures/demo/chat.jsonl")
        ),
    );
    let out = check(&p, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    let shown = p.display().to_string();
    // sources[0] starts on line 8 of the file, sources[1] on 11, sources[2] on 15.
    for (line, what) in [
        (8, "sources[0] (`a`): input file"),
        (11, "sources[1]: the name `a` is used twice"),
        (
            11,
            "sources[1] (`a`): `weight` needs a pipeline-level `mix`",
        ),
        (15, "sources[2] (`c`): input file"),
    ] {
        assert!(
            err.contains(&format!("{shown}:{line}: {what}")),
            "{line} {what}:\n{err}"
        );
    }
}

#[test]
fn a_sample_of_a_bigger_file_has_exactly_n_rows_and_the_seed_decides_which() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("chats.jsonl");
    write_chats(&file, 3000);
    let p = chats_pipeline(tmp.path(), &file);
    let a = check_json(&p, &["--sample", "40"]);
    let s = source(&a, "gen");
    assert_eq!(s["stats"]["read"], 40);
    assert_eq!(s["files"][0]["sampled_by"], "records");
    assert_eq!(s["projected"]["rows_read"], 3000);
    assert_eq!(s["projected"]["rows_read_estimated"], false);
    // Same seed, same report; another seed, another sample.
    assert_eq!(a, check_json(&p, &["--sample", "40"]));
    let b = check_json(&p, &["--sample", "40", "--seed", "8"]);
    assert_eq!(source(&b, "gen")["stats"]["read"], 40);
    assert_ne!(s["stats"]["tokens"], source(&b, "gen")["stats"]["tokens"]);
    assert_ne!(
        s["example"]["sample_id"],
        source(&b, "gen")["example"]["sample_id"]
    );
}

#[test]
fn a_large_jsonl_is_sampled_by_offsets_reading_a_bounded_part_of_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("big.jsonl");
    let rows = 400_000;
    let bytes = write_chats(&file, rows);
    assert!(bytes > 200 << 20, "{bytes}");
    let p = chats_pipeline(tmp.path(), &file);
    let a = check_json(&p, &[]);
    let s = source(&a, "gen");
    assert_eq!(s["stats"]["read"], 200, "{s}");
    assert_eq!(s["files"][0]["sampled_by"], "line_starts");
    assert_eq!(s["files"][0]["rows_count"], "estimated");
    assert_eq!(s["projected"]["rows_read_estimated"], true);
    // The estimate from the mean sampled line is close to the true count.
    let estimate = s["projected"]["rows_read"].as_f64().expect("rows");
    assert!(
        (estimate / rows as f64 - 1.0).abs() < 0.1,
        "{estimate} for {rows}"
    );
    // Bounded: a few reads of small buffers per sampled row, whatever the file's size.
    let read = a["bytes_read"].as_u64().expect("bytes_read");
    assert!(read < 20 << 20, "read {read} of {bytes} bytes");
    assert_eq!(a["input_bytes"], bytes);
    // Rows sampled by offset are named by their line's byte offset.
    let id = s["example"]["sample_id"].as_str().expect("id");
    assert!(id.starts_with("gen:0:"), "{id}");
    let b = check_json(&p, &["--seed", "99"]);
    assert_ne!(s["stats"]["tokens"], source(&b, "gen")["stats"]["tokens"]);
    assert_eq!(a, check_json(&p, &[]));
}
