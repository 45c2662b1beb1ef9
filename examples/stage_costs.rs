//! Per-row cost of each pipeline stage on one thread, for the first rows of a pipeline's first
//! source file (JSON lines): where the time outside the encoder goes.
//!
//! ```text
//! cargo run --release --example stage_costs -- PIPELINE.yaml [ROWS]
//! ```
//! Rows the adapter or validator rejects are skipped. The stages run back to back per row, as
//! in a build, so each sees the caches the previous one left (the mask check runs right after
//! the encoder, which has evicted the token table).

use anyhow::{Context, Result};
use chatshards::adapt::{to_sharegpt_record, Repairs};
use chatshards::plan::{self, HubAccess};
use chatshards::render::plan_rows;
use chatshards::tokenize::mask;
use std::io::BufRead;
use std::time::{Duration, Instant};

// The allocator of the `chatshards` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const STAGES: [&str; 7] = [
    "parse JSON",
    "adapt + validate",
    "render",
    "encode",
    "mask + check",
    "record line",
    "sample id + key",
];

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let pipeline = args
        .next()
        .context("usage: stage_costs PIPELINE.yaml [ROWS]")?;
    let limit: usize = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    let plan = plan::compile(pipeline.as_ref(), HubAccess::Locked)?;
    let (processor, report) = chatshards::commands::build::processor(&plan)?;
    let source = plan.sources.first().context("the pipeline has no source")?;
    let path = source.files.first().context("the source has no file")?;
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let lines: Vec<Vec<u8>> = std::io::BufReader::new(file)
        .split(b'\n')
        .take(limit)
        .collect::<std::io::Result<_>>()?;

    let mut spent = [Duration::ZERO; STAGES.len()];
    let (mut rows, mut tokens) = (0usize, 0usize);
    let tk = &processor.tokenizer;
    for (n, line) in lines.iter().enumerate() {
        let mut marks = [Instant::now(); STAGES.len() + 1];
        let value: serde_json::Value = serde_json::from_slice(line)?;
        marks[1] = Instant::now();
        let mut repairs = Repairs::new();
        let Ok(conversation) = source.adapter.prepare(&value, &mut repairs) else {
            continue;
        };
        let Ok(conversation) = processor.validator.validate(conversation, &mut repairs) else {
            continue;
        };
        marks[2] = Instant::now();
        let Some(spec) = plan_rows(&conversation, processor.policy).pop() else {
            continue;
        };
        let text = processor
            .renderer
            .render(&conversation)
            .map_err(|e| anyhow::anyhow!(e.message))?;
        marks[3] = Instant::now();
        let ids = tk.encoder.encode(&text).map_err(anyhow::Error::msg)?;
        marks[4] = Instant::now();
        let (loss_mask, _) = mask::compute(&ids, &tk.markers, &spec.supervise);
        let normalized = tk.normalize(&text);
        mask::verify(
            &normalized,
            &ids,
            &loss_mask,
            &tk.bytes,
            &tk.markers,
            &spec.supervise,
        )?;
        marks[5] = Instant::now();
        let id = format!("{}:0:{n}", source.name);
        std::hint::black_box(to_sharegpt_record(&conversation, &id, &source.name).json_line());
        marks[6] = Instant::now();
        let sample_id = format!("{id}:0");
        std::hint::black_box(chatshards::write::shuffle_key(plan.seed, &sample_id));
        marks[7] = Instant::now();
        for (total, pair) in spent.iter_mut().zip(marks.windows(2)) {
            *total += pair[1] - pair[0];
        }
        rows += 1;
        tokens += ids.len();
    }
    println!("{rows} rows, {tokens} tokens, encoder: {report}, one thread");
    let per_row = |d: Duration| d.as_secs_f64() / rows.max(1) as f64 * 1e6;
    let encode = spent[3].as_secs_f64();
    for (name, d) in STAGES.iter().zip(spent) {
        println!(
            "{name:<16} {:>8.2} µs/row {:>7.2}% of encode",
            per_row(d),
            d.as_secs_f64() / encode * 100.0
        );
    }
    let others: Duration = spent.iter().sum::<Duration>() - spent[3];
    println!(
        "{:<16} {:>8.2} µs/row {:>7.2}% of encode",
        "all but encode",
        per_row(others),
        others.as_secs_f64() / encode * 100.0
    );
    Ok(())
}
