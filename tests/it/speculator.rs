//! `format: speculator`: pre-tokenized rows (`input_ids`, `loss_mask`, `primary_id`) as
//! speculators' own regeneration writes them (tests/fixtures/speculator/regenerated.jsonl, from
//! tests/oracle/gen_speculator_rows.py), curated beside conversation sources and passed
//! through byte for byte.

use crate::common;
use common::{bin, json_lines, manifest, ok, rows, stderr, ROOT};

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

const FIXTURE: &str = "tests/fixtures/speculator/regenerated.jsonl";

/// The fixture's rows, in file order: (id, input_ids, loss_mask).
fn fixture() -> Vec<(String, Vec<u32>, Vec<u8>)> {
    std::fs::read_to_string(Path::new(ROOT).join(FIXTURE))
        .expect("fixture")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("json");
            let list = |k: &str| -> Vec<u64> {
                v[k].as_array()
                    .expect("list")
                    .iter()
                    .map(|x| x.as_u64().expect("int"))
                    .collect()
            };
            (
                v["id"].as_str().expect("id").to_owned(),
                list("input_ids").into_iter().map(|x| x as u32).collect(),
                list("loss_mask").into_iter().map(|x| x as u8).collect(),
            )
        })
        .collect()
}

/// A pipeline in `dir` over a copy of the fixture (plus `extra_lines`) as source `spec`;
/// `conversations` adds the demo's chat source; `settings` goes before `sources:` and
/// `spec_settings` under the `spec` source.
fn pipeline(
    dir: &Path,
    extra_lines: &str,
    conversations: Option<&str>,
    settings: &str,
    spec_settings: &str,
) -> PathBuf {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    let mut text = std::fs::read_to_string(Path::new(ROOT).join(FIXTURE)).expect("fixture");
    text.push_str(extra_lines);
    std::fs::write(data.join("regenerated.jsonl"), text).expect("data");
    let chat = match conversations {
        Some(settings) => format!(
            "  - name: chat\n    files: [{ROOT}/tests/fixtures/demo/chat.jsonl]\n    format: openai\n{settings}"
        ),
        None => String::new(),
    };
    let yaml = format!(
        "name: speculator-test\nseed: 7\n\
         tokenizer: {{path: {ROOT}/templates/qwen3.6/tokenizer.json.zst}}\n\
         template: {{path: {ROOT}/templates/qwen3.6/chat_template.jinja}}\n\
         max_tokens: 8192\nmin_supervised_tokens: 3\n{settings}\
         sources:\n  - name: spec\n    files: [data/regenerated.jsonl]\n    format: speculator\n{spec_settings}{chat}\
         output: {{dir: out, rows_per_shard: 2}}\n"
    );
    let p = dir.join("pipeline.yaml");
    std::fs::write(&p, yaml).expect("pipeline");
    p
}

fn build(pipeline: &Path, threads: usize) -> Output {
    bin()
        .args(["build", "--quiet", "--threads", &threads.to_string()])
        .arg(pipeline)
        .output()
        .expect("run")
}

/// The output rows of source `source`, by sample id.
fn rows_of(out: &Path, source: &str) -> BTreeMap<String, (Vec<u32>, Vec<u8>)> {
    rows(out)
        .into_iter()
        .filter(|(id, _)| id.starts_with(&format!("{source}:")))
        .collect()
}

