//! The judge's HTTP transport: one chat-completions call with retries, under the
//! process-wide limiter.
//!
//! Each attempt holds a limiter permit only while the request is on the wire; the wait
//! before a retry happens without one, so a throttled call does not keep others out.

use std::collections::HashSet;
use std::error::Error as _;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::config::JudgeSettings;
use super::limiter::AdaptiveLimiter;
use super::progress::STATS;
use super::request::{ChatReply, ChatRequest, ResponseError, parse_chat_response};
use super::retry::{Disposition, RetryContext, RetryError, RetryPolicy, classify, snippet};

/// A completed call.
#[derive(Debug, Clone)]
pub struct CallReply {
    pub reply: ChatReply,
    /// Time of the successful attempt, from sending to the whole body.
    pub latency: Duration,
    pub attempts: usize,
}

/// The process's HTTP client: one connection pool for every judge call.
fn http() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(60))
            .connect_timeout(Duration::from_secs(30))
            .user_agent(concat!("evalsql/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new())
    })
}

/// Builds the HTTP client on a background thread, so that loading the system's root
/// certificates (tens of milliseconds) overlaps with session start-up instead of delaying
/// a query's first judge call.
pub fn warm_up() {
    let _ = std::thread::Builder::new()
        .name("evalsql-http-warm-up".into())
        .spawn(|| {
            let _ = http();
        });
}

/// Endpoints (limiter keys) that rejected `response_format`: later calls leave it out and
/// rely on the tolerant parser, instead of paying a failed attempt each.
fn without_schema() -> &'static Mutex<HashSet<String>> {
    static SET: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    SET.get_or_init(Default::default)
}

/// Rough token count of a request, for the tokens-per-minute budget: four characters per
/// token for the prompt, plus room for a short judgement.
fn estimated_tokens(request_body: &str) -> u64 {
    (request_body.len() / 4) as u64 + 200
}

/// Sends `request` to the configured endpoint, retrying what is worth retrying.
pub async fn send(
    settings: &JudgeSettings,
    limiter: &AdaptiveLimiter,
    request: &ChatRequest,
) -> Result<CallReply, RetryError> {
    let endpoint = &settings.endpoint;
    let url = endpoint.url(&settings.model);
    let headers = endpoint.headers();
    let limiter_key = settings.limiter_key();
    let mut ctx = RetryContext::new(settings.retry);
    let mut plain = without_schema()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&limiter_key);
    let mut attempt = 0usize;
    loop {
        attempt += 1;
        let body = if plain {
            request.clone().without_response_format().body()
        } else {
            request.body()
        }
        .to_string();
        let mut permit = limiter.acquire(estimated_tokens(&body)).await;
        let (outcome, latency) = exchange(&url, &headers, body, settings.retry.timeout).await;
        let disposition = match outcome {
            Ok((status, _, text)) if (200..300).contains(&status) => {
                match parse_chat_response(&text) {
                    Ok(reply) => {
                        permit.succeeded();
                        return Ok(CallReply {
                            reply,
                            latency,
                            attempts: attempt,
                        });
                    }
                    Err(e) => reply_disposition(status, &e),
                }
            }
            Ok((status, response_headers, text)) => {
                let d = classify(Some(status), &response_headers, &text);
                if d.is_throttle() {
                    permit.throttled();
                }
                if status == 400 && !plain && rejects_response_format(&text) {
                    plain = true;
                    without_schema()
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(limiter_key.clone());
                    drop(permit);
                    // Not the server's fault and not worth a backoff: resend at once.
                    continue;
                }
                d
            }
            Err(reason) => classify(None, &[], &reason),
        };
        drop(permit);
        let mut disposition = disposition;
        disposition.reason = endpoint.redact(&disposition.reason);
        match ctx.next_delay(attempt, &disposition) {
            Some(delay) => {
                STATS.retried();
                tokio::time::sleep(delay).await;
            }
            None => return Err(ctx.error(attempt, &disposition)),
        }
    }
}

