//! Hostile input and faults: output directories over inputs and projects, look-alike manifests,
//! concurrent builds, signals, runaway templates, broken readers' input, `render` on bad lines,
//! corrupted shards. Every case asserts the exact outcome, and every run of the binary has a
//! deadline, so nothing here can hang CI.

use crate::common;
use common::{bin, manifest, root, stderr};

use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Generous: the slowest case here takes a few seconds in a debug build on a busy machine.
const DEADLINE: Duration = Duration::from_secs(120);

/// Waits for `child` with the deadline; kills it and fails the test past it.
fn finish(mut child: Child) -> Output {
    let started = Instant::now();
    loop {
        match child.try_wait().expect("wait") {
            Some(_) => return child.wait_with_output().expect("output"),
            None if started.elapsed() > DEADLINE => {
                let _ = child.kill();
                panic!("chatshards ran past {DEADLINE:?}");
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Runs the binary with `args` in `cwd`, `stdin` as its input, within the deadline.
fn run_in(cwd: &Path, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = bin()
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut input = child.stdin.take().expect("stdin");
    let bytes = stdin.to_vec();
    // Written beside the wait, so a child that answers as it reads never blocks on a full pipe.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&bytes);
    });
    let out = finish(child);
    writer.join().expect("writer");
    out
}

fn build_in(cwd: &Path, pipeline: &Path) -> Output {
    run_in(
        cwd,
        &["build", "--threads", "2", &pipeline.display().to_string()],
        b"",
    )
}

/// Asserts a failed run (exit 1, no panic) whose message contains `needle`.
fn assert_refused(out: &Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(needle), "expected {needle:?} in:\n{err}");
}

fn assert_success(out: &Output) {
    assert!(out.status.success(), "{}", stderr(out));
}

/// A well-formed chat row.
fn chat_row(i: usize) -> String {
    json!({"messages": [
        {"role": "user", "content": format!("Question number {i}: what is {i} plus {i}?")},
        {"role": "assistant", "content": format!("The answer is {}. Adding a number to itself doubles it.", 2 * i)},
    ]})
    .to_string()
}

/// `n` chat rows as JSON lines.
fn chat_rows(n: usize) -> String {
    (0..n).map(|i| chat_row(i) + "\n").collect()
}

/// Writes `pipeline.yaml` into `dir` over the given sources (YAML list items), with `extra`
/// top-level YAML and `out` as `output.dir`.
fn pipeline_yaml(dir: &Path, sources: &str, extra: &str, out: &str) -> PathBuf {
    let yaml = format!(
        "name: hostile\nseed: 1\ntokenizer:\n  path: {tok}\ntemplate:\n  path: {tpl}\nmin_supervised_tokens: 1\n{extra}sources:\n{sources}output:\n  dir: {out}\n",
        tok = root("templates/qwen3.6/tokenizer.json.zst"),
        tpl = root("templates/qwen3.6/chat_template.jinja"),
    );
    let path = dir.join("pipeline.yaml");
    std::fs::write(&path, yaml).expect("write pipeline");
    path
}

/// A source item reading `file` as `openai`.
fn source(name: &str, file: &Path) -> String {
    format!(
        "  - name: {name}\n    files: [{}]\n    format: openai\n",
        file.display()
    )
}

/// A folder with `data/chat.jsonl` (`rows` rows) and a pipeline writing to `out`.
fn project(rows: usize, out: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    let file = data.join("chat.jsonl");
    std::fs::write(&file, chat_rows(rows)).expect("write rows");
    let p = pipeline_yaml(tmp.path(), &source("chat", &file), "", out);
    (tmp, p)
}

/// Per source: read = kept + rejected + filtered + deduplicated.
fn assert_balanced(m: &Value) {
    for (name, s) in m["sources"].as_object().expect("sources") {
        let sum = |k: &str| {
            s[k].as_object().map_or(0, |o| {
                o.values().map(|v| v.as_u64().unwrap_or(0)).sum::<u64>()
            })
        };
        assert_eq!(
            s["read"].as_u64().expect("read"),
            s["kept"].as_u64().expect("kept")
                + sum("rejected")
                + sum("filtered")
                + s["deduplicated"].as_u64().expect("dedup"),
            "{name}: {s}"
        );
    }
}

/// Every file under `dir` with its bytes, to prove nothing was touched.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).expect("read")));
            }
        }
    }
    out.sort();
    out
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

