//! `chatshards serve-render`: an HTTP server that answers vLLM's
//! `POST /v1/chat/completions/render` the way speculators' `prepare-data --render-endpoint`
//! uses it (its `render_client.py`): the body `{messages, add_generation_prompt, tools?,
//! chat_template_kwargs?, truncate_prompt_tokens?, truncation_side?}` is rendered with the
//! chat template and tokenized, and the answer carries `token_ids` in the shape of vLLM's
//! `GenerateRequest` (its other fields are fixed placeholders: nothing here samples).
//!
//! Rendering is the build's code: the messages go through the `openai` adapter (string tool
//! arguments parsed, as vLLM does) and the control-token check, then the template with the
//! build's fuel and output limits, then the build's encoder. Any of those refusing a request
//! is an HTTP 400 with the reason, in vLLM's error shape; a body over `--max-body-bytes` is a
//! 413. `GET /health` and `GET /v1/models` answer as vLLM's do, for clients that probe.

use crate::adapt::{Adapter, OpenAiAdapter, Repairs};
use crate::engine::row_path::RowProcessor;
use crate::model::json_exact;
use crate::plan::{self, config::RenderPolicy, HubAccess};
use crate::printer::Printer;
use crate::reject::RejectReason;
use crate::render::{Engine, Renderer};
use anyhow::{Context, Result};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub struct ServeArgs {
    /// A pipeline file: its template, kwargs, engine and tokenizer.
    pub pipeline: Option<PathBuf>,
    pub template: Option<PathBuf>,
    pub tokenizer: Option<PathBuf>,
    /// Template kwargs as a JSON object (with `--template`).
    pub kwargs: Option<String>,
    pub host: String,
    pub port: u16,
    pub max_body_bytes: usize,
    /// Renders at once (the rest wait); default: the machine's cores.
    pub threads: Option<usize>,
    /// The model id `/v1/models` lists.
    pub model: Option<String>,
}

/// Distinct per-request `chat_template_kwargs` sets kept compiled; past this, a request with
/// yet another set compiles its template for itself (a client cannot grow memory without end).
const KWARGS_CACHE: usize = 32;

struct Service {
    processor: RowProcessor,
    /// The template source, server kwargs and engine, to compile for per-request kwargs.
    source: String,
    kwargs: Map<String, Value>,
    engine: Engine,
    by_kwargs: Mutex<HashMap<String, Arc<Renderer>>>,
    model: String,
    served: AtomicU64,
}

/// The request fields speculators sends (vLLM's `ChatCompletionRequest` takes many more; they
/// are accepted and ignored, as they change nothing in a render).
#[derive(Deserialize)]
struct RenderRequest {
    messages: Value,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    /// vLLM's default.
    #[serde(default = "yes")]
    add_generation_prompt: bool,
    #[serde(default)]
    continue_final_message: bool,
    #[serde(default)]
    chat_template_kwargs: Option<Map<String, Value>>,
    #[serde(default)]
    truncate_prompt_tokens: Option<i64>,
    #[serde(default)]
    truncation_side: Option<String>,
}

fn yes() -> bool {
    true
}

/// Why a request was not rendered: the status and the reason.
type Failure = (StatusCode, String);

/// An error answer in vLLM's `ErrorResponse` shape.
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let kind = match status {
        StatusCode::BAD_REQUEST => "BadRequestError",
        StatusCode::PAYLOAD_TOO_LARGE => "PayloadTooLargeError",
        StatusCode::NOT_FOUND => "NotFoundError",
        _ => "InternalServerError",
    };
    let body = json!({"error": {"message": message.into(), "type": kind, "param": null, "code": status.as_u16()}});
    (status, Json(body)).into_response()
}

