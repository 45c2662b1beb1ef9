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
    /// Print only errors. Does something for the commands that print progress or notes
    /// (build, merge, check, normalize, lock, fetch, verify, report, vocab: no progress, no
    /// per-source lines, no summary, no result line; `--timings` is still printed when asked
    /// for); render, diff, inspect and stats print only their result anyway.
    #[arg(long, short, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Build the dataset a pipeline describes.
    #[command(
        after_help = "Examples:\n  chatshards build pipelines/demo.yaml\n  chatshards build --locked --threads 8 my.yaml\n\nThe summary table (build, merge, stats; the manifest's keys, per source):\n  read               rows read from the source's files\n  kept               rows that became training data (before `expand`)\n  rejected           rows that are bad input (reason in rejects.jsonl)\n  filtered           valid rows a filter, `max_tokens` or `min_supervised_tokens` left out\n  deduplicated       exact copies of an earlier row (`dedup`)\n  near_duplicate     near-copies of a row kept (`near_dup`)\n  contaminated       rows sharing text with a benchmark (`decontaminate`)\n  sampled_out        rows that survived curation but `take` / `mix` did not select\n  repeated           copies added by `mix.max_repeats`\n  rows               training rows written (a conversation may give several: `expand`)\n  tokens             tokens of those rows; supervised_tokens: those in the loss\nThe default shows what fits 80 columns; `--wide` every column. Below it, the rows each\nsource dropped, by reason. A source that keeps less than its `min_keep` (default 1% of\nthe rows it read) fails the build, naming its reasons with an example and a fix."
    )]
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
        /// Print every count in the summary table (by default only the columns that fit 80
        /// columns: read, kept, sampled_out, rows, tokens, supervised_tokens).
        #[arg(long)]
        wide: bool,
    },
    /// Assemble a partitioned build from its N parts (`build --part I/N`): the dataset, byte
    /// for byte what `chatshards build` writes.
    #[command(
        after_help = "Example:\n  chatshards merge --parts 4 my.yaml   (after `build --part 0/4` ... `--part 3/4`)"
    )]
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
        /// Print every count in the summary table (by default only the columns that fit 80
        /// columns: read, kept, sampled_out, rows, tokens, supervised_tokens).
        #[arg(long)]
        wide: bool,
    },
    /// Preflight a pipeline in seconds: report every config error, then run a seeded sample of
    /// each source through the whole row path (curation included) and print what a full build
    /// would keep, its tokens, the projected totals and mix, and one rendered row. Exits
    /// non-zero on a config error or when a source keeps less than `--min-keep` of its sample.
    #[command(
        after_help = "Example:\n  chatshards check my.yaml             (exit 1: a config error, or the build would fail)"
    )]
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
    #[command(
        after_help = "Example (the built-in Qwen3.6 template and tokenizer):\n  echo '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello\"}]}' \\\n    | chatshards render"
    )]
    Render {
        /// The chat template (`chat_template.jinja`); default: the Qwen3.6 one built into the
        /// binary.
        #[arg(long)]
        template: Option<PathBuf>,
        /// The tokenizer (`tokenizer.json` or `tokenizer.json.zst`); default: the Qwen3.6 one
        /// built into the binary.
        #[arg(long)]
        tokenizer: Option<PathBuf>,
        /// Which assistant turns are supervised. `expand` and `turns` print `{"rows": [...]}`
        /// per input.
        #[arg(long, value_enum, default_value = "all")]
        policy: PolicyArg,
        /// Extra template variables as a JSON object, e.g. '{"preserve_thinking": true}'.
        #[arg(long)]
        kwargs: Option<String>,
    },
    /// Write a dataset's kept conversations for another trainer: `specforge` is SpecForge's
    /// role/content JSONL (`conversations` with `reasoning_content` and `tool_calls`, `tools`).
    Export {
        /// The dataset directory.
        dir: PathBuf,
        #[arg(long, value_enum)]
        format: crate::commands::export::ExportFormat,
        /// Write to this new file instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Serve vLLM's `POST /v1/chat/completions/render` (plus `/health`, `/v1/models`) with the
    /// build's template and tokenizer, for `speculators prepare-data --render-endpoint`.
    ServeRender {
        /// A pipeline file (its template, kwargs and tokenizer); or --template and --tokenizer
        /// (each, when left out, the Qwen3.6 one built into the binary).
        pipeline: Option<PathBuf>,
        /// The chat template (`chat_template.jinja`).
        #[arg(long)]
        template: Option<PathBuf>,
        /// The tokenizer (`tokenizer.json` or `tokenizer.json.zst`).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
        /// Template variables as a JSON object (with --template); a request's
        /// `chat_template_kwargs` are laid over them.
        #[arg(long)]
        kwargs: Option<String>,
        #[arg(long, default_value = "127.0.0.1")]
        host: String,
        /// 0 picks a free port (the address is printed).
        #[arg(long, default_value_t = 8000)]
        port: u16,
        /// Larger request bodies are refused with HTTP 413.
        #[arg(long, default_value_t = 64 << 20)]
        max_body_bytes: usize,
        /// Renders at once; more requests wait (default: the machine's cores).
        #[arg(long, value_parser = parse_threads)]
        threads: Option<usize>,
        /// The model id `/v1/models` lists (default: the pipeline's name).
        #[arg(long)]
        model: Option<String>,
    },
    /// Adapt and validate one source file and print it as normalized ShareGPT JSON lines
    /// (rejects and filtered rows go to stderr as JSON lines, or to `--rejects`).
    #[command(
        after_help = "Example:\n  chatshards normalize --format sharegpt data/chat.jsonl > normalized.jsonl"
    )]
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
    #[command(
        after_help = "Example:\n  chatshards lock my.yaml              (then `chatshards build --locked my.yaml`)"
    )]
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
    #[command(
        after_help = "Example:\n  chatshards fetch my.yaml && HF_HUB_OFFLINE=1 chatshards build --locked my.yaml"
    )]
    Fetch {
        /// The pipeline YAML.
        pipeline: PathBuf,
    },
    /// Check that a built dataset is what its manifest says: every file's hash, rows per
    /// shard, the schema, the accounting and the build id. Exits non-zero naming the first
    /// difference.
    #[command(
        after_help = "Example:\n  chatshards verify out/demo\n  chatshards verify --rebuild out/demo"
    )]
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
    #[command(
        after_help = "Example:\n  chatshards diff out/demo-v1 out/demo   (settings by name, rows matched by content)"
    )]
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
    #[command(
        after_help = "Examples:\n  chatshards inspect out/demo --row 3\n  chatshards inspect out/demo --sample-id chat:0:12:0\n  chatshards inspect out/demo --source alpaca --row 2"
    )]
    Inspect {
        /// The dataset directory.
        dir: PathBuf,
        /// Row index, from 0, in shard order (of the dataset, or of `--source`'s rows).
        #[arg(long, conflicts_with = "sample_id")]
        row: Option<u64>,
        /// The row with this `sample_id` (`source:file:row:segment`, as in the shards,
        /// rejects.jsonl and `diff`), or the first row of `source:file:row`.
        #[arg(long, value_name = "ID")]
        sample_id: Option<String>,
        /// Only rows of this source (`--row N`: its Nth; default its first).
        #[arg(long, value_name = "NAME", conflicts_with = "sample_id")]
        source: Option<String>,
        /// The tokenizer used for the build (default: the Qwen3.6 tokenizer built into the
        /// binary).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
    },
    /// (Re)write `DIR/report.html`: the dataset's summary, accounting, mix, length histograms
    /// and reject examples in one self-contained page.
    #[command(
        after_help = "Example:\n  chatshards report out/demo && xdg-open out/demo/report.html"
    )]
    Report {
        /// The dataset directory.
        dir: PathBuf,
    },
    /// Print the dataset's summary (accounting and length percentiles) as a table.
    #[command(
        after_help = "Examples:\n  chatshards stats out/demo\n  chatshards stats --wide out/demo\n\nThe summary table (the manifest's keys, per source):\n  read               rows read from the source's files\n  kept               rows that became training data (before `expand`)\n  rejected           rows that are bad input (reason in rejects.jsonl)\n  filtered           valid rows a filter, `max_tokens` or `min_supervised_tokens` left out\n  deduplicated       exact copies of an earlier row (`dedup`)\n  near_duplicate     near-copies of a row kept (`near_dup`)\n  contaminated       rows sharing text with a benchmark (`decontaminate`)\n  sampled_out        rows that survived curation but `take` / `mix` did not select\n  repeated           copies added by `mix.max_repeats`\n  rows               training rows written (a conversation may give several: `expand`)\n  tokens             tokens of those rows; supervised_tokens: those in the loss\nThe default shows what fits 80 columns; `--wide` every column. Below it, the rows each\nsource dropped, by reason. A source that keeps less than its `min_keep` (default 1% of\nthe rows it read) fails the build, naming its reasons with an example and a fix.\nlen_p50, len_p99: tokens per row at the 50th and 99th percentile; --wide adds len_p90,\nlen_max and sup_p50 (supervised tokens per row)."
    )]
    Stats {
        /// The dataset directory.
        dir: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Print every count and percentile column (by default what fits 80 columns).
        #[arg(long)]
        wide: bool,
    },
    /// Write the draft vocabulary mapping built from the dataset's supervised token
    /// frequencies (`token_freq.pt`) the way speculators builds it: `d2t-N.npy` and
    /// `t2d-N.npy` (for `speculators train --draft-vocab-size N`) and `vocab_mapping-N.pt`
    /// (SpecForge's `vocab_mapping_path`), beside the dataset.
    #[command(after_help = "Example:\n  chatshards vocab --draft-size 32000 out/demo")]
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
        /// Output directory (default: DIR, where the trainers look).
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