// ---- 1. output directory safety -------------------------------------------------------------

#[test]
fn an_output_dir_over_the_inputs_with_a_look_alike_manifest_is_refused_and_untouched() {
    let (tmp, _) = project(3, "out");
    let data = tmp.path().join("data");
    // Whatever a manifest.json says, the folder holds an input.
    std::fs::write(
        data.join("manifest.json"),
        r#"{"tool": {"name": "chatshards", "version": "0.1.0"}, "shards": []}"#,
    )
    .expect("manifest");
    let p = pipeline_yaml(
        tmp.path(),
        &source("chat", &data.join("chat.jsonl")),
        "",
        "data",
    );
    let before = snapshot(tmp.path());
    let out = build_in(tmp.path(), &p);
    assert_refused(&out, "contains the input `");
    assert_refused(&out, "data/chat.jsonl`");
    assert_eq!(snapshot(tmp.path()), before);
}

#[test]
fn the_pipeline_folder_a_project_root_and_the_current_directory_are_refused() {
    let (tmp, _) = project(3, "out");
    let file = tmp.path().join("data/chat.jsonl");
    let p = pipeline_yaml(tmp.path(), &source("chat", &file), "", ".");
    let before = snapshot(tmp.path());
    assert_refused(&build_in(tmp.path(), &p), "is the pipeline's folder");
    assert_eq!(snapshot(tmp.path()), before);

    // A project folder elsewhere (here: a Cargo.toml in an otherwise empty directory).
    let proj = tmp.path().join("proj");
    std::fs::create_dir(&proj).expect("mkdir");
    std::fs::write(proj.join("Cargo.toml"), "[package]\n").expect("write");
    let p = pipeline_yaml(tmp.path(), &source("chat", &file), "", "proj");
    assert_refused(
        &build_in(tmp.path(), &p),
        "is a project or repository folder (it has `Cargo.toml`)",
    );
    std::fs::create_dir(proj.join(".git")).expect("mkdir");
    std::fs::remove_file(proj.join("Cargo.toml")).expect("rm");
    assert_refused(&build_in(tmp.path(), &p), "(it has `.git`)");

    // The directory the build runs in (and any folder above it).
    let sub = tmp.path().join("work/here");
    std::fs::create_dir_all(&sub).expect("mkdir");
    let p = pipeline_yaml(tmp.path(), &source("chat", &file), "", "work");
    assert_refused(&build_in(&sub, &p), "is or contains the current directory");
    assert!(sub.exists() && proj.join(".git").exists());
}

#[test]
fn a_manifest_not_written_by_chatshards_is_refused() {
    let (tmp, p) = project(3, "out");
    let out_dir = tmp.path().join("out");
    std::fs::create_dir(&out_dir).expect("mkdir");
    for (manifest, why) in [
        (
            "{}",
            "its manifest.json is not a chatshards manifest (missing field `tool`",
        ),
        (
            r#"{"tool": {"name": "other"}, "name": "x", "rows": 1, "inputs": {}, "settings": {}, "sources": {}, "shards": []}"#,
            "its manifest.json was written by `other`, not chatshards",
        ),
        (
            r#"{"tool": {"name": "chatshards"}, "shards": []}"#,
            "is not a chatshards manifest (missing field `name`",
        ),
        (
            r#"{"tool": {"name": "chatshards"}, "name": "x", "rows": 1, "inputs": {}, "settings": {}, "sources": {}, "shards": [{"file": "../data/chat.jsonl"}]}"#,
            "lists a shard `../data/chat.jsonl` that chatshards would not have written",
        ),
    ] {
        std::fs::write(out_dir.join("manifest.json"), manifest).expect("write");
        std::fs::write(out_dir.join("notes.txt"), "mine").expect("write");
        let before = snapshot(tmp.path());
        let out = build_in(tmp.path(), &p);
        assert_refused(&out, "exists and is not a chatshards dataset: ");
        assert_refused(&out, why);
        assert_eq!(snapshot(tmp.path()), before);
    }
}

