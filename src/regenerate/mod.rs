//! On-policy regeneration (`regenerate:`): the assistant turns of the conversations the
//! curation selected are generated again by the target model on OpenAI-compatible servers
//! (vLLM, SGLang), token-exact: every request asks for `return_token_ids`, and each generation
//! becomes one row, the server's prompt ids (mask 0) then its completion ids (mask 1). Every
//! prompt's ids are compared with chatshards' own render and tokenization of the same
//! messages. Responses are cached by a hash of the exact request (`cache`), so a killed build
//! resumes without sending a finished request again and a rebuild gives the same bytes.
//! docs/on-policy.md describes the choices.

pub mod cache;
pub mod client;
pub mod config;
mod splice;

pub use config::{RegenerateConfig, SourceRegenerate};

use crate::conversation::{Conversation, Message, Role};
use crate::reject::{FilterReason, Reject, RejectReason};
use crate::render::Renderer;
use crate::report::RegenTally;
use crate::tokenize::outcome::{Outcome, Tokenized};
use crate::tokenize::{Origin, Tokenizer};
use cache::Cache;
use client::{EndpointInfo, Generation, ProbeError};
use serde::Serialize;
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Set to `1` to build from the cache alone: no server is contacted, and a request that is not
/// cached fails its conversation (`regen_error`).
pub const OFFLINE_ENV: &str = "CHATSHARDS_REGENERATE_OFFLINE";

/// A source's `regenerate:` resolved by the plan.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub config: RegenerateConfig,
    /// `config.cache_dir` resolved against the pipeline file, or the default.
    pub cache_dir: PathBuf,
    /// What the lockfile pins for `config.model`, when the build reads one.
    pub pinned: Option<Pinned>,
}

/// The lockfile's record of a served model (`chatshards lock` asked its servers).
#[derive(Debug, Clone, PartialEq)]
pub struct Pinned {
    /// `/version` as the servers reported it when locked; `None` for servers without one.
    pub server_version: Option<String>,
}

/// A source's settings: its own section, the pipeline's, or none; problems name the field.
pub fn resolve(
    global: Option<&RegenerateConfig>,
    own: Option<&SourceRegenerate>,
    index: usize,
    base: &std::path::Path,
    output_dir: &std::path::Path,
) -> Result<Option<Settings>, Vec<String>> {
    let (config, at) = match (own, global) {
        (Some(SourceRegenerate::Switch(false)), _) | (None, None) => return Ok(None),
        (Some(SourceRegenerate::Switch(true)), None) => {
            return Err(vec![format!(
                "sources[{index}].regenerate: `true` needs a pipeline-level `regenerate:` section"
            )])
        }
        (Some(SourceRegenerate::Own(c)), _) => (c.as_ref(), format!("sources[{index}].regenerate")),
        (Some(SourceRegenerate::Switch(true)) | None, Some(g)) => (g, "regenerate".to_owned()),
    };
    let problems = config.problems(&at);
    if !problems.is_empty() {
        return Err(problems);
    }
    let cache_dir = match &config.cache_dir {
        Some(dir) => base.join(dir),
        None => output_dir
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("regen-cache"),
    };
    Ok(Some(Settings {
        config: config.clone(),
        cache_dir,
        pinned: None,
    }))
}

/// What the rows of a regenerated conversation must satisfy (the pipeline's length rules).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_tokens: usize,
    pub min_supervised_tokens: usize,
}

