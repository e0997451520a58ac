"""Mutation testing of the judges (`make mutation`): is each judge's code held by a test that fails when it changes?

Cosmic Ray (requirements.in) makes the Python mutants and applies each to its file, one at a time, in a private
copy of this checkout (a `git clone` of HEAD with the working tree's changes laid over it, under
.cache/mutation/tree-N): its operators replace an arithmetic or comparison operator, a number, True/False, and/or,
break/continue, an exception type, a decorator, add a `not` to a condition or make a loop run zero times. Its
operators are thinned to the selective set below (`wanted`: one replacement per arithmetic operator, the negation and
the two boundaries of each comparison); mutants inside annotations are not made (`from __future__ import
annotations`: never evaluated). Our own mutator adds what Cosmic Ray does not mutate: each operand of an `and` or
`or` dropped (a check removed from a condition, as blame's root test was), and data: each entry dropped from a
module-level collection literal (a tuple, list, set or dict of constants: an op's policy, a refusal's wording),
a module-level `re.compile` pattern made to match nothing, and in the autocast lists (`autocast_lists/*.json`)
every op moved to another policy, dropped, or given another line (`json_mutants`).

Each mutant runs the tests that exercise its module (TARGETS: seconds, not the suite) with `pytest -x` in .venv,
through a warm pytest (warm_pytest.py: a server per copy and environment that imports torch, onnx and pytest once
and forks a child of its own per run, so that the mutated module is imported fresh each time);
a mutant those leave alive runs the module's graph tests again in .venv-graph (onnx 1.23): a kill in either
environment counts, and one made only there is counted apart. A test run past the target's `timeout_s` is timed out
(listed apart, not counted as killed). score = killed / (made - equivalent); EQUIVALENT says why each equivalent
mutant is one. `--again` reruns only the survivors of the record (their module's file unchanged): one the tests
now kill keeps the test that kills it (`killed_by`), in the survivor list too.

Written to outputs/benchmarks/mutation.json, each module a part with its own run (a partial rerun keeps the other
modules' parts). Hours on 2 cores: outside `make test` and CI; run it in the background with nice.

    .venv/bin/python benchmarks/mutation.py [--modules graph/ort,graph/blame] [--jobs 2] [--again] [--list]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime as dt
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from where223.pipeline import environment, paths, publish  # noqa: E402

RECORD: Path = paths.OUTPUTS / "benchmarks" / "mutation.json"
WORK = ROOT / ".cache" / "mutation"
TARGET_SCORE = 0.9
# warnings as the suite has them (a test may read a warning the CLI turns into a line)
PYTEST = ("-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "-x", "-rf", "--no-header")
KILLED_IN = "MUTATION-KILLED-IN "


@dataclass(frozen=True)
class Target:
    """A module (or data file) and the tests that exercise it."""

    path: str  # relative to the root
    tests: tuple[str, ...]  # pytest arguments in .venv: files, node ids, -k
    graph_tests: tuple[str, ...] = ()  # again in .venv-graph for mutants .venv's tests leave alive
    definitions: tuple[str, ...] = ()  # only these functions' mutants (empty: the whole file)
    module_level: bool = True  # with `definitions`: the module-level code's mutants too
    timeout_s: float = 120.0


# lint's tests, its declared-type and function-body tests, and the differential test against ONNX Runtime on a
# sample of onnx's conformance models (not all 1,422: that one takes a minute in .venv-graph)
_LINT = ("tests/graph/test_lint.py", "tests/graph/test_lint_outcomes.py", "tests/graph/test_lint_internals.py",
         "tests/graph/test_declared_types.py", "tests/graph/test_types.py", "tests/graph/test_kernels.py",
         "tests/graph/test_differential.py", "-k", "not every_conformance_model")
# the guards' tests: every hostile model through lint and blame (draw's and repair's copies, the time-limit and
# signal tests left out: seconds each, and the guards they pass are lint's), the guards' walks and edges, and the
# fuzz's regressions
_GUARDS_FILES = ("tests/graph/test_guards_checks.py", "tests/graph/test_hostile.py", "tests/graph/test_guards_walk.py")
_GUARDS_K = ("-k", "not (time_limit or timeout or without_torch or never_imports_torch or draw or repair or sigterm "
             "or killed)")
_GUARDS = (*_GUARDS_FILES, "tests/fuzz/test_regressions.py", *_GUARDS_K)
_GUARDS_GRAPH = (*_GUARDS_FILES, *_GUARDS_K)  # .venv-graph has no Hypothesis for the fuzz's tests
_AUTOCAST = ("tests/test_cuda_autocast.py", "-k", "not seed_s_message")
_BLAME = ("tests/graph/test_blame.py", "tests/graph/test_hostile.py", "-k",
          "blame or root or readable_source or sys_path")

# Stable modules first; study/fix/run.py, study/remedies/run.py and study/judging.py last.
TARGETS: dict[str, Target] = {
    "graph/guards": Target("src/where223/graph/guards.py", _GUARDS, _GUARDS_GRAPH),
    "graph/blame": Target("src/where223/graph/blame.py", _BLAME, _BLAME,
                          definitions=("source_roots", "readable_source", "find"), module_level=False),
    # the parser of ONNX Runtime's messages (its patterns at module level, the functions that read them); not the
    # session's creation (load_session, judge: tests/graph/test_hostile.py, test_api.py)
    "graph/ort": Target("src/where223/graph/ort.py", ("tests/graph/test_ort.py",), ("tests/graph/test_ort.py",),
                        definitions=("types_accepted", "first_message_line", "named_nodes", "refused_node",
                                     "message_node", "resolution_refusal", "refused_operator", "is_where",
                                     "to_dict", "parse_declared_mismatch", "parse_type_binding", "judge_message",
                                     "classify")),
    # lint's check: a node's types against its schema's constraints, and the walk over the model that asks it (not
    # the report's formatting, the kernel look-up, the consequences' trace)
    "graph/lint": Target("src/where223/graph/lint.py", _LINT, _LINT,
                         definitions=("_expected_type", "_verdict", "_node_violations", "violation",
                                      "_undecided_outputs", "lint_types", "judged"), module_level=False),
    # the lists and their checks: reading them, drift from the registrations and from the binary's wrappers (not the
    # emulation's dispatch and tracer)
    "cuda_autocast": Target("src/where223/cuda_autocast.py", _AUTOCAST,
                            definitions=("policy", "by_policy", "from_dict", "release_of", "lists_for", "_short",
                                         "drift", "policies_from_binary", "_string_tables", "_cast_policies",
                                         "_wrapped_op", "_overload_by_signature", "_schema_types", "policy_drift",
                                         "_banned_problems"), module_level=False),
    "autocast_lists/2.1.2": Target("src/where223/autocast_lists/2.1.2.json", _AUTOCAST),
    "autocast_lists/2.14.1": Target("src/where223/autocast_lists/2.14.1.json", _AUTOCAST),
    "pipeline/compare": Target("src/where223/pipeline/compare.py",
                               ("tests/pipeline/test_compare_edges.py", "tests/pipeline/test_compare_roles.py",
                                "tests/study/test_compare.py",
                                "tests/pipeline/test_compare_hostile.py")),
    "pipeline/publish": Target("src/where223/pipeline/publish.py",
                               ("tests/pipeline/test_publish_edges.py", "tests/pipeline/test_publish.py",
                                "tests/pipeline/test_publish_faults.py"),
                               timeout_s=300.0),
    # the checks at their edges and the verification's wiring (its heavy stages faked), and the repaired outputs'
    # measurement on small graphs
    "study/fix/run": Target("src/where223/study/fix/run.py", ("tests/study/test_verify.py",
                                                              "tests/study/test_fix_checks.py",
                                                              "tests/study/test_numerics.py")),
    # the remedies' numerics and control: the numeric check and its rolled-input control, the reference rule, the
    # seeds, the repair stage, the pair; not the cell's assembly (`run`: held by the today's-stack cell test, which
    # the copies, without that stack, skip) nor the ORTModule route (a training run on the historic stack)
    "study/remedies/run": Target("src/where223/study/remedies/run.py",
                                 ("tests/study/test_remedies.py", "tests/study/test_remedies_checks.py",
                                  "tests/study/test_judging.py", "-k", "not notebook and not today"),
                                 definitions=("rolled", "check_numerics", "reference_verdict", "reseeded",
                                              "seeded_eager_stage", "repair_stage", "_pair")),
    "study/judging": Target("src/where223/study/judging.py", ("tests/study/test_judging.py",)),
}

# Cosmic Ray's operators kept (selective mutation): one replacement per arithmetic operator, a comparison's
# negation and its two boundaries, removing a `not`/unary minus; every other core operator whole.
_BINARY = {"Add": "Sub", "Sub": "Add", "Mul": "Div", "Div": "Mul", "FloorDiv": "Div", "Mod": "FloorDiv",
           "Pow": "Mul", "BitOr": "BitAnd", "BitAnd": "BitOr", "BitXor": "BitOr", "LShift": "RShift",
           "RShift": "LShift", "MatMul": "Mul"}
_COMPARISON = {"Eq": ("NotEq",), "NotEq": ("Eq",), "Lt": ("LtE", "GtE"), "LtE": ("Lt", "Gt"), "Gt": ("GtE", "LtE"),
               "GtE": ("Gt", "Lt"), "Is": ("IsNot",), "IsNot": ("Is",)}
_UNARY = {("Delete", "Not"), ("USub", "UAdd"), ("Delete", "USub")}
_LEFT_OUT = {"VariableReplacer", "VariableInserter"}  # random names: not reproducible

# Mutants that no test can kill, each with why: module -> mutant key (`key`) -> reason.
_NAME_GUARD = ("readable_source's early return for an empty name or one with a NUL byte, weakened: such a name "
               "goes on to the candidates, where resolve() raises ValueError on the NUL (caught: None) and an empty "
               "name resolves to a root folder itself, no .py file (None): the return only saves the look-up")
_ONE_SCOPE = ("lint_types' `len(types.scopes) > 1` widened to one scope: _holder_violations compares subgraph holders "
              "with their subgraphs, and a model of one scope has neither")
_NO_OPSET = ("the report's opset from declared_opsets alone: they are empty only for a model importing no opset, "
             "whose usable opsets are empty too (the report says None either way)")
_OVERWRITTEN = ("Comparison.artifacts_differing's default: compare_files, which makes every Comparison a tree is "
                "judged by, sets it before returning")
_SECOND_LAYER = ("O_NONBLOCK and O_CLOEXEC dropped from an open: O_NONBLOCK only keeps the open from blocking on a "
                 "FIFO swapped in between the listing and the open (a test of that race would hang the mutant, not "
                 "fail it), and O_CLOEXEC matters only to a child started while the descriptor is open, which "
                 "folder_files never starts; O_NOFOLLOW's race, a link swapped in, is a test)")
EQUIVALENT: dict[str, dict[str, str]] = {
    "graph/blame": {
        "ReplaceOrWithAnd @90 #1": _NAME_GUARD,
        "DropCondition @90 #2": _NAME_GUARD,
        "DropCondition @90 #3": _NAME_GUARD,
        "DropCondition @72 #0": "`if os.path.isabs(entry)` alone: os.path.isabs('') is False, so the empty entry "
        "is left out without the `entry and` before it",
    },
    "graph/guards": {
        **dict.fromkeys(("NumberReplacer @344 #66", "NumberReplacer @344 #67", "NumberReplacer @345 #68",
                         "NumberReplacer @345 #69"),
                        "newest_opsets' starting value for max() moved by one: every schema's since_version and "
                        "onnx_opset_version() are at least 1, so max() gives the same"),
        "NumberReplacer @98 #18": "a finished function marked 3 for 2: the search reads only `== 1` (on the path) "
        "and `in state` (seen), which 3 answers as 2 does",
        "RemoveDecorator @338 #0": "newest_opsets without its cache: the same answer computed on every call",
        **dict.fromkeys(("ReplaceComparisonOperator_Is_IsNot @441 #6", "DropCondition @441 #17"),
                        "_tensors walking every node of a graph it has a read of, instead of the nodes the read found "
                        "holding a tensor or graph attribute: a read is looked up by id(graph), so `read.graph is "
                        "graph` always holds, and the nodes left out hold no tensor: the same tensors, more slowly"),
        "ReplaceTrueWithFalse @476 #0": "external_tensors asking _tensors for every initializer rather than only a "
        "graph's whose initializers include an external one: it keeps only data_location EXTERNAL tensors either "
        "way (the flag saves the walk over graphs that have none)",
        "NumberReplacer @321 #65": "missing[-1] for missing[0]: _READ_UNCHECKED lists one required attribute per op, "
        "so `missing` has one entry",
        **dict.fromkeys(("ReplaceComparisonOperator_LtE_Lt @229 #0", "ReplaceComparisonOperator_GtE_Gt @229 #0",
                         "NumberReplacer @229 #44"),
                        "check_opsets' shortcut (every version within bounds, tested at once) made narrower: a "
                        "version at its edge (0, 2**31 - 1) then goes to the loop after it, which accepts it the same; "
                        "what the shortcut wrongly let through would be killed (-1 and 2**31 are refused both ways)"),
    },
    "graph/lint": {
        **dict.fromkeys(
            ("ReplaceComparisonOperator_LtE_Lt @462 #0", "ReplaceComparisonOperator_LtE_Gt @462 #0",
             "ReplaceOrWithAnd @462 #4", "NumberReplacer @462 #35", "DropCondition @462 #8", "DropCondition @462 #9"),
            "_node_violations' `continue` for a parameter bound to one admitted type (or a heterogeneous one, each "
            "type admitted) only skips building its Bindings: the two checks after it find nothing in such a "
            "parameter (no second type, nothing outside the admitted set), so a condition that skips it less often "
            "reports the same"),
        "ReplaceBinaryOperator_Mul_Div @786 #0": "lint_types' `*` made `/`: model_path becomes positional-only "
        "instead of _depth and _budget keyword-only; every caller passes model_path by position and _depth and "
        "_budget by keyword, which both signatures accept",
        "ReplaceComparisonOperator_Gt_GtE @861 #4": _ONE_SCOPE,
        "NumberReplacer @861 #131": _ONE_SCOPE,
        "ReplaceTrueWithFalse @412 #3": "_verdict's zip(..., strict=False): its three sequences always have two "
        "entries (inputs, outputs), so strict never raises",
        "NumberReplacer @825 #115": "maps[-1] for maps[0] where len(maps) == 1: the same map",
        "NumberReplacer @825 #117": "`len(maps) == 0` never holds, so every scope uses scope.type_of, which reads the "
        "same maps in the same order (the one-map case is a shortcut)",
        "DropCondition @829 #23": "`known(key) or judged(key)` made `judged(key)`: the verdict cache skipped, each "
        "node judged again with the same answer",
        "DropCondition @792 #28": _NO_OPSET,
        "DropCondition @793 #26": _NO_OPSET,
        "DropCondition @467 #12": "contradicting's `b.io == \"output\"` dropped: `bound` is the set of the inputs' "
        "types, so no input's binding is outside it",
        "DropCondition @507 #15": "`bound` taking heterogeneous inputs too: no operator of onnx's or ONNX Runtime's "
        "schemas has a parameter heterogeneous on an input and homogeneous on an output, and a heterogeneous "
        "output is undecided by the `or not formal.homogeneous` after it either way",
        "DropCondition @442 #6": "homogeneous[param] taking the last formal's flag alone: the one parameter of "
        "onnx's and ONNX Runtime's schemas with formals of both kinds is SequenceMap's S, whose heterogeneous "
        "formal (its output) comes last, so the last flag is the conjunction's",
        "DropCondition @468 #11": "the declared-type finding's `all(... in scope.declared ...)` dropped: a value not "
        "declared gets its type from onnx's inference of its producer, which gives a homogeneous parameter's "
        "output the one type its inputs bind, so such an output never contradicts them",
    },
    "pipeline/compare": {
        "NumberReplacer @96 #18": _OVERWRITTEN,
        "NumberReplacer @96 #19": _OVERWRITTEN,
        "NumberReplacer @97 #20": "Comparison.artifacts_compared's default: compare_files sets it before returning",
        "NumberReplacer @97 #21": "Comparison.artifacts_compared's default: compare_files sets it before returning",
        "ReplaceTrueWithFalse @76 #0": "Difference not frozen: nothing assigns to its fields or hashes it",
        "ReplaceFalseWithTrue @186 #1": "a link to a file listed as a file: opening it with O_NOFOLLOW fails (ELOOP) "
        "and it is left out, as the listing leaves it out (the two layers each refuse a link)",
        "NumberReplacer @208 #32": "_read taking FILE_BYTES_LIMIT + 2 bytes where it takes + 1: any read past the "
        "limit (a file grown since its size was checked) is refused by the budget the same",
        "ReplaceContinueWithBreak @288 #3": "revision_files' `if not line: continue` as break: git ls-tree -z ends "
        "every entry with a NUL, so the one empty item is the last",
        **dict.fromkeys(("NumberReplacer @250 #44", "NumberReplacer @250 #45", "ReplaceBinaryOperator_Add_Sub @250 #5"),
                        "folder_files' placeholder entry for a folder just opened (its depth + 2, + 0 or - 1): the "
                        "next line replaces it with its depth + 1 before anything reads its depth; the placeholder "
                        "is there only so that the finally block closes the folder if listing it fails"),
        "DropCondition @401 #40": "_tolerance's `isinstance(holder, list)` dropped before an int key: a key is an "
        "int only as a list index (`_leaves` gives a mapping's keys as str), so the holder is a list whenever it is "
        "asked",
        "DropCondition @401 #42": "_tolerance's `key < len(holder)` dropped: the keys are the path of a leaf "
        "`_leaves` found in this very record, so every index is below its list's length",
        "ReplaceComparisonOperator_Lt_LtE @401 #0": "_tolerance's `key < len(holder)` as <=: the keys are the path "
        "of a leaf `_leaves` found in this very record (lists of unequal length are one difference, not walked), so "
        "every index is below its list's length and the bound, defensive, never decides",
        "ReplaceTrueWithFalse @355 #3": "_leaves' zip(..., strict=False) over two lists it has just found of one "
        "length: strict never raises",
        "ReplaceBinaryOperator_BitOr_BitAnd @177 #1": "O_DIRECTORY dropped from the folder open (O_RDONLY & "
        "O_DIRECTORY is 0): a file swapped in for a listed folder then opens, and listing it fails "
        "(NotADirectoryError), so it is left out as the refused open leaves it out; only that race shows it",
        "ReplaceBinaryOperator_BitOr_BitAnd @177 #4": _SECOND_LAYER,
        "ReplaceBinaryOperator_BitOr_BitAnd @178 #7": _SECOND_LAYER,
        "ReplaceFalseWithTrue @185 #0": "a link to a folder listed as a folder: opening it with O_NOFOLLOW fails "
        "and it is left out, as the listing leaves it out (the two layers each refuse a link)",
        **dict.fromkeys(("ReplaceTrueWithFalse @365 #4", "ReplaceTrueWithFalse @367 #5",
                         "ReplaceTrueWithFalse @367 #6"),
                        "_same_text answering \"not the same\" where it could say the same (for two equal leaves, or "
                        "by one side's JSON text unsorted): _leaves then walks the subtree leaf by leaf, and the walk, "
                        "which decides, finds no difference in it; the shortcut only saves that walk"),
        **dict.fromkeys(("ReplaceFalseWithTrue @369 #2", "ExceptionReplacer @368 #5", "ExceptionReplacer @368 #6"),
                        "_same_text's except clause, which no record reaches: its subtrees are parsed JSON that "
                        "Python's == has just found equal, so they hold no cycle and no value the encoder refuses "
                        "(NaN and the infinities it writes), and the encoder goes one recursion level deeper per "
                        "nesting level, as == did without reaching the limit"),
    },
    "cuda_autocast": {
        "NumberReplacer @142 #6": "release_of's split(\"+\", 2)[0] for split(\"+\", 1)[0]: the part before the first "
        "+ either way",
        **dict.fromkeys(("NumberReplacer @313 #77", "NumberReplacer @316 #81", "NumberReplacer @320 #85",
                         "NumberReplacer @344 #101"),
                        "[-1] for [0] on a list just checked to hold one entry (`len(...) != 1` raises before it)"),
        **dict.fromkeys(("NumberReplacer @382 #106", "NumberReplacer @382 #107"),
                        "the line number of policy_drift's default ('not registered', 0) moved: only the default's "
                        "file name is read ([0]), the number never"),
        **dict.fromkeys(("NumberReplacer @400 #111", "NumberReplacer @400 #113"),
                        "the banned check's CPU tensors of another size: binary_cross_entropy's AutocastCUDA kernel "
                        "refuses the call as unsafe to autocast before any shape is read"),
    },
    "autocast_lists/2.1.2": {
        "ShiftLine @129 #335": "the banned op's cited line (binary_cross_entropy, 378 to 379), alone in its policy and "
        "registered by a statement of two lines: no code reads an op's cited line (`at` is provenance; its policy is "
        "checked by running its CUDA autocast kernel), and torch 2.1's source, where the line could be checked, is in "
        "no wheel",
    },
    "pipeline/publish": {
        "NumberReplacer @158 #8": "the lock file cut to 1 byte rather than 0 before the holder's pid is written over "
        "it from offset 0: the pid's line is at least 2 bytes, so the byte left is overwritten",
        **dict.fromkeys(("ReplaceUnaryOperator_USub_UAdd @266 #0", "ReplaceUnaryOperator_Delete_USub @266 #0",
                         "NumberReplacer @266 #28", "NumberReplacer @266 #29"),
                        "renameat2's directory descriptors as another number than AT_FDCWD (-100): both paths are "
                        "absolute (publish resolves the tree), and an absolute path ignores its directory descriptor"),
        **dict.fromkeys(("ReplaceFalseWithTrue @262 #1", "ReplaceFalseWithTrue @333 #2"),
                        "os.link(..., follow_symlinks=True): on Linux CPython makes it link(2), which does not "
                        "dereference a symlink either, so a link to the link is made the same (checked here: both "
                        "spellings make a symlink)"),
        "DropCondition @244 #4": "_remove_with_empty_parents walking up to the tree's root: the tree being built "
        "always holds the run's manifest, so the root is never empty and the walk stops there the same",
        "DropCondition @259 #7": "_link_tree keeping links to folders among the folders walked: os.walk does not "
        "descend into a link to a folder (followlinks is False), and the link is linked as an entry either way",
        "ReplaceTrueWithFalse @350 #14": "keep_failed's failed/ made without its parents: it runs only under staged, "
        "whose lock has made the tree (failed/'s parent) first",
    },
    "study/fix/run": {
        **dict.fromkeys(("ReplaceBinaryOperator_Mul_Div @405 #1", "ReplaceBinaryOperator_Mul_Div @872 #3",
                         "ReplaceBinaryOperator_Mul_Div @940 #4"),
                        "a signature's `*` made `/`: the parameters before it become positional-only, those after it "
                        "keyword-or-positional; every caller (the module's own, notebook 03's, the tests') passes the "
                        "first by position and the rest by keyword, which both signatures accept"),
        **dict.fromkeys(("ReplaceTrueWithFalse @662 #4", "ReplaceTrueWithFalse @692 #5"),
                        "RepairPair / RepairedOutputs not frozen: nothing assigns to their fields or hashes them "
                        "(dataclasses.replace makes the copies)"),
        "ReplaceTrueWithFalse @282 #1": "eager_checks' zip(cases, references, strict=True): `references` is built "
        "from `cases`, one per case, so strict never raises",
        "ReplaceFalseWithTrue @255 #1": "bitwise_check's zip(..., strict=True) inside `len(reference) == "
        "len(patched) and all(...)`: reached only when the lengths are equal",
        "DropCondition @255 #20": "bitwise_check without `a.shape == b.shape`: torch.equal is False for tensors of "
        "different shapes",
        "ReplaceComparisonOperator_Gt_GtE @517 #3": "first_block_difference's `len(a) >= len(b)` for `>`: that "
        "branch runs only past the end of one block, so the lengths differ there",
        "NumberReplacer @298 #15": "session.run([\"logits\"], feeds)[-1] for [0]: one output asked for, one returned",
        "NumberReplacer @460 #25": "values[-1] for values[0] where len(values) == 1: the same value",
        "NumberReplacer @563 #69": "the fill's [-1] for [0]: a value is an initializer or one Constant's output, never "
        "both (a graph with two producers of one name is not valid ONNX), so the list has one entry",
        "NumberReplacer @575 #74": "rsplit('/', 2)[-1] for rsplit('/', 1)[-1]: the last part is the same",
        "DropCondition @142 #5": "_last_line's `(message or \"\")` as `(message)`: the branch runs only when "
        "`message and message.strip()` holds, so message is a non-empty str",
        "DropCondition @807 #61": "coverage's `isinstance(check.value, str) and` dropped: a check's value is a "
        "number, a str, a dict or a list, and each of those equals NOT_MEASURED (a str) only when it is that str",
    },
    "study/remedies/run": {
        "DropCondition @108 #3": "reference_verdict without `value.size and`: an empty array has no finite value, so "
        "`np.isfinite(value).any()` leaves it out the same",
    },
    "study/judging": {
        "NumberReplacer @45 #10": "`(row.get(\"reference_size\") or 1) > 1` for `or 0`: a size a record lacks "
        "(None) or a size 0 compares as not more than one either way",
        "NumberReplacer @45 #11": "`(row.get(\"reference_size\") or -1) > 1` for `or 0`: a size a record lacks "
        "(None) or a size 0 compares as not more than one either way",
    },
    "graph/ort": {
        "DropCondition @122 #3": "named_nodes(message) without `or \"\"`: it is typed `str` and every caller "
        "passes one (refused_node passes `message or \"\"`, the matrix analysis `.get(..., \"\")`): None never "
        "reaches it",
        "DropCondition @127 #5": "refused_node passing None on: named_nodes' own `message or \"\"` reads it as "
        "\"\", the same names (none)",
    },
}


def wanted(operator: str) -> bool:
    name = operator.split("/")[-1]
    kind, _, rest = name.partition("_")
    if kind == "ReplaceBinaryOperator":
        source, _, target = rest.partition("_")
        return _BINARY.get(source) == target
    if kind == "ReplaceComparisonOperator":
        source, _, target = rest.partition("_")
        return target in _COMPARISON.get(source, ())
    if kind == "ReplaceUnaryOperator":
        return tuple(rest.split("_", 1)) in _UNARY
    return kind not in _LEFT_OUT


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(start, end) of every annotation in `source`, as (line, column) with lines from 1."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        notes = []
        if isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
        elif isinstance(node, ast.arg) and node.annotation is not None:
            notes.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            notes.append(node.returns)
        spans += [((n.lineno, n.col_offset), (n.end_lineno, n.end_col_offset)) for n in notes]
    return spans


def _offsets(text: str) -> list[int]:
    starts, at = [0], 0
    for line in text.splitlines(keepends=True):
        at += len(line)
        starts.append(at)
    return starts


@dataclass(frozen=True)
class DataMutant:
    """A mutant of our own mutator: the file's text with `[start, end)` replaced by `replacement`."""

    operator: str
    line: int
    start: int
    end: int
    replacement: str
    what: str

    def apply(self, text: str) -> str:
        return text[:self.start] + self.replacement + text[self.end:]


