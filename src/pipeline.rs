//! Runs a [`Plan`]: read → adapt → validate → curate → render → tokenize → write, streaming
//! each source in fixed-size batches. Per-row work runs on the caller's rayon pool; everything
//! that decides order or counts (dedup, `take`, keys, stats) runs sequentially in input order,
//! so the output is byte-identical at any thread count.

use crate::adapt::{to_sharegpt_record, Adapter, Repairs};
use crate::conversation::Conversation;
use crate::curate::{fingerprint, Deduper, Fingerprint};
use crate::plan::config::{LengthPolicy, RenderPolicy, Take};
use crate::plan::Plan;
use crate::read::{read_files, RawRow, ReadError};
use crate::reject::{FilterReason, Reject, RejectReason, Skip};
use crate::render::{plan_rows, Renderer};
use crate::report::SourceStats;
use crate::tokenize::{mask, Tokenizer};
use crate::validate::Validator;
use crate::write::{shuffle_key, Spill, TokenRow};
use rayon::prelude::*;
use serde_json::Value;
use std::io::Write;
use std::sync::mpsc::sync_channel;

/// Rows handed to the thread pool at once.
const BATCH_ROWS: usize = 512;

/// The per-row stages after reading, shared by `build` and `render`.
pub struct RowProcessor {
    pub renderer: Renderer,
    pub tokenizer: std::sync::Arc<Tokenizer>,
    pub validator: Validator,
    pub policy: RenderPolicy,
    pub max_tokens: usize,
    pub length_policy: LengthPolicy,
    pub min_supervised_tokens: usize,
    /// When the encoder is not the `tokenizers` crate: the share of rows (in basis points,
    /// chosen by a hash of the row id) also encoded with it; any difference stops the build.
    pub verify_basis_points: Option<u32>,
}

/// One tokenized row of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokenized {
    /// Row index within the conversation (the `expand` segment).
    pub segment: usize,
    pub text: String,
    pub ids: Vec<u32>,
    pub mask: Vec<u8>,
    pub truncated: bool,
}

impl Tokenized {
    pub fn supervised(&self) -> usize {
        self.mask.iter().filter(|&&m| m == 1).count()
    }
}

/// What became of one conversation after tokenization.
#[derive(Debug)]
pub enum Outcome {
    Kept(Vec<Tokenized>),
    Rejected(Reject),
    Filtered(FilterReason),
    /// The encoder disagreed with the `tokenizers` crate on a spot-checked row.
    EncoderMismatch(String),
}

impl RowProcessor {
    /// Renders, tokenizes and masks every row the policy plans for a conversation, without
    /// length rules. Any failure rejects the whole conversation (its rows belong together).
    pub fn tokenize(&self, conversation: &Conversation) -> Result<Vec<Tokenized>, Reject> {
        let specs = plan_rows(conversation, self.policy);
        let mut rows = Vec::with_capacity(specs.len());
        for (segment, spec) in specs.into_iter().enumerate() {
            let prefix;
            let view = if spec.end == conversation.messages.len() {
                conversation
            } else {
                prefix = Conversation {
                    messages: conversation.messages[..spec.end].to_vec(),
                    tools: conversation.tools.clone(),
                };
                &prefix
            };
            let text = self
                .renderer
                .render(view)
                .map_err(|e| Reject::new(RejectReason::Template, e.message))?;
            let (ids, mask) = self.encode_masked(&text, &spec.supervise)?;
            rows.push(Tokenized {
                segment,
                text,
                ids,
                mask,
                truncated: false,
            });
        }
        Ok(rows)
    }

    /// Encodes rendered text and computes its verified loss mask.
    pub fn encode_masked(
        &self,
        text: &str,
        supervise: &std::ops::Range<usize>,
    ) -> Result<(Vec<u32>, Vec<u8>), Reject> {
        let t = &self.tokenizer;
        let ids = t
            .encoder
            .encode(text)
            .map_err(|e| Reject::new(RejectReason::Tokenize, e))?;
        let (mask, _) = mask::compute(&ids, &t.markers, supervise);
        mask::verify(
            &t.normalize(text),
            &ids,
            &mask,
            &t.bytes,
            &t.markers,
            supervise,
        )
        .map_err(|e| Reject::new(RejectReason::MaskCheck, e.to_string()))?;
        Ok((ids, mask))
    }

    /// Applies `max_tokens`, the length policy and `min_supervised_tokens` to one row.
    fn apply_length_rules(&self, mut row: Tokenized) -> Result<Tokenized, FilterReason> {
        if row.ids.len() > self.max_tokens {
            if self.length_policy == LengthPolicy::Drop {
                return Err(FilterReason::TooLong);
            }
            let all = 0..usize::MAX;
            let (_, blocks) = mask::compute(&row.ids, &self.tokenizer.markers, &all);
            let cut = blocks
                .iter()
                .map(|b| b.end)
                .filter(|&end| end <= self.max_tokens)
                .max()
                .ok_or(FilterReason::TooLong)?;
            row.ids.truncate(cut);
            row.mask.truncate(cut);
            row.truncated = true;
        }
        if row.supervised() < self.min_supervised_tokens {
            return Err(FilterReason::TooFewSupervised);
        }
        Ok(row)
    }

