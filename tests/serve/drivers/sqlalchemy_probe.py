"""SQLAlchemy 2 (what Superset connects through) with psycopg2 and with psycopg 3, pandas.read_sql,
and both drivers' own reading of lists and records, against `evalsql serve`; driven by
tests/serve_drivers.rs.

Usage: sqlalchemy_probe.py, with the connection in PGHOST / PGPORT / PGUSER / PGPASSWORD.
"""

import os

import pandas
import psycopg
import psycopg2
import sqlalchemy
from sqlalchemy import inspect, text
from sqlalchemy.engine import URL

from common import QUERY, check, print_out

TYPED = "SELECT judge, tags, metrics FROM typed ORDER BY id"


def engine(driver):
    url = URL.create(
        f"postgresql+{driver}",
        username=os.environ["PGUSER"],
        password=os.environ["PGPASSWORD"],
        host=os.environ["PGHOST"],
        port=int(os.environ["PGPORT"]),
        database="evals",
    )
    return sqlalchemy.create_engine(url, connect_args={"connect_timeout": 20})


def probe(driver):
    eng = engine(driver)
    name = f"sqlalchemy.{driver}"

    def connect():
        # The dialect's initialize() runs on the first connection: version, schema, settings.
        with eng.connect() as conn:
            return [conn.scalar(text("SELECT 1")), list(eng.dialect.server_version_info)[:1]]

    check(f"{name}.connect", connect)
    check(f"{name}.schemas", lambda: inspect(eng).get_schema_names())
    check(f"{name}.tables", lambda: inspect(eng).get_table_names(schema="public"))
    check(f"{name}.views", lambda: inspect(eng).get_view_names(schema="public"))
    for table in ("qa", "typed"):
        check(
            f"{name}.columns.{table}",
            lambda: [
                [c["name"], str(c["type"]), c["nullable"]]
                for c in inspect(eng).get_columns(table, schema="public")
            ],
        )
    check(
        f"{name}.read_sql",
        lambda: pandas.read_sql(QUERY, eng).astype(object).values.tolist(),
    )
    check(
        f"{name}.read_sql_params",
        lambda: pandas.read_sql(
            text("SELECT count(*) AS n FROM qa WHERE model = :m"), eng, params={"m": "gpt-4o"}
        )["n"].tolist(),
    )
    eng.dispose()


def raw_rows(conn, sql):
    cur = conn.cursor()
    cur.execute(sql)
    rows = [list(r) for r in cur.fetchall()]
    cur.close()
    return rows


def connect_kwargs():
    return dict(
        host=os.environ["PGHOST"],
        port=os.environ["PGPORT"],
        user=os.environ["PGUSER"],
        password=os.environ["PGPASSWORD"],
        dbname="evals",
        connect_timeout=20,
    )


def main():
    probe("psycopg2")
    probe("psycopg")

    def psycopg2_types():
        conn = psycopg2.connect(**connect_kwargs())
        try:
            return raw_rows(conn, TYPED)
        finally:
            conn.close()

    def psycopg3_types(binary):
        # In binary, a record needs a registered composite type: only the list is read.
        with psycopg.connect(**connect_kwargs(), autocommit=True) as conn:
            with conn.cursor(binary=binary) as cur:
                cur.execute("SELECT tags FROM typed ORDER BY id" if binary else TYPED)
                return [list(r) for r in cur.fetchall()]

    check("psycopg2.types", psycopg2_types)
    check("psycopg.types.text", lambda: psycopg3_types(False))
    check("psycopg.types.binary", lambda: psycopg3_types(True))
    print_out()


if __name__ == "__main__":
    main()
