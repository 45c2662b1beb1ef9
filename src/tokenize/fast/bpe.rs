//! Byte-level BPE with the exact merge semantics of the `tokenizers` crate's `BPE` model.
//!
//! `tokenizers` merges, while any adjacent pair of symbols is in the merge list, the pair with the
//! lowest merge rank, the leftmost one on ties (`Word::merge_all`: a heap ordered by
//! `(rank, position)`). Both algorithms below do exactly that, with ranks taken from the merge
//! list itself, so they agree with `tokenizers` by construction. With `ignore_merges` (Qwen,
//! Llama-3) a piece that is a whole vocabulary token is that token, without merging.
//!
//! Speed comes from working on bytes (no byte-to-char mapping per piece), open hash tables keyed
//! by the raw bytes, and a per-thread cache of merged pieces.

use foldhash::fast::FixedState;
use hashbrown::HashTable;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::BuildHasher;

/// What merging an adjacent pair gives: its rank in the merge list and the merged token.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Merge {
    rank: u32,
    id: u32,
}

/// In [`Bpe::pair_ids`]: the piece is its two byte tokens.
const TWO_BYTES: u32 = u32::MAX;

const NO_MERGE: Merge = Merge {
    rank: u32::MAX,
    id: u32::MAX,
};

/// Pieces up to this many bytes are merged by rescanning a short array (cache-friendly, no
/// heap); longer ones with a priority queue, so long runs stay O(n log n).
const SHORT_PIECE: usize = 64;
/// Merged pieces longer than this are not cached: they rarely repeat.
const CACHE_MAX_PIECE: usize = 256;
const CACHE_MAX_ENTRIES: usize = 1 << 16;
const CACHE_MAX_BYTES: usize = 4 << 20;

pub(super) struct Bpe {
    /// Token id → its bytes, for ids reachable from byte-level text.
    token_bytes: Vec<u8>,
    token_offsets: Vec<u32>,
    vocab: VocabTable,
    byte_ids: [u32; 256],
    /// The single token of each 2-byte piece (`b0 << 8 | b1`), or [`TWO_BYTES`] when it is two
    /// tokens. Single bytes and byte pairs are a third of all pieces; this skips hashing them.
    pair_ids: Vec<u32>,
    /// `(left << 32) | right` → the merge.
    merges: HashMap<u64, Merge, FixedState>,
    ignore_merges: bool,
    hasher: FixedState,
}

/// Why a vocabulary and merge list cannot be encoded by [`Bpe`].
#[derive(Debug, thiserror::Error)]
pub enum BpeError {
    #[error("vocabulary too large")]
    VocabularyTooLarge,
    #[error("two vocabulary tokens have the same bytes")]
    SameBytes,
    #[error("byte 0x{0:02x} has no token, so BPE could hit `unk`")]
    NoByteToken(u8),
    #[error("merge token `{0}` is not in the vocabulary")]
    UnknownMergeToken(String),
    #[error(
        "merges are not rank-consistent: merge #{rank} `{left} {right}` gives id \
         {merged}, but merge #{prev_rank} before it gave id {prev_id}"
    )]
    NotRankConsistent {
        rank: usize,
        left: String,
        right: String,
        merged: u32,
        prev_rank: usize,
        prev_id: u32,
    },
    #[error("too many merges")]
    TooManyMerges,
}

