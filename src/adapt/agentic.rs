//! `agentic`: agent trajectories for coding tasks. One format reads the shapes of five sources,
//! told apart per row by their columns (no option to set; a new shape is a new branch here):
//!
//! | columns | source | messages |
//! |---|---|---|
//! | `messages_json` | thoughtworks/agentic-coding-trajectories | JSON string of `{role, content, tool_calls_json, tool_call_id}`; `tool_calls_json` a JSON string of OpenAI calls whose `arguments` are JSON strings |
//! | `messages` | SWE-bench/SWE-smith-trajectories | a list or a JSON string; `content` a string or text parts; `agent`; `tool_calls` |
//! | `messages` + `tools` | SWE-Gym/OpenHands-Sampled-Trajectories | OpenAI messages (`tool_calls`, `function_call`, `name`, `tool_call_id`) |
//! | `trajectory` of OpenAI messages + `tools` | nebius/SWE-rebench-openhands-trajectories | as above |
//! | `trajectory` of `{role, text, system_prompt, mask, cutoff_date}` | nebius/SWE-agent-trajectories | roles `system` / `user` / `ai` |
//!
//! Rules:
//! - Tool-call `arguments` given as JSON strings are parsed into objects (`tool_arguments_parsed`).
//! - Tools come from a `tools` column when there is one (OpenAI objects, or bare functions that
//!   get wrapped; a string `parameters` is parsed). thoughtworks and SWE-smith have none: their
//!   tool schemas are lost upstream, so rows render without a tool block, and calls are not
//!   checked against declared tools (agent frameworks call built-ins such as `finish`).
//! - An assistant turn without structured calls that ends in SWE-agent's XML tool syntax
//!   (`<function=bash>\n<parameter=command>ls</parameter>\n</function>`) gets those as calls
//!   (`text_tool_call_parsed`; parameter values stay strings, which render identically).
//! - Environment output sent as a user turn becomes a tool response (`observations_as_tool`),
//!   so that a trajectory has one real user query: otherwise every observation would count as
//!   a query, `expand` would emit one row per step and the template would drop all reasoning
//!   before the last one. Rule: a user message right after an assistant turn whose text
//!   starts with `OBSERVATION:`; in the SWE-agent shape every user item after the first `ai`.
//! - SWE-smith messages whose `agent` is not `main` are dropped (`subagent_messages_dropped`).
//! - Null-valued keys in tool schemas are dropped (`tool_schema_nulls_dropped`): Parquet struct
//!   columns pad every tool with the union of all tools' keys.
//! - SWE-agent: the system item's prompt is `system_prompt` (its `text` is null); `ai` is the
//!   assistant. The `mask` flag is not used: every assistant turn is supervised (the
//!   conversation type has no per-turn weights), and `cutoff_date` is ignored.
//! - Contents are kept verbatim (`OBSERVATION:` prefixes included).
//!
//! `resolved_only: true` filters (reason `unresolved`, counted, not rejected) every row not
//! known to be resolved: `ground_truth_meta_json.resolved` (thoughtworks), `resolved` (bool or
//! 0/1: SWE-smith, SWE-Gym, OpenHands) or `target` (SWE-agent); a missing or null value counts
//! as not resolved. The filter runs before the messages are parsed.
//!
//! | outcome | code | when |
//! |---|---|---|
//! | reject | `missing_field` | none of `messages_json`, `trajectory`, `messages` |
//! | reject | `invalid_field` | a messages column or `ground_truth_meta_json` that is not valid JSON / not a list; a message that is not an object |
//! | reject | `unknown_role` | a role other than system, user, assistant (`ai` in SWE-agent), tool |
//! | reject | `invalid_tool_arguments` | arguments that are not an object or a JSON string of one |
//! | reject | `invalid_tools` | a `tools` entry that is not a named function object |
//! | reject | `multimodal_content` | image/audio parts |
//!
//! Metadata: the ids and labels each shape has (`session_id`, `instance_id`, `run_id`, ...) and
//! `resolved` when known.

use super::calls::trailing_xml_functions;
use super::fields::{
    has_calls, kind, list_or_json_string, message_content, message_role, optional_str, tool_call,
};
use super::openai::parse_role;
use super::{tools, Repairs, Row};
use crate::conversation::{py_trim, Conversation, Message, Role};
use crate::reject::{FilterReason, Reject, RejectReason, Repair};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Default)]
pub struct AgenticAdapter {
    /// Leave out trajectories not known to be resolved (filter reason `unresolved`).
    pub resolved_only: bool,
}

