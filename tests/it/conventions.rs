//! The `mask:` section end to end: presets, the `loss_mask` dtype in the shards and in
//! `dataset_info.json`, and conflicts between a preset and explicit settings.

use crate::common;
use common::{bin, json, pipeline_with, root};

use arrow_schema::DataType;
use std::path::{Path, PathBuf};
use std::process::Output;

fn pipeline(dir: &Path, body: &str) -> PathBuf {
    let chat = root("tests/fixtures/demo/chat.jsonl");
    let body = format!(
        "{body}\nsources:\n  - name: chat\n    files: [{chat}]\n    format: openai\noutput:\n  dir: out\n"
    );
    pipeline_with(dir, "name: conventions\nseed: 7\n", "", &body)
}

fn build(pipeline: &Path) -> Output {
    bin()
        .args(["build", "--threads", "1"])
        .arg(pipeline)
        .output()
        .expect("run chatshards")
}

/// The `loss_mask` item type of the first shard, and every mask value in it.
fn shard_mask(out: &Path) -> (DataType, Vec<u8>) {
    let shard = std::fs::read_dir(out)
        .expect("out")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "arrow"))
        .expect("a shard");
    let file = std::fs::File::open(shard).expect("open shard");
    let reader = arrow_ipc::reader::StreamReader::try_new(file, None).expect("arrow stream");
    let mut kind = None;
    let mut values = Vec::new();
    for batch in reader {
        let batch = batch.expect("batch");
        let column = batch.column_by_name("loss_mask").expect("loss_mask");
        let list = column
            .as_any()
            .downcast_ref::<arrow_array::ListArray>()
            .expect("a list");
        let items = list.values();
        kind = Some(items.data_type().clone());
        match items.data_type() {
            DataType::Boolean => {
                let b = items
                    .as_any()
                    .downcast_ref::<arrow_array::BooleanArray>()
                    .expect("bools");
                values.extend(b.iter().map(|v| u8::from(v == Some(true))));
            }
            DataType::Int8 => {
                let b = items
                    .as_any()
                    .downcast_ref::<arrow_array::Int8Array>()
                    .expect("int8");
                values.extend(b.values().iter().map(|&v| v as u8));
            }
            other => panic!("unexpected loss_mask type {other:?}"),
        }
    }
    (kind.expect("a batch"), values)
}

#[test]
fn presets_set_the_dtype_the_rows_and_the_dataset_info() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut supervised = Vec::new();
    for (mask, dtype, arrow, feature) in [
        ("", "int8", DataType::Int8, "int8"),
        (
            "mask:\n  preset: speculators-0.7\n",
            "bool",
            DataType::Boolean,
            "bool",
        ),
        ("mask:\n  dtype: bool\n", "bool", DataType::Boolean, "bool"),
        (
            "mask:\n  preset: speculators-0.9\n",
            "int8",
            DataType::Int8,
            "int8",
        ),
    ] {
        let dir = tmp.path().join(format!("{dtype}-{}", supervised.len()));
        std::fs::create_dir_all(&dir).expect("dir");
        let out = build(&pipeline(
            &dir,
            &format!("min_supervised_tokens: 1\n{mask}"),
        ));
        assert!(
            out.status.success(),
            "{mask}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let info = json(&dir.join("out/dataset_info.json"));
        assert_eq!(
            info["features"]["loss_mask"]["feature"]["dtype"], feature,
            "{mask}"
        );
        let (kind, values) = shard_mask(&dir.join("out"));
        assert_eq!(kind, arrow, "{mask}");
        assert!(values.iter().all(|&v| v <= 1));
        let manifest = json(&dir.join("out/manifest.json"));
        supervised.push((
            values.iter().filter(|&&v| v == 1).count(),
            manifest["rows"].as_u64().expect("rows"),
        ));
    }
    // speculators 0.7 leaves `<|im_end|>\n` out of every turn: fewer supervised tokens than
    // the default; `dtype: bool` alone changes no value.
    assert!(supervised[1].0 < supervised[0].0, "{supervised:?}");
    assert_eq!(supervised[2], supervised[0]);
    // speculators 0.9: one row per assistant turn, at least as many rows as per query.
    assert!(supervised[3].1 >= supervised[0].1, "{supervised:?}");
}

#[test]
fn a_field_that_contradicts_the_preset_is_a_plan_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = build(&pipeline(
        tmp.path(),
        "render:\n  policy: expand\nmask:\n  preset: speculators-0.7\n  end_of_turn: true\n",
    ));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "mask.preset `speculators-0.7` conflicts with `mask.end_of_turn: true` (the preset has false), `render.policy: expand` (the preset has all)"
        ),
        "{stderr}"
    );
    let out = build(&pipeline(tmp.path(), "mask:\n  preset: speculators-1.0\n"));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("speculators-1.0"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
