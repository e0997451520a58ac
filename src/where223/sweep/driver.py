"""The sweep driver: every cell of a space as a task of `dask.distributed`, its record written as it arrives.

By default a `LocalCluster` of single-threaded worker processes, one per core; `scheduler="tcp://HOST:8786"`
uses any running Dask cluster instead (README: a cluster over SSH). Each task (`execute`, on a worker) prepares
the cell's stack on first use (`where223.sweep.stacks.prepare`, under a lock shared by the host's workers,
outside the cell's time limit), then runs the cell in a process of its own in the stack's interpreter
(`where223.sweep.worker`): forked from the stack's warm server, which the worker keeps with torch and transformers
imported (`engine="warm"`, the default), or a new interpreter per cell (`engine="cold"`). The client writes each
record into the outputs tree as it arrives, under the tree's lock (`where223.pipeline.publish.write_record`):
records travel back from remote workers, which need the same checkout but no shared disk.

A worker that dies loses only its running cell: the local cluster lets the scheduler reschedule nothing
(`allowed-failures` 0, no task queued on a worker beyond its one thread), and the driver submits that cell once
more, then records it `crashed`. Resuming skips every cell whose record is there with the cell's key and a final
outcome (`where223.sweep.space.is_done`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import math
import os
import shutil
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from where223.errors import UsageError, printable
from where223.outcomes import Outcome
from where223.pipeline import git, paths, publish
from where223.sweep import stacks as stack_tools
from where223.sweep import worker
from where223.sweep.space import Cell, Space, is_done

WORK: Path = paths.CACHE / "sweep" / "work"
# What the local cluster's scheduler is told; a cluster of your own should be started with the same
# (DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0 DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION=1.0).
SCHEDULER_CONFIG: dict[str, Any] = {
    "distributed.scheduler.allowed-failures": 0,
    "distributed.scheduler.worker-saturation": 1.0,
}
CONNECT_TIMEOUT_S = 5  # a running scheduler answers in milliseconds
# A finished cell's exports are kept for the peers and converters benchmarks, which read none over 64 MiB with its
# weights (their --max-mib): a cell whose model files (all but its .json and .log) are larger together loses them all,
# so no export is kept without its external data; a log above it goes too (see execute and _trim).
KEPT_WORK_BYTES = 64 * 2**20
KEPT_SUFFIXES = frozenset({".json", ".log"})
ATTEMPTS = 2  # a cell whose worker died is submitted once more, then recorded `crashed`
# a cell the engine lost (`timeout`, or `crashed` in its own process) runs once more, its limit the space's times
# this, before its record counts (a model a busy machine made slow, a crash that does not come back)
LONGER_LIMIT = 3
ENGINE_FAILURES = frozenset({Outcome.TIMEOUT, Outcome.CRASHED, Outcome.NOT_RUN})
LOST = frozenset({Outcome.TIMEOUT, Outcome.CRASHED})  # what a rerun with a longer limit may yet finish


def execute(key: Mapping[str, Any], space: str, timeout_s: float, threads: int = 1,
            runner: str | None = None, engine: str = "warm") -> dict[str, Any]:
    """One cell on a worker: prepare its stack (outside the time limit), run it with the space's `runner` by
    `engine` ("warm" or "cold", `where223.sweep.worker`), return its record."""
    stack = stack_tools.load_stacks().stack(str(key["stack"]))
    facts = stack_tools.describe(stack)
    start = time.monotonic()
    prepared = stack_tools.prepare(stack)
    prepare_s = round(time.monotonic() - start, 1)
    if prepared.python is None:
        error = {"stage": "stack", "type": "StackBuildError", "message": prepared.error}
        record = worker.ended_record(key, Outcome.NOT_BUILT, error)
        record["reason"] = prepared.error
    else:
        work = WORK / space / Cell(**key).ident()
        shutil.rmtree(work, ignore_errors=True)
        source = paths.ROOT / "src"
        record = worker.run_cell(
            key, prepared.python, source, work, timeout_s, path=prepared.path, stack=facts, threads=threads,
            runner=runner, engine=engine,
        )
        _trim(work)
    record.setdefault("stack", facts)
    ran = record.get("engine") if isinstance(record.get("engine"), dict) else {}
    record["engine"] = {"host": socket.gethostname(), "prepare_s": prepare_s, "threads": threads, **ran}
    return record


def _trim(work: Path) -> None:
    """Remove what a finished cell leaves that no one reads (KEPT_WORK_BYTES): the record has what the sweep measured,
    and a sweep of thousands of cells that kept every export filled the disk (NOTES)."""
    files = [path for path in work.rglob("*") if path.is_file() and not path.is_symlink()]
    models = [path for path in files if path.suffix not in KEPT_SUFFIXES]
    if sum(path.stat().st_size for path in models) > KEPT_WORK_BYTES:
        for path in models:
            path.unlink(missing_ok=True)
    for path in files:
        if path.suffix in KEPT_SUFFIXES and path.stat().st_size > KEPT_WORK_BYTES:
            path.unlink(missing_ok=True)


@dataclass
class Progress:
    """One status line on the terminal (rewritten in place on a tty, one line per cell elsewhere)."""

    total: int
    skipped: int = 0
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    done: int = 0
    failed: int = 0
    started: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        """done / failed / left, rate and time left."""
        left = self.total - self.done
        minutes = (time.monotonic() - self.started) / 60
        ran = self.done - self.skipped  # the rate counts the cells this run recorded, not those it skipped
        rate = ran / minutes if minutes > 0 and ran else 0.0
        eta = f"~{left / rate:.0f} min left" if rate else "time left unknown"
        width = 24
        filled = int(width * self.done / self.total) if self.total else width
        bar = "#" * filled + "." * (width - filled)
        return (
            f"[{bar}] {self.done} done ({self.failed} failed), {left} left of {self.total} "
            f"({self.skipped} already recorded) | {rate:.1f} cells/min, {eta}"
        )

    def show(self, note: str = "") -> None:
        """Print the status (and a note of the last cell) on the stream."""
        text = self.line() + (f" | {note}" if note else "")
        if self.stream.isatty():
            self.stream.write("\r\x1b[2K" + text[: shutil.get_terminal_size().columns - 1])
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def add(self, record: Mapping[str, Any]) -> None:
        """Count one recorded cell."""
        self.done += 1
        self.failed += record.get("outcome") in ENGINE_FAILURES or record.get("recorded_by") == "worker"

    def close(self) -> None:
        """End the status line."""
        if self.stream.isatty():
            self.stream.write("\n")
            self.stream.flush()


def dashboard_installed() -> bool:
    """True when Dask's dashboard can be served (bokeh importable)."""
    try:
        import bokeh  # noqa: F401
    except ImportError:
        return False
    return True


