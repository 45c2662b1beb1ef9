//! Source adapters against hand-written fixtures.
//!
//! `tests/fixtures/<source>/` holds rows in each source's exact schema and file format (written
//! by `make_fixtures.py` from `source.json`) and `expected.jsonl`: for every row, the normalized
//! conversation and the set of repair codes, or the reject or filter code, all written by hand.
//! `tests/golden/adapters/<source>.jsonl` holds transformers' render of each expected
//! conversation (`tests/oracle/gen_adapter_goldens.py`); chatshards' render must be identical.
//!
//! Also: every adapter on every fixture file and on generated garbage must return a result
//! (never panic); the plan rejects options that do not apply; `pipelines/adapters-demo.yaml`
//! compiles; `chatshards normalize` prints what the adapters produce.

use chatshards::adapt::{Adapter, Repairs};
use chatshards::conversation::Conversation;
use chatshards::plan::config::{ColumnsConfig, FormatName, TagsConfig};
use chatshards::plan::FormatOptions;
use chatshards::read::read_files;
use chatshards::read::Record;
use chatshards::reject::Skip;
use chatshards::render::Renderer;
use chatshards::tokenize::Tokenizer;
use chatshards::validate::Validator;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// One fixture directory: its format, options and data files.
struct Fixture {
    dir: &'static str,
    format: &'static str,
    resolved_only: Option<bool>,
    files: &'static [&'static str],
}

const FIXTURES: &[Fixture] = &[
    Fixture {
        dir: "openorca",
        format: "openorca",
        resolved_only: None,
        files: &["1M-GPT4-Augmented.parquet"],
    },
    Fixture {
        dir: "codealpaca",
        format: "codealpaca",
        resolved_only: None,
        files: &["code_alpaca_20k.json"],
    },
    Fixture {
        dir: "evol_codealpaca",
        format: "evol_codealpaca",
        resolved_only: None,
        files: &["train.jsonl"],
    },
    Fixture {
        dir: "magicoder_oss",
        format: "magicoder_oss",
        resolved_only: None,
        files: &["data-oss_instruct-decontaminated.jsonl"],
    },
    Fixture {
        dir: "magicoder_evol",
        format: "magicoder_evol",
        resolved_only: None,
        files: &["data-evol_instruct-decontaminated.jsonl"],
    },
    Fixture {
        dir: "sharegpt",
        format: "sharegpt",
        resolved_only: None,
        files: &["glaive_toolcall_en_demo.json"],
    },
    Fixture {
        dir: "glaive",
        format: "glaive",
        resolved_only: None,
        files: &["glaive-function-calling-v2.json"],
    },
    Fixture {
        dir: "hermes",
        format: "hermes",
        resolved_only: None,
        files: &[
            "func-calling-singleturn.json",
            "func-calling.json",
            "json-mode-singleturn.json",
        ],
    },
    Fixture {
        dir: "xlam",
        format: "xlam",
        resolved_only: None,
        files: &["xlam_function_calling_60k.json"],
    },
    Fixture {
        dir: "qwen35_fc",
        format: "qwen35_fc",
        resolved_only: None,
        files: &["data/train-00000-of-00001.parquet"],
    },
    Fixture {
        dir: "thoughtworks",
        format: "agentic",
        resolved_only: Some(true),
        files: &["sessions.parquet"],
    },
    Fixture {
        dir: "swe_smith",
        format: "agentic",
        resolved_only: None,
        files: &["data/tool-00000-of-00001.parquet"],
    },
    Fixture {
        dir: "nebius_swe_agent",
        format: "agentic",
        resolved_only: None,
        files: &["data/train-00000-of-00012.parquet"],
    },
    Fixture {
        dir: "nebius_openhands",
        format: "agentic",
        resolved_only: None,
        files: &["data/train-00000-of-00001.parquet"],
    },
    Fixture {
        dir: "swe_gym",
        format: "agentic",
        resolved_only: None,
        files: &["data/train.raw-00000-of-00003.parquet"],
    },
];

/// Every `format:` value with a source-specific adapter, plus the generic ones.
const ALL_FORMATS: &[&str] = &[
    "openai",
    "sharegpt",
    "alpaca",
    "openorca",
    "codealpaca",
    "evol_codealpaca",
    "magicoder_oss",
    "magicoder_evol",
    "agentic",
    "glaive",
    "qwen35_fc",
    "hermes",
    "xlam",
];

fn format(name: &str) -> FormatName {
    serde_json::from_value(json!(name)).unwrap_or_else(|e| panic!("format `{name}`: {e}"))
}

