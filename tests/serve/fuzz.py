"""Hostile statements against `evalsql serve`, from a seeded generator, through psycopg 3.

Usage: fuzz.py --count N [--seed S] [--stub-port P] [--root DIR] [--report-every K]
with the connection in PGHOST / PGPORT / PGUSER / PGPASSWORD. Prints one JSON summary on
stdout. tests/serve.rs runs 10,000 statements; benches/fuzz_serve.sh runs a million.

The statements: deep and long expressions, every statement kind (writes, DDL, COPY,
SELECT ... INTO, functions), dialect and setting switches, quoting tricks that hide a call
from one reader of the text, huge literals and repeat counts, nested subqueries, statements written as query builders
write them (quotes around parentheses, subqueries across lines, aggregates over range()), table
functions with odd paths, calls that would reach the loopback stub, and random mutations
of ordinary queries. Half go through the simple protocol, half through the extended one.

What counts as a failure (listed in the summary's "unexpected"): a connection lost after a
statement that should only have been refused, and a statement that succeeded although it
must be refused. The caller checks the rest: the server still runs, nothing was written
under the data roots, the stub received nothing.
"""

import argparse
import json
import random
import sys
import threading
import time

import psycopg

KELVIN = "\u212a"


def connect():
    return psycopg.connect(dbname="fuzz", connect_timeout=20, autocommit=True)


