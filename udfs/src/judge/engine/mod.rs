//! The judge engine: one component, one entry point. A [`JudgeBatch`] takes a rubric, the
//! session's settings and the inputs of a batch's rows, and gives one [`Outcome`] per call;
//! the judge metrics, the safety metrics, `pairwise_preference` and the targets all go
//! through it (the targets through [`transport`] and the shared outcome cells).
//!
//! ```text
//!   rubric + inputs + settings
//!            │
//!      JudgeBatch ── cache key (request) ── memo cell (one call per content address)
//!            │                                   │
//!            │              hit ◄── cache (SQLite, WAL, shared by processes)
//!            ▼
//!      transport ── limiter (process-wide, per endpoint + model; RPM/TPM)
//!            │      retry (backoff, Retry-After), deadline, no redirects, body cap
//!            ▼
//!      reply ── parse (tolerant score reader) ── Outcome ── cache commit, progress
//! ```
//!
//! Every call is identified by its content address ([`cache_key`]); the process keeps one
//! outcome cell per address ([`memo_cell`]), so identical requests in flight are sent once
//! and `f(args)` and `f_details(args)` in one query share a call and agree, failures
//! included. Before fanning out, the batch looks all its addresses up in the persistent
//! cache at once; a call that goes out is committed there as soon as it succeeds.
//!
//! Concurrency: DataFusion awaits one batch at a time per partition, so the batch's calls all
//! run at once here and the process-wide [`AdaptiveLimiter`] decides how many are on the wire.

pub mod cache;
pub mod limiter;
pub mod parse;
pub mod progress;
pub mod request;
pub mod retry;
pub mod transport;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use datafusion::common::{DataFusionError, Result};
use tokio::sync::OnceCell;

use self::cache::{CacheEntry, CachedJudgement, JudgeCache};
use self::limiter::{AdaptiveLimiter, limiter_for};
use self::parse::parse_judgement;
use self::progress::STATS;
use self::request::{ChatRequest, cache_key};
use self::retry::snippet;
use crate::judge::rubric::Rubric;
use crate::judge::settings::JudgeSettings;

/// What became of one row (or one conversation turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    Error,
    Skipped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Skipped => "skipped",
        }
    }
}

/// The outcome of one judge call.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: Status,
    pub score: Option<f64>,
    pub reason: Option<String>,
    pub error: Option<String>,
    pub model: Option<String>,
    /// Read from the persistent cache (no call was made for it in this process).
    pub cached: bool,
    pub prompt_tokens: Option<i64>,
    pub completion_tokens: Option<i64>,
    pub latency_ms: Option<f64>,
}

impl Outcome {
    /// An input was NULL: nothing to judge.
    pub fn skipped() -> Outcome {
        Outcome {
            status: Status::Skipped,
            score: None,
            reason: None,
            error: None,
            model: None,
            cached: false,
            prompt_tokens: None,
            completion_tokens: None,
            latency_ms: None,
        }
    }

    fn failed(model: &str, error: String, latency_ms: Option<f64>) -> Outcome {
        Outcome {
            status: Status::Error,
            error: Some(error),
            model: Some(model.to_string()),
            latency_ms,
            ..Outcome::skipped()
        }
    }

    fn from_cache(j: &CachedJudgement, model: &str) -> Outcome {
        Outcome {
            status: Status::Ok,
            score: Some(j.score),
            reason: Some(j.reason.clone()),
            error: None,
            model: Some(j.reply_model.clone().unwrap_or_else(|| model.to_string())),
            cached: true,
            prompt_tokens: j.prompt_tokens,
            completion_tokens: j.completion_tokens,
            latency_ms: Some(j.latency_ms),
        }
    }
}

/// The named inputs of one call, in rubric order (absent optional inputs left out).
pub type CallInputs = Vec<(String, String)>;

/// How long an outcome stays shared in memory. Long enough for every function of a query
/// to see the same outcome; short enough that a REPL user who fixed a quota problem gets
/// errors retried by the next query a few minutes later. Successes live on in the
/// persistent cache.
const MEMO_TTL: Duration = Duration::from_secs(600);

