"""`where223 lint` beside its peers, on one corpus, with ONNX Runtime as the judge.

The judge: ONNX Runtime's session creation (CPU provider, graph optimisations off: `ort.judge(..., probe=True)`),
its verdict and the node its message names parsed by `where223.graph.ort`, the one parser of its messages. A
model it refuses for its types (`type_error`, `where_type_error`) is a refusal; one it creates a session for is
accepted; `missing_kernel` (types accepted, no kernel here) is scored apart; other refusals and time-outs are
counted, not scored. A model the graph guards refuse is left out before any tool sees it (models are untrusted).

The tools, each on every judged model, timed around the call alone:
- `lint`: `where223.graph.lint.lint_model(path)`; it flags a model with a type violation;
- `lint --kernels`: the same with `provider="CPUExecutionProvider"`, whose missing-kernel findings are its kernel
  flags (the kernel table cached under .cache/peers/kernels);
- `onnx.checker`: `onnx.checker.check_model(path, full_check=True)`; it flags what it raises;
- `onnx-doctor`: its Python API as its CLI's `check --ort` runs it (the spec, simplification and ONNX Runtime
  compatibility providers, the rules enabled by default); it flags a model with an error-severity message (what
  makes the CLI exit 1); ORT001, ORT002 and ORT004 (an operator, opset or type without a kernel in the provider)
  are its kernel flags;
- `polygraphy`: `polygraphy check lint MODEL --providers cpu -o REPORT`, one process per model (its time includes
  that process's start, recorded apart as `startup_s`); it flags a model with an error or exception entry, an
  entry whose message ONNX Runtime's parser reads as a missing kernel being a kernel flag.
The in-process tools and the judge run in worker processes of this script (one per tool, restarted after a
time-out or a crash), so that no model can hold or kill the benchmark; each call has `--timeout` seconds.

Scores per tool: refusals found (flagged among the refusals), among those whether a node it names is the one
ONNX Runtime names, false alarms (flagged among the accepted), kernels found (kernel-flagged among the
`missing_kernel` models) and kernel false alarms (kernel-flagged among the accepted), errors (the tool raised,
died or timed out: no answer), median seconds per model. Then what a peer flags that lint does not, and the reverse.

The corpus, rebuilt on every run:
(a) conformance: onnx's conformance models in the order of a hash of their names, each with every mutant of it
    (`where223.graph.mutants`, the differential test's generator: one float type changed), until `--mutants`
    mutants; each original beside its mutants (ONNX Runtime accepts most: the material for false alarms), written
    to .cache/peers/conformance/<onnx version>/;
(b) exports: the ONNX files the sweeps left in .cache/sweep/work/<space>/**/ (`model.onnx`, the plain export;
    `fixed.onnx`, exported with the fixes; `repaired.onnx`, `where223 repair`'s), at most `--per-source` of each
    space and kind (in the order of a hash of their folder), none over `--max-mib` with its weights; read in
    place, never written to. The record says how many of each were found and used, and how to make them when
    there are none;
(c) converted: the float32 models of the converters benchmark converted by each converter
    (.cache/converters/converted/<model>/<converter>.onnx, which `make converters` leaves; its repaired copies
    left out), none over `--max-mib`, read in place; with `--no-converted`, none.

    .venv-peers/bin/python benchmarks/peers.py [--mutants 60] [--per-source 4] [--max-mib 64] [--timeout 60]
    make peers   # builds .venv-peers from requirements-peers.lock, then runs this (PEERS_ARGS: the options)
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import queue
import re
import statistics
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from where223.pipeline import environment, paths, publish

RECORD: Path = paths.OUTPUTS / "benchmarks" / "peers.json"
CACHE: Path = paths.CACHE / "peers"
SWEEP_WORK: Path = paths.CACHE / "sweep" / "work"
CONVERTED: Path = paths.CACHE / "converters" / "converted"  # benchmarks/converters.py's conversions
EXPORT_KINDS = ("model", "fixed", "repaired")  # the sweeps' file names, without .onnx
PARTS = ("conformance", "exports", "converted")
PROVIDER = "CPUExecutionProvider"
TOOLS = ("lint", "lint --kernels", "onnx.checker", "onnx-doctor", "polygraphy")
WORKER_TOOLS = ("judge", "lint", "lint --kernels", "onnx.checker", "onnx-doctor")
TYPE_REFUSALS = ("type_error", "where_type_error")
KERNEL_RULES = ("ORT001", "ORT002", "ORT004")  # onnx-doctor: no kernel for the operator, its opset, its types
PEER_PACKAGES = ("where223", "onnx", "onnxruntime", "onnx-ir", "onnx-doctor", "polygraphy", "onnx-graphsurgeon",
                 "protobuf", "numpy")
HINT = ("no sweep exports under .cache/sweep/work: run `where223 sweep --space spaces/remedies-today.yaml` (and "
        "spaces/remedies-2022.yaml), whose cells leave model.onnx, fixed.onnx and repaired.onnx there")
SUMMARY_CHARS = 300


# --- the corpus -----------------------------------------------------------------------------------------------


@dataclass
class CorpusModel:
    """One model of the corpus: where it came from and where its file is."""

    id: str  # unique: `conformance:<conformance model>:<kind>` or `export:<space>/<folder>/<kind>`
    part: str  # "conformance" or "exports"
    path: Path
    source: str  # the conformance model, or the sweep space
    kind: str  # `original` or the mutant's kind, or the export's (model, fixed, repaired)
    detail: str  # what the mutant changed, or the sweep cell's key
    mib: float  # the file with its external weights


def _order(name: str) -> int:
    """A stable spread: names in the order of a hash of them, not of the alphabet."""
    return zlib.crc32(name.encode())


def build_conformance(folder: Path, limit: int, models: Sequence[Path] | None = None,
                      roots: Sequence[Path] | None = None) -> tuple[list[CorpusModel], dict[str, Any]]:
    """Up to `limit` mutants of conformance models (`models` under `roots`, by default onnx's), each with the
    model it was made from (kind `original`, its nameless nodes named as in its mutants), written to
    `folder/<conformance model>/<kind>.onnx`; returns them and a description of what was used."""
    import onnx

    from where223.graph.mutants import conformance_models, model_name, mutants_of, name_every_node

    if models is None or roots is None:
        roots, models = conformance_models()
    named = sorted(((model_name(path, list(roots)), path) for path in models), key=lambda item: _order(item[0]))
    corpus: list[CorpusModel] = []

    def add(name: str, kind: str, where: str, model: onnx.ModelProto) -> None:
        target = folder / name.replace("/", "__") / f"{kind}.onnx"
        data = model.SerializeToString()
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
        corpus.append(CorpusModel(f"conformance:{name}:{kind}", "conformance", target, name, kind, where,
                                  round(len(data) / 2**20, 3)))

    mutants = 0
    for name, path in named:
        if mutants >= limit:
            break
        made = mutants_of(path, name)[: limit - mutants]
        if not made:
            continue
        original = onnx.load(str(path))
        name_every_node(original)
        add(name, "original", "as onnx ships or generates it", original)
        for mutant in made:
            add(name, mutant.kind, mutant.where, mutant.model)
        mutants += len(made)
    description = {
        "conformance_models": len(named),
        "models_mutated": sum(1 for m in corpus if m.kind == "original"),
        "mutants": mutants,
        "limit": limit,
        "by_kind": dict(sorted(Counter(m.kind for m in corpus).items())),
        "selection": "conformance models in the order of crc32 of their names, each with every mutant "
                     "(where223.graph.mutants, the differential test's generator) until the limit",
        "folder": os.path.relpath(folder, paths.ROOT) if folder.is_relative_to(paths.ROOT) else str(folder),
    }
    return corpus, description


def external_files(path: Path) -> list[Path]:
    """The external weight files a model names that exist beside it (its headers read, no weights)."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    model = onnx.load(str(path), load_external_data=False)
    names = {entry.value for tensor in _get_all_tensors(model) for entry in tensor.external_data
             if entry.key == "location"}
    return [path.parent / name for name in sorted(names) if (path.parent / name).is_file()]


def model_mib(path: Path, max_mib: float) -> float:
    """The file's size with its external weights, in MiB (the file alone when that is over `max_mib` already)."""
    size = path.stat().st_size
    if size / 2**20 <= max_mib:
        try:
            size += sum(data.stat().st_size for data in external_files(path))
        except Exception:  # an unreadable model: its file alone, for the judge to refuse
            pass
    return round(size / 2**20, 3)


def cell_key(folder: Path) -> str:
    """The sweep cell's key from its record beside the model (recipe, exporter, stack), or ''."""
    try:
        key = json.loads((folder / "record.json").read_text()).get("key", {})
        return ", ".join(f"{k}={key[k]}" for k in ("model", "recipe", "exporter", "stack", "opset") if k in key)
    except (OSError, ValueError, AttributeError):
        return ""


def find_exports(work: Path, per_source: int, max_mib: float) -> tuple[list[CorpusModel], dict[str, Any]]:
    """The sweeps' ONNX files under `work/<space>/**/`, at most `per_source` per space and kind, none over
    `max_mib` (weights included); returns them and how many of each kind were found, used and left out."""
    found: dict[str, Counter[str]] = {}
    candidates: dict[tuple[str, str], list[Path]] = {}
    if work.is_dir():
        for kind in EXPORT_KINDS:
            for path in work.rglob(f"{kind}.onnx"):
                if not path.is_file() or path.is_symlink():
                    continue
                space = path.relative_to(work).parts[0]
                found.setdefault(space, Counter())[kind] += 1
                candidates.setdefault((space, kind), []).append(path)
    corpus: list[CorpusModel] = []
    over: Counter[str] = Counter()
    for (space, kind), paths_ in sorted(candidates.items()):
        taken = 0
        for path in sorted(paths_, key=lambda p: _order(p.parent.relative_to(work).as_posix())):
            if taken >= per_source:
                break
            mib = model_mib(path, max_mib)
            if mib > max_mib:
                over[f"{space}/{kind}"] += 1
                continue
            folder = path.parent.relative_to(work).as_posix()
            corpus.append(CorpusModel(f"export:{folder}/{kind}", "exports", path, space, kind, cell_key(path.parent),
                                      mib))
            taken += 1
    used: dict[str, Counter[str]] = {}
    for model in corpus:
        used.setdefault(model.source, Counter())[model.kind] += 1
    description = {
        "work": os.path.relpath(work, paths.ROOT) if work.is_relative_to(paths.ROOT) else str(work),
        "found": {space: dict(sorted(kinds.items())) for space, kinds in sorted(found.items())},
        "used": {space: dict(sorted(kinds.items())) for space, kinds in sorted(used.items())},
        "left_out_over_max_mib": dict(sorted(over.items())),
        "per_source": per_source,
        "max_mib": max_mib,
        "selection": "per space and kind, folders in the order of crc32 of their path under work/, the first "
                     "per_source within max_mib (the file with its external weights)",
        "hint": None if corpus else HINT,
    }
    return corpus, description


def find_converted(folder: Path, max_mib: float) -> tuple[list[CorpusModel], dict[str, Any]]:
    """The converters benchmark's conversions, `folder/<model>/<converter>.onnx` (its `.repaired.onnx` copies left
    out), none over `max_mib`: (models, how many were found and used)."""
    corpus, over, found = [], 0, 0
    if folder.is_dir():
        for path in sorted(folder.glob("*/*.onnx")):
            if not path.is_file() or path.is_symlink() or path.name.endswith(".repaired.onnx"):
                continue
            found += 1
            mib = model_mib(path, max_mib)
            if mib > max_mib:
                over += 1
                continue
            model, converter = path.parent.name, path.stem
            corpus.append(CorpusModel(f"converted:{model}/{converter}", "converted", path, model, converter,
                                      "converted from float32 by benchmarks/converters.py", mib))
    description = {
        "folder": os.path.relpath(folder, paths.ROOT) if folder.is_relative_to(paths.ROOT) else str(folder),
        "found": found, "used": len(corpus), "left_out_over_max_mib": over, "max_mib": max_mib,
        "hint": None if corpus else "no conversions under .cache/converters/converted: run `make converters` "
                                    "(benchmarks/converters.py), which leaves them there",
    }  # fmt: skip
    return corpus, description


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- the tools, inside a worker -------------------------------------------------------------------------------


def outcome(kinds: Iterable[str] = (), nodes: Iterable[str] = (), kernel_nodes: Iterable[str] = (),
            summary: str | None = None, error: str | None = None, **extra: Any) -> dict[str, Any]:
    """A tool's answer on one model: the kinds of flag it raised ("model": the model is wrong; "kernel": a
    kernel is missing), the nodes it names (for kernels apart), its first finding, or the error it gave
    instead of an answer."""
    return {"kinds": sorted(set(kinds)), "nodes": list(dict.fromkeys(nodes)),
            "kernel_nodes": list(dict.fromkeys(kernel_nodes)),
            "summary": None if summary is None else summary[:SUMMARY_CHARS], "error": error, **extra}


def message_nodes(message: str) -> list[str]:
    """The nodes an onnx or ONNX Runtime message names: shape inference's `(op_type:X, node name: Y)` and the
    runtime's `in node (Y)` / `with name 'Y'` (the patterns of `where223.graph.ort`)."""
    from where223.graph.ort import INFERENCE, named_nodes

    return [match["node"] for match in INFERENCE.finditer(message)] + named_nodes(message)


def run_judge(path: Path) -> dict[str, Any]:
    from where223.errors import UsageError
    from where223.graph.ort import first_message_line, judge, message_node

    try:
        judgement = judge(path, probe=True)
    except UsageError as error:  # the guards refuse the model: no tool sees it
        return {"error": f"refused by the graph guards: {error}"[:SUMMARY_CHARS]}
    message = judgement.message
    return {
        "verdict": str(judgement.verdict),
        "node": message_node(message),
        "message": None if message is None else first_message_line(message)[:SUMMARY_CHARS],
        "error": None,
    }


def run_lint(path: Path, kernel_cache: Path | None) -> dict[str, Any]:
    from where223.graph.lint import LintOutcome, lint_model
    from where223.graph.loading import UnreadableModelError

    try:
        if kernel_cache is None:
            report = lint_model(path)
        else:
            report = lint_model(path, provider=PROVIDER, kernel_cache=kernel_cache)
    except UnreadableModelError as error:  # lint's one-line refusal (exit 2): it says the model is wrong
        return outcome(["model"], summary=f"unreadable: {error}", unreadable=True)
    missing = report.kernels.missing if report.kernels is not None else []
    kinds = (["model"] if report.violations else []) + (["kernel"] if missing else [])
    first = report.violations[0].message() if report.violations else (missing[0].message() if missing else None)
    return outcome(kinds, [v.node for v in report.violations], [m.node for m in missing], first,
                   incomplete=report.outcome == LintOutcome.INCOMPLETE)


def run_checker(path: Path) -> dict[str, Any]:
    import onnx
    import onnx.shape_inference

    try:
        onnx.checker.check_model(str(path), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        text = str(error)
        return outcome(["model"], message_nodes(text), summary=text.strip().splitlines()[0] if text.strip() else "")
    return outcome()


def run_doctor(path: Path) -> dict[str, Any]:
    import onnx_doctor
    import onnx_ir as ir
    from onnx_doctor.diagnostics_providers.onnx_spec import OnnxSpecProvider
    from onnx_doctor.diagnostics_providers.onnxruntime_compatibility import OnnxRuntimeCompatibilityLinter
    from onnx_doctor.diagnostics_providers.simplification import SimplificationProvider

    try:
        model = ir.load(str(path))
    except Exception as error:  # its CLI reports this as an error finding (ERR002, "Failed to load model")
        return outcome(["model"], summary=f"ERR002 failed to load model: {error}")
    providers = [OnnxSpecProvider(), SimplificationProvider(), OnnxRuntimeCompatibilityLinter(PROVIDER)]
    messages = [m for m in onnx_doctor.diagnose(model, providers) if m.rule is None or m.rule.default_enabled]
    errors = [m for m in messages if m.severity == "error"]
    failures = [m for m in messages if m.severity == "failure"]  # its own bug reports ("Bug: Type ...")
    if failures and not errors:
        return outcome(error=f"{failures[0].error_code}: {failures[0].message}"[:SUMMARY_CHARS])

    def names(found: list[Any]) -> list[str]:
        return [m.target.name for m in found if isinstance(m.target, ir.Node) and m.target.name]

    kernel = [m for m in errors if m.error_code in KERNEL_RULES]
    model_errors = [m for m in errors if m.error_code not in KERNEL_RULES]
    kinds = (["model"] if model_errors else []) + (["kernel"] if kernel else [])
    first = f"{errors[0].error_code}: {errors[0].message}" if errors else None
    return outcome(kinds, names(model_errors), names(kernel), first,
                   codes=dict(sorted(Counter(m.error_code for m in errors).items())))


def run_in_worker(tool: str, path: Path, kernel_cache: Path) -> dict[str, Any]:
    """One tool's answer on one model, timed around the call; an exception is the tool's error."""
    functions: dict[str, Callable[[Path], dict[str, Any]]] = {
        "judge": run_judge,
        "lint": lambda p: run_lint(p, None),
        "lint --kernels": lambda p: run_lint(p, kernel_cache),
        "onnx.checker": run_checker,
        "onnx-doctor": run_doctor,
    }
    started = time.perf_counter()
    try:
        answer = functions[tool](path)
    except Exception as error:  # the tool crashed on this model: no answer
        answer = outcome(error=f"{type(error).__name__}: {error}"[:SUMMARY_CHARS])
    answer["seconds"] = round(time.perf_counter() - started, 4)
    return answer


def worker_main(tool: str, kernel_cache: Path) -> int:
    """Answer one JSON line per model path read from stdin; whatever the tools print goes to stderr."""
    answers: IO[str] = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if tool == "onnx-doctor":
        import onnx_doctor  # noqa: F401  # imported before the first model, as the others' modules are
    else:
        from where223.graph.ort import import_onnxruntime

        import_onnxruntime()
        import where223.graph.lint  # noqa: F401
    for line in sys.stdin:
        request = json.loads(line)
        answers.write(json.dumps(run_in_worker(tool, Path(request["path"]), kernel_cache)) + "\n")
    return 0


# --- the tools, from the benchmark ----------------------------------------------------------------------------


class Worker:
    """A worker process of this script for one tool: asked one model at a time, restarted after a time-out or
    a death (which are that model's error)."""

    def __init__(self, tool: str, kernel_cache: Path, log: Path):
        self.tool, self.kernel_cache, self.log = tool, kernel_cache, log
        self.process: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()

    def _start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", self.tool,
                   "--kernel-cache", str(self.kernel_cache)]
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                            text=True, cwd=paths.ROOT)
        self.lines = queue.Queue()
        stream, lines = self.process.stdout, self.lines

        def read() -> None:
            assert stream is not None
            for line in stream:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            self.process = None

    def ask(self, path: Path, timeout: float) -> dict[str, Any]:
        if self.process is None or self.process.poll() is not None:
            self.stop()
            self._start()
        assert self.process is not None and self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps({"path": str(path)}) + "\n")
            self.process.stdin.flush()
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            return outcome(error=f"timeout: no answer within {timeout:g} s", seconds=None, timeout=True)
        except OSError:  # the worker went away before reading: as a death
            line = None
        if line is None:
            code = self.process.wait()
            self.process = None
            died = f"signal {-code}" if code < 0 else f"exit {code}"
            return outcome(error=f"the tool's process died ({died})", seconds=None)
        return json.loads(line)


