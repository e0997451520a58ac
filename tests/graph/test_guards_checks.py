"""The guards one by one, at their edges: the inlining limit at exactly its number of nodes, recursion found through
any callee and never in a call graph that only joins up again, external data's byte range at both ends, the opset
range, the newest opsets per domain, and messages that show a long name cut at their stated lengths."""

from __future__ import annotations

import os

import onnx
import pytest
from onnx import TensorProto, helper

from where223.graph import guards
from where223.graph.guards import StructureError
from where223.graph.nodes import read_graphs

F32 = TensorProto.FLOAT


def _v(name: str) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, F32, [2])


def _function(name: str, calls: tuple[str, ...] = (), own: int = 1) -> onnx.FunctionProto:
    """Function `local.name`: `own` Identity nodes in a row, then a call of each of `calls`, x to y."""
    nodes, last = [], "x"
    for k in range(own):
        nodes.append(helper.make_node("Identity", [last], [f"i{k}"]))
        last = f"i{k}"
    for k, callee in enumerate(calls):
        nodes.append(helper.make_node(callee, [last], [f"c{k}"], domain="local"))
        last = f"c{k}"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    return helper.make_function("local", name, ["x"], ["y"], nodes, [helper.make_opsetid("", 17)])


def _calling(functions: list[onnx.FunctionProto], called: list[str], extra: int = 0) -> onnx.ModelProto:
    nodes, last = [], "a"
    for k, name in enumerate(called):
        nodes.append(helper.make_node(name, [last], [f"m{k}"], domain="local"))
        last = f"m{k}"
    for k in range(extra):
        nodes.append(helper.make_node("Relu", [last], [f"r{k}"]))
        last = f"r{k}"
    graph = helper.make_graph(nodes, "g", [_v("a")], [_v(last)])
    return helper.make_model(graph, functions=functions,
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


def test_the_inlining_limit_holds_at_exactly_its_number_of_nodes():
    """A function of 1,000 nodes (999 Identity, its last Identity) called 1,000 times: 1,000,000 nodes inlined,
    the limit itself, passes; one node more in the main graph is refused."""
    body = _function("big", own=guards.MAX_INLINED_NODES // 1000 - 1)
    assert len(body.node) == 1000
    guards.check_functions(_calling([body], ["big"] * 1000))
    with pytest.raises(StructureError, match="1,000,001 nodes"):
        guards.check_functions(_calling([body], ["big"] * 1000, extra=1))


def test_a_call_graph_that_joins_up_again_is_no_recursion():
    """a calls b and c, both call d; e, listed after a function the search has already visited, is searched too."""
    functions = [_function("a", ("b", "c")), _function("b", ("d",)), _function("c", ("d",)), _function("d"),
                 _function("e", ("d",))]
    guards.check_functions(_calling(functions, ["a", "e"]))


def test_recursion_below_the_first_function_is_found():
    """a calls b, which calls itself: found though the search started at a."""
    with pytest.raises(StructureError, match=r"local\.b -> local\.b"):
        guards.check_functions(_calling([_function("a", ("b",)), _function("b", ("b",))], ["a"]))


def _external(tmp_path, size: int = 8, **entries: str) -> onnx.ModelProto:
    (tmp_path / "w.bin").write_bytes(bytes(size))
    tensor = helper.make_tensor("k", F32, [2], [0.0, 0.0])
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in {"location": "w.bin", **entries}.items():
        tensor.external_data.add(key=key, value=value)
    graph = helper.make_graph([helper.make_node("Identity", ["k"], ["y"])], "g", [], [_v("y")], [tensor])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("entries, offset, length", [
    ({"offset": "0", "length": "8"}, 0, 8),  # the whole file
    ({"length": "8"}, 0, 8),  # no offset: from the start
    ({"offset": "8", "length": "0"}, 8, 0),  # nothing, at the end
    ({"offset": "8"}, 8, None),  # the rest, which is nothing
])
def test_external_data_within_its_file_is_read(tmp_path, entries, offset, length):
    (found,) = guards.check_external_data(_external(tmp_path, **entries), tmp_path)
    assert (found.offset, found.length, found.file) == (offset, length, (tmp_path / "w.bin").resolve())


@pytest.mark.parametrize("entries, reason", [
    ({"offset": "9", "length": "0"}, "at offset 9"),  # past the end
    ({"offset": "9"}, "the rest of its bytes at offset 9"),  # past the end, to the end
    ({"offset": "-1", "length": "0"}, "at offset -1"),  # before the start
    ({"offset": "4", "length": "8"}, "claims 8 bytes at offset 4"),  # runs past the end
    ({"offset": "0", "length": "-1"}, "claims -1 bytes"),
    ({"offset": "four"}, "not a number"),
    ({"location": ""}, "is not a relative path"),
    ({"location": "/etc/passwd"}, "is not a relative path"),
    ({"location": "a\0b"}, "cannot be resolved"),
])
def test_external_data_outside_its_file_is_refused(tmp_path, entries, reason):
    with pytest.raises(StructureError, match=reason):
        guards.check_external_data(_external(tmp_path, **entries), tmp_path)


def test_a_location_in_a_symlink_loop_is_refused(tmp_path):
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    with pytest.raises(StructureError, match="cannot be resolved"):
        guards.check_external_data(_external(tmp_path, location="loop/w.bin"), tmp_path)


def test_opset_versions_from_zero_to_int32_max_pass_and_none_beyond():
    model = _calling([], [], extra=1)
    model.opset_import[0].version = 0
    guards.check_opsets(model)
    for version in (-1, 2**31):
        model.opset_import[0].version = version
        with pytest.raises(StructureError, match=f"opset {version} of ai.onnx"):
            guards.check_opsets(model)


def test_the_newest_opsets_are_per_domain_and_a_newest_declared_one_is_no_note():
    newest = guards.newest_opsets()
    schemas = onnx.defs.get_all_schemas_with_history()
    assert newest["ai.onnx.ml"] == max(s.since_version for s in schemas if s.domain == "ai.onnx.ml")
    assert newest[""] == onnx.defs.onnx_opset_version()
    assert guards.usable_opsets({"": newest[""]}) == ({"": newest[""]}, [])
    usable, notes = guards.usable_opsets({"": newest[""] + 1})
    assert usable == {"": newest[""]} and len(notes) == 1


def test_messages_cut_a_long_name_at_their_stated_lengths():
    """An undefined value's name is shown to 200 characters and its op to 100, each cut saying how much is left."""
    name, op = "v" * 300, "O" * 300
    graph = helper.make_graph([helper.make_node(op, [name], ["y"], domain="custom")], "g", [], [_v("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)])
    with pytest.raises(StructureError) as caught:
        guards.check_defined(read_graphs(model.graph))
    message = str(caught.value)
    assert f"value {'v' * 200}…[100 more characters] is read by a {'O' * 100}…[200 more characters] node" in message


def test_a_scan_without_its_scan_input_count_is_refused_and_another_domain_s_scan_is_not():
    def scan(domain: str) -> onnx.ModelProto:
        body = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "body", [_v("s")], [_v("t")])
        node = helper.make_node("Scan", ["a"], ["b"], name="scan0", domain=domain, body=body)
        graph = helper.make_graph([node], "g", [_v("a")], [_v("b")])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)])

    with pytest.raises(StructureError, match="'scan0' \\(Scan\\) in the main graph lacks its required attribute "
                                             "'num_scan_inputs'"):
        guards.check_required_attributes(scan(""), read_graphs(scan("").graph))
    guards.check_required_attributes(scan("custom"), read_graphs(scan("custom").graph))


def test_a_note_names_the_domain_whose_opset_is_newer_than_onnx_knows():
    newest = guards.newest_opsets()["ai.onnx.ml"]
    _, notes = guards.usable_opsets({"ai.onnx.ml": newest + 1})
    assert notes[0].startswith(f"opset {newest + 1} of ai.onnx.ml is newer")
