#!/usr/bin/env bash
# Times pip smatch 1.0.4 (through shared/oracles/oracle_smatch.py, restarts 4, seed 0) and
# `capflow amr smatch` (release build, one thread) on the same files, checks both print the same
# triple totals, counts pairs where capflow reaches the MILP optimum, and prints the speed ratio.
#
#   CAPFLOW_FIXTURES=/path/to/shared/fixtures \
#   CAPFLOW_ORACLE_PYTHON=/path/to/.venv-oracles/bin/python benches/smatch_vs_pip.sh [A B [EXPECTED]]
#
# CAPFLOW_ARGS adds options to `capflow amr smatch` (e.g. a lighter search:
# CAPFLOW_ARGS="--restarts 0 --perturbations 32 --sideways 0 --node-budget 0").
# Defaults: Bio v0.8 dev graph i against test graph i (500 unrelated pairs), with
# expected/smatch_bio_dev_vs_test_seed0_r4_exact.tsv for the optimum.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
fixtures="${CAPFLOW_FIXTURES:-$root/../shared/fixtures}"
python="${CAPFLOW_ORACLE_PYTHON:-$root/.venv-oracles/bin/python}"
oracle="$fixtures/../oracles/oracle_smatch.py"
a="${1:-$fixtures/amr/bio_v0.8_dev_isi_aligned.txt}"
b="${2:-$fixtures/amr/bio_v0.8_test_isi_aligned.txt}"
expected="${3:-$fixtures/expected/smatch_bio_dev_vs_test_seed0_r4_exact.tsv}"
repeats="${REPEATS:-3}"

(cd "$root" && cargo build --release --quiet --bin capflow)
capflow="$root/target/release/capflow"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

now() { date +%s.%N; }
best_of() { # best_of OUTFILE CMD...: fastest wall time of $repeats runs, output of the last
  local out="$1"; shift
  local best=""
  for _ in $(seq "$repeats"); do
    local t0 t1
    t0=$(now); "$@" > "$out"; t1=$(now)
    best=$(python3 -c "t=$t1-$t0; b='$best'; print(t if b=='' else min(t, float(b)))")
  done
  echo "$best"
}

pip_s=$(best_of "$work/pip.tsv" "$python" "$oracle" "$a" "$b" --restarts 4 --seed 0)
ours_s=$(best_of "$work/ours.tsv" "$capflow" amr smatch --no-header ${CAPFLOW_ARGS:-} "$a" "$b")

pairs=$(grep -vc '^total' "$work/ours.tsv")
totals_equal=$(paste <(cut -f6,7 "$work/pip.tsv") <(cut -f6,7 "$work/ours.tsv") | awk '$1==$3 && $2==$4' | wc -l)
below_pip=$(paste <(cut -f1,5 "$work/pip.tsv") <(cut -f5 "$work/ours.tsv") | awk '$1!="total" && $3<$2' | wc -l)
echo "machine:   $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "date:      $(date -u +%Y-%m-%dT%H:%MZ)"
echo "files:     $(basename "$a") vs $(basename "$b"), $pairs pairs"
echo "pip smatch (oracle_smatch.py, restarts 4): ${pip_s}s  total: $(grep '^total' "$work/pip.tsv" | cut -f2-)"
echo "capflow amr smatch ${CAPFLOW_ARGS:-} (release, 1 thread): ${ours_s}s  total: $(grep '^total' "$work/ours.tsv" | cut -f2-)"
echo "rows with equal triple totals: $totals_equal of $((pairs + 1)); pairs below pip: $below_pip"
if [ -f "$expected" ]; then
  optimal=$(paste <(cut -f5 "$work/ours.tsv") <(cut -f9 "$expected") | awk '{split($2,e,"=")} e[2]!="" && $1==e[2]' | wc -l)
  echo "pairs at the MILP optimum: $optimal of $pairs"
fi
python3 -c "print(f'speed-up: {$pip_s/$ours_s:.1f}x')"
