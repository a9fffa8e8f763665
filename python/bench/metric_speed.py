"""A text metric over 1,000,000 rows through datafusion-python and through the evalsql
command line, in the same run: prints both times and their ratio (the FFI hop should cost
next to nothing, so the ratio should stay near 1).

    python python/bench/metric_speed.py [--rows 1000000] [--evalsql PATH] [--repeat 3]

Build both the same way to compare them (`cargo build --release` and
`pip install ./python`, or the dev profile for both as CI does).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from datafusion import SessionContext

import evalsql

ROOT = Path(__file__).resolve().parents[2]
QUERY = "SELECT model, sum(f1_score(response, ground_truth)) AS f1 FROM {src} GROUP BY model"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--evalsql", default=shutil.which("evalsql") or "target/release/evalsql")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "rows.parquet"
        copies = -(-args.rows // 60)  # data/qa.parquet has 60 rows
        subprocess.run(
            [
                args.evalsql,
                "-c",
                f"COPY (SELECT model, response, ground_truth FROM 'data/qa.parquet' "
                f"CROSS JOIN generate_series(1, {copies}) LIMIT {args.rows}) "
                f"TO '{data}' STORED AS PARQUET",
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )

        def cli() -> float:
            start = time.perf_counter()
            subprocess.run(
                [args.evalsql, "-c", QUERY.format(src=f"'{data}'")],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
            return time.perf_counter() - start

        ctx = SessionContext()
        evalsql.register(ctx)
        ctx.register_parquet("rows", str(data))

        def python() -> float:
            start = time.perf_counter()
            ctx.sql(QUERY.format(src="rows")).collect()
            return time.perf_counter() - start

        cli_best = min(cli() for _ in range(args.repeat))
        py_best = min(python() for _ in range(args.repeat))
    print(f"rows: {args.rows:,}  metric: f1_score")
    print(f"evalsql CLI:         {cli_best:8.3f} s (process start included)")
    print(f"datafusion-python:   {py_best:8.3f} s")
    print(f"python / CLI:        {py_best / cli_best:8.2f}x")


if __name__ == "__main__":
    main()