def connect(scheduler: str | None, workers: int | None) -> tuple[Any, Any]:
    """A Dask client: of a new LocalCluster (`workers` single-threaded processes, default one per core), or of the
    cluster at `scheduler`; UsageError (one line) when it cannot be reached."""
    import dask
    from distributed import Client, LocalCluster

    if scheduler is not None:
        why = not_a_scheduler(scheduler, CONNECT_TIMEOUT_S)
        if why is None:
            try:
                return Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False), None
            except Exception as error:  # noqa: BLE001 - it answered a moment ago; gone since, or refusing clients
                _abandon(error)
                why = _first_line(error)
        raise UsageError(f"cannot reach the Dask scheduler {printable(scheduler, 120)}: {why}")
    with dask.config.set(SCHEDULER_CONFIG):
        cluster = LocalCluster(
            n_workers=workers or os.cpu_count() or 1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0" if dashboard_installed() else None,
            silence_logs=40,
        )
    return Client(cluster, set_as_default=False), cluster


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return printable(f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__, 300)


def not_a_scheduler(address: str, timeout_s: float) -> str | None:
    """None when `address` answers as a Dask scheduler within `timeout_s`; else why not, in one line.

    Asked before a `Client` is made, on a connection of its own: a `Client` given something else does worse than
    fail (an HTTP server's reply read as a frame length: an allocation of exbibytes; a server that waits for a
    line: a hang past the timeout), and one that fails in its constructor prints a traceback when it is
    collected (`Client.__del__`). A connection refused is retried until the timeout, as Dask does (a scheduler
    may be starting)."""
    import asyncio
    import concurrent.futures

    from distributed.comm import connect as open_comm
    from distributed.comm.addressing import parse_address
    from distributed.comm.registry import get_backend
    from distributed.security import Security

    try:
        scheme, location = parse_address(address)
        get_backend(scheme).get_address_host_port(location)
    except NotImplementedError:  # no host and port to check (inproc://, a scheduler in this process)
        pass
    except ValueError as error:
        return f"not a Dask address ({_first_line(error)})"

    async def identity() -> Any:
        comm = await open_comm(address, timeout=0.8 * timeout_s, **Security().get_connection_args("client"))
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    async def bounded() -> Any:
        return await asyncio.wait_for(identity(), timeout_s)

    # Its own thread and event loop: the caller may be inside one (a notebook's).
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="where223-ask-scheduler") as pool:
        try:
            answer = pool.submit(asyncio.run, bounded()).result()
        except (TimeoutError, asyncio.TimeoutError):
            return f"no answer as a Dask scheduler within {timeout_s:g} s"
        except OSError as error:  # Dask's own connect timeout (80% of ours), with the last attempt's error
            for _ in range(8):
                error = error.__cause__ or error.__context__ or error
            return f"no answer as a Dask scheduler within {timeout_s:g} s ({_first_line(error)})"
        except Exception as error:  # noqa: BLE001 - whatever answered, it does not speak Dask's protocol
            return f"it does not answer as Dask ({_first_line(error)})"
    if isinstance(answer, dict) and answer.get("type") == "Scheduler":
        return None
    if isinstance(answer, dict) and isinstance(answer.get("type"), str):
        return f"it answers as a Dask {printable(answer['type'], 40)}, not a scheduler"
    return "it does not answer as a Dask scheduler"


