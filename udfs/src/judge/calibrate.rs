//! `judge_calibrate(metric, query, n)`: the calibration step of a judge cascade (see
//! [`crate::judge::cascade`]). An async function sees one batch at a time, so the sample is
//! drawn here, before the cascade judges: a seeded random sample of `n` rows of `query`
//! (whose columns are the metric's inputs in its argument order) is judged by the session's
//! small model (`evalsql.judge.cascade`, with a confidence) and its main model; the
//! threshold the calibration kernel certifies is stored in the judge cache and returned as
//! one row. A rerun reuses every cached call.
//!
//! It runs when the plan executes (planning and `EXPLAIN` judge nothing). Over
//! `evalsql serve` and on a Ballista cluster it is the operator's: it runs a query of its
//! own, outside the statement a client's plan was checked for.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{MemTable, Session, TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::datasource::TableType;
use datafusion::execution::context::SessionState;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use datafusion::prelude::SessionContext;

use crate::common::texts;
use crate::judge::cascade::{calibration_key, judge_cascade_sample};
use crate::judge::engine::{CallInputs, JudgeBatch};
use crate::judge::functions::{JudgeFunc, judge_of};
use crate::judge::fused::{FusedPart, FusedRubric};
use crate::llm::blocking;
use crate::llm::cache::StoredCalibration;
use crate::llm::progress::{CascadeTally, cascade_tallies};
use crate::llm::settings::{Cascade, JudgeOptions, JudgeSettings, Restriction};
use crate::stats::bootstrap::mix64;
use crate::stats::calibration::{Judged, calibrate};

/// The most rows one calibration judges.
const MAX_SAMPLE: usize = 100_000;

/// `judge_calibrate(metric, query, n)`.
#[derive(Debug, Default)]
pub struct JudgeCalibrateFunc;

impl TableFunctionImpl for JudgeCalibrateFunc {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let text = |e: &Expr| match e {
            Expr::Literal(ScalarValue::Utf8(Some(s)), _)
            | Expr::Literal(ScalarValue::Utf8View(Some(s)), _)
            | Expr::Literal(ScalarValue::LargeUtf8(Some(s)), _) => Some(s.clone()),
            _ => None,
        };
        let count = |e: &Expr| match e {
            Expr::Literal(ScalarValue::Int64(Some(n)), _) => usize::try_from(*n).ok(),
            Expr::Literal(ScalarValue::Int32(Some(n)), _) => usize::try_from(*n).ok(),
            _ => None,
        };
        let (metric, query, n) = match args.exprs() {
            [m, q, n] => match (text(m), text(q), count(n)) {
                (Some(m), Some(q), Some(n)) if (1..=MAX_SAMPLE).contains(&n) => (m, q, n),
                _ => {
                    return plan_err!(
                        "judge_calibrate(metric, query, n) takes a metric name, a query and a \
                         sample size from 1 to {MAX_SAMPLE}, got {:?}",
                        args.exprs()
                    );
                }
            },
            other => {
                return plan_err!(
                    "judge_calibrate(metric, query, n) takes three arguments, got {}",
                    other.len()
                );
            }
        };
        let options = args.session().config_options();
        if options
            .extensions
            .get::<JudgeOptions>()
            .is_some_and(|o| o.restriction() != Restriction::Operator)
        {
            return plan_err!(
                "judge_calibrate() runs a query of its own, so on a shared server or cluster it \
                 is the operator's: run it from the CLI or serve --init"
            );
        }
        let table = CalibrationTable { metric, query, n };
        // What planning can check, it does: the metrics and the cascade setting.
        if let Some(state) = args.session().as_any().downcast_ref::<SessionState>() {
            table.prepare(state)?;
        }
        Ok(Arc::new(table))
    }
}

#[derive(Debug, Clone)]
struct CalibrationTable {
    metric: String,
    query: String,
    n: usize,
}

fn schema() -> SchemaRef {
    Arc::new(Schema::new(fields()))
}

fn fields() -> Vec<Field> {
    vec![
        Field::new("metric", DataType::Utf8, false),
        Field::new("model", DataType::Utf8, false),
        Field::new("small_model", DataType::Utf8, false),
        Field::new("threshold", DataType::Float64, true),
        Field::new("sample_size", DataType::Int64, false),
        Field::new("agreement", DataType::Float64, false),
        Field::new("lower_bound", DataType::Float64, false),
        Field::new("escalated_share", DataType::Float64, false),
        Field::new("reason", DataType::Utf8, true),
    ]
}

