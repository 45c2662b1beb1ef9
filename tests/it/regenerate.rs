//! `regenerate:` against a protocol-faithful OpenAI-compatible server started on loopback: it
//! renders each request's messages with the Qwen3.6 template (minijinja, the reference engine)
//! and tokenizes them with the `tokenizers` crate, returns `prompt_token_ids` at the top level
//! and `token_ids` in the choice as vLLM does, answers deterministically, and injects 429/500,
//! dropped connections, truncation and another model name on demand.

use crate::common;

use common::{bin, json, rows, stderr, ROOT};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const IM_END: u32 = 248046;

#[derive(Debug, Clone, Copy)]
enum Fault {
    Status(u16),
    /// Close the connection without an answer.
    Drop,
}

#[derive(Default)]
struct State {
    model: String,
    /// What `/version` answers.
    version: String,
    /// Consumed one per chat request, before it is answered.
    faults: VecDeque<Fault>,
    /// Chat requests received (faulty ones included) and answered with a generation.
    received: u64,
    answered: u64,
    delay: Duration,
    /// (prompt ids, completion ids) of every generation answered.
    log: Vec<(Vec<u32>, Vec<u32>)>,
}

struct Server {
    url: String,
    state: Arc<Mutex<State>>,
}

struct Engine {
    template: String,
    tokenizer: tokenizers::Tokenizer,
}

impl Server {
    fn start(model: &str) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(State {
            model: model.to_owned(),
            version: "0.0-test".to_owned(),
            ..State::default()
        }));
        let zst = std::fs::read(Path::new(ROOT).join("templates/qwen3.6/tokenizer.json.zst"))
            .expect("tokenizer");
        let json = zstd::decode_all(zst.as_slice()).expect("zstd");
        let engine = Arc::new(Engine {
            template: std::fs::read_to_string(
                Path::new(ROOT).join("templates/qwen3.6/chat_template.jinja"),
            )
            .expect("template"),
            tokenizer: tokenizers::Tokenizer::from_bytes(json).expect("tokenizer.json"),
        });
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (state, engine) = (shared.clone(), engine.clone());
                std::thread::spawn(move || serve(stream, &state, &engine));
            }
        });
        Server { url, state }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().expect("state"))
    }
}

fn serve(mut stream: TcpStream, state: &Mutex<State>, engine: &Engine) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let (status, answer) = match path.as_str() {
        "/v1/models" => {
            let model = state.lock().expect("state").model.clone();
            (
                200,
                json!({"object": "list", "data": [{"id": model, "object": "model"}]}),
            )
        }
        "/version" => {
            let version = state.lock().expect("state").version.clone();
            (200, json!({ "version": version }))
        }
        "/v1/chat/completions" => {
            let (fault, delay) = {
                let mut s = state.lock().expect("state");
                s.received += 1;
                (s.faults.pop_front(), s.delay)
            };
            std::thread::sleep(delay);
            match fault {
                Some(Fault::Drop) => return,
                Some(Fault::Status(code)) => (
                    code,
                    json!({"error": {"message": format!("injected {code}")}}),
                ),
                None => complete(&body, state, engine),
            }
        }
        _ => (404, json!({"error": {"message": "not found"}})),
    };
    let text = answer.to_string();
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

fn hash(ids: &[u32]) -> u64 {
    ids.iter().fold(0xcbf29ce484222325u64, |h, &i| {
        (h ^ u64::from(i)).wrapping_mul(0x100000001b3)
    }) % 100_000
}

