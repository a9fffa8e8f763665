//! evalsql: Apache DataFusion with every evaluation metric as a SQL function.
//!
//! [`session::new_context`] builds the session the CLI, the tests and `evalsql serve`
//! share; the metrics themselves live in the `evalsql-udfs` crate, re-exported as
//! [`udfs`].

pub mod async_aggregates;
pub mod async_filter;
pub mod balance_scans;
pub mod cli;
pub mod cluster_spend;
pub mod distributed;
pub mod formats;
pub mod fuse;
pub mod guarded_udf;
pub mod memory;
pub mod monitor;
pub mod object_stores;
pub mod otlp;
pub mod policy;
pub mod repl;
pub mod report;
pub mod scan_batches;
pub mod serve;
pub mod session;
pub mod sizes;
pub mod traces;

pub use evalsql_udfs as udfs;
