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
    let mut i = 0;
    while i < ids.len() {
        if !ids[i..].starts_with(header) {
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
    // The table lookups first, in a loop of independent loads (many cache misses in flight at
    // once), then the walk along the text, which depends on each token's length.
    let heads: Vec<(u64, usize)> = ids.iter().map(|&id| bytes.head(id)).collect();
    let text = text.as_bytes();
    let mut offset = 0usize;
    let mut span = 0usize;
    for (token, ((&id, &m), &(head, len))) in ids.iter().zip(mask).zip(&heads).enumerate() {
        let end = offset + len;
        let same = match text.get(offset..offset + 8) {
            // Nearly every token: one masked 8-byte compare, no per-byte loop to mispredict.
            Some(window) if len <= 8 => {
                let window = <[u8; 8]>::try_from(window).map_or(0, u64::from_le_bytes);
                let keep = if len == 8 {
                    u64::MAX
                } else {
                    (1u64 << (len * 8)) - 1
                };
                (window ^ head) & keep == 0
            }
            _ => text.get(offset..end) == Some(bytes.get(id)),
        };
        if !same {
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
    let header = memchr::memmem::Finder::new(markers.header_text);
    let end_marker = memchr::memmem::Finder::new(markers.end_text);
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
