"""Section 7 of the write-up: the class today, from `classes/summary.json` (records only), and its appendix of every
refusal group."""

from __future__ import annotations

from collections import Counter
from typing import Any

from where223 import markdown
from where223.errors import printable
from where223.study._glance import Glance
from where223.study._page import Report
from where223.study.classes.analysis import column_name, opset_ranges
from where223.study.classes.figure import KIND_SHORT, class_name, class_table
from where223.verdicts import NOT_MEASURED

COUNTED = ("attempted", "built", "exported", "judged", "accepted", "missing_kernel", "type_refused",
           "within_tolerance", "not_judged")  # fmt: skip
HEADERS = ("tried", "built", "exported", "judged", "accepted", "no kernel", "type refused", "within tol.",
           "not judged")  # fmt: skip
RECIPE_SHORT = {"cpu_bf16_autocast": "autocast", "bf16_model": "bf16", "fp16_model": "fp16"}


def _count(counts: dict[str, int], key: str) -> Any:
    """One count of a column; within tolerance with how many ran on ONNX Runtime's own kernels (ORT) and how many
    were emulated (em.), where the summary records it; a count a summary made before it lacks: —."""
    if key == "within_tolerance" and counts.get(key) and "within_on_ort_kernels" in counts:
        return f"{counts[key]} ({counts['within_on_ort_kernels']} ORT, {counts['within_emulated']} em.)"
    return counts.get(key, "—")


def _short(column: str) -> str:
    """`today/cpu_bf16_autocast/dynamo` -> `autocast dynamo`: a table's header within its stack."""
    _, recipe, exporter = column.split("/")
    return f"{RECIPE_SHORT.get(recipe, recipe)} {exporter}"
CODE_LIMIT = 90


def _types(bindings: list[dict[str, Any]] | None, param: str | None) -> str:
    if not bindings:
        return ""
    parts = [f"{b['io']} {b['position']} {b['type'].removeprefix('tensor(').removesuffix(')')}" for b in bindings]
    return f" ({', '.join(parts)}" + (f", all bound to `{param}`)" if param else ")")


def cause(group: dict[str, Any]) -> str:
    """One sentence from a group's representative: which exporter function emitted which node from which line,
    with which types, against which constraint, and what eager's kernel at that line was handed."""
    from where223.graph.blame import same_op  # onnx, loaded only when a cause is written

    item = group["representative"]
    emitter = item.get("emitter") or {}
    function = emitter.get("function") or emitter.get("target")
    who = f"`{function.rsplit('.', 1)[-1]}` ({group['exporter']})" if function else f"the {group['exporter']} exporter"
    code = markdown.code(printable(item["code"], CODE_LIMIT)) if item.get("code") else "an unrecorded line"
    constraint = item.get("constraint") or {}
    text = f"{who} emitted `{item.get('operator')}` for {code}"
    text += _types(item.get("bindings"), constraint.get("type_param"))
    kernels = item.get("eager_kernels") or []
    mixed = next((k for k in kernels if k.get("mixed")), None)
    kernel = mixed or next((k for k in kernels if same_op(k["op"], group["operator"])), None)
    kernel = kernel or (kernels[0] if kernels else None)
    if kernel:
        text += (f"; eager `{kernel['op']}` was handed {'/'.join(kernel['inputs'])} and returned "
                 f"{'/'.join(kernel['outputs'])}")  # fmt: skip
        if mixed:
            text += ", a kernel taking mixed dtypes where the schema binds one type"
        elif len(item.get("types") or []) > 1:
            floating = {d for d in kernel["inputs"] if d in ("float", "float16", "bfloat16", "double")}
            text += (f": eager computed in {'/'.join(sorted(floating))}, so the graph's types departed from eager's "
                     "before this node")
    else:
        text += "; no eager kernel was recorded at that line"
    return text + "."


