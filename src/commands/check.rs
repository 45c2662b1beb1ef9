//! `chatshards check PIPELINE.yaml`: a preflight in seconds. Plans the pipeline (every config
//! error at once), resolves its inputs (offline when it has a lockfile), runs a seeded sample of
//! each source through the whole row path (`engine::run` on a plan whose reads yield only the
//! sampled rows, into a temporary directory removed afterwards), and reports per source what a
//! full build would keep, its token counts, the projected totals and mix, and one rendered row.
//!
//! The sample ignores `take` and `mix` (every sampled row that survives curation counts), so
//! the rates are those before selection; the selection is projected from them instead.

use crate::curate::ledger::{MixLine, Shares};
use crate::curate::select::{
    self, AllocError, Allocation, MixConfig, MixTarget, Shortfall, Supply,
};
use crate::engine::{self, NoProgress, Sinks};
use crate::hub::Lockfile;
use crate::plan::{self, HubAccess};
use crate::printer::Printer;
use crate::read::sample::{self, FileSurvey, RowCount};
use crate::read::Sampling;
use crate::report::loss::{self, Examples, SourceFacts};
use crate::report::timings::Timings;
use crate::report::SourceStats;
use crate::write::Spill;
use crate::write::{Bucket, SpilledBucket};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

pub struct CheckArgs {
    pub pipeline: PathBuf,
    /// Rows sampled per source.
    pub sample: u64,
    /// Least share of its sample a source must keep.
    pub min_keep: f64,
    /// Seed of the sample (default: the pipeline's `seed`).
    pub seed: Option<u64>,
    pub threads: Option<usize>,
    pub json: bool,
}

/// Characters of the example row printed as text (the JSON report has all of it).
const EXAMPLE_CHARS: usize = 4000;

#[derive(Debug, Serialize)]
struct Report {
    pipeline: String,
    /// Whether the inputs were read through the pipeline's lockfile (no network).
    locked: bool,
    seed: u64,
    sample: u64,
    min_keep: f64,
    /// Bytes read from input files by the check (its survey and every pass of its sample).
    bytes_read: u64,
    /// Bytes of the sources' input files.
    input_bytes: u64,
    sources: Vec<SourceCheck>,
    /// The projected realized mix, when the pipeline has one.
    mix: Option<MixProjection>,
    /// Why the check fails (empty: it passes).
    failures: Vec<String>,
}

#[derive(Debug, Serialize)]
struct SourceCheck {
    name: String,
    files: Vec<FileCheck>,
    /// The sample's accounting, with the manifest's keys.
    stats: SourceStats,
    /// Shares of the sampled rows: kept, then each reason.
    rates: Rates,
    tokens_per_row: Spread,
    supervised_tokens_per_row: Spread,
    projected: Projected,
    example: Option<Example>,
}

#[derive(Debug, Serialize)]
struct FileCheck {
    path: String,
    bytes: u64,
    /// Rows a full build reads from the file.
    rows: u64,
    rows_count: RowCount,
    /// How the sample was taken: `all`, `records` (seeded record indices) or `line_starts`
    /// (seeded byte offsets; the row ids are byte offsets).
    sampled_by: &'static str,
}

#[derive(Debug, Serialize)]
struct Rates {
    kept: f64,
    rejected: BTreeMap<String, f64>,
    filtered: BTreeMap<String, f64>,
    deduplicated: f64,
    near_duplicate: f64,
    contaminated: f64,
}

#[derive(Debug, Default, Serialize)]
struct Spread {
    mean: f64,
    p50: u64,
    p95: u64,
}

#[derive(Debug, Serialize)]
struct Projected {
    /// Rows a full build reads (exact when every file's count is).
    rows_read: u64,
    rows_read_estimated: bool,
    /// Source rows kept before `take` / `mix`.
    kept: u64,
    /// Output rows (after `expand` / `turns`), tokens and supervised tokens of those.
    rows: u64,
    tokens: u64,
    supervised_tokens: u64,
}

