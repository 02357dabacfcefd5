#!/usr/bin/env bash
# Creates .venv-oracles with the independent Python references the tests compare against
# (smatch, penman, scipy, scikit-learn, pycocoevalcap, pyarrow, duckdb, Hugging Face datasets, deltalake, polars and Pillow), at
# the versions pinned in scripts/oracles-requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-oracles/bin/python ]; then
    python3 -m venv .venv-oracles
fi
.venv-oracles/bin/pip install --quiet --disable-pip-version-check \
    -r scripts/oracles-requirements.txt
