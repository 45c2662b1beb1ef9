//! chatshards: declarative pipelines that turn chat, code, tool-calling and agentic datasets
//! into tokenized, loss-masked Arrow shards, rendered with the model's own chat template.
//!
//! Stages, one module each: [`plan`] → [`read`] → [`adapt`] → [`validate`] → [`curate`] →
//! [`render`] → [`tokenize`] → [`write`], driven by [`pipeline`], accounted in [`report`].

pub mod adapt;
pub mod cli;
pub mod commands;
pub mod conversation;
pub mod curate;
pub mod hub;
pub mod pipeline;
pub mod plan;
pub mod printer;
pub mod progress;
pub mod read;
pub mod reject;
pub mod render;
pub mod report;
pub mod tokenize;
pub mod validate;
pub mod write;

use cli::{Cli, Command};
use printer::Printer;

/// Runs a parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let printer = if cli.quiet {
        Printer::Quiet
    } else {
        Printer::Default
    };
    match cli.command {
        Command::Build {
            pipeline,
            threads,
            locked,
        } => commands::build::run(
            &commands::build::BuildArgs {
                pipeline,
                threads,
                locked,
            },
            &printer,
        ),
        Command::Render {
            template,
            tokenizer,
            policy,
            kwargs,
        } => commands::render::run(&template, &tokenizer, policy.into(), kwargs.as_deref()),
        Command::Normalize {
            format,
            file,
            rejects,
            resolved_only,
            tokenizer,
        } => commands::normalize::run(
            &commands::normalize::NormalizeArgs {
                format,
                file,
                tokenizer,
                rejects,
                resolved_only,
            },
            &printer,
        ),
        Command::Lock {
            pipeline,
            check,
            upgrade,
        } => commands::lock::run(
            &commands::lock::LockArgs {
                pipeline,
                check,
                upgrade,
            },
            &printer,
        ),
        Command::Fetch { pipeline } => {
            commands::fetch::run(&commands::fetch::FetchArgs { pipeline }, &printer)
        }
        Command::Inspect {
            dir,
            row,
            tokenizer,
        } => commands::inspect::run(&dir, row, &tokenizer),
    }
}
