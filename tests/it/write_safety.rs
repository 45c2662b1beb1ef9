//! Write-side reliability: nothing the tool writes is reached through a symbolic link; a
//! resume survives kills at any system call (injected with `strace`), however many in a row;
//! a build killed between finishing its dataset and the swap is swapped in by the next one.

use crate::common;
use common::{bin, project, snapshot, stderr};

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const MIX: &str = "mix: {target: rows, total: 220}";

fn build(pipeline: &Path) -> Command {
    let mut c = bin();
    c.args(["build", "-q", "--threads", "2"]).arg(pipeline);
    c
}

/// An uninterrupted build of the demo project in `dir`: its output, by file.
fn reference(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let p = project(dir, MIX);
    let out = build(&p).output().expect("build");
    assert!(out.status.success(), "{}", stderr(&out));
    snapshot(&dir.join("out"))
}

fn assert_refused(out: &Output, needles: &[&str]) {
    assert!(!out.status.success(), "expected a refusal");
    let err = stderr(out);
    for needle in needles {
        assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
    }
}

/// Starts a build and kills it outright once its first pass is recorded, leaving an
/// interrupted build in `out.partial` to go on from.
fn interrupted(p: &Path) {
    let recorded = p.with_file_name("out.partial/.work/journal/pass-000000.bin");
    let mut child = build(p)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    while !recorded.exists() {
        assert!(child.try_wait().expect("wait").is_none(), "ended too soon");
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the build hangs"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
}

fn symlink(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

#[test]
fn symbolic_links_where_outputs_go_are_refused_and_their_targets_untouched() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = project(tmp.path(), MIX);
    let notes = tmp.path().join("notes.txt");
    std::fs::write(&notes, "my notes\n").expect("notes");
    let unchanged = |what: &str| {
        assert_eq!(
            std::fs::read_to_string(&notes).expect("notes"),
            "my notes\n",
            "{what}"
        );
    };

    // The build lock.
    symlink(Path::new("notes.txt"), &tmp.path().join("out.lock"));
    let out = build(&p).output().expect("build");
    assert_refused(
        &out,
        &[
            "out.lock`",
            "it is a symbolic link; refusing to write through it",
        ],
    );
    unchanged("out.lock");
    std::fs::remove_file(tmp.path().join("out.lock")).expect("rm");

    // A file of that name that is not a build lock (a pipeline `out.yaml`'s lockfile).
    let lockfile = "version: 1\nfiles: []\n";
    std::fs::write(tmp.path().join("out.lock"), lockfile).expect("lockfile");
    let out = build(&p).output().expect("build");
    assert_refused(
        &out,
        &[
            "out.lock` is in the way",
            "holds something else (a pipeline's lockfile?)",
        ],
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("out.lock")).expect("lockfile"),
        lockfile
    );
    std::fs::remove_file(tmp.path().join("out.lock")).expect("rm");

    // The staging directory, pointing at a folder of the user's.
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    std::fs::write(elsewhere.join("keep.txt"), "x").expect("write");
    symlink(&elsewhere, &tmp.path().join("out.partial"));
    let out = build(&p).output().expect("build");
    assert_refused(
        &out,
        &["out.partial` is in the way", "it is a symbolic link"],
    );
    let names: Vec<_> = std::fs::read_dir(&elsewhere)
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["keep.txt"]);
    std::fs::remove_file(tmp.path().join("out.partial")).expect("rm");

    // `chatshards report` over a dataset whose report.html is a link.
    let out = build(&p).output().expect("build");
    assert!(out.status.success(), "{}", stderr(&out));
    let report = tmp.path().join("out/report.html");
    std::fs::remove_file(&report).expect("rm");
    symlink(&notes, &report);
    let out = bin()
        .arg("report")
        .arg(tmp.path().join("out"))
        .output()
        .expect("report");
    assert_refused(
        &out,
        &[
            "report.html`",
            "it is a symbolic link; refusing to write through it",
        ],
    );
    unchanged("report.html");
}

