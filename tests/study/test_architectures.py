"""The architecture sweep: the records-only analysis, the cell's building blocks, and two real architectures end to
end through the sweep's worker (slow). The engine's resume, timeout and crash logic: tests/sweep/."""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

import pytest

from where223.study.architectures import analysis as architectures

INSTALLED = metadata.version("transformers")

def _record(model_type, release, outcome, op=None, source=None, first=None):
    record = {"model_type": model_type, "release": release, "outcome": outcome, "built": True, "fed": True}
    if op:
        node = f"/{model_type}/{op}"
        record.update(exported=True, judged=True)
        record["ort"] = {"type_binding": {"op_type": op, "node": node}}
        record["blame"] = [{"node": "/other", "source": "elsewhere.py:1"}, {"node": node, "source": source}]
        record["divergence"] = {"first": first}
    return record


def test_failures_group_by_operator_and_the_line_that_names_ort_node():
    first = {"file": "m.py", "line": 3, "eager_dtype": "bfloat16", "graph_dtype": "float"}
    rows = [
        _record("a", "4.25.1", "where_type_error", "Where", "gpt2.py:201", first),
        _record("b", "4.25.1", "where_type_error", "Where", "gpt2.py:201", first),
        _record("c", "4.25.1", "type_error", "LayerNormalization", "bert.py:9"),
        _record("a", "4.26.0", "missing_kernel", "Gemm", None),
        _record("d", "4.25.1", "accepted"),
    ]
    rows[3].pop("ort")
    rows[3]["error"] = {"stage": "export", "message": "boom\nmore"}
    groups = architectures.failure_groups(rows)
    assert groups[0]["source"] == "gpt2.py:201", "the blamed line of ONNX Runtime's node, not the first blamed"
    assert groups[0]["by_release"] == {"4.25.1": ["a", "b"]}
    assert groups[0]["first_divergences"] == {"m.py:3 bfloat16->float": 2}
    assert {g["operator"] for g in groups} == {"Where", "LayerNormalization", "export"}
    assert all("d" not in names for g in groups for names in g["by_release"].values())
    changes = architectures.release_changes(rows)
    assert changes == [{"model_type": "a", "4.25.1": "where_type_error", "4.26.0": "missing_kernel"}]
    assert architectures.counts(rows)["exported"] == 4


@pytest.mark.slow
def test_two_architectures_end_to_end(tmp_path):
    from where223.pipeline import paths, records
    from where223.sweep import worker

    for model in ("gpt2", "bert"):
        key = {"stack": "project", "model": model, "recipe": "cpu_bf16_autocast", "exporter": "torchscript",
               "opset": 17, "mode": "train"}  # fmt: skip
        facts = {"torch": "2.1.2", "transformers": INSTALLED}
        record = worker.run_cell(key, sys.executable, paths.ROOT / "src", tmp_path / "work" / model, 300, stack=facts,
                                 runner="where223.study.architectures.run")
        records.write_json(tmp_path / "out" / INSTALLED / f"{model}.json", record)
    summary = architectures.summarize(tmp_path / "out")
    assert summary["counts"][INSTALLED] == {
        "attempted": 2, "built": 2, "fed": 2, "exported": 2, "judged": 2, "types_accepted": 0, "accepted": 0
    }  # fmt: skip
    gpt2 = json.loads((tmp_path / "out" / INSTALLED / "gpt2.json").read_text())
    assert gpt2["outcome"] == "where_type_error"
    assert gpt2["environment"]["packages"]["transformers"] == INSTALLED
    where = architectures.first_root(gpt2)
    assert where["source"].endswith("models/gpt2/modeling_gpt2.py:201")
    assert gpt2["divergence"]["count"] >= 1 and gpt2["divergence"]["first"]["eager_dtype"] == "bfloat16"
    bert = json.loads((tmp_path / "out" / INSTALLED / "bert.json").read_text())
    assert bert["exported"] and bert["judged"]
    assert Path(tmp_path / "out" / "summary.json").is_file()


def _many_records(count: int) -> list[dict]:
    outcomes = ["accepted", "where_type_error", "type_error", "not_exported", "missing_kernel"]
    rows = []
    for index in range(count):
        for release in architectures.RELEASES:
            row = _record(f"arch{index:03d}", release, outcomes[index % len(outcomes)])
            if row["outcome"].endswith("type_error"):
                row["ort"] = {"type_binding": {"op_type": "Where", "node": "n", "bound_types": ["tensor(float)"] * 2}}
            rows.append(row)
    return rows


