//! `evalsql monitor replay NAME --from TS --to TS [--version N]`: a monitor run over past
//! spans as if it had run every `EVERY` from `--from` to `--to`, with the rows and the alert
//! timeline it would have produced, and nothing written to the store.
//!
//! Each simulated run at time `t` sees the spans that had arrived by `t` and scores the
//! traces complete by then (last span by `t - AFTER IDLE`) that an earlier simulated run did
//! not, exactly as a live run does ([`super::run::score`]); its rows carry `run_at = t`.
//! The alerts on the monitor are evaluated after each run over the replayed rows. Judge
//! calls go through the judge cache (what the live monitor paid for costs nothing again) and
//! the monitor's budget applies per simulated day.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos;
use datafusion::catalog::TableProvider;
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;

use super::Monitors;
use super::alerts::{RunInfo, States, step, transitions};
use super::run::{RunContext, RunReport, Sink, Window, results_schema, score};
use super::tables::latest_runs;

/// The `evalsql monitor` commands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum MonitorCommand {
    /// Run a monitor (this or an older version) over past spans as if it had run every
    /// EVERY: prints the rows it would have produced (stdout, in --format) and its alerts'
    /// timeline (stderr); the store is not written. Needs --store.
    Replay {
        /// The monitor
        name: String,
        /// The first simulated run's time, minus EVERY (RFC 3339 or 'YYYY-MM-DD HH:MM:SS', UTC)
        #[arg(long)]
        from: String,
        /// The last simulated run's time at the latest
        #[arg(long)]
        to: String,
        /// The monitor's version [default: the current one]
        #[arg(long)]
        version: Option<i64>,
    },
}

fn micros_of(flag: &str, text: &str) -> Result<i64> {
    string_to_timestamp_nanos(text.trim())
        .map(|ns| ns / 1000)
        .map_err(|e| DataFusionError::Plan(format!("{flag} {text}: not a time ({e})")))
}

/// What a replay produced: the rows, and the alerts' changes of state (rows of `alerts`).
pub struct Replayed {
    pub rows: Vec<RecordBatch>,
    pub timeline: Vec<RecordBatch>,
}

