//! Row filters declared in YAML, globally and per source. Each filter is counted under
//! `filtered.<name>` (its `name:`, by default its kind) with a reason naming the value that failed.
//!
//! Content filters (`turns`, `assistant_chars`, `language`, `regex`, `repetition`) look only at
//! the conversation and run before rendering; token filters (`tokens`, `supervised_tokens`) run
//! after tokenizing. Global filters run before a source's own, each in the order written, and a
//! row is counted under the first one that drops it.

use super::text::{self, RowText, Scope};
use crate::conversation::{Conversation, Role};
use regex::RegexSet;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

/// One item of a `filters:` list: a map with one key, the filter's kind.
#[derive(Debug, Clone, PartialEq)]
pub enum FilterConfig {
    /// Number of user and assistant messages (system and tool messages are not turns).
    Turns(RangeFilter),
    /// Characters (Unicode scalar values) of every assistant turn: content, reasoning and
    /// tool-call arguments, as in [`text::scope_text`].
    AssistantChars(RangeFilter),
    Language(LanguageFilter),
    Regex(RegexFilter),
    Repetition(RepetitionFilter),
    /// Tokens of the rendered row.
    Tokens(RangeFilter),
    /// Supervised (loss-masked) tokens of the rendered row.
    SupervisedTokens(RangeFilter),
}

const KINDS: &[&str] = &[
    "turns",
    "assistant_chars",
    "language",
    "regex",
    "repetition",
    "tokens",
    "supervised_tokens",
];

// By hand: serde_yaml_ng reads derived enums only from `!tag` syntax, and a list item reads
// best as a one-key map (`- turns: {min: 2}`).
impl<'de> Deserialize<'de> for FilterConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OneKey;
        impl<'de> Visitor<'de> for OneKey {
            type Value = FilterConfig;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(
                    f,
                    "a map with one key, the filter kind ({})",
                    KINDS.join(", ")
                )
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FilterConfig, A::Error> {
                let Some(kind) = map.next_key::<String>()? else {
                    return Err(de::Error::invalid_length(0, &self));
                };
                let filter = match kind.as_str() {
                    "turns" => FilterConfig::Turns(map.next_value()?),
                    "assistant_chars" => FilterConfig::AssistantChars(map.next_value()?),
                    "language" => FilterConfig::Language(map.next_value()?),
                    "regex" => FilterConfig::Regex(map.next_value()?),
                    "repetition" => FilterConfig::Repetition(map.next_value()?),
                    "tokens" => FilterConfig::Tokens(map.next_value()?),
                    "supervised_tokens" => FilterConfig::SupervisedTokens(map.next_value()?),
                    other => return Err(de::Error::unknown_variant(other, KINDS)),
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "a filter item has one key, the kind; `{extra}` follows `{kind}` \
                         (start a new `- ` item for another filter)"
                    )));
                }
                Ok(filter)
            }
        }
        deserializer.deserialize_map(OneKey)
    }
}

/// `{min, max}`, both inclusive, either optional.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct RangeFilter {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub min: Option<u64>,
    #[serde(default)]
    pub max: Option<u64>,
}

/// Keeps rows whose text is in one of `keep` (ISO 639-1 codes such as `en`, `zh`, or whatlang's
/// ISO 639-3 codes such as `eng`, `cmn`), on the first 2,000 characters of the scope text.
///
/// A row detected as a kept language is kept at any confidence: whatlang's confidence is low on
/// short and code-heavy text that is plainly in the language it names. `min_confidence` (0 to 1)
/// is how sure the detector must be to drop a row for another language: below it the detection
/// is not trusted and the row is kept. `drop_low_confidence: true` instead drops every row
/// detected below `min_confidence`, whatever the language (the strict rule).
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LanguageFilter {
    #[serde(default)]
    pub name: Option<String>,
    pub keep: Vec<String>,
    #[serde(default)]
    pub min_confidence: f64,
    #[serde(default)]
    pub drop_low_confidence: bool,
    /// Default `user`: the prompt's language is the conversation's, and code in answers
    /// confuses language detection.
    #[serde(default = "user_scope")]
    pub scope: Scope,
}

/// Drops rows whose text matches any `exclude` pattern, or (when `include` is given) matches
/// none of the `include` patterns. Patterns are Rust `regex` syntax; `(?i)` for case-insensitive.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RegexFilter {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Default `all`.
    #[serde(default)]
    pub scope: Scope,
}

/// Gopher-style repetition rules (Rae et al. 2021, table A1; thresholds as in datatrove's
/// `GopherRepetitionFilter`). A row is dropped when any fraction exceeds its maximum; `null`
/// turns a rule off. Lines are compared trimmed, and lines without a letter or digit (blank
/// lines, lone braces) are not counted; paragraphs are separated by blank lines; n-grams are of
/// normalized words ([`text::normalize`]) and character fractions count word characters.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RepetitionFilter {
    #[serde(default)]
    pub name: Option<String>,
    /// Default `assistant`: the model learns to produce what the answers contain.
    #[serde(default = "assistant_scope")]
    pub scope: Scope,
    /// Lines that repeat an earlier line, over all lines.
    #[serde(default = "some_0_3")]
    pub max_duplicate_line_fraction: Option<f64>,
    /// Characters in repeated lines, over all line characters.
    #[serde(default = "some_0_2")]
    pub max_duplicate_line_char_fraction: Option<f64>,
    #[serde(default = "some_0_3")]
    pub max_duplicate_paragraph_fraction: Option<f64>,
    #[serde(default = "some_0_2")]
    pub max_duplicate_paragraph_char_fraction: Option<f64>,
    /// n → maximum share of characters in the most frequent n-gram (counted when it occurs
    /// more than once; ties: the longest). Giving the map replaces all of it.
    #[serde(default = "default_top_ngrams")]
    pub max_top_ngram_char_fraction: BTreeMap<usize, f64>,
    /// n → maximum share of characters in n-grams that repeat an earlier n-gram (scanned left
    /// to right, a repeat skipping its n words, as datatrove does).
    #[serde(default = "default_duplicate_ngrams")]
    pub max_duplicate_ngram_char_fraction: BTreeMap<usize, f64>,
}

impl Default for RepetitionFilter {
    fn default() -> Self {
        RepetitionFilter {
            name: None,
            scope: Scope::Assistant,
            max_duplicate_line_fraction: Some(0.3),
            max_duplicate_line_char_fraction: Some(0.2),
            max_duplicate_paragraph_fraction: Some(0.3),
            max_duplicate_paragraph_char_fraction: Some(0.2),
            max_top_ngram_char_fraction: default_top_ngrams(),
            max_duplicate_ngram_char_fraction: default_duplicate_ngrams(),
        }
    }
}

fn user_scope() -> Scope {
    Scope::User
}
fn assistant_scope() -> Scope {
    Scope::Assistant
}
fn some_0_3() -> Option<f64> {
    Some(0.3)
}
fn some_0_2() -> Option<f64> {
    Some(0.2)
}
fn default_top_ngrams() -> BTreeMap<usize, f64> {
    [(2, 0.2), (3, 0.18), (4, 0.16)].into_iter().collect()
}
fn default_duplicate_ngrams() -> BTreeMap<usize, f64> {
    [
        (5, 0.15),
        (6, 0.14),
        (7, 0.13),
        (8, 0.12),
        (9, 0.11),
        (10, 0.10),
    ]
    .into_iter()
    .collect()
}

/// Why a filter dropped a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// The filter's name: the row is counted as `filtered.<name>`.
    pub filter: String,
    /// What failed, e.g. `language zh (0.93) not in [en]`.
    pub detail: String,
    /// The text the filter judged, at most [`EVIDENCE_CHARS`] characters of it (a regex's
    /// match in context, what language detection read, the repeated passage); `None` for a
    /// count (turns, tokens).
    pub text: Option<String>,
}

