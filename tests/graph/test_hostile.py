"""Untrusted models: nothing a model contains makes the graph tools read the machine, crash, hang or write
through a link. Every case runs the command a user would run; those that crashed or hung the tools before the
guards run in a child process with a time limit, so a regression fails the test instead of killing pytest.
Each attack has a control beside it: the same tool on the harmless variant, so a test cannot pass by refusing
everything."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import onnx
import pytest
from onnx import helper

from tests.graph import hostile
from tests.test_imports import loaded_after
from where223 import cli
from where223.graph import blame as blame_module
from where223.graph.draw import neighbourhood
from where223.graph.lint import lint_model, lint_types
from where223.graph.loading import UnreadableModelError
from where223.graph.ort import OrtVerdict, judge
from where223.graph.types import model_types
from where223.pipeline.paths import ROOT

LIMIT_S = 60  # a child that has not finished by then hangs: the test fails rather than waits


def where223(*args: object, env: dict[str, str] | None = None, timeout: float = LIMIT_S) -> subprocess.CompletedProcess:
    """`python -m where223 ARGS` in a fresh interpreter, with a time limit."""
    return subprocess.run(
        [sys.executable, "-m", "where223", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def assert_one_line(done: subprocess.CompletedProcess, command: str, code: int = 2, says: str = "") -> None:
    assert done.returncode == code, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"where223 {command}: "), done.stderr[-2000:]
    assert says in done.stderr


def _one_line(code: int, err: str, command: str, says: str = "") -> None:
    assert err.count("\n") == 1 and err.startswith(f"where223 {command}: ") and "Traceback" not in err, err
    assert says in err, err


def _run(argv: list[object], capsys) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# --- 1. no file outside the known roots is read because a model names it ------------------------------------


@pytest.mark.parametrize("named", ["/proc/self/environ", "/etc/passwd", "../../../../../../../../proc/self/environ"])
def test_blame_does_not_print_files_a_model_names(named, tmp_path):
    """A doc string naming a secret file: blame shows the frame by name only, and the canary never appears."""
    canary = f"where223-canary-{secrets.token_hex(8)}"
    path = tmp_path / "model.onnx"
    onnx.save(hostile.where_conflict(f"{named}(1): f\n{named}(2): g"), str(path))
    done = where223("blame", path, "Where_223", env={**os.environ, "WHERE223_SECRET": canary})
    assert done.returncode == 0, done.stderr
    assert canary not in done.stdout + done.stderr
    assert "root:" not in done.stdout  # /etc/passwd's first line
    assert f"{named}:1 in f (source not shown: outside the known roots)" in done.stdout


def test_blame_does_not_follow_a_py_link_out_of_the_roots(tmp_path, monkeypatch):
    """`evil.py` inside a root, linking to /etc/passwd: resolved first, so it is outside and not read; the
    control, a real .py file in the same root, is shown."""
    monkeypatch.syspath_prepend(str(tmp_path))
    hostile.symlink(tmp_path / "evil.py", Path("/etc/passwd"))
    (tmp_path / "fine.py").write_text("x = 1\nreturn_value = torch.where(mask, a, b)\n")
    doc = f"{tmp_path / 'evil.py'}(1): f\n{tmp_path / 'fine.py'}(2): g\nevil.py(1): h"
    frames = blame_module.blame(hostile.where_conflict(doc), "Where_223").frames
    assert [(f.code, f.note) for f in frames] == [
        (None, blame_module.OUTSIDE_ROOTS),
        ("return_value = torch.where(mask, a, b)", ""),
        (None, blame_module.OUTSIDE_ROOTS),
    ]


def test_blame_reads_only_py_files(tmp_path, monkeypatch):
    """A non-.py file inside a root is not read either (a root is for source, not for data)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "secret.txt").write_text("token=abc\n")
    frames = blame_module.blame(hostile.where_conflict(f"{tmp_path / 'secret.txt'}(1): f"), "Where_223").frames
    assert frames[0].code is None and frames[0].note == blame_module.OUTSIDE_ROOTS


