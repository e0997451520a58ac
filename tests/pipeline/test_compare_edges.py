"""compare at its edges: a measured value judged by how far it moved (not by its size), leaves equal across int and
float or both NaN, nesting at exactly its limits, the reading budget at its limits, what a folder leaves out, what a
table shows past its limit, and no file left open."""

from __future__ import annotations

import json
import math
import os
from typing import Annotated, TypedDict

import pytest

from where223.pipeline import compare, roles
from where223.pipeline.compare import CompareError

Tolerated = TypedDict("Tolerated", {"tol": object, "x": Annotated[float, roles.Measured(tolerance_key="tol")]})  # noqa: UP013
Relative = TypedDict("Relative", {"x": Annotated[float, roles.Measured(relative=0.1)]})  # noqa: UP013


def test_a_measured_value_is_judged_by_how_far_it_moved():
    """1.0 to 1.4 under a tolerance of 0.5 moved 0.4: within; to 1.6: beyond. (Their sum, 2.4, is no measure.)"""
    record = {"tol": 0.5, "x": 1.0}
    assert compare.judge("r.json", ["x"], 1.0, 1.4, Tolerated, record).kind == "within tolerance"
    assert compare.judge("r.json", ["x"], 1.0, 1.6, Tolerated, record).kind == "differs"
    assert compare.judge("r.json", ["x"], 10.0, 10.9, Relative, {"x": 10.0}).kind == "within tolerance"
    assert compare.judge("r.json", ["x"], 10.0, 11.2, Relative, {"x": 10.0}).kind == "differs"


def test_a_tolerance_that_is_not_a_number_gives_none():
    judged = compare.judge("r.json", ["x"], 1.0, 1.4, Tolerated, {"tol": "0.5", "x": 1.0})
    assert (judged.kind, judged.note) == ("differs", "measured, but no numeric tolerance found")


def test_leaves_equal_as_numbers_or_both_nan_do_not_differ():
    assert list(compare._leaves({"a": 1, "b": math.nan}, {"a": 1.0, "b": math.nan}, [])) == []
    assert list(compare._leaves({"a": 1}, {"a": 2.0}, [])) == [(["a"], 1, 2.0)]  # the control


def _nested(depth: int, leaf: object) -> object:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


def test_records_are_compared_to_exactly_their_depth_limit():
    limit = compare.DEPTH_LIMIT
    assert len(list(compare._leaves(_nested(limit, 1), _nested(limit, 2), []))) == 1
    with pytest.raises(compare._Refused):
        list(compare._leaves(_nested(limit + 1, 1), _nested(limit + 1, 2), []))


def test_a_run_s_staging_and_kept_failures_and_hidden_files_are_left_out():
    assert compare._excluded(f"{compare.STAGING}/a.json") and compare._excluded(f"{compare.FAILED}/a.json")
    assert compare._excluded("a/.hidden.json") and not compare._excluded("a/b.json")


def test_the_budget_allows_exactly_its_limits(monkeypatch):
    monkeypatch.setattr(compare, "FILES_LIMIT", 2)
    monkeypatch.setattr(compare, "FILE_BYTES_LIMIT", 10)
    monkeypatch.setattr(compare, "TREE_BYTES_LIMIT", 15)
    budget = compare._Budget("t")
    budget.entry()
    budget.entry()
    with pytest.raises(CompareError, match="FILES_LIMIT"):
        budget.entry()
    budget = compare._Budget("t")
    budget.read("a", 10)  # a file of the limit itself
    with pytest.raises(CompareError, match="FILE_BYTES_LIMIT"):
        budget.check("b", 11)
    budget.read("c", 5)  # the tree at its limit
    with pytest.raises(CompareError, match="TREE_BYTES_LIMIT"):
        budget.check("d", 1)


def test_values_are_shown_as_sorted_json_cut_at_80_characters():
    assert compare._text({"b": 1, "a": 2}) == '{"a": 2, "b": 1}'
    assert compare._text("x" * 100) == '"' + "x" * 79
    assert compare._relative(0.0, 0.0) == 0.0 and compare._relative(2.0, 1.0) == 0.5


def test_a_table_shows_its_limit_of_rows_and_says_how_many_more():
    comparison = compare.Comparison("ref", "rerun", 1, [
        compare.Difference("r.json", f"k{n}", "differs", "1", "2") for n in range(45)])
    text = compare.table(comparison)
    assert text.count("| differs | r.json |") == 40 and "| differs | … 5 more |" in text


