"""Shared fixtures: run a notebook with papermill into a temporary outputs folder."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

# pytest-xdist runs a worker per core and one more (`pytest_xdist_auto_num_workers`): each worker, and the kernels and
# subprocesses it starts, computes on its share of the cores (torch's intra-op threads, at least one), instead of
# every worker spreading threads over all of them and waiting.
if os.environ.get("PYTEST_XDIST_WORKER"):
    _SHARE = max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, str(_SHARE))

from where223.pipeline.run import PlannedRun, execute  # noqa: E402  (after the thread settings: torch reads them)


def run_notebook(notebook: str, output_root: Path, audit_dir: Path | None = None, **parameters: Any) -> Path:
    """Execute a source notebook with `parameters` into `output_root` and return the executed copy.

    The kernel and every process it starts run under the network audit (`tests.network`, refusing): a notebook
    that tries to reach beyond the machine, even where its code catches the refusal, fails the test. The audit's
    files go to `audit_dir` (a temporary folder when None).

    ipykernel stops forwarding file descriptors (so `sys.stdout.fileno()` is None, which ORTModule's
    log redirection cannot take) when PYTEST_CURRENT_TEST is set: the kernel starts without it.
    """
    from tests.network import attempts, network_audit

    temporary = audit_dir is None
    audit_dir = Path(tempfile.mkdtemp(prefix="network-")) if audit_dir is None else audit_dir
    audit_dir.mkdir(parents=True, exist_ok=True)
    saved = dict(os.environ)
    os.environ.pop("PYTEST_CURRENT_TEST", None)
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.pop(variable, None)  # the project itself must turn the hub off
    os.environ.update(network_audit(audit_dir, block=True))
    try:
        return execute(PlannedRun(notebook, parameters), output_root=output_root)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        tried = attempts(audit_dir)
        if temporary:
            shutil.rmtree(audit_dir, ignore_errors=True)
        if tried:
            raise AssertionError(f"{notebook} tried the network: {tried[:3]}")


def load_json(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


@pytest.fixture(scope="session")
def session_outputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One temporary outputs folder shared by the notebook tests of a session."""
    return tmp_path_factory.mktemp("outputs")


TINY = {"batch_size": 1, "seq_len": 8}


def run_name(path: str, **parameters: Any) -> str:
    """The run folder notebook 01 writes for `path` and `parameters`, named as the notebooks name it."""
    from where223.gpt2 import runs
    from where223.gpt2.reproduce import ReproduceSettings

    return ReproduceSettings.from_parameters({**runs.DEFAULTS, "path": path, **parameters}).run_name()


@pytest.fixture(scope="session")
def reproduced(session_outputs: Path):
    """Run notebook 01 with tiny parameters once per path and session; returns path -> (executed, record)."""
    done: dict[str, tuple[Path, dict[str, Any]]] = {}

    def get(path: str) -> tuple[Path, dict[str, Any]]:
        if path not in done:
            executed = run_notebook("01_reproduce", session_outputs, path=path, **TINY)
            done[path] = executed, load_json(session_outputs / run_name(path, **TINY) / "reproduce.json")
        return done[path]

    return get


# pytest-xdist (`make test` runs `pytest -n auto`): tests of one file share its module fixtures, so a file runs on one
# worker; the notebook tests of 01-03 share the session's runs of notebook 01 (`reproduced`), so they run on one
# worker together. Done by a scheduler of our own (xdist's hook for it), not by `--dist loadgroup` and xdist_group
# marks: pytest 9.2 ignores the node-id suffix those marks rely on (pytest-xdist issue 1386), and the tests would
# silently spread over the workers, each running the shared fixtures again.
SHARED_SESSION_RUNS = ("tests/notebooks/test_01_", "tests/notebooks/test_02_", "tests/notebooks/test_03_")


def xdist_group(nodeid: str) -> str:
    """The worker group of a test: its file, or the group of the files sharing notebook 01's runs."""
    file = nodeid.split("::", 1)[0]
    return "notebooks-01-03" if file.startswith(SHARED_SESSION_RUNS) else file


# The groups that take longest (`pytest --durations`), started first so that no worker is left with a long one at the
# end; the others follow in collection order. The order changes only how soon the run ends, never a result.
SLOWEST_FIRST = ("notebooks-01-03", "tests/browser/test_browser.py", "tests/sweep/test_engine.py",
                 "tests/pipeline/test_reliability.py", "tests/graph/test_hostile.py", "tests/fixes/test_fixes_today.py",
                 "tests/fixes/test_fixes.py",
                 "tests/study/test_compare.py", "tests/pipeline/test_publish_faults.py",
                 "tests/notebooks/test_04_variants.py", "tests/test_imports.py", "tests/pipeline/test_publish.py",
                 "tests/study/test_architectures.py", "tests/gpt2/test_portable_export.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        group = xdist_group(item.nodeid)
        return SLOWEST_FIRST.index(group) if group in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)  # stable: collection order inside a group and among the rest


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: what `-n auto` means
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """One worker per core, and one more: the suite spends much of its time waiting (kernels starting, time limits
    running out, servers answering, a worker's last group running alone), which the extra worker fills; its CPU
    time is well under its wall time on every core (`make test`'s time: outputs/benchmarks/command_times.json)."""
    return (os.cpu_count() or 1) + 1


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: with `-n 0` nothing calls it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any):
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        """xdist's scope scheduling, with `xdist_group` as the scope: each group runs whole on one worker, the groups
        handed out in collection order (SLOWEST_FIRST), not reordered by their number of tests."""

        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    config.option.loadscopereorder = False
    return SharedFixtureScheduling(config, log)
