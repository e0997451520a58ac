"""The one outcome vocabulary: every value defined in one sentence, in the code and in README alike."""

from __future__ import annotations

import re

from where223.graph.ort import OrtVerdict
from where223.outcomes import DEFINITIONS, Outcome, from_verdict
from where223.pipeline.paths import ROOT

ISSUE_VOCABULARY = [
    "accepted", "where_type_error", "type_error", "missing_kernel", "other_error", "not_exported", "not_built",
    "not_fed", "not_applicable", "not_run", "timeout", "crashed",
]  # fmt: skip


def test_the_vocabulary_is_the_twelve_values_each_defined_in_one_sentence():
    assert [str(o) for o in Outcome] == ISSUE_VOCABULARY
    for outcome in Outcome:
        sentence = DEFINITIONS[outcome]
        plain = sentence.replace("e.g.", "eg").replace("i.e.", "ie")
        assert plain.endswith(".") and plain.count(". ") == 0 and plain[0].isupper(), outcome  # one sentence
        assert outcome.definition == sentence


def test_every_verdict_of_onnx_runtime_is_an_outcome():
    assert {from_verdict(v) for v in OrtVerdict} == {o for o in Outcome if o.judged} | {Outcome.TIMEOUT}


SECTION = "### Sweep outcomes"


def readme_definitions() -> dict[str, str]:
    """The rows `| \\`value\\` | sentence |` of README's section on sweep outcomes."""
    text = (ROOT / "README.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n#", 1)[0] if SECTION in text else ""
    return dict(re.findall(r"^\| `([a-z_]+)` \| (.+?) \|$", section, flags=re.MULTILINE))


def test_readme_defines_each_outcome_as_the_code_does():
    table = readme_definitions()
    assert {key: table.get(key) for key in ISSUE_VOCABULARY} == {str(o): d for o, d in DEFINITIONS.items()}


def test_control_a_readme_sentence_that_drifts_is_caught(monkeypatch):
    table = readme_definitions()
    table["timeout"] = "The cell took long."
    assert table != {str(o): d for o, d in DEFINITIONS.items()}
