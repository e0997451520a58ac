"""Staged publication: only a run that completes reaches the outputs tree, and it replaces only its own files.

Most tests run `execute` on a probe notebook (a few lines, seconds) instead of the study's notebooks: what is
checked is the runner, not a model.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from where223.pipeline import portable, publish, records, run
from where223.pipeline.paths import OUTPUTS, ROOT
from where223.pipeline.run import NotebookFailedError, PlannedRun, execute, run_plan

PROBE_PARAMETERS = """\
output_root: str = ""  # where the run writes
text: str = "first"  # what the record holds
fail: bool = False  # True fails the notebook's own final check, after its record is written
kill: bool = False  # True kills the runner process (SIGKILL) in the middle of the run
"""
PROBE_BODY = """\
import os, signal
from where223.pipeline import paths, records
records.write_json(paths.run_dir("run", output_root or None) / "record.json", {"text": text})
if kill:
    os.kill(os.getppid(), signal.SIGKILL)
"""
PROBE_CHECK = 'assert not fail, "the final check failed"'


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A notebooks folder holding `probe.ipynb`, made the runner's source of notebooks."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    parameters = new_code_cell(PROBE_PARAMETERS, metadata={"tags": ["parameters"]})
    notebook = new_notebook(cells=[parameters, new_code_cell(PROBE_BODY), new_code_cell(PROBE_CHECK)])
    notebook.metadata["kernelspec"] = {"name": "where223", "language": "python", "display_name": "where223"}
    nbformat.write(notebook, folder / "probe.ipynb")
    monkeypatch.setattr(run, "NOTEBOOKS", folder)
    return folder


def record_of(root: Path) -> dict:
    return json.loads((root / "run" / "record.json").read_text())


def test_a_run_that_fails_its_final_check_publishes_nothing_and_keeps_its_files(probe: Path, tmp_path: Path):
    root = tmp_path / "outputs"
    executed = execute(PlannedRun("probe", {"text": "good"}), output_root=root)
    published = {path: path.read_bytes() for path in root.rglob("*") if path.is_file()}
    assert record_of(root) == {"text": "good"} and executed.is_file() and executed.with_suffix(".html").is_file()

    failing = PlannedRun("probe", {"text": "bad", "fail": True})
    with pytest.raises(NotebookFailedError, match="the final check failed"):
        execute(failing, output_root=root)
    after = {path: path.read_bytes() for path in root.rglob("*") if path.is_file() and "failed" not in path.parts}
    assert after == published  # the record the failed run wrote before its check did not reach the tree
    kept = root / "failed" / failing.name
    assert json.loads((kept / "run" / "record.json").read_text()) == {"text": "bad"}
    assert "the final check failed" in (kept / "notebooks" / f"{failing.name}.ipynb").read_text()
    assert "the final check failed" in (kept / "traceback.txt").read_text()
    assert not publish.staging_dir(failing.name, root).exists() and not publish.staging_area(root).exists()


def test_files_are_created_with_the_umasks_permissions(probe: Path, tmp_path: Path):
    previous = os.umask(0o022)
    try:
        executed = execute(PlannedRun("probe", {}), output_root=tmp_path)
        record = records.write_json(tmp_path / "record.json", {"n": 1})
        os.umask(0o077)  # control: the mode follows the umask, it is not fixed at 0644
        private = records.write_json(tmp_path / "private.json", {"n": 1})
    finally:
        os.umask(previous)
    for path in (executed, executed.with_suffix(".html"), tmp_path / "run" / "record.json", record):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    assert stat.S_IMODE(private.stat().st_mode) == 0o600


def stage(root: Path, name: str, files: dict[str, str]) -> None:
    """Publish run `name` writing `files` (relative path -> text)."""
    with publish.staged(name, root) as folder:
        for relative, text in files.items():
            (folder / relative).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative).write_text(text)


def test_a_rerun_replaces_exactly_its_own_previous_files(tmp_path: Path):
    stage(tmp_path, "01", {"run/reproduce.json": "1", "run/model.onnx": "m1", "run/stale.log": "s"})
    stage(tmp_path, "02", {"run/graph/lint.json": "2"})  # another run publishing inside 01's folder
    stage(tmp_path, "03", {"run/fix/verification.json": "3", "run/shared.png": "3"})
    stage(tmp_path, "01", {"run/reproduce.json": "1b", "run/model.onnx": "m2", "run/shared.png": "1"})
    stage(tmp_path, "01", {"run/reproduce.json": "1c", "run/model.onnx": "m3"})

    tree = {path.relative_to(tmp_path / "run").as_posix(): path.read_text()
            for path in (tmp_path / "run").rglob("*") if path.is_file()}
    assert tree == {
        "reproduce.json": "1c",
        "model.onnx": "m3",
        "graph/lint.json": "2",  # 02's and 03's results survive 01's reruns
        "fix/verification.json": "3",
        "shared.png": "1",  # dropped by 01's last run, but 03 published it too: kept
    }  # stale.log, which only 01 wrote and no longer writes, is gone
    assert json.loads((tmp_path / "manifests" / "01.json").read_text())["files"] == ["run/model.onnx",
                                                                                     "run/reproduce.json"]


def test_an_interrupted_run_changes_nothing_published(tmp_path: Path):
    stage(tmp_path, "01", {"run/reproduce.json": "good"})
    with pytest.raises(KeyboardInterrupt), publish.staged("01", tmp_path) as folder:
        (folder / "run").mkdir()
        (folder / "run" / "reproduce.json").write_text("half")
        raise KeyboardInterrupt
    assert (tmp_path / "run" / "reproduce.json").read_text() == "good"
    assert (tmp_path / "failed" / "01" / "run" / "reproduce.json").read_text() == "half"
    assert "KeyboardInterrupt" in (tmp_path / "failed" / "01" / "traceback.txt").read_text()
    stage(tmp_path, "01", {"run/reproduce.json": "better"})
    assert not (tmp_path / "failed" / "01").exists()  # a success clears the failure it supersedes


def test_records_are_written_as_published_not_where_they_were_staged(tmp_path: Path):
    staged_model = publish.staging_dir("01_reproduce__path=onnx_export") / "tiny-run" / "model.onnx"
    record = portable.record({"exported_model": str(staged_model), "note": f"saved {staged_model}"})
    assert record == {"exported_model": "outputs/tiny-run/model.onnx", "note": "saved outputs/tiny-run/model.onnx"}


KILLED_RUN = """
import sys
from pathlib import Path
from where223.pipeline import run
run.NOTEBOOKS = Path(sys.argv[1])
run.execute(run.PlannedRun("probe", {"kill": True}), output_root=Path(sys.argv[2]))
"""
KILLED_WRITE = """
import os, signal, sys
from where223.pipeline import records
os.replace = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
records.write_json(sys.argv[1], {"status": "half written"})
"""


def test_a_killed_run_leaves_nothing_git_sees(probe: Path, tmp_path: Path):
    clone = tmp_path / "clone"
    clone.mkdir()
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    shutil.copy(ROOT / ".gitignore", clone / ".gitignore")
    outputs = clone / "outputs"
    with (tmp_path / "killed-run.err").open("w") as err:  # its orphaned kernel says it is shutting down, later
        killed_run = subprocess.run([sys.executable, "-c", KILLED_RUN, str(probe), str(outputs)], stderr=err,
                                    check=False)
    killed_write = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(outputs / "run" / "record.json")],
                                  check=False)
    assert killed_run.returncode == killed_write.returncode == -signal.SIGKILL
    left = sorted(path.relative_to(clone).as_posix() for path in clone.rglob("*")
                  if path.is_file() and ".git" not in path.relative_to(clone).parts)
    assert any(".outputs.staging/" in path for path in left) and any("/.tmp-" in path for path in left), left  # control
    seen = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone, capture_output=True,
                          text=True, check=True).stdout.splitlines()
    assert seen == ["?? .gitignore"]


HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, f"{os.getpid()}\\n".encode())
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def hold_lock(root: Path, seconds: float) -> subprocess.Popen:
    """Another process holding the tree's lock for `seconds`."""
    root.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(publish.lock_path(root)), str(seconds)],
                              stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_second_writer_is_refused_at_once_naming_the_holder(probe: Path, tmp_path: Path):
    holder = hold_lock(tmp_path, 60)
    try:
        start = time.monotonic()
        with pytest.raises(publish.OutputsBusyError, match=rf"another where223 process \(pid {holder.pid}\).*--wait"):
            run_plan([PlannedRun("probe", {})], output_root=tmp_path)
        assert time.monotonic() - start < 5
        assert not (tmp_path / "run").exists()
    finally:
        holder.kill()
        holder.wait()
    assert run_plan([PlannedRun("probe", {})], output_root=tmp_path)  # control: free again, the same call runs


