//! Batch mode against the stub's Files and Batches APIs, through the real binary: the same
//! scores as online with no chat request, a job killed while waiting resumes its batches,
//! failed and expired lines go into later batches, and `batch_wait = false` returns at once.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::judge::{evalsql_cmd, run_ok, temp_cache};
use crate::stub_judge::{StubConfig, StubJudge};

/// Rows of `relevance` with their status, score and cost, for `n` distinct rows; `text`
/// is the response (SQL, `v` the row number).
fn job(n: usize, text: &str) -> String {
    format!(
        "SELECT v, d['status'] AS status, d['score'] AS score, d['cost_usd'] AS cost,
                d['error'] AS error
         FROM (SELECT v, relevance_details('question ' || v, {text}) AS d
               FROM generate_series(1, {n}) AS t(v))
         ORDER BY v"
    )
}

/// The CLI in batch mode against `stub`, polling every 0.1 s.
fn batch_cmd(
    stub: &StubJudge,
    cache: &PathBuf,
    settings: &str,
    sql: &str,
) -> std::process::Command {
    let mut cmd = evalsql_cmd(Some(stub), cache);
    cmd.env("EVALSQL_JUDGE_MODEL", "gpt-4o-mini")
        .env("EVALSQL_JUDGE_MODE", "batch")
        .arg("-c")
        .arg(format!(
            "SET evalsql.judge.batch_poll_interval = 0.1; {settings} {sql}"
        ));
    cmd
}

/// (status, score, cost, error) per row of a CSV result of [`job`].
fn rows(csv: &str) -> Vec<(String, String, String, String)> {
    csv.lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.splitn(5, ',').collect();
            (
                f[1].to_string(),
                f[2].to_string(),
                f[3].to_string(),
                f.get(4).unwrap_or(&"").to_string(),
            )
        })
        .collect()
}

#[test]
fn batch_mode_gives_the_online_scores_at_half_the_price_with_no_chat_request() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let sql = job(2000, "'answer ' || v");
    let mut online = evalsql_cmd(Some(&stub), &temp_cache("online"));
    online
        .env("EVALSQL_JUDGE_MODEL", "gpt-4o-mini")
        .arg("-c")
        .arg(&sql);
    let (online, _) = run_ok(online);
    assert_eq!(stub.requests_to("POST", "/chat/completions"), 2000);
    stub.reset_counters();

    let cache = temp_cache("batch");
    let (batch, stderr) = run_ok(batch_cmd(
        &stub,
        &cache,
        "SET evalsql.judge.batch_max_lines = 500;",
        &sql,
    ));
    assert_eq!(stub.requests_to("POST", "/chat/completions"), 0, "{stderr}");
    assert_eq!(stub.batches_created(), 4, "2,000 lines, 500 a file");
    assert_eq!(stub.requests_to("POST", "/files"), 4);
    let (online, batch) = (rows(&online), rows(&batch));
    assert_eq!(online.len(), 2000);
    for (i, (o, b)) in online.iter().zip(&batch).enumerate() {
        assert_eq!((&o.0, &o.1), (&b.0, &b.1), "row {i}");
        let (o_cost, b_cost): (f64, f64) = (o.2.parse().unwrap(), b.2.parse().unwrap());
        assert!(
            (b_cost - o_cost / 2.0).abs() < 1e-12,
            "row {i}: {o_cost} online, {b_cost} batch"
        );
    }

    // A rerun reads the cache; the batches are listed.
    stub.reset_counters();
    let (again, _) = run_ok(batch_cmd(&stub, &cache, "", &sql));
    assert_eq!(stub.requests(), 0);
    assert_eq!(rows(&again).len(), 2000);
    let mut list = evalsql_cmd(Some(&stub), &cache);
    list.arg("batches");
    let (listing, _) = run_ok(list);
    assert_eq!(listing.lines().count(), 5, "{listing}");
    assert!(
        listing
            .lines()
            .skip(1)
            .all(|l| l.contains("completed") && l.contains("relevance"))
    );
}

