//! `evalsql serve` reads a statement once and answers what DataFusion answers, however the
//! statement is written; and the connection's edges close as PostgreSQL closes them: a
//! cancel request, a malformed login, a client that never logs in or sits idle. The real
//! binary, psql, psycopg 3 and raw sockets.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::serve::{Server, psql, psycopg_python, run_psql, run_psycopg, start_server, temp_dir};

const USER: &str = "carol";
const PASSWORD: &str = "pw-p1pel1ne";

/// A server whose `--init` makes table `t(k, v)`: (1, 10), (1, 20), (2, 30).
fn serve_t(name: &str, extra: &[&str]) -> Server {
    serve_t_with(name, &[], extra)
}

fn serve_t_with(name: &str, env: &[(&str, &str)], extra: &[&str]) -> Server {
    let dir = temp_dir(name);
    let init = dir.join("init.sql");
    std::fs::write(
        &init,
        "CREATE TABLE t (k BIGINT, v BIGINT);\nINSERT INTO t VALUES (1, 10), (1, 20), (2, 30);\n",
    )
    .unwrap();
    let init = init.display().to_string();
    let mut args = vec![
        "--init",
        init.as_str(),
        "--data-root",
        dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let mut env = env.to_vec();
    env.extend([("EVALSQL_PG_USER", USER), ("EVALSQL_PG_PASSWORD", PASSWORD)]);
    start_server(&env, &args).unwrap()
}

/// Grafana's search-path subquery (tests/serve/tools/grafana.sql), as Grafana writes it.
const GRAFANA_IN: &str = "IN (
  SELECT
    CASE WHEN trim(s[i]) = '\"$user\"' THEN user ELSE trim(s[i]) END
  FROM
    generate_series(
      array_lower(string_to_array(current_setting('search_path'),','),1),
      array_upper(string_to_array(current_setting('search_path'),','),1)
    ) as i,
    string_to_array(current_setting('search_path'),',') s
)";

#[test]
fn a_subquery_item_answers_however_it_is_written() {
    let server = serve_t("pipeline-spellings", &[]);
    let port = server.port;
    let Some(psql) = psql() else { return };
    let sql = |sql: &str| run_psql(&psql, port, USER, PASSWORD, sql);
    // What DataFusion answers (the CLI's answer for the same table).
    let want = "1|2\n1|2\n2|1\n";
    for (what, open) in [
        ("one line", "(SELECT"),
        ("newline", "(\n SELECT"),
        ("tab", "(\tSELECT"),
        ("CRLF", "(\r\nSELECT"),
        ("block comment", "(/* why */SELECT"),
        ("line comment", "(-- why\nSELECT"),
        ("two spaces", "(  SELECT"),
        ("formfeed", "(\x0cSELECT"),
        ("lower case", "(\nselect"),
    ] {
        let query = format!(
            "SELECT k, {open} count(*) FROM t t2 WHERE t2.k = t.k) AS n FROM t ORDER BY k, n"
        );
        let (ok, out, err) = sql(&query);
        assert!(ok && out == want, "{what}: {out:?} {err}");
    }
    let (ok, out, err) =
        sql("SELECT k, ((\n SELECT count(*) FROM t t2 WHERE t2.k = t.k)) AS n FROM t ORDER BY k");
    assert!(ok && out == want, "double parentheses: {out:?} {err}");
    // More than one row is an error, as in PostgreSQL; an aggregate over the outer row too.
    let (ok, _, err) = sql("SELECT (\nSELECT v FROM t)");
    assert!(!ok && err.contains("more than one row"), "{err}");
    let (ok, out, err) = sql("SELECT (\nSELECT max(t.v) FROM t)");
    assert!(ok && out.trim() == "30", "{out:?} {err}");

    // `$1` parameters, through the extended protocol.
    if let Some(python) = psycopg_python() {
        let rows = run_psycopg(
            &python,
            port,
            USER,
            PASSWORD,
            "query",
            json!({
                "sql": "SELECT k, (\n  SELECT count(*) FROM t t2 WHERE t2.k = t.k AND t2.v > %s) AS n \
                        FROM t ORDER BY k, n",
                "params": [15],
            }),
        );
        assert_eq!(rows["rows"], json!([[1, 1], [1, 1], [2, 1]]), "{rows}");
    }
}

