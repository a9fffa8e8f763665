//! Monitors: queries over the `spans` table run every so often on the traces that became
//! complete since their last run, their rows kept in the store.
//!
//! - [`statement`]: `CREATE [OR REPLACE] MONITOR`, `SHOW MONITORS`, `ALTER MONITOR`, `DROP
//!   MONITOR`, parsed from sqlparser's tokens.
//! - [`catalog`]: the definitions, kept in the store.
//! - [`run`]: one run — which traces, the sample, exactly-once commits, budgets.
//! - [`service`]: the statements carried out, the tables installed, the scheduler.
//! - [`lease`]: which process of a store runs a monitor.
//! - [`tables`]: the Delta tables and how queries read them (`monitors.<name>`,
//!   `monitor_runs`).
//! - [`overlay`]: the session a monitor's query runs in.
//! - [`replay`]: `evalsql monitor replay`, a monitor over past spans.
//! - [`alerts`]: conditions over a monitor's rows, their states and notifications.
//! - [`action`]: a monitor statement as a plan, for the PostgreSQL wire.

pub mod action;
pub mod alerts;
pub mod catalog;
pub mod lease;
mod overlay;
pub mod replay;
pub mod run;
pub mod service;
pub mod statement;
pub mod tables;

pub use alerts::AlertOptions;
pub use service::{Asker, Monitors};
pub use statement::{MonitorStatement, parse};

use std::future::Future;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use datafusion::prelude::SessionContext;

/// Runs a script (an `--init` file, the CLI's `-c` / `-f` with `--store`): its statements in
/// order, the SQL ones by `exec` (consecutive ones together), those about monitors and
/// alerts by `monitors` as the operator (their answers to `answer`). Statements are told
/// apart on sqlparser's tokens ([`statement::split`]).
pub async fn run_script<F, Fut>(
    ctx: &SessionContext,
    sql: &str,
    monitors: Option<&Arc<Monitors>>,
    mut exec: F,
    mut answer: impl FnMut(RecordBatch) -> Result<()>,
) -> Result<()>
where
    F: FnMut(String) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let mut pending = String::new();
    for text in statement::split(sql) {
        let parsed = parse(text);
        if !matches!(parsed, Ok(Some(_)) | Err(_)) {
            // Not about monitors (or not SQL sqlparser reads: the SQL runner says why).
            pending.push_str(text);
            pending.push_str(";\n");
            continue;
        }
        if !pending.trim().is_empty() {
            exec(std::mem::take(&mut pending)).await?;
        }
        // A statement about monitors that is wrong says what is wrong with it (the SQL
        // runner would only say it does not know the statement).
        let statement = parsed
            .map_err(DataFusionError::Plan)?
            .expect("a statement about monitors");
        let monitors = monitors.ok_or_else(|| {
            DataFusionError::Configuration(
                "monitors and alerts live in a store: give --store DIR (serve: or --otlp)".into(),
            )
        })?;
        let allow_all = |_: &datafusion::logical_expr::LogicalPlan| Ok(());
        let asker = Asker {
            may_change: true,
            check: &allow_all,
        };
        let checked = monitors.check(&statement, ctx, &asker).await?;
        answer(monitors.execute(&statement, checked).await?)?;
    }
    if !pending.trim().is_empty() {
        exec(pending).await?;
    }
    Ok(())
}
