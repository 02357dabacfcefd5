"""Writes the capflow sample dataset under examples/data/ from the hand-written content.py.

Run with a Python that has `penman` (1.3) installed, from anywhere:

    python examples/data/tools/build.py

The output is deterministic (detector jitter and scores come from a fixed seed). The script
refuses to write anything when a check fails: a markup error, a concept it cannot align to a
token, a box outside its image, a graph `penman` cannot read.
"""

import json
import random
import re
import sys
from pathlib import Path

import penman
from penman import surface

sys.path.insert(0, str(Path(__file__).resolve().parent))
from content import IMAGES  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TYPES = {"people", "clothing", "bodyparts", "animals", "vehicles", "instruments", "scene", "other", "notvisual"}

# Official COCO category ids of the categories the sample detector output uses.
COCO_CATEGORIES = {
    "person": (1, "person"), "bicycle": (2, "vehicle"), "car": (3, "vehicle"), "bus": (6, "vehicle"),
    "boat": (9, "vehicle"), "traffic light": (10, "outdoor"), "stop sign": (13, "outdoor"),
    "bench": (15, "outdoor"), "bird": (16, "animal"), "cat": (17, "animal"), "dog": (18, "animal"),
    "horse": (19, "animal"), "cow": (21, "animal"), "backpack": (27, "accessory"),
    "umbrella": (28, "accessory"), "handbag": (31, "accessory"), "suitcase": (33, "accessory"),
    "frisbee": (34, "sports"), "sports ball": (37, "sports"), "skateboard": (41, "sports"),
    "surfboard": (42, "sports"), "bottle": (44, "kitchen"), "cup": (47, "kitchen"),
    "knife": (49, "kitchen"), "bowl": (51, "kitchen"), "banana": (52, "food"), "apple": (53, "food"),
    "sandwich": (54, "food"), "orange": (55, "food"), "carrot": (57, "food"), "pizza": (59, "food"),
    "couch": (63, "furniture"), "potted plant": (64, "furniture"), "remote": (75, "electronic"),
    "oven": (79, "appliance"), "book": (84, "indoor"),
}

# Token forms that are not regular inflections of the concept's lemma.
IRREGULAR = {
    "man": {"men"}, "woman": {"women"}, "child": {"children"}, "person": {"people", "person"},
    "throw": {"thrown", "threw"}, "sit": {"sits", "sitting", "sat"}, "lie": {"lies", "lying"},
    "stand": {"stood"}, "hold": {"held"}, "run": {"runs", "running", "ran"}, "fly": {"flies", "flying"},
    "old": {"older", "old"}, "shop": {"shopping"}, "swim": {"swimming"}, "wood": {"wooden"},
    "grass": {"grassy"}, "chop": {"chops", "chopping"}, "dusty": {"dusty"}, "sandy": {"sandy"},
    "drag": {"dragging"},
}
# Concepts that AMR introduces without a token of their own.
NO_TOKEN = {"person", "have-rel-role-91", "and", "thing", "name"}
NUMBERS = {"1": {"one", "1"}, "2": {"two", "2"}, "3": {"three", "3"}, "4": {"four", "4"}}


def forms(concept):
    lemma = re.sub(r"-\d+$", "", concept)
    out = {lemma, lemma + "s", lemma + "es", lemma + "ing", lemma + "ed", lemma + "d"}
    if lemma.endswith("e"):
        out |= {lemma[:-1] + "ing"}
    if lemma.endswith("y"):
        out |= {lemma[:-1] + "ies"}
    if re.search(r"[^aeiou][aeiou][bdgmnprt]$", lemma):
        out |= {lemma + lemma[-1] + "ing", lemma + lemma[-1] + "ed"}
    out |= IRREGULAR.get(lemma, set())
    return out


