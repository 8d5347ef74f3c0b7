"""Tests of the Panel UI (no browser): the Compare page, the app shell, the served app."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from panel.io.state import set_curdoc  # noqa: E402

from dpexplorer.ui import compare_redraws, compare_view, optimize_view, tasks  # noqa: E402
from dpexplorer.ui.compare_view import ComparePage  # noqa: E402
from dpexplorer.ui.serving import RedrawQueue  # noqa: E402
from dpexplorer.ui.session import Session  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = ("https://cdn", "unpkg.com", "fonts.googleapis", "cdn.jsdelivr", "cdn.bokeh.org",
            "cdn.holoviz.org")


# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


def test_engine_does_not_import_ui():
    code = ("import sys, dpexplorer; "
            "bad = [m for m in ('dpexplorer.ui', 'panel', 'holoviews') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})


# ------------------------------------------------------------ ComparePage
ENGINE_COLUMNS = ["mechanism", "label", "rmse", "kind", "ratio", "rows", "sensitivity",
                  "data_dependent", "description", "source", "note"]


def _same_as_engine(table: pd.DataFrame, W, noise, cache=None) -> None:
    want = dpx.compare(W, noise, cache=cache)
    assert list(table["mechanism"]) == list(want["mechanism"])
    for col in ENGINE_COLUMNS:
        got, exp = table[col].to_numpy(), want[col].to_numpy()
        if col in ("rmse", "ratio", "rows", "sensitivity"):
            np.testing.assert_allclose(got.astype(float), exp.astype(float), rtol=1e-12,
                                       equal_nan=True, err_msg=col)
        else:
            assert list(got) == list(exp), col
    assert table.attrs["svd_bound"] == pytest.approx(want.attrs["svd_bound"], rel=1e-12)
    assert table.attrs["noise"] == want.attrs["noise"]


def test_page_table_equals_engine_compare(compare_page):
    session, page = compare_page(dpx.workloads.all_range(128), epsilon=0.5)
    assert page.error == "" and session.error == "" and not page.busy
    _same_as_engine(page.table, session.workload, dpx.Laplace(0.5))
    # data-dependent mechanisms are listed with their note
    dd = page.table[page.table["data_dependent"]]
    assert len(dd) == len(dpx.registry.names(data_dependent=True, private=True))  # study variants not listed
    assert dd["rmse"].isna().all() and dd["note"].str.contains("data-dependent").all()
    assert page.svd_bound == pytest.approx(
        dpx.svd_bound(session.workload, dpx.Laplace(0.5)), rel=1e-12)
    assert set(compare_view.TABLE_COLUMNS) <= set(page.table.columns)


def test_page_gaussian_and_kronecker_workload(compare_page):
    W = dpx.workloads.kron([dpx.workloads.all_range(16), dpx.workloads.prefix(8)])
    session, page = compare_page(W, noise="Gaussian", epsilon=0.7, delta=1e-7)
    _same_as_engine(page.table, W, dpx.Gaussian(0.7, 1e-7, "zcdp"))
    # greedy_h is 1D only: not applicable, with the reason
    row = page.table.set_index("mechanism").loc["greedy_h"]
    assert np.isnan(row["rmse"]) and "1D" in row["note"]
    assert page.per_query is not None and "length" not in page.per_query  # not a range workload


def test_epsilon_halved_doubles_everything_without_rebuilding(compare_page):
    session, page = compare_page()  # All Range, n = 256, Laplace ε = 1
    page.panel().get_root()  # rendered: updates go through the live plots
    before, curve0, pq0 = page.table, page.curve, page.per_query
    bars = page._panes["bars"].pane.object
    layers0 = page.curve_plot().values()
    entries = len(session.cache)
    built = sum(e[0] is not None for e in session.cache._entries.values())
    assert entries > 0
    session.epsilon = 0.5
    assert not page.busy and page._jobs.pending == 0  # nothing ran in the background
    assert len(session.cache) == entries
    after = page.table
    b, a = before.set_index("mechanism")["rmse"], after.set_index("mechanism")["rmse"]
    finite = b.notna()
    assert finite.sum() >= 5
    np.testing.assert_allclose(a[finite].to_numpy(), 2 * b[finite].loc[a[finite].index].to_numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(after["ratio"].dropna(), before.set_index("mechanism").loc[
        after["mechanism"][after["ratio"].notna()], "ratio"], rtol=1e-12)
    assert page.svd_bound == pytest.approx(2 * before.attrs["svd_bound"], rel=1e-12)
    _same_as_engine(after, session.workload, dpx.Laplace(0.5), cache=session.cache)
    # (the engine's comparison also records Eigen-Design's "not under Laplace noise", which the
    # page says from the registry's scope check without an entry: no strategy is built)
    assert sum(e[0] is not None for e in session.cache._entries.values()) == built
    # the curve: its value at the session's ε doubles; on the fixed grid (Laplace) it is unchanged
    at = lambda c, e: c[c["epsilon"] == e].set_index("mechanism")["rmse"].sort_index()  # noqa: E731
    np.testing.assert_allclose(at(page.curve, 0.5).to_numpy(), 2 * at(curve0, 1.0).to_numpy(),
                               rtol=1e-12)
    np.testing.assert_allclose(at(page.curve, 0.01).to_numpy(), at(curve0, 0.01).to_numpy(),
                               rtol=1e-12)
    # per-query errors double too
    np.testing.assert_allclose(page.per_query["rmse"], 2 * pq0["rmse"], rtol=1e-12)
    # the plots were updated in place, not rebuilt
    assert page._panes["bars"].pane.object is bars
    # the privacy–accuracy curves are the same elements (HoloViews sends none of them again);
    # only the marker of the session's ε moved
    layers = page.curve_plot().values()
    curves = [e for e in layers if isinstance(e, hv.Curve)]
    assert len(curves) == len([e for e in layers0 if isinstance(e, hv.Curve)]) >= 5
    assert all(a is b for a, b in zip(curves, layers0, strict=False))
    marker = [e for e in layers if isinstance(e, hv.Scatter)][0]
    assert set(marker.dimension_values("epsilon")) == {0.5}
    # δ and ε under Gaussian noise: one more set of strategies (L2), then nothing
    session.noise = "Gaussian"
    assert page.wait(120)
    entries = len(session.cache)
    for delta, eps in [(1e-9, 0.3), (1e-3, 2.0)]:
        session.param.update(delta=delta, epsilon=eps)
        assert not page.busy
        _same_as_engine(page.table, session.workload, dpx.Gaussian(eps, delta, "zcdp"))
    assert len(session.cache) == entries


def test_the_progress_bar_takes_a_count_above_its_last_total(compare_page, caplog):
    # the count may pass the total first counted: an optimiser another session finished in
    # between is built now rather than later (a soak logged Panel's "Progress.value must be at
    # most 9, not 13"); the bar shows the share of the latest count and total
    session, page = compare_page()
    page.panel().get_root()
    bar = page._panes["root"].select(pn.indicators.Progress)[0]
    page._set(busy=True, progress=0, total=9)
    page._set(progress=13, total=20)
    assert bar.value == 65 and bar.max == 100
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    page._set(busy=False, progress=20)


def test_the_drawn_axes_follow_the_numbers(compare_page):
    """The live plots update in place, and each figure's ranges follow the new numbers.

    The charts give explicit limits and mark their layers ``framewise`` (not by options on
    the DynamicMap, which re-applied them to every frame): without the mark, the per-query
    figures kept their first ranges after an ε change.
    """
    from bokeh.models import Plot

    session, page = compare_page()  # All Range, n = 256, Laplace ε = 1
    root = page.panel().get_root()
    page.mechanism = "identity"
    assert page.wait(60)
    first = page.accuracy_first
    first.metric, first.mode = "rmse", "epsilon"
    assert page.wait(60)
    names = {"RMSE per query": "bars", "Privacy": "curve", "ε needed": "target bars",
             "Identity: per-query RMSE by range length": "by length",
             "Identity: per-query RMSE (": "by index"}

    def ranges():
        out = {}
        for fig in root.select({"type": Plot}):
            title = fig.title.text if fig.title is not None else ""
            for start, name in names.items():
                if title.startswith(start):
                    out[name] = (fig.x_range, fig.y_range.start, fig.y_range.end, fig.x_range.start)
                    break
        return out

    before = ranges()
    assert set(before) == set(names.values())
    session.epsilon = 0.005  # below the privacy–accuracy grid (0.01 … 10)
    assert page.wait(60)
    after = ranges()
    for name, (x_range, lo, hi, _) in before.items():
        assert after[name][0] is x_range  # the same figure, updated in place
        if name in ("bars", "by length", "by index"):  # every error × 200 (1/ε)
            assert after[name][1:3] == pytest.approx((200 * lo, 200 * hi), rel=1e-9), name
    # the privacy–accuracy chart's x axis reaches the new ε, its y axis the error there
    assert after["curve"][3] == pytest.approx(0.005 / 1.2) and after["curve"][2] > before["curve"][2]
    # the ε needed for a target: a target 10 × smaller needs 10 × the ε (Laplace: error ∝ 1/ε)
    first.target = first.target / 10
    assert page.wait(60)
    lo, hi = before["target bars"][1:3]
    assert ranges()["target bars"][1:3] == pytest.approx((10 * lo, 10 * hi), rel=1e-6)


def test_table_patch_changes_only_numbers_in_place():
    from dpexplorer.ui.compare_view import table_patch

    old = pd.DataFrame({"label": ["A", "B", "C"], "rmse": [1.0, np.nan, 3.0],
                        "rows": [4.0, 5.0, np.nan], "note": ["", "n/a", ""]})
    assert table_patch(old, old.copy()) == {}  # NaN equals NaN
    new = old.assign(rmse=[2.0, np.nan, 6.0])
    assert table_patch(old, new) == {"rmse": [(0, 2.0), (2, 6.0)]}
    assert table_patch(old, new.assign(rows=[4.0, 5.0, 7.0])) == {
        "rmse": [(0, 2.0), (2, 6.0)], "rows": [(2, 7.0)]}
    # anything but numbers, or other rows or columns: replaced whole
    assert table_patch(old, new.assign(note=["", "changed", ""])) is None
    assert table_patch(old, new.iloc[[1, 0, 2]]) is None
    assert table_patch(old, new.iloc[:2]) is None
    assert table_patch(old, new.drop(columns="rows")) is None
    assert table_patch(None, new) is None


def test_an_epsilon_change_patches_the_table_a_new_workload_replaces_it(compare_page):
    session, page = compare_page()  # All Range, n = 256, Laplace ε = 1
    page.panel().get_root()
    table = page._panes["table"]
    patches, replaced = [], []
    real_patch = table.patch
    table.patch = lambda value, **kw: (patches.append(value), real_patch(value, **kw))
    table.param.watch(lambda e: replaced.append(e.new is not e.old), "value")
    session.epsilon = 0.5
    assert page.wait(60)
    # only the RMSE cells went (the ratios to the SVD bound do not change with ε)
    assert len(patches) == 1 and set(patches[0]) == {"rmse"}
    assert table.value.equals(page._table_value())  # what the page shows is the table
    session.workload = dpx.workloads.prefix(64)
    assert page.wait(120)
    assert len(patches) == 1 and any(replaced)  # a new comparison: replaced whole
    assert table.value.equals(page._table_value())


def test_one_svd_bound_line_after_many_epsilon_changes(compare_page):
    """Regression: ε 1 → 0.5 → 2 → 0.25 → 1 left three dashed lines on the chart."""
    import holoviews as hv
    from bokeh.models import Span

    session, page = compare_page()
    page.panel().get_root()
    plot = hv.renderer("bokeh").get_plot(page._panes["bars"].pane.object)
    for eps in (0.5, 2.0, 0.25, 1.0):
        session.epsilon = eps
    spans = [r for r in plot.state.renderers if isinstance(r, Span)]
    assert len(spans) == 1
    assert spans[0].location == pytest.approx(page.svd_bound, rel=1e-12)
    texts = [t for t in plot.state.renderers if "Text" in type(getattr(t, "glyph", None)).__name__]
    assert len(texts) == 1


def test_background_threads_yield_the_processor():
    """Builds run at a lower CPU priority than the threads answering the browser."""
    import threading

    if not hasattr(os, "getpriority"):
        pytest.skip("no per-thread priority on this platform")
    main = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    worker = tasks.EXECUTOR.submit(
        lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result(60)
    assert worker >= min(main + tasks.BACKGROUND_NICE, 19)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == main  # only the workers


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_the_blas_helper_threads_yield_the_processor_too():
    """A background comparison's matrix products run partly on the BLAS libraries' own
    threads, started at numpy's import at the server's priority: the served app lowers them."""
    code = """
