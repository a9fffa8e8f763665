//! Judge cascades against the stub, whose `small-...` model agrees with the main model on a
//! set share of rows and puts a confidence in its score token's log-probabilities (lower
//! where it disagrees, the two overlapping): the calibration step, the planning error
//! without it, the main model's requests, `_details.cascade`, a rerun, and the
//! sample-agreement confidence of an endpoint without log-probabilities.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::prelude::SessionContext;

use crate::judge::{f64s, query, query_error, session, strs, temp_cache};
use crate::stub_judge::{StubConfig, StubJudge};

const ROWS: &str = "SELECT 'answer ' || v AS r FROM generate_series(1, 400) AS t(v)";

async fn cascade_session(stub: &StubJudge, cache: &std::path::Path) -> SessionContext {
    cascade_session_with(stub, cache, &[]).await
}

/// A cascade session (gpt-4o, its small model the stub's) with `extra` settings.
async fn cascade_session_with(
    stub: &StubJudge,
    cache: &std::path::Path,
    extra: &[(&str, &str)],
) -> SessionContext {
    let mut settings = vec![("model", "gpt-4o"), ("cascade", "small-judge")];
    settings.extend_from_slice(extra);
    session(stub, Some(&cache.to_path_buf()), &settings).await
}

/// `SELECT * FROM judge_calibrate(metric, rows, n)`, the query quoted.
fn calibrate_sql(metric: &str, rows: &str, n: usize) -> String {
    format!(
        "SELECT * FROM judge_calibrate('{metric}', '{}', {n})",
        rows.replace('\'', "''")
    )
}

fn main_requests(stub: &StubJudge) -> usize {
    stub.log()
        .iter()
        .filter(|r| r.body.as_ref().is_some_and(|b| b["model"] == "gpt-4o"))
        .count()
}

fn small_requests(stub: &StubJudge) -> usize {
    stub.log()
        .iter()
        .filter(|r| r.body.as_ref().is_some_and(|b| b["model"] == "small-judge"))
        .count()
}

fn cascade_field(batch: &RecordBatch, field: &str) -> Vec<Option<String>> {
    cascade_field_of(batch, "d", field)
}

