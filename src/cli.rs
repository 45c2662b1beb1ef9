//! Command-line arguments (no logic here).

use crate::plan::config::RenderPolicy;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "chatshards",
    version,
    about = "Build tokenized, loss-masked Arrow datasets from chat data with the model's own chat template"
)]
pub struct Cli {
    /// Print only errors: no progress, no per-source lines, no summary, no result line
    /// (`--timings` is still printed when asked for).
    #[arg(long, short, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build the dataset a pipeline describes.
    Build {
        /// The pipeline YAML.
        pipeline: PathBuf,
        /// Worker threads, 1 to 1024 (default: all cores). The output is identical for any value.
        #[arg(long, value_parser = parse_threads)]
        threads: Option<usize>,
        /// Use exactly the Hub commits and files pinned in `PIPELINE.lock`, never the network;
        /// fail if the lockfile is missing or stale.
        #[arg(long)]
        locked: bool,
        /// Print where the build's CPU time went, by stage over all threads (even with
        /// `--quiet`).
        #[arg(long)]
        timings: bool,
        /// Start over: discard the state of an interrupted build of this output (by default
        /// a build goes on from it when its pipeline and inputs are unchanged).
        #[arg(long)]
        fresh: bool,
        /// Build only part I of N (I from 0) of a partitioned build into the parts directory;
        /// `chatshards merge` assembles the dataset from all N.
        #[arg(long, value_name = "I/N")]
        part: Option<String>,
        /// Build one part of N, its index from SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX.
        #[arg(long, value_name = "N")]
        parts: Option<usize>,
        /// Where the parts go (default: `OUTPUT.parts` beside the output directory).
        #[arg(long, value_name = "DIR")]
        parts_dir: Option<PathBuf>,
    },
    /// Assemble a partitioned build from its N parts (`build --part I/N`): the dataset, byte
    /// for byte what `chatshards build` writes.
    Merge {
        /// The pipeline YAML (the one the parts were built from).
        pipeline: PathBuf,
        /// How many parts.
        #[arg(long, value_name = "N")]
        parts: usize,
        /// Where the parts are (default: `OUTPUT.parts` beside the output directory).
        #[arg(long, value_name = "DIR")]
        parts_dir: Option<PathBuf>,
        /// Worker threads, 1 to 1024 (default: all cores).
        #[arg(long, value_parser = parse_threads)]
        threads: Option<usize>,
        /// Use exactly the Hub commits and files pinned in `PIPELINE.lock`, never the network.
        #[arg(long)]
        locked: bool,
        /// Print where the merge's CPU time went.
        #[arg(long)]
        timings: bool,
        /// Start over: discard the state of an interrupted merge of this output.
        #[arg(long)]
        fresh: bool,
    },
    /// Preflight a pipeline in seconds: report every config error, then run a seeded sample of
    /// each source through the whole row path (curation included) and print what a full build
    /// would keep, its tokens, the projected totals and mix, and one rendered row. Exits
    /// non-zero on a config error or when a source keeps less than `--min-keep` of its sample.
    Check {
        /// The pipeline YAML.
        pipeline: PathBuf,
        /// Rows sampled per source (spread over the whole source; all of a smaller one).
        #[arg(long, default_value_t = 200)]
        sample: u64,
        /// Least share of its sample (0 to 1) every source must keep.
        #[arg(long, default_value_t = 0.5)]
        min_keep: f64,
        /// Seed of the sample (default: the pipeline's `seed`).
        #[arg(long)]
        seed: Option<u64>,
        /// Worker threads, 1 to 1024 (default: all cores).
        #[arg(long, value_parser = parse_threads)]
        threads: Option<usize>,
        /// Print the report as one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Render and tokenize conversations read as JSON lines on stdin
    /// (`{"messages": [...], "tools": [...]}`); one JSON line out per line in.
    Render {
        /// The chat template (`chat_template.jinja`).
        #[arg(long)]
        template: PathBuf,
        /// The tokenizer (`tokenizer.json` or `tokenizer.json.zst`).
        #[arg(long)]
        tokenizer: PathBuf,
        /// Which assistant turns are supervised. `expand` and `turns` print `{"rows": [...]}`
        /// per input.
        #[arg(long, value_enum, default_value = "all")]
        policy: PolicyArg,
        /// Extra template variables as a JSON object, e.g. '{"preserve_thinking": true}'.
        #[arg(long)]
        kwargs: Option<String>,
    },
    /// Adapt and validate one source file and print it as normalized ShareGPT JSON lines
    /// (rejects and filtered rows go to stderr as JSON lines, or to `--rejects`).
    Normalize {
        /// The source format (a pipeline `format:` value, e.g. `glaive`, `hermes`, `agentic`).
        #[arg(long)]
        format: String,
        /// The input file (`.jsonl`, `.json` or `.parquet`).
        file: PathBuf,
        /// Write reject and filter lines here instead of stderr.
        #[arg(long)]
        rejects: Option<PathBuf>,
        /// `agentic` only: leave out trajectories not known to be resolved.
        #[arg(long)]
        resolved_only: bool,
        /// The source's `columns:` mapping, in YAML flow style, e.g. `{messages: conversation}`.
        #[arg(long)]
        columns: Option<String>,
        /// The source's `tags:` mapping, in YAML flow style, e.g. `{user_tag: user,
        /// assistant_tag: assistant}`.
        #[arg(long)]
        tags: Option<String>,
        /// The tokenizer whose control tokens are rejected in content (default: the Qwen3.6
        /// tokenizer built into the binary).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
    },
    /// Pin the pipeline's Hub revisions to commits and file hashes in `PIPELINE.lock`, next to
    /// the pipeline. Entries that still match the pipeline are kept as they are.
    Lock {
        /// The pipeline YAML.
        pipeline: PathBuf,
        /// Only check that the lockfile matches the pipeline (no network, nothing written);
        /// fail if it is missing or out of date.
        #[arg(long, conflicts_with = "upgrade")]
        check: bool,
        /// Re-resolve every revision to its current commit, even where the lockfile matches.
        #[arg(long)]
        upgrade: bool,
    },
    /// Download everything the pipeline reads from the Hub into the Hugging Face cache: exactly
    /// what `PIPELINE.lock` pins, or the current revisions if there is no lockfile. Afterwards
    /// `build` needs no network (`HF_HUB_OFFLINE=1` works).
    Fetch {
        /// The pipeline YAML.
        pipeline: PathBuf,
    },
    /// Check that a built dataset is what its manifest says: every file's hash, rows per
    /// shard, the schema, the accounting and the build id. Exits non-zero naming the first
    /// difference.
    Verify {
        /// The dataset directory.
        dir: PathBuf,
        /// Also rebuild it from the recorded pipeline (and lockfile) into a temporary directory
        /// next to it and compare every byte.
        #[arg(long)]
        rebuild: bool,
        /// Worker threads for `--rebuild` (default: all cores).
        #[arg(long, requires = "rebuild")]
        threads: Option<usize>,
    },
    /// Compare two built datasets: inputs and settings, per-source counts, and rows added,
    /// removed, or changed (by `sample_id`).
    Diff {
        /// The older dataset directory.
        a: PathBuf,
        /// The newer dataset directory.
        b: PathBuf,
        /// Print the comparison as one JSON document.
        #[arg(long)]
        json: bool,
    },
    /// Print a row of a built dataset, decoded, with supervised tokens highlighted.
    Inspect {
        /// The dataset directory.
        dir: PathBuf,
        /// Row index (global, in shard order).
        #[arg(long, default_value_t = 0)]
        row: u64,
        /// The tokenizer used for the build (default: the Qwen3.6 tokenizer built into the
        /// binary).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
    },
    /// (Re)write `DIR/report.html`: the dataset's summary, accounting, mix, length histograms
    /// and reject examples in one self-contained page.
    Report {
        /// The dataset directory.
        dir: PathBuf,
    },
    /// Print the dataset's summary (accounting and length percentiles) as a table.
    Stats {
        /// The dataset directory.
        dir: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Write the draft vocabulary mapping (`d2t.npy`, `t2d.npy`) built from the dataset's
    /// supervised token frequencies (`token_freq.pt`) the way speculators builds it.
    Vocab {
        /// The dataset directory.
        dir: PathBuf,
        /// Tokens in the draft vocabulary (e.g. 32000).
        #[arg(long)]
        draft_size: usize,
        /// The target model's vocabulary size (its config's `vocab_size`; default: the
        /// tokenizer's, from stats.json).
        #[arg(long)]
        target_vocab_size: Option<usize>,
        /// Output directory (default: `DIR/draft_vocab_N`).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// Most worker threads accepted: far above any machine this runs on, low enough that a typo
/// (`--threads 100000`) is an error rather than a hundred thousand threads.
pub const MAX_THREADS: usize = 1024;

fn parse_threads(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        Ok(n) => Err(format!("{n} is out of range: use 1 to {MAX_THREADS}")),
        Err(e) => Err(format!("not a thread count: {e}")),
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PolicyArg {
    All,
    Last,
    Expand,
    Turns,
}

impl From<PolicyArg> for RenderPolicy {
    fn from(p: PolicyArg) -> Self {
        match p {
            PolicyArg::All => RenderPolicy::All,
            PolicyArg::Last => RenderPolicy::Last,
            PolicyArg::Expand => RenderPolicy::Expand,
            PolicyArg::Turns => RenderPolicy::Turns,
        }
    }
}
