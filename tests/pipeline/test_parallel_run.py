"""`where223 run` executes independent copies side by side and publishes them one at a time (issue 40).

Most tests stand papermill in for the kernel (a fake that copies the notebook and waits as told): what is checked is
the runner's schedule, its staging and its interrupts, in well under a second each. One starts a real kernel, to
show it talks over Unix sockets (IPC) and keeps its own warnings on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from where223.pipeline import publish
from where223.pipeline import run as runner


def _tiny_notebook(path: Path, code: str) -> Path:
    """A notebook with a `parameters` cell (output_root) and one cell of `code`, for the where223 kernel."""
    import nbformat

    parameters = nbformat.v4.new_code_cell('output_root: str = ""')
    parameters.metadata["tags"] = ["parameters"]
    notebook = nbformat.v4.new_notebook(cells=[parameters, nbformat.v4.new_code_cell(code)])
    notebook.metadata["kernelspec"] = {"name": "where223", "display_name": "where223", "language": "python"}
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    return path


@pytest.fixture
def fake_papermill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Tiny notebooks aa..ee made the runner's, papermill replaced by `behave[notebook](executed, parameters)` (after
    the source is copied to the executed copy), and the HTML export skipped (nbconvert is not what is checked).
    `spans[notebook]`: when the fake started and ended it."""
    import papermill

    folder = tmp_path / "notebooks"
    for name in ("aa", "bb", "cc", "dd", "ee"):
        _tiny_notebook(folder / f"{name}.ipynb", "pass")
    monkeypatch.setattr(runner, "NOTEBOOKS", folder)
    monkeypatch.setattr(runner, "export_html", lambda path: path)
    behave: dict[str, object] = {}
    spans: dict[str, list[float]] = {}

    def execute_notebook(source: str, executed: str, **kwargs) -> None:
        name = Path(source).stem
        spans[name] = [time.monotonic()]
        shutil.copy(source, executed)
        try:
            behave.get(name, lambda path, parameters: None)(Path(executed), kwargs["parameters"])
        finally:
            spans[name].append(time.monotonic())

    monkeypatch.setattr(papermill, "execute_notebook", execute_notebook)
    return behave, spans


def _plan(path: Path, text: str) -> Path:
    path.write_text("runs:\n" + text)
    return path


def test_independent_copies_run_side_by_side_one_reading_another_after_it_is_published(
        fake_papermill, tmp_path: Path, capsys):
    """dd times something until it writes done.txt: nothing starts beside it before, aa starts beside it after. aa
    and bb run at once (each waits for the other to start); ee runs alone to its end, so it waits for both and
    nothing starts beside it; cc, which reads aa's records, starts once aa is published."""
    from where223.cli import main

    behave, spans = fake_papermill
    out = tmp_path / "out"
    started = {name: threading.Event() for name in ("aa", "bb")}
    seen: dict[str, object] = {}

    def waits_for(other: str, me: str):
        def behaviour(executed: Path, parameters: dict) -> None:
            started[me].set()
            seen[me] = started[other].wait(timeout=10)  # only true if both run at once
        return behaviour

    def timed_then_beside(executed: Path, parameters: dict) -> None:
        time.sleep(0.05)
        spans["dd"].append(time.monotonic())  # its timed part is over: now written
        (Path(parameters["output_root"]) / "done.txt").write_text("timed")
        seen["dd"] = started["aa"].wait(timeout=10)  # true only if aa starts beside it

    behave.update(aa=waits_for("bb", "aa"), bb=waits_for("aa", "bb"), dd=timed_then_beside)
    behave["ee"] = lambda executed, parameters: time.sleep(0.05)
    behave["cc"] = lambda executed, parameters: seen.update(cc=(out / "manifests" / "aa.json").is_file())
    plan = _plan(tmp_path / "plan.yaml", "  - notebook: dd\n    alone: true\n    alone_until: done.txt\n"
                 "  - notebook: aa\n  - notebook: bb\n  - notebook: ee\n    alone: true\n"
                 "  - notebook: cc\n    after: [aa]\n")
    assert main(["run", "--params", str(plan), "--output-root", str(out)]) == 0
    assert seen == {"aa": True, "bb": True, "cc": True, "dd": True}  # aa published before cc began
    assert spans["dd"][1] < min(spans["aa"][0], spans["bb"][0])  # before done.txt, nothing beside dd
    assert max(spans[name][-1] for name in ("aa", "bb", "dd")) < spans["ee"][0] < spans["ee"][1] < spans["cc"][0]
    assert sorted(path.name for path in (out / "manifests").iterdir()) == [f"{name}.json" for name in
                                                                           ("aa", "bb", "cc", "dd", "ee")]
    assert not publish.staging_area(out).exists() and not publish.retired_trees(out).exists()
    assert capsys.readouterr().out.splitlines() == ["[1/5] dd", "[2/5] aa", "[3/5] bb", "[4/5] ee", "[5/5] cc"]


