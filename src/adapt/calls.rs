//! Tool calls written inside assistant text, shared by the adapters whose sources have no
//! structured calls:
//!
//! - `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` (Hermes, Qwen2.5/3), the
//!   body JSON or a Python literal;
//! - `<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>`
//!   (Qwen3.5/3.6), and the bare `<function=NAME>...</function>` form SWE-agent prints.
//!
//! Calls must come after any text: the Qwen templates render content first, then calls, so a
//! turn with text after its calls cannot be represented and is rejected.

use super::fields::{arguments_object, kind};
use super::{pyliteral, Repairs};
use crate::conversation::{py_trim, Message, ToolCall};
use crate::reject::{Reject, RejectReason, Repair};
use indexmap::IndexMap;
use serde_json::Value;

pub const TOOL_CALL_OPEN: &str = "<tool_call>";
pub const TOOL_CALL_CLOSE: &str = "</tool_call>";

/// Splits assistant text into the text before its first `<tool_call>` and the bodies of the
/// `<tool_call>...</tool_call>` blocks after it. `None` when there is no `<tool_call>`.
/// Only whitespace may separate or follow the blocks.
pub fn tool_call_blocks<'a>(
    text: &'a str,
    field: &str,
) -> Result<Option<(&'a str, Vec<&'a str>)>, Reject> {
    let Some(first) = text.find(TOOL_CALL_OPEN) else {
        return Ok(None);
    };
    let mut bodies = Vec::new();
    let mut rest = &text[first..];
    loop {
        let trimmed = py_trim(rest);
        if trimmed.is_empty() {
            break;
        }
        let Some(after_open) = trimmed.strip_prefix(TOOL_CALL_OPEN) else {
            return Err(invalid_call(format!(
                "`{field}` has text after its tool calls: {}",
                preview(trimmed)
            )));
        };
        let Some(close) = after_open.find(TOOL_CALL_CLOSE) else {
            return Err(invalid_call(format!(
                "`{field}` has a `<tool_call>` without `</tool_call>`"
            )));
        };
        bodies.push(&after_open[..close]);
        rest = &after_open[close + TOOL_CALL_CLOSE.len()..];
    }
    Ok(Some((&text[..first], bodies)))
}

/// An assistant message from text that may end in `<tool_call>` blocks (Hermes / Qwen style):
/// the text before them is the content, each block one call.
pub fn assistant_with_tool_calls(
    text: &str,
    field: &str,
    repairs: &mut Repairs,
) -> Result<Message, Reject> {
    match tool_call_blocks(text, field)? {
        None => Ok(Message::assistant(text)),
        Some((before, bodies)) => {
            let calls = bodies
                .iter()
                .enumerate()
                .map(|(i, b)| parse_body(b, &format!("{field} <tool_call> {i}"), repairs))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Message::assistant(py_trim(before)).with_tool_calls(calls))
        }
    }
}

/// Parses a `<tool_call>` body: the XML function form, a JSON object, or a Python literal.
pub fn parse_body(body: &str, field: &str, repairs: &mut Repairs) -> Result<ToolCall, Reject> {
    let trimmed = py_trim(body);
    if trimmed.starts_with("<function=") {
        return match parse_xml_function(trimmed) {
            Some((call, rest)) if py_trim(rest).is_empty() => Ok(call),
            _ => Err(invalid_call(format!(
                "`{field}`: malformed `<function=...>` call: {}",
                preview(trimmed)
            ))),
        };
    }
    let value = match super::fields::embedded_json(trimmed, field)? {
        Ok(v) => v,
        Err(json_error) => match pyliteral::parse(trimmed) {
            Ok(v) => {
                repairs.push(Repair::PythonLiteralParsed);
                v
            }
            Err(_) => {
                return Err(invalid_call(format!(
                    "`{field}`: the call is neither JSON nor a Python literal ({json_error}): {}",
                    preview(trimmed)
                )))
            }
        },
    };
    call_from_value(value, field, repairs)
}

