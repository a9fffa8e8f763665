//! The `spans` table as queries see it: the store's Delta table at its latest version, with
//! `read_otlp`'s columns first (the two span times in nanoseconds again, from the
//! `*_unix_nano` columns Delta keeps beside its microsecond timestamps) and each span once.
//!
//! An exporter retries a request it did not see answered, so a span can be committed twice
//! (by two processes, or across a restart). The writer drops repeats it has seen lately;
//! this reader drops the rest: rows are hash-partitioned by `(trace_id, span_id)` and each
//! partition keeps the first row of each pair. The set of pairs costs about 40 bytes a span
//! of what the query reads (filters on columns other than the two times are applied before
//! it, in the Delta scan).

use datafusion::common::tree_node::TreeNodeRecursion;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, RecordBatch, TimestampNanosecondArray,
};
use datafusion::arrow::compute::{cast, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::TableType;
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::expressions::col;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use deltalake::DeltaTable;
use evalsql_udfs::spans::spans_schema;
use futures::StreamExt;
use object_store::ObjectStore;
use url::Url;

use super::store::{delta_error, object_store_for, open};

/// The `spans` table of a store.
pub struct SpansTable {
    url: Url,
    table: tokio::sync::Mutex<DeltaTable>,
    /// The store's objects, for the scans of this table only (a server's clients cannot
    /// reach them by path).
    objects: Arc<dyn ObjectStore>,
}

impl fmt::Debug for SpansTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpansTable({})", self.url)
    }
}

impl SpansTable {
    /// The table at `url`, or `None` when nothing was stored there yet.
    pub async fn open(url: &Url) -> Result<Option<SpansTable>> {
        let Some(table) = open(url).await? else {
            return Ok(None);
        };
        let objects = object_store_for(url)?;
        Ok(Some(SpansTable {
            url: url.clone(),
            table: tokio::sync::Mutex::new(table),
            objects,
        }))
    }

    /// Whether a column's stored values are its values (a filter on it can go to the scan).
    fn same_when_stored(name: &str) -> bool {
        !matches!(name, "start_time" | "end_time")
    }

    /// The runtime of the scans: the session's, with the store's objects reachable.
    fn runtime(&self, runtime: &Arc<RuntimeEnv>) -> Arc<RuntimeEnv> {
        with_store(runtime, &self.url, &self.objects)
    }
}

/// `runtime` with the objects of the store at `url` reachable (by this runtime's scans
/// only: a server's clients cannot reach them by path).
pub fn with_store(
    runtime: &Arc<RuntimeEnv>,
    url: &Url,
    objects: &Arc<dyn ObjectStore>,
) -> Arc<RuntimeEnv> {
    let mut r = RuntimeEnv::clone(runtime);
    r.object_store_registry = Arc::new(WithStore {
        inner: Arc::clone(&runtime.object_store_registry),
        url: url.clone(),
        store: Arc::clone(objects),
    });
    Arc::new(r)
}

/// A registry that answers for the store's bucket (or file system) itself.
#[derive(Debug)]
struct WithStore {
    inner: Arc<dyn ObjectStoreRegistry>,
    url: Url,
    store: Arc<dyn ObjectStore>,
}

impl WithStore {
    fn ours(&self, url: &Url) -> bool {
        url.scheme() == self.url.scheme() && url.host_str() == self.url.host_str()
    }
}

impl ObjectStoreRegistry for WithStore {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        if self.ours(url) {
            return Some(Arc::clone(&self.store));
        }
        self.inner.register_store(url, store)
    }

    fn deregister_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        self.inner.deregister_store(url)
    }

    fn get_store(&self, url: &Url) -> Result<Arc<dyn ObjectStore>> {
        if self.ours(url) {
            return Ok(Arc::clone(&self.store));
        }
        self.inner.get_store(url)
    }
}

fn referenced_columns(e: &Expr) -> Vec<String> {
    e.column_refs()
        .into_iter()
        .map(|c| c.name.clone())
        .collect()
}

