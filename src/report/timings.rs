//! `build --timings`: where a build's CPU time goes, over all its threads. The pool's stages
//! are timed per batch with the worker's own CPU clock; the rest is the process's CPU time
//! between the build's phases (less the input hashing, which runs beside them all and is
//! timed on its own thread), so that the lines add up to the process's total. CPU time, not
//! wall time: it is what a stage costs whatever else shares the cores, and it does not drift
//! with the machine's load between two runs the way comparing wall times does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A stage run on the pool, one batch at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolStage {
    /// Parsing a record, adapting it to a conversation and validating it.
    Prepare,
    Render,
    Encode,
    /// Computing and checking the loss mask, and the length rules.
    Mask,
    /// Re-rendering with minijinja and re-encoding with the `tokenizers` crate, for the rows
    /// chosen to check the native renderer and the fast encoder.
    SpotChecks,
    /// The `conversations.jsonl` line, sample ids and shuffle keys.
    Serialize,
}

const POOL_STAGES: usize = 6;

/// The build's phases, in order, as the main thread passes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Planning, loading the template and the tokenizer.
    StartUp,
    /// Reading, the pool's stages and the in-order commit (spill, side outputs).
    Rows,
    /// Assembling the shards from the spill, the manifest and the move into place.
    Shards,
}

const PHASES: usize = 3;

#[derive(Debug, Default)]
pub struct Timings {
    /// Nanoseconds of CPU per [`PoolStage`], summed over the workers.
    pool: [AtomicU64; POOL_STAGES],
    /// Nanoseconds of CPU the threads checking the inputs have used so far.
    hashing: AtomicU64,
    /// Process and hashing CPU at the end of each [`Phase`], once passed.
    marks: std::sync::Mutex<Vec<Mark>>,
}

/// Where a build stood at the end of a [`Phase`].
#[derive(Debug, Clone, Copy)]
struct Mark {
    process: Duration,
    hashing: Duration,
    at: Instant,
    /// The process's peak resident memory so far, in bytes.
    peak_rss: u64,
}

impl Timings {
    /// Runs `f`, adding the CPU time this thread spends in it to `stage`.
    pub fn time<T>(&self, stage: PoolStage, f: impl FnOnce() -> T) -> T {
        let start = thread_cpu();
        let value = f();
        if let (Some(start), Some(end)) = (start, thread_cpu()) {
            self.pool[stage as usize]
                .fetch_add(nanos(end.saturating_sub(start)), Ordering::Relaxed);
        }
        value
    }

    /// Called by the threads that check the inputs as they go: adds the CPU time this thread
    /// used since its previous call (or since it started) to the hashing.
    pub fn hashing_progress(&self) {
        thread_local!(static SEEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) });
        if let Some(cpu) = thread_cpu() {
            let now = nanos(cpu);
            let before = SEEN.with(|seen| seen.replace(now));
            self.hashing
                .fetch_add(now.saturating_sub(before), Ordering::Relaxed);
        }
    }

    /// Marks the end of `phase` (phases are passed in order, each once).
    pub fn end_phase(&self, phase: Phase) {
        let Some(process) = process_cpu() else { return };
        let hashing = Duration::from_nanos(self.hashing.load(Ordering::Relaxed));
        if let Ok(mut marks) = self.marks.lock() {
            if marks.len() == phase as usize {
                marks.push(Mark {
                    process,
                    hashing,
                    at: Instant::now(),
                    peak_rss: peak_rss().unwrap_or(0),
                });
            }
        }
    }

    /// The report of a build that began at `started`, once every phase has ended and the
    /// hashing thread has finished; `None` where the CPU clocks cannot be read.
    pub fn report(&self, started: Instant) -> Option<Report> {
        let wall = started.elapsed();
        let marks = self.marks.lock().ok()?.clone();
        if marks.len() != PHASES || thread_cpu().is_none() {
            return None;
        }
        let mut phase_wall = [Duration::ZERO; PHASES];
        let mut before = started;
        for (wall, mark) in phase_wall.iter_mut().zip(&marks) {
            *wall = mark.at.saturating_duration_since(before);
            before = mark.at;
        }
        let mut phase_peak_rss = [0u64; PHASES];
        for (peak, mark) in phase_peak_rss.iter_mut().zip(&marks) {
            *peak = mark.peak_rss;
        }
        let marks: Vec<(Duration, Duration)> =
            marks.iter().map(|m| (m.process, m.hashing)).collect();
        let pool = self
            .pool
            .each_ref()
            .map(|n| Duration::from_nanos(n.load(Ordering::Relaxed)));
        let hashing = Duration::from_nanos(self.hashing.load(Ordering::Relaxed));
        let mut report = Report::new(wall, phase_wall, pool, hashing, &marks);
        report.phase_peak_rss = phase_peak_rss;
        Some(report)
    }
}

