//! Judging a batch: one entry point. A [`JudgeBatch`] takes a rubric, the session's
//! settings and the inputs of a batch's rows, and gives one [`Outcome`] per call; the judge
//! metrics, the safety metrics and `pairwise_preference` go through it. Its calls go
//! through the call engine (`crate::llm`: request, memo, cache, transport, limiter).
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
//! Every call is identified by its content address (`llm::request::cache_key`); the process keeps one
//! outcome cell per address ([`memo_cell`]), so identical requests in flight are sent once
//! and `f(args)` and `f_details(args)` in one query share a call and agree, failures
//! included. Before fanning out, the batch looks all its addresses up in the persistent
//! cache at once; a call that goes out is committed there as soon as it succeeds.
//!
//! Concurrency: DataFusion awaits one batch at a time per partition, so the batch's calls all
//! run at once here and the process-wide [`AdaptiveLimiter`] decides how many are on the wire.

pub mod batch;

pub mod parse;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use datafusion::common::Result;
use tokio::sync::OnceCell;

use self::parse::{parse_fused, parse_judgement, score_confidence};
use crate::judge::fused::FusedRubric;
use crate::judge::rubric::Rubric;
use crate::llm::budget::Reservation;
use crate::llm::cache::{CacheEntry, CachedJudgement, JudgeCache};
use crate::llm::limiter::{AdaptiveLimiter, limiter_for};
use crate::llm::memo::SharedOutcomes;
use crate::llm::pricing::Price;
use crate::llm::progress::STATS;
use crate::llm::request::{ChatReply, ChatRequest, cache_key};
use crate::llm::retry::snippet;
use crate::llm::settings::JudgeSettings;
use crate::llm::usage::{Spent, Usage};
use crate::llm::{blocking, within_input_cap};

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
    /// Tokens, dollars and time (the recorded ones for a cached judgement, the estimate in
    /// a dry run).
    pub usage: Usage,
    /// A fused call's outcome for each member of its group (in the group's order), each
    /// with its share of the usage; empty for any other call.
    pub parts: Vec<Outcome>,
    /// How sure the model was of its score (asked for by a cascade's small model).
    pub confidence: Option<f64>,
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
            usage: Usage::default(),
            parts: Vec::new(),
            confidence: None,
        }
    }

    /// A judgement just made.
    fn judged(stored: CachedJudgement, reply_model: String) -> Outcome {
        Outcome {
            status: Status::Ok,
            score: Some(stored.score),
            reason: Some(stored.reason),
            error: None,
            model: Some(reply_model),
            cached: false,
            usage: stored.usage,
            parts: Vec::new(),
            confidence: stored.confidence,
        }
    }

    /// Member `i`'s outcome of a fused call. A call that failed as a whole (or was not
    /// sent) fails each member alike; its usage is counted once, on the first member.
    pub fn part(&self, i: usize) -> Outcome {
        match self.parts.get(i) {
            Some(part) => part.clone(),
            None => Outcome {
                usage: if i == 0 { self.usage } else { Usage::default() },
                parts: Vec::new(),
                ..self.clone()
            },
        }
    }

    /// A row not sent: over budget, or a dry run.
    fn not_sent(model: &str, error: String) -> Outcome {
        Outcome {
            error: Some(error),
            model: Some(model.to_string()),
            ..Outcome::skipped()
        }
    }

    fn failed(model: &str, error: String, usage: Usage) -> Outcome {
        Outcome {
            status: Status::Error,
            error: Some(error),
            model: Some(model.to_string()),
            usage,
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
            usage: j.usage,
            parts: Vec::new(),
            confidence: j.confidence,
        }
    }
}

/// Replies most judge rubrics get are a score and a sentence or two of reason.
const DEFAULT_COMPLETION_TOKENS: i64 = 100;
/// A defect flag's reason is shorter.
const DEFAULT_FLAG_COMPLETION_TOKENS: i64 = 60;
/// Stored judgements of a metric and model it takes to trust their mean completion length.
const COMPLETION_SAMPLE: u64 = 20;

