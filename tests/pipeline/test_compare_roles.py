"""`where223 compare` decides on every leaf whose role its record type does not declare (`where223.pipeline.roles`):
text that differs only in its digits (a node, a dtype, an opset, a Cast's target, a count in words) is not
reproduced; a declared timing, environment field, measured value within its tolerance or informational number is
listed apart. Small copies of committed records, one edit each."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from tests.study.test_compare import quoted_moved
from where223.pipeline import compare, schema
from where223.pipeline.paths import OUTPUTS

REPRODUCE = "tiny-cpu-bf16-onnx_export/reproduce.json"
FX = "fx/fx.json"
CLASS_CELL = "classes/4.25.1/bf16_model-torchscript/albert.json"
REMEDY_CELL = "remedies/5.24.0/cpu_bf16_autocast-torchscript/helium.json"
VERIFICATION = "tiny-cpu-bf16-onnx_export/fix-4.26/verification.json"
VARIANTS = "variants/variants-cpu.json"
MATRIX_CELL = "matrix/cells/2.1.2-4.22.0-dynamo.json"  # one that failed: it holds a traceback
RECORDS = (REPRODUCE, FX, CLASS_CELL, REMEDY_CELL, VERIFICATION, VARIANTS, MATRIX_CELL)


def copy(root: Path) -> Path:
    for relative in RECORDS:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(OUTPUTS / relative, root / relative)
    return root


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy(tmp_path_factory.mktemp("roles") / "reference")


def edit(root: Path, record: str, change: Callable[[Any], Any]) -> None:
    data = json.loads((root / record).read_text())
    data = change(data) or data
    (root / record).write_text(json.dumps(data))


def replaced(old: str, new: str) -> Callable[[Any], Any]:
    """Every `old` in the record's text replaced by `new` (keys and values alike)."""
    return lambda data: json.loads(json.dumps(data).replace(old, new))


def first(items: list[dict[str, Any]], **wanted: Any) -> dict[str, Any]:
    return next(item for item in items if all(item.get(k) == v for k, v in wanted.items()))


def traced_as(old: str, new: str) -> Callable[[Any], None]:
    def change(data: Any) -> None:
        run = next(run for trace in data["traces"] for run in trace["runs"] if run["traced_dtype"] == old)
        run["traced_dtype"] = new
    return change


def detail_says(text: str) -> Callable[[Any], None]:
    return lambda data: first(data["checks"], name="matches_release").update(detail=text)


def frame_moved(function: str | None = None) -> Callable[[Any], None]:
    """The third frame of the call stack (`path:line:function`) one line further down, or calling `function`."""
    def change(data: Any) -> None:
        path, line, name = data["call_stack"][2].rsplit(":", 2)
        data["call_stack"][2] = f"{path}:{int(line) + 9}:{name}" if function is None else f"{path}:{line}:{function}"
    return change


def rerun_of(reference: Path, tmp_path: Path, record: str, change: Callable[[Any], Any]) -> compare.Comparison:
    rerun = copy(tmp_path / "rerun")
    edit(rerun, record, change)
    return compare.compare(reference, rerun)


@pytest.mark.parametrize(
    ("record", "change", "field"),
    [
        (REPRODUCE, replaced("/transformer/h.0/attn/Where", "/transformer/h.1/attn/Where"),
         "error.type_binding.node"),
        (FX, traced_as("torch.float16", "torch.float32"), "traced_dtype"),
        (CLASS_CELL, replaced("Sub(14)", "Sub(13)"), "ort.message"),  # an opset quoted in a text field
        (REMEDY_CELL, replaced("`to=15`", "`to=1`"), "repair.changes[0]"),  # a Cast's target
        (VERIFICATION, detail_says("4 of 4 within"), "checks[9].detail"),  # declared Quoting: whole numbers decide
    ],
    ids=["node-h.0-to-h.1", "dtype-float16-to-float32", "opset-in-text", "cast-to-15-to-1", "1-of-4-to-4-of-4"],
)
def test_text_that_differs_only_in_its_digits_does_not_reproduce(reference, tmp_path, record, change, field):
    if record == VERIFICATION:  # the reference says "1 of 4 within" in the same place
        reference = copy(tmp_path / "reference")
        edit(reference, VERIFICATION, detail_says("1 of 4 within"))
    result = rerun_of(reference, tmp_path, record, change)
    assert not result.reproduced and result.summary().startswith("not reproduced")
    assert any(d.record == record and field in d.path for d in result.of("differs")), compare.table(result)


def test_the_small_copies_reproduce(reference, tmp_path):  # the control of the controls: no edit, no difference
    result = compare.compare(reference, copy(tmp_path / "rerun"))
    assert result.reproduced and result.differences == []


def rerun_elsewhere(data: dict[str, Any]) -> None:
    data["environment"]["platform"] = "Linux-other"
    data["environment"]["packages"]["torch"] = "2.1.2+other"


