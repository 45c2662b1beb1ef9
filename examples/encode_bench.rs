//! Throughput of the `tokenizers` crate encoder vs the fast encoder, on the same texts with the
//! same rayon pool, and a check that their ids are identical.
//!
//! ```text
//! cargo run --release --example encode_bench -- [FILE.jsonl] [--threads N] [--repeat R]
//!     [--tokenizer PATH] [--regex] [--fast-only]
//! ```
//! `FILE.jsonl` has one JSON object per line with a `text` field; without it, the texts are the
//! renders in `tests/golden/render/*.jsonl`, repeated to about 20 MB. `--regex` also measures the
//! fast encoder with the regex pre-tokenizer instead of the hand-written scanner. `--fast-only`
//! (for profiling) skips the `tokenizers` run and with it the id comparison.

use anyhow::{bail, Context, Result};
use chatshards::report::timings::process_cpu;
use chatshards::tokenize::fast::FastEncoder;
use chatshards::tokenize::segments::{splitter, SegmentCache};
use chatshards::tokenize::{Backend, EncodeError, Encoder, Tokenizer};
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::time::Instant;

// The allocator of the `chatshards` binary, set up the same way (`tune_allocator`), so that raw
// encoding is measured as the pipeline runs it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `encode_fast(text, false)`, exactly what the pipeline's `tokenizers` backend runs.
struct Hf(std::sync::Arc<tokenizers::Tokenizer>);

impl Encoder for Hf {
    fn encode(&self, text: &str) -> Result<Vec<u32>, EncodeError> {
        self.0
            .encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| EncodeError::Tokenizers(e.to_string()))
    }
}

struct Args {
    file: Option<PathBuf>,
    threads: usize,
    repeat: usize,
    tokenizer: PathBuf,
    regex: bool,
    fast_only: bool,
}

fn parse_args() -> Result<Args> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut args = Args {
        file: None,
        threads: 2,
        repeat: 3,
        tokenizer: root.join("templates/qwen3.6/tokenizer.json.zst"),
        regex: false,
        fast_only: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--threads" => args.threads = value("--threads")?.parse()?,
            "--repeat" => args.repeat = value("--repeat")?.parse()?,
            "--tokenizer" => args.tokenizer = value("--tokenizer")?.into(),
            "--regex" => args.regex = true,
            "--fast-only" => args.fast_only = true,
            s if s.starts_with("--") => bail!("unknown option {s}"),
            s => args.file = Some(s.into()),
        }
    }
    args.threads = args.threads.max(1);
    args.repeat = args.repeat.max(1);
    Ok(args)
}

fn read_texts(path: &Path) -> Result<Vec<String>> {
    let data =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut texts = Vec::new();
    for (n, line) in data.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}:{}", path.display(), n + 1))?;
        if let Some(text) = row.get("text").and_then(|t| t.as_str()) {
            texts.push(text.to_owned());
        }
    }
    Ok(texts)
}

fn default_texts() -> Result<Vec<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/render");
    let mut base = Vec::new();
    for name in ["qwen3.6.jsonl", "qwen3.5.jsonl", "qwen3.jsonl"] {
        base.extend(read_texts(&dir.join(name))?);
    }
    let size: usize = base.iter().map(String::len).sum();
    if size == 0 {
        bail!("no texts in {}", dir.display());
    }
    let copies = (20 << 20) / size + 1;
    Ok((0..copies).flat_map(|_| base.iter().cloned()).collect())
}

/// The best of `repeat` runs: wall seconds and CPU seconds (all threads; NaN where the clock
/// cannot be read), each the least seen.
#[derive(Clone, Copy)]
struct Best {
    secs: f64,
    cpu: f64,
}

/// Encodes every text on `pool`; returns the ids and the best times over `repeat` runs.
fn measure(
    pool: &rayon::ThreadPool,
    encoder: &dyn Encoder,
    texts: &[String],
    repeat: usize,
) -> Result<(Vec<Vec<u32>>, Best)> {
    let cpu = || process_cpu().map_or(f64::NAN, |d| d.as_secs_f64());
    let mut best = Best {
        secs: f64::INFINITY,
        cpu: f64::INFINITY,
    };
    let mut ids = Vec::new();
    for _ in 0..repeat {
        let (start, cpu_start) = (Instant::now(), cpu());
        let run: Result<Vec<Vec<u32>>, EncodeError> =
            pool.install(|| texts.par_iter().map(|t| encoder.encode(t)).collect());
        best.secs = best.secs.min(start.elapsed().as_secs_f64());
        best.cpu = best.cpu.min(cpu() - cpu_start);
        ids = run?;
    }
    Ok((ids, best))
}