class Generator:
    def __init__(self, rng, stub_port, root):
        self.rng = rng
        self.stub = f"http://127.0.0.1:{stub_port}"
        self.root = root
        self.n = 0

    def pick(self, *options):
        return self.rng.choice(options)

    # Each returns (sql, must_fail, closes): must_fail marks statements the server must
    # refuse; closes marks statements after which the server closes the connection.

    def deep(self):
        op = self.pick("+1", " * 1", " OR true", " AND true", " || 'a'", " - 1", "::int")
        # The server's default --max-expression-depth is 1,000 (each operator one level).
        n = self.pick(10, 100, 200, 1001, 5000, 20000)
        start = "true" if "true" in op else ("'a'" if "'" in op else "1")
        return f"SELECT {start}{op * n}", n > 1000, False

    def nested(self):
        # The server's default --max-nesting is 16 (parentheses).
        n = self.pick(3, 8, 17, 40, 51, 200, 3000)
        kind = self.pick("paren", "subquery", "case", "call", "not")
        if kind == "paren":
            sql = "SELECT " + "(" * n + "1" + ")" * n
        elif kind == "subquery":
            sql = "SELECT " + "(SELECT " * n + "1" + ")" * n
        elif kind == "case":
            sql = "SELECT " + "CASE WHEN true THEN " * n + "1" + " END" * n
        elif kind == "call":
            sql = "SELECT " + "abs(" * n + "1" + ")" * n
        else:
            sql = "SELECT " + "NOT " * n + "true"
        return sql, n > 16 and kind in ("paren", "subquery", "call"), False

    def long(self):
        n = self.pick(10, 1000, 100_000, 900_000, 1_100_000)
        return f"SELECT length('{'x' * n}')", n > 1_048_000, False

    def oversized_message(self):
        # Over --max-message-bytes: the server answers FATAL and closes.
        return "SELECT '" + "y" * (17 * 1024 * 1024) + "'", True, True

    def sizes(self):
        # tests/serve.rs starts the server with --max-function-bytes 4000000.
        n = self.pick("10", "100000", "1000000", "2147483647", "1000000000000", "-1", "NULL")
        fn = self.pick(
            f"repeat('ab', {n})",
            f"lpad('', {n})",
            f"rpad('x', {n}, 'yz')",
            f"array_repeat(1, {n})",
            f"array_repeat('abc', {n})",
            f"range({n})",
            f"range(1, {n}, 1)",
            f"generate_series(1, {n})",
            f"array_resize([1], {n})",
            f"replace(repeat('a', 300000), 'a', repeat('b', {n}))",
            f"replace(repeat('a', 1000), '', repeat('b', {n}))",
            "range(TIMESTAMP '1970-01-01', TIMESTAMP '2200-01-01', INTERVAL '1 nanosecond')",
        )
        wrap = self.pick("length({})", "cardinality({})", "{} IS NULL", "{}")
        return f"SELECT {wrap.format(fn)}", False, False

    def settings(self):
        name = self.pick(
            "datafusion.sql_parser.dialect",
            '"datafusion.sql_parser.dialect"',
            "DATAFUSION.SQL_PARSER.DIALECT",
            "datafusion.sql_parser.\"dialect\"",
            "evalsql.judge.base_url",
            f"evalsql.judge.to{KELVIN}ens_per_minute",
            f"evalsql.judge.{KELVIN}ey",
            "evalsql.judge.cache",
            "evalsql.target.allowed_urls",
            "datafusion.runtime.memory_limit",
            "datafusion.catalog.location",
            "datafusion.execution.batch_size",
            "datafusion.execution.target_partitions",
        )
        value = self.pick("'MySQL'", "'http://127.0.0.1:9/v1'", "99999999", "'/tmp/x'", "0")
        if name.endswith(("batch_size", "target_partitions")):
            must_fail = value not in ("0",) or True
        else:
            must_fail = True
        form = self.pick("SET {} = {}", "SET {} TO {}", "RESET {}", "SET SESSION {} = {}")
        sql = form.format(name, value) if "{} =" in form or "TO" in form else form.format(name)
        if name.endswith("batch_size") and value == "0":
            must_fail = True
        return sql, must_fail, False

    def tricks(self):
        stub = self.stub
        return self.pick(
            ("SELECT 'a\\' AS p, ', generate(concat(chr(72),chr(73))) AS g # ' AS q", False, False),
            ("SELECT E'a\\', generate(''x'')' AS q", False, False),
            ("SELECT $$ generate('x') $$ AS q", False, False),
            ("SELECT 1 -- generate('x')", False, False),
            ("/* generate('x') */ SELECT 1", False, False),
            ("SELECT /* /* nested */ generate('x') */ 1", False, False),
            ("SELECT generate('x')", True, False),
            ("SELECT GENERATE('x')", True, False),
            ('SELECT "generate"(\'x\')', True, False),
            ("SELECT (SELECT generate('x'))", True, False),
            ("SELECT 1 WHERE generate('x') IS NOT NULL", True, False),
            ("WITH g AS (SELECT generate('x') AS r) SELECT * FROM g", True, False),
            ("EXPLAIN ANALYZE SELECT generate('x')", True, False),
            ("EXPLAIN SELECT generate('x')", True, False),
            (f"SELECT invoke_app('{stub}/agent', '{{}}')", True, False),
            (f"SELECT invoke_app('{stub}/agent/..%2fadmin', '{{}}')", True, False),
            ("SELECT generate_details('x')", True, False),
        )

    def writes(self):
        self.n += 1
        n, root = self.n, self.root
        return self.pick(
            (f"SELECT 1 AS x INTO t{n}", True, False),
            (f"SELECT 1 AS x INTO \"{root}/into{n}.csv\"", True, False),
            (f"CREATE TABLE t{n} AS SELECT 1", True, False),
            (f"CREATE VIEW v{n} AS SELECT 1", True, False),
            (f"INSERT INTO qa VALUES (1)", True, False),
            (f"COPY (SELECT 1) TO '{root}/copy{n}.csv'", True, False),
            (f"COPY qa TO '{root}/copy{n}.parquet'", True, False),
            ("DROP TABLE qa", True, False),
            ("DROP VIEW IF EXISTS qa", True, False),
            (f"CREATE EXTERNAL TABLE e{n} STORED AS CSV LOCATION '{root}/e{n}.csv'", True, False),
            (f"EXPLAIN ANALYZE CREATE TABLE t{n} AS SELECT 1", True, False),
            (f"WITH w AS (INSERT INTO qa VALUES (1) RETURNING *) SELECT * FROM w", True, False),
            (
                f"CREATE FUNCTION f{n}(a TEXT) RETURNS DOUBLE LANGUAGE judge AS 'Rate {{a}}.'",
                True,
                False,
            ),
            (f"PREPARE p{n} AS INSERT INTO qa VALUES (1)", True, False),
            ("TRUNCATE qa", True, False),
            ("DELETE FROM qa", True, False),
            ("UPDATE qa SET id = 1", True, False),
            ("CREATE SCHEMA s", True, False),
            ("ALTER TABLE qa RENAME TO q2", True, False),
        )

    def reads(self):
        self.n += 1
        n, stub = self.n, self.stub
        return self.pick(
            ("SELECT * FROM '/etc/passwd'", True, False),
            ("SELECT * FROM '../Cargo.toml'", True, False),
            ("SELECT * FROM 'file:///etc/hostname'", True, False),
            (f"SELECT * FROM '{stub}/x.csv'", True, False),
            (f"SELECT * FROM judge_cache('/tmp/evalsql-fuzz-{n}.sqlite')", True, False),
            ("SELECT * FROM judge_cache('../x.sqlite')", True, False),
            (f"SELECT * FROM judge_cache('missing-{n}.sqlite')", True, False),
            ("SELECT * FROM judge_cache('file:x.sqlite?mode=rwc')", True, False),
            ("SELECT * FROM read_otlp('/etc')", True, False),
            ("SELECT * FROM read_otlp('../')", True, False),
        )

    def benign(self):
        return self.pick(
            ("SELECT f1_score('a b c', 'a b d')", False, False),
            ("SELECT count(*) FROM qa", False, False),
            ("SELECT model, avg(rouge_l(response, ground_truth)) FROM qa GROUP BY model", False, False),
            ("SELECT bleu(response, ground_truth) FROM qa LIMIT 3", False, False),
            ("SHOW ALL", False, False),
            ("SELECT * FROM information_schema.df_settings LIMIT 5", False, False),
            ("SELECT nspname FROM pg_catalog.pg_namespace", False, False),
            ("SELECT relname FROM pg_catalog.pg_class LIMIT 5", False, False),
            ("SELECT * FROM pg_roles", False, False),
            ("SET datafusion.execution.batch_size = 1024", False, False),
            ("SET evalsql.judge.max_retries = 0", False, False),
            ("BEGIN", False, False),
            ("COMMIT", False, False),
            ("SELECT sum(value) FROM generate_series(1, 1000)", False, False),
            ("DECLARE c CURSOR FOR SELECT 1", False, False),
        )

    def shapes(self):
        # Statements as query builders write them: literals whose quotes surround
        # parentheses, subquery items across lines and comments, aggregates over range().
        quote = self.pick("'a'' || ''(b'", "E'\\'(((('", "'))''(('", "$$ (( $$", "'--('")
        gap = self.pick("\n ", "\t", "\r\n", "/* c */", "-- c\n", "  ", "\x0c")
        n = self.pick(3, 17, 30)
        nest = "abs(" * n + "1" + ")" * n
        return self.pick(
            (f"SELECT {quote} AS q, ({gap}SELECT count(*) FROM qa q2 WHERE q2.model = q.model) "
             "AS n FROM qa q LIMIT 3", False, False),
            (f"SELECT ({gap}SELECT model FROM qa)", True, False),
            (f"SELECT {quote} AS q, '{nest.replace(chr(39), chr(39) * 2)}' AS s", False, False),
            (f"SELECT {quote}, {nest}", n > 16, False),
            (f"SELECT cardinality(array_agg(x)) FROM (SELECT range(1, {self.pick(10, 1000, 100000)}) x "
             f"FROM generate_series(1, {self.pick(10, 100, 1000)})) z", False, False),
            (f"SELECT string_agg(repeat('z', 100), ',') OVER (ORDER BY value ROWS BETWEEN "
             f"UNBOUNDED PRECEDING AND CURRENT ROW) FROM generate_series(1, {self.pick(10, 1000)}) "
             "LIMIT 1", False, False),
        )

    def mutated(self):
        sql, _, _ = self.benign()
        chars = list(sql)
        for _ in range(self.rng.randint(1, 4)):
            i = self.rng.randrange(len(chars) + 1)
            chars.insert(
                i,
                self.pick("'", '"', "(", ")", ";", "\\", "$$", "--", "/*", "\x00", " INTO x ", KELVIN),
            )
        sql = "".join(chars)
        # A NUL ends the statement's C string early: the rest of the message no longer parses,
        # and the server closes the connection with a protocol violation, as PostgreSQL does.
        return sql, False, "\x00" in sql

    def statement(self):
        kind = self.rng.choices(
            ["deep", "nested", "long", "oversized_message", "sizes", "settings", "tricks",
             "writes", "reads", "benign", "mutated", "shapes"],
            weights=[6, 8, 4, 0.02, 12, 12, 14, 16, 12, 10, 12, 10],
        )[0]
        sql, must_fail, closes = getattr(self, kind)()
        return kind, sql, must_fail, closes


