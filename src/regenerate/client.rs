//! Requests to OpenAI-compatible servers (vLLM, SGLang): the start-up check of `/v1/models`,
//! and `/v1/chat/completions` with `return_token_ids`, retried with backoff on transient
//! failures.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One generation, as cached: the server's exact prompt and completion ids and the message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    pub prompt_ids: Vec<u32>,
    pub completion_ids: Vec<u32>,
    pub content: Option<String>,
    pub reasoning: Option<String>,
    pub tool_calls: Vec<CallOut>,
    pub finish_reason: String,
    /// The answer's `system_fingerprint` (vLLM: `vllm-<version>-<commit>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

/// A tool call as the server's parser returned it (arguments: JSON text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallOut {
    pub id: Option<String>,
    pub name: String,
    pub arguments: String,
}

/// Why a request failed for good.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message} (after {attempts} attempt(s))", .status.map(|s| format!("HTTP {s}: ")).unwrap_or_default())]
pub struct RequestError {
    pub status: Option<u16>,
    pub message: String,
    pub attempts: u32,
}

/// Why the servers cannot be used; reported before any work.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("regenerate: endpoint {endpoint} is unreachable ({detail}); start the server or fix `regenerate.endpoints` (set CHATSHARDS_REGENERATE_OFFLINE=1 to build from the cache alone)")]
    Unreachable { endpoint: String, detail: String },
    #[error("regenerate: endpoint {endpoint} serves {served}, not `{model}`; fix `regenerate.model` or the server's --served-model-name")]
    WrongModel {
        endpoint: String,
        model: String,
        served: String,
    },
    #[error("regenerate: cannot start the HTTP client: {0}")]
    Client(String),
}

/// What `/v1/models` (and `/version`, when the server has it) said about an endpoint.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndpointInfo {
    pub endpoint: String,
    pub models: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
}

/// `http://host:port[/v1][/]` → `http://host:port`.
pub fn base_url(endpoint: &str) -> String {
    let e = endpoint.trim_end_matches('/');
    e.strip_suffix("/v1").unwrap_or(e).to_owned()
}

pub fn http_client(timeout: Duration) -> Result<reqwest::Client, ProbeError> {
    reqwest::Client::builder()
        .user_agent(format!("chatshards/{}", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10).min(timeout))
        .timeout(timeout)
        .build()
        .map_err(|e| ProbeError::Client(e.to_string()))
}

/// Checks that `endpoint` answers and serves `model`.
pub async fn probe(
    http: &reqwest::Client,
    endpoint: &str,
    model: &str,
) -> Result<EndpointInfo, ProbeError> {
    let base = base_url(endpoint);
    let unreachable = |detail: String| ProbeError::Unreachable {
        endpoint: endpoint.to_owned(),
        detail,
    };
    let response = http
        .get(format!("{base}/v1/models"))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| unreachable(error_chain(&e)))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| unreachable(error_chain(&e)))?;
    if !status.is_success() {
        return Err(unreachable(format!("GET /v1/models answered {status}")));
    }
    #[derive(Deserialize)]
    struct Models {
        data: Vec<ModelEntry>,
    }
    #[derive(Deserialize)]
    struct ModelEntry {
        id: String,
    }
    let models: Models = serde_json::from_slice(&body)
        .map_err(|e| unreachable(format!("GET /v1/models is not an OpenAI model list: {e}")))?;
    let models: Vec<String> = models.data.into_iter().map(|m| m.id).collect();
    if !models.iter().any(|m| m == model) {
        return Err(ProbeError::WrongModel {
            endpoint: endpoint.to_owned(),
            model: model.to_owned(),
            served: match models.as_slice() {
                [] => "no model".to_owned(),
                _ => models
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
            },
        });
    }
    // vLLM answers `/version` with {"version": "0.32.0"}; other servers may not have it.
    let server_version = async {
        let r = http
            .get(format!("{base}/version"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&r.bytes().await.ok()?).ok()?;
        v.get("version")?.as_str().map(str::to_owned)
    }
    .await;
    Ok(EndpointInfo {
        endpoint: endpoint.to_owned(),
        models,
        server_version,
    })
}

/// Statuses worth another attempt.
fn transient(status: u16) -> bool {
    matches!(status, 408 | 409 | 425 | 429) || (500..600).contains(&status)
}

/// Delay before attempt `attempt + 1` (0-based): 250 ms doubling, at most 8 s.
fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(250u64.saturating_mul(1 << attempt.min(5))).min(Duration::from_secs(8))
}

/// POSTs `payload` to `endpoint`'s `/v1/chat/completions`, retrying transient failures up to
/// `retries` times.
pub async fn complete(
    http: &reqwest::Client,
    endpoint: &str,
    payload: &serde_json::Value,
    retries: u32,
) -> Result<Generation, RequestError> {
    let url = format!("{}/v1/chat/completions", base_url(endpoint));
    let body = payload.to_string();
    let mut attempt = 0;
    loop {
        let (status, message) = match send(http, &url, &body).await {
            Ok(Ok(generation)) => return Ok(generation),
            Ok(Err(failure)) => failure,
            Err(transport) => (None, transport),
        };
        let again = status.is_none_or(transient) && attempt < retries;
        if !again {
            return Err(RequestError {
                status,
                message,
                attempts: attempt + 1,
            });
        }
        tokio::time::sleep(backoff(attempt)).await;
        attempt += 1;
    }
}

