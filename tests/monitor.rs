//! Monitors: `evalsql serve --otlp --store` scoring the traces that arrive, with a monitor
//! defined in `--init` and over the wire. Traces are sent over OTLP/HTTP as the SDKs send
//! them; the stub judge answers the judge calls; the monitor's rows are read by the CLI,
//! as a Delta table by another reader, and over the PostgreSQL wire.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use serde_json::{Value, json};

use crate::otlp::{Otlp, cli, export, kv, start};
use crate::serve::temp_dir;
use crate::stub_judge::{StubConfig, StubJudge};

/// A test's directory, its store and `--init` file, and the judge environment of a stub.
struct Setup {
    dir: std::path::PathBuf,
    store: std::path::PathBuf,
    store_s: String,
    init: std::path::PathBuf,
    judge: Vec<(String, String)>,
}

impl Setup {
    fn new(name: &str, init: &str, stub: Option<&StubJudge>) -> Setup {
        let dir = temp_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        let store = dir.join("store");
        let file = dir.join("init.sql");
        std::fs::write(&file, init).unwrap();
        let judge = match stub {
            None => Vec::new(),
            Some(stub) => vec![
                ("OPENAI_BASE_URL".to_string(), stub.base_url()),
                ("EVALSQL_JUDGE_MODEL".to_string(), "stub-judge".to_string()),
                (
                    "EVALSQL_JUDGE_CACHE".to_string(),
                    dir.join("judge-cache.sqlite").display().to_string(),
                ),
            ],
        };
        Setup {
            store_s: store.to_str().unwrap().to_string(),
            store,
            init: file,
            dir,
            judge,
        }
    }