/// The named inputs of one call, in rubric order (absent optional inputs left out).
pub type CallInputs = Vec<(String, String)>;

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
    /// The completion tokens a dry run expects per call.
    expected_completion: i64,
    /// Batch mode's outcomes of this batch's calls (see [`batch`]).
    batch_outcomes: HashMap<String, Arc<Outcome>>,
    /// The group, when this batch judges several metrics per call (`rubric` is then the
    /// group's).
    fused: Option<Arc<FusedRubric>>,
    /// A cascade's escalations: a dry run counts them as `<metric> escalated`.
    pub escalations: bool,
    /// The replies this batch (and its samples) received.
    spent: Arc<Spent>,
}

impl JudgeBatch {
    /// Prepares a batch of `metric` calls: the limiter, the cache, and the cached judgements
    /// of `keys` (see [`JudgeBatch::key`]).
    pub async fn new(
        metric: &str,
        rubric: Arc<Rubric>,
        settings: JudgeSettings,
    ) -> Result<JudgeBatch> {
        let limiter = limiter_for(&settings.limiter_key(), &settings.limits);
        let cache = match settings.cache.clone() {
            Some(path) => Some(blocking(move || JudgeCache::open(&path)).await?),
            None => None,
        };
        let expected_completion = if settings.dry_run {
            expected_completion(cache.as_ref(), metric, &rubric, &settings).await?
        } else {
            0
        };
        Ok(JudgeBatch {
            expected_completion,
            batch_outcomes: HashMap::new(),
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
            fused: None,
            escalations: false,
            spent: Arc::default(),
        })
    }

    /// Prepares a batch of fused calls: every metric of `group` in one call per row.
    pub async fn fused(group: Arc<FusedRubric>, settings: JudgeSettings) -> Result<JudgeBatch> {
        let name = group.rubric.name.clone();
        let mut batch = JudgeBatch::new(&name, Arc::clone(&group.rubric), settings).await?;
        if batch.settings.dry_run {
            // The answer holds every member's: their expected lengths add up.
            let mut expected = 0;
            for part in &group.parts {
                expected += expected_completion(
                    batch.cache.as_ref(),
                    &part.metric,
                    &part.rubric,
                    &batch.settings,
                )
                .await?;
            }
            batch.expected_completion = expected;
        }
        batch.fused = Some(group);
        Ok(batch)
    }

    /// The batch of panel member `model` (`evalsql.judge.panel`): the same rubric and
    /// settings for that model, through its own limiter and with its own cache entries.
    pub fn member(&self, model: &str) -> JudgeBatch {
        let settings = self.settings.for_model(model);
        let limiter = limiter_for(&settings.limiter_key(), &settings.limits);
        self.derived(settings, limiter)
    }

    /// The batch of a cascade's small `model`: the same rubric and settings for that model,
    /// asking for log-probabilities (its confidence), with its own limiter and cache entries.
    pub fn small_model(&self, model: &str) -> JudgeBatch {
        let mut settings = self.settings.for_model(model);
        settings.logprobs = true;
        let limiter = limiter_for(&settings.limiter_key(), &settings.limits);
        self.derived(settings, limiter)
    }

    /// The cache this batch reads and writes, if it is on.
    pub fn cache(&self) -> Option<&Arc<JudgeCache>> {
        self.cache.as_ref()
    }

    /// A batch of this one's metric and rubric with other `settings` (its own content
    /// addresses) and `limiter`.
    fn derived(&self, settings: JudgeSettings, limiter: Arc<AdaptiveLimiter>) -> JudgeBatch {
        let mut params = settings.cache_params();
        params.push(("rubric".to_string(), self.rubric.fingerprint()));
        JudgeBatch {
            metric: self.metric.clone(),
            rubric: Arc::clone(&self.rubric),
            settings,
            limiter,
            cache: self.cache.clone(),
            params,
            rubric_tag: self.rubric_tag.clone(),
            cached: HashMap::new(),
            expected_completion: self.expected_completion,
            batch_outcomes: HashMap::new(),
            fused: self.fused.clone(),
            escalations: self.escalations,
            spent: Arc::default(),
        }
    }

