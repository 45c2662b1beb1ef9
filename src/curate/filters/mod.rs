//! Row filters declared in YAML, globally and per source. Each filter is counted under
//! `filtered.<name>` (its `name:`, by default its kind) with a reason naming the value that failed.
//!
//! Content filters (`turns`, `assistant_chars`, `language`, `regex`, `repetition`) look only at
//! the conversation and run before rendering; token filters (`tokens`, `supervised_tokens`) run
//! after tokenizing. Global filters run before a source's own, each in the order written, and a
//! row is counted under the first one that drops it.
//!
//! One file per filter kind, named as the kind: its settings (the YAML under the kind) implement
//! [`Filter`], and what they compile to judges a row with one method ([`JudgeText::judge`] or
//! [`JudgeTokens::judge`]). A new kind is that file, its `mod` line and one line in the
//! [`filters!`] list below (docs/extending.md).

mod assistant_chars;
mod language;
mod regex;
mod repetition;
mod supervised_tokens;
mod tokens;
mod turns;

pub use assistant_chars::AssistantChars;
pub use language::Language;
pub use regex::Regex;
pub use repetition::Repetition;
pub use supervised_tokens::SupervisedTokens;
pub use tokens::Tokens;
pub use turns::Turns;

use crate::conversation::Conversation;
use crate::curate::text::RowText;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::HashSet;
use std::fmt;

/// A filter's settings, as written under its kind (`- turns: {min: 2}`). Each kind's file
/// implements it for its settings type, which derives `Deserialize` (with
/// `deny_unknown_fields`), `Debug`, `Clone` and `PartialEq`.
pub trait Filter {
    /// `false` for a filter that reads only token counts (a [`Judge::Tokens`]): the only kind
    /// that applies to pre-tokenized rows.
    const READS_TEXT: bool = true;

    /// The `name:` given, if any: the count key (by default the kind).
    fn name(&self) -> Option<&str>;

    /// Checks the settings (bounds, patterns, codes...) and builds what judges rows.
    fn compile(&self) -> Result<Judge, FilterProblem>;
}

/// A compiled filter, by what it reads.
#[derive(Debug)]
pub enum Judge {
    /// The conversation's text, before rendering.
    Text(Box<dyn JudgeText>),
    /// The rendered row's token counts, after tokenizing.
    Tokens(Box<dyn JudgeTokens>),
}

/// A compiled content filter.
pub trait JudgeText: fmt::Debug + Send + Sync {
    /// `None` keeps the row; `Some(detail)` drops it, saying what failed (e.g. `turns 1 < min
    /// 2`).
    fn judge(&self, row: &RowText) -> Option<String>;

    /// The text it judged in a row it dropped (see [`Dropped::text`]); run only on dropped
    /// rows, so it may search again what [`judge`](Self::judge) found. `None` for a count.
    fn evidence(&self, _row: &RowText) -> Option<String> {
        None
    }
}

/// A compiled token filter.
pub trait JudgeTokens: fmt::Debug + Send + Sync {
    /// `None` keeps the row; `Some(detail)` drops it, saying what failed.
    fn judge(&self, row: TokenCounts) -> Option<String>;
}

/// What a token filter reads of a rendered row.
#[derive(Debug, Clone, Copy)]
pub struct TokenCounts {
    pub tokens: usize,
    /// Supervised (loss-masked) tokens.
    pub supervised: usize,
}

/// Generates, from the list of `kind: Type`, the [`FilterConfig`] enum (one variant per kind,
/// named as its type), [`KINDS`], and the dispatch of [`FilterConfig`]'s methods.
macro_rules! filters {
    ($($kind:ident: $type:ident),* $(,)?) => {
        /// One item of a `filters:` list: a map with one key, the filter's kind.
        #[derive(Debug, Clone, PartialEq)]
        pub enum FilterConfig {
            $($type($kind::$type),)*
        }

        /// Every kind, as written in the YAML, in the order registered.
        pub const KINDS: &[&str] = &[$(stringify!($kind)),*];

        /// Every kind, with whether it reads text ([`Filter::READS_TEXT`]).
        const READS_TEXT: &[(&str, bool)] =
            &[$((stringify!($kind), <$kind::$type as Filter>::READS_TEXT)),*];

        impl FilterConfig {
            /// The kind, as written in the YAML: the default name.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(FilterConfig::$type(_) => stringify!($kind),)*
                }
            }

            /// Whether the filter reads the conversation's text ([`Filter::READS_TEXT`]).
            pub fn reads_text(&self) -> bool {
                match self {
                    $(FilterConfig::$type(_) => <$kind::$type as Filter>::READS_TEXT,)*
                }
            }

            fn given_name(&self) -> Option<&str> {
                match self {
                    $(FilterConfig::$type(f) => f.name(),)*
                }
            }

            fn compile(&self) -> Result<Judge, FilterProblem> {
                match self {
                    $(FilterConfig::$type(f) => f.compile(),)*
                }
            }

            /// The settings under `kind`, or `None` for an unknown kind.
            fn read<'de, A: MapAccess<'de>>(
                kind: &str,
                map: &mut A,
            ) -> Result<Option<FilterConfig>, A::Error> {
                Ok(Some(match kind {
                    $(stringify!($kind) => FilterConfig::$type(map.next_value()?),)*
                    _ => return Ok(None),
                }))
            }
        }
    };
}
// The registered kinds, in the order the docs list them: `kind: Type` where `kind` is the YAML
// key and the module (file) that defines `Type`.
filters! {
    turns: Turns,
    assistant_chars: AssistantChars,
    language: Language,
    regex: Regex,
    repetition: Repetition,
    tokens: Tokens,
    supervised_tokens: SupervisedTokens,
}

