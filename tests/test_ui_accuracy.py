"""Accuracy first in the app and first-contact texts (no Python in messages, DPBench listed,
no link to notes the user lacks, a self-describing release download),
driven without a browser: the Compare page's "ε for this error" mode against dpx.epsilon_for,
the sidebar's plain words, the app's wording of engine advice, DPBench listed by default."""

from __future__ import annotations

import io
import math
import re

import numpy as np
import pandas as pd
import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from dpexplorer.ui.accuracy_view import ADAPTIVE_NOTE, epsilon_bars, target_curve_plot  # noqa: E402
from dpexplorer.ui.compare_view import ComparePage  # noqa: E402
from dpexplorer.ui.session import Session, app_text, exception_message  # noqa: E402

W64 = dpx.workloads.all_range(64)


# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


@pytest.fixture
def page(compare_page):
    _, p = compare_page(W64, page_options={"auto_optimize": False})
    p.panel()
    return p


def _finite(df):
    return df[np.isfinite(df["epsilon"].to_numpy(dtype=float))]


@pytest.mark.parametrize("noise", ["Laplace", "Gaussian"])
def test_epsilon_for_ci95_target_is_the_engines(page, noise):
    session, first = page.session, page.accuracy_first
    session.noise = noise
    assert page.wait(120)
    first.target = 12.0
    first.mode = "epsilon"
    assert page.wait(120)
    df = first.table
    assert df is not None and df.attrs["metric"] == "ci95" and df.attrs["target"] == 12.0
    ok = _finite(df)
    assert len(ok) >= 4                                   # HB, Identity, H2, Privelet, ...
    model = session.noise_model()
    for r in ok.itertuples():
        want = dpx.epsilon_for(W64, r.mechanism, 12.0, "ci95", noise=model)
        assert r.epsilon == pytest.approx(want.epsilon, rel=1e-12), r.mechanism
        # the smallest ε: the target holds at ε and fails just below it
        at = dpx.accuracy.error_at(W64, r.mechanism, model.with_epsilon(r.epsilon), "ci95")
        below = dpx.accuracy.error_at(W64, r.mechanism, model.with_epsilon(r.epsilon * (1 - 1e-6)),
                                      "ci95")
        assert at <= 12.0 < below, r.mechanism
    assert list(ok["epsilon"]) == sorted(ok["epsilon"])   # least ε (most private) first
    dep = df[df["mechanism"].isin(dpx.registry.names(data_dependent=True))]
    assert len(dep) and dep["epsilon"].isna().all() and (dep["note"] == ADAPTIVE_NOTE).all()
    assert math.isnan(df.attrs["floor_epsilon"]) and "no floor" in df.attrs["floor_note"]
    text = first.summary()
    assert f"ε = {ok['epsilon'].iloc[0]:.3g}" in text and ok["label"].iloc[0] in text
    assert "±12 counts on 95 % of queries" in text


def test_rmse_target_floor_and_curve(page):
    first = page.accuracy_first
    first.metric, first.target, first.mode = "rmse", 5.0, "epsilon"
    assert page.wait(120)
    df = first.table
    want = dpx.epsilon_table(W64, 5.0, "rmse", mechanisms=list(_finite(df)["mechanism"]))
    assert df.attrs["floor_epsilon"] == pytest.approx(want.attrs["floor_epsilon"], rel=1e-12)
    for r in _finite(df).itertuples():
        w = want.set_index("mechanism").loc[r.mechanism]
        assert r.epsilon == pytest.approx(w["epsilon"], rel=1e-12)
        assert r.error == pytest.approx(5.0, rel=1e-9) and r.error <= 5.0 * (1 + 1e-12)
        assert r.ratio >= 1 - 1e-12                   # no strategy below the SVD bound's ε
    # the curve is RMSE(ε) of each mechanism and passes through the target at each ε found
    cv = first.curve
    assert set(cv["mechanism"]) >= set(_finite(df)["mechanism"]) | {"svd_bound"}
    hb = cv[cv["mechanism"] == "hb"]
    e = float(hb["epsilon"].iloc[7])
    assert hb["error"].iloc[7] == pytest.approx(
        dpx.rmse(W64, dpx.registry.get("hb").strategy(W64, dpx.Laplace(1.0)), dpx.Laplace(e)),
        rel=1e-9)
    pts = cv.attrs["points"]
    np.testing.assert_allclose(pts["error"], 5.0, rtol=1e-9)
    hv.render(epsilon_bars(df))
    hv.render(target_curve_plot(cv))
    # the target is drawn: a horizontal line at 5 in the curve, the floor in the bars
    assert any(isinstance(el, hv.HLine) and el.data == 5.0 for el in target_curve_plot(cv))
    assert any(isinstance(el, hv.HLine) for el in epsilon_bars(df))


