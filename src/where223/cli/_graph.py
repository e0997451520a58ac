"""The graph tools' commands: `lint`, `blame`, `draw`, `repair`, `diff`, `convert` (onnx only: none loads torch)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from where223.cli import _options as options
from where223.cli._base import Command, say, wrote
from where223.cli._options import same_file, writable_file
from where223.errors import UsageError, printable
from where223.graph.ort import ORT_TIMEOUT_S

LINT_FORMATS = ("text", "json", "sarif", "github")


class Lint(Command):
    """Check every node's type constraints against ONNX's own operator schemas.

    Roots are listed first, each with the consequences that follow from it. Exit 0 clean (every node checked),
    1 violations found, 2 unreadable input or onnx's inliner or shape inference failing on it (one line),
    3 incomplete: no violation among the nodes checked, but some values stayed untyped or nodes unchecked.
    With --kernels (or --provider), nodes are also looked up in the execution provider's kernel table for the
    installed ONNX Runtime (built from one-node models and cached; the model itself is not loaded): exit 4 when
    there is no type violation but a node has no kernel (violations still exit 1; without missing kernels the
    codes above stand). --format sarif or github prints one annotation per finding (missing kernels as warnings).
    """

    name = "lint"
    explained_by = "where223.graph.lint"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", help="path to an .onnx file")
        options.json_output(parser, "the report (the same as --format json)")
        parser.add_argument(
            "--format", choices=LINT_FORMATS, default=None,
            help="text (default), json, sarif (SARIF 2.1.0 for code scanning) or github (workflow commands)",
        )  # fmt: skip
        parser.add_argument(
            "--kernels", action="store_true",
            help="also report nodes the execution provider has no kernel for (exit 4 when no type violation)",
        )  # fmt: skip
        parser.add_argument(
            "--provider", metavar="NAME",
            help="the execution provider whose kernels are checked (implies --kernels; default CPUExecutionProvider)",
        )  # fmt: skip

    @staticmethod
    def output_format(args: argparse.Namespace) -> str:
        """--format, with --json as its alias; a UsageError when the two disagree."""
        if args.json and args.format not in (None, "json"):
            raise UsageError(f"--json and --format {args.format} disagree: give one")
        return "json" if args.json else (args.format or "text")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.graph.lint import LintOutcome, lint_model

        shown = Lint.output_format(args)
        provider = args.provider or ("CPUExecutionProvider" if args.kernels else None)
        report = lint_model(args.model, provider=provider)
        if shown == "json":
            say(json.dumps(report.to_dict(), indent=2))
        elif shown in ("sarif", "github"):
            from where223.graph.lint_formats import github_commands, sarif

            text = json.dumps(sarif(report), indent=2) if shown == "sarif" else github_commands(report)
            if text:
                say(text)
        else:
            say(report.format())
        if report.outcome != LintOutcome.VIOLATIONS and report.kernels is not None and report.kernels.missing:
            return 4
        return {LintOutcome.CLEAN: 0, LintOutcome.VIOLATIONS: 1, LintOutcome.INCOMPLETE: 3}[report.outcome]


class Blame(Command):
    """Show the Python source lines that produced an ONNX node.

    Exit 0 found, 1 no source recorded, 2 unreadable model or unknown node.
    """

    name = "blame"
    explained_by = "where223.graph.blame"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", help="path to an .onnx file")
        parser.add_argument("node", help="node name, e.g. /transformer/h.0/attn/Where or Where_223")
        options.json_output(parser)
        parser.add_argument(
            "--all", action="store_true", help="also show torch's nn.Module call and export machinery frames"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.graph.blame import blame
        from where223.pipeline import portable

        result = blame(args.model, args.node)
        # paths relative to site-packages or the repository, as in the records
        if args.json:
            say(json.dumps(portable.record(result.to_dict()), indent=2))
        elif result.frames:
            say(portable.text(result.format(all_frames=args.all)))
        else:
            print(result.format(), file=sys.stderr)
        return 0 if result.frames else 1


class Draw(Command):
    """Draw a node's dtype-labelled neighbourhood as PNG and SVG; prints the two paths.

    At most 24 edges are drawn (the nodes nearest the centre first): beyond that, a line before the paths and the
    figure's title say how many were left out. Exit 0 drawn, 1 no node named and no violation to centre on, 2 bad
    input or output path. No folder is created: the folder of --stem must exist.
    """

    name = "draw"
    explained_by = "where223.graph.draw:draw_neighbourhood"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("model", help="path to an .onnx file")
        parser.add_argument("node", nargs="?", help="centre node (default: the first lint violation)")
        parser.add_argument(
            "--hops", type=options.non_negative_int, default=2, help="neighbourhood radius in edges (default 2)"
        )
        parser.add_argument(
            "--stem", default="neighbourhood", help="the figures' path without suffix (default ./neighbourhood)"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.graph.draw import draw_neighbourhood

        for suffix in (".png", ".svg"):
            writable_file(f"{args.stem}{suffix}")
        for path in draw_neighbourhood(args.model, args.node, args.hops, args.stem, say=say):
            say(printable(str(path), None))
        return 0


class Repair(Command):
    """Resolve every type violation lint finds, re-lint, and load the result in ONNX Runtime.

    Rules: a wrong Cast target (the TorchScript exporter's Cast(to=15), bfloat16 in torch's numbering and
    complex128 in ONNX's) is retargeted; a type-binding conflict is computed in one type and cast back: where
    eager PyTorch computed given --eager (the record.json of `where223 explain`), else the widest bound type,
    saying eager was not consulted; a type the operator does not allow at the opset (bf16 into Conv) is computed
    in the nearest allowed type that holds it and cast back, saying what it costs. Prints every change with its
    reason; a contradicted declaration (a Cast whose output is declared another type, as fp16 converters leave
    them) is resolved by retargeting or correcting it, the graph's declared inputs and outputs keeping their types;
    an operator a function body refuses (or a contrib operator given a type its schema refuses) is computed in float.
    Exit 0 repaired (or nothing to repair and ONNX Runtime loads the model: nothing is written), 1 not repairable
    (the reason; nothing is written), refused by ONNX Runtime (also when lint found nothing to repair), or beyond
    --reference's tolerance, 2 unreadable input (its external weights or eager report included) or
    an output that cannot be written: a directory, a missing folder (none is created), the input itself
    without --in-place, or with --in-place an input that has other hard links (the repaired file would be a new
    one under this name alone, the other names keeping the old model: repair into another file instead). The
    output is written atomically (a temporary file beside it, then renamed), keeping the permissions, owner and
    group of a file it replaces (owner and group where this user may set them). Interrupted (Ctrl-C, SIGTERM)
    once the output is written, the one line names it and says its checks did not finish.
    """

    name = "repair"
    explained_by = "where223.graph.repair._file:repair_file"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("input", help="the exported .onnx file")
        parser.add_argument("output", nargs="?", help="where to write the repaired model (not the input)")
        parser.add_argument("--in-place", action="store_true", help="overwrite the input instead (give no output)")
        parser.add_argument(
            "--to",
            default="auto",
            help="a conflict's compute type: 'auto' (where eager computed with --eager, else the widest bound "
            "type; default), 'output' (the type the node's outputs carry) or an ONNX type name such as float",
        )
        parser.add_argument(
            "--eager", metavar="REPORT",
            help="the record.json `where223 explain` wrote for this model: conflicts are computed where eager did",
        )  # fmt: skip
        parser.add_argument(
            "--ort-timeout", type=options.positive_float, default=ORT_TIMEOUT_S, metavar="SECONDS",
            help=f"time ONNX Runtime may take to judge the result (default {ORT_TIMEOUT_S:g}; then: timeout, exit 1)",
        )  # fmt: skip
        parser.add_argument(
            "--reference", metavar="FP32.onnx",
            help="the float32 model: `diff` the repaired model against it (exit 1 beyond tolerance)",
        )  # fmt: skip
        parser.add_argument("--feeds", metavar="INPUTS.npz", help="with --reference: the inputs (default: generated)")

    @staticmethod
    def output_path(args: argparse.Namespace) -> Path:
        """Where the repaired model goes: OUTPUT, or INPUT with --in-place; never the input by accident."""
        source = Path(args.input)
        if args.in_place:
            if args.output is not None and not same_file(Path(args.output), source):
                raise UsageError("--in-place overwrites the input: give no output")
            # a symlinked input: the file it points to is rewritten, the link stays a link
            target = writable_file(str(source.resolve()) if source.is_symlink() else args.input)
            links = target.stat().st_nlink if target.is_file() else 1
            if links > 1:  # a rename would part this name from the others, which would keep the old model
                raise UsageError(f"{args.input} has {links - 1} other hard link(s): --in-place would give this name "
                                 "a new file and leave the old model under the others; repair into another file")
            return target
        if args.output is None:
            raise UsageError("name the output file, or pass --in-place to overwrite the input")
        output = writable_file(args.output)
        if same_file(output, source):
            raise UsageError(f"{args.output} is the input; pass --in-place to overwrite it")
        return output

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.graph.repair import repair_file

        def written(path: Path) -> None:
            wrote(path, "its checks (re-lint, ONNX Runtime) did not finish")

        if args.feeds and not args.reference:
            raise UsageError("--feeds goes with --reference (the inputs both models run on)")
        repair_file(args.input, Repair.output_path(args), target=args.to, ort_timeout_s=args.ort_timeout, say=say,
                    eager=args.eager, written=written, reference=args.reference, feeds=args.feeds)
        return 0


def _comparison_options(parser: argparse.ArgumentParser) -> None:
    """The inputs both models run on, and the bound on each ONNX Runtime call (`diff` and `convert`)."""
    parser.add_argument("--feeds", metavar="INPUTS.npz", help="the inputs, one array per model input (default: "
                        "generated from the inputs' types, seeded)")
    parser.add_argument("--seed", type=options.non_negative_int, default=0, help="generated inputs' seed (default 0)")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                        help="a dynamic dimension's size for generated inputs (repeatable; default 1 each)")
    parser.add_argument("--provider", default="CPUExecutionProvider", metavar="NAME",
                        help="the execution provider both models run on (default CPUExecutionProvider)")
    parser.add_argument(
        "--ort-timeout", type=options.positive_float, default=ORT_TIMEOUT_S, metavar="SECONDS",
        help=f"time each ONNX Runtime call may take (default {ORT_TIMEOUT_S:g}; then: stopped, exit 2)",
    )  # fmt: skip
    options.json_output(parser, "the record")


class Diff(Command):
    """Run a reduced-precision model and its float32 reference on the same inputs and compare every output.

    Each output's largest absolute and relative difference, and its size in spacings of the candidate's reduced type
    at the reference output's largest magnitude, against a tolerance fixed before any model was run (32 spacings,
    the same for every model). Beyond it: the first value, in the reference's order, where the candidate departs
    (matched by name, through the Casts converters insert), and whether the reduced type overflows, saturates or
    underflows there. Exit 0 within tolerance, 1 beyond, 2 bad input (an unreadable model or inputs file, inputs
    that do not fit, a model ONNX Runtime refuses or that does not finish within --ort-timeout).
    """

    name = "diff"
    explained_by = "where223.graph.diff"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("reference", help="the float32 model")
        parser.add_argument("candidate", help="the reduced-precision model (converted, repaired)")
        _comparison_options(parser)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.graph.diff import diff, parse_dims

        report = diff(args.reference, args.candidate, args.feeds, args.seed, parse_dims(args.dim), args.provider,
                      args.ort_timeout)  # fmt: skip
        say(json.dumps(report.to_dict(), indent=2) if args.json else report.format())
        return 0 if report.within else 1


class Convert(Command):
    """Convert a float32 model to fp16 or bf16 where the schema and the provider's kernels allow, within tolerance.

    A node computes in the reduced type only where its operator's schema allows the type at the model's opset and
    the provider lists a kernel for it in the installed ONNX Runtime (its kernel listing; refused with one line where
    it cannot be known: onnxruntime-training 1.19 lists none, a provider without its hardware lists none); every
    other node keeps float32, Casts only at the boundaries. The result must pass lint and ONNX Runtime's type check
    and is compared with the float32 model (`diff`); while beyond tolerance, the converted nodes where the first
    departure arises keep float32 and the conversion is tried again (at most 16 rounds). Prints what it converted,
    what it kept and why. Exit 0 written, 1 no conversion within tolerance (nothing written), 2 bad input or output,
    a provider whose kernels cannot be known here.
    """

    name = "convert"
    explained_by = "where223.graph.convert._search:convert"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("input", help="the float32 .onnx file")
        parser.add_argument("output", help="where to write the converted model (not the input)")
        parser.add_argument("--to", required=True, choices=("fp16", "bf16"), help="the reduced type")
        parser.add_argument("--keep-io-types", action="store_true",
                            help="keep float32 graph inputs and outputs (default: they take the reduced type)")
        _comparison_options(parser)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.cli._base import progress
        from where223.graph.convert import convert_file
        from where223.graph.diff import parse_dims

        output = writable_file(args.output)
        if same_file(output, Path(args.input)):
            raise UsageError(f"{args.output} is the input: convert into another file")
        record = convert_file(args.input, output, args.to, args.keep_io_types, args.provider, args.feeds, args.seed,
                              parse_dims(args.dim), args.ort_timeout, say=progress)  # fmt: skip
        say(json.dumps(record.to_dict(), indent=2) if args.json else record.format())
        return 0
