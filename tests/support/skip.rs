//! Parts of tests that cannot run here (a missing client or emulator) say so: on stderr,
//! and in the file `EVALSQL_SKIP_LOG` names, which `scripts/test.sh` summarises after the
//! run so that no skipped part goes unnoticed behind a passing test.

use std::io::Write;

/// Records that `part` of a test was skipped, and why.
pub fn skipped(part: &str, reason: &str) {
    eprintln!("skipped {part}: {reason}");
    if let Some(path) = std::env::var_os("EVALSQL_SKIP_LOG") {
        let line = format!("{part}: {reason}\n");
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = file.write_all(line.as_bytes());
        }
    }
}
