//! The loss mask: 1 on every token of a supervised assistant turn after its header
//! `<|im_start|>assistant\n` (think block, content, tool-call XML) through `<|im_end|>` and the
//! newline after it; 0 elsewhere (the `mask:` settings can leave out the end-of-turn tokens and
//! the template's think prefill). A token the span's edge falls into (the header's newline
//! merged with a reply's leading whitespace) is supervised when its first character is in the
//! span (`first_char`, default) or when any is (`any_overlap`). Computed in token space in one
//! linear pass, then verified against the same spans found independently in the text.

use super::mask_config::{Boundary, MaskSettings};
use super::vocab::{TokenBytes, TokenizerError};
use super::{Encoder, Tokenizer};
use std::ops::Range;

/// The ChatML turn markers, as text and as token ids of the loaded tokenizer.
pub struct ChatMarkers {
    pub header_text: &'static str,
    pub end_text: &'static str,
    pub header_ids: Vec<u32>,
    pub end_id: u32,
    pub newline_id: u32,
    /// Searchers for the two texts, built once (building one costs about what a row's search
    /// does).
    header_finder: memchr::memmem::Finder<'static>,
    end_finder: memchr::memmem::Finder<'static>,
}

impl ChatMarkers {
    pub fn chatml(encoder: &dyn Encoder, bytes: &TokenBytes) -> Result<Self, TokenizerError> {
        let header_text = "<|im_start|>assistant\n";
        let end_text = "<|im_end|>";
        let single = |text: &str| -> Result<u32, TokenizerError> {
            match encoder.encode(text).as_deref() {
                Ok([id]) if bytes.get(*id) == text.as_bytes() => Ok(*id),
                _ => Err(TokenizerError::MissingToken(text.to_owned())),
            }
        };
        let end_id = single(end_text)?;
        let newline_id = single("\n")?;
        single("<|im_start|>")?;
        let header_ids = encoder
            .encode(header_text)
            .map_err(|_| TokenizerError::MissingToken(header_text.to_owned()))?;
        Ok(ChatMarkers {
            header_text,
            end_text,
            header_ids,
            end_id,
            newline_id,
            header_finder: memchr::memmem::Finder::new(header_text),
            end_finder: memchr::memmem::Finder::new(end_text),
        })
    }
}

/// How the mask is drawn inside each supervised assistant turn: the settings of the `mask:`
/// section, with the template's think prefill as text and ids.
#[derive(Debug, Clone)]
pub struct MaskRule {
    pub boundary: Boundary,
    /// Supervise `<|im_end|>` and the newline after it.
    pub end_of_turn: bool,
    /// Text at the start of an assistant turn left unsupervised (the template's generation
    /// prompt tail, e.g. `<think>\n`), when the settings say so and the template writes one.
    pub prefill: Option<Prefill>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefill {
    pub text: String,
    pub ids: Vec<u32>,
}

impl MaskRule {
    /// Today's default: every token of the turn after the header through `<|im_end|>\n`,
    /// first-character boundary rule.
    pub fn standard() -> Self {
        MaskRule {
            boundary: Boundary::FirstChar,
            end_of_turn: true,
            prefill: None,
        }
    }

    /// The rule for `settings`; `prefill` is the text the template writes after the assistant
    /// header of a generation prompt (ignored when the settings supervise it).
    pub fn new(
        settings: &MaskSettings,
        prefill: &str,
        encoder: &dyn Encoder,
    ) -> Result<Self, super::EncodeError> {
        let prefill = if settings.think_prefill || prefill.is_empty() {
            None
        } else {
            Some(Prefill {
                text: prefill.to_owned(),
                ids: encoder.encode(prefill)?,
            })
        };
        Ok(MaskRule {
            boundary: settings.boundary,
            end_of_turn: settings.end_of_turn,
            prefill,
        })
    }
}

/// An assistant turn located in token space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssistantBlock {
    /// Index of the first header token.
    pub start: usize,
    /// One past the last token of the turn (after `<|im_end|>` and its newline).
    pub end: usize,
    pub supervised: bool,
}