impl Bpe {
    /// `vocab` is the model vocabulary (byte-level strings → ids), `merges` the merge list in
    /// rank order. Fails unless every byte has a token and the merges are rank-consistent.
    pub(super) fn new(
        vocab: &[(String, u32)],
        merges: &[(&str, &str)],
        ignore_merges: bool,
        char_to_byte: impl Fn(char) -> Option<u8>,
    ) -> Result<Bpe, BpeError> {
        let hasher = FixedState::default();
        // The merge table needs only the vocabulary's strings: it is built on a thread of its
        // own beside the byte tables (each ~0.1 s for a 250K vocabulary).
        let (bytes, merges) = std::thread::scope(|scope| {
            let merges = scope.spawn(|| merge_table(vocab, merges, &hasher));
            let bytes = Self::byte_tables(vocab, &char_to_byte, &hasher);
            (
                bytes,
                merges
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p)),
            )
        });
        // The vocabulary's errors first, as when the two were built one after the other.
        let mut bpe = bytes?;
        bpe.merges = merges?;
        bpe.ignore_merges = ignore_merges;
        // What `encode_piece` would compute for every 2-byte piece.
        bpe.pair_ids = (0..=u16::MAX)
            .map(|pair| {
                let [b0, b1] = pair.to_be_bytes();
                let whole = bpe.lookup(&[b0, b1], bpe.hasher.hash_one([b0, b1].as_slice()));
                match whole.filter(|_| bpe.ignore_merges) {
                    Some(id) => id,
                    None => {
                        let m = bpe.merge_of(bpe.byte_ids[b0 as usize], bpe.byte_ids[b1 as usize]);
                        if m.rank == u32::MAX {
                            TWO_BYTES
                        } else {
                            m.id
                        }
                    }
                }
            })
            .collect();
        Ok(bpe)
    }

    /// The byte side of [`Bpe::new`]: token bytes, the vocabulary's hash table, the byte
    /// tokens (merges empty).
    fn byte_tables(
        vocab: &[(String, u32)],
        char_to_byte: &impl Fn(char) -> Option<u8>,
        hasher: &FixedState,
    ) -> Result<Bpe, BpeError> {
        let size = vocab
            .iter()
            .map(|&(_, id)| id as usize + 1)
            .max()
            .unwrap_or(0);
        let mut table: Vec<Option<Vec<u8>>> = vec![None; size];
        for (token, id) in vocab {
            let id = *id;
            // Tokens with a character outside the byte-level alphabet can never come out of
            // byte-level text; they stay unreachable (an empty entry).
            let bytes: Option<Vec<u8>> = token.chars().map(char_to_byte).collect();
            if let Some(bytes) = bytes.filter(|b| !b.is_empty()) {
                table[id as usize] = Some(bytes);
            }
        }
        let mut token_bytes = Vec::new();
        let mut token_offsets = Vec::with_capacity(size + 1);
        token_offsets.push(0u32);
        for bytes in &table {
            token_bytes.extend_from_slice(bytes.as_deref().unwrap_or_default());
            let end = u32::try_from(token_bytes.len()).map_err(|_| BpeError::VocabularyTooLarge)?;
            token_offsets.push(end);
        }
        let mut bpe = Bpe {
            token_bytes,
            token_offsets,
            vocab: VocabTable::with_capacity(size),
            byte_ids: [0; 256],
            pair_ids: Vec::new(),
            merges: HashMap::default(),
            ignore_merges: false,
            hasher: hasher.clone(),
        };
        for (id, bytes) in table.iter().enumerate() {
            let Some(bytes) = bytes else { continue };
            let hash = bpe.hasher.hash_one(bytes.as_slice());
            if bpe.lookup(bytes, hash).is_some() {
                // Distinct strings map to distinct bytes, so this cannot happen for a valid file.
                return Err(BpeError::SameBytes);
            }
            bpe.vocab.insert(bytes, hash, id as u32);
        }
        for b in 0..=255u8 {
            bpe.byte_ids[b as usize] = bpe
                .lookup(&[b], bpe.hasher.hash_one([b].as_slice()))
                .ok_or(BpeError::NoByteToken(b))?;
        }

        Ok(bpe)
    }

    /// The bytes of token `id` (empty if it is unreachable or unknown).
    fn token(&self, id: u32) -> &[u8] {
        let i = id as usize;
        match (self.token_offsets.get(i), self.token_offsets.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.token_bytes[a as usize..b as usize],
            _ => &[],
        }
    }

    #[inline]
    fn lookup(&self, bytes: &[u8], hash: u64) -> Option<u32> {
        self.vocab.find(bytes, hash, |id| self.token(id))
    }

    #[inline]
    fn merge_of(&self, left: u32, right: u32) -> Merge {
        self.merges
            .get(&pair_key(left, right))
            .copied()
            .unwrap_or(NO_MERGE)
    }

    /// Appends the ids of one pre-tokenizer piece.
    #[inline]
    pub(super) fn encode_piece(&self, piece: &[u8], cache: &mut PieceCache, out: &mut Vec<u32>) {
        match *piece {
            [b] => return out.push(self.byte_ids[b as usize]),
            [b0, b1] => {
                match self.pair_ids[(b0 as usize) << 8 | b1 as usize] {
                    TWO_BYTES => {
                        out.extend([self.byte_ids[b0 as usize], self.byte_ids[b1 as usize]])
                    }
                    id => out.push(id),
                }
                return;
            }
            _ => {}
        }
        let hash = self.hasher.hash_one(piece);
        if self.ignore_merges {
            if let Some(id) = self.lookup(piece, hash) {
                out.push(id);
                return;
            }
        }
        if piece.len() > CACHE_MAX_PIECE {
            self.merge(piece, &mut cache.scratch, out);
            return;
        }
        if let Some(ids) = cache.get(piece, hash) {
            out.extend_from_slice(ids);
            return;
        }
        let start = out.len();
        self.merge(piece, &mut cache.scratch, out);
        cache.insert(piece, hash, &out[start..]);
    }

    /// BPE-merges `piece` from its bytes, appending the resulting ids.
    fn merge(&self, piece: &[u8], scratch: &mut Scratch, out: &mut Vec<u32>) {
        if piece.len() > SHORT_PIECE {
            self.merge_long(piece, scratch, out)
        } else {
            self.merge_short(piece, scratch, out)
        }
    }

    /// Rescans an array of pairs for the best merge: O(n²) but the fastest for short pieces.
    fn merge_short(&self, piece: &[u8], scratch: &mut Scratch, out: &mut Vec<u32>) {
        // `ids[k]` is symbol k, `pairs[k]` the merge of symbols k and k+1.
        let Scratch { ids, pairs, .. } = scratch;
        ids.clear();
        ids.extend(piece.iter().map(|&b| self.byte_ids[b as usize]));
        pairs.clear();
        pairs.extend(ids.windows(2).map(|w| self.merge_of(w[0], w[1])));
        loop {
            // Lowest rank, leftmost on ties (strict `<`).
            let mut best = NO_MERGE;
            let mut at = 0;
            for (k, m) in pairs.iter().enumerate() {
                if m.rank < best.rank {
                    best = *m;
                    at = k;
                }
            }
            if best.rank == u32::MAX {
                break;
            }
            ids[at] = best.id;
            ids.remove(at + 1);
            pairs.remove(at);
            if at > 0 {
                pairs[at - 1] = self.merge_of(ids[at - 1], ids[at]);
            }
            if at < pairs.len() {
                pairs[at] = self.merge_of(ids[at], ids[at + 1]);
            }
        }
        out.extend_from_slice(ids);
    }

    /// The `tokenizers` algorithm proper: symbols in a linked list, candidate merges in a
    /// min-heap of `(rank, position)`, stale entries skipped when popped.
    fn merge_long(&self, piece: &[u8], scratch: &mut Scratch, out: &mut Vec<u32>) {
        const NONE: u32 = u32::MAX;
        let Scratch { symbols, heap, .. } = scratch;
        symbols.clear();
        let n = piece.len() as u32;
        symbols.extend(piece.iter().enumerate().map(|(k, &b)| Symbol {
            id: self.byte_ids[b as usize],
            prev: if k == 0 { NONE } else { k as u32 - 1 },
            next: if k as u32 + 1 == n {
                NONE
            } else {
                k as u32 + 1
            },
            alive: true,
        }));
        heap.clear();
        for k in 0..symbols.len().saturating_sub(1) {
            let m = self.merge_of(symbols[k].id, symbols[k + 1].id);
            if m.rank != u32::MAX {
                heap.push(Reverse((m.rank, k as u32)));
            }
        }
        while let Some(Reverse((rank, pos))) = heap.pop() {
            let p = pos as usize;
            let Symbol {
                id,
                prev,
                next,
                alive,
            } = symbols[p];
            if !alive || next == NONE {
                continue;
            }
            let right = symbols[next as usize];
            let m = self.merge_of(id, right.id);
            // Stale entry: the pair at `pos` changed since it was queued. A rank names exactly
            // one pair, and a position's pair only ever grows, so equal rank means unchanged.
            if m.rank != rank {
                continue;
            }
            symbols[p].id = m.id;
            symbols[p].next = right.next;
            symbols[next as usize].alive = false;
            if right.next != NONE {
                symbols[right.next as usize].prev = pos;
            }
            if prev != NONE {
                let before = self.merge_of(symbols[prev as usize].id, m.id);
                if before.rank != u32::MAX {
                    heap.push(Reverse((before.rank, prev)));
                }
            }
            if right.next != NONE {
                let after = self.merge_of(m.id, symbols[right.next as usize].id);
                if after.rank != u32::MAX {
                    heap.push(Reverse((after.rank, pos)));
                }
            }
        }
        // Symbol 0 absorbs merges to its right and is never removed.
        let mut k = 0;
        while k != NONE {
            out.push(symbols[k as usize].id);
            k = symbols[k as usize].next;
        }
    }
}

