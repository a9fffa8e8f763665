"""What `mean_cs` must return, computed by the `confseq` package (0.0.11).

Prints one JSON object: {"cases": [{"name", "lo", "hi", "alpha", "x": [...], "at": [{"n",
"mean", "lower", "upper"}, ...]}, ...]}: for each case, a sequence of values (made here
from Python's own `random`, seeded, so the output is the same byte for byte on every
machine) and the two-sided confidence sequence at several lengths n, that is
`predmix_empbern_twosided_cs((x - lo) / (hi - lo), alpha, truncation=0.5)` at index n - 1,
scaled back to [lo, hi].

    python3 tests/stats/confseq_reference.py > tests/stats/confseq.json

Needs confseq's pure-Python modules (its source distribution's `src/`; the package has no
wheel and its C++ part is not needed), numpy, scipy and multiprocess.
"""

import json
import random

import numpy as np
from confseq.predmix import predmix_empbern_twosided_cs


def cases():
    r = random.Random(20261207)
    # Judge scores 1-5 around 3.8, as a monitor's relevance column.
    weights = [0.04, 0.08, 0.16, 0.42, 0.30]
    yield "scores_1_to_5", 1.0, 5.0, 0.05, [
        float(r.choices([1, 2, 3, 4, 5], weights)[0]) for _ in range(1000)
    ]
    # Continuous values in [0, 1] (an F1 or ROUGE column), a looser alpha.
    yield "unit_interval", 0.0, 1.0, 0.1, [r.betavariate(5, 2) for _ in range(500)]
    # Pass / fail with a high pass rate, a strict alpha.
    yield "pass_fail", 0.0, 1.0, 0.01, [float(r.random() < 0.9) for _ in range(300)]
    # No variation at all, at the top of the range.
    yield "constant_at_the_top", 1.0, 5.0, 0.05, [5.0] * 50
    # Bounds that are not 0 and 1, values anywhere between.
    yield "wide_bounds", -10.0, 30.0, 0.05, [r.uniform(-10, 30) for _ in range(200)]


def main():
    out = []
    for name, lo, hi, alpha, x in cases():
        scaled = (np.array(x) - lo) / (hi - lo)
        lower, upper = predmix_empbern_twosided_cs(scaled, alpha=alpha, truncation=0.5)
        at = []
        for n in [1, 2, 3, 10, 50, 100, 200, 300, 500, 1000]:
            if n <= len(x):
                at.append(
                    {
                        "n": n,
                        "mean": float(np.mean(x[:n])),
                        "lower": float(lo + (hi - lo) * lower[n - 1]),
                        "upper": float(lo + (hi - lo) * upper[n - 1]),
                    }
                )
        out.append({"name": name, "lo": lo, "hi": hi, "alpha": alpha, "x": x, "at": at})
    print(json.dumps({"cases": out}))


if __name__ == "__main__":
    main()
