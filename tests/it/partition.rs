//! Partitioned builds: N parts (`build --part I/N`) merged (`merge --parts N`) are byte for byte
//! the single build, for N = 1, 2, 3 and 7, on the demo and on a generated multi-source
//! pipeline (duplicates across parts, blank and bad lines, near-duplicates, `take`, a weighted
//! mix); a rerun part writes the same bytes; a merge refuses missing, misplaced, stale and damaged parts.

use crate::common;
use common::{bin, project, snapshot, stderr};

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn run(c: &mut Command) -> String {
    let out = c.output().expect("run chatshards");
    assert!(out.status.success(), "{c:?} failed:\n{}", stderr(&out));
    stderr(&out)
}

fn part(pipeline: &Path, i: usize, n: usize) -> Command {
    let mut c = bin();
    c.args([
        "-q",
        "build",
        "--threads",
        "2",
        "--part",
        &format!("{i}/{n}"),
    ])
    .arg(pipeline);
    c
}

fn merge(pipeline: &Path, n: usize) -> Command {
    let mut c = bin();
    c.args(["-q", "merge", "--threads", "2", "--parts", &n.to_string()])
        .arg(pipeline);
    c
}

/// The single build's output, then for each N: all parts, the merge, the same files.
fn assert_partitions_match(pipeline: &Path, counts: &[usize]) {
    let dir = pipeline.parent().expect("dir");
    let out = dir.join("out");
    run(bin().args(["-q", "build", "--threads", "2"]).arg(pipeline));
    let single = snapshot(&out);
    std::fs::remove_dir_all(&out).expect("rm out");
    for &n in counts {
        for i in 0..n {
            run(&mut part(pipeline, i, n));
        }
        run(&mut merge(pipeline, n));
        let merged = snapshot(&out);
        assert_eq!(
            merged.keys().collect::<Vec<_>>(),
            single.keys().collect::<Vec<_>>(),
            "N = {n}: files"
        );
        for (name, bytes) in &single {
            assert!(&merged[name] == bytes, "N = {n}: `{name}` differs");
        }
        std::fs::remove_dir_all(&out).expect("rm out");
    }
}

#[test]
fn the_demo_in_parts_merges_to_the_single_build() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = project(dir.path(), "mix: {target: rows, total: 220}");
    assert_partitions_match(&p, &[1, 2, 3, 7]);
}

