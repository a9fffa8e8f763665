//! Monitors: queries over the `spans` table run every so often on the traces that became
//! complete since their last run, their rows kept in the store.
//!
//! - [`statement`]: `CREATE [OR REPLACE] MONITOR`, `SHOW MONITORS`, `ALTER MONITOR`, `DROP
//!   MONITOR`, parsed from sqlparser's tokens.
//! - [`catalog`]: the definitions, kept in the store.
//! - [`run`]: one run — which traces, the sample, exactly-once commits, budgets.
//! - [`service`]: the statements carried out, the tables installed, the scheduler.
//! - [`tables`]: the Delta tables and how queries read them (`monitors.<name>`,
//!   `monitor_runs`).
//! - [`overlay`]: the session a monitor's query runs in.
//! - [`replay`]: `evalsql monitor replay`, a monitor over past spans.
//! - [`alerts`]: conditions over a monitor's rows, their states and notifications.
//! - [`action`]: a monitor statement as a plan, for the PostgreSQL wire.

pub mod action;
pub mod alerts;
pub mod catalog;
mod overlay;
pub mod replay;
pub mod run;
pub mod service;
pub mod statement;
pub mod tables;

pub use alerts::AlertOptions;
pub use service::{Asker, Monitors};
pub use statement::{MonitorStatement, parse};
