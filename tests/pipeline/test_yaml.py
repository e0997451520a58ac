"""The one YAML reader (`where223.pipeline.yamlfile`): a hostile space, plan or stacks file is one line and exit 2,
quickly, before anything walks its data; every committed YAML file still loads (the controls)."""

from __future__ import annotations

import ast
import json
import os
import resource
import subprocess
import sys

import pytest

from where223 import cli
from where223.errors import UsageError
from where223.pipeline.paths import ROOT
from where223.pipeline.run import load_plan
from where223.sweep.space import load_space
from where223.sweep.stacks import STACKS_FILE, load_stacks

SPACE = ("study: t\nrecords: 't/{model}.json'\nrunner: where223.study.matrix.run\nstacks: [project]\n"
         "recipes: [cpu_bf16_autocast]\nexporters: [torchscript]\n")  # fmt: skip
PLAN = "runs:\n  - notebook: 04_variants\n    parameters: {}\n"


def laughs(levels: int) -> str:
    """A billion laughs in flow style: `levels` lists of nine aliases of the one before (9**levels strings)."""
    lists = ["&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lists += [f"&l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, levels)]
    return f"[{', '.join(lists)}]"


BOMBS = {  # the issue's: a 9-level space (87 s on the code before, gigabytes) and an 8-level plan (78 s)
    "space": ("space.yaml", SPACE + f"models: {laughs(9)}\n", ["sweep", "--space"]),
    "plan": ("plan.yaml", f"runs:\n  - notebook: 01_reproduce\n    parameters: {{path: {laughs(8)}}}\n",
             ["run", "--params"]),
}  # fmt: skip
# The child's peak RSS is its own address space's high-water mark (VmHWM): `ru_maxrss` would also count the forked
# pytest process's pages it had before exec (hundreds of MB with torch loaded).
CHILD = """import json, re, sys, time
from pathlib import Path
from where223 import cli
start = time.monotonic()
code = cli.main(sys.argv[1:])
took = time.monotonic() - start
peak_kb = int(re.search(r"VmHWM:\\s*(\\d+) kB", Path("/proc/self/status").read_text()).group(1))
print(json.dumps({"code": code, "seconds": took, "peak_mb": peak_kb / 1024}))
"""
GIB = 2**30


def _limited() -> None:  # the child's address space: a bomb that expands fails there, not on the machine
    resource.setrlimit(resource.RLIMIT_AS, (3 * GIB, 3 * GIB))


@pytest.mark.parametrize("kind", list(BOMBS))
def test_a_billion_laughs_is_one_line_exit_2_within_half_a_second_and_200_mb(kind, tmp_path):
    """In a fresh interpreter (its peak RSS is the whole process's, imports included), capped at 3 GiB and 20 s:
    the code before walked the aliases' expansion for minutes (a timeout here)."""
    name, text, command = BOMBS[kind]
    (tmp_path / name).write_text(text)
    assert len(text) < 700
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, *command, str(tmp_path / name)], capture_output=True,
                              text=True, timeout=20, preexec_fn=_limited, cwd=ROOT)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"the {kind} bomb still ran after 20 s")
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["code"] == 2 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert "anchors and aliases" in done.stderr
    assert measured["seconds"] < 0.5 and measured["peak_mb"] < 200, measured


def test_control_the_committed_yaml_files_load():
    """Every YAML file the code reads: the spaces and the stacks file (their anchor-free, string-keyed, shallow
    text is what the reader allows); the committed plan: tests/pipeline/test_plan.py."""
    spaces = sorted(path for path in (ROOT / "spaces").glob("*.yaml") if path != STACKS_FILE)
    assert len(spaces) >= 12
    assert all(load_space(path).cells for path in spaces)
    assert "today" in load_stacks(STACKS_FILE).environments


