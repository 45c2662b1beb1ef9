//! `openorca`: Open-Orca/OpenOrca rows `{"id", "system_prompt", "question", "response"}`
//! (all strings), single-turn: system? → user → assistant.
//!
//! | outcome | code | when |
//! |---|---|---|
//! | (mapping) | | an empty or whitespace-only `system_prompt` means no system message (about half the rows) |
//! | reject | `missing_field` / `invalid_field` | `question` or `response` absent, null or not a string; `system_prompt` not a string |
//! | reject | `empty_response` | `response` empty |
//! | reject | `empty_prompt` | `question` empty |
//!
//! The `id` (`<submix>.<n>`, submix one of `niv`, `t0`, `cot`, `flan`) is not part of the
//! conversation; [`metadata`](OpenOrcaAdapter::metadata) reports it with its `submix`, for
//! per-submix statistics or sampling.

use super::fields::{optional_str, required_str};
use super::{Repairs, Row};
use crate::conversation::{py_trim, Conversation, Message};
use crate::reject::{Reject, RejectReason};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Default)]
pub struct OpenOrcaAdapter;

impl OpenOrcaAdapter {
    pub fn adapt(&self, row: &Row, _repairs: &mut Repairs) -> Result<Conversation, Reject> {
        let system = optional_str(row, "system_prompt")?.unwrap_or("");
        let question = required_str(row, "question")?;
        let response = required_str(row, "response")?;
        if py_trim(response).is_empty() {
            return Err(Reject::new(
                RejectReason::EmptyResponse,
                "field `response` is empty",
            ));
        }
        if py_trim(question).is_empty() {
            return Err(Reject::new(
                RejectReason::EmptyPrompt,
                "field `question` is empty",
            ));
        }
        let mut messages = Vec::with_capacity(3);
        if !py_trim(system).is_empty() {
            messages.push(Message::system(system));
        }
        messages.push(Message::user(question));
        messages.push(Message::assistant(response));
        Ok(Conversation {
            messages,
            tools: Vec::new(),
        })
    }

    /// `{"id": "flan.1187", "submix": "flan"}` (only the keys the row has).
    pub fn metadata(&self, row: &Row) -> Map<String, Value> {
        let mut meta = Map::new();
        if let Some(Value::String(id)) = row.get("id") {
            meta.insert("id".into(), Value::String(id.clone()));
            if let Some((submix, _)) = id.split_once('.') {
                meta.insert("submix".into(), Value::String(submix.to_owned()));
            }
        }
        meta
    }
}

impl super::Format for OpenOrcaAdapter {
    fn configure(_: &super::Settings) -> Self {
        OpenOrcaAdapter
    }

    fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        OpenOrcaAdapter::adapt(self, row, repairs)
    }

    fn metadata(&self, row: &Row) -> serde_json::Map<String, serde_json::Value> {
        OpenOrcaAdapter::metadata(self, row)
    }
}
