//! `evalsql serve` as PostgreSQL drivers and BI tools check it: the version they parse
//! (libpq, SQLAlchemy's and asyncpg's parsers, Grafana's query), the settings they read,
//! savepoints and duplicate column names; and, written as an attacker would, that
//! `set_config`, `current_setting` and `pg_settings` reach nothing `SET` and `SHOW` cannot.
//! The real binary, psql and psycopg 3 (`tests/serve/pg_face.py`).

use serde_json::{Value, json};

use crate::serve::{Server, psql, psycopg_python, run_psql, run_python_client, start_server};

const USER: &str = "bi";
const PASSWORD: &str = "pw-face-81";
const SCRIPT: &str = "tests/serve/pg_face.py";

fn server(extra: &[&str]) -> Server {
    let env = [("EVALSQL_PG_USER", USER), ("EVALSQL_PG_PASSWORD", PASSWORD)];
    start_server(&env, extra).unwrap()
}

/// psql's unaligned output of `sql`, which must succeed.
fn ok(psql: &std::path::Path, server: &Server, sql: &str) -> String {
    let (ok, out, err) = run_psql(psql, server.port, USER, PASSWORD, sql);
    assert!(ok, "{sql}: {err}");
    out.trim_end().to_string()
}

/// psql's error for `sql`, which must fail.
fn refused(psql: &std::path::Path, server: &Server, sql: &str) -> String {
    let (ok, out, err) = run_psql(psql, server.port, USER, PASSWORD, sql);
    assert!(!ok, "{sql} succeeded: {out}");
    err
}

