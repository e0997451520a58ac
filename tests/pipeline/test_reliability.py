"""Determinism, offline runs, atomic outputs, kept failures, clear errors."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.network import attempts, network_audit
from where223.pipeline import portable, records
from where223.pipeline.paths import ROOT, slug
from where223.pipeline.run import DEFAULT_PLAN, PlannedRun, UnknownKernelError, execute, load_plan

ATTEMPTS = """
import socket
listener = socket.create_server(("127.0.0.1", 0))
socket.create_connection(listener.getsockname()).close()  # loopback: not an attempt
attempts = (
    lambda: socket.socket().connect(("192.0.2.1", 443)),  # TEST-NET-1
    lambda: socket.create_connection(("pypi.org", 443), timeout=1),  # a name: looked up first
)
for attempt in attempts:
    try:
        attempt()
    except OSError as exc:  # caught, as code that falls back quietly would
        print(type(exc).__name__, exc)
"""


def test_control_the_network_audit_sees_attempts_that_code_catches(tmp_path: Path):
    env = {**os.environ, **network_audit(tmp_path, block=True)}
    result = subprocess.run([sys.executable, "-c", ATTEMPTS], env=env, capture_output=True, text=True, check=True)
    assert [line.split(" by ")[0] for line in attempts(tmp_path)] == [
        "socket.connect ('192.0.2.1', 443)",
        "socket.getaddrinfo 'pypi.org'",
    ]
    assert result.stdout.count("network blocked by test") == 2  # refused before any packet left


def test_every_notebook_test_fails_on_a_network_attempt(tmp_path: Path, monkeypatch):
    """`tests.conftest.run_notebook`, which every notebook test runs through, puts its run under the refusing
    audit and fails the test on any attempt (a process that tries and catches the refusal stands in for a kernel)."""
    import tests.conftest as helpers

    def tries(run, output_root):
        subprocess.run([sys.executable, "-c", ATTEMPTS], check=True, capture_output=True)  # inherits the run's env
        return output_root

    monkeypatch.setattr(helpers, "execute", tries)
    with pytest.raises(AssertionError, match=r"01_reproduce tried the network: \["):
        helpers.run_notebook("01_reproduce", tmp_path, audit_dir=tmp_path / "tries")
    assert "WHERE223_NETWORK_LOG" not in os.environ  # the test's own environment is given back
    monkeypatch.setattr(helpers, "execute", lambda run, output_root: output_root)  # control: stays on the machine
    assert helpers.run_notebook("01_reproduce", tmp_path, audit_dir=tmp_path / "stays") == tmp_path


def fresh_copy(target: Path) -> Path:
    """The repository as a fresh clone of this working tree would hold it (tracked and unignored files)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for relative in filter(None, listed):
        source = ROOT / relative
        if source.is_file():  # a tracked file deleted in the working tree is not copied
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / relative)
    return target


