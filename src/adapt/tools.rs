//! Tool schemas and call bookkeeping shared by the tool-calling adapters.
//!
//! - Every tool becomes an OpenAI tool object `{"type": "function", "function": {...}}`; the
//!   function's own keys keep their order. A `parameters` given as a JSON string is parsed.
//! - Duplicate function names: one definition is kept, the first whose `parameters.properties`
//!   accept every argument the row passes to that function; if none does, the first. A tie
//!   always goes to declaration order, so the rule is deterministic and, for rows whose calls
//!   match one definition, picks the schema the calls were written against.
//! - Calls without ids get `call_0`, `call_1`, ... in row order; each tool response takes the id
//!   (and name) of the oldest unanswered call of the assistant turn before it.

use super::fields::kind;
use super::Repairs;
use crate::conversation::{Conversation, Message, Role, ToolCall};
use crate::model::json_exact;
use crate::reject::{Reject, RejectReason, Repair};
use serde_json::{Map, Value};
use std::collections::{HashMap, VecDeque};

/// The function object of a tool (the tool itself when it is a bare function).
pub fn function(tool: &Value) -> Option<&Map<String, Value>> {
    match tool.get("function") {
        Some(Value::Object(f)) => Some(f),
        _ => tool.as_object(),
    }
}

/// The function name of a tool, OpenAI-wrapped or bare.
pub fn name(tool: &Value) -> Option<&str> {
    function(tool)?.get("name")?.as_str()
}

/// Normalizes one tool: wraps a bare function schema, parses a string `parameters`
/// (`json_string_parsed`), and checks that it has a non-empty string name. `field` names the
/// tool in messages.
pub fn normalize(tool: Value, field: &str, repairs: &mut Repairs) -> Result<Value, Reject> {
    let invalid = |message: String| Reject::new(RejectReason::InvalidTools, message);
    let Value::Object(mut tool) = tool else {
        return Err(invalid(format!(
            "`{field}` is a {}, expected a tool object",
            kind(&tool)
        )));
    };
    let wrapped = matches!(tool.get("function"), Some(Value::Object(_)));
    if !wrapped {
        if tool.contains_key("function") {
            return Err(invalid(format!("`{field}.function` is not an object")));
        }
        let mut outer = Map::new();
        outer.insert("type".into(), Value::String("function".into()));
        outer.insert("function".into(), Value::Object(tool));
        // Not recorded as a repair: bare schemas are how Glaive, xLAM and others define tools.
        tool = outer;
    }
    let Some(Value::Object(function)) = tool.get_mut("function") else {
        return Err(invalid(format!("`{field}.function` is not an object")));
    };
    match function.get("name") {
        Some(Value::String(n)) if !n.is_empty() => {}
        _ => return Err(invalid(format!("`{field}` has no function name"))),
    }
    if let Some(Value::String(p)) = function.get("parameters") {
        let parsed =
            super::fields::embedded_json(p, &format!("{field}.parameters"))?.map_err(|e| {
                invalid(format!(
                    "`{field}.parameters` is a string but not valid JSON: {e}"
                ))
            })?;
        function.insert("parameters".into(), parsed);
        repairs.push(Repair::JsonStringParsed);
    }
    Ok(Value::Object(tool))
}

/// A tool list written as text (inside `<tools>...</tools>` or after a system preamble): a
/// JSON array, a single JSON object, JSON objects one after another (one per line, or
/// pretty-printed and separated by blank lines), or the same as a Python literal. `None` when it
/// is none of these.
/// An integer outside 64 bits is the row's reject (naming `field`).
pub fn parse_list_text(
    text: &str,
    field: &str,
    repairs: &mut Repairs,
) -> Result<Option<Vec<Value>>, Reject> {
    let text = crate::conversation::py_trim(text);
    if text.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let items = match json_exact::stream(text).collect::<Result<Vec<_>, _>>() {
        Ok(items) => items,
        Err(e) => match (e.out_of_range(field), super::pyliteral::parse(text)) {
            (Some(reject), _) => return Err(reject),
            (None, Ok(v)) => {
                repairs.push(Repair::PythonLiteralParsed);
                vec![v]
            }
            (None, Err(_)) => return Ok(None),
        },
    };
    let mut out = Vec::new();
    for item in items {
        match item {
            Value::Array(a) => out.extend(a),
            other => out.push(other),
        }
    }
    Ok(Some(out))
}

