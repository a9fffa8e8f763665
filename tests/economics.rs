//! Judge economics against the stub judge: what each row used and cost, the estimate before a
//! run (CLI and SQL), and per-query budgets that are never passed, concurrency included.
//!
//! The stub counts usage in OpenAI's o200k encoding and reports cached prompt tokens the way
//! OpenAI's prompt cache serves them, so the tests can hold the engine's counts to the
//! endpoint's.

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::Int64Type;
use serde_json::Value;

use crate::judge::{evalsql_cmd, f64s, query, run_ok, session, strs, temp_cache};
use crate::stub_judge::{StubConfig, StubJudge};

/// gpt-4o-mini's built-in prices, dollars per million tokens.
const INPUT: f64 = 0.15;
const CACHED_INPUT: f64 = 0.075;
const OUTPUT: f64 = 0.60;

fn i64s(batch: &datafusion::arrow::array::RecordBatch, col: &str) -> Vec<Option<i64>> {
    batch
        .column_by_name(col)
        .unwrap()
        .as_primitive::<Int64Type>()
        .iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_row_carries_its_tokens_cached_tokens_and_dollars() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("cost");
    // A rubric over 1,024 tokens: the stub's prompt cache serves its prefix once seen.
    let dir = cache.parent().unwrap().join("rubrics");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("formality.md"),
        format!(
            "---\nname: formality\nversion: 1\nmin: 1\nmax: 5\ninputs: response\n---\n{} \
             Reply with JSON {{\"score\": 1-5, \"reason\": \"...\"}}.",
            "Rate how formal the RESPONSE is, 5 = entirely formal. ".repeat(120)
        ),
    )
    .unwrap();
    let ctx = evalsql::session::new_context(
        &evalsql::session::SessionOptions {
            rubric_dirs: vec![dir],
            ..Default::default()
        },
        std::sync::Arc::new(evalsql::object_stores::EvalsqlObjectStoreRegistry::new(
            std::sync::Arc::new(
                datafusion_cli::object_storage::instrumented::InstrumentedObjectStoreRegistry::new(
                ),
            ),
        )),
    )
    .await
    .unwrap();
    for (k, v) in [
        ("base_url", stub.base_url()),
        ("model", "gpt-4o-mini".into()),
        ("cache", cache.display().to_string()),
    ] {
        query(&ctx, &format!("SET evalsql.judge.{k} = '{v}'")).await;
    }
    // One call first, so every later one finds the prefix cached.
    query(&ctx, "SELECT formality('Dear Sir.')").await;
    let batch = query(
        &ctx,
        "SELECT d['prompt_tokens'] AS p, d['cached_tokens'] AS c, d['completion_tokens'] AS o,
                d['cost_usd'] AS cost, d['status'] AS status
         FROM (SELECT formality_details('reply ' || v) AS d FROM generate_series(1, 8) t(v))",
    )
    .await;
    let (p, c, o, cost) = (
        i64s(&batch, "p"),
        i64s(&batch, "c"),
        i64s(&batch, "o"),
        f64s(&batch, "cost"),
    );
    for i in 0..8 {
        let (p, c, o) = (p[i].unwrap(), c[i].unwrap(), o[i].unwrap());
        assert!(
            p > 1024 && c >= 1024 && c <= p,
            "row {i}: {p} prompt, {c} cached"
        );
        let expected = ((p - c) as f64 * INPUT + c as f64 * CACHED_INPUT + o as f64 * OUTPUT) / 1e6;
        let got = cost[i].unwrap();
        assert!(
            (got - expected).abs() < 1e-12,
            "row {i}: {got} vs {expected}"
        );
    }
    assert_eq!(strs(&batch, "status"), vec![Some("ok".to_string()); 8]);
    let (stub_prompt, stub_cached) = stub.prompt_tokens();
    let engine_prompt: i64 = p.iter().flatten().sum();
    assert!(stub_cached > 0 && stub_prompt as i64 > engine_prompt);

    // A model without a price: tokens, and a NULL cost.
    let ctx = session(&stub, Some(&cache), &[]).await;
    let batch = query(
        &ctx,
        "SELECT d['cost_usd'] AS cost, d['prompt_tokens'] AS p, d['cached_tokens'] AS c
         FROM (SELECT fluency_details('Bonjour.') AS d)",
    )
    .await;
    assert_eq!(f64s(&batch, "cost"), vec![None]);
    assert!(i64s(&batch, "p")[0].unwrap() > 0);
    assert_eq!(i64s(&batch, "c"), vec![Some(0)]);

    // Prices set for the session hold for whatever model answers; cached rows keep the cost
    // of the call that made them, and the cache table has the columns.
    ctx.sql("SET evalsql.judge.price_input_per_mtok = 1000")
        .await
        .unwrap();
    ctx.sql("SET evalsql.judge.price_output_per_mtok = 2000")
        .await
        .unwrap();
    let batch = query(
        &ctx,
        "SELECT d['cost_usd'] AS cost, d['prompt_tokens'] AS p, d['completion_tokens'] AS o
         FROM (SELECT coherence_details('Why?', 'Because.') AS d)",
    )
    .await;
    let (p, o) = (i64s(&batch, "p")[0].unwrap(), i64s(&batch, "o")[0].unwrap());
    let cost = f64s(&batch, "cost")[0].unwrap();
    assert!((cost - (p as f64 * 1000.0 + o as f64 * 2000.0) / 1e6).abs() < 1e-9);
    let table = query(
        &ctx,
        &format!(
            "SELECT metric, model, sum(prompt_tokens) AS p, sum(cached_tokens) AS c,
                    sum(cost_usd) AS cost
             FROM judge_cache('{}') GROUP BY 1, 2 ORDER BY 1",
            cache.display()
        ),
    )
    .await;
    let metrics = strs(&table, "metric");
    assert_eq!(
        metrics,
        ["coherence", "fluency", "formality"].map(|m| Some(m.to_string()))
    );
    let costs = f64s(&table, "cost");
    assert!((costs[0].unwrap() - cost).abs() < 1e-9, "{costs:?}");
    assert_eq!(costs[1], None, "fluency had no price");
    assert!(i64s(&table, "c")[2].unwrap() >= 8 * 1024);
}