/// What vLLM with `--reasoning-parser qwen3 --tool-call-parser qwen3_coder` would answer.
fn complete(body: &[u8], state: &Mutex<State>, engine: &Engine) -> (u16, Value) {
    let req: Value = serde_json::from_slice(body).expect("request json");
    assert_eq!(
        req["return_token_ids"], true,
        "every request asks for token ids"
    );
    let model = state.lock().expect("state").model.clone();
    if req["model"] != model.as_str() {
        return (404, json!({"error": {"message": "model not found"}}));
    }
    let mut messages = req["messages"].clone();
    // The OpenAI API carries arguments as JSON text; the template iterates an object.
    for m in messages.as_array_mut().expect("messages") {
        if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for c in calls {
                let args = &mut c["function"]["arguments"];
                let text = args.as_str().expect("arguments are JSON text").to_owned();
                *args = serde_json::from_str(&text).expect("arguments json");
            }
        }
    }
    let tools: Vec<Value> = req["tools"].as_array().cloned().unwrap_or_default();
    let kwargs = req["chat_template_kwargs"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let renderer = chatshards::render::Renderer::with_engine(
        &engine.template,
        kwargs,
        chatshards::render::Engine::Minijinja,
    )
    .expect("template");
    let text = match renderer.render_json(messages.clone(), &tools, true) {
        Ok(t) => t,
        Err(e) => return (400, json!({"error": {"message": e.message}})),
    };
    let encode = |t: &str| {
        engine
            .tokenizer
            .encode(t, false)
            .expect("encode")
            .get_ids()
            .to_vec()
    };
    let prompt = encode(&text);
    let h = hash(&prompt);
    let last = messages
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    let user = last["content"].as_str().unwrap_or("");
    if user.contains("ALWAYS500") {
        return (500, json!({"error": {"message": "engine crashed"}}));
    }
    let thinking = text.ends_with("<think>\n");
    let reasoning = format!("Think {h}.");
    let think = |rest: &str| match thinking {
        true => format!("{reasoning}\n</think>\n\n{rest}"),
        false => rest.to_owned(),
    };
    let call = !tools.is_empty() && last["role"] == "user";
    let (completion_text, content, tool_calls) = if call {
        let name = tools[0]["function"]["name"]
            .as_str()
            .unwrap_or("f")
            .to_owned();
        let text = think(&format!(
            "<tool_call>\n<function={name}>\n</function>\n</tool_call>"
        ));
        let calls = json!([{"id": format!("call_{h}"), "type": "function",
                            "function": {"name": name, "arguments": "{}"}}]);
        (text, Value::Null, Some(calls))
    } else {
        let reply = format!("Reply {h} to {} prompt tokens.", prompt.len());
        (think(&reply), Value::String(reply), None)
    };
    let mut completion = encode(&completion_text);
    completion.push(IM_END);
    let max = req["max_tokens"].as_u64().unwrap_or(u64::MAX) as usize;
    let mut finish = "stop";
    if user.contains("LONG") || completion.len() > max {
        completion.truncate(max.min(5));
        finish = "length";
    }
    let mut message = json!({"role": "assistant", "content": content,
                             "reasoning": if thinking { Value::String(reasoning) } else { Value::Null }});
    if let (Some(calls), "stop") = (tool_calls, finish) {
        message["tool_calls"] = calls;
    }
    let mut s = state.lock().expect("state");
    s.answered += 1;
    s.log.push((prompt.clone(), completion.clone()));
    (
        200,
        json!({"id": "chatcmpl-1", "object": "chat.completion", "model": model,
               "choices": [{"index": 0, "message": message, "finish_reason": finish,
                            "token_ids": completion}],
               "system_fingerprint": "test-0", "prompt_token_ids": prompt}),
    )
}

/// A pipeline over the demo's chat and tool-calling rows plus `extra` rows (OpenAI jsonl).
/// Written to `OUT.yaml` beside the cache, writing `OUT/`.
fn pipeline(
    dir: &Path,
    endpoint: &str,
    settings: &str,
    takes: (u64, u64),
    extra: &[Value],
    out: &str,
) -> PathBuf {
    let data = dir.join("extra.jsonl");
    let lines: String = extra.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&data, lines).expect("extra");
    let extra_source = match extra.is_empty() {
        true => String::new(),
        false => "  - name: extra\n    files: [extra.jsonl]\n    format: openai\n    min_keep: 0\n"
            .to_owned(),
    };
    let mut sources = String::new();
    for (name, file, format, take) in [
        ("chat", "chat.jsonl", "openai", takes.0),
        ("tools", "tools.json", "sharegpt", takes.1),
    ] {
        if take > 0 {
            sources += &format!(
                "  - name: {name}\n    files: [{ROOT}/tests/fixtures/demo/{file}]\n    format: {format}\n    take: {take}\n    sample: first\n"
            );
        }
    }
    let yaml = format!(
        "name: regen-test\nseed: 7\n\
         tokenizer: {{path: {ROOT}/templates/qwen3.6/tokenizer.json.zst}}\n\
         template: {{path: {ROOT}/templates/qwen3.6/chat_template.jinja}}\n\
         min_supervised_tokens: 1\n\
         regenerate:\n  endpoints: [{endpoint}]\n  model: tiny\n  cache_dir: cache\n  retries: 2\n{settings}\
         sources:\n{sources}{extra_source}output: {{dir: {out}}}\n"
    );
    let p = dir.join(format!("{out}.yaml"));
    std::fs::write(&p, yaml).expect("pipeline");
    p
}