import os, threading
import numpy as np, scipy.linalg
a = np.random.default_rng(0).random((400, 400)); a @ a; scipy.linalg.blas.dgemm(1.0, a, a)
from dpexplorer.ui.tasks import BACKGROUND_NICE, lower_native_helper_threads
lowered = lower_native_helper_threads()
def nice(t):
    stat = open(f"/proc/self/task/{t}/stat").read()
    return int(stat[stat.rindex(")") + 2:].split()[16])
python = {t.native_id for t in threading.enumerate()}
others = [int(t) for t in os.listdir("/proc/self/task") if int(t) not in python]
print(len(lowered), min(nice(t) for t in others) if others else BACKGROUND_NICE,
      max(nice(t) for t in python), os.nice(0), BACKGROUND_NICE)
"""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=env, check=True).stdout.split()
    lowered, helpers, python, own, background = map(int, out)
    assert lowered >= 1  # numpy's OpenBLAS helper at least
    assert helpers >= background
    assert python == own  # the Python threads keep their priority
    assert "lower_native_helper_threads()" in (ROOT / "apps" / "explorer.py").read_text()


def test_compare_table_columns_share_the_width(compare_page):
    """Regression: the table's source and note columns were off-screen."""
    session, page = compare_page()
    table = compare_view.comparison_table(page._table_value())
    assert table.layout == "fit_columns"
    # no fixed shares: every column at least its header's width, the text ones taking more
    # of what is left (fit_columns fills the table's width and nothing goes past it)
    assert not table.widths
    config = {c["field"]: c for c in table._get_configuration(table._get_columns())["columns"]}
    assert set(page._table_value().columns) <= set(config)
    assert all(config[c]["widthGrow"] > 1 for c in ("source", "note", "description"))
    assert all(table.formatters[c] == {"type": "textarea"} for c in ("description", "source", "note"))


def test_curve_is_the_analytic_rmse_over_epsilon(compare_page):
    session, page = compare_page(dpx.workloads.prefix(64))
    curve = page.curve
    W, cache = session.workload, session.cache
    eps = compare_view.EPS_GRID
    assert set(eps) <= set(curve["epsilon"]) and 1.0 in set(curve["epsilon"])
    for e in (eps[0], eps[13], eps[-1]):
        want = dpx.compare(W, dpx.Laplace(e), cache=cache).dropna(subset=["rmse"])
        got = curve[curve["epsilon"] == e].set_index("mechanism")["rmse"]
        np.testing.assert_allclose(got.loc[want["mechanism"]].to_numpy(), want["rmse"].to_numpy(),
                                   rtol=1e-12)
        assert got["svd_bound"] == pytest.approx(dpx.svd_bound(W, dpx.Laplace(e)), rel=1e-12)
    # from the cached unit TSE: StrategyCache.entry(...)[1] times the variance per unit
    hb = curve[curve["mechanism"] == "hb"]
    unit = cache.entry(W, "hb", dpx.Laplace(1.0))[1]
    np.testing.assert_allclose(hb["rmse"], np.sqrt(2 / hb["epsilon"] ** 2 * unit / W.m), rtol=1e-12)
    # the chart: one curve per mechanism + the bound, log axes
    plot = page.curve_plot()
    assert isinstance(plot, hv.Overlay)
    assert len([e for e in plot if isinstance(e, hv.Curve)]) == curve["mechanism"].nunique()


@pytest.mark.parametrize("name", ["h2", "identity", "workload", "greedy_h"])
def test_per_query_rmse_equals_engine(compare_page, name):
    session, page = compare_page(dpx.workloads.all_range(64), epsilon=0.8)
    page.mechanism = name
    assert page.wait(60)
    W, noise = session.workload, dpx.Laplace(0.8)
    A = session.cache.entry(W, name, noise)[0]
    want = dpx.error.per_query_rmse(W, A, noise)
    df = page.per_query
    assert df.attrs["mechanism"] == name
    np.testing.assert_allclose(df["rmse"].to_numpy(), want, rtol=1e-12)
    np.testing.assert_array_equal(df["query"], np.arange(W.m))
    np.testing.assert_array_equal(df["length"], W.lengths())
    # cached per (W, mechanism, norm): a new ε rescales it without recomputing
    session.epsilon = 0.4
    assert page._jobs.pending == 0 and not page.per_query_busy
    np.testing.assert_allclose(page.per_query["rmse"].to_numpy(), 2 * want, rtol=1e-12)


