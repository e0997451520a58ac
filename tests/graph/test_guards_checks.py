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


@pytest.mark.parametrize("with_function", [False, True])  # a function's opsets are read one by one, not at once
def test_opset_versions_from_zero_to_int32_max_pass_and_none_beyond(with_function):
    function = helper.make_function("local", "f", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])],
                                    [helper.make_opsetid("", 17)])
    model = _calling([function] if with_function else [], [], extra=1)
    for version in (0, 2**31 - 1):
        model.opset_import[0].version = version
        guards.check_opsets(model)
        guards.check_opsets(model, list(model.opset_import))  # as check_structure hands them over
    for version in (-1, 2**31):
        model.opset_import[0].version = version
        with pytest.raises(StructureError, match=f"opset {version} of ai.onnx"):
            guards.check_opsets(model)
    if with_function:
        model.opset_import[0].version = 17
        model.functions[0].opset_import[0].version = -1
        with pytest.raises(StructureError, match="opset -1 of ai.onnx of function local.f"):
            guards.check_opsets(model)
        model.functions[0].opset_import[0].version = 17
    del model.opset_import[:]  # a model read in memory has not been through the loader's check for imports
    guards.check_opsets(model)


def test_the_newest_opsets_are_per_domain_and_a_newest_declared_one_is_no_note():
    newest = guards.newest_opsets()
    schemas = onnx.defs.get_all_schemas_with_history()
    assert newest["ai.onnx.ml"] == max(s.since_version for s in schemas if s.domain == "ai.onnx.ml")
    assert newest[""] == onnx.defs.onnx_opset_version()
    assert guards.usable_opsets({"": newest[""]}) == ({"": newest[""]}, [])
    usable, notes = guards.usable_opsets({"": newest[""] + 1})
    assert usable == {"": newest[""]} and len(notes) == 1
    assert guards.usable_opsets({"custom": 5, "": 17}) == ({"custom": 5, "": 17}, [])  # a domain onnx has no schemas of


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


# --- recursion found inside a function body's subgraphs -----------------------------------------------------------
def _branch(*nodes: onnx.NodeProto, name: str = "branch") -> onnx.GraphProto:
    return helper.make_graph(list(nodes), name, [], [_v(nodes[-1].output[0])])


def _call(name: str, source: str = "x", out: str = "called") -> onnx.NodeProto:
    return helper.make_node(name, [source], [out], domain="local")


def _body_function(name: str, nodes: list[onnx.NodeProto]) -> onnx.FunctionProto:
    return helper.make_function("local", name, ["x"], [nodes[-1].output[0]], nodes, [helper.make_opsetid("", 17)])


@pytest.mark.parametrize("where", ["then_branch", "graphs_attribute", "after_a_subgraph"])
def test_a_function_calling_itself_from_inside_a_subgraph_or_after_one_is_found(where):
    """The walk over a body goes into a node's GRAPH and GRAPHS attributes and on past them to the nodes after."""
    plain = _branch(helper.make_node("Identity", ["x"], ["p"]))
    calling = _branch(_call("f"))
    if where == "then_branch":
        nodes = [helper.make_node("If", ["c"], ["y"], then_branch=calling, else_branch=plain)]
    elif where == "graphs_attribute":
        holder = helper.make_node("Holder", ["x"], ["y"], domain="custom")
        holder.attribute.append(helper.make_attribute("bodies", [plain, calling]))
        assert holder.attribute[0].type == onnx.AttributeProto.GRAPHS
        nodes = [holder]
    else:
        nodes = [helper.make_node("If", ["c"], ["z"], then_branch=plain, else_branch=plain), _call("f", "z", "y")]
    with pytest.raises(StructureError, match=r"local\.f -> local\.f"):
        guards.check_functions(_calling([_body_function("f", nodes)], ["f"]))
    # the control: the same body calling another function is no recursion
    other = [helper.make_node("If", ["c"], ["y"], then_branch=_branch(_call("g")), else_branch=plain)]
    guards.check_functions(_calling([_body_function("f", other), _function("g")], ["f"]))


