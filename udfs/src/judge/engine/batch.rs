//! Batch mode (`SET evalsql.judge.mode = 'batch'`): the calls a query needs that are not
//! cached go through the provider's Batch API (OpenAI's, and Azure OpenAI's global batch,
//! which has the same shape), at the provider's batch price.
//!
//! ```text
//!   calls not cached ── lines {custom_id: cache key, url, body} ── files (≤ max lines/bytes)
//!        │                                                            │ POST /files
//!        │                      recorded in the cache database  ◄─────┤ POST /batches
//!        ▼                                                            ▼
//!   wait: GET /batches/{id} every poll interval ── terminal ── GET /files/{id}/content
//!        │                                                            │
//!        │    a line that failed retryably, or is missing from an     │ each result is
//!        └──  expired/cancelled batch, goes into a later batch  ◄─────┘ committed at once
//! ```
//!
//! Every file and batch is written to the cache database (tables `batches`, `batch_lines`)
//! before anything waits on it: a job killed while waiting and run again polls the same
//! batches and makes no new one (a file uploaded just before the kill whose batch was never
//! recorded is found again by its file id among the provider's batches). The online
//! `deadline` does not apply: a batch may take its whole 24-hour completion window. With
//! `batch_wait = false` the query returns at once, its waiting rows skipped with
//! `pending in batch <id>`, and a later run picks their results up.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::IsTerminal;
use std::sync::Arc;

use datafusion::common::{DataFusionError, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Value, json};

use super::{CallInputs, JudgeBatch, Outcome, Status, memo_cell};
use crate::llm::blocking;
use crate::llm::budget::Reservation;
use crate::llm::cache::{BatchRecord, JudgeCache};
use crate::llm::limiter::{AdaptiveLimiter, limiter_for};
use crate::llm::policy::{CallLimits, CallPolicy};
use crate::llm::progress::STATS;
use crate::llm::request::{Endpoint, parse_chat_response};
use crate::llm::retry::snippet;
use crate::llm::settings::{BatchSettings, JudgeSettings};
use crate::llm::transport::api_request;
use crate::llm::usage::Usage;

/// The largest file content read back (a result file of a full 200 MB batch is larger
/// than a chat reply's cap).
const MAX_FILE_BYTES: usize = 512 << 20;

/// What the Batch API says of one batch.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchStatus {
    pub id: String,
    pub status: String,
    pub input_file_id: Option<String>,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub total: u64,
    pub completed: u64,
    pub failed: u64,
    /// Why the whole batch failed (validation errors), if it did.
    pub errors: Option<String>,
}

impl BatchStatus {
    fn parse(body: &str) -> std::result::Result<Self, String> {
        let v: Value = serde_json::from_str(body)
            .map_err(|_| format!("the batch API answered with non-JSON: {}", snippet(body)))?;
        Self::from_value(&v)
    }

    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let count = |k: &str| {
            v.pointer(&format!("/request_counts/{k}"))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        let (Some(id), Some(status)) = (text("id"), text("status")) else {
            return Err(format!(
                "the batch API answered without an id and a status: {}",
                snippet(&v.to_string())
            ));
        };
        let errors = v
            .pointer("/errors/data")
            .and_then(Value::as_array)
            .filter(|e| !e.is_empty())
            .map(|e| {
                e.iter()
                    .filter_map(|d| d.get("message").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("; ")
            });
        Ok(Self {
            id,
            status,
            input_file_id: text("input_file_id"),
            output_file_id: text("output_file_id"),
            error_file_id: text("error_file_id"),
            total: count("total"),
            completed: count("completed"),
            failed: count("failed"),
            errors,
        })
    }

    /// Whether the batch will not change any more.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self.status.as_str(),
            "completed" | "failed" | "expired" | "cancelled"
        )
    }
}

/// The provider's Files and Batches APIs, with the judge's transport (retries, no
/// redirects, capped bodies, keys redacted from errors).
pub struct BatchApi {
    endpoint: Endpoint,
    model: String,
    policy: CallPolicy,
    limiter: Arc<AdaptiveLimiter>,
}

