//! `regex`: drops rows whose scope text matches an `exclude` pattern or no `include` pattern.

use super::{Filter, FilterProblem, Judge, JudgeText};
use crate::curate::text::{RowText, Scope};
use ::regex::RegexSet;
use serde::Deserialize;

/// Drops rows whose text matches any `exclude` pattern, or (when `include` is given) matches
/// none of the `include` patterns. Patterns are Rust `regex` syntax; `(?i)` for case-insensitive.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Regex {
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

impl Filter for Regex {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn compile(&self) -> Result<Judge, FilterProblem> {
        if self.include.is_empty() && self.exclude.is_empty() {
            return Err(FilterProblem::NoPattern);
        }
        let set = |patterns: &[String]| -> Result<_, FilterProblem> {
            if patterns.is_empty() {
                return Ok(None);
            }
            let each = patterns
                .iter()
                .map(|p| {
                    ::regex::Regex::new(p).map_err(|error| FilterProblem::Pattern {
                        pattern: p.clone(),
                        error,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let set = RegexSet::new(patterns).map_err(FilterProblem::PatternSet)?;
            Ok(Some((set, patterns.to_vec(), each)))
        };
        Ok(Judge::Text(Box::new(Patterns {
            include: set(&self.include)?.map(|(set, patterns, _)| (set, patterns)),
            exclude: set(&self.exclude)?,
            scope: self.scope,
        })))
    }
}

/// A [`Regex`] filter with its patterns compiled (each set beside its patterns, to name the
/// one that matched).
#[derive(Debug)]
struct Patterns {
    include: Option<(RegexSet, Vec<String>)>,
    /// Each pattern compiled on its own too, to find a dropped row's match.
    exclude: Option<(RegexSet, Vec<String>, Vec<::regex::Regex>)>,
    scope: Scope,
}

impl JudgeText for Patterns {
    fn judge(&self, row: &RowText) -> Option<String> {
        let text = row.scope(self.scope);
        if let Some((set, patterns, _)) = &self.exclude {
            if let Some(i) = set.matches(text).iter().next() {
                return Some(format!("matches exclude pattern `{}`", patterns[i]));
            }
        }
        if let Some((set, _)) = &self.include {
            if !set.is_match(text) {
                return Some(format!(
                    "{} text matches no include pattern",
                    self.scope.as_str()
                ));
            }
        }
        None
    }

    /// The exclude pattern's match in context, else the head of the text.
    fn evidence(&self, row: &RowText) -> Option<String> {
        let text = row.scope(self.scope);
        let found = self.exclude.as_ref().and_then(|(set, _, each)| {
            let i = set.matches(text).iter().next()?;
            each.get(i)?.find(text)
        });
        Some(match found {
            Some(m) => super::around(text, m.start(), m.end()),
            None => super::head(text),
        })
    }
}
