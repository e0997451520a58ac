"""The worker entry point of `where223.graph.ort.judge(..., timeout_s=...)`: ONNX Runtime's session creation in a
process of its own, which the parent kills when its time is up (ONNX Runtime has no time limit of its own).

`python -m where223.graph.ort_child MODEL.onnx '["CPUExecutionProvider"]'` prints one JSON line, {"error": null}
when a session was created, else {"error": ONNX Runtime's message}; a missing onnxruntime is raised (exit 1).
A third argument, `--probe`, creates it as `load_session(..., probe=True)` does.
"""

from __future__ import annotations

import json
import sys

from where223.graph.ort import load_session


def main() -> None:
    """Create the session for argv[1] with the providers in argv[2]; print the outcome as one JSON line."""
    path, providers = sys.argv[1], json.loads(sys.argv[2])
    try:
        load_session(path, providers, probe="--probe" in sys.argv[3:])
    except ImportError:
        raise
    except Exception as error:  # ONNX Runtime's exception classes share no base but Exception
        print(json.dumps({"error": str(error)}))
        return
    print(json.dumps({"error": None}))


if __name__ == "__main__":
    main()