/// A field of `_details.cascade` in column `column`, as text.
fn cascade_field_of(batch: &RecordBatch, column: &str, field: &str) -> Vec<Option<String>> {
    let d = batch.column_by_name(column).unwrap().as_struct();
    let c = d.column_by_name("cascade").unwrap().as_struct();
    let column = datafusion::arrow::compute::cast(
        c.column_by_name(field).unwrap(),
        &datafusion::arrow::datatypes::DataType::Utf8,
    )
    .unwrap();
    column
        .as_string::<i32>()
        .iter()
        .map(|v| v.map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_calibrated_cascade_escalates_a_share_and_keeps_the_guarantee() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("cascade");
    let ctx = cascade_session(&stub, &cache).await;
    let job =
        format!("SELECT r, fluency(r) AS score, fluency_details(r) AS d FROM ({ROWS}) ORDER BY r");

    // Without a calibration the statement does not plan, and says which step is missing.
    let err = query_error(&ctx, &job).await;
    assert!(err.contains("judge_calibrate('fluency'"), "{err}");
    assert_eq!(stub.requests(), 0);

    // What planning can check, it does: an unknown metric does not plan.
    let err = ctx
        .sql("SELECT * FROM judge_calibrate('no_such_metric', 'SELECT 1', 10)")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no_such_metric is not a judge metric"),
        "{err}"
    );

    // Planning the calibration (EXPLAIN included) judges nothing and stores nothing.
    let calibrate = calibrate_sql("fluency", ROWS, 200);
    let plan = query(&ctx, &format!("EXPLAIN {calibrate}")).await;
    assert!(plan.num_rows() > 0);
    assert_eq!(stub.requests(), 0, "EXPLAIN sends nothing");
    let stored = query(&ctx, "SELECT metric FROM judge_cascades()").await;
    assert_eq!(stored.num_rows(), 0, "EXPLAIN stores no calibration");

    // The calibration: 200 sample rows judged by both models.
    let calibration = query(&ctx, &calibrate).await;
    assert_eq!(calibration.num_rows(), 1);
    assert_eq!(
        strs(&calibration, "small_model")[0].as_deref(),
        Some("small-judge")
    );
    let threshold = f64s(&calibration, "threshold")[0].expect("a threshold qualifies at 85%");
    let lower = f64s(&calibration, "lower_bound")[0].unwrap();
    assert!(lower >= 0.9, "the certified agreement: {lower}");
    assert_eq!(main_requests(&stub), 200);
    assert_eq!(small_requests(&stub), 200);
    let stored = query(&ctx, "SELECT metric, threshold FROM judge_cascades()").await;
    assert_eq!(strs(&stored, "metric"), [Some("fluency".to_string())]);
    assert_eq!(f64s(&stored, "threshold"), [Some(threshold)]);

    // The cascade: every row by the small model, the unsure ones by the main model.
    stub.reset_counters();
    let batch = query(&ctx, &job).await;
    assert_eq!(batch.num_rows(), 400);
    assert!(f64s(&batch, "score").iter().all(Option::is_some));
    // The sample's rows are cached for both models: the run asks the small model for the
    // other 200, and the main model for at most 35 % of them.
    assert_eq!(small_requests(&stub), 200);
    let escalated_rest = main_requests(&stub);
    assert!(
        escalated_rest <= 70,
        "{escalated_rest} of 200 rows escalated"
    );
    let escalated = cascade_field(&batch, "escalated");
    let confidence = cascade_field(&batch, "confidence");
    let models = cascade_field(&batch, "model");
    assert!(models.iter().all(|m| m.as_deref() == Some("small-judge")));
    for (e, c) in escalated.iter().zip(&confidence) {
        let c: f64 = c.as_deref().unwrap().parse().unwrap();
        assert_eq!(
            e.as_deref() == Some("true"),
            c < threshold,
            "confidence {c}"
        );
    }
    let escalated_rows = escalated
        .iter()
        .filter(|e| e.as_deref() == Some("true"))
        .count();
    assert!(escalated_rows > 0 && escalated_rows < 400 * 35 / 100 + 1);

    // What the run did, against the main model alone (this process's runs).
    let runs = query(
        &ctx,
        "SELECT run_rows, run_escalated, run_small_calls, run_main_calls, run_cost_usd, \
         main_alone_calls, main_alone_usd FROM judge_cascades()",
    )
    .await;
    let count = |c: &str| {
        datafusion::arrow::compute::cast(
            runs.column_by_name(c).unwrap(),
            &datafusion::arrow::datatypes::DataType::Float64,
        )
        .unwrap()
        .as_primitive::<datafusion::arrow::datatypes::Float64Type>()
        .value(0) as usize
    };
    assert_eq!(count("run_rows"), 400);
    assert_eq!(count("run_escalated"), escalated_rows);
    assert_eq!(count("run_small_calls"), 200);
    assert_eq!(count("run_main_calls"), escalated_rest);
    assert_eq!(count("main_alone_calls"), 200);
    // gpt-4o has a built-in price, the stub's small model none.
    assert_eq!(f64s(&runs, "run_cost_usd"), [None]);
    assert!(f64s(&runs, "main_alone_usd")[0].unwrap() > 0.0);

    // The final scores agree with the main model's at the guaranteed level: judge every
    // row with the main model alone (the escalated ones are cached) and compare.
    query(&ctx, "SET evalsql.judge.cascade = ''").await;
    let main = query(
        &ctx,
        &format!("SELECT r, fluency(r) AS score FROM ({ROWS}) ORDER BY r"),
    )
    .await;
    let agree = f64s(&batch, "score")
        .iter()
        .zip(f64s(&main, "score"))
        .filter(|(a, b)| **a == *b)
        .count();
    assert!(
        agree as f64 / 400.0 >= 0.9,
        "{agree} of 400 agree with the main model"
    );

    // A rerun sends nothing.
    query(&ctx, "SET evalsql.judge.cascade = 'small-judge'").await;
    stub.reset_counters();
    let again = query(&ctx, &job).await;
    assert_eq!(stub.requests(), 0);
    assert_eq!(f64s(&again, "score"), f64s(&batch, "score"));
}

