//! A connection's view of the server's sessions in SQL: `pg_backend_pid()`,
//! `pg_cancel_backend(pid)`, `pg_terminate_backend(pid)` and `pg_catalog.pg_stat_activity`,
//! each limited to the client's own user (a client sees and stops its own user's sessions,
//! never another user's).

use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::{SchemaProvider, Session as CatalogSession, TableProvider};
use datafusion::common::{DataFusionError, Result, cast::as_int64_array};
use datafusion::datasource::{MemTable, TableType};
use datafusion::logical_expr::{ColumnarValue, Expr, Volatility, create_udf};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionContext;

use super::sessions::{Session, Sessions, Stop};

/// Where a connection's SQL functions find its session (set when it logs in).
pub type SessionSlot = OnceLock<Arc<Session>>;

/// Registers the functions of one connection in its own session context.
pub fn register_functions(ctx: &SessionContext, sessions: &Arc<Sessions>, slot: &Arc<SessionSlot>) {
    let me = Arc::clone(slot);
    ctx.register_udf(create_udf(
        "pg_backend_pid",
        vec![],
        DataType::Int32,
        Volatility::Stable,
        Arc::new(move |_| {
            let pid = me.get().map(|s| s.pid);
            Ok(ColumnarValue::Scalar(pid.into()))
        }),
    ));
    for (name, stop) in [
        ("pg_cancel_backend", Stop::Canceled),
        ("pg_terminate_backend", Stop::Terminated),
    ] {
        let me = Arc::clone(slot);
        let sessions = Arc::clone(sessions);
        ctx.register_udf(create_udf(
            name,
            vec![DataType::Int64],
            DataType::Boolean,
            // Never evaluated while planning: it acts.
            Volatility::Volatile,
            Arc::new(move |args: &[ColumnarValue]| {
                let pids = ColumnarValue::values_to_arrays(args)?;
                let pids = as_int64_array(&pids[0])?;
                let user = me.get().map(|s| s.user.clone()).unwrap_or_default();
                let signalled: BooleanArray = pids
                    .iter()
                    .map(|pid| {
                        let pid = i32::try_from(pid?).ok()?;
                        Some(sessions.signal(&user, pid, stop))
                    })
                    .collect();
                Ok(ColumnarValue::Array(Arc::new(signalled) as ArrayRef))
            }),
        ));
    }
}

/// `pg_catalog` with the tables evalsql adds to datafusion-pg-catalog's (whose list is
/// fixed): `pg_stat_activity`.
#[derive(Debug)]
pub struct PgCatalogWithActivity {
    pub inner: Arc<dyn SchemaProvider>,
    pub activity: Arc<StatActivity>,
}

const STAT_ACTIVITY: &str = "pg_stat_activity";

#[async_trait]
impl SchemaProvider for PgCatalogWithActivity {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        names.push(STAT_ACTIVITY.into());
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        if name.eq_ignore_ascii_case(STAT_ACTIVITY) {
            return Ok(Some(Arc::clone(&self.activity) as Arc<dyn TableProvider>));
        }
        self.inner.table(name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        name.eq_ignore_ascii_case(STAT_ACTIVITY) || self.inner.table_exist(name)
    }
}

/// `pg_stat_activity`: the sessions of the reading connection's user, as PostgreSQL 16
/// shows them (the columns evalsql has no notion of, such as transaction ids, are NULL).
#[derive(Debug)]
pub struct StatActivity {
    pub sessions: Arc<Sessions>,
    schema: SchemaRef,
}

impl StatActivity {
    pub fn new(sessions: Arc<Sessions>) -> Self {
        let ts = || DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let text = DataType::Utf8;
        let fields = [
            ("datid", DataType::Int32),
            ("datname", text.clone()),
            ("pid", DataType::Int32),
            ("leader_pid", DataType::Int32),
            ("usesysid", DataType::Int32),
            ("usename", text.clone()),
            ("application_name", text.clone()),
            ("client_addr", text.clone()),
            ("client_hostname", text.clone()),
            ("client_port", DataType::Int32),
            ("backend_start", ts()),
            ("xact_start", ts()),
            ("query_start", ts()),
            ("state_change", ts()),
            ("wait_event_type", text.clone()),
            ("wait_event", text.clone()),
            ("state", text.clone()),
            ("backend_xid", text.clone()),
            ("backend_xmin", text.clone()),
            ("query_id", DataType::Int64),
            ("query", text.clone()),
            ("backend_type", text),
        ];
        let schema = Schema::new(
            fields
                .into_iter()
                .map(|(name, ty)| Field::new(name, ty, true))
                .collect::<Vec<_>>(),
        );
        StatActivity {
            sessions,
            schema: Arc::new(schema),
        }
    }

