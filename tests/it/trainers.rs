//! What the drafter trainers read today: the draft vocabulary files beside the dataset
//! (speculators' `d2t-N.npy` / `t2d-N.npy`, SpecForge's `torch.save({"d2t", "t2d"})`), and
//! that writing them does not break the next build or `verify`.

use crate::common;
use common::{bin, ok, project, stderr};

use std::io::Read;
use std::path::Path;
use std::process::Output;

fn build(pipeline: &Path) {
    ok(bin()
        .args(["build", "--quiet"])
        .arg(pipeline)
        .output()
        .expect("run"));
}

fn vocab(dir: &Path, draft: usize) -> Output {
    bin()
        .args(["vocab", "--draft-size", &draft.to_string()])
        .args(["--target-vocab-size", "248320"])
        .arg(dir)
        .output()
        .expect("run")
}

/// The records of a zip, by name.
fn zip_records(path: &Path) -> Vec<(String, Vec<u8>)> {
    let file = std::fs::File::open(path).expect("open");
    let mut zip = zip::ZipArchive::new(file).expect("zip");
    (0..zip.len())
        .map(|i| {
            let mut f = zip.by_index(i).expect("record");
            let name = f.name().expect("name").to_string();
            assert_eq!(f.compression(), zip::CompressionMethod::Stored);
            // PyTorch memory-maps storages: every record's data starts 64-byte aligned.
            assert_eq!(
                f.data_start().expect("offset") % 64,
                0,
                "{name} is not aligned"
            );
            let mut b = Vec::new();
            f.read_to_end(&mut b).expect("read");
            (name, b)
        })
        .collect()
}

/// The array of an `np.save` file of format 1.0: its header dict and its data.
fn npy(path: &Path) -> (String, Vec<u8>) {
    let b = std::fs::read(path).expect("read");
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    assert_eq!((10 + hlen) % 64, 0, "numpy pads the header to 64 bytes");
    let header = String::from_utf8(b[10..10 + hlen].to_vec()).expect("ascii");
    (header.trim_end().to_string(), b[10 + hlen..].to_vec())
}

