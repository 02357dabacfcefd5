#!/usr/bin/env bash
# Runs every test. Installs the Python oracles first (pip, PyPI) when they are missing, and points
# the conformance tests at ../shared/fixtures unless CAPFLOW_FIXTURES says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
export CAPFLOW_FIXTURES="${CAPFLOW_FIXTURES:-$(cd .. && pwd)/shared/fixtures}"
bash scripts/setup-oracles.sh
cargo test --release --all-targets
