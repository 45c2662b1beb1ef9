//! [`Hub`]: the connection to the Hub (built lazily, so locked and offline work never opens
//! one) and the translation of every network failure into a [`HubError`] that names the repo.
//!
//! `hf-hub` does the API calls (revision info, paginated tree listing, ranged streaming
//! downloads with Xet support, retries of transient statuses). It runs on a private tokio
//! runtime; callers see a blocking API. Only its typed handles (`RepoTypeModel`,
//! `RepoTypeDataset`) are used: in 1.0, `HFRepository<RepoTypeAny>` sends the download's
//! HEAD to the model URL even for datasets. Two things it does not expose are done here with the
//! same `reqwest` it uses: connect/read timeouts (a client handed to its builder), and one
//! HEAD per LFS file that does not follow the CDN redirect, whose `X-Linked-Etag` is the file's
//! SHA-256 — `hf-hub` 1.0 reads the tree's LFS oid into a field the Hub never sends, and its
//! own HEAD follows the redirect past that header.

use super::cache::Cache;
use super::config::{HubConfig, HubSpec, RepoKind, Token};
use super::error::HubError;
use hf_hub::{HFClient, HFError};
use reqwest::header::{HeaderMap, ACCEPT_ENCODING};
use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

/// Access to the Hub and to the local HF cache. Cheap to create; the HTTP client and its
/// runtime start on the first call that needs the network.
///
/// The API blocks. Do not call it from inside an async runtime.
pub struct Hub {
    pub(crate) config: HubConfig,
    pub(crate) cache: Cache,
    online: OnceLock<Online>,
}

pub(crate) struct Online {
    pub(crate) runtime: tokio::runtime::Runtime,
    pub(crate) client: HFClient,
    /// Same timeouts, but never follows redirects: the Hub's own 302 carries the metadata.
    head: reqwest::Client,
}

impl fmt::Debug for Hub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hub")
            .field("config", &self.config)
            .field("connected", &self.online.get().is_some())
            .finish()
    }
}

/// What the request was about, for error messages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context<'a> {
    pub(crate) kind: RepoKind,
    pub(crate) repo: &'a str,
    /// The requested revision, or the commit once known.
    pub(crate) revision: &'a str,
    pub(crate) path: Option<&'a str>,
    pub(crate) stage: Stage,
}

impl<'a> Context<'a> {
    pub(crate) fn new(spec: &'a HubSpec, stage: Stage) -> Self {
        Context {
            kind: spec.kind,
            repo: &spec.repo,
            revision: &spec.revision,
            path: None,
            stage,
        }
    }

    pub(crate) fn at(self, revision: &'a str) -> Self {
        Context { revision, ..self }
    }

    pub(crate) fn file(self, path: &'a str, stage: Stage) -> Self {
        Context {
            path: Some(path),
            stage,
            ..self
        }
    }

