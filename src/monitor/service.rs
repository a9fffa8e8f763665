//! The monitors of one store, as `evalsql serve` keeps them: their statements, their
//! tables in the sessions, and the scheduler that runs each one every `EVERY`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use datafusion::arrow::array::{
    ArrayRef, AsArray, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::catalog::TableProvider;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::MemTable;
use datafusion::execution::FunctionRegistry;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use url::Url;

use super::alerts::{AlertOptions, Alerts, RunInfo};
use super::catalog::{Catalog, Entry, Monitor, now_micros};
use super::lease::Leases;
use super::overlay::with_spans;
use super::run::{RunContext, RunReport, results_schema, run};
use super::statement::{Definition, MonitorStatement};
use super::tables::{DeltaView, MonitorsSchema, append, read_all, table_url};

/// How often the scheduler looks at the catalog and the clock.
const TICK: Duration = Duration::from_millis(250);
/// How often the catalog is read again (statements from other processes).
const RELOAD: Duration = Duration::from_secs(2);

/// Who is asking, for [`Monitors::plan`].
pub struct Asker<'a> {
    /// Whether this asker may create, change and drop monitors.
    pub may_change: bool,
    /// Checks a monitor's query plan as the asker's own statements are checked.
    pub check: &'a (dyn Fn(&LogicalPlan) -> std::result::Result<(), String> + Send + Sync),
}

/// The monitors of a store.
pub struct Monitors {
    base: Url,
    alerts: Alerts,
    catalog: Catalog,
    spans_url: Url,
    runs_url: Url,
    /// The names of the monitors, for `monitors.<name>` listings.
    names: Arc<RwLock<Vec<String>>>,
    /// The catalog as last read.
    entries: Mutex<BTreeMap<String, Entry<Definition>>>,
    /// Per monitor: the UTC day and the dollars spent on it.
    spent: Mutex<HashMap<String, (i64, f64)>>,
    /// Which monitors this process runs (set by [`Monitors::start`]).
    leases: std::sync::OnceLock<Arc<Leases>>,
}

fn runs_schema() -> SchemaRef {
    let ts = || DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    Arc::new(Schema::new(vec![
        Field::new("monitor", DataType::Utf8, false),
        Field::new("version", DataType::Int64, false),
        Field::new("run_id", DataType::Utf8, false),
        Field::new("started", ts(), false),
        Field::new("ended", ts(), false),
        Field::new("traces_completed", DataType::Int64, false),
        Field::new("traces_sampled", DataType::Int64, false),
        Field::new("rows_written", DataType::Int64, false),
        Field::new("judge_calls", DataType::Int64, false),
        Field::new("dollars", DataType::Float64, false),
        Field::new("traces_deferred", DataType::Int64, false),
        Field::new("status", DataType::Utf8, false),
        Field::new("error", DataType::Utf8, true),
        // Which serve process ran it (the holder of the monitor's lease).
        Field::new("process", DataType::Utf8, true),
    ]))
}

fn show_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("version", DataType::Int64, false),
        Field::new("every", DataType::Utf8, false),
        Field::new("after_idle", DataType::Utf8, false),
        Field::new("sample_percent", DataType::Float64, false),
        Field::new("budget_usd_per_day", DataType::Float64, true),
        Field::new("paused", DataType::Boolean, false),
        Field::new(
            "created_at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("query", DataType::Utf8, false),
    ]))
}

/// The schema of a monitor statement's answer.
pub fn answer_schema(statement: &MonitorStatement) -> SchemaRef {
    match statement {
        MonitorStatement::Show => show_schema(),
        MonitorStatement::ShowAlerts => super::alerts::answer_schema(),
        _ => Arc::new(Schema::new(vec![Field::new(
            "result",
            DataType::Utf8,
            false,
        )])),
    }
}

fn seconds(d: Duration) -> String {
    format!("{} seconds", d.as_secs_f64())
}

const DAY: i64 = 86_400_000_000;

