//! `xlam`: Salesforce/xlam-function-calling-60k rows `{"id", "query", "answers", "tools"}`,
//! `answers` and `tools` JSON strings (lists are accepted too). Single turn: user `query` →
//! assistant with the `answers` as (often parallel) calls, no text, no tool response.
//!
//! xLAM `parameters` are a flat map `{param: {"type", "description", "default"?}}` with
//! Python-ish types; each tool becomes an OpenAI tool whose parameters are JSON Schema:
//! `{"type": "object", "properties": {param: {"type", ["items"], "description", ["default"], ...}},
//! "required": [...]}`. A parameter is required unless it has a `default` or its type says
//! `, optional` / `Optional[...]`. Types: `str` → string, `int` → integer, `float` → number,
//! `bool` → boolean, `List[X]` → array of X, `Dict[...]` → object, `Union[...]` → anyOf,
//! `Any` or an unknown name → no `type` (any value). A parameter named `type` is just a
//! property. `parameters` that are already JSON Schema (`"type": "object"`) are kept as is.
//!
//! | outcome | code | when |
//! |---|---|---|
//! | repair | `tool_call_ids_synthesized` | always (xLAM calls have no ids) |
//! | repair | `duplicate_tool_dropped` | a function declared twice (rule in `tools.rs`) |
//! | reject | `empty_prompt` | `query` empty |
//! | reject | `empty_response` | `answers` is an empty list |
//! | reject | `invalid_tool_call` | `answers` not a list of `{name, arguments}` objects |
//! | reject | `invalid_tool_arguments` | `arguments` not an object |
//! | reject | `invalid_tools` | `tools` not a list of named function objects, or a parameter spec that is not an object or a type string |
//! | reject | `undeclared_tool` | an answer calls a function not in `tools` |
//!
//! Metadata: `id`.

use super::calls::call_from_value;
use super::fields::{kind, list_or_json_string, required_str};
use super::{tools, Repairs, Row};
use crate::conversation::{py_trim, Conversation, Message};
use crate::reject::{Reject, RejectReason};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Default)]
pub struct XlamAdapter;

impl XlamAdapter {
    pub fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        let query = required_str(row, "query")?;
        if py_trim(query).is_empty() {
            return Err(Reject::new(
                RejectReason::EmptyPrompt,
                "field `query` is empty",
            ));
        }
        // Both columns are JSON strings by definition: parsing them is no repair.
        let answers = list_or_json_string(row, "answers", &mut Repairs::new())
            .map_err(|r| Reject::new(RejectReason::InvalidToolCall, r.message))?
            .ok_or_else(|| Reject::new(RejectReason::MissingField, "field `answers` is missing"))?;
        if answers.is_empty() {
            return Err(Reject::new(
                RejectReason::EmptyResponse,
                "field `answers` is an empty list: no call to supervise",
            ));
        }
        let calls = answers
            .into_iter()
            .enumerate()
            .map(|(i, a)| call_from_value(a, &format!("answers[{i}]"), repairs))
            .collect::<Result<Vec<_>, _>>()?;
        let raw_tools = list_or_json_string(row, "tools", &mut Repairs::new())
            .map_err(|r| Reject::new(RejectReason::InvalidTools, r.message))?
            .unwrap_or_default();
        let tool_list = raw_tools
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let field = format!("tools[{i}]");
                let converted = convert_tool(t, &field)?;
                tools::normalize(converted, &field, repairs)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let messages = vec![
            Message::user(query),
            Message::assistant("").with_tool_calls(calls),
        ];
        tools::finish(tool_list, messages, repairs)
    }

    pub fn metadata(&self, row: &Row) -> Map<String, Value> {
        super::scalar_fields(row, &["id"])
    }
}

fn invalid(message: String) -> Reject {
    Reject::new(RejectReason::InvalidTools, message)
}

/// One xLAM tool → a bare function `{name, description, parameters (JSON Schema), ...}`.
fn convert_tool(tool: Value, field: &str) -> Result<Value, Reject> {
    let Value::Object(mut tool) = tool else {
        return Err(invalid(format!(
            "`{field}` is a {}, expected an object",
            kind(&tool)
        )));
    };
    let parameters = match tool.get("parameters") {
        None | Some(Value::Null) => None,
        Some(Value::Object(p)) if is_json_schema(p) => None,
        Some(Value::Object(p)) => Some(convert_parameters(p, &format!("{field}.parameters"))?),
        Some(other) => {
            return Err(invalid(format!(
                "`{field}.parameters` is a {}, expected an object",
                kind(other)
            )))
        }
    };
    if let Some(p) = parameters {
        tool.insert("parameters".into(), Value::Object(p));
    }
    Ok(Value::Object(tool))
}

/// JSON Schema says `"type": "object"`; an xLAM map has objects as values, even under a
/// parameter named `type`.
fn is_json_schema(p: &Map<String, Value>) -> bool {
    p.get("type").and_then(Value::as_str) == Some("object")
}

