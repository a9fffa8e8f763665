//! Traces in: `evalsql serve --otlp / --otlp-grpc` receiving spans into its Delta Lake store.
//! The real OpenTelemetry SDKs send (Python's HTTP and gRPC exporters, node's JSON and
//! protobuf exporters: `tests/otlp/`); psycopg, the CLI and Python's `deltalake` read back.
//! Durability is tested with `kill -9` mid-stream, retries by sending twice, the store's
//! sharing by two servers on one S3 prefix (moto), and every bad input gets its status while
//! the server goes on answering.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, KeyValue, KeyValueList, any_value::Value as V,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use serde_json::Value;

use crate::serve::{Server, start_server, temp_dir};
use crate::skip::skipped;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A server with its OTLP ports and the token senders present.
pub(crate) struct Otlp {
    pub(crate) server: Server,
    pub(crate) http: u16,
    pub(crate) grpc: u16,
    pub(crate) token: String,
}

/// The first value `sql` gives over the PostgreSQL wire (psycopg), as text; `None` where
/// psycopg is not installed.
fn wire_value(o: &Otlp, sql: &str) -> Option<String> {
    let py = crate::serve::psycopg_python()?;
    let got = crate::serve::run_psycopg(
        &py,
        o.server.port,
        "otlp",
        "otlp-pass",
        "query",
        serde_json::json!({ "sql": sql }),
    );
    Some(got["rows"][0][0].to_string().trim_matches('"').to_string())
}

