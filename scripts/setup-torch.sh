#!/usr/bin/env bash
# Installs PyTorch 2.11.0 (the libtorch that tch 0.24 pairs with) from PyPI into .venv-torch.
# Build the training feature with:
#   LIBTORCH_USE_PYTORCH=1 PATH="$PWD/.venv-torch/bin:$PATH" cargo build --release --features train
# build.rs records torch/lib as the binary's rpath, so no LD_LIBRARY_PATH is needed at run time.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-torch/bin/python ]; then
    python3 -m venv .venv-torch
fi
if ! .venv-torch/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.11.0')" 2>/dev/null; then
    .venv-torch/bin/pip install --quiet --disable-pip-version-check --no-cache-dir torch==2.11.0
fi
.venv-torch/bin/python -c "import torch; print('torch', torch.__version__, 'at', torch.__path__[0])"