def _drop(text: str, starts: list[int], items: list[ast.expr], index: int, operator: str, what: str) -> DataMutant:
    def at(node: ast.AST, end: bool = False) -> int:
        return starts[(node.end_lineno if end else node.lineno) - 1] + (node.end_col_offset if end else node.col_offset)

    item = items[index]
    if index + 1 < len(items):
        start, end = at(item), at(items[index + 1])
    elif index > 0:
        start, end = at(items[index - 1], end=True), at(item, end=True)
    else:
        start, end = at(item), at(item, end=True)
    return DataMutant(operator, item.lineno, start, end, "", what)


def _conditions_dropped(text: str, starts: list[int], definitions: tuple[str, ...]) -> list[DataMutant]:
    """Each operand of an `and`/`or` removed (a check dropped from a condition), in the functions named (all when
    none are)."""
    found: list[DataMutant] = []
    functions = [n for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    seen: set[int] = set()
    for function in functions:
        if definitions and function.name not in definitions:
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.BoolOp) and id(node) not in seen:
                seen.add(id(node))
                for index, operand in enumerate(node.values):
                    found.append(_drop(text, starts, node.values, index, "DropCondition",
                                       ast.unparse(operand)[:80]))
    return found


def python_data_mutants(text: str, definitions: tuple[str, ...] = (), module_level: bool = True) -> list[DataMutant]:
    """Each operand of an `and`/`or` dropped; module-level data (all functions' modules only): each entry of a
    collection literal dropped, each `re.compile` pattern matching nothing."""
    starts = _offsets(text)
    found: list[DataMutant] = _conditions_dropped(text, starts, definitions)
    if not module_level:
        return found
    for statement in ast.parse(text).body:
        if not isinstance(statement, (ast.Assign, ast.AnnAssign)) or statement.value is None:
            continue
        for node in ast.walk(statement.value):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(
                    isinstance(e, (ast.Constant, ast.Tuple, ast.JoinedStr)) for e in node.elts) and node.elts:
                for index, element in enumerate(node.elts):
                    found.append(_drop(text, starts, node.elts, index, "DropEntry", ast.unparse(element)[:80]))
            elif isinstance(node, ast.Dict) and node.keys and all(isinstance(k, ast.Constant) for k in node.keys):
                entries = [ast.Tuple(elts=[k, v], lineno=k.lineno, col_offset=k.col_offset,
                                     end_lineno=v.end_lineno, end_col_offset=v.end_col_offset)
                           for k, v in zip(node.keys, node.values, strict=True)]
                for index, key in enumerate(node.keys):
                    found.append(_drop(text, starts, entries, index, "DropEntry", repr(key.value)[:80]))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile"
                  and isinstance(node.func.value, ast.Name) and node.func.value.id == "re" and node.args):
                pattern = node.args[0]
                start = starts[pattern.lineno - 1] + pattern.col_offset
                end = starts[pattern.end_lineno - 1] + pattern.end_col_offset
                found.append(DataMutant("PatternMatchesNothing", pattern.lineno, start, end,
                                        'r"(?!)"', text[start:end][:80]))
    return found


