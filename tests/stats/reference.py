#!/usr/bin/env python3
"""Reference values of evalsql's statistics aggregates, computed with scipy, numpy and
scikit-learn, printed as one JSON object.

    python3 reference.py INPUT [--value COL] [--other COL] [--labels COL COL]
                               [--confidence C] [--resamples B] [--seed S]

INPUT is a CSV file with a header row, or a JSON file (a list of row objects, or an object
of column name -> list). Defaults: --value system_a --other system_b
--labels judge_label human_label --confidence 0.95 --resamples 2000 --seed 42 (the columns
of scores.csv). Empty CSV cells and JSON nulls are missing values and are skipped, as SQL
aggregates skip NULL: per column for the one-column statistics, per row (both present) for
the paired ones. Labels are compared as strings. A column that is absent from INPUT leaves
its statistics out.

Output keys (numbers are floats; null where the statistic is undefined):

  n                  rows with a value in --value
  mean               numpy.mean
  mean_ci            scipy.stats.t.interval(c, n-1, loc=mean, scale=scipy.stats.sem(x));
                     [mean, mean] when every value is equal (scipy answers nan there)
  bootstrap_ci_scipy scipy.stats.bootstrap((x,), np.mean, confidence_level=c,
                     n_resamples=B, method='percentile', rng=np.random.default_rng(seed)):
                     equal to evalsql's interval in distribution only (compare with a
                     tolerance of ~10% of the interval's width)
  bootstrap_ci       evalsql's hash-seeded Poisson bootstrap (udfs/src/stats/bootstrap.rs),
                     reimplemented here: equal to evalsql's bit for bit
  paired             {n, diff, p_value, diff_ci}: the paired bootstrap test of --value
                     against --other as evalsql defines it (bootstrap.rs,
                     PairedBootstrapState): diff = mean(a) - mean(b);
                     p = (1 + #{|d_i - diff| >= |diff|}) / (1 + B')
  kappa              sklearn.metrics.cohen_kappa_score(labels1, labels2); null where
                     sklearn returns nan (both raters used one and the same label)
"""
import argparse
import csv
import json
import math
import struct
import sys
import warnings

import numpy as np
import scipy.stats
from sklearn.metrics import cohen_kappa_score

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
SEED_SALT = 0x5851F42D4C957F2D
VALUE_SALT = 0xD1B54A32D192ED03
# round(2^53 * P(Poisson(1) <= k)), as POISSON1_THRESHOLDS in bootstrap.rs.
POISSON1_THRESHOLDS = np.array(
    [
        3313563428353948, 6627126856707896, 8283908570884870, 8836169142277194,
        8974234285125276, 9001847313694892, 9006449485123161, 9007106938184342,
        9007189119816990, 9007198251109507, 9007199164238758, 9007199247250508,
        9007199254168154, 9007199254700281, 9007199254738290, 9007199254740824,
        9007199254740982, 9007199254740991, 9007199254740992,
    ],
    dtype=np.uint64,
)


# ---------------------------------------------------------------- input


def read_columns(path):
    """Column name -> list of raw values (str from CSV, any JSON scalar; None = missing)."""
    if path.endswith(".json"):
        with open(path) as f:
            data = json.load(f)
        if isinstance(data, dict):
            return {k: list(v) for k, v in data.items()}
        cols = {}
        for i, row in enumerate(data):
            for k, v in row.items():
                cols.setdefault(k, [None] * len(data))[i] = v
        return cols
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    cols = {}
    for i, row in enumerate(rows):
        for k, v in row.items():
            cols.setdefault(k, [None] * len(rows))[i] = None if v == "" else v
    return cols


def as_float(v):
    return None if v is None else float(v)


def as_label(v):
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


# ---------------------------------------------------------------- scipy / sklearn


def mean_ci(x, confidence):
    if len(x) < 2:
        return None
    mean = float(np.mean(x))
    sem = float(scipy.stats.sem(x))
    if sem == 0.0:
        return [mean, mean]
    lo, hi = scipy.stats.t.interval(confidence, len(x) - 1, loc=mean, scale=sem)
    return [float(lo), float(hi)]


def bootstrap_ci_scipy(x, confidence, resamples, seed):
    if len(x) < 2 or np.all(x == x[0]):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = scipy.stats.bootstrap(
            (x,), np.mean, confidence_level=confidence, n_resamples=resamples,
            method="percentile", rng=np.random.default_rng(seed),
        )
    return [float(res.confidence_interval.low), float(res.confidence_interval.high)]


def kappa(a, b):
    if not a:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = float(cohen_kappa_score(a, b))
    return None if math.isnan(k) else k


# ---------------------------------------------------------------- evalsql's Poisson bootstrap


