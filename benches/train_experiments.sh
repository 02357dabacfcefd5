#!/usr/bin/env bash
# The three training experiments of docs/train.md ("The three experiments"), each one
# `capflow train compare` over SEEDS seeds at equal optimizer steps:
#  ssa      SSA vs no SSA: content IoU and Hal by coverage band (CIC-BART-SSA Fig. 4);
#  clid     CLID's curriculum vs none: LP and L by length level (CLID Table 1);
#  cutswap  CutSwap with a small training set: Div-2 (CutSwap thesis Table 4.10).
# The data come from `capflow synth` and the shipped recipes (dataflows/ssa-flickr30k.toml,
# dataflows/clid-vg.toml with the overrides below, dataflows/cutswap.toml), so the capflow binary
# and this repository are all it needs. Each experiment leaves OUT/<name>/compare.md (and
# compare.json); OUT/commands.sh holds every command it ran, OUT/timings.txt their seconds.
#
# Knobs (environment), with GPU defaults:
#   CAPFLOW=target/release/capflow  a `--features train` build
#   OUT=/tmp/train-experiments      IMAGES=5000 (synth images)   SYNTH_SEED=1
#   EXPERIMENTS="ssa clid cutswap"  SEEDS=3     DEVICE=cuda      PRECISION=bf16 (f32 on cpu)
#   STEPS=500 (every variant's final model)     SCORING_STEPS=STEPS/2 (each curriculum scorer)
#   C_PERCENT=10 (curriculum: 10 iterations)    D_MODEL=256 HEADS=4 ENC_LAYERS=2 DEC_LAYERS=3
#   FF_DIM=4*D_MODEL  LR=1e-3  WARMUP=STEPS/10  TOKEN_BUDGET=8192  MAX_BATCH=TOKEN_BUDGET/8
#   THREADS=1 (libtorch CPU threads; more spin-wait against each other on a busy machine)
#   WORKERS=nproc (capflow run -w)
#   EVAL_MAX=1000 (evaluated samples per run: the first of the test split)
#   MAX_TRAIN=2000 (cutswap: trusted samples per seed)  GENERATED_PERCENT=20 (cutswap's share)
#   CLID_SALIENCY=1.0 CLID_CUT_LAST=false CLID_SAMPLES=10 (clid-vg overrides: longer walks)
# Small CPU run (4–8 minutes on 2 cores; docs/train.md has its tables):
#   OUT=/tmp/train-experiments-cpu IMAGES=2000 DEVICE=cpu STEPS=200 D_MODEL=64 TOKEN_BUDGET=1024 \
#     EVAL_MAX=300 MAX_TRAIN=500 benches/train_experiments.sh
# On a GPU machine (about 7 minutes on an H200); the binary finds that machine's libtorch through
# PYTHON's torch (PYTHON=python3):
#   CAPFLOW=.gpu/capflow OUT=/tmp/train-experiments benches/train_experiments.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CAPFLOW="${CAPFLOW:-target/release/capflow}"
OUT="${OUT:-/tmp/train-experiments}"
IMAGES="${IMAGES:-5000}"
SYNTH_SEED="${SYNTH_SEED:-1}"
EXPERIMENTS="${EXPERIMENTS:-ssa clid cutswap}"
SEEDS="${SEEDS:-3}"
DEVICE="${DEVICE:-cuda}"
if [ "$DEVICE" = cpu ]; then PRECISION="${PRECISION:-f32}"; else PRECISION="${PRECISION:-bf16}"; fi
STEPS="${STEPS:-500}"
SCORING_STEPS="${SCORING_STEPS:-$((STEPS / 2))}"
C_PERCENT="${C_PERCENT:-10}"
D_MODEL="${D_MODEL:-256}"
HEADS="${HEADS:-4}"
ENC_LAYERS="${ENC_LAYERS:-2}"
DEC_LAYERS="${DEC_LAYERS:-3}"
FF_DIM="${FF_DIM:-$((4 * D_MODEL))}"
LR="${LR:-1e-3}"
WARMUP="${WARMUP:-$((STEPS / 10))}"
TOKEN_BUDGET="${TOKEN_BUDGET:-8192}"
MAX_BATCH="${MAX_BATCH:-$((TOKEN_BUDGET / 8))}"
THREADS="${THREADS:-1}"
WORKERS="${WORKERS:-$(nproc)}"
EVAL_MAX="${EVAL_MAX:-1000}"
MAX_TRAIN="${MAX_TRAIN:-2000}"
GENERATED_PERCENT="${GENERATED_PERCENT:-20}"
CLID_SALIENCY="${CLID_SALIENCY:-1.0}"
CLID_CUT_LAST="${CLID_CUT_LAST:-false}"
CLID_SAMPLES="${CLID_SAMPLES:-10}"

