//! Per-row cost of each pipeline stage, one thread, on the first N rows of a pipeline's first
//! source: where the time outside the encoder goes.
//!
//! ```text
//! cargo run --release --example stage_costs -- PIPELINE.yaml [ROWS]
//! ```

use anyhow::{Context, Result};
use chatshards::adapt::{to_sharegpt_record, Repairs};
use chatshards::plan::{self, HubAccess};
use chatshards::render::plan_rows;
use chatshards::tokenize::mask;
use std::io::BufRead;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let pipeline = args
        .next()
        .context("usage: stage_costs PIPELINE.yaml [ROWS]")?;
    let rows: usize = args
        .next()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(20_000);
    let plan = plan::compile(pipeline.as_ref(), HubAccess::Locked)?;
    let (processor, _) = chatshards::commands::build::processor(&plan)?;
    let source = &plan.sources[0];
    let file = std::fs::File::open(&source.files[0])?;
    let lines: Vec<Vec<u8>> = std::io::BufReader::new(file)
        .split(b'\n')
        .take(rows)
        .collect::<std::io::Result<_>>()?;
    let mut t = [Duration::ZERO; 10];
    let names = [
        "json",
        "adapt+validate",
        "render",
        "encode",
        "mask compute",
        "mask verify",
        "record line",
        "sample id+key",
        "(normalize)",
        "(verify again)",
    ];
    let mut tokens = 0usize;
    for (n, line) in lines.iter().enumerate() {
        let s = Instant::now();
        let value: serde_json::Value = serde_json::from_slice(line)?;
        let a = Instant::now();
        let mut repairs = Repairs::new();
        let Ok(conv) = source.adapter.prepare(&value, &mut repairs) else {
            continue;
        };
        let Ok(conv) = processor.validator.validate(conv, &mut repairs) else {
            continue;
        };
        let b = Instant::now();
        let spec = plan_rows(&conv, processor.policy).remove(0);
        let text = processor
            .renderer
            .render(&conv)
            .map_err(|e| anyhow::anyhow!(e.message))?;
        let c = Instant::now();
        let tk = &processor.tokenizer;
        let ids = tk.encoder.encode(&text).map_err(anyhow::Error::msg)?;
        let d = Instant::now();
        let (m, _) = mask::compute(&ids, &tk.markers, &spec.supervise);
        let e = Instant::now();
        let norm = tk.normalize(&text);
        let e2 = Instant::now();
        mask::verify(&norm, &ids, &m, &tk.bytes, &tk.markers, &spec.supervise)?;
        let f = Instant::now();
        mask::verify(&norm, &ids, &m, &tk.bytes, &tk.markers, &spec.supervise)?;
        let f2 = Instant::now();
        t[9] += f2 - f;
        t[8] += e2 - e;
        let id = format!("synthetic:0:{n}");
        let mut l = serde_json::to_string(&to_sharegpt_record(&conv, &id, "synthetic"))?;
        l.push('\n');
        let g = Instant::now();
        let f = f2;
        let sid = format!("{id}:0");
        std::hint::black_box(chatshards::write::shuffle_key(1, &sid));
        let h = Instant::now();
        for (i, (x, y)) in [
            (s, a),
            (a, b),
            (b, c),
            (c, d),
            (d, e),
            (e, f),
            (f, g),
            (g, h),
        ]
        .iter()
        .enumerate()
        {
            t[i] += *y - *x;
        }
        tokens += ids.len();
    }
    let n = lines.len() as f64;
    println!("{} rows, {} tokens", lines.len(), tokens);
    let enc = t[3].as_secs_f64();
    for (name, d) in names.iter().zip(t) {
        println!(
            "{name:<16} {:>8.2} µs/row  {:>6.2}% of encode",
            d.as_secs_f64() / n * 1e6,
            d.as_secs_f64() / enc * 100.0
        );
    }
    Ok(())
}
