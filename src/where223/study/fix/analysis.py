"""What a verification record says, read from the record alone (no torch): each check's verdict as tables show
it, the overall verdict, the table check x (fix, controls), each numeric check's margin on every control, and the
checks no control broke (checks not shown able to fail).

Every check is judged here again by `where223.study.judging` (`judged_checks`): one that passed with no control
failing it, or whose recorded reference is all zero or constant, is `not judged`, never a pass, so a record made
before that rule is judged by it too; the overall verdict is then counted again from the checks so judged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from where223 import markdown
from where223.study import judging
from where223.verdicts import FAIL, NOT_JUDGED, PASS

NOT_RUN = "—"
NO_CONTROL_FAILED = "no control that ran it failed"


def failing_on_controls(verification: Mapping[str, Any]) -> set[str]:
    """The names of the checks some control failed."""
    return {check["name"] for control in verification.get("controls", []) for check in control["checks"]
            if check["verdict"] == FAIL}


def judged_check(check: Mapping[str, Any], failing: set[str]) -> dict[str, Any]:
    """A recorded check judged by the rule: a pass whose reference does not distinguish, or that no control failed
    (`failing`: the names of the checks some control failed), is NOT_JUDGED with why; any other check as recorded."""
    if check["verdict"] != PASS:
        return dict(check)
    reason = judging.not_judged_reason(check.get("reference") or [], check["name"] in failing, NO_CONTROL_FAILED)
    return {**check, "verdict": NOT_JUDGED, "not_judged": reason} if reason else dict(check)


def judged_checks(verification: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The fix's checks of a verification record, each judged by the rule (`judged_check`)."""
    failing = failing_on_controls(verification)
    return [judged_check(check, failing) for check in verification["checks"]]


def verdict_cell(check: Mapping[str, Any]) -> str:
    """A check's verdict as a table shows it: with what the check left out of it, when it left something out, or
    why it is not judged."""
    left_out = check.get("not_judged", "")
    if check["verdict"] == NOT_JUDGED:
        return f"{NOT_JUDGED} ({left_out})" if left_out else NOT_JUDGED
    return f"{check['verdict']} (not judged: {left_out})" if left_out else str(check["verdict"])


def overall_verdict(verification: Mapping[str, Any]) -> str:
    """'Overall verdict: **pass** — what it covers', from the record's own statement when the rule changes none of
    its checks, else counted again from the checks as the rule judges them."""
    verdict, statement = verification["verdict"], verification.get("verdict_statement", "")
    judged = judged_checks(verification)
    changed = [check for check, recorded in zip(judged, verification["checks"], strict=True)
               if check["verdict"] != recorded["verdict"]]  # fmt: skip
    if changed:
        voting = [check for check in judged if check["verdict"] in (PASS, FAIL)]
        failed = [check["name"] for check in voting if check["verdict"] == FAIL]
        verdict = FAIL if failed else PASS
        statement = f"{verdict} — {len(voting) - len(failed)} of {len(voting)} checks pass"
        statement += f"; failed: {', '.join(failed)}" if failed else ""
        statement += "".join(f"; {check['name']} not judged: {check['not_judged']}" for check in changed)
        recorded = verification.get("verdict_statement", "")  # what was not measured, as the record says it
        tail = next((recorded[recorded.index(said):] for said in ("; not measured on ", "; nothing asked went")
                     if said in recorded), "")  # fmt: skip
        statement += tail
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
        for check in judged_checks(verification)
    ]
    return header, rows

def uncontrolled_checks(verification: Mapping[str, Any]) -> list[str]:
    """The checks recorded as passing for the fix that fail on no control: checks not shown able to fail (none in a
    record made under the rule, which records them not judged)."""
    failing = failing_on_controls(verification)
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
    for check in judged_checks(verification):
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
        ("Checks that passed for the fix and failed on no control, so not judged: "
         + ", ".join(f"`{n}`" for n in uncontrolled)
         if uncontrolled else "Every check that passed for the fix failed on at least one control."),
        "",
    ]
