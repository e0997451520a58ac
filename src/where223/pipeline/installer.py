"""Package installation with uv (pip as the fallback), configured from pip's own configuration.

uv reads no pip configuration, so what pip takes from its configuration files and PIP_* variables (index,
extra indexes, find-links, certificate bundle, constraints such as a machine's torch cap, timeout, proxy) is
read with `pip config list` when an environment is built and handed to uv explicitly as variables. uv never
downloads an interpreter (UV_PYTHON_DOWNLOADS=never) and takes every index into account as pip does
(unsafe-best-match). Its cache is `.cache/uv`, on the same filesystem as `.venv` and the matrix environments,
so installed files are hard links into one cache. `WHERE223_INSTALLER=pip` selects pip; pip is also used
when no uv lies beside the interpreter (`scripts/setup-env.sh` installs the locked uv into `.venv`).

`python -m where223.pipeline.installer` prints the variables as shell `export` lines (setup-env.sh evals them);
it is a worker entry point, not a `where223` command, because it runs under the machine's interpreter before
`.venv`, and so the command line, exists.
"""

from __future__ import annotations

import argparse
import ast
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from where223.pipeline.paths import CACHE

INSTALLER_VARIABLE = "WHERE223_INSTALLER"
INSTALLERS: tuple[str, ...] = ("uv", "pip")
UV_CACHE: Path = CACHE / "uv"
# pip sections that apply to `pip install`, lowest precedence first (PIP_* variables are `:env:`).
PIP_SECTIONS: tuple[str, ...] = ("global", "install", ":env:")
# Set for every uv run: interpreters come from the machine; every index counts and the best version wins; what is
# installed is compiled to bytecode then (uv compiles nothing by default, and where PYTHONDONTWRITEBYTECODE is set,
# as on this machine and in CI, no import writes it either: every process would compile torch from source again).
UV_FIXED: dict[str, str] = {
    "UV_PYTHON_DOWNLOADS": "never",
    "UV_INDEX_STRATEGY": "unsafe-best-match",
    "UV_LINK_MODE": "hardlink",
    "UV_COMPILE_BYTECODE": "1",
}
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
# An install that failed because a download broke off (the network, not what was asked for) is tried again, at most
# ATTEMPTS times in all. uv streams a wheel into its archive, so a cut transfer reads "Failed to extract archive":
# one CI run lost today's stack so (NOTES). A 4xx answer is not retried: the file is not there. Three tries one after
# the other failed alike in another CI run, so a later try waits first (PAUSES, seconds before tries 2, 3, ...: a cut
# transfer is often a passing fault of the link or a proxy) and downloads one file at a time (RETRY_VARIABLES: uv
# streams up to 50 at once, and on a slow link one of several hundred MB can stall past the read timeout).
ATTEMPTS = 5
PAUSES: tuple[int, ...] = (10, 30, 60, 120)
RETRY_VARIABLES: dict[str, str] = {"UV_CONCURRENT_DOWNLOADS": "1"}
BROKE_OFF_WORDS: tuple[str, ...] = (
    "failed to download", "failed to fetch", "failed to extract archive", "error sending request",
    "request failed after", "error decoding response body", "connection reset", "connection broken",
    "incompleteread", "timed out", "unexpected end of file",
)
REFUSED_WORDS: tuple[str, ...] = ("client error (4",)


def parse_pip_config_list(text: str) -> dict[str, str]:
    """The options pip install takes from `pip config list` output: PIP_* over [install] over [global]."""
    by_section: dict[str, dict[str, str]] = {section: {} for section in PIP_SECTIONS}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        section, dot, option = key.rpartition(".")
        if not sep or not dot or section not in by_section:
            continue
        try:
            value = ast.literal_eval(raw)
        except (SyntaxError, ValueError):
            value = raw
        by_section[section][option.replace("_", "-")] = str(value)
    merged: dict[str, str] = {}
    for section in PIP_SECTIONS:
        merged.update(by_section[section])
    return merged


