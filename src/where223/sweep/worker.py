"""Run one sweep cell in a process of its own in its stack's interpreter, with a time limit, and return its record.

Standard library only (and the stdlib-only outcome vocabulary): a Dask worker runs it on any host with the
project's checkout, whatever stack the cell needs. The cell (`where223.sweep.cell`) writes its record to a file of
its own and announces each stage on stderr (`WHERE223_STAGE <name>`); this module reads the record, or, when there
is none, writes one that says how the cell ended: `timeout` (its process group is killed at the limit) or
`crashed` (it exited without a record), with the last stage it announced. Every thread pool of the cell is pinned
(`THREAD_VARIABLES`, and `torch.set_num_threads` in the cell), and it runs offline.

Two engines run the cell the same way, each in a process, session and process group of its own:

- `cold`: a new interpreter per cell (`python -m where223.sweep.cell`), which imports torch and transformers anew;
- `warm`: a fork of the stack's warm server (`where223.sweep.warm`), an interpreter this worker keeps per stack
  (and per runner, preload and thread running cells) that has imported them once. A server is started on a
  stack's first warm cell (its start is not in the cell's time limit; the record says how long it took), kept
  while the worker lives (at most MAX_IDLE_SERVERS idle), replaced once a where223 module it imported has
  changed, and refused when it has a thread besides its own once it has imported (forking it would be unsafe):
  that stack's cells then run cold, and their records say why.

Each record says which engine ran it and its overhead (`engine`: `kind`, `overhead_s`, the cell's wall time less
its timed stages: the interpreter's start and imports, or the fork, and writing the record).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import datetime as dt
import hashlib
import json
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from where223.outcomes import Outcome
from where223.sweep import warm

STAGE_MARKER = "WHERE223_STAGE "
ENTRY = "where223.sweep.cell"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "WHERE223_CELL_THREADS")
OFFLINE = {"TRANSFORMERS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
# Set to the Dask worker's pid for its cells: the engine's kill-the-worker control checks it before it kills.
WORKER_PID = "WHERE223_SWEEP_WORKER_PID"
ENGINES = ("warm", "cold")
STDERR = "stderr.txt"  # a warm cell's stderr, in its working folder
WARM_START_S = 900.0  # the most a warm server may take to import (torch and transformers on a loaded machine)
WARM_GRACE_S = 30.0  # past a cell's limit: a warm server that has not said how the cell ended is killed
MAX_IDLE_SERVERS = 2  # warm servers kept idle per worker process (each holds its stack's imports in memory)
# What a warm server's imports may read that the engine sets: a server serves the cells whose environment has the
# same values (each cell gets its whole environment when it is forked; the rest is the worker's own, which stays).
SERVER_VARIABLES = ("PYTHONPATH", "WHERE223_ROOT", *THREAD_VARIABLES, *OFFLINE)


def now() -> str:
    """The current UTC time as records write it."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def tail(text: str, lines: int = 15) -> str:
    """The last `lines` lines of a text, stripped."""
    return "\n".join(text.strip().splitlines()[-lines:])


def last_stage(stderr: str) -> str:
    """The last `WHERE223_STAGE <name>` marker a cell printed ('start' when none)."""
    stage = "start"
    for line in stderr.splitlines():
        if line.startswith(STAGE_MARKER):
            stage = line.split(maxsplit=1)[1].strip() if len(line.split()) > 1 else stage
    return stage


