#!/usr/bin/env python3
"""The same evalsql job in one process and on Ballista clusters of 1 and 2 executors.

Usage:  python3 benches/ballista.py [--rows N] [--files F] [--binary PATH]

Builds the release binary (unless --binary is given), writes N rows of the QA sample as F
Parquet files, and times the job (text metrics and their corpus aggregates, grouped by
model) through `evalsql` directly and through `evalsql --ballista` against a scheduler and
1, then 2, executors on loopback, each running one task at a time. Results must agree;
the script prints the times and the 2-vs-1-executor speed-up. Run it on an otherwise idle
machine: each executor is one core's worth of work.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

JOB = """
SELECT model, count(*) AS n,
       avg(f1_score(response, ground_truth)) AS f1,
       avg(meteor(response, ground_truth)) AS meteor,
       avg(rouge_l(response, ground_truth)) AS rouge_l,
       corpus_bleu(response, ground_truth) AS corpus_bleu,
       corpus_chrf(response, ground_truth) AS corpus_chrf
FROM '{input}' GROUP BY model ORDER BY model
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port, timeout=60):
    start = time.time()
    while time.time() - start < timeout:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def start_cluster(binary, executors, work):
    port = free_port()
    env = dict(os.environ, RUST_LOG="ballista_scheduler::scheduler_server::grpc=info")
    log = open(work / f"scheduler-{executors}.log", "w+")
    roots = ["--data-root", str(work)]
    procs = [subprocess.Popen([binary, "scheduler", "--port", str(port)] + roots,
                              stdout=subprocess.DEVNULL, stderr=log, env=env)]
    wait_for(port)
    for n in range(executors):
        wd = work / f"ex{executors}-{n}"
        wd.mkdir(parents=True, exist_ok=True)
        procs.append(subprocess.Popen(
            [binary, "executor", "--scheduler", f"127.0.0.1:{port}",
             "--port", str(free_port()), "--grpc-port", str(free_port()),
             "--concurrent-tasks", "1", "--work-dir", str(wd)] + roots,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    start = time.time()
    while True:
        log.seek(0)
        if log.read().count("register executor request") >= executors:
            break
        if time.time() - start > 60:
            raise SystemExit("executors never registered")
        time.sleep(0.05)
    return port, procs


def run(binary, sql, ballista=None):
    cmd = [binary, "--format", "csv", "-c", sql]
    if ballista:
        cmd[1:1] = ["--ballista", f"df://127.0.0.1:{ballista}"]
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:3])}: {out.stderr}")
    return elapsed, out.stdout


def same(a, b):
    for la, lb in zip(a.splitlines(), b.splitlines(), strict=True):
        for x, y in zip(la.split(","), lb.split(","), strict=True):
            try:
                fx, fy = float(x), float(y)
                if abs(fx - fy) > 1e-9 * max(abs(fx), abs(fy)):
                    return False
            except ValueError:
                if x != y:
                    return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--binary")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    binary = args.binary
    if not binary:
        target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
        binary = str(Path(target) / "release" / "evalsql")

    work = Path(tempfile.mkdtemp(prefix="evalsql-ballista-bench-"))
    try:
        data = work / "input"
        data.mkdir()
        per_file = args.rows // args.files
        for i in range(args.files):
            sql = (f"COPY (SELECT q.model, q.response || ' ' || CAST(g.value AS VARCHAR) AS response,"
                   f" q.ground_truth FROM 'data/qa.parquet' q CROSS JOIN generate_series(1, {per_file // 60 + 1}) g"
                   f" LIMIT {per_file}) TO '{data}/part{i}.parquet' STORED AS PARQUET")
            run(binary, sql)
        job = JOB.format(input=data)
        rows = per_file * args.files
        print(f"job: 5 metrics over {rows:,} rows in {args.files} Parquet files")

        def best(ballista=None):
            times, out = [], None
            for _ in range(args.repeat):
                t, out = run(binary, job, ballista)
                times.append(t)
            return min(times), out

        local_t, local_out = best()
        print(f"one process (2 partitions):        {local_t:7.2f} s")
        results = {}
        for executors in (1, 2):
            port, procs = start_cluster(binary, executors, work)
            try:
                t, out = best(port)
            finally:
                for p in procs:
                    p.kill()
                    p.wait()
            if not same(out, local_out):
                raise SystemExit(f"{executors} executor(s) disagree:\n{out}\nvs\n{local_out}")
            results[executors] = t
            print(f"Ballista, {executors} executor(s) x 1 task:    {t:7.2f} s")
        print(f"2 executors vs 1: {results[1] / results[2]:.2f}x faster; results equal one process's")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
