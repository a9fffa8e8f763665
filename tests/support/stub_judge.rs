//! A stub OpenAI-compatible chat-completions server for integration tests and benchmarks.
//!
//! It listens on `127.0.0.1:<ephemeral port>`, speaks HTTP/1.1 with keep-alive and answers
//! `POST /v1/chat/completions` (OpenAI form) and
//! `POST /openai/deployments/{deployment}/chat/completions?api-version=...` (Azure form)
//! with a deterministic judgement. Faults are injected per request through directives in the
//! last user message (`[[fault:500x2]]`, `[[score:7]]`, `[[reply:TEXT]]`, see [`Fault`]) or at
//! random with [`StubConfig::fault_rate`].
//!
//! Self-contained: included with `#[path = "support/stub_judge.rs"] mod stub_judge;`.
//! Dependencies: tokio (rt-multi-thread, macros, net, time, sync), hyper 1 (server, http1),
//! hyper-util 0.1 (tokio), http-body-util 0.1, bytes 1, serde_json 1, tiktoken-rs 0.12 (usage
//! is counted in OpenAI's o200k encoding, and cached prompt tokens are reported the way
//! OpenAI's prompt cache would serve them).
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

// ---------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------

/// How the stub behaves. `StubConfig::default()` is a fast, fault-free, keyless server.
#[derive(Debug, Clone)]
pub struct StubConfig {
    /// Added before every reply (also before error replies and before a `reset`).
    pub latency: Duration,
    /// Probability in `[0, 1]` that an attempt without directives gets a random retryable
    /// fault, drawn from {429 (`Retry-After: 0`), 429ms, 500, 503, reset, malformed}.
    pub fault_rate: f64,
    /// Seed of the random faults. The draw is a pure function of (seed, attempt number), the
    /// attempt number being a global counter of random-eligible attempts, so a sequential
    /// client sees the same fault sequence on every run.
    pub seed: u64,
    /// How long a `hang` fault sleeps before replying normally.
    pub hang: Duration,
    /// If set, requests without `Authorization: Bearer <key>` or `api-key: <key>` get 401.
    pub require_key: Option<String>,
    /// Batch API: how long a batch is `in_progress` before it finishes.
    pub batch_delay: Duration,
    /// Batch API: the share of lines (by a hash of their `custom_id`) that fail with a 500
    /// the first time they are submitted.
    pub batch_fail_share: f64,
    /// Batch API: the first this-many batches expire instead of completing; the second half
    /// of their lines gets `batch_expired` errors.
    pub batch_expire_first: usize,
}

impl Default for StubConfig {
    fn default() -> Self {
        StubConfig {
            latency: Duration::ZERO,
            fault_rate: 0.0,
            seed: 0,
            hang: Duration::from_secs(30),
            require_key: None,
            batch_delay: Duration::from_millis(200),
            batch_fail_share: 0.0,
            batch_expire_first: 0,
        }
    }
}

/// A fault the stub can inject. `name()` is the directive spelling: `[[fault:NAME]]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// `429`: 429 with `Retry-After: 0` and an OpenAI rate-limit error body.
    RateLimited,
    /// `429ms`: 429 with `retry-after-ms: 20` (and no `Retry-After`).
    RateLimitedMs,
    /// `429date`: 429 with `Retry-After: <HTTP-date one second in the past>`.
    RateLimitedDate,
    /// `quota`: 429 with an `insufficient_quota` error body and no retry header (not retryable).
    Quota,
    /// `500`: internal server error (retryable).
    ServerError,
    /// `503`: service unavailable (retryable).
    Unavailable,
    /// `400`: bad request (not retryable).
    BadRequest,
    /// `401`: invalid API key (not retryable).
    Unauthorized,
    /// `hang`: sleep `StubConfig::hang`, then reply normally.
    Hang,
    /// `reset`: drop the TCP connection abruptly (RST) without any response.
    Reset,
    /// `malformed`: 200 with the truncated non-JSON body `{"choices": [`.
    Malformed,
    /// `nocontent`: 200 with `message.content: null` and `finish_reason: "content_filter"`.
    NoContent,
}

impl Fault {
    /// Every fault kind.
    pub const ALL: [Fault; 12] = [
        Fault::RateLimited,
        Fault::RateLimitedMs,
        Fault::RateLimitedDate,
        Fault::Quota,
        Fault::ServerError,
        Fault::Unavailable,
        Fault::BadRequest,
        Fault::Unauthorized,
        Fault::Hang,
        Fault::Reset,
        Fault::Malformed,
        Fault::NoContent,
    ];

    /// The kinds drawn by random faults (all retryable).
    pub const RANDOM: [Fault; 6] = [
        Fault::RateLimited,
        Fault::RateLimitedMs,
        Fault::ServerError,
        Fault::Unavailable,
        Fault::Reset,
        Fault::Malformed,
    ];

