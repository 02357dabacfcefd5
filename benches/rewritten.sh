#!/usr/bin/env bash
# A rerun with `--state` after every Flickr30k Entities sentence file was rewritten with a blank
# line at its end (new bytes, the same rows) and a caption was appended to every EVERY-th
# image's: the changed pieces are too many to collect, so the rerun reads every input on the
# streaming engine, carries the unchanged images and computes the others with the models kept
# in the state (docs/incremental.md). With SAME_BYTES=1 the other sentence files are written
# again with their own bytes instead (new modification times, as a copy or a sync tool leaves
# them): the rerun hashes them, finds them unchanged and reads only the EVERY-th images' pieces.
#
#   benches/rewritten.sh IMAGES [EVERY]       # default EVERY 10000
#
# The shipped SSA recipe on `capflow synth --seed 1` data of IMAGES images (SYNTH_DIR=DIR keeps
# it in DIR/IMAGES between runs): version 1 with a state, the rewrite, then the rerun on a fresh
# copy of version 1 and its state, ROUNDS times (default 2) by CAPFLOW (default: a release
# build of this checkout) and, when BASELINE names another build, by it too, alternately. Each
# rerun prints its peak RSS and wall (`/usr/bin/time -f '%M KB %e s'`), its plan line and a
# digest of its data files (SHA-256 of their bytes in path order). MEMORY_LIMIT is passed as
# `--memory-limit` (default 1GiB).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
images="${1:?usage: benches/rewritten.sh IMAGES [EVERY]}"
every="${2:-10000}"
rounds="${ROUNDS:-2}"
limit="${MEMORY_LIMIT:-1GiB}"

if [ -z "${CAPFLOW:-}" ]; then
  (cd "$root" && cargo build --release --quiet --bin capflow)
fi
capflow="${CAPFLOW:-$root/target/release/capflow}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
synth="${SYNTH_DIR:-$work/synth}/$images"
[ -d "$synth/flickr30k_entities" ] || "$capflow" synth --images "$images" --seed 1 --out "$synth" >&2
spec="$root/dataflows/ssa-flickr30k.toml"

cp -a "$synth" "$work/input"
"$capflow" run "$spec" --input "$work/input" --out "$work/v1" --state "$work/v1.state" \
  >/dev/null 2>&1
# Every sentence file gets a blank line at its end; every EVERY-th image one more caption.
python3 - "$work/input/flickr30k_entities/Sentences" "$every" "${SAME_BYTES:-}" <<'PY'
import os, sys
sentences, every, same = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
for n, name in enumerate(sorted(os.listdir(sentences))):
    path = os.path.join(sentences, name)
    with open(path) as f:
        text = f.read()
    if n % every == 0:
        text += "[/EN#1001/people A man] holds [/EN#1002/other a red kite] .\n"
    elif not same:
        text += "\n"
    with open(path, "w") as f:
        f.write(text)
PY

rerun() {
  local bin="$1" label="$2"
  rm -rf "$work/out" "$work/state"
  cp -a "$work/v1" "$work/out"
  cp -a "$work/v1.state" "$work/state"
  /usr/bin/time -f '%M KB %e s' "$bin" run "$spec" --input "$work/input" --out "$work/out" \
    --state "$work/state" --memory-limit "$limit" >/dev/null 2>"$work/log"
  local plan peak data
  plan="$(grep -E 'computing|input pieces' "$work/log" | sed 's/^.*capflow run [a-z0-9-]*: //' \
    | tr '\n' ' ')"
  peak="$(tail -n 1 "$work/log")"
  data="$(cd "$work/out" && find data -name '*.parquet' | sort | xargs cat | sha256sum | cut -c1-16)"
  printf '%s\t%s\tdata %s\t%s\n' "$label" "$peak" "$data" "$plan"
}

for _ in $(seq "$rounds"); do
  rerun "$capflow" capflow
  if [ -n "${BASELINE:-}" ]; then
    rerun "$BASELINE" baseline
  fi
done
