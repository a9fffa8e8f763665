//! A stub OpenAI-compatible chat-completions server for integration tests and benchmarks.
//!
//! It listens on `127.0.0.1:<ephemeral port>`, speaks HTTP/1.1 with keep-alive and answers
//! `POST /v1/chat/completions` (OpenAI form) and
//! `POST /openai/deployments/{deployment}/chat/completions?api-version=...` (Azure form)
//! with a deterministic judgement. Faults are injected per request through directives in the
//! last user message (`[[fault:500x2]]`, `[[score:7]]`, `[[reply:TEXT]]`, see [`Fault`]) or at
//! random with [`StubConfig::fault_rate`].
//!
//! Self-contained: included with `#[path = "support/stub_judge/mod.rs"] mod stub_judge;`;
//! `chat.rs` answers chat completions, `batches.rs` the Files and Batches APIs, `app.rs` a
//! small agent app for `invoke_app`, `faults.rs` the injected faults, `replies.rs` the
//! judgements and their usage.
//! Dependencies: tokio (rt-multi-thread, macros, net, time, sync), hyper 1 (server, http1),
//! hyper-util 0.1 (tokio), http-body-util 0.1, bytes 1, serde_json 1, tiktoken-rs 0.12 (usage
//! is counted in OpenAI's o200k encoding, and cached prompt tokens are reported the way
//! OpenAI's prompt cache would serve them).
#![allow(dead_code)]

mod app;
mod batches;
mod chat;
mod faults;
mod replies;
mod request;

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

pub use faults::Fault;
use faults::*;
use replies::*;
use request::*;

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
    /// A model named `small-...` plays a cheaper judge: it gives the main model's score on
    /// this share of rows (by a hash of the messages) and a neighbouring score on the rest.
    /// Asked for `logprobs`, it puts its confidence in the score token: drawn from
    /// [0.55, 1) where it agrees and [0.3, 0.65) where not (overlapping, as a real small
    /// model's would); any other model answers with confidence 0.95.
    pub small_agreement: f64,
    /// Whether the small model's confidence tells agreeing rows from the others (false: it
    /// is drawn from [0.3, 1) whatever the row, so it carries no information).
    pub small_confidence_informative: bool,
    /// Whether `logprobs` requests get log-probabilities (false: an endpoint without them).
    pub logprobs: bool,
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
            small_agreement: 0.85,
            small_confidence_informative: true,
            logprobs: true,
        }
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
    /// Distinct batch lines (by `custom_id`) answered: each call once, however often its
    /// results were read.
    pub fn distinct_batch_lines(&self) -> u64 {
        lock(&self.shared.distinct_lines).len() as u64
    }

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
        lock(&s.distinct_lines).clear();
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
    /// The distinct batch lines answered since start / the last `reset_counters`.
    distinct_lines: Mutex<std::collections::HashSet<String>>,
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
            distinct_lines: Mutex::new(Default::default()),
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

type Resp = Response<Full<Bytes>>;

/// One request as the handlers read it: the body collected, the headers by lower-case name.
pub(super) struct Req {
    seq: u64,
    method: hyper::Method,
    path: String,
    query: Option<String>,
    headers: Vec<(String, String)>,
    body: Bytes,
    json: Option<Value>,
}

impl Req {
    async fn read(seq: u64, req: Request<Incoming>) -> Req {
        let (parts, body) = req.into_parts();
        let body = match body.collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => Bytes::new(),
        };
        Req {
            seq,
            method: parts.method,
            path: parts.uri.path().to_string(),
            query: parts.uri.query().map(str::to_string),
            headers: parts
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            json: serde_json::from_slice(&body).ok(),
            body,
        }
    }

    /// The first value of header `name` (any case).
    fn header(&self, name: &str) -> Option<String> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    }

    /// Whether the request carries `key` (none needed: always), as a bearer token or an
    /// Azure `api-key`.
    fn authorised(&self, key: Option<&str>) -> bool {
        key.is_none_or(|key| {
            self.header("authorization")
                .as_deref()
                .and_then(|a| a.strip_prefix("Bearer "))
                .is_some_and(|k| k.trim() == key)
                || self.header("api-key").is_some_and(|k| k.trim() == key)
        })
    }

    /// The log record of this request; the handler fills in what it decided.
    fn record(&self) -> RequestRecord {
        RequestRecord {
            seq: self.seq,
            method: self.method.to_string(),
            path: self.path.clone(),
            query: self.query.clone(),
            deployment: None,
            api_version: None,
            authorization: self.header("authorization"),
            api_key: self.header("api-key"),
            headers: self.headers.clone(),
            body: self.json.clone(),
            last_user_message: None,
            fault: None,
            random_fault: false,
            status: None,
        }
    }
}

