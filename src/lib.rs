//! evalsql: Apache DataFusion with every evaluation metric as a SQL function.
//!
//! [`session::new_context`] builds the session the CLI, the tests and (later) the servers
//! share; the metrics themselves live in the `evalsql-udfs` crate, re-exported as
//! [`udfs`].

pub mod async_aggregates;
pub mod cli;
pub mod formats;
pub mod report;
pub mod session;

pub use evalsql_udfs as udfs;
