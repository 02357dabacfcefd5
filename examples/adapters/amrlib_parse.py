"""capflow text_to_amr adapter: captions -> PENMAN graphs with amrlib's sentence-to-graph model.

    python3 examples/adapters/amrlib_parse.py [--model-dir DIR] [--device cuda:0] [--batch-size 16]

Install ``pip install amrlib pyarrow`` and a parse model (e.g. ``parse_xfm_bart_large``) from
amrlib's model releases, unpacked and linked as ``amrlib/data/model_stog`` or passed with
``--model-dir``. See docs/adapters.md.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capflow_adapter import serve  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model-dir", help="amrlib stog model directory (default: amrlib's model_stog link)")
parser.add_argument("--device", help="torch device, e.g. cuda:0 or cpu (default: amrlib's choice)")
parser.add_argument("--batch-size", type=int, default=16, help="sentences per model forward pass")
args = parser.parse_args()

import amrlib  # noqa: E402  (after argument parsing, so --help is fast)

options = {"batch_size": args.batch_size}
if args.device:
    options["device"] = args.device
stog = amrlib.load_stog_model(model_dir=args.model_dir, **options)


def parse(batch):
    captions = batch.column("text").to_pylist()
    graphs = stog.parse_sents(captions, add_metadata=True)
    # amrlib returns None for a caption it could not parse; an empty graph string makes capflow
    # reject that one record instead of failing the batch.
    return [graph if graph is not None else "" for graph in graphs]


serve("text_to_amr", parse)
