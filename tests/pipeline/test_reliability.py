"""Determinism, offline runs, atomic outputs, kept failures, clear errors."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.conftest import TINY, load_json, run_name, run_notebook
from where223.pipeline import records
from where223.pipeline.paths import ROOT
from where223.pipeline.run import DEFAULT_PLAN, PlannedRun, UnknownKernelError, execute, load_plan

VOLATILE = {"timing", "environment"}


def stable(record: dict) -> dict:
    return {key: value for key, value in record.items() if key not in VOLATILE}


@pytest.mark.slow
def test_two_runs_with_the_same_parameters_record_the_same_json(tmp_path: Path):
    first = {}
    for attempt in ("first", "second"):
        run_notebook("01_reproduce", tmp_path, path="ortmodule", **TINY)
        run_notebook("02_graph", tmp_path, path="ortmodule", **TINY, hops=1)
        written = sorted((tmp_path / run_name("ortmodule", **TINY)).rglob("*.json"))
        assert len(written) == 4  # reproduce, lint, blame, divergence
        current = {path.relative_to(tmp_path): stable(load_json(path)) for path in written}
        if attempt == "first":
            first = current
    assert current == first


NETWORK_AUDIT = textwrap.dedent(
    """
    # Put first on PYTHONPATH, this runs in every Python process started with it: the runner, its Jupyter kernels
    # and their subprocesses. An audit hook records each non-loopback connection attempt and name lookup, those
    # that code catches included, in $WHERE223_NETWORK_LOG (and, with WHERE223_NETWORK_BLOCK=1, refuses it);
    # each process notes its command line in $WHERE223_NETWORK_LOG.started, so the hook is seen to reach it.
    import ipaddress, os, socket, sys

    _log = os.environ.get("WHERE223_NETWORK_LOG")
    _block = os.environ.get("WHERE223_NETWORK_BLOCK") == "1"
    _command = " ".join(sys.orig_argv).replace("\\n", " ")[:300]  # `-m ipykernel_launcher ...` stays visible

    def _loopback(host):
        if host in (None, "", "localhost", b"localhost"):
            return True
        try:
            return ipaddress.ip_address(host.decode() if isinstance(host, bytes) else host).is_loopback
        except ValueError:
            return False

    def _audit(event, args):
        if event in ("socket.connect", "socket.sendto"):
            sock, address = args[0], args[-1]
            if sock.family not in (socket.AF_INET, socket.AF_INET6) or _loopback(address[0]):
                return
            attempt, refusal = f"{event} {address!r}", OSError
        elif event == "socket.getaddrinfo":
            if _loopback(args[0]):
                return
            attempt, refusal = f"{event} {args[0]!r}", socket.gaierror
        else:
            return
        with open(_log, "a") as log:
            log.write(f"{attempt} by {_command}\\n")
        if _block:
            raise refusal(f"network blocked by test: {attempt}")

    if _log:
        with open(_log + ".started", "a") as started:
            started.write(_command + "\\n")
        sys.addaudithook(_audit)
    """
)


def network_audit(tmp_path: Path, block: bool) -> dict[str, str]:
    """Environment variables that install NETWORK_AUDIT in every Python process started with them."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(NETWORK_AUDIT)
    return {
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        "WHERE223_NETWORK_LOG": str(tmp_path / "network.log"),
        "WHERE223_NETWORK_BLOCK": "1" if block else "0",
    }


def attempts(tmp_path: Path) -> list[str]:
    """The non-loopback attempts NETWORK_AUDIT recorded."""
    log = tmp_path / "network.log"
    return log.read_text().splitlines() if log.exists() else []


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


@pytest.mark.slow
def test_notebook_01_runs_with_the_network_blocked(tmp_path: Path, monkeypatch):
    for name, value in network_audit(tmp_path, block=True).items():
        monkeypatch.setenv(name, value)
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)  # the project itself must turn the hub off
    run_notebook("01_reproduce", tmp_path / "out", path="ort_trainer", **TINY)
    assert load_json(tmp_path / "out" / run_name("ort_trainer", **TINY) / "reproduce.json")["status"] == "reproduced"
    assert attempts(tmp_path) == []


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

    The plan is notebooks/plan.yaml, every notebook of it, with one change to keep the test short: notebook 04
    measures the tiny model for 1 step (model_preset tiny, steps 1, warmup 0) instead of GPT-2 for 20. What setup
    leaves outside the clone is the venv (this interpreter and its Jupyter kernel) and the transformers release
    folders it installs under .cache/transformers/, linked into the copy.
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
    plan = load_plan(DEFAULT_PLAN)
    tiny_04 = {"model_preset": "tiny", "steps": 1, "warmup": 0}
    plan = [PlannedRun(r.notebook, {**r.parameters, **tiny_04} if r.notebook == "04_variants" else r.parameters)
            for r in plan]
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
    assert "ipykernel_launcher" in started and "where223.gpt2.releases" in started  # the audit reached them
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
    assert records.portable({"frames": [str(site)], "n": 1}) == {"frames": ["torch/onnx/utils.py"], "n": 1}


@pytest.mark.slow
def test_failed_run_keeps_previous_outputs_and_its_executed_copy(tmp_path: Path):
    run = PlannedRun("01_reproduce", {"path": "onnx_export", **TINY})
    executed = execute(run, output_root=tmp_path)
    before = executed.read_bytes()
    failing = PlannedRun("01_reproduce", {"path": "onnx_export", **TINY, "seq_len": 10_000})
    with pytest.raises(Exception, match="parameter seq_len=10000 must be an integer in"):
        execute(failing, output_root=tmp_path)
    kept = tmp_path / "failed" / failing.name / "notebooks" / f"{failing.name}.ipynb"
    assert "ParameterError" in kept.read_text()
    assert executed.read_bytes() == before
    shutil.rmtree(tmp_path / "failed")


def test_missing_kernel_says_what_to_do(tmp_path: Path):
    with pytest.raises(UnknownKernelError, match="Jupyter kernel 'no-such-kernel' is not installed.*run `make setup`"):
        execute(PlannedRun("01_reproduce", {}), output_root=tmp_path, kernel="no-such-kernel")


def test_missing_input_record_says_which_notebook_to_run(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="run the notebook that writes it first"):
        records.read_json(tmp_path / "reproduce.json")
