//! Runs a [`Plan`]: read → adapt → validate → curate → render → tokenize → write, streaming
//! each source in fixed-size batches. Per-row work runs on the caller's rayon pool; everything
//! that decides order or counts (dedup, `take`, keys, stats) runs sequentially in input order,
//! so the output is byte-identical at any thread count.

use crate::adapt::{to_sharegpt_record, Repairs};
use crate::conversation::Conversation;
use crate::curate::{fingerprint, Deduper, Fingerprint};
use crate::plan::config::Take;
use crate::plan::Plan;
use crate::process::{Outcome, RowProcessor, SpotChecks, Tokenized};
use crate::read::{read_files, RawRow, ReadError};
use crate::reject::{FilterReason, Reject, Skip};
use crate::report::timings::{PoolStage, Timings};
use crate::report::SourceStats;
use crate::write::{shuffle_key, Spill, TokenRow};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::mpsc::{channel, sync_channel};

/// Size of one job of the thread pool: it closes at this many bytes of input (or rows, or the
/// source's `take`), whichever comes first. A job runs its rows one after another, each stage
/// over all of them before the next: the longer the encoder runs uninterrupted, the less of its
/// time goes to refilling the caches the other stages took (jobs of 64 rows cost ~2% more
/// encoder time than long runs). Sized in bytes, so that a job of long agentic rows takes about
/// as long as one of short chats: small enough that every worker stays busy (rayon cannot
/// steal inside a running job) and a source's last jobs end together.
pub const JOB_BYTES: usize = 512 << 10;
pub const JOB_MAX_ROWS: usize = 1024;

/// Where a run writes its side outputs and rows.
pub struct Sinks<'a> {
    pub spill: &'a mut Spill,
    pub rejects: &'a mut (dyn Write + Send),
    pub conversations: &'a mut (dyn Write + Send),
}

/// Progress callbacks, so the pipeline never draws anything itself.
pub trait Progress: Sync {
    fn source_started(&self, _name: &str, _take: Option<u64>) {}
    fn rows_done(&self, _rows: u64, _kept: u64, _tokens: u64) {}
    fn source_finished(&self, _name: &str, _stats: &SourceStats) {}
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
}

/// Runs every source of the plan on `pool`; returns per-source stats in plan order. Call it
/// from outside the pool: this thread coordinates and commits while the pool works.
pub fn run(
    plan: &Plan,
    processor: &RowProcessor,
    sinks: &mut Sinks,
    progress: &dyn Progress,
    pool: &rayon::ThreadPool,
    timings: &Timings,
) -> Result<Vec<SourceStats>, RunError> {
    let mut deduper = plan.dedup.then(Deduper::default);
    let mut sequence = 0u64;
    let mut all = Vec::with_capacity(plan.sources.len());
    for (index, source) in plan.sources.iter().enumerate() {
        let stats = run_source(
            Stage {
                plan,
                processor,
                index: index as u16,
                timings,
            },
            deduper.as_mut(),
            &mut sequence,
            sinks,
            progress,
            pool,
        )?;
        progress.source_finished(&source.name, &stats);
        all.push(stats);
    }
    Ok(all)
}

/// What the parallel stages of one source need (shared, read-only).
#[derive(Clone, Copy)]
struct Stage<'a> {
    plan: &'a Plan,
    processor: &'a RowProcessor,
    index: u16,
    timings: &'a Timings,
}

/// One input row after the parallel stages: everything the in-order commit needs.
struct Processed {
    file: usize,
    row: u64,
    result: Result<Ready, Skip>,
}

/// A row that passed adapt + validate.
struct Ready {
    repairs: Repairs,
    /// `Some` when dedup is on.
    fingerprint: Option<Fingerprint>,
    /// Until tokenized; dropped unprocessed for a duplicate.
    conversation: Option<Conversation>,
    /// `None` for a duplicate (decided before tokenizing, in input order).
    work: Option<Worked>,
}

