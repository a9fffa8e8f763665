"""asyncpg against `evalsql serve`, driven by tests/serve_drivers.rs.

Usage: asyncpg_probe.py PHASE, with the connection in PGHOST / PGPORT / PGUSER / PGPASSWORD.
PHASE "main": connect, fetch, lists and records, a prepared statement; "cancel": `timeout=`
on a long query (asyncpg sends a cancel request when it expires), then whether the
connection answers at once.
"""

import asyncio
import os
import sys
import time

import asyncpg

from common import LONG_QUERY, QUERY, out, plain, print_out, sqlstate, watchdog


async def connect():
    return await asyncpg.connect(
        host=os.environ["PGHOST"],
        port=int(os.environ["PGPORT"]),
        user=os.environ["PGUSER"],
        password=os.environ["PGPASSWORD"],
        database="evals",
        timeout=20,
    )


async def check(name, coro):
    try:
        out[name] = {"ok": True, "value": plain(await coro)}
    except Exception as e:  # the probe reports, the test decides
        state = sqlstate(e)
        prefix = f"{state}: " if state else f"{type(e).__name__}: "
        out[name] = {"ok": False, "error": prefix + str(e).strip()}


def records(rows):
    """asyncpg Records (a row, or a composite value) as lists, recursively."""
    if isinstance(rows, asyncpg.Record):
        return [records(v) for v in rows.values()]
    if isinstance(rows, (list, tuple)):
        return [records(v) for v in rows]
    return rows


async def main_phase(conn):
    async def fetch(sql, *args):
        return records(await conn.fetch(sql, *args))

    await check("asyncpg.connect", conn.fetchval("SELECT 1"))
    await check("asyncpg.query", fetch(QUERY))

    async def prepared():
        stmt = await conn.prepare("SELECT count(*) FROM qa WHERE model = $1")
        return [await stmt.fetchval(m) for m in ("gpt-4o", "no such model", "gpt-4o")]

    await check("asyncpg.prepared", prepared())
    await check("asyncpg.struct", fetch("SELECT judge FROM typed ORDER BY id"))
    await check("asyncpg.list", fetch("SELECT tags FROM typed ORDER BY id"))
    await check("asyncpg.list_of_structs", fetch("SELECT metrics FROM typed ORDER BY id"))
    await check("asyncpg.types", fetch("SELECT id, at, amount, ok, note FROM typed ORDER BY id"))

    async def recovery():
        try:
            await conn.fetch("SELECT * FROM no_such_table")
            state = None
        except asyncpg.PostgresError as e:
            state = e.sqlstate
        return [state, await conn.fetchval("SELECT 1")]

    await check("asyncpg.error_recovery", recovery())


async def cancel_phase(conn):
    async def timeout():
        stop = watchdog("asyncpg.timeout")
        start = time.monotonic()
        try:
            await conn.fetchval(LONG_QUERY, timeout=1)
            ended = "completed"
        except asyncio.TimeoutError:
            ended = "TimeoutError"
        except asyncpg.PostgresError as e:
            ended = e.sqlstate
        seconds = round(time.monotonic() - start, 3)
        # The cancel request went out when the timeout expired: the server's next answer
        # comes at once if the statement stopped, only at its end if it did not.
        start = time.monotonic()
        one = await conn.fetchval("SELECT 1")
        then = round(time.monotonic() - start, 3)
        stop()
        return {"ended": ended, "seconds": seconds, "then_select_1": one, "select_1_seconds": then}

    await check("asyncpg.timeout", timeout())


async def main():
    phase = sys.argv[1]
    try:
        conn = await connect()
    except Exception as e:
        await check("asyncpg.connect", _raise(e))
        print_out()
        return
    await (main_phase(conn) if phase == "main" else cancel_phase(conn))
    await conn.close()
    print_out()


async def _raise(e):
    raise e


if __name__ == "__main__":
    asyncio.run(main())
