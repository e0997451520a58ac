"""Torch-side tools for any module, used by every question: what eager PyTorch computed, beside the graph.

- `divergence`: each op's input and output dtypes as eager PyTorch ran them under autocast, joined with the
  exported graph's types by source line (where the two first differ);
- `numerics`: a graph's outputs in emulated reduced precision against eager (`where223.graph.emulate` below).

Arrows run one way: `where223.study` uses these; these use `where223.graph` and `where223.pipeline` only.
"""

__all__ = ["divergence", "numerics"]