def cell_rerun_elsewhere(data: dict[str, Any]) -> None:
    """A matrix cell run again on another machine, from another commit of where223."""
    data.update(python="3.11.9", transformers_path=".elsewhere/transformers")
    data["versions"]["torch"] = "2.1.2+cpu"
    data["engine"]["prepare_s"] = 3.0
    data["error"]["traceback_tail"] = '  File "src/where223/sweep/stages.py", line 34, in time_stage\n' + (
        data["error"]["traceback_tail"])


@pytest.mark.parametrize(
    ("record", "change", "kinds"),
    [
        (REPRODUCE, lambda d: d["timing"].update(seconds=99.0), {"timing.seconds": "timing"}),
        (VARIANTS, lambda d: d["variants"]["4.24"].update(step_times_s=[1.0], steps_timed=1, paired_ratio=0.5),
         {"variants.4.24.step_times_s": "timing", "variants.4.24.steps_timed": "timing",
          "variants.4.24.paired_ratio": "timing"}),
        (CLASS_CELL, lambda d: d.update(wall_s=1.0, recorded_at="2031-01-01T00:00:00+00:00")
         or d["timings_s"].update(lint=9.0) or d["engine"].update(host="elsewhere"),
         {"wall_s": "timing", "recorded_at": "timing", "timings_s.lint": "timing", "engine.host": "environment"}),
        (MATRIX_CELL, cell_rerun_elsewhere, {
            "python": "environment", "versions.torch": "environment", "transformers_path": "environment",
            "engine.prepare_s": "timing", "error.traceback_tail": "environment"}),
        (REPRODUCE, rerun_elsewhere, {"environment.platform": "environment",
                                      "environment.packages.torch": "environment"}),
        (REPRODUCE, frame_moved(), {"call_stack[2]": "environment"}),
        (VERIFICATION, lambda d: first(d["checks"], name="fp32_inference").update(value=4.5e-08),
         {"checks[8].value": "within tolerance"}),  # 2.98e-08 -> 4.5e-08, its tolerance 1e-05
        (CLASS_CELL, lambda d: d["numerics"].update(relative=0.05), {"numerics.relative": "within tolerance"}),
        (VERIFICATION, lambda d: d["gradients"].reverse(), {"gradients[0].max_abs": "informational",
                                                             "gradients[0].parameter": "informational"}),
        (VERIFICATION, lambda d: first(d["checks"], name="fp32_gradients").update(
            detail=quoted_moved(first(d["checks"], name="fp32_gradients")["detail"])),
         {"checks[6].detail": "informational"}),
    ],
    ids=["timing", "step-times", "cell-timings-and-host", "matrix-cell-elsewhere", "environment", "call-stack-line",
         "value-within-tolerance", "cell-numerics-within-tolerance", "informational-gradients",
         "detail-quoting-a-measurement"],
)
def test_declared_roles_do_not_decide(reference, tmp_path, record, change, kinds):
    result = rerun_of(reference, tmp_path, record, change)
    assert result.reproduced, compare.table(result)
    found = {d.path: d.kind for d in result.differences}
    assert {path: found.get(path) for path in kinds} == kinds


@pytest.mark.parametrize(
    ("record", "change", "field"),
    [
        (VERIFICATION, lambda d: first(d["checks"], name="fp32_inference").update(value=2e-05), "checks[8].value"),
        (CLASS_CELL, lambda d: d["numerics"].update(relative=0.08), "numerics.relative"),  # tolerance 0.0625
        (CLASS_CELL, lambda d: d["numerics"].update(relative=None), "numerics.relative"),  # no longer a number
        (REPRODUCE, frame_moved("create_session"), "call_stack[2]"),
        (VARIANTS, lambda d: d["timing"].update(pairs=[]), "timing.pairs"),  # beside the timings: decides
        (VERIFICATION, replaced("worst: transformer.h.0.ln_2.bias (max", "best: transformer.h.0.ln_2.bias (max"),
         "checks[6].detail"),
    ],
    ids=["value-beyond-tolerance", "cell-numerics-beyond", "measured-now-null", "call-stack-function",
         "timing-pairs", "detail-words"],
)
def test_beyond_a_declared_role_it_decides(reference, tmp_path, record, change, field):
    result = rerun_of(reference, tmp_path, record, change)
    assert field in [d.path for d in result.of("differs")], compare.table(result)


