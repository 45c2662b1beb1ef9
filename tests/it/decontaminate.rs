//! Decontamination against the real HumanEval problems (`tests/fixtures/benchmarks/`): problems
//! planted whole, as a fragment of a longer prompt, lightly and heavily reworded, as a code
//! answer and in a tool call; the test asserts exactly which rows are dropped and which item
//! each names. An MBPP-shaped sample covers integer ids and items shorter than one n-gram.

use chatshards::conversation::{Conversation, Message, ToolCall};
use chatshards::curate::decontaminate::{
    load_items, BenchmarkColumns, BenchmarkItems, DecontamConfig, DecontamIndex, Hit,
};
use indexmap::IndexMap;
use serde_json::Value;
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/benchmarks")
        .join(name)
}

/// HumanEval's problems read with serde_json directly (not through the code under test).
fn humaneval_field(task: &str, field: &str) -> String {
    let text = std::fs::read_to_string(fixture("HumanEval.jsonl")).expect("HumanEval.jsonl");
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("json");
        if v["task_id"] == task {
            return v[field].as_str().expect("string").to_string();
        }
    }
    panic!("no {task}");
}

fn humaneval() -> BenchmarkItems {
    load_items(
        "humaneval",
        &[fixture("HumanEval.jsonl")],
        &BenchmarkColumns {
            id: "task_id".into(),
            text: vec!["prompt".into(), "canonical_solution".into()],
        },
    )
    .expect("loads")
}

fn mbpp() -> BenchmarkItems {
    load_items(
        "mbpp",
        &[fixture("mbpp_sample.jsonl")],
        &BenchmarkColumns {
            id: "task_id".into(),
            text: vec!["text".into()],
        },
    )
    .expect("loads")
}

fn config(yaml: &str) -> DecontamConfig {
    let c: DecontamConfig = serde_yaml_ng::from_str(yaml).expect("config");
    c.check().expect("valid");
    c
}

const BENCHMARKS: &str = r#"
benchmarks:
  - {name: humaneval, files: [HumanEval.jsonl], columns: {id: task_id, text: [prompt, canonical_solution]}}
  - {name: mbpp, files: [mbpp_sample.jsonl], columns: {id: task_id, text: [text]}}
"#;

fn chat(user: &str, assistant: &str) -> Conversation {
    Conversation {
        messages: vec![Message::user(user), Message::assistant(assistant)],
        tools: vec![],
    }
}

/// The benchmark and item a row is expected to hit (`filtered.jsonl`'s `text` beside them is
/// tested in the crate's unit tests and on the demo in `cli.rs`).
fn hit(benchmark: &str, item: &str) -> Option<Named> {
    Some((benchmark.into(), item.into()))
}

/// A hit's benchmark and item.
type Named = (String, String);

fn named(hit: Hit) -> Named {
    (hit.benchmark, hit.item)
}