#[test]
fn a_rebuild_replaces_only_what_the_old_manifest_lists_and_refuses_user_files() {
    let (tmp, p) = project(5, "out");
    let out_dir = tmp.path().join("out");
    assert_success(&build_in(tmp.path(), &p));
    let first = manifest(&out_dir);
    assert_balanced(&first);
    assert_eq!(first["rows"], 5);
    let written = names(&out_dir);
    assert_eq!(
        written,
        [
            "conversations.jsonl",
            "data-00000-of-00001.arrow",
            "dataset_info.json",
            "filtered.jsonl",
            "manifest.json",
            "pipeline.yaml",
            "rejects.jsonl",
            "report.html",
            "state.json",
            "stats.json",
            "token_freq.pt",
            "token_freq_all.pt"
        ]
    );

    // User files next to the dataset: refused, named, untouched.
    std::fs::create_dir(out_dir.join("eval_results")).expect("mkdir");
    std::fs::write(out_dir.join("eval_results/acc.json"), "0.9").expect("write");
    std::fs::write(out_dir.join("NOTES.md"), "mine").expect("write");
    let before = snapshot(tmp.path());
    let out = build_in(tmp.path(), &p);
    assert_refused(
        &out,
        "holds `NOTES.md`, `eval_results/` that chatshards did not write",
    );
    assert_eq!(snapshot(tmp.path()), before);
    std::fs::remove_dir_all(out_dir.join("eval_results")).expect("rm");
    std::fs::remove_file(out_dir.join("NOTES.md")).expect("rm");

    // hidden_states/ keeps its own refusal.
    std::fs::create_dir(out_dir.join("hidden_states")).expect("mkdir");
    assert_refused(&build_in(tmp.path(), &p), "has a `hidden_states/` folder");
    std::fs::remove_dir(out_dir.join("hidden_states")).expect("rm");

    // A clean old output is replaced: new rows, nothing left beside it.
    std::fs::write(tmp.path().join("data/chat.jsonl"), chat_rows(7)).expect("write");
    assert_success(&build_in(tmp.path(), &p));
    let second = manifest(&out_dir);
    assert_balanced(&second);
    assert_eq!(second["rows"], 7);
    assert_eq!(names(&out_dir), written);
    assert_eq!(
        names(tmp.path()),
        ["data", "out", "out.lock", "pipeline.yaml"]
    );
}

#[test]
fn a_second_build_into_a_locked_output_refuses_at_once() {
    let (tmp, p) = project(3, "out");
    // The lock a running build holds (the same advisory flock).
    let lock = std::fs::File::create(tmp.path().join("out.lock")).expect("lock file");
    lock.try_lock().expect("lock");
    let started = Instant::now();
    let out = build_in(tmp.path(), &p);
    assert_refused(&out, "another build is writing `");
    assert_refused(
        &out,
        "out.lock`. Wait for it to finish, or choose another `output.dir`",
    );
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(!tmp.path().join("out").exists());
    // Released (as the kernel does when a build dies): the next build runs.
    drop(lock);
    assert_success(&build_in(tmp.path(), &p));
}

#[test]
fn a_failed_build_removes_its_staging_directory_and_keeps_the_old_output() {
    let (tmp, p) = project(3, "out");
    assert_success(&build_in(tmp.path(), &p));
    let before = snapshot(&tmp.path().join("out"));
    // No row survives: the build fails; the rejects are kept beside the output.
    let strict = std::fs::read_to_string(&p)
        .expect("read")
        .replace("min_supervised_tokens: 1", "min_supervised_tokens: 100000");
    std::fs::write(&p, strict).expect("write");
    let out = build_in(tmp.path(), &p);
    assert_refused(&out, "no rows were kept, so no dataset was written; see `");
    assert_refused(&out, "out.rejects.jsonl` for the reasons");
    assert!(!tmp.path().join("out.partial").exists());
    assert_eq!(snapshot(&tmp.path().join("out")), before);
    assert!(tmp.path().join("out.rejects.jsonl").is_file());
}

