"""Real-browser test of the "Audit" page (Playwright + Debian chromium, served app).

Reuses the server/browser/page fixtures of ``test_browser.py`` (skipped there
when chromium or playwright is missing).  Every wait is on the page's own
readiness (a control drawn, a result's text shown), with limits generous
enough for a loaded machine, never on a fixed pause.
"""

from __future__ import annotations

import pytest
from test_browser import _shot, browser, page, server, unexpected_problems  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.browser]  # drives headless chromium

#: Limit for an audit to finish in the browser (2,500 runs per dataset; a loaded CI machine).
AUDIT_TIMEOUT = 240_000


def _open_audit(pg):
    """Open the Audit tab and wait until its page is built and drawn (its Run button shows)."""
    pg.locator(".bk-tab", has_text="Audit").first.click()
    pg.get_by_role("button", name="Run audit").wait_for(state="visible", timeout=120_000)
    pg.locator("text=No audit yet").first.wait_for(state="visible", timeout=60_000)


def _problems(pg):
    return unexpected_problems(pg)


def test_audit_page_runs_an_audit_and_the_teaching_example(page):  # noqa: F811
    _open_audit(page)
    assert page.locator(".alert-danger:has-text('could not be built')").count() == 0
    # the default: Identity at ε = 1 on its standard pair -- no violation
    page.get_by_role("button", name="Run audit").click()
    page.locator("text=no violation found").first.wait_for(state="visible", timeout=AUDIT_TIMEOUT)
    summary = page.locator("text=/audited ε ≥ [0-9.]+/").first.inner_text()
    assert "claim" in summary and "ε = 1" in summary
    # the bound chart and the histograms are drawn
    page.locator(".bk-Canvas:visible").nth(1).wait_for(state="visible", timeout=60_000)
    _shot(page, "page-audit-identity")
    # one click: DAWA as its authors' code draws the partition -- refuted
    page.get_by_role("button", name="Teaching example: DAWA as published").click()
    page.locator("text=refuted at this confidence").first.wait_for(state="visible", timeout=AUDIT_TIMEOUT)
    text = page.locator("text=/audited ε ≥ [0-9.]+/").first.inner_text()
    assert "DAWA" in text and "ε = 4" in text and "claim ε = 1" in text and "VIOLATION" in text
    assert page.locator("text=NOT PRIVATE").count() >= 1
    # the buttons are enabled again once the audit is done
    page.get_by_role("button", name="Run audit").wait_for(state="visible", timeout=60_000)
    assert page.get_by_role("button", name="Run audit").is_enabled()
    _shot(page, "page-audit-dawa-as-published")
    assert not _problems(page), page.problems