#[test]
fn links_planted_in_an_interrupted_build_are_refused_and_their_targets_untouched() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = project(tmp.path(), MIX);
    let notes = tmp.path().join("notes.txt");
    std::fs::write(&notes, "my notes\n").expect("notes");
    let staging = tmp.path().join("out.partial");

    // A side file: the resume refuses and keeps the recorded passes.
    interrupted(&p);
    std::fs::remove_file(staging.join("rejects.jsonl")).expect("rm");
    symlink(&notes, &staging.join("rejects.jsonl"));
    let out = build(&p).output().expect("build");
    assert_refused(
        &out,
        &[
            "cannot go on from the interrupted build in `",
            "rejects.jsonl`",
            "it is a symbolic link",
            "--fresh",
        ],
    );
    assert!(staging.join(".work/journal/pass-000000.bin").exists());
    assert_eq!(
        std::fs::read_to_string(&notes).expect("notes"),
        "my notes\n"
    );

    // A shard being written: refused, naming it.
    std::fs::remove_dir_all(&staging).expect("rm");
    interrupted(&p);
    // The demo writes 3 shards.
    let shard = staging.join(".data-00000-of-00003.arrow.partial");
    symlink(&notes, &shard);
    let out = build(&p).output().expect("build");
    assert_refused(
        &out,
        &[".data-00000-of-00003.arrow.partial`", "symbolic link"],
    );
    assert_eq!(
        std::fs::read_to_string(&notes).expect("notes"),
        "my notes\n"
    );
    assert!(!tmp.path().join("out").exists());
}

/// Whether `strace` can run here (installed, and ptrace allowed).
fn strace_works() -> bool {
    Command::new("strace")
        .args(["-f", "-o", "/dev/null", "-e", "trace=getpid", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs a build that `strace` kills at the `when`-th call of `syscall` (in any one thread);
/// whether it was killed.
fn build_killed_at(p: &Path, syscall: &str, when: u32) -> bool {
    let out = Command::new("strace")
        .args(["-f", "-o", "/dev/null", "-e"])
        .arg(format!("trace={syscall}"))
        .arg("-e")
        .arg(format!("inject={syscall}:signal=KILL:when={when}"))
        .arg(env!("CARGO_BIN_EXE_chatshards"))
        .args(["build", "-q", "--threads", "2"])
        .arg(p)
        .env("CHATSHARDS_NO_PROGRESS", "1")
        .output()
        .expect("strace");
    let err = stderr(&out);
    assert!(
        !err.contains("error:"),
        "killed at {syscall} #{when}, it failed instead:\n{err}"
    );
    !out.status.success()
}

#[test]
fn a_resume_killed_again_and_again_then_at_the_swap_ends_with_the_same_bytes() {
    if !strace_works() {
        eprintln!("skipped: strace is not installed or cannot trace here");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = project(tmp.path(), MIX);
    let expected = reference(tmp.path());
    // A rebuild over that output, killed: the reproduction first (after the 6th pass,
    // then inside the resume's cut-back of the spill), then at the cut-back of another file
    // and at the first sync of the resumes that follow (the first `ftruncate` is the lock's).
    for (syscall, when) in [
        ("rename", 6),
        ("ftruncate", 3),
        ("ftruncate", 2),
        ("fdatasync", 1),
    ] {
        assert!(
            build_killed_at(&p, syscall, when),
            "not killed at {syscall} #{when}"
        );
        assert!(
            tmp.path()
                .join("out.partial/.work/journal/pass-000000.bin")
                .exists(),
            "killed at {syscall} #{when}: the recorded passes are gone"
        );
        assert!(
            snapshot(&tmp.path().join("out")) == expected,
            "the old output changed"
        );
    }
    // Then a resume that finishes its dataset and is killed at the swap (the one `renameat2`):
    // the next build only swaps it in.
    assert!(build_killed_at(&p, "renameat2", 1));
    assert!(tmp.path().join("out.partial/manifest.json").exists());
    let mut c = bin();
    let out = c
        .args(["build", "--threads", "2"])
        .arg(&p)
        .output()
        .expect("build");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("had finished its dataset: putting it in place"),
        "{}",
        stderr(&out)
    );
    assert!(snapshot(&tmp.path().join("out")) == expected);
    for left in ["out.partial", "out.work-done"] {
        assert!(!tmp.path().join(left).exists(), "{left}");
    }
}