struct Worked {
    outcome: Outcome<KeptRows>,
    /// The re-checks the row got.
    checked: SpotChecks,
}

/// A kept conversation, serialized for the writers.
struct KeptRows {
    /// Its `conversations.jsonl` line.
    line: String,
    rows: Vec<TokenRow>,
    truncated_rows: u64,
    supervised_tokens: u64,
}

impl Stage<'_> {
    fn source(&self) -> &crate::plan::SourcePlan {
        &self.plan.sources[self.index as usize]
    }

    fn sample_id(&self, file: usize, row: u64) -> String {
        // Stable across runs: source name, file index and record index within the file.
        format!("{}:{}:{}", self.source().name, file, row)
    }

    /// Parses (JSON lines), adapts and validates a batch.
    fn prepare_batch(&self, batch: Vec<RawRow>, dedup: bool) -> Vec<Processed> {
        self.timings.time(PoolStage::Prepare, || {
            batch
                .into_iter()
                .map(|raw| Processed {
                    file: raw.file,
                    row: raw.row,
                    result: self.prepare(raw, dedup),
                })
                .collect()
        })
    }

    /// Renders, tokenizes and serializes the rows of a batch that are still wanted.
    fn work_batch(&self, rows: &mut [Processed]) {
        let mut wanted = Vec::new();
        for p in rows.iter_mut() {
            if let Ok(ready) = &mut p.result {
                if let Some(conversation) = ready.conversation.take() {
                    let id = self.sample_id(p.file, p.row);
                    let checks = self.processor.spot_checks(&id);
                    wanted.push((ready, id, conversation, checks));
                }
            }
        }
        let mut batch: Vec<_> = wanted
            .iter()
            .map(|(_, _, c, checks)| (c, *checks))
            .collect();
        let outcomes = self.processor.process_batch(&mut batch, self.timings);
        // The checks each row got.
        let checked: Vec<SpotChecks> = batch.into_iter().map(|(_, checks)| checks).collect();
        self.timings.time(PoolStage::Serialize, || {
            let rows = wanted.into_iter().zip(checked).zip(outcomes);
            for (((ready, id, conversation, _), checked), outcome) in rows {
                let outcome = outcome.map_kept(|rows| self.serialize(&id, &conversation, rows));
                ready.work = Some(Worked { outcome, checked });
            }
        });
    }

    /// Parses (a JSON line), adapts and validates one record.
    fn prepare(&self, raw: RawRow, dedup: bool) -> Result<Ready, Skip> {
        let mut repairs = Repairs::new();
        let conversation = self
            .source()
            .adapter
            .prepare_record(raw.record, &mut repairs)?;
        let conversation = self
            .processor
            .validator
            .validate(conversation, &mut repairs)?;
        Ok(Ready {
            repairs,
            fingerprint: dedup.then(|| fingerprint(&conversation)),
            conversation: Some(conversation),
            work: None,
        })
    }

    fn serialize(&self, id: &str, conversation: &Conversation, rows: Vec<Tokenized>) -> KeptRows {
        let line = to_sharegpt_record(conversation, id, &self.source().name).json_line();
        let truncated_rows = rows.iter().filter(|r| r.truncated).count() as u64;
        let supervised_tokens = rows.iter().map(|r| r.supervised() as u64).sum();
        let rows = rows
            .into_iter()
            .map(|r| {
                let sample_id = format!("{id}:{}", r.segment);
                TokenRow {
                    // Replaced by the arrival sequence, in order, when not shuffling.
                    key: if self.plan.shuffle {
                        shuffle_key(self.plan.seed, &sample_id)
                    } else {
                        0
                    },
                    sample_id,
                    source: self.index,
                    ids: r.ids,
                    mask: r.mask,
                }
            })
            .collect();
        KeptRows {
            line,
            rows,
            truncated_rows,
            supervised_tokens,
        }
    }
}

