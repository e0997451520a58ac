# Sweeps (where223 sweep, on dask.distributed): the version matrix (spaces/matrix.yaml, 144 cells in 72 stacks) and
# the architecture sweep (spaces/architectures.yaml, 286 cells in 2 stacks). Every cell runs in its stack's
# interpreter (built by uv under .cache/sweep/envs the first time a worker needs it), one single-threaded Dask
# worker per core; each sweep resumes where it stopped (SWEEP_ARGS=--force reruns every cell). Restrict with e.g.
#   make sweep SWEEP_ARGS="--stack 'project*,torch-2.1.2+*'"
#   make sweep SWEEP_ARGS="--scheduler tcp://HOST:8786"     (a cluster of your own: README, "Sweeps on a cluster")
SWEEP_SPACES ?= spaces/matrix.yaml spaces/architectures.yaml
SWEEP_ARGS ?=

.PHONY: sweep

# make sweep: every space's cells (resuming), then the matrix heatmap (notebook 05) and the architectures (06)
sweep: setup
	@for space in $(SWEEP_SPACES); do \
	  nice -n 10 $(PY) -m where223 sweep --space $$space $(SWEEP_ARGS) || exit $$?; \
	done
	$(PY) -m where223 run --only 05,06