/// Removes `null`-valued keys from objects, recursively. Parquet struct columns give every
/// row the union of all rows' keys, padding the missing ones with null; JSON Schema has no use
/// for a null keyword value, so they are padding, not data.
pub fn drop_nulls(value: &mut Value) -> bool {
    let mut changed = false;
    match value {
        Value::Object(o) => {
            let before = o.len();
            o.retain(|_, v| !v.is_null());
            changed |= o.len() != before;
            for v in o.values_mut() {
                changed |= drop_nulls(v);
            }
        }
        Value::Array(a) => {
            for v in a {
                changed |= drop_nulls(v);
            }
        }
        _ => {}
    }
    changed
}

/// Keeps one definition per function name (see the module docs for the rule).
pub fn dedupe(tools: &mut Vec<Value>, messages: &[Message], repairs: &mut Repairs) {
    let mut positions: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, t) in tools.iter().enumerate() {
        if let Some(n) = name(t) {
            positions.entry(n).or_default().push(i);
        }
    }
    if positions.values().all(|p| p.len() == 1) {
        return;
    }
    let mut drop = vec![false; tools.len()];
    for (function_name, idx) in &positions {
        if idx.len() < 2 {
            continue;
        }
        let used: Vec<&str> = calls(messages)
            .filter(|c| c.name == *function_name)
            .flat_map(|c| c.arguments.keys().map(String::as_str))
            .collect();
        let accepts = |i: usize| {
            let properties = function(&tools[i])
                .and_then(|f| f.get("parameters"))
                .and_then(|p| p.get("properties"))
                .and_then(Value::as_object);
            match properties {
                Some(p) => used.iter().all(|k| p.contains_key(*k)),
                None => used.is_empty(),
            }
        };
        let keep = idx.iter().copied().find(|&i| accepts(i)).unwrap_or(idx[0]);
        for &i in idx {
            drop[i] = i != keep;
        }
    }
    let mut i = 0;
    tools.retain(|_| {
        let keep = !drop[i];
        i += 1;
        keep
    });
    repairs.push(Repair::DuplicateToolDropped);
}

fn calls(messages: &[Message]) -> impl Iterator<Item = &ToolCall> {
    messages.iter().flat_map(|m| m.tool_calls.iter())
}

/// Rejects a call to a function the row does not declare.
pub fn check_declared(tools: &[Value], messages: &[Message]) -> Result<(), Reject> {
    for call in calls(messages) {
        if !tools.iter().any(|t| name(t) == Some(call.name.as_str())) {
            let declared: Vec<&str> = tools.iter().filter_map(name).collect();
            return Err(Reject::new(
                RejectReason::UndeclaredTool,
                if declared.is_empty() {
                    format!("call to `{}`, but the row declares no tools", call.name)
                } else {
                    format!(
                        "call to `{}`, which is not among the declared tools ({})",
                        call.name,
                        declared.join(", ")
                    )
                },
            ));
        }
    }
    Ok(())
}

/// Rejects a tool response that no call is waiting for: one after a turn with no calls, or
/// beyond the calls of the assistant turn before it (`orphan_tool_response`), whatever the
/// format. A conversation that opens with tool responses is left to validation (which rejects
/// it as `invalid_field`).
pub fn check_orphans(messages: &[Message]) -> Result<(), Reject> {
    let mut pending = 0usize;
    let mut opened = false;
    for (i, m) in messages.iter().enumerate() {
        match m.role {
            Role::Assistant => {
                pending = m.tool_calls.len();
                opened = true;
            }
            Role::Tool if opened => {
                if pending == 0 {
                    return Err(Reject::new(
                        RejectReason::OrphanToolResponse,
                        format!("message {i} is a tool response, but no call is waiting for one"),
                    ));
                }
                pending -= 1;
            }
            Role::Tool | Role::System => {}
            Role::User => {
                pending = 0;
                opened = true;
            }
        }
    }
    Ok(())
}

