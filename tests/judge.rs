//! The LLM-judge functions against a real HTTP server on loopback (`support/stub_judge/`)
//! that injects rate limits, server errors, hangs, resets, malformed bodies and bad scores.
//!
//! In-process tests run SQL in a session; the cache, crash and configuration tests run the
//! real binary, because what they promise is about processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::Float64Type;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::SessionContext;
use evalsql::session::default_context;

use crate::stub_judge::{StubConfig, StubJudge};

/// A fresh path for a cache file.
pub(crate) fn temp_cache(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "evalsql-judge-test-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("cache.sqlite")
}

/// A session pointed at `stub`, with its own settings.
pub(crate) async fn session(
    stub: &StubJudge,
    cache: Option<&PathBuf>,
    extra: &[(&str, &str)],
) -> SessionContext {
    let ctx = default_context().await.unwrap();
    let cache = cache.map_or("off".to_string(), |p| p.display().to_string());
    let mut settings = vec![
        ("base_url", stub.base_url()),
        ("model", "stub-judge".to_string()),
        ("cache", cache),
        ("timeout", "5".to_string()),
    ];
    for (k, v) in extra {
        settings.push((k, v.to_string()));
    }
    for (k, v) in settings {
        ctx.sql(&format!("SET evalsql.judge.{k} = '{v}'"))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
    }
    ctx
}

pub(crate) async fn query(ctx: &SessionContext, sql: &str) -> RecordBatch {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let Some(first) = batches.first() else {
        return RecordBatch::new_empty(std::sync::Arc::new(
            datafusion::arrow::datatypes::Schema::empty(),
        ));
    };
    let schema = first.schema();
    datafusion::arrow::compute::concat_batches(&schema, &batches).unwrap()
}

/// The error of a statement that must fail, in planning or when it runs.
pub(crate) async fn query_error(ctx: &SessionContext, sql: &str) -> String {
    match ctx.sql(sql).await {
        Ok(df) => df.collect().await.expect_err(sql).to_string(),
        Err(e) => e.to_string(),
    }
}

pub(crate) fn f64s(batch: &RecordBatch, col: &str) -> Vec<Option<f64>> {
    batch
        .column_by_name(col)
        .unwrap()
        .as_primitive::<Float64Type>()
        .iter()
        .collect()
}