fn adapter(name: &str, resolved_only: Option<bool>) -> Adapter {
    let options = FormatOptions { resolved_only };
    chatshards::plan::adapter(
        format(name),
        &ColumnsConfig::default(),
        &TagsConfig::default(),
        &options,
    )
    .unwrap_or_else(|e| panic!("adapter `{name}`: {e:?}"))
}

fn tokenizer() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        Tokenizer::load(&Path::new(ROOT).join("templates/qwen3.6/tokenizer.json.zst"))
            .expect("tokenizer")
    })
}

fn validator() -> &'static Validator {
    static V: OnceLock<Validator> = OnceLock::new();
    V.get_or_init(|| Validator::new(&tokenizer().forbidden))
}

fn renderer() -> Renderer {
    let source =
        std::fs::read_to_string(Path::new(ROOT).join("templates/qwen3.6/chat_template.jinja"))
            .expect("template");
    Renderer::new(&source, Map::new()).expect("template compiles")
}

/// Expands the `$join` / `$repeat` readability macros of `expected.jsonl`.
fn expand(value: Value) -> Value {
    match value {
        Value::Object(o)
            if o.len() == 1 && (o.contains_key("$join") || o.contains_key("$repeat")) =>
        {
            let (key, arg) = o.into_iter().next().expect("one key");
            let text = |v: Value| match expand(v) {
                Value::String(s) => s,
                other => panic!("{key} part is not a string: {other}"),
            };
            match (key.as_str(), arg) {
                ("$join", Value::Array(parts)) => {
                    Value::String(parts.into_iter().map(text).collect())
                }
                ("$repeat", Value::Array(a)) if a.len() == 2 => {
                    let count = a[1].as_u64().expect("$repeat count") as usize;
                    Value::String(text(a[0].clone()).repeat(count))
                }
                (k, a) => panic!("bad macro {k}: {a}"),
            }
        }
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, expand(v))).collect()),
        Value::Array(a) => Value::Array(a.into_iter().map(expand).collect()),
        other => other,
    }
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            expand(
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l}", path.display())),
            )
        })
        .collect()
}

/// (file name, row) → entry, for a fixture's expected.jsonl or golden file.
fn keyed(fixture: &Fixture, entries: Vec<Value>) -> BTreeMap<(String, u64), Value> {
    let mut out = BTreeMap::new();
    for e in entries {
        let file = match e.get("file").and_then(Value::as_str) {
            Some(f) => f.to_owned(),
            None => {
                assert_eq!(
                    fixture.files.len(),
                    1,
                    "{}: entries need a `file`",
                    fixture.dir
                );
                fixture.files[0].to_owned()
            }
        };
        let row = e["row"].as_u64().expect("row");
        assert!(
            out.insert((file, row), e).is_none(),
            "{}: duplicate entry",
            fixture.dir
        );
    }
    out
}

/// Every row of a fixture's files, keyed like the expectations.
fn rows(fixture: &Fixture) -> Vec<((String, u64), Value)> {
    let dir = Path::new(ROOT).join("tests/fixtures").join(fixture.dir);
    let paths: Vec<PathBuf> = fixture.files.iter().map(|f| dir.join(f)).collect();
    let mut out = Vec::new();
    read_files(&paths, &mut |raw| {
        let (file, row) = (raw.file, raw.row);
        let value = raw
            .into_value()
            .unwrap_or_else(|e| panic!("{}: row {row} unreadable: {e}", fixture.dir));
        out.push(((fixture.files[file].to_owned(), row), value));
        true
    })
    .unwrap_or_else(|e| panic!("{}: {e}", fixture.dir));
    out
}

/// What a build does with a row before rendering: filter, adapt, validate.
fn outcome(adapter: &Adapter, row: &Value) -> (Result<Conversation, Skip>, BTreeSet<String>) {
    let mut repairs = Repairs::new();
    let result = adapter
        .prepare(row, &mut repairs)
        .and_then(|c| Ok(validator().validate(c, &mut repairs)?));
    let codes = repairs.iter().map(|r| r.code().to_owned()).collect();
    (result, codes)
}

fn pretty(c: &Conversation) -> String {
    serde_json::to_string_pretty(c).unwrap_or_default()
}

