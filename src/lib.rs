//! chatshards: declarative pipelines that turn chat, code, tool-calling and agentic datasets
//! into tokenized, loss-masked Arrow shards, rendered with the model's own chat template.
//!
//! Stages, one module each: [`plan`] → [`read`] → [`adapt`] → [`validate`] → [`curate`] →
//! [`render`] → [`tokenize`] → [`write`], driven by [`engine`], accounted in [`report`].
//!
//! Layers, top to bottom; a module names only modules below it (no dependency cycle, checked
//! by `tests/it/structure.rs`):
//! 1. [`commands`] (one per subcommand) and [`cli`]: glue that drives the engine.
//! 2. [`engine`]: a build from start to end (output directory, journal, passes, per-row path,
//!    curation's per-row steps, partitions, progress).
//! 3. [`plan`] (the checked pipeline, built from the stages' configs); [`write`] (shards,
//!    manifest, identity) over [`report`] (accounting, statistics files, `report.html`).
//! 4. The stages: [`curate`], [`validate`] over [`adapt`] over [`read`], [`tokenize`] over
//!    [`render`], and [`hub`] (the Hugging Face Hub cache).
//! 5. Below every stage: [`model`] (types and helpers the stages share), [`conversation`],
//!    [`reject`] (row outcomes), [`printer`].

pub mod adapt;
pub mod cli;
pub mod commands;
pub mod conversation;
pub mod curate;
pub mod engine;
pub mod frames;
pub mod hub;
pub mod model;
pub mod plan;
pub mod printer;
pub mod read;
pub mod regenerate;
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
    // A build, or (`merge`: the parts directory and count) a merge.
    let build = |pipeline, threads, locked, timings, fresh, merge, wide| {
        commands::build::run(
            &commands::build::BuildArgs {
                pipeline,
                threads,
                locked,
                timings,
                output: None,
                fresh,
                merge,
                wide,
            },
            &printer,
        )
    };
    match cli.command {
        Command::Build {
            pipeline,
            threads,
            locked,
            timings,
            fresh,
            part,
            parts,
            parts_dir,
            wide,
        } => {
            let spec = match (part, parts) {
                (None, None) if parts_dir.is_some() => {
                    anyhow::bail!("`--parts-dir` goes with `--part I/N` or `--parts N`")
                }
                (None, None) => None,
                (Some(part), None) => Some(engine::partition::PartSpec::parse(&part)),
                (None, Some(count)) => Some(engine::partition::PartSpec::from_env(count)),
                (Some(_), Some(_)) => {
                    Some(Err("give `--part I/N` or `--parts N`, not both".into()))
                }
            };
            match spec {
                Some(spec) => commands::part::run(
                    &commands::part::PartArgs {
                        pipeline,
                        part: spec.map_err(anyhow::Error::msg)?,
                        parts_dir,
                        threads,
                        locked,
                    },
                    &printer,
                ),
                None => build(pipeline, threads, locked, timings, fresh, None, wide),
            }
        }
        Command::Merge {
            pipeline,
            parts,
            parts_dir,
            threads,
            locked,
            timings,
            fresh,
            wide,
        } => {
            engine::partition::PartSpec::new(0, parts).map_err(anyhow::Error::msg)?;
            build(
                pipeline,
                threads,
                locked,
                timings,
                fresh,
                Some((parts_dir, parts)),
                wide,
            )
        }
        Command::Check {
            pipeline,
            sample,
            min_keep,
            seed,
            threads,
            json,
        } => commands::check::run(
            &commands::check::CheckArgs {
                pipeline,
                sample,
                min_keep,
                seed,
                threads,
                json,
            },
            &printer,
        ),
        Command::Render {
            template,
            tokenizer,
            policy,
            kwargs,
        } => commands::render::run(
            template.as_deref(),
            tokenizer.as_deref(),
            policy.into(),
            kwargs.as_deref(),
        ),
        Command::Export { dir, format, out } => {
            let count = commands::export::run(&commands::export::ExportArgs { dir, format, out })?;
            printer.info(&format!("exported {count} conversations"));
            Ok(())
        }
        Command::ServeRender {
            pipeline,
            template,
            tokenizer,
            kwargs,
            host,
            port,
            max_body_bytes,
            threads,
            model,
        } => commands::serve::run(
            &commands::serve::ServeArgs {
                pipeline,
                template,
                tokenizer,
                kwargs,
                host,
                port,
                max_body_bytes,
                threads,
                model,
            },
            &printer,
        ),
        Command::Normalize {
            format,
            file,
            rejects,
            resolved_only,
            columns,
            tags,
            tokenizer,
        } => commands::normalize::run(
            &commands::normalize::NormalizeArgs {
                format,
                file,
                tokenizer,
                rejects,
                resolved_only,
                columns,
                tags,
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
        Command::Verify {
            dir,
            rebuild,
            threads,
        } => commands::verify::run(
            &commands::verify::VerifyArgs {
                dir,
                rebuild,
                threads,
            },
            &printer,
        ),
        Command::Diff { a, b, json } => commands::diff::run(&a, &b, json),
        Command::Inspect {
            dir,
            row,
            sample_id,
            source,
            tokenizer,
        } => {
            use commands::inspect::Which;
            let which = match (sample_id, source) {
                (Some(id), _) => Which::SampleId(id),
                (None, Some(name)) => Which::Source(name, row.unwrap_or(0)),
                (None, None) => Which::Row(row.unwrap_or(0)),
            };
            commands::inspect::run(&dir, &which, tokenizer.as_deref())
        }
        Command::Report { dir } => commands::report::run(&dir, &printer),
        Command::Stats { dir, json, wide } => commands::stats::run(&dir, json, wide),
        Command::Vocab {
            dir,
            draft_size,
            target_vocab_size,
            out,
        } => commands::vocab::run(
            &commands::vocab::VocabArgs {
                dir,
                draft_size,
                target_vocab_size,
                out,
            },
            &printer,
        ),
    }
}

/// mimalloc's `mi_option_purge_delay` (its place in `mi_option_e` of the mimalloc 3.3 header
/// that libmimalloc-sys builds; the crate does not name it). A test pins that version.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Tells the allocator to return freed memory to the OS only after it has stayed unused for
/// [`PURGE_DELAY_MS`] (mimalloc's default is 10 ms). A build frees every batch's rows on one
/// thread while the workers allocate the next ones: pages returned that soon came back as page
/// faults, about 0.6 s of system time per 100,000 rows. Kept for a second, they are reused
/// first, while what the rows phase leaves behind goes back during the shard phase (measured on
/// a 16-core host at 913K rows, against never returning it: peak RSS 1,445 → 1,250–1,318 MiB
/// plain and 1,242 → 960 MiB curated, the same system time; BENCHMARKS.md). Call before the
/// work starts (`main`, benchmarks). An explicit `MIMALLOC_PURGE_DELAY` (milliseconds, -1:
/// never; mimalloc reads it itself) wins.
pub fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: sets a process-wide integer option; mimalloc reads it when it next purges.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
}