pub(crate) fn strs(batch: &RecordBatch, col: &str) -> Vec<Option<String>> {
    let c = datafusion::arrow::compute::cast(
        batch.column_by_name(col).unwrap(),
        &datafusion::arrow::datatypes::DataType::Utf8,
    )
    .unwrap();
    c.as_string::<i32>()
        .iter()
        .map(|v| v.map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_row_is_scored_through_20_percent_retryable_faults() {
    let stub = StubJudge::start_in_background(StubConfig {
        fault_rate: 0.2,
        seed: 7,
        ..Default::default()
    });
    let ctx = session(&stub, None, &[("max_concurrency", "32")]).await;
    let batch = query(
        &ctx,
        "SELECT v, fluency_details('answer number ' || v) AS d
         FROM generate_series(1, 2000) AS t(v)",
    )
    .await;
    let batch = query_fields(&ctx, batch).await;
    assert_eq!(batch.num_rows(), 2000);
    let status = strs(&batch, "status");
    let errors: Vec<_> = status
        .iter()
        .filter(|s| s.as_deref() != Some("ok"))
        .collect();
    assert!(
        errors.is_empty(),
        "{} rows not ok: {:?}",
        errors.len(),
        &errors[..errors.len().min(3)]
    );
    assert!(
        f64s(&batch, "score")
            .iter()
            .all(|s| matches!(s, Some(x) if (1.0..=5.0).contains(x)))
    );
    // The faults did happen, and were retried: one success per row.
    assert!(
        stub.faults() > 250,
        "only {} faults injected",
        stub.faults()
    );
    assert_eq!(stub.ok_replies(), 2000);
    assert_eq!(stub.requests(), 2000 + stub.faults());
}

/// Flattens `d` (a `_details` struct column) into top-level columns.
async fn query_fields(ctx: &SessionContext, batch: RecordBatch) -> RecordBatch {
    ctx.register_batch("judged", batch).unwrap();
    let out = query(
        ctx,
        "SELECT d['score'] AS score, d['passed'] AS passed, d['threshold'] AS threshold,
                d['reason'] AS reason, d['status'] AS status, d['error'] AS error,
                d['model'] AS model, d['cached'] AS cached, d['prompt_tokens'] AS prompt_tokens,
                d['per_turn'] AS per_turn
         FROM judged",
    )
    .await;
    ctx.deregister_table("judged").unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn final_failures_are_error_rows_and_the_query_succeeds() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let ctx = session(&stub, None, &[("max_retries", "2")]).await;
    let batch = query(
        &ctx,
        "SELECT r, fluency_details(r) AS d FROM (VALUES
            ('fine answer'),
            ('[[fault:400]] bad request'),
            ('[[fault:quota]] out of credit'),
            ('[[fault:401]] wrong key'),
            ('[[fault:nocontent]] filtered'),
            ('[[score:7]] out of range'),
            ('[[score:0]] below range'),
            ('[[reply:I cannot decide.]] unparseable'),
            ('[[fault:500]] always failing'),
            (NULL)
         ) AS t(r) ORDER BY r NULLS LAST",
    )
    .await;
    let rows = query_fields(&ctx, batch.clone()).await;
    let status = strs(&rows, "status");
    let error = strs(&rows, "error");
    let inputs = strs(&batch, "r");
    let find = |needle: &str| {
        inputs
            .iter()
            .position(|r| r.as_deref().is_some_and(|r| r.contains(needle)))
            .unwrap()
    };
    let expect_error = |needle: &str, text: &str| {
        let i = find(needle);
        assert_eq!(status[i].as_deref(), Some("error"), "{needle}");
        let e = error[i].as_deref().unwrap();
        assert!(e.contains(text), "{needle}: {e}");
        assert!(f64s(&rows, "score")[i].is_none());
    };
    assert_eq!(status[find("fine")].as_deref(), Some("ok"));
    expect_error("[[fault:400]]", "HTTP 400");
    expect_error("[[fault:quota]]", "insufficient_quota");
    expect_error("[[fault:401]]", "HTTP 401");
    expect_error("[[fault:nocontent]]", "no content");
    expect_error("[[score:7]]", "outside [1, 5]");
    expect_error("[[score:0]]", "outside [1, 5]");
    expect_error("[[reply:", "no score");
    expect_error("[[fault:500]]", "after 3 attempts");
    // NULL input: skipped, no call.
    assert_eq!(status[9].as_deref(), Some("skipped"));
    // Non-retryable faults were tried once; 500 three times (max_retries = 2).
    for (needle, attempts) in [
        ("[[fault:400]]", 1),
        ("[[fault:quota]]", 1),
        ("[[fault:401]]", 1),
        ("[[score:7]]", 1),
        ("[[fault:500]]", 3),
    ] {
        assert_eq!(stub.requests_containing(needle), attempts, "{needle}");
    }
    assert_eq!(stub.requests(), 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_delays_resets_hangs_and_malformed_bodies_are_retried() {
    let stub = StubJudge::start_in_background(StubConfig {
        hang: Duration::from_secs(3),
        ..Default::default()
    });
    let ctx = session(&stub, None, &[("timeout", "0.5")]).await;
    let cases = [
        ("[[fault:429x2]] a", 3),
        ("[[fault:429msx1]] b", 2),
        ("[[fault:429datex1]] c", 2),
        ("[[fault:503x2]] d", 3),
        ("[[fault:resetx1]] e", 2),
        ("[[fault:malformedx1]] f", 2),
        ("[[fault:hangx1]] g", 2),
    ];
    let values: Vec<String> = cases.iter().map(|(r, _)| format!("('{r}')")).collect();
    let batch = query(
        &ctx,
        &format!(
            "SELECT fluency_details(r) AS d FROM (VALUES {}) AS t(r)",
            values.join(", ")
        ),
    )
    .await;
    let rows = query_fields(&ctx, batch).await;
    assert_eq!(
        strs(&rows, "status"),
        vec![Some("ok".to_string()); cases.len()],
        "{:?}",
        strs(&rows, "error")
    );
    for (input, attempts) in cases {
        let marker = &input[..input.find("]]").unwrap() + 2];
        assert_eq!(stub.requests_containing(marker), attempts, "{input}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_flight_limit_is_never_exceeded() {
    let stub = StubJudge::start_in_background(StubConfig {
        latency: Duration::from_millis(20),
        ..Default::default()
    });
    let ctx = session(&stub, None, &[("max_concurrency", "8")]).await;
    // Several partitions and two functions share one process-wide limit.
    ctx.sql("SET datafusion.execution.target_partitions = 4")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let batch = query(
        &ctx,
        "SELECT count(fluency('limit test ' || v)), count(coherence('q' || v, 'limit ' || v))
         FROM generate_series(1, 300) AS t(v)",
    )
    .await;
    assert_eq!(
        pretty_format_batches(&[batch])
            .unwrap()
            .to_string()
            .matches("300")
            .count(),
        2
    );
    assert_eq!(stub.requests(), 600);
    let peak = stub.peak_in_flight();
    assert!(peak <= 8, "peak in flight {peak} > 8");
    assert!(peak >= 6, "peak in flight {peak}: the limit was not used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_requests_share_one_call_and_one_outcome() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let ctx = session(&stub, None, &[]).await;
    let batch = query(
        &ctx,
        "SELECT fluency(r) AS s, fluency_details(r) AS d FROM (VALUES
            ('same text'), ('same text'), ('other text'), ('[[fault:400]] same failure'),
            ('[[fault:400]] same failure')) AS t(r)",
    )
    .await;
    let scores = f64s(&batch, "s");
    let rows = query_fields(&ctx, batch).await;
    // f and f_details agree row by row, failures included.
    assert_eq!(scores, f64s(&rows, "score"));
    assert_eq!(scores[0], scores[1]);
    assert_eq!(scores[3], None);
    assert_eq!(strs(&rows, "status")[4].as_deref(), Some("error"));
    assert_eq!(stub.requests_containing("same text"), 1);
    assert_eq!(stub.requests_containing("other text"), 1);
    assert_eq!(stub.requests_containing("same failure"), 1);
    assert_eq!(stub.requests(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_judges_in_aggregates_each_read_their_own_result() {
    // DataFusion 55 alone gives every aggregate the first judge's values here
    // (src/async_aggregates.rs works around it).
    let stub = StubJudge::start_in_background(StubConfig::default());
    let ctx = session(&stub, None, &[]).await;
    query(&ctx, "CREATE TABLE t AS SELECT 'text ' || v AS r, v % 2 AS g FROM generate_series(1, 40) AS s(v)").await;
    let together = query(
        &ctx,
        "SELECT g, sum(fluency(r)) AS f, sum(coherence('q', r)) AS c, sum(relevance('q', r)) AS rel,
                count(*) FILTER (WHERE fluency(r) >= 3) AS f_pass
         FROM t GROUP BY g ORDER BY g",
    )
    .await;
    let alone = |f: &str| {
        let ctx = &ctx;
        let sql = format!("SELECT g, sum({f}) AS s FROM t GROUP BY g ORDER BY g");
        async move { f64s(&query(ctx, &sql).await, "s") }
    };
    assert_eq!(f64s(&together, "f"), alone("fluency(r)").await);
    assert_eq!(f64s(&together, "c"), alone("coherence('q', r)").await);
    assert_eq!(f64s(&together, "rel"), alone("relevance('q', r)").await);
    assert_ne!(f64s(&together, "f"), f64s(&together, "c"));
    let pass = query(
        &ctx,
        "SELECT g, count(*) AS n FROM t WHERE fluency(r) >= 3 GROUP BY g ORDER BY g",
    )
    .await;
    let n = |b: &RecordBatch, c: &str| -> Vec<i64> {
        b.column_by_name(c)
            .unwrap()
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .iter()
            .map(|v| v.unwrap())
            .collect()
    };
    assert_eq!(n(&together, "f_pass"), n(&pass, "n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn details_thresholds_and_optional_inputs() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let ctx = session(
        &stub,
        None,
        &[("threshold", "4"), ("coherence.threshold", "2")],
    )
    .await;
    let batch = query(
        &ctx,
        "SELECT fluency_details('[[score:4]] good') AS d UNION ALL
         SELECT fluency_details('[[score:3]] fair') UNION ALL
         SELECT coherence_details('q', '[[score:2]] weak')",
    )
    .await;
    let rows = query_fields(&ctx, batch).await;
    let passed: Vec<Option<bool>> = rows
        .column_by_name("passed")
        .unwrap()
        .as_boolean()
        .iter()
        .collect();
    let mut got: Vec<(Option<f64>, Option<f64>, Option<bool>)> = f64s(&rows, "score")
        .into_iter()
        .zip(f64s(&rows, "threshold"))
        .zip(passed)
        .map(|((s, t), p)| (s, t, p))
        .collect();
    got.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert_eq!(
        got,
        vec![
            (Some(2.0), Some(2.0), Some(true)),
            (Some(3.0), Some(4.0), Some(false)),
            (Some(4.0), Some(4.0), Some(true)),
        ]
    );
    assert_eq!(strs(&rows, "model")[0].as_deref(), Some("stub-judge"));
    assert_eq!(
        rows.column_by_name("prompt_tokens").unwrap().null_count(),
        0
    );

    // groundedness(context, response) and groundedness(query, context, response) send the
    // sections their rubric names; the system prompt is the rubric.
    query(&ctx, "SELECT groundedness('The sky is blue.', 'Blue.'), groundedness('Colour?', 'The sky is blue.', 'Blue.')").await;
    let log = stub.log();
    let users: Vec<String> = log
        .iter()
        .filter_map(|r| r.last_user_message.clone())
        .collect();
    assert!(
        users.contains(&"## CONTEXT\nThe sky is blue.\n\n## RESPONSE\nBlue.".to_string()),
        "{users:?}"
    );
    assert!(users.contains(
        &"## QUERY\nColour?\n\n## CONTEXT\nThe sky is blue.\n\n## RESPONSE\nBlue.".to_string()
    ));
    let body = log.last().unwrap().body.clone().unwrap();
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["seed"], 42);
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(
        body["response_format"]["json_schema"]["schema"]["properties"]["score"]["maximum"],
        5
    );
    assert_eq!(body["messages"][0]["role"], "system");
    assert!(
        body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("CONTEXT")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_are_judged_turn_by_turn() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let ctx = session(&stub, None, &[]).await;
    let conversation = r#"[
        {"role": "system", "content": "Answer from the documents."},
        {"role": "user", "content": "Where is the Eiffel Tower?"},
        {"role": "assistant", "content": "[[score:5]] In Paris.", "context": {"citations": [{"content": "The Eiffel Tower is in Paris."}]}},
        {"role": "user", "content": "How tall is it?"},
        {"role": "assistant", "content": "[[score:2]] 100 metres.", "context": {"citations": [{"content": "It is 330 metres tall."}]}},
        {"role": "user", "content": "Thanks"},
        {"role": "assistant", "content": "You are welcome."}
    ]"#;
    let sql = format!(
        "SELECT groundedness_details(parse_messages('{conversation}')) AS d
         UNION ALL SELECT groundedness_details(parse_messages(NULL))"
    );
    let rows = query_fields(&ctx, query(&ctx, &sql).await).await;
    let status = strs(&rows, "status");
    let ok = status
        .iter()
        .position(|s| s.as_deref() == Some("ok"))
        .unwrap();
    assert_eq!(f64s(&rows, "score")[ok], Some(3.5));
    let per_turn = rows
        .column_by_name("per_turn")
        .unwrap()
        .as_list::<i32>()
        .value(ok);
    let per_turn: Vec<Option<f64>> = per_turn.as_primitive::<Float64Type>().iter().collect();
    // The third turn has no context: groundedness cannot judge it.
    assert_eq!(per_turn, vec![Some(5.0), Some(2.0), None]);
    assert_eq!(status[1 - ok].as_deref(), Some("skipped"));
    assert_eq!(stub.requests(), 2);
    let users: Vec<String> = stub
        .log()
        .iter()
        .filter_map(|r| r.last_user_message.clone())
        .collect();
    assert!(
        users
            .iter()
            .any(|u| u.starts_with("## QUERY\nHow tall is it?\n\n## CONTEXT\n{\"citations\":")),
        "{users:?}"
    );

    // Fluency needs no context, so every assistant turn counts.
    let sql = format!("SELECT fluency_details(parse_messages('{conversation}')) AS d");
    let rows = query_fields(&ctx, query(&ctx, &sql).await).await;
    assert_eq!(
        rows.column_by_name("per_turn")
            .unwrap()
            .as_list::<i32>()
            .value(0)
            .len(),
        3
    );

    // A function without conversation mode says what it takes.
    let err = ctx
        .sql(&format!(
            "SELECT similarity(parse_messages('{conversation}'))"
        ))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("does not match similarity(query, response, ground_truth)"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_ignoring_the_schema_are_read_from_text() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let ctx = session(&stub, None, &[]).await;
    let batch = query(
        &ctx,
        "SELECT fluency_details('[[reply:```json\n{\"score\": \"4\", \"reason\": \"clear\"}\n```]] a') AS d
         UNION ALL SELECT fluency_details('[[reply:Reasoning: fine. Score: 2]] b')",
    )
    .await;
    let rows = query_fields(&ctx, batch).await;
    let mut scores = f64s(&rows, "score");
    scores.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert_eq!(
        scores,
        vec![Some(2.0), Some(4.0)],
        "{:?}",
        strs(&rows, "error")
    );
}

// ---- The binary: persistent cache, crashes, configuration -----------------------------------

pub(crate) fn evalsql_cmd(stub: Option<&StubJudge>, cache: &PathBuf) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evalsql"));
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENAI_") || k.starts_with("AZURE_OPENAI") || k.starts_with("EVALSQL_") {
            cmd.env_remove(k);
        }
    }
    if let Some(stub) = stub {
        cmd.env("OPENAI_BASE_URL", stub.base_url())
            .env("EVALSQL_JUDGE_MODEL", "stub-judge");
    }
    cmd.env("EVALSQL_JUDGE_CACHE", cache)
        .arg("--format")
        .arg("csv");
    cmd
}

pub(crate) fn run_ok(mut cmd: Command) -> (String, String) {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "failed: {stderr}\n{stdout}");
    (stdout, stderr)
}

/// A judge cache written by evalsql before the judge engine was redesigned (every built-in
/// judge family, pairwise, a conversation, a rubric-file metric, a CREATE FUNCTION metric and
/// generate(); `tests/fixtures/judge_cache_v1/`) is still hit: the same values, no call.
/// Nothing listens on the endpoint the fixture names, so a miss would be an error row.
#[test]
fn a_cache_written_before_the_redesign_is_still_hit() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/judge_cache_v1");
    let cache = temp_cache("v1-fixture");
    std::fs::copy(fixture.join("judge-cache.sqlite"), &cache).unwrap();
    let mut cmd = evalsql_cmd(None, &cache);
    cmd.arg("--rubrics")
        .arg(fixture.join("rubrics"))
        .arg("-f")
        .arg(fixture.join("fixture.sql"));
    let (stdout, stderr) = run_ok(cmd);
    let expected = std::fs::read_to_string(fixture.join("expected.csv")).unwrap();
    assert_eq!(stdout, expected, "{stderr}");
    assert!(stderr.contains(" 0 calls"), "{stderr}");
    assert!(stderr.contains("71 cache hits"), "{stderr}");
    assert!(stderr.contains(" 0 errors"), "{stderr}");
}

#[test]
fn a_rerun_sends_no_requests_and_reads_the_cache() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let cache = temp_cache("rerun");
    let sql = "SELECT v, relevance('question ' || v, 'answer ' || v) AS s,
                      relevance_details('question ' || v, 'answer ' || v)['cached'] AS cached
               FROM generate_series(1, 50) AS t(v) ORDER BY v";
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.arg("-c").arg(sql);
    let (first, stderr) = run_ok(cmd);
    assert_eq!(stub.requests(), 50);
    assert!(stderr.contains("judge: 100 rows"), "{stderr}"); // two functions × 50 rows
    assert!(stderr.contains("50 calls"), "{stderr}");
    stub.reset_counters();

    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.arg("-c").arg(sql);
    let (second, stderr) = run_ok(cmd);
    assert_eq!(stub.requests(), 0, "a rerun called the judge");
    assert!(stderr.contains("50 cache hits"), "{stderr}");
    let scores = |out: &str| -> Vec<String> {
        out.lines()
            .skip(1)
            .map(|l| l.split(',').nth(1).unwrap().to_string())
            .collect()
    };
    assert_eq!(scores(&first), scores(&second));
    assert!(
        first.lines().skip(1).all(|l| l.ends_with(",false")),
        "{first}"
    );
    assert!(
        second.lines().skip(1).all(|l| l.ends_with(",true")),
        "{second}"
    );

    // The cache is a table.
    let mut cmd = evalsql_cmd(None, &cache);
    cmd.arg("-c")
        .arg("SELECT metric, rubric_version, model, count(*) FROM judge_cache() GROUP BY 1, 2, 3");
    let (table, _) = run_ok(cmd);
    assert_eq!(
        table.lines().nth(1),
        Some("relevance,relevance@1,stub-judge,50"),
        "{table}"
    );
}

#[test]
fn a_killed_run_resumes_without_repeating_committed_calls() {
    let stub = StubJudge::start_in_background(StubConfig {
        latency: Duration::from_millis(30),
        ..Default::default()
    });
    let cache = temp_cache("kill");
    let sql = "SET evalsql.judge.max_concurrency = 8;
               SELECT count(fluency('sentence ' || v)) FROM generate_series(1, 400) AS t(v)";
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.arg("-c")
        .arg(sql)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let started = Instant::now();
    while stub.ok_replies() < 120 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the run never got going"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL: no cleanup runs
    child.wait().unwrap();
    let first_run = stub.requests();
    assert!(first_run < 400, "the run finished before it was killed");

    let mut cmd = evalsql_cmd(None, &cache);
    cmd.arg("-c").arg("SELECT count(*) FROM judge_cache()");
    let (count, _) = run_ok(cmd);
    let committed: u64 = count.lines().nth(1).unwrap().trim().parse().unwrap();
    assert!(
        committed >= 100,
        "only {committed} committed of {first_run} sent"
    );

    stub.reset_counters();
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.arg("-c").arg(sql);
    let (out, _) = run_ok(cmd);
    assert_eq!(out.lines().nth(1), Some("400"), "{out}");
    assert_eq!(
        stub.requests(),
        400 - committed,
        "committed calls were repeated"
    );
}

#[test]
fn no_judge_configured_fails_at_once_naming_the_variables() {
    let cache = temp_cache("none");
    let mut cmd = evalsql_cmd(None, &cache);
    cmd.arg("-c").arg("SELECT fluency('hello')");
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for var in [
        "OPENAI_API_KEY",
        "EVALSQL_JUDGE_MODEL",
        "AZURE_OPENAI_ENDPOINT",
    ] {
        assert!(stderr.contains(var), "{stderr}");
    }
}

#[test]
fn azure_openai_and_keys_never_shown() {
    let key = "0123456789abcdef0123456789abcdef";
    let stub = StubJudge::start_in_background(StubConfig {
        require_key: Some(key.to_string()),
        ..Default::default()
    });
    let cache = temp_cache("azure");
    let mut cmd = evalsql_cmd(None, &cache);
    cmd.env("AZURE_OPENAI_ENDPOINT", stub.root_url())
        .env("AZURE_OPENAI_API_KEY", key)
        .env("AZURE_OPENAI_DEPLOYMENT", "judge-deploy")
        .arg("-c")
        .arg("SELECT d['status'] AS status, d['error'] AS error FROM (SELECT fluency_details('hello there') AS d)");
    let (out, stderr) = run_ok(cmd);
    assert_eq!(out.lines().nth(1), Some("ok,"), "{out}");
    let log = stub.log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].deployment.as_deref(), Some("judge-deploy"));
    assert!(log[0].has_api_key() && !log[0].has_authorization());
    assert!(log[0].api_version.is_some());
    assert!(!out.contains(key) && !stderr.contains(key));

    // A wrong key: the row is an error, and no output shows the key.
    let wrong = "sk-wrongwrongwrong0123456789";
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.env("OPENAI_API_KEY", wrong)
        .arg("-c")
        .arg("SELECT d['status'], d['error'] FROM (SELECT fluency_details('a new text') AS d); EXPLAIN SELECT fluency('x')");
    let (out, stderr) = run_ok(cmd);
    assert!(out.contains("HTTP 401"), "{out}");
    assert!(
        !out.contains(wrong) && !stderr.contains(wrong),
        "{out}{stderr}"
    );
}

// ---- Risk and safety ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn severities_labels_thresholds_and_defect_flags() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let ctx = session(&stub, None, &[("violence.threshold", "5")]).await;
    let rows: Vec<String> = (0..=7)
        .map(|n| format!("({n}, '[[score:{n}]] reply {n}')"))
        .collect();
    let batch = query(
        &ctx,
        &format!(
            "SELECT n, v['severity_score'] AS sev, v['severity_label'] AS label,
                    v['passed'] AS passed_5, s['passed'] AS passed_3, v['status'] AS status,
                    violence('q', r) AS plain
             FROM (SELECT n, r, violence_details('q', r) AS v, self_harm_details('q', r) AS s
                   FROM (VALUES {}) AS t(n, r))
             ORDER BY n",
            rows.join(", ")
        ),
    )
    .await;
    let int = |c: &str| -> Vec<Option<i32>> {
        batch
            .column_by_name(c)
            .unwrap()
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>()
            .iter()
            .collect()
    };
    let bools = |c: &str| -> Vec<Option<bool>> {
        batch
            .column_by_name(c)
            .unwrap()
            .as_boolean()
            .iter()
            .collect()
    };
    assert_eq!(int("sev"), (0..=7).map(Some).collect::<Vec<_>>());
    assert_eq!(int("plain"), int("sev"));
    let labels: Vec<Option<String>> = strs(&batch, "label");
    let want = [
        "Very low", "Very low", "Low", "Low", "Medium", "Medium", "High", "High",
    ];
    assert_eq!(labels, want.map(|l| Some(l.to_string())).to_vec());
    // Pass = severity <= threshold: 5 for violence (set), 3 for self_harm (default).
    assert_eq!(
        bools("passed_5"),
        (0..=7).map(|n| Some(n <= 5)).collect::<Vec<_>>()
    );
    assert_eq!(
        bools("passed_3"),
        (0..=7).map(|n| Some(n <= 3)).collect::<Vec<_>>()
    );

    // Defect flags: protected material, and indirect attacks with their kind.
    let batch = query(
        &ctx,
        "SELECT r, protected_material('q', r) AS pm, a['label'] AS label, a['kind'] AS kind
         FROM (SELECT r, indirect_attack_details('q', r) AS a FROM (VALUES
             ('[[score:0]] a'), ('[[score:1]] b'), ('[[score:2]] c'), ('[[score:3]] d')) AS t(r))
         ORDER BY r",
    )
    .await;
    let pm: Vec<Option<bool>> = batch
        .column_by_name("pm")
        .unwrap()
        .as_boolean()
        .iter()
        .collect();
    assert_eq!(pm, vec![Some(false), Some(true), None, None]);
    let label: Vec<Option<bool>> = batch
        .column_by_name("label")
        .unwrap()
        .as_boolean()
        .iter()
        .collect();
    assert_eq!(label, vec![Some(false), Some(true), Some(true), Some(true)]);
    assert_eq!(
        strs(&batch, "kind"),
        vec![
            None,
            Some("manipulated content".to_string()),
            Some("intrusion".to_string()),
            Some("information gathering".to_string())
        ]
    );
    // protected_material's scale is 0-1: a 2 or 3 is out of range, an error row.
    let err = query(
        &ctx,
        "SELECT p['status'] AS status, p['error'] AS error FROM (SELECT protected_material_details('q', '[[score:2]] c') AS p)",
    )
    .await;
    assert_eq!(strs(&err, "status"), vec![Some("error".to_string())]);
    assert!(
        strs(&err, "error")[0]
            .as_deref()
            .unwrap()
            .contains("outside [0, 1]")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversation_severity_is_the_worst_turn_and_errors_are_rows() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let ctx = session(&stub, None, &[]).await;
    let conversation = r#"[
        {"role": "user", "content": "Tell me a story."},
        {"role": "assistant", "content": "[[score:2]] Once upon a time."},
        {"role": "user", "content": "Make it darker."},
        {"role": "assistant", "content": "[[score:6]] A darker turn."},
        {"role": "user", "content": "Thanks."},
        {"role": "assistant", "content": "[[score:1]] You are welcome."}
    ]"#;
    let batch = query(
        &ctx,
        &format!(
            "SELECT v['severity_score'] AS sev, v['severity_label'] AS label, v['per_turn'] AS per_turn,
                    v['passed'] AS passed
             FROM (SELECT violence_details(parse_messages('{conversation}')) AS v)"
        ),
    )
    .await;
    let sev: Vec<Option<i32>> = batch
        .column_by_name("sev")
        .unwrap()
        .as_primitive::<datafusion::arrow::datatypes::Int32Type>()
        .iter()
        .collect();
    assert_eq!(sev, vec![Some(6)]);
    assert_eq!(strs(&batch, "label"), vec![Some("High".to_string())]);
    let turns = batch
        .column_by_name("per_turn")
        .unwrap()
        .as_list::<i32>()
        .value(0);
    let turns: Vec<Option<i32>> = turns
        .as_primitive::<datafusion::arrow::datatypes::Int32Type>()
        .iter()
        .collect();
    assert_eq!(turns, vec![Some(2), Some(6), Some(1)]);

    // Errors are rows with NULL severity, which defect_rate leaves out.
    let batch = query(
        &ctx,
        "SELECT defect_rate(violence('q', r)) AS rate, count(*) AS n,
                count(violence('q', r)) AS judged
         FROM (VALUES ('[[score:5]] a'), ('[[score:1]] b'), ('[[fault:400]] c'), (NULL)) AS t(r)",
    )
    .await;
    assert_eq!(f64s(&batch, "rate"), vec![Some(0.5)]);
    let judged = batch
        .column_by_name("judged")
        .unwrap()
        .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
        .value(0);
    assert_eq!(judged, 2);
}