#[async_trait]
impl TableProvider for SpansTable {
    fn schema(&self) -> SchemaRef {
        spans_schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if referenced_columns(f)
                    .iter()
                    .all(|c| Self::same_when_stored(c))
                {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // The latest version, whatever this process or another committed since.
        let table = {
            let mut t = self.table.lock().await;
            t.update_state().await.map_err(delta_error)?;
            t.clone()
        };
        let state = state
            .as_any()
            .downcast_ref::<SessionState>()
            .ok_or_else(|| DataFusionError::Internal("spans: not a SessionState".into()))?;
        let runtime = self.runtime(state.runtime_env());
        let state = SessionStateBuilder::new_from_existing(state.clone())
            .with_runtime_env(Arc::clone(&runtime))
            .build();
        let provider = table
            .table_provider()
            .with_session(Arc::new(state.clone()))
            .await
            .map_err(|e| DataFusionError::Execution(format!("spans: {e}")))?;
        let stored = provider.schema();
        let exposed = spans_schema();
        let wanted: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..exposed.fields().len()).collect(),
        };
        // What each exposed column is read from, and the ids every row needs.
        fn source(name: &str) -> &str {
            match name {
                "start_time" => "start_time_unix_nano",
                "end_time" => "end_time_unix_nano",
                other => other,
            }
        }
        let mut inner: Vec<usize> = Vec::new();
        let mut index_of = |name: &str| -> Result<usize> {
            let i = stored.index_of(name)?;
            Ok(match inner.iter().position(|&j| j == i) {
                Some(k) => k,
                None => {
                    inner.push(i);
                    inner.len() - 1
                }
            })
        };
        let trace = index_of("trace_id")?;
        let span = index_of("span_id")?;
        let mut columns = Vec::with_capacity(wanted.len());
        for &w in &wanted {
            let name = exposed.field(w).name();
            let k = index_of(source(name))?;
            columns.push((k, name == "start_time" || name == "end_time"));
        }
        let pushed: Vec<Expr> = filters
            .iter()
            .filter(|f| {
                referenced_columns(f)
                    .iter()
                    .all(|c| Self::same_when_stored(c))
            })
            .cloned()
            .collect();
        let plan = provider.scan(&state, Some(&inner), &pushed, None).await?;
        let partitions = state.config().target_partitions().max(1);
        let input_schema = plan.schema();
        let keys = vec![
            col(input_schema.field(trace).name(), &input_schema)?,
            col(input_schema.field(span).name(), &input_schema)?,
        ];
        let plan: Arc<dyn ExecutionPlan> = Arc::new(RepartitionExec::try_new(
            plan,
            Partitioning::Hash(keys, partitions),
        )?);
        let schema = Arc::new(exposed.project(&wanted)?);
        Ok(Arc::new(DistinctSpans::new(
            plan, schema, trace, span, columns, runtime,
        )))
    }
}

/// `context` with `runtime` instead of its own: the store's objects reachable.
fn with_runtime(context: &TaskContext, runtime: &Arc<RuntimeEnv>) -> Arc<TaskContext> {
    Arc::new(TaskContext::new(
        context.task_id(),
        context.session_id(),
        context.session_config().clone(),
        context.scalar_functions().clone(),
        context.higher_order_functions().clone(),
        context.aggregate_functions().clone(),
        context.window_functions().clone(),
        Arc::clone(runtime),
    ))
}

/// Runs its input with a runtime of its own: a plan over the store's tables (made in a
/// session where the store's objects are reachable, [`with_store`]) run by a session
/// where they are not, such as the CLI's or a client's. Without it the scan asks the
/// outer session for the store's bucket and finds none.
#[derive(Debug)]
pub struct InRuntime {
    input: Arc<dyn ExecutionPlan>,
    runtime: Arc<RuntimeEnv>,
}

impl InRuntime {
    pub fn new(input: Arc<dyn ExecutionPlan>, runtime: Arc<RuntimeEnv>) -> Self {
        InRuntime { input, runtime }
    }
}

impl DisplayAs for InRuntime {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "InRuntime")
    }
}