impl BatchApi {
    pub fn new(settings: &JudgeSettings) -> Self {
        // A handful of calls per batch: their own limiter keeps them clear of chat calls.
        let limiter = limiter_for(
            &format!("batch-api:{}", settings.limiter_key()),
            &CallLimits {
                max_concurrency: 4,
                requests_per_minute: None,
                tokens_per_minute: None,
                ..settings.limits.clone()
            },
        );
        let mut policy = CallPolicy::of(&settings.limits);
        policy.max_body = policy.max_body.max(MAX_FILE_BYTES);
        Self {
            endpoint: settings.endpoint.clone(),
            model: settings.model.clone(),
            policy,
            limiter,
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        url: String,
        content_type: Option<String>,
        body: String,
    ) -> std::result::Result<String, String> {
        let mut headers = self.endpoint.headers();
        if let Some(ct) = content_type {
            headers.retain(|(k, _)| !k.eq_ignore_ascii_case("content-type"));
            headers.push(("Content-Type".into(), ct));
        }
        let redact = |t: &str| self.endpoint.redact(t);
        api_request(
            method,
            &url,
            &headers,
            body,
            &self.policy,
            &self.limiter,
            &redact,
        )
        .await
        .map(|r| r.value.body)
        .map_err(|e| self.endpoint.redact(&e.to_string()))
    }

    /// Uploads a batch file (`purpose=batch`); its file id.
    pub async fn upload(&self, jsonl: &str) -> std::result::Result<String, String> {
        // A two-part multipart body written here: reqwest's `multipart` feature would
        // rebuild the whole DataFusion stack, which shares its reqwest with object_store.
        let mut boundary = "evalsql-batch-boundary-7f3a9c".to_string();
        while jsonl.contains(&boundary) {
            boundary.push('x');
        }
        let body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; \
             filename=\"evalsql-batch.jsonl\"\r\nContent-Type: application/jsonl\r\n\r\n\
             {jsonl}\r\n--{boundary}--\r\n"
        );
        let reply = self
            .call(
                reqwest::Method::POST,
                self.endpoint.api_url("files"),
                Some(format!("multipart/form-data; boundary={boundary}")),
                body,
            )
            .await?;
        serde_json::from_str::<Value>(&reply)
            .ok()
            .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_string))
            .ok_or_else(|| format!("the files API answered without an id: {}", snippet(&reply)))
    }

    /// Makes a batch of an uploaded file, with a 24-hour completion window.
    pub async fn create(&self, file_id: &str) -> std::result::Result<BatchStatus, String> {
        let (endpoint, _) = self.endpoint.batch_target(&self.model);
        let body = json!({
            "input_file_id": file_id,
            "endpoint": endpoint,
            "completion_window": "24h",
            "metadata": {"created_by": "evalsql"},
        });
        let reply = self
            .call(
                reqwest::Method::POST,
                self.endpoint.api_url("batches"),
                None,
                body.to_string(),
            )
            .await?;
        BatchStatus::parse(&reply)
    }

    /// A batch's status.
    pub async fn get(&self, id: &str) -> std::result::Result<BatchStatus, String> {
        let url = self
            .endpoint
            .api_url(&format!("batches/{}", path_segment(id)));
        let reply = self
            .call(reqwest::Method::GET, url, None, String::new())
            .await?;
        BatchStatus::parse(&reply)
    }

    /// Cancels a batch.
    pub async fn cancel(&self, id: &str) -> std::result::Result<BatchStatus, String> {
        let url = self
            .endpoint
            .api_url(&format!("batches/{}/cancel", path_segment(id)));
        let reply = self
            .call(reqwest::Method::POST, url, None, String::new())
            .await?;
        BatchStatus::parse(&reply)
    }

    /// The most recent batches (to find one made from a given file).
    pub async fn recent(&self) -> std::result::Result<Vec<BatchStatus>, String> {
        let url = self.endpoint.api_url("batches");
        let url = format!(
            "{url}{}limit=100",
            if url.contains('?') { '&' } else { '?' }
        );
        let reply = self
            .call(reqwest::Method::GET, url, None, String::new())
            .await?;
        let v: Value = serde_json::from_str(&reply)
            .map_err(|_| format!("the batch API answered with non-JSON: {}", snippet(&reply)))?;
        v.get("data")
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|b| BatchStatus::from_value(b).ok())
                    .collect()
            })
            .ok_or_else(|| "the batch list has no data".to_string())
    }

    /// A file's content (a result or error file).
    pub async fn content(&self, file_id: &str) -> std::result::Result<String, String> {
        let url = self
            .endpoint
            .api_url(&format!("files/{}/content", path_segment(file_id)));
        self.call(reqwest::Method::GET, url, None, String::new())
            .await
    }
}