    /// The batch of sample `i` of repeated judging (`evalsql.judge.samples`): the same
    /// rubric and settings with the seed advanced by `i`, so each sample is its own call
    /// and cache entry; sample 0 is this batch's own call (a single judgement's).
    pub fn sample(&self, i: usize) -> JudgeBatch {
        let mut settings = self.settings.clone();
        if i > 0 {
            settings.limits.seed = settings.limits.seed.map(|s| s.wrapping_add(i as i64));
        }
        JudgeBatch {
            spent: Arc::clone(&self.spent),
            ..self.derived(settings, Arc::clone(&self.limiter))
        }
    }

    /// The replies this batch and its samples received so far, and their usage together.
    pub fn spent(&self) -> (u64, Usage) {
        self.spent.get()
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
            .flat_map(|k| self.stored_keys(k))
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        self.cached = blocking(move || cache.get_many(&wanted)).await?;
        Ok(())
    }

    /// The cache entries of the call `key`: its own, or each member's part of a fused call.
    fn stored_keys(&self, key: &str) -> Vec<String> {
        match &self.fused {
            None => vec![key.to_string()],
            Some(group) => group
                .parts
                .iter()
                .map(|p| FusedRubric::part_key(key, &p.metric))
                .collect(),
        }
    }

    /// Whether the cache holds the call `key` with `inputs` (every part a fused call reads).
    fn known(&self, key: &str, inputs: &CallInputs) -> bool {
        match &self.fused {
            None => self.cached.contains_key(key),
            Some(group) => group
                .parts
                .iter()
                .zip(group.active(inputs))
                .filter(|(_, active)| *active)
                .all(|(p, _)| {
                    self.cached
                        .contains_key(&FusedRubric::part_key(key, &p.metric))
                }),
        }
    }

    /// The cached outcome of the call `key` with `inputs`, when the cache holds it.
    fn from_cache(&self, key: &str, inputs: &CallInputs) -> Option<Outcome> {
        let model = &self.settings.model;
        let Some(group) = &self.fused else {
            return self.cached.get(key).map(|j| Outcome::from_cache(j, model));
        };
        if !self.known(key, inputs) {
            return None;
        }
        let active = group.active(inputs);
        let parts: Vec<Outcome> = group
            .parts
            .iter()
            .zip(&active)
            .map(
                |(p, active)| match self.cached.get(&FusedRubric::part_key(key, &p.metric)) {
                    Some(j) if *active => Outcome::from_cache(j, model),
                    _ => Outcome::skipped(),
                },
            )
            .collect();
        Some(Outcome {
            status: Status::Ok,
            model: parts.iter().find_map(|p| p.model.clone()),
            cached: true,
            usage: Usage::total(parts.iter().filter(|p| p.cached).map(|p| &p.usage)),
            confidence: least_confidence(&parts),
            parts,
            ..Outcome::skipped()
        })
    }

    /// The outcome of the call `key` with `inputs`: shared with any identical call in the
    /// process, read from the cache, or made now (within the query's budget).
    pub async fn judge(&self, key: &str, inputs: &CallInputs) -> Arc<Outcome> {
        if self.settings.dry_run {
            return Arc::new(self.dry_run(key, inputs));
        }
        if let Some(outcome) = self.batch_outcomes.get(key) {
            return Arc::clone(outcome);
        }
        let cell = memo_cell(key);
        if let Some(outcome) = cell.get() {
            STATS.shared_call();
            return Arc::clone(outcome);
        }
        // A call about to be sent reserves its worst case first; a call over budget is not
        // sent and its outcome is not shared (a later query may have the budget).
        let mut reservation = None;
        if !self.settings.budget.is_unlimited()
            && !self.known(key, inputs)
            && let Ok(request) = self.request(inputs)
        {
            let (tokens, worst) = self.worst_case(&request);
            match self
                .settings
                .ledger
                .reserve_call(key, &self.settings.budget, worst, tokens)
                .await
            {
                Ok(r) => reservation = Some(r),
                Err(e) => return Arc::new(Outcome::not_sent(&self.settings.model, e)),
            }
        }
        let ran = AtomicBool::new(false);
        let outcome = cell
            .get_or_init(|| {
                ran.store(true, Ordering::Relaxed);
                self.resolve(key, inputs, reservation)
            })
            .await;
        if !ran.load(Ordering::Relaxed) {
            STATS.shared_call();
            if let Some(r) = reservation {
                self.settings.ledger.release(r);
            }
        }
        Arc::clone(outcome)
    }

