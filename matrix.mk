# Version matrix (issue 6): transformers x torch x exporter for the tiny GPT-2 under CPU bf16 autocast.
# Builds one venv per torch version under .cache/matrix/envs (3-5 GB each, but uv makes them hard links into
# .cache/uv; WHERE223_INSTALLER=pip copies instead), ~25 min for the whole matrix on 2 cores, and resumes where
# it stopped. Restrict with e.g.
#   make matrix MATRIX_ARGS="--torch 2.1.2,2.2.2 --exporter torchscript"      (add --force to rerun cells)
MATRIX_PYTHON ?= $(if $(PY),$(PY),.venv/bin/python)
MATRIX_ARGS ?=

.PHONY: matrix

# make matrix: build the cells (resuming), then draw the heatmap and conclusions with notebook 05
matrix: setup
	nice -n 10 $(MATRIX_PYTHON) -m where223 matrix $(MATRIX_ARGS)
	$(MATRIX_PYTHON) -m where223 run --only 05