    /// The directive spelling (`429`, `429ms`, `429date`, `quota`, `500`, `503`, `400`, `401`,
    /// `hang`, `reset`, `malformed`, `nocontent`).
    pub fn name(self) -> &'static str {
        match self {
            Fault::RateLimited => "429",
            Fault::RateLimitedMs => "429ms",
            Fault::RateLimitedDate => "429date",
            Fault::Quota => "quota",
            Fault::ServerError => "500",
            Fault::Unavailable => "503",
            Fault::BadRequest => "400",
            Fault::Unauthorized => "401",
            Fault::Hang => "hang",
            Fault::Reset => "reset",
            Fault::Malformed => "malformed",
            Fault::NoContent => "nocontent",
        }
    }

    /// Parses a directive spelling (exact, case-sensitive).
    pub fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The HTTP status the client sees, `None` for `reset` (no response at all).
    pub fn status(self) -> Option<u16> {
        match self {
            Fault::RateLimited | Fault::RateLimitedMs | Fault::RateLimitedDate | Fault::Quota => {
                Some(429)
            }
            Fault::ServerError => Some(500),
            Fault::Unavailable => Some(503),
            Fault::BadRequest => Some(400),
            Fault::Unauthorized => Some(401),
            Fault::Hang | Fault::Malformed | Fault::NoContent => Some(200),
            Fault::Reset => None,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One HTTP request the stub received (every attempt is one record).
#[derive(Debug, Clone)]
pub struct RequestRecord {
    /// 0-based arrival number since start / the last `reset_counters`.
    pub seq: u64,
    pub method: String,
    /// The path without the query string, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The raw query string, e.g. `api-version=2024-10-21`.
    pub query: Option<String>,
    /// Azure route only: the `{deployment}` path segment.
    pub deployment: Option<String>,
    /// Azure route only: the `api-version` query parameter.
    pub api_version: Option<String>,
    /// The `Authorization` header value, if any (e.g. `Bearer sk-test`).
    pub authorization: Option<String>,
    /// The `api-key` header value, if any.
    pub api_key: Option<String>,
    /// All request headers (lower-case names), in arrival order.
    pub headers: Vec<(String, String)>,
    /// The parsed JSON body, `None` if the body is not JSON.
    pub body: Option<Value>,
    /// The text of the last `role: "user"` message (content parts of type text joined by `\n`).
    pub last_user_message: Option<String>,
    /// The fault applied to this attempt, if any.
    pub fault: Option<Fault>,
    /// Whether `fault` came from the random draw (`fault_rate`) rather than a directive.
    pub random_fault: bool,
    /// The HTTP status sent (`None` for a `reset`).
    pub status: Option<u16>,
}

impl RequestRecord {
    /// `Authorization` header present?
    pub fn has_authorization(&self) -> bool {
        self.authorization.is_some()
    }
    /// `api-key` header present?
    pub fn has_api_key(&self) -> bool {
        self.api_key.is_some()
    }
    /// Texts of all `role: "user"` messages of the body.
    pub fn user_messages(&self) -> Vec<String> {
        self.body.as_ref().map(user_texts).unwrap_or_default()
    }
}

/// A running stub server. Dropping it shuts the server down (listener and open connections).
pub struct StubJudge {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<watch::Sender<()>>,
    accept_task: Option<tokio::task::JoinHandle<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StubJudge {
    /// Binds `127.0.0.1:0` and serves on the current tokio runtime (a spawned task).
    /// On a current-thread runtime (plain `#[tokio::test]`) the server only runs while the test
    /// awaits, so use an async client there (or `flavor = "multi_thread"`).
    pub async fn start(config: StubConfig) -> StubJudge {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("stub judge: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("stub judge: local_addr");
        let shared = Arc::new(Shared::new(config));
        let (tx, rx) = watch::channel(());
        let task = tokio::spawn(accept_loop(listener, shared.clone(), rx));
        StubJudge {
            addr,
            shared,
            shutdown: Some(tx),
            accept_task: Some(task),
            thread: None,
        }
    }

    /// Serves from an own OS thread with an own multi-thread runtime (2 workers); returns once
    /// listening. For sync tests (e.g. ones that run the CLI as a subprocess). Drop joins it.
    pub fn start_in_background(config: StubConfig) -> StubJudge {
        let shared = Arc::new(Shared::new(config));
        let (tx, rx) = watch::channel(());
        let (addr_tx, addr_rx) = std::sync::mpsc::channel::<SocketAddr>();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("stub-judge".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("stub-judge-worker")
                    .enable_all()
                    .build()
                    .expect("stub judge: build runtime");
                rt.block_on(async move {
                    let listener = TcpListener::bind(("127.0.0.1", 0))
                        .await
                        .expect("stub judge: bind 127.0.0.1:0");
                    let addr = listener.local_addr().expect("stub judge: local_addr");
                    let mut stop = rx.clone();
                    let task = tokio::spawn(accept_loop(listener, thread_shared, rx));
                    let _ = addr_tx.send(addr);
                    // Resolves (with Err) once the Sender is dropped by StubJudge::drop.
                    let _ = stop.changed().await;
                    task.abort();
                });
                rt.shutdown_timeout(Duration::from_secs(1));
            })
            .expect("stub judge: spawn thread");
        let addr = addr_rx
            .recv()
            .expect("stub judge: server thread failed to start");
        StubJudge {
            addr,
            shared,
            shutdown: Some(tx),
            accept_task: None,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT/v1` (OpenAI base URL form).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// `http://127.0.0.1:PORT` (Azure endpoint form).
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Prompt tokens of the normal chat replies (o200k, OpenAI's chat counting), and the
    /// part reported as served from the simulated prompt cache.
    pub fn prompt_tokens(&self) -> (u64, u64) {
        (
            self.shared.prompt_tokens.load(Ordering::SeqCst),
            self.shared.cached_tokens.load(Ordering::SeqCst),
        )
    }

    /// Prompt tokens of the normal replies' first messages: the static prefix a provider's
    /// prompt cache could serve (the rubric, when it is the system message).
    pub fn prefix_tokens(&self) -> u64 {
        self.shared.prefix_tokens.load(Ordering::SeqCst)
    }

    /// Requests with this method whose path ends with `suffix` (e.g. `("POST", "/batches")`,
    /// `("POST", "/chat/completions")`).
    pub fn requests_to(&self, method: &str, suffix: &str) -> usize {
        lock(&self.shared.log)
            .iter()
            .filter(|r| r.method == method && r.path.ends_with(suffix))
            .count()
    }

    /// Batches created so far.
    pub fn batches_created(&self) -> usize {
        lock(&self.shared.batches).len()
    }

    /// Batch lines answered so far (every submission of a line counts).
    pub fn batch_lines(&self) -> u64 {
        self.shared.batch_lines.load(Ordering::SeqCst)
    }

    /// HTTP requests received (every attempt, whatever the outcome).
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// 200 replies carrying a well-formed chat completion with non-null content (normal replies,
    /// `[[score:]]`/`[[reply:]]` replies, `hang` after its sleep). Not `malformed`/`nocontent`.
    pub fn ok_replies(&self) -> u64 {
        self.shared.ok_replies.load(Ordering::SeqCst)
    }

    /// Attempts that got a fault (directive or random), excluding the 401 of `require_key`.
    pub fn faults(&self) -> u64 {
        self.shared.faults.load(Ordering::SeqCst)
    }

    /// Maximum number of requests handled at once (from receipt to reply or drop).
    pub fn peak_in_flight(&self) -> usize {
        self.shared.peak.load(Ordering::SeqCst)
    }

    /// Requests being handled now.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// Requests any of whose `role: "user"` messages contains `needle`.
    pub fn requests_containing(&self, needle: &str) -> u64 {
        lock(&self.shared.log)
            .iter()
            .filter(|r| r.user_messages().iter().any(|m| m.contains(needle)))
            .count() as u64
    }

    /// Every request received since start / the last `reset_counters`, in arrival order.
    pub fn log(&self) -> Vec<RequestRecord> {
        lock(&self.shared.log).clone()
    }

    /// Clears the counters, the log, the per-content `xN` fault counts and the random-draw
    /// counter (so the random fault sequence starts over). `peak_in_flight` restarts from the
    /// current `in_flight`.
    pub fn reset_counters(&self) {
        let s = &self.shared;
        let mut log = lock(&s.log);
        log.clear();
        lock(&s.fault_counts).clear();
        s.requests.store(0, Ordering::SeqCst);
        s.ok_replies.store(0, Ordering::SeqCst);
        s.faults.store(0, Ordering::SeqCst);
        s.draws.store(0, Ordering::SeqCst);
        s.prompt_tokens.store(0, Ordering::SeqCst);
        s.cached_tokens.store(0, Ordering::SeqCst);
        s.prefix_tokens.store(0, Ordering::SeqCst);
        s.peak
            .store(s.in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

impl Drop for StubJudge {
    fn drop(&mut self) {
        // Dropping the Sender wakes every `changed()`: the accept loop and all connections stop.
        drop(self.shutdown.take());
        if let Some(task) = self.accept_task.take() {
            task.abort();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for StubJudge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StubJudge")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------------
// Server
// ---------------------------------------------------------------------------------------------

struct Shared {
    config: StubConfig,
    requests: AtomicU64,
    ok_replies: AtomicU64,
    faults: AtomicU64,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    /// Random-eligible attempts so far (the random fault stream position).
    draws: AtomicU64,
    log: Mutex<Vec<RequestRecord>>,
    /// Attempts per last-user-message content, for `[[fault:KINDxN]]`.
    fault_counts: Mutex<HashMap<String, u64>>,
    /// First messages seen, for the simulated prompt cache.
    prefixes: Mutex<std::collections::HashSet<u64>>,
    /// Prompt tokens of the normal replies, and the part reported cached.
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    /// Prompt tokens of the normal replies' first messages (the static prefix).
    prefix_tokens: AtomicU64,
    /// Batch API: uploaded files by id, batches in creation order, lines answered so far
    /// (every submission), and submissions per `custom_id`.
    files: Mutex<HashMap<String, String>>,
    batches: Mutex<Vec<StubBatch>>,
    batch_lines: AtomicU64,
    line_submissions: Mutex<HashMap<String, u64>>,
}

/// A batch the stub holds.
#[derive(Debug, Clone)]
struct StubBatch {
    id: String,
    input_file_id: String,
    endpoint: String,
    created: std::time::Instant,
    created_unix: u64,
    cancelled: bool,
    /// Once finished: the final status, output and error file ids, and counts.
    finished: Option<(String, Option<String>, Option<String>, u64, u64)>,
    lines: u64,
}

impl Shared {
    fn new(config: StubConfig) -> Shared {
        // Load the encoding before serving: the first reply must not be the slow one.
        o200k("");
        Shared {
            config,
            requests: AtomicU64::new(0),
            ok_replies: AtomicU64::new(0),
            faults: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            draws: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
            fault_counts: Mutex::new(HashMap::new()),
            prefixes: Mutex::new(Default::default()),
            prompt_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            prefix_tokens: AtomicU64::new(0),
            files: Mutex::new(HashMap::new()),
            batches: Mutex::new(Vec::new()),
            batch_lines: AtomicU64::new(0),
            line_submissions: Mutex::new(HashMap::new()),
        }
    }
}

/// Locks, ignoring poisoning (a panicking handler must not wedge the stub).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(serve_connection(stream, shared.clone(), shutdown.clone()));
                }
                // E.g. EMFILE: back off briefly instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            },
        }
    }
}

async fn serve_connection(
    stream: TcpStream,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<()>,
) {
    let reset = Arc::new(Notify::new());
    let svc_reset = reset.clone();
    let svc = service_fn(move |req: Request<Incoming>| {
        let shared = shared.clone();
        let reset = svc_reset.clone();
        // Each request runs in its own task: a panic becomes a 500 instead of a dead
        // connection, and dropping the connection aborts the task.
        let task = AbortOnDrop(tokio::spawn(handle(shared, reset, req)));
        async move {
            match task.await {
                Ok(resp) => Ok::<_, Infallible>(resp),
                Err(_) => Ok(error_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "stub judge: handler panicked",
                    "server_error",
                    None,
                )),
            }
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.keep_alive(true).header_read_timeout(None);
    let mut conn = builder.serve_connection(TokioIo::new(stream), svc);
    let do_reset = tokio::select! {
        _ = &mut conn => false,
        _ = reset.notified() => true,
        _ = shutdown.changed() => false,
    };
    if do_reset {
        // SO_LINGER 0 then close: the peer gets a TCP RST and no response bytes.
        let parts = conn.into_parts();
        let stream = parts.io.into_inner();
        let _ = stream.set_zero_linger();
        drop(stream);
    }
}

/// A JoinHandle that aborts its task when dropped (the service future was dropped because the
/// connection went away).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Counts a request in flight from receipt until reply or drop.
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn enter(shared: &'a Shared) -> InFlight<'a> {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.peak.fetch_max(now, Ordering::SeqCst);
        InFlight(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

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

type Resp = Response<Full<Bytes>>;

async fn handle(shared: Arc<Shared>, reset: Arc<Notify>, req: Request<Incoming>) -> Resp {
    let _guard = InFlight::enter(&shared);
    let seq = shared.requests.fetch_add(1, Ordering::SeqCst);

    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().map(str::to_string);
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let authorization = header("authorization");
    let api_key = header("api-key");
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let json_body: Option<Value> = serde_json::from_slice(&body).ok();

    // A small agent app for `invoke_app`: `POST /agent` with {"query": ...} answers with a
    // response and the trajectory of the tools it "used"; `{"fail": 503}` answers that status.
    if path == "/agent" && parts.method == hyper::Method::POST {
        tokio::time::sleep(shared.config.latency).await;
        let asked = json_body
            .as_ref()
            .and_then(|b| b.get("query"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        lock(&shared.log).push(RequestRecord {
            seq,
            method: parts.method.to_string(),
            path: path.clone(),
            query: query.clone(),
            deployment: None,
            api_version: None,
            authorization: authorization.clone(),
            api_key: api_key.clone(),
            headers,
            body: json_body.clone(),
            last_user_message: Some(asked.clone()),
            fault: None,
            random_fault: false,
            status: Some(200),
        });
        if let Some(code) = json_body
            .as_ref()
            .and_then(|b| b.get("fail"))
            .and_then(Value::as_u64)
        {
            let status =
                StatusCode::from_u16(code as u16).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return error_response(status, "the agent failed", "server_error", None);
        }
        let city = asked
            .rsplit(' ')
            .next()
            .unwrap_or("")
            .trim_end_matches('?')
            .to_string();
        return json_response(
            StatusCode::OK,
            &json!({
                "response": format!("The weather in {city} is sunny."),
                "trajectory": [
                    {"tool_name": "get_weather", "tool_input": {"city": city}},
                    {"tool_name": "format_answer", "tool_input": {}}
                ]
            }),
        );
    }

    // The Files and Batches APIs (OpenAI's under /v1, Azure's under /openai).
    if let Some(rest) = path
        .strip_prefix("/v1/")
        .or_else(|| path.strip_prefix("/openai/"))
        .filter(|r| r.starts_with("files") || r.starts_with("batches"))
    {
        tokio::time::sleep(shared.config.latency).await;
        let content_type = header("content-type").unwrap_or_default();
        let authorised = shared.config.require_key.as_deref().is_none_or(|key| {
            authorization
                .as_deref()
                .and_then(|a| a.strip_prefix("Bearer "))
                .is_some_and(|k| k.trim() == key)
                || api_key.as_deref().is_some_and(|k| k.trim() == key)
        });
        let reply = if authorised {
            batch_api(&shared, parts.method.as_str(), rest, &content_type, &body)
        } else {
            error_response(
                StatusCode::UNAUTHORIZED,
                "Incorrect API key provided.",
                "invalid_request_error",
                Some("invalid_api_key"),
            )
        };
        lock(&shared.log).push(RequestRecord {
            seq,
            method: parts.method.to_string(),
            path: path.clone(),
            query: query.clone(),
            deployment: None,
            api_version: query_param(query.as_deref(), "api-version"),
            authorization: authorization.clone(),
            api_key: api_key.clone(),
            headers,
            body: json_body.clone(),
            last_user_message: None,
            fault: None,
            random_fault: false,
            status: Some(reply.status().as_u16()),
        });
        return reply;
    }

    // Route.
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let (known_route, deployment) = match segments.as_slice() {
        ["", "v1", "chat", "completions"] => (true, None),
        ["", "openai", "deployments", dep, "chat", "completions"] if !dep.is_empty() => {
            (true, Some(percent_decode(dep)))
        }
        _ => (false, None),
    };
    let api_version = deployment
        .as_ref()
        .and_then(|_| query_param(query.as_deref(), "api-version"));
    let last_user = json_body.as_ref().and_then(last_user_text);
    let has_messages = json_body
        .as_ref()
        .and_then(|b| b.get("messages"))
        .and_then(Value::as_array)
        .is_some_and(|m| !m.is_empty());

    let config = &shared.config;
    let mut random_fault = false;
    let model_down = json_body
        .as_ref()
        .and_then(|b| b.get("model"))
        .and_then(Value::as_str)
        .is_some_and(|m| m.starts_with("panel-down"));
    let outcome = if model_down {
        // A panel member whose service is down.
        Outcome::Fault(Fault::Unavailable)
    } else if !known_route || parts.method != hyper::Method::POST {
        Outcome::Error {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "Unknown request URL: {} {}. Please check the URL for typos.",
                parts.method, path
            ),
            kind: "invalid_request_error",
            code: Some("unknown_url"),
        }
    } else if config.require_key.as_deref().is_some_and(|key| {
        let bearer_ok = authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "))
            .is_some_and(|k| k.trim() == key);
        let api_key_ok = api_key.as_deref().is_some_and(|k| k.trim() == key);
        !(bearer_ok || api_key_ok)
    }) {
        Outcome::Error {
            status: StatusCode::UNAUTHORIZED,
            message: "Incorrect API key provided.".to_string(),
            kind: "invalid_request_error",
            code: Some("invalid_api_key"),
        }
    } else if json_body.is_none() || !has_messages {
        Outcome::Error {
            status: StatusCode::BAD_REQUEST,
            message: if json_body.is_none() {
                "We could not parse the JSON body of your request.".to_string()
            } else {
                "'messages' is a required property and must be a non-empty array.".to_string()
            },
            kind: "invalid_request_error",
            code: None,
        }
    } else {
        let text = last_user.as_deref().unwrap_or("");
        match parse_fault_directive(text) {
            Some((fault, limit)) => {
                let attempt = {
                    let mut counts = lock(&shared.fault_counts);
                    let n = counts.entry(text.to_string()).or_insert(0);
                    *n += 1;
                    *n
                };
                if limit.is_none_or(|limit| attempt <= limit) {
                    Outcome::Fault(fault)
                } else {
                    Outcome::Normal
                }
            }
            None if config.fault_rate > 0.0 && !has_directive(text) => {
                let draw = shared.draws.fetch_add(1, Ordering::SeqCst);
                match random_fault_for(config.seed, draw, config.fault_rate) {
                    Some(f) => {
                        random_fault = true;
                        Outcome::Fault(f)
                    }
                    None => Outcome::Normal,
                }
            }
            None => Outcome::Normal,
        }
    };

    let fault = match &outcome {
        Outcome::Fault(f) => Some(*f),
        _ => None,
    };
    if fault.is_some() {
        shared.faults.fetch_add(1, Ordering::SeqCst);
    }
    let status = match &outcome {
        Outcome::Error { status, .. } => Some(status.as_u16()),
        Outcome::Fault(f) => f.status(),
        Outcome::Normal => Some(200),
    };
    lock(&shared.log).push(RequestRecord {
        seq,
        method: parts.method.to_string(),
        path: path.clone(),
        query: query.clone(),
        deployment: deployment.clone(),
        api_version,
        authorization,
        api_key,
        headers,
        body: json_body.clone(),
        last_user_message: last_user.clone(),
        fault,
        random_fault,
        status,
    });

    if !config.latency.is_zero() {
        tokio::time::sleep(config.latency).await;
    }

    let body = json_body.unwrap_or(Value::Null);
    let model = deployment
        .clone()
        .or_else(|| {
            body.get("model")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| "stub-model".to_string());
    let normal = |shared: &Shared| {
        shared.ok_replies.fetch_add(1, Ordering::SeqCst);
        completion_response(
            shared,
            seq,
            &model,
            &body,
            last_user.as_deref().unwrap_or(""),
        )
    };
    match outcome {
        Outcome::Error {
            status,
            message,
            kind,
            code,
        } => error_response(status, &message, kind, code),
        Outcome::Normal => normal(&shared),
        Outcome::Fault(f) => match f {
            Fault::Hang => {
                tokio::time::sleep(config.hang).await;
                normal(&shared)
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
                let mut v = completion_json(seq, &model, &body, Value::Null, "content_filter");
                v["choices"][0]["message"]["refusal"] = Value::Null;
                json_response(StatusCode::OK, &v)
            }
            Fault::RateLimited | Fault::RateLimitedMs | Fault::RateLimitedDate => {
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
            Fault::Quota => error_response(
                StatusCode::TOO_MANY_REQUESTS,
                "You exceeded your current quota",
                "insufficient_quota",
                Some("insufficient_quota"),
            ),
            Fault::ServerError => error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The server had an error while processing your request. Sorry about that!",
                "server_error",
                None,
            ),
            Fault::Unavailable => error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                "The engine is currently overloaded, please try again later.",
                "server_error",
                None,
            ),
            Fault::BadRequest => error_response(
                StatusCode::BAD_REQUEST,
                "Invalid request (injected by stub judge).",
                "invalid_request_error",
                None,
            ),
            Fault::Unauthorized => error_response(
                StatusCode::UNAUTHORIZED,
                "Incorrect API key provided.",
                "invalid_request_error",
                Some("invalid_api_key"),
            ),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Batch API
// ---------------------------------------------------------------------------------------------

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The file part of a `multipart/form-data` body.
fn multipart_file(content_type: &str, body: &[u8]) -> Option<String> {
    let boundary = content_type.split("boundary=").nth(1)?.trim_matches('"');
    let text = std::str::from_utf8(body).ok()?;
    let delimiter = format!("--{boundary}");
    text.split(&delimiter)
        .find(|part| part.contains("name=\"file\""))
        .and_then(|part| part.split_once("\r\n\r\n"))
        .map(|(_, content)| content.strip_suffix("\r\n").unwrap_or(content).to_string())
}

fn batch_json(b: &StubBatch) -> Value {
    let (status, output, error, completed, failed) = match (&b.finished, b.cancelled) {
        (Some((status, output, error, completed, failed)), _) => (
            status.clone(),
            output.clone(),
            error.clone(),
            *completed,
            *failed,
        ),
        (None, true) => ("cancelling".to_string(), None, None, 0, 0),
        (None, false) => ("in_progress".to_string(), None, None, 0, 0),
    };
    json!({
        "id": b.id,
        "object": "batch",
        "endpoint": b.endpoint,
        "input_file_id": b.input_file_id,
        "completion_window": "24h",
        "status": status,
        "output_file_id": output,
        "error_file_id": error,
        "created_at": b.created_unix,
        "request_counts": {"total": b.lines, "completed": completed, "failed": failed},
        "errors": null,
    })
}

/// Finishes a batch whose time has come: every line answered as the chat endpoint would,
/// directives and `batch_fail_share` failures as error lines, expiry or cancellation as
/// `batch_expired` / `batch_cancelled` errors.
fn finish_batch(shared: &Shared, index: usize) {
    let (batch, expire) = {
        let batches = lock(&shared.batches);
        let b = batches[index].clone();
        if b.finished.is_some() || (!b.cancelled && b.created.elapsed() < shared.config.batch_delay)
        {
            return;
        }
        (b, index < shared.config.batch_expire_first)
    };
    let input = lock(&shared.files)
        .get(&batch.input_file_id)
        .cloned()
        .unwrap_or_default();
    let lines: Vec<Value> = input
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let (mut output, mut errors) = (String::new(), String::new());
    let (mut completed, mut failed) = (0u64, 0u64);
    for (i, line) in lines.iter().enumerate() {
        let custom_id = line.get("custom_id").and_then(Value::as_str).unwrap_or("");
        let request_id = format!("{}-{i}", batch.id);
        let unfinished = if batch.cancelled {
            Some(("batch_cancelled", "The batch was cancelled."))
        } else if expire && i >= lines.len() / 2 {
            Some((
                "batch_expired",
                "This request could not be executed before the completion window expired.",
            ))
        } else {
            None
        };
        if let Some((code, message)) = unfinished {
            failed += 1;
            errors.push_str(
                &json!({"id": request_id, "custom_id": custom_id, "response": null,
                        "error": {"code": code, "message": message}})
                .to_string(),
            );
            errors.push('\n');
            continue;
        }
        let body = line.get("body").cloned().unwrap_or(Value::Null);
        let last_user = last_user_text(&body).unwrap_or_default();
        let submission = {
            let mut subs = lock(&shared.line_submissions);
            let n = subs.entry(custom_id.to_string()).or_insert(0);
            *n += 1;
            *n
        };
        shared.batch_lines.fetch_add(1, Ordering::SeqCst);
        let directive = parse_fault_directive(&last_user).and_then(|(fault, limit)| {
            let attempt = {
                let mut counts = lock(&shared.fault_counts);
                let n = counts.entry(last_user.clone()).or_insert(0);
                *n += 1;
                *n
            };
            limit.is_none_or(|l| attempt <= l).then_some(fault)
        });
        let share = shared.config.batch_fail_share;
        let draw = (splitmix64(fnv1a(custom_id.as_bytes())) >> 11) as f64 / (1u64 << 53) as f64;
        let status = match directive {
            Some(f) => f.status().filter(|s| *s != 200).unwrap_or(500),
            None if submission == 1 && draw < share => 500,
            None => 200,
        };
        if status != 200 {
            failed += 1;
            errors.push_str(
                &json!({"id": request_id, "custom_id": custom_id,
                        "response": {"status_code": status, "request_id": request_id,
                                     "body": {"error": {"message": format!("stub batch line failed with {status}"),
                                                        "type": "server_error"}}},
                        "error": null})
                .to_string(),
            );
            errors.push('\n');
            continue;
        }
        completed += 1;
        let model = body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("stub-model")
            .to_string();
        let content = judgement_content(&body, &last_user);
        let cached = count_usage(shared, &body);
        let reply = completion_json_cached(
            i as u64,
            &model,
            &body,
            Value::String(content),
            "stop",
            cached,
        );
        output.push_str(
            &json!({"id": request_id, "custom_id": custom_id,
                    "response": {"status_code": 200, "request_id": request_id, "body": reply},
                    "error": null})
            .to_string(),
        );
        output.push('\n');
    }
    let mut files = lock(&shared.files);
    let mut file = |text: String, kind: &str| {
        (!text.is_empty()).then(|| {
            let id = format!("file-{kind}-{}-{}", batch.id, files.len());
            files.insert(id.clone(), text);
            id
        })
    };
    let output_id = file(output, "out");
    let error_id = file(errors, "err");
    let status = if batch.cancelled {
        "cancelled"
    } else if expire {
        "expired"
    } else {
        "completed"
    };
    lock(&shared.batches)[index].finished =
        Some((status.to_string(), output_id, error_id, completed, failed));
}

/// `rest` is the path after `/v1/` or `/openai/`.
fn batch_api(shared: &Shared, method: &str, rest: &str, content_type: &str, body: &[u8]) -> Resp {
    let segments: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    let not_found = || {
        error_response(
            StatusCode::NOT_FOUND,
            "No such object.",
            "invalid_request_error",
            None,
        )
    };
    match (method, segments.as_slice()) {
        ("POST", ["files"]) => {
            let Some(content) = multipart_file(content_type, body) else {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    "expected a multipart body with a file part",
                    "invalid_request_error",
                    None,
                );
            };
            let mut files = lock(&shared.files);
            let id = format!("file-in-{}", files.len());
            let bytes = content.len();
            files.insert(id.clone(), content);
            json_response(
                StatusCode::OK,
                &json!({"id": id, "object": "file", "bytes": bytes, "purpose": "batch",
                        "filename": "batch.jsonl", "created_at": unix_now()}),
            )
        }
        ("GET", ["files", id, "content"]) => match lock(&shared.files).get(*id) {
            Some(text) => {
                let mut r = Response::new(Full::new(Bytes::from(text.clone())));
                r.headers_mut().insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/octet-stream"),
                );
                r
            }
            None => not_found(),
        },
        ("POST", ["batches"]) => {
            let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            let Some(file) = request.get("input_file_id").and_then(Value::as_str) else {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    "input_file_id is required",
                    "invalid_request_error",
                    None,
                );
            };
            let Some(lines) = lock(&shared.files)
                .get(file)
                .map(|t| t.lines().count() as u64)
            else {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    "No such file.",
                    "invalid_request_error",
                    None,
                );
            };
            let mut batches = lock(&shared.batches);
            let batch = StubBatch {
                id: format!("batch_stub_{}", batches.len()),
                input_file_id: file.to_string(),
                endpoint: request
                    .get("endpoint")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                created: std::time::Instant::now(),
                created_unix: unix_now(),
                cancelled: false,
                finished: None,
                lines,
            };
            let reply = batch_json(&batch);
            batches.push(batch);
            json_response(StatusCode::OK, &reply)
        }
        ("GET", ["batches"]) => {
            let count = lock(&shared.batches).len();
            for i in 0..count {
                finish_batch(shared, i);
            }
            let data: Vec<Value> = lock(&shared.batches).iter().rev().map(batch_json).collect();
            json_response(
                StatusCode::OK,
                &json!({"object": "list", "data": data, "has_more": false}),
            )
        }
        ("GET", ["batches", id]) => {
            let Some(index) = lock(&shared.batches).iter().position(|b| b.id == *id) else {
                return not_found();
            };
            finish_batch(shared, index);
            let b = lock(&shared.batches)[index].clone();
            json_response(StatusCode::OK, &batch_json(&b))
        }
        ("POST", ["batches", id, "cancel"]) => {
            let mut batches = lock(&shared.batches);
            let Some(b) = batches.iter_mut().find(|b| b.id == *id) else {
                return not_found();
            };
            if b.finished.is_none() {
                b.cancelled = true;
            }
            json_response(StatusCode::OK, &batch_json(b))
        }
        _ => not_found(),
    }
}

// ---------------------------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------------------------

fn json_response(status: StatusCode, v: &Value) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn error_response(status: StatusCode, message: &str, kind: &str, code: Option<&str>) -> Resp {
    json_response(
        status,
        &json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
    )
}

fn completion_response(
    shared: &Shared,
    seq: u64,
    model: &str,
    body: &Value,
    last_user: &str,
) -> Resp {
    let content = judgement_content(body, last_user);
    let cached = count_usage(shared, body);
    json_response(
        StatusCode::OK,
        &completion_json_cached(seq, model, body, Value::String(content), "stop", cached),
    )
}

/// Tokens of `text` in OpenAI's o200k encoding (special-token spellings count as text).
fn o200k(text: &str) -> u64 {
    tiktoken_rs::o200k_base_singleton().count_ordinary(text) as u64
}

/// The prompt tokens of a chat request as OpenAI counts them: 3 per message plus its role
/// and content, and 3 for the reply's priming; and the tokens of its first message (the
/// static prefix when it is the system prompt).
fn prompt_usage(body: &Value) -> (u64, u64) {
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let per_message = |m: &Value| {
        3 + o200k(m.get("role").and_then(Value::as_str).unwrap_or("")) + o200k(&message_text(m))
    };
    let total = messages.iter().map(per_message).sum::<u64>() + 3;
    let first = messages.first().map_or(0, per_message);
    (total, first)
}

/// What a provider's prompt cache would serve: OpenAI caches prompts of 1,024 tokens or
/// more, in 128-token steps, when the same prefix was seen before. The stub remembers first
/// messages (rubrics) it has answered.
fn cached_tokens(seen: &Mutex<std::collections::HashSet<u64>>, body: &Value) -> u64 {
    let (total, first) = prompt_usage(body);
    let Some(first_message) = body.pointer("/messages/0") else {
        return 0;
    };
    let fresh = lock(seen).insert(fnv1a(first_message.to_string().as_bytes()));
    if fresh || total < 1024 || first < 1024 {
        return 0;
    }
    1024 + (first - 1024) / 128 * 128
}

/// Adds a normal reply's usage to the totals; the cached tokens it reports.
fn count_usage(shared: &Shared, body: &Value) -> u64 {
    let cached = cached_tokens(&shared.prefixes, body);
    let (prompt, prefix) = prompt_usage(body);
    shared.prompt_tokens.fetch_add(prompt, Ordering::SeqCst);
    shared.prefix_tokens.fetch_add(prefix, Ordering::SeqCst);
    shared.cached_tokens.fetch_add(cached, Ordering::SeqCst);
    cached
}

fn completion_json(seq: u64, model: &str, body: &Value, content: Value, finish: &str) -> Value {
    completion_json_cached(seq, model, body, content, finish, 0)
}

fn completion_json_cached(
    seq: u64,
    model: &str,
    body: &Value,
    content: Value,
    finish: &str,
    cached: u64,
) -> Value {
    let prompt_tokens = prompt_usage(body).0;
    let completion_tokens = o200k(content.as_str().unwrap_or("")).max(1);
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    json!({
        "id": format!("chatcmpl-stub-{seq}"),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content, "refusal": null},
            "logprobs": null,
            "finish_reason": finish,
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
        "system_fingerprint": "fp_stub_judge",
    })
}

/// The assistant message content for a normal reply.
fn judgement_content(body: &Value, last_user: &str) -> String {
    if let Some(text) = directive_arg(last_user, "reply") {
        return text.to_string();
    }
    // The whole conversation counts (two metrics with the same inputs differ by their
    // system prompt). FNV-1a alone varies little in its low bits between texts with the same
    // ending; the finaliser spreads the scores.
    let mut hash = splitmix64(fnv1a(body["messages"].to_string().as_bytes()));
    // A seed other than evalsql's default (42) samples another judgement, as a judge
    // sampling at a temperature would: repeated judging sees different scores.
    if let Some(seed) = body
        .get("seed")
        .and_then(Value::as_i64)
        .filter(|s| *s != 42)
    {
        hash = splitmix64(hash ^ seed as u64);
    }
    // Models named `panel-...` judge differently from each other, as a panel's would.
    if let Some(model) = body
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| m.starts_with("panel-"))
    {
        hash = splitmix64(hash ^ fnv1a(model.as_bytes()));
    }
    let score: Value = match directive_arg(last_user, "score").and_then(parse_number) {
        Some(n) => n,
        None => {
            let (lo, hi) = score_range(body);
            let span = (hi as i128 - lo as i128 + 1) as u128;
            Value::from((lo as i128 + (hash as u128 % span) as i128) as i64)
        }
    };
    let rf_type = body
        .pointer("/response_format/type")
        .and_then(Value::as_str);
    if matches!(rf_type, Some("json_schema") | Some("json_object")) {
        json!({"score": score, "reason": format!("stub judgement {:08x}", hash as u32)}).to_string()
    } else {
        format!("Reasoning: stub judgement.\nScore: {score}")
    }
}

/// Integer score range from `response_format.json_schema.schema.properties.score`, default 1..=5.
fn score_range(body: &Value) -> (i64, i64) {
    let score = body.pointer("/response_format/json_schema/schema/properties/score");
    let bound = |key: &str| score.and_then(|s| s.get(key)).and_then(Value::as_f64);
    let lo = bound("minimum").map_or(1, |v| v.ceil() as i64);
    let hi = bound("maximum").map_or(5, |v| v.floor() as i64);
    if hi < lo { (lo, lo) } else { (lo, hi) }
}

fn parse_number(s: &str) -> Option<Value> {
    let s = s.trim();
    if let Ok(i) = s.parse::<i64>() {
        return Some(Value::from(i));
    }
    s.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .map(Value::from)
}

// ---------------------------------------------------------------------------------------------
// Directives, hashing, randomness
// ---------------------------------------------------------------------------------------------

/// The argument of `[[name:ARG]]` in `text` (first occurrence; ARG ends at the first `]]`).
fn directive_arg<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("[[{name}:");
    let start = text.find(&open)? + open.len();
    let rest = &text[start..];
    let end = rest.find("]]")?;
    Some(&rest[..end])
}

fn has_directive(text: &str) -> bool {
    ["fault", "score", "reply"]
        .iter()
        .any(|d| directive_arg(text, d).is_some())
}

/// `[[fault:KIND]]` → (KIND, None); `[[fault:KINDxN]]` → (KIND, Some(N)).
fn parse_fault_directive(text: &str) -> Option<(Fault, Option<u64>)> {
    let arg = directive_arg(text, "fault")?.trim();
    if let Some(f) = Fault::parse(arg) {
        return Some((f, None));
    }
    let (kind, n) = arg.rsplit_once('x')?;
    Some((Fault::parse(kind)?, Some(n.parse().ok()?)))
}

fn random_fault_for(seed: u64, draw: u64, rate: f64) -> Option<Fault> {
    let h = splitmix64(seed ^ splitmix64(draw.wrapping_add(0x5EED)));
    let u = (h >> 11) as f64 / (1u64 << 53) as f64;
    if u < rate {
        let pick = splitmix64(h) % Fault::RANDOM.len() as u64;
        Some(Fault::RANDOM[pick as usize])
    } else {
        None
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

// ---------------------------------------------------------------------------------------------
// Request helpers
// ---------------------------------------------------------------------------------------------

/// Text of a message's content: a string, or the `text` of its content parts joined by `\n`.
fn message_text(m: &Value) -> String {
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                _ => p.get("text").and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn user_texts(body: &Value) -> Vec<String> {
    body.get("messages")
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                .map(message_text)
                .collect()
        })
        .unwrap_or_default()
}

fn last_user_text(body: &Value) -> Option<String> {
    user_texts(body).pop()
}

fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
fn http_date(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
    const WD: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MON: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
        WD[days.rem_euclid(7) as usize],
        day,
        MON[(month - 1) as usize],
        year,
        sod / 3600,
        (sod % 3600) / 60,
        sod % 60
    )
}