/// How long freed memory stays with the process before it goes back to the OS.
const PURGE_DELAY_MS: std::ffi::c_long = 1000;

/// Hands what every thread's heap holds free back to the allocator's shared arenas, where
/// any thread can take it: between the rows phase and the shard phase, whose threads would
/// otherwise grow the process beside what the rows phase's threads keep freed (until it is
/// purged, see [`tune_allocator`], freed memory stays with the heap it was freed to).
/// `CHATSHARDS_KEEP_HEAPS=1` skips it (to measure it).
pub fn release_freed(pool: &rayon::ThreadPool) {
    if std::env::var_os("CHATSHARDS_KEEP_HEAPS").is_some_and(|v| v == "1") {
        return;
    }
    // SAFETY: `mi_collect` frees the calling thread's empty pages to the arenas; no pointer.
    pool.broadcast(|_| unsafe { libmimalloc_sys::mi_collect(true) });
    // SAFETY: as above, for this thread.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

#[cfg(test)]
mod allocator_tests {
    #[test]
    fn the_purge_delay_option_is_the_one_of_this_mimalloc() {
        // SAFETY: reads the library version and an integer option.
        let version = unsafe { libmimalloc_sys::mi_version() };
        // On another version, check `mi_option_e` in its mimalloc.h and update the constant.
        assert_eq!(version, 30302);
        super::tune_allocator();
        let delay = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay, 1000);
    }
}
