#!/usr/bin/env bash
# Incremental rerun on `capflow synth` data: SSA on IMAGES synthetic images with `--state`, then
# 1% more images arrive (the files of a prefix-stable synth of IMAGES * 1.01 images, whose first
# IMAGES are the same, are added to the input directory), and the rerun is timed against a fresh
# full run on all of them. The models are fitted on
# a fixed corpus (`[[models.corpus]]`, a separate 2,000-image synth), as incremental SSA runs need
# (docs/incremental.md). Prints both wall times, their ratio, the share of images recomputed, and
# whether the two datasets' data files are byte-identical.
#
#   benches/incremental.sh [IMAGES]        # default 100000
#
# SYNTH_DIR / SYNTH_GROWN_DIR keep the generated data between runs (default: temp dirs).
# CAPFLOW names the capflow binary to measure (default: a release build of this checkout).
# MODELS=kept runs the shipped recipe as it is: its models are fitted on version 1's inputs and
# kept in the state (docs/incremental.md), the fresh run gets the same models (`--models
# STATE`), and a `--refit` rerun is then timed against a fresh full run that fits them on all
# the inputs.
# OPTIMIZE=1 compacts version 1 with `capflow optimize` (default target size) before the rerun,
# prints each table's file count before and after and the files after the rerun, compares the
# rerun's rows (not its files: the layouts differ) with the fresh run's, table by table, with
# pyarrow (the oracle virtualenv's, scripts/setup-oracles.sh), and compacts the rerun's files.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
images="${1:-100000}"
grown_images=$(( images + images / 100 ))

if [ -z "${CAPFLOW:-}" ]; then
  (cd "$root" && cargo build --release --quiet --bin capflow)
fi
capflow="${CAPFLOW:-$root/target/release/capflow}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
base="${SYNTH_DIR:-$work/base}"
grown="${SYNTH_GROWN_DIR:-$work/grown}"
[ -d "$base/flickr30k_entities" ] || "$capflow" synth --images "$images" --seed 1 --out "$base" >&2
[ -d "$grown/flickr30k_entities" ] || "$capflow" synth --images "$grown_images" --seed 1 --out "$grown" >&2
"$capflow" synth --images 2000 --seed 7 --out "$work/corpus" >&2
spec="$work/ssa-fixed-corpus.toml"
sed "s|\.\./examples/data|$root/examples/data|g" "$root/dataflows/ssa-flickr30k.toml" > "$spec"
fresh_models=()
if [ "${MODELS:-}" = kept ]; then
  fresh_models=(--models "$work/state")
else
  printf '\n[[models.corpus]]\nformat = "flickr30k-entities"\npaths = ["%s"]\n' \
    "$work/corpus/flickr30k_entities" >> "$spec"
fi

echo "machine: $(nproc) cores, $(uname -m); load average $(cut -d' ' -f1-3 /proc/loadavg)"
seconds() { local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }'; }

# Every timed run reads its inputs from the page cache: the rerun is the first run on the grown
# data, and would otherwise pay for the disk reads the fresh full run after it does not.
warm() { find -L "$1" -type f -exec cat {} + > /dev/null; }

# The input directory is the 100K tree (hard links: its files keep their size and modification
# time) with its own copy of the AMR file. After version 1, the new captions arrive as they would:
# the new images' sentence and annotation files are added, the split lists replaced, and the new
# images' graphs appended to the AMR file. The result equals the grown tree byte for byte.
input="$work/input"
mkdir -p "$input"
cp -al "$base"/. "$input"/
cp --remove-destination "$base/amr/captions.amr" "$input/amr/captions.amr"
warm "$input"
first=$(seconds "$capflow" run "$spec" --input "$input" --out "$work/inc" --state "$work/state" 2> "$work/log-first")
echo "version 1 on $images images (with --state): $first s"
# Files per table of a dataset's current version.
table_files() {
  python3 -c "
import collections, json, sys
m = json.load(open(sys.argv[1] + '/manifest.json'))
c = collections.Counter(f['table'] for f in m['files'])
print(', '.join(f'{t} {n}' for t, n in sorted(c.items())) + f' ({len(m[\"files\"])} in all)')" "$1"
}
if [ "${OPTIMIZE:-}" = 1 ]; then
  echo "files of version 1: $(table_files "$work/inc")"
  optimized=$(seconds "$capflow" optimize "$work/inc" --quiet)
  echo "capflow optimize: $optimized s; files after it: $(table_files "$work/inc")"