def run(cursor, sql, simple):
    if simple:
        cursor.execute(sql)
    else:
        cursor.execute(sql, prepare=False)
    if cursor.description is not None:
        cursor.fetchall()


def fuzz(worker, count, args, stats, unexpected, slowest, lock, started):
    """One connection's share: `count` statements from the worker's own seeded stream."""
    rng = random.Random(args.seed * 1000 + worker)
    gen = Generator(rng, args.stub_port, args.root)
    gen.n = worker * 10_000_000  # distinct table and file names per worker
    conn = connect()
    for i in range(count):
        kind, sql, must_fail, closes = gen.statement()
        simple = rng.random() < 0.5
        began = time.monotonic()
        outcome, problem = "ok", None
        try:
            cursor = psycopg.ClientCursor(conn) if simple else conn.cursor()
            with cursor:
                run(cursor, sql, simple)
            if must_fail:
                problem = "succeeded"
        except psycopg.Error as e:
            outcome = "errors"
            if conn.closed or conn.broken:
                if closes:
                    outcome = "closed_as_expected"
                else:
                    problem = f"connection lost: {e}"
                conn = connect()
        except Exception:  # a client-side refusal (e.g. a NUL byte psycopg will not send)
            outcome = "errors"
            if conn.closed or conn.broken:
                conn = connect()
        took = time.monotonic() - began
        with lock:
            stats["statements"] += 1
            stats[outcome] += 1
            stats["kinds"][kind] = stats["kinds"].get(kind, 0) + 1
            if problem:
                unexpected.append({"what": problem[:300], "kind": kind, "sql": sql[:300]})
            slowest.append((round(took, 2), kind, sql[:120]))
            slowest.sort(reverse=True)
            del slowest[10:]
            done = stats["statements"]
        if args.report_every and done % args.report_every == 0:
            rate = done / (time.monotonic() - started)
            print(f"{done} statements, {rate:.0f}/s, {len(unexpected)} unexpected",
                  file=sys.stderr)
    conn.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--stub-port", type=int, default=9)
    parser.add_argument("--root", default=".")
    parser.add_argument("--report-every", type=int, default=0)
    # Concurrent connections, each with its own seeded stream (the server serves them at once).
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    stats = {"statements": 0, "ok": 0, "errors": 0, "closed_as_expected": 0, "kinds": {}}
    unexpected, slowest, lock = [], [], threading.Lock()
    started = time.monotonic()
    shares = [args.count // args.workers + (w < args.count % args.workers)
              for w in range(args.workers)]
    threads = [
        threading.Thread(target=fuzz, args=(w, n, args, stats, unexpected, slowest, lock, started))
        for w, n in enumerate(shares)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Still serving: one more ordinary query on a new connection.
    with connect() as check:
        alive = check.execute("SELECT 1 + 1").fetchone()[0] == 2
    stats["elapsed_s"] = round(time.monotonic() - started, 1)
    stats["alive"] = alive
    stats["slowest"] = slowest
    stats["unexpected"] = unexpected[:50]
    stats["unexpected_count"] = len(unexpected)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