def _one_line(argv: list[str], capsys) -> str:
    code = cli.main([str(arg) for arg in argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (code, err[-2000:])
    return err


HOSTILE_KEYS = {  # text after the base space or plan -> what the one line says
    "int key": ("1: x\n", "key '1' is not a string"),
    "null key": ("~: x\n", "key '~' is not a string"),
    "deep nesting": ("description: " + "[" * 1000 + "]" * 1000 + "\n", "nested deeper than 16 levels"),
    "an alias": ("description: &d x\nmodes: *d\n", "anchors and aliases"),
    "a key twice": ("study: u\n", "key 'study' given twice (first at line 1)"),
    "a merge key": ("identity: {<<: {a: '{model}'}}\n", "merge key << in identity is not a string"),
}


@pytest.mark.parametrize("case", list(HOSTILE_KEYS))
def test_a_hostile_space_is_one_line_exit_2(case, tmp_path, capsys):
    """Keys `1:` and `~:` and deep nesting were tracebacks (a RecursionError of thousands of lines); an alias, a
    key given twice and a merge key went through."""
    added, says = HOSTILE_KEYS[case]
    space = tmp_path / "space.yaml"
    space.write_text(SPACE + "models: [gpt2-tiny]\n" + added)
    assert says in _one_line(["sweep", "--space", space, "--summary-only", "--output-root", tmp_path], capsys)


HOSTILE_PLANS = {
    "int key": (PLAN.replace("{}", "{1: x}"), "key '1' in runs[0].parameters is not a string"),
    "null key": (PLAN + "~: x\n", "key '~' is not a string"),
    "deep nesting": (PLAN.replace("{}", "{path: " + "[" * 1000 + "]" * 1000 + "}"), "nested deeper than 16 levels"),
    "an alias": ("runs:\n  - &r {notebook: 04_variants}\n  - *r\n", "anchors and aliases"),
}


@pytest.mark.parametrize("case", list(HOSTILE_PLANS))
def test_a_hostile_plan_is_one_line_exit_2(case, tmp_path, capsys):
    text, says = HOSTILE_PLANS[case]
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    err = _one_line(["run", "--params", plan], capsys)
    assert says in err and f"{plan}:" in err


def test_control_a_plain_space_and_plan_in_the_same_form_load(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE + "models: [gpt2-tiny]\ndescription: '1'\nidentity: {a: '{model}'}\n")
    assert [c.model for c in load_space(tmp_path / "space.yaml").cells] == ["gpt2-tiny"]
    (tmp_path / "plan.yaml").write_text(PLAN)
    assert [run.notebook for run in load_plan(tmp_path / "plan.yaml")] == ["04_variants"]


def test_an_unknown_key_of_a_stacks_file_is_refused_where_it_appears(tmp_path):
    """A stacks file's keys, at the top and in each environment: a misspelling was ignored (the environment then
    built without its `requirements`)."""
    text = STACKS_FILE.read_text()
    misspelled = text.replace("    requirements: [torch==2.0.1", "    requirement: [torch==2.0.1")
    (tmp_path / "stacks.yaml").write_text(misspelled)
    with pytest.raises(UsageError, match=r"unknown key 'requirement' in environments.torch-2.0.1; did you mean "
                                         r"requirements\?"):
        load_stacks(tmp_path / "stacks.yaml")
    (tmp_path / "stacks.yaml").write_text(text + "transformer: [4.26.0]\n")
    with pytest.raises(UsageError, match=r"stacks.yaml:\d+: unknown key 'transformer'; did you mean transformers\?"):
        load_stacks(tmp_path / "stacks.yaml")
    (tmp_path / "stacks.yaml").write_text(text)  # control: the committed text, copied
    assert load_stacks(tmp_path / "stacks.yaml").environments.keys() == load_stacks().environments.keys()


def test_the_reader_bounds_the_file_and_reads_only_regular_utf8_files(tmp_path):
    from where223.pipeline import yamlfile

    big = tmp_path / "big.yaml"
    big.write_text("description: '" + "x" * yamlfile.MAX_BYTES + "'\n")
    with pytest.raises(yamlfile.YamlFileError, match=r"big.yaml: larger than 256 KiB"):
        yamlfile.read(big)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # the code before blocked here, waiting for a writer
    with pytest.raises(yamlfile.YamlFileError, match="fifo.yaml: not a regular file"):
        yamlfile.read(fifo)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"study: caf\xe9\n")
    with pytest.raises(yamlfile.YamlFileError, match="not UTF-8 text"):
        yamlfile.read(latin)
    tagged = tmp_path / "tagged.yaml"
    tagged.write_text("study: !!python/object/apply:os.system [echo]\n")
    with pytest.raises(yamlfile.YamlFileError, match=r"tagged.yaml:1: not valid YAML: could not determine a "):
        yamlfile.read(tagged)
    big.write_text("description: '" + "x" * (yamlfile.MAX_BYTES - 100) + "'\n")  # the controls: just under
    assert len(yamlfile.read(big)["description"]) == yamlfile.MAX_BYTES - 100
    assert yamlfile.read(STACKS_FILE)["transformers"][0] == "4.22.0"


def test_unknown_keys_are_refused_where_they_appear_with_a_suggestion(tmp_path):
    from where223.pipeline import yamlfile

    path = tmp_path / "f.yaml"
    schema = {"runs": yamlfile.Items({"notebook": None, "parameters": yamlfile.Names()}), "free": None}
    path.write_text("runs:\n  - {notebook: a, parameter: {}}\n  - {notebook: b, parameters: {any: {1: x}}}\n"
                    "run: []\nfree: {anything: 1}\n")  # fmt: skip
    with pytest.raises(yamlfile.YamlFileError) as caught:
        yamlfile.read(path, schema)
    assert caught.value.problems == [
        f"{path}:2: unknown key 'parameter' in runs[0]; did you mean parameters?",
        f"{path}:3: key '1' in runs[1].parameters.any is not a string (quote it)",
        f"{path}:4: unknown key 'run'; did you mean runs?",
    ]
    path.write_text("runs:\n  - {notebook: a, parameters: {any: {'1': x}}}\nfree: {anything: 1}\n")  # control
    assert yamlfile.read(path, schema)["runs"][0]["parameters"] == {"any": {"1": "x"}}


SOURCE = ROOT / "src" / "where223"
READERS = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all", "full_load_all",
           "unsafe_load_all", "compose", "compose_all", "parse", "scan"}  # fmt: skip


def yaml_readers(source: str) -> list[int]:
    """The lines of `source` that read YAML other than through the one reader: `yaml.<reader>(...)`, PyYAML's
    loader classes, or a reader imported by name (`from yaml import safe_load`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "yaml":
            if node.attr in READERS or node.attr.endswith("Loader"):
                found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "yaml":
            if any(alias.name in READERS or alias.name.endswith("Loader") for alias in node.names):
                found.append(node.lineno)
    return found


def test_every_yaml_file_is_read_by_the_one_reader():
    sources = {path: text for path in sorted(SOURCE.rglob("*.py")) if "yaml" in (text := path.read_text())}
    elsewhere = {path.relative_to(SOURCE).as_posix(): lines for path, text in sources.items()
                 if path.name != "yamlfile.py" and (lines := yaml_readers(text))}  # fmt: skip
    assert elsewhere == {}
    assert yaml_readers((SOURCE / "pipeline" / "yamlfile.py").read_text())  # the reader itself is found
    for written in ("data = yaml.safe_load(text)\n", "from yaml import safe_load\n", "yaml.load(t, yaml.CLoader)\n"):
        assert yaml_readers(written), written  # controls: the ways the readers were written are caught
    assert yaml_readers("text = yaml.safe_dump(data)\n") == []