def _tree(root, depth: int) -> None:
    folder = root
    for k in range(depth):
        folder = folder / f"d{k}"
    folder.mkdir(parents=True)
    (folder / "r.json").write_text(json.dumps({"x": 1}))


def test_folders_are_read_to_exactly_their_depth_limit_and_closed(tmp_path):
    limit = compare.FOLDER_DEPTH_LIMIT
    _tree(tmp_path / "deep", limit)
    before = len(os.listdir("/proc/self/fd"))
    files = compare.folder_files(tmp_path / "deep")
    assert len(files) == 1 and len(os.listdir("/proc/self/fd")) == before
    _tree(tmp_path / "deeper", limit + 1)
    with pytest.raises(CompareError, match="FOLDER_DEPTH_LIMIT"):
        compare.folder_files(tmp_path / "deeper")
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_folder_s_staging_and_kept_failures_are_not_compared(tmp_path):
    for name in (compare.STAGING, compare.FAILED, "kept"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "r.json").write_text("{}")
    assert list(compare.folder_files(tmp_path)) == ["kept/r.json"]


def test_a_record_that_is_not_json_does_not_stop_the_records_after_it():
    reference = {"a.json": b"{", "b.json": b'{"x": 1}'}
    rerun = {"a.json": b"{}", "b.json": b'{"x": 2}'}
    found = compare.compare_files(reference, rerun, "ref", "rerun").differences
    assert [(d.record, d.path) for d in found] == [("a.json", ""), ("b.json", "x")]


def test_a_revision_s_left_out_files_do_not_stop_the_files_after_them(tmp_path):
    """A revision whose outputs hold a hidden file and a link, sorted before a record: the record is read."""
    import subprocess

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / ".a.json").write_text("{}")
    os.symlink("z.json", tmp_path / "outputs" / "b.json")
    (tmp_path / "outputs" / "z.json").write_text('{"x": 1}')
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "r")
    assert list(compare.revision_files("HEAD", tmp_path)) == ["z.json"]


def test_a_value_that_moved_exactly_its_tolerance_is_within_it():
    assert compare.judge("r.json", ["x"], 1.0, 1.5, Tolerated, {"tol": 0.5, "x": 1.0}).kind == "within tolerance"


def test_the_limits_are_the_ones_readme_states():
    """README tells a reviewer where compare refuses a tree (one line, exit 2); the limits enforced are those."""
    from where223.pipeline.paths import ROOT

    text = " ".join((ROOT / "README.md").read_text().split())
    stated = ("JSON nested deeper than 64 levels where two records differ, an integer of more than 300 digits, and "
              "a tree of more than 100,000 entries, 32 folders deep, a file over 32 MiB or 1 GiB in all")
    assert stated in text
    assert (compare.DEPTH_LIMIT, compare.INTEGER_DIGITS_LIMIT, compare.FILES_LIMIT, compare.FOLDER_DEPTH_LIMIT,
            compare.FILE_BYTES_LIMIT, compare.TREE_BYTES_LIMIT) == (64, 300, 100_000, 32, 32 * 2**20, 2**30)


def test_nan_against_nan_is_no_difference_and_nan_against_a_number_is():
    """Leaves compared one by one (two NaNs made apart are not one object, so no container equality decides)."""
    assert list(compare._leaves(float("nan"), float("nan"), ["x"])) == []
    (found,) = compare._leaves(float("nan"), 1.0, ["x"])
    assert found[0] == ["x"] and math.isnan(found[1]) and found[2] == 1.0
    assert list(compare._leaves(1, 1.0, ["x"])) == []  # equal as numbers, of two types


def test_a_file_replaced_by_a_link_or_removed_is_left_out_and_one_that_cannot_be_opened_is_refused(tmp_path):
    (tmp_path / "real.json").write_text("{}")
    os.symlink("real.json", tmp_path / "link.json")
    folder = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        budget = compare._Budget("t")
        assert compare._read(folder, b"real.json", "real.json", budget) == b"{}"
        assert compare._read(folder, b"link.json", "link.json", budget) is None  # ELOOP: not followed
        assert compare._read(folder, b"gone.json", "gone.json", budget) is None  # ENOENT: removed since listed
        with pytest.raises(CompareError, match="long.json: cannot read"):
            compare._read(folder, b"x" * 300, "long.json", budget)  # ENAMETOOLONG: neither
    finally:
        os.close(folder)


