//! `evalsql serve` through real PostgreSQL clients: `psql` (Debian's postgresql-client) and
//! psycopg 3 (`tests/serve/client.py`; `scripts/test.sh` makes a virtualenv and sets
//! `EVALSQL_PSYCOPG_PYTHON`). The server is the real binary on a free loopback port.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::skip::skipped;
use crate::stub_judge::{StubConfig, StubJudge};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A running `evalsql serve`, killed on drop; its stderr is kept for assertions.
pub(crate) struct Server {
    child: Child,
    pub(crate) port: u16,
    stderr: Arc<Mutex<String>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// A line of the server's `/proc/PID/status` in bytes (`VmRSS`, `VmHWM`: the peak).
    pub(crate) fn memory(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    }
}

/// The environment of a server or CLI run: nothing of the caller's judge or cloud settings.
fn clean(cmd: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars() {
        if k.starts_with("OPENAI_")
            || k.starts_with("AZURE_")
            || k.starts_with("EVALSQL_")
            || k.starts_with("AWS_")
            || k.starts_with("PG")
        {
            cmd.env_remove(k);
        }
    }
    cmd.current_dir(ROOT)
}

/// Starts `evalsql serve --port 0 ARGS` and waits for its "listening on" line.
pub(crate) fn start_server(env: &[(&str, &str)], args: &[&str]) -> Result<Server, String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evalsql"));
    clean(&mut cmd)
        .args(["serve", "--host", "127.0.0.1", "--port", "0"])
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start evalsql serve");
    let stderr = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let lines = BufReader::new(child.stderr.take().unwrap());
    let kept = Arc::clone(&stderr);
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            if let Some(addr) = line.split("listening on ").nth(1) {
                let port = addr
                    .split_whitespace()
                    .next()
                    .and_then(|a| a.rsplit(':').next())
                    .and_then(|p| p.parse::<u16>().ok());
                let _ = tx.send(port);
            }
            kept.lock().unwrap().push_str(&(line + "\n"));
        }
        let _ = tx.send(None);
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Some(port)) => Ok(Server {
            child,
            port,
            stderr,
        }),
        _ => {
            let _ = child.kill();
            let status = child.wait().unwrap();
            std::thread::sleep(Duration::from_millis(100));
            let text = stderr.lock().unwrap().clone();
            Err(format!("{status}: {text}"))
        }
    }
}

pub(crate) fn psql() -> Option<PathBuf> {
    let found = std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("psql"))
        .find(|p| p.exists());
    if found.is_none() {
        skipped(
            "the psql part of the serve tests",
            "no psql (apt-get install postgresql-client)",
        );
    }
    found
}

pub(crate) fn psycopg_python() -> Option<PathBuf> {
    let python = std::env::var_os("EVALSQL_PSYCOPG_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| "python3".into());
    let ok = Command::new(&python)
        .args(["-c", "import psycopg"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        skipped(
            "the psycopg part of the serve tests",
            "no psycopg (pip install 'psycopg[binary]', EVALSQL_PSYCOPG_PYTHON)",
        );
    }
    ok.then_some(python)
}

/// `psql -At` output (fields separated by '|'), with the exit status and stderr.
pub(crate) fn run_psql(
    psql: &Path,
    port: u16,
    user: &str,
    password: &str,
    sql: &str,
) -> (bool, String, String) {
    let out = Command::new(psql)
        .env_clear()
        .env("PGPASSWORD", password)
        .env("PGCONNECT_TIMEOUT", "20")
        .args(["-X", "-At", "-F", "|", "-v", "ON_ERROR_STOP=1"])
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", user])
        .args(["-d", "any_database_name", "-c", sql])
        .output()
        .expect("run psql");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// Runs `tests/serve/client.py ACTION` with `input` on stdin.
pub(crate) fn run_psycopg(
    python: &Path,
    port: u16,
    user: &str,
    password: &str,
    action: &str,
    input: Value,
) -> Value {
    let login = (port, user, password);
    run_python_client(python, "tests/serve/client.py", login, action, input)
}

/// Runs the driver script `script` (under the repository) `ACTION`, connecting with `login`
/// (port, user, password), with `input` on stdin; its JSON output.
pub(crate) fn run_python_client(
    python: &Path,
    script: &str,
    (port, user, password): (u16, &str, &str),
    action: &str,
    input: Value,
) -> Value {
    let mut child = Command::new(python)
        .arg(Path::new(ROOT).join(script))
        .arg(action)
        .env("PGHOST", "127.0.0.1")
        .env("PGPORT", port.to_string())
        .env("PGUSER", user)
        .env("PGPASSWORD", password)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run client.py");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script} {action}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The CLI's answer to `sql` as JSON rows (arrays in column order).
fn cli_rows(env: &[(&str, &str)], sql: &str, columns: &[&str]) -> Vec<Vec<Value>> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_evalsql"));
    clean(&mut cmd)
        .envs(env.iter().copied())
        .args(["--format", "ndjson", "-c", sql]);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let row: Value = serde_json::from_str(l).unwrap();
            columns.iter().map(|c| row[c].clone()).collect()
        })
        .collect()
}

pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("evalsql-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const QUERY: &str = "SELECT id, model, f1_score(response, ground_truth) AS f1, \
     bleu(response, ground_truth) AS bleu, rouge_l(response, ground_truth) AS rouge_l, \
     meteor(response, ground_truth) AS meteor, groundedness(query, context, response) AS g \
     FROM qa ORDER BY id, model";
const COLUMNS: [&str; 7] = ["id", "model", "f1", "bleu", "rouge_l", "meteor", "g"];

/// Values compare as numbers when both are numbers (psql prints text).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::String(x), Value::Number(y)) | (Value::Number(y), Value::String(x)) => {
            x.parse::<f64>().ok() == y.as_f64()
        }
        _ => a == b,
    }
}

