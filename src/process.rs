//! The per-conversation path after curation: render (every row the policy plans) → tokenize →
//! loss mask (self-checked) → length rules, with the spot checks of the native renderer and of
//! the encoder. Shared by `build`, `render` and the tests; it decides nothing about order.

use crate::conversation::Conversation;
use crate::plan::config::{LengthPolicy, RenderPolicy};
use crate::reject::{FilterReason, Reject, RejectReason};
use crate::render::{plan_rows, Renderer};
use crate::report::timings::{PoolStage, Timings};
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

/// One tokenized row of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokenized {
    /// Row index within the conversation (the `expand` segment).
    pub segment: usize,
    pub text: String,
    pub ids: Vec<u32>,
    pub mask: Vec<u8>,
    pub truncated: bool,
    /// An edge of a supervised span fell inside a token (the header's newline merged with the
    /// reply's leading whitespace), decided by the boundary rule: counted per source.
    pub boundary_merged: bool,
    /// Where the encoder got the ids (a spot check re-encodes only derived ones).
    pub origin: Origin,
}

impl Tokenized {
    pub fn supervised(&self) -> usize {
        self.mask.iter().filter(|&&m| m == 1).count()
    }
}

/// What became of one conversation after tokenization; `K` is what a kept one carries.
#[derive(Debug)]
pub enum Outcome<K> {
    Kept(K),
    Rejected(Reject),
    Filtered(FilterReason),
    /// The encoder disagreed with the `tokenizers` crate on a spot-checked row.
    EncoderMismatch(String),
    /// The native renderer disagreed with minijinja on a spot-checked row.
    RendererMismatch(String),
}

impl<K> Outcome<K> {
    pub(crate) fn map_kept<T>(self, f: impl FnOnce(K) -> T) -> Outcome<T> {
        match self {
            Outcome::Kept(k) => Outcome::Kept(f(k)),
            Outcome::Rejected(r) => Outcome::Rejected(r),
            Outcome::Filtered(f) => Outcome::Filtered(f),
            Outcome::EncoderMismatch(m) => Outcome::EncoderMismatch(m),
            Outcome::RendererMismatch(m) => Outcome::RendererMismatch(m),
        }
    }
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
                    let failure = Some(Reject::new(RejectReason::Tokenize, e));
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
            let view = prefix(conversation, spec.end);
            let native = self.renderer.render(&view);
            let reference = self.renderer.render_template(&view);
            if native != reference {
                let at = match (&native, &reference) {
                    (Ok(a), Ok(b)) => {
                        let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y);
                        format!("differs at byte {}", common.count())
                    }
                    (Ok(_), Err(e)) => format!("minijinja raised `{}`", e.message),
                    (Err(e), _) => format!("failed with `{}`", e.message),
                };
                return Err(format!(
                    "the native render of row segment {segment} {at} (minijinja is the reference)"
                ));
            }
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
                .map(|rows| rows.map_or_else(|outcome| outcome, |rows| self.length_rules(rows)))
                .collect()
        })
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
                Err(e) => return Err(Outcome::EncoderMismatch(e)),
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
