//! `stats.json`: length and supervision statistics per source and overall, and token
//! frequencies, gathered in the build's single pass with memory that does not grow with the
//! dataset (fixed histogram bins, one counter per vocabulary id).
//!
//! Rows are counted from the shard writer, which sees every output row; turns and tool calls
//! need the conversation, so the pipeline reports them with [`DatasetStats::add_conversation`].
//! Every number is an integer count or a ratio of two, so the file is byte-deterministic.

use crate::conversation::{Conversation, Role};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// Values below this are binned exactly (one bin per value).
const EXACT_BELOW: u64 = 32;
/// Bins per power of two above [`EXACT_BELOW`]: a bin spans at most 1/16 of its lower bound.
const SUB_BINS: u64 = 16;
const SUB_BITS: u32 = 4;
/// log2(EXACT_BELOW).
const FIRST_OCTAVE: u32 = 5;
/// Bins cover every u64: 32 exact bins, then 16 per octave from 2^5 to 2^64.
const BINS: usize = EXACT_BELOW as usize + (64 - FIRST_OCTAVE as usize) * SUB_BINS as usize;

/// Bin of a value: exact below 32, then 16 equal-width bins per octave (integer arithmetic
/// only, so every platform bins alike).
fn bin_of(v: u64) -> usize {
    if v < EXACT_BELOW {
        return v as usize;
    }
    let octave = 63 - v.leading_zeros(); // >= 5
    let sub = (v >> (octave - SUB_BITS)) & (SUB_BINS - 1);
    EXACT_BELOW as usize + ((octave - FIRST_OCTAVE) as usize) * SUB_BINS as usize + sub as usize
}

/// `[lo, hi)` of a bin (`hi` saturates at u64::MAX for the last one).
fn bin_bounds(bin: usize) -> (u64, u64) {
    if bin < EXACT_BELOW as usize {
        return (bin as u64, bin as u64 + 1);
    }
    let rest = bin - EXACT_BELOW as usize;
    let octave = FIRST_OCTAVE + (rest / SUB_BINS as usize) as u32;
    let sub = (rest % SUB_BINS as usize) as u64;
    let width = 1u64 << (octave - SUB_BITS);
    let lo = (SUB_BINS + sub) << (octave - SUB_BITS);
    (lo, lo.saturating_add(width))
}

/// A histogram over fixed log-spaced bins, with the exact count, sum, min and max.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Box<[u64; BINS]>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: Box::new([0; BINS]),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

impl Histogram {
    pub fn add(&mut self, v: u64) {
        self.counts[bin_of(v)] += 1;
        self.count += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    pub fn merge(&mut self, o: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(o.counts.iter()) {
            *a += b;
        }
        self.count += o.count;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
    }

    /// The nearest-rank `q`-quantile (`q` in permille: the smallest value with at least
    /// `q/1000` of the values at or below it), reported as the upper end of its bin, capped at
    /// the exact maximum: exact below 32, otherwise at most 1/16 (6.25%) above the true value.
    fn quantile(&self, permille: u64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        // ceil(count * q / 1000), at least 1.
        let rank = (u128::from(self.count) * u128::from(permille))
            .div_ceil(1000)
            .max(1);
        let mut seen = 0u128;
        for (bin, &c) in self.counts.iter().enumerate() {
            seen += u128::from(c);
            if seen >= rank {
                return (bin_bounds(bin).1 - 1).min(self.max);
            }
        }
        self.max
    }

    pub fn summary(&self) -> HistogramSummary {
        let bins = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(bin, &c)| {
                let (lo, hi) = bin_bounds(bin);
                [lo, hi, c]
            })
            .collect();
        HistogramSummary {
            count: self.count,
            sum: u64::try_from(self.sum).unwrap_or(u64::MAX),
            mean: if self.count == 0 {
                0.0
            } else {
                // Rounded to 0.01 so the text does not depend on float formatting details.
                ((self.sum as f64 / self.count as f64) * 100.0).round() / 100.0
            },
            min: if self.count == 0 { 0 } else { self.min },
            p50: self.quantile(500),
            p90: self.quantile(900),
            p99: self.quantile(990),
            max: self.max,
            bins,
        }
    }
}

