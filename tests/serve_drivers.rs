//! The real drivers BI tools use, against the real `evalsql serve` (issue 43): pgJDBC (DBeaver,
//! Metabase, Tableau), psqlODBC through pyodbc, SQLAlchemy 2 with psycopg2 and psycopg 3 and
//! pandas (Superset), asyncpg, node-postgres, and the connect-time / introspection SQL of
//! Npgsql (Power BI), Metabase, Superset, Grafana and DBeaver, taken verbatim from their sources
//! (`tests/serve/tools/*.sql`) and sent over the simple and the extended protocol.
//!
//! Each probe (`tests/serve/drivers/`) prints one JSON object, check -> {"ok", "value"} or
//! {"ok": false, "error"}; `expect.rs` holds what each check's value must be (what PostgreSQL
//! itself gives through the same driver). A check passes when it ran and its value is right.
//! `KNOWN_FAILING` lists, with the reason, the checks that do not pass yet; every other check
//! must pass, and a listed check that passes fails the test too, so the list only shrinks.
//! `scripts/test.sh` installs the drivers; one that is missing is a recorded skip.

mod expect;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::serve::{start_server, temp_dir};
use crate::skip::skipped;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const USER: &str = "alice";
const PASSWORD: &str = "correct horse";
/// A probe that has not printed by then is killed and its checks fail.
const PROBE_LIMIT: Duration = Duration::from_secs(90);

/// Checks that do not pass yet, as `(check, why)`: none today. A check that starts failing
/// for a reason outside evalsql's reach (a driver's release) goes here with that reason;
/// a listed check that passes fails the test, so the list only shrinks.
const KNOWN_FAILING: &[(&str, &str)] = &[];

/// `qa` (data/qa.jsonl) and `typed`: one row of every common type and one of NULLs.
const INIT: &str = "\
CREATE EXTERNAL TABLE qa STORED AS JSON LOCATION 'data/qa.jsonl';
CREATE VIEW typed AS
SELECT CAST(1 AS BIGINT) AS id,
       named_struct('score', CAST(4.5 AS DOUBLE), 'passed', true, 'reason', 'grounded') AS judge,
       make_array('alpha', 'beta') AS tags,
       make_array(named_struct('name', 'f1', 'value', CAST(0.5 AS DOUBLE)),
                  named_struct('name', 'bleu', 'value', CAST(0.25 AS DOUBLE))) AS metrics,
       arrow_cast(TIMESTAMP '2024-05-06 07:08:09', 'Timestamp(Microsecond, Some(\"+00:00\"))') AS at,
       CAST(12.34 AS DECIMAL(10, 2)) AS amount,
       true AS ok,
       'first' AS note
UNION ALL
SELECT CAST(2 AS BIGINT),
       named_struct('score', CAST(1.0 AS DOUBLE), 'passed', false, 'reason', CAST(NULL AS VARCHAR)),
       make_array('gamma', CAST(NULL AS VARCHAR)),
       make_array(named_struct('name', 'f1', 'value', CAST(NULL AS DOUBLE))),
       arrow_cast(NULL, 'Timestamp(Microsecond, Some(\"+00:00\"))'),
       CAST(NULL AS DECIMAL(10, 2)),
       CAST(NULL AS BOOLEAN),
       CAST(NULL AS VARCHAR);
";

/// One probe program: how to run it, and whether it has a cancel phase.
struct Probe {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    cancel: bool,
}

impl Probe {
    fn run(&self, phase: &str, port: u16) -> Result<BTreeMap<String, Value>, String> {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .arg(phase)
            .current_dir(Path::new(ROOT).join("tests/serve/drivers"))
            .env("PGHOST", "127.0.0.1")
            .env("PGPORT", port.to_string())
            .env("PGUSER", USER)
            .env("PGPASSWORD", PASSWORD)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = cmd.spawn().map_err(|e| format!("{}: {e}", self.name))?;
        let out = wait_with_limit(child, PROBE_LIMIT)
            .map_err(|e| format!("{} {phase}: {e}", self.name))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let line = stdout.lines().rev().find(|l| l.starts_with('{'));
        match line.map(serde_json::from_str::<BTreeMap<String, Value>>) {
            Some(Ok(checks)) => Ok(checks),
            _ => Err(format!(
                "{} {phase} printed no result ({}): {stdout}{stderr}",
                self.name, out.status
            )),
        }
    }
}

fn wait_with_limit(
    mut child: std::process::Child,
    limit: Duration,
) -> Result<std::process::Output, String> {
    let start = Instant::now();
    // Read the pipes while waiting, so that a large output cannot block the child.
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let (out, err) = (read(Box::new(stdout)), read(Box::new(stderr)));
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {limit:?}, killed"));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok(std::process::Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    })
}

fn env_path(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| default.into())
}

