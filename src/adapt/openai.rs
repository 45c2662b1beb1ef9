//! `openai`: `{"messages": [{"role", "content", "tool_calls", "reasoning_content", ...}], "tools": [...]}`.
//! Tools are kept exactly as given (they are what the template renders).

use super::fields::{
    has_calls, kind, list_or_json_string, message_content, message_role, optional_str, tool_call,
};
use super::{Repairs, Row};
use crate::conversation::{Conversation, Message, Role};
use crate::model::json_exact;
use crate::reject::{Reject, RejectReason};
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;

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
    /// A JSON line adapted straight from its text, when it has the plain shape (see
    /// [`TypedRow`]) and adapts without a reject; `None` otherwise, for [`adapt`](Self::adapt)
    /// on the parsed value, which is the reference: whenever this returns a conversation it is
    /// the one `adapt` returns, with the same repairs (tested on every fixture and on edge
    /// cases). Skips building a JSON tree and copying its strings: about half the cost of
    /// parsing and adapting a row.
    pub fn adapt_line(&self, line: &[u8]) -> Option<(Conversation, Repairs)> {
        if self.messages != "messages" || self.tools != "tools" {
            return None;
        }
        let Object(row): Object<TypedRow> = serde_json::from_slice(line).ok()?;
        // A number serde_json reads differently from Python (`-0`, an integer outside 64
        // bits) takes the reference path, which reads it exactly or rejects the row.
        let values = row.tools.iter().flatten().chain(
            row.messages
                .iter()
                .flat_map(|Object(m)| m.tool_calls.iter().flatten()),
        );
        if values.into_iter().any(json_exact::holds_suspect) {
            return None;
        }
        let media = [
            &row.images,
            &row.image,
            &row.videos,
            &row.video,
            &row.audios,
            &row.audio,
        ];
        if media.iter().any(|m| m.is_some()) {
            return None;
        }
        let mut repairs = Repairs::new();
        let mut messages = Vec::with_capacity(row.messages.len());
        for (i, Object(m)) in row.messages.into_iter().enumerate() {
            messages.push(m.into_message(i, &mut repairs)?);
        }
        let tools = row.tools.unwrap_or_default();
        if !tools.iter().all(Value::is_object) {
            return None;
        }
        Some((Conversation { messages, tools }, repairs))
    }

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
    let makes_calls = role == Role::Assistant && has_calls(m, &["tool_calls"]);
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

/// A row of the plain shape: `messages` a list of message objects, `tools` a list or `null`
/// or absent; other fields ignored, as `adapt` ignores them. Anything else (a field of another
/// type, a duplicate key, content parts, a JSON string for a list) fails to deserialize and the
/// row takes the reference path.
#[derive(Deserialize)]
struct TypedRow<'a> {
    #[serde(borrow)]
    messages: Vec<Object<TypedMessage<'a>>>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    /// Any media column present (not `null`) sends the row to the reference path, which
    /// rejects it unless it is empty.
    #[serde(default)]
    images: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    image: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    videos: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    video: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    audios: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    audio: Option<serde::de::IgnoredAny>,
}

/// The message fields `message` reads, each a string or `null` (tool calls kept as JSON for
/// the shared `tool_call`).
#[derive(Deserialize)]
struct TypedMessage<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow, default)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<Vec<Value>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_call_id: Option<Cow<'a, str>>,
}

impl TypedMessage<'_> {
    /// What `message` makes of the same object; `None` where it would reject.
    fn into_message(self, index: usize, repairs: &mut Repairs) -> Option<Message> {
        let role = parse_role(&self.role)?;
        let makes_calls =
            role == Role::Assistant && self.tool_calls.as_ref().is_some_and(|c| !c.is_empty());
        // No content is only valid beside calls; `message` rejects the rest.
        let content = match self.content {
            Some(c) => c,
            None if makes_calls => Cow::Borrowed(""),
            None => return None,
        };
        let mut message = Message::new(role, content);
        match role {
            Role::Assistant => {
                message.reasoning = [self.reasoning_content, self.reasoning, self.thinking]
                    .into_iter()
                    .flatten()
                    .next()
                    .map(Cow::into_owned);
                for (i, c) in self.tool_calls.iter().flatten().enumerate() {
                    let field = format!("messages[{index}].tool_calls[{i}]");
                    message.tool_calls.push(tool_call(c, &field, repairs).ok()?);
                }
            }
            Role::Tool => {
                message.name = self.name.map(Cow::into_owned);
                message.tool_call_id = self.tool_call_id.map(Cow::into_owned);
            }
            Role::System | Role::User => {}
        }
        Some(message)
    }
}