/// The job of the estimate tests: duplicates and NULL inputs, a pairwise judge (two calls a
/// row), and two functions sharing calls.
const JOB: &str = "SELECT v,
       relevance('question ' || (v % 40), 'answer ' || (v % 40)) AS r,
       relevance_details('question ' || (v % 40), 'answer ' || (v % 40))['score'] AS r2,
       fluency(CASE WHEN v % 10 = 0 THEN NULL ELSE 'text ' || v END) AS f,
       pairwise_preference('q ' || (v % 5), 'a', 'b') AS p
FROM generate_series(1, 100) AS t(v)";

fn estimate(stub: &StubJudge, cache: &std::path::Path) -> Vec<Value> {
    let mut cmd = evalsql_cmd(Some(stub), &cache.to_path_buf());
    cmd.env("EVALSQL_JUDGE_MODEL", "gpt-4o-mini")
        .args(["estimate", "--format", "json", "-c", JOB]);
    let (stdout, stderr) = run_ok(cmd);
    let value: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(
        !stderr.contains("judge:"),
        "a dry run reported calls: {stderr}"
    );
    value.as_array().unwrap().clone()
}

fn by_metric<'a>(estimates: &'a [Value], metric: &str) -> &'a Value {
    estimates
        .iter()
        .find(|e| e["metric"] == metric)
        .unwrap_or_else(|| panic!("no {metric} in {estimates:?}"))
}

