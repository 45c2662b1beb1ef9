//! `glaive`: glaiveai/glaive-function-calling-v2 raw rows `{"system", "chat"}`.
//!
//! **`system`** is `SYSTEM: ` + one of two boilerplate sentences, the second followed by the
//! tool list as 4-space pretty-printed JSON objects separated by blank lines (a concatenated
//! JSON stream, not an array). The objects are bare `{name, description, parameters}` and
//! become OpenAI tool objects. Both boilerplate sentences are dropped (the template writes its
//! own tool preamble); any other prose before the list is kept as the system message.
//!
//! **`chat`** is a sequence of `USER: `, `ASSISTANT: ` and `FUNCTION RESPONSE: ` turns. A marker
//! starts a turn only at the start of the chat, after a blank line (`\n\n`, the separator is
//! `\n\n\n` or `\n\n`), or after an `<|endoftext|>`; the same words after a single newline are
//! content, so a stray `\nASSISTANT:` inside a user message does not make a phantom turn.
//! Every assistant turn's trailing `<|endoftext|>` (a training artifact) is stripped; content
//! is trimmed (the template trims it too).
//!
//! **Calls** are `<functioncall> {"name": "fn", "arguments": '<JSON text>'}`: the arguments
//! are a single-quoted string holding JSON, so the call is not JSON. A small parser reads the
//! object, parsing a single-quoted value as the JSON inside it (apostrophes and newlines inside
//! the JSON are fine); a real JSON object or a double-quoted JSON string also works.
//!
//! | outcome | code | when |
//! |---|---|---|
//! | repair | `tool_call_ids_synthesized` | always when there are calls: `call_0`, `call_1`, ...; each FUNCTION RESPONSE answers the call before it |
//! | repair | `arguments_key_renamed` | `"parameters"` instead of `"arguments"` (row 81082) |
//! | repair | `quoted_arguments_unescaped` | `\'` inside the quoted arguments (row 71039) |
//! | repair | `legacy_call_syntax_parsed` | `AI to= name: {...}` (row 17357) read as a call |
//! | repair | `stray_marker_removed` | `ASSISTANT:` left right before a `<functioncall>` (a call split inside one turn) |
//! | repair | `consecutive_turns_merged` | consecutive USER turns (joined by a blank line); an ASSISTANT turn without calls followed by another ASSISTANT turn (text joined, the second turn's calls kept) |
//! | repair | `duplicate_turn_dropped` | an ASSISTANT turn identical to the one before (repeated calls) |
//! | repair | `empty_turns_dropped` | USER or ASSISTANT turns with no text and no call |
//! | repair | `duplicate_tool_dropped` | a function declared twice (351 rows): the first definition that accepts every argument the row's calls pass, else the first |
//! | repair | `tool_arguments_parsed` | `"arguments"` given as a double-quoted JSON string |
//! | (validator) | `trailing_turns_dropped` | a trailing USER turn with no reply (1,599 rows) |
//! | reject | `invalid_tools` | the function list is not a stream of JSON objects with names |
//! | reject | `invalid_tool_call` | a malformed, truncated or over-closed call, or text after a call in the same turn |
//! | reject | `invalid_tool_arguments` | arguments that are not a JSON object: `Infinity` (row 26684), placeholders (row 65421), arrays |
//! | reject | `undeclared_tool` | a call to a function the row does not declare (row 3871: `create_to_do_list` vs `create_to-do_list`) |
//! | reject | `orphan_tool_response` | a FUNCTION RESPONSE with no call waiting for it |
//! | reject | `stray_role_marker` | a line starting with `USER:` / `ASSISTANT:` / `FUNCTION RESPONSE:` inside an assistant turn (it would be trained as model text) |
//! | reject | `invalid_field` | `chat` has text before its first marker |
//! | reject | `missing_field` / `invalid_field` | `system` or `chat` absent or not a string |

