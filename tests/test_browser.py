"""Real-browser tests: Playwright driving Debian's chromium against `panel serve apps/explorer.py`.

Screenshots go to ``test-artifacts/`` (not tracked).  Skipped when chromium or
playwright is missing; ``.ci/run`` installs both, so CI runs them.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import re
import time
from pathlib import Path

import pytest
from conftest import start_server  # noqa: F401  (also imported from here by other tests)
from conftest import stop_server as _stop_server

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
# the browser benchmark's page readers, shared with the tests (benchmarks/ is not a package)
_spec = importlib.util.spec_from_file_location("bench_browser",
                                               ROOT / "benchmarks" / "bench_browser.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
# the browser and its flags, the free-port helper and the wait limit: the benchmark's own
CHROMIUM, FLAGS, READY_MS = bench.CHROMIUM, bench.FLAGS, bench.READY_MS

playwright_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(f"chromium not found at {CHROMIUM}", allow_module_level=True)

# drives headless chromium; one module, one worker under pytest-xdist (``--dist loadgroup``
# or ``loadscope``): its tests share the module's served explorer
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.xdist_group("browser")]

# READY_MS: how long a step may wait for the page to show its result (ms).  Generous on
# purpose: the tests wait on what the page shows, never on a fixed short time, so a loaded
# CI machine is slower but stays green (a fixed 30 s wait once failed under load).


#: The module server's log file (for a failure's message)
SERVER_LOG: list[str] = []


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc, url, log = start_server(tmp_path_factory.mktemp("server") / "panel.log")
    SERVER_LOG[:] = [log.name]
    yield url
    _stop_server(proc, log)
    text = open(log.name).read()
    # Known Panel 1.9 / Bokeh 3 teardown race, not ours: a busy indicator updated from a
    # worker thread after the browser closed its session (its document's callbacks gone).
    # Tornado also logs a websocket closed while it was writing: only our tracebacks count.
    # (the session-ordered event pool runs Panel's handlers: its frame is not "ours")
    errors = [e for e in text.split("Traceback")[1:]
              if "'DocumentCallbackManager' object has no attribute '_change_callbacks'" not in e
              and "dpexplorer" in re.sub(r'File "[^"]*dpexplorer/ui/event_order\.py".*', "", e)]
    assert not errors, f"the server logged an error:\n{errors[0][:5000]}"


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


def unexpected_problems(pg) -> list[str]:
    """The page's browser errors, less the favicon's and the known Bokeh reference race.

    KNOWN OPEN DEFECT (intermittent): now and then -- after the CPS preset,
    or on the Workload page while its data histogram is redrawn -- the server sends a patch
    naming a model by reference that the browser never received ("reference pNNNN isn't
    known"); the page keeps working and the test's checks pass.  Reported, not hidden: the
    frames naming the model are printed (:func:`_explain_reference`), and every other browser
    error still fails the test.
    """
    known = [p for p in pg.problems if "isn't known" in p and p.startswith("pageerror:")]
    if known:
        print(f"known Bokeh reference race seen: {known}")
    return [p for p in pg.problems if "favicon" not in p and p not in known]


def _record_frames(pg, keep: int = 600) -> collections.deque:
    """Keep the last ``keep`` websocket text frames (time, direction, text) of the page."""
    frames: collections.deque = collections.deque(maxlen=keep)
    t0 = time.perf_counter()

    def watch(ws):
        for kind, arrow in (("framereceived", "<-"), ("framesent", "->")):
            ws.on(kind, lambda payload, arrow=arrow: isinstance(payload, str) and frames.append(
                (time.perf_counter() - t0, arrow, payload)))
    pg.on("websocket", watch)
    return frames


def _explain_reference(error: str, frames) -> None:
    """For Bokeh's "reference pNNN isn't known", print the recorded frames naming the model.

    The error is intermittent: the frames that defined, used and dropped the model
    show which update of the page sent a reference the browser no longer had.
    """
    found = re.search(r"reference (p\d+) isn't known", error)
    if not found:
        return
    ref = f'"{found.group(1)}"'
    named = [f for f in frames if ref in f[2]]
    print(f"\n--- {error}: {len(named)} of the last {len(frames)} websocket frames name it")
    for t, arrow, text in named[-12:]:
        at = text.find(ref)
        print(f"{t:8.2f} s {arrow} {text[:200]} ... {text[max(0, at - 300):at + 200]}")


@pytest.fixture
def page(browser, server, request):
    ctx = browser.new_context(viewport={"width": 1500, "height": 1100}, accept_downloads=True)
    # every implicit wait (a click, a locator's text) as generous as READY_MS, not Playwright's
    # 30 s: under load 13-15 on 2 cores a click and a text read each timed out at 30 s
    ctx.set_default_timeout(READY_MS)
    pg = ctx.new_page()
    pg.problems = []
    frames = pg.ws_frames = _record_frames(pg)  # (seconds, direction, text) of the last 600
    pg.on("console", lambda m: m.type == "error" and pg.problems.append(f"console: {m.text}"))
    pg.on("pageerror", lambda e: pg.problems.append(f"pageerror: {e}"))
    pg.on("pageerror", lambda e: _explain_reference(str(e), frames))
    pg.on("requestfailed", lambda r: pg.problems.append(f"requestfailed: {r.url}"))
    t0 = time.perf_counter()
    pg.goto(server, wait_until="load")
    pg.wait_for_selector("text=Compare", timeout=READY_MS)
    pg.load_seconds = time.perf_counter() - t0
    yield pg
    report = getattr(request.node, "rep_call", None)  # conftest.pytest_runtest_makereport
    if report is not None and report.failed:
        try:
            _shot(pg, f"failed-{re.sub(r'[^A-Za-z0-9_.-]+', '-', request.node.name)}")
        except Exception as exc:  # noqa: BLE001 - the test's own failure is what counts
            print(f"no screenshot of the failed page: {exc}")
    ctx.close()


def _shot(pg, name):
    """A full-page screenshot of ``pg`` in ``test-artifacts/name.png`` (a failure's evidence)."""
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True, timeout=120_000)


#: Screenshots of what a passing step showed are taken only with DPEXPLORER_TEST_SCREENSHOTS=1:
#: a full-page screenshot re-lays out and rasterises the whole page in Chromium, which shares the
#: suite's 2 cores.  A failing test's page is always kept (``page`` fixture), and so is the page
#: where a helper gives up waiting (:func:`_shot`).
RECORD_SHOTS = os.environ.get("DPEXPLORER_TEST_SCREENSHOTS") == "1"


def _record(pg, name):
    """Keep a screenshot of a passing step (``test-artifacts/name.png``) if :data:`RECORD_SHOTS`."""
    if RECORD_SHOTS:
        _shot(pg, name)


# ------------------------------------------------ reading and typing in the served page
def labelled_input(pg, label: str):
    """The first ``<input>`` of the served page's widget captioned ``label`` (Playwright locator)."""
    return pg.locator(".bk-input-group", has_text=label).locator("input").first


def fill_input(pg, label: str, value: str) -> None:
    """Type ``value`` in the widget captioned ``label`` and press Enter."""
    box = labelled_input(pg, label)
    box.fill(value)
    box.press("Enter")


# the text of the first notification whose text matches a regular expression, read in the
# page in one step: a notification lasts 8 s, and a wait-then-read in two Playwright calls
# lost one that vanished in between on a loaded CI machine (the read then waited 240 s)
_TOAST_TEXT_JS = """(pattern) => {
  const re = new RegExp(pattern);
  for (const el of document.querySelectorAll('.notyf__message')) {
    if (re.test(el.innerText)) return el.innerText;
  }
  return null;
}"""


def toast_text(pg, pattern: str, timeout_ms: float) -> str:
    """Wait up to ``timeout_ms`` for a notification of the served page matching ``pattern``
    (a JavaScript regular expression) and return its text; AssertionError, with the messages
    shown, if none comes."""
    try:
        return pg.wait_for_function(_TOAST_TEXT_JS, arg=pattern, timeout=timeout_ms).json_value()
    except Exception:  # noqa: BLE001 - playwright's TimeoutError: say what was shown
        raise AssertionError(f"no message matching {pattern!r}; messages shown: "
                             f"{pg.locator('.notyf__message').all_inner_texts()}") from None


def _open_card(pg, title, inside, tries=4):
    """Expand the card ``title`` until ``inside`` (a locator in it) is visible.

    A page is drawn the first time its tab opens, and a click on a header still being
    drawn can be lost, so the click is repeated until the content shows.
    """
    for _ in range(tries):
        pg.locator(".card-header", has_text=title).first.click()
        try:
            inside.wait_for(state="visible", timeout=10_000)
            return
        except playwright_api.TimeoutError:
            continue
    inside.wait_for(state="visible", timeout=READY_MS)


def wait_count(pg, selector: str, at_least: int) -> int:
    """How many ``selector`` elements the page shows, once at least ``at_least`` (else fails).

    Polled up to READY_MS: a figure drawn a moment after its text (a served page's first
    figures, a loaded CI machine) is waited for, not counted after a fixed pause.
    """
    deadline = time.monotonic() + READY_MS / 1000
    while True:
        count = pg.locator(selector).count()
        if count >= at_least or time.monotonic() > deadline:
            assert count >= at_least, f"{count} of {selector}, expected at least {at_least}"
            return count
        pg.wait_for_timeout(100)


#: What each page shows once it is built and drawn (a page is built the first time its tab
#: opens): ``_tab`` waits for it instead of a fixed pause.
PAGE_READY = {
    "Workload": lambda pg: pg.get_by_role("button", name="Add term"),
    "Compare": lambda pg: pg.locator(".tabulator-cell[tabulator-field='rmse']"),
    "Strategy": lambda pg: pg.locator(".bk-input-group", has_text="Right strategy"),
    "Data & DAWA": lambda pg: pg.get_by_role("button", name="Run DAWA"),
    "Release": lambda pg: pg.get_by_role("button", name="Run release"),
    "Audit": lambda pg: pg.get_by_role("button", name="Run audit"),
    "Sum queries": lambda pg: pg.get_by_role("button", name="Run simulation"),
    "Learn": lambda pg: pg.locator(".bk-tab", has_text="2."),
}


def _tab(pg, title):
    """Open the page ``title`` and wait until it shows its :data:`PAGE_READY` control."""
    pg.locator(".bk-tab", has_text=title).first.click(timeout=READY_MS)
    # or the page's "could not be built" alert: a page that failed fails its test at once
    failed = pg.locator(".alert-danger:has-text('could not be built')")
    PAGE_READY[title](pg).first.or_(failed).first.wait_for(state="visible", timeout=READY_MS)


def test_every_page_loads_without_console_errors(page):
    for title in ["Workload", "Compare", "Strategy", "Data & DAWA", "Release", "Learn"]:
        _tab(page, title)
        assert page.locator(".alert-danger:has-text('could not be built')").count() == 0, title
        _record(page, f"page-{title.replace(' & ', '-').lower()}")
    assert not unexpected_problems(page), page.problems
    print(f"page load: {page.load_seconds:.2f} s")


#: The Compare table's RMSE of the mechanism shown as ``label`` (NaN if absent or blank),
#: read row by row in one step (the rows reorder as optimisers land)
_rmse_of = bench.rmse_of


def _set_epsilon(pg, value: str, label: str, expected: float) -> float:
    """Type ε in the sidebar; seconds until ``label``'s RMSE in the Compare table is ``expected``.

    Follows one mechanism by name: optimisers still finishing may add rows
    (and reorder the table) meanwhile.
    """
    box = pg.locator("input").first  # the sidebar's ε input comes first
    t0 = time.perf_counter()
    box.fill(value)
    box.press("Enter")
    deadline = time.monotonic() + READY_MS / 1000  # generous: a loaded CI machine, optimisers still running
    while time.monotonic() < deadline:
        if _rmse_of(pg, label) == pytest.approx(expected, rel=1e-3):
            return time.perf_counter() - t0
        pg.wait_for_timeout(20)
    raise AssertionError(f"{label}'s RMSE is {_rmse_of(pg, label)} after ε = {value}, "
                         f"expected {expected}")


_PLOT_BACKENDS = """() => {
    const out = [];
    for (const doc of window.Bokeh.documents) {
        for (const m of doc._all_models.values()) {
            if (m.output_backend !== undefined) {
                out.push(m.output_backend);
            }
        }
    }
    return out;
}"""


def test_epsilon_change_updates_compare_table(page):
    _tab(page, "Compare")
    page.wait_for_selector(".tabulator-cell[tabulator-field='rmse']", timeout=READY_MS)
    first = bench.shown_rmse(page, "Identity")
    # the plots are drawn on a canvas: software WebGL (no GPU) stalled the page for seconds
    backends = page.evaluate(_PLOT_BACKENDS)
    assert backends and set(backends) == {"canvas"}, backends
    seconds = _set_epsilon(page, "0.5", "Identity", 2 * first)  # RMSE ∝ 1/ε
    halved = bench.shown_rmse(page, "Identity")  # the row, once drawn
    _record(page, "compare-eps-0.5")
    print(f"ε change → table: {seconds:.2f} s")
    # an invalid ε is refused with a notification and the table stays
    box = page.locator("input").first
    box.fill("-1")
    box.press("Enter")
    # every read over 1.5 s shows the kept value; a read may miss the row while an
    # optimiser's new row makes the browser redraw the table (seen once in CI, under load)
    seen, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < 1.5:
        seen.append(_rmse_of(page, "Identity"))
        page.wait_for_timeout(50)
    seen.append(bench.shown_rmse(page, "Identity"))
    shown = [v for v in seen if v == v]
    if len(shown) < len(seen):
        print(f"{len(seen) - len(shown)} of {len(seen)} reads lacked the Identity row; "
              f"now {bench._table_state(page)}")
    assert shown and all(v == pytest.approx(halved, rel=1e-6) for v in shown), (halved, seen)
    page.locator("text=was not used").first.wait_for(timeout=READY_MS)  # in words (Session.set_input)
    assert not unexpected_problems(page), page.problems


def _queries(pg) -> int:
    """The builder's "m = … queries" figure."""
    import re

    text = pg.locator("text=/m = [0-9,]+ queries/").first.inner_text()
    return int(re.search(r"m = ([0-9,]+) queries", text).group(1).replace(",", ""))


def _wait_queries(pg, old: int, timeout: float = READY_MS / 1000) -> int:
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
    selects = page.locator("select:visible")
    family = next(sel for sel in (selects.nth(i) for i in range(selects.count()))
                  if any("prefix" in o.lower() for o in sel.locator("option").all_inner_texts()))
    options = family.locator("option").all_inner_texts()
    family.select_option(label=next(o for o in options if "prefix" in o.lower()))
    page.get_by_role("button", name="Add term").click()
    m1 = _wait_queries(page, m0)
    assert m1 == m0 + 256  # Prefix over the 256 cells of the bundled histogram
    _record(page, "workload-added-prefix")
    assert not unexpected_problems(page), page.problems


def test_brush_a_range(page):
    _tab(page, "Workload")
    m0 = _queries(page)
    _brush(page, 0.35, 0.55)
    m1 = _wait_queries(page, m0)
    _record(page, "workload-brushed")
    assert m1 == m0 + 1  # one custom range added


def _download(pg, name: str):
    """Click the enabled download button ``name``: the browser's download, or a failure that
    shows the button's state, the page's problems and the server log's tail."""
    button = pg.get_by_role("button", name=name)
    playwright_api.expect(button).to_be_enabled(timeout=READY_MS)
    try:
        with pg.expect_download(timeout=READY_MS) as info:
            button.click()
        return info.value
    except playwright_api.TimeoutError:
        log = Path(SERVER_LOG[0]).read_text()[-4000:] if SERVER_LOG else "(no log)"
        raise AssertionError(
            f"no download from {name!r} in {READY_MS / 1000:.0f} s; button "
            f"{button.evaluate('b => b.outerHTML')[:400]}; page problems {pg.problems}; "
            f"server log tail:\n{log}") from None


def test_release_and_download(page):
    _tab(page, "Release")
    page.get_by_role("button", name="Run release").click()
    page.wait_for_selector("text=/Spent on .*: ε = 1 /", timeout=READY_MS)
    page.wait_for_selector("text=95 % high", timeout=READY_MS)  # the answers table with intervals
    # the summary and the download buttons change in one held update: once it shows the
    # release, the buttons are enabled and name the release's file
    page.wait_for_selector("text=/Released .* answers of/", timeout=READY_MS)
    text = Path(_download(page, "Download CSV").path()).read_text()
    assert "mechanism" in text and "answer" in text and "ci_low" in text
    assert "seed" not in text.lower() and "OS CSPRNG via opendp" in text
    import json
    doc = json.loads(Path(_download(page, "Download JSON").path()).read_text())
    assert doc["epsilon"] == 1.0 and "answers" in doc and "workload_spec" in doc
    assert "seed" not in doc and doc["mode"] == "release" and len(doc["ci_high"]) == len(doc["answers"])
    _record(page, "release")
    assert not unexpected_problems(page), page.problems


# ------------------------------------------------------- optimisers (HDMM, Eigen-Design)
def _wait_for_row(pg, label, timeout=READY_MS / 1000):
    """Seconds until the Compare table shows ``label`` with a number in its RMSE cell."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        rows = bench.table_column(pg, "rmse")
        if rows.get(label, "").replace(",", "").replace(".", "").strip().isdigit():
            return time.perf_counter() - t0
        pg.wait_for_timeout(200)
    raise AssertionError(f"no RMSE for {label} after {timeout} s: {rows}")


def test_optimisers_in_compare_strategy_and_a_large_preset(page):
    """One page load for the optimisers: optimiser rows, a convergence plot, the CPS preset."""
    t0 = time.perf_counter()
    _tab(page, "Compare")
    page.wait_for_selector(".tabulator-cell[tabulator-field='rmse']", timeout=READY_MS)
    seconds = _wait_for_row(page, "HDMM")
    ratio = bench.table_column(page, "ratio")
    assert {"OPT0", "HDMM", "OPT_M"} <= set(ratio), ratio
    assert float(ratio["HDMM"]) >= 1.0  # no strategy beats the SVD bound
    _record(page, "compare-optimisers")
    t1 = time.perf_counter()

    _tab(page, "Strategy")
    canvases = page.locator(".bk-Canvas:visible").count()
    # the strategy picker: the first select offering OPT0 (the page is built on first opening,
    # which takes more than _tab's pause on a loaded machine)
    page.locator("select:visible", has=page.locator("option", has_text="OPT0")).first.wait_for(
        timeout=60_000)
    selects = page.locator("select:visible")
    left = next(sel for sel in (selects.nth(i) for i in range(selects.count()))
                if "OPT0" in sel.locator("option").all_inner_texts())
    left.select_option(label="OPT0")
    page.wait_for_selector("text=objective (unit-noise TSE)", timeout=READY_MS)
    wait_count(page, ".bk-Canvas:visible", canvases + 1)  # the convergence plot
    _record(page, "strategy-convergence")
    t2 = time.perf_counter()

    _tab(page, "Workload")
    load = page.get_by_role("button", name="Load preset (replaces the terms)")
    _open_card(page, "Presets", load)
    m0 = _queries(page)
    t_click = time.perf_counter()
    load.click()
    assert _wait_queries(page, m0) == 618_120  # 51·101·8·5·3 over 280,000 cells
    try:  # no n × n preview at n = 280,000: the reason and the product structure instead
        page.locator("text=Structure instead").first.wait_for(timeout=READY_MS)
        t_structure = time.perf_counter() - t_click
        assert page.locator("text=/Too large to draw: W is 618,120 × 280,000/").count() >= 1
    finally:
        _record(page, "workload-cps-preset")
    _tab(page, "Compare")
    page.locator("text=/618,120 queries over n = 280,000 cells/").first.wait_for(timeout=READY_MS)
    _wait_for_row(page, "OPT_M")
    _record(page, "compare-cps")
    t3 = time.perf_counter()
    print(f"HDMM row after {seconds:.2f} s; compare {t1 - t0:.1f} s, strategy {t2 - t1:.1f} s, "
          f"CPS preset {t3 - t2:.1f} s (click → structure shown {t_structure:.1f} s)")
    assert not unexpected_problems(page), page.problems


def test_narrow_window_wraps_instead_of_squashing(browser, server):
    """Regression: at 800 px the Workload page's results were squashed beside its controls."""
    ctx = browser.new_context(viewport={"width": 800, "height": 900})
    try:
        pg = ctx.new_page()
        pg.goto(server, wait_until="load")
        pg.wait_for_selector("text=Terms (union)", timeout=READY_MS)
        table = pg.locator(".tabulator").first
        table.wait_for(timeout=READY_MS)
        box = table.bounding_box()
        assert box["width"] >= 400, box  # below the controls, at nearly the full width
        _record(pg, "workload-800px")
    finally:
        ctx.close()


def _cell_of(pg, label: str, field: str) -> str:
    return bench.table_column(pg, field).get(label, "").replace(",", "").strip()


def _wait_cell(pg, label, field, expected, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if float(_cell_of(pg, label, field)) == pytest.approx(expected, abs=1e-4):
                return
        except ValueError:
            pass
        pg.wait_for_timeout(100)
    # what the page showed, for a failure seen once in a loaded tier: the table's fields and rows,
    # and which of the Compare page's buttons were active
    fields = sorted(set(pg.locator(".tabulator-col[tabulator-field]").evaluate_all(
        "cols => cols.map(c => c.getAttribute('tabulator-field'))")))
    active = pg.locator(".bk-btn.bk-active").all_inner_texts()
    _shot(pg, f"wait-cell-{label}-{field}")
    raise AssertionError(f"{label}'s {field} is {_cell_of(pg, label, field)!r}, expected {expected}; "
                         f"the tables' fields {fields}, rows {sorted(bench.table_column(pg, 'label'))}, "
                         f"active buttons {active}")


def test_accuracy_first_switch_and_sidebar_sentence(page):
    """Compare → "ε for this error": HB's ε for ±50 (then ±20) counts on 95 % of queries."""
    import dpexplorer as dpx

    W = dpx.workloads.all_range(256)
    # the sidebar says what ε = 1 buys on the default workload
    page.locator("text=/fall within ±[0-9,]+ counts/").first.wait_for(timeout=READY_MS)
    _tab(page, "Compare")
    page.locator(".bk-btn", has_text="ε for this error").first.click()
    _wait_cell(page, "HB", "epsilon", dpx.epsilon_for(W, "hb", 50, "ci95").epsilon)
    box = page.locator(".bk-input-group", has_text="Target error").locator("input").first
    box.fill("20")
    box.press("Enter")
    _wait_cell(page, "HB", "epsilon", dpx.epsilon_for(W, "hb", 20, "ci95").epsilon)
    assert page.locator("text=/the least is/").count() >= 1
    _record(page, "compare-epsilon-for-error")
    page.locator(".bk-btn", has_text="Error at this ε").first.click()
    page.wait_for_selector(".tabulator-cell[tabulator-field='rmse']", timeout=READY_MS)
    assert not unexpected_problems(page), page.problems


# ------------------------------------- the stored ledger, shared by every session
def _open_tab(browser, url):
    """A fresh browser context (a second tab, a second session) on ``url``, page problems recorded."""
    ctx = browser.new_context(viewport={"width": 1500, "height": 1100})
    ctx.set_default_timeout(READY_MS)
    pg = ctx.new_page()
    pg.problems = []
    pg.on("console", lambda m: m.type == "error" and pg.problems.append(f"console: {m.text}"))
    pg.on("pageerror", lambda e: pg.problems.append(f"pageerror: {e}"))
    pg.goto(url, wait_until="load")
    pg.wait_for_selector("text=Compare", timeout=READY_MS)
    return ctx, pg


def _sidebar_input(pg, label: str):
    return pg.locator(".bk-input-group", has=pg.locator("label", has_text=re.compile(f"^{label}$"))
                      ).locator("input").first


# its own server: under ``--dist loadgroup`` it may run beside the module's other tests
@pytest.mark.xdist_group("browser-two-tabs")
def test_two_tabs_share_the_stored_ledger_and_its_budget(browser, tmp_path):
    """A release in one tab shows in another tab's Release page; the sidebar shows the budget in
    force (lowered by the first tab), and raising it is refused with the owner's way in Python.

    Its own server on a fresh store, so the ledger it reads holds only this test's release.
    """
    store = tmp_path / "ledgers.sqlite"
    proc, url, log = start_server(tmp_path / "panel.log", env={"DPEXPLORER_LEDGER": str(store)})
    contexts = []
    try:
        ctx, first = _open_tab(browser, url)
        contexts.append(ctx)
        budget = _sidebar_input(first, "Budget ε")
        playwright_api.expect(budget).to_have_value("5", timeout=READY_MS)  # nothing stored: the default
        budget.fill("4")  # lowering: applied to the store
        budget.press("Enter")
        first.locator("text=/nothing spent yet; left of ε = 4, δ = 1e-05/").first.wait_for(
            timeout=READY_MS)
        _tab(first, "Release")
        first.get_by_role("button", name="Run release").click()
        first.wait_for_selector("text=/Released .* answers of/", timeout=READY_MS)

        ctx, second = _open_tab(browser, url)  # a second tab: another session, the same store
        contexts.append(ctx)
        budget = _sidebar_input(second, "Budget ε")
        playwright_api.expect(budget).to_have_value("4", timeout=READY_MS)  # the budget in force
        budget.fill("6")  # raising: refused, the owner's act
        budget.press("Enter")
        second.locator(".notyf__message", has_text=re.compile(r"would raise the budget.*set_budget")
                       ).first.wait_for(timeout=READY_MS)
        playwright_api.expect(budget).to_have_value("4", timeout=READY_MS)
        _tab(second, "Release")
        card = second.locator(".card", has_text="Privacy ledger (the selected dataset, every session)")
        card.locator("text=/ε = 1 \\(pure ε-DP.* over 1 measurements; left of ε = 4, δ = 1e-05: "
                     "ε = 3 \\(adding up ε\\)/").first.wait_for(timeout=READY_MS)
        labels = card.locator(".tabulator-cell[tabulator-field='label']")
        playwright_api.expect(labels).to_have_count(1, timeout=READY_MS)
        assert labels.first.inner_text().startswith("hb")  # the first tab's HB release
        assert card.locator(".tabulator-cell[tabulator-field='mode']").first.inner_text() == "release"
        assert card.locator(".tabulator-cell[tabulator-field='time']").first.inner_text().startswith("20")
        _record(second, "release-second-tab-ledger")
        import dpexplorer as dpx

        led = dpx.PrivacyLedger.open(store, dpx.datasets.DEFAULT_1D)  # what the store holds
        assert led.budget == dpx.Budget.approx(4.0, 1e-5) and len(led) == 1 and led.epsilon == 1.0
        for pg in (first, second):
            assert not unexpected_problems(pg), pg.problems
    finally:
        for ctx in contexts:
            ctx.close()
        _stop_server(proc, log)
