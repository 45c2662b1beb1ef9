//! Benchmark decontamination: a row that shares an n-gram of its (normalized) scope text with a
//! benchmark item is dropped as `contaminated`, naming the benchmark and the item.
//!
//! Text on both sides is [`text::normalize`]d (NFKC, lowercase, punctuation to spaces, whitespace
//! collapsed). `mode: words` (default) compares runs of `ngram` words (default 13); `mode:
//! chars` compares runs of `window` characters of the normalized text (default 50, as bigcode's
//! decontamination of code), which also catches code whose identifiers were kept but whose
//! prose was not. An item shorter than one n-gram (window) matches when the row contains all of
//! it.

use super::filters::{around, head};
use super::text::{self, RowText, Scope};
use crate::conversation::Conversation;
use crate::hub::HubEntry;
use crate::read::{read_files, Record};
use crate::reject::{Reject, RejectReason, Skip};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// `decontaminate:` in the YAML.
#[derive(Deserialize, Debug, Clone, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct DecontamConfig {
    /// Words per n-gram in `words` mode.
    #[serde(default = "default_ngram")]
    pub ngram: usize,
    #[serde(default)]
    pub mode: DecontamMode,
    /// Characters per window in `chars` mode.
    #[serde(default = "default_window")]
    pub window: usize,
    /// Which turns are compared. Default `all`: a benchmark answer in a response leaks as
    /// much as its problem in a prompt.
    #[serde(default)]
    pub scope: Scope,
    pub benchmarks: Vec<BenchmarkConfig>,
}

fn default_ngram() -> usize {
    13
}
fn default_window() -> usize {
    50
}

#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecontamMode {
    #[default]
    Words,
    Chars,
}

/// One benchmark: local `files` or a `hub:` entry (the build resolves either to paths), and
/// which columns hold the item id and its text.
#[derive(Deserialize, Debug, Clone, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkConfig {
    pub name: String,
    #[serde(default)]
    pub files: Vec<PathBuf>,
    #[serde(default)]
    pub hub: Option<HubEntry>,
    pub columns: BenchmarkColumns,
}

#[derive(Deserialize, Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkColumns {
    /// The item id (a string or an integer), e.g. `task_id`.
    pub id: String,
    /// The text columns, joined by `"\n"`, e.g. `[prompt, canonical_solution]`.
    pub text: Vec<String>,
}

/// Why a `decontaminate:` section is invalid (a plan error); the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecontamConfigError {
    #[error("decontaminate: `ngram` must be at least 1")]
    NoNgram,
    #[error("decontaminate: `window` must be at least 1")]
    NoWindow,
    #[error("decontaminate: `benchmarks` lists none")]
    NoBenchmark,
    #[error("decontaminate: two benchmarks are named `{0}`")]
    Twice(String),
    #[error("decontaminate: benchmark `{0}`: give either `files` or `hub`")]
    FilesOrHub(String),
    #[error("decontaminate: benchmark `{0}`: `columns.text` lists no column")]
    NoTextColumn(String),
}

impl DecontamConfig {
    /// Checks the numbers and names; the message names the field.
    pub fn check(&self) -> Result<(), DecontamConfigError> {
        if self.ngram == 0 {
            return Err(DecontamConfigError::NoNgram);
        }
        if self.window == 0 {
            return Err(DecontamConfigError::NoWindow);
        }
        if self.benchmarks.is_empty() {
            return Err(DecontamConfigError::NoBenchmark);
        }
        let mut names = BTreeSet::new();
        for b in &self.benchmarks {
            if !names.insert(b.name.as_str()) {
                return Err(DecontamConfigError::Twice(b.name.clone()));
            }
            if b.files.is_empty() == b.hub.is_none() {
                return Err(DecontamConfigError::FilesOrHub(b.name.clone()));
            }
            if b.columns.text.is_empty() {
                return Err(DecontamConfigError::NoTextColumn(b.name.clone()));
            }
        }
        Ok(())
    }
}