def test_blame_does_not_read_a_py_file_outside_the_roots(tmp_path, monkeypatch):
    """A real `.py` file outside every root, named by its absolute path or reached through a `.py` link inside a
    root, is not read (the root restriction itself, not the suffix, refuses it); the control: once its folder is a
    root, the same frames show its code."""
    outside, inside = tmp_path / "outside", tmp_path / "inside"
    outside.mkdir()
    inside.mkdir()
    (outside / "secret.py").write_text("token = 'abc'\n")
    hostile.symlink(inside / "link.py", outside / "secret.py")
    monkeypatch.syspath_prepend(str(inside))
    doc = f"{outside / 'secret.py'}(1): f\n{inside / 'link.py'}(1): g"
    frames = blame_module.blame(hostile.where_conflict(doc), "Where_223").frames
    assert [(f.code, f.note) for f in frames] == [(None, blame_module.OUTSIDE_ROOTS)] * 2
    monkeypatch.syspath_prepend(str(outside))
    frames = blame_module.blame(hostile.where_conflict(doc), "Where_223").frames
    assert [(f.code, f.note) for f in frames] == [("token = 'abc'", "")] * 2


def test_a_relative_sys_path_entry_is_no_source_root(tmp_path, monkeypatch):
    """A relative `sys.path` entry names whatever folder blame runs in: it is not a root; the control, the same
    folder as an absolute entry, is."""
    (tmp_path / "relative").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("relative")
    assert (tmp_path / "relative").resolve() not in blame_module.source_roots()
    monkeypatch.syspath_prepend(str(tmp_path / "relative"))
    assert (tmp_path / "relative").resolve() in blame_module.source_roots()


def test_readable_source_keeps_to_the_roots_it_is_given(tmp_path):
    """Roots handed to `readable_source` are the ones it keeps to (SourceFiles' roots of one moment), not
    sys.path's: a file in a given root is read, the same file is not with other roots given."""
    (tmp_path / "given.py").write_text("x = 1\n")
    assert blame_module.readable_source(str(tmp_path / "given.py"), [tmp_path.resolve()]) == (
        tmp_path / "given.py").resolve()
    assert blame_module.readable_source("given.py", [tmp_path.resolve()]) == (tmp_path / "given.py").resolve()
    assert blame_module.readable_source(str(tmp_path / "given.py"), [(tmp_path / "other").resolve()]) is None


def test_a_root_whose_candidate_cannot_be_checked_does_not_hide_the_next(tmp_path):
    """A relative name is looked up in each root in turn: one where the path is too long to check (ENAMETOOLONG)
    or cannot be a path (a NUL byte) is passed over, and the file in the next root is read; the control, those
    roots alone, find nothing."""
    deep = Path("/" + "/".join(["d" * 200] * 21))  # deep / "f.py" is past PATH_MAX: stat fails, resolve does not
    (tmp_path / "f.py").write_text("x = 1\n")
    for bad in (deep, Path("/no\0path")):
        assert blame_module.readable_source("f.py", [bad, tmp_path.resolve()]) == (tmp_path / "f.py").resolve()
        assert blame_module.readable_source("f.py", [bad]) is None


