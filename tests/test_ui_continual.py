"""The Compare page's "Error over time" (no browser): per-step errors of the compared strategies
for a count over time, hidden for other workloads; the Counts-over-time preset."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from dpexplorer.queries.terms import PRESETS  # noqa: E402
from dpexplorer.ui.compare_view import ComparePage  # noqa: E402
from dpexplorer.ui.continual_view import step_plot  # noqa: E402
from dpexplorer.ui.session import Session  # noqa: E402

pytestmark = pytest.mark.slow


def test_a_count_over_time_draws_every_mechanisms_error_by_step(reported):
    session = Session()
    session.workload = PRESETS["counts_over_time"].workload_terms().build().workload
    page = ComparePage(session, auto_optimize=False)
    assert page.wait(300) and page.error == "" and not reported
    view = page.step_errors
    assert view.frame is not None and view.note == ""
    frame, noise = view.frame, session.noise_model()
    W = page.shown_workload
    assert W.n == 1024 and dpx.streaming.is_causal(W)
    table = page.table.set_index("mechanism")
    drawn = list(frame["mechanism"].unique())
    assert {"toeplitz_sqrt", "identity", "h2"} <= set(drawn) and "hb" not in drawn and "opt0" not in drawn
    assert all(math.isfinite(table.loc[n, "rmse"]) for n in drawn)
    assert bool(table.loc["toeplitz_sqrt", "online"]) and not bool(table.loc["h2", "online"])
    for name in ("toeplitz_sqrt", "h2"):
        A = dpx.registry.get(name).strategy(W, noise)
        part = frame[frame["mechanism"] == name]
        np.testing.assert_allclose(part["std"], dpx.per_query_rmse(W, A, noise)[part["step"]], rtol=1e-9)
    assert view.bound == pytest.approx(dpx.streaming.bounds.max_std_lower_bound(1024, noise))
    plot = step_plot(frame, view.bound)
    styles = {c.label: c.opts.get().kwargs["line_dash"] for c in plot if isinstance(c, hv.Curve)}
    assert styles["√L (Toeplitz)"] == "solid" and styles["H2"] == "dashed"
    assert view.panel().visible
    # ε changes: the chart follows the rescaled table
    session.epsilon = 2.0
    assert page.wait(300)
    part = view.frame[view.frame["mechanism"] == "toeplitz_sqrt"]
    A = dpx.registry.get("toeplitz_sqrt").strategy(W, session.noise_model())
    np.testing.assert_allclose(part["std"], dpx.per_query_rmse(W, A, session.noise_model())[part["step"]])
    # a workload that is not a count over time: nothing drawn, the section hidden
    session.workload = dpx.workloads.all_range(64)
    assert page.wait(300)
    assert view.frame is None and not view.panel().visible


def test_blt_memory_against_error_is_drawn_under_gaussian_noise(reported):
    session = Session()
    session.noise = "Gaussian"
    session.workload = dpx.streaming.continual(512)
    page = ComparePage(session, auto_optimize=False)
    assert page.wait(300) and not reported
    view = page.step_errors
    assert view.tradeoff is not None and list(view.tradeoff["buffers"]) == [1, 2, 3, 4, 5]
    want = dpx.streaming.analysis.blt_tradeoff(512, session.noise_model())
    np.testing.assert_allclose(view.tradeoff["max_std"], want["max_std"], rtol=1e-9)
    from dpexplorer.ui.continual_view import memory_plot

    assert len(memory_plot(view.tradeoff)) == 3
    session.noise = "Laplace"  # BLT is a Gaussian mechanism: no trade-off drawn
    assert page.wait(300)
    assert view.tradeoff is None and view.frame is not None
