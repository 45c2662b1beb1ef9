//! The one conversation type that flows from the adapters to the renderer.
//!
//! Every source format is adapted into [`Conversation`]; every later stage (validate, curate,
//! render, normalized ShareGPT output) reads only this type. It is shaped like the OpenAI chat
//! format the chat templates expect, with the states the strict Qwen3.x templates reject made
//! unrepresentable where that is cheap: tool-call arguments are always a JSON object, roles are a
//! closed set, and content is plain text (text parts are concatenated, which renders identically).

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A chat as the template sees it: ordered messages plus the tool schemas offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Conversation {
    pub messages: Vec<Message>,
    /// OpenAI tool objects (`{"type": "function", "function": {...}}`), in declaration order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Value>,
}

/// The four roles every ChatML template knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One turn. `reasoning` and `tool_calls` are only meaningful on assistant turns; the
/// constructors below are the intended way to build messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// Assistant reasoning (`reasoning_content`). `None` lets the template look for an inline
    /// `<think>` block in `content`; `Some("")` is distinct and kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Tool name on a tool response (not rendered by Qwen templates; kept for the ShareGPT output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Content given as a list of text parts: where each part after the first begins in
    /// `content` (the parts joined with no separator) until [`Conversation::join_text_parts`]
    /// joins them as the template expects. Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub part_breaks: Vec<usize>,
}

impl Message {
    /// A message with only a role and content.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            reasoning: None,
            tool_calls: Vec::new(),
            name: None,
            tool_call_id: None,
            part_breaks: Vec::new(),
        }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }
    pub fn tool(content: impl Into<String>) -> Self {
        Self::new(Role::Tool, content)
    }
    pub fn with_reasoning(mut self, reasoning: Option<String>) -> Self {
        self.reasoning = reasoning;
        self
    }
    pub fn with_tool_calls(mut self, tool_calls: Vec<ToolCall>) -> Self {
        self.tool_calls = tool_calls;
        self
    }
}

/// A function call made by the assistant. Arguments are always a JSON object: the Qwen3.5/3.6
/// templates iterate them with `|items`, so a string or a list cannot be rendered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub name: String,
    pub arguments: IndexMap<String, Value>,
}

impl Conversation {
    /// Indices of user messages that are real queries: the Qwen3.x templates skip user turns
    /// whose trimmed content is only a wrapped `<tool_response>` block.
    pub fn query_indices(&self) -> Vec<usize> {
        self.messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == Role::User && is_real_query(&m.content))
            .map(|(i, _)| i)
            .collect()
    }

    /// The JSON object handed to the chat template as `messages` (and `tools`).
    /// Joins the text parts of every message given as a list of them with `separator` (see
    /// `Renderer::text_part_separator`): content then holds exactly what the template renders.
    pub fn join_text_parts(&mut self, separator: &str) {
        for m in &mut self.messages {
            let breaks = std::mem::take(&mut m.part_breaks);
            if separator.is_empty() || breaks.is_empty() {
                continue;
            }
            let mut joined =
                String::with_capacity(m.content.len() + breaks.len() * separator.len());
            let mut start = 0;
            for b in breaks {
                // Offsets recorded by the adapter; anything else (content edited since) is
                // left joined as it is.
                let Some(part) = m.content.get(start..b) else {
                    continue;
                };
                joined.push_str(part);
                joined.push_str(separator);
                start = b;
            }
            joined.push_str(&m.content[start..]);
            m.content = joined;
        }
    }

    /// Whether a message still has text parts to join ([`Self::join_text_parts`]).
    pub fn has_text_parts(&self) -> bool {
        self.messages.iter().any(|m| !m.part_breaks.is_empty())
    }

    pub fn to_template_messages(&self) -> Value {
        Value::Array(self.messages.iter().map(message_to_openai).collect())
    }

    /// Every string a tokenizer will see from this conversation (content, reasoning, tool names,
    /// argument keys and values, tool schemas), for checks such as special-token text.
    pub fn for_each_text(&self, f: &mut dyn FnMut(&str) -> bool) -> bool {
        for m in &self.messages {
            if !f(&m.content) {
                return false;
            }
            if let Some(r) = &m.reasoning {
                if !f(r) {
                    return false;
                }
            }
            for call in &m.tool_calls {
                if !f(&call.name) {
                    return false;
                }
                for (k, v) in &call.arguments {
                    if !f(k) || !visit_json_strings(v, f) {
                        return false;
                    }
                }
            }
        }
        self.tools.iter().all(|t| visit_json_strings(t, f))
    }
}

/// Python's `str.strip()` whitespace: Unicode White_Space plus the ASCII separators
/// U+001C..U+001F, which Rust's `char::is_whitespace` does not include.
pub fn is_py_whitespace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

pub fn py_trim(s: &str) -> &str {
    s.trim_matches(is_py_whitespace)
}

fn is_real_query(content: &str) -> bool {
    let t = py_trim(content);
    !(t.starts_with("<tool_response>") && t.ends_with("</tool_response>"))
}

fn visit_json_strings(v: &Value, f: &mut dyn FnMut(&str) -> bool) -> bool {
    match v {
        Value::String(s) => f(s),
        Value::Array(a) => a.iter().all(|x| visit_json_strings(x, f)),
        Value::Object(o) => o.iter().all(|(k, x)| f(k) && visit_json_strings(x, f)),
        _ => true,
    }
}

fn message_to_openai(m: &Message) -> Value {
    let mut o = Map::new();
    o.insert("role".into(), Value::String(m.role.as_str().into()));
    o.insert("content".into(), Value::String(m.content.clone()));
    if let Some(r) = &m.reasoning {
        o.insert("reasoning_content".into(), Value::String(r.clone()));
    }
    if !m.tool_calls.is_empty() {
        let calls = m
            .tool_calls
            .iter()
            .map(|c| {
                let mut function = Map::new();
                function.insert("name".into(), Value::String(c.name.clone()));
                function.insert(
                    "arguments".into(),
                    Value::Object(c.arguments.clone().into_iter().collect()),
                );
                let mut call = Map::new();
                if let Some(id) = &c.id {
                    call.insert("id".into(), Value::String(id.clone()));
                }
                call.insert("type".into(), Value::String("function".into()));
                call.insert("function".into(), Value::Object(function));
                Value::Object(call)
            })
            .collect();
        o.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(n) = &m.name {
        o.insert("name".into(), Value::String(n.clone()));
    }
    if let Some(id) = &m.tool_call_id {
        o.insert("tool_call_id".into(), Value::String(id.clone()));
    }
    Value::Object(o)
}
