//! The call engine: everything a call to a model (or an app under test) goes through, for
//! the judges, the safety metrics, `pairwise_preference` and the targets alike. It knows
//! nothing of rubrics or scores; `judge/` builds on it.
//!
//! ```text
//!   settings (SET evalsql.* + environment) ── resolved: endpoint, model, CallLimits, price
//!            │
//!   request (ChatRequest, cache_key) ── memo (one cell per content address)
//!            │                              │
//!            │         hit ◄── cache (SQLite, WAL, shared by processes)
//!            ▼
//!   transport::send(endpoint, model, policy, limiter, request)
//!            │   limiter (process-wide, per endpoint + model; RPM/TPM)
//!            │   retry (backoff, Retry-After), deadline, no redirects, body cap
//!            ▼
//!   reply ── Usage (tokens, cost, latency) ── budget, progress, estimate
//! ```
//!
//! The face a caller uses:
//! * [`settings`]: what `SET` sees ([`settings::JudgeOptions`], the key table) and what one
//!   call needs ([`settings::JudgeSettings`], [`settings::TargetSettings`]);
//! * [`limiter::limiter_for`] and [`transport::send`] / [`transport::post_json`]: a call
//!   under a policy;
//! * [`cache::JudgeCache`] and [`request::cache_key`]: read and write the cache;
//! * [`usage::Usage`], [`budget`], [`pricing`], [`progress`], [`estimate`]: account for it.

pub mod budget;
pub mod cache;
pub mod estimate;
pub mod limiter;
pub mod memo;
pub mod policy;
pub mod pricing;
pub mod progress;
pub mod request;
pub mod retry;
pub mod settings;
pub mod tokens;
pub mod transport;
pub mod usage;

use datafusion::common::{DataFusionError, Result};

/// A request of `bytes` is refused before it is sent when over `cap`: an over-long row
/// (a whole book as a response) is an error row, not a bill.
pub fn within_input_cap(
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
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| DataFusionError::External(Box::new(e)))?
}