def cell_environment(source: Path, path: Sequence[str | os.PathLike[str]], threads: int) -> dict[str, str]:
    """The cell's process environment: offline, threads pinned, `path` (side folders) then `source` on PYTHONPATH."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(OFFLINE)
    env.update({name: str(threads) for name in THREAD_VARIABLES})
    env["PYTHONPATH"] = os.pathsep.join([*map(str, path), str(source)])
    env["WHERE223_ROOT"] = str(Path(source).parent)
    env[WORKER_PID] = str(os.getpid())
    return env


def ended_record(key: Mapping[str, Any], outcome: Outcome, error: dict[str, Any]) -> dict[str, Any]:
    """The record of a cell that left none: how it ended, written by this worker."""
    return {"key": dict(key), "outcome": outcome, "error": error, "recorded_by": "worker", "recorded_at": now()}


def cell_arguments(
    key: Mapping[str, Any], work: Path, stack: Mapping[str, Any] | None = None, runner: str | None = None
) -> list[str]:
    """The arguments of `where223.sweep.cell` for cell `key` in its working folder `work`."""
    return [
        "--cell", json.dumps(dict(key), sort_keys=True), "--stack", json.dumps(dict(stack or {}), sort_keys=True),
        "--onnx", str(work / "model.onnx"), "--out", str(work / "record.json"),
        *(["--runner", runner] if runner else []),
    ]  # fmt: skip


def run_cell(
    key: Mapping[str, Any],
    python: str | os.PathLike[str],
    source: Path,
    work: Path,
    timeout_s: float,
    *,
    path: Sequence[str | os.PathLike[str]] = (),
    stack: Mapping[str, Any] | None = None,
    threads: int = 1,
    runner: str | None = None,
    engine: str = "cold",
    preload: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run the cell `key` with `python` (cwd `work`, which it may fill) and return its record, with `wall_s` and
    `engine` (`engine`: "warm" or "cold"; `preload`: what a warm server imports, default warm.PRELOAD and the
    runner)."""
    if engine not in ENGINES:
        raise ValueError(f"no engine {engine!r} (engines: {', '.join(ENGINES)})")
    work.mkdir(parents=True, exist_ok=True)
    (work / "record.json").unlink(missing_ok=True)
    env = cell_environment(source, path, threads)
    arguments = cell_arguments(key, work, stack, runner)
    facts: dict[str, Any] = {"kind": "cold"}
    if engine == "warm":
        modules = tuple(warm.PRELOAD if preload is None else preload) + ((runner,) if runner else ())
        server, held, facts = _warm_server(str(python), env, modules)
        if server is not None:
            record, healthy = _run_warm(server, key, arguments, env, work, timeout_s)
            if healthy:
                _give_back(held, server)
            return _engine_facts(record, facts)
    start = time.monotonic()
    process = subprocess.Popen(
        [str(python), "-m", ENTRY, *arguments], cwd=work, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
    )  # fmt: skip
    try:
        _, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the cell and whatever it started (ONNX Runtime's child, say)
        _, stderr = process.communicate()
        record = _timed_out(key, last_stage(stderr), timeout_s)
    else:
        record = _ended(key, work, process.returncode, last_stage(stderr), tail(stderr, 20))
    record["wall_s"] = round(time.monotonic() - start, 1)
    return _engine_facts(record, facts)


def _timed_out(key: Mapping[str, Any], stage: str, timeout_s: float, note: str = "") -> dict[str, Any]:
    error = {"stage": stage, "type": "Timeout", "message": f"did not finish within {timeout_s:g} s{note}"}
    return ended_record(key, Outcome.TIMEOUT, error)


def _ended(key: Mapping[str, Any], work: Path, returncode: int, stage: str, stderr_tail: str) -> dict[str, Any]:
    """The cell's own record; or, when it left none, `crashed` with its exit status and stderr's tail."""
    written = work / "record.json"
    if written.is_file():
        return json.loads(written.read_text())
    error = {"stage": stage, "type": "ProcessExit", "message": f"exit status {returncode}; stderr tail:\n{stderr_tail}"}
    return ended_record(key, Outcome.CRASHED, error)


def _engine_facts(record: dict[str, Any], facts: Mapping[str, Any]) -> dict[str, Any]:
    """`record` with `engine`: the engine's facts and the cell's overhead (its wall time less its timed stages,
    None when it recorded none)."""
    timings = record.get("timings_s")
    overhead = None
    if isinstance(timings, dict) and timings and all(isinstance(v, (int, float)) for v in timings.values()):
        overhead = round(record["wall_s"] - sum(timings.values()), 2)
    record["engine"] = {**facts, "overhead_s": overhead}
    return record


def stderr_facts(path: Path, lines: int = 20) -> tuple[str, str]:
    """The last stage a cell's stderr file announces and its last `lines` lines, read a line at a time (a cell may
    write gigabytes)."""
    stage, kept = "start", collections.deque(maxlen=lines)
    with contextlib.suppress(OSError), path.open(errors="replace") as handle:
        for line in handle:
            if line.startswith(STAGE_MARKER):
                stage = line.split(maxsplit=1)[1].strip() if len(line.split()) > 1 else stage
            kept.append(line.rstrip("\n"))
    return stage, "\n".join(kept).strip()


class WarmServer:
    """A running warm server (`where223.sweep.warm`) and this worker's end of its pipes."""

    def __init__(self, python: str, env: Mapping[str, str], modules: Sequence[str]) -> None:
        self.errors = tempfile.TemporaryFile()  # the server's own stderr: what its imports print
        self.process = subprocess.Popen(
            [python, "-m", warm.ENTRY, "--preload", ",".join(modules)], cwd="/", env=dict(env),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors, start_new_session=True,
        )  # fmt: skip
        self.buffer = b""
        self.hello: dict[str, Any] = {}
        self.stamp = ""

    def send(self, message: Mapping[str, Any]) -> None:
        """Write one request; BrokenPipeError when the server is gone."""
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps(message) + "\n").encode())
        self.process.stdin.flush()

    def receive(self, timeout_s: float) -> dict[str, Any] | None:
        """The server's next message; None when it says nothing within `timeout_s`; EOFError when it is gone."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def start(self) -> str | None:
        """Wait for the server's hello: None when it may fork cells, else why not (one line)."""
        try:
            hello = self.receive(WARM_START_S)
        except EOFError:
            self.process.wait()
            self.errors.seek(0)
            last = self.errors.read().decode(errors="replace").strip().splitlines()[-1:]
            return f"the warm server exited with status {self.process.returncode} while importing: {''.join(last)}"
        if hello is None:
            return f"the warm server did not finish importing within {WARM_START_S:g} s"
        self.hello = hello
        self.stamp = source_stamp(hello.get("sources", []))
        if hello.get("threads") != 1:
            return (f"the warm server had {hello.get('threads')} threads once it had imported "
                    f"{', '.join(hello.get('imported', {}))}: forking it is unsafe")  # fmt: skip
        return None

    def alive(self) -> bool:
        """Whether the server is still running."""
        return self.process.poll() is None

    def fresh(self) -> bool:
        """Whether where223's modules the server imported are as they were when it did."""
        return source_stamp(self.hello.get("sources", [])) == self.stamp

    def close(self) -> None:
        """End the server: its end of file, then SIGKILL to its group if it lingers."""
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        with contextlib.suppress(OSError):
            if self.process.stdout is not None:
                self.process.stdout.close()
        self.errors.close()