def _row_pitch_pt(png: Path, rows: int) -> float:
    from PIL import Image

    from where223.figures import PNG_DPI

    with Image.open(png) as image:
        return image.height / PNG_DPI * 72 / rows


def test_many_architectures_make_a_tall_figure_with_legible_rows(tmp_path, monkeypatch):
    from where223.figures import MIN_TEXT_PX, TEXT_SIZE, displayed_text_px
    from where223.study.architectures import figure as architectures_figure

    png = architectures_figure.draw(_many_records(143), tmp_path / "outcomes")[0]
    assert displayed_text_px(png) >= MIN_TEXT_PX
    assert _row_pitch_pt(png, 143) >= TEXT_SIZE
    monkeypatch.setattr(architectures_figure, "ROW_INCHES", 0.05)  # control: rows squeezed into a short figure
    squeezed = architectures_figure.draw(_many_records(143), tmp_path / "squeezed")[0]
    assert _row_pitch_pt(squeezed, 143) < TEXT_SIZE


def test_the_write_up_section_states_counts_groups_and_changes_from_the_summary(tmp_path):

    first = {"file": "m.py", "line": 3, "eager_dtype": "bfloat16", "graph_dtype": "float"}
    rows = [
        _record("a", "4.25.1", "where_type_error", "Where", "gpt2.py:201", first),
        _record("b", "4.25.1", "where_type_error", "Where", "gpt2.py:201", first),
        _record("a", "4.26.0", "accepted"),
        _record("b", "4.26.0", "where_type_error", "Where", "gpt2.py:201", first),
    ]
    text = _section_text(tmp_path, rows)
    assert "| 4.25.1 | 2 | 2 | 2 | 2 | 2 | 0 | 0 |" in text and "| 4.26.0 | 2 | 2 | 2 | 1 | 1 | 1 | 1 |" in text
    assert "**Where** (where_type_error) from `gpt2.py:201` at `gpt2.py:201`" in text
    assert ": 2 in 4.25.1, 1 in 4.26.0 (4.25.1: a, b; 4.26.0: b)" in text, "architectures per release, not 3"
    assert "`m.py:3 bfloat16->float` ×3" in text
    assert "a where_type_error → accepted" in text


def _failed(model_type, release, first_line, stage="build", outcome="not_built"):
    """A record of an architecture that failed at `stage` with an error whose first line is `first_line`; every
    such record shares the rest of the message."""
    message = f"\n{first_line}\n`pip install something`. You may need to restart your runtime.\n"
    return {"model_type": model_type, "release": release, "outcome": outcome, "built": stage != "build",
            "error": {"stage": stage, "message": message}}


def _section_text(tmp_path, rows) -> str:
    """Section 6 of the write-up, written from the records `rows` through the summary as `make run` does."""
    from where223.study import report
    from where223.study.architectures import section as architectures_section

    for row in rows:
        path = tmp_path / "architectures" / row["release"] / f"{row['model_type']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(row))
    architectures.summarize(tmp_path / "architectures")
    (tmp_path / "architectures" / "outcomes.png").write_bytes(b"")
    section = report.Report(tmp_path, [])
    architectures_section.section(section)
    return section.text()


def _other_outcomes(tmp_path, rows) -> list[str]:
    """The bullets of section 6's other outcomes, written from `rows` through the summary as `make run` does."""
    lines = _section_text(tmp_path, rows).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Other outcomes")) + 2
    return [line for line in lines[start:] if line.startswith("- ")]


TIMM = "XModel requires the timm library but it was not found in your environment."
NATTEN = "XModel requires the natten library but it was not found in your environment."
# Two groups differing only in the first line of their error; `one` fails alike under both releases.
TWO_LINES = [_failed("one", "4.25.1", TIMM), _failed("one", "4.26.0", TIMM),
             _failed("two", "4.25.1", NATTEN), _failed("three", "4.25.1", NATTEN), _failed("two", "4.26.0", NATTEN)]
TWO_GROUPS = [f"- not_built at build: `{NATTEN}` (2 in 4.25.1, 1 in 4.26.0)",
              f"- not_built at build: `{TIMM}` (1 in 4.25.1, 1 in 4.26.0)"]


def test_two_first_error_lines_are_two_groups_counted_in_architectures_per_release(tmp_path):
    assert _other_outcomes(tmp_path, TWO_LINES) == TWO_GROUPS


