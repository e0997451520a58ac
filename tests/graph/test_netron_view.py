"""Netron is served on 127.0.0.1 only, one viewer at a time, its page without the calls that leave the machine."""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import onnx
import pytest

from where223.graph import netron_view
from where223.graph.netron_view import serving, start, stop
from where223.pipeline.paths import OUTPUTS

REJECTED = "/transformer/h.0/attn/Where"


def refused(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2)
    except (urllib.error.URLError, ConnectionError):
        return True
    return False


def test_serving_stops_even_on_error(clean_model, save):
    path = save(clean_model)
    with pytest.raises(RuntimeError, match="inside"):
        with serving(path) as url:
            assert url.startswith("http://127.0.0.1:")
            assert urllib.request.urlopen(url, timeout=5).status == 200
            raise RuntimeError("inside")
    assert refused(url)


def test_root_logging_is_left_alone(clean_model, save):
    """A fresh process (a notebook kernel) keeps its root logger as it was."""
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


def test_a_new_viewer_replaces_the_old_and_lives_until_stopped(clean_model, save):
    first = start(save(clean_model))
    try:
        second = start(save(clean_model, "other.onnx"))
        assert second != first and refused(first)  # replaced, not leaked
        assert urllib.request.urlopen(f"{second}/data/other.onnx", timeout=5).read() == save(
            clean_model, "other.onnx"
        ).read_bytes()
    finally:
        stop()
    assert refused(second) and netron_view.current() is None
    with pytest.raises(FileNotFoundError, match="no such model file"):
        start(save(clean_model).with_name("absent.onnx"))


def test_the_page_makes_no_offsite_call_and_may_reach_its_own_origin_only(clean_model, save):
    original = (netron_view._netron_dir() / "browser.js").read_text()
    assert "https://ipinfo.io/json" in original  # the control: netron's own page asks where the reader is
    with serving(save(clean_model)) as url:
        response = urllib.request.urlopen(f"{url}/browser.js", timeout=5)
        served = response.read().decode()
        page = urllib.request.urlopen(url, timeout=5).read().decode()
    assert response.headers["Content-Security-Policy"].startswith("default-src 'self'")
    for step in netron_view._OFFSITE_STEPS:
        assert step in original and step not in served
    assert '<meta name="file" content="/data/model.onnx">' in page


def test_a_netron_without_the_known_calls_is_refused(tmp_path, monkeypatch, clean_model, save):
    copy = tmp_path / "netron"
    shutil.copytree(netron_view._netron_dir(), copy, ignore=shutil.ignore_patterns("*-metadata.json", "__pycache__"))
    script = copy / "browser.js"
    script.write_text(script.read_text().replace("await consent();", "await consentGate();"))
    monkeypatch.setattr(netron_view, "_netron_dir", lambda: copy)
    with pytest.raises(netron_view.UnsupportedNetronError, match="await consent"):
        start(save(clean_model))


def test_the_neighbourhood_is_a_typed_model_of_its_own(tmp_path):
    out = netron_view.extract_neighbourhood(OUTPUTS / "tiny-cpu-bf16-onnx_export" / "model.onnx", REJECTED, 2,
                                            tmp_path / "neighbourhood.onnx")
    model = onnx.load(out)
    names = [node.name for node in model.graph.node]
    assert REJECTED in names and 5 <= len(names) <= 20
    assert not model.graph.initializer  # no weights copied
    values = [*model.graph.input, *model.graph.value_info, *model.graph.output]
    typed = {v.name: v.type.tensor_type.elem_type for v in values}
    where = model.graph.node[names.index(REJECTED)]
    # the conflict Netron shows: float scores beside a bfloat16 mask value
    assert {typed[where.input[1]], typed[where.input[2]]} == {onnx.TensorProto.FLOAT, onnx.TensorProto.BFLOAT16}


def _get(url: str, path: str, host: str | None = None) -> tuple[int, bytes]:
    """GET `path` from the viewer at `url`, with the Host header given (http.client sends the real one otherwise)."""
    import http.client

    address = urllib.parse.urlparse(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=5)
    try:
        connection.putrequest("GET", path, skip_host=host is not None)
        if host is not None:
            connection.putheader("Host", host)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_the_page_escapes_the_model_file_name(clean_model, tmp_path):
    """A downloaded model named to inject HTML: its name reaches the page escaped; the control, a plain name,
    reaches it as it is."""
    evil = tmp_path / 'x"><img src=x onerror=alert(1)>.onnx'
    onnx.save(clean_model, str(evil))
    with serving(evil) as url:
        status, page = _get(url, "/")
    assert status == 200
    assert b"<img" not in page and b"&lt;img src=x onerror=alert(1)&gt;" in page
    plain = tmp_path / "x.onnx"
    onnx.save(clean_model, str(plain))
    with serving(plain) as url:
        assert b'<meta name="name" content="x.onnx">' in _get(url, "/")[1]


def test_only_requests_for_this_machine_by_name_are_answered(clean_model, save):
    """DNS rebinding: a page on another name that resolves to 127.0.0.1 sends its own Host; it gets 421."""
    with serving(save(clean_model)) as url:
        port = urllib.parse.urlparse(url).port
        assert _get(url, "/", f"127.0.0.1:{port}")[0] == 200
        assert _get(url, "/", f"localhost:{port}")[0] == 200
        for host in (f"attacker.example:{port}", "127.0.0.1", f"127.0.0.1:{port + 1}", ""):
            assert _get(url, "/", host)[0] == 421, host


def test_a_nul_in_the_path_is_a_bad_request(clean_model, save):
    with serving(save(clean_model)) as url:
        assert _get(url, "/%00")[0] == 400
        assert _get(url, "/x%00.js")[0] == 400
        assert _get(url, "/no-such-file.js")[0] == 404  # the control: an ordinary miss
        assert _get(url, "/")[0] == 200
