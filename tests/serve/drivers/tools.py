"""The connect-time and introspection SQL of BI tools (tests/serve/tools/*.sql), run verbatim
through psycopg 3 over both protocols, driven by tests/serve_drivers.rs.

Usage: tools.py TOOLS_DIR, with the connection in PGHOST / PGPORT / PGUSER / PGPASSWORD.
Prints one JSON object: "<tool>.<statement>.simple" / ".extended" -> {"ok": true, "value":
{"columns": [...], "rows": [...]}} or {"ok": false, "error": "SQLSTATE: message"}.

A file is a header of comments, then statements, each after a line "-- statement: NAME"
(optionally followed by "-- params: JSON", values for $1, $2, ...; a value {"sql": ...} is the
first field that query returns). A header line "-- batch:" asks for the statements to be sent
once more as one simple query, each followed by a newline, as the tool sends them
("<tool>.batch.simple": the result sets in order).

- simple:   the Query message; parameters become literals, quoted by psycopg.
- extended: Parse/Bind/Execute with the $n parameters bound by the server (psycopg's RawCursor,
            prepared).
"""

import json
import os
import re
import sys

import psycopg
from psycopg import sql as pgsql

MARK = "-- statement: "
PARAMS = "-- params: "


def parse(text):
    header, statements, current = [], [], None
    for line in text.split("\n"):
        if line.startswith(MARK):
            current = {"name": line[len(MARK):].strip(), "params": None, "lines": []}
            statements.append(current)
        elif current is None:
            header.append(line)
        elif line.startswith(PARAMS) and not current["lines"] and current["params"] is None:
            current["params"] = json.loads(line[len(PARAMS):])
        else:
            current["lines"].append(line)
    for s in statements:
        body = "\n".join(s["lines"])
        # The file adds one newline after each statement.
        s["sql"] = body[:-1] if body.endswith("\n") else body
    batch = any(line.startswith("-- batch:") for line in header)
    return statements, batch


def plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)


def result(cur):
    # The session's process id as the client knows it (BackendKeyData), beside the rows.
    out = {"columns": [], "rows": [], "session_pid": cur.connection.info.backend_pid}
    if cur.description is not None:
        out["columns"] = [d.name for d in cur.description]
        out["rows"] = [[plain(v) for v in row] for row in cur.fetchall()]
    return out


def error(e):
    state = getattr(getattr(e, "diag", None), "sqlstate", None)
    return {"ok": False, "error": f"{state}: {e}".strip()}


def connect():
    return psycopg.connect(dbname="evals", connect_timeout=20, autocommit=True)


def resolve(conn, params):
    values = []
    for p in params or []:
        if isinstance(p, dict):
            with conn.cursor() as cur:
                cur.execute(p["sql"])
                p = cur.fetchone()[0]
        values.append(p)
    return values


def inline(conn, text, values):
    def literal(m):
        return pgsql.Literal(values[int(m.group(1)) - 1]).as_string(conn)

    return re.sub(r"\$(\d+)", literal, text) if values else text


def run_simple(conn, statement):
    values = resolve(conn, statement["params"])
    with conn.cursor() as cur:
        cur.execute(inline(conn, statement["sql"], values).encode())
        return result(cur)


def run_extended(conn, statement):
    values = resolve(conn, statement["params"])
    with psycopg.RawCursor(conn) as cur:
        cur.execute(statement["sql"], values or None, prepare=True)
        return result(cur)


def run_batch(conn, statements):
    text = "".join(s["sql"] + "\n" for s in statements)
    sets = []
    with conn.cursor() as cur:
        cur.execute(text.encode())
        while True:
            sets.append(result(cur))
            if not cur.nextset():
                break
    return sets


def batch_on_new_connection(statements):
    with connect() as conn:
        return run_batch(conn, statements)


def check(out, name, fn):
    try:
        out[name] = {"ok": True, "value": fn()}
    except psycopg.Error as e:
        out[name] = error(e)
    except Exception as e:  # the probe reports, the test decides
        out[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}


def main():
    tools_dir = sys.argv[1]
    out = {}
    for file in sorted(os.listdir(tools_dir)):
        if not file.endswith(".sql"):
            continue
        tool = file[: -len(".sql")]
        with open(os.path.join(tools_dir, file), encoding="utf-8") as f:
            statements, batch = parse(f.read())
        for protocol, runner in (("simple", run_simple), ("extended", run_extended)):
            try:
                conn = connect()
            except psycopg.Error as e:
                for s in statements:
                    out[f"{tool}.{s['name']}.{protocol}"] = error(e)
                continue
            with conn:
                for s in statements:
                    check(out, f"{tool}.{s['name']}.{protocol}", lambda: runner(conn, s))
        if batch:
            check(out, f"{tool}.batch.simple", lambda: batch_on_new_connection(statements))
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
