#!/usr/bin/env python3
"""Independent references for capflow's visual-relatedness tests.

Subcommands (each prints one JSON document):
  pow SIM_FILE PROB_FILE
      The reference re-ranker's arithmetic: `pow(float(sim), float(prob))`, keeping `.real` as
      pre-trained/model.py does (Python turns a negative base with a fractional exponent into a
      complex number). Prints [[repr(score)], ...] per line.
  tsv FILE
      Reads a TSV with Python's csv module (tab delimiter, minimal quoting, as pandas reads it)
      and prints {"header": [...], "rows": [[...], ...]}.
  search JSON_FILE
      Input {"captions": [[...]], "queries": [[...]], "relevant": [[...]], "ks": [...]}; exact
      cosine kNN with numpy in float64 (stable argsort: equal scores by position) and
      Recall@K = fraction of queries with a relevant caption in the top K.
      Prints {"rankings": [[...]], "recall": {K: value}}.
  sif VECTORS_FILE JSON_FILE
      SIF sentence similarity (Arora et al. 2017) with numpy: unit word vectors, weights
      a / (a + p(w)) with p from the corpus, mean over known words, removal of the first right
      singular vector(s) of the corpus matrix (np.linalg.svd), cosine.
      Input {"corpus": [[tokens]], "pairs": [[[tokens], [tokens]]], "a": float, "remove": int}.
      Prints {"similarities": [...]}.
  gender JSON_FILE
      Counts per object the pairs whose caption mentions man / woman / person words.
      Input {"pairs": [[[objects], caption]], "man": [...], "woman": [...], "person": [...]}.
"""
import csv
import json
import re
import sys
from collections import Counter, defaultdict

import numpy as np


def cmd_pow(sim_path, prob_path):
    sims = open(sim_path).read().strip().split("\n")
    probs = open(prob_path).read().strip().split("\n")
    out = []
    for sim, prob in zip(sims, probs):
        score = pow(float(sim), float(prob))
        score = score.real
        out.append(repr(score))
    print(json.dumps(out))


def cmd_tsv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f, delimiter="\t"))
    print(json.dumps({"header": rows[0], "rows": rows[1:]}))


def cmd_search(path):
    data = json.load(open(path))
    captions = np.array(data["captions"], dtype=np.float64)
    queries = np.array(data["queries"], dtype=np.float64)

    def unit(m):
        norms = np.linalg.norm(m, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return m / norms

    scores = unit(queries) @ unit(captions).T
    rankings = [list(map(int, np.argsort(-row, kind="stable"))) for row in scores]
    recall = {}
    for k in data["ks"]:
        hits = sum(1 for ranking, rel in zip(rankings, data["relevant"]) if set(ranking[:k]) & set(rel))
        recall[str(k)] = hits / len(rankings)
    print(json.dumps({"rankings": rankings, "recall": recall}))


def read_vectors(path):
    words, rows = [], []
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip() for line in f if line.strip()]
    first = lines[0].split(" ")
    if len(first) == 2 and all(x.isdigit() for x in first):
        lines = lines[1:]
    table = {}
    for line in lines:
        parts = line.split(" ")
        if parts[0] not in table:
            v = np.array([float(x) for x in parts[1:]], dtype=np.float64)
            n = np.linalg.norm(v)
            table[parts[0]] = v / n if n > 0 else v
    return table


def cmd_sif(vectors_path, json_path):
    table = read_vectors(vectors_path)
    data = json.load(open(json_path))
    a = data["a"]
    counts = Counter(t for sentence in data["corpus"] for t in sentence)
    total = sum(counts.values())
    dim = len(next(iter(table.values())))

    def average(tokens):
        known = [t for t in tokens if t in table]
        v = np.zeros(dim)
        for t in known:
            v += a / (a + counts.get(t, 0) / total) * table[t]
        return v / len(known) if known else v

    corpus = np.array([average(s) for s in data["corpus"]])
    _, _, vt = np.linalg.svd(corpus, full_matrices=False)
    components = vt[: data["remove"]]

    def embed(tokens):
        v = average(tokens)
        for u in components:
            v = v - (v @ u) * u
        return v

    sims = []
    for x, y in data["pairs"]:
        vx, vy = embed(x), embed(y)
        nx, ny = np.linalg.norm(vx), np.linalg.norm(vy)
        sims.append(float(vx @ vy / (nx * ny)) if nx > 0 and ny > 0 else 0.0)
    print(json.dumps({"similarities": sims}))


def cmd_gender(json_path):
    data = json.load(open(json_path))
    groups = {g: set(data[g]) for g in ("man", "woman", "person")}
    table = defaultdict(lambda: {"person": 0, "man": 0, "woman": 0})
    for objects, caption in data["pairs"]:
        words = set(w.lower() for w in re.findall(r"[^\W\d_]+", caption))
        found = {g: bool(words & groups[g]) for g in groups}
        if not any(found.values()):
            continue
        for obj in set(objects):
            for g in groups:
                table[obj][g] += int(found[g])
    print(json.dumps(table, sort_keys=True))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {"pow": cmd_pow, "tsv": cmd_tsv, "search": cmd_search, "sif": cmd_sif, "gender": cmd_gender}[cmd](*args)


if __name__ == "__main__":
    main()
