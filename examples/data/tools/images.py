"""Draws the sample images examples/data/images/<id>.png from the sample annotations.

Each picture is a simple synthetic scene at the size its annotation gives: a sky-to-ground
gradient and, for every boxed phrase chain of the image, a filled shape inside its box, coloured
by the first basic colour word its phrases use ("a red helmet" is red) or else by its phrase
type, drawn largest first so that small objects stay visible. Detections no caption mentions
are drawn too. Nothing is copied from any photograph; the images are under the project licence.

Standard library only; deterministic. Run from anywhere:

    python3 examples/data/tools/images.py
"""

import json
import re
import struct
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "images"

# Basic colour terms and the sRGB they are drawn with (capflow's built-in CutSwap scorer uses
# prototypes close to these, see src/augment/cutswap/rerank.rs).
COLOURS = {
    "black": (25, 25, 28), "white": (238, 238, 232), "gray": (128, 128, 132), "grey": (128, 128, 132),
    "red": (200, 32, 30), "green": (45, 150, 55), "blue": (40, 72, 198), "yellow": (238, 212, 45),
    "orange": (238, 140, 25), "brown": (122, 76, 38), "pink": (238, 150, 178), "purple": (120, 52, 148),
    "tan": (208, 178, 138),
}
TYPE_COLOURS = {
    "people": (176, 116, 86), "clothing": (92, 96, 150), "bodyparts": (196, 150, 122),
    "animals": (150, 104, 62), "vehicles": (64, 96, 168), "instruments": (164, 104, 44),
    "other": (214, 150, 70),
}
MARKUP = re.compile(r"\[/EN#(\d+)/(\S+) ([^\]]*)\]")


def chain_colours(sentences_file):
    """Colour of each chain: its first colour word, else its phrase type's colour."""
    colours, types = {}, {}
    for line in sentences_file.read_text(encoding="utf-8").splitlines():
        for chain, kind, phrase in MARKUP.findall(line):
            types.setdefault(chain, kind.split("/")[0])
            if chain in colours:
                continue
            for word in phrase.lower().split():
                if word in COLOURS:
                    colours[chain] = COLOURS[word]
                    break
    for chain, kind in types.items():
        if chain not in colours:
            base = TYPE_COLOURS.get(kind, TYPE_COLOURS["other"])
            # A small per-chain shift so that neighbours of one type stay apart.
            shift = (int(chain) * 37) % 41 - 20
            colours[chain] = tuple(max(0, min(255, c + shift)) for c in base)
    return colours, types


def read_boxes(xml_file):
    root = ET.parse(xml_file).getroot()
    size = root.find("size")
    width, height = int(size.find("width").text), int(size.find("height").text)
    boxes = []
    for obj in root.findall("object"):
        box = obj.find("bndbox")
        if box is None:
            continue
        names = [n.text for n in obj.findall("name")]
        # Flickr30k boxes are 1-based inclusive: pixel edges x1 = xmin - 1, x2 = xmax.
        x1, y1 = int(box.find("xmin").text) - 1, int(box.find("ymin").text) - 1
        x2, y2 = int(box.find("xmax").text), int(box.find("ymax").text)
        boxes.append((names, (x1, y1, x2, y2)))
    return width, height, boxes


def iou(a, b):
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = max(0, w) * max(0, h)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def draw(width, height, shapes, seed):
    sky = (150 + seed % 40, 185 + seed % 25, 225)
    ground = (110 + seed % 50, 140 + seed % 30, 90)
    horizon = height * 45 // 100
    rows = []
    for y in range(height):
        if y < horizon:
            t = y / max(1, horizon)
            colour = tuple(int(s * (1 - 0.25 * t)) for s in sky)
        else:
            t = (y - horizon) / max(1, height - horizon)
            colour = tuple(int(g * (1 - 0.3 * t)) for g in ground)
        rows.append(bytearray(bytes(colour) * width))
    for (x1, y1, x2, y2), colour, rounded in shapes:
        border = tuple(c * 2 // 3 for c in colour)
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        rx, ry = max(1.0, (x2 - x1) / 2), max(1.0, (y2 - y1) / 2)
        for y in range(max(0, y1), min(height, y2)):
            row = rows[y]
            for x in range(max(0, x1), min(width, x2)):
                dx, dy = (x + 0.5 - cx) / rx, (y + 0.5 - cy) / ry
                if rounded:
                    r = dx * dx + dy * dy
                    if r > 1.0:
                        continue
                    edge = r > 0.85
                else:
                    edge = x - x1 < 2 or x2 - 1 - x < 2 or y - y1 < 2 or y2 - 1 - y < 2
                row[3 * x:3 * x + 3] = bytes(border if edge else colour)
    return rows


def png(width, height, rows):
    raw = bytearray()
    previous = bytearray(3 * width)
    for row in rows:
        up = bytes((row[i] - previous[i]) & 0xFF for i in range(len(row)))
        sub = bytes((row[i] - (row[i - 3] if i >= 3 else 0)) & 0xFF for i in range(len(row)))
        if up.count(0) >= sub.count(0):
            raw += b"\x02" + up
        else:
            raw += b"\x01" + sub
        previous = row

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b"")


def main():
    OUT.mkdir(exist_ok=True)
    detections = json.loads((ROOT / "detections" / "instances.json").read_text(encoding="utf-8"))
    by_image = {}
    for det in detections["annotations"]:
        by_image.setdefault(det["image_id"], []).append(det)
    total = 0
    for xml_file in sorted((ROOT / "flickr30k_entities" / "Annotations").glob("*.xml")):
        image_id = int(xml_file.stem)
        colours, types = chain_colours(ROOT / "flickr30k_entities" / "Sentences" / f"{image_id}.txt")
        width, height, boxes = read_boxes(xml_file)
        shapes = []
        for names, box in boxes:
            chain = names[0]
            rounded = types.get(chain) in ("animals", "people", "bodyparts")
            shapes.append((box, colours.get(chain, TYPE_COLOURS["other"]), rounded))
        for det in by_image.get(image_id, []):
            x, y, w, h = det["bbox"]
            box = (int(x), int(y), int(x + w + 0.999), int(y + h + 0.999))
            if all(iou(box, b) < 0.5 for _, b in boxes):
                shapes.append((box, TYPE_COLOURS["other"], False))
        shapes.sort(key=lambda s: -(s[0][2] - s[0][0]) * (s[0][3] - s[0][1]))
        data = png(width, height, draw(width, height, shapes, image_id))
        (OUT / f"{image_id}.png").write_bytes(data)
        total += len(data)
    print(f"wrote {len(list(OUT.glob('*.png')))} images, {total} bytes")


if __name__ == "__main__":
    main()
