"""Fixes at export time, for those who can export again: each makes one refusal class of the class study come out
right from the exporter, rather than repairing the graph afterwards (`where223.graph.repair`).

- TorchScript exporter (torch 2.1's and today's): symbolic functions overridden for the export's duration only
  (`_torchscript`): scaled_dot_product_attention with its scale and mask constants in the query's type (`_sdpa`),
  Casts given torch's number for bfloat16 retargeted after the scalar-type analysis (`_cast_target`), layer_norm and
  where computed in their widest input type when eager handed them mixed dtypes (`_binding`), and the ops whose
  ONNX schema does not allow a reduced type at the opset computed in float (`_in_float`), and permute's axes made
  non-negative (`_permute`: a Transpose refused for its `perm`, the second refusal of bamba);
- dynamo exporter: a pass over the exported program before it is translated (`_dynamo`): the binding and
  in-float rules as casts in the FX graph, so the ONNX graph carries them as the exporter's own Casts.

`fixed(exporter, opset)` is the context the export runs in; `export_dynamo_fixed` is the dynamo export with
the pass. Each fix names the classes it is for (`FIXES`).
"""

from __future__ import annotations

from where223.fixes._dynamo import export_dynamo_fixed, fix_program
from where223.fixes._fixes import FIXES, Fix, fixed
from where223.fixes._in_float import IN_FLOAT_OPS

__all__ = [
    # the context an export runs in, and the dynamo export with its pass
    "fixed",
    "export_dynamo_fixed",
    "fix_program",
    # what each fix is for
    "FIXES",
    "Fix",
    "IN_FLOAT_OPS",
]
