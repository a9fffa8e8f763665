//! What each driver check must give: the value PostgreSQL itself gives through the same driver
//! for `qa` and `typed` (a record as the text psql prints, a list as the driver's array of the
//! element values, NULL as NULL), and the judging of a run against `KNOWN_FAILING`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

type Check = Box<dyn Fn(&Value) -> Result<(), String>>;

/// One expected check: its name, the probe that reports it, and the test of its value.
pub(super) struct Expectation {
    name: String,
    probe: &'static str,
    check: Check,
}

/// What data/qa.jsonl holds, as the CLI reads it.
pub(super) struct Qa {
    /// `SELECT id, model, response FROM qa ORDER BY id, model LIMIT 5`.
    first5: Value,
    /// The rows with model = 'gpt-4o'.
    gpt4o: u64,
}

/// The columns of `qa` in table order (DataFusion infers a JSON file's fields sorted by name).
const QA_COLUMNS: [&str; 6] = [
    "context",
    "ground_truth",
    "id",
    "model",
    "query",
    "response",
];
const TYPED_COLUMNS: [&str; 8] = [
    "id", "judge", "tags", "metrics", "at", "amount", "ok", "note",
];
/// The PostgreSQL type of each column of `typed`: a struct is a record, a list an array.
const TYPED_TYPES: [&str; 8] = [
    "int8",
    "record",
    "_text",
    "_record",
    "timestamptz",
    "numeric",
    "bool",
    "text",
];
const JUDGE_TEXT: [&str; 2] = ["(4.5,t,grounded)", "(1,f,)"];
const METRICS_TEXT: [&str; 2] = ["{\"(f1,0.5)\",\"(bleu,0.25)\"}", "{\"(f1,)\"}"];

impl Qa {
    pub(super) fn load(root: &Path) -> Qa {
        let text = std::fs::read_to_string(root.join("data/qa.jsonl")).unwrap();
        let mut rows: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let key = |r: &Value| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["model"].as_str().unwrap().to_string(),
            )
        };
        rows.sort_by_key(key);
        Qa {
            first5: rows
                .iter()
                .take(5)
                .map(|r| json!([r["id"], r["model"], r["response"]]))
                .collect(),
            gpt4o: rows.iter().filter(|r| r["model"] == "gpt-4o").count() as u64,
        }
    }
}

/// JSON values equal, numbers compared as numbers (1 and 1.0 alike).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn eq(want: Value) -> Check {
    Box::new(move |got| {
        if same(got, &want) {
            Ok(())
        } else {
            Err(format!("want {want}"))
        }
    })
}

fn ensure(ok: bool, what: impl Into<String>) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what.into()) }
}

/// Every `item` of `want` is among the values of `got` (an array).
fn contains(got: &Value, want: &[&str]) -> Result<(), String> {
    let have: Vec<&Value> = got
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let absent: Vec<&&str> = want
        .iter()
        .filter(|w| !have.iter().any(|h| h.as_str() == Some(w)))
        .collect();
    ensure(absent.is_empty(), format!("missing {absent:?}"))
}

/// A cancelled statement: SQLSTATE 57014 within a few seconds, and the connection usable.
fn cancelled(key: &'static str, then: Value) -> Check {
    Box::new(move |v| {
        ensure(v[key] == "57014", format!("want {key} 57014"))?;
        ensure(
            v["seconds"].as_f64().is_some_and(|s| s < 5.0),
            "want the statement to end within 5 s of its start",
        )?;
        ensure(
            same(&v["then_select_1"], &then),
            format!("want then_select_1 {then}"),
        )
    })
}

fn starts_with_postgresql(v: &Value) -> Result<(), String> {
    let s = v.as_str().unwrap_or_default();
    let version = s.strip_prefix("PostgreSQL ").unwrap_or_default();
    ensure(
        version.starts_with(|c: char| c.is_ascii_digit()),
        "want a version() like PostgreSQL 16.x",
    )
}

