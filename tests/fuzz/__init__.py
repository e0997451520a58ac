"""Property-based tests of every reader (Hypothesis): hostile ONNX models, kernel caches, records and folders for
compare, spaces, plans and YAML, each case run through the command line in a child forked from a warmed parent and
judged (harness.py: one line, a documented exit status, no traceback, 10 s of CPU and 2 GiB).

harness.py forks, bounds, captures and judges one case; engine.py draws a reader's cases with Hypothesis and tallies
them; onnx_cases.py, json_cases.py and yaml_cases.py are the readers' recipes and how a recipe becomes files and a
command; readers.py names them. test_harness.py shows each of the judge's rules failing on a control built to break
it; test_fuzz.py is the fixed-seed sample `make test` runs; test_regressions.py holds every failure the full run
(`make fuzz`, benchmarks/fuzz.py) found, as a named case.
"""
