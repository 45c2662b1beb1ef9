//! `openai`: `{"messages": [{"role", "content", "tool_calls", "reasoning_content", ...}], "tools": [...]}`.
//! Tools are kept exactly as given (they are what the template renders).

use super::fields::{
    content_text, kind, list_or_json_string, message_role, optional_str, tool_call,
};
use super::{Repairs, Row};
use crate::conversation::{Conversation, Message, Role};
use crate::reject::{Reject, RejectReason};
use serde_json::Value;

#[derive(Debug, Clone)]
pub struct OpenAiAdapter {
    pub messages: String,
    pub tools: String,
}

impl Default for OpenAiAdapter {
    fn default() -> Self {
        OpenAiAdapter {
            messages: "messages".into(),
            tools: "tools".into(),
        }
    }
}

impl OpenAiAdapter {
    pub fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        let raw = list_or_json_string(row, &self.messages, repairs)?.ok_or_else(|| {
            Reject::new(
                RejectReason::MissingField,
                format!("field `{}` is missing", self.messages),
            )
        })?;
        let mut messages = Vec::with_capacity(raw.len());
        for (i, m) in raw.iter().enumerate() {
            messages.push(message(m, &format!("{}[{i}]", self.messages), repairs)?);
        }
        let tools = tools(row, &self.tools, repairs)?;
        Ok(Conversation { messages, tools })
    }
}

/// Tools column: a list (or JSON string of a list) of objects.
pub(super) fn tools(row: &Row, field: &str, repairs: &mut Repairs) -> Result<Vec<Value>, Reject> {
    let tools = list_or_json_string(row, field, repairs)?.unwrap_or_default();
    for (i, t) in tools.iter().enumerate() {
        if !t.is_object() {
            return Err(Reject::new(
                RejectReason::InvalidField,
                format!("`{field}[{i}]` is a {}, expected a tool object", kind(t)),
            ));
        }
    }
    Ok(tools)
}

fn message(value: &Value, field: &str, repairs: &mut Repairs) -> Result<Message, Reject> {
    let (m, role) = message_role(value, field)?;
    let role = parse_role(role).ok_or_else(|| {
        Reject::new(
            RejectReason::UnknownRole,
            format!("`{field}.role` is `{role}`; expected system, user, assistant or tool"),
        )
    })?;
    let content = content_text(m.get("content"), &format!("{field}.content"), repairs)?;
    let mut message = Message::new(role, content);
    match role {
        Role::Assistant => {
            for key in ["reasoning_content", "reasoning", "thinking"] {
                if let Some(r) = optional_str(m, key)? {
                    message.reasoning = Some(r.to_owned());
                    break;
                }
            }
            match m.get("tool_calls") {
                None | Some(Value::Null) => {}
                Some(Value::Array(calls)) => {
                    for (i, c) in calls.iter().enumerate() {
                        message.tool_calls.push(tool_call(
                            c,
                            &format!("{field}.tool_calls[{i}]"),
                            repairs,
                        )?);
                    }
                }
                Some(other) => {
                    return Err(Reject::new(
                        RejectReason::InvalidField,
                        format!("`{field}.tool_calls` is a {}, expected a list", kind(other)),
                    ))
                }
            }
        }
        Role::Tool => {
            message.name = optional_str(m, "name")?.map(str::to_owned);
            message.tool_call_id = optional_str(m, "tool_call_id")?.map(str::to_owned);
        }
        Role::System | Role::User => {}
    }
    Ok(message)
}

pub(super) fn parse_role(role: &str) -> Option<Role> {
    match role {
        "system" => Some(Role::System),
        "user" => Some(Role::User),
        "assistant" => Some(Role::Assistant),
        "tool" => Some(Role::Tool),
        _ => None,
    }
}
