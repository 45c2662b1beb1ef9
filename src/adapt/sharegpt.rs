//! `sharegpt`: `{"conversations": [{"from", "value"}], "system", "tools"}` with LLaMA-Factory
//! tag names. `function_call` turns (a JSON call object or list of them) become assistant tool
//! calls, merged into the assistant turn right before them; `observation` turns become tool
//! responses. Bare function schemas in `tools` are wrapped as OpenAI tool objects, the shape
//! inference servers render.

use super::fields::{arguments_object, content_parts, kind, list_or_json_string, optional_str};
use super::{Repairs, Row};
use crate::conversation::{Conversation, Message, Role, ToolCall};
use crate::reject::{Reject, RejectReason, Repair};
use serde_json::{Map, Value};
use std::borrow::Cow;

#[derive(Debug, Clone)]
pub struct ShareGptAdapter {
    pub conversations: String,
    pub system: String,
    pub tools: String,
    pub role_tag: String,
    pub content_tag: String,
    pub user_tag: String,
    pub assistant_tag: String,
    pub system_tag: String,
    pub observation_tag: String,
    pub function_tag: String,
}

impl Default for ShareGptAdapter {
    fn default() -> Self {
        ShareGptAdapter {
            conversations: "conversations".into(),
            system: "system".into(),
            tools: "tools".into(),
            role_tag: "from".into(),
            content_tag: "value".into(),
            user_tag: "human".into(),
            assistant_tag: "gpt".into(),
            system_tag: "system".into(),
            observation_tag: "observation".into(),
            function_tag: "function_call".into(),
        }
    }
}

impl ShareGptAdapter {
    pub fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        let turns = list_or_json_string(row, &self.conversations, repairs)?.ok_or_else(|| {
            Reject::new(
                RejectReason::MissingField,
                format!("field `{}` is missing", self.conversations),
            )
        })?;
        let mut messages: Vec<Message> = Vec::with_capacity(turns.len() + 1);
        if let Some(system) = optional_str(row, &self.system)? {
            if !system.is_empty() {
                messages.push(Message::system(system));
            }
        }
        for (i, turn) in turns.iter().enumerate() {
            let field = format!("{}[{i}]", self.conversations);
            let Value::Object(turn) = turn else {
                return Err(Reject::new(
                    RejectReason::InvalidField,
                    format!("`{field}` is a {}, expected a turn object", kind(turn)),
                ));
            };
            self.turn(turn, &field, &mut messages, repairs)?;
        }
        let mut tools = super::openai::tools(row, &self.tools, repairs)?;
        if tools.iter().any(is_bare_function) {
            tools = tools
                .into_iter()
                .map(|t| {
                    if is_bare_function(&t) {
                        let mut o = Map::new();
                        o.insert("type".into(), Value::String("function".into()));
                        o.insert("function".into(), t);
                        Value::Object(o)
                    } else {
                        t
                    }
                })
                .collect();
            repairs.push(Repair::ToolsWrapped);
        }
        Ok(Conversation { messages, tools })
    }

    fn turn(
        &self,
        turn: &Map<String, Value>,
        field: &str,
        messages: &mut Vec<Message>,
        repairs: &mut Repairs,
    ) -> Result<(), Reject> {
        let tag = optional_str(turn, &self.role_tag)?.ok_or_else(|| {
            Reject::new(
                RejectReason::MissingField,
                format!("`{field}.{}` is missing", self.role_tag),
            )
        })?;
        let value_field = format!("{field}.{}", self.content_tag);
        if tag == self.function_tag {
            let calls = function_calls(turn.get(&self.content_tag), &value_field, repairs)?;
            match messages.last_mut() {
                Some(m) if m.role == Role::Assistant && m.tool_calls.is_empty() => {
                    m.tool_calls = calls
                }
                _ => messages.push(Message::assistant("").with_tool_calls(calls)),
            }
            return Ok(());
        }
        let (content, part_breaks) =
            content_parts(turn.get(&self.content_tag), &value_field, repairs)?;
        let mut message = if tag == self.user_tag {
            Message::user(content)
        } else if tag == self.assistant_tag {
            let reasoning = optional_str(turn, "reasoning_content")?.map(str::to_owned);
            Message::assistant(content).with_reasoning(reasoning)
        } else if tag == self.system_tag {
            Message::system(content)
        } else if tag == self.observation_tag {
            let mut m = Message::tool(content);
            m.name = optional_str(turn, "name")?.map(str::to_owned);
            m.tool_call_id = optional_str(turn, "tool_call_id")?.map(str::to_owned);
            m
        } else {
            return Err(Reject::new(
                RejectReason::UnknownRole,
                format!(
                    "`{field}.{}` is `{tag}`; expected one of `{}`, `{}`, `{}`, `{}`, `{}`",
                    self.role_tag,
                    self.user_tag,
                    self.assistant_tag,
                    self.system_tag,
                    self.function_tag,
                    self.observation_tag
                ),
            ));
        };
        message.part_breaks = part_breaks;
        messages.push(message);
        Ok(())
    }
}

