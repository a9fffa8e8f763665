//! The HTTP transport of judge and target calls: one retry loop under the process-wide
//! limiter, an overall deadline, no redirects, and capped response bodies.
//!
//! Each attempt holds a limiter permit only while the request is on the wire; the wait
//! before a retry happens without one, so a throttled call does not keep others out. A call
//! ends in a [`RetryError`] whose [`Failure`] says what went wrong; its text is secret-free.
//!
//! Redirects are errors, never followed: the request carries the endpoint's key, and a 3xx
//! from a compromised or misconfigured endpoint must not send it (or the prompt) elsewhere.
//! Bodies are read in chunks up to a cap, so one huge reply cannot take the process's
//! memory, and the deadline bounds a call however the server stalls.

use std::collections::HashSet;
use std::error::Error as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::llm::limiter::AdaptiveLimiter;
use crate::llm::policy::CallPolicy;
use crate::llm::progress::STATS;
use crate::llm::request::{ChatReply, ChatRequest, Endpoint, ResponseError, parse_chat_response};
use crate::llm::retry::{Disposition, Failure, RetryContext, RetryError, classify, snippet};

/// A completed call: the accepted reply and the time of the successful attempt.
#[derive(Debug, Clone)]
pub struct Reply<T> {
    pub value: T,
    /// Time of the successful attempt, from sending to the whole body.
    pub latency: Duration,
}

/// A completed chat call.
pub type CallReply = Reply<ChatReply>;

/// What the caller makes of an attempt's response.
enum Step<T> {
    /// The call succeeded.
    Done(T),
    /// The attempt failed; retry if the disposition allows.
    Failed(Disposition),
    /// Send again at once, without counting a retry (the request was changed).
    Resend,
}

/// The process's HTTP client: one connection pool for every call. Redirects are not
/// followed (see the module docs).
fn http() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .pool_idle_timeout(Duration::from_secs(60))
            .connect_timeout(Duration::from_secs(30))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("evalsql/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new())
    })
}

/// Builds the HTTP client on a background thread, so that loading the system's root
/// certificates (tens of milliseconds) overlaps with planning and the scan instead of
/// delaying a query's first call. The functions that call out (judges, targets) call this
/// when a query using them is planned; a query that calls no one never pays for it (on
/// one core it competed with the query itself). Only the first call starts the thread.
pub fn warm_up() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("evalsql-http-warm-up".into())
            .spawn(|| {
                let _ = http();
            });
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

/// Sends a chat `request` for `model` to `endpoint` under `policy`, through `limiter`,
/// retrying what is worth retrying.
pub async fn send(
    endpoint: &Endpoint,
    model: &str,
    policy: &CallPolicy,
    limiter: &AdaptiveLimiter,
    request: &ChatRequest,
) -> Result<CallReply, RetryError> {
    let limiter_key = endpoint.limiter_key(model);
    let plain = std::sync::atomic::AtomicBool::new(
        without_schema()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&limiter_key),
    );
    let body = || {
        if plain.load(Ordering::Relaxed) {
            request.clone().without_response_format().body()
        } else {
            request.body()
        }
        .to_string()
    };
    let accept = |status: u16, headers: &[(String, String)], text: &str| {
        if (200..300).contains(&status) {
            return match parse_chat_response(text) {
                Ok(reply) => Step::Done(reply),
                Err(e) => Step::Failed(reply_disposition(status, &e)),
            };
        }
        if status == 400 && !plain.load(Ordering::Relaxed) && rejects_response_format(text) {
            plain.store(true, Ordering::Relaxed);
            without_schema()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(limiter_key.clone());
            // Not the server's fault and not worth a backoff: resend at once.
            return Step::Resend;
        }
        Step::Failed(classify(Some(status), headers, text))
    };
    call(
        reqwest::Method::POST,
        &endpoint.url(model),
        &endpoint.headers(),
        policy,
        limiter,
        &|text| endpoint.redact(text),
        body,
        accept,
    )
    .await
}

/// A successful generic POST: the 2xx status and body.
#[derive(Debug, Clone)]
pub struct PostReply {
    pub body: String,
}

/// POSTs a JSON `body` to `url` (an app under test) with the same rules as judge calls:
/// 408, 429, 5xx and transport errors are retried, `Retry-After` honoured.
pub async fn post_json(
    url: &str,
    policy: &CallPolicy,
    limiter: &AdaptiveLimiter,
    body: &str,
) -> Result<Reply<PostReply>, RetryError> {
    let headers = vec![("Content-Type".to_string(), "application/json".to_string())];
    api_request(
        reqwest::Method::POST,
        url,
        &headers,
        body.to_string(),
        policy,
        limiter,
        &|text| text.to_string(),
    )
    .await
}