#[derive(Debug, Serialize)]
struct Example {
    sample_id: String,
    tokens: usize,
    supervised_tokens: usize,
    /// The decoded row, supervised spans in `⟦…⟧`.
    text: String,
}

#[derive(Debug, Serialize)]
struct MixProjection {
    target: MixConfig,
    /// By source name, as in the manifest's `mix`.
    sources: indexmap::IndexMap<String, MixLine>,
    #[serde(skip)]
    lines: Vec<MixLine>,
    /// Quotas the projected rows cannot fill, and what the build does about them.
    notes: Vec<String>,
}

/// A row shown as the example of its source: its `sample_id`, ids and mask.
type ExampleRow = (String, Vec<u32>, Vec<i8>);

pub fn run(args: &CheckArgs, printer: &Printer) -> Result<()> {
    if args.sample == 0 {
        bail!("--sample must be at least 1");
    }
    if !(0.0..=1.0).contains(&args.min_keep) {
        bail!("--min-keep must be between 0 and 1, not {}", args.min_keep);
    }
    // Offline when the pipeline has a lockfile, as `build --locked` reads it.
    let locked = Lockfile::path_for(&args.pipeline).exists();
    let access = HubAccess::locked_if(locked);
    let mut plan = plan::compile(&args.pipeline, access)?;
    for note in &plan.notes {
        printer.info(&format!("note: {note}"));
    }
    let seed = args.seed.unwrap_or(plan.seed);

    // The sample of every file, and the row counts a full build would read.
    let counter = Arc::new(AtomicU64::new(0));
    let mut samples = BTreeMap::new();
    let mut files: Vec<Vec<FileCheck>> = Vec::new();
    for source in &plan.sources {
        let mut surveys: Vec<(FileSurvey, u64)> = Vec::new();
        for (path, name) in source.files.iter().zip(&source.selection_names) {
            let file_seed = sample::file_seed(seed, name);
            let survey =
                sample::survey(path, args.sample, file_seed, &plan.read_options, &counter)?;
            surveys.push((survey, file_seed));
        }
        let ks = split_sample(
            args.sample,
            &surveys.iter().map(|(s, _)| s).collect::<Vec<_>>(),
        );
        let mut checks = Vec::new();
        for (((survey, file_seed), k), (path, shown)) in surveys
            .iter()
            .zip(ks)
            .zip(source.files.iter().zip(&source.display_files))
        {
            let chosen = survey.sample(k, *file_seed);
            checks.push(FileCheck {
                path: shown.clone(),
                bytes: survey.bytes,
                rows: survey.rows,
                rows_count: survey.count,
                sampled_by: match chosen {
                    crate::read::FileSample::All => "all",
                    crate::read::FileSample::Records(_) => "records",
                    crate::read::FileSample::LineStarts(_) => "line_starts",
                    crate::read::FileSample::LineRange { .. } => "line_range",
                },
            });
            samples.insert(path.clone(), chosen);
        }
        files.push(checks);
    }

    // Without a mix, a `take` beyond the rows of its files fails the build once it has read
    // them; here they are counted already (estimated counts are only noted).
    let mut failures = Vec::new();
    for (i, (source, checks)) in plan.sources.iter().zip(&files).enumerate() {
        let Some(take) = source.take.filter(|_| plan.mix.is_none()) else {
            continue;
        };
        let rows: u64 = checks.iter().map(|f| f.rows).sum();
        if take <= rows {
            continue;
        }
        if checks.iter().all(|f| f.rows_count == RowCount::Exact) {
            failures.push(plan.at_line(&format!(
                "sources[{i}].take: `take: {take}` but the files of `{}` hold only {rows} rows: \
                 the build would fail (lower `take` to at most {rows}, or write `take: all`)",
                source.name
            )));
        } else {
            printer.info(&format!(
                "note: source `{}`: `take: {take}` but its files hold about {rows} rows: the \
                 build fails if they hold fewer",
                source.name
            ));
        }
    }

    // The sample's plan: no selection (rates before `take` / `mix`), rows in arrival order.
    let selection: Vec<(Option<u64>, Option<f64>)> =
        plan.sources.iter().map(|s| (s.take, s.weight)).collect();
    let mix = plan.mix.take();
    for s in &mut plan.sources {
        s.take = None;
        s.weight = None;
    }
    plan.shuffle = false;
    let temp = tempfile::Builder::new()
        .prefix("chatshards-check-")
        .tempdir()
        .context("failed to create a temporary directory")?;
    plan.output_dir = temp.path().join("out");
    plan.read_options.sample = Some(Arc::new(Sampling {
        files: samples,
        bytes_read: counter.clone(),
    }));

    let (processor, _) = crate::engine::session::processor(&plan)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads.unwrap_or(0))
        .build()
        .context("failed to start the thread pool")?;
    let mut spill = Spill::new(&temp.path().join("spill"), false)?;
    // The side outputs of a sample are small; kept for one example message per reason.
    let (mut rejects, mut filtered, mut conversations) =
        (Vec::<u8>::new(), Vec::<u8>::new(), std::io::sink());
    let mut sinks = Sinks {
        spill: &mut spill,
        rejects: &mut rejects,
        filtered: &mut filtered,
        conversations: &mut conversations,
    };
    let timings = Timings::default();
    let run = engine::run(&plan, &processor, &mut sinks, &NoProgress, &pool, &timings)?;
    let stats = run.settled.stats;
    let mut messages = Examples::default();
    messages.add_lines(rejects.as_slice());
    messages.add_lines(filtered.as_slice());

    // Per output row: (tokens, supervised), and the first row of each source.
    let n = plan.sources.len();
    let mut lengths: Vec<Vec<(u64, u64)>> = vec![Vec::new(); n];
    let mut examples: Vec<Option<ExampleRow>> = vec![None; n];
    let buckets = spill.finish()?;
    let mut buffer = SpilledBucket::buffer_for(&buckets);
    for b in &buckets {
        let bucket = Bucket::read(b, buffer)?;
        for row in bucket.rows() {
            let (mut ids, mut mask) = (Vec::new(), Vec::new());
            row.append_to(&mut ids, &mut mask);
            let s = usize::from(row.source);
            let supervised = mask.iter().filter(|&&m| m == 1).count();
            if let Some(l) = lengths.get_mut(s) {
                l.push((ids.len() as u64, supervised as u64));
            }
            if let Some(e @ None) = examples.get_mut(s) {
                let ids = ids.iter().map(|&i| i as u32).collect();
                *e = Some((row.sample_id.to_owned(), ids, mask));
            }
        }
        buffer = bucket.into_buffer();
    }

    let mut sources = Vec::new();
    for (i, source) in plan.sources.iter().enumerate() {
        let s = stats.get(i).cloned().unwrap_or_default();
        let example = examples[i].take().map(|(sample_id, ids, mask)| Example {
            tokens: ids.len(),
            supervised_tokens: mask.iter().filter(|&&m| m == 1).count(),
            text: crate::tokenize::mask::highlight(&processor.tokenizer, &ids, &mask, false),
            sample_id,
        });
        let checks = std::mem::take(&mut files[i]);
        sources.push(SourceCheck {
            name: source.name.clone(),
            projected: project(&s, &checks),
            rates: rates(&s),
            tokens_per_row: spread(lengths[i].iter().map(|l| l.0).collect()),
            supervised_tokens_per_row: spread(lengths[i].iter().map(|l| l.1).collect()),
            files: checks,
            stats: s,
            example,
        });
    }
    let mut mix = mix.map(|target| project_mix(target, &sources, &selection));
    // A quota the build cannot fill under `shortfall: fail` fails the build: the check too.
    if let Some(m) = mix
        .as_mut()
        .filter(|m| m.target.shortfall == Shortfall::Fail)
    {
        failures.extend(
            m.notes
                .drain(..)
                .map(|n| format!("the mix would fail: {n}")),
        );
    }
    for (s, source) in sources.iter().zip(&plan.sources) {
        let mut facts = SourceFacts {
            name: source.name.clone(),
            format: source.adapter.name().to_owned(),
            min_keep: source.min_keep,
            first_keys: Vec::new(),
        };
        let below_sample_share = s.rates.kept < args.min_keep;
        if !below_sample_share && loss::check(&facts, &s.stats, &messages).is_none() {
            continue;
        }
        facts.first_keys = loss::first_keys(&source.files);
        if let Some(l) = loss::check(&facts, &s.stats, &messages) {
            // The build's own rule: it would fail, so the check does.
            failures.push(format!("the build would fail: {l}"));
        } else {
            // Only `--min-keep` (stricter than the build): the reasons, each with an example.
            facts.min_keep = 1.0;
            let reasons = loss::check(&facts, &s.stats, &messages)
                .map(|l| l.reasons_text())
                .unwrap_or_default();
            failures.push(format!(
                "source `{}` keeps {:.1}% of its sample ({} of {} rows), below --min-keep {:.1}%; top reasons: {}{reasons}",
                s.name,
                100.0 * s.rates.kept,
                s.stats.kept,
                s.stats.read,
                100.0 * args.min_keep,
                top_reasons(&s.stats)
            ));
        }
    }
    let report = Report {
        pipeline: args.pipeline.display().to_string(),
        locked,
        seed,
        sample: args.sample,
        min_keep: args.min_keep,
        bytes_read: counter.load(std::sync::atomic::Ordering::Relaxed),
        input_bytes: sources
            .iter()
            .flat_map(|s| s.files.iter().map(|f| f.bytes))
            .sum(),
        sources,
        mix,
        failures,
    };
    let text = if args.json {
        let mut t = crate::write::pretty(&serde_json::to_value(&report)?);
        t.push('\n');
        t
    } else {
        let color = std::io::stdout().is_terminal();
        text_report(&report, color)
    };
    Printer::data(&mut std::io::stdout().lock(), &text).context("failed to write stdout")?;
    drop(temp);
    if !report.failures.is_empty() {
        // Printed here only (not in the report above), so each failure is printed once.
        bail!(
            "check failed: a build of this pipeline would not give what it asks\n  FAIL {}",
            report.failures.join("\n  FAIL ")
        );
    }
    Ok(())
}

