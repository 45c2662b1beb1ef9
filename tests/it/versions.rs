//! Dataset versions end to end: `build_id` and `dataset_sha256`, `verify`, `diff`, and
//! `build --locked` covering every input, on builds of the demo fixtures.

use crate::common;
use common::{bin, manifest, root, stderr};

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run chatshards")
}

const BASE: &str = "name: versions
seed: 7
tokenizer:
  path: TOKENIZER
template:
  path: TEMPLATE
  kwargs: {preserve_thinking: false}
sources:
  - name: chat
    files: [data/chat.jsonl]
    format: openai
  - name: tools
    files: [data/tools.json]
    format: sharegpt
  - name: alpaca
    files: [data/alpaca.parquet]
    format: alpaca
    take: 50
output:
  dir: out
  rows_per_shard: 100
";

/// The same pipeline, formatted differently: comments, key order, flow style, quoting.
const REFORMATTED: &str = "# the same pipeline, written differently
output: {rows_per_shard: 100, dir: \"somewhere/else\"}
sources:
- {name: chat, format: openai, files: [\"data/chat.jsonl\"]}   # chat
- format: sharegpt
  name: tools
  files:
    - data/tools.json
- take: 50
  files: [data/alpaca.parquet]
  format: 'alpaca'
  name: alpaca
template: {kwargs: {preserve_thinking: false}, path: \"TEMPLATE\"}
tokenizer:
    path: TOKENIZER
seed: 7
name: versions
";

/// A pipeline directory with its own copy of the demo data, so that a test can edit inputs.
fn variant(dir: &Path, yaml: &str) -> PathBuf {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    for f in ["chat.jsonl", "tools.json", "alpaca.parquet"] {
        std::fs::copy(root(&format!("tests/fixtures/demo/{f}")), data.join(f)).expect("copy");
    }
    let yaml = yaml
        .replace("TOKENIZER", &root("templates/qwen3.6/tokenizer.json.zst"))
        .replace("TEMPLATE", &root("templates/qwen3.6/chat_template.jinja"));
    let path = dir.join("pipeline.yaml");
    std::fs::write(&path, yaml).expect("write pipeline");
    path
}

fn build(pipeline: &Path, extra: &[&str]) -> PathBuf {
    let mut args = vec!["build", "--threads", "2"];
    args.extend_from_slice(extra);
    let p = pipeline.display().to_string();
    args.push(&p);
    let out = run(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    pipeline.with_file_name("out")
}

/// Appends " (edited)" to the last assistant message of the last plain conversation of the chat
/// fixture (the first ones have duplicates in tools.json); returns its 0-based line.
fn edit_a_chat_row(data: &Path) -> usize {
    let path = data.join("chat.jsonl");
    let text = std::fs::read_to_string(&path).expect("chat");
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for (i, line) in lines.iter_mut().enumerate().rev() {
        let Ok(mut row) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some(messages) = row["messages"].as_array_mut() else {
            continue;
        };
        let plain = messages.iter().all(|m| {
            ["user", "assistant"].contains(&m["role"].as_str().unwrap_or_default())
                && m["content"].as_str().is_some_and(|c| !c.contains("<|"))
        });
        if !plain {
            continue;
        }
        let last = messages
            .iter_mut()
            .rev()
            .find(|m| m["role"] == "assistant" && m["content"].is_string());
        if let Some(m) = last {
            let content = format!("{} (edited)", m["content"].as_str().unwrap_or_default());
            m["content"] = Value::String(content);
            *line = row.to_string();
            std::fs::write(&path, lines.join("\n") + "\n").expect("write");
            return i;
        }
    }
    panic!("no chat row to edit");
}

/// The builds several tests compare, made once.
struct Builds {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    same: PathBuf,
    reformatted: PathBuf,
    edited_row: PathBuf,
    edited_line: usize,
    seed: PathBuf,
    kwarg: PathBuf,
    tokenizer: PathBuf,
    template: PathBuf,
}

fn builds() -> &'static Builds {
    static BUILDS: OnceLock<Builds> = OnceLock::new();
    BUILDS.get_or_init(|| {
        let tmp = tempfile::tempdir().expect("tempdir");
        let at = |name: &str, yaml: &str| variant(&tmp.path().join(name), yaml);
        let base = build(&at("base", BASE), &[]);
        let same = build(&at("same", BASE), &[]);
        let reformatted =
            build(&at("reformatted", REFORMATTED), &[]).with_file_name("somewhere/else");
        let p = at("edited_row", BASE);
        let edited_line = edit_a_chat_row(&tmp.path().join("edited_row/data"));
        let edited_row = build(&p, &[]);
        let seed = build(&at("seed", &BASE.replace("seed: 7", "seed: 8")), &[]);
        let kwarg = build(
            &at(
                "kwarg",
                &BASE.replace("preserve_thinking: false", "preserve_thinking: true"),
            ),
            &[],
        );
        // The same tokenizer, uncompressed: other bytes, same ids.
        let p = at(
            "tokenizer",
            &BASE.replace("TOKENIZER", "data/tokenizer.json"),
        );
        let zst = std::fs::read(root("templates/qwen3.6/tokenizer.json.zst")).expect("zst");
        let json = zstd::decode_all(zst.as_slice()).expect("decompress");
        std::fs::write(tmp.path().join("tokenizer/data/tokenizer.json"), json).expect("write");
        let tokenizer = build(&p, &[]);
        // The template with a comment added: other bytes, same renders.
        let p = at("template", &BASE.replace("TEMPLATE", "data/t.jinja"));
        let source =
            std::fs::read_to_string(root("templates/qwen3.6/chat_template.jinja")).expect("tpl");
        std::fs::write(
            tmp.path().join("template/data/t.jinja"),
            format!("{{#- edited -#}}{source}"),
        )
        .expect("write");
        let template = build(&p, &[]);
        Builds {
            _tmp: tmp,
            base,
            same,
            reformatted,
            edited_row,
            edited_line,
            seed,
            kwarg,
            tokenizer,
            template,
        }
    })
}

fn ids(out: &Path) -> (String, String) {
    let m = manifest(out);
    (
        m["build_id"].as_str().expect("build_id").to_owned(),
        m["dataset_sha256"]
            .as_str()
            .expect("dataset_sha256")
            .to_owned(),
    )
}

#[test]
fn the_same_build_id_gives_the_same_dataset_and_every_input_changes_it() {
    let b = builds();
    let (base_id, base_data) = ids(&b.base);
    assert_eq!(base_id.len(), 64);
    // Same pipeline and inputs in another directory: same ids, every file byte-identical.
    assert_eq!(ids(&b.same), (base_id.clone(), base_data.clone()));
    for entry in std::fs::read_dir(&b.base).expect("read") {
        let name = entry.expect("entry").file_name();
        let (x, y) = (
            std::fs::read(b.base.join(&name)).expect("a"),
            std::fs::read(b.same.join(&name)).expect("b"),
        );
        assert!(x == y, "{name:?} differs");
    }
    // Reformatting the YAML (and moving output.dir) changes neither.
    let (id, data) = ids(&b.reformatted);
    assert_eq!((&id, &data), (&base_id, &base_data));

    // The dataset hash is the hash of the shard hashes, and state.json carries it.
    let m = manifest(&b.base);
    let shards: String = m["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|s| s["sha256"].as_str().expect("sha").to_owned())
        .collect();
    use sha2::Digest;
    assert_eq!(
        base_data,
        hex::encode(sha2::Sha256::digest(shards.as_bytes()))
    );
    let state: Value =
        serde_json::from_slice(&std::fs::read(b.base.join("state.json")).expect("state"))
            .expect("json");
    assert_eq!(state["_fingerprint"], base_data[..16]);

    // Each kind of input changes the build_id.
    let mut seen = vec![base_id];
    for (what, out) in [
        ("a source row", &b.edited_row),
        ("the seed", &b.seed),
        ("a template variable", &b.kwarg),
        ("the tokenizer bytes", &b.tokenizer),
        ("the template bytes", &b.template),
    ] {
        let (id, _) = ids(out);
        assert!(!seen.contains(&id), "{what} did not change the build_id");
        seen.push(id);
    }
    // Other bytes, same meaning: the rows stay the same.
    assert_eq!(ids(&b.tokenizer).1, base_data);
    assert_ne!(ids(&b.seed).1, base_data);
}

fn diff_json(a: &Path, b: &Path) -> Value {
    let out = run(&[
        "diff",
        "--json",
        &a.display().to_string(),
        &b.display().to_string(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("diff json")
}

fn changes(report: &Value) -> Vec<String> {
    report["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .map(|c| {
            format!(
                "{}: {} -> {}",
                c["what"].as_str().unwrap_or_default(),
                c["a"],
                c["b"]
            )
        })
        .collect()
}

#[test]
fn diff_names_an_edited_source_row() {
    let b = builds();
    let report = diff_json(&b.base, &b.edited_row);
    let chat = |dir: &Path| {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(
            std::fs::read(dir.with_file_name("data").join("chat.jsonl")).expect("chat"),
        ))
    };
    // The pipelines are byte-identical: only the file changed.
    let expected = [format!(
        "source `chat` file `data/chat.jsonl` sha256: \"{}\" -> \"{}\"",
        chat(&b.base),
        chat(&b.edited_row)
    )];
    assert_eq!(changes(&report), expected);
    let rows = &report["rows"];
    assert_eq!(
        (&rows["added"], &rows["removed"], &rows["changed"]),
        (&Value::from(0), &Value::from(0), &Value::from(1))
    );
    let example = &rows["examples"]["changed"][0];
    let id = example["sample_id"].as_str().expect("sample_id");
    assert!(
        id.starts_with(&format!("chat:0:{}:", b.edited_line)),
        "{id}"
    );
    let (ta, tb) = (
        example["tokens_a"].as_u64().expect("a"),
        example["tokens_b"].as_u64().expect("b"),
    );
    assert!(tb > ta, "{ta} -> {tb}");
    let sources: Vec<String> = report["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c["source"].as_str().unwrap_or(""),
                c["field"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(sources, ["chat supervised_tokens", "chat tokens"]);
    assert_eq!(
        report["sources"][1]["delta"].as_i64(),
        Some((tb - ta) as i64)
    );

    // The text form says the same.
    let out = run(&[
        "diff",
        &b.base.display().to_string(),
        &b.edited_row.display().to_string(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("rows (by source row and content): 0 added, 0 removed, 1 changed, 0 moved, "),
        "{text}"
    );
    assert!(
        text.contains(&format!("  changed {id} (tokens {ta} -> {tb})")),
        "{text}"
    );
}

#[test]
fn diff_of_a_seed_change_moves_rows_and_changes_none() {
    let b = builds();
    let report = diff_json(&b.base, &b.seed);
    assert_eq!(
        changes(&report),
        [
            format!(
                "inputs.pipeline_sha256: {} -> {}",
                manifest(&b.base)["inputs"]["pipeline_sha256"],
                manifest(&b.seed)["inputs"]["pipeline_sha256"]
            ),
            "settings.seed: 7 -> 8".to_owned()
        ]
    );
    let rows = &report["rows"];
    let total = manifest(&b.base)["rows"].as_u64().expect("rows");
    // The seed also draws `take`'s sample (alpaca: 50 of 59): some rows leave, as many come.
    let count = |k: &str| rows[k].as_u64().expect(k);
    assert!(count("added") > 0, "{rows}");
    assert_eq!(count("added"), count("removed"));
    assert_eq!(count("changed"), 0);
    assert_eq!(
        count("moved") + count("unchanged") + count("removed"),
        total
    );
    let moved = count("moved");
    assert!(moved > total * 8 / 10, "{moved} of {total}");
    // Only the sampled source's counts move (its sample is another 50 rows).
    let sources = report["sources"].as_array().expect("sources");
    assert!(
        sources.iter().all(|d| d["source"] == "alpaca"),
        "{sources:?}"
    );
    assert_eq!(report["identical"], false);
}

#[test]
fn diff_of_a_template_variable_lists_it() {
    let b = builds();
    let report = diff_json(&b.base, &b.kwarg);
    let listed = changes(&report);
    assert!(
        listed.contains(&"settings.template_kwargs.preserve_thinking: false -> true".to_owned()),
        "{listed:?}"
    );
    let rows = &report["rows"];
    assert_eq!(
        (&rows["added"], &rows["removed"]),
        (&Value::from(0), &Value::from(0))
    );
    // preserve_thinking keeps earlier turns' reasoning: only multi-turn rows with reasoning
    // change, and every change shows as a row in both with other tokens.
    let changed = rows["changed"].as_u64().expect("changed");
    assert_eq!(
        changed + rows["moved"].as_u64().unwrap_or(0) + rows["unchanged"].as_u64().unwrap_or(0),
        manifest(&b.base)["rows"].as_u64().expect("rows")
    );
    // Same inputs both ways: a diff of a dataset with itself is empty.
    let same = diff_json(&b.base, &b.same);
    assert_eq!(changes(&same), Vec::<String>::new());
    assert_eq!(same["identical"], true);
    assert_eq!(same["rows"]["unchanged"], manifest(&b.base)["rows"]);
}

/// A copy of an output directory that a test may damage.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
    }
}

fn verify(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["verify"];
    args.extend_from_slice(extra);
    let d = dir.display().to_string();
    args.push(&d);
    run(&args)
}

#[test]
fn verify_names_the_first_difference() {
    let b = builds();
    let ok = verify(&b.base, &[]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let m = manifest(&b.base);
    assert_eq!(
        stderr(&ok),
        format!(
            "`{}` matches its manifest: 3 shard(s), {} rows, 9 other files\n  build_id       {}\n  dataset_sha256 {}\n",
            b.base.display(),
            m["rows"],
            m["build_id"].as_str().expect("id"),
            m["dataset_sha256"].as_str().expect("sha")
        )
    );
    let listed: Vec<&str> = m["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["file"].as_str().expect("file"))
        .collect();
    assert_eq!(
        listed,
        [
            "conversations.jsonl",
            "dataset_info.json",
            "filtered.jsonl",
            "pipeline.yaml",
            "rejects.jsonl",
            "state.json",
            "stats.json",
            "token_freq.pt",
            "token_freq_all.pt"
        ]
    );

    let tmp = tempfile::tempdir().expect("tempdir");
    let damaged = |name: &str, damage: &dyn Fn(&Path)| -> String {
        let dir = tmp.path().join(name);
        copy_dir(&b.base, &dir);
        damage(&dir);
        let out = verify(&dir, &[]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stderr(&out));
        stderr(&out)
    };
    let shard = m["shards"][1]["file"].as_str().expect("shard");
    let shard_sha = m["shards"][1]["sha256"].as_str().expect("sha");

    // A flipped byte in a shard.
    let message = damaged("flipped", &|dir| {
        let path = dir.join(shard);
        let mut bytes = std::fs::read(&path).expect("read");
        let middle = bytes.len() / 2;
        bytes[middle] ^= 1;
        std::fs::write(&path, bytes).expect("write");
    });
    let path = tmp.path().join("flipped").join(shard);
    assert!(
        message.starts_with(&format!("error: `{}` has sha256 ", path.display()))
            && message.contains(&format!("; the manifest records {shard_sha}")),
        "{message}"
    );
    // A deleted shard.
    let message = damaged("deleted", &|dir| {
        std::fs::remove_file(dir.join(shard)).expect("rm")
    });
    assert_eq!(
        message,
        format!(
            "error: `{}` is missing (the manifest lists it)\n",
            tmp.path().join("deleted").join(shard).display()
        )
    );
    // An edited manifest: counts that do not add up.
    let edit_manifest = |dir: &Path, edit: &dyn Fn(&mut Value)| {
        let mut m = manifest(dir);
        edit(&mut m);
        std::fs::write(dir.join("manifest.json"), m.to_string()).expect("write");
    };
    let message = damaged("kept", &|dir| {
        edit_manifest(dir, &|m| m["sources"]["chat"]["kept"] = Value::from(151))
    });
    assert_eq!(
        message,
        format!(
            "error: `{}`: source `chat` read 155 rows but accounts for 156 (kept + rejected + filtered + deduplicated + near_duplicate + contaminated + sampled_out)\n",
            tmp.path().join("kept/manifest.json").display()
        )
    );
    // An edited manifest: a setting that was not the one used.
    let message = damaged("seed", &|dir| {
        edit_manifest(dir, &|m| {
            m["settings"]["template_kwargs"]["preserve_thinking"] = Value::Bool(true)
        })
    });
    assert!(
        message.contains("manifest.json`: build_id is ")
            && message.contains("but the inputs it records and `pipeline.yaml` give"),
        "{message}"
    );
    // A shard that another one replaced (hashes edited to match): the row count gives it away.
    let message = damaged("rows", &|dir| {
        edit_manifest(dir, &|m| m["shards"][0]["rows"] = Value::from(99))
    });
    assert!(
        message.contains("has 100 rows; the manifest records 99"),
        "{message}"
    );
}

/// The manifest seals itself: an edit of any field, even one no other check looks at, fails
/// `verify`; every file it names must be a plain file inside the dataset directory.
#[test]
fn verify_catches_any_edited_manifest_field_and_files_outside_the_dataset() {
    let b = builds();
    let m = manifest(&b.base);
    let seal = m["manifest_sha256"].as_str().expect("seal").to_owned();
    assert_eq!(
        m.as_object()
            .expect("object")
            .keys()
            .next_back()
            .map(String::as_str),
        Some("manifest_sha256")
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let damaged = |name: &str, damage: &dyn Fn(&Path)| -> String {
        let dir = tmp.path().join(name);
        copy_dir(&b.base, &dir);
        damage(&dir);
        let out = verify(&dir, &[]);
        assert_eq!(out.status.code(), Some(1), "{name}: {}", stderr(&out));
        stderr(&out)
    };
    let edit_manifest = |dir: &Path, edit: &dyn Fn(&mut Value)| {
        let mut m = manifest(dir);
        edit(&mut m);
        std::fs::write(dir.join("manifest.json"), m.to_string()).expect("write");
    };
    type Edit = fn(&mut Value);
    let edits: [(&str, Edit); 7] = [
        ("seed", |m| m["settings"]["seed"] = Value::from(8)),
        ("max_tokens", |m| {
            m["settings"]["max_tokens"] = Value::from(1)
        }),
        ("dedup", |m| m["settings"]["dedup"] = Value::Null),
        ("tokens", |m| {
            m["tokens"] = Value::from(m["tokens"].as_u64().expect("tokens") + 1)
        }),
        ("name", |m| m["name"] = Value::from("other")),
        ("read_kept", |m| {
            for key in ["read", "kept"] {
                let n = m["sources"]["chat"][key].as_u64().expect("count");
                m["sources"]["chat"][key] = Value::from(n + 1);
            }
        }),
        ("sealed_again_elsewhere", |m| {
            m["manifest_sha256"] = Value::from("0".repeat(64));
        }),
    ];
    for (name, edit) in edits {
        let message = damaged(name, &|dir| edit_manifest(dir, &|m| edit(m)));
        let path = tmp.path().join(name).join("manifest.json");
        assert!(
            message.starts_with(&format!(
                "error: `{}`: the manifest was edited after the build: its content hashes to ",
                path.display()
            )) && message.contains(", but its manifest_sha256 records "),
            "{name}: {message}"
        );
        if name != "sealed_again_elsewhere" {
            assert!(
                message.ends_with(&format!("records {seal}\n")),
                "{name}: {message}"
            );
        }
    }
    let message = damaged("unsealed", &|dir| {
        edit_manifest(dir, &|m| {
            m.as_object_mut().expect("object").remove("manifest_sha256");
        })
    });
    assert!(message.contains("no manifest_sha256"), "{message}");

    // Names that leave the directory: refused before anything is read.
    let outside = tmp.path().join("outside.arrow");
    std::fs::copy(
        b.base.join(m["shards"][0]["file"].as_str().expect("shard")),
        &outside,
    )
    .expect("copy");
    for (name, file) in [
        ("dotdot", "../outside.arrow".to_owned()),
        ("absolute", outside.display().to_string()),
        ("nested", "sub/data.arrow".to_owned()),
    ] {
        let message = damaged(name, &|dir| {
            edit_manifest(dir, &|m| m["shards"][0]["file"] = Value::from(file.clone()))
        });
        assert!(
            message.contains(&format!(
                "names the shard `{file}`, which is not a file name inside the dataset directory"
            )),
            "{name}: {message}"
        );
    }
    // A shard replaced by a symbolic link to a copy outside (bytes and hashes all match).
    let shard = m["shards"][0]["file"].as_str().expect("shard");
    let message = damaged("symlink", &|dir| {
        std::fs::remove_file(dir.join(shard)).expect("rm");
        std::os::unix::fs::symlink(&outside, dir.join(shard)).expect("symlink");
    });
    assert!(
        message.contains(&format!(
            "`{}` is a symbolic link: the files of a dataset are plain files inside its directory",
            tmp.path().join("symlink").join(shard).display()
        )),
        "{message}"
    );
}

/// A closed stderr loses the messages, not the exit status: no panic (101).
#[test]
fn verify_with_a_closed_stderr_exits_with_its_status() {
    let b = builds();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("edited");
    copy_dir(&b.base, &dir);
    let mut m = manifest(&dir);
    m["settings"]["seed"] = Value::from(8);
    std::fs::write(dir.join("manifest.json"), m.to_string()).expect("write");
    for (path, code) in [(&b.base, 0), (&dir, 1)] {
        let mut child = bin()
            .arg("verify")
            .arg(path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        // Both pipes closed before the process writes to them.
        drop(child.stderr.take());
        drop(child.stdout.take());
        let status = child.wait().expect("wait");
        assert_eq!(status.code(), Some(code), "{}", path.display());
    }
}

/// `verify` polling a directory that builds keep replacing (two different datasets, swapped
/// in turn): every run either passes or says the dataset changed during it, never that it is
/// damaged (a mix of the old manifest and the new shards).
#[test]
fn verify_during_repeated_rebuild_swaps_never_reports_damage() {
    const ROUNDS: usize = 6;
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = variant(tmp.path(), BASE);
    let b = tmp.path().join("pipeline-b.yaml");
    let yaml = std::fs::read_to_string(&a).expect("pipeline");
    std::fs::write(&b, yaml.replace("seed: 7", "seed: 8")).expect("write");
    let out = build(&a, &[]);
    let done = std::sync::atomic::AtomicBool::new(false);
    let (mut passed, mut changed) = (0, 0);
    std::thread::scope(|s| {
        let builder = s.spawn(|| {
            for round in 0..ROUNDS {
                build(if round % 2 == 0 { &b } else { &a }, &[]);
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        while !done.load(std::sync::atomic::Ordering::SeqCst) && !builder.is_finished() {
            let v = verify(&out, &[]);
            if v.status.success() {
                passed += 1;
            } else if stderr(&v).contains("changed during verify, retry") {
                changed += 1;
            } else {
                panic!("verify during a swap reported: {}", stderr(&v));
            }
        }
        builder.join().expect("the builds succeed");
    });
    assert!(
        passed + changed >= ROUNDS,
        "{passed} + {changed} verify runs"
    );
    // Both datasets were swapped in: the last is the one built from `a` (seed 7).
    assert_eq!(manifest(&out)["settings"]["seed"], 7);
    assert!(verify(&out, &[]).status.success());
}

#[test]
fn verify_rebuild_reproduces_every_byte_and_catches_a_changed_input() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pipeline = variant(tmp.path(), BASE);
    let out = build(&pipeline, &[]);
    let ok = verify(&out, &["--rebuild", "--threads", "1"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(
        stderr(&ok)
            .ends_with("rebuilt from the recorded pipeline: all 14 files are byte-identical\n"),
        "{}",
        stderr(&ok)
    );
    // Nothing is left behind next to the output.
    let mut names: Vec<String> = std::fs::read_dir(tmp.path())
        .expect("read")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // `out.lock` is the first build's lock file (kept beside its output by design).
    assert_eq!(names, ["data", "out", "out.lock", "pipeline.yaml"]);

    // An input edited after the build: the rebuild differs, and says where.
    edit_a_chat_row(&tmp.path().join("data"));
    let failed = verify(&out, &["--rebuild"]);
    assert_eq!(failed.status.code(), Some(1));
    assert!(
        stderr(&failed).contains("differs from the rebuild at byte"),
        "{}",
        stderr(&failed)
    );
    // An edited pipeline: refused, naming the copy to restore.
    std::fs::write(&pipeline, BASE.replace("seed: 7", "seed: 9")).expect("write");
    let refused = verify(&out, &["--rebuild"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains(&format!(
            "has changed since this dataset was built; restore it from `{}`",
            out.join("pipeline.yaml").display()
        )),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn build_locked_pins_local_files_and_template_variables() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pipeline = variant(tmp.path(), BASE);
    let p = pipeline.display().to_string();
    let lock = tmp.path().join("pipeline.lock");
    // A local-only pipeline needs a lockfile for `--locked` too.
    let refused = run(&["build", "--locked", &p]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains(&format!(
            "`--locked` was given but there is no lockfile `{}`; run `chatshards lock {p}` first",
            lock.display()
        )),
        "{}",
        stderr(&refused)
    );
    let locked = run(&["lock", &p]);
    assert!(locked.status.success(), "{}", stderr(&locked));
    assert_eq!(
        stderr(&locked),
        format!(
            "Wrote `{}` (0 repos, 0 Hub files, 5 local files)\n",
            lock.display()
        )
    );
    let text = std::fs::read_to_string(&lock).expect("lock");
    assert!(text.contains("  - path: \"data/chat.jsonl\"\n"), "{text}");
    assert!(
        text.ends_with("template_kwargs: \"{\\\"preserve_thinking\\\":false}\"\n"),
        "{text}"
    );

    let out = build(&pipeline, &["--locked"]);
    let m = manifest(&out);
    use sha2::Digest;
    assert_eq!(
        m["pipeline"]["lock"]["sha256"].as_str(),
        Some(hex::encode(sha2::Sha256::digest(text.as_bytes())).as_str())
    );
    assert_eq!(
        std::fs::read_to_string(out.join("pipeline.lock")).expect("copy"),
        text
    );
    let ok = verify(&out, &["--rebuild"]);
    assert!(ok.status.success(), "{}", stderr(&ok));

    // A changed local file and template variable: `build --locked` and `lock --check` refuse,
    // naming both.
    edit_a_chat_row(&tmp.path().join("data"));
    std::fs::write(
        &pipeline,
        std::fs::read_to_string(&pipeline)
            .expect("read")
            .replace("preserve_thinking: false", "preserve_thinking: true"),
    )
    .expect("write");
    for args in [vec!["build", "--locked", &p], vec!["lock", "--check", &p]] {
        let refused = run(&args);
        assert_eq!(refused.status.code(), Some(1), "{args:?}");
        let message = stderr(&refused);
        assert!(
            message.starts_with(&format!("error: the lockfile `{}` is out of date:\n  - local file `data/chat.jsonl` changed: locked ", lock.display())),
            "{args:?}: {message}"
        );
        assert!(
            message.contains("\n  - template variables changed from {\"preserve_thinking\":false} to {\"preserve_thinking\":true}\n"),
            "{args:?}: {message}"
        );
    }
    // Relocking accepts the new inputs.
    assert!(run(&["lock", &p]).status.success());
    assert!(run(&["lock", "--check", &p]).status.success());
}

#[test]
fn the_shipped_demo_lock_is_current() {
    let out = run(&["lock", "--check", &root("pipelines/demo.yaml")]);
    assert!(out.status.success(), "{}", stderr(&out));
}