/// A request other than a chat completion (the Batch API's files and batches, an app under
/// test): `method` to `url` with `headers`, the same retries, deadline, body cap and
/// redaction as a judge call; a 2xx body is the answer.
#[allow(clippy::too_many_arguments)]
pub async fn api_request(
    method: reqwest::Method,
    url: &str,
    headers: &[(String, String)],
    body: String,
    policy: &CallPolicy,
    limiter: &AdaptiveLimiter,
    redact: &(dyn Fn(&str) -> String + Sync),
) -> Result<Reply<PostReply>, RetryError> {
    call(
        method,
        url,
        headers,
        policy,
        limiter,
        redact,
        || body.clone(),
        |status, response_headers, text| {
            if (200..300).contains(&status) {
                Step::Done(PostReply {
                    body: text.to_string(),
                })
            } else {
                Step::Failed(classify(Some(status), response_headers, text))
            }
        },
    )
    .await
}

/// The retry loop every call goes through: attempts under the limiter, waits between them,
/// all within the policy's deadline. `body` makes each attempt's request body; `accept`
/// decides what a response means.
#[allow(clippy::too_many_arguments)]
async fn call<T>(
    method: reqwest::Method,
    url: &str,
    headers: &[(String, String)],
    policy: &CallPolicy,
    limiter: &AdaptiveLimiter,
    redact: &(dyn Fn(&str) -> String + Sync),
    body: impl Fn() -> String + Sync,
    mut accept: impl FnMut(u16, &[(String, String)], &str) -> Step<T> + Send,
) -> Result<Reply<T>, RetryError> {
    let started = Instant::now();
    let attempts = AtomicUsize::new(0);
    let last = Mutex::new(None::<String>);
    let calls = async {
        // The session's own ceiling, if it set one; waiting for it counts towards the
        // deadline like any other wait.
        let _slot = match &policy.session_slots {
            Some(slots) => Arc::clone(slots).acquire_owned().await.ok(),
            None => None,
        };
        let mut ctx = RetryContext::new(policy.retry);
        loop {
            let attempt = attempts.fetch_add(1, Ordering::Relaxed) + 1;
            let request_body = body();
            let mut permit = limiter.acquire(estimated_tokens(&request_body)).await;
            let (outcome, latency) = exchange(
                method.clone(),
                url,
                headers,
                request_body,
                policy.retry.timeout,
                policy.max_body,
            )
            .await;
            let mut disposition = match outcome {
                Ok((status, response_headers, text)) => {
                    match accept(status, &response_headers, &text) {
                        Step::Done(value) => {
                            permit.succeeded();
                            return Ok(Reply { value, latency });
                        }
                        Step::Resend => {
                            drop(permit);
                            attempts.fetch_sub(1, Ordering::Relaxed);
                            continue;
                        }
                        Step::Failed(d) => {
                            if d.is_throttle() {
                                permit.throttled();
                            }
                            d
                        }
                    }
                }
                Err(d) => d,
            };
            drop(permit);
            disposition.reason = redact(&disposition.reason);
            *last.lock().unwrap_or_else(|e| e.into_inner()) = Some(disposition.reason.clone());
            match ctx.next_delay(attempt, &disposition) {
                Some(delay) => {
                    STATS.retried();
                    tokio::time::sleep(delay).await;
                }
                None => return Err(ctx.error(attempt, &disposition)),
            }
        }
    };
    match tokio::time::timeout(policy.deadline, calls).await {
        Ok(result) => result,
        Err(_) => {
            let mut reason = format!(
                "no answer within the {} s deadline (evalsql.*.deadline: attempts and waits \
                 included)",
                seconds(policy.deadline)
            );
            if let Some(last) = last.lock().unwrap_or_else(|e| e.into_inner()).take() {
                reason.push_str("; last attempt: ");
                reason.push_str(&last);
            }
            Err(RetryError::new(
                attempts.load(Ordering::Relaxed).max(1),
                started.elapsed(),
                &Disposition {
                    failure: Failure::Deadline,
                    retryable: false,
                    reason,
                    status: None,
                    retry_after: None,
                },
            ))
        }
    }
}

/// Counts a call on the wire for the progress report, also when the call is abandoned
/// (its deadline passed) in the middle.
struct OnTheWire;