#[test]
fn literals_keep_their_bytes_and_nests_in_them_stay_strings() {
    let server = serve_t("pipeline-literals", &["--statement-timeout", "20"]);
    let port = server.port;
    let Some(psql) = psql() else { return };
    let sql = |sql: &str| run_psql(&psql, port, USER, PASSWORD, sql);
    // Grafana's subquery beside literals with doubled and escaped quotes: every literal
    // comes back byte for byte, and the schema on the search path is found.
    let (ok, out, err) = sql(&format!(
        "SELECT 'a'' || ''b' AS s, E'\\'' AS e, table_schema \
         FROM (SELECT 'public' AS table_schema) x WHERE quote_ident(table_schema) {GRAFANA_IN}"
    ));
    assert!(ok && out == "a' || 'b|'|public\n", "{out:?} {err}");
    // Parentheses inside a literal are a string, not a nest: a 21-deep nest hidden there
    // comes back as text, at once.
    let hidden = format!("x'' {}1{} ''", "abs(".repeat(21), ")".repeat(21));
    let started = Instant::now();
    let (ok, out, err) = sql(&format!(
        "SELECT '{hidden}' AS s FROM (SELECT 'public' AS table_schema) x \
         WHERE quote_ident(table_schema) {GRAFANA_IN}"
    ));
    assert!(ok, "{err}");
    assert_eq!(out, format!("{}\n", hidden.replace("''", "'")));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // The same nest written as code is refused before it is parsed.
    let (ok, _, err) = sql(&format!(
        "SELECT {}1{} FROM (SELECT 'public' AS table_schema) x \
         WHERE quote_ident(table_schema) {GRAFANA_IN}",
        "abs(".repeat(21),
        ")".repeat(21)
    ));
    assert!(!ok && err.contains("--max-nesting"), "{err}");
    let (ok, out, _) = sql("SELECT 1");
    assert!(ok && out.trim() == "1");
}

/// A startup message for `user`, as a raw socket sends it.
fn startup(user: &str) -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    body.extend_from_slice(format!("user\0{user}\0database\0x\0\0").as_bytes());
    let mut message = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    message.extend_from_slice(&body);
    message
}

/// Everything the server sends until it closes; `Err` if the close was a reset.
fn read_until_closed(socket: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    socket.set_read_timeout(Some(Duration::from_secs(15)))?;
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match socket.read(&mut buf) {
            Ok(0) => return Ok(all),
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

#[test]
fn a_cancel_request_is_closed_in_order_known_or_not() {
    let server = serve_t("pipeline-cancel", &[]);
    for (pid, key) in [(12345i32, 678i32), (0, 0)] {
        let mut socket = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        let mut message = 16u32.to_be_bytes().to_vec();
        message.extend_from_slice(&80_877_102u32.to_be_bytes());
        message.extend_from_slice(&pid.to_be_bytes());
        message.extend_from_slice(&key.to_be_bytes());
        socket.write_all(&message).unwrap();
        let answer = read_until_closed(&mut socket);
        assert!(
            matches!(&answer, Ok(bytes) if bytes.is_empty()),
            "a cancel request got {answer:?} instead of an orderly close"
        );
    }
    // A cancel of a real statement through psycopg's cancel_safe (and so libpq's).
    if let Some(python) = psycopg_python() {
        let script = r#"
import psycopg, threading, time, json
conn = psycopg.connect(dbname="x", autocommit=True)
def cancel():
    time.sleep(1.0)
    conn.cancel_safe()
threading.Thread(target=cancel).start()
started = time.time()
try:
    conn.execute("SELECT count(*) FROM range(1, 100000000000) a")
    out = {"error": None}
except psycopg.errors.QueryCanceled as e:
    out = {"error": str(e), "sqlstate": e.sqlstate}
out["seconds"] = time.time() - started
out["after"] = conn.execute("SELECT 1").fetchone()[0]
print(json.dumps(out))
"#;
        for sslmode in ["disable", "prefer"] {
            let out = std::process::Command::new(&python)
                .args(["-c", script])
                .env("PGHOST", "127.0.0.1")
                .env("PGPORT", server.port.to_string())
                .env("PGUSER", USER)
                .env("PGPASSWORD", PASSWORD)
                .env("PGSSLMODE", sslmode)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{sslmode}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let out: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(out["sqlstate"], "57014", "{sslmode}: {out}");
            assert!(out["seconds"].as_f64().unwrap() < 30.0, "{out}");
            assert_eq!(out["after"], 1, "{out}");
        }
    }
}

#[test]
fn malformed_logins_get_a_protocol_violation_and_no_backtrace() {
    let server = serve_t_with("pipeline-sasl", &[("RUST_LOG", "warn")], &[]);
    let mut initial_no_length = b"SCRAM-SHA-256\0".to_vec();
    let mut past_the_end = b"SCRAM-SHA-256\0".to_vec();
    past_the_end.extend_from_slice(&1000i32.to_be_bytes());
    past_the_end.extend_from_slice(b"n,,");
    let mut negative = b"SCRAM-SHA-256\0".to_vec();
    negative.extend_from_slice(&(-7i32).to_be_bytes());
    for body in [
        std::mem::take(&mut initial_no_length),
        past_the_end,
        negative,
        b"no terminator".to_vec(),
    ] {
        for _ in 0..20 {
            let mut socket = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
            socket.write_all(&startup(USER)).unwrap();
            let mut reply = [0u8; 256];
            socket
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let n = socket.read(&mut reply).unwrap();
            assert_eq!(reply[0], b'R', "asks for a password: {:?}", &reply[..n]);
            let mut message = vec![b'p'];
            message.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
            message.extend_from_slice(&body);
            socket.write_all(&message).unwrap();
            let answer = read_until_closed(&mut socket).unwrap_or_default();
            let answer = String::from_utf8_lossy(&answer);
            assert!(answer.contains("08P01"), "{body:?}: {answer:?}");
        }
    }
    let Some(psql) = psql() else { return };
    let (ok, out, err) = run_psql(&psql, server.port, USER, PASSWORD, "SELECT 1");
    assert!(ok && out.trim() == "1", "{err}");
    let log = server.stderr();
    assert!(!log.contains("panicked"), "{log}");
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("invalid SASL initial response"))
            .count(),
        80,
        "one line each: {log}"
    );
}

