//! Agents scored from OpenTelemetry traces: `read_otlp` over the sample traces (written by
//! the OpenTelemetry Python SDK's own OTLP encoder, `data/generate_traces.py`), over
//! OpenInference spans, over 64-bit integers written as numbers, over a malformed line and
//! over an S3 prefix; `trajectory_agg` rebuilding the trajectories of `data/agents.jsonl`
//! across partitions.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Float64Type, Int64Type};
use datafusion::prelude::SessionContext;
use serde_json::Value;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn path(rel: &str) -> String {
    root().join(rel).display().to_string()
}

async fn context(partitions: usize, batch_size: usize) -> SessionContext {
    use datafusion::execution::object_store::DefaultObjectStoreRegistry;
    let options = evalsql::session::SessionOptions {
        batch_size: Some(batch_size),
        target_partitions: Some(partitions),
        ..Default::default()
    };
    evalsql::session::new_context(&options, Arc::new(DefaultObjectStoreRegistry::new()))
        .await
        .expect("session")
}

async fn query(ctx: &SessionContext, sql: &str) -> Vec<RecordBatch> {
    ctx.sql(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .collect()
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn strings(batches: &[RecordBatch], col: usize) -> Vec<Option<String>> {
    batches
        .iter()
        .flat_map(|b| {
            let c = datafusion::arrow::compute::cast(
                b.column(col),
                &datafusion::arrow::datatypes::DataType::Utf8,
            )
            .unwrap();
            c.as_string::<i32>()
                .iter()
                .map(|v| v.map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The spans of the sample traces, read independently with serde_json: (trace, span) →
/// the span object and its service name.
fn spans_in(file: &str) -> HashMap<(String, String), (Value, String)> {
    let mut out = HashMap::new();
    for line in std::fs::read_to_string(root().join(file)).unwrap().lines() {
        let request: Value = serde_json::from_str(line).unwrap();
        for rs in request["resourceSpans"].as_array().unwrap() {
            let service = rs["resource"]["attributes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["key"] == "service.name")
                .map(|a| a["value"]["stringValue"].as_str().unwrap().to_string())
                .unwrap();
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for s in ss["spans"].as_array().unwrap() {
                    let key = (
                        s["traceId"].as_str().unwrap().to_string(),
                        s["spanId"].as_str().unwrap().to_string(),
                    );
                    out.insert(key, (s.clone(), service.clone()));
                }
            }
        }
    }
    out
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sample_span_is_read_with_its_genai_columns() {
    let mut expected = spans_in("data/traces/planner-v2.jsonl");
    expected.extend(spans_in("data/traces/react-v1.jsonl"));
    assert_eq!(expected.len(), 314);
    let ctx = context(3, 17).await;
    let batches = query(
        &ctx,
        &format!(
            "SELECT trace_id, span_id, parent_span_id, name, kind, \
             CAST(start_time AS BIGINT), CAST(end_time AS BIGINT), duration_ms, status_code, \
             status_message, service_name, operation_name, model, agent_name, conversation_id, \
             tool_name, tool_call_id, tool_arguments, tool_result, input_tokens, output_tokens, \
             attributes FROM read_otlp('{}')",
            path("data/traces")
        ),
    )
    .await;
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(rows, expected.len());
    let text = |v: Option<&Value>| v.map(|v| v["stringValue"].as_str().unwrap().to_string());
    let int =
        |v: Option<&Value>| v.map(|v| v["intValue"].as_str().unwrap().parse::<i64>().unwrap());
    let kinds = [
        "UNSPECIFIED",
        "INTERNAL",
        "SERVER",
        "CLIENT",
        "PRODUCER",
        "CONSUMER",
    ];
    let codes = ["UNSET", "OK", "ERROR"];
    let mut checked = 0;
    for b in &batches {
        let s = |i: usize| b.column(i).as_string::<i32>();
        let i64s = |i: usize| b.column(i).as_primitive::<Int64Type>();
        for row in 0..b.num_rows() {
            let key = (s(0).value(row).to_string(), s(1).value(row).to_string());
            let (span, service) = &expected[&key];
            let opt = |i: usize| (!b.column(i).is_null(row)).then(|| s(i).value(row).to_string());
            let oint = |i: usize| (!b.column(i).is_null(row)).then(|| i64s(i).value(row));
            assert_eq!(opt(2), span["parentSpanId"].as_str().map(str::to_string));
            assert_eq!(s(3).value(row), span["name"]);
            assert_eq!(
                s(4).value(row),
                kinds[span["kind"].as_u64().unwrap() as usize]
            );
            let start: i64 = span["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
            let end: i64 = span["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
            assert_eq!((i64s(5).value(row), i64s(6).value(row)), (start, end));
            assert_eq!(
                b.column(7).as_primitive::<Float64Type>().value(row),
                (end - start) as f64 / 1e6
            );
            let code = span["status"]["code"].as_u64().unwrap_or(0) as usize;
            assert_eq!(s(8).value(row), codes[code]);
            assert_eq!(
                opt(9),
                span["status"]["message"].as_str().map(str::to_string)
            );
            assert_eq!(opt(10).as_ref(), Some(service));
            assert_eq!(opt(11), text(attribute(span, "gen_ai.operation.name")));
            assert_eq!(opt(12), text(attribute(span, "gen_ai.request.model")));
            assert_eq!(opt(13), text(attribute(span, "gen_ai.agent.name")));
            assert_eq!(opt(14), text(attribute(span, "gen_ai.conversation.id")));
            assert_eq!(opt(15), text(attribute(span, "gen_ai.tool.name")));
            assert_eq!(opt(16), text(attribute(span, "gen_ai.tool.call.id")));
            assert_eq!(opt(17), text(attribute(span, "gen_ai.tool.call.arguments")));
            assert_eq!(opt(18), text(attribute(span, "gen_ai.tool.call.result")));
            assert_eq!(oint(19), int(attribute(span, "gen_ai.usage.input_tokens")));
            assert_eq!(oint(20), int(attribute(span, "gen_ai.usage.output_tokens")));
            // attributes: every attribute, as plain JSON.
            let attrs: Value = serde_json::from_str(s(21).value(row)).unwrap();
            assert_eq!(
                attrs.as_object().unwrap().len(),
                span["attributes"].as_array().unwrap().len()
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 314);
}

/// `trajectory_agg` rebuilds each run's predicted trajectory from its tool spans, whatever
/// the partitioning and batch size (partial states merge in start-time order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trajectory_agg_rebuilds_the_agents_trajectories() {
    for (partitions, batch_size) in [(1, 8192), (4, 3), (3, 1)] {
        let ctx = context(partitions, batch_size).await;
        let batches = query(
            &ctx,
            &format!(
                "WITH s AS (SELECT * FROM read_otlp('{}')), \
                 runs AS (SELECT trace_id, agent_name, conversation_id FROM s \
                          WHERE operation_name = 'invoke_agent'), \
                 t AS (SELECT trace_id, \
                       trajectory_agg(tool_name, tool_arguments ORDER BY start_time) AS traj \
                       FROM s GROUP BY trace_id) \
                 SELECT r.agent_name, r.conversation_id, t.traj, a.predicted_trajectory \
                 FROM runs r JOIN t ON r.trace_id = t.trace_id \
                 JOIN '{}' a ON a.id = r.conversation_id AND a.agent = r.agent_name",
                path("data/traces"),
                path("data/agents.jsonl")
            ),
        )
        .await;
        let (got, want) = (strings(&batches, 2), strings(&batches, 3));
        assert_eq!(
            got.len(),
            60,
            "every run joins its reference ({partitions} partitions)"
        );
        for (g, w) in got.iter().zip(&want) {
            let g: Value = serde_json::from_str(g.as_ref().unwrap()).unwrap();
            let w: Value = serde_json::from_str(w.as_ref().unwrap()).unwrap();
            assert_eq!(g, w, "{partitions} partitions, batches of {batch_size}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trajectory_agg_orders_skips_and_refuses() {
    let ctx = context(2, 8192).await;
    let batches = query(
        &ctx,
        "SELECT trajectory_agg(n, a ORDER BY t DESC) AS down, \
                trajectory_agg(n, a ORDER BY t) AS up FROM (VALUES \
           (1, 'search', '{\"q\": \"x\"}'), (2, NULL, '{}'), (3, 'fetch', NULL), \
           (4, 'answer', '[1, 2]')) AS v(t, n, a)",
    )
    .await;
    assert_eq!(
        strings(&batches, 1)[0].as_deref(),
        Some(
            "[{\"tool_name\": \"search\", \"tool_input\": {\"q\": \"x\"}}, {\"tool_name\": \
             \"fetch\", \"tool_input\": {}}, {\"tool_name\": \"answer\", \"tool_input\": [1, 2]}]"
        )
    );
    let down: Value = serde_json::from_str(strings(&batches, 0)[0].as_deref().unwrap()).unwrap();
    assert_eq!(down[0]["tool_name"], "answer");
    // No tool call: an empty trajectory.
    let empty = query(
        &ctx,
        "SELECT trajectory_agg(n, a ORDER BY t) FROM (VALUES (1, CAST(NULL AS VARCHAR), '{}')) \
         AS v(t, n, a)",
    )
    .await;
    assert_eq!(strings(&empty, 0)[0].as_deref(), Some("[]"));
    let err = ctx
        .sql("SELECT trajectory_agg(n, a ORDER BY t) FROM (VALUES (1, 'f', '{oops')) AS v(t, n, a)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("trajectory_agg: the arguments \"{oops\" of tool \"f\" are not JSON"),
        "{err}"
    );
}

/// OpenInference (Arize Phoenix) spans fill the same columns from their own attribute names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openinference_spans_fill_the_same_columns() {
    let ctx = context(2, 8192).await;
    let file = path("tests/fixtures/otlp/openinference.jsonl");
    let batches = query(
        &ctx,
        &format!(
            "SELECT operation_name, tool_name, tool_call_id, tool_arguments, tool_result, model, \
             agent_name, conversation_id, CAST(input_tokens AS VARCHAR), \
             CAST(output_tokens AS VARCHAR), status_code \
             FROM read_otlp('{file}') ORDER BY start_time"
        ),
    )
    .await;
    let col = |i: usize| strings(&batches, i);
    let ops = col(0);
    assert!(ops.contains(&Some("invoke_agent".into())));
    assert!(ops.contains(&Some("chat".into())));
    let tools: Vec<_> = col(1).into_iter().flatten().collect();
    assert_eq!(
        tools.len(),
        ops.iter()
            .filter(|o| o.as_deref() == Some("execute_tool"))
            .count()
    );
    assert!(tools.contains(&"get_orders".to_string()), "{tools:?}");
    // Arguments come from input.value: the values, not tool.parameters' schema.
    let args: Vec<_> = col(3).into_iter().flatten().collect();
    assert!(
        args.contains(&"{\"customer_id\": \"c42\", \"status\": \"pending\"}".to_string()),
        "{args:?}"
    );
    assert!(
        col(4)
            .into_iter()
            .flatten()
            .any(|r| r.contains("\"status\": \"ok\""))
    );
    assert!(col(2).into_iter().flatten().any(|id| id == "call_a11_1"));
    assert!(
        col(5).into_iter().flatten().count() > 0,
        "llm.model_name fills model"
    );
    assert!(
        col(6).into_iter().flatten().count() > 0,
        "agent.name fills agent_name"
    );
    assert!(
        col(7).into_iter().flatten().any(|c| c == "a11"),
        "session.id fills conversation_id"
    );
    assert!(
        col(8).into_iter().flatten().count() > 0,
        "llm.token_count.prompt"
    );
    assert!(
        col(9).into_iter().flatten().count() > 0,
        "llm.token_count.completion"
    );
    assert!(col(10).into_iter().flatten().any(|c| c == "ERROR"));
}

/// 64-bit integers written as JSON numbers read the same as the decimal strings OTLP/JSON
/// prescribes (the fixture is one trace of the sample, rewritten with numbers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integers_as_numbers_read_like_strings() {
    let ctx = context(1, 8192).await;
    let cols = "trace_id, span_id, parent_span_id, name, kind, start_time, end_time, duration_ms, \
                status_code, status_message, service_name, attributes, operation_name, model, \
                tool_name, tool_arguments, input_tokens, output_tokens";
    let numbers = query(
        &ctx,
        &format!(
            "SELECT {cols} FROM read_otlp('{}') ORDER BY span_id",
            path("tests/fixtures/otlp/numbers.jsonl")
        ),
    )
    .await;
    let trace = strings(&numbers, 0)[0].clone().unwrap();
    let strings_form = query(
        &ctx,
        &format!(
            "SELECT {cols} FROM read_otlp('{}') WHERE trace_id = '{trace}' ORDER BY span_id",
            path("data/traces")
        ),
    )
    .await;
    let n: usize = numbers.iter().map(RecordBatch::num_rows).sum();
    assert!(n >= 3);
    for i in 0..18 {
        assert_eq!(
            strings(&numbers, i),
            strings(&strings_form, i),
            "column {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_line_is_an_error_naming_file_and_line() {
    let ctx = context(1, 8192).await;
    let file = path("tests/fixtures/otlp/malformed.jsonl");
    let err = ctx
        .sql(&format!("SELECT count(*) FROM read_otlp('{file}')"))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("read_otlp: "), "{err}");
    assert!(err.contains("malformed.jsonl line 2"), "{err}");
    // Nothing there, and a wrong argument, are plain errors too.
    for sql in [
        "SELECT * FROM read_otlp('/nonexistent/evalsql-traces/')".to_string(),
        "SELECT * FROM read_otlp(42)".to_string(),
    ] {
        let err = match ctx.sql(&sql).await {
            Ok(df) => df.collect().await.unwrap_err().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("read_otlp("), "{sql}: {err}");
    }
}

/// `queries/traces.sql` scores the traced agents exactly as `queries/agents.sql` scores the
/// same runs from their JSON columns, where the two overlap.
#[test]
fn the_traces_query_equals_the_agents_query() {
    let run = |file: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_evalsql"))
            .current_dir(root())
            .args(["--format", "csv", "-f", file])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let last_table = |out: &str| -> Vec<HashMap<String, String>> {
        // The per-agent table is the last one printed; its header starts with `agent,`.
        let lines: Vec<&str> = out.lines().collect();
        let start = lines.iter().rposition(|l| l.starts_with("agent,")).unwrap();
        let mut lines = lines[start..].iter();
        let header: Vec<String> = lines
            .next()
            .unwrap()
            .split(',')
            .map(str::to_string)
            .collect();
        lines
            .map(|l| {
                header
                    .iter()
                    .cloned()
                    .zip(l.split(',').map(str::to_string))
                    .collect()
            })
            .collect()
    };
    let traces = last_table(&run("queries/traces.sql"));
    let agents = last_table(&run("queries/agents.sql"));
    assert_eq!(traces.len(), 2);
    assert_eq!(traces.len(), agents.len());
    let mut shared = 0;
    for (t, a) in traces.iter().zip(&agents) {
        for (k, v) in t {
            if let Some(w) = a.get(k) {
                assert_eq!(v, w, "{k} of {}", t["agent"]);
                shared += 1;
            }
        }
    }
    assert!(shared >= 2 * 13, "only {shared} shared columns");
}