/// Replays `name` (its `version`, else the current one) in `ctx` over the store's spans.
pub async fn replay(
    ctx: &SessionContext,
    monitors: &Monitors,
    name: &str,
    (from, to): (&str, &str),
    version: Option<i64>,
) -> Result<Replayed> {
    let (from, to) = (micros_of("--from", from)?, micros_of("--to", to)?);
    if to <= from {
        return Err(DataFusionError::Plan(
            "monitor replay: --to must be after --from".into(),
        ));
    }
    let entries = monitors.reload().await?;
    let entry = entries
        .get(name)
        .ok_or_else(|| DataFusionError::Plan(format!("monitor replay: no monitor {name}")))?;
    let monitor = match version {
        Some(v) => entry
            .versions
            .iter()
            .find(|m| m.version == v)
            .cloned()
            .ok_or_else(|| {
                DataFusionError::Plan(format!(
                    "monitor replay: {name} has no version {v} (versions 1 to {})",
                    entry.version
                ))
            })?,
        None => entry.current.clone().ok_or_else(|| {
            DataFusionError::Plan(format!(
                "monitor replay: {name} was dropped; name a --version"
            ))
        })?,
    };
    let spans: Arc<dyn TableProvider> = match monitors.spans().await? {
        Some(s) => Arc::new(s),
        None => {
            return Err(DataFusionError::Plan(
                "monitor replay: the store has no spans".into(),
            ));
        }
    };
    let d = &monitor.definition;
    let (every, idle) = (d.every.as_micros() as i64, d.after_idle.as_micros() as i64);
    let alerts = monitors.alerts().on(name);
    let mut states = States::new();
    let mut spent: HashMap<i64, f64> = HashMap::new();
    let mut rows: Vec<RecordBatch> = Vec::new();
    let mut timeline = Vec::new();
    let results = monitors.results_url(name)?;
    let mut progress = from - idle;
    let mut at = from + every;
    let mut k = 0;
    while at <= to {
        k += 1;
        let day = at.div_euclid(86_400_000_000);
        let budget_left = d
            .budget_usd_per_day
            .map(|b| (b - spent.get(&day).copied().unwrap_or(0.0)).max(0.0));
        let cx = RunContext {
            base: ctx,
            spans: Arc::clone(&spans),
            results: results.clone(),
            budget_left,
        };
        let mut report = RunReport {
            run_id: format!("replay-{k}"),
            started: at,
            ..Default::default()
        };
        let window = Window {
            from: progress,
            cutoff: at - idle,
            seen: at,
        };
        let mut produced = Vec::new();
        score(
            &monitor,
            &cx,
            &window,
            &mut report,
            &mut Sink::Collect(&mut produced),
        )
        .await?;
        *spent.entry(day).or_default() += report.dollars;
        if report.deferred == 0 && report.completed > 0 {
            progress = window.cutoff;
        } else if report.deferred > 0 {
            eprintln!(
                "monitor replay: run at {}: {} traces deferred by the budget",
                shown_time(at),
                report.deferred
            );
        }
        rows.extend(produced);
        if !alerts.is_empty() {
            let schema = match rows.first() {
                Some(b) => b.schema(),
                None => {
                    let empty =
                        MemTable::try_new(evalsql_udfs::spans::spans_schema(), vec![vec![]])?;
                    let plan = super::overlay::with_spans(ctx, Arc::new(empty), None)?
                        .state()
                        .create_logical_plan(&d.query)
                        .await?;
                    results_schema(name, plan.schema().as_arrow())?
                }
            };
            let all = MemTable::try_new(schema, vec![rows.clone()])?;
            let view = latest_runs(ctx.read_table(Arc::new(all))?)?;
            ctx.deregister_table("__replayed_rows")?;
            ctx.register_table("__replayed_rows", view.into_view())?;
            let run = RunInfo {
                monitor: name,
                run_id: &report.run_id,
                version: monitor.version,
                at,
            };
            let changes = step(&alerts, &run, ctx, "__replayed_rows", &mut states).await?;
            let changed: Vec<_> = changes.iter().filter(|c| c.changed).collect();
            if !changed.is_empty() {
                timeline.push(transitions(&run, &changed)?);
            }
        }
        at += every;
        // A replay of a long span of time with a short EVERY is many runs: say how far.
        if k % 1000 == 0 {
            eprintln!("monitor replay: {k} runs, at {}", shown_time(at));
        }
    }
    ctx.deregister_table("__replayed_rows")?;
    Ok(Replayed { rows, timeline })
}

fn shown_time(micros: i64) -> String {
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.to_rfc3339())
        .unwrap_or_else(|| format!("{:?}", Duration::from_micros(micros.max(0) as u64)))
}

/// Runs an `evalsql monitor` command in `ctx` (the CLI's session, with `--store`'s tables):
/// rows on stdout in `format`, the timeline on stderr.
pub async fn command(
    ctx: &SessionContext,
    store: Option<&str>,
    action: &MonitorCommand,
    format: datafusion_cli::print_format::PrintFormat,
) -> Result<()> {
    let MonitorCommand::Replay {
        name,
        from,
        to,
        version,
    } = action;
    let store = store.ok_or_else(|| {
        DataFusionError::Plan("evalsql monitor replay needs --store (the monitor's store)".into())
    })?;
    let base = crate::otlp::store::store_url_of(store)?;
    let monitors = Monitors::open(&base, false, Default::default()).await?;
    let replayed = replay(ctx, &monitors, name, (from, to), *version).await?;
    let schema = match replayed.rows.first() {
        Some(b) => b.schema(),
        None => Arc::new(datafusion::arrow::datatypes::Schema::empty()),
    };
    format.print_batches(
        &mut std::io::stdout(),
        schema,
        &replayed.rows,
        datafusion_cli::print_options::MaxRows::Unlimited,
        true,
        &datafusion::config::FormatOptions::default(),
    )?;
    if replayed.timeline.is_empty() {
        eprintln!("monitor replay: no alert changed state");
    } else {
        eprintln!(
            "monitor replay: alert timeline\n{}",
            datafusion::arrow::util::pretty::pretty_format_batches(&replayed.timeline)?
        );
    }
    Ok(())
}