/// Splits `n` sampled rows over a source's files in proportion to their rows (largest
/// remainder), each at most what it can give.
fn split_sample(n: u64, surveys: &[&FileSurvey]) -> Vec<u64> {
    let available: Vec<u64> = surveys.iter().map(|s| s.available()).collect();
    if available.iter().sum::<u64>() <= n {
        return available;
    }
    let total: u64 = surveys.iter().map(|s| s.rows).sum::<u64>().max(1);
    let exact: Vec<f64> = surveys
        .iter()
        .map(|s| n as f64 * s.rows as f64 / total as f64)
        .collect();
    let mut ks: Vec<u64> = exact
        .iter()
        .zip(&available)
        .map(|(&e, &a)| (e.floor() as u64).min(a))
        .collect();
    // The rest, one at a time, to the largest remainders that still have rows (bounded: each
    // round places one row or stops).
    for _ in 0..n {
        let placed: u64 = ks.iter().sum();
        if placed >= n {
            break;
        }
        let next = (0..ks.len())
            .filter(|&i| ks[i] < available[i])
            .max_by(|&a, &b| {
                let ra = exact[a] - ks[a] as f64;
                let rb = exact[b] - ks[b] as f64;
                ra.total_cmp(&rb).then(b.cmp(&a))
            });
        match next {
            Some(i) => ks[i] += 1,
            None => break,
        }
    }
    ks
}

