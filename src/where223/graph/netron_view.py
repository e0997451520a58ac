"""Netron for a notebook's IFrame, served from this machine only, and a node's neighbourhood as its own model.

Netron's own server hands out its web page unchanged, and that page asks an IP-geolocation service whether to
show a cookie-consent gate, then sends usage analytics. Here the page's files are served by a small handler on
127.0.0.1 that removes those calls from the page's script (it refuses to serve a netron version whose calls it
cannot find) and sends a Content-Security-Policy that lets the page reach its own origin only.

The handler answers only requests addressed to it by name (a `Host` of 127.0.0.1 or localhost with its port: a
page elsewhere that rebinds its own host name to 127.0.0.1 gets 421), puts the model's file name into the page
escaped, and answers a path it cannot map to a file (a NUL in it, say) with 400.

One viewer at a time per process: `start` replaces the one before it, the server runs on a daemon thread until
`stop` or the end of the process (a notebook's kernel), so a notebook can be run top to bottom and still show it.
"""

from __future__ import annotations

import html
import http.server
import os
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import onnx

HOST = "127.0.0.1"
MODEL_ROUTE = "/data/"
# The page may load and fetch from its own origin only; inline styles, data: images and blob: workers are its own.
CONTENT_SECURITY_POLICY = "default-src 'self' 'unsafe-inline' data: blob:; frame-ancestors *"
# In netron's browser.js, the start-up steps that leave the machine: the age check (which blocks an old page until
# it is updated), the consent gate (which asks ipinfo.io where the reader is) and the analytics.
_OFFSITE_STEPS = ("await age();", "await consent();", "await telemetry();")


class UnsupportedNetronError(RuntimeError):
    """The installed netron's page no longer has the calls this module removes: serving it could leak requests."""


def _netron_dir() -> Path:
    import netron

    return Path(netron.__file__).parent


def _page_files() -> dict[str, bytes]:
    """index.html and browser.js as served: the off-site start-up steps removed, the model named in a meta tag."""
    folder = _netron_dir()
    script = (folder / "browser.js").read_text(encoding="utf-8")
    for step in _OFFSITE_STEPS:
        if script.count(step) != 1:
            raise UnsupportedNetronError(
                f"netron's browser.js has no single {step!r}: update where223.graph.netron_view"
            )
        step_name = step.removeprefix("await ").removesuffix("();")
        script = script.replace(step, f"/* where223: the {step_name} step removed, it leaves the machine */")
    return {"browser.js": script.encode("utf-8"), "index.html": (folder / "index.html").read_bytes()}


@dataclass
class Viewer:
    """A running viewer: its URL, the model it serves, and its server."""

    url: str
    model: Path
    server: http.server.ThreadingHTTPServer

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(model: Path, pages: dict[str, bytes]) -> type[http.server.BaseHTTPRequestHandler]:
    folder = _netron_dir().resolve()
    index = pages["index.html"].decode("utf-8")
    route = f"{MODEL_ROUTE}{urllib.parse.quote(model.name)}"
    meta = f'<meta name="file" content="{html.escape(route)}">\n<meta name="name" content="{html.escape(model.name)}">'
    index = index.replace('<meta name="version"', f'{meta}\n<meta name="version"', 1)
    served = {**pages, "index.html": index.encode("utf-8")}
    types = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".json": "application/json",
             ".png": "image/png", ".ico": "image/x-icon"}

    class Handler(http.server.BaseHTTPRequestHandler):
        def _refuse(self, status: int, reason: str) -> None:
            body = f"{reason}\n".encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            port = self.server.server_address[1]
            if self.headers.get("Host", "") not in {f"{HOST}:{port}", f"localhost:{port}"}:
                self._refuse(421, "this viewer answers requests for 127.0.0.1 or localhost with its port only")
                return
            path = urllib.parse.urlparse(self.path).path
            name = "index.html" if path == "/" else urllib.parse.unquote(path.lstrip("/"))
            if "\0" in name or "\0" in path:
                self._refuse(400, "bad request: a NUL in the path")
                return
            body: bytes | None = None
            content_type = "application/octet-stream"
            try:
                if path == route:
                    body = model.read_bytes()
                elif name in served:
                    body, content_type = served[name], types[Path(name).suffix]
                else:
                    file = (folder / name).resolve()
                    if file.is_relative_to(folder) and file.is_file() and file.suffix in types:
                        body, content_type = file.read_bytes(), types[file.suffix]
            except (OSError, ValueError):
                self._refuse(400, "bad request")
                return
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
            self.send_header("Content-Type", content_type if body is not None else "text/plain")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
            """Requests are not logged: a notebook cell would show every one."""

    return Handler