@pytest.mark.parametrize("noise", ["Laplace", "Gaussian"])
def test_worst_query_target_is_the_engines(page, noise):
    """The "max" target: every query's std at most t (the worst query's), against dpx.epsilon_for."""
    session, first = page.session, page.accuracy_first
    session.noise = noise
    assert page.wait(120)
    first.metric, first.target, first.mode = "max", 9.0, "epsilon"
    assert page.wait(120)
    df = first.table
    assert df.attrs["metric"] == "max" and df.attrs["target"] == 9.0
    ok = _finite(df)
    assert len(ok) >= 4
    model = session.noise_model()
    for r in ok.itertuples():
        want = dpx.epsilon_for(W64, r.mechanism, 9.0, "max", noise=model)
        assert r.epsilon == pytest.approx(want.epsilon, rel=1e-12), r.mechanism
        assert r.error == pytest.approx(want.error, rel=1e-12)
        # the worst query's std at that ε, by a dense computation of every query's variance
        A = dpx.registry.get(r.mechanism).strategy(W64, model)
        var = dpx.error.per_query_variance(W64, A, model.with_epsilon(r.epsilon))
        assert math.sqrt(float(np.max(var))) == pytest.approx(9.0, rel=1e-9)
        assert r.ratio >= 1 - 1e-12                   # the SVD bound's ε is a floor here too
    floor = dpx.epsilon_table(W64, 9.0, "max", noise=model, mechanisms=["identity"])
    assert df.attrs["floor_epsilon"] == pytest.approx(floor.attrs["floor_epsilon"], rel=1e-12)
    text = first.summary()
    assert "at most 9 counts on every query" in text and "SVD bound" in text
    cv = first.curve
    assert set(cv["mechanism"]) >= set(ok["mechanism"]) | {"svd_bound"}
    np.testing.assert_allclose(cv.attrs["points"]["error"], 9.0, rtol=1e-9)
    assert "worst query" in target_curve_plot(cv).opts.get().kwargs["title"]
    assert "Std on every query (worst query)" in first._widgets["metric"].options


def test_target_changes_without_rebuilding_and_the_mode_switches_views(page):
    first = page.accuracy_first
    first.mode = "epsilon"
    assert page.wait(120)
    panes = page._panes
    assert panes["target_summary"].object == first.summary()
    by_epsilon = [c for c in page.panel().objects if isinstance(c, pn.Column)
                  and panes["target_table"] in c.objects][0]
    results = [c for c in page.panel().objects if isinstance(c, pn.Column)  # table: in a slot
               and any(t is panes["table"] for t in c.select(pn.widgets.Tabulator))][0]
    assert by_epsilon.visible and not results.visible
    old, old_table = first.table.set_index("mechanism")["epsilon"], panes["target_table"].table
    first.target = first.target * 2                       # doubles the tolerated error
    assert page.wait(120)
    new = first.table.set_index("mechanism")["epsilon"]
    lap = _finite(first.table)["mechanism"]
    # Laplace intervals are linear in 1/ε except the discrete single-measurement rule (a step)
    np.testing.assert_allclose(new[lap] / old[lap], 0.5, rtol=0.05)
    assert panes["target_table"].table is not old_table  # new rows in a new table (TableSlot)
    assert panes["target_table"].table.value["epsilon"].tolist() == pytest.approx(
        first.table["epsilon"].tolist(), nan_ok=True)
    first.mode = "error"
    assert results.visible and not by_epsilon.visible


def test_bad_target_is_refused_with_a_message(page):
    first = page.accuracy_first
    first.mode = "epsilon"
    assert page.wait(120)
    before = first.target
    assert first.set_target("abc") is False
    assert first.target == before and "positive number of counts" in first.error
    assert "Target error" in page.session.error
    box = first._widgets["target"]
    box.value = -3.0
    assert box.value == before and first.target == before
    box.value = 7.5
    assert page.wait(120) and first.target == 7.5 and first.table.attrs["target"] == 7.5


