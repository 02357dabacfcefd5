"""Deterministic stand-in for every model kind, for protocol tests.

    deterministic.py KIND [--crash-on MARKER] [--hang-on MARKER] [--garbage]

Outputs (the Rust tests compute the same values independently):
  text_to_amr        '(s / say-01 :ARG1 "<TEXT UPPER-CASED>")'; with --amr-from FILE, the graph
                     of FILE whose `# ::snt` is the text, its alignments and every metadata line
                     but `# ::snt` removed (as amrlib writes graphs), or "" when FILE has none
  amr_to_text        the PENMAN string upper-cased
  quality_scorer     min(1, len(text) / 100)      (len counts code points)
  embedder           [len(text), count of 'a', index of the row in its batch] as float32
  image_text_scorer  1.0 if the image file name's stem occurs in the text, else 0.0

--crash-on: exit with status 3 (after a line on stderr) when an input contains MARKER; with
  --crash-once FLAGFILE, only when FLAGFILE does not exist yet (it is created before exiting 4).
--hang-on: sleep for an hour when an input contains MARKER.
--log FILE: append one line per request batch to FILE: the number of rows, a tab, the inputs
  joined by " | ".
--garbage: write plain text to stdout instead of a reply, then keep running.
--garbage-after-first: answer the first batch correctly, then write text to stdout.
Every process writes its pid to stderr first, so tests can check it was reaped.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "adapters"))
from capflow_adapter import serve  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("kind")
parser.add_argument("--crash-on")
parser.add_argument("--hang-on")
parser.add_argument("--crash-once")
parser.add_argument("--garbage", action="store_true")
parser.add_argument("--garbage-after-first", action="store_true")
parser.add_argument("--amr-from")
parser.add_argument("--log")
args = parser.parse_args()
print(f"deterministic adapter pid={os.getpid()} kind={args.kind}", file=sys.stderr, flush=True)


def unaligned_graphs(path):
    """The graphs of a PENMAN file by sentence, alignments and metadata but `# ::snt` removed."""
    import re

    graphs = {}
    for block in Path(path).read_text(encoding="utf-8").split("\n\n"):
        lines = block.strip().splitlines()
        snt = next((l[len("# ::snt "):] for l in lines if l.startswith("# ::snt ")), None)
        body = [l for l in lines if not l.startswith("#")]
        if snt is None or not body:
            continue
        graph = re.sub(r"~e\.[0-9,]+|~[0-9][0-9,]*", "", "\n".join(body))
        graphs[snt.strip()] = f"# ::snt {snt.strip()}\n{graph}"
    return graphs


AMRS = unaligned_graphs(args.amr_from) if args.amr_from else None


def inputs(batch):
    return [str(v) for name in batch.schema.names if name != "request_id"
            for v in batch.column(name).to_pylist()]


def handle(batch):
    if args.log:
        values = inputs(batch)
        with open(args.log, "a", encoding="utf-8") as log:
            log.write(f"{len(values)}\t{' | '.join(values)}\n")
    for value in inputs(batch):
        if args.crash_on and args.crash_on in value and not args.crash_once:
            print(f"crashing on marker in {value!r}", file=sys.stderr, flush=True)
            os._exit(3)
        if args.crash_once and args.crash_on in value and not Path(args.crash_once).exists():
            Path(args.crash_once).touch()
            print(f"crashing once on marker in {value!r}", file=sys.stderr, flush=True)
            os._exit(4)
        if args.hang_on and args.hang_on in value:
            print(f"hanging on marker in {value!r}", file=sys.stderr, flush=True)
            time.sleep(3600)
    if args.kind == "text_to_amr" and AMRS is not None:
        return [AMRS.get(t.strip(), "") for t in batch.column("text").to_pylist()]
    if args.kind == "text_to_amr":
        return [f'(s / say-01 :ARG1 "{t.upper()}")' for t in batch.column("text").to_pylist()]
    if args.kind == "amr_to_text":
        return [p.upper() for p in batch.column("penman").to_pylist()]
    if args.kind == "quality_scorer":
        return [min(1.0, len(t) / 100) for t in batch.column("text").to_pylist()]
    if args.kind == "embedder":
        return [[float(len(t)), float(t.count("a")), float(i)]
                for i, t in enumerate(batch.column("text").to_pylist())]
    if args.kind == "image_text_scorer":
        images = batch.column("image").to_pylist()
        texts = batch.column("text").to_pylist()
        return [1.0 if Path(img).stem in txt else 0.0 for img, txt in zip(images, texts)]
    raise SystemExit(f"unknown kind {args.kind}")


if args.garbage:
    # Read the first request like a real adapter, then answer with text instead of Arrow.
    import pyarrow as pa

    reader = pa.ipc.open_stream(sys.stdin.buffer)
    reader.read_next_batch()
    sys.stdout.buffer.write(b"hello, this is not arrow\n")
    sys.stdout.buffer.flush()
    time.sleep(3600)
elif args.garbage_after_first:
    # A well-formed first reply, then a stray print on the reply stream.
    import pyarrow as pa

    reader = pa.ipc.open_stream(sys.stdin.buffer)
    schema = pa.schema([("request_id", pa.int64()), ("score", pa.float64())])
    writer = pa.ipc.new_stream(sys.stdout.buffer, schema)
    first = reader.read_next_batch()
    writer.write_batch(pa.record_batch([first.column("request_id"), pa.array(handle(first))],
                                       schema=schema))
    sys.stdout.buffer.flush()
    reader.read_next_batch()
    sys.stdout.buffer.write(b"loading weights... done\n")
    sys.stdout.buffer.flush()
    time.sleep(3600)
else:
    serve(args.kind, handle)
