//! A cache of the ids of long text segments that recur from row to row: system prompts, tool
//! schemas, the fixed instructions a template puts around tools. In agentic and tool-calling
//! data the same few kilobytes open thousands of rows; each is encoded once.
//!
//! Exact by the way the `tokenizers` crate works: it splits a text at its added tokens before
//! anything else, then normalizes, pre-tokenizes and encodes each piece between them on its
//! own, so a piece's ids do not depend on its neighbours. A segment here is such a piece,
//! found by the same leftmost-longest search, and is only cached where that holds for every
//! added token (no `lstrip`, `rstrip`, `single_word` or `normalized` token, nothing that
//! truncates or pads). The text around cached segments is encoded in one call per stretch,
//! each stretch starting and ending at an added token, so its pieces are the same too. The
//! build re-encodes a share of its rows without the cache, and checks every row's decode.

use super::{EncodeError, Encoder, Origin};
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use std::hash::BuildHasher;
use std::sync::Mutex;

/// Shorter segments (`assistant\n`, short user turns) cost less to encode than to look up.
const MIN_SEGMENT: usize = 256;
/// Segments remembered as seen once, per shard, before the memory of them starts over: a
/// segment is cached the second time it is seen, so one-off text never fills the cache.
const SEEN_LIMIT: usize = 1 << 16;
/// Bytes of cached text and ids per shard; past it, nothing more is cached.
const SHARD_BYTES: usize = 32 << 20;
/// Shards, one per pool thread (threads beyond share them).
const SHARDS: usize = 16;

/// An [`Encoder`] that reuses the ids of recurring segments; see the module docs.
pub struct SegmentCache {
    inner: Box<dyn Encoder>,
    splitter: AhoCorasick,
    shards: Vec<Mutex<Shard>>,
    hasher: foldhash::fast::FixedState,
}

#[derive(Default)]
struct Shard {
    /// Hashes of segments seen once.
    seen: hashbrown::HashSet<u64, foldhash::fast::FixedState>,
    /// By hash, the segments cached.
    ids: hashbrown::HashMap<u64, Cached, foldhash::fast::FixedState>,
    bytes: usize,
}

/// A segment and its ids.
struct Cached {
    text: Box<str>,
    ids: Box<[u32]>,
}

/// Why segments of a tokenizer's texts cannot be encoded apart.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SegmentCacheError {
    #[error("the tokenizer truncates or pads")]
    TruncatesOrPads,
    #[error("the tokenizer encodes special tokens as text")]
    EncodesSpecialTokens,
    #[error("added token {0:?} strips, matches whole words or is normalized")]
    AddedToken(String),
    #[error("added tokens: {0}")]
    AddedTokens(#[from] aho_corasick::BuildError),
}

/// Whether segments of `tokenizer`'s texts can be encoded apart; `Err` says why not.
pub fn splitter(tokenizer: &tokenizers::Tokenizer) -> Result<AhoCorasick, SegmentCacheError> {
    if tokenizer.get_truncation().is_some() || tokenizer.get_padding().is_some() {
        return Err(SegmentCacheError::TruncatesOrPads);
    }
    if tokenizer.get_encode_special_tokens() {
        return Err(SegmentCacheError::EncodesSpecialTokens);
    }
    let mut tokens: Vec<(u32, tokenizers::AddedToken)> =
        tokenizer.get_added_tokens_decoder().into_iter().collect();
    tokens.sort_by_key(|(id, _)| *id);
    let mut patterns = Vec::with_capacity(tokens.len());
    for (_, t) in tokens {
        if t.lstrip || t.rstrip || t.single_word || t.normalized {
            return Err(SegmentCacheError::AddedToken(t.content));
        }
        if !t.content.is_empty() {
            patterns.push(t.content);
        }
    }
    AhoCorasickBuilder::new()
        .match_kind(MatchKind::LeftmostLongest)
        .build(&patterns)
        .map_err(SegmentCacheError::from)
}

impl SegmentCache {
    /// Wraps `inner`, an exact encoder of the tokenizer `splitter` was made from.
    pub fn new(inner: Box<dyn Encoder>, splitter: AhoCorasick) -> Self {
        SegmentCache {
            inner,
            splitter,
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: foldhash::fast::FixedState::with_seed(0x5e9_c4c4e),
        }
    }

