"""Repository hygiene: environment files in step with the lock, clean parameterised source notebooks."""

import json
import re
from pathlib import Path

import nbformat
import yaml

from where223.pipeline.notebooks import is_clean
from where223.pipeline.paths import NOTEBOOKS, ROOT


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[name.lower().replace("_", "-")] = version.strip()
    return pins


def env_pins(name: str) -> dict[str, str]:
    env = yaml.safe_load((ROOT / name).read_text())
    pip = next(dep["pip"] for dep in env["dependencies"] if isinstance(dep, dict))
    return {line.split("==")[0].lower(): line.split("==")[1] for line in pip}


def test_env_yml_matches_the_lock():
    pins = lock_pins()
    for package, version in env_pins("env.yml").items():
        assert pins[package] == version, package


def test_gpu_env_pairs_cuda_11_8_with_the_same_stack():
    pins = lock_pins()
    gpu = env_pins("env-gpu.yml")
    assert gpu.pop("onnxruntime-training") == pins["onnxruntime-training-cpu"]
    for package, version in gpu.items():
        assert pins[package] == version, package
    conda = yaml.safe_load((ROOT / "env-gpu.yml").read_text())["dependencies"]
    assert f"pytorch={pins['torch']}" in conda and "pytorch-cuda=11.8" in conda and "cudnn=8" in conda


def test_the_historic_pins():
    pins = lock_pins()
    assert (pins["torch"], pins["transformers"], pins["onnx"], pins["optimum"]) == (
        "2.1.2",
        "4.25.1",
        "1.16.2",
        "1.5.1",
    )
    assert pins["onnxruntime-training-cpu"] == "1.19.2" and int(pins["numpy"].split(".")[0]) < 2
    assert "torch-ort==1.19.2" in (ROOT / "scripts" / "setup-env.sh").read_text()


def test_source_notebooks_are_clean_and_parameterised():
    notebooks = sorted(NOTEBOOKS.glob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        cells = json.loads(path.read_text())["cells"]
        assert is_clean(nbformat.read(path, as_version=4)), path
        tagged = [i for i, cell in enumerate(cells) if "parameters" in cell["metadata"].get("tags", [])]
        assert len(tagged) == 1, path
        # right after the imports: only markdown and one import cell come before it
        before = [cell for cell in cells[: tagged[0]] if cell["cell_type"] == "code"]
        assert len(before) == 1 and all(
            re.match(r"^(from|import) ", line) or not line.strip()
            for line in "".join(before[0]["source"]).splitlines()
        ), path


def test_parameters_are_typed_and_commented():
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        source = next("".join(c["source"]) for c in cells if "parameters" in c["metadata"].get("tags", []))
        for line in source.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            assert re.match(r"^\w+: [\w\[\], ]+ = .+  # .+", line), f"{path.name}: {line}"


def test_papermill_sees_every_parameter_with_its_comment():
    from papermill.inspection import inspect_notebook

    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        source = next("".join(c["source"]) for c in cells if "parameters" in c["metadata"].get("tags", []))
        declared = [line.split(":")[0] for line in source.splitlines() if re.match(r"^\w+: ", line)]
        inferred = inspect_notebook(str(path))
        assert list(inferred) == declared, path.name
        assert all(p["help"] for p in inferred.values()), path.name


def test_ruff_is_clean():
    import subprocess
    import sys

    ruff = Path(sys.executable).with_name("ruff")
    result = subprocess.run([str(ruff), "check", "src", "tests", "benchmarks"], cwd=ROOT, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_make_test_prints_why_a_test_was_skipped(tmp_path):
    import subprocess
    import sys

    probe = tmp_path / "test_probe.py"
    probe.write_text("import pytest\n\n\ndef test_skipped():\n"
                     '    pytest.skip("install chromium (apt-get install chromium)")\n')
    command = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
               str(probe), "-p", "no:cacheprovider"]
    shown = subprocess.run(command, capture_output=True, text=True, check=False).stdout
    assert "SKIPPED [1]" in shown and "install chromium (apt-get install chromium)" in shown, shown
    hidden = subprocess.run([*command, "-o", "addopts="], capture_output=True, text=True, check=False).stdout
    assert "install chromium" not in hidden  # control: without the project's options pytest does not say why
