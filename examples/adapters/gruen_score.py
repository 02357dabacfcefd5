"""capflow quality_scorer adapter: GRUEN scores of sentences (SSA's quality filter in the paper).

    python3 examples/adapters/gruen_score.py --gruen-dir DIR

GRUEN (Zhu and Bhat, 2020) is not a package: clone https://github.com/WanzhengZhu/GRUEN into
DIR, install its requirements (``pip install -r DIR/requirements.txt pyarrow``) and download
its CoLA model as its README says (``DIR/cola_model``). The adapter calls GRUEN's own
``Main.get_gruen(candidates)`` on each request's sentences; its scores lie in [0, 1], and SSA's
recipes keep a sentence scoring above ``quality_threshold`` (0.7, the paper's threshold).
GRUEN loads its models from paths relative to its directory, so the adapter runs from DIR.
See docs/adapters.md.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capflow_adapter import serve  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--gruen-dir", required=True, help="a clone of WanzhengZhu/GRUEN")
args = parser.parse_args()

gruen_dir = os.path.abspath(args.gruen_dir)
os.chdir(gruen_dir)
sys.path.insert(0, gruen_dir)
from Main import get_gruen  # noqa: E402  (GRUEN's module, after --help)


def score(batch):
    sentences = batch.column("text").to_pylist()
    return [min(1.0, max(0.0, float(s))) for s in get_gruen(sentences)]


serve("quality_scorer", score)
