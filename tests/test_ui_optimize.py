"""Tests of dpexplorer.ui.optimize_view: progress relay, convergence, marginal weights, blocks."""

from __future__ import annotations

import math
import threading
import weakref

import numpy as np
import pandas as pd
import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from dpexplorer.core.optimization import OptimizationResult, progress, report  # noqa: E402
from dpexplorer.ui import optimize_view as ov  # noqa: E402
from dpexplorer.ui.optimize_view import (  # noqa: E402
    Cancelled,
    OptimizationProgress,
    ProgressRelay,
    blocks_frame,
    convergence_frame,
    convergence_plot,
    marginal_label,
    marginal_weights_frame,
)

# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
# each test optimises anew (its progress and Cancel are what it checks)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fresh_strategies")]


# ------------------------------------------------------------------ progress
def test_relay_posts_reports_and_the_last_one_always():
    posted, shown = [], []
    relay = ProgressRelay(posted.append, lambda *a: shown.append(a), interval=3600.0)
    with progress(relay):
        for i in range(1, 11):
            report("opt0 restart 1/1", i, 10, 100.0 / i)
    # the first report and the final one (done == total) pass the throttle, nothing in between
    assert relay.reports == 10 and len(posted) == 2
    for callback in posted:
        callback()
    assert [s[:4] for s in shown] == [("opt0 restart 1/1", 1, 10, 100.0),
                                       ("opt0 restart 1/1", 10, 10, 10.0)]
    assert all(s[4] >= 0 for s in shown)  # elapsed seconds
    # interval 0: every report is posted
    relay = ProgressRelay(posted.append, lambda *a: None, interval=0.0)
    posted.clear()
    with progress(relay):
        for i in range(5):
            report("x", i, 0)
    assert len(posted) == 5


