//! `output.validation`'s layout: the training shards in the output directory, the validation
//! shards in its `validation/` folder (a dataset of its own), the directory's `state.json`
//! listing both (one copy of the bytes). Every file is in the manifest and checked by
//! `verify`; a rebuild replaces the folder; `inspect` and `diff` read every row.

use crate::common;
use common::{bin, project, snapshot, stderr};

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The demo with a mix that repeats rows, `expand`, 100 rows per shard and `validation`.
fn pipeline(dir: &Path, validation: &str) -> PathBuf {
    let p = project(dir, "mix: {target: rows, total: 300, max_repeats: 2}");
    let yaml = std::fs::read_to_string(&p).expect("pipeline").replace(
        "  rows_per_shard: 100",
        &format!("  rows_per_shard: 100\n  validation: {validation}"),
    );
    std::fs::write(&p, yaml).expect("pipeline");
    p
}

fn run(args: &[&str], dir: &Path) -> std::process::Output {
    bin().args(args).arg(dir).output().expect("run chatshards")
}

fn ok(out: std::process::Output) -> String {
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("read")).expect("json")
}

/// `_data_files` of a `state.json`.
fn listed(state: &Path) -> Vec<String> {
    json(state)["_data_files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["filename"].as_str().expect("name").to_owned())
        .collect()
}

/// `(rows, conversations)` of the shards `files` (relative to `out`).
fn shard_rows(out: &Path, files: &[String]) -> (u64, BTreeSet<String>) {
    let (mut rows, mut conversations) = (0, BTreeSet::new());
    for f in files {
        for id in common::sample_ids(&out.join(f)) {
            rows += 1;
            conversations.insert(id.rsplit_once(':').expect("id").0.to_owned());
        }
    }
    (rows, conversations)
}

#[test]
fn the_validation_rows_are_a_dataset_of_their_own_without_a_copy() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(tmp.path(), "{fraction: 0.1, seed: 5}");
    ok(bin().args(["-q", "build"]).arg(&p).output().expect("build"));
    let out = tmp.path().join("out");
    let m = json(&out.join("manifest.json"));
    let v = &m["validation"];
    assert_eq!(
        (v["train_rows"].as_u64(), v["validation_rows"].as_u64()),
        (Some(303), Some(35))
    );

    // Training shards in the directory, validation shards in `validation/`, each side its own
    // run of `rows_per_shard` shards; the directory's `state.json` lists both.
    let train: Vec<String> = (0..4)
        .map(|i| format!("data-0000{i}-of-00004.arrow"))
        .collect();
    let validation = vec!["validation/data-00000-of-00001.arrow".to_owned()];
    let shards: Vec<(String, u64)> = m["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|s| {
            (
                s["file"].as_str().expect("file").to_owned(),
                s["rows"].as_u64().expect("rows"),
            )
        })
        .collect();
    let want: Vec<(String, u64)> = train
        .iter()
        .chain(&validation)
        .cloned()
        .zip([100, 100, 100, 3, 35])
        .collect();
    assert_eq!(shards, want);
    assert_eq!(
        listed(&out.join("state.json")),
        want.iter().map(|s| s.0.clone()).collect::<Vec<_>>()
    );
    assert_eq!(
        listed(&out.join("validation/state.json")),
        ["data-00000-of-00001.arrow"]
    );
    let mut entries: Vec<String> = std::fs::read_dir(out.join("validation"))
        .expect("folder")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    entries.sort();
    assert_eq!(
        entries,
        [
            "data-00000-of-00001.arrow",
            "dataset_info.json",
            "state.json"
        ]
    );
    // Its features are the dataset's.
    assert_eq!(
        json(&out.join("validation/dataset_info.json"))["features"],
        json(&out.join("dataset_info.json"))["features"]
    );
    // No conversation on both sides, read from the shards of each.
    let (train_rows, train_convs) = shard_rows(&out, &train);
    let (val_rows, val_convs) = shard_rows(&out, &validation);
    assert_eq!((train_rows, val_rows), (303, 35));
    assert_eq!(
        (train_convs.len() as u64, val_convs.len() as u64),
        (
            v["train_conversations"].as_u64().expect("n"),
            v["validation_conversations"].as_u64().expect("n")
        )
    );
    assert!(train_convs.is_disjoint(&val_convs));
    // Every written file is in the manifest.
    let files: BTreeSet<String> = m["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["file"].as_str().expect("file").to_owned())
        .chain(shards.iter().map(|s| s.0.clone()))
        // The report is written from the manifest, after it (as without the split).
        .chain(["manifest.json".to_owned(), "report.html".to_owned()])
        .collect();
    let on_disk: BTreeSet<String> = snapshot(&out).into_keys().collect();
    assert_eq!(files, on_disk);

    // `verify` and `verify --rebuild` check the folder too.
    let said = stderr(&run(&["verify", "--rebuild"], &out));
    assert!(said.contains("byte-identical"), "{said}");
    let state = out.join("validation/state.json");
    let original = std::fs::read(&state).expect("state");
    std::fs::write(
        &state,
        String::from_utf8_lossy(&original).replace("data-00000", "data-00009"),
    )
    .expect("edit");
    let failed = run(&["verify"], &out);
    assert!(!failed.status.success());
    assert!(
        stderr(&failed).contains("validation/state.json` has"),
        "{}",
        stderr(&failed)
    );
    std::fs::write(&state, &original).expect("restore");
    ok(run(&["verify"], &out));

    // `inspect` finds a validation row (the last) by index and by id; `diff` reads all rows.
    let last = ok(bin()
        .arg("inspect")
        .arg(&out)
        .args(["--row", "337"])
        .output()
        .expect("inspect"));
    let id = last
        .split("sample_id ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("a sample_id")
        .to_owned();
    assert!(
        val_convs.contains(id.rsplit_once(':').expect("id").0),
        "{id}"
    );
    let by_id = ok(bin()
        .arg("inspect")
        .arg(&out)
        .args(["--sample-id", &id])
        .output()
        .expect("inspect"));
    assert_eq!(by_id, last);
    let diff = ok(bin()
        .args(["diff", "--json"])
        .arg(&out)
        .arg(&out)
        .output()
        .expect("diff"));
    let diff: Value = serde_json::from_str(&diff).expect("json");
    assert_eq!(diff["rows"]["changed"], 0, "{diff}");

    // A rebuild replaces the folder; a file it did not write there is refused, named.
    ok(bin().args(["-q", "build"]).arg(&p).output().expect("build"));
    std::fs::write(out.join("validation/notes.txt"), "mine").expect("write");
    let refused = bin().args(["-q", "build"]).arg(&p).output().expect("build");
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("`validation/`"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        std::fs::read(out.join("validation/notes.txt")).expect("kept"),
        b"mine"
    );
}

#[test]
fn the_layout_is_the_same_bytes_at_1_and_4_threads_and_in_2_parts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(tmp.path(), "{rows: 40}");
    let out = tmp.path().join("out");
    ok(bin()
        .args(["-q", "build", "--threads", "1"])
        .arg(&p)
        .output()
        .expect("build"));
    let one = snapshot(&out);
    assert!(
        one.contains_key("validation/data-00000-of-00001.arrow"),
        "{:?}",
        one.keys()
    );
    std::fs::remove_dir_all(&out).expect("rm");
    ok(bin()
        .args(["-q", "build", "--threads", "4"])
        .arg(&p)
        .output()
        .expect("build"));
    assert!(snapshot(&out) == one, "4 threads differ from 1");
    std::fs::remove_dir_all(&out).expect("rm");
    for i in 0..2 {
        let part = format!("{i}/2");
        ok(bin()
            .args(["-q", "build", "--threads", "2", "--part", &part])
            .arg(&p)
            .output()
            .expect("part"));
    }
    ok(bin()
        .args(["-q", "merge", "--threads", "2", "--parts", "2"])
        .arg(&p)
        .output()
        .expect("merge"));
    assert!(
        snapshot(&out) == one,
        "2 parts differ from the single build"
    );
}