fn rate(count: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        count as f64 / of as f64
    }
}

fn rates(s: &SourceStats) -> Rates {
    Rates {
        kept: rate(s.kept, s.read),
        rejected: s
            .rejected
            .iter()
            .map(|(k, v)| (k.code().to_owned(), rate(*v, s.read)))
            .collect(),
        filtered: s
            .filtered
            .iter()
            .map(|(k, v)| (k.clone(), rate(*v, s.read)))
            .collect(),
        deduplicated: rate(s.deduplicated, s.read),
        near_duplicate: rate(s.near_duplicate, s.read),
        contaminated: rate(s.contaminated, s.read),
    }
}

/// Mean and nearest-rank percentiles.
fn spread(mut values: Vec<u64>) -> Spread {
    if values.is_empty() {
        return Spread::default();
    }
    values.sort_unstable();
    let at = |p: f64| {
        let rank = (p * values.len() as f64).ceil() as usize;
        values[rank.clamp(1, values.len()) - 1]
    };
    Spread {
        mean: values.iter().sum::<u64>() as f64 / values.len() as f64,
        p50: at(0.50),
        p95: at(0.95),
    }
}

/// The full build's totals, scaled from the sample by rows read.
fn project(s: &SourceStats, files: &[FileCheck]) -> Projected {
    let rows_read: u64 = files.iter().map(|f| f.rows).sum();
    let scale = |v: u64| -> u64 {
        if s.read == 0 {
            0
        } else {
            (v as f64 * rows_read as f64 / s.read as f64).round() as u64
        }
    };
    Projected {
        rows_read,
        rows_read_estimated: files.iter().any(|f| f.rows_count != RowCount::Exact),
        kept: scale(s.kept),
        rows: scale(s.rows),
        tokens: scale(s.tokens),
        supervised_tokens: scale(s.supervised_tokens),
    }
}