impl Monitors {
    /// The monitors of the store at `base` (a URL ending in `/`); a `writer` (serve) makes
    /// the runs' table at once, so that it can be read before the first run.
    pub async fn open(base: &Url, writer: bool, alerts: AlertOptions) -> Result<Arc<Monitors>> {
        let monitors = Arc::new(Monitors {
            base: base.clone(),
            alerts: Alerts::new(base, alerts)?,
            catalog: Catalog::new(base, "monitor_catalog/")?,
            spans_url: table_url(base, "spans/")?,
            runs_url: table_url(base, "monitor_runs/")?,
            names: Arc::default(),
            entries: Mutex::default(),
            spent: Mutex::default(),
            leases: std::sync::OnceLock::new(),
        });
        if writer && DeltaView::open(&monitors.runs_url, false).await?.is_none() {
            append(&monitors.runs_url, runs_schema(), Vec::new(), None).await?;
        }
        if writer
            && DeltaView::open(monitors.alerts.table_url(), false)
                .await?
                .is_none()
        {
            monitors.alerts.create_table().await?;
        }
        monitors.reload().await?;
        Ok(monitors)
    }

    /// Reads the catalog again.
    pub async fn reload(&self) -> Result<BTreeMap<String, Entry<Definition>>> {
        self.alerts.reload().await?;
        let entries = self.catalog.load().await?;
        if let Ok(mut names) = self.names.write() {
            *names = entries
                .iter()
                .filter(|(_, e)| e.current.is_some())
                .map(|(n, _)| n.clone())
                .collect();
        }
        if let Ok(mut kept) = self.entries.lock() {
            *kept = entries.clone();
        }
        Ok(entries)
    }

    /// Registers `monitors.<name>` and `monitor_runs` in `ctx` (read-only tables).
    pub async fn install(&self, ctx: &SessionContext) -> Result<()> {
        let state = ctx.state();
        let defaults = &state.config_options().catalog;
        let catalog = ctx.catalog(&defaults.default_catalog).ok_or_else(|| {
            DataFusionError::Configuration("the session has no default catalog".into())
        })?;
        catalog.register_schema(
            "monitors",
            Arc::new(MonitorsSchema {
                base: self.base.clone(),
                names: Arc::clone(&self.names),
            }),
        )?;
        if let Some(runs) = DeltaView::open(&self.runs_url, false).await? {
            ctx.register_table("monitor_runs", Arc::new(runs))?;
        }
        if let Some(alerts) = DeltaView::open(self.alerts.table_url(), false).await? {
            ctx.register_table("alerts", Arc::new(alerts))?;
        }
        Ok(())
    }

    /// The store's alerts.
    pub fn alerts(&self) -> &Alerts {
        &self.alerts
    }

    /// The store's `spans` table, if it has one.
    pub async fn spans(&self) -> Result<Option<crate::otlp::table::SpansTable>> {
        crate::otlp::table::SpansTable::open(&self.spans_url).await
    }

    pub fn results_url(&self, name: &str) -> Result<Url> {
        table_url(&self.base, &format!("monitors/{name}/"))
    }

    /// Checks a statement for `asker` and plans what it will do; nothing changes until the
    /// answer is made ([`Monitors::execute`]).
    pub async fn check(
        &self,
        statement: &MonitorStatement,
        ctx: &SessionContext,
        asker: &Asker<'_>,
    ) -> Result<Option<SchemaRef>> {
        let what = match statement {
            MonitorStatement::Show | MonitorStatement::ShowAlerts => return Ok(None),
            MonitorStatement::Create { .. } => "CREATE MONITOR",
            MonitorStatement::Alter { .. } | MonitorStatement::SetBudget { .. } => "ALTER MONITOR",
            MonitorStatement::Drop { .. } => "DROP MONITOR",
            MonitorStatement::CreateAlert { .. } => "CREATE ALERT",
            MonitorStatement::DropAlert { .. } => "DROP ALERT",
        };
        if !asker.may_change {
            return Err(DataFusionError::Plan(format!(
                "permission denied: {what} needs a server started with --allow-monitors \
                 (a monitor spends the server's judge key every run)"
            )));
        }
        if let MonitorStatement::CreateAlert { alert, .. } = statement {
            let entries = self.reload().await?;
            let exists = entries
                .get(&alert.monitor)
                .is_some_and(|e| e.current.is_some());
            self.alerts
                .validate(alert, exists, ctx, asker.check)
                .await?;
            return Ok(None);
        }
        let MonitorStatement::Create { definition, .. } = statement else {
            return Ok(None);
        };
        Ok(Some(self.validate(definition, ctx, asker.check).await?))
    }

