//! The Python package (`python/`): its pytest suite, run with the virtualenv
//! `scripts/test.sh` builds (`EVALSQL_PYTHON`: datafusion-python 55 and evalsql from this
//! checkout). It checks the golden text metrics through `ctx.sql`, the command line's values
//! bit for bit, aggregates, windows, table functions, the DataFrame API, errors, and the
//! judges across the FFI boundary (faults, cache, budgets, Ctrl-C) against a stub judge.

use std::process::Command;

use crate::skip::skipped;

#[test]
fn the_python_package_passes_its_tests() {
    let Ok(python) = std::env::var("EVALSQL_PYTHON") else {
        skipped(
            "python::pytest",
            "no EVALSQL_PYTHON (scripts/test.sh builds the package into a virtualenv)",
        );
        return;
    };
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new(&python)
        .current_dir(root)
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "python/tests",
        ])
        .env("EVALSQL_BIN", env!("CARGO_BIN_EXE_evalsql"))
        // The checkout's python/ must not shadow the installed package.
        .env_remove("PYTHONPATH")
        .output()
        .expect("run pytest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "pytest failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(" passed"), "{stdout}");
    assert!(
        !stdout.contains("skipped"),
        "a Python test was skipped:\n{stdout}"
    );
}