/// The fixture rows, each with the hit the default (13-word) index must report.
fn planted() -> Vec<(&'static str, Conversation, Option<Named>)> {
    let mut rows = Vec::new();
    rows.push((
        "whole HumanEval/0 prompt",
        chat(
            &humaneval_field("HumanEval/0", "prompt"),
            "Here is one way to do it.",
        ),
        hit("humaneval", "HumanEval/0"),
    ));
    rows.push((
        "fragment of HumanEval/10 in a longer prompt",
        chat(
            "I'm building a small string utility library. The docs say: find the shortest \
             palindrome that begins with a supplied string. Algorithm idea is simple. Could you \
             explain what that means, in plain words?",
            "Sure.",
        ),
        hit("humaneval", "HumanEval/10"),
    ));
    rows.push((
        "HumanEval/129's solution as a code answer",
        chat(
            "Write minPath for me.",
            &format!(
                "```python\ndef minPath(grid, k):\n{}```",
                humaneval_field("HumanEval/129", "canonical_solution")
            ),
        ),
        hit("humaneval", "HumanEval/129"),
    ));
    rows.push((
        "HumanEval/35 with one word changed",
        chat(
            &humaneval_field("HumanEval/35", "prompt").replace("maximum", "largest"),
            "m = max(l)",
        ),
        hit("humaneval", "HumanEval/35"),
    ));
    rows.push((
        "HumanEval/2 reworded throughout (no 13 words in a row survive)",
        chat(
            "Take a positive float and split it into its whole part, the biggest integer not \
             above it, and its fractional part, which is always below one. Give back only the \
             fractional part, e.g. 3.5 gives 0.5.",
            "def truncate_number(number: float) -> float:\n    return number % 1.0",
        ),
        None,
    ));
    let mut args = IndexMap::new();
    args.insert(
        "code".to_string(),
        Value::String(humaneval_field("HumanEval/81", "canonical_solution")),
    );
    rows.push((
        "HumanEval/81's solution in a tool call",
        Conversation {
            messages: vec![
                Message::user("Convert these GPAs to letter grades."),
                Message::assistant("").with_tool_calls(vec![ToolCall {
                    id: None,
                    name: "python".into(),
                    arguments: args,
                }]),
            ],
            tools: vec![],
        },
        hit("humaneval", "HumanEval/81"),
    ));
    rows.push((
        "a clean row sharing HumanEval's boilerplate",
        chat(
            "from typing import List\n\n\ndef mean(numbers: List[float]) -> float:\n    \"\"\" \
             Compute the average of the given list of numbers.\n    >>> mean([1.0, 2.0])\n    \
             1.5\n    \"\"\"\n",
            "    return sum(numbers) / len(numbers)\n",
        ),
        None,
    ));
    rows.push((
        "a clean row that adds two numbers",
        chat("def add(x: int, y: int): add two numbers", "return x + y"),
        None,
    ));
    rows.push((
        "a short MBPP item, whole, inside a prompt",
        chat(
            "Please write a function to reverse the words in a given sentence, in Python.",
            "def reverse_words(s): ...",
        ),
        hit("mbpp", "901"),
    ));
    rows.push((
        "part of a short MBPP item only",
        chat(
            "How do I reverse the words in a given sentence?",
            "Split and join.",
        ),
        None,
    ));
    rows.push((
        "a long MBPP item, reformatted",
        chat(
            "WRITE a Python function to count the vowels in a string -- ignoring case, and \
             skipping any character that is not a letter!",
            "ok",
        ),
        hit("mbpp", "902"),
    ));
    rows
}

#[test]
fn planted_humaneval_and_mbpp_items_are_found_exactly() {
    let he = humaneval();
    assert_eq!(he.items.len(), 164);
    assert_eq!(he.items[0].id, "HumanEval/0");
    assert_eq!(he.items[163].id, "HumanEval/163");
    let mb = mbpp();
    assert_eq!(
        mb.items.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        ["901", "902", "903", "904", "905"]
    );
    let index = DecontamIndex::build(&config(BENCHMARKS), &[he, mb]);
    assert!(index.len() > 10_000, "{} n-grams", index.len());
    for (what, row, expected) in planted() {
        assert_eq!(index.check(&row).map(named), expected, "{what}");
    }
}

#[test]
fn scope_limits_what_is_compared() {
    let yaml = format!("scope: user\n{BENCHMARKS}");
    let index = DecontamIndex::build(&config(&yaml), &[humaneval(), mbpp()]);
    let expected: Vec<Option<Named>> = planted()
        .into_iter()
        .map(|(what, _, expected)| {
            // The code answer and the tool call are outside a `user` scope.
            if what.contains("code answer") || what.contains("tool call") {
                None
            } else {
                expected
            }
        })
        .collect();
    let got: Vec<Option<Named>> = planted()
        .iter()
        .map(|(_, r, _)| index.check(r).map(named))
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn character_windows_catch_short_code_fragments() {
    // 12 words of HumanEval/10's solution: below a 13-word n-gram, above a 50-character window.
    let fragment =
        "while not is_palindrome(string[beginning_of_suffix:]):\n    beginning_of_suffix += 1";
    let row = chat("What does this loop do?", fragment);
    let words = DecontamIndex::build(&config(BENCHMARKS), &[humaneval()]);
    assert_eq!(words.check(&row), None);
    let chars = DecontamIndex::build(
        &config(&format!("mode: chars\nwindow: 50\n{BENCHMARKS}")),
        &[humaneval()],
    );
    assert_eq!(
        chars.check(&row).map(named),
        hit("humaneval", "HumanEval/10")
    );
    // Clean code stays clean with windows too.
    assert_eq!(
        chars.check(&chat("Sum a list", "def total(xs):\n    return sum(xs)")),
        None
    );
}

#[test]
fn shipped_fixture_conversations_are_clean() {
    // Every hand-written conversation of the adapter fixtures (all its text at once): none
    // holds a benchmark problem.
    let index = DecontamIndex::build(&config(BENCHMARKS), &[humaneval(), mbpp()]);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut checked = 0;
    for entry in std::fs::read_dir(&root).expect("fixtures") {
        let path = entry.expect("entry").path().join("expected.jsonl");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).expect("json");
            let Some(c) = v.get("conversation") else {
                continue;
            };
            let mut text = String::new();
            strings(c, &mut text);
            assert_eq!(index.check_text(&text), None, "{}: {line}", path.display());
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked} conversations");
}

