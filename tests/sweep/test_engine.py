"""The engine end to end on a real Dask cluster: `dask scheduler` and two `dask worker` processes on 127.0.0.1,
driven through `where223 sweep --scheduler`, with a cell that runs, one that times out, one that kills its
worker, and cells whose stack fails to build; a deadline on the same cluster; resuming on the local cluster.
(An unreachable scheduler: tests/test_cli.py's user errors.)"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from where223.pipeline.paths import ROOT

BIN = Path(sys.executable).parent
CELL_KEY = {"recipe": "cpu_bf16_autocast", "exporter": "torchscript", "opset": "auto", "mode": "train"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_stacks(tmp_path: Path) -> Path:
    """The project's stack and one whose lock pins a package no index has (its build fails)."""
    lock = tmp_path / "broken.txt"
    lock.write_text("where223-no-such-package==0.0.1\n")
    stacks = tmp_path / "stacks.yaml"
    stacks.write_text(
        "environments:\n"
        "  project: {python: '3.11', lock: requirements.lock}\n"
        f"  broken: {{python: '3.11', lock: {lock}}}\n"
        "transformers: [4.26.0]\n"
    )
    return stacks


def write_space(tmp_path: Path, models: str, stacks: str = "[project]", timeout_s: int = 60) -> Path:
    space = tmp_path / f"space-{len(list(tmp_path.glob('space-*')))}.yaml"
    space.write_text(
        "study: engine-test\nrecords: 'engine/{stack}/{model}.json'\nrunner: where223.study.matrix.run\n"
        f"timeout_s: {timeout_s}\nstacks: {stacks}\nmodels: {models}\n"
        "recipes: [cpu_bf16_autocast]\nexporters: [torchscript]\n"
    )
    return space


def sweep(*arguments: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "where223", "sweep", *arguments]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    """A scheduler and two single-threaded workers (each under a nanny), configured as README says; shared by the
    tests of this file (a worker killed by a test is restarted by its nanny; each test waits for both)."""
    tmp_path = tmp_path_factory.mktemp("cluster")
    env = {
        **os.environ,
        "WHERE223_STACKS": str(write_stacks(tmp_path)),
        "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0",
        "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": "1.0",
    }
    address = f"tcp://127.0.0.1:{free_port()}"
    logs = tmp_path / "dask-logs"
    logs.mkdir()
    scheduler = subprocess.Popen(
        [BIN / "dask", "scheduler", "--host", "127.0.0.1", "--port", address.rsplit(":", 1)[1], "--no-dashboard"],
        env=env, stdout=subprocess.DEVNULL, stderr=(logs / "scheduler.log").open("w"), start_new_session=True,
    )  # fmt: skip
    workers = [
        subprocess.Popen(
            [BIN / "dask", "worker", address, "--nthreads", "1", "--no-dashboard", "--name", f"w{index}"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(logs / f"worker-{index}.log").open("w"),
            start_new_session=True,
        )  # fmt: skip
        for index in range(2)
    ]
    try:
        from distributed import Client

        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
        yield address, env
    finally:  # killed, each with what it started (its own session): a graceful close of nannies takes seconds
        for process in [*workers, scheduler]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        for process in [*workers, scheduler]:
            process.wait(timeout=30)


def records(outputs: Path) -> dict[str, dict]:
    return {p.relative_to(outputs).as_posix(): json.loads(p.read_text()) for p in sorted(outputs.rglob("*.json"))}


def wait_for_workers(address: str) -> None:
    from distributed import Client

    with Client(address, timeout=60) as client:
        client.wait_for_workers(2, timeout=60)


@pytest.mark.slow
def test_four_kinds_of_cell_through_a_running_scheduler(cluster, tmp_path):
    """Two sweeps side by side on the cluster (their own outputs trees): the cells that run, kill their worker or
    cannot be built, with a time limit they keep; and the cell that outlives a short one."""
    address, env = cluster
    wait_for_workers(address)
    outputs = {name: tmp_path / name for name in ("long", "short")}
    spaces = {
        "long": write_space(tmp_path, "[gpt2-tiny, control-kill-worker]", "[project, broken]", 300),
        "short": write_space(tmp_path, "[control-sleep]", "[project]", 5),
    }
    runs = {}
    for name, space in spaces.items():
        outputs[name].mkdir()
        command = [sys.executable, "-m", "where223", "sweep", "--space", str(space), "--scheduler", address,
                   "--output-root", str(outputs[name])]  # fmt: skip
        runs[name] = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)  # fmt: skip
    for run in runs.values():
        _, stderr = run.communicate(timeout=600)
        assert run.returncode == 0, stderr[-3000:]
    found = {**records(outputs["long"]), **records(outputs["short"])}
    assert set(found) == {"engine/project/gpt2-tiny.json", "engine/project/control-kill-worker.json",
                          "engine/broken/gpt2-tiny.json", "engine/broken/control-kill-worker.json",
                          "engine/project/control-sleep.json"}  # fmt: skip
    passed = found["engine/project/gpt2-tiny.json"]
    assert passed["outcome"] == "where_type_error" and passed["recorded_by"] == "cell"  # ran, judged by ORT
    assert passed["key"] == {"stack": "project", "model": "gpt2-tiny", **CELL_KEY}
    assert passed["threads"] == {"torch": 1, "omp": "1"}
    assert passed["engine"]["kind"] == "warm" and passed["engine"]["overhead_s"] is not None  # forked, warm
    read = passed["code"]["read"]  # the files its process ran: what --rerun-older-code compares
    assert {"src/where223/sweep/cell.py", "src/where223/graph/ort.py", "src/where223/graph/ort_child.py"} <= set(read)
    where = passed["where_error"]  # the seed's refusal, on the project's pinned stack
    assert (where["op_type"], where["param"], where["types"]) == ("Where", "T", ["float", "bfloat16"])
    assert where["node"] == "/model/transformer/h.0/attn/Where" and passed["error"]["stage"] == "load"
    assert passed["graph"]["opset"] == 17 and passed["graph"]["where_nodes"] == 2
    slept = found["engine/project/control-sleep.json"]
    assert slept["outcome"] == "timeout" and slept["recorded_by"] == "worker"
    assert 15 <= slept["wall_s"] < 30  # run once more with three times the limit before its record counts
    first = slept["engine"]["first_run"]
    assert (first["outcome"], first["timeout_s"]) == ("timeout", 5) and first["error"]["type"] == "Timeout"
    assert "read" not in slept["code"]  # the engine's own record: no list, so every change to cell code counts
    killed = found["engine/project/control-kill-worker.json"]
    assert killed["outcome"] == "crashed" and killed["error"]["type"] == "KilledWorker"
    assert "in each of 2 attempts" in killed["error"]["message"]  # retried once, then recorded
    assert "first_run" not in killed.get("engine", {})  # run twice already: not a third time
    for model in ("gpt2-tiny", "control-kill-worker"):
        broken = found[f"engine/broken/{model}.json"]
        assert broken["outcome"] == "not_built" and broken["error"]["stage"] == "stack"
        assert "where223-no-such-package" in broken["reason"] and "\n" not in broken["reason"]
    # a rerun resumes: every cell is recorded with its key, so nothing runs (the cluster is not even asked)
    again = sweep("--space", str(spaces["long"]), "--scheduler", address, "--output-root", str(outputs["long"]),
                  env=env)
    assert again.returncode == 0 and "all 4 cells already recorded" in again.stdout


