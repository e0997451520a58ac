"""Stacks: the locked environments sweep cells run in, built by uv on a worker's first use and kept.

`spaces/stacks.yaml` names each environment's Python version and committed lock. A stack is an environment's
name, optionally with a transformers release on top from its side folder: `torch-2.1.2+transformers-4.22.0`.
`project` is the environment running the sweep worker itself (`make setup`'s `.venv`).

`prepare` builds a stack on the worker that needs it, under a file lock that every worker of one host shares
(one build per host; the others wait, then use it), outside any cell's time limit: `uv venv` from the machine's
interpreter of that Python version (never a downloaded one), then `uv pip sync` of the lock, with pip's
configuration handed to uv (`where223.pipeline.installer`, whose `try_again` says when a sync whose download broke
off is tried again). A built environment is marked by a file holding its lock's hash and is reused; a failed build
is not marked, so a later sweep tries again, and its cells are `not_built` with the installer's first error line.

`where223 sweep --space FILE --lock` compiles the `requirements` (plus `common`) of the space's environments
into their locks with `uv pip compile` for each one's Python version.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from where223.errors import UsageError
from where223.pipeline import installer as installers
from where223.pipeline import yamlfile
from where223.pipeline.installer import first_error_line
from where223.pipeline.paths import CACHE, ROOT

STACKS_FILE: Path = ROOT / "spaces" / "stacks.yaml"
STACKS_VARIABLE = "WHERE223_STACKS"  # another stacks file, for the driver and its workers alike (the engine's tests)
ENVS: Path = CACHE / "sweep" / "envs"
LOCKS: Path = CACHE / "sweep" / "locks"  # the file locks of builds, one per environment or side folder
SIDE_FOLDERS: Path = CACHE / "transformers"  # the same side folders `where223.gpt2.releases` uses
PROJECT = "project"
OVERLAY = "+transformers-"
READY = "where223-env.json"


_PINS: dict[Path, dict[str, str]] = {}


@dataclass(frozen=True)
class Environment:
    """One locked environment of `stacks.yaml`."""

    name: str
    python: str
    lock: Path
    requirements: tuple[str, ...] = ()
    common: bool = True  # False: the file's `common` requirements are not added (a stack they would break)

    def pins(self) -> dict[str, str]:
        """The lock's `name==version` pins, by lower-cased name (read once per process)."""
        if self.lock in _PINS:
            return _PINS[self.lock]
        pins = _PINS[self.lock] = {}
        for line in self.lock.read_text().splitlines():
            text = line.split("#", 1)[0].strip()
            if "==" in text and not text.startswith("-"):
                name, version = text.split("==", 1)
                pins[name.strip().lower().replace("_", "-")] = version.split(";")[0].strip()
        return pins

    def digest(self) -> str:
        """A short hash of the Python version and the lock: a changed lock builds a new environment."""
        return hashlib.sha256(f"{self.python}\n{self.lock.read_text()}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Stack:
    """A cell's stack: an environment, and the transformers release on top of it (None: the lock's own)."""

    name: str
    environment: Environment
    transformers: str | None = None

    def attributes(self) -> dict[str, str | None]:
        """What record paths and readers name a stack by: its torch and transformers versions."""
        pins = self.environment.pins()
        return {"torch": pins.get("torch"), "transformers": self.transformers or pins.get("transformers")}


@dataclass(frozen=True)
class Stacks:
    """Every environment and overlay release of a stacks file."""

    environments: dict[str, Environment]
    common: tuple[str, ...]
    transformers: tuple[str, ...]

    def stack(self, name: str) -> Stack:
        """The stack called `name`; UsageError (one line) for a name the file does not define."""
        env_name, overlay, version = name.partition(OVERLAY)
        if env_name not in self.environments:
            known = ", ".join(self.environments)
            raise UsageError(f"unknown stack {name!r}: no environment {env_name!r} (stacks.yaml has {known})")
        if overlay and version not in self.transformers:
            raise UsageError(
                f"unknown stack {name!r}: transformers {version!r} is not among stacks.yaml's "
                f"({', '.join(self.transformers)})"
            )
        environment = self.environments[env_name]
        if overlay and environment.pins().get("transformers") == version:
            version = ""  # the lock's own release needs no side folder
        return Stack(name, environment, version or None)


# The keys of a stacks file, for its reader (`where223.pipeline.yamlfile`): every other key is refused.
STACKS_SCHEMA: yamlfile.Schema = {
    "environments": yamlfile.Names({"python": None, "lock": None, "requirements": None, "common": None}),
    "common": None,
    "transformers": None,
}


def load_stacks(path: Path | None = None) -> Stacks:
    """Read a stacks file (YAML, by `where223.pipeline.yamlfile`; default WHERE223_STACKS, else
    `spaces/stacks.yaml`); UsageError (one line) for one that is missing or malformed."""
    path = path or Path(os.environ.get(STACKS_VARIABLE) or STACKS_FILE)
    data = yamlfile.read(path, STACKS_SCHEMA)
    try:
        environments = {
            name: Environment(
                name, str(spec["python"]), ROOT / spec["lock"], tuple(str(r) for r in spec.get("requirements", ())),
                bool(spec.get("common", True)),
            )
            for name, spec in data["environments"].items()
        }
        return Stacks(environments, tuple(map(str, data.get("common", ()))), tuple(map(str, data["transformers"])))
    except (OSError, KeyError, TypeError, AttributeError) as error:
        raise UsageError(f"cannot read the stacks file {path}: {type(error).__name__}: {error}") from None


@dataclass(frozen=True)
class Prepared:
    """A stack ready to run cells (its interpreter and what goes first on PYTHONPATH), or why it is not."""

    python: Path | None
    path: tuple[Path, ...] = ()
    error: str | None = None


@contextmanager
def host_lock(name: str) -> Iterator[None]:
    """An exclusive file lock shared by every process of this host (flock; released when the process dies)."""
    LOCKS.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCKS / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def machine_python(version: str) -> Path | None:
    """The machine's interpreter of a Python version (`pythonX.Y` on PATH, then pyenv's), or None; the running
    interpreter when it is that version. Never downloaded."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return Path(sys.executable)
    name = f"python{version}"
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = [found for found in [shutil.which(name)] if found]
    candidates += sorted(str(p) for p in pyenv_root.glob(f"versions/*/bin/{name}"))
    for candidate in candidates:
        probe = [candidate, "-c", "import sys; sys.stdout.write(sys.executable)"]
        result = subprocess.run(probe, capture_output=True, text=True, check=False)
        if result.returncode == 0 and result.stdout.strip():
            return Path(result.stdout.strip())
    return None


def _run(command: Sequence[str], log: Path, env: dict[str, str]) -> int:
    with log.open("a") as handle:
        handle.write(f"$ {' '.join(map(str, command))}\n")
        handle.flush()
        return subprocess.run(list(map(str, command)), stdout=handle, stderr=subprocess.STDOUT, env=env).returncode


def env_root(environment: Environment, envs: Path = ENVS) -> Path:
    """Where an environment is built under `envs` (named by its lock's hash)."""
    return envs / f"{environment.name}-{environment.digest()}"


def build_environment(environment: Environment, envs: Path = ENVS) -> tuple[Path | None, str | None]:
    """The interpreter of a built environment, building it once (call under `host_lock`); else (None, why)."""
    if environment.name == PROJECT:
        return Path(sys.executable), None
    root = env_root(environment, envs)
    python = root / "bin" / "python"
    marker = root / READY
    if marker.is_file() and python.is_file():
        return python, None
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    log = root.parent / f"{root.name}.log"
    log.write_text("")
    base = machine_python(environment.python)
    if base is None:
        return None, f"this machine has no Python {environment.python} (python{environment.python} on PATH or pyenv)"
    installer = installers.choose()
    env = installer.environment()
    rc = _run(installer.create(base, root), log, env)
    attempt, tried = 1, ""
    while rc == 0:
        done = len(log.read_text())
        rc = _run(installer.sync(python, environment.lock), log, env)
        tried = log.read_text()[done:]
        if rc == 0 or not installers.try_again(tried, attempt):
            break
        attempt += 1
        env = {**env, **installers.before_try(attempt)}
        rc = 0
    if rc != 0:
        shutil.rmtree(root, ignore_errors=True)
        after = f" (after {attempt} tries)" if attempt > 1 else ""
        why = first_error_line(tried or log.read_text())
        return None, f"{installer.name} could not build {environment.name}{after}: {why}"
    marker.write_text(json.dumps({"lock": str(environment.lock), "digest": environment.digest()}) + "\n")
    return python, None


def side_folder(version: str) -> tuple[Path | None, str | None]:
    """transformers `version`'s side folder, installed once (under the host lock); else (None, why)."""
    with host_lock(f"transformers-{version}"):
        try:
            return installers.install_side_folder(f"transformers=={version}", SIDE_FOLDERS / version), None
        except installers.InstallError as error:
            return None, str(error)


_failed: dict[str, str] = {}  # builds that failed in this process: not retried by its next cells


def prepare(stack: Stack) -> Prepared:
    """Make `stack` ready on this host (once per host, under its lock); a failure is returned, not raised."""
    if stack.name in _failed:
        return Prepared(None, error=_failed[stack.name])
    with host_lock(stack.environment.name):
        python, error = build_environment(stack.environment)
    side: tuple[Path, ...] = ()
    if python is not None and stack.transformers:
        folder, error = side_folder(stack.transformers)
        side = (folder,) if folder else ()
    if error is not None:
        _failed[stack.name] = error
        return Prepared(None, error=error)
    return Prepared(python, side)


def compile_lock(environment: Environment, common: Sequence[str]) -> Path:
    """Compile an environment's requirements (and `common`) into its lock with uv, for its Python version."""
    installer = installers.choose()
    if installer.uv is None:
        raise UsageError("compiling a lock needs uv (make setup installs it into .venv)")
    source = environment.lock.with_suffix(".in")
    source.write_text("\n".join([*environment.requirements, *(common if environment.common else ())]) + "\n")
    command = [
        str(installer.uv), "pip", "compile", "--quiet", "--python-version", environment.python,
        "--python-platform", "x86_64-manylinux_2_28", "--no-header", "--output-file", str(environment.lock),
        str(source),
    ]  # fmt: skip
    done = subprocess.run(command, env=installer.environment(), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise UsageError(f"uv pip compile for {environment.name} failed: {first_error_line(done.stderr)}")
    return environment.lock


def describe(stack: Stack) -> dict[str, Any]:
    """A stack as a record names it."""
    lock = stack.environment.lock
    shown = lock.relative_to(ROOT).as_posix() if lock.is_relative_to(ROOT) else lock.name
    return {"name": stack.name, "environment": stack.environment.name, "python": stack.environment.python,
            "lock": shown, **stack.attributes()}  # fmt: skip

