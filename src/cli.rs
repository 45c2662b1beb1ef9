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
    /// Print only errors (no progress, no summary).
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
        /// Worker threads (default: all cores). The output is identical for any value.
        #[arg(long)]
        threads: Option<usize>,
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
        /// Which assistant turns are supervised. `expand` prints `{"rows": [...]}` per input.
        #[arg(long, value_enum, default_value = "all")]
        policy: PolicyArg,
        /// Extra template variables as a JSON object, e.g. '{"preserve_thinking": true}'.
        #[arg(long)]
        kwargs: Option<String>,
    },
    /// Print a row of a built dataset, decoded, with supervised tokens highlighted.
    Inspect {
        /// The dataset directory.
        dir: PathBuf,
        /// Row index (global, in shard order).
        #[arg(long, default_value_t = 0)]
        row: u64,
        /// The tokenizer used for the build.
        #[arg(long, default_value = "templates/qwen3.6/tokenizer.json.zst")]
        tokenizer: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PolicyArg {
    All,
    Last,
    Expand,
}

impl From<PolicyArg> for RenderPolicy {
    fn from(p: PolicyArg) -> Self {
        match p {
            PolicyArg::All => RenderPolicy::All,
            PolicyArg::Last => RenderPolicy::Last,
            PolicyArg::Expand => RenderPolicy::Expand,
        }
    }
}