    /// Readies `calls` (each with its key): their cached judgements read at once, in batch
    /// mode the rest settled through the Batch API, and with `settle` every call judged now
    /// for its several readers (see [`JudgeBatch::settle_all`]).
    pub async fn ready(&mut self, calls: &[(&String, &CallInputs)], settle: bool) -> Result<()> {
        let keys: Vec<&String> = calls.iter().map(|(k, _)| *k).collect();
        self.prefetch(&keys).await?;
        self.run_batch(calls).await?;
        if settle {
            self.settle_all(calls).await;
        }
        Ok(())
    }

    /// Judges each call of `calls` now and keeps its outcome for this batch's readers: the
    /// members of a fused group read one call each, and through this they share it without
    /// a budget reservation or a shared-call count of their own.
    pub async fn settle_all(&mut self, calls: &[(&String, &CallInputs)]) {
        let mut seen = std::collections::HashSet::new();
        let distinct: Vec<&(&String, &CallInputs)> =
            calls.iter().filter(|(k, _)| seen.insert(*k)).collect();
        let this = &*self;
        let outcomes = futures::future::join_all(
            distinct
                .iter()
                .map(|(k, i)| async move { ((*k).clone(), this.judge(k, i).await) }),
        )
        .await;
        self.batch_outcomes.extend(outcomes);
    }

    /// The request of a call with `inputs`, or why it is not sent.
    fn request(&self, inputs: &CallInputs) -> std::result::Result<ChatRequest, String> {
        let named: Vec<(&str, &str)> = inputs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let rubric = &self.rubric;
        let user = rubric.user_message(&named);
        within_input_cap(
            rubric.body.len() + user.len(),
            self.settings.limits.max_input_bytes,
            "judge",
        )?;
        // The rubric (identical for every row of the metric) is the system message and the
        // row's inputs come after it: providers cache a shared prompt prefix.
        let request = ChatRequest::new(self.settings.model.clone(), &rubric.body, user)
            .temperature(self.settings.limits.temperature)
            .seed(self.settings.limits.seed)
            .max_completion_tokens(self.settings.limits.max_completion_tokens)
            .logprobs(self.settings.logprobs);
        Ok(match &self.fused {
            None => request.score_schema(&self.metric, rubric.min, rubric.max),
            Some(group) => request.fused_schema("fused_judgement", &group.scales()),
        })
    }

    /// A request's most tokens (counted prompt plus the completion limit) and most dollars.
    fn worst_case(&self, request: &ChatRequest) -> (u64, Option<f64>) {
        let prompt = self.settings.tokenizer.count_chat(&request.messages());
        let completion = request.completion_limit().map_or(
            self.expected_completion.max(DEFAULT_COMPLETION_TOKENS),
            i64::from,
        );
        let cost = self
            .settings
            .price
            .map(|p| p.cost(prompt, 0, completion, self.discount()));
        ((prompt + completion).max(0) as u64, cost)
    }

    /// What this batch's calls cost as a share of the list price.
    pub(crate) fn discount(&self) -> f64 {
        if self.settings.batch.is_some() {
            self.settings.batch_discount
        } else {
            1.0
        }
    }

