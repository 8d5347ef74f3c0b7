"""Cold first contact in a real browser: every page opened cold in a fresh session,
its controls changed once, odd files uploaded, odd links opened.  Where input is refused a
clear message must appear, the page must stay usable (a valid change afterwards works), and
the browser must log no console error or page error.

Reuses the server/browser fixtures of ``test_browser.py`` (skipped there when chromium or
playwright is missing).  Every step waits on what the page shows (its own readiness), never
on a fixed short time: the machine running the suite is shared and may be loaded.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from test_browser import (  # noqa: F401
    READY_MS,
    _record,
    _shot,
    browser,
    page,
    server,
    toast_text,
    unexpected_problems,
    wait_count,
)
from test_browser import fill_input as _fill
from test_browser import labelled_input as _input

import dpexplorer as dpx

expect = pytest.importorskip("playwright.sync_api").expect  # (skips without playwright)

# drives headless chromium; one module, one worker under pytest-xdist (``--dist loadgroup``
# or ``loadscope``): its tests share the module's served explorer
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.xdist_group("browser-first-contact")]


# ------------------------------------------------------------------ helpers
def _problems(pg, where: str) -> None:
    found = unexpected_problems(pg)
    assert not found, (where, found)


def _toast(pg, pattern: str) -> str:
    """Wait for a notification matching ``pattern`` (a regular expression); return its text."""
    try:
        return toast_text(pg, pattern, READY_MS)
    except AssertionError:
        _shot(pg, "first-contact-no-message")
        raise


def _tab(pg, title: str, ready) -> None:
    """Open the tab ``title`` and wait until ``ready`` (a locator of the page) is visible."""
    pg.locator(".bk-tab", has_text=title).first.click()
    ready.first.wait_for(state="visible", timeout=READY_MS)




def _refused_then_taken(pg, label: str, bad: str, message: str, good: str, shown: str) -> None:
    """Type ``bad`` in the box ``label`` (a message matching ``message`` must say why it is
    refused), then ``good``, which must be used (``shown`` appears): the page stays usable."""
    _fill(pg, label, bad)
    _toast(pg, message)
    # the box goes back to the value in use after the message; typing before that can be
    # overwritten by the reset (a CI run lost "1e-7" to it), so wait as a user would
    expect(_input(pg, label)).not_to_have_value(bad, timeout=READY_MS)
    _fill(pg, label, good)
    _text(pg, shown)


def _select(pg, label: str, option: str) -> None:
    pg.locator(".bk-input-group", has_text=label).locator("select").first.select_option(label=option)


def _text(pg, pattern: str):
    loc = pg.locator(f"text=/{pattern}/ >> visible=true").first
    loc.wait_for(timeout=READY_MS)
    return loc


def _card(pg, title: str, inside) -> None:
    """Expand the card ``title`` (a header still being drawn may miss the click: retried)."""
    # opening a card re-lays out the whole page: seconds of the browser's time on a loaded
    # machine, so the click may take long to be handled (READY_MS, not Playwright's 30 s)
    for _ in range(3):
        pg.locator(".card-header", has_text=title).first.click(timeout=READY_MS)
        try:
            inside.first.wait_for(state="visible", timeout=READY_MS // 4)
            return
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: click again
            continue
    inside.first.wait_for(state="visible", timeout=READY_MS)


def _click_until(pg, button, shown, retry_ms: int = READY_MS // 4) -> None:
    """Click ``button`` until ``shown`` appears (retried after ``retry_ms`` while the button
    is enabled: a click that lands while the page re-lays out after the previous step, e.g.
    the table redrawn, can hit nothing)."""
    for _ in range(3):
        button.click(timeout=READY_MS)
        try:
            shown.first.wait_for(state="visible", timeout=retry_ms)
            return
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: click again if enabled
            # evidence for the lost-click defect (below): did the click's frame leave the page?
            frames = list(getattr(pg, "ws_frames", ()))
            sent = [f for f in frames if f[1] == "->" and "button_click" in f[2]]
            print(f"no result {retry_ms / 1000:.0f} s after a click (button enabled: "
                  f"{button.is_enabled()}); button_click frames sent: {len(sent)}, the last at "
                  f"{sent[-1][0] if sent else None}; last frame at {frames[-1][0] if frames else None}")
            if not button.is_enabled():
                break
    shown.first.wait_for(state="visible", timeout=READY_MS)


def _upload(pg, accept: str, name: str, data: bytes, mime: str | None = None) -> None:
    """Upload ``data`` as the file ``name``, with the type a browser gives such a file."""
    mime = mime or ("text/csv" if name.endswith(".csv") else "application/octet-stream")
    pg.locator(f"input[type=file][accept^='{accept}']").last.set_input_files(
        files=[{"name": name, "mimeType": mime, "buffer": data}])


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def _open(pg, url: str) -> None:
    pg.goto(url, wait_until="load")
    # the page is ready when the sidebar says what ε buys on the workload
    _text(pg, "fall within ±[0-9,.]+ counts")


# ------------------------------------------------------------------ odd links and the sidebar
def test_odd_links_and_every_sidebar_control(page, server):  # noqa: F811
    _open(page, server + "?eps=-1&noise=Foo&data=nope&delta=2&n=abc")
    text = _toast(page, "This link's eps=-1")
    for words in ("ε must be a number above 0", "noise must be Laplace or Gaussian",
                  "no dataset of that name", "δ must be a number strictly between 0 and 1",
                  "kept its current value"):
        assert words in text, words
    assert "n must be a whole number" in _toast(page, "n='abc'")
    expect(_input(page, "ε (> 0)")).to_have_value("1")             # the defaults stay
    # a valid change works after the refused link
    _fill(page, "ε (> 0)", "0.5")
    _text(page, "at ε = 0.5")
    _fill(page, "ε (> 0)", "-1")
    assert "ε must be a number above 0" in _toast(page, "ε.*-1")
    expect(_input(page, "ε (> 0)")).to_have_value("0.5", timeout=READY_MS)  # the value in use
    page.get_by_role("button", name="Gaussian").first.click()
    _text(page, "Gaussian noise at ε = 0.5")
    _refused_then_taken(page, "δ (0 < δ < 1)", "2", "δ is a probability", "1e-7", "δ = 1e-07")
    _select(page, "Dataset", "superstore")
    _text(page, "Source:.*Tableau's Sample Superstore")
    _fill(page, "Simulation seed", "3")
    _select(page, "Budget of each dataset", "ρ (zCDP)")
    _fill(page, "Budget ρ", "0.5")
    _text(page, "Spent on superstore")
    folder = page.get_by_placeholder("folder holding the 1D/ and 2D/ .npy files")
    _card(page, "Settings", folder)
    folder.fill("/nonexistent-folder")
    folder.press("Enter")
    _toast(page, "DPBench folder")
    page.get_by_role("button", name="analytic (study)").first.click()
    page.get_by_role("button", name="Laplace").first.click()
    _text(page, "Laplace noise at ε = 0.5")
    _record(page, "first-contact-sidebar")
    # a valid link applies
    _open(page, server + "?eps=0.25&noise=Gaussian&data=airports_elevation")
    _text(page, "at ε = 0.25")
    _problems(page, "sidebar and links")


# ------------------------------------------------------------------ Workload and Compare
def test_workload_and_compare_controls(page):  # noqa: F811
    _tab(page, "Workload", page.get_by_role("button", name="Add term"))
    _refused_then_taken(page, "1D domain size n", "0", "at least 1 cell", "64", "64 cells")
    _select(page, "Query family", "Prefix (CDF)")
    page.get_by_role("button", name="Add term").click()
    _fill(page, "Weight (> 0)", "-2")
    # clicked at once: the typed weight is handled first (ui.event_order; Panel's own pool
    # once added the term with the old weight 1 and no message)
    page.get_by_role("button", name="Add term").click()
    _toast(page, "[Ww]eight")
    page.get_by_role("button", name="Use the dataset's size").click()
    _text(page, "over n = 256|256 cells")

    _tab(page, "Compare", page.locator(".tabulator-cell[tabulator-field='rmse']"))
    page.locator(".bk-btn", has_text="Worst query (max std)").first.click()
    _text(page, "best worst-query std")
    page.locator(".bk-btn", has_text="Total error (RMSE)").first.click()
    _select(page, "Mechanism", "Identity")     # the per-query chart's mechanism
    # every figure's download control: the numbers (CSV) and a picture (PNG)
    bars_export = page.locator(".figure-export:visible").first
    with page.expect_download(timeout=READY_MS) as info:
        bars_export.get_by_role("button", name="CSV").click()
    assert info.value.suggested_filename == "dpexplorer-compare-rmse-bars.csv"
    csv = Path(info.value.path()).read_text()
    assert csv.startswith('"element","element_group","element_label"') and "HB" in csv
    with page.expect_download(timeout=READY_MS) as info:
        bars_export.get_by_role("button", name="PNG").click()
    assert info.value.suggested_filename == "dpexplorer-compare-rmse-bars.png"
    assert Path(info.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # accuracy first: every target kind, a refused target, the simulation study
    page.locator(".bk-btn", has_text="ε for this error").first.click()
    _text(page, "the least is")
    page.locator(".bk-btn", has_text="RMSE per query").first.click()
    _text(page, "an RMSE of 50 counts per query")
    page.locator(".bk-btn", has_text="Std on every query").first.click()
    _text(page, "at most 50 counts on every query")
    _refused_then_taken(page, "Target error", "-5", "positive number of counts", "30",
                        "at most 30 counts on every query")
    page.locator(".bk-btn", has_text="± counts on 95 % of queries").first.click()
    _text(page, "±30 counts on 95 % of queries")
    _click_until(page, page.get_by_role("button",
                                        name="Estimate by simulation on airports_elevation"),
                 page.locator("text=/Simulat(ing|ed) [0-9]+/ >> visible=true"))
    # Cancel stops the study within one seeded run.  Clicked while it runs, without waiting
    # for a mechanism to finish: the study of the eight data-dependent mechanisms takes 20 s
    # alone and minutes beside other CPU-bound tests (one mechanism took 125 s).  The rows a
    # study fills, and a Cancel's effect on them, are checked without a browser in
    # tests/test_ui_accuracy.py.
    cancel = page.get_by_role("button", name="Cancel simulation")
    ended = page.locator("text=/Simulated [0-9]+ of [0-9]+ mechanisms on airports_elevation/"
                         " >> visible=true")
    for _ in range(3):  # a click landing while the table re-lays out can hit nothing
        cancel.or_(ended).first.wait_for(timeout=READY_MS)
        if ended.count():
            break
        try:
            cancel.click(timeout=10_000)
            ended.first.wait_for(timeout=READY_MS // 4)
            break
        except Exception:  # noqa: BLE001 - playwright's TimeoutError: the study ended or a lost click
            continue
    end = ended.first.inner_text(timeout=READY_MS)
    done = re.search("Simulated ([0-9]+) of ([0-9]+) mechanisms", end)
    # a cancel after the study ended (a fast machine) leaves every mechanism simulated
    assert "cancelled" in end or done.group(1) == done.group(2), end
    if int(done.group(1)) >= 1:                   # the finished mechanisms' rows stay
        _text(page, "simulation \\(seed 0, 20 trials\\) on airports_elevation")
    _record(page, "first-contact-compare")
    page.locator(".bk-btn", has_text="Error at this ε").first.click()
    page.locator(".tabulator-cell[tabulator-field='rmse']").first.wait_for(timeout=READY_MS)
    _problems(page, "workload and compare")


# ------------------------------------------------------------------ Strategy, Data, uploads
def test_strategy_data_and_odd_uploads(page):  # noqa: F811
    _tab(page, "Strategy", page.locator(".bk-input-group", has_text="Right strategy"))
    _select(page, "Right strategy", "Identity")
    _text(page, re.escape(dpx.registry.get("identity").description[:40]))  # its figures shown
    _tab(page, "Data & DAWA", page.get_by_role("button", name="Run DAWA"))
    # KNOWN OPEN DEFECT: now and then a click on Run DAWA starts nothing (server idle, "No
    # DAWA run yet", the button enabled; seen on the first and on the second click of this
    # test, never in scripted trials).  Clicked again after 20 s only if no run started (the
    # button is disabled while DAWA runs, which takes 2-5 s here): a run that never comes
    # still fails the test.
    _click_until(page, page.get_by_role("button", name="Run DAWA"),
                 page.locator("text=/Exact optimal partition/ >> visible=true"), retry_ms=20_000)
    csv_input = page.locator("input[type=file][accept^='text/csv,']")
    _card(page, "Upload data", csv_input.last.locator(".."))
    _upload(page, "text/csv,", "empty.csv", b"")
    _toast(page, "empty.csv.*empty")
    _upload(page, "text/csv,", "garbage.csv", bytes(range(256)) * 8)
    _toast(page, "garbage.csv")
    # a good CSV as Excel on Windows labels it is taken (it was refused as "invalid type")
    _upload(page, "text/csv,", "people.csv", b"age,income\n31,10\n45,20\n", "application/vnd.ms-excel")
    _text(page, "people.csv")
    expect(page.locator("text=/File is of invalid type/ >> visible=true")).to_have_count(0)
    _upload(page, "application/octet-stream", "negative.npy", _npy([3, -2, 5]))
    assert "must be >= 0" in _toast(page, "negative.npy")
    # a good file afterwards is taken and said to be the user's own
    _upload(page, "application/octet-stream", "mine.npy", _npy(np.arange(256) % 7))
    _text(page, "Source:.*your upload \\(mine.npy\\)")
    _click_until(page, page.get_by_role("button", name="Run DAWA"),  # the defect above
                 page.locator("text=/Dataset mine \\(n = 256 cells\\)/ >> visible=true"),
                 retry_ms=20_000)
    _record(page, "first-contact-data")
    _problems(page, "strategy, data and uploads")


# ------------------------------------------------------------------ Release, Sums, Learn
def test_release_sums_and_learn(page):  # noqa: F811
    _tab(page, "Release", page.get_by_role("button", name="Run release"))
    _fill(page, "Simulation trials", "0")
    page.get_by_role("button", name="Simulate only (no release)").click()
    _toast(page, "trials")
    page.get_by_role("button", name="Run release").click()
    page.locator("text=95 % high").first.wait_for(timeout=READY_MS)   # answers with intervals
    _text(page, "95 % intervals:")
    _fill(page, "Simulation trials", "5")
    page.get_by_role("button", name="Simulate only (no release)").click()
    _text(page, "Simulation: 5 trials")
    _select(page, "Mechanism", "Identity (identity)")
    page.get_by_role("button", name="Run release").click()
    _text(page, "with identity")
    # the Sum queries page: its result's summary, tables and charts
    _tab(page, "Sum queries", page.get_by_role("button", name="Run simulation"))
    assert page.locator(".alert-danger:has-text('could not be built')").count() == 0
    _text(page, "No simulation yet")
    page.get_by_role("button", name="Run simulation").click()
    _text(page, "τ chosen by SVT")  # only in a result's summary
    # the small/large table, the answers grid, both relative-error charts and the τ curve are drawn
    page.wait_for_selector(".tabulator-cell[tabulator-field='small median']", timeout=READY_MS)
    wait_count(page, ".bk-Canvas:visible", 4)
    wait_count(page, ".tabulator-cell[tabulator-field='small median']", 5)
    _record(page, "page-sum-queries")
    _tab(page, "Learn", page.locator(".bk-tab", has_text="2."))
    page.locator(".bk-tab", has_text="2.").first.click()
    page.locator(".figure-export:visible").first.wait_for(timeout=READY_MS)
    _record(page, "first-contact-release-learn")
    _problems(page, "release, sums and learn")


# ------------------------------------------------------------------ Audit
#: Limit for an audit to finish in the browser (2,500 runs per dataset; a loaded CI machine).
AUDIT_TIMEOUT = 240_000


def test_audit_page_runs_an_audit_and_the_teaching_example(page):  # noqa: F811
    _tab(page, "Audit", page.get_by_role("button", name="Run audit"))
    page.locator("text=No audit yet").first.wait_for(state="visible", timeout=READY_MS)
    assert page.locator(".alert-danger:has-text('could not be built')").count() == 0
    # the default: Identity at ε = 1 on its standard pair -- no violation
    page.get_by_role("button", name="Run audit").click()
    page.locator("text=no violation found").first.wait_for(state="visible", timeout=AUDIT_TIMEOUT)
    summary = page.locator("text=/audited ε ≥ [0-9.]+/").first.inner_text()
    assert "claim" in summary and "ε = 1" in summary
    # the bound chart and the histograms are drawn, each with its download control
    page.locator(".bk-Canvas:visible").nth(1).wait_for(state="visible", timeout=READY_MS)
    page.locator(".figure-export:visible").first.wait_for(timeout=READY_MS)
    _record(page, "page-audit-identity")
    # one click: DAWA as its authors' code draws the partition -- refuted
    page.get_by_role("button", name="Teaching example: DAWA as published").click()
    page.locator("text=refuted at this confidence").first.wait_for(state="visible",
                                                                   timeout=AUDIT_TIMEOUT)
    text = page.locator("text=/audited ε ≥ [0-9.]+/").first.inner_text()
    assert "DAWA" in text and "ε = 4" in text and "claim ε = 1" in text and "VIOLATION" in text
    assert page.locator("text=NOT PRIVATE").count() >= 1
    # the buttons are enabled again once the audit is done
    page.get_by_role("button", name="Run audit").wait_for(state="visible", timeout=READY_MS)
    assert page.get_by_role("button", name="Run audit").is_enabled()
    _record(page, "page-audit-dawa-as-published")
    _problems(page, "audit")