_POLICY_MOVE = {"lower_precision_fp": "fp32", "fp32": "lower_precision_fp", "fp32_set_opt_dtype": "fp32",
                "fp32_append_dtype": "fp32", "promote": "fp32", "banned": "fp32"}


def json_mutants(text: str) -> Iterator[tuple[str, int, str, str]]:
    """(operator, line, mutated text, what) for an autocast list: each op moved to another policy, dropped, or given
    the next line; each block's first line moved by one."""
    data = json.loads(text)
    lines = {(policy, index): n for n, line in enumerate(text.splitlines(), 1)
             for policy, entries in data["policies"].items() for index, entry in enumerate(entries)
             if f'"op": "{entry["op"]}"' in line}

    def dumped(changed: dict[str, Any]) -> str:
        return json.dumps(changed, indent=2) + "\n"

    for policy, entries in data["policies"].items():
        for index, entry in enumerate(entries):
            line = lines.get((policy, index), 0)
            target = _POLICY_MOVE.get(policy)
            if target in data["policies"]:
                moved = json.loads(text)
                moved["policies"][policy].pop(index)
                moved["policies"][target].append(entry)
                yield "MovePolicy", line, dumped(moved), f"{entry['op']}: {policy} -> {target}"
            dropped = json.loads(text)
            dropped["policies"][policy].pop(index)
            yield "DropEntry", line, dumped(dropped), f"{entry['op']} dropped from {policy}"
            at = re.search(r":(\d+)", entry.get("at", ""))
            if at:
                shifted = json.loads(text)
                moved_at = f"{entry['at'][:at.start(1)]}{int(at[1]) + 1}{entry['at'][at.end(1):]}"
                shifted["policies"][policy][index]["at"] = moved_at
                yield "ShiftLine", line, dumped(shifted), f"{entry['op']} at {moved_at}"
    for file, number in data.get("registered_at", {}).items():
        shifted = json.loads(text)
        shifted["registered_at"][file] = number + 1
        yield "ShiftLine", 0, dumped(shifted), f"block of {file} at {number + 1}"


