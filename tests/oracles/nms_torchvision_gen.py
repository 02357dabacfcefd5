"""Writes tests/data/nms_torchvision.json: torchvision.ops.nms keep lists on random boxes.

The expectations are produced by real torchvision (CPU kernel, float64 tensors) so that
`tests/detections.rs` checks capflow's NMS against it without needing torch at test time.

    PYTHONPATH=<dir with torchvision> python tests/oracles/nms_torchvision_gen.py

Recorded with torch 2.11.0 and torchvision 0.26.0. The cases mix integer corners (exact IoU
ties), tied scores (stable order), duplicate and zero-area boxes, and thresholds from 0 to 1.
"""

import json
import pathlib
import random

import torch
import torchvision
from torchvision.ops import nms


def random_case(rng, n, integer, score_levels, degenerate_share):
    boxes, scores = [], []
    for _ in range(n):
        if integer:
            x1, y1 = rng.randint(0, 60), rng.randint(0, 60)
            w, h = rng.randint(0, 40), rng.randint(0, 40)
        else:
            x1, y1 = round(rng.uniform(0, 600), 2), round(rng.uniform(0, 400), 2)
            w, h = round(rng.uniform(0, 250), 2), round(rng.uniform(0, 250), 2)
        if rng.random() < degenerate_share:
            w = 0
        boxes.append([float(x1), float(y1), float(x1 + w), float(y1 + h)])
        if score_levels:
            scores.append(rng.randint(0, score_levels) / score_levels)
        else:
            scores.append(round(rng.random(), 6))
    # A few exact duplicates of earlier boxes.
    for i in range(n // 10):
        j = rng.randrange(n)
        boxes[rng.randrange(n)] = list(boxes[j])
    return boxes, scores


def gbc_select(boxes, scores, width, height, single):
    """ml-gbc's DetectionTextInput.select_bboxes with DetectionAction's GBC settings (score 0.35,
    area > 5000, max_rel_area 0.8, NMS 0.05 single / 0.2 multiple, drop containing boxes,
    tolerance 0.05 for single, top 6), written out with torch and torchvision as ml-gbc runs it;
    returns the kept input indices in output order."""
    b = torch.tensor(boxes, dtype=torch.float64).reshape(-1, 4)
    s = torch.tensor(scores, dtype=torch.float64)
    idx = torch.arange(len(boxes))
    keep = s > 0.35
    b, s, idx = b[keep], s[keep], idx[keep]
    area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    keep = area > 5000
    b, s, idx, area = b[keep], s[keep], idx[keep], area[keep]
    keep = area / (width * height) < 0.8
    b, s, idx = b[keep], s[keep], idx[keep]
    k = nms(b, s, iou_threshold=0.05 if single else 0.2)
    rows = [(bb, sc, ii) for bb, sc, ii in zip(b[k].tolist(), s[k].tolist(), idx[k].tolist())]

    def inside(a, o):
        return a[0] >= o[0] and a[2] <= o[2] and a[1] >= o[1] and a[3] <= o[3]

    rows = [
        r for i, r in enumerate(rows)
        if not any(j != i and inside(o[0], r[0]) for j, o in enumerate(rows))
    ]
    if single and rows:
        best = max(r[1] for r in rows)
        rows = [r for r in rows if best - r[1] < 0.05]
    if len(rows) > 6:
        rows = sorted(rows, key=lambda r: r[1], reverse=True)[:6]
    return [r[2] for r in rows]


def main():
    rng = random.Random(20261121)
    cases = []
    sizes = [0, 1, 2, 3, 5, 8, 13, 21, 40, 80]
    thresholds = [0.0, 0.05, 0.2, 0.5, 1.0]
    for n in sizes:
        for integer in (True, False):
            for score_levels in (0, 4):
                boxes, scores = random_case(rng, n, integer, score_levels, 0.05)
                for t in thresholds:
                    b = torch.tensor(boxes, dtype=torch.float64).reshape(-1, 4)
                    s = torch.tensor(scores, dtype=torch.float64)
                    keep = nms(b, s, t).tolist()
                    cases.append(
                        {"iou_threshold": t, "boxes": boxes, "scores": scores, "keep": keep}
                    )
    pipeline = []
    for n in [0, 1, 3, 6, 10, 20, 40]:
        for single in (True, False):
            for _ in range(4):
                width, height = 640.0, 480.0
                boxes, scores = [], []
                for _ in range(n):
                    x1, y1 = rng.randint(0, 500), rng.randint(0, 380)
                    w, h = rng.randint(10, 400), rng.randint(10, 300)
                    boxes.append([float(x1), float(y1), float(min(x1 + w, 640)), float(min(y1 + h, 480))])
                    scores.append(rng.randint(20, 100) / 100)
                keep = gbc_select(boxes, scores, width, height, single)
                pipeline.append({"single": single, "width": width, "height": height,
                                 "boxes": boxes, "scores": scores, "keep": keep})
    out = {
        "generator": "tests/oracles/nms_torchvision_gen.py",
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cases": cases,
        "gbc_pipeline": pipeline,
    }
    path = pathlib.Path(__file__).resolve().parents[1] / "data" / "nms_torchvision.json"
    path.write_text(json.dumps(out) + "\n")
    print(f"{len(cases)} cases -> {path}")


if __name__ == "__main__":
    main()
