//! `chatshards render`: JSON lines in (`{"messages", "tools"}`), one JSON line out per input:
//! `{"text", "input_ids", "loss_mask"}` (or `{"rows": [...]}` under `expand`), or
//! `{"error": {"code", "message", "line"}}` (the 1-based line number). Lines are answered as
//! they arrive, each flushed; a line that is not UTF-8 or not JSON is answered with an error
//! and the stream goes on. Messages go through the `openai` adapter (string tool
//! arguments are parsed, as vLLM does) and the control-token check, then the template exactly
//! as given: no validation repairs, no length rules.

use crate::adapt::{Adapter, OpenAiAdapter, Repairs};
use crate::engine::row_path::{RowProcessor, Tokenized};
use crate::plan::config::{LengthPolicy, RenderPolicy};
use crate::printer::Printer;
use crate::read::{next_line, Line};
use crate::reject::{Reject, RejectReason};
use crate::render::Renderer;
use crate::tokenize::Tokenizer;
use crate::validate::Validator;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::io::{BufWriter, Write};
use std::path::Path;

pub fn run(
    template: &Path,
    tokenizer: &Path,
    policy: RenderPolicy,
    kwargs: Option<&str>,
) -> Result<()> {
    let processor = processor(template, tokenizer, policy, kwargs)?;
    let adapter = Adapter::OpenAi(OpenAiAdapter::default());
    let mut stdin = std::io::stdin().lock();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let limit = crate::read::DEFAULT_MAX_ROW_BYTES;
    // One line in, one line out, flushed: a caller can converse with the process, and a bad
    // line is answered (naming its number) without ending the stream.
    let mut buf = Vec::new();
    for number in 1u64.. {
        buf.clear();
        let answer = match next_line(&mut stdin, &mut buf, limit).context("failed to read stdin")? {
            None => break,
            Some(Line::TooLong(bytes)) => error(
                number,
                "too_large",
                &format!("the line is {bytes} bytes, over the limit of {limit}"),
            ),
            Some(Line::Kept) => match std::str::from_utf8(buf.trim_ascii_end()) {
                Err(e) => error(
                    number,
                    "invalid_utf8",
                    &format!("the line is not valid UTF-8 (byte {})", e.valid_up_to() + 1),
                ),
                Ok("") => error(number, "blank_line", "the line is blank"),
                Ok(line) => match render_line(&processor, &adapter, line) {
                    Value::Object(mut answer) => {
                        if let Some(Value::Object(e)) = answer.get_mut("error") {
                            e.insert("line".into(), number.into());
                        }
                        Value::Object(answer)
                    }
                    other => other,
                },
            },
        };
        let mut text = answer.to_string();
        text.push('\n');
        Printer::data(&mut out, &text).context("failed to write stdout")?;
        out.flush().context("failed to write stdout")?;
    }
    Ok(())
}

fn error(line: u64, code: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message, "line": line}})
}

pub fn processor(
    template: &Path,
    tokenizer: &Path,
    policy: RenderPolicy,
    kwargs: Option<&str>,
) -> Result<RowProcessor> {
    let source = std::fs::read_to_string(template)
        .with_context(|| format!("failed to read template `{}`", template.display()))?;
    let kwargs = match kwargs {
        Some(k) => match serde_json::from_str::<Value>(k).context("--kwargs is not valid JSON")? {
            Value::Object(o) => o,
            _ => anyhow::bail!("--kwargs must be a JSON object"),
        },
        None => Default::default(),
    };
    let renderer = Renderer::new(&source, kwargs)
        .with_context(|| format!("in template `{}`", template.display()))?;
    let tokenizer = std::sync::Arc::new(Tokenizer::load(tokenizer)?);
    let validator = Validator::new(&tokenizer.forbidden);
    Ok(RowProcessor {
        renderer,
        tokenizer,
        validator,
        policy,
        max_tokens: usize::MAX,
        length_policy: LengthPolicy::Drop,
        min_supervised_tokens: 0,
        mask: crate::tokenize::mask::MaskRule::standard(),
        verify_basis_points: None,
        render_verify_basis_points: None,
    })
}

/// Renders one input line into its output JSON.
pub fn render_line(processor: &RowProcessor, adapter: &Adapter, line: &str) -> Value {
    let result = serde_json::from_str::<Value>(line)
        .map_err(|e| Reject::new(RejectReason::InvalidJson, crate::read::one_line_error(&e)))
        .and_then(|value| {
            let conversation = adapter.adapt(&value, &mut Repairs::new())?;
            processor.validator.check_control_tokens(&conversation)?;
            processor.tokenize(&conversation)
        });
    let row = |r: &Tokenized| json!({"text": r.text, "input_ids": r.ids, "loss_mask": r.mask});
    match result {
        Err(reject) => json!({"error": {"code": reject.reason.code(), "message": reject.message}}),
        Ok(rows) if matches!(processor.policy, RenderPolicy::Expand | RenderPolicy::Turns) => {
            json!({"rows": rows.iter().map(row).collect::<Vec<_>>()})
        }
        Ok(rows) => match rows.first() {
            Some(r) => row(r),
            None => json!({"error": {"code": "no_assistant_turn", "message": "nothing to render"}}),
        },
    }
}
