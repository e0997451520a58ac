"""benchmarks/warm_pytest.py, the mutation runs' warm pytest: each run is a child of its own, so what one run
changes (a module patched, a mutated file) is gone for the next, its exit code is pytest's, and a client killed
(a mutant's time-out) takes its run's whole process group with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import alive
from where223.pipeline.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "warm_pytest.py"
ASK = ("-p", "no:cacheprovider", "-q", "-x", "--no-header")
ENV = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # the runs here need none of the installed plugins


@pytest.fixture
def served(tmp_path):
    """A server warmed with json (the tests' `json`) and pytest, in a folder of tests of its own."""
    socket_path = tmp_path / "s.sock"
    server = subprocess.Popen([sys.executable, str(SCRIPT), "serve", str(socket_path), "json,pytest"],
                              cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    yield tmp_path, socket_path
    server.terminate()
    server.wait(10)


def ask(folder: Path, socket_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", str(SCRIPT), "ask", str(socket_path), *ASK, *args], cwd=folder,
                          capture_output=True, text=True, timeout=timeout)


def test_each_run_starts_from_the_warm_state_and_exits_with_pytest_s_code(served):
    folder, socket_path = served
    (folder / "test_patch.py").write_text(
        "import json\n\ndef test_patches():\n    assert not hasattr(json, 'leaked')\n    json.leaked = True\n")
    (folder / "test_fails.py").write_text("def test_fails():\n    assert False\n")
    first, second = ask(folder, socket_path, "test_patch.py"), ask(folder, socket_path, "test_patch.py")
    assert (first.returncode, second.returncode) == (0, 0), second.stdout
    assert "1 passed" in second.stdout  # the child's output reaches the client's own stdout
    failed = ask(folder, socket_path, "test_fails.py")
    assert failed.returncode == 1 and "1 failed" in failed.stdout


def test_control_the_same_two_runs_in_one_process_leak(tmp_path):
    (tmp_path / "test_patch.py").write_text(
        "import json\n\ndef test_patches():\n    assert not hasattr(json, 'leaked')\n    json.leaked = True\n")
    code = ("import pytest, sys\nfirst = pytest.main([*sys.argv[1:], 'test_patch.py'])\n"
            "second = pytest.main([*sys.argv[1:], 'test_patch.py'])\nsys.exit(10 * int(first) + int(second))")
    ran = subprocess.run([sys.executable, "-c", code, *ASK], cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert ran.returncode == 1, ran.stdout  # the first passes, the second sees what the first left


def test_a_killed_client_takes_its_run_s_process_group_with_it(served):
    folder, socket_path = served
    marker = folder / "child.pid"
    (folder / "test_sleeps.py").write_text(
        "import os, subprocess, sys, time\n\ndef test_sleeps():\n"
        f"    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"    open({str(marker)!r}, 'w').write(str(child.pid))\n    time.sleep(60)\n")
    client = subprocess.Popen([sys.executable, "-I", str(SCRIPT), "ask", str(socket_path), *ASK, "test_sleeps.py"],
                              cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline and client.poll() is None
        time.sleep(0.05)
    grandchild = int(marker.read_text())
    client.send_signal(signal.SIGKILL)
    client.wait()
    deadline = time.monotonic() + 10
    while alive(grandchild):
        assert time.monotonic() < deadline, "the run's subprocess outlived its client"
        time.sleep(0.05)
    assert ask(folder, socket_path, "--co", "test_sleeps.py").returncode == 0  # the server serves the next run


def test_a_server_whose_parent_is_killed_ends(tmp_path):
    """The server a killed mutation run started does not wait for runs forever (its parent: a shell killed here)."""
    socket_path = tmp_path / "s.sock"
    shell = subprocess.Popen(["bash", "-c", f"'{sys.executable}' '{SCRIPT}' serve '{socket_path}' json & "
                                            "echo $!; wait"], env=ENV, stdout=subprocess.PIPE, text=True)
    assert shell.stdout is not None
    server = int(shell.stdout.readline())
    assert shell.stdout.readline().strip() == "ready"
    shell.kill()
    shell.wait()
    deadline = time.monotonic() + 10
    while alive(server):
        assert time.monotonic() < deadline, "the server outlived the process that started it"
        time.sleep(0.1)


def test_a_server_that_would_fork_from_more_than_one_thread_does_not_start(tmp_path):
    """A preloaded module that starts a thread (as onnxruntime 1.32's does) makes the server refuse, saying why;
    the control: the same server warmed with json alone starts (the fixture above)."""
    (tmp_path / "threaded.py").write_text("import threading, time\n"
                                          "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n")
    ran = subprocess.run([sys.executable, str(SCRIPT), "serve", str(tmp_path / "s.sock"), "threaded"], cwd=tmp_path,
                         env={**ENV, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 1 and "ready" not in ran.stdout
    assert ran.stderr.strip() == "warm_pytest: 2 threads after importing threaded: forking is safe from one only"