#[test]
fn a_job_killed_while_waiting_resumes_its_batches() {
    let stub = StubJudge::start_in_background(StubConfig {
        batch_delay: Duration::from_secs(3),
        ..StubConfig::default()
    });
    let cache = temp_cache("batch-kill");
    let sql = job(300, "'answer ' || v");
    let mut first = batch_cmd(&stub, &cache, "", &sql);
    let mut child = first
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while stub.batches_created() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no batch was made"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(stub.batches_created(), 1);

    let (out, stderr) = run_ok(batch_cmd(&stub, &cache, "", &sql));
    assert_eq!(
        stub.batches_created(),
        1,
        "the rerun made a new batch: {stderr}"
    );
    assert_eq!(stub.requests_to("POST", "/files"), 1);
    let rows = rows(&out);
    assert_eq!(rows.len(), 300);
    assert!(rows.iter().all(|r| r.0 == "ok"), "{out}");
}

#[test]
fn failed_lines_are_resubmitted_within_max_retries_then_error_rows() {
    let stub = StubJudge::start_in_background(StubConfig {
        batch_fail_share: 0.3,
        ..StubConfig::default()
    });
    let cache = temp_cache("batch-faults");
    // Rows 1-10 fail once (500), rows 11-20 always (500), rows 21-30 with a 400; the rest
    // fail their first submission at random (a 30% share).
    let text = "CASE WHEN v <= 10 THEN '[[fault:500x1]] answer ' || v
                     WHEN v <= 20 THEN '[[fault:500]] answer ' || v
                     WHEN v <= 30 THEN '[[fault:400]] answer ' || v
                     ELSE 'answer ' || v END";
    let (out, stderr) = run_ok(batch_cmd(
        &stub,
        &cache,
        "SET evalsql.judge.max_retries = 1;",
        &job(100, text),
    ));
    let rows = rows(&out);
    assert_eq!(rows.len(), 100);
    for (i, r) in rows.iter().enumerate() {
        let v = i + 1;
        match v {
            11..=20 => {
                assert_eq!(r.0, "error", "row {v}: {r:?}");
                assert!(
                    r.3.contains("HTTP 500 after 2 submission(s)"),
                    "row {v}: {r:?}"
                );
            }
            21..=30 => {
                assert_eq!(r.0, "error", "row {v}: {r:?}");
                assert!(
                    r.3.contains("HTTP 400 after 1 submission(s)"),
                    "row {v}: {r:?}"
                );
            }
            _ => assert_eq!(r.0, "ok", "row {v}: {r:?} {stderr}"),
        }
    }
    // One batch, then one for the lines that failed retryably; no third.
    assert_eq!(stub.batches_created(), 2, "{stderr}");
}

#[test]
fn an_expired_batch_resubmits_only_its_missing_lines() {
    let stub = StubJudge::start_in_background(StubConfig {
        batch_expire_first: 1,
        ..StubConfig::default()
    });
    let cache = temp_cache("batch-expired");
    let (out, stderr) = run_ok(batch_cmd(&stub, &cache, "", &job(100, "'answer ' || v")));
    assert!(rows(&out).iter().all(|r| r.0 == "ok"), "{out}\n{stderr}");
    assert_eq!(stub.batches_created(), 2);
    // 50 answered before the expiry, the other 50 in the second batch: none twice.
    assert_eq!(stub.batch_lines(), 100);
}

#[test]
fn without_waiting_rows_are_pending_and_a_later_run_picks_them_up() {
    let stub = StubJudge::start_in_background(StubConfig {
        batch_delay: Duration::from_millis(1500),
        ..StubConfig::default()
    });
    let cache = temp_cache("batch-nowait");
    let sql = job(20, "'answer ' || v");
    let started = Instant::now();
    let (out, _) = run_ok(batch_cmd(
        &stub,
        &cache,
        "SET evalsql.judge.batch_wait = false;",
        &sql,
    ));
    assert!(started.elapsed() < Duration::from_millis(1500));
    let pending = rows(&out);
    assert_eq!(pending.len(), 20);
    assert!(
        pending
            .iter()
            .all(|r| r.0 == "skipped" && r.3 == "pending in batch batch_stub_0"),
        "{out}"
    );
    // Still pending: asking again makes no new batch.
    let (out, _) = run_ok(batch_cmd(
        &stub,
        &cache,
        "SET evalsql.judge.batch_wait = false;",
        &sql,
    ));
    assert!(rows(&out).iter().all(|r| r.0 == "skipped"), "{out}");
    assert_eq!(stub.batches_created(), 1);

    std::thread::sleep(Duration::from_millis(1600));
    let (out, _) = run_ok(batch_cmd(
        &stub,
        &cache,
        "SET evalsql.judge.batch_wait = false;",
        &sql,
    ));
    assert!(rows(&out).iter().all(|r| r.0 == "ok"), "{out}");
    assert_eq!(stub.batches_created(), 1);
}