#[test]
fn the_estimate_is_what_the_run_then_sends() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let cache = temp_cache("estimate");
    let estimates = estimate(&stub, &cache);
    assert_eq!(stub.requests(), 0, "the estimate sent a request");
    let relevance = by_metric(&estimates, "relevance");
    assert_eq!(relevance["rows"], 100);
    assert_eq!(relevance["calls"], 40);
    let fluency = by_metric(&estimates, "fluency");
    assert_eq!(
        (fluency["rows"].as_u64(), fluency["skipped"].as_u64()),
        (Some(100), Some(10))
    );
    assert_eq!(fluency["calls"], 90);
    assert_eq!(by_metric(&estimates, "pairwise_preference")["calls"], 10);
    let total = estimates.last().unwrap();
    assert_eq!(total["metric"], "total");
    assert_eq!(total["calls"], 140);
    assert_eq!(total["to_send"], 140);
    assert_eq!(total["cached"], 0);
    assert_eq!(total["tokenizer"], "o200k_base");
    for e in &estimates {
        let (calls, cached, to_send) = (
            e["calls"].as_u64().unwrap(),
            e["cached"].as_u64().unwrap(),
            e["to_send"].as_u64().unwrap(),
        );
        assert_eq!(calls, cached + to_send, "{e}");
    }
    let expected_cost = total["cost_usd"].as_f64().unwrap();
    assert!(expected_cost > 0.0);

    // The run: exactly the requests and prompt tokens estimated.
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.env("EVALSQL_JUDGE_MODEL", "gpt-4o-mini")
        .args(["-c", JOB]);
    let (_, stderr) = run_ok(cmd);
    assert_eq!(
        stub.requests(),
        total["to_send"].as_u64().unwrap(),
        "{stderr}"
    );
    assert_eq!(
        stub.prompt_tokens().0,
        total["prompt_tokens"].as_u64().unwrap()
    );
    // The summary line has the dollars.
    assert!(stderr.contains("; $0."), "{stderr}");

    // Estimated again: everything is cached, nothing to send.
    let again = estimate(&stub, &cache);
    let total = again.last().unwrap();
    assert_eq!(
        (total["cached"].as_u64(), total["to_send"].as_u64()),
        (Some(140), Some(0))
    );
    assert_eq!(total["cost_usd"].as_f64(), Some(0.0));

    // With 40 relevance judgements cached, a new job's completion tokens are their mean.
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.args([
        "-c",
        "SELECT avg(completion_tokens) AS mean FROM judge_cache() WHERE metric = 'relevance'",
    ]);
    let (mean, _) = run_ok(cmd);
    let mean: f64 = mean.lines().nth(1).unwrap().parse().unwrap();
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.env("EVALSQL_JUDGE_MODEL", "gpt-4o-mini").args([
        "estimate",
        "--format",
        "json",
        "-c",
        "SELECT relevance('another question ' || v, 'a') FROM generate_series(1, 5) t(v)",
    ]);
    let (stdout, _) = run_ok(cmd);
    let fresh: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    let relevance = by_metric(&fresh, "relevance");
    assert_eq!(relevance["to_send"], 5);
    assert_eq!(
        relevance["completion_tokens"].as_f64().unwrap(),
        5.0 * mean.ceil(),
        "{relevance}"
    );

    // The readable table names the encoding.
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.args(["estimate", "-c", JOB]);
    let (table, _) = run_ok(cmd);
    assert!(table.starts_with("metric"), "{table}");
    assert!(
        table.contains("no price"),
        "stub-judge has no price: {table}"
    );
    assert!(table.contains("approximate"), "{table}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_in_sql_sends_nothing_and_says_what_it_would_cost() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("dry-run");
    let ctx = session(&stub, Some(&cache), &[("model", "gpt-4o-mini")]).await;
    query(&ctx, "SELECT coherence('Why?', 'Because.')").await;
    assert_eq!(stub.requests(), 1);
    ctx.sql("SET evalsql.judge.dry_run = true").await.unwrap();
    let batch = query(
        &ctx,
        "SELECT d['status'] AS status, d['error'] AS error, d['cached'] AS cached,
                d['prompt_tokens'] AS p, d['completion_tokens'] AS o, d['cost_usd'] AS cost
         FROM (SELECT coherence_details(q, 'Because.') AS d
               FROM (VALUES ('Why?'), ('How?'), ('When?')) AS t(q))",
    )
    .await;
    assert_eq!(stub.requests(), 1, "a dry run sent a request");
    assert_eq!(strs(&batch, "status"), vec![Some("skipped".to_string()); 3]);
    assert_eq!(strs(&batch, "error"), vec![Some("dry run".to_string()); 3]);
    let cached = batch.column_by_name("cached").unwrap().as_boolean();
    assert_eq!(
        (0..3).map(|i| cached.value(i)).collect::<Vec<_>>(),
        [true, false, false]
    );
    let (p, cost) = (i64s(&batch, "p"), f64s(&batch, "cost"));
    assert_eq!(
        (p[0], cost[0]),
        (Some(0), Some(0.0)),
        "a cached call costs nothing"
    );
    assert!(p[1].unwrap() > 100 && cost[1].unwrap() > 0.0);
    assert!(i64s(&batch, "o")[1].unwrap() <= 512);
}

