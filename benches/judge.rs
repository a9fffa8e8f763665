//! How close the judge engine gets to the ideal time of a rate-bound run:
//! `rows × latency ÷ in-flight limit`. `cargo bench --bench judge`.
//!
//! The endpoint is the stub of `tests/support/stub_judge/` on loopback with a fixed 50 ms
//! latency, so every millisecond above the ideal is the engine's (or the process's) own.
//! Two runs, as the speed issue defines them, cache off:
//! 1. in process: 5,000 distinct rows, `max_concurrency = 32`;
//! 2. through the CLI binary, process start included: 1,000 distinct rows.
//!
//! Then, for information, 5,000 rows through the CLI with a cache file, and the same query
//! again in a new process, answered from the cache.

#[path = "../tests/support/stub_judge/mod.rs"]
mod stub_judge;

use std::process::Command;
use std::time::{Duration, Instant};

use evalsql::session::default_context;
use stub_judge::{StubConfig, StubJudge};

const LATENCY: Duration = Duration::from_millis(50);
const LIMIT: usize = 32;

fn ideal(rows: usize) -> Duration {
    LATENCY * rows as u32 / LIMIT as u32
}

fn report(what: &str, rows: usize, took: Duration) {
    let ideal = ideal(rows);
    println!(
        "{what}: {rows} rows in {:.3} s; ideal {:.3} s; ratio {:.3} (target <= 1.15)",
        took.as_secs_f64(),
        ideal.as_secs_f64(),
        took.as_secs_f64() / ideal.as_secs_f64()
    );
}

async fn in_process(stub: &StubJudge, rows: usize, tag: &str) -> Duration {
    let ctx = default_context().await.expect("session");
    for (k, v) in [
        ("base_url", stub.base_url()),
        ("model", "bench-judge".to_string()),
        ("cache", "off".to_string()),
        ("max_concurrency", LIMIT.to_string()),
    ] {
        ctx.sql(&format!("SET evalsql.judge.{k} = '{v}'"))
            .await
            .expect("SET")
            .collect()
            .await
            .expect("SET");
    }
    let sql = format!(
        "SELECT count(fluency('{tag} bench row ' || v)) FROM generate_series(1, {rows}) AS t(v)"
    );
    let started = Instant::now();
    let batches = ctx
        .sql(&sql)
        .await
        .expect("plan")
        .collect()
        .await
        .expect("run");
    let took = started.elapsed();
    assert_eq!(batches[0].num_rows(), 1);
    took
}

fn main() {
    let stub = StubJudge::start_in_background(StubConfig {
        latency: LATENCY,
        ..Default::default()
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");

    // Warm-up: connections and lazy statics, not measured.
    runtime.block_on(in_process(&stub, 64, "warm-up"));

    let rows = 5_000;
    let before = stub.requests();
    let took = runtime.block_on(in_process(&stub, rows, "in-process"));
    assert_eq!(stub.requests() - before, rows as u64);
    assert!(stub.peak_in_flight() <= LIMIT);
    report("in-process, cache off", rows, took);

    let cli_rows = 1_000;
    let took = cli(&stub, cli_rows, "off", "cli");
    report("CLI, process start included, cache off", cli_rows, took);

    // With a cache file: the first process fills it, the second reads it.
    let dir = std::env::temp_dir().join(format!("evalsql-judge-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cache = dir.join("cache.sqlite").display().to_string();
    let filled = cli(&stub, rows, &cache, "cached");
    report("CLI, cache on (filling it)", rows, filled);
    let before = stub.requests();
    let reread = cli(&stub, rows, &cache, "cached");
    assert_eq!(stub.requests(), before, "the rerun called the judge");
    println!(
        "CLI rerun answered from the cache: {rows} rows in {:.3} s ({:.0} rows/s, no calls)",
        reread.as_secs_f64(),
        rows as f64 / reread.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `rows` distinct fluency calls through the binary; returns the wall time.
fn cli(stub: &StubJudge, rows: usize, cache: &str, tag: &str) -> Duration {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .env("OPENAI_BASE_URL", stub.base_url())
        .env("EVALSQL_JUDGE_MODEL", "bench-judge")
        .env("EVALSQL_JUDGE_CACHE", cache)
        .env_remove("OPENAI_API_KEY")
        .env_remove("AZURE_OPENAI_ENDPOINT")
        .args(["--format", "csv", "-c"])
        .arg(format!(
            "SET evalsql.judge.max_concurrency = {LIMIT};
             SELECT count(fluency('{tag} bench row ' || v)) FROM generate_series(1, {rows}) AS t(v)"
        ))
        .output()
        .expect("evalsql binary");
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}
