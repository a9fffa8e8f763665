//! Golden parity: every value of `tests/golden/` that an evalsql function covers, computed
//! through SQL and compared within the golden README's tolerances (1e-12 for ratios, 1e-9
//! where log/exp are involved). Nothing is skipped: a golden key missing from a row, or a
//! row missing from the result, fails the test.

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, ListBuilder, RecordBatch, StringArray, StringBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Float64Type, Schema};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use serde_json::Value;

const RATIO: f64 = 1e-12;
const LOG_EXP: f64 = 1e-9;

fn golden_path(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn text_rows() -> Vec<serde_json::Map<String, Value>> {
    let text = std::fs::read_to_string(golden_path("text_metrics.jsonl")).expect("golden file");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match serde_json::from_str(l).expect("golden JSON") {
            Value::Object(m) => m,
            other => panic!("golden row is not an object: {other}"),
        })
        .collect()
}

/// One SQL expression per golden key, with its tolerance. `r` = response, `g` = ground truth.
fn text_checks() -> Vec<(String, String, f64)> {
    let mut checks: Vec<(String, String, f64)> = vec![
        ("exact_match".into(), "exact_match(r, g)".into(), 0.0),
        ("f1_score".into(), "f1_score(r, g)".into(), RATIO),
        (
            "sacrebleu_sentence_bleu".into(),
            "sacrebleu(r, g)".into(),
            LOG_EXP,
        ),
        (
            "sacrebleu_sentence_bleu_noeff".into(),
            "sacrebleu(r, g, false)".into(),
            LOG_EXP,
        ),
        (
            "sacrebleu_sentence_chrf".into(),
            "chrf(r, g)".into(),
            LOG_EXP,
        ),
        ("bleu_score".into(), "bleu(r, g)".into(), LOG_EXP),
        ("gleu_score".into(), "gleu(r, g)".into(), RATIO),
        ("meteor_score".into(), "meteor(r, g)".into(), LOG_EXP),
        ("rouge1_fmeasure".into(), "rouge_1(r, g)".into(), RATIO),
        ("rouge2_fmeasure".into(), "rouge_2(r, g)".into(), RATIO),
        ("rougeL_fmeasure".into(), "rouge_l(r, g)".into(), RATIO),
        (
            "rougeLsum_fmeasure".into(),
            "rouge_l_sum(r, g)".into(),
            RATIO,
        ),
    ];
    let fields = [
        ("precision", "precision"),
        ("recall", "recall"),
        ("fmeasure", "f1_score"),
    ];
    for t in [
        "rouge1",
        "rouge2",
        "rouge3",
        "rouge4",
        "rouge5",
        "rougeL",
        "rougeLsum",
    ] {
        for (key, field) in fields {
            checks.push((
                format!("{t}_{key}"),
                format!("rouge(r, g, '{t}')['{field}']"),
                RATIO,
            ));
        }
    }
    for t in ["rouge1", "rouge2", "rougeL", "rougeLsum"] {
        for (key, field) in fields {
            checks.push((
                format!("{t}_stem_{key}"),
                format!("rouge(r, g, '{t}', true)['{field}']"),
                RATIO,
            ));
        }
    }
    for (key, field) in fields {
        checks.push((
            format!("rougeLsum_split_{key}"),
            format!("rouge(r, g, 'rougeLsum', false, true)['{field}']"),
            RATIO,
        ));
    }
    checks
}

