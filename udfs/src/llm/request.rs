//! The judge's wire format, without I/O: where to send a call ([`Endpoint`]), what to send
//! ([`ChatRequest`]), what came back ([`parse_chat_response`]) and the content address of a
//! call for the cache ([`cache_key`]).
//!
//! API keys live only in [`ApiKey`], whose `Debug` and `Display` print `***`; the one way to
//! read a key is [`ApiKey::expose`], used by [`Endpoint::headers`] for the transport.

use std::fmt;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::common::excerpt::{one_line, redact_url};

/// OpenAI's API root, used when no base URL is configured.
pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// An Azure OpenAI API version that supports `json_schema` structured outputs.
pub const DEFAULT_AZURE_API_VERSION: &str = "2024-10-21";

/// A secret that never shows itself in `Debug` or `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key (surrounding whitespace, e.g. from a `.env` file, is dropped).
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into().trim().to_string())
    }

    /// The key itself, for the `Authorization`/`api-key` header and nothing else.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// An OpenAI-compatible chat-completions endpoint.
///
/// `Debug` and `Display` hide the key and any `user:password@` in a URL.
#[derive(Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// OpenAI or any server speaking its API (vLLM, Ollama, LiteLLM, ...). `base_url` defaults
    /// to [`DEFAULT_OPENAI_BASE_URL`]; local servers may need no key.
    OpenAi {
        base_url: Option<String>,
        api_key: Option<ApiKey>,
    },
    /// Azure OpenAI: the deployment is in the path (defaulting to the model name) and the
    /// key goes in an `api-key` header.
    Azure {
        endpoint: String,
        deployment: Option<String>,
        api_version: String,
        api_key: ApiKey,
    },
}

impl Endpoint {
    /// The chat-completions URL for `model` (OpenAI puts the model in the body instead).
    pub fn url(&self, model: &str) -> String {
        match self {
            Self::OpenAi { base_url, .. } => {
                let base = base_url
                    .as_deref()
                    .map(str::trim)
                    .filter(|b| !b.is_empty())
                    .unwrap_or(DEFAULT_OPENAI_BASE_URL)
                    .trim_end_matches('/');
                // Tolerate a base URL given as the full endpoint.
                let base = base.strip_suffix("/chat/completions").unwrap_or(base);
                format!("{base}/chat/completions")
            }
            Self::Azure {
                endpoint,
                deployment,
                api_version,
                ..
            } => {
                let root = endpoint.trim().trim_end_matches('/');
                let root = root.strip_suffix("/openai").unwrap_or(root);
                let deployment = deployment
                    .as_deref()
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .unwrap_or(model);
                format!(
                    "{root}/openai/deployments/{}/chat/completions?api-version={}",
                    percent_encode(deployment),
                    percent_encode(api_version.trim())
                )
            }
        }
    }

    /// The URL of another API of the provider, e.g. `files`, `batches/{id}` (Azure: under
    /// `/openai/`, with the API version).
    pub fn api_url(&self, path: &str) -> String {
        match self {
            Self::OpenAi { .. } => {
                let chat = self.url("");
                let base = chat.strip_suffix("/chat/completions").unwrap_or(&chat);
                format!("{base}/{path}")
            }
            Self::Azure {
                endpoint,
                api_version,
                ..
            } => {
                let root = endpoint.trim().trim_end_matches('/');
                let root = root.strip_suffix("/openai").unwrap_or(root);
                format!(
                    "{root}/openai/{path}?api-version={}",
                    percent_encode(api_version.trim())
                )
            }
        }
    }

    /// What a Batch API line names as its `url` (and the batch as its `endpoint`), and the
    /// `model` its body carries: Azure's global batch takes the deployment.
    pub fn batch_target(&self, model: &str) -> (&'static str, String) {
        match self {
            Self::OpenAi { .. } => ("/v1/chat/completions", model.to_string()),
            Self::Azure { deployment, .. } => (
                "/chat/completions",
                deployment
                    .as_deref()
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .unwrap_or(model)
                    .to_string(),
            ),
        }
    }

