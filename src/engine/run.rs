//! Runs a [`Plan`] (CURATION.md): a *scan* pass over every source (read → adapt → validate →
//! content filters → exact dedup, MinHash bands and benchmark n-grams per row), the global
//! decisions over the scan's compact records ([`Ledger::decide`]), then *work* passes that
//! render, tokenize and mask only rows that can be selected, in selection order, until the
//! allocation (`take`, `mix`) is met; copies for `max_repeats` last. A build that decides
//! nothing across rows works each candidate in the scan instead ([`one_pass`]).
//!
//! Per-row work runs on the caller's rayon pool, batch by batch; everything that decides order
//! or counts runs on the calling thread in input order, and every decision is a function of the
//! rows and their positions, so the output is byte-identical at any thread count and whatever
//! the batch boundaries.

use crate::adapt::{to_sharegpt_record, Adapter, Repairs};
use crate::conversation::Conversation;
use crate::curate::filters::Dropped;
use crate::curate::ledger::{
    KeptWork, Ledger, RowNote, Scanned, Settled, SourceSelection, Wanted, Work,
};
use crate::curate::select::AllocError;
use crate::engine::curator::Curator;
use crate::engine::journal::{Journal, JournalError, PassKind, Positions, Recorder, RowEvent};
use crate::engine::partition::{PartError, PartWriter, Parts};
use crate::engine::row_path::{Outcome, RowProcessor, SpotChecks, Tokenized};
use crate::model::SampleId;
use crate::plan::Plan;
use crate::read::chunks::Chunk;
use crate::read::{read_files_with, FileSample, RawRow, ReadError, ReadOptions, Record};
use crate::reject::{Reject, Skip};
use crate::report::timings::{PoolStage, Timings};
use crate::report::SourceStats;
use crate::write::{shuffle_key, EncodedRow, SideOutput, Spill};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::mpsc::{channel, sync_channel};
use std::sync::Mutex;

/// Size of one job of the thread pool: it closes at this many bytes of input (or rows),
/// whichever comes first. A job runs its rows one after another, each stage over all of them
/// before the next: the longer the encoder runs uninterrupted, the less of its time goes to
/// refilling the caches the other stages took. Sized in bytes, so that a job of long agentic
/// rows takes about as long as one of short chats: small enough that every worker stays busy
/// (rayon cannot steal inside a running job) and a source's last jobs end together.
pub const JOB_BYTES: usize = 512 << 10;
pub const JOB_MAX_ROWS: usize = 1024;

/// Batches between the reader and the commit at once, per pool thread (at least
/// [`MIN_IN_FLIGHT`]): several, so that no worker waits for a slow batch to be committed; a
/// fixed number (of at most [`JOB_BYTES`] of input each), so that memory does not grow with
/// the input.
const IN_FLIGHT_PER_THREAD: usize = 8;
const MIN_IN_FLIGHT: usize = 16;

/// Batches in flight for a pool of `threads`: [`IN_FLIGHT_PER_THREAD`] per thread, or
/// `CHATSHARDS_JOBS_PER_THREAD` (at least 1) to measure the memory / speed trade-off.
fn in_flight(threads: usize) -> usize {
    static PER_THREAD: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let per_thread = *PER_THREAD.get_or_init(|| {
        std::env::var("CHATSHARDS_JOBS_PER_THREAD")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or(IN_FLIGHT_PER_THREAD, |n| n.max(1))
    });
    (per_thread * threads).max(MIN_IN_FLIGHT)
}

/// Bytes of a JSON lines range that one job reads (see [`Context::pass`]): a job's worth of
/// input.
const CHUNK_BYTES: u64 = JOB_BYTES as u64;

/// Whether reading is shared with the workers: JSON lines files are read in ranges by them,
/// and Parquet rows and JSON array elements are turned into JSON by them
/// (`CHATSHARDS_READ_RANGES=0`: all by one reader thread in order, as before; the same bytes
/// either way).
fn read_ranges() -> bool {
    static RANGES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *RANGES.get_or_init(|| {
        let value = std::env::var("CHATSHARDS_READ_RANGES");
        !matches!(value.as_deref().map(str::trim), Ok("0" | "false"))
    })
}

/// Work passes over one source before a build gives up on meeting its allocation: each pass
/// queues at least what the estimate says is missing, so this bound is never reached on real
/// data; it only keeps a pathological estimate from looping.
const MAX_WORK_ROUNDS: usize = 64;

/// Least time between two segments of a pass after its first (see [`Out::segment`]): a
/// segment syncs every output file (tens of milliseconds), so however small
/// `CHATSHARDS_CHECKPOINT_ROWS` is, checkpoints take a few percent of a build at most, and a
/// killed build redoes about this much work more.
const MIN_SEGMENT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Where a run writes its side outputs and rows.
pub struct Sinks<'a> {
    pub spill: &'a mut Spill,
    pub rejects: &'a mut dyn SideOutput,
    pub filtered: &'a mut dyn SideOutput,
    pub conversations: &'a mut dyn SideOutput,
}

/// Progress callbacks, so the pipeline never draws anything itself. All are called from the
/// coordinating thread.
pub trait Progress: Sync {
    /// A pass over source `source` (its index in the plan) begins.
    fn pass_started(&self, _source: usize, _pass: Pass) {}
    /// The scan committed a row of file `file` (index in the source's files) of this
    /// [`Record::weight`](crate::read::Record::weight) (a JSON line's length).
    fn row_scanned(&self, _file: usize, _weight: u64) {}
    /// The running pass committed `rows` rows so far (scan: rows read, `kept` the candidates;
    /// work: rows worked, `tokens` their tokens).
    fn rows_done(&self, _rows: u64, _kept: u64, _tokens: u64) {}
    /// A source is done: its allocation is settled.
    fn source_finished(&self, _name: &str, _stats: &SourceStats) {}
    /// The scan timed its sampled rows of a batch, and what their candidates' work costs
    /// (reported before the batch's last [`row_scanned`](Progress::row_scanned)).
    fn work_sampled(&self, _sample: WorkSample) {}
}

/// What the scan measured of its sampled rows in one batch (see [`work_sampled`]): the ETA's
/// measure of a work row's cost before any work pass runs. Timing it decides nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WorkSample {
    /// Sampled rows scanned, and the CPU nanoseconds the scan spent on them.
    pub scan_rows: u64,
    pub scan_ns: u64,
    /// Their candidates, worked as one batch through the work pass's own code (adapt,
    /// validate, render, encode, mask, spot checks, serialize), and the CPU nanoseconds that
    /// took.
    pub work_rows: u64,
    pub work_ns: u64,
}

/// The scan samples runs of this many consecutive rows of a file: worked as a batch, as the
/// work pass works its jobs, a sampled row costs what a work row costs. Smaller batches run
/// colder (their stages' code and tables out of cache): on a 16-core host, 300K rows, runs of
/// 16 overestimated the work by ~1.5x at 2 and 8 threads, runs of 256 were within −10…+16%
/// (docs/progress.md).
pub const WORK_SAMPLE_ROWS: u64 = 256;

/// One run of [`WORK_SAMPLE_ROWS`] in this many is timed through the work during the scan
/// (see [`WorkSample`]): one row in 128, about 1% more scan time, half a percent of a build.
pub const WORK_SAMPLE_EVERY: u64 = 128;