def _abandon(error: BaseException) -> None:
    """Mark the `Client` whose constructor raised `error` closed and stop its loop thread, so that collecting it
    does not try to close it again (`Client.__del__`: a 10 s wait, then a traceback on stderr)."""
    from distributed import Client

    frame = error.__traceback__
    while frame is not None:
        half = frame.tb_frame.f_locals.get("self")
        if isinstance(half, Client):
            half.status = "closed"
            with contextlib.suppress(Exception):
                half._loop_runner.stop()
            return
        frame = frame.tb_next


WINDOW_PER_THREAD = 2  # cells handed to Dask per worker thread at a time: one running, one ready behind it


def window(client: Any) -> int:
    """How many cells are in the cluster's hands at a time: WINDOW_PER_THREAD per worker thread it has now, at
    least two (asked again as each cell ends, so a cluster that grows gets its new workers' share)."""
    return max(2, WINDOW_PER_THREAD * sum(client.nthreads().values()))


def _identity(space: Space, cell: Cell, identity: Mapping[str, str]) -> dict[str, Any]:
    fields = {**space.stacks[cell.stack].attributes(), **cell.key()}
    return {name: template.format(**fields) for name, template in identity.items()}


def _read_list(made_by: Mapping[str, Any]) -> frozenset[str] | None:
    """A record's `code.read` (the files its cell's process imported) when it lists only names, else None."""
    read = made_by.get("read")
    return frozenset(read) if isinstance(read, list) and all(isinstance(n, str) for n in read) else None


def _records(space: Space, output_root: Path) -> Iterator[Mapping[str, Any]]:
    """The records there are of the space's cells under `output_root` (one that cannot be read is passed over)."""
    for cell in space.cells:
        try:
            record = json.loads(space.record_path(cell, output_root).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, Mapping):
            yield record


def reads_by_commit(records: Iterable[Mapping[str, Any]]) -> dict[str, frozenset[str]]:
    """Per commit, every file that the records made there by a clean checkout say their cells' processes read: what
    that commit's cells import, for judging a record that lists none (see `_same_cell_code`)."""
    found: dict[str, set[str]] = {}
    for record in records:
        made_by = record.get("code") if isinstance(record, Mapping) else None
        if not isinstance(made_by, Mapping) or made_by.get("dirty") is not False:
            continue
        commit, read = made_by.get("commit"), _read_list(made_by)
        if isinstance(commit, str) and read is not None:
            found.setdefault(commit, set()).update(read)
    return {commit: frozenset(names) for commit, names in found.items()}


