"""Stopping statements on `evalsql serve` the ways drivers do, driven by tests/serve_cancel.rs.

Usage: cancel.py ACTION, with the connection in PGHOST / PGPORT / PGUSER / PGPASSWORD and the
action's input as JSON on stdin. Prints one JSON document on stdout.

- cancel:   {"sql", "after"}  runs sql; after `after` s sends PostgreSQL's cancel request
            (psycopg's conn.cancel()) -> {"sqlstate", "error", "stopped_after"}
- timeout:  {"sql", "options"} connects with libpq `options` (e.g. "-c statement_timeout=1000")
            -> {"sqlstate", "error", "seconds"}
- backend:  {"sql", "after"}  runs sql on connection A; B reads pg_stat_activity and calls
            pg_cancel_backend(A's pid) -> {"sqlstate", "pids", "activity", "cancelled", ...}
- hold:     {"sql"}            runs sql and prints its pid first (the test kills this process)
- errors:   {"statements": [...]} -> {"codes": [sqlstate or null, ...]}
- login:    {}                 -> {"sqlstate", "message"}
"""

import json
import sys
import threading
import time

import psycopg


def connect(**kw):
    return psycopg.connect(dbname="evals", connect_timeout=20, autocommit=True, **kw)


def run_in_thread(conn, sql):
    """Runs sql on conn in a thread; returns (thread, outcome dict filled when it ends)."""
    outcome = {}

    def work():
        try:
            with conn.cursor() as cur:
                cur.execute(sql, prepare=False)
                outcome["rows"] = cur.fetchall()
        except psycopg.Error as e:
            outcome["sqlstate"] = e.sqlstate
            outcome["error"] = str(e).strip()
        outcome["ended"] = time.monotonic()

    thread = threading.Thread(target=work)
    thread.start()
    return thread, outcome


def main():
    action = sys.argv[1]
    spec = json.load(sys.stdin)
    out = {}
    if action == "cancel":
        with connect() as conn:
            thread, outcome = run_in_thread(conn, spec["sql"])
            time.sleep(spec["after"])
            sent = time.monotonic()
            conn.cancel()
            thread.join(timeout=60)
            out = {
                "sqlstate": outcome.get("sqlstate"),
                "error": outcome.get("error"),
                "stopped_after": outcome.get("ended", sent + 99) - sent,
            }
            # The connection is usable afterwards.
            out["after"] = conn.execute("SELECT 41 + 1").fetchone()[0]
    elif action == "timeout":
        with connect(options=spec["options"]) as conn:
            start = time.monotonic()
            try:
                conn.execute(spec["sql"], prepare=spec.get("prepare", False)).fetchall()
                out = {"sqlstate": None}
            except psycopg.Error as e:
                out = {"sqlstate": e.sqlstate, "error": str(e).strip()}
            out["seconds"] = time.monotonic() - start
    elif action == "backend":
        with connect() as a, connect() as b:
            pid_a = a.info.backend_pid
            out["pids"] = [pid_a, b.info.backend_pid]
            out["own_pid"] = a.execute("SELECT pg_backend_pid()").fetchone()[0]
            thread, outcome = run_in_thread(a, spec["sql"])
            time.sleep(spec["after"])
            out["activity"] = [
                list(r)
                for r in b.execute(
                    "SELECT pid, usename, state, query FROM pg_stat_activity ORDER BY pid"
                ).fetchall()
            ]
            sent = time.monotonic()
            out["cancelled"] = b.execute("SELECT pg_cancel_backend(%s)", [pid_a]).fetchone()[0]
            thread.join(timeout=60)
            out["sqlstate"] = outcome.get("sqlstate")
            out["stopped_after"] = outcome.get("ended", sent + 99) - sent
            out["unknown"] = b.execute("SELECT pg_cancel_backend(%s)", [2**31 - 1]).fetchone()[0]
    elif action == "hold":
        with connect() as conn:
            print(json.dumps({"pid": conn.info.backend_pid}), flush=True)
            conn.execute(spec["sql"], prepare=False).fetchall()
        return
    elif action == "activity":
        with connect() as conn:
            out["activity"] = [
                list(r)
                for r in conn.execute(
                    "SELECT pid, usename, state FROM pg_stat_activity ORDER BY pid"
                ).fetchall()
            ]
            out["pid"] = conn.info.backend_pid
    elif action == "errors":
        codes = []
        with connect() as conn:
            for sql in spec["statements"]:
                try:
                    conn.execute(sql, prepare=spec.get("prepare", False)).fetchall()
                    codes.append(None)
                except psycopg.Error as e:
                    codes.append(e.sqlstate)
        out = {"codes": codes}
    elif action == "login":
        try:
            connect().close()
            out = {"sqlstate": None}
        except psycopg.OperationalError as e:
            out = {"message": str(e).strip()}
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