/// Whether row `row` of file `file` is one the scan times through the work: a hash of its run's
/// position, so the same rows whatever the threads or batches.
fn work_sampled(file: usize, row: u64) -> bool {
    let run = row / WORK_SAMPLE_ROWS;
    let key = (run ^ ((file as u64) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (key >> 32).is_multiple_of(WORK_SAMPLE_EVERY)
}

/// Nanoseconds of `d`, saturating.
fn duration_ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The sampled rows of a scan batch so far: their scan time, and copies of the candidates'
/// records for the work.
#[derive(Default)]
struct Sampled {
    scan_rows: u64,
    scan_ns: u64,
    candidates: Vec<RawRow>,
}

/// Which pass over a source [`Progress::pass_started`] announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The scan: every row of the source.
    Scan,
    /// A work pass over this many selected rows (copies included).
    Work { rows: u64 },
    /// The scan that works its candidates as it goes (a build that decides nothing across
    /// rows: [`one_pass`]); no work pass follows.
    Whole,
}

pub struct NoProgress;
impl Progress for NoProgress {}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Write(#[from] crate::write::WriteError),
    #[error("failed to write `{0}`")]
    SideOutput(String, #[source] std::io::Error),
    #[error("the encoder disagrees with the `tokenizers` crate on {row}: {detail}; rebuild with `tokenizer.backend: hf` and `tokenizer.segment_cache: false`, and report this row")]
    EncoderMismatch { row: String, detail: String },
    #[error("the native template renderer disagrees with minijinja on {row}: {detail}; rebuild with `template.engine: minijinja` and report this row")]
    RendererMismatch { row: String, detail: String },
    #[error("{row} changed while the build was reading it (it {detail} in the second pass); do not edit inputs during a build")]
    InputChanged { row: String, detail: String },
    #[error("internal error: the allocation of source `{0}` did not converge")]
    NoConvergence(String),
    #[error("{0}")]
    Curate(String),
    #[error("{0}")]
    Benchmark(crate::curate::decontaminate::BenchmarkError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Part(#[from] PartError),
    #[error(transparent)]
    Regenerate(#[from] crate::regenerate::RegenerateError),
}

/// What a run produced besides the spilled rows.
pub struct RunOutput {
    pub settled: Settled,
    /// `regenerate:` records by source index, and a closing line, when a source regenerates.
    pub regenerate: Option<(Vec<Option<crate::regenerate::Report>>, String)>,
}

/// Runs every source of the plan on `pool`. Call it from outside the pool: this thread
/// coordinates and commits while the pool works.
pub fn run(
    plan: &Plan,
    processor: &RowProcessor,
    sinks: &mut Sinks,
    progress: &dyn Progress,
    pool: &rayon::ThreadPool,
    timings: &Timings,
) -> Result<RunOutput, RunError> {
    let mut journal = Journal::disabled();
    run_journaled(
        plan,
        processor,
        sinks,
        progress,
        pool,
        timings,
        &mut journal,
        None,
    )
}

/// Part `part`'s scan (see [`crate::engine::partition`]): every source's share of rows through read,
/// adapt, validate and the per-row curation, each row's record to `writer` in read order.
/// `plan.read_options.sample` must hold the part's shares.
pub fn scan_part(
    plan: &Plan,
    processor: &RowProcessor,
    progress: &dyn Progress,
    pool: &rayon::ThreadPool,
    timings: &Timings,
    writer: &mut PartWriter,
) -> Result<(), RunError> {
    let curator = Curator::new(plan).map_err(RunError::Benchmark)?;
    let chunks: Vec<std::sync::OnceLock<Option<Vec<Chunk>>>> =
        plan.sources.iter().map(|_| Default::default()).collect();
    let ctx = Context {
        plan,
        processor,
        curator: &curator,
        timings,
        pool,
        progress,
        parts: None,
        regen: None,
        chunks: &chunks,
    };
    for index in 0..plan.sources.len() {
        progress.pass_started(index, Pass::Scan);
        let files = plan.sources[index].files.len();
        // Records (blank lines are none) and lines of each file's share.
        let mut counts = vec![(0u64, 0u64); files];
        type PartResult = (u32, u64, u64, bool, u64, ScanRow);
        let work = |batch: Vec<RawRow>| -> Vec<PartResult> {
            timings.time(PoolStage::Prepare, || {
                batch
                    .into_iter()
                    .map(|raw| {
                        let (file, row, shown) = (raw.file as u32, raw.row, raw.shown_row());
                        let blank = matches!(raw.record, Record::Blank);
                        let weight = raw.record.weight() as u64;
                        (file, row, shown, blank, weight, ctx.scan_row(index, raw))
                    })
                    .collect()
            })
        };
        let write_err = |e: std::io::Error| RunError::SideOutput("the part file".to_owned(), e);
        let mut read = 0u64;
        let mut commit = |rows: Vec<PartResult>| -> Result<(), RunError> {
            for (file, row, shown, blank, weight, scan) in rows {
                read += 1;
                progress.row_scanned(file as usize, weight);
                let count = &mut counts[file as usize];
                count.0 += u64::from(!blank);
                count.1 += 1;
                writer.row(file, row, shown, scan).map_err(write_err)?;
            }
            progress.rows_done(read, read, 0);
            Ok(())
        };
        ctx.pass(index, None, 0, &work, &mut commit)?;
        for (file, (mut records, mut lines)) in counts.into_iter().enumerate() {
            // Only a byte range numbers its rows from its start; other shares carry the
            // rows' own indices, which the merge must not shift.
            let ranged = plan.read_options.sample.as_ref().is_some_and(|s| {
                matches!(
                    s.files.get(&plan.sources[index].files[file]),
                    Some(FileSample::LineRange { .. })
                )
            });
            if !ranged {
                (records, lines) = (0, 0);
            }
            writer
                .file_end(index, file, records, lines)
                .map_err(write_err)?;
        }
    }
    Ok(())
}

/// [`run`], recording each pass in `journal` and replaying the passes it has recorded already
/// (a resumed build: `sinks` then stand where the last recorded pass left them, see
/// [`crate::engine::journal`]). With `parts` (a merge), the scans replay the parts' records instead of
/// reading the inputs; everything after them is the same.
#[allow(clippy::too_many_arguments)]
pub fn run_journaled(
    plan: &Plan,
    processor: &RowProcessor,
    sinks: &mut Sinks,
    progress: &dyn Progress,
    pool: &rayon::ThreadPool,
    timings: &Timings,
    journal: &mut Journal,
    parts: Option<Parts>,
) -> Result<RunOutput, RunError> {
    let curator = Curator::new(plan).map_err(RunError::Benchmark)?;
    let selection = plan
        .sources
        .iter()
        .map(|s| SourceSelection {
            name: s.name.clone(),
            filters: s.filters.names(),
            take: s.take,
            sample: s.sample,
            weight: s.weight,
        })
        .collect();
    let mut ledger = Ledger::new(
        plan.seed,
        plan.mix.clone(),
        selection,
        curator.dedup.is_some(),
        curator.bands(),
    );
    // A regenerated row costs generation requests: no slack is worked beyond the estimate.
    for (i, source) in plan.sources.iter().enumerate() {
        if source.regenerate.is_some() {
            ledger.lean(i);
        }
    }
    let parts = parts.map(Mutex::new);
    // Servers checked before any work (src/regenerate).
    let regen = crate::regenerate::Regenerator::start(
        plan.sources.iter().map(|s| s.regenerate.clone()).collect(),
        &plan.template.source,
        &plan.template.kwargs,
        plan.template.engine,
        processor.tokenizer.clone(),
        crate::regenerate::Limits {
            max_tokens: plan.max_tokens,
            min_supervised_tokens: plan.min_supervised_tokens,
        },
    )?;
    let chunks: Vec<std::sync::OnceLock<Option<Vec<Chunk>>>> =
        plan.sources.iter().map(|_| Default::default()).collect();
    let ctx = Context {
        plan,
        processor,
        curator: &curator,
        timings,
        pool,
        progress,
        parts: parts.as_ref(),
        regen: regen.as_ref(),
        chunks: &chunks,
    };
    let restored = journal.positions()?.unwrap_or_default();
    let mut out = Out {
        sinks,
        conversations_len: restored.conversations,
        sequence: restored.sequence,
        journal,
    };
    let whole = one_pass(plan, &curator, ctx.parts.is_some());
    for index in 0..plan.sources.len() {
        if whole {
            ctx.whole(index, &mut ledger, &mut out)?;
        } else {
            ctx.scan(index, &mut ledger, &mut out)?;
        }
    }
    if let Some(parts) = &parts {
        parts.lock().map_err(|_| poisoned())?.finish()?;
    }
    // Near-duplicate groups are joined band by band on the build's threads.
    pool.install(|| ledger.decide());
    if whole {
        // Every candidate is worked already: the work passes have nothing to do.
        for index in 0..plan.sources.len() {
            ledger.extend(index, ledger.remaining(index));
        }
    }
    // Written before the first work pass: already in `filtered.jsonl` when that pass is
    // replayed.
    if !out.journal.replaying() {
        for note in ledger.dropped_notes() {
            write_note(out.sinks.filtered, plan, &note, "filtered.jsonl")?;
        }
    }
    // Before anything is measured: every source gets what a first estimate of its share
    // needs, then the allocation asks for more where it must.
    let allocations = {
        let mut rounds = vec![0usize; plan.sources.len()];
        let first: Vec<usize> = (0..plan.sources.len())
            .map(|i| first_request(plan, &ledger, i))
            .collect();
        for (i, rows) in first.into_iter().enumerate() {
            let wanted = ledger.extend(i, rows);
            ctx.work(i, &wanted, &mut ledger, &mut out)?;
        }
        loop {
            match ledger.allocate() {
                Ok(allocations) => break allocations,
                Err(AllocError::NeedMore { source, rows }) => {
                    rounds[source] += 1;
                    if rounds[source] > MAX_WORK_ROUNDS || ledger.remaining(source) == 0 {
                        return Err(RunError::NoConvergence(plan.sources[source].name.clone()));
                    }
                    let rows = ledger.rows_for(source, rows);
                    let wanted = ledger.extend(source, rows);
                    ctx.work(source, &wanted, &mut ledger, &mut out)?;
                }
                Err(e) => return Err(RunError::Curate(e.to_string())),
            }
        }
    };
    for (i, wanted) in ledger.copies(&allocations).into_iter().enumerate() {
        if !wanted.is_empty() {
            ctx.work(i, &wanted, &mut ledger, &mut out)?;
        }
    }
    let settled = ledger.settle(&allocations);
    for note in &settled.rejects {
        write_note(out.sinks.rejects, plan, note, "rejects.jsonl")?;
    }
    for note in &settled.filtered {
        write_note(out.sinks.filtered, plan, note, "filtered.jsonl")?;
    }
    for (source, stats) in plan.sources.iter().zip(&settled.stats) {
        progress.source_finished(&source.name, stats);
    }
    let regenerate = regen.map(|r| (r.reports(), r.summary()));
    Ok(RunOutput {
        settled,
        regenerate,
    })
}

/// Whether a build scans and works its rows in one pass ([`Context::whole`]): where nothing
/// is decided across rows — no exact or near-duplicate removal, no decontamination, no `take`
/// or `mix` — every candidate is selected, so it can be worked as soon as it is scanned. Not
/// for a merge (the parts scanned), a regenerated source (its requests are counted per work
/// pass) or a pre-tokenized one (nothing to parse twice); `CHATSHARDS_ONE_PASS=0` keeps the
/// two passes (the same bytes; a build resumes only with the setting it started with).
fn one_pass(plan: &Plan, curator: &Curator, merge: bool) -> bool {
    let off = matches!(
        std::env::var("CHATSHARDS_ONE_PASS")
            .as_deref()
            .map(str::trim),
        Ok("0" | "false")
    );
    !off && !merge
        && !curator.decides_across_rows()
        && plan.mix.is_none()
        && plan.sources.iter().all(|s| {
            s.take.is_none()
                && s.regenerate.is_none()
                && !matches!(s.adapter, Adapter::Speculator(_))
        })
}

fn poisoned() -> RunError {
    RunError::Curate("internal error: a thread failed while holding the parts".to_owned())
}

/// How many rows of a source the first work pass takes: all of them without a selection,
/// else an estimate of the selected share (the allocation asks for more if it falls short).
fn first_request(plan: &Plan, ledger: &Ledger, source: usize) -> usize {
    let s = &plan.sources[source];
    let all = ledger.remaining(source);
    match (&plan.mix, s.take) {
        (None, None) => all,
        (Some(_), None) if s.weight.is_none() => all,
        (_, Some(take)) => ledger
            .rows_for(source, usize::try_from(take).unwrap_or(usize::MAX))
            .min(all),
        (Some(mix), None) => {
            let weights: f64 = plan.sources.iter().filter_map(|s| s.weight).sum();
            let share = s.weight.unwrap_or(0.0) / weights.max(f64::MIN_POSITIVE);
            let fixed: u64 = plan.sources.iter().filter_map(|s| s.take).sum();
            let rest = match mix.target {
                crate::curate::select::MixTarget::Rows => mix.total.saturating_sub(fixed),
                _ => mix.total,
            };
            ledger
                .rows_for_amount(source, (rest as f64 * share).ceil() as u64)
                .min(all)
        }
    }
}

/// What every pass needs (shared, read-only).
#[derive(Clone, Copy)]
struct Context<'a> {
    plan: &'a Plan,
    processor: &'a RowProcessor,
    curator: &'a Curator<'a>,
    timings: &'a Timings,
    pool: &'a rayon::ThreadPool,
    progress: &'a dyn Progress,
    /// A merge: the scans replay these parts' records instead of reading the inputs.
    parts: Option<&'a Mutex<Parts>>,
    /// On-policy regeneration, when a source has `regenerate:`.
    regen: Option<&'a crate::regenerate::Regenerator>,
    /// Each source's JSON lines ranges, once counted (see [`Context::chunks`]).
    chunks: &'a [std::sync::OnceLock<Option<Vec<Chunk>>>],
}

/// The writers of the passes, their running positions and the journal.
struct Out<'a, 's> {
    sinks: &'a mut Sinks<'s>,
    conversations_len: u64,
    /// Arrival sequence, the sort key when not shuffling.
    sequence: u64,
    journal: &'a mut Journal,
}

impl Out<'_, '_> {
    /// Ends a pass: the side outputs are synced and the pass's record closed with where they
    /// stand (nothing to do when the journal is off).
    fn finish_pass(&mut self, recorder: Recorder) -> Result<(), RunError> {
        if !recorder.active() {
            return Ok(());
        }
        let positions = self.sync()?;
        Ok(recorder.finish(positions)?)
    }

    /// Records a segment of the running pass once `rows` (its input rows committed) is a
    /// whole number of segments past the last one and, but for a pass's first segment, at
    /// least [`MIN_SEGMENT_INTERVAL`] after it: a segment syncs every output, so a small
    /// `CHATSHARDS_CHECKPOINT_ROWS` must not make the build wait on the disk row after row.
    fn segment(
        &mut self,
        recorder: &mut Recorder,
        rows: u64,
        last: &mut LastSegment,
    ) -> Result<(), RunError> {
        let now = std::time::Instant::now();
        if !recorder.active() || !last.due(rows, self.journal.segment_rows(), now) {
            return Ok(());
        }
        *last = LastSegment {
            rows,
            at: Some(now),
        };
        let positions = self.sync()?;
        Ok(recorder.segment(rows, positions)?)
    }

    /// Syncs every side output; says where they stand.
    fn sync(&mut self) -> Result<Positions, RunError> {
        let sync = |name: &str, w: &mut dyn SideOutput| {
            w.sync_point()
                .map_err(|e| RunError::SideOutput(name.to_owned(), e))
        };
        Ok(Positions {
            rejects: sync("rejects.jsonl", self.sinks.rejects)?,
            filtered: sync("filtered.jsonl", self.sinks.filtered)?,
            conversations: sync("conversations.jsonl", self.sinks.conversations)?,
            sequence: self.sequence,
            spill: self.sinks.spill.sync_point()?,
        })
    }
}

/// Where a pass recorded its last segment: its input rows then, and when (`None`: no segment
/// of this run of the pass yet).
struct LastSegment {
    rows: u64,
    at: Option<std::time::Instant>,
}

impl LastSegment {
    fn new(skip: u64) -> LastSegment {
        LastSegment {
            rows: skip,
            at: None,
        }
    }

    /// Whether a segment is due at `rows`: a whole number of `every` rows past the last one,
    /// and the pass's first or [`MIN_SEGMENT_INTERVAL`] after the last.
    fn due(&self, rows: u64, every: u64, now: std::time::Instant) -> bool {
        rows > self.rows
            && (rows - self.rows).is_multiple_of(every)
            && self
                .at
                .is_none_or(|at| now.duration_since(at) >= MIN_SEGMENT_INTERVAL)
    }
}

/// What the ledger made of a scanned row.
enum ScanOutcome {
    /// Rejected or filtered.
    Dropped,
    /// A candidate, or (`Some`) an exact duplicate of the candidate with this global index.
    Candidate(Option<u32>),
}

/// What the scan found for one row (also a part's record of it, see [`crate::engine::partition`]).
#[derive(serde::Serialize, serde::Deserialize)]
pub enum ScanRow {
    Rejected(Reject),
    /// `text`: what the filter judged ([`Dropped::text`]).
    Filtered {
        filter: String,
        detail: String,
        text: Option<String>,
    },
    Candidate(Scanned),
}

/// One input row after the work pass's parallel stages.
struct WorkRow {
    file: u32,
    row: u64,
    result: Result<WorkDone, String>,
}

struct WorkDone {
    outcome: Outcome<Vec<KeptCopy>>,
    /// The token filter that dropped every row of a kept conversation.
    token_filtered: Option<Dropped>,
    /// Its regeneration requests (`regenerate:`).
    regen: crate::report::RegenTally,
}

/// One copy of a kept conversation, serialized on the worker that made it, so that the
/// in-order commit only appends bytes.
struct KeptCopy {
    copy: u32,
    /// Its `conversations.jsonl` line.
    line: String,
    /// Its rows, encoded for the spill (the key is set at the commit when not shuffling).
    rows: Vec<EncodedRow>,
    /// What the ledger records of it, but for where its line lands.
    work: KeptWork,
}

impl Context<'_> {
    fn scan(&self, index: usize, ledger: &mut Ledger, out: &mut Out) -> Result<(), RunError> {
        let (started, mut read, mut candidates) =
            self.start_scan(PassKind::Scan, index, ledger, out)?;
        let Some((mut recorder, skip)) = started else {
            // A merge resumed after this pass: its rows are in the journal, the parts read on
            // past them.
            if let Some(parts) = self.parts {
                let files = self.plan.sources[index].files.len();
                let mut parts = parts.lock().map_err(|_| poisoned())?;
                parts.replay_source(index, files, &mut |_| Ok(()))?;
            }
            return Ok(());
        };
        let mut last_segment = LastSegment::new(skip);
        // (file, row, shown row, weight for progress, what the scan found, its work sample)
        type ScanResult = (u32, u64, u64, u64, ScanRow, Option<WorkSample>);
        let sampling = self.samples_work(index);
        let work = |batch: Vec<RawRow>| -> Vec<ScanResult> {
            self.timings.time(PoolStage::Prepare, || {
                let mut sampled = Sampled::default();
                let mut rows: Vec<ScanResult> = batch
                    .into_iter()
                    .map(|raw| {
                        let (file, row, shown) = (raw.file as u32, raw.row, raw.shown_row());
                        let weight = raw.record.weight() as u64;
                        let scanned = if sampling && work_sampled(raw.file, raw.row) {
                            self.scan_row_sampled(index, raw, &mut sampled)
                        } else {
                            self.scan_row(index, raw)
                        };
                        (file, row, shown, weight, scanned, None)
                    })
                    .collect();
                // Reported with the batch's last row: the commit sees it in input order.
                if let Some(last) = rows.last_mut() {
                    last.5 = self.work_sample(index, sampled);
                }
                rows
            })
        };
        let mut commit = |rows: Vec<ScanResult>| -> Result<(), RunError> {
            for (file, row, shown, weight, scanned, sample) in rows {
                // Before the row: a segment ends between two rows, never inside one.
                out.segment(&mut recorder, read, &mut last_segment)?;
                read += 1;
                if let Some(sample) = sample {
                    self.progress.work_sampled(sample);
                }
                self.progress.row_scanned(file as usize, weight);
                let at = (file, row, shown);
                if let ScanOutcome::Candidate(None) =
                    self.commit_scanned(index, ledger, out, &mut recorder, at, scanned)?
                {
                    candidates += 1;
                }
            }
            self.progress.rows_done(read, candidates, 0);
            out.segment(&mut recorder, read, &mut last_segment)
        };
        match self.parts {
            None => self.pass(index, None, skip, &work, &mut commit)?,
            Some(parts) => {
                // The rows a recorded segment did are replayed by the journal, not again.
                let mut skipped = 0u64;
                let files = self.plan.sources[index].files.len();
                parts.lock().map_err(|_| poisoned())?.replay_source(
                    index,
                    files,
                    &mut |(file, row, shown, scan)| {
                        if skipped < skip {
                            skipped += 1;
                            return Ok(());
                        }
                        commit(vec![(file, row, shown, 0, scan, None)])
                    },
                )?;
            }
        }
        out.finish_pass(recorder)
    }

    /// The scan and the work in one pass over a source, for a build that decides nothing
    /// across rows (see [`one_pass`]): every candidate is worked as soon as it is scanned, from
    /// the conversation the scan prepared, so no row is read or parsed twice. Its record
    /// holds each row's scan event, a candidate's followed by its work event: replayed, the
    /// ledger sees what the scan and a first work pass over every candidate would have shown
    /// it, in the same order, and the outputs are the same bytes.
    fn whole(&self, index: usize, ledger: &mut Ledger, out: &mut Out) -> Result<(), RunError> {
        let (started, mut read, mut candidates) =
            self.start_scan(PassKind::Whole, index, ledger, out)?;
        let mut tokens = 0u64;
        let Some((mut recorder, skip)) = started else {
            return Ok(());
        };
        let mut last_segment = LastSegment::new(skip);
        let work = |batch: Vec<RawRow>| self.whole_batch(index, batch);
        let mut commit = |rows: Vec<WholeRow>| -> Result<(), RunError> {
            for (file, row, shown, weight, scanned, worked) in rows {
                out.segment(&mut recorder, read, &mut last_segment)?;
                read += 1;
                self.progress.row_scanned(file as usize, weight);
                let at = (file, row, shown);
                let outcome =
                    self.commit_scanned(index, ledger, out, &mut recorder, at, scanned)?;
                match (outcome, worked) {
                    (ScanOutcome::Candidate(None), Some(worked)) => {
                        candidates += 1;
                        tokens +=
                            self.commit_worked(index, ledger, out, &mut recorder, worked, &[0])?;
                    }
                    (ScanOutcome::Dropped, None) => {}
                    _ => {
                        return Err(RunError::Curate(format!(
                            "internal error: row {row} of file {file} was a candidate to the scan \
                             or the work, not to both"
                        )))
                    }
                }
            }
            self.progress.rows_done(read, candidates, tokens);
            out.segment(&mut recorder, read, &mut last_segment)
        };
        self.pass(index, None, skip, &work, &mut commit)?;
        out.finish_pass(recorder)
    }

    /// The whole pass's parallel part for a batch: the scan of every row, then the work of its
    /// candidates as one batch.
    fn whole_batch(&self, index: usize, batch: Vec<RawRow>) -> Vec<WholeRow> {
        let mut candidates = Vec::new();
        let mut rows: Vec<WholeRow> = self.timings.time(PoolStage::Prepare, || {
            batch
                .into_iter()
                .map(|raw| {
                    let (file, row, shown) = (raw.file as u32, raw.row, raw.shown_row());
                    let weight = raw.record.weight() as u64;
                    let (scanned, prepared) = self.scan_prepared(index, raw);
                    if let Some((conversation, repairs)) = prepared {
                        candidates.push((file, row, Ok((conversation, repairs, Vec::new(), None))));
                    }
                    (file, row, shown, weight, scanned, None)
                })
                .collect()
        });
        let mut worked = self
            .work_prepared(index, None, candidates, self.timings)
            .into_iter();
        for row in &mut rows {
            if let ScanRow::Candidate(_) = row.4 {
                row.5 = worked.next();
            }
        }
        rows
    }

    /// Starts a scan or whole pass over source `index`: what its record holds goes to the
    /// ledger (shown as rows done at once). Returns its recorder and the input rows done when
    /// it runs on (see [`Journal::start`]), and the rows read and candidates so far.
    fn start_scan(
        &self,
        kind: PassKind,
        index: usize,
        ledger: &mut Ledger,
        out: &mut Out,
    ) -> Result<(Started, u64, u64), RunError> {
        let pass = match kind {
            PassKind::Whole => Pass::Whole,
            _ => Pass::Scan,
        };
        self.progress.pass_started(index, pass);
        let (mut read, mut candidates) = (0u64, 0u64);
        let started = out.journal.start(kind, index, &mut |event| {
            if let (PassKind::Whole, RowEvent::Worked { .. }) = (kind, &event) {
                return apply_work(ledger, index, event);
            }
            read += 1;
            if let ScanOutcome::Candidate(None) = self.apply_scan(index, ledger, event)? {
                candidates += 1;
            }
            Ok::<_, RunError>(())
        })?;
        self.progress.rows_done(read, candidates, 0);
        Ok((started, read, candidates))
    }

    /// Hands the scan's record of a row to the ledger: the one place a scan pass changes it,
    /// whether the pass runs or is replayed from the journal.
    fn apply_scan(
        &self,
        index: usize,
        ledger: &mut Ledger,
        event: RowEvent,
    ) -> Result<ScanOutcome, RunError> {
        ledger.read(index);
        Ok(match event {
            RowEvent::Rejected(reason) => {
                ledger.rejected(index, reason);
                ScanOutcome::Dropped
            }
            RowEvent::Filtered(filter) => {
                ledger.filtered(index, &filter);
                ScanOutcome::Dropped
            }
            RowEvent::Candidate {
                file,
                row,
                shown,
                scanned,
            } => {
                let name = &self.plan.sources[index].selection_names[file as usize];
                let at = (file, row, shown);
                ScanOutcome::Candidate(ledger.candidate(index, at, name, scanned))
            }
            RowEvent::Worked { .. } => {
                return Err(RunError::Curate(
                    "the build journal holds work in a scan pass; run with `--fresh`".to_owned(),
                ))
            }
        })
    }

    /// Commits one scanned row: its line in `rejects.jsonl` or `filtered.jsonl` first (while
    /// its message is at hand), then its record, which the ledger takes over.
    fn commit_scanned(
        &self,
        index: usize,
        ledger: &mut Ledger,
        out: &mut Out,
        recorder: &mut Recorder,
        (file, row, shown): (u32, u64, u64),
        scanned: ScanRow,
    ) -> Result<ScanOutcome, RunError> {
        let note = |reason: String, message: String, extra| RowNote {
            source: index,
            file,
            row,
            shown,
            reason,
            message,
            extra,
        };
        let event = match scanned {
            ScanRow::Rejected(reject) => {
                let code = reject.reason.code().to_owned();
                let n = note(code, reject.message, Vec::new());
                write_note(out.sinks.rejects, self.plan, &n, "rejects.jsonl")?;
                RowEvent::Rejected(reject.reason)
            }
            ScanRow::Filtered {
                filter,
                detail,
                text,
            } => {
                let extra = text.map(|t| ("text", t)).into_iter().collect();
                let n = note(filter.clone(), detail, extra);
                write_note(out.sinks.filtered, self.plan, &n, "filtered.jsonl")?;
                RowEvent::Filtered(filter)
            }
            ScanRow::Candidate(scanned) => RowEvent::Candidate {
                file,
                row,
                shown,
                scanned,
            },
        };
        recorder.record(&event)?;
        let outcome = self.apply_scan(index, ledger, event)?;
        if let ScanOutcome::Candidate(Some(of)) = outcome {
            let (os, of_file, of_row) = ledger.position_of(of);
            let id = self.sample_id(os, of_file, of_row).to_string();
            let extra = vec![("duplicate_of", id)];
            let n = note("deduplicated".to_owned(), String::new(), extra);
            write_note(out.sinks.filtered, self.plan, &n, "filtered.jsonl")?;
        }
        Ok(outcome)
    }

    /// Adapts, validates and curates one row (no rendering).
    fn scan_row(&self, index: usize, raw: RawRow) -> ScanRow {
        let weight = u32::try_from(raw.record.weight()).unwrap_or(u32::MAX);
        if let Adapter::Speculator(a) = &self.plan.sources[index].adapter {
            return match a.read(raw.record, self.processor.tokenizer.bytes.vocab_size()) {
                Ok(row) => {
                    ScanRow::Candidate(self.curator.scan_tokens(&row.ids, &row.mask, weight))
                }
                Err(skip) => skip_row(skip),
            };
        }
        self.scan_prepared(index, raw).0
    }

    /// [`scan_row`](Self::scan_row) of a conversation (not a pre-tokenized row), and a
    /// candidate's conversation and repairs for the work.
    fn scan_prepared(
        &self,
        index: usize,
        raw: RawRow,
    ) -> (ScanRow, Option<(Conversation, Repairs)>) {
        let weight = u32::try_from(raw.record.weight()).unwrap_or(u32::MAX);
        let (conversation, repairs) = match self.prepare(index, raw) {
            Ok(prepared) => prepared,
            Err(skip) => return (skip_row(skip), None),
        };
        match self.curator.scan(index, &conversation, weight) {
            Ok(scanned) => (ScanRow::Candidate(scanned), Some((conversation, repairs))),
            Err(dropped) => {
                let filtered = ScanRow::Filtered {
                    filter: dropped.filter,
                    detail: dropped.detail,
                    text: dropped.text,
                };
                (filtered, None)
            }
        }
    }

    /// Whether the scan of source `index` times sampled rows through the work: not for
    /// pre-tokenized rows (no work to speak of) nor regenerated ones (a server's time).
    fn samples_work(&self, index: usize) -> bool {
        !matches!(self.plan.sources[index].adapter, Adapter::Speculator(_))
            && self.regen.is_none_or(|r| !r.applies(index))
    }

    /// [`scan_row`](Self::scan_row), timed into `sampled`, which keeps a copy of the record of
    /// a candidate for [`work_sample`](Self::work_sample).
    fn scan_row_sampled(&self, index: usize, raw: RawRow, sampled: &mut Sampled) -> ScanRow {
        let copy = match &raw.record {
            Record::Line(line) => Some(Record::Line(line.clone())),
            Record::Parsed(value) => Some(Record::Parsed(value.clone())),
            _ => None,
        }
        .map(|record| RawRow { record, ..raw });
        let cpu = crate::report::timings::thread_cpu;
        let Some(start) = cpu() else {
            return self.scan_row(index, raw);
        };
        let scanned = self.scan_row(index, raw);
        if let Some(end) = cpu() {
            sampled.scan_rows += 1;
            sampled.scan_ns += duration_ns(end.saturating_sub(start));
            if let (ScanRow::Candidate(_), Some(copy)) = (&scanned, copy) {
                sampled.candidates.push(copy);
            }
        }
        scanned
    }

    /// Works the sampled candidates of a scan batch as one batch of the work pass would be
    /// ([`work_batch`](Self::work_batch), on copies: what it finds is thrown away), timed.
    fn work_sample(&self, index: usize, sampled: Sampled) -> Option<WorkSample> {
        if sampled.scan_rows == 0 {
            return None;
        }
        let wanted: Vec<Wanted> = sampled
            .candidates
            .iter()
            .map(|raw| Wanted {
                file: raw.file as u32,
                row: raw.row,
                copy: 0,
            })
            .collect();
        let work_rows = wanted.len() as u64;
        let cpu = crate::report::timings::thread_cpu;
        let start = cpu()?;
        if !sampled.candidates.is_empty() {
            // Its own timings: the build's stage times count the build's work only.
            let done = self.work_batch(index, &wanted, sampled.candidates, &Timings::default());
            drop(done);
        }
        let work_ns = duration_ns(cpu()?.saturating_sub(start));
        Some(WorkSample {
            scan_rows: sampled.scan_rows,
            scan_ns: sampled.scan_ns,
            work_rows,
            work_ns,
        })
    }

    /// [`prepare`](Self::prepare) for a work pass: a pre-tokenized source's row (`format:
    /// speculator`) is read and checked into its one row instead, beside an empty
    /// conversation, and goes the way of a regenerated one (rows not rendered here).
    fn prepare_work(&self, index: usize, raw: RawRow) -> Result<PreparedRow, Skip> {
        let Adapter::Speculator(a) = &self.plan.sources[index].adapter else {
            let (conversation, repairs) = self.prepare(index, raw)?;
            return Ok((conversation, repairs, Vec::new(), None));
        };
        let row = a.read(raw.record, self.processor.tokenizer.bytes.vocab_size())?;
        let group = row.group;
        let row = Tokenized {
            segment: 0,
            text: String::new(),
            ids: row.ids,
            mask: row.mask,
            truncated: false,
            boundary_merged: false,
            origin: crate::tokenize::Origin::Reference,
        };
        Ok((Conversation::default(), Repairs::new(), vec![row], group))
    }

    fn prepare(&self, index: usize, raw: RawRow) -> Result<(Conversation, Repairs), Skip> {
        let mut repairs = Repairs::new();
        let mut conversation = self.plan.sources[index]
            .adapter
            .prepare_record(raw.record, &mut repairs)?;
        // Before anything reads the text (validation, dedup, the written conversation).
        conversation.join_text_parts(self.processor.renderer.text_part_separator());
        let conversation = self
            .processor
            .validator
            .validate(conversation, &mut repairs)?;
        Ok((conversation, repairs))
    }

    /// A work pass over the `wanted` rows of a source (sorted by position): render, tokenize,
    /// mask, token filters; kept rows go to the spill and `conversations.jsonl`.
    fn work(
        &self,
        index: usize,
        wanted: &[Wanted],
        ledger: &mut Ledger,
        out: &mut Out,
    ) -> Result<(), RunError> {
        if wanted.is_empty() {
            return Ok(());
        }
        let queued = wanted.len() as u64;
        self.progress
            .pass_started(index, Pass::Work { rows: queued });
        let started = out.journal.start(PassKind::Work, index, &mut |event| {
            apply_work(ledger, index, event)
        })?;
        let Some((mut recorder, skip)) = started else {
            self.progress.rows_done(queued, queued, 0);
            return Ok(());
        };
        // The rows the recorded segments did are not read again: the pass goes on after them.
        let wanted = &wanted[distinct_prefix(wanted, skip)..];
        if let Some(regen) = self.regen.filter(|r| r.applies(index)) {
            regen.expect(wanted.len());
        }
        let (mut rows_in, mut last_segment) = (skip, LastSegment::new(skip));
        let (mut done, mut tokens) = (queued - wanted.len() as u64, 0u64);
        let work = |batch: Vec<RawRow>| self.work_batch(index, wanted, batch, self.timings);
        let mut commit = |rows: Vec<WorkRow>| -> Result<(), RunError> {
            for r in rows {
                out.segment(&mut recorder, rows_in, &mut last_segment)?;
                rows_in += 1;
                let copies = copies_of(wanted, r.file, r.row);
                done += copies.len() as u64;
                tokens += self.commit_worked(index, ledger, out, &mut recorder, r, &copies)?;
            }
            self.progress.rows_done(done, done, tokens);
            out.segment(&mut recorder, rows_in, &mut last_segment)
        };
        self.pass(index, Some(wanted), 0, &work, &mut commit)?;
        out.finish_pass(recorder)
    }

    /// Commits one worked row (the copies of it that were asked for): a kept one's rows to
    /// the spill and its lines to `conversations.jsonl`, and its record, which the ledger takes
    /// over. Returns the tokens kept.
    fn commit_worked(
        &self,
        index: usize,
        ledger: &mut Ledger,
        out: &mut Out,
        recorder: &mut Recorder,
        r: WorkRow,
        copies: &[u32],
    ) -> Result<u64, RunError> {
        let source = &self.plan.sources[index];
        let at = || format!("`{}` row {}", source.display_files[r.file as usize], r.row);
        let done_row = r
            .result
            .map_err(|detail| RunError::InputChanged { row: at(), detail })?;
        debug_assert!(!copies.is_empty());
        let work = match done_row.outcome {
            Outcome::EncoderMismatch(detail) => {
                return Err(RunError::EncoderMismatch { row: at(), detail })
            }
            Outcome::RendererMismatch(detail) => {
                return Err(RunError::RendererMismatch { row: at(), detail })
            }
            Outcome::Rejected(reject) => Work::Rejected(reject),
            Outcome::Filtered(reason) => Work::Filtered {
                filter: reason.code().to_owned(),
                detail: String::new(),
            },
            Outcome::Kept(_) if done_row.token_filtered.is_some() => {
                match done_row.token_filtered {
                    Some(dropped) => Work::Filtered {
                        filter: dropped.filter,
                        detail: dropped.detail,
                    },
                    None => return Ok(0),
                }
            }
            Outcome::Kept(kept) => {
                let mut tokens = 0;
                for copy in kept {
                    let number = copy.copy;
                    let mut kept = self.keep(copy, out)?;
                    tokens += kept.tokens;
                    kept.regen = (!done_row.regen.is_zero()).then(|| Box::new(done_row.regen));
                    let work = Work::Kept(kept);
                    record_work(recorder, ledger, index, (r.file, r.row, number), work)?;
                }
                return Ok(tokens);
            }
        };
        // A row the scan kept is never rejected or filtered as a copy: copies are only made of
        // kept rows, and the work is deterministic.
        record_work(recorder, ledger, index, (r.file, r.row, 0), work)?;
        Ok(0)
    }

    /// The work pass's parallel part for a batch.
    /// (`timings`: the build's, or a sample's own.)
    fn work_batch(
        &self,
        index: usize,
        wanted: &[Wanted],
        batch: Vec<RawRow>,
        timings: &Timings,
    ) -> Vec<WorkRow> {
        type Prepared = Result<PreparedRow, String>;
        let prepared: Vec<(u32, u64, Prepared)> = timings.time(PoolStage::Prepare, || {
            batch
                .into_iter()
                .map(|raw| {
                    let (file, row) = (raw.file as u32, raw.row);
                    let prepared = self.prepare_work(index, raw).map_err(|skip| match skip {
                        Skip::Rejected(r) => format!("was rejected ({})", r.reason.code()),
                        Skip::Filtered(f) => format!("was filtered ({})", f.code()),
                    });
                    (file, row, prepared)
                })
                .collect()
        });
        self.work_prepared(index, Some(wanted), prepared, timings)
    }

    /// [`work_batch`](Self::work_batch) after its rows are prepared (`wanted`: the copies
    /// asked for; `None`, the row itself).
    fn work_prepared(
        &self,
        index: usize,
        wanted: Option<&[Wanted]>,
        prepared: Vec<(u32, u64, Result<PreparedRow, String>)>,
        timings: &Timings,
    ) -> Vec<WorkRow> {
        let mut rows = Vec::with_capacity(prepared.len());
        let mut conversations = Vec::with_capacity(prepared.len());
        let mut groups = Vec::with_capacity(prepared.len());
        for (file, row, prepared) in prepared {
            match prepared {
                Ok((conversation, repairs, tokens, group)) => {
                    let id = self.sample_id(index, file, row);
                    let checks = self.processor.spot_checks(&id.to_string());
                    groups.push(group);
                    conversations.push((conversation, repairs, checks, tokens));
                    rows.push((file, row, Ok(conversations.len() - 1)));
                }
                Err(detail) => rows.push((file, row, Err(detail))),
            }
        }
        // --- regenerate hook: a regenerated source's rows are the server's ids, and its
        // conversations (for `conversations.jsonl`) carry the regenerated turns.
        let regen = self.regen.filter(|r| r.applies(index));
        let mut tallies = vec![crate::report::RegenTally::default(); conversations.len()];
        let (outcomes, checked) = if let Some(regen) = regen {
            let batch: Vec<&Conversation> = conversations.iter().map(|(c, ..)| c).collect();
            let done = timings.time(PoolStage::Render, || regen.process_batch(index, &batch));
            let mut outcomes = Vec::with_capacity(done.len());
            let each = done
                .into_iter()
                .zip(conversations.iter_mut())
                .zip(&mut tallies);
            for ((d, (conversation, ..)), tally) in each {
                if let Some(regenerated) = d.conversation {
                    *conversation = regenerated;
                }
                *tally = d.tally;
                outcomes.push(d.outcome);
            }
            (outcomes, vec![SpotChecks::default(); conversations.len()])
        } else if matches!(self.plan.sources[index].adapter, Adapter::Speculator(_)) {
            // Pre-tokenized rows: nothing to render, encode or spot-check; the length rules.
            let outcomes = conversations
                .iter_mut()
                .map(|(.., tokens)| self.processor.pretokenized(std::mem::take(tokens)))
                .collect();
            (outcomes, vec![SpotChecks::default(); conversations.len()])
        } else {
            let mut batch: Vec<(&Conversation, SpotChecks)> = conversations
                .iter()
                .map(|(c, _, checks, _)| (c, *checks))
                .collect();
            let outcomes = self.processor.process_batch(&mut batch, timings);
            (
                outcomes,
                batch.into_iter().map(|(_, checks)| checks).collect(),
            )
        };
        // --- end of the regenerate hook
        let mut parts: Vec<_> = outcomes
            .into_iter()
            .zip(checked)
            .zip(conversations)
            .zip(tallies)
            .zip(groups)
            .map(
                |((((outcome, checked), (conversation, repairs, ..)), regen), group)| {
                    let (outcome, token_filtered) = match outcome {
                        Outcome::Kept(rows) => match self.curator.token_filters(index, rows) {
                            Ok(rows) => (Outcome::Kept(rows), None),
                            Err(dropped) => (Outcome::Kept(Vec::new()), Some(dropped)),
                        },
                        other => (other, None),
                    };
                    (
                        outcome,
                        token_filtered,
                        conversation,
                        repairs,
                        checked,
                        regen,
                        group,
                    )
                },
            )
            .collect::<Vec<_>>()
            .into_iter()
            .zip(
                rows.iter()
                    .filter_map(|(file, row, at)| at.is_ok().then_some((*file, *row))),
            )
            .map(
                |(
                    (outcome, token_filtered, conversation, repairs, checked, regen, group),
                    (file, row),
                )| {
                    let outcome = match outcome {
                        Outcome::Kept(rows) if token_filtered.is_none() => {
                            let copies = wanted.map_or(vec![0], |w| copies_of(w, file, row));
                            Outcome::Kept(self.serialize(
                                index,
                                (file, row),
                                &copies,
                                &conversation,
                                &repairs,
                                checked,
                                rows,
                                group,
                                timings,
                            ))
                        }
                        Outcome::Kept(_) => Outcome::Kept(Vec::new()),
                        Outcome::Rejected(r) => Outcome::Rejected(r),
                        Outcome::Filtered(f) => Outcome::Filtered(f),
                        Outcome::EncoderMismatch(d) => Outcome::EncoderMismatch(d),
                        Outcome::RendererMismatch(d) => Outcome::RendererMismatch(d),
                    };
                    Some(WorkDone {
                        outcome,
                        token_filtered,
                        regen,
                    })
                },
            )
            .collect();
        rows.into_iter()
            .map(|(file, row, at)| WorkRow {
                file,
                row,
                result: at.and_then(|i| {
                    parts[i]
                        .take()
                        .ok_or_else(|| "was processed twice".to_owned())
                }),
            })
            .collect()
    }

    /// Serializes each asked copy of a kept conversation (on the worker): its line for
    /// `conversations.jsonl` and its rows for the spill.
    #[allow(clippy::too_many_arguments)]
    fn serialize(
        &self,
        index: usize,
        (file, row): (u32, u64),
        copies: &[u32],
        conversation: &Conversation,
        repairs: &Repairs,
        checked: SpotChecks,
        rows: Vec<Tokenized>,
        group: Option<String>,
        timings: &Timings,
    ) -> Vec<KeptCopy> {
        let source = &self.plan.sources[index];
        let id = self.sample_id(index, file, row);
        let (turns, tool_calls) =
            crate::report::stats::DatasetStats::conversation_counts(conversation);
        let mut kept = KeptWork {
            turns: u32::try_from(turns).unwrap_or(u32::MAX),
            tool_calls: u32::try_from(tool_calls).unwrap_or(u32::MAX),
            encoder_checked: checked.encoder,
            renderer_checked: checked.renderer,
            group,
            ..Default::default()
        };
        let mut seen = Vec::new();
        for r in repairs {
            if !seen.contains(r) {
                seen.push(*r);
            }
        }
        kept.repairs = seen.into_boxed_slice();
        for r in &rows {
            kept.rows += 1;
            kept.tokens += r.ids.len() as u64;
            kept.supervised_tokens += r.supervised() as u64;
            kept.truncated_rows += u32::from(r.truncated);
            kept.boundary_merged_rows += u32::from(r.boundary_merged);
        }
        copies
            .iter()
            .map(|&copy| {
                timings.time(PoolStage::Serialize, || {
                    // A pre-tokenized row has no conversation to write.
                    let line = match source.adapter {
                        Adapter::Speculator(_) => String::new(),
                        _ => {
                            let id = id.with_copy(copy).to_string();
                            to_sharegpt_record(conversation, &id, &source.name).json_line()
                        }
                    };
                    let rows = rows
                        .iter()
                        .map(|r| {
                            let sample_id = id
                                .with_segment(r.segment as u64)
                                .with_copy(copy)
                                .to_string();
                            // Not shuffling: the key is the arrival sequence, set at the commit.
                            let key = if self.plan.shuffle {
                                shuffle_key(self.plan.seed, &sample_id)
                            } else {
                                0
                            };
                            EncodedRow::new(key, &sample_id, index as u16, &r.ids, &r.mask)
                        })
                        .collect();
                    KeptCopy {
                        copy,
                        line,
                        rows,
                        work: kept.clone(),
                    }
                })
            })
            .collect()
    }

    /// Writes a kept conversation's copy, serialized already: its rows to the spill, its line
    /// to `conversations.jsonl`.
    fn keep(&self, copy: KeptCopy, out: &mut Out) -> Result<KeptWork, RunError> {
        let KeptCopy {
            line,
            mut rows,
            work: mut kept,
            ..
        } = copy;
        let start = out.conversations_len;
        out.sinks
            .conversations
            .write_all(line.as_bytes())
            .map_err(|e| RunError::SideOutput("conversations.jsonl".to_owned(), e))?;
        out.conversations_len += line.len() as u64;
        kept.line = (start, line.len() as u32);
        for row in &mut rows {
            if !self.plan.shuffle {
                row.set_key(out.sequence);
            }
            out.sequence += 1;
            out.sinks.spill.push_encoded(row)?;
        }
        Ok(kept)
    }

    fn sample_id(&self, index: usize, file: u32, row: u64) -> SampleId<'_> {
        // Stable across runs: source name, file index and record index within the file.
        SampleId::conversation_of_row(&self.plan.sources[index].name, file, row)
    }

    /// One pass over a source's files: batches of the wanted rows (all when `wanted` is
    /// `None`) are read and worked on the pool, a bounded number at once, and this thread (not
    /// a pool worker, so it never holds one up) commits them in input order. JSON lines files
    /// are cut into byte ranges that the workers read themselves; other files are read in
    /// order by a reader thread.
    fn pass<T: Send>(
        &self,
        index: usize,
        wanted: Option<&[Wanted]>,
        skip: u64,
        work: &(dyn Fn(Vec<RawRow>) -> Vec<T> + Sync),
        commit: &mut dyn FnMut(Vec<T>) -> Result<(), RunError>,
    ) -> Result<(), RunError> {
        match self.chunks(index)? {
            Some(chunks) => self.pass_chunks(index, chunks, wanted, skip, work, commit),
            None => self.pass_in_order(index, wanted, skip, work, commit),
        }
    }

    /// The source's JSON lines cut into ranges (counted once, on the first pass), or `None`
    /// when its files are not all JSON lines or `CHATSHARDS_READ_RANGES=0`.
    fn chunks(&self, index: usize) -> Result<Option<&[Chunk]>, RunError> {
        let cell = &self.chunks[index];
        if let Some(chunks) = cell.get() {
            return Ok(chunks.as_deref());
        }
        let chunks = if read_ranges() {
            let files = &self.plan.sources[index].files;
            self.pool.install(|| {
                crate::read::chunks::line_chunks(files, &self.plan.read_options, CHUNK_BYTES)
            })?
        } else {
            None
        };
        Ok(cell.get_or_init(|| chunks).as_deref())
    }

    /// [`Context::pass`] over ranges: each job reads its range and works its rows; jobs are
    /// started in range order, at most a bounded number ahead of the commit, so memory stays
    /// bounded whatever the order they finish in.
    fn pass_chunks<T: Send>(
        &self,
        index: usize,
        chunks: &[Chunk],
        wanted: Option<&[Wanted]>,
        skip: u64,
        work: &(dyn Fn(Vec<RawRow>) -> Vec<T> + Sync),
        commit: &mut dyn FnMut(Vec<T>) -> Result<(), RunError>,
    ) -> Result<(), RunError> {
        let files = &self.plan.sources[index].files;
        let read_options = &self.plan.read_options;
        // Ranges with something to do: past the rows recorded segments did, holding a wanted
        // row.
        let todo: Vec<&Chunk> = chunks
            .iter()
            .filter(|c| c.ordinal + c.lines > skip)
            .filter(|c| {
                wanted.is_none_or(|w| {
                    let first = w.partition_point(|x| (x.file, x.row) < (c.file as u32, c.row));
                    w.get(first)
                        .is_some_and(|x| (x.file, x.row) < (c.file as u32, c.row + c.records))
                })
            })
            .collect();
        let in_flight = in_flight(self.pool.current_num_threads());
        let job = |chunk: &Chunk| -> Result<Vec<T>, ReadError> {
            let mut out = Vec::new();
            let mut batch = Batch::default();
            let mut ordinal = chunk.ordinal;
            crate::read::chunks::read_chunk(files, chunk, read_options, &mut |row| {
                ordinal += 1;
                if ordinal <= skip {
                    return true;
                }
                if unwanted(wanted, &row) {
                    return true;
                }
                if let Some(full) = batch.push(row) {
                    out.extend(work(full));
                }
                true
            })?;
            if let Some(rest) = batch.finish() {
                out.extend(work(rest));
            }
            Ok(out)
        };
        type Done<T> = (usize, std::thread::Result<Result<Vec<T>, ReadError>>);
        let (tx, done) = channel::<Done<T>>();
        self.pool.in_place_scope(|jobs| -> Result<(), RunError> {
            let mut started = 0usize;
            let mut worked = InOrder::default();
            let result = (|| {
                while worked.committed() < todo.len() {
                    while started < todo.len() && started < worked.committed() + in_flight {
                        let (seq, chunk, tx, job) = (started, todo[started], tx.clone(), &job);
                        started += 1;
                        jobs.spawn(move |_| {
                            let result =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                    job(chunk)
                                }));
                            let _ = tx.send((seq, result));
                        });
                    }
                    let Ok((seq, rows)) = done.recv() else { break };
                    worked.insert(seq, resume(rows)?);
                    while let Some(rows) = worked.next_due() {
                        commit(rows)?;
                    }
                }
                Ok(())
            })();
            // After an error, the jobs started finish on their own (their results are
            // dropped): the scope waits for them.
            result
        })
    }

    /// [`Context::pass`] with a reader thread that reads the files in order.
    fn pass_in_order<T: Send>(
        &self,
        index: usize,
        wanted: Option<&[Wanted]>,
        skip: u64,
        work: &(dyn Fn(Vec<RawRow>) -> Vec<T> + Sync),
        commit: &mut dyn FnMut(Vec<T>) -> Result<(), RunError>,
    ) -> Result<(), RunError> {
        let files = &self.plan.sources[index].files;
        let read_options = &ReadOptions {
            defer: read_ranges(),
            ..self.plan.read_options.clone()
        };
        let (events_tx, events) = channel::<Event<T>>();
        // One credit per batch in flight: the reader takes one before each batch, the commit of
        // a batch gives it back. Dropping the sender stops the reader.
        let in_flight = in_flight(self.pool.current_num_threads());
        let (credit_tx, credits) = sync_channel::<()>(in_flight);
        for _ in 0..in_flight {
            let _ = credit_tx.send(());
        }
        let mut credit_tx = Some(credit_tx);
        std::thread::scope(|threads| -> Result<(), RunError> {
            let reader_tx = events_tx.clone();
            let reader = std::thread::Builder::new().name("reader".to_owned());
            let reader = reader
                .spawn_scoped(threads, move || {
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        let mut batch = Batch::default();
                        let send = |batch: Vec<RawRow>| {
                            credits.recv().is_ok() && reader_tx.send(Event::Batch(batch)).is_ok()
                        };
                        let mut open = true;
                        // Rows a recorded segment did (the reader's first `skip` rows).
                        let mut skipped = 0u64;
                        let result = read_files_with(files, read_options, &mut |row| {
                            if skipped < skip {
                                skipped += 1;
                                return open;
                            }
                            if unwanted(wanted, &row) {
                                return open;
                            }
                            if let Some(full) = batch.push(row) {
                                open = send(full);
                            }
                            open
                        });
                        if let Some(rest) = batch.finish().filter(|_| open) {
                            send(rest);
                        }
                        result
                    }));
                    let _ = reader_tx.send(Event::ReadDone(result));
                })
                .expect("failed to spawn thread");
            let outcome = self.pool.in_place_scope(|jobs| -> Result<(), RunError> {
                let mut read = 0usize;
                let mut reading = true;
                let mut worked = InOrder::default();
                let mut read_result: Result<(), ReadError> = Ok(());
                while reading || worked.committed() < read {
                    let Ok(event) = events.recv() else { break };
                    match event {
                        Event::Batch(batch) => {
                            let (seq, tx) = (read, events_tx.clone());
                            read += 1;
                            jobs.spawn(move |_| {
                                let result =
                                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                        let batch = self.timings.time(PoolStage::Prepare, || {
                                            batch.into_iter().map(RawRow::materialize).collect()
                                        });
                                        work(batch)
                                    }));
                                let _ = tx.send(Event::Worked(seq, result));
                            });
                        }
                        Event::Worked(seq, rows) => {
                            worked.insert(seq, resume(rows));
                            while let Some(rows) = worked.next_due() {
                                commit(rows)?;
                                if let Some(tx) = &credit_tx {
                                    let _ = tx.send(());
                                }
                            }
                        }
                        Event::ReadDone(result) => {
                            reading = false;
                            read_result = resume(result);
                        }
                    }
                }
                Ok(read_result?)
            });
            // Stops a reader that is still going (after an error).
            credit_tx = None;
            drop(events);
            let read = reader.join();
            outcome?;
            match read {
                Ok(()) => Ok(()),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }
}