struct MemoEntry<T> {
    cell: Arc<OnceCell<Arc<T>>>,
    created: Instant,
}

/// One outcome cell per content address, kept for [`MEMO_TTL`] once settled.
pub(crate) struct SharedOutcomes<T> {
    inner: Mutex<(HashMap<String, MemoEntry<T>>, usize)>,
}

impl<T> SharedOutcomes<T> {
    pub(crate) fn new() -> Self {
        Self {
            inner: Mutex::new((HashMap::new(), 65_536)),
        }
    }

    /// The process's outcome cell for `key`.
    pub(crate) fn cell(&self, key: &str) -> Arc<OnceCell<Arc<T>>> {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (cells, purge_at) = &mut *guard;
        let now = Instant::now();
        if let Some(entry) = cells.get(key) {
            // An expired, settled outcome is replaced; a call in flight is always shared.
            if now - entry.created < MEMO_TTL || !entry.cell.initialized() {
                return Arc::clone(&entry.cell);
            }
        }
        if cells.len() >= *purge_at {
            cells.retain(|_, e| now - e.created < MEMO_TTL || !e.cell.initialized());
            *purge_at = (cells.len() * 2).max(65_536);
        }
        let cell = Arc::new(OnceCell::new());
        cells.insert(
            key.to_string(),
            MemoEntry {
                cell: Arc::clone(&cell),
                created: now,
            },
        );
        cell
    }
}

/// The process's judgement cells.
fn memo_cell(key: &str) -> Arc<OnceCell<Arc<Outcome>>> {
    static JUDGEMENTS: OnceLock<SharedOutcomes<Outcome>> = OnceLock::new();
    JUDGEMENTS.get_or_init(SharedOutcomes::new).cell(key)
}

/// Everything the calls of one batch share.
pub struct JudgeBatch {
    pub metric: String,
    pub rubric: Arc<Rubric>,
    pub settings: JudgeSettings,
    limiter: Arc<AdaptiveLimiter>,
    cache: Option<Arc<JudgeCache>>,
    params: Vec<(String, String)>,
    rubric_tag: String,
    cached: HashMap<String, CachedJudgement>,
}

impl JudgeBatch {
    /// Prepares a batch of `metric` calls: the limiter, the cache, and the cached judgements
    /// of `keys` (see [`JudgeBatch::key`]).
    pub async fn new(
        metric: &str,
        rubric: Arc<Rubric>,
        settings: JudgeSettings,
    ) -> Result<JudgeBatch> {
        let limiter = limiter_for(
            &settings.limiter_key(),
            settings.limits.max_concurrency,
            settings.limits.requests_per_minute,
            settings.limits.tokens_per_minute,
        );
        let cache = match settings.cache.clone() {
            Some(path) => Some(blocking(move || JudgeCache::open(&path)).await?),
            None => None,
        };
        Ok(JudgeBatch {
            metric: metric.to_string(),
            params: {
                let mut p = settings.cache_params();
                p.push(("rubric".to_string(), rubric.fingerprint()));
                p
            },
            rubric_tag: rubric.version_tag(),
            rubric,
            settings,
            limiter,
            cache,
            cached: HashMap::new(),
        })
    }

    /// The content address of a call with these inputs.
    pub fn key(&self, inputs: &CallInputs) -> String {
        let named: Vec<(&str, Option<&str>)> = inputs
            .iter()
            .map(|(k, v)| (k.as_str(), Some(v.as_str())))
            .collect();
        cache_key(&self.rubric_tag, &self.settings.model, &self.params, &named)
    }

    /// Reads the persistent cache for every key whose outcome this process does not hold
    /// yet, in one go.
    pub async fn prefetch(&mut self, keys: &[&String]) -> Result<()> {
        let Some(cache) = self.cache.clone() else {
            return Ok(());
        };
        let wanted: Vec<String> = keys
            .iter()
            .filter(|k| !memo_cell(k).initialized())
            .map(|k| (*k).clone())
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        self.cached = blocking(move || cache.get_many(&wanted)).await?;
        Ok(())
    }