_LOCK = threading.Lock()
_IDLE: list[tuple[tuple[str, ...], WarmServer]] = []  # the idle servers, least recently used first
_REFUSED: dict[tuple[str, ...], str] = {}  # servers refused in this process: their stacks' cells run cold


def source_stamp(files: Sequence[str]) -> str:
    """A hash of the sizes and times of `files` (a warm server's where223 modules: one whose code has changed since
    it imported it is replaced)."""
    digest = hashlib.sha256()
    for name in files:
        try:
            stat = os.stat(name)
            digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
        except OSError:
            digest.update(f"{name}: gone\n".encode())
    return digest.hexdigest()


def _warm_server(
    python: str, env: Mapping[str, str], modules: Sequence[str]
) -> tuple[WarmServer | None, tuple[str, ...], dict[str, Any]]:
    """An idle warm server for this interpreter, environment and preload (started when there is none, outside the
    cell's time limit), its key in the pool, and the engine's facts; None and the facts of a cold run with why,
    when no server can fork cells."""
    key = (python, json.dumps({name: env.get(name) for name in SERVER_VARIABLES}), ",".join(modules))
    with _LOCK:
        if key in _REFUSED:
            return None, key, {"kind": "cold", "warm_refused": _REFUSED[key]}
        found = next((index for index, (held, _) in enumerate(_IDLE) if held == key), None)
        server = _IDLE.pop(found)[1] if found is not None else None
    if server is not None and server.alive() and server.fresh():
        return server, key, {"kind": "warm", "server_start_s": 0.0}
    if server is not None:
        server.close()
    start = time.monotonic()
    try:
        server = WarmServer(python, env, modules)
    except OSError as error:  # no such interpreter: the cold run says so as it always has
        return None, key, {"kind": "cold", "warm_refused": f"the warm server did not start: {error}"}
    why = server.start()
    if why is not None:
        server.close()
        with _LOCK:
            _REFUSED[key] = why
        return None, key, {"kind": "cold", "warm_refused": why}
    return server, key, {"kind": "warm", "server_start_s": round(time.monotonic() - start, 3)}  # > 0: started