def test_a_tolerance_key_is_read_in_the_nearest_enclosing_mapping_that_holds_it():
    role = roles.Measured(tolerance_key="tol")
    outer = {"tol": 0.5, "inner": {"x": 1.0}}
    assert compare._tolerance(role, outer, ["inner", "x"], 2, 1.0, 1.2) == 0.5  # only the outer holds it
    both = {"tol": 0.5, "inner": {"tol": 0.25, "x": 1.0}}
    assert compare._tolerance(role, both, ["inner", "x"], 2, 1.0, 1.2) == 0.25  # the nearer one
    # a record whose shape is not the keys' (a list where a name is looked up): no tolerance below it, no error
    shaped = {"tol": 0.5, "inner": [{"tol": 9.0}]}
    assert compare._tolerance(role, shaped, ["inner", "k", "x"], 3, 1.0, 1.2) == 0.5


def _swapped_after_listing(monkeypatch, tmp_path, name: str, is_folder: bool):
    """The tree lists `name` as a folder or a regular file, but by the time it is opened it is a link to something
    outside the tree (a race compare's open flags refuse)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text('{"secret": 1}')
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "kept.json").write_text("{}")
    os.symlink(outside if is_folder else outside / "secret.json", tree / name)
    listed = compare._entries

    def entries(folder, budget):
        found = listed(folder, budget)
        return [(n, is_folder, not is_folder) if n == name.encode() else (n, d, f) for n, d, f in found]

    monkeypatch.setattr(compare, "_entries", entries)
    return tree


@pytest.mark.parametrize("is_folder", [True, False])
def test_a_link_swapped_in_after_the_listing_is_not_followed(monkeypatch, tmp_path, is_folder):
    tree = _swapped_after_listing(monkeypatch, tmp_path, "swapped" if is_folder else "swapped.json", is_folder)
    assert list(compare.folder_files(tree)) == ["kept.json"]


def test_a_file_named_as_the_folder_to_compare_cannot_be_read(tmp_path):
    (tmp_path / "file.json").write_text("{}")
    with pytest.raises(CompareError, match="cannot read"):
        compare.folder_files(tmp_path / "file.json")


def test_a_mapping_against_a_list_is_one_difference_where_they_part():
    assert list(compare._leaves({"a": {"b": 1}}, {"a": [1]}, [])) == [(["a"], {"b": 1}, [1])]


def test_a_tolerance_key_holding_a_mapping_is_read_by_the_keys_below_the_declared_place():
    role = roles.Measured(tolerance_key="tol")
    record = {"tol": {"a": 0.1, "b": 0.2}, "x": {"a": 1.0, "b": 2.0}}
    assert compare._tolerance(role, record, ["x", "b"], 1, 2.0, 2.1) == 0.2


def test_an_integer_of_exactly_its_digit_limit_is_read_and_one_more_refused():
    assert compare._integer("9" * compare.INTEGER_DIGITS_LIMIT) == int("9" * compare.INTEGER_DIGITS_LIMIT)
    with pytest.raises(compare._Refused):
        compare._integer("9" * (compare.INTEGER_DIGITS_LIMIT + 1))


def test_a_file_only_one_tree_has_is_a_differing_artifact():
    found = compare.compare_files({"a.json": b"{}", "fig.png": b"x"}, {"a.json": b"{}"}, "ref", "rerun")
    assert (found.artifacts_compared, found.artifacts_differing) == (1, 1)


def test_a_revision_git_cannot_read_is_refused_without_an_empty_reason(tmp_path):
    from tests.pipeline.test_compare_hostile import repository

    root = repository(tmp_path / "root", {"outputs/a.json": {"n": 1}})
    with pytest.raises(CompareError) as caught:
        compare.revision_files("no-such-revision", root)
    assert str(caught.value) == f"no-such-revision: not a folder, nor a git revision of {root}"


def test_the_files_git_would_commit_are_this_work_tree_s_even_where_its_config_names_another(tmp_path, monkeypatch):
    import subprocess

    from tests.pipeline.test_compare_hostile import records, repository

    root = repository(tmp_path / "root", {"outputs/a.json": {"n": 1}})
    records(root, {"outputs/b.json": {"n": 2}})  # untracked, not ignored: git would commit it
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "outputs").mkdir(parents=True)
    subprocess.run(["git", "-C", str(root), "config", "core.worktree", str(elsewhere)], check=True)
    monkeypatch.setattr(compare, "ROOT", root)
    assert sorted(compare.folder_files(root / "outputs")) == ["a.json", "b.json"]


Timed = TypedDict("Timed", {"seconds": Annotated[float, roles.TIMING]})  # noqa: UP013
AlsoTimed = TypedDict("AlsoTimed", {"seconds": Annotated[float, roles.TIMING]})  # noqa: UP013


def test_a_record_two_types_claim_is_compared_without_a_type_every_leaf_deciding(monkeypatch):
    from where223.pipeline import schema

    reference, rerun = {"r.json": b'{"seconds": 1.0}'}, {"r.json": b'{"seconds": 2.0}'}
    monkeypatch.setattr(schema, "record_types", lambda: {"r.json": Timed})  # the control: one type, a timing
    assert compare.compare_files(reference, rerun, "a", "b").reproduced
    monkeypatch.setattr(schema, "record_types", lambda: {"r.json": Timed, "*.json": AlsoTimed})
    comparison = compare.compare_files(reference, rerun, "a", "b")
    assert not comparison.reproduced and [d.path for d in comparison.of("differs")] == ["seconds"]


def test_a_file_of_exactly_the_byte_limit_is_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "FILE_BYTES_LIMIT", 10)
    (tmp_path / "a.json").write_bytes(b"[1,2,3,45]")  # 10 bytes
    assert compare.folder_files(tmp_path, root=tmp_path) == {"a.json": b"[1,2,3,45]"}
    (tmp_path / "a.json").write_bytes(b"[1,2,3,456]")  # the control: 11 bytes, refused
    with pytest.raises(CompareError, match="FILE_BYTES_LIMIT"):
        compare.folder_files(tmp_path, root=tmp_path)


def test_a_folder_whose_listing_fails_meanwhile_is_left_out(tmp_path, monkeypatch):
    (tmp_path / "a.json").write_text("1")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.json").write_text("2")
    assert set(compare.folder_files(tmp_path, root=tmp_path)) == {"a.json", "sub/b.json"}  # the control
    listed = os.scandir
    calls = []

    def failing_after_the_first(folder):
        calls.append(folder)
        if len(calls) > 1:
            raise PermissionError(13, "Permission denied")
        return listed(folder)

    monkeypatch.setattr(os, "scandir", failing_after_the_first)
    assert compare.folder_files(tmp_path, root=tmp_path) == {"a.json": b"1"}


def test_a_subfolder_that_cannot_be_opened_meanwhile_is_left_out_and_the_rest_read(tmp_path, monkeypatch):
    (tmp_path / "a_sub").mkdir()
    (tmp_path / "a_sub" / "x.json").write_text("1")
    (tmp_path / "b.json").write_text("2")  # listed after the folder
    assert set(compare.folder_files(tmp_path, root=tmp_path)) == {"a_sub/x.json", "b.json"}  # the control
    opened = os.open

    def refusing_the_folder(name, flags, *args, **kwargs):
        if name == b"a_sub":
            raise FileNotFoundError(2, "No such file or directory")
        return opened(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_the_folder)
    assert compare.folder_files(tmp_path, root=tmp_path) == {"b.json": b"2"}


Inside = TypedDict("Inside", {"m": Annotated[dict, roles.Measured(tolerance_key="tol")]})  # noqa: UP013


def test_a_tolerance_key_is_read_where_it_encloses_the_declared_place_not_inside_it():
    """The tolerance of `m`'s leaves is read in the mappings enclosing `m`: one inside `m` itself is one of its
    leaves, no tolerance (the control: the same number one level up is)."""
    inside = {"m": {"x": 1.0, "tol": 100}}
    judged = compare.judge("r.json", ["m", "x"], 1.0, 2.0, Inside, inside)
    assert (judged.kind, judged.note) == ("differs", "measured, but no numeric tolerance found")
    assert compare.judge("r.json", ["m", "x"], 1.0, 2.0, Inside, {"tol": 100, "m": {"x": 1.0}}).kind == (
        "within tolerance")


def test_a_missing_record_does_not_stop_the_comparison_of_the_next():
    reference = {"a.json": b'{"x": 1}', "b.json": b'{"x": 1}'}
    found = compare.compare_files(reference, {"b.json": b'{"x": 2}'}, "a", "b")
    assert [(d.record, d.note) for d in found.of("differs")] == [("a.json", "missing from the rerun"),
                                                                  ("b.json", "")]
    alone = compare.compare_files({"b.json": b'{"x": 1}'}, {"b.json": b'{"x": 2}'}, "a", "b")  # the control
    assert [d.record for d in alone.of("differs")] == ["b.json"]


def _differences(count: int) -> compare.Comparison:
    found = compare.Comparison("a", "b", 1)
    found.differences = [compare.Difference("r.json", f"x{k}", "differs", "1", "2") for k in range(count)]
    return found


def test_a_table_of_exactly_its_limit_says_no_more():
    assert "more" not in compare.table(_differences(2), limit=2)
    assert "… 1 more" in compare.table(_differences(3), limit=2)  # the control: one past it


Deep = TypedDict("Deep", {"m": Annotated[dict, roles.Measured(tolerance_key="tol")]})  # noqa: UP013
Middle = TypedDict("Middle", {"b": Deep})  # noqa: UP013
Outer = TypedDict("Outer", {"tol": object, "a": Middle})  # noqa: UP013


def test_a_mapping_without_the_tolerance_key_between_does_not_hide_the_one_above():
    record = {"tol": 100, "a": {"b": {"m": {"x": 1.0}}}}
    assert compare.judge("r.json", ["a", "b", "m", "x"], 1.0, 2.0, Outer, record).kind == "within tolerance"
    record["tol"] = 0.5  # the control: the same tolerance, too small
    assert compare.judge("r.json", ["a", "b", "m", "x"], 1.0, 2.0, Outer, record).kind == "differs"


def test_a_file_that_grew_past_the_limit_after_its_size_was_read_is_refused(tmp_path, monkeypatch):
    import stat as stat_module

    monkeypatch.setattr(compare, "FILE_BYTES_LIMIT", 10)
    (tmp_path / "a.json").write_bytes(b"[1,2,3,4,56]")  # 12 bytes, its size said to be 5
    real = os.fstat

    def said_smaller(descriptor):
        found = real(descriptor)
        if not stat_module.S_ISREG(found.st_mode):
            return found
        return os.stat_result((found.st_mode, found.st_ino, found.st_dev, found.st_nlink, found.st_uid, found.st_gid,
                               5, found.st_atime, found.st_mtime, found.st_ctime))  # fmt: skip

    monkeypatch.setattr(os, "fstat", said_smaller)
    with pytest.raises(CompareError, match="FILE_BYTES_LIMIT"):
        compare.folder_files(tmp_path, root=tmp_path)
    (tmp_path / "a.json").write_bytes(b"[1,2,3,45]")  # the control: 10 bytes, read whole
    assert compare.folder_files(tmp_path, root=tmp_path) == {"a.json": b"[1,2,3,45]"}


def test_only_the_top_levels_failed_folder_is_left_out(tmp_path):
    """(The staging folder's name is hidden, left out at any depth.)"""
    from where223.pipeline.paths import FAILED

    (tmp_path / FAILED).mkdir()
    (tmp_path / FAILED / "x.json").write_text("1")  # the control: at the top, left out
    (tmp_path / "sub" / FAILED).mkdir(parents=True)
    (tmp_path / "sub" / FAILED / "x.json").write_text("2")
    assert set(compare.folder_files(tmp_path, root=tmp_path)) == {f"sub/{FAILED}/x.json"}


@pytest.mark.parametrize("revision", ["HEAD\0x", "HEAD\nx"])
def test_a_revision_with_a_nul_or_a_newline_is_refused_before_git(revision):
    with pytest.raises(CompareError, match="it would read as an option"):
        compare.revision_files(revision)
    with pytest.raises(CompareError, match="nor a git revision"):  # the control: a plain name git cannot read
        compare.revision_files("HEADx")


Flag = TypedDict("Flag", {"x": Annotated[float, roles.Measured(absolute=5.0)]})  # noqa: UP013


def test_a_measured_leaf_that_is_not_a_number_on_both_sides_differs():
    assert compare.judge("r.json", ["x"], 1.0, 2.0, Flag, {"x": 1.0}).kind == "within tolerance"  # the control
    for reference, rerun in ((True, False), ("1.0", 2.0), (1.0, "2.0")):
        judged = compare.judge("r.json", ["x"], reference, rerun, Flag, {"x": reference})
        assert (judged.kind, judged.note) == ("differs", "measured, but not a number on both sides")


def test_a_nan_tolerance_is_no_tolerance():
    judged = compare.judge("r.json", ["x"], 1.0, 1.4, Tolerated, {"tol": math.nan, "x": 1.0})
    assert (judged.kind, judged.note) == ("differs", "measured, but no numeric tolerance found")


def test_a_number_become_nan_differs():
    assert [(keys, a) for keys, a, _ in compare._leaves({"a": 1.0}, {"a": math.nan}, [])] == [(["a"], 1.0)]
    assert list(compare._leaves({"a": math.nan}, {"a": math.nan}, [])) == []  # the control


def test_a_leaf_become_a_mapping_or_a_text_of_its_length_is_one_difference():
    assert [keys for keys, *_ in compare._leaves({"a": 1}, {"a": {"b": 1}}, [])] == [["a"]]
    assert [keys for keys, *_ in compare._leaves({"a": [1, 2]}, {"a": "xy"}, [])] == [["a"]]
    assert [keys for keys, *_ in compare._leaves({"a": [1, 2]}, {"a": [1, 3]}, [])] == [["a", 1]]  # the control


Quoted = TypedDict("Quoted", {"t": Annotated[str, roles.Quoting(roles.TIMING_KIND, "a number it quotes")]})  # noqa: UP013


def test_a_quoting_leaf_become_another_type_differs():
    assert compare.judge("r.json", ["t"], "took 1.5 s", "took 2.5 s", Quoted, {}).kind == roles.TIMING_KIND  # control
    for reference, rerun in (("took 1.5 s", 5), (5, "took 1.5 s")):
        assert compare.judge("r.json", ["t"], reference, rerun, Quoted, {}).kind == "differs"


Item = TypedDict("Item", {"m": Annotated[dict, roles.Measured(tolerance_key="tol")]})  # noqa: UP013
Listed = TypedDict("Listed", {"tol": object, "a": list[Item]})  # noqa: UP013


def test_a_list_holding_the_tolerance_keys_name_is_no_enclosing_mapping():
    record = {"tol": 100, "a": ["tol", {"m": {"x": 1.0}}]}
    assert compare.judge("r.json", ["a", 1, "m", "x"], 1.0, 2.0, Listed, record).kind == "within tolerance"
    record["tol"] = 0.5  # the control: too small a tolerance
    assert compare.judge("r.json", ["a", 1, "m", "x"], 1.0, 2.0, Listed, record).kind == "differs"


@pytest.mark.parametrize(("reference", "rerun"), [(True, 1), (False, 0), (False, 0.0), (1, True), (1.0, True)])
def test_a_boolean_is_not_the_number_python_takes_it_for(reference, rerun):
    """JSON's true is not 1 (nor false 0): as a leaf, and inside a list or mapping Python would find equal whole."""
    assert list(compare._leaves(reference, rerun, ["x"])) == [(["x"], reference, rerun)]
    assert list(compare._leaves({"a": [reference]}, {"a": [rerun]}, [])) == [(["a", 0], reference, rerun)]
    assert list(compare._leaves([reference, 2], [rerun, 2], [])) == [([0], reference, rerun)]
    # the controls: booleans against booleans, numbers against numbers, and 1 against 1.0 do not differ
    assert list(compare._leaves({"a": [reference]}, {"a": [reference]}, [])) == []
    assert list(compare._leaves({"a": [True, 1]}, {"a": [True, 1.0]}, [])) == []
    assert list(compare._leaves(True, False, ["x"])) == [(["x"], True, False)]


def test_a_record_whose_boolean_became_a_number_is_not_reproduced():
    reference = {"r.json": json.dumps({"ok": True, "n": [1, 2]}).encode()}
    comparison = compare.compare_files(reference, {"r.json": json.dumps({"ok": 1, "n": [1, 2]}).encode()}, "a", "b")
    assert not comparison.reproduced
    assert [(d.path, d.kind) for d in comparison.differences] == [("ok", "differs")]
    control = {"r.json": json.dumps({"ok": True, "n": [1.0, 2]}).encode()}  # 1 against 1.0 is no difference
    assert compare.compare_files(reference, control, "a", "b").reproduced