fn build(pipeline: &Path) -> std::process::Output {
    bin()
        .args(["build", "--threads", "2"])
        .arg(pipeline)
        .output()
        .expect("run chatshards")
}

fn tally(manifest: &Value, source: &str) -> Value {
    manifest["sources"][source]["regenerate"].clone()
}

fn balanced(t: &Value) -> bool {
    let n = |k: &str| t[k].as_u64().unwrap_or(0);
    n("requested") == n("succeeded") + n("errored") + n("truncated") + n("skipped")
}

fn cache_files(dir: &Path) -> usize {
    let Ok(subdirs) = std::fs::read_dir(dir) else {
        return 0;
    };
    subdirs
        .flatten()
        .filter_map(|d| std::fs::read_dir(d.path()).ok())
        .flat_map(|d| d.flatten())
        .filter(|f| f.path().extension().is_some_and(|e| e == "json"))
        .count()
}

#[test]
fn rows_are_the_servers_prompt_and_completion_ids_with_the_mask() {
    let server = Server::start("tiny");
    let tmp = tempfile::tempdir().expect("tmp");
    let p = pipeline(tmp.path(), &server.url, "", (6, 4), &[], "out");
    let out = tmp.path().join("out");
    let built = build(&p);
    assert!(built.status.success(), "{}", stderr(&built));
    let log = server.with(|s| s.log.clone());
    let rows = rows(&out);
    assert!(rows.len() >= 10, "{} rows", rows.len());
    for (id, (ids, mask)) in &rows {
        let completion = generation_of(&log, id, ids, mask);
        assert_eq!(completion.last(), Some(&IM_END));
    }
    let manifest = json(&out.join("manifest.json"));
    for source in ["chat", "tools"] {
        let t = tally(&manifest, source);
        assert!(balanced(&t), "{source}: {t}");
        assert_eq!(t["errored"], 0);
    }
    // Single-turn chats: one request each, none skipped.
    let chat = tally(&manifest, "chat");
    assert_eq!(
        (chat["conversations"].as_u64(), chat["requested"].as_u64()),
        (Some(6), Some(6))
    );
    assert_eq!(manifest["regenerate"]["chat"]["model"], "tiny");
    // The demo's tool rows: the regenerated call is answered by the dataset's result, and the
    // regenerated conversation (calls, reasoning) is what conversations.jsonl holds.
    let conversations = std::fs::read_to_string(out.join("conversations.jsonl")).expect("jsonl");
    assert!(
        conversations.contains("Reply "),
        "regenerated answers in conversations.jsonl"
    );
    assert!(
        !conversations.contains("Arrow schema model error column"),
        "no original answer"
    );
    let tools = tally(&manifest, "tools");
    assert!(tools["succeeded"].as_u64() > Some(4), "{tools}");
    // A second build from the same cache sends nothing and writes the same bytes.
    let before = server.with(|s| s.received);
    let p2 = pipeline(tmp.path(), &server.url, "", (6, 4), &[], "out2");
    let again = build(&p2);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(
        server.with(|s| s.received),
        before,
        "every request came from the cache"
    );
    let out2 = tmp.path().join("out2");
    let (m1, m2) = (manifest, json(&out2.join("manifest.json")));
    assert_eq!(
        (&m1["build_id"], &m1["dataset_sha256"]),
        (&m2["build_id"], &m2["dataset_sha256"])
    );
    assert_eq!(m1["sources"], m2["sources"]);
    for f in ["conversations.jsonl", "rejects.jsonl"] {
        assert_eq!(
            std::fs::read(out.join(f)).ok(),
            std::fs::read(out2.join(f)).ok(),
            "{f}"
        );
    }
}

