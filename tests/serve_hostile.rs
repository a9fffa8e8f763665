//! `evalsql serve` against a hostile logged-in client: one test per hole a security review
//! found (a statement that overflowed a stack, `SELECT … INTO`, a dialect switch that hid a
//! `generate()` call, an allocation that aborted the process, a message of 1 GiB before
//! login, Unicode setting names, a query nothing could stop), and a seeded fuzzer of 10,000
//! hostile statements (`tests/serve/fuzz.py`). The real binary, psql and psycopg 3.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::serve::{Server, psql, psycopg_python, run_psql, run_psycopg, start_server, temp_dir};
use crate::stub_judge::{StubConfig, StubJudge};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A data root with the sample QA file and an init file registering it as `qa`.
fn data_root(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = temp_dir(name);
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::copy(Path::new(ROOT).join("data/qa.jsonl"), root.join("qa.jsonl")).unwrap();
    let init = dir.join("init.sql");
    std::fs::write(
        &init,
        format!(
            "CREATE EXTERNAL TABLE qa STORED AS JSON LOCATION '{}';\n",
            root.join("qa.jsonl").display()
        ),
    )
    .unwrap();
    (root, init)
}

/// `evalsql serve` over a fresh data root holding the sample QA file as table `qa`, with
/// `extra` flags; returns the server and the root.
fn serve_root(name: &str, env: &[(&str, &str)], extra: &[&str]) -> (Server, PathBuf) {
    let (root, init) = data_root(name);
    let (init, root_arg) = (init.display().to_string(), root.display().to_string());
    let mut args = vec!["--init", init.as_str(), "--data-root", root_arg.as_str()];
    args.extend_from_slice(extra);
    (start_server(env, &args).unwrap(), root)
}

/// Every file under `dir`, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            out.push(path.display().to_string());
        }
    }
    out.sort();
    out
}

