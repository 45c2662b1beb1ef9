//! Build progress: one bar for the whole build on a terminal, a plain line every few seconds
//! elsewhere (CI, logs, `| tee`), and one line per source when it is done; one bar per Hub
//! download ([`FetchBars`]). The only place that knows about indicatif.
//!
//! How far the build is, and its ETA, come from an estimate of the whole build made up front
//! ([`crate::read::file_size`]): every input's size in one unit, bytes of input (a JSON file's
//! size; a Parquet file's uncompressed data size from its footer, spread evenly over its
//! rows). The scan reads every row, so its remaining time is the bytes not scanned yet at the
//! scan's measured rate. The work passes render and tokenize only rows that can be selected:
//! once a source's work pass starts, its row count is known; before, it is estimated as the
//! rows the scan kept as candidates (for sources not scanned yet, at the candidates per byte
//! seen so far), at most the source's `take`. Their time per row is, once enough work rows
//! are done, the work passes' rate over their last [`WORK_WINDOW`] seconds; before, the scan's
//! time per row times what the scan measured of the two on the same rows: it times runs of
//! [`WORK_SAMPLE_ROWS`](super::run::WORK_SAMPLE_ROWS) consecutive rows through the work as
//! well, worked as one batch by the work pass's own code ([`WorkSample`]), so the ratio is this
//! build's, on this machine, for these rows, with no factor fitted anywhere (the
//! constant [`WORK_PER_SCAN_ROW`] stands in only where nothing was sampled: a merge, a
//! pre-tokenized or regenerated source, a source with no sampled run yet). The shard phase (reading the spill back, writing the
//! Arrow files in parallel, hashing them) is estimated before it starts as
//! [`SHARD_PER_WORK_ROW`] of a work row per row (both cost in proportion to a row's tokens and
//! run on the same pool), then measured. The percent shown is the time spent over the time
//! spent plus the ETA, and never goes down: a later, larger estimate holds the percent until
//! the build catches up with it. docs/progress.md has the measured errors.

use super::{Pass, Progress, WorkSample};
use crate::hub::{FetchProgress, ResolvedFile};
use crate::plan::Plan;
use crate::printer::Printer;
use crate::read::{file_size, FileSize};
use crate::report::SourceStats;
use indicatif::{HumanBytes, MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::{HashMap, VecDeque};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a plain progress line is printed when stderr is not a terminal.
pub const LINE_INTERVAL: Duration = Duration::from_secs(5);

/// Overrides [`LINE_INTERVAL`], in seconds (e.g. `1` or `0.5`), for logs that want more or
/// fewer lines.
pub const INTERVAL_VARIABLE: &str = "CHATSHARDS_PROGRESS_INTERVAL";

/// Where the scan sampled no work (a merge, pre-tokenized or regenerated rows), a work row
/// (render, tokenize, mask) is taken to cost this many scanned rows (parse, adapt, validate,
/// curation hashes) until a work pass is measured: what a 300K-row curated build showed.
pub const WORK_PER_SCAN_ROW: f64 = 2.25;

/// Before the shard phase is measured, writing a row into the shards is taken to cost this
/// share of a work row (0.216 and 0.205 on 300K- and 100K-row curated builds:
/// docs/progress.md).
pub const SHARD_PER_WORK_ROW: f64 = 0.21;

/// Sampled candidates the scan must have timed before their ratio replaces
/// [`WORK_PER_SCAN_ROW`].
const MEASURED_SAMPLES: u64 = 8;

/// The work passes' rate is taken over their last this many seconds (the current source's
/// rows, warmed caches), once [`MEASURED_WORK_ROWS`] rows are in it.
const WORK_WINDOW: f64 = 10.0;

/// Shard rows written before their own rate replaces the estimate.
const MEASURED_SHARD_ROWS: u64 = 1024;

/// Work rows measured before their own rate replaces the estimate from the scan.
const MEASURED_WORK_ROWS: u64 = 256;

/// Bar positions: permille of the estimated build time.
const BAR_LENGTH: u64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A bar redrawn in place (stderr is a terminal).
    Bar,
    /// A plain line every interval (stderr is not a terminal).
    Lines,
    /// Only the per-source lines (`CHATSHARDS_NO_PROGRESS`).
    SourcesOnly,
    /// Nothing (`--quiet`).
    Silent,
}

pub struct BuildProgress {
    mode: Mode,
    bar: ProgressBar,
    printer: Printer,
    interval: Duration,
    state: Mutex<State>,
}

