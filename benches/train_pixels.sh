#!/usr/bin/env bash
# Does the captioner see the image? `capflow synth --render` draws every scene (entities in
# their colour attribute, "a red helmet" red, whether or not a caption says it), the SSA recipe
# builds the samples, and the same captioner is trained with and without its image encoder
# (`model.image_crop`) for the same steps on several seeds. Each checkpoint is evaluated on the
# test split (`capflow eval model`), and its greedy captions' colour words are checked against
# the image: a colour word is right when one of the image's own captions uses it.
#
#   CAPFLOW=target/release/capflow IMAGES=1000 STEPS=300 SEEDS="1 2 3" DEVICE=cpu \
#     D_MODEL=64 OUT=/tmp/train-pixels benches/train_pixels.sh
#
# Needs a `--features train` build and python3 (standard library only). On a GPU machine add
# nvidia-smi sampling with UTILIZATION=1.
set -euo pipefail
cd "$(dirname "$0")/.."
CAPFLOW="${CAPFLOW:-target/release/capflow}"
IMAGES="${IMAGES:-1000}"
STEPS="${STEPS:-300}"
SEEDS="${SEEDS:-1 2 3}"
DEVICE="${DEVICE:-cpu}"
D_MODEL="${D_MODEL:-64}"
CROP="${CROP:-16}"
TOKEN_BUDGET="${TOKEN_BUDGET:-2048}"
THREADS="${THREADS:-0}"
WORKERS="${WORKERS:-2}"
OUT="${OUT:-/tmp/train-pixels}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
echo "date: $(date -u +%FT%TZ); images $IMAGES, steps $STEPS, seeds $SEEDS, device $DEVICE, d_model $D_MODEL, crop $CROP"
if [ "${UTILIZATION:-0}" = 1 ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -lms 200 \
        > "$OUT/utilization.csv" 2>/dev/null &
    sampler=$!
    trap 'kill $sampler 2>/dev/null || true' EXIT
fi
if [ ! -d "$OUT/synth/images" ]; then
    rm -rf "$OUT/synth"
    "$CAPFLOW" synth --images "$IMAGES" --seed 1 --render --out "$OUT/synth" -q
fi
if [ ! -f "$OUT/data/manifest.json" ]; then
    rm -rf "$OUT/data"
    "$CAPFLOW" run dataflows/ssa-flickr30k.toml --input "$OUT/synth" --out "$OUT/data" -w "$WORKERS" -q
fi
config() { # crop seed
    cat <<EOF
seed = $2
steps = $STEPS
device = "$DEVICE"
threads = $THREADS
checkpoint_every = 0
[model]
d_model = $D_MODEL
heads = 4
ff_dim = $((4 * D_MODEL))
image_crop = $1
[batching]
token_budget = $TOKEN_BUDGET
[images]
dir = "$OUT/synth/images"
EOF
}
for seed in $SEEDS; do
    for variant in none pixels; do
        crop=0
        [ "$variant" = pixels ] && crop="$CROP"
        name="$variant-$seed"
        config "$crop" "$seed" > "$OUT/$name.toml"
        rm -rf "$OUT/$name"
        start=$(date +%s.%N)
        "$CAPFLOW" train --data "$OUT/data" --out "$OUT/$name" --config "$OUT/$name.toml" -q \
            > "$OUT/$name.train.json"
        end=$(date +%s.%N)
        "$CAPFLOW" eval model --checkpoint "$OUT/$name" --data "$OUT/data" --eval-split test \
            --device "$DEVICE" --out "$OUT/$name.eval.json" > /dev/null
        echo "$name trained in $(awk "BEGIN{printf \"%.1f\", $end - $start}") s: $(date -u +%TZ)"
    done
done
python3 - "$OUT" "$SEEDS" <<'PY'
import json, re, statistics, sys
from pathlib import Path
out, seeds = Path(sys.argv[1]), sys.argv[2].split()
COLOURS = {"black", "white", "gray", "grey", "red", "green", "blue", "yellow", "orange",
           "brown", "pink", "purple", "tan"}
MARKUP = re.compile(r"\[/EN#\S+ ([^\]]*)\]")
def image_colours(image_id):
    text = (out / "synth/flickr30k_entities/Sentences" / f"{image_id}.txt").read_text()
    return set(MARKUP.sub(r"\1", text).lower().split()) & COLOURS
rows = {}
for variant in ("none", "pixels"):
    for seed in seeds:
        name = f"{variant}-{seed}"
        train = json.loads((out / f"{name}.train.json").read_text())
        ev = json.loads((out / f"{name}.eval.json").read_text())
        said = right = 0
        for p in ev["predictions"]:
            truth = image_colours(p["image_id"])
            for word in p["caption"].lower().split():
                if word in COLOURS:
                    said += 1
                    right += word in truth
        rows.setdefault(variant, []).append({
            "colour precision": 100.0 * right / max(said, 1), "colour words": said,
            "IoU": ev["iou"], "Hal": ev["hal"], "CIDEr-D": ev["cider_d"],
            "final loss": train["final_loss"], "tokens/s": train["tokens_per_second"],
        })
print(f"\n{len(seeds)} seeds; mean ± sd over seeds\n")
keys = list(rows["none"][0])
print("| variant | " + " | ".join(keys) + " |")
print("|---|" + "---|" * len(keys))
for variant, runs in rows.items():
    cells = []
    for k in keys:
        values = [r[k] for r in runs if r[k] is not None]
        if not values:
            cells.append("–")
            continue
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        cells.append(f"{statistics.mean(values):,.3f} ± {sd:,.3f}")
    print(f"| {variant} | " + " | ".join(cells) + " |")
PY
if [ "${UTILIZATION:-0}" = 1 ]; then
    python3 - "$OUT/utilization.csv" <<'PY'
import statistics, sys
values = [int(l.split(",")[1].split()[0]) for l in open(sys.argv[1]) if "%" in l]
busy = [v for v in values if v > 0]
print(f"GPU utilisation: median of non-zero samples {statistics.median(busy) if busy else 0}%, "
      f"mean {statistics.mean(values) if values else 0:.0f}% over {len(values)} samples")
PY
fi
