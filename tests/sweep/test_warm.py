"""The warm engine: cells forked from a stack's warm server (`where223.sweep.warm`), each in a process, session and
process group of its own, so that whatever one does ends with it; the server refused when it is unsafe to fork,
and ending with its worker. Cells of a runner written here (hostile ones, and the checks that see whether they
leaked), in the project's interpreter; the server of the first tests imports torch, and is shared by them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.processes import alive
from where223.pipeline.paths import ROOT
from where223.sweep import worker

KEY = {"stack": "project", "recipe": "cpu_bf16_autocast", "exporter": "torchscript", "opset": "auto", "mode": "train"}
RUNNER = "where223_test_cells"
PRELOAD = ("torch", "torch.onnx")
SYMBOLIC = "where223test::op"

CELLS = textwrap.dedent(f'''
    """Cells for tests/sweep/test_warm.py."""
    import os, subprocess, sys, time
    from pathlib import Path

    MARK = "where223_test_patched"


    def facts():
        import torch
        from torch.onnx._internal import registration
        return {{"pid": os.getpid(), "parent": os.getppid(), "session": os.getsid(0), "group": os.getpgid(0),
                "add_patched": getattr(torch.add, MARK, False),
                "symbolic": registration.registry.is_registered_op("{SYMBOLIC}", 9),
                "offline": os.environ.get("HF_HUB_OFFLINE"), "cwd": os.getcwd(), "argv0": sys.path[0]}}


    def patch():
        import torch
        original = torch.add
        def patched(*args, **kwargs):
            return original(*args, **kwargs)
        setattr(patched, MARK, True)
        torch.add = patched
        torch.onnx.register_custom_op_symbolic("{SYMBOLIC}", lambda g, *args: None, 9)


    def run_cell(key, stack, onnx_path):
        from where223.sweep import stages
        model = key["model"]
        if model == "kill-server":  # imports nothing (torch least of all): its server preloads nothing
            os.kill(os.getppid(), 9)
            time.sleep(60)
        record = {{"outcome": "accepted", "before": facts()}}
        if model == "patch":
            patch()
        elif model == "patch-then-check":  # the two cells in one process: the control
            patch()
            record["after"] = facts()
        elif model == "crash-in-export":
            stages.stage("export")
            sys.stderr.write("about to crash\\n")
            sys.stderr.flush()
            os._exit(5)
        elif model == "leak-and-hang":
            stages.stage("export")
            child = subprocess.Popen(["sleep", "300"])
            Path(onnx_path).with_name("leaked.pid").write_text(str(child.pid))
            time.sleep(3600)
        return record
''')


@pytest.fixture(scope="module")
def side(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder on the cells' path with the test runner, and a module that starts a thread when imported."""
    folder = tmp_path_factory.mktemp("side")
    (folder / f"{RUNNER}.py").write_text(CELLS)
    thread = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    (folder / "where223_test_thread.py").write_text(thread)
    yield folder
    worker.close_servers()


def run(side: Path, work: Path, model: str, timeout_s: float = 60, preload=PRELOAD, **options):
    return worker.run_cell({**KEY, "model": model}, sys.executable, ROOT / "src", work / model, timeout_s,
                           path=[side], runner=RUNNER, engine="warm", preload=preload, **options)  # fmt: skip


def test_a_cell_that_monkeypatches_torch_or_registers_a_symbolic_leaves_the_next_warm_cell_unaffected(side, tmp_path):
    patched = run(side, tmp_path, "patch")
    checked = run(side, tmp_path, "check")
    for record in (patched, checked):
        assert record["outcome"] == "accepted" and record["engine"]["kind"] == "warm", record
        facts = record["before"]
        assert facts["session"] == facts["group"] == facts["pid"]  # its own session and process group
        assert facts["offline"] == "1" and record["threads"] == {"torch": 1, "omp": "1"}
        assert facts["cwd"] == facts["argv0"] == str(tmp_path / record["key"]["model"])
    assert checked["engine"]["server_start_s"] == 0.0  # the same server
    assert patched["before"]["parent"] == checked["before"]["parent"] != os.getpid()
    assert patched["before"]["pid"] != checked["before"]["pid"]
    assert checked["before"]["add_patched"] is False and checked["before"]["symbolic"] is False
    # the control: the same two cells in one process leak
    both = run(side, tmp_path, "patch-then-check")
    assert both["before"]["add_patched"] is False and both["before"]["symbolic"] is False
    assert both["after"]["add_patched"] is True and both["after"]["symbolic"] is True


def test_the_warm_server_has_imported_torch_and_has_no_thread_but_its_own(side, tmp_path):
    run(side, tmp_path, "check")
    [server] = [server for key, server in worker._IDLE if key[2] == ",".join((*PRELOAD, RUNNER))]
    assert set(server.hello["imported"]) == {*PRELOAD, RUNNER} and server.hello["threads"] == 1


def test_a_warm_cell_past_its_limit_is_killed_with_what_it_started_and_the_server_serves_on(side, tmp_path):
    start = time.monotonic()
    record = run(side, tmp_path, "leak-and-hang", timeout_s=1.5)
    assert record["outcome"] == "timeout" and record["recorded_by"] == "worker" and time.monotonic() - start < 15
    assert record["error"]["stage"] == "export" and "within 1.5 s" in record["error"]["message"]
    leaked = int((tmp_path / "leak-and-hang" / "leaked.pid").read_text())
    deadline = time.monotonic() + 5
    while alive(leaked) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(leaked), "what the cell started outlived it"
    after = run(side, tmp_path, "check")  # the control: the server runs the next cell
    assert after["outcome"] == "accepted" and after["engine"]["server_start_s"] == 0.0


