#!/usr/bin/env bash
# How long `capflow train` takes to cut its regions' crops, on one core and on all of them:
# `capflow synth --render` draws IMAGES scenes, the SSA recipe builds the samples, and one
# training step (so that encoding the samples is nearly all of the run) is timed with
# `image_crop = 16` and `0` (the reference), the process limited by `taskset` to core 0 and to
# every core.
#
#   CAPFLOW=target/release/capflow IMAGES=3000 OUT=/tmp/train-crops benches/train_crops.sh
#
# Needs a `--features train` build (PyTorch's libraries from .venv-torch, scripts/setup-torch.sh)
# and taskset.
set -euo pipefail
cd "$(dirname "$0")/.."
CAPFLOW="${CAPFLOW:-target/release/capflow}"
IMAGES="${IMAGES:-3000}"
OUT="${OUT:-/tmp/train-crops}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
torch_lib=$(ls -d "$PWD"/.venv-torch/lib/python3*/site-packages/torch/lib 2>/dev/null | head -1)
export LD_LIBRARY_PATH="${torch_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
all_cores="0-$(( $(nproc) - 1 ))"
echo "date: $(date -u +%FT%TZ); $(nproc) cores; images $IMAGES"
[ -d "$OUT/synth/images" ] || "$CAPFLOW" synth --images "$IMAGES" --seed 1 --render --out "$OUT/synth" >&2
if [ ! -f "$OUT/data/manifest.json" ]; then
    rm -rf "$OUT/data"
    "$CAPFLOW" run dataflows/ssa-flickr30k.toml --input "$OUT/synth" --out "$OUT/data" -w 2 -q
fi
for crop in 0 16; do
    cat > "$OUT/crop-$crop.toml" <<TOML
steps = 1
device = "cpu"
checkpoint_every = 0
[model]
d_model = 64
heads = 4
ff_dim = 256
image_crop = $crop
[images]
dir = "$OUT/synth/images"
TOML
    for cores in 0 "$all_cores"; do
        rm -rf "$OUT/model"
        start=$(date +%s.%N)
        taskset -c "$cores" "$CAPFLOW" train --data "$OUT/data" --out "$OUT/model" \
            --config "$OUT/crop-$crop.toml" -q > /dev/null
        end=$(date +%s.%N)
        awk -v c="$crop" -v k="$cores" -v a="$start" -v b="$end" \
            'BEGIN { printf "image_crop %2d  cores %-6s %6.2f s\n", c, k, b - a }'
    done
done