#[test]
fn drivers_read_postgresql_16_and_the_sessions_real_settings() {
    let server = server(&[]);
    if let Some(python) = psycopg_python() {
        let login = (server.port, USER, PASSWORD);
        let face = run_python_client(&python, SCRIPT, login, "face", json!({}));
        let parameters = &face["parameters"];
        let version = parameters["server_version"].as_str().unwrap();
        assert!(version.starts_with("16.6 (evalsql "), "{face}");
        for (name, want) in [
            ("server_encoding", "UTF8"),
            ("client_encoding", "UTF8"),
            ("standard_conforming_strings", "on"),
            ("integer_datetimes", "on"),
            ("TimeZone", "UTC"),
            ("is_superuser", "off"),
            ("default_transaction_read_only", "on"),
        ] {
            assert_eq!(parameters[name], want, "{name}: {face}");
        }
        assert!(parameters["DateStyle"].as_str().unwrap().starts_with("ISO"));
        assert_eq!(face["libpq_server_version"], 160006, "{face}");
        assert_eq!(face["sqlalchemy"], json!([16, 6]), "{face}");
        assert_eq!(face["asyncpg"], json!([16, 6]), "{face}");
        assert_eq!(face["grafana"], 1600, "{face}");
        let text = face["version"].as_str().unwrap();
        assert!(
            text.starts_with(&format!("PostgreSQL {version} on ")),
            "{text}"
        );
        // asyncpg's type introspection, over the extended protocol as asyncpg sends it.
        let jit = "SELECT current_setting('jit') AS cur, set_config('jit', 'off', false) AS new";
        let out = run_python_client(&python, SCRIPT, login, "columns", json!({ "sql": jit }));
        assert_eq!(
            out,
            json!({"columns": ["cur", "new"], "rows": [["off", "off"]]})
        );
    }
    let Some(psql) = psql() else { return };
    assert_eq!(ok(&psql, &server, "\\echo :SERVER_VERSION_NUM"), "160006");
    for (show, want) in [
        ("server_version_num", "160006"),
        ("TimeZone", "UTC"),
        ("time zone", "UTC"),
        ("standard_conforming_strings", "on"),
        ("client_encoding", "UTF8"),
        ("integer_datetimes", "on"),
        ("transaction_isolation", "read committed"),
        ("transaction isolation level", "read committed"),
        ("is_superuser", "off"),
        ("default_transaction_read_only", "on"),
        ("transaction_read_only", "on"),
        ("max_identifier_length", "63"),
        ("session_authorization", USER),
        ("datafusion.execution.batch_size", "8192"),
    ] {
        assert_eq!(
            ok(&psql, &server, &format!("SHOW {show}")),
            want,
            "SHOW {show}"
        );
        // current_setting gives what SHOW gives.
        let name = show.replace(' ', "_").replace("time_zone", "TimeZone");
        let name = name.replace("transaction_isolation_level", "transaction_isolation");
        let read = ok(&psql, &server, &format!("SELECT current_setting('{name}')"));
        assert_eq!(read, want, "current_setting('{name}')");
    }
    assert!(ok(&psql, &server, "SHOW server_version").starts_with("16.6 (evalsql "));
    let jit = "SELECT current_setting('jit') AS cur, set_config('jit', 'off', false) AS new";
    assert_eq!(ok(&psql, &server, jit), "off|off");
    assert!(ok(&psql, &server, "SHOW DateStyle").starts_with("ISO"));
    let datestyle = ok(
        &psql,
        &server,
        "SELECT setting FROM pg_settings WHERE name = 'DateStyle'",
    );
    assert_eq!(datestyle, ok(&psql, &server, "SHOW DateStyle"));
    assert_eq!(
        ok(&psql, &server, "SELECT pg_catalog.version()"),
        ok(&psql, &server, "SELECT version()")
    );
    // The session's own values: what it set, in that session. SET TIME ZONE is the
    // session's time zone, the one timestamps are computed in.
    let zone = "SET TIME ZONE 'Europe/Paris'; SHOW TimeZone; SHOW datafusion.execution.time_zone; \
                SELECT '2026-01-01 12:00:00'::timestamptz";
    let set = ok(&psql, &server, zone);
    let lines: Vec<&str> = set.lines().collect();
    assert_eq!(lines[..3], ["SET", "Europe/Paris", "Europe/Paris"], "{set}");
    // Noon in Paris, whatever the format of the fractional digits.
    let noon = lines[3];
    assert!(
        noon.starts_with("2026-01-01 12:00:00") && noon.ends_with("+01"),
        "{set}"
    );
    let tokyo = "SELECT set_config('TimeZone', 'Asia/Tokyo', false); SHOW TimeZone";
    assert_eq!(ok(&psql, &server, tokyo), "Asia/Tokyo\nAsia/Tokyo");
    let err = refused(&psql, &server, "SET TIME ZONE 'Not/AZone'");
    assert!(
        err.contains("invalid value for parameter \"TimeZone\""),
        "{err}"
    );
    let set = ok(
        &psql,
        &server,
        "SET application_name = 'dashboards'; SELECT current_setting('application_name')",
    );
    assert!(set.ends_with("dashboards"), "{set}");
    // Unknown names are errors, as in PostgreSQL, or NULL when asked.
    let err = refused(&psql, &server, "SHOW no_such_setting");
    assert!(
        err.contains("unrecognized configuration parameter"),
        "{err}"
    );
    let err = refused(&psql, &server, "SELECT current_setting('no_such_setting')");
    assert!(
        err.contains("unrecognized configuration parameter"),
        "{err}"
    );
    let missing = "SELECT current_setting('no_such_setting', true) IS NULL";
    assert_eq!(ok(&psql, &server, missing), "t");
    // SHOW ALL and pg_settings list PostgreSQL's settings and the session's.
    let all = ok(&psql, &server, "SHOW ALL");
    assert!(all.contains("server_version_num|160006|"), "{all}");
    assert!(
        all.contains("datafusion.execution.batch_size|8192|"),
        "{all}"
    );
    let listed = "SELECT setting FROM pg_catalog.pg_settings WHERE name = 'server_version_num'";
    assert_eq!(ok(&psql, &server, listed), "160006");

    // A server that allows writes says so.
    let writable = self::server(&["--allow-writes"]);
    assert_eq!(
        ok(&psql, &writable, "SHOW default_transaction_read_only"),
        "off"
    );
}