/// A JSON array of row arrays.
fn rows_of(rows: &Value) -> Vec<Vec<Value>> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().clone())
        .collect()
}

fn assert_rows_equal(what: &str, got: &[Vec<Value>], want: &[Vec<Value>]) {
    assert_eq!(got.len(), want.len(), "{what}: row count");
    for (g, w) in got.iter().zip(want) {
        assert!(
            g.len() == w.len() && g.iter().zip(w).all(|(a, b)| same(a, b)),
            "{what}: {g:?} != {w:?}"
        );
    }
}

#[test]
fn psql_and_psycopg_get_the_values_of_the_cli() {
    let stub = StubJudge::start_in_background(StubConfig::default());
    let dir = temp_dir("values");
    let init = dir.join("init.sql");
    std::fs::write(
        &init,
        "CREATE EXTERNAL TABLE qa STORED AS JSON LOCATION 'data/qa.jsonl';\n\
         SET evalsql.judge.max_concurrency = 4;\n",
    )
    .unwrap();
    let base_url = stub.base_url();
    let server_cache = dir.join("server-cache.sqlite").display().to_string();
    let server = start_server(
        &[
            ("EVALSQL_PG_USER", "alice"),
            ("EVALSQL_PG_PASSWORD", "correct horse"),
            ("OPENAI_BASE_URL", &base_url),
            ("EVALSQL_JUDGE_MODEL", "stub-judge"),
            ("EVALSQL_JUDGE_CACHE", &server_cache),
        ],
        &["--init", init.to_str().unwrap()],
    )
    .unwrap();
    let cli_cache = dir.join("cli-cache.sqlite").display().to_string();
    let want = cli_rows(
        &[
            ("OPENAI_BASE_URL", &base_url),
            ("EVALSQL_JUDGE_MODEL", "stub-judge"),
            ("EVALSQL_JUDGE_CACHE", &cli_cache),
        ],
        &QUERY.replace("FROM qa", "FROM 'data/qa.jsonl'"),
        &COLUMNS,
    );
    assert_eq!(want.len(), 60);
    assert!(
        want.iter().all(|r| r[6].is_number()),
        "judge scored every row"
    );

    if let Some(psql) = psql() {
        let (ok, out, err) = run_psql(&psql, server.port, "alice", "correct horse", QUERY);
        assert!(ok, "psql: {err}");
        let got: Vec<Vec<Value>> = out
            .lines()
            .map(|l| l.split('|').map(|f| Value::String(f.to_string())).collect())
            .collect();
        assert_rows_equal("psql", &got, &want);
        // BI tools browse the catalog.
        let (ok, out, err) = run_psql(
            &psql,
            server.port,
            "alice",
            "correct horse",
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
        );
        assert!(ok && out.lines().any(|l| l == "qa"), "{out}{err}");
        let (ok, out, err) = run_psql(&psql, server.port, "alice", "correct horse", "\\d qa");
        assert!(ok && out.contains("ground_truth|text"), "{out}{err}");
        let (ok, out, err) = run_psql(
            &psql,
            server.port,
            "alice",
            "correct horse",
            "SELECT relname FROM pg_catalog.pg_class WHERE relname = 'qa'",
        );
        assert!(ok && out.trim() == "qa", "{out}{err}");
    }

    if let Some(python) = psycopg_python() {
        let py = |action: &str, input: Value| {
            run_psycopg(
                &python,
                server.port,
                "alice",
                "correct horse",
                action,
                input,
            )
        };
        let got = py("query", serde_json::json!({ "sql": QUERY }));
        let columns: Vec<&str> = got["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(columns, COLUMNS);
        assert_rows_equal("psycopg", &rows_of(&got["rows"]), &want);

        // The extended protocol with bound parameters.
        let got = py(
            "query",
            serde_json::json!({
                "sql": "SELECT f1_score(%s, %s) AS f1",
                "params": ["the cat sat on the mat", "the cat sat"],
            }),
        );
        let want = cli_rows(
            &[],
            "SELECT f1_score('the cat sat on the mat', 'the cat sat') AS f1",
            &["f1"],
        );
        assert_rows_equal(
            "bound parameters",
            &[got["rows"][0].as_array().unwrap().clone()],
            &want,
        );

        // Many clients at once, each with its own session, 20 scoring queries each.
        let got = py(
            "concurrent",
            serde_json::json!({
                "clients": 16,
                "queries": 20,
                "sql": "SELECT model, avg(f1_score(response, ground_truth)) AS f1 \
                        FROM qa GROUP BY model ORDER BY model",
            }),
        );
        assert_eq!(got["errors"], serde_json::json!([]), "{got}");
        let want = cli_rows(
            &[],
            "SELECT model, avg(f1_score(response, ground_truth)) AS f1 \
             FROM 'data/qa.jsonl' GROUP BY model ORDER BY model",
            &["model", "f1"],
        );
        let results = got["results"].as_array().unwrap();
        assert_eq!(results.len(), 16);
        for result in results {
            assert_rows_equal("concurrent client", &rows_of(result), &want);
        }
    }
    // Judge calls through the server were made by the server, once per distinct row.
    assert!(stub.requests() > 0);
    assert!(!server.stderr().contains("correct horse"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn passwords_are_required_and_checked() {
    // No credentials: no server.
    let err = start_server(&[], &[]).err().expect("refused to start");
    assert!(
        err.contains("requires a password") && err.contains("EVALSQL_PG_USER"),
        "{err}"
    );

    // A users file made by `evalsql passwd`.
    let dir = temp_dir("passwd");
    let users = dir.join("users");
    for (name, password) in [("bob", "b0b-pass"), ("carol", "c4rol"), ("bob", "new-b0b")] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_evalsql"))
            .args(["passwd", name, "--users", users.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let text = std::fs::read_to_string(&users).unwrap();
    assert_eq!(text.lines().count(), 2, "bob replaced, not added: {text}");
    assert!(!text.contains("b0b") && !text.contains("c4rol"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&users).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // A file someone loosened is replaced (atomically, nothing left beside it) by 0600.
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .args(["passwd", "erin", "--users", users.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "3rin").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        std::fs::metadata(&users).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let beside: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(beside, ["users"], "{beside:?}");
    // Printed, without --users.
    let mut child = Command::new(env!("CARGO_BIN_EXE_evalsql"))
        .args(["passwd", "dave"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "d4ve").unwrap();
    let out = child.wait_with_output().unwrap();
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(line.starts_with("dave:scram-sha-256$4096$"), "{line}");

    let server = start_server(&[], &["--users", users.to_str().unwrap()]).unwrap();
    if let Some(psql) = psql() {
        let login = |user: &str, password: &str| {
            run_psql(&psql, server.port, user, password, "SELECT 41 + 1")
        };
        let (ok, out, err) = login("bob", "new-b0b");
        assert!(ok && out.trim() == "42", "{err}");
        let (ok, out, _) = login("carol", "c4rol");
        assert!(ok && out.trim() == "42");
        for (user, password) in [
            ("bob", "b0b-pass"),
            ("carol", "wrong"),
            ("mallory", "c4rol"),
        ] {
            let (ok, out, err) = login(user, password);
            assert!(!ok && out.is_empty(), "{user}/{password} got in");
            assert!(
                err.to_lowercase()
                    .contains("password authentication failed"),
                "{err}"
            );
        }
    }
    if let Some(python) = psycopg_python() {
        let ok = run_psycopg(&python, server.port, "carol", "c4rol", "login", Value::Null);
        assert_eq!(ok["ok"], true, "{ok}");
        let bad = run_psycopg(&python, server.port, "carol", "nope", "login", Value::Null);
        assert_eq!(bad["ok"], false);
        assert!(
            bad["error"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains("password authentication failed"),
            "{bad}"
        );
    }
    // A damaged users file stops the server with the line named.
    std::fs::write(dir.join("bad"), "erin:plaintext\n").unwrap();
    let err = start_server(&[], &["--users", dir.join("bad").to_str().unwrap()])
        .err()
        .unwrap();
    assert!(err.contains("line 1"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn clients_reach_only_the_data_roots_and_never_see_secrets() {
    let dir = temp_dir("roots");
    let root = dir.join("root");
    let outside = dir.join("outside");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(root.join("ok.csv"), "a,b\nthe cat,the cat sat\n").unwrap();
    std::fs::write(outside.join("secret.csv"), "a,b\nsecret,row\n").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    let root_s = root.display().to_string();

    // An --init that reads outside the roots stops the server.
    let bad_init = dir.join("bad.sql");
    std::fs::write(
        &bad_init,
        format!(
            "CREATE EXTERNAL TABLE s STORED AS CSV LOCATION '{}';",
            outside.join("secret.csv").display()
        ),
    )
    .unwrap();
    let env = [
        ("EVALSQL_PG_USER", "alice"),
        ("EVALSQL_PG_PASSWORD", "pw-9f3k"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret-7Hq2"),
        ("OPENAI_API_KEY", "sk-judge-key-55"),
        ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        ("EVALSQL_JUDGE_MODEL", "m"),
    ];
    let err = start_server(
        &env,
        &["--data-root", &root_s, "--init", bad_init.to_str().unwrap()],
    )
    .err()
    .expect("init outside the roots fails");
    assert!(err.contains("outside the data roots"), "{err}");

    let server = start_server(&env, &["--data-root", &root_s, "--allowed-model", "other"]).unwrap();
    let Some(psql) = psql() else { return };
    let sql = |sql: &str| run_psql(&psql, server.port, "alice", "pw-9f3k", sql);

    let (ok, out, err) = sql(&format!(
        "SELECT f1_score(a, b) FROM '{}'",
        root.join("ok.csv").display()
    ));
    // SQuAD normalisation drops "the": "cat" against "cat sat".
    assert!(ok && out.trim() == "0.6666666666666666", "{out}{err}");
    for path in [
        "/etc/passwd".to_string(),
        outside.join("secret.csv").display().to_string(),
        root.join("link/secret.csv").display().to_string(),
        format!("{root_s}/../outside/secret.csv"),
        "s3://some-bucket/x.parquet".to_string(),
    ] {
        let (ok, out, err) = sql(&format!("SELECT * FROM '{path}'"));
        assert!(!ok && out.is_empty(), "{path}: {out}");
        assert!(err.contains("outside the data roots"), "{path}: {err}");
    }
    // Traces are data too: read_otlp reads under the roots and nowhere else.
    std::fs::write(outside.join("spans.jsonl"), "{\"resourceSpans\": []}\n").unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp/numbers.jsonl"),
        root.join("spans.jsonl"),
    )
    .unwrap();
    let (ok, out, err) = sql(&format!(
        "SELECT count(*) FROM read_otlp('{}')",
        root.join("spans.jsonl").display()
    ));
    assert!(ok && out.trim() == "4", "{out}{err}");
    for path in [
        "/etc/passwd".to_string(),
        outside.display().to_string(),
        outside.join("spans.jsonl").display().to_string(),
        root.join("link/spans.jsonl").display().to_string(),
        format!("{root_s}/../outside/"),
        format!("{root_s}/../outside/*.jsonl"),
        format!("{root_s}/*/../../outside/spans.jsonl"),
        "file://localhost/etc/passwd".to_string(),
        "s3://some-bucket/traces/".to_string(),
    ] {
        let (ok, out, err) = sql(&format!("SELECT count(*) FROM read_otlp('{path}')"));
        assert!(!ok && out.is_empty(), "read_otlp({path}): {out}");
        assert!(
            err.contains("outside the data roots"),
            "read_otlp({path}): {err}"
        );
    }
    let (ok, _, err) = sql(&format!(
        "SELECT * FROM judge_cache('{}')",
        outside.join("c.sqlite").display()
    ));
    assert!(!ok && err.contains("outside the data roots"), "{err}");
    assert!(!outside.join("c.sqlite").exists());
    let (ok, _, err) = sql("SELECT * FROM judge_cache('file:/tmp/evalsql-uri.sqlite')");
    assert!(!ok && err.contains("not a URI"), "{err}");
    let (ok, _, err) = sql("SELECT * FROM judge_cache()");
    assert!(
        !ok && err.contains("the server's judge cache is outside the data roots"),
        "{err}"
    );
    // invoke_app calls only what the administrator allowed (--app-url; here nothing, so
    // the plan is refused before any row is read).
    let (ok, out, err) = sql("SELECT invoke_app('http://127.0.0.1:9/run', '{}')");
    assert!(
        !ok && err.contains("invoke_app() is disabled"),
        "{out}{err}"
    );
    for setting in [
        "evalsql.judge.base_url = 'http://attacker.example/v1'",
        "\"evalsql.judge.base_url\" = 'http://attacker.example/v1'",
        "evalsql.judge.\"BASE_URL\" = 'http://attacker.example/v1'",
        "evalsql.judge.cache = '/tmp/x.sqlite'",
        "evalsql.target.allowed_urls = 'http://attacker.example'",
        "evalsql.target.base_url = 'http://attacker.example/v1'",
        "evalsql.judge.requests_per_minute = 0",
        "evalsql.target.tokens_per_minute = 0",
        "evalsql.judge.executors = 64",
        "evalsql.judge.max_response_bytes = 1",
        "EVALSQL.JUDGE.AZURE_ENDPOINT = 'http://attacker.example'",
        "datafusion.runtime.temp_directory = '/tmp'",
        "\"datafusion.runtime.temp_directory\" = '/tmp'",
        // Where calls go and what they are said to cost are the operator's.
        "evalsql.judge.panel = 'gpt-5-expensive,o1'",
        "evalsql.judge.price_input_per_mtok = 0",
        "evalsql.target.price_output_per_mtok = 0",
        "evalsql.judge.batch_discount = 0",
        "evalsql.judge.batch_poll_interval = 0.001",
        "evalsql.judge.batch_max_lines = 1",
    ] {
        let (ok, _, err) = sql(&format!("SET {setting}"));
        assert!(!ok && err.contains("not allowed"), "{setting}: {err}");
    }
    // Other settings work, per connection, with errors reported.
    let (ok, _, err) = sql("SET evalsql.judge.threshold = 'high'");
    assert!(!ok && err.contains("expected a number"), "{err}");
    let (ok, _, err) = sql("SET evalsql.judge.model = 'other'");
    assert!(ok, "{err}");
    // Only the models the operator allowed: the server's key pays for them.
    for setting in [
        "evalsql.judge.model = 'gpt-5-expensive'",
        "\"evalsql.target.model\" = 'gpt-5-expensive'",
        "evalsql.judge.azure_deployment = 'big'",
    ] {
        let (ok, _, err) = sql(&format!("SET {setting}"));
        assert!(!ok && err.contains("--allowed-model"), "{setting}: {err}");
    }
    // The call limits only go down, for the client's own queries.
    let (ok, _, err) = sql("SET evalsql.judge.max_concurrency = 100000");
    assert!(!ok && err.contains("only lower"), "{err}");
    let (ok, _, err) = sql("SET evalsql.judge.max_concurrency = 1");
    assert!(ok, "{err}");
    // Spending more per row than the operator allows: refused; a budget of its own: fine.
    for setting in [
        "evalsql.judge.samples = 5",
        "evalsql.judge.max_completion_tokens = 100000",
    ] {
        let (ok, _, err) = sql(&format!("SET {setting}"));
        assert!(!ok && err.contains("only lower"), "{setting}: {err}");
    }
    let (ok, _, err) = sql("SET evalsql.judge.max_cost_usd = 1");
    assert!(ok, "{err}");

    // No secret in anything a client can read, nor in the server's output.
    for query in [
        "SHOW ALL",
        "SELECT * FROM information_schema.df_settings",
        "SELECT * FROM pg_catalog.pg_settings",
        "SET evalsql.judge.max_retries = 0; SELECT groundedness('q', 'c', 'r')",
        "SELECT * FROM 's3://some-bucket/x.parquet'",
    ] {
        let (_, out, err) = sql(query);
        for secret in ["aws-secret-7Hq2", "sk-judge-key-55", "pw-9f3k"] {
            assert!(
                !out.contains(secret) && !err.contains(secret),
                "{query} shows {secret}"
            );
        }
    }
    let log = server.stderr();
    for secret in ["aws-secret-7Hq2", "sk-judge-key-55", "pw-9f3k"] {
        assert!(!log.contains(secret), "server output shows {secret}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tls_when_asked() {
    let Some(psql) = psql() else { return };
    let dir = temp_dir("tls");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !made.is_ok_and(|s| s.success()) {
        skipped("the TLS test", "no openssl to make a certificate");
        return;
    }
    let server = start_server(
        &[("EVALSQL_PG_USER", "u"), ("EVALSQL_PG_PASSWORD", "p")],
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    )
    .unwrap();
    let out = Command::new(&psql)
        .env_clear()
        .env("PGPASSWORD", "p")
        .args(["-X", "-At", "-c", "SELECT 7", "-c", "\\conninfo"])
        .arg(format!(
            "host=127.0.0.1 port={} user=u dbname=x sslmode=require",
            server.port
        ))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("7\n") && stdout.contains("SSL connection"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(server);

    // --require-tls: a plaintext connection is refused before any password is sent.
    let server = start_server(
        &[("EVALSQL_PG_USER", "u"), ("EVALSQL_PG_PASSWORD", "p")],
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--require-tls",
        ],
    )
    .unwrap();
    let connect = |sslmode: &str| {
        Command::new(&psql)
            .env_clear()
            .env("PGPASSWORD", "p")
            .args(["-X", "-At", "-c", "SELECT 7"])
            .arg(format!(
                "host=127.0.0.1 port={} user=u dbname=x sslmode={sslmode}",
                server.port
            ))
            .output()
            .unwrap()
    };
    let plain = connect("disable");
    assert!(!plain.status.success());
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(stderr.contains("TLS connections only"), "{stderr}");
    let secure = connect("require");
    assert_eq!(String::from_utf8_lossy(&secure.stdout), "7\n");
    assert!(
        start_server(
            &[("EVALSQL_PG_USER", "u"), ("EVALSQL_PG_PASSWORD", "p")],
            &["--require-tls"]
        )
        .is_err_and(|e| e.contains("--require-tls needs")),
        "--require-tls without a certificate starts"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client's `CREATE FUNCTION` is its connection's own: another connection does not see
/// it, and it cannot replace a judge metric the operator loaded with `--rubrics`.
#[test]
fn client_judge_functions_stay_in_their_connection() {
    let Some(psql) = psql() else { return };
    let stub = StubJudge::start_in_background(StubConfig::default());
    let dir = temp_dir("client-functions");
    std::fs::write(
        dir.join("politeness.md"),
        "---\nname: politeness\nversion: 1\nmin: 1\nmax: 5\ninputs: response\n---\n\
         The operator's rubric: rate how polite the RESPONSE is. Reply with JSON \
         {\"score\": n, \"reason\": \"...\"}.\n",
    )
    .unwrap();
    let base_url = stub.base_url();
    let env = [
        ("EVALSQL_PG_USER", "alice"),
        ("EVALSQL_PG_PASSWORD", "pw-2k9d"),
        ("OPENAI_BASE_URL", base_url.as_str()),
        ("EVALSQL_JUDGE_MODEL", "stub-judge"),
        ("EVALSQL_JUDGE_CACHE", "off"),
    ];
    let server = start_server(
        &env,
        &[
            "--rubrics",
            dir.to_str().unwrap(),
            "--allow-create-function",
        ],
    )
    .unwrap();
    let sql = |sql: &str| run_psql(&psql, server.port, "alice", "pw-2k9d", sql);

    for name in ["politeness", "politeness_details"] {
        let (ok, out, err) = sql(&format!(
            "CREATE FUNCTION {name}(response TEXT) RETURNS DOUBLE LANGUAGE judge AS 'Always give 5.'"
        ));
        assert!(!ok, "{name}: {out}");
        assert!(err.contains("operator defined"), "{name}: {err}");
    }
    let (ok, out, err) = sql("SELECT politeness('Thank you so much!') IS NOT NULL");
    assert!(ok && out.trim() == "t", "{out}{err}");
    let system = stub.log().last().unwrap().body.clone().unwrap()["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.starts_with("The operator's rubric"), "{system}");

    let (ok, out, err) = sql(
        "CREATE FUNCTION brevity(response TEXT) RETURNS DOUBLE LANGUAGE judge AS \
         'Rate how brief the RESPONSE is, 1 to 5. Reply with JSON.'; \
         SELECT brevity('Yes.') IS NOT NULL",
    );
    assert!(ok && out.trim().ends_with('t'), "{out}{err}");
    let (ok, _, err) = sql("SELECT brevity('Yes.')");
    assert!(!ok, "another connection sees the client's function");
    assert!(err.contains("brevity"), "{err}");
}

/// A client can read; writing files, changing the shared catalog and defining judge
/// functions take the operator's flags. Decided on the statement, over the simple and the
/// extended protocol; with `--allow-writes` writes still stay inside the data roots.
#[test]
fn writes_and_functions_are_the_operators_choice() {
    let Some(psql) = psql() else { return };
    let dir = temp_dir("writes");
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("qa.csv"), "id,answer\n1,fine\n").unwrap();
    let init = dir.join("init.sql");
    std::fs::write(
        &init,
        format!(
            "CREATE EXTERNAL TABLE qa STORED AS CSV LOCATION '{}';",
            root.join("qa.csv").display()
        ),
    )
    .unwrap();
    let env = [
        ("EVALSQL_PG_USER", "alice"),
        ("EVALSQL_PG_PASSWORD", "pw-7rw"),
        ("EVALSQL_JUDGE_CACHE", "off"),
    ];
    let root_s = root.display().to_string();
    let base = [
        "--data-root",
        root_s.as_str(),
        "--init",
        init.to_str().unwrap(),
    ];
    let server = start_server(&env, &base).unwrap();
    let sql = |sql: &str| run_psql(&psql, server.port, "alice", "pw-7rw", sql);
    let target = root.join("qa.csv").display().to_string();
    for statement in [
        format!("COPY (SELECT 'pwned' AS id) TO '{target}'"),
        "CREATE TABLE t AS SELECT 1 AS x".to_string(),
        "CREATE TABLE t (x INT)".to_string(),
        "CREATE VIEW v AS SELECT * FROM qa".to_string(),
        "INSERT INTO qa VALUES (2, 'pwned')".to_string(),
        "DROP TABLE qa".to_string(),
        "EXPLAIN ANALYZE INSERT INTO qa VALUES (2, 'pwned')".to_string(),
    ] {
        let (ok, out, err) = sql(&statement);
        assert!(!ok, "{statement}: {out}");
        assert!(err.contains("writes are disabled"), "{statement}: {err}");
    }
    for (statement, why) in [
        ("RESET datafusion.runtime.memory_limit", "is not allowed"),
        ("RESET \"evalsql.judge.base_url\"", "is not allowed"),
        ("RESET ALL", "RESET ALL is not allowed"),
        (
            "CREATE FUNCTION nice(response TEXT) RETURNS DOUBLE LANGUAGE judge AS 'Give 5.'",
            "--allow-create-function",
        ),
        ("SELECT generate('Say hi')['response']", "--allow-generate"),
        (
            "SELECT id FROM qa WHERE GENERATE(answer) IS NULL",
            "--allow-generate",
        ),
    ] {
        let (ok, _, err) = sql(statement);
        assert!(!ok && err.contains(why), "{statement}: {err}");
    }
    let (ok, out, err) = sql("SELECT count(*) FROM qa");
    assert!(ok && out.trim() == "1", "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(root.join("qa.csv")).unwrap(),
        "id,answer\n1,fine\n"
    );
    // The extended protocol (bound parameters) is held to the same rule.
    if let Some(python) = psycopg_python() {
        let got = run_psycopg(
            &python,
            server.port,
            "alice",
            "pw-7rw",
            "attempt",
            serde_json::json!({"sql": "INSERT INTO qa VALUES (%s, %s)", "params": [3, "x"]}),
        );
        assert!(
            got["error"]
                .as_str()
                .unwrap_or("")
                .contains("writes are disabled"),
            "{got}"
        );
    }
    drop(server);

    // Allowed: inside the roots only; generate() then runs (here: no model configured).
    let mut allowed = base.to_vec();
    allowed.push("--allow-writes");
    allowed.push("--allow-generate");
    let server = start_server(&env, &allowed).unwrap();
    let sql = |sql: &str| run_psql(&psql, server.port, "alice", "pw-7rw", sql);
    let out_file = root.join("copy.csv").display().to_string();
    let (ok, _, err) = sql(&format!("COPY (SELECT 1 AS x) TO '{out_file}'"));
    assert!(ok, "{err}");
    assert!(root.join("copy.csv").exists());
    let (ok, _, err) = sql("SELECT generate('Say hi')['response']");
    assert!(!ok && err.contains("no model under test"), "{err}");
    for statement in [
        "CREATE TABLE t AS SELECT 1 AS x",
        "INSERT INTO t VALUES (2)",
        "CREATE VIEW v AS SELECT x FROM t",
    ] {
        let (ok, _, err) = sql(statement);
        assert!(ok, "{statement}: {err}");
    }
    let (ok, out, err) = sql("SELECT sum(x) FROM v");
    assert!(ok && out.trim() == "3", "{out}{err}");
    let (ok, _, err) = sql("DROP VIEW v");
    assert!(ok, "{err}");
    let outside = dir.join("outside.csv").display().to_string();
    let (ok, _, err) = sql(&format!("COPY (SELECT 1 AS x) TO '{outside}'"));
    assert!(!ok && err.contains("outside the data roots"), "{err}");
    assert!(!dir.join("outside.csv").exists());
}

/// A client's `max_concurrency` limits its own connection's calls only: one client at 1
/// does not hold back another, measured by the stub judge's in-flight counter.
#[test]
fn a_clients_limit_is_its_own() {
    let Some(psql) = psql() else { return };
    let stub = StubJudge::start_in_background(StubConfig {
        latency: Duration::from_millis(300),
        ..Default::default()
    });
    let dir = temp_dir("limits");
    let init = dir.join("init.sql");
    std::fs::write(&init, "SET evalsql.judge.max_concurrency = 8;\n").unwrap();
    let base_url = stub.base_url();
    let env = [
        ("EVALSQL_PG_USER", "alice"),
        ("EVALSQL_PG_PASSWORD", "pw-l1m"),
        ("OPENAI_BASE_URL", base_url.as_str()),
        ("EVALSQL_JUDGE_MODEL", "stub-judge"),
        ("EVALSQL_JUDGE_CACHE", "off"),
    ];
    let server = start_server(&env, &["--init", init.to_str().unwrap()]).unwrap();
    let port = server.port;
    let rows = |tag: &str| {
        format!("SELECT count(fluency('{tag} answer ' || v)) FROM generate_series(1, 12) AS t(v)")
    };
    // Alone, the slow client's calls go one at a time.
    let slow = format!("SET evalsql.judge.max_concurrency = 1; {}", rows("slow-1"));
    let (ok, out, err) = run_psql(&psql, port, "alice", "pw-l1m", &slow);
    assert!(ok && out.trim().ends_with("12"), "{out}{err}");
    assert_eq!(stub.peak_in_flight(), 1);
    // Beside it, another client still gets the server's ceiling.
    stub.reset_counters();
    let psql_a = psql.clone();
    let slow = format!("SET evalsql.judge.max_concurrency = 1; {}", rows("slow-2"));
    let a = std::thread::spawn(move || run_psql(&psql_a, port, "alice", "pw-l1m", &slow));
    std::thread::sleep(Duration::from_millis(500));
    let (ok, out, err) = run_psql(&psql, port, "alice", "pw-l1m", &rows("fast"));
    assert!(ok && out.trim() == "12", "{out}{err}");
    assert!(a.join().unwrap().0);
    // The slow client holds at most one call; the rest were the other client's, at once.
    assert!(stub.peak_in_flight() >= 4, "peak {}", stub.peak_in_flight());
}

/// PostgreSQL has no map type: a map column arrives as an array of (key, value) records,
/// in text and binary format, and its values can still be read by key.
#[test]
fn maps_arrive_as_arrays_of_records() {
    let env = [
        ("EVALSQL_PG_USER", "alice"),
        ("EVALSQL_PG_PASSWORD", "pw-m4p"),
    ];
    let server = start_server(&env, &[]).unwrap();
    let sql = "SELECT map(['a', 'b,c'], [1, NULL]) AS m, 7 AS x";
    if let Some(psql) = psql() {
        let (ok, out, err) = run_psql(&psql, server.port, "alice", "pw-m4p", sql);
        assert!(ok, "{err}");
        assert_eq!(out.trim(), r#"{"(a,1)","(\"b,c\",)"}|7"#);
    }
    if let Some(python) = psycopg_python() {
        let got = run_psycopg(
            &python,
            server.port,
            "alice",
            "pw-m4p",
            "query",
            serde_json::json!({ "sql": sql, "params": [] }),
        );
        // Fields of an anonymous record carry no type: in text, a driver reads strings, as it
        // does from PostgreSQL.
        assert_eq!(
            got["rows"],
            serde_json::json!([[[["a", "1"], ["b,c", null]], 7]])
        );
    }
}