use super::calls::{call_from_value, invalid_call, preview};
use super::fields::{embedded_json, required_str};
use super::{tools, Repairs, Row};
use crate::conversation::{py_trim, Conversation, Message, Role, ToolCall};
use crate::model::json_exact;
use crate::reject::{Reject, RejectReason, Repair};
use serde_json::{Map, Value};

/// The two fixed system sentences of the dataset, dropped in favour of the template's own.
pub const BOILERPLATE: [&str; 2] = [
    "You are a helpful assistant, with no access to external functions.",
    "You are a helpful assistant with access to the following functions. Use them if required -",
];

const END_OF_TEXT: &str = "<|endoftext|>";
const FUNCTION_CALL: &str = "<functioncall>";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    User,
    Assistant,
    FunctionResponse,
}

const MARKERS: [(&str, Marker); 3] = [
    ("USER:", Marker::User),
    ("ASSISTANT:", Marker::Assistant),
    ("FUNCTION RESPONSE:", Marker::FunctionResponse),
];

#[derive(Debug, Clone, Default)]
pub struct GlaiveAdapter;

impl GlaiveAdapter {
    pub fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        let system = required_str(row, "system")?;
        let chat = required_str(row, "chat")?;
        let (prose, tool_list) = parse_system(system)?;
        let mut messages = Vec::new();
        if let Some(prose) = prose {
            messages.push(Message::system(prose));
        }
        for (marker, text) in split_turns(chat)? {
            match marker {
                Marker::User => push_user(&mut messages, text, repairs),
                Marker::FunctionResponse => messages.push(Message::tool(text)),
                Marker::Assistant => {
                    let message = assistant(text, repairs)?;
                    push_assistant(&mut messages, message, repairs);
                }
            }
        }
        tools::finish(tool_list, messages, repairs)
    }
}

/// Splits `system` into the prose to keep (if any) and the tool list.
pub fn parse_system(system: &str) -> Result<(Option<String>, Vec<Value>), Reject> {
    let text = system.strip_prefix("SYSTEM:").unwrap_or(system);
    let list_start = text
        .match_indices('{')
        .map(|(i, _)| i)
        .find(|&i| i == 0 || text[..i].ends_with('\n'));
    let (prose, list) = match list_start {
        Some(i) => (&text[..i], &text[i..]),
        None => (text, ""),
    };
    let mut tool_list = Vec::new();
    for (i, item) in json_exact::stream(list).enumerate() {
        let field = format!("system: function {i}");
        let item = item.map_err(|e| {
            e.out_of_range(&field).unwrap_or_else(|| {
                Reject::new(
                    RejectReason::InvalidTools,
                    format!(
                        "field `system`: the function list is not a sequence of JSON objects ({e})"
                    ),
                )
            })
        })?;
        // Glaive's schemas are plain JSON objects: nothing here is a repair worth counting.
        tool_list.push(tools::normalize(item, &field, &mut Repairs::new())?);
    }
    let prose = py_trim(prose);
    let prose = (!prose.is_empty() && !BOILERPLATE.contains(&prose)).then(|| prose.to_owned());
    Ok((prose, tool_list))
}

/// The turns of `chat`, each with its trimmed text (marker removed).
fn split_turns(chat: &str) -> Result<Vec<(Marker, &str)>, Reject> {
    let bytes = chat.as_bytes();
    // Positions where a marker may start a turn: the first non-space character, the end of
    // every run of two or more newlines, and the first non-space after `<|endoftext|>`.
    let mut candidates = Vec::new();
    let skip_ws = |mut i: usize| {
        while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        i
    };
    candidates.push(skip_ws(0));
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\n' {
            let start = i;
            while bytes.get(i) == Some(&b'\n') {
                i += 1;
            }
            if i - start >= 2 {
                candidates.push(i);
            }
        } else {
            i += 1;
        }
    }
    candidates.extend(
        chat.match_indices(END_OF_TEXT)
            .map(|(i, _)| skip_ws(i + END_OF_TEXT.len())),
    );
    candidates.sort_unstable();
    candidates.dedup();
    let starts: Vec<(usize, Marker, usize)> = candidates
        .into_iter()
        .filter_map(|c| {
            let rest = chat.get(c..)?;
            MARKERS
                .iter()
                .find(|(m, _)| rest.starts_with(m))
                .map(|(m, marker)| (c, *marker, c + m.len()))
        })
        .collect();
    let first = starts.first().map_or(chat.len(), |s| s.0);
    if !py_trim(&chat[..first]).is_empty() {
        return Err(Reject::new(
            RejectReason::InvalidField,
            format!(
                "field `chat` does not start with a role marker: {}",
                preview(&chat[..first])
            ),
        ));
    }
    Ok(starts
        .iter()
        .enumerate()
        .map(|(k, &(_, marker, content))| {
            let end = starts.get(k + 1).map_or(chat.len(), |s| s.0);
            (marker, py_trim(&chat[content..end]))
        })
        .collect())
}

