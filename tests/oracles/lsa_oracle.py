#!/usr/bin/env python3
"""Reference assignments for capflow's Hungarian tests.

Generates seeded random rectangular cost matrices and prints one JSON object per line:
  {"rows": r, "cols": c, "maximize": bool, "cost": row-major list,
   "row_ind": [...], "col_ind": [...], "total": float, "unique": bool}
from scipy.optimize.linear_sum_assignment. "unique" says whether the optimum is attained by
this assignment only: an optimal assignment differs from another one in at least one of its
pairs, so it is unique exactly when forbidding each of its pairs in turn makes the optimum
strictly worse (by more than 1e-9).

--ties draws small integer costs, so that many assignments share the optimum.
"""
import argparse
import json

import numpy as np
from scipy.optimize import linear_sum_assignment


def optimum(cost, maximize):
    r, c = linear_sum_assignment(cost, maximize=maximize)
    return r, c, float(cost[r, c].sum())


def is_unique(cost, maximize, rows, cols, total):
    forbidden = -np.inf if maximize else np.inf
    for r, c in zip(rows, cols):
        trial = cost.copy()
        trial[r, c] = forbidden
        try:
            _, _, other = optimum(trial, maximize)
        except ValueError:  # infeasible: no other assignment at all
            continue
        if abs(other - total) <= 1e-9:
            return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-side", type=int, default=12)
    ap.add_argument("--ties", action="store_true")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    for _ in range(args.count):
        rows = int(rng.integers(1, args.max_side + 1))
        cols = int(rng.integers(1, args.max_side + 1))
        maximize = bool(rng.integers(0, 2))
        if args.ties:
            cost = rng.integers(0, 4, size=(rows, cols)).astype(float)
        else:
            cost = (rng.random((rows, cols)) - 0.3) * float(rng.choice([1.0, 100.0]))
        r, c, total = optimum(cost, maximize)
        print(json.dumps({
            "rows": rows,
            "cols": cols,
            "maximize": maximize,
            "cost": [float(x) for x in cost.ravel()],
            "row_ind": [int(x) for x in r],
            "col_ind": [int(x) for x in c],
            "total": total,
            "unique": is_unique(cost, maximize, r, c, total),
        }))


if __name__ == "__main__":
    main()
