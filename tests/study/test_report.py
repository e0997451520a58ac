"""The write-up: the committed copy is what the code makes of the committed records (a freshness check only),
and what the code makes of them states facts that these tests recompute from the records with code of their own."""

import json
import re

import pytest

from tests.conftest import load_json
from where223.gpt2 import runs
from where223.pipeline.paths import OUTPUTS
from where223.pipeline.run import PlannedRun, load_plan
from where223.study import report
from where223.study.architectures import section as architectures_section
from where223.study.fix import analysis as fix_analysis
from where223.study.fix import section as fix_section
from where223.study.variants import section as variants_section

DEFAULT = {**runs.DEFAULTS, "device": "cpu", "amp_dtype": "bf16"}


def test_committed_report_is_regenerated_from_the_records():
    """Fresh, not right: the expected text is the code under test's own. What the text must say is checked below."""
    assert (OUTPUTS / "REPORT.md").read_text() == report.build(OUTPUTS)


def test_every_linked_file_exists():
    text = (OUTPUTS / "REPORT.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert len(links) > 20
    missing = [link for link in links if not (OUTPUTS / link).exists()]
    assert missing == []


def test_quotes_recorded_numbers():
    text = report.build(OUTPUTS)
    fix = report.Report(OUTPUTS, load_plan()).fix_run()
    source = report.find_run(OUTPUTS, fix.parameters)
    verification = load_json(OUTPUTS / source / runs.fix_name(fix.parameters["variant"]) / "verification.json")
    assert f"Overall verdict: **{verification['verdict']}**" in text
    assert "| `ort_trainer` | reproduced | `/_original_module/transformer/h.0/attn/Where` |" in text


def record_run(outputs, parameters: dict, folder: str | None = None) -> str:
    """Write a reproduce.json with `parameters` into its run folder (or `folder`); the folder's name."""
    name = folder or runs.run_name(parameters)
    (outputs / name).mkdir(parents=True)
    (outputs / name / "reproduce.json").write_text(json.dumps({"parameters": parameters}))
    return name


def test_the_default_run_is_found_beside_its_variations(tmp_path):
    variation = record_run(tmp_path, {**DEFAULT, "opset": 14})
    default = record_run(tmp_path, DEFAULT)
    assert variation != default
    assert report.find_run(tmp_path, {"path": "onnx_export"}) == default
    assert report.find_run(tmp_path, {"path": "onnx_export", "opset": 14}) == variation


def test_control_no_default_run_among_variations(tmp_path):
    record_run(tmp_path, {**DEFAULT, "opset": 14})
    record_run(tmp_path, DEFAULT, folder="copied-by-hand")  # a folder that is not named by its parameters
    with pytest.raises(FileNotFoundError, match="no run under .* was made with"):
        report.find_run(tmp_path, {"path": "onnx_export"})


def test_notebook_links_come_from_the_plan():
    plan = [PlannedRun("02_graph", {"path": "ortmodule"}), PlannedRun("02_graph", {"path": "onnx_export"})]
    written = report.Report(OUTPUTS, plan)
    assert written.planned("02_graph", DEFAULT).name == "02_graph__path=onnx_export"
    with pytest.raises(ValueError, match="the plan runs no 02_graph for tiny-cpu-bf16-onnx_export-opset14"):
        written.planned("02_graph", {**DEFAULT, "opset": 14})


def torch_loaded_by(code: str) -> bool:
    """Whether running `code` in a fresh interpreter imports torch."""
    import subprocess
    import sys

    probe = f"import sys\n{code}\nprint('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return result.stdout.strip() == "True"


RUN_SECTIONS = """
from where223.pipeline.run import load_plan
from where223.study import report
from where223.study.fix import section as fix_section
written = report.Report(report.OUTPUTS, load_plan())
for section in (report.failure, report.cause, fix_section.section):
    section(written)
"""


def test_finding_the_runs_imports_no_torch():
    assert not torch_loaded_by(RUN_SECTIONS)
    assert torch_loaded_by(RUN_SECTIONS + "from where223.gpt2 import reproduce")  # control: the probe sees torch


def verification_record(**verdicts: str) -> dict:
    """A verification record whose fix passes lint and matches_release; `verdicts` gives each control's lint."""
    checks = [{"name": "lint", "verdict": "pass"}, {"name": "matches_release", "verdict": "pass"},
              {"name": "divergence", "verdict": "info"}]
    controls = [{"name": name, "description": "", "breaks": ["lint"], "checks": [{"name": "lint", "verdict": v}]}
                for name, v in verdicts.items()]
    release = {"name": "release: swap_where", "description": "", "breaks": ["matches_release"],
               "checks": [{"name": "matches_release", "verdict": "fail"}]}
    return {"verdict": "pass", "checks": checks, "controls": [*controls, release]}


def test_controls_table_and_the_checks_no_control_broke():
    record = verification_record(**{"4.25": "fail"})
    assert fix_analysis.control_matrix(record) == (
        ["check", "fix", "4.25", "release: swap_where"],
        [["lint", "pass", "fail", "—"], ["matches_release", "pass", "—", "fail"], ["divergence", "info", "—", "—"]],
    )
    assert fix_analysis.uncontrolled_checks(record) == []
    # control: a control that no longer breaks the lint check leaves it uncontrolled
    assert fix_analysis.uncontrolled_checks(verification_record(**{"4.25": "pass"})) == ["lint"]
    assert fix_analysis.uncontrolled_checks({"checks": record["checks"]}) == ["lint", "matches_release"]


def test_the_controls_section_shows_each_numeric_check_on_every_control_that_ran_it():
    """A weak and a strong wrong scale side by side: the write-up shows how close each came to passing."""
    record = {
        "checks": [{"name": "fp32_inference", "value": 3e-08, "tolerance": 1e-05, "verdict": "pass"},
                   {"name": "lint", "value": {"binding_conflicts": 0}, "tolerance": "0", "verdict": "pass"}],
        "controls": [{"name": name, "description": "", "breaks": ["fp32_inference"],
                      "checks": [{"name": "fp32_inference", "value": value, "tolerance": 1e-05, "verdict": "fail"}]}
                     for name, value in (("weak", 2.71e-05), ("strong", 4.84e-04))],
    }
    line = ("- `fp32_inference` (tolerance 1e-05): fix 3e-08 (pass); c1 `weak` 2.71e-05 (fail); "
            "c2 `strong` 0.000484 (fail)")
    assert fix_analysis.control_margins(record) == [line]  # lint's value is not a number: no line
    assert line in fix_analysis.controls_section(record)
    # control: with no control running the check there is nothing to show
    assert fix_analysis.control_margins({**record, "controls": []}) == []
    # a check judged model by model: one line per model it judged
    per_model = {
        "checks": [{"name": "repaired_outputs", "value": {"the probe": 2.25}, "tolerance": {"the probe": 4},
                    "verdict": "pass"}],
        "controls": [{"name": "swapped", "description": "", "breaks": ["repaired_outputs"],
                      "checks": [{"name": "repaired_outputs", "value": {"the probe": 212.75},
                                  "tolerance": {"the probe": 4}, "verdict": "fail"}]}],
    }
    assert fix_analysis.control_margins(per_model) == [
        "- `repaired_outputs` on the probe (tolerance 4): fix 2.25 (pass); c1 `swapped` 213 (fail)"]


def test_a_check_that_judged_less_says_so_in_the_fix_table(outputs_copy):
    fix = report.Report(outputs_copy, load_plan()).fix_run()
    source = report.find_run(outputs_copy, fix.parameters)
    record_path = outputs_copy / source / runs.fix_name(fix.parameters["variant"]) / "verification.json"
    record = load_json(record_path)
    record["checks"][0].update(name="lint", verdict="pass", not_judged="3 type_not_allowed finding(s) (X:T)")
    record_path.write_text(json.dumps(record))
    text = section_text(fix_section.section, outputs_copy)
    assert "| pass (not judged: 3 type_not_allowed finding(s) (X:T)) |" in text
    record["checks"][0]["not_judged"] = ""  # control: a check that left nothing out shows its bare verdict
    record_path.write_text(json.dumps(record))
    assert "not judged: 3 type_not_allowed" not in section_text(fix_section.section, outputs_copy)


def test_the_variant_section_title_names_only_the_cost_it_measured(outputs_copy):
    record_path = outputs_copy / "variants" / "variants-cpu.json"
    record = load_json(record_path)
    if any(isinstance(row.get("syncs_per_step"), (int, float)) for row in record["variants"].values()):
        pytest.skip("the committed variant study counted CUDA syncs")
    title = section_text(variants_section.section, outputs_copy).splitlines()[0]
    assert title == ("## 4. Tracing correctness against host-made tensors (host-device synchronisation not "
                     "measured): every way to write the two lines")
    # control: a study that counted CUDA synchronisations is titled by them
    for row in record["variants"].values():
        row.update(syncs_per_step=2.0, h2d_copies_per_step=1.0)
    record_path.write_text(json.dumps(record))
    text = section_text(variants_section.section, outputs_copy)
    assert text.splitlines()[0] == ("## 4. Tracing correctness against host-device synchronisation: every way to "
                                    "write the two lines")
    assert "`syncs/step` and `H2D/step` count CUDA synchronisations" in text


def test_notes_say_what_the_architecture_sweep_measured_of_4_26():
    """NOTES' sentence on what 4.26.0 changed beyond GPT-2 names the recorded outcomes, not a fix it did not see."""
    from where223.pipeline.paths import ROOT

    summary = load_json(OUTPUTS / "architectures" / "summary.json")
    first, last = summary["releases"][0], summary["releases"][-1]
    notes = (ROOT / "NOTES.md").read_text()
    bullet = notes[notes.index("- **Beyond GPT-2**"):].split("\n- ", 1)[0]
    changed = summary["release_changes"]
    assert {change[first] for change in changed} == {"where_type_error"}
    assert all(change["model_type"] in bullet for change in changed)
    for before, after in {(change[first], change[last]) for change in changed}:
        assert f"from `{before}` to `{after}`" in bullet
    assert "fixes" not in bullet and "not measured" in bullet


@pytest.fixture
def outputs_copy(tmp_path):
    """A copy of the committed outputs/ that a test may change."""
    import shutil

    copied = tmp_path / "outputs"
    shutil.copytree(OUTPUTS, copied)
    return copied


def section_text(section, outputs) -> str:
    """One section of the write-up, built from the records under `outputs`."""
    written = report.Report(outputs, load_plan())
    section(written)
    return written.text()


def test_the_report_follows_a_changed_record(outputs_copy):
    fix = report.Report(outputs_copy, load_plan()).fix_run()
    source = report.find_run(outputs_copy, fix.parameters)
    record_path = outputs_copy / source / runs.fix_name(fix.parameters["variant"]) / "verification.json"
    before = section_text(fix_section.section, outputs_copy)
    record = load_json(record_path)
    record["verdict"] = "fail"
    record["verdict_statement"] = "fail — 1 of 2 checks pass; failed: lint; not measured on cpu: a measured gap"
    record["checks"][0]["verdict"] = "fail"
    record["environment"]["packages"]["transformers"] = "9.99.9"
    record["controls"] = [{"name": "control-x", "description": "built to break nothing", "breaks": [],
                           "checks": [{**check, "verdict": "pass"} for check in record["checks"]]}]
    record_path.write_text(json.dumps(record))
    after = section_text(fix_section.section, outputs_copy)
    assert after != before
    # the control failed nothing, so no check is shown able to fail: those that passed are not judged (study.judging)
    assert "Overall verdict: **fail** — 0 of 1 checks pass; failed: lint; path:ort_trainer not judged: " in after
    assert "its control did not fail (no control that ran it failed); not measured on cpu: a measured gap." in after
    assert "into transformers 9.99.9 and" in after
    assert "| check | fix | c1 |" in after and "- c1 `control-x`: built to break nothing" in after
    assert "Checks that passed for the fix and failed on no control, so not judged: " in after


def test_the_cause_section_follows_the_records(outputs_copy):
    source = report.find_run(outputs_copy, report.Report(outputs_copy, load_plan()).fix_run().parameters)
    lint_path = outputs_copy / source / "graph" / "lint.json"
    reproduce_path = outputs_copy / source / "reproduce.json"
    lint, reproduced = load_json(lint_path), load_json(reproduce_path)
    conflicts = [v for v in lint["violations"] if v["kind"] == "type_binding_conflict"]
    lint["violations"] = [v for v in lint["violations"] if v not in conflicts[1:]]  # keep the first conflict only
    reproduced["error"]["type_binding"]["node"] = "/transformer/h.7/attn/Where"
    lint_path.write_text(json.dumps(lint))
    reproduce_path.write_text(json.dumps(reproduced))
    text = section_text(report.cause, outputs_copy)
    assert "finds 1 type-binding conflict(s) in layer(s) 0 (ONNX Runtime's message names " in text
    others = len(lint["violations"]) - 1
    assert f"names `/transformer/h.7/attn/Where`) and {others} other finding(s):" in text
    assert "one per layer" not in text and "reported only the first" not in text
    assert ", not the node ONNX Runtime named, `/transformer/h.7/attn/Where`)" in text


# --- facts the write-up must state, recomputed here from the records themselves ------------------------------
# The report is built from the records by the code under test, so comparing it with its own output proves only
# that the committed copy is fresh. The checks below read the JSON records directly, with code of their own, and
# each has a control that breaks the report (or a record) and shows the check failing.

TYPED = ("type_error", "where_type_error")
# A bullet of section 6's other outcomes: outcome, operator or stage, the first error line as a code span (absent
# for a missing kernel), then the architectures per release.
OTHER_BULLET = re.compile(
    r"^- (?P<outcome>\w+) at (?P<where>\w+)(?:: (?P<fence>`+) ?(?P<what>.*?) ?(?P=fence))? \((?P<counts>[^()]*)\)$"
)
# A bullet of section 6's type refusals: operator, outcome, architectures per release, then who, per release.
TYPED_BULLET = re.compile(
    r"^- \*\*(?P<operator>\w+)\*\* \((?P<outcome>\w+)\) from .*?: "
    r"(?P<counts>\d+ in \S+?(?:, \d+ in \S+?)*) \((?P<members>[^()]*)\)(?:;|$)"
)
CUT = re.compile(r"(?P<kept>.*)…\[\d+ more characters\]")


def architecture_records(outputs) -> list[dict]:
    """Every per-architecture record under `outputs`/architectures/<release>/ (the summary left aside)."""
    return [json.loads(path.read_text()) for path in sorted((outputs / "architectures").glob("*/*.json"))]


def first_error_line(record: dict) -> str:
    """The first line of a record's error, with its own release's side folder taken out of any path it quotes."""
    lines = ((record.get("error") or {}).get("message") or "").strip().splitlines()
    return lines[0].replace(f".cache/transformers/{record['release']}/", "") if lines else ""


def kernel_operator(record: dict) -> str | None:
    """The operator ONNX Runtime found no kernel for, from its message."""
    found = re.search(r"implementation for (\w+)\(", (record.get("ort") or {}).get("message") or "")
    return found[1] if found else None


def in_other_bullet(record: dict, bullet: re.Match) -> bool:
    """Whether `record` belongs to a bullet of other outcomes: same outcome, operator or stage, first error line."""
    from where223.errors import printable

    if record["outcome"] != bullet["outcome"]:
        return False
    if bullet["what"] is None:
        return kernel_operator(record) == bullet["where"]
    line = first_error_line(record)
    cut = CUT.fullmatch(bullet["what"])
    shown = printable(line, None).startswith(cut["kept"]) if cut else bullet["what"] in (printable(line, None),
                                                                                         repr(line))
    return (record.get("error") or {}).get("stage") == bullet["where"] and shown


def per_release(names: dict[str, set[str]], releases: list[str]) -> str:
    return ", ".join(f"{len(names.get(release, set()))} in {release}" for release in releases)


def table_problems(text: str, rows: list[dict], releases: list[str]) -> list[str]:
    """Section 6's table rows against the records: attempted, built, fed, exported, judged, types accepted."""
    problems = []
    for release in releases:
        mine = [r for r in rows if r["release"] == release]
        stages = [sum(bool(r.get(stage)) for r in mine) for stage in ("built", "fed", "exported", "judged")]
        cells = [len(mine), *stages, sum(r["outcome"] in ("accepted", "missing_kernel") for r in mine),
                 sum(r["outcome"] == "accepted" for r in mine)]
        row = f"| {release} | " + " | ".join(map(str, cells)) + " |"
        if row not in text.splitlines():
            problems.append(f"table: no row {row}")
    return problems


def other_outcome_problems(text: str, rows: list[dict], releases: list[str]) -> list[str]:
    """Section 6's other outcomes against the records: one bullet per outcome, stage and first error line (a
    missing kernel: per operator), no two labels alike, each counting the architectures of each release whose
    records it describes; the bullets and the groups left to the summary are every such group of the records."""
    others = [r for r in rows if r["outcome"] not in ("accepted", *TYPED)]
    groups = {(r["outcome"], kernel_operator(r)) if r["outcome"] == "missing_kernel"
              else (r["outcome"], (r.get("error") or {}).get("stage"), first_error_line(r)) for r in others}
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Other outcomes")), None)
    if start is None:
        return ["other: no paragraph of other outcomes"] if groups else []
    bullets = []
    for line in lines[start + 2:]:
        if not line.startswith("- "):
            break
        bullets.append(line)
    after = "\n".join(lines[start + 2 + len(bullets):start + 4 + len(bullets)])
    more = int(found[1]) if (found := re.search(r"^(\d+) more groups in the summary\.$", after, re.MULTILINE)) else 0
    problems = [] if len(bullets) + more == len(groups) else [
        f"other: {len(bullets)} bullets and {more} more groups, but the records make {len(groups)} groups"]
    labels = [bullet.rsplit(" (", 1)[0] for bullet in bullets]
    problems += [f"other: label printed twice: {label}" for label in sorted({x for x in labels if labels.count(x) > 1})]
    for bullet in bullets:
        parsed = OTHER_BULLET.match(bullet)
        if parsed is None:
            problems.append(f"other: not a group of other outcomes: {bullet}")
            continue
        names: dict[str, set[str]] = {}
        for record in others:
            if in_other_bullet(record, parsed):
                names.setdefault(record["release"], set()).add(record["model_type"])
        if parsed["counts"] != per_release(names, releases):
            problems.append(f"other: {bullet} but the records count {per_release(names, releases)}")
    return problems


def typed_group_problems(text: str, rows: list[dict], releases: list[str]) -> list[str]:
    """Section 6's type refusals against the records: each bullet's count per release is the number of
    architectures it names there, each named architecture's record has the bullet's outcome, and every type
    refusal of the records is named exactly once."""
    outcome = {(r["release"], r["model_type"]): r["outcome"] for r in rows}
    named: list[tuple[str, str]] = []
    problems = []
    for line in text.splitlines():
        if not line.startswith("- **"):
            continue
        parsed = TYPED_BULLET.match(line)
        if parsed is None:
            problems.append(f"typed: not a group of type refusals: {line[:120]}")
            continue
        names = {release: set(listed.split(", ")) for release, listed in
                 (member.split(": ", 1) for member in parsed["members"].split("; "))}
        if parsed["counts"] != per_release(names, releases):
            problems.append(f"typed: {parsed['operator']} counts {parsed['counts']} but names "
                            f"{per_release(names, releases)}")
        for release, types in names.items():
            named += [(release, name) for name in types]
            problems += [f"typed: {name} in {release} is {outcome.get((release, name))}, not {parsed['outcome']}"
                         for name in sorted(types) if outcome.get((release, name)) != parsed["outcome"]]
    refused = sorted((r["release"], r["model_type"]) for r in rows if r["outcome"] in TYPED)
    if sorted(named) != refused:
        problems.append(f"typed: the bullets name {len(named)} refusals, the records hold {len(refused)}")
    return problems


def architecture_problems(text: str, outputs) -> list[str]:
    """What section 6 of `text` gets wrong about the architecture records under `outputs` (empty: nothing)."""
    text = text[text.index("## 6."):]
    text = text[: text.index("\n## ", 1)] if "\n## " in text[1:] else text
    rows = architecture_records(outputs)
    releases = sorted({r["release"] for r in rows})
    return [*table_problems(text, rows, releases), *other_outcome_problems(text, rows, releases),
            *typed_group_problems(text, rows, releases)]


@pytest.fixture
def architectures_copy(tmp_path):
    """An outputs folder holding a copy of the committed architecture records, summary and figure only."""
    import shutil

    shutil.copytree(OUTPUTS / "architectures", tmp_path / "outputs" / "architectures")
    return tmp_path / "outputs"


def test_the_architectures_section_states_what_the_records_hold():
    assert architecture_problems(report.build(OUTPUTS), OUTPUTS) == []


def test_control_counts_summed_over_releases_are_caught(architectures_copy, monkeypatch):
    from where223.study.architectures import analysis as architectures

    def summed(group, releases):  # the old count: records of every release, for each release
        return {release: sum(map(len, group["by_release"].values())) for release in releases}

    monkeypatch.setattr(architectures, "architectures_per_release", summed)
    written = section_text(architectures_section.section, architectures_copy)
    problems = architecture_problems(written, architectures_copy)
    assert any(p.startswith("other: ") and "but the records count" in p for p in problems)
    assert any(p.startswith("typed: ") and "counts" in p for p in problems)


def test_control_labels_without_the_first_error_line_are_caught(architectures_copy, monkeypatch):
    monkeypatch.setattr(architectures_section, "outcome_labels",
                        lambda groups: [f"{g['outcome']} at {g['operator']}" for g in groups])
    written = section_text(architectures_section.section, architectures_copy)
    problems = architecture_problems(written, architectures_copy)
    assert "other: label printed twice: - not_built at build" in problems


def test_control_a_record_the_summary_does_not_reflect_is_caught(architectures_copy):
    """Records changed after the summary was written: the report (read from the summary) no longer matches them."""
    rows = architecture_records(architectures_copy)
    built = next(r for r in rows if r["outcome"] == "not_built")
    path = architectures_copy / "architectures" / built["release"] / f"{built['model_type']}.json"
    built["error"]["message"] = "\nanother first line\n" + built["error"]["message"]
    built["built"] = True
    path.write_text(json.dumps(built))
    refused = next(r for r in rows if r["outcome"] == "type_error")
    refused["outcome"] = "accepted"
    path = architectures_copy / "architectures" / refused["release"] / f"{refused['model_type']}.json"
    path.write_text(json.dumps(refused))
    written = section_text(architectures_section.section, architectures_copy)
    problems = architecture_problems(written, architectures_copy)
    kinds = {p.split(":", 1)[0] for p in problems}
    assert kinds == {"table", "other", "typed"}, problems
    assert any("but the records make" in p for p in problems)
    assert f"typed: {refused['model_type']} in {refused['release']} is accepted, not type_error" in problems


def structure_problems(text: str, outputs) -> list[str]:
    """One numbered section per source notebook, in order, each notebook linked by an executed copy, and every
    relative link naming a file under `outputs`."""
    from where223.pipeline.paths import NOTEBOOKS

    stems = sorted(path.stem for path in NOTEBOOKS.glob("*.ipynb"))
    problems = []
    numbers = re.findall(r"^## (\d+)\. ", text, re.MULTILINE)
    if numbers != [str(n) for n in range(1, len(stems) + 1)]:
        problems.append(f"sections numbered {numbers} for {len(stems)} notebooks")
    problems += [f"no link to an executed {stem}" for stem in stems
                 if not re.search(rf"\]\(notebooks/{re.escape(stem)}(__[^)]*)?\.ipynb\)", text)]
    problems += [f"links to missing {link}" for link in re.findall(r"\]\(([^)#]+)\)", text)
                 if not (outputs / link).exists()]
    return problems


def test_a_section_per_notebook_and_every_link_resolves():
    assert structure_problems(report.build(OUTPUTS), OUTPUTS) == []


def test_control_a_missing_section_or_file_is_caught(outputs_copy, monkeypatch):
    (outputs_copy / "matrix" / "NOTES.md").unlink()
    assert structure_problems(report.build(outputs_copy), outputs_copy) == ["links to missing matrix/NOTES.md"]
    kept = [s for s in report.sections() if s is not architectures_section.section]
    monkeypatch.setattr(report, "sections", lambda: kept)
    assert structure_problems(report.build(outputs_copy), outputs_copy)[:2] == [
        "sections numbered ['1', '2', '3', '4', '5', '7', '8', '9', '10'] for 10 notebooks",
        "no link to an executed 06_architectures"]


def test_the_emulated_variant_columns_say_for_how_many_variants_the_divergences_are_cpu_bf16s(tmp_path):
    from where223.study.variants.record import EMULATED_TYPES

    def row(status, count, node):
        return {"ort": {"status": status}, "divergences": count, "attention_divergences": count,
                "first_divergence": node and {"node": node}, "attention_casts": 3}  # fmt: skip

    bf16 = {"variants": {"a": row("missing_kernel", 2, "/h.0/attn/Div"), "b": row("missing_kernel", 0, None)}}
    emulated = {"not_measured": "step times", "variants": {"a": row("accepted", 2, "/h.0/attn/Div"),
                                                           "b": row("accepted", 0, None)}}  # fmt: skip
    (tmp_path / EMULATED_TYPES).parent.mkdir(parents=True)

    def text() -> str:
        (tmp_path / EMULATED_TYPES).write_text(json.dumps(emulated))
        return "\n".join(variants_section.emulated_lines(report.Report(tmp_path, load_plan()), bf16))

    assert "changes for no variant; the divergence columns (how many, how many in attention, the first node) " \
           "are CPU bf16's for 2 of 2 variants, with float16" in text()
    emulated["variants"]["b"] = row("accepted", 6, "/h.0/attn/c_attn/Reshape")  # control: one variant differs
    assert "are CPU bf16's for 1 of 2 variants (not for `b`)" in text()