def span_text(span: dict[str, Any] | None) -> str:
    """A group's opset span as the write-up says it: where its representative is refused alike, and otherwise."""
    if not span:
        return NOT_MEASURED
    other = "; ".join(f"{opset}: {what}" for opset, what in span["other"].items())
    text = f"refused alike at {span['alike_text']} (of {opset_ranges(span['scanned'])})" + (
        f", otherwise {other}" if other else "")
    edges = span.get("boundaries") or {}
    if not edges:
        return text + ", so no opset scanned is a boundary"
    said = []
    for opset, found in edges.items():
        differ = Counter(found["differ"].values()).most_common(3)
        part = f"at {opset} {len(found['alike'])} of {found['members']} members alike"
        part += "".join(f", {n} {what}" for what, n in differ)
        if found["not_scanned"]:
            part += f", {len(found['not_scanned'])} not scanned"
        said.append(part)
    return text + "; where it appears or disappears, " + "; ".join(said)


def _other_stack(compared: dict[str, Any] | None) -> str:
    """What the other stack made of the group's members, in one sentence."""
    if not compared:
        return "The other stack: no member was run there with this recipe and exporter."
    differ = "; ".join(f"{model}: {what}" for model, what in list(compared["differ"].items())[:6])
    more = len(compared["differ"]) - 6
    return (f"The {compared['stack']} stack: {len(compared['alike'])} of {compared['compared']} members run there "
            f"refused alike" + (f", otherwise {differ}" + (f" and {more} more" if more > 0 else "") if differ else "")
            + ".")


def _lost(c: dict[str, Any]) -> str:
    """A column's lost cells, where its coverage records them: `, 3 lost`."""
    return f", {c['lost']} lost" if c.get("lost") else ""


def lost_line(found: dict[str, dict[str, Any]], target: float | None) -> str:
    """The engine's worst column (lost cells: timed out, crashed, or left by a deadline) against the summary's
    target; nothing where the coverage does not record lost cells."""
    counted = {name: c for name, c in found.items() if "lost_share" in c}
    if not counted or target is None:
        return ""
    worst = max(counted, key=lambda name: counted[name]["lost_share"])
    missing = max(c["listed"] - c["recorded"] for c in counted.values())
    if not all(c["lost_under_target"] for c in counted.values()):
        verdict = "not met: the counts above lack those cells' verdicts."
    elif missing > 0:  # lost cells are counted among the records: types without one are not under the target yet
        verdict = (f"not yet judged: it holds for the cells run so far, and up to {missing} listed types of a column "
                   "have no record of a run.")
    else:
        verdict = "met."
    return (f" The engine lost (a time-out, a crash, or a cell left by a sweep's deadline) at most "
            f"{counted[worst]['lost']} of a column's {counted[worst]['listed']} types ({_short(worst)}, "
            f"{counted[worst]['lost_share']:.1%}); the target, under {target:.0%} of every column, is " + verdict)


def coverage_lines(found: dict[str, dict[str, Any]], target: float | None = None) -> list[str]:
    """What share of the model types each stack's space lists has a record in each column (the table's counts are
    over those), and how many cells the engine lost against `target`: a paragraph, or nothing for a summary made
    before coverage was recorded."""
    if not found:
        return []
    parts = []
    for stack in dict.fromkeys(name.split("/")[0] for name in found):
        mine = {name: c for name, c in found.items() if name.startswith(f"{stack}/")}
        listed = next(iter(mine.values()))["listed"]
        shares = ", ".join(f"{_short(name)} {c['recorded']} ({c['share']:.0%}{_lost(c)})" for name, c in mine.items())
        parts.append(f"{stack} stack, of {listed} listed: {shares}")
    return ["Coverage per column (model types with a record of a run, of the model types the stack's space lists; a "
            "type without one was not run, so every count above is over the recorded types only): "
            + "; ".join(parts) + "." + lost_line(found, target), ""]