    /// The monitor's table schema for `definition`, its query planned over an empty
    /// `spans` and checked.
    async fn validate(
        &self,
        definition: &Definition,
        ctx: &SessionContext,
        check: &(dyn Fn(&LogicalPlan) -> std::result::Result<(), String> + Send + Sync),
    ) -> Result<SchemaRef> {
        let name = &definition.name;
        let empty = MemTable::try_new(evalsql_udfs::spans::spans_schema(), vec![vec![]])?;
        let ctx = with_spans(ctx, Arc::new(empty), None)?;
        let plan = ctx
            .state()
            .create_logical_plan(&definition.query)
            .await
            .map_err(|e| DataFusionError::Plan(format!("CREATE MONITOR {name}: {e}")))?;
        check(&plan)
            .map_err(|why| DataFusionError::Plan(format!("CREATE MONITOR {name}: {why}")))?;
        results_schema(name, plan.schema().as_arrow())
    }

    /// Carries out a statement checked by [`Monitors::check`] (`schema`: what it said).
    pub async fn execute(
        &self,
        statement: &MonitorStatement,
        schema: Option<SchemaRef>,
    ) -> Result<RecordBatch> {
        let entries = self.reload().await?;
        let message = |m: String| {
            RecordBatch::try_new(
                answer_schema(statement),
                vec![Arc::new(StringArray::from(vec![m])) as ArrayRef],
            )
        };
        let entry_of = |name: &str| entries.get(name).cloned().unwrap_or_default();
        let outcome = match statement {
            MonitorStatement::Show => return Ok(self.show(&entries)?),
            MonitorStatement::ShowAlerts => return self.alerts.show().await,
            MonitorStatement::CreateAlert { or_replace, alert } => {
                self.alerts.create(*or_replace, alert).await?
            }
            MonitorStatement::DropAlert { name, if_exists } => {
                self.alerts.drop_alert(name, *if_exists).await?
            }
            MonitorStatement::Create {
                or_replace,
                definition,
            } => {
                let name = &definition.name;
                let entry = entry_of(name);
                if let Some(m) = &entry.current
                    && &m.definition == definition
                {
                    // The same definition again (an --init file at each start): no new
                    // version, so nothing is scored twice.
                    return Ok(message(format!(
                        "CREATE MONITOR {name}: unchanged (version {})",
                        m.version
                    ))?);
                }
                if entry.current.is_some() && !or_replace {
                    return Err(DataFusionError::Plan(format!(
                        "monitor {name} exists (CREATE OR REPLACE MONITOR makes a new version)"
                    )));
                }
                let schema = schema.ok_or_else(|| {
                    DataFusionError::Internal("CREATE MONITOR was not checked".into())
                })?;
                // The table first, with the query's columns (added to an older version's).
                append(&self.results_url(name)?, schema, Vec::new(), None)
                    .await
                    .map_err(|e| {
                        DataFusionError::Plan(format!(
                            "CREATE MONITOR {name}: its rows cannot be kept beside the earlier \
                             versions' ({e})"
                        ))
                    })?;
                let version = entry.version + 1;
                self.catalog
                    .record(name, &entry, "create", version, Some(definition))
                    .await?;
                format!("CREATE MONITOR {name} (version {version})")
            }
            MonitorStatement::Alter { name, paused } => {
                let entry = entry_of(name);
                let Some(m) = &entry.current else {
                    return Err(DataFusionError::Plan(format!("no monitor {name}")));
                };
                let action = if *paused { "pause" } else { "resume" };
                self.catalog
                    .record(name, &entry, action, m.version, None::<&()>)
                    .await?;
                format!("ALTER MONITOR {name} {}", action.to_uppercase())
            }
            MonitorStatement::SetBudget { name, budget } => {
                let entry = entry_of(name);
                let Some(m) = &entry.current else {
                    return Err(DataFusionError::Plan(format!("no monitor {name}")));
                };
                self.catalog
                    .record(name, &entry, "budget", m.version, Some(budget))
                    .await?;
                match budget {
                    Some(b) => format!("ALTER MONITOR {name} SET BUDGET {b} USD PER DAY"),
                    None => format!("ALTER MONITOR {name} SET BUDGET NONE"),
                }
            }
            MonitorStatement::Drop { name, if_exists } => {
                let entry = entry_of(name);
                match &entry.current {
                    Some(m) => {
                        self.catalog
                            .record(name, &entry, "drop", m.version, None::<&()>)
                            .await?;
                        format!("DROP MONITOR {name} (its rows are kept)")
                    }
                    None if *if_exists => format!("DROP MONITOR {name}: there is none"),
                    None => return Err(DataFusionError::Plan(format!("no monitor {name}"))),
                }
            }
        };
        self.reload().await?;
        Ok(message(outcome)?)
    }