def test_a_record_no_type_claims_decides_on_every_difference(tmp_path):
    value = {"timing": {"seconds": 1.0}, "environment": {"platform": "a"}, "wall_s": 1.0}
    other = {"timing": {"seconds": 2.0}, "environment": {"platform": "b"}, "wall_s": 2.0}
    for side, data in (("reference", value), ("rerun", other)):
        for name in ("stray/unclaimed.json", "classes/4.25.1/bf16_model-torchscript/x.json"):  # the second: a cell
            (tmp_path / side / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / side / name).write_text(json.dumps(data))
    result = compare.compare(tmp_path / "reference", tmp_path / "rerun")
    kinds = {(d.record.split("/")[0], d.path): d.kind for d in result.differences}
    assert kinds[("stray", "timing.seconds")] == kinds[("stray", "environment.platform")] == "differs"
    assert kinds[("stray", "wall_s")] == "differs"
    assert kinds[("classes", "wall_s")] == "timing"  # the control: the same key where a type declares it


def test_the_old_variant_reasons_quote_timings_and_the_new_ones_keep_them_apart(tmp_path):
    def made_before_timing_reasons(data: dict[str, Any]) -> None:  # as records made before the split said it
        data["recommendation"]["reasons"].insert(4, "step time 1.090 x that of 4.25 (medians)")
        data["recommendation"].pop("timing_reasons", None)

    reference = copy(tmp_path / "reference")
    edit(reference, VARIANTS, made_before_timing_reasons)

    def old_to_new(data: dict[str, Any]) -> None:
        made_before_timing_reasons(data)
        data["recommendation"]["reasons"][4] = data["recommendation"]["reasons"][4].replace("1.090", "1.031")
        data["recommendation"]["timing_reasons"] = ["step time 1.031 x that of 4.25"]

    result = rerun_of(reference, tmp_path, VARIANTS, old_to_new)
    kinds = {d.path: d.kind for d in result.differences}
    assert kinds["recommendation.reasons[4]"] == "timing"
    assert kinds["recommendation.timing_reasons"] == "timing"


def nested_types() -> tuple[type, type, Any]:
    """Two record types with roles declared in each way (built here: `roles` is the module under test)."""
    from where223.pipeline import roles

    # the functional form: these types are local, and their annotations must not be strings
    inner = TypedDict("Inner", {"n": int, "seconds": Annotated[float, roles.TIMING]})  # noqa: UP013
    outer = TypedDict("Outer", {"inner": inner, "cells": list[inner], "open": Annotated[  # noqa: UP013
        dict[str, Any], roles.Within({"*.times[*]": roles.TIMING, "x": roles.ENVIRONMENT})]})
    return inner, outer, roles


def test_roles_are_found_through_nested_types_lists_and_patterns():
    _, Outer, roles = nested_types()  # noqa: N806
    assert roles.role_of(Outer, ["inner", "seconds"]) == (roles.TIMING, 2)
    assert roles.role_of(Outer, ["cells", 3, "seconds"]) == (roles.TIMING, 3)
    assert roles.role_of(Outer, ["open", "a", "times", 0]) == (roles.TIMING, 4)
    assert roles.role_of(Outer, ["open", "x", "deeper"]) == (roles.ENVIRONMENT, 2)
    for undeclared in (["inner", "n"], ["cells", 0, "n"], ["open", "a", "times"], ["open", "y"], ["nothing"]):
        assert roles.role_of(Outer, undeclared) is None
    assert roles.parse("a.*[*].b[2]") == ("a", "*", "[*]", "b", "[2]")
    with pytest.raises(ValueError, match="not a path pattern"):
        roles.parse("a..b")


def test_the_role_check_finds_a_role_that_names_nothing(tmp_path):
    Inner, Outer, roles = nested_types()  # noqa: N806
    checked = TypedDict("Checked", {  # noqa: UP013
        "inner": Annotated[Inner, roles.Within({"seconds": roles.TIMING, "missing": roles.TIMING})],
        "open": Annotated[dict[str, Any], roles.Within({"here": roles.TIMING, "nowhere": roles.TIMING})]})
    (tmp_path / "c.json").write_text(json.dumps({"inner": {"n": 1, "seconds": 1.0}, "open": {"here": 1}}))
    assert schema.role_problems(tmp_path, ["c.json"], {"c.json": checked}) == [
        "Checked: the role declared at inner.missing: Inner has no key 'missing'",
        "Checked: the role declared at open.nowhere names nothing in any of its 1 record(s)",
    ]
    (tmp_path / "c.json").write_text(json.dumps({"inner": {"n": 1, "seconds": 1.0}, "open": {"nowhere": 1}}))
    assert schema.role_problems(tmp_path, ["c.json"], {"c.json": checked}) == [  # the control: here is missing now
        "Checked: the role declared at inner.missing: Inner has no key 'missing'",
        "Checked: the role declared at open.here names nothing in any of its 1 record(s)",
    ]
    (tmp_path / "o.json").write_text(json.dumps({"inner": {"n": 1, "seconds": 1.0}, "cells": [],
                                                 "open": {"a": {"times": [1.0]}, "x": "y"}}))
    assert schema.role_problems(tmp_path, ["o.json"], {"o.json": Outer}) == []  # Outer's roles all name a place