/// Token bytes → id: open addressing with linear probing, at most half full. Each slot holds
/// the token's length and first 8 bytes, so looking up a short piece (most pieces) reads one
/// cache line; a general-purpose map would also read a control byte, a bucket and the token's
/// bytes elsewhere (profiling showed those misses as the top cost of encoding).
struct VocabTable {
    slots: Vec<Slot>,
    mask: usize,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    head: u64,
    /// 0 for an empty slot (no token is empty).
    len: u32,
    id: u32,
}

impl VocabTable {
    fn with_capacity(tokens: usize) -> Self {
        let size = (tokens * 2).next_power_of_two().max(16);
        VocabTable {
            slots: vec![Slot::default(); size],
            mask: size - 1,
        }
    }

    fn insert(&mut self, bytes: &[u8], hash: u64, id: u32) {
        let mut i = hash as usize & self.mask;
        while self.slots[i].len != 0 {
            i = (i + 1) & self.mask;
        }
        self.slots[i] = Slot {
            head: head8(bytes),
            len: bytes.len() as u32,
            id,
        };
    }

    /// The id of `bytes`; `token` gives the full bytes of an id, needed beyond the first 8.
    #[inline]
    fn find<'a>(&'a self, bytes: &[u8], hash: u64, token: impl Fn(u32) -> &'a [u8]) -> Option<u32> {
        let (head, len) = (head8(bytes), bytes.len() as u32);
        let mut i = hash as usize & self.mask;
        loop {
            let slot = self.slots[i];
            if slot.len == 0 {
                return None;
            }
            if slot.len == len
                && slot.head == head
                && (len <= 8 || token(slot.id).get(8..) == bytes.get(8..))
            {
                return Some(slot.id);
            }
            i = (i + 1) & self.mask;
        }
    }
}