/// Why a benchmark's items could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("benchmark `{name}`: {problem}")]
pub struct BenchmarkError {
    pub name: String,
    pub problem: BenchmarkProblem,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchmarkProblem {
    #[error("{0:#}")]
    Read(crate::read::ReadError),
    /// `message`: the reject line of the record.
    #[error("`{path}` record {row}: not valid JSON: {message}")]
    Json {
        path: String,
        row: u64,
        message: String,
    },
    #[error("`{path}` record {row}: {problem}")]
    Item {
        path: String,
        row: u64,
        problem: ItemError,
    },
    #[error("its files hold no item")]
    Empty,
}

/// Why a benchmark record is not an item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ItemError {
    #[error("not a JSON object")]
    NotAnObject,
    #[error("column `{column}` is {kind}, not a string or number")]
    Id { column: String, kind: &'static str },
    #[error("column `{column}` is {kind}, not a string")]
    Text { column: String, kind: &'static str },
    #[error("no column `{0}`")]
    Missing(String),
}

/// The items of one benchmark, as loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchmarkItems {
    pub name: String,
    pub items: Vec<BenchmarkItem>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchmarkItem {
    pub id: String,
    pub text: String,
}

/// Reads benchmark `name`'s items from `paths` (JSON lines, JSON arrays or Parquet). Errors
/// name the file, the record and the column.
pub fn load_items(
    name: &str,
    paths: &[PathBuf],
    columns: &BenchmarkColumns,
) -> Result<BenchmarkItems, BenchmarkError> {
    let mut items = Vec::new();
    let mut failure = None;
    let read = read_files(paths, &mut |raw| {
        let path = paths[raw.file].display().to_string();
        let row = raw.row;
        let record = match raw.record {
            // Only the text of a benchmark is matched: its lines are read as serde_json reads
            // them, an integer outside 64 bits (which a training row may not hold) included.
            Record::Line(line) => serde_json::from_slice(line.trim_ascii_end()).map_err(|e| {
                let reject =
                    Reject::new(RejectReason::InvalidJson, crate::read::one_line_error(&e));
                Skip::from(reject).to_string()
            }),
            other => other.into_value().map_err(|e| e.to_string()),
        };
        let record = match record {
            Ok(v) => v,
            Err(e) => {
                failure = Some(BenchmarkProblem::Json {
                    path,
                    row,
                    message: e,
                });
                return false;
            }
        };
        match item(&record, columns) {
            Ok(item) => {
                items.push(item);
                true
            }
            Err(e) => {
                failure = Some(BenchmarkProblem::Item {
                    path,
                    row,
                    problem: e,
                });
                false
            }
        }
    })
    .map_err(BenchmarkProblem::Read);
    let failed = |problem| BenchmarkError {
        name: name.to_owned(),
        problem,
    };
    read.map_err(failed)?;
    if let Some(problem) = failure {
        return Err(failed(problem));
    }
    if items.is_empty() {
        return Err(failed(BenchmarkProblem::Empty));
    }
    Ok(BenchmarkItems {
        name: name.to_string(),
        items,
    })
}

fn item(record: &Value, columns: &BenchmarkColumns) -> Result<BenchmarkItem, ItemError> {
    let Value::Object(fields) = record else {
        return Err(ItemError::NotAnObject);
    };
    let id = match fields.get(&columns.id) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err(ItemError::Id {
                column: columns.id.clone(),
                kind: kind(other),
            })
        }
        None => return Err(ItemError::Missing(columns.id.clone())),
    };
    let mut text = String::new();
    for column in &columns.text {
        match fields.get(column) {
            Some(Value::String(s)) => {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(s);
            }
            Some(other) => {
                return Err(ItemError::Text {
                    column: column.clone(),
                    kind: kind(other),
                })
            }
            None => return Err(ItemError::Missing(column.clone())),
        }
    }
    Ok(BenchmarkItem { id, text })
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A benchmark item a row overlaps, and where.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hit {
    pub benchmark: String,
    pub item: String,
    /// The row's text as written (its scope's) around the first n-gram it shares with the
    /// item, as the normalization matched it: the n-gram first, then context either side, at
    /// most [`EVIDENCE_CHARS`](super::filters::EVIDENCE_CHARS) characters (`text` in
    /// `filtered.jsonl`).
    pub text: String,
}

/// The n-grams of every benchmark item, each with the first item (benchmarks in the order
/// listed, items in file order) that has it.
#[derive(Debug)]
pub struct DecontamIndex {
    mode: DecontamMode,
    /// Words or characters per n-gram.
    n: usize,
    scope: Scope,
    /// An n-gram's [`Grams`] hash → the first item with an n-gram of that hash. Looked up only
    /// (never iterated), so a fast hasher.
    grams: HashMap<u64, u32, foldhash::fast::RandomState>,
    /// Lengths (in words or characters) of items shorter than `n`, matched whole.
    short: BTreeSet<usize>,
    /// Per item: benchmark index, item id, normalized text (a hash hit is confirmed on it).
    items: Vec<(u32, String, String)>,
    benchmarks: Vec<String>,
}

impl DecontamIndex {
    /// The config must have passed [`DecontamConfig::check`].
    pub fn build(config: &DecontamConfig, benchmarks: &[BenchmarkItems]) -> DecontamIndex {
        let n = match config.mode {
            DecontamMode::Words => config.ngram,
            DecontamMode::Chars => config.window,
        }
        .max(1);
        let mut index = DecontamIndex {
            mode: config.mode,
            n,
            scope: config.scope,
            grams: HashMap::default(),
            short: BTreeSet::new(),
            items: Vec::new(),
            benchmarks: benchmarks.iter().map(|b| b.name.clone()).collect(),
        };
        for (b, bench) in benchmarks.iter().enumerate() {
            for item in &bench.items {
                let id = index.items.len() as u32;
                let normalized = text::normalize(&item.text);
                let units = index.units(&normalized);
                if !units.is_empty() {
                    let len = units.len().min(n);
                    if len < n {
                        index.short.insert(len);
                    }
                    for (h, _) in Grams::new(&normalized, &units, len) {
                        index.grams.entry(h).or_insert(id);
                    }
                }
                index.items.push((b as u32, item.id.clone(), normalized));
            }
        }
        index
    }