/// The values of column `name` of a tools.py result.
fn column<'a>(v: &'a Value, name: &str) -> Vec<&'a Value> {
    let columns = v["columns"].as_array().cloned().unwrap_or_default();
    let Some(i) = columns.iter().position(|c| c == name) else {
        return vec![];
    };
    v["rows"]
        .as_array()
        .map(|rows| rows.iter().map(|r| &r[i]).collect())
        .unwrap_or_default()
}

fn rows_eq(want: Value) -> Check {
    Box::new(move |v| ensure(same(&v["rows"], &want), format!("want rows {want}")))
}

/// Columns `names` of each row of a tools.py result.
fn project(v: &Value, names: &[&str]) -> Value {
    let cols: Vec<Vec<&Value>> = names.iter().map(|n| column(v, n)).collect();
    let n = cols.first().map_or(0, |c| c.len());
    (0..n)
        .map(|i| {
            Value::Array(
                cols.iter()
                    .map(|c| c.get(i).cloned().cloned().unwrap_or(Value::Null))
                    .collect(),
            )
        })
        .collect()
}

fn projected(names: &'static [&'static str], want: Value) -> Check {
    Box::new(move |v| {
        let got = project(v, names);
        ensure(
            same(&got, &want),
            format!("want {names:?} = {want}, got {got}"),
        )
    })
}

