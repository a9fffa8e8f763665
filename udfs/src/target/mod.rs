//! Targets: `generate(prompt [, system_prompt])` calls the model under test and
//! `invoke_app(url, payload)` POSTs to the user's app, so one query can produce responses
//! and score them (generate in a CTE, score outside).
//!
//! They run on the judge engine: a process-wide limiter per endpoint (their own, configured
//! with `SET evalsql.target.*`), the same transport (retries, deadline, no redirects), one
//! call per distinct request in the process, failures as rows (`failure = true`, `error`),
//! and results committed to the cache file (table `generations`), so a rerun of an
//! evaluation calls nothing again. What differs between the two is a [`Target`]; the rest is
//! [`run`].

pub mod generate;
pub mod invoke_app;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, StringArray, StructArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::async_udf::AsyncScalarUDF;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl};
use futures::future::join_all;

use crate::common::{argument_arrays, texts};
use crate::llm::blocking;
use crate::llm::cache::{CachedGeneration, JudgeCache};
use crate::llm::memo::SharedOutcomes;
use crate::llm::progress::STATS;
use crate::llm::settings::{JudgeSettings, TargetSettings};
use crate::llm::usage::Usage;

/// What a target call produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TargetOutcome {
    pub response: Option<String>,
    pub trajectory: Option<String>,
    /// `None` when the row was not run (a NULL input).
    pub failure: Option<bool>,
    pub error: Option<String>,
    /// Tokens, dollars and time.
    pub usage: Usage,
}

impl TargetOutcome {
    pub(crate) fn failed(error: String) -> Self {
        Self {
            failure: Some(true),
            error: Some(error),
            ..Default::default()
        }
    }

    fn from_cache(g: &CachedGeneration) -> Self {
        Self {
            response: g.response.clone(),
            trajectory: g.trajectory.clone(),
            failure: Some(false),
            error: None,
            usage: g.usage,
        }
    }
}

fn outcomes() -> &'static SharedOutcomes<TargetOutcome> {
    static CELLS: OnceLock<SharedOutcomes<TargetOutcome>> = OnceLock::new();
    CELLS.get_or_init(SharedOutcomes::new)
}

/// What one target function does that the other does not.
#[async_trait]
pub(crate) trait Target: ScalarUDFImpl {
    /// Its call form, for errors.
    fn usage(&self) -> &'static str;
    /// How many arguments it takes.
    fn arities(&self) -> &'static [usize];
    /// Whether its result has a `trajectory` field (apps) and token counts (models).
    fn has_trajectory(&self) -> bool;
    fn has_tokens(&self) -> bool;
    /// Whether a row with this second argument runs (a NULL first argument never does).
    fn runs(&self, second: Option<&str>) -> bool;
    /// The model it calls, if any (an error when one is needed and none is configured).
    fn model(&self, target: &TargetSettings) -> Result<Option<JudgeSettings>>;
    /// The content address of a call.
    fn key(&self, model: Option<&JudgeSettings>, a: &str, b: Option<&str>) -> String;
    /// One call: what it produced, and the name of what was called (for the cache table).
    async fn call(
        &self,
        target: &TargetSettings,
        model: Option<&JudgeSettings>,
        a: &str,
        b: Option<&str>,
    ) -> (std::result::Result<CachedGeneration, String>, String);
}

/// The result struct of a target function.
fn fields(target: &dyn Target) -> Fields {
    let mut f = vec![Field::new("response", DataType::Utf8, true)];
    if target.has_trajectory() {
        f.push(Field::new("trajectory", DataType::Utf8, true));
    }
    f.push(Field::new("latency_ms", DataType::Float64, true));
    f.push(Field::new("failure", DataType::Boolean, true));
    f.push(Field::new("error", DataType::Utf8, true));
    if target.has_tokens() {
        f.push(Field::new("prompt_tokens", DataType::Int64, true));
        f.push(Field::new("completion_tokens", DataType::Int64, true));
        f.push(Field::new("cached_tokens", DataType::Int64, true));
        f.push(Field::new("cost_usd", DataType::Float64, true));
    }
    Fields::from(f)
}

/// `return_type` of a target function: its struct, when the arity is one it takes.
fn return_type(target: &dyn Target, arg_types: &[DataType]) -> Result<DataType> {
    if !target.arities().contains(&arg_types.len()) {
        let types: Vec<String> = arg_types.iter().map(|t| t.to_string()).collect();
        return plan_err!(
            "{}({}) does not match {}",
            target.name(),
            types.join(", "),
            target.usage()
        );
    }
    crate::llm::transport::warm_up();
    Ok(DataType::Struct(fields(target)))
}

