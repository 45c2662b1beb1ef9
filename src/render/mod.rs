//! Render stage: [`Conversation`] → text, with the model's own Jinja chat template.
//!
//! The template file is used byte for byte; only the Jinja environment is shaped to behave like
//! `transformers.apply_chat_template` (jinja2 with `trim_blocks`, `lstrip_blocks`, a
//! `json.dumps`-compatible `tojson`, `raise_exception`, Python string methods and `str()`/`strip()`
//! semantics). A template error is returned per row; it never aborts a run. For the official
//! Qwen3.6/Qwen3.5 files, [`native`] evaluates the same template without the interpreter.
//!
//! Every minijinja render is bounded ([`Limits`]): a fuel budget (minijinja counts one fuel per
//! instruction and about one per 64 bytes of data the template creates, so fuel bounds both
//! time and memory) and a cap on the output, both growing with the size of the row, so that a
//! runaway template (an endless loop, a string doubled until memory runs out) fails that row
//! (`template`, naming the limit) in milliseconds instead of hanging or killing the build. The
//! native renderer's loops run over the messages, calls and arguments of the row: linear.

mod native;
mod policy;
mod pycompat;

pub use policy::{plan_rows, RenderPolicy, RowSpec};

use crate::conversation::Conversation;
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind, State};
use serde_json::{Map, Value as Json};
use std::sync::OnceLock;

const TEMPLATE_NAME: &str = "chat_template";

/// The bounds on one minijinja render, from the size of what it renders: `weight`, the bytes
/// of the messages', tools' and variables' JSON text, and the number of messages.
///
/// Measured with the official templates (Qwen3.6, Qwen3.5, Qwen3) over the oracle cases, the
/// demo rows and synthetic trajectories up to 23 MB and 4,000 messages (`tests/it/hostile.rs`,
/// `template_limits_leave_a_wide_margin`): every render stays at least 23x under its fuel and
/// 16x under its output cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub fuel: u64,
    pub output_bytes: u64,
}

/// Fuel of the smallest budget; budgets are this times a power of two.
pub const BASE_FUEL: u64 = 1 << 18;
pub const FUEL_PER_BYTE: u64 = 2;
pub const FUEL_PER_MESSAGE: u64 = 2_000;
pub const BASE_OUTPUT_BYTES: u64 = 1 << 20;
pub const OUTPUT_PER_BYTE: u64 = 16;
/// Budgets `BASE_FUEL << k` for `k < FUEL_TIERS` (the last is 2^43 fuel: never reached by a
/// row under `max_row_bytes`).
const FUEL_TIERS: usize = 24;

impl Limits {
    /// The limits for a render of `weight` bytes of JSON with `messages` messages. Fuel is
    /// rounded up to a power-of-two multiple of [`BASE_FUEL`] (one compiled environment each).
    pub fn for_input(weight: u64, messages: u64) -> Limits {
        let needed = BASE_FUEL
            .saturating_add(FUEL_PER_BYTE.saturating_mul(weight))
            .saturating_add(FUEL_PER_MESSAGE.saturating_mul(messages));
        Limits {
            fuel: BASE_FUEL << Self::tier(needed),
            output_bytes: BASE_OUTPUT_BYTES.saturating_add(OUTPUT_PER_BYTE.saturating_mul(weight)),
        }
    }

    fn tier(fuel: u64) -> usize {
        (0..FUEL_TIERS - 1)
            .find(|&k| BASE_FUEL << k >= fuel)
            .unwrap_or(FUEL_TIERS - 1)
    }
}

/// What one minijinja render used, against its limits (for measuring the margins).
#[derive(Debug, Clone, Copy)]
pub struct RenderCost {
    pub weight: u64,
    pub messages: u64,
    pub fuel: u64,
    pub output_bytes: u64,
    pub limits: Limits,
}

/// Bytes of `value`'s JSON text, about: strings plus a few bytes per other value.
fn json_weight(value: &Json) -> u64 {
    match value {
        Json::String(s) => s.len() as u64 + 2,
        Json::Array(items) => 2 + items.iter().map(json_weight).sum::<u64>(),
        Json::Object(fields) => {
            2 + fields
                .iter()
                .map(|(k, v)| k.len() as u64 + 3 + json_weight(v))
                .sum::<u64>()
        }
        _ => 4,
    }
}