# -- the private tree and the test command ---------------------------------------------------------------------------

def make_tree(folder: Path) -> None:
    """A git clone of HEAD with the working tree's changes (modified, untracked, deleted) laid over it."""
    if folder.exists():
        shutil.rmtree(folder)
    subprocess.run(["git", "clone", "--quiet", "--local", "--no-checkout", str(ROOT), str(folder)], check=True)
    subprocess.run(["git", "-C", str(folder), "checkout", "--quiet", "HEAD"], check=True)
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-m", "-o", "--exclude-standard"],
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source, target = ROOT / name, folder / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        elif target.exists() and not source.exists():
            target.unlink()
    # the stacks this checkout has built, reached from the copy (read only: a test runs today's interpreter to read
    # what it registers, e.g. today's autocast lists; without it those tests skip and their mutants survive)
    envs = ROOT / ".cache" / "sweep" / "envs"
    if envs.is_dir():
        (folder / ".cache" / "sweep").mkdir(parents=True, exist_ok=True)
        (folder / ".cache" / "sweep" / "envs").symlink_to(envs, target_is_directory=True)


def _socket(tree: Path, venv: str) -> Path:
    return tree.parent / f"warm-{tree.name}-{venv.lstrip('.')}.sock"


def test_script(name: str, target: Target, tree: Path) -> Path:
    """The mutant's test command: the target's tests through the copy's warm servers (`warm_pytest.py`), in .venv,
    then (a mutant that survived there) its graph tests in .venv-graph."""
    asker = f"'{ROOT}/.venv/bin/python' -I '{ROOT}/benchmarks/warm_pytest.py' ask"
    args = " ".join(PYTEST[2:])
    quoted = " ".join(f"'{a}'" for a in target.tests)
    lines = ["#!/bin/bash", f"cd '{tree}' || exit 3",
             f"{asker} '{_socket(tree, '.venv')}' {args} {quoted} || {{ echo '{KILLED_IN}.venv'; exit 1; }}"]
    if target.graph_tests:
        graph = " ".join(f"'{a}'" for a in target.graph_tests)
        lines.append(f"{asker} '{_socket(tree, '.venv-graph')}' {args} {graph} || "
                     f"{{ echo '{KILLED_IN}.venv-graph'; exit 1; }}")
    lines.append("exit 0")
    script = tree.parent / f"test-{name.replace('/', '-')}-{tree.name}.sh"
    script.write_text("\n".join(lines) + "\n")
    return script