fn column_contains(name: &'static str, want: &'static [&'static str]) -> Check {
    Box::new(move |v| {
        contains(
            &Value::Array(column(v, name).into_iter().cloned().collect()),
            want,
        )
    })
}

pub(super) fn all(qa: &Qa) -> Vec<Expectation> {
    let mut out = Vec::new();
    let mut add = |probe: &'static str, name: &str, check: Check| {
        out.push(Expectation {
            name: name.to_string(),
            probe,
            check,
        })
    };
    let n = qa.gpt4o;
    let typed_rows = |first: Value, second: Value| json!([first, second]);
    let qa_text_columns = |extra: &[Value]| -> Value {
        QA_COLUMNS
            .iter()
            .map(|c| {
                let mut row = vec![json!(c)];
                row.extend(extra.iter().cloned());
                Value::Array(row)
            })
            .collect()
    };

    // pgJDBC.
    let jdbc = "pgJDBC";
    add(
        jdbc,
        "jdbc.connect",
        Box::new(|v| {
            ensure(v["product"] == "PostgreSQL", "want product PostgreSQL")?;
            ensure(
                v["major"].as_i64().is_some_and(|m| m >= 14),
                "want major version >= 14",
            )
        }),
    );
    add(
        jdbc,
        "jdbc.getSchemas",
        Box::new(|v| contains(v, &["information_schema", "pg_catalog", "public"])),
    );
    add(
        jdbc,
        "jdbc.getTables",
        eq(json!([["qa", "TABLE"], ["typed", "VIEW"]])),
    );
    add(
        jdbc,
        "jdbc.getColumns.qa",
        eq(qa_text_columns(&[json!("text"), json!(12)])),
    );
    let jdbc_types = [-5, 1111, 2003, 2003, 93, 2, -7, 12];
    add(
        jdbc,
        "jdbc.getColumns.typed",
        eq(TYPED_COLUMNS
            .iter()
            .zip(TYPED_TYPES)
            .zip(jdbc_types)
            .map(|((c, t), j)| json!([c, t, j]))
            .collect()),
    );
    add(
        jdbc,
        "jdbc.getTypeInfo",
        Box::new(|v| {
            contains(
                v,
                &[
                    "bool",
                    "int4",
                    "int8",
                    "float8",
                    "numeric",
                    "text",
                    "timestamptz",
                    "_text",
                ],
            )
        }),
    );
    add(jdbc, "jdbc.getPrimaryKeys", eq(json!([])));
    add(jdbc, "jdbc.query", eq(qa.first5.clone()));
    add(jdbc, "jdbc.prepared", eq(json!([n, 0, n, 0, n, 0])));
    add(jdbc, "jdbc.struct", eq(json!(JUDGE_TEXT)));
    add(
        jdbc,
        "jdbc.list",
        eq(json!([["alpha", "beta"], ["gamma", null]])),
    );
    add(
        jdbc,
        "jdbc.list_of_structs",
        eq(json!([["(f1,0.5)", "(bleu,0.25)"], ["(f1,)"]])),
    );
    add(
        jdbc,
        "jdbc.types",
        eq(typed_rows(
            json!([1, "2024-05-06T07:08:09Z", "12.34", true, "first"]),
            json!([2, null, null, null, null]),
        )),
    );
    add(jdbc, "jdbc.error_recovery", eq(json!(["42P01", [1]])));
    add(jdbc, "jdbc.cancel", cancelled("sqlstate", json!([1])));
    add(
        jdbc,
        "jdbc.query_timeout",
        cancelled("sqlstate", json!([1])),
    );

    // psqlODBC: records, arrays, booleans as their text (psqlODBC's defaults).
    let odbc = "psqlODBC";
    add(
        odbc,
        "odbc.connect",
        Box::new(|v| ensure(v[0] == "PostgreSQL", "want DBMS PostgreSQL")),
    );
    add(odbc, "odbc.schemas", Box::new(|v| contains(v, &["public"])));
    add(
        odbc,
        "odbc.tables",
        eq(json!([["qa", "TABLE"], ["typed", "VIEW"]])),
    );
    add(
        odbc,
        "odbc.columns.qa",
        eq(qa_text_columns(&[json!("text")])),
    );
    add(
        odbc,
        "odbc.columns.typed",
        eq(TYPED_COLUMNS
            .iter()
            .zip(TYPED_TYPES)
            .map(|(c, t)| json!([c, t]))
            .collect()),
    );
    add(odbc, "odbc.query", eq(qa.first5.clone()));
    add(odbc, "odbc.prepared", eq(json!([n, 0, n])));
    add(
        odbc,
        "odbc.types",
        eq(typed_rows(
            json!([
                1,
                JUDGE_TEXT[0],
                "{alpha,beta}",
                METRICS_TEXT[0],
                "2024-05-06T07:08:09",
                "12.34",
                "1",
                "first"
            ]),
            json!([
                2,
                JUDGE_TEXT[1],
                "{gamma,NULL}",
                METRICS_TEXT[1],
                null,
                null,
                null,
                null
            ]),
        )),
    );
    add(odbc, "odbc.error_recovery", eq(json!(["42P01", [1]])));
    add(odbc, "odbc.cancel", cancelled("sqlstate", json!([1])));

    // SQLAlchemy 2 (Superset) with both psycopg generations, and pandas.
    let sa = "SQLAlchemy";
    for driver in ["psycopg2", "psycopg"] {
        let name = |check: &str| format!("sqlalchemy.{driver}.{check}");
        add(
            sa,
            &name("connect"),
            Box::new(|v| {
                ensure(v[0] == 1, "want SELECT 1 = 1")?;
                ensure(
                    v[1][0].as_i64().is_some_and(|m| m >= 14),
                    "want server_version_info >= 14",
                )
            }),
        );
        add(sa, &name("schemas"), Box::new(|v| contains(v, &["public"])));
        add(sa, &name("tables"), eq(json!(["qa"])));
        add(sa, &name("views"), eq(json!(["typed"])));
        add(
            sa,
            &name("columns.qa"),
            eq(qa_text_columns(&[json!("TEXT"), json!(true)])),
        );
        // A record has no SQLAlchemy type: NullType, as for a PostgreSQL composite, and an
        // array of them is NullType too (what SQLAlchemy 2 reflects from PostgreSQL 15 for a
        // view over a composite and an array of a composite).
        add(
            sa,
            &name("columns.typed"),
            eq(json!([
                ["id", "BIGINT", true],
                ["judge", "NULL", true],
                ["tags", "ARRAY", true],
                ["metrics", "NULL", true],
                ["at", "TIMESTAMP", true],
                ["amount", "NUMERIC", true],
                ["ok", "BOOLEAN", true],
                ["note", "TEXT", true],
            ])),
        );
        add(sa, &name("read_sql"), eq(qa.first5.clone()));
        add(sa, &name("read_sql_params"), eq(json!([n])));
    }
    add(
        sa,
        "psycopg2.types",
        eq(typed_rows(
            json!([JUDGE_TEXT[0], ["alpha", "beta"], METRICS_TEXT[0]]),
            json!([JUDGE_TEXT[1], ["gamma", null], METRICS_TEXT[1]]),
        )),
    );
    // psycopg 3 parses a record (OID 2249) in text into a tuple of its fields' texts.
    add(
        sa,
        "psycopg.types.text",
        eq(typed_rows(
            json!([
                ["4.5", "t", "grounded"],
                ["alpha", "beta"],
                [["f1", "0.5"], ["bleu", "0.25"]]
            ]),
            json!([["1", "f", null], ["gamma", null], [["f1", null]]]),
        )),
    );
    add(
        sa,
        "psycopg.types.binary",
        eq(json!([[["alpha", "beta"]], [["gamma", null]]])),
    );

    // asyncpg: records as tuples of their fields, lists as lists.
    let apg = "asyncpg";
    add(apg, "asyncpg.connect", eq(json!(1)));
    add(apg, "asyncpg.query", eq(qa.first5.clone()));
    add(apg, "asyncpg.prepared", eq(json!([n, 0, n])));
    add(
        apg,
        "asyncpg.struct",
        eq(json!([[[4.5, true, "grounded"]], [[1.0, false, null]]])),
    );
    add(
        apg,
        "asyncpg.list",
        eq(json!([[["alpha", "beta"]], [["gamma", null]]])),
    );
    add(
        apg,
        "asyncpg.list_of_structs",
        eq(json!([[[["f1", 0.5], ["bleu", 0.25]]], [[["f1", null]]]])),
    );
    add(
        apg,
        "asyncpg.types",
        eq(typed_rows(
            json!([1, "2024-05-06T07:08:09+00:00", "12.34", true, "first"]),
            json!([2, null, null, null, null]),
        )),
    );
    add(apg, "asyncpg.error_recovery", eq(json!(["42P01", 1])));
    add(
        apg,
        "asyncpg.timeout",
        Box::new(|v| {
            ensure(
                v["ended"] == "TimeoutError",
                "want asyncpg's TimeoutError after 1 s",
            )?;
            ensure(v["then_select_1"] == 1, "want the connection usable")?;
            ensure(
                v["select_1_seconds"].as_f64().is_some_and(|s| s < 3.0),
                "want the next statement answered at once (the cancel stopped the long one)",
            )
        }),
    );

    // node-postgres: int8 as a string (pg's default), arrays as JS arrays.
    let node = "node-postgres";
    let ns = n.to_string();
    add(node, "node_pg.connect", eq(json!("ok")));
    add(node, "node_pg.query", eq(qa.first5.clone()));
    add(node, "node_pg.parameterized", eq(json!([ns, "0", ns])));
    add(node, "node_pg.prepared", eq(json!([ns, "0"])));
    add(
        node,
        "node_pg.list",
        eq(json!([[["alpha", "beta"]], [["gamma", null]]])),
    );
    add(
        node,
        "node_pg.struct",
        eq(json!([
            [JUDGE_TEXT[0], METRICS_TEXT[0]],
            [JUDGE_TEXT[1], METRICS_TEXT[1]]
        ])),
    );
    add(
        node,
        "node_pg.types",
        eq(typed_rows(
            json!(["1", "2024-05-06T07:08:09.000Z", "12.34", true, "first"]),
            json!(["2", null, null, null, null]),
        )),
    );
    add(node, "node_pg.error_recovery", eq(json!(["42P01", "ok"])));
    add(
        node,
        "node_pg.statement_timeout",
        cancelled("sqlstate", json!("ok")),
    );
    add(node, "node_pg.cancel", cancelled("sqlstate", json!("ok")));

    tools(&mut add);
    out
}