def test_a_sys_path_entry_that_cannot_be_checked_does_not_hide_the_next(tmp_path, monkeypatch):
    """A `sys.path` entry too long to check (ENAMETOOLONG) is passed over, not fatal, and the entries after it are
    still roots."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend("/" + "/".join(["d" * 200] * 21))
    assert tmp_path.resolve() in blame_module.source_roots()


def test_the_checkout_is_a_root_only_with_its_pyproject(tmp_path, monkeypatch):
    """The repository where223 runs from is a root (portable exports name its files relative to it); a folder in
    its place without pyproject.toml is not (an installed where223's parents are no checkout)."""
    monkeypatch.setattr(blame_module, "_REPOSITORY", tmp_path)
    assert tmp_path.resolve() not in blame_module.source_roots()
    (tmp_path / "pyproject.toml").write_text("")
    assert tmp_path.resolve() in blame_module.source_roots()


def _weighted(folder: Path, target: Path | None = None, length: int | None = None, data: bytes = b"\0" * 8) -> Path:
    """A model in `folder` whose weight file is `w.bin`: a link to `target`, or a file holding `data`."""
    folder.mkdir()
    path = hostile.with_weight(folder, "w.bin", length)
    if target is not None:
        hostile.symlink(folder / "w.bin", target)
    else:
        (folder / "w.bin").write_bytes(data)
    return path


def test_repair_refuses_external_data_linked_out_of_the_model_folder(tmp_path, capsys):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"CANARY-8")
    model = _weighted(tmp_path / "downloaded", target=secret)
    out = tmp_path / "out.onnx"
    code, _, err = _run(["repair", model, out], capsys)
    _one_line(code, err, "repair", "resolves outside the model's folder")
    assert code == 2 and not out.exists()
    # the control: the same bytes in a real file inside the folder repair as usual
    code, _, err = _run(["repair", _weighted(tmp_path / "inside", data=b"CANARY-8"), out], capsys)
    assert code == 0, err
    assert b"CANARY-8" in out.read_bytes()


