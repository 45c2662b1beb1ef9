//! Near-duplicate detection: MinHash signatures over shingles of a text scope, banded for LSH.
//!
//! Two rows are candidates when they share a band; near-duplicate groups are the connected
//! components of that relation (union-find), and each group's survivor is its smallest row
//! (position order), so the result does not depend on the order rows are inserted in.
//!
//! Hashing (all stable and specified):
//! - a shingle (a run of `n` normalized words joined by one space, or of `n` characters of the
//!   normalized text, see [`text::normalize`]) hashes to `h`, the high 32 bits of
//!   `xxh3_64(shingle, seed)`;
//! - permutation `k` (of `bands × rows`) maps it to `(a_k·h + b_k) mod 2^32`, a bijection of
//!   the 32-bit values, with `a_k = xxh3_64("a" ‖ k, seed) mod 2^32` made odd and `b_k =
//!   xxh3_64("b" ‖ k, seed) mod 2^32` (`k` as 8 little-endian bytes); the signature keeps each
//!   permutation's minimum. This is datatrove's universal hashing `(a·h + b) mod p` done in
//!   32-bit words (datatrove also keeps 32-bit values by default): 32-bit lanes vectorize on
//!   any x86-64, and the cost is about 75 ns a shingle on baseline x86-64 (SSE2, which lacks a
//!   32-bit lane multiply and unsigned minimum) and a few times less where the CPU has AVX2
//!   (detected at run time; integer arithmetic, so the values are the same), instead of 460 ns
//!   for the 64-bit `mod 2^61 - 1` form; `tests/it/near_dup.rs` shows the grouping still follows
//!   the theory;
//! - band `j` hashes its `rows` minima (4 little-endian bytes each) with `xxh3_64(·, seed)`.
//!
//! A text with fewer words (characters) than `n` but at least one is one shingle of all of it;
//! a text with none has no signature and matches nothing.
//!
//! Defaults: 5-word shingles, 22 bands × 12 rows (264 permutations). The chance that a pair at
//! Jaccard similarity J becomes a candidate is 1 − (1 − J^12)^22: 0.966 at J = 0.85, 0.999 at
//! 0.9, 0.51 at 0.75, 0.26 at 0.7, 0.0054 at 0.5; the implied threshold (1/22)^(1/12) ≈ 0.773
//! (datatrove's 14 × 8: ≈ 0.72, with 0.988 at 0.85 but 5.3% at 0.5). The state is 22 × 8 = 176
//! bytes a row. `tests/it/near_dup.rs` measures it against exact Jaccard similarity.

use super::text::{self, RowText, Scope};
use crate::conversation::Conversation;
use rayon::prelude::*;
use serde::Deserialize;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// `near_dup:` in the YAML.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct NearDupConfig {
    /// Which turns are compared. Default `all`.
    #[serde(default)]
    pub scope: Scope,
    /// `{words: n}` (default 5) or `{chars: n}`.
    #[serde(default)]
    pub shingle: Shingle,
    #[serde(default = "default_bands")]
    pub bands: usize,
    #[serde(default = "default_rows")]
    pub rows: usize,
    #[serde(default)]
    pub seed: u64,
    /// The sources compared (by name); all of them when absent. Rows of other sources are
    /// never near-duplicates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<Vec<String>>,
}

impl Default for NearDupConfig {
    fn default() -> Self {
        NearDupConfig {
            scope: Scope::All,
            shingle: Shingle::default(),
            bands: default_bands(),
            rows: default_rows(),
            seed: 0,
            sources: None,
        }
    }
}

fn default_bands() -> usize {
    22
}
fn default_rows() -> usize {
    12
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Shingle {
    /// Runs of n normalized words.
    Words(usize),
    /// Runs of n characters of the normalized text.
    Chars(usize),
}

// By hand: serde_yaml_ng reads derived enums only from `!tag` syntax; `{words: 5}` reads better.
impl<'de> Deserialize<'de> for Shingle {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Form {
            words: Option<usize>,
            chars: Option<usize>,
        }
        match Form::deserialize(deserializer)? {
            Form {
                words: Some(n),
                chars: None,
            } => Ok(Shingle::Words(n)),
            Form {
                words: None,
                chars: Some(n),
            } => Ok(Shingle::Chars(n)),
            _ => Err(serde::de::Error::custom(
                "`shingle` is {words: n} or {chars: n}",
            )),
        }
    }
}

impl Default for Shingle {
    fn default() -> Self {
        Shingle::Words(5)
    }
}