def network_namespace_refusal() -> str | None:
    """Why this machine cannot run a command in a network namespace holding only loopback, or None."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip is not installed"
    probe = subprocess.run(["unshare", "-n", "--", "ip", "link", "set", "lo", "up"], capture_output=True, text=True,
                           check=False)
    return None if probe.returncode == 0 else f"unshare -n is not permitted here: {probe.stderr.strip()}"


OFFLINE_RUN = """set -e
ip link set lo up
"$PYTHON" -m where223 run --params "$PLAN"
"$PYTHON" -m where223 report
"""


@pytest.mark.slow
def test_the_whole_plan_runs_offline_after_setup(tmp_path: Path):
    """`make run`'s commands (where223 run, then report) from a fresh copy of the repository, in a network namespace
    holding only loopback, with every Python process recording its non-loopback connection attempts.

    Every notebook of the plan also runs offline in its own tests, each under the refusing network audit
    (`tests.conftest.run_notebook`); this one shows that `make run`'s commands, the runner and the report, need no
    network either, from a fresh copy, on the plan's first copy of notebook 01 (the kernel, torch, transformers and
    the export) and its notebooks 05 and 06, which only read records.
    What setup leaves outside the clone is the venv (this interpreter and its Jupyter kernel) and the transformers
    release folders it installs under .cache/transformers/, linked into the copy.
    """
    refusal = network_namespace_refusal()
    if refusal and os.environ.get("CI") == "true":
        pytest.fail(f"CI must run the offline test: {refusal}")
    if refusal:
        pytest.skip(refusal)
    from where223.gpt2.releases import RELEASES, release_dir

    repo = fresh_copy(tmp_path / "repo")
    for version in RELEASES.values():
        if not (release_dir(version) / "transformers").is_dir():
            pytest.fail(f"setup did not install transformers {version} into {release_dir(version)}: run `make setup`")
        linked = repo / release_dir(version).relative_to(ROOT)
        linked.parent.mkdir(parents=True, exist_ok=True)
        linked.symlink_to(release_dir(version))
    full = load_plan(DEFAULT_PLAN)
    first = next(r for r in full if r.notebook == "01_reproduce")
    plan = [first, *(r for r in full if r.notebook in ("05_matrix", "06_architectures"))]
    assert [r.notebook for r in plan] == ["01_reproduce", "05_matrix", "06_architectures"], plan
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(yaml.safe_dump({"runs": [{"notebook": r.notebook, "parameters": r.parameters} for r in plan]}))
    audit = network_audit(tmp_path, block=False)
    env = {name: value for name, value in os.environ.items()
           if name not in ("PYTEST_CURRENT_TEST", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")}
    env.update(audit, PYTHONPATH=os.pathsep.join([audit["PYTHONPATH"], str(repo / "src")]), WHERE223_ROOT=str(repo),
               PYTHON=sys.executable, PLAN=str(plan_path))
    result = subprocess.run(["unshare", "-n", "--", "bash", "-c", OFFLINE_RUN], cwd=repo, env=env,
                            capture_output=True, text=True, timeout=3600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert attempts(tmp_path) == []
    started = (tmp_path / "network.log.started").read_text()
    assert "ipykernel_launcher" in started  # the audit reached the kernels
    outputs = repo / "outputs"
    for planned in plan:
        assert (outputs / "manifests" / f"{planned.name}.json").is_file(), planned.name
    assert not (outputs / "failed").exists()
    assert not [path for path in (repo / ".outputs.staging").rglob("*") if path.is_file()]
    assert not [path for path in outputs.rglob("*.json") if ".staging" in path.read_text()]  # paths as published


def test_interrupted_write_leaves_the_previous_record(tmp_path: Path, monkeypatch):
    target = tmp_path / "record.json"
    records.write_json(target, {"status": "reproduced"})

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        records.write_json(target, {"status": "half written"})
    assert json.loads(target.read_text()) == {"status": "reproduced"}
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]


def test_records_are_portable():
    site = Path(sys.prefix) / "lib" / "python3.11" / "site-packages" / "torch" / "onnx" / "utils.py"
    assert portable.record({"frames": [str(site)], "n": 1}) == {"frames": ["torch/onnx/utils.py"], "n": 1}


@pytest.mark.slow
def test_failed_run_keeps_previous_outputs_and_its_executed_copy(tmp_path: Path):
    # notebook 05 (records only, no torch): what is checked is the runner's, whichever notebook fails
    run = PlannedRun("05_matrix", {})
    executed = execute(run, output_root=tmp_path)
    before = executed.read_bytes()
    failing = PlannedRun("05_matrix", {"matrix_json": "outputs/matrix/missing.json"})
    with pytest.raises(Exception, match="05_matrix.*failed"):
        execute(failing, output_root=tmp_path)
    kept = tmp_path / "failed" / failing.name / "notebooks" / f"{failing.name}.ipynb"
    assert "FileNotFoundError" in kept.read_text() and "missing.json" in kept.read_text()
    assert executed.read_bytes() == before
    shutil.rmtree(tmp_path / "failed")


def test_missing_kernel_says_what_to_do(tmp_path: Path):
    with pytest.raises(UnknownKernelError, match="Jupyter kernel 'no-such-kernel' is not installed.*run `make setup`"):
        execute(PlannedRun("01_reproduce", {}), output_root=tmp_path, kernel="no-such-kernel")


def test_missing_input_record_says_which_notebook_to_run(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="run the notebook that writes it first"):
        records.read_json(tmp_path / "reproduce.json")


# --- an interrupted run (issue 37): one line, the kernel stopped, nothing published lost -----------------------------


def _tiny_notebook(path: Path, code: str) -> Path:
    """A notebook with a `parameters` cell (output_root, started) and one cell of `code`, for the where223 kernel."""
    import nbformat

    parameters = nbformat.v4.new_code_cell('output_root: str = ""\nstarted: str = ""')
    parameters.metadata["tags"] = ["parameters"]
    notebook = nbformat.v4.new_notebook(cells=[parameters, nbformat.v4.new_code_cell(code)])
    notebook.metadata["kernelspec"] = {"name": "where223", "display_name": "where223", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    return path


def _plan(path: Path, *notebooks: str, **parameters) -> Path:
    runs = [{"notebook": name, "parameters": dict(parameters)} for name in notebooks]  # no YAML aliases
    path.write_text(yaml.safe_dump({"runs": runs}))
    return path


def _tree(root: Path) -> dict[str, bytes]:
    """The published files of an outputs tree (what failed/ keeps and the empty staging folder left out)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] not in ("failed", ".staging")}