#[test]
fn rows_pass_through_byte_for_byte_with_duplicates_and_short_rows_accounted_for() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = pipeline(tmp.path(), "", None, "", "");
    ok(build(&p, 2));
    let out = tmp.path().join("out");
    let input = fixture();
    assert_eq!(
        input.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(),
        ["c1_gen0", "c1_gen1", "c2_gen0", "c3_gen0", "c4_gen0"]
    );
    // c3_gen0 is c1_gen0 regenerated alike (a duplicate); c4_gen0 supervises 2 tokens.
    assert_eq!((&input[3].1, &input[3].2), (&input[0].1, &input[0].2));
    assert_eq!(input[4].2.iter().filter(|&&m| m == 1).count(), 2);
    let want: BTreeMap<String, (Vec<u32>, Vec<u8>)> = [0, 1, 2]
        .into_iter()
        .map(|i| {
            (
                format!("spec:0:{i}:0"),
                (input[i].1.clone(), input[i].2.clone()),
            )
        })
        .collect();
    assert_eq!(rows(&out), want);

    let m = manifest(&out);
    let s = &m["sources"]["spec"];
    assert_eq!(s["read"], 5);
    assert_eq!(s["kept"], 3);
    assert_eq!(s["deduplicated"], 1);
    assert_eq!(s["filtered"]["too_few_supervised"], 1);
    assert_eq!(s["rows"], 3);
    assert_eq!(s["tokens"], 25 + 51 + 38);
    assert_eq!(s["supervised_tokens"], 8 + 13 + 10);

    let filtered = json_lines(&out.join("filtered.jsonl"));
    let brief: Vec<(String, String, String)> = filtered
        .iter()
        .map(|f| {
            (
                f["sample_id"].as_str().unwrap_or("").to_owned(),
                f["reason"].as_str().unwrap_or("").to_owned(),
                f["duplicate_of"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        brief,
        [
            ("spec:0:3".into(), "deduplicated".into(), "spec:0:0".into()),
            (
                "spec:0:4".into(),
                "too_few_supervised".into(),
                String::new()
            ),
        ]
    );
    // No conversation to write for token rows.
    assert_eq!(
        std::fs::read(out.join("conversations.jsonl")).expect("read"),
        b""
    );
    assert_eq!(std::fs::read(out.join("rejects.jsonl")).expect("read"), b"");
}

#[test]
fn each_broken_row_is_rejected_with_its_field() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let bad = [
        r#"{"primary_id": "x1", "loss_mask": [0, 1]}"#,
        r#"{"input_ids": [248045, 846], "loss_mask": [0]}"#,
        r#"{"input_ids": [248045, 999999], "loss_mask": [0, 1]}"#,
        r#"{"input_ids": [248045, -1], "loss_mask": [0, 1]}"#,
        r#"{"input_ids": [248045, 846], "loss_mask": [0, 2]}"#,
        r#"{"input_ids": [248045, 846], "loss_mask": [0, 0]}"#,
        r#"{"input_ids": [], "loss_mask": []}"#,
        r#"{"input_ids": "248045 846", "loss_mask": [0, 1]}"#,
        r#"{"primary_id": {"a": 1}, "input_ids": [248045, 846], "loss_mask": [0, 1]}"#,
        r#"not json"#,
    ];
    let extra: String = bad.iter().map(|l| format!("{l}\n")).collect();
    let p = pipeline(tmp.path(), &extra, None, "", "");
    ok(build(&p, 1));
    let out = tmp.path().join("out");
    let rejects = json_lines(&out.join("rejects.jsonl"));
    let got: Vec<(u64, String, String)> = rejects
        .iter()
        .map(|r| {
            (
                r["row"].as_u64().unwrap_or(0),
                r["reason"].as_str().unwrap_or("").to_owned(),
                r["message"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let vocab = 248077;
    let want = [
        (6, "missing_field", "`input_ids` is missing".to_owned()),
        (
            7,
            "invalid_field",
            "`input_ids` has 2 tokens but `loss_mask` has 1 values".to_owned(),
        ),
        (
            8,
            "invalid_field",
            format!("`input_ids[1]` is 999999, outside the tokenizer's vocabulary of {vocab} ids"),
        ),
        (
            9,
            "invalid_field",
            "`input_ids[1]` is -1, not a token id".to_owned(),
        ),
        (
            10,
            "invalid_field",
            "`loss_mask[1]` is 2, not 0 or 1".to_owned(),
        ),
        (
            11,
            "no_assistant_turn",
            "`loss_mask` supervises no token (every value is 0)".to_owned(),
        ),
        (12, "empty_conversation", "`input_ids` is empty".to_owned()),
        (
            13,
            "invalid_field",
            "`input_ids` is a JSON string, not a list".to_owned(),
        ),
        (
            14,
            "invalid_field",
            "`primary_id` is a JSON object, not a string or an integer".to_owned(),
        ),
    ];
    let want: Vec<(u64, String, String)> = want
        .into_iter()
        .map(|(row, reason, message)| (row, reason.to_owned(), message))
        .collect();
    assert_eq!(got[..want.len()], want[..]);
    assert_eq!(got.len(), want.len() + 1);
    assert_eq!(got[want.len()].1, "invalid_json");
    let s = &manifest(&out)["sources"]["spec"];
    assert_eq!(s["read"], 15);
    assert_eq!(s["kept"], 3);
    assert_eq!(s["rejected"]["invalid_field"], 6);
}

#[test]
fn a_speculator_source_mixes_with_a_conversation_source_by_rows_and_by_tokens() {
    let input = fixture();
    let want: BTreeMap<String, (Vec<u32>, Vec<u8>)> = [0, 1, 2]
        .into_iter()
        .map(|i| {
            (
                format!("spec:0:{i}:0"),
                (input[i].1.clone(), input[i].2.clone()),
            )
        })
        .collect();
    // Rows: 2 of each (the seeded sample of the token rows takes c1_gen1 and c2_gen0). Tokens:
    // the token rows have 114 of the 1000 asked; the rest goes to `chat`, whose last row
    // passes the total (1978 + 114 = 2092).
    for (mix, spec_rows, chat_kept, chat_tokens) in [
        ("mix: {target: rows, total: 4}\n", 2, 2, 196),
        (
            "mix: {target: tokens, total: 2000, shortfall: redistribute}\n",
            3,
            10,
            1978,
        ),
    ] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let p = pipeline(
            tmp.path(),
            "",
            Some("    weight: 1\n"),
            mix,
            "    weight: 1\n",
        );
        ok(build(&p, 2));
        let out = tmp.path().join("out");
        let spec = rows_of(&out, "spec");
        let m = manifest(&out);
        assert_eq!(spec.len(), spec_rows, "{mix}: {spec:?}");
        if spec_rows == 2 {
            let ids: Vec<&String> = spec.keys().collect();
            assert_eq!(ids, ["spec:0:1:0", "spec:0:2:0"], "{mix}");
        }
        // Whatever the mix takes of the token rows, it takes them whole.
        for (id, row) in &spec {
            assert_eq!(Some(row), want.get(id), "{mix}: {id}");
        }
        assert_eq!(m["sources"]["chat"]["kept"], chat_kept, "{mix}");
        assert_eq!(m["sources"]["chat"]["tokens"], chat_tokens, "{mix}");
        assert_eq!(
            m["sources"]["spec"]["tokens"],
            spec.values().map(|r| r.0.len()).sum::<usize>(),
            "{mix}"
        );
    }
}

#[test]
fn output_is_identical_at_1_and_4_threads() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut outs = Vec::new();
    for threads in [1, 4] {
        let dir = tmp.path().join(format!("t{threads}"));
        let p = pipeline(
            &dir,
            "",
            Some("    weight: 1\n"),
            "mix: {target: rows, total: 40, shortfall: redistribute}\n",
            "    weight: 1\n",
        );
        ok(build(&p, threads));
        outs.push(dir.join("out"));
    }
    let (a, b) = (common::snapshot(&outs[0]), common::snapshot(&outs[1]));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (name, bytes) in &a {
        if name == "manifest.json" {
            continue;
        }
        assert!(bytes == &b[name], "{name} differs between 1 and 4 threads");
    }
    let (m1, m2) = (manifest(&outs[0]), manifest(&outs[1]));
    assert_eq!(m1["sources"], m2["sources"]);
    assert_eq!(m1["shards"], m2["shards"]);
    assert_eq!(rows_of(&outs[0], "spec").len(), 3);
}

#[test]
fn settings_that_read_text_are_refused_for_a_speculator_source() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            "",
            "    filters:\n      - regex: {exclude: [\"x\"]}\n",
            "sources[0] (`spec`): filter `regex` reads text, and format `speculator` rows are token ids (only `tokens` and `supervised_tokens` filters apply)",
        ),
        (
            "near_dup: {sources: [spec]}\n",
            "",
            "sources[0] (`spec`): `near_dup.sources` names it, but near-duplicate removal reads text and format `speculator` rows are token ids (exact `dedup` applies)",
        ),
        (
            "",
            "    columns: {messages: conversations}\n",
            "sources[0] (`spec`): `columns.messages` does not apply to this format",
        ),
        (
            "regenerate: {endpoints: [\"http://127.0.0.1:9\"], model: m}\n",
            "",
            "sources[0] (`spec`): `regenerate` does not apply to format `speculator` (its rows are token ids, not conversations); set `regenerate: false` on this source",
        ),
    ];
    for (settings, spec_settings, message) in cases {
        let p = pipeline(tmp.path(), "", None, settings, spec_settings);
        for command in ["check", "build"] {
            let out = bin().arg(command).arg(&p).output().expect("run");
            assert!(!out.status.success(), "{command} {message}");
            assert!(
                stderr(&out).contains(message),
                "{command}: {}\nwanted: {message}",
                stderr(&out)
            );
        }
    }
    // Token filters and renamed columns apply.
    let p = pipeline(
        tmp.path(),
        "",
        None,
        "",
        "    columns: {input_ids: input_ids, loss_mask: loss_mask, id: primary_id}\n    filters:\n      - tokens: {max: 40}\n",
    );
    ok(build(&p, 1));
    let out = tmp.path().join("out");
    let ids: Vec<String> = rows(&out).into_keys().collect();
    assert_eq!(ids, ["spec:0:0:0", "spec:0:2:0"]);
}