/// Why a `near_dup:` section is invalid (a plan error); the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NearDupConfigError {
    #[error("near_dup: `shingle` length must be at least 1")]
    NoShingle,
    #[error("near_dup: `bands` and `rows` must be at least 1")]
    NoBands,
    #[error("near_dup: bands × rows = {0} is more than 4096 permutations")]
    TooManyPermutations(usize),
}

impl NearDupConfig {
    /// Checks the numbers; the message names the field.
    pub fn check(&self) -> Result<(), NearDupConfigError> {
        let n = match self.shingle {
            Shingle::Words(n) | Shingle::Chars(n) => n,
        };
        if n == 0 {
            return Err(NearDupConfigError::NoShingle);
        }
        if self.bands == 0 || self.rows == 0 {
            return Err(NearDupConfigError::NoBands);
        }
        if self.bands * self.rows > 4096 {
            return Err(NearDupConfigError::TooManyPermutations(
                self.bands * self.rows,
            ));
        }
        Ok(())
    }

    /// The chance that a pair at Jaccard similarity `j` shares a band: 1 − (1 − j^r)^b.
    pub fn candidate_probability(&self, j: f64) -> f64 {
        1.0 - (1.0 - j.powi(self.rows as i32)).powi(self.bands as i32)
    }

    /// The similarity where the S-curve rises steepest, about (1/b)^(1/r).
    pub fn threshold(&self) -> f64 {
        (1.0 / self.bands as f64).powf(1.0 / self.rows as f64)
    }
}

/// Computes band hashes of conversations under one config.
#[derive(Debug, Clone)]
pub struct MinHasher {
    scope: Scope,
    shingle: Shingle,
    bands: usize,
    rows: usize,
    seed: u64,
    /// a_k and b_k per permutation (two arrays, so the inner loop vectorizes).
    a: Vec<u32>,
    b: Vec<u32>,
}

impl MinHasher {
    /// The config must have passed [`NearDupConfig::check`].
    pub fn new(config: &NearDupConfig) -> Self {
        let seed = config.seed;
        let (a, b) = (0..(config.bands * config.rows) as u64)
            .map(|k| {
                let tagged = |tag: u8| {
                    let mut bytes = [0u8; 9];
                    bytes[0] = tag;
                    bytes[1..].copy_from_slice(&k.to_le_bytes());
                    xxh3_64_with_seed(&bytes, seed)
                };
                (tagged(b'a') as u32 | 1, tagged(b'b') as u32)
            })
            .unzip();
        MinHasher {
            scope: config.scope,
            shingle: config.shingle,
            bands: config.bands,
            rows: config.rows,
            seed,
            a,
            b,
        }
    }

    pub fn band_count(&self) -> usize {
        self.bands
    }

    /// The band hashes of `c`'s scope text, or `None` when it has no shingle.
    pub fn bands(&self, c: &Conversation) -> Option<Box<[u64]>> {
        self.bands_of_text(&text::scope_text(c, self.scope))
    }

    /// [`MinHasher::bands`] of a row whose normalized texts other steps share.
    pub fn bands_of_row(&self, row: &RowText) -> Option<Box<[u64]>> {
        self.bands_of_normalized(row.normalized(self.scope))
    }

    /// The scope whose text [`MinHasher::bands`] reads.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// The band hashes of a raw text (normalized here).
    pub fn bands_of_text(&self, raw: &str) -> Option<Box<[u64]>> {
        self.bands_of_normalized(&text::normalize(raw))
    }

    /// The band hashes of [`text::normalize`]d text (to normalize a scope's text once for
    /// several steps).
    pub fn bands_of_normalized(&self, normalized: &str) -> Option<Box<[u64]>> {
        let signature = self.signature(normalized)?;
        let mut bytes = Vec::with_capacity(self.rows * 4);
        let bands = signature
            .chunks_exact(self.rows)
            .map(|band| {
                bytes.clear();
                for v in band {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
                xxh3_64_with_seed(&bytes, self.seed)
            })
            .collect();
        Some(bands)
    }

    /// The MinHash signature of normalized text: one minimum per permutation.
    pub fn signature(&self, normalized: &str) -> Option<Vec<u32>> {
        let mut hashes = Vec::new();
        for_each_shingle(normalized, self.shingle, &mut |shingle| {
            hashes.push((xxh3_64_with_seed(shingle.as_bytes(), self.seed) >> 32) as u32);
        });
        if hashes.is_empty() {
            return None;
        }
        let mut mins = vec![u32::MAX; self.a.len()];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above); the function is plain safe Rust
            // compiled for it.
            unsafe { minimize_avx2(&mut mins, &self.a, &self.b, &hashes) };
            return Some(mins);
        }
        minimize(&mut mins, &self.a, &self.b, &hashes);
        Some(mins)
    }
}