/// The BI tools' SQL (tests/serve/tools/), over both protocols.
fn tools(add: &mut impl FnMut(&'static str, &str, Check)) {
    let qa_columns: Vec<Value> = QA_COLUMNS.iter().map(|c| json!([c, "text"])).collect();
    for protocol in ["simple", "extended"] {
        let mut tool =
            |name: &str, check: Check| add("tools", &format!("{name}.{protocol}"), check);
        tool(
            "npgsql.version",
            Box::new(|v| starts_with_postgresql(&v["rows"][0][0])),
        );
        tool(
            "npgsql.load_types",
            Box::new(|v| {
                let want = json!([
                    "nspname",
                    "oid",
                    "typname",
                    "typtype",
                    "typnotnull",
                    "elemtypoid"
                ]);
                ensure(v["columns"] == want, format!("want columns {want}"))?;
                let rows = project(v, &["typname", "typtype"]);
                for want in [
                    json!(["text", "b"]),
                    json!(["int8", "b"]),
                    json!(["record", "p"]),
                    json!(["_text", "a"]),
                ] {
                    ensure(
                        rows.as_array().unwrap().contains(&want),
                        format!("want a row {want}"),
                    )?;
                }
                Ok(())
            }),
        );
        tool(
            "npgsql.load_composite_types",
            Box::new(|v| {
                ensure(
                    v["columns"] == json!(["oid", "attname", "atttypid"]),
                    "want the three columns",
                )
            }),
        );
        tool("npgsql.load_enum_fields", rows_eq(json!([])));
        tool(
            "grafana.version",
            Box::new(|v| {
                ensure(
                    v["rows"][0][0].as_i64().is_some_and(|n| n >= 1400),
                    "want server_version_num / 100 >= 1400",
                )
            }),
        );
        tool("grafana.timescaledb_version", rows_eq(json!([])));
        tool("grafana.tables", rows_eq(json!([["qa"], ["typed"]])));
        // Grafana's column query has no ORDER BY: compared as a set.
        let want = qa_columns.clone();
        tool(
            "grafana.columns",
            Box::new(move |v| {
                let mut got = v["rows"].as_array().cloned().unwrap_or_default();
                got.sort_by_key(|r| r.to_string());
                ensure(
                    got == want,
                    format!("want rows {} in any order", Value::Array(want.clone())),
                )
            }),
        );
        tool(
            "metabase.timezone",
            Box::new(|v| {
                ensure(
                    v["rows"][0][0].as_str().is_some_and(|s| !s.is_empty()),
                    "want a time zone name",
                )
            }),
        );
        tool(
            "metabase.tables",
            projected(
                &["schema", "name", "type"],
                json!([["public", "qa", "TABLE"], ["public", "typed", "VIEW"]]),
            ),
        );
        tool("metabase.enum_types", rows_eq(json!([])));
        let mut fields: Vec<Value> = QA_COLUMNS
            .iter()
            .enumerate()
            .map(|(i, c)| json!([c, "text", i, "qa"]))
            .collect();
        fields.extend(
            TYPED_COLUMNS
                .iter()
                .zip(TYPED_TYPES)
                .enumerate()
                .map(|(i, (c, t))| json!([c, t, i, "typed"])),
        );
        tool(
            "metabase.fields",
            projected(
                &["name", "database-type", "database-position", "table-name"],
                Value::Array(fields),
            ),
        );
        tool("metabase.fks", rows_eq(json!([])));
        tool(
            "superset.version",
            Box::new(|v| starts_with_postgresql(&v["rows"][0][0])),
        );
        tool("superset.current_schema", rows_eq(json!([["public"]])));
        tool(
            "superset.standard_conforming_strings",
            rows_eq(json!([["on"]])),
        );
        tool(
            "superset.isolation_level",
            rows_eq(json!([["read committed"]])),
        );
        tool(
            "superset.catalogs",
            Box::new(|v| {
                let names = column(v, "datname");
                ensure(
                    !names.is_empty() && names.iter().all(|n| n.is_string()),
                    "want database names",
                )
            }),
        );
        tool(
            "superset.backend_pid",
            Box::new(|v| {
                ensure(
                    v["rows"][0][0] == v["session_pid"],
                    format!("want the BackendKeyData pid {}", v["session_pid"]),
                )
            }),
        );
        tool(
            "superset.cancel_query",
            Box::new(|v| {
                ensure(
                    v["columns"] == json!(["pg_terminate_backend"]) && v["rows"] == json!([]),
                    "want no row",
                )
            }),
        );
        tool(
            "dbeaver.version",
            Box::new(|v| starts_with_postgresql(&v["rows"][0][0])),
        );
        tool(
            "dbeaver.databases",
            Box::new(|v| ensure(!column(v, "datname").is_empty(), "want a database")),
        );
        tool(
            "dbeaver.context_defaults",
            rows_eq(json!([["public", "alice"]])),
        );
        tool(
            "dbeaver.schemas",
            column_contains("nspname", &["information_schema", "pg_catalog", "public"]),
        );
        tool(
            "dbeaver.types",
            column_contains("typname", &["bool", "int8", "text", "_text", "record"]),
        );
        tool(
            "dbeaver.tables",
            Box::new(|v| {
                let mut names: Vec<&Value> = column(v, "relname");
                names.sort_by_key(|n| n.to_string());
                ensure(
                    names == [&json!("qa"), &json!("typed")],
                    "want relations qa and typed",
                )
            }),
        );
        let mut want: Vec<Value> = QA_COLUMNS.iter().map(|c| json!(["qa", c])).collect();
        want.extend(TYPED_COLUMNS.iter().map(|c| json!(["typed", c])));
        tool(
            "dbeaver.columns",
            Box::new(move |v| {
                // Rows of user columns (attnum > 0), per relation in attnum order.
                let rows = project(v, &["relname", "attname", "attnum"]);
                let mut user: Vec<&Value> = rows
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| r[2].as_i64().is_some_and(|n| n > 0))
                    .collect();
                user.sort_by_key(|r| (r[0].to_string(), r[2].as_i64()));
                let got: Vec<Value> = user.iter().map(|r| json!([r[0], r[1]])).collect();
                ensure(
                    got == want,
                    format!("want (relname, attname) {}", Value::Array(want.clone())),
                )
            }),
        );
    }
    add(
        "tools",
        "npgsql.batch.simple",
        Box::new(|v| {
            let sets = v.as_array().cloned().unwrap_or_default();
            ensure(sets.len() == 4, "want four result sets")?;
            starts_with_postgresql(&sets[0]["rows"][0][0])?;
            ensure(
                column(&sets[1], "typname").contains(&&json!("text")),
                "want the types, text among them",
            )
        }),
    );
}

