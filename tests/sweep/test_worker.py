"""The stdlib-only worker: a cell in a subprocess with a time limit, how it ended when it left no record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from where223.pipeline.paths import ROOT
from where223.sweep import worker

KEY = {"stack": "project", "recipe": "cpu_bf16_autocast", "exporter": "torchscript", "opset": "auto", "mode": "train"}


def test_a_cell_past_its_limit_is_killed_with_its_children_and_recorded_as_a_timeout(tmp_path):
    start = time.monotonic()
    record = worker.run_cell({**KEY, "model": "control-sleep"}, sys.executable, ROOT / "src", tmp_path / "w", 3)
    assert record["outcome"] == "timeout" and record["recorded_by"] == "worker"
    assert record["error"]["type"] == "Timeout" and 3 <= record["wall_s"] < 20 and time.monotonic() - start < 20
    # this cell's process (its command line names this test's folder; the engine's tests may run other cells now)
    alive = subprocess.run(["pgrep", "-f", f"where223.sweep.cell.*{tmp_path}"], capture_output=True, text=True)
    assert str(os.getpid()) not in alive.stdout and alive.stdout.strip() == ""  # nothing left running


def test_a_cell_that_exits_without_a_record_is_crashed_with_its_exit_status(tmp_path):
    record = worker.run_cell({**KEY, "model": "control-exit"}, sys.executable, ROOT / "src", tmp_path / "w", 30)
    assert record["outcome"] == "crashed" and "exit status 3" in record["error"]["message"]


def test_a_stale_record_of_an_earlier_run_is_never_read(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    (work / "record.json").write_text(json.dumps({"outcome": "accepted"}))
    record = worker.run_cell({**KEY, "model": "control-exit"}, sys.executable, ROOT / "src", work, 30)
    assert record["outcome"] == "crashed"


def test_control_the_kill_control_kills_nothing_outside_a_sweep_worker(tmp_path):
    """Run without a worker naming itself (no WHERE223_SWEEP_WORKER_PID), the kill control leaves its parent be."""
    env = {k: v for k, v in os.environ.items() if k != worker.WORKER_PID}
    env["PYTHONPATH"] = str(ROOT / "src")
    key = json.dumps({**KEY, "model": "control-kill-worker"})
    command = [sys.executable, "-m", "where223.sweep.cell", "--cell", key,
               "--onnx", str(tmp_path / "m.onnx"), "--out", str(tmp_path / "r.json")]  # fmt: skip
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=60)
    record = json.loads((tmp_path / "r.json").read_text())
    assert record["outcome"] == "not_applicable" and "nothing to kill" in record["reason"]


def test_the_last_stage_a_cell_announced():
    assert worker.last_stage("x\nWHERE223_STAGE import\nWHERE223_STAGE export\nnoise") == "export"
    assert worker.last_stage("no markers") == "start"


def test_the_cell_environment_pins_threads_and_is_offline(tmp_path):
    env = worker.cell_environment(ROOT / "src", [tmp_path / "side"], 1)
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == env["WHERE223_CELL_THREADS"] == "1"
    assert env["HF_HUB_OFFLINE"] == "1" and env["PYTHONPATH"] == f"{tmp_path / 'side'}{os.pathsep}{ROOT / 'src'}"


def test_a_cell_whose_worker_dies_ends_too(tmp_path):
    """An orphaned cell would run past any limit: it watches its parent and exits when that dies."""
    script = (
        "import os, subprocess, sys; os.environ['WHERE223_SWEEP_WORKER_PID'] = str(os.getpid()); "
        "p = subprocess.Popen([sys.executable, '-m', 'where223.sweep.cell', '--cell', sys.argv[1], '--onnx', "
        "sys.argv[2], '--out', sys.argv[3]]); print(p.pid, flush=True)"
    )  # the parent starts the cell and exits at once, as a killed worker would
    key = json.dumps({**KEY, "model": "control-sleep"})
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-c", script, key, str(tmp_path / "m.onnx"), str(tmp_path / "r.json")],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, check=True,
                          timeout=60)  # fmt: skip
    child = int(done.stdout.split()[0])
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and os.path.exists(f"/proc/{child}") and "Z" not in _state(child):
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{child}") or "Z" in _state(child), "the orphaned cell kept running"


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0]
    except OSError:
        return "Z"


def test_the_status_line_rates_the_cells_it_ran_not_those_it_skipped():
    import io

    from where223.sweep.driver import Progress

    progress = Progress(total=10, skipped=8, stream=io.StringIO())
    progress.done = 8
    progress.started -= 60  # one minute in
    assert "0.0 cells/min" in progress.line() and "time left unknown" in progress.line()
    progress.add({"outcome": "accepted"})
    assert "1.0 cells/min" in progress.line() and "~1 min left" in progress.line()


def test_a_finished_cell_s_large_exports_are_removed_with_their_weights_and_small_ones_kept(tmp_path):
    """A cell whose model files together pass the kept size loses them all, its small model.onnx with its large
    external data included (kept alone it could not be loaded); its record and log stay. The control: a cell whose
    exports fit keeps every file. The big files are sparse: they take no disk."""
    from where223.sweep import driver

    def cell(folder, data_bytes):
        folder.mkdir()
        (folder / "model.onnx").write_bytes(b"x" * 100)
        with (folder / "model.onnx.data").open("wb") as handle:
            handle.truncate(data_bytes)
        (folder / "model.log").write_text("x")
        (folder / "record.json").write_text("{}")
        return folder

    large = cell(tmp_path / "large", driver.KEPT_WORK_BYTES)  # with model.onnx's 100 bytes: just over
    driver._trim(large)
    assert sorted(p.name for p in large.iterdir()) == ["model.log", "record.json"]
    small = cell(tmp_path / "small", driver.KEPT_WORK_BYTES - 100)  # just fits: the control
    driver._trim(small)
    assert sorted(p.name for p in small.iterdir()) == ["model.log", "model.onnx", "model.onnx.data", "record.json"]
    with (small / "model.log").open("wb") as handle:  # a verbose export's log of gigabytes goes too
        handle.truncate(driver.KEPT_WORK_BYTES + 1)
    driver._trim(small)
    assert not (small / "model.log").exists() and (small / "model.onnx.data").exists()
