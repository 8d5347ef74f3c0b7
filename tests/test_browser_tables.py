"""Real-browser test of record tables: Workload card, Compare objective, table release.

Reuses the server/browser/page fixtures of ``test_browser.py`` (skipped there
when chromium or playwright is missing).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from test_browser import (  # noqa: F401
    READY_MS,
    _open_card,
    _queries,
    _record,
    _shot,
    _tab,
    _wait_queries,
    browser,
    page,
    playwright_api,
    server,
    unexpected_problems,
    wait_count,
)

# drives headless chromium; one module, one worker under pytest-xdist (``--dist loadgroup``
# or ``loadscope``): its tests share the module's served explorer
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.xdist_group("browser-tables")]


def _remove_attributes(pg, names):
    """Unselect attributes of the table card's MultiChoice (choices.js remove buttons)."""
    for name in names:
        button = pg.locator(f"button[aria-label*=\"Remove item: '{name}'\"]").first
        button.click()
        pg.locator(f"button[aria-label*=\"Remove item: '{name}'\"]").wait_for(state="detached",
                                                                             timeout=READY_MS)


def _no_problems(pg, where):
    problems = unexpected_problems(pg)
    assert not problems, (where, problems)


def _build(pg, expected_queries):
    m0 = _queries(pg)
    pg.get_by_role("button", name="Build table marginals (replaces the terms)").click()
    assert _wait_queries(pg, m0) == expected_queries


def test_table_marginals_compare_objective_and_release(page):  # noqa: F811
    _tab(page, "Workload")
    build = page.get_by_role("button", name="Build table marginals (replaces the terms)")
    _open_card(page, "Record table", build)
    # the domain size is shown before anything is built: all 8 attributes of Superstore
    page.locator("text=/92,123,136 cells/").first.wait_for(timeout=READY_MS)
    _remove_attributes(page, ["Ship Mode", "Sub-Category", "State", "Sales", "Profit"])
    page.locator("text=/= 36 cells/").first.wait_for(timeout=READY_MS)
    orders = page.get_by_placeholder("k, e.g. 2 or 1-2").first
    orders.fill("1-2")
    orders.press("Enter")
    page.locator("text=/queries: 43/").first.wait_for(timeout=READY_MS)
    _build(page, 43)
    page.locator("text=/Over the record table/").first.wait_for(timeout=READY_MS)
    page.get_by_role("button", name="Gaussian").first.click()  # the sidebar's noise

    _tab(page, "Compare")
    page.wait_for_selector(".tabulator-cell[tabulator-field='rmse']", timeout=READY_MS)
    labels = page.locator(".tabulator-cell[tabulator-field='label']")
    deadline = time.monotonic() + READY_MS / 1000
    wanted = {"ResidualPlanner", "OPT_M", "Eigen-Design", "Fourier", "DataCube", "HDMM"}
    while time.monotonic() < deadline and not wanted <= set(labels.all_inner_texts()):
        page.wait_for_timeout(200)
    assert wanted <= set(labels.all_inner_texts())
    assert page.locator("text=/optimise the total error/").count() >= 1
    page.get_by_role("button", name="Worst query (max std)").click()
    page.wait_for_selector(".tabulator-cell[tabulator-field='max_std']", timeout=READY_MS)
    page.locator("text=/best worst-query std.* ResidualPlanner/").first.wait_for(timeout=READY_MS)
    _record(page, "compare-table-max-objective")
    _no_problems(page, "compare")

    # all 2-way marginals of the whole table: 28 marginals, 7,078 queries over 9.2e7 cells
    _tab(page, "Workload")
    _open_card(page, "Record table", build)
    box = page.locator(".choices__input--cloned").first
    for name in ["Ship Mode", "Sub-Category", "State", "Sales", "Profit"]:
        box.click()
        page.locator(".choices__item--choice", has_text=re.compile(f"^{re.escape(name)}$")).first.click()
    orders = page.get_by_placeholder("k, e.g. 2 or 1-2").first
    orders.fill("2")
    orders.press("Enter")
    page.locator("text=/92,123,136 cells/").first.wait_for(timeout=READY_MS)
    _build(page, 7078)
    _no_problems(page, "workload")

    _tab(page, "Release")
    run = page.get_by_role("button", name="Run release")
    t0 = time.perf_counter()
    run.click()
    page.locator("text=/table spent: ε = /").first.wait_for(timeout=READY_MS)
    seconds = time.perf_counter() - t0
    page.locator(".tabulator-col-title:visible", has_text="95 % high").first.wait_for(timeout=READY_MS)
    wait_count(page, ".bk-Canvas:visible", 1)
    _no_problems(page, "release")
    marginal = page.locator("select:visible").filter(has_text="Segment × Region").first
    marginal.select_option(label=next(o for o in marginal.locator("option").all_inner_texts()
                                      if "Segment × Region" in o))
    page.locator("text=/Segment × Region: 12 released cells, drawn as a heatmap/").first.wait_for(
        timeout=READY_MS)
    page.wait_for_timeout(1000)
    _record(page, "release-table-heatmap")
    _no_problems(page, "heatmap")
    with page.expect_download(timeout=READY_MS) as info:
        page.get_by_role("button", name="Download table release (CSV)").click()
    text = Path(info.value.path()).read_text()
    assert "seed" not in text.lower() and "table_spent_after_release" in text
    assert "Segment=Consumer, Region=Central" in text
    with page.expect_download(timeout=READY_MS) as info:
        page.get_by_role("button", name="Download table release (JSON)").click()
    doc = json.loads(Path(info.value.path()).read_text())
    assert doc["mode"] == "release" and "seed" not in doc and len(doc["marginals"]) == 28
    assert sum(len(sum(m["labels"], [])) for m in doc["marginals"]) > 0
    print(f"Superstore all 2-way marginals (7,078 queries): click → released in {seconds:.2f} s")
    _no_problems(page, "downloads")


