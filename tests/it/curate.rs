//! End-to-end tests of curation choices: selection keys, `take` against the mix, exact dedup of
//! rows that become the same training row, image rows, the language filter.

use crate::common;
use common::{bin, manifest, ok, run, stderr};

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A pipeline with the repository's Qwen3.6 tokenizer and template, written into `dir`.
fn pipeline(dir: &Path, body: &str) -> PathBuf {
    common::pipeline(dir, &format!("min_supervised_tokens: 1\n{body}"))
}

/// The `id`s of the kept conversations.
fn kept_ids(out: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(out.join("conversations.jsonl"))
        .expect("conversations.jsonl")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("json");
            v["id"].as_str().expect("id").to_owned()
        })
        .collect()
}

fn chat_rows(tag: &str, n: usize) -> String {
    (0..n)
        .map(|i| {
            serde_json::json!({"messages": [
                {"role": "user", "content": format!("{tag} question {i}")},
                {"role": "assistant", "content": format!("{tag} answer {i}")}]})
            .to_string()
                + "\n"
        })
        .collect()
}

#[test]
fn files_with_the_same_base_name_get_independent_samples_that_move_with_the_tree() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let write_tree = |at: &Path| {
        for folder in ["x", "y"] {
            std::fs::create_dir_all(at.join(folder)).expect("mkdir");
            std::fs::write(at.join(folder).join("part.jsonl"), chat_rows(folder, 1000))
                .expect("write");
        }
    };
    // The same tree in two places, read through different relative paths.
    let first = tmp.path().join("one");
    write_tree(&first.join("data"));
    let second = tmp.path().join("two/pipelines");
    write_tree(&tmp.path().join("two/corpus/deeper"));
    let body = |x: &str, y: &str| {
        format!(
            "sources:\n  - name: s\n    files: [{x}, {y}]\n    format: openai\n    take: 400\noutput:\n  dir: out\n"
        )
    };
    let p1 = pipeline(&first, &body("data/x/part.jsonl", "data/y/part.jsonl"));
    let p2 = pipeline(
        &second,
        &body(
            "../corpus/deeper/x/part.jsonl",
            "./../corpus/deeper/y/part.jsonl",
        ),
    );
    ok(run(&["build"], &p1));
    ok(run(&["build"], &p2));
    let ids = kept_ids(&first.join("out"));
    assert_eq!(ids.len(), 400);
    let rows_of = |file: &str| -> BTreeSet<String> {
        ids.iter()
            .filter_map(|id| id.strip_prefix(&format!("s:{file}:")))
            .map(|rest| rest.split(':').next().expect("row").to_owned())
            .collect()
    };
    let (x, y) = (rows_of("0"), rows_of("1"));
    assert_eq!(x.len() + y.len(), 400);
    // Keyed by base name, both files would give the same row numbers (all ~200 shared); keyed
    // by their own paths, ~40 are shared by chance.
    let shared = x.intersection(&y).count();
    assert!(shared < 100, "{shared} row numbers picked in both files");
    // The moved tree: the same sample, the same bytes.
    assert_eq!(ids, kept_ids(&second.join("out")));
    let (m1, m2) = (manifest(&first.join("out")), manifest(&second.join("out")));
    assert_eq!(m1["dataset_sha256"], m2["dataset_sha256"]);
    for shard in m1["shards"].as_array().expect("shards") {
        let name = shard["file"].as_str().expect("file");
        assert_eq!(
            std::fs::read(first.join("out").join(name)).expect("shard"),
            std::fs::read(second.join("out").join(name)).expect("shard"),
        );
    }
}

/// The 1-based line of the first line of `text` that starts (after indentation) with `start`.
fn line_of(path: &Path, start: &str) -> usize {
    std::fs::read_to_string(path)
        .expect("pipeline")
        .lines()
        .position(|l| l.trim_start().starts_with(start))
        .expect("line")
        + 1
}

