//! Fused judge calls (`evalsql.judge.fuse`) against the stub: one request per row for the
//! metrics of a statement, each metric's score the field of the answer named after it, usage
//! shares that add up to the call, its own cache entries, the missing-metric retry, budgets,
//! the dry run, batch mode and EXPLAIN.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::prelude::SessionContext;

use crate::judge::{evalsql_cmd, f64s, query, run_ok, session, strs, temp_cache};
use crate::stub_judge::{StubConfig, StubJudge};

const METRICS: [&str; 4] = ["coherence", "fluency", "groundedness", "relevance"];

/// Every metric's score and details over `n` rows of query, context and response (the
/// response of row 3 is `third`).
fn five_metric_sql(n: usize, third: &str) -> String {
    format!(
        "SELECT v,
                groundedness(q, c, r) AS g, relevance(q, r) AS rl,
                coherence(q, r) AS co, fluency(r) AS fl,
                groundedness_details(q, c, r) AS groundedness,
                relevance_details(q, r) AS relevance,
                coherence_details(q, r) AS coherence,
                fluency_details(r) AS fluency
         FROM (SELECT v, 'question ' || v AS q, 'context ' || v AS c,
                      CASE WHEN v = 3 THEN '{third}' ELSE 'answer ' || v END AS r
               FROM generate_series(1, {n}) AS t(v))
         ORDER BY v"
    )
}

fn plan_text(batch: &RecordBatch) -> String {
    strs(batch, "plan")
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("\n")
}

fn field_strs(batch: &RecordBatch, col: &str, field: &str) -> Vec<Option<String>> {
    let s = batch.column_by_name(col).unwrap().as_struct();
    let c = datafusion::arrow::compute::cast(
        s.column_by_name(field).unwrap(),
        &datafusion::arrow::datatypes::DataType::Utf8,
    )
    .unwrap();
    c.as_string::<i32>()
        .iter()
        .map(|v| v.map(str::to_string))
        .collect()
}

fn field_f64(batch: &RecordBatch, col: &str, field: &str) -> Vec<Option<f64>> {
    let s = batch.column_by_name(col).unwrap().as_struct();
    let c = datafusion::arrow::compute::cast(
        s.column_by_name(field).unwrap(),
        &datafusion::arrow::datatypes::DataType::Float64,
    )
    .unwrap();
    c.as_primitive::<datafusion::arrow::datatypes::Float64Type>()
        .iter()
        .collect()
}

fn field_i64(batch: &RecordBatch, col: &str, field: &str) -> Vec<Option<i64>> {
    let s = batch.column_by_name(col).unwrap().as_struct();
    s.column_by_name(field)
        .unwrap()
        .as_primitive::<Int64Type>()
        .iter()
        .collect()
}

fn fused_list(batch: &RecordBatch, col: &str, row: usize) -> Option<Vec<String>> {
    let s = batch.column_by_name(col).unwrap().as_struct();
    let list = s.column_by_name("fused").unwrap().as_list::<i32>();
    if list.is_null(row) {
        return None;
    }
    let values = list.value(row);
    Some(
        values
            .as_string::<i32>()
            .iter()
            .map(|v| v.unwrap().to_string())
            .collect(),
    )
}

async fn fused_session(
    stub: &StubJudge,
    cache: &std::path::Path,
    extra: &[(&str, &str)],
) -> SessionContext {
    let mut settings = vec![("fuse", "true"), ("model", "gpt-4o-mini")];
    settings.extend_from_slice(extra);
    session(stub, Some(&cache.to_path_buf()), &settings).await
}

