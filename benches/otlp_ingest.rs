//! How fast `evalsql serve --otlp` takes spans, durably: `cargo bench --bench otlp_ingest`.
//!
//! The server is the real binary (this build's, release under `cargo bench`), on loopback,
//! storing into a fresh Delta table in a temporary directory. A load generator replays
//! pre-encoded OTLP/HTTP protobuf requests — 512 spans of about 1 KB each, with GenAI
//! attributes, as an SDK's batch processor sends them — over several keep-alive connections
//! (an SDK in Python is slower than the server, so it would measure itself). Every span of
//! every request is new. It prints spans acknowledged per second (an acknowledgement means
//! committed), the p50 / p99 time to acknowledgement, and the server's memory (peak, and at
//! the start and end of the run: a flood must not grow it). Then, in the same run, the rate
//! of writing the same rows to Parquet alone (snappy, one file per 50,000 rows): the floor
//! of what the store costs, so the ratio is visible.
//!
//! A run of two minutes or more also prints each minute's rate, p99 and memory.
//!
//! `EVALSQL_BENCH_SECS` (default 20; a 10-minute flood is 600) and
//! `EVALSQL_BENCH_CONNECTIONS` (default 24: no more than half of serve's connection slots, which OTLP may hold) set the run;
//! `EVALSQL_BENCH_RETENTION_HOURS` is serve's `--store-retention` (default 168: every file
//! a compaction replaced stays, so a 20-minute flood needs ~50 GB of disk; 0 deletes them
//! at the next compaction).

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::Compression;
use datafusion::parquet::file::properties::WriterProperties;
use evalsql_udfs::spans::{SpanRows, store_schema};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value as V};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

#[path = "support/serve.rs"]
mod serve;
use serve::Server;

const SPANS_PER_REQUEST: usize = 512;

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

/// The mark every id starts with, before the 3-byte number of the round that sends it: a
/// pre-encoded request is replayed with new ids by rewriting the three bytes after each mark.
const MARK: [u8; 2] = [0xa5, 0x5a];

/// Where the marks of a pre-encoded request are, found once: the generator shares the
/// server's two cores, so each send only copies the request and writes the round's bytes.
fn marks(encoded: &[u8]) -> Vec<usize> {
    let mut at = Vec::new();
    let mut i = 0;
    while i + 5 <= encoded.len() {
        if encoded[i..i + 5] == [MARK[0], MARK[1], 0, 0, 0] {
            at.push(i);
            i += 5;
        } else {
            i += 1;
        }
    }
    at
}

/// A request's bytes after `head`, with the round's number written after each mark.
fn with_round(head: &[u8], encoded: &[u8], marks: &[usize], round: u32, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(head);
    out.extend_from_slice(encoded);
    let r = round.to_be_bytes();
    for &i in marks {
        out[head.len() + i + 2..head.len() + i + 5].copy_from_slice(&r[1..]);
    }
}

