"""capflow amr_to_text adapter: PENMAN graphs -> sentences with amrlib's graph-to-sentence model.

    python3 examples/adapters/amrlib_generate.py [--model-dir DIR] [--device cuda:0] [--batch-size 16] [--num-beams 4]

Install ``pip install amrlib pyarrow`` and a generate model (e.g. ``generate_t5wtense``) from
amrlib's model releases, unpacked and linked as ``amrlib/data/model_gtos`` or passed with
``--model-dir``. See docs/adapters.md.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capflow_adapter import serve  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model-dir", help="amrlib gtos model directory (default: amrlib's model_gtos link)")
parser.add_argument("--device", help="torch device, e.g. cuda:0 or cpu (default: amrlib's choice)")
parser.add_argument("--batch-size", type=int, default=16, help="graphs per model forward pass")
parser.add_argument("--num-beams", type=int, default=1, help="beam size (1 = greedy)")
args = parser.parse_args()

import amrlib  # noqa: E402

options = {"batch_size": args.batch_size, "num_beams": args.num_beams, "num_ret_seq": 1}
if args.device:
    options["device"] = args.device
gtos = amrlib.load_gtos_model(model_dir=args.model_dir, **options)


def generate(batch):
    graphs = batch.column("penman").to_pylist()
    # generate() returns (sentences, clipped flags); with num_ret_seq=1 there is one sentence
    # per graph, in order. use_tense=False: the sampled event graphs carry no `snt` metadata.
    sentences, _clipped = gtos.generate(graphs, disable_progress=True, use_tense=False)
    return sentences


serve("amr_to_text", generate)
