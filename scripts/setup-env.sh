#!/usr/bin/env bash
# Create or update the project environment in .venv/ (idempotent; `make setup` calls it when inputs change).
# 1. a venv from Python 3.11   2. the pinned stack from requirements.lock   3. torch-ort without its deps
# (they would pull the GPU onnxruntime-training over the CPU one)   4. where223 itself, editable
# 5. ORTModule's C++ extensions (built once, ~2 min on 2 cores)   6. the `where223` Jupyter kernel.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=.venv
PY=$VENV/bin/python

if [ ! -x "$PY" ]; then
  command -v "$PYTHON" >/dev/null || { echo "setup: $PYTHON not found; install Python 3.11 or set PYTHON=" >&2; exit 1; }
  echo "setup: creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
  || { echo "setup: $VENV is not Python 3.11; remove it and rerun" >&2; exit 1; }

echo "setup: installing the pinned stack (requirements.lock)"
"$PY" -m pip install --quiet --disable-pip-version-check -r requirements.lock
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps torch-ort==1.19.2
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps -e .

if ! "$PY" -c 'import onnxruntime.training.ortmodule as m, sys; sys.exit(0 if m.is_torch_cpp_extensions_installed(m.ORTMODULE_TORCH_CPP_DIR) else 1)' 2>/dev/null; then
  echo "setup: building ORTModule's C++ extensions (about 2 minutes)"
  "$PY" -m onnxruntime.training.ortmodule.torch_cpp_extensions.install >"$VENV/ortmodule-extensions.log" 2>&1 \
    || { echo "setup: extension build failed, see $VENV/ortmodule-extensions.log" >&2; exit 1; }
fi

"$PY" -m ipykernel install --sys-prefix --name where223 --display-name "Python 3.11 (where223)" >/dev/null
echo "setup: ready ($PY, kernel 'where223')"
