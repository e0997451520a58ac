"""Determinism, offline runs, atomic outputs, kept failures, clear errors."""

import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import TINY, load_json, run_notebook
from where223.pipeline import records
from where223.pipeline.run import PlannedRun, execute

VOLATILE = {"timing", "environment"}


def stable(record: dict) -> dict:
    return {key: value for key, value in record.items() if key not in VOLATILE}


@pytest.mark.slow
def test_two_runs_with_the_same_parameters_record_the_same_json(tmp_path: Path):
    first = {}
    for attempt in ("first", "second"):
        run_notebook("01_reproduce", tmp_path, path="ortmodule", **TINY)
        run_notebook("02_graph", tmp_path, source_run="tiny-cpu-bf16-ortmodule", hops=1)
        written = sorted((tmp_path / "tiny-cpu-bf16-ortmodule").rglob("*.json"))
        assert len(written) == 4  # reproduce, lint, blame, divergence
        current = {path.relative_to(tmp_path): stable(load_json(path)) for path in written}
        if attempt == "first":
            first = current
    assert current == first


BLOCK_NETWORK = textwrap.dedent(
    """
    import ipaddress, os, socket

    _log = os.environ["WHERE223_NETWORK_LOG"]
    _connect = socket.socket.connect

    def _loopback(address):
        try:
            return ipaddress.ip_address(address[0]).is_loopback
        except (ValueError, TypeError, IndexError):
            return isinstance(address, (str, bytes))  # unix sockets

    def connect(self, address):
        if not _loopback(address):
            with open(_log, "a") as log:
                log.write(f"{address}\\n")
            raise OSError(f"network blocked by test: {address}")
        return _connect(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host not in (None, "localhost", "127.0.0.1", "::1") and not str(host).startswith("127."):
            with open(_log, "a") as log:
                log.write(f"dns {host}\\n")
            raise socket.gaierror(f"name lookup blocked by test: {host}")
        return _getaddrinfo(host, *args, **kwargs)

    _getaddrinfo = socket.getaddrinfo
    socket.socket.connect = connect
    socket.getaddrinfo = getaddrinfo
    """
)


@pytest.mark.slow
def test_notebook_01_runs_with_the_network_blocked(tmp_path: Path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_NETWORK)
    log = tmp_path / "network.log"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("WHERE223_NETWORK_LOG", str(log))
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)  # the project itself must turn the hub off
    run_notebook("01_reproduce", tmp_path / "out", path="ort_trainer", **TINY)
    assert load_json(tmp_path / "out" / "tiny-cpu-bf16-ort_trainer" / "reproduce.json")["status"] == "reproduced"
    assert not log.exists() or log.read_text() == ""


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
    kept = tmp_path / "failed" / f"{failing.name}.ipynb"
    assert "ParameterError" in kept.read_text()
    assert executed.read_bytes() == before
    shutil.rmtree(tmp_path / "failed")


def test_missing_kernel_says_what_to_do(tmp_path: Path):
    with pytest.raises(RuntimeError, match="Jupyter kernel 'no-such-kernel' is not installed.*run `make setup`"):
        execute(PlannedRun("01_reproduce", {}), output_root=tmp_path, kernel="no-such-kernel")


def test_missing_input_record_says_which_notebook_to_run(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="run the notebook that writes it first"):
        records.read_json(tmp_path / "reproduce.json")
