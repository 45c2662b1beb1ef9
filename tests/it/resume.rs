//! Crash-safe resume: a build killed with SIGKILL after any of its passes (and so at any point
//! of the pass that follows) goes on from its journal when started again, and writes exactly
//! the bytes of an uninterrupted build; a resume of changed inputs is refused, naming them.

use crate::common;
use common::{bin, project, snapshot, stderr};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(300);

fn build(pipeline: &Path) -> Command {
    let mut c = bin();
    c.args(["build", "--threads", "2"]).arg(pipeline);
    c
}

fn journal(pipeline: &Path) -> PathBuf {
    pipeline.with_file_name("out.partial/.work/journal")
}

/// Waits until pass `pass` is recorded, then kills the build outright. `false` if the build
/// ended first (it has fewer passes).
fn kill_after_pass(mut child: Child, pipeline: &Path, pass: usize) -> bool {
    let recorded = journal(pipeline).join(format!("pass-{pass:06}.bin"));
    let started = Instant::now();
    loop {
        if recorded.exists() {
            child.kill().expect("SIGKILL");
            let status = child.wait().expect("wait");
            // A build that ended before the kill landed (its last pass, under load) is no
            // kill: the caller sees it finished.
            return !status.success();
        }
        if child.try_wait().expect("wait").is_some() {
            return false;
        }
        assert!(started.elapsed() < DEADLINE, "the build hangs");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Kills a build after each pass from `first` on (and so inside the pass after it, and after
/// the last one in the shard phase), resumes it, and compares every byte with an uninterrupted
/// build. Returns how many passes the build has.
fn resume_after_passes(mix: &str, first: usize) -> usize {
    resume_after_passes_of(&|dir| project(dir, mix), first)
}

/// [`resume_after_passes`] of the project `project` makes in a folder.
fn resume_after_passes_of(project: &dyn Fn(&Path) -> PathBuf, first: usize) -> usize {
    let reference = tempfile::tempdir().expect("tempdir");
    let p = project(reference.path());
    let out = build(&p).output().expect("build");
    assert!(out.status.success(), "{}", stderr(&out));
    let expected = snapshot(&reference.path().join("out"));
    let mut pass = first;
    loop {
        let tmp = tempfile::tempdir().expect("tempdir");
        let p = project(tmp.path());
        let child = build(&p)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        if !kill_after_pass(child, &p, pass) {
            if tmp.path().join("out").exists() {
                assert_eq!(snapshot(&tmp.path().join("out")), expected);
            }
            break;
        }
        assert!(!tmp.path().join("out").exists());
        let out = build(&p).output().expect("resume");
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("resuming the interrupted build in `"),
            "after pass {pass}: {}",
            stderr(&out)
        );
        assert_eq!(
            snapshot(&tmp.path().join("out")),
            expected,
            "resumed after pass {pass}"
        );
        assert!(!tmp.path().join("out.partial").exists());
        assert!(!tmp.path().join("out.work-done").exists());
        pass += 1;
    }
    pass
}

#[test]
fn a_build_killed_after_any_pass_resumes_to_the_same_bytes() {
    // Scans of 4 sources, then a work pass each (the kill after the last one can come too
    // late on a loaded machine).
    let passes = resume_after_passes("mix: {target: rows, total: 220}", 0);
    assert!((7..=8).contains(&passes), "{passes} passes");
}

#[test]
fn a_build_with_repeats_killed_after_its_last_passes_resumes_to_the_same_bytes() {
    // More rows than the sources hold: copies, made in passes of their own after the 8 above
    // (the passes before them are those of the test above).
    let passes = resume_after_passes("mix: {target: rows, total: 400, max_repeats: 3}", 7);
    assert!(passes > 8, "{passes} passes");
}

#[test]
fn a_build_killed_inside_a_pass_goes_on_after_its_last_segment() {
    let mix = "mix: {target: rows, total: 220}";
    // Pass 0 scans `chat` (155 rows), pass 4 is its first work pass; a segment every 16 rows.
    kill_inside_passes(&|dir| project(dir, mix), &[0, 4]);
}

/// The demo without anything decided across rows: no dedup, near-duplicates,
/// decontamination, `take`, `mix` or `weight` (its filters and token rules stay).
fn one_pass_project(dir: &Path) -> PathBuf {
    let p = project(dir, "");
    let yaml = std::fs::read_to_string(&p).expect("pipeline");
    let mut kept = Vec::new();
    let mut lines = yaml.lines();
    while let Some(line) = lines.next() {
        if line.starts_with("decontaminate:") {
            // Its four lines of benchmarks.
            lines.nth(3);
            continue;
        }
        if line.starts_with("dedup:") {
            // On by default.
            kept.push("dedup: false");
        } else if !(line.starts_with("near_dup:")
            || line.contains("take:")
            || line.contains("weight:"))
        {
            kept.push(line);
        }
    }
    std::fs::write(&p, kept.join("\n")).expect("pipeline");
    p
}

#[test]
fn a_build_that_decides_nothing_across_rows_works_in_one_pass_per_source_the_same_bytes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = one_pass_project(tmp.path());
    let yaml = std::fs::read_to_string(&p).expect("pipeline");
    for gone in ["near_dup:", "decontaminate:", "take:", "mix:", "HumanEval"] {
        assert!(!yaml.contains(gone), "{gone} in {yaml}");
    }
    assert!(yaml.contains("\ndedup: false\n"), "{yaml}");
    let out = build(&p).output().expect("build");
    assert!(out.status.success(), "{}", stderr(&out));
    let one = snapshot(&tmp.path().join("out"));
    let two_passes = tempfile::tempdir().expect("tempdir");
    let p = one_pass_project(two_passes.path());
    let out = build(&p)
        .env("CHATSHARDS_ONE_PASS", "0")
        .output()
        .expect("build");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(snapshot(&two_passes.path().join("out")), one);
    // Rows rejected, filtered by content and by tokens, and kept, in all four sources.
    let manifest = String::from_utf8(one["manifest.json"].clone()).expect("utf-8");
    for said in ["\"rejected\"", "\"refusals\"", "min_supervised_tokens"] {
        assert!(manifest.contains(said), "{said}: {manifest}");
    }
    assert!(!one["rejects.jsonl"].is_empty() && !one["filtered.jsonl"].is_empty());

    // One pass per source, each resumable from its record and from inside it.
    assert_eq!(resume_after_passes_of(&one_pass_project, 0), 4);
    kill_inside_passes(&one_pass_project, &[0]);
}

/// Kills a build of `project` inside each of `passes` (after its first segment, every 16
/// rows), resumes it and compares every byte with an uninterrupted build.
fn kill_inside_passes(project: &dyn Fn(&Path) -> PathBuf, passes: &[usize]) {
    let reference = tempfile::tempdir().expect("tempdir");
    let p = project(reference.path());
    let out = build(&p).output().expect("build");
    assert!(out.status.success(), "{}", stderr(&out));
    let expected = snapshot(&reference.path().join("out"));
    for &pass in passes {
        let tmp = tempfile::tempdir().expect("tempdir");
        let p = project(tmp.path());
        let mut child = build(&p)
            .env("CHATSHARDS_CHECKPOINT_ROWS", "16")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        // The pass's `.tmp` reaches the disk at its first segment (until then it is buffered).
        let partial = journal(&p).join(format!("pass-{pass:06}.tmp"));
        let started = Instant::now();
        while std::fs::metadata(&partial).map_or(true, |m| m.len() == 0) {
            assert!(started.elapsed() < DEADLINE, "no segment of pass {pass}");
            assert!(child.try_wait().expect("wait").is_none(), "ended first");
            std::thread::sleep(Duration::from_millis(1));
        }
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        let out = build(&p)
            .env("CHATSHARDS_CHECKPOINT_ROWS", "16")
            .output()
            .expect("resume");
        assert!(out.status.success(), "{}", stderr(&out));
        let said = stderr(&out);
        let rows: u64 = said
            .split(&format!("{pass} pass(es) and "))
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{said}"));
        assert!(
            rows >= 16 && rows.is_multiple_of(16),
            "{rows} rows replayed: {said}"
        );
        assert_eq!(
            snapshot(&tmp.path().join("out")),
            expected,
            "resumed inside pass {pass}"
        );
    }
}

#[test]
fn a_resume_of_changed_inputs_is_refused_naming_them_and_fresh_starts_over() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = project(tmp.path(), "mix: {target: rows, total: 220}");
    let child = build(&p)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    assert!(kill_after_pass(child, &p, 0));
    let chat = tmp.path().join("data/chat.jsonl");
    let before = std::fs::metadata(&chat).expect("chat").len();
    let mut rows = std::fs::read_to_string(&chat).expect("chat");
    let first = rows.lines().next().expect("a row").to_owned();
    rows.push_str(&first);
    rows.push('\n');
    std::fs::write(&chat, &rows).expect("edit");
    let out = build(&p).output().expect("build");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let staging = tmp.path().join("out.partial");
    assert!(stderr(&out).contains(&format!(
        "error: `{}` holds an interrupted build whose inputs or settings differ from this one: input `data/chat.jsonl` ({before} bytes then, {} now) changed since. Build with `--fresh` to discard it and start over, or undo the change to go on from it",
        staging.display(),
        rows.len()
    )), "{}", stderr(&out));
    // Refused, the interrupted build is kept as it was.
    assert!(journal(&p).join("pass-000000.bin").is_file());
    // A setting changed too: both are named.
    let yaml = std::fs::read_to_string(&p).expect("yaml");
    std::fs::write(&p, yaml.replace("seed: 42", "seed: 43")).expect("edit");
    let out = build(&p).output().expect("build");
    assert!(
        stderr(&out).contains(&format!(
            "the pipeline's settings, input `data/chat.jsonl` ({before} bytes then, {} now) changed since",
            rows.len()
        )),
        "{}",
        stderr(&out)
    );
    let out = build(&p).arg("--fresh").output().expect("build");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("resuming"));
    assert!(!staging.exists());
}