#[tokio::test(flavor = "multi_thread")]
async fn without_log_probabilities_the_confidence_is_the_samples_agreement() {
    let stub = StubJudge::start(StubConfig {
        logprobs: false,
        ..Default::default()
    })
    .await;
    let cache = temp_cache("cascade-samples");
    let ctx = cascade_session(&stub, &cache).await;
    query(
        &ctx,
        "SELECT * FROM judge_calibrate('fluency', 'SELECT ''answer '' || v FROM \
         generate_series(1, 60) AS t(v)', 60)",
    )
    .await;
    // Three samples of the small model a row (cascade_samples), one of the main model.
    assert_eq!(small_requests(&stub), 180);
    assert_eq!(main_requests(&stub), 60);
    let batch = query(
        &ctx,
        "SELECT fluency_details('answer ' || v) AS d FROM generate_series(1, 60) AS t(v)",
    )
    .await;
    for c in cascade_field(&batch, "confidence") {
        let c: f64 = c.unwrap().parse().unwrap();
        assert!(
            [1.0 / 3.0, 2.0 / 3.0, 1.0]
                .iter()
                .any(|v| (v - c).abs() < 1e-9),
            "a share of three samples: {c}"
        );
    }
    let d = batch.column_by_name("d").unwrap().as_struct();
    assert_eq!(d.column_by_name("status").unwrap().null_count(), 0);

    // The threshold was certified on shares of three samples: with two, it does not hold,
    // and the statement asks for a calibration of its own.
    ctx.sql("SET evalsql.judge.cascade_samples = 2")
        .await
        .unwrap();
    let err = query_error(
        &ctx,
        "SELECT fluency('answer ' || v) FROM generate_series(1, 60) AS t(v)",
    )
    .await;
    assert!(err.contains("judge_calibrate('fluency'"), "{err}");
}

#[test]
fn batch_mode_sends_the_small_models_batch_then_the_escalations() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let cache = temp_cache("cascade-batch");
    let rows = "SELECT ''answer '' || v FROM generate_series(1, 120) AS t(v)";
    // The stub's small model priced as gpt-4o-mini, so the run has dollars to compare.
    let prices = cache.with_extension("prices.json");
    std::fs::write(
        &prices,
        r#"{"small-judge": {"input": 0.15, "cached_input": 0.075, "output": 0.6}}"#,
    )
    .unwrap();
    let mut cmd = crate::judge::evalsql_cmd(Some(&stub), &cache);
    cmd.env("EVALSQL_JUDGE_MODEL", "gpt-4o")
        .env("EVALSQL_PRICES", &prices)
        .env("EVALSQL_JUDGE_MODE", "batch")
        .arg("-c")
        .arg(format!(
            "SET evalsql.judge.batch_poll_interval = 0.05;
             SET evalsql.judge.cascade = 'small-judge';
             SELECT threshold IS NOT NULL AS calibrated FROM judge_calibrate('fluency', '{rows}', 60);
             SELECT count(*) FILTER (WHERE d['status'] = 'ok') AS ok,
                    count(*) FILTER (WHERE d['cascade']['escalated']) AS escalated
             FROM (SELECT fluency_details('answer ' || v) AS d FROM generate_series(1, 120) AS t(v));
             SELECT run_rows, run_escalated, run_small_calls, run_main_calls <= run_escalated,
                    main_alone_calls, run_cost_usd < main_alone_usd AS cheaper
             FROM judge_cascades()"
        ));
    let (out, err) = crate::judge::run_ok(cmd);
    assert_eq!(stub.requests_to("POST", "/chat/completions"), 0, "{out}");
    assert!(
        stub.batches_created() >= 3,
        "calibration (two), then the run: {out}"
    );
    let lines: Vec<&str> = out.lines().collect();
    let (ok, escalated) = lines[lines.len() - 3].split_once(',').unwrap();
    assert_eq!(ok, "120", "{out}");
    let escalated: usize = escalated.parse().unwrap();
    assert!(escalated < 120, "{out}");
    // The sample's 60 rows are cached: the small model is asked about the other 60, and the
    // main model alone would have been asked about them too.
    assert_eq!(
        lines[lines.len() - 1],
        format!("120,{escalated},60,true,60,true"),
        "{out}\n{err}"
    );
    // The summary line says the same.
    let summary = err
        .lines()
        .find(|l| l.starts_with("judge cascade fluency: "))
        .unwrap_or_else(|| panic!("no cascade summary line: {err}"));
    assert!(
        summary.starts_with(&format!(
            "judge cascade fluency: 120 rows, {escalated} escalated"
        )),
        "{summary}"
    );
    assert!(
        summary.contains("calls 60 small-judge + ")
            && summary.contains("against 60 gpt-4o alone; $"),
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fused_group_is_calibrated_and_escalated_as_one_judgement() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("cascade-fused");
    let ctx = cascade_session_with(&stub, &cache, &[("fuse", "true")]).await;
    let rows = "SELECT 'question ' || v AS query, 'answer ' || v AS response \
                FROM generate_series(1, 400) AS t(v)";
    let job = format!(
        "SELECT relevance_details(query, response) AS rl, fluency_details(response) AS fl,
                coherence_details(query, response) AS co
         FROM ({rows}) ORDER BY query"
    );
    let err = query_error(&ctx, &job).await;
    assert!(
        err.contains("judge_calibrate('coherence,fluency,relevance'")
            && err.contains("in columns named"),
        "{err}"
    );
    let calibration = query(
        &ctx,
        &calibrate_sql("relevance, fluency, coherence", rows, 200),
    )
    .await;
    assert_eq!(
        strs(&calibration, "metric"),
        [Some("coherence,fluency,relevance".to_string())]
    );
    // One fused call a sample row for each model.
    assert_eq!(main_requests(&stub), 200);
    assert_eq!(small_requests(&stub), 200);

    stub.reset_counters();
    let batch = query(&ctx, &job).await;
    assert_eq!(batch.num_rows(), 400);
    assert_eq!(small_requests(&stub), 200, "the rows outside the sample");
    assert!(main_requests(&stub) <= 200);
    let flags: Vec<Vec<Option<String>>> = ["rl", "fl", "co"]
        .iter()
        .map(|c| cascade_field_of(&batch, c, "escalated"))
        .collect();
    assert_eq!(flags[0], flags[1], "the group escalates together");
    assert_eq!(flags[0], flags[2]);
    assert!(flags[0].iter().all(Option::is_some));
    let escalated = flags[0]
        .iter()
        .filter(|f| f.as_deref() == Some("true"))
        .count();
    // Every main-model call was an escalation (the sample's are cached).
    assert!(escalated >= main_requests(&stub), "{escalated}");
}

