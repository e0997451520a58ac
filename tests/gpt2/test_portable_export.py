"""Exported models carry no machine-specific path, and blame and the divergence report read them the same way."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import onnx
import pytest

from where223.eager import divergence
from where223.gpt2 import export, models
from where223.graph import blame as blame_module
from where223.graph.blame import blame_all
from where223.pipeline import portable
from where223.pipeline.paths import ROOT

SITE_PACKAGES = sysconfig.get_paths()["purelib"]


def test_portable_stack_rewrites_library_repository_and_kernel_paths():
    stack = (
        f"{SITE_PACKAGES}/transformers/models/gpt2/modeling_gpt2.py(277): _split_heads\n"
        f"{ROOT}/src/where223/gpt2/export.py(69): export_onnx\n"
        "/tmp/ipykernel_4242/653670177.py(1): <module>\n"
        f"{sysconfig.get_paths()['stdlib']}/asyncio/events.py(80): _run\n"
        "/elsewhere/script.py(3): <module>\n"
    )
    assert portable.stack(stack) == (
        "transformers/models/gpt2/modeling_gpt2.py(277): _split_heads\n"
        "src/where223/gpt2/export.py(69): export_onnx\n"
        "<ipykernel>/653670177.py(1): <module>\n"
        "asyncio/events.py(80): _run\n"
        "/elsewhere/script.py(3): <module>\n"  # outside the interpreter and the checkout: left as recorded
    )


def _tiny_export(out: Path) -> Path:
    model = models.build_model("tiny", seed=0)
    batch = models.first_batch("synthetic", 1, 8, model.config.vocab_size, 0)
    return export.export_onnx(model.train(), batch, out, 17, "cpu", "bf16")


def _doc_strings(path: Path) -> list[str]:
    return [node.doc_string for node in onnx.load(str(path), load_external_data=False).graph.node]


def _blamed(path: Path, all_frames: bool) -> dict[str, list[tuple]]:
    """Every node's frames (all, or the model's), with file names made portable."""
    answers = {}
    for result in blame_all(path):
        frames = result.frames if all_frames else result.model_frames
        answers[result.node] = [(portable.path(f.file), f.line, f.function, f.code) for f in frames]
    return answers


@pytest.fixture(scope="module")
def raw_and_portable(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny export as torch writes it (absolute paths), and the same file rewritten."""
    folder = tmp_path_factory.mktemp("exports")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(export, "stable_doc_strings", lambda path: Path(path))
        raw = _tiny_export(folder / "raw.onnx")
    rewritten = folder / "portable.onnx"
    shutil.copyfile(raw, rewritten)
    export.stable_doc_strings(rewritten)
    return raw, rewritten


@pytest.mark.slow
def test_rewritten_export_holds_no_absolute_path(raw_and_portable):
    raw, rewritten = raw_and_portable
    assert any(SITE_PACKAGES in doc for doc in _doc_strings(raw))  # the control: torch writes them
    for doc in _doc_strings(rewritten):
        assert "site-packages" not in doc and str(ROOT) not in doc
        assert not re.search(r"^/", doc, re.MULTILINE), doc[:200]


@pytest.mark.slow
def test_blame_gives_the_same_answers_before_and_after_the_rewrite(raw_and_portable, monkeypatch):
    raw, rewritten = raw_and_portable
    before = _blamed(raw, all_frames=False)
    assert _blamed(rewritten, all_frames=False) == before
    assert _blamed(rewritten, all_frames=True) == _blamed(raw, all_frames=True)
    where = next(name for name in before if name.endswith("attn/Where"))
    assert before[where][0][0] == "transformers/models/gpt2/modeling_gpt2.py" and before[where][0][3]
    # the control: the machinery pattern of old, absolute paths only, tells the rewritten model apart
    monkeypatch.setattr(blame_module, "_MACHINERY", re.compile(r"[/\\]torch[/\\](jit|onnx)[/\\]"))
    assert _blamed(rewritten, all_frames=False) != before


@pytest.mark.slow
def test_divergence_report_is_the_same_before_and_after_the_rewrite(raw_and_portable, monkeypatch):
    raw, rewritten = raw_and_portable
    assert divergence.graph_results(rewritten) == divergence.graph_results(raw)
    model = models.build_model("tiny", seed=0)
    batch = models.first_batch("synthetic", 1, 8, model.config.vocab_size, 0)
    before = divergence.divergence_report(model, batch, raw, "cpu", "bf16").to_dict()
    assert before["joined"] > 0 and before["count"] > 0
    assert divergence.divergence_report(model, batch, rewritten, "cpu", "bf16").to_dict() == before
    # the control: recognising torch's frames by absolute path only mistakes torch for the model
    monkeypatch.setattr(divergence, "_is_library_frame", lambda filename: "/torch/" in filename)
    assert divergence.graph_results(rewritten) != divergence.graph_results(raw)


EXPORT_SCRIPT = """
import sys
from pathlib import Path
from where223.gpt2 import export, models
model = models.build_model("tiny", seed=0)
batch = models.first_batch("synthetic", 1, 8, model.config.vocab_size, 0)
export.export_onnx(model.train(), batch, sys.argv[1], 17, "cpu", "bf16")
export.stable_doc_strings = lambda path: Path(path)  # the control: as torch writes it
export.export_onnx(model.train(), batch, sys.argv[2], 17, "cpu", "bf16")
"""


def _checkout_copy(target: Path) -> Path:
    """A second checkout of the package: its sources and pyproject.toml (what `paths` finds the root by)."""
    shutil.copytree(ROOT / "src", target / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "pyproject.toml", target / "pyproject.toml")
    return target


@pytest.mark.slow
def test_two_checkouts_export_byte_identical_models(tmp_path):
    exported = []
    for name in ("one", "elsewhere/two"):
        checkout = _checkout_copy(tmp_path / name)
        environment = {key: value for key, value in os.environ.items() if key != "WHERE223_ROOT"}
        environment["PYTHONPATH"] = str(checkout / "src")
        outputs = (checkout / "outputs" / "model.onnx", checkout / "outputs" / "raw.onnx")
        done = subprocess.run(
            [sys.executable, "-c", EXPORT_SCRIPT, *map(str, outputs)],
            cwd=checkout, env=environment, capture_output=True, text=True,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert any(str(checkout) in doc for doc in _doc_strings(outputs[1]))  # the checkout really ran
        exported.append(outputs)
    (first, first_raw), (second, second_raw) = exported
    assert first_raw.read_bytes() != second_raw.read_bytes()  # the control: torch's paths tell them apart
    assert first.read_bytes() == second.read_bytes()
