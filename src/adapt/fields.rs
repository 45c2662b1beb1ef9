//! Field access helpers shared by the adapters: every failure names the field.

use super::Repairs;
use crate::conversation::ToolCall;
use crate::model::json_exact;
use crate::reject::{Reject, RejectReason, Repair};
use indexmap::IndexMap;
use serde_json::{Map, Value};

/// JSON held in a string at `field`, read as Python reads it
/// ([`json_exact`](crate::model::json_exact)): `Err` for an integer outside 64 bits (the
/// row's reject, naming where it is), `Ok(Err(_))` for text that is not JSON, which each
/// caller words (or tries another syntax for) itself.
pub fn embedded_json(text: &str, field: &str) -> Result<Result<Value, json_exact::Error>, Reject> {
    match json_exact::from_str(text) {
        Err(e) => match e.out_of_range(field) {
            Some(reject) => Err(reject),
            None => Ok(Err(e)),
        },
        ok => Ok(ok),
    }
}

pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A required string field (`null` and absent are both missing).
pub fn required_str<'a>(row: &'a Map<String, Value>, field: &str) -> Result<&'a str, Reject> {
    match row.get(field) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(Reject::new(
            RejectReason::MissingField,
            format!("field `{field}` is missing"),
        )),
        Some(other) => Err(Reject::new(
            RejectReason::InvalidField,
            format!("field `{field}` is a {}, expected a string", kind(other)),
        )),
    }
}

/// An optional string field; `null` counts as absent.
pub fn optional_str<'a>(
    row: &'a Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, Reject> {
    match row.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(Reject::new(
            RejectReason::InvalidField,
            format!("field `{field}` is a {}, expected a string", kind(other)),
        )),
    }
}

/// A list field that may also arrive as a JSON string holding the list (HF datasets often
/// store nested data as strings).
pub fn list_or_json_string(
    row: &Map<String, Value>,
    field: &str,
    repairs: &mut Repairs,
) -> Result<Option<Vec<Value>>, Reject> {
    match row.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a.clone())),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => match embedded_json(s, field)? {
            Ok(Value::Array(a)) => {
                repairs.push(Repair::JsonStringParsed);
                Ok(Some(a))
            }
            Ok(Value::Null) => Ok(None),
            Ok(other) => Err(Reject::new(
                RejectReason::InvalidField,
                format!(
                    "field `{field}` holds a JSON {}, expected a list",
                    kind(&other)
                ),
            )),
            Err(e) => Err(Reject::new(
                RejectReason::InvalidField,
                format!("field `{field}` is not valid JSON: {e}"),
            )),
        },
        Some(other) => Err(Reject::new(
            RejectReason::InvalidField,
            format!("field `{field}` is a {}, expected a list", kind(other)),
        )),
    }
}

/// Content as text: a string, `null`, or a list of text parts (joined with no separator; see
/// [`content_parts`] for where they were). Image, video and audio parts are rejected.
/// A message's content where an assistant turn that makes calls may have none (OpenAI format:
/// `"content": null` beside `tool_calls`): that is an empty string; anywhere else a missing or
/// null content is rejected (`missing_field`).
pub fn message_content(
    value: Option<&Value>,
    field: &str,
    makes_calls: bool,
    repairs: &mut Repairs,
) -> Result<(String, Vec<usize>), Reject> {
    match value {
        None | Some(Value::Null) if makes_calls => Ok((String::new(), Vec::new())),
        other => content_parts(other, field, repairs),
    }
}

/// Whether a message object carries a non-empty list of calls under any of `keys` (a list,
/// or a JSON string of one), or a legacy `function_call` object.
pub fn has_calls(m: &Map<String, Value>, keys: &[&str]) -> bool {
    keys.iter().any(|k| match m.get(*k) {
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::String(s)) => {
            // An integer outside 64 bits counts as a call: reading the calls rejects the row.
            match json_exact::from_str(s) {
                Ok(Value::Array(a)) => !a.is_empty(),
                Err(json_exact::Error::OutOfRange { .. }) => true,
                _ => false,
            }
        }
        _ => false,
    }) || m.get("function_call").is_some_and(Value::is_object)
}

pub fn content_text(
    value: Option<&Value>,
    field: &str,
    repairs: &mut Repairs,
) -> Result<String, Reject> {
    content_parts(value, field, repairs).map(|(text, _)| text)
}

