"""`make lab` serves the repository with the project's kernel on 127.0.0.1, keeps source notebooks clean on disk,
and stops."""

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

import psutil
import pytest

from where223.pipeline.paths import ROOT

pytestmark = pytest.mark.slow
CONFIG = ROOT / "scripts" / "jupyter_lab_config.py"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(url: str, token: str, body: dict | None = None) -> dict:
    """GET `url` from the Jupyter API, or PUT `body` there."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url,
        data=data,
        method="PUT" if body is not None else "GET",
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def notebook_with_outputs() -> dict:
    """What JupyterLab sends when it saves a notebook that was run: a code cell with its output."""
    cell = {"cell_type": "code", "execution_count": 1, "id": "c0", "metadata": {}, "source": "print(1)",
            "outputs": [{"output_type": "stream", "name": "stdout", "text": "1\n"}]}
    return {"type": "notebook", "format": "json",
            "content": {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}}


def test_make_lab_serves_the_repository_with_the_project_kernel(tmp_path):
    port, token = free_port(), secrets.token_hex(16)
    checkout = tmp_path / "checkout"  # a copy: the saves below must not reach the repository
    shutil.copytree(ROOT / "notebooks", checkout / "notebooks")
    (checkout / "outputs").mkdir()
    lab = subprocess.Popen(
        ["make", "-s", "lab", f"LAB_PORT={port}", f"LAB_TOKEN={token}", f"LAB_ROOT={checkout}"],
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
        assert {"notebooks", "outputs"} <= listed  # rooted at the repository
        listed = {item["name"] for item in get(f"{base}/api/contents/notebooks", token)["content"]}
        assert "01_reproduce.ipynb" in listed
        # a source notebook is written without outputs; anywhere else (the control) it is written as sent
        for folder, outputs_kept in (("notebooks", 0), ("outputs", 1)):
            get(f"{base}/api/contents/{folder}/probe.ipynb", token, notebook_with_outputs())
            saved = json.loads((checkout / folder / "probe.ipynb").read_text())
            assert len(saved["cells"][0]["outputs"]) == outputs_kept, folder
        with urllib.request.urlopen(f"{base}/lab?token={token}", timeout=5) as response:
            page = response.read().decode()
        config = json.loads(re.search(r'id="jupyter-config-data"[^>]*>(.*?)</script>', page, re.S).group(1))
        assert config["news"] == {"disabled": True}  # no prompt about Jupyter news, no feed fetched
        assert get(f"{base}/lab/api/news", token) == {"news": []}
        assert get(f"{base}/lab/api/update", token)["notification"] is None  # and no update check
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