/// A histogram as written to `stats.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistogramSummary {
    pub count: u64,
    pub sum: u64,
    pub mean: f64,
    pub min: u64,
    /// Percentiles: the upper end of the bin holding the nearest-rank value, capped at `max`.
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
    /// Non-empty bins in order, as `[lo, hi_exclusive, count]`.
    pub bins: Vec<[u64; 3]>,
}

/// One source's (or the whole dataset's) accumulators.
#[derive(Debug, Clone, Default)]
struct Accumulator {
    rows: u64,
    tokens: u64,
    supervised_tokens: u64,
    seq_len: Histogram,
    supervised: Histogram,
    conversations: u64,
    turns: Histogram,
    tool_calls: Histogram,
}

impl Accumulator {
    fn merge(&mut self, o: &Accumulator) {
        self.rows += o.rows;
        self.tokens += o.tokens;
        self.supervised_tokens += o.supervised_tokens;
        self.seq_len.merge(&o.seq_len);
        self.supervised.merge(&o.supervised);
        self.conversations += o.conversations;
        self.turns.merge(&o.turns);
        self.tool_calls.merge(&o.tool_calls);
    }

    fn summary(&self) -> SourceSummary {
        let per_conversation = self.conversations > 0;
        SourceSummary {
            rows: self.rows,
            tokens: self.tokens,
            supervised_tokens: self.supervised_tokens,
            seq_len: self.seq_len.summary(),
            supervised_per_row: self.supervised.summary(),
            conversations: per_conversation.then_some(self.conversations),
            turns: per_conversation.then(|| self.turns.summary()),
            tool_calls: per_conversation.then(|| self.tool_calls.summary()),
        }
    }
}

/// Statistics of one source or of the whole dataset in `stats.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSummary {
    pub rows: u64,
    pub tokens: u64,
    pub supervised_tokens: u64,
    pub seq_len: HistogramSummary,
    /// Supervised (loss-mask 1) tokens per output row.
    pub supervised_per_row: HistogramSummary,
    /// Kept conversations, when the pipeline reported them ([`DatasetStats::add_conversation`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversations: Option<u64>,
    /// Messages per kept conversation, system messages not counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<HistogramSummary>,
    /// Tool calls per kept conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<HistogramSummary>,
}

/// `stats.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsFile {
    /// Bumped when the layout changes.
    pub format: u32,
    /// How the histogram bins are laid out (for readers that recompute them).
    pub bins: String,
    /// Token ids counted in the frequency files: the tokenizer's vocabulary with added tokens.
    pub vocab_size: u64,
    /// Distinct token ids seen in supervised positions (the keys of `token_freq.pt`).
    pub distinct_supervised_ids: u64,
    pub distinct_ids: u64,
    pub total: SourceSummary,
    pub sources: IndexMap<String, SourceSummary>,
}

pub const STATS_FORMAT: u32 = 1;
pub const BINS_DESCRIPTION: &str = "one bin per value below 32; above, 16 equal-width bins per power of two ([2^k, 2^(k+1)) split at multiples of 2^(k-4)); percentiles are nearest-rank, reported as the upper end of their bin capped at max: exact below 32, at most 6.25% high above";

/// Everything `stats.json` and the token-frequency files are made from.
#[derive(Debug, Clone)]
pub struct DatasetStats {
    names: Vec<String>,
    sources: Vec<Accumulator>,
    /// Occurrences of each token id over all tokens, and over supervised ones.
    freq_all: Vec<u64>,
    freq_supervised: Vec<u64>,
    vocab_size: usize,
}

impl DatasetStats {
    /// Empty statistics for the plan's sources (in plan order: a row's `source` index) and a
    /// vocabulary of `vocab_size` ids (ids beyond it still count; the tables grow).
    pub fn new(names: Vec<String>, vocab_size: usize) -> Self {
        DatasetStats {
            sources: vec![Accumulator::default(); names.len()],
            names,
            freq_all: vec![0; vocab_size],
            freq_supervised: vec![0; vocab_size],
            vocab_size,
        }
    }