enum Shape {
    Thoughtworks,
    OpenAi(&'static str),
    SweAgent,
}

impl AgenticAdapter {
    pub fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        let shape = shape(row)?;
        let converted_shape = matches!(shape, Shape::SweAgent);
        let mut messages = match shape {
            Shape::Thoughtworks => {
                // A JSON string by definition: parsing it is no repair.
                let raw = required_list(row, "messages_json", &mut Repairs::new())?;
                let mut messages = Vec::with_capacity(raw.len());
                for (i, m) in raw.iter().enumerate() {
                    messages.push(message(m, &format!("messages_json[{i}]"), repairs)?);
                }
                messages
            }
            Shape::OpenAi(column) => {
                let raw = required_list(row, column, &mut Repairs::new())?;
                let mut messages = Vec::with_capacity(raw.len());
                let mut dropped = false;
                for (i, m) in raw.iter().enumerate() {
                    let agent = m.get("agent").and_then(Value::as_str);
                    if agent.is_some_and(|a| a != "main") {
                        dropped = true;
                        continue;
                    }
                    messages.push(message(m, &format!("{column}[{i}]"), repairs)?);
                }
                if dropped {
                    repairs.push(Repair::SubagentMessagesDropped);
                }
                messages
            }
            Shape::SweAgent => swe_agent(row, repairs)?,
        };
        text_calls(&mut messages, repairs);
        // Tool turns the source wrote as such must answer a call (the SWE-agent shape has
        // none: its observations are user items, turned into tool responses above).
        if !converted_shape {
            tools::check_orphans(&messages)?;
        }
        observations(&mut messages, repairs);
        let mut tool_list = Vec::new();
        let column = list_or_json_string(row, "tools", &mut Repairs::new())
            .map_err(|r| Reject::new(RejectReason::InvalidTools, r.message))?;
        let mut nulls = false;
        for (i, mut t) in column.unwrap_or_default().into_iter().enumerate() {
            nulls |= tools::drop_nulls(&mut t);
            tool_list.push(tools::normalize(t, &format!("tools[{i}]"), repairs)?);
        }
        if nulls {
            repairs.push(Repair::ToolSchemaNullsDropped);
        }
        let listed = system_tool_listing(&mut messages, !tool_list.is_empty(), repairs);
        for (i, t) in listed.into_iter().enumerate() {
            tool_list.push(tools::normalize(
                t,
                &format!("system prompt tools[{i}]"),
                repairs,
            )?);
        }
        tools::dedupe(&mut tool_list, &messages, repairs);
        Ok(Conversation {
            messages,
            tools: tool_list,
        })
    }

    /// `Some(Unresolved)` when `resolved_only` is set and the row is not known to be resolved.
    pub fn filter(&self, row: &Row) -> Result<Option<FilterReason>, Reject> {
        if !self.resolved_only {
            return Ok(None);
        }
        Ok(match resolution(row)? {
            Some(true) => None,
            Some(false) | None => Some(FilterReason::Unresolved),
        })
    }

    pub fn metadata(&self, row: &Row) -> Map<String, Value> {
        let mut meta = super::scalar_fields(
            row,
            &[
                "session_id",
                "source_dataset",
                "agent_framework",
                "recorded_model",
                "instance_id",
                "run_id",
                "traj_id",
                "trajectory_id",
                "model",
                "model_name",
                "exit_status",
            ],
        );
        if let Ok(Some(resolved)) = resolution(row) {
            meta.insert("resolved".into(), Value::Bool(resolved));
        }
        meta
    }
}

fn shape(row: &Row) -> Result<Shape, Reject> {
    if row.contains_key("messages_json") {
        return Ok(Shape::Thoughtworks);
    }
    if let Some(trajectory) = row.get("trajectory") {
        let first = match trajectory {
            Value::Array(a) => a.first(),
            _ => None,
        };
        let swe_agent =
            first.is_some_and(|m| m.get("text").is_some() || m.get("system_prompt").is_some());
        return Ok(if swe_agent {
            Shape::SweAgent
        } else {
            Shape::OpenAi("trajectory")
        });
    }
    if row.contains_key("messages") {
        return Ok(Shape::OpenAi("messages"));
    }
    Err(Reject::new(
        RejectReason::MissingField,
        "none of the fields `messages_json`, `trajectory`, `messages` is present",
    ))
}

fn required_list(row: &Row, field: &str, repairs: &mut Repairs) -> Result<Vec<Value>, Reject> {
    list_or_json_string(row, field, repairs)?.ok_or_else(|| {
        Reject::new(
            RejectReason::MissingField,
            format!("field `{field}` is missing"),
        )
    })
}