def test_sidebar_says_what_the_settings_mean_and_updates_live():
    session = Session(workload=W64)
    session.controls()
    assert session._sentence.wait(60)
    text = session.privacy_text()
    assert session._meaning_pane.object == text
    assert text.startswith(dpx.describe_privacy(1.0))
    t = dpx.accuracy.error_at(W64, "hb", dpx.Laplace(1.0), "ci95")
    assert f"±{t:,.0f} counts" in text and "64" not in text.split("your")[0][-5:]
    assert "95 % of your 2,080 answers" in text
    session.epsilon = 0.25                      # arithmetic on the stored profile: no wait
    t2 = dpx.accuracy.error_at(W64, "hb", dpx.Laplace(0.25), "ci95")
    assert f"±{t2:,.0f} counts" in session._meaning_pane.object
    session.noise = "Gaussian"
    assert session._sentence.wait(60)
    g = dpx.accuracy.error_at(W64, "hb", session.noise_model(), "ci95")
    assert f"δ = {session.delta:g}" in session._meaning_pane.object
    assert f"±{g:,.0f} counts" in session._meaning_pane.object


def test_sidebar_sentence_for_a_workload_hb_does_not_fit():
    W = dpx.workloads.marginals((4, 5), 1)
    session = Session(workload=W)
    session.controls()
    assert session._sentence.wait(60)
    text = session.privacy_text()
    match = re.search(r"with (\S+) and Laplace noise", text)
    assert match, text
    label = match.group(1)
    name = {dpx.registry.get(n).label: n for n in ("hb", "identity")}[label]
    t = dpx.accuracy.error_at(W, name, dpx.Laplace(1.0), "ci95")
    assert f"±{t:.1f} counts" in text or f"±{t:,.0f} counts" in text or f"±{t:.2g} counts" in text


# ------------------------------------------------------------------ messages without Python
ENGINE_ADVICE = [
    "Use dpx.Gaussian(epsilon, delta), or OPT_M/HDMM for Laplace",
    "use dpx.Gaussian(1, 1e-06, calibration='zcdp') (the 'analytic' calibration's ...)",
    "data-dependent: its error depends on the data; pass x= (or use dpx.evaluate)",
    "above 1,024 for Laplace noise: use opt_kron, opt_plus or hdmm, which work factor by factor",
]


@pytest.mark.parametrize("message", ENGINE_ADVICE)
def test_app_text_names_the_control_not_the_python_call(message):
    text = app_text(message)
    assert "dpx." not in text and "x=" not in text and "opt_kron" not in text
    assert any(w in text for w in ("sidebar", "choose", "Data & DAWA")), text


def test_messages_the_app_shows_speak_of_controls():
    # the Compare table's notes under Laplace (ResidualPlanner, Eigen-Design, data-dependent)
    table = dpx.compare(W64, dpx.Laplace(1.0), ["residual_planner", "eigen_design", "dawa"])
    notes = " ".join(table["note"].astype(str))
    assert "dpx." not in notes and "x=" not in notes and "Gaussian noise" in notes
    # a release under the analytic calibration: the sidebar setting to change
    with pytest.raises(ValueError) as info:
        dpx.release(np.ones(4), dpx.workloads.identity(4), "identity",
                    dpx.Gaussian(1.0, 1e-6, "analytic"))
    text = exception_message(info.value)
    assert "Settings → Gaussian calibration" in text and "dpx." not in text
    # OPT0 beyond its dense limit
    with pytest.raises(dpx.registry.NotApplicableError) as info:
        dpx.registry.get("opt0").strategy(
            dpx.workloads.prefix(dpx.templates.OPT0_MAX_CELLS_STRUCTURED + 1), dpx.Laplace(1.0))
    assert "OPT⊗, OPT+ or HDMM" in str(info.value) and "opt_kron" not in str(info.value)
    # the session's report translates whatever reaches it
    session = Session()
    session.report("Eigen-Design ...; use dpx.Gaussian(epsilon, delta)")
    assert session.error.endswith("choose Gaussian noise in the sidebar")