def test_per_query_choice_not_applicable_or_unknown(compare_page):
    W = dpx.workloads.kron([dpx.workloads.prefix(8), dpx.workloads.prefix(8)])
    session, page = compare_page(W)
    page.mechanism = "greedy_h"  # 1D only
    page.wait(60)
    assert page.per_query is None and "does not apply" in page.per_query_note
    page.mechanism = "nope"
    assert page.per_query is None and "nope" in page.per_query_note
    page.mechanism = "identity"
    page.wait(60)
    assert page.per_query_note == "" and len(page.per_query) == W.m


@pytest.mark.parametrize("bad", [{"epsilon": float("inf")},
                                 {"workload": dpx.workloads.permuted(dpx.workloads.all_range(5000))},
                                 {"workload": dpx.workloads.kron([dpx.workloads.prefix(5000),
                                                                  dpx.workloads.prefix(2)])}])
def test_failing_input_keeps_last_table(compare_page, bad, reported):
    session, page = compare_page(dpx.workloads.prefix(32))
    good, curve, entries = page.table, page.curve, len(session.cache)
    session.param.update(**bad)
    page.wait(60)
    assert page.table is good and page.curve is curve
    assert session.error and page.error == session.error and reported[-1] == session.error
    assert len(session.cache) == entries  # nothing was built
    # a valid input recovers
    session.param.update(epsilon=2.0, workload=dpx.workloads.prefix(32))
    page.wait(60)
    assert page.error == ""
    _same_as_engine(page.table, session.workload, dpx.Laplace(2.0))


def test_failing_mechanism_is_reported_others_shown(compare_page, reported):
    def boom(W, noise):
        raise RuntimeError("mechanism exploded")
    mech = dpx.registry.Mechanism("boom_test", "Boom", boom, "always fails", "test")
    dpx.registry.register(mech)
    try:
        session, page = compare_page(dpx.workloads.prefix(32))
        row = page.table.set_index("mechanism").loc["boom_test"]
        assert np.isnan(row["rmse"]) and "mechanism exploded" in row["note"]
        assert "Boom" in session.error and "mechanism exploded" in session.error
        assert reported and "mechanism exploded" in reported[-1]
        others = page.table[page.table["mechanism"] != "boom_test"]
        want = dpx.compare(session.workload, dpx.Laplace(1.0),
                           mechanisms=[n for n in dpx.registry.names(private=True) if n != "boom_test"])
        np.testing.assert_allclose(others["rmse"], want["rmse"], rtol=1e-12, equal_nan=True)
    finally:
        del dpx.registry.REGISTRY["boom_test"]


def test_every_mechanism_failing_keeps_last_table(compare_page, monkeypatch, reported):
    session, page = compare_page(dpx.workloads.prefix(32))
    good = page.table

    def broken(*args, **kwargs):
        raise RuntimeError("engine down")
    monkeypatch.setattr(compare_view.dpx, "compare", broken)
    session.workload = dpx.workloads.prefix(16)
    page.wait(60)
    assert page.table is good
    assert "engine down" in session.error and "last result" in session.error


def test_a_result_landing_while_the_page_is_built_is_drawn(monkeypatch):
    """The comparison lands between the table widget's build and its watchers: caught up."""
    import threading
    release = threading.Event()

    def slow(W, noise):
        release.wait(30)
        return dpx.strategies.identity(W.domain)
    dpx.registry.register(dpx.registry.Mechanism("slow_land", "Slow", slow, "waits", "test"))
    build_table = compare_view.comparison_table
    page = None

    def table_while_the_result_lands(frame):
        widget = build_table(frame)  # from the state before the result
        release.set()
        assert page.wait(60) and page.table is not None  # landed: no watcher saw it
        return widget
    try:
        session = Session()
        session.workload = dpx.workloads.prefix(32)
        page = ComparePage(session)
        monkeypatch.setattr(compare_view, "comparison_table", table_while_the_result_lands)
        root = page.panel()
        table = page._panes["table"]
        assert any(t is table for t in root.select(pn.widgets.Tabulator))
        assert len(table.value) == len(page.table)
    finally:
        release.set()
        del dpx.registry.REGISTRY["slow_land"]


def test_comparison_runs_in_background_with_progress():
    release = __import__("threading").Event()

    def slow(W, noise):
        release.wait(30)
        return dpx.strategies.identity(W.domain)
    dpx.registry.register(dpx.registry.Mechanism("slow_test", "Slow", slow, "waits", "test"))
    try:
        session = Session()
        session.workload = dpx.workloads.prefix(32)
        t0 = time.perf_counter()
        page = ComparePage(session)
        page.panel()
        assert time.perf_counter() - t0 < 5  # returned while the slow strategy builds
        deadline = time.monotonic() + 30
        while page.progress < page.total - 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert page.busy and page.table is None and page.progress == page.total - 1
        assert "Slow" in page.status
        progress = page._panes["root"].select(pn.indicators.Progress)[0]
        assert progress.styles.get("visibility") != "hidden" and progress.max == 100
        assert progress.value == int(100 * page.progress / page.total) > 0
        # no table on the page before its first rows: Panel's Tabulator drops data that
        # reaches the browser while it initialises (the first comparison did, in chromium)
        table = page._panes["table"]
        placed = lambda: any(t is table for t in page._panes["root"].select(pn.widgets.Tabulator))  # noqa: E731
        assert not placed()
        session.epsilon = 0.5  # while building: no second job, the result uses the new ε
        release.set()
        assert page.wait(30)
        assert not page.busy and page.progress == page.total
        assert progress.styles.get("visibility") == "hidden"  # keeps its place, not re-laid out
        assert placed() and len(table.value) == len(page.table)
        _same_as_engine(page.table, session.workload, dpx.Laplace(0.5))
    finally:
        release.set()
        del dpx.registry.REGISTRY["slow_test"]


def test_page_layout_renders_and_updates(compare_page):
    session, page = compare_page(dpx.workloads.all_range(64))
    layout = page.panel()
    assert layout.get_root() is not None
    tabs = layout.select(pn.widgets.Tabulator)  # the comparison, and the ε-for-error table
    assert len(tabs) == 2 and page._panes["target_table"].table in tabs
    tabs = [page._panes["table"]]
    assert list(tabs[0].value.columns) == compare_view.TABLE_COLUMNS
    chart = page.bars()
    bars = [e for e in chart if isinstance(e, hv.Bars)]
    lines = [e for e in chart if isinstance(e, hv.HLine)]
    assert len(bars) == 1 and len(lines) == 1
    assert lines[0].data == pytest.approx(page.svd_bound)
    assert len(bars[0]) == page.table["rmse"].notna().sum()
    assert isinstance(page.per_query_plot(), hv.Scatter)
    assert isinstance(page.length_plot(), hv.Overlay)
    session.epsilon = 4.0
    np.testing.assert_allclose(tabs[0].value["rmse"].to_numpy(dtype=float),
                               page.table["rmse"].to_numpy(dtype=float))
    select = page._panes["select"]
    select.value = "identity"
    assert page.mechanism == "identity"
    page.wait(60)
    assert page.per_query.attrs["mechanism"] == "identity"
    old = page._panes["bars"].pane.object
    session.workload = dpx.workloads.prefix(64)
    page.wait(60)
    assert page._panes["bars"].pane.object is not old  # new workload: plot rebuilt
    assert page.table.attrs["workload"] == "prefix"


def test_many_queries_are_sampled_for_drawing(compare_page):
    session, page = compare_page(dpx.workloads.all_range(256))
    assert len(page.per_query) == 32896
    sample = page.per_query_sample()
    assert len(sample) <= page.max_points and sample.attrs["total"] == 32896
    assert "5,000 of 32,896" in page.per_query_plot().opts.get().kwargs["title"]


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
        assert re.search(r"<title>[^<]*dpexplorer[^<]*</title>", html)
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
            sheets = [m.url for m in doc.models if type(m).__name__ == "ImportedStyleSheet"]
        assert all(not s.startswith(("http://", "https://", "//")) for s in sheets), sheets
        assert "Traceback" not in html
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        log.close()


def test_failing_svd_bound_is_reported_and_page_not_busy(compare_page, monkeypatch, reported):
    # the worker's whole-comparison failure path (e.g. the SVD bound) reaches the user
    session, page = compare_page(dpx.workloads.prefix(32))
    good = page.table

    def broken(self, W):
        raise RuntimeError("bound exploded")
    monkeypatch.setattr(dpx.StrategyCache, "svdb", broken)
    # post UI updates later, as a server session does (next tick), not inside the job
    deferred = []
    monkeypatch.setattr(type(page._jobs), "_poster", lambda self, doc: deferred.append)
    session.workload = dpx.workloads.prefix(24)
    page.wait(60)
    for callback in deferred:
        callback()
    assert page.table is good
    assert "Comparison failed" in session.error and "bound exploded" in session.error
    assert not page.busy


