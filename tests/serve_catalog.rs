//! `evalsql serve`'s catalogs as PostgreSQL clients read them, through psql (the simple
//! protocol) and psycopg 3 (the extended one): the introspection SQL of pgJDBC, Npgsql,
//! SQLAlchemy and Metabase (field and index sync) run verbatim (`tests/serve/catalog/*.sql`, each naming its
//! source), `regproc` comparisons, `pg_attribute` against the type OIDs the wire sends, and
//! PostgreSQL's `information_schema`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::serve::{Server, psql, psycopg_python, run_psql, run_psycopg, start_server, temp_dir};

const USER: &str = "cat";
const PASSWORD: &str = "catalog pw";

/// A table and a view with the types evalsql returns: a judge-like struct, a list, a
/// timestamp with a time zone, a decimal, large and view strings, an integer, a boolean.
const INIT: &str = "CREATE EXTERNAL TABLE qa STORED AS JSON LOCATION 'data/qa.jsonl';\n\
    CREATE VIEW typed AS SELECT named_struct('score', 1.5, 'why', 'ok') AS judged, \
    make_array('a', 'b') AS tags, \
    arrow_cast(TIMESTAMP '2026-01-02 03:04:05', 'Timestamp(Microsecond, Some(\"UTC\"))') AS at, \
    CAST(1.25 AS DECIMAL(10, 2)) AS price, arrow_cast('x', 'LargeUtf8') AS big, \
    arrow_cast('y', 'Utf8View') AS view, CAST(1 AS BIGINT) AS n, true AS flag;\n";

/// The columns of `typed` and the type OIDs PostgreSQL clients must see for them.
const TYPED: &[(&str, i64, &str)] = &[
    ("judged", 2249, "record"),
    ("tags", 1009, "_text"),
    ("at", 1184, "timestamptz"),
    ("price", 1700, "numeric"),
    ("big", 25, "text"),
    ("view", 25, "text"),
    ("n", 20, "int8"),
    ("flag", 16, "bool"),
];

fn start(name: &str) -> (Server, PathBuf) {
    let dir = temp_dir(name);
    let init = dir.join("init.sql");
    std::fs::write(&init, INIT).unwrap();
    let server = start_server(
        &[("EVALSQL_PG_USER", USER), ("EVALSQL_PG_PASSWORD", PASSWORD)],
        &["--init", init.to_str().unwrap()],
    )
    .unwrap();
    (server, dir)
}