    /// The request headers, authentication included. They hold the key: hand them to the
    /// HTTP client, never to a log or an error.
    pub fn headers(&self) -> Vec<(String, String)> {
        let mut headers = vec![("Content-Type".to_string(), "application/json".to_string())];
        match self {
            Self::OpenAi { api_key, .. } => {
                if let Some(key) = api_key.as_ref().filter(|k| !k.expose().is_empty()) {
                    headers.push((
                        "Authorization".to_string(),
                        format!("Bearer {}", key.expose()),
                    ));
                }
            }
            Self::Azure { api_key, .. } => {
                headers.push(("api-key".to_string(), api_key.expose().to_string()));
            }
        }
        headers
    }

    /// The key, if any.
    pub fn api_key(&self) -> Option<&ApiKey> {
        match self {
            Self::OpenAi { api_key, .. } => api_key.as_ref(),
            Self::Azure { api_key, .. } => Some(api_key),
        }
    }

    /// `text` with every occurrence of this endpoint's key replaced by `***`: a last line of
    /// defence for messages that quote a request (a proxy echoing headers, say).
    pub fn redact(&self, text: &str) -> String {
        match self.api_key().map(ApiKey::expose) {
            // A very short "key" would redact ordinary words; such a key is not a real one.
            Some(key) if key.len() >= 8 => text.replace(key, "***"),
            _ => text.to_string(),
        }
    }

    /// The chat URL for `model` as it may be shown (no `user:password@`, no key).
    pub fn display_url(&self, model: &str) -> String {
        redact_url(&self.url(model))
    }

    /// Identifies endpoint + model for the process-wide limiter (no key inside).
    pub fn limiter_key(&self, model: &str) -> String {
        format!("{}#{model}", redact_url(&self.url(model)))
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OpenAi { base_url, api_key } => f
                .debug_struct("OpenAi")
                .field("base_url", &base_url.as_deref().map(redact_url))
                .field("api_key", api_key)
                .finish(),
            Self::Azure {
                endpoint,
                deployment,
                api_version,
                api_key,
            } => f
                .debug_struct("Azure")
                .field("endpoint", &redact_url(endpoint))
                .field("deployment", deployment)
                .field("api_version", api_version)
                .field("api_key", api_key)
                .finish(),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OpenAi { base_url, api_key } => {
                let base = base_url.as_deref().unwrap_or(DEFAULT_OPENAI_BASE_URL);
                write!(f, "OpenAI-compatible endpoint {}", redact_url(base))?;
                if api_key.is_some() {
                    write!(f, " (api key ***)")?;
                }
                Ok(())
            }
            Self::Azure {
                endpoint,
                deployment,
                api_version,
                ..
            } => {
                write!(f, "Azure OpenAI endpoint {}", redact_url(endpoint))?;
                if let Some(d) = deployment {
                    write!(f, ", deployment {d}")?;
                }
                write!(f, ", api-version {api_version} (api key ***)")
            }
        }
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The structured output we ask for: an integer score in `[min, max]` and a reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScoreSchema {
    /// The schema's name (sanitised to OpenAI's `[A-Za-z0-9_-]{1,64}`).
    pub name: String,
    pub min: i64,
    pub max: i64,
}

/// One judge call's request body, built step by step.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    model: String,
    system: String,
    user: String,
    temperature: f64,
    seed: Option<i64>,
    max_completion_tokens: Option<u32>,
    schema: Option<ScoreSchema>,
    /// A fused call's parts: the answer is one object keyed by each part's name, each a
    /// score in its range and a reason (`schema` names the whole).
    parts: Vec<ScoreSchema>,
    /// Ask for each token's log-probability and its most likely alternatives.
    logprobs: bool,
}

impl ChatRequest {
    /// A request for `model` with a system prompt (the rubric; omitted when empty) and a user
    /// message (the inputs), at temperature 0, without a response format.
    pub fn new(
        model: impl Into<String>,
        system: impl Into<String>,
        user: impl Into<String>,
    ) -> Self {
        Self {
            model: model.into(),
            system: system.into(),
            user: user.into(),
            temperature: 0.0,
            seed: None,
            max_completion_tokens: None,
            schema: None,
            parts: Vec::new(),
            logprobs: false,
        }
    }

