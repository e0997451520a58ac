"""ONNX Runtime's verdict on a model: one loader, one parser of its type-binding message, one enum.

Only the standard library at module level: the version-matrix cells classify errors with this module inside
other Python environments, and record readers name verdicts without loading onnx. onnx and onnxruntime are
imported by `load_session` (and so `judge`) only, and onnxruntime without its training part
(`import_onnxruntime`): the training build's package imports torch, 5 seconds and 550 MB before any model is
read.

ONNX Runtime's session creation has no time limit of its own and is exponential in some structures (nested
`If`s, for one). `judge(..., timeout_s=N)` creates the session in a child process that is killed after N
seconds, and says `timeout`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from where223.enums import TextEnum

if TYPE_CHECKING:
    from where223.graph.loading import ModelLike

# default time ONNX Runtime may take to create a session for a repaired model (`where223 repair --ort-timeout`)
ORT_TIMEOUT_S = 60.0


class OrtVerdict(TextEnum):
    """What ONNX Runtime made of a model, from the most specific refusal to the least (declaration order)."""

    ACCEPTED = "accepted"  # a session was created: the graph passed every check
    WHERE_TYPE_ERROR = "where_type_error"  # Where's T bound to two types: the case under study
    TYPE_ERROR = "type_error"  # any other type refusal (a binding on another op, a type not allowed)
    MISSING_KERNEL = "missing_kernel"  # types accepted; this machine's execution provider lacks a kernel
    OTHER_ERROR = "other_error"  # refused for another reason (an opset it does not support, a malformed graph)
    TIMEOUT = "timeout"  # no decision within the time limit: the session's creation was stopped

    @property
    def types_accepted(self) -> bool:
        """True when the graph passed ONNX Runtime's type check (whether or not it can run here)."""
        return self in (OrtVerdict.ACCEPTED, OrtVerdict.MISSING_KERNEL)


# A type string, parentheses balanced up to three levels deep: tensor(float), seq(tensor(float)), ...
_TYPE = r"[a-z]+\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)"
# ONNX Runtime's wording, e.g. "Type parameter (T) of Optype (Where) bound to different types
# (tensor(float) and tensor(float16) in node (Where_223)." (its parentheses do not balance).
TYPE_BINDING = re.compile(
    r"Type parameter \((?P<type_parameter>[^)]+)\) of Optype \((?P<op_type>[^)]+)\) "
    rf"bound to different types \((?P<first>{_TYPE}) and (?P<second>{_TYPE})\)? "
    r"in node \((?P<node>[^)]*)\)"
)
# Other type refusals: ONNX Runtime's graph check ("Type Error: Type 'tensor(complex128)' of input parameter
# ... is invalid", "Type Error: Type (tensor(float16)) of output arg (y) of node (Cast_1) does not match expected
# type (tensor(float))") and the ONNX schema checks its shape inference runs ("... has unsupported type: ...",
# "... has inconsistent type ...", "Element type of inputs are expected to be the same", "... must have same
# type as input ...", an If's branches typed apart: "Mismatched tensor element type: inferred=float16
# declared=float", a subgraph's declared input given another type: "Tensor element type mismatch. 10 != 1").
_TYPE_REFUSALS = (
    "Type Error:",
    "has unsupported type",
    "has inconsistent type",
    "Element type of inputs are expected to be the same",
    "must have same type as input",
    "Mismatched tensor element type",
    "Tensor element type mismatch",
)
# Types accepted, no kernel here: session creation ("NOT_IMPLEMENTED : Could not find an implementation for
# MatMul(13) node ...") or kernel lookup at partitioning ("Failed to find kernel for ...").
_MISSING_KERNELS = (("NOT_IMPLEMENTED", "Could not find an implementation"), ("Failed to find kernel",))


