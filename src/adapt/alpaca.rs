//! `alpaca`: `{"instruction", "input", "output", "system"}` with a column mapping. The user turn
//! is the instruction, then the input on the next line when non-empty (LLaMA-Factory's rule).

use super::fields::{optional_str, required_str};
use super::{Repairs, Row};
use crate::conversation::{Conversation, Message};
use crate::reject::{Reject, RejectReason};

#[derive(Debug, Clone)]
pub struct AlpacaAdapter {
    pub instruction: String,
    pub input: String,
    pub output: String,
    pub system: String,
}

impl Default for AlpacaAdapter {
    fn default() -> Self {
        AlpacaAdapter {
            instruction: "instruction".into(),
            input: "input".into(),
            output: "output".into(),
            system: "system".into(),
        }
    }
}

impl AlpacaAdapter {
    pub fn adapt(&self, row: &Row, _repairs: &mut Repairs) -> Result<Conversation, Reject> {
        let instruction = required_str(row, &self.instruction)?;
        let input = optional_str(row, &self.input)?.unwrap_or("");
        let output = required_str(row, &self.output)?;
        if output.trim().is_empty() {
            return Err(Reject::new(
                RejectReason::MissingField,
                format!("field `{}` is empty", self.output),
            ));
        }
        let mut messages = Vec::with_capacity(3);
        if let Some(system) = optional_str(row, &self.system)? {
            if !system.trim().is_empty() {
                messages.push(Message::system(system));
            }
        }
        let user = if input.trim().is_empty() {
            instruction.to_owned()
        } else {
            format!("{instruction}\n{input}")
        };
        messages.push(Message::user(user));
        messages.push(Message::assistant(output));
        Ok(Conversation {
            messages,
            tools: Vec::new(),
        })
    }
}
