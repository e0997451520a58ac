"""uv gets what pip would get from its configuration; pip when asked or when no uv is installed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from where223.pipeline import installer

# `pip config list` output: a PIP_* variable, a user file and a global file, as pip prints them.
PIP_CONFIG_LIST = """\
:env:.cert='/env/ca.pem'
:env:.find-links='/opt/wheels /srv/more wheels'
global.cert='/etc/ca.pem'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.timeout='60'
install.timeout='180'
freeze.exclude='pip'
"""


def test_pip_variables_override_install_section_which_overrides_global() -> None:
    options = installer.parse_pip_config_list(PIP_CONFIG_LIST)
    assert options["cert"] == "/env/ca.pem"  # PIP_CERT wins over global.cert
    assert options["timeout"] == "180"  # [install] wins over [global]
    assert options["constraint"] == "/etc/xdg/pip/constraints.txt"  # only in [global]: kept
    assert "exclude" not in options  # another command's section does not apply to `pip install`


def test_uv_variables_carry_indexes_links_certificate_and_constraints(tmp_path: Path) -> None:
    variables = installer.uv_variables(installer.parse_pip_config_list(PIP_CONFIG_LIST), cache=tmp_path)
    assert variables["SSL_CERT_FILE"] == "/env/ca.pem"
    assert variables["UV_INDEX"] == "file:///opt/pypi/simple file:///opt/pypi-more/simple"
    assert variables["UV_FIND_LINKS"] == "/opt/wheels,/srv/more,wheels"
    assert variables["UV_CONSTRAINT"] == "/etc/xdg/pip/constraints.txt"
    assert variables["UV_HTTP_TIMEOUT"] == "180"
    assert variables["UV_PYTHON_DOWNLOADS"] == "never"
    assert variables["UV_CACHE_DIR"] == str(tmp_path)
    assert "UV_DEFAULT_INDEX" not in variables  # pip's default index is uv's default too


def test_an_empty_pip_configuration_adds_only_the_fixed_settings(tmp_path: Path) -> None:
    variables = installer.uv_variables({}, cache=tmp_path)
    assert variables == {**installer.UV_FIXED, "UV_CACHE_DIR": str(tmp_path)}


def test_shell_exports_survive_a_shell_round_trip() -> None:
    variables = {"UV_INDEX": "file:///a b's", "SSL_CERT_FILE": "/x/ca.pem"}
    script = installer.shell_exports(variables) + 'printf "%s|%s" "$UV_INDEX" "$SSL_CERT_FILE"'
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout == "file:///a b's|/x/ca.pem"


def _fake_python_with_uv(tmp_path: Path) -> Path:
    (tmp_path / "python").touch()
    uv = tmp_path / "uv"
    uv.write_text("#!/bin/sh\n")
    uv.chmod(0o755)
    return tmp_path / "python"


def test_choose_uv_beside_the_interpreter_else_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(installer, "pip_options", lambda python: {"cert": "/ca.pem"})
    monkeypatch.delenv(installer.INSTALLER_VARIABLE, raising=False)
    python = _fake_python_with_uv(tmp_path)
    chosen = installer.choose(python)
    assert chosen.name == "uv" and chosen.variables["SSL_CERT_FILE"] == "/ca.pem"
    assert chosen.install(python, "-r", "lock")[:4] == [str(tmp_path / "uv"), "pip", "install", "--python"]
    monkeypatch.setenv(installer.INSTALLER_VARIABLE, "pip")
    assert installer.choose(python).name == "pip"
    monkeypatch.delenv(installer.INSTALLER_VARIABLE)
    (tmp_path / "uv").unlink()  # the control: no uv installed, so pip
    fallback = installer.choose(python)
    assert fallback.name == "pip" and fallback.install(python, "x") == [
        str(python), "-m", "pip", "install", "--disable-pip-version-check", "x"
    ]  # fmt: skip
    monkeypatch.setenv(installer.INSTALLER_VARIABLE, "conda")
    with pytest.raises(ValueError, match="choose one of uv, pip"):
        installer.choose(python)


def test_pip_options_asks_pip_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_CERT", "/somewhere/ca.pem")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///x/simple file:///y/simple")
    options = installer.pip_options()
    assert options["cert"] == "/somewhere/ca.pem"
    assert options["extra-index-url"] == "file:///x/simple file:///y/simple"


def test_compile_bytecode_writes_what_is_missing_and_skips_what_does_not_compile(tmp_path: Path) -> None:
    import importlib.util

    (tmp_path / "good.py").write_text("X = 1\n")
    (tmp_path / "broken.py").write_text("def (:\n")  # an installer's test fixture that is not Python: skipped
    installer.compile_bytecode([tmp_path])
    assert Path(importlib.util.cache_from_source(str(tmp_path / "good.py"))).is_file()
    assert not Path(importlib.util.cache_from_source(str(tmp_path / "broken.py"))).exists()
    assert installer.UV_FIXED["UV_COMPILE_BYTECODE"] == "1"  # and uv compiles what it installs


def test_setup_left_bytecode_for_torch_transformers_and_the_side_folders() -> None:
    """Where PYTHONDONTWRITEBYTECODE is set (this machine, CI) only setup writes bytecode: without it every kernel and
    subprocess of the suite compiles torch again (benchmarks/import_bytecode.py measures what that costs)."""
    import importlib.util

    from where223.gpt2.releases import RELEASES, release_dir

    sources = [Path(importlib.util.find_spec(name).origin) for name in ("torch", "transformers", "onnx")]
    sources += [release_dir(version) / "transformers" / "__init__.py" for version in RELEASES.values()]
    missing = without_bytecode(sources)
    assert not missing, f"no bytecode for {missing}: run `make setup`"


def without_bytecode(sources: list[Path]) -> list[str]:
    import importlib.util

    return [str(s) for s in sources if not Path(importlib.util.cache_from_source(str(s))).is_file()]


def test_control_a_module_without_bytecode_is_named(tmp_path: Path) -> None:
    (tmp_path / "fresh.py").write_text("X = 1\n")
    (tmp_path / "compiled.py").write_text("X = 2\n")
    installer.compile_bytecode([tmp_path / "compiled.py"])
    assert without_bytecode([tmp_path / "fresh.py", tmp_path / "compiled.py"]) == [str(tmp_path / "fresh.py")]


# What CI's run printed when a wheel's download broke off (uv streams it into its archive).
BROKE_OFF = ("error: Failed to download `nvidia-cusolver==12.0.4.66`: Failed to extract archive: "
             "nvidia_cusolver-12.0.4.66-py3-none-manylinux_2_27_x86_64.whl")


def test_a_download_that_broke_off_is_tried_again_up_to_the_limit() -> None:
    assert installer.try_again(BROKE_OFF, 1)
    assert installer.try_again(BROKE_OFF, installer.ATTEMPTS - 1)
    assert not installer.try_again(BROKE_OFF, installer.ATTEMPTS)  # bounded
    # controls: what another try would not change
    assert not installer.try_again("× No solution found when resolving dependencies: Because x was not found", 1)
    refused = "error: Failed to download `x==1`: HTTP status client error (404 Not Found) for url (https://h/x.whl)"
    assert not installer.try_again(refused, 1)
    assert not installer.try_again("", 1)


def test_a_later_try_waits_longer_and_downloads_one_file_at_a_time(monkeypatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(installer.time, "sleep", slept.append)
    assert installer.before_try(1) == {} and slept == [0]  # the first try neither waits nor changes anything
    assert installer.before_try(2) == {"UV_CONCURRENT_DOWNLOADS": "1"}
    assert slept[-1] == installer.PAUSES[0] > 0
    waits = [installer.pause(n) for n in range(1, installer.ATTEMPTS + 1)]
    assert waits[0] == 0 and waits[1:] == sorted(waits[1:]) and len(set(waits[1:])) == installer.ATTEMPTS - 1
    assert installer.pause(installer.ATTEMPTS + 10) == installer.PAUSES[-1]  # bounded
    assert installer.PAUSES == (10, 30, 60, 120) and installer.ATTEMPTS == 5  # what NOTES says
    monkeypatch.setattr(installer, "PAUSES", ())
    assert installer.pause(3) == 0


def test_try_again_on_the_command_line_reads_the_log(tmp_path: Path, capsys) -> None:
    log = tmp_path / "install.log"
    log.write_text(BROKE_OFF + "\n")
    assert installer.main(["--try-again", str(log), "1"]) == 0
    assert capsys.readouterr().out == f"export UV_CONCURRENT_DOWNLOADS=1\nsleep {installer.PAUSES[0]}\n"
    assert installer.main(["--try-again", str(log), str(installer.ATTEMPTS)]) == 1
    assert installer.main(["--try-again", str(tmp_path / "missing.log"), "1"]) == 1  # untrusted: no crash
    assert installer.main(["--try-again", str(log), "one"]) == 1
    log.write_text("error: No solution found\n")
    assert installer.main(["--try-again", str(log), "1"]) == 1


def _setup_install_into() -> str:
    """setup-env.sh's `install_into` and the function it calls, as the script defines them."""
    lines = (Path(__file__).resolve().parents[2] / "scripts" / "setup-env.sh").read_text().splitlines()
    kept, inside = [], False
    for line in lines:
        if line.startswith(("pip_install_into() ", "install_into() {")):
            inside = True
        if inside:
            kept.append(line)
            if line == "}" or line.startswith("pip_install_into() "):
                inside = False
    return "\n".join(kept)