# ------------------------------------------------------- optimisers (HDMM, Eigen-Design)
def _row(page, name):
    return page.table.set_index("mechanism").loc[name]


def test_optimizer_row_equals_engine_and_progress_moves(monkeypatch):
    from ui_fakes import FakeOptimizer, registered

    monkeypatch.setattr(optimize_view, "PROGRESS_INTERVAL", 0.0)  # post every report
    fake = FakeOptimizer(iters=4, restarts=3)
    with registered(monkeypatch, fake):
        session = Session()
        session.workload = dpx.workloads.prefix(32)
        page = ComparePage(session)
        page.panel()
        seen = []
        page.optimization.param.watch(
            lambda e: seen.append((page.optimization.stage, page.optimization.done,
                                   page.optimization.total)), "done")
        assert page.wait(120)
        W, noise = session.workload, dpx.Laplace(1.0)
        # the row is the engine's: same analytic RMSE, ratio to the SVD bound
        _same_as_engine(page.table, W, noise, cache=session.cache)
        row = _row(page, "fake_opt")
        A = session.cache.entry(W, "fake_opt", noise)[0]
        assert row["rmse"] == pytest.approx(dpx.rmse(W, A, noise), rel=1e-12)
        assert row["ratio"] == pytest.approx(row["rmse"] / dpx.svd_bound(W, noise), rel=1e-12)
        # the progress widget followed the optimiser's reports, in order, then hid
        assert [s for s in seen if s[0].startswith("fake")] == [
            (f"fake restart {r + 1}/3", r * 4 + i + 1, 12) for r in range(3) for i in range(4)]
        assert not page.optimization.active and not page.optimizing and page.pending == []
        # the chart has its bar, the SVD bound line stays
        chart = page.bars()
        bars = [e for e in chart if isinstance(e, hv.Bars)][0]
        assert "Fake OPT" in list(bars.dimension_values("label"))
        assert [e for e in chart if isinstance(e, hv.HLine)][0].data == pytest.approx(page.svd_bound)


def test_cps_all_marginals_rows_match_hdmm_table_6():
    from dpexplorer.ui.builder import WorkloadBuilder

    session = Session()
    WorkloadBuilder(session).load_preset("cps_all_marginals")
    page = ComparePage(session)
    assert page.wait(300)
    _same_as_engine(page.table, session.workload, dpx.Laplace(1.0), cache=session.cache)
    rmse = page.table.set_index("mechanism")["rmse"]
    # HDMM Table 6 (ε = 1, Laplace), CPS All Marginals
    for name, want in [("identity", 5.38), ("datacube", 18.49), ("opt_m", 4.84), ("hdmm", 4.84)]:
        if name in rmse.index:
            assert round(rmse[name], 2) == want, name
    assert round(page.svd_bound, 2) == 2.63
    # per-query errors of a strategy that needs a dense n × n Gram: said, not failed
    page.mechanism = "workload"
    page.wait(60)
    assert page.per_query is None and "280,000" in page.per_query_note
    page.panel().get_root()
    assert not page._panes["index_box"].visible


def test_optimizers_can_be_opt_in_then_run(monkeypatch):
    from ui_fakes import FakeOptimizer, registered

    fake = FakeOptimizer(iters=2, restarts=1)
    with registered(monkeypatch, fake):
        session = Session()
        session.workload = dpx.workloads.prefix(32)
        page = ComparePage(session, auto_optimize=False)
        page.panel()
        assert page.wait(120)
        assert fake.builds == 0 and "fake_opt" in page.pending
        row = _row(page, "fake_opt")
        assert np.isnan(row["rmse"]) and "not run yet" in row["note"]
        assert "Optimisers not run yet" in page._summary() and "Fake OPT" in page._summary()
        assert page._panes["run"].visible
        page.mechanism = "fake_opt"  # its per-query errors wait for it too
        assert page.per_query is None and "run the optimisers first" in page.per_query_note
        assert page.run_optimizers()
        assert page.wait(120)
        assert fake.builds == 1 and page.pending == [] and not page._panes["run"].visible
        _same_as_engine(page.table, session.workload, dpx.Laplace(1.0), cache=session.cache)
        page.wait(60)
        assert page.per_query is not None and page.per_query.attrs["mechanism"] == "fake_opt"
        # ticking "automatically" on a new workload builds them with the others
        page.auto_optimize = True
        session.workload = dpx.workloads.prefix(16)
        assert page.wait(120)
        assert fake.builds == 2 and not np.isnan(_row(page, "fake_opt")["rmse"])


def test_table_shows_before_a_slow_optimizer_which_can_be_cancelled(monkeypatch):
    import threading

    from ui_fakes import FakeOptimizer, registered, wait_for

    fake = FakeOptimizer(iters=3, restarts=2, gate=threading.Event())
    with registered(monkeypatch, fake):
        session = Session()
        session.workload = dpx.workloads.prefix(32)
        page = ComparePage(session)
        page.panel()
        assert wait_for(lambda: fake.started.is_set() and page.optimization.active, 60)
        # the other mechanisms are shown while the optimiser runs; the page is not busy
        assert page.table is not None and not page.busy and page.optimizing
        assert "optimising" in _row(page, "fake_opt")["note"]
        assert np.isfinite(_row(page, "hb")["rmse"])
        assert page._panes["optimizing"].visible
        session.epsilon = 0.5  # still responsive: rescaled at once
        assert page.table.attrs["noise"] == "Laplace(ε=0.5)"
        n = len(fake.reports)
        page.cancel()
        assert page.wait(60)
        assert len(fake.reports) <= n + 2  # the optimiser stopped at its next report
        row = _row(page, "fake_opt")
        assert np.isnan(row["rmse"]) and "cancelled" in row["note"]
        assert page.pending == ["fake_opt"] and not page.auto_optimize and not page.optimizing
        assert not page.optimization.active and page.error == ""
        assert len(session.cache) and ("fake_opt" not in {k[1] for k in session.cache._entries})
        # run it again, now quick
        fake.gate.set()
        assert page.run_optimizers() and page.wait(60)
        _same_as_engine(page.table, session.workload, dpx.Laplace(0.5), cache=session.cache)


@pytest.mark.usefixtures("fresh_strategies")  # the optimisers' rows come after the first table
def test_an_optimizer_out_of_scope_is_said_at_once_and_the_charts_keep_their_structure():
    """Eigen-Design under Laplace noise: its reason from the first table, never an optimiser slot.

    A slot that ended in "not applicable" took the mechanism off the charts when the
    optimisers finished: a new plot structure, both figures rebuilt, and the ε change
    made meanwhile waited for it (the ε → chart time of ``python benchmarks/bench_browser.py``).
    """
    session = Session()
    session.workload = dpx.workloads.prefix(32)
    page = ComparePage(session)
    seen = []
    page.param.watch(lambda e: seen.append(
        (page._plot_key(), _row(page, "eigen_design")["note"]) if e.new is not None else None),
        "table")
    page.panel()
    assert page.wait(120) and not page.optimizing
    seen = [s for s in seen if s is not None]
    assert len(seen) >= 2  # the first comparison, then the optimisers' rows
    reason = dpx.registry.get("eigen_design").not_applicable(session.workload, dpx.Laplace(1.0))
    assert "(ε,δ)" in reason
    assert all(note == reason for _, note in seen)  # never "optimising…"
    keys = {key for key, _ in seen}
    assert len(keys) == 1 and "eigen_design" not in next(iter(keys))[1]
    assert "opt0" in next(iter(keys))[1]
    assert "eigen_design" not in page.pending
    _same_as_engine(page.table, session.workload, dpx.Laplace(1.0), cache=session.cache)
    # under Gaussian noise it is an optimiser like the others, and its row is built
    session.noise = "Gaussian"
    assert page.wait(120) and not page.optimizing
    assert np.isfinite(_row(page, "eigen_design")["rmse"])


