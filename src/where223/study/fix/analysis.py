"""What a verification record says, read from the record alone (no torch): each check's verdict as tables show
it, the overall verdict, the table check x (fix, controls), each numeric check's margin on every control, and the
checks no control broke (checks not shown able to fail)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from where223 import markdown

NOT_RUN = "—"

def verdict_cell(check: Mapping[str, Any]) -> str:
    """A check's verdict as a table shows it: with what the check left out of it, when it left something out."""
    left_out = check.get("not_judged", "")
    return f"{check['verdict']} (not judged: {left_out})" if left_out else str(check["verdict"])

def overall_verdict(verification: Mapping[str, Any]) -> str:
    """'Overall verdict: **pass** — what it covers', from the record's own statement when it has one."""
    verdict, statement = verification["verdict"], verification.get("verdict_statement", "")
    covers = statement[len(verdict):] if statement.startswith(verdict) else ""
    return f"Overall verdict: **{verdict}**{covers}."

def control_matrix(verification: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the table check x (fix, each control): the verdicts, '—' where a control ran no
    such check."""
    controls = verification.get("controls", [])
    header = ["check", "fix", *[control["name"] for control in controls]]
    verdicts = [{check["name"]: check["verdict"] for check in control["checks"]} for control in controls]
    rows = [
        [check["name"], check["verdict"], *[found.get(check["name"], NOT_RUN) for found in verdicts]]
        for check in verification["checks"]
    ]
    return header, rows

def uncontrolled_checks(verification: Mapping[str, Any]) -> list[str]:
    """The checks that pass for the fix and fail on no control: checks not shown able to fail."""
    failing = {check["name"] for control in verification.get("controls", []) for check in control["checks"]
               if check["verdict"] == "fail"}
    return [check["name"] for check in verification["checks"]
            if check["verdict"] == "pass" and check["name"] not in failing]

def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)

def control_margins(verification: Mapping[str, Any]) -> list[str]:
    """One line per check with a numeric value and tolerance (per model, for a check judged model by model): its
    value on the fix and on each control that ran it (c1, c2, ... as in the controls table), with the verdict: how
    far each control is from passing."""
    controls = verification.get("controls", [])
    lines = []
    for check in verification["checks"]:
        value, tolerance = check.get("value"), check.get("tolerance")
        if _number(value) and _number(tolerance):
            keys: list[str | None] = [None]
        elif isinstance(value, dict) and isinstance(tolerance, dict) and value and all(
                _number(value[key]) and _number(tolerance.get(key)) for key in value):
            keys = list(value)
        else:
            continue
        ran = [(number, control["name"], found) for number, control in enumerate(controls, start=1)
               for found in control["checks"] if found["name"] == check["name"]]
        for key in keys if ran else []:
            def at(record: Mapping[str, Any], field: str, key: str | None = key) -> Any:
                found = record.get(field)
                return found if key is None else (found.get(key, NOT_RUN) if isinstance(found, dict) else found)

            label = f"`{check['name']}`" + (f" on {key}" if key else "")
            on_controls = "; ".join(f"c{number} `{name}` {markdown.cell(at(found, 'value'))} ({found['verdict']})"
                                    for number, name, found in ran)
            tolerance, value = markdown.cell(at(check, "tolerance")), markdown.cell(at(check, "value"))
            lines.append(f"- {label} (tolerance {tolerance}): fix {value} ({check['verdict']}); {on_controls}")
    return lines

def controls_section(verification: Mapping[str, Any]) -> list[str]:
    """The negative controls of a verification record: what each breaks, the table, each numeric check's value
    on the fix and on the controls, and any check that passed without a failing control."""
    controls = verification.get("controls", [])
    if not controls:
        return ["**Negative controls:** none recorded, so no check here is shown able to fail.", ""]
    uncontrolled = uncontrolled_checks(verification)
    margins = control_margins(verification)
    header, rows = control_matrix(verification)
    labels = [f"c{number}" for number in range(1, len(controls) + 1)]  # short columns: the table fits a page
    return [
        "**Negative controls.** The same checks, run on controls built to break them (columns c1, c2, ... below):",
        "",
        *[f"- c{number} `{control['name']}`: {control['description']}"
          for number, control in enumerate(controls, start=1)],
        "",
        *markdown.table([*header[:2], *labels], rows),
        "",
        *(["Measured values against each tolerance, on the fix and on the controls that ran the check:", "",
           *margins, ""] if margins else []),
        ("Checks that passed for the fix and failed on no control: " + ", ".join(f"`{n}`" for n in uncontrolled)
         if uncontrolled else "Every check that passed for the fix failed on at least one control."),
        "",
    ]
