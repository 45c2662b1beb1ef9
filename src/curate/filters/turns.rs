//! `turns`: the number of user and assistant messages (system and tool messages are not turns).

use super::{Bounds, Filter, FilterProblem, Judge, JudgeText, RangeFilter};
use crate::conversation::Role;
use crate::curate::text::RowText;
use serde::Deserialize;

/// `{name, min, max}` on the turn count.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(transparent)]
pub struct Turns(pub RangeFilter);

impl Filter for Turns {
    fn name(&self) -> Option<&str> {
        self.0.name.as_deref()
    }

    fn compile(&self) -> Result<Judge, FilterProblem> {
        Ok(Judge::Text(Box::new(CountTurns(Bounds::new(&self.0)?))))
    }
}

#[derive(Debug)]
struct CountTurns(Bounds);

impl JudgeText for CountTurns {
    fn judge(&self, row: &RowText) -> Option<String> {
        let turns = row
            .conversation()
            .messages
            .iter()
            .filter(|m| matches!(m.role, Role::User | Role::Assistant))
            .count();
        self.0.check(turns as u64, "turns")
    }
}
