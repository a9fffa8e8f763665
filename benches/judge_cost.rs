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

/// The CSV output of `sql` run by the binary against `stub` with judge `model`, a fresh
/// cache (named by `tag`, removed after) and `env`; none of the judge settings of the
/// environment the bench runs in.
fn run_csv(stub: &StubJudge, model: &str, tag: &str, env: &[(&str, &Path)], sql: &str) -> String {
    let cache = std::env::temp_dir().join(format!(
        "evalsql-bench-cost-{}-{tag}.sqlite",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&cache);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evalsql"));
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENAI_") || k.starts_with("AZURE_OPENAI") || k.starts_with("EVALSQL_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .current_dir(root())
        .env("OPENAI_BASE_URL", stub.base_url())
        .env("EVALSQL_JUDGE_MODEL", model)
        .env("EVALSQL_JUDGE_CACHE", &cache)
        .args(["--format", "csv", "-c", sql])
        .output()
        .expect("run evalsql");
    let _ = std::fs::remove_file(&cache);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Runs `call` over the data; rows and the summed cost.
fn run(stub: &StubJudge, call: &str, batch: bool) -> (usize, f64) {
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
    let tag = call.split('_').next().unwrap_or("x");
    let text = run_csv(stub, MODEL, tag, &[], &sql);
    let lines: Vec<&str> = text.lines().collect();
    (
        lines[1].parse().expect("rows"),
        lines[3].parse().expect("cost"),
    )
}

/// The five-metric evaluation of the second table: 2,000 distinct rows made from
/// `data/qa.jsonl` (numbered variants of each, so no two rows share a call).
const FIVE_METRICS: &str = "SELECT count(g + r + c + f + s) AS n FROM (SELECT
        groundedness(query, context, response) AS g, relevance(query, response) AS r,
        coherence(query, response) AS c, fluency(response) AS f,
        similarity(query, response, ground_truth) AS s
    FROM (SELECT query || ' (#' || n || ')' AS query, context,
                 response || ' (variant ' || n || ')' AS response, ground_truth
          FROM 'data/qa.jsonl' CROSS JOIN generate_series(1, 34) AS t(n)
          ORDER BY id, model, n LIMIT 2000))";

/// The rows of [`FIVE_METRICS`].
const ROWS: &str = "FROM (SELECT query || ' (#' || n || ')' AS query, context,
                 response || ' (variant ' || n || ')' AS response, ground_truth
          FROM 'data/qa.jsonl' CROSS JOIN generate_series(1, 34) AS t(n)
          ORDER BY id, model, n LIMIT 2000)";

/// The calibration query of the fused cascade: the group's inputs, by name.
fn group_calibration() -> String {
    format!(
        "SELECT threshold FROM judge_calibrate('groundedness, relevance, coherence, fluency, \
         similarity', 'SELECT query, context, response, ground_truth {}', 200); ",
        ROWS.replace('\'', "''")
    )
}

/// The calibration queries of the cascade case: each metric's inputs over the same rows.
fn calibrations() -> String {
    let rows = ROWS.replace('\'', "''");
    [
        ("groundedness", "query, context, response"),
        ("relevance", "query, response"),
        ("coherence", "query, response"),
        ("fluency", "response"),
        ("similarity", "query, response, ground_truth"),
    ]
    .iter()
    .map(|(m, cols)| {
        format!("SELECT threshold FROM judge_calibrate('{m}', 'SELECT {cols} {rows}', 200); ")
    })
    .collect()
}

/// One case of the five-metric table: what the stub saw and the cache's dollars.
struct Case {
    /// The mean static prefix (first message) of a chat request, in tokens.
    prefix: u64,
    requests: u64,
    prompt: u64,
    cached: u64,
    dollars: f64,
}

/// Runs the five-metric evaluation with `settings` (SET statements) against `stub`.
fn five_metric_case(stub: &StubJudge, settings: &str, prices: &Path) -> Case {
    stub.reset_counters();
    let sql = format!(
        "SET evalsql.judge.batch_poll_interval = 0.05; {settings} {FIVE_METRICS}; \
         SELECT sum(cost_usd) AS cost FROM judge_cache()"
    );
    let tag = format!("five-{}", settings.len());
    let text = run_csv(stub, "gpt-4o", &tag, &[("EVALSQL_PRICES", prices)], &sql);
    let dollars = text
        .lines()
        .last()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no cost in {text}"));
    let (prompt, cached) = stub.prompt_tokens();
    let requests =
        stub.requests_to("POST", "/chat/completions") as u64 + stub.distinct_batch_lines();
    let chats = stub.requests_to("POST", "/chat/completions").max(1) as u64;
    Case {
        prefix: stub.prefix_tokens() / chats,
        requests,
        prompt,
        cached,
        dollars,
    }
}

/// The second table: a five-metric evaluation per metric online (today's default), fused
/// online, fused in batch mode, fused as a cascade in batch mode (gpt-4o-mini first, gpt-4o
/// for the rows it is unsure of, the stub's small model agreeing on 85 % of (row, metric)
/// pairs), and the cascade unfused.
fn five_metrics(stub: &StubJudge) {
    // The stub plays the small model under a `small-` name: it is priced as gpt-4o-mini.
    let prices =
        std::env::temp_dir().join(format!("evalsql-bench-prices-{}.json", std::process::id()));
    std::fs::write(
        &prices,
        r#"{"small-gpt-4o-mini": {"input": 0.15, "cached_input": 0.075, "output": 0.6}}"#,
    )
    .expect("prices file");
    let batch = "SET evalsql.judge.mode = 'batch';";
    let cases = [
        ("(a) per metric, online", String::new()),
        (
            "(b) fused, online",
            "SET evalsql.judge.fuse = true;".to_string(),
        ),
        (
            "(c) fused, batch",
            format!("SET evalsql.judge.fuse = true; {batch}"),
        ),
        (
            "(d) fused + cascade, batch",
            format!(
                "SET evalsql.judge.fuse = true; SET evalsql.judge.cascade = \
                 'small-gpt-4o-mini'; {batch} {}",
                group_calibration()
            ),
        ),
        (
            "(e) cascade, batch (not fused)",
            format!(
                "SET evalsql.judge.cascade = 'small-gpt-4o-mini'; {batch} {}",
                calibrations()
            ),
        ),
    ];
    println!();
    println!("| case | requests | prompt tokens | cached tokens | $ | share of (a) |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut first = None;
    let mut prefixes = Vec::new();
    for (name, settings) in cases {
        let c = five_metric_case(stub, &settings, &prices);
        prefixes.push((name, c.prefix));
        let base = *first.get_or_insert(c.dollars);
        println!(
            "| {name} | {} | {} | {} | {:.3} | {:.0}% |",
            c.requests,
            c.prompt,
            c.cached,
            c.dollars,
            100.0 * c.dollars / base
        );
    }
    let _ = std::fs::remove_file(&prices);
    for (name, prefix) in prefixes.iter().take(2) {
        println!("static prefix of a request, {name}: {prefix} tokens");
    }
}

fn main() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    if std::env::args().any(|a| a == "--five-metrics") {
        five_metrics(&stub);
        return;
    }
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
    five_metrics(&stub);
}