    fn batch(&self, user: &str) -> Result<RecordBatch> {
        let sessions = self.sessions.of_user(user);
        let micros = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_micros() as i64)
                .ok()
        };
        let running: Vec<_> = sessions.iter().map(|s| s.running()).collect();
        let text = |f: &dyn Fn(usize) -> Option<String>| -> ArrayRef {
            Arc::new((0..sessions.len()).map(f).collect::<StringArray>())
        };
        let int = |f: &dyn Fn(usize) -> Option<i32>| -> ArrayRef {
            Arc::new((0..sessions.len()).map(f).collect::<Int32Array>())
        };
        let ts = |f: &dyn Fn(usize) -> Option<i64>| -> ArrayRef {
            Arc::new(
                (0..sessions.len())
                    .map(f)
                    .collect::<TimestampMicrosecondArray>()
                    .with_timezone("UTC"),
            )
        };
        let none_text = || text(&|_| None);
        let none_int = || int(&|_| None);
        let none_ts = || ts(&|_| None);
        let columns: Vec<ArrayRef> = vec![
            none_int(),
            text(&|i| Some(sessions[i].database.clone())),
            int(&|i| Some(sessions[i].pid)),
            none_int(),
            none_int(),
            text(&|i| Some(sessions[i].user.clone())),
            text(&|i| Some(sessions[i].application_name.clone())),
            text(&|i| Some(sessions[i].client.ip().to_string())),
            none_text(),
            int(&|i| Some(i32::from(sessions[i].client.port()))),
            ts(&|i| micros(sessions[i].started)),
            none_ts(),
            ts(&|i| running[i].as_ref().and_then(|r| micros(r.started))),
            ts(&|i| running[i].as_ref().and_then(|r| micros(r.started))),
            none_text(),
            none_text(),
            text(&|i| {
                Some(
                    if running[i].is_some() {
                        "active"
                    } else {
                        "idle"
                    }
                    .into(),
                )
            }),
            none_text(),
            none_text(),
            Arc::new(Int64Array::from(vec![None; sessions.len()])),
            text(&|i| {
                Some(
                    running[i]
                        .as_ref()
                        .map_or(String::new(), |r| r.query.clone()),
                )
            }),
            text(&|_| Some("client backend".into())),
        ];
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }
}

#[async_trait]
impl TableProvider for StatActivity {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn CatalogSession,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        // The reading connection's user; a session without one (the operator's own
        // contexts) sees no sessions.
        let user = state
            .config()
            .get_extension::<SessionSlot>()
            .and_then(|slot| slot.get().map(|s| s.user.clone()));
        let batch = match user {
            Some(user) => self.batch(&user)?,
            None => RecordBatch::new_empty(Arc::clone(&self.schema)),
        };
        MemTable::try_new(Arc::clone(&self.schema), vec![vec![batch]])
            .map_err(|e| DataFusionError::Context("pg_stat_activity".into(), Box::new(e)))?
            .scan(state, projection, filters, limit)
            .await
    }
}

/// Replaces the `pg_catalog` schema of `catalog` in `ctx` with one that also has
/// `pg_stat_activity`.
pub fn add_stat_activity(
    ctx: &SessionContext,
    catalog: &str,
    sessions: &Arc<Sessions>,
) -> Result<()> {
    let catalog = ctx
        .catalog(catalog)
        .ok_or_else(|| DataFusionError::Configuration(format!("no catalog {catalog}")))?;
    let inner = catalog
        .schema("pg_catalog")
        .ok_or_else(|| DataFusionError::Configuration("no pg_catalog schema".into()))?;
    catalog.register_schema(
        "pg_catalog",
        Arc::new(PgCatalogWithActivity {
            inner,
            activity: Arc::new(StatActivity::new(Arc::clone(sessions))),
        }),
    )?;
    Ok(())
}
