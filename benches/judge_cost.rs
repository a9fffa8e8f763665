//! What each built-in judge metric costs on `data/qa.jsonl`: prompt tokens per row, the
//! share of them that is a static prefix a provider's prompt cache can serve (the rubric,
//! sent first and byte-identical for every row), the share the endpoint reported cached,
//! and dollars per 1,000 rows online and in batch mode at gpt-4o-mini's built-in price.
//! `cargo bench --bench judge_cost` prints the README's table.
//!
//! The endpoint is the stub of `tests/support/stub_judge/`: it counts usage in o200k (as
//! OpenAI does for gpt-4o-mini) and reports cached tokens as OpenAI's prompt cache serves
//! them (prompts of 1,024 tokens or more, in 128-token steps). The numbers are counts, not
//! timings: the same in any build.

#[path = "../tests/support/stub_judge/mod.rs"]
mod stub_judge;

use std::path::{Path, PathBuf};
use std::process::Command;

use stub_judge::{StubConfig, StubJudge};

const MODEL: &str = "gpt-4o-mini";
/// The columns of `data/qa.jsonl` a rubric input can take.
const COLUMNS: [&str; 4] = ["query", "response", "context", "ground_truth"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every built-in rubric's name and its input list (`?` marks an optional one), from the
/// front matter of `udfs/rubrics/*.md`.
fn rubrics() -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(root().join("udfs/rubrics"))
        .expect("udfs/rubrics")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .filter(|p| !p.ends_with("README.md"))
        .collect();
    paths.sort();
    for path in paths {
        let text = std::fs::read_to_string(&path).expect("rubric");
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))
                .map(|v| v.trim().to_string())
        };
        if field("scale").as_deref() == Some("preference") {
            continue;
        }
        let (Some(name), Some(inputs)) = (field("name"), field("inputs")) else {
            continue;
        };
        let inputs = inputs.split(',').map(|i| i.trim().to_string()).collect();
        out.push((name, inputs));
    }
    out
}

/// The rubric's call over `data/qa.jsonl`, all optional inputs the data has included, or
/// `None` when it needs an input the data lacks.
fn call(name: &str, inputs: &[String]) -> Option<String> {
    let mut args = Vec::new();
    for input in inputs {
        let bare = input.trim_end_matches('?');
        if COLUMNS.contains(&bare) {
            args.push(bare.to_string());
        } else if !input.ends_with('?') {
            return None;
        }
    }
    Some(format!("{name}_details({})", args.join(", ")))
}

/// Runs `call` over the data; rows and the summed cost.
fn run(stub: &StubJudge, call: &str, batch: bool) -> (usize, f64) {
    let cache = std::env::temp_dir().join(format!(
        "evalsql-bench-cost-{}-{}.sqlite",
        std::process::id(),
        call.split('_').next().unwrap_or("x")
    ));
    let _ = std::fs::remove_file(&cache);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evalsql"));
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENAI_") || k.starts_with("AZURE_OPENAI") || k.starts_with("EVALSQL_") {
            cmd.env_remove(k);
        }
    }
    // Rows sharing a call (same inputs) each show its cost: the spend is the cache's.
    let sql = format!(
        "{}SELECT count(d) AS n FROM (SELECT {call} AS d FROM 'data/qa.jsonl');
         SELECT sum(cost_usd) AS cost FROM judge_cache()",
        if batch {
            "SET evalsql.judge.mode = 'batch'; SET evalsql.judge.batch_poll_interval = 0.05; "
        } else {
            ""
        }
    );
    let out = cmd
        .current_dir(root())
        .env("OPENAI_BASE_URL", stub.base_url())
        .env("EVALSQL_JUDGE_MODEL", MODEL)
        .env("EVALSQL_JUDGE_CACHE", &cache)
        .args(["--format", "csv", "-c", &sql])
        .output()
        .expect("run evalsql");
    let _ = std::fs::remove_file(&cache);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = text.lines().collect();
    (
        lines[1].parse().expect("rows"),
        lines[3].parse().expect("cost"),
    )
}

fn main() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    println!(
        "| metric | prompt tokens / row | static prefix | reported cached | $ / 1,000 rows online | $ / 1,000 rows batch |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, inputs) in rubrics() {
        let Some(call) = call(&name, &inputs) else {
            continue;
        };
        stub.reset_counters();
        let (rows, online) = run(&stub, &call, false);
        let (prompt, cached) = stub.prompt_tokens();
        let prefix = stub.prefix_tokens();
        let (_, batch) = run(&stub, &call, true);
        println!(
            "| {name} | {:.0} | {:.0}% | {:.0}% | {:.3} | {:.3} |",
            prompt as f64 / rows as f64,
            100.0 * prefix as f64 / prompt as f64,
            100.0 * cached as f64 / prompt as f64,
            online / rows as f64 * 1000.0,
            batch / rows as f64 * 1000.0,
        );
    }
}