/// A call object: `{"name", "arguments"}` (arguments an object or a JSON string holding one),
/// optionally wrapped as `{"function": {...}}`. Two known slips are repaired: `"parameters"`
/// instead of `"arguments"`, and the name nested inside `arguments` with none at the top.
pub fn call_from_value(
    value: Value,
    field: &str,
    repairs: &mut Repairs,
) -> Result<ToolCall, Reject> {
    let Value::Object(mut call) = value else {
        return Err(invalid_call(format!(
            "`{field}` is a {}, expected a call object",
            kind(&value)
        )));
    };
    let id = match call.get("id") {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    if let Some(Value::Object(inner)) = call.remove("function") {
        call = inner;
    }
    let mut arguments = match call.remove("arguments") {
        Some(a) => a,
        None => match call.remove("parameters") {
            Some(p) => {
                repairs.push(Repair::ArgumentsKeyRenamed);
                p
            }
            None => Value::Null,
        },
    };
    let name = match call.remove("name") {
        Some(Value::String(n)) if !n.is_empty() => n,
        None => match &mut arguments {
            Value::Object(args) if matches!(args.get("name"), Some(Value::String(_))) => {
                repairs.push(Repair::CallNameUnnested);
                match args.shift_remove("name") {
                    Some(Value::String(n)) => n,
                    _ => String::new(),
                }
            }
            _ => return Err(invalid_call(format!("`{field}` has no function name"))),
        },
        Some(other) => {
            return Err(invalid_call(format!(
                "`{field}.name` is a {}, expected a non-empty string",
                kind(&other)
            )))
        }
    };
    let arguments = arguments_object(Some(&arguments), &format!("{field}.arguments"), repairs)?;
    Ok(ToolCall {
        id,
        name,
        arguments,
    })
}

/// Parses one `<function=NAME>` ... `</function>` block at the start of `text`; returns the
/// call and the text after it. Parameter values are kept as strings (exactly the source text,
/// minus the one newline the format puts on each side): without a schema their JSON type is
/// unknown, and the Qwen templates print a string and the JSON value of the same text
/// identically for numbers, booleans and compact lists.
pub fn parse_xml_function(text: &str) -> Option<(ToolCall, &str)> {
    let rest = text.strip_prefix("<function=")?;
    let name_end = rest.find('>')?;
    let name = rest[..name_end].trim();
    if name.is_empty() || name.contains(['<', '\n']) {
        return None;
    }
    let mut rest = &rest[name_end + 1..];
    let mut arguments = IndexMap::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("</function>") {
            let call = ToolCall {
                id: None,
                name: name.to_owned(),
                arguments,
            };
            return Some((call, after));
        }
        let after = rest.strip_prefix("<parameter=")?;
        let key_end = after.find('>')?;
        let key = after[..key_end].trim();
        if key.is_empty() || key.contains(['<', '\n']) {
            return None;
        }
        let body = &after[key_end + 1..];
        let value_end = body.find("</parameter>")?;
        let value = &body[..value_end];
        let value = value.strip_prefix('\n').unwrap_or(value);
        let value = value.strip_suffix('\n').unwrap_or(value);
        arguments.insert(key.to_owned(), Value::String(value.to_owned()));
        rest = &body[value_end + "</parameter>".len()..];
    }
}

/// Bare `<function=...>` calls at the end of agent text (SWE-agent's XML tool format): the
/// text before the first of them and the calls. `None` unless the text ends with well-formed
/// calls.
pub fn trailing_xml_functions(text: &str) -> Option<(&str, Vec<ToolCall>)> {
    let start = text.find("<function=")?;
    let mut calls = Vec::new();
    let mut rest = &text[start..];
    while !py_trim(rest).is_empty() {
        let (call, after) = parse_xml_function(rest.trim_start())?;
        calls.push(call);
        rest = after;
    }
    Some((&text[..start], calls))
}

/// The bodies of the `<tool_response>...</tool_response>` blocks of a tool turn, trimmed; the
/// whole trimmed text when it has none.
pub fn tool_responses(text: &str) -> Vec<&str> {
    const OPEN: &str = "<tool_response>";
    const CLOSE: &str = "</tool_response>";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        let body = &rest[start + OPEN.len()..];
        match body.find(CLOSE) {
            Some(end) => {
                out.push(py_trim(&body[..end]));
                rest = &body[end + CLOSE.len()..];
            }
            None => {
                out.push(py_trim(body));
                rest = "";
            }
        }
    }
    if out.is_empty() {
        out.push(py_trim(text));
    }
    out
}

pub fn invalid_call(message: String) -> Reject {
    Reject::new(RejectReason::InvalidToolCall, message)
}

/// The start of a text, for messages (at most 60 characters).
pub fn preview(text: &str) -> String {
    let mut p: String = text.chars().take(60).collect();
    if p.len() < text.len() {
        p.push('…');
    }
    format!("{p:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn xml_functions() {
        let (call, rest) = parse_xml_function(
            "<function=bash>\n<parameter=command>ls -la</parameter>\n</function> tail",
        )
        .expect("parses");
        assert_eq!(call.name, "bash");
        assert_eq!(call.arguments["command"], json!("ls -la"));
        assert_eq!(rest, " tail");
        let (call, _) = parse_xml_function(
            "<function=edit>\n<parameter=path>\n/a.py\n</parameter>\n<parameter=text>\nx\n\ny\n</parameter>\n</function>",
        )
        .expect("parses");
        assert_eq!(call.arguments["text"], json!("x\n\ny"));
        assert!(parse_xml_function("<function=bash>\n<parameter=command>ls").is_none());
        let (before, calls) = trailing_xml_functions(
            "Look.\n\n<function=bash>\n<parameter=command>ls</parameter>\n</function>\n",
        )
        .expect("calls");
        assert_eq!((before, calls.len()), ("Look.\n\n", 1));
        assert!(trailing_xml_functions("<function=a></function> then text").is_none());
    }

    #[test]
    fn tool_call_blocks_and_bodies() {
        let mut repairs = Repairs::new();
        let text = "Sure.\n<tool_call>\n{'arguments': {'a': True}, 'name': 'f'}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": \"{\\\"b\\\": 1}\"}\n</tool_call>\n";
        let (before, bodies) = tool_call_blocks(text, "t").expect("ok").expect("some");
        assert_eq!(before, "Sure.\n");
        let calls: Vec<ToolCall> = bodies
            .iter()
            .map(|b| parse_body(b, "t", &mut repairs).expect("call"))
            .collect();
        assert_eq!(calls[0].name, "f");
        assert_eq!(calls[0].arguments["a"], json!(true));
        assert_eq!(calls[1].arguments["b"], json!(1));
        assert_eq!(
            repairs,
            vec![Repair::PythonLiteralParsed, Repair::ToolArgumentsParsed]
        );
        let err =
            tool_call_blocks("<tool_call>{}</tool_call> and more", "t").expect_err("text after");
        assert_eq!(err.reason, RejectReason::InvalidToolCall);
    }
}