# The anatomy of ONNX Runtime's messages, for labels and grouping (every reader of its messages asks here):
# "[ONNXRuntimeError] : 1 : FAIL : Load model from F failed:..." prefixes,
ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : (?P<code>\w+) : ")
LOAD_PREFIX = re.compile(r"^Load model from \S+ failed:\s*")
# the innermost "(op_type:X, node name: Y): text" of its nested shape-inference errors,
INFERENCE = re.compile(r"\(op_type:(?P<op>\w+), node name: (?P<node>[^)]*)\): (?:\[\w+\] )?")
UNSUPPORTED = re.compile(r"unsupported type: tensor\((?P<type>\w+)\)")
# a type its graph check does not allow,
INVALID_TYPE = re.compile(
    r"Type 'tensor\((?P<type>\w+)\)' of (?P<io>input|output) parameter \([^)]*\) of operator \((?P<op>\w+)\)"
)
# an operator without a kernel,
NO_KERNEL = re.compile(r"Could not find an implementation for (?P<op>\w+\(\d+\)) node")
# the operator refused (type check or kernel lookup),
REFUSED_OPERATOR = re.compile(r"of operator \((?P<checked>[^)]+)\)|implementation for (?P<kernel>\w+)\(")
# and node names, quoted as `in node (NAME)` or `with name 'NAME'`; a declared output type that contradicts the
# inferred one names its node as `of node (NAME)` ("Type (T) of output arg (y) of node (NAME) does not match ...").
QUOTED_NODE = re.compile(r"in node \((?P<paren>[^()]+)\)|with name '(?P<quoted>[^']+)'")
DECLARING_NODE = re.compile(r"of node \((?P<node>[^()]+)\)")
# a node its graph resolution refused for an attribute or a shape ("Node (NAME) Op (OP) [ShapeInferenceError] ...")
NODE_OP = re.compile(r"\bNode \((?P<node>[^()]+)\) Op \((?P<op>\w+)\)")
# a declared type (a graph's output or value_info) that contradicts the type the node computes: "Type
# (tensor(float16)) of output arg (y) of node (Cast_1) does not match expected type (tensor(float))" (the node's name
# empty for a node of a function body it expanded); inside a subgraph, prefixed with its holder's "Node (If_1) Op
# (If) [TypeInferenceError] Graph attribute inferencing failed: "
DECLARED_MISMATCH = re.compile(
    rf"Type \((?P<declared>{_TYPE})\) of output arg \((?P<value>[^()]*)\) of node \((?P<node>[^()]*)\) does not "
    rf"match expected type \((?P<expected>{_TYPE})\)"
)
IN_SUBGRAPH = "Graph attribute inferencing failed"


def first_message_line(message: str) -> str:
    """The first non-empty line of an error, without onnxruntime's `[ONNXRuntimeError] : n : CODE :` and
    `Load model from F failed:` prefixes."""
    line = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
    return LOAD_PREFIX.sub("", ORT_PREFIX.sub("", line))


def named_nodes(message: str) -> list[str]:
    """Every node name a message quotes, in order."""
    return [match["paren"] or match["quoted"] for match in QUOTED_NODE.finditer(message or "")]


def refused_node(message: str | None) -> str | None:
    """The first node a refusal names, or None."""
    names = named_nodes(message or "")
    return names[0] if names else None


def message_node(message: str | None) -> str | None:
    """The node a refusal is about, in every wording ONNX Runtime uses, the most specific first: the node of a
    parsed type binding, shape inference's first (outermost) `node name: NAME`, the first `in node (NAME)` or
    `with name 'NAME'` (`refused_node`), then `of node (NAME)`; None when it names none."""
    if not message:
        return None
    binding = parse_type_binding(message)
    if binding is not None:
        return binding.node
    inferred = [match["node"] for match in INFERENCE.finditer(message)]
    if inferred:
        return inferred[0]
    declaring = DECLARING_NODE.search(message)
    return refused_node(message) or (declaring["node"] if declaring else None)


def resolution_refusal(message: str | None) -> tuple[str, str] | None:
    """(node, operator) of a refusal in the wording of graph resolution's shape and attribute checks
    (`Node (NAME) Op (OP) [ShapeInferenceError] ...`), None for any other wording."""
    match = NODE_OP.search(message or "")
    return (match["node"], match["op"]) if match else None


def refused_operator(message: str | None) -> str | None:
    """The operator a refusal without a parsed binding names (type check or missing kernel), or None."""
    match = REFUSED_OPERATOR.search(message or "")
    return (match["checked"] or match["kernel"]) if match else None