def test_with_wait_a_second_writer_starts_when_the_first_is_done(probe: Path, tmp_path: Path):
    holder = hold_lock(tmp_path, 2)
    try:
        executed = execute(PlannedRun("probe", {}), output_root=tmp_path, wait=True)
        assert holder.poll() is not None  # it ran only after the holder had finished
        assert executed.is_file()
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_is_one_per_process_and_released(tmp_path: Path):
    with publish.outputs_lock(tmp_path), publish.outputs_lock(tmp_path):  # re-entrant: execute inside run_plan
        descriptor = os.open(publish.lock_path(tmp_path), os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert publish.lock_path(tmp_path).read_text() == f"{os.getpid()}\n"
        assert publish.lock_path(tmp_path).parent == tmp_path.parent  # beside the tree, outside what is switched
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released once the outer holder is done
    os.close(descriptor)


def test_an_onnx_export_replaces_the_model_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import onnx
    import torch

    from where223.gpt2 import export

    target = tmp_path / "model.onnx"
    target.write_bytes(b"the previous model")
    batch = {"input_ids": torch.zeros(1, 2), "attention_mask": torch.zeros(1, 2)}
    node = onnx.helper.make_node("Identity", ["x"], ["y"], doc_string="/tmp/ipykernel_42/cell.py")
    value = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
    graph = onnx.helper.make_graph([node], "g", [value], [onnx.helper.make_tensor_value_info("y", 1, [1])])

    def interrupted(model, args, path, **kwargs):
        Path(path).write_bytes(b"half a model")
        raise KeyboardInterrupt

    def completed(model, args, path, **kwargs):
        onnx.save(onnx.helper.make_model(graph), path)

    monkeypatch.setattr(torch.onnx, "export", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export.export_onnx(torch.nn.Identity(), batch, target, 17, "cpu", "fp32")
    assert target.read_bytes() == b"the previous model"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.log", "model.onnx"]  # no temporary left
    monkeypatch.setattr(torch.onnx, "export", completed)  # control: a completed export replaces the model
    export.export_onnx(torch.nn.Identity(), batch, target, 17, "cpu", "fp32")
    assert onnx.load(str(target)).graph.node[0].doc_string == "<ipykernel>/cell.py"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.log", "model.onnx"]


def test_bench_variants_publishes_its_record_only_when_the_study_completes(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    from where223 import cli
    from where223.study.variants import analysis as ranking
    from where223.study.variants import run as bench

    def study(result: str):
        def run_study(settings, output_root, progress):
            path = bench.output_path(settings.device, output_root)
            records.write_json(path, {"result": result})
            if result == "half":
                raise RuntimeError("the study stopped half way")
            return {"path": str(path)}
        return run_study

    monkeypatch.setattr(ranking, "format_table", lambda record: "table")
    monkeypatch.setattr(bench, "run_study", study("complete"))
    assert cli.main(["bench-variants", "--device", "cpu", "--output-root", str(tmp_path)]) == 0
    published = tmp_path / "variants" / "variants-cpu.json"
    assert json.loads(published.read_text()) == {"result": "complete"}
    monkeypatch.setattr(bench, "run_study", study("half"))
    with pytest.raises(RuntimeError, match="half way"):
        cli.main(["bench-variants", "--device", "cpu", "--output-root", str(tmp_path)])
    assert json.loads(published.read_text()) == {"result": "complete"}
    kept = tmp_path / "failed" / "bench-variants-cpu"
    assert json.loads((kept / "variants" / "variants-cpu.json").read_text()) == {"result": "half"}


def test_where223_run_refuses_in_one_line_while_another_writes(tmp_path: Path, capsys: pytest.CaptureFixture):
    from where223 import cli

    holder = hold_lock(tmp_path, 60)
    try:
        assert cli.main(["run", "--only", "05", "--output-root", str(tmp_path)]) == 2
    finally:
        holder.kill()
        holder.wait()
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"(pid {holder.pid})" in error and "--wait" in error, error
    assert list(tmp_path.iterdir()) == []  # nothing ran


@pytest.mark.slow
def test_a_notebook_reads_the_published_tree_and_writes_through_its_staging_folder(tmp_path: Path):
    committed = OUTPUTS / "variants" / "variants-cpu.json"
    published = tmp_path / "variants" / committed.name
    published.parent.mkdir()
    shutil.copy(committed, published)
    run = PlannedRun("04_variants", {"measure": False, "device": "cpu"})  # draws the last record, measures nothing
    execute(run, output_root=tmp_path)
    assert published.read_bytes() == committed.read_bytes()
    files = json.loads(publish.manifest_path(run.name, tmp_path).read_text())["files"]
    assert "variants/variants-cpu.png" in files and "variants/variants-cpu.json" not in files
    assert f"notebooks/{run.name}.ipynb" in files and f"notebooks/{run.name}.html" in files
