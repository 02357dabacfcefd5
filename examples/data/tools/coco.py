"""Derives COCO-format files from the embedded sample data, for `dataflows/ssa-coco.toml`.

Reads the committed Flickr30k Entities-style files (`flickr30k_entities/Sentences`, `Annotations`,
the split lists), the COCO-instances detections (`detections/instances.json`) and the caption AMRs
(`amr/captions.amr`), and writes under `examples/data/coco/`:

- `captions.json`: COCO captions layout (`info`, `images` with `id`, `file_name`, `width`,
  `height`, `licenses`, `annotations` with `id`, `image_id`, `caption`). Caption `k` of image `i`
  has id `i * 10 + k` and is the caption as a sentence ("A young man rides a bicycle down a city
  street.").
- `coco_entities.json`: the COCO Entities layout capflow's `coco-entities` reader reads,
  `{image_id: {caption: {det_sequences, noun_chunks, detections, split}}}`. The caption is the
  lower-cased word tokens (punctuation dropped), as in the released file; captions keep their
  order `k`. `det_sequences` has one entry per token: the token's class inside a phrase, `null`
  outside. `detections[class] = [[det_id, [x1, y1, x2, y2]], ...]` in 0-based pixel corners.
- `captions.amr`: the caption AMRs with `# ::id <image>.<k>` (capflow's readers give both the AMR
  and the COCO Entities caption the caption id `<image>#<k>`), `# ::snt` / `# ::tok` set to the
  COCO Entities caption and the ISI alignments re-indexed to its tokens.

Classes. A phrase chain gets a COCO category (official names) from the first of its phrases whose
head (last word, plural stripped) is in HEAD_TO_COCO, else from its entity type (TYPE_TO_COCO:
every `people` chain is a `person`). Every phrase of a chain with a category and a box gets that
category; a phrase gets `_` (a noun chunk whose class is unknown) when its chain has no COCO
category (helmets, guitars, trees, ...), no box (`<scene>` or `<nobndbox>`), or is `notvisual`.

Boxes. Like COCO Entities' detector output, `detections[class]` lists every box of that class in
the image, the same list in each of the image's captions (a caption names its own classes only):
the boxes of all the image's chains of that class, in chain order, each box once. A chain box is
replaced by the embedded detection of the same category that overlaps it best (IoU >= 0.5, each
detection used once), keeping that detection's annotation id; other chain boxes are converted from
Flickr's 1-based corners (`x1 = xmin - 1`, `x2 = xmax`) and numbered from 950001. Detections no
chain matches are left out.

Standard library only; deterministic. Run from anywhere (`--out DIR` writes elsewhere):

    python3 examples/data/tools/coco.py
"""

import argparse
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLICKR = ROOT / "flickr30k_entities"
OUT = ROOT / "coco"

UNKNOWN = "_"
MATCH_IOU = 0.5
FIRST_NEW_DETECTION = 950001

# Phrase heads (singular) that name a COCO category. Heads not listed here (helmet, guitar,
# tree, fence, ...) have no COCO category; a chain whose heads are all unlisted and whose type is
# not in TYPE_TO_COCO is `_`.
HEAD_TO_COCO = {
    "bicycle": "bicycle", "bike": "bicycle", "car": "car", "bus": "bus", "boat": "boat",
    "rowboat": "boat", "dog": "dog", "cat": "cat", "horse": "horse", "pigeon": "bird",
    "bird": "bird", "backpack": "backpack", "ball": "sports ball", "basketball": "sports ball",
    "frisbee": "frisbee", "skateboard": "skateboard", "surfboard": "surfboard", "knife": "knife",
    "banana": "banana", "carrot": "carrot", "sandwich": "sandwich", "pizza": "pizza",
    "oven": "oven", "bench": "bench", "couch": "couch", "sofa": "couch", "plant": "potted plant",
}
# Flickr30k Entities types whose every chain is one COCO category.
TYPE_TO_COCO = {"people": "person"}

MARKUP_WORD = re.compile(r"\[/EN#(\d+)/(\S+)$")
ALIGNMENT = re.compile(r"~e\.(\d+(?:,\d+)*)")


def parse_caption(line, where):
    """Upstream Flickr30k Entities markup: (tokens, phrases with chain, types, start, end)."""
    tokens, phrases, current = [], [], None
    for raw in line.split(" "):
        if current is None and raw.startswith("[/EN#"):
            m = MARKUP_WORD.match(raw)
            if m is None:
                raise ValueError(f"{where}: bad phrase marker {raw!r}")
            current = {"chain": m.group(1), "types": m.group(2).split("/"), "start": len(tokens)}
            continue
        word = raw
        if current is not None and raw.endswith("]"):
            word = raw[:-1]
        tokens.append(word)
        if current is not None and raw.endswith("]"):
            current["end"] = len(tokens)
            phrases.append(current)
            current = None
    if current is not None:
        raise ValueError(f"{where}: unclosed phrase")
    return tokens, phrases