def _same_cell_code(
    code: Mapping[str, Any], siblings: Mapping[str, frozenset[str]] | None = None
) -> Callable[[Mapping[str, Any]], bool]:
    """Whether a record's `code` is this checkout's cell code (see `run`): made at a commit whose cell code is this
    one's, judged by the files the cell's process read where its record lists them (`code.read`); for a record
    that lists none (a cell whose process was killed before it could say: `crashed`, `timeout`), by the files that
    the space's other cells made at the same commit read (`siblings`, from `reads_by_commit`); else by every file
    under src/where223 that does more than present records."""

    def current(made_by: Mapping[str, Any]) -> bool:
        commit = made_by.get("commit")
        if not isinstance(commit, str) or made_by.get("dirty") is not False or not code["commit"]:
            return False
        read = _read_list(made_by)
        if read is None and siblings:
            read = siblings.get(commit)
        return not git.cell_code_changed(paths.ROOT, commit, code["commit"], read)

    return current


def run(
    space: Space,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    force: bool = False,
    output_root: Path = paths.OUTPUTS,
    identity: Mapping[str, str] | None = None,
    deadline: dt.datetime | None = None,
    stream: TextIO | None = None,
    say: Callable[[str], None] = lambda line: None,
    engine: str = "warm",
    rerun_older_code: bool = False,
) -> Counter[str]:
    """Run every cell of `space` not yet recorded (all with `force`) by `engine` ("warm" or "cold"); the outcome
    counts of the cells run.

    `identity` names fields every record gets from its cell (formatted like the space's record path), so a record
    the engine writes (not_built, timeout, crashed) is found by the study's readers like the cells' own. Once
    `deadline` has passed, the cells not yet finished are cancelled and recorded `not_run` (a resumed sweep runs
    them), but for a cell whose record is there with a final outcome, which keeps it; a cell already running is
    not waited for, and its process ends within its own time limit. Every record carries the code that made it
    (`code`: this checkout's commit, and whether its src/where223 differed); with
    `rerun_older_code`, a cell whose record came from other cell code than this checkout's (a commit whose
    src/where223 differs from HEAD's beyond what only presents records, a checkout that differed from its commit,
    or a record older than the field) is run again.
    """
    if engine not in worker.ENGINES:
        raise UsageError(f"no engine {printable(engine, 40)!r} (engines: {', '.join(worker.ENGINES)})")
    from distributed import as_completed

    code = git.code_version(paths.ROOT)
    current = None
    if rerun_older_code:
        current = _same_cell_code(code, reads_by_commit(_records(space, output_root)))
    todo = [c for c in space.cells if force or not is_done(space.record_path(c, output_root), c, current)]
    progress = Progress(len(space.cells), len(space.cells) - len(todo), stream or sys.stderr)
    progress.done = progress.skipped
    counts: Counter[str] = Counter()
    fields = space.identity if identity is None else identity

    def publish_record(cell: Cell, record: dict[str, Any]) -> None:
        for name, value in _identity(space, cell, fields).items():
            record.setdefault(name, value)
        read = record.get("code", {}).get("read") if isinstance(record.get("code"), dict) else None
        record["code"] = {**code, "read": read} if isinstance(read, list) else code  # what the cell's process read
        publish.write_record(space.record_path(cell, output_root), record, output_root)
        counts[str(record["outcome"])] += 1
        progress.add(record)
        progress.show(f"{cell.stack} {cell.model} {cell.exporter}: {record['outcome']}")

    def past(moment: dt.datetime | None) -> bool:
        return moment is not None and dt.datetime.now(dt.timezone.utc) >= moment

    if not todo:
        say(f"{space.name}: all {len(space.cells)} cells already recorded")
        return counts

    def leave(cells: Iterable[Cell]) -> None:
        """The deadline: each cell left is recorded `not_run`, but for one whose record is there with a final
        outcome (rerun by `force` or `rerun_older_code`): that result stays published, and a resumed sweep picks it
        up again as it would have."""
        for cell in cells:
            if is_done(space.record_path(cell, output_root), cell):
                progress.add({"outcome": "kept"})
                progress.show(f"{cell.stack} {cell.model} {cell.exporter}: kept its record (deadline)")
            else:
                publish_record(cell, _not_run(cell, deadline))

    if past(deadline):
        leave(todo)
        progress.close()
        return counts
    client, cluster = connect(scheduler, workers)
    try:
        if client.dashboard_link and (cluster is None or dashboard_installed()):
            say(f"Dask dashboard: {client.dashboard_link}")
        futures: dict[Any, tuple[Cell, int]] = {}

        order = {cell: position for position, cell in enumerate(todo)}
        queue = iter(todo)

        def submit(cell: Cell, attempt: int, timeout_s: float = space.timeout_s) -> Any:
            future = client.submit(
                execute, cell.key(), space.name, timeout_s, runner=space.runner, engine=engine,
                key=f"{space.name}-{cell.ident()}-{attempt}", pure=False, retries=0, priority=-order[cell],
            )  # fmt: skip
            futures[future] = (cell, attempt)
            return future

        lost: dict[Cell, dict[str, Any]] = {}  # each cell's first run, where the engine lost it

        # The cells go to Dask a window at a time, in the space's order, the next as each one ends: handed all at
        # once, even with the space's order as their priority, a real sweep ran them in an order of its own
        # (NOTES: one recipe's cells for a hundred model types, another's for none).
        first = [submit(cell, 1) for cell in itertools.islice(queue, window(client))]
        timeout = (deadline - dt.datetime.now(dt.timezone.utc)).total_seconds() if deadline else None
        pending = as_completed(first, loop=client.loop, timeout=timeout)
        try:
            for future in pending:
                cell, attempt = futures.pop(future)
                record = _result(future, cell, attempt)
                if record is None:  # its worker died: once more
                    pending.add(submit(cell, attempt + 1))
                    continue
                if record.get("outcome") in LOST and attempt < ATTEMPTS and cell not in lost:  # once more, longer
                    lost[cell] = {"outcome": record["outcome"], "timeout_s": space.timeout_s,
                                  "error": record.get("error")}
                    pending.add(submit(cell, attempt + 1, space.timeout_s * LONGER_LIMIT))
                    continue
                if cell in lost:
                    record.setdefault("engine", {})["first_run"] = lost.pop(cell)
                publish_record(cell, record)
                for following in itertools.islice(queue, max(0, window(client) - len(futures))):
                    pending.add(submit(following, 1))
        except TimeoutError:  # the deadline: what is left is recorded not_run, where it has no result yet
            client.cancel(list(futures))
            leave([*(cell for cell, _ in futures.values()), *queue])
    finally:
        progress.close()
        client.close()
        if cluster is not None:
            cluster.close()
    return counts