/// An id as one URL path segment (ids are the provider's, but never trusted to be clean).
fn path_segment(id: &str) -> String {
    id.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect()
}

/// A line waiting for its result: its file and how many times it has been submitted.
#[derive(Debug, Clone)]
struct Waiting {
    file: String,
    attempt: i64,
}

/// One result line of a batch, as the engine reads it.
enum LineResult {
    Reply(String),
    Failed {
        status: Option<u16>,
        message: String,
    },
}

fn read_result_line(line: &Value) -> Option<(String, LineResult)> {
    let key = line.get("custom_id")?.as_str()?.to_string();
    let status = line
        .pointer("/response/status_code")
        .and_then(Value::as_u64)
        .map(|s| s as u16);
    let error_message = line.get("error").filter(|e| !e.is_null()).map(|e| {
        e.get("message")
            .and_then(Value::as_str)
            .map_or_else(|| e.to_string(), str::to_string)
    });
    let body = line.pointer("/response/body");
    let result = match (status, body, error_message) {
        (Some(200), Some(body), None) => LineResult::Reply(body.to_string()),
        (status, body, message) => LineResult::Failed {
            status,
            message: message
                .or_else(|| {
                    body.and_then(|b| b.pointer("/error/message"))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .unwrap_or_else(|| "no result".to_string()),
        },
    };
    Some((key, result))
}

/// Whether a line that failed with `status` is worth another batch.
fn retryable(status: Option<u16>) -> bool {
    match status {
        None => true,
        Some(s) => s == 408 || s == 429 || s >= 500,
    }
}

/// The wait's progress: a bar on a terminal, a line per change otherwise.
struct Progress {
    bar: Option<ProgressBar>,
    last: BTreeMap<String, String>,
}

impl Progress {
    fn new(lines: usize, show: bool) -> Self {
        let bar = (show && std::io::stderr().is_terminal()).then(|| {
            let bar =
                ProgressBar::with_draw_target(Some(lines as u64), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(
                "judge batches {msg} [{bar:30}] {pos}/{len} lines, ETA {eta}",
            ) {
                bar.set_style(style);
            }
            bar
        });
        Self {
            bar,
            last: BTreeMap::new(),
        }
    }

    fn batch(&mut self, s: &BatchStatus, batches: usize) {
        let line = format!("{} {}/{} lines", s.status, s.completed + s.failed, s.total);
        match &self.bar {
            Some(bar) => bar.set_message(format!("({batches} open)")),
            None => {
                if self.last.get(&s.id) != Some(&line) {
                    eprintln!("judge batch {}: {line}", s.id);
                }
            }
        }
        self.last.insert(s.id.clone(), line);
    }

    /// `n` lines have their outcome.
    fn done(&self, n: usize) {
        if let Some(bar) = &self.bar {
            bar.set_position(n as u64);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl JudgeBatch {
    /// Batch mode: gets the outcome of every call among `calls` that is neither cached nor
    /// settled in this process through the Batch API, before the rows are put together.
    pub async fn run_batch(&mut self, calls: &[(&String, &CallInputs)]) -> Result<()> {
        let Some(settings) = self.settings.batch.clone() else {
            return Ok(());
        };
        if self.settings.dry_run {
            return Ok(());
        }
        let wanted: BTreeMap<String, CallInputs> = calls
            .iter()
            .filter(|(k, i)| !self.known(k, i) && !memo_cell(k).initialized())
            .map(|(k, i)| ((*k).clone(), (*i).clone()))
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let Some(cache) = self.cache.clone() else {
            return Err(DataFusionError::Plan(format!(
                "{}: batch mode records its batches in the judge cache, which is off: SET \
                 evalsql.judge.cache (or EVALSQL_JUDGE_CACHE) to a file",
                self.metric
            )));
        };
        let keys: Vec<String> = wanted.keys().cloned().collect();
        let pending = {
            let cache = Arc::clone(&cache);
            blocking(move || cache.pending_lines(&keys)).await?
        };
        let api = BatchApi::new(&self.settings);
        let mut run = BatchRun {
            api: &api,
            cache: &cache,
            settings: &settings,
            waiting: pending
                .into_iter()
                .map(|(k, p)| {
                    (
                        k,
                        Waiting {
                            file: p.input_file,
                            attempt: p.attempt,
                        },
                    )
                })
                .collect(),
            reservations: HashMap::new(),
            outcomes: HashMap::new(),
            inputs: &wanted,
        };
        let fresh: Vec<(String, i64)> = wanted
            .keys()
            .filter(|k| !run.waiting.contains_key(*k))
            .map(|k| (k.clone(), 1))
            .collect();
        self.submit(&mut run, &wanted, fresh).await?;

        let mut progress = Progress::new(run.waiting.len(), settings.wait);
        loop {
            let files: BTreeSet<String> = run.waiting.values().map(|w| w.file.clone()).collect();
            if files.is_empty() {
                break;
            }
            let records: HashMap<String, BatchRecord> = {
                let cache = Arc::clone(&cache);
                blocking(move || cache.batches())
                    .await?
                    .into_iter()
                    .map(|r| (r.input_file.clone(), r))
                    .collect()
            };
            let mut resubmit = Vec::new();
            for file in &files {
                let status = match records.get(file).and_then(|r| r.id.clone()) {
                    Some(id) => api.get(&id).await,
                    None => self.adopt_or_create(&run, file).await,
                };
                let status = match status {
                    Ok(s) => s,
                    Err(e) => {
                        // The batch cannot be read: its lines are error rows (a later run
                        // asks again, the lines stay recorded as pending).
                        let lines: Vec<String> = run.lines_of(file);
                        for key in lines {
                            run.finish(
                                &key,
                                Outcome::failed(&self.settings.model, e.clone(), Usage::default()),
                            );
                        }
                        continue;
                    }
                };
                if records.get(file).map(|r| r.status.as_str()) != Some(status.status.as_str()) {
                    let (cache, file, id, st) = (
                        Arc::clone(&cache),
                        file.clone(),
                        status.id.clone(),
                        status.status.clone(),
                    );
                    blocking(move || cache.set_batch(&file, &id, &st)).await?;
                }
                progress.batch(&status, files.len());
                if status.is_terminal() {
                    self.collect(&mut run, file, &status, &mut resubmit).await?;
                    progress.done(run.outcomes.len());
                }
            }
            if !resubmit.is_empty() {
                self.submit(&mut run, &wanted, resubmit).await?;
            }
            if run.waiting.is_empty() {
                break;
            }
            if !settings.wait {
                let records: HashMap<String, Option<String>> = {
                    let cache = Arc::clone(&cache);
                    blocking(move || cache.batches())
                        .await?
                        .into_iter()
                        .map(|r| (r.input_file, r.id))
                        .collect()
                };
                let waiting: Vec<(String, String)> = run
                    .waiting
                    .iter()
                    .map(|(k, w)| (k.clone(), w.file.clone()))
                    .collect();
                for (key, file) in waiting {
                    let id = records.get(&file).cloned().flatten().unwrap_or(file);
                    let outcome =
                        Outcome::not_sent(&self.settings.model, format!("pending in batch {id}"));
                    // Not shared: a later query in this process asks the batch again.
                    run.waiting.remove(&key);
                    run.outcomes.insert(key, Arc::new(outcome));
                }
                break;
            }
            tokio::time::sleep(settings.poll_interval).await;
        }
        // Lines without a reply (pending, or failed) give their reservation back.
        for (_, r) in run.reservations.drain() {
            self.settings.ledger.release(r);
        }
        self.batch_outcomes = run.outcomes;
        Ok(())
    }

    /// Writes `lines` into batch files, uploads them, records them and makes their batches.
    async fn submit(
        &self,
        run: &mut BatchRun<'_>,
        wanted: &BTreeMap<String, CallInputs>,
        lines: Vec<(String, i64)>,
    ) -> Result<()> {
        let (url, model) = self.settings.endpoint.batch_target(&self.settings.model);
        let mut files: Vec<(String, Vec<(String, i64)>)> = Vec::new();
        let mut current = (String::new(), Vec::new());
        for (key, attempt) in lines {
            let Some(inputs) = wanted.get(&key) else {
                continue;
            };
            let request = match self.request(inputs) {
                Ok(r) => r,
                Err(e) => {
                    run.finish(
                        &key,
                        Outcome::failed(&self.settings.model, e, Usage::default()),
                    );
                    continue;
                }
            };
            if attempt == 1 && !self.settings.budget.is_unlimited() {
                let (tokens, worst) = self.worst_case(&request);
                match self.settings.ledger.try_reserve_call(
                    &key,
                    &self.settings.budget,
                    worst,
                    tokens,
                ) {
                    Ok(r) => {
                        run.reservations.insert(key.clone(), r);
                    }
                    Err(e) => {
                        run.outcomes
                            .insert(key, Arc::new(Outcome::not_sent(&self.settings.model, e)));
                        continue;
                    }
                }
            }
            let mut body = request.body();
            body["model"] = json!(model);
            let line =
                json!({"custom_id": key, "method": "POST", "url": url, "body": body}).to_string();
            let full = current.1.len() >= run.settings.max_lines
                || current.0.len() + line.len() + 1 > run.settings.max_bytes;
            if full && !current.1.is_empty() {
                files.push(std::mem::take(&mut current));
            }
            current.0.push_str(&line);
            current.0.push('\n');
            current.1.push((key, attempt));
        }
        if !current.1.is_empty() {
            files.push(current);
        }
        for (jsonl, lines) in files {
            let file_id = match run.api.upload(&jsonl).await {
                Ok(id) => id,
                Err(e) => {
                    for (key, _) in &lines {
                        run.finish(
                            key,
                            Outcome::failed(
                                &self.settings.model,
                                format!("batch upload: {e}"),
                                Usage::default(),
                            ),
                        );
                    }
                    continue;
                }
            };
            let record = BatchRecord {
                input_file: file_id.clone(),
                id: None,
                endpoint: self.settings.endpoint.display_url(&self.settings.model),
                model: self.settings.model.clone(),
                metric: self.metric.clone(),
                status: "uploaded".into(),
                lines: lines.len() as i64,
                created_at: String::new(),
            };
            {
                let (cache, lines) = (Arc::clone(run.cache), lines.clone());
                blocking(move || cache.record_batch_file(&record, &lines)).await?;
            }
            for (key, attempt) in &lines {
                run.waiting.insert(
                    key.clone(),
                    Waiting {
                        file: file_id.clone(),
                        attempt: *attempt,
                    },
                );
            }
            match run.api.create(&file_id).await {
                Ok(status) => {
                    let (cache, file, id, st) = (
                        Arc::clone(run.cache),
                        file_id.clone(),
                        status.id.clone(),
                        status.status.clone(),
                    );
                    blocking(move || cache.set_batch(&file, &id, &st)).await?;
                }
                Err(e) => {
                    for (key, _) in &lines {
                        run.mark(key, "failed", Some(&e)).await?;
                        run.finish(
                            key,
                            Outcome::failed(
                                &self.settings.model,
                                format!("batch creation: {e}"),
                                Usage::default(),
                            ),
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// The batch made of `file`: found among the provider's recent batches (made just
    /// before a crash, never recorded), else made now; recorded either way.
    async fn adopt_or_create(
        &self,
        run: &BatchRun<'_>,
        file: &str,
    ) -> std::result::Result<BatchStatus, String> {
        let found = run
            .api
            .recent()
            .await?
            .into_iter()
            .find(|b| b.input_file_id.as_deref() == Some(file));
        match found {
            Some(b) => Ok(b),
            None => run.api.create(file).await,
        }
    }

    /// Reads a finished batch's results: successes are committed to the cache and become
    /// outcomes; lines that failed retryably or have no result go into `resubmit` (within
    /// `max_retries`), the rest are error rows.
    async fn collect(
        &self,
        run: &mut BatchRun<'_>,
        file: &str,
        status: &BatchStatus,
        resubmit: &mut Vec<(String, i64)>,
    ) -> Result<()> {
        let mut seen = HashSet::new();
        for content in [&status.output_file_id, &status.error_file_id]
            .into_iter()
            .flatten()
        {
            let text = match run.api.content(content).await {
                Ok(t) => t,
                // Read again at the next poll.
                Err(_) => return Ok(()),
            };
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let Some((key, result)) = serde_json::from_str::<Value>(line)
                    .ok()
                    .as_ref()
                    .and_then(read_result_line)
                else {
                    continue;
                };
                let Some(waiting) = run.waiting.get(&key).filter(|w| w.file == file).cloned()
                else {
                    continue;
                };
                seen.insert(key.clone());
                match result {
                    LineResult::Reply(body) => {
                        let outcome = self.judged(run, &key, &body).await;
                        let state = if outcome.status == Status::Ok {
                            "done"
                        } else {
                            "failed"
                        };
                        run.mark_in(&key, file, state, outcome.error.as_deref())
                            .await?;
                        run.finish(&key, outcome);
                    }
                    LineResult::Failed {
                        status: code,
                        message,
                    } => {
                        let retries = self.settings.limits.retry.max_retries as i64;
                        if retryable(code) && waiting.attempt <= retries {
                            run.mark_in(&key, file, "resubmitted", Some(&message))
                                .await?;
                            run.waiting.remove(&key);
                            resubmit.push((key, waiting.attempt + 1));
                        } else {
                            let text = match code {
                                Some(c) => format!(
                                    "batch {}: the line failed with HTTP {c} after {} \
                                     submission(s): {}",
                                    status.id,
                                    waiting.attempt,
                                    snippet(&message)
                                ),
                                None => format!(
                                    "batch {}: the line failed after {} submission(s): {}",
                                    status.id,
                                    waiting.attempt,
                                    snippet(&message)
                                ),
                            };
                            run.mark_in(&key, file, "failed", Some(&text)).await?;
                            run.finish(
                                &key,
                                Outcome::failed(&self.settings.model, text, Usage::default()),
                            );
                        }
                    }
                }
            }
        }
        // Lines the batch has no result for (expired, cancelled, or failed as a whole).
        let missing: Vec<(String, i64)> = run
            .waiting
            .iter()
            .filter(|(k, w)| w.file == file && !seen.contains(*k))
            .map(|(k, w)| (k.clone(), w.attempt))
            .collect();
        let retries = self.settings.limits.retry.max_retries as i64;
        for (key, attempt) in missing {
            if status.status != "failed" && attempt <= retries {
                run.mark_in(&key, file, "resubmitted", Some(&status.status))
                    .await?;
                run.waiting.remove(&key);
                resubmit.push((key, attempt + 1));
            } else {
                let text = format!(
                    "batch {} {}: no result for this line{}",
                    status.id,
                    status.status,
                    status
                        .errors
                        .as_deref()
                        .map(|e| format!(" ({})", snippet(e)))
                        .unwrap_or_default()
                );
                run.mark_in(&key, file, "failed", Some(&text)).await?;
                run.finish(
                    &key,
                    Outcome::failed(&self.settings.model, text, Usage::default()),
                );
            }
        }
        Ok(())
    }

    /// A successful line's outcome: the judgement, committed to the cache.
    async fn judged(&self, run: &mut BatchRun<'_>, key: &str, body: &str) -> Outcome {
        let model = &self.settings.model;
        let reply = match parse_chat_response(body) {
            Ok(r) => r,
            Err(e) => return Outcome::failed(model, e.to_string(), Usage::default()),
        };
        // No latency of its own: the batch's.
        let usage = Usage::of_reply(
            &reply,
            self.settings.price_of(reply.model.as_deref()),
            self.discount(),
            Some(0.0),
        );
        if let Some(r) = run.reservations.remove(key) {
            self.settings
                .ledger
                .settle(r, usage.cost_usd, usage.tokens());
        }
        STATS.usage(&usage);
        self.spent.add(&usage);
        let inputs = run.inputs.get(key).cloned().unwrap_or_default();
        self.conclude(key, &inputs, &reply, usage).await
    }
}

/// The state of one batch-mode wait.
struct BatchRun<'a> {
    api: &'a BatchApi,
    cache: &'a Arc<JudgeCache>,
    settings: &'a BatchSettings,
    waiting: HashMap<String, Waiting>,
    reservations: HashMap<String, Reservation>,
    outcomes: HashMap<String, Arc<Outcome>>,
    /// The inputs of every call of the run.
    inputs: &'a BTreeMap<String, CallInputs>,
}

impl BatchRun<'_> {
    fn lines_of(&self, file: &str) -> Vec<String> {
        self.waiting
            .iter()
            .filter(|(_, w)| w.file == file)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// A line's final outcome: shared with the process like an online call's.
    fn finish(&mut self, key: &str, outcome: Outcome) {
        self.waiting.remove(key);
        let outcome = Arc::new(outcome);
        let _ = memo_cell(key).set(Arc::clone(&outcome));
        self.outcomes.insert(key.to_string(), outcome);
    }

    async fn mark(&self, key: &str, state: &str, error: Option<&str>) -> Result<()> {
        match self.waiting.get(key) {
            Some(w) => self.mark_in(key, &w.file.clone(), state, error).await,
            None => Ok(()),
        }
    }

    async fn mark_in(&self, key: &str, file: &str, state: &str, error: Option<&str>) -> Result<()> {
        let (cache, key, file, state, error) = (
            Arc::clone(self.cache),
            key.to_string(),
            file.to_string(),
            state.to_string(),
            error.map(str::to_string),
        );
        blocking(move || cache.line_state(&key, &file, &state, error.as_deref())).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_are_read() {
        let ok = json!({"id": "r1", "custom_id": "k1", "response": {"status_code": 200,
            "body": {"choices": []}}, "error": null});
        match read_result_line(&ok) {
            Some((k, LineResult::Reply(body))) => {
                assert_eq!(k, "k1");
                assert!(body.contains("choices"));
            }
            _ => panic!("not a reply"),
        }
        let failed = json!({"custom_id": "k2", "response": {"status_code": 500,
            "body": {"error": {"message": "boom"}}}, "error": null});
        match read_result_line(&failed) {
            Some((_, LineResult::Failed { status, message })) => {
                assert_eq!((status, message.as_str()), (Some(500), "boom"));
            }
            _ => panic!("not a failure"),
        }
        let expired = json!({"custom_id": "k3", "response": null,
            "error": {"code": "batch_expired", "message": "expired"}});
        assert!(matches!(
            read_result_line(&expired),
            Some((_, LineResult::Failed { status: None, .. }))
        ));
        assert!(retryable(Some(429)) && retryable(Some(503)) && retryable(None));
        assert!(!retryable(Some(400)) && !retryable(Some(401)));
        assert_eq!(path_segment("batch_1/../x?y"), "batch_1..xy");
    }

    #[test]
    fn batch_objects_are_read() {
        let s = BatchStatus::parse(
            r#"{"id": "batch_1", "status": "in_progress", "input_file_id": "file-1",
                "output_file_id": null, "request_counts": {"total": 10, "completed": 4, "failed": 1}}"#,
        )
        .unwrap();
        assert_eq!((s.total, s.completed, s.failed), (10, 4, 1));
        assert!(!s.is_terminal());
        assert!(
            BatchStatus::parse("<html>")
                .unwrap_err()
                .contains("non-JSON")
        );
        let failed = BatchStatus::parse(
            r#"{"id": "b", "status": "failed", "errors": {"data": [{"message": "bad line"}]}}"#,
        )
        .unwrap();
        assert!(failed.is_terminal());
        assert_eq!(failed.errors.as_deref(), Some("bad line"));
    }
}