    /// Distinct n-gram hashes indexed.
    pub fn len(&self) -> usize {
        self.grams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.grams.is_empty()
    }

    /// The first item (in the row's text order) that `c` shares an n-gram with.
    pub fn check(&self, c: &Conversation) -> Option<Hit> {
        self.check_text(&text::scope_text(c, self.scope))
    }

    /// [`DecontamIndex::check`] on a row whose normalized texts other steps share.
    pub fn check_row(&self, row: &RowText) -> Option<Hit> {
        if self.grams.is_empty() {
            return None;
        }
        let normalized = row.normalized(self.scope);
        let (item, gram) = self.find(normalized)?;
        Some(self.hit(item, row.scope(self.scope), normalized, gram))
    }

    /// The scope whose text [`DecontamIndex::check`] reads.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// [`DecontamIndex::check`] on a raw text.
    pub fn check_text(&self, raw: &str) -> Option<Hit> {
        if self.grams.is_empty() {
            return None;
        }
        let normalized = text::normalize(raw);
        let (item, gram) = self.find(&normalized)?;
        Some(self.hit(item, raw, &normalized, gram))
    }

    /// The first item that [`text::normalize`]d text shares an n-gram with, and the bytes of
    /// that n-gram in it.
    fn find(&self, normalized: &str) -> Option<(u32, (usize, usize))> {
        let units = self.units(normalized);
        std::iter::once(self.n)
            .chain(self.short.iter().copied())
            .find_map(|len| {
                Grams::new(normalized, &units, len).find_map(|(h, at)| {
                    let &first = self.grams.get(&h)?;
                    let span = (units[at].0, units[at + len - 1].1);
                    let item = self.item_with(first, &normalized[span.0..span.1])?;
                    Some((item, span))
                })
            })
    }

