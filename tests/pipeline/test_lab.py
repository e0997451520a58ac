"""`make lab` serves the notebooks with the project's kernel on 127.0.0.1, and stops."""

import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.request

import psutil
import pytest

from where223.pipeline.paths import ROOT

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(url: str, token: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def test_make_lab_serves_notebooks_with_the_project_kernel():
    port, token = free_port(), secrets.token_hex(16)
    lab = subprocess.Popen(
        ["make", "-s", "lab", f"LAB_PORT={port}", f"LAB_TOKEN={token}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                specs = get(f"{base}/api/kernelspecs", token)
                break
            except OSError:
                assert lab.poll() is None, "make lab exited early"
                assert time.monotonic() < deadline, "JupyterLab did not answer within 90 s"
                time.sleep(1)
        assert "where223" in specs["kernelspecs"]
        assert specs["default"] == "where223"
        listed = {item["name"] for item in get(f"{base}/api/contents", token)["content"]}
        assert "01_reproduce.ipynb" in listed
        listening = {
            c.laddr.ip
            for c in psutil.net_connections("inet")
            if c.status == "LISTEN" and c.laddr.port == port
        }
        assert listening == {"127.0.0.1"}  # the loopback address only
    finally:
        if lab.poll() is None:
            os.killpg(lab.pid, signal.SIGTERM)
            lab.wait(timeout=30)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