fn main() -> Result<()> {
    chatshards::tune_allocator();
    let args = parse_args()?;
    let texts = match &args.file {
        Some(file) => read_texts(file)?,
        None => default_texts()?,
    };
    let bytes: usize = texts.iter().map(String::len).sum();

    // The tokenizer loaded as a build loads it, timed: raw encoding needs it too, so the
    // pipeline's overhead is what a build adds to loading the tokenizer and encoding.
    let cpu = || process_cpu().map_or(f64::NAN, |d| d.as_secs_f64());
    let timed_load = |backend: Backend| -> Result<(Tokenizer, Best)> {
        let (start, cpu_start) = (Instant::now(), cpu());
        let (tokenizer, _) = Tokenizer::load_with_backend(&args.tokenizer, backend)?;
        let secs = start.elapsed().as_secs_f64();
        Ok((
            tokenizer,
            Best {
                secs,
                cpu: cpu() - cpu_start,
            },
        ))
    };
    let (loaded, hf_load) = timed_load(Backend::Hf)?;
    let (_, fast_load) = timed_load(Backend::Fast)?;
    let hf = loaded.reference();
    let raw = std::fs::read(&args.tokenizer)?;
    let json = if args.tokenizer.extension().is_some_and(|e| e == "zst") {
        zstd::decode_all(raw.as_slice())?
    } else {
        raw
    };
    let load = Instant::now();
    let fast = FastEncoder::new(&json, &hf).map_err(anyhow::Error::msg)?;
    let load = load.elapsed().as_secs_f64();
    let reference = Hf(std::sync::Arc::clone(&hf));

    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build()?;
    println!(
        "{} texts, {:.1} MB, {} threads, best of {} runs (fast encoder built in {:.2} s, scanner: {})",
        texts.len(),
        bytes as f64 / 1e6,
        args.threads,
        args.repeat,
        load,
        fast.uses_scanner()
    );
    // Each backend's load as a build does it (`backend: hf`; `backend: fast`, which also
    // builds and probes the fast encoder).
    println!(
        "tokenizer load: tokenizers {:.3} s {:.2} CPU-s, fast {:.3} s {:.2} CPU-s",
        hf_load.secs, hf_load.cpu, fast_load.secs, fast_load.cpu
    );

    // The reference ids and time; with --fast-only, the fast encoder's own ids (untimed).
    let (want, hf_best) = if args.fast_only {
        (measure(&pool, &fast, &texts, 1)?.0, None)
    } else {
        let (ids, best) = measure(&pool, &reference, &texts, args.repeat)?;
        (ids, Some(best))
    };
    let tokens: usize = want.iter().map(Vec::len).sum();
    let report = |name: &str, best: Best| {
        let secs = best.secs;
        let speedup = hf_best.map_or("-".to_owned(), |hf| format!("{:.2}x", hf.secs / secs));
        println!(
            "{name:<28} {secs:>8.3} s  {:>7.2} M tokens/s  {:>7.1} MB/s  {speedup:>6}  {:>8.2} CPU-s",
            tokens as f64 / secs / 1e6,
            bytes as f64 / secs / 1e6,
            best.cpu,
        );
    };
    if let Some(best) = hf_best {
        report("tokenizers encode_fast", best);
        // What a `backend: hf` build runs: the same, with recurring segments encoded once. A
        // fresh (cold) cache for each run, as a build starts with.
        let split = splitter(&hf).map_err(anyhow::Error::msg)?;
        let mut best = Best {
            secs: f64::INFINITY,
            cpu: f64::INFINITY,
        };
        for _ in 0..args.repeat {
            let cached = SegmentCache::new(Box::new(Hf(std::sync::Arc::clone(&hf))), split.clone());
            let (got, run) = measure(&pool, &cached, &texts, 1)?;
            best.secs = best.secs.min(run.secs);
            best.cpu = best.cpu.min(run.cpu);
            let mismatches = (0..texts.len()).filter(|&i| got[i] != want[i]).count();
            if mismatches > 0 {
                bail!(
                    "segment cache: ids differ on {mismatches} of {} texts",
                    texts.len()
                );
            }
        }
        report("segment_cached tokenizers", best);
    }

    let mut candidates: Vec<(&str, FastEncoder)> = vec![("fast", fast)];
    if args.regex {
        let regex = FastEncoder::with_regex_pretokenizer(&json, &hf).map_err(anyhow::Error::msg)?;
        candidates.push(("fast (regex pre-tokenizer)", regex));
    }
    for (name, encoder) in &candidates {
        let (got, best) = measure(&pool, encoder, &texts, args.repeat)?;
        report(name, best);
        let mismatches = (0..texts.len()).filter(|&i| got[i] != want[i]).count();
        if mismatches > 0 {
            bail!(
                "{name}: ids differ on {mismatches} of {} texts",
                texts.len()
            );
        }
    }
    if hf_best.is_some() {
        println!(
            "ids identical to tokenizers on all {} texts ({tokens} tokens)",
            texts.len()
        );
    }
    Ok(())
}