    fn show(&self, entries: &BTreeMap<String, Entry<Definition>>) -> Result<RecordBatch> {
        let monitors: Vec<&Monitor> = entries
            .values()
            .filter_map(|e| e.current.as_ref())
            .collect();
        let d = |m: &&Monitor| m.definition.clone();
        Ok(RecordBatch::try_new(
            show_schema(),
            vec![
                Arc::new(StringArray::from_iter_values(
                    monitors.iter().map(|m| d(m).name),
                )),
                Arc::new(Int64Array::from_iter_values(
                    monitors.iter().map(|m| m.version),
                )),
                Arc::new(StringArray::from_iter_values(
                    monitors.iter().map(|m| seconds(d(m).every)),
                )),
                Arc::new(StringArray::from_iter_values(
                    monitors.iter().map(|m| seconds(d(m).after_idle)),
                )),
                Arc::new(Float64Array::from_iter_values(
                    monitors.iter().map(|m| d(m).sample * 100.0),
                )),
                Arc::new(Float64Array::from_iter(
                    monitors.iter().map(|m| d(m).budget_usd_per_day),
                )),
                Arc::new(BooleanArray::from_iter(
                    monitors.iter().map(|m| Some(m.paused)),
                )),
                Arc::new(
                    TimestampMicrosecondArray::from_iter_values(
                        monitors.iter().map(|m| m.created_at),
                    )
                    .with_timezone("UTC"),
                ),
                Arc::new(StringArray::from_iter_values(
                    monitors.iter().map(|m| d(m).query),
                )),
            ],
        )?)
    }

    /// Dollars `name` spent today (UTC), read from `monitor_runs` the first time.
    async fn spent_today(&self, name: &str) -> Result<f64> {
        let today = now_micros().div_euclid(DAY);
        if let Some(&(day, dollars)) = self
            .spent
            .lock()
            .ok()
            .and_then(|s| s.get(name).copied())
            .as_ref()
            && day == today
        {
            return Ok(dollars);
        }
        let mut dollars = 0.0;
        for b in read_all(&self.runs_url).await? {
            let column = |c: &str, t: &DataType| {
                datafusion::arrow::compute::cast(b.column_by_name(c).expect("a runs column"), t)
            };
            let monitor = column("monitor", &DataType::Utf8)?;
            let started = column("started", &DataType::Int64)?;
            let spent = column("dollars", &DataType::Float64)?;
            let (monitor, started, spent) = (
                monitor.as_string::<i32>(),
                started.as_primitive::<datafusion::arrow::datatypes::Int64Type>(),
                spent.as_primitive::<datafusion::arrow::datatypes::Float64Type>(),
            );
            for i in 0..b.num_rows() {
                if monitor.value(i) == name && started.value(i).div_euclid(DAY) == today {
                    dollars += spent.value(i);
                }
            }
        }
        if let Ok(mut s) = self.spent.lock() {
            s.insert(name.to_string(), (today, dollars));
        }
        Ok(dollars)
    }