def parse_markup(line, where):
    """Upstream get_sentence_data, stricter: returns (tokens, phrases)."""
    tokens, phrases, current = [], [], None
    for raw in line.split(" "):
        if raw == "":
            raise ValueError(f"{where}: double space")
        if current is not None:
            if raw.endswith("]"):
                current["words"].append(raw[:-1])
                tokens.append(raw[:-1])
                phrases.append(current)
                current = None
            else:
                if "[" in raw or "]" in raw:
                    raise ValueError(f"{where}: nested bracket in {raw!r}")
                current["words"].append(raw)
                tokens.append(raw)
        elif raw.startswith("[/EN#"):
            parts = raw[1:].split("/")
            chain = parts[1][3:]
            types = parts[2:]
            if not types or any(t not in TYPES for t in types):
                raise ValueError(f"{where}: bad types in {raw!r}")
            current = {"chain": chain, "types": types, "start": len(tokens), "words": []}
        else:
            if "[" in raw or "]" in raw:
                raise ValueError(f"{where}: stray bracket in {raw!r}")
            tokens.append(raw)
    if current is not None:
        raise ValueError(f"{where}: unclosed phrase")
    return tokens, phrases


INSTANCE = re.compile(r"\((\w+) / ([^\s()~]+)(?:~([^\s()]+))?")
QUANT = re.compile(r":quant (\d+)(?:~([^\s()]+))?")


def align(amr, tokens, where):
    """Adds ISI `~e.N` alignments: hints `~word` pick that token, `~-` leaves an elided
    concept unaligned, other concepts their lemma's token."""
    lowered = [t.lower() for t in tokens]
    used = set()
    variables = []

    def pick(candidates, hint, label):
        if hint is not None:
            matches = [i for i, t in enumerate(lowered) if t == hint.lower()]
            if not matches:
                raise ValueError(f"{where}: hint {hint!r} for {label} is not a token")
            free = [i for i in matches if i not in used]
            index = (free or matches)[0]
        else:
            free = [i for i, t in enumerate(lowered) if t in candidates and i not in used]
            if not free:
                return None
            index = free[0]
        used.add(index)
        return index

    def instance(m):
        var, concept, hint = m.group(1), m.group(2), m.group(3)
        variables.append(var)
        if hint == "-":  # elided head ("the other" for "the other dog"): no token of its own
            return f"({var} / {concept}"
        if hint is None and concept in NO_TOKEN and concept not in lowered:
            return f"({var} / {concept}"
        index = pick(forms(concept), hint, concept)
        if index is None:
            raise ValueError(f"{where}: no token for concept {concept!r} in {tokens}")
        return f"({var} / {concept}~e.{index}"

    def quant(m):
        number, hint = m.group(1), m.group(2)
        index = pick(NUMBERS.get(number, {number}), hint, number)
        if index is None:
            raise ValueError(f"{where}: no token for :quant {number}")
        return f":quant {number}~e.{index}"

    text = INSTANCE.sub(instance, amr)
    text = QUANT.sub(quant, text)
    if "~" in re.sub(r"~e\.\d+", "", text):
        raise ValueError(f"{where}: unresolved hint in {text}")
    duplicates = {v for v in variables if variables.count(v) > 1}
    if duplicates:
        raise ValueError(f"{where}: variables defined twice: {sorted(duplicates)}")
    return text


def chain_id(image_index, local):
    return "0" if local == 0 else str(image_index * 1000 + local)