/// `mins[k] = min(mins[k], a[k]·h + b[k] mod 2^32)` over every shingle hash `h`. Integer
/// arithmetic, so every instruction set gives the same values; the loop over `k` vectorizes
/// (zipped slices: no bounds checks).
#[inline(always)]
fn minimize(mins: &mut [u32], a: &[u32], b: &[u32], hashes: &[u32]) {
    for &h in hashes {
        for ((m, &a), &b) in mins.iter_mut().zip(a).zip(b) {
            *m = (*m).min(a.wrapping_mul(h).wrapping_add(b));
        }
    }
}

/// [`minimize`] compiled for AVX2, chosen at run time: x86-64's baseline (SSE2) has neither a
/// 32-bit lane multiply nor an unsigned 32-bit minimum, so there each takes several
/// instructions; AVX2 does eight lanes in one.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn minimize_avx2(mins: &mut [u32], a: &[u32], b: &[u32], hashes: &[u32]) {
    minimize(mins, a, b, hashes)
}

/// Calls `f` with every shingle of normalized text: contiguous slices of it, so nothing is
/// allocated per shingle.
pub fn for_each_shingle(normalized: &str, shingle: Shingle, f: &mut dyn FnMut(&str)) {
    match shingle {
        Shingle::Words(n) => {
            // Byte ranges of the words: normalized text is words joined by single spaces.
            let spans = word_spans(normalized);
            if spans.is_empty() {
                return;
            }
            if spans.len() < n {
                f(normalized);
                return;
            }
            for i in 0..=spans.len() - n {
                f(&normalized[spans[i].0..spans[i + n - 1].1]);
            }
        }
        Shingle::Chars(n) => {
            let starts: Vec<usize> = normalized.char_indices().map(|(i, _)| i).collect();
            if starts.is_empty() {
                return;
            }
            if starts.len() < n {
                f(normalized);
                return;
            }
            for i in 0..=starts.len() - n {
                let end = starts.get(i + n).copied().unwrap_or(normalized.len());
                f(&normalized[starts[i]..end]);
            }
        }
    }
}

/// Byte ranges of the space-separated words of normalized text.
pub fn word_spans(normalized: &str) -> Vec<(usize, usize)> {
    // About one word in six bytes of English: one allocation for most texts.
    let mut spans = Vec::with_capacity(normalized.len() / 5 + 1);
    let mut start = 0;
    for i in memchr::memchr_iter(b' ', normalized.as_bytes()) {
        if i > start {
            spans.push((start, i));
        }
        start = i + 1;
    }
    if normalized.len() > start {
        spans.push((start, normalized.len()));
    }
    spans
}

/// The band hashes of every row with a signature, and the candidate relation over them.
///
/// Memory: `bands × 8` bytes a row (row-major, indexed by row) plus a bit a row for presence;
/// [`NearDupIndex::survivors`] adds 4 bytes a row (union-find parents) and, one band at a time,
/// 16 bytes a row (the band's (hash, row) pairs, sorted).
#[derive(Debug, Clone)]
pub struct NearDupIndex {
    bands: usize,
    hashes: Vec<u64>,
    present: Vec<u64>,
}

impl NearDupIndex {
    pub fn new(bands: usize) -> Self {
        NearDupIndex {
            bands: bands.max(1),
            hashes: Vec::new(),
            present: Vec::new(),
        }
    }

    /// An index with room for `rows` rows, so that it never grows past them.
    pub fn with_rows(bands: usize, rows: u32) -> Self {
        let mut index = NearDupIndex::new(bands);
        index.hashes.reserve_exact(rows as usize * index.bands);
        index.present.reserve_exact((rows as usize).div_ceil(64));
        index
    }

    /// Records `row`'s band hashes (rows in any order; inserting a row again replaces it).
    /// `bands` must have the index's band count (a [`MinHasher`] of the same config).
    pub fn insert(&mut self, row: u32, bands: &[u64]) {
        assert_eq!(
            bands.len(),
            self.bands,
            "band count differs from the index's"
        );
        let row = row as usize;
        let end = (row + 1) * self.bands;
        if self.hashes.len() < end {
            self.hashes.resize(end, 0);
        }
        self.hashes[row * self.bands..end].copy_from_slice(bands);
        let word = row / 64;
        if self.present.len() <= word {
            self.present.resize(word + 1, 0);
        }
        self.present[word] |= 1 << (row % 64);
    }