/// Whether a pass leaves `row` out: a work pass (`wanted`) takes only the wanted rows, and a
/// blank line is no record (it shares the next record's index).
fn unwanted(wanted: Option<&[Wanted]>, row: &RawRow) -> bool {
    wanted.is_some_and(|wanted| {
        matches!(row.record, Record::Blank) || !is_wanted(wanted, row.file as u32, row.row)
    })
}

/// Rows gathered into one job's worth of input: [`JOB_MAX_ROWS`] rows or [`JOB_BYTES`].
#[derive(Default)]
struct Batch {
    rows: Vec<RawRow>,
    bytes: usize,
}

impl Batch {
    /// Adds a row; the batch, once full.
    fn push(&mut self, row: RawRow) -> Option<Vec<RawRow>> {
        self.bytes += row.record.weight();
        self.rows.push(row);
        if self.rows.len() < JOB_MAX_ROWS && self.bytes < JOB_BYTES {
            return None;
        }
        self.bytes = 0;
        Some(std::mem::take(&mut self.rows))
    }

    /// The rows left, if any.
    fn finish(self) -> Option<Vec<RawRow>> {
        Some(self.rows).filter(|rows| !rows.is_empty())
    }
}

/// Job results handed over in the order the jobs were started, whatever order they finish
/// in: what a pass commits (and so the journal, the spill and the output) never depends on
/// the threads.
struct InOrder<T> {
    next: usize,
    waiting: BTreeMap<usize, T>,
}