/// Gives id-less calls `call_N` ids and pairs each tool response with the oldest unanswered
/// call of the assistant turn before it (filling its `tool_call_id` and `name`). A tool
/// response with no call left to answer is rejected.
pub fn pair_responses(messages: &mut [Message], repairs: &mut Repairs) -> Result<(), Reject> {
    let mut next = 0usize;
    let mut synthesized = false;
    let mut pending: VecDeque<(Option<String>, String)> = VecDeque::new();
    for (i, m) in messages.iter_mut().enumerate() {
        match m.role {
            Role::Assistant => {
                pending.clear();
                for call in &mut m.tool_calls {
                    if call.id.is_none() {
                        call.id = Some(format!("call_{next}"));
                        next += 1;
                        synthesized = true;
                    }
                    pending.push_back((call.id.clone(), call.name.clone()));
                }
            }
            Role::Tool => {
                let Some((id, name)) = pending.pop_front() else {
                    return Err(Reject::new(
                        RejectReason::OrphanToolResponse,
                        format!("message {i} is a tool response, but no call is waiting for one"),
                    ));
                };
                if m.tool_call_id.is_none() {
                    m.tool_call_id = id;
                }
                if m.name.is_none() {
                    m.name = Some(name);
                }
            }
            Role::User | Role::System => pending.clear(),
        }
    }
    if synthesized {
        repairs.push(Repair::ToolCallIdsSynthesized);
    }
    Ok(())
}

/// The common end of the tool-calling adapters: one definition per tool name, every call
/// declared, every tool response paired with its call.
pub fn finish(
    mut tool_list: Vec<Value>,
    mut messages: Vec<Message>,
    repairs: &mut Repairs,
) -> Result<Conversation, Reject> {
    dedupe(&mut tool_list, &messages, repairs);
    check_declared(&tool_list, &messages)?;
    pair_responses(&mut messages, repairs)?;
    Ok(Conversation {
        messages,
        tools: tool_list,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use indexmap::IndexMap;
    use serde_json::json;

    fn call(name: &str, args: Value) -> ToolCall {
        let arguments: IndexMap<String, Value> = args
            .as_object()
            .map(|o| o.clone().into_iter().collect())
            .unwrap_or_default();
        ToolCall {
            id: None,
            name: name.into(),
            arguments,
        }
    }

    #[test]
    fn dedupe_prefers_the_definition_the_calls_match() {
        let a = json!({"name": "f", "parameters": {"properties": {"x": {}}}});
        let b = json!({"name": "f", "parameters": {"properties": {"y": {}}}});
        let messages =
            vec![Message::assistant("").with_tool_calls(vec![call("f", json!({"y": 1}))])];
        let mut tools = vec![a.clone(), b.clone()];
        let mut repairs = Repairs::new();
        dedupe(&mut tools, &messages, &mut repairs);
        assert_eq!(tools, vec![b.clone()]);
        assert_eq!(repairs, vec![Repair::DuplicateToolDropped]);
        // No call: the first definition wins.
        let mut tools = vec![a.clone(), b];
        dedupe(&mut tools, &[], &mut repairs);
        assert_eq!(tools, vec![a]);
    }

    #[test]
    fn pairing_synthesizes_ids_and_rejects_orphans() {
        let mut messages = vec![
            Message::user("q"),
            Message::assistant("")
                .with_tool_calls(vec![call("f", json!({})), call("g", json!({}))]),
            Message::tool("1"),
            Message::tool("2"),
        ];
        let mut repairs = Repairs::new();
        pair_responses(&mut messages, &mut repairs).expect("pairs");
        assert_eq!(messages[3].tool_call_id.as_deref(), Some("call_1"));
        assert_eq!(messages[3].name.as_deref(), Some("g"));
        messages.push(Message::tool("3"));
        let err = pair_responses(&mut messages, &mut repairs).expect_err("orphan");
        assert_eq!(err.reason, RejectReason::OrphanToolResponse);
    }
}
