//! `supervised_tokens`: the supervised (loss-masked) tokens of the rendered row.

use super::{Bounds, Filter, FilterProblem, Judge, JudgeTokens, RangeFilter, TokenCounts};
use serde::Deserialize;

/// `{name, min, max}` on the row's supervised token count.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(transparent)]
pub struct SupervisedTokens(pub RangeFilter);

impl Filter for SupervisedTokens {
    const READS_TEXT: bool = false;

    fn name(&self) -> Option<&str> {
        self.0.name.as_deref()
    }

    fn compile(&self) -> Result<Judge, FilterProblem> {
        Ok(Judge::Tokens(Box::new(CountSupervised(Bounds::new(
            &self.0,
        )?))))
    }
}

#[derive(Debug)]
struct CountSupervised(Bounds);

impl JudgeTokens for CountSupervised {
    fn judge(&self, row: TokenCounts) -> Option<String> {
        self.0.check(row.supervised as u64, "supervised tokens")
    }
}