#[test]
fn transient_failures_are_retried_and_lasting_ones_counted() {
    let server = Server::start("tiny");
    server.with(|s| {
        s.faults = [Fault::Status(429), Fault::Drop, Fault::Status(503)].into();
    });
    let tmp = tempfile::tempdir().expect("tmp");
    let extra = extra_rows();
    let p = pipeline(tmp.path(), &server.url, "", (3, 0), &extra, "out");
    let built = build(&p);
    assert!(built.status.success(), "{}", stderr(&built));
    let out = tmp.path().join("out");
    let manifest = json(&out.join("manifest.json"));
    let chat = tally(&manifest, "chat");
    assert_eq!(
        (chat["succeeded"].as_u64(), chat["errored"].as_u64()),
        (Some(3), Some(0))
    );
    let extra = tally(&manifest, "extra");
    assert_eq!(extra["errored"], 1, "{extra}");
    assert_eq!(extra["truncated"], 1, "{extra}");
    assert!(balanced(&extra));
    assert_eq!(manifest["sources"]["extra"]["rejected"]["regen_error"], 1);
    assert_eq!(
        manifest["sources"]["extra"]["rejected"]["regen_truncated"],
        1
    );
    let rejects = std::fs::read_to_string(out.join("rejects.jsonl")).expect("rejects");
    assert!(
        rejects.contains("assistant turn 1 of 1: ")
            && rejects.contains("HTTP 500: engine crashed (after 3 attempt(s))"),
        "{rejects}"
    );
    // 3 injected faults retried, 3 attempts at the failing row, 3 chats, 1 truncated.
    assert_eq!(server.with(|s| s.received), 3 + 3 + 3 + 1);
    // The truncated generation, kept under `truncated: keep` (from the cache: nothing sent).
    let before = server.with(|s| s.received);
    let keep = pipeline(
        tmp.path(),
        &server.url,
        "  truncated: keep\n",
        (3, 0),
        &extra_rows(),
        "kept",
    );
    let built = build(&keep);
    assert!(built.status.success(), "{}", stderr(&built));
    let manifest = json(&tmp.path().join("kept/manifest.json"));
    assert_eq!(tally(&manifest, "extra")["truncated"], 1);
    assert_eq!(manifest["sources"]["extra"]["kept"], 1);
    // Only the failing row is asked again (3 attempts): errors are never cached.
    assert_eq!(server.with(|s| s.received), before + 3);
}

fn extra_rows() -> Vec<Value> {
    vec![
        json!({"messages": [{"role": "user", "content": "ALWAYS500 please"},
                            {"role": "assistant", "content": "old"}]}),
        json!({"messages": [{"role": "user", "content": "a LONG one"},
                            {"role": "assistant", "content": "old"}]}),
    ]
}

/// Three-turn chats for `rows: per_conversation`.
fn multi_turn_rows() -> Vec<Value> {
    (0..2)
        .map(|i| {
            json!({"messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": format!("first question {i}")},
                {"role": "assistant", "content": "old 1"},
                {"role": "user", "content": "and then?"},
                {"role": "assistant", "content": "old 2"},
                {"role": "user", "content": "last one"},
                {"role": "assistant", "content": "old 3"}]})
        })
        .collect()
}