@contextlib.contextmanager
def warm_servers(target: Target, tree: Path) -> Iterator[None]:
    """The copy's warm pytest servers (.venv, and .venv-graph when the target has graph tests) while a module runs:
    each imports torch, onnx and pytest once and forks a child per test run (benchmarks/warm_pytest.py)."""
    venvs = [".venv", *([".venv-graph"] if target.graph_tests else [])]
    env = {**os.environ, "PYTHONPATH": f"{tree}/src:{tree}", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
    servers = []
    try:
        for venv in venvs:
            log = (tree.parent / f"warm-{tree.name}-{venv.lstrip('.')}.log").open("w")
            server = subprocess.Popen([str(ROOT / venv / "bin" / "python"), str(ROOT / "benchmarks" / "warm_pytest.py"),
                                       "serve", str(_socket(tree, venv))], cwd=tree, env=env,
                                      stdout=subprocess.PIPE, stderr=log, text=True)
            servers.append(server)
            if server.stdout is None or server.stdout.readline().strip() != "ready":
                raise SystemExit(f"mutation: the warm pytest server in {venv} did not start (see {log.name})")
        yield
    finally:
        for server in servers:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()


def run_tests(command: str, timeout_s: float, cwd: Path) -> tuple[str, str, float]:
    """(outcome, output, seconds): killed, survived or timeout."""
    from cosmic_ray.testing import run_tests as cosmic_run

    started = time.perf_counter()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        outcome, output = cosmic_run(command, timeout_s)
    finally:
        os.chdir(here)
    seconds = time.perf_counter() - started
    if output == "timeout":
        return "timeout", output, seconds
    return str(outcome.value), output or "", seconds


_FAILED = re.compile(r"^FAILED (\S+)", re.MULTILINE)


def killed_by(output: str) -> dict[str, str | None]:
    where = output.rpartition(KILLED_IN)[2].strip().splitlines()
    test = _FAILED.search(output)
    return {"environment": where[0] if where else None, "test": test[1] if test else None}


def key(mutant: dict[str, Any]) -> str:
    """A mutant's identity within its module, stable while the module's text is: operator, line, what it does."""
    return f"{mutant['operator']} @{mutant['line']} #{mutant['occurrence']}"


# -- running a module ----------------------------------------------------------------------------------------------

def _die_with_parent() -> None:
    """In a child about to exec: end it (SIGTERM) when the thread that started it ends, so that a killed run leaves
    no Cosmic Ray session mutating its copy and asking dead servers (Linux's PR_SET_PDEATHSIG)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def cosmic_mutants(name: str, target: Target, tree: Path, work: Path, timeout_s: float) -> tuple[list, dict]:
    """Cosmic Ray's session for the module: init, thin, exec. (results, not made)."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    slug = f"{name.replace('/', '-')}-{tree.name}"
    config, session = work / f"{slug}.toml", work / f"{slug}.sqlite"
    session.unlink(missing_ok=True)
    script = test_script(name, target, tree)
    config.write_text(
        f'[cosmic-ray]\nmodule-path = "{target.path}"\ntimeout = {timeout_s}\nexcluded-modules = []\n'
        f'test-command = "bash {script}"\n\n[cosmic-ray.distributor]\nname = "local"\n')
    cosmic = [str(ROOT / ".venv" / "bin" / "cosmic-ray")]
    subprocess.run([*cosmic, "init", str(config), str(session)], cwd=tree, check=True)
    spans = annotation_spans((tree / target.path).read_text())
    not_made = {"operators left out (selective set)": 0, "inside annotations (never evaluated)": 0,
                "outside the functions mutated": 0}
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in db.pending_work_items:
            spec = item.mutations[0]
            start = tuple(spec.start_pos)
            why = None
            if not wanted(spec.operator_name):
                why = "operators left out (selective set)"
            elif any(a <= start < b for a, b in spans):
                why = "inside annotations (never evaluated)"
            elif target.definitions and spec.definition_name not in target.definitions and not (
                    target.module_level and spec.definition_name is None):
                why = "outside the functions mutated"
            if why:
                not_made[why] += 1
                db.set_result(item.job_id, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output=why))
    subprocess.run([*cosmic, "exec", str(config), str(session)], cwd=tree, check=True, preexec_fn=_die_with_parent)
    results = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            spec = item.mutations[0]
            output = result.output or ""
            if result.worker_outcome == WorkerOutcome.NO_TEST:
                continue
            outcome = ("timeout" if output == "timeout" else "incompetent"
                       if result.worker_outcome != WorkerOutcome.NORMAL else str(result.test_outcome.value))
            results.append({
                "tool": "cosmic-ray", "operator": spec.operator_name.split("/")[-1], "occurrence": spec.occurrence,
                "line": spec.start_pos[0], "column": spec.start_pos[1], "function": spec.definition_name,
                "diff": _short_diff(result.diff or ""), "outcome": outcome,
                **({"killed_in": killed_by(output)} if outcome == "killed" else {}),
            })
    return results, not_made


