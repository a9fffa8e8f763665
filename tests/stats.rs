//! The statistics aggregates against scipy, numpy and scikit-learn on the same data
//! (`tests/stats/`): `mean_ci` to 1e-9, `cohen_kappa` to 1e-12, the hash-seeded bootstrap
//! and paired test exactly against their numpy reimplementation, and `bootstrap_ci` within
//! the Monte-Carlo error of scipy's percentile bootstrap (10 % of the interval width).
//!
//! Then pass@k, pass^k, weighted kappa, Krippendorff's alpha, PPI, cluster-robust intervals
//! and BH q-values against their named references on data `tests/stats/agreement.py`
//! generates (ppi-python, krippendorff, statsmodels, scikit-learn; pinned in
//! `scripts/test.sh`).
//!
//! With `EVALSQL_STATS_PYTHON` pointing at a Python that has them (`scripts/test.sh` makes
//! one), the references are computed live by the scripts; otherwise the committed
//! `tests/stats/reference.json` and `agreement.json`, written by the same scripts, are used.

use std::process::Command;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::Float64Type;
use evalsql::session::default_context;
use serde_json::Value;

use crate::skip::skipped;

/// The JSON a reference script prints: run live with `EVALSQL_STATS_PYTHON` when there is
/// one, else read from the committed `fallback` (written by the same script).
fn python_reference(script: &str, args: &[&str], fallback: &str, what: &str) -> Value {
    reference_from(
        "EVALSQL_STATS_PYTHON",
        "numpy, scipy and scikit-learn",
        script,
        args,
        fallback,
        what,
    )
}

/// [`python_reference`] with the Python named by `python_var`, one that has `needs`.
pub(crate) fn reference_from(
    python_var: &str,
    needs: &str,
    script: &str,
    args: &[&str],
    fallback: &str,
    what: &str,
) -> Value {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = match std::env::var(python_var) {
        Ok(python) if !python.is_empty() => {
            let out = Command::new(python)
                .arg(format!("{root}/tests/stats/{script}"))
                .args(args.iter().map(|a| a.replace("{root}", root)))
                .output()
                .unwrap_or_else(|e| panic!("run {script}: {e}"));
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        }
        _ => {
            skipped(
                what,
                &format!(
                    "no {python_var} with {needs}; compared with the committed \
                     tests/stats/{fallback}"
                ),
            );
            std::fs::read_to_string(format!("{root}/tests/stats/{fallback}")).unwrap()
        }
    };
    serde_json::from_str(&text).unwrap()
}

fn reference() -> Value {
    python_reference(
        "reference.py",
        &[
            "{root}/tests/stats/scores.csv",
            "--value",
            "system_a",
            "--other",
            "system_b",
            "--labels",
            "judge_label",
            "human_label",
        ],
        "reference.json",
        "computing the statistics references live",
    )
}