@dataclass(frozen=True)
class TypeBinding:
    """ONNX Runtime's 'bound to different types' refusal, parsed."""

    op_type: str
    type_parameter: str
    node: str
    bound_types: tuple[str, str]

    @property
    def is_where(self) -> bool:
        """The seed's failure: the Where op's T bound to two types."""
        return self.op_type == "Where" and self.type_parameter == "T"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        return {
            "op_type": self.op_type,
            "type_parameter": self.type_parameter,
            "node": self.node,
            "bound_types": list(self.bound_types),
        }


@dataclass(frozen=True)
class DeclaredMismatch:
    """ONNX Runtime's refusal of a declared type that contradicts what its node computes, parsed."""

    node: str  # empty for a node of a function body ONNX Runtime expanded
    value: str
    declared: str
    expected: str
    holder: str | None = None  # inside a subgraph: the node that holds it (an If, a Loop), as the prefix names it

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record."""
        return {"node": self.node, "value": self.value, "declared": self.declared, "expected": self.expected,
                "holder": self.holder}


def parse_declared_mismatch(message: str | None) -> DeclaredMismatch | None:
    """The first 'of output arg ... does not match expected type' refusal in a message, or None."""
    match = DECLARED_MISMATCH.search(message or "")
    if match is None:
        return None
    holder = NODE_OP.search(message[: match.start()]) if IN_SUBGRAPH in message[: match.start()] else None
    return DeclaredMismatch(match["node"], match["value"], match["declared"], match["expected"],
                            holder["node"] if holder else None)  # fmt: skip


@dataclass(frozen=True)
class OrtJudgement:
    """ONNX Runtime's verdict, its error message (None when accepted) and the binding it names, if any."""

    verdict: OrtVerdict
    message: str | None = None
    type_binding: TypeBinding | None = None


def parse_type_binding(message: str) -> TypeBinding | None:
    """The first 'bound to different types' refusal in a message, or None."""
    match = TYPE_BINDING.search(message)
    if match is None:
        return None
    return TypeBinding(
        op_type=match["op_type"],
        type_parameter=match["type_parameter"],
        node=match["node"],
        bound_types=(match["first"], match["second"]),
    )


def judge_message(message: str) -> OrtJudgement:
    """The verdict an ONNX Runtime error message states, with the type binding it names."""
    binding = parse_type_binding(message)
    if binding is not None:
        verdict = OrtVerdict.WHERE_TYPE_ERROR if binding.is_where else OrtVerdict.TYPE_ERROR
        return OrtJudgement(verdict, message, binding)
    if any(marker in message for marker in _TYPE_REFUSALS):
        return OrtJudgement(OrtVerdict.TYPE_ERROR, message)
    if any(all(marker in message for marker in markers) for markers in _MISSING_KERNELS):
        return OrtJudgement(OrtVerdict.MISSING_KERNEL, message)
    return OrtJudgement(OrtVerdict.OTHER_ERROR, message)


def classify(message: str) -> OrtVerdict:
    """The verdict an ONNX Runtime error message states (never ACCEPTED: a message means a refusal)."""
    return judge_message(message).verdict


def import_onnxruntime() -> Any:
    """onnxruntime, imported without `onnxruntime.training` when it has not been imported already.

    The training build's `onnxruntime/__init__` checks its build by importing ORTModule, and so torch; with the
    training subpackage held back for the import, that check finds no ORTModule and carries on (the inference
    API is the same). Importing `onnxruntime.training` later still works.
    """
    if "onnxruntime" in sys.modules:
        return sys.modules["onnxruntime"]
    held = "onnxruntime.training" not in sys.modules
    if held:
        sys.modules["onnxruntime.training"] = None  # type: ignore[assignment]  # an import of it raises ImportError
    try:
        import onnxruntime
    finally:
        if held and sys.modules.get("onnxruntime.training", 0) is None:
            del sys.modules["onnxruntime.training"]
    return onnxruntime