# --- cycles: found in every scope, described in dependency order, and never in a graph merely listed out of order ---
def _chain_model(nodes: list[onnx.NodeProto], functions=(), inputs=("a",)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [_v(name) for name in inputs], [_v(nodes[-1].output[0])])
    return helper.make_model(graph, functions=list(functions),
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


def _cycle() -> list[onnx.NodeProto]:
    """D reads the cycle A -> B -> C -> A and is listed first: on the walk back, not in the loop."""
    return [helper.make_node("Identity", ["a_out"], ["d_out"], name="D"),
            helper.make_node("Add", ["a", "c_out"], ["a_out"], name="A"),
            helper.make_node("Identity", ["a_out"], ["b_out"], name="B"),
            helper.make_node("Identity", ["b_out"], ["c_out"], name="C")]


def test_a_cycle_is_described_in_the_order_of_its_dependencies_without_the_nodes_that_only_read_it():
    with pytest.raises(StructureError) as caught:
        guards.check_acyclic(_chain_model(_cycle()))  # the graphs read here when not given
    assert str(caught.value) == ("the main graph has a cycle (A -> B -> C -> A): a graph's nodes must have a "
                                 "topological order")


def test_a_graph_listed_out_of_order_without_a_cycle_passes_and_its_graphs_are_returned():
    """A diamond (A feeds B and C, both feed D) listed backwards: each node waits for two or one, then none."""
    nodes = [helper.make_node("Add", ["b_out", "c_out"], ["d_out"], name="D"),
             helper.make_node("Identity", ["a_out"], ["c_out"], name="C"),
             helper.make_node("Identity", ["a_out"], ["b_out"], name="B"),
             helper.make_node("Identity", ["a"], ["a_out"], name="A")]
    model = _chain_model(nodes)
    graphs = guards.check_acyclic(model)
    assert [read.path for read in graphs] == [""] and graphs[0].graph is model.graph


def test_a_cycle_through_a_subgraph_s_outer_scope_read_is_found():
    """X (an If) reads y inside its branch, and y is computed from X's output: a cycle no input list shows."""
    reads_y = _branch(helper.make_node("Identity", ["y"], ["t"]))
    nodes = [helper.make_node("If", ["cond"], ["x_out"], name="X", then_branch=reads_y, else_branch=reads_y),
             helper.make_node("Identity", ["x_out"], ["y"], name="Y")]
    model = _chain_model(nodes, inputs=("cond",))
    with pytest.raises(StructureError, match=r"cycle \(X -> Y -> X\)"):
        guards.check_acyclic(model, read_graphs(model.graph))


def test_a_cycle_is_named_by_its_scope_subgraph_function_or_a_function_s_subgraph():
    cyclic = helper.make_graph(_cycle(), "inner", [_v("a")], [_v("d_out")])
    plain = _branch(helper.make_node("Identity", ["a"], ["p"]))
    holder = helper.make_node("If", ["a"], ["h"], name="H", then_branch=cyclic, else_branch=plain)
    with pytest.raises(StructureError, match="the subgraph H/then_branch has a cycle"):
        guards.check_acyclic(_chain_model([holder]))
    in_function = _body_function("f", [helper.make_node("Identity", ["x"], ["a"]), *_cycle()])
    with pytest.raises(StructureError, match=r"the function local\.f has a cycle \(A -> B -> C -> A\)"):
        guards.check_acyclic(_chain_model([_call("f", "a", "y")], [in_function]))
    in_branch = _body_function("g", [helper.make_node("Identity", ["x"], ["a"]), holder])
    with pytest.raises(StructureError, match=r"the function local\.g, subgraph H/then_branch has a cycle"):
        guards.check_acyclic(_chain_model([_call("g", "a", "y")], [in_branch]))


def test_a_cycle_s_description_is_cut_at_1000_characters():
    nodes = _cycle()
    for node in nodes:
        node.name = node.name * 400
    with pytest.raises(StructureError) as caught:
        guards.check_acyclic(_chain_model(nodes))
    shown, _, rest = str(caught.value).partition("…[")
    assert len(shown) == 1000 and rest.endswith(" more characters]")


# --- names that are not UTF-8, wherever they are --------------------------------------------------------------------
MARK = "QZQZQZ"


def _not_utf8(model: onnx.ModelProto, length: int = len(MARK)) -> onnx.ModelProto:
    """The model with MARK's bytes (serialized) replaced by bytes that are not UTF-8."""
    broken = model.SerializeToString().replace(MARK.encode(), b"\xff" * length)
    return onnx.ModelProto.FromString(broken)


@pytest.mark.parametrize(("field", "where"), [
    ("input", "the main graph"), ("output", "the main graph"), ("op_type", "the main graph"),
    ("domain", "the main graph"), ("subgraph", "subgraph S/then_branch"), ("function", "a model-local function"),
    ("function_node", "a model-local function"),
])
def test_a_name_that_is_not_utf8_is_refused_and_shown_as_bytes(field, where):
    node = helper.make_node("Relu", [MARK if field == "input" else "a"], ["r"])
    if field == "output":  # an output nothing reads and the graph does not declare: only the node's list holds it
        node = helper.make_node("Dropout", ["a"], ["r", MARK])  # the graph declares r, its first output
    if field == "op_type":
        node = helper.make_node(MARK, ["a"], ["r"], domain="custom")
    if field == "domain":
        node = helper.make_node("Relu", ["a"], ["r"], domain=MARK)
    if field == "subgraph":
        inner = _branch(helper.make_node("Identity", ["a"], [MARK]))
        node = helper.make_node("If", ["a"], ["r"], name="S", then_branch=inner,
                                else_branch=_branch(helper.make_node("Identity", ["a"], ["p"])))
    functions = []
    if field in ("function", "function_node"):
        body = [helper.make_node("Identity", ["x"], [MARK if field == "function_node" else "z"]),
                helper.make_node("Identity", ["x"], ["y"])]  # the function's output: the mark is in a node's alone
        functions = [helper.make_function("local", MARK if field == "function" else "f", ["x"], ["y"], body,
                                          [helper.make_opsetid("", 17)])]
    model = _chain_model([node], functions)
    guards.check_text(model, read_graphs(model.graph))  # the control: the same model in UTF-8 passes
    broken = _not_utf8(model)
    with pytest.raises(StructureError) as caught:
        guards.check_text(broken, read_graphs(broken.graph))
    assert str(caught.value) == (f"a name in {where} is not UTF-8 text (b'{chr(92)}xff{chr(92)}xff{chr(92)}xff"
                                 f"{chr(92)}xff{chr(92)}xff{chr(92)}xff'), as protobuf and ONNX Runtime require: "
                                 "refused")


def test_a_long_name_that_is_not_utf8_is_shown_to_100_characters():
    name = MARK * 50
    model = _not_utf8(_chain_model([helper.make_node("Relu", ["a"], [name])]))
    with pytest.raises(StructureError) as caught:
        guards.check_text(model, read_graphs(model.graph))
    shown = str(caught.value).split("(", 1)[1]
    assert shown.startswith("b'" + "\\xff" * 24 + "\\x…[") and "more characters]" in shown
    assert len(repr(b"\xff" * 6 * 50)) - 100 == int(shown.split("…[")[1].split()[0])


def test_a_scan_without_its_scan_input_count_in_a_function_is_refused():
    body = helper.make_graph([helper.make_node("Identity", ["s"], ["t"])], "body", [_v("s")], [_v("t")])
    scan = helper.make_node("Scan", ["x"], ["y"], name="scan1", body=body)
    model = _chain_model([_call("f", "a", "y")], [_body_function("f", [scan])])
    with pytest.raises(StructureError, match=r"'scan1' \(Scan\) in function local\.f lacks"):
        guards.check_required_attributes(model, read_graphs(model.graph))


# --- the tensors every check reads -------------------------------------------------------------------------------
def test_model_tensors_reach_training_info_and_a_tensor_after_a_plain_attribute():
    holder = helper.make_node("Holder", ["a"], ["r"], domain="custom", axis=1,
                              value=helper.make_tensor("held", F32, [1], [1.0]))
    assert [attr.name for attr in holder.attribute] == ["axis", "value"]  # the plain one first
    model = _chain_model([holder])
    model.opset_import.append(helper.make_opsetid("custom", 1))
    for k, part in enumerate(("initialization", "algorithm")):
        graph = getattr(model.training_info.add() if k == 0 else model.training_info[0], part)
        graph.initializer.append(helper.make_tensor(f"t_{part}", F32, [1], [0.0]))
    found = {tensor.name: where for where, tensor in guards.model_tensors(model)}
    assert found["held"] == "main graph, <Holder #0> attribute 'value'"
    assert found["t_initialization"] == "training_info[0].initialization, initializer"
    assert found["t_algorithm"] == "training_info[0].algorithm, initializer"
    assert {tensor.name for _, tensor in guards.model_tensors(model, read_graphs(model.graph))} == set(found)
