//! How fast a monitor scores what arrives: `cargo bench --bench monitor`.
//!
//! The real binary (release under `cargo bench`) runs `evalsql serve --otlp --store` on a
//! fresh store with one monitor of text metrics only (`f1_score`, `rouge_l`, `bleu` over each
//! trace's answer; no judge), `EVERY '1 second' AFTER IDLE '2 seconds'`. A sender posts
//! traces of three spans (an agent span, a chat span, a tool span; about 1 KB) over OTLP/HTTP
//! protobuf at a steady rate for `EVALSQL_BENCH_SECS` (default 30) seconds, 200 traces a
//! request. At the end it prints, from the store's own tables:
//!
//! - the traces scored per second of run time (the scoring alone: rows written over the
//!   runs' durations), and of wall time (all traces sent over the time until the last
//!   scored);
//! - the time from a trace's last span to its score row being committed (the run's end):
//!   p50, p99 and max, beside the goal, AFTER IDLE + EVERY + 2 s = 5 s.
//!
//! `EVALSQL_BENCH_RATE` sets the traces sent per second (default 2000).
//!
//! Then the judge engine under a monitor: the stub judge of `tests/support/stub_judge/` on
//! loopback (50 ms a call, 32 calls in flight, no cache), `EVALSQL_BENCH_JUDGED` traces
//! (default 4000) with distinct answers sent at once, and a monitor calling `fluency` on
//! each. It prints the judge calls per second of the monitor's runs beside the same calls
//! made by one batch query over the same spans (`evalsql --store -c`, process start
//! included) and the ideal of both, 32 / 50 ms = 640 calls/s.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value as V};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

#[path = "support/serve.rs"]
mod serve;
use serve::Server;

#[path = "../tests/support/stub_judge/mod.rs"]
mod stub_judge;
use stub_judge::{StubConfig, StubJudge};

const LATENCY: Duration = Duration::from_millis(50);
const LIMIT: u64 = 32;

