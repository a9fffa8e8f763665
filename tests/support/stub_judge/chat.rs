//! Chat completions, OpenAI's (`POST /v1/chat/completions`) and Azure's
//! (`POST /openai/deployments/{deployment}/chat/completions`): what to answer (an error, a
//! fault, a judgement) is decided first and logged, then answered.

use super::*;

/// What the handler decided to answer.
enum Outcome {
    Error {
        status: StatusCode,
        message: String,
        kind: &'static str,
        code: Option<&'static str>,
    },
    Fault(Fault),
    Normal,
}

impl Outcome {
    fn error(status: StatusCode, message: String, code: Option<&'static str>) -> Outcome {
        Outcome::Error {
            status,
            message,
            kind: "invalid_request_error",
            code,
        }
    }

    fn status(&self) -> Option<u16> {
        match self {
            Outcome::Error { status, .. } => Some(status.as_u16()),
            Outcome::Fault(f) => f.status(),
            Outcome::Normal => Some(200),
        }
    }
}

pub(super) async fn handle(shared: &Shared, reset: &Notify, req: Req) -> Resp {
    let segments: Vec<&str> = req.path.trim_end_matches('/').split('/').collect();
    let (known_route, deployment) = match segments.as_slice() {
        ["", "v1", "chat", "completions"] => (true, None),
        ["", "openai", "deployments", dep, "chat", "completions"] if !dep.is_empty() => {
            (true, Some(percent_decode(dep)))
        }
        _ => (false, None),
    };
    let last_user = req.json.as_ref().and_then(last_user_text);
    let (outcome, random_fault) = decide(shared, &req, known_route, last_user.as_deref());
    let fault = match &outcome {
        Outcome::Fault(f) => Some(*f),
        _ => None,
    };
    if fault.is_some() {
        shared.faults.fetch_add(1, Ordering::SeqCst);
    }
    lock(&shared.log).push(RequestRecord {
        api_version: deployment
            .as_ref()
            .and_then(|_| query_param(req.query.as_deref(), "api-version")),
        deployment: deployment.clone(),
        last_user_message: last_user.clone(),
        fault,
        random_fault,
        status: outcome.status(),
        ..req.record()
    });
    if !shared.config.latency.is_zero() {
        tokio::time::sleep(shared.config.latency).await;
    }
    let body = req.json.unwrap_or(Value::Null);
    let model = deployment
        .or_else(|| {
            body.get("model")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| "stub-model".to_string());
    let reply = Reply {
        seq: req.seq,
        model: &model,
        body: &body,
        last_user: last_user.as_deref().unwrap_or(""),
    };
    match outcome {
        Outcome::Error {
            status,
            message,
            kind,
            code,
        } => error_response(status, &message, kind, code),
        Outcome::Normal => reply.normal(shared),
        Outcome::Fault(f) => reply.fault(shared, reset, f).await,
    }
}

/// What to answer, and whether a random fault was drawn: a request the real API would
/// refuse gets its error; then a panel member that is down, a directive's fault, or a
/// random one; else a judgement.
fn decide(
    shared: &Shared,
    req: &Req,
    known_route: bool,
    last_user: Option<&str>,
) -> (Outcome, bool) {
    let json = req.json.as_ref();
    let model_down = json
        .and_then(|b| b.get("model"))
        .and_then(Value::as_str)
        .is_some_and(|m| m.starts_with("panel-down"));
    let has_messages = json
        .and_then(|b| b.get("messages"))
        .and_then(Value::as_array)
        .is_some_and(|m| !m.is_empty());
    if model_down {
        return (Outcome::Fault(Fault::Unavailable), false);
    }
    if !known_route || req.method != hyper::Method::POST {
        let message = format!(
            "Unknown request URL: {} {}. Please check the URL for typos.",
            req.method, req.path
        );
        return (
            Outcome::error(StatusCode::NOT_FOUND, message, Some("unknown_url")),
            false,
        );
    }
    if !req.authorised(shared.config.require_key.as_deref()) {
        let message = "Incorrect API key provided.".to_string();
        return (
            Outcome::error(StatusCode::UNAUTHORIZED, message, Some("invalid_api_key")),
            false,
        );
    }
    if json.is_none() || !has_messages {
        let message = if json.is_none() {
            "We could not parse the JSON body of your request."
        } else {
            "'messages' is a required property and must be a non-empty array."
        };
        return (
            Outcome::error(StatusCode::BAD_REQUEST, message.to_string(), None),
            false,
        );
    }
    let text = last_user.unwrap_or("");
    if let Some((fault, limit)) = parse_fault_directive(text) {
        // `[[fault:KINDxN]]`: the first N attempts of this message fail.
        let attempt = {
            let mut counts = lock(&shared.fault_counts);
            let n = counts.entry(text.to_string()).or_insert(0);
            *n += 1;
            *n
        };
        return match limit.is_none_or(|limit| attempt <= limit) {
            true => (Outcome::Fault(fault), false),
            false => (Outcome::Normal, false),
        };
    }
    let config = &shared.config;
    if config.fault_rate > 0.0 && !has_directive(text) {
        let draw = shared.draws.fetch_add(1, Ordering::SeqCst);
        if let Some(f) = random_fault_for(config.seed, draw, config.fault_rate) {
            return (Outcome::Fault(f), true);
        }
    }
    (Outcome::Normal, false)
}

/// What a reply to one request is made from.
struct Reply<'a> {
    seq: u64,
    model: &'a str,
    body: &'a Value,
    last_user: &'a str,
}