@pytest.mark.parametrize(("message", "fails", "tries", "rc"), [
    (BROKE_OFF, 1, 2, 0),  # broke off once: the second try installs
    (BROKE_OFF, 99, installer.ATTEMPTS, 2),  # keeps breaking off: stops at the limit, with uv's exit status
    ("error: No solution found", 99, 1, 2),  # control: not a download that broke off, not tried again
])
def test_setup_installs_again_when_a_download_broke_off(tmp_path: Path, message: str, fails: int, tries: int,
                                                         rc: int) -> None:
    import sys
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    counter = tmp_path / "tries"
    uv = venv / "bin" / "uv"  # a uv that fails `fails` times with `message`
    uv.write_text(f"#!/bin/sh\necho ${{UV_CONCURRENT_DOWNLOADS:--}} >> {counter}\n"
                  f"if [ $(wc -l < {counter}) -le {fails} ]; then echo '{message}' >&2; exit 2; fi\n")
    uv.chmod(0o755)
    source = Path(installer.__file__).resolve().parents[2]
    slept = tmp_path / "slept"  # the pauses, recorded rather than waited
    script = (f"set -euo pipefail\nVENV={venv}\nPY={sys.executable}\nWHERE223_INSTALLER=uv\n"
              f"sleep() {{ echo \"$1\" >> {slept}; }}\n"
              f"{_setup_install_into()}\ninstall_into {sys.executable} pkg==1\n")
    done = subprocess.run(["bash", "-c", script], cwd=source.parent, capture_output=True, text=True, check=False)
    assert done.returncode == rc, done.stderr
    assert counter.read_text().splitlines() == ["-"] + ["1"] * (tries - 1)  # later tries: one download at a time
    waits = slept.read_text().split() if slept.exists() else []
    assert waits == [str(installer.pause(n)) for n in range(2, tries + 1)]
    assert done.stderr.count("installing again") == tries - 1