def test_workload_change_stops_a_running_optimizer(monkeypatch):
    import threading

    from ui_fakes import FakeOptimizer, registered, wait_for

    fake = FakeOptimizer(iters=2, restarts=1, gate=threading.Event())
    with registered(monkeypatch, fake):
        session = Session()
        first = dpx.workloads.prefix(32)
        session.workload = first
        page = ComparePage(session)
        assert wait_for(lambda: fake.started.is_set(), 60)
        session.workload = dpx.workloads.prefix(16)
        assert wait_for(lambda: fake.builds == 2, 60)  # the new workload's build started
        fake.gate.set()  # only the new build can finish: the first one was stopped
        assert page.wait(60)
        assert page.table.attrs["workload"] == "prefix" and page.table.attrs["n"] == 16
        assert not np.isnan(_row(page, "fake_opt")["rmse"]) and page.pending == []
        # the first workload's optimiser was stopped, not finished: back to it, it runs again
        builds = fake.builds
        session.workload = first
        assert page.wait(60)
        assert fake.builds == builds + 1 and not np.isnan(_row(page, "fake_opt")["rmse"])
        _same_as_engine(page.table, first, dpx.Laplace(1.0), cache=session.cache)


def test_optimizer_updates_posted_like_a_server(monkeypatch):
    # posts run later, in order, on the "event loop" (here: the test), as in a server session
    from ui_fakes import FakeOptimizer, registered

    fake = FakeOptimizer(iters=3, restarts=1)
    with registered(monkeypatch, fake):
        session = Session()
        session.workload = dpx.workloads.prefix(24)
        deferred = []
        monkeypatch.setattr(tasks.Jobs, "_poster", lambda self, doc: deferred.append)
        monkeypatch.setattr(optimize_view, "PROGRESS_INTERVAL", 0.0)
        page = ComparePage(session)
        page.panel()
        assert page.wait(60)
        assert page.table is None and page.busy  # nothing shown before the loop runs
        actives = []
        page.optimization.param.watch(lambda e: actives.append(e.new), "active")
        for callback in deferred:
            callback()
        assert actives and actives[-1] is False and not page.optimizing and not page.busy
        _same_as_engine(page.table, session.workload, dpx.Laplace(1.0), cache=session.cache)


def test_no_svd_bound_is_said(monkeypatch):
    wl = dpx.workloads
    W = wl.union([wl.kron([wl.prefix(100), wl.prefix(100)]),
                  wl.kron([wl.all_range(100), wl.identity(100)])])
    session = Session()
    session.workload = W
    page = ComparePage(session, auto_optimize=False)
    assert page.wait(120)
    assert np.isnan(page.svd_bound) and page.table["ratio"].isna().all()
    assert "SVD bound** not computable" in page._summary()
    assert "Identity" in page._summary()  # best mechanism still named
    page.panel().get_root()
    assert not [e for e in page.bars() if isinstance(e, hv.HLine)]


def test_failing_optimizer_is_reported_others_shown(compare_page, monkeypatch, reported):
    from ui_fakes import FakeOptimizer, registered

    class Diverging(FakeOptimizer):
        def __call__(self, W, noise):
            self.report("fake restart 1/1", 1, 10, 1.0)
            raise RuntimeError("optimiser diverged")

    fake = Diverging()
    with registered(monkeypatch, fake):
        session, page = compare_page(dpx.workloads.prefix(32))
        row = _row(page, "fake_opt")
        assert np.isnan(row["rmse"]) and "optimiser diverged" in row["note"]
        assert "Fake OPT" in session.error and "optimiser diverged" in session.error
        assert reported and "optimiser diverged" in reported[-1]
        assert not page.optimizing and not page.optimization.active and page.pending == []
        others = page.table[page.table["mechanism"] != "fake_opt"]
        want = dpx.compare(session.workload, dpx.Laplace(1.0), cache=session.cache,
                           mechanisms=[n for n in dpx.registry.names(private=True) if n != "fake_opt"])
        np.testing.assert_allclose(others["rmse"], want["rmse"], rtol=1e-12, equal_nan=True)


def test_a_closed_session_stops_its_optimizers(monkeypatch):
    import threading

    from ui_fakes import FakeOptimizer, registered, wait_for

    fake = FakeOptimizer(iters=2, restarts=1, gate=threading.Event())
    with registered(monkeypatch, fake):
        session = Session()
        session.workload = dpx.workloads.prefix(32)
        page = ComparePage(session)
        assert wait_for(lambda: fake.started.is_set(), 60)
        page.stop()  # what the server calls when the browser tab is closed
        assert page.wait(30)  # the optimiser stopped at its next report
        n = len(fake.reports)
        import time as _time
        _time.sleep(0.1)
        assert len(fake.reports) == n and fake.builds == 1
        assert "fake_opt" not in {k[1] for k in session.cache._entries}


# ------------------------------------------------------- big 1D structured workloads
def test_big_prefix_compares_structured_mechanisms_and_gives_reasons(reported):
    # Prefix over 16,384 cells (above the 4,096 of dense workloads): the mechanisms whose
    # strategies and errors need no n × n matrix are compared, with the SVD bound; the others
    # are rows with a reason in plain words, and nothing n × n is allocated
    import tracemalloc

    W = dpx.workloads.prefix(2**14)
    session = Session()
    session.workload = W
    tracemalloc.start()
    try:
        page = ComparePage(session)
        assert page.wait(300)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < W.n * W.n * 8 / 16  # far below one n × n matrix of doubles (2 GiB)
    assert page.error == "" and not reported and page.pending == []
    table = page.table.set_index("mechanism")
    noise = session.noise_model()
    structured = list(compare_view.structured_mechanisms())
    assert structured == ["identity", "h2", "hb", "wavelet", "greedy_h", "toeplitz_sqrt", "blt", "banded",
                          "tree_online", "kary_tree"]
    want = dpx.compare(W, noise, structured).set_index("mechanism")
    for name in structured:
        if dpx.registry.get(name).not_applicable(W, noise):  # BLT: Gaussian noise only
            assert "Gaussian" in table.loc[name, "note"], name
            continue
        assert np.isfinite(table.loc[name, "rmse"]), name
        assert table.loc[name, "rmse"] == pytest.approx(want.loc[name, "rmse"], rel=1e-12)
    assert page.svd_bound == pytest.approx(want.attrs["svd_bound"], rel=1e-12)
    assert np.isfinite(page.svd_bound) and page.svd_bound < table.loc["hb", "rmse"]
    others = [n for n in dpx.registry.names(data_dependent=False, private=True) if n not in structured]
    assert "opt0" in others and "workload" in others
    for name in others:
        note = table.loc[name, "note"]
        assert np.isnan(table.loc[name, "rmse"]) and "n × n matrix" in note and "4,096 cells" in note
        assert "Workload page" in note and "Error" not in note and "dpx" not in note, note
        assert compare_view.cached_entry(session.cache, W, name, noise) is None  # never built
    assert "minutes to hours" in table.loc["opt0", "note"]
    # the per-query errors of a structured mechanism; a reason for the others
    assert page.per_query is not None and len(page.per_query) == W.m
    page.mechanism = "opt0"
    page.wait(60)
    assert page.per_query is None and "n × n" in page.per_query_note
    assert compare_view.cached_entry(session.cache, W, "opt0", noise) is None


def test_big_workloads_refused_with_reasons(compare_page, reported):
    n = 5000  # above 4,096: only 1D ranges, prefixes, identity and total are compared
    session, page = compare_page(dpx.workloads.prefix(64))
    assert page.error == ""
    for W, words in [(dpx.matrix.Dense(np.ones((2, n))), "4,096 cells"),
                     (dpx.workloads.permuted(dpx.workloads.all_range(n), seed=1), "4,096 cells"),
                     (dpx.workloads.prefix(2**16 + 1), "65,536 cells")]:
        session.workload = W
        page.wait(60)
        assert "too large to compare" in page.error and words in page.error, page.error
        assert "Workload page" in page.error and page.table.attrs["n"] == 64  # last table kept
    # a union with Identity and Total is compared (no closed-form SVD bound: NaN)
    U = dpx.workloads.union([dpx.workloads.prefix(n), dpx.workloads.identity(n), dpx.workloads.total(n)])
    assert compare_view.structured_1d(U) and not compare_view.structured_1d(dpx.workloads.permuted(U))
    session.workload = U
    assert page.wait(300) and page.error == ""
    table = page.table.set_index("mechanism")
    assert np.isfinite(table.loc["greedy_h", "rmse"]) and np.isnan(table.loc["opt0", "rmse"])
    assert np.isnan(page.svd_bound)  # no structured spectrum, and no dense n × n one above 4,096
    # Privelet's fast formula needs a power-of-two domain
    assert "power of two" in table.loc["wavelet", "note"] and "4,096 or 8,192" in table.loc["wavelet", "note"]
    assert compare_view.too_large(dpx.workloads.prefix(8192), "wavelet") is None
    assert compare_view.too_large(dpx.workloads.prefix(4096), "opt0") is None