def mix64(z):
    z = np.asarray(z, dtype=np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def mix64_int(z):
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9 & M64
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB & M64
    return z ^ (z >> 31)


def value_bits(x):
    if x == 0.0:
        return 0
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def resample_keys(seed, resamples):
    seed_key = mix64_int((seed ^ SEED_SALT) & M64)
    return np.array(
        [mix64_int((seed_key + (b + 1) * GOLDEN) & M64) for b in range(resamples)],
        dtype=np.uint64,
    )


class SplitMix64:
    def __init__(self, state):
        self.state = state

    def next_u64(self):
        self.state = (self.state + GOLDEN) & M64
        return mix64_int(self.state)

    def next_f64(self):
        return float(self.next_u64() >> 11) * (1.0 / 9007199254740992.0)


def ln_factorial(k):
    if k < 16.0:
        f = 1.0
        i = 2.0
        while i <= k:
            f *= i
            i += 1.0
        return math.log(f)
    x = k + 1.0
    x2 = x * x
    return ((x - 0.5) * math.log(x) - x + 0.9189385332046728
            + (1.0 / 12.0 - (1.0 / 360.0 - 1.0 / (1260.0 * x2)) / x2) / x)


def poisson_ptrs(lam, rng):
    slam = math.sqrt(lam)
    loglam = math.log(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    vr = 0.9277 - 3.6224 / (b - 2.0)
    while True:
        u = rng.next_f64() - 0.5
        v = rng.next_f64()
        us = 0.5 - abs(u)
        with np.errstate(all="ignore"):
            k = math.floor((2.0 * a / us + b) * u + lam + 0.43) if us > 0 else -1
        if us >= 0.07 and v <= vr:
            return k
        if not (k >= 0) or (us < 0.013 and v > us):
            continue
        if (math.log(v) + math.log(inv_alpha) - math.log(a / (us * us) + b)
                <= -lam + k * loglam - ln_factorial(float(k))):
            return k


def weights(stream_seeds, count):
    """Poisson(count) weights, one per resample, from SplitMix64 seeded per resample."""
    if count < 10:
        s = stream_seeds.copy()
        total = np.zeros(len(s), dtype=np.int64)
        for _ in range(count):
            s = s + np.uint64(GOLDEN)
            u = mix64(s) >> np.uint64(11)
            total += np.searchsorted(POISSON1_THRESHOLDS, u, side="right")
        return total
    return np.array(
        [poisson_ptrs(float(count), SplitMix64(int(s))) for s in stream_seeds], dtype=np.int64
    )


def counted(values):
    """Distinct values (-0.0 as 0.0) ascending, with their multiplicities."""
    counts = {}
    for v in values:
        v = 0.0 if v == 0.0 else v
        counts[v] = counts.get(v, 0) + 1
    return sorted(counts.items())


def percentile_interval(values, confidence):
    if len(values) == 0:
        return None
    lo, hi = np.quantile(np.asarray(values), [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0])
    return [float(lo), float(hi)]


def poisson_bootstrap_ci(x, confidence, resamples, seed):
    if len(x) == 0:
        return None
    keys = resample_keys(seed, resamples)
    wx = np.zeros(resamples)
    w = np.zeros(resamples, dtype=np.int64)
    for v, count in counted(x):
        key = mix64_int(value_bits(v) ^ VALUE_SALT)
        wt = weights(keys ^ np.uint64(key), count)
        m = wt > 0
        wx[m] += wt[m].astype(np.float64) * v
        w[m] += wt[m]
    ok = w > 0
    return percentile_interval(wx[ok] / w[ok].astype(np.float64), confidence)


def paired_bootstrap(a, b, confidence, resamples, seed):
    if len(a) == 0:
        return None
    keys = resample_keys(seed, resamples)
    wa = np.zeros(resamples)
    wb = np.zeros(resamples)
    w = np.zeros(resamples, dtype=np.int64)
    sa = sb = 0.0
    n = 0
    for (x, y), count in counted_pairs(a, b):
        sa += float(count) * x
        sb += float(count) * y
        n += count
        key = mix64_int(mix64_int(value_bits(x) ^ VALUE_SALT) ^ value_bits(y))
        wt = weights(keys ^ np.uint64(key), count)
        m = wt > 0
        wa[m] += wt[m].astype(np.float64) * x
        wb[m] += wt[m].astype(np.float64) * y
        w[m] += wt[m]
    diff = sa / float(n) - sb / float(n)
    ok = w > 0
    wf = w[ok].astype(np.float64)
    d = wa[ok] / wf - wb[ok] / wf
    p = (1 + int(np.sum(np.abs(d - diff) >= abs(diff)))) / (1 + len(d)) if len(d) else None
    return {"n": n, "diff": diff, "p_value": p, "diff_ci": percentile_interval(d, confidence)}


def counted_pairs(a, b):
    counts = {}
    for x, y in zip(a, b):
        key = (0.0 if x == 0.0 else x, 0.0 if y == 0.0 else y)
        counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items())


# ---------------------------------------------------------------- main


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("--value", default="system_a")
    ap.add_argument("--other", default="system_b")
    ap.add_argument("--labels", nargs=2, default=["judge_label", "human_label"])
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)
    cols = read_columns(args.input)
    c, r, s = args.confidence, args.resamples, args.seed
    out = {}
    if args.value in cols:
        x = np.array([v for v in map(as_float, cols[args.value]) if v is not None], dtype=np.float64)
        out["n"] = len(x)
        out["mean"] = float(np.mean(x)) if len(x) else None
        out["mean_ci"] = mean_ci(x, c)
        out["bootstrap_ci_scipy"] = bootstrap_ci_scipy(x, c, r, s)
        out["bootstrap_ci"] = poisson_bootstrap_ci(list(map(float, x)), c, r, s)
        if args.other in cols:
            pairs = [
                (a, b)
                for a, b in zip(map(as_float, cols[args.value]), map(as_float, cols[args.other]))
                if a is not None and b is not None
            ]
            out["paired"] = paired_bootstrap(
                [p[0] for p in pairs], [p[1] for p in pairs], c, r, s
            )
    l1, l2 = args.labels
    if l1 in cols and l2 in cols:
        pairs = [
            (a, b)
            for a, b in zip(map(as_label, cols[l1]), map(as_label, cols[l2]))
            if a is not None and b is not None
        ]
        out["kappa"] = kappa([p[0] for p in pairs], [p[1] for p in pairs])
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