#[test]
fn every_fixture_row_adapts_to_its_expected_outcome() {
    let mut checked = 0;
    for fixture in FIXTURES {
        let adapter = adapter(fixture.format, fixture.resolved_only);
        let dir = Path::new(ROOT).join("tests/fixtures").join(fixture.dir);
        let mut expected = keyed(fixture, read_jsonl(&dir.join("expected.jsonl")));
        for (key, row) in rows(fixture) {
            let at = format!("{}/{}#{}", fixture.dir, key.0, key.1);
            let want = expected
                .remove(&key)
                .unwrap_or_else(|| panic!("{at}: no expected entry"));
            let (got, repairs) = outcome(&adapter, &row);
            match (
                &got,
                want.get("conversation"),
                want.get("reject"),
                want.get("filtered"),
            ) {
                (Ok(c), Some(w), None, None) => {
                    let w: Conversation =
                        serde_json::from_value(w.clone()).unwrap_or_else(|e| panic!("{at}: {e}"));
                    assert!(
                        *c == w,
                        "{at}: conversation differs\n got: {}\nwant: {}",
                        pretty(c),
                        pretty(&w)
                    );
                    let want_repairs: BTreeSet<String> = want
                        .get("repairs")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|r| r.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default();
                    assert_eq!(repairs, want_repairs, "{at}: repairs");
                }
                (Err(Skip::Rejected(r)), None, Some(code), None) => {
                    assert_eq!(r.reason.code(), code, "{at}: reject ({})", r.message)
                }
                (Err(Skip::Filtered(f)), None, None, Some(code)) => {
                    assert_eq!(f.code(), code, "{at}: filter")
                }
                _ => panic!("{at}: expected {want}, got {got:?}"),
            }
            checked += 1;
        }
        assert!(
            expected.is_empty(),
            "{}: expected entries without rows: {:?}",
            fixture.dir,
            expected.keys()
        );
    }
    assert_eq!(checked, 76, "rows checked");
}

#[test]
fn renders_match_transformers() {
    let renderer = renderer();
    let mut compared = 0;
    for fixture in FIXTURES {
        let adapter = adapter(fixture.format, fixture.resolved_only);
        let path = Path::new(ROOT)
            .join("tests/golden/adapters")
            .join(format!("{}.jsonl", fixture.dir));
        let mut goldens = keyed(fixture, read_jsonl(&path));
        for (key, row) in rows(fixture) {
            let at = format!("{}/{}#{}", fixture.dir, key.0, key.1);
            let Ok(conversation) = outcome(&adapter, &row).0 else {
                continue;
            };
            let golden = goldens
                .remove(&key)
                .unwrap_or_else(|| panic!("{at}: no golden render"));
            let want = golden["text"].as_str().expect("text");
            let got = renderer
                .render(&conversation)
                .unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(got, want, "{at}: render");
            compared += 1;
        }
        assert!(
            goldens.is_empty(),
            "{}: goldens without a kept row: {:?}",
            fixture.dir,
            goldens.keys()
        );
    }
    assert!(compared >= 50, "only {compared} renders compared");
}

#[test]
fn tool_calling_fixtures_render_qwen_xml_calls() {
    // The point of parsing text calls: they reach the template as structured calls and render
    // in Qwen3.6's XML format, never as the source's own syntax.
    let renderer = renderer();
    for dir in ["glaive", "hermes", "xlam", "qwen35_fc"] {
        let fixture = FIXTURES.iter().find(|f| f.dir == dir).expect("fixture");
        let adapter = adapter(fixture.format, None);
        let mut with_calls = 0;
        for (key, row) in rows(fixture) {
            let Ok(c) = outcome(&adapter, &row).0 else {
                continue;
            };
            let text = renderer.render(&c).expect("renders");
            for stale in ["<functioncall>", "'arguments'", "<|endoftext|>", "AI to="] {
                assert!(
                    !text.contains(stale),
                    "{dir}#{}: `{stale}` in render",
                    key.1
                );
            }
            if c.messages.iter().any(|m| !m.tool_calls.is_empty()) {
                assert!(text.contains("<tool_call>\n<function="), "{dir}#{}", key.1);
                with_calls += 1;
            }
        }
        assert!(with_calls >= 3, "{dir}: only {with_calls} rows with calls");
    }
}

#[test]
fn magicoder_oss_metadata_never_leaks_into_text() {
    let fixture = FIXTURES
        .iter()
        .find(|f| f.dir == "magicoder_oss")
        .expect("fixture");
    let adapter = adapter("magicoder_oss", None);
    for (_, row) in rows(fixture) {
        let c = outcome(&adapter, &row).0.expect("adapts");
        let text = serde_json::to_string(&c).expect("json");
        for key in ["seed", "openai_fingerprint"] {
            let value = row[key].as_str().expect("string column");
            assert!(!text.contains(value.trim()), "`{key}` leaked");
        }
        assert!(!text.contains("fp_eeff13170a"));
        let meta = adapter.metadata(&row);
        assert_eq!(
            meta.keys().collect::<Vec<_>>(),
            ["lang", "index", "raw_index"]
        );
    }
}