/// Routes a request: the agent app, the Files and Batches APIs, or chat completions.
async fn handle(shared: Arc<Shared>, reset: Arc<Notify>, req: Request<Incoming>) -> Resp {
    let _guard = InFlight::enter(&shared);
    let seq = shared.requests.fetch_add(1, Ordering::SeqCst);
    let req = Req::read(seq, req).await;
    if req.path == "/agent" && req.method == hyper::Method::POST {
        return app::agent(&shared, &req).await;
    }
    if let Some(rest) = batches::route(&req.path) {
        return batches::handle(&shared, &req, &rest).await;
    }
    chat::handle(&shared, &reset, req).await
}

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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// One chat request by hand (HTTP/1.1, `Connection: close`): the reply's JSON.
    async fn chat(stub: &StubJudge, body: &Value) -> Value {
        let body = body.to_string();
        let mut socket = TcpStream::connect(stub.addr()).await.unwrap();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: stub\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        socket.write_all(head.as_bytes()).await.unwrap();
        socket.write_all(body.as_bytes()).await.unwrap();
        let mut text = String::new();
        socket.read_to_string(&mut text).await.unwrap();
        let (_, json) = text.split_once("\r\n\r\n").unwrap();
        serde_json::from_str(json).unwrap()
    }

    /// The score token's probability and the score, from a reply's logprobs.
    fn score_token(reply: &Value) -> (i64, f64, f64) {
        let token = &reply["choices"][0]["logprobs"]["content"][1];
        let top: f64 = token["top_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["logprob"].as_f64().unwrap().exp())
            .sum();
        (
            token["token"].as_str().unwrap().parse().unwrap(),
            token["logprob"].as_f64().unwrap().exp(),
            top,
        )
    }

    #[tokio::test]
    async fn a_small_model_agrees_on_its_share_and_is_less_sure_where_it_does_not() {
        let stub = StubJudge::start(StubConfig::default()).await;
        let (mut agree, mut sure_when_agreeing, mut sure_when_not) = (0, Vec::new(), Vec::new());
        let rows = 400;
        for i in 0..rows {
            let request = |model: &str| {
                json!({"model": model, "logprobs": true, "top_logprobs": 5, "messages": [
                    {"role": "system", "content": "Rate the fluency from 1 to 5."},
                    {"role": "user", "content": format!("## RESPONSE\nanswer number {i}")}
                ]})
            };
            let main = chat(&stub, &request("gpt-4o")).await;
            let small = chat(&stub, &request("small-judge")).await;
            let (main_score, main_p, _) = score_token(&main);
            let (small_score, small_p, total) = score_token(&small);
            assert!(
                (total - 1.0).abs() < 1e-9,
                "the scale's probabilities sum to {total}"
            );
            assert_eq!(main_p, 0.95);
            let text = small["choices"][0]["message"]["content"].as_str().unwrap();
            assert!(text.ends_with(&format!("Score: {small_score}")), "{text}");
            if small_score == main_score {
                agree += 1;
                sure_when_agreeing.push(small_p);
            } else {
                assert_eq!((small_score - main_score).abs(), 1);
                sure_when_not.push(small_p);
            }
        }
        let share = agree as f64 / rows as f64;
        assert!(
            (0.8..=0.9).contains(&share),
            "the small model agreed on {share}"
        );
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        assert!(mean(&sure_when_agreeing) > mean(&sure_when_not) + 0.2);
        // The two confidence ranges overlap.
        let lowest_agreeing = sure_when_agreeing.iter().copied().fold(1.0, f64::min);
        let highest_not = sure_when_not.iter().copied().fold(0.0, f64::max);
        assert!(lowest_agreeing < highest_not);
    }
}