    fn is_present(&self, row: usize) -> bool {
        self.present
            .get(row / 64)
            .is_some_and(|w| w & (1 << (row % 64)) != 0)
    }

    /// Bytes held, for reports.
    pub fn heap_bytes(&self) -> usize {
        self.hashes.capacity() * 8 + self.present.capacity() * 8
    }

    /// For each of `rows` rows, the smallest row of its group: itself when it survives. Rows
    /// never inserted are their own group. The bands are sorted in parallel (on the current
    /// rayon pool): every root is its group's smallest row whatever order the pairs are joined
    /// in, so the result is the same at any thread count.
    pub fn survivors(self, rows: u32) -> Vec<u32> {
        let stored = self.hashes.len() / self.bands;
        let n = (rows as usize).max(stored);
        let band_pairs = |band: usize| -> Vec<(u32, u32)> {
            let mut pairs: Vec<(u64, u32)> = (0..stored)
                .filter(|&row| self.is_present(row))
                .map(|row| (self.hashes[row * self.bands + band], row as u32))
                .collect();
            pairs.sort_unstable();
            pairs
                .windows(2)
                .filter(|w| w[0].0 == w[1].0)
                .map(|w| (w[0].1, w[1].1))
                .collect()
        };
        let joined: Vec<Vec<(u32, u32)>> =
            (0..self.bands).into_par_iter().map(band_pairs).collect();
        drop(self.hashes);
        let mut parent: Vec<u32> = (0..n as u32).collect();
        for (a, b) in joined.into_iter().flatten() {
            union(&mut parent, a, b);
        }
        let mut out: Vec<u32> = (0..n as u32).map(|row| find(&mut parent, row)).collect();
        out.truncate(rows as usize);
        out
    }
}

/// The root of `x`, halving the path on the way.
fn find(parent: &mut [u32], mut x: u32) -> u32 {
    while parent[x as usize] != x {
        let grand = parent[parent[x as usize] as usize];
        parent[x as usize] = grand;
        x = grand;
    }
    x
}