#[test]
fn the_estimate_of_a_cascade_gives_the_worst_and_the_expected_escalations() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let cache = temp_cache("cascade-estimate");
    let rows = "SELECT ''answer '' || v FROM generate_series(1, 300) AS t(v)";
    // The small model priced as gpt-4o-mini, so the total has a price.
    let prices = cache.with_file_name("prices.json");
    std::fs::write(
        &prices,
        r#"{"small-judge": {"input": 0.15, "cached_input": 0.075, "output": 0.6}}"#,
    )
    .unwrap();
    let mut cmd = crate::judge::evalsql_cmd(Some(&stub), &cache);
    cmd.env("EVALSQL_PRICES", &prices)
        .env("EVALSQL_JUDGE_MODEL", "gpt-4o")
        .arg("-c")
        .arg(format!(
            "SET evalsql.judge.cascade = 'small-judge';
         SELECT escalated_share FROM judge_calibrate('fluency', '{rows}', 100)"
        ));
    let (out, _) = crate::judge::run_ok(cmd);
    let share: f64 = out.lines().last().unwrap().parse().unwrap();
    stub.reset_counters();
    let mut cmd = crate::judge::evalsql_cmd(Some(&stub), &cache);
    cmd.env("EVALSQL_PRICES", &prices);
    cmd.env("EVALSQL_JUDGE_MODEL", "gpt-4o").args([
        "estimate",
        "--format",
        "json",
        "-c",
        "SET evalsql.judge.cascade = 'small-judge';
         SELECT fluency('answer ' || v) FROM generate_series(1, 300) AS t(v)",
    ]);
    let (out, _) = crate::judge::run_ok(cmd);
    assert_eq!(stub.requests(), 0, "an estimate sends nothing");
    let estimates: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let line = |m: &str| {
        estimates
            .iter()
            .find(|e| e["metric"] == m)
            .unwrap_or_else(|| panic!("no {m} in {out}"))
            .clone()
    };
    // The small model: every row, the calibration's 100 already cached.
    let small = line("fluency");
    assert_eq!(small["to_send"], 200, "{out}");
    // The escalations: the worst case is every row; the expected the calibration's share.
    let escalated = line("fluency escalated");
    assert_eq!(escalated["calls"], 300, "{out}");
    let worst = escalated["cost_usd"].as_f64().unwrap();
    let expected = escalated["expected_cost_usd"].as_f64().unwrap();
    assert!(worst > 0.0);
    assert!(
        (expected - worst * share).abs() < 1e-9,
        "{expected} {worst} {share}"
    );
    let total = line("total");
    assert!(total["expected_cost_usd"].as_f64().unwrap() < total["cost_usd"].as_f64().unwrap());
}