fn otlp_port(stderr: &str, protocol: &str) -> u16 {
    stderr
        .lines()
        .find_map(|l| l.split(&format!("OTLP/{protocol} on ")).nth(1))
        .and_then(|rest| rest.split([';', ' ']).next())
        .and_then(|a| a.rsplit(':').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no OTLP/{protocol} line in {stderr}"))
}

/// A tokens file with one new token, made by `evalsql otlp-token`.
fn token_file(dir: &Path) -> (PathBuf, String) {
    std::fs::create_dir_all(dir).unwrap();
    let file = dir.join("otlp-tokens");
    let out = Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .args(["otlp-token", "tests", "--tokens"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let line = std::fs::read_to_string(&file).unwrap();
    assert!(
        !line.contains(&token),
        "the file holds a hash, not the token"
    );
    (file, token)
}

const LOGIN: [(&str, &str); 2] = [
    ("EVALSQL_PG_USER", "otlp"),
    ("EVALSQL_PG_PASSWORD", "otlp-pass"),
];

pub(crate) fn start(dir: &Path, store: &str, extra: &[&str], env: &[(&str, &str)]) -> Otlp {
    let (tokens, token) = token_file(dir);
    let mut args = vec![
        "--otlp",
        "127.0.0.1:0",
        "--otlp-grpc",
        "127.0.0.1:0",
        "--store",
        store,
        "--otlp-tokens",
        tokens.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut all_env = LOGIN.to_vec();
    all_env.extend_from_slice(env);
    let server = start_server(&all_env, &args).expect("evalsql serve --otlp starts");
    let stderr = server.stderr();
    Otlp {
        http: otlp_port(&stderr, "HTTP"),
        grpc: otlp_port(&stderr, "gRPC"),
        server,
        token,
    }
}

/// One HTTP/1.1 request on its own connection: the status, the headers (lower case) and body.
fn post(port: u16, headers: &[(&str, &str)], body: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut head = format!(
        "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    parse_response(&out)
}

fn parse_response(out: &[u8]) -> (u16, String, Vec<u8>) {
    let split = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(out.len());
    let head = String::from_utf8_lossy(&out[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = out.get(split + 4..).unwrap_or_default().to_vec();
    (status, head, body)
}

pub(crate) fn kv(key: &str, v: V) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

/// `n` spans of one trace, ids made from `seed` (so every call's spans are its own), each
/// with GenAI attributes and about 1 KB of text.
fn request(seed: u64, n: usize, service: &str) -> ExportTraceServiceRequest {
    let spans = (0..n)
        .map(|i| {
            let mut trace_id = [0u8; 16];
            trace_id[..8].copy_from_slice(&seed.to_be_bytes());
            trace_id[15] = 1;
            let span_id = (seed << 16 | i as u64 + 1).to_be_bytes().to_vec();
            Span {
                trace_id: trace_id.to_vec(),
                span_id,
                name: format!("chat gpt-4o {i}"),
                kind: 3,
                start_time_unix_nano: 1_780_000_000_000_000_000 + seed * 1_000_000 + i as u64,
                end_time_unix_nano: 1_780_000_000_500_000_000 + seed * 1_000_000 + i as u64,
                attributes: vec![
                    kv("gen_ai.operation.name", V::StringValue("chat".into())),
                    kv("gen_ai.request.model", V::StringValue("gpt-4o".into())),
                    kv("gen_ai.usage.input_tokens", V::IntValue(100 + i as i64)),
                    kv(
                        "gen_ai.input.messages",
                        V::StringValue(format!(
                            r#"[{{"role":"user","parts":[{{"type":"text","content":"{}"}}]}}]"#,
                            "question ".repeat(90)
                        )),
                    ),
                ],
                status: Some(Status {
                    code: 1,
                    message: String::new(),
                }),
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", V::StringValue(service.into()))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

pub(crate) fn export(o: &Otlp, body: &ExportTraceServiceRequest) -> (u16, String, Vec<u8>) {
    let auth = format!("Bearer {}", o.token);
    post(
        o.http,
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Authorization", &auth),
        ],
        &body.encode_to_vec(),
    )
}

/// `sql` over the store by the CLI (another reader than the server): JSON rows.
pub(crate) fn cli(store: &str, sql: &str, env: &[(&str, &str)]) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .current_dir(ROOT)
        .envs(env.iter().copied())
        .args(["--store", store, "--format", "ndjson", "-c", sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn count(store: &str, filter: &str) -> (u64, u64) {
    count_with(store, filter, &[])
}

fn count_with(store: &str, filter: &str, env: &[(&str, &str)]) -> (u64, u64) {
    let rows = cli(
        store,
        &format!(
            "SELECT count(*) AS n, count(DISTINCT trace_id || span_id) AS d FROM spans WHERE {filter}"
        ),
        env,
    );
    (
        rows[0]["n"].as_u64().unwrap(),
        rows[0]["d"].as_u64().unwrap(),
    )
}

pub(crate) fn python() -> Option<PathBuf> {
    let python = std::env::var_os("EVALSQL_OTLP_PYTHON").map(PathBuf::from)?;
    let ok = Command::new(&python)
        .args([
            "-c",
            "import opentelemetry.exporter.otlp.proto.http, opentelemetry.exporter.otlp.proto.grpc, deltalake, psycopg",
        ])
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(python)
}

#[test]
fn the_sdks_send_and_every_column_comes_back() {
    let dir = temp_dir("otlp-sdks");
    let store = dir.join("store");
    let store_s = store.to_str().unwrap();
    let o = start(&dir, store_s, &[], &[]);
    match python() {
        None => skipped(
            "the Python SDK part of the OTLP tests",
            "no opentelemetry-sdk with the OTLP exporters, deltalake and psycopg (EVALSQL_OTLP_PYTHON)",
        ),
        Some(python) => {
            let out = Command::new(python)
                .arg(Path::new(ROOT).join("tests/otlp/sdk_send.py"))
                .args([
                    &format!("http://127.0.0.1:{}/v1/traces", o.http),
                    &format!("127.0.0.1:{}", o.grpc),
                    &o.token,
                    &o.server.port.to_string(),
                    store_s,
                ])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "sdk_send.py: {}\n{}\nserver: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                o.server.stderr()
            );
            let got: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(got["http"], 60, "{got}");
            assert_eq!(got["grpc"], 60, "{got}");
            assert_eq!(got["deltalake_rows"], 120, "{got}");
        }
    }
    match std::env::var_os("EVALSQL_NODE_OTLP") {
        None => skipped(
            "the node SDK part of the OTLP tests",
            "no @opentelemetry/exporter-trace-otlp-http and -proto (EVALSQL_NODE_OTLP)",
        ),
        Some(modules) => {
            for encoding in ["json", "proto"] {
                let service = format!("node-{encoding}");
                let out = Command::new("node")
                    .arg(Path::new(ROOT).join("tests/otlp/node_send.js"))
                    .args([
                        &format!("http://127.0.0.1:{}/v1/traces", o.http),
                        &o.token,
                        &service,
                        encoding,
                    ])
                    .env("NODE_PATH", &modules)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "node_send.js {encoding}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let sent: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(sent.len(), 30);
                let rows = cli(
                    store_s,
                    &format!(
                        "SELECT trace_id, span_id, name, attributes, input_text, output_text, \
                         model, input_tokens FROM spans WHERE service_name = '{service}'"
                    ),
                    &[],
                );
                assert_eq!(rows.len(), sent.len(), "{encoding}: {rows:?}");
                for s in &sent {
                    let r = rows
                        .iter()
                        .find(|r| r["span_id"] == s["span_id"])
                        .unwrap_or_else(|| panic!("{encoding}: {s} is missing"));
                    assert_eq!(r["trace_id"], s["trace_id"]);
                    assert_eq!(r["name"], s["name"]);
                    let attrs: Value =
                        serde_json::from_str(r["attributes"].as_str().unwrap()).unwrap();
                    assert_eq!(attrs, s["attributes"], "{encoding}");
                    if s["name"] == "chat claude-sonnet" {
                        let i = attrs["gen_ai.usage.input_tokens"].as_i64().unwrap() - 40;
                        assert_eq!(r["input_text"], format!("question {i}"));
                        assert_eq!(r["output_text"], format!("answer {i}"));
                        assert_eq!(r["model"], "claude-sonnet");
                        assert_eq!(r["input_tokens"], 40 + i);
                    }
                }
            }
        }
    }
}

#[test]
fn an_acknowledged_span_survives_kill_9_and_a_retry_is_one_row() {
    let dir = temp_dir("otlp-kill");
    let store = dir.join("store");
    let store_s = store.to_str().unwrap().to_string();
    let o = start(&dir, &store_s, &["--otlp-flush-ms", "50"], &[]);
    // Four senders, each request 50 spans of its own; every acknowledged request's seed is
    // recorded. The server is killed mid-stream.
    let acked = Arc::new(Mutex::new(Vec::<u64>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..4u64)
        .map(|t| {
            let (acked, stop) = (Arc::clone(&acked), Arc::clone(&stop));
            let (port, token) = (o.http, o.token.clone());
            std::thread::spawn(move || {
                let mut seed = t * 1_000_000 + 1;
                while !stop.load(Ordering::Relaxed) {
                    let body = request(seed, 50, "killed").encode_to_vec();
                    let auth = format!("Bearer {token}");
                    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
                        break;
                    };
                    let head = format!(
                        "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nAuthorization: {auth}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = s.write_all(head.as_bytes());
                    let _ = s.write_all(&body);
                    let mut out = Vec::new();
                    let _ = s.read_to_end(&mut out);
                    if parse_response(&out).0 == 200 {
                        acked.lock().unwrap().push(seed);
                    }
                    seed += 1;
                }
            })
        })
        .collect();
    let began = Instant::now();
    while acked.lock().unwrap().len() < 40 && began.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = o.server.pid();
    let killed = Command::new("kill").args(["-9", &pid.to_string()]).status();
    assert!(killed.unwrap().success());
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        s.join().unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 40,
        "only {} requests acknowledged",
        acked.len()
    );
    drop(o);

    // Every acknowledged span is there, once, read by another process.
    let rows = cli(
        &store_s,
        "SELECT trace_id, count(*) AS n FROM spans WHERE service_name = 'killed' GROUP BY trace_id",
        &[],
    );
    let per_trace: std::collections::HashMap<String, u64> = rows
        .iter()
        .map(|r| {
            (
                r["trace_id"].as_str().unwrap().to_string(),
                r["n"].as_u64().unwrap(),
            )
        })
        .collect();
    for seed in &acked {
        let trace = format!("{seed:016x}{}", "0000000000000001");
        assert_eq!(
            per_trace.get(&trace),
            Some(&50),
            "request {seed}: acknowledged, but its spans are not all there once"
        );
    }

    // Restarted on the same store: a retried request (sent twice now, and once more after
    // it was stored before the kill) is one row per span.
    let o = start(&dir, &store_s, &[], &[]);
    let retry = request(acked[0], 50, "killed");
    for _ in 0..2 {
        let (status, head, _) = export(&o, &retry);
        assert_eq!(status, 200, "{head}");
    }
    let fresh = request(9_999_999, 50, "retried");
    for _ in 0..3 {
        assert_eq!(export(&o, &fresh).0, 200);
    }
    let (n, distinct) = count(&store_s, "service_name IN ('killed', 'retried')");
    assert_eq!(n, distinct, "a span repeated in spans");
    let (n, _) = count(&store_s, "service_name = 'retried'");
    assert_eq!(n, 50);
    // Over the PostgreSQL wire too (the server's own reader).
    if let Some(n) = wire_value(
        &o,
        "SELECT count(*) AS n FROM spans WHERE service_name = 'retried'",
    ) {
        assert_eq!(n, "50");
    }
}

/// gzip of `zeros` zero bytes, as many 1 MiB members (each compresses to about 1 KiB).
fn gzip_bomb(zeros: usize) -> Vec<u8> {
    use flate2::Compression;
    use flate2::write::GzEncoder;
    let mut one = GzEncoder::new(Vec::new(), Compression::best());
    one.write_all(&vec![0u8; 1 << 20]).unwrap();
    let member = one.finish().unwrap();
    member.repeat(zeros >> 20)
}

#[test]
fn bad_input_gets_its_status_and_the_server_goes_on() {
    let dir = temp_dir("otlp-bad");
    let store = dir.join("store");
    let o = start(
        &dir,
        store.to_str().unwrap(),
        &["--otlp-deadline", "3", "--max-connections", "12"],
        &[],
    );
    let auth = format!("Bearer {}", o.token);
    let proto = [
        ("Content-Type", "application/x-protobuf"),
        ("Authorization", auth.as_str()),
    ];
    let json = [
        ("Content-Type", "application/json"),
        ("Authorization", auth.as_str()),
    ];
    let mut seed = 1;
    let mut still_serves = || {
        seed += 1;
        let (status, head, body) = export(&o, &request(seed, 3, "after-bad"));
        assert_eq!(status, 200, "{head}");
        assert!(
            ExportTraceServiceResponse::decode(body.as_slice())
                .unwrap()
                .partial_success
                .is_none()
        );
    };

    // Undecodable bodies, wrong types and encodings.
    for (headers, body, want) in [
        (&proto[..], b"\xff\xff\xff not protobuf".to_vec(), 400),
        (&json[..], b"{\"resourceSpans\": 7}".to_vec(), 400),
        (&json[..], b"not json".to_vec(), 400),
        (
            &[
                ("Content-Type", "text/plain"),
                ("Authorization", auth.as_str()),
            ][..],
            b"x".to_vec(),
            415,
        ),
        (&[("Authorization", auth.as_str())][..], b"x".to_vec(), 415),
    ] {
        let (status, head, _) = post(o.http, headers, &body);
        assert_eq!(status, want, "{head}");
        still_serves();
    }
    let (status, head, _) = post(
        o.http,
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "br"),
            ("Authorization", auth.as_str()),
        ],
        b"x",
    );
    assert_eq!(status, 415, "{head}");
    let (status, _, _) = post(
        o.http,
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "gzip"),
            ("Authorization", auth.as_str()),
        ],
        b"not gzip at all",
    );
    assert_eq!(status, 400);

    // Tokens: unknown, malformed and missing get the same answer.
    for auth in [
        "Bearer evalsql_otlp_0000",
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "",
    ] {
        let headers: Vec<(&str, &str)> = [("Content-Type", "application/x-protobuf")]
            .into_iter()
            .chain((!auth.is_empty()).then_some(("Authorization", auth)))
            .collect();
        let (status, _, body) = post(o.http, &headers, &request(5, 1, "x").encode_to_vec());
        assert_eq!(status, 401, "{auth}");
        assert_eq!(body, b"\x08\x10\x12\x0funauthenticated", "{auth}");
    }

    // A gzip bomb: 1 GiB of zeros in about 1 MiB; inflating stops at the body limit.
    let before = o.server.memory("VmHWM");
    let bomb = gzip_bomb(1 << 30);
    assert!(bomb.len() < 2 << 20, "{}", bomb.len());
    let (status, head, _body) = post(
        o.http,
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "gzip"),
            ("Authorization", auth.as_str()),
        ],
        &bomb,
    );
    assert_eq!(status, 413, "{head} {}", String::from_utf8_lossy(&_body));
    let grown = o.server.memory("VmHWM").saturating_sub(before);
    assert!(
        grown < 200 << 20,
        "the bomb grew the server by {} MiB",
        grown >> 20
    );
    still_serves();

    // Over the body limit, declared or not.
    let big = vec![0u8; 17 << 20];
    let (status, _, _) = post(o.http, &proto, &big);
    assert_eq!(status, 413);
    still_serves();

    // Slow senders: headers that never end, a body that never comes; the deadline (3 s)
    // ends both, and the slots come back.
    let mut slow_head = TcpStream::connect(("127.0.0.1", o.http)).unwrap();
    slow_head
        .write_all(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut slow_body = TcpStream::connect(("127.0.0.1", o.http)).unwrap();
    slow_body
        .write_all(
            format!(
                "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nAuthorization: {auth}\r\nContent-Length: 1000\r\n\r\nabc"
            )
            .as_bytes(),
        )
        .unwrap();
    for s in [&mut slow_head, &mut slow_body] {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let began = Instant::now();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        assert!(
            began.elapsed() < Duration::from_secs(15),
            "a slow sender was kept"
        );
        let status = parse_response(&out).0;
        assert!(
            matches!(status, 0 | 408),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }
    still_serves();

    // A flood of connections: the OTLP listeners hold at most half of --max-connections,
    // the rest are closed, and SQL clients still get in meanwhile.
    let flood: Vec<TcpStream> = (0..40)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", o.http)).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    if let Some(n) = wire_value(&o, "SELECT 41 + 1 AS n") {
        assert_eq!(n, "42");
    }
    drop(flood);
    std::thread::sleep(Duration::from_millis(300));
    still_serves();

    // Spans a writer must survive: bad ids, no name, every value type, 1 MB values, deep
    // kvlists, times past 2262, unknown fields. Good spans beside them are kept.
    // (Each level of a kvlist is three protobuf messages; 25 levels stay within the decoder's
    // nesting limit, deeper bodies are refused whole: see below.)
    let nest = |levels: usize| {
        let mut deep = V::StringValue("bottom".into());
        for _ in 0..levels {
            deep = V::KvlistValue(KeyValueList {
                values: vec![kv("k", deep)],
            });
        }
        deep
    };
    let mut too_deep = request(78, 1, "odd-spans");
    too_deep.resource_spans[0].scope_spans[0].spans[0]
        .attributes
        .push(kv("deep", nest(60)));
    let (status, head, _) = post(o.http, &proto, &too_deep.encode_to_vec());
    assert_eq!(status, 400, "{head}");
    still_serves();
    let deep = nest(25);
    let mut req = request(77, 2, "odd-spans");
    let spans = &mut req.resource_spans[0].scope_spans[0].spans;
    let good = spans[0].clone();
    spans[0].attributes.extend([
        kv("big", V::StringValue("x".repeat(1 << 20))),
        kv("deep", deep),
        kv("bytes", V::BytesValue(vec![0, 159, 146, 150])),
        kv(
            "array",
            V::ArrayValue(ArrayValue {
                values: vec![
                    AnyValue {
                        value: Some(V::DoubleValue(f64::NAN)),
                    },
                    AnyValue {
                        value: Some(V::BoolValue(true)),
                    },
                    AnyValue { value: None },
                ],
            }),
        ),
    ]);
    spans[1].name = String::new();
    spans.push(Span {
        trace_id: vec![1, 2, 3],
        ..good.clone()
    });
    spans.push(Span {
        span_id: vec![9; 8],
        start_time_unix_nano: u64::MAX,
        ..good.clone()
    });
    spans.push(Span {
        span_id: vec![8; 8],
        kind: 99,
        ..good
    });
    let mut body = req.encode_to_vec();
    // An unknown field (number 99, a string) at the top level: protobuf skips it.
    body.extend_from_slice(&[0x9a, 0x06, 0x03, b'a', b'b', b'c']);
    let (status, head, answer) = post(o.http, &proto, &body);
    assert_eq!(status, 200, "{head}");
    let partial = ExportTraceServiceResponse::decode(answer.as_slice())
        .unwrap()
        .partial_success
        .expect("a partial success");
    assert_eq!(partial.rejected_spans, 3, "{partial:?}");
    assert!(
        partial.error_message.contains("traceId is 3 bytes, not 16"),
        "{partial:?}"
    );
    let rows = cli(
        store.to_str().unwrap(),
        "SELECT name, length(attributes) AS len, attributes FROM spans WHERE service_name = 'odd-spans' ORDER BY name",
        &[],
    );
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0]["name"], "");
    let attrs: Value = serde_json::from_str(rows[1]["attributes"].as_str().unwrap()).unwrap();
    assert_eq!(attrs["big"].as_str().unwrap().len(), 1 << 20);
    assert_eq!(attrs["bytes"], "AJ+Slg==");
    assert_eq!(attrs["array"], serde_json::json!(["NaN", true, null]));
    let mut d = &attrs["deep"];
    for _ in 0..25 {
        d = &d["k"];
    }
    assert_eq!(d, "bottom");
    still_serves();

    // JSON with a bad span among good ones: a partial success in JSON.
    let line = std::fs::read_to_string(Path::new(ROOT).join("data/traces/react-v1.jsonl"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .replacen("\"spanId\":\"", "\"spanId\":\"zz", 1);
    let (status, head, body) = post(o.http, &json, line.as_bytes());
    assert_eq!(status, 200, "{head}");
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["partialSuccess"]["rejectedSpans"], "1", "{answer}");
    still_serves();
}

#[test]
fn listeners_off_loopback_need_tokens_and_grpc_checks_them() {
    let dir = temp_dir("otlp-auth");
    let store = dir.join("store");
    let out = Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .envs(LOGIN)
        .args(["serve", "--port", "0", "--otlp", "0.0.0.0:0", "--store"])
        .arg(&store)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("without --otlp-tokens the OTLP listeners serve loopback only"),
        "{err}"
    );

    let o = start(&dir, store.to_str().unwrap(), &[], &[]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
        let mut client = TraceServiceClient::connect(format!("http://127.0.0.1:{}", o.grpc))
            .await
            .unwrap();
        for auth in [None, Some("Bearer nope".to_string()), Some(format!("Bearer {}", o.token))] {
            let mut req = tonic::Request::new(request(31, 4, "grpc-auth"));
            if let Some(a) = &auth {
                req.metadata_mut()
                    .insert("authorization", a.parse().unwrap());
            }
            let answer = client.export(req).await;
            match auth.as_deref() {
                Some(a) if a.contains(&o.token) => {
                    assert!(answer.unwrap().into_inner().partial_success.is_none())
                }
                _ => assert_eq!(
                    answer.unwrap_err().code(),
                    tonic::Code::Unauthenticated,
                    "{auth:?}"
                ),
            }
        }
    });
    assert_eq!(
        count(store.to_str().unwrap(), "service_name = 'grpc-auth'").0,
        4
    );
}

#[test]
fn agent_metrics_run_over_spans_as_over_read_otlp() {
    let dir = temp_dir("otlp-agents");
    let store = dir.join("store");
    let o = start(&dir, store.to_str().unwrap(), &[], &[]);
    let auth = format!("Bearer {}", o.token);
    for file in ["data/traces/react-v1.jsonl", "data/traces/planner-v2.jsonl"] {
        let text = std::fs::read_to_string(Path::new(ROOT).join(file)).unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (status, head, _) = post(
                o.http,
                &[
                    ("Content-Type", "application/json"),
                    ("Authorization", &auth),
                ],
                line.as_bytes(),
            );
            assert_eq!(status, 200, "{head}");
        }
    }
    // What has no read_otlp column is kept too: trace state, links, events, the scope.
    let linked = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"linked"}}]},"scopeSpans":[{"scope":{"name":"s","version":"1.2"},"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","traceState":"vendor=1","name":"linked","kind":"SPAN_KIND_SERVER","startTimeUnixNano":"1700000000000000001","endTimeUnixNano":"1700000000000000002","links":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","attributes":[{"key":"why","value":{"stringValue":"retry"}}]}],"events":[{"timeUnixNano":"1700000000000000001","name":"gen_ai.user.message","attributes":[{"key":"content","value":{"stringValue":"hi"}}]}]}]}]}]}"#;
    let (status, head, _) = post(
        o.http,
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &auth),
        ],
        linked.as_bytes(),
    );
    assert_eq!(status, 200, "{head}");
    let rows = cli(
        store.to_str().unwrap(),
        "SELECT trace_state, links, events, scope_name, scope_version, start_time_unix_nano, \
         CAST(start_time AS BIGINT) AS ns, input_text, input_messages, kind, start_date \
         FROM spans WHERE service_name = 'linked'",
        &[],
    );
    let r = &rows[0];
    assert_eq!(r["trace_state"], "vendor=1");
    let links: Value = serde_json::from_str(r["links"].as_str().unwrap()).unwrap();
    assert_eq!(
        links,
        serde_json::json!([{"trace_id": "5b8efff798038103d269b633813fc60c", "span_id": "eee19b7ec3c1b174", "trace_state": "", "attributes": {"why": "retry"}}])
    );
    let events: Value = serde_json::from_str(r["events"].as_str().unwrap()).unwrap();
    assert_eq!(
        events,
        serde_json::json!([{"time_unix_nano": "1700000000000000001", "name": "gen_ai.user.message", "attributes": {"content": "hi"}}])
    );
    assert_eq!(
        (r["scope_name"].as_str(), r["scope_version"].as_str()),
        (Some("s"), Some("1.2"))
    );
    assert_eq!(r["start_time_unix_nano"], 1700000000000000001u64);
    assert_eq!(
        r["ns"], 1700000000000000001u64,
        "start_time keeps its nanoseconds"
    );
    assert_eq!(r["input_text"], "hi");
    let messages: Value = serde_json::from_str(r["input_messages"].as_str().unwrap()).unwrap();
    assert_eq!(
        messages,
        serde_json::json!([{"role": "user", "content": "hi"}])
    );
    assert_eq!(
        (r["kind"].as_str(), r["start_date"].as_str()),
        (Some("SERVER"), Some("2023-11-14"))
    );
    let sql = std::fs::read_to_string(Path::new(ROOT).join("queries/traces.sql")).unwrap();
    let per_agent = &sql[sql.find("WITH spans AS").unwrap()..];
    let over_store = per_agent.replace("read_otlp('data/traces')", "datafusion.public.spans");
    assert_ne!(over_store, per_agent);
    let a = cli(store.to_str().unwrap(), per_agent, &[]);
    let b = cli(store.to_str().unwrap(), &over_store, &[]);
    assert_eq!(a.len(), 2);
    assert_eq!(a, b);
    // And every read_otlp column of every span is the same.
    let columns = "trace_id, span_id, parent_span_id, name, kind, start_time, end_time, duration_ms, \
         status_code, status_message, service_name, attributes, operation_name, model, agent_name, \
         conversation_id, tool_name, tool_call_id, tool_arguments, tool_result, input_tokens, \
         output_tokens, input_messages, output_messages, input_text, output_text";
    let a = cli(
        store.to_str().unwrap(),
        &format!("SELECT {columns} FROM read_otlp('data/traces') ORDER BY span_id"),
        &[],
    );
    let b = cli(
        store.to_str().unwrap(),
        &format!("SELECT {columns} FROM spans WHERE service_name <> 'linked' ORDER BY span_id"),
        &[],
    );
    assert_eq!(a.len(), b.len());
    assert_eq!(a, b);
    // Another reader of the same table: `STORED AS DELTA`, Delta's own columns.
    let location = store.join("spans");
    let rows = cli(
        store.to_str().unwrap(),
        &format!(
            "CREATE EXTERNAL TABLE d STORED AS DELTA LOCATION '{}'; \
             SELECT count(*) AS n, max(start_date) AS day FROM d WHERE service_name <> 'linked'",
            location.display()
        ),
        &[],
    );
    assert_eq!(rows.last().unwrap()["n"], a.len(), "{rows:?}");
    assert_eq!(rows.last().unwrap()["day"], "2026-11-02", "{rows:?}");
}