def test_one_job_runs_the_copies_one_at_a_time_in_plan_order(fake_papermill, tmp_path: Path):
    """The control of the above: `--jobs 1`, nothing beside anything (as before issue 40)."""
    from where223.cli import main

    behave, spans = fake_papermill
    for name in ("aa", "bb", "cc"):
        behave[name] = lambda executed, parameters: time.sleep(0.02)
    plan = _plan(tmp_path / "plan.yaml", "  - notebook: bb\n  - notebook: aa\n  - notebook: cc\n")
    assert main(["run", "--jobs", "1", "--params", str(plan), "--output-root", str(tmp_path / "out")]) == 0
    assert spans["bb"][1] < spans["aa"][0] and spans["aa"][1] < spans["cc"][0]


def test_an_interrupt_stops_every_running_copy_and_names_them_all(fake_papermill, tmp_path: Path, capsys):
    """SIGTERM while aa and bb both run (each waiting in its event loop, as nbclient does): both stop at once, each
    kept under failed/, nothing published, cc (after aa) never started; one line names both kept copies."""
    from jupyter_core.utils import ensure_event_loop

    from where223.cli import main

    behave, _ = fake_papermill
    out = tmp_path / "out"
    both = threading.Barrier(2)

    def runs_until_stopped(executed: Path, parameters: dict) -> None:
        if both.wait(timeout=10) == 0:  # the last copy to start: SIGTERM reaches the main thread, as `kill` would
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
        ensure_event_loop().run_until_complete(asyncio.sleep(30))

    behave.update(aa=runs_until_stopped, bb=runs_until_stopped)
    plan = _plan(tmp_path / "plan.yaml", "  - notebook: aa\n  - notebook: bb\n  - notebook: cc\n    after: [aa]\n")
    start = time.monotonic()
    assert main(["run", "--params", str(plan), "--output-root", str(out)]) == 143
    assert time.monotonic() - start < 20  # stopped, not waited for
    kept = {name: out / "failed" / name / "notebooks" / f"{name}.ipynb" for name in ("aa", "bb")}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("where223 run: terminated (SIGTERM) after writing "), err
    assert all(str(path) in err and path.is_file() for path in kept.values()), err
    assert err.endswith(" did not finish (their executed copies so far are kept there, nothing of them published); "
                        "1 planned notebook(s) did not run; temporary files removed\n"), err
    assert "aa and bb did not finish" in err or "bb and aa did not finish" in err
    assert not (out / "manifests").exists() and not (out / "notebooks").exists()  # nothing published
    assert not publish.staging_area(out).exists()


def test_a_stage_survives_another_runs_publish(tmp_path: Path):
    """A run writing while another publishes (the switch replaces the whole tree): its stage is beside the tree,
    so the files it writes after that switch are published with the rest."""
    root = tmp_path / "outputs"
    with publish.staged("a", root) as stage_a:
        (stage_a / "a").mkdir()
        (stage_a / "a" / "before.json").write_text("1")
        with publish.staged("b", root) as stage_b:  # b completes and publishes while a runs
            (stage_b / "b.json").write_text("b")
        assert (root / "b.json").read_text() == "b"
        (stage_a / "a" / "after.json").write_text("2")
    assert (root / "a" / "before.json").read_text() == "1" and (root / "a" / "after.json").read_text() == "2"
    assert sorted(path.name for path in tmp_path.iterdir()) == [".outputs.lock", "outputs"]  # stages removed


@pytest.mark.parametrize("inside", [True, False], ids=["readers-inside", "control-removed-at-once"])
def test_a_folder_read_across_a_switch_keeps_its_files_while_readers_are_inside(tmp_path: Path, inside: bool):
    """A notebook listing a folder of the tree at the moment another run's publish switches it reads the replaced
    tree's folder: within `readers_inside` (a parallel `where223 run`) that tree stays whole until the run ends;
    without it (the control), the tree is removed at once and the listing comes back empty."""
    root = tmp_path / "outputs"
    with publish.staged("records", root) as stage:
        (stage / "records").mkdir()
        for index in range(5):
            (stage / "records" / f"{index}.json").write_text(str(index))
    with publish.outputs_lock(root), publish.readers_inside(root) if inside else contextlib.nullcontext():
        folder = os.open(root / "records", os.O_RDONLY | os.O_DIRECTORY)  # a reader inside the tree
        try:
            with publish.staged("other", root) as stage:
                (stage / "other.json").write_text("x")
            listed = sorted(os.listdir(folder))
        finally:
            os.close(folder)
    assert listed == ([f"{index}.json" for index in range(5)] if inside else [])
    assert not publish.retired_trees(root).exists()  # removed when the readers are done