def check_box(box, size, where):
    xmin, ymin, xmax, ymax = box
    w, h = size
    if not (1 <= xmin < xmax <= w and 1 <= ymin < ymax <= h):
        raise ValueError(f"{where}: box {box} outside 1..{w} x 1..{h}")


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def build_flickr_and_amr():
    amr_blocks = []
    splits = {"train": [], "val": [], "test": []}
    for index, image in enumerate(IMAGES, start=1):
        image_id = image["id"]
        size = image["size"]
        splits[image["split"]].append(image_id)
        chains = image["chains"]
        for local, (kind, grounding) in chains.items():
            if isinstance(grounding, list):
                for box in grounding:
                    check_box(box, size, f"{image_id} chain {local}")
        lines = []
        for k, (markup, amr) in enumerate(image["captions"]):
            where = f"{image_id}.{k}"
            tokens, phrases = parse_markup(markup, where)
            if not 5 <= len(tokens) <= 25:
                raise ValueError(f"{where}: {len(tokens)} tokens")
            out = markup
            for phrase in phrases:
                local = int(phrase["chain"])
                if local == 0:
                    if phrase["types"] != ["notvisual"]:
                        raise ValueError(f"{where}: chain 0 must be notvisual")
                    continue
                if local not in chains or chains[local][0] not in phrase["types"]:
                    raise ValueError(f"{where}: chain {local} unknown or of another type")
            out = re.sub(r"\[/EN#(\d+)/", lambda m: f"[/EN#{chain_id(index, int(m.group(1)))}/", markup)
            lines.append(out)
            aligned = align(amr, tokens, where)
            graph = penman.decode(aligned)
            graph.metadata = {"id": where, "snt": " ".join(tokens), "tok": " ".join(tokens)}
            for triple, alignment in surface.alignments(graph).items():
                for i in alignment.indices:
                    if i >= len(tokens):
                        raise ValueError(f"{where}: alignment {i} out of range")
            amr_blocks.append(penman.encode(graph, indent=6))
        write(ROOT / "flickr30k_entities" / "Sentences" / f"{image_id}.txt", "\n".join(lines) + "\n")
        write(ROOT / "flickr30k_entities" / "Annotations" / f"{image_id}.xml", annotation_xml(index, image))
    for split, ids in splits.items():
        write(ROOT / "flickr30k_entities" / f"{split}.txt", "\n".join(ids) + "\n")
    header = "# capflow sample AMRs: one graph per caption, ISI alignments (~e.N, 0-based token index)\n\n"
    write(ROOT / "amr" / "captions.amr", header + "\n\n".join(amr_blocks) + "\n")


def annotation_xml(index, image):
    w, h = image["size"]
    objects = {}  # box -> [chain ids], in first-seen order
    flagged = []
    for local, (kind, grounding) in image["chains"].items():
        name = chain_id(index, local)
        if isinstance(grounding, list):
            for box in grounding:
                objects.setdefault(box, []).append(name)
        else:
            flagged.append((name, grounding))
    out = ["<annotation>", f"\t<filename>{image['id']}.jpg</filename>", "\t<size>",
           f"\t\t<width>{w}</width>", f"\t\t<height>{h}</height>", "\t\t<depth>3</depth>", "\t</size>"]
    for box, names in objects.items():
        out.append("\t<object>")
        out.extend(f"\t\t<name>{n}</name>" for n in names)
        out += ["\t\t<bndbox>", f"\t\t\t<xmin>{box[0]}</xmin>", f"\t\t\t<ymin>{box[1]}</ymin>",
                f"\t\t\t<xmax>{box[2]}</xmax>", f"\t\t\t<ymax>{box[3]}</ymax>", "\t\t</bndbox>", "\t</object>"]
    for name, flag in flagged:
        out += ["\t<object>", f"\t\t<name>{name}</name>",
                f"\t\t<nobndbox>{1 if flag == 'nobox' else 0}</nobndbox>",
                f"\t\t<scene>{1 if flag == 'scene' else 0}</scene>", "\t</object>"]
    out.append("</annotation>")
    return "\n".join(out) + "\n"


def to_xyxy0(box):
    """Flickr 1-based inclusive corners to 0-based pixel-edge coordinates."""
    return (box[0] - 1, box[1] - 1, box[2], box[3])