def test_onnx_runtime_is_never_handed_weights_linked_out_of_the_folder(tmp_path):
    """ONNX Runtime reads external weights itself and follows links: judge refuses such a path before it does,
    with or without a time limit; the control, a weight file inside the folder, is judged as usual."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"CANARY-8")
    model = _weighted(tmp_path / "downloaded", target=secret)
    for timeout_s in (None, 30):
        with pytest.raises(UnreadableModelError, match="resolves outside the model's folder"):
            judge(model, timeout_s=timeout_s)
    assert judge(_weighted(tmp_path / "inside"), timeout_s=30).verdict == OrtVerdict.WHERE_TYPE_ERROR


def test_external_data_longer_than_its_file_is_one_line(tmp_path, capsys):
    model = _weighted(tmp_path / "m", length=10**12)
    code, _, err = _run(["repair", model, tmp_path / "out.onnx"], capsys)
    _one_line(code, err, "repair", "claims 1,000,000,000,000 bytes")
    assert code == 2


def _inside_and_outside(tmp_path: Path, build) -> tuple[Path, Path]:
    """`build(location)` saved twice: with its data in ./weights.bin (the control), and in a folder of its own whose
    tensor names ../secret.bin, a file beside that folder holding the same bytes."""
    (tmp_path / "secret.bin").write_bytes(hostile.WEIGHTS)
    inside = hostile.saved_with_weights(tmp_path / "inside", build("weights.bin"))
    outside = hostile.saved_with_weights(tmp_path / "downloaded", build("../secret.bin"), data=b"")
    return inside, outside


@pytest.mark.parametrize("place", list(hostile.EXTERNAL_PLACES))
def test_external_data_anywhere_in_a_model_stays_in_its_folder(place, tmp_path, capsys):
    """Every tensor a runtime may read (function bodies, their subgraphs and attribute defaults, sparse tensors)
    obeys the rule, whichever onnx is installed; the control, its data in ./weights.bin, is read in full: each
    tensor holds its bytes after `load_model(..., load_weights=True)`, none refers to a file any more."""
    from where223.graph import guards
    from where223.graph.loading import load_model

    inside, outside = _inside_and_outside(tmp_path, hostile.EXTERNAL_PLACES[place])
    code, out, err = _run(["lint", outside], capsys)
    _one_line(code, err, "lint", "external data '../secret.bin' resolves outside the model's folder: refused")
    assert code == 2 and out == ""
    code, _, err = _run(["lint", inside], capsys)
    assert code in (0, 3) and err == "", err  # clean, or a custom op left unchecked
    model, _ = load_model(inside, load_weights=True)
    assert not list(guards.external_tensors(model))
    loaded = {t.raw_data for _, t in guards.model_tensors(model) if t.name == "k"}
    assert hostile.WEIGHTS[:8] in loaded or hostile.WEIGHTS[8:] in loaded, loaded


def test_onnx_runtimes_memory_address_marker_is_refused(tmp_path, capsys):
    """ONNX Runtime 1.19 reads a tensor whose location is `*/_ORT_MEM_ADDR_/*` from the process's memory at its
    offset (1.32 refuses it): refused, even with a file of that name in the folder (the guard before found a
    regular file in the folder and handed the model to ONNX Runtime); the control, ./weights.bin, is judged."""
    from where223.graph.loading import MalformedModelError

    marker = "*/_ORT_MEM_ADDR_/*"
    path = hostile.saved_with_weights(tmp_path / "m", hostile.EXTERNAL_PLACES["initializer"](marker))
    (tmp_path / "m" / "*" / "_ORT_MEM_ADDR_").mkdir(parents=True)
    (tmp_path / "m" / marker).write_bytes(hostile.WEIGHTS)
    code, _, err = _run(["lint", path], capsys)
    _one_line(code, err, "lint", "names ONNX Runtime's in-memory address marker")
    with pytest.raises(MalformedModelError, match="in-memory address marker"):
        judge(path, timeout_s=30)  # in a child, were it handed on: ONNX Runtime reads where the offset points
    control = hostile.saved_with_weights(tmp_path / "c", hostile.EXTERNAL_PLACES["initializer"]("weights.bin"))
    assert judge(control).verdict == OrtVerdict.ACCEPTED


TOOLS = {
    "lint": lambda path, tmp: ["lint", path],
    "blame": lambda path, tmp: ["blame", path, "call"],
    "draw": lambda path, tmp: ["draw", path, "call", "--stem", tmp / "fig"],
    "repair": lambda path, tmp: ["repair", path, tmp / "out.onnx"],
}
CONTROLS = {  # what each tool says of the control (its data in ./weights.bin): exit code and a part of its output
    "lint": (0, "no type-constraint violations"),
    "blame": (1, "carries no source information"),
    "draw": (0, "fig.svg"),
    "repair": (0, "no type violation; nothing changed"),
}


@pytest.mark.parametrize("tool", list(TOOLS))
def test_a_function_constant_outside_the_folder_is_refused_by_every_tool(tool, tmp_path, capsys):
    """A model-local function's Constant whose data lies at ../secret.bin (onnx 1.16's list of a model's tensors
    skips function bodies, so it passed, and ONNX Runtime read the file): one line, exit 2, nothing written."""
    inside, outside = _inside_and_outside(tmp_path, hostile.function_constant)
    code, out, err = _run(TOOLS[tool](outside, tmp_path), capsys)
    _one_line(code, err, tool, "tensor 'k' (function local.functions.f, <Constant #0> attribute 'value')")
    assert code == 2 and out == "" and "resolves outside the model's folder" in err
    assert not (tmp_path / "out.onnx").exists() and not (tmp_path / "fig.png").exists()
    code, out, err = _run(TOOLS[tool](inside, tmp_path), capsys)
    expected, says = CONTROLS[tool]
    assert code == expected and says in out + err and "refused" not in err, (code, out, err)


def test_judge_refuses_a_function_constant_outside_the_folder(tmp_path, capsys, monkeypatch):
    """`judge` in-process, with a time limit (before its child starts), in its child itself, and of the model held
    in memory (no folder: any external data is refused); the control, the same in ./weights.bin, is accepted as a
    file and once its weights are loaded into it."""
    from where223.graph import ort_child
    from where223.graph.loading import MalformedModelError, load_model

    inside, outside = _inside_and_outside(tmp_path, hostile.function_constant)
    for timeout_s in (None, 30):
        with pytest.raises(MalformedModelError, match=r"'\.\./secret\.bin' resolves outside the model's folder"):
            judge(outside, timeout_s=timeout_s)
    monkeypatch.setattr(sys, "argv", ["ort_child", str(outside), '["CPUExecutionProvider"]'])
    ort_child.main()
    assert "resolves outside the model's folder" in capsys.readouterr().out
    held = onnx.load(str(inside), load_external_data=False)
    with pytest.raises(UnreadableModelError, match="external data 'weights.bin' in a model held in memory"):
        judge(held)
    assert judge(inside).verdict == OrtVerdict.ACCEPTED
    assert judge(load_model(inside, load_weights=True)[0]).verdict == OrtVerdict.ACCEPTED


def test_repair_writes_a_function_constant_with_its_data(tmp_path, capsys):
    """repair reads every tensor's external data (function bodies too) before it saves the model elsewhere: the
    repaired file holds the function's Constant itself, and ONNX Runtime loads it (it refused the file when the
    Constant still named weights.bin, which the output's folder does not have)."""
    from where223.graph import guards

    model = hostile.function_constant("weights.bin")
    model.graph.input.extend([helper.make_tensor_value_info("cond", hostile.BOOL, [2]),
                              helper.make_tensor_value_info("h", hostile.F16, [2])])  # fmt: skip
    model.graph.node.append(helper.make_node("Where", ["cond", "y", "h"], ["w"], name="Where_223"))
    model.graph.output.append(helper.make_tensor_value_info("w", hostile.F32, [2]))
    source = hostile.saved_with_weights(tmp_path / "downloaded", model)
    (tmp_path / "out").mkdir()
    code, out, err = _run(["repair", source, tmp_path / "out" / "fixed.onnx"], capsys)
    assert code == 0 and "ONNX Runtime loads the repaired model" in out, (out, err)
    repaired = onnx.load(str(tmp_path / "out" / "fixed.onnx"), load_external_data=False)
    assert not list(guards.external_tensors(repaired))
    assert [t.raw_data for _, t in guards.model_tensors(repaired) if t.name == "k"] == [hostile.WEIGHTS[:8]]


