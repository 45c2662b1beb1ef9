//! `chatshards serve-render`: vLLM's `/v1/chat/completions/render` as speculators'
//! `render_client.py` calls it. Token ids equal the build's (`chatshards render`, the build's
//! row code) for the demo conversations; malformed, oversized and concurrent requests.
//! `make test-speculators-render` runs speculators' own prepare-data against it.

use crate::common;
use common::{bin, root, ROOT};

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(extra: &[&str]) -> Server {
    let mut child = bin()
        .arg("serve-render")
        .args(["--template", &root("templates/qwen3.6/chat_template.jinja")])
        .args(["--tokenizer", &root("templates/qwen3.6/tokenizer.json.zst")])
        .args(["--port", "0"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("serve-render exited before listening")
            .expect("stderr");
        if let Some(at) = line.find("at http://") {
            let rest = &line[at + "at http://".len()..];
            break rest.split_whitespace().next().expect("address").to_string();
        }
    };
    // Drain the rest so the server never blocks writing to a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Server { child, addr }
}

/// One HTTP/1.1 request; the status and the body.
fn http(addr: &str, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).expect("write");
    // The server may answer (413) before reading a large body; a reset then is expected.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

fn render(addr: &str, request: &Value) -> (u16, Value) {
    let (status, body) = http(
        addr,
        "POST",
        "/v1/chat/completions/render",
        request.to_string().as_bytes(),
    );
    let value = serde_json::from_str(&body).unwrap_or_else(|_| json!({"raw": body}));
    (status, value)
}

fn ids(v: &Value) -> Vec<u64> {
    v["token_ids"]
        .as_array()
        .unwrap_or_else(|| panic!("no token_ids in {v}"))
        .iter()
        .map(|i| i.as_u64().expect("id"))
        .collect()
}

/// The demo's OpenAI-format conversations that end with an assistant turn (the build supervises
/// every assistant turn of those under `policy: all`, one row of the whole conversation).
fn demo_conversations() -> Vec<Value> {
    let text =
        std::fs::read_to_string(format!("{ROOT}/tests/fixtures/demo/chat.jsonl")).expect("fixture");
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["messages"]
                .as_array()
                .and_then(|m| m.last())
                .is_some_and(|m| m["role"] == "assistant")
        })
        .collect()
}

