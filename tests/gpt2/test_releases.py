"""Each historic variant writes the attention block exactly as its transformers release does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from where223.gpt2 import releases
from where223.pipeline.paths import ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def release_exports() -> dict[str, Path]:
    """The tiny model exported by each real release, in a subprocess (cached under .cache/transformers)."""
    return {version: releases.export_with_release(version) for version in releases.RELEASES.values()}


@pytest.fixture(scope="module")
def variant_exports(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("historic")
    return {name: releases.export_with_variant(name, out / f"{name}.onnx") for name in releases.RELEASES}


def test_release_side_folders_hold_the_real_releases(release_exports):
    for version, path in release_exports.items():
        stamp = json.loads(path.with_suffix(".json").read_text())
        assert stamp["transformers"] == version
        imported = ROOT / stamp["transformers_file"]  # records keep repo-relative paths
        assert imported.is_relative_to(releases.release_dir(version)) and imported.is_file()
        assert releases.installed_release(version) == releases.release_dir(version)  # as make setup left it


@pytest.mark.parametrize("name", sorted(releases.RELEASES))
@pytest.mark.parametrize("whole_block", [False, True])
def test_historic_variant_matches_its_release(name, whole_block, release_exports, variant_exports):
    ours = releases.attention_block_signature(variant_exports[name], whole_block=whole_block)
    theirs = releases.attention_block_signature(release_exports[releases.RELEASES[name]], whole_block=whole_block)
    assert ours == theirs


def test_the_signature_tells_the_releases_apart(release_exports):
    signatures = {v: releases.attention_block_signature(path) for v, path in release_exports.items()}
    assert len({tuple(s) for s in signatures.values()}) == 3
    assert signatures["4.25.1"][0] == ("MatMul", ("tensor(bfloat16)",))
    assert signatures["4.25.1"][-1] == ("Softmax", ("tensor(float)",))
    where = [types for op, types in signatures["4.26.0"] if op == "Where"]
    assert where == [("tensor(bfloat16)",)]  # the fix: the Where computes in the autocast dtype
    assert releases.cast_count(release_exports["4.26.0"]) == releases.cast_count(release_exports["4.25.1"]) + 2


def test_signature_of_a_graph_without_gpt2_attention_fails_clearly(tmp_path):
    import onnx

    graph = onnx.helper.make_graph([], "empty", [], [])
    path = tmp_path / "empty.onnx"
    onnx.save(onnx.helper.make_model(graph), path)
    with pytest.raises(ValueError, match=r"no node named /transformer/h\.0/attn/"):
        releases.attention_block_signature(path)
