"""A network audit for the tests: every Python process started with its environment records (and may refuse) each
connection attempt that leaves the machine. `tests.conftest.run_notebook` runs every notebook under it."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

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
