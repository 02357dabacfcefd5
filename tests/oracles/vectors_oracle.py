#!/usr/bin/env python3
"""Reference word similarities for capflow's word-vector tests.

Reads a GloVe (no header) or word2vec text (header `count dim`) file with a plain Python
parser and prints one JSON object:
  {"dim": d, "words": [...],
   "similarity": [[w1, w2, 1 - min(1, scipy cosine distance)], ...]  (every pair, SSA's formula),
   "most_similar": {word: [[other, cosine], ... top 5, numpy]}}
"""
import json
import sys

import numpy as np
from scipy.spatial.distance import cosine


def read(path):
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip() for line in f if line.strip()]
    first = lines[0].split(" ")
    if len(first) == 2 and all(x.isdigit() for x in first):
        lines = lines[1:]
    words, vectors = [], []
    for line in lines:
        parts = line.split(" ")
        words.append(parts[0])
        vectors.append([float(x) for x in parts[1:]])
    return words, np.array(vectors, dtype=np.float64)


def main():
    words, vectors = read(sys.argv[1])
    sims = []
    for i, a in enumerate(words):
        for j, b in enumerate(words):
            if j >= i:
                sims.append([a, b, 1.0 - min(1.0, float(cosine(vectors[i], vectors[j])))])
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cos = unit @ unit.T
    most = {}
    for i, w in enumerate(words):
        order = [j for j in np.argsort(-cos[i], kind="stable") if j != i][:5]
        most[w] = [[words[j], float(cos[i, j])] for j in order]
    print(json.dumps({"dim": int(vectors.shape[1]), "words": words,
                      "similarity": sims, "most_similar": most}, ensure_ascii=False))


if __name__ == "__main__":
    main()