/// The first 8 bytes of `bytes`, zero-padded, as one integer.
#[inline]
fn head8(bytes: &[u8]) -> u64 {
    match bytes.first_chunk::<8>() {
        Some(head) => u64::from_le_bytes(*head),
        None => bytes
            .iter()
            .enumerate()
            .fold(0, |acc, (k, &b)| acc | (b as u64) << (8 * k)),
    }
}

#[inline]
fn pair_key(left: u32, right: u32) -> u64 {
    ((left as u64) << 32) | right as u64
}

#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    prev: u32,
    next: u32,
    alive: bool,
}

/// Reusable buffers for merging.
#[derive(Default)]
struct Scratch {
    ids: Vec<u32>,
    pairs: Vec<Merge>,
    symbols: Vec<Symbol>,
    heap: BinaryHeap<Reverse<(u32, u32)>>,
}

/// Per-thread cache of merged pieces: piece bytes → ids, in two flat arenas. Cleared wholesale
/// when full, which keeps it bounded without LRU bookkeeping; hot pieces come back at once.
#[derive(Default)]
pub(super) struct PieceCache {
    /// The encoder this cache belongs to ([`FastEncoder`](super::FastEncoder) instance id).
    pub(super) owner: u64,
    table: HashTable<CacheEntry>,
    keys: Vec<u8>,
    ids: Vec<u32>,
    scratch: Scratch,
}

