//! What every evalsql function shares: reading string arguments in any Arrow encoding,
//! building results, signatures, documentation sections and error messages.

pub mod args;
pub mod docs;
pub mod excerpt;
pub mod interrupt;
pub(crate) mod pyjson;
pub mod recent;
pub mod signature;

use std::sync::Arc;

use datafusion::catalog::TableFunctionImpl;
use datafusion::logical_expr::{AggregateUDF, ScalarUDF, WindowUDF};

pub use args::{
    BoolArg, StrArg, argument_arrays, columnar_result, float64_rows, invoke_text_pair,
    invoke_text_refs, json_rows, json_values, prepare_args, rows_of, texts, truncate_for_error,
};

/// One family's functions by kind: what each family's `functions()` gives (`text`, `agent`,
/// `retrieval`, `stats`, `traces`, `judge`, `target`), and what [`crate::register_all`] registers.
/// Adding a function to a family is a line in its `functions()`; nothing here changes.
#[derive(Default)]
pub struct Functions {
    /// Synchronous scalar functions.
    pub scalar: Vec<Arc<ScalarUDF>>,
    /// Scalar functions that call out (async UDFs): the judges and the targets.
    pub calling: Vec<Arc<ScalarUDF>>,
    pub aggregate: Vec<Arc<AggregateUDF>>,
    pub window: Vec<Arc<WindowUDF>>,
    /// Table functions, by name.
    pub table: Vec<(&'static str, Arc<dyn TableFunctionImpl>)>,
}

/// Reads an environment variable, treating empty as unset.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as an [`EnvLookup`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Peak resident memory of this process, for tests that bound a kernel's memory (under
/// nextest each test runs in a process of its own). `None` where /proc is missing.
#[cfg(test)]
pub(crate) fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}
