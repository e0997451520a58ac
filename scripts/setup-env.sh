#!/usr/bin/env bash
# Create or update the project environment in .venv/ (idempotent; `make setup` calls it when inputs change).
# 1. a venv from the machine's Python 3.11 (no interpreter is ever downloaded)
# 2. uv, at its requirements.lock pin, installed with pip; uv reads no pip configuration, so the indexes,
#    find-links, certificate bundle and constraints of pip's configuration are handed to it explicitly
#    (`python -m where223.pipeline.installer`); its cache is .cache/uv, next to .venv, so files are hard links
# 3. the pinned stack from requirements.lock, as listed (--no-deps)   4. torch-ort without its dependencies
#    (they would pull the GPU onnxruntime-training over the CPU one)   5. where223 itself, editable
# 6. ORTModule's C++ extensions, both compiled at once with ninja (about 2 minutes on 2 cores; kept in .cache)
# 7. the `where223` Jupyter kernel   8. the transformers release side folders of where223.gpt2.releases, so no
#    notebook installs anything.   9. bytecode for every module of the venv, the side folders and src/ that lacks
#    it: uv compiles what it installs (UV_COMPILE_BYTECODE, pipeline/installer.py), this covers a venv built before;
#    where PYTHONDONTWRITEBYTECODE is set (this machine, CI) nothing else would write it, and every kernel and
#    subprocess would compile torch and transformers from source again (benchmarks/import_bytecode.py).
# 10. .venv-graph: the graph tools beside today's onnx and onnxruntime, `pip install .[graph]` pinned by
#    requirements-graph.lock (no torch, no historic stack); `make test` runs tests/graph in it too.
# 11. the tests' generated fixtures, cached under .cache (what their first run would otherwise build).
# WHERE223_INSTALLER=pip makes pip do 3-5 and 8 (also the fallback when uv cannot be installed).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3.11}
VENV=.venv
PY=$VENV/bin/python
export WHERE223_INSTALLER=${WHERE223_INSTALLER:-uv}
case "$WHERE223_INSTALLER" in
  uv | pip) ;;
  *) echo "setup: WHERE223_INSTALLER=$WHERE223_INSTALLER; choose uv or pip" >&2; exit 1 ;;
esac

if [ ! -x "$PY" ]; then
  command -v "$PYTHON" >/dev/null || { echo "setup: $PYTHON not found; install Python 3.11 or set PYTHON=" >&2; exit 1; }
  echo "setup: creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
  || { echo "setup: $VENV is not Python 3.11; remove it and rerun" >&2; exit 1; }

pip_install_into() { local target=$1; shift; "$target" -m pip install --quiet --disable-pip-version-check "$@"; }

