"""The worker entry point of every ONNX Runtime call the graph tools make in a process of their own, which the parent
kills when its time is up (ONNX Runtime has no time limit of its own, and a crash there ends only the child):

- `python -m where223.graph.ort_child MODEL.onnx '["CPUExecutionProvider"]' [--probe]`
  (`where223.graph.ort.judge(..., timeout_s=...)`): session creation; prints {"error": null} when a session was
  created, else {"error": ONNX Runtime's message}; `--probe` creates it as `load_session(..., probe=True)` does;
- `python -m where223.graph.ort_child --run MODEL FOLDER PROVIDER [--no-optimize]` (`where223 diff`): the model run
  on FOLDER's feeds, its outputs written to FOLDER (`where223.graph.diff.child_run`);
- `python -m where223.graph.ort_child --kernel-listing` (`where223 convert`): the kernels the installed onnxruntime
  lists (`where223.graph.convert._listing.child_listing`).

Each prints one JSON line; a missing onnxruntime is raised (exit 1).
"""

from __future__ import annotations

import json
import sys

from where223.graph.ort import load_session


def main() -> None:
    """Do what argv asks (see the module's docstring); print the outcome as one JSON line."""
    if sys.argv[1:2] == ["--run"]:
        from where223.graph.diff import child_run

        print(json.dumps(child_run(sys.argv[2:])))
        return
    if sys.argv[1:2] == ["--kernel-listing"]:
        from where223.graph.convert._listing import child_listing

        print(json.dumps(child_listing()))
        return
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