def load_session(
    model_or_path: ModelLike, providers: Sequence[str] = ("CPUExecutionProvider",), probe: bool = False
):
    """An onnxruntime.InferenceSession for a model or a path; raises ONNX Runtime's own error if it refuses.

    `probe=True` is how `where223.graph.kernels` asks about one kernel: graph optimisations off, so that every node
    meets its kernel lookup as written, and ONNX Runtime's own error log silenced (a kernel constructor refusing a
    placeholder attribute is expected there; the refusal is still raised).

    The model passes the graph guards first (`where223.graph.loading`): ONNX Runtime reads a model's external
    weights itself and follows a location or a symlink out of its folder, so those are refused here
    (UnreadableModelError), as is any external data of an in-memory model (it has no folder), and what the
    structure guards refuse (MalformedModelError).
    """
    import onnx

    from where223.graph.loading import guard_for_runtime, guard_in_memory

    if isinstance(model_or_path, onnx.ModelProto):
        guard_in_memory(model_or_path)
    else:
        guard_for_runtime(model_or_path)
    onnxruntime = import_onnxruntime()
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4 if probe else 3  # errors only (probes: fatal only): the refusal itself is raised
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:  # a share of the cores set for torch (test and sweep workers) holds here
        options.intra_op_num_threads = int(threads)
    if probe:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = model_or_path.SerializeToString() if isinstance(model_or_path, onnx.ModelProto) else str(model_or_path)
    return onnxruntime.InferenceSession(source, options, providers=list(providers))


def judge(
    model_or_path: ModelLike,
    providers: Sequence[str] = ("CPUExecutionProvider",),
    timeout_s: float | None = None,
    probe: bool = False,
) -> OrtJudgement:
    """Load a model in ONNX Runtime and say what it made of it; a refusal is returned, never raised.

    With `timeout_s`, the session is created in a child process killed after that many seconds (verdict
    TIMEOUT), so no model can hold the caller; a child that dies is OTHER_ERROR with its signal. `probe=True`: graph
    optimisations off and ONNX Runtime's log silenced (`load_session`).
    """
    if timeout_s is not None:
        return _judge_in_child(model_or_path, providers, timeout_s, probe)
    from where223.errors import UsageError

    try:
        load_session(model_or_path, providers, probe)
    except (ImportError, UsageError):  # this environment's fault, or an input the guards refuse: not a verdict
        raise
    except Exception as error:  # ONNX Runtime's exception classes share no base but Exception
        return judge_message(str(error))
    return OrtJudgement(OrtVerdict.ACCEPTED)


def _judge_in_child(
    model_or_path: ModelLike, providers: Sequence[str], timeout_s: float, probe: bool = False
) -> OrtJudgement:
    from where223.graph.loading import guard_for_runtime, guard_in_memory

    with tempfile.TemporaryDirectory(prefix="where223-judge-") as scratch:
        # the guards here, so that a refusal is one line, not the child's (which guards again: `load_session`)
        if isinstance(model_or_path, (str, os.PathLike)):
            guard_for_runtime(model_or_path)
            path = os.fspath(model_or_path)
            shown = None
        else:
            guard_in_memory(model_or_path)
            path = os.path.join(scratch, "model.onnx")
            Path(path).write_bytes(model_or_path.SerializeToString())
            shown = "<model>"
        search = [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")]  # where223 importable
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, search))}
        command = [sys.executable, "-m", "where223.graph.ort_child", path, json.dumps(list(providers))]
        command += ["--probe"] if probe else []
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, env=environment, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            return OrtJudgement(
                OrtVerdict.TIMEOUT, f"ONNX Runtime did not finish creating a session within {timeout_s:g} s: stopped"
            )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or [""])[-1]
        if done.returncode < 0:
            died = f"ONNX Runtime died with signal {-done.returncode} {last}".strip()
            return OrtJudgement(OrtVerdict.OTHER_ERROR, died)
        if "ImportError" in last or "ModuleNotFoundError" in last:
            raise ImportError(last)
        return OrtJudgement(OrtVerdict.OTHER_ERROR, f"ONNX Runtime's check exited with {done.returncode}: {last}")
    error = json.loads(lines[-1])["error"]
    if error is None:
        return OrtJudgement(OrtVerdict.ACCEPTED)
    return judge_message(error if shown is None else error.replace(path, shown))