def polygraphy_command(path: Path, report: Path) -> list[str]:
    """Polygraphy's lint on one model, CPU provider, its JSON report at `report`."""
    return [str(Path(sys.executable).parent / "polygraphy"), "check", "lint", str(path), "--providers", "cpu",
            "-o", str(report)]


def polygraphy_outcome(report: dict[str, Any]) -> dict[str, Any]:
    """Its report read: error and exception entries are flags, those ONNX Runtime's parser reads as a missing
    kernel (its verdict, or its `NO_KERNEL` wording) kernel flags; the nodes each names."""
    from where223.graph.ort import NO_KERNEL, OrtVerdict, judge_message

    def missing(message: str) -> bool:  # its messages drop ONNX Runtime's "NOT_IMPLEMENTED :" prefix
        return judge_message(message).verdict == OrtVerdict.MISSING_KERNEL or NO_KERNEL.search(message) is not None

    entries = [e for e in report.get("lint_entries", []) if e.get("level") in ("error", "exception")]
    kernel = [e for e in entries if missing(str(e.get("message", "")))]
    others = [e for e in entries if e not in kernel]
    kinds = (["model"] if others else []) + (["kernel"] if kernel else [])
    first = str(entries[0].get("message", "")) if entries else None
    return outcome(kinds, [n for e in others for n in e.get("nodes", [])],
                   [n for e in kernel for n in e.get("nodes", [])], first)


