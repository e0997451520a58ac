"""`python -m where223.sweep.warm --preload torch,...`: a stack's warm server, which forks each cell from itself (a
worker entry point: it runs in each stack's interpreter, so it keeps a small command line of its own).

Standard library only, like `where223.sweep.worker`, which starts one per stack (and per thread it runs cells on)
and keeps it for the worker's life. The server runs in the stack's interpreter with the cells' environment
(offline, every thread pool pinned: `worker.cell_environment`), imports the stack's heavy modules once (PRELOAD,
then the space's runner; a module the stack lacks is left out) and then, for each cell the worker sends, forks a
child that is the cell: its own session and process group, its stdin and stdout /dev/null, its stderr (with the
stage markers) a file the worker names, the cell's working folder and environment, then `where223.sweep.cell`'s
`main`. Whatever the cell changes, a monkeypatched function, an ONNX symbolic it registers, memory it leaks, ends
with its process; the server itself runs no cell code.

Forking is safe only from a process of one thread, so the server checks that it has no thread but its own after
importing (no torch op runs in it, and importing torch starts no thread pool: OpenMP's starts at the first
parallel region) and says how many it has; the worker refuses a server with more and runs that stack's cells cold.
onnxruntime is not preloaded for that reason: 1.32's extension module starts a thread when it is loaded (1.19.2's
does not), and the cell imports it in about 0.1 s.

The server ends the cell's process group at its time limit and, once the cell has exited, whatever the cell left
in its group (the group is ended while the cell's exit status is still unread, so its id cannot have been reused).
It dies with its worker: its requests come on a pipe whose end of file (the worker's death closes it) ends it,
and it checks every POLL_S that its parent is still the worker, should the pipe's other end live on elsewhere.
Ending, it kills the cell that is running; a cell whose server dies ends too (`cell._exit_with_parent`).
(`PR_SET_PDEATHSIG` is not used: it fires when the *thread* that started the server ends, and a Dask worker
starts it from one of its executor's threads.)

The protocol, one JSON object a line: once it has imported, the server says `{"hello": PID, "threads": N,
"imported": {...}, "missing": {...}, "sources": [where223's files it imported]}`; then, per request `{"argv":
[...], "cwd": ..., "env": {...}, "stderr": FILE, "timeout_s": S}`, it says `{"started": PID}` and, when the cell
has ended, `{"ended": PID, "returncode": RC, "timeout": BOOL}` (RC as `subprocess` has it: negative for a signal).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import importlib
import json
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

ENTRY = "where223.sweep.warm"
# What a warm server imports once: what every cell of every study imports, the slow part of its start (each one's
# seconds on today's stack: `preload` in outputs/benchmarks/sweep_engine.json). transformers imports a model type's
# own module when the cell builds it: that stays in the cell.
PRELOAD = ("torch", "torch.onnx", "onnx", "onnxscript", "transformers", "transformers.modeling_utils")
POLL_S = 1.0  # how often a waiting server checks that its worker is still its parent
EXIT_FAILED = 70  # a child that could not even start the cell


def thread_count() -> int:
    """The threads of this process (the kernel's count: native threads too, which `threading` does not see)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


def preload(modules: Sequence[str]) -> tuple[dict[str, float], dict[str, str]]:
    """Import `modules` in order: ({name: seconds} of those imported, {name: why} of those that could not be)."""
    imported: dict[str, float] = {}
    missing: dict[str, str] = {}
    for name in modules:
        start = time.perf_counter()
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - a module this stack lacks or cannot import: the cell will say
            lines = str(error).strip().splitlines()
            missing[name] = f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]
        else:
            imported[name] = round(time.perf_counter() - start, 3)
    return imported, missing


def own_sources() -> list[str]:
    """The files of where223's modules this server has imported (their code is what its cells run): the worker
    replaces a server once one of them has changed."""
    found = {os.path.abspath(__file__)}  # this module, which runs as __main__
    for name, module in list(sys.modules.items()):
        if name == "where223" or name.startswith("where223."):
            path = getattr(module, "__file__", None)
            if path:
                found.add(os.path.abspath(path))
    return sorted(found)


