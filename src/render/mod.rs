//! Render stage: [`Conversation`] → text, with the model's own Jinja chat template.
//!
//! The template file is used byte for byte; only the Jinja environment is shaped to behave like
//! `transformers.apply_chat_template` (jinja2 with `trim_blocks`, `lstrip_blocks`, a
//! `json.dumps`-compatible `tojson`, `raise_exception`, Python string methods and `str()`/`strip()`
//! semantics). A template error is returned per row; it never aborts a run. For the official
//! Qwen3.6/Qwen3.5 files, [`native`] evaluates the same template without the interpreter.

mod native;
mod policy;
mod pycompat;

pub use policy::{plan_rows, RowSpec};

use crate::conversation::Conversation;
use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind, State};
use serde_json::{Map, Value as Json};

const TEMPLATE_NAME: &str = "chat_template";

/// A compiled chat template. Cheap to share across threads (`&Renderer` is `Sync`).
pub struct Renderer {
    env: Environment<'static>,
    /// Extra variables passed to every render (`enable_thinking`, `preserve_thinking`, ...).
    kwargs: Map<String, Json>,
    /// The same template evaluated natively, when the file is one [`native`] reproduces.
    native: Option<native::Native>,
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
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(TemplateCompileError)?;
        let native = match engine {
            Engine::Auto => native::Native::for_template(source, &kwargs),
            Engine::Minijinja => None,
        };
        Ok(Renderer {
            env,
            kwargs,
            native,
        })
    }

    /// The template the native renderer evaluates (`qwen3.6`, `qwen3.5`), if it is in use.
    pub fn native(&self) -> Option<&'static str> {
        self.native.as_ref().map(native::Native::name)
    }

    /// Renders a conversation as training text (no generation prompt).
    pub fn render(&self, conversation: &Conversation) -> Result<String, RenderError> {
        match self.native.as_ref().and_then(|n| n.render(conversation)) {
            Some(text) => Ok(text),
            None => self.render_template(conversation),
        }
    }

    /// Renders a conversation with minijinja whatever the engine: the reference the native
    /// renderer is checked against.
    pub fn render_template(&self, conversation: &Conversation) -> Result<String, RenderError> {
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
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| RenderError::from_minijinja(&e))?;
        template
            .render(Value::from(minijinja::value::Serde(&Json::Object(context))))
            .map_err(|e| RenderError::from_minijinja(&e))
    }
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