    fn source(&mut self, source: usize) -> &mut Accumulator {
        // An index past the plan's sources cannot come from a build; keep it rather than panic.
        while self.sources.len() <= source {
            self.names.push(format!("source-{}", self.sources.len()));
            self.sources.push(Accumulator::default());
        }
        &mut self.sources[source]
    }

    /// Empty statistics for the same sources and vocabulary, to be [merged](Self::merge) back.
    pub fn empty_like(&self) -> Self {
        DatasetStats::new(self.names.clone(), self.vocab_size)
    }

    /// Counts one output row: its ids and loss mask (same length; extra mask entries ignored).
    pub fn add_row(&mut self, source: usize, ids: &[i32], mask: &[i8]) {
        let mut supervised = 0u64;
        for (&id, &m) in ids.iter().zip(mask) {
            let id = id.max(0) as usize;
            if id >= self.freq_all.len() {
                self.freq_all.resize(id + 1, 0);
                self.freq_supervised.resize(id + 1, 0);
            }
            self.freq_all[id] += 1;
            if m != 0 {
                self.freq_supervised[id] += 1;
                supervised += 1;
            }
        }
        let acc = self.source(source);
        acc.rows += 1;
        acc.tokens += ids.len() as u64;
        acc.supervised_tokens += supervised;
        acc.seq_len.add(ids.len() as u64);
        acc.supervised.add(supervised);
    }

    /// Counts one kept conversation (once, however many rows `expand` makes of it): `turns` is
    /// its messages other than system, `tool_calls` the calls in its assistant turns. Called by
    /// the pipeline, in any order (the counts do not depend on it).
    pub fn add_conversation(&mut self, source: usize, turns: u64, tool_calls: u64) {
        let acc = self.source(source);
        acc.conversations += 1;
        acc.turns.add(turns);
        acc.tool_calls.add(tool_calls);
    }

    /// `(turns, tool_calls)` of a conversation as [`add_conversation`](Self::add_conversation)
    /// counts them.
    pub fn conversation_counts(conversation: &Conversation) -> (u64, u64) {
        let turns = conversation
            .messages
            .iter()
            .filter(|m| m.role != Role::System)
            .count() as u64;
        let calls = conversation
            .messages
            .iter()
            .map(|m| m.tool_calls.len() as u64)
            .sum();
        (turns, calls)
    }

    /// Adds statistics gathered elsewhere (e.g. another thread) for the same sources.
    pub fn merge(&mut self, o: &DatasetStats) {
        for (i, acc) in o.sources.iter().enumerate() {
            self.source(i).merge(acc);
        }
        for (freq, other) in [
            (&mut self.freq_all, &o.freq_all),
            (&mut self.freq_supervised, &o.freq_supervised),
        ] {
            if freq.len() < other.len() {
                freq.resize(other.len(), 0);
            }
            for (a, b) in freq.iter_mut().zip(other) {
                *a += b;
            }
        }
    }

    /// Occurrences of each token id over all tokens.
    pub fn token_freq_all(&self) -> &[u64] {
        &self.freq_all
    }

    /// Occurrences of each token id over supervised tokens (what a draft vocabulary is built
    /// from).
    pub fn token_freq_supervised(&self) -> &[u64] {
        &self.freq_supervised
    }

