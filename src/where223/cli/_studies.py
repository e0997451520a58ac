"""The studies' commands: `report` (the write-up), `bench-variants` (question 4 outside its notebook), `sweep`
(questions 5-7 and those to come, on the sweep engine), `explain` (question 7's report for one model of yours)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from where223.cli import _options as options
from where223.cli._base import Command, progress, say

if TYPE_CHECKING:
    from where223.study.variants.run import StudySettings


class Report(Command):
    """Regenerate outputs/REPORT.md, the reviewer write-up, from the recorded JSON; prints its path."""

    name = "report"
    explained_by = "where223.study.report"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        options.output_root(parser, "read and write")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.study import report

        say(str(report.write_report(options.resolved_output_root(args, report.OUTPUTS))))
        return 0


class BenchVariants(Command):
    """Measure every way of writing GPT-2's scale and mask lines: tracing, numbers, syncs, step time.

    Prints the table and the recommendation; writes outputs/variants/variants-DEVICE.json.
    """

    name = "bench-variants"
    explained_by = "where223.study.variants.run"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")
        parser.add_argument("--amp-dtype", default="auto", help="auto (fp16 on CUDA, bf16 on CPU) | bf16 | fp16")
        parser.add_argument("--preset", default="gpt2", help="model of the training steps: gpt2 (124M) | tiny")
        parser.add_argument("--batch-size", type=int, default=1, help="rows per training step (default 1)")
        parser.add_argument("--seq-len", type=int, default=16, help="tokens per row (default 16)")
        parser.add_argument("--steps", type=int, default=20, help="timed steps per variant (default 20)")
        parser.add_argument("--warmup", type=int, default=2, help="untimed round-robin rounds first (default 2)")
        parser.add_argument("--profile-steps", type=int, default=3, help="profiled steps per variant, CUDA only")
        parser.add_argument("--seed", type=int, default=0, help="model initialisation and synthetic data (default 0)")
        parser.add_argument("--variants", help="comma-separated variant names (default: every measured variant)")
        parser.add_argument("--no-export", action="store_true", help="skip the ONNX export checks")
        options.output_root(parser, "write (the JSON goes to its variants/)")
        options.wait(parser)

    @staticmethod
    def study_settings(args: argparse.Namespace) -> StudySettings:
        """The study's StudySettings from the options (a ParameterError names a bad one)."""
        from where223.study.variants import run as bench

        return bench.StudySettings.resolve(
            device=args.device,
            amp_dtype=args.amp_dtype,
            preset=args.preset,
            batch_size=args.batch_size,
            seq_len=args.seq_len,
            steps=args.steps,
            warmup=args.warmup,
            profile_steps=args.profile_steps,
            seed=args.seed,
            export=not args.no_export,
            names=args.variants.split(",") if args.variants else bench.MEASURED,
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.pipeline import paths, publish
        from where223.study.variants import analysis as ranking
        from where223.study.variants import run as bench

        settings = BenchVariants.study_settings(args)
        output_root = options.resolved_output_root(args, paths.OUTPUTS, must_exist=False)
        # Staged like a notebook run: the record reaches the outputs only from a study that completed.
        with publish.staged(f"bench-variants-{settings.device}", output_root, wait=args.wait) as stage:
            record = bench.run_study(settings, stage, progress=progress)
        say(ranking.format_table(record))
        say(f"\nwritten: {output_root / Path(record['path']).relative_to(stage)}")
        return 0


class Sweep(Command):
    """Run (or resume) a sweep's cells on dask.distributed, then summarize its records.

    --space names a committed YAML space (spaces/matrix.yaml, spaces/architectures.yaml); every cell not yet
    recorded with its key runs as a Dask task, on a local cluster of single-threaded workers (one per core) or on
    the cluster at --scheduler. A status line tells done / failed / left, the rate and the time left. The outputs
    tree is locked for the sweep's whole run. Unknown names in the space or the filters, or an unreachable
    scheduler: one line, exit 2, nothing written. `make sweep` runs both spaces, then notebooks 05 and 06.
    """

    name = "sweep"
    explained_by = "where223.sweep.driver"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--space", required=True, type=Path, help="a YAML space (spaces/*.yaml)")
        parser.add_argument("--scheduler", type=options.scheduler, help="a running Dask scheduler, tcp://HOST:8786")
        parser.add_argument("--workers", type=options.non_negative_int, help="local workers (default: one per core)")
        for field in ("stack", "model", "recipe", "exporter"):
            parser.add_argument(f"--{field}", help=f"comma-separated glob patterns: only cells whose {field} matches")
        parser.add_argument("--force", action="store_true", help="rerun cells that are already recorded")
        parser.add_argument("--rerun-older-code", action="store_true",
                            help="also rerun cells whose record was made by other cell code than this checkout's "
                                 "(each record carries the commit that made it)")
        parser.add_argument(
            "--deadline", type=options.deadline,
            help="ISO time (UTC if naive) after which unfinished cells become not_run",
        )
        options.output_root(parser, "write the records to")
        parser.add_argument("--summary-only", action="store_true", help="only rewrite the study's summary")
        parser.add_argument(
            "--lock", action="store_true", help="only compile the locks of the space's environments (uv pip compile)"
        )
        parser.add_argument(
            "--build", action="store_true", help="only build the space's environments, as a first cell would"
        )
        parser.add_argument(
            "--plan", action="store_true",
            help="only rewrite a space's listed cells (its `cells: @FILE`) from its planner's plan()",
        )

    @staticmethod
    def plan(space_path: Path) -> int:
        """Write a space's listed cells from its planner (the space names `planner:` and `cells: "@FILE"`, a file
        inside spaces/ that no link leads to: `where223.sweep.space.plan_target`)."""
        import importlib

        from where223.files import write_atomic
        from where223.sweep.space import plan_target

        planner, target, stack_names = plan_target(space_path)
        lines = importlib.import_module(planner).plan(stack_names)
        header = f"# MODEL RECIPE EXPORTER OPSET, written by `where223 sweep --space {space_path} --plan` ({planner})"
        write_atomic(target, "\n".join([header, *lines]) + "\n")
        say(f"{target}: {len(lines)} cells")
        return 0

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.pipeline import paths, publish
        from where223.sweep import driver
        from where223.sweep.space import load_space

        if args.plan:
            return Sweep.plan(args.space)
        space = load_space(args.space)
        if args.build:
            from where223.sweep import stacks

            built = [(name, stacks.prepare(stack)) for name, stack in space.stacks.items()]
            for name, prepared in built:
                say(f"{name}: {prepared.python or prepared.error}")
            return 1 if any(prepared.python is None for _, prepared in built) else 0
        if args.lock:
            from where223.sweep import stacks

            environments = {stack.environment.name: stack.environment for stack in space.stacks.values()}
            common = stacks.load_stacks().common
            for name, environment in environments.items():
                if name != stacks.PROJECT:
                    say(f"{name}: {stacks.compile_lock(environment, common)}")
            return 0
        filters = {field: options.patterns(getattr(args, field)) for field in ("stack", "model", "recipe", "exporter")}
        if any(filters.values()):
            space = space.select(filters)
        outputs = options.resolved_output_root(args, paths.OUTPUTS)
        with publish.outputs_lock(outputs):
            if not args.summary_only:
                say(f"{space.name}: {len(space.cells)} cells")
                counts = driver.run(
                    space, scheduler=args.scheduler, workers=args.workers or None, force=args.force,
                    rerun_older_code=args.rerun_older_code,
                    output_root=outputs, deadline=args.deadline, say=say,
                )  # fmt: skip
                say(f"{space.name}: ran {sum(counts.values())} cells: {json.dumps(dict(sorted(counts.items())))}")
            summary = summarize(space, outputs)
        say(f"{space.name}: {summary}")
        return 0


def summarize(space: Any, outputs: Path) -> str:
    """Have the space's `summary` module rewrite the study's summary from its records under `outputs`; its counts,
    in one line."""
    if space.summary is None:
        return "no summary for this study"
    import importlib

    module = importlib.import_module(space.summary)
    written = module.summarize(outputs / space.study)
    return f"{module.SUMMARY}: {json.dumps(written['counts'], sort_keys=True)}" if written else "no records yet"


def _config_item(text: str) -> tuple[str, Any]:
    """`NAME=VALUE`, the value read as JSON (a number, true, a list) or else kept as text."""
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=VALUE (a config attribute and its value)")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


class Explain(Command):
    """Export your model in reduced precision, judge it with ONNX Runtime, lint, blame and explain it.

    The model is a factory of yours (`--factory MODULE:FUNCTION` or `FILE.py:FUNCTION`, returning an nn.Module or
    a module and its example inputs; `--inputs` another factory of a dict or tuple of tensors) or a transformers
    model type built small from its config with random weights (`--model-type electra`, `--config NAME=VALUE`).
    It runs under `--recipe` with `--exporter` in eval mode, in this interpreter or, with `--stack`, in a sweep
    stack's (`today`: torch 2.14.1, transformers 5). Writes record.json, model.onnx and explanation.md under
    `--out` and prints the explanation (`--json`: one line). Exit 0 when ONNX Runtime accepts the types, 1 when
    it refuses them, and 1 with one line on stderr saying why when the model never reached its verdict (a factory
    or config that cannot make a model, an export that failed: the record says so), 2 for a usage error (an opset
    that is not a number, a factory that returns no nn.Module) before anything is exported.
    """

    name = "explain"
    explained_by = "where223.study.classes.explain"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        from where223.sweep.recipes import RECIPES

        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--factory", help="MODULE:FUNCTION or FILE.py:FUNCTION returning your nn.Module")
        which.add_argument("--model-type", help="a transformers model type (CONFIG_MAPPING's key), built small")
        parser.add_argument("--inputs", help="MODULE:FUNCTION returning example inputs (dict or tuple of tensors)")
        parser.add_argument("--config", type=_config_item, action="append", default=[], metavar="NAME=VALUE",
                            help="a config attribute set after shrinking (repeatable; values read as JSON)")
        parser.add_argument("--recipe", default="cpu_bf16_autocast", choices=sorted(RECIPES),
                            help="precision recipe (default cpu_bf16_autocast)")
        parser.add_argument("--exporter", default="dynamo", choices=("dynamo", "torchscript"),
                            help="torch.onnx exporter (default dynamo, today's default)")
        parser.add_argument("--opset", default="auto",
                            help="an opset, or auto (default): the exporter's own, 17 for TorchScript")
        parser.add_argument("--stack", help="run in this sweep stack's interpreter (spaces/stacks.yaml, e.g. today)")
        parser.add_argument("--out", type=Path, required=True,
                            help="the folder for record.json, model.onnx and explanation.md")
        options.json_output(parser, "the outcome, refused node and operator")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        from where223.errors import Finding
        from where223.study.classes import explain

        record = explain.explain(
            args.factory, inputs=args.inputs, model_type=args.model_type, config=dict(args.config),
            recipe=args.recipe, exporter=args.exporter, opset=args.opset, out=args.out, stack=args.stack,
        )  # fmt: skip
        say(explain.summary_json(record) if args.json else explain.report(record))
        why = explain.stopped(record)
        if why is not None:  # the tool worked and found the model cannot be judged: a finding, exit 1
            raise Finding(f"{why} (record: {args.out / 'record.json'})")
        return 1 if record.get("outcome") in explain.REFUSED else 0
