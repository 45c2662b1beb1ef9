//! The loss mask: 1 on every token of a supervised assistant turn after its header
//! `<|im_start|>assistant\n` (think block, content, tool-call XML) through `<|im_end|>` and the
//! newline after it; 0 elsewhere. Computed in token space in one linear pass, then verified
//! against the same spans found independently in the text.

use super::vocab::{TokenBytes, TokenizerError};
use super::Encoder;
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

/// An assistant turn located in token space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssistantBlock {
    /// Index of the first header token.
    pub start: usize,
    /// One past the last token of the turn (after `<|im_end|>` and its newline).
    pub end: usize,
    pub supervised: bool,
}

/// Computes the mask for the assistant turns whose ordinal (0-based, in render order) is in
/// `supervise`. Returns the mask and every assistant block found.
pub fn compute(
    ids: &[u32],
    markers: &ChatMarkers,
    supervise: &Range<usize>,
) -> (Vec<u8>, Vec<AssistantBlock>) {
    let mut mask = vec![0u8; ids.len()];
    let mut blocks = Vec::new();
    let header = markers.header_ids.as_slice();
    let Some(&first) = header.first() else {
        return (mask, blocks);
    };
    let mut i = 0;
    while i < ids.len() {
        // The first id alone rules out nearly every position, without a slice compare.
        if ids[i] != first || !ids[i..].starts_with(header) {
            i += 1;
            continue;
        }
        let content_start = i + header.len();
        let mut j = content_start;
        while j < ids.len() && ids[j] != markers.end_id {
            j += 1;
        }
        // An open header with no `<|im_end|>` (a generation prompt) is not a turn.
        let closed = j < ids.len();
        if closed {
            j += 1;
            if ids.get(j) == Some(&markers.newline_id) {
                j += 1;
            }
        }
        let supervised = closed && supervise.contains(&blocks.len());
        if supervised {
            mask[content_start..j].fill(1);
        }
        blocks.push(AssistantBlock {
            start: i,
            end: j,
            supervised,
        });
        i = j;
    }
    (mask, blocks)
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

/// Checks that `ids` decode to exactly `text` and that the masked tokens are exactly the
/// supervised assistant spans of the text (header excluded, `<|im_end|>` + newline included).
pub fn verify(
    text: &str,
    ids: &[u32],
    mask: &[u8],
    bytes: &TokenBytes,
    markers: &ChatMarkers,
    supervise: &Range<usize>,
) -> Result<(), MaskError> {
    let spans = text_spans(text, markers, supervise);
    if decodes_with_span_mask(text.as_bytes(), ids, mask, bytes, &spans) {
        return Ok(());
    }
    // Only for a row that fails: the token-by-token walk names the first bad token.
    first_bad_token(text.as_bytes(), ids, mask, bytes, &spans)
}

/// The whole check in one pass with no per-token decision: the tokens' bytes are laid end to
/// end and compared with the text at once, and the byte offsets where the mask switches on or
/// off are compared with the spans' edges. Same verdict as [`first_bad_token`]: when the
/// decode equals the text, the masked tokens cover exactly the spans (none inside left out,
/// none outside, none across an edge) if and only if the mask switches exactly at their edges.
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
/// or whose mask disagrees with the spans.
fn first_bad_token(
    text: &[u8],
    ids: &[u32],
    mask: &[u8],
    bytes: &TokenBytes,
    spans: &[Range<usize>],
) -> Result<(), MaskError> {
    let mut offset = 0usize;
    let mut span = 0usize;
    for (token, (&id, &m)) in ids.iter().zip(mask).enumerate() {
        let token_bytes = bytes.get(id);
        let end = offset + token_bytes.len();
        if text.get(offset..end) != Some(token_bytes) {
            return Err(MaskError::DecodeMismatch { token, offset });
        }
        while spans.get(span).is_some_and(|s| s.end <= offset) {
            span += 1;
        }
        let expected = match spans.get(span) {
            Some(s) if s.start <= offset && end <= s.end => 1,
            Some(s) if s.start < end && offset < s.end => {
                // The token straddles a span boundary: no mask can be right.
                return Err(MaskError::SpanMismatch { token, got: m });
            }
            _ => 0,
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
    Ok(())
}

/// Byte ranges of the supervised assistant turns, found by string search in the text.
fn text_spans(text: &str, markers: &ChatMarkers, supervise: &Range<usize>) -> Vec<Range<usize>> {
    let (header, end_marker) = (&markers.header_finder, &markers.end_finder);
    let text = text.as_bytes();
    let mut spans = Vec::new();
    let mut from = 0;
    let mut ordinal = 0;
    while let Some(pos) = header.find(&text[from..]) {
        let start = from + pos + markers.header_text.len();
        let end = match end_marker.find(&text[start..]) {
            Some(p) => {
                let e = start + p + markers.end_text.len();
                if text.get(e) == Some(&b'\n') {
                    e + 1
                } else {
                    e
                }
            }
            None => break,
        };
        if supervise.contains(&ordinal) {
            spans.push(start..end);
        }
        ordinal += 1;
        from = end;
    }
    spans
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
        verify(text, ids, mask, &t.bytes, &t.markers, &(1..2))
    }

    fn walk(t: &Tokenizer, text: &str, ids: &[u32], mask: &[u8]) -> Result<(), MaskError> {
        let spans = text_spans(text, &t.markers, &(1..2));
        first_bad_token(text.as_bytes(), ids, mask, &t.bytes, &spans)
    }

    #[test]
    fn a_correct_mask_passes_and_every_corruption_is_named_like_the_token_walk() {
        let t = shipped();
        let ids = t.encoder.encode(TEXT).expect("encodes");
        let (mask, blocks) = compute(&ids, &t.markers, &(1..2));
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
        let (mask, blocks) = compute(&ids, &t.markers, &(1..2));
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

    #[test]
    fn a_token_across_a_turn_edge_fails_whatever_the_mask() {
        let t = shipped();
        // The assistant content starts with a newline: `\n\n` is one token across the end of
        // the header, so the header is not found in token space and no mask can be right.
        let text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n\nhello<|im_end|>\n";
        let ids = t.encoder.encode(text).expect("encodes");
        let all = 0..usize::MAX;
        let (mask, _) = compute(&ids, &t.markers, &all);
        let bad = verify(text, &ids, &mask, &t.bytes, &t.markers, &all);
        assert!(
            matches!(bad, Err(MaskError::SpanMismatch { .. })),
            "{bad:?}"
        );
        let ones = vec![1; ids.len()];
        let bad = verify(text, &ids, &ones, &t.bytes, &t.markers, &all);
        assert!(
            matches!(bad, Err(MaskError::SpanMismatch { .. })),
            "{bad:?}"
        );
    }
}
