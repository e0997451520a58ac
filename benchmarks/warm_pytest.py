"""A warm pytest for mutation testing: a server that imports the heavy libraries once and forks a child per test run.

Each mutant's test run used to start an interpreter and import torch, onnx, onnxruntime and pytest's plugins again:
most of a short test run's wall time. The server (one per private copy and environment) imports those once, never
the project's own modules or tests, and forks a child per request; the child runs `pytest.main` in a session of its
own, on the client's own stdout and stderr (passed over the socket), so the mutated file is imported fresh and its
state, its threads and its subprocesses end with it. The client sends its arguments and exits with the run's code;
a client killed (Cosmic Ray's time-out) takes the run's whole process group with it.

    python warm_pytest.py serve SOCKET [MODULE,...]   # in the copy, with its PYTHONPATH; "ready" when listening
    python -I warm_pytest.py ask SOCKET ARG...   # pytest's arguments; exits with pytest's code
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import sys
import time

# imported once in the server; none of them imports the project (a fork shares them, unchanged, with every child).
# Not onnxruntime: 1.32's extension starts a thread when it is loaded, and a fork is safe only from a process of one
# thread (the rule where223.sweep.warm, the sweep's warm server, keeps for the same reason)
WARM = ("numpy", "torch", "onnx", "onnxscript", "transformers", "yaml", "pytest", "xdist", "hypothesis",
        "_pytest.python", "_pytest.fixtures")
POLL_S = 0.1
PARENT_POLL_S = 1.0  # how often a waiting server checks that the process that started it is still there


def serve(path: str, modules: tuple[str, ...] = WARM) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    assert "where223" not in sys.modules, "the server must not import the module it mutates"
    threads = len(os.listdir("/proc/self/task"))  # the kernel's count: native threads too
    if threads > 1:
        sys.exit(f"warm_pytest: {threads} threads after importing {', '.join(modules)}: forking is safe from one only")
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    parent = os.getppid()
    server.settimeout(PARENT_POLL_S)
    print("ready", flush=True)
    while os.getppid() == parent:  # a server whose parent is gone (killed, not stopped) ends too
        try:
            connection, _ = server.accept()
        except TimeoutError:
            continue
        connection.settimeout(None)
        with connection:
            _one(server, connection)


def _one(server: socket.socket, connection: socket.socket) -> None:
    message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 2)
    args = json.loads(message.decode())
    pid = os.fork()
    if pid == 0:  # the child: its own session, the client's stdout and stderr, pytest, nothing after
        try:
            server.close()
            connection.close()
            os.setsid()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            import pytest

            code = int(pytest.main(args))
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - a child never returns into the server's loop
            code = 3
        os._exit(code)
    for fd in fds:
        os.close(fd)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            return
        readable, _, _ = select.select([connection], [], [], POLL_S)
        if readable and not connection.recv(1):  # the client is gone: its run goes too
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return


def ask(path: str, args: list[str]) -> int:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    for _ in range(100):
        try:
            client.connect(path)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            time.sleep(0.1)
    else:
        print(f"warm_pytest: no server at {path}", file=sys.stderr)
        return 4
    sys.stdout.flush()
    socket.send_fds(client, [json.dumps(args).encode()], [1, 2])
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = client.recv(64)
        if not chunk:
            print("warm_pytest: the server ended the run", file=sys.stderr)
            return 4
        reply += chunk
    code = int(reply)
    return code if 0 <= code < 256 else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"] and len(sys.argv) in (3, 4):
        serve(sys.argv[2], tuple(filter(None, sys.argv[3].split(","))) if len(sys.argv) == 4 else WARM)
    elif sys.argv[1:2] == ["ask"] and len(sys.argv) >= 3:
        sys.exit(ask(sys.argv[2], sys.argv[3:]))
    else:
        sys.exit("usage: warm_pytest.py serve SOCKET [MODULE,...] | ask SOCKET ARG...")
