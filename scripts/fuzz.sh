#!/usr/bin/env bash
# Coverage-guided fuzzing of every reader and the PENMAN parser on stable Rust: libFuzzer
# (the `libfuzzer-sys` crate) with rustc's SanitizerCoverage instrumentation, the flags
# `cargo fuzz` passes minus AddressSanitizer (which needs nightly; capflow's readers are safe
# Rust, so panics, overflows, debug assertions, hangs and memory blow-ups are what is looked for).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET ...]
#
# Targets (fuzz/fuzz_targets/): flickr_markup, flickr_xml, coco_json (COCO captions, instances,
# Entities and Visual Genome from memory), penman (parser and encoder round trip), input_files
# (every path-based reader: GBC .jsonl/.json/.parquet, PENMAN files, capflow Parquet, COCO and
# Visual Genome files). The corpus of each target lives in fuzz/corpus/<target> and grows as
# libFuzzer finds new coverage; it starts from the embedded sample data (project licence).
# Crashes, hangs (over 10 s) and inputs over the memory limit land in fuzz/artifacts/<target>/.
# Each run ends with libFuzzer's statistics: executions, coverage (cov: edges), corpus size.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    TARGETS=(flickr_markup flickr_xml coco_json penman input_files)
fi
TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/../target/fuzz}"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# --target keeps the instrumentation off build scripts and proc macros.
cargo build --release --target "$TRIPLE" $(printf -- '--bin %s ' "${TARGETS[@]}")

data=../examples/data
seed() { # target file [prefix byte]
    local dir="corpus/$1"
    mkdir -p "$dir"
    local name
    name="seed-$(basename "$2")${3:+-$3}"
    [ -e "$dir/$name" ] && return
    if [ -n "${3:-}" ]; then
        { printf "\\x$(printf %02x "$3")"; cat "$2"; } > "$dir/$name"
    else
        cp "$2" "$dir/$name"
    fi
}
seed flickr_markup "$data/flickr30k_entities/Sentences/1000001.txt"
seed flickr_xml "$data/flickr30k_entities/Annotations/1000001.xml"
seed coco_json "$data/coco/captions.json"
seed coco_json "$data/detections/instances.json"
seed coco_json "$data/visual_genome/scene_graphs.json"
seed penman "$data/amr/captions.amr"
seed input_files "$data/gbc/sample_gbc.jsonl" 0
seed input_files "$data/amr/captions.amr" 3
seed input_files "$data/coco/captions.json" 5
seed input_files "$data/detections/instances.json" 6
seed input_files "$data/coco/coco_entities.json" 7
seed input_files "$data/visual_genome/scene_graphs.json" 8

for target in "${TARGETS[@]}"; do
    mkdir -p "corpus/$target" "artifacts/$target"
    echo "== $target: ${SECONDS_PER_TARGET} s"
    "$CARGO_TARGET_DIR/$TRIPLE/release/$target" "corpus/$target" \
        -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len="${MAX_LEN:-16384}" \
        -artifact_prefix="artifacts/$target/" -print_final_stats=1 2>&1 \
        | grep -E "^(#[0-9]+[[:space:]]+(DONE|INITED)|stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+== ERROR|SUMMARY|.*(panicked|deadly signal|Test unit written))" || true
done
# Keep the corpora small: libFuzzer's merge keeps the inputs that add coverage, smallest first.
if [ "${MINIMIZE:-1}" = 1 ]; then
    for target in "${TARGETS[@]}"; do
        rm -rf "corpus/$target.min"
        mkdir "corpus/$target.min"
        "$CARGO_TARGET_DIR/$TRIPLE/release/$target" -merge=1 -max_len="${MAX_LEN:-16384}" \
            "corpus/$target.min" "corpus/$target" > /dev/null 2>&1
        rm -rf "corpus/$target"
        mv "corpus/$target.min" "corpus/$target"
        echo "$target corpus: $(ls "corpus/$target" | wc -l) inputs, $(du -sh "corpus/$target" | cut -f1)"
    done
fi
echo "artifacts (crashes, hangs, out-of-memory inputs):"
find artifacts -type f | sort || true