/// One row's arguments as text: (prompt, system) or (url, payload).
type RowArgs = (String, Option<String>);

/// Arguments as text, per row; `None`: not run.
fn rows(target: &dyn Target, args: &ScalarFunctionArgs) -> Result<Vec<Option<RowArgs>>> {
    let n = args.number_rows;
    let arrays = argument_arrays(args)?;
    let first = texts(&arrays[0])?;
    let second = match arrays.get(1) {
        Some(a) => texts(a)?,
        None => vec![None; n],
    };
    Ok(first
        .into_iter()
        .zip(second)
        .map(|(a, b)| match a {
            Some(a) if target.runs(b.as_deref()) => Some((a, b)),
            _ => None,
        })
        .collect())
}

/// Runs a batch of a target function: cache lookups in one read, one call per distinct
/// request in the process, and the result struct.
pub(crate) async fn run(target: &dyn Target, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
    let rows = rows(target, &args)?;
    let settings = TargetSettings::from_config(&args.config_options);
    let model = target.model(&settings)?;
    let cache = match settings.cache.clone() {
        Some(path) => Some(blocking(move || JudgeCache::open(&path)).await?),
        None => None,
    };
    let keys: Vec<Option<String>> = rows
        .iter()
        .map(|r| {
            r.as_ref()
                .map(|(a, b)| target.key(model.as_ref(), a, b.as_deref()))
        })
        .collect();
    STATS.rows_received(rows.len() as u64);
    if settings.dry_run {
        let skipped = rows.iter().filter(|r| r.is_none()).count() as u64;
        crate::llm::estimate::note_rows(target.name(), target.name(), rows.len() as u64, skipped);
    }

    // The cached results of keys this process has not settled yet, in one read.
    let cached: HashMap<String, CachedGeneration> = match &cache {
        Some(cache) => {
            let wanted: Vec<String> = keys
                .iter()
                .flatten()
                .filter(|k| !outcomes().cell(k).initialized())
                .cloned()
                .collect();
            let cache = Arc::clone(cache);
            blocking(move || cache.get_generations(&wanted)).await?
        }
        None => HashMap::new(),
    };

    let ctx = CallContext {
        target,
        settings: &settings,
        model: model.as_ref(),
        cache: cache.as_ref(),
        cached: &cached,
    };
    let results = join_all(rows.iter().zip(&keys).map(|(row, key)| {
        let ctx = &ctx;
        async move {
            let outcome = match (row, key) {
                (Some((a, b)), Some(key)) => {
                    let cell = outcomes().cell(key);
                    // A dry run's outcome is not shared: a real run after it must call.
                    let out = match cell.get() {
                        None if ctx.settings.dry_run => &ctx.call(key, a, b.as_deref()).await,
                        _ => cell.get_or_init(|| ctx.call(key, a, b.as_deref())).await,
                    };
                    if out.failure == Some(true) {
                        STATS.error();
                    }
                    out.as_ref().clone()
                }
                _ => {
                    STATS.skipped();
                    TargetOutcome::default()
                }
            };
            STATS.row_done();
            outcome
        }
    }))
    .await;
    Ok(ColumnarValue::Array(Arc::new(array(target, &results))))
}

struct CallContext<'a> {
    target: &'a dyn Target,
    settings: &'a TargetSettings,
    model: Option<&'a JudgeSettings>,
    cache: Option<&'a Arc<JudgeCache>>,
    cached: &'a HashMap<String, CachedGeneration>,
}

impl CallContext<'_> {
    async fn call(&self, key: &str, a: &str, b: Option<&str>) -> Arc<TargetOutcome> {
        if let Some(g) = self.cached.get(key) {
            STATS.cache_hit();
            if self.settings.dry_run {
                crate::llm::estimate::note_call(
                    self.target.name(),
                    self.model.map_or("", |m| m.model.as_str()),
                    self.model.map_or("-", |m| m.tokenizer.name()),
                    key,
                    crate::llm::estimate::Call {
                        cached: true,
                        prompt_tokens: 0,
                        completion_tokens: 0,
                        cost_usd: Some(0.0),
                    },
                );
            }
            return Arc::new(TargetOutcome::from_cache(g));
        }
        if self.settings.dry_run {
            return Arc::new(self.dry_run(key, a, b));
        }
        let (result, target_name) = self.target.call(self.settings, self.model, a, b).await;
        let g = match result {
            Ok(g) => g,
            Err(e) => return Arc::new(TargetOutcome::failed(e)),
        };
        if let Some(cache) = self.cache {
            let (cache, key, function, g2) = (
                Arc::clone(cache),
                key.to_string(),
                self.target.name().to_string(),
                g.clone(),
            );
            let commit =
                blocking(move || cache.put_generation(&key, &function, &target_name, &g2)).await;
            if let Err(e) = commit {
                STATS.cache_write_failed(&e.to_string());
            }
        }
        let mut out = TargetOutcome::from_cache(&g);
        out.failure = Some(false);
        Arc::new(out)
    }
}