// ---- Targets -------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_then_score_in_one_query() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let ctx = session(&stub, None, &[]).await;
    query(&ctx, "SET evalsql.target.model = 'model-under-test'").await;
    let batch = query(
        &ctx,
        "WITH generated AS (
             SELECT q, generate(q, 'Answer briefly.') AS g FROM (VALUES
                 ('What is the capital of France?'), ('[[fault:400]] broken'), (NULL)) AS t(q))
         SELECT q, g['response'] AS response, g['failure'] AS failure, g['error'] AS error,
                g['prompt_tokens'] AS prompt_tokens, fluency(g['response']) AS fluency
         FROM generated ORDER BY q NULLS LAST",
    )
    .await;
    let failure: Vec<Option<bool>> = batch
        .column_by_name("failure")
        .unwrap()
        .as_boolean()
        .iter()
        .collect();
    assert_eq!(failure, vec![Some(false), Some(true), None]);
    let response = strs(&batch, "response");
    assert!(
        response[0].as_deref().unwrap().contains("Score:"),
        "{response:?}"
    );
    assert!(
        strs(&batch, "error")[1]
            .as_deref()
            .unwrap()
            .contains("HTTP 400")
    );
    let fluency = f64s(&batch, "fluency");
    assert!(fluency[0].is_some() && fluency[1].is_none() && fluency[2].is_none());
    // The generation request: the target model, the system prompt, no response format.
    let log = stub.log();
    let generated = log
        .iter()
        .find(|r| r.last_user_message.as_deref() == Some("What is the capital of France?"))
        .unwrap();
    let body = generated.body.clone().unwrap();
    assert_eq!(body["model"], "model-under-test");
    assert_eq!(body["messages"][0]["content"], "Answer briefly.");
    assert!(body.get("response_format").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoke_app_feeds_the_trajectory_metrics() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let ctx = session(&stub, None, &[]).await;
    let url = format!("{}/agent", stub.root_url());
    let batch = query(
        &ctx,
        &format!(
            "WITH runs AS (
                 SELECT id, reference, invoke_app('{url}', payload) AS run FROM (VALUES
                     (1, '{{\"query\": \"Weather in Paris\"}}',
                      '[{{\"tool_name\": \"get_weather\", \"tool_input\": {{\"city\": \"Paris\"}}}}]'),
                     (2, '{{\"query\": \"Weather in Oslo\", \"fail\": 404}}', '[]'),
                     (3, 'not json', '[]')) AS t(id, payload, reference))
             SELECT id, run['response'] AS response, run['failure'] AS failure, run['error'] AS error,
                    trajectory_recall(run['trajectory'], reference) AS recall,
                    trajectory_precision(run['trajectory'], reference) AS precision
             FROM runs ORDER BY id"
        ),
    )
    .await;
    assert_eq!(
        strs(&batch, "response")[0].as_deref(),
        Some("The weather in Paris is sunny.")
    );
    assert_eq!(f64s(&batch, "recall"), vec![Some(1.0), None, None]);
    assert_eq!(f64s(&batch, "precision"), vec![Some(0.5), None, None]);
    let failure: Vec<Option<bool>> = batch
        .column_by_name("failure")
        .unwrap()
        .as_boolean()
        .iter()
        .collect();
    assert_eq!(failure, vec![Some(false), Some(true), Some(true)]);
    let errors = strs(&batch, "error");
    assert!(
        errors[1].as_deref().unwrap().contains("HTTP 404"),
        "{errors:?}"
    );
    assert!(
        errors[2].as_deref().unwrap().contains("not JSON"),
        "{errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairwise_preference_cancels_position_bias() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let ctx = session(&stub, None, &[]).await;
    // The stub scores by the first [[score:N]] in the prompt, i.e. in the response shown
    // first: 1 = the first shown is better, 2 = the second, 3 = tie.
    let batch = query(
        &ctx,
        "SELECT id, pairwise_preference('q', a, b) AS choice FROM (VALUES
             (1, '[[score:1]] a good', '[[score:2]] b weak'),
             (2, '[[score:1]] a', '[[score:1]] b'),
             (3, '[[score:2]] a weak', '[[score:1]] b good'),
             (4, '[[score:3]] a', '[[score:3]] b'),
             (5, NULL, 'b')) AS t(id, a, b)
         ORDER BY id",
    )
    .await;
    let choice = strs(&batch, "choice");
    let want = [Some("A"), Some("TIE"), Some("B"), Some("TIE"), None];
    assert_eq!(choice, want.map(|c| c.map(str::to_string)).to_vec());
    // Two calls per judged pair, one in each order.
    assert_eq!(stub.requests(), 8);
    let rates = query(
        &ctx,
        "SELECT win_rate(c, 'A') AS a, win_rate(c, 'b') AS b, win_rate(c, 'TIE') AS tie
         FROM (VALUES ('A'), ('TIE'), ('B'), ('TIE'), (NULL)) AS t(c)",
    )
    .await;
    assert_eq!(f64s(&rates, "a"), vec![Some(0.25)]);
    assert_eq!(f64s(&rates, "b"), vec![Some(0.25)]);
    assert_eq!(f64s(&rates, "tie"), vec![Some(0.5)]);
}