/// 100 distinct rows (`tag` keeps each part's calls apart from the others', which this
/// process remembers) at 32 calls in flight.
fn budget_job(tag: &str) -> String {
    format!(
        "SELECT v, d['status'] AS status, d['error'] AS error,
                d['prompt_tokens'] AS p, d['completion_tokens'] AS o, d['cost_usd'] AS cost
         FROM (SELECT v, coherence_details('{tag} question ' || v, 'answer ' || v) AS d
               FROM generate_series(1, 100) AS t(v))"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn budgets_are_never_passed_and_every_row_is_present() {
    let stub = StubJudge::start(StubConfig {
        latency: std::time::Duration::from_millis(20),
        ..StubConfig::default()
    })
    .await;
    let cache = temp_cache("budget");
    let base = [("model", "gpt-4o-mini"), ("max_concurrency", "32")];
    let run = |extra: Vec<(&'static str, &'static str)>| {
        let stub = &stub;
        let cache = &cache;
        async move {
            let mut settings: Vec<(&str, &str)> = base.to_vec();
            settings.extend(extra);
            let ctx = session(stub, Some(cache), &settings).await;
            query(&ctx, &budget_job("calls")).await
        }
    };

    // Calls.
    let batch = run(vec![("max_calls", "10")]).await;
    assert_eq!(batch.num_rows(), 100);
    assert_eq!(stub.requests(), 10);
    let statuses = strs(&batch, "status");
    let errors = strs(&batch, "error");
    assert_eq!(
        statuses
            .iter()
            .filter(|s| s.as_deref() == Some("ok"))
            .count(),
        10
    );
    let over: Vec<_> = errors.iter().flatten().collect();
    assert_eq!(over.len(), 90);
    assert!(
        over.iter()
            .all(|e| e.starts_with("budget exhausted") && e.contains("max_calls")),
        "{over:?}"
    );

    // A rerun with a larger budget continues from the cache: the 10 are free, 20 more sent.
    stub.reset_counters();
    let batch = run(vec![("max_calls", "20")]).await;
    assert_eq!(stub.requests(), 20);
    assert_eq!(
        strs(&batch, "status")
            .iter()
            .filter(|s| s.as_deref() == Some("ok"))
            .count(),
        30
    );

    // Tokens: what the endpoint reports stays within the budget.
    let cache_off = temp_cache("budget-tokens");
    stub.reset_counters();
    let ctx = session(
        &stub,
        Some(&cache_off),
        &[
            ("model", "gpt-4o-mini"),
            ("max_concurrency", "32"),
            ("max_tokens", "20000"),
        ],
    )
    .await;
    let batch = query(&ctx, &budget_job("tokens")).await;
    let used: i64 = i64s(&batch, "p").iter().flatten().sum::<i64>()
        + i64s(&batch, "o").iter().flatten().sum::<i64>();
    assert!(used <= 20_000, "{used} tokens");
    let sent = stub.requests();
    assert!(sent > 5 && sent < 100, "{sent} calls");
    assert!(
        strs(&batch, "error")
            .iter()
            .flatten()
            .all(|e| e.starts_with("budget exhausted: evalsql.judge.max_tokens"))
    );

    // Dollars, at the session's price.
    let cache_usd = temp_cache("budget-usd");
    stub.reset_counters();
    let ctx = session(
        &stub,
        Some(&cache_usd),
        &[
            ("model", "gpt-4o-mini"),
            ("max_concurrency", "32"),
            ("max_cost_usd", "0.002"),
        ],
    )
    .await;
    let batch = query(&ctx, &budget_job("dollars")).await;
    assert_eq!(batch.num_rows(), 100);
    let spent: f64 = f64s(&batch, "cost").iter().flatten().sum();
    assert!(spent <= 0.002, "spent ${spent}");
    let sent = stub.requests();
    assert!(sent > 5 && sent < 100, "{sent} calls");
    let skipped = strs(&batch, "status")
        .iter()
        .filter(|s| s.as_deref() == Some("skipped"))
        .count();
    assert_eq!(
        skipped as u64 + sent,
        100,
        "{:?} {:?}",
        strs(&batch, "status"),
        stub.log().iter().map(|r| r.status).collect::<Vec<_>>()
    );

    // A dollar budget needs a price.
    let ctx = session(&stub, None, &[("max_cost_usd", "1")]).await;
    let err = ctx
        .sql("SELECT fluency('x')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("max_cost_usd") && err.contains("evalsql.judge.price_input_per_mtok"),
        "{err}"
    );
}

#[test]
fn the_cli_budget_is_per_statement() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let cache = temp_cache("budget-cli");
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.args([
        "-c",
        "SET evalsql.judge.max_calls = 3;
         SELECT count(*) FILTER (WHERE fluency('a ' || v) IS NOT NULL) AS n
           FROM generate_series(1, 5) t(v);
         SELECT count(*) FILTER (WHERE fluency('b ' || v) IS NOT NULL) AS n
           FROM generate_series(1, 5) t(v);",
    ]);
    let (stdout, stderr) = run_ok(cmd);
    assert_eq!(stdout, "n\n3\nn\n3\n", "{stderr}");
    assert_eq!(stub.requests(), 6);
}