/// Request `n` (< 256) of round 0: 512 spans of one service, about 1 KB each.
fn request(n: u64) -> ExportTraceServiceRequest {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let spans = (0..SPANS_PER_REQUEST as u64)
        .map(|i| {
            let mut trace_id = [0u8; 16];
            trace_id[..2].copy_from_slice(&MARK);
            trace_id[5] = n as u8;
            trace_id[8..].copy_from_slice(&(i / 8).to_be_bytes());
            let span_id = |i: u64| {
                let mut id = [0u8; 8];
                id[..2].copy_from_slice(&MARK);
                id[5] = n as u8;
                id[6..].copy_from_slice(&(i as u16).to_be_bytes());
                id.to_vec()
            };
            Span {
                trace_id: trace_id.to_vec(),
                span_id: span_id(i),
                parent_span_id: if i % 8 == 0 {
                    Vec::new()
                } else {
                    span_id(i - i % 8)
                },
                name: "chat gpt-4o".into(),
                kind: 3,
                start_time_unix_nano: now + i * 1000,
                end_time_unix_nano: now + i * 1000 + 350_000_000,
                attributes: vec![
                    kv("gen_ai.operation.name", V::StringValue("chat".into())),
                    kv("gen_ai.system", V::StringValue("openai".into())),
                    kv("gen_ai.request.model", V::StringValue("gpt-4o".into())),
                    kv("gen_ai.usage.input_tokens", V::IntValue(412 + i as i64)),
                    kv("gen_ai.usage.output_tokens", V::IntValue(57)),
                    kv("gen_ai.conversation.id", V::StringValue(format!("conv-{n}-{}", i / 8))),
                    kv(
                        "gen_ai.input.messages",
                        V::StringValue(format!(
                            r#"[{{"role":"user","parts":[{{"type":"text","content":"Request {n}/{i}: {}"}}]}}]"#,
                            "summarise the quarterly revenue by region and flag anomalies; "
                                .repeat(6)
                        )),
                    ),
                    kv(
                        "gen_ai.output.messages",
                        V::StringValue(format!(
                            r#"[{{"role":"assistant","parts":[{{"type":"text","content":"{}"}}],"finish_reason":"stop"}}]"#,
                            "Revenue grew in EMEA and fell in APAC. ".repeat(4)
                        )),
                    ),
                ],
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", V::StringValue("bench-app".into())),
                    kv("service.version", V::StringValue("1.4.2".into())),
                ],
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

fn start(store: &std::path::Path) -> Server {
    let mut args = vec![
        OsStr::new("--store").to_owned(),
        store.as_os_str().to_owned(),
    ];
    if let Ok(hours) = std::env::var("EVALSQL_BENCH_RETENTION_HOURS") {
        args.extend(["--store-retention".into(), hours.into()]);
    }
    serve::start(args)
}

/// One keep-alive connection: sends a request, waits for its answer; the status.
fn exchange(s: &mut BufReader<TcpStream>, request: &[u8]) -> u16 {
    s.get_mut().write_all(request).unwrap();
    let mut status = 0;
    let mut length = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        s.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if status == 0 {
            status = l
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
        } else if let Some(v) = l
            .to_ascii_lowercase()
            .strip_prefix("content-length:")
            .map(|v| v.trim().to_string())
        {
            length = v.parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    s.read_exact(&mut body).unwrap();
    status
}

fn main() {
    let secs = env_num("EVALSQL_BENCH_SECS", 20);
    let connections = env_num("EVALSQL_BENCH_CONNECTIONS", 24) as usize;
    let dir = std::env::temp_dir().join(format!("evalsql-bench-otlp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // Pre-encoded: each connection replays its own requests, new ids every time (a request
    // repeated would be dropped as a retry, and cost less).
    let pool = 64u64; // request numbers go in one byte of the ids
    let encoded: Vec<(Vec<u8>, Vec<usize>)> = (0..pool)
        .map(|n| {
            let bytes = request(n).encode_to_vec();
            let at = marks(&bytes);
            (bytes, at)
        })
        .collect();
    let span_bytes = encoded[0].0.len() / SPANS_PER_REQUEST;
    println!(
        "otlp_ingest: {connections} connections, {secs} s, requests of {SPANS_PER_REQUEST} spans, {span_bytes} bytes a span encoded"
    );

    let server = start(&dir.join("store"));
    let port = server.1;
    let stop = Arc::new(AtomicBool::new(false));
    // (when a request was sent, in the run; how long its answer took)
    let latencies = Arc::new(Mutex::new(Vec::<(Duration, Duration)>::new()));
    let refused = Arc::new(Mutex::new(0u64));
    let rss_start = server.rss("VmRSS");
    let began = Instant::now();
    let encoded = Arc::new(encoded);
    let workers: Vec<_> = (0..connections as u32)
        .map(|c| {
            let (stop, latencies, refused) =
                (Arc::clone(&stop), Arc::clone(&latencies), Arc::clone(&refused));
            let encoded = Arc::clone(&encoded);
            std::thread::spawn(move || {
                let mut s = BufReader::new(TcpStream::connect(("127.0.0.1", port)).unwrap());
                s.get_ref().set_nodelay(true).unwrap();
                let mut round = 1 + c;
                let mut mine = Vec::new();
                let mut bytes = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    // New ids: a pre-encoded request with this round's number in its ids.
                    let pool = pool as u32;
                    let (req, at) = &encoded[(round % pool) as usize];
                    let head = format!(
                        "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
                        req.len()
                    );
                    with_round(head.as_bytes(), req, at, round / pool + 1, &mut bytes);
                    let sent = Instant::now();
                    let status = exchange(&mut s, &bytes);
                    if status == 200 {
                        mine.push((sent - began, sent.elapsed()));
                    } else {
                        *refused.lock().unwrap() += 1;
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    round += connections as u32;
                }
                latencies.lock().unwrap().extend(mine);
            })
        })
        .collect();
    let mut rss_peak = 0;
    let mut rss_samples = Vec::new();
    while began.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs(1));
        let rss = server.rss("VmRSS");
        rss_peak = rss_peak.max(rss);
        rss_samples.push(rss);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let took = began.elapsed();
    let sent = latencies.lock().unwrap().clone();
    if secs >= 120 {
        // A long flood, minute by minute: whether it holds its rate, latency and memory.
        for minute in 0..secs.div_ceil(60) {
            let mut in_it: Vec<Duration> = sent
                .iter()
                .filter(|(at, _)| at.as_secs() / 60 == minute)
                .map(|(_, l)| *l)
                .collect();
            in_it.sort();
            let p99 = in_it
                .get(((in_it.len() as f64 - 1.0) * 0.99) as usize)
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0);
            let rss = rss_samples
                .get(((minute + 1) * 60) as usize - 1)
                .or(rss_samples.last())
                .copied()
                .unwrap_or(0);
            println!(
                "  minute {}: {:.0} spans/s, p99 {p99:.0} ms, memory {:.0} MiB",
                minute + 1,
                (in_it.len() * SPANS_PER_REQUEST) as f64 / 60.0,
                rss as f64 / (1 << 20) as f64
            );
        }
    }
    let mut lat: Vec<Duration> = sent.into_iter().map(|(_, l)| l).collect();
    lat.sort();
    let acked = lat.len() as u64 * SPANS_PER_REQUEST as u64;
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1000.0;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let tenth = (rss_samples.len() / 10).max(1);
    let early: u64 = rss_samples[..tenth].iter().sum::<u64>() / tenth as u64;
    let late: u64 = rss_samples[rss_samples.len() - tenth..].iter().sum::<u64>() / tenth as u64;
    println!(
        "serve --otlp: {:.0} spans/s acknowledged (durable), {} spans in {:.1} s; p50 {:.0} ms, p99 {:.0} ms; {} requests told to retry",
        acked as f64 / took.as_secs_f64(),
        acked,
        took.as_secs_f64(),
        pct(0.5),
        pct(0.99),
        refused.lock().unwrap()
    );
    println!(
        "  memory: {:.0} MiB before, peak {:.0} MiB; first tenth of the run {:.0} MiB, last tenth {:.0} MiB",
        mib(rss_start),
        mib(rss_peak.max(server.rss("VmHWM"))),
        mib(early),
        mib(late)
    );
    drop(server);

    // The floor: the same rows, made from the same requests, written to Parquet alone.
    let schema = store_schema();
    let began = Instant::now();
    let mut rows = 0usize;
    let mut file = 0;
    let mut writer: Option<ArrowWriter<std::fs::File>> = None;
    let parquet_dir = dir.join("parquet");
    std::fs::create_dir_all(&parquet_dir).unwrap();
    let target = acked.max(200_000) as usize;
    let mut n = 0u64;
    while rows < target {
        let req =
            ExportTraceServiceRequest::decode(encoded[(n % pool) as usize].0.as_slice()).unwrap();
        let mut b = SpanRows::for_store();
        for rs in &req.resource_spans {
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    b.push(rs.resource.as_ref(), ss.scope.as_ref(), span, "bench")
                        .unwrap();
                }
            }
        }
        let batch = b.finish_store(&schema, 0).unwrap();
        rows += batch.num_rows();
        let w = writer.get_or_insert_with(|| {
            file += 1;
            ArrowWriter::try_new(
                std::fs::File::create(parquet_dir.join(format!("{file}.parquet"))).unwrap(),
                batch.schema(),
                Some(
                    WriterProperties::builder()
                        .set_compression(Compression::SNAPPY)
                        .build(),
                ),
            )
            .unwrap()
        });
        w.write(&batch).unwrap();
        if rows % 50_000 < SPANS_PER_REQUEST {
            writer.take().unwrap().close().unwrap();
        }
        n += 1;
    }
    if let Some(w) = writer {
        w.close().unwrap();
    }
    let floor = rows as f64 / began.elapsed().as_secs_f64();
    println!(
        "parquet alone (decode, rows, snappy files, one process): {floor:.0} spans/s; the server reaches {:.0}% of it",
        100.0 * acked as f64 / took.as_secs_f64() / floor
    );
    let _ = std::fs::remove_dir_all(&dir);
}
