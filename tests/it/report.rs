//! The build's statistics, token frequencies, report and the `stats`, `report` and `vocab`
//! commands, on the demo pipeline. The draft vocabulary is compared with goldens made by
//! speculators' own code (`tests/oracle/gen_vocab_goldens.py`); the report is opened in headless
//! Chromium by `tests/oracle/check_report.py` (skipped, saying so, where Chromium is absent).

use crate::common;
use common::{bin, json, ok, ROOT};

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

/// pipelines/demo.yaml with its paths made absolute and its output in `dir/out`.
fn demo(dir: &Path) -> (PathBuf, PathBuf) {
    let yaml = std::fs::read_to_string(Path::new(ROOT).join("pipelines/demo.yaml")).expect("demo");
    let out = dir.join("out");
    let yaml = yaml
        .replace("dir: ../out/demo", &format!("dir: {}", out.display()))
        .replace("../", &format!("{ROOT}/"));
    let path = dir.join("demo.yaml");
    std::fs::write(&path, yaml).expect("write");
    (path, out)
}

fn build(pipeline: &Path, threads: u32) {
    ok(bin()
        .args(["build", "--quiet", "--threads", &threads.to_string()])
        .arg(pipeline)
        .output()
        .expect("run"));
}

fn sha256(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).expect("read")))
}