/// Characters of the judged text a dropped row records (`text` in `filtered.jsonl`).
pub const EVIDENCE_CHARS: usize = 200;

/// The filters of one source (global ones first), checked and ready to run.
#[derive(Debug, Default)]
pub struct Filters {
    content: Vec<Named<ContentCheck>>,
    tokens: Vec<Named<TokenCheck>>,
    /// Every name, in the order written (global first), without repeats.
    names: Vec<String>,
}

#[derive(Debug)]
struct Named<T> {
    name: String,
    check: T,
}

#[derive(Debug)]
enum ContentCheck {
    Turns(Bounds),
    AssistantChars(Bounds),
    Language {
        keep: Vec<whatlang::Lang>,
        min_confidence: f64,
        drop_low_confidence: bool,
        scope: Scope,
    },
    Regex {
        include: Option<(RegexSet, Vec<String>)>,
        /// Each pattern compiled on its own too, to find a dropped row's match.
        exclude: Option<(RegexSet, Vec<String>, Vec<regex::Regex>)>,
        scope: Scope,
    },
    Repetition(Box<RepetitionFilter>),
}

#[derive(Debug)]
enum TokenCheck {
    Tokens(Bounds),
    Supervised(Bounds),
}

/// Why a `filters:` list does not compile (a plan error).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FilterError {
    #[error("filter name `{0}`: use letters, digits, `_` and `-`")]
    Name(String),
    #[error("two {list} filters are named `{name}`: give each a distinct `name:`")]
    Twice { list: &'static str, name: String },
    #[error("filter `{name}` ({kind}): {problem}")]
    Invalid {
        name: String,
        kind: &'static str,
        problem: FilterProblem,
    },
}

/// What is wrong with one filter's settings.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FilterProblem {
    #[error("give `min`, `max` or both")]
    NoBound,
    #[error("min {min} > max {max}")]
    MinAboveMax { min: u64, max: u64 },
    #[error("`keep` lists no language")]
    NoLanguage,
    #[error("min_confidence {0} is not between 0 and 1")]
    Confidence(f64),
    #[error(
        "unknown language code `{code}` (ISO 639-1 such as `en`, or 639-3 such as `eng`; \
         supported: {})",
        LANGS.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", ")
    )]
    UnknownLanguage { code: String },
    #[error("give `include`, `exclude` or both")]
    NoPattern,
    #[error("pattern `{pattern}`: {error}")]
    Pattern {
        pattern: String,
        error: regex::Error,
    },
    #[error("{0}")]
    PatternSet(regex::Error),
    #[error("{field} {value} is not between 0 and 1")]
    Fraction { field: &'static str, value: f64 },
    #[error("{field}: n = {n} is not between 1 and 64")]
    NgramSize { field: &'static str, n: usize },
    #[error("{field}: {n}: {value} is not between 0 and 1")]
    NgramFraction {
        field: &'static str,
        n: usize,
        value: f64,
    },
}

#[derive(Debug, Clone, Copy)]
struct Bounds {
    min: Option<u64>,
    max: Option<u64>,
}

impl Bounds {
    fn new(r: &RangeFilter) -> Result<Self, FilterProblem> {
        match (r.min, r.max) {
            (None, None) => Err(FilterProblem::NoBound),
            (Some(min), Some(max)) if min > max => Err(FilterProblem::MinAboveMax { min, max }),
            (min, max) => Ok(Bounds { min, max }),
        }
    }

    /// `None` when `value` is in range, else the reason.
    fn check(self, value: u64, what: &str) -> Option<String> {
        if let Some(min) = self.min.filter(|&min| value < min) {
            return Some(format!("{what} {value} < min {min}"));
        }
        if let Some(max) = self.max.filter(|&max| value > max) {
            return Some(format!("{what} {value} > max {max}"));
        }
        None
    }
}

impl FilterConfig {
    /// The kind, as written in the YAML: the default name.
    pub fn kind(&self) -> &'static str {
        match self {
            FilterConfig::Turns(_) => "turns",
            FilterConfig::AssistantChars(_) => "assistant_chars",
            FilterConfig::Language(_) => "language",
            FilterConfig::Regex(_) => "regex",
            FilterConfig::Repetition(_) => "repetition",
            FilterConfig::Tokens(_) => "tokens",
            FilterConfig::SupervisedTokens(_) => "supervised_tokens",
        }
    }

    /// The count key: `name:` or the kind.
    pub fn name(&self) -> &str {
        let name = match self {
            FilterConfig::Turns(r)
            | FilterConfig::AssistantChars(r)
            | FilterConfig::Tokens(r)
            | FilterConfig::SupervisedTokens(r) => &r.name,
            FilterConfig::Language(l) => &l.name,
            FilterConfig::Regex(r) => &r.name,
            FilterConfig::Repetition(r) => &r.name,
        };
        name.as_deref().unwrap_or(self.kind())
    }
}

impl Filters {
    /// Checks and compiles `global` then `source`. Errors name the filter: a bad pattern, an
    /// unknown language code, min > max, a threshold out of range, or two filters of one list
    /// with the same name.
    pub fn compile(
        global: &[FilterConfig],
        source: &[FilterConfig],
    ) -> Result<Filters, FilterError> {
        let mut filters = Filters::default();
        for (list, configs) in [("global", global), ("source", source)] {
            let mut seen = HashSet::new();
            for config in configs {
                let name = config.name();
                if !valid_name(name) {
                    return Err(FilterError::Name(name.to_owned()));
                }
                if !seen.insert(name) {
                    return Err(FilterError::Twice {
                        list,
                        name: name.to_owned(),
                    });
                }
                filters
                    .add(config)
                    .map_err(|problem| FilterError::Invalid {
                        name: name.to_owned(),
                        kind: config.kind(),
                        problem,
                    })?;
                if !filters.names.iter().any(|n| n == name) {
                    filters.names.push(name.to_string());
                }
            }
        }
        Ok(filters)
    }