    /// A dry run's outcome: nothing is sent; a call to send carries its estimate.
    fn dry_run(&self, key: &str, inputs: &CallInputs) -> Outcome {
        let model = &self.settings.model;
        let known =
            self.known(key, inputs) || memo_cell(key).get().is_some_and(|o| o.status == Status::Ok);
        let mut outcome = Outcome::not_sent(model, "dry run".to_string());
        let call = if known {
            outcome.cached = true;
            crate::llm::estimate::Call {
                cached: true,
                prompt_tokens: 0,
                completion_tokens: 0,
                cost_usd: Some(0.0),
            }
        } else {
            match self.request(inputs) {
                Ok(request) => {
                    let prompt = self.settings.tokenizer.count_chat(&request.messages());
                    let completion = request
                        .completion_limit()
                        .map_or(self.expected_completion, |limit| {
                            self.expected_completion.min(i64::from(limit))
                        });
                    crate::llm::estimate::Call {
                        cached: false,
                        prompt_tokens: prompt,
                        completion_tokens: completion,
                        cost_usd: self
                            .settings
                            .price
                            .map(|p| p.cost(prompt, 0, completion, self.discount())),
                    }
                }
                // Over the input cap: it would be an error row, not a request.
                Err(e) => {
                    outcome.error = Some(format!("dry run: {e}"));
                    return outcome;
                }
            }
        };
        outcome.usage = Usage {
            prompt_tokens: Some(call.prompt_tokens),
            completion_tokens: Some(call.completion_tokens),
            cached_tokens: Some(0),
            cost_usd: call.cost_usd,
            latency_ms: None,
        };
        let Some(group) = &self.fused else {
            crate::llm::estimate::note_call(
                &self.estimate_label(&self.metric),
                model,
                self.settings.tokenizer.name(),
                key,
                call,
            );
            return outcome;
        };
        // Each member's share of the estimate, counted under its own metric.
        let outcome = self.with_member_shares(outcome, inputs, 0, self.settings.price);
        for ((part, member), active) in group
            .parts
            .iter()
            .zip(&outcome.parts)
            .zip(group.active(inputs))
        {
            if active {
                crate::llm::estimate::note_call(
                    &self.estimate_label(&part.metric),
                    model,
                    self.settings.tokenizer.name(),
                    &FusedRubric::part_key(key, &part.metric),
                    crate::llm::estimate::Call {
                        cached: call.cached,
                        prompt_tokens: member.usage.prompt_tokens.unwrap_or(0),
                        completion_tokens: member.usage.completion_tokens.unwrap_or(0),
                        cost_usd: member.usage.cost_usd,
                    },
                );
            }
        }
        outcome
    }

    /// A fused call's outcome for each member of the row, alike but for its share of the
    /// call's usage (prompt tokens by rubric length; `content_length`, the answer's, split
    /// equally), so the members add up to the call: a dry run's estimate, or a call that
    /// failed as a whole. Any other call as it is.
    fn with_member_shares(
        &self,
        mut outcome: Outcome,
        inputs: &CallInputs,
        content_length: usize,
        price: Option<Price>,
    ) -> Outcome {
        let Some(group) = &self.fused else {
            return outcome;
        };
        let active = group.active(inputs);
        let shares = group.shares(
            &active,
            self.prompt_length(inputs),
            &vec![0; active.len()],
            content_length,
            &outcome.usage,
            price,
            self.discount(),
        );
        let parts = shares
            .into_iter()
            .map(|usage| Outcome {
                usage,
                ..outcome.clone()
            })
            .collect();
        outcome.parts = parts;
        outcome
    }

    /// The estimate line a dry run counts `metric`'s calls under.
    pub fn estimate_label(&self, metric: &str) -> String {
        if self.escalations {
            format!("{metric} escalated")
        } else {
            metric.to_string()
        }
    }

    /// The metrics this batch's calls judge: its own, or its group's.
    pub fn metrics(&self) -> Vec<String> {
        match &self.fused {
            Some(group) => group.names(),
            None => vec![self.metric.clone()],
        }
    }

    /// The length in bytes of the prompt of a call with `inputs`.
    fn prompt_length(&self, inputs: &CallInputs) -> usize {
        let named: Vec<(&str, &str)> = inputs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.rubric.body.len() + self.rubric.user_message(&named).len()
    }

    /// Counts a batch's rows for `evalsql estimate` (dry runs only).
    pub fn note_rows(&self, function: &str, rows: usize, skipped: usize) {
        if self.settings.dry_run {
            crate::llm::estimate::note_rows(&self.metric, function, rows as u64, skipped as u64);
        }
    }