#[test]
fn a_take_beyond_the_mix_total_is_a_config_error_at_its_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (a, b) = (tmp.path().join("a.jsonl"), tmp.path().join("b.jsonl"));
    std::fs::write(&a, chat_rows("a", 600)).expect("write");
    std::fs::write(&b, chat_rows("b", 600)).expect("write");
    let p = pipeline(
        tmp.path(),
        &format!(
            "mix: {{target: rows, total: 300}}\nsources:\n  - name: a\n    files: [{}]\n    format: openai\n    take: 500\n  - name: b\n    files: [{}]\n    format: openai\n    weight: 1\noutput:\n  dir: out\n",
            a.display(),
            b.display()
        ),
    );
    let expected = format!(
        "{}:{}: sources[0].take: `take: 500` of `a` is more than the mix's `total: 300` (a mix \
         never gives more than its total): lower it, or give the source a `weight` instead",
        p.display(),
        line_of(&p, "take: 500")
    );
    for command in ["check", "build"] {
        let out = run(&[command], &p);
        assert!(!out.status.success(), "{command}");
        assert!(
            stderr(&out).contains(&expected),
            "{command}: {}",
            stderr(&out)
        );
    }
    assert!(!tmp.path().join("out").exists());

    // `take`s that add up to the whole total leave the weighted source nothing.
    let p = pipeline(
        tmp.path(),
        &format!(
            "mix: {{target: rows, total: 300}}\nsources:\n  - name: a\n    files: [{}]\n    format: openai\n    take: 300\n  - name: b\n    files: [{}]\n    format: openai\n    weight: 1\noutput:\n  dir: out\n",
            a.display(),
            b.display()
        ),
    );
    let out = run(&["build"], &p);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!(
            "{}:{}: sources[1].weight: the `take`s of `a` add up to the mix's whole `total: \
             300`, leaving nothing for the weighted sources: lower the `take`s or raise `total`",
            p.display(),
            line_of(&p, "weight: 1")
        )),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_take_beyond_its_source_fails_check_and_build() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = tmp.path().join("a.jsonl");
    std::fs::write(&a, chat_rows("a", 42)).expect("write");
    let p = pipeline(
        tmp.path(),
        &format!(
            "sources:\n  - name: a\n    files: [{}]\n    format: openai\n    take: 1000\noutput:\n  dir: out\n",
            a.display()
        ),
    );
    let out = run(&["check"], &p);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!(
            "{}:{}: sources[0].take: `take: 1000` but the files of `a` hold only 42 rows: the \
             build would fail (lower `take` to at most 42, or write `take: all`)",
            p.display(),
            line_of(&p, "take: 1000")
        )),
        "{}",
        stderr(&out)
    );
    let out = run(&["build"], &p);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "source `a`: `take: 1000` but its files hold only 42 rows (lower `take` to at most \
             42, or write `take: all`)"
        ),
        "{}",
        stderr(&out)
    );
    assert!(!tmp.path().join("out").exists());
}

#[test]
fn a_short_source_with_repeats_says_what_it_has() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = tmp.path().join("a.jsonl");
    std::fs::write(&a, chat_rows("a", 50)).expect("write");
    let p = pipeline(
        tmp.path(),
        &format!(
            "mix: {{target: rows, total: 150, max_repeats: 1}}\nsources:\n  - name: a\n    files: [{}]\n    format: openai\n    take: 150\noutput:\n  dir: out\n",
            a.display()
        ),
    );
    let out = run(&["build"], &p);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "source `a` cannot fill its quota: it needs 150 rows and has 50 rows after filters \
             and deduplication, 100 rows with `max_repeats: 1` (lower its `take`, raise \
             `max_repeats` or `shortfall: redistribute` in `mix`, or add rows)"
        ),
        "{}",
        stderr(&out)
    );
}

#[test]
fn rows_that_become_the_same_training_row_are_duplicates() {
    // Surrounding whitespace per message and NFD vs NFC: the same input_ids and loss_mask.
    let tmp = tempfile::tempdir().expect("tempdir");
    let row = |system: &str, user: &str, assistant: &str| {
        serde_json::json!({"messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
            {"role": "assistant", "content": assistant}]})
        .to_string()
    };
    let rows = [
        row("Be brief.", "Où est le café ?", "Au coin de la rue."),
        row(
            "  Be brief.\n",
            "\tOù est le café ?  ",
            "\nAu coin de la rue.\n\n",
        ),
        row(
            "Be brief.",
            "Ou\u{300} est le cafe\u{301} ?",
            "Au coin de la rue.",
        ),
        // Case is seen by the model: kept.
        row("Be brief.", "où est le café ?", "Au coin de la rue."),
    ];
    let a = tmp.path().join("a.jsonl");
    std::fs::write(&a, rows.join("\n") + "\n").expect("write");
    for key in ["conversation", "prompt"] {
        let dir = tmp.path().join(key);
        let p = pipeline(
            &dir,
            &format!(
                "dedup: {{key: {key}}}\nsources:\n  - name: a\n    files: [{}]\n    format: openai\noutput:\n  dir: out\n",
                a.display()
            ),
        );
        ok(run(&["build"], &p));
        let m = manifest(&dir.join("out"));
        assert_eq!(m["sources"]["a"]["deduplicated"], 2, "{key}");
        assert_eq!(m["sources"]["a"]["kept"], 2, "{key}");
        assert_eq!(
            kept_ids(&dir.join("out")),
            BTreeSet::from(["a:0:0".to_owned(), "a:0:3".to_owned()]),
            "{key}"
        );
    }
}

