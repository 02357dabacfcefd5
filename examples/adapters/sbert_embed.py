"""capflow embedder adapter: texts -> vectors with sentence-transformers.

    python3 examples/adapters/sbert_embed.py [--model all-MiniLM-L6-v2] [--device cuda] [--batch-size 64]

Install ``pip install sentence-transformers pyarrow``; the model is downloaded from the Hugging
Face Hub on first use (set ``HF_HOME`` to choose the cache, ``HF_HUB_OFFLINE=1`` to forbid
downloads once cached). See docs/adapters.md.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capflow_adapter import serve  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
parser.add_argument("--device", help="torch device (default: sentence-transformers' choice)")
parser.add_argument("--batch-size", type=int, default=64)
parser.add_argument("--no-normalize", action="store_true", help="keep raw, unnormalised vectors")
args = parser.parse_args()

import pyarrow as pa  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

model = SentenceTransformer(args.model, device=args.device)


def embed(batch):
    texts = batch.column("text").to_pylist()
    vectors = model.encode(
        texts,
        batch_size=args.batch_size,
        convert_to_numpy=True,
        normalize_embeddings=not args.no_normalize,
        show_progress_bar=False,
    ).astype("float32")
    # One fixed-width row per text; a list<float32> column built from the flat buffer.
    return pa.ListArray.from_arrays(
        pa.array(range(0, vectors.size + 1, vectors.shape[1]), type=pa.int32()),
        pa.array(vectors.reshape(-1), type=pa.float32()),
    )


serve("embedder", embed)
