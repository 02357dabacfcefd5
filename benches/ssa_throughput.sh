#!/usr/bin/env bash
# SSA throughput on `capflow synth` data: runs dataflows/ssa-flickr30k.toml on IMAGES synthetic
# images with -w 1 and -w 2 (export included in the run, excluded from the numbers) and prints the
# SSA stages' images/s (wall clock from feeding the first record to the last image's samples),
# images/s per worker, the -w 2 / -w 1 speed-up, and each stage's busy time from the manifest.
#
#   benches/ssa_throughput.sh [IMAGES [WORKERS...]]      # default: 100000 images, -w 1 and -w 2
#
# SYNTH_DIR keeps the generated data between runs (default: a temp dir, removed at the end).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
images="${1:-100000}"
shift || true
workers=("${@:-1 2}")
read -r -a workers <<< "${workers[*]}"

(cd "$root" && cargo build --release --quiet --bin capflow)
capflow="$root/target/release/capflow"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
synth="${SYNTH_DIR:-$work/synth}"
if [ ! -d "$synth/flickr30k_entities" ]; then
  "$capflow" synth --images "$images" --seed 1 --out "$synth" >&2
fi

echo "machine: $(nproc) cores, $(uname -m); load average $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A rate
for w in "${workers[@]}"; do
  out="$work/out-w$w"
  log="$work/log-w$w"
  "$capflow" run "$root/dataflows/ssa-flickr30k.toml" --input "$synth" --out "$out" -w "$w" 2> "$log"
  line="$(grep '^augment: ' "$log")"
  seconds="$(sed -E 's/.* in ([0-9.]+) s .*/\1/' <<< "$line")"
  r="$(awk -v n="$images" -v s="$seconds" 'BEGIN { printf "%.0f", n / s }')"
  rate[$w]="$r"
  per="$(awk -v r="$r" -v w="$w" 'BEGIN { printf "%.0f", r / w }')"
  echo "-w $w: $line"
  echo "-w $w: SSA stages $r images/s, $per images/s per worker"
  python3 - "$out/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for s in m["stages"]:
    print(f"    {s['name']:16} in {s['rows_in']:>9} out {s['rows_out']:>9} rejected {s['rejected']:>8} busy {s['elapsed_ms']:>7} ms")
PY
done
if [ -n "${rate[1]:-}" ] && [ -n "${rate[2]:-}" ]; then
  awk -v a="${rate[1]}" -v b="${rate[2]}" 'BEGIN { printf "speed-up -w 2 / -w 1: %.2fx\n", b / a }'
fi
