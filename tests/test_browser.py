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
    pg.locator(".bk-tab", has_text=title).first.click()
    pg.wait_for_timeout(1500)


def test_every_page_loads_without_console_errors(page):
    for title in ["Workload", "Compare", "Strategy", "Data & DAWA", "Release", "Learn"]:
        _tab(page, title)
        assert page.locator(".alert-danger:has-text('could not be built')").count() == 0, title
        _shot(page, f"page-{title.replace(' & ', '-').lower()}")
    assert not [p for p in page.problems if "favicon" not in p], page.problems
    print(f"page load: {page.load_seconds:.2f} s")


def _rmse_cells(pg):
    cells = pg.locator(".tabulator-cell[tabulator-field='rmse']")
    return [cells.nth(i).inner_text() for i in range(cells.count())]


def _set_epsilon(pg, value: str) -> float:
    """Type ε in the sidebar and return the seconds until the Compare table shows new values."""
    before = _rmse_cells(pg)
    box = pg.locator("input").first  # the sidebar's ε input comes first
    t0 = time.perf_counter()
    box.fill(value)
    box.press("Enter")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = _rmse_cells(pg)
        if now and now != before:
            return time.perf_counter() - t0
        pg.wait_for_timeout(20)
    raise AssertionError("the Compare table did not change after an ε change")


def test_epsilon_change_updates_compare_table(page):
    _tab(page, "Compare")
    page.wait_for_selector(".tabulator-cell[tabulator-field='rmse']", timeout=60_000)
    first = float(_rmse_cells(page)[0].replace(",", ""))
    seconds = _set_epsilon(page, "0.5")
    page.wait_for_timeout(500)
    halved = float(_rmse_cells(page)[0].replace(",", ""))
    assert halved == pytest.approx(2 * first, rel=1e-3)  # RMSE ∝ 1/ε
    _shot(page, "compare-eps-0.5")
    print(f"ε change → table: {seconds:.2f} s")
    # an invalid ε is refused with a notification and the table stays
    box = page.locator("input").first
    box.fill("-1")
    box.press("Enter")
    page.wait_for_timeout(1500)
    assert float(_rmse_cells(page)[0].replace(",", "")) == pytest.approx(halved, rel=1e-6)
    assert page.locator("text=must be greater than 0").count() >= 1
    assert not [p for p in page.problems if "favicon" not in p], page.problems


def _queries(pg) -> int:
    """The builder's "m = … queries" figure."""
    import re

    text = pg.locator("text=/m = [0-9,]+ queries/").first.inner_text()
    return int(re.search(r"m = ([0-9,]+) queries", text).group(1).replace(",", ""))


def _wait_queries(pg, old: int, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = _queries(pg)
        if m != old:
            return m
        pg.wait_for_timeout(100)
    return old


def _brush(pg, frac0: float, frac1: float) -> None:
    """Box-select drag across the lowest plot of the page (the data histogram)."""
    canvases = pg.locator(".bk-Canvas:visible")
    canvas = max((canvases.nth(i) for i in range(canvases.count())),
                 key=lambda c: c.bounding_box()["y"])
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    y = box["y"] + box["height"] * 0.5
    pg.mouse.move(box["x"] + box["width"] * frac0, y)
    pg.mouse.down()
    pg.mouse.move(box["x"] + box["width"] * frac1, y, steps=8)
    pg.mouse.up()


def test_build_workload(page):
    _tab(page, "Workload")
    m0 = _queries(page)
    family = page.locator("select:visible").nth(1)  # the sidebar's dataset select comes first
    options = family.locator("option").all_inner_texts()
    family.select_option(label=next(o for o in options if "prefix" in o.lower()))
    page.wait_for_timeout(500)
    page.get_by_role("button", name="Add term").click()
    m1 = _wait_queries(page, m0)
    assert m1 == m0 + 256  # Prefix over the 256 cells of the bundled histogram
    _shot(page, "workload-added-prefix")
    assert not [p for p in page.problems if "favicon" not in p], page.problems


def test_brush_a_range(page):
    _tab(page, "Workload")
    m0 = _queries(page)
    _brush(page, 0.35, 0.55)
    m1 = _wait_queries(page, m0, timeout=15)
    _shot(page, "workload-brushed")
    assert m1 == m0 + 1  # one custom range added


def test_release_and_download(page):
    _tab(page, "Release")
    page.get_by_role("button", name="Run release").click()
    page.wait_for_selector("text=Spent this session: ε = 1", timeout=60_000)
    with page.expect_download(timeout=30_000) as info:
        page.get_by_role("button", name="Download CSV").click()
    path = info.value.path()
    text = Path(path).read_text()
    assert "mechanism" in text and "seed" in text and "answer" in text
    with page.expect_download(timeout=30_000) as info:
        page.get_by_role("button", name="Download JSON").click()
    import json
    doc = json.loads(Path(info.value.path()).read_text())
    assert doc["epsilon"] == 1.0 and "answers" in doc and "workload_spec" in doc
    _shot(page, "release")
    assert not [p for p in page.problems if "favicon" not in p], page.problems