struct CacheEntry {
    hash: u64,
    key_start: u32,
    key_len: u32,
    ids_start: u32,
    ids_len: u32,
}

impl PieceCache {
    pub(super) fn reset(&mut self, owner: u64) {
        self.owner = owner;
        self.table.clear();
        self.keys.clear();
        self.ids.clear();
    }

    #[inline]
    fn key(&self, e: &CacheEntry) -> &[u8] {
        &self.keys[e.key_start as usize..(e.key_start + e.key_len) as usize]
    }

    #[inline]
    fn get(&self, piece: &[u8], hash: u64) -> Option<&[u32]> {
        let e = self
            .table
            .find(hash, |e| e.hash == hash && self.key(e) == piece)?;
        Some(&self.ids[e.ids_start as usize..(e.ids_start + e.ids_len) as usize])
    }

    fn insert(&mut self, piece: &[u8], hash: u64, ids: &[u32]) {
        if self.table.len() >= CACHE_MAX_ENTRIES
            || self.keys.len() + piece.len() > CACHE_MAX_BYTES
            || self.ids.len() + ids.len() > CACHE_MAX_BYTES / 4
        {
            let owner = self.owner;
            self.reset(owner);
        }
        let entry = CacheEntry {
            hash,
            key_start: self.keys.len() as u32,
            key_len: piece.len() as u32,
            ids_start: self.ids.len() as u32,
            ids_len: ids.len() as u32,
        };
        self.keys.extend_from_slice(piece);
        self.ids.extend_from_slice(ids);
        self.table.insert_unique(hash, entry, |e| e.hash);
    }
}