#[test]
fn sigint_after_a_pass_keeps_the_build_to_go_on_from() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = project(tmp.path(), "mix: {target: rows, total: 220}");
    let reference = tempfile::tempdir().expect("tempdir");
    let rp = project(reference.path(), "mix: {target: rows, total: 220}");
    assert!(build(&rp).output().expect("build").status.success());
    let child = build(&p)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let recorded = journal(&p).join("pass-000001.bin");
    let started = Instant::now();
    while !recorded.exists() {
        assert!(started.elapsed() < DEADLINE, "no pass recorded");
        std::thread::sleep(Duration::from_millis(1));
    }
    let sent = Command::new("kill")
        .args(["-2", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let out = child.wait_with_output().expect("wait");
    if out.status.success() {
        // The build ended before the signal arrived: nothing to resume.
        return;
    }
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("keeps the passes done so far; run the same build again to go on from them (or with `--fresh` to start over)"),
        "{}",
        stderr(&out)
    );
    let out = build(&p).output().expect("resume");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("resuming"));
    assert_eq!(
        snapshot(&tmp.path().join("out")),
        snapshot(&reference.path().join("out"))
    );
}

/// Replaces the first `needle` of `path` with `with`, of the same length, keeping the file's
/// size and modification time (as `cp -p` or `touch -r` would).
fn edit_keeping_size_and_time(path: &Path, needle: &str, with: &str) {
    assert_eq!(needle.len(), with.len());
    let modified = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .expect("mtime");
    let text = std::fs::read_to_string(path).expect("read");
    assert!(
        text.contains(needle),
        "`{needle}` not in `{}`",
        path.display()
    );
    std::fs::write(path, text.replacen(needle, with, 1)).expect("edit");
    let file = std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open");
    file.set_modified(modified).expect("touch -r");
}