impl BuildProgress {
    /// Sizes every input of the plan (a file that cannot be sized counts as what is read of
    /// it; reading it fails the build with a clear error anyway).
    pub fn new(printer: &Printer, plan: &Plan) -> anyhow::Result<Self> {
        let interval = match std::env::var(INTERVAL_VARIABLE) {
            Ok(text) => match text.trim().parse::<f64>() {
                Ok(secs) if secs.is_finite() && secs > 0.0 && secs < 1e6 => {
                    Duration::from_secs_f64(secs)
                }
                _ => anyhow::bail!(
                    "{INTERVAL_VARIABLE} must be a number of seconds above 0, not `{text}`"
                ),
            },
            Err(_) => LINE_INTERVAL,
        };
        let mode = if *printer == Printer::Quiet {
            Mode::Silent
        } else if !printer.progress_enabled() {
            Mode::SourcesOnly
        } else if std::io::stderr().is_terminal() {
            Mode::Bar
        } else {
            Mode::Lines
        };
        let sources = plan
            .sources
            .iter()
            .map(|s| SourceSize {
                name: s.name.clone(),
                files: s
                    .files
                    .iter()
                    .map(|f| FileUnits::of(file_size(f).ok()))
                    .collect(),
                take: s.take,
            })
            .collect();
        let bar = if mode == Mode::Bar {
            let bar = ProgressBar::with_draw_target(Some(BAR_LENGTH), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template("[{bar:20}] {percent:>3}%  {wide_msg}")
            {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        } else {
            ProgressBar::hidden()
        };
        let now = Instant::now();
        Ok(BuildProgress {
            mode,
            bar,
            printer: *printer,
            interval,
            state: Mutex::new(State::new(sources, now)),
        })
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    /// Runs `f` (which prints) with the bar out of the way.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// The scans and work passes are over; `rows` rows go into the shards now.
    pub fn shards_started(&self, rows: u64) {
        if let Ok(mut state) = self.state.lock() {
            let now = Instant::now();
            state.close(now);
            state.shards = Some(ShardPhase {
                started: now,
                total: rows,
                done: 0,
            });
            self.show(&mut state, now);
        }
    }

    /// `rows` more rows are in the shards.
    pub fn shard_rows(&self, rows: u64) {
        if let Ok(mut state) = self.state.lock() {
            let now = Instant::now();
            if let Some(phase) = state.shards.as_mut() {
                phase.done += rows;
            }
            self.show(&mut state, now);
        }
    }

    fn show(&self, state: &mut State, now: Instant) {
        match self.mode {
            Mode::Bar => {
                let s = state.snapshot(now);
                let fraction = state.shown(&s);
                self.bar
                    .set_position((fraction * BAR_LENGTH as f64).floor() as u64);
                self.bar.set_message(s.text());
            }
            Mode::Lines if now.duration_since(state.last_line) >= self.interval => {
                state.last_line = now;
                let s = state.snapshot(now);
                let percent = (state.shown(&s) * 100.0).floor() as u64;
                self.printer
                    .info(&format!("progress: {percent}% {}", s.text()));
            }
            _ => {}
        }
    }
}

impl Drop for BuildProgress {
    /// A build that fails leaves no bar drawn above its error.
    fn drop(&mut self) {
        if !self.bar.is_finished() {
            self.bar.finish_and_clear();
        }
    }
}

impl Progress for BuildProgress {
    fn pass_started(&self, source: usize, pass: Pass) {
        if let Ok(mut state) = self.state.lock() {
            let now = Instant::now();
            state.start(source, pass, now);
            self.show(&mut state, now);
        }
    }

    fn row_scanned(&self, file: usize, weight: u64) {
        if let Ok(mut state) = self.state.lock() {
            state.scanned(file, weight);
        }
    }

    fn rows_done(&self, rows: u64, kept: u64, tokens: u64) {
        if let Ok(mut state) = self.state.lock() {
            let now = Instant::now();
            state.done(rows, kept, tokens, now);
            self.show(&mut state, now);
        }
    }

    fn work_sampled(&self, sample: WorkSample) {
        if let Ok(mut state) = self.state.lock() {
            state.sampled(sample);
        }
    }

    fn source_finished(&self, name: &str, stats: &SourceStats) {
        if self.mode == Mode::Silent {
            return;
        }
        let secs = self.state.lock().map_or(0.0, |mut s| {
            s.close(Instant::now());
            s.seconds_of(name)
        });
        let line = source_line(name, stats, secs);
        self.bar.suspend(|| self.printer.info(&line));
    }
}

/// The line printed for a source when it is done (all its passes, its allocation settled).
pub fn source_line(name: &str, stats: &SourceStats, secs: f64) -> String {
    format!(
        "done {name}: read {}, kept {}, tokens {}, {secs:.1}s",
        stats.read, stats.kept, stats.tokens
    )
}

/// A file's estimated size in progress units (bytes of input).
#[derive(Debug, Clone, Copy, PartialEq)]
struct FileUnits {
    /// 0 when the file could not be sized.
    total: f64,
    /// For Parquet: the units of one row (a row's weight is not its share of the file).
    per_row: Option<f64>,
}

impl FileUnits {
    fn of(size: Option<FileSize>) -> Self {
        match size {
            Some(FileSize::Bytes(bytes)) => FileUnits {
                total: bytes as f64,
                per_row: None,
            },
            Some(FileSize::Rows { rows, bytes }) if rows > 0 => {
                // A footer without sizes: a row weighs as a typical chat row.
                let bytes = if bytes > 0 { bytes } else { rows * 2048 };
                FileUnits {
                    total: bytes as f64,
                    per_row: Some(bytes as f64 / rows as f64),
                }
            }
            Some(FileSize::Rows { .. }) => FileUnits {
                total: 0.0,
                per_row: Some(0.0),
            },
            None => FileUnits {
                total: 0.0,
                per_row: None,
            },
        }
    }
}

struct SourceSize {
    name: String,
    files: Vec<FileUnits>,
    take: Option<u64>,
}

/// What has happened to one source so far.
#[derive(Default)]
struct SourceRun {
    /// Units scanned per file, as read (not capped).
    scanned: Vec<f64>,
    /// Units beyond the estimate (files that could not be sized, or read larger).
    extra_units: f64,
    scan_done: bool,
    read: u64,
    candidates: u64,
    /// Rows of the work passes started, and done, so far.
    work_queued: u64,
    work_done: u64,
    secs: f64,
}

/// The shard phase: its start, rows to write and rows written.
struct ShardPhase {
    started: Instant,
    total: u64,
    done: u64,
}

/// What the scans' [`WorkSample`]s add up to.
#[derive(Debug, Default, Clone, Copy)]
struct Samples {
    scan_ns: u64,
    scan_rows: u64,
    work_ns: u64,
    work_rows: u64,
}

impl Samples {
    /// A work row's cost in scanned rows, once enough candidates were timed.
    fn work_per_scan_row(&self) -> Option<f64> {
        (self.work_rows >= MEASURED_SAMPLES && self.scan_ns > 0 && self.work_ns > 0).then(|| {
            (self.work_ns as f64 / self.work_rows as f64)
                / (self.scan_ns as f64 / self.scan_rows as f64)
        })
    }
}

struct State {
    /// The largest fraction shown so far: the percent never goes back.
    shown: f64,
    samples: Samples,
    /// (work seconds, work rows done) as the work passes went, back to the last mark at least
    /// [`WORK_WINDOW`] seconds before the newest.
    work_marks: VecDeque<(f64, u64)>,
    shards: Option<ShardPhase>,
    sources: Vec<SourceSize>,
    runs: Vec<SourceRun>,
    /// The pass running: its source, kind, start, and the source's work rows done before it.
    pass: Option<(usize, Pass, Instant, u64)>,
    scan_secs: f64,
    work_secs: f64,
    last_line: Instant,
    /// The build works its rows in its scans ([`Pass::Whole`]): no work pass follows.
    one_pass: bool,
}

/// How far the build is, at one moment.
#[derive(Debug, Clone, PartialEq)]
struct Snapshot {
    phase: String,
    rows: u64,
    rows_per_sec: f64,
    /// Seconds spent in passes, and still to go (`None` until a rate is measured).
    elapsed: f64,
    eta: Option<f64>,
}

impl Snapshot {
    fn fraction(&self) -> f64 {
        match self.eta {
            Some(eta) if self.elapsed + eta > 0.0 => (self.elapsed / (self.elapsed + eta)).min(1.0),
            _ => 0.0,
        }
    }

    #[cfg(test)]
    fn percent(&self) -> u64 {
        (self.fraction() * 100.0).floor() as u64
    }

    fn text(&self) -> String {
        format!(
            "{}: {} rows, {:.0} rows/s, eta {}",
            self.phase,
            self.rows,
            self.rows_per_sec,
            self.eta.map_or_else(|| "?".to_owned(), duration)
        )
    }
}

/// `42s`, `3m07s`, `2h05m`.
fn duration(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

impl State {
    fn new(sources: Vec<SourceSize>, now: Instant) -> Self {
        let runs = sources
            .iter()
            .map(|s| SourceRun {
                scanned: vec![0.0; s.files.len()],
                ..Default::default()
            })
            .collect();
        State {
            shown: 0.0,
            samples: Samples::default(),
            work_marks: VecDeque::new(),
            shards: None,
            sources,
            runs,
            pass: None,
            scan_secs: 0.0,
            work_secs: 0.0,
            last_line: now,
            one_pass: false,
        }
    }

    /// Ends the running pass.
    fn close(&mut self, now: Instant) {
        if let Some((source, pass, started, _)) = self.pass.take() {
            let secs = now.duration_since(started).as_secs_f64();
            let run = &mut self.runs[source];
            run.secs += secs;
            match pass {
                Pass::Scan | Pass::Whole => {
                    run.scan_done = true;
                    self.scan_secs += secs;
                }
                Pass::Work { .. } => self.work_secs += secs,
            }
        }
    }

    fn start(&mut self, source: usize, pass: Pass, now: Instant) {
        self.close(now);
        if source >= self.runs.len() {
            return;
        }
        let run = &mut self.runs[source];
        match pass {
            Pass::Work { rows } => run.work_queued += rows,
            Pass::Whole => self.one_pass = true,
            Pass::Scan => {}
        }
        self.pass = Some((source, pass, now, run.work_done));
    }

    fn scanned(&mut self, file: usize, weight: u64) {
        let Some((source, Pass::Scan | Pass::Whole, ..)) = self.pass else {
            return;
        };
        let (Some(size), Some(run)) = (
            self.sources[source].files.get(file),
            self.runs.get_mut(source),
        ) else {
            return;
        };
        let units = size.per_row.unwrap_or(weight as f64);
        let before = run.scanned[file];
        run.scanned[file] += units;
        // What the file's estimate did not foresee.
        run.extra_units += (run.scanned[file] - size.total.max(before)).max(0.0);
    }

    fn done(&mut self, rows: u64, kept: u64, _tokens: u64, now: Instant) {
        let Some((source, pass, started, base)) = self.pass else {
            return;
        };
        let run = &mut self.runs[source];
        match pass {
            Pass::Scan | Pass::Whole => {
                run.read = rows;
                run.candidates = kept;
            }
            Pass::Work { .. } => {
                run.work_done = base + rows;
                let secs = self.work_secs + now.duration_since(started).as_secs_f64();
                let rows: u64 = self.runs.iter().map(|r| r.work_done).sum();
                self.work_marks.push_back((secs, rows));
                while self
                    .work_marks
                    .get(1)
                    .is_some_and(|&(at, _)| at <= secs - WORK_WINDOW)
                {
                    self.work_marks.pop_front();
                }
            }
        }
    }

    fn sampled(&mut self, sample: WorkSample) {
        let s = &mut self.samples;
        s.scan_ns += sample.scan_ns;
        s.scan_rows += sample.scan_rows;
        s.work_ns += sample.work_ns;
        s.work_rows += sample.work_rows;
    }

    /// Seconds a work row takes: the work passes' recent rate once measured, else the scan's
    /// time per row times a work row's cost in scanned rows (sampled, or the constant).
    fn work_secs_per_row(&self, scan: (f64, u64), work: (f64, u64)) -> Option<f64> {
        let (scan_secs, scan_rows) = scan;
        let (work_secs, work_rows) = work;
        if let Some(&(secs, rows)) = self.work_marks.front() {
            if work_rows >= rows + MEASURED_WORK_ROWS && work_secs > secs {
                return Some((work_secs - secs) / (work_rows - rows) as f64);
            }
        }
        if work_rows >= MEASURED_WORK_ROWS && work_secs > 0.0 {
            return Some(work_secs / work_rows as f64);
        }
        let ratio = self
            .samples
            .work_per_scan_row()
            .unwrap_or(WORK_PER_SCAN_ROW);
        (scan_rows > 0).then(|| scan_secs / scan_rows as f64 * ratio)
    }

    /// The fraction to show for `s`: its own, or the largest shown before.
    fn shown(&mut self, s: &Snapshot) -> f64 {
        self.shown = self.shown.max(s.fraction());
        self.shown
    }

    fn seconds_of(&self, name: &str) -> f64 {
        self.sources
            .iter()
            .position(|s| s.name == name)
            .map_or(0.0, |i| self.runs[i].secs)
    }

    fn snapshot(&self, now: Instant) -> Snapshot {
        let running = |kind: bool| match self.pass {
            Some((_, pass, started, _)) if !matches!(pass, Pass::Work { .. }) == kind => {
                now.duration_since(started).as_secs_f64()
            }
            _ => 0.0,
        };
        let scan_secs = self.scan_secs + running(true);
        let work_secs = self.work_secs + running(false);
        // Units: estimated total, and scanned (a file counts at most its estimate until the
        // estimate is exceeded; a finished scan counts its whole total).
        let (mut total, mut done) = (0.0, 0.0);
        let mut totals = Vec::with_capacity(self.sources.len());
        for (size, run) in self.sources.iter().zip(&self.runs) {
            let estimate: f64 = size.files.iter().map(|f| f.total).sum();
            let source_total = estimate + run.extra_units;
            let source_done = if run.scan_done {
                source_total
            } else {
                size.files
                    .iter()
                    .zip(&run.scanned)
                    .map(|(f, &s)| s.min(f.total))
                    .sum::<f64>()
                    + run.extra_units
            };
            totals.push(source_total);
            total += source_total;
            done += source_done;
        }
        let scan_rows: u64 = self.runs.iter().map(|r| r.read).sum();
        let candidates: u64 = self.runs.iter().map(|r| r.candidates).sum();
        let work_rows: u64 = self.runs.iter().map(|r| r.work_done).sum();
        let scan_rate = (scan_secs > 0.0 && done > 0.0).then(|| done / scan_secs);
        // Work rows still to do: a started source's queued rows, else its expected candidates.
        let candidates_per_unit = if done > 0.0 {
            candidates as f64 / done
        } else {
            0.0
        };
        let work_left: f64 = self
            .sources
            .iter()
            .zip(&self.runs)
            .zip(&totals)
            .map(|((size, run), &source_total)| {
                let expected = if run.work_queued > 0 {
                    run.work_queued as f64
                } else {
                    let c = if run.scan_done {
                        run.candidates as f64
                    } else {
                        (candidates_per_unit * source_total).max(run.candidates as f64)
                    };
                    size.take.map_or(c, |t| c.min(t as f64))
                };
                match self.one_pass {
                    // Worked by the scan; counted for the shards below.
                    true => expected,
                    false => (expected - run.work_done as f64).max(0.0),
                }
            })
            .sum();
        let (work_left, work_total, work_secs_per_row) = match self.one_pass {
            // A scanned row's time is its work's too: a work row's part of it, for the shards.
            true => {
                let work = self
                    .samples
                    .work_per_scan_row()
                    .unwrap_or(WORK_PER_SCAN_ROW);
                let per_row =
                    (scan_rows > 0).then(|| scan_secs / scan_rows as f64 * work / (1.0 + work));
                (0.0, work_left, per_row)
            }
            // Rows the shards will get: what the work passes queue (or are expected to).
            false => (
                work_left,
                work_left + work_rows as f64,
                self.work_secs_per_row((scan_secs, scan_rows), (work_secs, work_rows)),
            ),
        };
        let shard_secs = self
            .shards
            .as_ref()
            .map_or(0.0, |p| now.duration_since(p.started).as_secs_f64());
        let shard_left = |per_work_row: f64| match &self.shards {
            Some(p) if p.done >= MEASURED_SHARD_ROWS && shard_secs > 0.0 => {
                (p.total.saturating_sub(p.done)) as f64 * shard_secs / p.done as f64
            }
            Some(p) => (p.total.saturating_sub(p.done)) as f64 * per_work_row * SHARD_PER_WORK_ROW,
            None => work_total * per_work_row * SHARD_PER_WORK_ROW,
        };
        let eta = match &self.shards {
            // Scans and work passes are over: only the shards are left.
            Some(_) => Some(shard_left(work_secs_per_row.unwrap_or(0.0))),
            None => scan_rate.zip(work_secs_per_row).map(|(rate, per_row)| {
                (total - done).max(0.0) / rate + work_left * per_row + shard_left(per_row)
            }),
        };
        if let Some(p) = &self.shards {
            return Snapshot {
                phase: "write shards".to_owned(),
                rows: p.done,
                rows_per_sec: if shard_secs > 0.0 {
                    p.done as f64 / shard_secs
                } else {
                    0.0
                },
                elapsed: scan_secs + work_secs + shard_secs,
                eta,
            };
        }
        let (phase, rows, secs) = match self.pass {
            Some((source, Pass::Work { .. }, ..)) => (
                format!("work {}", self.sources[source].name),
                work_rows,
                work_secs,
            ),
            Some((source, Pass::Scan, ..)) => (
                format!("scan {}", self.sources[source].name),
                scan_rows,
                scan_secs,
            ),
            Some((source, Pass::Whole, ..)) => (
                format!("build {}", self.sources[source].name),
                scan_rows,
                scan_secs,
            ),
            None => ("start".to_owned(), 0, 0.0),
        };
        Snapshot {
            phase,
            rows,
            rows_per_sec: if secs > 0.0 { rows as f64 / secs } else { 0.0 },
            elapsed: scan_secs + work_secs,
            eta,
        }
    }
}

/// One bar per file being downloaded; a line per finished download.
pub struct FetchBars {
    multi: MultiProgress,
    printer: Printer,
    bars: Mutex<HashMap<String, ProgressBar>>,
    style: Option<ProgressStyle>,
    pub downloaded_files: AtomicU64,
    pub downloaded_bytes: AtomicU64,
}

impl FetchBars {
    pub fn new(printer: &Printer) -> Self {
        let target = if printer.progress_enabled() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let style = ProgressStyle::with_template(
            "{prefix:.bold} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .ok()
        .map(|style| style.progress_chars("=> "));
        FetchBars {
            multi: MultiProgress::with_draw_target(target),
            printer: *printer,
            bars: Mutex::new(HashMap::new()),
            style,
            downloaded_files: AtomicU64::new(0),
            downloaded_bytes: AtomicU64::new(0),
        }
    }

    pub fn clear(&self) {
        if let Ok(mut bars) = self.bars.lock() {
            for (_, bar) in bars.drain() {
                bar.finish_and_clear();
            }
        }
        let _ = self.multi.clear();
    }
}

impl FetchProgress for FetchBars {
    fn download_started(&self, label: &str, size: u64, resumed_from: u64) {
        let bar = self.multi.add(ProgressBar::new(size));
        if let Some(style) = &self.style {
            bar.set_style(style.clone());
        }
        bar.set_prefix(label.to_owned());
        bar.set_position(resumed_from);
        if let Ok(mut bars) = self.bars.lock() {
            if let Some(old) = bars.insert(label.to_owned(), bar) {
                old.finish_and_clear();
            }
        }
    }

    fn downloaded(&self, label: &str, bytes: u64) {
        self.downloaded_bytes.fetch_add(bytes, Ordering::Relaxed);
        if let Ok(bars) = self.bars.lock() {
            if let Some(bar) = bars.get(label) {
                bar.inc(bytes);
            }
        }
    }

    fn file_ready(&self, file: &ResolvedFile, downloaded: bool) {
        if !downloaded {
            return;
        }
        self.downloaded_files.fetch_add(1, Ordering::Relaxed);
        let label = format!("{}/{}", file.repo, file.path);
        if let Ok(mut bars) = self.bars.lock() {
            if let Some(bar) = bars.remove(&label) {
                bar.finish_and_clear();
            }
        }
        let line = format!(
            "Downloaded {} {label} ({})",
            file.kind,
            HumanBytes(file.size)
        );
        self.multi.suspend(|| self.printer.info(&line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(files: Vec<Vec<FileUnits>>, takes: Vec<Option<u64>>) -> State {
        let sources = files
            .into_iter()
            .zip(takes)
            .enumerate()
            .map(|(i, (files, take))| SourceSize {
                name: format!("s{i}"),
                files,
                take,
            })
            .collect();
        State::new(sources, Instant::now())
    }

    fn bytes(n: u64) -> FileUnits {
        FileUnits::of(Some(FileSize::Bytes(n)))
    }

    #[test]
    fn a_parquet_row_is_its_share_of_the_footer_size() {
        let f = FileUnits::of(Some(FileSize::Rows {
            rows: 4,
            bytes: 1000,
        }));
        assert_eq!(
            f,
            FileUnits {
                total: 1000.0,
                per_row: Some(250.0)
            }
        );
        assert_eq!(FileUnits::of(None).total, 0.0);
    }

    #[test]
    fn a_one_pass_build_expects_no_work_after_its_scans_only_the_shards() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut s = state(vec![vec![bytes(1000)], vec![bytes(3000)]], vec![None, None]);
        s.start(0, Pass::Whole, at(0));
        for _ in 0..50 {
            s.scanned(0, 10);
        }
        s.done(50, 40, 9000, at(1000));
        let snap = s.snapshot(at(1000));
        assert_eq!(snap.phase, "build s0");
        assert_eq!((snap.rows, snap.rows_per_sec), (50, 50.0));
        // 500 of 4,000 bytes in 1 s, each row's work done by then; 320 candidates expected
        // (40 per 500 bytes), each a work row's share of a scanned row's time for the shards.
        let work_part = WORK_PER_SCAN_ROW / (1.0 + WORK_PER_SCAN_ROW);
        let expected = 3500.0 / 500.0 + 320.0 * (1.0 / 50.0) * work_part * SHARD_PER_WORK_ROW;
        let eta = snap.eta.expect("an eta");
        assert!((eta - expected).abs() < 1e-9, "{eta} {expected}");
        // The last scan done: only the shards are left.
        s.start(1, Pass::Whole, at(1000));
        s.done(150, 120, 27000, at(4000));
        s.close(at(4000));
        let eta = s.snapshot(at(4000)).eta.expect("an eta");
        let expected = 160.0 * (4.0 / 200.0) * work_part * SHARD_PER_WORK_ROW;
        assert!((eta - expected).abs() < 1e-9, "{eta} {expected}");
    }

    #[test]
    fn the_eta_is_the_scan_left_at_its_rate_plus_the_work_rows_left() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Two JSON sources of 1,000 and 3,000 bytes; the second has `take: 10`.
        let mut s = state(
            vec![vec![bytes(1000)], vec![bytes(3000)]],
            vec![None, Some(10)],
        );
        s.start(0, Pass::Scan, at(0));
        for _ in 0..50 {
            s.scanned(0, 10);
        }
        s.done(50, 40, 0, at(1000));
        // 500 of 4,000 bytes in 1 s, 40 candidates per 500 bytes, 50 rows a second.
        let snap = s.snapshot(at(1000));
        let scan_left = 3500.0 / 500.0;
        // Work: source 0 has 80 expected candidates, source 1 at most its take of 10; a work
        // row costs WORK_PER_SCAN_ROW scan rows (1/50 s).
        let work_left = (80.0 + 10.0) * (1.0 / 50.0) * WORK_PER_SCAN_ROW;
        // The shards: a row per work row, at SHARD_PER_WORK_ROW of a work row each.
        let shards = work_left * SHARD_PER_WORK_ROW;
        let eta = snap.eta.expect("an eta");
        assert!(
            (eta - (scan_left + work_left + shards)).abs() < 1e-9,
            "{eta}"
        );
        assert_eq!(snap.phase, "scan s0");
        assert_eq!((snap.rows, snap.rows_per_sec), (50, 50.0));
        // The scan of source 0 ends (its whole size counts), source 1's starts.
        s.start(1, Pass::Scan, at(2000));
        s.scanned(5, 10); // a file index past the source's files is ignored
        let snap = s.snapshot(at(2000));
        let eta = snap.eta.expect("an eta");
        // 1,000 bytes in 2 s; 40 candidates in source 0 (all known).
        let expected = 3000.0 / 500.0
            + (40.0 + 10.0) * (2.0 / 50.0) * WORK_PER_SCAN_ROW * (1.0 + SHARD_PER_WORK_ROW);
        assert!((eta - expected).abs() < 1e-9, "{eta} {expected}");
        // Work passes: the queued rows replace the estimate; the measured rate takes over.
        s.done(300, 30, 0, at(2900));
        s.start(0, Pass::Work { rows: 40 }, at(3000));
        s.done(20, 20, 500, at(3500));
        let snap = s.snapshot(at(3500));
        assert_eq!(snap.phase, "work s0");
        assert_eq!((snap.rows, snap.rows_per_sec), (20, 40.0));
        let scan_per_row = 3.0 / 350.0;
        let per_row = scan_per_row * WORK_PER_SCAN_ROW;
        // 30 work rows left; the shards get those and the 20 done.
        let expected = (20.0 + 10.0) * per_row + 50.0 * per_row * SHARD_PER_WORK_ROW;
        assert!((snap.eta.expect("eta") - expected).abs() < 1e-9);
        assert_eq!(snap.elapsed, 3.5);
        s.close(at(4000));
        assert_eq!(s.seconds_of("s0"), 3.0);
        assert_eq!(s.seconds_of("s1"), 1.0);
    }

    #[test]
    fn the_scan_measures_a_work_rows_cost_and_the_work_pass_its_recent_rate() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let mut s = state(vec![vec![bytes(10_000)]], vec![None]);
        s.start(0, Pass::Scan, at(0));
        for _ in 0..100 {
            s.scanned(0, 10);
        }
        s.done(100, 80, 0, at(1000));
        // A sampled run of nine rows: two the scan dropped (0.5 ms each) and seven candidates
        // (1 ms each), worked as a batch in 21 ms.
        s.sampled(WorkSample {
            scan_rows: 9,
            scan_ns: 8_000_000,
            work_rows: 7,
            work_ns: 21_000_000,
        });
        // 1,000 of 10,000 bytes in 1 s: 9 s of scan left; 80 candidates per 1,000 bytes:
        // 800 work rows, a scan row 10 ms. Seven samples are too few: the constant.
        let eta = |s: &State, ms| s.snapshot(at(ms)).eta.expect("an eta");
        let per_row = 0.01 * WORK_PER_SCAN_ROW;
        let expected = 9.0 + 800.0 * per_row * (1.0 + SHARD_PER_WORK_ROW);
        assert!(close(eta(&s, 1000), expected), "{}", eta(&s, 1000));
        // The next run: one candidate scanned in 1 ms, worked in 3 ms. A work row costs
        // 24 ms / 8 over 9 ms / 10 rows: 3 / 0.9 scanned rows.
        s.sampled(WorkSample {
            scan_rows: 1,
            scan_ns: 1_000_000,
            work_rows: 1,
            work_ns: 3_000_000,
        });
        let per_row = 0.01 * (3.0 / 0.9);
        let expected = 9.0 + 800.0 * per_row * (1.0 + SHARD_PER_WORK_ROW);
        assert!(close(eta(&s, 1000), expected), "{}", eta(&s, 1000));
        assert!((expected - 41.2667).abs() < 1e-4, "{expected}");
        // The work pass: 256 rows in its first 12 s (slow), then 300 rows in 3 s. Its rate is
        // the whole pass's until the last 10 s hold 256 rows, then theirs.
        s.start(0, Pass::Work { rows: 800 }, at(10_000));
        s.done(256, 256, 0, at(22_000));
        let per_row = 12.0 / 256.0;
        let expected = 544.0 * per_row + 800.0 * per_row * SHARD_PER_WORK_ROW;
        assert!(close(eta(&s, 22_000), expected), "{}", eta(&s, 22_000));
        s.done(556, 556, 0, at(25_000));
        let expected = 244.0 * 0.01 + 800.0 * 0.01 * SHARD_PER_WORK_ROW;
        assert!(close(eta(&s, 25_000), expected), "{}", eta(&s, 25_000));
        assert!(close(expected, 4.12), "{expected}");
        let snap = s.snapshot(at(25_000));
        assert_eq!((snap.elapsed, snap.percent()), (25.0, 85));
    }

    #[test]
    fn a_file_read_past_its_estimate_grows_the_total() {
        let t0 = Instant::now();
        let mut s = state(vec![vec![bytes(100), FileUnits::of(None)]], vec![None]);
        s.start(0, Pass::Scan, t0);
        s.scanned(0, 150);
        s.scanned(1, 50);
        s.done(2, 2, 0, t0 + Duration::from_secs(1));
        let snap = s.snapshot(t0 + Duration::from_secs(1));
        // Everything scanned is done: 200 units of 200; only the work is left.
        let eta = snap.eta.expect("eta");
        let work = 2.0 * 0.5 * WORK_PER_SCAN_ROW;
        assert!(
            (eta - work * (1.0 + SHARD_PER_WORK_ROW)).abs() < 1e-9,
            "{eta}"
        );
    }

    #[test]
    fn the_shard_phase_is_shown_measured_and_the_percent_never_goes_back() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut s = state(vec![vec![bytes(1000)]], vec![None]);
        s.start(0, Pass::Scan, at(0));
        for _ in 0..100 {
            s.scanned(0, 10);
        }
        s.done(100, 100, 0, at(1000));
        // Work rows are estimated at WORK_PER_SCAN_ROW scan rows (80 ms) until 256 are
        // measured; they take 100 ms.
        s.start(0, Pass::Work { rows: 1000 }, at(1000));
        s.done(255, 255, 0, at(26_500));
        let estimated = s.snapshot(at(26_500));
        let before = s.shown(&estimated);
        s.done(256, 256, 0, at(26_600));
        let measured = s.snapshot(at(26_600));
        // The measured rate makes the build longer: the percent holds where it was.
        assert!(
            measured.fraction() < before,
            "{} {before}",
            measured.fraction()
        );
        assert_eq!(s.shown(&measured), before);
        s.close(at(30_000));
        s.shards = Some(ShardPhase {
            started: at(30_000),
            total: 2000,
            done: 0,
        });
        // Not measured yet: SHARD_PER_WORK_ROW of a work row each.
        let snap = s.snapshot(at(30_000));
        assert_eq!(snap.phase, "write shards");
        // The work rows' measured time: 29 s for 256.
        let per_work_row = 29.0 / 256.0;
        let eta = snap.eta.expect("eta");
        assert!(
            (eta - 2000.0 * per_work_row * SHARD_PER_WORK_ROW).abs() < 1e-9,
            "{eta}"
        );
        // Measured: 1,500 rows in 1 s, 500 left.
        if let Some(p) = s.shards.as_mut() {
            p.done = 1500;
        }
        let snap = s.snapshot(at(31_000));
        assert_eq!((snap.rows, snap.rows_per_sec), (1500, 1500.0));
        assert!((snap.eta.expect("eta") - 500.0 / 1500.0).abs() < 1e-9);
        assert_eq!(snap.text(), "write shards: 1500 rows, 1500 rows/s, eta 0s");
    }

    #[test]
    fn lines_show_percent_rows_rate_and_eta() {
        let snap = Snapshot {
            phase: "scan chat".to_owned(),
            rows: 1234,
            rows_per_sec: 617.4,
            elapsed: 2.0,
            eta: Some(185.0),
        };
        assert_eq!(snap.percent(), 1);
        assert_eq!(snap.text(), "scan chat: 1234 rows, 617 rows/s, eta 3m05s");
        assert_eq!(duration(7.4), "7s");
        assert_eq!(duration(7325.0), "2h02m");
        let none = Snapshot { eta: None, ..snap };
        assert_eq!((none.percent(), none.text().ends_with("eta ?")), (0, true));
    }
}