def section(report: Report) -> None:
    """Section 7: which model types today's exporters break for ONNX Runtime in reduced precision, and why."""
    data = report.json("classes/summary.json")
    columns = [column_name((c["stack"], c["recipe"], c["exporter"])) for c in data["columns"]]
    classes, _, cells = class_table(data)
    lines = [
        "## 7. The class today: which models today's exporters break, and why",
        "",
        "Every model type of the base and causal-LM auto mappings, built small with random weights, put in reduced "
        "precision (CPU bf16 autocast, the whole model in bf16, the whole model in fp16), exported in eval mode "
        "by each exporter of the stack, judged by ONNX Runtime's CPU provider; an accepted model ran once against "
        "eager PyTorch under the same recipe (a `missing_kernel` one with its reduced kernels emulated), within "
        "a tolerance of eight spacings of its type, set before the run (*within tol.*: how many, with how many of "
        "those ran on ONNX Runtime's own kernels, ORT, and how many were emulated, em.; *not judged*: compared "
        "against eager outputs that are all zero or constant, so the comparison could not have failed, and not "
        "counted within tolerance, `where223.study.judging`):",
        "",
        *markdown.table(["stack", "recipe", "exporter", *HEADERS],
                        [[*c.split("/"), *(_count(data["counts"][c], k) for k in COUNTED)] for c in columns]),
        "",
        *coverage_lines(data.get("coverage") or {}, data.get("lost_target")),
        "Classes of refusal (operator: what was broken), model types per recipe and exporter, one table per stack:",
        "",
    ]
    for stack in dict.fromkeys(c.split("/")[0] for c in columns):
        mine = [c for c in columns if c.startswith(f"{stack}/")]
        present = [name for name in classes if any(cells.get((name, c)) for c in mine)]
        if not present:
            continue
        rows = [[name, *(cells.get((name, c), 0) for c in mine)] for name in present]
        lines += [f"*{stack} stack*", "", *markdown.table(["class", *(_short(c) for c in mine)], rows), ""]
    lines += [
        "Each class's cause on each stack, from one member of its largest group (the exporter function that emitted "
        "the node, its types against the schema's constraint, and the eager kernel at the node's source line, "
        "recorded below autocast), the opsets its representative was refused alike at (scanned from 14 to the "
        "exporter's newest; an opset the dynamo exporter could not convert to, keeping 18, does not count), what "
        "every member was at the opsets either side of where the group appears or disappears, and what the other "
        "stack made of the same members:",
        "",
    ]
    seen: set[tuple[str, str]] = set()
    for group in data["groups"]:  # each class's largest group on each stack
        name = class_name(group)
        if (name, group["stack"]) in seen:
            continue
        seen.add((name, group["stack"]))
        opsets = span_text(group.get("opset_span"))
        lines.append(f"- **{name}** ({group['stack']}, {group['recipe']}, {group['exporter']}; "
                     f"e.g. {group['representative']['model_type']}): {cause(group)} Opsets: {opsets}. "
                     f"{_other_stack(group.get('other_stack'))}")  # fmt: skip
    lines += ["", *gpu_side_lines(data)]
    lines += [
        "",
        "Every group with its members: [appendix](#appendix-refusal-groups). Data: "
        "[`classes/summary.json`](classes/summary.json) and one JSON per model type, recipe and exporter under "
        "`classes/<release>/`; `where223 sweep --space spaces/classes-today.yaml` (and `classes-2022.yaml`) "
        "rebuilds them.",
        "",
    ]
    report.add(*lines)
    report.figure("classes/classes", "Refusal classes by stack, recipe and exporter", "07_classes")


