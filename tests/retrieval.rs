//! Retrieval and Azure agent metrics against golden data made by the reference packages
//! (`tests/golden/make_retrieval_golden.py`: pytrec-eval-terrier for the ranked-list
//! measures, azure-ai-evaluation 1.18.10 for `document_retrieval` and
//! `task_navigation_efficiency`), every value within 1e-12, in every input encoding.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int64Builder, ListBuilder, MapBuilder, RecordBatch, StringArray,
    StringBuilder, StructArray, StructBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields, Float64Type, Int64Type, Schema};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use serde_json::Value;

const TOL: f64 = 1e-12;

fn golden(name: &str) -> Vec<serde_json::Map<String, Value>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    std::fs::read_to_string(path)
        .expect("golden file")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match serde_json::from_str(l).expect("golden JSON") {
            Value::Object(m) => m,
            other => panic!("golden row is not an object: {other}"),
        })
        .collect()
}

/// A golden number: JSON numbers, and "nan" / "inf" / "-inf" as the generator writes them.
fn number(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap(),
        Value::String(s) if s == "nan" => f64::NAN,
        Value::String(s) if s == "inf" => f64::INFINITY,
        Value::String(s) if s == "-inf" => f64::NEG_INFINITY,
        other => panic!("not a golden number: {other}"),
    }
}

/// A row's field; absent is null.
fn field<'a>(r: &'a serde_json::Map<String, Value>, key: &str) -> &'a Value {
    r.get(key).unwrap_or(&Value::Null)
}

fn same(got: f64, want: f64) -> bool {
    (got.is_nan() && want.is_nan()) || got == want || (got - want).abs() <= TOL
}

fn sql_text(v: &str) -> String {
    format!("'{}'", v.replace('\'', "''"))
}

async fn context_with(batch: RecordBatch) -> SessionContext {
    let ctx = evalsql::session::default_context().await.expect("session");
    ctx.register_table(
        "cases",
        Arc::new(MemTable::try_new(batch.schema(), vec![vec![batch]]).expect("table")),
    )
    .expect("register");
    ctx
}

// ---- trec_eval measures -------------------------------------------------------------------

/// The three ways a user may hold judgements: JSON text, a map, a list of {id, relevance}.
#[derive(Clone, Copy, Debug)]
enum Encoding {
    Text,
    Map,
    ListOfStructs,
}

fn trec_batch(rows: &[serde_json::Map<String, Value>], encoding: Encoding) -> RecordBatch {
    let mut ids = StringBuilder::new();
    let mut ks = Int64Builder::new();
    let mut retrieved_text = StringBuilder::new();
    let mut retrieved_list = ListBuilder::new(StringBuilder::new());
    let mut qrels_text = StringBuilder::new();
    let mut qrels_map = MapBuilder::new(None, StringBuilder::new(), Int64Builder::new());
    let struct_fields = Fields::from(vec![
        Field::new("id", DataType::Utf8, true),
        Field::new("relevance", DataType::Int64, true),
    ]);
    let mut qrels_list = ListBuilder::new(StructBuilder::from_fields(struct_fields, 0));
    for r in rows {
        if r.get("omitted").is_some_and(|o| o == true) {
            continue;
        }
        for k in r["k"].as_array().unwrap() {
            ids.append_value(r["id"].as_str().unwrap());
            ks.append_value(k.as_i64().unwrap());
            retrieved_text.append_value(r["retrieved"].to_string());
            for d in r["retrieved"].as_array().unwrap() {
                retrieved_list.values().append_value(d.as_str().unwrap());
            }
            retrieved_list.append(true);
            qrels_text.append_value(r["qrels"].to_string());
            for (d, g) in r["qrels"].as_object().unwrap() {
                qrels_map.keys().append_value(d);
                qrels_map.values().append_value(g.as_i64().unwrap());
                let s = qrels_list.values();
                s.field_builder::<StringBuilder>(0).unwrap().append_value(d);
                s.field_builder::<Int64Builder>(1)
                    .unwrap()
                    .append_value(g.as_i64().unwrap());
                s.append(true);
            }
            qrels_map.append(true).unwrap();
            qrels_list.append(true);
        }
    }
    let (retrieved, qrels): (ArrayRef, ArrayRef) = match encoding {
        Encoding::Text => (
            Arc::new(retrieved_text.finish()),
            Arc::new(qrels_text.finish()),
        ),
        Encoding::Map => (
            Arc::new(retrieved_list.finish()),
            Arc::new(qrels_map.finish()),
        ),
        Encoding::ListOfStructs => (
            Arc::new(retrieved_list.finish()),
            Arc::new(qrels_list.finish()),
        ),
    };
    let schema = Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("k", DataType::Int64, false),
        Field::new("retrieved", retrieved.data_type().clone(), true),
        Field::new("qrels", qrels.data_type().clone(), true),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(ids.finish()),
            Arc::new(ks.finish()),
            retrieved,
            qrels,
        ],
    )
    .unwrap()
}

