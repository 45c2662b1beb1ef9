//! `alpaca`: `{"instruction", "input", "output", "system"}` with a column mapping. The user turn
//! is the instruction, then the input on the next line when non-empty (LLaMA-Factory's rule).
//!
//! | outcome | code | when |
//! |---|---|---|
//! | reject | `missing_field` / `invalid_field` | `instruction` or `output` absent, null or not a string |
//! | reject | `empty_response` | `output` empty (after trimming). When `input` is not empty and the instruction does not refer to an input (`following`, `given`, `below`, ...), the message adds that the answer is likely in `input` (CodeAlpaca's answer-in-input quirk; moving `input` to the answer would be a guess) |
//! | reject | `empty_prompt` | `instruction` and `input` both empty |
//!
//! An empty or absent `system` means no system message.

use super::fields::{optional_str, required_str};
use super::{Repairs, Row};
use crate::conversation::{py_trim, Conversation, Message};
use crate::reject::{Reject, RejectReason};

#[derive(Debug, Clone)]
pub struct AlpacaAdapter {
    pub instruction: String,
    /// `None` for sources without an input column (a stray one is then never read).
    pub input: Option<String>,
    pub output: String,
    pub system: Option<String>,
}

impl Default for AlpacaAdapter {
    fn default() -> Self {
        AlpacaAdapter {
            instruction: "instruction".into(),
            input: Some("input".into()),
            output: "output".into(),
            system: Some("system".into()),
        }
    }
}

impl AlpacaAdapter {
    pub fn adapt(&self, row: &Row, _repairs: &mut Repairs) -> Result<Conversation, Reject> {
        let instruction = required_str(row, &self.instruction)?;
        let input = match &self.input {
            Some(column) => optional_str(row, column)?.unwrap_or(""),
            None => "",
        };
        let output = required_str(row, &self.output)?;
        let has_input = !py_trim(input).is_empty();
        if py_trim(output).is_empty() {
            // The row has no answer, whichever column it may have strayed into.
            return Err(Reject::new(
                RejectReason::EmptyResponse,
                match (&self.input, has_input) {
                    (Some(input), true) if !refers_to_input(instruction) => format!(
                        "field `{}` is empty while `{input}` is not (the answer is likely in `{input}`)",
                        self.output
                    ),
                    _ => format!("field `{}` is empty", self.output),
                },
            ));
        }
        if py_trim(instruction).is_empty() && !has_input {
            return Err(Reject::new(
                RejectReason::EmptyPrompt,
                format!(
                    "field `{}` is empty and there is no input",
                    self.instruction
                ),
            ));
        }
        let mut messages = Vec::with_capacity(3);
        if let Some(column) = &self.system {
            if let Some(system) = optional_str(row, column)? {
                if !py_trim(system).is_empty() {
                    messages.push(Message::system(system));
                }
            }
        }
        let user = if has_input {
            format!("{instruction}\n{input}")
        } else {
            instruction.to_owned()
        };
        messages.push(Message::user(user));
        messages.push(Message::assistant(output));
        Ok(Conversation {
            messages,
            tools: Vec::new(),
        })
    }
}

/// Whether an instruction works on an input of its own ("Edit the following code", "Sort the
/// given list"): then a non-empty `input` is that input, not a misplaced answer.
fn refers_to_input(instruction: &str) -> bool {
    let lower = instruction.to_lowercase();
    const WORDS: [&str; 9] = [
        "following",
        "given",
        "below",
        "above",
        "provided",
        "input",
        "these",
        "this code",
        "this program",
    ];
    WORDS.iter().any(|w| lower.contains(w))
}

impl super::Format for AlpacaAdapter {
    const READS: super::Reads = super::Reads {
        columns: &[
            super::Column::Instruction,
            super::Column::Output,
            super::Column::Input,
            super::Column::System,
        ],
        tags: false,
        resolved_only: false,
    };

    fn configure(settings: &super::Settings) -> Self {
        let mut a = AlpacaAdapter::default();
        settings.column(super::Column::Instruction, &mut a.instruction);
        settings.column(super::Column::Output, &mut a.output);
        if let Some(input) = settings.column_given(super::Column::Input) {
            a.input = Some(input.clone());
        }
        if let Some(system) = settings.column_given(super::Column::System) {
            a.system = Some(system.clone());
        }
        a
    }

    fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        AlpacaAdapter::adapt(self, row, repairs)
    }
}