#[test]
fn hostile_statements_end_in_errors_and_the_server_stays_up() {
    let Some(psql) = psql() else { return };
    let stub = StubJudge::start_in_background(StubConfig {
        latency: Duration::from_millis(1500),
        ..Default::default()
    });
    let base_url = stub.base_url();
    let env = [
        ("EVALSQL_PG_USER", "mallory"),
        ("EVALSQL_PG_PASSWORD", "pw-h0st1le"),
        ("OPENAI_API_KEY", "sk-operator-key-77"),
        ("OPENAI_BASE_URL", base_url.as_str()),
        ("EVALSQL_JUDGE_MODEL", "stub-judge"),
        ("EVALSQL_JUDGE_CACHE", "off"),
    ];
    // 6 s: a debug build planning the 500-term chain below takes over a second alone, and
    // more under the parallel load of the whole suite.
    let (server, root) = serve_root("hostile", &env, &["--statement-timeout", "6"]);
    let port = server.port;
    let sql = |sql: &str| run_psql(&psql, port, "mallory", "pw-h0st1le", sql);
    let alive = || {
        let (ok, out, err) = sql("SELECT 1 + 1");
        assert!(
            ok && out.trim() == "2",
            "the server stopped serving: {out}{err}"
        );
    };
    let before = files(&root);

    // 1. A long chain of additions: within --max-expression-depth it runs, beyond it is an
    //    error before planning; the process never overflows a stack.
    let (ok, out, err) = sql(&format!("SELECT 1{}", "+1".repeat(499)));
    assert!(ok && out.trim() == "500", "{out}{err}");
    for terms in [2_000, 20_000] {
        let (ok, _, err) = sql(&format!("SELECT 1{}", "+1".repeat(terms - 1)));
        assert!(!ok && err.contains("--max-expression-depth"), "{err}");
        alive();
    }
    // Nested calls and subqueries cost upstream more than linear time per level: refused
    // on their tokens, before anything parses them.
    let (ok, _, err) = sql(&format!("SELECT {}1{}", "abs(".repeat(40), ")".repeat(40)));
    assert!(!ok && err.contains("--max-nesting"), "{err}");
    let (ok, _, err) = sql(&format!(
        "SELECT {}1{}",
        "(SELECT ".repeat(30),
        ")".repeat(30)
    ));
    assert!(!ok && err.contains("--max-nesting"), "{err}");
    alive();

    // 2. SELECT … INTO creates a table: refused, and no other connection sees one.
    let (ok, _, err) = sql("SELECT 1 AS x INTO stolen");
    assert!(!ok && err.contains("writes are disabled"), "{err}");
    let (ok, _, _) = sql("SELECT * FROM stolen");
    assert!(!ok);
    let (ok, _, err) = sql(&format!(
        "SELECT 1 AS x INTO \"{}\"",
        root.join("shadow.csv").display()
    ));
    assert!(!ok && err.contains("writes are disabled"), "{err}");

    // 3. The dialect cannot change, and what one parser reads as strings stays strings: the
    //    endpoint receives nothing.
    for set in [
        "SET datafusion.sql_parser.dialect = 'MySQL'",
        "SET \"datafusion.sql_parser.dialect\" = 'MySQL'",
        "SET datafusion.sql_parser.enable_ident_normalization = false",
    ] {
        let (ok, _, err) = sql(set);
        assert!(!ok && err.contains("not allowed"), "{set}: {err}");
    }
    let (ok, out, err) =
        sql("SELECT 'a\\' AS p, ', generate(concat(chr(72),chr(73))) AS g # ' AS q");
    assert!(ok, "{err}");
    assert!(
        out.contains("generate(concat"),
        "read as a string literal: {out}"
    );
    for call in [
        "SELECT generate('hi')",
        "SELECT \"generate\"('hi')",
        "EXPLAIN ANALYZE SELECT generate('hi')",
        "WITH g AS (SELECT generate('hi') AS r) SELECT * FROM g",
    ] {
        let (ok, _, err) = sql(call);
        assert!(!ok && err.contains("--allow-generate"), "{call}: {err}");
    }
    assert_eq!(stub.requests(), 0, "the endpoint received a call");

    // 6. Functions whose output an argument sizes are refused before they allocate.
    for call in [
        "SELECT length(repeat('x', 2147483647))",
        "SELECT length(lpad('', 2147483647))",
        "SELECT cardinality(array_repeat(1, 2147483647))",
        "SELECT cardinality(range(1, 2000000000))",
        "SELECT length(replace(repeat('a', 1000000), 'a', repeat('b', 1000)))",
    ] {
        let (ok, _, err) = sql(call);
        assert!(!ok && err.contains("--max-function-bytes"), "{call}: {err}");
    }
    alive();

    // 9. Setting names fold case as DataFusion's SET does (a Kelvin sign is a k).
    let (ok, _, err) = sql("SET evalsql.judge.to\u{212A}ens_per_minute = 1");
    assert!(!ok && err.contains("not allowed"), "{err}");
    // Settings that size every batch or task stay bounded.
    let (ok, _, err) = sql("SET datafusion.execution.batch_size = 100000000");
    assert!(!ok && err.contains("from 1 to 65536"), "{err}");
    let (ok, _, err) = sql("SET datafusion.execution.target_partitions = 100000");
    assert!(!ok && err.contains("a client may set it from 1"), "{err}");

    // A bare SHOW once panicked in datafusion-postgres's handler and dropped the connection.
    let (ok, _, err) = sql("SHOW");
    assert!(!ok && err.contains("SHOW needs a setting name"), "{err}");
    alive();

    // 8. No user names to enumerate.
    let (ok, out, err) = sql("SELECT count(*) FROM pg_roles");
    assert!(ok && out.trim() == "0", "{out}{err}");

    // The statement timeout ends a running query (the server's 6 s, or a client's lower one).
    let started = Instant::now();
    let (ok, _, err) = sql("SELECT sum(value) FROM generate_series(1, 5000000000)");
    assert!(!ok && err.contains("statement timeout"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let (ok, _, err) =
        sql("SET statement_timeout = '1s'; SELECT sum(value) FROM generate_series(1, 5000000000)");
    assert!(!ok && err.contains("statement timeout"), "{err}");
    // ... and a judged query's calls: those not yet sent are never sent.
    let (ok, _, err) = sql("SET statement_timeout = 1000; \
         SELECT avg(fluency('answer ' || v)) FROM generate_series(1, 40) AS t(v)");
    assert!(!ok && err.contains("statement timeout"), "{err}");
    std::thread::sleep(Duration::from_millis(2500));
    let sent = stub.requests();
    assert!(sent < 40, "{sent} of 40 calls were sent");
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(
        stub.requests(),
        sent,
        "calls went on after the statement ended"
    );
    alive();

    // 5. Nothing was written under the root.
    assert_eq!(files(&root), before);
    assert!(
        !server.stderr().contains("sk-operator-key-77"),
        "the key reached the log"
    );
}

/// One message of `len` bytes claimed after a startup message, on a raw socket; returns what
/// the server answered.
fn claim_message_before_login(port: u16, len: u32) -> String {
    let mut socket = TcpStream::connect(("127.0.0.1", port)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut body = 196_608u32.to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0mallory\0database\0x\0\0");
    let mut startup = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    startup.extend_from_slice(&body);
    socket.write_all(&startup).unwrap();
    let mut reply = vec![0u8; 512];
    let n = socket.read(&mut reply).unwrap();
    assert_eq!(reply[0], b'R', "asks for a password first");
    let _ = n;
    let mut query = vec![b'Q'];
    query.extend_from_slice(&len.to_be_bytes());
    query.extend_from_slice(&[b'x'; 4096]);
    let _ = socket.write_all(&query);
    let mut answer = Vec::new();
    let _ = socket.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).to_string()
}

#[test]
fn messages_and_connections_are_bounded() {
    let Some(psql) = psql() else { return };
    let env = [
        ("EVALSQL_PG_USER", "mallory"),
        ("EVALSQL_PG_PASSWORD", "pw-b0und"),
    ];
    let (server, _root) = serve_root(
        "bounded",
        &env,
        &["--max-connections", "3", "--max-statement-bytes", "50000"],
    );
    let port = server.port;
    let sql = |sql: &str| run_psql(&psql, port, "mallory", "pw-b0und", sql);

    // 1 GiB announced before login: refused at its header, nothing buffered.
    let answer = claim_message_before_login(port, 0x3fff_0000);
    assert!(
        answer.contains("54000") && answer.contains("before login"),
        "{answer:?}"
    );
    // A statement over --max-statement-bytes is an error, and the connection goes on.
    let (ok, _, err) = sql(&format!("SELECT length('{}')", "x".repeat(60_000)));
    assert!(!ok && err.contains("--max-statement-bytes"), "{err}");
    let (ok, out, _) = sql("SELECT count(*) FROM qa");
    assert!(ok && out.trim() == "60");

    // Connections beyond --max-connections are refused with 53300; the others go on.
    let idle: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (ok, _, err) = sql("SELECT 1");
    assert!(!ok && err.contains("too many clients"), "{err}");
    drop(idle);
    std::thread::sleep(Duration::from_millis(500));
    let (ok, out, err) = sql("SELECT 1");
    assert!(ok && out.trim() == "1", "{out}{err}");
}

#[test]
fn the_extended_protocol_is_checked_on_the_same_plan() {
    let Some(python) = psycopg_python() else {
        return;
    };
    let env = [
        ("EVALSQL_PG_USER", "mallory"),
        ("EVALSQL_PG_PASSWORD", "pw-3xt"),
    ];
    let (server, _root) = serve_root("extended", &env, &[]);
    let attempt = |sql: &str, params: Option<Value>| {
        let mut spec = json!({ "sql": sql });
        if let Some(p) = params {
            spec["params"] = p;
        }
        run_psycopg(&python, server.port, "mallory", "pw-3xt", "attempt", spec)
    };
    for (sql, refusal) in [
        ("SELECT 1 AS x INTO stolen", "writes are disabled"),
        ("SELECT generate('x')", "--allow-generate"),
        (
            "SELECT length(repeat('x', 2147483647))",
            "--max-function-bytes",
        ),
        ("SET datafusion.sql_parser.dialect = 'MySQL'", "not allowed"),
    ] {
        let out = attempt(sql, None);
        let error = out["error"].as_str().unwrap_or_default();
        assert!(error.contains(refusal), "{sql}: {out}");
    }
    let deep = format!("SELECT 1{}", "+1".repeat(2_000));
    let out = attempt(&deep, None);
    assert!(
        out["error"]
            .as_str()
            .is_some_and(|e| e.contains("--max-expression-depth")),
        "{out}"
    );
    // Bound parameters still work, and the size check sees the bound value.
    let out = attempt(
        "SELECT count(*) FROM qa WHERE model = %s",
        Some(json!(["gpt-4o"])),
    );
    assert!(out["rows"].is_array(), "{out}");
    let out = attempt("SELECT length(repeat('x', %s))", Some(json!([2147483647])));
    assert!(
        out["error"]
            .as_str()
            .is_some_and(|e| e.contains("--max-function-bytes")),
        "{out}"
    );
}

#[test]
fn ten_thousand_hostile_statements_leave_the_server_up_and_the_roots_untouched() {
    let Some(python) = psycopg_python() else {
        return;
    };
    let stub = StubJudge::start_in_background(StubConfig::default());
    let base_url = stub.base_url();
    let env = [
        ("EVALSQL_PG_USER", "mallory"),
        ("EVALSQL_PG_PASSWORD", "pw-fuzz"),
        ("OPENAI_API_KEY", "sk-operator-key-88"),
        ("OPENAI_BASE_URL", base_url.as_str()),
        ("EVALSQL_JUDGE_CACHE", "off"),
    ];
    let (server, root) = serve_root(
        "fuzz",
        &env,
        &[
            "--statement-timeout",
            "2",
            "--max-function-bytes",
            "4000000",
        ],
    );
    let before = files(&root);
    let out = std::process::Command::new(&python)
        .arg(Path::new(ROOT).join("tests/serve/fuzz.py"))
        .args(["--count", "10000", "--seed", "20261204"])
        .args(["--stub-port", &stub.addr().port().to_string()])
        .args(["--root", root.to_str().unwrap()])
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", server.port.to_string())
        .env("PGUSER", "mallory")
        .env("PGPASSWORD", "pw-fuzz")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fuzz.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("fuzz: {summary}");
    assert_eq!(summary["statements"], 10_000, "{summary}");
    assert_eq!(summary["unexpected_count"], 0, "{summary}");
    assert_eq!(summary["alive"], true, "{summary}");
    assert_eq!(files(&root), before, "something was written under the root");
    assert_eq!(stub.requests(), 0, "the endpoint received a call");
    assert!(!server.stderr().contains("sk-operator-key-88"));
}

/// One large value referenced many times grows memory outside DataFusion's pool: a chain
/// of `||`, `concat` of many references, many distinct expressions held in one row, or one
/// row of many references. Each ends in SQLSTATE 53200 under `--max-process-memory` (here
/// 1.5 GB; each statement would need several), and the server goes on.
#[test]
fn one_value_referenced_many_times_cannot_exhaust_memory() {
    let Some(psql) = psql() else { return };
    let env = [
        ("EVALSQL_PG_USER", "mallory"),
        ("EVALSQL_PG_PASSWORD", "pw-h0st1le"),
    ];
    let (server, _root) = serve_root("memory", &env, &["--max-process-memory", "1500000000"]);
    let run = |sql: &str| run_psql(&psql, server.port, "mallory", "pw-h0st1le", sql);
    let from = " FROM (SELECT repeat('x', 60000000) AS r)";
    let refs = |item: &dyn Fn(usize) -> String, n: usize, sep: &str| {
        (0..n).map(item).collect::<Vec<_>>().join(sep)
    };
    let attacks = [
        format!("SELECT length({}){from}", refs(&|_| "r".into(), 40, " || ")),
        format!(
            "SELECT length(concat({})){from}",
            refs(&|_| "r".into(), 40, ", ")
        ),
        format!(
            "SELECT {}{from}",
            refs(&|i| format!("upper(r || '{i}')"), 40, ", ")
        ),
        format!("SELECT {}{from}", refs(&|_| "r".into(), 40, ", ")),
    ];
    for attack in &attacks {
        let (ok, out, err) = run(attack);
        assert!(!ok, "{}: {}", &attack[..60], &out[..out.len().min(200)]);
        assert!(
            err.contains("Resources exhausted") || err.contains("memory"),
            "{err}"
        );
        let (ok, out, err) = run("SELECT 1");
        assert!(
            ok && out.trim() == "1",
            "server down after {}: {err}",
            &attack[..60]
        );
    }
    // What stays within the limit runs as before, with `||`'s NULL.
    let (ok, out, err) = run(&format!("SELECT length(r || r), 'a' || NULL IS NULL{from}"));
    assert!(ok && out.trim() == "120000000|t", "{out}{err}");
}

/// Aggregates and windows that grow without bound: each gets 53200 while another client's
/// statements go on answering, and the process stays under `--max-process-memory` and a
/// quarter (statements under their share may take it that far); a timed-out window
/// aggregate stops growing at once.
#[test]
fn growing_aggregates_are_refused_and_others_go_on() {
    let Some(psql) = psql() else { return };
    let env = [
        ("EVALSQL_PG_USER", "mallory"),
        ("EVALSQL_PG_PASSWORD", "pw-h0st1le"),
    ];
    let limit: u64 = 1_500_000_000;
    let (server, _root) = serve_root(
        "growing",
        &env,
        &["--max-process-memory", &limit.to_string()],
    );
    let run = |sql: &str| run_psql(&psql, server.port, "mallory", "pw-h0st1le", sql);
    let attacks = [
        // One value of 8 MB repeated on a thousand rows, then gathered in one list.
        "SELECT cardinality(array_agg(x)) FROM (SELECT range(1, 1000000) x \
         FROM generate_series(1, 1000)) z",
        // Each row's value holds every value before it: quadratic.
        "SELECT max(length(s)) FROM (SELECT string_agg(repeat('z', 100), ',') OVER \
         (ORDER BY value ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS s \
         FROM generate_series(1, 100000)) w",
        // A thousand lists that together pass the limit.
        "SELECT sum(cardinality(l)) FROM (SELECT array_agg(repeat('v', 100) || value) AS l \
         FROM generate_series(1, 30000000) GROUP BY value % 1000) g",
    ];
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        // Another client, all along: its small statements keep answering.
        let other = s.spawn(|| {
            let mut answered = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (ok, out, err) = run("SELECT length(repeat('x', 10))");
                assert!(
                    ok && out.trim() == "10",
                    "the other client was refused: {err}"
                );
                answered += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            answered
        });
        for attack in attacks {
            let started = Instant::now();
            let (ok, out, err) = run(attack);
            assert!(!ok, "{attack}: {out}");
            assert!(
                err.contains("53200") || err.contains("memory"),
                "{attack}: {err}"
            );
            eprintln!("{:?} to refuse {}", started.elapsed(), &attack[..50]);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(other.join().unwrap() > 0);
    });
    let peak = server.memory("VmHWM");
    eprintln!("peak resident memory {peak} bytes; limit {limit}");
    assert!(peak < limit + limit / 4 + 300_000_000, "peak {peak}");

    // A window aggregate stopped by its timeout stops growing within a second.
    let (ok, _, err) = run(
        "SET statement_timeout = 1500; SELECT max(length(s)) FROM (SELECT \
         string_agg('z', ',') OVER (ORDER BY value ROWS BETWEEN UNBOUNDED PRECEDING \
         AND CURRENT ROW) AS s FROM generate_series(1, 1000000)) w",
    );
    assert!(!ok && err.contains("statement timeout"), "{err}");
    let after = server.memory("VmRSS");
    std::thread::sleep(Duration::from_secs(1));
    let later = server.memory("VmRSS");
    assert!(later <= after + 50_000_000, "{after} -> {later}");
    let (ok, out, _) = run("SELECT 1");
    assert!(ok && out.trim() == "1");
}
