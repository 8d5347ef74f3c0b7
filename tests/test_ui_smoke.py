"""Smoke tests of the explorer (no browser): every page builds, and the Compare table is the engine's.

The quick tier (``python -m pytest -m "not slow and not browser"``) runs these; the page-by-page
UI tests (``tests/test_ui_*.py``, each building pages and waiting for their background work) are
marked ``slow`` and run in the full suite.
"""

from __future__ import annotations

import numpy as np
import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")

from dpexplorer.ui.app import PAGES, ExplorerApp  # noqa: E402
from dpexplorer.ui.session import Session  # noqa: E402


@pytest.fixture(scope="module")
def app():
    """One explorer with every page built (and its background work done), shared by the tests
    that only read it; its pages are stopped at the end."""
    explorer = ExplorerApp(Session(workload=dpx.workloads.all_range(16), epsilon=0.5))
    for title, _, _ in PAGES:
        page = explorer.page_for(title)
        if title == "Compare":
            page.cancel()  # the optimisers (worker processes) stay pending: the full tier runs them
    for page in explorer.pages.values():
        wait = getattr(page, "wait", None)
        if callable(wait):
            assert wait(120), f"{type(page).__name__}: background work still running after 120 s"
    yield explorer
    for page in explorer.pages.values():
        stop = getattr(page, "stop", None)
        if callable(stop):
            stop()


def test_every_page_builds_and_renders(app):
    assert list(app.pages) == [title for title, _, _ in PAGES]
    assert app.session.error == ""
    for title, page in app.pages.items():
        layout = page.__panel__() if hasattr(page, "__panel__") else page
        assert layout.get_root() is not None, title
    assert app.template() is not None


def _rmse(table) -> dict[str, float]:
    """Mechanism -> RMSE of the rows of ``table`` that have one (optimisers not run have none)."""
    return {m: float(r) for m, r in zip(table["mechanism"], table["rmse"]) if np.isfinite(float(r))}


def test_the_compare_table_is_the_engines(app):
    page = app.pages["Compare"]
    assert page.error == "" and not page.busy
    got = _rmse(page.table)
    want = _rmse(dpx.compare(app.session.workload, dpx.Laplace(0.5)))
    assert {"identity", "hb"} <= set(got) <= set(want)
    for name, rmse in got.items():
        assert rmse == pytest.approx(want[name], rel=1e-12), name


def test_an_epsilon_change_reaches_the_compare_table(app):
    page = app.pages["Compare"]
    before = _rmse(page.table)
    app.session.epsilon = 0.25
    try:
        assert page.wait(120)
        after = _rmse(page.table)
        assert set(after) == set(before)
        for name, rmse in before.items():  # the matrix mechanism's error scales as 1/ε
            assert after[name] == pytest.approx(2 * rmse, rel=1e-12), name
    finally:
        app.session.epsilon = 0.5
        page.wait(120)


def test_a_served_explorers_log_counts_every_traceback_but_two_known_ones_not_ours():
    """What the browser tests count as a server defect (``conftest.server_tracebacks``): every
    traceback but Panel's teardown race and Tornado's write to a websocket the browser had
    closed (two chained tracebacks); a chain that ends in another error still counts."""
    from conftest import PANEL_TEARDOWN_RACE, server_tracebacks

    closed = ("Task exception was never retrieved\nTraceback (most recent call last):\n"
              '  File "tornado/websocket.py", line 1140, in wrapper\n    await fut\n'
              "tornado.iostream.StreamClosedError: Stream is closed\n\nDuring handling of the "
              "above exception, another exception occurred:\n\nTraceback (most recent call "
              'last):\n  File "tornado/websocket.py", line 1142, in wrapper\n'
              "    raise WebSocketClosedError()\ntornado.websocket.WebSocketClosedError\n")
    race = f"Traceback (most recent call last):\n  File x\nAttributeError: {PANEL_TEARDOWN_RACE}\n"
    ours = "Traceback (most recent call last):\n  File y\nValueError: could not convert\n"
    assert server_tracebacks(closed + race) == []
    assert server_tracebacks(closed + ours + race) == [ours]
    first_of_closed = closed[closed.index("Traceback"):closed.index("Traceback", 50)]
    assert len(server_tracebacks(first_of_closed + ours)) == 2  # closed, then an error of ours


def test_each_phases_report_is_kept_on_the_test_item():
    """The browser tests' ``page`` fixture screenshots a failed test's page by reading
    ``item.rep_call`` (``conftest.pytest_runtest_makereport``)."""
    import types

    from conftest import pytest_runtest_makereport

    item = types.SimpleNamespace()
    for when, failed in (("setup", False), ("call", True)):
        hook = pytest_runtest_makereport(item, None)
        next(hook)
        report = types.SimpleNamespace(when=when, failed=failed)
        with pytest.raises(StopIteration) as done:
            hook.send(report)
        assert done.value.value is report and getattr(item, f"rep_{when}") is report
    assert item.rep_call.failed and not item.rep_setup.failed