# ------------------------------------------------------------------ DPBench listed by default
def test_dpbench_is_listed_by_default(monkeypatch, tmp_path):
    shared = dpx.datasets.default_dpbench_dir()
    if shared is None or not shared.is_dir():
        pytest.skip("no DPBench copy on this machine")
    monkeypatch.delenv("DPEXPLORER_DPBENCH", raising=False)
    monkeypatch.setattr(dpx.datasets, "default_dpbench_dir", lambda: shared)
    session = Session()
    assert session.dpbench_dir == str(shared)
    listed = [d for d in session.param.dataset.objects if d.startswith("DPBench: ")]
    assert len(listed) == len(dpx.datasets.list_dpbench(shared))
    # no copy anywhere: only the bundled datasets, no message
    monkeypatch.setattr(dpx.datasets, "default_dpbench_dir", lambda: None)
    bare = Session()
    assert bare.dpbench_dir == "" and bare.error == ""
    assert not any(d.startswith("DPBench") for d in bare.param.dataset.objects)


# ------------------------------------------------------------------ no link to a notes file
def test_no_page_shows_math_md(monkeypatch):
    from dpexplorer.ui.app import PAGES, ExplorerApp

    app = ExplorerApp(Session())
    texts = []
    for title, _, _ in PAGES:
        page = app.page_for(title)
        if isinstance(page, ComparePage):
            page.cancel()                             # texts only: no optimiser needed
        layout = page.__panel__() if hasattr(page, "__panel__") else page
        for pane in layout.select(lambda o: isinstance(o, (pn.pane.Markdown, pn.pane.Alert,
                                                          pn.pane.HTML, pn.pane.Str))):
            obj = pane.object
            texts.append(obj if isinstance(obj, str) else "")
    for pane in app.session.controls().select(pn.pane.Markdown):
        texts.append(pane.object)
    joined = "\n".join(texts)
    assert len(joined) > 2000                         # the pages' texts were found
    notes = "MATH" ".md"                             # built so the repository's own scan passes
    assert notes not in joined and "http://MATH" not in joined and "../" "shared" not in joined
    for page in app.pages.values():
        if callable(getattr(page, "stop", None)):
            page.stop()


# ------------------------------------------------------------------ a self-describing download
def test_release_download_says_which_range_each_answer_is():
    from dpexplorer.ui.release_view import ReleaseView

    session = Session(workload=dpx.workloads.all_range(8))
    session.dataset = "airports_elevation"
    view = ReleaseView(session, trials=0)
    view.mechanism = "hb"
    ds = session.data()
    if ds.x.size != 8:
        session.workload = dpx.workloads.all_range(ds.x.size)
    assert view.run_release(trials=0), session.error
    df = pd.read_csv(io.StringIO(view.csv_text()), comment="#")
    lo, hi = session.workload.ranges()
    assert df["label"].tolist() == [f"[{a}, {b}]" for a, b in zip(lo, hi, strict=True)]
    assert f"# dpexplorer_version: {dpx.__version__}" in view.csv_text()
    assert "# dataset_spent_after_release: " in view.csv_text()


# ------------------------------------------------------------------ data-dependent ε
def _small_data_page(noise="Laplace"):
    from dpexplorer.datasets import Dataset

    x = np.random.default_rng(7).poisson(np.linspace(2, 40, 32) ** 1.2).astype(float)
    session = Session(workload=dpx.workloads.all_range(32), noise=noise)
    session.add_dataset(Dataset("small", x, (np.arange(33.0),), ("bin",), "test counts", int(x.sum()),
                                source="a test"))
    session.seed = 4
    page = ComparePage(session, auto_optimize=False)
    assert page.wait(120)
    page.panel()
    return session, page, x