def test_control_a_label_without_the_first_line_prints_two_groups_alike(tmp_path, monkeypatch):
    from where223.study.architectures import section

    monkeypatch.setattr(section, "outcome_labels", lambda groups: [f"{g['outcome']} at {g['operator']}"
                                                                   for g in groups])
    shown = _other_outcomes(tmp_path, TWO_LINES)
    assert shown != TWO_GROUPS and [line.split(" (")[0] for line in shown] == ["- not_built at build"] * 2


def test_control_an_architecture_failing_under_both_releases_counts_once_in_each(tmp_path, monkeypatch):
    def summed(group, releases):  # the old count: every record of the group, whatever its release
        return {release: sum(map(len, group["by_release"].values())) for release in releases}

    assert architectures.architectures_per_release({"by_release": {"4.25.1": ["one"], "4.26.0": ["one"]}},
                                                   ["4.25.1", "4.26.0"]) == {"4.25.1": 1, "4.26.0": 1}
    monkeypatch.setattr(architectures, "architectures_per_release", summed)
    assert _other_outcomes(tmp_path, TWO_LINES)[1] == f"- not_built at build: `{TIMM}` (2 in 4.25.1, 2 in 4.26.0)"


@pytest.mark.parametrize("ends", [("(timm)", "(tf32)"), ("(timm)", "(natten)")], ids=["same-length", "longer"])
def test_first_lines_that_differ_past_the_cut_are_two_groups_with_two_labels(tmp_path, monkeypatch, ends):
    """Lines alike for longer than the label shows (and than the 120 characters the group key once kept) are
    still two groups, and print whole so that their labels differ by what the lines say (not only by how many
    characters the cut left out, when one line is longer)."""
    from where223.errors import printable
    from where223.study.architectures import section

    alike = "XModel requires " + "a library " * 13  # 146 characters in common, then the ends that differ
    rows = [_failed(model_type, "4.25.1", alike + end) for model_type, end in zip(("one", "two"), ends, strict=True)]
    expected = sorted(f"- not_built at build: `{alike + end!r}` (1 in 4.25.1)" for end in ends)
    assert sorted(_other_outcomes(tmp_path / "whole", rows)) == expected
    # control: labels cut without a look at each other show the same text before the cut
    monkeypatch.setattr(section, "outcome_labels", lambda groups: [
        f"{g['outcome']} at {g['operator']}: `{printable(g['what'], section.WHAT_LIMIT)}`" for g in groups])
    cut = _other_outcomes(tmp_path / "cut", rows)
    assert sorted(cut) != expected and len({line.split("…")[0] for line in cut}) == 1
    # control: a key cut after 120 characters, as it once was, makes the two lines one group
    key = architectures.failure_key
    monkeypatch.setattr(architectures, "failure_key", lambda record: (*key(record)[:2], key(record)[2][:120]))
    assert len(_other_outcomes(tmp_path / "merged", rows)) == 1


def test_an_error_quoting_a_release_side_folder_groups_with_the_same_error_of_the_other_release(tmp_path):
    line = "Expected a constant [Caused by the value # {}transformers/models/vilt/modeling_vilt.py:159:0"
    rows = [_failed("vilt", "4.25.1", line.format(""), "export", "not_exported"),
            _failed("vilt", "4.26.0", line.format(".cache/transformers/4.26.0/"), "export", "not_exported")]
    assert _other_outcomes(tmp_path / "side", rows) == [
        f"- not_exported at export: `{line.format('')}` (1 in 4.25.1, 1 in 4.26.0)"]
    rows[1] = _failed("vilt", "4.26.0", line.format("elsewhere/"), "export", "not_exported")  # control: other folder
    assert len(_other_outcomes(tmp_path / "elsewhere", rows)) == 2