fn is_bare_function(tool: &Value) -> bool {
    tool.get("name").is_some() && tool.get("function").is_none()
}

/// A `function_call` value: a JSON object `{"name", "arguments"}` or a list of them, as a
/// string (LLaMA-Factory) or already parsed.
fn function_calls(
    value: Option<&Value>,
    field: &str,
    repairs: &mut Repairs,
) -> Result<Vec<ToolCall>, Reject> {
    let parsed;
    let value = match value {
        Some(Value::String(s)) => {
            parsed = super::fields::embedded_json(s, field)?.map_err(|e| {
                Reject::new(
                    RejectReason::InvalidToolArguments,
                    format!("`{field}` is not a valid JSON function call: {e}"),
                )
            })?;
            &parsed
        }
        Some(v) => v,
        None => {
            return Err(Reject::new(
                RejectReason::MissingField,
                format!("`{field}` is missing"),
            ))
        }
    };
    let calls: Vec<&Value> = match value {
        Value::Array(a) => a.iter().collect(),
        v => vec![v],
    };
    calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let Value::Object(o) = c else {
                return Err(Reject::new(
                    RejectReason::InvalidToolArguments,
                    format!("`{field}`[{i}] is a {}, expected a call object", kind(c)),
                ));
            };
            let name = o.get("name").and_then(Value::as_str).ok_or_else(|| {
                Reject::new(
                    RejectReason::InvalidToolArguments,
                    format!("`{field}`[{i}] has no string `name`"),
                )
            })?;
            Ok(ToolCall {
                id: o.get("id").and_then(Value::as_str).map(str::to_owned),
                name: name.to_owned(),
                arguments: arguments_object(
                    o.get("arguments"),
                    &format!("{field}[{i}].arguments"),
                    repairs,
                )?,
            })
        })
        .collect()
}

/// The normalized ShareGPT record written next to the shards: LLaMA-Factory's superset, which
/// this adapter (with default tags) reads back into the same conversation.
///
/// - the first system message → `system`; tools → `tools` as a JSON string;
/// - user → `human`; tool responses → `observation` (with `name` / `tool_call_id` kept);
/// - an assistant turn → `gpt` (with `reasoning_content` when present), followed by a
///   `function_call` turn holding its calls as a JSON list of `{"name", "arguments"}` objects;
///   the `gpt` turn is omitted when it has no content, no reasoning and has calls.
pub fn to_sharegpt_record<'a>(
    conversation: &'a Conversation,
    id: &'a str,
    source: &'a str,
) -> ShareGptRecord<'a> {
    let mut messages = conversation.messages.as_slice();
    let mut system = None;
    if let Some((first, rest)) = messages.split_first() {
        if first.role == Role::System {
            system = Some(first.content.as_str());
            messages = rest;
        }
    }
    let tools = (!conversation.tools.is_empty()).then(|| json_string(&conversation.tools));
    let turn = |from: &'static str, value: &'a str| Turn {
        from,
        value: Cow::Borrowed(value),
        name: None,
        tool_call_id: None,
        reasoning_content: None,
    };
    let mut conversations = Vec::with_capacity(messages.len());
    for m in messages {
        match m.role {
            Role::System => conversations.push(turn("system", &m.content)),
            Role::User => conversations.push(turn("human", &m.content)),
            Role::Tool => conversations.push(Turn {
                name: m.name.as_deref(),
                tool_call_id: m.tool_call_id.as_deref(),
                ..turn("observation", &m.content)
            }),
            Role::Assistant => {
                if !m.content.is_empty() || m.reasoning.is_some() || m.tool_calls.is_empty() {
                    conversations.push(Turn {
                        reasoning_content: m.reasoning.as_deref(),
                        ..turn("gpt", &m.content)
                    });
                }
                if !m.tool_calls.is_empty() {
                    conversations.push(Turn {
                        value: Cow::Owned(json_string(&m.tool_calls)),
                        ..turn("function_call", "")
                    });
                }
            }
        }
    }
    ShareGptRecord {
        id,
        source,
        system,
        tools,
        conversations,
        meta: None,
    }
}