def test_a_warm_cell_that_dies_is_crashed_with_its_exit_status_and_last_stage(side, tmp_path):
    crashed = run(side, tmp_path, "crash-in-export")
    assert crashed["outcome"] == "crashed" and crashed["error"]["stage"] == "export"
    assert "exit status 5" in crashed["error"]["message"] and "about to crash" in crashed["error"]["message"]
    exited = run(side, tmp_path, "control-exit")
    assert exited["outcome"] == "crashed" and "exit status 3" in exited["error"]["message"]
    assert exited["error"]["stage"] == "start" and exited["engine"]["server_start_s"] == 0.0
    stale = tmp_path / "check"
    stale.mkdir()
    (stale / "record.json").write_text(json.dumps({"outcome": "not_exported"}))
    assert run(side, tmp_path, "check")["outcome"] == "accepted"  # the control; never an earlier run's record


def test_a_server_with_a_thread_after_importing_is_refused_and_its_cells_run_cold(side, tmp_path):
    refused = run(side, tmp_path, "control-exit", preload=("where223_test_thread",))
    assert refused["engine"]["kind"] == "cold" and "2 threads" in refused["engine"]["warm_refused"]
    assert refused["outcome"] == "crashed" and "exit status 3" in refused["error"]["message"]
    again = run(side, tmp_path, "control-exit", preload=("where223_test_thread",))
    assert again["engine"]["kind"] == "cold"  # refused once for the worker's life, not started again
    forked = run(side, tmp_path, "control-exit", preload=())  # the control
    assert forked["engine"]["kind"] == "warm" and "exit status 3" in forked["error"]["message"]


def test_a_cell_that_kills_its_server_is_crashed_and_the_next_cell_gets_a_new_server(side, tmp_path):
    options = {"preload": (), "threads": 0}  # no torch: the cell pins no thread pool
    killer = run(side, tmp_path, "kill-server", **options)
    assert killer["outcome"] == "crashed" and killer["error"]["type"] == "WarmServerExit"
    assert killer["wall_s"] < 30  # ended with its server, not at its limit
    after = run(side, tmp_path, "control-exit", **options)  # the control: a new server runs the next cell
    assert after["engine"]["kind"] == "warm" and after["engine"]["server_start_s"] > 0
    assert "exit status 3" in after["error"]["message"]


SCRIPT = """
import os, sys, threading, time
from pathlib import Path
from where223.sweep import worker
work = Path(sys.argv[2])
work.mkdir()
key = {**__KEY__, "model": "control-sleep"}
env = worker.cell_environment(Path(sys.argv[1]), (), 1)
server, _, _ = worker._warm_server(sys.executable, env, ())
arguments = worker.cell_arguments(key, work)
threading.Thread(target=worker._run_warm, args=(server, key, arguments, env, work, 600), daemon=True).start()
children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children")
while not children.read_text().split():
    time.sleep(0.01)
cell = int(children.read_text().split()[0])
print(cell, server.process.pid, all(os.path.exists(f"/proc/{p}") for p in (cell, server.process.pid)), flush=True)
os._exit(0)  # as a killed worker would: no goodbye to its server
"""


def test_the_warm_server_and_its_cell_die_with_their_worker(tmp_path):
    script = SCRIPT.replace("__KEY__", repr(KEY))
    done = subprocess.run([sys.executable, "-c", script, str(ROOT / "src"), str(tmp_path / "w")], capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    cell, server, were_alive = done.stdout.split()
    assert were_alive == "True"  # the control: both ran while their worker lived
    deadline = time.monotonic() + 10
    while (alive(int(cell)) or alive(int(server))) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(int(server)), "the warm server outlived its worker"
    assert not alive(int(cell)), "the cell outlived its worker"


def test_a_server_is_replaced_once_a_where223_module_it_imported_changes(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("x = 1\n")
    stamp = worker.source_stamp([str(module)])
    assert worker.source_stamp([str(module)]) == stamp  # the control: nothing changed
    module.write_text("x = 22\n")
    assert worker.source_stamp([str(module)]) != stamp


def test_an_unknown_engine_is_refused(tmp_path):
    from where223.errors import UsageError
    from where223.sweep import driver
    from where223.sweep.space import load_space

    with pytest.raises(ValueError, match="no engine 'tepid'"):
        worker.run_cell({**KEY, "model": "control-exit"}, sys.executable, ROOT / "src", tmp_path, 5, engine="tepid")
    space = tmp_path / "space.yaml"
    space.write_text("study: t\nrecords: 't/{model}.json'\nstacks: [project]\nmodels: [control-exit]\n"
                     "recipes: [cpu_bf16_autocast]\nexporters: [torchscript]\n")  # fmt: skip
    with pytest.raises(UsageError, match="no engine 'tepid'"):  # before any cluster starts
        driver.run(load_space(space), output_root=tmp_path / "out", engine="tepid")
    assert not (tmp_path / "out").exists()