#[test]
fn image_rows_of_llama_factory_and_llava_are_rejected_as_multimodal() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // LLaMA-Factory's mllm_demo layout (openai messages + `images`).
    let factory = [
        r#"{"messages":[{"role":"user","content":"<image>Who are they?"},{"role":"assistant","content":"They're Kane and Gretzka from Bayern Munich."},{"role":"user","content":"What are they doing?<image>"},{"role":"assistant","content":"They are celebrating on the soccer field."}],"images":["mllm_demo_data/1.jpg","mllm_demo_data/1.jpg"]}"#,
        r#"{"messages":[{"role":"user","content":"<image>Who is he?"},{"role":"assistant","content":"He's Thomas Muller from Bayern Munich."}],"images":["mllm_demo_data/2.jpg"]}"#,
        // An empty media column is a text row.
        r#"{"messages":[{"role":"user","content":"Who won the 2014 World Cup?"},{"role":"assistant","content":"Germany."}],"images":[]}"#,
    ];
    // LLaVA's layout (ShareGPT conversations + `image`).
    let llava = [
        r#"{"id":"000000033471","image":"coco/train2017/000000033471.jpg","conversations":[{"from":"human","value":"<image>\nWhat are the colors of the bus in the image?"},{"from":"gpt","value":"The bus in the image is white and red."}]}"#,
        r#"{"id":"plain-1","conversations":[{"from":"human","value":"Name a red fruit."},{"from":"gpt","value":"A strawberry."}]}"#,
    ];
    let (f, l) = (
        tmp.path().join("mllm.jsonl"),
        tmp.path().join("llava.jsonl"),
    );
    std::fs::write(&f, factory.join("\n") + "\n").expect("write");
    std::fs::write(&l, llava.join("\n") + "\n").expect("write");
    let p = pipeline(
        tmp.path(),
        &format!(
            "sources:\n  - name: mllm\n    files: [{}]\n    format: openai\n  - name: llava\n    files: [{}]\n    format: sharegpt\noutput:\n  dir: out\n",
            f.display(),
            l.display()
        ),
    );
    ok(run(&["build"], &p));
    let out = tmp.path().join("out");
    let m = manifest(&out);
    assert_eq!(m["sources"]["mllm"]["rejected"]["multimodal_content"], 2);
    assert_eq!(m["sources"]["mllm"]["kept"], 1);
    assert_eq!(m["sources"]["llava"]["rejected"]["multimodal_content"], 1);
    assert_eq!(m["sources"]["llava"]["kept"], 1);
    let rejects = std::fs::read_to_string(out.join("rejects.jsonl")).expect("rejects");
    let messages: Vec<String> = rejects
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("json");
            format!("{} {}", v["sample_id"], v["message"])
        })
        .collect();
    assert_eq!(
        messages,
        [
            "\"mllm:0:0\" \"`images` holds 2 media files; only text is supported\"",
            "\"mllm:0:1\" \"`images` holds 1 media file; only text is supported\"",
            "\"llava:0:0\" \"`image` holds 1 media file; only text is supported\"",
        ]
    );
}

#[test]
fn normalize_takes_a_sources_columns_and_tags() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("ua.jsonl");
    std::fs::write(
        &file,
        r#"{"dialog":[{"from":"user","value":"Hi there"},{"from":"assistant","value":"Hello!"}]}"#
            .to_owned()
            + "\n",
    )
    .expect("write");
    let normalize = |extra: &[&str]| {
        bin()
            .args(["normalize", "--format", "sharegpt"])
            .args(extra)
            .arg(&file)
            .output()
            .expect("run chatshards")
    };
    // Without the mapping: no `conversations` column.
    let out = normalize(&[]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    let out = ok(normalize(&[
        "--columns",
        "{messages: dialog}",
        "--tags",
        "{user_tag: user, assistant_tag: assistant}",
    ]));
    let record: Value = serde_json::from_slice(&out.stdout).expect("one record");
    assert_eq!(
        record["conversations"],
        serde_json::json!([
            {"from": "human", "value": "Hi there"},
            {"from": "gpt", "value": "Hello!"}
        ])
    );
    let out = normalize(&["--tags", "{user: x}"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--tags `{user: x}`: unknown field `user`"),
        "{}",
        stderr(&out)
    );
}
