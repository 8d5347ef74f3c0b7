"""Tests of the Strategy page (no browser) and of both pages served together."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from dpexplorer.queries.drawing import block_mean, kronecker_factors  # noqa: E402
from dpexplorer.ui import strategy_view  # noqa: E402
from dpexplorer.ui.compare_view import ComparePage  # noqa: E402
from dpexplorer.ui.session import Session  # noqa: E402
from dpexplorer.ui.strategy_view import StrategyView, heatmap_element  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
# each test optimises anew (its progress and Cancel are what it checks)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fresh_strategies")]


def _view(workload=None, **params) -> tuple[Session, StrategyView]:
    session = Session()
    if workload is not None:
        session.workload = workload
    view = StrategyView(session, **params)
    assert view.wait(120)
    return session, view


def _maps(info, kind):
    return [h for h in info.heatmaps if h.kind == kind]


@pytest.mark.parametrize("left,right", [("h2", "hb"), ("wavelet", "greedy_h"),
                                        ("identity", "workload")])
def test_matrices_equal_strategy_for_small_n(left, right):
    session, view = _view(dpx.workloads.all_range(48), left=left, right=right, max_pixels=2048)
    W, noise = session.workload, dpx.Laplace(1.0)
    table = dpx.compare(W, noise, cache=session.cache).set_index("mechanism")
    for side, name in [("left", left), ("right", right)]:
        info = view.info(side)
        A = session.cache.entry(W, name, noise)[0]
        assert info.A is A and info.name == name and info.error == ""
        (a,), (g,) = _maps(info, "A"), _maps(info, "gram")
        assert not a.downsampled and not g.downsampled
        np.testing.assert_array_equal(a.array, A.dense())
        np.testing.assert_array_equal(g.array, A.gram().dense())
        assert info.rows == A.m == table.loc[name, "rows"]
        assert info.sensitivity_l1 == A.sensitivity(1) == table.loc[name, "sensitivity"]
        assert info.sensitivity_l2 == A.sensitivity(2)
        assert info.rmse(noise) == pytest.approx(table.loc[name, "rmse"], rel=1e-12)
        text = view.stats(side)
        assert f"{table.loc[name, 'rmse']:.4g}" in text and f"{A.m:,}" in text
    assert session.error == "" and view.error == ""


def test_heatmap_is_drawn_in_matrix_orientation():
    A = dpx.strategies.h2(8)
    h = dpx.queries.drawing.heatmaps(A)[0]
    img = heatmap_element(h)
    arr = A.dense()
    for r, c in [(0, 0), (0, 7), (14, 0), (9, 4), (5, 3)]:
        assert img[c + 0.5, r + 0.5] == arr[r, c]
    assert img.opts.get().kwargs["invert_yaxis"] is True


def test_large_strategies_are_block_averaged():
    session, view = _view(dpx.workloads.all_range(1024), left="h2", right="workload")
    A = session.cache.entry(session.workload, "h2", dpx.Laplace(1.0))[0]  # 2047 × 1024
    a, g = _maps(view.left_info, "A")[0], _maps(view.left_info, "gram")[0]
    assert a.block == (4, 2) and a.array.shape == (512, 512) and a.shape == (2047, 1024)
    np.testing.assert_allclose(a.array, block_mean(A.dense(), 4, 2), rtol=1e-12)
    # block means by hand: the first block is rows 0..3, cells 0..1
    assert a.array[0, 0] == pytest.approx(A.dense()[:4, :2].mean())
    assert a.array[-1, -1] == pytest.approx(A.dense()[2044:, 1022:].mean())
    assert "block-averaged 4×2" in a.title
    assert g.block == (2, 2) and g.array.shape == (512, 512)
    np.testing.assert_allclose(g.array, block_mean(A.gram().dense(), 2, 2), rtol=1e-12)
    # the Workload strategy of All Range (524,800 × 1,024) is not materialised: a message
    wa, wg = _maps(view.right_info, "A")[0], _maps(view.right_info, "gram")[0]
    assert wa.array is None and "too large to draw" in wa.message
    assert wg.array is not None and wg.array.shape == (512, 512)
    assert "too large" in view.messages("right")
    assert session.error == "" and view.right_info.error == ""
    layout = view.panel()
    assert layout.get_root() is not None
    for side in ("left", "right"):
        images = [e for e in view.plot(side) if isinstance(e, hv.Image)]
        assert all(e.dimension_values(2, flat=False).shape[0] <= 512 for e in images)


def test_max_pixels_block_averages_and_redraws():
    session, view = _view(dpx.workloads.prefix(64), left="h2", right="identity", max_pixels=16)
    A = session.cache.entry(session.workload, "h2", dpx.Laplace(1.0))[0]  # 127 × 64
    a = _maps(view.left_info, "A")[0]
    assert a.block == (8, 4) and a.array.shape == (16, 16)
    np.testing.assert_allclose(a.array, block_mean(A.dense(), 8, 4), rtol=1e-12)
    # changing max_pixels redraws
    view.max_pixels = 512
    view.wait(60)
    assert not _maps(view.left_info, "A")[0].downsampled


def test_kronecker_strategy_draws_each_factor():
    W = dpx.workloads.kron([dpx.workloads.all_range(16), dpx.workloads.prefix(8)])
    session, view = _view(W, left="h2", right="identity")
    A = session.cache.entry(W, "h2", dpx.Laplace(1.0))[0]
    assert isinstance(A, dpx.matrix.Kronecker)
    info = view.left_info
    assert [h.factor for h in info.heatmaps] == [0, 0, 1, 1]
    for i, f in enumerate(A.factors):
        a, g = [h for h in info.heatmaps if h.factor == i]
        np.testing.assert_array_equal(a.array, f.dense())
        np.testing.assert_array_equal(g.array, f.gram().dense())
        assert f"factor {i + 1} of 2" in a.title
    assert info.rows == A.m and info.sensitivity_l1 == A.sensitivity(1)
    assert "⊗" in view.stats("left")
    assert len([e for e in view.plot("left") if isinstance(e, hv.Image)]) == 4


def test_not_applicable_and_unknown_are_messages(reported):
    W = dpx.workloads.kron([dpx.workloads.prefix(8), dpx.workloads.prefix(8)])
    session, view = _view(W, left="greedy_h", right="h2")
    assert view.left_info.A is None and "1D" in view.left_info.note
    assert "Does not apply" in view.stats("left") and view.plot("left") is None
    assert session.error == "" and not reported
    view.right = "nope"
    view.wait(60)
    assert "nope" in view.error and reported
    view.right = "dawa"
    view.wait(60)
    assert "data-dependent" in view.right_info.error
    view.panel().get_root()  # still renders


def test_epsilon_change_only_rescales():
    session, view = _view(dpx.workloads.all_range(128))
    info, entries = view.left_info, len(session.cache)
    r1 = info.rmse(session.noise_model())
    session.epsilon = 0.5
    assert view.left_info is info and len(session.cache) == entries
    assert view._jobs.pending == 0 and not view.left_busy
    assert info.rmse(session.noise_model()) == pytest.approx(2 * r1, rel=1e-12)
    view.panel()
    session.epsilon = 0.25
    assert f"{4 * r1:.4g}" in view._panes["left_stats"].object
    # Gaussian noise: strategies rebuilt once for the L2 norm
    session.noise = "Gaussian"
    view.wait(60)
    assert view.left_info.norm == 2
    assert view.left_info.rmse(dpx.Gaussian(0.25, 1e-6)) == pytest.approx(
        dpx.rmse(session.workload, view.left_info.A, dpx.Gaussian(0.25, 1e-6)), rel=1e-12)


def test_shares_strategies_with_compare_page():
    session = Session()
    session.workload = dpx.workloads.prefix(128)
    page = ComparePage(session)
    assert page.wait(60)
    entries = len(session.cache)
    view = StrategyView(session, left="greedy_h", right="wavelet")
    assert view.wait(60)
    assert len(session.cache) == entries
    assert view.left_info.A is session.cache.entry(session.workload, "greedy_h",
                                                   dpx.Laplace(1.0))[0]


def test_bad_input_keeps_strategies(reported):
    session, view = _view(dpx.workloads.prefix(32))
    info = view.left_info
    session.workload = dpx.workloads.all_range(5000)
    view.wait(60)
    assert view.left_info is info and "too large" in session.error
    session.workload = dpx.workloads.prefix(16)
    view.wait(60)
    assert view.left_info.W is session.workload and view.error == ""


def test_layout_and_selectors():
    session, view = _view(dpx.workloads.prefix(32))
    layout = view.panel()
    assert layout.get_root() is not None
    selects = layout.select(pn.widgets.Select)
    assert len(selects) == 2
    selects[1].value = "wavelet"
    assert view.right == "wavelet"
    view.wait(60)
    assert view.right_info.name == "wavelet"
    pane = view._panes["right_plot"]
    assert isinstance(pane.object, hv.Layout) and view._panes["right_plot_box"].visible
    assert math.isfinite(view.right_info.unit_tse)


# ----------------------------------------------------------------- server
@pytest.mark.slow
def test_pages_served_together(tmp_path):
    requests = pytest.importorskip("requests")
    script = tmp_path / "pages.py"
    script.write_text(
        "import os\n"
        "os.environ['BOKEH_RESOURCES'] = 'server'\n"
        "import panel as pn\n"
        "from dpexplorer.ui.session import Session\n"
        "from dpexplorer.ui.compare_view import ComparePage\n"
        "from dpexplorer.ui.strategy_view import StrategyView\n"
        "pn.extension('tabulator', notifications=True)\n"
        "session = Session()\n"
        "pn.Column(session.controls(), ComparePage(session), StrategyView(session))"
        ".servable(title='dpexplorer pages')\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path / "panel.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "panel", "serve", str(script), "--port", str(port),
         "--address", "127.0.0.1", f"--allow-websocket-origin=127.0.0.1:{port}"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log,
        stderr=subprocess.STDOUT)
    try:
        url, resp = f"http://127.0.0.1:{port}/pages", None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                resp = requests.get(url, timeout=30)
                break
            except requests.ConnectionError:
                time.sleep(0.5)
        log.seek(0)
        text = log.read()
        assert resp is not None and resp.status_code == 200, text
        assert "Traceback" not in resp.text and "Error running application" not in text, text
        # a user's own script served by plain `panel serve` ends soon after SIGTERM: the page's
        # comparison, waiting for a browser that never loads the page, used to hold the
        # interpreter's exit for its whole 30 s wait
        proc.terminate()
        t0 = time.monotonic()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        assert proc.poll() is not None and time.monotonic() - t0 < 10, \
            f"the server took {time.monotonic() - t0:.0f} s to end after SIGTERM"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=15)
        log.close()


# ------------------------------------------------------- optimisers (HDMM, Eigen-Design)
def test_convergence_plot_of_an_optimised_strategy(monkeypatch):
    from ui_fakes import FakeOptimizer, registered

    from dpexplorer.ui import optimize_view

    monkeypatch.setattr(optimize_view, "PROGRESS_INTERVAL", 0.0)
    fake = FakeOptimizer(iters=6, restarts=3)
    with registered(monkeypatch, fake):
        session = Session()
        session.workload = dpx.workloads.prefix(32)
        view = StrategyView(session, left="fake_opt", right="hb")
        assert view.wait(60)
        info = view.left_info
        A = session.cache.entry(session.workload, "fake_opt", dpx.Laplace(1.0))[0]
        assert info.A is A and info.optimization is A.optimization
        trace, restarts = view.convergence_data("left")
        np.testing.assert_array_equal(trace["objective"], A.optimization.trace)
        np.testing.assert_array_equal(restarts["objective"], A.optimization.restarts)
        # the SVD bound drawn is the engine's, in the objective's units (unit-noise TSE)
        assert info.svdb == pytest.approx(dpx.error.svdb(session.workload), rel=1e-12)
        bound = [e for e in view.convergence("left") if isinstance(e, hv.Curve)][1]
        np.testing.assert_allclose(bound.dimension_values(1), info.svdb, rtol=1e-12)
        view.panel()
        text = view.stats("left")
        assert "fake_opt, 3 restart(s)" in text and f"{A.optimization.objective:.6g}" in text
        # drawn first, above the heatmaps, in the side's one Layout
        left, right = list(view.plot("left")), list(view.plot("right"))
        assert isinstance(left[0], hv.Overlay) and "objective" in left[0].opts.get().kwargs["title"]
        assert not [e for e in right if isinstance(e, hv.Overlay)]  # HB is not optimised
        # every report reached the side's progress widget (posts are not throttled here)
        assert view.progress["left"].reports == len(fake.reports) == 18
        assert not view.progress["left"].active and view.progress["left"].done == 18
        view.panel().get_root()


def test_marginal_weights_of_opt_m_with_attribute_names():
    from dpexplorer.ui.builder import WorkloadBuilder

    session = Session()
    builder = WorkloadBuilder(session)
    builder.clear_terms()
    assert builder.set_domain(attributes="sex:2, age:6, race:3")
    assert builder.add_term("marginals", orders="1-2")
    view = StrategyView(session, left="opt_m", right="identity")
    assert view.wait(120)
    info, W = view.left_info, session.workload
    A = session.cache.entry(W, "opt_m", dpx.Laplace(1.0))[0]
    frame = info.marginal_weights
    theta = np.asarray(A.theta)
    assert frame.attrs["count"] == int(np.count_nonzero(theta))
    assert frame["weight"].is_monotonic_decreasing
    names = ("sex", "age", "race")
    for row in frame.itertuples():
        assert row.weight == theta[row.mask]
        assert row.marginal == ("×".join(a for i, a in enumerate(names) if row.mask >> i & 1)
                                or "total (0-way)")
    assert frame["weight"].sum() == pytest.approx(A.sensitivity(1))  # Δ₁ = Σ θ (HDMM Prop. 7)
    bars = view.marginals_plot("left")
    assert list(bars.dimension_values("marginal")) == list(frame["marginal"])
    view.panel().get_root()
    assert [e for e in view.plot("left") if isinstance(e, hv.Bars)]
    assert not [e for e in view.plot("right") if isinstance(e, hv.Bars)]
    assert "marginals measured" in view.stats("left")


def test_stacked_blocks_of_opt_plus():
    wl = dpx.workloads
    W = wl.union([wl.kron([wl.prefix(8), wl.identity(4)]), wl.kron([wl.identity(8), wl.total(4)])],
                 [1.0, 2.0])
    session, view = _view(W, left="opt_plus", right="opt_kron")
    info = view.left_info
    A = info.A
    assert info.blocks is not None and len(info.blocks) == len(A.blocks)
    np.testing.assert_allclose(info.blocks["weight"], A.weights)
    assert list(info.blocks["rows"]) == [B.m for B in A.blocks]
    # the factors of the blocks are drawn (the block weight folded into the first factor)
    parts = [h for h in info.heatmaps if h.part is not None]
    assert parts and {h.part for h in parts} == set(range(min(len(A.blocks), 3)))
    for h in parts:
        F = kronecker_factors(A.blocks[h.part])[h.factor]
        np.testing.assert_allclose(h.array, F.dense(), rtol=1e-12)
    assert "blocks (stacked sub-strategies)" in view.stats("left")
    # OPT⊗ (one Kronecker product): factor views, no blocks
    assert view.right_info.blocks is None and {h.factor for h in view.right_info.heatmaps} == {0, 1}
    view.panel().get_root()
    assert view._panes["left_blocks"].visible and not view._panes["right_blocks"].visible


def test_progress_and_cancel_on_the_strategy_page(monkeypatch, reported):
    import threading

    from ui_fakes import FakeOptimizer, registered, wait_for

    fake = FakeOptimizer(iters=2, restarts=1, gate=threading.Event())
    with registered(monkeypatch, fake):
        session = Session()
        session.workload = dpx.workloads.prefix(32)
        view = StrategyView(session, left="hb", right="fake_opt")
        view.panel()
        assert wait_for(lambda: "Fake OPT" in view.progress["right"].text(), 60)
        assert view.right_busy
        assert view._panes["right_progress"].visible
        view.cancel("right")
        assert view.wait(60)
        info = view.right_info
        assert info.A is None and "cancelled" in info.error and not view.right_busy
        assert not view.progress["right"].active and view._panes["right_rebuild"].visible
        assert view.left_info.A is not None  # the other side is unaffected
        fake.gate.set()
        view._panes["right_rebuild"].clicks += 1  # "Build again"
        assert view.wait(60)
        assert view.right_info.A is not None and view.right_info.error == ""
        assert not view._panes["right_rebuild"].visible


def test_waits_for_a_build_running_on_another_page(monkeypatch):
    from ui_fakes import wait_for

    from dpexplorer.ui.compare_view import build_lock

    session = Session()
    W = dpx.workloads.prefix(16)
    session.workload = W
    lock = build_lock(session.cache, (W, "wavelet", 1))
    with lock:  # "another page" builds Privelet for this workload
        view = StrategyView(session, left="hb", right="wavelet")
        assert wait_for(lambda: "Waiting for Privelet" in view.right_status, 30)
        assert wait_for(lambda: view.left_info is not None, 30)  # other strategies still build
    assert view.wait(60)
    assert view.right_status == "" and view.right_info.A is not None


def test_a_build_finishing_while_the_page_is_drawn_is_shown(monkeypatch):
    """A side built while the page's widgets are being made shows its strategy, not
    "Building…" for good.

    The page is drawn when its tab first opens, while the builds of its first update run;
    an instant one (H2) used to finish between the side's widgets reading the page's state
    and their watching it (seen in a served page after Compare → ε = 2 → Gaussian →
    Strategy).  Here the left build is held until the left side's figures have been read,
    then given time to finish before the widgets watch the state.
    """
    session = Session()
    session.workload = dpx.workloads.prefix(32)
    reading = __import__("threading").Event()
    original_heatmaps = strategy_view.heatmaps

    def held_heatmaps(A, max_pixels=512):
        reading.wait(30)  # the build finishes only once the page is being drawn
        return original_heatmaps(A, max_pixels)
    monkeypatch.setattr(strategy_view, "heatmaps", held_heatmaps)
    view = StrategyView(session)  # builds in worker threads (no server: posted at once)
    assert view.left_busy
    original_stats = StrategyView.stats

    def stats(self, side):
        text = original_stats(self, side)
        if side == "left" and not reading.is_set():
            reading.set()
            deadline = time.monotonic() + 3  # the build finishes now, unless the page waits
            while self._jobs.pending and time.monotonic() < deadline:
                time.sleep(0.02)
        return text
    monkeypatch.setattr(StrategyView, "stats", stats)
    view.panel()
    assert view.wait(120)
    assert reading.is_set()
    assert view.left_info is not None and not view.left_busy
    shown = view._panes["left_stats"].object
    assert "Building" not in shown and "rows (queries measured)" in shown, shown
