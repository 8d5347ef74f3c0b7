"""Real-browser test of the "Sum queries" page (Playwright + Debian chromium, served app).

Reuses the server/browser/page fixtures of ``test_browser.py`` (skipped there
when chromium or playwright is missing).
"""

from __future__ import annotations

import pytest
from test_browser import (  # noqa: F401
    READY_MS,
    _shot,
    _tab,
    browser,
    page,
    server,
    unexpected_problems,
    wait_count,
)

pytestmark = [pytest.mark.slow, pytest.mark.browser]  # drives headless chromium


def test_sum_queries_page_renders_and_simulates(page):  # noqa: F811
    _tab(page, "Sum queries")
    assert page.locator(".alert-danger:has-text('could not be built')").count() == 0
    page.wait_for_selector("text=No simulation yet", timeout=READY_MS)
    page.get_by_role("button", name="Run simulation").click()
    page.wait_for_selector("text=τ chosen by SVT", timeout=READY_MS)  # only in a result's summary
    # the small/large table, the answers grid, both relative-error charts and the τ curve are drawn
    page.wait_for_selector(".tabulator-cell[tabulator-field='small median']", timeout=READY_MS)
    wait_count(page, ".bk-Canvas:visible", 4)
    wait_count(page, ".tabulator-cell[tabulator-field='small median']", 5)
    _shot(page, "page-sum-queries")
    assert not unexpected_problems(page), page.problems
