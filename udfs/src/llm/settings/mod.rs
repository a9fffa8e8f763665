//! Where judge and target settings come from: the environment, overridden per session by
//! `SET evalsql.judge.<key> = ...` / `SET evalsql.target.<key> = ...`.
//!
//! * [`keys`]: the key table. One entry per key holds its name, type, default, who may set
//!   it and its description; nothing else writes a default. Values are parsed once, at
//!   `SET`, and a wrong one fails there naming the key, the value and what is allowed.
//! * [`session`]: what `SET` sees — a session's values ([`JudgeOptions`], a DataFusion
//!   config extension) and who may set what ([`Restriction`]) — and [`Read`], through which
//!   a statement reads them back by key, typed, with the table's defaults.
//! * [`resolve`]: what one call needs — the session's values merged with the environment
//!   into [`JudgeSettings`] and [`TargetSettings`]. API keys come only from the
//!   environment: a `SET` statement can end up in a history file, a log or a BI tool's
//!   query list.
//!
//! Who the operator is: statements of the CLI and of `serve --init` may set anything. A
//! `serve` client's session ([`Restriction::Client`]) and a job a Ballista client submits
//! ([`Restriction::Remote`]) may not set operator-only keys, and may set the call limits only
//! below the operator's values, for their own queries.
//!
//! Adding a key: an entry in [`keys::KEYS`] (a `Key` constant and its line in the list),
//! and its read where it is used (`Read::new(session, "judge").int(&keys::NEW_KEY)`).

pub mod keys;
pub mod resolve;
pub mod session;
#[cfg(test)]
mod tests;

pub use keys::{MODEL_SETTINGS, PanelAggregate, operator_only, setting_case};
pub use resolve::{
    BatchSettings, Cascade, JudgeSettings, TargetSettings, cache_path, fuse_enabled,
    pinned_versions,
};
pub use session::{JudgeOptions, Restriction};
