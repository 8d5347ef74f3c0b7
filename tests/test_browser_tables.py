"""Real-browser test of record tables (issue 13): Workload card, Compare objective, table release.

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
    _open_card,
    _queries,
    _shot,
    _tab,
    _wait_queries,
    browser,
    page,
    server,
    unexpected_problems,
    wait_count,
)

pytestmark = pytest.mark.slow


def _remove_attributes(pg, names):
    """Unselect attributes of the table card's MultiChoice (choices.js remove buttons)."""
    for name in names:
        button = pg.locator(f"button[aria-label*=\"Remove item: '{name}'\"]").first
        button.click()
        pg.locator(f"button[aria-label*=\"Remove item: '{name}'\"]").wait_for(state="detached",
                                                                             timeout=10_000)


def _no_problems(pg, where):
    problems = unexpected_problems(pg)
    assert not problems, (where, problems)


def _build(pg, expected_queries):
    m0 = _queries(pg)
    pg.get_by_role("button", name="Build table marginals (replaces the terms)").click()
    assert _wait_queries(pg, m0, timeout=60) == expected_queries


def test_table_marginals_compare_objective_and_release(page):  # noqa: F811
    _tab(page, "Workload")
    build = page.get_by_role("button", name="Build table marginals (replaces the terms)")
    _open_card(page, "Record table", build)
    # the domain size is shown before anything is built: all 8 attributes of Superstore
    page.locator("text=/92,123,136 cells/").first.wait_for(timeout=30_000)
    _remove_attributes(page, ["Ship Mode", "Sub-Category", "State", "Sales", "Profit"])
    page.locator("text=/= 36 cells/").first.wait_for(timeout=30_000)
    orders = page.get_by_placeholder("k, e.g. 2 or 1-2").first
    orders.fill("1-2")
    orders.press("Enter")
    page.locator("text=/queries: 43/").first.wait_for(timeout=30_000)
    _build(page, 43)
    page.locator("text=/Over the record table/").first.wait_for(timeout=30_000)
    page.get_by_role("button", name="Gaussian").first.click()  # the sidebar's noise

    _tab(page, "Compare")
    page.wait_for_selector(".tabulator-cell[tabulator-field='rmse']", timeout=60_000)
    labels = page.locator(".tabulator-cell[tabulator-field='label']")
    deadline = time.monotonic() + 120
    wanted = {"ResidualPlanner", "OPT_M", "Eigen-Design", "Fourier", "DataCube", "HDMM"}
    while time.monotonic() < deadline and not wanted <= set(labels.all_inner_texts()):
        page.wait_for_timeout(200)
    assert wanted <= set(labels.all_inner_texts())
    assert page.locator("text=/optimise the total error/").count() >= 1
    page.get_by_role("button", name="Worst query (max std)").click()
    page.wait_for_selector(".tabulator-cell[tabulator-field='max_std']", timeout=120_000)
    page.locator("text=/best worst-query std.* ResidualPlanner/").first.wait_for(timeout=120_000)
    _shot(page, "compare-table-max-objective")
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
    page.locator("text=/92,123,136 cells/").first.wait_for(timeout=30_000)
    _build(page, 7078)
    _no_problems(page, "workload")

    _tab(page, "Release")
    run = page.get_by_role("button", name="Run release")
    t0 = time.perf_counter()
    run.click()
    page.locator("text=/table spent: ε = /").first.wait_for(timeout=120_000)
    seconds = time.perf_counter() - t0
    page.locator(".tabulator-col-title:visible", has_text="95 % high").first.wait_for(timeout=30_000)
    wait_count(page, ".bk-Canvas:visible", 1)
    _no_problems(page, "release")
    marginal = page.locator("select:visible").filter(has_text="Segment × Region").first
    marginal.select_option(label=next(o for o in marginal.locator("option").all_inner_texts()
                                      if "Segment × Region" in o))
    page.locator("text=/Segment × Region: 12 released cells, drawn as a heatmap/").first.wait_for(
        timeout=30_000)
    page.wait_for_timeout(1000)
    _shot(page, "release-table-heatmap")
    _no_problems(page, "heatmap")
    with page.expect_download(timeout=30_000) as info:
        page.get_by_role("button", name="Download table release (CSV)").click()
    text = Path(info.value.path()).read_text()
    assert "seed" not in text.lower() and "table_spent_after_release" in text
    assert "Segment=Consumer, Region=Central" in text
    with page.expect_download(timeout=30_000) as info:
        page.get_by_role("button", name="Download table release (JSON)").click()
    doc = json.loads(Path(info.value.path()).read_text())
    assert doc["mode"] == "release" and "seed" not in doc and len(doc["marginals"]) == 28
    assert sum(len(sum(m["labels"], [])) for m in doc["marginals"]) > 0
    print(f"Superstore all 2-way marginals (7,078 queries): click → released in {seconds:.2f} s")
    _no_problems(page, "downloads")
