//! `mean_cs`, the anytime-valid confidence sequence alerts are checked with: equal to the
//! `confseq` package on the sequences `tests/stats/confseq_reference.py` makes (live with
//! `EVALSQL_CONFSEQ_PYTHON`, a Python that imports `confseq`, which `scripts/test.sh` makes;
//! else against the committed `tests/stats/confseq.json`), whatever the partitioning; clear
//! errors for bad calls; and its promise, on simulated streams: checked after every run, it
//! raises a false alarm in at most alpha of streams where a plain threshold raises one in
//! most, and it still sees a real drop.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Float64Type, UInt64Type};
use evalsql::session::default_context;
use evalsql::udfs::kernels::mean_cs::Sequence;
use serde_json::{Value, json};

use crate::stats::{partitioned_context, reference_from, register_rows};

fn confseq_reference() -> Value {
    reference_from(
        "EVALSQL_CONFSEQ_PYTHON",
        "confseq 0.0.11",
        "confseq_reference.py",
        &[],
        "confseq.json",
        "computing the mean_cs references live",
    )
}

fn float(b: &RecordBatch, col: &str) -> f64 {
    b.column_by_name(col)
        .unwrap()
        .as_primitive::<Float64Type>()
        .value(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mean_cs_equals_confseq_at_every_length_and_partitioning() {
    let want = confseq_reference();
    for partitions in [1, 3] {
        let ctx = partitioned_context(partitions).await;
        for case in want["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            // Rows stored out of order: ORDER BY inside the call gives the sequence's order.
            let x = case["x"].as_array().unwrap();
            let mut rows: Vec<Value> = x
                .iter()
                .enumerate()
                .map(|(i, v)| json!({"i": i, "x": v}))
                .collect();
            rows.reverse();
            rows.rotate_left(x.len() / 3);
            register_rows(&ctx, name, &Value::Array(rows)).await;
            let (lo, hi, alpha) = (&case["lo"], &case["hi"], &case["alpha"]);
            let width = case["hi"].as_f64().unwrap() - case["lo"].as_f64().unwrap();
            for at in case["at"].as_array().unwrap() {
                let n = at["n"].as_u64().unwrap();
                let batch = ctx
                    .sql(&format!(
                        "SELECT cs['mean'] AS mean, cs['lower'] AS lower, cs['upper'] AS upper,
                                cs['n'] AS n
                         FROM (SELECT mean_cs(x, {lo}, {hi}, {alpha} ORDER BY i) AS cs
                               FROM {name} WHERE i < {n})"
                    ))
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap();
                let what = format!("{name} at n = {n} ({partitions} partitions)");
                let got_n = batch[0]
                    .column_by_name("n")
                    .unwrap()
                    .as_primitive::<UInt64Type>()
                    .value(0);
                assert_eq!(got_n, n, "{what}");
                for col in ["mean", "lower", "upper"] {
                    let (got, want) = (float(&batch[0], col), at[col].as_f64().unwrap());
                    assert!(
                        (got - want).abs() <= 1e-12 * width,
                        "{what} {col}: {got} vs confseq's {want}"
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn mean_cs_refuses_what_it_cannot_bound() {
    let ctx = default_context().await.unwrap();
    let values = "(VALUES (1, 3.0), (2, 7.5), (3, NULL)) AS t(i, x)";
    for (sql, says) in [
        (
            format!("SELECT mean_cs(x, 1, 5 ORDER BY i) FROM {values}"),
            "mean_cs: the value 7.5 is outside [1, 5]",
        ),
        (
            format!("SELECT mean_cs(x, 5, 1) FROM {values}"),
            "mean_cs: lo must be below hi",
        ),
        (
            format!("SELECT mean_cs(x, 0, 10, 1.5) FROM {values}"),
            "mean_cs: alpha must be between 0 and 1, got 1.5",
        ),
        (
            format!("SELECT mean_cs(x, i, 10) FROM {values}"),
            "mean_cs: argument 2 must be a constant",
        ),
        (
            format!("SELECT mean_cs(x, 1) FROM {values}"),
            "does not match mean_cs(x, lo, hi [, alpha]",
        ),
        (
            format!("SELECT mean_cs('high', 1, 5) FROM {values}"),
            "does not match mean_cs(x, lo, hi [, alpha]",
        ),
    ] {
        let outcome = match ctx.sql(&sql).await {
            Ok(df) => df.collect().await.map(|_| ()),
            Err(e) => Err(e),
        };
        let e = outcome.expect_err(&sql).to_string();
        assert!(e.contains(says), "{sql}: {e}");
    }
    // NULLs are left out; no values, no bounds.
    let batch = ctx
        .sql(&format!(
            "SELECT mean_cs(x, 0, 10)['n'] AS n, mean_cs(x, 0, 10)['lower'] AS lower
             FROM {values} WHERE x < 5"
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(batch[0].column(0).as_primitive::<UInt64Type>().value(0), 1);
    let batch = ctx
        .sql(&format!(
            "SELECT mean_cs(x, 0, 10)['n'] AS n, mean_cs(x, 0, 10)['lower'] AS lower
             FROM {values} WHERE x > 100"
        ))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(batch[0].column(0).as_primitive::<UInt64Type>().value(0), 0);
    assert!(batch[0].column(1).is_null(0));
}

/// A seeded stream of 1–5 scores with the given probabilities.
struct Scores {
    state: u64,
    cumulative: [f64; 5],
}

impl Scores {
    fn new(seed: u64, p: [f64; 5]) -> Self {
        let mut cumulative = [0.0; 5];
        let mut total = 0.0;
        for (c, q) in cumulative.iter_mut().zip(p) {
            total += q;
            *c = total;
        }
        Scores {
            state: seed,
            cumulative,
        }
    }

    fn next(&mut self) -> f64 {
        // splitmix64: enough for simulated scores, the same on every machine.
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let u = ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64;
        1.0 + self.cumulative.iter().filter(|c| u >= **c).count().min(4) as f64
    }
}

/// Of `streams` streams of `runs` runs of `rows` scores: the share where the sequence's
/// upper bound, checked after every run over all runs so far, fell below `threshold`, and
/// the share where the mean of some single run did.
fn alarm_rates(p: [f64; 5], threshold: f64, seed: u64) -> (f64, f64) {
    let (streams, runs, rows) = (1000, 100, 20);
    let (mut sequence_alarms, mut plain_alarms) = (0, 0);
    for s in 0..streams {
        let mut scores = Scores::new(seed + s, p);
        let mut cs = Sequence::new(1.0, 5.0, 0.05);
        let (mut sequence_fired, mut plain_fired) = (false, false);
        for _ in 0..runs {
            let mut run_sum = 0.0;
            for _ in 0..rows {
                let x = scores.next();
                run_sum += x;
                cs.push(x);
            }
            sequence_fired |= cs.bounds().1 < threshold;
            plain_fired |= run_sum / (rows as f64) < threshold;
        }
        sequence_alarms += sequence_fired as u32;
        plain_alarms += plain_fired as u32;
    }
    (
        sequence_alarms as f64 / streams as f64,
        plain_alarms as f64 / streams as f64,
    )
}

#[test]
fn checked_after_every_run_the_sequence_keeps_its_false_alarm_rate() {
    // True mean 3.8: "the mean is below 3.5" is false, every alarm is a false one.
    let good = [0.05, 0.10, 0.15, 0.40, 0.30];
    // True mean 3.0: the drop an alert is for.
    let bad = [0.10, 0.20, 0.40, 0.20, 0.10];
    let mean = |p: [f64; 5]| {
        p.iter()
            .enumerate()
            .map(|(i, q)| (i + 1) as f64 * q)
            .sum::<f64>()
    };
    assert!((mean(good) - 3.8).abs() < 1e-12 && (mean(bad) - 3.0).abs() < 1e-12);
    let (false_alarms, plain_false_alarms) = alarm_rates(good, 3.5, 1);
    let (detected, _) = alarm_rates(bad, 3.5, 1_000_000);
    println!(
        "1,000 streams of 100 runs of 20 scores, checked after every run: \
         mean_cs(x, 1, 5)['upper'] < 3.5 fires in {:.1} % at true mean 3.8, \
         avg(x) < 3.5 over the latest run in {:.1} %; at true mean 3.0 mean_cs fires in {:.1} %",
        100.0 * false_alarms,
        100.0 * plain_false_alarms,
        100.0 * detected
    );
    assert!(false_alarms <= 0.05, "{false_alarms}");
    assert!(plain_false_alarms > 0.5, "{plain_false_alarms}");
    assert!(detected >= 0.95, "{detected}");
}