impl<T> Default for InOrder<T> {
    fn default() -> Self {
        InOrder {
            next: 0,
            waiting: BTreeMap::new(),
        }
    }
}

impl<T> InOrder<T> {
    /// The result of job `seq` (numbered from 0 in start order).
    fn insert(&mut self, seq: usize, result: T) {
        self.waiting.insert(seq, result);
    }

    /// The next result in start order, once it has arrived.
    fn next_due(&mut self) -> Option<T> {
        let result = self.waiting.remove(&self.next)?;
        self.next += 1;
        Some(result)
    }

    /// How many results have been handed over.
    fn committed(&self) -> usize {
        self.next
    }
}

/// What the coordinator of a pass hears about, from the reader and from the pool's jobs.
enum Event<T> {
    Batch(Vec<RawRow>),
    Worked(usize, std::thread::Result<Vec<T>>),
    ReadDone(std::thread::Result<Result<(), ReadError>>),
}

/// How many entries of `wanted` (sorted, copies of a row together) the first `rows` distinct
/// rows take.
fn distinct_prefix(wanted: &[Wanted], rows: u64) -> usize {
    let mut seen = 0u64;
    let mut at = 0;
    while at < wanted.len() && seen < rows {
        let (file, row) = (wanted[at].file, wanted[at].row);
        while at < wanted.len() && (wanted[at].file, wanted[at].row) == (file, row) {
            at += 1;
        }
        seen += 1;
    }
    at
}