fn push_user(messages: &mut Vec<Message>, text: &str, repairs: &mut Repairs) {
    if text.is_empty() {
        repairs.push(Repair::EmptyTurnsDropped);
        return;
    }
    match messages.last_mut() {
        Some(last) if last.role == Role::User => {
            last.content.push_str("\n\n");
            last.content.push_str(text);
            repairs.push(Repair::ConsecutiveTurnsMerged);
        }
        _ => messages.push(Message::user(text)),
    }
}

fn push_assistant(messages: &mut Vec<Message>, message: Message, repairs: &mut Repairs) {
    if message.content.is_empty() && message.tool_calls.is_empty() {
        repairs.push(Repair::EmptyTurnsDropped);
        return;
    }
    match messages.last_mut() {
        Some(last) if last.role == Role::Assistant && *last == message => {
            repairs.push(Repair::DuplicateTurnDropped);
        }
        Some(last) if last.role == Role::Assistant && last.tool_calls.is_empty() => {
            if !message.content.is_empty() {
                if !last.content.is_empty() {
                    last.content.push_str("\n\n");
                }
                last.content.push_str(&message.content);
            }
            last.tool_calls = message.tool_calls;
            repairs.push(Repair::ConsecutiveTurnsMerged);
        }
        _ => messages.push(message),
    }
}

/// One assistant turn: text, then `<functioncall>`s (or the legacy `AI to=` call).
pub(super) fn assistant(text: &str, repairs: &mut Repairs) -> Result<Message, Reject> {
    let text = py_trim(text.strip_suffix(END_OF_TEXT).unwrap_or(text));
    let (content, calls) = if let Some(i) = text.find(FUNCTION_CALL) {
        let mut before = text[..i].trim_end_matches(crate::conversation::is_py_whitespace);
        if let Some(b) = before.strip_suffix("ASSISTANT:") {
            before = b.trim_end_matches(crate::conversation::is_py_whitespace);
            repairs.push(Repair::StrayMarkerRemoved);
        }
        let calls = text[i + FUNCTION_CALL.len()..]
            .split(FUNCTION_CALL)
            .map(|c| parse_function_call(c, repairs))
            .collect::<Result<Vec<_>, _>>()?;
        (py_trim(before), calls)
    } else if let Some((before, call)) = legacy_call(text)? {
        repairs.push(Repair::LegacyCallSyntaxParsed);
        (before, vec![call])
    } else {
        (text, Vec::new())
    };
    if let Some(line) = content.lines().find(|l| {
        let l = l.trim_start();
        MARKERS.iter().any(|(m, _)| l.starts_with(m))
    }) {
        return Err(Reject::new(
            RejectReason::StrayRoleMarker,
            format!(
                "an assistant turn contains a role marker line: {}",
                preview(line)
            ),
        ));
    }
    Ok(Message::assistant(content).with_tool_calls(calls))
}