/// Batches between the reader and the commit at once, per pool thread (at least
/// [`MIN_IN_FLIGHT`]). Several are in flight so that no worker waits for a slow batch to be
/// committed before it can take up the next; a fixed number (of at most [`JOB_BYTES`] of input
/// each) so that memory does not grow with the input.
const IN_FLIGHT_PER_THREAD: usize = 8;
const MIN_IN_FLIGHT: usize = 16;

/// What the coordinator of a source hears about, from the reader and from the pool's jobs.
enum Event {
    Batch(Vec<RawRow>),
    /// Adapted and validated, waiting for dedup (only when dedup is on).
    Prepared(u64, std::thread::Result<Vec<Processed>>),
    /// Ready to commit.
    Worked(u64, std::thread::Result<Vec<Processed>>),
    ReadDone(std::thread::Result<Result<(), ReadError>>),
}

/// Streams one source. A reader thread reads batches; the pool adapts, renders and tokenizes
/// a bounded number of them at once, and this thread (not a pool worker, so it never holds
/// one up) runs what must go in input order: dedup between the two parallel stages and the
/// commit after them.
fn run_source(
    stage: Stage,
    mut deduper: Option<&mut Deduper>,
    sequence: &mut u64,
    sinks: &mut Sinks,
    progress: &dyn Progress,
    pool: &rayon::ThreadPool,
) -> Result<SourceStats, RunError> {
    let source = stage.source();
    let files = source.files.clone();
    let limit = match source.take {
        Take::All => None,
        Take::Rows(n) => Some(n),
    };
    progress.source_started(&source.name, limit);
    let mut commit = Commit {
        stage,
        limit,
        stats: SourceStats::default(),
        sequence,
    };
    if limit == Some(0) {
        return Ok(commit.stats);
    }
    let (events_tx, events) = channel::<Event>();
    // One credit per batch in flight: the reader takes one before each batch, the commit of a
    // batch gives it back. Dropping the sender stops the reader.
    let in_flight = (IN_FLIGHT_PER_THREAD * pool.current_num_threads()).max(MIN_IN_FLIGHT);
    let (credit_tx, credits) = sync_channel::<()>(in_flight);
    for _ in 0..in_flight {
        let _ = credit_tx.send(());
    }
    let mut credit_tx = Some(credit_tx);
    std::thread::scope(|threads| -> Result<(), RunError> {
        let reader_tx = events_tx.clone();
        let reader = threads.spawn(move || {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let max_rows = limit.map_or(JOB_MAX_ROWS, |take| {
                    usize::try_from(take).map_or(JOB_MAX_ROWS, |t| t.min(JOB_MAX_ROWS))
                });
                let mut batch = Vec::new();
                let mut bytes = 0;
                let send = |batch: Vec<RawRow>| {
                    credits.recv().is_ok() && reader_tx.send(Event::Batch(batch)).is_ok()
                };
                let mut open = true;
                let result = read_files(&files, &mut |row| {
                    bytes += row.record.weight();
                    batch.push(row);
                    if batch.len() >= max_rows || bytes >= JOB_BYTES {
                        bytes = 0;
                        open = send(std::mem::take(&mut batch));
                    }
                    open
                });
                if open && !batch.is_empty() {
                    send(batch);
                }
                result
            }));
            let _ = reader_tx.send(Event::ReadDone(result));
        });
        let dedup = deduper.is_some();
        let outcome = pool.in_place_scope(|jobs| -> Result<(), RunError> {
            let mut read = 0u64;
            let mut reading = true;
            let mut next_dedup = 0u64;
            let mut next_commit = 0u64;
            let mut prepared: BTreeMap<u64, Vec<Processed>> = BTreeMap::new();
            let mut worked: BTreeMap<u64, Vec<Processed>> = BTreeMap::new();
            // Fingerprints first seen per batch, until the batch is committed.
            let mut first_seen: BTreeMap<u64, Vec<Fingerprint>> = BTreeMap::new();
            // A read error counts after every row read before it, so that whether the `take`
            // was met first does not depend on timing.
            let mut read_result: Result<(), ReadError> = Ok(());
            while reading || next_commit < read {
                let Ok(event) = events.recv() else { break };
                match event {
                    Event::Batch(batch) => {
                        let (seq, tx) = (read, events_tx.clone());
                        read += 1;
                        jobs.spawn(move |_| {
                            let result =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                    let mut rows = stage.prepare_batch(batch, dedup);
                                    if !dedup {
                                        stage.work_batch(&mut rows);
                                    }
                                    rows
                                }));
                            let _ = tx.send(if dedup {
                                Event::Prepared(seq, result)
                            } else {
                                Event::Worked(seq, result)
                            });
                        });
                    }
                    Event::Prepared(seq, rows) => {
                        prepared.insert(seq, resume(rows));
                        // Dedup decides in input order, so the first occurrence always wins.
                        while let Some(mut rows) = prepared.remove(&next_dedup) {
                            if let Some(d) = deduper.as_deref_mut() {
                                first_seen.insert(next_dedup, dedup_batch(d, &mut rows));
                            }
                            let tx = events_tx.clone();
                            let seq = next_dedup;
                            jobs.spawn(move |_| {
                                let result =
                                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                        stage.work_batch(&mut rows);
                                        rows
                                    }));
                                let _ = tx.send(Event::Worked(seq, result));
                            });
                            next_dedup += 1;
                        }
                    }
                    Event::Worked(seq, rows) => {
                        worked.insert(seq, resume(rows));
                        while let Some(rows) = worked.remove(&next_commit) {
                            first_seen.remove(&next_commit);
                            next_commit += 1;
                            let unused = commit.batch(rows, sinks)?;
                            progress.rows_done(
                                commit.stats.read,
                                commit.stats.kept,
                                commit.stats.tokens,
                            );
                            if let Some(unused) = unused {
                                // The `take` is met: the rest of this batch and the later
                                // batches were never needed. Forget their first occurrences so
                                // that later sources are deduplicated exactly as if they had
                                // not been read.
                                if let Some(d) = deduper.as_deref_mut() {
                                    let later = first_seen.values().flatten();
                                    unused.iter().chain(later).for_each(|fp| d.forget(fp));
                                }
                                return Ok(());
                            }
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
        // Stops a reader that is still going (the `take` is met, or an error).
        credit_tx = None;
        drop(events);
        let read = reader.join();
        outcome?;
        match read {
            Ok(()) => Ok(()),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })?;
    Ok(commit.stats)
}