def _not_run(cell: Cell, deadline: dt.datetime | None) -> dict[str, Any]:
    reason = f"the sweep's deadline {deadline.isoformat() if deadline else ''} passed before this cell finished"
    record = worker.ended_record(
        cell.key(), Outcome.NOT_RUN, {"stage": "driver", "type": "Deadline", "message": reason}
    )
    record["reason"] = reason
    return record


def _result(future: Any, cell: Cell, attempt: int) -> dict[str, Any] | None:
    """The task's record; None when its worker died and it may run once more; `crashed` after the last attempt."""
    from distributed import KilledWorker

    try:
        return future.result()
    except KilledWorker as error:
        if attempt < ATTEMPTS:
            return None
        message = f"the Dask worker running this cell died in each of {attempt} attempts: {error}"
        return worker.ended_record(cell.key(), Outcome.CRASHED, {"stage": "worker", "type": "KilledWorker",
                                                                  "message": message})  # fmt: skip
    except Exception as error:  # noqa: BLE001 - a task that raised is this cell's failure, not the sweep's
        message = f"{type(error).__name__}: {error}"
        return worker.ended_record(cell.key(), Outcome.CRASHED, {"stage": "task", "type": type(error).__name__,
                                                                  "message": message[:2000]})  # fmt: skip


def rate(cells: int, seconds: float) -> float:
    """Cells per minute."""
    return cells / (seconds / 60) if seconds > 0 else math.inf