    /// Whether the row with this id is spot-checked against the reference encoder.
    pub fn spot_checked(&self, row_id: &str) -> bool {
        self.verify_basis_points
            .is_some_and(|bp| shuffle_key(0x5eed_c4ec, row_id) % 10_000 < u64::from(bp))
    }

    /// The full per-conversation path of a build after validation: tokenize, spot-check the
    /// encoder when asked, apply the length rules.
    fn process(&self, conversation: &Conversation, spot_check: bool) -> Outcome {
        let rows = match self.tokenize(conversation) {
            Ok(rows) => rows,
            Err(reject) => return Outcome::Rejected(reject),
        };
        if spot_check {
            for row in &rows {
                match self.tokenizer.reference_encode(&row.text) {
                    Ok(ids) if ids == row.ids => {}
                    Ok(ids) => {
                        let at = ids.iter().zip(&row.ids).take_while(|(a, b)| a == b).count();
                        return Outcome::EncoderMismatch(format!(
                            "the encoder's ids differ from the `tokenizers` crate's at token {at} of row segment {}",
                            row.segment
                        ));
                    }
                    Err(e) => return Outcome::EncoderMismatch(e),
                }
            }
        }
        let mut kept = Vec::with_capacity(rows.len());
        let mut first_filter = None;
        for row in rows {
            match self.apply_length_rules(row) {
                Ok(row) => kept.push(row),
                Err(reason) => {
                    first_filter.get_or_insert(reason);
                }
            }
        }
        match (kept.is_empty(), first_filter) {
            (true, Some(reason)) => Outcome::Filtered(reason),
            (true, None) => Outcome::Rejected(Reject::new(
                RejectReason::NoAssistantTurn,
                "no row to supervise under this render policy",
            )),
            (false, _) => Outcome::Kept(kept),
        }
    }
}

/// Where a run writes its side outputs and rows.
pub struct Sinks<'a> {
    pub spill: &'a mut Spill,
    pub rejects: &'a mut dyn Write,
    pub conversations: &'a mut dyn Write,
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
    #[error("the fast encoder disagrees with the `tokenizers` crate on {row}: {detail}; rebuild with `tokenizer.backend: hf` and report this row")]
    EncoderMismatch { row: String, detail: String },
}

/// Runs every source of the plan; returns per-source stats in plan order.
pub fn run(
    plan: &Plan,
    processor: &RowProcessor,
    sinks: &mut Sinks,
    progress: &dyn Progress,
) -> Result<Vec<SourceStats>, RunError> {
    let mut deduper = plan.dedup.then(Deduper::default);
    let mut sequence = 0u64;
    let mut all = Vec::with_capacity(plan.sources.len());
    for (index, source) in plan.sources.iter().enumerate() {
        let mut run = SourceRun {
            plan,
            processor,
            index: index as u16,
            stats: SourceStats::default(),
            sequence: &mut sequence,
            deduper: deduper.as_mut(),
        };
        run.run(sinks, progress)?;
        progress.source_finished(&source.name, &run.stats);
        all.push(run.stats);
    }
    Ok(all)
}

struct SourceRun<'a> {
    plan: &'a Plan,
    processor: &'a RowProcessor,
    index: u16,
    stats: SourceStats,
    sequence: &'a mut u64,
    deduper: Option<&'a mut Deduper>,
}

/// A row after adapt + validate (run in parallel).
type Prepared = Result<(Conversation, Repairs, Option<Fingerprint>), Skip>;