/// One batch of `calibrations`, in [`fields`]' order, then `extra` columns.
fn calibration_batch(
    calibrations: &[&StoredCalibration],
    extra: Vec<(Field, ArrayRef)>,
) -> Result<RecordBatch> {
    let text = |f: &dyn Fn(&StoredCalibration) -> String| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(
            calibrations.iter().map(|c| f(c)),
        ))
    };
    let number = |f: &dyn Fn(&StoredCalibration) -> f64| -> ArrayRef {
        Arc::new(Float64Array::from_iter_values(
            calibrations.iter().map(|c| f(c)),
        ))
    };
    let mut columns: Vec<ArrayRef> = vec![
        text(&|c| c.metric.clone()),
        text(&|c| c.model.clone()),
        text(&|c| c.small_model.clone()),
        Arc::new(Float64Array::from_iter(
            calibrations.iter().map(|c| c.threshold),
        )),
        Arc::new(Int64Array::from_iter_values(
            calibrations.iter().map(|c| c.sample_size),
        )),
        number(&|c| c.agreement),
        number(&|c| c.lower_bound),
        number(&|c| c.escalated_share),
        Arc::new(StringArray::from_iter(
            calibrations.iter().map(|c| c.reason.clone()),
        )),
    ];
    let mut fields = fields();
    for (field, column) in extra {
        fields.push(field);
        columns.push(column);
    }
    Ok(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        columns,
    )?)
}

/// `judge_cascades()`: every calibration stored in the session's judge cache, newest first
/// (the threshold a cascade of that metric and those models uses, and what it certified),
/// with what this process's cascades of it did: rows, escalations, each model's requests and
/// their dollars, against the main model alone (see [`CascadeTally`]).
#[derive(Debug, Default)]
pub struct JudgeCascadesFunc;

impl TableFunctionImpl for JudgeCascadesFunc {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        if !args.exprs().is_empty() {
            return plan_err!("judge_cascades() takes no argument");
        }
        let options = args.session().config_options();
        let session = options.extensions.get::<JudgeOptions>();
        let Some(path) = crate::llm::settings::cache_path(session, &crate::common::process_env)
        else {
            return plan_err!("judge_cascades(): the judge cache is off");
        };
        let stored = crate::llm::cache::JudgeCache::open(&path)?.calibrations()?;
        let calibrations: Vec<&StoredCalibration> = stored.iter().map(|(_, c, _)| c).collect();
        let created: ArrayRef = Arc::new(StringArray::from_iter_values(
            stored.iter().map(|(_, _, at)| at.as_str()),
        ));
        // This process's runs of each. A server's or cluster's clients see the calibrations
        // alone: the runs there are every client's together.
        let tallies = if session.is_none_or(|o| o.restriction() == Restriction::Operator) {
            cascade_tallies()
        } else {
            Default::default()
        };
        let runs: Vec<Option<&CascadeTally>> =
            stored.iter().map(|(key, _, _)| tallies.get(key)).collect();
        let mut extra = vec![(Field::new("created_at", DataType::Utf8, false), created)];
        extra.extend(run_columns(&runs));
        let batch = calibration_batch(&calibrations, extra)?;
        Ok(Arc::new(MemTable::try_new(
            batch.schema(),
            vec![vec![batch]],
        )?))
    }
}

/// `judge_cascades()`'s columns of this process's cascade runs (NULL: none ran).
fn run_columns(runs: &[Option<&CascadeTally>]) -> Vec<(Field, ArrayRef)> {
    let count = |name: &str, f: &dyn Fn(&CascadeTally) -> u64| -> (Field, ArrayRef) {
        (
            Field::new(name, DataType::Int64, true),
            Arc::new(Int64Array::from_iter(
                runs.iter().map(|r| r.map(|t| f(t) as i64)),
            )),
        )
    };
    let dollars = |name: &str, f: &dyn Fn(&CascadeTally) -> Option<f64>| -> (Field, ArrayRef) {
        (
            Field::new(name, DataType::Float64, true),
            Arc::new(Float64Array::from_iter(runs.iter().map(|r| r.and_then(f)))),
        )
    };
    vec![
        count("run_rows", &|t| t.rows),
        count("run_escalated", &|t| t.escalated),
        count("run_small_calls", &|t| t.small_calls),
        count("run_main_calls", &|t| t.main_calls),
        dollars("run_cost_usd", &|t| t.cost_usd),
        count("main_alone_calls", &|t| t.main_alone_calls),
        dollars("main_alone_usd", &|t| t.main_alone_usd),
    ]
}