impl Service {
    fn load(args: &ServeArgs) -> Result<Self> {
        let (processor, source, kwargs, engine, model) = match (
            &args.pipeline,
            &args.template,
            &args.tokenizer,
        ) {
            (Some(pipeline), None, None) => {
                if args.kwargs.is_some() {
                    anyhow::bail!("--kwargs goes with --template; a pipeline's kwargs are its `template.kwargs`");
                }
                let plan = plan::compile(pipeline, HubAccess::Auto)?;
                let (processor, _) = crate::engine::session::processor(&plan)?;
                let t = plan.template;
                (processor, t.source, t.kwargs, t.engine, plan.name)
            }
            // Either left out: the built-in Qwen3.6 one.
            (None, template, tokenizer) => {
                let processor = crate::engine::session::template_processor(
                    template.as_deref(),
                    tokenizer.as_deref(),
                    RenderPolicy::All,
                    args.kwargs.as_deref(),
                )?;
                let source = crate::engine::session::template_source(template.as_deref())?;
                let kwargs = match &args.kwargs {
                    Some(k) => serde_json::from_str(k).context("--kwargs must be a JSON object")?,
                    None => Map::new(),
                };
                let name = match template {
                    Some(template) => template
                        .parent()
                        .and_then(|p| p.file_name())
                        .map_or("chatshards".into(), |n| n.to_string_lossy().into_owned()),
                    None => crate::model::embedded::NAME.to_owned(),
                };
                (processor, source, kwargs, Engine::Auto, name)
            }
            (Some(_), _, _) => {
                anyhow::bail!("give a pipeline file, or --template and --tokenizer (not both ways)")
            }
        };
        Ok(Service {
            processor,
            source,
            kwargs,
            engine,
            by_kwargs: Mutex::new(HashMap::new()),
            model: args.model.clone().unwrap_or(model),
            served: AtomicU64::new(0),
        })
    }

