//! `tokens`: the tokens of the rendered row.

use super::{Bounds, Filter, FilterProblem, Judge, JudgeTokens, RangeFilter, TokenCounts};
use serde::Deserialize;

/// `{name, min, max}` on the row's token count.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(transparent)]
pub struct Tokens(pub RangeFilter);

impl Filter for Tokens {
    const READS_TEXT: bool = false;

    fn name(&self) -> Option<&str> {
        self.0.name.as_deref()
    }

    fn compile(&self) -> Result<Judge, FilterProblem> {
        Ok(Judge::Tokens(Box::new(CountTokens(Bounds::new(&self.0)?))))
    }
}

#[derive(Debug)]
struct CountTokens(Bounds);

impl JudgeTokens for CountTokens {
    fn judge(&self, row: TokenCounts) -> Option<String> {
        self.0.check(row.tokens as u64, "tokens")
    }
}