def test_redraws_in_a_server_session_run_one_per_turn_on_the_event_loop(compare_page, monkeypatch):
    # in a served session, redraws requested meanwhile run one per event-loop callback, in
    # the order asked (a page drawing its first figures lets another page's redraw in
    # between); in each, the document's model index is frozen once, by the first call that
    # asks (a HoloViews redraw: redraws.freeze_models), and not at all when none asks
    # (ComparePage._redraw, redraws.models_batch); a key asked twice runs once
    from ui_fakes import served_document

    from dpexplorer.ui.serving import freeze_models

    def asks(label):  # a redraw that needs the index frozen (twice: frozen once)
        def redraw():
            freeze_models()
            ran.append(label)
            freeze_models()
        return redraw

    _session, page = compare_page()
    doc, context = served_document()
    scheduled, ran, frozen = [], [], []
    monkeypatch.setattr(pn.state, "execute", lambda fn, schedule="auto": scheduled.append(fn))
    # a queue of this test's own (the server-wide one would keep this fake loop's redraws)
    monkeypatch.setattr(compare_redraws, "REDRAWS", RedrawQueue(check_seconds=None))
    real_freeze = doc.models.freeze

    def run_loop():  # play the event loop: run what is scheduled, and what that schedules
        while scheduled:
            scheduled.pop(0)()

    @contextlib.contextmanager
    def freeze():
        frozen.append(len(ran))
        with real_freeze():
            yield
    monkeypatch.setattr(doc.models, "freeze", freeze)
    with set_curdoc(doc):
        page._redraw("results", lambda: ran.append("results 1"))
        page._redraw("per_query", lambda: ran.append("per_query"))
        page._redraw("results", asks("results 2"))  # replaces the first
    assert ran == [] and len(scheduled) == 1  # nothing drawn yet: one callback on the loop
    scheduled.pop(0)()
    assert ran == ["per_query"] and frozen == [] and len(scheduled) == 1  # then the next turn
    scheduled.pop(0)()
    assert ran == ["per_query", "results 2"] and frozen == [1] and not scheduled  # frozen once
    with set_curdoc(doc):
        page._redraw("results", asks("results 3"))
    assert len(scheduled) == 1  # the queue was emptied: a new callback
    run_loop()
    assert ran[-1] == "results 3" and frozen == [1, 2]
    with set_curdoc(doc):
        page._redraw("results", lambda: ran.append("numbers only"))
    run_loop()
    assert ran[-1] == "numbers only" and frozen == [1, 2]  # nothing asked: not frozen
    freeze_models()  # outside a batch: nothing to freeze
    assert frozen == [1, 2]
    # hidden: kept by the gate until shown, then queued
    page.gate.show(False)
    with set_curdoc(doc):
        page._redraw("results", lambda: ran.append("results 4"))
        assert not scheduled
        page.gate.show(True)
    assert len(scheduled) == 1
    run_loop()
    assert ran[-1] == "results 4" and len(ran) == 5


def test_only_the_users_own_changes_are_urgent_redraws(monkeypatch):
    """A user's ε change is redrawn before the other pages' redraws; an optimiser's row landing
    is a background result and waits its turn (with eight sessions optimising, their landings
    went before another user's ε change)."""
    from ui_fakes import served_document

    doc, _context = served_document()
    submitted, scheduled = [], []
    monkeypatch.setattr(pn.state, "execute", lambda fn, schedule="auto": scheduled.append(fn))

    class Queue(RedrawQueue):
        def submit(self, owner, doc, run, urgent=False):
            submitted.append(urgent)

    monkeypatch.setattr(compare_redraws, "REDRAWS", Queue(check_seconds=None))
    monkeypatch.setattr(doc, "add_timeout_callback", lambda fn, ms: None)  # first figures
    monkeypatch.setattr(ComparePage, "load_wait", 0.0)  # no browser here to say it loaded
    session = Session(epsilon=1.0)
    session.workload = dpx.workloads.all_range(32)
    with set_curdoc(doc):
        page = ComparePage(session, auto_optimize=False)
        page.gate.show(True)
    page.panel()
    deadline = time.monotonic() + 120
    while page._shown is None:  # play the event loop until the comparison is shown
        assert time.monotonic() < deadline, "the comparison was not shown"
        with set_curdoc(doc):
            while scheduled:
                scheduled.pop(0)()
        time.sleep(0.02)
    key = page._shown
    with set_curdoc(doc):
        submitted.clear()
        session.epsilon = 0.5  # the user's own change
        assert submitted and all(submitted)
        submitted.clear()
        page._merge(page._token, key, page._bases[key], None, final=True)  # an optimiser landed
        assert submitted and not any(submitted)
        submitted.clear()
        page.update()  # called for a change of the session: the user's
        assert submitted and all(submitted)


def test_statuses_waiting_for_the_event_loop_are_replaced_not_queued(compare_page):
    """A quick series of strategies posts one status each: while the loop is busy (many
    sessions) only the latest waits, and it is what the page shows."""
    _session, page = compare_page()
    posted, key = [], ("a comparison being built",)
    page._pending = key
    for i in range(3):
        page._post_status(posted.append, page._token, key, progress=i, status=f"building {i}")
    assert len(posted) == 1  # one callback for the loop
    posted[0]()
    assert page.status == "building 2" and page.progress == 2
    page._post_status(posted.append, page._token, key, progress=3, status="building 3")
    assert len(posted) == 2  # the first one ran: a new callback
    page._post_status(posted.append, page._token + 1, key, progress=4, status="superseded")
    posted[1]()
    assert page.status == "building 2"  # the latest values were a superseded comparison's


def test_a_closed_sessions_compare_page_stops_and_leaves_the_redraw_queue(monkeypatch):
    """A browser tab closed: its optimisers stop, and its redraw handed to the loop (which
    Bokeh drops with the session) no longer holds the other sessions' redraws."""
    from ui_fakes import served_document

    doc, context = served_document()
    scheduled = []
    monkeypatch.setattr(pn.state, "execute", lambda fn, schedule="auto": scheduled.append(fn))
    handed = []  # what the queue hands to the loop
    queue = RedrawQueue(schedule=lambda d, fn: handed.append(fn), check_seconds=None)
    monkeypatch.setattr(compare_redraws, "REDRAWS", queue)
    session = Session()
    session.workload = dpx.workloads.all_range(32)
    with set_curdoc(doc):
        page = ComparePage(session)
        page.gate.show(True)
        page._redraw("results", lambda: None)  # handed to the loop, never run
    assert len(handed) == 1
    other, served = [], served_document()  # (the document holds its context weakly)
    other_doc = served[0]
    queue.submit("another session", other_doc, lambda: other.append(1))
    assert queue.pending() == 1  # waits for the closed page's redraw
    hooks = list(doc.session_destroyed_callbacks)
    assert hooks, "the page did not register for its session's end"
    for hook in hooks:
        hook(context)
    assert page._cancel and queue.pending() == 0  # stopped; the other session's redraw goes
    assert len(handed) == 2
    handed[-1]()
    assert other == [1]


def test_a_closed_tab_stops_its_page_before_bokeh_ends_the_session(monkeypatch):
    """Bokeh ends a session 15-32 s after its tab closed; the page stops as soon as its
    browser, once connected, has no connection left: its optimisers stop at their next
    report and its redraws are dropped.  Before the browser has connected, none is normal."""
    import types

    import bokeh.server.contexts
    import bokeh.server.session
    from ui_fakes import served_document

    from dpexplorer.ui.serving import no_connection

    # what no_connection reads is Bokeh's public API
    assert isinstance(bokeh.server.contexts.BokehSessionContext.session, property)
    for name in ("connection_count", "destroyed"):
        assert isinstance(getattr(bokeh.server.session.ServerSession, name), property)
    doc, context = served_document()
    assert not no_connection(doc)  # no server session (yet): nothing to say
    context.session = types.SimpleNamespace(destroyed=False, connection_count=0)
    handed = []  # what the queue hands to the loop
    monkeypatch.setattr(compare_redraws, "REDRAWS",
                        RedrawQueue(schedule=lambda d, fn: handed.append(fn), check_seconds=None))
    monkeypatch.setattr(ComparePage, "load_wait", 0.0)
    session = Session()
    session.workload = dpx.workloads.all_range(32)
    with set_curdoc(doc):
        page = ComparePage(session, auto_optimize=False)
        page.gate.show(True)
    token = page._token
    assert no_connection(doc) and not page._stopped(token)  # not loaded yet: still connecting
    context.session.connection_count = 1
    page._loaded.set()  # the browser drew the page
    assert not page._stopped(token) and not page._closed()
    ran = []
    with set_curdoc(doc):
        page._redraw("results", lambda: ran.append("drawn"))
    handed.pop()()
    assert ran == ["drawn"]
    context.session.connection_count = 0  # the tab closed
    with set_curdoc(doc):
        page._redraw("results", lambda: ran.append("for nobody"))
    handed.pop()()
    assert ran == ["drawn"]  # dropped
    assert page._stopped(token) and page._cancel and page._token != token  # stopped
    context.session = types.SimpleNamespace(destroyed=True, connection_count=1)
    assert no_connection(doc)


