"""What a reviewer and an explorer see, in a real browser: JupyterLab running 02_graph with Netron on the rejected
node, the HTML exports and the rendered write-up. Every request is recorded: one that leaves the machine fails the
test (and is blocked), so does a failed request or an image that does not load. Screenshots go to
test-artifacts/browser/.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from where223.pipeline.paths import OUTPUTS, ROOT

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
EXPORTS = sorted((OUTPUTS / "notebooks").glob("*.html"))
WRITE_UP_WIDTH = 900  # GitHub's Markdown column, about
BROKEN_IMAGES = (
    "Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src.slice(0, 120))"
)


def leaves_the_machine(url: str) -> bool:
    parsed = urllib.parse.urlparse(url)
    return parsed.scheme not in ("file", "data", "blob", "about", "chrome") and parsed.hostname not in LOOPBACK


class Traffic:
    """Every request of a browser context: those that would leave the machine (blocked), and those that failed."""

    def __init__(self, context) -> None:
        self.offsite: list[str] = []
        self.failed: list[str] = []
        context.route(lambda url: leaves_the_machine(url), self._block)
        context.on("requestfailed", lambda request: self._failed(request))

    def _block(self, route) -> None:
        self.offsite.append(route.request.url)
        route.abort()

    def _failed(self, request) -> None:
        if not leaves_the_machine(request.url):  # those are counted above
            self.failed.append(f"{request.url[:120]}: {request.failure}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def checkout_with_viewer_on(tmp_path: Path) -> Path:
    """A copy of the repository's notebooks whose 02_graph shows Netron and writes into the test's folder."""
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "notebooks", checkout / "notebooks")
    (checkout / "outputs").mkdir()
    notebook = checkout / "notebooks" / "02_graph.ipynb"
    text = notebook.read_text()
    for before, after in (
        ("show_netron: bool = False", "show_netron: bool = True"),
        ('output_root: str = \\"\\"', f'output_root: str = \\"{tmp_path / "run"}\\"'),
    ):
        assert text.count(before) == 1, f"02_graph's parameters cell has no {before}"
        text = text.replace(before, after)
    notebook.write_text(text)
    return checkout


def wait_for_lab(base: str, token: str, lab: subprocess.Popen) -> None:
    deadline = time.monotonic() + 90
    while True:
        try:
            request = urllib.request.Request(f"{base}/api/status", headers={"Authorization": f"token {token}"})
            json.loads(urllib.request.urlopen(request, timeout=5).read())
            return
        except OSError:
            assert lab.poll() is None, "make lab exited early"
            assert time.monotonic() < deadline, "JupyterLab did not answer within 90 s"
            time.sleep(1)


def committed_outputs_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--", "outputs"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


def test_jupyterlab_runs_02_graph_and_netron_shows_the_rejected_where(chromium, artifacts, tmp_path):
    before = committed_outputs_status()
    checkout = checkout_with_viewer_on(tmp_path)
    port, token = free_port(), secrets.token_hex(16)
    lab = subprocess.Popen(
        ["make", "-s", "lab", f"LAB_PORT={port}", f"LAB_TOKEN={token}", f"LAB_ROOT={checkout}"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    traffic = Traffic(context)
    try:
        wait_for_lab(base, token, lab)
        page = context.new_page()
        page.goto(f"{base}/lab/tree/notebooks/02_graph.ipynb?token={token}")
        page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
        page.get_by_text(re.compile(r"\(where223\) \| Idle")).wait_for(timeout=60_000)
        dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
        if dialog.count():  # JupyterLab may ask once which kernel to start: the notebook's own
            dialog.locator("select").select_option(label="Python 3.11 (where223)")
            dialog.get_by_role("button", name="Select").click()
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        viewer = page.frame_locator("iframe[src^='http://127.0.0.1']")
        try:
            viewer.locator("#canvas g.node").first.wait_for(timeout=150_000)
        except Exception:
            errors = page.locator("[data-mime-type='application/vnd.jupyter.error']").all_inner_texts()
            page.screenshot(path=artifacts / "lab-02_graph-failed.png")
            raise AssertionError(f"Netron did not render within 150 s; cell errors: {errors}") from None
        page.locator("iframe[src^='http://127.0.0.1']").scroll_into_view_if_needed()
        assert viewer.locator("#canvas g.node", has_text="Where").count() >= 1
        assert page.get_by_text("Netron shows /transformer/h.0/attn/Where").count() == 1
        time.sleep(1)
        page.screenshot(path=artifacts / "lab-02_graph-netron.png")
        assert page.locator("[data-mime-type='application/vnd.jupyter.error']").count() == 0
    finally:
        context.close()
        if lab.poll() is None:
            os.killpg(lab.pid, signal.SIGTERM)
            lab.wait(timeout=30)
    assert traffic.offsite == []
    assert traffic.failed == []
    assert (tmp_path / "run").is_dir()  # the run wrote where the test said
    assert committed_outputs_status() == before


@pytest.mark.parametrize("export", EXPORTS, ids=[path.stem for path in EXPORTS])
def test_an_html_export_opens_offline_with_every_image(chromium, artifacts, export):
    context = chromium.new_context(viewport={"width": 1000, "height": 900})
    traffic = Traffic(context)
    page = context.new_page()
    page.goto(export.as_uri(), wait_until="load")
    broken = page.evaluate(BROKEN_IMAGES)
    title = page.title()
    page.screenshot(path=artifacts / f"export-{export.stem}.png")
    context.close()
    assert traffic.offsite == []
    assert traffic.failed == []
    assert broken == []
    assert re.match(r"\d\d · ", title), f"untitled export: {title!r}"


def test_the_rendered_write_up_shows_every_figure_at_page_width(chromium, artifacts, tmp_path):
    import mistune

    body = mistune.html((OUTPUTS / "REPORT.md").read_text())
    page_file = tmp_path / "REPORT.html"
    page_file.write_text(
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><base href="{OUTPUTS.as_uri()}/">'
        f"<style>body{{max-width:{WRITE_UP_WIDTH}px;margin:auto;font-family:sans-serif}}img{{max-width:100%}}"
        f"table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px}}</style></head>"
        f"<body>{body}</body></html>"
    )
    context = chromium.new_context(viewport={"width": WRITE_UP_WIDTH + 80, "height": 1200})
    traffic = Traffic(context)
    page = context.new_page()
    page.goto(page_file.as_uri(), wait_until="load")
    broken = page.evaluate(BROKEN_IMAGES)
    images = page.evaluate("document.images.length")
    too_wide = page.evaluate(f"Array.from(document.querySelectorAll('table')).filter(t => t.scrollWidth > "
                             f"{WRITE_UP_WIDTH}).map(t => t.rows[0].innerText.slice(0, 80))")
    page.screenshot(path=artifacts / "write-up.png", full_page=True)
    context.close()
    assert images >= 8
    assert traffic.offsite == []
    assert traffic.failed == []
    assert broken == []
    assert too_wide == []
