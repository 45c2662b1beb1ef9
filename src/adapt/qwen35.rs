//! `qwen35_fc`: Mustafaege/qwen3.5-functioncalling-v2 rows `{"messages": [{"role",
//! "content"}]}` (a list, or a JSON string of one). The card describes plain role/content
//! messages: tool schemas in the system text, calls in the assistant text, function responses
//! as user turns. No raw row was available, so the adapter accepts every syntax the card and
//! its Glaive parent make plausible:
//!
//! - **system**: a `<tools>...</tools>` block (JSON array, one JSON object per line, or a
//!   Python literal). The prompt around it is tool boilerplate for another call format: the
//!   text before a `# Tools` heading is kept (Qwen's own layout), the rest dropped; with no
//!   heading the whole prompt is dropped (Hermes layout). Or the Glaive layout: a preamble then
//!   pretty-printed JSON objects; the two Glaive boilerplate sentences are dropped, other prose
//!   kept. A leading `SYSTEM: ` is removed. A system prompt with neither is kept verbatim.
//! - **assistant**: text, then calls as `<tool_call>` blocks (JSON, Python literal, or the
//!   Qwen3.5 `<function=...><parameter=...>` XML) or Glaive `<functioncall>` syntax (with all of
//!   the `glaive` adapter's call rules). A trailing `<|endoftext|>` is removed.
//! - **user**: a user message right after an assistant turn with unanswered calls is that
//!   call's function response (a `FUNCTION RESPONSE: ` prefix and `<tool_response>` tags are
//!   removed); a `FUNCTION RESPONSE: ` message with no call waiting is rejected as an orphan.
//!   Other user messages stay user turns. `tool` / `function` roles are tool responses too.
//!
//! | outcome | code | when |
//! |---|---|---|
//! | repair | `stray_marker_removed` | `SYSTEM: ` prefix or trailing `<|endoftext|>` left from Glaive |
//! | repair | `tool_call_ids_synthesized`, `duplicate_tool_dropped`, `python_literal_parsed`, `tool_arguments_parsed`, `arguments_key_renamed`, ... | as in `glaive` / `hermes` |
//! | reject | `invalid_tool_call` / `invalid_tool_arguments` | a call that cannot be parsed / arguments that are not an object |
//! | reject | `invalid_tools` | a `<tools>` block that cannot be read |
//! | reject | `undeclared_tool` | a call to a function the system prompt does not declare |
//! | reject | `orphan_tool_response` | a function response with no call waiting |
//! | reject | `unknown_role` | a role other than system, user, assistant, tool, function |

use super::calls::{assistant_with_tool_calls, tool_responses};
use super::fields::{content_text, list_or_json_string, message_role};
use super::{glaive, hermes, tools, Repairs, Row};
use crate::conversation::{py_trim, Conversation, Message, Role};
use crate::reject::{Reject, RejectReason, Repair};
use serde_json::Value;

const FUNCTION_RESPONSE: &str = "FUNCTION RESPONSE:";

#[derive(Debug, Clone, Default)]
pub struct Qwen35FcAdapter;

impl Qwen35FcAdapter {
    pub fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        let raw = list_or_json_string(row, "messages", repairs)?.ok_or_else(|| {
            Reject::new(RejectReason::MissingField, "field `messages` is missing")
        })?;
        let mut tool_list = Vec::new();
        let mut messages: Vec<Message> = Vec::with_capacity(raw.len());
        for (i, m) in raw.iter().enumerate() {
            let field = format!("messages[{i}]");
            let (m, role) = message_role(m, &field)?;
            let content_field = format!("{field}.content");
            let content = content_text(m.get("content"), &content_field, repairs)?;
            match role {
                "system" => {
                    let (prose, found) = system(&content, &content_field, repairs)?;
                    tool_list.extend(found);
                    if let Some(prose) = prose {
                        messages.push(Message::system(prose));
                    }
                }
                "user" => {
                    let trimmed = py_trim(&content);
                    let prefixed = trimmed.strip_prefix(FUNCTION_RESPONSE);
                    if unanswered_calls(&messages) > 0 || prefixed.is_some() {
                        let body = prefixed.unwrap_or(trimmed);
                        messages.extend(tool_responses(body).into_iter().map(Message::tool));
                    } else {
                        messages.push(Message::user(content));
                    }
                }
                "assistant" => messages.push(assistant(&content, &content_field, repairs)?),
                "tool" | "function" => messages.push(Message::tool(content)),
                other => {
                    return Err(Reject::new(
                        RejectReason::UnknownRole,
                        format!(
                            "`{field}.role` is `{other}`; expected system, user, assistant or tool"
                        ),
                    ))
                }
            }
        }
        tools::finish(tool_list, messages, repairs)
    }
}

/// Calls of the last assistant turn not yet answered by the tool messages after it.
fn unanswered_calls(messages: &[Message]) -> usize {
    let answered = messages
        .iter()
        .rev()
        .take_while(|m| m.role == Role::Tool)
        .count();
    let before = &messages[..messages.len() - answered];
    match before.last() {
        Some(m) if m.role == Role::Assistant => m.tool_calls.len().saturating_sub(answered),
        _ => 0,
    }
}

/// The system prompt to keep (if any) and the tools it declares.
fn system(
    content: &str,
    field: &str,
    repairs: &mut Repairs,
) -> Result<(Option<String>, Vec<Value>), Reject> {
    let mut text = content;
    if let Some(rest) = py_trim(text).strip_prefix("SYSTEM:") {
        text = rest;
        repairs.push(Repair::StrayMarkerRemoved);
    }
    if let Some(found) = hermes::system_tools(text, field, repairs)? {
        let tools_at = hermes::tools_block(text).map_or(text.len(), |(start, _)| start);
        let prose = text[..tools_at]
            .find("# Tools")
            .map(|heading| py_trim(&text[..heading]))
            .filter(|p| !p.is_empty())
            .map(str::to_owned);
        return Ok((prose, found));
    }
    match glaive::parse_system(text) {
        Ok(parsed) => Ok(parsed),
        // A `{` line that is not a tool list (an example in the prompt, say): keep the text.
        Err(_) => Ok((Some(content.to_owned()), Vec::new())),
    }
}

fn assistant(content: &str, field: &str, repairs: &mut Repairs) -> Result<Message, Reject> {
    let mut text = py_trim(content);
    if let Some(rest) = text.strip_suffix("<|endoftext|>") {
        text = py_trim(rest);
        repairs.push(Repair::StrayMarkerRemoved);
    }
    let glaive_call =
        text.contains("<functioncall>") || text.starts_with("AI to=") || text.contains("\nAI to=");
    if glaive_call {
        return glaive::assistant(text, repairs);
    }
    assistant_with_tool_calls(text, field, repairs)
}

impl super::Format for Qwen35FcAdapter {
    fn configure(_: &super::Settings) -> Self {
        Qwen35FcAdapter
    }

    fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        Qwen35FcAdapter::adapt(self, row, repairs)
    }
}