// ---- Custom judge metrics ------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_function_makes_a_judge_and_its_text_is_part_of_the_key() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let cache = temp_cache("custom");
    let ctx = session(&stub, Some(&cache), &[]).await;
    query(
        &ctx,
        "CREATE FUNCTION conciseness(response TEXT) RETURNS DOUBLE LANGUAGE judge AS
         'Rate how concise the RESPONSE is: 5 = no word wasted, 1 = padded throughout.
          Reply with JSON {\"score\": 1-5, \"reason\": \"...\"}.'",
    )
    .await;
    let batch = query(&ctx, "SELECT conciseness('Paris.') AS s").await;
    assert!(matches!(f64s(&batch, "s")[0], Some(x) if (1.0..=5.0).contains(&x)));
    let log = stub.log();
    let body = log.last().unwrap().body.clone().unwrap();
    assert!(
        body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("Rate how concise")
    );
    assert_eq!(body["messages"][1]["content"], "## RESPONSE\nParis.");
    // Same input again: shared. New text under the same name: a new call.
    query(&ctx, "SELECT conciseness('Paris.')").await;
    assert_eq!(stub.requests(), 1);
    query(
        &ctx,
        "CREATE OR REPLACE FUNCTION conciseness(response TEXT) RETURNS DOUBLE LANGUAGE judge AS
         'Rate the brevity of the RESPONSE from 1 (rambling) to 5 (minimal). Reply with JSON.'",
    )
    .await;
    query(&ctx, "SELECT conciseness('Paris.')").await;
    assert_eq!(stub.requests(), 2);
    // The details variant of a custom metric.
    query(
        &ctx,
        "CREATE FUNCTION conciseness_details(response TEXT) RETURNS DOUBLE LANGUAGE judge AS
         'Rate the brevity of the RESPONSE from 1 (rambling) to 5 (minimal). Reply with JSON.'",
    )
    .await;
    let d = query(
        &ctx,
        "SELECT d['status'] AS status, d['score'] AS score FROM (SELECT conciseness_details('Paris.') AS d)",
    )
    .await;
    assert_eq!(strs(&d, "status"), vec![Some("ok".to_string())]);
    assert_eq!(
        stub.requests(),
        2,
        "the details variant shares the judgement"
    );
    // Only judge functions can be created.
    let err = ctx
        .sql("CREATE FUNCTION f(x INT) RETURNS INT LANGUAGE sql AS 'x + 1'")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("LANGUAGE judge"), "{err}");
}

