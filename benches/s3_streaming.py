#!/usr/bin/env python3
"""The streaming batch job of the speed issue with its input and output in an S3 bucket.

Starts moto's S3 server on loopback (installed into ~/.cache/evalsql-moto-venv, as scripts/test.sh
does), uploads the 10M-row Parquet file of benches/compare_references.py with evalsql's own
COPY, then runs

    COPY (SELECT f1_score(...), rouge_l(...), bleu(...) FROM 's3://bench/pairs.parquet')
      TO 's3://bench/scores/' STORED AS PARQUET

and prints its time and peak RSS (the bound is 1.5 GB). Needs the release binary
(`cargo build --release`, CARGO_TARGET_DIR as in .ci/run) and the input file, which
compare_references.py writes (~/.cache/evalsql-bench/pairs_10000000.parquet).

    python3 benches/s3_streaming.py [--rows 10000000]
"""

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path.home() / ".cache" / "evalsql-bench"
MOTO = Path.home() / ".cache" / "evalsql-moto-venv"


def target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache" / "evalsql-target"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    args = ap.parse_args()

    exe = target_dir() / "release" / "evalsql"
    if not exe.exists():
        sys.exit(f"no release binary at {exe}: run cargo build --release first")
    source = CACHE / f"pairs_{args.rows}.parquet"
    if not source.exists():
        sys.exit(f"no {source}: run benches/compare_references.py first (it writes it)")
    if not (MOTO / "bin" / "moto_server").exists():
        subprocess.run([sys.executable, "-m", "venv", str(MOTO)], check=True)
        subprocess.run([str(MOTO / "bin" / "python"), "-m", "pip", "install", "-q", "moto[server]"],
                       check=True)

    port = free_port()
    server = subprocess.Popen([str(MOTO / "bin" / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/bench", method="PUT")
        urllib.request.urlopen(req).read()
        env = dict(os.environ, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret",
                   AWS_REGION="us-east-1", AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
                   AWS_ALLOW_HTTP="true")
        subprocess.run([str(exe), "-c", f"COPY (SELECT * FROM '{source}') TO 's3://bench/pairs.parquet' "
                        "STORED AS PARQUET"], check=True, env=env, stdout=subprocess.DEVNULL)
        sql = ("COPY (SELECT f1_score(response, ground_truth) AS f1, rouge_l(response, ground_truth) AS rl, "
               "bleu(response, ground_truth) AS bleu FROM 's3://bench/pairs.parquet') "
               "TO 's3://bench/scores/' STORED AS PARQUET")
        # A fresh Python process measures the child's peak alone.
        probe = ("import resource,subprocess,sys,time;t=time.perf_counter();"
                 "subprocess.run(sys.argv[1:],check=True,stdout=subprocess.DEVNULL);"
                 "print(time.perf_counter()-t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        out = subprocess.run([sys.executable, "-c", probe, str(exe), "-c", sql], check=True,
                             capture_output=True, text=True, env=env).stdout.split()
        seconds, kib = float(out[0]), int(out[1])
        check = subprocess.run([str(exe), "--format", "csv", "-c",
                                "SELECT count(*) FROM 's3://bench/scores/'"],
                               check=True, capture_output=True, text=True, env=env).stdout.split()
        print(f"{args.rows:,} rows from s3://, f1_score + rouge_l + bleu, COPY to s3://: "
              f"{seconds:.1f} s, peak RSS {kib / 1024:,.0f} MiB; rows written back: {check[-1]}")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