def _short_diff(diff: str) -> str:
    return "\n".join(line for line in diff.splitlines()
                     if line.startswith(("-", "+")) and not line.startswith(("---", "+++")))[:400]


def data_mutants(name: str, target: Target, tree: Path, timeout_s: float,
                 only: set[str] | None = None) -> list[dict[str, Any]]:
    """Our own mutator's mutants of the module (JSON lists, module-level data), each tested."""
    path = tree / target.path
    original = path.read_text()
    if path.suffix == ".json":
        made = [(op, line, mutated, what) for op, line, mutated, what in json_mutants(original)]
    else:
        made = [(m.operator, m.line, m.apply(original), m.what)
                for m in python_data_mutants(original, target.definitions, target.module_level)]
    script = test_script(name, target, tree)
    results = []
    for occurrence, (operator, line, mutated, what) in enumerate(made):
        mutant = {"tool": "own", "operator": operator, "occurrence": occurrence, "line": line, "what": what}
        if only is not None and key(mutant) not in only:
            continue
        try:
            compile(mutated, str(path), "exec") if path.suffix == ".py" else json.loads(mutated)
        except (SyntaxError, ValueError):
            continue
        path.write_text(mutated)
        try:
            outcome, output, _ = run_tests(f"bash {script}", timeout_s, tree)
        finally:
            path.write_text(original)
        results.append({**mutant, "outcome": outcome,
                        **({"killed_in": killed_by(output)} if outcome == "killed" else {})})
    return results


