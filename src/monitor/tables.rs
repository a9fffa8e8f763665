//! The monitors' Delta tables in the store, and how queries see them.
//!
//! - `<store>/monitor_catalog/`: the definitions, one row per statement ([`super::catalog`]).
//! - `<store>/monitors/<name>/`: a monitor's rows, read as `monitors.<name>`: the rows of
//!   each trace's latest run only (a trace scored again after late spans supersedes its
//!   earlier rows, which stay in the table and its history).
//! - `<store>/monitor_runs/`: one row per run, read as `monitor_runs`.
//!
//! Reads go through delta-rs's table provider at the table's latest version, with the
//! store's objects reachable by these scans only (as for `spans`).

use std::fmt;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::TableType;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::functions_aggregate::min_max::max_udaf;
use datafusion::logical_expr::expr::WindowFunction;
use datafusion::logical_expr::{Expr, ExprFunctionExt, WindowFunctionDefinition, col};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{DataFrame, SessionContext};
use deltalake::DeltaTable;
use deltalake::kernel::Transaction;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::operations::write::SchemaMode;
use deltalake::protocol::SaveMode;
use url::Url;

use crate::otlp::store::{delta_error, object_store_for, open, unloaded};
use crate::otlp::table::{InRuntime, with_store};

/// The table under the store `base` (a URL ending in `/`) at `path` (ending in `/`).
pub fn table_url(base: &Url, path: &str) -> Result<Url> {
    base.join(path)
        .map_err(|e| DataFusionError::Configuration(format!("{base}{path}: {e}")))
}

/// A session that reads the table at `url` (its objects reachable).
fn reading_session(url: &Url, state: Option<&SessionState>) -> Result<SessionState> {
    let objects = object_store_for(url)?;
    let state = match state {
        Some(s) => s.clone(),
        None => SessionContext::new().state(),
    };
    let runtime = with_store(state.runtime_env(), url, &objects);
    Ok(SessionStateBuilder::new_from_existing(state)
        .with_runtime_env(runtime)
        .build())
}

/// A Delta table's provider, reading through `state`.
async fn provider(table: &DeltaTable, state: SessionState) -> Result<Arc<dyn TableProvider>> {
    table
        .table_provider()
        .with_session(Arc::new(state))
        .await
        .map_err(|e| DataFusionError::Execution(format!("{}: {e}", table.table_url())))
}

/// Every row of the table at `url` (none when there is no table yet).
pub async fn read_all(url: &Url) -> Result<Vec<RecordBatch>> {
    let Some(table) = open(url).await? else {
        return Ok(Vec::new());
    };
    let state = reading_session(url, None)?;
    let ctx = SessionContext::new_with_state(state.clone());
    ctx.read_table(provider(&table, state).await?)?
        .collect()
        .await
}

/// The version recorded for `app_id` by the last commit that carried it.
pub async fn progress(url: &Url, app_id: &str) -> Result<Option<i64>> {
    let Some(table) = open(url).await? else {
        return Ok(None);
    };
    table
        .snapshot()
        .map_err(delta_error)?
        .transaction_version(table.log_store().as_ref(), app_id)
        .await
        .map_err(delta_error)
}

/// Appends `batches` (of `schema`, possibly none) to the table at `url`, creating it if
/// needed; columns the table lacks are added to it. With `txn`, the commit carries that
/// application transaction: a second commit of the same id at the same version is refused
/// by Delta's conflict check when they race, and the caller reads the recorded version
/// first ([`progress`]) so a retry after a crash starts where the last commit ended.
pub async fn append(
    url: &Url,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    txn: Option<(String, i64)>,
) -> Result<()> {
    let table = match open(url).await? {
        Some(t) => t,
        None => unloaded(url)?,
    };
    let batches = if batches.is_empty() {
        vec![RecordBatch::new_empty(schema)]
    } else {
        batches
    };
    let mut properties = CommitProperties::default();
    if let Some((app_id, version)) = txn {
        properties = properties.with_application_transaction(Transaction::new(app_id, version));
    }
    // delta-rs plans the write in its own session (its planner has nodes of its own).
    table
        .write(batches)
        .with_save_mode(SaveMode::Append)
        .with_schema_mode(SchemaMode::Merge)
        .with_commit_properties(properties)
        .await
        .map_err(delta_error)?;
    Ok(())
}