    /// Runs `monitor` once in `base`'s session (its query in `cluster`, a session made by
    /// [`on_cluster`], when there is one and the monitor has no budget) and records the run.
    pub async fn run_once(
        &self,
        monitor: &Monitor,
        base: &SessionContext,
        cluster: Option<&SessionContext>,
    ) -> Result<RunReport> {
        let name = &monitor.definition.name;
        let Some(spans) = crate::otlp::table::SpansTable::open(&self.spans_url).await? else {
            return Ok(RunReport::default());
        };
        let budget_left = match monitor.definition.budget_usd_per_day {
            Some(b) => Some((b - self.spent_today(name).await?).max(0.0)),
            None => None,
        };
        // A budget is kept by this process's judge ledger, which does not see the calls the
        // executors make: a monitor with one runs here.
        let runner = match cluster {
            Some(cluster) if budget_left.is_none() => cluster,
            _ => base,
        };
        let report = run(
            monitor,
            RunContext {
                base: runner,
                spans: Arc::new(spans) as Arc<dyn TableProvider>,
                results: self.results_url(name)?,
                budget_left,
            },
        )
        .await;
        if let Ok(mut s) = self.spent.lock()
            && let Some((day, dollars)) = s.get_mut(name)
            && *day == report.started.div_euclid(DAY)
        {
            *dollars += report.dollars;
        }
        self.record_run(monitor, &report).await?;
        if report.error.is_none() && report.started > 0 {
            let run = RunInfo {
                monitor: name,
                run_id: &report.run_id,
                version: monitor.version,
                at: report.started,
            };
            if let Err(e) = self.alerts.evaluate(&run, base).await {
                log::warn!("monitor {name}: its alerts could not be evaluated: {e}");
            }
        }
        Ok(report)
    }

    async fn record_run(&self, monitor: &Monitor, r: &RunReport) -> Result<()> {
        let ts = |v: i64| Arc::new(TimestampMicrosecondArray::from(vec![v]).with_timezone("UTC"));
        let status = match (&r.error, r.deferred) {
            (Some(_), _) => "error",
            (None, 0) => "ok",
            (None, _) => "deferred",
        };
        let batch = RecordBatch::try_new(
            runs_schema(),
            vec![
                Arc::new(StringArray::from(vec![monitor.definition.name.as_str()])),
                Arc::new(Int64Array::from(vec![monitor.version])),
                Arc::new(StringArray::from(vec![r.run_id.as_str()])),
                ts(r.started),
                ts(r.ended),
                Arc::new(Int64Array::from(vec![r.completed as i64])),
                Arc::new(Int64Array::from(vec![r.sampled as i64])),
                Arc::new(Int64Array::from(vec![r.rows as i64])),
                Arc::new(Int64Array::from(vec![r.judge_calls as i64])),
                Arc::new(Float64Array::from(vec![r.dollars])),
                Arc::new(Int64Array::from(vec![r.deferred as i64])),
                Arc::new(StringArray::from(vec![status])),
                Arc::new(StringArray::from(vec![
                    r.error.clone().or(r.deferred_why.clone()),
                ])),
                Arc::new(StringArray::from(vec![
                    self.leases.get().map(|l| l.holder().to_string()),
                ])),
            ],
        )?;
        append(&self.runs_url, runs_schema(), vec![batch], None).await
    }