def baseline(name: str, target: Target, tree: Path) -> float:
    """Seconds the module's tests take unmutated; they must pass."""
    outcome, output, seconds = run_tests(f"bash {test_script(name, target, tree)}", 1800, tree)
    if outcome != "survived":
        raise SystemExit(f"mutation: {name}'s tests fail before any mutation:\n{output[-2000:]}")
    return seconds


def summarize(name: str, target: Target, mutants: list[dict[str, Any]], not_made: dict[str, int],
              run: dict[str, Any], seconds: float, baseline_s: float, timeout_s: float,
              file_sha256: str) -> dict[str, Any]:
    equivalent = EQUIVALENT.get(name, {})
    for mutant in mutants:
        if mutant["outcome"] == "survived" and key(mutant) in equivalent:
            mutant["outcome"] = "equivalent"
            mutant["why_equivalent"] = equivalent[key(mutant)]
    counts = {outcome: sum(m["outcome"] == outcome for m in mutants)
              for outcome in ("killed", "survived", "equivalent", "timeout", "incompetent")}
    made = len(mutants)
    judged = made - counts["equivalent"]
    return {
        "run": run, "environment": environment.describe(), "file": target.path, "file_sha256": file_sha256,
        "tests": list(target.tests), "graph_tests": list(target.graph_tests),
        "definitions": list(target.definitions),
        "made": made, "killed": counts["killed"], "survived": counts["survived"],
        "equivalent": counts["equivalent"], "timed_out": counts["timeout"], "incompetent": counts["incompetent"],
        "killed_only_in_venv_graph": sum(m.get("killed_in", {}).get("environment") == ".venv-graph"
                                         for m in mutants),
        "score": round(counts["killed"] / judged, 4) if judged else None,
        "target_met": bool(judged) and counts["killed"] / judged >= TARGET_SCORE,
        "not_made": not_made,
        "by_tool": {tool: sum(m["tool"] == tool for m in mutants) for tool in ("cosmic-ray", "own")},
        "survivors": [m for m in mutants if m["outcome"] == "survived" or m.get("first_outcome") == "survived"],
        "equivalents": [m for m in mutants if m["outcome"] == "equivalent"],
        "timed_out_mutants": [m for m in mutants if m["outcome"] == "timeout"],
        "incompetent_mutants": [m for m in mutants if m["outcome"] == "incompetent"],
        "seconds": round(seconds, 1), "baseline_s": round(baseline_s, 1), "timeout_s": timeout_s,
        "mutants": [{k: m[k] for k in ("tool", "operator", "occurrence", "line", "column", "outcome", "killed_in")
                     if k in m} for m in mutants],
    }


def run_module(name: str, tree: Path, work: Path, say=print) -> dict[str, Any]:
    target = TARGETS[name]
    run = environment.this_run()
    started = time.perf_counter()
    base = baseline(name, target, tree)
    timeout_s = max(target.timeout_s, round(3 * base + 30))
    say(f"{name}: tests pass unmutated in {base:.1f} s; mutants time out at {timeout_s} s")
    mutants: list[dict[str, Any]] = []
    not_made: dict[str, int] = {}
    if target.path.endswith(".py"):
        mutants, not_made = cosmic_mutants(name, target, tree, work, timeout_s)
    mutants += data_mutants(name, target, tree, timeout_s)
    sha = hashlib.sha256((tree / target.path).read_bytes()).hexdigest()
    part = summarize(name, target, mutants, not_made, run, time.perf_counter() - started, base, timeout_s, sha)
    say(f"{name}: {part['made']} made, {part['killed']} killed, {part['survived']} survived, "
        f"{part['timed_out']} timed out: score {part['score']}")
    return part