#[test]
fn truncate_cuts_a_row_at_the_end_of_an_assistant_turn_and_keeps_its_prefix() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let input = fixture();
    // c1_gen1 with its history's answer supervised too (not speculators' output: a row of a
    // tool that trains every assistant turn).
    let (ids, mut mask) = (input[1].1.clone(), input[1].2.clone());
    assert_eq!(mask[15..=22], [0; 8]);
    for m in &mut mask[15..=22] {
        *m = 1;
    }
    let row = serde_json::json!({"id": "both", "input_ids": ids, "loss_mask": mask});
    let p = pipeline(tmp.path(), &format!("{row}\n"), None, "", "");
    let yaml = std::fs::read_to_string(&p).expect("read");
    let yaml = yaml.replace(
        "max_tokens: 8192\n",
        "max_tokens: 30\nlength_policy: truncate\n",
    );
    std::fs::write(&p, yaml).expect("write");
    ok(build(&p, 1));
    let out = tmp.path().join("out");
    // The cut: after the first answer's `<|im_end|>\n` (24 tokens), the input's own prefix.
    let want: BTreeMap<String, (Vec<u32>, Vec<u8>)> = [
        (
            "spec:0:0:0".to_owned(),
            (input[0].1.clone(), input[0].2.clone()),
        ),
        (
            "spec:0:5:0".to_owned(),
            (ids[..24].to_vec(), mask[..24].to_vec()),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(rows(&out), want);
    assert_eq!(ids[22..24], [248046, 198]);
    // c1_gen1 cut there supervises nothing, c2_gen0 has no turn end within 30 tokens.
    let s = &manifest(&out)["sources"]["spec"];
    assert_eq!(s["truncated_rows"], 1);
    assert_eq!(s["filtered"]["too_few_supervised"], 2);
    assert_eq!(s["filtered"]["too_long"], 1);
    assert_eq!(s["kept"], 2);

    // Even when no supervised token is asked, a row cut down to none is left out (speculators
    // drops such rows); c4_gen0 (2 supervised) is kept then.
    let yaml = std::fs::read_to_string(&p).expect("read");
    std::fs::write(
        &p,
        yaml.replace("min_supervised_tokens: 3", "min_supervised_tokens: 0"),
    )
    .expect("write");
    ok(build(&p, 1));
    let got: Vec<String> = rows(&out).into_keys().collect();
    assert_eq!(got, ["spec:0:0:0", "spec:0:4:0", "spec:0:5:0"]);
    let s = &manifest(&out)["sources"]["spec"];
    assert_eq!(s["filtered"]["too_few_supervised"], 1);
}