/// CPU seconds by stage; the lines add up to `total`.
#[derive(Debug, Clone)]
pub struct Report {
    pub wall: Duration,
    /// Wall time of each [`Phase`].
    pub phase_wall: [Duration; PHASES],
    /// The process's peak resident memory (bytes) at the end of each [`Phase`]: which phase
    /// set the build's peak.
    pub phase_peak_rss: [u64; PHASES],
    pub total: Duration,
    pub lines: Vec<(&'static str, Duration)>,
    pub encode: Duration,
}

impl Report {
    /// `marks`: the process's CPU and the hashing thread's at the end of each phase.
    fn new(
        wall: Duration,
        phase_wall: [Duration; PHASES],
        pool: [Duration; POOL_STAGES],
        hashing: Duration,
        marks: &[(Duration, Duration)],
    ) -> Report {
        // Each phase's process CPU less the hashing done meanwhile; the pool's stages are
        // inside the rows phase, whose remainder is reading, ordering and committing.
        let mut before = (Duration::ZERO, Duration::ZERO);
        let mut phase = [Duration::ZERO; PHASES];
        for (i, &(process, hashed)) in marks.iter().enumerate().take(PHASES) {
            let hashed = hashed.min(hashing);
            phase[i] = process
                .saturating_sub(before.0)
                .saturating_sub(hashed.saturating_sub(before.1));
            before = (process, hashed);
        }
        // Hashing after the last mark is in the process's total but in no phase.
        let total = before.0 + hashing.saturating_sub(before.1);
        let in_pool: Duration = pool.iter().sum();
        let stage = |s: PoolStage| pool[s as usize];
        Report {
            wall,
            phase_wall,
            phase_peak_rss: [0; PHASES],
            total,
            lines: vec![
                (
                    "start-up: plan, template, tokenizer",
                    phase[Phase::StartUp as usize],
                ),
                (
                    "read, order, commit, spill",
                    phase[Phase::Rows as usize].saturating_sub(in_pool),
                ),
                ("parse, adapt, validate", stage(PoolStage::Prepare)),
                ("render", stage(PoolStage::Render)),
                ("encode", stage(PoolStage::Encode)),
                ("mask, mask check, length rules", stage(PoolStage::Mask)),
                (
                    "spot checks (minijinja, tokenizers)",
                    stage(PoolStage::SpotChecks),
                ),
                (
                    "serialize: record line, ids, keys",
                    stage(PoolStage::Serialize),
                ),
                ("check the inputs again", hashing),
                ("shards, manifest", phase[Phase::Shards as usize]),
            ],
            encode: stage(PoolStage::Encode),
        }
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (total, wall) = (self.total.as_secs_f64(), self.wall.as_secs_f64());
        writeln!(
            f,
            "CPU time by stage, all threads: {total:.2} s in {wall:.2} s wall ({:.2} cores busy)",
            total / wall.max(1e-9)
        )?;
        for (name, d) in &self.lines {
            let secs = d.as_secs_f64();
            writeln!(
                f,
                "  {name:<36} {secs:>9.3} s {:>6.1}%",
                100.0 * secs / total.max(1e-9)
            )?;
        }
        let encode = self.encode.as_secs_f64();
        let rest = total - encode;
        writeln!(
            f,
            "  all but encode                       {rest:>9.3} s = {:.1}% of encode",
            100.0 * rest / encode.max(1e-9)
        )?;
        let [start_up, rows, shards] = self.phase_wall.map(|d| d.as_secs_f64());
        writeln!(
            f,
            "wall time by phase: start-up {start_up:.2} s, rows {rows:.2} s, shards {shards:.2} s"
        )?;
        let [start_up, rows, shards] = self.phase_peak_rss.map(|b| b >> 20);
        write!(
            f,
            "peak memory (RSS) at the end of each phase: start-up {start_up} MiB, rows {rows} MiB, shards {shards} MiB"
        )
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// This thread's CPU time since it started.
#[cfg(target_os = "linux")]
pub fn thread_cpu() -> Option<Duration> {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .ok()
        .map(Duration::from)
}

/// The process's peak resident memory so far, in bytes.
#[cfg(target_os = "linux")]
pub fn peak_rss() -> Option<u64> {
    use nix::sys::resource::{getrusage, UsageWho};
    // Kilobytes on Linux.
    let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    Some(u64::try_from(usage.max_rss()).unwrap_or(0) * 1024)
}

/// The process's CPU time (user and system, all threads) since it started.
#[cfg(target_os = "linux")]
pub fn process_cpu() -> Option<Duration> {
    use nix::sys::resource::{getrusage, UsageWho};
    let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let micros = |tv: nix::sys::time::TimeVal| {
        Duration::from_micros(u64::try_from(tv.tv_sec()).unwrap_or(0) * 1_000_000)
            + Duration::from_micros(u64::try_from(tv.tv_usec()).unwrap_or(0))
    };
    Some(micros(usage.user_time()) + micros(usage.system_time()))
}

#[cfg(not(target_os = "linux"))]
pub fn thread_cpu() -> Option<Duration> {
    None
}

#[cfg(not(target_os = "linux"))]
pub fn process_cpu() -> Option<Duration> {
    None
}

#[cfg(not(target_os = "linux"))]
pub fn peak_rss() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn lines_add_up_to_the_process_total_with_the_hashing_taken_out_of_each_phase() {
        // Pool: prepare, render, encode, mask, spot checks, serialize.
        let pool = [ms(1000), ms(500), ms(10_000), ms(900), ms(100), ms(600)];
        // Process CPU and hashing CPU at the end of start-up, rows, shards; the hashing
        // finishes after the last mark.
        let marks = [
            (ms(2000), ms(500)),
            (ms(16_000), ms(1000)),
            (ms(17_500), ms(1200)),
        ];
        let phase_wall = [ms(400), ms(8000), ms(550)];
        let report = Report::new(ms(9000), phase_wall, pool, ms(1300), &marks);
        let got: Vec<(&str, u64)> = report
            .lines
            .iter()
            .map(|&(name, d)| (name, d.as_millis() as u64))
            .collect();
        assert_eq!(
            got,
            [
                ("start-up: plan, template, tokenizer", 1500),
                ("read, order, commit, spill", 13_500 - 13_100),
                ("parse, adapt, validate", 1000),
                ("render", 500),
                ("encode", 10_000),
                ("mask, mask check, length rules", 900),
                ("spot checks (minijinja, tokenizers)", 100),
                ("serialize: record line, ids, keys", 600),
                ("check the inputs again", 1300),
                ("shards, manifest", 1300),
            ]
        );
        assert_eq!(report.total, ms(17_600));
        assert_eq!(
            report.lines.iter().map(|l| l.1).sum::<Duration>(),
            report.total
        );
        let text = report.to_string();
        assert!(
            text.starts_with(
                "CPU time by stage, all threads: 17.60 s in 9.00 s wall (1.96 cores busy)\n"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(
                "  all but encode                           7.600 s = 76.0% of encode\n\
                 wall time by phase: start-up 0.40 s, rows 8.00 s, shards 0.55 s\n\
                 peak memory (RSS) at the end of each phase: start-up 0 MiB, rows 0 MiB, shards 0 MiB"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_build_that_has_not_passed_every_phase_has_no_report() {
        let timings = Timings::default();
        timings.end_phase(Phase::StartUp);
        timings.end_phase(Phase::Rows);
        assert!(timings.report(Instant::now()).is_none());
        // Out of order: ignored.
        timings.end_phase(Phase::Rows);
        assert_eq!(timings.marks.lock().map(|m| m.len()).unwrap_or(0), 2);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn pool_stages_add_this_threads_cpu_time() {
        let timings = Timings::default();
        let spin = |n: u64| (0..n).fold(0u64, |a, i| a.wrapping_mul(31).wrapping_add(i));
        let x = timings.time(PoolStage::Encode, || std::hint::black_box(spin(20_000_000)));
        std::hint::black_box(x);
        let encode = timings.pool[PoolStage::Encode as usize].load(Ordering::Relaxed);
        assert!(encode > 1_000_000, "{encode} ns");
        assert_eq!(
            timings.pool[PoolStage::Render as usize].load(Ordering::Relaxed),
            0
        );
    }
}
