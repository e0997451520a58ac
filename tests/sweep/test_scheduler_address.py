"""`--scheduler` at something that is not a Dask scheduler: one line, exit 2, within the connect timeout, and
nothing on stderr after it (no `Client.__del__` traceback, at exit, from a client that failed as it was made). An HTTP
server that waits for a request line, one that answers at once (its reply read as a frame length: exbibytes),
a port nobody listens on, an unknown scheme and `tcp://` garbage; the control is a real scheduler on 127.0.0.1
(tests/sweep/test_engine.py drives a whole cluster through `where223 sweep --scheduler`)."""

from __future__ import annotations

import http.server
import socket
import socketserver
import subprocess
import sys
import threading
import time

import distributed  # noqa: F401 - imported here, so the timings below are the connection's alone
import pytest

from where223.errors import UsageError
from where223.pipeline.paths import ROOT
from where223.sweep import driver

TIMEOUT_S = 0.3  # the connect timeout under test (CONNECT_TIMEOUT_S, 5 s in use)
SLACK_S = 1.5  # threads, event loops, the unknown-scheme lookup


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


class _Answers(socketserver.BaseRequestHandler):
    """Replies as an HTTP server does to a request it cannot parse, as soon as anything arrives."""

    def handle(self) -> None:
        self.request.recv(64)
        self.request.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


@pytest.fixture(scope="module")
def servers():
    started = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet),
               socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Answers)]  # fmt: skip
    for server in started:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    yield {
        "http server waiting for a line": f"tcp://127.0.0.1:{started[0].server_address[1]}",
        "http server answering at once": f"tcp://127.0.0.1:{started[1].server_address[1]}",
        "nobody listening": f"tcp://127.0.0.1:{free}",
        "unknown scheme": "evil://x",
        "tcp garbage": "tcp://:::::",
        "no port": "tcp://",
    }
    for server in started:
        server.shutdown()
        server.server_close()


def _bounded(call, seconds: float):
    """What `call()` returned or raised, or a failure when it has not finished within `seconds`."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:  # noqa: BLE001 - handed back to the test
            outcome.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome, f"still running after {seconds} s"
    return outcome[0]


CASES = ["http server waiting for a line", "http server answering at once", "nobody listening", "unknown scheme",
         "tcp garbage", "no port"]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_what_is_not_a_scheduler_is_one_line_within_the_timeout(case, servers, monkeypatch):
    monkeypatch.setattr(driver, "CONNECT_TIMEOUT_S", TIMEOUT_S)
    start = time.monotonic()
    raised = _bounded(lambda: driver.connect(servers[case], None), TIMEOUT_S + SLACK_S)
    assert isinstance(raised, UsageError), raised
    assert time.monotonic() - start < TIMEOUT_S + SLACK_S
    assert "\n" not in str(raised) and str(raised).startswith(f"cannot reach the Dask scheduler {servers[case]}: ")


EXITS = """
import sys
from where223.cli import main
from where223.sweep import driver
driver.CONNECT_TIMEOUT_S = 0.5
space, out, *addresses = sys.argv[1:]
codes = [main(["sweep", "--space", space, "--scheduler", a, "--force", "--output-root", out]) for a in addresses]
sys.exit(max(codes))
"""


def test_the_command_says_one_line_exits_2_and_nothing_follows_at_exit(tmp_path):
    """In a process of its own: a `Client` that failed in its constructor is collected at exit, where its
    `__del__` waited 10 s and printed a traceback after the one line."""
    space = tmp_path / "space.yaml"
    space.write_text("study: address-test\nrecords: 'address/{model}.json'\nrunner: where223.study.matrix.run\n"
                     "timeout_s: 60\nstacks: [project]\nmodels: [control-exit]\nrecipes: [cpu_bf16_autocast]\n"
                     "exporters: [torchscript]\n")  # fmt: skip
    addresses = ["evil://x"]  # (several in one process: whether the traceback came was a matter of timing)
    ran = subprocess.run([sys.executable, "-c", EXITS, str(space), str(tmp_path), *addresses], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)  # fmt: skip
    # (before: the traceback after the line, having waited twice the connect timeout at exit)
    err = ran.stderr.strip().splitlines()
    assert ran.returncode == 2 and len(err) == len(addresses), ran.stderr
    for line, address in zip(err, addresses, strict=True):
        assert line.startswith(f"where223 sweep: cannot reach the Dask scheduler {address}: ")


@pytest.fixture(scope="module")
def cluster():
    from distributed import LocalCluster

    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp",
                           dashboard_address=":0", silence_logs=40)  # fmt: skip
    yield cluster
    cluster.close()


def test_control_a_real_scheduler_is_reached_and_runs_a_task(cluster):
    client, owned = driver.connect(cluster.scheduler_address, None)
    try:
        assert owned is None and client.submit(sum, [40, 2]).result(timeout=10) == 42
    finally:
        client.close()


def test_a_dask_worker_is_not_a_scheduler(cluster):
    worker = next(iter(cluster.scheduler_info["workers"]))
    with pytest.raises(UsageError, match="answers as a Dask Worker, not a scheduler"):
        driver.connect(worker, None)