/// Rows a projected mix allocates at most: larger sources are scaled down (with the total and
/// the `take`s) and the answer scaled back up, so the projection stays cheap.
const PROJECTED_ROWS: u64 = 1_000_000;

/// The mix a full build would realize from the projected rows, by the build's own allocation
/// (`curate::select::allocate`) over each source's projected kept rows at their mean amount.
/// A failing allocation is noted (with its message, as the build would print it) and the lines
/// are those of `shortfall: redistribute`, to show what there is.
fn project_mix(
    target: MixConfig,
    sources: &[SourceCheck],
    selection: &[(Option<u64>, Option<f64>)],
) -> MixProjection {
    // Per source: amount in the target's unit per kept conversation (at least 1).
    let unit = |s: &SourceCheck| -> u64 {
        let p = &s.projected;
        let per = |v: u64| v.checked_div(p.kept).unwrap_or(0).max(1);
        match target.target {
            MixTarget::Rows => 1,
            MixTarget::Tokens => per(p.tokens),
            MixTarget::SupervisedTokens => per(p.supervised_tokens),
        }
    };
    let all: u64 = sources.iter().map(|s| s.projected.kept).sum();
    let scale = all.div_ceil(PROJECTED_ROWS).max(1);
    let known: Vec<Vec<(u64, &str)>> = sources
        .iter()
        .map(|s| vec![(unit(s), ""); usize::try_from(s.projected.kept / scale).unwrap_or(0)])
        .collect();
    let supplies: Vec<Supply> = sources
        .iter()
        .zip(&known)
        .zip(selection)
        .map(|((s, known), &(take, weight))| Supply {
            name: &s.name,
            weight,
            take: take.map(|t| t.div_ceil(scale)),
            known,
            complete: true,
        })
        .collect();
    let scaled = MixConfig {
        total: target.total.div_ceil(scale),
        ..target.clone()
    };
    let mut notes = Vec::new();
    let allocations = match select::allocate(Some(&scaled), 0, &supplies) {
        Ok(a) => a,
        Err(e) => {
            notes.push(format!(
                "{}: the build would fail{}",
                rescaled(e, scale),
                if scale > 1 {
                    " (numbers projected)"
                } else {
                    ""
                }
            ));
            let lenient = MixConfig {
                shortfall: Shortfall::Redistribute,
                ..scaled
            };
            select::allocate(Some(&lenient), 0, &supplies)
                .unwrap_or_else(|_| vec![Allocation::default(); sources.len()])
        }
    };
    let lines: Vec<MixLine> = sources
        .iter()
        .zip(&allocations)
        .enumerate()
        .map(|(i, (s, a))| {
            let p = &s.projected;
            let conversations = (a.originals + a.copies.len()) as u64 * scale;
            let per = |v: u64| {
                if p.kept == 0 {
                    0
                } else {
                    (v as f64 * conversations as f64 / p.kept as f64).round() as u64
                }
            };
            let (tokens, supervised_tokens) = (per(p.tokens), per(p.supervised_tokens));
            MixLine {
                source: s.name.clone(),
                conversations,
                weight: selection[i].1,
                take: selection[i].0,
                quota: selection[i].0.unwrap_or(a.quota * scale),
                // In the target's unit, from what is taken, as the build's ledger counts it
                // (an allocation's own `realized` is not kept for every kind of source).
                realized: match target.target {
                    MixTarget::Rows => conversations,
                    MixTarget::Tokens => tokens,
                    MixTarget::SupervisedTokens => supervised_tokens,
                },
                rows: per(p.rows),
                tokens,
                supervised_tokens,
                copies: a.copies.len() as u64 * scale,
                share: Shares::default(),
            }
        })
        .collect();
    let total = |f: fn(&MixLine) -> u64| lines.iter().map(f).sum::<u64>().max(1) as f64;
    let (c, t, st) = (
        total(|l| l.conversations),
        total(|l| l.tokens),
        total(|l| l.supervised_tokens),
    );
    let lines = lines
        .into_iter()
        .map(|mut l| {
            l.share = Shares {
                conversations: l.conversations as f64 / c,
                tokens: l.tokens as f64 / t,
                supervised_tokens: l.supervised_tokens as f64 / st,
            };
            l
        })
        .collect();
    let lines: Vec<MixLine> = lines;
    MixProjection {
        target,
        sources: lines
            .iter()
            .map(|l| (l.source.clone(), l.clone()))
            .collect(),
        lines,
        notes,
    }
}