def test_an_interrupted_plan_names_the_copies_it_published_and_kept(tmp_path: Path, monkeypatch, capsys):
    """The line an interrupt prints names what the run wrote: the copy published before it, and the interrupted
    copy kept under failed/ (papermill stands in for the kernel here; the test below runs a real one)."""
    import papermill

    from where223.cli import Terminated, main
    from where223.pipeline import run as runner

    notebooks = tmp_path / "notebooks"
    for name in ("aa_first", "bb_second"):
        _tiny_notebook(notebooks / f"{name}.ipynb", "pass")
    monkeypatch.setattr(runner, "NOTEBOOKS", notebooks)
    monkeypatch.setattr(runner, "export_html", lambda path: path)  # nbconvert is not what is checked

    def execute_notebook(source, executed, **kwargs):
        shutil.copy(source, executed)
        if "bb_second" in source and interrupt:
            raise Terminated

    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    out, plan = tmp_path / "out", tmp_path / "plan.yaml"
    plan.write_text("runs:\n  - notebook: aa_first\n  - notebook: bb_second\n    after: [aa_first]\n")  # one by one
    interrupt = False  # control: a run that ends publishes both copies, and prints nothing on stderr
    assert main(["run", "--params", str(plan), "--output-root", str(out)]) == 0
    assert capsys.readouterr().err == "" and sorted(_tree(out)) == [
        "manifests/aa_first.json", "manifests/bb_second.json", "notebooks/aa_first.ipynb", "notebooks/bb_second.ipynb"]

    interrupt = True
    before = _tree(out)
    assert main(["run", "--params", str(plan), "--output-root", str(out)]) == 143
    kept = out / "failed" / "bb_second" / "notebooks" / "bb_second.ipynb"
    assert capsys.readouterr().err == (
        f"where223 run: terminated (SIGTERM) after writing {out / 'notebooks' / 'aa_first.ipynb'}, {kept}: bb_second "
        "did not finish (its executed copy so far is kept there, nothing of it published); temporary files removed\n")
    assert _tree(out) == before and kept.is_file()  # before: "nothing published", though aa_first was