#[async_trait]
impl TableProvider for CalibrationTable {
    fn schema(&self) -> SchemaRef {
        schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(state) = state.as_any().downcast_ref::<SessionState>() else {
            return plan_err!("judge_calibrate(): needs an evalsql session");
        };
        let run: Arc<dyn PartitionStream> = Arc::new(CalibrationRun {
            table: Arc::new(self.clone()),
            state: state.clone(),
            schema: schema(),
        });
        Ok(Arc::new(StreamingTableExec::try_new(
            schema(),
            vec![run],
            projection,
            [],
            false,
            None,
        )?))
    }
}

/// A calibration's metrics and settings, checked.
struct Prepared {
    funcs: Vec<Arc<JudgeFunc>>,
    settings: JudgeSettings,
    cascade: Cascade,
}

/// The calibration as the plan's one partition: it runs when the plan executes, so
/// planning and `EXPLAIN` judge nothing.
#[derive(Debug)]
struct CalibrationRun {
    table: Arc<CalibrationTable>,
    state: SessionState,
    schema: SchemaRef,
}

impl PartitionStream for CalibrationRun {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (table, state) = (Arc::clone(&self.table), self.state.clone());
        let run = async move {
            let c = table.run(&state).await?;
            calibration_batch(&[&c], Vec::new())
        };
        Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            futures::stream::once(run),
        ))
    }
}

impl CalibrationTable {
    /// What planning can check: the metrics are judge metrics, and a cascade is set. Its
    /// errors are planning errors; the run repeats it on the state it executes with.
    fn prepare(&self, state: &SessionState) -> Result<Prepared> {
        let names: Vec<&str> = self.metric.split(',').map(str::trim).collect();
        let mut funcs = Vec::with_capacity(names.len());
        for name in &names {
            let Some(func) = state
                .scalar_functions()
                .get(*name)
                .and_then(|u| judge_of(u))
            else {
                return plan_err!("judge_calibrate(): {name} is not a judge metric");
            };
            if func.is_details() {
                return plan_err!(
                    "judge_calibrate(): name the metric ({}), not its _details function",
                    func.metric()
                );
            }
            funcs.push(func);
        }
        let settings = JudgeSettings::from_config(&self.metric, state.config_options())?;
        let Some(cascade) = settings.cascade.clone() else {
            return plan_err!(
                "judge_calibrate(): SET evalsql.judge.cascade to the small model first (the main \
                 model is evalsql.judge.model, {})",
                settings.model
            );
        };
        Ok(Prepared {
            funcs,
            settings,
            cascade,
        })
    }

    async fn run(&self, state: &SessionState) -> Result<StoredCalibration> {
        let Prepared {
            funcs,
            settings,
            cascade,
        } = self.prepare(state)?;
        let seed = settings.limits.seed.unwrap_or(42) as u64;

        // The query's rows.
        let ctx = SessionContext::new_with_state(state.clone());
        let batches = ctx.sql(&self.query).await?.collect().await?;
        let Some(first) = batches.first() else {
            return exec_err!("judge_calibrate(): the query returned no rows");
        };
        let columns: Vec<String> = first
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().to_ascii_lowercase())
            .collect();

