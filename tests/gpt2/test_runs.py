"""Runs are named by every parameter that changes a result, and settings rebuild their own model and batch."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from where223.gpt2 import models, runs
from where223.gpt2.reproduce import ReproduceSettings, read_record
from where223.pipeline.params import ParameterError
from where223.pipeline.paths import NOTEBOOKS, join_slugs

DEFAULT = {**runs.DEFAULTS, "device": "cpu", "amp_dtype": "bf16"}  # what a default run records on a CPU
# Another allowed value for every parameter outside the leading four.
OTHER = {"batch_size": 4, "seq_len": 8, "opset": 14, "seed": 1, "dataset": "sst2", "train_steps": 3}


def test_default_runs_keep_their_names():
    assert runs.run_name(DEFAULT) == "tiny-cpu-bf16-onnx_export"
    assert runs.run_name({**DEFAULT, "path": "ort_trainer"}) == "tiny-cpu-bf16-ort_trainer"


def test_varied_parameters_are_spelled_out_after_the_name():
    assert runs.run_name({**DEFAULT, "opset": 14, "seq_len": 8}) == "tiny-cpu-bf16-onnx_export-opset14-seq_len8"
    assert runs.run_name({**DEFAULT, "dataset": "sst2"}) == "tiny-cpu-bf16-onnx_export-datasetsst2"


def names_of_single_variations(name: Callable[[dict], str]) -> list[str]:
    """The default run's name and one name per parameter changed alone."""
    return [name(DEFAULT), *(name({**DEFAULT, key: value}) for key, value in OTHER.items())]


def four_part_name(parameters: dict) -> str:
    """The naming before every parameter reached the name: preset, device, precision and path only."""
    return join_slugs(*(parameters[key] for key in runs.NAMED_BY))


def test_every_variation_gets_its_own_folder():
    assert set(OTHER) == set(runs.DEFAULTS) - set(runs.NAMED_BY)
    names = names_of_single_variations(runs.run_name)
    assert len(set(names)) == len(names), names


def test_control_the_four_part_name_lets_a_variation_overwrite_the_default_run():
    names = names_of_single_variations(four_part_name)
    assert len(set(names)) == 1


def test_every_setting_is_a_named_parameter():
    assert [field.name for field in dataclasses.fields(ReproduceSettings)] == list(runs.DEFAULTS)


