#!/usr/bin/env bash
# Training throughput of `capflow train bench` against the same model and batch in plain PyTorch
# (benches/train_vs_pytorch.py), same libtorch, same thread count, same precision.
#   THREADS=2 STEPS=30 DEVICE=cpu benches/train_vs_pytorch.sh
#   DEVICE=cuda PRECISION=bf16 BATCH=256 STEPS=200 benches/train_vs_pytorch.sh
# Needs `cargo build --release --features train` (see scripts/setup-torch.sh). CAPFLOW and PYTHON
# name another binary or interpreter (a GPU machine's own PyTorch, say).
set -euo pipefail
cd "$(dirname "$0")/.."
CAPFLOW="${CAPFLOW:-target/release/capflow}"
PYTHON="${PYTHON:-.venv-torch/bin/python}"
THREADS="${THREADS:-2}"
STEPS="${STEPS:-30}"
DEVICE="${DEVICE:-cpu}"
PRECISION="${PRECISION:-f32}"
SHAPE=(--batch "${BATCH:-32}" --tokens "${TOKENS:-24}" --regions "${REGIONS:-16}")
config="$(mktemp)"
trap 'rm -f "$config"' EXIT
printf 'threads = %s\nprecision = "%s"\n' "$THREADS" "$PRECISION" > "$config"
run_capflow() { "$CAPFLOW" train bench --config "$config" --device "$DEVICE" --steps "$STEPS" "${SHAPE[@]}"; }
run_pytorch() {
    "$PYTHON" benches/train_vs_pytorch.py --threads "$THREADS" --device "$DEVICE" \
        --precision "$PRECISION" --steps "$STEPS" "${SHAPE[@]}"
}
if [ "${ORDER:-capflow}" = pytorch ]; then
    py=$(run_pytorch)
    rust=$(run_capflow)
else
    rust=$(run_capflow)
    py=$(run_pytorch)
fi
echo "capflow: $rust"
echo "pytorch: $py"
"$PYTHON" -c "
import json, sys
r, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
assert r['parameters'] == p['parameters'], (r['parameters'], p['parameters'])
print('ratio capflow/pytorch tokens/s: %.3f' % (r['tokens_per_second'] / p['tokens_per_second']))
" "$rust" "$py"
