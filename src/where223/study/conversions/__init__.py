"""Question 10 (notebook 10): a float32 model converted to float16 after export, the way most people do it
(onnxconverter-common, onnxruntime's own converter, `where223 convert`): which conversions does ONNX Runtime refuse,
which compute garbage, and what do lint, repair, diff and convert say of them?

The roles of every question's package (`where223.study._roles`); its `run` says where the records come from:
`benchmarks/converters.py` (`make converters`) writes `benchmarks/converters.json`, which the notebook draws.
"""

from where223.study._roles import ROLES, lazy

__all__ = list(ROLES)
__getattr__ = lazy(__name__)