# --- 2. hostile structure: one line and bounded time ------------------------------------------------------


STRUCTURES = {
    "self-recursive function": (hostile.recursive_function, "recursion is refused"),
    "mutually recursive functions": (hostile.mutually_recursive_functions, "f -> local.functions.g ->"),
    "25 doubling functions": (hostile.doubling_functions, "would make 33,554,432 nodes"),
    "cycle A -> B -> A": (hostile.cycle, "has a cycle (A -> B -> A)"),
    "node consuming its own output": (lambda: hostile.cycle(self_loop=True), "has a cycle (A -> A)"),
    "element type 999": (hostile.unknown_element_type, "element type 999"),
}


@pytest.mark.parametrize("tool", ["lint", "draw", "repair"])
@pytest.mark.parametrize("case", list(STRUCTURES))
def test_hostile_structure_is_one_line_and_exit_2(case, tool, tmp_path):
    build, says = STRUCTURES[case]
    path = tmp_path / "model.onnx"
    onnx.save(build(), str(path))
    args = {"lint": [path], "draw": [path, "--stem", tmp_path / "fig"], "repair": [path, tmp_path / "out.onnx"]}
    done = where223(tool, *args[tool])
    assert_one_line(done, tool, 2, says)
    assert not (tmp_path / "out.onnx").exists() and not (tmp_path / "fig.png").exists()


def test_controls_for_the_structure_guards_pass(tmp_path):
    """What the guards must let through: a short doubling chain (32 nodes inlined) and nodes listed out of order
    that still have a topological order."""
    assert lint_model(hostile.doubling_functions(depth=5)).nodes_checked == 32
    assert lint_model(hostile.unsorted_but_acyclic()).clean


OPSET_TOOLS = {
    "lint": lambda path, tmp: ["lint", path],
    "blame": lambda path, tmp: ["blame", path, "Where_223"],
    "draw": lambda path, tmp: ["draw", path, "--stem", tmp / "fig"],
    "repair": lambda path, tmp: ["repair", path, tmp / "out.onnx"],
}


