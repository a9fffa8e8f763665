//! What every evalsql function shares: reading string arguments in any Arrow encoding,
//! building results, signatures, documentation sections and error messages.

pub mod args;
pub mod docs;
pub mod excerpt;
pub mod interrupt;
pub(crate) mod pyjson;
pub mod recent;
pub mod signature;

pub use args::{
    BoolArg, CallRows, F64Arg, RefsArg, StrArg, argument_arrays, columnar_result, float64_rows,
    invoke_text_pair, invoke_text_refs, json_rows, json_values, prepare_args, rows_of, texts,
    truncate_for_error,
};

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