async fn check_trec(encoding: Encoding) {
    let rows = golden("retrieval_metrics.jsonl");
    let by_id: HashMap<&str, &serde_json::Map<String, Value>> = rows
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r))
        .collect();
    let ctx = context_with(trec_batch(&rows, encoding)).await;
    let batches = ctx
        .sql(
            "SELECT id, k, ndcg_at_k(retrieved, qrels, k), precision_at_k(retrieved, qrels, k), \
             recall_at_k(retrieved, qrels, k), hit_rate_at_k(retrieved, qrels, k), \
             reciprocal_rank(retrieved, qrels), average_precision(retrieved, qrels) FROM cases",
        )
        .await
        .expect("plan")
        .collect()
        .await
        .expect("execute");
    let (mut checked, mut failures) = (0, Vec::new());
    for b in &batches {
        let ids = b.column(0).as_string::<i32>();
        let ks = b.column(1).as_primitive::<Int64Type>();
        for row in 0..b.num_rows() {
            let g = by_id[ids.value(row)];
            let k = ks.value(row);
            let keys = [
                format!("ndcg_cut_{k}"),
                format!("P_{k}"),
                format!("recall_{k}"),
                format!("success_{k}"),
                "recip_rank".to_string(),
                "map".to_string(),
            ];
            for (i, key) in keys.iter().enumerate() {
                let col = b.column(i + 2).as_primitive::<Float64Type>();
                let want = number(&g[key]);
                let got = (!col.is_null(row)).then(|| col.value(row));
                checked += 1;
                if got.is_none_or(|v| !same(v, want)) {
                    failures.push(format!(
                        "{} {key}: {got:?}, expected {want}",
                        ids.value(row)
                    ));
                }
            }
        }
    }
    assert!(checked > 6000, "only {checked} values checked");
    assert!(
        failures.is_empty(),
        "{encoding:?}: {} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranked_metrics_equal_trec_eval_from_json_text() {
    check_trec(Encoding::Text).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranked_metrics_equal_trec_eval_from_lists_and_maps() {
    check_trec(Encoding::Map).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranked_metrics_equal_trec_eval_from_lists_of_structs() {
    check_trec(Encoding::ListOfStructs).await;
}

// ---- document_retrieval -------------------------------------------------------------------

const DR_FIELDS: [(&str, &str); 9] = [
    ("ndcg_at_3", "ndcg@3"),
    ("xdcg_at_3", "xdcg@3"),
    ("fidelity", "fidelity"),
    ("top1_relevance", "top1_relevance"),
    ("top3_max_relevance", "top3_max_relevance"),
    ("holes", "holes"),
    ("holes_ratio", "holes_ratio"),
    ("total_retrieved_documents", "total_retrieved_documents"),
    (
        "total_ground_truth_documents",
        "total_ground_truth_documents",
    ),
];

/// Rows SQL cannot express as the evaluator was called: a missing input is SQL NULL (NULL
/// out, not an error), and JSON text cannot carry a NaN or infinite score.
fn dr_expressible(r: &serde_json::Map<String, Value>) -> bool {
    let missing =
        field(r, "retrieval_ground_truth").is_null() || field(r, "retrieved_documents").is_null();
    let non_finite = field(r, "retrieved_documents")
        .as_array()
        .is_some_and(|docs| docs.iter().any(|d| d["relevance_score"].is_string()));
    // evalsql refuses retrieved_documents that are not an array, which the evaluator
    // silently scores as no documents.
    let not_a_list = !field(r, "retrieved_documents").is_array();
    !missing && !non_finite && !not_a_list
}

fn dr_call(r: &serde_json::Map<String, Value>, truth: &str, docs: &str) -> String {
    let range = match (
        r.get("ground_truth_label_min"),
        r.get("ground_truth_label_max"),
    ) {
        (None, None) => String::new(),
        (lo, hi) => format!(
            ", {}, {}",
            lo.map_or("0".to_string(), Value::to_string),
            hi.map_or("4".to_string(), Value::to_string)
        ),
    };
    format!("document_retrieval({truth}, {docs}{range})")
}

fn check_dr_struct(
    id: &str,
    s: &StructArray,
    row: usize,
    props: &Value,
    failures: &mut Vec<String>,
) {
    for (col, key) in DR_FIELDS {
        let c = s.column_by_name(col).unwrap();
        let got = match c.data_type() {
            DataType::Int64 => c.as_primitive::<Int64Type>().value(row) as f64,
            _ => c.as_primitive::<Float64Type>().value(row),
        };
        let want = number(&props[key]);
        if !same(got, want) {
            failures.push(format!("{id} {col}: {got}, expected {want}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn document_retrieval_equals_azures_evaluator() {
    let rows = golden("document_retrieval.jsonl");
    let ctx = evalsql::session::default_context().await.expect("session");
    let (mut values, mut errors, mut failures) = (0, 0, Vec::new());
    for r in rows.iter().filter(|r| dr_expressible(r)) {
        let id = r["id"].as_str().unwrap();
        let call = dr_call(
            r,
            &sql_text(&field(r, "retrieval_ground_truth").to_string()),
            &sql_text(&field(r, "retrieved_documents").to_string()),
        );
        let result = match ctx.sql(&format!("SELECT {call} AS v")).await {
            Ok(df) => df.collect().await,
            Err(e) => Err(e),
        };
        match (r.get("error"), result) {
            (Some(_), Err(e)) => {
                errors += 1;
                assert!(e.to_string().contains("document_retrieval"), "{id}: {e}");
            }
            (Some(want), Ok(_)) => failures.push(format!("{id}: no error, expected {want}")),
            (None, Err(e)) => failures.push(format!("{id}: {e}")),
            (None, Ok(batches)) => {
                values += 1;
                let s = batches[0].column(0).as_struct();
                let props = &r["result"]["document_retrieval_properties"];
                check_dr_struct(id, s, 0, props, &mut failures);
            }
        }
    }
    assert!(
        values > 200 && errors >= 14,
        "{values} values, {errors} errors"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // The same rows as columns (the array path), judgements as a list of structs.
    let ok: Vec<_> = rows
        .iter()
        .filter(|r| dr_expressible(r) && r.get("error").is_none())
        .filter(|r| r.get("ground_truth_label_min").is_none())
        .collect();
    let ids: StringArray = ok.iter().map(|r| r["id"].as_str()).collect();
    let truth: StringArray = ok
        .iter()
        .map(|r| Some(field(r, "retrieval_ground_truth").to_string()))
        .collect();
    let docs: StringArray = ok
        .iter()
        .map(|r| Some(field(r, "retrieved_documents").to_string()))
        .collect();
    let schema = Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("truth", DataType::Utf8, false),
        Field::new("docs", DataType::Utf8, false),
    ]);
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        vec![Arc::new(ids), Arc::new(truth), Arc::new(docs)],
    )
    .unwrap();
    let ctx = context_with(batch).await;
    let batches = ctx
        .sql("SELECT id, document_retrieval(truth, docs) FROM cases")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let by_id: HashMap<&str, _> = ok.iter().map(|r| (r["id"].as_str().unwrap(), *r)).collect();
    let mut seen = 0;
    for b in &batches {
        let ids = b.column(0).as_string::<i32>();
        let s = b.column(1).as_struct();
        for row in 0..b.num_rows() {
            seen += 1;
            let r = by_id[ids.value(row)];
            let props = &r["result"]["document_retrieval_properties"];
            check_dr_struct(ids.value(row), s, row, props, &mut failures);
        }
    }
    assert_eq!(seen, ok.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---- task_navigation_efficiency -----------------------------------------------------------

/// The text a SQL user passes: a string as it is (the evaluator parses strings as JSON),
/// anything else as JSON.
fn as_sql_input(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Rows whose call SQL cannot reproduce, each for a stated reason.
fn tne_expressible(r: &serde_json::Map<String, Value>) -> bool {
    let id = r["id"].as_str().unwrap();
    // A missing input is SQL NULL: the result is NULL, not an error.
    let missing = field(r, "response").is_null() || field(r, "ground_truth").is_null();
    // JSON has no tuple: a two-element array [names, {parameters}] IS the tuple form here,
    // where the evaluator, handed a list, rejects it.
    let list_pair = field(r, "ground_truth_type") == "list"
        && field(r, "ground_truth")
            .as_array()
            .is_some_and(|a| a.len() == 2 && a[0].is_array() && a[1].is_object());
    // The evaluator fails with KeyError on a tool result without a payload; tool results do
    // not enter the metric, so evalsql scores the row.
    let result_key_error = id == "tne-edge-tool-result-without-payload";
    !missing && !list_pair && !result_key_error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_navigation_efficiency_equals_azures_evaluator() {
    let rows = golden("task_navigation_efficiency.jsonl");
    let ctx = evalsql::session::default_context().await.expect("session");
    let (mut values, mut errors, mut failures) = (0, 0, Vec::new());
    for r in rows.iter().filter(|r| tne_expressible(r)) {
        let id = r["id"].as_str().unwrap();
        let mode = match field(r, "matching_mode") {
            Value::String(m) => format!(", {}", sql_text(m)),
            _ => String::new(),
        };
        let sql = format!(
            "SELECT task_navigation_efficiency({}, {}{mode}) AS v",
            sql_text(&as_sql_input(field(r, "response"))),
            sql_text(&as_sql_input(field(r, "ground_truth"))),
        );
        let result = match ctx.sql(&sql).await {
            Ok(df) => df.collect().await,
            Err(e) => Err(e),
        };
        let expected = field(r, "result");
        match (r.get("error"), result) {
            (Some(_), Err(e)) => {
                errors += 1;
                assert!(
                    e.to_string().contains("task_navigation_efficiency"),
                    "{id}: {e}"
                );
            }
            (Some(want), Ok(_)) => failures.push(format!("{id}: no error, expected {want}")),
            (None, Err(e)) => failures.push(format!("{id}: {e}")),
            (None, Ok(batches)) => {
                values += 1;
                let s = batches[0].column(0).as_struct();
                let props = &expected["task_navigation_efficiency_properties"];
                for (col, want) in [
                    ("match", &expected["task_navigation_efficiency"]),
                    ("precision", &props["precision_score"]),
                    ("recall", &props["recall_score"]),
                    ("f1_score", &props["f1_score"]),
                ] {
                    let got = s
                        .column_by_name(col)
                        .unwrap()
                        .as_primitive::<Float64Type>()
                        .value(0);
                    if !same(got, number(want)) {
                        failures.push(format!("{id} {col}: {got}, expected {want}"));
                    }
                }
            }
        }
    }
    assert!(
        values > 250 && errors >= 18,
        "{values} values, {errors} errors"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// k and the label range are checked, and NULL propagates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_k_is_an_error_and_null_is_null() {
    let ctx = evalsql::session::default_context().await.expect("session");
    let err = ctx
        .sql(r#"SELECT ndcg_at_k('["a"]', '{"a": 1}', 0)"#)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ndcg_at_k: k must be at least 1, got 0"),
        "{err}"
    );
    let batches = ctx
        .sql(r#"SELECT precision_at_k(NULL, '{"a": 1}', 3) AS a, recall_at_k('["a"]', '{}', 3) AS b, hit_rate_at_k('["a"]', '{"a": 1}', CAST(NULL AS BIGINT)) AS c"#)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    for i in 0..3 {
        assert!(batches[0].column(i).is_null(0), "column {i}");
    }
}

/// Every golden row the parity tests leave out is asserted here against evalsql's own
/// documented behaviour, so no row goes unchecked: a missing input is SQL NULL, a
/// `retrieved_documents` that is not an array is an error, the two-element
/// `[names, {parameters}]` list is the tuple form, tool results never enter the metric.
/// Only NaN / infinite scores, which JSON text cannot hold, stay out (counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_left_out_of_parity_hold_evalsqls_documented_behaviour() {
    let ctx = evalsql::session::default_context().await.expect("session");
    let text = |v: &Value| match v {
        Value::Null => "NULL".to_string(),
        other => sql_text(&as_sql_input(other)),
    };
    let (mut checked, mut non_finite) = (0, 0);
    for r in golden("document_retrieval.jsonl")
        .iter()
        .filter(|r| !dr_expressible(r))
    {
        let id = r["id"].as_str().unwrap();
        let docs = field(r, "retrieved_documents");
        if docs
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["relevance_score"].is_string()))
        {
            non_finite += 1;
            continue;
        }
        let call = dr_call(r, &text(field(r, "retrieval_ground_truth")), &text(docs));
        let result = ctx
            .sql(&format!("SELECT {call} AS v"))
            .await
            .unwrap()
            .collect()
            .await;
        if field(r, "retrieval_ground_truth").is_null() || docs.is_null() {
            assert!(
                result.unwrap()[0].column(0).is_null(0),
                "{id}: NULL in, NULL out"
            );
        } else {
            let err = result.unwrap_err().to_string();
            assert!(
                err.contains("retrieved_documents must be a JSON array"),
                "{id}: {err}"
            );
        }
        checked += 1;
    }
    for r in golden("task_navigation_efficiency.jsonl")
        .iter()
        .filter(|r| !tne_expressible(r))
    {
        let id = r["id"].as_str().unwrap();
        let sql = format!(
            "SELECT task_navigation_efficiency({}, {}) AS v",
            text(field(r, "response")),
            text(field(r, "ground_truth"))
        );
        let batches = ctx.sql(&sql).await.unwrap().collect().await;
        let batches = batches.unwrap_or_else(|e| panic!("{id}: {e}"));
        let v = batches[0].column(0);
        if field(r, "response").is_null() || field(r, "ground_truth").is_null() {
            assert!(v.is_null(0), "{id}: NULL in, NULL out");
        } else {
            let m = v.as_struct().column_by_name("match").unwrap();
            let m = m.as_primitive::<Float64Type>().value(0);
            assert!(m == 0.0 || m == 1.0, "{id}: scored {m}");
        }
        checked += 1;
    }
    assert_eq!(non_finite, 4, "rows with NaN / infinite scores");
    assert!(checked >= 6, "only {checked} rows checked");
}