def read_annotation(image_id):
    """Image size and each chain's grounding: a list of 1-based boxes, or `scene` / `nobox`."""
    tree = ET.parse(FLICKR / "Annotations" / f"{image_id}.xml").getroot()
    size = (int(tree.findtext("size/width")), int(tree.findtext("size/height")))
    chains = {}
    for obj in tree.findall("object"):
        names = [n.text for n in obj.findall("name")]
        box = obj.find("bndbox")
        for name in names:
            if box is not None:
                corners = tuple(int(box.findtext(k)) for k in ("xmin", "ymin", "xmax", "ymax"))
                chains.setdefault(name, []).append(corners)
            elif obj.findtext("scene") == "1":
                chains[name] = "scene"
            else:
                chains[name] = "nobox"
    return size, chains


def read_splits():
    split_of = {}
    for split in ("train", "val", "test"):
        for line in (FLICKR / f"{split}.txt").read_text(encoding="utf-8").split():
            split_of[line] = split
    return split_of


def read_detections():
    """Embedded detections per image: (annotation id, category, [x1, y1, x2, y2])."""
    doc = json.loads((ROOT / "detections" / "instances.json").read_text(encoding="utf-8"))
    names = {c["id"]: c["name"] for c in doc["categories"]}
    out = {}
    for a in doc["annotations"]:
        x, y, w, h = a["bbox"]
        box = [x, y, round(x + w, 2), round(y + h, 2)]
        out.setdefault(str(a["image_id"]), []).append((a["id"], names[a["category_id"]], box))
    return out


def read_amrs():
    """AMR blocks by `# ::id`, and the file's header comment."""
    text = (ROOT / "amr" / "captions.amr").read_text(encoding="utf-8")
    blocks = {}
    for block in text.strip().split("\n\n"):
        m = re.search(r"^# ::id (\S+)$", block, re.M)
        if m:
            blocks[m.group(1)] = block
    return blocks


def singulars(word):
    yield word
    if word.endswith("ies"):
        yield word[:-3] + "y"
    if word.endswith("es"):
        yield word[:-2]
    if word.endswith("s"):
        yield word[:-1]


def chain_category(members):
    """COCO category of a chain from its (caption tokens, phrase) pairs in caption order, or None."""
    for tokens, phrase in members:
        head = tokens[phrase["end"] - 1].lower()
        for form in singulars(head):
            if form in HEAD_TO_COCO:
                return HEAD_TO_COCO[form]
    for _, phrase in members:
        for kind in phrase["types"]:
            if kind in TYPE_TO_COCO:
                return TYPE_TO_COCO[kind]
    return None


def iou(a, b):
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


class DetectionIds:
    def __init__(self):
        self.next = FIRST_NEW_DETECTION

    def new(self):
        self.next += 1
        return self.next - 1


def class_detections(chain_order, categories, groundings, detections, ids):
    """`{class: [[det_id, box], ...]}` for the image: its chains' boxes, matched to detections."""
    out, placed, used = {}, {}, set()
    for chain in chain_order:
        category, grounding = categories.get(chain), groundings.get(chain)
        if category is None or not isinstance(grounding, list):
            continue
        for corners in grounding:
            if corners in placed:
                continue
            box = [corners[0] - 1, corners[1] - 1, corners[2], corners[3]]
            candidates = [(iou(box, d[2]), d) for d in detections
                          if d[1] == category and d[0] not in used]
            best = max(candidates, key=lambda c: c[0], default=(0.0, None))
            if best[0] >= MATCH_IOU:
                det_id, _, box = best[1]
                used.add(det_id)
            else:
                det_id = ids.new()
            placed[corners] = True
            out.setdefault(category, []).append([det_id, box])
    return out


def remap_alignments(block, keep, where):
    """Rewrites `~e.N` to the kept tokens' new indices; an alignment to a dropped token fails."""
    def sub(m):
        indices = []
        for i in m.group(1).split(","):
            if int(i) not in keep:
                raise ValueError(f"{where}: a concept is aligned to dropped token {i}")
            indices.append(str(keep[int(i)]))
        return "~e." + ",".join(indices)

    return ALIGNMENT.sub(sub, block)


