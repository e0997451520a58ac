"""Lint's check, piece by piece: the verdict at a glance that lets almost every node be a look-up, the type a
conflict is expected to resolve to, the outputs no input decides, and what the report counts and notes. Each piece
is held to answers worked out by hand from its op's schema (onnx's), so a check weakened inside it fails here even
where the whole-model tests would not notice."""

from __future__ import annotations

import onnx
from onnx import TensorProto as T
from onnx import helper

from where223.graph.lint import (
    _CLEAN,
    _IN_FULL,
    UNTYPED_EXAMPLES,
    Binding,
    FindingKind,
    _expected_type,
    _undecided_outputs,
    _verdict,
    lint_model,
)
from where223.graph.schema import signature

F, H, S = "tensor(float)", "tensor(float16)", "tensor(string)"


def test_a_node_is_clean_at_a_glance_only_when_every_parameter_binds_one_admitted_type():
    add = signature("Add", "", 17)
    assert _verdict(add, (F, F), (F,)) is _CLEAN  # the look-up's answer for almost every node: one object
    assert _verdict(add, (F, None), (F,)) == (True, (1,), ())  # clean, with its untyped input named
    assert _verdict(add, (F, F), (None,)) == (True, (), (0,))  # and its untyped output
    assert _verdict(add, (F, H), (F,)) is _IN_FULL  # T bound to two types: looked at in full
    assert _verdict(add, (S, S), (S,)) is _IN_FULL  # a type Add does not admit, bound alike everywhere
    assert _verdict(add, (F, F), (H,)) is _IN_FULL  # the output alone differs


def test_a_conflict_is_expected_to_resolve_to_its_outputs_type_else_the_majority_else_the_first_input():
    def b(io, position, kind):
        return Binding(io, position, f"{io}{position}", kind)

    # the outputs' one type, though the inputs' majority is another
    assert _expected_type([b("input", 0, F), b("input", 1, F), b("output", 0, H)]) == H
    # no output: the majority
    assert _expected_type([b("input", 0, H), b("input", 1, F), b("input", 2, F)]) == F
    # outputs of two types, a tie: the first input's type (inputs before outputs, in position order)
    assert _expected_type([b("output", 0, F), b("output", 1, H), b("input", 0, H), b("input", 1, F)]) == H


def test_the_outputs_no_typed_input_decides_are_those_of_an_unbound_parameter_with_a_choice():
    add, cast = signature("Add", "", 17), signature("Cast", "", 13)
    assert _undecided_outputs(add, (F, F), 1) == ()  # T is bound by its inputs
    assert _undecided_outputs(add, (None, None), 1) == (0,)  # nothing binds T, and T has many types
    assert _undecided_outputs(cast, (F,), 1) == (0,)  # T2 is no input's parameter
    assert _undecided_outputs(signature("Multinomial", "", 7), (F,), 1) == (0,)  # T2: int32 or int64
    assert _undecided_outputs(signature("Shape", "", 15), (F,), 1) == ()  # T1: int64, no choice