@pytest.mark.parametrize("where", ["main", "domain", "function"])
@pytest.mark.parametrize("version", [2**31, 2**62, -(2**40)])
def test_an_opset_no_cpp_int_holds_is_one_line_in_every_tool(where, version, tmp_path, capsys):
    """onnx's schema lookup takes a C++ int (repair raised TypeError at 2**31; ONNX Runtime wraps it around): an
    opset version outside 0..2**31 - 1, the model's for ai.onnx or another domain or a function's, is refused by
    every graph tool and by judge; the control, 2**31 - 1, is used (the newest known schemas, with a note)."""
    from where223.graph.loading import MalformedModelError

    path = tmp_path / "model.onnx"
    onnx.save(hostile.huge_opset(version, where), str(path))
    shown = f"opset {version} of " + {"main": "ai.onnx", "domain": "custom.domain", "function": "ai.onnx"}[where]
    for tool, argv in OPSET_TOOLS.items():
        code, out, err = _run(argv(path, tmp_path), capsys)
        _one_line(code, err, tool, shown)
        assert code == 2 and out == "" and "is not a version onnx can look schemas up at" in err
    assert not (tmp_path / "out.onnx").exists() and not (tmp_path / "fig.png").exists()
    for source in (path, hostile.huge_opset(version, where)):
        with pytest.raises(MalformedModelError, match=shown):
            judge(source)
    onnx.save(hostile.huge_opset(2**31 - 1, where), str(path))
    code, out, err = _run(["lint", path], capsys)
    assert code == 1 and err == "" and "Optype (Where)" in out


def test_an_opset_beyond_the_installed_schemas_says_which_were_used(tmp_path, capsys):
    newest = onnx.defs.onnx_opset_version()
    for model, declared in ((hostile.huge_opset(2**31 - 1), 2**31 - 1), (hostile.future_opset(), newest + 1)):
        path = tmp_path / "model.onnx"
        onnx.save(model, str(path))
        code, out, err = _run(["lint", path], capsys)
        assert code == 1 and err == "", err
        assert f"note: opset {declared} of ai.onnx is newer than the installed onnx's schemas" in out
        assert "the newest known schemas were used" in out and "Optype (Where)" in out
    code, out, _ = _run(["lint", tmp_path / "model.onnx", "--json"], capsys)
    assert '"notes"' in out
    assert "newer than" not in lint_model(hostile.where_conflict()).format()  # the control: a known opset


def test_repair_judges_with_a_time_limit(tmp_path):
    """A graph whose session creation folds teraflops of constants: repair stops ONNX Runtime and says timeout."""
    path = tmp_path / "slow.onnx"
    onnx.save(hostile.slow_to_load(), str(path))
    started = time.monotonic()
    done = where223("repair", path, tmp_path / "out.onnx", "--ort-timeout", "3")
    assert time.monotonic() - started < 30
    assert_one_line(done, "repair", 1, "did not finish creating a session within 3 s")


def test_judge_timeout_is_a_verdict_and_the_control_is_not():
    """The slow graph times out; the control, the same chain at one MatMul of a small constant, is accepted within
    the same limit (so the limit is not spent starting the child process)."""
    assert judge(hostile.without_where(hostile.slow_to_load()), timeout_s=3).verdict == OrtVerdict.TIMEOUT
    quick = hostile.without_where(hostile.slow_to_load(matmuls=1, size=8))
    assert judge(quick, timeout_s=3).verdict == OrtVerdict.ACCEPTED
    refused = judge(hostile.where_conflict(), timeout_s=30)
    assert refused.verdict == OrtVerdict.WHERE_TYPE_ERROR and "/tmp" not in refused.message