impl FilterConfig {
    /// The count key: `name:` or the kind.
    pub fn name(&self) -> &str {
        self.given_name().unwrap_or(self.kind())
    }

    /// The kinds that apply to pre-tokenized rows, for a message: "`a` and `b`".
    pub fn token_kinds() -> String {
        let quoted: Vec<String> = READS_TEXT
            .iter()
            .filter(|(_, text)| !text)
            .map(|(kind, _)| format!("`{kind}`"))
            .collect();
        match quoted.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => quoted.concat(),
        }
    }
}

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
                let Some(filter) = FilterConfig::read(&kind, &mut map)? else {
                    return Err(de::Error::unknown_variant(&kind, KINDS));
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

/// `{min, max}`, both inclusive, either optional: the settings of the counting filters.
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
    text: Vec<Named<Box<dyn JudgeText>>>,
    tokens: Vec<Named<Box<dyn JudgeTokens>>>,
    /// Every name, in the order written (global first), without repeats.
    names: Vec<String>,
}

#[derive(Debug)]
struct Named<T> {
    name: String,
    judge: T,
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
        language::LANGS.iter().map(|(c, _)| *c).collect::<Vec<_>>().join(", ")
    )]
    UnknownLanguage { code: String },
    #[error("give `include`, `exclude` or both")]
    NoPattern,
    #[error("pattern `{pattern}`: {error}")]
    Pattern {
        pattern: String,
        error: ::regex::Error,
    },
    #[error("{0}")]
    PatternSet(::regex::Error),
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
pub(crate) struct Bounds {
    min: Option<u64>,
    max: Option<u64>,
}

impl Bounds {
    pub(crate) fn new(r: &RangeFilter) -> Result<Self, FilterProblem> {
        match (r.min, r.max) {
            (None, None) => Err(FilterProblem::NoBound),
            (Some(min), Some(max)) if min > max => Err(FilterProblem::MinAboveMax { min, max }),
            (min, max) => Ok(Bounds { min, max }),
        }
    }

    /// `None` when `value` is in range, else the reason.
    pub(crate) fn check(self, value: u64, what: &str) -> Option<String> {
        if let Some(min) = self.min.filter(|&min| value < min) {
            return Some(format!("{what} {value} < min {min}"));
        }
        if let Some(max) = self.max.filter(|&max| value > max) {
            return Some(format!("{what} {value} > max {max}"));
        }
        None
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
                let judge = config.compile().map_err(|problem| FilterError::Invalid {
                    name: name.to_owned(),
                    kind: config.kind(),
                    problem,
                })?;
                // A kind's `READS_TEXT` must say what its judge reads (the speculator check
                // trusts it).
                debug_assert_eq!(
                    matches!(judge, Judge::Text(_)),
                    config.reads_text(),
                    "{}",
                    config.kind()
                );
                let name = name.to_owned();
                if !filters.names.contains(&name) {
                    filters.names.push(name.clone());
                }
                match judge {
                    Judge::Text(judge) => filters.text.push(Named { name, judge }),
                    Judge::Tokens(judge) => filters.tokens.push(Named { name, judge }),
                }
            }
        }
        Ok(filters)
    }

    /// The first content filter that drops `c`, if any.
    pub fn check_content(&self, c: &Conversation) -> Result<(), Dropped> {
        self.check_row(&RowText::new(c))
    }

    /// [`Filters::check_content`] on a row whose texts the later steps share.
    pub fn check_row(&self, row: &RowText) -> Result<(), Dropped> {
        first_drop(&self.text, |judge| {
            judge.judge(row).map(|detail| (detail, judge.evidence(row)))
        })
    }

    /// The first token filter that drops a row of `seq_len` tokens, `supervised` of them
    /// supervised.
    pub fn check_tokens(&self, seq_len: usize, supervised: usize) -> Result<(), Dropped> {
        let row = TokenCounts {
            tokens: seq_len,
            supervised,
        };
        first_drop(&self.tokens, |judge| {
            judge.judge(row).map(|detail| (detail, None))
        })
    }

    pub fn has_content_filters(&self) -> bool {
        !self.text.is_empty()
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

/// The first of `filters` whose judge drops the row.
fn first_drop<T>(
    filters: &[Named<T>],
    judge: impl Fn(&T) -> Option<(String, Option<String>)>,
) -> Result<(), Dropped> {
    for f in filters {
        if let Some((detail, text)) = judge(&f.judge) {
            return Err(Dropped {
                filter: f.name.clone(),
                detail,
                text,
            });
        }
    }
    Ok(())
}

use language::prefix;

/// At most [`EVIDENCE_CHARS`] characters of `text` around its bytes `start..end` (a match:
/// itself first, then context evenly either side, what one side lacks going to the other),
/// with `…` where it is cut.
pub(crate) fn around(text: &str, start: usize, end: usize) -> String {
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
pub(crate) fn head(text: &str) -> String {
    let cut = prefix(text, EVIDENCE_CHARS);
    let more = if cut.len() < text.len() { "…" } else { "" };
    format!("{cut}{more}")
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests;