#[tokio::test(flavor = "multi_thread")]
async fn four_metrics_over_n_rows_send_n_requests_and_a_rerun_sends_none() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("fused");
    let ctx = fused_session(&stub, &cache, &[]).await;
    let sql = five_metric_sql(6, "answer 3");
    let batch = query(&ctx, &sql).await;
    assert_eq!(batch.num_rows(), 6);
    assert_eq!(
        stub.requests(),
        6,
        "one request per row for the four metrics"
    );
    // Each score is the field of the answer named after its metric (the stub's reason
    // names the metric and the score it gave it).
    for (metric, plain) in [
        ("groundedness", "g"),
        ("relevance", "rl"),
        ("coherence", "co"),
        ("fluency", "fl"),
    ] {
        let scores = field_f64(&batch, metric, "score");
        assert_eq!(
            scores,
            f64s(&batch, plain),
            "{metric}: the score and its details agree"
        );
        let reasons = field_strs(&batch, metric, "reason");
        let statuses = field_strs(&batch, metric, "status");
        for row in 0..6 {
            assert_eq!(statuses[row].as_deref(), Some("ok"), "{metric} row {row}");
            let score = scores[row].unwrap();
            assert_eq!(
                reasons[row].as_deref(),
                Some(format!("stub judgement of {metric}: {score}").as_str()),
                "{metric} row {row}"
            );
            assert_eq!(fused_list(&batch, metric, row).unwrap(), METRICS);
        }
    }
    // Every request held the four rubrics, once each, and the row's inputs once.
    for record in stub.log() {
        let body = record.body.unwrap();
        let system = body["messages"][0]["content"].as_str().unwrap().to_string();
        for m in METRICS {
            assert_eq!(system.matches(&format!("=== RUBRIC {m}:")).count(), 1);
        }
        let user = record.last_user_message.unwrap();
        assert_eq!(user.matches("## RESPONSE").count(), 1, "{user}");
        assert_eq!(user.matches("## QUERY").count(), 1, "{user}");
    }
    // The shares add up to what the stub counted.
    let (prompt, _) = stub.prompt_tokens();
    let shared: i64 = METRICS
        .iter()
        .map(|m| {
            field_i64(&batch, m, "prompt_tokens")
                .iter()
                .map(|v| v.unwrap())
                .sum::<i64>()
        })
        .sum();
    assert_eq!(shared as u64, prompt);
    // Every metric carries some of each call: a longer rubric more of the prompt.
    for m in METRICS {
        assert!(
            field_i64(&batch, m, "prompt_tokens")
                .iter()
                .all(|v| v.unwrap() > 0)
        );
        assert!(
            field_i64(&batch, m, "completion_tokens")
                .iter()
                .all(|v| v.unwrap() > 0)
        );
        assert!(
            field_f64(&batch, m, "cost_usd")
                .iter()
                .all(|v| v.unwrap() > 0.0)
        );
    }

    // A rerun sends nothing and reads the same values.
    stub.reset_counters();
    let again = query(&ctx, &sql).await;
    assert_eq!(stub.requests(), 0);
    for plain in ["g", "rl", "co", "fl"] {
        assert_eq!(f64s(&again, plain), f64s(&batch, plain));
    }

    // A fused answer is never served to an unfused call: the same metric alone is judged.
    query(&ctx, "SET evalsql.judge.fuse = false").await;
    let single = query(
        &ctx,
        "SELECT fluency_details('answer ' || v) AS d FROM generate_series(1, 6) AS t(v)",
    )
    .await;
    assert_eq!(stub.requests(), 6);
    assert!(fused_list(&single, "d", 0).is_none());

    // Adding a metric makes a new group, judged anew.
    query(&ctx, "SET evalsql.judge.fuse = true").await;
    stub.reset_counters();
    query(
        &ctx,
        "SELECT fluency(r), coherence(q, r)
         FROM (SELECT 'question ' || v AS q, 'answer ' || v AS r FROM generate_series(1, 6) AS t(v))",
    )
    .await;
    assert_eq!(stub.requests(), 6);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_metric_is_asked_again_whole_then_only_that_metric_errors() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("fused-missing");
    let ctx = fused_session(&stub, &cache, &[("max_retries", "2")]).await;
    let batch = query(&ctx, &five_metric_sql(5, "answer [[omit:fluency]]")).await;
    assert_eq!(batch.num_rows(), 5);
    // Four rows answered at once; row 3 three times (the first answer and two retries).
    assert_eq!(stub.requests(), 4 + 3);
    let status = field_strs(&batch, "fluency", "status");
    let error = field_strs(&batch, "fluency", "error");
    for row in 0..5 {
        if row == 2 {
            assert_eq!(status[row].as_deref(), Some("error"));
            assert!(
                error[row]
                    .as_deref()
                    .unwrap()
                    .contains("the answer has no fluency"),
                "{error:?}"
            );
            assert_eq!(f64s(&batch, "fl")[row], None);
        } else {
            assert_eq!(status[row].as_deref(), Some("ok"));
        }
    }
    // The other metrics keep the last answer.
    for m in ["groundedness", "relevance", "coherence"] {
        assert_eq!(
            field_strs(&batch, m, "status")[2].as_deref(),
            Some("ok"),
            "{m}"
        );
    }
}