/// Every string of a fixture value, `{"$join": [...]}` pieces concatenated.
fn strings(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => match o.get("$join") {
            Some(Value::Array(parts)) => {
                for p in parts {
                    out.push_str(p.as_str().unwrap_or_default());
                }
                out.push('\n');
            }
            _ => o.values().for_each(|x| strings(x, out)),
        },
        _ => {}
    }
}

#[test]
fn load_errors_name_the_file_record_and_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bench.jsonl");
    std::fs::write(&path, "{\"id\": \"a\", \"q\": \"x\"}\n{\"id\": \"b\"}\n").expect("write");
    let columns = |id: &str, text: &[&str]| BenchmarkColumns {
        id: id.into(),
        text: text.iter().map(|s| s.to_string()).collect(),
    };
    let err = load_items("b", std::slice::from_ref(&path), &columns("id", &["q"]))
        .expect_err("no q")
        .to_string();
    assert_eq!(
        err,
        format!(
            "benchmark `b`: `{}` record 1: no column `q`",
            path.display()
        )
    );
    std::fs::write(&path, "{\"id\": [1], \"q\": \"x\"}\n").expect("write");
    let err = load_items("b", std::slice::from_ref(&path), &columns("id", &["q"]))
        .expect_err("bad id")
        .to_string();
    assert_eq!(
        err,
        format!(
            "benchmark `b`: `{}` record 0: column `id` is an array, not a string or number",
            path.display()
        )
    );
    std::fs::write(&path, "{\"id\": 1, \"q\": null}\nnot json\n").expect("write");
    let err = load_items("b", std::slice::from_ref(&path), &columns("id", &["q"]))
        .expect_err("null")
        .to_string();
    assert!(
        err.ends_with("record 0: column `q` is null, not a string"),
        "{err}"
    );
    std::fs::write(&path, "").expect("write");
    assert_eq!(
        load_items("b", std::slice::from_ref(&path), &columns("id", &["q"]))
            .map_err(|e| e.to_string()),
        Err("benchmark `b`: its files hold no item".into())
    );
    let missing = dir.path().join("nope.jsonl");
    let err = load_items("b", &[missing], &columns("id", &["q"]))
        .expect_err("missing")
        .to_string();
    assert!(err.starts_with("benchmark `b`: failed to read `"), "{err}");
}

#[test]
fn config_checks() {
    let bad = |yaml: &str| {
        let c: DecontamConfig = serde_yaml_ng::from_str(yaml).expect("parses");
        c.check().expect_err("invalid").to_string()
    };
    assert_eq!(
        bad("benchmarks: [{name: a, columns: {id: i, text: [t]}}]"),
        "decontaminate: benchmark `a`: give either `files` or `hub`"
    );
    assert_eq!(
        bad("benchmarks: [{name: a, files: [x], columns: {id: i, text: [t]}}, {name: a, files: [y], columns: {id: i, text: [t]}}]"),
        "decontaminate: two benchmarks are named `a`"
    );
    assert_eq!(
        bad("ngram: 0\nbenchmarks: [{name: a, files: [x], columns: {id: i, text: [t]}}]"),
        "decontaminate: `ngram` must be at least 1"
    );
    let e = serde_yaml_ng::from_str::<DecontamConfig>("ngrams: 8\nbenchmarks: []")
        .expect_err("unknown field")
        .to_string();
    assert!(e.contains("unknown field `ngrams`"), "{e}");
    let hub: DecontamConfig = serde_yaml_ng::from_str(
        "benchmarks: [{name: he, hub: {repo: openai/openai_humaneval, files: ['openai_humaneval/*.parquet']}, columns: {id: task_id, text: [prompt]}}]",
    )
    .expect("hub form");
    assert_eq!(hub.check(), Ok(()));
    assert_eq!(hub.ngram, 13);
}

