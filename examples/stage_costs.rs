//! Per-row cost of each pipeline stage on one thread, for the first rows of a pipeline's first
//! source file (JSON lines): where the time outside the encoder goes.
//!
//! ```text
//! cargo run --release --example stage_costs -- PIPELINE.yaml [ROWS] [BATCH]
//! ```
//! Rows the adapter or validator rejects are skipped. As in a build's pool jobs, each stage
//! runs over a batch of rows (by default closed as a build's jobs are: at 512 KiB of input or
//! 1024 rows) before the next, so each sees the caches the
//! previous one left; with `BATCH` = 1 they run back to back per row (the mask check then runs
//! right after the encoder, which has evicted the token table).

use anyhow::{Context, Result};
use chatshards::adapt::{to_sharegpt_record, Repairs};
use chatshards::engine;
use chatshards::plan::{self, HubAccess};
use chatshards::read::Record;
use chatshards::render::plan_rows;
use chatshards::tokenize::mask;
use std::io::BufRead;
use std::time::{Duration, Instant};

// The allocator of the `chatshards` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const STAGES: [&str; 7] = [
    "parse + adapt",
    "validate",
    "render",
    "encode",
    "mask + check",
    "record line",
    "sample id + key",
];

fn main() -> Result<()> {
    chatshards::tune_allocator();
    let mut args = std::env::args().skip(1);
    let pipeline = args
        .next()
        .context("usage: stage_costs PIPELINE.yaml [ROWS] [BATCH]")?;
    let limit: usize = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    // Rows per batch, each stage over the whole batch before the next, as a build's pool jobs
    // run them; 1 runs the stages back to back per row. By default, batches close as a build's
    // jobs do: at `JOB_BYTES` of input or `JOB_MAX_ROWS` rows.
    let batch: Option<usize> = args.next().map(|s| s.parse()).transpose()?;
    let (max_rows, max_bytes) = match batch {
        Some(rows) => (rows.max(1), usize::MAX),
        None => (engine::JOB_MAX_ROWS, engine::JOB_BYTES),
    };
    let plan = plan::compile(pipeline.as_ref(), HubAccess::Locked)?;
    let (processor, report) = chatshards::engine::session::processor(&plan)?;
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
    let mut timed = |stage: usize, start: Instant| spent[stage] += start.elapsed();
    let mut lines = lines.into_iter().peekable();
    let mut first = 0;
    let mut batches = 0u32;
    while lines.peek().is_some() {
        let mut chunk: Vec<Vec<u8>> = Vec::new();
        let mut bytes = 0;
        while chunk.len() < max_rows && bytes < max_bytes {
            let Some(line) = lines.next() else { break };
            bytes += line.len();
            chunk.push(line);
        }
        let b = first;
        first += chunk.len();
        batches += 1;
        let t = Instant::now();
        let adapted: Vec<_> = chunk
            .into_iter()
            .map(|line| {
                let mut repairs = Repairs::new();
                let adapted = source
                    .adapter
                    .prepare_record(Record::Line(line), &mut repairs);
                adapted.ok().map(|c| (c, repairs))
            })
            .collect();
        timed(0, t);
        let t = Instant::now();
        let conversations: Vec<_> = adapted
            .into_iter()
            .enumerate()
            .filter_map(|(i, adapted)| {
                let (conversation, mut repairs) = adapted?;
                let conversation = processor
                    .validator
                    .validate(conversation, &mut repairs)
                    .ok()?;
                let spec = plan_rows(&conversation, processor.policy).pop()?;
                Some((b + i, conversation, spec))
            })
            .collect();
        timed(1, t);
        let t = Instant::now();
        let texts = conversations
            .iter()
            .map(|(_, c, _)| processor.renderer.render(c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!(e.message))?;
        timed(2, t);
        let t = Instant::now();
        let ids = texts
            .iter()
            .map(|text| tk.encoder.encode(text))
            .collect::<Result<Vec<_>, _>>()
            .map_err(anyhow::Error::msg)?;
        timed(3, t);
        let t = Instant::now();
        for ((text, ids), (_, _, spec)) in texts.iter().zip(&ids).zip(&conversations) {
            let rule = mask::MaskRule::standard();
            let loss_mask = mask::compute(ids, &tk.markers, &tk.bytes, &rule, &spec.supervise).mask;
            let normalized = tk.normalize(text);
            mask::verify(
                &normalized,
                ids,
                &loss_mask,
                &tk.bytes,
                &tk.markers,
                &rule,
                &spec.supervise,
            )?;
        }
        timed(4, t);
        let t = Instant::now();
        for (n, conversation, _) in &conversations {
            let id = format!("{}:0:{n}", source.name);
            std::hint::black_box(to_sharegpt_record(conversation, &id, &source.name).json_line());
        }
        timed(5, t);
        let t = Instant::now();
        for (n, _, _) in &conversations {
            let sample_id = format!("{}:0:{n}:0", source.name);
            std::hint::black_box(chatshards::write::shuffle_key(plan.seed, &sample_id));
        }
        timed(6, t);
        rows += conversations.len();
        tokens += ids.iter().map(Vec::len).sum::<usize>();
    }
    println!(
        "{rows} rows, {tokens} tokens, encoder: {report}, one thread, {batches} batches ({:.0} rows each)",
        rows as f64 / f64::from(batches.max(1))
    );
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