/// An output sink that fails past its cap (the render then stops with a write error).
struct CappedOutput {
    text: Vec<u8>,
    cap: u64,
    exceeded: bool,
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if (self.text.len() + buf.len()) as u64 > self.cap {
            self.exceeded = true;
            return Err(std::io::Error::other("output cap"));
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A compiled chat template. Cheap to share across threads (`&Renderer` is `Sync`).
pub struct Renderer {
    /// The template compiled once per fuel budget, `BASE_FUEL << k` for tier `k`, on first use.
    envs: Vec<OnceLock<Environment<'static>>>,
    source: String,
    /// Extra variables passed to every render (`enable_thinking`, `preserve_thinking`, ...).
    kwargs: Map<String, Json>,
    /// The same template evaluated natively, when the file is one [`native`] reproduces.
    native: Option<native::Native>,
    /// How a message's text parts are joined ([`Self::text_part_separator`]).
    part_separator: &'static str,
}

/// How training rows are rendered (`template.engine` in the pipeline config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Engine {
    /// Native evaluation for the official Qwen3.5/Qwen3.6 template files (byte-identical,
    /// spot-checked against minijinja during builds), minijinja for every other template.
    #[default]
    Auto,
    /// Always minijinja.
    Minijinja,
}

/// vLLM's content-format detection (`_detect_content_format`): `""` when the template has a
/// `for` loop over a message's content (`message.content`, `message['content']`, optionally
/// filtered) or over a variable named `content`, else `"\n"`.
fn text_part_separator(source: &str) -> &'static str {
    static LOOP: OnceLock<regex::Regex> = OnceLock::new();
    let re = LOOP.get_or_init(|| {
        regex::Regex::new(
            r#"\{%[-+]?\s*for\s+\w+\s+in\s+(?:content\b|\w+\s*(?:\.\s*content\b|\[\s*['"]content['"]\s*\]))"#,
        )
        .expect("a valid pattern")
    });
    if re.is_match(source) {
        ""
    } else {
        "\n"
    }
}