@pytest.mark.slow
def test_resume_runs_only_missing_or_foreign_records_and_force_reruns(cluster, tmp_path):
    """The first sweep on a local cluster of its own (the default), the next ones on the shared cluster."""
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    env = {**os.environ, "WHERE223_STACKS": str(write_stacks(tmp_path))}
    space = write_space(tmp_path, "[control-exit, control-sleep]", timeout_s=3)
    first = sweep("--space", str(space), "--workers", "2", "--output-root", str(outputs), env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "ran 2 cells" in first.stdout
    exited = outputs / "engine/project/control-exit.json"
    assert json.loads(exited.read_text())["outcome"] == "crashed"
    assert "exit status 3" in json.loads(exited.read_text())["error"]["message"]
    assert json.loads(exited.read_text())["engine"]["first_run"]["outcome"] == "crashed"  # lost twice, then counted
    slept = outputs / "engine/project/control-sleep.json"
    foreign = {**json.loads(slept.read_text()), "key": {**json.loads(slept.read_text())["key"], "opset": 18}}
    slept.write_text(json.dumps(foreign))  # another cell's record at this path: not this cell's
    before = exited.stat().st_mtime_ns
    second = sweep("--space", str(space), "--scheduler", cluster[0], "--output-root", str(outputs), env=env)
    assert second.returncode == 0 and "ran 1 cells" in second.stdout, second.stdout
    assert exited.stat().st_mtime_ns == before and json.loads(slept.read_text())["key"]["opset"] == "auto"
    forced = sweep("--space", str(space), "--scheduler", cluster[0], "--model", "control-exit", "--force",
                   "--output-root", str(outputs), env=env)  # fmt: skip
    assert forced.returncode == 0 and "ran 1 cells" in forced.stdout and exited.stat().st_mtime_ns != before


@pytest.mark.slow
def test_past_its_deadline_a_sweep_records_the_unfinished_cells_not_run_and_a_resume_runs_them(cluster, tmp_path):
    address, env = cluster
    wait_for_workers(address)
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    space = write_space(tmp_path, "[control-exit, control-sleep]", timeout_s=600)
    common = ("--space", str(space), "--scheduler", address, "--output-root", str(outputs))
    assert sweep(*common, "--model", "control-exit", env=env).returncode == 0  # recorded before any deadline
    soon = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=4)).isoformat()
    done = sweep(*common, "--deadline", soon, env=env)  # the sleeping cell is still running at the deadline
    assert done.returncode == 0 and "ran 1 cells" in done.stdout, done.stderr[-3000:]
    found = records(outputs)
    assert found["engine/project/control-exit.json"]["outcome"] == "crashed"
    slept = found["engine/project/control-sleep.json"]
    assert slept["outcome"] == "not_run" and "deadline" in slept["reason"]
    again = sweep(*common, "--deadline", "2000-01-01T00:00", env=env)
    assert again.returncode == 0 and "ran 1 cells" in again.stdout  # not_run is not final: planned again, not run
    assert records(outputs)["engine/project/control-sleep.json"]["outcome"] == "not_run"
