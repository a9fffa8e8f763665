"""How `evalsql serve` looks to a PostgreSQL driver (psycopg 3 over libpq), driven by
tests/serve_pg_face.rs. Connection in PGHOST / PGPORT / PGUSER / PGPASSWORD; prints one
JSON document.

- face:       the startup parameters, libpq's reading of the version, and whether the
              version parsers of SQLAlchemy (postgresql dialect, `_get_server_version_info`)
              and asyncpg (`serverversion.py`) accept `version()` / `server_version`.
- set_config: {"attempts": [[name, value], ...]} each as `SELECT set_config(%s, %s, false)`
              with server-side bound parameters (the extended protocol) -> {"results":
              [{"value": ...} or {"error": ...}], "after": {name: current_setting(name)}}
- savepoints: psycopg's nested transactions (SAVEPOINT, RELEASE, ROLLBACK TO) with an
              error inside the inner block -> {"rows": ..., "status": ...}
- columns:    {"sql": ...} prepared (extended protocol) -> {"columns": [...], "rows": [...]}
"""

import json
import re
import sys

import psycopg

# sqlalchemy/dialects/postgresql/base.py, PGDialect._get_server_version_info
SQLALCHEMY = re.compile(
    r".*(?:PostgreSQL|EnterpriseDB) "
    r"(\d+)\.?(\d+)?(?:\.(\d+))?(?:\.\d+)?(?:devel|beta)?"
)
# asyncpg/serverversion.py
ASYNCPG = re.compile(
    r"(Postgre[^\s]*)?\s*"
    r"(?P<major>[0-9]+)\.?"
    r"((?P<minor>[0-9]+)\.?)?"
    r"(?P<micro>[0-9]+)?"
    r"(?P<releaselevel>[a-z]+)?"
    r"(?P<serial>[0-9]+)?"
)


def connect():
    return psycopg.connect(dbname="evals", connect_timeout=20, autocommit=True)


def face():
    with connect() as conn:
        names = [
            "server_version",
            "server_encoding",
            "client_encoding",
            "standard_conforming_strings",
            "integer_datetimes",
            "DateStyle",
            "TimeZone",
            "is_superuser",
            "default_transaction_read_only",
        ]
        params = {n: conn.info.parameter_status(n) for n in names}
        version = conn.execute("select pg_catalog.version()").fetchone()[0]
        grafana = conn.execute(
            "SELECT current_setting('server_version_num')::int/100 as version"
        ).fetchone()[0]
        libpq_version = conn.info.server_version
    sqlalchemy = SQLALCHEMY.match(version)
    asyncpg = ASYNCPG.search(params["server_version"] or "")
    return {
        "parameters": params,
        "libpq_server_version": libpq_version,
        "version": version,
        "sqlalchemy": [int(g) for g in sqlalchemy.groups() if g] if sqlalchemy else None,
        "asyncpg": [int(asyncpg.group("major")), int(asyncpg.group("minor"))]
        if asyncpg
        else None,
        "grafana": grafana,
    }


def set_config(spec):
    results = []
    with connect() as conn:
        for name, value in spec["attempts"]:
            try:
                row = conn.execute(
                    "SELECT set_config(%s, %s, false)", [name, value], prepare=True
                ).fetchone()
                results.append({"value": row[0]})
            except psycopg.Error as e:
                results.append({"error": str(e)})
        after = {}
        for name in spec.get("read", []):
            after[name] = conn.execute("SELECT current_setting(%s)", [name]).fetchone()[0]
    return {"results": results, "after": after}


def savepoints():
    conn = psycopg.connect(dbname="evals", connect_timeout=20)
    rows = []
    with conn:
        with conn.transaction():
            rows.append(conn.execute("SELECT 1").fetchone()[0])
            try:
                with conn.transaction():
                    conn.execute("SELECT * FROM no_such_table")
            except psycopg.Error as e:
                rows.append(type(e).__name__)
            with conn.transaction():
                rows.append(conn.execute("SELECT 2").fetchone()[0])
            rows.append(conn.execute("SELECT 3").fetchone()[0])
        status = conn.info.transaction_status.name
    # By hand: a failed block refuses SHOW until ROLLBACK TO makes it live again.
    with connect() as conn:
        conn.execute("BEGIN")
        conn.execute("SAVEPOINT a")
        try:
            conn.execute("SELECT * FROM no_such_table")
        except psycopg.Error:
            pass
        failed = conn.info.transaction_status.name
        try:
            conn.execute("SHOW TimeZone")
            refused = None
        except psycopg.Error as e:
            refused = e.sqlstate
        conn.execute("ROLLBACK TO SAVEPOINT a")
        resumed = [conn.info.transaction_status.name]
        resumed.append(conn.execute("SHOW TimeZone").fetchone()[0])
        conn.execute("COMMIT")
    return {
        "rows": rows,
        "status": status,
        "by_hand": {"failed": failed, "refused": refused, "resumed": resumed},
    }


def columns(spec):
    with connect() as conn:
        cur = conn.execute(spec["sql"], prepare=True)
        return {
            "columns": [d.name for d in cur.description],
            "rows": [list(r) for r in cur.fetchall()],
        }


def main():
    action = sys.argv[1]
    spec = json.load(sys.stdin)
    out = {
        "face": lambda: face(),
        "set_config": lambda: set_config(spec),
        "savepoints": lambda: savepoints(),
        "columns": lambda: columns(spec),
    }[action]()
    json.dump(out, sys.stdout, default=str)


if __name__ == "__main__":
    main()