/// Two JSON lines sources: chats whose words come from the row number, with exact duplicates
/// of early rows late in the file (so in another part), near-duplicates, blank lines, a line
/// that is not JSON, a row without an assistant turn, and CRLF line ends in one file.
fn generated(dir: &Path) -> PathBuf {
    // Words drawn by a hash of (row, position) from 4,000: distinct rows share few shingles.
    let text = |n: usize, len: usize| -> String {
        (0..len)
            .map(|k| {
                let mut h = (n as u64) << 20 | k as u64;
                h = h.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                format!("w{}", (h ^ (h >> 29)) % 4000)
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let chat = |user: &str, assistant: &str| {
        serde_json::json!({"messages": [
            {"role": "user", "content": user},
            {"role": "assistant", "content": assistant},
        ]})
        .to_string()
    };
    for (name, base, rows, eol) in [("a", 0, 700usize, "\n"), ("b", 100_000, 400, "\r\n")] {
        let mut s = String::new();
        for n in 0..rows {
            let line = match n {
                _ if n % 97 == 13 => String::new(),
                _ if n % 151 == 7 => "{not json".to_owned(),
                _ if n % 89 == 5 => serde_json::json!({"messages": [
                    {"role": "user", "content": "no answer"}]})
                .to_string(),
                // Exact duplicates of rows near the start.
                _ if n % 50 == 49 => chat(
                    &format!("{name} question {} {}", n % 40, text(base + n % 40, 30)),
                    &text(base + n % 40 + 1, 60),
                ),
                // Near-duplicates: the same long answer with one word changed.
                _ if n % 60 == 30 => chat(
                    &format!("{name} near {n}"),
                    &format!("{} changed", text(base + 3, 200)),
                ),
                _ => chat(
                    &format!("{name} question {n} {}", text(base + n, 30)),
                    &text(base + n + 1, 60),
                ),
            };
            write!(s, "{line}{eol}").expect("write");
        }
        std::fs::write(dir.join(format!("{name}.jsonl")), s).expect("data");
    }
    // A JSON array (read whole by one part), some of its rows duplicates of `a`'s.
    let c: Vec<serde_json::Value> = (0..300)
        .map(|n| {
            let (user, assistant) = match n % 10 {
                0 => (format!("a question {n} {}", text(n, 30)), text(n + 1, 60)),
                _ => (
                    format!("c question {n} {}", text(200_000 + n, 25)),
                    text(200_001 + n, 50),
                ),
            };
            serde_json::from_str(&chat(&user, &assistant)).expect("json")
        })
        .collect();
    std::fs::write(dir.join("c.json"), serde_json::to_string(&c).expect("json")).expect("c");
    let yaml = format!(
        "name: generated\nseed: 7\ntokenizer:\n  path: {root}/templates/qwen3.6/tokenizer.json.zst\n\
         template:\n  path: {root}/templates/qwen3.6/chat_template.jinja\n\
         min_supervised_tokens: 1\ndedup: true\nnear_dup: {{scope: assistant}}\n\
         mix: {{target: tokens, total: 150000}}\n\
         sources:\n  - name: a\n    files: [a.jsonl]\n    format: openai\n    weight: 2\n\
         \x20 - name: b\n    files: [b.jsonl]\n    format: openai\n    weight: 1\n\
         \x20 - name: c\n    files: [c.json]\n    format: openai\n    take: 150\n\
         output:\n  dir: out\n  rows_per_shard: 64\n",
        root = common::ROOT
    );
    let p = dir.join("pipeline.yaml");
    std::fs::write(&p, yaml).expect("pipeline");
    p
}

#[test]
fn a_generated_multi_source_pipeline_in_parts_merges_to_the_single_build() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = generated(dir.path());
    assert_partitions_match(&p, &[1, 2, 3, 7]);
    // The build did curate across parts: duplicates and near-duplicates were found.
    run(bin().args(["-q", "build"]).arg(&p));
    let manifest = std::fs::read_to_string(dir.path().join("out/manifest.json")).expect("manifest");
    let m: serde_json::Value = serde_json::from_str(&manifest).expect("json");
    let a = &m["sources"]["a"];
    assert!(a["deduplicated"].as_u64().unwrap_or(0) >= 10, "{a}");
    assert!(a["near_duplicate"].as_u64().unwrap_or(0) >= 5, "{a}");
    for s in ["a", "b", "c"] {
        assert!(
            m["sources"][s]["kept"].as_u64().unwrap_or(0) > 0,
            "{s}: {}",
            m["sources"][s]
        );
    }
}

#[test]
fn a_rerun_part_writes_the_same_bytes_and_a_merge_refuses_bad_parts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = generated(dir.path());
    let parts = dir.path().join("out.parts");
    let file = |i: usize| parts.join(format!("part-{i:05}-of-00003.bin"));
    for i in 0..3 {
        run(&mut part(&p, i, 3));
    }
    let first = std::fs::read(file(1)).expect("part 1");
    // The scheduler's index: Slurm's, else Kubernetes'.
    let mut again = bin();
    again
        .args(["-q", "build", "--parts", "3"])
        .arg(&p)
        .env("SLURM_ARRAY_TASK_ID", "1");
    run(&mut again);
    assert!(
        std::fs::read(file(1)).expect("part 1") == first,
        "rerun differs"
    );
    let mut k8s = bin();
    k8s.args(["-q", "build", "--parts", "3"])
        .arg(&p)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env("JOB_COMPLETION_INDEX", "1");
    run(&mut k8s);
    assert!(
        std::fs::read(file(1)).expect("part 1") == first,
        "rerun differs"
    );

    let refused = |expected: &[&str]| {
        let out = merge(&p, 3).output().expect("merge");
        assert!(!out.status.success());
        let err = stderr(&out);
        for e in expected {
            assert!(err.contains(e), "`{e}` not in: {err}");
        }
        assert!(
            !dir.path().join("out").exists(),
            "a refused merge wrote its output"
        );
    };
    // Missing.
    std::fs::rename(file(2), parts.join("aside")).expect("mv");
    refused(&[
        "part 2 of 3 is missing",
        "part-00002-of-00003.bin",
        "--part 2/3",
    ]);
    // Misplaced: part 1's file under part 2's name.
    std::fs::copy(file(1), file(2)).expect("cp");
    refused(&["holds part 1 of 3, not part 2 of 3"]);
    std::fs::rename(parts.join("aside"), file(2)).expect("mv");
    // Stale: the pipeline changed after part 0 was built.
    let yaml = std::fs::read_to_string(&p).expect("yaml");
    std::fs::write(&p, yaml.replace("seed: 7", "seed: 8")).expect("edit");
    refused(&[
        "part-00000-of-00003.bin",
        "other inputs or settings",
        "the pipeline's settings",
    ]);
    std::fs::write(&p, yaml).expect("restore");
    // Stale: an input rewritten after the parts were built, with the same size (a part keeps
    // sizes and times, so the merge compares those without hashing the inputs first).
    let input = dir.path().join("b.jsonl");
    let held = std::fs::read(&input).expect("b.jsonl");
    let mut edited = held.clone();
    edited[2] = if held[2] == b'x' { b'y' } else { b'x' };
    let built = std::fs::metadata(&input)
        .and_then(|m| m.modified())
        .expect("mtime");
    let rewrite = |bytes: &[u8], at: std::time::SystemTime| {
        std::fs::write(&input, bytes).expect("rewrite");
        std::fs::File::options()
            .write(true)
            .open(&input)
            .and_then(|f| f.set_modified(at))
            .expect("touch");
    };
    rewrite(&edited, built + std::time::Duration::from_secs(5));
    refused(&["input `b.jsonl` (modified since)"]);
    rewrite(&held, built);
    // Damaged: one flipped bit in the last byte of part 1's first row record (frame 1, after
    // the header frame: each frame is a 4-byte length, an 8-byte checksum, the record).
    let good = std::fs::read(file(1)).expect("part 1");
    let u32_at = |at: usize| u32::from_le_bytes(good[at..at + 4].try_into().expect("4 bytes"));
    let row = 12 + u32_at(0) as usize;
    let mut flipped = good.clone();
    flipped[row + 12 + u32_at(row) as usize - 1] ^= 0x10;
    std::fs::write(file(1), &flipped).expect("flip");
    refused(&[
        "part-00001-of-00003.bin",
        &format!("frame 1 at byte {row} fails its checksum"),
        "build the part again",
    ]);
    // Cut short inside a frame.
    std::fs::write(file(1), &good[..good.len() - 3]).expect("cut");
    refused(&[
        "part-00001-of-00003.bin",
        "is cut short by the end of the file",
    ]);
    std::fs::write(file(1), &good).expect("restore");
    run(&mut merge(&p, 3));

    // No index to take.
    let mut none = bin();
    none.args(["build", "--parts", "3"])
        .arg(&p)
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX");
    let out = none.output().expect("run");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("neither is set: give it with `--part I/3`"),
        "{}",
        stderr(&out)
    );
    let out = bin()
        .args(["build", "--part", "3/3"])
        .arg(&p)
        .output()
        .expect("run");
    assert!(
        stderr(&out).contains("parts are numbered 0 to 2"),
        "{}",
        stderr(&out)
    );
}

/// A merge killed after its first pass (the first source's scan, replayed from the parts) goes
/// on from its journal and writes the same bytes.
#[test]
fn a_killed_merge_resumes_to_the_same_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = generated(dir.path());
    let out = dir.path().join("out");
    run(bin().args(["-q", "build", "--threads", "2"]).arg(&p));
    let single = snapshot(&out);
    std::fs::remove_dir_all(&out).expect("rm out");
    for i in 0..2 {
        run(&mut part(&p, i, 2));
    }
    let recorded = dir.path().join("out.partial/.work/journal/pass-000001.bin");
    let mut child = merge(&p, 2).spawn().expect("merge");
    let started = std::time::Instant::now();
    while !recorded.exists() {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "the merge ended before pass 1"
        );
        assert!(
            started.elapsed().as_secs() < 300,
            "no pass recorded in 300 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let resumed = run(bin()
        .args(["merge", "--threads", "2", "--parts", "2"])
        .arg(&p));
    assert!(
        resumed.contains("resuming the interrupted build"),
        "{resumed}"
    );
    let merged = snapshot(&out);
    assert_eq!(
        merged.keys().collect::<Vec<_>>(),
        single.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &single {
        assert!(&merged[name] == bytes, "`{name}` differs after the resume");
    }
}