def _chain(n: int) -> onnx.ModelProto:
    """`n` Relu nodes in a row, their values undeclared and the model not inferred: every value untyped."""
    nodes = [helper.make_node("Relu", [f"v{k}"], [f"v{k + 1}"], name=f"relu{k}") for k in range(n)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("v0", T.FLOAT, [1])],
                              [helper.make_tensor_value_info(f"v{n}", T.FLOAT, [1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_clean_model_s_report_counts_its_nodes_and_notes_nothing():
    report = lint_model(_chain(3))
    assert report.violations == [] and report.notes == [] and report.nodes_checked == 3
    assert report.opset == 17 and report.opset_imports == {"": 17}


def test_the_report_names_at_most_its_share_of_untyped_values():
    model = _chain(UNTYPED_EXAMPLES + 3)
    for value in list(model.graph.value_info):
        model.graph.value_info.remove(value)
    model.graph.input[0].type.tensor_type.elem_type = T.UNDEFINED  # nothing to infer the chain's types from
    report = lint_model(model)
    assert report.untyped_values > UNTYPED_EXAMPLES
    assert len(report.untyped_examples) == UNTYPED_EXAMPLES


def test_the_report_gives_the_opset_the_model_declares():
    """A model declaring an opset above the installed onnx's is checked at the highest onnx knows (a note says so);
    the report still gives the declared one."""
    model = _chain(1)
    declared = onnx.defs.onnx_opset_version() + 1
    model.opset_import[0].version = declared
    report = lint_model(model)
    assert report.opset == declared and report.opset_imports == {"": declared}


def test_a_heterogeneous_variadic_may_carry_several_types():
    """If's outputs are one heterogeneous variadic parameter (V): a float and an int64 output are no conflict; the
    control: Concat's homogeneous inputs of two types are one."""
    def branch(name: str, value: float) -> onnx.GraphProto:
        nodes = [helper.make_node("Constant", [], [f"{name}f"], value=helper.make_tensor("f", T.FLOAT, [], [value])),
                 helper.make_node("Constant", [], [f"{name}i"], value=helper.make_tensor("i", T.INT64, [], [1]))]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}f", T.FLOAT, []),
                                                   helper.make_tensor_value_info(f"{name}i", T.INT64, [])])

    then, other = branch("then", 1.0), branch("else", 2.0)
    node = helper.make_node("If", ["cond"], ["x", "y"], name="if0", then_branch=then, else_branch=other)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("cond", T.BOOL, [])],
                              [helper.make_tensor_value_info("x", T.FLOAT, []),
                               helper.make_tensor_value_info("y", T.INT64, [])])
    assert lint_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])).violations == []
    concat = helper.make_graph([helper.make_node("Concat", ["p", "q"], ["r"], name="concat0", axis=0)], "g",
                               [helper.make_tensor_value_info("p", T.FLOAT, [1]),
                                helper.make_tensor_value_info("q", T.INT64, [1])],
                               [helper.make_tensor_value_info("r", T.FLOAT, [2])])
    found = lint_model(helper.make_model(concat, opset_imports=[helper.make_opsetid("", 17)])).violations
    assert [(v.node, v.kind) for v in found] == [("concat0", FindingKind.BINDING_CONFLICT)]


def test_an_output_declared_against_its_inputs_is_the_declaration_named_alone():
    """Split's outputs share T with its input: a float input, one output declared float, the other float16. The
    finding is a declared type, and only the float16 output contradicts the node."""
    node = helper.make_node("Split", ["x"], ["a", "b"], name="split0", axis=0, num_outputs=2)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, [2])],
                              [helper.make_tensor_value_info("a", T.FLOAT, [1]),
                               helper.make_tensor_value_info("b", T.FLOAT16, [1])])
    found = lint_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])).violations
    declared = [v for v in found if v.node == "split0"]
    assert [v.kind for v in declared] == [FindingKind.DECLARED_TYPE]
    assert declared[0].offending == [Binding("output", 1, "b", H)] and declared[0].expected == F


def test_an_untyped_input_does_not_hide_the_typed_ones_after_it():
    """Concat's first input untyped, the next two float and float16: the conflict between those two is found."""
    node = helper.make_node("Concat", ["u", "p", "q"], ["r"], name="concat0", axis=0)
    graph = helper.make_graph([helper.make_node("Relu", ["z"], ["u"], name="relu0"), node], "g",
                              [helper.make_tensor_value_info("z", T.UNDEFINED, None),
                               helper.make_tensor_value_info("p", T.FLOAT, [1]),
                               helper.make_tensor_value_info("q", T.FLOAT16, [1])],
                              [helper.make_tensor_value_info("r", T.FLOAT, [3])])
    report = lint_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert [(v.node, v.kind) for v in report.violations] == [("concat0", FindingKind.BINDING_CONFLICT)]
    assert "u" in report.untyped_examples


def test_sequence_map_s_output_is_undecided_though_its_input_binds_its_parameter():
    """SequenceMap's S is homogeneous on its input and heterogeneous on its output (the one such parameter onnx
    has): the input's type does not decide the output's."""
    sequence_map = signature("SequenceMap", "", 17)
    assert _undecided_outputs(sequence_map, ("seq(tensor(float))",), 1) == (0,)


