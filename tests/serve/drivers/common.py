"""What the Python probes of tests/serve/drivers/ share: the checks' JSON, the long query, and
a watchdog so that a statement the server never stops cannot hang a probe.

Each probe prints one JSON object: check -> {"ok": true, "value": ...} or
{"ok": false, "error": "..."}; tests/serve_drivers.rs asserts on the values.
"""

import datetime
import decimal
import json
import os
import sys
import threading
import time

LONG_QUERY = "SELECT count(*) FROM generate_series(1, 5000000000)"
QUERY = "SELECT id, model, response FROM qa ORDER BY id, model LIMIT 5"
# Past this, a long query the server did not stop is reported and the probe ends.
GIVE_UP_SECONDS = 10

out = {}


def plain(value):
    """A driver's value as JSON: lists and tuples as arrays, everything else as its text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return str(value)


def sqlstate(e):
    for attr in ("sqlstate", "pgcode"):
        state = getattr(e, attr, None)
        if state:
            return state
    diag = getattr(e, "diag", None)
    return getattr(diag, "sqlstate", None)


def check(name, fn):
    try:
        out[name] = {"ok": True, "value": plain(fn())}
    except Exception as e:  # the probe reports, the test decides
        state = sqlstate(e)
        prefix = f"{state}: " if state else f"{type(e).__name__}: "
        out[name] = {"ok": False, "error": prefix + str(e).strip()}


def reraise(e):
    """For a check whose failure already happened (a connection refused)."""
    raise e


def print_out():
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


def watchdog(name):
    """Ends the probe if `name` has not finished after GIVE_UP_SECONDS; returns a stop()."""
    done = threading.Event()

    def fire():
        if not done.wait(GIVE_UP_SECONDS):
            out[name] = {
                "ok": False,
                "error": f"the long query was still running after {GIVE_UP_SECONDS} s",
            }
            print_out()
            os._exit(0)

    threading.Thread(target=fire, daemon=True).start()
    return done.set


def timed(fn):
    start = time.monotonic()
    try:
        fn()
        state = None
    except Exception as e:
        state = sqlstate(e) or type(e).__name__
    return state, round(time.monotonic() - start, 3)