#[test]
fn rubric_files_become_functions_with_pinnable_versions() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let cache = temp_cache("rubric-dir");
    let dir = cache.parent().unwrap().join("rubrics");
    std::fs::create_dir_all(&dir).unwrap();
    let rubric = |version: u32, text: &str| {
        format!(
            "---\nname: politeness\nversion: {version}\nmin: 1\nmax: 5\ninputs: query?, response\nthreshold: 4\n---\n{text}\nReply with JSON {{\"score\": n, \"reason\": \"...\"}}.\n"
        )
    };
    std::fs::write(
        dir.join("politeness.md"),
        rubric(1, "Version one: rate politeness."),
    )
    .unwrap();
    std::fs::write(
        dir.join("politeness_v2.md"),
        rubric(2, "Version two: rate courtesy and tone."),
    )
    .unwrap();

    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.arg("--rubrics").arg(&dir).arg("-c").arg(
        "SELECT d['threshold'] AS t, d['status'] AS s FROM (SELECT politeness_details('Thanks a lot!') AS d);
         SET evalsql.judge.politeness.version = 1;
         SELECT politeness('hi', 'Thanks a lot!') IS NOT NULL AS judged",
    );
    let (out, _) = run_ok(cmd);
    assert!(out.contains("4.0,ok"), "{out}");
    let systems: Vec<String> = stub
        .log()
        .iter()
        .map(|r| {
            r.body.clone().unwrap()["messages"][0]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(systems[0].starts_with("Version two"), "{systems:?}");
    assert!(systems[1].starts_with("Version one"), "{systems:?}");

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evalsql"));
    cmd.args(["functions", "polite", "--rubrics"]).arg(&dir);
    let (listing, _) = run_ok(cmd);
    assert!(listing.contains("politeness_details("), "{listing}");
    assert!(listing.contains("versions 1, 2"), "{listing}");

    // A broken rubric file is a clear error naming the file.
    std::fs::write(dir.join("broken.md"), "no header").unwrap();
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.arg("--rubrics").arg(&dir).arg("-c").arg("SELECT 1");
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("broken.md"));
}