/// Cost figures, not a timed test: `cargo test --test decontaminate cost -- --ignored
/// --nocapture` (meaningful only with the crate optimized).
#[cfg(target_os = "linux")]
#[test]
#[ignore]
fn cost() {
    use chatshards::curate::filters::{FilterConfig, Filters};
    let index = DecontamIndex::build(&config(BENCHMARKS), &[humaneval(), mbpp()]);
    let chars = DecontamIndex::build(
        &config(&format!("mode: chars\n{BENCHMARKS}")),
        &[humaneval(), mbpp()],
    );
    // 2,000 clean rows of about 3 KB of English and code.
    let paragraph = "The function reads the input file line by line, parses each record and \
        keeps a running total of the values it has seen so far. ";
    let code = "for (i, line) in reader.lines().enumerate() { total += parse(&line?)?; }\n";
    let rows: Vec<Conversation> = (0..2000)
        .map(|i| {
            chat(
                &format!("Question {i}: {}", paragraph.repeat(4)),
                &format!("{}{}", paragraph.repeat(10), code.repeat(8)),
            )
        })
        .collect();
    let bytes: usize = rows
        .iter()
        .map(|c| c.messages.iter().map(|m| m.content.len()).sum::<usize>())
        .sum();
    let per_kb = |ns: u64| ns as f64 / (bytes as f64 / 1024.0);
    let start = thread_cpu_ns();
    assert!(rows.iter().all(|r| index.check(r).is_none()));
    println!(
        "decontaminate (13 words): {:.0} ns per KB of text",
        per_kb(thread_cpu_ns() - start)
    );
    let start = thread_cpu_ns();
    assert!(rows.iter().all(|r| chars.check(r).is_none()));
    println!(
        "decontaminate (50 chars): {:.0} ns per KB of text",
        per_kb(thread_cpu_ns() - start)
    );
    let filters: Vec<FilterConfig> = serde_yaml_ng::from_str(
        r#"
- turns: {min: 2}
- assistant_chars: {min: 1}
- language: {keep: [en]}
- regex: {exclude: ["(?i)as an ai language model"]}
- repetition: {max_duplicate_line_fraction: null, max_duplicate_line_char_fraction: null, max_duplicate_paragraph_fraction: null, max_duplicate_paragraph_char_fraction: null, max_top_ngram_char_fraction: {}, max_duplicate_ngram_char_fraction: {5: 1.0}}
"#,
    )
    .expect("filters");
    let filters = Filters::compile(&filters, &[]).expect("compile");
    let start = thread_cpu_ns();
    let kept = rows
        .iter()
        .filter(|r| filters.check_content(r).is_ok())
        .count();
    println!(
        "filters (turns, chars, language, regex, a repetition rule): {:.0} ns per KB of text ({kept} kept)",
        per_kb(thread_cpu_ns() - start)
    );
    for one in [
        "turns: {min: 2}",
        "assistant_chars: {min: 1}",
        "language: {keep: [en]}",
        "regex: {exclude: [\"(?i)as an ai language model\"]}",
    ] {
        let f = Filters::compile(&[serde_yaml_ng::from_str(one).expect("filter")], &[])
            .expect("compile");
        let start = thread_cpu_ns();
        let kept = rows.iter().filter(|r| f.check_content(r).is_ok()).count();
        println!(
            "  {one}: {:.0} ns per KB ({kept} kept)",
            per_kb(thread_cpu_ns() - start)
        );
    }
    let all_rules = Filters::compile(
        &[serde_yaml_ng::from_str("repetition: {}").expect("r")],
        &[],
    )
    .expect("compile");
    let start = thread_cpu_ns();
    let _ = rows
        .iter()
        .filter(|r| all_rules.check_content(r).is_ok())
        .count();
    println!(
        "repetition with every default rule: {:.0} ns per KB of text",
        per_kb(thread_cpu_ns() - start)
    );
}

#[cfg(target_os = "linux")]
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
