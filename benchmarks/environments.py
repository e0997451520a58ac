"""Environments side by side, in one run: fresh setup time, disk of matrix environments, lint against the checker.

(a) setup: `bash scripts/setup-env.sh` in a scratch copy of this working tree (what a clone of it would hold,
    `git init`-ed, no .venv, no .cache), from an empty uv cache; with `--with-pip` also with
    WHERE223_INSTALLER=pip from an empty pip cache (slower), each timed per phase.
(b) matrix disk: two matrix environments (default torch 2.1.2 and 2.2.2) built with
    `where223.sweep.stacks.build_environment` into a scratch folder beside the uv cache: the apparent size of each,
    the size counting every hard-linked file once, and the files duplicated across environments (same
    content, different inode): none of the same package release (the target), the rest equal files of
    different releases or per-install metadata.
(c) lint: every ONNX conformance model shipped with onnx (`onnx/backend/test/data/**/model.onnx`), each timed
    from its path as a user runs it: `where223.graph.lint_model(path)` against
    `onnx.checker.check_model(path, full_check=True)`; the totals and their ratio (target: within 5x, `met`), the
    load before and after; then, in a pass apart, lint's parts (opening with the guards, typing, the check) summed.

The record goes to outputs/benchmarks/environments.json with the environment and the run (`run`: commit, machine,
start): the parts left out by `--skip-*` are left out of it, not kept from an earlier run; the ratios are printed.

    .venv/bin/python benchmarks/environments.py [--with-pip] [--skip-setup] [--skip-matrix] [--skip-lint]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import importlib.metadata
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from where223.pipeline import environment, paths, records

RECORD: Path = paths.OUTPUTS / "benchmarks" / "environments.json"
MATRIX_TORCH: tuple[str, ...] = ("2.1.2", "2.2.2")
LINT_TARGET_RATIO = 5.0
SETUP_TARGET_S = 180.0


def working_tree_files(root: Path) -> list[Path]:
    """What a clone of `root` would hold if its working tree were committed: tracked and unignored files."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted({Path(name) for name in listed.split("\0") if name and (root / name).is_file()})


def scratch_copy(root: Path, destination: Path) -> Path:
    """Copy the working tree of `root` (no .venv, no .cache, no ignored files) to `destination`, git-init-ed."""
    for relative in working_tree_files(root):
        target = destination / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / relative, target)
    subprocess.run(["git", "init", "-q"], cwd=destination, check=True)
    return destination