    /// The hit of item `item` on `raw`, whose normalization `normalized` holds the n-gram at
    /// bytes `gram`. Only rows that hit (a few) pay for mapping it back to the raw text.
    fn hit(&self, item: u32, raw: &str, normalized: &str, gram: (usize, usize)) -> Hit {
        let (b, id, _) = &self.items[item as usize];
        Hit {
            benchmark: self.benchmarks[*b as usize].clone(),
            item: id.clone(),
            text: evidence(raw, normalized, gram),
        }
    }

    /// The first item from `first` on whose normalized text `gram` is an n-gram: `first`
    /// itself unless two n-grams share a hash (then the items after it are searched, so a
    /// collision neither drops a clean row nor names the wrong item).
    fn item_with(&self, first: u32, gram: &str) -> Option<u32> {
        let has = |text: &str| match self.mode {
            DecontamMode::Chars => text.contains(gram),
            // At word boundaries: normalized text is words joined by single spaces.
            DecontamMode::Words => memchr::memmem::find_iter(text.as_bytes(), gram).any(|i| {
                let end = i + gram.len();
                (i == 0 || text.as_bytes()[i - 1] == b' ')
                    && (end == text.len() || text.as_bytes()[end] == b' ')
            }),
        };
        (first as usize..self.items.len())
            .find(|&i| has(&self.items[i].2))
            .map(|i| i as u32)
    }

    /// Byte ranges of the units (words or characters) of normalized text.
    fn units(&self, normalized: &str) -> Vec<(usize, usize)> {
        match self.mode {
            DecontamMode::Words => super::near_dup::word_spans(normalized),
            DecontamMode::Chars => normalized
                .char_indices()
                .map(|(i, c)| (i, i + c.len_utf8()))
                .collect(),
        }
    }
}

/// `raw` around the characters its normalization `normalized` has at bytes `start..end`,
/// as [`around`] shows a regex's match.
fn evidence(raw: &str, normalized: &str, gram: (usize, usize)) -> String {
    match raw_span(raw, normalized, gram) {
        Some((from, to)) => around(raw, from, to),
        // The two normalizations are one function's; were they ever to differ, the text's
        // head is shown rather than a wrong passage.
        None => head(raw),
    }
}

/// The bytes of `raw` that the bytes `start..end` of its normalization `normalized` came from.
fn raw_span(raw: &str, normalized: &str, (start, end): (usize, usize)) -> Option<(usize, usize)> {
    let (again, origins) = text::normalize_with_origins(raw);
    if again != normalized {
        return None;
    }
    let first = normalized.get(..start)?.chars().count();
    let last = first + normalized.get(start..end)?.chars().count().checked_sub(1)?;
    let (from, to) = (origins.get(first)?.0, origins.get(last)?.1);
    (from <= to && raw.is_char_boundary(from) && raw.is_char_boundary(to)).then_some((from, to))
}

/// The seed of the unit hash (an in-memory index: not persisted).
const SEED: u64 = 0x6465_636f_6e74_616d;
/// The rolling hash's multiplier (odd, so multiplying by it is a bijection mod 2^64).
const BASE: u64 = 0x9E37_79B9_7F4A_7C15;

/// The hash of every run of `len` units with its first unit's index, in text order: a
/// polynomial rolling hash (mod 2^64) of the units' xxh3 hashes, one hash per unit rather than
/// one per n-gram. Hits are confirmed on the text ([`DecontamIndex::item_with`]), so the
/// hash only has to be fast and well spread.
struct Grams {
    units: Vec<u64>,
    len: usize,
    /// `BASE^(len - 1)`: the weight of the unit leaving the window.
    top: u64,
    hash: u64,
    next: usize,
}

impl Grams {
    fn new(normalized: &str, spans: &[(usize, usize)], len: usize) -> Grams {
        let units: Vec<u64> = if len == 0 || spans.len() < len {
            Vec::new()
        } else {
            spans
                .iter()
                .map(|&(s, e)| xxh3_64_with_seed(&normalized.as_bytes()[s..e], SEED))
                .collect()
        };
        let top = (1..len).fold(1u64, |p, _| p.wrapping_mul(BASE));
        Grams {
            units,
            len,
            top,
            hash: 0,
            next: 0,
        }
    }
}

impl Iterator for Grams {
    /// (hash, index of the first unit).
    type Item = (u64, usize);