/// One HTTP exchange: status, headers and body, or a transport error's description.
async fn exchange(
    url: &str,
    headers: &[(String, String)],
    body: String,
    timeout: Duration,
) -> (
    Result<(u16, Vec<(String, String)>, String), String>,
    Duration,
) {
    STATS.call_started();
    let started = Instant::now();
    let mut builder = http().post(url).timeout(timeout);
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    let outcome = match builder.body(body).send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let response_headers: Vec<(String, String)> = response
                .headers()
                .iter()
                .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
                .collect();
            match response.text().await {
                Ok(text) => Ok((status, response_headers, text)),
                Err(e) => Err(transport_reason(&e, timeout)),
            }
        }
        Err(e) => Err(transport_reason(&e, timeout)),
    };
    STATS.call_finished();
    (outcome, started.elapsed())
}

/// A successful generic POST: the 2xx body and the time of the successful attempt.
#[derive(Debug, Clone)]
pub struct PostReply {
    pub status: u16,
    pub body: String,
    pub latency: Duration,
}

/// POSTs a JSON `body` to `url` (an app under test) with the same retry rules as judge calls:
/// 408, 429, 5xx and transport errors are retried, `Retry-After` honoured.
pub async fn post_json(
    url: &str,
    retry: RetryPolicy,
    limiter: &AdaptiveLimiter,
    body: &str,
) -> Result<PostReply, RetryError> {
    let headers = vec![("Content-Type".to_string(), "application/json".to_string())];
    let mut ctx = RetryContext::new(retry);
    let mut attempt = 0usize;
    loop {
        attempt += 1;
        let mut permit = limiter.acquire(estimated_tokens(body)).await;
        let (outcome, latency) = exchange(url, &headers, body.to_string(), retry.timeout).await;
        let disposition = match outcome {
            Ok((status, _, text)) if (200..300).contains(&status) => {
                permit.succeeded();
                return Ok(PostReply {
                    status,
                    body: text,
                    latency,
                });
            }
            Ok((status, response_headers, text)) => {
                let d = classify(Some(status), &response_headers, &text);
                if d.is_throttle() {
                    permit.throttled();
                }
                d
            }
            Err(reason) => classify(None, &[], &reason),
        };
        drop(permit);
        match ctx.next_delay(attempt, &disposition) {
            Some(delay) => {
                STATS.retried();
                tokio::time::sleep(delay).await;
            }
            None => return Err(ctx.error(attempt, &disposition)),
        }
    }
}

/// A 2xx body that is not a usable reply: a truncated or non-JSON body is a transport
/// accident worth another attempt; a refusal or a filtered answer would come back the same.
fn reply_disposition(status: u16, e: &ResponseError) -> Disposition {
    Disposition {
        retryable: matches!(e, ResponseError::NotJson(_)),
        reason: format!("HTTP {status}: {e}"),
        status: Some(status),
        retry_after: None,
    }
}

/// Whether a 400 body complains about `response_format` / JSON schemas (servers that do not
/// support structured output).
fn rejects_response_format(body: &str) -> bool {
    let lower = body.to_ascii_lowercase();
    lower.contains("response_format") || lower.contains("json_schema")
}

/// A transport error's description: the chain of causes (so "connection reset by peer" is
/// seen, not just "error sending request"), without the URL.
fn transport_reason(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!(
            "no response within the {:.0} s timeout",
            timeout.as_secs_f64()
        );
    }
    let mut parts = vec![snippet(&strip_url(&e.to_string()))];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(snippet(&text));
        }
        source = s.source();
    }
    parts.join(": ")
}

/// reqwest appends ` for url (...)`; URLs may carry credentials, and the endpoint is known.
fn strip_url(text: &str) -> String {
    match text.find(" for url (") {
        Some(i) => text[..i].to_string(),
        None => text.to_string(),
    }
}
