"""Release side folders come from `make setup`: at notebook time they are only used, never installed."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from where223.gpt2 import releases
from where223.pipeline.installer import Installer


@pytest.fixture
def empty_releases_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(releases, "RELEASES_DIR", tmp_path)
    return tmp_path


def test_a_missing_side_folder_fails_in_one_line_that_names_make_setup(empty_releases_dir: Path) -> None:
    with pytest.raises(releases.ReleaseMissingError) as caught:
        releases.release_environment("4.26.0")
    message = str(caught.value)
    assert "make setup" in message and "4.26.0" in message and "\n" not in message


def test_an_installed_side_folder_is_used_first_on_the_path(empty_releases_dir: Path) -> None:
    package = empty_releases_dir / "4.26.0" / "transformers"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("__version__ = '4.26.0'\n")
    environment = releases.release_environment("4.26.0")
    assert environment["PYTHONPATH"].split(":")[0] == str(empty_releases_dir / "4.26.0")


def test_install_release_stages_then_renames_and_installs_once(empty_releases_dir: Path) -> None:
    """An installer that fails leaves no side folder; one that works fills it; a second call installs nothing."""
    broken = Installer("pip", variables={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""})
    with pytest.raises(RuntimeError, match="pip install transformers==4.26.0 failed"):
        releases.install_release("4.26.0", broken)
    assert list(empty_releases_dir.iterdir()) == []  # the staging folder is gone, no half-filled side folder
    wheel_dir = empty_releases_dir.parent / "wheels"
    _fake_transformers_wheel(wheel_dir, "4.26.0")
    offline = Installer("pip", variables={"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheel_dir)})
    target = releases.install_release("4.26.0", offline)
    assert (target / "transformers" / "__init__.py").is_file() and target == releases.release_dir("4.26.0")
    assert releases.install_release("4.26.0", broken) == target  # already there: the installer is not run


def _fake_transformers_wheel(folder: Path, version: str) -> Path:
    """A minimal pure-Python wheel named transformers, written by hand (no network, no build)."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"transformers-{version}.dist-info"
    files = {
        "transformers/__init__.py": f"__version__ = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: transformers\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    records = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    wheel = folder / f"transformers-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in {**files, f"{info}/RECORD": records}.items():
            archive.writestr(name, text)
    return wheel
