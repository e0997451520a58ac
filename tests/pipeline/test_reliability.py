"""Determinism, offline runs, atomic outputs, kept failures, clear errors."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.network import attempts, network_audit
from where223.pipeline import portable, records
from where223.pipeline.paths import ROOT
from where223.pipeline.run import DEFAULT_PLAN, PlannedRun, UnknownKernelError, execute, load_plan

ATTEMPTS = """
import socket
listener = socket.create_server(("127.0.0.1", 0))
socket.create_connection(listener.getsockname()).close()  # loopback: not an attempt
attempts = (
    lambda: socket.socket().connect(("192.0.2.1", 443)),  # TEST-NET-1
    lambda: socket.create_connection(("pypi.org", 443), timeout=1),  # a name: looked up first
)
for attempt in attempts:
    try:
        attempt()
    except OSError as exc:  # caught, as code that falls back quietly would
        print(type(exc).__name__, exc)
"""


def test_control_the_network_audit_sees_attempts_that_code_catches(tmp_path: Path):
    env = {**os.environ, **network_audit(tmp_path, block=True)}
    result = subprocess.run([sys.executable, "-c", ATTEMPTS], env=env, capture_output=True, text=True, check=True)
    assert [line.split(" by ")[0] for line in attempts(tmp_path)] == [
        "socket.connect ('192.0.2.1', 443)",
        "socket.getaddrinfo 'pypi.org'",
    ]
    assert result.stdout.count("network blocked by test") == 2  # refused before any packet left


def test_every_notebook_test_fails_on_a_network_attempt(tmp_path: Path, monkeypatch):
    """`tests.conftest.run_notebook`, which every notebook test runs through, puts its run under the refusing
    audit and fails the test on any attempt (a process that tries and catches the refusal stands in for a kernel)."""
    import tests.conftest as helpers

    def tries(run, output_root):
        subprocess.run([sys.executable, "-c", ATTEMPTS], check=True, capture_output=True)  # inherits the run's env
        return output_root

    monkeypatch.setattr(helpers, "execute", tries)
    with pytest.raises(AssertionError, match=r"01_reproduce tried the network: \["):
        helpers.run_notebook("01_reproduce", tmp_path, audit_dir=tmp_path / "tries")
    assert "WHERE223_NETWORK_LOG" not in os.environ  # the test's own environment is given back
    monkeypatch.setattr(helpers, "execute", lambda run, output_root: output_root)  # control: stays on the machine
    assert helpers.run_notebook("01_reproduce", tmp_path, audit_dir=tmp_path / "stays") == tmp_path


def fresh_copy(target: Path) -> Path:
    """The repository as a fresh clone of this working tree would hold it (tracked and unignored files)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for relative in filter(None, listed):
        source = ROOT / relative
        if source.is_file():  # a tracked file deleted in the working tree is not copied
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / relative)
    return target