#[test]
fn per_conversation_rows_where_the_template_keeps_earlier_turns() {
    let server = Server::start("tiny");
    let tmp = tempfile::tempdir().expect("tmp");
    let settings = "  rows: per_conversation\n";
    // Qwen3.6 keeps an earlier turn's reasoning only with preserve_thinking.
    let p = pipeline(
        tmp.path(),
        &server.url,
        settings,
        (0, 0),
        &multi_turn_rows(),
        "kept",
    );
    let yaml = std::fs::read_to_string(&p).expect("yaml").replace(
        "chat_template.jinja}",
        "chat_template.jinja, kwargs: {preserve_thinking: true}}",
    );
    std::fs::write(&p, yaml).expect("yaml");
    let built = build(&p);
    assert!(built.status.success(), "{}", stderr(&built));
    let log = server.with(|s| s.log.clone());
    assert_eq!(log.len(), 6, "three turns of two chats");
    let manifest = json(&tmp.path().join("kept/manifest.json"));
    let kept = rows(&tmp.path().join("kept"));
    assert_eq!(kept.len(), 2, "{}", tally(&manifest, "extra"));
    for (row_ids, mask) in kept.values() {
        // The generations of this conversation: each one's prompt and completion are a prefix
        // of the row (the conversations run concurrently, so the log interleaves them).
        let chat: Vec<&(Vec<u32>, Vec<u32>)> = log
            .iter()
            .filter(|(p, c)| row_ids.starts_with(p) && row_ids[p.len()..].starts_with(c))
            .collect();
        assert_eq!(chat.len(), 3);
        // The row is the last generation's prompt and completion; its mask is 1 exactly over
        // the three completions, where the server's later prompts placed them.
        let (last_prompt, last_completion) = chat.iter().max_by_key(|(p, _)| p.len()).expect("3");
        assert_eq!(row_ids.len(), last_prompt.len() + last_completion.len());
        let mut expected = vec![0u8; row_ids.len()];
        for (prompt, completion) in &chat {
            expected[prompt.len()..prompt.len() + completion.len()].fill(1);
        }
        assert_eq!(mask, &expected);
        assert_eq!(
            mask.iter().filter(|&&m| m == 1).count(),
            chat.iter().map(|(_, c)| c.len()).sum::<usize>()
        );
    }
    let t = tally(&manifest, "extra");
    assert_eq!(
        (t["succeeded"].as_u64(), t["not_verbatim"].as_u64()),
        (Some(6), Some(0))
    );
    assert_eq!(manifest["regenerate"]["extra"]["rows"], "per_conversation");

    // Without preserve_thinking the template drops the earlier reasoning: the later prompts
    // differ from the earlier prompt and completion, so the rows are per generation and the
    // conversations counted.
    let p = pipeline(
        tmp.path(),
        &server.url,
        settings,
        (0, 0),
        &multi_turn_rows(),
        "split",
    );
    let built = build(&p);
    assert!(built.status.success(), "{}", stderr(&built));
    let manifest = json(&tmp.path().join("split/manifest.json"));
    let t = tally(&manifest, "extra");
    assert_eq!(
        (t["succeeded"].as_u64(), t["not_verbatim"].as_u64()),
        (Some(6), Some(2))
    );
    let split = rows(&tmp.path().join("split"));
    assert_eq!(split.len(), 6);
    let log = server.with(|s| s.log.clone());
    for (ids, mask) in split.values() {
        let (prompt, completion) = log
            .iter()
            .find(|(p, c)| p.len() + c.len() == ids.len() && ids.starts_with(p) && ids.ends_with(c))
            .expect("a row per generation");
        assert!(mask[..prompt.len()].iter().all(|&m| m == 0));
        assert_eq!(mask[prompt.len()..].len(), completion.len());
        assert!(mask[prompt.len()..].iter().all(|&m| m == 1));
    }
}

#[test]
fn a_wrong_model_or_no_server_stops_the_build_before_any_work() {
    let server = Server::start("other");
    let tmp = tempfile::tempdir().expect("tmp");
    let p = pipeline(tmp.path(), &server.url, "", (2, 0), &[], "out");
    let built = build(&p);
    assert!(!built.status.success());
    let err = stderr(&built);
    assert!(
        err.contains(&format!(
            "endpoint {} serves `other`, not `tiny`",
            server.url
        )),
        "{err}"
    );
    assert_eq!(server.with(|s| s.received), 0);
    let free = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", free.local_addr().expect("addr"));
    drop(free);
    let p = pipeline(tmp.path(), &url, "", (2, 0), &[], "out");
    let built = build(&p);
    assert!(!built.status.success());
    assert!(
        stderr(&built).contains(&format!("endpoint {url} is unreachable")),
        "{}",
        stderr(&built)
    );
    assert!(!tmp.path().join("out").exists());
}

fn locked_build(pipeline: &Path, offline: bool) -> std::process::Output {
    let mut cmd = bin();
    if offline {
        cmd.env("CHATSHARDS_REGENERATE_OFFLINE", "1");
    }
    cmd.args(["build", "--locked", "--fresh", "--threads", "2"])
        .arg(pipeline)
        .output()
        .expect("run chatshards")
}