#[test]
fn sigterm_and_sigint_during_a_build_remove_the_staging_directory() {
    for (signal, code) in [(libc_sigterm(), 143), (libc_sigint(), 130)] {
        let (tmp, p) = project(30_000, "out");
        let child = bin()
            .args(["build", "--threads", "1"])
            .arg(&p)
            .current_dir(tmp.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let staging = tmp.path().join("out.partial");
        let started = Instant::now();
        while !staging.join("rejects.jsonl").exists() {
            assert!(started.elapsed() < DEADLINE, "no staging directory");
            std::thread::sleep(Duration::from_millis(5));
        }
        let pid = child.id().to_string();
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .expect("kill");
        assert!(sent.success());
        let out = finish(child);
        assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
        assert!(stderr(&out).contains("interrupted: removed the unfinished `"));
        assert!(!staging.exists());
        assert!(!tmp.path().join("out").exists());
    }
}

#[test]
fn a_build_killed_outright_leaves_the_old_output_whole_and_the_next_build_recovers() {
    let (tmp, p) = project(30_000, "out");
    let small = std::fs::read_to_string(tmp.path().join("data/chat.jsonl")).expect("rows");
    std::fs::write(tmp.path().join("data/chat.jsonl"), chat_rows(3)).expect("rows");
    assert_success(&build_in(tmp.path(), &p));
    let old = snapshot(&tmp.path().join("out"));
    std::fs::write(tmp.path().join("data/chat.jsonl"), small).expect("rows");
    let mut child = bin()
        .args(["build", "--threads", "1"])
        .arg(&p)
        .current_dir(tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let staging = tmp.path().join("out.partial");
    let started = Instant::now();
    while !staging.join("rejects.jsonl").exists() {
        assert!(started.elapsed() < DEADLINE, "no staging directory");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    // The old dataset is whole; the staging directory is what the kill left.
    assert_eq!(snapshot(&tmp.path().join("out")), old);
    assert!(staging.exists());
    // The lock died with the process; the next build clears the leftovers and replaces.
    assert_success(&build_in(tmp.path(), &p));
    assert!(!staging.exists());
    let m = manifest(&tmp.path().join("out"));
    assert_balanced(&m);
    assert_eq!(m["rows"], 30_000);
}

fn libc_sigterm() -> i32 {
    15
}
fn libc_sigint() -> i32 {
    2
}

// ---- 2. templates are bounded ---------------------------------------------------------------

fn template_source(name: &str) -> String {
    std::fs::read_to_string(root(&format!("templates/{name}/chat_template.jinja")))
        .expect("template")
}

/// Long real-shaped rows: a tool-calling trajectory of `steps` call/response pairs with `size`
/// bytes of text per message.
fn trajectory(steps: usize, size: usize) -> Value {
    let text = |i: usize| format!("step {i} ").repeat(size / 7 + 1)[..size].to_owned();
    let mut messages = vec![
        json!({"role": "system", "content": text(0)}),
        json!({"role": "user", "content": text(1)}),
    ];
    for i in 0..steps {
        messages.push(
            json!({"role": "assistant", "content": text(i), "reasoning_content": text(i),
            "tool_calls": [{"id": format!("call_{i}"), "type": "function",
                "function": {"name": "bash", "arguments": {"command": text(i), "timeout": 30}}}]}),
        );
        messages
            .push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": text(i)}));
    }
    messages.push(json!({"role": "assistant", "content": text(steps)}));
    Value::Array(messages)
}

/// The official templates on the fixture and oracle rows and on long trajectories use far
/// less fuel and output than their limits: the margins are printed (run with
/// `--nocapture`) and must stay above 8x.
#[test]
fn template_limits_leave_a_wide_margin() {
    use chatshards::render::Renderer;
    let tools = vec![
        json!({"type": "function", "function": {"name": "bash", "description": "Run a command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}}}}}),
    ];
    let mut rows: Vec<(String, Value, Vec<Value>)> = Vec::new();
    for line in std::fs::read_to_string(root("tests/oracle/cases.jsonl"))
        .expect("cases")
        .lines()
    {
        let case: Value = serde_json::from_str(line).expect("case");
        let tools = case["tools"].as_array().cloned().unwrap_or_default();
        rows.push((
            case["name"].as_str().unwrap_or("case").to_owned(),
            case["messages"].clone(),
            tools,
        ));
    }
    for (i, line) in std::fs::read_to_string(root("tests/fixtures/demo/chat.jsonl"))
        .expect("demo")
        .lines()
        .enumerate()
    {
        let row: Value = serde_json::from_str(line).unwrap_or(Value::Null);
        if row["messages"].is_array() {
            rows.push((format!("demo {i}"), row["messages"].clone(), vec![]));
        }
    }
    for (steps, size) in [(10, 100_000), (500, 200), (2_000, 20), (5, 1_000_000)] {
        rows.push((
            format!("trajectory {steps} x {size} B"),
            trajectory(steps, size),
            tools.clone(),
        ));
    }
    let (mut fuel_margin, mut output_margin) = (f64::MAX, f64::MAX);
    let mut worst = (String::new(), String::new());
    for name in ["qwen3.6", "qwen3.5", "qwen3"] {
        let renderer = Renderer::new(&template_source(name), Default::default()).expect("compiles");
        for (row, messages, tools) in &rows {
            let Ok((_, cost)) = renderer.render_counted(messages.clone(), tools, false) else {
                continue; // the template raised on purpose (an oracle error case)
            };
            let fuel = cost.limits.fuel as f64 / cost.fuel.max(1) as f64;
            let output = cost.limits.output_bytes as f64 / cost.output_bytes.max(1) as f64;
            if fuel < fuel_margin {
                fuel_margin = fuel;
                worst.0 = format!("{name} {row}: {cost:?}");
            }
            if output < output_margin {
                output_margin = output;
                worst.1 = format!("{name} {row}: {cost:?}");
            }
        }
    }
    println!("smallest fuel margin {fuel_margin:.1}x ({})", worst.0);
    println!("smallest output margin {output_margin:.1}x ({})", worst.1);
    assert!(fuel_margin > 8.0, "{}", worst.0);
    assert!(output_margin > 8.0, "{}", worst.1);
}

/// Runaway templates: each fails its row with reason `template` and a message naming the
/// limit, quickly, in a build and in `render`.
const RUNAWAY: [(&str, &str); 4] = [
    (
        "an endless printing loop",
        "{% for a in range(100000) %}{% for b in range(100000) %}xxxxxxxxxxxxxxxx{% endfor %}{% endfor %}",
    ),
    (
        "a loop that prints nothing",
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
    ),
    (
        "a string doubled by recursion",
        "{% macro d(s, n) %}{% if n > 0 %}{{ d(s ~ s, n - 1) }}{% else %}{{ s|length }}{% endif %}{% endmacro %}{{ d('x', 60) }}",
    ),
    ("a huge repetition", "{{ 'x' * 10000000000 }}"),
];

#[test]
fn a_runaway_template_rejects_its_rows_naming_the_limit_in_build_and_render() {
    for (what, template) in RUNAWAY {
        let (tmp, _) = project(2, "out");
        let tpl = tmp.path().join("t.jinja");
        // Renders normally for a row without `loop` in its first message.
        std::fs::write(
            &tpl,
            format!(
                "{{% if 'loop' in messages[0].content %}}{template}{{% else %}}{{% for m in messages %}}<|im_start|>{{{{ m.role }}}}\n{{{{ m.content }}}}<|im_end|>\n{{% endfor %}}{{% endif %}}"
            ),
        )
        .expect("template");
        let file = tmp.path().join("data/chat.jsonl");
        let mut rows = chat_rows(2);
        rows.push_str(
            &(json!({"messages": [{"role": "user", "content": "please loop"},
                {"role": "assistant", "content": "Sure thing, looping now for you."}]})
            .to_string()
                + "\n"),
        );
        std::fs::write(&file, rows).expect("rows");
        let yaml = std::fs::read_to_string(tmp.path().join("pipeline.yaml"))
            .expect("yaml")
            .replace(
                &root("templates/qwen3.6/chat_template.jinja"),
                &tpl.display().to_string(),
            );
        let p = tmp.path().join("pipeline.yaml");
        std::fs::write(&p, yaml).expect("yaml");
        let started = Instant::now();
        let out = build_in(tmp.path(), &p);
        assert_success(&out);
        assert!(started.elapsed() < Duration::from_secs(60), "{what}");
        let m = manifest(&tmp.path().join("out"));
        assert_balanced(&m);
        assert_eq!(m["sources"]["chat"]["kept"], 2, "{what}");
        assert_eq!(m["sources"]["chat"]["rejected"]["template"], 1, "{what}");
        let rejects =
            std::fs::read_to_string(tmp.path().join("out/rejects.jsonl")).expect("rejects");
        let reject: Value = serde_json::from_str(rejects.trim()).expect("one reject");
        let message = reject["message"].as_str().expect("message");
        assert!(
            message.starts_with("the template ran out of fuel (")
                || message.starts_with("the template's output passed its cap of "),
            "{what}: {message}"
        );

        let out = run_in(
            tmp.path(),
            &[
                "render",
                "--template",
                &tpl.display().to_string(),
                "--tokenizer",
                &root("templates/qwen3.6/tokenizer.json.zst"),
            ],
            (chat_row(1)
                + "\n"
                + &json!({"messages": [{"role": "user", "content": "loop"},
                {"role": "assistant", "content": "ok"}]})
                .to_string()
                + "\n")
                .as_bytes(),
        );
        assert_success(&out);
        let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect();
        assert_eq!(lines.len(), 2, "{what}");
        assert!(lines[0]["text"].is_string(), "{what}");
        assert_eq!(lines[1]["error"]["code"], "template", "{what}");
        let message = lines[1]["error"]["message"].as_str().expect("message");
        assert!(message.contains("a runaway template?"), "{what}: {message}");
    }
}

// ---- 3. readers -----------------------------------------------------------------------------

/// Builds one source file `name` with `content` (extra top-level YAML in `extra`); returns the
/// folder, the run and the source's accounting.
fn build_file(name: &str, content: &[u8], extra: &str) -> (tempfile::TempDir, Output, Value) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join(name);
    std::fs::write(&file, content).expect("write");
    let p = pipeline_yaml(tmp.path(), &source("s", &file), extra, "out");
    let out = build_in(tmp.path(), &p);
    let stats = if out.status.success() {
        let m = manifest(&tmp.path().join("out"));
        assert_balanced(&m);
        m["sources"]["s"].clone()
    } else {
        Value::Null
    };
    (tmp, out, stats)
}

fn rejects(tmp: &tempfile::TempDir) -> Vec<Value> {
    std::fs::read_to_string(tmp.path().join("out/rejects.jsonl"))
        .expect("rejects")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect()
}

#[test]
fn a_jsonl_file_whose_first_line_is_an_array_is_read_as_lines() {
    let content = format!("[{{\"messages\": [1, 2]}}, \n{}", chat_rows(3));
    let (tmp, out, s) = build_file("a.jsonl", content.as_bytes(), "");
    assert_success(&out);
    assert_eq!((s["read"].clone(), s["kept"].clone()), (json!(4), json!(3)));
    assert_eq!(s["rejected"]["invalid_json"], 1);
    let r = rejects(&tmp);
    assert_eq!(r[0]["reason"], "invalid_json");
    assert_eq!(
        r[0]["message"], "EOF while parsing a value at column 22",
        "no `line 2 column 0` for a one-line record"
    );
}

#[test]
fn a_bom_is_skipped_and_blank_lines_are_counted() {
    let content = format!("\u{feff}{}\n\n   \n{}\n", chat_row(0), chat_row(1));
    let (_tmp, out, s) = build_file("a.jsonl", content.as_bytes(), "");
    assert_success(&out);
    assert_eq!(s["read"], 4, "every line is counted");
    assert_eq!(s["kept"], 2, "the row after the BOM is kept");
    assert_eq!(s["filtered"]["blank_line"], 2);
}

#[test]
fn a_too_deep_element_of_a_json_array_is_rejected_and_the_read_goes_on() {
    let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
    let content = format!(
        "[{}, {{\"messages\": {deep}}}, {}]",
        chat_row(0),
        chat_row(1)
    );
    let (tmp, out, s) = build_file("a.json", content.as_bytes(), "");
    assert_success(&out);
    assert_eq!((s["read"].clone(), s["kept"].clone()), (json!(3), json!(2)));
    let r = rejects(&tmp);
    assert_eq!(r[0]["reason"], "invalid_json");
    assert_eq!(r[0]["row"], 1);
    assert!(
        r[0]["message"]
            .as_str()
            .expect("message")
            .starts_with("array element 1: recursion limit exceeded"),
        "{}",
        r[0]
    );
}

#[test]
fn a_row_over_the_default_size_cap_is_rejected_as_too_large() {
    // 64 MiB and a bit: skipped while read, never held.
    let huge = format!(
        "{{\"messages\": [{{\"role\": \"user\", \"content\": \"{}\"}}]}}",
        "x".repeat(64 << 20)
    );
    let content = format!("{}\n{huge}\n{}\n", chat_row(0), chat_row(1));
    let (tmp, out, s) = build_file("a.jsonl", content.as_bytes(), "");
    assert_success(&out);
    assert_eq!((s["read"].clone(), s["kept"].clone()), (json!(3), json!(2)));
    assert_eq!(s["rejected"]["too_large"], 1);
    let r = rejects(&tmp);
    assert_eq!(
        r[0]["message"],
        format!(
            "the record is {} bytes, over the limit of 67108864 (`max_row_bytes`)",
            huge.len()
        )
    );
}

#[test]
fn normalize_numbers_rejects_by_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("a.jsonl");
    std::fs::write(
        &file,
        format!("{}\n\nnot json\n{}", chat_row(0), chat_row(1)),
    )
    .expect("write");
    let out = run_in(
        tmp.path(),
        &[
            "normalize",
            "--format",
            "openai",
            &file.display().to_string(),
        ],
        b"",
    );
    assert_success(&out);
    let side: Vec<Value> = stderr(&out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(
        side,
        [
            json!({"row": 2, "filtered": "blank_line"}),
            json!({"row": 3, "reason": "invalid_json", "message": "expected ident at column 2"}),
        ]
    );
    assert!(stderr(&out).contains("4 rows read"));
}

// ---- 4. render streams and answers every line ----------------------------------------------

#[test]
fn render_answers_each_line_as_it_arrives_and_bad_lines_name_their_number() {
    let mut child = bin()
        .args([
            "render",
            "--template",
            &root("templates/qwen3.6/chat_template.jinja"),
            "--tokenizer",
            &root("templates/qwen3.6/tokenizer.json.zst"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.expect("line")).is_err() {
                break;
            }
        }
    });
    // The first answer arrives while stdin is still open.
    stdin
        .write_all((chat_row(0) + "\n").as_bytes())
        .expect("write");
    stdin.flush().expect("flush");
    let first: Value =
        serde_json::from_str(&rx.recv_timeout(DEADLINE).expect("an answer before EOF"))
            .expect("json");
    assert!(first["text"].is_string(), "{first}");
    // Invalid UTF-8, invalid JSON, a blank line, then a good line: each answered.
    stdin
        .write_all(b"{\"messages\": \"\xff\xfe\"}\n")
        .expect("write");
    stdin.write_all(b"{nope\n\n").expect("write");
    stdin
        .write_all((chat_row(1) + "\n").as_bytes())
        .expect("write");
    drop(stdin);
    let rest: Vec<Value> = (0..4)
        .map(|_| serde_json::from_str(&rx.recv_timeout(DEADLINE).expect("answer")).expect("json"))
        .collect();
    assert_eq!(
        rest[0],
        json!({"error": {"code": "invalid_utf8", "message": "the line is not valid UTF-8 (byte 15)", "line": 2}})
    );
    assert_eq!(rest[1]["error"]["code"], "invalid_json");
    assert_eq!(rest[1]["error"]["line"], 3);
    assert_eq!(
        rest[1]["error"]["message"],
        "key must be a string at column 2"
    );
    assert_eq!(
        rest[2],
        json!({"error": {"code": "blank_line", "message": "the line is blank", "line": 4}})
    );
    assert!(rest[3]["text"].is_string());
    let out = finish(child);
    assert!(out.status.success());
}

// ---- 5. errors and ranges -------------------------------------------------------------------

#[test]
fn input_paths_are_described_by_what_they_are() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("dir.jsonl");
    std::fs::create_dir(&dir).expect("mkdir");
    let fifo = tmp.path().join("fifo.jsonl");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo")
        .success());
    let looped = tmp.path().join("loop.jsonl");
    std::os::unix::fs::symlink(&looped, &looped).expect("symlink");
    let sources: String = [&dir, &fifo, &looped, Path::new("/dev/null")]
        .iter()
        .enumerate()
        .map(|(i, f)| source(&format!("s{i}"), f))
        .collect();
    let p = pipeline_yaml(tmp.path(), &sources, "", "out");
    let out = build_in(tmp.path(), &p);
    for what in [
        format!("input file `{}` is a directory, not a file", dir.display()),
        format!(
            "input file `{}` is a FIFO (named pipe), not a file",
            fifo.display()
        ),
        format!(
            "input file `{}` is a symlink loop, not a file",
            looped.display()
        ),
        "input file `/dev/null` is a character device, not a file".to_owned(),
    ] {
        assert_refused(&out, &what);
    }
    // A template that is a FIFO is refused, not read (which would block).
    let yaml = std::fs::read_to_string(&p).expect("yaml").replace(
        &root("templates/qwen3.6/chat_template.jinja"),
        &fifo.display().to_string(),
    );
    std::fs::write(&p, yaml).expect("yaml");
    assert_refused(
        &build_in(tmp.path(), &p),
        &format!(
            "template `{}` is a FIFO (named pipe), not a file",
            fifo.display()
        ),
    );
}

#[test]
fn duplicate_keys_and_range_errors_are_reported_at_their_position() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("a.jsonl");
    std::fs::write(&file, chat_rows(2)).expect("write");
    let base = std::fs::read_to_string(pipeline_yaml(tmp.path(), &source("s", &file), "", "out"))
        .expect("yaml");
    let p = tmp.path().join("pipeline.yaml");
    let line_of = |yaml: &str, needle: &str| {
        yaml.lines()
            .position(|l| l.contains(needle))
            .expect("needle")
            + 1
    };
    for (edit, needle, column, message) in [
        (
            base.replace("seed: 1\n", "seed: 1\nseed: 2\n"),
            "seed: 2",
            1,
            "duplicate field `seed`",
        ),
        (
            base.replace("    format: openai\n", "    format: openai\n    name: t\n"),
            "name: t",
            5,
            "sources[0]: duplicate field `name`",
        ),
        (
            base.replace("min_supervised_tokens: 1\n", "min_supervised_tokens: 1\nmax_tokens: 0\n"),
            "max_tokens: 0",
            13,
            "max_tokens: invalid value: integer `0`, expected a whole number of at least 1",
        ),
        (
            base.replace("    format: openai\n", "    format: openai\n    take: 0\n"),
            "take: 0",
            11,
            "sources[0].take: invalid value: integer `0`, expected a row count of at least 1, or `all`",
        ),
        (
            base.replace("  dir: out\n", "  dir: out\n  rows_per_shard: 0\n"),
            "rows_per_shard: 0",
            19,
            "output.rows_per_shard: invalid value: integer `0`, expected a whole number of at least 1",
        ),
        (
            base.replace("min_supervised_tokens: 1\n", "min_supervised_tokens: 1\nmax_row_bytes: 0\n"),
            "max_row_bytes: 0",
            16,
            "max_row_bytes: invalid value: integer `0`, expected a whole number of at least 1",
        ),
    ] {
        std::fs::write(&p, &edit).expect("yaml");
        let line = line_of(&edit, needle);
        assert_refused(
            &build_in(tmp.path(), &p),
            &format!("{}:{line}:{column}: {message}", p.display()),
        );
    }
    std::fs::write(&p, &base).expect("yaml");
    let out = run_in(
        tmp.path(),
        &["build", "--threads", "5000", &p.display().to_string()],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(
        "invalid value '5000' for '--threads <THREADS>': 5000 is out of range: use 1 to 1024"
    ));
}

// ---- 6. inspect verifies what it reads ------------------------------------------------------

#[test]
fn inspect_reports_a_flipped_or_truncated_shard_and_still_reads_the_others() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("a.jsonl");
    std::fs::write(&file, chat_rows(6)).expect("write");
    let p = pipeline_yaml(
        tmp.path(),
        &source("s", &file),
        "",
        "out\n  rows_per_shard: 2",
    );
    assert_success(&build_in(tmp.path(), &p));
    let out_dir = tmp.path().join("out");
    let shard = |i: usize| out_dir.join(format!("data-0000{i}-of-00003.arrow"));
    // From a directory without `templates/`: the built-in tokenizer.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let inspect = |row: &str| {
        run_in(
            elsewhere.path(),
            &["inspect", &out_dir.display().to_string(), "--row", row],
            b"",
        )
    };
    let intact = inspect("2");
    assert_success(&intact);
    assert!(String::from_utf8_lossy(&intact.stdout).starts_with("row 2  sample_id s:0:"));

    let mut bytes = std::fs::read(shard(0)).expect("shard");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(shard(0), &bytes).expect("flip");
    assert_refused(
        &inspect("0"),
        "shard `data-00000-of-00003.arrow` does not match the manifest (sha256 ",
    );
    assert_refused(
        &inspect("1"),
        "it is not decoded. The other shards are unaffected",
    );

    let bytes = std::fs::read(shard(2)).expect("shard");
    std::fs::write(shard(2), &bytes[..bytes.len() - 10]).expect("truncate");
    assert_refused(
        &inspect("4"),
        &format!(
            "shard `data-00002-of-00003.arrow` is {} bytes but the manifest says {} (truncated or changed)",
            bytes.len() - 10,
            bytes.len()
        ),
    );
    // The intact middle shard stays readable after the broken ones.
    assert_success(&inspect("3"));
    assert_refused(
        &inspect("6"),
        "row 6 is past the end of the dataset (6 rows)",
    );
}