/// Why a template failed to compile.
#[derive(Debug, thiserror::Error)]
#[error("the chat template does not compile: {0:#}")]
pub struct TemplateCompileError(#[source] Error);

impl Renderer {
    /// Compiles `source` (the exact text of `chat_template.jinja`) with the given template kwargs.
    pub fn new(source: &str, kwargs: Map<String, Json>) -> Result<Self, TemplateCompileError> {
        Self::with_engine(source, kwargs, Engine::Auto)
    }

    /// Compiles `source`, rendering training rows natively when `engine` allows it and the
    /// template is one the native renderer reproduces.
    pub fn with_engine(
        source: &str,
        kwargs: Map<String, Json>,
        engine: Engine,
    ) -> Result<Self, TemplateCompileError> {
        let envs: Vec<OnceLock<Environment<'static>>> =
            (0..FUEL_TIERS).map(|_| OnceLock::new()).collect();
        // The smallest budget compiled now, so that a template that does not compile fails here.
        let _ = envs[0].set(environment(source, BASE_FUEL)?);
        let native = match engine {
            Engine::Auto => native::Native::for_template(source, &kwargs),
            Engine::Minijinja => None,
        };
        Ok(Renderer {
            envs,
            source: source.to_owned(),
            kwargs,
            native,
            part_separator: text_part_separator(source),
        })
    }

    /// How the text parts of a message (content given as a list of `{"type": "text"}` parts)
    /// are joined for this template, as vLLM does: a template that loops over a message's
    /// content (`for item in message.content`, or `for item in content` as Qwen3.5/3.6 do in
    /// their `render_content` macro) gets the parts and concatenates them itself, so they are
    /// joined with nothing; any other template (Qwen3) gets one string, the parts joined with
    /// `"\n"` (vLLM's "string" content format).
    pub fn text_part_separator(&self) -> &'static str {
        self.part_separator
    }

    /// `conversation` with its text parts joined for this template.
    fn joined<'a>(&self, conversation: &'a Conversation) -> std::borrow::Cow<'a, Conversation> {
        if !conversation.has_text_parts() {
            return std::borrow::Cow::Borrowed(conversation);
        }
        let mut joined = conversation.clone();
        joined.join_text_parts(self.part_separator);
        std::borrow::Cow::Owned(joined)
    }

    /// The template compiled with fuel `BASE_FUEL << tier`.
    fn env(&self, tier: usize) -> Result<&Environment<'static>, Error> {
        if let Some(env) = self.envs[tier].get() {
            return Ok(env);
        }
        // It compiled at the smallest budget, so it compiles at every other.
        let env = environment(&self.source, BASE_FUEL << tier).map_err(|e| e.0)?;
        Ok(self.envs[tier].get_or_init(|| env))
    }

    /// The template the native renderer evaluates (`qwen3.6`, `qwen3.5`), if it is in use.
    pub fn native(&self) -> Option<&'static str> {
        self.native.as_ref().map(native::Native::name)
    }

    /// Renders a conversation as training text (no generation prompt).
    pub fn render(&self, conversation: &Conversation) -> Result<String, RenderError> {
        let conversation = self.joined(conversation);
        match self.native.as_ref().and_then(|n| n.render(&conversation)) {
            Some(text) => Ok(text),
            None => self.render_template(&conversation),
        }
    }

    /// Renders a conversation with minijinja whatever the engine: the reference the native
    /// renderer is checked against.
    pub fn render_template(&self, conversation: &Conversation) -> Result<String, RenderError> {
        let conversation = self.joined(conversation);
        self.render_json(
            conversation.to_template_messages(),
            &conversation.tools,
            false,
        )
    }

    /// Renders raw OpenAI-style JSON messages exactly as given, the way
    /// `apply_chat_template(messages, tools=tools or None, add_generation_prompt=...)` would.
    pub fn render_json(
        &self,
        messages: Json,
        tools: &[Json],
        add_generation_prompt: bool,
    ) -> Result<String, RenderError> {
        self.render_counted(messages, tools, add_generation_prompt)
            .map(|(text, _)| text)
    }

    /// [`Self::render_template`], also saying what the render used against its limits.
    pub fn template_cost(
        &self,
        conversation: &Conversation,
    ) -> Result<(String, RenderCost), RenderError> {
        let conversation = self.joined(conversation);
        self.render_counted(
            conversation.to_template_messages(),
            &conversation.tools,
            false,
        )
    }

    /// [`Self::render_json`], also saying what the render used against its limits.
    pub fn render_counted(
        &self,
        messages: Json,
        tools: &[Json],
        add_generation_prompt: bool,
    ) -> Result<(String, RenderCost), RenderError> {
        let count = messages.as_array().map_or(0, Vec::len) as u64;
        let weight = json_weight(&messages)
            + tools.iter().map(json_weight).sum::<u64>()
            + self
                .kwargs
                .iter()
                .map(|(k, v)| k.len() as u64 + json_weight(v))
                .sum::<u64>();
        let limits = Limits::for_input(weight, count);
        let mut context = self.kwargs.clone();
        context.insert("messages".into(), messages);
        // transformers passes `tools=None` when there are none.
        let tools = if tools.is_empty() {
            Json::Null
        } else {
            Json::Array(tools.to_vec())
        };
        context.insert("tools".into(), tools);
        context.insert(
            "add_generation_prompt".into(),
            Json::Bool(add_generation_prompt),
        );
        let template = self
            .env(Limits::tier(limits.fuel))
            .and_then(|env| env.get_template(TEMPLATE_NAME))
            .map_err(|e| RenderError::from_minijinja(&e))?;
        let mut out = CappedOutput {
            text: Vec::new(),
            cap: limits.output_bytes,
            exceeded: false,
        };
        let context = Value::from(minijinja::value::Serde(&Json::Object(context)));
        let captured = match template.render_captured_to(context, &mut out) {
            Ok(captured) => captured,
            Err(_) if out.exceeded => {
                return Err(RenderError {
                    message: format!(
                        "the template's output passed its cap of {} bytes (1 MiB + {OUTPUT_PER_BYTE} x the row's {weight} bytes): a runaway template?",
                        limits.output_bytes
                    ),
                })
            }
            Err(e) if e.kind() == ErrorKind::OutOfFuel => {
                return Err(RenderError {
                    message: format!(
                        "the template ran out of fuel ({} instructions or about {} MB of data, for a row of {weight} bytes and {count} messages): a runaway template?",
                        limits.fuel,
                        limits.fuel * 64 / 1_000_000
                    ),
                })
            }
            Err(e) => return Err(RenderError::from_minijinja(&e)),
        };
        let fuel = captured.state().fuel_levels().map_or(0, |(used, _)| used);
        drop(captured);
        let output_bytes = out.text.len() as u64;
        // Written from `&str` pieces only.
        let text = String::from_utf8(out.text).map_err(|e| RenderError {
            message: format!("the template wrote invalid UTF-8: {e}"),
        })?;
        Ok((
            text,
            RenderCost {
                weight,
                messages: count,
                fuel,
                output_bytes,
                limits,
            },
        ))
    }
}

/// The template in a transformers-like environment with the given fuel budget.
fn environment(source: &str, fuel: u64) -> Result<Environment<'static>, TemplateCompileError> {
    let mut env = Environment::new();
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .build()
        .map_err(TemplateCompileError)?;
    env.set_syntax(syntax);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_filter("tojson", tojson);
    env.add_filter("string", pycompat::py_str);
    env.add_filter("trim", pycompat::py_trim_filter);
    env.set_fuel(Some(fuel));
    env.add_template_owned(TEMPLATE_NAME, source.to_owned())
        .map_err(TemplateCompileError)?;
    Ok(env)
}

/// A per-row render failure, with the template's own message when it raised.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct RenderError {
    pub message: String,
}

impl RenderError {
    fn from_minijinja(e: &Error) -> Self {
        // `raise_exception` errors carry the template's message verbatim as the detail.
        let message = match (e.kind(), e.detail()) {
            (ErrorKind::InvalidOperation, Some(detail)) => detail.to_owned(),
            _ => format!("{e:#}"),
        };
        RenderError { message }
    }
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `tojson` as transformers defines it: `json.dumps(x, ensure_ascii=False, indent=indent)`.
fn tojson(_state: &State, value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    pycompat::dump_json(value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}
