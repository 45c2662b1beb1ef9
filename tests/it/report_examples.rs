//! `report.html` shows rendered example rows per source with the supervised text marked,
//! the drop reasons per source, and histograms with a log count axis (issue 42).

use crate::common;
use common::{bin, stderr};

use std::path::Path;

fn chat(user: &str, assistant: &str) -> String {
    serde_json::json!({"messages": [
        {"role": "user", "content": user},
        {"role": "assistant", "content": assistant},
    ]})
    .to_string()
}

fn build(dir: &Path, tokenizer: &str) -> String {
    let rows = [
        chat("What is 2 plus 2?", "4."),
        // Dropped: `developer` is not a role of the `openai` format.
        serde_json::json!({"messages": [
            {"role": "developer", "content": "x"},
            {"role": "assistant", "content": "y"},
        ]})
        .to_string(),
    ];
    std::fs::write(dir.join("a.jsonl"), rows.join("\n") + "\n").expect("rows");
    std::fs::write(
        dir.join("b.jsonl"),
        chat("Say <b>hi</b> & go", "Hi & bye.") + "\n",
    )
    .expect("rows");
    let yaml = format!(
        "name: examples\nmin_supervised_tokens: 1\nmin_keep: 0\n{tokenizer}filters:\n  - regex: {{name: refusals, exclude: [\"(?i)as an ai\"], scope: assistant}}\nsources:\n  - {{name: a, files: [a.jsonl], format: openai}}\n  - {{name: b, files: [b.jsonl], format: openai, filters: [{{turns: {{min: 2}}}}]}}\noutput: {{dir: out}}\n"
    );
    let pipeline = dir.join("p.yaml");
    std::fs::write(&pipeline, yaml).expect("pipeline");
    let out = bin().arg("build").arg(&pipeline).output().expect("build");
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::read_to_string(dir.join("out/report.html")).expect("report")
}

#[test]
fn the_report_shows_rows_reasons_by_source_and_log_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let page = build(dir.path(), "");
    assert!(page.contains(
        "<div class=\"row\" data-sample=\"a:0:0:0\"><b>a</b> <code>a:0:0:0</code><pre>&lt;|im_start|&gt;user\nWhat is 2 plus 2?&lt;|im_end|&gt;\n&lt;|im_start|&gt;assistant\n<mark>&lt;think&gt;\n\n&lt;/think&gt;\n\n4.&lt;|im_end|&gt;\n</mark></pre></div>"
    ), "{page}");
    // Text from the data is escaped, the mask marks only the answer.
    assert!(page.contains(
        "<pre>&lt;|im_start|&gt;user\nSay &lt;b&gt;hi&lt;/b&gt; &amp; go&lt;|im_end|&gt;\n&lt;|im_start|&gt;assistant\n<mark>&lt;think&gt;\n\n&lt;/think&gt;\n\nHi &amp; bye.&lt;|im_end|&gt;\n</mark></pre>"
    ), "{page}");
    assert!(page.contains(
        "<table id=\"reasons-by-source\"><tr><th>source</th><th>reason</th><th>rows</th><th>of read</th></tr><tr data-source=\"a\"><td>a</td><td>rejected: unknown_role</td><td>1</td><td>50.0%</td></tr></table>"
    ), "{page}");
    assert!(page.contains("rows (log scale)"), "{page}");
    // The filters with their parameters, as the pipeline gives them.
    assert!(page.contains(
        "<table id=\"filters\"><tr><th>runs on</th><th>name</th><th style=\"text-align:left\">kind and parameters</th></tr><tr><td>every source</td><td>refusals</td><td style=\"text-align:left\"><code>regex {&quot;exclude&quot;:[&quot;(?i)as an ai&quot;],&quot;scope&quot;:&quot;assistant&quot;}</code></td></tr><tr><td>b</td><td>turns</td><td style=\"text-align:left\"><code>turns {&quot;min&quot;:2}</code></td></tr></table>"
    ), "{page}");
    assert!(!page.contains("<script"));

    // `chatshards report` rewrites the same page.
    let out = dir.path().join("out");
    std::fs::remove_file(out.join("report.html")).expect("rm");
    let run = bin().arg("report").arg(&out).output().expect("report");
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(
        std::fs::read_to_string(out.join("report.html")).expect("report"),
        page
    );
}

#[test]
fn rows_of_another_tokenizer_are_not_decoded_with_the_built_in_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The same vocabulary as a plain tokenizer.json: another file, so another sha256.
    let json = zstd::decode_all(
        std::fs::read(common::root("templates/qwen3.6/tokenizer.json.zst"))
            .expect("tokenizer")
            .as_slice(),
    )
    .expect("zstd");
    std::fs::write(dir.path().join("tokenizer.json"), json).expect("write");
    let page = build(dir.path(), "tokenizer: {path: tokenizer.json}\n");
    assert!(page.contains("<h2>Example rows</h2><p class=\"muted\">Rows are shown for datasets tokenized with the built-in Qwen3.6 tokenizer; <code>chatshards inspect DIR --tokenizer FILE</code> shows this one's.</p>"), "{page}");
    assert!(!page.contains("<mark>&lt;think"));
}
