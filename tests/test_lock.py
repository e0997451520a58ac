"""requirements.lock is installed as listed (--no-deps), so it must be complete: every dependency of every pinned
package, with the extras its dependents ask for, is pinned and within its declared bounds, except the overrides
the lock's header explains. Checked against the metadata of the installed packages."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from where223.pipeline.paths import ROOT

# protobuf 7 (upb) over transformers[sentencepiece]'s protobuf<=3.20.2 (via optimum 1.5.1), and rfc3987-syntax left
# out of jsonschema[format-nongpl] (its import builds a grammar in every nbformat process): the lock's header.
OVERRIDES = {"protobuf", "rfc3987-syntax"}


def lock_pins(text: str) -> dict[str, Version]:
    pins = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def installed_requirements(name: str) -> list[Requirement]:
    return [Requirement(text) for text in metadata.requires(name) or []]


def unmet(pins: dict[str, Version], requirements_of: Callable[[str], list[Requirement]]) -> dict[str, list[str]]:
    """Dependency -> the requirements on it that the pins leave unmet (missing or out of bounds)."""
    problems: dict[str, list[str]] = {}
    queue = [(name, "") for name in pins]
    seen = set()
    while queue:
        name, extra = queue.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        for requirement in requirements_of(name):
            if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
                continue
            if not requirement.marker and extra:
                continue  # a base requirement, already checked with extra ""
            dependency = canonicalize_name(requirement.name)
            pinned = pins.get(dependency)
            if pinned is None or not requirement.specifier.contains(pinned, prereleases=True):
                problems.setdefault(dependency, []).append(f"{name}{f'[{extra}]' if extra else ''}: {requirement}")
            if pinned is not None:
                queue += [(dependency, wanted) for wanted in requirement.extras]
    return problems


def test_the_lock_pins_every_dependency_within_bounds_except_the_documented_overrides():
    problems = unmet(lock_pins((ROOT / "requirements.lock").read_text()), installed_requirements)
    assert set(problems) == OVERRIDES, problems  # and each override is still needed


def test_the_control_a_missing_or_out_of_bounds_pin_is_reported():
    pins = lock_pins("torch==2.1.2\nsympy==1.14.0\nfilelock==4.3.1\n")
    requirements = {
        "torch": [Requirement("sympy"), Requirement("filelock>=5"), Requirement("jinja2"), Requirement("x[extra1]")],
        "x": [Requirement('y; extra == "extra1"'), Requirement('z; extra == "other"')],
    }
    problems = unmet(pins, lambda name: requirements.get(name, []))
    assert set(problems) == {"filelock", "jinja2", "x"}
    pins["x"] = Version("1")
    assert set(unmet(pins, lambda name: requirements.get(name, []))) == {"filelock", "jinja2", "y"}