def network_namespace_refusal() -> str | None:
    """Why this machine cannot run a command in a network namespace holding only loopback, or None."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip is not installed"
    probe = subprocess.run(["unshare", "-n", "--", "ip", "link", "set", "lo", "up"], capture_output=True, text=True,
                           check=False)
    return None if probe.returncode == 0 else f"unshare -n is not permitted here: {probe.stderr.strip()}"


OFFLINE_RUN = """set -e
ip link set lo up
"$PYTHON" -m where223 run --params "$PLAN"
"$PYTHON" -m where223 report
"""


@pytest.mark.slow
def test_the_whole_plan_runs_offline_after_setup(tmp_path: Path):
    """`make run`'s commands (where223 run, then report) from a fresh copy of the repository, in a network namespace
    holding only loopback, with every Python process recording its non-loopback connection attempts.

    Every notebook of the plan also runs offline in its own tests, each under the refusing network audit
    (`tests.conftest.run_notebook`); this one shows that `make run`'s commands, the runner and the report, need no
    network either, from a fresh copy, on the plan's first copy of notebook 01 (the kernel, torch, transformers and
    the export) and its notebooks 05 and 06, which only read records.
    What setup leaves outside the clone is the venv (this interpreter and its Jupyter kernel) and the transformers
    release folders it installs under .cache/transformers/, linked into the copy.
    """
    refusal = network_namespace_refusal()
    if refusal and os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the offline test: {refusal}")
    if refusal:
        pytest.skip(refusal)
    from where223.gpt2.releases import RELEASES, release_dir

    repo = fresh_copy(tmp_path / "repo")
    for version in RELEASES.values():
        if not (release_dir(version) / "transformers").is_dir():
            pytest.fail(f"setup did not install transformers {version} into {release_dir(version)}: run `make setup`")
        linked = repo / release_dir(version).relative_to(ROOT)
        linked.parent.mkdir(parents=True, exist_ok=True)
        linked.symlink_to(release_dir(version))
    full = load_plan(DEFAULT_PLAN)
    plan = [full[0], *(r for r in full if r.notebook in ("05_matrix", "06_architectures"))]
    assert [r.notebook for r in plan] == ["01_reproduce", "05_matrix", "06_architectures"], plan
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(yaml.safe_dump({"runs": [{"notebook": r.notebook, "parameters": r.parameters} for r in plan]}))
    audit = network_audit(tmp_path, block=False)
    env = {name: value for name, value in os.environ.items()
           if name not in ("PYTEST_CURRENT_TEST", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")}
    env.update(audit, PYTHONPATH=os.pathsep.join([audit["PYTHONPATH"], str(repo / "src")]), WHERE223_ROOT=str(repo),
               PYTHON=sys.executable, PLAN=str(plan_path))
    result = subprocess.run(["unshare", "-n", "--", "bash", "-c", OFFLINE_RUN], cwd=repo, env=env,
                            capture_output=True, text=True, timeout=3600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert attempts(tmp_path) == []
    started = (tmp_path / "network.log.started").read_text()
    assert "ipykernel_launcher" in started  # the audit reached the kernels
    outputs = repo / "outputs"
    for planned in plan:
        assert (outputs / "manifests" / f"{planned.name}.json").is_file(), planned.name
    assert not (outputs / "failed").exists()
    assert not [path for path in (outputs / ".staging").rglob("*") if path.is_file()]
    assert not [path for path in outputs.rglob("*.json") if ".staging" in path.read_text()]  # paths as published


def test_interrupted_write_leaves_the_previous_record(tmp_path: Path, monkeypatch):
    target = tmp_path / "record.json"
    records.write_json(target, {"status": "reproduced"})

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        records.write_json(target, {"status": "half written"})
    assert json.loads(target.read_text()) == {"status": "reproduced"}
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_records_are_portable():
    site = Path(sys.prefix) / "lib" / "python3.11" / "site-packages" / "torch" / "onnx" / "utils.py"
    assert portable.record({"frames": [str(site)], "n": 1}) == {"frames": ["torch/onnx/utils.py"], "n": 1}


@pytest.mark.slow
def test_failed_run_keeps_previous_outputs_and_its_executed_copy(tmp_path: Path):
    # notebook 05 (records only, no torch): what is checked is the runner's, whichever notebook fails
    run = PlannedRun("05_matrix", {})
    executed = execute(run, output_root=tmp_path)
    before = executed.read_bytes()
    failing = PlannedRun("05_matrix", {"matrix_json": "outputs/matrix/missing.json"})
    with pytest.raises(Exception, match="05_matrix.*failed"):
        execute(failing, output_root=tmp_path)
    kept = tmp_path / "failed" / failing.name / "notebooks" / f"{failing.name}.ipynb"
    assert "FileNotFoundError" in kept.read_text() and "missing.json" in kept.read_text()
    assert executed.read_bytes() == before
    shutil.rmtree(tmp_path / "failed")


def test_missing_kernel_says_what_to_do(tmp_path: Path):
    with pytest.raises(UnknownKernelError, match="Jupyter kernel 'no-such-kernel' is not installed.*run `make setup`"):
        execute(PlannedRun("01_reproduce", {}), output_root=tmp_path, kernel="no-such-kernel")


def test_missing_input_record_says_which_notebook_to_run(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="run the notebook that writes it first"):
        records.read_json(tmp_path / "reproduce.json")
