//! The per-conversation path after curation: render (every row the policy plans) → tokenize →
//! loss mask (self-checked) → length rules, with the spot checks of the native renderer and of
//! the encoder. Shared by `build`, `render` and the tests; it decides nothing about order.

use crate::conversation::Conversation;
use crate::plan::config::{LengthPolicy, RenderPolicy};
use crate::reject::{FilterReason, Reject, RejectReason};
use crate::render::{plan_rows, Renderer, RowSpec};
use crate::report::timings::{PoolStage, Timings};
use crate::tokenize::mask_config::MaskSettings;
pub use crate::tokenize::outcome::{Outcome, Tokenized};
use crate::tokenize::{mask, Origin, Tokenizer};
use crate::validate::Validator;
use crate::write::shuffle_key;
/// The per-row stages after reading, shared by `build` and `render`.
pub struct RowProcessor {
    pub renderer: Renderer,
    pub tokenizer: std::sync::Arc<Tokenizer>,
    pub validator: Validator,
    pub policy: RenderPolicy,
    pub max_tokens: usize,
    pub length_policy: LengthPolicy,
    pub min_supervised_tokens: usize,
    /// How the loss mask is drawn inside supervised turns (the `mask:` settings).
    pub mask: mask::MaskRule,
    /// When the encoder is not the `tokenizers` crate on whole texts (the fast encoder, the
    /// segment cache): the share of rows (in basis points, chosen by a hash of the row id)
    /// also encoded with it, where their ids are [`Origin::Derived`]; any difference stops the
    /// build.
    pub verify_basis_points: Option<u32>,
    /// When the renderer evaluates the template natively: the share of rows (in basis points,
    /// chosen by a hash of the row id) also rendered with minijinja; any difference stops the
    /// build.
    pub render_verify_basis_points: Option<u32>,
}

/// Which independent re-checks a row gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpotChecks {
    /// Re-encode with the `tokenizers` crate.
    pub encoder: bool,
    /// Re-render with minijinja.
    pub renderer: bool,
}

/// A conversation's rows rendered, up to its first render failure.
struct Rendered {
    rows: Vec<RenderedRow>,
    failure: Option<Reject>,
}

struct RenderedRow {
    segment: usize,
    supervise: std::ops::Range<usize>,
    text: String,
}

/// Rendered rows encoded, up to the first failure (of the encoder, or else of the renderer).
struct Encoded {
    rows: Vec<(RenderedRow, Vec<u32>, Origin)>,
    failure: Option<Reject>,
}

impl RowProcessor {
    /// Renders, tokenizes and masks every row the policy plans for a conversation, without
    /// length rules. Any failure rejects the whole conversation (its rows belong together).
    pub fn tokenize(&self, conversation: &Conversation) -> Result<Vec<Tokenized>, Reject> {
        self.mask_rows(self.encode_rows(self.render_rows(conversation)))
    }

    fn render_rows(&self, conversation: &Conversation) -> Rendered {
        let specs = plan_rows(conversation, self.policy);
        let mut rows = Vec::with_capacity(specs.len());
        for (segment, spec) in specs.into_iter().enumerate() {
            match self.renderer.render(&prefix(conversation, spec.end)) {
                Ok(text) => rows.push(RenderedRow {
                    segment,
                    supervise: spec.supervise,
                    text,
                }),
                Err(e) => {
                    let failure = Some(Reject::new(RejectReason::Template, e.message));
                    return Rendered { rows, failure };
                }
            }
        }
        Rendered {
            rows,
            failure: None,
        }
    }

    fn encode_rows(&self, rendered: Rendered) -> Encoded {
        let mut rows = Vec::with_capacity(rendered.rows.len());
        for row in rendered.rows {
            match self.tokenizer.encoder.encode_traced(&row.text) {
                Ok((ids, origin)) => rows.push((row, ids, origin)),
                Err(e) => {
                    let failure = Some(Reject::new(RejectReason::Tokenize, e.to_string()));
                    return Encoded { rows, failure };
                }
            }
        }
        Encoded {
            rows,
            failure: rendered.failure,
        }
    }