def run_polygraphy(path: Path, timeout: float, scratch: Path) -> dict[str, Any]:
    """Polygraphy's `check lint` in its own process, stopped after `timeout` seconds."""
    scratch.mkdir(parents=True, exist_ok=True)
    report = scratch / "report.json"
    report.unlink(missing_ok=True)
    started = time.perf_counter()
    try:
        done = subprocess.run(polygraphy_command(path, report), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, cwd=scratch)
    except subprocess.TimeoutExpired:
        return outcome(error=f"timeout: no answer within {timeout:g} s", seconds=None, timeout=True)
    seconds = round(time.perf_counter() - started, 4)
    try:
        answer = polygraphy_outcome(json.loads(report.read_text()))
    except (OSError, ValueError):
        lines = (done.stderr + done.stdout).strip().splitlines()
        said = [ln for ln in lines if ln.startswith("[!]")] or [ln for ln in lines if ln.startswith("[E]")
                                                              and "FAILED |" not in ln] or lines[-1:]
        last = said[-1] if said else ""
        answer = outcome(error=f"no report (exit {done.returncode}): {last}"[:SUMMARY_CHARS])
    answer["seconds"] = seconds
    return answer


def polygraphy_startup(scratch: Path, timeout: float, repeat: int = 3) -> float | None:
    """Median seconds of `polygraphy check lint` on a one-node float model: its process start and imports."""
    import onnx
    from onnx import TensorProto, helper

    value = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "startup",
                              [value("x", TensorProto.FLOAT, [1])], [value("y", TensorProto.FLOAT, [1])])
    path = scratch / "startup.onnx"
    scratch.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    runs = [run_polygraphy(path, timeout, scratch / "startup")["seconds"] for _ in range(repeat)]
    measured = [s for s in runs if s is not None]
    return round(statistics.median(measured), 3) if measured else None