/// The golden texts as a table `golden(id, r, g)` in the given string encoding, split over
/// several batches and partitions so batch boundaries are exercised too.
fn register_texts(
    ctx: &SessionContext,
    rows: &[serde_json::Map<String, Value>],
    encoding: &DataType,
) {
    let text = |k: &str, encoding: &DataType| -> ArrayRef {
        let values: StringArray = rows
            .iter()
            .map(|r| {
                Some(
                    r[k].as_str()
                        .unwrap_or_else(|| panic!("{k} is not a string")),
                )
            })
            .collect();
        datafusion::arrow::compute::cast(&values, encoding).expect("cast")
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("r", encoding.clone(), false),
        Field::new("g", encoding.clone(), false),
    ]));
    let all = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            text("id", &DataType::Utf8),
            text("response", encoding),
            text("ground_truth", encoding),
        ],
    )
    .expect("batch");
    let chunk = 97;
    let partitions: Vec<Vec<RecordBatch>> = (0..all.num_rows())
        .step_by(chunk)
        .map(|start| vec![all.slice(start, chunk.min(all.num_rows() - start))])
        .collect();
    let table = MemTable::try_new(schema, partitions).expect("table");
    ctx.register_table("golden", Arc::new(table))
        .expect("register");
}

async fn check_text_metrics(encoding: DataType) {
    let rows = text_rows();
    assert!(!rows.is_empty());
    let ctx = evalsql::session::default_context().await.expect("session");
    register_texts(&ctx, &rows, &encoding);
    let checks = text_checks();
    let select = checks
        .iter()
        .enumerate()
        .map(|(i, (_, expr, _))| format!("{expr} AS c{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let batches = ctx
        .sql(&format!("SELECT id, {select} FROM golden"))
        .await
        .expect("plan")
        .collect()
        .await
        .expect("execute");

    let by_id: std::collections::HashMap<&str, &serde_json::Map<String, Value>> = rows
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r))
        .collect();
    let mut failures = Vec::new();
    let mut compared = 0usize;
    let mut seen = 0usize;
    for batch in &batches {
        let ids = batch.column(0).as_string::<i32>();
        for row in 0..batch.num_rows() {
            seen += 1;
            let id = ids.value(row);
            let golden = by_id[id];
            for (i, (key, expr, tol)) in checks.iter().enumerate() {
                let col: &Float64Array = batch.column(i + 1).as_primitive::<Float64Type>();
                let Some(expected) = golden.get(key).and_then(Value::as_f64) else {
                    failures.push(format!("{id}: golden key {key} missing"));
                    continue;
                };
                if col.is_null(row) {
                    failures.push(format!("{id}: {expr} is NULL, expected {expected}"));
                    continue;
                }
                let got = col.value(row);
                compared += 1;
                if (got - expected).abs() > *tol {
                    failures.push(format!(
                        "{id}: {expr} = {got}, expected {key} = {expected} (diff {:e})",
                        (got - expected).abs()
                    ));
                }
            }
        }
    }
    assert_eq!(seen, rows.len(), "every golden row must come back");
    assert_eq!(
        compared,
        rows.len() * checks.len(),
        "every golden value compared"
    );
    assert!(
        failures.is_empty(),
        "{} golden mismatches ({encoding}):\n{}",
        failures.len(),
        failures
            .iter()
            .take(60)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_metrics_utf8() {
    check_text_metrics(DataType::Utf8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_metrics_large_utf8() {
    check_text_metrics(DataType::LargeUtf8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_metrics_utf8_view() {
    check_text_metrics(DataType::Utf8View).await;
}

/// corpus_metrics.json: one table row per (group, segment) with the segment's references as
/// a list; `corpus_bleu` / `corpus_chrf` grouped by group id over several partitions, so
/// partial states are merged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_metrics() {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(golden_path("corpus_metrics.json")).expect("golden file"),
    )
    .expect("golden JSON");
    let groups = doc["groups"].as_array().expect("groups");
    assert!(!groups.is_empty());

    let mut group_col = StringBuilder::new();
    let mut hyp_col = StringBuilder::new();
    let mut refs_col = ListBuilder::new(StringBuilder::new());
    for g in groups {
        let id = g["group_id"].as_str().expect("group_id");
        let hyps = g["hypotheses"].as_array().expect("hypotheses");
        let streams = g["references"].as_array().expect("references");
        for (i, h) in hyps.iter().enumerate() {
            group_col.append_value(id);
            hyp_col.append_value(h.as_str().expect("hypothesis"));
            for s in streams {
                refs_col
                    .values()
                    .append_value(s[i].as_str().expect("reference"));
            }
            refs_col.append(true);
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(group_col.finish()),
        Arc::new(hyp_col.finish()),
        Arc::new(refs_col.finish()),
    ];
    let schema = Arc::new(Schema::new(vec![
        Field::new("grp", DataType::Utf8, false),
        Field::new("hyp", DataType::Utf8, false),
        Field::new("refs", columns[2].data_type().clone(), true),
    ]));
    let all = RecordBatch::try_new(Arc::clone(&schema), columns).expect("batch");
    // Interleave rows over partitions: every group's state is split and merged.
    let partitions: Vec<Vec<RecordBatch>> = (0..3)
        .map(|p| {
            let idx: Vec<u32> = (p..all.num_rows() as u32).step_by(3).collect();
            let idx = datafusion::arrow::array::UInt32Array::from(idx);
            vec![
                RecordBatch::try_new(
                    Arc::clone(&schema),
                    all.columns()
                        .iter()
                        .map(|c| datafusion::arrow::compute::take(c, &idx, None).expect("take"))
                        .collect(),
                )
                .expect("batch"),
            ]
        })
        .collect();
    let ctx = evalsql::session::default_context().await.expect("session");
    ctx.register_table(
        "corpus",
        Arc::new(MemTable::try_new(schema, partitions).expect("table")),
    )
    .expect("register");
    // Single-reference groups are also scored with the reference as a plain string.
    let batches = ctx
        .sql(
            "SELECT grp, corpus_bleu(hyp, refs), corpus_chrf(hyp, refs), \
                    CASE WHEN max(array_length(refs)) = 1 THEN corpus_bleu(hyp, refs[1]) END, \
                    CASE WHEN max(array_length(refs)) = 1 THEN corpus_chrf(hyp, refs[1]) END \
             FROM corpus GROUP BY grp",
        )
        .await
        .expect("plan")
        .collect()
        .await
        .expect("execute");

    let mut results = std::collections::HashMap::new();
    for b in &batches {
        let ids = b.column(0).as_string::<i32>();
        for row in 0..b.num_rows() {
            let f = |c: usize| {
                let a = b.column(c).as_primitive::<Float64Type>();
                (!a.is_null(row)).then(|| a.value(row))
            };
            results.insert(ids.value(row).to_string(), [f(1), f(2), f(3), f(4)]);
        }
    }
    let mut failures = Vec::new();
    for g in groups {
        let id = g["group_id"].as_str().unwrap();
        let single = g["references"].as_array().unwrap().len() == 1;
        let Some(got) = results.get(id) else {
            failures.push(format!("{id}: no result row"));
            continue;
        };
        for (what, key, value) in [
            ("corpus_bleu", "sacrebleu_corpus_bleu", got[0]),
            ("corpus_chrf", "sacrebleu_corpus_chrf", got[1]),
            (
                "corpus_bleu (plain string)",
                "sacrebleu_corpus_bleu",
                if single { got[2] } else { got[0] },
            ),
            (
                "corpus_chrf (plain string)",
                "sacrebleu_corpus_chrf",
                if single { got[3] } else { got[1] },
            ),
        ] {
            let expected = g[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{id}: {key} missing"));
            match value {
                Some(v) if (v - expected).abs() <= LOG_EXP => {}
                other => failures.push(format!("{id}: {what} = {other:?}, expected {expected}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "corpus mismatches:\n{}",
        failures.join("\n")
    );
}

fn jsonl(name: &str) -> Vec<serde_json::Map<String, Value>> {
    std::fs::read_to_string(golden_path(name))
        .expect("golden file")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match serde_json::from_str(l).expect("golden JSON") {
            Value::Object(m) => m,
            other => panic!("golden row is not an object: {other}"),
        })
        .collect()
}

/// Runs `select` (one Float64 column per check, after `id`) over a table of string columns
/// and compares every row with the golden keys.
async fn check_rows(
    rows: &[serde_json::Map<String, Value>],
    columns: &[(&str, fn(&Value) -> String)],
    checks: &[(&str, &str)],
) {
    let ctx = evalsql::session::default_context().await.expect("session");
    let mut arrays: Vec<ArrayRef> = Vec::new();
    let mut fields = Vec::new();
    for (name, to_text) in columns {
        let values: StringArray = rows.iter().map(|r| Some(to_text(&r[*name]))).collect();
        arrays.push(Arc::new(values));
        fields.push(Field::new(*name, DataType::Utf8, false));
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(Arc::clone(&schema), arrays).expect("batch");
    ctx.register_table(
        "cases",
        Arc::new(MemTable::try_new(schema, vec![vec![batch]]).expect("table")),
    )
    .expect("register");
    let select = checks
        .iter()
        .map(|(_, expr)| expr.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let batches = ctx
        .sql(&format!("SELECT id, {select} FROM cases"))
        .await
        .expect("plan")
        .collect()
        .await
        .expect("execute");
    let by_id: std::collections::HashMap<&str, &serde_json::Map<String, Value>> = rows
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r))
        .collect();
    let (mut seen, mut failures) = (0, Vec::new());
    for b in &batches {
        let ids = b.column(0).as_string::<i32>();
        for row in 0..b.num_rows() {
            seen += 1;
            let golden = by_id[ids.value(row)];
            for (i, (key, expr)) in checks.iter().enumerate() {
                let col = b.column(i + 1).as_primitive::<Float64Type>();
                let expected = golden[*key]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{key} missing"));
                let got = (!col.is_null(row)).then(|| col.value(row));
                if got.is_none_or(|g| (g - expected).abs() > RATIO) {
                    failures.push(format!(
                        "{}: {expr} = {got:?}, expected {expected}",
                        ids.value(row)
                    ));
                }
            }
        }
    }
    assert_eq!(seen, rows.len());
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn as_json_text(v: &Value) -> String {
    // Trajectories are stored as JSON values; the functions read JSON text.
    serde_json::to_string(v).expect("serialise")
}

fn as_str(v: &Value) -> String {
    v.as_str().expect("a string").to_string()
}

/// trajectory_metrics.jsonl: the primary keys of every case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trajectory_metrics() {
    let rows = jsonl("trajectory_metrics.jsonl");
    assert!(!rows.is_empty());
    check_rows(
        &rows,
        &[
            ("id", as_str),
            ("predicted_trajectory", as_json_text),
            ("reference_trajectory", as_json_text),
            ("tool_name", as_str),
        ],
        &[
            (
                "trajectory_exact_match",
                "trajectory_exact_match(predicted_trajectory, reference_trajectory)",
            ),
            (
                "trajectory_in_order_match",
                "trajectory_in_order_match(predicted_trajectory, reference_trajectory)",
            ),
            (
                "trajectory_any_order_match",
                "trajectory_any_order_match(predicted_trajectory, reference_trajectory)",
            ),
            (
                "trajectory_precision",
                "trajectory_precision(predicted_trajectory, reference_trajectory)",
            ),
            (
                "trajectory_recall",
                "trajectory_recall(predicted_trajectory, reference_trajectory)",
            ),
            (
                "trajectory_single_tool_use",
                "trajectory_single_tool_use(predicted_trajectory, tool_name)",
            ),
        ],
    )
    .await;
}

/// tool_call_metrics.jsonl: the primary keys of every case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_call_metrics() {
    let rows = jsonl("tool_call_metrics.jsonl");
    assert!(!rows.is_empty());
    check_rows(
        &rows,
        &[
            ("id", as_str),
            ("prediction", as_str),
            ("reference", as_str),
        ],
        &[
            ("tool_call_valid", "tool_call_valid(prediction)"),
            ("tool_name_match", "tool_name_match(prediction, reference)"),
            (
                "tool_parameter_key_match",
                "tool_parameter_key_match(prediction, reference)",
            ),
            (
                "tool_parameter_kv_match",
                "tool_parameter_kv_match(prediction, reference)",
            ),
        ],
    )
    .await;
}