    /// Sets the sampling temperature (default 0, for repeatable judgements).
    pub fn temperature(mut self, temperature: f64) -> Self {
        self.temperature = temperature;
        self
    }

    /// Sets or clears the sampling seed.
    pub fn seed(mut self, seed: Option<i64>) -> Self {
        self.seed = seed;
        self
    }

    /// Sets or clears the completion length limit (`max_completion_tokens`, the parameter
    /// OpenAI's current models take; `max_tokens` is refused by its reasoning models).
    pub fn max_completion_tokens(mut self, max: Option<u32>) -> Self {
        self.max_completion_tokens = max;
        self
    }

    /// The completion length limit.
    pub fn completion_limit(&self) -> Option<u32> {
        self.max_completion_tokens
    }

    /// The messages as `(role, content)`, in the order they are sent: the static part
    /// (the system prompt) first, so providers' prompt caches can reuse it across rows.
    pub fn messages(&self) -> Vec<(&'static str, &str)> {
        let mut messages = Vec::with_capacity(2);
        if !self.system.is_empty() {
            messages.push(("system", self.system.as_str()));
        }
        messages.push(("user", self.user.as_str()));
        messages
    }

    /// Asks for a `json_schema` response: `{"score": integer in [min, max], "reason": string}`.
    pub fn score_schema(mut self, name: &str, min: i64, max: i64) -> Self {
        self.schema = Some(ScoreSchema {
            name: schema_name(name),
            min,
            max,
        });
        self
    }

    /// Asks for a fused `json_schema` response: one object with a key per part, each
    /// `{"score": integer in [min, max], "reason": string}`.
    pub fn fused_schema(mut self, name: &str, parts: &[(&str, i64, i64)]) -> Self {
        self.schema = Some(ScoreSchema {
            name: schema_name(name),
            min: 0,
            max: 0,
        });
        self.parts = parts
            .iter()
            .map(|(name, min, max)| ScoreSchema {
                name: name.to_string(),
                min: *min,
                max: *max,
            })
            .collect();
        self
    }

    /// Asks for log-probabilities (`logprobs`, and the 20 most likely alternatives of each
    /// token, OpenAI's most): the score token's are a judgement's confidence.
    pub fn logprobs(mut self, on: bool) -> Self {
        self.logprobs = on;
        self
    }

    /// Drops the response format, for endpoints that reject `json_schema`; the tolerant
    /// parser then reads the free-form reply.
    pub fn without_response_format(mut self) -> Self {
        self.schema = None;
        self
    }

    /// The model this request is for.
    #[cfg(test)]
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The JSON body to POST.
    pub fn body(&self) -> Value {
        let messages = self
            .messages()
            .into_iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect();
        let mut body = Map::new();
        body.insert("model".into(), json!(self.model));
        body.insert("messages".into(), Value::Array(messages));
        body.insert("temperature".into(), json!(self.temperature));
        if let Some(seed) = self.seed {
            body.insert("seed".into(), json!(seed));
        }
        if let Some(max) = self.max_completion_tokens {
            body.insert("max_completion_tokens".into(), json!(max));
        }
        if self.logprobs {
            body.insert("logprobs".into(), json!(true));
            body.insert("top_logprobs".into(), json!(20));
        }
        if let Some(schema) = &self.schema {
            let answer = if self.parts.is_empty() {
                score_object(schema.min, schema.max)
            } else {
                // A fused call: one judgement object per part.
                let properties: Map<String, Value> = self
                    .parts
                    .iter()
                    .map(|p| (p.name.clone(), score_object(p.min, p.max)))
                    .collect();
                let required: Vec<&str> = self.parts.iter().map(|p| p.name.as_str()).collect();
                json!({
                    "type": "object",
                    "properties": properties,
                    "required": required,
                    "additionalProperties": false,
                })
            };
            body.insert(
                "response_format".into(),
                json!({
                    "type": "json_schema",
                    "json_schema": {"name": schema.name, "strict": true, "schema": answer},
                }),
            );
        }
        Value::Object(body)
    }
}