    /// The outcome of the call `key` with `inputs`: shared with any identical call in the
    /// process, read from the cache, or made now.
    pub async fn judge(&self, key: &str, inputs: &CallInputs) -> Arc<Outcome> {
        let cell = memo_cell(key);
        let ran = AtomicBool::new(false);
        let outcome = cell
            .get_or_init(|| {
                ran.store(true, Ordering::Relaxed);
                self.resolve(key, inputs)
            })
            .await;
        if !ran.load(Ordering::Relaxed) {
            STATS.shared_call();
        }
        Arc::clone(outcome)
    }

    async fn resolve(&self, key: &str, inputs: &CallInputs) -> Arc<Outcome> {
        let model = &self.settings.model;
        if let Some(j) = self.cached.get(key) {
            STATS.cache_hit();
            return Arc::new(Outcome::from_cache(j, model));
        }
        let named: Vec<(&str, &str)> = inputs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let rubric = &self.rubric;
        let user = rubric.user_message(&named);
        if let Err(e) = within_input_cap(
            rubric.body.len() + user.len(),
            self.settings.limits.max_input_bytes,
            "judge",
        ) {
            return Arc::new(Outcome::failed(model, e, None));
        }
        let request = ChatRequest::new(model.clone(), &rubric.body, user)
            .temperature(self.settings.limits.temperature)
            .seed(self.settings.limits.seed)
            .score_schema(&self.metric, rubric.min, rubric.max);
        let reply = match transport::send(&self.settings, &self.limiter, &request).await {
            Ok(reply) => reply,
            Err(e) => {
                let text = self.settings.endpoint.redact(&e.to_string());
                return Arc::new(Outcome::failed(model, text, None));
            }
        };
        let latency_ms = reply.latency.as_secs_f64() * 1000.0;
        let r = &reply.value;
        STATS.tokens(r.prompt_tokens, r.completion_tokens);
        let reply_model = r.model.clone().unwrap_or_else(|| model.clone());
        let judgement = match parse_judgement(&r.content, rubric.min, rubric.max) {
            Ok(j) => j,
            Err(e) => {
                let text = format!("unusable judge reply: {e}; reply: {}", snippet(&r.content));
                let mut o = Outcome::failed(&reply_model, text, Some(latency_ms));
                o.prompt_tokens = r.prompt_tokens;
                o.completion_tokens = r.completion_tokens;
                return Arc::new(o);
            }
        };
        let stored = CachedJudgement {
            score: judgement.score,
            reason: judgement.reason,
            reply_model: r.model.clone(),
            prompt_tokens: r.prompt_tokens,
            completion_tokens: r.completion_tokens,
            latency_ms,
        };
        if let Some(cache) = self.cache.clone() {
            let (key, metric, tag) = (
                key.to_string(),
                self.metric.clone(),
                self.rubric_tag.clone(),
            );
            let (model, j) = (model.clone(), stored.clone());
            let commit = blocking(move || {
                cache.put(&CacheEntry {
                    key: &key,
                    metric: &metric,
                    rubric_version: &tag,
                    model: &model,
                    judgement: &j,
                })
            })
            .await;
            if let Err(e) = commit {
                // The judgement is good; only a later run will pay for it again.
                STATS.cache_write_failed(&e.to_string());
            }
        }
        Arc::new(Outcome {
            status: Status::Ok,
            score: Some(stored.score),
            reason: Some(stored.reason),
            error: None,
            model: Some(reply_model),
            cached: false,
            prompt_tokens: stored.prompt_tokens,
            completion_tokens: stored.completion_tokens,
            latency_ms: Some(latency_ms),
        })
    }
}

/// A request of `bytes` is refused before it is sent when over `cap`: an over-long row
/// (a whole book as a response) is an error row, not a bill.
pub(crate) fn within_input_cap(
    bytes: usize,
    cap: usize,
    namespace: &str,
) -> std::result::Result<(), String> {
    if bytes > cap {
        return Err(format!(
            "the request would carry {bytes} bytes of text, over \
             evalsql.{namespace}.max_input_bytes ({cap}); not sent"
        ));
    }
    Ok(())
}

/// Runs blocking SQLite work off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?
}