def test_own_csv_release_is_refused_until_its_domain_is_discovered_with_a_visible_epsilon(
        page, tmp_path):  # noqa: F811
    """The Record table card on one's own CSV: the domain read from the records is refused by the
    Release page (in words); discovering it privately spends the ε shown from the table's ledger,
    and the release then lists both in the table's ledger (every entry, from the store)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 400
    frame = pd.DataFrame({"dept": rng.choice(["a", "b", "c"], n),
                          "salary": rng.uniform(2e4, 9e4, n).round(2)})
    frame.loc[0, "dept"] = "ceo-only-dept"  # one record's category: never shown after discovery
    csv = tmp_path / "staff.csv"
    frame.to_csv(csv, index=False)

    _tab(page, "Workload")
    build = page.get_by_role("button", name="Build table marginals (replaces the terms)")
    _open_card(page, "Record table", build)
    # the card's CSV upload (FilePond lists MIME types): the only one built so far (the Data
    # and Sum pages are built when first opened; the predicates' upload lists .npy's first)
    page.locator("input[type=file][accept^='text/csv,']").first.set_input_files(str(csv))
    page.locator("text=/Domain read from the records/").first.wait_for(timeout=READY_MS)
    orders = page.get_by_placeholder("k, e.g. 2 or 1-2").first
    orders.fill("1")
    orders.press("Enter")
    _build_any(page)
    page.locator("text=/Over the record table.{0,2}uploaded: staff\\.csv/").first.wait_for(timeout=READY_MS)
    page.get_by_role("button", name="Gaussian").first.click()  # the sidebar's noise

    _tab(page, "Release")
    page.locator("text=/domain was read from the records/").first.wait_for(timeout=READY_MS)
    page.get_by_role("button", name="Run release").click()
    page.locator(".alert-danger", has_text="read from the records").first.wait_for(timeout=READY_MS)
    page.locator("text=/nothing spent yet/").first.wait_for(timeout=READY_MS)  # the table's ledger
    _no_problems(page, "refused release")

    _tab(page, "Workload")
    _open_card(page, "Record table", build)
    epsilon = page.locator(".bk-input-group", has_text="Discovery ε").locator("input").first
    epsilon.fill("0.8")  # the ε the discovery spends, typed and shown
    epsilon.press("Enter")
    playwright_api.expect(epsilon).to_have_value("0.8", timeout=READY_MS)
    page.get_by_role("button", name=re.compile("Discover privately")).click()
    page.locator("text=/Domain discovered privately.* \\(ε = 0.8, δ = 1e-06, charged to the table/"
                 ).first.wait_for(timeout=READY_MS)
    _build_any(page)  # the workload over the discovered domain

    _tab(page, "Release")
    page.get_by_role("button", name="Run release").click()
    page.locator("text=/table spent: ε = /").first.wait_for(timeout=READY_MS)
    labels = page.locator(".tabulator-cell[tabulator-field='label']", has_text=re.compile(
        "domain discovery|residual_planner"))
    # the discovery's three entries are listed already: wait for the release's own entry
    deadline = time.monotonic() + READY_MS / 1000
    while time.monotonic() < deadline and not any(
            t.startswith("residual_planner") for t in labels.all_inner_texts()):
        page.wait_for_timeout(200)
    texts = labels.all_inner_texts()
    assert any(t.startswith("domain discovery of 2 attribute") for t in texts), texts
    assert any(t.startswith("residual_planner") for t in texts), texts
    assert page.locator("text=ceo-only-dept >> visible=true").count() == 0  # dropped: below the selection threshold
    _record(page, "release-own-table-ledger")
    _no_problems(page, "release after discovery")


def _build_any(pg):
    """Click Build and wait until the query count changes (or the table summary shows)."""
    m0 = _queries(pg)
    pg.get_by_role("button", name="Build table marginals (replaces the terms)").click()
    _wait_queries(pg, m0)