def sentence(tokens):
    """Caption tokens as a COCO caption: punctuation attached to the word before it."""
    text = " ".join(tokens)
    return re.sub(r" ([.,;:!?])", r"\1", text)


def entities_json(entities):
    """The COCO Entities document with one caption per line."""
    images = []
    for image_id, captions in entities.items():
        lines = [f"  {json.dumps(text)}: {json.dumps(entry)}" for text, entry in captions.items()]
        images.append(f" {json.dumps(image_id)}: {{\n" + ",\n".join(lines) + "\n }")
    return "{\n" + ",\n".join(images) + "\n}\n"


def build(out):
    splits = read_splits()
    detections = read_detections()
    amrs = read_amrs()
    ids = DetectionIds()
    images, annotations, entities, amr_blocks = [], [], {}, []
    for image_id in sorted(splits, key=int):
        size, groundings = read_annotation(image_id)
        lines = (FLICKR / "Sentences" / f"{image_id}.txt").read_text(encoding="utf-8").splitlines()
        captions = [parse_caption(line, f"{image_id}.{k}") for k, line in enumerate(lines)]
        by_chain, chain_order = {}, []
        for tokens, phrases in captions:
            for p in phrases:
                if p["chain"] not in by_chain:
                    chain_order.append(p["chain"])
                by_chain.setdefault(p["chain"], []).append((tokens, p))
        categories = {}
        for chain, members in by_chain.items():
            if chain == "0" or not isinstance(groundings.get(chain), list):
                continue
            category = chain_category(members)
            if category is not None:
                categories[chain] = category
        per_class = class_detections(chain_order, categories, groundings,
                                     detections.get(image_id, []), ids)
        images.append({"license": 1, "file_name": f"{image_id}.jpg", "height": size[1],
                       "width": size[0], "id": int(image_id)})
        entries = {}
        for k, (tokens, phrases) in enumerate(captions):
            where = f"{image_id}.{k}"
            annotations.append({"image_id": int(image_id), "id": int(image_id) * 10 + k,
                                "caption": sentence(tokens)})
            label = [None] * len(tokens)
            chunks = []
            for p in phrases:
                cls = categories.get(p["chain"], UNKNOWN)
                if p["start"] > 0 and label[p["start"] - 1] == cls:
                    raise ValueError(f"{where}: adjacent phrases of class {cls!r} would read as one")
                for i in range(p["start"], p["end"]):
                    label[i] = cls
                chunks.append([" ".join(tokens[p["start"]:p["end"]]).lower(), cls])
            keep = {}
            for i, t in enumerate(tokens):
                if any(c.isalnum() for c in t):
                    keep[i] = len(keep)
            words = [tokens[i].lower() for i in keep]
            text = " ".join(words)
            if text in entries:
                raise ValueError(f"{where}: caption repeats another of the image")
            named = [c for c in dict.fromkeys(label[i] for i in keep) if c not in (None, UNKNOWN)]
            entries[text] = {
                "det_sequences": [label[i] for i in keep],
                "noun_chunks": [[chunk, cls] for chunk, cls in chunks],
                "detections": {c: per_class[c] for c in named},
                "split": splits[image_id],
            }
            block = amrs.get(where)
            if block is None:
                raise ValueError(f"{where}: no AMR with this id")
            block = remap_alignments(block, keep, where)
            block = re.sub(r"^# ::snt .*$", f"# ::snt {text}", block, flags=re.M)
            block = re.sub(r"^# ::tok .*$", f"# ::tok {text}", block, flags=re.M)
            amr_blocks.append(block)
        entities[image_id] = entries
    captions_doc = {
        "info": {"description": "capflow sample captions (COCO captions layout)", "version": "1.0",
                 "year": 2025, "contributor": "capflow", "date_created": "2025/01/01"},
        "images": images,
        "licenses": [{"url": "https://www.apache.org/licenses/LICENSE-2.0", "id": 1,
                      "name": "Apache-2.0"}],
        "annotations": annotations,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "captions.json").write_text(json.dumps(captions_doc, indent=1) + "\n", encoding="utf-8")
    (out / "coco_entities.json").write_text(entities_json(entities), encoding="utf-8")
    header = ("# capflow sample AMRs on the COCO Entities captions: one graph per caption, "
              "ISI alignments (~e.N, 0-based token index)\n\n")
    (out / "captions.amr").write_text(header + "\n\n".join(amr_blocks) + "\n", encoding="utf-8")
    return len(images), len(annotations)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="output directory")
    out = parser.parse_args().out
    n_images, n_captions = build(out)
    print(f"wrote {n_images} images, {n_captions} captions under {out}")


if __name__ == "__main__":
    main()