impl OnTheWire {
    fn start() -> Self {
        STATS.call_started();
        OnTheWire
    }
}

impl Drop for OnTheWire {
    fn drop(&mut self) {
        STATS.call_finished();
    }
}

/// The response of one exchange: status, headers and body.
type Exchanged = (u16, Vec<(String, String)>, String);

/// One HTTP exchange, or the disposition of its transport failure.
async fn exchange(
    method: reqwest::Method,
    url: &str,
    headers: &[(String, String)],
    body: String,
    timeout: Duration,
    max_body: usize,
) -> (Result<Exchanged, Disposition>, Duration) {
    let _wire = OnTheWire::start();
    let started = Instant::now();
    let has_body = method != reqwest::Method::GET;
    let mut builder = http().request(method, url).timeout(timeout);
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    if has_body {
        builder = builder.body(body);
    }
    let outcome = match builder.send().await {
        Ok(response) => {
            let status = response.status().as_u16();
            let response_headers: Vec<(String, String)> = response
                .headers()
                .iter()
                .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
                .collect();
            read_body(response, max_body)
                .await
                .map(|text| (status, response_headers, text))
                .map_err(|e| e.into_disposition(timeout))
        }
        Err(e) => Err(BodyError::Transport(e).into_disposition(timeout)),
    };
    (outcome, started.elapsed())
}

enum BodyError {
    Transport(reqwest::Error),
    TooLarge(usize),
}

impl BodyError {
    fn into_disposition(self, timeout: Duration) -> Disposition {
        match self {
            BodyError::TooLarge(limit) => Disposition {
                failure: Failure::BodyTooLarge,
                // The same answer would come back: not retried.
                retryable: false,
                reason: format!("the response body is larger than {limit} bytes"),
                status: None,
                retry_after: None,
            },
            BodyError::Transport(e) if e.is_timeout() => Disposition {
                failure: Failure::Timeout,
                retryable: true,
                reason: format!(
                    "transport error: no response within the {} s timeout",
                    seconds(timeout)
                ),
                status: None,
                retry_after: None,
            },
            BodyError::Transport(e) => {
                let mut d = classify(None, &[], &transport_reason(&e));
                d.failure = Failure::Connection;
                d
            }
        }
    }
}