/// The merge side of [`Bpe::new`]: `(left << 32) | right` → rank and merged token, checking that
/// every token exists and the ranks are consistent.
fn merge_table(
    vocab: &[(String, u32)],
    merges: &[(&str, &str)],
    hasher: &FixedState,
) -> Result<HashMap<u64, Merge, FixedState>, BpeError> {
    let mut table = HashMap::with_capacity_and_hasher(merges.len(), hasher.clone());
    let by_text: HashMap<&str, u32, FixedState> = vocab
        .iter()
        .map(|(token, id)| (token.as_str(), *id))
        .collect();
    let id_of = |token: &str| {
        by_text
            .get(token)
            .copied()
            .ok_or_else(|| BpeError::UnknownMergeToken(token.to_owned()))
    };
    let mut previous: Option<(usize, u32)> = None;
    let mut joined = String::new();
    for (rank, (left, right)) in merges.iter().enumerate() {
        joined.clear();
        joined.push_str(left);
        joined.push_str(right);
        let merged = id_of(&joined)?;
        // Rank consistency (issue #6): merge order must be the token-id order of the merged
        // tokens, as in every BPE trained the usual way (Qwen, Llama-3, GPT-4). Merging below
        // uses the merge ranks themselves and would be exact without it; the check keeps
        // tokenizers unlike those we test with on the `tokenizers` crate.
        if let Some((prev_rank, prev_id)) = previous {
            if merged < prev_id {
                return Err(BpeError::NotRankConsistent {
                    rank,
                    left: (*left).to_owned(),
                    right: (*right).to_owned(),
                    merged,
                    prev_rank,
                    prev_id,
                });
            }
        }
        previous = Some((rank, merged));
        let key = pair_key(id_of(left)?, id_of(right)?);
        let rank = u32::try_from(rank).map_err(|_| BpeError::TooManyMerges)?;
        // A repeated pair keeps its last rank, as in `tokenizers` (a map built in order).
        table.insert(key, Merge { rank, id: merged });
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, written as plainly as possible: while some adjacent pair has a merge,
    /// merge the one with the lowest rank, the leftmost among equals.
    fn reference(bpe: &Bpe, piece: &[u8]) -> Vec<u32> {
        let mut ids: Vec<u32> = piece.iter().map(|&b| bpe.byte_ids[b as usize]).collect();
        loop {
            let best = (0..ids.len().saturating_sub(1))
                .map(|k| (bpe.merge_of(ids[k], ids[k + 1]), k))
                .filter(|(m, _)| m.rank != u32::MAX)
                .min_by_key(|(m, k)| (m.rank, *k));
            let Some((m, k)) = best else { return ids };
            ids[k] = m.id;
            ids.remove(k + 1);
        }
    }

    /// A byte-level BPE over a 4-letter alphabet with random (rank-consistent) merges, so that
    /// pieces have many competing and overlapping merges.
    fn random_bpe(seed: u64) -> Bpe {
        let inverse = crate::tokenize::vocab::byte_level_inverse();
        let forward: HashMap<u8, char> = (0..=0x17fu32)
            .filter_map(char::from_u32)
            .filter_map(|c| inverse(c).map(|b| (b, c)))
            .collect();
        let mut vocab: HashMap<String, u32> = (0..=255u8)
            .map(|b| (forward[&b].to_string(), b as u32))
            .collect();
        let mut tokens: Vec<String> = "abcd".chars().map(String::from).collect();
        let mut merges = Vec::new();
        let mut state = seed;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as usize
        };
        while merges.len() < 300 {
            let left = tokens[next() % tokens.len()].clone();
            let right = tokens[next() % tokens.len()].clone();
            let merged = format!("{left}{right}");
            if merged.len() > 12 || merges.contains(&(left.clone(), right.clone())) {
                continue;
            }
            if !vocab.contains_key(&merged) {
                vocab.insert(merged.clone(), vocab.len() as u32);
                tokens.push(merged);
            } else if vocab[&merged] + 1 != vocab.len() as u32 {
                // Reusing an older token would break rank consistency; skip.
                continue;
            }
            merges.push((left, right));
        }
        let vocab: Vec<(String, u32)> = vocab.into_iter().collect();
        let merges: Vec<(&str, &str)> = merges
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        Bpe::new(&vocab, &merges, false, inverse).expect("valid")
    }

    #[test]
    fn short_and_long_merging_follow_the_definition() {
        for seed in 0..20 {
            let bpe = random_bpe(seed);
            let mut scratch = Scratch::default();
            let mut state = seed + 1000;
            for len in (2..40).chain([63, 64, 65, 100, 300]) {
                for _ in 0..20 {
                    let piece: Vec<u8> = (0..len)
                        .map(|_| {
                            state = state.wrapping_mul(6364136223846793005).wrapping_add(1);
                            b"abcd"[(state >> 62) as usize]
                        })
                        .collect();
                    let want = reference(&bpe, &piece);
                    let (mut short, mut long) = (Vec::new(), Vec::new());
                    bpe.merge_short(&piece, &mut scratch, &mut short);
                    bpe.merge_long(&piece, &mut scratch, &mut long);
                    assert_eq!(short, want, "short, seed {seed}, {piece:?}");
                    assert_eq!(long, want, "long, seed {seed}, {piece:?}");
                }
            }
        }
    }

    #[test]
    fn cache_returns_what_was_stored_and_stays_bounded() {
        let mut cache = PieceCache::default();
        cache.reset(1);
        let hasher = FixedState::default();
        for n in 0..(CACHE_MAX_ENTRIES + 10) as u32 {
            let piece = n.to_le_bytes();
            cache.insert(&piece, hasher.hash_one(piece.as_slice()), &[n, n + 1]);
        }
        assert!(cache.table.len() <= CACHE_MAX_ENTRIES);
        let last = (CACHE_MAX_ENTRIES + 9) as u32;
        let piece = last.to_le_bytes();
        assert_eq!(
            cache.get(&piece, hasher.hash_one(piece.as_slice())),
            Some([last, last + 1].as_slice())
        );
    }
}