def test_draw_cuts_a_megabyte_name_and_tells_twins_apart(tmp_path, capsys):
    path = tmp_path / "big.onnx"
    onnx.save(hostile.where_conflict(node_name="W" * 1_000_000), str(path))
    code, _, err = _run(["draw", path, "--stem", tmp_path / "big"], capsys)
    assert code == 0, err
    assert (tmp_path / "big.svg").stat().st_size < 200_000
    path = tmp_path / "twins.onnx"
    onnx.save(hostile.duplicate_names(), str(path))
    code, _, err = _run(["draw", path, "twin", "--stem", tmp_path / "twins"], capsys)
    assert code == 0, err
    types = model_types(hostile.duplicate_names())
    drawn = neighbourhood(types, "twin", 2, lint_types(types).violations)
    ops = sorted(data["op_type"] for _, data in drawn.nodes(data=True) if data["kind"] == "op")
    assert ops == ["Add", "Cast"]  # two nodes, not one merged into a cycle


# --- 3. files written safely --------------------------------------------------------------------------------


def test_draw_escapes_control_characters_into_well_formed_svg(tmp_path, capsys):
    path = tmp_path / "ctrl.onnx"
    onnx.save(hostile.where_conflict(node_name="a\x01b\x1b[2J$\\frac{x"), str(path))
    code, _, err = _run(["draw", path, "--stem", tmp_path / "ctrl"], capsys)
    assert code == 0, err
    ElementTree.parse(tmp_path / "ctrl.svg")  # raises on a control character


def test_draw_replaces_a_symlink_at_its_output_instead_of_writing_through_it(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    hostile.symlink(tmp_path / "fig.png", victim)
    hostile.symlink(tmp_path / "fig.svg", victim)
    path = tmp_path / "m.onnx"
    onnx.save(hostile.where_conflict(), str(path))
    code, _, err = _run(["draw", path, "--stem", tmp_path / "fig"], capsys)
    assert code == 0, err
    assert victim.read_text() == "keep me"
    for suffix in (".png", ".svg"):
        assert not (tmp_path / f"fig{suffix}").is_symlink() and (tmp_path / f"fig{suffix}").stat().st_size > 1000
    assert not list(tmp_path.glob(".tmp-*"))


def test_repair_in_place_through_a_symlink_rewrites_its_target(tmp_path, capsys):
    real = tmp_path / "real.onnx"
    onnx.save(hostile.where_conflict(), str(real))
    link = hostile.symlink(tmp_path / "link.onnx", real)
    code, _, err = _run(["repair", link, "--in-place"], capsys)
    assert code == 0, err
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert lint_model(real).clean


def test_sigterm_during_repair_removes_its_temporary_folder(tmp_path):
    model, out, ready = tmp_path / "m.onnx", tmp_path / "out.onnx", tmp_path / "ready"
    onnx.save(hostile.where_conflict(), str(model))
    script = (
        "import pathlib, sys, time, onnx\nfrom where223 import cli\nreal = onnx.save_model\n"
        "def slow(*args, **kwargs):\n    real(*args, **kwargs)\n"
        f"    pathlib.Path({str(ready)!r}).write_text('x')\n    time.sleep(60)\n"
        f"onnx.save_model = slow\nsys.exit(cli.main(['repair', {str(model)!r}, {str(out)!r}]))\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + LIMIT_S
    while not ready.exists() and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.05)
    assert ready.exists(), child.stderr.read() if child.poll() is not None else "no save within the limit"
    assert list(tmp_path.glob(".tmp-*"))  # the staging folder is there while it writes
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=LIMIT_S)
    assert child.returncode == 143, err
    _one_line(143, err, "repair", "terminated (SIGTERM)")
    assert not list(tmp_path.glob(".tmp-*")) and not out.exists()