def tool_availability() -> dict[str, str | None]:
    """Per tool, None when it can run here, else why not."""
    missing: dict[str, str | None] = dict.fromkeys(TOOLS)
    if importlib.util.find_spec("onnx_doctor") is None:
        missing["onnx-doctor"] = "onnx-doctor is not installed in this environment (make peers installs it)"
    if not (Path(sys.executable).parent / "polygraphy").is_file():
        missing["polygraphy"] = "polygraphy is not installed in this environment (make peers installs it)"
    return missing


def versions() -> dict[str, str | None]:
    return environment.package_versions(PEER_PACKAGES)


# --- scoring --------------------------------------------------------------------------------------------------


def same_node(ort: str | None, named: Sequence[str]) -> bool:
    """Whether a tool names ONNX Runtime's node (onnx's inliner suffixes `__N` to a model-local function's nodes,
    which lint inlines before it checks them)."""
    if not ort:
        return False
    return any(name == ort or re.fullmatch(re.escape(ort) + r"__\d+", name) for name in named)


def score(rows: Sequence[dict[str, Any]], tool: str) -> dict[str, Any]:
    """A tool's numbers over judged rows (`verdict`, `ort_node`, `tools[tool]` as `outcome` gives them)."""
    refusals = [r for r in rows if r["verdict"] in TYPE_REFUSALS]
    accepted = [r for r in rows if r["verdict"] == "accepted"]
    kernels = [r for r in rows if r["verdict"] == "missing_kernel"]
    others = [r for r in rows if r["verdict"] not in (*TYPE_REFUSALS, "accepted", "missing_kernel")]

    def answer(row: dict[str, Any]) -> dict[str, Any]:
        return row["tools"][tool]

    def flagged(row: dict[str, Any]) -> bool:
        return bool(answer(row)["kinds"])

    def kernel_flagged(row: dict[str, Any]) -> bool:
        return "kernel" in answer(row)["kinds"]

    found = [r for r in refusals if flagged(r)]
    kernels_found = [r for r in kernels if kernel_flagged(r)]
    errors = [r for r in rows if answer(r)["error"]]
    times = [answer(r)["seconds"] for r in rows if answer(r).get("seconds") is not None]
    return {
        "judged": len(rows),
        "type_refusals": len(refusals),
        "refusals_found": len(found),
        "refusals_with_ort_node": sum(1 for r in refusals if r["ort_node"]),
        "names_ort_node": sum(1 for r in found if same_node(r["ort_node"], [*answer(r)["nodes"],
                                                                            *answer(r)["kernel_nodes"]])),
        "accepted": len(accepted),
        "false_alarms": sum(1 for r in accepted if flagged(r)),
        "missing_kernel_verdicts": len(kernels),
        "kernels_found": len(kernels_found),
        "kernels_name_ort_node": sum(1 for r in kernels_found if same_node(r["ort_node"], answer(r)["kernel_nodes"])),
        "flags_on_missing_kernel_models": sum(1 for r in kernels if flagged(r)),
        "kernel_false_alarms": sum(1 for r in accepted if kernel_flagged(r)),
        "other_refusals": len(others),
        "flags_on_other_refusals": sum(1 for r in others if flagged(r)),
        "errors": len(errors),
        "timeouts": sum(1 for r in errors if answer(r).get("timeout")),
        "error_examples": sorted({str(answer(r)["error"])[:120] for r in errors})[:5],
        "incomplete": sum(1 for r in rows if answer(r).get("incomplete")),
        "median_s": round(statistics.median(times), 4) if times else None,
        "timed": len(times),
    }


