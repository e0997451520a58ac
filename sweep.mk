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

# make classes: the class study of one stack whole, each step resuming (hours on two cores; SWEEP_ARGS as above,
# e.g. "--deadline 2026-12-05T18:00Z --rerun-older-code"): the class sweep; its opset scan, planned, run, planned
# again (each group's members follow its representative's span) and run; the remedies of every refusal group; each
# group's rerun under CUDA's emulated fp16 policy; the float32 baseline of what a remedy left refused (planned from
# the remedies' records); then notebooks 07 and 08. Each plan is drawn from the records the steps before it wrote
# under outputs/. CLASS_STACK=2022 runs the same chain on the 2022 stack.
CLASS_STACK ?= today
CLASS_OPSETS_today := classes-opsets.yaml
CLASS_OPSETS_2022 := classes-opsets-2022.yaml
CLASS_STEPS = $(CLASS_OPSETS_$(CLASS_STACK)) $(CLASS_OPSETS_$(CLASS_STACK)) remedies-$(CLASS_STACK).yaml \
              classes-emulated-$(CLASS_STACK).yaml classes-baseline-$(CLASS_STACK).yaml

.PHONY: classes
classes: setup
	@case "$(CLASS_STACK)" in today|2022) ;; *) echo "make classes: CLASS_STACK is today or 2022, not $(CLASS_STACK)" >&2; exit 2;; esac
	nice -n 10 $(PY) -m where223 sweep --space spaces/classes-$(CLASS_STACK).yaml $(SWEEP_ARGS)
	@for space in $(CLASS_STEPS); do \
	  $(PY) -m where223 sweep --space spaces/$$space --plan || exit $$?; \
	  nice -n 10 $(PY) -m where223 sweep --space spaces/$$space $(SWEEP_ARGS) || exit $$?; \
	done
	$(PY) -m where223 run --only 07,08
