# Architecture sweep (issue 13): every model type of transformers 4.25.1's base and causal-LM mappings, built small
# with random weights, exported under CPU bf16 autocast, judged by ONNX Runtime, with both releases of the fix.
# One subprocess per architecture (timeout ARCH_TIMEOUT s); records under outputs/architectures/<release>/;
# resumes where it stopped (ARCH_ARGS=--retry reruns timeouts and crashes, --force everything).
# `make -j2 architectures` runs the releases side by side (about 35 min on 2 cores; ARCH_SHARDS splits each further).
ARCH_RELEASES := 4.25.1 4.26.0
ARCH_SHARDS ?= 1
ARCH_TIMEOUT ?= 120
ARCH_ARGS ?=
ARCH_PARTS := $(foreach r,$(ARCH_RELEASES),$(foreach s,$(shell seq 0 $$(($(ARCH_SHARDS) - 1))),architectures-$(r)-$(s)))

.PHONY: architectures $(ARCH_PARTS)

# make architectures: every shard of every release, then summary.json and notebook 06
architectures: $(ARCH_PARTS)
	$(PY) -m where223 architectures --summary-only
	$(PY) -m where223 run --only 06

$(ARCH_PARTS): architectures-%: setup
	nice -n 10 $(PY) -m where223 architectures --release $(word 1,$(subst -, ,$*)) \
		--shard $(word 2,$(subst -, ,$*))/$(ARCH_SHARDS) --timeout $(ARCH_TIMEOUT) $(ARCH_ARGS)