    fn next(&mut self) -> Option<(u64, usize)> {
        if self.len == 0 || self.next + self.len > self.units.len() {
            return None;
        }
        if self.next == 0 {
            self.hash = self.units[..self.len]
                .iter()
                .fold(0u64, |h, &u| h.wrapping_mul(BASE).wrapping_add(u));
        } else {
            let out = self.units[self.next - 1].wrapping_mul(self.top);
            let into = self.units[self.next + self.len - 1];
            self.hash = self
                .hash
                .wrapping_sub(out)
                .wrapping_mul(BASE)
                .wrapping_add(into);
        }
        self.next += 1;
        Some((self.hash, self.next - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(mode: DecontamMode, items: &[&str]) -> DecontamIndex {
        let config = DecontamConfig {
            ngram: 3,
            mode,
            window: 4,
            scope: Scope::All,
            benchmarks: Vec::new(),
        };
        let items = items
            .iter()
            .enumerate()
            .map(|(i, t)| BenchmarkItem {
                id: format!("item/{i}"),
                text: (*t).to_owned(),
            })
            .collect();
        DecontamIndex::build(
            &config,
            &[BenchmarkItems {
                name: "b".into(),
                items,
            }],
        )
    }

    #[test]
    fn benchmark_lines_with_numbers_a_training_row_may_not_hold_are_read() {
        // Only their text is matched: an integer outside 64 bits does not refuse a benchmark.
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("bench.jsonl");
        let lines = [
            r#"{"task_id": "a", "prompt": "def f(): pass", "n": 18446744073709551616}"#,
            r#"{"task_id": "b", "prompt": "def g(): pass", "n": -0}"#,
        ];
        std::fs::write(&path, lines.join("\n")).expect("write");
        let columns = BenchmarkColumns {
            id: "task_id".into(),
            text: vec!["prompt".into()],
        };
        let items = load_items("bench", &[path], &columns).expect("loads");
        let ids: Vec<&str> = items.items.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
    }

    #[test]
    fn the_rolling_hash_is_the_hash_of_each_window() {
        let text = "one two three two three four one two three";
        let spans = super::super::near_dup::word_spans(text);
        for len in 1..=spans.len() {
            let rolled: Vec<(u64, usize)> = Grams::new(text, &spans, len).collect();
            assert_eq!(rolled.len(), spans.len() - len + 1);
            for &(h, at) in &rolled {
                // The window's hash computed from scratch.
                let direct = Grams::new(text, &spans[at..at + len], len)
                    .next()
                    .map(|(h, _)| h);
                assert_eq!(Some(h), direct, "len {len} at {at}");
            }
            // Equal windows, equal hashes: "one two three" at 0 and 6 (len 3).
            if len == 3 {
                assert_eq!(rolled[0].0, rolled[6].0);
                assert_ne!(rolled[0].0, rolled[1].0);
            }
        }
        assert_eq!(Grams::new(text, &spans, spans.len() + 1).count(), 0);
        assert_eq!(Grams::new(text, &spans, 0).count(), 0);
    }

    #[test]
    fn a_hit_shows_the_first_shared_ngram_as_the_row_wrote_it() {
        let words = index(
            DecontamMode::Words,
            &[
                "def has_close_elements(numbers, threshold):",
                "école de paris",
            ],
        );
        // The passage the first shared n-gram came from, in the row's own spelling.
        let passage = |index: &DecontamIndex, raw: &str| {
            let normalized = text::normalize(raw);
            let (_, gram) = index.find(&normalized).expect("a hit");
            let (from, to) = raw_span(raw, &normalized, gram).expect("a span");
            raw[from..to].to_owned()
        };
        assert_eq!(
            passage(&words, "Write `DEF Has_Close_Elements(numbers, t)` now."),
            "DEF Has_Close"
        );
        // Full-width letters and an ideographic space (NFKC), a composed accent.
        assert_eq!(
            passage(&words, "x ｄｅｆ　ＨＡＳ ｃｌｏｓｅ ﬁne"),
            "ｄｅｆ　ＨＡＳ ｃｌｏｓｅ"
        );
        assert_eq!(
            passage(&words, "À l'E\u{301}cole -- de  Paris!"),
            "E\u{301}cole -- de  Paris"
        );
        let chars = index(DecontamMode::Chars, &["abcdef"]);
        assert_eq!(passage(&chars, "zz xBCDe zz"), "BCDe");
        // In `filtered.jsonl`: the passage first, then context either side, cut with `…`.
        let before = "word ".repeat(60);
        let after = " more".repeat(60);
        let row = format!("{before}DEF Has_Close_Elements(numbers, 0.5){after}");
        let hit = words.check_text(&row).expect("a hit");
        assert_eq!((hit.benchmark.as_str(), hit.item.as_str()), ("b", "item/0"));
        // 13 characters matched, 187 of context: 93 before, 94 after.
        let expected = format!(
            "…{}DEF Has_Close{}…",
            &before[before.len() - 93..],
            &format!("_Elements(numbers, 0.5){after}")[..94]
        );
        assert_eq!(hit.text, expected);
        assert_eq!(hit.text.chars().count(), 202);
        // A row shorter than that is shown whole.
        let short = words.check_text("Is école de Paris far?").expect("a hit");
        assert_eq!(
            (short.item.as_str(), short.text.as_str()),
            ("item/1", "Is école de Paris far?")
        );
    }

    #[test]
    fn a_hash_hit_is_confirmed_on_the_items_text() {
        let words = index(
            DecontamMode::Words,
            &[
                "alpha beta gamma delta",
                "beta gamma deltas",
                "x beta gamma delta",
            ],
        );
        // `first` is where the hash pointed; the gram is searched from there, whole words only.
        assert_eq!(words.item_with(0, "beta gamma delta"), Some(0));
        assert_eq!(words.item_with(1, "beta gamma delta"), Some(2));
        assert_eq!(words.item_with(0, "eta gamma delta"), None);
        assert_eq!(words.item_with(0, "beta gamma delt"), None);
        let item = |index: &DecontamIndex, text: &str| index.check_text(text).map(|h| h.item);
        assert_eq!(
            item(&words, "Say: BETA, gamma; delta!"),
            Some("item/0".into())
        );
        assert_eq!(item(&words, "beta gamma deltas"), Some("item/1".into()));
        assert_eq!(item(&words, "gamma delta beta"), None);
        let chars = index(DecontamMode::Chars, &["abcdef", "xyz"]);
        assert_eq!(chars.item_with(0, "cdef"), Some(0));
        assert_eq!(item(&chars, "zzbcdezz"), Some("item/0".into()));
        // An item shorter than the window matches whole.
        assert_eq!(item(&chars, "..xyz.."), Some("item/1".into()));
        assert_eq!(chars.check_text("xy"), None);
    }
}