def timed_setup(checkout: Path, installer: str, cache: Path) -> dict[str, Any]:
    """Run scripts/setup-env.sh in `checkout` with `installer` and an empty cache; seconds in all and per phase."""
    cache.mkdir(parents=True, exist_ok=True)
    variables = {
        "WHERE223_INSTALLER": installer,
        "UV_CACHE_DIR": str(cache / "uv"),
        "PIP_CACHE_DIR": str(cache / "pip"),
    }
    env = {key: value for key, value in os.environ.items() if key not in {"VIRTUAL_ENV", "PYTHONPATH"}}
    start, cpu_before = time.monotonic(), _children_cpu_s()
    phases: list[dict[str, Any]] = []
    log: list[str] = []
    with subprocess.Popen(
        ["bash", "scripts/setup-env.sh"],
        cwd=checkout,
        env={**env, **variables},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            log.append(line.rstrip())
            if line.startswith("setup: "):
                phases.append({"at_s": round(time.monotonic() - start, 1), "step": line[7:].strip()})
    seconds = round(time.monotonic() - start, 1)
    return {
        "installer": installer,
        "seconds": seconds,
        # CPU seconds of the whole setup (compilers included): over 2 cores, the wall time on an idle machine
        "cpu_s": round(_children_cpu_s() - cpu_before, 1),
        "load_average_at_end": [round(load, 2) for load in os.getloadavg()],  # 1, 5, 15 min: other work slows it
        "returncode": process.returncode,
        "phases": phases,
        "cache_bytes": tree_bytes(cache),
        "log_tail": log[-15:] if process.returncode else [],
    }


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def tree_bytes(root: Path) -> int:
    """Bytes under `root`, every inode counted once."""
    return disk_usage([root])["unique_bytes"] if root.exists() else 0


def _files(root: Path) -> Iterable[tuple[Path, os.stat_result]]:
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            stat = path.lstat()
            if not path.is_symlink():
                yield path, stat


def disk_usage(roots: Sequence[Path]) -> dict[str, Any]:
    """Apparent bytes of each root, and bytes counting every inode once across all of them."""
    seen: dict[tuple[int, int], int] = {}
    per_root: dict[str, dict[str, int]] = {}
    for root in roots:
        apparent = files = linked = 0
        for _, stat in _files(root):
            apparent += stat.st_size
            files += 1
            linked += stat.st_size if stat.st_nlink > 1 else 0
            seen[(stat.st_dev, stat.st_ino)] = stat.st_size
        per_root[str(root)] = {"apparent_bytes": apparent, "files": files, "hard_linked_bytes": linked}
    return {
        "roots": per_root,
        "unique_bytes": sum(seen.values()),
        "apparent_bytes": sum(entry["apparent_bytes"] for entry in per_root.values()),
    }


def _digest(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=20)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _shown(relative: Path) -> str:
    """A path inside an environment as a reader wants it: from site-packages on, where it lies there."""
    text = relative.as_posix()
    return text.split("site-packages/", 1)[1] if "site-packages/" in text else text


def release_owners(root: Path) -> dict[Path, str]:
    """The installed release (`name-version`, from its RECORD) of each payload file under `root`.

    Payload: what the wheel put in site-packages; not the dist-info metadata or the bin/ scripts, which every
    install writes anew (RECORD, INSTALLER, entry points)."""
    owners: dict[Path, str] = {}
    for record in root.rglob("*.dist-info/RECORD"):
        release = record.parent.name.removesuffix(".dist-info")
        site = record.parent.parent
        for row in csv.reader(record.read_text().splitlines()):
            if row and ".dist-info/" not in row[0] and not row[0].startswith(".."):
                owners[Path(os.path.normpath(site / row[0])).relative_to(root)] = release
    return owners


def duplicated_across(roots: Sequence[Path], min_bytes: int = 1) -> dict[str, Any]:
    """Files whose content lies in two or more roots under different inodes (copies a hard link would save).

    `files`/`bytes` count the copies beyond one per content (the roots holding it, minus one). `same_release_*`
    count those in the payload of the same release of the same package in each root (by their RECORD): one
    shared cache should link every one of them, so the target is zero. The rest are equal files of different
    releases (torch 2.1.2 and 2.2.2 ship many of the same headers), which a cache of whole wheels cannot share,
    and the metadata each install writes anew. `largest` gives examples.
    """
    owners = [release_owners(root) for root in roots]
    by_size: dict[int, dict[tuple[int, int], tuple[int, Path]]] = defaultdict(dict)
    for index, root in enumerate(roots):
        for path, stat in _files(root):
            if stat.st_size >= min_bytes:
                by_size[stat.st_size].setdefault((stat.st_dev, stat.st_ino), (index, path))
    totals = {"files": 0, "bytes": 0, "same_release_files": 0, "same_release_bytes": 0}
    examples: list[tuple[int, str]] = []
    for size, inodes in by_size.items():
        if len({index for index, _ in inodes.values()}) < 2:
            continue  # one root only (or one inode): nothing duplicated across roots
        by_content: dict[str, list[tuple[int, Path]]] = defaultdict(list)
        for index, path in inodes.values():
            by_content[_digest(path)].append((index, path.relative_to(roots[index])))
        for copies in by_content.values():
            holders = len({index for index, _ in copies})
            if holders < 2:
                continue
            totals["files"] += holders - 1  # one copy per root would do; copies inside one root are not counted
            totals["bytes"] += size * (holders - 1)
            roots_of_release: dict[str, set[int]] = defaultdict(set)
            for index, relative in copies:
                release = owners[index].get(relative)
                if release:
                    roots_of_release[release].add(index)
            same_release = sum(len(indexes) - 1 for indexes in roots_of_release.values())
            totals["same_release_files"] += same_release
            totals["same_release_bytes"] += size * same_release
            examples.append((size, _shown(copies[0][1])))
    examples.sort(reverse=True)
    return {**totals, "largest": [{"bytes": size, "path": path} for size, path in examples[:10]]}


def matrix_disk(torch_versions: Sequence[str], scratch: Path) -> dict[str, Any]:
    """Build the stacks' torch environments with `build_environment` under `scratch`; their sizes and duplication."""
    from where223.pipeline import installer
    from where223.sweep import stacks

    built: dict[str, Any] = {}
    roots = []
    environments = stacks.load_stacks().environments
    for version in torch_versions:
        start = time.monotonic()
        python, error = stacks.build_environment(environments[f"torch-{version}"], envs=scratch)
        seconds = round(time.monotonic() - start, 1)
        if python is None:
            raise RuntimeError(f"matrix environment torch {version} failed: {error}")
        root = stacks.env_root(environments[f"torch-{version}"], scratch)
        built[version] = {"seconds": seconds, "installer": installer.choose().name}
        roots.append(root)
    usage = disk_usage(roots)
    for version, root in zip(torch_versions, roots, strict=True):
        built[version].update(usage["roots"][str(root)])
    return {
        "environments": built,
        "apparent_bytes": usage["apparent_bytes"],
        "unique_bytes": usage["unique_bytes"],
        "duplicated_across_environments": duplicated_across(roots),
    }


def conformance_models() -> list[Path]:
    """Every `model.onnx` of onnx's backend test data, in the installed onnx."""
    import onnx

    data = Path(onnx.__file__).parent / "backend" / "test" / "data"
    return sorted(data.glob("**/model.onnx"))


def lint_against_checker(models: Sequence[Path], repeats: int = 3) -> dict[str, Any]:
    """Seconds of `lint_model(path)` and of `check_model(path, full_check=True)` summed over `models`.

    Each model's time is the fastest of `repeats` runs, the two tools taking turns (each goes first on every
    other model), so that a busy machine's noise does not land on one side. Then, apart (it does not touch the
    ratio), lint's own phases on each model, the fastest of `repeats` each, summed: what its time goes to."""
    import onnx
    from google.protobuf.internal import api_implementation

    from where223.graph import lint_model
    from where223.graph.lint import lint_types
    from where223.graph.loading import open_model
    from where223.graph.types import types_of_loaded

    def run(function, path: Path) -> tuple[float, str | None]:
        start = time.perf_counter()
        try:
            function(path)
        except Exception as error:  # noqa: BLE001 - a model either tool refuses still costs its time
            return time.perf_counter() - start, type(error).__name__
        return time.perf_counter() - start, None

    def check(path: Path) -> None:
        onnx.checker.check_model(str(path), full_check=True)

    started = environment.this_run()
    load_before = os.getloadavg()
    lint_model(models[0]), check(models[0])  # imports and first-call costs out of the timing
    totals = {"lint": 0.0, "checker": 0.0}
    errors: dict[str, dict[str, int]] = {"lint": defaultdict(int), "checker": defaultdict(int)}
    slowest: list[tuple[float, str]] = []
    for number, path in enumerate(models):
        order = [("lint", lint_model), ("checker", check)]
        times: dict[str, float] = {}
        failure: dict[str, str | None] = {}
        for _ in range(repeats):
            for name, function in order if number % 2 == 0 else order[::-1]:
                seconds, failure[name] = run(function, path)
                times[name] = min(seconds, times.get(name, seconds))
        for name, _ in order:
            totals[name] += times[name]
            if failure[name]:
                errors[name][failure[name]] += 1
        slowest.append((times["lint"] / max(times["checker"], 1e-9), path.parent.name))
    slowest.sort(reverse=True)
    phases = {"open (read, parse, guards)": 0.0, "types (onnx's inference, then ours)": 0.0, "check": 0.0}
    for path in models:  # models without local functions (lint_model inlines those first: another path)
        best = dict.fromkeys(phases, float("inf"))
        try:
            for _ in range(repeats):
                start = time.perf_counter()
                opened = open_model(path)
                if opened.model.functions:
                    raise ValueError("local functions")
                opened_at = time.perf_counter()
                types = types_of_loaded(opened.model, opened.path, opened.graphs, shapes=False)
                typed_at = time.perf_counter()
                lint_types(types, str(path))
                done = time.perf_counter()
                for name, seconds in zip(phases, (opened_at - start, typed_at - opened_at, done - typed_at),
                                         strict=True):  # fmt: skip
                    best[name] = min(best[name], seconds)
        except Exception:  # noqa: BLE001 - a model lint refuses, or one with functions: left out of the phases
            continue
        for name in phases:
            phases[name] += best[name]
    ratio = round(totals["lint"] / totals["checker"], 2)
    return {
        "run": started,
        "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": {**environment.describe(), "cpu_count": os.cpu_count()},
        "load_average_before": [round(value, 2) for value in load_before],
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
        "models": len(models),
        "repeats": repeats,
        "lint_s": round(totals["lint"], 3),
        "checker_s": round(totals["checker"], 3),
        "ratio_lint_to_checker": ratio,
        "target_ratio": LINT_TARGET_RATIO,
        "met": ratio <= LINT_TARGET_RATIO,
        # timed apart from lint_s (another pass, each part the fastest of its repeats): not phases of that total
        "lint_parts_apart_s": {name: round(seconds, 3) for name, seconds in phases.items()},
        "errors": {name: dict(counts) for name, counts in errors.items()},
        "highest_per_model_ratios": [{"model": name, "ratio": round(r, 1)} for r, name in slowest[:10]],
        "protobuf": importlib.metadata.version("protobuf"),
        "protobuf_backend": api_implementation.Type(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--with-pip", action="store_true", help="also time setup with pip (about 4+ minutes)")
    parser.add_argument("--skip-setup", action="store_true", help="leave out (a), the fresh setup")
    parser.add_argument("--skip-matrix", action="store_true", help="leave out (b), the matrix environments")
    parser.add_argument("--skip-lint", action="store_true", help="leave out (c), lint against the checker")
    parser.add_argument("--torch", default=",".join(MATRIX_TORCH), help="matrix environments to build for (b)")
    parser.add_argument("--out", type=Path, default=RECORD, help="where to write the record")
    args = parser.parse_args(argv)

    record: dict[str, Any] = {
        "run": environment.this_run(),
        "environment": {**environment.describe(), "cpu_count": os.cpu_count()},
        "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    ratios: dict[str, float] = {}
    scratch_root = paths.CACHE / "benchmarks"  # same filesystem as .cache/uv: hard links can work
    scratch_root.mkdir(parents=True, exist_ok=True)
    if not args.skip_setup:
        runs = []
        for installer in ["uv", "pip"] if args.with_pip else ["uv"]:
            with tempfile.TemporaryDirectory(prefix=f"setup-{installer}-") as scratch:
                checkout = scratch_copy(paths.ROOT, Path(scratch) / "where223")
                run = timed_setup(checkout, installer, Path(scratch) / "cache")
                run["venv_bytes"] = disk_usage([checkout / ".venv"])["roots"][str(checkout / ".venv")]["apparent_bytes"]
                runs.append(run)
                print(f"setup with {installer}: {run['seconds']:.0f} s (exit {run['returncode']})", flush=True)
        record["setup"] = {
            "runs": runs,
            "target_s": SETUP_TARGET_S,
            "files_copied": len(working_tree_files(paths.ROOT)),
        }
        if len(runs) == 2:
            ratios["setup_pip_to_uv"] = round(runs[1]["seconds"] / runs[0]["seconds"], 2)
    if not args.skip_matrix:
        scratch = Path(tempfile.mkdtemp(prefix="matrix-envs-", dir=scratch_root))
        try:
            record["matrix_disk"] = matrix_disk([v.strip() for v in args.torch.split(",")], scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        disk = record["matrix_disk"]
        ratios["matrix_apparent_to_unique"] = round(disk["apparent_bytes"] / disk["unique_bytes"], 2)
        print(
            f"matrix environments: {disk['apparent_bytes'] / 2**30:.2f} GiB apparent, "
            f"{disk['unique_bytes'] / 2**30:.2f} GiB counting hard links once; duplicated across: "
            f"{disk['duplicated_across_environments']['files']} files, "
            f"{disk['duplicated_across_environments']['bytes'] / 2**20:.1f} MiB",
            flush=True,
        )
    if not args.skip_lint:
        record["lint_vs_checker"] = lint = lint_against_checker(conformance_models())
        ratios["lint_to_checker"] = lint["ratio_lint_to_checker"]
        print(
            f"lint vs checker over {lint['models']} conformance models: {lint['lint_s']:.2f} s vs "
            f"{lint['checker_s']:.2f} s (protobuf {lint['protobuf']}, {lint['protobuf_backend']})",
            flush=True,
        )
    record["ratios"] = ratios
    records.write_json(args.out, record)
    for name, value in ratios.items():
        print(f"ratio {name}: {value}")
    print(f"record: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
