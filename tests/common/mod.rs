//! Helpers the integration tests share: the binary, the repository root, a command's stderr.
// Each test binary compiles this module and uses some of it.
#![allow(dead_code)]

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

/// The demo pipeline (every curation step, a weighted mix) with its own copy of the inputs,
/// writing `out` in `dir`; `mix` replaces its `mix:` line.
pub fn project(dir: &Path, mix: &str) -> PathBuf {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
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

/// Every file of a directory, by name (none of the outputs are directories).
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("output dir")
        .map(|e| {
            let e = e.expect("entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).expect("read"),
            )
        })
        .collect()
}