def test_an_op_onnx_does_not_know_is_counted_unchecked_under_its_domain():
    graph = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["y"], name="f0")], "g",
                              [helper.make_tensor_value_info("x", T.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [1])])
    report = lint_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert report.unchecked == {"ai.onnx:Frobnicate": 1} and report.nodes_checked == 0


def _loss(x=T.BFLOAT16, labels=T.INT64) -> onnx.ModelProto:
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "labels"], ["loss"], name="sce")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x, [3, 4]),
                                            helper.make_tensor_value_info("labels", labels, [3])],
                              [helper.make_tensor_value_info("loss", x, [])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_function_bodies_are_checked_to_their_depth_and_no_deeper(fake_kernels, monkeypatch):
    """A bfloat16 loss, whose kernel the (fake) list lacks, refused inside its body one level down: found with a
    depth of one body allowed, not with none."""
    import where223.graph.lint as lint

    monkeypatch.setattr(lint, "_BODY_DEPTH", 1)
    assert [(v.op_type, v.subgraph) for v in lint_model(_loss()).violations] == [
        ("NegativeLogLikelihoodLoss", "sce/function body")]
    monkeypatch.setattr(lint, "_BODY_DEPTH", 0)
    assert lint_model(_loss()).violations == []


def test_a_node_its_own_schema_refuses_is_not_also_checked_through_its_body(fake_kernels):
    """float labels are outside SoftmaxCrossEntropyLoss's Tind: the node's own finding, and nothing from its body."""
    found = lint_model(_loss(T.FLOAT, T.FLOAT)).violations
    assert [(v.op_type, v.kind, v.subgraph) for v in found] == [
        ("SoftmaxCrossEntropyLoss", FindingKind.NOT_ALLOWED, "")]


def test_findings_inside_a_body_take_their_call_s_place_in_graph_order(fake_kernels):
    """The loss's body finding (its call is node 0) comes before the Where conflict at node 1, though the body's
    own node stands further into the body."""
    model = _loss()
    where = helper.make_node("Where", ["c", "a", "b"], ["w"], name="Where_1")
    model.graph.node.append(where)
    model.graph.input.extend([helper.make_tensor_value_info("c", T.BOOL, [1]),
                              helper.make_tensor_value_info("a", T.FLOAT, [1]),
                              helper.make_tensor_value_info("b", T.FLOAT16, [1])])
    model.graph.output.append(helper.make_tensor_value_info("w", T.FLOAT, [1]))
    found = lint_model(model).violations
    assert [v.op_type for v in found] == ["NegativeLogLikelihoodLoss", "Where"]
    assert found[0].node_index > 1  # the body's own index would sort it after Where_1


def test_a_heterogeneous_parameter_is_refused_only_the_type_it_does_not_admit():
    """If's V at opset 11 admits tensors only: a branch giving a tensor and a sequence is refused the sequence, and
    the two types are no conflict (V may carry several)."""
    def branch(name: str) -> onnx.GraphProto:
        nodes = [helper.make_node("Constant", [], [f"{name}f"], value=helper.make_tensor("f", T.FLOAT, [1], [1.0])),
                 helper.make_node("SequenceConstruct", [f"{name}f"], [f"{name}s"])]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}f", T.FLOAT, [1]),
                                                   helper.make_tensor_sequence_value_info(f"{name}s", T.FLOAT, None)])

    node = helper.make_node("If", ["cond"], ["x", "y"], name="if0", then_branch=branch("then"),
                            else_branch=branch("else"))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("cond", T.BOOL, [])],
                              [helper.make_tensor_value_info("x", T.FLOAT, [1]),
                               helper.make_tensor_sequence_value_info("y", T.FLOAT, None)])
    found = lint_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])).violations
    assert [(v.node, v.kind, [b.name for b in v.offending]) for v in found] == [
        ("if0", FindingKind.NOT_ALLOWED, ["y"])]
