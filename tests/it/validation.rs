//! `output.validation`: the grouped, seeded train/validation split. No conversation has rows
//! on both sides under any render policy, with `max_repeats` copies; each source gives its
//! share; the split is the same bytes at 1 and 4 threads and in parts; `verify` recomputes it.

use crate::common;
use common::{bin, manifest, project, snapshot, stderr};

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The demo with a mix that repeats rows, the render policy `policy` and `validation`.
fn pipeline(dir: &Path, policy: &str, validation: &str) -> PathBuf {
    let p = project(dir, "mix: {target: rows, total: 300, max_repeats: 2}");
    let yaml = std::fs::read_to_string(&p)
        .expect("pipeline")
        .replace("policy: expand", &format!("policy: {policy}"))
        .replace(
            "  rows_per_shard: 100",
            &format!("  rows_per_shard: 100\n  validation: {validation}"),
        );
    std::fs::write(&p, yaml).expect("pipeline");
    p
}

fn build(pipeline: &Path, extra: &[&str]) -> String {
    let out = bin()
        .arg("build")
        .args(extra)
        .arg(pipeline)
        .output()
        .expect("run chatshards");
    assert!(out.status.success(), "{}", stderr(&out));
    stderr(&out)
}

/// `(sample_id, source)` of every row, in shard order.
fn rows(out: &Path) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    for shard in manifest(out)["shards"].as_array().expect("shards") {
        let path = out.join(shard["file"].as_str().expect("file"));
        let file = std::fs::File::open(path).expect("shard");
        for batch in arrow_ipc::reader::StreamReader::try_new(file, None).expect("stream") {
            let batch = batch.expect("batch");
            let column = |name: &str| {
                batch
                    .column_by_name(name)
                    .expect("column")
                    .as_any()
                    .downcast_ref::<arrow_array::StringArray>()
                    .expect("strings")
                    .clone()
            };
            let (ids, sources) = (column("sample_id"), column("source"));
            for i in 0..batch.num_rows() {
                rows.push((ids.value(i).to_owned(), sources.value(i).to_owned()));
            }
        }
    }
    rows
}

/// `source:file:row` of `source:file:row:segment[#copy]`.
fn conversation(sample_id: &str) -> &str {
    sample_id.rsplit_once(':').expect("an id").0
}

/// Rows and conversations per source on each side, from the rows themselves; asserts that no
/// conversation is on both sides.
fn sides(out: &Path) -> (u64, BTreeMap<String, [u64; 4]>) {
    let v = &manifest(out)["validation"];
    let train = v["train_rows"].as_u64().expect("train_rows") as usize;
    let rows = rows(out);
    let head: BTreeSet<&str> = rows[..train].iter().map(|r| conversation(&r.0)).collect();
    let tail: BTreeSet<&str> = rows[train..].iter().map(|r| conversation(&r.0)).collect();
    let both: Vec<&&str> = head.intersection(&tail).collect();
    assert!(both.is_empty(), "on both sides: {both:?}");
    let mut counts: BTreeMap<String, [u64; 4]> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for (i, (id, source)) in rows.iter().enumerate() {
        let side = usize::from(i >= train);
        let c = counts.entry(source.clone()).or_default();
        c[side] += 1;
        if seen.insert(conversation(id)) {
            c[2 + side] += 1;
        }
    }
    // The manifest's counts are the rows' counts.
    for (source, c) in &counts {
        let m = &v["sources"][source];
        let recorded = [
            "train_rows",
            "validation_rows",
            "train_conversations",
            "validation_conversations",
        ]
        .map(|k| m[k].as_u64().expect("count"));
        assert_eq!(&recorded, c, "{source}");
    }
    let copies = rows.iter().filter(|r| r.0.contains('#')).count() as u64;
    (copies, counts)
}

/// Per render policy: the copies of repeated rows (in every build) and, by source (alpaca,
/// chat, curation, tools), exact [train rows, validation rows, train conversations, validation
/// conversations].
#[rustfmt::skip]
const SPLITS: [(&str, u64, [[u64; 4]; 4]); 4] = [
    ("expand", 40, [[45, 5, 45, 5], [162, 18, 134, 16], [26, 3, 26, 3], [70, 9, 36, 4]]),
    ("all",    31, [[45, 5, 45, 5], [149, 17, 135, 15], [26, 3, 26, 3], [49, 6, 36, 4]]),
    ("turns",  57, [[45, 5, 45, 5], [185, 21, 133, 17], [26, 3, 26, 3], [119, 15, 36, 4]]),
    ("last",   31, [[45, 5, 45, 5], [149, 17, 135, 15], [26, 3, 26, 3], [49, 6, 36, 4]]),
];