def pip_options(python: str | os.PathLike[str] = sys.executable) -> dict[str, str]:
    """pip's effective install options on this machine, read with `python -m pip config list`."""
    result = subprocess.run([str(python), "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"`{python} -m pip config list` failed: {result.stderr.strip()[-500:]}")
    return parse_pip_config_list(result.stdout)


def uv_variables(options: Mapping[str, str], cache: Path | None = None) -> dict[str, str]:
    """The variables that make uv install from where, and under which limits, pip would.

    `cache` defaults to UV_CACHE_DIR when set, else `.cache/uv`.
    """
    words = {key: value.split() for key, value in options.items()}
    variables = {**UV_FIXED, "UV_CACHE_DIR": str(cache or os.environ.get("UV_CACHE_DIR") or UV_CACHE)}
    if options.get("index-url"):
        variables["UV_DEFAULT_INDEX"] = options["index-url"]
    if words.get("extra-index-url"):
        variables["UV_INDEX"] = " ".join(words["extra-index-url"])
    if words.get("find-links"):
        variables["UV_FIND_LINKS"] = ",".join(words["find-links"])  # uv splits this one on commas
    if words.get("constraint"):
        variables["UV_CONSTRAINT"] = " ".join(words["constraint"])
    if options.get("no-index", "").lower() in TRUE_WORDS:
        variables["UV_NO_INDEX"] = "1"
    if words.get("trusted-host"):
        variables["UV_INSECURE_HOST"] = " ".join(words["trusted-host"])
    if options.get("cert"):
        variables["SSL_CERT_FILE"] = options["cert"]
    if options.get("client-cert"):
        variables["SSL_CLIENT_CERT"] = options["client-cert"]
    if options.get("proxy"):
        variables["HTTP_PROXY"] = variables["HTTPS_PROXY"] = options["proxy"]
    timeout = options.get("timeout") or options.get("default-timeout")
    if timeout:
        variables["UV_HTTP_TIMEOUT"] = str(int(float(timeout)))
    return variables


@dataclass(frozen=True)
class Installer:
    """How to create environments and install packages: uv (with pip's configuration) or pip itself."""

    name: str
    uv: Path | None = None
    variables: dict[str, str] = field(default_factory=dict)

    @property
    def command_name(self) -> str:
        """The install command as messages name it: `uv pip install` or `pip install`."""
        return "uv pip install" if self.uv is not None else "pip install"

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The process environment of an install: os.environ, the uv variables, then `extra`."""
        return {**os.environ, **self.variables, **(extra or {})}

    def install(self, python: str | os.PathLike[str], *arguments: str) -> list[str]:
        """`pip install ARGUMENTS` for the environment of `python`."""
        if self.uv is not None:
            return [str(self.uv), "pip", "install", "--python", str(python), *arguments]
        return [str(python), "-m", "pip", "install", "--disable-pip-version-check", *arguments]

    def create(self, base_python: str | os.PathLike[str], root: str | os.PathLike[str]) -> list[str]:
        """Create a virtual environment at `root` from the machine's interpreter `base_python`."""
        if self.uv is not None:
            return [str(self.uv), "venv", "--quiet", "--python", str(base_python), str(root)]
        return [str(base_python), "-m", "venv", str(root)]

    def sync(self, python: str | os.PathLike[str], lock: str | os.PathLike[str]) -> list[str]:
        """Make the environment of `python` hold exactly what `lock` pins."""
        if self.uv is not None:
            return [str(self.uv), "pip", "sync", "--python", str(python), str(lock)]
        return [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-deps", "-r", str(lock)]

    def freeze(self, python: str | os.PathLike[str]) -> list[str]:
        """List what the environment of `python` holds, pinned."""
        if self.uv is not None:
            return [str(self.uv), "pip", "freeze", "--python", str(python)]
        return [str(python), "-m", "pip", "freeze"]


def uv_beside(python: str | os.PathLike[str] = sys.executable) -> Path | None:
    """The uv installed in the environment of `python` (from requirements.lock), if any."""
    candidate = Path(python).parent / "uv"
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


def choose(python: str | os.PathLike[str] = sys.executable) -> Installer:
    """uv configured from pip's configuration, unless WHERE223_INSTALLER=pip or no uv is installed."""
    wanted = os.environ.get(INSTALLER_VARIABLE, "uv") or "uv"
    if wanted not in INSTALLERS:
        raise ValueError(f"{INSTALLER_VARIABLE}={wanted!r}: choose one of {', '.join(INSTALLERS)}")
    uv = uv_beside(python) if wanted == "uv" else None
    if uv is None:
        return Installer("pip")
    return Installer("uv", uv, uv_variables(pip_options(python)))


CAUSE_MARKERS: tuple[str, ...] = ("├─▶", "╰─▶", "cause:", "caused by:")


def first_error_line(log: str) -> str:
    """The installer's first error line (uv's `error:` or `×`, pip's `ERROR:`), else its last line; uv's chain of
    causes on the lines after it (`├─▶`/`╰─▶` on a terminal, `cause:` elsewhere) follows on the same line, each
    after `: `, so that the deepest cause (a cut stream, a full disk) is named too."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        lowered = line.lower()
        if lowered.startswith(("error", "×")) or "error:" in lowered:
            parts = [line.rstrip(":")]
            for following in lines[index + 1:]:
                marker = next((m for m in CAUSE_MARKERS if following.lower().startswith(m)), None)
                if marker is None:
                    break
                parts.append(following[len(marker):].strip().rstrip(":"))
            return ": ".join(parts)
    return lines[-1] if lines else "the installer failed without a message"


def try_again(output: str, attempt: int) -> bool:
    """Whether an install whose `attempt`-th try (counting from 1) failed with `output` is tried again: a download
    that broke off, with fewer than ATTEMPTS tries made."""
    lowered = output.lower()
    broke_off = any(word in lowered for word in BROKE_OFF_WORDS) and not any(word in lowered for word in REFUSED_WORDS)
    return broke_off and attempt < ATTEMPTS


def pause(attempt: int) -> int:
    """Seconds to wait before try `attempt` (counting from 1): none before the first."""
    if attempt <= 1 or not PAUSES:
        return 0
    return PAUSES[min(attempt - 2, len(PAUSES) - 1)]


def before_try(attempt: int) -> dict[str, str]:
    """Wait as `pause` says before try `attempt`; the variables that try adds to the install's environment."""
    time.sleep(pause(attempt))
    return dict(RETRY_VARIABLES) if attempt > 1 else {}


class InstallError(RuntimeError):
    """An install failed; the message is one line: the command and the installer's first error line."""


def install_side_folder(requirement: str, target: Path, installer: Installer | None = None) -> Path:
    """Install `requirement` without its dependencies into the side folder `target` (`--no-deps --target`), unless
    it is there: the one side-folder installer of the project (transformers releases for sweep stacks and for
    `where223.gpt2.releases`). The files go to a staging folder beside it first and are renamed into place, so an
    interrupted or concurrent install never leaves a half-filled folder; InstallError when it fails."""
    ready = target / ".where223-side-folder"
    if ready.is_file():
        return target
    installer = installer or choose()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        command = installer.install(sys.executable, "-q", "--no-deps", "--target", str(staging), requirement)
        attempt = 1
        done = subprocess.run(command, capture_output=True, text=True, env=installer.environment(), check=False)
        while done.returncode != 0 and try_again(done.stderr + done.stdout, attempt):
            attempt += 1
            env = installer.environment(before_try(attempt))
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            first = first_error_line(done.stderr + done.stdout)
            raise InstallError(f"{installer.command_name} {requirement} failed: {first}")
        (staging / ready.name).write_text(requirement + "\n")
        if not ready.is_file():
            shutil.rmtree(target, ignore_errors=True)
            os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def compile_bytecode(folders: Sequence[str | os.PathLike[str]], python: str | os.PathLike[str] = sys.executable) -> int:
    """Write the bytecode of every module under `folders` that lacks it (or whose source changed), with `python`'s
    compileall on every core: what an environment installed before its installer compiled at install time
    (UV_COMPILE_BYTECODE) gets its bytecode here. Files that do not compile are skipped, as installers skip them;
    returns compileall's exit status."""
    command = [str(python), "-m", "compileall", "-q", "-j", "0", *map(str, folders)]
    return subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False).returncode


def shell_exports(variables: Mapping[str, str]) -> str:
    """`export NAME=value` lines, quoted for a POSIX shell."""
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in sorted(variables.items()))


def main(argv: Sequence[str] | None = None) -> int:
    """Print the uv variables derived from pip's configuration as shell `export` lines; with --try-again, exit 0
    when an install that failed as LOG says is tried again (`try_again`), having printed what that try sets and
    waits (`export` lines, then `sleep N`) for the shell to eval, else 1."""
    parser = argparse.ArgumentParser(prog="python -m where223.pipeline.installer", description=main.__doc__)
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose pip configuration counts")
    parser.add_argument("--compile", nargs="+", metavar="FOLDER", help="instead, write the bytecode under FOLDERs")
    parser.add_argument("--try-again", nargs=2, metavar=("LOG", "ATTEMPT"),
                        help="instead, exit 0 when the install that failed as LOG says, on try ATTEMPT, is tried again")
    args = parser.parse_args(argv)
    if args.try_again:
        log, attempt = args.try_again
        try:
            if not try_again(Path(log).read_text(errors="replace"), int(attempt)):
                return 1
        except (OSError, ValueError):
            return 1
        following = int(attempt) + 1
        sys.stdout.write(shell_exports(RETRY_VARIABLES) + f"sleep {pause(following)}\n")
        return 0
    if args.compile:
        compile_bytecode(args.compile, args.python)
        return 0
    sys.stdout.write(shell_exports(uv_variables(pip_options(args.python))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
