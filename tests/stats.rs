//! The statistics aggregates against scipy, numpy and scikit-learn on the same data
//! (`tests/stats/`): `mean_ci` to 1e-9, `cohen_kappa` to 1e-12, the hash-seeded bootstrap
//! and paired test exactly against their numpy reimplementation, and `bootstrap_ci` within
//! the Monte-Carlo error of scipy's percentile bootstrap (10 % of the interval width).
//!
//! With `EVALSQL_STATS_PYTHON` pointing at a Python that has numpy, scipy and scikit-learn
//! (`scripts/test.sh` makes one), the references are computed live by `tests/stats/reference.py`;
//! otherwise the committed `tests/stats/reference.json`, written by the same script, is used.

use std::process::Command;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::Float64Type;
use evalsql::session::default_context;
use serde_json::Value;

use crate::skip::skipped;

fn reference() -> Value {
    let root = env!("CARGO_MANIFEST_DIR");
    let text = match std::env::var("EVALSQL_STATS_PYTHON") {
        Ok(python) if !python.is_empty() => {
            let out = Command::new(python)
                .arg(format!("{root}/tests/stats/reference.py"))
                .arg(format!("{root}/tests/stats/scores.csv"))
                .args(["--value", "system_a", "--other", "system_b"])
                .args(["--labels", "judge_label", "human_label"])
                .output()
                .expect("run reference.py");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        }
        _ => {
            skipped(
                "computing the statistics references live",
                "no EVALSQL_STATS_PYTHON with numpy, scipy and scikit-learn; compared with the \
                 committed tests/stats/reference.json",
            );
            std::fs::read_to_string(format!("{root}/tests/stats/reference.json")).unwrap()
        }
    };
    serde_json::from_str(&text).unwrap()
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