class Channel:
    """The server's two pipe ends: requests in, answers out (JSON lines)."""

    def __init__(self, incoming: int, outgoing: int, parent: int) -> None:
        self.incoming, self.outgoing, self.parent = incoming, outgoing, parent
        self.buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(self.outgoing, data) :]

    def orphaned(self) -> bool:
        """True when the worker that started this server is no longer its parent."""
        return os.getppid() != self.parent

    def pump(self, timeout_s: float, also: Sequence[int] = ()) -> list[int] | None:
        """Wait up to `timeout_s` for a request's bytes (kept in `buffer`) or for one of `also`: the ready ones of
        `also`; None when the worker is gone (end of file, or no longer the parent)."""
        ready, _, _ = select.select([self.incoming, *also], [], [], max(0.0, timeout_s))
        if self.incoming in ready:
            chunk = os.read(self.incoming, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        if self.orphaned():
            return None
        return [fd for fd in ready if fd != self.incoming]

    def request(self) -> dict[str, Any] | None:
        """The next request; None when the worker is gone."""
        while b"\n" not in self.buffer:
            if self.pump(POLL_S) is None:
                return None
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def _kill_group(pid: int) -> None:
    """SIGKILL to the cell's process group and to the cell itself (it may not have made its group yet)."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pid, signal.SIGKILL)


def _exited(pid: int) -> bool:
    """Whether the cell has exited, its status left unread (so its pid, and its group's id, stay reserved)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)  # readable once the process has exited (Linux 5.3, Python 3.9)
    except (AttributeError, OSError):
        return None


def serve_one(channel: Channel, request: dict[str, Any]) -> dict[str, Any] | None:
    """Fork the cell of `request`, end it at its time limit, and say how it ended; None when the worker is gone
    (the cell is killed first)."""
    sys.stdout.flush()
    sys.stderr.flush()
    server = os.getpid()
    pid = os.fork()
    if pid == 0:
        _child(channel, request, server)  # never returns
    channel.send({"started": pid})
    deadline = time.monotonic() + float(request["timeout_s"])
    watch = _pidfd(pid)
    timed_out = gone = False
    try:
        while not _exited(pid):
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready = channel.pump(min(left, POLL_S if watch is not None else 0.05), [watch] if watch is not None else [])
            if ready is None:
                gone = True
                break
    finally:
        if watch is not None:
            os.close(watch)
    _kill_group(pid)  # at its limit, or once it has exited: whatever it left running in its group ends with it
    _, status = os.waitpid(pid, 0)
    if gone:
        return None
    return {"ended": pid, "returncode": os.waitstatus_to_exitcode(status), "timeout": timed_out}


def _child(channel: Channel, request: dict[str, Any], server: int) -> None:
    """The forked cell: its own session, stdio and folder, then `where223.sweep.cell.main`; never returns."""
    code = EXIT_FAILED
    try:
        os.setsid()
        os.close(channel.incoming)
        os.close(channel.outgoing)
        null = os.open(os.devnull, os.O_RDWR)
        errors = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for fd, target in ((null, 0), (null, 1), (errors, 2)):
            os.dup2(fd, target)
        os.close(null)
        os.close(errors)
        cwd = request["cwd"]
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path.insert(0, cwd)  # as `python -m` in that folder would have it
        from where223.sweep import cell

        sys.argv = [cell.__file__, *request["argv"]]
        code = cell.main(request["argv"], parent=server)
    except SystemExit as end:
        code = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
        if not isinstance(end.code, (int, type(None))):
            print(end.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the cell's failure, as an uncaught exception ends a process
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()  # what an interpreter's exit runs (the server's own handlers are the cell's too)
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Import, say hello, then fork each requested cell until the worker is gone."""
    parser = argparse.ArgumentParser(prog=f"python -m {ENTRY}", description=main.__doc__)
    parser.add_argument("--preload", default=",".join(PRELOAD), help="modules to import once, comma-separated")
    args = parser.parse_args(argv)
    parent = os.getppid()
    incoming, outgoing = os.dup(0), os.dup(1)  # the channel; 0 and 1 become /dev/null and stderr
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # what an import prints goes to the server's stderr, never into the channel
    if sys.path and sys.path[0] == os.getcwd():
        del sys.path[0]  # `python -m` put the server's folder first; each cell gets its own
    channel = Channel(incoming, outgoing, parent)
    start = time.perf_counter()
    imported, missing = preload([name for name in args.preload.split(",") if name])
    gc.collect()
    gc.freeze()  # the imported objects stay out of the cells' collections: fewer copied pages per fork
    import_s = round(time.perf_counter() - start, 3)
    channel.send({"hello": os.getpid(), "python": sys.version.split()[0], "import_s": import_s,
                  "imported": imported, "missing": missing, "threads": thread_count(),
                  "sources": own_sources()})  # fmt: skip
    while True:
        request = channel.request()
        if request is None:
            return 0
        answer = serve_one(channel, request)
        if answer is None:
            return 0
        channel.send(answer)


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # no interpreter shutdown: nothing to flush, and torch's takes a second