    /// Appends the ids of `text[*pending..end]` to `out` (one call of the inner encoder) and
    /// moves `pending` to `end`.
    fn encode_up_to(
        &self,
        text: &str,
        pending: &mut usize,
        end: usize,
        out: &mut Vec<u32>,
    ) -> Result<(), EncodeError> {
        if *pending < end {
            let stretch = text
                .get(*pending..end)
                .ok_or(EncodeError::OffCharBoundary)?;
            out.extend(self.inner.encode(stretch)?);
        }
        *pending = end;
        Ok(())
    }

    /// Looks the segment `text[start..end]` up: cached ids are appended (after the stretch
    /// before it), a segment seen for the second time is encoded alone and cached, any other
    /// is left to the stretch it belongs to.
    fn segment(
        &self,
        shard: &mut Shard,
        text: &str,
        (start, end): (usize, usize),
        pending: &mut usize,
        out: &mut Vec<u32>,
    ) -> Result<(), EncodeError> {
        if end - start < MIN_SEGMENT {
            return Ok(());
        }
        let segment = text.get(start..end).ok_or(EncodeError::OffCharBoundary)?;
        let hash = self.hasher.hash_one(segment);
        if let Some(cached) = shard.ids.get(&hash) {
            if *cached.text == *segment {
                self.encode_up_to(text, pending, start, out)?;
                out.extend_from_slice(&cached.ids);
                *pending = end;
            }
            // Another segment with the same hash: left to its stretch, never cached.
            return Ok(());
        }
        if shard.seen.len() >= SEEN_LIMIT {
            shard.seen.clear();
        }
        if shard.seen.insert(hash) {
            return Ok(());
        }
        self.encode_up_to(text, pending, start, out)?;
        let ids = self.inner.encode(segment)?;
        out.extend_from_slice(&ids);
        *pending = end;
        let cost = segment.len() + 4 * ids.len();
        if shard.bytes + cost <= SHARD_BYTES {
            shard.bytes += cost;
            let (text, ids) = (segment.into(), ids.into());
            shard.ids.insert(hash, Cached { text, ids });
        }
        Ok(())
    }
}

impl Encoder for SegmentCache {
    fn encode(&self, text: &str) -> Result<Vec<u32>, EncodeError> {
        self.encode_traced(text).map(|(ids, _)| ids)
    }

