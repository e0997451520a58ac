"""Generic ONNX forensics for any model: types, lint, blame, repair, drawing. onnx only; no torch."""