def test_the_next_repair_removes_what_a_killed_one_left(tmp_path, capsys):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    leftover = tmp_path / f".tmp-{int(dead.stdout)}-0123456789ab-out.onnx"
    leftover.mkdir()
    (leftover / "out.onnx").write_bytes(b"half")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy = tmp_path / f".tmp-{sleeper.pid}-0123456789ab-out.onnx"  # a live writer's: left alone
        busy.mkdir()
        model = tmp_path / "m.onnx"
        onnx.save(hostile.where_conflict(), str(model))
        code, _, err = _run(["repair", model, tmp_path / "out.onnx"], capsys)
        assert code == 0, err
        assert not leftover.exists() and busy.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_ctrl_c_in_repair_is_one_line_exit_130_and_writes_nothing(tmp_path, monkeypatch, capsys):
    from where223.graph.repair import _file as repair_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    model = tmp_path / "m.onnx"
    onnx.save(hostile.where_conflict(), str(model))
    monkeypatch.setattr(repair_module.onnx, "save_model", interrupted)
    code, _, err = _run(["repair", model, tmp_path / "out.onnx"], capsys)
    assert code == 130
    _one_line(code, err, "repair", "interrupted (Ctrl-C)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


# --- 4. graph tools stay light ------------------------------------------------------------------------------


def test_repair_never_imports_torch(tmp_path):
    model, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(hostile.where_conflict(), str(model))
    code = f"from where223.cli import main\nassert main(['repair', {str(model)!r}, {str(out)!r}]) == 0"
    modules = loaded_after(code, tmp_path)
    assert not {m for m in modules if m.split(".")[0] == "torch"}
    assert out.exists()


def test_judging_in_process_loads_onnxruntime_without_torch(tmp_path):
    """The in-process judge (notebooks, sweeps) holds the training package back too; the control: importing
    onnxruntime plainly, as before, does load torch in this stack."""
    model = tmp_path / "m.onnx"
    onnx.save(hostile.where_conflict(), str(model))
    judged = loaded_after(f"from where223.graph.ort import judge\nassert judge({str(model)!r}).verdict", tmp_path)
    assert "onnxruntime" in judged and "torch" not in judged
    plain = loaded_after("import onnxruntime", tmp_path)
    assert "torch" in plain or "onnxruntime.training" not in plain  # a CPU-only onnxruntime has no training


MODEL_PATHS_THAT_ARE_NO_FILE = {
    "a folder": lambda path: path.mkdir(),
    "a FIFO nothing writes to": os.mkfifo,  # opened blocking, the open would wait for a writer for ever
    "a symlink to /dev/zero": lambda path: path.symlink_to("/dev/zero"),  # read, zeros without end
}


def _alarm(signum, frame):
    raise TimeoutError("the tool waited on the model's path")


@pytest.mark.parametrize("make", list(MODEL_PATHS_THAT_ARE_NO_FILE))
def test_a_model_path_that_is_no_regular_file_is_one_line_at_once(make, tmp_path, capsys):
    """The model is opened once, never blocking, and asked what it is on the descriptor it would be read from
    (in-process, under an alarm: a blocking open fails the test instead of hanging it)."""
    path = tmp_path / "model.onnx"
    MODEL_PATHS_THAT_ARE_NO_FILE[make](path)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)
    try:
        with pytest.raises(UnreadableModelError, match="model.onnx: not a file$"):
            lint_model(path)
        for argv in (["lint", path], ["draw", path, tmp_path / "out.svg"], ["repair", path, tmp_path / "out.onnx"]):
            code, _, err = _run(argv, capsys)
            assert code == 2, (argv, err)
            _one_line(code, err, argv[0], says=f"{path}: not a file")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_control_a_model_in_onnxs_text_format_is_read_as_onnx_load_reads_it(tmp_path):
    """The format is the one onnx.load takes from the file's extension: a text-format model lints."""
    onnx.save(hostile.where_conflict(), str(tmp_path / "model.onnxtxt"), format="onnxtxt")
    assert [v.op_type for v in lint_model(tmp_path / "model.onnxtxt").violations] == ["Where"]
    with pytest.raises(UnreadableModelError, match="model.onnx: no such file$"):
        lint_model(tmp_path / "model.onnx")
