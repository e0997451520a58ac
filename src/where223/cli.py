"""`where223` command line: one entry point for everything a user does without JupyterLab.

Each subcommand imports its module only when it runs, so `where223 lint` never loads torch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable

# subcommand -> (module, function taking the parsed args and returning an exit code)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("where223.pipeline.run", "cli_main"),
    "report": ("where223.study.report", "cli_main"),
    "lint": ("where223.graph.lint", "cli_main"),
    "blame": ("where223.graph.blame", "cli_main"),
    "draw": ("where223.graph.draw", "cli_main"),
    "repair": ("where223.graph.repair", "cli_main"),
    "bench-variants": ("where223.study.bench", "cli_main"),
}


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="execute the notebooks with papermill into outputs/ (what `make run` does)",
        description=(
            "Execute the planned notebooks (notebooks/plan.yaml) with papermill, each copy named by its "
            "parameters, into outputs/notebooks/ with an HTML export. A failed copy is kept under "
            "outputs/failed/ with its traceback; earlier outputs are left intact."
        ),
    )
    p.add_argument("--params", metavar="FILE.yaml", help="a plan file in the format of notebooks/plan.yaml")
    p.add_argument("--only", metavar="01,03", help="run only notebooks whose names start with these prefixes")
    p.add_argument("--output-root", help="write outputs under this folder instead of outputs/")
    p.add_argument("--kernel", default="where223", help="Jupyter kernel name (default: where223)")


def _add_report(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="regenerate outputs/REPORT.md, the reviewer write-up, from the recorded JSON",
        description="Write outputs/REPORT.md from the records the notebooks left; every number is read from them.",
    )
    p.add_argument("--outputs", help="the outputs folder to read and write (default outputs/)")


def _add_lint(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "lint",
        help="check every node's type constraints against ONNX's own operator schemas",
        description=(
            "Check every node of an ONNX model (subgraphs included) against its operator schema: "
            "type parameters bound to different types, and types outside a parameter's allowed set. "
            "External weight data is never loaded. Exit 0 clean, 1 violations, 2 unreadable input."
        ),
    )
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _add_blame(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "blame",
        help="show the Python source lines that produced an ONNX node",
        description=(
            "Print the source locations (file:line and code) recorded in a node's doc_string, as "
            "torch.onnx.export(verbose=True) stores them. Exit 0 found, 1 no source recorded, "
            "2 unreadable model or unknown node."
        ),
    )
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("node", help="node name, e.g. /transformer/h.0/attn/Where or Where_223")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--all", action="store_true", help="also show torch's nn.Module call and export machinery frames"
    )


def _add_draw(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "draw",
        help="draw a node's dtype-labelled neighbourhood as PNG and SVG",
        description="Draw the neighbourhood of a node, every edge labelled by dtype, violations highlighted.",
    )
    p.add_argument("model", help="path to an .onnx file")
    p.add_argument("node", nargs="?", help="centre node (default: the first lint violation)")
    p.add_argument("--hops", type=int, default=2, help="neighbourhood radius in edges (default 2)")
    p.add_argument(
        "--out", default="neighbourhood", help="output path without suffix (default ./neighbourhood)"
    )


def _add_repair(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "repair",
        help="insert Casts that resolve every type-binding violation, then re-lint and load in ONNX Runtime",
        description=(
            "Insert a Cast before each input that breaks a type binding, re-lint the result and check "
            "that ONNX Runtime loads it. A clean model is never touched. Prints every change made."
        ),
    )
    p.add_argument("input", help="the exported .onnx file")
    p.add_argument("output", help="where to write the repaired model")
    p.add_argument(
        "--to",
        default="output",
        help="cast target: 'output' (the type the node's output already has, default) or an ONNX "
        "type name such as float, float16, bfloat16",
    )


def _add_bench_variants(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench-variants",
        help="measure every way of writing GPT-2's scale and mask lines: tracing, numbers, syncs, step time",
        description=(
            "For each attention variant: eager logits vs transformers 4.25.1, the export's lint and ONNX "
            "Runtime verdicts, dtype divergences, Casts, and interleaved training-step times (syncs and "
            "host-to-device copies on CUDA). Prints the table; writes outputs/variants/variants-DEVICE.json."
        ),
    )
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")
    p.add_argument("--amp-dtype", default="auto", help="auto (fp16 on CUDA, bf16 on CPU) | bf16 | fp16")
    p.add_argument("--preset", default="gpt2", help="model of the training steps: gpt2 (124M) | tiny")
    p.add_argument("--batch-size", type=int, default=1, help="rows per training step (default 1)")
    p.add_argument("--seq-len", type=int, default=16, help="tokens per row (default 16)")
    p.add_argument("--steps", type=int, default=20, help="timed steps per variant (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="untimed round-robin rounds first (default 2)")
    p.add_argument("--profile-steps", type=int, default=3, help="profiled steps per variant, CUDA only")
    p.add_argument("--seed", type=int, default=0, help="model initialisation and synthetic data (default 0)")
    p.add_argument("--variants", help="comma-separated variant names (default: every measured variant)")
    p.add_argument("--no-export", action="store_true", help="skip the ONNX export checks")
    p.add_argument("--out", help="output root (default outputs/); the JSON goes to <out>/variants/")


BUILDERS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "run": _add_run,
    "report": _add_report,
    "lint": _add_lint,
    "blame": _add_blame,
    "draw": _add_draw,
    "repair": _add_repair,
    "bench-variants": _add_bench_variants,
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="where223",
        description="Reproduce, explain and fix ONNX type-constraint failures such as GPT-2's Where_223.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for build in BUILDERS.values():
        build(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and dispatch to the subcommand's module."""
    args = build_parser().parse_args(argv)
    module_name, function_name = COMMANDS[args.command]
    function = getattr(importlib.import_module(module_name), function_name)
    try:
        return int(function(args) or 0)
    except BrokenPipeError:  # e.g. `where223 lint big.onnx | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
