#!/usr/bin/env bash
# Incremental rerun on `capflow synth` data: SSA on IMAGES synthetic images with `--state`, then
# 1% more images arrive (a prefix-stable synth of IMAGES * 1.01 images: the first IMAGES are the
# same), and the rerun is timed against a fresh full run on all of them. The models are fitted on
# a fixed corpus (`[[models.corpus]]`, a separate 2,000-image synth), as incremental SSA runs need
# (docs/incremental.md). Prints both wall times, their ratio, the share of images recomputed, and
# whether the two datasets' data files are byte-identical.
#
#   benches/incremental.sh [IMAGES]        # default 100000
#
# SYNTH_DIR / SYNTH_GROWN_DIR keep the generated data between runs (default: temp dirs).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
images="${1:-100000}"
grown_images=$(( images + images / 100 ))

(cd "$root" && cargo build --release --quiet --bin capflow)
capflow="$root/target/release/capflow"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
base="${SYNTH_DIR:-$work/base}"
grown="${SYNTH_GROWN_DIR:-$work/grown}"
[ -d "$base/flickr30k_entities" ] || "$capflow" synth --images "$images" --seed 1 --out "$base" >&2
[ -d "$grown/flickr30k_entities" ] || "$capflow" synth --images "$grown_images" --seed 1 --out "$grown" >&2
"$capflow" synth --images 2000 --seed 7 --out "$work/corpus" >&2
spec="$work/ssa-fixed-corpus.toml"
sed "s|\.\./examples/data|$root/examples/data|g" "$root/dataflows/ssa-flickr30k.toml" > "$spec"
printf '\n[[models.corpus]]\nformat = "flickr30k-entities"\npaths = ["%s"]\n' \
  "$work/corpus/flickr30k_entities" >> "$spec"

echo "machine: $(nproc) cores, $(uname -m); load average $(cut -d' ' -f1-3 /proc/loadavg)"
seconds() { local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }'; }

# Every timed run reads its inputs from the page cache: the rerun is the first run on the grown
# data, and would otherwise pay for the disk reads the fresh full run after it does not.
warm() { find -L "$1" -type f -exec cat {} + > /dev/null; }

# The input path stays the same (rows record their source files); only its target grows.
ln -sfn "$base" "$work/input"
warm "$base"
first=$(seconds "$capflow" run "$spec" --input "$work/input" --out "$work/inc" --state "$work/state" 2> "$work/log-first")
echo "version 1 on $images images (with --state): $first s"
ln -sfn "$grown" "$work/input"
warm "$grown"
rerun=$(seconds "$capflow" run "$spec" --input "$work/input" --out "$work/inc" --state "$work/state" 2> "$work/log-rerun")
grep '^capflow run .*: computing' "$work/log-rerun" || true
full=$(seconds "$capflow" run "$spec" --input "$work/input" --out "$work/fresh" 2> "$work/log-full")
echo "rerun after +1% images ($grown_images in all): $rerun s"
echo "fresh full run on $grown_images images: $full s"
awk -v r="$rerun" -v f="$full" 'BEGIN { printf "rerun / full wall time: %.1f%%\n", 100 * r / f }'
computed=$(sed -nE 's/.*computing ([0-9]+) new or changed images.*/\1/p' "$work/log-rerun")
awk -v c="${computed:-0}" -v n="$grown_images" 'BEGIN { printf "images recomputed: %d of %d (%.2f%%)\n", c, n, 100 * c / n }'
python3 - "$work/inc/manifest.json" "$work/fresh/manifest.json" <<'PY'
import json, sys
for label, path in zip(["rerun", "full"], sys.argv[1:]):
    m = json.load(open(path))
    print(f"  {label}: " + ", ".join(f"{s['name']} {s['elapsed_ms']} ms" for s in m["stages"]))
PY
if diff <(cd "$work/inc" && python3 -c "import json;[print(f['path'],f['sha256']) for f in json.load(open('manifest.json'))['files']]") \
        <(cd "$work/fresh" && python3 -c "import json;[print(f['path'],f['sha256']) for f in json.load(open('manifest.json'))['files']]") > /dev/null; then
  echo "data files: byte-identical to the fresh full run"
else
  echo "data files: DIFFER from the fresh full run"
  exit 1
fi