/// Reads a body up to `max` bytes (reqwest's `text()` would read any size).
async fn read_body(mut response: reqwest::Response, max: usize) -> Result<String, BodyError> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(BodyError::TooLarge(max));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Transport)? {
        if bytes.len() + chunk.len() > max {
            return Err(BodyError::TooLarge(max));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// Seconds for messages: `3`, `0.5`.
fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

/// A 2xx body that is not a usable reply: a truncated or non-JSON body is a transport
/// accident worth another attempt; a refusal or a filtered answer would come back the same.
fn reply_disposition(status: u16, e: &ResponseError) -> Disposition {
    Disposition {
        failure: Failure::Parse,
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
fn transport_reason(e: &reqwest::Error) -> String {
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

#[cfg(test)]
mod tests {
    //! The transport against a loopback server fed canned responses, in the style of
    //! object_store's `client/mock_server.rs`.

    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::llm::retry::BackoffConfig;
    use crate::llm::retry::RetryPolicy;
    use tokio::sync::Semaphore;

    /// What the mock answers one request with.
    #[derive(Clone)]
    enum Canned {
        /// A status, extra headers and a body.
        Reply(u16, Vec<(&'static str, String)>, String),
        /// Read the request and never answer.
        Hang,
        /// Answer 200 after a pause.
        Slow(Duration),
        /// A 200 with `len` bytes of body, its length declared or not.
        Huge { len: usize, declared: bool },
    }

    fn reply(status: u16, body: &str) -> Canned {
        Canned::Reply(status, vec![], body.to_string())
    }

    struct MockServer {
        url: String,
        requests: Arc<AtomicUsize>,
    }

    impl MockServer {
        /// Answers requests with `canned` in order, the last one again once they run out.
        fn start(canned: Vec<Canned>) -> MockServer {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let url = format!("http://{}/v1", listener.local_addr().unwrap());
            let requests = Arc::new(AtomicUsize::new(0));
            let counter = Arc::clone(&requests);
            let queue = Arc::new(Mutex::new(canned));
            std::thread::spawn(move || {
                for stream in listener.incoming().map_while(Result::ok) {
                    let (queue, counter) = (Arc::clone(&queue), Arc::clone(&counter));
                    std::thread::spawn(move || serve(stream, &queue, &counter));
                }
            });
            MockServer { url, requests }
        }

        fn requests(&self) -> usize {
            self.requests.load(Ordering::SeqCst)
        }
    }

    fn serve(stream: TcpStream, queue: &Mutex<Vec<Canned>>, counter: &AtomicUsize) {
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut out = stream;
        loop {
            // One request: headers, then the declared body.
            let mut length = 0usize;
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                if line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                return;
            }
            counter.fetch_add(1, Ordering::SeqCst);
            let next = {
                let mut q = queue.lock().unwrap();
                if q.len() > 1 {
                    q.remove(0)
                } else {
                    q[0].clone()
                }
            };
            match next {
                Canned::Reply(status, headers, body) => {
                    let mut head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
                        body.len()
                    );
                    for (k, v) in headers {
                        head.push_str(&format!("{k}: {v}\r\n"));
                    }
                    if out
                        .write_all(format!("{head}\r\n{body}").as_bytes())
                        .is_err()
                    {
                        return;
                    }
                }
                Canned::Hang => {
                    std::thread::sleep(Duration::from_secs(3600));
                    return;
                }
                Canned::Slow(pause) => {
                    std::thread::sleep(pause);
                    let text = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
                    if out.write_all(text.as_bytes()).is_err() {
                        return;
                    }
                }
                Canned::Huge { len, declared } => {
                    let head = if declared {
                        format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n")
                    } else {
                        "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n".to_string()
                    };
                    let _ = out.write_all(head.as_bytes());
                    let chunk = vec![b' '; 64 << 10];
                    let mut sent = 0;
                    while sent < len {
                        let n = chunk.len().min(len - sent);
                        if out.write_all(&chunk[..n]).is_err() {
                            return;
                        }
                        sent += n;
                    }
                    return;
                }
            }
        }
    }

    fn policy(max_retries: usize) -> CallPolicy {
        CallPolicy {
            retry: RetryPolicy {
                max_retries,
                backoff: BackoffConfig {
                    init: Duration::from_millis(1),
                    max: Duration::from_millis(5),
                    base: 2.0,
                },
                timeout: Duration::from_secs(10),
            },
            deadline: Duration::from_secs(20),
            max_body: 1 << 20,
            session_slots: None,
        }
    }

    async fn post(
        server: &MockServer,
        policy: &CallPolicy,
    ) -> Result<Reply<PostReply>, RetryError> {
        let limiter = AdaptiveLimiter::new(4, None, None);
        post_json(&format!("{}/run", server.url), policy, &limiter, "{}").await
    }

    #[tokio::test]
    async fn retryable_statuses_are_retried_until_a_success() {
        let server = MockServer::start(vec![
            reply(503, "{}"),
            reply(500, "{}"),
            reply(408, "{}"),
            reply(200, r#"{"response": "ok"}"#),
        ]);
        let done = post(&server, &policy(5)).await.unwrap();
        assert_eq!(server.requests(), 4);
        assert_eq!(done.value.body, r#"{"response": "ok"}"#);
        // Out of retries: the last cause, typed.
        let server = MockServer::start(vec![reply(503, r#"{"error": {"message": "busy"}}"#)]);
        let err = post(&server, &policy(2)).await.unwrap_err();
        assert_eq!((err.failure, err.attempts), (Failure::Status(503), 3));
        assert!(
            err.to_string()
                .contains("HTTP 503 Service Unavailable: busy"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn retry_after_in_seconds_milliseconds_and_dates_is_obeyed() {
        let server = MockServer::start(vec![
            Canned::Reply(429, vec![("retry-after", "0".into())], "{}".into()),
            Canned::Reply(429, vec![("retry-after-ms", "30".into())], "{}".into()),
            Canned::Reply(
                429,
                vec![("retry-after", "Thu, 01 Jan 1970 00:00:00 GMT".into())],
                "{}".into(),
            ),
            reply(200, "{}"),
        ]);
        let started = Instant::now();
        post(&server, &policy(5)).await.unwrap();
        assert_eq!(server.requests(), 4);
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn client_errors_and_quota_are_not_retried() {
        let server = MockServer::start(vec![reply(400, r#"{"error": {"message": "bad"}}"#)]);
        let err = post(&server, &policy(5)).await.unwrap_err();
        assert_eq!((err.failure, server.requests()), (Failure::Status(400), 1));
        let server = MockServer::start(vec![reply(
            429,
            r#"{"error": {"message": "out", "code": "insufficient_quota"}}"#,
        )]);
        let err = post(&server, &policy(5)).await.unwrap_err();
        assert_eq!((err.failure, server.requests()), (Failure::Quota, 1));
    }

    #[tokio::test]
    async fn redirects_are_errors_and_never_followed() {
        let elsewhere = MockServer::start(vec![reply(200, "{}")]);
        for status in [301, 302, 307, 308] {
            let server = MockServer::start(vec![Canned::Reply(
                status,
                vec![("location", format!("{}/run?token=abc", elsewhere.url))],
                String::new(),
            )]);
            let err = post(&server, &policy(5)).await.unwrap_err();
            assert_eq!(err.failure, Failure::Redirect(status));
            assert_eq!(server.requests(), 1, "a redirect is not retried");
            let text = err.to_string();
            assert!(text.contains(&format!("HTTP {status}")), "{text}");
            assert!(!text.contains("token"), "{text}");
        }
        assert_eq!(
            elsewhere.requests(),
            0,
            "no request went where the redirect pointed"
        );
    }

    #[tokio::test]
    async fn bodies_over_the_cap_are_errors() {
        for declared in [true, false] {
            let server = MockServer::start(vec![Canned::Huge {
                len: 3 << 20,
                declared,
            }]);
            let err = post(&server, &policy(5)).await.unwrap_err();
            assert_eq!(err.failure, Failure::BodyTooLarge, "{err}");
            assert_eq!(server.requests(), 1);
            assert!(
                err.to_string().contains("larger than 1048576 bytes"),
                "{err}"
            );
        }
        // At the cap, a body is read.
        let server = MockServer::start(vec![Canned::Huge {
            len: 1 << 20,
            declared: true,
        }]);
        assert_eq!(
            post(&server, &policy(0)).await.unwrap().value.body.len(),
            1 << 20
        );
    }

    #[tokio::test]
    async fn the_deadline_bounds_a_call_that_hangs() {
        let server = MockServer::start(vec![Canned::Hang]);
        let mut p = policy(5);
        p.deadline = Duration::from_millis(300);
        let started = Instant::now();
        let err = post(&server, &p).await.unwrap_err();
        assert_eq!(err.failure, Failure::Deadline);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert!(err.to_string().contains("0.3 s deadline"), "{err}");
        // Per-attempt timeouts are retried, within the deadline.
        let server = MockServer::start(vec![Canned::Hang, Canned::Hang, reply(200, "{}")]);
        let mut p = policy(5);
        p.retry.timeout = Duration::from_millis(100);
        post(&server, &p).await.unwrap();
        assert_eq!(server.requests(), 3);
    }

    #[tokio::test]
    async fn a_session_ceiling_holds_calls_back() {
        let server = MockServer::start(vec![Canned::Slow(Duration::from_millis(150))]);
        let mut p = policy(0);
        p.session_slots = Some(Arc::new(Semaphore::new(1)));
        let limiter = AdaptiveLimiter::new(8, None, None);
        let url = format!("{}/run", server.url);
        let started = Instant::now();
        let calls = (0..3).map(|_| post_json(&url, &p, &limiter, "{}"));
        let results = futures::future::join_all(calls).await;
        assert!(results.iter().all(|r| r.is_ok()));
        // One slot: the three calls went one after another, though the limiter allows 8.
        assert!(
            started.elapsed() >= Duration::from_millis(450),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(server.requests(), 3);
    }

    #[tokio::test]
    async fn keys_never_appear_in_errors() {
        let key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789";
        let server = MockServer::start(vec![reply(
            401,
            &format!(r#"{{"error": {{"message": "Incorrect API key provided: {key}."}}}}"#),
        )]);
        let env = |name: &str| match name {
            "OPENAI_BASE_URL" => Some(server.url.clone()),
            "OPENAI_API_KEY" => Some(key.to_string()),
            "EVALSQL_JUDGE_MODEL" => Some("m".to_string()),
            _ => None,
        };
        let settings = crate::llm::settings::JudgeSettings::resolve("fluency", None, &env).unwrap();
        let limiter = AdaptiveLimiter::new(4, None, None);
        let request = ChatRequest::new("m", "judge", "## RESPONSE\nx");
        let err = send(
            &settings.endpoint,
            &settings.model,
            &settings.policy(),
            &limiter,
            &request,
        )
        .await
        .unwrap_err();
        assert_eq!(err.failure, Failure::Status(401));
        let text = format!("{err} {err:?}");
        assert!(text.contains("HTTP 401"), "{text}");
        assert!(!text.contains("abcdefghijklmnop"), "{text}");
    }
}
