#!/usr/bin/env bash
# Peak memory of a run against the size of its dataset: runs dataflows/ssa-flickr30k.toml on
# `capflow synth` data of each size and prints peak RSS (`/usr/bin/time -f %M`), wall time and
# the run's summary line; with BASELINE set to another capflow binary, runs it side by side.
#
#   benches/memory.sh [IMAGES...]        # default: 20000 200000 1000000
#
#   WORKERS=2            -w of every run (default 1)
#   MEMORY_LIMIT=1GiB    --memory-limit of every run (default: capflow's)
#   BASELINE=path        also run this binary on the same data (a build of an older commit)
#   SYNTH_DIR=dir        keeps generated data between runs (one subdirectory per size)
#   CAPFLOW=path         the capflow binary to measure (default: a release build of this checkout)
#   STATE=1              every run with a new --state, then a rerun with that state on the same
#                        data (every image compared with the state and carried)
#   REWRITE=1            with STATE=1, the runs read a hard-linked copy of the data whose every
#                        Flickr30k Entities sentence file is written again, with the same bytes,
#                        before the rerun (new modification times, as a copy or a sync tool
#                        leaves them): the rerun finds every piece's stamps changed, hashes its
#                        files and reads none of them
#   REWRITE=blank        the same, each file with a blank line added at its end: its bytes
#                        change and its rows do not, so the rerun reads every piece (and finds
#                        every image unchanged)
#   RERUN_FLAGS='...'    more flags for the rerun only, e.g. '--refit' or '--memory-limit 256MiB'
#   MIX='...'            the recipe's `strategy = "all"` replaced by these lines of a [mix]
#                        table, e.g. MIX=$'strategy = "random"\npercent = 50' (docs/mixing.md)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sizes=("${@:-20000 200000 1000000}")
read -r -a sizes <<< "${sizes[*]}"
workers="${WORKERS:-1}"

if [ ! -x /usr/bin/time ]; then
  echo "benches/memory.sh needs GNU time (/usr/bin/time): apt-get install time" >&2
  exit 2
fi
if [ -z "${CAPFLOW:-}" ]; then
  (cd "$root" && cargo build --release --quiet --bin capflow)
fi
capflow="${CAPFLOW:-$root/target/release/capflow}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
synth_root="${SYNTH_DIR:-$work/synth}"
limit=()
if [ -n "${MEMORY_LIMIT:-}" ]; then
  limit=(--memory-limit "$MEMORY_LIMIT")
fi

spec="$root/dataflows/ssa-flickr30k.toml"
if [ -n "${MIX:-}" ]; then
  mkdir -p "$work/dataflows"
  python3 - "$spec" "$work/dataflows/ssa-flickr30k.toml" "$root" <<'PY'
import sys
recipe, out, root = sys.argv[1:]
import os
text = open(recipe).read()
assert 'strategy = "all"' in text
text = text.replace('strategy = "all"', os.environ["MIX"]).replace("../examples", root + "/examples")
open(out, "w").write(text)
PY
  spec="$work/dataflows/ssa-flickr30k.toml"
fi

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -m); $(date -u +%F)"
# Prints one sha256 over every data file and changelog of a dataset, so that a run and its
# baseline can be compared byte for byte.
digest() {
  (cd "$1" && find data changes -type f -name '*.parquet' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
}
measure() {
  local label="$1" bin="$2" synth="$3" images="$4"
  shift 4
  local out="$work/out-$label"
  rm -rf "$out" "$work/state-$label"
  if [ -n "${STATE:-}" ]; then
    if [ -n "${REWRITE:-}" ]; then
      # One path for every build's runs: the datasets name their input files.
      rm -rf "$work/in"
      cp -al "$synth" "$work/in"
      synth="$work/in"
    fi
    once "$label" "$bin" "$synth" "$images" "$out" --state "$work/state-$label" "$@"
    if [ -n "${REWRITE:-}" ]; then
      python3 - "$synth/flickr30k_entities/Sentences" "$REWRITE" <<'PY'
import os, sys
blank = sys.argv[2] == "blank"
for name in os.listdir(sys.argv[1]):
    path = os.path.join(sys.argv[1], name)
    data = open(path, "rb").read()
    os.unlink(path)  # a new file: the hard link to the generated data stays as it was
    open(path, "wb").write(data + b"\n" if blank else data)
PY
    fi
    local rerun_flags=()
    read -r -a rerun_flags <<< "${RERUN_FLAGS:-}"
    once "$label-rerun" "$bin" "$synth" "$images" "$out" --state "$work/state-$label" "$@" \
      "${rerun_flags[@]}"
  else
    once "$label" "$bin" "$synth" "$images" "$out" "$@"
  fi
}
once() {
  local label="$1" bin="$2" synth="$3" images="$4" out="$5"
  shift 5
  local log="$work/log" timing="$work/time"
  /usr/bin/time -f '%M %e' -o "$timing" \
    "$bin" run "$spec" --input "$synth" --out "$out" -w "$workers" "$@" \
    2> "$log"
  read -r kib seconds < "$timing"
  printf '%-9s %8s images  -w %s  peak %7.0f MB  wall %7.1f s  data %s  %s\n' "$label" "$images" \
    "$workers" "$(awk -v k="$kib" 'BEGIN { print k / 1024 }')" "$seconds" "$(digest "$out")" \
    "$(grep -E '^augment: |: computing |too many to hold' "$log" | tr '\n' ' ' || true)"
}
for images in "${sizes[@]}"; do
  synth="$synth_root/$images"
  if [ ! -d "$synth/flickr30k_entities" ]; then
    "$capflow" synth --images "$images" --seed 1 --out "$synth" >&2
  fi
  measure capflow "$capflow" "$synth" "$images" "${limit[@]}"
  if [ -n "${BASELINE:-}" ]; then
    measure baseline "$BASELINE" "$synth" "$images"
    if [ "$(digest "$work/out-capflow")" != "$(digest "$work/out-baseline")" ]; then
      echo "data files differ from the baseline's at $images images" >&2
    fi
  fi
  rm -rf "$work"/out-* "$work"/state-* "$work"/in
done
