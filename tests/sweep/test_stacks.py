"""Stacks: names, overlays, locks, the interpreter lookup, and a build that fails saying why in one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from where223.errors import UsageError
from where223.sweep import stacks


def test_stack_names_resolve_to_an_environment_and_an_overlay():
    known = stacks.load_stacks()
    historic = known.stack("torch-2.1.2+transformers-4.22.0")
    assert historic.transformers == "4.22.0" and historic.attributes() == {"torch": "2.1.2", "transformers": "4.22.0"}
    project = known.stack("project")
    assert project.transformers is None and project.attributes() == {"torch": "2.1.2", "transformers": "4.25.1"}
    assert known.stack("project+transformers-4.25.1").transformers is None  # the lock's own release: no side folder
    with pytest.raises(UsageError, match="no environment 'torch-0.1'"):
        known.stack("torch-0.1")


def test_every_environment_lock_is_committed_and_pins_its_torch():
    for name, environment in stacks.load_stacks().environments.items():
        pins = environment.pins()
        if name != stacks.PROJECT:
            if name.startswith("torch-"):  # named by its torch; `today` is named by what it is for
                assert pins["torch"] == name.removeprefix("torch-"), name
            assert pins.get("torch"), name
            assert environment.lock.with_suffix(".in").is_file(), name


def test_the_first_error_line_of_uv_and_pip():
    uv = "Using Python 3.11\n  × No solution found when resolving dependencies:\n  ╰─▶ Because nothing was found\n"
    assert stacks.first_error_line(uv) == "× No solution found when resolving dependencies: Because nothing was found"
    piped = "error: No solution found when resolving dependencies\n  cause: Because x was not found\n"
    assert (
        stacks.first_error_line(piped)
        == "error: No solution found when resolving dependencies: Because x was not found"
    )
    pip = "Collecting x\nERROR: Could not find a version that satisfies x\nERROR: No matching distribution\n"
    assert stacks.first_error_line(pip) == "ERROR: Could not find a version that satisfies x"
    assert stacks.first_error_line("warning only\nlast words\n") == "last words"  # control: no error line


def test_the_error_line_carries_uvs_whole_chain_of_causes():
    """What a CI run printed lost the cause under "Failed to extract archive": a cut stream and a full disk read
    alike there. Every `cause:` (or `├─▶`/`╰─▶`) line joins the error line, and the chain ends at the first other."""
    piped = ("Resolved 1 package in 1ms\nerror: Failed to download `x==1`\n  cause: Failed to extract archive: x.whl\n"
             "  cause: Invalid zip file structure\n  cause: unable to locate the end of central directory record\n"
             "hint: not a cause\n")
    assert stacks.first_error_line(piped) == ("error: Failed to download `x==1`: Failed to extract archive: x.whl: "
                                              "Invalid zip file structure: unable to locate the end of central "
                                              "directory record")
    full = "No space left on device (os error 28)"
    terminal = f"  × Failed to download `x==1`\n  ├─▶ Failed to extract archive\n  ╰─▶ {full}\n"
    assert stacks.first_error_line(terminal).endswith(f": Failed to extract archive: {full}")


def test_the_machine_interpreter_is_found_or_none(monkeypatch):
    assert stacks.machine_python(f"{sys.version_info.major}.{sys.version_info.minor}") == Path(sys.executable)
    monkeypatch.setenv("PYENV_ROOT", "/nonexistent")
    assert stacks.machine_python("0.1") is None


def test_a_build_that_fails_is_not_marked_and_says_why(tmp_path, monkeypatch):
    lock = tmp_path / "broken.txt"
    lock.write_text("where223-no-such-package==0.0.1\n")
    environment = stacks.Environment("broken", f"{sys.version_info.major}.{sys.version_info.minor}", lock)
    python, error = stacks.build_environment(environment, envs=tmp_path / "envs")
    assert python is None and "where223-no-such-package" in error and "\n" not in error
    assert not stacks.env_root(environment, tmp_path / "envs").exists()  # nothing half-built is kept
    missing = stacks.Environment("old", "0.1", lock)
    monkeypatch.setenv("PYENV_ROOT", "/nonexistent")
    assert stacks.build_environment(missing, envs=tmp_path / "envs") == (None, "this machine has no Python 0.1 "
                                                                          "(python0.1 on PATH or pyenv)")  # fmt: skip


class _FlakyInstaller:
    """An installer whose sync fails `fails` times with `message`, then installs (a file beside the interpreter)."""

    name = "fake"

    def __init__(self, tmp_path: Path, message: str, fails: int) -> None:
        self.counter, self.message, self.fails = tmp_path / "tries", message, fails

    def environment(self) -> dict[str, str]:
        return {}

    def create(self, base: Path, root: Path) -> list[str]:
        script = ("import os, sys\nos.makedirs(sys.argv[1] + '/bin')\n"
                  "os.symlink(sys.argv[2], sys.argv[1] + '/bin/python')")
        return [sys.executable, "-c", script, str(root), str(base)]

    def sync(self, python: Path, lock: Path) -> list[str]:
        script = (
            "import os, sys, pathlib; c = pathlib.Path(sys.argv[1]); n = len(c.read_text()) if c.exists() else 0\n"
            "c.write_text(c.read_text() + os.environ.get('UV_CONCURRENT_DOWNLOADS', '-') if n else '-')\n"
            "if n < int(sys.argv[2]): print(sys.argv[3]); sys.exit(2)"
        )
        return [sys.executable, "-c", script, str(self.counter), str(self.fails), self.message]


BROKE_OFF = "error: Failed to download `torch==2.14.1`: Failed to extract archive: torch-2.14.1-cp311.whl"


@pytest.mark.parametrize(("message", "fails", "tries", "built"), [
    (BROKE_OFF, 1, 2, True),  # a download broke off once: built at the second try
    (BROKE_OFF, 99, stacks.installers.ATTEMPTS, False),  # every try broke off: bounded, then why, in one line
    ("error: No solution found when resolving dependencies", 99, 1, False),  # control: not retried
])
def test_a_build_whose_download_broke_off_is_tried_again(tmp_path, monkeypatch, message, fails, tries, built):
    monkeypatch.setattr(stacks.installers, "choose", lambda: _FlakyInstaller(tmp_path, message, fails))
    slept: list[float] = []
    monkeypatch.setattr(stacks.installers.time, "sleep", slept.append)
    lock = tmp_path / "lock.txt"
    lock.write_text("x==1\n")
    environment = stacks.Environment("flaky", f"{sys.version_info.major}.{sys.version_info.minor}", lock)
    python, error = stacks.build_environment(environment, envs=tmp_path / "envs")
    # every try after the first waits (longer each time) and downloads one file at a time
    assert (tmp_path / "tries").read_text() == "-" + "1" * (tries - 1)
    assert slept == [stacks.installers.pause(n) for n in range(2, tries + 1)]
    assert slept == sorted(slept) and all(seconds > 0 for seconds in slept)
    assert (python is not None) is built
    if built:
        assert error is None and (stacks.env_root(environment, tmp_path / "envs") / stacks.READY).is_file()
    else:
        assert error.endswith(message) and "\n" not in error
        assert (f"after {tries} tries" in error) is (tries > 1)
