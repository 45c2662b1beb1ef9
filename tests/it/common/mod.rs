//! Helpers the integration tests share: the binary, the repository root, a command's stderr;
//! a loopback Hub ([`hub`]).
// Not every helper is used by the tests of every change.
#![allow(dead_code)]

pub mod hub;

use arrow_array::{Array, Int32Array, Int8Array, ListArray, StringArray};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The binary under test, without a progress display.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_chatshards"));
    c.env("CHATSHARDS_NO_PROGRESS", "1");
    c
}

/// A path inside the repository.
pub fn root(p: &str) -> String {
    Path::new(ROOT).join(p).display().to_string()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Copies the demo's input files into `data` (created if need be).
pub fn copy_demo_inputs(data: &Path) {
    std::fs::create_dir_all(data).expect("mkdir");
    for f in [
        "chat.jsonl",
        "tools.json",
        "alpaca.parquet",
        "curation.jsonl",
    ] {
        std::fs::copy(
            Path::new(ROOT).join("tests/fixtures/demo").join(f),
            data.join(f),
        )
        .expect("copy");
    }
}

/// The `sample_id` column of a shard, row by row.
pub fn sample_ids(shard: &Path) -> Vec<String> {
    let file = std::fs::File::open(shard).expect("shard");
    let mut ids = Vec::new();
    for batch in arrow_ipc::reader::StreamReader::try_new(file, None).expect("stream") {
        let batch = batch.expect("batch");
        let names = batch.column_by_name("sample_id").expect("sample_id");
        let names = names.as_any().downcast_ref::<StringArray>().expect("utf8");
        ids.extend(names.iter().flatten().map(str::to_owned));
    }
    ids
}

/// The demo pipeline (every curation step, a weighted mix) with its own copy of the inputs,
/// writing `out` in `dir`; `mix` replaces its `mix:` line.
pub fn project(dir: &Path, mix: &str) -> PathBuf {
    let data = dir.join("data");
    copy_demo_inputs(&data);
    let yaml = std::fs::read_to_string(Path::new(ROOT).join("pipelines/demo.yaml"))
        .expect("demo pipeline")
        .replace("../tests/fixtures/demo/", "data/")
        .replace("../", &format!("{ROOT}/"))
        .replace(&format!("dir: {ROOT}/out/demo"), "dir: out")
        .replace("mix: {target: rows, total: 220}", mix);
    let p = dir.join("pipeline.yaml");
    std::fs::write(&p, yaml).expect("pipeline");
    p
}

/// Every file of a directory, by name (`validation/NAME` for the one folder an output can have).
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("output dir") {
        let e = e.expect("entry");
        let name = e.file_name().to_string_lossy().into_owned();
        if e.path().is_dir() {
            // A folder of the output (`validation/`): its files as `folder/name`.
            for (inner, bytes) in snapshot(&e.path()) {
                files.insert(format!("{name}/{inner}"), bytes);
            }
        } else {
            files.insert(name, std::fs::read(e.path()).expect("read"));
        }
    }
    files
}

/// Every row of the output's shards: sample id → (ids, mask).
pub fn rows(out: &Path) -> BTreeMap<String, (Vec<u32>, Vec<u8>)> {
    let mut rows = BTreeMap::new();
    for entry in std::fs::read_dir(out).expect("out") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "arrow") {
            continue;
        }
        let file = std::fs::File::open(&path).expect("shard");
        for batch in arrow_ipc::reader::StreamReader::try_new(file, None).expect("stream") {
            let batch = batch.expect("batch");
            let list = |name: &str| {
                batch
                    .column_by_name(name)
                    .expect("column")
                    .as_any()
                    .downcast_ref::<ListArray>()
                    .expect("list")
                    .clone()
            };
            let (ids, mask) = (list("input_ids"), list("loss_mask"));
            let names = batch.column_by_name("sample_id").expect("sample_id");
            let names = names.as_any().downcast_ref::<StringArray>().expect("utf8");
            for i in 0..batch.num_rows() {
                let a = ids.value(i);
                let a = a.as_any().downcast_ref::<Int32Array>().expect("int32");
                let m = mask.value(i);
                let m = m.as_any().downcast_ref::<Int8Array>().expect("int8");
                rows.insert(
                    names.value(i).to_owned(),
                    (
                        a.values().iter().map(|&v| v as u32).collect(),
                        m.values().iter().map(|&v| v as u8).collect(),
                    ),
                );
            }
        }
    }
    rows
}

/// `dir/pipeline.yaml` (`dir` created if need be): `head`, the shipped Qwen3.6 tokenizer (with
/// the indented lines of `tokenizer`) and template, then `body`.
pub fn pipeline_with(dir: &Path, head: &str, tokenizer: &str, body: &str) -> PathBuf {
    let yaml = format!(
        "{head}tokenizer:\n  path: {tok}\n{tokenizer}template:\n  path: {tpl}\n{body}",
        tok = root("templates/qwen3.6/tokenizer.json.zst"),
        tpl = root("templates/qwen3.6/chat_template.jinja"),
    );
    std::fs::create_dir_all(dir).expect("mkdir");
    let path = dir.join("pipeline.yaml");
    std::fs::write(&path, yaml).expect("write pipeline");
    path
}

/// A pipeline named `test` (seed 7) with the shipped tokenizer and template and `body`.
pub fn pipeline(dir: &Path, body: &str) -> PathBuf {
    pipeline_with(dir, "name: test\nseed: 7\n", "", body)
}

/// `pipelines/demo.yaml` from `render:` to `output:`, with paths made absolute.
pub fn demo_pipeline_body() -> String {
    let text = std::fs::read_to_string(root("pipelines/demo.yaml")).expect("demo.yaml");
    let start = text.find("\nrender:").expect("render:");
    let end = text.find("\noutput:").expect("output:");
    text[start + 1..end + 1].replace("../", &format!("{ROOT}/"))
}

/// `chatshards ARGS PIPELINE`.
pub fn run(args: &[&str], pipeline: &Path) -> Output {
    bin()
        .args(args)
        .arg(pipeline)
        .output()
        .expect("run chatshards")
}

/// The command's output, once it is known to have succeeded.
pub fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    out
}

/// A JSON file.
pub fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("read")).expect("json")
}

/// `manifest.json` of an output directory.
pub fn manifest(out: &Path) -> Value {
    json(&out.join("manifest.json"))
}

/// Every line of a JSON lines file.
pub fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("read")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}