#[test]
fn openorca_metadata_keeps_the_submix() {
    let fixture = FIXTURES
        .iter()
        .find(|f| f.dir == "openorca")
        .expect("fixture");
    let adapter = adapter("openorca", None);
    let submixes: Vec<Value> = rows(fixture)
        .iter()
        .map(|(_, r)| adapter.metadata(r)["submix"].clone())
        .collect();
    assert_eq!(submixes, ["niv", "flan", "t0", "cot", "flan", "niv"]);
}

#[test]
fn agentic_resolved_only_filters_and_otherwise_keeps() {
    let fixture = FIXTURES
        .iter()
        .find(|f| f.dir == "thoughtworks")
        .expect("fixture");
    let keep_all = adapter("agentic", None);
    let resolved = adapter("agentic", Some(true));
    let mut filtered = 0;
    for (key, row) in rows(fixture) {
        let all = outcome(&keep_all, &row).0;
        match outcome(&resolved, &row).0 {
            Err(Skip::Filtered(reason)) => {
                assert_eq!(reason.code(), "unresolved");
                // Without the option the same row is not filtered.
                assert!(!matches!(all, Err(Skip::Filtered(_))), "row {}", key.1);
                filtered += 1;
            }
            other => assert_eq!(format!("{other:?}"), format!("{all:?}"), "row {}", key.1),
        }
    }
    assert_eq!(filtered, 2);
}

#[test]
fn only_the_long_session_exceeds_the_demo_size_cap() {
    // thoughtworks row 2 exists to exercise the size cap of pipelines/adapters-demo.yaml
    // (`max_tokens: 4096`); every other kept fixture row must fit under it.
    let renderer = renderer();
    let mut long = Vec::new();
    for fixture in FIXTURES {
        let adapter = adapter(fixture.format, fixture.resolved_only);
        for (key, row) in rows(fixture) {
            let Ok(c) = outcome(&adapter, &row).0 else {
                continue;
            };
            let text = renderer.render(&c).expect("renders");
            let ids = tokenizer().encoder.encode(&text).expect("encodes");
            if ids.len() > 4096 {
                long.push((fixture.dir, key.1));
            }
        }
    }
    assert_eq!(long, [("thoughtworks", 2)]);
}

// ---- no row can crash the run -------------------------------------------------------------

/// A small deterministic generator (xorshift64*), so failures reproduce without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn snippet(&mut self) -> &'static str {
        SNIPPETS[self.below(SNIPPETS.len())]
    }
}

/// Snippets that matter to some parser: markers, call syntaxes, quotes, brackets, escapes,
/// and the whitespace Python and Rust disagree about.
const SNIPPETS: &[&str] = &[
    "<think>",
    "</think>",
    "<think>\n",
    "\n</think>\n\n",
    " \t\r\n",
    "\u{1c}\u{1d}\u{1e}\u{1f}",
    "\u{85}\u{a0}\u{2028}\u{3000}",
    "\u{b}\u{c}",
    "\u{200b}",
    "USER: ",
    "ASSISTANT: ",
    "FUNCTION RESPONSE: ",
    "SYSTEM: ",
    "\n\n\n",
    "\n\n",
    "\n",
    " <|endoftext|>",
    "<|im_start|>",
    "<functioncall> ",
    "{\"name\": \"f\", \"arguments\": '",
    "'}",
    "AI to= f: ",
    "<tool_call>",
    "</tool_call>",
    "\\n",
    "<tools>",
    "</tools>",
    "# Tools",
    "<tool_response>",
    "</tool_response>",
    "<function=f>",
    "<parameter=x>",
    "</parameter>",
    "</function>",
    "OBSERVATION:",
    "{",
    "}",
    "[",
    "]",
    "'",
    "\"",
    "\\",
    "\\'",
    ":",
    ",",
    "True",
    "None",
    "Infinity",
    "NaN",
    "1e999",
    "-",
    "é",
    "日本",
    "🦀",
    "\u{0}",
    "\u{1f}",
    "{'a': (1,)}",
    "List[",
    "Optional[",
    ", optional",
    "\"type\": \"object\"",
];