fn f(batch: &RecordBatch, col: &str) -> f64 {
    batch
        .column_by_name(col)
        .unwrap()
        .as_primitive::<Float64Type>()
        .value(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistics_match_scipy_and_sklearn() {
    let want = reference();
    // Several partitions, so partial states are merged.
    for partitions in [1, 3] {
        let ctx = default_context().await.unwrap();
        ctx.sql(&format!(
            "SET datafusion.execution.target_partitions = {partitions}"
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
        let batches = ctx
            .sql(
                "SELECT m['mean'] AS mean, m['lower'] AS m_lo, m['upper'] AS m_hi,
                        b['lower'] AS b_lo, b['upper'] AS b_hi, p, k
                 FROM (SELECT mean_ci(system_a) AS m, bootstrap_ci(system_a) AS b,
                              paired_bootstrap_pvalue(system_a, system_b) AS p,
                              cohen_kappa(judge_label, human_label) AS k
                       FROM (SELECT * FROM 'tests/stats/scores.csv' ORDER BY random()))",
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let b = &batches[0];
        let close = |got: f64, want: &Value, tol: f64, what: &str| {
            let want = want.as_f64().unwrap();
            assert!(
                (got - want).abs() <= tol * want.abs().max(1.0),
                "{what} ({partitions} partitions): {got} vs {want}"
            );
        };
        close(f(b, "mean"), &want["mean"], 1e-12, "mean");
        close(f(b, "m_lo"), &want["mean_ci"][0], 1e-9, "mean_ci lower");
        close(f(b, "m_hi"), &want["mean_ci"][1], 1e-9, "mean_ci upper");
        close(
            f(b, "b_lo"),
            &want["bootstrap_ci"][0],
            1e-12,
            "bootstrap_ci lower",
        );
        close(
            f(b, "b_hi"),
            &want["bootstrap_ci"][1],
            1e-12,
            "bootstrap_ci upper",
        );
        close(
            f(b, "p"),
            &want["paired"]["p_value"],
            1e-12,
            "paired p-value",
        );
        close(f(b, "k"), &want["kappa"], 1e-12, "cohen_kappa");
        // Against scipy's own percentile bootstrap: within the Monte-Carlo error.
        let (lo, hi) = (
            want["bootstrap_ci_scipy"][0].as_f64().unwrap(),
            want["bootstrap_ci_scipy"][1].as_f64().unwrap(),
        );
        let width = hi - lo;
        assert!(
            (f(b, "b_lo") - lo).abs() <= 0.1 * width,
            "bootstrap lower vs scipy"
        );
        assert!(
            (f(b, "b_hi") - hi).abs() <= 0.1 * width,
            "bootstrap upper vs scipy"
        );
        assert!(b.column_by_name("k").unwrap().null_count() == 0);
    }
}

/// `tests/stats/agreement.py`'s data and references: computed live with the stats Python
/// when there is one, else the committed `tests/stats/agreement.json` it wrote.
fn agreement_reference() -> Value {
    python_reference(
        "agreement.py",
        &[],
        "agreement.json",
        "computing the pass@k and weighted-kappa references live",
    )
}

/// A JSON array of objects as a table in `ctx` (through DataFusion's JSON reader).
pub(crate) async fn register_rows(
    ctx: &datafusion::prelude::SessionContext,
    name: &str,
    rows: &Value,
) {
    let path =
        std::env::temp_dir().join(format!("evalsql-stats-{}-{name}.json", std::process::id()));
    let text: String = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{r}\n"))
        .collect();
    std::fs::write(&path, text).unwrap();
    ctx.register_json(name, path.to_str().unwrap(), Default::default())
        .await
        .unwrap();
}

/// A session whose queries run in `partitions` partitions (so partial states are merged).
pub(crate) async fn partitioned_context(partitions: usize) -> datafusion::prelude::SessionContext {
    let ctx = default_context().await.unwrap();
    ctx.sql(&format!(
        "SET datafusion.execution.target_partitions = {partitions}"
    ))
    .await
    .unwrap();
    ctx
}

/// A column as text, row by row.
fn texts(b: &RecordBatch, col: &str) -> Vec<String> {
    let a = datafusion::arrow::compute::cast(
        b.column_by_name(col).unwrap(),
        &datafusion::arrow::datatypes::DataType::Utf8,
    )
    .unwrap();
    let a = a.as_string::<i32>();
    (0..a.len()).map(|i| a.value(i).to_string()).collect()
}

/// A Float64 column with its NULLs.
fn optional_floats(b: &RecordBatch, col: &str) -> Vec<Option<f64>> {
    b.column_by_name(col)
        .unwrap()
        .as_primitive::<Float64Type>()
        .iter()
        .collect()
}

fn close_or_null(got: Option<f64>, want: &Value, tol: f64, what: &str) {
    match (got, want.as_f64()) {
        (None, None) => {}
        (Some(g), Some(w)) => assert!((g - w).abs() <= tol, "{what}: {g} vs {w}"),
        _ => panic!("{what}: {got:?} vs {want}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_at_k_and_weighted_kappa_match_their_references() {
    let want = agreement_reference();
    let ctx = default_context().await.unwrap();
    register_rows(&ctx, "samples", &want["samples"]).await;
    for k in [1, 3, 5, 10] {
        let batch = ctx
            .sql(&format!(
                "SELECT task, pass_at_k(passed, {k}) AS at, pass_hat_k(passed, {k}) AS hat
                 FROM samples GROUP BY task"
            ))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let mut seen = 0;
        for b in &batch {
            let tasks = texts(b, "task");
            let (at, hat) = (
                b.column_by_name("at")
                    .unwrap()
                    .as_primitive::<Float64Type>(),
                b.column_by_name("hat")
                    .unwrap()
                    .as_primitive::<Float64Type>(),
            );
            for (i, task) in tasks.iter().enumerate() {
                let expected = &want["pass"][format!("{task}/{k}")];
                let value = |a: &datafusion::arrow::array::Float64Array| {
                    (!a.is_null(i)).then(|| a.value(i))
                };
                close_or_null(value(at), &expected[0], 1e-12, &format!("pass@{k} {task}"));
                close_or_null(value(hat), &expected[1], 1e-12, &format!("pass^{k} {task}"));
                seen += 1;
            }
        }
        assert_eq!(seen, 40);
    }

    for (i, case) in want["kappa"].as_array().unwrap().iter().enumerate() {
        let rows: Vec<Value> = case["a"]
            .as_array()
            .unwrap()
            .iter()
            .zip(case["b"].as_array().unwrap())
            .map(|(a, b)| serde_json::json!({"a": a, "b": b}))
            .collect();
        let table = format!("kappa{i}");
        register_rows(&ctx, &table, &Value::Array(rows)).await;
        for (weights, arg) in [
            ("none", ""),
            ("linear", ", 'linear'"),
            ("quadratic", ", 'quadratic'"),
        ] {
            let batch = ctx
                .sql(&format!("SELECT cohen_kappa(a, b{arg}) AS k FROM {table}"))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            let k = batch[0]
                .column_by_name("k")
                .unwrap()
                .as_primitive::<Float64Type>();
            let got = (!k.is_null(0)).then(|| k.value(0));
            close_or_null(
                got,
                &case["expected"][weights],
                1e-12,
                &format!("cohen_kappa {} {weights}", case["name"]),
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_robust_intervals_match_statsmodels() {
    let want = agreement_reference();
    for partitions in [1, 3] {
        let ctx = partitioned_context(partitions).await;
        for (i, case) in want["cluster"].as_array().unwrap().iter().enumerate() {
            let table = format!("clustered{i}");
            register_rows(&ctx, &table, &case["rows"]).await;
            let batch = ctx
                .sql(&format!(
                    "SELECT m['mean'] AS mean, m['lower'] AS lower, m['upper'] AS upper,
                            m['n'] AS n
                     FROM (SELECT mean_ci(x, {}, cluster) AS m
                           FROM (SELECT * FROM {table} ORDER BY random()))",
                    case["confidence"]
                ))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            let b = &batch[0];
            let get = |col: &str| {
                let a = b.column_by_name(col).unwrap().as_primitive::<Float64Type>();
                (!a.is_null(0)).then(|| a.value(0))
            };
            let what = format!("{} ({partitions} partitions)", case["name"]);
            close_or_null(
                get("mean"),
                &case["expected"][0],
                1e-12,
                &format!("{what} mean"),
            );
            close_or_null(
                get("lower"),
                &case["expected"][1],
                1e-9,
                &format!("{what} lower"),
            );
            close_or_null(
                get("upper"),
                &case["expected"][2],
                1e-9,
                &format!("{what} upper"),
            );
            let n = b
                .column_by_name("n")
                .unwrap()
                .as_primitive::<datafusion::arrow::datatypes::UInt64Type>()
                .value(0);
            assert_eq!(n, case["n"].as_u64().unwrap(), "{what} n");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fdr_bh_matches_statsmodels_per_family() {
    let want = agreement_reference();
    let ctx = default_context().await.unwrap();
    register_rows(&ctx, "tests_fdr", &want["fdr"]["tests"]).await;
    let batches = ctx
        .sql("SELECT id, fdr_bh(p) OVER (PARTITION BY family) AS q FROM tests_fdr")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let mut seen = 0;
    for b in &batches {
        for (id, got) in texts(b, "id").iter().zip(optional_floats(b, "q")) {
            close_or_null(
                got,
                &want["fdr"]["expected"][id],
                1e-12,
                &format!("fdr_bh {id}"),
            );
            seen += 1;
        }
    }
    assert_eq!(seen, want["fdr"]["tests"].as_array().unwrap().len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn krippendorff_alpha_matches_the_krippendorff_package() {
    let want = agreement_reference();
    for partitions in [1, 3] {
        let ctx = partitioned_context(partitions).await;
        for (i, case) in want["alpha"].as_array().unwrap().iter().enumerate() {
            let table = format!("ratings{i}");
            register_rows(&ctx, &table, &case["rows"]).await;
            for (level, expected) in case["expected"].as_object().unwrap() {
                let batch = ctx
                    .sql(&format!(
                        "SELECT krippendorff_alpha(unit, rater, value, '{level}') AS a
                         FROM (SELECT * FROM {table} ORDER BY random())"
                    ))
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap();
                close_or_null(
                    optional_floats(&batch[0], "a")[0],
                    expected,
                    1e-9,
                    &format!("alpha {} {level} ({partitions} partitions)", case["name"]),
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ppi_mean_ci_matches_ppi_python() {
    let want = agreement_reference();
    for partitions in [1, 3] {
        let ctx = partitioned_context(partitions).await;
        for (i, case) in want["ppi"].as_array().unwrap().iter().enumerate() {
            let table = format!("judged{i}");
            register_rows(&ctx, &table, &case["rows"]).await;
            let batch = ctx
                .sql(&format!(
                    "SELECT m['mean'] AS mean, m['lower'] AS lower, m['upper'] AS upper
                     FROM (SELECT ppi_mean_ci(judge, human, {}) AS m
                           FROM (SELECT * FROM {table} ORDER BY random()))",
                    case["confidence"]
                ))
                .await
                .unwrap()
                .collect()
                .await
                .unwrap();
            let what = format!("ppi {} ({partitions} partitions)", case["name"]);
            for (k, col) in ["mean", "lower", "upper"].iter().enumerate() {
                close_or_null(
                    optional_floats(&batch[0], col)[0],
                    &case["expected"][k],
                    1e-9,
                    &format!("{what} {col}"),
                );
            }
        }
    }
}
