//! Benchmark decontamination: a row that shares an n-gram of its (normalized) scope text with a
//! benchmark item is dropped as `contaminated`, naming the benchmark and the item.
//!
//! Text on both sides is [`text::normalize`]d (NFKC, lowercase, punctuation to spaces, whitespace
//! collapsed). `mode: words` (default) compares runs of `ngram` words (default 13); `mode:
//! chars` compares runs of `window` characters of the normalized text (default 50, as bigcode's
//! decontamination of code), which also catches code whose identifiers were kept but whose
//! prose was not. An item shorter than one n-gram (window) matches when the row contains all of
//! it.

use super::text::{self, RowText, Scope};
use crate::conversation::Conversation;
use crate::hub::HubEntry;
use crate::read::read_files;
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

impl DecontamConfig {
    /// Checks the numbers and names; the message names the field.
    pub fn check(&self) -> Result<(), String> {
        if self.ngram == 0 {
            return Err("decontaminate: `ngram` must be at least 1".into());
        }
        if self.window == 0 {
            return Err("decontaminate: `window` must be at least 1".into());
        }
        if self.benchmarks.is_empty() {
            return Err("decontaminate: `benchmarks` lists none".into());
        }
        let mut names = BTreeSet::new();
        for b in &self.benchmarks {
            if !names.insert(b.name.as_str()) {
                return Err(format!(
                    "decontaminate: two benchmarks are named `{}`",
                    b.name
                ));
            }
            if b.files.is_empty() == b.hub.is_none() {
                return Err(format!(
                    "decontaminate: benchmark `{}`: give either `files` or `hub`",
                    b.name
                ));
            }
            if b.columns.text.is_empty() {
                return Err(format!(
                    "decontaminate: benchmark `{}`: `columns.text` lists no column",
                    b.name
                ));
            }
        }
        Ok(())
    }
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
) -> Result<BenchmarkItems, String> {
    let mut items = Vec::new();
    let mut failure = None;
    read_files(paths, &mut |raw| {
        let path = paths[raw.file].display();
        let row = raw.row;
        let record = match raw.into_value() {
            Ok(v) => v,
            Err(e) => {
                failure = Some(format!("`{path}` record {row}: not valid JSON: {e}"));
                return false;
            }
        };
        match item(&record, columns) {
            Ok(item) => {
                items.push(item);
                true
            }
            Err(e) => {
                failure = Some(format!("`{path}` record {row}: {e}"));
                false
            }
        }
    })
    .map_err(|e| format!("benchmark `{name}`: {e:#}"))?;
    if let Some(e) = failure {
        return Err(format!("benchmark `{name}`: {e}"));
    }
    if items.is_empty() {
        return Err(format!("benchmark `{name}`: its files hold no item"));
    }
    Ok(BenchmarkItems {
        name: name.to_string(),
        items,
    })
}

fn item(record: &Value, columns: &BenchmarkColumns) -> Result<BenchmarkItem, String> {
    let Value::Object(fields) = record else {
        return Err("not a JSON object".into());
    };
    let id = match fields.get(&columns.id) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err(format!(
                "column `{}` is {}, not a string or number",
                columns.id,
                kind(other)
            ))
        }
        None => return Err(format!("no column `{}`", columns.id)),
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
                return Err(format!(
                    "column `{column}` is {}, not a string",
                    kind(other)
                ))
            }
            None => return Err(format!("no column `{column}`")),
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

/// A benchmark item a row overlaps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub benchmark: String,
    pub item: String,
}

/// The n-grams of every benchmark item, each with the first item (benchmarks in the order
/// listed, items in file order) that has it.
#[derive(Debug)]
pub struct DecontamIndex {
    mode: DecontamMode,
    /// Words or characters per n-gram.
    n: usize,
    scope: Scope,
    /// Keyed by an xxh3 hash already; looked up only (never iterated), so a fast hasher.
    grams: HashMap<u64, u32, foldhash::fast::RandomState>,
    /// Lengths (in words or characters) of items shorter than `n`, matched whole.
    short: BTreeSet<usize>,
    /// (benchmark index, item id) per item.
    items: Vec<(u32, String)>,
    benchmarks: Vec<String>,
}

/// The seed of the n-gram hash (an in-memory index: not persisted).
const SEED: u64 = 0x6465_636f_6e74_616d;

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
                index.items.push((b as u32, item.id.clone()));
                let normalized = text::normalize(&item.text);
                let units = index.units(&normalized);
                if units.is_empty() {
                    continue;
                }
                let len = units.len().min(n);
                if len < n {
                    index.short.insert(len);
                }
                for_each_gram(&normalized, &units, len, &mut |h| {
                    index.grams.entry(h).or_insert(id);
                    true
                });
            }
        }
        index
    }

    /// Distinct n-grams indexed.
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
        self.check_normalized(row.normalized(self.scope))
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
        self.check_normalized(&text::normalize(raw))
    }

    /// [`DecontamIndex::check`] on [`text::normalize`]d text (to normalize a scope's text once
    /// for several steps).
    pub fn check_normalized(&self, normalized: &str) -> Option<Hit> {
        let units = self.units(normalized);
        let mut found = None;
        for len in std::iter::once(self.n).chain(self.short.iter().copied()) {
            if units.len() < len {
                continue;
            }
            for_each_gram(normalized, &units, len, &mut |h| match self.grams.get(&h) {
                Some(&item) => {
                    found = Some(item);
                    false
                }
                None => true,
            });
            if found.is_some() {
                break;
            }
        }
        let (b, id) = &self.items[found? as usize];
        Some(Hit {
            benchmark: self.benchmarks[*b as usize].clone(),
            item: id.clone(),
        })
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

/// Calls `f` with the hash of every run of `len` units (contiguous slices of the normalized
/// text) until it returns false.
fn for_each_gram(
    normalized: &str,
    units: &[(usize, usize)],
    len: usize,
    f: &mut dyn FnMut(u64) -> bool,
) {
    if len == 0 || units.len() < len {
        return;
    }
    for i in 0..=units.len() - len {
        let slice = &normalized[units[i].0..units[i + len - 1].1];
        if !f(xxh3_64_with_seed(slice.as_bytes(), SEED)) {
            return;
        }
    }
}