def test_kernels_talk_over_unix_sockets_and_keep_their_own_warnings(tmp_path: Path, monkeypatch, capfd):
    """A real kernel: its transport is IPC, in a folder of its own removed afterwards; ipykernel's warning about TCP
    is gone because its cause is, and the kernel's log keeps its level: a warning of its own reaches stderr."""
    monkeypatch.setattr(runner, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(runner, "export_html", lambda path: path)
    _tiny_notebook(tmp_path / "notebooks" / "kernel.ipynb",
                   "from ipykernel.kernelapp import IPKernelApp\napp = IPKernelApp.instance()\n"
                   "print(app.transport, app.connection_file)\napp.log.warning('a warning of the kernel itself')")
    executed = runner.execute(runner.PlannedRun("kernel"), output_root=tmp_path / "out")
    err = capfd.readouterr().err
    import nbformat

    transport, connection_file = nbformat.read(executed, as_version=4).cells[-1].outputs[0].text.split()
    assert transport == "ipc" and not Path(connection_file).parent.exists()
    assert "a warning of the kernel itself" in err  # the control: the kernel's log reaches stderr at its own level
    assert "without encryption" not in err and "TCP" not in err, err


def test_the_kernel_folder_of_a_killed_runner_goes_with_the_next_kernel(tmp_path: Path, monkeypatch):
    """A runner killed (SIGKILL) cannot remove its kernel's socket folder: the next kernel's folder is made after
    removing the folders of runners no longer alive; a live runner's folder and a link by that name stay."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True).stdout)
    stale = tmp_path / f"{runner.KERNEL_FOLDER}{dead}-abc"
    stale.mkdir()
    (stale / "kernel-1").write_text("")
    live = tmp_path / f"{runner.KERNEL_FOLDER}{os.getpid()}-def"  # the control: a runner still running
    live.mkdir()
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / f"{runner.KERNEL_FOLDER}{dead}-link"  # the control: not a folder of ours, never followed
    link.symlink_to(tmp_path / "elsewhere")
    fresh = runner.kernel_folder()
    assert not stale.exists() and live.is_dir() and link.is_symlink() and (tmp_path / "elsewhere").is_dir()
    assert fresh.name.startswith(f"{runner.KERNEL_FOLDER}{os.getpid()}-")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o700


def test_after_and_alone_are_checked_with_the_plan(tmp_path: Path, capsys):
    from where223.cli import main

    plan = _plan(tmp_path / "plan.yaml", "  - notebook: 02_graph\n    after: [01_reproduce, 09_fx]\n"
                 "  - notebook: 01_reproduce\n    after: 02_graph\n    alone: yes please\n"
                 "  - notebook: 09_fx\n    alone_until: fx/fx.json\n"
                 "  - notebook: 05_matrix\n    alone: true\n    alone_until: ../../etc/passwd\n")
    assert main(["run", "--params", str(plan), "--output-root", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"where223 run: {plan}: runs[0] 02_graph: after 01_reproduce: no copy of 01_reproduce is planned before it "
        "(planned before it: nothing)",
        f"where223 run: {plan}: runs[0] 02_graph: after 09_fx: no copy of 09_fx is planned before it (planned before "
        "it: nothing)",
        f"where223 run: {plan}: runs[1]: 'after' must be a list of notebook names such as [01_reproduce]",
        f"where223 run: {plan}: runs[1]: 'alone' must be true or false, not str 'yes please'",
        *[f"where223 run: {plan}: runs[{index}]: 'alone_until' must be a path inside the copy's outputs (such as "
          "variants/variants-cpu.json), beside 'alone: true'" for index in (2, 3)],
    ]
    assert main(["run", "--jobs", "0", "--params", str(plan)]) == 2
    assert "'0' is not a number of notebooks from 1 to 16" in capsys.readouterr().err
    good = _plan(tmp_path / "good.yaml", "  - notebook: 01_reproduce\n  - notebook: 02_graph\n"
                 "    after: [01_reproduce]\n  - notebook: 04_variants\n    alone: true\n"
                 "    alone_until: variants/variants-cpu.json\n")  # the control: a plan using each passes
    assert [(run.after, run.alone, run.alone_until) for run in runner.load_plan(good)] == [
        ((), False, None), (("01_reproduce",), False, None), ((), True, "variants/variants-cpu.json")]
