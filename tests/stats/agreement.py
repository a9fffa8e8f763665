#!/usr/bin/env python3
"""Reference values of evalsql's pass@k, pass^k and weighted Cohen's kappa, on random data
this script generates (seeded, so the output is the same on every run), printed as one
JSON object: the data and what each aggregate must give on it.

    python3 agreement.py > agreement.json

- pass_at_k: Chen et al. (2021)'s numerically stable estimator, as published with the
  HumanEval code: 1 - prod(1 - k / arange(n - c + 1, n + 1)), 1.0 when n - c < k; null
  when n < k (the estimator is undefined).
- pass_hat_k: math.comb(c, k) / math.comb(n, k) (tau-bench's pass^k); null when n < k.
- kappa: sklearn.metrics.cohen_kappa_score(a, b, weights=None | 'linear' | 'quadratic')
  over the rows where both labels are present; null where sklearn gives nan.
- cluster: statsmodels OLS(x, ones).fit(cov_type='cluster', cov_kwds={'groups': codes},
  use_t=True): [params[0], conf_int(1 - c)[0][0], conf_int(1 - c)[0][1]], the bounds null
  where statsmodels gives nan (one cluster); rows with a missing value or cluster left out.
- alpha: krippendorff.alpha(reliability_data (raters x units, nan where missing),
  level_of_measurement=level) for each level; text ratings as a string matrix ("nan"
  missing), nominal only.
- ppi: ppi_py.ppi_mean_pointestimate(Y, Yhat, Yhat_unlabeled) and
  ppi_mean_ci(..., alpha=1 - c) (ppi-python 0.2.3): rows with a human score are labeled.
- fdr: statsmodels.stats.multitest.multipletests(p, method='fdr_bh')[1] per family over the
  present p-values (ties, 0 and 1 included); a missing p-value stays null.
"""
import json
import math
import sys
import warnings

import numpy as np
import statsmodels.api as sm
from statsmodels.stats.multitest import multipletests
from sklearn.metrics import cohen_kappa_score
import krippendorff
from ppi_py import ppi_mean_ci, ppi_mean_pointestimate


def pass_at_k(n, c, k):
    if n < k:
        return None
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_hat_k(n, c, k):
    if n < k:
        return None
    return math.comb(c, k) / math.comb(n, k)


def kappa(a, b, weights):
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v = cohen_kappa_score([p[0] for p in pairs], [p[1] for p in pairs], weights=weights)
    return None if math.isnan(v) else float(v)