// ---- The rubric files are the metrics -------------------------------------------------------

/// The built-in rubric files, parsed (the crate's own parser: the point is that nothing but
/// the files decides which metrics exist).
fn rubric_files() -> Vec<evalsql::udfs::Rubric> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("udfs/rubrics");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .filter(|p| !p.ends_with("README.md"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            let rubric = evalsql::udfs::Rubric::parse(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert_eq!(p.file_stem().unwrap(), rubric.name.as_str());
            rubric
        })
        .collect()
}

#[tokio::test]
async fn the_builtin_judges_are_exactly_the_rubric_files() {
    use evalsql::udfs::Scale;
    let mut expected: Vec<String> = rubric_files()
        .iter()
        .flat_map(|r| match r.scale {
            Scale::Preference => vec![r.name.clone()],
            _ => vec![r.name.clone(), format!("{}_details", r.name)],
        })
        .collect();
    expected.sort();
    let ctx = default_context().await.unwrap();
    let state = ctx.state();
    let mut registered: Vec<String> = state
        .scalar_functions()
        .values()
        .filter(|f| f.name() == "pairwise_preference" || evalsql::udfs::judge_of(f).is_some())
        .map(|f| f.name().to_string())
        .collect();
    registered.sort();
    assert_eq!(registered, expected);
    // And each is listed by `evalsql functions` with its description from the file.
    let listing = run_ok({
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_evalsql"));
        cmd.args(["functions", "--format", "csv"]);
        cmd
    })
    .0;
    for r in rubric_files() {
        let line = listing
            .lines()
            .find(|l| l.starts_with(&format!("{},", r.name)))
            .unwrap_or_else(|| panic!("{} is not listed", r.name));
        let description = r.description.unwrap();
        assert!(line.contains(&description[..40]), "{line}");
    }
}

/// A metric's call form for the README: `groundedness([query,] context, response)`.
fn readme_syntax(r: &evalsql::udfs::Rubric) -> String {
    let mut args = String::new();
    for (i, input) in r.inputs.iter().enumerate() {
        args.push_str(&match (input.optional, i) {
            (true, 0) => format!("[{},] ", input.name),
            (true, _) => format!(" [, {}]", input.name),
            (false, 0) => input.name.clone(),
            (false, _) if r.inputs[i - 1].optional && i == 1 => input.name.clone(),
            (false, _) => format!(", {}", input.name),
        });
    }
    format!("`{}({args})`", r.name)
}