def beyond(rows: Sequence[dict[str, Any]], tool: str, reference: str, verdicts: Sequence[str],
           kind: str | None = None) -> list[dict[str, Any]]:
    """The rows with one of `verdicts` that `tool` flags (with `kind`, that kind) and `reference` does not."""

    def has(row: dict[str, Any], name: str) -> bool:
        kinds = row["tools"][name]["kinds"]
        return (kind in kinds) if kind else bool(kinds)

    return [{"id": r["id"], "ort": r["ort_message"], tool: r["tools"][tool]["summary"]}
            for r in rows if r["verdict"] in verdicts and has(r, tool) and not has(r, reference)]


def comparison(rows: Sequence[dict[str, Any]], measured: Sequence[str]) -> dict[str, Any]:
    """What each peer flags that lint does not (refusals; kernels against `lint --kernels`), and the reverse."""
    peers = [t for t in measured if not t.startswith("lint")]
    result: dict[str, Any] = {}
    for peer in peers:
        result[peer] = {
            "refusals_it_finds_lint_does_not": beyond(rows, peer, "lint", TYPE_REFUSALS),
            "refusals_lint_finds_it_does_not": len(beyond(rows, "lint", peer, TYPE_REFUSALS)),
        }
        if "lint --kernels" in measured:
            result[peer]["kernels_it_finds_lint_does_not"] = beyond(rows, peer, "lint --kernels", ["missing_kernel"],
                                                                    "kernel")
            result[peer]["kernels_lint_finds_it_does_not"] = len(
                beyond(rows, "lint --kernels", peer, ["missing_kernel"], "kernel"))
    return result