    /// The renderer for a request's `chat_template_kwargs`, laid over the server's (as vLLM
    /// lays them over its defaults).
    fn renderer(&self, extra: Option<Map<String, Value>>) -> Result<RendererRef<'_>, Failure> {
        let Some(extra) = extra.filter(|e| !e.is_empty()) else {
            return Ok(RendererRef::Default(&self.processor.renderer));
        };
        let mut kwargs = self.kwargs.clone();
        kwargs.extend(extra);
        if kwargs == self.kwargs {
            return Ok(RendererRef::Default(&self.processor.renderer));
        }
        let key = Value::Object(kwargs.clone()).to_string();
        if let Some(r) = self.cache().get(&key) {
            return Ok(RendererRef::Shared(r.clone()));
        }
        let renderer = Renderer::with_engine(&self.source, kwargs, self.engine)
            .map_err(|e| (StatusCode::BAD_REQUEST, format!("{e:#}")))?;
        let renderer = Arc::new(renderer);
        let mut cache = self.cache();
        if cache.len() < KWARGS_CACHE {
            cache.insert(key, renderer.clone());
        }
        Ok(RendererRef::Shared(renderer))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Renderer>>> {
        // A panic while holding the lock leaves a map that is still whole.
        self.by_kwargs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One render: the token ids, or the error answer.
    fn render(&self, body: &[u8]) -> Result<Vec<u32>, Failure> {
        let bad = |m: String| (StatusCode::BAD_REQUEST, m);
        let mut req: RenderRequest = serde_json::from_slice(body).map_err(|e| {
            bad(format!(
                "the request body is not a valid render request: {e}"
            ))
        })?;
        let tools = req.tools.iter().flatten();
        if json_exact::holds_suspect(&req.messages)
            || tools.into_iter().any(json_exact::holds_suspect)
        {
            // `-0` is the integer 0 to a Python server; an integer outside 64 bits cannot be
            // rendered as it does.
            let exact = json_exact::from_slice(body).map_err(|e| match e.out_of_range("") {
                Some(r) => bad(format!("{}: {}", r.reason.code(), r.message)),
                None => bad(format!("the request body is not valid JSON: {e}")),
            })?;
            req.messages = exact["messages"].clone();
            req.tools = serde_json::from_value(exact["tools"].clone()).unwrap_or(req.tools);
        }
        if req.continue_final_message {
            return Err(bad("continue_final_message is not supported".into()));
        }
        let row = json!({"messages": req.messages, "tools": req.tools.unwrap_or_default()});
        let conversation = Adapter::OpenAi(OpenAiAdapter::default())
            .adapt(&row, &mut Repairs::new())
            .map_err(|r| bad(format!("{}: {}", r.reason.code(), r.message)))?;
        self.processor
            .validator
            .check_control_tokens(&conversation)
            .map_err(|r| bad(format!("{}: {}", r.reason.code(), r.message)))?;
        let renderer = self.renderer(req.chat_template_kwargs)?;
        let text = renderer
            .get()
            .render_json(
                conversation.to_template_messages(),
                &conversation.tools,
                req.add_generation_prompt,
            )
            .map_err(|e| bad(format!("{}: {e}", RejectReason::Template.code())))?;
        let mut ids = self
            .processor
            .tokenizer
            .encoder
            .encode(&text)
            .map_err(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        // vLLM: keep the first (right side) or last (left side, its default) k tokens;
        // -1 means the model's length, which a render-only server does not bound.
        match req.truncate_prompt_tokens {
            None | Some(-1) => {}
            Some(k) if k >= 0 => {
                let k = usize::try_from(k).unwrap_or(usize::MAX);
                if ids.len() > k {
                    match req.truncation_side.as_deref() {
                        Some("right") => ids.truncate(k),
                        None | Some("left") => {
                            ids.drain(..ids.len() - k);
                        }
                        Some(other) => {
                            return Err(bad(format!(
                                "truncation_side must be \"left\" or \"right\", not {other:?}"
                            )))
                        }
                    }
                }
            }
            Some(k) => {
                return Err(bad(format!(
                    "truncate_prompt_tokens must be -1 or at least 0, not {k}"
                )))
            }
        }
        Ok(ids)
    }
}

enum RendererRef<'a> {
    Default(&'a Renderer),
    Shared(Arc<Renderer>),
}

impl RendererRef<'_> {
    fn get(&self) -> &Renderer {
        match self {
            RendererRef::Default(r) => r,
            RendererRef::Shared(r) => r,
        }
    }
}

async fn render(State(service): State<Arc<Service>>, body: Bytes) -> Response {
    let worker = service.clone();
    // Rendering is CPU work: on the blocking pool, whose size bounds renders in flight.
    match tokio::task::spawn_blocking(move || worker.render(&body)).await {
        Ok(Ok(ids)) => {
            let n = service.served.fetch_add(1, Ordering::Relaxed);
            Json(json!({
                "request_id": format!("chatshards-render-{n}"),
                "token_ids": ids,
                "features": null,
                "sampling_params": {},
                "model": service.model,
                "stream": false,
                "stream_options": null,
                "cache_salt": null,
                "priority": 0,
                "kv_transfer_params": null,
            }))
            .into_response()
        }
        Ok(Err((status, message))) => error(status, message),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the render failed: {e}"),
        ),
    }
}

async fn models(State(service): State<Arc<Service>>) -> Response {
    Json(json!({
        "object": "list",
        "data": [{"id": service.model, "object": "model", "created": 0, "owned_by": "chatshards", "root": service.model, "parent": null}],
    }))
    .into_response()
}

fn router(service: Arc<Service>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/v1/chat/completions/render", post(render))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { StatusCode::OK }))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such route") })
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(service)
}

pub fn run(args: &ServeArgs, printer: &Printer) -> Result<()> {
    let service = Arc::new(Service::load(args)?);
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.min(4))
        .max_blocking_threads(threads)
        .enable_io()
        .build()
        .context("failed to start the server runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .with_context(|| format!("failed to listen on {}:{}", args.host, args.port))?;
        let addr = listener.local_addr().context("no local address")?;
        printer.info(&format!(
            "serving renders of `{}` at http://{addr} (POST /v1/chat/completions/render; speculators: --render-endpoint http://{addr})",
            service.model
        ));
        axum::serve(listener, router(service, args.max_body_bytes))
            .await
            .context("the server failed")
    })
}
