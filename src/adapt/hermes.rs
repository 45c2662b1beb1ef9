//! `hermes`: NousResearch/hermes-function-calling-v1 rows `{"id", "conversations": [{"from",
//! "value"}], "tools"?, "category", "subcategory", "task"}` (every config: `func_calling`,
//! `func_calling_singleturn`, `glaive_func_calling`, `json_mode_agentic`, `json_mode_singleturn`).
//!
//! - `system` → the system message, unless it holds a `<tools>` block: that prompt is the
//!   Hermes function-calling boilerplate (it asks for JSON calls, which Qwen3.6 does not use),
//!   so it is dropped and the template writes its own tool preamble. `json_mode` prompts (a
//!   `<schema>` and no `<tools>`) are kept.
//! - Tools: the `tools` column (a JSON string of OpenAI tool objects) when present, else the
//!   `<tools>` block of the system prompt (JSON or a Python literal).
//! - `human` → user; `gpt` → assistant: text, then `<tool_call>` blocks (parallel calls), each a
//!   JSON object or a Python-literal dict; `tool` → one tool message per `<tool_response>` block.
//! - Calls get `call_N` ids; tool responses answer the pending calls in order.
//!
//! | outcome | code | when |
//! |---|---|---|
//! | repair | `python_literal_parsed` | a call (or the `<tools>` list) written as a Python literal (`'...'`, `True`, `None`) |
//! | repair | `literal_newlines_replaced` | literal `\n` (backslash, n) instead of newlines around a `<tool_call>` body (about 730 rows) |
//! | repair | `call_name_unnested` | a call without a top-level `name` but with `arguments.name` |
//! | repair | `tool_call_ids_synthesized` | calls without ids |
//! | repair | `duplicate_tool_dropped` | a function declared twice (rule in `tools.rs`) |
//! | repair | `tool_arguments_parsed` | `arguments` given as a JSON string |
//! | reject | `invalid_tool_call` | a `<tool_call>` body that is neither JSON nor a Python literal, an unclosed block, or text after the calls |
//! | reject | `invalid_tool_arguments` | arguments that are not an object |
//! | reject | `invalid_tools` | a `tools` column or `<tools>` block that cannot be read |
//! | reject | `undeclared_tool` | a call to a function not in the tools |
//! | reject | `orphan_tool_response` | more tool responses than pending calls |
//! | reject | `unknown_role` | a `from` other than `system`, `human`, `gpt`, `tool` |
//!
//! Metadata: `id`, `category`, `subcategory`, `task`.

use super::calls::{assistant_with_tool_calls, tool_responses, TOOL_CALL_CLOSE, TOOL_CALL_OPEN};
use super::fields::{content_text, list_or_json_string, tagged_object};
use super::{tools, Repairs, Row};
use crate::conversation::{py_trim, Conversation, Message};
use crate::reject::{Reject, RejectReason, Repair};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Default)]
pub struct HermesAdapter;

