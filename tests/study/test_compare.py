"""`where223 compare`: a rerun of the same data reproduces; a copy with a verdict flipped, a count changed, a record
missing or a check value beyond its tolerance does not; the timings, environment fields and informational numbers
the record types declare are listed apart; a bad reference is one line and exit 2. (Each role's controls, on small
copies: tests/pipeline/test_compare_roles.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from where223 import cli
from where223.pipeline import compare
from where223.pipeline.paths import OUTPUTS, ROOT

VERIFICATION = "tiny-cpu-bf16-onnx_export/fix-4.26/verification.json"
SUMMARY = "architectures/summary.json"


@pytest.fixture(scope="module")
def committed_files() -> dict[Path, bytes]:
    """The committed records (and one figure), read once per module: relative path -> bytes."""
    files = {}
    for path in [*OUTPUTS.rglob("*.json"), OUTPUTS / "variants" / "variants-cpu.png"]:
        relative = path.relative_to(OUTPUTS)
        if relative.parts[0] not in ("failed", ".staging"):
            files[relative] = path.read_bytes()
    return files


def _write_tree(root: Path, files: dict[Path, bytes]) -> Path:
    for folder in sorted({relative.parent for relative in files}):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for relative, content in files.items():
        (root / relative).write_bytes(content)
    return root


@pytest.fixture(scope="module")
def reference_tree(tmp_path_factory: pytest.TempPathFactory, committed_files: dict[Path, bytes]) -> Path:
    """The reference copy, written once per module: no test edits it."""
    return _write_tree(tmp_path_factory.mktemp("compare") / "reference", committed_files)


@pytest.fixture
def trees(tmp_path: Path, reference_tree: Path, committed_files: dict[Path, bytes]) -> tuple[Path, Path]:
    """Two copies of the committed records (and one figure): the reference and a rerun to edit."""
    return reference_tree, _write_tree(tmp_path / "rerun", committed_files)


def edit(root: Path, record: str, change) -> None:
    data = json.loads((root / record).read_text())
    change(data)
    (root / record).write_text(json.dumps(data))


def check_of(data: dict, name: str) -> dict:
    return next(check for check in data["checks"] if check["name"] == name)


def test_the_same_records_reproduce(trees):
    reference, rerun = trees
    result = compare.compare(reference, rerun)
    assert result.reproduced and result.differences == [] and result.records > 100
    assert result.summary().startswith("reproduced")


def test_timings_environments_tolerated_values_and_informational_numbers_do_not_decide(trees):
    reference, rerun = trees

    def rerun_elsewhere(data):
        data["environment"]["device_name"] = "another CPU"
        data["environment"]["platform"] = "Linux-other"
        check_of(data, "fp32_inference")["value"] *= 1.5  # 2.98e-08 -> 4.5e-08, tolerance 1e-05
        check_of(data, "fp32_gradients")["detail"] = check_of(data, "fp32_gradients")["detail"].replace("1.69e-09",
                                                                                                         "2.01e-09")
        data["gradients"][0]["max_abs"] *= 1.0001

    edit(rerun, VERIFICATION, rerun_elsewhere)
    edit(rerun, SUMMARY, lambda data: data.update(updated_at="2031-01-01T00:00:00+00:00"))
    edit(rerun, "variants/variants-cpu.json",
         lambda data: data["variants"]["4.24"].update(step_times_s=[1.0] * 20, step_time_median_s=1.0))
    (rerun / "variants" / "variants-cpu.png").write_bytes(b"another rendering")
    result = compare.compare(reference, rerun)
    assert result.reproduced, compare.table(result)
    kinds = {d.path: d.kind for d in result.differences}
    assert kinds["environment.device_name"] == kinds["environment.platform"] == "environment"
    assert kinds["checks[8].value"] == "within tolerance"
    assert kinds["updated_at"] == "timing" and kinds["variants.4.24.step_time_median_s"] == "timing"
    assert kinds["gradients[0].max_abs"] == "informational"
    assert kinds["checks[6].detail"] == "informational"  # a check's detail differing only in the measurements quoted
    assert result.artifacts_differing == 1 and "1 of 1 notebooks, figures and models" in result.summary()


@pytest.mark.parametrize(
    ("record", "change", "field"),
    [
        (VERIFICATION, lambda d: check_of(d, "lint").update(verdict="fail"), "checks[0].verdict"),
        (SUMMARY, lambda d: d["counts"]["4.25.1"].update(exported=116), "counts.4.25.1.exported"),
        (VERIFICATION, lambda d: check_of(d, "fp32_inference").update(value=2e-05), "checks[8].value"),
        (VERIFICATION, lambda d: d["controls"].pop(), "controls"),
        ("variants/variants-cpu.json", lambda d: d["recommendation"]["ranking"].reverse(), "recommendation.ranking[0]"),
    ],
    ids=["verdict-flipped", "count-changed", "value-beyond-tolerance", "control-missing", "ranking-changed"],
)
def test_a_copy_with_one_decisive_change_does_not_reproduce(trees, record, change, field):
    reference, rerun = trees
    edit(rerun, record, change)
    result = compare.compare(reference, rerun)
    assert not result.reproduced
    assert field in [d.path for d in result.of("differs")], compare.table(result)
    assert result.summary().startswith("not reproduced")


def test_a_missing_record_does_not_reproduce(trees):
    reference, rerun = trees
    (rerun / SUMMARY).unlink()
    result = compare.compare(reference, rerun)
    assert [(d.record, d.note) for d in result.of("differs")] == [(SUMMARY, "missing from the rerun")]


def test_cli_exit_codes_and_one_line_errors(trees, tmp_path, capsys):
    reference, rerun = trees
    assert cli.main(["compare", str(reference), "--output-root", str(rerun), "--summary"]) == 0
    assert capsys.readouterr().out.startswith("reproduced")
    edit(rerun, VERIFICATION, lambda d: check_of(d, "lint").update(verdict="fail"))
    assert cli.main(["compare", str(reference), "--output-root", str(rerun)]) == 1
    out = capsys.readouterr().out
    assert "| differs |" in out and out.strip().splitlines()[-1].startswith("not reproduced")
    empty = tmp_path / "empty"
    empty.mkdir()
    for argv in (["compare", "no-such-revision-or-folder", "--output-root", str(rerun)],
                 ["compare", str(empty), "--output-root", str(rerun)],
                 ["compare", str(reference), "--output-root", str(tmp_path / "missing")]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("where223 compare:"), err


def test_a_git_revision_is_read_from_the_repository():
    files = compare.revision_files("HEAD")
    committed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "outputs"], capture_output=True, text=True,
                               check=True).stdout.split()
    assert sorted(files) == sorted(name.removeprefix("outputs/") for name in committed)
    assert files[SUMMARY] == subprocess.run(["git", "-C", str(ROOT), "show", f"HEAD:outputs/{SUMMARY}"],
                                            capture_output=True, check=True).stdout


def test_compare_imports_no_torch(trees):
    reference, rerun = trees
    code = ("import sys; from where223.pipeline import compare; compare.compare(sys.argv[1], __import__('pathlib')"
            ".Path(sys.argv[2])); print(sorted(m for m in ('torch', 'onnx', 'onnxruntime') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code, str(reference), str(rerun)], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