    /// Masks and checks the encoded rows in order; the first failure, in row order, rejects.
    fn mask_rows(&self, encoded: Encoded) -> Result<Vec<Tokenized>, Reject> {
        let mut rows = Vec::with_capacity(encoded.rows.len());
        for (row, ids, origin) in encoded.rows {
            let (mask, boundary_merged) = self.mask(&row.text, &ids, &row.supervise)?;
            rows.push(Tokenized {
                segment: row.segment,
                text: row.text,
                ids,
                mask,
                truncated: false,
                boundary_merged,
                origin,
            });
        }
        match encoded.failure {
            Some(reject) => Err(reject),
            None => Ok(rows),
        }
    }

    /// The verified loss mask of encoded text, and whether a span edge fell inside a token.
    fn mask(
        &self,
        text: &str,
        ids: &[u32],
        supervise: &std::ops::Range<usize>,
    ) -> Result<(Vec<u8>, bool), Reject> {
        let t = &self.tokenizer;
        let computed = mask::compute(ids, &t.markers, &t.bytes, &self.mask, supervise);
        let verified = mask::verify(
            &t.normalize(text),
            ids,
            &computed.mask,
            &t.bytes,
            &t.markers,
            &self.mask,
            supervise,
        )
        .map_err(|e| Reject::new(RejectReason::MaskCheck, e.to_string()))?;
        // Token space and text space must agree on it too.
        if verified.boundary_merged != computed.boundary_merged {
            return Err(Reject::new(
                RejectReason::MaskCheck,
                format!(
                    "the token-space mask {} a span edge inside a token and the text check {}",
                    if computed.boundary_merged {
                        "found"
                    } else {
                        "did not find"
                    },
                    if verified.boundary_merged {
                        "did"
                    } else {
                        "did not"
                    },
                ),
            ));
        }
        Ok((computed.mask, computed.boundary_merged))
    }