#[test]
fn no_conversation_straddles_the_split_under_any_policy() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (policy, want_copies, want) in SPLITS {
        let dir = tmp.path().join(policy);
        std::fs::create_dir_all(&dir).expect("dir");
        let p = pipeline(&dir, policy, "{fraction: 0.1, seed: 5}");
        let said = build(&p, &["--threads", "2"]);
        let out = dir.join("out");
        let (copies, counts) = sides(&out);
        let v = &manifest(&out)["validation"];
        let (train, validation) = (
            v["train_rows"].as_u64().expect("rows"),
            v["validation_rows"].as_u64().expect("rows"),
        );
        let ratio = v["train_data_ratio"].as_f64().expect("ratio");
        assert_eq!(
            ((train + validation) as f64 * ratio).floor() as u64,
            train,
            "{policy}"
        );
        assert!(
            said.contains(&format!(
                "validation: the last {validation} rows ({} conversations) after {train} training rows",
                v["validation_conversations"]
            )) && said.contains(&format!("speculators: --train-data-ratio {ratio}")),
            "{said}"
        );
        let want: BTreeMap<String, [u64; 4]> = ["alpaca", "chat", "curation", "tools"]
            .iter()
            .map(|s| s.to_string())
            .zip(want)
            .collect();
        assert_eq!(copies, want_copies, "{policy}: repeated rows");
        assert_eq!(counts, want, "{policy}");
    }
}

#[test]
fn the_split_is_the_same_bytes_at_any_thread_count_and_in_parts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(tmp.path(), "turns", "{rows: 30}");
    let out = tmp.path().join("out");
    build(&p, &["-q", "--threads", "1"]);
    let one = snapshot(&out);
    let v = manifest(&out)["validation"].clone();
    assert_eq!(v["rows"], 30);
    assert!(v["validation_rows"].as_u64().expect("rows") >= 30, "{v}");
    sides(&out);
    std::fs::remove_dir_all(&out).expect("rm");
    build(&p, &["-q", "--threads", "4"]);
    assert!(snapshot(&out) == one, "4 threads differ from 1");
    std::fs::remove_dir_all(&out).expect("rm");
    for i in 0..3 {
        build(&p, &["-q", "--threads", "2", "--part", &format!("{i}/3")]);
    }
    let merged = bin()
        .args(["-q", "merge", "--threads", "2", "--parts", "3"])
        .arg(&p)
        .output()
        .expect("merge");
    assert!(merged.status.success(), "{}", stderr(&merged));
    assert!(
        snapshot(&out) == one,
        "3 parts differ from the single build"
    );
}

#[test]
fn verify_recomputes_the_split_and_bad_settings_are_plan_errors() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(tmp.path(), "expand", "{fraction: 0.2}");
    build(&p, &["-q"]);
    let out = tmp.path().join("out");
    let verify = |dir: &Path| bin().arg("verify").arg(dir).output().expect("verify");
    assert!(verify(&out).status.success());
    // A count edited in the manifest is named (before the seal that it also breaks).
    let mut m = manifest(&out);
    let n = m["validation"]["validation_rows"].as_u64().expect("rows");
    m["validation"]["validation_rows"] = Value::from(n + 1);
    std::fs::write(
        out.join("manifest.json"),
        serde_json::to_vec(&m).expect("json"),
    )
    .expect("write");
    let failed = verify(&out);
    assert!(!failed.status.success());
    assert!(
        stderr(&failed).contains(&format!(
            "validation: validation_rows is {}, but the rows give {n}",
            n + 1
        )),
        "{}",
        stderr(&failed)
    );
    for (validation, message) in [
        (
            "{fraction: 1.5}",
            "`output.validation.fraction` must be between 0 and 1, exclusive (it is 1.5)",
        ),
        (
            "{fraction: 0.1, rows: 5}",
            "`output.validation` needs exactly one of `fraction` or `rows`",
        ),
        (
            "{rows: 100000}",
            "`output.validation.rows: 100000` leaves no training rows",
        ),
    ] {
        let dir = tmp.path().join(format!("bad{}", validation.len()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = pipeline(&dir, "expand", validation);
        let out = bin().arg("build").arg(&p).output().expect("build");
        assert!(!out.status.success(), "{validation}");
        assert!(
            stderr(&out).contains(message),
            "{validation}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn without_validation_the_manifest_has_no_split() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = project(tmp.path(), "mix: {target: rows, total: 220}");
    build(&p, &["-q"]);
    assert!(manifest(&tmp.path().join("out"))
        .get("validation")
        .is_none());
}