fn runs(program: &Path, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The probes whose driver is installed here; the others are recorded as skipped.
fn probes(work: &Path) -> Vec<Probe> {
    let mut probes = Vec::new();
    let drivers = Path::new(ROOT).join("tests/serve/drivers");
    let python = env_path("EVALSQL_DRIVERS_PYTHON", "python3");
    let has = |modules: &str| runs(&python, &["-c", &format!("import {modules}")]);
    let missing = |part: &str, what: &str| {
        skipped(
            &format!("the {part} part of the driver tests"),
            &format!("{what} (scripts/test.sh installs it)"),
        )
    };
    let py = |name: &'static str, script: &str, args: Vec<String>, cancel: bool| Probe {
        name,
        program: python.clone(),
        args: std::iter::once(drivers.join(script).display().to_string())
            .chain(args)
            .collect(),
        env: vec![],
        cancel,
    };

    // pgJDBC: javac compiles the probe against Debian's jar.
    let jar = env_path("EVALSQL_PGJDBC_JAR", "/usr/share/java/postgresql.jar");
    if !jar.exists() || !runs(Path::new("javac"), &["-version"]) {
        missing("pgJDBC", "no javac or no pgJDBC jar (EVALSQL_PGJDBC_JAR)");
    } else {
        let classes = work.join("jdbc-classes");
        std::fs::create_dir_all(&classes).unwrap();
        let out = Command::new("javac")
            .args([
                "-d",
                classes.to_str().unwrap(),
                "-cp",
                jar.to_str().unwrap(),
            ])
            .arg(drivers.join("JdbcProbe.java"))
            .output()
            .expect("run javac");
        assert!(
            out.status.success(),
            "javac JdbcProbe.java: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        probes.push(Probe {
            name: "pgJDBC",
            program: "java".into(),
            args: vec![
                "-cp".into(),
                format!("{}:{}", classes.display(), jar.display()),
                "JdbcProbe".into(),
            ],
            env: vec![],
            cancel: true,
        });
    }

    let odbc = env_path(
        "EVALSQL_PSQLODBC",
        "/usr/lib/x86_64-linux-gnu/odbc/psqlodbcw.so",
    );
    if !odbc.exists() || !has("pyodbc") {
        missing(
            "psqlODBC",
            "no psqlodbcw.so (EVALSQL_PSQLODBC) or no pyodbc",
        );
    } else {
        // An empty odbcinst.ini: Debian's turns psqlODBC's communication log (files in /tmp) on.
        let ini = work.join("odbc");
        std::fs::create_dir_all(&ini).unwrap();
        std::fs::write(ini.join("odbcinst.ini"), "").unwrap();
        probes.push(Probe {
            env: vec![
                ("EVALSQL_PSQLODBC", odbc.display().to_string()),
                ("ODBCSYSINI", ini.display().to_string()),
            ],
            ..py("psqlODBC", "odbc.py", vec![], true)
        });
    }
    if has("sqlalchemy, psycopg2, psycopg, pandas") {
        probes.push(py("SQLAlchemy", "sqlalchemy_probe.py", vec![], false));
    } else {
        missing("SQLAlchemy", "no sqlalchemy, psycopg2, psycopg or pandas");
    }
    if has("asyncpg") {
        probes.push(py("asyncpg", "asyncpg_probe.py", vec![], true));
    } else {
        missing("asyncpg", "no asyncpg");
    }
    if has("psycopg") {
        let tools = Path::new(ROOT).join("tests/serve/tools");
        probes.push(py(
            "tools",
            "tools.py",
            vec![tools.display().to_string()],
            false,
        ));
    } else {
        missing("BI tools' SQL", "no psycopg");
    }

    let node_modules = std::env::var_os("EVALSQL_NODE_PG").map(PathBuf::from);
    match node_modules {
        Some(dir) if dir.join("pg").exists() && runs(Path::new("node"), &["--version"]) => probes
            .push(Probe {
                name: "node-postgres",
                program: "node".into(),
                args: vec![drivers.join("node_pg.js").display().to_string()],
                env: vec![("NODE_PATH", dir.display().to_string())],
                cancel: true,
            }),
        _ => missing("node-postgres", "no node or no pg module (EVALSQL_NODE_PG)"),
    }
    probes
}

type ProbeResult = (&'static str, Result<BTreeMap<String, Value>, String>);

/// Starts a server with `init` and runs `phase` of every probe against it at once.
fn on_new_server(probes: &[&Probe], phase: &str, init: &Path) -> Vec<ProbeResult> {
    let server = start_server(
        &[("EVALSQL_PG_USER", USER), ("EVALSQL_PG_PASSWORD", PASSWORD)],
        &["--init", init.to_str().unwrap()],
    )
    .unwrap();
    let port = server.port;
    std::thread::scope(|s| {
        let handles: Vec<_> = probes
            .iter()
            .map(|p| (p.name, s.spawn(move || p.run(phase, port))))
            .collect();
        handles
            .into_iter()
            .map(|(name, h)| (name, h.join().unwrap()))
            .collect()
    })
}

#[test]
fn real_drivers_connect_introspect_read_and_cancel() {
    let dir = temp_dir("drivers");
    let init = dir.join("init.sql");
    std::fs::write(&init, INIT).unwrap();
    let probes = probes(&dir);
    if probes.is_empty() {
        return;
    }
    let expectations = expect::all(&expect::Qa::load(Path::new(ROOT)));
    let start = Instant::now();

    // Introspection and reads on one server; the cancel phases on a second one, so that a
    // statement the server fails to stop cannot slow the other checks down.
    let all: Vec<&Probe> = probes.iter().collect();
    let cancelling: Vec<&Probe> = probes.iter().filter(|p| p.cancel).collect();
    let mut results = on_new_server(&all, "main", &init);
    results.extend(on_new_server(&cancelling, "cancel", &init));

    let mut checks: BTreeMap<String, Value> = BTreeMap::new();
    let mut problems = Vec::new();
    for (probe, result) in results {
        match result {
            Ok(found) => checks.extend(found),
            Err(e) => problems.push(format!("probe {probe}: {e}")),
        }
    }
    let ran: Vec<&str> = probes.iter().map(|p| p.name).collect();
    let report = expect::judge(&expectations, &checks, &ran, KNOWN_FAILING);
    eprintln!(
        "driver checks ({:.0} s):\n{}",
        start.elapsed().as_secs_f64(),
        report.table
    );
    problems.extend(report.problems);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}