fn sha256_of(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(path).expect("read")))
}

#[test]
fn a_resume_of_an_input_edited_keeping_its_size_and_time_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = project(tmp.path(), "mix: {target: rows, total: 220}");
    let child = build(&p)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    assert!(kill_after_pass(child, &p, 0));
    let chat = tmp.path().join("data/chat.jsonl");
    let (bytes, then) = (
        std::fs::metadata(&chat).expect("chat").len(),
        sha256_of(&chat),
    );
    edit_keeping_size_and_time(&chat, "Write helpers.", "Wrote helpers.");
    assert_eq!(std::fs::metadata(&chat).expect("chat").len(), bytes);
    let out = build(&p).output().expect("build");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "input `data/chat.jsonl` (its content: SHA-256 {then} then, {} now) changed since",
            sha256_of(&chat)
        )),
        "{}",
        stderr(&out)
    );
    assert!(journal(&p).join("pass-000000.bin").is_file());
}

#[test]
fn an_input_edited_while_the_build_reads_it_fails_the_build() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = project(tmp.path(), "mix: {target: rows, total: 220}");
    // A segment every row: slow enough to edit the input while the first scan reads it.
    let mut child = build(&p)
        .env("CHATSHARDS_CHECKPOINT_ROWS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let partial = journal(&p).join("pass-000000.tmp");
    let started = Instant::now();
    while std::fs::metadata(&partial).map_or(true, |m| m.len() == 0) {
        assert!(started.elapsed() < DEADLINE, "no segment of pass 0");
        assert!(child.try_wait().expect("wait").is_none(), "ended first");
        std::thread::sleep(Duration::from_millis(1));
    }
    let chat = tmp.path().join("data/chat.jsonl");
    let then = sha256_of(&chat);
    edit_keeping_size_and_time(&chat, "Write helpers.", "Wrote helpers.");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let bytes = std::fs::metadata(&chat).expect("chat").len();
    assert!(
        stderr(&out).contains(&format!(
            "input `data/chat.jsonl` changed while the build read it ({bytes} bytes with \
             SHA-256 {then} before, {bytes} bytes with SHA-256 {} after)",
            sha256_of(&chat)
        )),
        "{}",
        stderr(&out)
    );
    assert!(!tmp.path().join("out").exists(), "a dataset was written");
}
