"""The class study's refusal groups under CUDA's fp16 autocast policy emulated on CPU (where223.study.classes.emulated,
spaces/classes-emulated-*.yaml): the planner's order, and a group's verdict on records built to give each answer."""

from __future__ import annotations

from where223.study.classes import emulated

GROUP = {"operator": "Where", "kind": "type_binding_conflict", "exporter": "torchscript", "recipe": "bf16_model",
         "stack": "2022", "members": ["gpt2", "imagegpt"]}  # fmt: skip


def _record(model: str, outcome: str, op: str = "Where", stack: str = "project") -> dict:
    """A rerun's record as the class runner writes it, refused at `op` (or accepted)."""
    refused = outcome in ("type_error", "where_type_error")
    binding = {"op_type": op, "node": f"/{op}", "type_parameter": "T",
               "bound_types": ["tensor(float)", "tensor(float16)"]}  # fmt: skip
    return {"model_type": model, "outcome": outcome,
            "key": {"stack": stack, "recipe": emulated.RECIPE, "exporter": "torchscript"},
            "ort": {"verdict": outcome, "type_binding": binding if refused else None,
                    "message": f"Type Error: ... {op}" if refused else ""}}  # fmt: skip


def test_the_plan_takes_every_group_s_first_member_before_any_second():
    other = {**GROUP, "operator": "Conv", "members": ["beit", "gpt2", "levit"]}
    lines = emulated.plan_lines([GROUP, other, {**GROUP, "stack": "today"}], "2022")
    assert lines == [f"{model} {emulated.RECIPE} torchscript auto" for model in ("gpt2", "beit", "imagegpt", "levit")]


def test_a_group_is_refused_alike_only_when_a_member_is_refused_at_its_operator():
    alike = emulated.gpu_side(GROUP, [_record("gpt2", "where_type_error"), _record("imagegpt", "accepted")])
    assert alike["verdict"] == emulated.MEETS_GPU and alike["alike"] == ["gpt2"] and alike["rerun"] == 2
    # the controls: refused at another operator, accepted, another stack's record, no record at all
    other = emulated.gpu_side(GROUP, [_record("gpt2", "type_error", op="Einsum"), _record("imagegpt", "accepted")])
    assert other["verdict"] == emulated.CPU_ONLY and other["alike"] == []
    elsewhere = emulated.gpu_side(GROUP, [_record("gpt2", "where_type_error", stack="today")])
    assert elsewhere["verdict"] == emulated.NOT_RERUN and elsewhere["rerun"] == 0
    assert emulated.gpu_side(GROUP, [])["verdict"] == emulated.NOT_RERUN