/// Why a turn could not be generated (the row's `regen_error` message).
#[derive(Debug, thiserror::Error)]
enum GenerateError {
    #[error("not in the cache `{}` ({OFFLINE_ENV} is set)", .0.display())]
    Offline(std::path::PathBuf),
    #[error("{0}")]
    Slots(#[from] tokio::sync::AcquireError),
    #[error("{url}: {error}")]
    Request {
        url: String,
        error: client::RequestError,
    },
    #[error("cannot write the cache `{}`: {error}", dir.display())]
    Cache {
        dir: std::path::PathBuf,
        error: std::io::Error,
    },
}

/// How the server's prompt differs from chatshards' own (the row's `render_mismatch` message).
#[derive(Debug, thiserror::Error)]
enum PromptError {
    #[error("chatshards cannot render the prompt: {0}")]
    Render(String),
    #[error("chatshards cannot tokenize the prompt: {0}")]
    Tokenize(crate::tokenize::EncodeError),
    #[error("the server's prompt ({server_tokens} tokens) differs from chatshards' render ({our_tokens} tokens) at token {at}: server {server}, chatshards {ours}")]
    Differs {
        server_tokens: usize,
        our_tokens: usize,
        at: usize,
        /// The token at `at` on each side, or "the end".
        server: String,
        ours: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum RegenerateError {
    #[error(transparent)]
    Probe(#[from] ProbeError),
    #[error("regenerate: the chat template with the regeneration's kwargs does not compile: {0}")]
    Template(String),
    #[error("regenerate: cannot start the runtime: {0}")]
    Runtime(String),
    #[error("regenerate: endpoint {endpoint} serves `{model}` with server version {served}, but the lockfile pins version {locked}; run `chatshards lock --upgrade` to pin the new server (the build_id changes), or set {OFFLINE_ENV}=1 to rebuild from the cache alone")]
    VersionChanged {
        endpoint: String,
        model: String,
        locked: String,
        served: String,
    },
    #[error("regenerate: the endpoints of `{model}` report different server versions: {versions}; serve one version to lock it")]
    MixedVersions { model: String, versions: String },
}

/// How a version is shown in errors (`none` for a server that reports none).
fn shown(version: Option<&str>) -> String {
    version.map_or_else(|| "none".to_owned(), |v| format!("`{v}`"))
}

/// The server version `endpoints` report for `model` (for `chatshards lock`): each endpoint
/// is checked as a build checks it at start, and all must report the same version.
pub fn served_version(
    endpoints: &[String],
    model: &str,
) -> Result<Option<String>, RegenerateError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RegenerateError::Runtime(e.to_string()))?;
    let http = client::http_client(Duration::from_secs(30))?;
    let mut seen: Vec<EndpointInfo> = Vec::new();
    for e in endpoints {
        seen.push(runtime.block_on(client::probe(&http, e, model))?);
    }
    let first = seen.first().and_then(|i| i.server_version.clone());
    if seen.iter().any(|i| i.server_version != first) {
        return Err(RegenerateError::MixedVersions {
            model: model.to_owned(),
            versions: seen
                .iter()
                .map(|i| format!("{} {}", i.endpoint, shown(i.server_version.as_deref())))
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Ok(first)
}

/// One conversation's regeneration: what the work pass does with it, and the conversation
/// with its regenerated turns (for `conversations.jsonl`) when it has rows.
pub struct Regenerated {
    pub outcome: Outcome<Vec<Tokenized>>,
    pub conversation: Option<Conversation>,
    /// Its requests (for a kept conversation's ledger entry; a reject carries its own).
    pub tally: RegenTally,
}

/// What this run sent, for the closing line (not the manifest: a rebuild from the cache sends
/// nothing and must write the same manifest).
#[derive(Debug, Default)]
struct Counts {
    /// Conversations the work passes queued for regeneration ([`Regenerator::expect`]) and
    /// those finished, for the ETA.
    expected: AtomicU64,
    finished: AtomicU64,
    planned: AtomicU64,
    cached: AtomicU64,
    sent: AtomicU64,
    generated_tokens: AtomicU64,
}

/// The manifest's record of a source's regeneration settings (its request accounting is in
/// the source's stats, `regenerate`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub model: String,
    pub sampling: config::Sampling,
    pub reasoning: config::Reasoning,
    pub turns: config::Turns,
    /// Absent for the default, `per_generation`.
    #[serde(skip_serializing_if = "config::Rows::is_default")]
    pub rows: config::Rows,
    pub truncated: config::Truncated,
    /// What was sent as `chat_template_kwargs` (and used for chatshards' own render).
    pub chat_template_kwargs: Map<String, Value>,
    /// The server version the lockfile pins (checked against the servers at start); absent
    /// for a build without a lockfile, or servers that report none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
}

struct Endpoint {
    url: String,
    slots: tokio::sync::Semaphore,
}

struct Source {
    settings: Settings,
    kwargs: Map<String, Value>,
    renderer: Renderer,
    endpoints: Vec<Endpoint>,
    cache: Cache,
}

/// The regeneration of a build: its servers (checked at start), caches and counts.
pub struct Regenerator {
    runtime: tokio::runtime::Runtime,
    http: reqwest::Client,
    sources: Vec<Option<Source>>,
    tokenizer: Arc<Tokenizer>,
    limits: Limits,
    offline: bool,
    /// Endpoints in turn, for spreading requests.
    turn: AtomicU64,
    started: Instant,
    counts: Counts,
    /// When progress was last printed.
    last_note: Mutex<Instant>,
    /// When the first batch came (the rates are over the time since).
    working_since: std::sync::OnceLock<Instant>,
    /// What the servers said at start (`/v1/models`, `/version`).
    pub endpoints: Vec<EndpointInfo>,
}

impl Regenerator {
    /// Checks every endpoint of every source (`GET /v1/models`: reachable, serving the model)
    /// before any work, unless [`OFFLINE_ENV`] is set. `None` when no source regenerates.
    pub fn start(
        sources: Vec<Option<Settings>>,
        template: &str,
        template_kwargs: &Map<String, Value>,
        engine: crate::render::Engine,
        tokenizer: Arc<Tokenizer>,
        limits: Limits,
    ) -> Result<Option<Regenerator>, RegenerateError> {
        if sources.iter().all(Option::is_none) {
            return Ok(None);
        }
        let offline = std::env::var(OFFLINE_ENV).is_ok_and(|v| v == "1");
        // Network-bound: two workers leave the cores to the build.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("chatshards-regenerate")
            .enable_all()
            .build()
            .map_err(|e| RegenerateError::Runtime(e.to_string()))?;
        let timeout = sources
            .iter()
            .flatten()
            .map(|s| s.config.timeout_s)
            .fold(1.0, f64::max);
        let http = client::http_client(Duration::from_secs_f64(timeout))?;
        let mut endpoints = Vec::new();
        let mut built = Vec::with_capacity(sources.len());
        for settings in sources {
            let Some(settings) = settings else {
                built.push(None);
                continue;
            };
            let c = &settings.config;
            if !offline {
                for e in &c.endpoints {
                    let known = |i: &EndpointInfo| &i.endpoint == e && i.models.contains(&c.model);
                    if !endpoints.iter().any(known) {
                        endpoints.push(runtime.block_on(client::probe(&http, e, &c.model))?);
                    }
                    let served = endpoints.iter().find(|i| known(i));
                    let served = served.and_then(|i| i.server_version.as_deref());
                    match &settings.pinned {
                        Some(p) if p.server_version.as_deref() != served => {
                            return Err(RegenerateError::VersionChanged {
                                endpoint: e.clone(),
                                model: c.model.clone(),
                                locked: shown(p.server_version.as_deref()),
                                served: shown(served),
                            })
                        }
                        _ => {}
                    }
                }
            }
            let mut kwargs = template_kwargs.clone();
            if c.reasoning == config::Reasoning::Disable {
                kwargs.insert("enable_thinking".into(), Value::Bool(false));
            }
            let renderer = Renderer::with_engine(template, kwargs.clone(), engine)
                .map_err(|e| RegenerateError::Template(e.to_string()))?;
            built.push(Some(Source {
                kwargs,
                renderer,
                endpoints: c
                    .endpoints
                    .iter()
                    .map(|url| Endpoint {
                        url: url.clone(),
                        slots: tokio::sync::Semaphore::new(c.concurrency),
                    })
                    .collect(),
                cache: Cache::new(settings.cache_dir.clone()),
                settings,
            }));
        }
        Ok(Some(Regenerator {
            runtime,
            http,
            sources: built,
            tokenizer,
            limits,
            offline,
            turn: AtomicU64::new(0),
            started: Instant::now(),
            counts: Counts::default(),
            last_note: Mutex::new(Instant::now()),
            working_since: std::sync::OnceLock::new(),
            endpoints,
        }))
    }

    /// Whether source `index` is regenerated.
    pub fn applies(&self, index: usize) -> bool {
        self.sources.get(index).is_some_and(Option::is_some)
    }

    /// Regenerates a batch of source `index`'s conversations concurrently (bounded by each
    /// endpoint's `concurrency`), in batch order.
    pub fn process_batch(&self, index: usize, batch: &[&Conversation]) -> Vec<Regenerated> {
        let Some(Some(source)) = self.sources.get(index) else {
            return Vec::new();
        };
        self.working_since.get_or_init(Instant::now);
        let all = futures::future::join_all(batch.iter().map(|c| async {
            let done = self.conversation(source, c).await;
            self.counts.finished.fetch_add(1, Relaxed);
            done
        }));
        // A batch of long generations can take minutes: progress is noted while it runs.
        let ticker = async {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                self.note_progress();
            }
        };
        let done = self.runtime.block_on(async {
            match futures::future::select(std::pin::pin!(all), std::pin::pin!(ticker)).await {
                futures::future::Either::Left((done, _)) => done,
                futures::future::Either::Right((_, all)) => all.await,
            }
        });
        self.note_progress();
        done
    }

    /// Announces `conversations` more to regenerate (a work pass of a regenerated source, less
    /// what a resumed build had done), for the ETA.
    pub fn expect(&self, conversations: usize) {
        self.counts
            .expected
            .fetch_add(conversations as u64, Relaxed);
    }

    /// The manifest's records, by source index (`None` where a source is not regenerated).
    pub fn reports(&self) -> Vec<Option<Report>> {
        self.sources
            .iter()
            .map(|s| {
                s.as_ref().map(|s| {
                    let c = &s.settings.config;
                    Report {
                        model: c.model.clone(),
                        sampling: c.sampling.clone(),
                        reasoning: c.reasoning,
                        turns: c.turns,
                        rows: c.rows,
                        truncated: c.truncated,
                        chat_template_kwargs: s.kwargs.clone(),
                        server_version: s
                            .settings
                            .pinned
                            .as_ref()
                            .and_then(|p| p.server_version.clone()),
                    }
                })
            })
            .collect()
    }

    /// One line for the end of a build: what this run asked for, sent and found cached.
    pub fn summary(&self) -> String {
        let n = |a: &AtomicU64| a.load(Relaxed);
        let c = &self.counts;
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        let servers: Vec<String> = self
            .endpoints
            .iter()
            .map(|e| match &e.server_version {
                Some(v) => format!("{} (version {v})", e.endpoint),
                None => e.endpoint.clone(),
            })
            .collect();
        format!(
            "regenerate: {} turn(s) asked for, {} answered from the cache `{}`, {} request(s) sent ({:.1}/s, {:.0} generated tokens/s){}",
            n(&c.planned),
            n(&c.cached),
            self.sources
                .iter()
                .flatten()
                .map(|s| s.cache.dir().display().to_string())
                .next()
                .unwrap_or_default(),
            n(&c.sent),
            n(&c.sent) as f64 / secs,
            n(&c.generated_tokens) as f64 / secs,
            match servers.is_empty() {
                true => format!(" (offline: {OFFLINE_ENV})"),
                false => format!(" to {}", servers.join(", ")),
            }
        )
    }

    /// Every 10 s, a progress line: conversations done of those queued, requests/s, generated
    /// tokens/s and the ETA of the queued conversations.
    fn note_progress(&self) {
        let Ok(mut last) = self.last_note.lock() else {
            return;
        };
        if last.elapsed() < Duration::from_secs(10) {
            return;
        }
        *last = Instant::now();
        let since = self.working_since.get().copied().unwrap_or(self.started);
        let n = |a: &AtomicU64| a.load(Relaxed);
        let c = &self.counts;
        eprintln!(
            "{}",
            Rates::of(
                since.elapsed().as_secs_f64(),
                n(&c.sent),
                n(&c.generated_tokens),
                n(&c.finished),
                n(&c.expected)
            )
        );
    }

    /// Regenerates one conversation turn by turn and counts its requests.
    async fn conversation(&self, source: &Source, original: &Conversation) -> Regenerated {
        let cfg = &source.settings.config;
        let assistants: Vec<usize> = original
            .messages
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == Role::Assistant)
            .map(|(i, _)| i)
            .collect();
        let (planned, first) = match (cfg.turns, assistants.last()) {
            (_, None) => (0, original.messages.len()),
            (config::Turns::Last, Some(&last)) => (1, last),
            (config::Turns::All, Some(_)) => (assistants.len() as u64, assistants[0]),
        };
        self.counts.planned.fetch_add(planned, Relaxed);
        let mut tally = RegenTally {
            conversations: 1,
            requested: planned,
            ..RegenTally::default()
        };
        let mut history = Conversation {
            messages: original.messages[..first].to_vec(),
            tools: original.tools.clone(),
        };
        let mut generations: Vec<Generation> = Vec::new();
        let mut at = first;
        let mut turn = 0u64;
        let fail = |reason, turn, detail: String| Regenerated {
            outcome: Outcome::Rejected(Reject::regenerate(reason, turn, planned, detail)),
            conversation: None,
            tally: RegenTally::default(),
        };
        while at < original.messages.len() {
            let message = &original.messages[at];
            if message.role != Role::Assistant {
                history.messages.push(message.clone());
                at += 1;
                continue;
            }
            turn += 1;
            let generation = match self.generate(source, &history).await {
                Ok(g) => g,
                Err(message) => return fail(RejectReason::RegenError, turn, message.to_string()),
            };
            if let Err(detail) = self.same_prompt(source, &history, &generation.prompt_ids) {
                return fail(RejectReason::RenderMismatch, turn, detail.to_string());
            }
            let truncated = generation.finish_reason == "length";
            if truncated {
                tally.truncated += 1;
                if cfg.truncated == config::Truncated::Drop {
                    if generations.is_empty() {
                        return fail(
                            RejectReason::RegenTruncated,
                            turn,
                            format!(
                                "the generation stopped at max_tokens ({} tokens)",
                                generation.completion_ids.len()
                            ),
                        );
                    }
                    break;
                }
            } else {
                tally.succeeded += 1;
            }
            tally.generated_tokens += generation.completion_ids.len() as u64;
            let calls = splice::calls(&generation.tool_calls);
            let reply = Message::assistant(generation.content.clone().unwrap_or_default())
                .with_reasoning(generation.reasoning.clone())
                .with_tool_calls(calls.clone().unwrap_or_default());
            history.messages.push(reply);
            generations.push(generation);
            if truncated || cfg.turns == config::Turns::Last {
                break;
            }
            let next = match calls {
                Ok(calls) => splice::pair(&original.messages, at, &calls),
                Err(e) => splice::Next::Unpaired(e),
            };
            match next {
                splice::Next::Go { results, resume } => {
                    history.messages.extend(results);
                    at = resume;
                }
                splice::Next::Unpaired(_) => {
                    tally.unpaired_tool_calls += 1;
                    break;
                }
            }
        }
        tally.skipped = planned.saturating_sub(turn);
        let rows = match cfg.rows {
            config::Rows::PerGeneration => None,
            config::Rows::PerConversation => {
                let one = conversation_row(&generations);
                tally.not_verbatim += u64::from(one.is_none());
                one.map(|r| vec![r])
            }
        };
        let rows = rows.unwrap_or_else(|| {
            generations
                .iter()
                .enumerate()
                .map(|(k, g)| row(k, g))
                .collect()
        });
        let outcome = self.length_rules(rows);
        let conversation = matches!(outcome, Outcome::Kept(_)).then_some(history);
        Regenerated {
            outcome,
            conversation,
            tally,
        }
    }

    /// The generation for the next assistant turn after `history`: from the cache, or from a
    /// server (then cached).
    async fn generate(
        &self,
        source: &Source,
        history: &Conversation,
    ) -> Result<Generation, GenerateError> {
        let payload = payload(source, history);
        let key = cache::key(&payload);
        if let Some(g) = source.cache.get(&key) {
            self.counts.cached.fetch_add(1, Relaxed);
            return Ok(g);
        }
        if self.offline {
            return Err(GenerateError::Offline(source.cache.dir().to_owned()));
        }
        let n = source.endpoints.len().max(1) as u64;
        let endpoint = &source.endpoints[(self.turn.fetch_add(1, Relaxed) % n) as usize];
        let permit = endpoint.slots.acquire().await?;
        let cfg = &source.settings.config;
        let answer = client::complete(&self.http, &endpoint.url, &payload, cfg.retries).await;
        drop(permit);
        self.counts.sent.fetch_add(1, Relaxed);
        let g = answer.map_err(|error| GenerateError::Request {
            url: endpoint.url.clone(),
            error,
        })?;
        self.counts
            .generated_tokens
            .fetch_add(g.completion_ids.len() as u64, Relaxed);
        source
            .cache
            .put(&key, &g)
            .map_err(|error| GenerateError::Cache {
                dir: source.cache.dir().to_owned(),
                error,
            })?;
        Ok(g)
    }

    /// Compares the server's prompt ids with chatshards' render (with the generation prompt)
    /// and tokenization of the same messages.
    fn same_prompt(
        &self,
        source: &Source,
        history: &Conversation,
        server: &[u32],
    ) -> Result<(), PromptError> {
        let text = source
            .renderer
            .render_json(history.to_template_messages(), &history.tools, true)
            .map_err(|e| PromptError::Render(e.message))?;
        let ours = self
            .tokenizer
            .encoder
            .encode(&text)
            .map_err(PromptError::Tokenize)?;
        if ours == server {
            return Ok(());
        }
        let at = ours
            .iter()
            .zip(server)
            .position(|(a, b)| a != b)
            .unwrap_or(ours.len().min(server.len()));
        let show = |ids: &[u32]| match ids.get(at) {
            Some(&id) => format!(
                "{id} {:?}",
                String::from_utf8_lossy(self.tokenizer.bytes.get(id))
            ),
            None => "the end".to_owned(),
        };
        Err(PromptError::Differs {
            server_tokens: server.len(),
            our_tokens: ours.len(),
            at,
            server: show(server),
            ours: show(&ours),
        })
    }

    /// The pipeline's length rules per row: a row over `max_tokens` is dropped (cutting it
    /// would cut the generation), as is one under `min_supervised_tokens`; kept if any row is.
    fn length_rules(&self, rows: Vec<Tokenized>) -> Outcome<Vec<Tokenized>> {
        let mut first = None;
        let kept: Vec<Tokenized> = rows
            .into_iter()
            .filter(|r| {
                let reason = if r.ids.len() > self.limits.max_tokens {
                    Some(FilterReason::TooLong)
                } else if r.supervised() < self.limits.min_supervised_tokens {
                    Some(FilterReason::TooFewSupervised)
                } else {
                    None
                };
                if let Some(reason) = reason {
                    first.get_or_insert(reason);
                }
                reason.is_none()
            })
            .collect();
        match (kept.is_empty(), first) {
            (false, _) => Outcome::Kept(kept),
            (true, Some(reason)) => Outcome::Filtered(reason),
            (true, None) => Outcome::Rejected(Reject::new(
                RejectReason::NoAssistantTurn,
                "no assistant turn to regenerate",
            )),
        }
    }
}

/// The request for the next assistant turn after `history`, in one fixed field order (its
/// JSON text is the cache key).
fn payload(source: &Source, history: &Conversation) -> Value {
    let cfg = &source.settings.config;
    let mut p = Map::new();
    p.insert("model".into(), Value::String(cfg.model.clone()));
    p.insert("messages".into(), server_messages(history));
    if !history.tools.is_empty() {
        p.insert("tools".into(), Value::Array(history.tools.clone()));
        if let Some(choice) = &cfg.tool_choice {
            p.insert("tool_choice".into(), Value::String(choice.clone()));
        }
    }
    if let Ok(Value::Object(sampling)) = serde_json::to_value(&cfg.sampling) {
        p.extend(sampling);
    }
    if !source.kwargs.is_empty() {
        p.insert(
            "chat_template_kwargs".into(),
            Value::Object(source.kwargs.clone()),
        );
    }
    p.insert("return_token_ids".into(), Value::Bool(true));
    Value::Object(p)
}

/// The messages as the OpenAI API takes them: tool-call arguments as JSON text (vLLM parses
/// them back into the object the template iterates).
fn server_messages(history: &Conversation) -> Value {
    let mut messages = history.to_template_messages();
    if let Some(list) = messages.as_array_mut() {
        for m in list {
            let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) else {
                continue;
            };
            for call in calls {
                if let Some(args) = call.pointer_mut("/function/arguments") {
                    *args = Value::String(args.to_string());
                }
            }
        }
    }
    messages
}

/// Regeneration's progress at one moment.
#[derive(Debug, PartialEq)]
struct Rates {
    sent: u64,
    requests_per_s: f64,
    tokens_per_s: f64,
    finished: u64,
    /// Conversations queued so far (0: not announced).
    expected: u64,
    /// Seconds left for the queued conversations at the rate so far (`None` before the first
    /// is finished).
    eta_s: Option<f64>,
}

impl Rates {
    /// After `secs` of work: `sent` requests, `tokens` generated, `finished` of `expected`
    /// conversations done.
    fn of(secs: f64, sent: u64, tokens: u64, finished: u64, expected: u64) -> Rates {
        let secs = secs.max(1e-3);
        let left = expected.saturating_sub(finished);
        Rates {
            sent,
            requests_per_s: sent as f64 / secs,
            tokens_per_s: tokens as f64 / secs,
            finished,
            expected,
            eta_s: (finished > 0 && expected > 0).then(|| left as f64 * secs / finished as f64),
        }
    }
}

impl std::fmt::Display for Rates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "regenerate: {} conversation(s)", self.finished)?;
        if self.expected > 0 {
            write!(f, " of {}", self.expected.max(self.finished))?;
        }
        write!(
            f,
            ", {} request(s) sent, {:.1} requests/s, {:.0} generated tokens/s",
            self.sent, self.requests_per_s, self.tokens_per_s
        )?;
        if let Some(eta) = self.eta_s {
            let eta = eta.round() as u64;
            match (eta / 3600, eta / 60 % 60, eta % 60) {
                (0, 0, s) => write!(f, ", ETA {s}s")?,
                (0, m, s) => write!(f, ", ETA {m}m {s:02}s")?,
                (h, m, _) => write!(f, ", ETA {h}h {m:02}m")?,
            }
        }
        Ok(())
    }
}