/// The fields a struct reads; any other field's value is checked by [`Guard`].
trait Fields {
    const FIELDS: &'static [&'static str];
}

impl Fields for TypedRow<'_> {
    const FIELDS: &'static [&'static str] = &[
        "messages", "tools", "images", "image", "videos", "video", "audios", "audio",
    ];
}

impl Fields for TypedMessage<'_> {
    const FIELDS: &'static [&'static str] = &[
        "role",
        "content",
        "reasoning_content",
        "reasoning",
        "thinking",
        "tool_calls",
        "name",
        "tool_call_id",
    ];
}

/// A struct read from a JSON object only: serde's derived structs also accept an array of
/// their fields, which `adapt` rejects. Fields the struct ignores are still walked for
/// numbers that [`json_exact`] reads differently (which fail the fast path): the reference
/// path reads the whole record exactly, so both must see them.
struct Object<T>(T);

impl<'de, T: Deserialize<'de> + Fields> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Fields> serde::de::Visitor<'de> for Visit<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(Guarded {
                    map,
                    known: T::FIELDS,
                    ignored: false,
                }))
            }
        }
        deserializer
            .deserialize_map(Visit(std::marker::PhantomData))
            .map(Object)
    }
}

/// A map whose values under keys not in `known` are read as [`Guard`] (and handed to the
/// struct as `()`, which its ignored-field reader accepts).
struct Guarded<A> {
    map: A,
    known: &'static [&'static str],
    /// The current key is not a field of the struct.
    ignored: bool,
}

impl<'de, A: serde::de::MapAccess<'de>> serde::de::MapAccess<'de> for Guarded<A> {
    type Error = A::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        use serde::de::value::{BorrowedStrDeserializer, StringDeserializer};
        let Some(Key(key)) = self.map.next_key::<Key<'de>>()? else {
            return Ok(None);
        };
        self.ignored = !self.known.contains(&key.as_ref());
        match key {
            Cow::Borrowed(k) => seed.deserialize(BorrowedStrDeserializer::new(k)).map(Some),
            Cow::Owned(k) => seed.deserialize(StringDeserializer::new(k)).map(Some),
        }
    }

    fn next_value_seed<V: serde::de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, A::Error> {
        if self.ignored {
            self.map.next_value::<Guard>()?;
            seed.deserialize(serde::de::value::UnitDeserializer::new())
        } else {
            self.map.next_value_seed(seed)
        }
    }
}

/// A key, borrowed from the line where it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, k: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(k)))
            }
            fn visit_str<E>(self, k: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(k.to_owned())))
            }
        }
        deserializer.deserialize_str(Visit)
    }
}

/// Any JSON value, kept nowhere, that fails on a number [`json_exact::is_suspect`] flags.
struct Guard;

impl<'de> Deserialize<'de> for Guard {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{Error, MapAccess, SeqAccess};
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Guard;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Guard, E> {
                Ok(Guard)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Guard, E> {
                Ok(Guard)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Guard, E> {
                Ok(Guard)
            }
            fn visit_f64<E: Error>(self, x: f64) -> Result<Guard, E> {
                match serde_json::Number::from_f64(x) {
                    Some(n) if json_exact::is_suspect(&n) => Err(E::custom("inexact number")),
                    _ => Ok(Guard),
                }
            }
            fn visit_str<E>(self, _: &str) -> Result<Guard, E> {
                Ok(Guard)
            }
            fn visit_unit<E>(self) -> Result<Guard, E> {
                Ok(Guard)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Guard, A::Error> {
                while seq.next_element::<Guard>()?.is_some() {}
                Ok(Guard)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Guard, A::Error> {
                while map.next_entry::<serde::de::IgnoredAny, Guard>()?.is_some() {}
                Ok(Guard)
            }
        }
        deserializer.deserialize_any(Visit)
    }
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

impl super::Format for OpenAiAdapter {
    const READS: super::Reads = super::Reads {
        columns: &[super::Column::Messages, super::Column::Tools],
        tags: false,
        resolved_only: false,
    };

    fn configure(settings: &super::Settings) -> Self {
        let mut a = OpenAiAdapter::default();
        settings.column(super::Column::Messages, &mut a.messages);
        settings.column(super::Column::Tools, &mut a.tools);
        a
    }

    fn adapt(&self, row: &Row, repairs: &mut Repairs) -> Result<Conversation, Reject> {
        OpenAiAdapter::adapt(self, row, repairs)
    }
}