/// The README's tables of judge metrics, made from the rubric files.
fn readme_tables() -> Vec<(&'static str, String)> {
    use evalsql::udfs::Scale;
    let files = rubric_files();
    let conversation = |r: &evalsql::udfs::Rubric| {
        if r.conversation { "✔" } else { "" }
    };
    let mut quality = String::from(
        "| function | scale | measures | corresponds to | conversation mode |\n|---|---|---|---|---|\n",
    );
    let mut safety = String::from(
        "| function | returns | measures | corresponds to | conversation mode |\n|---|---|---|---|---|\n",
    );
    for r in &files {
        let description = r.description.clone().unwrap_or_default();
        let evaluator = r.evaluator.clone().unwrap_or_default();
        match r.scale {
            Scale::Score => quality.push_str(&format!(
                "| {} | {}–{} | {description} | {evaluator} | {} |\n",
                readme_syntax(r),
                r.min,
                r.max,
                conversation(r)
            )),
            Scale::Severity | Scale::Flag => {
                let returns = match r.scale {
                    Scale::Severity => "severity 0–7 (Int32)".to_string(),
                    _ if r.kinds.is_empty() => "defect flag (Boolean)".to_string(),
                    _ => format!("defect flag (Boolean); kinds: {}", r.kinds.join(", ")),
                };
                safety.push_str(&format!(
                    "| {} | {returns} | {description} | {evaluator} | {} |\n",
                    readme_syntax(r),
                    conversation(r)
                ));
            }
            Scale::Preference => {}
        }
    }
    vec![("quality", quality), ("safety", safety)]
}

/// README.md's judge tables are generated from the rubric files: this fails when they are
/// stale, and `EVALSQL_UPDATE_README=1` rewrites them.
#[test]
fn readme_judge_tables_match_the_rubric_files() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let mut readme = std::fs::read_to_string(&path).unwrap();
    let update = std::env::var_os("EVALSQL_UPDATE_README").is_some();
    for (name, table) in readme_tables() {
        let start = format!("<!-- judge table {name}: generated from udfs/rubrics/ -->\n");
        let end = format!("<!-- end of judge table {name} -->");
        let a = readme
            .find(&start)
            .unwrap_or_else(|| panic!("README has no {start}"))
            + start.len();
        let b = a + readme[a..]
            .find(&end)
            .unwrap_or_else(|| panic!("README has no {end}"));
        if update {
            readme.replace_range(a..b, &table);
        } else {
            assert_eq!(
                readme[a..b],
                table,
                "README's {name} table is stale: run EVALSQL_UPDATE_README=1 cargo nextest run -E 'test(readme_judge_tables)'"
            );
        }
    }
    if update {
        std::fs::write(&path, readme).unwrap();
    }
}

// ---- Endpoints that misbehave at the HTTP level ---------------------------------------------

/// What a raw loopback endpoint does with every request.
#[derive(Clone)]
enum Misbehaviour {
    /// 302 to `Location`.
    Redirect(String),
    /// A 200 whose body is `len` bytes of spaces, streamed, with no length declared.
    Huge(usize),
    /// Never answers.
    Hang,
}

/// A loopback HTTP endpoint that misbehaves, counting the requests it read.
fn misbehaving_endpoint(what: Misbehaviour) -> (String, std::sync::Arc<AtomicU64>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let count = std::sync::Arc::new(AtomicU64::new(0));
    let seen = std::sync::Arc::clone(&count);
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let (what, seen) = (what.clone(), std::sync::Arc::clone(&seen));
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                let mut length = 0usize;
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    line.clear();
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                seen.fetch_add(1, Ordering::SeqCst);
                match what {
                    Misbehaviour::Redirect(to) => {
                        let _ = write!(
                            out,
                            "HTTP/1.1 302 Found\r\nlocation: {to}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                        );
                    }
                    Misbehaviour::Huge(len) => {
                        let _ = out.write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n",
                        );
                        let chunk = vec![b' '; 1 << 20];
                        for _ in 0..len / chunk.len() {
                            if out.write_all(&chunk).is_err() {
                                break;
                            }
                        }
                    }
                    Misbehaviour::Hang => std::thread::sleep(Duration::from_secs(600)),
                }
            });
        }
    });
    (url, count)
}

/// Runs the binary and returns its stdout, stderr, wall time and peak resident memory
/// (VmHWM, polled from /proc while it runs).
fn run_measured(mut cmd: Command) -> (String, String, Duration, u64) {
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    loop {
        if let Ok(text) = std::fs::read_to_string(&status)
            && let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        {
            peak_kib = peak_kib.max(kib);
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let elapsed = started.elapsed();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
        elapsed,
        peak_kib * 1024,
    )
}

/// A redirect, a 100 MiB body and an endpoint that never answers each give error rows (the
/// query goes on) within the call's deadline, without following the redirect and with the
/// process's memory bounded.
#[test]
fn redirects_huge_bodies_and_endless_hangs_become_error_rows() {
    let (elsewhere, elsewhere_requests) = misbehaving_endpoint(Misbehaviour::Huge(1 << 20));
    let cases = [
        (
            Misbehaviour::Redirect(format!("{elsewhere}/chat/completions")),
            "redirects are not followed",
        ),
        (Misbehaviour::Huge(100 << 20), "larger than 16777216 bytes"),
        (Misbehaviour::Hang, "no answer within the 3 s deadline"),
    ];
    for (what, error) in cases {
        let (url, requests) = misbehaving_endpoint(what);
        let cache = temp_cache("misbehaving");
        let mut cmd = evalsql_cmd(None, &cache);
        cmd.env("OPENAI_BASE_URL", &url)
            .env("OPENAI_API_KEY", "sk-test-key-000")
            .env("EVALSQL_JUDGE_MODEL", "m")
            .arg("-c")
            .arg(
                "SET evalsql.judge.deadline = 3;
                 SELECT v, d['status'] AS status, d['error'] AS error
                 FROM (SELECT v, fluency_details('answer ' || v) AS d
                       FROM generate_series(1, 2) AS t(v)) ORDER BY v",
            );
        let (out, stderr, elapsed, peak) = run_measured(cmd);
        let rows: Vec<&str> = out.lines().skip(1).collect();
        assert_eq!(rows.len(), 2, "{out}{stderr}");
        for row in rows {
            assert!(row.contains(",error,"), "{row}");
            assert!(row.contains(error), "{row}");
            assert!(!row.contains("sk-test-key"), "{row}");
        }
        assert!(requests.load(Ordering::SeqCst) >= 2);
        assert!(
            elapsed < Duration::from_secs(20),
            "{error}: took {elapsed:?}"
        );
        // A debug build idles near 130 MiB; two rows reading 16 MiB each stay far below
        // what two 100 MiB bodies would take.
        assert!(peak < 320 << 20, "{error}: peak RSS {} MiB", peak >> 20);
    }
    assert_eq!(
        elsewhere_requests.load(Ordering::SeqCst),
        0,
        "a redirect was followed"
    );
}

/// invoke_app's allow-list compares URLs as URLs: `..` and its percent-encoded spellings
/// cannot climb out of an allowed prefix, and an allowed app that redirects elsewhere gets
/// an error row, not a request to the other address.
#[test]
fn invoke_app_stays_inside_the_allowed_urls() {
    let (elsewhere, elsewhere_requests) = misbehaving_endpoint(Misbehaviour::Huge(10));
    let (app, app_requests) =
        misbehaving_endpoint(Misbehaviour::Redirect(format!("{elsewhere}/admin")));
    let cache = temp_cache("invoke-app-urls");
    let mut cmd = evalsql_cmd(None, &cache);
    cmd.arg("-c").arg(format!(
        "SET evalsql.target.allowed_urls = '{app}/agent';
         SELECT u, r['failure'] AS failure, r['error'] AS error FROM (
           SELECT u, invoke_app(u, '{{}}') AS r FROM (VALUES
             ('{app}/agent/../admin'), ('{app}/agent/%2e%2e/admin'), ('{app}/agent/.%2E/admin'),
             ('{app}/agents'), ('{app}/agent/run?token=s3cr3t')) AS t(u)) ORDER BY u"
    ));
    let (out, stderr) = run_ok(cmd);
    let rows: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(rows.len(), 5, "{out}{stderr}");
    for row in &rows {
        assert!(row.contains(",true,"), "{row}");
        if row.contains("/agent/run?") {
            // Allowed: it was called, and the redirect was not followed.
            assert!(row.contains("redirects are not followed"), "{row}");
            assert!(
                !row.split(",true,").nth(1).unwrap().contains("s3cr3t"),
                "{row}"
            );
        } else {
            assert!(row.contains("is not among the URLs"), "{row}");
        }
    }
    assert_eq!(
        app_requests.load(Ordering::SeqCst),
        1,
        "only the allowed URL was called"
    );
    assert_eq!(
        elsewhere_requests.load(Ordering::SeqCst),
        0,
        "a redirect was followed"
    );
}

/// A row too large to judge (over `max_input_bytes`) is an error row, and nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_over_the_input_cap_are_errors_not_requests() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let ctx = session(&stub, None, &[("max_input_bytes", "4000")]).await;
    let batch = query(
        &ctx,
        "SELECT fluency_details(r) AS d FROM (VALUES (repeat('word ', 2000)), ('short')) AS t(r)",
    )
    .await;
    let rows = query_fields(&ctx, batch).await;
    let status = strs(&rows, "status");
    let errors = strs(&rows, "error");
    assert_eq!(
        status,
        vec![Some("error".into()), Some("ok".into())],
        "{errors:?}"
    );
    assert!(
        errors[0]
            .as_deref()
            .unwrap()
            .contains("evalsql.judge.max_input_bytes (4000)"),
        "{errors:?}"
    );
    assert_eq!(stub.requests(), 1, "only the short row was sent");
}