/// Where the marker `want` (a token sequence) starts at `ids[at..]`: `Some(false)` when its
/// tokens are there as they are, `Some(true)` when its last token is merged with text after it
/// into one longer token (the tokenizer joins a newline with the whitespace that follows).
fn marker_at(ids: &[u32], at: usize, want: &[u32], bytes: &TokenBytes) -> Option<bool> {
    let (&last, lead) = want.split_last()?;
    let rest = ids.get(at..)?;
    if !rest.starts_with(lead) {
        return None;
    }
    let &next = rest.get(lead.len())?;
    if next == last {
        return Some(false);
    }
    let (merged, tail) = (bytes.get(next), bytes.get(last));
    (merged.len() > tail.len() && merged.starts_with(tail)).then_some(true)
}

/// What [`compute`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Computed {
    pub mask: Vec<u8>,
    pub blocks: Vec<AssistantBlock>,
    /// A supervised span's edge fell inside a token (decided by the boundary rule).
    pub boundary_merged: bool,
}

/// Computes the mask for the assistant turns whose ordinal (0-based, in render order) is in
/// `supervise`, in token space: headers and `<|im_end|>` are found by their ids; a header
/// whose newline the tokenizer merged with the reply's leading whitespace is found by the
/// merged token's first bytes, and that token is decided by the rule's boundary.
pub fn compute(
    ids: &[u32],
    markers: &ChatMarkers,
    bytes: &TokenBytes,
    rule: &MaskRule,
    supervise: &Range<usize>,
) -> Computed {
    let mut mask = vec![0u8; ids.len()];
    let mut blocks = Vec::new();
    let mut boundary_merged = false;
    let header = markers.header_ids.as_slice();
    let Some(&first) = header.first() else {
        return Computed {
            mask,
            blocks,
            boundary_merged,
        };
    };
    let overlap = rule.boundary == Boundary::AnyOverlap;
    let mut i = 0;
    while i < ids.len() {
        // The first id alone rules out nearly every position, without a slice compare.
        if ids[i] != first {
            i += 1;
            continue;
        }
        let Some(header_merged) = marker_at(ids, i, header, bytes) else {
            i += 1;
            continue;
        };
        // The first token wholly after the header; a merged one starts in the header.
        let after_header = i + header.len();
        let mut start = if header_merged && overlap {
            after_header - 1
        } else {
            after_header
        };
        let mut j = after_header.min(ids.len());
        while j < ids.len() && ids[j] != markers.end_id {
            j += 1;
        }
        // An open header with no `<|im_end|>` (a generation prompt) is not a turn.
        let closed = j < ids.len();
        let end_id_at = j;
        if closed {
            j += 1;
            if ids.get(j) == Some(&markers.newline_id) {
                j += 1;
            }
        }
        let supervised = closed && supervise.contains(&blocks.len());
        if supervised {
            boundary_merged |= header_merged;
            if let (Some(p), false) = (&rule.prefill, header_merged) {
                if let Some(merged) = marker_at(ids, after_header, &p.ids, bytes) {
                    let past = after_header + p.ids.len();
                    start = if merged && overlap { past - 1 } else { past };
                    boundary_merged |= merged;
                }
            }
            let stop = if rule.end_of_turn { j } else { end_id_at };
            if start < stop {
                mask[start..stop].fill(1);
            }
        }
        blocks.push(AssistantBlock {
            start: i,
            end: j,
            supervised,
        });
        i = j.max(i + 1);
    }
    Computed {
        mask,
        blocks,
        boundary_merged,
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MaskError {
    #[error("token {token} does not decode to the text at byte {offset}")]
    DecodeMismatch { token: usize, offset: usize },
    #[error("the tokens decode to {decoded} bytes but the text has {expected}")]
    LengthMismatch { decoded: usize, expected: usize },
    #[error("token {token} (mask {got}) disagrees with the assistant spans of the text")]
    SpanMismatch { token: usize, got: u8 },
}

/// What [`verify`] saw in a row that passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Verified {
    /// A token crosses the edge of a supervised span (its mask is the boundary rule's).
    pub boundary_merged: bool,
}

/// Checks that `ids` decode to exactly `text` and that every token's mask is what the rule
/// gives for the supervised spans found in the text by string search: with `first_char` a
/// token is 1 exactly when its first byte lies in a span, with `any_overlap` exactly when any
/// of its bytes does. Every token's mask is decided, so any wrong mask, missing or extra token
/// is an error; only the one token an edge falls into depends on the rule.
pub fn verify(
    text: &str,
    ids: &[u32],
    mask: &[u8],
    bytes: &TokenBytes,
    markers: &ChatMarkers,
    rule: &MaskRule,
    supervise: &Range<usize>,
) -> Result<Verified, MaskError> {
    let spans = text_spans(text, markers, rule, supervise);
    if decodes_with_span_mask(text.as_bytes(), ids, mask, bytes, &spans) {
        return Ok(Verified::default());
    }
    // A row whose mask does not switch exactly at the spans' edges: the token-by-token walk
    // either names the first bad token or finds edges inside tokens, decided by the rule.
    first_bad_token(text.as_bytes(), ids, mask, bytes, &spans, rule.boundary)
}

/// The whole check in one pass with no per-token decision: the tokens' bytes are laid end to
/// end and compared with the text at once, and the byte offsets where the mask switches on or
/// off are compared with the spans' edges. When it holds, every token lies wholly inside or
/// wholly outside the spans and is masked accordingly, which every boundary rule accepts;
/// when it does not, [`first_bad_token`] decides.
fn decodes_with_span_mask(
    text: &[u8],
    ids: &[u32],
    mask: &[u8],
    bytes: &TokenBytes,
    spans: &[Range<usize>],
) -> bool {
    if ids.len() != mask.len() {
        return false;
    }
    // 8 spare bytes: short tokens are stored as whole 8-byte words, the next token overwriting
    // the spare part.
    let mut decoded = vec![0u8; text.len() + 8];
    let mut offset = 0usize;
    let mut switches = Vec::with_capacity(2 * spans.len() + 2);
    let mut on = false;
    let mut not_binary = 0u8;
    for (&id, &m) in ids.iter().zip(mask) {
        not_binary |= m & !1;
        if (m == 1) != on {
            on = !on;
            switches.push(offset);
        }
        let (head, len) = bytes.head(id);
        // An id outside the table has no bytes; the walk below decides about it.
        if len == 0 {
            return false;
        }
        let Some(slot) = decoded.get_mut(offset..offset + 8) else {
            return false;
        };
        if len <= 8 {
            slot.copy_from_slice(&head.to_le_bytes());
        } else {
            let Some(slot) = decoded.get_mut(offset..offset + len) else {
                return false;
            };
            slot.copy_from_slice(bytes.get(id));
        }
        offset += len;
    }
    if on {
        switches.push(offset);
    }
    // The spans' edges, empty spans dropped and touching ones merged, as a mask would see them.
    let mut edges: Vec<usize> = Vec::with_capacity(2 * spans.len());
    for span in spans.iter().filter(|s| !s.is_empty()) {
        if edges.last() == Some(&span.start) {
            edges.pop();
        } else {
            edges.push(span.start);
        }
        edges.push(span.end);
    }
    not_binary == 0 && offset == text.len() && decoded[..offset] == *text && switches == edges
}

/// The check token by token: the first token that does not decode to the text at its offset,
/// or whose mask is not what the boundary rule gives.
fn first_bad_token(
    text: &[u8],
    ids: &[u32],
    mask: &[u8],
    bytes: &TokenBytes,
    spans: &[Range<usize>],
    boundary: Boundary,
) -> Result<Verified, MaskError> {
    let mut offset = 0usize;
    let mut span = 0usize;
    let mut verified = Verified::default();
    if ids.len() != mask.len() {
        return Err(MaskError::LengthMismatch {
            decoded: ids.len(),
            expected: mask.len(),
        });
    }
    for (token, (&id, &m)) in ids.iter().zip(mask).enumerate() {
        let token_bytes = bytes.get(id);
        let end = offset + token_bytes.len();
        if token_bytes.is_empty() || text.get(offset..end) != Some(token_bytes) {
            return Err(MaskError::DecodeMismatch { token, offset });
        }
        // Spans that end before this token can matter to no later token either.
        while spans.get(span).is_some_and(|s| s.end <= offset) {
            span += 1;
        }
        // The spans are ordered and disjoint: the ones this token touches follow `span`.
        let touched = spans[span.min(spans.len())..]
            .iter()
            .take_while(|s| s.start < end)
            .filter(|s| !s.is_empty());
        let (mut starts_inside, mut overlaps, mut across) = (false, false, false);
        for s in touched {
            starts_inside |= s.start <= offset && offset < s.end;
            overlaps = true;
            across |= offset < s.start || s.end < end;
        }
        verified.boundary_merged |= across;
        let expected = match boundary {
            Boundary::FirstChar => u8::from(starts_inside),
            Boundary::AnyOverlap => u8::from(overlaps),
        };
        if m != expected {
            return Err(MaskError::SpanMismatch { token, got: m });
        }
        offset = end;
    }
    if offset != text.len() {
        return Err(MaskError::LengthMismatch {
            decoded: offset,
            expected: text.len(),
        });
    }
    Ok(verified)
}

/// Byte ranges of the supervised assistant turns, found by string search in the text: from
/// after the header (and after the prefill when it is not supervised and the turn starts with
/// it) to after `<|im_end|>` and its newline (or to `<|im_end|>` when end-of-turn tokens are
/// not supervised).
fn text_spans(
    text: &str,
    markers: &ChatMarkers,
    rule: &MaskRule,
    supervise: &Range<usize>,
) -> Vec<Range<usize>> {
    let (header, end_marker) = (&markers.header_finder, &markers.end_finder);
    let text = text.as_bytes();
    let mut spans = Vec::new();
    let mut from = 0;
    let mut ordinal = 0;
    while let Some(pos) = header.find(&text[from..]) {
        let mut start = from + pos + markers.header_text.len();
        let (end_of_content, end) = match end_marker.find(&text[start..]) {
            Some(p) => {
                let e = start + p + markers.end_text.len();
                let e_nl = if text.get(e) == Some(&b'\n') {
                    e + 1
                } else {
                    e
                };
                (start + p, e_nl)
            }
            None => break,
        };
        if supervise.contains(&ordinal) {
            if let Some(p) = &rule.prefill {
                if text[start..end_of_content].starts_with(p.text.as_bytes()) {
                    start += p.text.len();
                }
            }
            let stop = if rule.end_of_turn {
                end
            } else {
                end_of_content
            };
            spans.push(start..stop.max(start));
        }
        ordinal += 1;
        from = end;
    }
    spans
}

/// Decodes ids, marking supervised runs with color on a terminal and `⟦…⟧` otherwise.
pub fn highlight(tokenizer: &Tokenizer, ids: &[u32], mask: &[i8], color: bool) -> String {
    let (open, close) = if color {
        ("\x1b[32m", "\x1b[0m")
    } else {
        ("⟦", "⟧")
    };
    let mut out = String::new();
    let mut start = 0;
    while start < ids.len() {
        let m = mask[start];
        let end = (start..ids.len())
            .find(|&j| mask[j] != m)
            .unwrap_or(ids.len());
        let text = String::from_utf8_lossy(&tokenizer.decode_bytes(&ids[start..end])).into_owned();
        if m == 1 {
            out.push_str(open);
            out.push_str(&text);
            out.push_str(close);
        } else {
            out.push_str(&text);
        }
        start = end;
    }
    out
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::tokenize::Tokenizer;

    /// The shipped Qwen3.6 tokenizer, for the tokenize stage's tests.
    pub(in crate::tokenize) fn shipped() -> Tokenizer {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/templates/qwen3.6/tokenizer.json.zst"
        );
        Tokenizer::load(path.as_ref()).expect("the shipped tokenizer loads")
    }

    // Two assistant turns, the second supervised; multi-byte text, a long token and a turn
    // whose content starts with a newline (the tokenizer merges it with the header's).
    const TEXT: &str = "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHéllo wörld 你好<|im_end|>\n<|im_start|>assistant\nFirst answer, ================================<|im_end|>\n<|im_start|>user\nAgain?<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nSecond 12345 answer.<|im_end|>\n";

    fn check(t: &Tokenizer, text: &str, ids: &[u32], mask: &[u8]) -> Result<(), MaskError> {
        verify(
            text,
            ids,
            mask,
            &t.bytes,
            &t.markers,
            &MaskRule::standard(),
            &(1..2),
        )
        .map(|_| ())
    }

    fn walk(t: &Tokenizer, text: &str, ids: &[u32], mask: &[u8]) -> Result<(), MaskError> {
        let spans = text_spans(text, &t.markers, &MaskRule::standard(), &(1..2));
        first_bad_token(
            text.as_bytes(),
            ids,
            mask,
            &t.bytes,
            &spans,
            Boundary::FirstChar,
        )
        .map(|_| ())
    }

    fn computed(t: &Tokenizer, ids: &[u32], rule: &MaskRule, supervise: &Range<usize>) -> Computed {
        compute(ids, &t.markers, &t.bytes, rule, supervise)
    }

    #[test]
    fn a_correct_mask_passes_and_every_corruption_is_named_like_the_token_walk() {
        let t = shipped();
        let ids = t.encoder.encode(TEXT).expect("encodes");
        let Computed { mask, blocks, .. } = computed(&t, &ids, &MaskRule::standard(), &(1..2));
        assert_eq!(blocks.iter().filter(|b| b.supervised).count(), 1);
        assert_eq!(check(&t, TEXT, &ids, &mask), Ok(()));

        let mut cases: Vec<(Vec<u32>, Vec<u8>)> = Vec::new();
        for i in 0..ids.len() {
            let mut flipped = mask.clone();
            flipped[i] ^= 1;
            cases.push((ids.clone(), flipped));
            let mut two = mask.clone();
            two[i] = 2;
            cases.push((ids.clone(), two));
            let mut other = ids.clone();
            other[i] = other[i].wrapping_add(1) % 248_000;
            cases.push((other, mask.clone()));
            let (mut fewer, mut fewer_mask) = (ids.clone(), mask.clone());
            fewer.remove(i);
            fewer_mask.remove(i);
            cases.push((fewer, fewer_mask));
            if i + 1 < ids.len() {
                let mut swapped = ids.clone();
                swapped.swap(i, i + 1);
                cases.push((swapped, mask.clone()));
            }
        }
        let (mut longer, mut longer_mask) = (ids.clone(), mask.clone());
        longer.push(ids[0]);
        longer_mask.push(0);
        cases.push((longer, longer_mask));
        cases.push((ids.clone(), mask[..mask.len() - 1].to_vec()));
        cases.push((vec![u32::MAX], vec![0]));
        let mut failures = 0;
        for (ids, mask) in &cases {
            let got = check(&t, TEXT, ids, mask);
            assert_eq!(got, walk(&t, TEXT, ids, mask), "ids {ids:?} mask {mask:?}");
            failures += usize::from(got.is_err());
        }
        // Everything but swaps of equal neighbours and flips that change nothing fails.
        assert!(failures + 8 >= cases.len(), "{failures} of {}", cases.len());
    }

    #[test]
    fn the_errors_name_the_token_and_offset() {
        let t = shipped();
        let ids = t.encoder.encode(TEXT).expect("encodes");
        let Computed { mask, blocks, .. } = computed(&t, &ids, &MaskRule::standard(), &(1..2));
        let first = blocks
            .iter()
            .find(|b| b.supervised)
            .expect("a supervised turn");
        let content = first.start + t.markers.header_ids.len();

        let mut unmasked = mask.clone();
        unmasked[content] = 0;
        assert_eq!(
            check(&t, TEXT, &ids, &unmasked),
            Err(MaskError::SpanMismatch {
                token: content,
                got: 0
            })
        );
        let mut header = mask.clone();
        header[content - 1] = 1;
        assert_eq!(
            check(&t, TEXT, &ids, &header),
            Err(MaskError::SpanMismatch {
                token: content - 1,
                got: 1
            })
        );
        let mut wrong = ids.clone();
        wrong[3] = ids[4];
        let offset: usize = ids[..3].iter().map(|&id| t.bytes.get(id).len()).sum();
        assert_eq!(
            check(&t, TEXT, &wrong, &mask),
            Err(MaskError::DecodeMismatch { token: 3, offset })
        );
        let n = ids.len() - 1;
        assert_eq!(
            check(&t, TEXT, &ids[..n], &mask[..n]),
            Err(MaskError::LengthMismatch {
                decoded: TEXT.len() - 1,
                expected: TEXT.len()
            })
        );
    }

    /// Each token's text, for readable expectations.
    fn pieces(t: &Tokenizer, ids: &[u32]) -> Vec<String> {
        ids.iter()
            .map(|&id| String::from_utf8_lossy(t.bytes.get(id)).into_owned())
            .collect()
    }

    fn supervised_text(t: &Tokenizer, ids: &[u32], mask: &[u8]) -> String {
        pieces(t, ids)
            .into_iter()
            .zip(mask)
            .filter(|(_, &m)| m == 1)
            .map(|(p, _)| p)
            .collect()
    }

    fn rule(
        boundary: Boundary,
        end_of_turn: bool,
        prefill: Option<&str>,
        t: &Tokenizer,
    ) -> MaskRule {
        MaskRule {
            boundary,
            end_of_turn,
            prefill: prefill.map(|p| Prefill {
                text: p.to_owned(),
                ids: t.encoder.encode(p).expect("encodes"),
            }),
        }
    }

    #[test]
    fn a_reply_starting_with_a_newline_merges_with_the_header_and_the_rule_decides() {
        let t = shipped();
        let all = 0..usize::MAX;
        for (content, merged) in [
            ("\n```python\nx = 1\n```", "\n\n"),
            (" \nhello", "\n \n"),
            ("\n\nhello", "\n\n\n"),
        ] {
            let text = format!(
                "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n{content}<|im_end|>\n"
            );
            let ids = t.encoder.encode(&text).expect("encodes");
            let p = pieces(&t, &ids);
            let at = p.iter().position(|x| x == merged).expect("a merged token");
            assert_eq!(p[at - 1], "assistant", "{p:?}");
            // first_char: the merged token starts in the header, so it is not supervised.
            let first = rule(Boundary::FirstChar, true, None, &t);
            let c = computed(&t, &ids, &first, &all);
            assert!(c.boundary_merged);
            assert_eq!(c.mask[at], 0);
            let rest = &content[merged.len() - 1..];
            assert_eq!(
                supervised_text(&t, &ids, &c.mask),
                format!("{rest}<|im_end|>\n")
            );
            let v = verify(&text, &ids, &c.mask, &t.bytes, &t.markers, &first, &all);
            assert_eq!(
                v,
                Ok(Verified {
                    boundary_merged: true
                })
            );
            // any_overlap: it is.
            let over = rule(Boundary::AnyOverlap, true, None, &t);
            let c = computed(&t, &ids, &over, &all);
            assert_eq!(c.mask[at], 1);
            assert_eq!(
                verify(&text, &ids, &c.mask, &t.bytes, &t.markers, &over, &all),
                Ok(Verified {
                    boundary_merged: true
                })
            );
            // Each rule's mask fails the other rule's check, and every single flip fails.
            let (first_mask, over_mask) = (computed(&t, &ids, &first, &all).mask, c.mask);
            assert!(verify(&text, &ids, &over_mask, &t.bytes, &t.markers, &first, &all).is_err());
            assert!(verify(&text, &ids, &first_mask, &t.bytes, &t.markers, &over, &all).is_err());
            for i in 0..ids.len() {
                for (mask, r) in [(&first_mask, &first), (&over_mask, &over)] {
                    let mut flipped = mask.clone();
                    flipped[i] ^= 1;
                    assert_eq!(
                        verify(&text, &ids, &flipped, &t.bytes, &t.markers, r, &all),
                        Err(MaskError::SpanMismatch {
                            token: i,
                            got: flipped[i]
                        }),
                        "{content:?} token {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn end_of_turn_and_prefill_can_be_left_out() {
        let t = shipped();
        let all = 0..usize::MAX;
        let text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nyes<|im_end|>\n";
        let ids = t.encoder.encode(text).expect("encodes");
        for (r, want) in [
            (
                rule(Boundary::FirstChar, true, None, &t),
                "<think>\nhmm\n</think>\n\nyes<|im_end|>\n",
            ),
            (
                rule(Boundary::FirstChar, false, None, &t),
                "<think>\nhmm\n</think>\n\nyes",
            ),
            (
                rule(Boundary::FirstChar, true, Some("<think>\n"), &t),
                "hmm\n</think>\n\nyes<|im_end|>\n",
            ),
            (
                rule(Boundary::AnyOverlap, false, Some("<think>\n"), &t),
                "hmm\n</think>\n\nyes",
            ),
        ] {
            let c = computed(&t, &ids, &r, &all);
            assert_eq!(supervised_text(&t, &ids, &c.mask), want);
            assert!(!c.boundary_merged);
            assert_eq!(
                verify(text, &ids, &c.mask, &t.bytes, &t.markers, &r, &all),
                Ok(Verified::default())
            );
        }
        // The prefill's newline merged with the reasoning's leading whitespace.
        let text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n \nhmm\n</think>\n\nyes<|im_end|>\n";
        let ids = t.encoder.encode(text).expect("encodes");
        for (boundary, want) in [
            (Boundary::FirstChar, "hmm\n</think>\n\nyes<|im_end|>\n"),
            (
                Boundary::AnyOverlap,
                "\n \nhmm\n</think>\n\nyes<|im_end|>\n",
            ),
        ] {
            let r = rule(boundary, true, Some("<think>\n"), &t);
            let c = computed(&t, &ids, &r, &all);
            assert!(c.boundary_merged);
            assert_eq!(supervised_text(&t, &ids, &c.mask), want);
            assert_eq!(
                verify(text, &ids, &c.mask, &t.bytes, &t.markers, &r, &all),
                Ok(Verified {
                    boundary_merged: true
                })
            );
        }
        // A turn that does not start with the prefill (a history turn) is supervised whole.
        let text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nplain<|im_end|>\n";
        let ids = t.encoder.encode(text).expect("encodes");
        let r = rule(Boundary::FirstChar, true, Some("<think>\n"), &t);
        let c = computed(&t, &ids, &r, &all);
        assert_eq!(supervised_text(&t, &ids, &c.mask), "plain<|im_end|>\n");
        assert!(verify(text, &ids, &c.mask, &t.bytes, &t.markers, &r, &all).is_ok());
    }
}