    /// Runs every monitor that is not paused every `EVERY`, each in its own task (one run
    /// of a monitor at a time), in `base`'s session (the queries on `cluster`, a Ballista
    /// session, when given: see [`Monitors::run_once`]), until the process ends. A monitor
    /// runs here only while this process holds its lease (terms of `lease`): processes
    /// sharing the store take turns, one at a time per monitor.
    pub fn start(
        self: &Arc<Self>,
        base: Arc<SessionContext>,
        cluster: Option<SessionContext>,
        lease: Duration,
    ) -> Result<()> {
        // Made once: `base`'s tables are shared, and its settings and functions are the
        // operator's, fixed once --init has run.
        let cluster = cluster
            .map(|c| on_cluster(&c, &base).map(Arc::new))
            .transpose()?;
        let leases = Arc::new(Leases::new(&self.base, lease)?);
        if self.leases.set(Arc::clone(&leases)).is_err() {
            return Err(DataFusionError::Internal(
                "the monitors were started twice".into(),
            ));
        }
        // Leases are extended while their runs go on, however long a run takes.
        let keeper = Arc::clone(&leases);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(lease / 6).await;
                for name in keeper.held() {
                    if let Err(e) = keeper.hold(&name).await {
                        log::warn!("monitor {name}: {e}");
                    }
                }
            }
        });
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let mut next: HashMap<(String, i64), tokio::time::Instant> = HashMap::new();
            let mut running: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
            let mut reloaded = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(TICK).await;
                if reloaded.elapsed() >= RELOAD {
                    if let Err(e) = this.reload().await {
                        log::warn!("monitors: cannot read the catalog: {e}");
                    }
                    reloaded = tokio::time::Instant::now();
                }
                let entries = this.entries.lock().map(|e| e.clone()).unwrap_or_default();
                running.retain(|_, task| !task.is_finished());
                let now = tokio::time::Instant::now();
                for monitor in entries.into_values().filter_map(|e| e.current) {
                    let name = monitor.definition.name.clone();
                    let key = (name.clone(), monitor.version);
                    if monitor.paused
                        || running.contains_key(&name)
                        || next.get(&key).is_some_and(|&at| at > now)
                    {
                        continue;
                    }
                    next.insert(key, now + monitor.definition.every);
                    let (this, base) = (Arc::clone(&this), Arc::clone(&base));
                    let (cluster, leases) = (cluster.clone(), Arc::clone(&leases));
                    running.insert(
                        name.clone(),
                        tokio::spawn(async move {
                            match leases.hold(&name).await {
                                Ok(true) => {}
                                // Another process of the store runs it now.
                                Ok(false) => return,
                                Err(e) => {
                                    log::warn!("monitor {name}: {e}");
                                    return;
                                }
                            }
                            match this.run_once(&monitor, &base, cluster.as_deref()).await {
                                Ok(r) if r.error.is_some() => log::warn!(
                                    "monitor {name}: run {} failed: {}",
                                    r.run_id,
                                    r.error.unwrap_or_default()
                                ),
                                Ok(_) => {}
                                Err(e) => log::warn!("monitor {name}: {e}"),
                            }
                        }),
                    );
                }
            }
        });
        Ok(())
    }

    /// Gives up this process's leases (serve stopping), so that another process of the
    /// store runs its monitors at once rather than when the leases run out.
    pub async fn stop(&self) {
        if let Some(leases) = self.leases.get() {
            leases.release_all().await;
        }
    }
}

/// The session a monitor's query runs in on a Ballista cluster: `cluster`'s (its planner
/// sends the plan to the scheduler), with `base`'s tables, those of its `evalsql.*`
/// settings a job may carry (the judge's model, thresholds, its own limits) and the functions `base` has that
/// the cluster's session lacks (judges the operator defined: the plan carries their
/// rubrics to the executors).
pub fn on_cluster(cluster: &SessionContext, base: &SessionContext) -> Result<SessionContext> {
    let base_state = base.state();
    let mut state = datafusion::execution::session_state::SessionStateBuilder::new_from_existing(
        cluster.state(),
    )
    .with_catalog_list(Arc::clone(base_state.catalog_list()))
    .build();
    for entry in base_state.config_options().entries() {
        // Where calls go, keys, files and shared limits are the executors' operator's: the
        // scheduler refuses a job that sets them.
        let ours = entry.key.starts_with("evalsql.") && !evalsql_udfs::operator_only(&entry.key);
        if let (true, Some(value)) = (ours, &entry.value) {
            state.config_mut().options_mut().set(&entry.key, value)?;
        }
    }
    let ctx = SessionContext::new_with_state(state);
    for (name, udf) in base_state.scalar_functions() {
        if ctx.udf(name).is_err() {
            ctx.register_udf(udf.as_ref().clone());
        }
    }
    for (name, udaf) in base_state.aggregate_functions() {
        if ctx.udaf(name).is_err() {
            ctx.register_udaf(udaf.as_ref().clone());
        }
    }
    Ok(ctx)
}