#[test]
fn two_servers_share_one_store_on_s3() {
    let Some((_moto, port)) = crate::object_store::start_moto() else {
        return;
    };
    crate::object_store::create_bucket(port, "traces");
    let endpoint = format!("http://127.0.0.1:{port}");
    let env = [
        ("AWS_ACCESS_KEY_ID", "evalsql-test"),
        ("AWS_SECRET_ACCESS_KEY", "evalsql-test-secret"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
    ];
    let store = "s3://traces/otel/";
    let dir = temp_dir("otlp-s3");
    // A monitor in both: its lease (a create-if-absent put on S3) gives it to one of them.
    std::fs::create_dir_all(&dir).unwrap();
    let init = dir.join("init.sql");
    std::fs::write(
        &init,
        "CREATE MONITOR per_trace EVERY '1 second' AFTER IDLE '1 second' AS \
         SELECT trace_id, count(*) AS spans FROM spans GROUP BY trace_id;",
    )
    .unwrap();
    // Both compact too, every second, racing each other and the commits.
    let args = [
        "--otlp-flush-ms",
        "20",
        "--store-maintenance",
        "1",
        "--init",
        init.to_str().unwrap(),
    ];
    let servers = [
        start(&dir.join("a"), store, &args, &env),
        start(&dir.join("b"), store, &args, &env),
    ];
    // Both write at once; each request is committed by one of them, racing the other.
    std::thread::scope(|scope| {
        for (k, o) in servers.iter().enumerate() {
            scope.spawn(move || {
                for i in 0..15u64 {
                    let seed = 500 + (k as u64) * 100 + i;
                    let (status, head, _) = export(o, &request(seed, 20, "shared"));
                    assert_eq!(status, 200, "{head}");
                }
            });
        }
    });
    assert_eq!(
        count_with(store, "service_name = 'shared'", &env),
        (600, 600)
    );
    // The same table as any Delta table, through the object store the CLI configures.
    let as_any_delta_table = || {
        let rows = cli(
            store,
            "CREATE EXTERNAL TABLE shared STORED AS DELTA LOCATION 's3://traces/otel/spans'; \
             SELECT count(*) AS n FROM shared WHERE service_name = 'shared'",
            &env,
        );
        rows.last().unwrap()["n"].clone()
    };
    assert_eq!(as_any_delta_table(), 600);
    // Once the small files are compacted, every row is still there once, to any Delta
    // reader: two compactions of the same files are never both committed.
    let began = std::time::Instant::now();
    while !log_on_s3_mentions(&endpoint, "OPTIMIZE") {
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "no compaction on S3"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        count_with(store, "service_name = 'shared'", &env),
        (600, 600)
    );
    assert_eq!(as_any_delta_table(), 600);

    // The monitor scored each of the 30 traces, in one process only, with no run refused.
    let began = std::time::Instant::now();
    let scored = loop {
        let rows = cli(
            store,
            "SELECT count(*) AS n, sum(spans) AS spans FROM monitors.per_trace",
            &env,
        );
        if rows[0]["n"] == 30 || began.elapsed() > Duration::from_secs(60) {
            break rows[0].clone();
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(scored["n"], 30, "{scored}");
    assert_eq!(scored["spans"], 600, "{scored}");
    let runs = cli(
        store,
        "SELECT count(*) FILTER (WHERE status <> 'ok') AS bad, \
         count(DISTINCT process) AS processes FROM monitor_runs WHERE traces_sampled > 0",
        &env,
    );
    assert_eq!(runs[0]["bad"], 0, "{runs:?}");
    assert_eq!(runs[0]["processes"], 1, "{runs:?}");
}

/// A store on Azure Blob Storage (Azurite) takes spans, as one on S3 does: commits with a
/// create-if-absent put, compaction while serving, every span once. (gs:// stores are built
/// the same way; fake-gcs-server refuses object_store's uploads, so they are not tried.)
#[test]
fn a_store_on_azure_blob_storage_takes_spans_and_compacts() {
    let Some((_azurite, port)) = crate::object_store::start_azurite() else {
        return;
    };
    crate::object_store::create_container(port, "traces");
    let url = format!("http://127.0.0.1:{port}");
    let env = [
        ("AZURE_STORAGE_USE_EMULATOR", "true"),
        ("AZURITE_BLOB_STORAGE_URL", url.as_str()),
    ];
    let store = "az://traces/otel/";
    let dir = temp_dir("otlp-azure");
    let o = start(
        &dir,
        store,
        &["--otlp-flush-ms", "1", "--store-maintenance", "1"],
        &env,
    );
    for k in 0..12u64 {
        assert_eq!(export(&o, &request(700 + k, 10, "azure")).0, 200);
    }
    assert_eq!(
        count_with(store, "service_name = 'azure'", &env),
        (120, 120)
    );
    // A compaction commits on Azure too.
    let began = Instant::now();
    let compacted = loop {
        let listing = crate::object_store::azurite_get(
            port,
            "traces?restype=container&comp=list&prefix=otel/spans/_delta_log/",
        );
        let found = listing
            .split("<Name>")
            .skip(1)
            .filter_map(|n| n.split_once("</Name>").map(|(n, _)| n))
            .filter(|n| n.ends_with(".json"))
            .any(|n| {
                crate::object_store::azurite_get(port, &format!("traces/{n}")).contains("OPTIMIZE")
            });
        if found || began.elapsed() > Duration::from_secs(30) {
            break found;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(compacted, "no compaction on Azure");
    assert_eq!(
        count_with(store, "service_name = 'azure'", &env),
        (120, 120)
    );
    let rows = cli(
        store,
        "CREATE EXTERNAL TABLE t STORED AS DELTA LOCATION 'az://traces/otel/spans'; \
         SELECT count(*) AS n FROM t WHERE service_name = 'azure'",
        &env,
    );
    assert_eq!(rows.last().unwrap()["n"], 120, "{rows:?}");
}

/// Whether an entry of the span table's log in the test bucket holds `text`.
fn log_on_s3_mentions(endpoint: &str, text: &str) -> bool {
    use futures::TryStreamExt;
    use object_store::{ObjectStore, ObjectStoreExt, aws::AmazonS3Builder, path::Path};
    let s3 = AmazonS3Builder::new()
        .with_bucket_name("traces")
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("evalsql-test")
        .with_secret_access_key("evalsql-test-secret")
        .build()
        .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let log = Path::from("otel/spans/_delta_log");
        let entries: Vec<_> = s3.list(Some(&log)).try_collect().await.unwrap();
        for entry in entries {
            if !entry.location.as_ref().ends_with(".json") {
                continue;
            }
            let body = s3
                .get(&entry.location)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
            if String::from_utf8_lossy(&body).contains(text) {
                return true;
            }
        }
        false
    })
}

#[test]
fn tls_covers_the_otlp_listeners_too() {
    let dir = temp_dir("otlp-tls");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !made.is_ok_and(|s| s.success()) {
        skipped("the OTLP TLS test", "no openssl to make a certificate");
        return;
    }
    let store = dir.join("store");
    let o = start(
        &dir,
        store.to_str().unwrap(),
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        &[],
    );
    // Plain HTTP to a TLS listener gets nothing.
    let (status, _, _) = export(&o, &request(3, 1, "plain"));
    assert_eq!(status, 0);
    // curl over HTTP/1.1 and HTTP/2, verifying the certificate.
    let body = dir.join("body.pb");
    std::fs::write(&body, request(4, 2, "tls-curl").encode_to_vec()).unwrap();
    for version in ["--http1.1", "--http2"] {
        let out = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{http_version}",
                version,
            ])
            .arg("--cacert")
            .arg(&cert)
            .args(["-H", "Content-Type: application/x-protobuf"])
            .args(["-H", &format!("Authorization: Bearer {}", o.token)])
            .arg("--data-binary")
            .arg(format!("@{}", body.display()))
            .arg(format!("https://127.0.0.1:{}/v1/traces", o.http))
            .output();
        match out {
            Ok(out) => {
                let said = String::from_utf8_lossy(&out.stdout).to_string();
                let want = if version == "--http2" {
                    "200 2"
                } else {
                    "200 1.1"
                };
                assert_eq!(
                    said,
                    want,
                    "{version}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            Err(_) => skipped("the curl part of the OTLP TLS test", "no curl"),
        }
    }
    match python() {
        None => skipped(
            "the Python part of the OTLP TLS test",
            "no OpenTelemetry SDK (EVALSQL_OTLP_PYTHON)",
        ),
        Some(py) => {
            let out = Command::new(py)
                .arg(Path::new(ROOT).join("tests/otlp/tls_send.py"))
                .args([&o.http.to_string(), &o.grpc.to_string(), &o.token])
                .arg(&cert)
                // requests prefers these to the exporter's own certificate_file.
                .env_remove("REQUESTS_CA_BUNDLE")
                .env_remove("CURL_CA_BUNDLE")
                .output()
                .unwrap();
            let got: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
                panic!("tls_send.py: {}", String::from_utf8_lossy(&out.stderr))
            });
            assert_eq!(
                got,
                serde_json::json!({"http": "SUCCESS", "grpc": "SUCCESS"})
            );
            assert_eq!(
                count(store.to_str().unwrap(), "service_name = 'tls-app'").0,
                2
            );
        }
    }
}

#[test]
fn a_full_queue_says_retry_and_the_store_is_kept_small() {
    let dir = temp_dir("otlp-queue");
    let store = dir.join("store");
    let store_s = store.to_str().unwrap();
    // A queue of 1 KiB: while one request waits for its commit, the others sent at the
    // same moment are told to come back.
    let o = start(
        &dir,
        store_s,
        &["--otlp-queue", "1k", "--store-maintenance", "2"],
        &[],
    );
    let go = std::sync::Barrier::new(8);
    let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8u64)
            .map(|k| {
                let (o, go) = (&o, &go);
                scope.spawn(move || {
                    let body = request(40 + k, 5, "queued");
                    go.wait();
                    let (status, head, _) = export(o, &body);
                    (status, head)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let busy: Vec<_> = answers.iter().filter(|(s, _)| *s == 429).collect();
    let ok = answers.iter().filter(|(s, _)| *s == 200).count();
    assert!(
        ok >= 1 && !busy.is_empty() && ok + busy.len() == 8,
        "{answers:?}"
    );
    assert!(
        busy.iter().all(|(_, h)| h.contains("retry-after: 1")),
        "{busy:?}"
    );
    drop(o);

    // Many small commits: checkpoints are written, and upkeep compacts the small files
    // while the server runs; every span stays, once.
    let o = start(
        &dir,
        store_s,
        &["--otlp-flush-ms", "1", "--store-maintenance", "2"],
        &[],
    );
    for k in 0..25u64 {
        assert_eq!(export(&o, &request(100 + k, 4, "small")).0, 200);
    }
    let log = store.join("spans/_delta_log");
    let began = Instant::now();
    let optimized = loop {
        let found = std::fs::read_dir(&log).unwrap().any(|e| {
            let p = e.unwrap().path();
            p.extension().is_some_and(|x| x == "json")
                && std::fs::read_to_string(&p)
                    .unwrap_or_default()
                    .contains("\"operation\":\"OPTIMIZE\"")
        });
        if found || began.elapsed() > Duration::from_secs(30) {
            break found;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(optimized, "no compaction in {}", log.display());
    assert!(log.join("_last_checkpoint").exists(), "no checkpoint");
    assert_eq!(count(store_s, "service_name = 'small'"), (100, 100));
    // Commits' files and compacted ones alike carry a bloom filter on trace_id (what a
    // monitor's scan for its traces skips row groups by).
    let files = parquet_files(&store.join("spans"));
    assert!(files.len() > 1, "{files:?}");
    for file in files {
        use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
        let reader = SerializedFileReader::new(std::fs::File::open(&file).unwrap()).unwrap();
        for group in reader.metadata().row_groups() {
            let trace = group
                .columns()
                .iter()
                .find(|c| c.column_path().string() == "trace_id")
                .expect("a trace_id column");
            assert!(
                trace.bloom_filter_offset().is_some(),
                "{}: no bloom filter on trace_id",
                file.display()
            );
        }
    }
}

/// The data files under `dir` (Parquet, at any depth; not the log's checkpoints).
fn parquet_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.ends_with("_delta_log") {
            continue;
        }
        if path.is_dir() {
            out.extend(parquet_files(&path));
        } else if path.extension().is_some_and(|x| x == "parquet") {
            out.push(path);
        }
    }
    out
}