const TRACES_PER_REQUEST: u64 = 200;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn kv(key: &str, v: V) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// Request `n`: traces `n * 200 ..`, three spans each; with `distinct`, each answer names
/// its trace (no two judge calls alike).
fn request(n: u64, distinct: bool) -> Vec<u8> {
    let now = now_nanos();
    let answers = [
        "Paris is the capital and largest city of France.",
        "The capital of France is Paris, on the Seine.",
        "Lyon.",
    ];
    let mut spans = Vec::new();
    for t in 0..TRACES_PER_REQUEST {
        let trace = n * TRACES_PER_REQUEST + t + 1;
        let trace_id = u128::from(trace).to_be_bytes().to_vec();
        let span = |k: u64, name: &str, attributes: Vec<KeyValue>| Span {
            trace_id: trace_id.clone(),
            span_id: (trace << 4 | k).to_be_bytes().to_vec(),
            parent_span_id: if k == 1 {
                Vec::new()
            } else {
                (trace << 4 | 1).to_be_bytes().to_vec()
            },
            name: name.into(),
            kind: 1,
            start_time_unix_nano: now,
            end_time_unix_nano: now + 1_000_000,
            attributes,
            ..Default::default()
        };
        let answer = if distinct {
            format!("{} (answer {trace})", answers[(trace % 3) as usize])
        } else {
            answers[(trace % 3) as usize].to_string()
        };
        let messages = |role: &str, text: &str| {
            format!(r#"[{{"role":"{role}","parts":[{{"type":"text","content":"{text}"}}]}}]"#)
        };
        spans.push(span(
            1,
            "invoke_agent assistant",
            vec![kv(
                "gen_ai.operation.name",
                V::StringValue("invoke_agent".into()),
            )],
        ));
        spans.push(span(
            2,
            "chat gpt-4o",
            vec![
                kv("gen_ai.operation.name", V::StringValue("chat".into())),
                kv(
                    "gen_ai.request.model",
                    V::StringValue(format!("model-{}", trace % 2)),
                ),
                kv(
                    "gen_ai.input.messages",
                    V::StringValue(messages("user", "What is the capital of France?")),
                ),
                kv(
                    "gen_ai.output.messages",
                    V::StringValue(messages("assistant", &answer)),
                ),
            ],
        ));
        spans.push(span(
            3,
            "execute_tool search",
            vec![
                kv(
                    "gen_ai.operation.name",
                    V::StringValue("execute_tool".into()),
                ),
                kv("gen_ai.tool.name", V::StringValue("search".into())),
            ],
        ));
    }
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", V::StringValue("bench".into()))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

fn start(dir: &std::path::Path) -> Server {
    let init = dir.join("init.sql");
    std::fs::write(
        &init,
        "CREATE MONITOR answers EVERY '1 second' AFTER IDLE '2 seconds' AS
           SELECT trace_id, max(model) AS model,
                  f1_score(max(output_text), 'Paris is the capital of France.') AS f1,
                  rouge_l(max(output_text), 'Paris is the capital of France.') AS rouge_l,
                  bleu(max(output_text), 'Paris is the capital of France.') AS bleu,
                  count(*) AS spans
           FROM spans GROUP BY trace_id;",
    )
    .unwrap();
    serve::start([
        OsStr::new("--store"),
        dir.join("store").as_os_str(),
        OsStr::new("--init"),
        init.as_os_str(),
    ])
}

fn post(port: u16, body: &[u8]) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// One row of `sql` over the store, by the CLI, as JSON.
fn query(store: &std::path::Path, sql: &str) -> serde_json::Value {
    query_with_env(store, sql, &[])
}

fn query_with_env(store: &std::path::Path, sql: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .envs(env.iter().copied())
        .arg("--store")
        .arg(store)
        .args(["--format", "ndjson", "-c", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(out.stdout.split(|&b| b == b'\n').next().unwrap_or_default())
        .unwrap_or_default()
}

fn main() {
    let secs = env_num("EVALSQL_BENCH_SECS", 30);
    let rate = env_num("EVALSQL_BENCH_RATE", 2000).max(TRACES_PER_REQUEST);
    let dir = std::env::temp_dir().join(format!("evalsql-bench-monitor-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let server = start(&dir);
    let store = dir.join("store");
    let every = Duration::from_secs_f64(TRACES_PER_REQUEST as f64 / rate as f64);
    let began = Instant::now();
    let mut n = 0;
    while began.elapsed() < Duration::from_secs(secs) {
        let at = began + every * n as u32;
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        assert_eq!(post(server.1, &request(n, false)), 200);
        n += 1;
    }
    let sent = n * TRACES_PER_REQUEST;
    let sending = began.elapsed();
    // Until every trace is scored (or a minute past the end).
    loop {
        let got = query(&store, "SELECT count(*) AS n FROM monitors.answers");
        let scored = got["n"].as_u64().unwrap_or(0);
        if scored >= sent || began.elapsed() > sending + Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let wall = began.elapsed();
    let peak = server.rss("VmHWM");
    drop(server);
    let runs = query(
        &store,
        "SELECT sum(rows_written) AS rows, \
                sum(CAST(ended AS BIGINT) - CAST(started AS BIGINT)) / 1e6 AS seconds, \
                count(*) FILTER (WHERE rows_written > 0) AS runs \
         FROM monitor_runs",
    );
    let lag = query(
        &store,
        "WITH last AS (SELECT trace_id, max(CAST(ingested_at AS BIGINT)) AS t FROM spans GROUP BY trace_id), \
              scored AS (SELECT a.trace_id, CAST(r.ended AS BIGINT) AS t \
                         FROM monitors.answers a JOIN monitor_runs r ON a.run_id = r.run_id) \
         SELECT approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY (s.t - l.t) / 1e6) AS p50, \
                approx_percentile_cont(0.99) WITHIN GROUP (ORDER BY (s.t - l.t) / 1e6) AS p99, \
                max((s.t - l.t) / 1e6) AS worst \
         FROM scored s JOIN last l ON s.trace_id = l.trace_id",
    );
    let rows = runs["rows"].as_f64().unwrap_or(0.0);
    let seconds = runs["seconds"].as_f64().unwrap_or(f64::NAN);
    println!(
        "monitor: {sent} traces (3 spans each) sent at {rate}/s for {:.1} s; {rows} scored",
        sending.as_secs_f64()
    );
    println!(
        "  scoring: {:.0} traces/s of run time ({} runs with rows, {seconds:.2} s running); \
         {:.0} traces/s of wall time",
        rows / seconds,
        runs["runs"],
        rows / wall.as_secs_f64()
    );
    println!(
        "  last span -> score row committed: p50 {:.2} s, p99 {:.2} s, max {:.2} s \
         (goal: AFTER IDLE + EVERY + 2 s = 5 s)",
        lag["p50"].as_f64().unwrap_or(f64::NAN),
        lag["p99"].as_f64().unwrap_or(f64::NAN),
        lag["worst"].as_f64().unwrap_or(f64::NAN)
    );
    println!("  server memory peak {} MiB", peak >> 20);
    let _ = std::fs::remove_dir_all(&dir);
    judged();
}

const JUDGE_SETTINGS: &str = "SET evalsql.judge.max_concurrency = 32; \
     SET evalsql.judge.cache = 'off';";

/// The judge engine's calls per second in a monitor's runs and in one batch query.
fn judged() {
    let traces = env_num("EVALSQL_BENCH_JUDGED", 4000).max(TRACES_PER_REQUEST);
    let stub = StubJudge::start_in_background(StubConfig {
        latency: LATENCY,
        ..StubConfig::default()
    });
    let base_url = stub.base_url();
    let env = [
        ("OPENAI_BASE_URL", base_url.as_str()),
        ("EVALSQL_JUDGE_MODEL", "bench-judge"),
    ];
    let dir = std::env::temp_dir().join(format!("evalsql-bench-judged-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let init = dir.join("init.sql");
    std::fs::write(
        &init,
        format!(
            "{JUDGE_SETTINGS}
             CREATE MONITOR judged EVERY '1 second' AFTER IDLE '2 seconds' AS
               SELECT trace_id, fluency(max(output_text)) AS fluency
               FROM spans GROUP BY trace_id;"
        ),
    )
    .unwrap();
    let store = dir.join("store");
    let server = serve::start_with_env(
        [
            OsStr::new("--store"),
            store.as_os_str(),
            OsStr::new("--init"),
            init.as_os_str(),
        ],
        &env,
    );
    let before = stub.requests();
    for n in 0..traces / TRACES_PER_REQUEST {
        assert_eq!(post(server.1, &request(1_000_000 + n, true)), 200);
    }
    let sent = traces / TRACES_PER_REQUEST * TRACES_PER_REQUEST;
    let began = Instant::now();
    loop {
        let got = query(&store, "SELECT count(*) AS n FROM monitors.judged");
        if got["n"].as_u64().unwrap_or(0) >= sent || began.elapsed() > Duration::from_secs(300) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(server);
    let monitor_calls = stub.requests() - before;
    let runs = query(
        &store,
        "SELECT sum(judge_calls) AS calls, \
                sum(CAST(ended AS BIGINT) - CAST(started AS BIGINT)) / 1e6 AS seconds \
         FROM monitor_runs WHERE judge_calls > 0",
    );
    let seconds = runs["seconds"].as_f64().unwrap_or(f64::NAN);
    let ideal = LIMIT as f64 / LATENCY.as_secs_f64();

    // The same calls as one batch query over the same spans.
    let before = stub.requests();
    let started = Instant::now();
    let batch = query_with_env(
        &store,
        &format!(
            "{JUDGE_SETTINGS} SELECT count(fluency(o)) AS n FROM \
             (SELECT max(output_text) AS o FROM spans GROUP BY trace_id)"
        ),
        &env,
    );
    let batch_took = started.elapsed().as_secs_f64();
    let batch_calls = stub.requests() - before;
    println!(
        "judge under a monitor: {sent} traces, stub judge {} ms a call, {LIMIT} in flight, no cache",
        LATENCY.as_millis()
    );
    println!(
        "  monitor runs: {monitor_calls} calls in {seconds:.2} s of runs = {:.0} calls/s",
        monitor_calls as f64 / seconds
    );
    println!(
        "  one batch query: {batch_calls} calls ({} rows) in {batch_took:.2} s = {:.0} calls/s",
        batch["n"],
        batch_calls as f64 / batch_took
    );
    println!(
        "  ideal {ideal:.0} calls/s; monitor / batch = {:.3}",
        (monitor_calls as f64 / seconds) / (batch_calls as f64 / batch_took)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