    fn add(&mut self, config: &FilterConfig) -> Result<(), FilterProblem> {
        let name = config.name().to_string();
        let content = match config {
            FilterConfig::Tokens(r) => {
                let check = TokenCheck::Tokens(Bounds::new(r)?);
                self.tokens.push(Named { name, check });
                return Ok(());
            }
            FilterConfig::SupervisedTokens(r) => {
                let check = TokenCheck::Supervised(Bounds::new(r)?);
                self.tokens.push(Named { name, check });
                return Ok(());
            }
            FilterConfig::Turns(r) => ContentCheck::Turns(Bounds::new(r)?),
            FilterConfig::AssistantChars(r) => ContentCheck::AssistantChars(Bounds::new(r)?),
            FilterConfig::Language(l) => {
                if l.keep.is_empty() {
                    return Err(FilterProblem::NoLanguage);
                }
                if !(0.0..=1.0).contains(&l.min_confidence) {
                    return Err(FilterProblem::Confidence(l.min_confidence));
                }
                let keep = l
                    .keep
                    .iter()
                    .map(|code| {
                        lang_from_code(code)
                            .ok_or_else(|| FilterProblem::UnknownLanguage { code: code.clone() })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                ContentCheck::Language {
                    keep,
                    min_confidence: l.min_confidence,
                    drop_low_confidence: l.drop_low_confidence,
                    scope: l.scope,
                }
            }
            FilterConfig::Regex(r) => {
                if r.include.is_empty() && r.exclude.is_empty() {
                    return Err(FilterProblem::NoPattern);
                }
                let set = |patterns: &[String]| -> Result<_, FilterProblem> {
                    if patterns.is_empty() {
                        return Ok(None);
                    }
                    let each = patterns
                        .iter()
                        .map(|p| {
                            regex::Regex::new(p).map_err(|error| FilterProblem::Pattern {
                                pattern: p.clone(),
                                error,
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    let set = RegexSet::new(patterns).map_err(FilterProblem::PatternSet)?;
                    Ok(Some((set, patterns.to_vec(), each)))
                };
                ContentCheck::Regex {
                    include: set(&r.include)?.map(|(set, patterns, _)| (set, patterns)),
                    exclude: set(&r.exclude)?,
                    scope: r.scope,
                }
            }
            FilterConfig::Repetition(r) => {
                let all = [
                    ("max_duplicate_line_fraction", r.max_duplicate_line_fraction),
                    (
                        "max_duplicate_line_char_fraction",
                        r.max_duplicate_line_char_fraction,
                    ),
                    (
                        "max_duplicate_paragraph_fraction",
                        r.max_duplicate_paragraph_fraction,
                    ),
                    (
                        "max_duplicate_paragraph_char_fraction",
                        r.max_duplicate_paragraph_char_fraction,
                    ),
                ];
                for (field, value) in all {
                    if let Some(v) = value.filter(|v| !(0.0..=1.0).contains(v)) {
                        return Err(FilterProblem::Fraction { field, value: v });
                    }
                }
                for (field, map) in [
                    (
                        "max_top_ngram_char_fraction",
                        &r.max_top_ngram_char_fraction,
                    ),
                    (
                        "max_duplicate_ngram_char_fraction",
                        &r.max_duplicate_ngram_char_fraction,
                    ),
                ] {
                    for (&n, &v) in map {
                        if !(1..=64).contains(&n) {
                            return Err(FilterProblem::NgramSize { field, n });
                        }
                        if !(0.0..=1.0).contains(&v) {
                            return Err(FilterProblem::NgramFraction { field, n, value: v });
                        }
                    }
                }
                ContentCheck::Repetition(Box::new(r.clone()))
            }
        };
        self.content.push(Named {
            name,
            check: content,
        });
        Ok(())
    }

    /// The first content filter that drops `c`, if any.
    pub fn check_content(&self, c: &Conversation) -> Result<(), Dropped> {
        self.check_row(&RowText::new(c))
    }

    /// [`Filters::check_content`] on a row whose texts the later steps share.
    pub fn check_row(&self, row: &RowText) -> Result<(), Dropped> {
        for f in &self.content {
            if let Some(detail) = f.check.check(row) {
                return Err(Dropped {
                    filter: f.name.clone(),
                    detail,
                    text: f.check.evidence(row),
                });
            }
        }
        Ok(())
    }

    /// The first token filter that drops a row of `seq_len` tokens, `supervised` of them
    /// supervised.
    pub fn check_tokens(&self, seq_len: usize, supervised: usize) -> Result<(), Dropped> {
        for f in &self.tokens {
            let detail = match f.check {
                TokenCheck::Tokens(b) => b.check(seq_len as u64, "tokens"),
                TokenCheck::Supervised(b) => b.check(supervised as u64, "supervised tokens"),
            };
            if let Some(detail) = detail {
                return Err(Dropped {
                    filter: f.name.clone(),
                    detail,
                    text: None,
                });
            }
        }
        Ok(())
    }

    pub fn has_content_filters(&self) -> bool {
        !self.content.is_empty()
    }

    pub fn has_token_filters(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Every filter's count key (global first, in the order written), so a manifest can list
    /// the filters that dropped nothing.
    pub fn names(&self) -> Vec<String> {
        self.names.clone()
    }
}

/// Characters of a text that language detection reads: enough to tell the language, and
/// bounded, so a long row costs no more than a short one.
const LANGUAGE_CHARS: usize = 2000;

/// The first `chars` characters of `text`.
fn prefix(text: &str, chars: usize) -> &str {
    text.char_indices()
        .nth(chars)
        .map_or(text, |(end, _)| &text[..end])
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

impl ContentCheck {
    fn check(&self, row: &RowText) -> Option<String> {
        let c = row.conversation();
        match self {
            ContentCheck::Turns(b) => {
                let turns = c
                    .messages
                    .iter()
                    .filter(|m| matches!(m.role, Role::User | Role::Assistant))
                    .count();
                b.check(turns as u64, "turns")
            }
            ContentCheck::AssistantChars(b) => c
                .messages
                .iter()
                .filter(|m| m.role == Role::Assistant)
                .enumerate()
                .find_map(|(i, m)| {
                    let chars = text::message_text(m).chars().count() as u64;
                    b.check(chars, &format!("assistant turn {} characters", i + 1))
                }),
            ContentCheck::Language {
                keep,
                min_confidence,
                drop_low_confidence,
                scope,
            } => {
                let Some((lang, confidence)) =
                    super::language::detect(prefix(row.scope(*scope), LANGUAGE_CHARS))
                else {
                    return Some(format!("no language detected in {} text", scope.as_str()));
                };
                let sure = confidence >= *min_confidence;
                if *drop_low_confidence && !sure {
                    return Some(format!(
                        "language {} confidence {confidence:.2} < {min_confidence}",
                        lang_code(lang)
                    ));
                }
                // Another language drops the row only when the detector is sure of it.
                if !keep.contains(&lang) && sure {
                    let keep: Vec<&str> = keep.iter().map(|&l| lang_code(l)).collect();
                    return Some(format!(
                        "language {} ({confidence:.2}) not in [{}]",
                        lang_code(lang),
                        keep.join(", ")
                    ));
                }
                None
            }
            ContentCheck::Regex {
                include,
                exclude,
                scope,
            } => {
                let text = row.scope(*scope);
                if let Some((set, patterns, _)) = exclude {
                    if let Some(i) = set.matches(text).iter().next() {
                        return Some(format!("matches exclude pattern `{}`", patterns[i]));
                    }
                }
                if let Some((set, _)) = include {
                    if !set.is_match(text) {
                        return Some(format!(
                            "{} text matches no include pattern",
                            scope.as_str()
                        ));
                    }
                }
                None
            }
            ContentCheck::Repetition(r) => {
                repetition(r, row.scope(r.scope), || row.normalized(r.scope))
            }
        }
    }
}

/// At most [`EVIDENCE_CHARS`] characters of `text` around its bytes `start..end` (a match:
/// itself first, then context evenly either side, what one side lacks going to the other),
/// with `…` where it is cut.
fn around(text: &str, start: usize, end: usize) -> String {
    let matched = &text[start..end];
    let inside = matched.chars().count();
    if inside >= EVIDENCE_CHARS {
        let cut = prefix(matched, EVIDENCE_CHARS);
        let before = if start > 0 { "…" } else { "" };
        return format!("{before}{cut}…");
    }
    let budget = EVIDENCE_CHARS - inside;
    let (before, after) = (&text[..start], &text[end..]);
    let after_chars = after.chars().take(budget).count();
    let before_chars = before.chars().rev().take(budget).count();
    let take_before = before_chars.min((budget / 2).max(budget - after_chars));
    let take_after = budget - take_before;
    let from = before
        .char_indices()
        .rev()
        .nth(take_before.wrapping_sub(1))
        .map_or(start, |(i, _)| i);
    let from = if take_before == 0 { start } else { from };
    let after = prefix(after, take_after);
    format!(
        "{}{}{matched}{after}{}",
        if from > 0 { "…" } else { "" },
        &text[from..start],
        if end + after.len() < text.len() {
            "…"
        } else {
            ""
        },
    )
}

/// The first [`EVIDENCE_CHARS`] characters of `text`, with `…` if it goes on.
fn head(text: &str) -> String {
    let cut = prefix(text, EVIDENCE_CHARS);
    let more = if cut.len() < text.len() { "…" } else { "" };
    format!("{cut}{more}")
}

impl ContentCheck {
    /// The text a check that dropped `row` judged (see [`Dropped::text`]): run only on rows
    /// dropped, so it may search again what the check found.
    fn evidence(&self, row: &RowText) -> Option<String> {
        match self {
            ContentCheck::Turns(_) => None,
            ContentCheck::AssistantChars(_) => {
                let c = row.conversation();
                let texts: Vec<String> = c
                    .messages
                    .iter()
                    .filter(|m| m.role == Role::Assistant)
                    .map(text::message_text)
                    .collect();
                // The turn the bound failed on: the shortest or the longest.
                let pick = texts.iter().min_by_key(|t| t.chars().count());
                let longest = texts.iter().max_by_key(|t| t.chars().count());
                let chosen = match self.check(row) {
                    Some(detail) if detail.contains("> max") => longest,
                    _ => pick,
                };
                chosen.map(|t| head(t))
            }
            ContentCheck::Language { scope, .. } => Some(head(row.scope(*scope))),
            ContentCheck::Regex { exclude, scope, .. } => {
                let text = row.scope(*scope);
                let found = exclude.as_ref().and_then(|(set, _, each)| {
                    let i = set.matches(text).iter().next()?;
                    each.get(i)?.find(text)
                });
                Some(match found {
                    Some(m) => around(text, m.start(), m.end()),
                    None => head(text),
                })
            }
            ContentCheck::Repetition(r) => {
                let text = row.scope(r.scope);
                // The first line, else paragraph, seen twice: what repeats.
                let mut seen = HashSet::new();
                let line = lines(text)
                    .map(str::trim)
                    .filter(|l| has_alphanumeric(l))
                    .find(|l| !seen.insert(*l));
                let repeated = line.map(str::to_owned).or_else(|| {
                    let mut seen = HashSet::new();
                    paragraphs(text)
                        .into_iter()
                        .find(|p| !seen.insert(p.clone()))
                        .map(|p| p.into_owned())
                });
                Some(head(repeated.as_deref().unwrap_or(text)))
            }
        }
    }
}

/// The first repetition rule `text` breaks; `normalized` gives its [`text::normalize`]d form
/// (computed only if the n-gram rules are reached, and shared with other steps of the scope).
fn repetition<'t>(
    r: &RepetitionFilter,
    text: &str,
    normalized: impl FnOnce() -> &'t str,
) -> Option<String> {
    let lines: Vec<&str> = lines(text).filter(|l| has_alphanumeric(l)).collect();
    repetition_rules(r, text, &lines, normalized)
}

fn repetition_rules<'t>(
    r: &RepetitionFilter,
    text: &str,
    lines: &[&str],
    normalized: impl FnOnce() -> &'t str,
) -> Option<String> {
    let over = |what: &str, value: f64, max: Option<f64>| -> Option<String> {
        max.filter(|&max| value > max)
            .map(|max| format!("{what} {value:.3} > {max}"))
    };
    if !lines.is_empty() {
        let (dup, dup_chars, chars) = duplicates(lines);
        if let Some(d) = over(
            "duplicate line fraction",
            dup as f64 / lines.len() as f64,
            r.max_duplicate_line_fraction,
        ) {
            return Some(d);
        }
        if let Some(d) = over(
            "duplicate line character fraction",
            dup_chars as f64 / chars.max(1) as f64,
            r.max_duplicate_line_char_fraction,
        ) {
            return Some(d);
        }
    }
    let paragraphs = paragraphs(text);
    if !paragraphs.is_empty() {
        let refs: Vec<&str> = paragraphs.iter().map(|p| &**p).collect();
        let (dup, dup_chars, chars) = duplicates(&refs);
        if let Some(d) = over(
            "duplicate paragraph fraction",
            dup as f64 / refs.len() as f64,
            r.max_duplicate_paragraph_fraction,
        ) {
            return Some(d);
        }
        if let Some(d) = over(
            "duplicate paragraph character fraction",
            dup_chars as f64 / chars.max(1) as f64,
            r.max_duplicate_paragraph_char_fraction,
        ) {
            return Some(d);
        }
    }
    if r.max_top_ngram_char_fraction.is_empty() && r.max_duplicate_ngram_char_fraction.is_empty() {
        return None;
    }
    let normalized = normalized();
    // Each distinct word as a small integer, so that the n-gram tables below hash and compare
    // a few integers instead of n strings (exact: equal ids are equal words).
    let spans = super::near_dup::word_spans(normalized);
    let mut ids: FastMap<&str, u32> =
        FastMap::with_capacity_and_hasher(spans.len() / 2, Default::default());
    let mut lens: Vec<usize> = Vec::with_capacity(spans.len());
    let words: Vec<u32> = spans
        .iter()
        .map(|&(start, end)| {
            let w = &normalized[start..end];
            let next = ids.len() as u32;
            let id = *ids.entry(w).or_insert(next);
            lens.push(if w.is_ascii() {
                w.len()
            } else {
                w.chars().count()
            });
            id
        })
        .collect();
    let total: usize = lens.iter().sum();
    if total == 0 {
        return None;
    }
    // Every measure first (one pass per n-gram length), then the rules in their order.
    let (top, dup) = ngram_measures(
        &words,
        &lens,
        r.max_top_ngram_char_fraction.keys().copied(),
        r.max_duplicate_ngram_char_fraction.keys().copied(),
    );
    for (&n, &max) in &r.max_top_ngram_char_fraction {
        let chars = top[&n];
        if let Some(d) = over(
            &format!("top {n}-gram character fraction"),
            chars as f64 / total as f64,
            Some(max),
        ) {
            return Some(d);
        }
    }
    for (&n, &max) in &r.max_duplicate_ngram_char_fraction {
        let chars = dup[&n];
        if let Some(d) = over(
            &format!("duplicate {n}-gram character fraction"),
            chars as f64 / total as f64,
            Some(max),
        ) {
            return Some(d);
        }
    }
    None
}

/// For each `n` of `top`: [`top_ngram_chars`]; of `dup`: [`duplicate_ngram_chars`].
///
/// The n-grams of every length get small integer ids, level by level: the (n+1)-gram at `i` is
/// the pair of n-grams at `i` and `i + 1`, so one table lookup of two ids numbers it, and it is
/// new without a lookup when either n-gram occurs once. Equal ids are equal n-grams (exact),
/// and a text costs about one lookup per word and level for its repeated parts only.
fn ngram_measures(
    words: &[u32],
    lens: &[usize],
    top: impl Iterator<Item = usize>,
    dup: impl Iterator<Item = usize>,
) -> (BTreeMap<usize, usize>, BTreeMap<usize, usize>) {
    let mut top: BTreeMap<usize, usize> = top.map(|n| (n, 0)).collect();
    let mut dup: BTreeMap<usize, usize> = dup.map(|n| (n, 0)).collect();
    let max_n = top.keys().chain(dup.keys()).copied().max().unwrap_or(0);
    // chars[i..j] = prefix[j] - prefix[i].
    let mut prefix = Vec::with_capacity(lens.len() + 1);
    prefix.push(0);
    for &l in lens {
        prefix.push(prefix.last().copied().unwrap_or(0) + l);
    }
    let mut ids: Vec<u32> = words.to_vec();
    let mut counts = vec![0u32; ids.iter().map(|&w| w as usize + 1).max().unwrap_or(0)];
    for &w in &ids {
        counts[w as usize] += 1;
    }
    let mut pairs: FastMap<u64, u32> = FastMap::default();
    let mut seen: Vec<bool> = Vec::new();
    for n in 1..=max_n {
        if ids.is_empty() {
            break;
        }
        let chars = |i: usize| prefix[i + n] - prefix[i];
        if let Some(v) = top.get_mut(&n) {
            // The most frequent repeated n-gram (ties: the one with the most characters).
            *v = (0..ids.len())
                .filter(|&i| counts[ids[i] as usize] > 1)
                .map(|i| (counts[ids[i] as usize] as usize, chars(i)))
                .max()
                .map_or(0, |(count, chars)| count * chars);
        }
        if let Some(v) = dup.get_mut(&n) {
            seen.clear();
            seen.resize(counts.len(), false);
            let (mut repeated, mut i) = (0, 0);
            while i < ids.len() {
                let id = ids[i] as usize;
                if seen[id] {
                    repeated += chars(i);
                    i += n;
                } else {
                    seen[id] = true;
                    i += 1;
                }
            }
            *v = repeated;
        }
        if n == max_n {
            break;
        }
        // The next level's ids, numbered densely from 0.
        pairs.clear();
        let mut fresh = 0u32;
        let mut next = Vec::with_capacity(ids.len().saturating_sub(1));
        for w in ids.windows(2) {
            let (x, y) = (w[0], w[1]);
            let id = if counts[x as usize] == 1 || counts[y as usize] == 1 {
                fresh += 1;
                fresh - 1
            } else {
                match pairs.entry((u64::from(x) << 32) | u64::from(y)) {
                    std::collections::hash_map::Entry::Occupied(e) => *e.get(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        fresh += 1;
                        *e.insert(fresh - 1)
                    }
                }
            };
            next.push(id);
        }
        counts.clear();
        counts.resize(fresh as usize, 0);
        for &id in &next {
            counts[id as usize] += 1;
        }
        ids = next;
    }
    (top, dup)
}

/// In-memory tables of one row's words and n-grams (never persisted, so any hasher will do; the
/// results do not depend on it).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// (items repeating an earlier item, their characters, all characters).
fn duplicates(items: &[&str]) -> (usize, usize, usize) {
    let mut seen: HashSet<&str, foldhash::fast::RandomState> =
        HashSet::with_capacity_and_hasher(items.len(), Default::default());
    let (mut dup, mut dup_chars, mut chars) = (0, 0, 0);
    for item in items {
        let n = item.chars().count();
        chars += n;
        if !seen.insert(*item) {
            dup += 1;
            dup_chars += n;
        }
    }
    (dup, dup_chars, chars)
}

/// The lines of `text` (split at `\n`), trimmed.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0;
    memchr::memchr_iter(b'\n', text.as_bytes())
        .chain(std::iter::once(text.len()))
        .map(move |end| {
            let line = &text[start..end];
            start = end + 1;
            line.trim()
        })
}

/// Whether `s` holds a letter or digit (any script).
fn has_alphanumeric(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_alphanumeric())
        || (!s.is_ascii() && s.chars().any(char::is_alphanumeric))
}

/// Runs of lines separated by blank lines, lines trimmed and joined by `\n`; paragraphs without
/// a letter or digit are left out. A paragraph whose lines need no trimming inside it is the
/// text's own slice (most are), others are joined anew.
fn paragraphs(text: &str) -> Vec<std::borrow::Cow<'_, str>> {
    let mut out = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    let mut finish = |current: &mut Vec<&str>| {
        if current.iter().any(|l| has_alphanumeric(l)) {
            // The trimmed lines are slices of `text`: the paragraph is the slice from the first
            // to the last when only `\n`s lie between them.
            let (first, last) = (current[0], current[current.len() - 1]);
            let start = first.as_ptr() as usize - text.as_ptr() as usize;
            let end = last.as_ptr() as usize - text.as_ptr() as usize + last.len();
            let slice = &text[start..end];
            let joined_len = current.iter().map(|l| l.len()).sum::<usize>() + current.len() - 1;
            out.push(if slice.len() == joined_len {
                std::borrow::Cow::Borrowed(slice)
            } else {
                std::borrow::Cow::Owned(current.join("\n"))
            });
        }
        current.clear();
    };
    for line in lines(text) {
        if line.is_empty() {
            finish(&mut current);
        } else {
            current.push(line);
        }
    }
    finish(&mut current);
    out
}

/// Characters of the most frequent n-gram times its count, when it occurs more than once (ties:
/// the one with the most characters). The definition [`ngram_measures`] computes faster.
#[cfg(test)]
fn top_ngram_chars(words: &[u32], lens: &[usize], n: usize) -> usize {
    if n == 0 || words.len() < n {
        return 0;
    }
    let mut counts: FastMap<&[u32], (usize, usize)> = FastMap::default();
    for i in 0..=words.len() - n {
        let chars: usize = lens[i..i + n].iter().sum();
        counts.entry(&words[i..i + n]).or_insert((0, chars)).0 += 1;
    }
    counts
        .values()
        .filter(|(count, _)| *count > 1)
        .max_by_key(|&&(count, chars)| (count, chars))
        .map_or(0, |&(count, chars)| count * chars)
}

/// Characters of n-grams repeating an earlier n-gram, scanning left to right and skipping the n
/// words of each repeat (datatrove's `find_all_duplicate`). The definition [`ngram_measures`]
/// computes faster.
#[cfg(test)]
fn duplicate_ngram_chars(words: &[u32], lens: &[usize], n: usize) -> usize {
    if n == 0 || words.len() < n {
        return 0;
    }
    let mut seen: HashSet<&[u32], foldhash::fast::RandomState> = Default::default();
    let (mut repeated, mut i) = (0, 0);
    while i + n <= words.len() {
        let gram = &words[i..i + n];
        if seen.contains(gram) {
            repeated += lens[i..i + n].iter().sum::<usize>();
            i += n;
        } else {
            seen.insert(gram);
            i += 1;
        }
    }
    repeated
}

/// whatlang's languages with their ISO 639-1 codes (all of its languages have one).
const LANGS: &[(&str, whatlang::Lang)] = {
    use whatlang::Lang::*;
    &[
        ("af", Afr),
        ("ak", Aka),
        ("am", Amh),
        ("ar", Ara),
        ("az", Aze),
        ("be", Bel),
        ("bg", Bul),
        ("bn", Ben),
        ("ca", Cat),
        ("cs", Ces),
        ("cy", Cym),
        ("da", Dan),
        ("de", Deu),
        ("el", Ell),
        ("en", Eng),
        ("eo", Epo),
        ("es", Spa),
        ("et", Est),
        ("fa", Pes),
        ("fi", Fin),
        ("fr", Fra),
        ("gu", Guj),
        ("he", Heb),
        ("hi", Hin),
        ("hr", Hrv),
        ("hu", Hun),
        ("hy", Hye),
        ("id", Ind),
        ("it", Ita),
        ("ja", Jpn),
        ("jv", Jav),
        ("ka", Kat),
        ("km", Khm),
        ("kn", Kan),
        ("ko", Kor),
        ("la", Lat),
        ("lt", Lit),
        ("lv", Lav),
        ("mk", Mkd),
        ("ml", Mal),
        ("mr", Mar),
        ("my", Mya),
        ("nb", Nob),
        ("ne", Nep),
        ("nl", Nld),
        ("or", Ori),
        ("pa", Pan),
        ("pl", Pol),
        ("pt", Por),
        ("ro", Ron),
        ("ru", Rus),
        ("si", Sin),
        ("sk", Slk),
        ("sl", Slv),
        ("sn", Sna),
        ("sr", Srp),
        ("sv", Swe),
        ("ta", Tam),
        ("te", Tel),
        ("th", Tha),
        ("tk", Tuk),
        ("tl", Tgl),
        ("tr", Tur),
        ("uk", Ukr),
        ("ur", Urd),
        ("uz", Uzb),
        ("vi", Vie),
        ("yi", Yid),
        ("zh", Cmn),
        ("zu", Zul),
    ]
};

/// A language from an ISO 639-1 code, `no` (Norwegian, detected as Bokmål) or an ISO 639-3
/// code as whatlang spells it; case-insensitive.
fn lang_from_code(code: &str) -> Option<whatlang::Lang> {
    let code = code.to_ascii_lowercase();
    if code == "no" {
        return Some(whatlang::Lang::Nob);
    }
    LANGS
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, l)| *l)
        .or_else(|| whatlang::Lang::from_code(code))
}

/// The ISO 639-1 code of a detected language.
fn lang_code(lang: whatlang::Lang) -> &'static str {
    LANGS
        .iter()
        .find(|(_, l)| *l == lang)
        .map_or(lang.code(), |(c, _)| c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Message;

    fn parse(yaml: &str) -> Vec<FilterConfig> {
        serde_yaml_ng::from_str(yaml).expect("filters parse")
    }

    fn compile(yaml: &str) -> Filters {
        Filters::compile(&parse(yaml), &[]).expect("filters compile")
    }

    fn compile_err(yaml: &str) -> String {
        Filters::compile(&parse(yaml), &[])
            .expect_err("compile fails")
            .to_string()
    }

    fn chat(turns: &[(&str, &str)]) -> Conversation {
        Conversation {
            messages: turns
                .iter()
                .map(|&(role, text)| match role {
                    "system" => Message::system(text),
                    "user" => Message::user(text),
                    "tool" => Message::tool(text),
                    _ => Message::assistant(text),
                })
                .collect(),
            tools: vec![],
        }
    }

    fn dropped(f: &Filters, c: &Conversation) -> Option<(String, String)> {
        f.check_content(c).err().map(|d| (d.filter, d.detail))
    }

    #[test]
    fn the_yaml_of_the_docs_parses_and_names_every_filter() {
        let f = compile(
            r#"
- turns: {min: 2, max: 400}
- assistant_chars: {min: 1, max: 200000}
- language: {keep: [en, zh], min_confidence: 0.5, scope: user}
- regex: {name: refusals, exclude: ["(?i)as an ai language model"], scope: assistant}
- regex: {include: ["def |class "], scope: assistant}
- repetition: {scope: assistant, max_duplicate_line_fraction: 0.3}
- tokens: {min: 64, max: 4096}
- supervised_tokens: {min: 32}
"#,
        );
        assert_eq!(
            f.names(),
            [
                "turns",
                "assistant_chars",
                "language",
                "refusals",
                "regex",
                "repetition",
                "tokens",
                "supervised_tokens"
            ]
        );
        assert!(f.has_token_filters());
        assert!(f.has_content_filters());
        assert!(!compile("- turns: {min: 1}").has_token_filters());
    }

    #[test]
    fn unknown_fields_and_kinds_are_errors() {
        let err = |yaml: &str| {
            serde_yaml_ng::from_str::<Vec<FilterConfig>>(yaml)
                .expect_err("rejected")
                .to_string()
        };
        assert!(err("- turns: {min: 1, mx: 3}").contains("unknown field `mx`"));
        assert!(err("- words: {min: 1}").contains("unknown variant `words`"));
        assert!(err("- regex: {exclude: [a], scope: tool}").contains("unknown variant `tool`"));
        let e = err("- turns: {min: 1}\n  tokens: {max: 3}");
        assert!(e.contains("`tokens` follows `turns`"), "{e}");
        assert!(err("- {}").contains("a map with one key"));
    }

    #[test]
    fn compile_errors_name_the_filter() {
        assert_eq!(
            compile_err("- turns: {min: 5, max: 2}"),
            "filter `turns` (turns): min 5 > max 2"
        );
        assert_eq!(
            compile_err("- tokens: {}"),
            "filter `tokens` (tokens): give `min`, `max` or both"
        );
        let e = compile_err("- regex: {name: code, include: ['def (']}");
        assert!(
            e.starts_with("filter `code` (regex): pattern `def (`: "),
            "{e}"
        );
        assert_eq!(
            compile_err("- regex: {scope: user}"),
            "filter `regex` (regex): give `include`, `exclude` or both"
        );
        let e = compile_err("- language: {keep: [en, xx]}");
        assert!(
            e.starts_with("filter `language` (language): unknown language code `xx` (ISO 639-1"),
            "{e}"
        );
        assert_eq!(
            compile_err("- language: {keep: [en], min_confidence: 1.5}"),
            "filter `language` (language): min_confidence 1.5 is not between 0 and 1"
        );
        assert_eq!(
            compile_err("- repetition: {max_top_ngram_char_fraction: {0: 0.2}}"),
            "filter `repetition` (repetition): max_top_ngram_char_fraction: n = 0 is not between 1 and 64"
        );
        assert_eq!(
            compile_err("- regex: {exclude: [a]}\n- regex: {exclude: [b]}"),
            "two global filters are named `regex`: give each a distinct `name:`"
        );
        assert_eq!(
            compile_err("- regex: {name: 'a b', exclude: [a]}"),
            "filter name `a b`: use letters, digits, `_` and `-`"
        );
        // The same name in the global and a source list is one count key.
        let global = parse("- turns: {min: 2}");
        let source = parse("- turns: {max: 3}");
        let both = Filters::compile(&global, &source).expect("compiles");
        assert_eq!(both.names(), ["turns"]);
        let source_twice = parse("- turns: {max: 3}\n- turns: {max: 4}");
        assert_eq!(
            Filters::compile(&global, &source_twice)
                .expect_err("twice")
                .to_string(),
            "two source filters are named `turns`: give each a distinct `name:`"
        );
    }

    #[test]
    fn global_filters_run_first_and_the_first_drop_counts() {
        let global = parse("- regex: {name: no_foo, exclude: [foo]}");
        let source = parse("- turns: {min: 4}\n- regex: {name: no_bar, exclude: [bar]}");
        let f = Filters::compile(&global, &source).expect("compiles");
        assert_eq!(f.names(), ["no_foo", "turns", "no_bar"]);
        let c = chat(&[("user", "foo bar"), ("assistant", "x")]);
        assert_eq!(
            dropped(&f, &c),
            Some(("no_foo".into(), "matches exclude pattern `foo`".into()))
        );
        let c = chat(&[("user", "bar"), ("assistant", "x")]);
        assert_eq!(
            dropped(&f, &c),
            Some(("turns".into(), "turns 2 < min 4".into()))
        );
        let c = chat(&[
            ("user", "bar"),
            ("assistant", "x"),
            ("user", "y"),
            ("assistant", "z"),
        ]);
        assert_eq!(
            dropped(&f, &c),
            Some(("no_bar".into(), "matches exclude pattern `bar`".into()))
        );
        let c = chat(&[
            ("user", "a"),
            ("assistant", "b"),
            ("user", "c"),
            ("assistant", "d"),
        ]);
        assert_eq!(dropped(&f, &c), None);
    }

    #[test]
    fn turns_count_user_and_assistant_messages() {
        let f = compile("- turns: {min: 2, max: 3}");
        let with_extras = chat(&[
            ("system", "s"),
            ("user", "u"),
            ("assistant", "a"),
            ("tool", "t"),
            ("tool", "t"),
        ]);
        assert_eq!(dropped(&f, &with_extras), None);
        let long = chat(&[
            ("user", "u"),
            ("assistant", "a"),
            ("user", "u"),
            ("assistant", "a"),
        ]);
        assert_eq!(
            dropped(&f, &long),
            Some(("turns".into(), "turns 4 > max 3".into()))
        );
    }

    #[test]
    fn assistant_chars_checks_every_assistant_turn() {
        let f = compile("- assistant_chars: {min: 2, max: 5}");
        let c = chat(&[
            ("user", "a long user turn"),
            ("assistant", "ok"),
            ("user", "q"),
            ("assistant", "héllo!"),
        ]);
        assert_eq!(
            dropped(&f, &c),
            Some((
                "assistant_chars".into(),
                "assistant turn 2 characters 6 > max 5".into()
            ))
        );
        // Characters, not bytes: "héllo" is 5 characters, 6 bytes.
        let c = chat(&[("user", "q"), ("assistant", "héllo")]);
        assert_eq!(dropped(&f, &c), None);
        // A tool-call-only turn counts its arguments, so it is not empty.
        let mut args = indexmap::IndexMap::new();
        args.insert("q".to_string(), serde_json::json!("abc"));
        let call = crate::conversation::ToolCall {
            id: None,
            name: "search".into(),
            arguments: args,
        };
        let c = Conversation {
            messages: vec![
                Message::user("q"),
                Message::assistant("").with_tool_calls(vec![call]),
            ],
            tools: vec![],
        };
        assert_eq!(dropped(&f, &c), None);
        let c = chat(&[("user", "q"), ("assistant", "")]);
        assert_eq!(
            dropped(&f, &c),
            Some((
                "assistant_chars".into(),
                "assistant turn 1 characters 0 < min 2".into()
            ))
        );
    }

    #[test]
    fn language_keeps_the_listed_languages() {
        let f = compile("- language: {keep: [en, zh], min_confidence: 0.5}");
        let en = chat(&[
            ("user", "Could you please explain how the garbage collector in Java decides which objects to free?"),
            ("assistant", "Bien sûr, voici une explication détaillée du ramasse-miettes."),
        ]);
        assert_eq!(dropped(&f, &en), None, "scope is user by default");
        let zh = chat(&[
            (
                "user",
                "请解释一下Java的垃圾回收器是如何决定释放哪些对象的。",
            ),
            ("assistant", "x"),
        ]);
        assert_eq!(dropped(&f, &zh), None);
        let de = chat(&[
            ("user", "Kannst du mir bitte erklären, wie der Garbage Collector in Java entscheidet, welche Objekte freigegeben werden?"),
            ("assistant", "x"),
        ]);
        let (name, detail) = dropped(&f, &de).expect("German is dropped");
        assert_eq!(name, "language");
        assert!(
            detail.starts_with("language de (") && detail.ends_with(") not in [en, zh]"),
            "{detail}"
        );
        let none = chat(&[("assistant", "Hello there, how are you doing today?")]);
        assert_eq!(
            dropped(&f, &none),
            Some((
                "language".into(),
                "no language detected in user text".into()
            ))
        );
        // ISO 639-3 codes work too, and the scope can be the assistant's.
        let f = compile("- language: {keep: [fra], scope: assistant}");
        assert_eq!(dropped(&f, &en), None);
        // A kept language is kept at any confidence; another one drops the row only when
        // the detector is at least `min_confidence` sure of it.
        let short = chat(&[(
            "user",
            "Translate to French. Good morning, how are you today?",
        )]);
        let f = compile("- language: {keep: [en], min_confidence: 0.99}");
        assert_eq!(dropped(&f, &short), None);
        let f = compile("- language: {keep: [de], min_confidence: 0.99}");
        assert_eq!(dropped(&f, &short), None, "not sure enough it is English");
        let f = compile("- language: {keep: [de], min_confidence: 0.01}");
        let (_, detail) = dropped(&f, &short).expect("sure it is English");
        assert!(detail.starts_with("language en ("), "{detail}");
        // The strict rule, when asked for: low confidence drops whatever the language.
        let f =
            compile("- language: {keep: [en], min_confidence: 0.99, drop_low_confidence: true}");
        let (_, detail) = dropped(&f, &short).expect("low confidence");
        assert!(
            detail.starts_with("language en confidence 0.") && detail.ends_with(" < 0.99"),
            "{detail}"
        );
    }

    fn judged(f: &Filters, c: &Conversation) -> Option<String> {
        f.check_content(c).err().and_then(|d| d.text)
    }

    #[test]
    fn a_dropped_row_records_the_text_its_filter_judged() {
        // A regex: its match, with context evenly either side, cut to EVIDENCE_CHARS.
        let f = compile(
            r#"- regex: {name: refusals, exclude: ["(?i)as an ai language model"], scope: assistant}"#,
        );
        let short = chat(&[
            ("user", "hi"),
            ("assistant", "Sorry. As an AI language model, I can't."),
        ]);
        assert_eq!(
            judged(&f, &short).as_deref(),
            Some("Sorry. As an AI language model, I can't.")
        );
        let long = format!(
            "{}As an AI language model{}",
            "a".repeat(300),
            "b".repeat(300)
        );
        let expected = format!(
            "…{}As an AI language model{}…",
            "a".repeat(88),
            "b".repeat(89)
        );
        let long = chat(&[("user", "hi"), ("assistant", long.as_str())]);
        assert_eq!(judged(&f, &long), Some(expected));
        // At the start: the context all after it.
        let first = format!("As an AI language model{}", "b".repeat(300));
        let expected = format!("As an AI language model{}…", "b".repeat(177));
        let first = chat(&[("user", "hi"), ("assistant", first.as_str())]);
        assert_eq!(judged(&f, &first), Some(expected));
        // Language: the scope's text the detector read (its first EVIDENCE_CHARS characters).
        let f = compile("- language: {keep: [en]}");
        let de = chat(&[
            ("user", "Kannst du mir bitte erklären, wie der Garbage Collector in Java entscheidet, welche Objekte freigegeben werden?"),
            ("assistant", "Ja."),
        ]);
        assert_eq!(
            judged(&f, &de).as_deref(),
            Some("Kannst du mir bitte erklären, wie der Garbage Collector in Java entscheidet, welche Objekte freigegeben werden?")
        );
        let long = format!("Wie geht es dir heute? {}", "Sehr gut, danke. ".repeat(20));
        let text = judged(&f, &chat(&[("user", long.as_str()), ("assistant", "x")]))
            .expect("German is dropped");
        assert_eq!(text.chars().count(), EVIDENCE_CHARS + 1);
        assert!(text.starts_with("Wie geht es dir heute? Sehr gut") && text.ends_with("…"));
        // Repetition: the passage that repeats.
        let f = compile("- repetition: {}");
        let rep = "Intro line here.\nBuy now, limited offer!\nBuy now, limited offer!\nBuy now, limited offer!";
        assert_eq!(
            judged(&f, &chat(&[("user", "q"), ("assistant", rep)])).as_deref(),
            Some("Buy now, limited offer!")
        );
        // A count judges no text.
        let f = compile("- turns: {min: 3}");
        assert_eq!(judged(&f, &short), None);
    }

    #[test]
    fn regex_include_and_exclude_on_a_scope() {
        let f = compile(
            r#"
- regex: {name: refusals, exclude: ["(?i)as an ai language model", "(?i)i cannot help"], scope: assistant}
- regex: {name: code, include: ["def |class "], scope: assistant}
"#,
        );
        let refusal = chat(&[
            ("user", "write def f"),
            ("assistant", "As an AI language model, I can't."),
        ]);
        assert_eq!(
            dropped(&f, &refusal),
            Some((
                "refusals".into(),
                "matches exclude pattern `(?i)as an ai language model`".into()
            ))
        );
        let user_says_it = chat(&[
            ("user", "As an AI language model, write code"),
            ("assistant", "def f(): pass"),
        ]);
        assert_eq!(dropped(&f, &user_says_it), None);
        let prose = chat(&[("user", "def f"), ("assistant", "Use a loop.")]);
        assert_eq!(
            dropped(&f, &prose),
            Some((
                "code".into(),
                "assistant text matches no include pattern".into()
            ))
        );
    }

    #[test]
    fn repetition_rules() {
        let f = compile("- repetition: {}");
        let c = |answer: &str| chat(&[("user", "q"), ("assistant", answer)]);
        // Varied prose passes.
        let fine = "The quick brown fox jumps over the lazy dog.\nA second line says something else entirely.\n\nThen a new paragraph with different words in it.";
        assert_eq!(dropped(&f, &c(fine)), None);
        // Short answers pass: a single n-gram is not a repetition.
        assert_eq!(dropped(&f, &c("Yes.")), None);
        assert_eq!(dropped(&f, &c("Paris is the capital.")), None);
        // Lone braces and blank lines are not counted as lines.
        let code = "fn a() {\n    one();\n}\n\nfn b() {\n    two();\n}\n";
        assert_eq!(dropped(&f, &c(code)), None);
        let looped = "I am sorry.\nI am sorry.\nI am sorry.\nPlease ask again.";
        assert_eq!(
            dropped(&f, &c(looped)),
            Some((
                "repetition".into(),
                "duplicate line fraction 0.500 > 0.3".into()
            ))
        );
        let words = "buy now buy now buy now buy now buy now and save a lot of money today";
        let (_, detail) = dropped(&f, &c(words)).expect("2-gram repetition");
        // "buy now" ×5 is 30 of 53 word characters.
        assert_eq!(detail, "top 2-gram character fraction 0.566 > 0.2");
        // Rules can be turned off, and the scope moved.
        let off = compile(
            "- repetition: {max_duplicate_line_fraction: null, max_duplicate_line_char_fraction: null, \
             max_duplicate_paragraph_fraction: null, max_duplicate_paragraph_char_fraction: null, \
             max_top_ngram_char_fraction: {}, max_duplicate_ngram_char_fraction: {}}",
        );
        assert_eq!(dropped(&off, &c(looped)), None);
        let user_scope = compile("- repetition: {scope: user}");
        assert_eq!(dropped(&user_scope, &c(looped)), None);
    }

    /// `lines` and `paragraphs` against their plain definitions, on random texts of lines with
    /// spaces, tabs, `\r`, blank lines and lines without letters.
    #[test]
    fn lines_and_paragraphs_follow_their_definition() {
        let pieces = [
            "a", "b c", " ", "\t", "\r", "\n", "\n\n", "{", "é", "1", "  x  ",
        ];
        let mut rng = super::super::Lcg(11);
        for _ in 0..3000 {
            let mut text = String::new();
            for _ in 0..rng.below(13) {
                text.push_str(pieces[rng.below(pieces.len() as u64) as usize]);
            }
            let plain_lines: Vec<&str> = text.split('\n').map(str::trim).collect();
            assert_eq!(lines(&text).collect::<Vec<_>>(), plain_lines, "{text:?}");
            let mut plain = Vec::new();
            let mut current: Vec<&str> = Vec::new();
            for line in plain_lines.iter().copied().chain(std::iter::once("")) {
                if line.is_empty() {
                    if current.iter().any(|l| l.chars().any(char::is_alphanumeric)) {
                        plain.push(current.join("\n"));
                    }
                    current.clear();
                } else {
                    current.push(line);
                }
            }
            let ours: Vec<String> = paragraphs(&text)
                .into_iter()
                .map(|p| p.into_owned())
                .collect();
            assert_eq!(ours, plain, "{text:?}");
        }
    }

    #[test]
    fn repetition_measures() {
        // Word ids of "a b c a b c a b".
        let w: Vec<u32> = vec![0, 1, 2, 0, 1, 2, 0, 1];
        let lens = vec![1; w.len()];
        // "a b" occurs 3 times: 2 chars × 3.
        assert_eq!(top_ngram_chars(&w, &lens, 2), 6);
        // 3-grams: abc bca cab abc(repeat: +3, skip to index 6) "a b" too short.
        assert_eq!(duplicate_ngram_chars(&w, &lens, 3), 3);
        assert_eq!(top_ngram_chars(&w, &lens, 9), 0);
        assert_eq!(duplicates(&["x", "yy", "x", "yy", "z"]), (2, 3, 7));
        // The level-by-level ids give the definitions' values, on texts with many repeats.
        let mut rng = super::super::Lcg(12345);
        let mut next = |m: u64| rng.below(m);
        for round in 0..300 {
            let len = next(120) as usize;
            let vocab = 1 + next(if round % 3 == 0 { 3 } else { 40 });
            let w: Vec<u32> = (0..len).map(|_| next(vocab) as u32).collect();
            let lens: Vec<usize> = w.iter().map(|&x| 1 + x as usize % 7).collect();
            let ns = 1..=12usize;
            let (top, dup) = ngram_measures(&w, &lens, ns.clone(), ns.clone());
            for n in ns {
                assert_eq!(top[&n], top_ngram_chars(&w, &lens, n), "top {n} {w:?}");
                assert_eq!(
                    dup[&n],
                    duplicate_ngram_chars(&w, &lens, n),
                    "dup {n} {w:?}"
                );
            }
        }
        assert_eq!(
            paragraphs("p1 l1\np1 l2\n\n\n  \np2\n\n}\n"),
            ["p1 l1\np1 l2", "p2"]
        );
    }

    #[test]
    fn token_filters() {
        let f = compile("- tokens: {min: 4, max: 10}\n- supervised_tokens: {name: sup, min: 2}");
        assert_eq!(f.check_tokens(4, 2), Ok(()));
        assert_eq!(
            f.check_tokens(11, 0),
            Err(Dropped {
                filter: "tokens".into(),
                detail: "tokens 11 > max 10".into(),
                text: None,
            })
        );
        assert_eq!(
            f.check_tokens(5, 1),
            Err(Dropped {
                filter: "sup".into(),
                detail: "supervised tokens 1 < min 2".into(),
                text: None,
            })
        );
        // Token filters never drop on content.
        assert_eq!(f.check_content(&chat(&[("user", "x")])), Ok(()));
    }
    /// The false-drop rate of `language: {keep: [en], min_confidence: 0.5}` on real English
    /// prompts in the fixtures (docs/curation-notes.md): the strict rule (`drop_low_confidence:
    /// true`, the rule before) against the default. Print with `--nocapture`.
    #[test]
    fn language_false_drops_on_real_english_prompts() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let read = |p: &str| std::fs::read_to_string(root.join(p)).expect("fixture");
        let field = |p: &str, key: &str| -> Vec<String> {
            read(p)
                .lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).expect("json");
                    v[key].as_str().expect("text").to_owned()
                })
                .collect()
        };
        // Every first user turn of the real-row fixtures' expected conversations.
        let mut chats = Vec::new();
        for dir in std::fs::read_dir(&root).expect("fixtures") {
            let expected = dir.expect("entry").path().join("expected.jsonl");
            let Ok(text) = std::fs::read_to_string(&expected) else {
                continue;
            };
            for l in text.lines() {
                let v: serde_json::Value = serde_json::from_str(l).expect("json");
                let messages = v["conversation"]["messages"].as_array().cloned();
                let first_user = messages.into_iter().flatten().find(|m| m["role"] == "user");
                if let Some(text) = first_user.as_ref().and_then(|m| m["content"].as_str()) {
                    chats.push(text.to_owned());
                }
            }
        }
        let corpora = [
            (
                "HumanEval prompts (code + docstring)",
                field("benchmarks/HumanEval.jsonl", "prompt"),
            ),
            (
                "MBPP task texts",
                field("benchmarks/mbpp_sample.jsonl", "text"),
            ),
            ("first user turns of the real-row fixtures", chats),
        ];
        let strict =
            compile("- language: {keep: [en], min_confidence: 0.5, drop_low_confidence: true}");
        let default = compile("- language: {keep: [en], min_confidence: 0.5}");
        for (name, texts) in corpora {
            let drops = |f: &Filters| {
                texts
                    .iter()
                    .filter(|t| dropped(f, &chat(&[("user", t), ("assistant", "x")])).is_some())
                    .count()
            };
            let (before, after) = (drops(&strict), drops(&default));
            println!(
                "{name}: {} prompts, dropped {before} strict, {after} default",
                texts.len()
            );
            assert!(after <= before, "{name}");
            // Detected as English: never dropped by default; what it drops is another
            // language detected with confidence 0.5 or more.
            for t in &texts {
                if let Some((_, detail)) =
                    dropped(&default, &chat(&[("user", t), ("assistant", "x")]))
                {
                    assert!(detail.ends_with("not in [en]"), "{detail}");
                }
            }
        }
    }
}