/// An answer nobody can read fails every member of the row, and the members share what its
/// attempts cost rather than each carrying all of it.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreadable_answer_fails_every_member_and_they_share_its_cost() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("fused-unreadable");
    let ctx = fused_session(&stub, &cache, &[("max_retries", "1")]).await;
    let batch = query(&ctx, &five_metric_sql(3, "answer [[reply:no json here]]")).await;
    assert_eq!(batch.num_rows(), 3);
    // Rows 1 and 2 once; row 3 twice (the answer and one retry).
    assert_eq!(stub.requests(), 2 + 2);
    let mut prompt = 0;
    for m in METRICS {
        assert_eq!(
            field_strs(&batch, m, "status")[2].as_deref(),
            Some("error"),
            "{m}"
        );
        let error = field_strs(&batch, m, "error")[2].clone().unwrap();
        assert!(error.contains("unusable judge reply"), "{error}");
        prompt += field_i64(&batch, m, "prompt_tokens")
            .iter()
            .map(|p| p.unwrap())
            .sum::<i64>();
    }
    assert_eq!(
        prompt as u64,
        stub.prompt_tokens().0,
        "the shares add up to the calls"
    );
}

/// Calls are grouped by the input names of the rubric version each is judged with: an older
/// version the session pins, naming its input as another metric's, is not grouped with it.
#[tokio::test(flavor = "multi_thread")]
async fn grouping_follows_the_pinned_rubric_versions_inputs() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("fused-versions");
    let ctx = fused_session(&stub, &cache, &[]).await;
    for (v, input) in [(1, "response"), (2, "query")] {
        query(
            &ctx,
            &format!(
                "CREATE FUNCTION brevity({input} TEXT) RETURNS DOUBLE LANGUAGE judge AS \
                 '---\nname: brevity\nversion: {v}\nmin: 1\nmax: 5\ninputs: {input}\n---\n\
                 Rate how brief the {} is (v{v}).'",
                input.to_uppercase()
            ),
        )
        .await;
    }
    let sql = "SELECT brevity(q) AS b, fluency(r) AS f
               FROM (SELECT 'question ' || v AS q, 'answer ' || v AS r
                     FROM generate_series(1, 3) AS t(v))";
    let explain = |ctx: SessionContext| async move {
        plan_text(&query(&ctx, &format!("EXPLAIN FORMAT INDENT {sql}")).await)
    };
    // Version 2 takes the query, fluency the response: one group.
    let text = explain(ctx.clone()).await;
    assert!(text.contains("fused_judge[brevity,fluency]"), "{text}");
    // Version 1 names its input `response`, which fluency takes from another column.
    query(&ctx, "SET evalsql.judge.brevity.version = 1").await;
    let text = explain(ctx.clone()).await;
    assert!(!text.contains("fused_judge["), "{text}");
    let batch = query(&ctx, sql).await;
    assert!(f64s(&batch, "b").iter().all(Option::is_some));
    assert_eq!(stub.requests(), 6);
    let brevity_on_the_query = stub
        .log()
        .iter()
        .filter_map(|r| r.body.as_ref().map(|b| b.to_string()))
        .filter(|b| b.contains("(v1)") && b.contains("## RESPONSE\\nquestion "))
        .count();
    assert_eq!(brevity_on_the_query, 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_shows_the_group_and_aggregates_are_fused_too() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("fused-explain");
    let ctx = fused_session(&stub, &cache, &[]).await;
    let sql = "SELECT avg(groundedness(q, c, r)) AS g, avg(relevance(q, r)) AS rl,
                      avg(fluency(r)) AS fl
               FROM (SELECT 'question ' || v AS q, 'context ' || v AS c, 'answer ' || v AS r
                     FROM generate_series(1, 8) AS t(v))";
    let plan = query(&ctx, &format!("EXPLAIN FORMAT INDENT {sql}")).await;
    let text = plan_text(&plan);
    assert!(
        text.contains("fused_judge[groundedness,relevance,fluency]"),
        "{text}"
    );
    let batch = query(&ctx, sql).await;
    assert_eq!(stub.requests(), 8);
    assert!(f64s(&batch, "g")[0].is_some());
    // Calls over different inputs are not grouped: fluency of the query is its own call.
    let plan = query(
        &ctx,
        "EXPLAIN FORMAT INDENT SELECT fluency(q), relevance(q, r)
         FROM (SELECT 'a' AS q, 'b' AS r)",
    )
    .await;
    let text = plan_text(&plan);
    assert!(!text.contains("fused_judge"), "{text}");
    // Without fuse, nothing is grouped.
    query(&ctx, "SET evalsql.judge.fuse = false").await;
    let text = plan_text(&query(&ctx, &format!("EXPLAIN FORMAT INDENT {sql}")).await);
    assert!(!text.contains("fused_judge"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn budgets_and_the_dry_run_count_fused_calls() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("fused-budget");
    // A dry run sends nothing; each metric carries its share of the estimate.
    let ctx = fused_session(&stub, &cache, &[("dry_run", "true")]).await;
    let batch = query(&ctx, &five_metric_sql(4, "answer 3")).await;
    assert_eq!(stub.requests(), 0);
    for m in METRICS {
        assert!(
            field_strs(&batch, m, "error")
                .iter()
                .all(|e| e.as_deref() == Some("dry run"))
        );
        assert!(
            field_i64(&batch, m, "prompt_tokens")
                .iter()
                .all(|p| p.unwrap() > 0)
        );
    }
    // max_calls counts fused calls: three rows are judged (every metric), the rest are
    // present and not sent.
    let ctx = fused_session(&stub, &cache, &[("max_calls", "3")]).await;
    let batch = query(&ctx, &five_metric_sql(6, "answer 3")).await;
    assert_eq!(batch.num_rows(), 6);
    assert_eq!(stub.requests(), 3);
    for m in METRICS {
        let status = field_strs(&batch, m, "status");
        assert_eq!(
            status.iter().filter(|s| s.as_deref() == Some("ok")).count(),
            3,
            "{m}"
        );
    }
}

#[test]
fn batch_mode_sends_one_line_a_row_for_the_group() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let cache = temp_cache("fused-batch");
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.env("EVALSQL_JUDGE_MODEL", "gpt-4o-mini")
        .env("EVALSQL_JUDGE_MODE", "batch")
        .env("EVALSQL_JUDGE_FUSE", "true")
        .arg("-c")
        .arg(format!(
            "SET evalsql.judge.batch_poll_interval = 0.1; SELECT v, g['status'] AS gs, \
             f['status'] AS fs, array_to_string(g['fused'], '+') AS fused FROM (SELECT v, \
             groundedness_details(q, c, r) AS g, fluency_details(r) AS f FROM (SELECT v, \
             'question ' || v AS q, 'context ' || v AS c, 'answer ' || v AS r FROM \
             generate_series(1, 20) AS t(v))) ORDER BY v"
        ));
    let (out, _) = run_ok(cmd);
    assert_eq!(stub.batch_lines(), 20, "one batch line per row");
    assert_eq!(stub.requests_to("POST", "/chat/completions"), 0);
    assert_eq!(
        out.lines()
            .filter(|l| l.ends_with(",ok,ok,fluency+groundedness"))
            .count(),
        20,
        "{out}"
    );
    // Another process, online, finds every part in the cache: nothing is sent.
    stub.reset_counters();
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.env("EVALSQL_JUDGE_MODEL", "gpt-4o-mini")
        .env("EVALSQL_JUDGE_FUSE", "true")
        .arg("-c")
        .arg(
            "SELECT count(*) FILTER (WHERE g['cached'] AND f['cached']) AS cached FROM (SELECT \
             groundedness_details(q, c, r) AS g, fluency_details(r) AS f FROM (SELECT \
             'question ' || v AS q, 'context ' || v AS c, 'answer ' || v AS r FROM \
             generate_series(1, 20) AS t(v)))",
        );
    let (out, _) = run_ok(cmd);
    assert_eq!(stub.requests(), 0, "{out}");
    assert!(out.contains("\n20"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_rows_a_limit_keeps_are_judged() {
    // DataFusion pushes field reads (get_field) towards the scans with their argument: a
    // fused call read that way would run below the LIMIT, on rows the statement drops.
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("fused-limit");
    let ctx = fused_session(&stub, &cache, &[]).await;
    let sql = "SELECT count(g + r + c + f + s) AS n FROM (SELECT
        groundedness(query, context, response) AS g, relevance(query, response) AS r,
        coherence(query, response) AS c, fluency(response) AS f,
        similarity(query, response, ground_truth) AS s
    FROM (SELECT query || ' (#' || n || ')' AS query, context,
                 response || ' (variant ' || n || ')' AS response, ground_truth
          FROM 'data/qa.jsonl' CROSS JOIN generate_series(1, 4) AS t(n)
          ORDER BY id, model, n LIMIT 200))";
    let batch = query(&ctx, sql).await;
    assert_eq!(strs(&batch, "n"), [Some("200".to_string())]);
    assert_eq!(stub.requests(), 200);
}
