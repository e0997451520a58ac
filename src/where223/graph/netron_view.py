"""Serve a model in netron on 127.0.0.1 only, for an IFrame in a notebook, and always stop it."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HOST = "127.0.0.1"


@contextmanager
def _root_logging_untouched() -> Iterator[None]:
    """netron calls logging.basicConfig(INFO) when the root logger has no handler; keep it from that."""
    root = logging.getLogger()
    guard = logging.NullHandler()
    root.addHandler(guard)
    try:
        yield
    finally:
        root.removeHandler(guard)


def start(model_path: str | os.PathLike[str], port: int | None = None) -> str:
    """Serve `model_path` with netron on 127.0.0.1 (a free port unless given); the URL to embed."""
    import netron

    path = Path(model_path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such model file to serve")
    with _root_logging_untouched():
        host, bound = netron.start(str(path), address=(HOST, port), browse=False)
    return f"http://{host}:{bound}"


def stop(url: str) -> None:
    """Stop the netron server behind a URL returned by `start`."""
    import netron

    host, port = url.removeprefix("http://").rsplit(":", 1)
    with _root_logging_untouched():
        netron.stop((host, int(port)))


@contextmanager
def serving(model_path: str | os.PathLike[str], port: int | None = None) -> Iterator[str]:
    """`with serving(path) as url: IFrame(url, ...)`: the server is stopped on exit, error or not."""
    url = start(model_path, port)
    try:
        yield url
    finally:
        stop(url)
