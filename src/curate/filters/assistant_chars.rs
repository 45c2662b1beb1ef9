//! `assistant_chars`: characters (Unicode scalar values) of every assistant turn: content,
//! reasoning and tool-call arguments, as in [`text::scope_text`].

use super::{Bounds, Filter, FilterProblem, Judge, JudgeText, RangeFilter};
use crate::conversation::Role;
use crate::curate::text::{self, RowText};
use serde::Deserialize;

/// `{name, min, max}` on each assistant turn's characters.
#[derive(Deserialize, Debug, Clone, PartialEq, Eq, Default)]
#[serde(transparent)]
pub struct AssistantChars(pub RangeFilter);

impl Filter for AssistantChars {
    fn name(&self) -> Option<&str> {
        self.0.name.as_deref()
    }

    fn compile(&self) -> Result<Judge, FilterProblem> {
        Ok(Judge::Text(Box::new(CountChars(Bounds::new(&self.0)?))))
    }
}

#[derive(Debug)]
struct CountChars(Bounds);

impl JudgeText for CountChars {
    /// The first assistant turn out of bounds.
    fn judge(&self, row: &RowText) -> Option<String> {
        row.conversation()
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .enumerate()
            .find_map(|(i, m)| {
                let chars = text::message_text(m).chars().count() as u64;
                self.0
                    .check(chars, &format!("assistant turn {} characters", i + 1))
            })
    }

    /// The turn the bound failed on: the longest for a `max`, else the shortest.
    fn evidence(&self, row: &RowText) -> Option<String> {
        let texts: Vec<String> = row
            .conversation()
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .map(text::message_text)
            .collect();
        let chosen = match self.judge(row) {
            Some(detail) if detail.contains("> max") => {
                texts.iter().max_by_key(|t| t.chars().count())
            }
            _ => texts.iter().min_by_key(|t| t.chars().count()),
        };
        chosen.map(|t| super::head(t))
    }
}