_lock = threading.Lock()
_current: Viewer | None = None


def start(model_path: str | os.PathLike[str], port: int | None = None) -> str:
    """Serve `model_path` in Netron on 127.0.0.1 (a free port unless given) and return the URL to embed.

    Replaces the viewer an earlier call started; this one runs until `stop()` or the end of the process.
    """
    global _current
    path = Path(model_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file to serve")
    pages = _page_files()
    with _lock:
        if _current is not None:
            _current.stop()
            _current = None
        server = http.server.ThreadingHTTPServer((HOST, port or 0), _handler(path.resolve(), pages))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="where223-netron", daemon=True).start()
        _current = Viewer(f"http://{HOST}:{server.server_address[1]}", path.resolve(), server)
        return _current.url


def current() -> Viewer | None:
    """The running viewer, if any."""
    return _current


def stop(url: str | None = None) -> None:
    """Stop the running viewer (only if it serves `url`, when given); nothing to do when none runs."""
    global _current
    with _lock:
        if _current is not None and (url is None or _current.url == url):
            _current.stop()
            _current = None


@contextmanager
def serving(model_path: str | os.PathLike[str], port: int | None = None) -> Iterator[str]:
    """`with serving(path) as url: ...`: the viewer is stopped on exit, error or not."""
    url = start(model_path, port)
    try:
        yield url
    finally:
        stop(url)


def extract_neighbourhood(
    model_path: str | os.PathLike[str], node_name: str, hops: int, out_path: str | os.PathLike[str]
) -> Path:
    """Write the nodes within `hops` edges of `node_name` as a model of their own, so that Netron opens on them.

    Values entering the neighbourhood become its inputs (weights too: no tensor data is copied), values leaving it
    its outputs, every value keeps the type and shape the model (or ONNX shape inference) gives it, so each edge
    shows its dtype. The result is for viewing: it is not checked, and keeps the model's type conflicts.
    """
    from where223.graph.draw import neighbourhood
    from where223.graph.lint import lint_types
    from where223.graph.loading import load_model
    from where223.graph.types import model_types

    model, _ = load_model(model_path)  # the guards: no weights read, none outside the model's folder referenced
    types = model_types(model)
    around = neighbourhood(types, node_name, hops, lint_types(types).violations)
    if around.graph["subgraph"]:
        raise ValueError(f"{node_name} is inside a subgraph ({around.graph['subgraph']}): serve the whole model")
    kept = {data["name"] for _, data in around.nodes(data=True) if data["kind"] == "op"}
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except onnx.shape_inference.InferenceError:
        inferred = model.graph
    known = {v.name: v for v in [*inferred.value_info, *model.graph.input, *model.graph.output]}
    known.update(
        (t.name, onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        for t in model.graph.initializer
        if t.name not in known
    )

    def info(value: str) -> onnx.ValueInfoProto:
        return known.get(value) or onnx.helper.make_empty_tensor_value_info(value)

    nodes = [node for node in model.graph.node if node.name in kept]
    produced = {value for node in nodes for value in node.output if value}
    consumed_outside = {value for node in model.graph.node if node.name not in kept for value in node.input}
    consumed_outside |= {v.name for v in model.graph.output}
    inputs = list(dict.fromkeys(v for node in nodes for v in node.input if v and v not in produced))
    outputs = [v for v in dict.fromkeys(v for node in nodes for v in node.output if v) if v in consumed_outside]
    internal = [v for v in dict.fromkeys(produced) if v not in outputs]
    graph = onnx.helper.make_graph(
        nodes,
        f"{node_name}: {hops}-hop neighbourhood",
        [info(v) for v in inputs],
        [info(v) for v in outputs],
        value_info=[info(v) for v in internal if v in known],
    )
    extracted = onnx.helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(extracted, os.fspath(out))
    return out
