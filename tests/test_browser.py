"""Real-browser tests: Playwright driving Debian's chromium against `panel serve apps/explorer.py`.

Screenshots go to ``test-artifacts/`` (not tracked).  Skipped when chromium or
playwright is missing; ``.ci/run`` installs both, so CI runs them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("DPEXPLORER_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]

playwright_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(f"chromium not found at {CHROMIUM}", allow_module_level=True)

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BOKEH_RESOURCES": "server"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "panel", "serve", "apps/explorer.py", "--port", str(port),
         "--address", "127.0.0.1", f"--allow-websocket-origin=127.0.0.1:{port}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/explorer"
    deadline = time.monotonic() + 90
    import urllib.request
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("panel serve did not answer within 90 s")
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    ctx = browser.new_context(viewport={"width": 1500, "height": 1100}, accept_downloads=True)
    pg = ctx.new_page()
    pg.problems = []
    pg.on("console", lambda m: m.type == "error" and pg.problems.append(f"console: {m.text}"))
    pg.on("pageerror", lambda e: pg.problems.append(f"pageerror: {e}"))
    pg.on("requestfailed", lambda r: pg.problems.append(f"requestfailed: {r.url}"))
    t0 = time.perf_counter()
    pg.goto(server, wait_until="load")
    pg.wait_for_selector("text=Compare", timeout=60_000)
    pg.load_seconds = time.perf_counter() - t0
    yield pg
    ctx.close()


def _shot(pg, name):
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _tab(pg, title):
    pg.get_by_role("tab", name=title).click()
    pg.wait_for_timeout(1500)


def test_every_page_loads_without_console_errors(page):
    for title in ["Workload", "Compare", "Strategy", "Data & DAWA", "Release", "Learn"]:
        _tab(page, title)
        assert page.locator(".alert-danger:has-text('could not be built')").count() == 0, title
        _shot(page, f"page-{title.replace(' & ', '-').lower()}")
    assert not [p for p in page.problems if "favicon" not in p], page.problems
    print(f"page load: {page.load_seconds:.2f} s")
