"""Defects a new user met in a real browser, each driven as that user did.

* The Strategy page opened after Compare → ε = 2 → Gaussian: its left side (H2, built at
  once) must show its strategy, not "Building…" for good.
* The Workload page's Terms table: Add term, Add term, Clear all, quickly and 40 times, and
  the same in two sessions at once, must leave no browser page error ("reference pNNNN isn't
  known") and no traceback in the server's output.
* "abc" typed as ε must be refused in words, with what is allowed; the value in use stays.

The explorer is served by this module alone (its log is read for tracebacks, test by test);
the browser and page fixtures are those of ``test_browser.py`` (skipped there when chromium
or playwright is missing).  Every step waits on what the page shows, never on a fixed short
time: the machine running the suite is shared and may be loaded.
"""

from __future__ import annotations

import pytest
from conftest import ServerLog, reference_errors, start_server, stop_server
from test_browser import READY_MS, _shot, browser, page, toast_text, unexpected_problems  # noqa: F401
from test_browser import fill_input as _fill
from test_browser import labelled_input as _input

expect = pytest.importorskip("playwright.sync_api").expect  # (skips without playwright)

# drives headless chromium; one module, one worker under pytest-xdist (``--dist loadgroup``
# or ``loadscope``): its tests share the module's served explorer
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.xdist_group("browser-new-user")]

#: The served explorer's log, read by each test from its start on.
LOG: list[ServerLog] = []


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The explorer served for this module's tests only (``page`` of ``test_browser`` uses it)."""
    log_path = tmp_path_factory.mktemp("served") / "panel.log"
    proc, url, log = start_server(log_path)
    LOG[:] = [ServerLog(log_path)]
    yield url
    stop_server(proc, log)


@pytest.fixture
def server_log(server):
    """The server's log from this test's start on."""
    LOG[0].mark()
    return LOG[0]


def _tab(pg, title: str, ready) -> None:
    pg.locator(".bk-tab", has_text=title).first.click(timeout=READY_MS)
    ready.first.wait_for(state="visible", timeout=READY_MS)