    async fn resolve(
        &self,
        key: &str,
        inputs: &CallInputs,
        reservation: Option<Reservation>,
    ) -> Arc<Outcome> {
        let model = &self.settings.model;
        let ledger = &self.settings.ledger;
        if let Some(outcome) = self.from_cache(key, inputs) {
            STATS.cache_hit();
            return Arc::new(outcome);
        }
        let request = match self.request(inputs) {
            Ok(request) => request,
            Err(e) => return Arc::new(Outcome::failed(model, e, Usage::default())),
        };
        // A fused answer that lacks a member (or gives it an unusable score) is asked for
        // again, whole, up to `max_retries` times; then that member is an error and the
        // others keep the last answer. Every attempt's usage counts.
        let answers = match self.fused {
            Some(_) => self.settings.limits.retry.max_retries + 1,
            None => 1,
        };
        let (mut reservation, mut spent) = (reservation, Vec::new());
        for answer in 1..=answers {
            let reply = match crate::llm::transport::send(
                &self.settings.endpoint,
                &self.settings.model,
                &self.settings.policy(),
                &self.limiter,
                &request,
            )
            .await
            {
                Ok(reply) => reply,
                Err(e) => {
                    // Failed attempts are not billed: the reservation goes back.
                    if let Some(r) = reservation {
                        ledger.release(r);
                    }
                    let text = self.settings.endpoint.redact(&e.to_string());
                    let failed = Outcome::failed(model, text, Usage::total(&spent));
                    let price = self.settings.price_of(Some(model));
                    return Arc::new(self.with_member_shares(failed, inputs, 0, price));
                }
            };
            let r = &reply.value;
            let usage = Usage::of_reply(
                r,
                self.settings.price_of(r.model.as_deref()),
                self.discount(),
                Some(reply.latency.as_secs_f64() * 1000.0),
            );
            match reservation.take() {
                Some(res) => ledger.settle(res, usage.cost_usd, usage.tokens()),
                None => ledger.record(usage.cost_usd, usage.tokens()),
            }
            STATS.usage(&usage);
            self.spent.add(&usage);
            spent.push(usage);
            let outcome = self.conclude(key, inputs, r, Usage::total(&spent)).await;
            let complete = outcome.parts.iter().all(|p| p.status != Status::Error);
            if complete || answer == answers {
                return Arc::new(outcome);
            }
            // Another answer is another call: it must fit the budget too.
            if !self.settings.budget.is_unlimited() {
                let (tokens, worst) = self.worst_case(&request);
                match ledger
                    .reserve_call(key, &self.settings.budget, worst, tokens)
                    .await
                {
                    Ok(r) => reservation = Some(r),
                    Err(_) => return Arc::new(outcome),
                }
            }
        }
        unreachable!("the last answer returns")
    }

    /// The outcome of a reply to the call `key` (`usage`: what it cost, with any earlier
    /// answers to the same call): its judgement, or each member's of a fused call,
    /// committed to the cache. Online and batch mode replies alike.
    async fn conclude(
        &self,
        key: &str,
        inputs: &CallInputs,
        reply: &ChatReply,
        usage: Usage,
    ) -> Outcome {
        let model = &self.settings.model;
        let reply_model = reply.model.clone().unwrap_or_else(|| model.clone());
        let unusable = |e: String, usage: Usage| {
            let text = format!(
                "unusable judge reply: {e}; reply: {}",
                snippet(&reply.content)
            );
            Outcome::failed(&reply_model, text, usage)
        };
        let Some(group) = &self.fused else {
            return match parse_judgement(&reply.content, self.rubric.min, self.rubric.max) {
                Ok(j) => {
                    let confidence = self.settings.logprobs.then(|| {
                        score_confidence(
                            &reply.logprobs,
                            j.score,
                            self.rubric.min,
                            self.rubric.max,
                            None,
                        )
                    });
                    let stored = CachedJudgement {
                        score: j.score,
                        reason: j.reason,
                        reply_model: reply.model.clone(),
                        usage,
                        confidence: confidence.flatten(),
                    };
                    self.commit(key, stored, reply_model.clone()).await
                }
                Err(e) => unusable(e.to_string(), usage),
            };
        };
        let answers = match parse_fused(&reply.content, &group.scales()) {
            Ok(answers) => answers,
            Err(e) => {
                let failed = unusable(e.to_string(), usage);
                let price = self.settings.price_of(reply.model.as_deref());
                return self.with_member_shares(failed, inputs, reply.content.len(), price);
            }
        };
        let active = group.active(inputs);
        let lengths: Vec<usize> = answers.iter().map(|(_, length)| *length).collect();
        let shares = group.shares(
            &active,
            self.prompt_length(inputs),
            &lengths,
            reply.content.len(),
            &usage,
            self.settings.price_of(reply.model.as_deref()),
            self.discount(),
        );
        let mut parts = Vec::with_capacity(answers.len());
        for (((part, (answer, _)), share), active) in
            group.parts.iter().zip(answers).zip(shares).zip(active)
        {
            parts.push(match (active, answer) {
                (false, _) => Outcome::skipped(),
                (true, Ok(j)) => {
                    let confidence = self.settings.logprobs.then(|| {
                        let (min, max) = (part.rubric.min, part.rubric.max);
                        score_confidence(&reply.logprobs, j.score, min, max, Some(&part.metric))
                    });
                    let stored = CachedJudgement {
                        score: j.score,
                        reason: j.reason,
                        reply_model: reply.model.clone(),
                        usage: share,
                        confidence: confidence.flatten(),
                    };
                    let part_key = FusedRubric::part_key(key, &part.metric);
                    let tag = part.rubric.version_tag();
                    self.commit_as(&part_key, &part.metric, &tag, &stored).await;
                    Outcome::judged(stored, reply_model.clone())
                }
                (true, Err(e)) => unusable(format!("{}: {e}", part.metric), share),
            });
        }
        Outcome {
            status: Status::Ok,
            model: Some(reply_model.clone()),
            usage,
            confidence: least_confidence(&parts),
            parts,
            ..Outcome::skipped()
        }
    }

