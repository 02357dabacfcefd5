#!/usr/bin/env bash
# Creates .venv-oracles with the independent Python references the tests compare against
# (smatch, penman, scipy, scikit-learn, pycocoevalcap, pyarrow, duckdb).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-oracles/bin/python ]; then
    python3 -m venv .venv-oracles
fi
.venv-oracles/bin/pip install --quiet --disable-pip-version-check \
    smatch==1.0.4 penman==1.3.1 numpy scipy scikit-learn pyarrow pycocoevalcap==1.2 duckdb