def _give_back(key: tuple[str, ...], server: WarmServer) -> None:
    """Keep a server idle for the next cell of its stack; the least recently used beyond MAX_IDLE_SERVERS end."""
    with _LOCK:
        _IDLE.append((key, server))
        retired = [held for _, held in _IDLE[: max(0, len(_IDLE) - MAX_IDLE_SERVERS)]]
        del _IDLE[: len(retired)]
    for old in retired:
        old.close()


@atexit.register
def close_servers() -> None:
    """End every idle warm server of this process (its death would end them too)."""
    with _LOCK:
        servers = [server for _, server in _IDLE]
        _IDLE.clear()
    for server in servers:
        server.close()


def _run_warm(
    server: WarmServer,
    key: Mapping[str, Any],
    arguments: Sequence[str],
    env: Mapping[str, str],
    work: Path,
    timeout_s: float,
) -> tuple[dict[str, Any], bool]:
    """The cell forked from `server`: (its record, or how it ended; whether the server may run the next cell)."""
    stderr = work / STDERR
    request = {"argv": list(arguments), "cwd": str(work), "env": dict(env), "stderr": str(stderr),
               "timeout_s": timeout_s}  # fmt: skip
    start = time.monotonic()
    pid = ended = None
    gone = False
    try:
        server.send(request)
        started = server.receive(WARM_GRACE_S)  # the fork: at once
        pid = int(started["started"]) if started and "started" in started else None
        if pid is not None:
            ended = server.receive(max(0.0, timeout_s - (time.monotonic() - start)) + WARM_GRACE_S)
    except (EOFError, OSError, ValueError):  # its pipes closed (BrokenPipeError is an OSError), or not its answer
        gone = True
    if ended is None:  # the server died or did not answer: it ends, and the cell with it
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        server.close()
    stage, text = stderr_facts(stderr)
    if gone:
        error = {"stage": stage, "type": "WarmServerExit", "message": f"the warm server ended while the cell ran "
                 f"(exit status {server.process.returncode}); stderr tail:\n{text}"}  # fmt: skip
        record = ended_record(key, Outcome.CRASHED, error)
    elif ended is None:
        record = _timed_out(key, stage, timeout_s, f" (its warm server did not answer {WARM_GRACE_S:g} s later)")
    elif ended.get("timeout"):
        record = _timed_out(key, stage, timeout_s)
    else:
        record = _ended(key, work, int(ended["returncode"]), stage, text)
    record["wall_s"] = round(time.monotonic() - start, 1)
    return record, ended is not None