def _toast(pg, pattern: str) -> str:
    return toast_text(pg, pattern, READY_MS // 4)


# ------------------------------------------------------------------ Strategy page
def test_strategy_page_opened_after_an_epsilon_and_noise_change_draws_both_sides(
        page, server_log):  # noqa: F811
    _tab(page, "Compare", page.locator(".tabulator-cell[tabulator-field='rmse']"))
    _fill(page, "ε (> 0)", "2")
    page.locator("text=/at ε = 2/ >> visible=true").first.wait_for(timeout=READY_MS)
    page.get_by_role("button", name="Gaussian").first.click(timeout=READY_MS)
    page.locator("text=/Gaussian noise at ε = 2/ >> visible=true").first.wait_for(timeout=READY_MS)
    figures = page.locator("text=/rows \\(queries measured\\)/ >> visible=true")
    _tab(page, "Strategy", page.locator(".bk-tab", has_text="Strategy"))
    # H2 (left) and HB (right) were built for this workload and noise by the Compare page: both
    # sides draw at once.  The left side once stayed on "Building…" for good (a build finished
    # while the page's widgets were being made, between reading its state and watching it).
    figures.first.wait_for(timeout=READY_MS)
    try:
        expect(figures).to_have_count(2, timeout=READY_MS // 4)
    except AssertionError:
        _shot(page, "strategy-building")
        raise
    expect(page.locator("text=Building… >> visible=true")).to_have_count(0, timeout=READY_MS // 4)
    assert not unexpected_problems(page), page.problems
    assert not server_log.tracebacks(), server_log.tracebacks()[0][:3000]


# ------------------------------------------------------------------ Workload page: Terms table
def _add_add_clear(pages, rounds: int) -> None:
    """Add term, Add term, Clear all in every page in turn, ``rounds`` times, as fast as the
    browser takes clicks (no wait for the server between them)."""
    buttons = []
    for pg in pages:
        _tab(pg, "Workload", pg.get_by_role("button", name="Add term"))
        buttons.append((pg.get_by_role("button", name="Add term"),
                        pg.get_by_role("button", name="Clear all")))
    for _ in range(rounds):
        for add, clear in buttons:
            add.click(timeout=READY_MS, no_wait_after=True)
            add.click(timeout=READY_MS, no_wait_after=True)
            clear.click(timeout=READY_MS, no_wait_after=True)


def _settled_terms_table(pg) -> None:
    """After the last Clear all the page says there is no term (the clicks were handled)."""
    pg.locator("text=/No terms:/ >> visible=true").first.wait_for(timeout=READY_MS)


def test_terms_table_survives_add_add_clear_forty_times(page, server_log):  # noqa: F811
    _add_add_clear([page], 40)
    _settled_terms_table(page)
    tracebacks = server_log.tracebacks()
    assert not reference_errors(page.problems), reference_errors(page.problems)
    assert not tracebacks, f"{len(tracebacks)} server tracebacks, the first:\n{tracebacks[0][:3000]}"
    assert not unexpected_problems(page), page.problems
    # the table is still in use: a term added now shows in it
    page.get_by_role("button", name="Add term").click(timeout=READY_MS)
    expect(page.locator(".tabulator-cell[tabulator-field='term']")).to_have_count(
        1, timeout=READY_MS)


def test_two_sessions_editing_their_workloads_at_once(browser, server, server_log):  # noqa: F811
    contexts = [browser.new_context(viewport={"width": 1500, "height": 1100}) for _ in range(2)]
    for ctx in contexts:
        ctx.set_default_timeout(READY_MS)
    try:
        pages = []
        for ctx in contexts:
            pg = ctx.new_page()
            pg.problems = []
            pg.on("pageerror", lambda e, pg=pg: pg.problems.append(f"pageerror: {e}"))
            pg.on("console", lambda m, pg=pg: m.type == "error" and pg.problems.append(
                f"console: {m.text}"))
            pg.goto(server, wait_until="load")
            pg.wait_for_selector("text=Compare", timeout=READY_MS)
            pages.append(pg)
        _add_add_clear(pages, 20)
        for pg in pages:
            _settled_terms_table(pg)
        tracebacks = server_log.tracebacks()
        for pg in pages:
            assert not reference_errors(pg.problems), reference_errors(pg.problems)
        assert not tracebacks, f"{len(tracebacks)} server tracebacks, the first:\n{tracebacks[0][:3000]}"
    finally:
        for ctx in contexts:
            ctx.close()


# ------------------------------------------------------------------ the sidebar's ε
def test_epsilon_that_is_not_a_number_is_refused_in_words(page, server_log):  # noqa: F811
    page.locator("text=/fall within ±[0-9,.]+ counts/ >> visible=true").first.wait_for(
        timeout=READY_MS)
    _fill(page, "ε (> 0)", "abc")
    text = _toast(page, "'abc' is not a number")
    assert "ε must be a number above 0" in text and "it stays 1" in text, text
    expect(_input(page, "ε (> 0)")).to_have_value("1", timeout=READY_MS)  # the value in use
    # the box is still usable: a number is taken
    _fill(page, "ε (> 0)", "0.5")
    page.locator("text=/at ε = 0.5/ >> visible=true").first.wait_for(timeout=READY_MS)
    # the same for a budget cap
    page.locator(".bk-input-group", has_text="Budget of each dataset").locator(
        "select").first.select_option(label="ρ (zCDP)")
    _fill(page, "Budget ρ", "1,5")
    assert "the budget ρ is a number above 0" in _toast(page, "'1,5' is not a number")
    assert not unexpected_problems(page), page.problems
    tracebacks = server_log.tracebacks()
    assert not tracebacks, f"{len(tracebacks)} server tracebacks, the first:\n{tracebacks[0][:5000]}"