        // One metric: the columns are its inputs in argument order. A fused group (metrics
        // separated by commas, as `SET evalsql.judge.fuse` groups them): the columns are
        // named by the inputs, and the group is calibrated as one judgement.
        let (base, inputs, label) = if let [func] = funcs.as_slice() {
            let metric = func.metric();
            let rubric = Arc::clone(func.rubrics().pick(settings.pinned_version(metric))?);
            let Some(inputs) = rubric.inputs_for(columns.len()) else {
                return plan_err!(
                    "judge_calibrate(): {metric} takes the inputs {}, the query gives {} columns",
                    input_names(&rubric),
                    columns.len()
                );
            };
            let inputs: Vec<(String, usize)> = inputs
                .iter()
                .enumerate()
                .map(|(column, i)| (i.name.clone(), column))
                .collect();
            let base = JudgeBatch::new(metric, rubric, settings.clone()).await?;
            (base, inputs, metric.to_string())
        } else {
            let mut parts = Vec::with_capacity(funcs.len());
            for func in &funcs {
                let metric = func.metric();
                let rubric = Arc::clone(func.rubrics().pick(settings.pinned_version(metric))?);
                let given: Vec<String> = rubric
                    .inputs
                    .iter()
                    .filter(|i| columns.contains(&i.name))
                    .map(|i| i.name.clone())
                    .collect();
                if rubric
                    .inputs_for(given.len())
                    .is_none_or(|want| want.iter().map(|i| &i.name).ne(given.iter()))
                {
                    return plan_err!(
                        "judge_calibrate(): {metric} needs columns named by its inputs ({}); the \
                         query gives {}",
                        input_names(&rubric),
                        columns.join(", ")
                    );
                }
                parts.push(FusedPart {
                    metric: metric.to_string(),
                    rubric,
                    inputs: given,
                });
            }
            let group = Arc::new(FusedRubric::new(parts));
            let label = group.names().join(",");
            // In the group's order, as the fused call names them (its cache key).
            let inputs: Vec<(String, usize)> = group
                .rubric
                .inputs
                .iter()
                .filter_map(|i| Some((i.name.clone(), columns.iter().position(|c| c == &i.name)?)))
                .collect();
            (
                JudgeBatch::fused(group, settings.clone()).await?,
                inputs,
                label,
            )
        };
        let mut rows: Vec<CallInputs> = Vec::new();
        for batch in &batches {
            let values: Vec<Vec<Option<String>>> =
                batch.columns().iter().map(texts).collect::<Result<_>>()?;
            for row in 0..batch.num_rows() {
                let mut call: CallInputs = Vec::new();
                let mut complete = true;
                for (name, column) in &inputs {
                    match &values[*column][row] {
                        Some(v) => call.push((name.clone(), v.clone())),
                        // One metric needs every input; a group judges what it can.
                        None if funcs.len() == 1 => complete = false,
                        None => {}
                    }
                }
                if complete && !call.is_empty() {
                    rows.push(call);
                }
            }
        }
        // A seeded random sample: the rows ordered by a hash of their position.
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|i| mix64(seed ^ mix64(*i as u64)));
        let sample: Vec<&CallInputs> = order.iter().take(self.n).map(|i| &rows[*i]).collect();

        // Both models judge it.
        let judged: Vec<Judged> = judge_cascade_sample(&base, &cascade, &sample)
            .await?
            .into_iter()
            .map(|(confidence, agrees)| Judged { confidence, agrees })
            .collect();
        if settings.dry_run {
            // The estimate counted both models' calls; nothing was judged, so nothing is
            // calibrated, and nothing is stored (a cascade would otherwise escalate every row).
            return Ok(StoredCalibration {
                metric: label,
                rubric_version: base.rubric.version_tag(),
                model: settings.model.clone(),
                small_model: cascade.model.clone(),
                threshold: None,
                sample_size: sample.len() as i64,
                agreement: 0.0,
                lower_bound: 0.0,
                escalated_share: 1.0,
                reason: Some(
                    "dry run: the sample's calls are estimated, nothing is judged or stored"
                        .to_string(),
                ),
            });
        }
        let c = calibrate(&judged, cascade.agreement, cascade.delta);
        // Rows either model could not judge (an error, a budget) are not in the sample the
        // threshold was certified on: say how many, beside the kernel's reason.
        let unjudged = sample.len() - judged.len();
        let reason = match (unjudged, c.reason) {
            (0, reason) => reason,
            (k, reason) => Some(
                [
                    reason,
                    Some(format!(
                        "{k} of the sample's {} rows were not judged by both models (an error \
                         or a budget); the calibration rests on the other {}",
                        sample.len(),
                        judged.len()
                    )),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("; "),
            ),
        };
        let stored = StoredCalibration {
            metric: label,
            rubric_version: base.rubric.version_tag(),
            model: settings.model.clone(),
            small_model: cascade.model.clone(),
            threshold: c.threshold,
            sample_size: judged.len() as i64,
            agreement: c.agreement,
            lower_bound: c.lower_bound,
            escalated_share: c.escalated_share,
            reason,
        };
        let Some(cache) = base.cache().cloned() else {
            return plan_err!(
                "judge_calibrate(): the calibration is kept in the judge cache, which is off: \
                 SET evalsql.judge.cache (or EVALSQL_JUDGE_CACHE) to a file"
            );
        };
        let key = calibration_key(&base.rubric, &settings, &cascade);
        let record = stored.clone();
        blocking(move || cache.put_calibration(&key, &record)).await?;
        Ok(stored)
    }
}

/// A rubric's input names, for messages.
fn input_names(rubric: &crate::judge::rubric::Rubric) -> String {
    rubric
        .inputs
        .iter()
        .map(|i| i.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
