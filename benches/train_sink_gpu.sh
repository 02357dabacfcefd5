#!/usr/bin/env bash
# The training sink on a GPU, with the GPU's utilisation sampled by nvidia-smi throughout:
#  1. `capflow run` of dataflows/ssa-flickr30k.toml with a `[train]` table on `capflow synth`
#     data: the model trains while the run augments (default batching, then large batches);
#  2. `capflow train --stream` (the same sink fed from the committed dataset) and `capflow train`
#     (the whole set at once) with the same configuration and steps, for comparison.
# Each part's summary is printed, and the steady-state utilisation of its window (the median of
# the non-zero samples, and the mean of all).
#   CAPFLOW=target/release/capflow PYTHON=python3 RESULTS=/tmp/sink-gpu benches/train_sink_gpu.sh
# IMAGES, WORKERS, STEPS, BIG_BUDGET, BIG_BATCH change the sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
CAPFLOW="${CAPFLOW:-target/release/capflow}"
PYTHON="${PYTHON:-python3}"
RESULTS="${RESULTS:-/tmp/sink-gpu}"
IMAGES="${IMAGES:-20000}"
WORKERS="${WORKERS:-8}"
STEPS="${STEPS:-1000}"
BIG_BUDGET="${BIG_BUDGET:-32768}"
BIG_BATCH="${BIG_BATCH:-2048}"
DEVICE="${DEVICE:-cuda}"
mkdir -p "$RESULTS"
echo "date: $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
nproc
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -lms 200 \
    > "$RESULTS/utilization.csv" 2>/dev/null &
sampler=$!
trap 'kill $sampler 2>/dev/null || true' EXIT
mark() { echo "$(date -u +%FT%T.%3NZ) $*" | tee -a "$RESULTS/marks.txt"; }

# The training table: the default captioner, bf16, `$STEPS` steps, batching from the arguments.
train_table() { # budget samples out
  printf '\n[train]\nsteps = %s\ndevice = "%s"\nprecision = "bf16"\ncheckpoint_every = 0\n' "$STEPS" "$DEVICE"
  printf 'out = "%s"\n[train.batching]\ntoken_budget = %s\nmax_batch_samples = %s\n' "$3" "$1" "$2"
}
config_file() { # budget samples
  printf 'steps = %s\ndevice = "%s"\nprecision = "bf16"\ncheckpoint_every = 0\n' "$STEPS" "$DEVICE"
  printf '[batching]\ntoken_budget = %s\nmax_batch_samples = %s\n' "$1" "$2"
}
summary() {
  "$PYTHON" - "$1" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
keys = ["device", "offered", "pooled", "steps", "streamed_steps", "first_step_pooled",
        "first_step_seconds", "input_seconds", "first_loss", "final_loss", "tokens",
        "train_seconds", "tokens_per_second", "seconds", "data_waits", "data_wait_seconds",
        "vocab_words", "vocab_overflow", "pool_peak_memory_bytes", "pool_spilled_blocks"]
print("  " + ", ".join(f"{k} {o[k]:.4g}" if isinstance(o.get(k), float) else f"{k} {o[k]}"
                       for k in keys if k in o))
PY
}

mark "synth $IMAGES images"
"$CAPFLOW" synth --images "$IMAGES" --seed 1 --out "$RESULTS/synth" >/dev/null
sed "s#\"\.\./#\"$PWD/#g" dataflows/ssa-flickr30k.toml > "$RESULTS/plain.toml"

for variant in "default 4096 256" "big $BIG_BUDGET $BIG_BATCH"; do
  set -- $variant
  name=$1
  { cat "$RESULTS/plain.toml"; train_table "$2" "$3" "$RESULTS/run-$name.model"; } \
      > "$RESULTS/run-$name.toml"
  rm -rf "$RESULTS/run-$name" "$RESULTS/run-$name.model"
  mark "run with [train] $name (budget $2, batch $3)"
  /usr/bin/time -f 'peak RSS %M KB, %e s' "$CAPFLOW" run "$RESULTS/run-$name.toml" \
      --input "$RESULTS/synth" --out "$RESULTS/run-$name" -w "$WORKERS" 2> "$RESULTS/run-$name.log"
  grep -E "^(augment|capflow run|train:|peak RSS)" "$RESULTS/run-$name.log" || tail -5 "$RESULTS/run-$name.log"
  summary "$RESULTS/run-$name.model/train.json"
done

config_file 4096 256 > "$RESULTS/default.toml"
mark "train --stream default"
"$CAPFLOW" train --data "$RESULTS/run-default" --config "$RESULTS/default.toml" --stream \
    --out "$RESULTS/stream-default" > "$RESULTS/stream-default.json"
summary "$RESULTS/stream-default.json"
mark "train (whole set) default"
"$CAPFLOW" train --data "$RESULTS/run-default" --config "$RESULTS/default.toml" \
    --out "$RESULTS/set-default" > "$RESULTS/set-default.json"
summary "$RESULTS/set-default.json"
mark "done"
sleep 0.5
kill $sampler 2>/dev/null || true

# Utilisation per window between marks.
"$PYTHON" - "$RESULTS/marks.txt" "$RESULTS/utilization.csv" <<'PY'
import sys, statistics
from datetime import datetime, timezone
def t(s):
    return datetime.strptime(s.strip()[:23], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc)
marks = []
for line in open(sys.argv[1]):
    stamp, _, what = line.partition(" ")
    marks.append((datetime.strptime(stamp.rstrip("Z"), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc), what.strip()))
samples = []
for line in open(sys.argv[2]):
    parts = line.split(",")
    try:
        samples.append((t(parts[0]), float(parts[1].split()[0])))
    except (ValueError, IndexError):
        pass
for (start, what), (end, _) in zip(marks, marks[1:]):
    window = [u for (ts, u) in samples if start <= ts < end]
    busy = [u for u in window if u > 0]
    if window:
        print(f"utilisation {what}: median of non-zero {statistics.median(busy) if busy else 0:.0f}%, "
              f"mean {statistics.mean(window):.0f}% over {len(window)} samples")
PY