    /// Commits a judgement to the cache, as soon as it is known, and makes its outcome.
    async fn commit(&self, key: &str, stored: CachedJudgement, reply_model: String) -> Outcome {
        self.commit_as(key, &self.metric, &self.rubric_tag, &stored)
            .await;
        Outcome::judged(stored, reply_model)
    }

    /// Writes a judgement of `metric` (rubric `tag`) under `key`. A failed write is reported
    /// once: the judgement is good, only a later run pays again.
    async fn commit_as(&self, key: &str, metric: &str, tag: &str, stored: &CachedJudgement) {
        let Some(cache) = self.cache.clone() else {
            return;
        };
        let (key, metric, tag) = (key.to_string(), metric.to_string(), tag.to_string());
        let (model, j) = (self.settings.model.clone(), stored.clone());
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
            STATS.cache_write_failed(&e.to_string());
        }
    }
}

/// A fused call's confidence: its least confident judged member's (`None` when a judged
/// member has none, or one failed).
fn least_confidence(parts: &[Outcome]) -> Option<f64> {
    let judged: Vec<&Outcome> = parts
        .iter()
        .filter(|p| !(p.status == Status::Skipped && p.error.is_none()))
        .collect();
    if judged.is_empty() {
        return None;
    }
    judged
        .iter()
        .map(|p| p.confidence.filter(|_| p.status == Status::Ok))
        .try_fold(f64::INFINITY, |least, c| Some(least.min(c?)))
}

/// The completion tokens a dry run expects of a `metric` call: the mean of the metric's
/// stored judgements by this model when there are enough, else a default for its scale;
/// never above `max_completion_tokens`.
async fn expected_completion(
    cache: Option<&Arc<JudgeCache>>,
    metric: &str,
    rubric: &Rubric,
    settings: &JudgeSettings,
) -> Result<i64> {
    let observed = match cache {
        Some(cache) => {
            let (cache, metric, model) = (
                Arc::clone(cache),
                metric.to_string(),
                settings.model.clone(),
            );
            blocking(move || cache.completion_mean(&metric, &model)).await?
        }
        None => (0.0, 0),
    };
    let expected = if observed.1 >= COMPLETION_SAMPLE {
        observed.0.ceil() as i64
    } else if rubric.scale == crate::judge::rubric::Scale::Flag {
        DEFAULT_FLAG_COMPLETION_TOKENS
    } else {
        DEFAULT_COMPLETION_TOKENS
    };
    Ok(match settings.limits.max_completion_tokens {
        Some(limit) => expected.min(i64::from(limit)),
        None => expected,
    })
}