#[test]
fn a_batch_can_be_cancelled_from_the_command_line() {
    let stub = StubJudge::start_in_background(StubConfig {
        batch_delay: Duration::from_secs(600),
        ..StubConfig::default()
    });
    let cache = temp_cache("batch-cancel");
    run_ok(batch_cmd(
        &stub,
        &cache,
        "SET evalsql.judge.batch_wait = false;",
        &job(5, "'answer ' || v"),
    ));
    let mut list = evalsql_cmd(Some(&stub), &cache);
    list.arg("batches");
    let (listing, _) = run_ok(list);
    assert!(
        listing.contains("batch_stub_0") && listing.contains("in_progress"),
        "{listing}"
    );

    let mut cancel = evalsql_cmd(Some(&stub), &cache);
    cancel.args(["batches", "cancel", "batch_stub_0"]);
    let (said, _) = run_ok(cancel);
    assert_eq!(said.trim(), "batch_stub_0 cancelling");
    let mut list = evalsql_cmd(Some(&stub), &cache);
    list.arg("batches");
    let (listing, _) = run_ok(list);
    assert!(listing.contains("cancelling"), "{listing}");
}

#[test]
fn azure_global_batch_takes_the_deployment_and_the_api_key() {
    let key = "0123456789abcdef0123456789abcdef";
    let stub = StubJudge::start_in_background(StubConfig {
        require_key: Some(key.to_string()),
        ..StubConfig::default()
    });
    let cache = temp_cache("batch-azure");
    let mut cmd = evalsql_cmd(None, &cache);
    cmd.env("AZURE_OPENAI_ENDPOINT", stub.root_url())
        .env("AZURE_OPENAI_API_KEY", key)
        .env("AZURE_OPENAI_DEPLOYMENT", "judge-deploy")
        .env("EVALSQL_JUDGE_MODE", "batch")
        .arg("-c")
        .arg(format!(
            "SET evalsql.judge.batch_poll_interval = 0.1; {}",
            job(10, "'answer ' || v")
        ));
    let (out, stderr) = run_ok(cmd);
    assert!(rows(&out).iter().all(|r| r.0 == "ok"), "{out}\n{stderr}");
    assert!(!out.contains(key) && !stderr.contains(key));
    let log = stub.log();
    let files = log
        .iter()
        .find(|r| r.method == "POST" && r.path == "/openai/files")
        .expect("an upload to Azure's files API");
    assert!(files.api_version.is_some() && files.has_api_key() && !files.has_authorization());
    let create = log
        .iter()
        .find(|r| r.method == "POST" && r.path == "/openai/batches")
        .expect("a batch made through Azure's batches API");
    assert_eq!(
        create.body.as_ref().unwrap()["endpoint"],
        "/chat/completions"
    );
    assert_eq!(stub.requests_to("POST", "/chat/completions"), 0);
    // The lines named the deployment as their model (the stub answers with it).
    let mut cmd = evalsql_cmd(None, &cache);
    cmd.arg("-c")
        .arg("SELECT DISTINCT reply_model FROM judge_cache()");
    let (models, _) = run_ok(cmd);
    assert_eq!(models, "reply_model\njudge-deploy\n");
}

#[test]
fn a_budget_holds_in_batch_mode_too() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let cache = temp_cache("batch-budget");
    let (out, stderr) = run_ok(batch_cmd(
        &stub,
        &cache,
        "SET evalsql.judge.max_calls = 30;",
        &job(100, "'answer ' || v"),
    ));
    let rows = rows(&out);
    assert_eq!(rows.len(), 100);
    assert_eq!(rows.iter().filter(|r| r.0 == "ok").count(), 30, "{stderr}");
    assert!(
        rows.iter()
            .filter(|r| r.0 == "skipped")
            .all(|r| r.3.starts_with("budget exhausted: evalsql.judge.max_calls")),
        "{out}"
    );
    assert_eq!(stub.batch_lines(), 30);
}