#[test]
fn demo_statistics_report_and_vocabulary() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (pipeline, out) = demo(tmp.path());
    build(&pipeline, 2);
    let manifest = json(&out.join("manifest.json"));
    let stats = json(&out.join("stats.json"));

    // stats.json agrees with the manifest's accounting, source by source.
    for key in ["rows", "tokens", "supervised_tokens"] {
        assert_eq!(stats["total"][key], manifest[key], "{key}");
        for (name, s) in manifest["sources"].as_object().expect("sources") {
            assert_eq!(stats["sources"][name][key], s[key], "{name} {key}");
        }
    }
    assert_eq!(stats["total"]["seq_len"]["count"], manifest["rows"]);
    assert_eq!(stats["total"]["seq_len"]["sum"], manifest["tokens"]);
    assert_eq!(
        stats["total"]["supervised_per_row"]["sum"],
        manifest["supervised_tokens"]
    );
    assert!(stats["total"]["seq_len"]["max"].as_u64().expect("max") <= 8192);
    assert!(
        stats["total"]["supervised_per_row"]["min"]
            .as_u64()
            .expect("min")
            >= 32
    );

    // Same bytes at another thread count (same pipeline file and output path, as the
    // manifest records them).
    let files = [
        "stats.json",
        "token_freq.pt",
        "token_freq_all.pt",
        "report.html",
    ];
    let first: Vec<String> = files.iter().map(|f| sha256(&out.join(f))).collect();
    build(&pipeline, 1);
    for (file, hash) in files.iter().zip(&first) {
        assert_eq!(&sha256(&out.join(file)), hash, "{file}");
    }

    // `report` rewrites the same page.
    let page = std::fs::read(out.join("report.html")).expect("report");
    std::fs::remove_file(out.join("report.html")).expect("rm");
    ok(bin().arg("report").arg(&out).output().expect("run"));
    assert_eq!(
        std::fs::read(out.join("report.html")).expect("report"),
        page
    );
    let text = String::from_utf8(page).expect("utf8");
    assert!(
        !text.contains("<script") && text.contains("<svg"),
        "self-contained with plots"
    );
    // A reject example from rejects.jsonl, escaped.
    let first_reject = std::fs::read_to_string(out.join("rejects.jsonl")).expect("rejects");
    let line = first_reject.lines().next().expect("the demo has rejects");
    let reason = json_line(line)["reason"]
        .as_str()
        .expect("reason")
        .to_owned();
    assert!(
        text.contains(&format!("data-reason=\"{reason}\"")),
        "{reason}"
    );
    // Beside each example, what failed: a regex's match in context, the text language
    // detection read, a reject's field and value, a kept twin, a benchmark's shared text.
    for failing in [
        "<span class=\"muted small\">judged text</span><pre class=\"failing\">As an AI language model, I cannot help with entering someone else&#39;s home without permission.",
        "<span class=\"muted small\">judged text</span><pre class=\"failing\">Bonjour, pouvez-vous m&#39;expliquer comment fonctionne un pipeline de données et pourquoi il faut mélanger les lignes avant l&#39;entraînement du modèle ?</pre>",
        "<span class=\"muted small\">messages[0].role</span><pre class=\"failing\">developer</pre>",
        "<span class=\"muted small\">kept twin</span><pre class=\"failing\">curation:0:24</pre>",
        // A contaminated row: the passage it shares with the benchmark item, in context.
        "<span class=\"muted small\">shares with humaneval HumanEval/10</span><pre class=\"failing\">…mplate a adapts that and at file encoder. It says: palindrome &quot;&quot;&quot; return string == string[::-1] def make_palindrome(string: str) -&gt; str: &quot;&quot;&quot; Find the shortest palindrome that begins with a Can you exp…</pre>",
    ] {
        assert!(text.contains(failing), "{failing}");
    }
    let filtered = std::fs::read_to_string(out.join("filtered.jsonl")).expect("filtered");
    let refusal = filtered
        .lines()
        .map(json_line)
        .find(|l| l["reason"] == "refusals")
        .expect("a refusal");
    let judged = refusal["text"].as_str().expect("its text");
    assert!(
        judged.starts_with("As an AI language model, I cannot help with entering someone else's home without permission.")
            && judged.chars().count() <= 201,
        "{judged}"
    );

    // `stats`: the table and the JSON.
    let table = String::from_utf8(ok(bin().arg("stats").arg(&out).output().expect("run")).stdout)
        .expect("utf8");
    let total_line = table
        .lines()
        .find(|l| l.starts_with("total "))
        .expect("total line");
    let cells: Vec<&str> = total_line.split_whitespace().collect();
    assert!(
        cells.contains(&manifest["rows"].to_string().as_str()),
        "{table}"
    );
    assert!(
        cells.contains(&stats["total"]["seq_len"]["p99"].to_string().as_str()),
        "{table}"
    );
    let summary: Value = serde_json::from_slice(
        &ok(bin()
            .args(["stats", "--json"])
            .arg(&out)
            .output()
            .expect("run"))
        .stdout,
    )
    .expect("json");
    assert_eq!(summary["rows"], manifest["rows"]);
    assert_eq!(summary["seq_len"]["p50"], stats["total"]["seq_len"]["p50"]);
    assert_eq!(
        summary["sources"]["chat"]["read"],
        manifest["sources"]["chat"]["read"]
    );

    // `vocab` against speculators' own mapping of the same data.
    let golden = json(&Path::new(ROOT).join("tests/golden/vocab/demo.json"));
    assert_eq!(
        stats["distinct_supervised_ids"], golden["distinct_supervised_ids"],
        "token counts differ from speculators' save_token_frequency_distribution"
    );
    for case in golden["cases"].as_array().expect("cases") {
        let draft = case["draft_size"].to_string();
        let vocab_out = tmp.path().join(format!("vocab-{draft}"));
        ok(bin()
            .args(["vocab", "--draft-size", &draft, "--target-vocab-size"])
            .arg(case["target_vocab_size"].to_string())
            .arg("--out")
            .arg(&vocab_out)
            .arg(&out)
            .output()
            .expect("run"));
        assert_eq!(
            sha256(&vocab_out.join(format!("d2t-{draft}.npy"))),
            case["d2t_npy_sha256"].as_str().expect("sha"),
            "d2t-{draft}.npy"
        );
        assert_eq!(
            sha256(&vocab_out.join(format!("t2d-{draft}.npy"))),
            case["t2d_npy_sha256"].as_str().expect("sha"),
            "t2d-{draft}.npy"
        );
    }

    // The report in a browser, when one is installed (the script says SKIP otherwise).
    let check = Command::new("python3")
        .arg(Path::new(ROOT).join("tests/oracle/check_report.py"))
        .arg(&out)
        .output()
        .expect("python3");
    let said = String::from_utf8_lossy(&check.stdout);
    eprintln!("{said}");
    assert!(
        check.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(said.contains("check_report: OK") || said.contains("check_report: SKIP"));
}

fn json_line(line: &str) -> Value {
    serde_json::from_str(line).expect("json line")
}

#[test]
fn vocab_and_stats_explain_a_directory_that_is_not_a_dataset() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = bin().arg("stats").arg(tmp.path()).output().expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("manifest.json") && err.contains("chatshards dataset"),
        "{err}"
    );
    let out = bin()
        .args(["vocab", "--draft-size", "8"])
        .arg(tmp.path())
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("token_freq.pt") && err.contains("not found"),
        "{err}"
    );
}