def test_a_served_pages_first_figures_follow_its_table(monkeypatch):
    """The table joins a served page first; its first figures are drawn a moment later.

    In the browser the figures took the time (headless chromium, 2 cores: the Compare
    table 4.4-4.9 s after the request with the four figures drawn with it, 2.8-3.0 s with
    them a second later).  Outside a server (tests, notebooks) everything is drawn at once.
    """
    from ui_fakes import served_document

    doc, context = served_document()
    scheduled, timeouts = [], []
    monkeypatch.setattr(pn.state, "execute", lambda fn, schedule="auto": scheduled.append(fn))
    monkeypatch.setattr(compare_redraws, "REDRAWS", RedrawQueue(check_seconds=None))
    monkeypatch.setattr(doc, "add_timeout_callback", lambda fn, ms: timeouts.append((fn, ms)))
    monkeypatch.setattr(ComparePage, "load_wait", 0.0)  # no browser here to say it loaded

    def run_loop():
        with set_curdoc(doc):
            while scheduled:
                scheduled.pop(0)()

    session = Session()
    session.workload = dpx.workloads.prefix(64)
    with set_curdoc(doc):
        page = ComparePage(session, auto_optimize=False)
        page.gate.show(True)
    page.panel()  # (Panel's widgets need a real request in a served document)
    panes = page._panes
    deadline = time.monotonic() + 120
    while page.table is None or not len(panes["table"].value) or page.per_query is None:
        assert time.monotonic() < deadline, "the comparison was not shown"
        run_loop()
        time.sleep(0.02)
    page.wait(60)
    run_loop()
    root = panes["root"]
    assert panes["table"] in root.select(pn.widgets.Tabulator)  # the table is on the page
    assert panes["bars"].pane.object is None and panes["curve"].pane.object is None
    assert panes["by_index"].pane.object is None
    # the figures and the per-query figures wait about first_figures_delay, each asked once
    assert len(timeouts) == 2
    assert all(0 < ms <= page.first_figures_delay * 1000 + 1 for _, ms in timeouts)
    # a change meanwhile (an ε, an optimiser's row) waits too: the browser may still be
    # initialising the table, and Panel's Tabulator drops the rows it gets meanwhile
    before = panes["table"].value["rmse"].to_numpy().copy()
    with set_curdoc(doc):  # as a browser's change comes in
        session.epsilon = 0.5
    run_loop()
    assert page.table.attrs["noise"] == "Laplace(ε=0.5)"  # the page's state follows at once,
    assert np.array_equal(panes["table"].value["rmse"], before, equal_nan=True)  # drawn later
    assert len(timeouts) == 3 and 0 < timeouts[-1][1] <= page.first_figures_delay * 1000 + 1
    time.sleep(page.first_figures_delay)
    for fn, _ in timeouts:
        fn()
    # one HoloViews figure per turn of the loop (another user's ε change goes in between)
    plots = [panes[k] for k in ("bars", "curve", "by_index", "by_length")]
    drawn = [sum(p.counts["holoviews"] for p in plots)]
    with set_curdoc(doc):
        while scheduled:
            scheduled.pop(0)()
            drawn.append(sum(p.counts["holoviews"] for p in plots))
    steps = np.diff(drawn)
    assert steps.max() == 1 and drawn[-1] - drawn[0] >= 3, drawn
    assert panes["bars"].pane.object is not None and panes["curve"].pane.object is not None
    assert panes["by_index"].pane.object is not None
    np.testing.assert_allclose(panes["table"].value["rmse"], page._table_value()["rmse"])  # now
    assert not np.allclose(panes["table"].value["rmse"], before, equal_nan=True)
    bars = panes["bars"].pane.object
    session.epsilon = 0.25  # later changes update the figures at once, in place
    run_loop()
    assert len(timeouts) == 3 and panes["bars"].pane.object is bars
    assert page.bars().get(0).data["rmse"].notna().any()
    # outside a server: no waiting
    other = ComparePage(Session(), auto_optimize=False)
    other.panel()
    assert other.wait(120) and other._panes["bars"].pane.object is not None


def test_the_served_app_freezes_its_startup_objects_once():
    """A full garbage collection stops every session's event loop: the objects alive after the
    imports (modules, never garbage) are left out of its scans, once per process."""
    code = ("import gc; from dpexplorer.ui.server import freeze_startup_objects as f; "
            "a = f(); junk = [[i] for i in range(1000)]; b = f(); "
            "print(a, b, gc.get_freeze_count())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.split()
    first, second, count = map(int, out)
    assert first > 10_000 and first == second == count  # the later call froze nothing more
    assert "freeze_startup_objects()" in (ROOT / "apps" / "explorer.py").read_text()


def test_the_served_app_gives_blas_one_thread_once():
    """The sessions' threads compute at once, and OpenBLAS queues several threads' calls while
    its helpers spin: the served process gives every BLAS library (numpy's and scipy's) one
    thread, once; what it had before is returned."""
    code = ("import json; from threadpoolctl import threadpool_info; "
            "from dpexplorer.ui.server import one_blas_thread as f; "
            "import scipy.linalg, numpy as np; "
            "a = f(); b = f(); np.linalg.cholesky(np.eye(600) * 2); "
            "now = [i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas']; "
            "print(json.dumps([[i['num_threads'] for i in a], a == b, now]))")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True, env=env).stdout
    before, same, now = json.loads(out)
    assert before and all(t == 2 for t in before) and same
    assert len(now) == len(before) and all(t == 1 for t in now)
    assert "one_blas_thread()" in (ROOT / "apps" / "explorer.py").read_text()