/// The estimate of a calibration counts both models' calls over the sample and stores
/// nothing: a calibration made of unjudged rows would escalate every row of a later run.
#[test]
fn the_estimate_of_a_calibration_counts_its_calls_and_stores_nothing() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let cache = temp_cache("cascade-estimate-calibration");
    let rows = "SELECT ''answer '' || v FROM generate_series(1, 300) AS t(v)";
    let mut cmd = crate::judge::evalsql_cmd(Some(&stub), &cache);
    cmd.env("EVALSQL_JUDGE_MODEL", "gpt-4o").args([
        "estimate",
        "--format",
        "json",
        "-c",
        &format!(
            "SET evalsql.judge.cascade = 'small-judge';
             SELECT * FROM judge_calibrate('fluency', '{rows}', 100)"
        ),
    ]);
    let (out, _) = crate::judge::run_ok(cmd);
    assert_eq!(stub.requests(), 0, "an estimate sends nothing");
    let estimates: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    let total = estimates
        .iter()
        .find(|e| e["metric"] == "total")
        .unwrap_or_else(|| panic!("no total in {out}"));
    assert_eq!(total["to_send"], 200, "both models, 100 rows each: {out}");

    let mut cmd = crate::judge::evalsql_cmd(Some(&stub), &cache);
    cmd.args(["-c", "SELECT count(*) AS n FROM judge_cascades()"]);
    let (out, _) = crate::judge::run_ok(cmd);
    assert_eq!(out.lines().last(), Some("0"), "{out}");
}

/// A small model that agrees on half the rows, with a confidence that does not tell those
/// rows from the others: no threshold can be certified, so the calibration says so and the
/// cascade sends every row to the main model.
#[tokio::test(flavor = "multi_thread")]
async fn an_uninformative_small_model_at_half_agreement_escalates_everything() {
    let stub = StubJudge::start(StubConfig {
        small_agreement: 0.5,
        small_confidence_informative: false,
        ..StubConfig::default()
    })
    .await;
    let cache = temp_cache("cascade-uninformative");
    let ctx = cascade_session(&stub, &cache).await;
    let calibration = query(&ctx, &calibrate_sql("fluency", ROWS, 200)).await;
    assert_eq!(f64s(&calibration, "threshold"), [None]);
    assert_eq!(f64s(&calibration, "escalated_share"), [Some(1.0)]);
    // Nothing is kept, so no agreement is claimed; the reason gives what was measured.
    assert_eq!(f64s(&calibration, "agreement"), [Some(0.0)]);
    let reason = strs(&calibration, "reason")[0].clone().unwrap();
    assert!(reason.contains("the small model agreed on"), "{reason}");

    stub.reset_counters();
    let batch = query(
        &ctx,
        &format!("SELECT fluency_details(r) AS d FROM ({ROWS})"),
    )
    .await;
    assert!(
        cascade_field(&batch, "escalated")
            .iter()
            .all(|e| e.as_deref() == Some("true"))
    );
    // The sample's rows are cached for both models; the other 200 go to both.
    assert_eq!(small_requests(&stub), 200);
    assert_eq!(main_requests(&stub), 200);
}