def main():
    rng = np.random.default_rng(20261201)
    # pass@k: 40 tasks of 1 to 12 samples with a pass probability of their own.
    samples = []
    for task in range(40):
        n = int(rng.integers(1, 13))
        p = float(rng.choice([0.0, 0.2, 0.5, 0.8, 1.0]))
        for _ in range(n):
            samples.append({"task": f"t{task:02d}", "passed": bool(rng.random() < p)})
    expected_pass = {}
    for k in (1, 3, 5, 10):
        for task in sorted({s["task"] for s in samples}):
            rows = [s for s in samples if s["task"] == task]
            n, c = len(rows), sum(s["passed"] for s in rows)
            expected_pass[f"{task}/{k}"] = [pass_at_k(n, c, k), pass_hat_k(n, c, k)]

    # Kappa: ordinal numbers with gaps (numpy sorts them by value), text labels (sorted as
    # strings), a few missing labels.
    kappas = []
    for name, values, size in (
        ("numbers", [1, 2, 3, 5, 8, 10], 300),
        ("text", ["high", "low", "medium", "none"], 200),
        ("two labels", [0, 1], 50),
    ):
        a, b = [], []
        for _ in range(size):
            x = values[int(rng.integers(len(values)))]
            # The second rater agrees half the time, else is off by one position.
            i = values.index(x)
            j = i if rng.random() < 0.5 else min(len(values) - 1, max(0, i + int(rng.choice([-1, 1]))))
            y = values[j]
            a.append(None if rng.random() < 0.03 else x)
            b.append(None if rng.random() < 0.03 else y)
        kappas.append(
            {
                "name": name,
                "a": a,
                "b": b,
                "expected": {
                    w or "none": kappa(a, b, w) for w in (None, "linear", "quadratic")
                },
            }
        )
    # Cluster-robust intervals: values with a shared effect per cluster, several shapes.
    clustered = []
    for name, clusters, per, confidence in (
        ("30 documents", 30, (1, 8), 0.95),
        ("5 conversations", 5, (3, 20), 0.9),
        ("two clusters", 2, (4, 6), 0.99),
        ("one cluster", 1, (10, 11), 0.95),
        ("all equal", 4, (2, 5), 0.95),
    ):
        rows = []
        for g in range(clusters):
            effect = float(rng.normal(0, 1))
            for _ in range(int(rng.integers(per[0], per[1]))):
                x = 3.0 if name == "all equal" else round(effect + float(rng.normal(2, 0.5)), 6)
                rows.append({"x": x, "cluster": f"doc{g}"})
        rows.append({"x": None, "cluster": "doc0"})
        rows.append({"x": 100.0, "cluster": None})
        present = [r for r in rows if r["x"] is not None and r["cluster"] is not None]
        x = np.array([r["x"] for r in present])
        _, codes = np.unique([r["cluster"] for r in present], return_inverse=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                fit = sm.OLS(x, np.ones(len(x))).fit(
                    cov_type="cluster", cov_kwds={"groups": codes}, use_t=True
                )
                lo, hi = (float(v) for v in fit.conf_int(alpha=1 - confidence)[0])
            except ZeroDivisionError:
                # One cluster: statsmodels' G/(G-1) divides by zero; no interval.
                lo, hi = math.nan, math.nan
        bound = lambda v: None if math.isnan(v) else v
        clustered.append(
            {
                "name": name,
                "confidence": confidence,
                "rows": rows,
                "expected": [float(np.mean(x)), bound(lo), bound(hi)],
                "n": len(present),
            }
        )
    # Benjamini-Hochberg per family: a few real effects among nulls, ties, 0, 1, missing.
    tests = []
    for family, size in (("slices", 40), ("metrics", 7), ("one", 1)):
        for i in range(size):
            r = rng.random()
            if r < 0.2:
                p = round(float(rng.random()) * 0.01, 6)
            elif r < 0.3:
                p = 0.05
            else:
                p = round(float(rng.random()), 6)
            tests.append({"id": f"{family}{i}", "family": family, "p": p})
        tests.append({"id": f"{family}-missing", "family": family, "p": None})
    tests[0]["p"] = 0.0
    tests[1]["p"] = 1.0
    expected_q = {}
    for family in ("slices", "metrics", "one"):
        rows = [t for t in tests if t["family"] == family and t["p"] is not None]
        q = multipletests([t["p"] for t in rows], method="fdr_bh")[1]
        for t, v in zip(rows, q):
            expected_q[t["id"]] = float(v)
        expected_q[f"{family}-missing"] = None
    # Krippendorff's alpha: long-format ratings with missing ones, every level.
    alphas = []
    for name, units, raters, values, missing in (
        ("5-point scale", 40, 4, [1, 2, 3, 4, 5], 0.2),
        ("sparse ratios", 25, 6, [0, 1, 2, 4, 8, 16], 0.5),
        ("two raters", 60, 2, [0, 1, 2], 0.05),
    ):
        rows, matrix = [], np.full((raters, units), np.nan)
        for u in range(units):
            truth = int(rng.integers(len(values)))
            for r in range(raters):
                if rng.random() < missing:
                    continue
                j = truth if rng.random() < 0.6 else int(rng.integers(len(values)))
                rows.append({"unit": f"u{u}", "rater": f"r{r}", "value": values[j]})
                matrix[r, u] = values[j]
        expected = {
            level: float(krippendorff.alpha(reliability_data=matrix, level_of_measurement=level))
            for level in ("nominal", "ordinal", "interval", "ratio")
        }
        alphas.append({"name": name, "rows": rows, "expected": expected})
    text_rows, text_matrix = [], np.full((3, 30), "nan", dtype=object)
    labels = ["bad", "fine", "good"]
    for u in range(30):
        truth = labels[int(rng.integers(3))]
        for r in range(3):
            if rng.random() < 0.15:
                continue
            v = truth if rng.random() < 0.7 else labels[int(rng.integers(3))]
            text_rows.append({"unit": f"u{u}", "rater": f"r{r}", "value": v})
            text_matrix[r, u] = v
    alphas.append(
        {
            "name": "text labels",
            "rows": text_rows,
            "expected": {
                "nominal": float(
                    krippendorff.alpha(
                        reliability_data=text_matrix.astype(str), level_of_measurement="nominal"
                    )
                )
            },
        }
    )
    # PPI: judge scores for every row, human scores for a subset; 1-5 scores and 0/1 passes.
    ppis = []
    for name, rows_n, labeled_n, binary, confidence in (
        ("scores 1-5", 500, 60, False, 0.95),
        ("pass indicators", 800, 100, True, 0.9),
        ("few labels", 200, 8, False, 0.95),
        ("an uninformative judge", 300, 50, None, 0.95),
    ):
        rows = []
        for i in range(rows_n):
            truth = float(rng.integers(1, 6))
            if binary is None:
                judge = float(rng.integers(1, 6))
            else:
                judge = float(min(5, max(1, truth + rng.choice([-1, 0, 0, 0, 1]))))
            if binary:
                truth, judge = float(truth >= 3), float(judge >= 3)
            rows.append({"judge": judge, "human": truth if i < labeled_n else None})
        Y = np.array([r["human"] for r in rows if r["human"] is not None])
        Yhat = np.array([r["judge"] for r in rows if r["human"] is not None])
        Yu = np.array([r["judge"] for r in rows if r["human"] is None])
        lo, hi = ppi_mean_ci(Y, Yhat, Yu, alpha=1 - confidence)
        point = ppi_mean_pointestimate(Y, Yhat, Yu)
        ppis.append(
            {
                "name": name,
                "confidence": confidence,
                "rows": rows,
                "expected": [float(np.ravel(point)[0]), float(np.ravel(lo)[0]), float(np.ravel(hi)[0])],
            }
        )
    json.dump(
        {
            "ppi": ppis,
            "alpha": alphas,
            "samples": samples,
            "pass": expected_pass,
            "kappa": kappas,
            "cluster": clustered,
            "fdr": {"tests": tests, "expected": expected_q},
        },
        sys.stdout,
        indent=1,
    )


if __name__ == "__main__":
    main()
