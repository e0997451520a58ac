"""netron serves on 127.0.0.1 only and is always stopped."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from where223.graph.netron_view import serving, start, stop


def test_serving_stops_even_on_error(clean_model, save):
    path = save(clean_model)
    with pytest.raises(RuntimeError, match="inside"):
        with serving(path) as url:
            assert url.startswith("http://127.0.0.1:")
            assert urllib.request.urlopen(url, timeout=5).status == 200
            raise RuntimeError("inside")
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(url, timeout=2)


def test_root_logging_is_left_alone(clean_model, save):
    """netron would call logging.basicConfig(INFO) in a fresh process (a notebook kernel): it must not."""
    script = (
        "import logging, sys; from where223.graph.netron_view import serving\n"
        "with serving(sys.argv[1]):\n    pass\n"
        "assert logging.getLogger().handlers == [] and logging.getLogger().level == logging.WARNING"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(save(clean_model))], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""


def test_start_and_stop(clean_model, save):
    url = start(save(clean_model))
    try:
        assert urllib.request.urlopen(url, timeout=5).status == 200
    finally:
        stop(url)
    with pytest.raises(FileNotFoundError, match="no such model file"):
        start(save(clean_model).with_name("absent.onnx"))
