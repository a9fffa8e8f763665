//! The LLM judge: AI-assisted quality and safety metrics as SQL functions, on the call
//! engine of [`crate::llm`] (transport, limiter, cache, settings, accounting).
//!
//! * [`engine`]: judging a batch of rows, [`engine::JudgeBatch`] — a rubric, the inputs of a
//!   batch's rows and the session's settings in, one outcome per row out — with the
//!   tolerant score parser and batch mode (the provider's Batch API).
//! * [`cascade`], [`calibrate`]: judge cascades (`evalsql.judge.cascade`), a small model
//!   first and calibrated escalation to the main one, and `judge_calibrate()`.
//! * [`fused`], [`fused_function`]: fused calls (`evalsql.judge.fuse`), several metrics of a
//!   row in one request, and the SQL function a planner rule groups their calls into.
//! * [`rubric`]: a rubric file is a metric — its front matter declares scale, inputs,
//!   conversation support, threshold and docs; `udfs/rubrics/*.md` are the built-in ones.
//! * The SQL functions: [`functions`] (`<metric>` and `<metric>_details`, one per rubric
//!   file; a row's samples, panel members and turns combine in [`combine`], the `_details`
//!   struct is built in [`details`]), `pairwise_preference`, `defect_rate` and
//!   `parse_messages`; custom metrics from rubric files and `CREATE FUNCTION ... LANGUAGE
//!   judge` ([`custom`]).
//!
//! The targets (`generate`, `invoke_app`, in [`crate::target`]) use the same call engine.

pub(crate) mod calibrate;
pub(crate) mod cascade;
pub(crate) mod combine;
pub(crate) mod custom;
pub(crate) mod details;
pub(crate) mod engine;
pub(crate) mod functions;
pub(crate) mod fused;
pub(crate) mod fused_function;
pub(crate) mod messages;
pub(crate) mod pairwise;
pub(crate) mod rubric;
pub(crate) mod safety;

pub use custom::{JudgeFunctionFactory, decode_custom, encode_custom, load_rubric_dir};
pub use functions::{JudgeFunc, Origin, judge_of};
pub use fused_function::{
    FusedCall, FusedFieldFunc, FusedJudgeFunc, decode_fused, encode_fused, fused_is_own, fused_of,
};

/// The judge family's functions: the judged metrics and `pairwise_preference` (async),
/// `parse_messages`, `defect_rate` and `judge_cache()`.
pub fn functions() -> datafusion::common::Result<crate::common::Functions> {
    use std::sync::Arc;

    use datafusion::logical_expr::{AggregateUDF, ScalarUDF};
    let mut calling = functions::scalar_functions()?;
    calling.extend(pairwise::scalar_functions());
    Ok(crate::common::Functions {
        scalar: vec![
            Arc::new(ScalarUDF::new_from_impl(
                messages::ParseMessagesFunc::default(),
            )),
            Arc::new(ScalarUDF::new_from_impl(
                fused_function::FusedFieldFunc::default(),
            )),
        ],
        calling,
        aggregate: vec![Arc::new(AggregateUDF::new_from_impl(
            safety::DefectRateFunc::default(),
        ))],
        table: vec![
            (
                "judge_cache",
                Arc::new(crate::llm::cache::JudgeCacheTableFunc),
            ),
            ("judge_calibrate", Arc::new(calibrate::JudgeCalibrateFunc)),
            ("judge_cascades", Arc::new(calibrate::JudgeCascadesFunc)),
        ],
        ..Default::default()
    })
}

/// Starts a new query in `ctx`'s session: the judge budgets (`evalsql.judge.max_cost_usd`,
/// `max_calls`, `max_tokens`) count from zero again. The CLI, `evalsql report` and `serve`
/// call it before every statement.
pub fn start_query(ctx: &datafusion::prelude::SessionContext) {
    let state = ctx.state_ref();
    let mut state = state.write();
    if let Some(options) = state
        .config_mut()
        .options_mut()
        .extensions
        .get_mut::<JudgeOptions>()
    {
        options.start_query();
    }
}

/// Starts a new query in a session configuration (a Ballista executor's, for each task):
/// see [`start_query`].
pub fn start_query_in(config: &mut datafusion::prelude::SessionConfig) {
    if let Some(options) = config.options_mut().extensions.get_mut::<JudgeOptions>() {
        options.start_query();
    }
}

/// Dollars and calls the judge calls of the query configured by `options` spent and that
/// were not taken by an earlier call: see [`crate::llm::budget::Ledger::take_unreported`].
pub fn take_unreported_spend(options: &datafusion::config::ConfigOptions) -> (f64, u64) {
    options
        .extensions
        .get::<JudgeOptions>()
        .map_or((0.0, 0), |o| o.ledger.take_unreported())
}

/// What the current query of `ctx`'s session has spent on judge calls so far: dollars and
/// calls sent (calls answered by the cache cost nothing and are not counted), and why a
/// call was refused by the query's budget, if one was.
pub fn query_spent(ctx: &datafusion::prelude::SessionContext) -> (f64, u64, Option<String>) {
    ctx.state_ref()
        .read()
        .config()
        .options()
        .extensions
        .get::<JudgeOptions>()
        .map_or((0.0, 0, None), |options| options.ledger.spent())
}

use crate::common::process_env;
use crate::llm::cache::BatchRecord;
use crate::llm::settings::{JudgeOptions, cache_path};
use engine::batch::BatchStatus;

/// The batches recorded in the judge cache of this process's environment
/// (`EVALSQL_JUDGE_CACHE`, else the default file), oldest first.
pub async fn recorded_batches() -> datafusion::common::Result<Vec<BatchRecord>> {
    let Some(path) = cache_path(None, &process_env) else {
        return datafusion::common::plan_err!("the judge cache is off: no batches are recorded");
    };
    crate::llm::blocking(move || crate::llm::cache::JudgeCache::open(&path)?.batches()).await
}

/// Cancels batch `id` at the provider configured in the environment, and records its new
/// status in the cache.
pub async fn cancel_batch(id: &str) -> datafusion::common::Result<BatchStatus> {
    let settings =
        crate::llm::settings::JudgeSettings::resolve("evalsql batches cancel", None, &process_env)?;
    let status = engine::batch::BatchApi::new(&settings)
        .cancel(id)
        .await
        .map_err(|e| datafusion::common::DataFusionError::Execution(format!("batch {id}: {e}")))?;
    if let Some(path) = settings.cache.clone() {
        let (id, st) = (status.id.clone(), status.status.clone());
        crate::llm::blocking(move || {
            let cache = crate::llm::cache::JudgeCache::open(&path)?;
            for record in cache.batches()? {
                if record.id.as_deref() == Some(id.as_str()) {
                    cache.set_batch(&record.input_file, &id, &st)?;
                }
            }
            Ok(())
        })
        .await?;
    }
    Ok(status)
}