def test_relays_share_the_servers_progress_updates(monkeypatch):
    """While k > 1 optimisers report at once, each posts at most every k · PROGRESS_SHARE
    seconds (at least PROGRESS_INTERVAL): the loop draws about 1 / PROGRESS_SHARE updates a
    second in all, however many sessions optimise; one alone posts every PROGRESS_INTERVAL;
    a relay with its own interval keeps it."""
    from dpexplorer.ui import optimize_view

    clock = [1000.0]
    monkeypatch.setattr(optimize_view.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(ProgressRelay, "_reporting", weakref.WeakKeyDictionary())
    share, least = optimize_view.PROGRESS_SHARE, optimize_view.PROGRESS_INTERVAL
    posted = {k: [] for k in range(8)}
    relays = [ProgressRelay(posted[k].append, lambda *a: None) for k in range(8)]
    fixed = ProgressRelay(posted.setdefault("fixed", []).append, lambda *a: None, interval=0.0)

    def tick(seconds, steps):  # every relay reports every `seconds`
        for _ in range(steps):
            clock[0] += seconds
            for relay in [*relays, fixed]:
                relay("opt0", 1, 100)
    tick(0.01, 1000)  # 10 s, 8 relays reporting: one update per relay every 0.8 s
    gap = 8 * share
    assert gap > least
    for k in range(8):  # (the 0.01 s ticks: a gap ends on the next tick)
        assert 10 / (gap + 0.01) - 1 <= len(posted[k]) <= 10 / gap + 1, k
    assert len(posted["fixed"]) == 1000  # its own interval (0: every report)
    # the others stop: after PROGRESS_ACTIVE s one relay alone posts every PROGRESS_INTERVAL
    clock[0] += optimize_view.PROGRESS_ACTIVE + 1
    posted[0].clear()
    for _ in range(1000):  # 10 s
        clock[0] += 0.01
        relays[0]("opt0", 1, 100)
    alone = least
    assert 10 / (alone + 0.01) - 1 <= len(posted[0]) <= 10 / alone + 1
    # the final report is always posted, and the relay then stops counting
    relays[1]("opt0", 1, 100)  # (posted: its last post was over 3 s ago)
    assert relays[1] in ProgressRelay._reporting
    relays[1]("opt0", 100, 100)  # at once after it: posted all the same
    assert len(posted[1]) == len(posted[2]) + 2 and relays[1] not in ProgressRelay._reporting


def test_relay_cancels_the_optimisation_that_reports():
    stop = threading.Event()
    calls = []

    def optimiser():
        for i in range(100):
            calls.append(i)
            if i == 3:
                stop.set()
            report("fake", i + 1, 100)
        return "finished"

    relay = ProgressRelay(lambda cb: cb(), lambda *a: None, stop=stop.is_set)
    with progress(relay), pytest.raises(Cancelled):
        optimiser()
    assert calls == [0, 1, 2, 3]  # stopped at the first report after the request
    # an optimiser's own `except Exception` does not swallow the cancellation
    stop.clear()

    def guarded():
        for r in range(3):
            try:
                stop.set()
                report(f"restart {r}", 1, 1)
            except Exception:  # noqa: BLE001 - as a restart loop might do
                calls.append("swallowed")
    with progress(relay), pytest.raises(Cancelled):
        guarded()
    assert "swallowed" not in calls
    # without a relay nothing happens
    assert optimiser() == "finished"


def test_progress_widget_follows_reports_of_its_build_only():
    p = OptimizationProgress()
    p.begin(1, "OPT0")
    assert not p.active and p.text() == ""  # shown from the first report on
    p.update(1, "opt0 restart 2/5", 40, 100, 1234.5, 2.0)
    assert p.active and (p.done, p.total, p.label) == (40, 100, "OPT0") and p.value() == 40
    assert "opt0 restart 2/5" in p.text() and "40/100" in p.text() and "1234.5" in p.text()
    p.update(0, "stale build", 1, 1, 1.0, 0.0)  # a report of an older build is ignored
    assert p.stage == "opt0 restart 2/5"
    p.update(1, "unknown total", 7, 0, math.nan, 3.0)
    assert p.value() == -1 and "7" in p.text() and "objective" not in p.text()
    p.end(0)  # the end of another build does not hide this one
    assert p.active
    p.end(1)
    assert not p.active and p.text() == ""
    p.update(1, "late", 100, 100, 1.0, 4.0)  # delivered after the end: ignored
    assert not p.active and p.stage == "unknown total"
    # the widgets render and Cancel calls back
    cancelled = []
    col = p.panel(cancel=lambda: cancelled.append(True))
    assert col.get_root() is not None and not col.visible
    p.begin(2, "HDMM")
    p.update(2, "hdmm", 1, 4, 10.0, 0.1)
    assert col.visible
    bar = col.select(pn.indicators.Progress)[0]
    assert bar.value == 25
    col.select(pn.widgets.Button)[0].clicks += 1
    assert cancelled == [True]


# --------------------------------------------------------------- convergence
def _result(trace, restarts, objective=None):
    A = dpx.matrix.Identity(4)
    return OptimizationResult(A, objective if objective is not None else min(restarts),
                              np.asarray(trace, dtype=float), np.asarray(restarts, dtype=float),
                              1.5, 7, "opt0", {})


def test_convergence_frame_and_plot_show_the_result():
    res = _result([9.0, 5.0, np.nan, 3.0], [4.0, 3.0, 3.5])
    trace, restarts = convergence_frame(res)
    assert list(trace["iteration"]) == [0, 1, 3] and list(trace["objective"]) == [9.0, 5.0, 3.0]
    assert list(restarts["restart"]) == [1, 2, 3] and list(restarts["objective"]) == [4.0, 3.0, 3.5]
    assert list(restarts["best"]) == [False, True, False]
    assert set(restarts["iteration"]) == {3}  # drawn at the end of the trace
    plot = convergence_plot(res, svdb=2.0)
    curves = [e for e in plot if isinstance(e, hv.Curve)]
    scatter = [e for e in plot if isinstance(e, hv.Scatter)][0]
    np.testing.assert_array_equal(curves[0].dimension_values("objective"), [9.0, 5.0, 3.0])
    np.testing.assert_array_equal(scatter.dimension_values("objective"), [4.0, 3.0, 3.5])
    bound = curves[1]  # the SVD bound: unit-noise TSE, same units as the objective
    assert set(bound.dimension_values("objective")) == {2.0}
    opts = plot.opts.get().kwargs
    assert opts["logy"] is True and "TSE 1.5×" in opts["title"] and "RMSE 1.22×" in opts["title"]
    # no bound known: no line; an empty trace still draws
    assert len([e for e in convergence_plot(res) if isinstance(e, hv.Curve)]) == 1
    empty = convergence_plot(_result([], [1.0]))
    assert isinstance(empty, hv.Overlay)
    assert "paired cells" not in opts["title"]
    res.info["levels"] = [{"cells": 2048, "p": 128, "iterations": 900}]  # OPT0's multilevel start
    title = convergence_plot(res).opts.get().kwargs["title"]
    assert title.endswith("started from the optimum on 2048 paired cells")
    hv.render(convergence_plot(res, svdb=2.0), backend="bokeh")


# ----------------------------------------------------------------- marginals
class _Marginal:
    """Duck-typed marginal strategy: domain and theta by bitmask (attribute i ↔ bit i)."""

    def __init__(self, domain, theta):
        self.domain = tuple(domain)
        self.theta = np.asarray(theta, dtype=float)


def test_marginal_labels_follow_the_bitmask_convention():
    names = ["sex", "age", "race"]
    assert marginal_label(0b000, names) == "total (0-way)"
    assert marginal_label(0b001, names) == "sex"
    assert marginal_label(0b011, names) == "sex×age"
    assert marginal_label(0b110, names) == "age×race"
    assert marginal_label(0b111, names) == "sex×age×race"


def test_marginal_weights_frame_lists_theta_largest_first():
    theta = np.array([0.0, 0.1, 0.0, 0.3, 0.25, 0.0, 0.05, 0.3])  # d = 3
    A = _Marginal((2, 5, 3), theta)
    f = marginal_weights_frame(A, ["sex", "age", "race"])
    assert list(f["marginal"]) == ["sex×age", "sex×age×race", "race", "sex", "age×race"]
    assert list(f["mask"]) == [3, 7, 4, 1, 6] and list(f["order"]) == [2, 3, 1, 1, 2]
    np.testing.assert_allclose(f["weight"], [0.3, 0.3, 0.25, 0.1, 0.05])
    assert f.attrs["count"] == 5 and f.attrs["l1"] == pytest.approx(theta.sum())
    assert f.attrs["l2"] == pytest.approx(np.sqrt((theta ** 2).sum()))
    top = marginal_weights_frame(A, ["sex", "age", "race"], top=2)
    assert len(top) == 2 and top.attrs["count"] == 5 and top.attrs["shown"] == 2
    assert "top 2 of 5" in ov.marginal_weights_plot(top).opts.get().kwargs["title"]
    # names of the wrong length fall back to a1, a2, ...
    assert marginal_weights_frame(A, ["x"])["marginal"].iloc[0] == "a1×a2"
    with pytest.raises(ValueError, match="2\\*\\*3"):
        marginal_weights_frame(_Marginal((2, 5, 3), theta[:4]))
    with pytest.raises(ValueError, match="not a marginal strategy"):
        marginal_weights_frame(dpx.matrix.Identity(3))


def test_marginal_weights_of_the_engines_opt_m():
    domain = (3, 4, 2)
    W = dpx.workloads.marginals(domain, [1, 2])
    A = dpx.registry.get("opt_m").strategy(W, dpx.Laplace(1.0))
    f = marginal_weights_frame(A, ["a", "b", "c"], top=None)
    theta = np.asarray(A.theta)
    assert f["weight"].sum() == pytest.approx(theta.sum()) == pytest.approx(A.sensitivity(1))
    for row in f.itertuples():
        assert row.weight == theta[row.mask]
        assert row.marginal == "×".join(n for i, n in enumerate("abc") if row.mask >> i & 1) \
            or (row.mask == 0 and row.marginal.startswith("total"))


# -------------------------------------------------------------------- blocks
def test_blocks_frame_reads_weights_and_kronecker_shapes():
    K = dpx.matrix.Kronecker([dpx.matrix.Identity(3), dpx.matrix.Total(2)])
    stack = dpx.matrix.VStack([dpx.matrix.Weighted(K, 0.75), dpx.matrix.Identity(6)])
    f = blocks_frame(stack)
    assert list(f["block"]) == [1, 2] and list(f["weight"]) == [0.75, 1.0]
    assert list(f["rows"]) == [3, 6] and f["structure"].iloc[0] == "3×3 ⊗ 1×2"
    stack.weights = np.array([2.0, 3.0])  # a stacked strategy's own weights win (OPT+)
    assert list(blocks_frame(stack)["weight"]) == [2.0, 3.0]
    with pytest.raises(ValueError, match="no blocks"):
        blocks_frame(K)
    assert isinstance(f, pd.DataFrame)
