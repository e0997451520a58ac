"""Whether a numeric check could have failed: the one rule every study's comparison against a reference is judged by.

A comparison whose reference does not distinguish (every reference output all zero, or constant: one value in
every element, where there is more than one) is passed by any graph that outputs that constant, whatever it
computes; a check whose control (the same check run on something built to fail it) did not fail has not been shown
able to fail. Such a check is `not judged` (`where223.verdicts.NOT_JUDGED`) with the reason, never `pass`: its
numbers are kept and shown, and counted apart. A check that failed did show it can fail: it stays `fail`.

The rule is applied where a check is computed (the class and remedies cells, `where223.study.classes.run` and
`where223.study.remedies.run`; the fix verification, `where223.study.fix.run`) and again where committed records are
read (each study's `analysis`), from the fields a record keeps: each reference output's `max_abs_reference`,
`reference_spread` and `reference_size` (records made before the rule hold only the first), and the control's
`fails_as_built`; so records made before the rule are judged by it too. Standard library only, but for
`reference_facts`, which the cells call on the arrays they hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from where223.verdicts import NOT_JUDGED, NOT_MEASURED, PASS, verdict

ALL_ZERO = "the reference outputs are all zero"
CONSTANT = "the reference outputs are constant (one value in every element)"
CONTROL_DID_NOT_FAIL = "its control did not fail"


def reference_facts(array: Any) -> dict[str, Any]:
    """What the rule reads of one reference output: max |x|, max x - min x and the count over its finite elements."""
    import numpy as np

    values = np.asarray(array, np.float64).ravel()
    finite = values[np.isfinite(values)]
    if not finite.size:
        return {"max_abs_reference": 0.0, "reference_spread": 0.0, "reference_size": 0}
    return {"max_abs_reference": float(np.abs(finite).max()), "reference_spread": float(finite.max() - finite.min()),
            "reference_size": int(finite.size)}  # fmt: skip


def _constant(row: Mapping[str, Any]) -> bool:
    """All zero, or one value in more than one element (unknown, so not constant, in a record made before the rule)."""
    if row.get("max_abs_reference") == 0:
        return True
    return row.get("reference_spread") == 0 and (row.get("reference_size") or 0) > 1


def undistinguishing(references: Iterable[Mapping[str, Any]]) -> str:
    """Why reference outputs (`reference_facts` of each) cannot tell one graph from another: ALL_ZERO, CONSTANT, or
    "" when one of them can (or none is given)."""
    rows = list(references)
    if not rows:
        return ""
    if all(row.get("max_abs_reference") == 0 for row in rows):
        return ALL_ZERO
    return CONSTANT if all(_constant(row) for row in rows) else ""


def not_judged_reason(references: Iterable[Mapping[str, Any]] = (), control_failed: bool | None = None,
                      control: str = "") -> str:  # fmt: skip
    """Why a comparison could not have failed ("" when it could): its references do not distinguish, or its control
    (`control` says what it was; `control_failed` None when the check has none) did not fail."""
    reasons = [undistinguishing(references)]
    if control_failed is False:
        reasons.append(f"{CONTROL_DID_NOT_FAIL} ({control})" if control else CONTROL_DID_NOT_FAIL)
    return "; ".join(reason for reason in reasons if reason)


def judged(ok: bool, reason: str) -> str:
    """The verdict on a check that passed when `ok`: NOT_JUDGED when it could not have failed (`reason`), else PASS
    or FAIL (a check that failed could)."""
    return NOT_JUDGED if ok and reason else verdict(ok)


def numeric_verdict(check: Mapping[str, Any] | None) -> tuple[str, str]:
    """A recorded comparison against a reference (the class and remedies studies' `numerics` and `pair`:
    `status`, `within_tolerance`, `outputs` with each reference's facts, and `control` with `fails_as_built` where it
    has one) judged by the rule: (verdict, reason); NOT_MEASURED with its reason when it was not measured."""
    if not check or check.get("status") != "measured":
        return NOT_MEASURED, str((check or {}).get("reason") or "not run")
    control = check.get("control")
    failed = None if not isinstance(control, Mapping) else control.get("fails_as_built") is True
    reason = not_judged_reason(check.get("outputs") or [], failed)  # the record's control says what it was
    said = judged(check.get("within_tolerance") is True, reason)
    return said, reason if said == NOT_JUDGED else ""


def passed(check: Mapping[str, Any] | None) -> bool:
    """Whether a recorded comparison passes under the rule (what a study counts as within tolerance)."""
    return numeric_verdict(check)[0] == PASS


def not_judged(check: Mapping[str, Any] | None) -> bool:
    """Whether a recorded comparison is not judged under the rule."""
    return numeric_verdict(check)[0] == NOT_JUDGED
