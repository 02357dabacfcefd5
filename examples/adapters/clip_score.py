"""capflow image_text_scorer adapter: (image path, text) -> CLIP similarity in [0, 1] with open_clip.

    python3 examples/adapters/clip_score.py [--model ViT-B-32] [--pretrained laion2b_s34b_b79k] [--device cuda]

Install ``pip install open_clip_torch pillow pyarrow``; the weights named by ``--pretrained`` are
downloaded on first use (``open_clip.list_pretrained()`` lists the choices). The score is the
cosine similarity of the L2-normalised image and text embeddings, clipped to [0, 1] (as in
CLIPScore, negative similarities count as 0). See docs/adapters.md.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from capflow_adapter import serve  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", default="ViT-B-32")
parser.add_argument("--pretrained", default="laion2b_s34b_b79k")
parser.add_argument("--device", default=None, help="torch device (default: cuda if available)")
args = parser.parse_args()

import open_clip  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
model, _, preprocess = open_clip.create_model_and_transforms(args.model, pretrained=args.pretrained)
model = model.to(device).eval()
tokenizer = open_clip.get_tokenizer(args.model)


@torch.no_grad()
def score(batch):
    paths = batch.column("image").to_pylist()
    texts = batch.column("text").to_pylist()
    images = torch.stack([preprocess(Image.open(p).convert("RGB")) for p in paths]).to(device)
    image_features = model.encode_image(images)
    text_features = model.encode_text(tokenizer(texts).to(device))
    image_features = image_features / image_features.norm(dim=-1, keepdim=True)
    text_features = text_features / text_features.norm(dim=-1, keepdim=True)
    cosine = (image_features * text_features).sum(dim=-1)
    return cosine.clamp(0.0, 1.0).double().cpu().tolist()


serve("image_text_scorer", score)