fn convert_parameters(
    flat: &Map<String, Value>,
    field: &str,
) -> Result<Map<String, Value>, Reject> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    for (name, spec) in flat {
        let empty = Map::new();
        let (spec, type_text) = match spec {
            Value::Object(o) => (o, o.get("type").and_then(Value::as_str).unwrap_or("")),
            Value::String(t) => (&empty, t.as_str()),
            other => {
                return Err(invalid(format!(
                    "`{field}.{name}` is a {}, expected a parameter object",
                    kind(other)
                )))
            }
        };
        let (mut property, optional) = parse_type(type_text);
        for key in ["description", "default"] {
            if let Some(v) = spec.get(key) {
                property.insert(key.into(), v.clone());
            }
        }
        for (k, v) in spec {
            if !matches!(k.as_str(), "type" | "description" | "default") {
                property.insert(k.clone(), v.clone());
            }
        }
        if !optional && !spec.contains_key("default") {
            required.push(Value::String(name.clone()));
        }
        properties.insert(name.clone(), Value::Object(property));
    }
    let mut schema = Map::new();
    schema.insert("type".into(), Value::String("object".into()));
    schema.insert("properties".into(), Value::Object(properties));
    schema.insert("required".into(), Value::Array(required));
    Ok(schema)
}

/// A Python-ish type (`str`, `List[int]`, `str, optional`, `Optional[float]`,
/// `int, default=5`) → the JSON Schema keywords for it, and whether it is optional.
fn parse_type(text: &str) -> (Map<String, Value>, bool) {
    let parts = split_top_level(text);
    let mut optional = parts.iter().skip(1).any(|p| {
        let p = p.trim().to_ascii_lowercase();
        p == "optional" || p.starts_with("default")
    });
    let head = parts.first().map_or("", |p| p.trim());
    let (inner, wrapped_optional) = strip_optional(head);
    optional |= wrapped_optional;
    (schema_for(inner, 0), optional)
}

/// `Optional[X]` → (`X`, true).
fn strip_optional(t: &str) -> (&str, bool) {
    match generic(t) {
        Some((name, args)) if name.eq_ignore_ascii_case("optional") => (args, true),
        _ => (t, false),
    }
}

/// `Name[args]` → (`Name`, `args`).
fn generic(t: &str) -> Option<(&str, &str)> {
    let open = t.find('[')?;
    let inner = t[open + 1..].strip_suffix(']')?;
    Some((t[..open].trim(), inner))
}

/// Splits on commas outside brackets.
fn split_top_level(t: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in t.char_indices() {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&t[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&t[start..]);
    parts
}

fn schema_for(t: &str, depth: usize) -> Map<String, Value> {
    let mut schema = Map::new();
    let t = t.trim();
    if depth > 16 {
        return schema;
    }
    let (name, args) = match generic(t) {
        Some((n, a)) => (n, Some(a)),
        None => (t, None),
    };
    let simple = |s: &str| {
        let mut m = Map::new();
        m.insert("type".into(), Value::String(s.into()));
        m
    };
    match name.to_ascii_lowercase().as_str() {
        "str" | "string" => schema = simple("string"),
        "int" | "integer" => schema = simple("integer"),
        "float" | "number" | "double" | "decimal" => schema = simple("number"),
        "bool" | "boolean" => schema = simple("boolean"),
        "none" | "null" | "nonetype" => schema = simple("null"),
        "dict" | "object" | "mapping" => schema = simple("object"),
        "list" | "array" | "sequence" | "tuple" | "set" => {
            schema = simple("array");
            if let Some(args) = args {
                let first = split_top_level(args).first().copied().unwrap_or("");
                let items = schema_for(first, depth + 1);
                if !items.is_empty() {
                    schema.insert("items".into(), Value::Object(items));
                }
            }
        }
        "optional" => schema = schema_for(args.unwrap_or(""), depth + 1),
        "union" => {
            let members: Vec<Map<String, Value>> = split_top_level(args.unwrap_or(""))
                .into_iter()
                .map(|m| schema_for(m, depth + 1))
                .collect();
            if members.iter().all(|m| !m.is_empty()) {
                if members.len() == 1 {
                    schema = members.into_iter().next().unwrap_or_default();
                } else {
                    schema.insert(
                        "anyOf".into(),
                        Value::Array(members.into_iter().map(Value::Object).collect()),
                    );
                }
            }
        }
        _ => {} // `Any`, `Callable`, unknown: no constraint
    }
    schema
}

impl super::Format for XlamAdapter {
    fn configure(_: &super::Settings) -> Self {
        XlamAdapter
    }

    fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        XlamAdapter::adapt(self, row, repairs)
    }

    fn metadata(&self, row: &Row) -> serde_json::Map<String, serde_json::Value> {
        XlamAdapter::metadata(self, row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ty(t: &str) -> (Value, bool) {
        let (m, o) = parse_type(t);
        (Value::Object(m), o)
    }

    #[test]
    fn types() {
        assert_eq!(ty("str"), (json!({"type": "string"}), false));
        assert_eq!(ty("str, optional"), (json!({"type": "string"}), true));
        assert_eq!(
            ty("List[int]"),
            (
                json!({"type": "array", "items": {"type": "integer"}}),
                false
            )
        );
        assert_eq!(ty("Optional[float]"), (json!({"type": "number"}), true));
        assert_eq!(ty("int, default=5"), (json!({"type": "integer"}), true));
        assert_eq!(
            ty("List[Dict[str, Any]]"),
            (json!({"type": "array", "items": {"type": "object"}}), false)
        );
        assert_eq!(
            ty("Union[int, str]"),
            (
                json!({"anyOf": [{"type": "integer"}, {"type": "string"}]}),
                false
            )
        );
        assert_eq!(ty("Callable"), (json!({}), false));
        assert_eq!(ty("List[[[["), (json!({}), false));
    }
}
