#!/usr/bin/env python3
"""Reference object clusters for capflow's CutSwap test.

Reads {"lemmas": [...], "vectors": [[...], ...], "fixed_k": [...]} (JSON) from the file named
on the command line, computes cosine distances with numpy (1 - cos, clipped at 0 as capflow
does), and prints one JSON object:
  "distances": the square distance matrix,
  "fixed": {k: AgglomerativeClustering(n_clusters=k, linkage="average",
                                         metric="precomputed").fit(D).labels_},
  "silhouette": {k: silhouette_score(D, labels_k, metric="precomputed")} for k in 2..n-1,
  "best_k": the k with the highest silhouette score (the first on ties), and its "best_labels".
"""
import json
import sys
import warnings

import numpy as np
from sklearn.cluster import AgglomerativeClustering
from sklearn.metrics import silhouette_score


def labels_for(d, k):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AgglomerativeClustering(n_clusters=k, linkage="average", metric="precomputed")
        return model.fit(d).labels_


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    v = np.array(spec["vectors"], dtype=np.float64)
    unit = v / np.linalg.norm(v, axis=1, keepdims=True)
    d = np.clip(1.0 - unit @ unit.T, 0.0, None)
    np.fill_diagonal(d, 0.0)
    d = (d + d.T) / 2.0
    n = len(spec["lemmas"])
    fixed = {str(k): [int(x) for x in labels_for(d, k)] for k in spec["fixed_k"]}
    scores = {}
    best_k, best_score, best_labels = None, None, None
    for k in range(2, n):
        labels = labels_for(d, k)
        score = float(silhouette_score(d, labels, metric="precomputed"))
        scores[str(k)] = score
        if best_score is None or score > best_score:
            best_k, best_score, best_labels = k, score, labels
    print(json.dumps({
        "distances": d.tolist(),
        "fixed": fixed,
        "silhouette": scores,
        "best_k": best_k,
        "best_labels": [int(x) for x in best_labels] if best_labels is not None else None,
    }))


if __name__ == "__main__":
    main()
