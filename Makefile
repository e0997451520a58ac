# where223: two commands from a fresh clone.
#   make run   create .venv if needed, then execute every notebook with papermill into outputs/
#   make test  create .venv if needed, then run pytest (notebooks with tiny parameters included)
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.where223-setup

.PHONY: setup run test lint lab clean-env

$(STAMP): requirements.lock pyproject.toml scripts/setup-env.sh
	bash scripts/setup-env.sh
	touch $@

setup: $(STAMP)

run: setup
	$(PY) -m where223 run

test: setup
	$(PY) -m pytest

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

clean-env:
	rm -rf $(VENV)