/// A driver's statement from `tests/serve/catalog/`.
fn driver_sql(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/serve/catalog")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// psql's rows of `sql` (fields split at '|'); the statement must succeed.
fn psql_rows(psql: &Path, port: u16, sql: &str) -> Vec<Vec<String>> {
    let (ok, out, err) = run_psql(psql, port, USER, PASSWORD, sql);
    assert!(ok, "psql: {err}\n{sql}");
    out.lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect()
}

/// psycopg's rows of `sql` with `params` (extended protocol).
fn psycopg_rows(python: &Path, port: u16, sql: &str, params: Value) -> Vec<Value> {
    let mut input = json!({ "sql": sql });
    if !params.is_null() {
        input["params"] = params;
    }
    let out = run_psycopg(python, port, USER, PASSWORD, "query", input);
    out["rows"].as_array().cloned().unwrap_or_default()
}

#[test]
fn regproc_columns_compare_as_function_oids() {
    let (server, dir) = start("catalog-regproc");
    if let Some(psql) = psql() {
        let rows = |sql: &str| psql_rows(&psql, server.port, sql);
        for (oid, is_array) in [(2249, "f"), (1009, "t")] {
            let sql = format!(
                "SELECT typinput = 'pg_catalog.array_in'::regproc FROM pg_catalog.pg_type \
                 WHERE oid = {oid}"
            );
            assert_eq!(rows(&sql), [[is_array]], "{sql}");
        }
        // The column still shows the name.
        assert_eq!(
            rows("SELECT typinput, typreceive FROM pg_catalog.pg_type WHERE oid = 2249"),
            [["record_in", "record_recv"]]
        );
        // A function's OID against a regproc column: Npgsql's join.
        assert_eq!(
            rows(
                "SELECT proc.proname FROM pg_catalog.pg_type AS typ \
                 JOIN pg_catalog.pg_proc AS proc ON proc.oid = typ.typreceive \
                 WHERE typ.oid = 1009"
            ),
            [["array_recv"]]
        );
        // pgJDBC's type query, simple protocol.
        let sql = driver_sql("pgjdbc_type_info.sql").replace("$1", "2249");
        assert_eq!(rows(&sql), [["f", "p", "record", "2249"]]);
    }
    if let Some(python) = psycopg_python() {
        // pgJDBC's type query as pgJDBC sends it: a parameter for the OID.
        let sql = driver_sql("pgjdbc_type_info.sql").replace("$1", "%s");
        for (oid, want) in [
            (2249, json!([false, "p", "record", 2249])),
            (1009, json!([true, "b", "_text", 1009])),
        ] {
            let rows = psycopg_rows(&python, server.port, &sql, json!([oid]));
            assert_eq!(rows, [want], "pgJDBC's type query for {oid}");
        }
        // Npgsql's type loading: arrays found through their typreceive, record and text[].
        let rows = psycopg_rows(
            &python,
            server.port,
            &driver_sql("npgsql_load_types.sql"),
            Value::Null,
        );
        for want in [
            json!(["pg_catalog", 25, "text", "b", false, null]),
            json!(["pg_catalog", 2249, "record", "p", false, null]),
            json!(["pg_catalog", 1009, "_text", "a", false, 25]),
            json!(["pg_catalog", 2287, "_record", "a", false, 2249]),
        ] {
            assert!(rows.contains(&want), "Npgsql's types lack {want}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn catalogs_agree_with_the_wire() {
    let (server, dir) = start("catalog-wire");
    if let Some(python) = psycopg_python() {
        let described = run_psycopg(
            &python,
            server.port,
            USER,
            PASSWORD,
            "describe",
            json!({ "sql": "SELECT * FROM typed" }),
        );
        let wire: Vec<i64> = described["type_oids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        let want: Vec<i64> = TYPED.iter().map(|(_, oid, _)| *oid).collect();
        assert_eq!(wire, want, "RowDescription of typed");
        let rows = psycopg_rows(
            &python,
            server.port,
            "SELECT a.attname, a.atttypid, t.typname, a.attndims \
             FROM pg_catalog.pg_attribute a \
             JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
             WHERE n.nspname = 'public' AND c.relname = 'typed' ORDER BY a.attnum",
            Value::Null,
        );
        let want: Vec<Value> = TYPED
            .iter()
            .map(|(name, oid, typname)| json!([name, oid, typname, i64::from(*name == "tags")]))
            .collect();
        assert_eq!(rows, want, "pg_attribute of typed");
    }
    if let Some(psql) = psql() {
        let rows = |sql: &str| psql_rows(&psql, server.port, sql);
        // int2vector and oid arrays are arrays.
        assert_eq!(
            rows(
                "SELECT table_name, column_name, data_type, udt_name \
                 FROM information_schema.columns \
                 WHERE table_schema = 'pg_catalog' AND column_name IN ('indkey', 'conkey', 'indclass') \
                 ORDER BY 1, 2"
            ),
            [
                ["pg_constraint", "conkey", "ARRAY", "_int2"],
                ["pg_index", "indclass", "ARRAY", "_int4"],
                ["pg_index", "indkey", "ARRAY", "_int2"],
            ]
        );
        // No index or constraint names a relation pg_class does not have.
        assert_eq!(
            rows(
                "SELECT count(*) FROM pg_catalog.pg_index i \
                 LEFT JOIN pg_catalog.pg_class c ON c.oid = i.indrelid WHERE c.oid IS NULL"
            ),
            [["0"]]
        );
        assert_eq!(
            rows(
                "SELECT count(*) FROM pg_catalog.pg_constraint k \
                 LEFT JOIN pg_catalog.pg_class c ON c.oid = k.conrelid \
                 WHERE k.conrelid <> 0 AND c.oid IS NULL"
            ),
            [["0"]]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn information_schema_is_postgresqls() {
    let (server, dir) = start("catalog-information-schema");
    let Some(psql) = psql() else { return };
    let rows = |sql: &str| psql_rows(&psql, server.port, sql);
    assert_eq!(
        rows(
            "SELECT column_name, ordinal_position, data_type, udt_name, is_nullable, \
             numeric_precision, numeric_scale, datetime_precision \
             FROM information_schema.columns \
             WHERE table_schema = 'public' AND table_name = 'typed' ORDER BY ordinal_position"
        ),
        [
            ["judged", "1", "record", "record", "YES", "", "", ""],
            ["tags", "2", "ARRAY", "_text", "YES", "", "", ""],
            [
                "at",
                "3",
                "timestamp with time zone",
                "timestamptz",
                "YES",
                "",
                "",
                "6"
            ],
            ["price", "4", "numeric", "numeric", "YES", "10", "2", ""],
            ["big", "5", "text", "text", "YES", "", "", ""],
            ["view", "6", "text", "text", "YES", "", "", ""],
            ["n", "7", "bigint", "int8", "YES", "64", "0", ""],
            ["flag", "8", "boolean", "bool", "YES", "", "", ""],
        ]
    );
    // PostgreSQL never marks a view's column NOT NULL, in either catalog: `n` and `flag`
    // are never NULL here, yet nullable as in PostgreSQL.
    assert_eq!(
        rows(
            "SELECT a.attname, a.attnotnull FROM pg_catalog.pg_attribute a \
             JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
             WHERE c.relname = 'typed' AND a.attnum > 6 ORDER BY a.attnum"
        ),
        [["n", "f"], ["flag", "f"]]
    );
    assert_eq!(
        rows(
            "SELECT column_name, data_type, udt_name, column_default, is_identity, is_updatable \
             FROM information_schema.columns \
             WHERE table_name = 'qa' AND column_name = 'query'"
        ),
        [["query", "text", "text", "", "NO", "YES"]]
    );
    // Metabase's field sync joins these; evalsql's tables have no constraints.
    for sql in [
        "SELECT constraint_catalog, constraint_schema, constraint_name, table_schema, \
         table_name, constraint_type, is_deferrable, initially_deferred \
         FROM information_schema.table_constraints",
        "SELECT constraint_name, table_schema, table_name, column_name, ordinal_position, \
         position_in_unique_constraint FROM information_schema.key_column_usage",
        "SELECT constraint_name, unique_constraint_name, match_option, update_rule, \
         delete_rule FROM information_schema.referential_constraints",
        "SELECT table_schema, table_name, column_name, constraint_name \
         FROM information_schema.constraint_column_usage",
    ] {
        assert!(rows(sql).is_empty(), "{sql}");
    }
    // DataFusion's own statements over information_schema still work on the server.
    assert_eq!(
        rows("SHOW COLUMNS FROM qa")
            .iter()
            .map(|r| (r[3].clone(), r[4].clone()))
            .collect::<Vec<_>>(),
        [
            "context",
            "ground_truth",
            "id",
            "model",
            "query",
            "response"
        ]
        .map(|c| (c.to_string(), "text".to_string()))
    );
    assert!(rows("SHOW TABLES").iter().any(|r| r[2] == "qa"));
    assert_eq!(
        rows("SELECT count(*) > 0 FROM information_schema.df_settings"),
        [["t"]]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn driver_introspection_runs_verbatim() {
    let (server, dir) = start("catalog-drivers");
    let Some(psql) = psql() else { return };
    let rows = |sql: &str| psql_rows(&psql, server.port, sql);
    // pgJDBC getColumns: name, type OID and typtype of each column.
    let columns: Vec<(String, String, String)> = rows(&driver_sql("pgjdbc_get_columns.sql"))
        .into_iter()
        .map(|r| (r[2].clone(), r[3].clone(), r[14].clone()))
        .collect();
    let want: Vec<(String, String, String)> = TYPED
        .iter()
        .map(|(name, oid, _)| {
            let typtype = if *oid == 2249 { "p" } else { "b" };
            (name.to_string(), oid.to_string(), typtype.to_string())
        })
        .collect();
    assert_eq!(columns, want, "pgJDBC getColumns");
    // pgJDBC getTypeInfo (a correlated subquery in its WHERE clause) lists the wire's types.
    let types = rows(&driver_sql("pgjdbc_get_type_info.sql"));
    for (_, oid, typname) in TYPED {
        let want = vec![typname.to_string(), oid.to_string()];
        assert!(types.contains(&want), "getTypeInfo lacks {typname}");
    }
    // pgJDBC's keys and indexes and Metabase's index sync: planned, and none (no table has
    // keys or indexes).
    for name in [
        "pgjdbc_get_primary_keys.sql",
        "pgjdbc_get_index_info.sql",
        "pgjdbc_get_imported_keys.sql",
        "metabase_describe_indexes.sql",
    ] {
        assert!(rows(&driver_sql(name)).is_empty(), "{name}");
    }
    // SQLAlchemy's column reflection, with its correlated scalar subqueries; `typed` is a
    // view, whose columns PostgreSQL never marks NOT NULL.
    let reflected: Vec<Vec<String>> = rows(&driver_sql("sqlalchemy_get_columns.sql"))
        .into_iter()
        .map(|r| r[..5].to_vec())
        .collect();
    let want = [
        ["judged", "record", "", "f", "typed"],
        ["tags", "text[]", "", "f", "typed"],
        ["at", "timestamp with time zone", "", "f", "typed"],
        ["price", "numeric", "", "f", "typed"],
        ["big", "text", "", "f", "typed"],
        ["view", "text", "", "f", "typed"],
        ["n", "bigint", "", "f", "typed"],
        ["flag", "boolean", "", "f", "typed"],
    ];
    assert_eq!(reflected, want, "SQLAlchemy get_columns");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn metabases_field_sync() {
    let (server, dir) = start("catalog-metabase");
    let Some(python) = psycopg_python() else {
        return;
    };
    // Bound as Metabase binds them (extended protocol): schema and table names. psycopg
    // writes parameters as %s, and a literal % as %%.
    let sql = (1..=4).fold(
        driver_sql("metabase_describe_fields.sql").replace('%', "%%"),
        |sql, n| sql.replace(&format!("${n}"), "%s"),
    );
    let rows = psycopg_rows(
        &python,
        server.port,
        &sql,
        json!(["public", "typed", "public", "typed"]),
    );
    let want: Vec<Value> = TYPED
        .iter()
        .enumerate()
        // `typed` is a view: PostgreSQL marks none of its columns NOT NULL, so Metabase
        // requires none.
        .map(|(i, (name, _, typname))| {
            json!([
                name, typname, i, "public", "typed", false, null, false, false
            ])
        })
        .collect();
    assert_eq!(rows, want, "Metabase's describe-fields");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn postgresql_expressions_of_catalog_queries() {
    let (server, dir) = start("catalog-expressions");
    let Some(psql) = psql() else { return };
    let rows = |sql: &str| psql_rows(&psql, server.port, sql);
    assert_eq!(
        rows("SELECT flag = 't', flag = 'f', flag <> 'false', 'yes' = flag FROM typed"),
        [["t", "f", "t", "t"]]
    );
    assert_eq!(
        rows(
            "SELECT 'a_b' LIKE 'a/_b' ESCAPE '/', 'axb' LIKE 'a/_b' ESCAPE '/', 'a%' LIKE 'a/%' ESCAPE '/'"
        ),
        [["t", "f", "t"]]
    );
    assert_eq!(
        rows(
            "SELECT (information_schema._pg_expandarray(ARRAY[30, 10, 20])).n, \
             (information_schema._pg_expandarray(ARRAY[30, 10, 20])).x"
        ),
        [["1", "30"], ["2", "10"], ["3", "20"]]
    );
    assert_eq!(
        rows(
            "SELECT pg_get_serial_sequence('qa', 'id') IS NULL, \
             pg_catalog.pg_get_indexdef(1) IS NULL, \
             json_build_object('a', 1, 'b', 'x', 'c', NULL, 'd', true)"
        ),
        [["t", "t", r#"{"a":1,"b":"x","c":null,"d":true}"#]]
    );
    // Names computed per row, cast to regclass, find their relations.
    assert_eq!(
        rows(
            "SELECT relname, CAST(CAST(format('%I.%I', 'public', relname) AS REGCLASS) AS OID) = oid, \
             to_regclass('public.' || relname) = oid, to_regclass('nope') IS NULL \
             FROM pg_catalog.pg_class WHERE relname IN ('qa', 'typed') ORDER BY relname"
        ),
        [["qa", "t", "t", "t"], ["typed", "t", "t", "t"]]
    );
    // A correlated scalar subquery over a unique key, in a WHERE clause.
    assert_eq!(
        rows(
            "SELECT t.typname FROM pg_catalog.pg_type t \
             WHERE (SELECT n.nspname FROM pg_catalog.pg_namespace n \
                    WHERE n.oid = t.typnamespace) = 'pg_catalog' AND t.oid IN (16, 2249) \
             ORDER BY t.oid"
        ),
        [["bool"], ["record"]]
    );
    // One that is not over a unique key stays refused.
    let (ok, _, err) = run_psql(
        &psql,
        server.port,
        USER,
        PASSWORD,
        "SELECT t.typname FROM pg_catalog.pg_type t WHERE (SELECT p.proname FROM \
         pg_catalog.pg_proc p WHERE p.prorettype = t.oid) = 'x'",
    );
    assert!(!ok && err.contains("must be aggregated"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// psycopg 3's type lookup (`TypeInfo.fetch`, which SQLAlchemy's psycopg dialect runs on
/// connect for `hstore`), SQLAlchemy's enum listing (`pg_type_is_visible`) and its schema
/// listing (a LIKE pattern computed from a parameter, with `ESCAPE '/'`), verbatim.
#[test]
fn type_lookups_and_computed_like_patterns() {
    let (server, dir) = start("catalog-type-lookups");
    let Some(python) = psycopg_python() else {
        return;
    };
    let rows = |sql: &str, params: Value| psycopg_rows(&python, server.port, sql, params);
    let info = "SELECT\n    typname AS name, oid, typarray AS array_oid,\n    \
                oid::regtype::text AS regtype, typdelim AS delimiter\nFROM pg_type t\n\
                WHERE t.oid = to_regtype(%(name)s)\nORDER BY t.oid\n";
    assert_eq!(rows(info, json!({"name": "hstore"})), Vec::<Value>::new());
    for name in ["int4", "integer", "pg_catalog.int4", " INTEGER "] {
        let found = rows(info, json!({ "name": name }));
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        assert_eq!(found[0][0], json!("int4"), "{name}");
        assert_eq!(found[0][1].to_string().trim_matches('"'), "23", "{name}");
    }
    assert_eq!(
        rows(
            "SELECT to_regtype('text[]'), to_regtype('character varying'), \
             to_regtype('nope.text'), to_regtype(NULL)",
            Value::Null
        ),
        [json!([1009, 1043, null, null])]
    );
    assert_eq!(
        rows(
            "SELECT pg_catalog.pg_type_is_visible(t.oid), pg_type_is_visible(424242) \
             FROM pg_catalog.pg_type t WHERE t.typname = 'bool'",
            Value::Null
        ),
        [json!([true, null])]
    );
    let schemas = rows(
        "SELECT pg_catalog.pg_namespace.nspname \nFROM pg_catalog.pg_namespace \n\
         WHERE (pg_catalog.pg_namespace.nspname NOT LIKE %(nspname_1)s || '%%' ESCAPE '/') \
         ORDER BY pg_catalog.pg_namespace.nspname",
        json!({"nspname_1": "pg/_"}),
    );
    assert!(schemas.contains(&json!(["public"])), "{schemas:?}");
    assert!(
        !schemas
            .iter()
            .any(|s| s[0].as_str().is_some_and(|s| s.starts_with("pg_"))),
        "{schemas:?}"
    );
    // The escape character's own meaning: `/_` a literal underscore, `_` any character.
    assert_eq!(
        rows(
            "SELECT 'pg_x' LIKE %(p)s || '%%' ESCAPE '/', 'pgax' LIKE %(p)s || '%%' ESCAPE '/', \
             'a\\b' LIKE 'a\\' || 'b' ESCAPE '/', like_escape('a/_b%%', '/')",
            json!({"p": "pg/_"})
        ),
        [json!([true, false, true, "a\\_b%"])]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// asyncpg's type introspection, verbatim: it asks for every type it has no codec for (a
/// list of records is `record[]`), through a recursive CTE whose domain walk is a correlated
/// recursive subquery, and decodes only `oid[]` and `text[]` among arrays on its own, so its
/// parameter and `array_agg(atttypid)` must be described as `oid[]`.
#[test]
fn asyncpg_type_introspection() {
    let (server, dir) = start("catalog-asyncpg");
    let sql = driver_sql("asyncpg_lookup_types.sql");
    // record[], and information_schema.cardinal_number, a domain over integer.
    // The domains' pg_type rows (from PostgreSQL) name information_schema's namespace by
    // PostgreSQL's OID, not the served one, so the inner join to pg_namespace would drop
    // them: a left join keeps the domain walk under test.
    let literal = sql
        .replace("$1::oid[]", "ARRAY[2287, 13297]::oid[]")
        .replace(
            "INNER JOIN pg_catalog.pg_namespace ns",
            "LEFT JOIN pg_catalog.pg_namespace ns",
        );
    assert_ne!(
        literal,
        sql.replace("$1::oid[]", "ARRAY[2287, 13297]::oid[]")
    );
    let want = [
        // oid, name, kind, basetype, elemtype, basetype_name, elemtype_name
        ["2249", "record", "p", "", "0", "", "-"],
        ["13297", "cardinal_number", "d", "23", "0", "integer", "-"],
        ["2287", "_record", "p", "", "2249", "", "record"],
        // Reached from the domain through its base type, as PostgreSQL's recursion does.
        ["23", "int4", "b", "", "0", "", "-"],
    ];
    if let Some(psql) = psql() {
        let mut rows: Vec<Vec<String>> = psql_rows(&psql, server.port, &literal)
            .into_iter()
            .map(|r| [0, 2, 3, 4, 5, 11, 12].map(|i| r[i].clone()).to_vec())
            .collect();
        rows.sort();
        let mut want: Vec<Vec<String>> = want
            .iter()
            .map(|r| r.iter().map(|s| s.to_string()).collect())
            .collect();
        want.sort();
        assert_eq!(rows, want);
    }
    if let Some(python) = psycopg_python() {
        let described = |sql: &str| {
            run_psycopg(
                &python,
                server.port,
                USER,
                PASSWORD,
                "describe",
                json!({ "sql": sql }),
            )["type_oids"]
                .clone()
        };
        let columns = described(&literal);
        // attrtypoids oid[] (1028), attrnames text[], the *_name columns text.
        assert_eq!(columns[8], json!(1028), "{columns}");
        assert_eq!(columns[9], json!(1009), "{columns}");
        assert_eq!(columns[12], json!(25), "{columns}");
        assert_eq!(
            described("SELECT array_agg(atttypid), array_agg(attnum) FROM pg_catalog.pg_attribute"),
            json!([1028, 1005])
        );
        let rows = psycopg_rows(
            &python,
            server.port,
            "SELECT typelem::regtype::text, oid::regtype::text, 0::regtype::text \
             FROM pg_catalog.pg_type WHERE typname = '_varchar'",
            Value::Null,
        );
        assert_eq!(
            rows,
            [json!(["character varying", "character varying[]", "-"])]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A scalar subquery written as a select item is answered, not turned into NULL (what
/// datafusion-pg-catalog's parser does to one that looks correlated or holds a parameter),
/// in both protocols; one returning several rows is an error, as in PostgreSQL; psql's
/// `\d`, whose subqueries DataFusion cannot decorrelate, still describes a table.
#[test]
fn subquery_select_items_are_answered() {
    let (server, dir) = start("catalog-select-subqueries");
    let per_model = "SELECT q.model, (SELECT count(*) FROM qa q2 WHERE q2.model = q.model) AS n \
                     FROM qa q GROUP BY q.model ORDER BY q.model";
    if let Some(psql) = psql() {
        let rows = psql_rows(&psql, server.port, per_model);
        assert!(!rows.is_empty());
        let total: i64 = rows.iter().map(|r| r[1].parse::<i64>().unwrap()).sum();
        assert_eq!(
            total.to_string(),
            psql_rows(&psql, server.port, "SELECT count(*) FROM qa")[0][0]
        );
        let (ok, _, err) = run_psql(
            &psql,
            server.port,
            USER,
            PASSWORD,
            "SELECT (SELECT model FROM qa) AS m",
        );
        assert!(!ok && err.contains("more than one row"), "{err}");
        let (ok, out, err) = run_psql(&psql, server.port, USER, PASSWORD, "\\d qa");
        assert!(ok && out.contains("ground_truth"), "{out}{err}");
    }
    if let Some(python) = psycopg_python() {
        let rows = psycopg_rows(
            &python,
            server.port,
            "SELECT (SELECT count(*) FROM qa WHERE model = %(m)s) AS n",
            json!({"m": "gpt-4o"}),
        );
        let n = rows[0][0].as_i64().unwrap();
        assert!(n > 0, "{rows:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