    fn env(&self) -> Vec<(&str, &str)> {
        self.judge
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

fn trace_id(seed: u64) -> String {
    format!("{seed:032x}")
}

/// One chat span of trace `seed` (its `part`-th span), with a question and an answer.
fn chat(seed: u64, part: u64, model: &str) -> ExportTraceServiceRequest {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let messages = |role: &str, text: String| {
        json!([{ "role": role, "parts": [{ "type": "text", "content": text }] }]).to_string()
    };
    let span = Span {
        trace_id: u128::from(seed).to_be_bytes().to_vec(),
        span_id: (seed << 8 | part + 1).to_be_bytes().to_vec(),
        name: format!("chat {model}"),
        kind: 3,
        start_time_unix_nano: now,
        end_time_unix_nano: now + 1_000_000,
        attributes: vec![
            kv("gen_ai.operation.name", V::StringValue("chat".into())),
            kv("gen_ai.request.model", V::StringValue(model.into())),
            kv(
                "gen_ai.usage.input_tokens",
                V::IntValue(10 * seed as i64 + part as i64),
            ),
            kv(
                "gen_ai.input.messages",
                V::StringValue(messages("user", format!("what is {seed} plus {part}?"))),
            ),
            kv(
                "gen_ai.output.messages",
                V::StringValue(messages("assistant", format!("it is {}", seed + part))),
            ),
        ],
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", V::StringValue("two-models".into()))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: vec![span],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn send(o: &Otlp, seed: u64, part: u64) {
    let model = if seed % 2 == 0 { "model-a" } else { "model-b" };
    let (status, head, _) = export(o, &chat(seed, part, model));
    assert_eq!(status, 200, "{head}");
}

/// Polls `sql` (one row, one number `n`) by the CLI until it reaches `want`.
fn wait_for(store: &str, sql: &str, want: u64, within: Duration) -> u64 {
    let began = Instant::now();
    loop {
        let rows = cli(store, sql, &[]);
        let n = rows[0]["n"].as_u64().unwrap_or(0);
        if n >= want || began.elapsed() > within {
            return n;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Every row of a monitor's Delta table as written (superseded rows too), by the CLI
/// reading it as any Delta table.
fn raw_rows(store: &Path, monitor: &str, columns: &str) -> Vec<Value> {
    let location = store.join("monitors").join(monitor);
    let sql = format!(
        "CREATE EXTERNAL TABLE raw STORED AS DELTA LOCATION '{}'; SELECT {columns} FROM raw",
        location.display()
    );
    cli(store.to_str().unwrap(), &sql, &[])
}

const INIT: &str = "
SET evalsql.judge.max_concurrency = 2;
CREATE MONITOR quality EVERY '1 second' AFTER IDLE '2 seconds' AS
  SELECT trace_id, max(model) AS model, count(*) AS spans,
         relevance(max(input_text), max(output_text)) AS relevance
  FROM spans WHERE operation_name = 'chat' GROUP BY trace_id;
CREATE MONITOR sampled EVERY '1 second' AFTER IDLE '2 seconds' SAMPLE 30 PERCENT AS
  SELECT trace_id, f1_score(max(output_text), 'it is 7') AS f1 FROM spans GROUP BY trace_id;
";

#[test]
fn each_complete_trace_is_scored_once_even_across_kill_9() {
    let stub = StubJudge::start_in_background(StubConfig {
        latency: Duration::from_millis(150),
        ..StubConfig::default()
    });
    let s = Setup::new("monitor-once", INIT, Some(&stub));
    let (dir, store, store_s, init) = (&s.dir, &s.store, &s.store_s, &s.init);
    let env = s.env();
    let args = ["--init", init.to_str().unwrap(), "--otlp-flush-ms", "50"];
    let o = start(&dir, &store_s, &args, &env);

    // 10 traces, scored; then 30 more, and the server is killed while the judge answers
    // their run (its rows not committed yet).
    const TRACES: u64 = 40;
    for seed in 1..=10 {
        send(&o, seed, 0);
    }
    let scored = wait_for(
        &store_s,
        "SELECT count(*) AS n FROM monitors.quality",
        10,
        Duration::from_secs(60),
    );
    assert_eq!(scored, 10, "{}", o.server.stderr());
    // One request: the 30 traces arrive at one instant and are one group of one run.
    let mut wave = chat(11, 0, "model-b");
    for seed in 12..=TRACES {
        let model = if seed % 2 == 0 { "model-a" } else { "model-b" };
        let span = chat(seed, 0, model).resource_spans[0].scope_spans[0].spans[0].clone();
        wave.resource_spans[0].scope_spans[0].spans.push(span);
    }
    let (status, head, _) = export(&o, &wave);
    assert_eq!(status, 200, "{head}");
    let began = Instant::now();
    while stub.requests() < 16 && began.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed = Command::new("kill")
        .args(["-9", &o.server.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    drop(o);
    let rows = cli(&store_s, "SELECT count(*) AS n FROM monitors.quality", &[]);
    assert_eq!(
        rows[0]["n"], 10,
        "killed mid-run: the run's rows are not there"
    );

    // Restarted with the same --init (the definitions are unchanged: no new version).
    let o = start(&dir, &store_s, &args, &env);
    assert!(
        o.server.stderr().contains("unchanged (version 1)"),
        "{}",
        o.server.stderr()
    );
    let n = wait_for(
        &store_s,
        "SELECT count(*) AS n FROM monitors.quality",
        TRACES,
        Duration::from_secs(120),
    );
    assert_eq!(n, TRACES, "{}", o.server.stderr());
    // A late span of trace 2: scored again, its new row superseding the old.
    send(&o, 2, 1);
    let n = wait_for(
        &store_s,
        "SELECT count(*) AS n FROM monitors.quality WHERE spans = 2",
        1,
        Duration::from_secs(60),
    );
    assert_eq!(n, 1);

    // As written: one row per trace and run, each trace once but the late one twice.
    let raw = raw_rows(
        &store,
        "quality",
        "trace_id, spans, relevance, monitor_version",
    );
    let mut per_trace: HashMap<String, Vec<u64>> = HashMap::new();
    for r in &raw {
        per_trace
            .entry(r["trace_id"].as_str().unwrap().to_string())
            .or_default()
            .push(r["spans"].as_u64().unwrap());
        assert_eq!(r["monitor_version"], 1);
        let score = r["relevance"].as_f64().expect("a score");
        assert!((1.0..=5.0).contains(&score), "{r}");
    }
    assert_eq!(per_trace.len() as u64, TRACES, "{raw:?}");
    for seed in 1..=TRACES {
        let mut got = per_trace[&trace_id(seed)].clone();
        got.sort();
        let want = if seed == 2 { vec![1, 2] } else { vec![1] };
        assert_eq!(got, want, "trace {seed}: scored {got:?}");
    }
    // Each question was asked of the judge once, but for the calls in flight at the kill
    // (at most the concurrency) and the late trace's second question.
    let asked = stub.requests();
    assert!(
        (TRACES + 1..=TRACES + 1 + 2).contains(&asked),
        "{asked} judge calls for {} questions",
        TRACES + 1
    );

    // The sample: the same traces as the hash says, and the rows carry its weight.
    let sampled = cli(
        &store_s,
        "SELECT trace_id, sample_weight FROM monitors.sampled",
        &[],
    );
    let want: Vec<String> = (1..=TRACES)
        .map(trace_id)
        .filter(|t| evalsql::monitor::run::sampled("sampled", t, 0.3))
        .collect();
    let mut got: Vec<String> = sampled
        .iter()
        .map(|r| r["trace_id"].as_str().unwrap().to_string())
        .collect();
    got.sort();
    assert_eq!(got, want);
    assert!(
        sampled
            .iter()
            .all(|r| (r["sample_weight"].as_f64().unwrap() - 1.0 / 0.3).abs() < 1e-9)
    );
    // Every run is recorded.
    let runs = cli(
        &store_s,
        "SELECT sum(rows_written) AS rows, count(*) FILTER (WHERE status <> 'ok') AS bad \
         FROM monitor_runs WHERE monitor = 'quality'",
        &[],
    );
    assert_eq!(runs[0]["bad"], 0, "{runs:?}");
    assert_eq!(runs[0]["rows"].as_u64().unwrap(), raw.len() as u64);

    // A replay over the whole time gives each trace's latest values as the live monitor
    // did, paying for no judge call (the cache has them all).
    drop(o);
    let asked = stub.requests();
    let span = cli(
        &store_s,
        "SELECT CAST(min(ingested_at) AS VARCHAR) AS first FROM spans",
        &[],
    );
    let first = span[0]["first"].as_str().unwrap().to_string();
    let from = format!("{first}").replace(' ', "T");
    let now = chrono::Utc::now() + chrono::Duration::seconds(5);
    let out = Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .envs(env.iter().copied())
        .args([
            "--store", &store_s, "--format", "ndjson", "monitor", "replay", "quality",
        ])
        .args(["--from", &from, "--to", &now.to_rfc3339()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut replayed: HashMap<String, (String, Value)> = HashMap::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let at = r["run_at"].as_str().unwrap().to_string();
        let trace = r["trace_id"].as_str().unwrap().to_string();
        let kept = replayed.entry(trace).or_insert((at.clone(), r.clone()));
        if at > kept.0 {
            *kept = (at, r);
        }
    }
    let live = cli(
        &store_s,
        "SELECT trace_id, model, spans, relevance FROM monitors.quality",
        &[],
    );
    assert_eq!(replayed.len(), live.len());
    for row in &live {
        let (_, again) = &replayed[row["trace_id"].as_str().unwrap()];
        for column in ["model", "spans", "relevance"] {
            assert_eq!(again[column], row[column], "{column} of {row}");
        }
    }
    assert_eq!(stub.requests(), asked, "the replay asked the judge again");
}

/// A statement over the wire, by psycopg: its rows, or its error.
fn attempt(o: &Otlp, sql: &str) -> Option<Value> {
    let py = crate::serve::psycopg_python()?;
    Some(crate::serve::run_python_client(
        &py,
        "tests/serve/client.py",
        (o.server.port, "otlp", "otlp-pass"),
        "attempt",
        json!({ "sql": sql }),
    ))
}

#[test]
fn monitors_over_the_wire_need_allow_monitors_and_bad_definitions_say_why() {
    let dir = temp_dir("monitor-wire");
    let store = dir.join("store");
    let store_s = store.to_str().unwrap().to_string();
    let o = start(&dir, &store_s, &[], &[]);
    let Some(refused) = attempt(
        &o,
        "CREATE MONITOR m EVERY '2 seconds' AS SELECT trace_id FROM spans",
    ) else {
        return;
    };
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .contains("--allow-monitors"),
        "{refused}"
    );
    // SHOW is everyone's.
    let shown = attempt(&o, "SHOW MONITORS").unwrap();
    assert_eq!(shown["rows"], json!([]), "{shown}");
    drop(o);

    let o = start(&dir, &store_s, &["--allow-monitors"], &[]);
    for (sql, says) in [
        (
            "CREATE MONITOR m EVERY '0 seconds' AS SELECT trace_id FROM spans",
            "at least 1 second",
        ),
        (
            "CREATE MONITOR m EVERY '1 minute' SAMPLE 120 PERCENT AS SELECT trace_id FROM spans",
            "at most 100 percent",
        ),
        (
            "CREATE MONITOR m EVERY '1 minute' BUDGET -1 USD PER DAY AS SELECT trace_id FROM spans",
            "cannot be below 0",
        ),
        (
            "CREATE MONITOR m EVERY '1 minute' AS SELECT name FROM spans",
            "must give a trace_id",
        ),
        (
            "CREATE MONITOR m EVERY '1 minute' AS SELECT trace_id, no_such_metric(output_text) FROM spans",
            "no_such_metric",
        ),
        (
            "CREATE MONITOR m AS SELECT trace_id FROM spans",
            "EVERY is required",
        ),
        (
            "CREATE MONITOR m EVERY '1 minute' AS SELECT trace_id, 1 AS run_id FROM spans",
            "run_id",
        ),
        ("ALTER MONITOR nothing PAUSE", "no monitor nothing"),
        ("DROP MONITOR nothing", "no monitor nothing"),
    ] {
        let got = attempt(&o, sql).unwrap();
        let error = got["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{sql}: {got}");
    }
    let created = attempt(
        &o,
        "CREATE MONITOR m EVERY '2 seconds' AS SELECT trace_id, count(*) AS n FROM spans GROUP BY trace_id",
    )
    .unwrap();
    assert!(created.to_string().contains("version 1"), "{created}");
    let again = attempt(
        &o,
        "CREATE MONITOR m EVERY '3 seconds' AS SELECT trace_id FROM spans",
    )
    .unwrap();
    assert!(
        again["error"].as_str().unwrap().contains("exists"),
        "{again}"
    );
    let replaced = attempt(
        &o,
        "CREATE OR REPLACE MONITOR m EVERY '3 seconds' AS SELECT trace_id, count(*) AS n, 1 AS one FROM spans GROUP BY trace_id",
    )
    .unwrap();
    assert!(replaced.to_string().contains("version 2"), "{replaced}");
    assert!(attempt(&o, "ALTER MONITOR m PAUSE").unwrap()["error"].is_null());
    let shown = attempt(&o, "SHOW MONITORS").unwrap();
    let row = &shown["rows"][0];
    assert_eq!(
        (&row[0], &row[1], &row[6]),
        (&json!("m"), &json!(2), &json!(true)),
        "{shown}"
    );
    // Its table is there for everyone, read-only.
    let read = attempt(&o, "SELECT count(*) FROM monitors.m").unwrap();
    assert_eq!(read["rows"], json!([[0]]), "{read}");
    let write = attempt(&o, "INSERT INTO monitors.m SELECT * FROM monitors.m").unwrap();
    assert!(write["error"].is_string(), "{write}");
    assert!(attempt(&o, "DROP MONITOR m").unwrap()["error"].is_null());
    // A dropped monitor's versions can still be replayed, by number.
    let replay = |version: &str| {
        Command::new(env!("CARGO_BIN_EXE_evalsql"))
            .args(["--store", &store_s, "monitor", "replay", "m"])
            .args([
                "--from",
                "2026-01-01T00:00:00Z",
                "--to",
                "2026-01-01T00:00:10Z",
            ])
            .args(if version.is_empty() {
                vec![]
            } else {
                vec!["--version", version]
            })
            .output()
            .unwrap()
    };
    assert!(replay("1").status.success());
    let dropped = String::from_utf8_lossy(&replay("").stderr).to_string();
    assert!(
        dropped.contains("was dropped; name a --version"),
        "{dropped}"
    );
    let unknown = String::from_utf8_lossy(&replay("9").stderr).to_string();
    assert!(unknown.contains("has no version 9"), "{unknown}");
    assert_eq!(attempt(&o, "SHOW MONITORS").unwrap()["rows"], json!([]));
    // The definitions are in the store: the CLI makes one, another server sees it.
    drop(o);
    let made = cli(
        &store_s,
        "CREATE MONITOR from_cli EVERY '1 minute' AS SELECT trace_id FROM spans",
        &[],
    );
    assert_eq!(made[0]["result"], "CREATE MONITOR from_cli (version 1)");
    let o = start(&dir, &store_s, &[], &[]);
    let shown = attempt(&o, "SHOW MONITORS").unwrap();
    assert_eq!(shown["rows"].as_array().unwrap().len(), 1, "{shown}");
    assert_eq!(shown["rows"][0][0], "from_cli");
}

/// A webhook receiver on loopback: every request's head (lower case) and body.
fn webhook() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = std::sync::Arc::clone(&got);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line.to_ascii_lowercase());
            }
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            let mut body = vec![0u8; length];
            let _ = reader.read_exact(&mut body);
            kept.lock()
                .unwrap()
                .push((head, String::from_utf8_lossy(&body).to_string()));
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
    });
    (port, got)
}

/// One span of trace `seed` whose input token count is `score`.
fn scored(o: &Otlp, seed: u64, score: i64) {
    let mut request = chat(seed, 0, "model-a");
    let span = &mut request.resource_spans[0].scope_spans[0].spans[0];
    span.attributes
        .retain(|a| a.key != "gen_ai.usage.input_tokens");
    span.attributes
        .push(kv("gen_ai.usage.input_tokens", V::IntValue(score)));
    let (status, head, _) = export(o, &request);
    assert_eq!(status, 200, "{head}");
}

#[test]
fn an_alert_fires_and_resolves_and_its_webhook_gets_a_valid_signature() {
    use hmac::{KeyInit, Mac};
    let (hook_port, hooks) = webhook();
    let hook_url = format!("http://127.0.0.1:{hook_port}/evalsql");
    let s = Setup::new(
        "monitor-alert",
        &format!(
            "CREATE MONITOR scores EVERY '1 second' AFTER IDLE '1 second' AS
               SELECT trace_id, max(model) AS model, max(input_tokens) AS score
               FROM spans GROUP BY trace_id;
             CREATE ALERT low ON scores WHEN mean_cs(score, 1, 5)['upper'] < 3.5
               OVER '1 hour' GROUP BY model NOTIFY '{hook_url}';
             CREATE ALERT recent ON scores WHEN count(*) > 0 OVER '3 seconds';"
        ),
        None,
    );
    let (dir, store_s, init) = (&s.dir, &s.store_s, &s.init);
    let secret = dir.join("alert-secret");
    std::fs::write(&secret, "a-secret-of-enough-bytes\n").unwrap();
    let alert_url = format!("http://127.0.0.1:{hook_port}/");
    let args = [
        "--init",
        init.to_str().unwrap(),
        "--allow-monitors",
        "--alert-url",
        alert_url.as_str(),
        "--alert-secret-file",
        secret.to_str().unwrap(),
    ];
    let o = start(&dir, &store_s, &args, &[]);
    let state = |alert: &str| -> Option<String> {
        let rows = cli(
            &store_s,
            &format!("SELECT state FROM alerts WHERE alert = '{alert}' ORDER BY at DESC LIMIT 1"),
            &[],
        );
        rows.first()
            .map(|r| r["state"].as_str().unwrap().to_string())
    };
    let wait_state = |alert: &str, want: &str| {
        let began = Instant::now();
        while state(alert).as_deref() != Some(want) && began.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(300));
        }
        assert_eq!(state(alert).as_deref(), Some(want), "{}", o.server.stderr());
    };

    // Thirty low scores: the upper bound of the mean falls under 3.5.
    for seed in 1..=30 {
        scored(&o, seed, 1);
    }
    wait_state("low", "firing");
    wait_state("recent", "firing");
    // Ninety high ones: the mean is 4, and the alert resolves.
    for seed in 31..=120 {
        scored(&o, seed, 5);
    }
    wait_state("low", "resolved");
    // Nothing for longer than its window: no data.
    wait_state("recent", "no_data");

    // The receiver got both changes of `low`, signed with the secret.
    let began = Instant::now();
    while hooks.lock().unwrap().len() < 2 && began.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let got = hooks.lock().unwrap().clone();
    let states: Vec<String> = got
        .iter()
        .map(|(_, body)| {
            let v: Value = serde_json::from_str(body).unwrap();
            assert_eq!(v["alert"], "low");
            assert_eq!(v["group"], json!({ "model": "model-a" }));
            assert_eq!(v["version"], 1);
            assert!(v["run_id"].is_string() && v["value"].is_number(), "{v}");
            v["state"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(states, ["firing", "resolved"]);
    for (head, body) in &got {
        let mut mac =
            hmac::Hmac::<sha2::Sha256>::new_from_slice(b"a-secret-of-enough-bytes").unwrap();
        mac.update(body.as_bytes());
        let want: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(
            head.contains(&format!("x-evalsql-signature: sha256={want}")),
            "{head}"
        );
        assert!(head.contains("idempotency-key: "), "{head}");
    }

    // Bad alerts say why.
    for (sql, says) in [
        (
            "CREATE ALERT a ON scores WHEN avg(score) < 1 OVER '1 hour' NOTIFY 'http://elsewhere.example/x'",
            "outside --alert-url",
        ),
        (
            "CREATE ALERT a ON scores WHEN avg(relevance) < 1 OVER '1 hour'",
            "relevance",
        ),
        (
            "CREATE ALERT a ON nothing WHEN avg(score) < 1 OVER '1 hour'",
            "no monitor nothing",
        ),
        (
            "CREATE ALERT a ON scores WHEN avg(score) < 1 OVER '1 hour' GROUP BY region",
            "region",
        ),
    ] {
        let Some(got) = attempt(&o, sql) else { return };
        let error = got["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{sql}: {got}");
    }
    let shown = attempt(&o, "SHOW ALERTS").unwrap();
    assert_eq!(shown["rows"].as_array().unwrap().len(), 2, "{shown}");
    drop(o);

    // The picture: the score over time per model, with the firing marked.
    let page = dir.join("scores.html");
    let out = Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .args([
            "--store",
            &store_s,
            "report",
            "--monitor",
            "scores",
            "--group",
            "model",
        ])
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    check_monitor_page(&html);
    if let Some(chromium) = crate::report::chromium() {
        let dom = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
            ])
            .arg(format!(
                "--user-data-dir={}",
                dir.join("chromium").display()
            ))
            .args(["--virtual-time-budget=2000", "--dump-dom"])
            .arg(format!("file://{}", page.display()))
            .output()
            .unwrap();
        assert!(
            dom.status.success(),
            "{}",
            String::from_utf8_lossy(&dom.stderr)
        );
        check_monitor_page(&String::from_utf8_lossy(&dom.stdout));
    }
}

/// The monitor report of the alert test: a chart of `score` whose points count every row
/// (120, all of model-a) at the right mean (30 ones and 90 fives), and the firing of `low`.
fn check_monitor_page(html: &str) {
    assert_eq!(
        html.matches("<svg class=\"timeline\" data-metric=\"score\"")
            .count(),
        1
    );
    let (mut n, mut sum) = (0.0, 0.0);
    for point in html.split("<circle ").skip(1) {
        let attr = |name: &str| -> f64 {
            let start = point.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
            point[start..].split('"').next().unwrap().parse().unwrap()
        };
        assert!(point.contains("data-group=\"model-a\""), "{point}");
        n += attr("data-n");
        sum += attr("data-n") * attr("data-mean");
    }
    assert_eq!(n, 120.0);
    assert!((sum / n - 4.0).abs() < 1e-9, "{}", sum / n);
    assert!(
        html.contains("class=\"firing\" data-alert=\"low\""),
        "no firing mark"
    );
}

#[test]
fn a_budget_is_never_exceeded_and_what_it_defers_is_scored_later() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    // A judge call costs a fraction of a cent at these prices; the monitor may spend 2 cents
    // a day: some calls, not all.
    let s = Setup::new(
        "monitor-budget",
        "SET evalsql.judge.price_input_per_mtok = 3;
         SET evalsql.judge.price_cached_input_per_mtok = 3;
         SET evalsql.judge.price_output_per_mtok = 3;
         CREATE MONITOR judged EVERY '1 second' AFTER IDLE '1 second' BUDGET 0.02 USD PER DAY AS
           SELECT trace_id, relevance(max(input_text), max(output_text)) AS relevance
           FROM spans GROUP BY trace_id;",
        Some(&stub),
    );
    let (dir, store, store_s, init) = (&s.dir, &s.store, &s.store_s, &s.init);
    let env = s.env();
    let args = ["--init", init.to_str().unwrap(), "--allow-monitors"];
    let o = start(&dir, &store_s, &args, &env);
    const TRACES: u64 = 24;
    for seed in 1..=TRACES {
        send(&o, seed, 0);
    }
    // Runs until one defers.
    let deferred = wait_for(
        &store_s,
        "SELECT count(*) AS n FROM monitor_runs WHERE status = 'deferred'",
        1,
        Duration::from_secs(60),
    );
    // (Two runs may defer between two polls.)
    assert!(deferred >= 1, "{}", o.server.stderr());
    std::thread::sleep(Duration::from_secs(2));
    let runs = cli(
        &store_s,
        "SELECT sum(dollars) AS spent, max(traces_deferred) AS deferred, sum(rows_written) AS rows \
         FROM monitor_runs",
        &[],
    );
    let spent = runs[0]["spent"].as_f64().unwrap();
    let rows = runs[0]["rows"].as_u64().unwrap();
    assert!(spent > 0.0 && spent <= 0.02, "spent {spent}: {runs:?}");
    assert!(rows < TRACES, "{runs:?}");
    assert!(runs[0]["deferred"].as_u64().unwrap() > 0, "{runs:?}");
    let scored = cli(&store_s, "SELECT count(*) AS n FROM monitors.judged", &[]);
    assert_eq!(scored[0]["n"].as_u64().unwrap(), rows);

    // More budget: the deferred traces are scored, each once.
    let Some(altered) = attempt(&o, "ALTER MONITOR judged SET BUDGET 10 USD PER DAY") else {
        return;
    };
    assert!(altered["error"].is_null(), "{altered}");
    let n = wait_for(
        &store_s,
        "SELECT count(*) AS n FROM monitors.judged",
        TRACES,
        Duration::from_secs(60),
    );
    assert_eq!(n, TRACES);
    let raw = raw_rows(
        &store,
        "judged",
        "count(*) AS n, count(DISTINCT trace_id) AS d",
    );
    assert_eq!(
        (raw[0]["n"].as_u64(), raw[0]["d"].as_u64()),
        (Some(TRACES), Some(TRACES))
    );
}

#[test]
fn the_python_sdk_sends_a_two_model_app_and_the_monitor_scores_a_tenth() {
    let Some(python) = crate::otlp::python() else {
        crate::skip::skipped(
            "the Python SDK monitor test",
            "no opentelemetry-sdk with the OTLP exporters (EVALSQL_OTLP_PYTHON)",
        );
        return;
    };
    let stub = StubJudge::start_in_background(StubConfig::default());
    let s = Setup::new(
        "monitor-sdk",
        "CREATE MONITOR answer_quality EVERY '2 seconds' AFTER IDLE '2 seconds' SAMPLE 10 PERCENT
         AS SELECT trace_id, model, relevance(input_text, output_text) AS relevance,
                   f1_score(output_text, 'Paris.') AS f1
            FROM spans WHERE operation_name = 'chat';",
        Some(&stub),
    );
    let (dir, store_s, init) = (&s.dir, &s.store_s, &s.init);
    let env = s.env();
    let o = start(&dir, &store_s, &["--init", init.to_str().unwrap()], &env);
    const TRACES: usize = 400;
    let out = Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/monitor_app.py"))
        .args([
            &format!("http://127.0.0.1:{}/v1/traces", o.http),
            &o.token,
            &TRACES.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent: HashMap<String, String> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(sent.len(), TRACES);
    let want: Vec<&String> = sent
        .keys()
        .filter(|t| evalsql::monitor::run::sampled("answer_quality", t, 0.1))
        .collect();
    // Within the binomial range of a 10 % sample (four standard deviations).
    let sd = (TRACES as f64 * 0.1 * 0.9).sqrt();
    assert!(
        (want.len() as f64 - TRACES as f64 * 0.1).abs() < 4.0 * sd,
        "{} of {TRACES} sampled",
        want.len()
    );
    let n = wait_for(
        &store_s,
        "SELECT count(*) AS n FROM monitors.answer_quality",
        want.len() as u64,
        Duration::from_secs(90),
    );
    assert_eq!(n, want.len() as u64, "{}", o.server.stderr());
    drop(o);
    // Every call the judge received is counted in monitor_runs (no budget: counted all
    // the same).
    let runs = cli(
        &store_s,
        "SELECT sum(judge_calls) AS calls FROM monitor_runs",
        &[],
    );
    assert_eq!(runs[0]["calls"].as_u64(), Some(stub.requests()), "{runs:?}");
    // Each row equals the same metrics computed by hand over the spans, in another process
    // (the judge's answers from the same cache).
    let by_hand = crate::otlp::cli(
        &store_s,
        "SELECT trace_id, model, relevance(input_text, output_text) AS relevance, \
                f1_score(output_text, 'Paris.') AS f1 \
         FROM spans WHERE operation_name = 'chat'",
        &env,
    );
    let by_hand: HashMap<String, &Value> = by_hand
        .iter()
        .map(|r| (r["trace_id"].as_str().unwrap().to_string(), r))
        .collect();
    let rows = cli(
        &store_s,
        "SELECT trace_id, model, relevance, f1, sample_weight FROM monitors.answer_quality",
        &[],
    );
    let mut got: Vec<&str> = Vec::new();
    for row in &rows {
        let trace = row["trace_id"].as_str().unwrap();
        got.push(trace);
        let hand = by_hand[trace];
        assert_eq!(row["model"].as_str(), Some(sent[trace].as_str()));
        for column in ["model", "relevance", "f1"] {
            assert_eq!(row[column], hand[column], "{column} of {trace}");
        }
        assert_eq!(row["sample_weight"].as_f64(), Some(10.0));
        assert!(
            row["relevance"].is_number() && row["f1"].is_number(),
            "{row}"
        );
    }
    got.sort();
    let mut want: Vec<&str> = want.iter().map(|t| t.as_str()).collect();
    want.sort();
    assert_eq!(got, want);
}

/// `serve --ballista`: a monitor's query is planned by serve and run by the cluster's
/// executors, which alone can reach the judge.
#[test]
fn with_ballista_a_monitors_query_runs_on_the_cluster() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let s = Setup::new(
        "monitor-ballista",
        "CREATE MONITOR judged EVERY '1 second' AFTER IDLE '1 second' AS
           SELECT trace_id, max(model) AS model, count(*) AS spans,
                  relevance(max(input_text), max(output_text)) AS relevance
           FROM spans GROUP BY trace_id;",
        None,
    );
    // Priced, so the run's dollars are known: the executors make the calls, serve counts them.
    let prices = s.dir.join("prices.json");
    std::fs::write(
        &prices,
        r#"{"stub-judge": {"input": 2.5, "cached_input": 1.25, "output": 10}}"#,
    )
    .unwrap();
    let prices_env = [("EVALSQL_PRICES", prices.to_str().unwrap())];
    let cluster = crate::ballista::Cluster::with_judge_env(&s.dir, &stub, &[], &[], &prices_env);
    let url = format!("df://127.0.0.1:{}", cluster.scheduler);
    // serve itself has no judge: a call made here would fail.
    let args = ["--init", s.init.to_str().unwrap(), "--ballista", &url];
    let o = start(&s.dir, &s.store_s, &args, &[("RUST_LOG", "warn")]);
    const TRACES: u64 = 6;
    for seed in 1..=TRACES {
        send(&o, seed, 0);
    }
    let n = wait_for(
        &s.store_s,
        "SELECT count(*) AS n FROM monitors.judged WHERE relevance IS NOT NULL",
        TRACES,
        Duration::from_secs(45),
    );
    let errors = cli(
        &s.store_s,
        "SELECT DISTINCT error FROM monitor_runs WHERE status = 'error'",
        &[],
    );
    assert_eq!(n, TRACES, "{errors:?}");
    let rows = cli(
        &s.store_s,
        "SELECT count(DISTINCT trace_id) AS traces, sum(spans) AS spans FROM monitors.judged",
        &[],
    );
    assert_eq!(rows[0]["traces"].as_u64(), Some(TRACES), "{rows:?}");
    assert_eq!(rows[0]["spans"].as_u64(), Some(TRACES), "{rows:?}");
    assert!(stub.requests() >= TRACES, "{}", stub.requests());
    // The calls the executors made, and what they cost, are the runs' (from the job's
    // metrics): every call the judge received, and the dollars the executors' judge cache
    // recorded for them.
    let runs = cli(
        &s.store_s,
        "SELECT sum(judge_calls) AS calls, sum(dollars) AS dollars FROM monitor_runs",
        &[],
    );
    assert_eq!(
        runs[0]["calls"].as_u64(),
        Some(stub.requests()),
        "{runs:?}\n{}",
        o.server.stderr()
    );
    let cache = s.dir.join("cache.sqlite");
    let paid = cli(
        &s.store_s,
        "SELECT sum(cost_usd) AS dollars FROM judge_cache()",
        &[
            ("EVALSQL_JUDGE_CACHE", cache.to_str().unwrap()),
            prices_env[0],
        ],
    );
    let (got, want) = (
        runs[0]["dollars"].as_f64().unwrap(),
        paid[0]["dollars"].as_f64().unwrap(),
    );
    assert!(want > 0.0 && (got - want).abs() < 1e-6, "{runs:?} {paid:?}");
    assert!(
        cluster
            .work_dirs
            .iter()
            .any(|d| std::fs::read_dir(d).is_ok_and(|mut e| e.next().is_some())),
        "no executor ran a task"
    );
}

/// The interactive CLI with `--store` (its input piped, as a terminal would send it):
/// monitor statements run as in `-c`, a bad one is reported and the loop goes on, SQL runs
/// as before.
#[test]
fn the_repl_with_a_store_takes_monitor_statements() {
    use std::io::Write;
    let dir = temp_dir("monitor-repl");
    std::fs::create_dir_all(&dir).unwrap();
    let store = dir.join("store");
    // A store as serve leaves it.
    drop(start(&dir, store.to_str().unwrap(), &[], &[]));
    let mut child = Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .current_dir(&dir)
        .arg("--store")
        .arg(&store)
        .args(["--format", "csv"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            b"CREATE MONITOR typed EVERY '1 minute'\n  AS SELECT trace_id FROM spans;\n\
              CREATE MONITOR broken EVERY '0 seconds' AS SELECT trace_id FROM spans;\n\
              SHOW MONITORS;\n\
              SELECT 40 + 2 AS answer;\n\\q\n",
        )
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("CREATE MONITOR typed (version 1)"),
        "{stdout}\n{stderr}"
    );
    assert!(stderr.contains("EVERY"), "{stderr}");
    assert!(stdout.contains("typed,1,60 seconds"), "{stdout}");
    assert!(!stdout.contains("broken,"), "{stdout}");
    assert!(stdout.contains("answer\n42"), "{stdout}");
    // The definition is in the store, as from `-c`.
    let shown = cli(store.to_str().unwrap(), "SHOW MONITORS", &[]);
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0]["name"], "typed");
}

