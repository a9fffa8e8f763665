//! What a dry run saw, per judge metric: rows, distinct calls, calls already cached, and the
//! tokens and dollars of the calls it would send. `evalsql estimate` switches the tally on,
//! runs the job with `evalsql.judge.dry_run`, and prints [`take`]; elsewhere (a server's
//! dry-run sessions) nothing is kept, the rows' `_details` carry the estimate.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

static ON: AtomicBool = AtomicBool::new(false);
static TALLIES: Mutex<BTreeMap<String, Tally>> = Mutex::new(BTreeMap::new());

/// Starts keeping the tally (for `evalsql estimate`).
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

pub(crate) fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// One distinct call a dry run saw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Call {
    pub cached: bool,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub cost_usd: Option<f64>,
}

#[derive(Debug, Default)]
struct Tally {
    /// Per SQL function (`fluency` and `fluency_details` share calls, not rows): rows and
    /// rows skipped for a NULL input.
    rows: BTreeMap<String, (u64, u64)>,
    calls: HashMap<String, Call>,
    tokenizer: &'static str,
    model: String,
    /// The share of these calls expected to be sent (a cascade's escalations: its
    /// calibration's escalated share); `None`: all of them.
    expected_share: Option<f64>,
}

fn tallies() -> std::sync::MutexGuard<'static, BTreeMap<String, Tally>> {
    TALLIES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts a batch of `function`'s rows.
pub(crate) fn note_rows(metric: &str, function: &str, rows: u64, skipped: u64) {
    if !enabled() {
        return;
    }
    let mut t = tallies();
    let entry = t
        .entry(metric.to_string())
        .or_default()
        .rows
        .entry(function.to_string())
        .or_default();
    entry.0 += rows;
    entry.1 += skipped;
}

/// Says that only `share` of `metric`'s calls are expected to be sent (a cascade's
/// escalations, counted in the worst case: every row escalated).
pub(crate) fn note_expected_share(metric: &str, share: f64) {
    if !enabled() {
        return;
    }
    tallies()
        .entry(metric.to_string())
        .or_default()
        .expected_share = Some(share);
}

/// Counts one call (once per content address).
pub(crate) fn note_call(metric: &str, model: &str, tokenizer: &'static str, key: &str, call: Call) {
    if !enabled() {
        return;
    }
    let mut t = tallies();
    let tally = t.entry(metric.to_string()).or_default();
    tally.tokenizer = tokenizer;
    tally.model = model.to_string();
    tally.calls.entry(key.to_string()).or_insert(call);
}

/// The estimate of one metric (or the total).
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    pub metric: String,
    pub model: String,
    pub rows: u64,
    pub skipped: u64,
    /// Distinct calls: `cached + to_send`.
    pub calls: u64,
    pub cached: u64,
    pub to_send: u64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    /// `None` when a call to send has no price. For a cascade's escalations, the worst case
    /// (every row escalated).
    pub cost_usd: Option<f64>,
    /// What is expected to be spent: `cost_usd`, or for a cascade's escalations its share
    /// that the calibration expects to escalate.
    pub expected_cost_usd: Option<f64>,
    /// How prompt tokens were counted (`approximate` when no encoding is known).
    pub tokenizer: String,
}

impl Estimate {
    pub fn to_json(&self) -> Value {
        json!({
            "metric": self.metric,
            "model": self.model,
            "rows": self.rows,
            "skipped": self.skipped,
            "calls": self.calls,
            "cached": self.cached,
            "to_send": self.to_send,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "expected_cost_usd": self.expected_cost_usd,
            "tokenizer": self.tokenizer,
        })
    }
}

/// The estimates so far, one per metric then the total, and a fresh tally.
pub fn take() -> Vec<Estimate> {
    let tallies = std::mem::take(&mut *tallies());
    let mut out: Vec<Estimate> = tallies
        .into_iter()
        .map(|(metric, t)| {
            let (rows, skipped) = t
                .rows
                .values()
                .copied()
                .max_by_key(|(rows, _)| *rows)
                .unwrap_or_default();
            let sending: Vec<&Call> = t.calls.values().filter(|c| !c.cached).collect();
            let cost_usd: Option<f64> = sending.iter().map(|c| c.cost_usd).sum();
            Estimate {
                expected_cost_usd: cost_usd.map(|c| c * t.expected_share.unwrap_or(1.0)),
                metric,
                model: t.model,
                rows,
                skipped,
                calls: t.calls.len() as u64,
                cached: (t.calls.len() - sending.len()) as u64,
                to_send: sending.len() as u64,
                prompt_tokens: sending.iter().map(|c| c.prompt_tokens).sum(),
                completion_tokens: sending.iter().map(|c| c.completion_tokens).sum(),
                cost_usd,
                tokenizer: t.tokenizer.to_string(),
            }
        })
        .collect();
    let tokenizers: std::collections::BTreeSet<&str> =
        out.iter().map(|e| e.tokenizer.as_str()).collect();
    let total = Estimate {
        metric: "total".into(),
        model: String::new(),
        rows: out.iter().map(|e| e.rows).sum(),
        skipped: out.iter().map(|e| e.skipped).sum(),
        calls: out.iter().map(|e| e.calls).sum(),
        cached: out.iter().map(|e| e.cached).sum(),
        to_send: out.iter().map(|e| e.to_send).sum(),
        prompt_tokens: out.iter().map(|e| e.prompt_tokens).sum(),
        completion_tokens: out.iter().map(|e| e.completion_tokens).sum(),
        cost_usd: out.iter().map(|e| e.cost_usd).sum(),
        expected_cost_usd: out.iter().map(|e| e.expected_cost_usd).sum(),
        tokenizer: tokenizers.into_iter().collect::<Vec<_>>().join(", "),
    };
    out.push(total);
    out
}
