//! One run of a monitor: the traces that became complete since its last run, sampled, its
//! query over their spans, and the rows committed with its progress.
//!
//! A trace is complete once no span of it arrived (`ingested_at`) for the monitor's idle
//! time. A run at time `now` takes the cutoff `C = now - idle`; the monitor's progress `P`
//! is the cutoff of its last committed rows (Delta's application transaction
//! `evalsql-monitor:<name>:v<version>` on its table, committed with those rows), or, for a
//! new version, its creation time less the idle time (traces completing after it exists).
//! The run scores the traces whose last span arrived in `(P, C]`: each complete trace is in
//! exactly one run's window, and a trace that receives spans after it was scored has its
//! last span in a later window, so it is scored again (its new rows supersede the old in
//! `monitors.<name>`).
//!
//! Exactly once: rows and progress are one commit. A run that dies before its commit left
//! nothing; the next run starts again from `P` and scores the same traces (judge calls
//! already paid come from the judge cache). Two processes running one monitor cannot both
//! commit the same progress: Delta refuses the second commit of an application transaction
//! it did not read.
//!
//! The query sees the traces in groups (of at most [`GROUP`] traces, [`BUDGETED_GROUP`] under a
//! budget, never splitting traces whose last spans arrived at the same instant). The rows of
//! the groups of one scan of `spans` (at most [`SCAN`] traces; under a budget, of each
//! group) are committed together with the progress up to their last trace. Under a daily budget, a group in which a judge call was refused for
//! the budget is not committed: it and the groups after it are deferred — counted in
//! `monitor_runs`, and the first traces of the next run that can afford them.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use datafusion::arrow::compute::{cast, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::TableProvider;
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::datasource::MemTable;
use datafusion::functions_aggregate::expr_fn::max;
use datafusion::logical_expr::{col, lit};
use datafusion::prelude::SessionContext;
use sha2::Digest;
use url::Url;

use super::catalog::{Monitor, now_micros};
use super::overlay::with_spans;
use super::tables::{append, progress};

/// The most traces the query sees at once: each query costs its planning and each group
/// its scan of `spans` and its commit, so a group is large, while it bounds the spans (and
/// rows) a run holds at once.
pub const GROUP: usize = 4096;
/// ... under a budget, where a group is also what is deferred when a call is refused.
pub const BUDGETED_GROUP: usize = 8;
/// The most traces whose spans are read in one scan of `spans` (then handed to the query a
/// group at a time): each scan reads every file that may hold one of them.
pub const SCAN: usize = GROUP;

/// The columns every monitor row has besides its query's.
pub const ADDED: [&str; 4] = ["run_id", "run_at", "monitor_version", "sample_weight"];

/// Whether `trace_id` is in `name`'s sample at `rate`: a hash of both, so the same traces
/// are sampled by every process and after every restart, and a smaller rate's sample is
/// inside a larger one's.
pub fn sampled(name: &str, trace_id: &str, rate: f64) -> bool {
    if rate >= 1.0 {
        return true;
    }
    let mut h = sha2::Sha256::new();
    h.update(name.as_bytes());
    h.update([0u8]);
    h.update(trace_id.as_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) as f64) < rate * 18_446_744_073_709_551_616.0
}

/// The application transaction that holds a monitor version's progress.
pub fn app_id(name: &str, version: i64) -> String {
    format!("evalsql-monitor:{name}:v{version}")
}

/// What a run did, for `monitor_runs`.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    pub run_id: String,
    pub started: i64,
    pub ended: i64,
    pub completed: u64,
    pub sampled: u64,
    pub rows: u64,
    pub judge_calls: u64,
    pub dollars: f64,
    pub deferred: u64,
    /// Why traces were deferred (the judge engine's refusal).
    pub deferred_why: Option<String>,
    pub error: Option<String>,
}

/// A column type Delta keeps: text as `Utf8`, times in microseconds (UTC), unsigned
/// integers as signed; nested types as they are.
fn storable(t: &DataType) -> DataType {
    match t {
        DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        DataType::Timestamp(_, _) => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        DataType::UInt8 | DataType::UInt16 => DataType::Int32,
        DataType::UInt32 | DataType::UInt64 => DataType::Int64,
        DataType::Float16 => DataType::Float32,
        other => other.clone(),
    }
}

