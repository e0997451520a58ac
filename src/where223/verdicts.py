"""The one set of verdict words: what every check, record, table and figure of the project says of a check."""

from __future__ import annotations

PASS = "pass"
FAIL = "fail"
INFO = "info"  # measured and shown, judged against nothing
NOT_MEASURED = "not measured"  # always with the reason it could not be measured; never counted as a pass
# measured, but the comparison could not have failed: its reference does not distinguish (constant or all-zero
# reference outputs) or its negative control did not fail; always with that reason; never counted as a pass
NOT_JUDGED = "not judged"
VERDICTS: tuple[str, ...] = (PASS, FAIL, INFO, NOT_MEASURED, NOT_JUDGED)


def verdict(ok: bool) -> str:
    """PASS when `ok`, else FAIL."""
    return PASS if ok else FAIL
