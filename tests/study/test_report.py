"""The committed write-up is exactly what the code makes of the committed records."""

import re

from where223.pipeline.paths import OUTPUTS
from where223.study import report


def test_committed_report_is_regenerated_from_the_records():
    assert (OUTPUTS / "REPORT.md").read_text() == report.build(OUTPUTS)


def test_every_linked_file_exists():
    text = (OUTPUTS / "REPORT.md").read_text()
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert len(links) > 20
    missing = [link for link in links if not (OUTPUTS / link).exists()]
    assert missing == []


def test_quotes_recorded_numbers():
    text = report.build(OUTPUTS)
    verification = report.Report(OUTPUTS).json(f"{report.FIX}/verification.json")
    assert f"Overall verdict: **{verification['verdict']}**" in text
    assert "| `ort_trainer` | reproduced | `/_original_module/transformer/h.0/attn/Where` |" in text
