#!/usr/bin/env bash
# Training on a GPU. Three parts, with the GPU's utilisation sampled by nvidia-smi throughout:
#  1. `capflow train bench` against plain PyTorch (benches/train_vs_pytorch.sh) at three batch
#     sizes, f32 and bf16, alternating which side runs first;
#  2. `capflow train` end to end on a dataset of SSA samples from `capflow synth` data (plain
#     training, then CLID's curriculum), on the GPU, with its loss, tokens/s and the share of
#     steps that waited on data from its JSON summary;
#  3. `capflow eval model` of the plain checkpoint on the GPU.
# BENCH_BATCHES, STEPS, IMAGES, TRAIN_STEPS, CURRICULUM=0, EVAL=0 make it shorter.
# Needs a `--features train` build (CAPFLOW=) and a python with PyTorch 2.11 and CUDA (PYTHON=).
#   CAPFLOW=target/release/capflow PYTHON=python3 RESULTS=/tmp/gpu benches/train_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CAPFLOW="${CAPFLOW:-target/release/capflow}"
export PYTHON="${PYTHON:-.venv-torch/bin/python}"
RESULTS="${RESULTS:-/tmp/train-gpu}"
IMAGES="${IMAGES:-2000}"
TRAIN_STEPS="${TRAIN_STEPS:-1000}"
DEVICE="${DEVICE:-cuda}"
mkdir -p "$RESULTS"
echo "date: $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -lms 200 \
    > "$RESULTS/utilization.csv" 2>/dev/null &
sampler=$!
trap 'kill $sampler 2>/dev/null || true' EXIT
# One line per training run of a `capflow train` JSON summary.
summary() {
  "$PYTHON" - "$1" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
print(f"samples {o['samples']} (trusted {o['trusted']}, generated {o['generated']}), "
      f"curriculum iterations {o['curriculum_iterations']}, {o['device']}")
print(f"  final model: {o['steps']} steps, loss {o['first_loss']:.3f} -> {o['final_loss']:.3f}, "
      f"{o['seconds']:.1f} s, {o['tokens_per_second']:,.0f} tokens/s, "
      f"waited on data at {o['data_waits']} steps ({o['data_wait_seconds']:.2f} s)")
for r in o["scoring_runs"]:
    print(f"  scoring model: {r['steps']} steps, final loss {r['final_loss']:.3f}, "
          f"{r['seconds']:.1f} s, {r['tokens_per_second']:,.0f} tokens/s, waited {r['data_waits']}")
PY
}
mark() { echo "$(date -u +%FT%T.%3NZ) $*" | tee -a "$RESULTS/marks.txt"; }

for batch in ${BENCH_BATCHES-32 256 1024}; do
  for precision in f32 bf16; do
    for order in capflow pytorch; do
      mark "bench batch=$batch precision=$precision first=$order"
      DEVICE="$DEVICE" THREADS=1 STEPS="${STEPS:-200}" BATCH="$batch" PRECISION="$precision" ORDER="$order" \
          bash benches/train_vs_pytorch.sh
    done
  done
done

mark "synth $IMAGES images"
"$CAPFLOW" synth --images "$IMAGES" --seed 1 --out "$RESULTS/synth" >/dev/null
"$CAPFLOW" run dataflows/ssa-flickr30k.toml --input "$RESULTS/synth" --out "$RESULTS/dataset" -w 8 \
    2> "$RESULTS/run.log"
tail -3 "$RESULTS/run.log"
printf 'steps = %s\nprecision = "bf16"\ncheckpoint_every = 0\nsplits = []\n' "$TRAIN_STEPS" \
    > "$RESULTS/train.toml"
printf '[curriculum]\nsteps_per_iteration = %s\nscoring_steps = %s\n' \
    "${STEPS_PER_ITERATION:-40}" "${SCORING_STEPS:-300}" >> "$RESULTS/train.toml"
mark "train plain"
"$CAPFLOW" train --data "$RESULTS/dataset" --config "$RESULTS/train.toml" --device "$DEVICE" \
    --out "$RESULTS/plain" > "$RESULTS/train-plain.json"
summary "$RESULTS/train-plain.json"
if [ "${CURRICULUM:-1}" = 1 ]; then
  mark "train curriculum"
  "$CAPFLOW" train --data "$RESULTS/dataset" --config "$RESULTS/train.toml" --device "$DEVICE" \
      --curriculum --out "$RESULTS/curriculum" > "$RESULTS/train-curriculum.json"
  summary "$RESULTS/train-curriculum.json"
fi
if [ "${EVAL:-1}" = 1 ]; then
  mark "eval plain"
  "$CAPFLOW" eval model --checkpoint "$RESULTS/plain" --data "$RESULTS/dataset" --device "$DEVICE" \
      --max-samples "${EVAL_SAMPLES:-500}" --out "$RESULTS/eval-plain.json" >/dev/null
  head -c 1500 "$RESULTS/eval-plain.json"; echo
fi
mark "done"
kill "$sampler" 2>/dev/null || true
# Mean GPU utilisation between each mark and the next.
"$PYTHON" - "$RESULTS" <<'PY'
import sys, datetime as dt
root = sys.argv[1]
def t(s): return dt.datetime.fromisoformat(s.strip().replace('/', '-').replace('Z', ''))
marks = [l.split(' ', 1) for l in open(f"{root}/marks.txt")]
samples = []
for line in open(f"{root}/utilization.csv"):
    parts = [p.strip() for p in line.split(',')]
    try:
        samples.append((t(parts[0]), int(parts[1].split()[0])))
    except (ValueError, IndexError):
        pass
for (start, what), (end, _) in zip(marks, marks[1:]):
    s, e = t(start), t(end)
    u = [v for (ts, v) in samples if s <= ts < e]
    if u:
        print(f"utilisation {what.strip():45s} mean {sum(u)/len(u):5.1f}%  samples {len(u)}")
PY
