"""The capflow captioner and one training step in plain PyTorch, for `capflow train bench`.

Same architecture as src/train/model.rs (pre-LN transformer encoder over 3 control tokens and R
region tokens, decoder with causal self-attention, cross-attention and GELU feed-forward, tied
output embedding), same synthetic batch shapes, same loss (label-smoothed cross-entropy), same
optimizer (AdamW, warm-up + cosine, global-norm clipping). Prints one JSON object like the Rust
command.

    python benches/train_vs_pytorch.py --batch 32 --tokens 24 --regions 16 --threads 2
"""

import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, d, heads, cross):
        super().__init__()
        self.heads, self.d, self.cross = heads, d, cross
        if cross:
            self.q = nn.Linear(d, d)
            self.kv = nn.Linear(d, 2 * d)
        else:
            self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def split(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.d // self.heads).transpose(1, 2)

    def forward(self, x, memory=None, mask=None, causal=False):
        b, t, _ = x.shape
        if self.cross:
            q = self.q(x)
            k, v = self.kv(memory).chunk(2, -1)
        else:
            q, k, v = self.qkv(x).chunk(3, -1)
        y = F.scaled_dot_product_attention(
            self.split(q), self.split(k), self.split(v), attn_mask=mask, is_causal=causal
        )
        return self.out(y.transpose(1, 2).contiguous().view(b, t, self.d))


class FeedForward(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.up, self.down = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.norm1, self.attention = nn.LayerNorm(d), Attention(d, heads, False)
        self.norm2, self.ff = nn.LayerNorm(d), FeedForward(d, ff)


class DecoderLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.norm1, self.self_attention = nn.LayerNorm(d), Attention(d, heads, False)
        self.norm2, self.cross_attention = nn.LayerNorm(d), Attention(d, heads, True)
        self.norm3, self.ff = nn.LayerNorm(d), FeedForward(d, ff)


class Captioner(nn.Module):
    def __init__(self, a):
        super().__init__()
        d = a.d_model
        self.dropout = a.dropout
        self.words = nn.Parameter(torch.randn(a.vocab, d) * 0.02)
        self.positions = nn.Parameter(torch.randn(a.max_tokens, d) * 0.02)
        self.labels = nn.Parameter(torch.randn(a.labels, d) * 0.02)
        self.flag = nn.Parameter(torch.randn(2, d) * 0.02)
        self.level = nn.Parameter(torch.randn(16, d) * 0.02)
        self.count = nn.Parameter(torch.randn(65, d) * 0.02)
        self.verbs = nn.Parameter(torch.randn(2, d) * 0.02)
        self.types = nn.Parameter(torch.randn(4, d) * 0.02)
        self.geometry = nn.Linear(5, d)
        self.encoder = nn.ModuleList(
            EncoderLayer(d, a.heads, a.ff_dim) for _ in range(a.encoder_layers)
        )
        self.encoder_norm = nn.LayerNorm(d)
        self.decoder = nn.ModuleList(
            DecoderLayer(d, a.heads, a.ff_dim) for _ in range(a.decoder_layers)
        )
        self.decoder_norm = nn.LayerNorm(d)

    def drop(self, x):
        return F.dropout(x, self.dropout, self.training) if self.dropout > 0 else x

    def forward(self, controls, labels, geometry, flags, mask, tokens):
        ctrl = torch.stack(
            [
                F.embedding(controls[:, 0].clamp(0, 15), self.level),
                F.embedding(controls[:, 1].clamp(0, 64), self.count),
                F.embedding(controls[:, 2], self.verbs),
            ],
            1,
        ) + self.types[:3].unsqueeze(0)
        regions = (
            F.embedding(labels, self.labels)
            + self.geometry(geometry)
            + F.embedding(flags, self.flag)
            + self.types[3]
        )
        x = self.drop(torch.cat([ctrl, regions], 1))
        for layer in self.encoder:
            x = x + self.drop(layer.attention(layer.norm1(x), mask=mask))
            x = x + self.drop(layer.ff(layer.norm2(x)))
        memory = self.encoder_norm(x)
        t = tokens.shape[1]
        y = self.drop(F.embedding(tokens, self.words, padding_idx=0) + self.positions[:t].unsqueeze(0))
        for layer in self.decoder:
            y = y + self.drop(layer.self_attention(layer.norm1(y), causal=True))
            y = y + self.drop(layer.cross_attention(layer.norm2(y), memory=memory, mask=mask))
            y = y + self.drop(layer.ff(layer.norm3(y)))
        return self.decoder_norm(y) @ self.words.t()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--regions", type=int, default=16)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--labels", type=int, default=100)
    p.add_argument("--d-model", dest="d_model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--encoder-layers", dest="encoder_layers", type=int, default=2)
    p.add_argument("--decoder-layers", dest="decoder_layers", type=int, default=3)
    p.add_argument("--ff-dim", dest="ff_dim", type=int, default=1024)
    p.add_argument("--max-tokens", dest="max_tokens", type=int, default=48)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--precision", choices=["f32", "bf16"], default="f32",
        help="bf16: matrix products under torch.autocast(dtype=torch.bfloat16), f32 weights",
    )
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = Captioner(a).to(dev).train()
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=5e-4, betas=(0.9, 0.999), eps=1e-8,
    )
    total, warm = a.warmup + a.steps, 100

    def lr_at(step):
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warm) / max(1, total - warm))))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    torch.manual_seed(1234)
    b, t, r = a.batch, a.tokens, a.regions
    tokens = torch.randint(4, a.vocab, (b, t + 1))
    controls = torch.stack(
        [torch.randint(1, 6, (b,)), torch.randint(1, 40, (b,)), torch.zeros(b, dtype=torch.long)], 1
    )
    labels = torch.randint(3, a.labels, (b, r))
    geometry = torch.rand(b, r, 5)
    flags = torch.randint(0, 2, (b, r))
    mask = torch.ones(b, 1, 1, 3 + r, dtype=torch.bool)
    batch = [x.to(dev) for x in (controls, labels, geometry, flags, mask, tokens)]
    controls, labels, geometry, flags, mask, tokens = batch
    inputs, targets = tokens[:, :t], tokens[:, 1:]

    bf16 = a.precision == "bf16"

    def step(i):
        torch.manual_seed(i)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(controls, labels, geometry, flags, mask, inputs)
        loss = F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1),
            ignore_index=0, label_smoothing=0.1,
        )
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        return loss.item()

    for i in range(a.warmup):
        step(i)
    start = time.perf_counter()
    for i in range(a.steps):
        step(a.warmup + i)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(json.dumps({
        "tokens_per_second": b * t * a.steps / seconds,
        "seconds": seconds,
        "steps": a.steps,
        "threads": torch.get_num_threads(),
        "parameters": sum(q.numel() for q in model.parameters()),
        "torch": torch.__version__,
        "device": str(dev),
        "precision": a.precision,
    }))


if __name__ == "__main__":
    main()