def rerun_survivors(name: str, part: dict[str, Any], tree: Path, say=print) -> dict[str, Any]:
    """The survivors of `part` again (the module's file unchanged): one the tests now kill keeps its test."""
    from cosmic_ray.mutating import mutate_and_test
    from cosmic_ray.work_item import MutationSpec

    target = TARGETS[name]
    sha = hashlib.sha256((tree / target.path).read_bytes()).hexdigest()
    if sha != part["file_sha256"]:
        raise SystemExit(f"mutation: {target.path} changed since its mutants were made: run it whole again")
    run = environment.this_run()
    started = time.perf_counter()
    base = baseline(name, target, tree)  # the tests (perhaps more of them than the record's) pass unmutated
    say(f"{name} again: tests pass unmutated in {base:.1f} s")
    script = test_script(name, target, tree)
    survivors = [m for m in part["survivors"] if m["outcome"] == "survived"]
    own = {key(m) for m in survivors if m["tool"] == "own"}
    fresh = {key(m): m for m in data_mutants(name, target, tree, part["timeout_s"], only=own)} if own else {}
    here = os.getcwd()
    for mutant in survivors:
        if mutant["tool"] != "cosmic-ray":
            continue
        spec = MutationSpec(target.path, f"core/{mutant['operator']}", mutant["occurrence"],
                            (mutant["line"], mutant["column"]), (mutant["line"], mutant["column"] + 1))
        os.chdir(tree)
        try:
            result = mutate_and_test([spec], f"bash {script}", part["timeout_s"])
        finally:
            os.chdir(here)
        output = result.output or ""
        outcome = "timeout" if output == "timeout" else str(result.test_outcome.value)
        fresh[key(mutant)] = {"outcome": outcome, **({"killed_in": killed_by(output)} if outcome == "killed" else {})}
    full = {key(m): m for m in part["equivalents"]}
    for mutant in part["survivors"]:
        again = fresh.get(key(mutant))
        if mutant["outcome"] == "survived" and again and again["outcome"] == "killed":
            mutant = {**mutant, "outcome": "killed", "first_outcome": "survived", "killed_by": again["killed_in"]}
        full[key(mutant)] = mutant
    for mutant in full.values():  # EQUIVALENT is read again: a survivor found equivalent since is so now
        if mutant["outcome"] == "equivalent":
            mutant["outcome"] = "survived"
    mutants = [full.get(key(m), m) for m in part["mutants"]]
    kept = summarize(name, target, mutants, part["not_made"], part["run"], part["seconds"], part["baseline_s"],
                     part["timeout_s"], sha)
    kept["again"] = {"run": run, "seconds": round(time.perf_counter() - started, 1), "rerun": len(survivors)}
    say(f"{name} again: {kept['killed']} killed, {kept['survived']} survived, score {kept['score']}")
    return kept


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", default=",".join(TARGETS), help=f"comma-separated, of {', '.join(TARGETS)}")
    parser.add_argument("--jobs", type=int, default=1, help="modules side by side, each in its own copy")
    parser.add_argument("--again", action="store_true", help="only the record's survivors, again")
    parser.add_argument("--list", action="store_true", help="count each module's mutants and stop")
    parser.add_argument("--out", type=Path, default=RECORD)
    parser.add_argument("--work", type=Path, default=WORK)
    args = parser.parse_args(argv)
    args.work, args.out = args.work.resolve(), args.out.resolve()
    names = [n for n in args.modules.split(",") if n]
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        parser.error(f"unknown modules {unknown}: of {', '.join(TARGETS)}")
    args.work.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = json.loads(args.out.read_text()) if args.out.is_file() else {}
    if args.list:
        for name in names:
            text = (ROOT / TARGETS[name].path).read_text()
            own = len(list(json_mutants(text))) if name.startswith("autocast_lists") else len(
                python_data_mutants(text, TARGETS[name].definitions, TARGETS[name].module_level))
            print(f"{name}: {own} own mutants")
        return 0
    trees = [args.work / f"tree-{n}" for n in range(max(1, args.jobs))]
    for tree in trees:
        make_tree(tree)
    started = time.perf_counter()
    run = environment.this_run()

    free: queue.Queue[Path] = queue.Queue()
    for tree in trees:
        free.put(tree)

    def one(name: str) -> tuple[str, dict[str, Any]]:
        tree = free.get()  # each module mutates its own copy: no other module's tests see its mutants
        try:
            with warm_servers(TARGETS[name], tree):
                if args.again:
                    return name, rerun_survivors(name, record["modules"][name], tree)
                return name, run_module(name, tree, args.work)
        finally:
            free.put(tree)

    finished: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=len(trees)) as pool:
        for future in as_completed([pool.submit(one, name) for name in names]):
            name, part = future.result()
            finished[name] = part
            _write(args.out, run, finished, time.perf_counter() - started)
    return 0


def _write(out: Path, run: dict[str, Any], finished: dict[str, dict[str, Any]], seconds: float) -> None:
    """The record with the modules this run finished laid over the record's others (read under the outputs lock:
    a `--again` beside a whole run loses neither's modules)."""
    from where223.pipeline.records import write_json

    out.parent.mkdir(parents=True, exist_ok=True)
    with publish.outputs_lock(out.parent.parent, wait=True):
        kept = json.loads(out.read_text()).get("modules", {}) if out.is_file() else {}
        modules = {**kept, **finished}
        write_json(out, {
            "run": run,
            "environment": environment.describe(),
            "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "tool": {"name": "cosmic-ray", "version": _version("cosmic-ray"),
                     "own": "benchmarks/mutation.py: conditions dropped, module-level data, autocast_lists/*.json",
                     "test_runs": "benchmarks/warm_pytest.py: a forked child of a warm server per test run"},
            "score_rule": "killed / (made - equivalent); timed out and incompetent mutants are listed apart and not "
                          "counted as killed; a kill in .venv or .venv-graph counts",
            "target_score": TARGET_SCORE,
            "operators": {"binary": _BINARY, "comparison": {k: list(v) for k, v in _COMPARISON.items()},
                          "unary": sorted("_".join(u) for u in _UNARY), "left_out": sorted(_LEFT_OUT)},
            "seconds": round(seconds, 1),
            "modules": {name: modules[name] for name in TARGETS if name in modules},
        })


def _version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