    /// Applies `max_tokens`, the length policy and `min_supervised_tokens` to one row.
    fn apply_length_rules(&self, mut row: Tokenized) -> Result<Tokenized, FilterReason> {
        if row.ids.len() > self.max_tokens {
            if self.length_policy == LengthPolicy::Drop {
                return Err(FilterReason::TooLong);
            }
            let all = 0..usize::MAX;
            let t = &self.tokenizer;
            let blocks = mask::compute(&row.ids, &t.markers, &t.bytes, &self.mask, &all).blocks;
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

    /// Which re-checks the row with this id gets (each chosen by its own hash of the id).
    pub fn spot_checks(&self, row_id: &str) -> SpotChecks {
        let chosen = |basis_points: Option<u32>, salt: u64| {
            basis_points.is_some_and(|bp| shuffle_key(salt, row_id) % 10_000 < u64::from(bp))
        };
        SpotChecks {
            encoder: chosen(self.verify_basis_points, 0x5eed_c4ec),
            renderer: chosen(self.render_verify_basis_points, 0x7e3d_c4ec),
        }
    }

    /// Renders every row the policy plans for `conversation` with minijinja and compares it
    /// with the native render.
    fn check_renderer(&self, conversation: &Conversation) -> Result<(), String> {
        for (segment, spec) in plan_rows(conversation, self.policy).into_iter().enumerate() {
            self.same_render(&prefix(conversation, spec.end), segment)?;
        }
        Ok(())
    }

    /// The full per-conversation path of a build after validation, for a batch: spot-check the
    /// renderer when asked, render, encode, mask (spot-checking the encoder when asked), apply
    /// the length rules. Each stage runs over the whole batch before the next, so that its code
    /// and tables stay in cache (the encoder evicts the token table the mask check reads), and
    /// is timed as a whole. Each row's `SpotChecks` is left saying which checks it got: an
    /// encoder check is dropped for a row whose ids all came from the reference itself.
    pub fn process_batch(
        &self,
        batch: &mut [(&Conversation, SpotChecks)],
        timings: &Timings,
    ) -> Vec<Outcome<Vec<Tokenized>>> {
        // A conversation of several rows (`expand`, `turns`) goes through one row at a time,
        // so that its memory stays linear in its length; the rest stage by stage.
        let plans: Vec<Vec<RowSpec>> = batch
            .iter()
            .map(|(c, _)| plan_rows(c, self.policy))
            .collect();
        if plans.iter().any(|p| p.len() > 1) {
            let mut outcomes: Vec<Option<Outcome<Vec<Tokenized>>>> = Vec::new();
            let mut single: Vec<(&Conversation, SpotChecks)> = Vec::new();
            let mut at = Vec::new();
            for (i, ((conversation, checks), specs)) in batch.iter_mut().zip(plans).enumerate() {
                if specs.len() > 1 {
                    outcomes.push(Some(self.stream_rows(conversation, specs, checks, timings)));
                } else {
                    outcomes.push(None);
                    single.push((conversation, *checks));
                    at.push(i);
                }
            }
            let done = self.process_stages(&mut single, timings);
            for ((i, outcome), (_, checks)) in at.into_iter().zip(done).zip(single) {
                outcomes[i] = Some(outcome);
                batch[i].1 = checks;
            }
            return outcomes.into_iter().flatten().collect();
        }
        self.process_stages(batch, timings)
    }

    /// [`process_batch`](Self::process_batch) for conversations of one row each: every stage
    /// over the whole batch before the next.
    fn process_stages(
        &self,
        batch: &mut [(&Conversation, SpotChecks)],
        timings: &Timings,
    ) -> Vec<Outcome<Vec<Tokenized>>> {
        type Step<T> = Result<T, Outcome<Vec<Tokenized>>>;
        let checked: Vec<Step<()>> = timings.time(PoolStage::SpotChecks, || {
            batch
                .iter()
                .map(|&(conversation, checks)| match checks.renderer {
                    true => self
                        .check_renderer(conversation)
                        .map_err(Outcome::RendererMismatch),
                    false => Ok(()),
                })
                .collect()
        });
        let rendered: Vec<Step<Rendered>> = timings.time(PoolStage::Render, || {
            batch
                .iter()
                .zip(checked)
                .map(|(&(conversation, _), checked)| {
                    checked.map(|()| self.render_rows(conversation))
                })
                .collect()
        });
        let encoded: Vec<Step<Encoded>> = timings.time(PoolStage::Encode, || {
            rendered
                .into_iter()
                .map(|r| r.map(|r| self.encode_rows(r)))
                .collect()
        });
        let masked: Vec<Step<Vec<Tokenized>>> = timings.time(PoolStage::Mask, || {
            encoded
                .into_iter()
                .map(|e| e.and_then(|e| self.mask_rows(e).map_err(Outcome::Rejected)))
                .collect()
        });
        let verified: Vec<Step<Vec<Tokenized>>> = timings.time(PoolStage::SpotChecks, || {
            masked
                .into_iter()
                .zip(batch.iter_mut())
                .map(|(rows, (_, checks))| {
                    let chosen = std::mem::take(&mut checks.encoder);
                    let rows = rows?;
                    if chosen {
                        checks.encoder = self.check_encoder(&rows)?;
                    }
                    Ok(rows)
                })
                .collect()
        });
        timings.time(PoolStage::Mask, || {
            verified
                .into_iter()
                .map(|rows| {
                    rows.map_or_else(
                        |outcome| outcome,
                        |rows| {
                            let rows = rows.into_iter().map(without_text).collect();
                            self.length_rules(rows)
                        },
                    )
                })
                .collect()
        })
    }

    /// The rows of one conversation, one at a time: render (and spot-check the render), encode,
    /// mask, spot-check the ids, apply the length rules, keep or drop, then the next row; only
    /// kept rows stay in memory, without their text. Rows stop once the text every later row
    /// shares is longer than `max_tokens` on its own: none of them could be kept (with
    /// `truncate`, each would be cut before its supervised turns), so they are not rendered.
    fn stream_rows(
        &self,
        conversation: &Conversation,
        specs: Vec<RowSpec>,
        checks: &mut SpotChecks,
        timings: &Timings,
    ) -> Outcome<Vec<Tokenized>> {
        let check_encoder = std::mem::take(&mut checks.encoder);
        let mut kept = Vec::new();
        let mut first_filter = None;
        for (segment, spec) in specs.into_iter().enumerate() {
            let view = prefix(conversation, spec.end);
            if checks.renderer {
                let same = timings.time(PoolStage::SpotChecks, || self.same_render(&view, segment));
                if let Err(m) = same {
                    return Outcome::RendererMismatch(m);
                }
            }
            let text = match timings.time(PoolStage::Render, || self.renderer.render(&view)) {
                Ok(text) => text,
                Err(e) => return Outcome::Rejected(Reject::new(RejectReason::Template, e.message)),
            };
            drop(view);
            let (ids, origin) = match timings.time(PoolStage::Encode, || {
                self.tokenizer.encoder.encode_traced(&text)
            }) {
                Ok(encoded) => encoded,
                Err(e) => {
                    return Outcome::Rejected(Reject::new(RejectReason::Tokenize, e.to_string()))
                }
            };
            let masked = timings.time(PoolStage::Mask, || self.mask_row(&text, &ids, &spec));
            let (mask, boundary_merged, shared_tokens) = match masked {
                Ok(m) => m,
                Err(reject) => return Outcome::Rejected(reject),
            };
            let row = Tokenized {
                segment,
                text,
                ids,
                mask,
                truncated: false,
                boundary_merged,
                origin,
            };
            if check_encoder {
                let checked = timings.time(PoolStage::SpotChecks, || {
                    self.check_encoder(std::slice::from_ref(&row))
                });
                match checked {
                    Ok(true) => checks.encoder = true,
                    Ok(false) => {}
                    Err(outcome) => return outcome,
                }
            }
            match timings.time(PoolStage::Mask, || {
                self.apply_length_rules(without_text(row))
            }) {
                Ok(row) => kept.push(row),
                Err(reason) => {
                    first_filter.get_or_insert(reason);
                }
            }
            if self.no_later_row_fits(shared_tokens) {
                break;
            }
        }
        self.outcome_of(kept, first_filter)
    }

    /// Whether rows whose shared text alone has `shared_tokens` tokens can all be left out:
    /// each is longer than that, so `drop` drops them, and `truncate` cuts each before its
    /// supervised turns (then too few are supervised, unless none need be).
    fn no_later_row_fits(&self, shared_tokens: usize) -> bool {
        shared_tokens >= self.max_tokens
            && (self.length_policy == LengthPolicy::Drop || self.min_supervised_tokens > 0)
    }

    /// Mask of one row, whether a span edge fell inside a token, and how many tokens come
    /// before the header of the row's first assistant turn after its last query.
    fn mask_row(
        &self,
        text: &str,
        ids: &[u32],
        spec: &RowSpec,
    ) -> Result<(Vec<u8>, bool, usize), Reject> {
        let t = &self.tokenizer;
        let (mask, merged) = self.mask(text, ids, &spec.supervise)?;
        let all = 0..usize::MAX;
        let blocks = mask::compute(ids, &t.markers, &t.bytes, &self.mask, &all).blocks;
        let shared = blocks.get(spec.shared).map_or(ids.len(), |b| b.start);
        Ok((mask, merged, shared))
    }

    /// A native render of one row compared with minijinja's.
    fn same_render(&self, view: &Conversation, segment: usize) -> Result<(), String> {
        let native = self.renderer.render(view);
        let reference = self.renderer.render_template(view);
        if native == reference {
            return Ok(());
        }
        let at = match (&native, &reference) {
            (Ok(a), Ok(b)) => {
                let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y);
                format!("differs at byte {}", common.count())
            }
            (Ok(_), Err(e)) => format!("minijinja raised `{}`", e.message),
            (Err(e), _) => format!("failed with `{}`", e.message),
        };
        Err(format!(
            "the native render of row segment {segment} {at} (minijinja is the reference)"
        ))
    }

    /// Re-encodes the rows whose ids are derived with the `tokenizers` crate and compares the
    /// ids; `Ok(false)` when no row was.
    fn check_encoder(&self, rows: &[Tokenized]) -> Result<bool, Outcome<Vec<Tokenized>>> {
        let mut checked = false;
        for row in rows.iter().filter(|r| r.origin == Origin::Derived) {
            checked = true;
            match self.tokenizer.reference_encode(&row.text) {
                Ok(ids) if ids == row.ids => {}
                Ok(ids) => {
                    let at = ids.iter().zip(&row.ids).take_while(|(a, b)| a == b).count();
                    return Err(Outcome::EncoderMismatch(format!(
                        "the encoder's ids differ from the `tokenizers` crate's at token {at} of row segment {}",
                        row.segment
                    )));
                }
                Err(e) => return Err(Outcome::EncoderMismatch(e.to_string())),
            }
        }
        Ok(checked)
    }

    /// The length rules over a conversation's rows: kept if any row is.
    fn length_rules(&self, rows: Vec<Tokenized>) -> Outcome<Vec<Tokenized>> {
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
        self.outcome_of(kept, first_filter)
    }

    /// The length rules over pre-tokenized rows (`format: speculator`), as over rendered ones:
    /// with `truncate`, a row is cut at the end of the last assistant turn (as the tokenizer's
    /// chat markers find it in the ids) that fits. A row cut down to no supervised token is
    /// filtered `too_few_supervised` whatever `min_supervised_tokens` says, as speculators
    /// drops it.
    pub fn pretokenized(&self, rows: Vec<Tokenized>) -> Outcome<Vec<Tokenized>> {
        match self.length_rules(rows) {
            Outcome::Kept(rows) => {
                let rows: Vec<Tokenized> =
                    rows.into_iter().filter(|r| r.supervised() > 0).collect();
                self.outcome_of(rows, Some(FilterReason::TooFewSupervised))
            }
            other => other,
        }
    }

    /// Kept if any row is; else the first row's filter reason.
    fn outcome_of(
        &self,
        kept: Vec<Tokenized>,
        first_filter: Option<FilterReason>,
    ) -> Outcome<Vec<Tokenized>> {
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

/// The conversation up to message `end`, borrowed when that is all of it.
pub fn prefix(conversation: &Conversation, end: usize) -> std::borrow::Cow<'_, Conversation> {
    if end == conversation.messages.len() {
        std::borrow::Cow::Borrowed(conversation)
    } else {
        std::borrow::Cow::Owned(Conversation {
            messages: conversation.messages[..end].to_vec(),
            tools: conversation.tools.clone(),
        })
    }
}

/// The mask rule for `settings`, with the think prefill taken from the template itself: the
/// text its generation prompt writes after the assistant header (Qwen3.6: `<think>\n`; with
/// `enable_thinking: false`, the empty think block; Qwen3: nothing).
pub fn mask_rule(
    settings: &MaskSettings,
    renderer: &Renderer,
    tokenizer: &Tokenizer,
) -> anyhow::Result<mask::MaskRule> {
    let probe = serde_json::json!([{"role": "user", "content": "x"}]);
    let prompt = renderer
        .render_json(probe, &[], true)
        .map_err(|e| anyhow::anyhow!("the template's generation prompt: {}", e.message))?;
    let header = tokenizer.markers.header_text;
    let prefill = prompt
        .rfind(header)
        .map_or("", |at| &prompt[at + header.len()..]);
    mask::MaskRule::new(settings, prefill, tokenizer.encoder.as_ref())
        .map_err(|e| anyhow::anyhow!("encoding the think prefill: {e}"))
}

/// A checked row without its text (see [`Tokenized::text`]).
fn without_text(row: Tokenized) -> Tokenized {
    Tokenized {
        text: String::new(),
        ..row
    }
}