/// The schema of one judgement: an integer score in `[min, max]` and a reason.
fn score_object(min: i64, max: i64) -> Value {
    json!({
        "type": "object",
        "properties": {
            "score": {"type": "integer", "minimum": min, "maximum": max},
            "reason": {"type": "string"},
        },
        "required": ["score", "reason"],
        "additionalProperties": false,
    })
}

fn schema_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if clean.is_empty() {
        "judgement".to_string()
    } else {
        clean
    }
}

/// One generated token's log-probability and its most likely alternatives
/// (`choices[0].logprobs.content[i]`).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f64,
    pub top: Vec<(String, f64)>,
}

/// What a successful chat completion said.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatReply {
    /// The first choice's message text.
    pub content: String,
    pub prompt_tokens: Option<i64>,
    /// The part of `prompt_tokens` the provider served from its prompt cache.
    pub cached_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    /// The model that answered (may be more specific than the one asked for).
    pub model: Option<String>,
    /// Why generation stopped (`stop`, `length`, `content_filter`, ...).
    pub finish_reason: Option<String>,
    /// The tokens' log-probabilities, when asked for and given (else empty).
    pub logprobs: Vec<TokenLogprob>,
}

/// Why a 2xx response body is not a usable reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseError {
    /// The body is not JSON (a proxy's HTML page, a truncated body).
    NotJson(String),
    /// The body is an API error object despite the status.
    Api(String),
    /// No `choices`, or an empty list.
    NoChoices,
    /// The first choice has no `message`.
    NoMessage,
    /// The message content is null or missing (often a content filter).
    NullContent { finish_reason: Option<String> },
    /// The model refused, saying why.
    Refusal(String),
}

impl fmt::Display for ResponseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotJson(snippet) => write!(f, "the judge response is not JSON: {snippet}"),
            Self::Api(message) => write!(f, "the judge endpoint returned an error: {message}"),
            Self::NoChoices => write!(f, "the judge response has no choices"),
            Self::NoMessage => write!(f, "the judge response's first choice has no message"),
            Self::NullContent { finish_reason } => {
                write!(f, "the judge response has no content")?;
                match finish_reason {
                    Some(r) => write!(f, " (finish_reason: {r})"),
                    None => Ok(()),
                }
            }
            Self::Refusal(text) => write!(f, "the judge model refused: {text}"),
        }
    }
}

impl std::error::Error for ResponseError {}

/// How much of a body or message an error quotes.
const MAX_QUOTE_CHARS: usize = 200;

/// Reads a chat-completions response body.
pub fn parse_chat_response(body: &str) -> Result<ChatReply, ResponseError> {
    let value: Value =
        serde_json::from_str(body).map_err(|_| ResponseError::NotJson(quote(body)))?;
    if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| error.to_string(), str::to_string);
        return Err(ResponseError::Api(quote(&message)));
    }
    let choice = value
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or(ResponseError::NoChoices)?;
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or(ResponseError::NoMessage)?;
    // OpenAI always sends `"refusal": null`; only a non-empty one is a refusal.
    if let Some(refusal) = message
        .get("refusal")
        .and_then(Value::as_str)
        .filter(|r| !r.trim().is_empty())
    {
        return Err(ResponseError::Refusal(quote(refusal)));
    }
    let content = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        // Some compatible servers send a list of content parts.
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => return Err(ResponseError::NullContent { finish_reason }),
    };
    let usage = value.get("usage");
    let tokens = |name: &str| usage.and_then(|u| u.get(name)).and_then(Value::as_i64);
    Ok(ChatReply {
        content,
        prompt_tokens: tokens("prompt_tokens"),
        cached_tokens: usage
            .and_then(|u| u.pointer("/prompt_tokens_details/cached_tokens"))
            .and_then(Value::as_i64),
        completion_tokens: tokens("completion_tokens"),
        model: value
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string),
        finish_reason,
        logprobs: choice
            .pointer("/logprobs/content")
            .and_then(Value::as_array)
            .map(|tokens| tokens.iter().filter_map(token_logprob).collect())
            .unwrap_or_default(),
    })
}