fi
python3 - "$grown" "$input" <<'PY'
import filecmp, os, shutil, sys
grown, into = sys.argv[1:]
added = replaced = appended = 0
for root, _, files in os.walk(grown):
    for name in files:
        src = os.path.join(root, name)
        dst = os.path.join(into, os.path.relpath(src, grown))
        if not os.path.exists(dst):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.link(src, dst)
            added += 1
        elif name.endswith(".amr") and os.path.getsize(dst) < os.path.getsize(src):
            with open(src, "rb") as s, open(dst, "ab") as d:
                s.seek(os.path.getsize(dst))
                shutil.copyfileobj(s, d)
            appended += 1
        elif not filecmp.cmp(src, dst, shallow=False):
            os.remove(dst)
            shutil.copy(src, dst)
            replaced += 1
        assert filecmp.cmp(src, dst, shallow=False), dst
print(f"new captions arrive: {added} files added, {replaced} replaced, {appended} appended to")
PY
warm "$input"
rerun=$(seconds "$capflow" run "$spec" --input "$input" --out "$work/inc" --state "$work/state" 2> "$work/log-rerun")
grep '^capflow run .*: \(computing\|read \)' "$work/log-rerun" || true
full=$(seconds "$capflow" run "$spec" --input "$input" --out "$work/fresh" "${fresh_models[@]}" 2> "$work/log-full")
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
# Whether two datasets' current versions list the same files with the same checksums.
same_files() {
  diff <(cd "$1" && python3 -c "import json;[print(f['path'],f['sha256']) for f in json.load(open('manifest.json'))['files']]") \
    <(cd "$2" && python3 -c "import json;[print(f['path'],f['sha256']) for f in json.load(open('manifest.json'))['files']]") > /dev/null
}
if [ "${OPTIMIZE:-}" = 1 ]; then
  echo "files after the rerun: $(table_files "$work/inc")"
  "$root/.venv-oracles/bin/python" - "$work/inc" "$work/fresh" <<'PY'
import hashlib, json, sys
import pyarrow.parquet as pq
def rows(root):
    m = json.load(open(root + "/manifest.json"))
    out = {}
    for table in sorted({f["table"] for f in m["files"]}):
        digests = sorted(
            hashlib.sha256(json.dumps(r, sort_keys=True, default=str).encode()).digest()
            for f in m["files"] if f["table"] == table
            for r in pq.read_table(root + "/" + f["path"]).to_pylist())
        out[table] = (len(digests), hashlib.sha256(b"".join(digests)).hexdigest()[:16])
    return out
inc, fresh = rows(sys.argv[1]), rows(sys.argv[2])
print("rows: " + ("the fresh full run's, table by table" if inc == fresh else f"DIFFER: {inc} {fresh}"))
sys.exit(inc != fresh)
PY
  again=$(seconds "$capflow" optimize "$work/inc" --quiet)
  echo "capflow optimize after the rerun: $again s; files after it: $(table_files "$work/inc")"
elif same_files "$work/inc" "$work/fresh"; then
  echo "data files: byte-identical to the fresh full run${fresh_models:+ with the kept models}"
else
  echo "data files: DIFFER from the fresh full run"
  exit 1
fi
if [ "${MODELS:-}" = kept ]; then
  refit=$(seconds /usr/bin/time -f '%M' -o "$work/refit-peak" \
    "$capflow" run "$spec" --input "$input" --out "$work/inc" --state "$work/state" --refit 2> "$work/log-refit")
  grep '^capflow run .*: computing' "$work/log-refit" || true
  echo "rerun with --refit: peak RSS $(( $(cat "$work/refit-peak") / 1024 )) MB"
  fitted=$(seconds "$capflow" run "$spec" --input "$input" --out "$work/fitted" 2> "$work/log-fitted")
  echo "rerun with --refit: $refit s; fresh full run fitting the models: $fitted s"
  awk -v r="$refit" -v f="$fitted" 'BEGIN { printf "refit / full wall time: %.1f%%\n", 100 * r / f }'
  if same_files "$work/inc" "$work/fitted"; then
    echo "data files after --refit: byte-identical to the fresh full run"
  else
    echo "data files after --refit: DIFFER from the fresh full run"
    exit 1
  fi
fi