/// Over `evalsql serve` a client runs the operator's calibrated cascade but may not
/// calibrate, pick another small model or loosen the guarantee, and sees the calibrations
/// without the server's runs (those are every client's together).
#[test]
fn a_server_client_uses_the_operators_cascade_and_cannot_loosen_it() {
    use crate::serve::{psql, run_psql, start_server};
    let Some(psql) = psql() else { return };
    let stub = StubJudge::start_in_background(StubConfig::default());
    let cache = temp_cache("cascade-serve");
    let rows = "SELECT ''answer '' || v FROM generate_series(1, 60) AS t(v)";
    // The operator calibrates, from the CLI.
    let mut cmd = crate::judge::evalsql_cmd(Some(&stub), &cache);
    cmd.env("EVALSQL_JUDGE_MODEL", "gpt-4o")
        .arg("-c")
        .arg(format!(
            "SET evalsql.judge.cascade = 'small-judge';
         SELECT threshold IS NOT NULL FROM judge_calibrate('fluency', '{rows}', 40)"
        ));
    let (out, _) = crate::judge::run_ok(cmd);
    assert_eq!(out.lines().last(), Some("true"), "{out}");

    let base_url = stub.base_url();
    let cache_path = cache.to_str().unwrap();
    let env = [
        ("EVALSQL_PG_USER", "alice"),
        ("EVALSQL_PG_PASSWORD", "pw-c4sc"),
        ("OPENAI_BASE_URL", base_url.as_str()),
        ("EVALSQL_JUDGE_MODEL", "gpt-4o"),
        ("EVALSQL_JUDGE_CACHE", cache_path),
    ];
    let server = start_server(&env, &["--allowed-model", "small-judge"]).unwrap();
    let client = |sql: &str| run_psql(&psql, server.port, "alice", "pw-c4sc", sql);

    let (ok, out, err) = client(
        "SET evalsql.judge.cascade = 'small-judge';
         SELECT count(*) FILTER (WHERE d['status'] = 'ok'),
                count(*) FILTER (WHERE d['cascade']['model'] = 'small-judge')
         FROM (SELECT fluency_details('answer ' || v) AS d FROM generate_series(1, 60) AS t(v))",
    );
    assert!(ok, "{err}");
    assert_eq!(out.lines().last(), Some("60|60"), "{err}");
    let (ok, out, err) = client("SELECT count(*), count(run_rows) FROM judge_cascades()");
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "1|0", "a client sees no run figures: {out}");

    for (sql, says) in [
        (
            format!("SELECT * FROM judge_calibrate('fluency', '{rows}', 40)"),
            "operator",
        ),
        (
            "SET evalsql.judge.cascade = 'gpt-4o-mini'".to_string(),
            "--allowed-model",
        ),
        (
            "SET evalsql.judge.cascade_agreement = 0.5".to_string(),
            "cascade_agreement",
        ),
        (
            "SET evalsql.judge.cascade_delta = 0.5".to_string(),
            "cascade_delta",
        ),
    ] {
        let (ok, _, err) = client(&sql);
        assert!(!ok && err.contains(says), "{sql}: {err}");
    }
    // A stricter guarantee is the client's to ask for (it has no calibration: a planning
    // error naming the step, not a judged row).
    let (ok, _, err) = client(
        "SET evalsql.judge.cascade = 'small-judge'; SET evalsql.judge.cascade_agreement = 0.95;
         SELECT fluency('answer 1')",
    );
    assert!(!ok && err.contains("judge_calibrate"), "{err}");
}

/// Budgets count the calibration's calls and the cascade's: a calibration cut short by
/// `max_calls` rests on the rows both models judged and says so; a cascade under a budget
/// sends no more than it allows and still returns every row.
#[tokio::test(flavor = "multi_thread")]
async fn budgets_count_the_calibrations_calls_and_the_cascades() {
    let stub = StubJudge::start(StubConfig::default()).await;
    let cache = temp_cache("cascade-budget");
    let ctx = cascade_session_with(&stub, &cache, &[("max_calls", "250")]).await;
    let calibration = query(&ctx, &calibrate_sql("fluency", ROWS, 200)).await;
    // 200 small-model calls, then the main model's 50 the budget leaves.
    assert_eq!(stub.requests(), 250);
    assert_eq!(small_requests(&stub), 200);
    assert_eq!(
        calibration
            .column_by_name("sample_size")
            .unwrap()
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
            .value(0),
        50
    );
    let reason = strs(&calibration, "reason")[0].clone().unwrap_or_default();
    assert!(
        reason.contains("150 of the sample's 200 rows were not judged"),
        "{reason}"
    );

    // The cascade under a budget of 30 calls: every row is there, 30 requests are sent.
    stub.reset_counters();
    let ctx = cascade_session_with(&stub, &cache, &[("max_calls", "30")]).await;
    let batch = query(
        &ctx,
        &format!("SELECT r, fluency(r) AS score, fluency_details(r) AS d FROM ({ROWS})"),
    )
    .await;
    assert_eq!(batch.num_rows(), 400);
    assert!(stub.requests() <= 30, "{}", stub.requests());
    let d = batch.column_by_name("d").unwrap().as_struct();
    let status = d.column_by_name("status").unwrap().as_string::<i32>();
    let error = d.column_by_name("error").unwrap().as_string::<i32>();
    let over = (0..batch.num_rows())
        .filter(|&i| status.value(i) == "skipped" && error.value(i).starts_with("budget exhausted"))
        .count();
    assert!(over > 0, "rows past the budget say so");
}
