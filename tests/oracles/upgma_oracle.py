#!/usr/bin/env python3
"""Reference dendrograms and flat clusters for capflow's cluster tests.

Generates seeded random symmetric distance matrices and prints one JSON object per line:
  {"n": n, "condensed": [...], "Z": scipy linkage(condensed, method="average") rows}
and with --labels also
  "k": k, "labels": AgglomerativeClustering(n_clusters=k, linkage="average",
                                             metric="precomputed").fit(D).labels_
Floats are written with repr, so they read back bit for bit.

--ties draws small integer distances, so that equal distances (and tie-breaking) are common.
"""
import argparse
import json
import warnings

import numpy as np
from scipy.cluster.hierarchy import linkage
from scipy.spatial.distance import squareform


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-n", type=int, default=2)
    ap.add_argument("--max-n", type=int, default=60)
    ap.add_argument("--ties", action="store_true")
    ap.add_argument("--labels", action="store_true")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    if args.labels:
        from sklearn.cluster import AgglomerativeClustering
    for _ in range(args.count):
        n = int(rng.integers(args.min_n, args.max_n + 1))
        m = n * (n - 1) // 2
        if args.ties:
            condensed = rng.integers(1, 5, size=m).astype(float)
        else:
            condensed = rng.random(m) * float(rng.choice([1.0, 10.0, 1000.0]))
        record = {
            "n": n,
            "condensed": [float(x) for x in condensed],
            "Z": [[float(x) for x in row] for row in linkage(condensed, method="average")],
        }
        if args.labels:
            k = int(rng.integers(1, n + 1))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = AgglomerativeClustering(
                    n_clusters=k, linkage="average", metric="precomputed"
                ).fit(squareform(condensed))
            record["k"] = k
            record["labels"] = [int(x) for x in model.labels_]
        print(json.dumps(record))


if __name__ == "__main__":
    main()
