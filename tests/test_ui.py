"""Tests of the Panel UI: the CompareView component (no browser) and the served app."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from dpexplorer.ui import CompareView, compare_view  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = ("https://cdn", "unpkg.com", "fonts.googleapis", "cdn.jsdelivr", "cdn.bokeh.org",
            "cdn.holoviz.org")


@pytest.fixture
def notified(monkeypatch):
    """Messages sent to the notification area (none exists outside a server session)."""
    messages: list[str] = []
    monkeypatch.setattr(compare_view, "notify_error", messages.append)
    return messages


def _caption(widget) -> str:
    return getattr(widget, compare_view._LABEL)


def _rmse(df: pd.DataFrame) -> pd.Series:
    return df.set_index("mechanism")["rmse"].sort_index()


# ------------------------------------------------------------- component
def test_table_equals_engine_compare():
    view = CompareView()
    view.epsilon = 0.5
    expected = dpx.compare(dpx.workloads.all_range(256), dpx.Laplace(0.5))
    assert view.error == ""
    got, want = _rmse(view.table), _rmse(expected)
    assert list(got.index) == list(want.index)
    np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-12, equal_nan=True)
    assert view.svd_bound == pytest.approx(expected.attrs["svd_bound"], rel=1e-12)
    assert set(compare_view.TABLE_COLUMNS) <= set(view.table.columns)


@pytest.mark.parametrize("workload", ["prefix", "width_range", "identity", "random_ranges"])
def test_other_workloads_match_engine(workload):
    view = CompareView(workload=workload, n=64, width=8, noise="Gaussian", epsilon=0.7)
    builders = {"prefix": lambda: dpx.workloads.prefix(64),
                "width_range": lambda: dpx.workloads.width_range(64, 8),
                "identity": lambda: dpx.workloads.identity(64),
                "random_ranges": lambda: dpx.workloads.random_ranges(64, 2000, "uniform", 0)}
    expected = dpx.compare(builders[workload](), dpx.Gaussian(0.7, 1e-6))
    assert view.error == ""
    np.testing.assert_allclose(_rmse(view.table).to_numpy(), _rmse(expected).to_numpy(),
                               rtol=1e-12, equal_nan=True)


def test_epsilon_halved_doubles_rmse_without_rebuilding():
    view = CompareView()
    assert view.epsilon == 1.0
    before = _rmse(view.table)
    bound = view.svd_bound
    entries = len(view.cache)
    assert entries > 0
    view.epsilon = 0.5
    after = _rmse(view.table)
    finite = before.notna()
    assert finite.sum() >= 2
    np.testing.assert_allclose(after[finite].to_numpy(), 2 * before[finite].to_numpy(), rtol=1e-12)
    assert view.svd_bound == pytest.approx(2 * bound, rel=1e-12)
    assert len(view.cache) == entries  # nothing rebuilt
    # δ/noise changes of the same norm also reuse the cache
    view.noise = "Gaussian"
    entries = len(view.cache)
    view.delta = 1e-9
    view.epsilon = 2.0
    assert len(view.cache) == entries


def test_invalid_width_keeps_last_table(notified):
    view = CompareView(workload="width_range", n=64, width=8)
    good = view.table
    assert view.set_inputs(width=100) is False
    assert view.table is good
    assert "width" in view.error and "64" in view.error
    assert notified == [view.error]
    # also when the parameter itself is set (valid for the param, rejected by the engine)
    view.width = 65
    assert view.table is good and "width" in view.error
    # fixing the input clears the error; the table matches the engine again
    assert view.set_inputs(width=16) is True
    assert view.error == ""
    np.testing.assert_allclose(
        _rmse(view.table).to_numpy(),
        _rmse(dpx.compare(dpx.workloads.width_range(64, 16), dpx.Laplace(1.0))).to_numpy(),
        rtol=1e-12, equal_nan=True)


@pytest.mark.parametrize("bad", [{"epsilon": 0}, {"epsilon": -1.0}, {"epsilon": None},
                                 {"epsilon": float("nan")}, {"delta": 0.0}, {"delta": 1.5},
                                 {"n": 1}, {"n": 5000}, {"workload": "nope"},
                                 {"noise": "Cauchy"}, {"bogus": 3}])
def test_invalid_inputs_keep_last_table(bad, notified):
    view = CompareView()  # Laplace: RMSE scales exactly as 1/ε
    good, inputs = view.table, {k: getattr(view, k) for k in compare_view._INPUTS}
    assert view.set_inputs(**bad) is False
    assert view.table is good
    assert view.error
    assert notified and notified[-1] == view.error
    assert {k: getattr(view, k) for k in compare_view._INPUTS} == inputs
    # the next valid input recovers
    assert view.set_inputs(epsilon=2.0) is True
    assert view.error == ""
    np.testing.assert_allclose(_rmse(view.table).to_numpy(), _rmse(good).to_numpy() / 2,
                               rtol=1e-12, equal_nan=True)


def test_invalid_input_at_construction_has_no_table(notified):
    view = CompareView(workload="width_range", n=16, width=32)
    assert view.table is None and "width" in view.error
    view.panel()  # still renders (empty chart and table)
    view.width = 4
    assert view.table is not None and view.error == ""


def test_failing_mechanism_is_reported_not_raised(monkeypatch, notified):
    view = CompareView(n=32)
    good = view.table

    def boom(*args, **kwargs):
        raise RuntimeError("mechanism exploded")
    monkeypatch.setattr(compare_view.dpx, "compare", boom)
    assert view.set_inputs(epsilon=3.0) is False
    assert view.table is good
    assert "mechanism exploded" in view.error


def test_layout_chart_and_widgets(notified):
    view = CompareView(n=64)
    layout = view.panel()
    root = layout.get_root()  # renders to Bokeh models without a server
    assert root is not None

    chart = view.chart()
    assert isinstance(chart, hv.Overlay)
    bars = [e for e in chart if isinstance(e, hv.Bars)]
    lines = [e for e in chart if isinstance(e, hv.HLine)]
    assert len(bars) == 1 and len(lines) == 1
    assert lines[0].data == pytest.approx(view.svd_bound)
    assert len(bars[0]) == view.table["rmse"].notna().sum()

    tabs = layout.select(pn.widgets.Tabulator)
    assert len(tabs) == 1
    assert list(tabs[0].value.columns) == compare_view.TABLE_COLUMNS
    alerts = layout.select(pn.pane.Alert)
    assert len(alerts) == 1 and not alerts[0].visible

    # typing in the sidebar goes through set_inputs: a bad ε keeps the last result
    eps = [w for w in layout.select(pn.widgets.FloatInput) if _caption(w).startswith("ε")][0]
    good = view.table
    eps.value = -1.0
    assert view.table is good and view.epsilon == 1.0 and view.error
    assert alerts[0].visible and "epsilon" in alerts[0].object
    eps.value = 0.5
    assert view.epsilon == 0.5 and view.error == "" and not alerts[0].visible
    np.testing.assert_allclose(tabs[0].value["rmse"].to_numpy(), view.table["rmse"].to_numpy())
    # and programmatic changes reach the widgets
    view.n = 128
    n_widget = [w for w in layout.select(pn.widgets.IntInput) if _caption(w).startswith("Domain")][0]
    assert n_widget.value == 128


def test_data_card_uses_bundled_histogram():
    card = CompareView().data_card()
    panes = card.select(pn.pane.HoloViews)
    assert panes and isinstance(panes[0].object, hv.Histogram)
    ds = dpx.datasets.load_bundled(dpx.datasets.DEFAULT_1D)
    np.testing.assert_array_equal(panes[0].object.dimension_values(1), ds.x)


def test_engine_does_not_import_ui():
    code = ("import sys, dpexplorer; "
            "bad = [m for m in ('dpexplorer.ui', 'panel', 'holoviews') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})


# ----------------------------------------------------------------- server
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _import_panel_models() -> None:
    """Register every Panel Bokeh model so a client can deserialize the document."""
    import importlib
    import pkgutil

    import panel.models
    for mod in pkgutil.iter_modules(panel.models.__path__):
        try:
            importlib.import_module(f"panel.models.{mod.name}")
        except Exception:  # noqa: BLE001 - optional extras (e.g. vtk, deckgl deps)
            pass


@pytest.mark.slow
def test_served_app_is_offline(tmp_path):
    requests = pytest.importorskip("requests")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/explorer"
    log = open(tmp_path / "panel.log", "w+")
    # BOKEH_RESOURCES=cdn on purpose: the app must still serve everything locally
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BOKEH_RESOURCES": "cdn"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "panel", "serve", "apps/explorer.py", "--port", str(port),
         "--address", "127.0.0.1", f"--allow-websocket-origin=127.0.0.1:{port}"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, resp = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                resp = requests.get(url, timeout=20)
                break
            except requests.ConnectionError:
                time.sleep(0.5)
        log.seek(0)
        assert resp is not None, f"server did not answer within 60 s:\n{log.read()}"
        assert resp.status_code == 200, log.read()
        html = resp.text
        assert "<title>dpexplorer</title>" in html
        for host in EXTERNAL:
            assert host not in html, f"{host} referenced in the page"

        # every script/stylesheet the page links is served by this server
        base = url.rsplit("/", 1)[0] + "/"
        links = set(re.findall(r'(?:src|href)="([^"]+)"', html))
        assert any("bokeh" in u and u.endswith(".js") or "bokeh.min.js" in u for u in links)
        for link in links:
            assert not link.startswith(("http://", "https://", "//")), link
            r = requests.get(base + link.lstrip("./"), timeout=20)
            assert r.status_code == 200, link
            if link.split("?")[0].endswith(".css"):
                for host in EXTERNAL:
                    assert host not in r.text, f"{host} in {link}"

        # the session document (sent over the websocket) links only local stylesheets
        from bokeh.client import pull_session
        from bokeh.util.token import get_session_id
        _import_panel_models()
        token = re.search(r'"token":"([^"]+)"', html).group(1)
        with pull_session(url=url, session_id=get_session_id(token)) as session:
            doc = session.document
            kinds = {type(m).__name__ for m in doc.models}
            sheets = [m.url for m in doc.models if type(m).__name__ == "ImportedStyleSheet"]
        assert {"DataTabulator", "VBar", "Span"} <= kinds  # table, bars, SVD-bound line
        assert sheets and all(not s.startswith(("http://", "https://")) for s in sheets), sheets
        assert "Traceback" not in html
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        log.close()
