"""capflow text_to_amr adapter: captions -> aligned PENMAN graphs with IBM's transition-amr-parser.

    python3 examples/adapters/ibm_parse.py [--model AMR3-structbart-L] [--beam 1]

Install ``pip install transition-neural-parser pyarrow`` (and ``torch-scatter`` for your torch,
as the parser's README says). The model is downloaded by the parser on first use
(``AMRParser.from_pretrained``). The parser emits token alignments: each graph is written with
ISI alignments (``~e.N``, 0-based token indices) and a ``# ::tok`` line with the parser's own
tokens, which capflow maps to the caption's tokens. See docs/adapters.md.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capflow_adapter import serve  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default="AMR3-structbart-L",
                    help="pretrained model name for AMRParser.from_pretrained")
parser.add_argument("--beam", type=int, default=1, help="beam size")
parser.add_argument("--batch-size", type=int, default=128,
                    help="tokens per model batch (the parser's batch_size)")
args = parser.parse_args()

from transition_amr_parser.parse import AMRParser  # noqa: E402  (after --help)

amr_parser = AMRParser.from_pretrained(args.model)


def with_tokens(penman, tokens):
    """The graph with a `# ::tok` line (the parser's tokens) before its first graph line."""
    lines = [line for line in penman.splitlines() if not line.startswith("# ::tok ")]
    head = [line for line in lines if line.startswith("#")]
    body = [line for line in lines if not line.startswith("#")]
    return "\n".join(head + ["# ::tok " + " ".join(tokens)] + body)


def parse(batch):
    captions = batch.column("text").to_pylist()
    tokens = [amr_parser.tokenize(caption)[0] for caption in captions]
    # Copies: some parser versions append their <ROOT> token to the lists they are given.
    _, machines = amr_parser.parse_sentences([list(t) for t in tokens],
                                             batch_size=args.batch_size, beam=args.beam)
    graphs = []
    for toks, machine in zip(tokens, machines):
        try:
            amr = machine.get_amr()
            graphs.append(with_tokens(amr.to_penman(jamr=False, isi=True), toks))
        except Exception as error:  # one caption the parser failed on: a rejected record
            print(f"no graph for {' '.join(toks)!r}: {error}", file=sys.stderr, flush=True)
            graphs.append("")
    return graphs


serve("text_to_amr", parse)