impl ExecutionPlan for InRuntime {
    fn name(&self) -> &str {
        "InRuntime"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_plan::PhysicalExpr>,
        ) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(InRuntime::new(
            children.remove(0),
            Arc::clone(&self.runtime),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.input
            .execute(partition, with_runtime(&context, &self.runtime))
    }
}

/// Keeps the first row of each `(trace_id, span_id)` in each partition of its (hash-
/// partitioned) input, and makes the exposed columns of the stored ones.
#[derive(Debug)]
struct DistinctSpans {
    input: Arc<dyn ExecutionPlan>,
    schema: SchemaRef,
    trace: usize,
    span: usize,
    /// For each output column: its input column, and whether it is nanoseconds to show as
    /// a timestamp.
    columns: Vec<(usize, bool)>,
    runtime: Arc<RuntimeEnv>,
    properties: Arc<PlanProperties>,
}

impl DistinctSpans {
    fn new(
        input: Arc<dyn ExecutionPlan>,
        schema: SchemaRef,
        trace: usize,
        span: usize,
        columns: Vec<(usize, bool)>,
        runtime: Arc<RuntimeEnv>,
    ) -> Self {
        let p = input.properties();
        let properties = Arc::new(PlanProperties::new(
            datafusion::physical_expr::EquivalenceProperties::new(Arc::clone(&schema)),
            p.output_partitioning().clone(),
            p.emission_type,
            p.boundedness,
        ));
        DistinctSpans {
            input,
            schema,
            trace,
            span,
            columns,
            runtime,
            properties,
        }
    }
}

impl DisplayAs for DistinctSpans {
    fn fmt_as(&self, _: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "DistinctSpans")
    }
}

impl ExecutionPlan for DistinctSpans {
    fn name(&self) -> &str {
        "DistinctSpans"
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_plan::PhysicalExpr>,
        ) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(DistinctSpans::new(
            children.remove(0),
            Arc::clone(&self.schema),
            self.trace,
            self.span,
            self.columns.clone(),
            Arc::clone(&self.runtime),
        )))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let input = self
            .input
            .execute(partition, with_runtime(&context, &self.runtime))?;
        let mut seen: HashSet<(u128, u64)> = HashSet::new();
        let mut seen_text: HashSet<(String, String)> = HashSet::new();
        let (trace, span, columns, schema) = (
            self.trace,
            self.span,
            self.columns.clone(),
            Arc::clone(&self.schema),
        );
        let out_schema = Arc::clone(&schema);
        let stream = input.map(move |batch| {
            let batch = batch?;
            // Delta's scan may give strings as views: the ids are read as plain strings.
            let utf8 = |a: &ArrayRef| cast(a, &DataType::Utf8);
            let (t, s) = (utf8(batch.column(trace))?, utf8(batch.column(span))?);
            let (t, s) = (t.as_string::<i32>(), s.as_string::<i32>());
            let keep: BooleanArray = (0..batch.num_rows())
                .map(|i| {
                    let (tv, sv) = (t.value(i), s.value(i));
                    Some(
                        match (u128::from_str_radix(tv, 16), u64::from_str_radix(sv, 16)) {
                            (Ok(a), Ok(b)) if tv.len() == 32 && sv.len() == 16 => {
                                seen.insert((a, b))
                            }
                            _ => seen_text.insert((tv.to_string(), sv.to_string())),
                        },
                    )
                })
                .collect();
            let batch = if keep.true_count() == batch.num_rows() {
                batch
            } else {
                filter_record_batch(&batch, &keep)?
            };
            let arrays: Vec<ArrayRef> = columns
                .iter()
                .zip(schema.fields())
                .map(|(&(k, nanos), field)| {
                    let a = batch.column(k);
                    if nanos {
                        let ns: &Int64Array = a.as_primitive::<Int64Type>();
                        Ok(Arc::new(
                            TimestampNanosecondArray::new(ns.values().clone(), ns.nulls().cloned())
                                .with_timezone("UTC"),
                        ) as ArrayRef)
                    } else if a.data_type() != field.data_type() {
                        cast(a, field.data_type())
                    } else {
                        Ok(Arc::clone(a))
                    }
                })
                .collect::<std::result::Result<_, _>>()?;
            Ok(RecordBatch::try_new_with_options(
                Arc::clone(&schema),
                arrays,
                &datafusion::arrow::array::RecordBatchOptions::new()
                    .with_row_count(Some(batch.num_rows())),
            )?)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(out_schema, stream)))
    }
}