fn is_wanted(wanted: &[Wanted], file: u32, row: u64) -> bool {
    let at = wanted.partition_point(|w| (w.file, w.row) < (file, row));
    wanted
        .get(at)
        .is_some_and(|w| (w.file, w.row) == (file, row))
}

/// The copy numbers asked for a row (0: the original).
fn copies_of(wanted: &[Wanted], file: u32, row: u64) -> Vec<u32> {
    let at = wanted.partition_point(|w| (w.file, w.row) < (file, row));
    wanted[at..]
        .iter()
        .take_while(|w| (w.file, w.row) == (file, row))
        .map(|w| w.copy)
        .collect()
}

/// A work pass's row before tokenizing: its conversation and repairs, and the rows it comes
/// with already (a pre-tokenized source's; none for a conversation to render).
/// A row made ready for the work pass: its conversation, repairs, its rows when they need no
/// rendering, and its split group (a pre-tokenized row's id).
type PreparedRow = (Conversation, Repairs, Vec<Tokenized>, Option<String>);

/// A pass that runs on: its recorder and the input rows its recorded segments did.
type Started = Option<(Recorder, u64)>;

/// A row of the whole pass: file, row, shown row, weight for progress, what the scan found,
/// and a candidate's work.
type WholeRow = (u32, u64, u64, u64, ScanRow, Option<WorkRow>);

