"""A PostgreSQL driver (psycopg 3) against `evalsql serve`, driven by tests/serve.rs.

Usage: client.py ACTION, with the connection in PGHOST / PGPORT / PGUSER / PGPASSWORD and
the action's input as JSON on stdin. Prints one JSON document on stdout.

- query:      {"sql": ..., "params": [...]?}  -> {"columns": [...], "rows": [[...], ...]}
              (with params: the extended protocol, server-side parameter binding)
- concurrent: {"clients": N, "sql": ...}      -> {"results": [rows of client 0, ...]}
              N connections at once, each running the query after all have connected.
- attempt:    as query, but a refused statement gives {"error": str}
- login:      {}                               -> {"ok": bool, "error": str?}
- describe:   {"sql": ...}                     -> {"columns": [...], "type_oids": [...]}
              the type OIDs of the result's RowDescription
"""

import json
import sys
import threading

import psycopg


def connect():
    # Any database name is accepted by the server.
    return psycopg.connect(dbname="evals", connect_timeout=20, autocommit=True)


def run(conn, sql, params=None):
    with conn.cursor() as cur:
        if params is None:
            cur.execute(sql, prepare=False)
        else:
            cur.execute(sql, params)
        columns = [d.name for d in cur.description]
        rows = [list(r) for r in cur.fetchall()]
    return columns, rows


def main():
    action = sys.argv[1]
    spec = json.load(sys.stdin)
    if action == "query":
        with connect() as conn:
            columns, rows = run(conn, spec["sql"], spec.get("params"))
        out = {"columns": columns, "rows": rows}
    elif action == "attempt":
        try:
            with connect() as conn:
                columns, rows = run(conn, spec["sql"], spec.get("params"))
            out = {"columns": columns, "rows": rows}
        except psycopg.Error as e:
            out = {"error": str(e)}
    elif action == "concurrent":
        n = spec["clients"]
        barrier = threading.Barrier(n)
        results = [None] * n
        errors = []

        def client(i):
            try:
                with connect() as conn:
                    barrier.wait(timeout=60)
                    # The same statement `queries` times on this connection: every answer
                    # must be the first one.
                    for q in range(spec.get("queries", 1)):
                        rows = run(conn, spec["sql"])[1]
                        if q == 0:
                            results[i] = rows
                        elif rows != results[i]:
                            errors.append(f"client {i}: query {q} answered {rows!r}")
            except Exception as e:  # reported, so the test shows what failed
                errors.append(f"client {i}: {e!r}")
                barrier.abort()

        threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out = {"results": results, "errors": errors}
    elif action == "login":
        try:
            with connect() as conn:
                run(conn, "SELECT 1")
            out = {"ok": True}
        except psycopg.OperationalError as e:
            out = {"ok": False, "error": str(e)}
    elif action == "describe":
        with connect() as conn, conn.cursor() as cur:
            cur.execute(spec["sql"], prepare=False)
            out = {
                "columns": [d.name for d in cur.description],
                "type_oids": [d.type_code for d in cur.description],
            }
    else:
        raise SystemExit(f"unknown action {action}")
    json.dump(out, sys.stdout, default=str)


if __name__ == "__main__":
    main()