#[test]
fn vocabulary_files_sit_beside_the_dataset_and_the_next_build_replaces_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pipeline = project(tmp.path(), "mix: {target: rows, total: 220}");
    build(&pipeline);
    let out = tmp.path().join("out");
    ok(vocab(&out, 64));

    // speculators' names and dtypes: d2t int64 of the draft size, t2d bool of the target's.
    let (header, d2t) = npy(&out.join("d2t-64.npy"));
    assert_eq!(
        header,
        "{'descr': '<i8', 'fortran_order': False, 'shape': (64,), }"
    );
    assert_eq!(d2t.len(), 64 * 8);
    let (header, t2d) = npy(&out.join("t2d-64.npy"));
    assert_eq!(
        header,
        "{'descr': '|b1', 'fortran_order': False, 'shape': (248320,), }"
    );
    assert_eq!(t2d.iter().filter(|&&b| b == 1).count(), 64);
    assert!(t2d.iter().all(|&b| b <= 1));
    // d2t[i] = selected[i] - i, selected = the ids t2d marks, ascending.
    let selected: Vec<i64> = t2d
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == 1)
        .map(|(i, _)| i as i64)
        .collect();
    let offsets: Vec<i64> = d2t
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    let back: Vec<i64> = offsets
        .iter()
        .enumerate()
        .map(|(i, o)| o + i as i64)
        .collect();
    assert_eq!(back, selected);

    // SpecForge's file: torch.save({"d2t": int64 tensor, "t2d": bool tensor}), the same data.
    let records = zip_records(&out.join("vocab_mapping-64.pt"));
    let names: Vec<&str> = records.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "vocab_mapping-64/data.pkl",
            "vocab_mapping-64/.format_version",
            "vocab_mapping-64/.storage_alignment",
            "vocab_mapping-64/byteorder",
            "vocab_mapping-64/data/0",
            "vocab_mapping-64/data/1",
            "vocab_mapping-64/version",
            "vocab_mapping-64/.data/serialization_id",
        ]
    );
    assert_eq!(records[4].1, d2t, "data/0 holds d2t");
    assert_eq!(records[5].1, t2d, "data/1 holds t2d");
    let pickle = &records[0].1;
    let expect = [
        b"\x80\x02}(X\x03\x00\x00\x00d2tctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nLongStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK@tQK\x00K@\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtR".as_slice(),
        b"X\x03\x00\x00\x00t2dctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nBoolStorage\nX\x01\x00\x00\x001X\x03\x00\x00\x00cpuJ\x00\xca\x03\x00tQK\x00J\x00\xca\x03\x00\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRu.".as_slice(),
    ]
    .concat();
    assert_eq!(pickle, &expect);

    // `verify` still passes, and the next build into the directory replaces the dataset and the
    // files derived from it instead of refusing the directory.
    ok(bin().arg("verify").arg(&out).output().expect("run"));
    build(&pipeline);
    for name in [
        "d2t-64.npy",
        "t2d-64.npy",
        "vocab_mapping-64.pt",
        "derived_files.json",
    ] {
        assert!(!out.join(name).exists(), "{name} outlived its dataset");
    }

    // A file of the same name that chatshards did not write is neither replaced by `vocab`
    // nor removed by a build.
    std::fs::write(out.join("d2t-64.npy"), b"someone else's").expect("write");
    let refused = vocab(&out, 64);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("d2t-64.npy` exists and was not written by chatshards"),
        "{}",
        stderr(&refused)
    );
    let rebuilt = bin()
        .args(["build", "--quiet"])
        .arg(&pipeline)
        .output()
        .expect("run");
    assert!(!rebuilt.status.success());
    assert!(
        stderr(&rebuilt).contains("did not write") && stderr(&rebuilt).contains("d2t-64.npy"),
        "{}",
        stderr(&rebuilt)
    );
    assert_eq!(
        std::fs::read(out.join("d2t-64.npy")).expect("read"),
        b"someone else's"
    );
}

#[test]
fn specforge_export_has_one_role_content_line_per_kept_conversation() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pipeline = project(tmp.path(), "mix: {target: rows, total: 220}");
    build(&pipeline);
    let out = tmp.path().join("out");
    let export = tmp.path().join("specforge.jsonl");
    ok(bin()
        .args(["export", "--format", "specforge", "--out"])
        .arg(&export)
        .arg(&out)
        .output()
        .expect("run"));
    let kept = std::fs::read_to_string(out.join("conversations.jsonl")).expect("read");
    let lines = std::fs::read_to_string(&export).expect("read");
    assert_eq!(lines.lines().count(), kept.lines().count());
    let mut calls = 0;
    let mut reasoning = 0;
    for (line, record) in lines.lines().zip(kept.lines()) {
        let v: serde_json::Value = serde_json::from_str(line).expect("json");
        let r: serde_json::Value = serde_json::from_str(record).expect("json");
        assert_eq!(v["id"], r["id"]);
        let messages = v["conversations"].as_array().expect("conversations");
        for m in messages {
            let role = m["role"].as_str().expect("role");
            assert!(
                ["system", "user", "assistant", "tool"].contains(&role),
                "{m}"
            );
            assert!(m["content"].is_string(), "{m}");
            calls += usize::from(m.get("tool_calls").is_some());
            reasoning += usize::from(m.get("reasoning_content").is_some());
        }
        assert!(v["tools"].is_array());
    }
    assert!(
        calls > 0 && reasoning > 0,
        "{calls} calls, {reasoning} reasoning"
    );
    // An existing file is never replaced.
    let again = bin()
        .args(["export", "--format", "specforge", "--out"])
        .arg(&export)
        .arg(&out)
        .output()
        .expect("run");
    assert!(!again.status.success());
    assert!(stderr(&again).contains("exists; refusing to replace it"));
}