impl Reply<'_> {
    /// A judgement.
    fn normal(&self, shared: &Shared) -> Resp {
        shared.ok_replies.fetch_add(1, Ordering::SeqCst);
        completion_response(shared, self.seq, self.model, self.body, self.last_user)
    }

    /// What fault `f` looks like on the wire.
    async fn fault(&self, shared: &Shared, reset: &Notify, f: Fault) -> Resp {
        match f {
            Fault::Hang => {
                tokio::time::sleep(shared.config.hang).await;
                self.normal(shared)
            }
            Fault::Reset => {
                reset.notify_one();
                // The connection task drops the socket (and with it this task).
                std::future::pending::<Resp>().await
            }
            Fault::Malformed => {
                let mut r = Response::new(Full::new(Bytes::from_static(b"{\"choices\": [")));
                r.headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                r
            }
            Fault::NoContent => {
                let mut v = completion_json(
                    self.seq,
                    self.model,
                    self.body,
                    Value::Null,
                    "content_filter",
                );
                v["choices"][0]["message"]["refusal"] = Value::Null;
                json_response(StatusCode::OK, &v)
            }
            Fault::RateLimited | Fault::RateLimitedMs | Fault::RateLimitedDate => rate_limited(f),
            _ => status_fault(f),
        }
    }
}

/// A 429 with the retry header `f` names.
fn rate_limited(f: Fault) -> Resp {
    let mut r = error_response(
        StatusCode::TOO_MANY_REQUESTS,
        "Rate limit reached for requests (stub judge). Please try again shortly.",
        "requests",
        Some("rate_limit_exceeded"),
    );
    let h = r.headers_mut();
    match f {
        Fault::RateLimited => {
            h.insert("retry-after", HeaderValue::from_static("0"));
        }
        Fault::RateLimitedMs => {
            h.insert("retry-after-ms", HeaderValue::from_static("20"));
        }
        _ => {
            let when = SystemTime::now() - Duration::from_secs(1);
            if let Ok(v) = HeaderValue::from_str(&http_date(when)) {
                h.insert("retry-after", v);
            }
        }
    }
    r
}

/// The error body of a fault that is a plain HTTP status.
fn status_fault(f: Fault) -> Resp {
    let (status, message, kind, code) = match f {
        Fault::Quota => (
            StatusCode::TOO_MANY_REQUESTS,
            "You exceeded your current quota",
            "insufficient_quota",
            Some("insufficient_quota"),
        ),
        Fault::ServerError => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "The server had an error while processing your request. Sorry about that!",
            "server_error",
            None,
        ),
        Fault::Unavailable => (
            StatusCode::SERVICE_UNAVAILABLE,
            "The engine is currently overloaded, please try again later.",
            "server_error",
            None,
        ),
        Fault::BadRequest => (
            StatusCode::BAD_REQUEST,
            "Invalid request (injected by stub judge).",
            "invalid_request_error",
            None,
        ),
        _ => (
            StatusCode::UNAUTHORIZED,
            "Incorrect API key provided.",
            "invalid_request_error",
            Some("invalid_api_key"),
        ),
    };
    error_response(status, message, kind, code)
}