def build_detections():
    rng = random.Random(20240611)
    images, annotations, used = [], [], set()
    for image in IMAGES:
        w, h = image["size"]
        images.append({"license": 1, "file_name": f"{image['id']}.jpg", "height": h, "width": w,
                       "id": int(image["id"])})
        objects = []
        for local, category in image["det"].items():
            for box in image["chains"][local][1]:
                objects.append((category, box))
        objects += list(image["extra_det"])
        if not 2 <= len(objects) <= 8:
            raise ValueError(f"{image['id']}: {len(objects)} detections")
        for category, box in objects:
            x1, y1, x2, y2 = to_xyxy0(box)
            bw, bh = x2 - x1, y2 - y1
            jx1 = min(max(x1 + rng.uniform(-0.03, 0.03) * bw, 0.0), w - 1.0)
            jy1 = min(max(y1 + rng.uniform(-0.03, 0.03) * bh, 0.0), h - 1.0)
            jx2 = min(max(x2 + rng.uniform(-0.03, 0.03) * bw, jx1 + 1.0), float(w))
            jy2 = min(max(y2 + rng.uniform(-0.03, 0.03) * bh, jy1 + 1.0), float(h))
            bbox = [round(jx1, 2), round(jy1, 2), round(jx2 - jx1, 2), round(jy2 - jy1, 2)]
            if bbox[0] + bbox[2] > w or bbox[1] + bbox[3] > h:
                bbox[2] = round(min(bbox[2], w - bbox[0]) - 0.01, 2)
                bbox[3] = round(min(bbox[3], h - bbox[1]) - 0.01, 2)
            used.add(category)
            annotations.append({"area": round(bbox[2] * bbox[3], 2), "iscrowd": 0, "image_id": int(image["id"]),
                                "bbox": bbox, "category_id": COCO_CATEGORIES[category][0],
                                "id": 900001 + len(annotations), "score": round(rng.uniform(0.45, 0.99), 3)})
    categories = sorted(({"supercategory": COCO_CATEGORIES[c][1], "id": COCO_CATEGORIES[c][0], "name": c}
                         for c in used), key=lambda c: c["id"])
    document = {
        "info": {"description": "capflow sample detections", "version": "1.0", "year": 2025,
                 "contributor": "capflow", "date_created": "2025/01/01"},
        "images": images,
        "licenses": [{"url": "https://www.apache.org/licenses/LICENSE-2.0", "id": 1, "name": "Apache-2.0"}],
        "annotations": annotations,
        "categories": categories,
    }
    write(ROOT / "detections" / "instances.json", json.dumps(document, indent=1) + "\n")


def build_visual_genome():
    object_id, relationship_id = 3000001, 4000001
    graphs, image_data = [], []
    for image in IMAGES:
        if "vg" not in image:
            continue
        w, h = image["size"]
        objects, by_name = [], {}
        for ref, name, attributes, synset in image["vg"]["objects"]:
            box = image["chains"][ref][1][0] if isinstance(ref, int) else ref
            check_box(box, image["size"], f"vg {image['id']} {name}")
            x1, y1, x2, y2 = to_xyxy0(box)
            objects.append({"object_id": object_id, "x": x1, "y": y1, "w": x2 - x1, "h": y2 - y1,
                            "names": [name], "synsets": [synset], "attributes": attributes})
            by_name.setdefault(name, []).append(object_id)
            object_id += 1
        relationships = []
        for subject, predicate, obj, synset in image["vg"]["relationships"]:
            def resolve(ref):
                name, _, nth = ref.partition("#")
                return by_name[name][int(nth or 1) - 1]
            relationships.append({"relationship_id": relationship_id, "predicate": predicate,
                                  "subject_id": resolve(subject), "object_id": resolve(obj),
                                  "synsets": [synset] if synset else []})
            relationship_id += 1
        graphs.append({"image_id": int(image["id"]), "objects": objects, "relationships": relationships})
        image_data.append({"width": w, "height": h, "url": f"images/{image['id']}.jpg",
                           "image_id": int(image["id"]), "coco_id": None, "flickr_id": int(image["id"])})
    write(ROOT / "visual_genome" / "scene_graphs.json", json.dumps(graphs, indent=1) + "\n")
    write(ROOT / "visual_genome" / "image_data.json", json.dumps(image_data, indent=1) + "\n")


def build_gbc():
    rng = random.Random(7)
    records = []
    for image in IMAGES:
        if "gbc" not in image:
            continue
        records.append(gbc_record(image, image["gbc"], rng))
    write(ROOT / "gbc" / "sample_gbc.jsonl", "".join(json.dumps(r) + "\n" for r in records))