/// A record of `conversations.jsonl`, borrowing from its conversation; serialize it with
/// `serde_json`. Keys come out in this order.
#[derive(Debug, serde::Serialize)]
pub struct ShareGptRecord<'a> {
    pub id: &'a str,
    pub source: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<String>,
    pub conversations: Vec<Turn<'a>>,
    /// Source-specific metadata (`chatshards normalize`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

#[derive(Debug, serde::Serialize)]
pub struct Turn<'a> {
    pub from: &'static str,
    pub value: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<&'a str>,
}

/// Compact JSON of plain data (strings, maps, JSON values), which cannot fail to serialize.
fn json_string(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

impl ShareGptRecord<'_> {
    /// The record as one line of compact JSON with its newline.
    pub fn json_line(&self) -> String {
        let mut line = json_string(self);
        line.push('\n');
        line
    }
}

impl super::Format for ShareGptAdapter {
    const READS: super::Reads = super::Reads {
        columns: &[
            super::Column::Messages,
            super::Column::Tools,
            super::Column::System,
        ],
        tags: true,
        resolved_only: false,
    };

    fn configure(settings: &super::Settings) -> Self {
        let mut a = ShareGptAdapter::default();
        settings.column(super::Column::Messages, &mut a.conversations);
        settings.column(super::Column::Tools, &mut a.tools);
        settings.column(super::Column::System, &mut a.system);
        let (t, pick) = (settings.tags, |v: &Option<String>, out: &mut String| {
            if let Some(v) = v {
                out.clone_from(v);
            }
        });
        pick(&t.role_tag, &mut a.role_tag);
        pick(&t.content_tag, &mut a.content_tag);
        pick(&t.user_tag, &mut a.user_tag);
        pick(&t.assistant_tag, &mut a.assistant_tag);
        pick(&t.system_tag, &mut a.system_tag);
        pick(&t.observation_tag, &mut a.observation_tag);
        pick(&t.function_tag, &mut a.function_tag);
        a
    }

    fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        ShareGptAdapter::adapt(self, row, repairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of a `conversations.jsonl` line: compact, fields in order, absent ones
    /// left out, `"`, `\` and control characters escaped (`\b \t \n \f \r` short, the others
    /// `\u00XX`), everything else (DEL, U+2028, any other character) written as is.
    #[test]
    fn json_line_writes_these_exact_bytes() {
        let mut meta = Map::new();
        meta.insert("k".into(), Value::from("v\n\"x\""));
        let record = ShareGptRecord {
            id: "s:0:1",
            source: "src \"q\"",
            system: Some("sys\tprompt"),
            tools: Some("[{\"type\":\"function\"}]".into()),
            conversations: vec![
                Turn {
                    from: "human",
                    value: Cow::Borrowed("hi\u{1}\"q\" \\b\\ \u{7f}\u{1f}\u{0}\t\r\n\u{8}\u{c}"),
                    name: None,
                    tool_call_id: None,
                    reasoning_content: None,
                },
                Turn {
                    from: "gpt",
                    value: Cow::Owned("日本語 — 🦀\u{2028}\u{2029}é".into()),
                    name: None,
                    tool_call_id: None,
                    reasoning_content: Some("think\\"),
                },
                Turn {
                    from: "observation",
                    value: Cow::Borrowed("{}"),
                    name: Some("f"),
                    tool_call_id: Some("call_1"),
                    reasoning_content: None,
                },
            ],
            meta: Some(meta),
        };
        let want = concat!(
            r#"{"id":"s:0:1","source":"src \"q\"","system":"sys\tprompt","#,
            r#""tools":"[{\"type\":\"function\"}]","conversations":["#,
            r#"{"from":"human","value":"hi\u0001\"q\" \\b\\ "#,
            "\u{7f}",
            r#"\u001f\u0000\t\r\n\b\f"},"#,
            r#"{"from":"gpt","value":"日本語 — 🦀"#,
            "\u{2028}\u{2029}",
            r#"é","reasoning_content":"think\\"},"#,
            r#"{"from":"observation","value":"{}","name":"f","tool_call_id":"call_1"}],"#,
            r#""meta":{"k":"v\n\"x\""}}"#,
            "\n"
        );
        assert_eq!(record.json_line(), want);
        let bare = ShareGptRecord {
            system: None,
            tools: None,
            meta: None,
            conversations: vec![],
            ..record
        };
        assert_eq!(
            bare.json_line(),
            "{\"id\":\"s:0:1\",\"source\":\"src \\\"q\\\"\",\"conversations\":[]}\n"
        );
    }
}