def test_resolve_defaults_are_the_run_defaults():
    declared = {
        name: parameter.default
        for name, parameter in inspect.signature(ReproduceSettings.resolve).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    assert declared and all(runs.DEFAULTS[name] == value for name, value in declared.items())


def test_auto_names_no_run_and_unknown_parameters_are_refused():
    with pytest.raises(ValueError, match="'auto' names no run"):
        runs.run_name(runs.DEFAULTS)
    with pytest.raises(ValueError, match=r"unknown reproduction parameter\(s\) \['opsett'\]"):
        runs.run_name({**DEFAULT, "opsett": 14})


def test_fix_folder_is_named_by_its_variant():
    assert runs.fix_name("4.26") == "fix-4.26"
    assert runs.fix_name("4.24") != runs.fix_name("4.26")


def test_produced_by_matches_notebook_parameters_to_records():
    assert runs.produced_by({"path": "onnx_export"}, DEFAULT)
    assert runs.produced_by({"path": "onnx_export", "device": "auto"}, {**DEFAULT, "device": "cuda"})
    assert runs.produced_by({"model_preset": "gpt2"}, {**DEFAULT, "preset": "gpt2"})
    assert runs.produced_by({"path": "onnx_export", "variant": "4.26", "hops": 1}, DEFAULT)
    # controls: a variation is not the default run, another path is not this one, a pinned device is pinned
    assert not runs.produced_by({"path": "onnx_export"}, {**DEFAULT, "opset": 14})
    assert not runs.produced_by({"path": "ortmodule"}, DEFAULT)
    assert not runs.produced_by({"device": "cuda"}, DEFAULT)
    # `auto` never resolves to the emulated CUDA policy (or fp32): section 1's default run is not the emulated one
    emulated = {**DEFAULT, "amp_dtype": "fp16_cuda_emulated"}
    assert not runs.produced_by({"path": "onnx_export"}, emulated)
    assert runs.produced_by({"path": "onnx_export", "amp_dtype": "fp16_cuda_emulated"}, emulated)


def notebook_defaults(path: Path) -> dict[str, object]:
    """The reproduction parameters a notebook declares, by record name, with their default values."""
    from papermill.inspection import inspect_notebook

    record_names = {notebook: record for record, notebook in runs.NOTEBOOK_NAMES.items()}
    declared = {record_names.get(name, name): ast.literal_eval(p["default"])
                for name, p in inspect_notebook(str(path)).items()}
    return {name: value for name, value in declared.items() if name in runs.DEFAULTS}


@pytest.mark.parametrize("notebook", ["01_reproduce", "02_graph", "03_fix_and_verify"])
def test_notebooks_take_the_reproduction_parameters_with_the_run_defaults(notebook):
    assert notebook_defaults(NOTEBOOKS / f"{notebook}.ipynb") == runs.DEFAULTS


def test_control_a_notebook_default_that_drifts_is_seen(tmp_path):
    notebook = json.loads((NOTEBOOKS / "01_reproduce.ipynb").read_text())
    cell = next(c for c in notebook["cells"] if "parameters" in c["metadata"].get("tags", []))
    cell["source"] = "".join(cell["source"]).replace("seq_len: int = 16", "seq_len: int = 32")
    drifted = tmp_path / "01_reproduce.ipynb"
    drifted.write_text(json.dumps(notebook))
    assert notebook_defaults(drifted) == {**runs.DEFAULTS, "seq_len": 32}


def test_settings_round_trip_through_a_records_parameters():
    settings = ReproduceSettings.from_parameters(DEFAULT)
    assert dataclasses.asdict(settings) == DEFAULT
    assert ReproduceSettings.from_parameters(dataclasses.asdict(settings)) == settings
    assert settings.run_name() == runs.run_name(DEFAULT)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"opset": "17"}, "parameter opset='17' must be of type int"),
        ({"seed": True}, "parameter seed=True must be of type int"),
        ({"dataset": None}, "parameter dataset=None must be of type str"),
        ({"opsett": 17}, r"unknown \['opsett'\], missing \[\]"),
        ({"opset": 12}, "parameter opset=12 is not allowed"),
    ],
)
def test_record_parameters_are_type_checked(change, message):
    with pytest.raises(ParameterError, match=message):
        ReproduceSettings.from_parameters({**DEFAULT, **change})


def test_missing_record_parameter_is_refused():
    without_seed = {key: value for key, value in DEFAULT.items() if key != "seed"}
    with pytest.raises(ParameterError, match=r"missing \['seed'\]"):
        ReproduceSettings.from_parameters(without_seed)


def test_settings_build_the_run_from_the_models_functions():
    settings = ReproduceSettings.from_parameters({**DEFAULT, "batch_size": 3, "train_steps": 2})
    dataset = settings.build_dataset()
    assert len(dataset) == 6 and dataset == models.load_dataset("synthetic", 6, 16, 256, 0)
    batch = settings.build_batch()
    expected = models.example_batch(dataset, 3)
    assert batch.keys() == expected.keys() and all(torch.equal(batch[k], expected[k]) for k in batch)
    model = settings.build_model(dropout=False)
    assert model.config.attn_pdrop == 0.0 and model.config.n_layer == 2
    again = settings.build_model(dropout=False)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))
    other_seed = dataclasses.replace(settings, seed=1).build_batch()
    assert not torch.equal(other_seed["input_ids"], batch["input_ids"])  # control: the seed reaches the data


def test_read_record_refuses_another_runs_record(tmp_path):
    settings = ReproduceSettings.from_parameters(DEFAULT)
    (tmp_path / "reproduce.json").write_text(json.dumps({"parameters": DEFAULT, "status": "reproduced"}))
    assert read_record(settings, tmp_path)["status"] == "reproduced"
    with pytest.raises(ValueError, match="holds the run of"):
        read_record(dataclasses.replace(settings, opset=14), tmp_path)
