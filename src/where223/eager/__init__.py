"""Torch-side tools for any module, used by every question: what eager PyTorch computed, beside the graph.

- `divergence`: each op's input and output dtypes as eager PyTorch ran them under autocast, joined with the
  exported graph's types by source line (where the two first differ);
- `numerics`: a graph's outputs in emulated reduced precision against eager (`where223.graph.emulate` below);
- `precision`: the amp dtypes by name and `autocast`, as every tool applies mixed precision.

Arrows run one way: `where223.study` and the case (`where223.gpt2`) use these; these use `where223.graph` and
`where223.pipeline` only (tests/test_import_direction.py).
"""

__all__ = ["divergence", "numerics", "precision"]