/// Joins the groups of `a` and `b` under the smaller root, so every root is its group's
/// smallest row.
fn union(parent: &mut [u32], a: u32, b: u32) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    if ra != rb {
        let (lo, hi) = if ra < rb { (ra, rb) } else { (rb, ra) };
        parent[hi as usize] = lo;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Message;

    fn conv(user: &str, assistant: &str) -> Conversation {
        Conversation {
            messages: vec![Message::user(user), Message::assistant(assistant)],
            tools: vec![],
        }
    }

    #[test]
    fn shingles_of_words_and_characters() {
        let collect = |text: &str, s: Shingle| {
            let mut out = Vec::new();
            for_each_shingle(text, s, &mut |x| out.push(x.to_string()));
            out
        };
        assert_eq!(collect("a b c d", Shingle::Words(3)), ["a b c", "b c d"]);
        assert_eq!(collect("a b", Shingle::Words(3)), ["a b"]);
        assert!(collect("", Shingle::Words(3)).is_empty());
        assert_eq!(collect("héllo", Shingle::Chars(4)), ["héll", "éllo"]);
        assert_eq!(collect("ab", Shingle::Chars(4)), ["ab"]);
    }

    #[test]
    fn signatures_follow_the_text() {
        let h = MinHasher::new(&NearDupConfig::default());
        let a = h
            .bands(&conv(
                "Write a function that adds two numbers.",
                "def add(a, b): return a + b",
            ))
            .expect("bands");
        assert_eq!(a.len(), 22);
        // Case, punctuation and spacing are normalized away; the turn split is not a word.
        let b = h
            .bands(&conv(
                "write a FUNCTION that adds two numbers",
                "def add a b  return a+b",
            ))
            .expect("bands");
        assert_eq!(a, b);
        let c = h
            .bands(&conv(
                "Write a function that multiplies two numbers.",
                "def mul(a, b): return a * b",
            ))
            .expect("bands");
        assert_ne!(a, c);
        assert_eq!(h.bands(&conv("", "...")), None);
        // The scope decides which turns count.
        let user_only = MinHasher::new(&NearDupConfig {
            scope: Scope::User,
            ..NearDupConfig::default()
        });
        assert_eq!(
            user_only.bands(&conv("same question here please", "answer one")),
            user_only.bands(&conv("same question here please", "a different answer"))
        );
        // Another seed, other hashes.
        let seeded = MinHasher::new(&NearDupConfig {
            seed: 1,
            ..NearDupConfig::default()
        });
        assert_ne!(
            seeded.bands_of_text("one two three four five six"),
            h.bands_of_text("one two three four five six")
        );
    }

    #[test]
    fn every_instruction_set_gives_the_same_signature() {
        let h = MinHasher::new(&NearDupConfig::default());
        let hashes: Vec<u32> = (0..500u32)
            .map(|i| i.wrapping_mul(0x9E37_79B9).rotate_left(7))
            .collect();
        let mut portable = vec![u32::MAX; h.a.len()];
        minimize(&mut portable, &h.a, &h.b, &hashes);
        let text = "one two three four five six seven eight nine ten eleven";
        let mut expected = vec![u32::MAX; h.a.len()];
        for_each_shingle(text, Shingle::Words(5), &mut |s| {
            let x = (xxh3_64_with_seed(s.as_bytes(), 0) >> 32) as u32;
            for ((m, &a), &b) in expected.iter_mut().zip(&h.a).zip(&h.b) {
                *m = (*m).min(a.wrapping_mul(x).wrapping_add(b));
            }
        });
        // `signature` takes the AVX2 path where the CPU has it: the plain loop's values.
        assert_eq!(h.signature(text), Some(expected));
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let mut avx2 = vec![u32::MAX; h.a.len()];
            // SAFETY: AVX2 is present (checked above).
            unsafe { minimize_avx2(&mut avx2, &h.a, &h.b, &hashes) };
            assert_eq!(avx2, portable);
        }
    }

    #[test]
    fn groups_are_connected_components_with_the_smallest_row() {
        // Row 4 shares band 0 with row 2, row 2 band 1 with row 7, row 7 band 2 with row 3:
        // one group {2, 3, 4, 7}, survivor 2. Row 5 is alone; rows 0, 1, 6 were never inserted.
        let bands = |x: [u64; 3]| x;
        let rows = [
            (4u32, bands([10, 11, 12])),
            (2, bands([10, 21, 22])),
            (7, bands([30, 21, 32])),
            (3, bands([40, 41, 32])),
            (5, bands([50, 51, 52])),
        ];
        let mut expected = None;
        for order in [[0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 0, 4, 1, 3]] {
            let mut index = NearDupIndex::new(3);
            for i in order {
                index.insert(rows[i].0, &rows[i].1);
            }
            let got = index.survivors(9);
            assert_eq!(got, [0, 1, 2, 2, 2, 5, 6, 2, 8]);
            if let Some(e) = &expected {
                assert_eq!(&got, e);
            }
            expected = Some(got);
        }
        // Fewer rows asked than inserted: the relation still goes through the extra rows.
        let mut index = NearDupIndex::new(3);
        for (row, b) in rows {
            index.insert(row, &b);
        }
        assert_eq!(index.survivors(5), [0, 1, 2, 2, 2]);
    }

    #[test]
    fn state_is_bands_times_eight_bytes_a_row() {
        let mut index = NearDupIndex::with_rows(22, 10_000);
        for row in 0..10_000u32 {
            let b: Vec<u64> = (0..22).map(|k| (row as u64) << 8 | k).collect();
            index.insert(row, &b);
        }
        let per_row = index.heap_bytes() as f64 / 10_000.0;
        assert!((176.0..177.0).contains(&per_row), "{per_row}");
        assert_eq!(index.survivors(10_000), (0..10_000).collect::<Vec<u32>>());
    }

    #[test]
    fn config_yaml() {
        let c: NearDupConfig = serde_yaml_ng::from_str(
            "{scope: assistant, shingle: {chars: 24}, bands: 20, rows: 13, seed: 42}",
        )
        .expect("parses");
        assert_eq!(c.shingle, Shingle::Chars(24));
        assert_eq!(
            (c.scope, c.bands, c.rows, c.seed),
            (Scope::Assistant, 20, 13, 42)
        );
        let d: NearDupConfig = serde_yaml_ng::from_str("{}").expect("defaults");
        assert_eq!(d, NearDupConfig::default());
        let err = |y: &str| {
            serde_yaml_ng::from_str::<NearDupConfig>(y)
                .expect_err("bad")
                .to_string()
        };
        assert!(err("{shingle: {words: 5, chars: 3}}").contains("{words: n} or {chars: n}"));
        assert!(err("{band: 3}").contains("unknown field `band`"));
        let zero = NearDupConfig {
            bands: 0,
            ..NearDupConfig::default()
        };
        assert_eq!(
            zero.check().map_err(|e| e.to_string()),
            Err("near_dup: `bands` and `rows` must be at least 1".into())
        );
        assert_eq!(NearDupConfig::default().check(), Ok(()));
    }
}