/// `AI to= name: {json}` at the start of a line: the text before it and the call.
fn legacy_call(text: &str) -> Result<Option<(&str, ToolCall)>, Reject> {
    const PREFIX: &str = "AI to=";
    let Some(start) = text
        .match_indices(PREFIX)
        .map(|(i, _)| i)
        .find(|&i| i == 0 || text[..i].ends_with('\n'))
    else {
        return Ok(None);
    };
    let rest = &text[start + PREFIX.len()..];
    let Some((name, json)) = rest.split_once(':') else {
        return Ok(None);
    };
    let name = name.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Ok(None);
    }
    let arguments = match embedded_json(py_trim(json), &format!("AI to= {name}:"))? {
        Ok(Value::Object(o)) => o.into_iter().collect(),
        _ => {
            return Err(Reject::new(
                RejectReason::InvalidToolArguments,
                format!("`AI to= {name}:` is not followed by a JSON object"),
            ))
        }
    };
    let call = ToolCall {
        id: None,
        name: name.to_owned(),
        arguments,
    };
    Ok(Some((py_trim(&text[..start]), call)))
}

/// One `<functioncall>` body: `{"name": ..., "arguments": '<JSON>'}` and variants.
fn parse_function_call(text: &str, repairs: &mut Repairs) -> Result<ToolCall, Reject> {
    let s = py_trim(text);
    let mut c = Cursor { s, pos: 0 };
    let mut object = Map::new();
    c.expect(b'{')?;
    loop {
        c.skip_ws();
        if c.eat(b'}') {
            break;
        }
        let key: String = c.json()?;
        c.skip_ws();
        c.expect(b':')?;
        c.skip_ws();
        let value = if c.peek() == Some(b'\'') {
            c.quoted_json(repairs)?
        } else {
            c.value()?
        };
        object.insert(key, value);
        c.skip_ws();
        if c.eat(b',') {
            continue;
        }
        c.expect(b'}')?;
        break;
    }
    let rest = py_trim(&s[c.pos..]);
    if !rest.is_empty() {
        return Err(invalid_call(format!(
            "text after a `<functioncall>` object: {}",
            preview(rest)
        )));
    }
    call_from_value(Value::Object(object), "<functioncall>", repairs)
}

/// `value` as Python reads the JSON `text` it was parsed from: an integer outside 64 bits
/// rejects the call.
fn exact(text: &str, value: Value) -> Result<Value, Reject> {
    json_exact::exact(text.as_bytes(), value).map_err(|e| {
        e.out_of_range("<functioncall>")
            .unwrap_or_else(|| invalid_call(format!("malformed `<functioncall>`: {e}")))
    })
}

struct Cursor<'a> {
    s: &'a str,
    pos: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.pos).copied()
    }
    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }
    fn eat(&mut self, b: u8) -> bool {
        let hit = self.peek() == Some(b);
        if hit {
            self.pos += 1;
        }
        hit
    }
    fn expect(&mut self, b: u8) -> Result<(), Reject> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(invalid_call(format!(
                "malformed `<functioncall>`: expected `{}` at {}",
                b as char,
                preview(&self.s[self.pos..])
            )))
        }
    }
    /// One JSON value starting at the cursor.
    fn json<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, Reject> {
        let mut stream = serde_json::Deserializer::from_str(&self.s[self.pos..]).into_iter::<T>();
        match stream.next() {
            Some(Ok(v)) => {
                self.pos += stream.byte_offset();
                Ok(v)
            }
            Some(Err(e)) => Err(invalid_call(format!("malformed `<functioncall>`: {e}"))),
            None => Err(invalid_call("truncated `<functioncall>`".into())),
        }
    }
    /// One JSON value starting at the cursor, as Python reads it.
    fn value(&mut self) -> Result<Value, Reject> {
        let start = self.pos;
        let v = self.json::<Value>()?;
        exact(&self.s[start..self.pos], v)
    }
    /// A single-quoted string holding JSON (`'{"a": "it's"}'`), parsed as that JSON.
    fn quoted_json(&mut self, repairs: &mut Repairs) -> Result<Value, Reject> {
        let open = self.pos;
        let body = &self.s[open + 1..];
        let mut stream = serde_json::Deserializer::from_str(body).into_iter::<Value>();
        let first_error = match stream.next() {
            Some(Ok(v)) => {
                let after = open + 1 + stream.byte_offset();
                let mut probe = Cursor {
                    s: self.s,
                    pos: after,
                };
                probe.skip_ws();
                if probe.eat(b'\'') {
                    self.pos = probe.pos;
                    return exact(&self.s[open + 1..after], v);
                }
                "the quoted JSON is followed by more text".to_owned()
            }
            Some(Err(e)) => e.to_string(),
            None => "the quoted arguments are empty".to_owned(),
        };
        // The JSON did not end at a quote: retry with everything up to the last quote of the
        // call, unescaping `\'` (which JSON does not allow).
        let Some(close) = self.s.rfind('\'').filter(|&c| c > open) else {
            return Err(invalid_call(
                "unterminated single-quoted arguments in `<functioncall>`".into(),
            ));
        };
        let region = &self.s[open + 1..close];
        if region.contains("\\'") {
            let unescaped = region.replace("\\'", "'");
            if let Ok(v) = serde_json::from_str::<Value>(&unescaped) {
                repairs.push(Repair::QuotedArgumentsUnescaped);
                self.pos = close + 1;
                return exact(&unescaped, v);
            }
        }
        Err(Reject::new(
            RejectReason::InvalidToolArguments,
            format!("the quoted arguments of `<functioncall>` are not valid JSON: {first_error}"),
        ))
    }
}