/// One attempt: `Err` for a transport failure (connection, timeout), `Ok(Err)` for an answer
/// that is not a usable generation (with its status when it was not a success).
async fn send(
    http: &reqwest::Client,
    url: &str,
    body: &str,
) -> Result<Result<Generation, (Option<u16>, String)>, String> {
    let response = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_owned())
        .send()
        .await
        .map_err(|e| error_chain(&e))?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(|e| error_chain(&e))?;
    if !status.is_success() {
        let text = String::from_utf8_lossy(&bytes);
        let message = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| {
                let m = v.pointer("/error/message").or_else(|| v.get("message"))?;
                m.as_str().map(str::to_owned)
            })
            .unwrap_or_else(|| text.chars().take(300).collect());
        return Ok(Err((Some(status.as_u16()), message)));
    }
    // A success whose body is not a generation is not retried: the server would say the same.
    Ok(parse(&bytes).map_err(|m| (Some(status.as_u16()), m.to_string())))
}

/// A `/v1/chat/completions` answer. vLLM puts the prompt ids at the top level and the
/// completion ids in the choice (`token_ids`); the prompt ids are also read from the choice.
#[derive(Deserialize)]
struct Response {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    prompt_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    system_fingerprint: Option<String>,
}

#[derive(Deserialize)]
struct Choice {
    message: ResponseMessage,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    token_ids: Option<Vec<u32>>,
    #[serde(default)]
    prompt_token_ids: Option<Vec<u32>>,
}

#[derive(Deserialize)]
struct ResponseMessage {
    #[serde(default)]
    content: Option<String>,
    /// vLLM ≥ 0.11 (`reasoning`) and older vLLM / SGLang (`reasoning_content`).
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ResponseCall>>,
}

#[derive(Deserialize)]
struct ResponseCall {
    #[serde(default)]
    id: Option<String>,
    function: ResponseFunction,
}

#[derive(Deserialize)]
struct ResponseFunction {
    name: String,
    #[serde(default)]
    arguments: Option<String>,
}

/// Why a successful answer is not a generation.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerError {
    #[error("the answer is not a chat completion: {0}")]
    NotACompletion(serde_json::Error),
    #[error("the answer has no choices")]
    NoChoices,
    #[error(
        "the answer carries no token ids: the server must support `return_token_ids` \
         (vLLM with PR #22587, SGLang with PR #30917)"
    )]
    NoTokenIds,
}

pub(crate) fn parse(bytes: &[u8]) -> Result<Generation, AnswerError> {
    let response: Response = serde_json::from_slice(bytes).map_err(AnswerError::NotACompletion)?;
    let Some(choice) = response.choices.into_iter().next() else {
        return Err(AnswerError::NoChoices);
    };
    let prompt_ids = choice
        .prompt_token_ids
        .or(response.prompt_token_ids)
        .ok_or(AnswerError::NoTokenIds)?;
    let completion_ids = choice.token_ids.ok_or(AnswerError::NoTokenIds)?;
    let m = choice.message;
    Ok(Generation {
        prompt_ids,
        completion_ids,
        content: m.content,
        reasoning: m.reasoning.or(m.reasoning_content),
        tool_calls: m
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .map(|c| CallOut {
                id: c.id,
                name: c.function.name,
                arguments: c.function.arguments.unwrap_or_else(|| "{}".to_owned()),
            })
            .collect(),
        finish_reason: choice.finish_reason.unwrap_or_default(),
        fingerprint: response.system_fingerprint,
    })
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text = format!("{text}: {part}");
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_vllm_answer_shape() {
        // Trimmed from a vLLM 0.32.0 answer (shared/research/vllm_cpu.md).
        let body = br#"{"id":"chatcmpl-1","object":"chat.completion","model":"tiny",
          "choices":[{"index":0,"message":{"role":"assistant","content":" pr","reasoning":null},
          "finish_reason":"length","stop_reason":null,"token_ids":[208644,71301]}],
          "prompt_token_ids":[248045,846,198,14556,248046,198,248045,74455,198,248068,198]}"#;
        let g = parse(body).unwrap();
        assert_eq!(g.prompt_ids.len(), 11);
        assert_eq!(g.completion_ids, [208644, 71301]);
        assert_eq!(g.finish_reason, "length");
        assert_eq!(g.content.as_deref(), Some(" pr"));
        let without = br#"{"choices":[{"message":{"content":"x"},"finish_reason":"stop"}]}"#;
        assert!(parse(without)
            .unwrap_err()
            .to_string()
            .contains("return_token_ids"));
    }

    #[test]
    fn endpoints_with_or_without_v1_name_one_base() {
        assert_eq!(base_url("http://h:8000/v1/"), "http://h:8000");
        assert_eq!(base_url("http://h:8000"), "http://h:8000");
        assert!(transient(429) && transient(503) && transient(408) && !transient(400));
        assert_eq!(backoff(0), Duration::from_millis(250));
        assert_eq!(backoff(9), Duration::from_secs(8));
    }
}
