//! Monitors: queries over the `spans` table run every so often on the traces that became
//! complete since their last run.
//!
//! - [`statement`]: `CREATE [OR REPLACE] MONITOR`, `SHOW MONITORS`, `ALTER MONITOR`, `DROP
//!   MONITOR`, parsed from sqlparser's tokens.

pub mod statement;
