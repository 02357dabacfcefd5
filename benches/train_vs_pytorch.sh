#!/usr/bin/env bash
# Training throughput of `capflow train bench` against the same model and batch in plain PyTorch
# (benches/train_vs_pytorch.py), same libtorch (the .venv-torch wheel), same thread count.
#   THREADS=2 STEPS=30 DEVICE=cpu benches/train_vs_pytorch.sh
# Needs `cargo build --release --features train` (see scripts/setup-torch.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS="${THREADS:-2}"
STEPS="${STEPS:-30}"
DEVICE="${DEVICE:-cpu}"
SHAPE=(--batch "${BATCH:-32}" --tokens "${TOKENS:-24}" --regions "${REGIONS:-16}")
config="$(mktemp)"
trap 'rm -f "$config"' EXIT
printf 'threads = %s\n' "$THREADS" > "$config"
rust=$(target/release/capflow train bench --config "$config" --device "$DEVICE" --steps "$STEPS" "${SHAPE[@]}")
py=$(.venv-torch/bin/python benches/train_vs_pytorch.py --threads "$THREADS" --device "$DEVICE" --steps "$STEPS" "${SHAPE[@]}")
echo "capflow: $rust"
echo "pytorch: $py"
.venv-torch/bin/python -c "
import json, sys
r, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert r['parameters'] == p['parameters'], (r['parameters'], p['parameters'])
print('ratio capflow/pytorch tokens/s: %.3f' % (r['tokens_per_second'] / p['tokens_per_second']))
" "$rust" "$py"
