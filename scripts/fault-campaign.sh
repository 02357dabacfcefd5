#!/usr/bin/env bash
# Fault campaign against the dataset commit (needs strace):
#
# 1. Kills: `capflow run dataflows/sample.toml` is killed with SIGKILL at its K-th call of each
#    of SYSCALLS (strace `-e inject=SYSCALL:signal=SIGKILL:when=K`), for every K up to the number
#    of calls a whole run makes, once as a first run (empty directory) and once as a rerun (the
#    directory holds a committed version 1). After each kill the directory must hold no manifest
#    or one that `capflow validate` accepts; the same command, rerun, must exit 0, validate, and
#    hold the data files and ledger of a clean run byte for byte.
# 2. Writers: TRIALS rounds of two `capflow ingest` writers on one directory with delays injected
#    by strace (the first stalls at a write once its lock is taken, the second at a mkdir or
#    openat); every committed dataset must validate and count exactly the writers that exited 0.
#
#   scripts/fault-campaign.sh                    # every K of rename,write,openat,fsync; 20 trials
#   SYSCALLS=rename,write STEP=3 TRIALS=20 scripts/fault-campaign.sh   # every 3rd K
#
# Prints one line per failed trial and the counts at the end; exits 1 when any trial failed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
syscalls="${SYSCALLS:-rename,write,openat,fsync}"
step="${STEP:-1}"
trials="${TRIALS:-20}"
command -v strace >/dev/null || { echo "strace is required" >&2; exit 2; }

# CAPFLOW names a binary to test instead of building one.
if [ -z "${CAPFLOW:-}" ]; then
  (cd "$root" && cargo build --release --quiet --bin capflow)
fi
capflow="${CAPFLOW:-${CARGO_TARGET_DIR:-$root/target}/release/capflow}"
spec="$root/dataflows/sample.toml"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# What a dataset's run decides: its data files (as listed by the manifest) and its ledger alias.
fingerprint() {
  python3 - "$1" <<'PY'
import hashlib, json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
for f in sorted(m["files"], key=lambda f: f["path"]):
    print(f["path"], hashlib.sha256(open(os.path.join(d, f["path"]), "rb").read()).hexdigest())
print("rejected.parquet", hashlib.sha256(open(os.path.join(d, "rejected.parquet"), "rb").read()).hexdigest())
PY
}

"$capflow" -q run "$spec" --out "$work/clean" >/dev/null
fingerprint "$work/clean" > "$work/clean.txt"

kills=0; trials_run=0; failed=0; not_killed=0
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

for scenario in run rerun; do
  for syscall in ${syscalls//,/ }; do
    rm -rf "$work/count"
    [ "$scenario" = rerun ] && cp -a "$work/clean" "$work/count"
    strace -f -qq -o "$work/trace" -e trace="$syscall" "$capflow" -q run "$spec" --out "$work/count" >/dev/null
    calls=$(grep -c "$syscall(" "$work/trace" || true)
    echo "== $scenario: $calls calls of $syscall" >&2
    for ((k = 1; k <= calls; k += step)); do
      trials_run=$((trials_run + 1))
      ds="$work/ds"
      rm -rf "$ds"
      [ "$scenario" = rerun ] && cp -a "$work/clean" "$ds"
      set +e
      # In a subshell, whose own stderr takes the shell's "Killed" notice.
      (strace -f -qq -o /dev/null -e trace="$syscall" -e inject="$syscall":signal=SIGKILL:when="$k" \
        "$capflow" -q run "$spec" --out "$ds" >/dev/null; exit $?) 2>"$work/killed.err"
      code=$?
      set -e
      if [ "$code" -eq 0 ]; then not_killed=$((not_killed + 1)); else kills=$((kills + 1)); fi
      label="$scenario $syscall K=$k (exit $code)"
      if [ -f "$ds/manifest.json" ] && ! "$capflow" -q validate "$ds" >/dev/null 2>"$work/validate.err"; then
        fail "$label: committed dataset does not validate: $(head -c 300 "$work/validate.err")"
        continue
      fi
      if ! "$capflow" -q run "$spec" --out "$ds" >/dev/null 2>"$work/rerun.err"; then
        fail "$label: the rerun failed: $(head -c 300 "$work/rerun.err")"
        continue
      fi
      if ! "$capflow" -q validate "$ds" >/dev/null 2>"$work/validate.err"; then
        fail "$label: the rerun's dataset does not validate: $(head -c 300 "$work/validate.err")"
        continue
      fi
      if ! cmp -s <(fingerprint "$ds") "$work/clean.txt"; then
        fail "$label: the rerun's data differ from a clean run's"
        continue
      fi
      leftovers=$(find "$ds" -maxdepth 1 -name '.capflow-*' | wc -l)
      [ "$leftovers" -eq 0 ] || fail "$label: $leftovers .capflow-* entries left after the rerun"
    done
  done
done

# Concurrent writers with injected delays (tests/reliability.rs has one such trial).
flickr="$root/examples/data/flickr30k_entities"
amr="$root/examples/data/amr/captions.amr"
writer_failed=0; committed_total=0
for ((t = 1; t <= trials; t++)); do
  ds="$work/writers-$t"
  case $((t % 4)) in
    0) second="inject=mkdir:delay_enter=4000000:when=3" ;;
    1) second="inject=openat:delay_enter=2000000:when=$((5 + t))" ;;
    2) second="inject=write:delay_enter=1000000:when=$t" ;;
    3) second="inject=mkdir:delay_enter=$((t * 200000)):when=1" ;;
  esac
  strace -f -qq -o /dev/null -e inject=write:delay_enter=$((t * 150000)):when=1 \
    "$capflow" -q ingest flickr30k-entities "$flickr" --out "$ds" >/dev/null 2>"$work/w1.err" &
  first=$!
  sleep 0.$((t % 5))
  set +e
  strace -f -qq -o /dev/null -e "$second" \
    "$capflow" -q ingest penman "$amr" --out "$ds" >/dev/null 2>"$work/w2.err"
  code2=$?
  wait "$first"
  code1=$?
  set -e
  committed=0
  for code in $code1 $code2; do
    if [ "$code" -eq 0 ]; then committed=$((committed + 1));
    elif [ "$code" -ne 2 ]; then writer_failed=$((writer_failed + 1)); echo "FAIL writers $t: exit $code"; fi
  done
  committed_total=$((committed_total + committed))
  if [ "$committed" -gt 0 ]; then
    if ! "$capflow" -q validate "$ds" >/dev/null 2>"$work/validate.err"; then
      writer_failed=$((writer_failed + 1)); echo "FAIL writers $t: $(head -c 300 "$work/validate.err")"
    fi
    version=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$ds/manifest.json")
    [ "$version" -eq "$committed" ] || { writer_failed=$((writer_failed + 1)); echo "FAIL writers $t: version $version, $committed commits"; }
  fi
done

echo "kills: $trials_run trials over $syscalls (step $step), $kills killed, $not_killed ran to the end; $failed failed"
echo "writers: $trials trials, $committed_total commits, $writer_failed failed"
[ "$failed" -eq 0 ] && [ "$writer_failed" -eq 0 ]