const WORDS: &[&str] = &[
    "hello",
    " ",
    "name",
    "arguments",
    "role",
    "content",
    "tool",
    "x",
];

fn random_string(rng: &mut Rng) -> String {
    let mut s = String::new();
    for _ in 0..rng.below(12) {
        match rng.below(3) {
            0 => s.push_str(rng.snippet()),
            1 => s.push(char::from_u32(rng.below(0x3000) as u32).unwrap_or('x')),
            _ => {
                let word: &&str = rng.pick(WORDS);
                s.push_str(word);
            }
        }
    }
    s
}

/// Field names any adapter reads, so random rows hit real code paths.
const KEYS: &[&str] = &[
    "messages",
    "conversations",
    "tools",
    "system",
    "chat",
    "instruction",
    "input",
    "output",
    "response",
    "question",
    "system_prompt",
    "id",
    "problem",
    "solution",
    "query",
    "answers",
    "messages_json",
    "ground_truth_meta_json",
    "trajectory",
    "resolved",
    "target",
    "role",
    "content",
    "from",
    "value",
    "tool_calls",
    "tool_calls_json",
    "function",
    "name",
    "arguments",
    "parameters",
    "type",
    "text",
    "agent",
    "tool_call_id",
    "function_call",
    "reasoning_content",
    "properties",
    "default",
    "seed",
    "lang",
    "index",
];