impl HermesAdapter {
    pub fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        let turns = list_or_json_string(row, "conversations", repairs)?.ok_or_else(|| {
            Reject::new(
                RejectReason::MissingField,
                "field `conversations` is missing",
            )
        })?;
        // `tools` is a JSON string by definition in this dataset: parsing it is no repair.
        let column = list_or_json_string(row, "tools", &mut Repairs::new())
            .map_err(|r| Reject::new(RejectReason::InvalidTools, r.message))?;
        let mut tool_list = Vec::new();
        for (i, t) in column.unwrap_or_default().into_iter().enumerate() {
            tool_list.push(tools::normalize(t, &format!("tools[{i}]"), repairs)?);
        }
        let mut messages = Vec::with_capacity(turns.len());
        for (i, turn) in turns.iter().enumerate() {
            let field = format!("conversations[{i}]");
            let (turn, from) = tagged_object(turn, &field, "turn", "from")?;
            let value_field = format!("{field}.value");
            let value = content_text(turn.get("value"), &value_field, repairs)?;
            match from {
                // With a `tools` column the prompt's own list is not read (the column wins),
                // but the prompt is still the tool boilerplate and is dropped.
                "system" if !tool_list.is_empty() && tools_block(&value).is_some() => {}
                "system" => match system_tools(&value, &value_field, repairs)? {
                    Some(found) => tool_list = found,
                    None => messages.push(Message::system(value)),
                },
                "human" => messages.push(Message::user(value)),
                "gpt" => messages.push(assistant(&value, &value_field, repairs)?),
                "tool" => messages.extend(tool_responses(&value).into_iter().map(Message::tool)),
                other => {
                    return Err(Reject::new(
                        RejectReason::UnknownRole,
                        format!("`{field}.from` is `{other}`; expected system, human, gpt or tool"),
                    ))
                }
            }
        }
        tools::finish(tool_list, messages, repairs)
    }

    pub fn metadata(&self, row: &Row) -> Map<String, Value> {
        super::scalar_fields(row, &["id", "category", "subcategory", "task"])
    }
}

/// The `<tools>` block of a system prompt: its start and its body. Prompts mention the tags in
/// prose first ("signatures within <tools> </tools> XML tags"), so the block is the first
/// `<tools>` with a non-empty body.
pub fn tools_block(text: &str) -> Option<(usize, &str)> {
    let mut first = None;
    for (start, _) in text.match_indices("<tools>") {
        let body = &text[start + "<tools>".len()..];
        let body = body.find("</tools>").map_or(body, |end| &body[..end]);
        if !py_trim(body).is_empty() {
            return Some((start, body));
        }
        first.get_or_insert((start, body));
    }
    first
}

/// The tools of a system prompt's `<tools>` block, normalized; `None` when it has no block.
pub fn system_tools(
    text: &str,
    field: &str,
    repairs: &mut Repairs,
) -> Result<Option<Vec<Value>>, Reject> {
    let Some((_, body)) = tools_block(text) else {
        return Ok(None);
    };
    let items =
        tools::parse_list_text(body, &format!("{field} <tools>"), repairs)?.ok_or_else(|| {
            Reject::new(
                RejectReason::InvalidTools,
                format!("`{field}`: the `<tools>` block is neither JSON nor a Python literal"),
            )
        })?;
    items
        .into_iter()
        .enumerate()
        .map(|(i, t)| tools::normalize(t, &format!("{field} <tools>[{i}]"), repairs))
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// A `gpt` turn: the text before the first `<tool_call>`, then the calls.
fn assistant(value: &str, field: &str, repairs: &mut Repairs) -> Result<Message, Reject> {
    let fixed;
    let mut value = value;
    if value.contains("\\n") && value.contains(TOOL_CALL_OPEN) {
        let replaced = value
            .replace(
                &format!("\\n{TOOL_CALL_OPEN}"),
                &format!("\n{TOOL_CALL_OPEN}"),
            )
            .replace(
                &format!("{TOOL_CALL_OPEN}\\n"),
                &format!("{TOOL_CALL_OPEN}\n"),
            )
            .replace(
                &format!("\\n{TOOL_CALL_CLOSE}"),
                &format!("\n{TOOL_CALL_CLOSE}"),
            )
            .replace(
                &format!("{TOOL_CALL_CLOSE}\\n"),
                &format!("{TOOL_CALL_CLOSE}\n"),
            );
        if replaced != value {
            repairs.push(Repair::LiteralNewlinesReplaced);
            fixed = replaced;
            value = &fixed;
        }
    }
    assistant_with_tool_calls(value, field, repairs)
}

impl super::Format for HermesAdapter {
    fn configure(_: &super::Settings) -> Self {
        HermesAdapter
    }

    fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        HermesAdapter::adapt(self, row, repairs)
    }

    fn metadata(&self, row: &Row) -> serde_json::Map<String, serde_json::Value> {
        HermesAdapter::metadata(self, row)
    }
}
