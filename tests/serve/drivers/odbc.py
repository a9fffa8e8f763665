"""psqlODBC (Debian's odbc-postgresql, through unixODBC and pyodbc) against `evalsql serve`,
driven by tests/serve_drivers.rs.

Usage: odbc.py PHASE, with the driver (psqlodbcw.so) in EVALSQL_PSQLODBC and the connection in
PGHOST / PGPORT / PGUSER / PGPASSWORD.
PHASE "main": connect, catalog calls (SQLTables, SQLColumns), queries, types; "cancel":
SQLCancel (pyodbc's cursor.cancel) from another thread on a long query.
"""

import os
import sys
import threading
import time

import pyodbc

from common import LONG_QUERY, QUERY, check, print_out, reraise, timed, watchdog


def connect(driver):
    return pyodbc.connect(
        f"Driver={driver};Server={os.environ['PGHOST']};Port={os.environ['PGPORT']};"
        f"Database=evals;Uid={os.environ['PGUSER']};Pwd={os.environ['PGPASSWORD']};",
        autocommit=True,
        timeout=20,
    )


def rows(conn, sql, *params):
    cur = conn.cursor()
    cur.execute(sql, *params)
    return [list(r) for r in cur.fetchall()]


def main_phase(conn):
    check(
        "odbc.connect",
        lambda: [conn.getinfo(pyodbc.SQL_DBMS_NAME), conn.getinfo(pyodbc.SQL_DBMS_VER)[:3]],
    )
    check(
        "odbc.schemas",
        lambda: sorted(
            {r.table_schem for r in conn.cursor().tables(catalog="", schema="%", table="", tableType="")}
        ),
    )
    check(
        "odbc.tables",
        lambda: sorted([r.table_name, r.table_type] for r in conn.cursor().tables(schema="public")),
    )
    for table in ("qa", "typed"):
        check(
            f"odbc.columns.{table}",
            lambda: [
                [r.column_name, r.type_name]
                for r in conn.cursor().columns(table=table, schema="public")
            ],
        )
    check("odbc.query", lambda: rows(conn, QUERY))

    def prepared():
        cur = conn.cursor()
        counts = []
        for model in ("gpt-4o", "no such model", "gpt-4o"):
            cur.execute("SELECT count(*) FROM qa WHERE model = ?", model)
            counts.append(cur.fetchone()[0])
        return counts

    check("odbc.prepared", prepared)
    check(
        "odbc.types",
        lambda: rows(
            conn, "SELECT id, judge, tags, metrics, at, amount, ok, note FROM typed ORDER BY id"
        ),
    )

    def recovery():
        try:
            rows(conn, "SELECT * FROM no_such_table")
            state = None
        except pyodbc.Error as e:
            state = e.args[0]
        return [state, rows(conn, "SELECT 1 AS one")[0]]

    check("odbc.error_recovery", recovery)


def cancel_phase(conn):
    def cancelled():
        cur = conn.cursor()
        stop = watchdog("odbc.cancel")
        threading.Thread(target=lambda: (time.sleep(1), cur.cancel()), daemon=True).start()

        def run():
            try:
                cur.execute(LONG_QUERY)
                cur.fetchall()
            except pyodbc.Error as e:
                e.sqlstate = e.args[0]
                raise

        state, seconds = timed(run)
        stop()
        return {"sqlstate": state, "seconds": seconds, "then_select_1": rows(conn, "SELECT 1")[0]}

    check("odbc.cancel", cancelled)


def main():
    phase, driver = sys.argv[1], os.environ["EVALSQL_PSQLODBC"]
    try:
        conn = connect(driver)
    except pyodbc.Error as e:
        check("odbc.connect", lambda: reraise(e))
        print_out()
        return
    main_phase(conn) if phase == "main" else cancel_phase(conn)
    conn.close()
    print_out()


if __name__ == "__main__":
    main()
