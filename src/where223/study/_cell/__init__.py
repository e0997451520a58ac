"""What every transformers cell does, in one place: the architecture, class and remedies studies' runners
(`where223.study.{architectures,classes,remedies}.run`) and `where223 explain` (`where223.study.classes.explain`)
run these stages; none of them imports another study's runner.

- `build`: a model type built small from its config with random weights, and fed (`build_and_feed`);
- `stages`: the recipe, eager's kernels, the export under the recipe (with the exporter's emitting calls), ONNX
  Runtime's judgement, lint and blame with evidence (`explain_module` runs them all on any module);
- `numerics`: the graph's outputs against eager's, with the tolerance set before any run.

Below every question's package: it imports none of them (tests/test_import_direction.py). A sweep cell runs it in its
stack's interpreter (the 2022 stack's torch 2.1.2 and transformers 4.25.1, today's torch and transformers 5), so
torch, onnx and transformers are imported inside its functions.
"""