impl super::Format for GlaiveAdapter {
    fn configure(_: &super::Settings) -> Self {
        GlaiveAdapter
    }

    fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        GlaiveAdapter::adapt(self, row, repairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(text: &str) -> Result<ToolCall, Reject> {
        parse_function_call(text, &mut Repairs::new())
    }

    #[test]
    fn function_call_forms() {
        let c = call(r#" {"name": "f", "arguments": '{"text": "let's go"}'} "#).expect("quoted");
        assert_eq!(
            (c.name.as_str(), &c.arguments["text"]),
            ("f", &json!("let's go"))
        );
        let c = call("{\"name\": \"f\", \"arguments\": '{\n  \"a\": 1\n}'}").expect("pretty");
        assert_eq!(c.arguments["a"], json!(1));
        let c = call(r#"{"name": "f", "arguments": {"a": [1, 2]}}"#).expect("object");
        assert_eq!(c.arguments["a"], json!([1, 2]));
        let c = call(r#"{"name": "f", "arguments": '{"a": "it\'s"}'}"#).expect("escaped quote");
        assert_eq!(c.arguments["a"], json!("it's"));
        let c = call(r#"{"name": "f", "arguments": '{}'}"#).expect("empty");
        assert!(c.arguments.is_empty());
        for (bad, code) in [
            (
                r#"{"name": "f", "arguments": '{"x": Infinity}'}"#,
                "invalid_tool_arguments",
            ),
            (
                r#"{"name": "f", "arguments": '[1]'}"#,
                "invalid_tool_arguments",
            ),
            (
                r#"{"name": "f", "arguments": '{"a": 1}'}}"#,
                "invalid_tool_call",
            ),
            (
                r#"{"name": "f", "arguments": '{"a": 1"#,
                "invalid_tool_call",
            ),
            (r#"{"arguments": '{}'}"#, "invalid_tool_call"),
            ("", "invalid_tool_call"),
        ] {
            assert_eq!(
                call(bad).map_err(|r| r.reason.code()).err(),
                Some(code),
                "{bad}"
            );
        }
    }

    #[test]
    fn turns_split_only_at_boundaries() {
        let turns = split_turns("USER: a\nASSISTANT: b\n\n\nASSISTANT: c <|endoftext|>USER: d")
            .expect("splits");
        let texts: Vec<_> = turns.iter().map(|t| (t.0, t.1)).collect();
        assert_eq!(
            texts,
            vec![
                (Marker::User, "a\nASSISTANT: b"),
                (Marker::Assistant, "c <|endoftext|>"),
                (Marker::User, "d")
            ]
        );
        assert!(split_turns("hello\n\nUSER: x").is_err());
        assert_eq!(split_turns("").expect("empty").len(), 0);
    }
}