impl SourceRun<'_> {
    fn source(&self) -> &crate::plan::SourcePlan {
        &self.plan.sources[self.index as usize]
    }

    fn run(&mut self, sinks: &mut Sinks, progress: &dyn Progress) -> Result<(), RunError> {
        let source = self.source();
        let files = source.files.clone();
        let limit = match source.take {
            Take::All => None,
            Take::Rows(n) => Some(n),
        };
        progress.source_started(&source.name, limit);
        if limit == Some(0) {
            return Ok(());
        }
        let (tx, rx) = sync_channel::<Vec<RawRow>>(4);
        std::thread::scope(|scope| -> Result<(), RunError> {
            let reader = scope.spawn(move || {
                let mut batch = Vec::with_capacity(BATCH_ROWS);
                let mut open = true;
                let result = read_files(&files, &mut |row| {
                    batch.push(row);
                    if batch.len() == BATCH_ROWS {
                        open = tx.send(std::mem::take(&mut batch)).is_ok();
                    }
                    open
                });
                if open && !batch.is_empty() {
                    let _ = tx.send(batch);
                }
                result
            });
            for batch in rx.iter() {
                let done = self.batch(batch, limit, sinks)?;
                progress.rows_done(self.stats.read, self.stats.kept, self.stats.tokens);
                if done {
                    break;
                }
            }
            // Dropping the receiver (end of scope) makes a reader that is still going stop.
            drop(rx);
            match reader.join() {
                Ok(result) => result.map_err(RunError::from),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Processes one batch; returns true once the source's `take` is satisfied.
    fn batch(
        &mut self,
        batch: Vec<RawRow>,
        limit: Option<u64>,
        sinks: &mut Sinks,
    ) -> Result<bool, RunError> {
        let processor = self.processor;
        let adapter: &Adapter = &self.source().adapter;
        let dedup = self.deduper.is_some();
        let prepared: Vec<Prepared> = batch
            .par_iter()
            .map(|raw| {
                let value = raw
                    .value
                    .as_ref()
                    .map_err(|e| Reject::new(RejectReason::InvalidJson, e.clone()))?;
                let mut repairs = Repairs::new();
                let conversation = adapter.prepare(value, &mut repairs)?;
                let conversation = processor.validator.validate(conversation, &mut repairs)?;
                let fp = dedup.then(|| fingerprint(&conversation));
                Ok((conversation, repairs, fp))
            })
            .collect();
        // Dedup decides in input order, so the first occurrence always wins.
        let duplicate: Vec<bool> = prepared
            .iter()
            .map(|p| match (p, self.deduper.as_mut()) {
                (Ok((_, _, Some(fp))), Some(d)) => d.is_duplicate(*fp),
                _ => false,
            })
            .collect();
        let outcomes: Vec<Option<(Outcome, bool)>> = prepared
            .par_iter()
            .zip(duplicate.par_iter())
            .zip(batch.par_iter())
            .map(|((p, &dup), raw)| match p {
                Ok((conversation, _, _)) if !dup => {
                    let check = processor.spot_checked(&self.sample_id(raw));
                    Some((processor.process(conversation, check), check))
                }
                _ => None,
            })
            .collect();
        let mut done = false;
        for ((raw, prepared), (outcome, dup)) in batch
            .iter()
            .zip(prepared)
            .zip(outcomes.into_iter().zip(duplicate))
        {
            self.stats.read += 1;
            if done {
                *self
                    .stats
                    .filtered
                    .entry(FilterReason::TakeLimit)
                    .or_default() += 1;
                continue;
            }
            let (conversation, repairs) = match prepared {
                Ok((c, r, _)) => (c, r),
                Err(Skip::Rejected(reject)) => {
                    self.reject(raw, &reject, sinks)?;
                    continue;
                }
                Err(Skip::Filtered(reason)) => {
                    *self.stats.filtered.entry(reason).or_default() += 1;
                    continue;
                }
            };
            if dup {
                self.stats.deduplicated += 1;
                continue;
            }
            let outcome = outcome.map(|(o, checked)| {
                self.stats.encoder_checked_rows += u64::from(checked);
                o
            });
            match outcome {
                Some(Outcome::EncoderMismatch(detail)) => {
                    return Err(RunError::EncoderMismatch {
                        row: format!("{} row {}", self.source().display_files[raw.file], raw.row),
                        detail,
                    })
                }
                Some(Outcome::Kept(rows)) => {
                    self.keep(raw, &conversation, &repairs, rows, sinks)?;
                    done = limit.is_some_and(|n| self.stats.kept >= n);
                }
                Some(Outcome::Rejected(reject)) => self.reject(raw, &reject, sinks)?,
                Some(Outcome::Filtered(reason)) => {
                    *self.stats.filtered.entry(reason).or_default() += 1
                }
                None => {}
            }
        }
        Ok(done)
    }

    fn sample_id(&self, raw: &RawRow) -> String {
        // Stable across runs: source name, file index and record index within the file.
        format!("{}:{}:{}", self.source().name, raw.file, raw.row)
    }

    fn keep(
        &mut self,
        raw: &RawRow,
        conversation: &Conversation,
        repairs: &Repairs,
        rows: Vec<Tokenized>,
        sinks: &mut Sinks,
    ) -> Result<(), RunError> {
        let id = self.sample_id(raw);
        self.stats.kept += 1;
        let mut seen = Vec::new();
        for r in repairs {
            if !seen.contains(r) {
                seen.push(*r);
                *self.stats.repaired.entry(*r).or_default() += 1;
            }
        }
        let record = to_sharegpt_record(conversation, &id, &self.source().name);
        write_line(sinks.conversations, &record, "conversations.jsonl")?;
        for row in rows {
            let sample_id = format!("{id}:{}", row.segment);
            let key = if self.plan.shuffle {
                shuffle_key(self.plan.seed, &sample_id)
            } else {
                *self.sequence
            };
            *self.sequence += 1;
            self.stats.rows += 1;
            self.stats.tokens += row.ids.len() as u64;
            self.stats.supervised_tokens += row.supervised() as u64;
            self.stats.truncated_rows += u64::from(row.truncated);
            sinks.spill.push(&TokenRow {
                key,
                sample_id,
                source: self.index,
                ids: row.ids,
                mask: row.mask,
            })?;
        }
        Ok(())
    }

    fn reject(&mut self, raw: &RawRow, reject: &Reject, sinks: &mut Sinks) -> Result<(), RunError> {
        *self.stats.rejected.entry(reject.reason).or_default() += 1;
        let source = self.source();
        let record = serde_json::json!({
            "source": source.name,
            "file": source.display_files[raw.file],
            "row": raw.row,
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