def test_source_notebook_is_clean_with_parameters_after_imports():
    import nbformat

    from where223.pipeline import paths
    from where223.pipeline.notebooks import is_clean

    notebook = nbformat.read(paths.NOTEBOOKS / "06_architectures.ipynb", as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert is_clean(notebook)
    assert "import" in code[0].source and "parameters" in code[1].metadata.get("tags", [])


@pytest.mark.slow
def test_notebook_06_draws_and_groups_from_records(tmp_path):
    from tests.conftest import run_notebook

    first = {"file": "m.py", "line": 3, "eager_dtype": "bfloat16", "graph_dtype": "float"}
    for row in (
        _record("gpt2", "4.25.1", "where_type_error", "Where", "gpt2.py:201", first),
        _record("gpt2", "4.26.0", "accepted"),
    ):
        path = tmp_path / "records" / row["release"] / f"{row['model_type']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(row))
    executed = run_notebook("06_architectures", tmp_path / "out", records_dir=str(tmp_path / "records"))
    assert (tmp_path / "out" / "architectures" / "outcomes.png").stat().st_size > 5_000
    assert "Where · gpt2.py:201" in executed.read_text()


def test_the_same_line_of_two_releases_groups_together_and_messages_name_the_refused_operator():
    code = "hidden_states = self.LayerNorm(hidden_states)"
    old = _record("bert", "4.25.1", "type_error", "LayerNormalization", "transformers/models/bert/modeling_bert.py:680")
    new = _record("bert", "4.26.0", "type_error", "LayerNormalization", "x")
    new["blame"][1]["source"] = ".cache/transformers/4.26.0/transformers/models/bert/modeling_bert.py:679"
    for record in (old, new):
        record["blame"][1]["code"] = code
    conv = {"model_type": "beit", "release": "4.25.1", "outcome": "type_error", "blame": [], "ort": {
        "message": "Type 'tensor(bfloat16)' of input parameter (c) of operator (Conv) in node (/m/Conv) is invalid."}}
    kernel = {"model_type": "bart", "release": "4.25.1", "outcome": "missing_kernel", "ort": {
        "message": "Could not find an implementation for MatMul(13) node with name '/m/MatMul'"}}
    groups = architectures.failure_groups([old, new, conv, kernel])
    assert groups[0]["by_release"] == {"4.25.1": ["bert"], "4.26.0": ["bert"]}
    bert = "transformers/models/bert/modeling_bert.py"
    assert groups[0]["sources"] == [f"{bert}:679", f"{bert}:680"] and groups[0]["code"] == code
    assert {g["operator"] for g in groups[1:]} == {"Conv", "MatMul"}
    copied = _record("ernie", "4.25.1", "type_error", "LayerNormalization", "transformers/models/ernie/e.py:595")
    copied["blame"][1]["code"] = code + "  # copied from bert"
    assert architectures.failure_groups([old, new, copied])[0]["size"] == 3, "copied code is one cause"
    new["blame"][1]["code"] = "another line"  # control: another line of code is another group
    assert len(architectures.failure_groups([old, new])) == 2


def test_shrink_divides_widths_cuts_depths_caps_vocabularies_in_sub_configs_too():
    from transformers import BertConfig, CLIPConfig

    from where223.study._cell.build import shrink_config

    config = BertConfig(pad_token_id=5000)
    changed = shrink_config(config, "small")
    assert (config.hidden_size, config.intermediate_size, config.num_attention_heads) == (96, 384, 12)
    assert config.num_hidden_layers == 2 and config.vocab_size == 1024 and config.pad_token_id == 1023
    assert changed["hidden_size"] == 96
    layers_only = BertConfig()
    shrink_config(layers_only, "layers")  # control: the gentler level keeps the widths
    assert layers_only.hidden_size == 768 and layers_only.num_hidden_layers == 2
    clip = CLIPConfig()
    shrink_config(clip, "small")
    assert clip.vision_config.hidden_size == 96 and clip.vision_config.image_size == 64
    assert clip.text_config.num_hidden_layers == 2


def test_inputs_follow_the_forward_signature():
    import torch
    from transformers import BartConfig, BartModel, ViTConfig, ViTModel

    from where223.study._cell.build import model_inputs

    tiny = {"d_model": 16, "encoder_layers": 1, "decoder_layers": 1, "vocab_size": 64}
    bart = model_inputs(torch, BartModel(BartConfig(**tiny)), "bart")
    assert list(bart) == ["input_ids", "attention_mask", "decoder_input_ids"]
    vit_config = ViTConfig(
        hidden_size=16, num_attention_heads=2, intermediate_size=32, num_hidden_layers=1, image_size=32
    )
    vit = model_inputs(torch, ViTModel(vit_config), "vit")
    assert list(vit) == ["pixel_values"] and list(vit["pixel_values"].shape) == [2, 3, 32, 32]

    class Mystery(torch.nn.Module):
        config = BartConfig(**tiny)

        def forward(self, input_ids, mystery):
            return input_ids

    with pytest.raises(ValueError, match="parameter\\(s\\) mystery"):  # control: a parameter it cannot make
        model_inputs(torch, Mystery(), "mystery")
