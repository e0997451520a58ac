"""ONNX forensics for any model, from any exporter: types, lint, blame, repair, drawing. onnx only; never torch.

The names in `__all__` are the public API; everything else in the submodules may change. Each name is loaded
from its submodule when first used (PEP 562), so `import where223.graph.ort`, which the version matrix's cells
run inside other Python environments, loads no other submodule. The submodules `blame`, `repair`, `diff` and
`convert` keep their names, so their main functions are exported as `blame_node`, `repair_model`, `diff_models`
and `convert_model`. README's "From Python" shows the API in use.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the submodule that defines it, grouped by what a user does
_SUBMODULE_OF: dict[str, str] = {
    # open a model (weights only when asked), with one-line errors
    "load_model": "loading",
    "UnreadableModelError": "loading",
    "NodeNotFoundError": "loading",
    "MalformedModelError": "loading",
    # every type-constraint violation
    "lint_model": "lint",
    "LintReport": "lint",
    "Violation": "lint",
    "FindingKind": "lint",
    "LintOutcome": "lint",
    "MissingKernel": "lint",
    # lint's findings as CI annotations: SARIF 2.1.0, GitHub workflow commands
    "lint_sarif": "lint_formats",
    "lint_github_commands": "lint_formats",
    # the kernels an execution provider of the installed ONNX Runtime has, per op, schema version and types
    "kernel_table": "kernels",
    "KernelTable": "kernels",
    "KernelStatus": "kernels",
    # ONNX Runtime's verdict
    "judge": "ort",
    "OrtVerdict": "ort",
    "OrtJudgement": "ort",
    "load_session": "ort",
    # the Python lines that made a node
    "blame_node": "blame",
    "blame_all": "blame",
    "BlameResult": "blame",
    # Casts that resolve type-binding conflicts
    "repair_model": "repair",
    "RepairError": "repair",
    "Change": "repair",
    "save_model": "repair",
    # does a reduced-precision model compute what its float32 reference does (within a tolerance fixed in advance)
    "diff_models": "diff",
    "DiffReport": "diff",
    # float32 to fp16 or bf16 where the schema and the provider's kernels allow, within tolerance
    "convert_model": "convert",
    "ConversionRecord": "convert",
    "ConvertError": "convert",
    # figures: a node's dtype-labelled neighbourhood, two graphs side by side, precision by layer, marked nodes
    "draw_neighbourhood": "draw",
    "draw_before_after": "draw",
    "draw_precision_summary": "draw",
    "draw_node_marks": "draw",
    # Netron in the notebook: a node's neighbourhood as its own model, served from loopback
    "extract_neighbourhood": "netron_view",
    "start_netron": "netron_view",
    "stop_netron": "netron_view",
}
# public name -> its name in the submodule, where the two differ
_DEFINED_AS: dict[str, str] = {"blame_node": "blame", "repair_model": "repair", "diff_models": "diff",
                                "convert_model": "convert", "start_netron": "start", "stop_netron": "stop",
                                "lint_sarif": "sarif", "lint_github_commands": "github_commands"}

__all__ = list(_SUBMODULE_OF)


def __getattr__(name: str) -> Any:
    submodule = _SUBMODULE_OF.get(name)
    if submodule is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{submodule}"), _DEFINED_AS.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
