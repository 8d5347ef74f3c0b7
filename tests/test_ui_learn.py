"""Tests of the Learn page (dpexplorer.ui.learn): lessons build, plot the engine's numbers,
follow the session's ε/δ, and report errors instead of raising."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dpexplorer as dpx
from dpexplorer import lessons

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from dpexplorer.ui import learn  # noqa: E402
from dpexplorer.ui.learn import LearnView  # noqa: E402
from dpexplorer.ui.session import Session  # noqa: E402

KEYS = ["noise", "strategy", "bound", "data"]


# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


@pytest.fixture
def session(monkeypatch):
    monkeypatch.delenv("DPEXPLORER_DPBENCH", raising=False)
    return Session()


@pytest.fixture
def view(session):
    return LearnView(session)


def _elements(obj, kind):
    """All elements of type ``kind`` inside a HoloViews Overlay/Layout."""
    return [e for e in obj.traverse(lambda x: x, [kind])]


# ------------------------------------------------------------------ build
def test_page_builds_and_first_lesson_is_drawn(view, session):
    assert list(view.lessons) == KEYS
    assert view.active == 0 and view.current is view.lesson("noise")
    assert view.lesson("noise").result is not None
    # hidden lessons are not computed until opened
    assert all(view.lesson(k).result is None and view.lesson(k).stale for k in KEYS[1:])
    assert view.__panel__().get_root() is not None
    assert session.error == ""


@pytest.mark.parametrize("key", KEYS)
def test_each_lesson_builds(view, session, key):
    lesson = view.show(key)
    assert view.current is lesson and view.tabs.active == KEYS.index(key)
    assert lesson.error == "" and session.error == "" and not lesson.stale
    assert lesson.result is not None
    fig = lesson.figure()
    assert isinstance(fig, hv.core.Dimensioned)
    assert lesson.summary()
    layout = lesson.panel()
    assert layout.get_root() is not None
    panes = layout.select(pn.pane.HoloViews)
    assert len(panes) == 1 and not isinstance(panes[0].object, hv.Curve)  # not the placeholder
    alerts = layout.select(pn.pane.Alert)
    assert len(alerts) == 1 and not alerts[0].visible


def test_page_in_the_app(session):
    from dpexplorer.ui.app import PAGES, ExplorerApp

    app = ExplorerApp(session)
    assert "Learn" not in app.pages  # built when first opened
    app.tabs.active = [t for t, _, _ in PAGES].index("Learn")
    page = app.pages["Learn"]
    assert isinstance(page, LearnView) and page.session is session
    # while hidden, a session change only marks the open lesson stale; shown again, it refreshes
    app.tabs.active = 0
    before = page.current.result
    session.epsilon = 0.25
    assert page.current.stale and page.current.result is before
    app.tabs.active = [t for t, _, _ in PAGES].index("Learn")
    assert not page.current.stale and page.current.result is not before


# ---------------------------------------------------- lesson 1: noise
@pytest.mark.parametrize("eps,delta,sens", [(1.0, 1e-6, 1.0), (0.3, 1e-5, 2.5), (4.0, 0.01, 0.2)])
def test_noise_densities_match_engine(view, session, eps, delta, sens):
    lesson = view.lesson("noise")
    session.param.update(epsilon=eps, delta=delta)
    lesson.sensitivity = sens
    r = lesson.result
    lap, gau = dpx.Laplace(eps), dpx.Gaussian(eps, delta, session.calibration)
    assert session.calibration == "zcdp"  # the app's default: what releases use
    assert r["laplace_std"] ** 2 == pytest.approx(lap.variance(sens), rel=1e-12)
    assert r["gaussian_std"] ** 2 == pytest.approx(gau.variance(sens), rel=1e-12)
    assert r["laplace_scale"] == pytest.approx(sens / eps, rel=1e-12)
    assert r["gaussian_sigma"] == pytest.approx(sens * gau.sigma_per_unit, rel=1e-12)
    session.calibration = "analytic"
    assert lesson.result["gaussian_sigma"] == pytest.approx(
        sens * dpx.noise.analytic_gaussian_sigma(eps, delta), rel=1e-12)
    session.calibration = "zcdp"

    curves = _elements(lesson.figure(), hv.Curve)
    assert len(curves) == 2
    for curve, key, noise in zip(curves, ["laplace", "gaussian"], [lap, gau], strict=True):
        z, f = curve.dimension_values(0), curve.dimension_values(1)
        want = r["frame"][r["frame"]["noise"] == key]
        np.testing.assert_array_equal(z, want["z"].to_numpy())
        np.testing.assert_array_equal(f, want["density"].to_numpy())
        assert np.trapezoid(f, z) == pytest.approx(1.0, rel=2e-3)
        # the plotted density has the engine's variance (tails beyond ±8 std are cut)
        assert np.trapezoid(z**2 * f, z) == pytest.approx(noise.variance(sens), rel=5e-3)
        assert np.trapezoid(z * f, z) == pytest.approx(0.0, abs=1e-9 * noise.variance(sens))
    lines = _elements(lesson.figure(), hv.VLine)
    assert sorted(abs(line.data) for line in lines) == pytest.approx(
        sorted([r["laplace_std"]] * 2 + [r["gaussian_std"]] * 2))


# ------------------------------------------------- lesson 2: strategies
@pytest.mark.parametrize("noise", ["Laplace", "Gaussian"])
def test_rmse_curve_equals_engine(view, session, noise):
    session.param.update(noise=noise, epsilon=0.8)
    lesson = view.show("strategy")
    model = session.noise_model()
    grid = lesson.result["grid"]
    assert sorted(grid["n"].unique()) == [16, 32, 64, 128, 256, 512, 1024]
    for row in grid.itertuples():
        W = dpx.workloads.all_range(row.n)
        A = dpx.registry.get(row.mechanism).strategy(W, model)
        assert row.rmse == pytest.approx(dpx.rmse(W, A, model), rel=1e-12), row
    # the plotted curves are these numbers
    curves = _elements(lesson.figure(), hv.Curve)
    labelled = {c.label: c for c in curves[: len(lessons.STRATEGIES)]}
    for name, label in lessons.STRATEGIES.items():
        sub = grid[grid["mechanism"] == name]
        np.testing.assert_array_equal(labelled[label].dimension_values("rmse"), sub["rmse"].to_numpy())
        np.testing.assert_array_equal(labelled[label].dimension_values("n"), sub["n"].to_numpy())


def test_per_query_example_equals_engine(view, session):
    lesson = view.show("strategy")
    lesson.example_n = 16
    model = session.noise_model()
    W = dpx.workloads.all_range(16)
    lo, hi = W.ranges()
    for name in lessons.STRATEGIES:
        A = dpx.registry.get(name).strategy(W, model)
        want = dpx.per_query_rmse(W, A, model)
        np.testing.assert_allclose(lesson.result["per_query"][name], want, rtol=1e-12)
        pw = lesson.result["per_width"]
        got = pw[pw["mechanism"] == name].set_index("width")["rmse"]
        for w in (1, 5, 16):
            assert got[w] == pytest.approx(math.sqrt(np.mean(want[hi - lo + 1 == w] ** 2)), rel=1e-12)
    # the "first half" example is the range [0, n/2 - 1]
    q = lesson.result["half_query"]
    assert (lo[q], hi[q]) == (0, 7)


# ------------------------------------------------------ lesson 3: bound
@pytest.mark.parametrize("workload,noise", [("all_range", "Laplace"), ("prefix", "Gaussian"),
                                            ("width_range", "Laplace")])
def test_svd_bound_equals_engine(view, session, workload, noise):
    session.param.update(noise=noise, epsilon=0.6)
    lesson = view.show("bound")
    lesson.param.update(workload=workload, n=64)
    model = session.noise_model()
    W = {"all_range": dpx.workloads.all_range(64), "prefix": dpx.workloads.prefix(64),
         "width_range": dpx.workloads.width_range(64, 32)}[workload]
    r = lesson.result
    assert r["bound"] == pytest.approx(dpx.svd_bound(W, model), rel=1e-12)
    table = r["table"].dropna(subset=["rmse"])
    expected = dpx.compare(W, model, mechanisms=dpx.registry.names(data_dependent=False))
    want = expected.set_index("mechanism")["rmse"]
    for row in table.itertuples():
        assert row.rmse == pytest.approx(want[row.mechanism], rel=1e-12)
        assert row.rmse >= r["bound"] * (1 - 1e-9)  # nothing goes below the bound
        assert row.ratio == pytest.approx(row.rmse / r["bound"], rel=1e-12)
    line = _elements(lesson.figure(), hv.HLine)
    assert len(line) == 1 and line[0].data == pytest.approx(r["bound"], rel=1e-12)
    bars = _elements(lesson.figure(), hv.Bars)[0]
    np.testing.assert_array_equal(bars.dimension_values("rmse"), table["rmse"].to_numpy())
    assert "No matrix-mechanism strategy" in lesson.text or "no matrix-mechanism strategy" in lesson.summary()


def test_bound_uses_session_workload(view, session):
    lesson = view.show("bound")
    session.workload = dpx.workloads.prefix(32)
    lesson.workload = "session"
    assert lesson.result["n"] == 32 and lesson.result["workload"] == session.workload.name
    assert lesson.result["bound"] == pytest.approx(
        dpx.svd_bound(session.workload, session.noise_model()), rel=1e-12)


# ------------------------------------------------------- lesson 4: data
def test_data_lesson_is_a_simulation_matching_the_engine(view, session):
    session.seed = 3
    lesson = view.show("data")
    lesson.trials = 2
    r = lesson.result
    table = r["table"]
    assert len(table) == 2 * len(lessons.SIM_MECHANISMS)
    assert set(table["role"]) == {"easy", "hard"}
    assert len(session.ledger) == 0  # throwaway ledgers: nothing spent in the session
    W = dpx.workloads.all_range(256)
    x = lessons.easy_histogram(256)
    np.testing.assert_array_equal(r["data"]["easy"]["x"], x)
    # recompute the MAE of Identity and DAWA with the documented seeds
    for name, params in [("identity", {}), ("dawa", {"penalty": lesson.penalty})]:
        errs, first = [], None
        for t in range(2):
            rng = np.random.default_rng(np.random.SeedSequence([3, t]))
            est = dpx.mechanism.run(name, dpx.PrivateData(x), W, dpx.Laplace(session.epsilon), rng,
                                    **params)
            errs.append(np.mean(np.abs(W.matvec(est.x_hat) - W.matvec(x))))
            first = est if first is None else first
        got = table[(table["role"] == "easy") & (table["mechanism"] == name)]["mae"].item()
        assert got == pytest.approx(np.mean(errs), rel=1e-9)
        if name == "dawa":
            np.testing.assert_allclose(r["data"]["easy"]["x_hat"], first.x_hat, rtol=1e-12)
    # the plot shows the histograms, DAWA's estimate and the MAE bars
    fig = lesson.figure()
    hists = _elements(fig, hv.Histogram)
    assert len(hists) == 2
    np.testing.assert_array_equal(hists[0].dimension_values("count"), x)
    curves = _elements(fig, hv.Curve)
    np.testing.assert_array_equal(curves[0].dimension_values("count"), r["data"]["easy"]["x_hat"])
    bars = _elements(fig, hv.Bars)[0]
    np.testing.assert_array_equal(bars.dimension_values("mae"), table["mae"].to_numpy())
    assert bars.opts.get().kwargs["title"].startswith("Simulation")
    # the pane holds both rows of plots: nothing drawn over the text below (it was)
    pane = lesson.panel().select(pn.pane.HoloViews)[0]
    assert pane.height >= 2 * lesson.plot_height


def test_dpbench_pair(dpbench_dir):
    session = Session(dpbench_dir=str(dpbench_dir))
    view = LearnView(session)
    lesson = view.show("data")
    assert "dpbench" in lesson.param.pair.objects.values() or "dpbench" in list(lesson.param.pair.objects)
    lesson.param.update(pair="dpbench", trials=1)
    r = lesson.result
    assert lesson.error == "" and {d["name"] for d in r["data"].values()} == {"NETTRACE", "HEPTH"}
    for d in r["data"].values():
        assert d["x"].size == 256
        assert d["x"].sum() == dpx.datasets.load_dpbench(d["name"], dpbench_dir).sum()


def test_missing_dpbench_hides_the_pair(tmp_path, monkeypatch):
    monkeypatch.setattr(dpx.datasets, "default_dpbench_dir", lambda: None)
    session = Session(dpbench_dir="")
    lesson = LearnView(session).lesson("data")
    assert list(lesson.param.pair.objects.values()) == ["synthetic"]
    with pytest.raises(ValueError):  # the selector (and so its widget) does not offer it
        lesson.pair = "dpbench"
    assert lesson.pair == "synthetic"
    assert lesson.panel().select(pn.widgets.Select)[0].options == {"Synthetic: steps vs spikes": "synthetic"}


# ---------------------------------------------- reactivity to the session
def test_epsilon_updates_the_open_lesson_and_marks_others_stale(view, session):
    noise = view.lesson("noise")
    pane = noise.panel().select(pn.pane.HoloViews)[0]
    before_fig, before_std = pane.object, noise.result["laplace_std"]
    session.epsilon = 0.5
    assert noise.result["epsilon"] == 0.5
    assert noise.result["laplace_std"] == pytest.approx(2 * before_std)
    assert pane.object is not before_fig
    assert "ε = 0.5" in pane.object.opts.get().kwargs["title"]
    # hidden lessons recompute when opened
    strategy = view.lesson("strategy")
    assert strategy.stale
    view.show("strategy")
    assert not strategy.stale
    grid = strategy.result["grid"]
    W = dpx.workloads.all_range(64)
    assert grid[(grid["n"] == 64) & (grid["mechanism"] == "identity")]["rmse"].item() == pytest.approx(
        dpx.rmse(W, dpx.strategies.identity(64), dpx.Laplace(0.5)), rel=1e-12)


def test_epsilon_updates_every_lesson(view, session):
    for key in KEYS:
        view.show(key)
    results = {k: view.lesson(k).result for k in KEYS}
    session.epsilon = 2.0
    for key in KEYS:
        lesson = view.show(key)
        assert lesson.result is not results[key]
    assert view.lesson("noise").result["epsilon"] == 2.0
    assert view.lesson("data").result["epsilon"] == 2.0
    assert view.lesson("bound").result["noise"] == dpx.Laplace(2.0)
    assert view.lesson("strategy").result["noise"] == dpx.Laplace(2.0)
    # Laplace: RMSE ∝ 1/ε
    new = view.lesson("bound").result["bound"]
    assert new == pytest.approx(results["bound"]["bound"] / 2.0, rel=1e-12)


def test_delta_and_noise_drive_gaussian(view, session):
    session.param.update(noise="Gaussian", delta=1e-3)
    lesson = view.show("bound")
    assert lesson.result["noise"] == dpx.Gaussian(1.0, 1e-3, "zcdp")
    noise = view.show("noise")
    assert noise.result["delta"] == 1e-3
    assert noise.result["gaussian_sigma"] == pytest.approx(dpx.Gaussian(1.0, 1e-3, "zcdp").sigma_per_unit)


def test_seed_reruns_the_simulation(view, session):
    lesson = view.show("data")
    lesson.trials = 1
    a = lesson.result["table"]["mae"].to_numpy()
    session.seed = 11
    b = lesson.result["table"]["mae"].to_numpy()
    assert lesson.result["seed"] == 11 and not np.array_equal(a, b)


# ------------------------------------------------------------- errors
def test_engine_error_is_reported_not_raised(view, session, monkeypatch):
    lesson = view.show("bound")
    good = lesson.result
    pane = lesson.panel().select(pn.pane.HoloViews)[0]
    shown = pane.object

    def boom(*args, **kwargs):
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(lessons, "compare", boom)  # what the SVD-bound lesson calls
    session.epsilon = 0.25  # triggers a refresh of the open lesson
    assert "engine exploded" in session.error and "engine exploded" in lesson.error
    assert lesson.result is good and pane.object is shown  # last good plot stays
    alert = lesson.panel().select(pn.pane.Alert)[0]
    assert alert.visible and "engine exploded" in alert.object
    monkeypatch.undo()
    assert lesson.refresh() and lesson.error == "" and not alert.visible
    assert lesson.result["noise"] == dpx.Laplace(0.25)


@pytest.mark.parametrize("key,target", [("noise", "noise_densities"), ("strategy", "rmse_grid"),
                                        ("data", "simulate_all_range")])
def test_every_lesson_reports_errors(view, session, monkeypatch, key, target):
    def boom(*args, **kwargs):
        raise ValueError(f"bad {key}")

    monkeypatch.setattr(lessons, target, boom)  # the engine functions the lessons call
    lessons.clear_cache()
    lesson = view.show(key)
    assert lesson.refresh() is False
    assert session.error.endswith(f"bad {key}") and lesson.error == f"bad {key}"


def test_missing_session_workload_is_reported(view, session):
    lesson = view.show("bound")
    session.workload = None
    lesson.workload = "session"
    assert "no workload" in session.error
    assert lesson.result is not None  # the previous result stays


def test_bad_epsilon_in_sidebar_never_reaches_lessons(view, session):
    controls = session.controls()
    eps = [w for w in controls.select(pn.widgets.FloatInput) if "ε" in str(getattr(w, "label", w.name))][0]
    before = view.lesson("noise").result
    eps.value = -1.0
    assert session.epsilon == 1.0
    assert view.lesson("noise").error == "" and view.lesson("noise").result["epsilon"] == 1.0
    assert view.lesson("noise").result is before or view.lesson("noise").result["epsilon"] == 1.0


# ------------------------------------------------------------------ served: lessons as tasks
def test_a_served_lesson_refreshes_as_a_task_of_the_page(monkeypatch, session):
    """Served, a lesson's refresh is a task of the Learn page: it returns at once (the click's
    thread is not held: the SVD-bound lesson compares every data-independent strategy,
    optimisers included), the lesson shows busy, a refresh asked for meanwhile runs once after
    it with the inputs of then, and a failure is shown in the lesson's alert.  (Before, the
    refresh ran in the caller's thread: the 5 s check failed.)"""
    import threading
    import time

    started, go = threading.Event(), threading.Event()
    real = learn.NoiseLesson.compute
    calls = []

    def held(self):
        calls.append(self.session.epsilon)
        started.set()
        go.wait(10)
        return real(self)
    monkeypatch.setattr(learn.NoiseLesson, "compute", held)
    view = LearnView(session, background=True)  # as served
    lesson = view.lesson("noise")
    lesson.panel()
    assert started.wait(10) and lesson.panel().loading  # the first draw, under way
    t0 = time.monotonic()
    session.epsilon = 0.5           # asked for while the first runs: once, after it
    lesson.refresh()
    assert time.monotonic() - t0 < 5, "the refresh ran in the caller's thread"
    go.set()
    assert view.wait(60)
    deadline = time.monotonic() + 30
    while (lesson.panel().loading or lesson.stale) and time.monotonic() < deadline:
        view.wait(5)
        time.sleep(0.05)
    assert calls == [1.0, 0.5] and not lesson.panel().loading
    assert lesson.result["epsilon"] == 0.5 and lesson.error == ""  # drawn with the inputs of then
    assert "b = Δ/ε = 2," in lesson._summary.object  # shown: Laplace scale at ε = 0.5

    def broken(self):
        raise ValueError("no such noise")
    monkeypatch.setattr(learn.NoiseLesson, "compute", broken)
    assert lesson.refresh() is True and view.wait(60)
    deadline = time.monotonic() + 10
    while not lesson.error and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lesson.error == "no such noise" and "no such noise" in session.error