#[test]
fn the_lock_pins_the_served_version_and_a_locked_build_checks_it() {
    let server = Server::start("tiny");
    let tmp = tempfile::tempdir().expect("tmp");
    let written = pipeline(tmp.path(), &server.url, "", (3, 0), &[], "out");
    // Not `out.yaml`: its lockfile `out.lock` would be the output's build lock.
    let p = tmp.path().join("p.yaml");
    std::fs::rename(&written, &p).expect("rename");
    let lock = |args: &[&str]| bin().arg("lock").args(args).arg(&p).output().expect("lock");
    let locked = lock(&[]);
    assert!(locked.status.success(), "{}", stderr(&locked));
    let lock_path = tmp.path().join("p.lock");
    let text = std::fs::read_to_string(&lock_path).expect("lock");
    assert!(
        text.ends_with("regenerate:\n  - model: \"tiny\"\n    server_version: \"0.0-test\"\n"),
        "{text}"
    );
    let built = locked_build(&p, false);
    assert!(built.status.success(), "{}", stderr(&built));
    let out = tmp.path().join("out");
    let first = json(&out.join("manifest.json"));
    assert_eq!(first["regenerate"]["chat"]["server_version"], "0.0-test");
    assert_eq!(first["regenerate"]["chat"]["model"], "tiny");

    // The server is upgraded: a locked build refuses before sending anything...
    server.with(|s| {
        s.version = "0.1-test".to_owned();
        s.received = 0;
    });
    let refused = locked_build(&p, false);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains(&format!(
            "endpoint {} serves `tiny` with server version `0.1-test`, but the lockfile pins version `0.0-test`",
            server.url
        )),
        "{}",
        stderr(&refused)
    );
    assert_eq!(server.with(|s| s.received), 0);
    // ...relocking without --upgrade keeps the pin (no server asked)...
    assert!(lock(&[]).status.success());
    assert_eq!(std::fs::read_to_string(&lock_path).expect("lock"), text);
    // ...a rebuild from the cache alone still works and is the same dataset...
    let offline = locked_build(&p, true);
    assert!(offline.status.success(), "{}", stderr(&offline));
    let again = json(&out.join("manifest.json"));
    assert_eq!(
        (&again["build_id"], &again["dataset_sha256"]),
        (&first["build_id"], &first["dataset_sha256"])
    );
    // ...and `lock --upgrade` pins the new version, which is a new build_id.
    let upgraded = lock(&["--upgrade"]);
    assert!(upgraded.status.success(), "{}", stderr(&upgraded));
    assert!(std::fs::read_to_string(&lock_path)
        .expect("lock")
        .contains("server_version: \"0.1-test\""));
    let built = locked_build(&p, false);
    assert!(built.status.success(), "{}", stderr(&built));
    let upgraded = json(&out.join("manifest.json"));
    assert_eq!(upgraded["regenerate"]["chat"]["server_version"], "0.1-test");
    assert_ne!(upgraded["build_id"], first["build_id"]);
    assert_eq!(
        server.with(|s| s.received),
        0,
        "the same requests: from the cache"
    );

    // A lockfile without the model is stale for a locked build.
    std::fs::write(&lock_path, text.split("regenerate:").next().expect("text")).expect("write");
    let stale = locked_build(&p, true);
    assert!(!stale.status.success());
    assert!(
        stderr(&stale).contains("regenerate model `tiny` is not in the lockfile"),
        "{}",
        stderr(&stale)
    );
}

