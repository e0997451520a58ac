"""`make test` runs on every core (pytest-xdist): tests that share a fixture run on one worker (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import SLOWEST_FIRST, xdist_group

RECORDING_TEST = """
import json, os
from pathlib import Path

def record(name):
    with Path(os.environ["WORKERS_LOG"]).open("a") as sink:
        sink.write(json.dumps([name, os.environ.get("PYTEST_XDIST_WORKER")]) + "\\n")

""" + "".join(f"def test_{index}():\n    record(__name__ + '.{index}')\n\n" for index in range(4))


def _workers(tmp_path: Path, conftest: str) -> dict[str, set[str]]:
    """Run a small suite on 2 workers with `conftest`; the workers each file's tests ran on."""
    for relative in ("tests/notebooks/test_01_a.py", "tests/notebooks/test_02_b.py", "tests/test_c.py"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(RECORDING_TEST)
    (tmp_path / "tests" / "conftest.py").write_text(conftest)
    path = os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("PYTEST_XDIST_WORKER", None)
    env["WORKERS_LOG"] = str(tmp_path / "workers.jsonl")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "tests"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    seen: dict[str, set[str]] = {}
    for line in (tmp_path / "workers.jsonl").read_text().splitlines():
        name, worker = json.loads(line)
        seen.setdefault(name.rsplit(".", 1)[0], set()).add(worker)
    return seen


def test_the_tests_sharing_notebook_01s_runs_stay_on_one_worker(tmp_path: Path):
    seen = _workers(tmp_path, "from tests.conftest import pytest_collection_modifyitems, pytest_xdist_make_scheduler\n")
    assert len(seen["test_01_a"] | seen["test_02_b"]) == 1 and len(seen["test_c"]) == 1, seen


def test_control_without_the_scheduler_the_tests_spread(tmp_path: Path):
    seen = _workers(tmp_path, "")
    assert len(seen["test_01_a"] | seen["test_02_b"] | seen["test_c"]) == 2, seen


def test_groups():
    assert xdist_group("tests/notebooks/test_03_fix_and_verify.py::test_every_check_passes") == "notebooks-01-03"
    assert xdist_group("tests/notebooks/test_04_variants.py::test_x[a::b]") == "tests/notebooks/test_04_variants.py"
    root = Path(__file__).parents[1]
    assert all(group == "notebooks-01-03" or (root / group).is_file() for group in SLOWEST_FIRST)  # no stale name


def test_auto_means_a_worker_per_core_and_one_more(request):
    """`-n auto` (pyproject's addopts) asks the hook of tests/conftest.py, ahead of pytest-xdist's own (a worker per
    core, what it answers without ours: the control)."""
    import xdist.plugin

    assert request.config.hook.pytest_xdist_auto_num_workers(config=request.config) == (os.cpu_count() or 1) + 1
    assert xdist.plugin.pytest_xdist_auto_num_workers(request.config) == (os.cpu_count() or 1)
