//! Stopping a running statement of `evalsql serve` the ways drivers and tools do it: the
//! PostgreSQL cancel request, `statement_timeout` from the startup message, another
//! connection's `pg_cancel_backend`, and a client that goes away — each ends the statement
//! within a second or two, and a judged statement sends no judge request after it ended.
//! Also PostgreSQL's error codes and login message, which the same drivers branch on.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::serve::{psycopg_python, run_python_client, start_server, temp_dir};
use crate::stub_judge::{StubConfig, StubJudge};

/// The driver script of these tests.
const CANCEL_PY: &str = "tests/serve/cancel.py";

/// A query that runs for minutes unless stopped.
const LONG: &str = "SELECT count(*) FROM generate_series(1, 5000000000)";

pub(crate) fn users_file(dir: &Path, users: &[(&str, &str)]) -> String {
    let file = dir.join("users");
    for (name, password) in users {
        let mut child = Command::new(env!("CARGO_BIN_EXE_evalsql"))
            .args(["passwd", name, "--users", file.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
        assert!(child.wait().unwrap().success());
    }
    file.to_str().unwrap().to_string()
}

fn seconds(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::INFINITY)
}

#[test]
fn cancel_requests_timeouts_and_hangups_end_the_statement() {
    let Some(python) = psycopg_python() else {
        return;
    };
    let dir = temp_dir("cancel");
    let users = users_file(&dir, &[("ann", "pw-ann"), ("ben", "pw-ben")]);
    let server = start_server(&[], &["--users", &users]).unwrap();
    let port = server.port;
    let script = |user: &str, action: &str, input: Value| {
        let password = format!("pw-{user}");
        run_python_client(&python, CANCEL_PY, (port, user, &password), action, input)
    };

    // PostgreSQL's cancel request (psycopg's `cancel()`, as JDBC's `Statement.cancel`).
    let out = script("ann", "cancel", json!({"sql": LONG, "after": 1.0}));
    assert_eq!(out["sqlstate"], "57014", "{out}");
    assert!(
        out["error"].as_str().unwrap().contains("user request"),
        "{out}"
    );
    assert!(seconds(&out["stopped_after"]) < 2.0, "{out}");
    assert_eq!(out["after"], 42, "the connection goes on: {out}");

    // `statement_timeout` in the startup message's options, simple and extended protocol.
    for prepare in [false, true] {
        let out = script(
            "ann",
            "timeout",
            json!({"sql": LONG, "options": "-c statement_timeout=1000", "prepare": prepare}),
        );
        assert_eq!(out["sqlstate"], "57014", "{out}");
        assert!(
            out["error"].as_str().unwrap().contains("statement timeout"),
            "{out}"
        );
        assert!(seconds(&out["seconds"]) < 3.0, "{out}");
    }

    // pg_cancel_backend from another connection of the same user (Superset's way), with
    // process ids unique across connections and pg_stat_activity showing the statement.
    let out = script("ann", "backend", json!({"sql": LONG, "after": 1.0}));
    let pids = out["pids"].as_array().unwrap();
    assert_ne!(pids[0], pids[1], "{out}");
    assert_eq!(
        out["own_pid"], pids[0],
        "pg_backend_pid() is the wire's: {out}"
    );
    let running = out["activity"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row[0] == pids[0])
        .unwrap_or_else(|| panic!("A in pg_stat_activity: {out}"));
    assert_eq!(running[1], "ann");
    assert_eq!(running[2], "active");
    assert_eq!(running[3], LONG);
    assert_eq!(out["cancelled"], true, "{out}");
    assert_eq!(out["sqlstate"], "57014", "{out}");
    assert!(seconds(&out["stopped_after"]) < 2.0, "{out}");
    assert_eq!(out["unknown"], false, "{out}");

    // A client that goes away mid-statement: the statement ends, and with it the session.
    let mut held = Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/serve/cancel.py"))
        .arg("hold")
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", port.to_string())
        .env("PGUSER", "ann")
        .env("PGPASSWORD", "pw-ann")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    held.stdin
        .take()
        .unwrap()
        .write_all(json!({ "sql": LONG }).to_string().as_bytes())
        .unwrap();
    let mut line = String::new();
    BufReader::new(held.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let held_pid = serde_json::from_str::<Value>(&line).unwrap()["pid"].clone();
    std::thread::sleep(Duration::from_millis(800));
    // Another user does not see ann's sessions, and cannot stop them.
    let ben = script("ben", "activity", json!({}));
    let ben_rows = ben["activity"].as_array().unwrap();
    assert!(
        ben_rows.iter().all(|row| row[1] == "ben") && ben_rows.len() == 1,
        "{ben}"
    );
    let ann = script("ann", "activity", json!({}));
    assert!(
        ann["activity"]
            .as_array()
            .unwrap()
            .iter()
            .any(|row| row[0] == held_pid && row[2] == "active"),
        "{ann}"
    );
    held.kill().unwrap();
    let _ = held.wait();
    let killed = Instant::now();
    loop {
        let ann = script("ann", "activity", json!({}));
        let rows = ann["activity"].as_array().unwrap();
        if rows.iter().all(|row| row[0] != held_pid) {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the gone client's statement still runs: {ann}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cancelled judged query sends no judge request after it ended; the answers it had are
/// kept in the cache, so running it again pays only for the rest.
/// Statements that compute for long without waiting between batches: a nested-loop join
/// whose condition keeps nothing (minutes inside one poll of the join), an aggregate over a
/// cross join, a batch of edit distances, and a call on literals that planning folds.
/// Without the plan's checkpoints a timeout or a cancel ended none of them before they
/// finished (70 s and 35 s for the first and last in a debug build).
const COMPUTING: [&str; 4] = [
    "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b \
     WHERE a.value * b.value = 7",
    "SELECT count(*), max(a.value + b.value) FROM generate_series(1, 200000) a, \
     generate_series(1, 200000) b",
    "SELECT sum(levenshtein(repeat('a', 5000), repeat('b', 5000 + (value % 7)::int))) \
     FROM generate_series(1, 100000)",
    "SELECT rouge_l(repeat('a b ', 300000), repeat('b a ', 300000))",
];

#[test]
fn statements_that_compute_without_waiting_are_stopped_too() {
    let Some(python) = psycopg_python() else {
        return;
    };
    let dir = temp_dir("computing");
    let users = users_file(&dir, &[("ann", "pw-ann")]);
    let server = start_server(&[], &["--users", &users]).unwrap();
    let port = server.port;
    let script = |action: &str, input: Value| {
        run_python_client(&python, CANCEL_PY, (port, "ann", "pw-ann"), action, input)
    };
    for sql in COMPUTING {
        let out = script(
            "timeout",
            json!({"sql": sql, "options": "-c statement_timeout=1000", "prepare": false}),
        );
        assert_eq!(out["sqlstate"], "57014", "{sql}: {out}");
        assert!(
            out["error"].as_str().unwrap().contains("statement timeout"),
            "{sql}: {out}"
        );
        assert!(seconds(&out["seconds"]) < 10.0, "{sql}: {out}");
    }
    // A cancel request reaches the join's loop the same way.
    let out = script("cancel", json!({"sql": COMPUTING[0], "after": 1.0}));
    assert_eq!(out["sqlstate"], "57014", "{out}");
    assert!(seconds(&out["stopped_after"]) < 8.0, "{out}");
    assert_eq!(out["after"], 42, "the connection goes on: {out}");
    // A pair too long for an edit distance is refused before it starts.
    let out = script(
        "timeout",
        json!({"sql": "SELECT levenshtein(repeat('a', 60000), repeat('b', 60000))",
               "options": "-c statement_timeout=0"}),
    );
    let error = out["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("levenshtein") && error.contains("100000000"),
        "{out}"
    );
}

#[test]
fn a_cancelled_judged_query_stops_calling_the_judge() {
    let Some(python) = psycopg_python() else {
        return;
    };
    let stub = StubJudge::start_in_background(StubConfig {
        latency: Duration::from_millis(250),
        ..Default::default()
    });
    let dir = temp_dir("cancel-judge");
    let init = dir.join("init.sql");
    std::fs::write(&init, "SET evalsql.judge.max_concurrency = 2;\n").unwrap();
    let cache = dir.join("cache.sqlite");
    let base_url = stub.base_url();
    let env = [
        ("EVALSQL_PG_USER", "ann"),
        ("EVALSQL_PG_PASSWORD", "pw-ann"),
        ("OPENAI_BASE_URL", base_url.as_str()),
        ("EVALSQL_JUDGE_MODEL", "stub-judge"),
        ("EVALSQL_JUDGE_CACHE", cache.to_str().unwrap()),
    ];
    let server = start_server(&env, &["--init", init.to_str().unwrap()]).unwrap();
    let sql = "SELECT avg(fluency('answer number ' || v)) FROM generate_series(1, 60) AS t(v)";
    let out = run_python_client(
        &python,
        CANCEL_PY,
        (server.port, "ann", "pw-ann"),
        "cancel",
        json!({"sql": sql, "after": 1.5}),
    );
    assert_eq!(out["sqlstate"], "57014", "{out}");
    let at_cancel = stub.requests();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(stub.requests(), at_cancel, "requests after the cancel");
    assert!(at_cancel > 0 && at_cancel < 60, "{at_cancel} requests");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn errors_carry_postgresqls_codes() {
    let Some(python) = psycopg_python() else {
        return;
    };
    let env = [
        ("EVALSQL_PG_USER", "ann"),
        ("EVALSQL_PG_PASSWORD", "pw-ann"),
    ];
    let server = start_server(&env, &[]).unwrap();
    let statements = [
        "SELECT * FROM no_such_table",
        "SELECT no_such_function(1)",
        "SELECT no_such_column FROM (SELECT 1 AS a) AS t",
        "SELEC 1",
        "SELECT 1/0",
        "SELECT 1",
    ];
    let want = json!(["42P01", "42883", "42703", "42601", "22012", null]);
    for prepare in [false, true] {
        let out = run_python_client(
            &python,
            CANCEL_PY,
            (server.port, "ann", "pw-ann"),
            "errors",
            json!({"statements": statements, "prepare": prepare}),
        );
        assert_eq!(out["codes"], want, "prepare={prepare}");
    }
    // A failed login names the user as PostgreSQL does (tools match the text); an unknown
    // user gets the same words.
    for user in ["ann", "nobody"] {
        let out = run_python_client(
            &python,
            CANCEL_PY,
            (server.port, user, "wrong"),
            "login",
            json!({}),
        );
        let message = out["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!(
                "password authentication failed for user \"{user}\""
            )),
            "{out}"
        );
    }
}

/// In batch mode a cancelled statement leaves its submitted batch recorded: the next run
/// of the same statement picks it up instead of submitting (and paying for) it again.
#[test]
fn a_cancelled_batch_statement_is_resumed_not_resubmitted() {
    let Some(python) = psycopg_python() else {
        return;
    };
    let stub = StubJudge::start_in_background(StubConfig {
        batch_delay: Duration::from_secs(3),
        ..Default::default()
    });
    let dir = temp_dir("cancel-batch");
    let init = dir.join("init.sql");
    std::fs::write(&init, "SET evalsql.judge.batch_poll_interval = 0.1;\n").unwrap();
    let cache = dir.join("cache.sqlite");
    let base_url = stub.base_url();
    let env = [
        ("EVALSQL_PG_USER", "ann"),
        ("EVALSQL_PG_PASSWORD", "pw-ann"),
        ("OPENAI_BASE_URL", base_url.as_str()),
        ("EVALSQL_JUDGE_MODEL", "gpt-4o-mini"),
        ("EVALSQL_JUDGE_MODE", "batch"),
        ("EVALSQL_JUDGE_CACHE", cache.to_str().unwrap()),
    ];
    let server = start_server(&env, &["--init", init.to_str().unwrap()]).unwrap();
    let sql = "SELECT count(relevance('question ' || v, 'answer ' || v)) \
               FROM generate_series(1, 20) AS t(v)";
    let out = run_python_client(
        &python,
        CANCEL_PY,
        (server.port, "ann", "pw-ann"),
        "cancel",
        json!({"sql": sql, "after": 1.5}),
    );
    assert_eq!(out["sqlstate"], "57014", "{out}");
    assert_eq!(
        stub.batches_created(),
        1,
        "the batch was submitted before the cancel"
    );
    let out = crate::serve::run_psycopg(
        &python,
        server.port,
        "ann",
        "pw-ann",
        "query",
        json!({ "sql": sql }),
    );
    assert_eq!(out["rows"], json!([[20]]), "{out}");
    assert_eq!(stub.batches_created(), 1, "resumed, not submitted again");
    assert_eq!(stub.requests_to("POST", "/chat/completions"), 0);
    let _ = std::fs::remove_dir_all(&dir);
}
