//! `chatshards render`: JSON lines in (`{"messages", "tools"}`), one JSON line out per input:
//! `{"text", "input_ids", "loss_mask"}` (or `{"rows": [...]}` under `expand`), or
//! `{"error": {"code", "message", "line"}}` (the 1-based line number). Lines are answered as
//! they arrive, each flushed; a line that is not UTF-8 or not JSON is answered with an error
//! and the stream goes on. Messages go through the `openai` adapter (string tool
//! arguments are parsed, as vLLM does) and the control-token check, then the template exactly
//! as given: no validation repairs, no length rules.

use crate::adapt::{Adapter, OpenAiAdapter, Repairs};
use crate::engine::row_path::{RowProcessor, Tokenized};
use crate::engine::session::template_processor;
use crate::plan::config::RenderPolicy;
use crate::printer::Printer;
use crate::read::{next_line, Line};
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::io::{BufWriter, Write};
use std::path::Path;

pub fn run(
    template: Option<&Path>,
    tokenizer: Option<&Path>,
    policy: RenderPolicy,
    kwargs: Option<&str>,
) -> Result<()> {
    let processor = template_processor(template, tokenizer, policy, kwargs)?;
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
                Ok(line) => {
                    // Written straight from the rows: a JSON value of a long row's ids and mask
                    // would take 32 bytes a token.
                    let written = match render_rows(&processor, &adapter, line) {
                        Ok(rows) => write_rows(&mut out, &rows, processor.policy),
                        Err((code, message)) => {
                            write_line(&mut out, &error(number, code, &message))
                        }
                    };
                    written.context("failed to write stdout")?;
                    continue;
                }
            },
        };
        write_line(&mut out, &answer).context("failed to write stdout")?;
    }
    Ok(())
}

fn error(line: u64, code: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message, "line": line}})
}

/// One answer line, flushed.
fn write_line(out: &mut impl Write, answer: &impl serde::Serialize) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, answer)?;
    Printer::data(out, "\n")?;
    out.flush()
}

/// A rendered row as it is printed.
#[derive(serde::Serialize)]
struct RowOut<'a> {
    text: &'a str,
    input_ids: &'a [u32],
    loss_mask: &'a [u8],
}

fn row(r: &Tokenized) -> RowOut<'_> {
    RowOut {
        text: &r.text,
        input_ids: &r.ids,
        loss_mask: &r.mask,
    }
}

/// The rows of one input: `{"rows": [...]}` under `expand` and `turns`, else its one row.
fn write_rows(
    out: &mut impl Write,
    rows: &[Tokenized],
    policy: RenderPolicy,
) -> std::io::Result<()> {
    #[derive(serde::Serialize)]
    struct Rows<'a> {
        rows: Vec<RowOut<'a>>,
    }
    if matches!(policy, RenderPolicy::Expand | RenderPolicy::Turns) {
        return write_line(
            out,
            &Rows {
                rows: rows.iter().map(row).collect(),
            },
        );
    }
    match rows.first() {
        Some(r) => write_line(out, &row(r)),
        None => write_line(
            out,
            &json!({"error": {"code": "no_assistant_turn", "message": "nothing to render"}}),
        ),
    }
}

/// Renders one input line into its rows, or the code and message of why not.
fn render_rows(
    processor: &RowProcessor,
    adapter: &Adapter,
    line: &str,
) -> Result<Vec<Tokenized>, (&'static str, String)> {
    crate::read::parse(line.as_bytes())
        .and_then(|value| {
            let conversation = adapter.adapt(&value, &mut Repairs::new())?;
            // The parsed line is not needed any more: it goes before the render.
            drop(value);
            processor.validator.check_control_tokens(&conversation)?;
            processor.tokenize(&conversation)
        })
        .map_err(|reject| (reject.reason.code(), reject.message))
}
