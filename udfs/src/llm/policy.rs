//! What bounds the calls of one namespace (`evalsql.judge.*` or `evalsql.target.*`):
//! [`CallLimits`], resolved from the session by `llm::settings`, and the [`CallPolicy`] each
//! call's attempts run under.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::llm::retry::RetryPolicy;

/// The call settings the judge and the targets share, resolved from one namespace's
/// settings (`evalsql.judge.*` or `evalsql.target.*`; see `llm::settings`).
#[derive(Debug, Clone)]
pub struct CallLimits {
    /// The process-wide ceiling on calls in flight per endpoint + model (this process's
    /// share of it, on a cluster).
    pub max_concurrency: usize,
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u64>,
    pub retry: RetryPolicy,
    /// The longest one call may take, attempts and backoff included.
    pub deadline: Duration,
    /// The largest response body read.
    pub max_response_bytes: usize,
    /// The largest request text sent (instructions and inputs).
    pub max_input_bytes: usize,
    pub temperature: f64,
    pub seed: Option<i64>,
    /// The most tokens a reply may have (`None`: the model's own limit).
    pub max_completion_tokens: Option<u32>,
    /// The session's own ceiling on calls in flight (a client that lowered
    /// `max_concurrency`), on top of the process-wide limiter.
    pub session_slots: Option<Arc<Semaphore>>,
}

/// What bounds one call across its attempts.
#[derive(Debug, Clone)]
pub struct CallPolicy {
    pub retry: RetryPolicy,
    /// The longest the whole call may take: attempts, waits and the session's queue.
    pub deadline: Duration,
    /// The largest response body read.
    pub max_body: usize,
    /// The session's own ceiling on calls in flight, if it set one.
    pub session_slots: Option<Arc<Semaphore>>,
}

impl CallPolicy {
    /// The policy of calls made under `limits`.
    pub fn of(limits: &CallLimits) -> Self {
        Self {
            retry: limits.retry,
            deadline: limits.deadline,
            max_body: limits.max_response_bytes,
            session_slots: limits.session_slots.clone(),
        }
    }
}