#[test]
fn idle_sockets_and_sessions_give_their_slots_back() {
    let server = serve_t(
        "pipeline-slots",
        &[
            "--max-connections",
            "4",
            "--login-timeout",
            "2",
            "--idle-timeout",
            "2",
        ],
    );
    let port = server.port;
    let Some(psql) = psql() else { return };
    // Four sockets that never log in hold every slot ...
    let mut idle: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (ok, _, err) = run_psql(&psql, port, USER, PASSWORD, "SELECT 1");
    assert!(!ok && err.contains("too many clients"), "{err}");
    // ... until the login deadline closes them.
    let started = Instant::now();
    for socket in &mut idle {
        // A socket the server never closes times out reading after 15 s.
        let _ = read_until_closed(socket);
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let (ok, out, err) = run_psql(&psql, port, USER, PASSWORD, "SELECT 1");
    assert!(ok && out.trim() == "1", "{err}");
    // A session idle past --idle-timeout is closed with 57P05.
    let dir = temp_dir("pipeline-idle");
    let script = dir.join("idle.sql");
    std::fs::write(&script, "SELECT 1;\n\\! sleep 4\nSELECT 2;\n").unwrap();
    let out = std::process::Command::new(&psql)
        .env_clear()
        .env("PGPASSWORD", PASSWORD)
        .args(["-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
        .args(["-p", &port.to_string(), "-U", USER, "-d", "x", "-f"])
        .arg(&script)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("idle-session timeout"),
        "{}{err}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn one_user_cannot_hold_every_slot_and_the_operator_gets_in() {
    let Some(python) = psycopg_python() else {
        return;
    };
    let dir = temp_dir("pipeline-admission");
    let users = crate::serve_cancel::users_file(
        &dir,
        &[("carol", "pw-c"), ("dave", "pw-d"), ("root", "pw-r")],
    );
    let server = start_server(
        &[],
        &[
            "--users",
            &users,
            "--data-root",
            dir.to_str().unwrap(),
            "--max-connections",
            "5",
            "--max-connections-per-user",
            "2",
            "--reserved-connections",
            "2",
            "--operator-user",
            "root",
        ],
    )
    .unwrap();
    // Connections are opened in order and kept open; each gets "ok" or its error.
    let script = r#"
import json, sys, time, psycopg
held, out = [], []
for user, password, keep in json.load(sys.stdin):
    time.sleep(0.3)  # a refused connection's slot is given back as the server closes it
    try:
        conn = psycopg.connect(dbname="x", user=user, password=password, autocommit=True)
        out.append(["ok", conn.execute("SELECT 1").fetchone()[0]])
        (held.append(conn) if keep else conn.close())
    except psycopg.OperationalError as e:
        out.append(["refused", str(e)])
print(json.dumps(out))
"#;
    let mut child = std::process::Command::new(&python)
        .args(["-c", script])
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", server.port.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let plan = json!([
        ["carol", "pw-c", true],
        ["carol", "pw-c", true],
        ["carol", "pw-c", true],
        ["carol", "pw-x", true],
        ["dave", "pw-d", true],
        ["dave", "pw-d", true],
        ["root", "pw-r", true],
    ]);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(plan.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let out: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (ok, refused) = (json!(["ok", 1]), |i: usize, what: &str| {
        out[i][0] == "refused" && out[i][1].as_str().is_some_and(|e| e.contains(what))
    });
    assert_eq!(out[0], ok, "{out}");
    assert_eq!(out[1], ok, "{out}");
    // A third of carol's: her limit, named; a wrong password still fails as one (the
    // limit is decided after the password, as PostgreSQL does).
    assert!(refused(2, "--max-connections-per-user"), "{out}");
    assert!(refused(3, "password authentication failed"), "{out}");
    // dave takes the third slot; the fourth is one of the two reserved.
    assert_eq!(out[4], ok, "{out}");
    assert!(refused(5, "--reserved-connections"), "{out}");
    // The operator takes it.
    assert_eq!(out[6], ok, "{out}");
}