_FREED_MEMORY_CODE = """
import sys, numpy as np
from dpexplorer.ui.server import return_freed_memory, trim_heap
tuned = return_freed_memory() if sys.argv[1] == "tuned" else None
def rss():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) / 1024
a = np.ones(2**21); del a           # 16 MiB freed: glibc by default then serves up to 16 MiB from its heap
base = rss()
arrays, pins = [], []
for _ in range(64):
    arrays.append(np.ones(2**18))    # 2 MiB each, 128 MiB in all
    pins.append(bytearray(200_000))  # a small block after each, kept (12 MiB): the arrays leave holes
del arrays
if sys.argv[1] == "trimmed":      # glibc's defaults, then the heap trimmed (as after a session)
    tuned = trim_heap()
print(tuned, round(rss() - base))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_the_served_app_gives_freed_arrays_back_to_the_system():
    """A closed session's arrays are freed; the served process must also give their memory back
    (``dpexplorer.ui.server.return_freed_memory``): glibc's defaults kept 2 MiB arrays in its heap
    once a larger one had been freed (the server grew with every visitor)."""
    def kept(mode):
        out = subprocess.run([sys.executable, "-c", _FREED_MEMORY_CODE, mode], capture_output=True,
                             text=True, cwd=ROOT, check=True, timeout=120).stdout.split()
        return out[0], float(out[1])

    default, tuned = kept("default"), kept("tuned")
    if tuned[0] != "True":
        pytest.skip("the C library is not glibc")
    assert default[1] > 100          # glibc's defaults keep most of the 128 MiB (not vacuous)
    assert tuned[1] < 30             # tuned: only the 12 MiB still in use
    trimmed = kept("trimmed")
    assert trimmed[0] == "True" and trimmed[1] < 30  # trim_heap gives the holes back too
    assert "return_freed_memory()" in (ROOT / "apps" / "explorer.py").read_text()


def test_the_heap_is_trimmed_a_while_after_a_session_ends(monkeypatch):
    from tornado.ioloop import IOLoop

    from dpexplorer.ui import server

    scheduled = []
    monkeypatch.setattr(IOLoop, "current", staticmethod(lambda: SimpleNamespace(
        call_later=lambda delay, fn: scheduled.append((delay, fn)))))
    server._trim_later(None)  # what Bokeh calls when a session's document is destroyed
    assert scheduled == [(server.TRIM_DELAY, server.trim_heap)]


def test_the_explorers_log_level_comes_from_the_environment(compare_page, caplog):
    # DPEXPLORER_LOG_LEVEL=debug shows where a comparison's time goes; a bad value is refused
    from dpexplorer.ui.server import log_from_env

    logger = logging.getLogger("dpexplorer")
    saved = logger.level, list(logger.handlers), logger.propagate
    try:
        assert log_from_env({}) is None and log_from_env({"DPEXPLORER_LOG_LEVEL": " "}) is None
        with pytest.raises(ValueError, match="use one of debug, info, warning, error"):
            log_from_env({"DPEXPLORER_LOG_LEVEL": "verbose"})
        assert log_from_env({"DPEXPLORER_LOG_LEVEL": "DEBUG"}) == logging.DEBUG
        assert log_from_env({"DPEXPLORER_LOG_LEVEL": "debug"}) == logging.DEBUG
        ours = [h for h in logger.handlers if h.get_name() == "dpexplorer-stderr"]
        assert len(ours) == 1  # set twice, one handler
        logger.propagate = True  # for caplog
        with caplog.at_level(logging.DEBUG, logger="dpexplorer"):
            _session, page = compare_page(dpx.workloads.prefix(32))
        built = [r.getMessage() for r in caplog.records if "comparison of" in r.getMessage()]
        assert any("SVD bound" in m and "total" in m and "Identity" not in m
                   and "identity" in m for m in built), built
        assert any("shown" in m for m in built), built
    finally:
        logger.setLevel(saved[0])
        logger.handlers[:] = saved[1]
        logger.propagate = saved[2]


def test_the_served_page_has_no_process_wide_busy_indicator():
    """Panel keeps one busy state per process and sets every session's indicator from it:
    each event of one session sent a message to every other open page."""
    from bokeh.document import Document
    from panel.io.state import state

    from dpexplorer.ui.app import ExplorerApp

    before = list(state._indicators)
    template = ExplorerApp().template()
    doc = Document()
    with set_curdoc(doc):
        template.server_doc(doc)
    assert template.busy_indicator is None
    assert state._indicators == before  # nothing the process-wide busy state would update
    # the control: Panel's default template registers its indicator with that state
    default = pn.template.BootstrapTemplate(main=[pn.pane.Markdown("x")])
    other = Document()
    with set_curdoc(other):
        default.server_doc(other)
    assert default.busy_indicator in state._indicators
    state._indicators.remove(default.busy_indicator)


def test_a_pages_posts_waiting_for_the_loop_run_together_in_order(monkeypatch, caplog):
    """Each callback scheduled on its own took the session's document lock for a turn of
    the shared loop: an ε typed in the page waited behind its own page's posts."""
    import threading

    from ui_fakes import served_document

    from dpexplorer.ui.tasks import Jobs

    doc, _context = served_document()
    scheduled, ran = [], []
    monkeypatch.setattr(tasks, "on_loop", lambda d, fn: scheduled.append((d, fn)))
    lock = threading.RLock()  # the page's lock
    jobs = Jobs(lock)

    def fail():
        raise RuntimeError("boom")

    def job(post):
        post(lambda: ran.append(("status", lock._is_owned())))
        post(fail)  # logged; the others still run
        post(lambda: ran.append(("progress", pn.state.curdoc is doc)))
    with set_curdoc(doc):
        jobs.submit(job)
    assert jobs.wait(30)
    assert len(scheduled) == 1 and scheduled[0][0] is doc and ran == []
    with caplog.at_level("ERROR", logger="dpexplorer.ui.compare_view"):
        scheduled.pop()[1]()  # the loop's turn: all three, in order, under the page's lock
    assert ran == [("status", True), ("progress", True)]
    assert "update of the page failed" in caplog.text
    post = jobs._poster(doc)
    post(lambda: ran.append("later"))  # nothing waiting any more: scheduled anew
    assert len(scheduled) == 1
    scheduled.pop()[1]()
    assert ran[-1] == "later"


# ================================================ the budget in force, in the sidebar
def test_the_sidebar_shows_and_only_lowers_the_stored_budget(monkeypatch, tmp_path):
    """The budget fields show each dataset's budget in the shared store (not the session's
    defaults); lowering is applied, raising refused with the owner's way and the fields go back."""
    from dpexplorer.privacy import accounting
    from dpexplorer.ui.session import _LABEL

    path = tmp_path / "store.sqlite"
    monkeypatch.setenv("DPEXPLORER_LEDGER", str(path))
    one, two = dpx.datasets.DEFAULT_1D, dpx.datasets.DEFAULT_2D
    dpx.PrivacyLedger.open(path, one).set_budget(dpx.Budget.pure(2.0))  # the owner, in Python
    dpx.PrivacyLedger.open(path, two).set_budget(dpx.Budget.approx(3.0, 1e-6))
    session = Session()
    assert session.dataset == one and session.budget_object() == dpx.Budget.pure(2.0)  # at start
    col = session.controls()
    kind = [w for w in col.select(pn.widgets.Select) if getattr(w, _LABEL) == "Budget of each dataset"][0]
    inputs = {getattr(w, _LABEL): w for w in col.select(pn.widgets.FloatInput)}
    eps, delta = inputs["Budget ε"], inputs["Budget δ"]
    assert kind.value == "pure" and eps.value == 2.0 and eps.visible and not delta.visible
    assert "raising it is the data owner's act" in session._ledger_pane.object

    session.dataset = two  # another dataset: its own stored budget
    assert (kind.value, eps.value, delta.value) == ("approx", 3.0, 1e-6) and delta.visible
    eps.value = 1.5  # lowering from the sidebar: applied to the store, no error
    assert dpx.PrivacyLedger.open(path, two).budget == dpx.Budget.approx(1.5, 1e-6)
    assert session.error == ""
    eps.value = 4.0  # raising: refused with the owner's way, the field back to the budget in force
    assert "raise" in session.error and f"dpx.PrivacyLedger.open({str(path)!r}, {two!r}).set_budget(" \
        in session.error
    assert eps.value == 1.5 and session.budget_epsilon == 1.5
    assert dpx.PrivacyLedger.open(path, two).budget == dpx.Budget.approx(1.5, 1e-6)
    kind.value = "none"  # removing the budget is raising it too
    assert "raise" in session.error and kind.value == "approx" and session.budget == "approx"
    kind.value = "zcdp"  # another kind: the largest ρ within (1.5, 1e-6), shown, then lowered
    rho = dpx.PrivacyLedger.open(path, two).budget.rho
    assert kind.value == "zcdp" and inputs["Budget ρ"].value == rho and session.error == ""
    assert accounting.epsilon_from_rho(rho, 1e-6) <= 1.5
    assert accounting.epsilon_from_rho(rho * (1 + 1e-6), 1e-6) > 1.5  # and not much less
    inputs["Budget ρ"].value = rho / 2
    assert dpx.PrivacyLedger.open(path, two).budget == dpx.Budget.zcdp(rho / 2)

    session.dataset = one  # back: the first dataset's budget, untouched
    assert (kind.value, eps.value) == ("pure", 2.0)
    assert dpx.PrivacyLedger.open(path, one).budget == dpx.Budget.pure(2.0)
    other = Session()  # a second tab sees the budget the first one lowered
    other.dataset = two
    assert other.budget_object() == dpx.Budget.zcdp(rho / 2)


def test_another_budget_kind_starts_from_its_largest_budget_within_the_one_in_force():
    from dpexplorer.privacy import accounting
    from dpexplorer.privacy.ledger import budget_within
    from dpexplorer.ui.session import _largest_within

    pure, approx, zcdp = dpx.Budget.pure(2.0), dpx.Budget.approx(3.0, 1e-6), dpx.Budget.zcdp(0.5)
    assert _largest_within("pure", approx) == dpx.Budget.pure(3.0)  # ε-DP is (ε, 0)-DP
    assert _largest_within("pure", pure) == pure and _largest_within("zcdp", zcdp) == zcdp
    eps = _largest_within("pure", zcdp).epsilon  # ε-DP is ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4)
    assert accounting.rho_pure(eps) <= 0.5 and eps == pytest.approx(1.0, rel=1e-11)
    rho = _largest_within("zcdp", approx).rho  # converts to at most ε = 3 at δ = 1e-6 (CKS 2020)
    assert accounting.epsilon_from_rho(rho, 1e-6) <= 3.0
    assert accounting.epsilon_from_rho(rho * (1 + 1e-6), 1e-6) > 3.0
    for kind, old in [("approx", pure), ("approx", zcdp), ("zcdp", pure)]:
        assert _largest_within(kind, old) is None  # none lies within: a session cannot switch
    for kind in ("pure", "zcdp", "approx"):
        for old in (pure, approx, zcdp):
            near = _largest_within(kind, old)
            assert near is None or budget_within(near, old)