impl CallContext<'_> {
    /// A dry run sends nothing: the row has no response (judges of it are skipped), and a
    /// model call is counted for `evalsql estimate` at its prompt's tokens and, for its
    /// reply, `max_completion_tokens` or 256.
    fn dry_run(&self, key: &str, a: &str, b: Option<&str>) -> TargetOutcome {
        let mut outcome = TargetOutcome {
            error: Some("dry run".to_string()),
            ..TargetOutcome::default()
        };
        let Some(model) = self.model else {
            return outcome;
        };
        let mut messages = Vec::new();
        if let Some(system) = b {
            messages.push(("system", system));
        }
        messages.push(("user", a));
        let prompt = model.tokenizer.count_chat(&messages);
        let completion = i64::from(model.limits.max_completion_tokens.unwrap_or(256));
        let cost_usd = model.price.map(|p| p.cost(prompt, 0, completion, 1.0));
        crate::llm::estimate::note_call(
            self.target.name(),
            &model.model,
            model.tokenizer.name(),
            key,
            crate::llm::estimate::Call {
                cached: false,
                prompt_tokens: prompt,
                completion_tokens: completion,
                cost_usd,
            },
        );
        outcome.usage = Usage {
            prompt_tokens: Some(prompt),
            completion_tokens: Some(completion),
            cost_usd,
            ..Usage::default()
        };
        outcome
    }
}

fn array(target: &dyn Target, rows: &[TargetOutcome]) -> StructArray {
    let mut columns: Vec<ArrayRef> = vec![Arc::new(
        rows.iter()
            .map(|r| r.response.as_deref())
            .collect::<StringArray>(),
    )];
    if target.has_trajectory() {
        columns.push(Arc::new(
            rows.iter()
                .map(|r| r.trajectory.as_deref())
                .collect::<StringArray>(),
        ));
    }
    columns.push(Arc::new(
        rows.iter()
            .map(|r| r.usage.latency_ms)
            .collect::<Float64Array>(),
    ));
    columns.push(Arc::new(
        rows.iter().map(|r| r.failure).collect::<BooleanArray>(),
    ));
    columns.push(Arc::new(
        rows.iter()
            .map(|r| r.error.as_deref())
            .collect::<StringArray>(),
    ));
    if target.has_tokens() {
        columns.push(Arc::new(
            rows.iter()
                .map(|r| r.usage.prompt_tokens)
                .collect::<Int64Array>(),
        ));
        columns.push(Arc::new(
            rows.iter()
                .map(|r| r.usage.completion_tokens)
                .collect::<Int64Array>(),
        ));
        columns.push(Arc::new(
            rows.iter()
                .map(|r| r.usage.cached_tokens)
                .collect::<Int64Array>(),
        ));
        columns.push(Arc::new(
            rows.iter()
                .map(|r| r.usage.cost_usd)
                .collect::<Float64Array>(),
        ));
    }
    StructArray::new(fields(target), columns, None)
}

/// The target functions as implementations (for the catalogue) ...
pub fn target_functions() -> Vec<Arc<dyn ScalarUDFImpl>> {
    vec![
        Arc::new(generate::GenerateFunc::default()),
        Arc::new(invoke_app::InvokeAppFunc::default()),
    ]
}

/// ... and as DataFusion UDFs.
pub fn scalar_functions() -> Vec<Arc<ScalarUDF>> {
    vec![
        Arc::new(
            AsyncScalarUDF::new(Arc::new(generate::GenerateFunc::default())).into_scalar_udf(),
        ),
        Arc::new(
            AsyncScalarUDF::new(Arc::new(invoke_app::InvokeAppFunc::default())).into_scalar_udf(),
        ),
    ]
}

/// The target family's functions: `generate` and `invoke_app`.
pub fn functions() -> crate::common::Functions {
    crate::common::Functions {
        calling: scalar_functions(),
        ..Default::default()
    }
}