    /// The inner encoder's origin when no segment was served or cached (the text then went to
    /// it whole, in one call), else [`Origin::Derived`].
    fn encode_traced(&self, text: &str) -> Result<(Vec<u32>, Origin), EncodeError> {
        // One shard per pool thread, so the lock is never contended there.
        let index = rayon::current_thread_index().unwrap_or(0) % self.shards.len();
        let Ok(mut shard) = self.shards[index].lock() else {
            return self.inner.encode_traced(text);
        };
        let mut out = Vec::with_capacity(text.len() / 3 + 4);
        let (mut pending, mut from) = (0, 0);
        for m in self.splitter.find_iter(text) {
            self.segment(&mut shard, text, (from, m.start()), &mut pending, &mut out)?;
            from = m.end();
        }
        self.segment(&mut shard, text, (from, text.len()), &mut pending, &mut out)?;
        // `pending` moves only when a segment is served or cached.
        if pending == 0 {
            drop(shard);
            return self.inner.encode_traced(text);
        }
        self.encode_up_to(text, &mut pending, text.len(), &mut out)?;
        Ok((out, Origin::Derived))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenize::Tokenizer;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn shipped() -> Tokenizer {
        crate::tokenize::mask::tests::shipped()
    }

    /// The `tokenizers` encoder, counting the bytes it is given.
    struct Counting(super::super::HfEncoder, Arc<AtomicUsize>);

    impl Encoder for Counting {
        fn encode(&self, text: &str) -> Result<Vec<u32>, EncodeError> {
            self.1.fetch_add(text.len(), Ordering::Relaxed);
            self.0.encode(text)
        }
    }

    fn hf(t: &Tokenizer) -> super::super::HfEncoder {
        super::super::HfEncoder {
            tokenizer: Arc::clone(&t.hf),
        }
    }

    #[test]
    fn cached_ids_equal_the_whole_text_encoded_at_once() {
        let t = shipped();
        let splitter = splitter(&t.hf).expect("the shipped tokenizer splits");
        let cache = SegmentCache::new(Box::new(hf(&t)), splitter);
        let long =
            "You are a careful assistant. Ünïcödé, 日本語, emoji 🦀, code `x = 1`.\n".repeat(8);
        let texts = [
            format!("<|im_start|>system\n{long}<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"),
            // The same segment at the start of the text, at its end, beside another added
            // token, and one character longer (a different segment with a shared prefix).
            format!("{long}<|im_end|>"),
            format!("<|im_start|>{long}"),
            format!("<think>{long}</think><|im_start|>user\n{long}x<|im_end|>\n"),
            format!("<|im_start|>system\n{long}<|im_end|>\n<|im_start|>user\nhi again<|im_end|>\n"),
            format!(
                "<|im_start|>system\n{long}<|im_end|>\n<|im_start|>assistant\n{long}<|im_end|>\n"
            ),
            String::new(),
            "no added token at all".repeat(20),
        ];
        // Three rounds: the segment is seen, then cached, then served from the cache.
        for round in 0..3 {
            for text in &texts {
                let want = t.reference_encode(text).expect("encode");
                assert_eq!(
                    cache.encode(text).expect("cached"),
                    want,
                    "round {round}: {text:?}"
                );
            }
        }
        assert!(cache.shards[0].lock().expect("lock").ids.len() >= 2);
    }

    #[test]
    fn a_recurring_segment_is_encoded_once_after_its_second_sight() {
        let t = shipped();
        let bytes = Arc::new(AtomicUsize::new(0));
        let counting = Counting(hf(&t), Arc::clone(&bytes));
        let cache = SegmentCache::new(Box::new(counting), splitter(&t.hf).expect("splitter"));
        let system = "Always answer in French. ".repeat(20);
        let row = |user: &str| {
            format!("<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n")
        };
        let encoded = |text: &str| {
            let before = bytes.load(Ordering::Relaxed);
            let ids = cache.encode(text).expect("encode");
            assert_eq!(Ok(ids), t.reference_encode(text));
            bytes.load(Ordering::Relaxed) - before
        };
        let (first, second, third) = (row("a"), row("b"), row("c"));
        assert_eq!(encoded(&first), first.len());
        assert_eq!(encoded(&second), second.len());
        // The system segment (after `<|im_start|>`, before `<|im_end|>`) now comes from the cache.
        assert_eq!(
            encoded(&third),
            third.len() - "system\n".len() - system.len()
        );
    }

    #[test]
    fn only_texts_sent_whole_to_the_reference_are_reported_as_its_own() {
        let t = shipped();
        let cache = SegmentCache::new(Box::new(hf(&t)), splitter(&t.hf).expect("splitter"));
        let system = "Always answer in French. ".repeat(20);
        let row = |user: &str| {
            format!("<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n")
        };
        let origin = |text: &str| {
            let (ids, origin) = cache.encode_traced(text).expect("encode");
            assert_eq!(Ok(ids), t.reference_encode(text));
            origin
        };
        // Seen once: sent whole. Seen again: encoded apart and cached. Then served.
        assert_eq!(origin(&row("a")), Origin::Reference);
        assert_eq!(origin(&row("b")), Origin::Derived);
        assert_eq!(origin(&row("c")), Origin::Derived);
        // Nothing of 256 bytes or more between added tokens: sent whole.
        assert_eq!(
            origin("<|im_start|>user\nhi<|im_end|>\n"),
            Origin::Reference
        );
        // Sent whole to an encoder that is not the reference: still derived.
        let other = Counting(hf(&t), Arc::default());
        let cache = SegmentCache::new(Box::new(other), splitter(&t.hf).expect("splitter"));
        let (_, origin) = cache.encode_traced(&row("a")).expect("encode");
        assert_eq!(origin, Origin::Derived);
    }

    #[test]
    fn tokenizers_whose_pieces_depend_on_their_neighbours_are_refused() {
        let t = shipped();
        assert!(splitter(&t.hf).is_ok());
        let mut stripping = (*t.hf).clone();
        stripping.add_special_tokens(&[tokenizers::AddedToken::from("<mark>", true).lstrip(true)]);
        let err = splitter(&stripping).expect_err("refused");
        assert!(err.to_string().contains("<mark>"), "{err}");
        let mut truncating = (*t.hf).clone();
        truncating
            .with_truncation(Some(tokenizers::TruncationParams::default()))
            .expect("truncation");
        assert_eq!(
            splitter(&truncating)
                .err()
                .map(|e| e.to_string())
                .as_deref(),
            Some("the tokenizer truncates or pads")
        );
    }
}