# --- the run --------------------------------------------------------------------------------------------------


@dataclass
class Options:
    mutants: int = 60
    per_source: int = 4
    max_mib: float = 64.0
    timeout: float = 60.0
    work: Path = SWEEP_WORK
    converted: Path | None = CONVERTED  # None: no converted models
    cache: Path = CACHE
    tools: list[str] = field(default_factory=lambda: list(TOOLS))


def judge_and_run(corpus: Sequence[CorpusModel], options: Options, measured: Sequence[str],
                  progress: Callable[[str], None] = print) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every model judged, then given to every measured tool in turn: (judged rows, models left out)."""
    kernel_cache = options.cache / "kernels"
    workers = {tool: Worker(tool, kernel_cache, options.cache / "logs" / f"{tool.replace(' ', '')}.log")
               for tool in ("judge", *measured) if tool in WORKER_TOOLS}
    rows, left_out = [], []
    try:
        for number, model in enumerate(corpus, 1):
            base = {"id": model.id, "part": model.part, "source": model.source, "kind": model.kind,
                    "detail": model.detail, "mib": model.mib}
            if model.part in ("exports", "converted"):
                base["sha256"] = sha256(model.path)
            verdict = workers["judge"].ask(model.path, options.timeout)
            if verdict.get("error") and not verdict.get("timeout"):
                left_out.append({**base, "reason": verdict["error"]})
                continue
            row = {**base, "verdict": verdict.get("verdict", "timeout"), "ort_node": verdict.get("node"),
                   "ort_message": verdict.get("message") or verdict.get("error"), "judge_s": verdict.get("seconds"),
                   "tools": {}}
            for tool in measured:
                if tool == "polygraphy":
                    row["tools"][tool] = run_polygraphy(model.path, options.timeout, options.cache / "polygraphy")
                else:
                    row["tools"][tool] = workers[tool].ask(model.path, options.timeout)
            rows.append(row)
            flags = ", ".join(f"{t}: {'/'.join(a['kinds']) or ('error' if a['error'] else '-')}"
                              for t, a in row["tools"].items())
            progress(f"[{number}/{len(corpus)}] {model.id}: {row['verdict']}; {flags}")
    finally:
        for worker in workers.values():
            worker.stop()
    return rows, left_out


def table(tools: dict[str, dict[str, Any]]) -> str:
    """The per-tool numbers side by side."""
    header = ("tool", "refusals found", "names ORT's node", "false alarms", "kernels found", "kernel false alarms",
              "errors", "median s")
    lines = [" | ".join(header)]
    for name, result in tools.items():
        if not result["measured"]:
            lines.append(f"{name} | not measured: {result['reason']}")
            continue
        s = result["scores"]
        median = "-" if s["median_s"] is None else f"{s['median_s']:.4f}"
        lines.append(" | ".join((
            name, f"{s['refusals_found']}/{s['type_refusals']}", f"{s['names_ort_node']}/{s['refusals_found']}",
            f"{s['false_alarms']}/{s['accepted']}", f"{s['kernels_found']}/{s['missing_kernel_verdicts']}",
            f"{s['kernel_false_alarms']}/{s['accepted']}", str(s["errors"]), median)))
    return "\n".join(lines)


def run(options: Options, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Build the corpus, judge it, run every tool on it and score them: the record (with the run it came from)."""
    import onnx

    provenance = environment.this_run()
    available = tool_availability()
    measured = [t for t in options.tools if available[t] is None]
    conformance, conformance_description = build_conformance(options.cache / "conformance" / onnx.__version__,
                                                             options.mutants)
    exports, exports_description = find_exports(options.work, options.per_source, options.max_mib)
    converted, converted_description = (find_converted(options.converted, options.max_mib)
                                        if options.converted is not None else ([], {"skipped": "--no-converted"}))
    progress(f"corpus: {conformance_description['mutants']} mutants of "
             f"{conformance_description['models_mutated']} conformance models, with them; "
             f"exports found {exports_description['found'] or 'none'}, used {len(exports)}; "
             f"conversions used {len(converted)}")
    for description in (exports_description, converted_description):
        if description.get("hint"):
            progress(description["hint"])
    started = time.perf_counter()
    rows, left_out = judge_and_run([*conformance, *exports, *converted], options, measured, progress)
    elapsed = round(time.perf_counter() - started, 1)
    startup = (polygraphy_startup(options.cache / "polygraphy", options.timeout)
               if "polygraphy" in measured else None)
    tools: dict[str, dict[str, Any]] = {}
    for tool in options.tools:
        if tool not in measured:
            tools[tool] = {"measured": False, "reason": available.get(tool) or "not asked for (--tools)"}
            continue
        tools[tool] = {
            "measured": True,
            "reason": None,
            "scores": score(rows, tool),
            "by_part": {part: score([r for r in rows if r["part"] == part], tool) for part in PARTS},
        }
    if startup is not None:
        tools["polygraphy"]["startup_s"] = startup
    verdicts = {part: dict(sorted(Counter(r["verdict"] for r in rows if r["part"] == part).items()))
                for part in PARTS}
    return {
        "run": provenance,
        "environment": {**environment.describe(), "cpu_count": os.cpu_count(), "peers": versions()},
        "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "judge": "ONNX Runtime session creation, CPUExecutionProvider, graph optimisations off "
                 "(where223.graph.ort.judge(path, probe=True)), in a worker process with the time limit",
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()
                    if k not in ("work", "cache", "converted")},
        "corpus": {
            "conformance": conformance_description,
            "exports": exports_description,
            "converted": converted_description,
            "judged": len(rows),
            "left_out": left_out,
            "verdicts": verdicts,
            "seconds": elapsed,
        },
        "tools": tools,
        "comparison": comparison(rows, measured),
        "models": rows,
        "how": {
            "lint": "where223.graph.lint.lint_model(path): flags a type violation",
            "lint --kernels": f"lint_model(path, provider={PROVIDER!r}): its missing kernels are kernel flags",
            "onnx.checker": "onnx.checker.check_model(path, full_check=True): flags what it raises",
            "onnx-doctor": "onnx_doctor.diagnose(onnx_ir.load(path), [OnnxSpecProvider, SimplificationProvider, "
                           "OnnxRuntimeCompatibilityLinter(CPU)]), rules enabled by default: flags an error "
                           f"severity message; {', '.join(KERNEL_RULES)} are kernel flags",
            "polygraphy": "polygraphy check lint PATH --providers cpu -o REPORT, a process per model: flags an "
                          "error or exception entry; a missing kernel by ONNX Runtime's words is a kernel flag",
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Options()
    parser.add_argument("--mutants", type=int, default=defaults.mutants,
                        help=f"mutants of conformance models, each with its original (default {defaults.mutants})")
    parser.add_argument("--per-source", type=int, default=defaults.per_source,
                        help=f"exports per sweep space and kind (default {defaults.per_source})")
    parser.add_argument("--max-mib", type=float, default=defaults.max_mib,
                        help=f"largest export with its weights (default {defaults.max_mib:g})")
    parser.add_argument("--timeout", type=float, default=defaults.timeout,
                        help=f"seconds per tool and model (default {defaults.timeout:g})")
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, of {', '.join(TOOLS)}")
    parser.add_argument("--no-converted", action="store_true",
                        help="leave out the converters benchmark's conversions (.cache/converters/converted)")
    parser.add_argument("--out", type=Path, default=RECORD, help="the record to write")
    parser.add_argument("--worker", choices=WORKER_TOOLS, help=argparse.SUPPRESS)
    parser.add_argument("--kernel-cache", type=Path, default=CACHE / "kernels", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, args.kernel_cache)
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    if unknown := [t for t in tools if t not in TOOLS]:
        parser.error(f"--tools: unknown {unknown}; choose among {', '.join(TOOLS)}")
    if args.mutants < 0 or args.per_source < 0 or args.timeout <= 0:
        parser.error("--mutants and --per-source take 0 or more, --timeout more than 0")
    options = Options(args.mutants, args.per_source, args.max_mib, args.timeout, tools=tools,
                      converted=None if args.no_converted else CONVERTED)
    record = run(options)
    print(table(record["tools"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    publish.write_record(args.out, record, args.out.parent.parent)
    print(f"record: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