fn token_logprob(v: &Value) -> Option<TokenLogprob> {
    Some(TokenLogprob {
        token: v.get("token")?.as_str()?.to_string(),
        logprob: v.get("logprob")?.as_f64()?,
        top: v
            .get("top_logprobs")
            .and_then(Value::as_array)
            .map(|top| {
                top.iter()
                    .filter_map(|t| {
                        Some((
                            t.get("token")?.as_str()?.to_string(),
                            t.get("logprob")?.as_f64()?,
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default(),
    })
}

fn quote(text: &str) -> String {
    one_line(text, MAX_QUOTE_CHARS)
}

/// The content address of a judge call: lowercase hex SHA-256 over an unambiguous encoding of
/// rubric version, model, parameters and inputs.
///
/// Every string is length-prefixed (so `("ab", "c")` and `("a", "bc")` differ), a NULL input
/// differs from an empty one, and the encoding starts with a version tag so a future change
/// of format cannot collide with old entries. Parameters are a set (sorted first, so the
/// caller's order does not matter); inputs are positional (their order is part of the key).
pub fn cache_key(
    rubric_version: &str,
    model: &str,
    params: &[(String, String)],
    inputs: &[(&str, Option<&str>)],
) -> String {
    fn put(hasher: &mut Sha256, bytes: &[u8]) {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    }
    let mut hasher = Sha256::new();
    put(&mut hasher, b"evalsql-judge-cache-v1");
    put(&mut hasher, rubric_version.as_bytes());
    put(&mut hasher, model.as_bytes());
    let mut sorted: Vec<&(String, String)> = params.iter().collect();
    sorted.sort();
    hasher.update((sorted.len() as u64).to_le_bytes());
    for (name, value) in sorted {
        put(&mut hasher, name.as_bytes());
        put(&mut hasher, value.as_bytes());
    }
    hasher.update((inputs.len() as u64).to_le_bytes());
    for (name, value) in inputs {
        put(&mut hasher, name.as_bytes());
        match value {
            None => hasher.update([0u8]),
            Some(v) => {
                hasher.update([1u8]);
                put(&mut hasher, v.as_bytes());
            }
        }
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-test-0123456789abcdefSECRET";

    fn openai(base_url: Option<&str>) -> Endpoint {
        Endpoint::OpenAi {
            base_url: base_url.map(str::to_string),
            api_key: Some(ApiKey::new(KEY)),
        }
    }

    fn azure(endpoint: &str, deployment: Option<&str>) -> Endpoint {
        Endpoint::Azure {
            endpoint: endpoint.to_string(),
            deployment: deployment.map(str::to_string),
            api_version: "2024-10-21".to_string(),
            api_key: ApiKey::new(KEY),
        }
    }

    #[test]
    fn openai_urls() {
        let cases = [
            (None, "https://api.openai.com/v1/chat/completions"),
            (Some(""), "https://api.openai.com/v1/chat/completions"),
            (
                Some("http://localhost:11434/v1"),
                "http://localhost:11434/v1/chat/completions",
            ),
            (
                Some("http://localhost:8000/v1/"),
                "http://localhost:8000/v1/chat/completions",
            ),
            (
                Some("https://proxy.test/v1//"),
                "https://proxy.test/v1/chat/completions",
            ),
            (
                Some("https://proxy.test/v1/chat/completions"),
                "https://proxy.test/v1/chat/completions",
            ),
        ];
        for (base, url) in cases {
            assert_eq!(openai(base).url("gpt-4o-mini"), url, "{base:?}");
        }
    }

    #[test]
    fn batch_api_urls() {
        let openai = openai(Some("http://127.0.0.1:9/v1/"));
        assert_eq!(openai.api_url("files"), "http://127.0.0.1:9/v1/files");
        assert_eq!(
            openai.api_url("batches/b1/cancel"),
            "http://127.0.0.1:9/v1/batches/b1/cancel"
        );
        assert_eq!(openai.batch_target("gpt-4o").0, "/v1/chat/completions");
        let azure = azure("https://r.openai.azure.com/", Some("judge-dep"));
        assert_eq!(
            azure.api_url("batches"),
            format!(
                "https://r.openai.azure.com/openai/batches?api-version={DEFAULT_AZURE_API_VERSION}"
            )
        );
        assert_eq!(
            azure.batch_target("gpt-4o"),
            ("/chat/completions", "judge-dep".to_string())
        );
    }

    #[test]
    fn azure_urls() {
        let want = "https://res.openai.azure.com/openai/deployments/judge-4o/chat/completions?api-version=2024-10-21";
        for endpoint in [
            "https://res.openai.azure.com",
            "https://res.openai.azure.com/",
            "https://res.openai.azure.com/openai/",
        ] {
            assert_eq!(azure(endpoint, Some("judge-4o")).url("gpt-4o"), want);
        }
        // Without a deployment the model names it; odd characters are encoded.
        assert_eq!(
            azure("https://res.openai.azure.com", None).url("my model/x"),
            "https://res.openai.azure.com/openai/deployments/my%20model%2Fx/chat/completions?api-version=2024-10-21"
        );
    }

    #[test]
    fn headers_carry_the_right_authentication() {
        let h = openai(None).headers();
        assert!(h.contains(&("Authorization".into(), format!("Bearer {KEY}"))));
        assert!(h.contains(&("Content-Type".into(), "application/json".into())));
        assert!(!h.iter().any(|(k, _)| k == "api-key"));
        let h = azure("https://r.test", None).headers();
        assert!(h.contains(&("api-key".into(), KEY.into())));
        assert!(!h.iter().any(|(k, _)| k == "Authorization"));
        let keyless = Endpoint::OpenAi {
            base_url: Some("http://localhost:11434/v1".into()),
            api_key: None,
        };
        assert_eq!(keyless.headers().len(), 1);
        assert!(keyless.api_key().is_none());
        assert_eq!(ApiKey::new(format!("  {KEY}\n")).expose(), KEY);
    }

    #[test]
    fn the_key_never_shows() {
        let endpoints = [
            openai(None),
            openai(Some("https://user:hunter2@proxy.test/v1")),
            azure("https://res.openai.azure.com", Some("d")),
        ];
        for e in &endpoints {
            // The URL is for the transport, which needs any credentials in it.
            assert!(!e.url("gpt-4o").contains(KEY));
            let shown = [
                format!("{e:?}"),
                format!("{e:#?}"),
                e.to_string(),
                e.limiter_key("gpt-4o"),
                e.redact(&format!("proxy echoed: Authorization: Bearer {KEY}")),
                format!("{:?}", e.api_key()),
            ];
            for text in shown {
                assert!(!text.contains(KEY) && !text.contains("SECRET"), "{text}");
                assert!(!text.contains("hunter2"), "{text}");
            }
            assert!(format!("{e:?}").contains("***"));
        }
        assert_eq!(format!("{}", ApiKey::new(KEY)), "***");
        assert_eq!(
            openai(Some("https://user:hunter2@proxy.test/v1")).to_string(),
            "OpenAI-compatible endpoint https://user:***@proxy.test/v1 (api key ***)"
        );
        assert_eq!(
            endpoints[2].to_string(),
            "Azure OpenAI endpoint https://res.openai.azure.com, deployment d, api-version 2024-10-21 (api key ***)"
        );
        // Errors from response parsing only ever see bodies, never the request.
        let e = parse_chat_response("<html>502</html>").unwrap_err();
        assert!(!e.to_string().contains(KEY));
    }

    #[test]
    fn limiter_keys_separate_endpoints_and_models() {
        let a = openai(None).limiter_key("gpt-4o");
        assert_eq!(a, "https://api.openai.com/v1/chat/completions#gpt-4o");
        assert_ne!(a, openai(None).limiter_key("gpt-4o-mini"));
        assert_ne!(
            a,
            openai(Some("http://localhost:1/v1")).limiter_key("gpt-4o")
        );
    }

    #[test]
    fn request_body_with_everything() {
        let body = ChatRequest::new("gpt-4o-mini", "You are a strict judge.", "Query: q")
            .seed(Some(42))
            .max_completion_tokens(Some(300))
            .score_schema("groundedness v1", 1, 5)
            .body();
        let want = json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "You are a strict judge."},
                {"role": "user", "content": "Query: q"},
            ],
            "temperature": 0.0,
            "seed": 42,
            "max_completion_tokens": 300,
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "groundedness_v1",
                    "strict": true,
                    "schema": {
                        "type": "object",
                        "properties": {
                            "score": {"type": "integer", "minimum": 1, "maximum": 5},
                            "reason": {"type": "string"},
                        },
                        "required": ["score", "reason"],
                        "additionalProperties": false,
                    },
                },
            },
        });
        assert_eq!(body, want);
    }

    #[test]
    fn request_body_minimal() {
        let request = ChatRequest::new("m", "", "hi")
            .temperature(0.7)
            .score_schema("", 0, 10)
            .without_response_format();
        assert_eq!(request.model(), "m");
        assert_eq!(
            request.body(),
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7})
        );
        let named = ChatRequest::new("m", "s", "u").score_schema(&"é".repeat(100), 0, 10);
        let name = named.body()["response_format"]["json_schema"]["name"].clone();
        assert_eq!(name, json!("_".repeat(64)));
        assert_eq!(schema_name(""), "judgement");
    }

    #[test]
    fn chat_responses() {
        let body = r#"{
          "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-mini-2024-07-18",
          "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "{\"score\":4,\"reason\":\"ok\"}", "refusal": null}}],
          "usage": {"prompt_tokens": 120, "completion_tokens": 15, "total_tokens": 135,
                    "prompt_tokens_details": {"cached_tokens": 64}}
        }"#;
        let reply = parse_chat_response(body).unwrap();
        assert_eq!(
            reply,
            ChatReply {
                content: r#"{"score":4,"reason":"ok"}"#.into(),
                prompt_tokens: Some(120),
                cached_tokens: Some(64),
                completion_tokens: Some(15),
                model: Some("gpt-4o-mini-2024-07-18".into()),
                finish_reason: Some("stop".into()),
                logprobs: Vec::new(),
            }
        );
        // A bare-bones compatible server: no usage, no model, content parts.
        let parts = r#"{"choices":[{"message":{"content":[{"type":"text","text":"Score: "},{"type":"text","text":"4"}]}}]}"#;
        let reply = parse_chat_response(parts).unwrap();
        assert_eq!(reply.content, "Score: 4");
        assert_eq!(
            (reply.prompt_tokens, reply.model, reply.finish_reason),
            (None, None, None)
        );
    }

    #[test]
    fn malformed_chat_responses() {
        let cases: [(&str, ResponseError); 9] = [
            ("", ResponseError::NotJson(String::new())),
            (
                "<html>Bad gateway</html>",
                ResponseError::NotJson("<html>Bad gateway</html>".into()),
            ),
            ("{}", ResponseError::NoChoices),
            (r#"{"choices": []}"#, ResponseError::NoChoices),
            (r#"{"choices": null}"#, ResponseError::NoChoices),
            (r#"{"choices": [{}]}"#, ResponseError::NoMessage),
            (
                r#"{"choices": [{"finish_reason": "content_filter", "message": {"content": null}}]}"#,
                ResponseError::NullContent {
                    finish_reason: Some("content_filter".into()),
                },
            ),
            (
                r#"{"choices": [{"message": {"content": null, "refusal": "I can't help with that."}}]}"#,
                ResponseError::Refusal("I can't help with that.".into()),
            ),
            (
                r#"{"error": {"message": "The server had an error", "type": "server_error"}}"#,
                ResponseError::Api("The server had an error".into()),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(parse_chat_response(body), Err(want), "{body}");
        }
        let long = format!("<html>{}</html>", "x".repeat(10_000));
        let ResponseError::NotJson(snippet) = parse_chat_response(&long).unwrap_err() else {
            panic!()
        };
        assert_eq!(snippet.chars().count(), MAX_QUOTE_CHARS + 1);
        assert_eq!(
            ResponseError::NullContent {
                finish_reason: Some("length".into())
            }
            .to_string(),
            "the judge response has no content (finish_reason: length)"
        );
    }

    fn p(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn cache_key_is_pinned() {
        // Recomputed independently (Python hashlib over the documented encoding); a change
        // here invalidates every user's cache, so it must be deliberate.
        let key = cache_key(
            "groundedness@1",
            "gpt-4o-mini",
            &p(&[("temperature", "0"), ("seed", "42")]),
            &[
                ("query", Some("q")),
                ("context", None),
                ("response", Some("r")),
            ],
        );
        assert_eq!(key, PINNED_KEY);
        assert_eq!(key.len(), 64);
        assert!(
            key.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }

    const PINNED_KEY: &str = "53747cd301055d5e684eb5e256c4c59c6e8d6a731fed463c39d201321d32279b";

    #[test]
    fn cache_key_separates_what_differs() {
        let base = || {
            cache_key(
                "v1",
                "m",
                &p(&[("a", "1"), ("b", "2")]),
                &[("x", Some("ab")), ("y", Some("c"))],
            )
        };
        let variants = [
            cache_key(
                "v2",
                "m",
                &p(&[("a", "1"), ("b", "2")]),
                &[("x", Some("ab")), ("y", Some("c"))],
            ),
            cache_key(
                "v1",
                "m2",
                &p(&[("a", "1"), ("b", "2")]),
                &[("x", Some("ab")), ("y", Some("c"))],
            ),
            cache_key(
                "v1",
                "m",
                &p(&[("a", "1"), ("b", "3")]),
                &[("x", Some("ab")), ("y", Some("c"))],
            ),
            cache_key(
                "v1",
                "m",
                &p(&[("a", "1")]),
                &[("x", Some("ab")), ("y", Some("c"))],
            ),
            // Shifted boundaries.
            cache_key(
                "v1",
                "m",
                &p(&[("a", "1"), ("b", "2")]),
                &[("x", Some("a")), ("y", Some("bc"))],
            ),
            cache_key(
                "v1",
                "m",
                &p(&[("a", "1b"), ("", "2")]),
                &[("x", Some("ab")), ("y", Some("c"))],
            ),
            cache_key(
                "v",
                "1m",
                &p(&[("a", "1"), ("b", "2")]),
                &[("x", Some("ab")), ("y", Some("c"))],
            ),
            // Inputs are positional.
            cache_key(
                "v1",
                "m",
                &p(&[("a", "1"), ("b", "2")]),
                &[("y", Some("c")), ("x", Some("ab"))],
            ),
            // NULL is not empty; a parameter is not an input.
            cache_key(
                "v1",
                "m",
                &p(&[("a", "1"), ("b", "2")]),
                &[("x", Some("ab")), ("y", None)],
            ),
            cache_key(
                "v1",
                "m",
                &p(&[("a", "1"), ("b", "2")]),
                &[("x", Some("ab")), ("y", Some(""))],
            ),
            cache_key(
                "v1",
                "m",
                &p(&[("a", "1"), ("b", "2"), ("y", "c")]),
                &[("x", Some("ab"))],
            ),
        ];
        let base = base();
        for (i, v) in variants.iter().enumerate() {
            assert_ne!(&base, v, "variant {i}");
        }
        let mut all = variants.to_vec();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), variants.len());
        // Parameter order does not matter.
        assert_eq!(
            base,
            cache_key(
                "v1",
                "m",
                &p(&[("b", "2"), ("a", "1")]),
                &[("x", Some("ab")), ("y", Some("c"))]
            )
        );
    }
}