/// An allocation error of a mix scaled down by `k`, in full-size numbers.
fn rescaled(e: AllocError, k: u64) -> AllocError {
    match e {
        AllocError::Shortfall {
            source,
            quota,
            unit,
            take,
            rows,
            amount,
            repeats,
            available,
        } => AllocError::Shortfall {
            source,
            quota: quota * k,
            unit,
            take,
            rows: rows * k,
            amount: amount * k,
            repeats,
            available: available * k,
        },
        AllocError::Served {
            total,
            served,
            unit,
            sources,
            weighted,
        } => AllocError::Served {
            total: total * k,
            served: served * k,
            unit,
            sources,
            weighted,
        },
        AllocError::Total {
            total,
            available,
            unit,
        } => AllocError::Total {
            total: total * k,
            available: available * k,
            unit,
        },
        other => other,
    }
}

/// The three commonest reasons a source's rows were not kept.
fn top_reasons(s: &SourceStats) -> String {
    let mut reasons: Vec<(String, u64)> = s
        .rejected
        .iter()
        .map(|(k, v)| (format!("rejected {}", k.code()), *v))
        .chain(
            s.filtered
                .iter()
                .map(|(k, v)| (format!("filtered {k}"), *v)),
        )
        .chain([
            ("deduplicated".to_owned(), s.deduplicated),
            ("near_duplicate".to_owned(), s.near_duplicate),
            ("contaminated".to_owned(), s.contaminated),
        ])
        .filter(|(_, v)| *v > 0)
        .collect();
    reasons.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    if reasons.is_empty() {
        return "none (no rows were read)".to_owned();
    }
    reasons
        .iter()
        .take(3)
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn pct(r: f64) -> String {
    format!("{:.1}%", 100.0 * r)
}

fn text_report(r: &Report, color: bool) -> String {
    let mut out = Vec::new();
    out.push(format!(
        "check `{}`: {} rows per source, seed {}{}",
        r.pipeline,
        r.sample,
        r.seed,
        if r.locked {
            ", inputs from the lockfile"
        } else {
            ""
        }
    ));
    out.push(format!(
        "read {} bytes of input files, benchmark sets included (the sources hold {} bytes)",
        r.bytes_read, r.input_bytes
    ));
    for s in &r.sources {
        out.push(String::new());
        out.push(format!("source `{}`", s.name));
        for f in &s.files {
            let how = match f.rows_count {
                RowCount::Exact => "",
                RowCount::Estimated => " (estimated from bytes)",
                RowCount::EstimatedFromHead => " (estimated from the first rows of a JSON array)",
            };
            out.push(format!(
                "  file {}: {} bytes, {} rows{how}, sampled by {}",
                f.path, f.bytes, f.rows, f.sampled_by
            ));
        }
        let st = &s.stats;
        out.push(format!(
            "  sampled {}: kept {} ({})",
            st.read,
            st.kept,
            pct(s.rates.kept)
        ));
        for (k, v) in &st.rejected {
            out.push(format!(
                "    rejected {}: {v} ({})",
                k.code(),
                pct(rate(*v, st.read))
            ));
        }
        for (k, v) in &st.filtered {
            out.push(format!(
                "    filtered {k}: {v} ({})",
                pct(rate(*v, st.read))
            ));
        }
        for (k, v) in [
            ("deduplicated", st.deduplicated),
            ("near_duplicate", st.near_duplicate),
            ("contaminated", st.contaminated),
        ] {
            if v > 0 {
                out.push(format!("    {k}: {v} ({})", pct(rate(v, st.read))));
            }
        }
        out.push(format!(
            "  per output row ({} rows): tokens mean {:.1} p50 {} p95 {}; supervised mean {:.1} p50 {} p95 {}",
            st.rows,
            s.tokens_per_row.mean,
            s.tokens_per_row.p50,
            s.tokens_per_row.p95,
            s.supervised_tokens_per_row.mean,
            s.supervised_tokens_per_row.p50,
            s.supervised_tokens_per_row.p95
        ));
        let p = &s.projected;
        out.push(format!(
            "  projected full build: {}{} rows read, {} kept, {} output rows, {} tokens ({} supervised)",
            if p.rows_read_estimated { "~" } else { "" },
            p.rows_read,
            p.kept,
            p.rows,
            p.tokens,
            p.supervised_tokens
        ));
        if let Some(e) = &s.example {
            out.push(format!(
                "  example {} ({} tokens, {} supervised{}):",
                e.sample_id,
                e.tokens,
                e.supervised_tokens,
                if color {
                    ", supervised in green"
                } else {
                    ", supervised in ⟦…⟧"
                }
            ));
            let text = if color {
                // Re-decoded with color; the JSON report always has the brackets.
                recolor(&e.text)
            } else {
                e.text.clone()
            };
            out.push(clip(&text));
        }
    }
    if let Some(m) = &r.mix {
        out.push(String::new());
        out.push(format!(
            "projected {}",
            crate::report::mix_table(&m.target, &m.lines)
        ));
        for n in &m.notes {
            out.push(format!("  note: {n}"));
        }
    }
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// The bracketed example with the brackets turned into color.
fn recolor(text: &str) -> String {
    text.replace('⟦', "\x1b[32m").replace('⟧', "\x1b[0m")
}

/// At most [`EXAMPLE_CHARS`] characters, saying how many were left out.
fn clip(text: &str) -> String {
    let total = text.chars().count();
    if total <= EXAMPLE_CHARS {
        return text.to_owned();
    }
    let head: String = text.chars().take(EXAMPLE_CHARS).collect();
    format!(
        "{head}… ({} more characters; `--json` has the whole row)",
        total - EXAMPLE_CHARS
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_uses_nearest_ranks() {
        let s = spread((1..=100).collect());
        assert_eq!((s.p50, s.p95), (50, 95));
        assert!((s.mean - 50.5).abs() < 1e-9);
        let s = spread(vec![7]);
        assert_eq!((s.p50, s.p95), (7, 7));
    }
}