def _sigint_as_a_terminal_leaves_it() -> None:
    """In the child, before `where223` starts: SIGINT at its default, as a terminal's foreground job has it. A suite
    started in the background of a script (`make test &`) inherits SIGINT ignored, as a shell leaves it for background
    jobs, and Python then keeps ignoring it: the runner would rightly let the Ctrl-C pass (the test below timed out
    so, three times, in runs started in the background)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_while_a_notebook_runs_is_one_line_and_stops_its_kernel(tmp_path: Path):
    """`where223 run` in a process of its own, Ctrl-C once the kernel runs a cell. Before: ZMQ tracebacks from the
    kernel (shut down while it answered the interrupt) and ipykernel's notices around the line. Now: the line alone,
    exit 130, the kernel gone, the published tree as it was, the interrupted copy kept under failed/."""
    root, out, started = tmp_path / "root", tmp_path / "out", tmp_path / "started"
    _tiny_notebook(root / "notebooks" / "zz_sleep.ipynb",
                   "import os, pathlib, time\npathlib.Path(started).write_text(str(os.getpid()))\ntime.sleep(120)")
    plan = _plan(tmp_path / "plan.yaml", "zz_sleep", started=str(started))
    (out / "notebooks").mkdir(parents=True)
    (out / "notebooks" / "published.ipynb").write_text("{}")  # a copy an earlier run published
    before = _tree(out)
    env = {name: value for name, value in os.environ.items() if name != "PYTEST_CURRENT_TEST"}
    env["WHERE223_ROOT"] = str(root)  # the tiny notebook's checkout; the package is still this one
    env["PYTHONFAULTHANDLER"] = "1"  # should it hang: its threads' stacks, on the SIGABRT below
    child = subprocess.Popen([sys.executable, "-m", "where223", "run", "--params", str(plan), "--output-root",
                              str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_sigint_as_a_terminal_leaves_it)
    try:
        deadline = time.monotonic() + 120
        while not started.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists(), child.communicate()[1] if child.poll() is not None else "no kernel within 120 s"
        kernel = int(started.read_text())
        child.send_signal(signal.SIGINT)
        try:
            _, err = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGABRT)
            pytest.fail("no end within 60 s of the Ctrl-C; its threads:\n" + child.communicate(timeout=30)[1][-8000:])
    finally:
        child.kill()
    name = "zz_sleep__started=" + slug(started)
    kept = out / "failed" / name / "notebooks" / f"{name}.ipynb"
    assert (child.returncode, err) == (130, (
        f"where223 run: interrupted (Ctrl-C) after writing {kept}: zz_sleep did not finish (its executed copy so far "
        "is kept there, nothing of it published); temporary files removed\n"))
    assert _tree(out) == before and kept.is_file()
    assert _ended(kernel)  # stopped, not left to notice its parent gone


def test_a_ctrl_c_the_kernel_hands_to_another_thread_stops_the_runners_wait_at_once(tmp_path: Path):
    """The kernel may hand a process's SIGINT to another of its threads (a copy's, ZMQ's) when the main thread
    cannot take it at once; Python then only marks it for the main thread, whose handler runs at its next step.
    Before: the runner's main thread waited for a copy without end, so such a Ctrl-C waited for the running copy to
    finish. Now its wait wakes every `SIGNAL_POLL_S`."""
    import threading
    from types import SimpleNamespace

    from where223.pipeline import run as runner

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers run in the main thread only: this test must run there")
    schedule = runner._Schedule([], tmp_path, "where223", lambda line: None, lambda path, unfinished: None, 1)
    copy = threading.Thread(target=time.sleep, args=(3,), name="a copy")  # a copy running a long cell
    copy.start()
    schedule.running["copy"] = (SimpleNamespace(alone=False, alone_until=None), runner._Stop(), copy)
    entered = threading.Event()

    def kernel_hands_sigint_to_the_copy() -> None:
        entered.wait()
        time.sleep(0.2)
        signal.pthread_kill(copy.ident, signal.SIGINT)
        copy.join()
        schedule.finished.put(("copy", RuntimeError("the copy ended")))  # what ends the wait before the change

    # Python's own handler for the test's span: a suite started in a script's background inherits SIGINT ignored
    # (NOTES, "Surprises"), and an ignored signal is never marked for the main thread
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=kernel_hands_sigint_to_the_copy, daemon=True).start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            entered.set()
            for _ in range(100):  # as _Schedule.run waits
                schedule.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    waited = time.monotonic() - start
    copy.join()
    assert waited < 2, f"the Ctrl-C was acted on after {waited:.1f} s, when the copy ended"


def _ended(pid: int) -> bool:
    """Whether process `pid` has ended (gone, or a zombie its new parent has yet to reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