    fn doing(&self) -> String {
        match (self.stage, self.path) {
            (Stage::Revision, _) => format!(
                "resolving revision `{}` of {} `{}`",
                self.revision, self.kind, self.repo
            ),
            (Stage::Listing, _) => format!(
                "listing the files of {} `{}` at `{}`",
                self.kind, self.repo, self.revision
            ),
            (Stage::Metadata, Some(path)) | (Stage::Download, Some(path)) => format!(
                "{} `{path}` of {} `{}` at `{}`",
                if matches!(self.stage, Stage::Metadata) {
                    "looking up"
                } else {
                    "downloading"
                },
                self.kind,
                self.repo,
                self.revision
            ),
            (_, None) => format!("contacting {} `{}`", self.kind, self.repo),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    Revision,
    Listing,
    Metadata,
    Download,
}

/// Headers of the Hub's answer to `HEAD …/resolve/<commit>/<path>`.
#[derive(Debug, Clone)]
pub(crate) struct HeadInfo {
    /// `X-Linked-Etag` (LFS: the SHA-256) or `ETag` (git blob SHA-1), unquoted.
    pub(crate) etag: String,
    /// `X-Linked-Size` or `Content-Length`.
    pub(crate) size: Option<u64>,
}

impl Hub {
    /// A hub configured from `HF_ENDPOINT`, `HF_TOKEN`, `HF_HOME`, `HF_HUB_CACHE`,
    /// `HF_HUB_OFFLINE` (see [`HubConfig::from_env`]).
    pub fn from_env() -> Result<Hub, HubError> {
        Hub::with_config(HubConfig::from_env())
    }

    /// A hub with explicit settings; reads no environment variable.
    pub fn with_config(config: HubConfig) -> Result<Hub, HubError> {
        let valid = reqwest::Url::parse(&config.endpoint)
            .is_ok_and(|url| matches!(url.scheme(), "http" | "https") && url.has_host());
        if !valid {
            return Err(HubError::InvalidEndpoint {
                endpoint: config.endpoint,
            });
        }
        let config = HubConfig {
            endpoint: config.endpoint.trim_end_matches('/').to_owned(),
            jobs: config.jobs.max(1),
            ..config
        };
        Ok(Hub {
            cache: Cache::new(&config.cache_dir),
            config,
            online: OnceLock::new(),
        })
    }

    pub fn config(&self) -> &HubConfig {
        &self.config
    }

    /// The connection, started on first use.
    pub(crate) fn online(&self) -> Result<&Online, HubError> {
        if let Some(online) = self.online.get() {
            return Ok(online);
        }
        let built = Online::new(&self.config)?;
        Ok(self.online.get_or_init(|| built))
    }

    pub(crate) fn redact(&self, text: &str) -> String {
        match &self.config.token {
            Some(token) => token.redact(text),
            None => text.to_owned(),
        }
    }

    /// The commit a revision points at now.
    pub(crate) async fn commit_of(
        &self,
        online: &Online,
        spec: &HubSpec,
    ) -> Result<String, HubError> {
        let context = Context::new(spec, Stage::Revision);
        let (owner, name) = hf_hub::split_id(&spec.repo);
        // Only `sha` is needed; `expand` keeps the Hub from sending the whole repo card.
        let expand = Some(vec!["sha".to_owned()]);
        let sha = match spec.kind {
            RepoKind::Model => online
                .client
                .model(owner, name)
                .info()
                .revision(spec.revision.clone())
                .maybe_expand(expand)
                .send()
                .await
                .map(|info| info.sha),
            RepoKind::Dataset => online
                .client
                .dataset(owner, name)
                .info()
                .revision(spec.revision.clone())
                .maybe_expand(expand)
                .send()
                .await
                .map(|info| info.sha),
        }
        .map_err(|error| self.map_hf_error(error, context))?;
        match sha {
            Some(sha) if super::config::is_commit(&sha) => Ok(sha.to_ascii_lowercase()),
            other => Err(HubError::Protocol {
                kind: spec.kind,
                repo: spec.repo.clone(),
                endpoint: self.config.endpoint.clone(),
                doing: context.doing(),
                detail: format!("the repo info has no commit SHA (`sha`: {other:?})"),
            }),
        }
    }

    /// `HEAD {endpoint}/{datasets/}owner/name/resolve/{commit}/{path}`, not following redirects,
    /// as `huggingface_hub.get_hf_file_metadata` does.
    pub(crate) async fn head(
        &self,
        online: &Online,
        context: Context<'_>,
    ) -> Result<HeadInfo, HubError> {
        let path = context.path.unwrap_or_default();
        let mut url =
            reqwest::Url::parse(&self.config.endpoint).map_err(|_| HubError::InvalidEndpoint {
                endpoint: self.config.endpoint.clone(),
            })?;
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty();
            segments.extend(
                context
                    .kind
                    .url_prefix()
                    .split('/')
                    .filter(|s| !s.is_empty()),
            );
            segments.extend(context.repo.split('/'));
            segments.push("resolve");
            segments.push(context.revision);
            segments.extend(path.split('/'));
        }
        let mut attempt = 0;
        let mut redirects = 0;
        loop {
            let mut request = online
                .head
                .head(url.clone())
                // The size must be the stored size, not a compressed transfer size.
                .header(ACCEPT_ENCODING, "identity");
            if let Some(token) = &self.config.token {
                request = request.bearer_auth(token.expose());
            }
            match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    if status.is_redirection() {
                        // A redirect within the Hub (a renamed repo, other casing) is followed;
                        // one to another origin (the CDN) carries the metadata itself.
                        let next = header(response.headers(), "location")
                            .and_then(|location| url.join(&location).ok())
                            .filter(|next| next.origin() == url.origin());
                        if let (Some(next), true) = (next, redirects < 5) {
                            url = next;
                            redirects += 1;
                            continue;
                        }
                    }
                    if status.is_success() || status.is_redirection() {
                        return self.parse_head(response.headers(), context);
                    }
                    if !is_transient_status(status.as_u16()) || attempt >= self.config.retries {
                        let code = header(response.headers(), "x-error-code");
                        let message = header(response.headers(), "x-error-message");
                        return Err(self.http_error(context, status.as_u16(), code, message));
                    }
                }
                Err(error) => {
                    if attempt >= self.config.retries {
                        return Err(self.transport_error(&error, context));
                    }
                }
            }
            tokio::time::sleep(self.backoff(attempt)).await;
            attempt += 1;
        }
    }

    fn parse_head(&self, headers: &HeaderMap, context: Context<'_>) -> Result<HeadInfo, HubError> {
        let etag = header(headers, "x-linked-etag")
            .or_else(|| header(headers, "etag"))
            .map(|etag| {
                let etag = etag.strip_prefix("W/").unwrap_or(&etag);
                etag.trim_matches('"').to_owned()
            })
            .filter(|etag| super::cache::is_blob_name(etag));
        let Some(etag) = etag else {
            return Err(HubError::Protocol {
                kind: context.kind,
                repo: context.repo.to_owned(),
                endpoint: self.config.endpoint.clone(),
                doing: context.doing(),
                detail: "the answer has no usable `ETag` header".to_owned(),
            });
        };
        let size = header(headers, "x-linked-size")
            .or_else(|| header(headers, "content-length"))
            .and_then(|size| size.parse().ok());
        Ok(HeadInfo { etag, size })
    }

    /// Exponential backoff, capped so a long outage is reported rather than waited out.
    pub(crate) fn backoff(&self, attempt: usize) -> Duration {
        let factor = 1u32 << attempt.min(5);
        (self.config.retry_base_delay * factor).min(Duration::from_secs(8))
    }

    /// Maps an `hf-hub` error, using the Hub's `X-Error-Code` to tell a missing repo from a
    /// missing revision or file, as `huggingface_hub` does.
    pub(crate) fn map_hf_error(&self, error: HFError, context: Context<'_>) -> HubError {
        match error {
            HFError::Request { source, .. } => self.transport_error(&source, context),
            HFError::AuthRequired { context: http }
            | HFError::Forbidden { context: http }
            | HFError::Http { context: http }
            | HFError::Conflict { context: http }
            | HFError::RateLimited { context: http, .. } => self.http_error(
                context,
                http.status.as_u16(),
                http.error_code.clone(),
                http.server_message.clone(),
            ),
            HFError::RepoNotFound { context: http, .. }
            | HFError::RevisionNotFound { context: http, .. }
            | HFError::EntryNotFound { context: http, .. } => match http {
                Some(http) => self.http_error(
                    context,
                    http.status.as_u16(),
                    http.error_code.clone(),
                    http.server_message.clone(),
                ),
                None => self.http_error(context, 404, None, None),
            },
            other => HubError::Protocol {
                kind: context.kind,
                repo: context.repo.to_owned(),
                endpoint: self.config.endpoint.clone(),
                doing: context.doing(),
                detail: self.redact(&error_chain(&other)),
            },
        }
    }

    /// A connection that failed or went quiet.
    pub(crate) fn transport_error(
        &self,
        error: &(dyn std::error::Error + 'static),
        context: Context<'_>,
    ) -> HubError {
        let detail = self.redact(&error_chain(error));
        let timed_out = is_timeout(error);
        if timed_out {
            HubError::Timeout {
                endpoint: self.config.endpoint.clone(),
                doing: context.doing(),
                detail,
            }
        } else {
            HubError::Unreachable {
                endpoint: self.config.endpoint.clone(),
                doing: context.doing(),
                detail,
            }
        }
    }

    /// An HTTP error status, made specific with the Hub's `X-Error-Code` when it sends one.
    pub(crate) fn http_error(
        &self,
        context: Context<'_>,
        status: u16,
        code: Option<String>,
        message: Option<String>,
    ) -> HubError {
        let token_sent = self.config.token.is_some();
        let message = message
            .map(|message| self.redact(message.trim()))
            .filter(|message| !message.is_empty());
        let kind = context.kind;
        let repo = context.repo.to_owned();
        let revision = context.revision.to_owned();
        let not_found_file = |path: &str| HubError::FileNotFound {
            kind,
            repo: repo.clone(),
            revision: revision.clone(),
            path: path.to_owned(),
            similar: Vec::new(),
        };
        match (status, code.as_deref()) {
            (401 | 403, Some("GatedRepo")) => HubError::Gated {
                kind,
                repo,
                endpoint: self.config.endpoint.clone(),
                status,
                token_sent,
                message,
            },
            (401 | 404, Some("RepoNotFound")) => HubError::RepoNotFound {
                kind,
                repo,
                endpoint: self.config.endpoint.clone(),
                token_sent,
            },
            (404, Some("RevisionNotFound")) => HubError::RevisionNotFound {
                kind,
                repo,
                revision,
            },
            (404, Some("EntryNotFound")) => match context.path {
                Some(path) => not_found_file(path),
                None => HubError::RevisionNotFound {
                    kind,
                    repo,
                    revision,
                },
            },
            (401 | 403, _) => HubError::Unauthorized {
                kind,
                repo,
                status,
                token_sent,
                message,
            },
            (404, _) => match (context.stage, context.path) {
                (Stage::Metadata | Stage::Download, Some(path)) => not_found_file(path),
                _ => HubError::RevisionNotFound {
                    kind,
                    repo,
                    revision,
                },
            },
            _ => HubError::Http {
                kind,
                repo,
                doing: context.doing(),
                status,
                message,
            },
        }
    }
}

