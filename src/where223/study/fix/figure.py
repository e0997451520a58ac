"""Notebook 03's figures of a verification run, drawn from its files alone (no torch): the rejected Where before
and after the fix, the graph repair beside the fix, and the fp32 losses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from where223 import figures
from where223.gpt2.runs import EXPORTED_MODEL
from where223.graph import draw
from where223.pipeline.records import read_json
from where223.study.fix.record import FIXED_MODEL, REPAIRED_MODEL


def draw_fix(
    settings: Any,
    verification: dict[str, Any],
    source_dir: Path,
    fix_dir: Path,
    hops: int = 2,
) -> list[Path]:
    """Notebook 03's figures of a `verify_fix` run: the rejected Where before and after the fix, the graph
    repair beside the fix, and the fp32 losses; their PNGs, in that order (each has an SVG beside it)."""
    rejected = read_json(source_dir / "reproduce.json")["error"]["type_binding"]["node"]
    fixed_where = rejected.replace("/_original_module", "")  # the fixed export is a plain torch.onnx.export
    fixed, variant = fix_dir / FIXED_MODEL, verification["variant"]
    draw.draw_before_after(source_dir / EXPORTED_MODEL, fixed, rejected, fixed_where,
                           fix_dir / "before_after", titles=("4.25.1 as released", f"patched: {variant}"), hops=hops)
    draw.draw_before_after(fix_dir / REPAIRED_MODEL, fixed, rejected, fixed_where, fix_dir / "repaired_vs_patched",
                           titles=("graph repair (Cast inserted)", f"source fix: {variant}"), hops=hops)
    losses = verification["losses"]
    figures.loss_curves({"PyTorch eager": losses["eager"], "ORTModule (patched)": losses["ortmodule"]},
                        fix_dir / "losses", title=f"fp32 training, {settings.preset}, dropout off")
    return [fix_dir / f"{stem}.png" for stem in ("before_after", "repaired_vs_patched", "losses")]