def gpu_side_lines(data: dict) -> list[str]:
    """Which classes a GPU user exporting under CUDA fp16 autocast would meet (the emulated reruns,
    `where223.study.classes.emulated`), and the refusals only those reruns found; nothing where none ran."""
    from where223.study.classes import emulated

    groups = [g for g in data["groups"] if (g.get("gpu_side") or {}).get("rerun")]
    if not groups:
        return []
    rows = [[class_name(g), g["stack"], RECIPE_SHORT.get(g["recipe"], g["recipe"]), g["exporter"],
             f"{g['gpu_side']['rerun']}/{g['gpu_side']['members']}", len(g["gpu_side"]["alike"]),
             g["gpu_side"]["verdict"]] for g in groups]  # fmt: skip
    pending = sum(1 for g in data["groups"] if not (g.get("gpu_side") or {}).get("rerun"))
    meets = sum(g["gpu_side"]["verdict"] == emulated.MEETS_GPU for g in groups)
    lines = [
        f"**Under CUDA fp16 autocast (emulated).** The members of each refusal group exported again by the group's "
        f"exporter under CUDA's fp16 autocast policy of that stack's torch, applied to CPU tensors "
        f"(`where223.cuda_autocast`, section 1; not run on a GPU), first members first. A group meets a GPU user "
        f"exporting under autocast when a member rerun is refused alike (same operator, same kind); a whole-model "
        f"recipe's class (bf16, fp16) meets a GPU user who casts the model whatever this says, for the cast graph "
        f"does not depend on the device's autocast. {meets} of the {len(groups)} groups rerun are refused alike"
        + (f"; {pending} not rerun yet" if pending else "") + ":",
        "",
        *markdown.table(["class", "stack", "recipe", "exporter", "members rerun", "refused alike",
                         "under CUDA fp16 autocast"], rows),
    ]
    only = data.get("emulated_only") or []
    if only:
        lines += ["", "Refused under the emulated CUDA policy in a class no CPU recipe showed: " + "; ".join(
            f"{item['model_type']} ({item['stack']}, {item['exporter']}: {item['operator']}, {item['kind']})"
            for item in only) + "."]  # fmt: skip
    return lines


def appendix(report: Report) -> None:
    """The appendix: every refusal group with its members, its cause (from its representative's evidence), its opset
    span and what the other stack made of its members."""
    data = report.json("classes/summary.json")
    lines = ["## Appendix: refusal groups", ""]
    for group in data["groups"]:
        kind = KIND_SHORT.get(group["kind"], group["kind"])
        lines.append(f"- {group['operator']} ({kind}), {group['exporter']}, {group['recipe']}, {group['stack']}: "
                     f"{group['size']} — {', '.join(group['members'])}. Cause (e.g. "
                     f"{group['representative']['model_type']}): {cause(group)} Opsets: "
                     f"{span_text(group.get('opset_span'))}. {_other_stack(group.get('other_stack'))}")  # fmt: skip
    report.add(*lines, "")



def glance(report: Report) -> Glance:
    """Section 7's line for "At a glance": under the seed's recipe (CPU bf16 autocast) on today's stack, how many
    of each exporter's judged exports ONNX Runtime refuses for their types, of how many model types tried; how many
    refusal groups today's stack has, and the largest."""
    path = "classes/summary.json"
    data = report.json(path)
    glance = Glance(7, "The class today")
    columns = [column_name((c["stack"], c["recipe"], c["exporter"])) for c in data["columns"]
               if c["stack"] == "today" and c["recipe"] == "cpu_bf16_autocast"]
    said = []
    for column in columns:
        counts = data["counts"][column]
        said.append(f"{glance.quote(counts['type_refused'], path, f'counts.{column}.type_refused')} of the "
                    f"{glance.quote(counts['judged'], path, f'counts.{column}.judged')} model types today's "
                    f"{column.rsplit('/', 1)[-1]} exporter exports "
                    f"({glance.quote(counts['attempted'], path, f'counts.{column}.attempted')} tried)")
    text = ("under CPU bf16 autocast ONNX Runtime refuses the types of " + " and ".join(said)
            if said else "today's stack was not swept under CPU bf16 autocast")
    found = {name: c for name, c in (data.get("coverage") or {}).items() if name.startswith("today/")}
    if found:
        lowest = min(found, key=lambda name: found[name]["share"])
        text += (f" (coverage: the thinnest column, {_short(lowest)}, has records for "
                 f"{glance.quote(found[lowest]['recorded'], path, f'coverage.{lowest}.recorded')} of the "
                 f"{glance.quote(found[lowest]['listed'], path, f'coverage.{lowest}.listed')} listed types)")
    today = [group for group in data["groups"] if group["stack"] == "today"]
    if today:
        largest = max(today, key=lambda group: group["size"])
        size = glance.quote(largest["size"], path, f"groups[{data['groups'].index(largest)}].size")
        text += (f"; today's refusals fall in {glance.quote(len(today), path, 'groups[stack=today]', reduce='len')} "
                 f"groups, the largest `{class_name(largest)}` ({size} model types, {largest['recipe']}, "
                 f"{largest['exporter']})")
    return glance.says(text + ".")