/// `set_config` attempts on settings a client may not change, however spelled.
const FORBIDDEN: [(&str, &str); 10] = [
    ("datafusion.sql_parser.dialect", "MySQL"),
    ("DataFusion.SQL_Parser.Dialect", "MySQL"),
    ("datafusion.catalog.default_schema", "elsewhere"),
    ("datafusion.runtime.temp_directory", "/tmp/evil"),
    ("evalsql.judge.base_url", "http://attacker.example/v1"),
    ("EVALSQL.JUDGE.BASE_URL", "http://attacker.example/v1"),
    ("evalsql.judge.cache", "/tmp/evil.sqlite"),
    ("evalsql.target.allowed_urls", "http://"),
    // A Kelvin sign folds to `k`, as DataFusion's SET folds it.
    ("evalsql.judge.to\u{212A}ens_per_minute", "100000000"),
    // Not among the models this server's clients may use.
    ("evalsql.judge.model", "gpt-expensive"),
];

#[test]
fn set_config_current_setting_and_pg_settings_reach_nothing_set_cannot() {
    let dir = crate::serve::temp_dir("pg-face");
    let init = dir.join("init.sql");
    std::fs::write(
        &init,
        "SET evalsql.judge.base_url = 'http://judge:pw-s3cr3t@127.0.0.1:9/v1?api-key=k3y-77';\n\
         SET evalsql.judge.model = 'operator-model';\n",
    )
    .unwrap();
    let server = server(&[
        "--init",
        init.to_str().unwrap(),
        "--allowed-model",
        "ok-model",
    ]);
    let Some(psql) = psql() else { return };
    let watched = [
        "datafusion.sql_parser.dialect",
        "datafusion.catalog.default_schema",
        "evalsql.judge.base_url",
        "evalsql.judge.cache",
        "evalsql.judge.model",
        "evalsql.judge.tokens_per_minute",
        "datafusion.execution.batch_size",
    ];
    let show = |name: &str| ok(&psql, &server, &format!("SHOW {name}"));
    let before: Vec<String> = watched.iter().map(|n| show(n)).collect();

    // The simple protocol: each refused as SET refuses it.
    for (name, value) in FORBIDDEN {
        let err = refused(
            &psql,
            &server,
            &format!("SELECT set_config('{name}', '{value}', false)"),
        );
        assert!(
            err.contains("not allowed") || err.contains("not among"),
            "{name}: {err}"
        );
    }
    // Limits of settings a client may change hold too.
    let too_big = "SELECT set_config('datafusion.execution.batch_size', '999999999', false)";
    assert!(refused(&psql, &server, too_big).contains("from 1 to 65536"));
    // set_config anywhere but a statement of its own never runs: computed arguments, over
    // rows, in subqueries, CTEs, cursors, prepared statements, EXPLAIN ANALYZE.
    let call = "set_config('datafusion.sql_parser.dialect', 'MySQL', false)";
    for sql in [
        "SELECT set_config('datafusion.sql_parser.' || 'dialect', 'MySQL', false)".to_string(),
        "SELECT set_config(name, 'MySQL', false) FROM pg_settings WHERE name LIKE '%dialect'"
            .into(),
        format!("SELECT (SELECT {call})"),
        format!("SELECT * FROM (SELECT {call}) AS t"),
        format!("WITH x AS (SELECT 1) SELECT {call}"),
        format!("SELECT {call} WHERE true"),
        format!("SELECT {call} LIMIT 1"),
        format!("EXPLAIN ANALYZE SELECT {call}"),
        format!("BEGIN; DECLARE c CURSOR FOR SELECT {call}; FETCH 1 FROM c"),
        format!("PREPARE p AS SELECT {call}; EXECUTE p"),
        format!("SELECT {call}, 1"),
    ] {
        let err = refused(&psql, &server, &sql);
        assert!(
            err.contains("set_config() runs on this server only"),
            "{sql}: {err}"
        );
    }
    // Constant arguments only: a generate() call is refused as anywhere else.
    let hidden = "SELECT set_config('application_name', generate('hi'), false)";
    assert!(refused(&psql, &server, hidden).contains("generate() is disabled"));
    let local = "SELECT set_config('datafusion.execution.batch_size', '1024', true)";
    assert!(refused(&psql, &server, local).contains("transaction-local"));

    // The extended protocol, with the name and value as bound parameters.
    if let Some(python) = psycopg_python() {
        let login = (server.port, USER, PASSWORD);
        let mut attempts: Vec<Value> = FORBIDDEN.iter().map(|(n, v)| json!([n, v])).collect();
        attempts.push(json!(["datafusion.execution.batch_size", "1024"]));
        let input = json!({"attempts": attempts, "read": ["datafusion.execution.batch_size"]});
        let out = run_python_client(&python, SCRIPT, login, "set_config", input);
        let results = out["results"].as_array().unwrap();
        for ((name, _), result) in FORBIDDEN.iter().zip(results) {
            let err = result["error"].as_str().unwrap_or_default();
            assert!(
                err.contains("not allowed") || err.contains("not among"),
                "{name}: {out}"
            );
        }
        // What a client may change, it changes, and reads back in its session.
        assert_eq!(results[FORBIDDEN.len()]["value"], "1024", "{out}");
        assert_eq!(
            out["after"]["datafusion.execution.batch_size"], "1024",
            "{out}"
        );
    }
    let allowed = "SELECT set_config('datafusion.execution.batch_size', '2048', false) AS v; \
                   SHOW datafusion.execution.batch_size";
    assert_eq!(ok(&psql, &server, allowed), "2048\n2048");
    let model = "SELECT set_config('evalsql.judge.model', 'ok-model', false)";
    assert_eq!(ok(&psql, &server, model), "ok-model");

    // Nothing changed for the next connection either (each has its own session, and the
    // refused ones changed nothing in theirs).
    let after: Vec<String> = watched.iter().map(|n| show(n)).collect();
    assert_eq!(before, after);

    // Secrets: masked in every view, as in df_settings.
    let base_url = "'evalsql.judge.base_url'";
    for sql in [
        format!("SELECT current_setting({base_url})"),
        format!("SELECT current_setting({base_url}, true)"),
        "SHOW evalsql.judge.base_url".to_string(),
        "SHOW ALL".into(),
        "SELECT * FROM pg_catalog.pg_settings".into(),
        format!("SELECT setting, reset_val FROM pg_settings WHERE name = {base_url}"),
        "SELECT value FROM information_schema.df_settings".into(),
    ] {
        let (_, out, err) = run_psql(&psql, server.port, USER, PASSWORD, &sql);
        for secret in ["pw-s3cr3t", "k3y-77"] {
            assert!(
                !out.contains(secret) && !err.contains(secret),
                "{sql} shows {secret}"
            );
        }
    }
    let masked = ok(
        &psql,
        &server,
        &format!("SELECT current_setting({base_url})"),
    );
    assert_eq!(masked, "http://judge:***@127.0.0.1:9/v1?api-key=***");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn savepoints_and_duplicate_column_names_work_as_in_postgresql() {
    let server = server(&[]);
    if let Some(python) = psycopg_python() {
        let login = (server.port, USER, PASSWORD);
        // psycopg's nested transactions: SAVEPOINT, an error, ROLLBACK TO, RELEASE.
        let out = run_python_client(&python, SCRIPT, login, "savepoints", json!({}));
        let rows = out["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 4, "{out}");
        assert_eq!(
            (&rows[0], &rows[2], &rows[3]),
            (&json!(1), &json!(2), &json!(3))
        );
        assert_eq!(out["status"], "IDLE", "{out}");
        let by_hand =
            json!({"failed": "INERROR", "refused": "25P02", "resumed": ["INTRANS", "UTC"]});
        assert_eq!(out["by_hand"], by_hand, "{out}");
        // Duplicate names over the extended protocol, as Describe gives them.
        for (sql, columns) in [
            (
                "select NULL, nspname, NULL from pg_namespace where nspname = 'pg_catalog'",
                // PostgreSQL's names: an unnamed constant is `?column?`.
                json!(["?column?", "nspname", "?column?"]),
            ),
            ("SELECT 1 AS a, 2 AS a ORDER BY 1", json!(["a", "a"])),
        ] {
            let input = json!({ "sql": sql });
            let out = run_python_client(&python, SCRIPT, login, "columns", input);
            assert_eq!(out["columns"], columns, "{sql}: {out}");
        }
        let input = json!({"sql": "SELECT current_user, session_user"});
        let out = run_python_client(&python, SCRIPT, login, "columns", input);
        assert_eq!(out["rows"], json!([[USER, USER]]), "{out}");
    }
    let Some(psql) = psql() else { return };
    let tags = ok(
        &psql,
        &server,
        "BEGIN; SAVEPOINT a; SELECT 1; RELEASE SAVEPOINT a; SAVEPOINT b; \
         ROLLBACK TO SAVEPOINT b; RELEASE b; COMMIT",
    );
    let want = "BEGIN\nSAVEPOINT\n1\nRELEASE\nSAVEPOINT\nROLLBACK\nRELEASE\nCOMMIT";
    assert_eq!(tags, want);
    for sql in [
        "SAVEPOINT a",
        "RELEASE SAVEPOINT a",
        "ROLLBACK TO SAVEPOINT a",
    ] {
        let err = refused(&psql, &server, sql);
        assert!(
            err.contains("can only be used in transaction blocks"),
            "{sql}: {err}"
        );
    }
    let dup = "select NULL, nspname, NULL from pg_namespace where nspname = 'pg_catalog'";
    assert_eq!(ok(&psql, &server, dup), "|pg_catalog|");
    assert_eq!(
        ok(&psql, &server, "SELECT 1 AS a, 2 AS A, 3 AS \"A\""),
        "1|2|3"
    );
}

/// `timestamptz` values are shown in the session's `TimeZone`, as PostgreSQL shows them: the
/// server's by default, the one a client sends at startup (pgJDBC sends the JVM's; here
/// `PGOPTIONS=-c TimeZone=…`), then what `SET TIME ZONE` says; dates, times and timestamps
/// in PostgreSQL's ISO text (no `.000000`), floats as `float8out` writes them; also inside
/// records and arrays.
#[test]
fn timestamps_in_the_sessions_time_zone_and_postgresql_text() {
    let Some(psql) = psql() else {
        return;
    };
    let server = server(&[]);
    let at =
        "arrow_cast(TIMESTAMP '2024-05-06 07:08:09', 'Timestamp(Microsecond, Some(\"+02:00\"))')";
    assert_eq!(
        ok(
            &psql,
            &server,
            &format!(
                "SELECT {at}, TIMESTAMP '2024-05-06 07:08:09.25', DATE '2024-01-02', \
                 TIME '01:02:03.5', CAST(1 AS DOUBLE), CAST('inf' AS DOUBLE)"
            )
        ),
        "2024-05-06 05:08:09+00|2024-05-06 07:08:09.25|2024-01-02|01:02:03.5|1|Infinity"
    );
    let with_options = |options: &str, sql: &str| {
        let out = std::process::Command::new(&psql)
            .env_clear()
            .env("PGPASSWORD", PASSWORD)
            .env("PGOPTIONS", options)
            .args(["-X", "-At", "-F", "|", "-v", "ON_ERROR_STOP=1"])
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &server.port.to_string(),
                "-U",
                USER,
            ])
            .args(["-d", "evals", "-c", sql])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim_end().to_string()
    };
    let query = format!(
        "SELECT current_setting('TimeZone'), {at}, \
         CAST('2024-05-06 07:08:09+00' AS TIMESTAMPTZ)"
    );
    assert_eq!(
        with_options("-c TimeZone=Asia/Tokyo", &query),
        "Asia/Tokyo|2024-05-06 14:08:09+09|2024-05-06 16:08:09+09"
    );
    // A zone that does not exist is not taken; the server's stays.
    assert_eq!(
        with_options("-c TimeZone=Mars/Olympus", "SHOW TimeZone"),
        "UTC"
    );
    assert_eq!(
        ok(
            &psql,
            &server,
            &format!("SET TIME ZONE 'America/New_York'; SELECT {at}")
        ),
        "SET\n2024-05-06 01:08:09-04"
    );
    // Inside records and arrays too, as record_out and array_out write them.
    assert_eq!(
        with_options(
            "-c TimeZone=Asia/Tokyo",
            &format!("SELECT named_struct('at', {at}, 'n', 1), make_array({at})")
        ),
        "(\"2024-05-06 14:08:09+09\",1)|{\"2024-05-06 14:08:09+09\"}"
    );
}