fn random_value(rng: &mut Rng, depth: usize) -> Value {
    let choice = if depth > 4 {
        rng.below(4)
    } else {
        rng.below(8)
    };
    match choice {
        0 => Value::Null,
        1 => Value::Bool(rng.below(2) == 0),
        2 => json!(rng.next() as i64 >> rng.below(60)),
        3 => Value::String(random_string(rng)),
        4 | 5 => Value::Array(
            (0..rng.below(5))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        6 => {
            // A JSON string holding a random value: many columns are JSON text.
            Value::String(random_value(rng, depth + 1).to_string())
        }
        _ => {
            let mut o = Map::new();
            for _ in 0..rng.below(6) {
                let key = if rng.below(5) == 0 {
                    random_string(rng)
                } else {
                    (*rng.pick(KEYS)).to_owned()
                };
                o.insert(key, random_value(rng, depth + 1));
            }
            if rng.below(2) == 0 {
                o.insert(
                    "role".into(),
                    json!(rng.pick(&[
                        "system",
                        "user",
                        "assistant",
                        "tool",
                        "ai",
                        "function",
                        "x"
                    ])),
                );
            }
            Value::Object(o)
        }
    }
}

/// Mutates one fixture row: replace, drop or corrupt a field, or truncate / splice a string.
fn mutate(rng: &mut Rng, value: &mut Value, depth: usize) {
    match value {
        Value::Object(o) if !o.is_empty() => {
            let keys: Vec<String> = o.keys().cloned().collect();
            let key = rng.pick(&keys).clone();
            match rng.below(4) {
                0 => {
                    o.insert(key, random_value(rng, depth + 1));
                }
                1 => {
                    o.shift_remove(&key);
                }
                _ => {
                    if let Some(v) = o.get_mut(&key) {
                        mutate(rng, v, depth + 1);
                    }
                }
            }
        }
        Value::Array(a) if !a.is_empty() => {
            let i = rng.below(a.len());
            match rng.below(3) {
                0 => a[i] = random_value(rng, depth + 1),
                1 => {
                    a.remove(i);
                }
                _ => mutate(rng, &mut a[i], depth + 1),
            }
        }
        Value::String(s) => {
            let cut: Vec<usize> = s.char_indices().map(|(i, _)| i).chain([s.len()]).collect();
            let at = *rng.pick(&cut);
            match rng.below(3) {
                0 => s.truncate(at),
                1 => s.insert_str(at, rng.snippet()),
                _ => {
                    // A JSON string column: corrupt the JSON inside it too.
                    if let Ok(mut inner) = serde_json::from_str::<Value>(s) {
                        mutate(rng, &mut inner, depth + 1);
                        *s = inner.to_string();
                    } else {
                        s.insert_str(at, rng.snippet());
                    }
                }
            }
        }
        other => *other = random_value(rng, depth + 1),
    }
}

/// Runs a row through every adapter and the rest of the per-row path: nothing may panic, and
/// the native render must equal minijinja's.
fn survive(adapters: &[Adapter], renderer: &Renderer, row: &Value) {
    for adapter in adapters {
        let _ = adapter.metadata(row);
        same_from_line(
            adapter,
            &serde_json::to_vec(row).expect("a value serializes"),
        );
        let (result, _) = outcome(adapter, row);
        if let Ok(c) = result {
            assert_eq!(
                renderer.render(&c),
                renderer.render_template(&c),
                "native render differs from minijinja for {}",
                pretty(&c)
            );
            let _ = chatshards::adapt::to_sharegpt_record(&c, "id", "source");
        }
    }
}

/// A JSON line adapts as its parsed value does (the `openai` format reads plain lines
/// without building the value first), repairs included. Returns whether the line took a
/// typed path.
fn same_from_line(adapter: &Adapter, line: &[u8]) -> bool {
    let mut from_line = Repairs::new();
    let got = adapter.prepare_record(Record::Line(line.to_vec()), &mut from_line);
    let mut from_value = Repairs::new();
    let want = match chatshards::read::parse(line) {
        Ok(value) => adapter.prepare(&value, &mut from_value),
        Err(reject) => Err(Skip::Rejected(reject)),
    };
    assert_eq!(
        (&got, &from_line),
        (&want, &from_value),
        "{} adapts this line unlike its value: {}",
        adapter.name(),
        String::from_utf8_lossy(line)
    );
    match adapter {
        Adapter::OpenAi(a) => a.adapt_line(line).is_some(),
        _ => false,
    }
}

#[test]
fn openai_lines_adapt_as_their_values() {
    let adapter = adapter("openai", None);
    let lines: &[&str] = &[
        // Plain rows: the typed path.
        r#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}"#,
        r#"{"id":7,"messages":[{"role":"system","content":"s\n\u00e9"},{"role":"user","content":""},{"role":"assistant","content":"a","reasoning_content":null,"reasoning":"r","thinking":"t"}],"tools":null}"#,
        r#"{"messages":[{"role":"user","content":"q","name":"ignored","reasoning":"ignored"},{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}},{"id":"c2","name":"g","arguments":{"b":[1,2.5]}}]},{"role":"tool","content":"42","name":"f","tool_call_id":"c1"},{"role":"assistant","content":"done","reasoning_content":""}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}"#,
        r#"{"messages":[{"role":"assistant","content":"x","tool_calls":null}],"tools":[]}"#,
        r#"{"messages":[]}"#,
        r#"{"messages":[{"role":"assistant","content":"a","reasoning_content":"rc","reasoning":"r"},{"role":"assistant","content":"b","reasoning":"r","thinking":"t"}]}"#,
        // Everything else: the reference path, whatever its outcome.
        r#"{"messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]}"#,
        r#"{"messages":[{"role":"user","content":"a","content":"b"}]}"#,
        r#"{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}"#,
        r#"{"messages":"[{\"role\":\"user\",\"content\":\"a\"}]"}"#,
        r#"{"messages":null}"#,
        r#"{"messages":[{"role":"robot","content":"a"}]}"#,
        r#"{"messages":[{"content":"a"}]}"#,
        r#"{"messages":[{"role":"user","content":5}]}"#,
        r#"{"messages":[{"role":"user","content":null},{"role":"assistant","content":"a"}]}"#,
        r#"{"messages":[{"role":"user","content":"q"},{"role":"assistant"}]}"#,
        r#"{"messages":[{"role":"assistant","content":"a","reasoning":7}]}"#,
        r#"{"messages":[{"role":"user","content":"a","reasoning":7,"tool_calls":"x"}]}"#,
        r#"{"messages":[{"role":"assistant","content":"a","tool_calls":{"name":"f"}}]}"#,
        r#"{"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}]}"#,
        r#"{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"not json"}}]}]}"#,
        r#"{"messages":[{"role":"user","content":"a"}],"tools":[1]}"#,
        r#"{"messages":[{"role":"user","content":"a"}],"tools":"[{\"name\":\"f\"}]"}"#,
        r#"[{"role":"user","content":"a"}]"#,
        r#"{"messages":[{"role":"user","content":"a"}]"#,
        "\u{feff}{\"messages\":[]}",
        // Numbers serde_json reads unlike Python (`-0`, integers outside 64 bits), in fields
        // the typed path reads and in fields it ignores.
        r#"{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"a":-0}}}]}]}"#,
        r#"{"messages":[{"role":"user","content":"a"}],"tools":[{"function":{"name":"f","parameters":{"default":18446744073709551616}}}]}"#,
        r#"{"id":-0,"messages":[{"role":"user","content":"a"}]}"#,
        r#"{"messages":[{"role":"user","content":"a","meta":{"n":[1,-18446744073709551616]}}]}"#,
    ];
    let typed: Vec<bool> = lines
        .iter()
        .map(|line| same_from_line(&adapter, line.as_bytes()))
        .collect();
    assert_eq!(typed[..6], [true; 6], "plain rows take the typed path");
    assert_eq!(typed[6..], vec![false; lines.len() - 6][..]);
    // The demo's chat rows: all plain but the three broken on purpose (a truncated line, a
    // `developer` role, tool-call arguments that are not JSON), which are rejected.
    let demo = Path::new(ROOT).join("tests/fixtures/demo/chat.jsonl");
    let text = std::fs::read_to_string(&demo).expect("demo chat.jsonl");
    let typed = text
        .lines()
        .filter(|line| same_from_line(&adapter, line.as_bytes()))
        .count();
    assert_eq!((typed, text.lines().count()), (152, 155));
}

fn all_adapters() -> Vec<Adapter> {
    let mut out: Vec<Adapter> = ALL_FORMATS.iter().map(|f| adapter(f, None)).collect();
    out.push(adapter("agentic", Some(true)));
    out
}

#[test]
fn every_adapter_survives_every_fixture_file() {
    let adapters = all_adapters();
    let renderer = renderer();
    for fixture in FIXTURES {
        for (_, row) in rows(fixture) {
            survive(&adapters, &renderer, &row);
        }
    }
}

#[test]
fn adapters_survive_random_and_mutated_rows() {
    let adapters = all_adapters();
    let renderer = renderer();
    let fixtures: Vec<Value> = FIXTURES
        .iter()
        .flat_map(|f| rows(f).into_iter().map(|(_, r)| r))
        .collect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..1500 {
        survive(&adapters, &renderer, &random_value(&mut rng, 0));
    }
    for _ in 0..3000 {
        let mut row = rng.pick(&fixtures).clone();
        for _ in 0..=rng.below(3) {
            mutate(&mut rng, &mut row, 0);
        }
        survive(&adapters, &renderer, &row);
    }
    // Arbitrary text in every field every adapter reads.
    for _ in 0..1500 {
        let mut o = Map::new();
        for key in KEYS {
            if rng.below(2) == 0 {
                o.insert((*key).to_owned(), Value::String(random_string(&mut rng)));
            }
        }
        survive(&adapters, &renderer, &Value::Object(o));
    }
}

/// A conversation the validator might never let through (any role order, empty turns, stray
/// think tags), to compare the two render engines on shapes the adapters rarely produce.
fn random_conversation(rng: &mut Rng) -> Conversation {
    use chatshards::conversation::{Message, Role, ToolCall};
    let roles = [Role::System, Role::User, Role::Assistant, Role::Tool];
    let mut messages = Vec::new();
    for i in 0..1 + rng.below(9) {
        // Mostly plausible orders, sometimes anything.
        let role = match (i, rng.below(6)) {
            (_, 0) => *rng.pick(&roles),
            (0, 1) => Role::System,
            (_, n) if n % 2 == 0 => Role::User,
            (_, 3) => Role::Tool,
            _ => Role::Assistant,
        };
        let mut m = Message::new(role, random_string(rng));
        if role == Role::Assistant {
            if rng.below(3) == 0 {
                m.reasoning = Some(random_string(rng));
            }
            for _ in 0..rng.below(3) {
                let arguments = (0..rng.below(4))
                    .map(|_| (random_string(rng), random_value(rng, 2)))
                    .collect();
                m.tool_calls.push(ToolCall {
                    id: None,
                    name: random_string(rng),
                    arguments,
                });
            }
        }
        if role == Role::User && rng.below(4) == 0 {
            m.content = format!(
                "{}<tool_response>{}</tool_response>{}",
                *rng.pick(&["", " ", "\n"]),
                random_string(rng),
                *rng.pick(&["", "\n"])
            );
        }
        messages.push(m);
    }
    let tools = (0..rng.below(3)).map(|_| random_value(rng, 1)).collect();
    Conversation { messages, tools }
}

#[test]
fn native_render_equals_minijinja_on_random_conversations() {
    let template = |name: &str| {
        std::fs::read_to_string(
            Path::new(ROOT).join(format!("templates/{name}/chat_template.jinja")),
        )
        .expect("template")
    };
    for (name, preserve) in [
        ("qwen3.6", None),
        ("qwen3.6", Some(true)),
        ("qwen3.6", Some(false)),
        ("qwen3.5", Some(true)),
    ] {
        let mut kwargs = Map::new();
        if let Some(p) = preserve {
            kwargs.insert("preserve_thinking".into(), json!(p));
            kwargs.insert("enable_thinking".into(), json!(false));
        }
        let renderer = Renderer::new(&template(name), kwargs).expect("compiles");
        assert_eq!(renderer.native(), Some(name));
        let mut rng = Rng(0xC0FF_EE00_D15E_A5E5);
        let mut rendered = 0;
        for _ in 0..4000 {
            let c = random_conversation(&mut rng);
            let native = renderer.render(&c);
            assert_eq!(
                native,
                renderer.render_template(&c),
                "{name} {preserve:?}: native render differs from minijinja for {}",
                pretty(&c)
            );
            rendered += usize::from(native.is_ok());
        }
        // Most random conversations render (the rest are the template's own errors).
        assert!(rendered > 2000, "{name}: only {rendered} of 4000 rendered");
    }
}

// ---- plan and CLI ---------------------------------------------------------------------------

#[test]
fn options_that_do_not_apply_are_rejected() {
    let columns = ColumnsConfig {
        instruction: Some("q".into()),
        ..ColumnsConfig::default()
    };
    let with_resolved = FormatOptions {
        resolved_only: Some(true),
    };
    let plain = FormatOptions::default();
    let tags = TagsConfig::default();
    for name in ALL_FORMATS {
        let got = chatshards::plan::adapter(
            format(name),
            &ColumnsConfig::default(),
            &tags,
            &with_resolved,
        );
        assert_eq!(got.is_ok(), *name == "agentic", "{name} with resolved_only");
        let got = chatshards::plan::adapter(format(name), &columns, &tags, &plain);
        assert_eq!(
            got.is_ok(),
            *name == "alpaca",
            "{name} with columns.instruction"
        );
    }
    for bad in ["glaive_v2", "OpenOrca", "qwen35"] {
        assert!(
            serde_json::from_value::<FormatName>(json!(bad)).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn demo_pipeline_compiles_with_every_adapter() {
    let plan = chatshards::plan::compile(
        &Path::new(ROOT).join("pipelines/adapters-demo.yaml"),
        chatshards::plan::HubAccess::Auto,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let used: BTreeSet<&str> = plan.sources.iter().map(|s| s.adapter.name()).collect();
    for name in ALL_FORMATS
        .iter()
        .filter(|f| !["openai", "sharegpt", "alpaca"].contains(f))
    {
        assert!(used.contains(name), "the demo does not use `{name}`");
    }
    let fixture_files: usize = FIXTURES.iter().map(|f| f.files.len()).sum();
    let demo_files: usize = plan.sources.iter().map(|s| s.files.len()).sum();
    assert_eq!(
        demo_files, fixture_files,
        "the demo reads every fixture file"
    );
}

#[test]
fn normalize_prints_sharegpt_and_rejects() {
    let file = Path::new(ROOT).join("tests/fixtures/glaive/glaive-function-calling-v2.json");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_chatshards"))
        .args(["normalize", "--format", "glaive"])
        .arg(&file)
        .current_dir(ROOT)
        .output()
        .expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    let records: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(records.len(), 16);
    assert_eq!(records[0]["id"], "glaive:0:0");
    assert_eq!(
        records[0]["conversations"][0],
        json!({"from": "human", "value": "Classify this job\nNurse"})
    );
    // Row 1: the call is a `function_call` turn with parsed arguments and its synthesized id.
    let call: Value = serde_json::from_str(
        records[1]["conversations"][3]["value"]
            .as_str()
            .expect("call"),
    )
    .expect("json");
    assert_eq!(
        call,
        json!([{"id": "call_0", "name": "detect_language", "arguments": {"text": "Ich bin müde"}}])
    );
    let stderr = String::from_utf8(out.stderr).expect("utf-8");
    let rejects: Vec<Value> = stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("reject line"))
        .collect();
    let codes: Vec<(u64, &str)> = rejects
        .iter()
        .map(|r| {
            (
                r["row"].as_u64().expect("row"),
                r["reason"].as_str().expect("reason"),
            )
        })
        .collect();
    assert_eq!(
        codes,
        [
            (10, "invalid_tool_arguments"),
            (12, "undeclared_tool"),
            (15, "invalid_tool_call"),
            (18, "stray_role_marker"),
            (19, "orphan_tool_response")
        ]
    );
    assert!(rejects
        .iter()
        .all(|r| !r["message"].as_str().unwrap_or("").is_empty()));
}
