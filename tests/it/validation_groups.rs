//! `output.validation` over pre-tokenized rows (`format: speculator`) mixed with a conversation
//! source: the rows that share a `primary_id` (speculators' regeneration writes several rows
//! per conversation) land on one side of the split; rows without an id are their own group.

use crate::common;
use common::{bin, snapshot, stderr, ROOT};

use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// 60 rows with `primary_id` `p0`..`p19` (3 each, not adjacent: row i has `p{i % 20}`), then
/// 10 rows without an id; every row distinct.
fn rows() -> String {
    let mut text = String::new();
    for i in 0..70u32 {
        let mut row = json!({
            "input_ids": [248045, 846, 198, 1000 + i, 248046, 198, 248045, 74455, 198, 2000 + i, 77, 248046],
            "loss_mask": [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1],
        });
        if i < 60 {
            row["primary_id"] = json!(format!("p{}", i % 20));
            row["id"] = json!(format!("p{}_gen{}", i % 20, i / 20));
        }
        text.push_str(&format!("{row}\n"));
    }
    text
}

fn pipeline(dir: &Path) -> PathBuf {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    std::fs::write(data.join("regenerated.jsonl"), rows()).expect("data");
    let yaml = format!(
        "name: groups-test\nseed: 7\n\
         tokenizer: {{path: {ROOT}/templates/qwen3.6/tokenizer.json.zst}}\n\
         template: {{path: {ROOT}/templates/qwen3.6/chat_template.jinja}}\n\
         max_tokens: 8192\nmin_supervised_tokens: 1\n\
         sources:\n  - name: spec\n    files: [data/regenerated.jsonl]\n    format: speculator\n\
         \x20 - name: chat\n    files: [{ROOT}/tests/fixtures/demo/chat.jsonl]\n    format: openai\n\
         output: {{dir: out, rows_per_shard: 50, validation: {{fraction: 0.2, seed: 3}}}}\n"
    );
    let p = dir.join("pipeline.yaml");
    std::fs::write(&p, yaml).expect("pipeline");
    p
}

fn build(p: &Path, threads: &str) {
    let out = bin()
        .args(["build", "-q", "--threads", threads])
        .arg(p)
        .output()
        .expect("build");
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `sample_id` of every row of the shards `side` (`""`: the training shards,
/// `"validation/"`: the validation shards).
fn ids(out: &Path, m: &Value, side: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for s in m["shards"].as_array().expect("shards") {
        let file = s["file"].as_str().expect("file");
        if file.starts_with("validation/") != (side == "validation/") {
            continue;
        }
        ids.extend(common::sample_ids(&out.join(file)));
    }
    ids
}

#[test]
fn rows_sharing_a_primary_id_are_on_one_side() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(tmp.path());
    build(&p, "1");
    let out = tmp.path().join("out");
    let m: Value = serde_json::from_slice(&std::fs::read(out.join("manifest.json")).expect("m"))
        .expect("json");
    let v = &m["validation"];
    // The group of a `spec` row (`spec:0:ROW:0`): its primary_id, or the row itself.
    let group = |id: &str| -> String {
        let conversation = id.rsplit_once(':').expect("id").0;
        match conversation.strip_prefix("spec:0:") {
            Some(row) => {
                let row: u32 = row.parse().expect("row");
                if row < 60 {
                    format!("p{}", row % 20)
                } else {
                    conversation.to_owned()
                }
            }
            None => conversation.to_owned(),
        }
    };
    let (train, validation) = (ids(&out, &m, ""), ids(&out, &m, "validation/"));
    let train_groups: BTreeSet<String> = train.iter().map(|i| group(i)).collect();
    let val_groups: BTreeSet<String> = validation.iter().map(|i| group(i)).collect();
    let both: Vec<&String> = train_groups.intersection(&val_groups).collect();
    assert!(both.is_empty(), "on both sides: {both:?}");
    // Exact counts: `spec` gives 20% of its 70 rows (14) in whole groups: whole primary_ids
    // of 3 rows and rows without an id.
    let spec_val: Vec<&String> = validation
        .iter()
        .filter(|i| i.starts_with("spec:"))
        .collect();
    let by_id: BTreeMap<String, usize> = spec_val.iter().fold(BTreeMap::new(), |mut m, i| {
        *m.entry(group(i)).or_default() += 1;
        m
    });
    for (g, n) in &by_id {
        assert_eq!(*n, if g.starts_with('p') { 3 } else { 1 }, "{g}: {by_id:?}");
    }
    assert_eq!(
        v["sources"]["spec"]["validation_rows"],
        spec_val.len() as u64
    );
    assert_eq!(
        v["sources"]["spec"]["validation_conversations"],
        by_id.len() as u64
    );
    assert_eq!(
        (
            v["sources"]["spec"]["train_rows"].as_u64(),
            v["sources"]["spec"]["validation_rows"].as_u64(),
            v["sources"]["spec"]["train_conversations"].as_u64(),
            v["sources"]["spec"]["validation_conversations"].as_u64(),
        ),
        (Some(56), Some(14), Some(24), Some(6)),
        "{v}"
    );
    // Each row of an id past the first is recorded with the first (40 of the 60).
    let groups = v["groups"].as_object().expect("groups");
    assert_eq!(groups.len(), 40);
    assert_eq!(groups["spec:0:20"], "spec:0:0");
    assert_eq!(groups["spec:0:59"], "spec:0:19");
    // `verify` recomputes the split with the groups, and names an edited one.
    let verify = |dir: &Path| bin().arg("verify").arg(dir).output().expect("verify");
    let ok = verify(&out);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let one = snapshot(&out);
    std::fs::remove_dir_all(&out).expect("rm");
    build(&p, "4");
    assert!(snapshot(&out) == one, "4 threads differ from 1");
    let mut edited = m.clone();
    edited["validation"]["groups"]
        .as_object_mut()
        .expect("groups")
        .remove("spec:0:20");
    std::fs::write(
        out.join("manifest.json"),
        serde_json::to_vec(&edited).expect("json"),
    )
    .expect("write");
    let failed = verify(&out);
    assert!(!failed.status.success());
    assert!(
        stderr(&failed).contains("validation: "),
        "{}",
        stderr(&failed)
    );
}
