"""Study figures are drawn on Figure() alone: in a fresh process they import no networkx, torch or pyplot,
leave matplotlib's backend as they found it, and write the same bytes in every process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from where223.pipeline.paths import OUTPUTS

FORBIDDEN = ("networkx", "torch", "matplotlib.pyplot")
# Starts on a backend other than Agg, as a Jupyter kernel does (inline); imports both study figures, runs
# a control's sabotage (argv[1]), draws the named figures (argv[3:]) into argv[2] from the records in outputs/.
PROBE = f"""
import json, sys
from pathlib import Path
import matplotlib
matplotlib.use("svg")
before = matplotlib.get_backend()
from where223.study.matrix import figure as matrix_figure
from where223.study.variants import figure as variant_figure
exec(sys.argv[1])
out, outputs = Path(sys.argv[2]), Path({str(OUTPUTS)!r})
if "variants" in sys.argv[3:]:
    variant_figure.draw(json.loads((outputs / "variants" / "variants-cpu.json").read_text()), out / "variants")
if "heatmap" in sys.argv[3:]:
    matrix_figure.draw(json.loads((outputs / "matrix" / "matrix.json").read_text()), out / "heatmap")
modules = sorted(m for m in {FORBIDDEN!r} if m in sys.modules)
print(json.dumps({{"backend": [before, matplotlib.get_backend()], "modules": modules}}))
"""
# What someone might add to the drawing code, each a control the checks must catch.
SABOTAGE = {
    "switches the backend": (
        "_new = variant_figure.new_figure\n"
        "def _switching(figsize):\n"
        "    matplotlib.use('Agg')\n"
        "    return _new(figsize)\n"
        "variant_figure.new_figure = _switching\n"
    ),
    "draws through pyplot": (
        "def _pyplot(figsize):\n"
        "    import matplotlib.pyplot as plt\n"
        "    return plt.figure(figsize=figsize)\n"
        "variant_figure.new_figure = _pyplot\n"
    ),
    "imports networkx": "import where223.graph.draw\n",
    "saves with random svg ids": (
        "def _unsalted(figure, stem):\n"
        "    paths = [Path(f'{stem}.png'), Path(f'{stem}.svg')]\n"
        "    paths[0].parent.mkdir(parents=True, exist_ok=True)\n"
        "    figure.savefig(paths[0], dpi=150, bbox_inches='tight')\n"
        "    figure.savefig(paths[1], bbox_inches='tight', metadata={'Date': None})\n"
        "    return paths\n"
        "variant_figure.save_figure = _unsalted\n"
    ),
}


def _draw(sabotage: str, out: Path, figures: list[str], hash_seed: int) -> dict[str, list[str]]:
    """Run the probe in a fresh interpreter; its backend before and after, and the forbidden modules it holds."""
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, sabotage, str(out), *figures], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _problems(sabotage: str, tmp_path: Path, figures: list[str], compare_bytes: bool) -> list[str]:
    """What goes wrong when a fresh process draws `figures`: a switched backend, forbidden imports, and
    (`compare_bytes`: a second process draws them again) figures whose bytes differ between the two."""
    first, second = tmp_path / "first", tmp_path / "second"
    found = _draw(sabotage, first, figures, hash_seed=1)
    before, after = found["backend"]
    problems = [f"backend switched from {before} to {after}"] if before != after else []
    problems += [f"imported {module}" for module in found["modules"]]
    if compare_bytes:
        _draw(sabotage, second, figures, hash_seed=2)
        problems += [
            f"{path.name} differs between processes"
            for path in sorted(first.iterdir())
            if path.read_bytes() != (second / path.name).read_bytes()
        ]
    return problems


def test_study_figures_use_figure_alone_and_are_byte_stable(tmp_path):
    assert _problems("", tmp_path, ["variants", "heatmap"], compare_bytes=True) == []
    assert sorted(p.name for p in (tmp_path / "first").iterdir()) == [
        "heatmap.png",
        "heatmap.svg",
        "variants.png",
        "variants.svg",
    ]


@pytest.mark.parametrize(
    ("control", "expected"),
    [
        ("switches the backend", "backend switched from svg to Agg"),
        ("draws through pyplot", "imported matplotlib.pyplot"),
        ("imports networkx", "imported networkx"),
        ("saves with random svg ids", "variants.svg differs between processes"),
    ],
)
def test_the_checks_catch_a_control(control, expected, tmp_path):
    compare_bytes = control == "saves with random svg ids"
    assert expected in _problems(SABOTAGE[control], tmp_path, ["variants"], compare_bytes)