/// The schema of a monitor's table for a query of `output` schema: its columns, stored as
/// Delta keeps them, then [`ADDED`]. A query without `trace_id`, or with a column of an added
/// name, is refused.
pub fn results_schema(name: &str, output: &Schema) -> Result<SchemaRef> {
    if output.field_with_name("trace_id").is_err() {
        return Err(DataFusionError::Plan(format!(
            "CREATE MONITOR {name}: the query must give a trace_id column (each row belongs to \
             one trace; the query gives {})",
            output
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let mut fields: Vec<Field> = Vec::new();
    for f in output.fields() {
        if ADDED.contains(&f.name().as_str()) {
            return Err(DataFusionError::Plan(format!(
                "CREATE MONITOR {name}: the column {} is added to every row by the monitor; \
                 name the query's column otherwise",
                f.name()
            )));
        }
        fields.push(Field::new(f.name(), storable(f.data_type()), true));
    }
    fields.push(Field::new("run_id", DataType::Utf8, false));
    fields.push(Field::new(
        "run_at",
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        false,
    ));
    fields.push(Field::new("monitor_version", DataType::Int64, false));
    fields.push(Field::new("sample_weight", DataType::Float64, false));
    Ok(Arc::new(Schema::new(fields)))
}

/// The run's rows of `batch` (the query's) as the monitor's table keeps them.
fn stored(
    batch: &RecordBatch,
    schema: &SchemaRef,
    run_id: &str,
    run_at: i64,
    version: i64,
    weight: f64,
) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for (i, field) in schema.fields().iter().enumerate().take(batch.num_columns()) {
        columns.push(cast(batch.column(i), field.data_type())?);
    }
    columns.push(Arc::new(StringArray::from(vec![run_id; n])));
    columns.push(Arc::new(
        TimestampMicrosecondArray::from(vec![run_at; n]).with_timezone("UTC"),
    ));
    columns.push(Arc::new(Int64Array::from(vec![version; n])));
    columns.push(Arc::new(Float64Array::from(vec![weight; n])));
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

fn micros(v: i64) -> datafusion::logical_expr::Expr {
    lit(ScalarValue::TimestampMicrosecond(
        Some(v),
        Some("UTC".into()),
    ))
}

/// The traces whose last span arrived in `(after, upto]`, of the spans that had arrived by
/// `seen` (none later), oldest first.
async fn completed(
    spans: &Arc<dyn TableProvider>,
    after: i64,
    upto: i64,
    seen: i64,
) -> Result<Vec<(i64, String)>> {
    let ctx = SessionContext::new();
    let batches = ctx
        .read_table(Arc::clone(spans))?
        .filter(
            col("ingested_at")
                .gt(micros(after))
                .and(col("ingested_at").lt_eq(micros(seen))),
        )?
        .aggregate(
            vec![col("trace_id")],
            vec![max(col("ingested_at")).alias("last")],
        )?
        .collect()
        .await?;
    let mut out = Vec::new();
    for b in &batches {
        let ids = cast(b.column(0), &DataType::Utf8)?;
        let ids = ids.as_string::<i32>();
        let last = cast(b.column(1), &DataType::Int64)?;
        let last = last.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        for i in 0..b.num_rows() {
            if !last.is_null(i) && last.value(i) <= upto {
                out.push((last.value(i), ids.value(i).to_string()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The spans of `traces` that arrived by `upto`: one scan of `spans` for all of them. The
/// files written since spans had bloom filters on `trace_id` (see `crate::otlp::writer`)
/// are skipped unless they may hold one of them, and with the filter pushed into the
/// Parquet reader only the rows of these traces are decoded past `trace_id`.
async fn spans_of(
    spans: &Arc<dyn TableProvider>,
    traces: &[&str],
    upto: i64,
) -> Result<Vec<RecordBatch>> {
    let mut config = datafusion::prelude::SessionConfig::new();
    config.options_mut().execution.parquet.pushdown_filters = true;
    let ctx = SessionContext::new_with_config(config);
    let list = traces.iter().map(|t| lit(*t)).collect();
    ctx.read_table(Arc::clone(spans))?
        .filter(
            col("ingested_at")
                .lt_eq(micros(upto))
                .and(col("trace_id").in_list(list, false)),
        )?
        .collect()
        .await
}

/// Which rows of `batch` belong to one of `traces` (by `trace_id`; NULL belongs to none).
fn of_traces(batch: &RecordBatch, traces: &HashSet<&str>) -> Result<BooleanArray> {
    let ids = batch
        .column_by_name("trace_id")
        .ok_or_else(|| DataFusionError::Internal("rows without trace_id".into()))?;
    let ids = cast(ids, &DataType::Utf8)?;
    let ids = ids.as_string::<i32>();
    Ok(ids
        .iter()
        .map(|id| Some(id.is_some_and(|id| traces.contains(id))))
        .collect())
}

/// The rows of `batches` whose `trace_id` is one of `traces`.
fn spans_among(batches: &[RecordBatch], traces: &HashSet<&str>) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::with_capacity(batches.len());
    for b in batches {
        let kept = filter_record_batch(b, &of_traces(b, traces)?)?;
        if kept.num_rows() > 0 {
            out.push(kept);
        }
    }
    Ok(out)
}

/// Everything a run needs besides the monitor.
pub struct RunContext<'a> {
    /// The operator's session the query runs in (its functions, settings and tables).
    pub base: &'a SessionContext,
    /// The store's `spans`.
    pub spans: Arc<dyn TableProvider>,
    /// The monitor's table.
    pub results: Url,
    /// Dollars this monitor may still spend today, if it has a budget.
    pub budget_left: Option<f64>,
}

/// Runs `monitor` once, now. Errors end the run and are reported in its report.
pub async fn run(monitor: &Monitor, cx: RunContext<'_>) -> RunReport {
    let mut report = RunReport {
        run_id: uuid::Uuid::new_v4().to_string(),
        started: now_micros(),
        ..Default::default()
    };
    if let Err(e) = run_inner(monitor, &cx, &mut report).await {
        report.error = Some(e.to_string());
    }
    report.ended = now_micros();
    report
}

async fn run_inner(monitor: &Monitor, cx: &RunContext<'_>, report: &mut RunReport) -> Result<()> {
    let d = &monitor.definition;
    let idle = d.after_idle.as_micros() as i64;
    let app = app_id(&d.name, monitor.version);
    let from = match progress(&cx.results, &app).await? {
        Some(p) => p,
        None => monitor.created_at - idle,
    };
    let window = Window {
        from,
        cutoff: report.started - idle,
        seen: report.started,
    };
    score(monitor, cx, &window, report, &mut Sink::Commit(app)).await
}

/// Which traces a run looks at: those whose last span arrived in `(from, cutoff]`, of the
/// spans that had arrived by `seen` (the run's time).
pub struct Window {
    pub from: i64,
    pub cutoff: i64,
    pub seen: i64,
}

/// Where a run's rows go.
pub enum Sink<'a> {
    /// To the monitor's table, with its progress (this application transaction).
    Commit(String),
    /// Kept here (a replay).
    Collect(&'a mut Vec<RecordBatch>),
}

/// Scores the complete, sampled traces of `window` into `sink`, counting in `report`
/// (whose `run_id` and `started` the rows carry).
pub async fn score(
    monitor: &Monitor,
    cx: &RunContext<'_>,
    window: &Window,
    report: &mut RunReport,
    sink: &mut Sink<'_>,
) -> Result<()> {
    let d = &monitor.definition;
    let Window { from, cutoff, seen } = *window;
    if cutoff <= from {
        return Ok(());
    }
    let complete = completed(&cx.spans, from, cutoff, seen).await?;
    report.completed = complete.len() as u64;
    if complete.is_empty() {
        // Nothing to record: the next run looks at the same window, and more.
        return Ok(());
    }
    let chosen: Vec<(i64, String)> = complete
        .into_iter()
        .filter(|(_, t)| sampled(&d.name, t, d.sample))
        .collect();
    report.sampled = chosen.len() as u64;
    let empty = MemTable::try_new(evalsql_udfs::spans::spans_schema(), vec![vec![]])?;
    let plan = with_spans(cx.base, Arc::new(empty), None)?
        .state()
        .create_logical_plan(&d.query)
        .await?;
    let schema = results_schema(&d.name, plan.schema().as_arrow())?;
    if chosen.is_empty() {
        if let Sink::Commit(app) = sink {
            append(&cx.results, schema, Vec::new(), Some((app.clone(), cutoff))).await?;
        }
        return Ok(());
    }
    let weight = 1.0 / d.sample;
    let size = if cx.budget_left.is_some() {
        BUDGETED_GROUP
    } else {
        GROUP
    };
    let mut start = 0;
    // The spans of the traces from `read.0` to `read.1`, read in one scan.
    let mut read: (usize, usize, Vec<RecordBatch>) = (0, 0, Vec::new());
    // Rows of the groups scored since the last commit.
    let mut unsaved: Vec<RecordBatch> = Vec::new();
    while start < chosen.len() {
        // A group ends where the next trace's last span arrived later than its own.
        let mut end = (start + size).min(chosen.len());
        while end < chosen.len() && chosen[end].0 == chosen[end - 1].0 {
            end += 1;
        }
        let group = &chosen[start..end];
        let upto = if end == chosen.len() {
            cutoff
        } else {
            group[group.len() - 1].0
        };
        if end > read.1 {
            // The next traces' spans, from this group on.
            let last = (start + SCAN).max(end).min(chosen.len());
            let ids: Vec<&str> = chosen[start..last]
                .iter()
                .map(|(_, t)| t.as_str())
                .collect();
            read = (start, last, spans_of(&cx.spans, &ids, cutoff).await?);
        }
        let ids: Vec<String> = group.iter().map(|(_, t)| t.clone()).collect();
        let wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
        let spans = if (read.0, read.1) == (start, end) {
            std::mem::take(&mut read.2)
        } else {
            spans_among(&read.2, &wanted)?
        };
        let table = MemTable::try_new(evalsql_udfs::spans::spans_schema(), vec![spans])?;
        let ctx = with_spans(
            cx.base,
            Arc::new(table),
            cx.budget_left.map(|b| b - report.dollars),
        )?;
        let (rows, (dollars, calls, refused)) =
            crate::cluster_spend::collect_counting(&ctx, &d.query).await?;
        report.dollars += dollars;
        report.judge_calls += calls;
        if let Some(why) = refused {
            // Not affordable today: this group and the rest wait for the budget.
            report.deferred = (chosen.len() - start) as u64;
            report.deferred_why = Some(why);
            break;
        }
        let mut out = Vec::with_capacity(rows.len());
        for batch in &rows {
            out.push(stored(
                batch,
                &schema,
                &report.run_id,
                report.started,
                monitor.version,
                weight,
            )?);
        }
        check_traces(&d.name, &out, &wanted)?;
        unsaved.extend(out);
        // Committed at the end of each scan's traces (a commit costs a Delta log entry),
        // and after each group under a budget, where a group is what is deferred.
        if cx.budget_left.is_some() || end == read.1 {
            let rows = unsaved.iter().map(|b| b.num_rows() as u64).sum::<u64>();
            let batches = std::mem::take(&mut unsaved);
            match sink {
                Sink::Commit(app) => {
                    append(
                        &cx.results,
                        Arc::clone(&schema),
                        batches,
                        Some((app.clone(), upto)),
                    )
                    .await?
                }
                Sink::Collect(kept) => kept.extend(batches),
            }
            report.rows += rows;
        }
        start = end;
    }
    Ok(())
}

/// Every row belongs to one of the group's traces: a row of another trace (or none) would
/// be scored outside its window.
fn check_traces(name: &str, batches: &[RecordBatch], wanted: &HashSet<&str>) -> Result<()> {
    for b in batches {
        let ours = of_traces(b, wanted)?;
        if let Some(i) = (0..b.num_rows()).find(|&i| !ours.value(i)) {
            let ids = cast(
                b.column_by_name("trace_id").expect("checked"),
                &DataType::Utf8,
            )?;
            let ids = ids.as_string::<i32>();
            return Err(DataFusionError::Execution(format!(
                "monitor {name}: a row's trace_id ({}) is not one of the traces this run \
                 scores; each row must keep its trace's trace_id",
                if ids.is_null(i) { "NULL" } else { ids.value(i) }
            )));
        }
    }
    Ok(())
}