if [ "$WHERE223_INSTALLER" = uv ]; then
  uv_pin=$(grep -i '^uv==' requirements.lock || true)
  if [ -n "$uv_pin" ] && { [ "$("$VENV/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" = "${uv_pin#*==}" ] \
    || pip_install_into "$PY" "$uv_pin"; }; then
    uv_variables=$(PYTHONPATH=src "$PY" -m where223.pipeline.installer)
    eval "$uv_variables"
  else
    echo "setup: could not install ${uv_pin:-uv (no pin in requirements.lock)} with pip; installing with pip instead" >&2
    WHERE223_INSTALLER=pip
  fi
fi

# install_into PYTHON ARGS: install into PYTHON's environment; a try whose download broke off is made again, after a
# pause and one download at a time (`python -m where223.pipeline.installer --try-again`, the one rule for it).
install_into() {
  local target=$1 attempt=1 log rc
  shift
  log=$(mktemp)
  while :; do
    rc=0
    if [ "$WHERE223_INSTALLER" = uv ]; then
      "$VENV/bin/uv" pip install --quiet --python "$target" "$@" 2>"$log" || rc=$?
    else
      pip_install_into "$target" "$@" 2>"$log" || rc=$?
    fi
    cat "$log" >&2
    if [ "$rc" = 0 ] || ! next=$(PYTHONPATH=src "$PY" -m where223.pipeline.installer --try-again "$log" "$attempt"); then
      rm -f "$log"
      return "$rc"
    fi
    attempt=$((attempt + 1))
    echo "setup: a download broke off; installing again (try $attempt, in ${next##*sleep } s)" >&2
    eval "$next"  # the next try's variables (one download at a time), then its pause
  done
}
install() { install_into "$PY" "$@"; }

echo "setup: installing the pinned stack (requirements.lock) with $WHERE223_INSTALLER"
install --no-deps -r requirements.lock  # complete and exact: nothing to resolve (see its header for protobuf)
install --no-deps torch-ort==1.19.2
install --no-deps -e .

# What `python -m onnxruntime.training.ortmodule.torch_cpp_extensions.install` does on a CPU build, but both
# extensions compile at the same time (each in its own build folder, ninja from the lock on PATH) and without
# debug information (-g0 after Python's -g: the same machine code, 40% less compile time); installed only
# when both succeeded.
build_ortmodule_extensions() {
  local dir=$1 setup name pids=() failed=0
  for setup in "$dir"/cpu/*/setup.py; do
    name=$(basename "$(dirname "$setup")")
    (cd "$dir" && ONNXRUNTIME_CUDA_VERSION= ONNXRUNTIME_ROCM_VERSION= PATH="$ROOT/$VENV/bin:$PATH" \
      CFLAGS="${CFLAGS:-} -g0" MAX_JOBS=${MAX_JOBS:-$(nproc)} \
      "$ROOT/$PY" "$setup" build --build-temp "build/temp-$name") >"$VENV/ortmodule-$name.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  [ "$failed" = 0 ] && cp "$dir"/build/lib.*/*.so "$dir"/
}
ROOT=$PWD
extensions=$("$PY" -c 'import importlib.util as u, pathlib as p; print(p.Path(u.find_spec("onnxruntime").origin).parent / "training/ortmodule/torch_cpp_extensions")')
# Built once per torch, ORT and Python version: kept under .cache so that `make clean-env setup` reuses them.
built=.cache/ortmodule-extensions/$("$PY" -c 'import importlib.metadata as m, sys
print("torch-%s-ort-%s-py%d%d" % (m.version("torch"), m.version("onnxruntime-training-cpu"), *sys.version_info[:2]))')
if ! compgen -G "$extensions/*.so" >/dev/null; then
  if compgen -G "$built/*.so" >/dev/null; then
    echo "setup: ORTModule's C++ extensions from $built"
    cp "$built"/*.so "$extensions"/
  else
    echo "setup: building ORTModule's C++ extensions (about 2 minutes on 2 cores)"
    build_ortmodule_extensions "$extensions" \
      || { echo "setup: extension build failed, see $VENV/ortmodule-*.log" >&2; exit 1; }
  fi
fi
compgen -G "$built/*.so" >/dev/null || { mkdir -p "$built" && cp "$extensions"/*.so "$built"/; }

"$PY" -m ipykernel install --sys-prefix --name where223 --display-name "Python 3.11 (where223)" >/dev/null
echo "setup: transformers release side folders (.cache/transformers)"
"$PY" -m where223.gpt2.releases --install
echo "setup: bytecode for the venv, the side folders and src/"
"$PY" -m where223.pipeline.installer --compile "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
  .cache/transformers src
GRAPH_VENV=.venv-graph
echo "setup: the graph tools beside today's onnx and onnxruntime ($GRAPH_VENV, requirements-graph.lock)"
graph_requirements=(-c requirements-graph.lock -r requirements-graph.in -e ".[graph]")
if [ "$WHERE223_INSTALLER" = uv ]; then
  [ -x "$GRAPH_VENV/bin/python" ] || "$VENV/bin/uv" venv --quiet --python "$(command -v "$PYTHON")" "$GRAPH_VENV"
else
  [ -x "$GRAPH_VENV/bin/python" ] || "$PYTHON" -m venv "$GRAPH_VENV"
fi
install_into "$GRAPH_VENV/bin/python" "${graph_requirements[@]}"
# What the tests would otherwise build on their first run, deterministic and cached under .cache: onnx's conformance
# node models for today's onnx (its wheel ships none; the differential test reads them) and the tiny model exported
# with each transformers release (the historic variants are checked against them).
echo "setup: the tests' generated fixtures (.cache/onnx-conformance, .cache/transformers/exports)"
"$GRAPH_VENV/bin/python" -c "from where223.graph.mutants import generated_node_models; generated_node_models()"
"$PY" -c "from where223.gpt2.releases import RELEASES, export_with_release
for version in RELEASES.values():
    export_with_release(version)"
echo "setup: ready ($PY, kernel 'where223', installed with $WHERE223_INSTALLER, ${SECONDS}s)"