#[test]
fn a_killed_build_resumes_without_resending_and_ends_byte_identical() {
    let server = Server::start("tiny");
    let tmp = tempfile::tempdir().expect("tmp");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).expect("a");
    std::fs::create_dir_all(&b).expect("b");
    let settings = "  concurrency: 2\n";
    // Uninterrupted, with its own cache.
    let pa = pipeline(&a, &server.url, settings, (40, 10), &[], "out");
    let clean = build(&pa);
    assert!(clean.status.success(), "{}", stderr(&clean));
    let total = cache_files(&a.join("cache"));
    assert_eq!(server.with(|s| s.received) as usize, total);
    // Killed half-way: the server slows down so that the build is caught in the middle.
    server.with(|s| {
        s.received = 0;
        s.delay = Duration::from_millis(40);
    });
    let pb = pipeline(&b, &server.url, settings, (40, 10), &[], "out");
    let mut child = bin()
        .args(["build", "--threads", "2"])
        .arg(&pb)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    while server.with(|s| s.received) < (total / 2) as u64 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the build did not progress"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let done = cache_files(&b.join("cache"));
    assert!(
        done > 0 && done < total,
        "{done} of {total} cached when killed"
    );
    server.with(|s| {
        s.received = 0;
        s.delay = Duration::ZERO;
    });
    let resumed = build(&pb);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert_eq!(
        server.with(|s| s.received) as usize,
        total - done,
        "only the unfinished requests are sent"
    );
    let (out_a, out_b) = (a.join("out"), b.join("out"));
    let (ma, mb) = (
        json(&out_a.join("manifest.json")),
        json(&out_b.join("manifest.json")),
    );
    assert_eq!(ma["dataset_sha256"], mb["dataset_sha256"]);
    for f in ["conversations.jsonl", "rejects.jsonl"] {
        assert_eq!(
            std::fs::read(out_a.join(f)).ok(),
            std::fs::read(out_b.join(f)).ok(),
            "{f}"
        );
    }
    assert_eq!(rows(&out_a), rows(&out_b));
    assert_eq!(
        ma["sources"], mb["sources"],
        "the same accounting after a resume"
    );
    // Offline from the cache: no server, `verify --rebuild` rebuilds the same bytes.
    server.with(|s| s.received = 0);
    let verify = bin()
        .env("CHATSHARDS_REGENERATE_OFFLINE", "1")
        .args(["verify", "--rebuild"])
        .arg(&out_b)
        .output()
        .expect("verify");
    assert!(verify.status.success(), "{}", stderr(&verify));
    assert_eq!(server.with(|s| s.received), 0, "offline: nothing sent");
}

/// Every generation in a cache directory: (prompt ids, completion ids).
/// Checks that row `id` is one generation the server made, its prompt ids (mask 0) then its
/// completion ids (mask 1), and returns the completion; panics naming the row otherwise.
fn generation_of<'a>(
    generations: &'a [(Vec<u32>, Vec<u32>)],
    id: &str,
    ids: &[u32],
    mask: &[u8],
) -> &'a [u32] {
    let (prompt, completion) = generations
        .iter()
        .find(|(p, c)| p.len() + c.len() == ids.len() && ids.starts_with(p) && ids.ends_with(c))
        .unwrap_or_else(|| panic!("row {id} is no generation of the server"));
    assert!(mask[..prompt.len()].iter().all(|&m| m == 0), "{id}");
    assert!(mask[prompt.len()..].iter().all(|&m| m == 1), "{id}");
    completion
}

fn cached(dir: &Path) -> Vec<(Vec<u32>, Vec<u32>)> {
    let mut all = Vec::new();
    for sub in std::fs::read_dir(dir).expect("cache").flatten() {
        for f in std::fs::read_dir(sub.path()).expect("cache").flatten() {
            let record = json(&f.path());
            let body: Value =
                serde_json::from_str(record["body"].as_str().expect("body")).expect("body json");
            let ids = |k: &str| -> Vec<u32> {
                body[k]
                    .as_array()
                    .expect("ids")
                    .iter()
                    .map(|v| v.as_u64().expect("id") as u32)
                    .collect()
            };
            all.push((ids("prompt_ids"), ids("completion_ids")));
        }
    }
    all
}

