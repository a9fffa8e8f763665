#!/usr/bin/env python3
"""Writes scores.csv: 200 deterministic rows of two systems' scores and two raters' labels.

Uses only Python's own `random` (stable across versions), so the file never changes:
`python3 make_scores.py` rewrites it byte for byte.

Columns: id, system_a, system_b (scores in [0, 1], 3 decimals, so with ties), judge_label,
human_label (one of "good", "bad", "unsure"; the raters agree on about 70% of items).
"""
import csv
import os
import random

LABELS = ["good", "bad", "unsure"]


def rows(n=200, seed=20240601):
    rng = random.Random(seed)
    for i in range(1, n + 1):
        quality = rng.betavariate(4, 2)
        a = min(1.0, max(0.0, quality + rng.gauss(0, 0.08)))
        b = min(1.0, max(0.0, quality - 0.03 + rng.gauss(0, 0.1)))
        human = "good" if quality > 0.7 else "bad" if quality < 0.45 else "unsure"
        judge = human if rng.random() < 0.7 else rng.choice(LABELS)
        yield [i, f"{a:.3f}", f"{b:.3f}", judge, human]


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scores.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "system_a", "system_b", "judge_label", "human_label"])
        w.writerows(rows())


if __name__ == "__main__":
    main()
