"""where223: reproduce, explain and fix the GPT-2 mixed-precision `Where_223` ONNX type error."""

__version__ = "0.1.0"