/// vLLM's count of finished requests (`/metrics`).
fn vllm_requests(url: &str) -> u64 {
    let addr = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    text.lines()
        .filter(|l| l.starts_with("vllm:request_success_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Run by `make test-vllm` against the vLLM server it starts (tests/vllm/run.sh).
#[test]
#[ignore = "needs a vLLM server: make test-vllm"]
fn a_real_vllm_server() {
    let url = std::env::var("CHATSHARDS_VLLM_URL").expect("CHATSHARDS_VLLM_URL");
    let tmp = tempfile::tempdir().expect("tmp");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).expect("a");
    std::fs::create_dir_all(&b).expect("b");
    let settings =
        "  sampling: {temperature: 0, max_tokens: 16}\n  concurrency: 4\n  truncated: keep\n";
    // 50 demo conversations: 40 chats, 10 with tool calls.
    let pa = pipeline(&a, &url, settings, (40, 10), &[], "out");
    let before = vllm_requests(&url);
    let clean = build(&pa);
    assert!(clean.status.success(), "{}", stderr(&clean));
    eprintln!("{}", stderr(&clean));
    let total = cache_files(&a.join("cache"));
    assert_eq!(
        (vllm_requests(&url) - before) as usize,
        total,
        "one request per generation"
    );
    let out_a = a.join("out");
    let manifest = json(&out_a.join("manifest.json"));
    for source in ["chat", "tools"] {
        let t = tally(&manifest, source);
        eprintln!("{source}: {t}");
        assert!(balanced(&t), "{source}: {t}");
        // Every prompt the server rendered equals chatshards' render of the same messages.
        assert_eq!(t["render_mismatch"], 0, "{source}: {t}");
        assert_eq!(t["errored"], 0, "{source}: {t}");
        assert!(manifest["sources"][source]["rejected"]
            .get("render_mismatch")
            .is_none());
    }
    let generations = cached(&a.join("cache"));
    let rows_a = rows(&out_a);
    assert!(rows_a.len() >= 50, "{} rows", rows_a.len());
    for (id, (ids, mask)) in &rows_a {
        assert!(!generation_of(&generations, id, ids, mask).is_empty());
    }
    // Killed half-way, resumed: only the unfinished requests are sent.
    let pb = pipeline(&b, &url, settings, (40, 10), &[], "out");
    let mut child = bin()
        .args(["build", "--threads", "2"])
        .arg(&pb)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let started = Instant::now();
    while cache_files(&b.join("cache")) < total / 2 {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the build did not progress"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    let done = cache_files(&b.join("cache"));
    let before = vllm_requests(&url);
    let resumed = build(&pb);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let sent = (vllm_requests(&url) - before) as usize;
    eprintln!("killed with {done} of {total} generations cached; the rerun sent {sent}");
    assert_eq!(sent, total - done, "only the unfinished requests are sent");
    let out_b = b.join("out");
    let mb = json(&out_b.join("manifest.json"));
    assert_eq!(manifest["dataset_sha256"], mb["dataset_sha256"]);
    assert_eq!(manifest["sources"], mb["sources"]);
    assert_eq!(rows_a, rows(&out_b));
    // Offline from the cache.
    let before = vllm_requests(&url);
    let verify = bin()
        .env("CHATSHARDS_REGENERATE_OFFLINE", "1")
        .args(["verify", "--rebuild"])
        .arg(&out_b)
        .output()
        .expect("verify");
    assert!(verify.status.success(), "{}", stderr(&verify));
    assert_eq!(vllm_requests(&url), before, "offline: nothing sent");
    // Locked: the lockfile pins the version vLLM reports; a locked build checks it at start,
    // records it in the manifest, and answers from the cache.
    let version = http_get(&url, "/version");
    let version: Value = serde_json::from_str(&version).expect("/version json");
    let version = version["version"].as_str().expect("version").to_owned();
    let p = a.join("p.yaml");
    let yaml = std::fs::read_to_string(&pa).expect("yaml");
    std::fs::write(
        &p,
        yaml.replace("output: {dir: out}", "output: {dir: locked}"),
    )
    .expect("p");
    let lock = bin().arg("lock").arg(&p).output().expect("lock");
    assert!(lock.status.success(), "{}", stderr(&lock));
    let text = std::fs::read_to_string(a.join("p.lock")).expect("p.lock");
    assert!(
        text.contains(&format!("server_version: \"{version}\"")),
        "{text}"
    );
    let locked = locked_build(&p, false);
    assert!(locked.status.success(), "{}", stderr(&locked));
    let ml = json(&a.join("locked/manifest.json"));
    assert_eq!(ml["regenerate"]["chat"]["server_version"], version.as_str());
    assert_eq!(ml["dataset_sha256"], manifest["dataset_sha256"]);
    assert_eq!(vllm_requests(&url), before, "locked: from the cache");
    eprintln!("locked at vLLM {version}: the same dataset_sha256, nothing sent");
}

/// The body of `GET path` (HTTP/1.0, so the server closes the connection).
fn http_get(url: &str, path: &str) -> String {
    let addr = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).expect("connect");
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("write");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}