def gbc_record(image, spec, rng):
    w, h = image["size"]

    def norm(box):
        x1, y1, x2, y2 = to_xyxy0(box)
        return {"left": x1 / w, "top": y1 / h, "right": x2 / w, "bottom": y2 / h}

    def union(boxes):
        return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))

    vertices = {}
    order = []

    def vertex(vid, label, box, descs, confidence):
        bbox = norm(box) if box else {"left": 0.0, "top": 0.0, "right": 1.0, "bottom": 1.0}
        bbox["confidence"] = confidence
        vertices[vid] = {"vertex_id": vid, "bbox": bbox, "label": label, "descs": descs,
                         "in_edges": [], "out_edges": [], "_box": box}
        order.append(vid)

    def edge(source, text, target):
        e = {"source": source, "text": text, "target": target}
        vertices[source]["out_edges"].append(e)
        vertices[target]["in_edges"].append(dict(e))

    def confidence():
        return round(rng.uniform(0.3, 0.9), 4)

    vertex("", "image", None, [{"text": spec["detail"], "label": "detail"},
                               {"text": spec["short"], "label": "short"}], None)
    box_of = {}
    if "composition" in spec:
        name, local, member_texts, member_descs, layout = spec["composition"]
        boxes = image["chains"][local][1]
        vertex(name, "composition", union(boxes), [{"text": layout, "label": "composition"}], None)
        edge("", name, name)
        box_of[name] = union(boxes)
        for k, (text, desc) in enumerate(zip(member_texts, member_descs)):
            vid = f"{name}_{k}"
            vertex(vid, "entity", boxes[k], [{"text": desc, "label": "detail"}], confidence())
            edge(name, text, vid)
    for name, local, desc in spec["entities"]:
        box = image["chains"][local][1][0]
        vertex(name, "entity", box, [{"text": desc, "label": "detail"}], confidence())
        edge("", name, name)
        box_of[name] = box
    for parent, text, local, desc in spec["children"]:
        vid = f"{parent}_{text}"
        vertex(vid, "entity", image["chains"][local][1][0], [{"text": desc, "label": "detail"}], confidence())
        edge(parent, text, vid)
    for members, desc in spec["relations"]:
        members = sorted(members)
        vid = "[" + "|".join(members) + "]"
        vertex(vid, "relation", union([box_of[m] for m in members]), [{"text": desc, "label": "relation"}], None)
        for m in members:
            edge("", m, vid)
        for m in members:
            edge(vid, m, m)

    def area(b):
        return max(0, b[2] - b[0]) * max(0, b[3] - b[1])

    full = (1, 1, w, h)
    for a in order:
        box_a = vertices[a]["_box"] or full
        subs = []
        for b in order:
            if a == b:
                continue
            box_b = vertices[b]["_box"] or full
            inter = (max(box_a[0], box_b[0]), max(box_a[1], box_b[1]), min(box_a[2], box_b[2]), min(box_a[3], box_b[3]))
            if area(box_b) and area(inter) / area(box_b) > 0.85:
                subs.append(b)
        vertices[a]["sub_masks"] = sorted(subs)
    for a in order:
        vertices[a]["super_masks"] = sorted(b for b in order if a in vertices[b]["sub_masks"])
    out = []
    for vid in order:
        v = vertices[vid]
        del v["_box"]
        out.append(v)
    plain = [" ".join(parse_markup(m, image["id"])[0]) for m, _ in image["captions"]]
    return {"vertices": out, "img_url": None, "img_path": f"{image['id']}.jpg", "original_caption": plain[0],
            "short_caption": spec["short"], "detail_caption": spec["detail"], "img_size": [w, h],
            "mask_inside_threshold": 0.85}


def main():
    build_flickr_and_amr()
    build_detections()
    build_visual_genome()
    build_gbc()
    print(f"wrote {len(IMAGES)} images under {ROOT}")


if __name__ == "__main__":
    main()