/// A Delta table of the store read at its latest version on every scan; with
/// `supersede`, only the rows of each `(trace_id, monitor_version)`'s latest run.
pub struct DeltaView {
    url: Url,
    schema: SchemaRef,
    supersede: bool,
}

impl fmt::Debug for DeltaView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeltaView({})", self.url)
    }
}

impl DeltaView {
    /// The table at `url`, if there is one.
    pub async fn open(url: &Url, supersede: bool) -> Result<Option<DeltaView>> {
        let Some(table) = open(url).await? else {
            return Ok(None);
        };
        let state = reading_session(url, None)?;
        let schema = provider(&table, state).await?.schema();
        Ok(Some(DeltaView {
            url: url.clone(),
            schema,
            supersede,
        }))
    }
}

#[async_trait]
impl TableProvider for DeltaView {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let state = state
            .as_any()
            .downcast_ref::<SessionState>()
            .ok_or_else(|| DataFusionError::Internal("monitor table: not a SessionState".into()))?;
        let table = open(&self.url).await?.ok_or_else(|| {
            DataFusionError::Execution(format!("{}: the table is gone", self.url))
        })?;
        let state = reading_session(&self.url, Some(state))?;
        let runtime = Arc::clone(state.runtime_env());
        let ctx = SessionContext::new_with_state(state.clone());
        let mut df = ctx.read_table(provider(&table, state).await?)?;
        // Columns added since this provider was made (a new version of the monitor) are
        // not shown until the statement is planned again.
        let names: Vec<String> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        if self.supersede {
            df = latest_runs(df)?;
        }
        let wanted: Vec<&str> = match projection {
            Some(p) => p.iter().map(|&i| names[i].as_str()).collect(),
            None => names.iter().map(String::as_str).collect(),
        };
        let plan = df.select_columns(&wanted)?.create_physical_plan().await?;
        // Run with the reading session's runtime: the store's bucket is not the asker's.
        Ok(Arc::new(InRuntime::new(plan, runtime)))
    }
}

/// The rows of `df` (a monitor's) from each `(trace_id, monitor_version)`'s latest run,
/// with an extra column `__latest_run_at`.
pub fn latest_runs(df: DataFrame) -> Result<DataFrame> {
    let latest = Expr::from(WindowFunction::new(
        WindowFunctionDefinition::AggregateUDF(max_udaf()),
        vec![col("run_at")],
    ))
    .partition_by(vec![col("trace_id"), col("monitor_version")])
    .build()?
    .alias("__latest_run_at");
    df.window(vec![latest])?
        .filter(col("run_at").eq(col("__latest_run_at")))
}

/// The schema `monitors`: one table per monitor, read-only.
#[derive(Debug)]
pub struct MonitorsSchema {
    pub base: Url,
    /// The monitors' names, kept by the scheduler.
    pub names: Arc<RwLock<Vec<String>>>,
}

#[async_trait]
impl SchemaProvider for MonitorsSchema {
    fn table_names(&self) -> Vec<String> {
        self.names.read().map(|n| n.clone()).unwrap_or_default()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if !super::statement::valid_name(name) {
            return Ok(None);
        }
        let url = table_url(&self.base, &format!("monitors/{name}/"))?;
        Ok(DeltaView::open(&url, true)
            .await?
            .map(|v| Arc::new(v) as Arc<dyn TableProvider>))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.table_names().iter().any(|n| n == name)
    }
}