/// One OpenAI-style message, with the thoughtworks (`tool_calls_json`) and legacy
/// (`function_call`) spellings of calls.
fn message(value: &Value, field: &str, repairs: &mut Repairs) -> Result<Message, Reject> {
    let (m, role) = message_role(value, field)?;
    let role = match role {
        "function" => Role::Tool,
        other => parse_role(other).ok_or_else(|| {
            Reject::new(
                RejectReason::UnknownRole,
                format!("`{field}.role` is `{other}`; expected system, user, assistant or tool"),
            )
        })?,
    };
    let makes_calls = role == Role::Assistant && has_calls(m, &["tool_calls", "tool_calls_json"]);
    let (content, part_breaks) = message_content(
        m.get("content"),
        &format!("{field}.content"),
        makes_calls,
        repairs,
    )?;
    let mut message = Message::new(role, content);
    message.part_breaks = part_breaks;
    match role {
        Role::Assistant => {
            for key in ["reasoning_content", "reasoning"] {
                if let Ok(Some(r)) = optional_str(m, key) {
                    message.reasoning = Some(r.to_owned());
                    break;
                }
            }
            let mut calls = Vec::new();
            for key in ["tool_calls", "tool_calls_json"] {
                let list =
                    list_or_json_string(m, key, &mut Repairs::new()).map_err(|r| Reject {
                        message: format!("`{field}`: {}", r.message),
                        ..r
                    })?;
                if let Some(list) = list {
                    calls = list;
                    break;
                }
            }
            if calls.is_empty() {
                if let Some(f @ Value::Object(_)) = m.get("function_call") {
                    calls.push(f.clone());
                }
            }
            for (i, c) in calls.iter().enumerate() {
                message.tool_calls.push(tool_call(
                    c,
                    &format!("{field}.tool_calls[{i}]"),
                    repairs,
                )?);
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

/// nebius/SWE-agent-trajectories: `{role: system|user|ai, text, system_prompt}` items.
fn swe_agent(row: &Row, repairs: &mut Repairs) -> Result<Vec<Message>, Reject> {
    let raw = required_list(row, "trajectory", &mut Repairs::new())?;
    let mut messages = Vec::with_capacity(raw.len());
    let mut seen_ai = false;
    let mut converted = false;
    for (i, item) in raw.iter().enumerate() {
        let field = format!("trajectory[{i}]");
        let Value::Object(item) = item else {
            return Err(Reject::new(
                RejectReason::InvalidField,
                format!("`{field}` is a {}, expected an object", kind(item)),
            ));
        };
        let role = optional_str(item, "role")?.ok_or_else(|| {
            Reject::new(
                RejectReason::MissingField,
                format!("`{field}.role` is missing"),
            )
        })?;
        let text = optional_str(item, "text")?;
        let required_text = || {
            text.ok_or_else(|| {
                Reject::new(
                    RejectReason::MissingField,
                    format!("`{field}.text` is missing or null"),
                )
            })
        };
        match role {
            "system" => {
                let prompt = optional_str(item, "system_prompt")?.or(text).unwrap_or("");
                messages.push(Message::system(prompt));
            }
            "user" if seen_ai => {
                messages.push(Message::tool(required_text()?));
                converted = true;
            }
            "user" => messages.push(Message::user(required_text()?)),
            "ai" | "assistant" => {
                seen_ai = true;
                messages.push(Message::assistant(required_text()?));
            }
            other => {
                return Err(Reject::new(
                    RejectReason::UnknownRole,
                    format!("`{field}.role` is `{other}`; expected system, user or ai"),
                ))
            }
        }
    }
    if converted {
        repairs.push(Repair::ObservationsAsTool);
    }
    Ok(messages)
}

/// XML calls written at the end of assistant text become calls.
fn text_calls(messages: &mut [Message], repairs: &mut Repairs) {
    let mut parsed = false;
    for m in messages.iter_mut() {
        if m.role == Role::Assistant && m.tool_calls.is_empty() {
            if let Some((before, calls)) = trailing_xml_functions(&m.content) {
                m.content = py_trim(before).to_owned();
                m.part_breaks.clear(); // the parts are cut: joined as they are
                m.tool_calls = calls;
                parsed = true;
            }
        }
    }
    if parsed {
        repairs.push(Repair::TextToolCallParsed);
    }
}

/// A user turn that answers an assistant turn's unanswered call, whatever its wording (SWE-smith:
/// "Your command ran successfully and did not produce any output."), or that starts with
/// `OBSERVATION:` right after an assistant turn, becomes a tool response (with the call's id
/// when it has one).
fn observations(messages: &mut [Message], repairs: &mut Repairs) {
    let mut converted = false;
    // Ids of the calls of the last assistant turn not answered yet (`None`: a call without id).
    let mut pending: std::collections::VecDeque<Option<String>> = Default::default();
    for i in 0..messages.len() {
        let after_assistant = i > 0 && messages[i - 1].role == Role::Assistant;
        let m = &mut messages[i];
        match m.role {
            Role::Assistant => {
                pending = m.tool_calls.iter().map(|c| c.id.clone()).collect();
            }
            Role::Tool => {
                pending.pop_front();
            }
            Role::User => {
                let observation =
                    after_assistant && py_trim(&m.content).starts_with("OBSERVATION:");
                if let Some(call) = pending.pop_front() {
                    m.role = Role::Tool;
                    if m.tool_call_id.is_none() {
                        m.tool_call_id = call;
                    }
                    converted = true;
                } else if observation {
                    m.role = Role::Tool;
                    converted = true;
                } else {
                    // A real query: whatever was waiting is not answered any more.
                    pending.clear();
                }
            }
            Role::System => {}
        }
    }
    if converted {
        repairs.push(Repair::ObservationsAsTool);
    }
}

/// A function listing in the system prompt (SWE-agent / OpenHands' `---- BEGIN FUNCTION #1`
/// blocks) becomes the row's tools and leaves the system text (with its call-format
/// instructions: the template writes its own), when the row has no tools column of its own;
/// one that cannot be parsed exactly stays in the text and is counted.
fn system_tool_listing(
    messages: &mut [Message],
    has_tools: bool,
    repairs: &mut Repairs,
) -> Vec<Value> {
    use super::fn_listing::{extract, Listing};
    let Some(system) = messages.first_mut().filter(|m| m.role == Role::System) else {
        return Vec::new();
    };
    match extract(&system.content) {
        Listing::None => Vec::new(),
        Listing::Parsed { tools, text } if !has_tools => {
            system.content = text;
            system.part_breaks.clear();
            repairs.push(Repair::ToolListingParsed);
            tools
        }
        // Unparseable, or declared twice (the column is what the calls were made against).
        Listing::Parsed { .. } | Listing::Unparsed => {
            repairs.push(Repair::ToolListingKept);
            Vec::new()
        }
    }
}

/// Whether the trajectory solved its task: `None` when the row does not say.
fn resolution(row: &Row) -> Result<Option<bool>, Reject> {
    if let Some(meta) = row.get("ground_truth_meta_json") {
        let parsed;
        let meta = match meta {
            Value::Null => return Ok(None),
            Value::String(s) => {
                parsed = serde_json::from_str::<Value>(s).map_err(|e| {
                    Reject::new(
                        RejectReason::InvalidField,
                        format!("field `ground_truth_meta_json` is not valid JSON: {e}"),
                    )
                })?;
                &parsed
            }
            other => other,
        };
        return flag(meta.get("resolved"), "ground_truth_meta_json.resolved");
    }
    if row.contains_key("resolved") {
        return flag(row.get("resolved"), "resolved");
    }
    flag(row.get("target"), "target")
}

fn flag(value: Option<&Value>, field: &str) -> Result<Option<bool>, Reject> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(Value::Number(n)) => Ok(Some(n.as_f64().is_some_and(|f| f != 0.0))),
        Some(other) => Err(Reject::new(
            RejectReason::InvalidField,
            format!("`{field}` is a {}, expected a boolean", kind(other)),
        )),
    }
}

impl super::Format for AgenticAdapter {
    const READS: super::Reads = super::Reads {
        resolved_only: true,
        ..super::Reads::EXACT
    };
    // It checks the tool turns of the source itself: the observations it turns into tool
    // responses answer calls written in text, or none.
    const CHECKS_TOOL_RESPONSES: bool = true;

    fn configure(settings: &super::Settings) -> Self {
        AgenticAdapter {
            resolved_only: settings.options.resolved_only.unwrap_or(false),
        }
    }

    fn filter(&self, row: &Row) -> Result<Option<crate::reject::FilterReason>, Reject> {
        AgenticAdapter::filter(self, row)
    }

    fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        AgenticAdapter::adapt(self, row, repairs)
    }

    fn metadata(&self, row: &Row) -> serde_json::Map<String, serde_json::Value> {
        AgenticAdapter::metadata(self, row)
    }
}