/// [`content_text`], with where each text part after the first begins in the text (empty
/// unless the content is a list of two or more parts): the template decides how parts are
/// joined ([`Conversation::join_text_parts`](crate::conversation::Conversation::join_text_parts)).
pub fn content_parts(
    value: Option<&Value>,
    field: &str,
    repairs: &mut Repairs,
) -> Result<(String, Vec<usize>), Reject> {
    match value {
        // Kept as an empty string it would train an empty turn the data never had.
        None | Some(Value::Null) => Err(Reject::new(
            RejectReason::MissingField,
            format!("`{field}` is missing or null"),
        )),
        Some(Value::String(s)) => Ok((s.clone(), Vec::new())),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            let mut breaks = Vec::new();
            for (i, part) in parts.iter().enumerate() {
                let Value::Object(part) = part else {
                    return Err(Reject::new(
                        RejectReason::InvalidField,
                        format!(
                            "`{field}[{i}]` is a {}, expected a content part object",
                            kind(part)
                        ),
                    ));
                };
                let kind = part.get("type").and_then(Value::as_str);
                let media = ["image", "image_url", "video", "input_audio", "audio"];
                if media.iter().any(|k| part.contains_key(*k))
                    || kind.is_some_and(|k| media.contains(&k))
                {
                    return Err(Reject::new(
                        RejectReason::MultimodalContent,
                        format!(
                            "`{field}[{i}]` is a {} part; only text is supported",
                            kind.unwrap_or("media")
                        ),
                    ));
                }
                match part.get("text") {
                    Some(Value::String(t)) => {
                        if i > 0 {
                            breaks.push(text.len());
                        }
                        text.push_str(t);
                    }
                    _ => {
                        return Err(Reject::new(
                            RejectReason::InvalidField,
                            format!(
                                "`{field}[{i}]` has no `text` (type `{}`)",
                                kind.unwrap_or("?")
                            ),
                        ))
                    }
                }
            }
            repairs.push(Repair::ContentPartsJoined);
            Ok((text, breaks))
        }
        Some(other) => Err(Reject::new(
            RejectReason::InvalidField,
            format!(
                "`{field}` is a {}, expected a string or a list of parts",
                kind(other)
            ),
        )),
    }
}

/// Tool-call arguments as an object. A JSON string holding an object is parsed (what vLLM and
/// llama.cpp do before rendering); empty, `null` and absent become `{}`.
pub fn arguments_object(
    value: Option<&Value>,
    field: &str,
    repairs: &mut Repairs,
) -> Result<IndexMap<String, Value>, Reject> {
    match value {
        None | Some(Value::Null) => Ok(IndexMap::new()),
        Some(Value::Object(o)) => Ok(o.clone().into_iter().collect()),
        Some(Value::String(s)) if s.trim().is_empty() => {
            repairs.push(Repair::ToolArgumentsParsed);
            Ok(IndexMap::new())
        }
        Some(Value::String(s)) => match embedded_json(s, field)? {
            Ok(Value::Object(o)) => {
                repairs.push(Repair::ToolArgumentsParsed);
                Ok(o.into_iter().collect())
            }
            Ok(other) => Err(Reject::new(
                RejectReason::InvalidToolArguments,
                format!(
                    "`{field}` holds a JSON {}, expected an object",
                    kind(&other)
                ),
            )),
            Err(e) => Err(Reject::new(
                RejectReason::InvalidToolArguments,
                format!("`{field}` is not valid JSON: {e}"),
            )),
        },
        Some(other) => Err(Reject::new(
            RejectReason::InvalidToolArguments,
            format!("`{field}` is a {}, expected an object", kind(other)),
        )),
    }
}

/// One OpenAI-style tool call: `{"id", "type", "function": {"name", "arguments"}}`, or the
/// flat `{"name", "arguments"}` shape.
pub fn tool_call(value: &Value, field: &str, repairs: &mut Repairs) -> Result<ToolCall, Reject> {
    let Value::Object(call) = value else {
        return Err(Reject::new(
            RejectReason::InvalidField,
            format!("`{field}` is a {}, expected an object", kind(value)),
        ));
    };
    let id = call.get("id").and_then(Value::as_str).map(str::to_owned);
    let (function, path) = match call.get("function") {
        Some(Value::Object(f)) => (f, format!("{field}.function")),
        _ => (call, field.to_owned()),
    };
    let name = required_str(function, "name").map_err(|r| Reject {
        message: format!("`{path}`: {}", r.message),
        ..r
    })?;
    let arguments = arguments_object(
        function.get("arguments"),
        &format!("{path}.arguments"),
        repairs,
    )?;
    Ok(ToolCall {
        id,
        name: name.to_owned(),
        arguments,
    })
}

/// A message object and its `role` string (both required), with errors naming the field.
pub fn message_role<'a>(
    value: &'a Value,
    field: &str,
) -> Result<(&'a Map<String, Value>, &'a str), Reject> {
    tagged_object(value, field, "message", "role")
}

/// An object (a message or turn) and its required string tag (`role`, `from`), with errors
/// naming the field.
pub fn tagged_object<'a>(
    value: &'a Value,
    field: &str,
    noun: &str,
    tag: &str,
) -> Result<(&'a Map<String, Value>, &'a str), Reject> {
    let Value::Object(m) = value else {
        return Err(Reject::new(
            RejectReason::InvalidField,
            format!("`{field}` is a {}, expected a {noun} object", kind(value)),
        ));
    };
    let role = optional_str(m, tag)
        .map_err(|r| Reject {
            message: format!("`{field}`: {}", r.message),
            ..r
        })?
        .ok_or_else(|| {
            Reject::new(
                RejectReason::MissingField,
                format!("`{field}.{tag}` is missing"),
            )
        })?;
    Ok((m, role))
}