/// The scan's record of a row that was not prepared.
fn skip_row(skip: Skip) -> ScanRow {
    match skip {
        Skip::Rejected(reject) => ScanRow::Rejected(reject),
        Skip::Filtered(reason) => ScanRow::Filtered {
            filter: reason.code().to_owned(),
            detail: String::new(),
            text: None,
        },
    }
}

/// Records a work outcome, then hands it to the ledger.
fn record_work(
    recorder: &mut Recorder,
    ledger: &mut Ledger,
    index: usize,
    (file, row, copy): (u32, u64, u32),
    work: Work,
) -> Result<(), RunError> {
    let event = RowEvent::Worked {
        file,
        row,
        copy,
        work,
    };
    recorder.record(&event)?;
    apply_work(ledger, index, event)
}

/// Hands a work outcome to the ledger: the one place a work pass changes it, whether the pass
/// runs or is replayed from the journal.
fn apply_work(ledger: &mut Ledger, index: usize, event: RowEvent) -> Result<(), RunError> {
    let RowEvent::Worked {
        file,
        row,
        copy,
        work,
    } = event
    else {
        return Err(RunError::Curate(
            "the build journal holds scan records in a work pass; run with `--fresh`".to_owned(),
        ));
    };
    ledger.worked(index, file, row, copy, work);
    Ok(())
}