/// One generation as one row: the prompt ids unsupervised, the completion ids supervised.
fn row(segment: usize, g: &Generation) -> Tokenized {
    let mut ids = Vec::with_capacity(g.prompt_ids.len() + g.completion_ids.len());
    ids.extend_from_slice(&g.prompt_ids);
    ids.extend_from_slice(&g.completion_ids);
    let mut mask = vec![0u8; g.prompt_ids.len()];
    mask.resize(ids.len(), 1);
    Tokenized {
        segment,
        text: String::new(),
        ids,
        mask,
        truncated: false,
        boundary_merged: false,
        origin: Origin::Reference,
    }
}

/// `rows: per_conversation`: the whole regenerated conversation as one row, the last
/// generation's prompt and completion ids, with mask 1 over every generation's completion;
/// `None` unless each prompt starts with the previous prompt and completion ids (the template
/// re-rendered the earlier turns verbatim), which is what places the completions exactly.
fn conversation_row(generations: &[Generation]) -> Option<Tokenized> {
    let last = generations.last()?;
    let verbatim = generations.windows(2).all(|w| {
        let (before, after) = (&w[0], &w[1].prompt_ids);
        after.starts_with(&before.prompt_ids)
            && after[before.prompt_ids.len()..].starts_with(&before.completion_ids)
    });
    if !verbatim {
        return None;
    }
    let mut r = row(0, last);
    for g in &generations[..generations.len() - 1] {
        let at = g.prompt_ids.len();
        r.mask[at..at + g.completion_ids.len()].fill(1);
    }
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::ToolCall;

    #[test]
    fn a_rejected_conversation_accounts_for_its_turns() {
        let r = Reject::regenerate(RejectReason::RegenError, 2, 5, "HTTP 500: x");
        assert_eq!(r.message, "assistant turn 2 of 5: HTTP 500: x");
        let t = RegenTally::of_reject(&r);
        assert_eq!(
            (t.requested, t.succeeded, t.errored, t.skipped),
            (5, 1, 1, 3)
        );
        assert!(t.balanced());
        let m = Reject::regenerate(RejectReason::RenderMismatch, 1, 1, "at token 3");
        let m = RegenTally::of_reject(&m);
        assert_eq!((m.succeeded, m.render_mismatch, m.skipped), (1, 1, 0));
        assert!(m.balanced());
        let other = Reject::new(RejectReason::Template, "assistant turn 1 of 2: x");
        assert!(RegenTally::of_reject(&other).is_zero());
    }

    fn generation(prompt: &[u32], completion: &[u32]) -> Generation {
        Generation {
            prompt_ids: prompt.to_vec(),
            completion_ids: completion.to_vec(),
            content: None,
            reasoning: None,
            tool_calls: Vec::new(),
            finish_reason: "stop".into(),
            fingerprint: None,
        }
    }

    #[test]
    fn the_eta_is_the_conversations_left_at_the_rate_so_far() {
        // 40 s for 100 of 500 conversations: 400 left at 0.4 s each.
        let r = Rates::of(40.0, 260, 52_000, 100, 500);
        assert_eq!(
            (r.requests_per_s, r.tokens_per_s, r.eta_s),
            (6.5, 1300.0, Some(160.0))
        );
        assert_eq!(
            r.to_string(),
            "regenerate: 100 conversation(s) of 500, 260 request(s) sent, 6.5 requests/s, 1300 generated tokens/s, ETA 2m 40s"
        );
        let hours = Rates::of(10.0, 10, 100, 1, 400);
        assert_eq!(hours.eta_s, Some(3990.0));
        assert!(hours.to_string().ends_with(", ETA 1h 06m"), "{hours}");
        // Nothing finished yet, or nothing announced: no ETA.
        assert_eq!(Rates::of(5.0, 3, 0, 0, 50).eta_s, None);
        assert_eq!(
            Rates::of(5.0, 3, 30, 2, 0).to_string(),
            "regenerate: 2 conversation(s), 3 request(s) sent, 0.6 requests/s, 6 generated tokens/s"
        );
        // More finished than announced (a shortfall asked for again): nothing left.
        let over = Rates::of(8.0, 12, 0, 12, 10);
        assert_eq!(over.eta_s, Some(0.0));
        assert!(over
            .to_string()
            .starts_with("regenerate: 12 conversation(s) of 12,"));
    }

    #[test]
    fn a_conversation_row_masks_every_completion_when_the_prompts_extend_each_other() {
        let first = generation(&[1, 2], &[3, 4]);
        let second = generation(&[1, 2, 3, 4, 5, 6], &[7]);
        let third = generation(&[1, 2, 3, 4, 5, 6, 7, 8], &[9, 10]);
        let r = conversation_row(&[first.clone(), second.clone(), third]).expect("verbatim");
        assert_eq!(r.ids, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(r.mask, [0, 0, 1, 1, 0, 0, 1, 0, 1, 1]);
        // The template rewrote the first completion (3 4 became 3 5): not verbatim.
        let rewritten = generation(&[1, 2, 3, 5, 5, 6], &[7]);
        assert!(conversation_row(&[first.clone(), rewritten]).is_none());
        // A single generation is its own row.
        assert_eq!(
            conversation_row(&[second]).expect("one").mask,
            [0, 0, 0, 0, 0, 0, 1]
        );
        assert!(conversation_row(&[]).is_none());
    }

    #[test]
    fn the_server_gets_arguments_as_json_text_and_rows_mask_the_prompt() {
        let mut args = indexmap::IndexMap::new();
        args.insert("city".to_owned(), Value::String("Paris".into()));
        let history = Conversation {
            messages: vec![
                Message::user("weather?"),
                Message::assistant("").with_tool_calls(vec![ToolCall {
                    id: None,
                    name: "w".into(),
                    arguments: args,
                }]),
            ],
            tools: Vec::new(),
        };
        let m = server_messages(&history);
        assert_eq!(
            m[1]["tool_calls"][0]["function"]["arguments"],
            r#"{"city":"Paris"}"#
        );
        let g = Generation {
            prompt_ids: vec![1, 2, 3],
            completion_ids: vec![4, 5],
            content: None,
            reasoning: None,
            tool_calls: Vec::new(),
            finish_reason: "stop".into(),
            fingerprint: None,
        };
        let r = row(2, &g);
        assert_eq!(
            (r.ids, r.mask, r.segment),
            (vec![1, 2, 3, 4, 5], vec![0, 0, 0, 1, 1], 2)
        );
    }
}