    pub fn file(&self) -> StatsFile {
        let mut total = Accumulator::default();
        for acc in &self.sources {
            total.merge(acc);
        }
        let distinct = |f: &[u64]| f.iter().filter(|&&c| c > 0).count() as u64;
        StatsFile {
            format: STATS_FORMAT,
            bins: BINS_DESCRIPTION.to_owned(),
            vocab_size: self.vocab_size.max(self.freq_all.len()) as u64,
            distinct_supervised_ids: distinct(&self.freq_supervised),
            distinct_ids: distinct(&self.freq_all),
            total: total.summary(),
            sources: self
                .names
                .iter()
                .cloned()
                .zip(self.sources.iter().map(Accumulator::summary))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_are_contiguous_exact_below_32_and_at_most_a_sixteenth_wide() {
        let mut next = 0u64;
        for bin in 0..BINS {
            let (lo, hi) = bin_bounds(bin);
            assert_eq!(lo, next, "bin {bin}");
            assert!(hi > lo);
            if lo < 32 {
                assert_eq!(hi, lo + 1);
            } else if bin + 1 < BINS {
                assert!((hi - lo) * 16 <= lo, "bin {bin}: [{lo}, {hi})");
            }
            assert_eq!(bin_of(lo), bin);
            assert_eq!(bin_of(hi - 1), bin);
            next = hi;
        }
        assert_eq!(bin_of(u64::MAX), BINS - 1);
        assert_eq!(bin_bounds(bin_of(1000)), (992, 1024));
        assert_eq!(bin_bounds(bin_of(8192)), (8192, 8704));
    }

    #[test]
    fn percentiles_are_nearest_rank_bin_tops_capped_at_max() {
        let mut h = Histogram::default();
        for v in 1..=100u64 {
            h.add(v);
        }
        let s = h.summary();
        // Nearest-rank p50 is the 50th value, 50, in bin [50, 52): reported as 51.
        assert_eq!((s.count, s.sum, s.min, s.max), (100, 5050, 1, 100));
        assert_eq!(s.p50, 51);
        assert_eq!(s.p90, 91); // 90 in [88, 92)
        assert_eq!(s.p99, 99); // 99 in [96, 100)
        assert_eq!(s.mean, 50.5);
        let mut small = Histogram::default();
        for v in [3u64, 1, 2, 2, 7] {
            small.add(v);
        }
        let s = small.summary();
        assert_eq!((s.p50, s.p90, s.p99, s.max), (2, 7, 7, 7));
        assert_eq!(s.bins, vec![[1, 2, 1], [2, 3, 2], [3, 4, 1], [7, 8, 1]]);
        let empty = Histogram::default().summary();
        assert_eq!((empty.count, empty.min, empty.p50, empty.max), (0, 0, 0, 0));
        assert!(empty.bins.is_empty());
    }

    #[test]
    fn rows_and_conversations_add_up_per_source_and_in_total() {
        let mut st = DatasetStats::new(vec!["a".into(), "b".into()], 4);
        st.add_row(0, &[1, 2, 3], &[0, 1, 1]);
        st.add_row(1, &[3, 3, 5], &[1, 0, 1]);
        st.add_conversation(1, 4, 2);
        let mut other = DatasetStats::new(vec!["a".into(), "b".into()], 4);
        other.add_row(0, &[0], &[0]);
        st.merge(&other);
        let f = st.file();
        assert_eq!(st.token_freq_all(), &[1, 1, 1, 3, 0, 1]);
        assert_eq!(st.token_freq_supervised(), &[0, 0, 1, 2, 0, 1]);
        assert_eq!(
            (f.vocab_size, f.distinct_ids, f.distinct_supervised_ids),
            (6, 5, 3)
        );
        assert_eq!(
            (f.total.rows, f.total.tokens, f.total.supervised_tokens),
            (3, 7, 4)
        );
        let a = &f.sources["a"];
        assert_eq!((a.rows, a.tokens, a.supervised_tokens), (2, 4, 2));
        assert_eq!(a.seq_len.bins, vec![[1, 2, 1], [3, 4, 1]]);
        assert_eq!(a.conversations, None);
        let b = &f.sources["b"];
        assert_eq!(b.conversations, Some(1));
        assert_eq!(b.tool_calls.as_ref().map(|h| h.max), Some(2));
        assert_eq!(f.total.turns.as_ref().map(|h| h.sum), Some(4));
        let json = serde_json::to_string(&f).expect("json");
        let back: StatsFile = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, f);
    }
}