/// The value of a job, or its panic re-raised here.
fn resume<T>(result: std::thread::Result<T>) -> T {
    result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// A `rejects.jsonl` / `filtered.jsonl` line.
fn write_note(w: &mut dyn Write, plan: &Plan, note: &RowNote, name: &str) -> Result<(), RunError> {
    let source = &plan.sources[note.source];
    let mut record = serde_json::Map::new();
    record.insert("source".into(), Value::from(source.name.as_str()));
    record.insert(
        "file".into(),
        Value::from(source.display_files[note.file as usize].as_str()),
    );
    // As editors show it: the line number for line formats, else the record index.
    record.insert("row".into(), Value::from(note.shown));
    record.insert(
        "sample_id".into(),
        Value::from(SampleId::conversation_of_row(&source.name, note.file, note.row).to_string()),
    );
    record.insert("reason".into(), Value::from(note.reason.as_str()));
    if !note.message.is_empty() {
        record.insert("message".into(), Value::from(note.message.as_str()));
    }
    for (k, v) in &note.extra {
        record.insert((*k).into(), Value::from(v.as_str()));
    }
    let mut line = Value::Object(record).to_string();
    line.push('\n');
    w.write_all(line.as_bytes())
        .map_err(|e| RunError::SideOutput(name.to_owned(), e))
}

#[cfg(test)]
mod scheduler_tests;

#[cfg(test)]
mod tests {
    use super::{LastSegment, MIN_SEGMENT_INTERVAL};
    use std::time::{Duration, Instant};

    #[test]
    fn segments_fall_on_multiples_of_their_rows_and_at_most_one_a_second_after_the_first() {
        let start = Instant::now();
        // A resumed pass (100 rows replayed), a segment every 16 rows: the first one is due
        // at once on the next multiple, never between.
        let first = LastSegment::new(100);
        assert!(!first.due(100, 16, start));
        assert!(!first.due(115, 16, start));
        assert!(first.due(116, 16, start));
        assert!(!first.due(117, 16, start));
        // After it, a multiple is due only once the interval has passed.
        let last = LastSegment {
            rows: 116,
            at: Some(start),
        };
        let soon = start + Duration::from_millis(10);
        let later = start + MIN_SEGMENT_INTERVAL;
        assert!(!last.due(132, 16, soon));
        assert!(!last.due(133, 16, later));
        assert!(last.due(148, 16, later));
        // `CHATSHARDS_CHECKPOINT_ROWS=1`: every row is a multiple, the clock alone decides.
        let every_row = LastSegment {
            rows: 5,
            at: Some(start),
        };
        assert!((6..10_000).all(|rows| !every_row.due(rows, 1, soon)));
        assert!(every_row.due(10_000, 1, later));
    }
}
