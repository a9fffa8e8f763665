"""The judges across the FFI boundary: each batch on evalsql's engine (retries, cache,
budgets), settings given to register(), keys only from the environment, Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pyarrow as pa
import pytest
from datafusion import SessionContext

import evalsql
from conftest import ROOT


def session(stub, cache, **judge):
    ctx = SessionContext()
    reg = evalsql.register(
        ctx,
        judge={"model": "stub-judge", "base_url": stub.base_url, "cache": str(cache), **judge},
    )
    return ctx, reg


def rows(n, fault_every=5):
    texts = []
    for i in range(n):
        fault = "[[fault:429]]" if i % fault_every == 0 else (
            "[[fault:500]]" if i % fault_every == 1 else "")
        texts.append(f"Answer {i} about tents. {fault}")
    return pa.table({"id": list(range(n)), "r": texts})


def test_every_row_is_judged_through_faults_and_a_rerun_sends_nothing(stub, judge_env, tmp_path):
    cache = tmp_path / "cache.sqlite"
    ctx, _ = session(stub, cache, max_concurrency=4, max_retries=3)
    ctx.register_record_batches("t", [rows(40).to_batches()])
    out = ctx.sql(
        "SELECT id, fluency(r) AS s, fluency_details(r)['status'] AS status FROM t ORDER BY id"
    ).to_pydict()
    assert out["status"] == ["ok"] * 40
    assert all(1 <= s <= 5 for s in out["s"])
    assert stub.ok == 40
    assert stub.requests == 40 + 16  # the first attempt of every 429 / 500 row failed

    # A new session on the same cache pays for nothing.
    before = stub.requests
    ctx2, _ = session(stub, cache)
    ctx2.register_record_batches("t", [rows(40).to_batches()])
    again = ctx2.sql("SELECT id, fluency(r) AS s FROM t ORDER BY id").to_pydict()
    assert again["s"] == out["s"]
    assert stub.requests == before
    # judge_cache() is the registration's cache.
    cached = ctx2.sql("SELECT count(*) AS n FROM judge_cache() WHERE metric = 'fluency'")
    assert cached.to_pydict()["n"] == [40]


def test_settings_reach_the_engine(stub, judge_env, tmp_path):
    ctx, reg = session(stub, tmp_path / "c.sqlite", threshold=5)
    d = ctx.sql("SELECT fluency_details('Plain words.') AS d").to_pylist()[0]["d"]
    assert d["threshold"] == 5.0
    assert d["model"] == "stub-judge"
    reg.set("judge.threshold", 2)
    d = ctx.sql("SELECT fluency_details('Plain words.') AS d").to_pylist()[0]["d"]
    assert d["threshold"] == 2.0
    # A budget of one call: the second distinct row is skipped, not paid for.
    reg.set("judge.max_calls", 1)
    reg.start_query()
    out = ctx.sql(
        "SELECT fluency_details(r)['status'] AS s FROM (VALUES ('one new text'), ('two new texts')) AS t(r)"
    ).to_pydict()["s"]
    assert sorted(out) == ["ok", "skipped"]
    with pytest.raises(ValueError, match="evalsql.judge.threshold"):
        reg.set("judge.threshold", "high")
    with pytest.raises(ValueError):
        evalsql.register(SessionContext(), judge={"api_key": "sk-in-a-notebook"})
    # Fused calls need a planner rule a datafusion-python session cannot install.
    with pytest.raises(ValueError, match="evalsql.judge.fuse"):
        reg.set("judge.fuse", True)
    with pytest.raises(ValueError, match="datafusion-python"):
        evalsql.register(SessionContext(), judge={"fuse": True})
    # ... and so is the environment's EVALSQL_JUDGE_FUSE, rather than ignored.
    script = "import evalsql; from datafusion import SessionContext; evalsql.register(SessionContext())"
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "EVALSQL_JUDGE_FUSE": "true"},
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "EVALSQL_JUDGE_FUSE" in proc.stderr and "datafusion-python" in proc.stderr


def test_ctrl_c_stops_sending_and_keeps_what_was_committed(stub, judge_env, tmp_path):
    cache = tmp_path / "cache.sqlite"
    stub.slow_seconds = 0.4
    script = textwrap.dedent(
        f"""
        import pyarrow as pa, evalsql
        from datafusion import SessionContext
        ctx = SessionContext()
        evalsql.register(ctx, judge={{"model": "stub-judge", "base_url": "{stub.base_url}",
                                      "cache": r"{cache}", "max_concurrency": 2}})
        t = pa.table({{"r": [f"[[slow]] slow answer {{i}}" for i in range(60)]}})
        ctx.register_record_batches("t", [t.to_batches()])
        print("started", flush=True)
        try:
            try:
                ctx.sql("SELECT fluency(r) FROM t").collect()
                print("finished", flush=True)
            except Exception as e:
                print("interrupted:", e, flush=True)
        except KeyboardInterrupt:
            print("interrupted: KeyboardInterrupt", flush=True)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    first = proc.stdout.readline().strip()
    assert first == "started", first + proc.stderr.read()
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    out, err = proc.communicate(timeout=20)
    assert time.monotonic() - start < 5, "Ctrl-C took too long to stop the query"
    assert "interrupted" in out, out + err
    sent = stub.requests
    assert 0 < sent < 60
    time.sleep(1.0)
    assert stub.requests == sent, "calls were sent after Ctrl-C"

    # What was committed is not paid again: the rerun sends only the rest.
    stub.slow_seconds = 0.0
    before = stub.ok
    ctx, _ = session(stub, cache, max_concurrency=8)
    ctx.register_record_batches(
        "t", [pa.table({"r": [f"[[slow]] slow answer {i}" for i in range(60)]}).to_batches()]
    )
    ctx.sql("SELECT fluency(r) FROM t").collect()
    paid_again = stub.ok - before
    assert paid_again < 60
    assert paid_again + before >= 60