if [ "$DEVICE" != cpu ]; then
    torch_lib=$("${PYTHON:-python3}" -c \
        'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' || true)
    if [ -n "$torch_lib" ]; then
        export LD_LIBRARY_PATH="$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
fi
mkdir -p "$OUT/data" "$OUT/recipes"
exec 3>&1 # the script's output, which the timings go to whatever a step's output is redirected to
: > "$OUT/commands.sh"
: > "$OUT/timings.txt"
# Runs a command, appending it to commands.sh and its wall-clock seconds to timings.txt.
step() {
    local name="$1"
    shift
    printf '%q ' "$@" >> "$OUT/commands.sh"
    echo >> "$OUT/commands.sh"
    local start=$SECONDS
    "$@"
    echo "$name $((SECONDS - start)) s" | tee -a "$OUT/timings.txt" >&3
}
# The dataset of a recipe on the synth data; quiet unless it fails.
dataset() {
    local name="$1" recipe="$2"
    rm -rf "${OUT:?}/data/$name"
    if ! step "data-$name" "$CAPFLOW" run "$recipe" --input "$OUT/data/synth" \
            --out "$OUT/data/$name" -w "$WORKERS" 2> "$OUT/data/$name.log"; then
        cat "$OUT/data/$name.log" >&2
        exit 1
    fi
    tail -1 "$OUT/data/$name.log"
}

echo "date: $(date -u +%FT%TZ); $("$CAPFLOW" --version); device $DEVICE, precision $PRECISION"
if [ "$DEVICE" != cpu ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
started=$SECONDS
rm -rf "$OUT/data/synth"
step synth "$CAPFLOW" synth --images "$IMAGES" --seed "$SYNTH_SEED" --out "$OUT/data/synth"

config="$OUT/train.toml"
cat > "$config" <<EOF
seed = 1
steps = $STEPS
device = "$DEVICE"
precision = "$PRECISION"
checkpoint_every = 0
threads = $THREADS
[model]
d_model = $D_MODEL
heads = $HEADS
encoder_layers = $ENC_LAYERS
decoder_layers = $DEC_LAYERS
ff_dim = $FF_DIM
[optimizer]
lr = $LR
warmup_steps = $WARMUP
[batching]
token_budget = $TOKEN_BUDGET
max_batch_samples = $MAX_BATCH
[curriculum]
seed = 1
scoring_steps = $SCORING_STEPS
c_percent = $C_PERCENT
EOF
compare=("$CAPFLOW" train compare --config "$config" --seeds "$SEEDS" --eval-split test
         --max-samples "$EVAL_MAX")

for experiment in $EXPERIMENTS; do
    case "$experiment" in
    ssa)
        # Trusted: the synth captions as `original` samples; generated: their SSA samples.
        # Evaluated on the test split's samples of both methods.
        dataset ssa dataflows/ssa-flickr30k.toml
        step "compare-ssa" "${compare[@]}" --data "$OUT/data/ssa" --out "$OUT/ssa" \
            --variants original,augmented > /dev/null
        ;;
    clid)
        # The shipped recipe explores every object and keeps the whole walk, so that captions
        # reach the long levels the synth scene graphs allow. Trusted: the synth captions
        # (built as `original` samples); evaluated on the test split's CLID samples, whose
        # controls ask for every length level.
        sed -e "s/^saliency_threshold = [0-9.]*/saliency_threshold = $CLID_SALIENCY/" \
            -e "s/^cut_last_objects = [a-z]*/cut_last_objects = $CLID_CUT_LAST/" \
            -e "s/^samples_per_graph = [0-9]*/samples_per_graph = $CLID_SAMPLES/" \
            dataflows/clid-vg.toml > "$OUT/recipes/clid-vg.toml"
        dataset clid "$OUT/recipes/clid-vg.toml"
        step "compare-clid" "${compare[@]}" --data "$OUT/data/clid" --out "$OUT/clid" \
            --variants original,augmented,curriculum --eval-method clid > /dev/null
        ;;
    cutswap)
        # At most MAX_TRAIN trusted captions per seed (whole images), and CutSwap samples of
        # the same images, at most GENERATED_PERCENT% of them. Evaluated on the test split's
        # original samples.
        dataset cutswap dataflows/cutswap.toml
        step "compare-cutswap" "${compare[@]}" --data "$OUT/data/cutswap" --out "$OUT/cutswap" \
            --variants original,augmented --methods cutswap --max-train "$MAX_TRAIN" \
            --generated-percent "$GENERATED_PERCENT" --eval-method original > /dev/null
        ;;
    *)
        echo "unknown experiment '$experiment' (ssa, clid, cutswap)" >&2
        exit 2
        ;;
    esac
done
echo "total $((SECONDS - started)) s" | tee -a "$OUT/timings.txt"
for experiment in $EXPERIMENTS; do
    echo
    echo "== $experiment: $OUT/$experiment/compare.md"
    cat "$OUT/$experiment/compare.md"
done