#[test]
fn an_estimate_calls_no_target_either() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let cache = temp_cache("estimate-generate");
    let job = "WITH g AS (SELECT v, generate('Say hello to ' || v) AS r
                          FROM generate_series(1, 3) AS t(v))
               SELECT v, fluency(r['response']) AS f FROM g";
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.env("EVALSQL_JUDGE_MODEL", "gpt-4o-mini")
        .args(["estimate", "--format", "json", "-c", job]);
    let (stdout, _) = run_ok(cmd);
    assert_eq!(
        stub.requests(),
        0,
        "the estimate called the model under test"
    );
    let estimates: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    let generate = by_metric(&estimates, "generate");
    assert_eq!(
        (generate["calls"].as_u64(), generate["to_send"].as_u64()),
        (Some(3), Some(3))
    );
    assert!(generate["prompt_tokens"].as_u64().unwrap() > 3 * 7);
    // Nothing generated yet: the judge has nothing to judge.
    let fluency = by_metric(&estimates, "fluency");
    assert_eq!(
        (fluency["rows"].as_u64(), fluency["skipped"].as_u64()),
        (Some(3), Some(3))
    );

    // After a real run the generations are cached, and the estimate judges them.
    let mut run = evalsql_cmd(Some(&stub), &cache);
    run.env("EVALSQL_JUDGE_MODEL", "gpt-4o-mini")
        .args(["-c", job]);
    run_ok(run);
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.env("EVALSQL_JUDGE_MODEL", "gpt-4o-mini")
        .args(["estimate", "--format", "json", "-c", job]);
    let (stdout, _) = run_ok(cmd);
    let estimates: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(by_metric(&estimates, "generate")["cached"], 3);
    assert_eq!(by_metric(&estimates, "fluency")["cached"], 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn pairwise_details_add_up_both_orders() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let ctx = session(&stub, None, &[("model", "gpt-4o-mini")]).await;
    let batch = query(
        &ctx,
        "SELECT d['choice'] AS choice, d['a_first'] AS a, d['b_first'] AS b, d['status'] AS status,
                d['prompt_tokens'] AS p, d['cost_usd'] AS cost,
                pairwise_preference('Why?', 'Because.', 'No idea.') AS plain
         FROM (SELECT pairwise_preference_details('Why?', 'Because.', 'No idea.') AS d)",
    )
    .await;
    assert_eq!(
        stub.requests(),
        2,
        "both orders, shared with the plain function"
    );
    assert_eq!(strs(&batch, "choice"), strs(&batch, "plain"));
    assert_eq!(strs(&batch, "status"), vec![Some("ok".to_string())]);
    let (a, b) = (strs(&batch, "a")[0].clone(), strs(&batch, "b")[0].clone());
    let expected = if a == b {
        a.clone()
    } else {
        Some("TIE".to_string())
    };
    assert_eq!(strs(&batch, "choice")[0], expected);
    assert_eq!(i64s(&batch, "p")[0].unwrap() as u64, stub.prompt_tokens().0);
    assert!(f64s(&batch, "cost")[0].unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn repeated_judging_sends_k_calls_a_row_and_reuses_earlier_samples() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("samples");
    let job = "SELECT d['score'] AS score, d['samples'] AS samples, d['spread'] AS spread,
                      d['status'] AS status
               FROM (SELECT fluency_details('sampled text ' || v) AS d
                     FROM generate_series(1, 10) AS t(v))";
    let run = |samples: &'static str| {
        let (stub, cache) = (&stub, &cache);
        async move {
            let ctx = session(stub, Some(cache), &[("samples", samples)]).await;
            query(&ctx, job).await
        }
    };
    let batch = run("3").await;
    assert_eq!(stub.requests(), 30, "10 rows x 3 samples");
    let lists = batch.column_by_name("samples").unwrap().as_list::<i32>();
    let (scores, spreads) = (f64s(&batch, "score"), f64s(&batch, "spread"));
    let mut varied = false;
    for row in 0..10 {
        let values = lists.value(row);
        let values: Vec<f64> = values
            .as_primitive::<datafusion::arrow::datatypes::Float64Type>()
            .iter()
            .flatten()
            .collect();
        assert_eq!(values.len(), 3);
        let mean = values.iter().sum::<f64>() / 3.0;
        assert!((scores[row].unwrap() - mean).abs() < 1e-12);
        let sd = (values.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 3.0).sqrt();
        assert!((spreads[row].unwrap() - sd).abs() < 1e-12);
        varied |= sd > 0.0;
    }
    assert!(varied, "the samples never differed");

    // A rerun pays nothing; five samples pay only for the two new ones; one sample is the
    // first sample's call (the plain judgement's cache entry).
    stub.reset_counters();
    run("3").await;
    assert_eq!(stub.requests(), 0);
    run("5").await;
    assert_eq!(stub.requests(), 20);
    stub.reset_counters();
    let ctx = session(&stub, Some(&cache), &[]).await;
    query(&ctx, job).await;
    assert_eq!(stub.requests(), 0);

    // Severities take the lower median of the samples.
    let ctx = session(&stub, None, &[("samples", "4")]).await;
    let batch = query(
        &ctx,
        "SELECT d['severity_score'] AS s, d['samples'] AS samples
         FROM (SELECT violence_details('q ' || v, 'r ' || v) AS d FROM generate_series(1, 6) t(v))",
    )
    .await;
    let lists = batch.column_by_name("samples").unwrap().as_list::<i32>();
    let severities = batch
        .column_by_name("s")
        .unwrap()
        .as_primitive::<datafusion::arrow::datatypes::Int32Type>();
    for row in 0..6 {
        let mut values: Vec<f64> = lists
            .value(row)
            .as_primitive::<datafusion::arrow::datatypes::Float64Type>()
            .iter()
            .flatten()
            .collect();
        values.sort_by(f64::total_cmp);
        assert_eq!(
            severities.value(row) as f64,
            values[1],
            "lower median of {values:?}"
        );
    }

    // Without a seed, samples would all be the same call: refused.
    let ctx = session(&stub, None, &[("samples", "2"), ("seed", "none")]).await;
    let err = ctx
        .sql("SELECT fluency('x')")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("evalsql.judge.samples = 2") && err.contains("seed"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_panel_judges_with_every_model_and_combines_by_its_rule() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("panel");
    let job = "SELECT d['score'] AS score, d['panel'] AS panel, d['status'] AS status,
                      d['error'] AS error
               FROM (SELECT coherence_details('q ' || v, 'a ' || v) AS d
                     FROM generate_series(1, 12) AS t(v))";
    let members =
        |batch: &datafusion::arrow::array::RecordBatch, row: usize| -> Vec<(String, Option<f64>)> {
            let list = batch.column_by_name("panel").unwrap().as_list::<i32>();
            let item = list.value(row);
            let item = item.as_struct();
            let models = item.column(0).as_string::<i32>();
            let scores = item
                .column(1)
                .as_primitive::<datafusion::arrow::datatypes::Float64Type>();
            (0..item.len())
                .map(|i| {
                    (
                        models.value(i).to_string(),
                        (!scores.is_null(i)).then(|| scores.value(i)),
                    )
                })
                .collect()
        };
    let panel = ("panel", "panel-a,panel-b,panel-c");
    let mut differed = false;
    for rule in ["mean", "median", "majority"] {
        stub.reset_counters();
        let ctx = session(&stub, Some(&cache), &[panel, ("panel_aggregate", rule)]).await;
        let batch = query(&ctx, job).await;
        if rule == "mean" {
            assert_eq!(stub.requests(), 36, "12 rows x 3 models");
        } else {
            assert_eq!(stub.requests(), 0, "the members' judgements are cached");
        }
        let scores = f64s(&batch, "score");
        for row in 0..12 {
            let m = members(&batch, row);
            assert_eq!(
                m.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
                ["panel-a", "panel-b", "panel-c"]
            );
            let mut v: Vec<f64> = m.iter().filter_map(|(_, s)| *s).collect();
            v.sort_by(f64::total_cmp);
            differed |= v[0] != v[2];
            let want = match rule {
                "mean" => v.iter().sum::<f64>() / 3.0,
                "median" => v[1],
                _ => {
                    // The most common score, ties to the lower.
                    let count = |x: f64| v.iter().filter(|y| **y == x).count();
                    *v.iter()
                        .max_by(|a, b| count(**a).cmp(&count(**b)).then(b.total_cmp(a)))
                        .unwrap()
                }
            };
            assert!(
                (scores[row].unwrap() - want).abs() < 1e-12,
                "{rule} of {v:?}"
            );
        }
    }
    assert!(differed, "the panel always agreed");

    // A member that is down makes the row an error, unless enough others answered.
    let down = ("panel", "panel-a,panel-b,panel-down");
    let ctx = session(&stub, Some(&cache), &[down, ("max_retries", "0")]).await;
    let batch = query(&ctx, job).await;
    assert!(
        strs(&batch, "status")
            .iter()
            .all(|s| s.as_deref() == Some("error"))
    );
    assert!(
        strs(&batch, "error")
            .iter()
            .flatten()
            .all(|e| e.starts_with("panel member panel-down:")),
        "{:?}",
        strs(&batch, "error")
    );
    let ctx = session(
        &stub,
        Some(&cache),
        &[down, ("max_retries", "0"), ("panel_min_ok", "2")],
    )
    .await;
    let batch = query(&ctx, job).await;
    assert!(
        strs(&batch, "status")
            .iter()
            .all(|s| s.as_deref() == Some("ok"))
    );
    let scores = f64s(&batch, "score");
    for row in 0..12 {
        let m = members(&batch, row);
        assert_eq!(m[2].1, None);
        assert!((scores[row].unwrap() - (m[0].1.unwrap() + m[1].1.unwrap()) / 2.0).abs() < 1e-12);
    }
}

#[test]
fn samples_and_panels_compose_with_the_estimate_and_the_run() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let cache = temp_cache("panel-samples");
    let job = "SET evalsql.judge.panel = 'panel-a,panel-b';
               SET evalsql.judge.samples = 2;
               SELECT v, coherence('q ' || v, 'a ' || v) AS c FROM generate_series(1, 5) t(v)";
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.args(["estimate", "--format", "json", "-c", job]);
    let (stdout, _) = run_ok(cmd);
    let estimates: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    let coherence = by_metric(&estimates, "coherence");
    assert_eq!(
        coherence["calls"], 20,
        "5 rows x 2 models x 2 samples: {coherence}"
    );
    assert_eq!(stub.requests(), 0);

    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.args(["-c", job]);
    let (out, stderr) = run_ok(cmd);
    assert_eq!(stub.requests(), 20, "{stderr}");
    assert_eq!(out.lines().count(), 6, "{out}");
    let mut cmd = evalsql_cmd(Some(&stub), &cache);
    cmd.args(["-c", job]);
    run_ok(cmd);
    assert_eq!(stub.requests(), 20, "a rerun called the judge");
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_rows_a_filter_keeps_are_judged() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let ctx = session(&stub, None, &[]).await;
    // The judge and a plain condition in one WHERE: the condition runs first.
    let batch = query(
        &ctx,
        "SELECT v FROM generate_series(1, 50) AS t(v)
         WHERE v <= 3 AND fluency('filtered ' || v) >= 1",
    )
    .await;
    assert_eq!(batch.num_rows(), 3);
    assert_eq!(stub.requests(), 3, "rows the filter drops were judged");
    // A filter over a subquery's judged column, with a plain condition beside it.
    stub.reset_counters();
    let batch = query(
        &ctx,
        "SELECT v, f FROM (SELECT v, coherence('q ' || v, 'a ' || v) AS f
                           FROM generate_series(1, 40) AS t(v))
         WHERE f IS NOT NULL AND v % 10 = 0",
    )
    .await;
    assert_eq!(batch.num_rows(), 4);
    assert_eq!(stub.requests(), 4);
}