/// Two serve processes on one store, each with its own judge cache (as on two machines):
/// the monitor runs in one of them at a time, so each trace costs one judge call; when the
/// holder is killed, the other takes the monitor over and scores what arrives next.
#[test]
fn two_servers_on_one_store_take_turns_and_pay_each_call_once() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let s = Setup::new(
        "monitor-lease",
        "CREATE MONITOR judged EVERY '1 second' AFTER IDLE '1 second' AS
           SELECT trace_id, relevance(max(input_text), max(output_text)) AS relevance
           FROM spans GROUP BY trace_id;",
        Some(&stub),
    );
    let env_of = |who: &str| -> Vec<(String, String)> {
        s.judge
            .iter()
            .map(|(k, v)| match k.as_str() {
                "EVALSQL_JUDGE_CACHE" => (
                    k.clone(),
                    s.dir.join(format!("{who}.sqlite")).display().to_string(),
                ),
                _ => (k.clone(), v.clone()),
            })
            .collect()
    };
    let (env_a, env_b) = (env_of("a"), env_of("b"));
    let args = [
        "--init",
        s.init.to_str().unwrap(),
        "--otlp-flush-ms",
        "50",
        "--monitor-lease",
        "5",
    ];
    let a = start(&s.dir.join("a"), &s.store_s, &args, &borrowed(&env_a));
    let b = start(&s.dir.join("b"), &s.store_s, &args, &borrowed(&env_b));
    fn borrowed(e: &[(String, String)]) -> Vec<(&str, &str)> {
        e.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }
    let scored = |want: u64| {
        wait_for(
            &s.store_s,
            "SELECT count(*) AS n FROM monitors.judged WHERE relevance IS NOT NULL",
            want,
            Duration::from_secs(60),
        )
    };
    for seed in 1..=20 {
        send(if seed % 2 == 0 { &a } else { &b }, seed, 0);
    }
    assert_eq!(
        scored(20),
        20,
        "{}\n{}",
        a.server.stderr(),
        b.server.stderr()
    );
    assert_eq!(stub.requests(), 20, "each trace judged once");
    let runs = || {
        let mut counts = cli(
            &s.store_s,
            "SELECT count(*) FILTER (WHERE status <> 'ok') AS bad, \
             count(DISTINCT process) AS processes \
             FROM monitor_runs WHERE monitor = 'judged' AND traces_sampled > 0",
            &[],
        )[0]
        .clone();
        let last = cli(
            &s.store_s,
            "SELECT process FROM monitor_runs WHERE monitor = 'judged' \
             AND traces_sampled > 0 ORDER BY started DESC LIMIT 1",
            &[],
        );
        counts["last"] = last[0]["process"].clone();
        counts
    };
    let first = runs();
    assert_eq!(first["bad"], 0, "{first}");
    assert_eq!(first["processes"], 1, "{first}");
    // The holder is killed; the other process takes the monitor (at once: the holder's
    // process is gone from this machine, no need to wait for its lease).
    let holder = first["last"].as_str().unwrap().to_string();
    let pid_of = |o: &Otlp| format!("/{}/", o.server.pid());
    let (killed, survivor) = if holder.contains(&pid_of(&a)) {
        (a, b)
    } else {
        assert!(holder.contains(&pid_of(&b)), "{holder}");
        (b, a)
    };
    let status = Command::new("kill")
        .args(["-9", &killed.server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    drop(killed);
    for seed in 21..=30 {
        send(&survivor, seed, 0);
    }
    assert_eq!(scored(30), 30, "{}", survivor.server.stderr());
    assert_eq!(stub.requests(), 30, "each trace judged once");
    let after = runs();
    assert_eq!(after["bad"], 0, "{after}");
    assert_eq!(after["processes"], 2, "{after}");
    assert!(
        after["last"].as_str().unwrap().contains(&pid_of(&survivor)),
        "{after}"
    );
}