#[test]
fn token_ids_equal_the_builds_for_the_demo_conversations() {
    let convs = demo_conversations();
    assert!(convs.len() > 100, "{} conversations", convs.len());
    // The build's row code over the same lines.
    let input: String = convs.iter().map(|c| format!("{c}\n")).collect();
    let mut child = bin()
        .arg("render")
        .args(["--template", &root("templates/qwen3.6/chat_template.jinja")])
        .args(["--tokenizer", &root("templates/qwen3.6/tokenizer.json.zst")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("render");
    let rows: Vec<Value> = String::from_utf8(out.stdout)
        .expect("utf8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(rows.len(), convs.len());

    let server = start(&[]);
    let mut compared = 0;
    let mut refused = 0;
    for (conv, row) in convs.iter().zip(&rows) {
        let mut request = json!({"messages": conv["messages"], "add_generation_prompt": false});
        if let Some(tools) = conv.get("tools") {
            request["tools"] = tools.clone();
        }
        let (status, answer) = render(&server.addr, &request);
        if let Some(error) = row.get("error") {
            // What the build rejects, the server refuses, with the same reason.
            assert_eq!(status, 400, "{answer}");
            let message = answer["error"]["message"].as_str().expect("message");
            assert!(
                message.starts_with(error["code"].as_str().expect("code")),
                "{message} vs {error}"
            );
            refused += 1;
            continue;
        }
        assert_eq!(status, 200, "{answer}");
        let want: Vec<u64> = row["input_ids"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|i| i.as_u64().expect("id"))
            .collect();
        assert_eq!(ids(&answer), want, "conversation {conv}");
        assert_eq!(answer["features"], Value::Null);
        compared += 1;

        // The generation-prompt render of the history is where the last turn's supervision
        // starts: a prefix of the full render when the template does not rewrite history.
        let history = &conv["messages"].as_array().expect("messages");
        let mut prompt = request.clone();
        prompt["messages"] = Value::Array(history[..history.len() - 1].to_vec());
        prompt["add_generation_prompt"] = json!(true);
        prompt["truncate_prompt_tokens"] = json!(5);
        prompt["truncation_side"] = json!("right");
        let (status, answer) = render(&server.addr, &prompt);
        if status == 200 {
            assert_eq!(
                ids(&answer),
                want[..5].to_vec(),
                "right truncation keeps the head"
            );
        }
    }
    assert!(compared > 100, "{compared} compared, {refused} refused");
}

#[test]
fn bad_requests_are_answered_with_their_reason() {
    let server = start(&["--max-body-bytes", "4096", "--model", "qwen-test"]);
    let a = &server.addr;
    let user = json!([{"role": "user", "content": "hi"}]);

    let (status, body) = http(a, "POST", "/v1/chat/completions/render", b"{not json");
    assert_eq!(status, 400);
    let v: Value = serde_json::from_str(&body).expect("json error");
    assert_eq!(v["error"]["code"], 400);
    assert_eq!(v["error"]["type"], "BadRequestError");
    assert!(v["error"]["message"]
        .as_str()
        .expect("message")
        .contains("not a valid render request"));

    let (status, v) = render(a, &json!({"messages": "hi"}));
    assert_eq!(status, 400, "{v}");

    // The template's own exception, as the build records it.
    let (status, v) = render(
        a,
        &json!({"messages": [{"role": "system", "content": "only a system turn"}]}),
    );
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .expect("message")
            .contains("No user query found in messages."),
        "{v}"
    );

    // Control-token text in data is refused, as the build refuses it.
    let (status, v) = render(
        a,
        &json!({"messages": [{"role": "user", "content": "a <|im_start|> b"}]}),
    );
    assert_eq!(status, 400, "{v}");

    let (status, v) = render(
        a,
        &json!({"messages": user, "truncate_prompt_tokens": 2, "truncation_side": "middle"}),
    );
    assert_eq!(status, 400, "{v}");

    // Oversized: refused before rendering.
    let big = json!({"messages": [{"role": "user", "content": "x".repeat(10_000)}]});
    let (status, _) = http(
        a,
        "POST",
        "/v1/chat/completions/render",
        big.to_string().as_bytes(),
    );
    assert_eq!(status, 413);

    // The server still answers, and the probes vLLM clients use work.
    let (status, v) = render(a, &json!({"messages": user}));
    assert_eq!(status, 200, "{v}");
    let full = ids(&v);
    // add_generation_prompt defaults to true, as in vLLM: the render ends with the prompt.
    let (_, no_prompt) = render(
        a,
        &json!({"messages": user, "add_generation_prompt": false}),
    );
    assert!(full.len() > ids(&no_prompt).len());
    assert!(full.starts_with(&ids(&no_prompt)));
    // Per-request kwargs are laid over the server's: thinking off changes the prompt's tail.
    let (_, off) = render(
        a,
        &json!({"messages": user, "chat_template_kwargs": {"enable_thinking": false}}),
    );
    assert_ne!(ids(&off), full);
    // Left truncation (vLLM's default side) keeps the tail.
    let (_, tail) = render(a, &json!({"messages": user, "truncate_prompt_tokens": 3}));
    assert_eq!(ids(&tail), full[full.len() - 3..].to_vec());

    assert_eq!(http(a, "GET", "/health", b"").0, 200);
    let (status, body) = http(a, "GET", "/v1/models", b"");
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["data"][0]["id"], "qwen-test");
    assert_eq!(http(a, "GET", "/nowhere", b"").0, 404);
}

#[test]
fn concurrent_requests_get_the_answers_sequential_ones_get() {
    let server = start(&["--threads", "2"]);
    let convs = demo_conversations();
    let requests: Vec<Value> = convs
        .iter()
        .take(24)
        .map(|c| json!({"messages": c["messages"], "tools": c.get("tools").cloned().unwrap_or(json!([])), "add_generation_prompt": false}))
        .collect();
    let sequential: Vec<(u16, Value)> = requests.iter().map(|r| render(&server.addr, r)).collect();
    let addr = server.addr.clone();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..12)
            .map(|t| {
                let (requests, addr) = (&requests, &addr);
                s.spawn(move || {
                    // Each thread walks the requests from a different start.
                    (0..requests.len())
                        .map(|i| (i + t) % requests.len())
                        .map(|i| (i, render(addr, &requests[i])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for (i, answer) in h.join().expect("thread") {
                assert_eq!(answer.0, sequential[i].0);
                assert_eq!(answer.1["token_ids"], sequential[i].1["token_ids"]);
            }
        }
    });
}
