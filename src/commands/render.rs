//! `chatshards render`: JSON lines in (`{"messages", "tools"}`), one JSON line out per input:
//! `{"text", "input_ids", "loss_mask"}` (or `{"rows": [...]}` under `expand`), or
//! `{"error": {"code", "message"}}`. Messages go through the `openai` adapter (string tool
//! arguments are parsed, as vLLM does) and the control-token check, then the template exactly
//! as given: no validation repairs, no length rules.

use crate::adapt::{Adapter, OpenAiAdapter, Repairs};
use crate::plan::config::{LengthPolicy, RenderPolicy};
use crate::printer::Printer;
use crate::process::{RowProcessor, Tokenized};
use crate::reject::{Reject, RejectReason};
use crate::render::Renderer;
use crate::tokenize::Tokenizer;
use crate::validate::Validator;
use anyhow::{Context, Result};
use rayon::prelude::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufWriter, Write};
use std::path::Path;

pub fn run(
    template: &Path,
    tokenizer: &Path,
    policy: RenderPolicy,
    kwargs: Option<&str>,
) -> Result<()> {
    let processor = processor(template, tokenizer, policy, kwargs)?;
    let adapter = Adapter::OpenAi(OpenAiAdapter::default());
    let stdin = std::io::stdin().lock();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut lines = stdin.lines();
    loop {
        let batch: Vec<String> = lines
            .by_ref()
            .take(256)
            .collect::<Result<_, _>>()
            .context("failed to read stdin")?;
        if batch.is_empty() {
            break;
        }
        let results: Vec<String> = batch
            .par_iter()
            .map(|line| {
                let mut s = render_line(&processor, &adapter, line).to_string();
                s.push('\n');
                s
            })
            .collect();
        for r in results {
            Printer::data(&mut out, &r).context("failed to write stdout")?;
        }
    }
    out.flush().context("failed to write stdout")?;
    Ok(())
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
        .map_err(|e| Reject::new(RejectReason::InvalidJson, e.to_string()))
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
