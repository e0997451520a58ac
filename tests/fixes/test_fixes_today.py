"""The export-time fixes on today's stack (torch 2.14.1), both exporters: the cases and the verdicts of
`tests/fixes/test_fixes.py` (its docstring), in a file of its own so that the two stacks' exports run on two workers."""

from __future__ import annotations

import pytest

from tests.fixes.test_fixes import PERMUTE, REFUSED, TYPES_ACCEPTED, run_cases
from tests.stacks import today_python

pytestmark = pytest.mark.slow


def test_fixes_on_today_s_stack(tmp_path):
    found = run_cases(today_python(), tmp_path, "torchscript", "dynamo")
    refused_plainly = {"torchscript/sdpa_bf16", "torchscript/layer_norm_conv_autocast", "torchscript/conv_bf16",
                       "torchscript/einsum_scale_bf16", "torchscript/where_pool_autocast",
                       "dynamo/layer_norm_conv_autocast", "dynamo/conv_bf16",
                       "dynamo/einsum_scale_bf16", "torchscript/group_norm_topk_bf16",
                       "dynamo/group_norm_topk_bf16", "torchscript/cross_entropy_bf16"}  # fmt: skip
    assert found.pop("torchscript/permute_negative").items() >= PERMUTE.items()
    for case, verdicts in found.items():
        if case in refused_plainly:
            assert verdicts["plain"] in REFUSED, case  # the control
        else:
            assert verdicts["plain"] in TYPES_ACCEPTED, case  # accepted plainly: must not regress below
        assert verdicts["fixed"] in TYPES_ACCEPTED, case
    # torch's bfloat16 number, 15 (ONNX's complex128), as a Cast target plainly; ONNX's, 16, with the fixes
    scale = found["torchscript/einsum_scale_bf16"]
    assert 15 in scale["plain_casts"] and 15 not in scale["fixed_casts"] and 16 in scale["fixed_casts"]