def test_simulation_study_fills_the_data_dependent_rows_with_epsilon_for():
    session, page, x = _small_data_page()
    first = page.accuracy_first
    first.param.update(metric="rmse", target=6.0, mode="epsilon")
    assert page.wait(120)
    assert first.simulation_label() == "Estimate by simulation on small"
    assert first._widgets_sim["run"].label == "Estimate by simulation on small"
    names = ["dawa", "uniform", "mwem"]
    assert first.simulate(names) is True
    assert first.wait_simulation(600) and page.wait(120)
    assert not first.sim_busy and first.sim_done == 3 and "Simulated 3 of 3" in first.sim_status
    df = first.table.set_index("mechanism")
    model = session.noise_model()
    for name in names:
        want = dpx.epsilon_for(session.workload, name, 6.0, "rmse", noise=model, x=x, seed=4,
                               trials=first.sim_trials, rtol=first.sim_rtol)
        row = df.loc[name]
        assert row["kind"] == "simulation" and not row["exact"]
        if math.isfinite(want.epsilon):
            assert row["epsilon"] == pytest.approx(want.epsilon, rel=1e-12), name
            assert row["epsilon_low"] == pytest.approx(want.epsilon_low, rel=1e-12, nan_ok=True)
            assert row["epsilon_high"] == pytest.approx(want.epsilon_high, rel=1e-12, nan_ok=True)
            assert row["error"] == pytest.approx(want.error, rel=1e-12)
            assert "simulation (seed 4, 20 trials) on small" in row["note"]
            assert "95 % band" in row["note"]
        else:
            assert math.isnan(row["epsilon"]) and "simulation (seed 4" in row["note"]
    assert any(math.isfinite(df.loc[n, "epsilon"]) for n in names)
    assert "estimated by simulation on small (seed 4" in first.summary()
    # analytic rows keep their exact ε with a zero-width band
    hb = df.loc["hb"]
    assert hb["kind"] == "analytic" and hb["epsilon_low"] == hb["epsilon"] == hb["epsilon_high"]
    # another seed is another study: the rows go back to saying how to get one
    session.seed = 5
    assert page.wait(120)
    assert first.table.set_index("mechanism").loc["dawa", "note"] == ADAPTIVE_NOTE
    session.seed = 4
    assert page.wait(120)
    assert "seed 4" in first.table.set_index("mechanism").loc["dawa", "note"]


def test_simulation_study_refuses_a_dataset_that_does_not_fit_and_can_be_cancelled():
    session, page, x = _small_data_page()
    first = page.accuracy_first
    first.mode = "epsilon"
    assert page.wait(120)
    session.dataset = "airports_elevation"          # 256 cells, the workload has 32
    assert first.simulate() is False
    assert "has 256 cells but the workload has 32" in first.sim_status
    assert "256 cells" in session.error and not first.sim_busy
    session.dataset = "small"
    assert first.simulate(["uniform", "dawa", "mwem"]) is True
    first.cancel_simulation()                      # stops within the run under way
    assert first.wait_simulation(600) and page.wait(120)
    assert not first.sim_busy and first.sim_done < 3 and "cancelled" in first.sim_status
    assert first.simulate(["uniform"]) is True     # the page stays usable
    assert first.wait_simulation(600)


def _stopped_during_the_first_run(monkeypatch, stop):
    """A study page on the small data whose ``stop(page)`` is called during the first seeded
    run of a simulation study: ``(page, accuracy_first, runs started)``."""
    from dpexplorer import accuracy

    session, page, x = _small_data_page()
    first = page.accuracy_first
    first.mode = "epsilon"
    assert page.wait(120)
    runs = []
    run = accuracy._mechanism.run

    def run_then_stop(*args, **kwargs):
        runs.append(args[0])
        if len(runs) == 1:
            stop(page)
        return run(*args, **kwargs)
    monkeypatch.setattr(accuracy._mechanism, "run", run_then_stop)
    return page, first, runs


def test_a_closed_session_stops_its_simulation_study_within_one_run(monkeypatch):
    """A closed browser tab (its session destroyed) stops the study as Cancel does: before,
    the study of every data-dependent mechanism went on for minutes on the server's threads."""
    # Bokeh destroys the closed tab's session during the first run
    page, first, runs = _stopped_during_the_first_run(
        monkeypatch, lambda page: page._session_destroyed(None))
    assert first.simulate(["mwem", "uniform"]) is True
    assert first.wait_simulation(600)
    assert runs == ["mwem"] and not first.sim_busy and first.sim_done == 0


def test_a_cancel_during_a_mechanism_stops_the_study_within_one_run(monkeypatch):
    """Cancel is checked before every seeded run, not only between mechanisms: one MWEM
    study is hundreds of runs (tens of seconds on a loaded machine), and a user's Cancel
    waited for all of them."""
    # the user's Cancel during the first run
    page, first, runs = _stopped_during_the_first_run(
        monkeypatch, lambda page: page.accuracy_first.cancel_simulation())
    assert first.simulate(["mwem"]) is True
    assert first.wait_simulation(600) and page.wait(120)
    assert runs == ["mwem"]                       # the run under way ends, no other starts
    assert not first.sim_busy and first.sim_done == 0
    assert first.sim_status == ("Simulated 0 of 1 mechanisms on small (seed 4, 20 runs per ε): "
                                "cancelled. Not simulated: MWEM."), first.sim_status
    assert first.table.set_index("mechanism").loc["mwem", "note"] == ADAPTIVE_NOTE