/// The value of a job, or its panic re-raised here.
fn resume<T>(result: std::thread::Result<T>) -> T {
    result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Marks the duplicates of a batch (their conversation is dropped unprocessed); returns the
/// fingerprints seen for the first time.
fn dedup_batch(deduper: &mut Deduper, rows: &mut [Processed]) -> Vec<Fingerprint> {
    let mut first_seen = Vec::new();
    for ready in rows.iter_mut().filter_map(|p| p.result.as_mut().ok()) {
        if let Some(fp) = ready.fingerprint {
            if deduper.is_duplicate(fp) {
                ready.conversation = None;
            } else {
                first_seen.push(fp);
            }
        }
    }
    first_seen
}

/// The in-order part of a source: accounting, side outputs, spilling.
struct Commit<'a, 's> {
    stage: Stage<'a>,
    limit: Option<u64>,
    stats: SourceStats,
    sequence: &'s mut u64,
}

impl Commit<'_, '_> {
    /// Commits one processed batch. Once the source's `take` is satisfied, returns the
    /// fingerprints first seen in the rows of the batch after it (counted, never used).
    fn batch(
        &mut self,
        rows: Vec<Processed>,
        sinks: &mut Sinks,
    ) -> Result<Option<Vec<Fingerprint>>, RunError> {
        let mut done = false;
        let mut unused = Vec::new();
        for processed in rows {
            self.stats.read += 1;
            if done {
                // Processed (not a duplicate) with a fingerprint: its first sighting.
                if let Ok(Ready {
                    fingerprint: Some(fp),
                    work: Some(_),
                    ..
                }) = &processed.result
                {
                    unused.push(*fp);
                }
                *self
                    .stats
                    .filtered
                    .entry(FilterReason::TakeLimit)
                    .or_default() += 1;
                continue;
            }
            let ready = match processed.result {
                Ok(ready) => ready,
                Err(Skip::Rejected(reject)) => {
                    self.reject(processed.file, processed.row, &reject, sinks)?;
                    continue;
                }
                Err(Skip::Filtered(reason)) => {
                    *self.stats.filtered.entry(reason).or_default() += 1;
                    continue;
                }
            };
            let Some(work) = ready.work else {
                self.stats.deduplicated += 1;
                continue;
            };
            self.stats.encoder_checked_rows += u64::from(work.checked.encoder);
            self.stats.renderer_checked_rows += u64::from(work.checked.renderer);
            let row = || {
                let source = self.stage.source();
                format!(
                    "{} row {}",
                    source.display_files[processed.file], processed.row
                )
            };
            match work.outcome {
                Outcome::EncoderMismatch(detail) => {
                    return Err(RunError::EncoderMismatch { row: row(), detail });
                }
                Outcome::RendererMismatch(detail) => {
                    return Err(RunError::RendererMismatch { row: row(), detail });
                }
                Outcome::Kept(kept) => {
                    self.keep(&ready.repairs, kept, sinks)?;
                    done = self.limit.is_some_and(|n| self.stats.kept >= n);
                }
                Outcome::Rejected(reject) => {
                    self.reject(processed.file, processed.row, &reject, sinks)?
                }
                Outcome::Filtered(reason) => *self.stats.filtered.entry(reason).or_default() += 1,
            }
        }
        Ok(done.then_some(unused))
    }

    fn keep(
        &mut self,
        repairs: &Repairs,
        kept: KeptRows,
        sinks: &mut Sinks,
    ) -> Result<(), RunError> {
        self.stats.kept += 1;
        self.stats.truncated_rows += kept.truncated_rows;
        self.stats.supervised_tokens += kept.supervised_tokens;
        let mut seen = Vec::new();
        for r in repairs {
            if !seen.contains(r) {
                seen.push(*r);
                *self.stats.repaired.entry(*r).or_default() += 1;
            }
        }
        sinks
            .conversations
            .write_all(kept.line.as_bytes())
            .map_err(|e| RunError::SideOutput("conversations.jsonl".to_owned(), e))?;
        for mut row in kept.rows {
            if !self.stage.plan.shuffle {
                row.key = *self.sequence;
            }
            *self.sequence += 1;
            self.stats.rows += 1;
            self.stats.tokens += row.ids.len() as u64;
            sinks.spill.push(&row)?;
        }
        Ok(())
    }

    fn reject(
        &mut self,
        file: usize,
        row: u64,
        reject: &Reject,
        sinks: &mut Sinks,
    ) -> Result<(), RunError> {
        *self.stats.rejected.entry(reject.reason).or_default() += 1;
        let source = self.stage.source();
        let record = serde_json::json!({
            "source": source.name,
            "file": source.display_files[file],
            "row": row,
            "reason": reject.reason.code(),
            "message": reject.message,
        });
        write_line(sinks.rejects, &record, "rejects.jsonl")
    }
}

fn write_line(w: &mut dyn Write, value: &Value, name: &str) -> Result<(), RunError> {
    let mut line = value.to_string();
    line.push('\n');
    w.write_all(line.as_bytes())
        .map_err(|e| RunError::SideOutput(name.to_owned(), e))
}