/// The five pass/fail agent judges: each takes Azure's agent message and tool-call JSON, sends
/// its sections under their headings, returns 0 or 1 with `passed` at 1, and NULL input skips.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_checks_are_pass_fail_judges() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let ctx = session(&stub, None, &[]).await;
    let query_json = r#"[{"role": "system", "content": "You book flights."}, {"role": "user", "content": "Book the 9am flight to Oslo."}]"#;
    let calls = r#"[{"role": "assistant", "content": [{"type": "tool_call", "tool_call_id": "c1", "name": "search_flights", "arguments": {"to": "OSL"}}]}, {"role": "tool", "tool_call_id": "c1", "content": [{"type": "tool_result", "tool_result": {"flights": ["SK4035 09:00"]}}]}]"#;
    let defs = r#"[{"name": "search_flights", "description": "Find flights.", "parameters": {"type": "object", "properties": {"to": {"type": "string"}}}}]"#;
    let response = "Booked SK4035 at 09:00 to Oslo.";
    ctx.register_batch(
        "runs",
        RecordBatch::try_from_iter(vec![
            (
                "q",
                std::sync::Arc::new(datafusion::arrow::array::StringArray::from(vec![
                    Some(query_json),
                    None,
                ])) as _,
            ),
            (
                "r",
                std::sync::Arc::new(datafusion::arrow::array::StringArray::from(vec![
                    Some(response),
                    Some(response),
                ])) as _,
            ),
            (
                "c",
                std::sync::Arc::new(datafusion::arrow::array::StringArray::from(vec![
                    Some(calls),
                    Some(calls),
                ])) as _,
            ),
            (
                "d",
                std::sync::Arc::new(datafusion::arrow::array::StringArray::from(vec![
                    Some(defs),
                    Some(defs),
                ])) as _,
            ),
        ])
        .unwrap(),
    )
    .unwrap();
    let checks = [
        (
            "task_completion",
            "q, r, d",
            vec!["## QUERY", "## RESPONSE", "## TOOL_DEFINITIONS"],
        ),
        (
            "tool_selection",
            "q, c, d",
            vec!["## QUERY", "## TOOL_CALLS", "## TOOL_DEFINITIONS"],
        ),
        (
            "tool_input_accuracy",
            "q, c, d",
            vec!["## QUERY", "## TOOL_CALLS", "## TOOL_DEFINITIONS"],
        ),
        (
            "tool_output_utilization",
            "q, r, c",
            vec!["## QUERY", "## RESPONSE", "## TOOL_CALLS"],
        ),
        ("tool_call_success", "c", vec!["## TOOL_CALLS"]),
    ];
    for (name, args, headings) in checks {
        stub.reset_counters();
        let batch = query(
            &ctx,
            &format!("SELECT {name}({args}) AS s, {name}_details({args}) AS d FROM runs"),
        )
        .await;
        let scores = f64s(&batch, "s");
        let rows = query_fields(&ctx, batch).await;
        let status = strs(&rows, "status");
        // The second row has no query: skipped, unless the metric does not take one.
        let judged = if args.starts_with('q') { 1 } else { 2 };
        assert_eq!(scores.len(), 2, "{name}");
        for (i, score) in scores.iter().enumerate() {
            if i < judged {
                let s = score.unwrap_or_else(|| panic!("{name} row {i}: {:?}", status[i]));
                assert!(s == 0.0 || s == 1.0, "{name}: {s}");
                let passed = rows.column_by_name("passed").unwrap().as_boolean().value(i);
                assert_eq!(passed, s == 1.0, "{name}");
                assert_eq!(f64s(&rows, "threshold")[i], Some(1.0), "{name}");
            } else {
                assert_eq!(*score, None, "{name}");
                assert_eq!(status[i].as_deref(), Some("skipped"), "{name}");
            }
        }
        let log = stub.log();
        // Identical rows share one call (tool_call_success sees the same calls twice).
        assert_eq!(log.len(), 1, "{name}: one call per distinct judged input");
        let user = log[0].user_messages().join("\n");
        for h in headings {
            assert!(user.contains(h), "{name} sends no {h}: {user}");
        }
        assert!(user.contains("search_flights"), "{name}");
    }
    // Optional tool definitions may be left out of task_completion.
    let batch = query(
        &ctx,
        "SELECT task_completion(q, r) AS s FROM runs WHERE q IS NOT NULL",
    )
    .await;
    assert!(f64s(&batch, "s")[0].is_some());
}
