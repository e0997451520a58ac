"""The fuzz's fixed-seed sample in `make test`: a few Hypothesis cases per reader (the full run, `make fuzz`, draws
10,000 each and writes outputs/benchmarks/fuzz.json), each run as the command line runs it in a forked child and
judged by tests/fuzz/harness.py. Together they take under 10 s; a failure lists what reproduces it."""

from __future__ import annotations

import json

import pytest

from tests.fuzz import harness
from tests.fuzz.engine import explore
from tests.fuzz.readers import reader

SEED = 223
# cases per reader: about 8 s in all on this machine's cores (a case of `run --params` reads each planned notebook's
# parameters: the slowest)
SAMPLE = {"onnx": 14, "kernel_cache": 6, "records": 12, "space": 5, "plan": 4, "yaml": 7}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    harness.warm()
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.parametrize("name", list(SAMPLE))
def test_every_sampled_case_keeps_the_contract(work, name):
    tally = explore(reader(name, work, sample=True), SAMPLE[name], SEED, work / name)
    assert tally.cases == SAMPLE[name]
    shown = [{key: failure[key] for key in ("signature", "argv", "env", "recipe")} | {
        "stderr": failure["outcome"]["stderr"][-600:]} for failure in tally.failures]
    assert not tally.failures, json.dumps(shown, indent=1, ensure_ascii=False)[:6000]