/// The outcome of a run: a table of every check, and what makes the test fail.
pub(super) struct Report {
    pub(super) table: String,
    pub(super) problems: Vec<String>,
}

pub(super) fn judge(
    expectations: &[Expectation],
    checks: &BTreeMap<String, Value>,
    ran: &[&str],
    known: &[(&str, &str)],
) -> Report {
    let mut table = String::new();
    let mut problems = Vec::new();
    for (name, _) in known {
        if !expectations.iter().any(|e| e.name == *name) {
            problems.push(format!("KNOWN_FAILING names no check: {name}"));
        }
    }
    for name in checks.keys() {
        if !expectations.iter().any(|e| &e.name == name) {
            problems.push(format!(
                "{name}: reported, but no expectation for it in expect.rs"
            ));
        }
    }
    for e in expectations.iter().filter(|e| ran.contains(&e.probe)) {
        let outcome = match checks.get(&e.name) {
            None => Err("not reported by its probe".to_string()),
            Some(r) if r["ok"] == true => (e.check)(&r["value"]).map_err(|why| {
                let got = r["value"].to_string();
                let got: String = got.chars().take(600).collect();
                format!("value {got}: {why}")
            }),
            Some(r) => Err(format!("error {}", r["error"].as_str().unwrap_or_default())),
        };
        let listed = known.iter().find(|(n, _)| *n == e.name);
        let status = match (&outcome, listed) {
            (Ok(()), None) => "pass",
            (Ok(()), Some(_)) => {
                problems.push(format!("{} passes: remove it from KNOWN_FAILING", e.name));
                "PASS (listed as known-failing)"
            }
            (Err(_), Some(_)) => "known-failing",
            (Err(why), None) => {
                problems.push(format!("{}: {why}", e.name));
                "FAIL"
            }
        };
        let detail = outcome.err().unwrap_or_default();
        table.push_str(&format!("{status:<16} {:<44} {detail}\n", e.name));
    }
    Report { table, problems }
}