impl Online {
    fn new(config: &HubConfig) -> Result<Online, HubError> {
        let client_error = |detail: String| HubError::Client { detail };
        let user_agent = format!("chatshards/{}; hf-hub/1", env!("CARGO_PKG_VERSION"));
        let builder = || {
            reqwest::Client::builder()
                .user_agent(user_agent.clone())
                .connect_timeout(config.connect_timeout)
                .read_timeout(config.read_timeout)
        };
        let http = builder()
            .build()
            .map_err(|error| client_error(error_chain(&error)))?;
        let head = builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| client_error(error_chain(&error)))?;
        // Without a token, `hf-hub` would look for one itself (`HF_TOKEN`, token files), and an
        // explicitly anonymous config would depend on the environment after all. Its only use
        // of the token is `HeaderValue::from_str("Bearer …")`, which rejects a NUL: this one is
        // never sent (a test checks that no request carries `Authorization`).
        const ANONYMOUS: &str = "\0";
        let token = config.token.as_ref().map_or(ANONYMOUS, Token::expose);
        let client = HFClient::builder()
            .endpoint(config.endpoint.clone())
            .cache_dir(config.cache_dir.clone())
            .client(http)
            .retry_max_attempts(config.retries)
            .retry_base_delay(config.retry_base_delay)
            .token(token)
            .build()
            .map_err(|error| client_error(redact_opt(&config.token, &error_chain(&error))))?;
        // Two workers: downloads are network-bound, and the machine's cores belong to the build.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("chatshards-hub")
            .enable_all()
            .build()
            .map_err(|error| client_error(error.to_string()))?;
        Ok(Online {
            runtime,
            client,
            head,
        })
    }
}

fn redact_opt(token: &Option<Token>, text: &str) -> String {
    match token {
        Some(token) => token.redact(text),
        None => text.to_owned(),
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

pub(crate) fn is_transient_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504)
}

/// An error and its causes on one line: `reqwest` puts the useful part (`Connection refused`)
/// two levels down.
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn is_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(reqwest) = error.downcast_ref::<reqwest::Error>() {
            if reqwest.is_timeout() {
                return true;
            }
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return true;
            }
        }
        current = error.source();
    }
    false
}
