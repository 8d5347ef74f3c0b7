"""Tests of the "Release" page (ReleaseView), driven without a browser."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from dpexplorer import mechanism  # noqa: E402
from dpexplorer.ui import release_view  # noqa: E402
from dpexplorer.ui.release_view import DataDependentRelease, ReleaseView  # noqa: E402
from dpexplorer.ui.session import Session  # noqa: E402


@pytest.fixture
def session():
    return Session()


@pytest.fixture
def view(session):
    return ReleaseView(session, trials=10)


def test_defaults():
    v = ReleaseView(Session())
    assert v.trials == 50
    assert set(dpx.registry.names()) <= set(v.param.mechanism.objects)


def test_release_adds_one_ledger_entry_with_session_seed(session, view):
    session.seed, session.epsilon = 7, 0.5
    view.mechanism = "hb"
    assert view.run_release() is True, session.error
    assert session.error == "" and view.error == ""
    entries = session.ledger.entries
    assert len(entries) == 1
    assert entries[0].seed == 7 and entries[0].epsilon == 0.5
    rel = view.last.release
    assert rel.seed == 7 and session.releases == [rel]
    assert session.seed == 8  # the next release draws fresh noise
    ref = dpx.release(session.data().x, session.workload, "hb", dpx.Laplace(0.5), seed=7)
    np.testing.assert_array_equal(rel.answers, ref.answers)
    np.testing.assert_array_equal(view.last.true_answers,
                                  session.workload.matvec(session.data().x))


def test_advance_seed_can_be_switched_off(session, view):
    view.advance_seed = False
    assert view.run_release(trials=0)
    assert session.seed == 0 and view.simulation is None


def test_gaussian_release(session, view):
    session.noise, session.delta, session.seed = "Gaussian", 1e-5, 4
    view.mechanism = "identity"
    assert view.run_release(trials=0)
    e = session.ledger.entries[0]
    assert e.delta == 1e-5 and e.seed == 4
    ref = dpx.release(session.data().x, session.workload, "identity", dpx.Gaussian(1.0, 1e-5), seed=4)
    np.testing.assert_array_equal(view.last.release.answers, ref.answers)


def test_trials_do_not_touch_session_ledger(session, view):
    view.mechanism = "identity"
    assert view.run_release(trials=25)
    assert len(session.ledger) == 1
    sim = view.simulation
    assert sim.trials == 25 and len(sim.ledger) == 25  # spent from the throwaway ledger
    assert sim.ledger is not session.ledger
    assert view.run_trials(30)
    assert len(session.ledger) == 1 and len(session.releases) == 1
    assert view.simulation.trials == 30
    # bands are ordered, and the shown queries are all of them (m = 32896 > MAX_SHOWN: a sample)
    s = view.simulation
    assert np.all(s.q05 <= s.q50) and np.all(s.q50 <= s.q95)
    assert len(s.shown) == release_view.MAX_SHOWN


def test_trial_seeds_derived_from_session_seed(session, view):
    view.mechanism = "hb"
    assert view.run_trials(5, seed=3)
    a = view.simulation.trial_rmse.copy()
    assert view.run_trials(5, seed=3)
    np.testing.assert_array_equal(view.simulation.trial_rmse, a)
    assert view.run_trials(5, seed=4)
    assert not np.array_equal(view.simulation.trial_rmse, a)
    # trial t uses SeedSequence([seed, TAG]).spawn(T)[t]: recompute trial 0 by hand
    child = np.random.SeedSequence([3, release_view.TRIAL_SEED_TAG]).spawn(5)[0]
    x, W = session.data().x, session.workload
    est = mechanism.run("hb", dpx.PrivateData(x), W, dpx.Laplace(1.0), np.random.default_rng(child))
    err = W.matvec(est.x_hat) - W.matvec(x)
    assert a[0] == pytest.approx(np.sqrt(np.mean(err**2)))
    assert len(session.ledger) == 0


def test_empirical_rmse_close_to_analytic(session, view):
    from dpexplorer.workloads import prefix
    session.workload = prefix(256)
    view.mechanism = "h2"
    assert view.run_release(trials=200)
    table = view.rmse_table().set_index("kind")
    analytic = table.loc["HDMM Prop. 4", "rmse"]
    assert analytic == pytest.approx(view.last.release.analytic_rmse)
    assert table.loc["empirical, simulation", "rmse"] == pytest.approx(analytic, rel=0.1)


def test_downloads_contain_metadata(session, view):
    session.seed, session.epsilon = 11, 2.0
    view.mechanism = "hb"
    assert view.run_release(trials=0)
    text = view.csv_text()
    header = [line for line in text.splitlines() if line.startswith("#")]
    meta = dict(line[2:].split(": ", 1) for line in header[1:])
    assert meta["mechanism"] == "hb" and meta["seed"] == "11" and meta["epsilon"] == "2.0"
    assert meta["delta"] == "0.0" and meta["noise"] == "Laplace"
    assert meta["noise_label"].startswith("Laplace") and meta["dataset"] == session.dataset
    assert json.loads(meta["workload_spec"])["name"] == "all_range"
    df = pd.read_csv(io.StringIO(text), comment="#")
    assert list(df.columns[:2]) == ["query", "answer"]
    np.testing.assert_allclose(df["answer"].to_numpy(), view.last.release.answers)
    doc = json.loads(view.json_text())
    for key in ("mechanism", "epsilon", "delta", "noise", "seed", "workload_spec", "answers"):
        assert key in doc
    assert doc["seed"] == 11 and doc["mechanism"] == "hb" and doc["dataset"] == session.dataset
    np.testing.assert_allclose(doc["answers"], view.last.release.answers)
    # the FileDownload widgets serve the same bytes
    layout = view.panel()
    downloads = layout.select(pn.widgets.FileDownload)
    assert {d.filename for d in downloads} == {"release_hb_eps2_seed11.csv",
                                               "release_hb_eps2_seed11.json"}
    csv_dl = [d for d in downloads if d.filename.endswith(".csv")][0]
    assert csv_dl.callback().read().decode() == text


def test_downloads_before_release_report(session, view):
    assert view._download(view.csv_text).read() == b""
    assert "no release yet" in session.error


def test_mismatched_workload_reports_error(session, view):
    session.workload = dpx.workloads.prefix(100)
    assert view.run_release() is False
    assert "100" in session.error and "256" in session.error and view.error == session.error
    assert len(session.ledger) == 0 and view.last is None and session.releases == []
    assert session.seed == 0
    assert view.run_trials(3) is False and "100" in session.error


def test_failed_release_keeps_last(session, view):
    assert view.run_release(trials=0)
    good = view.last
    session.dataset = dpx.datasets.DEFAULT_2D  # 4096 cells, workload over 256
    assert view.run_release() is False
    assert view.last is good and len(session.ledger) == 1


def test_data_dependent_release(session, view):
    session.seed = 9
    view.mechanism = "dawa"
    assert view.run_release(trials=5), session.error
    rel = view.last.release
    assert isinstance(rel, DataDependentRelease) and view.last.data_dependent
    entries = session.ledger.entries
    assert len(entries) == 2 and all(e.seed == 9 for e in entries)  # seed stamped
    assert session.ledger.epsilon == pytest.approx(1.0)
    x, W = session.data().x, session.workload
    est = mechanism.run("dawa", dpx.PrivateData(x), W, dpx.Laplace(1.0), np.random.default_rng(9))
    np.testing.assert_allclose(rel.x_hat, est.x_hat)
    np.testing.assert_allclose(rel.answers, W.matvec(est.x_hat))
    assert np.isnan(rel.analytic_rmse)
    table = view.rmse_table()
    assert table["kind"].str.contains("data-dependent").any()
    doc = json.loads(view.json_text())
    assert doc["mechanism"] == "dawa" and doc["seed"] == 9 and doc["data_dependent"] is True
    assert doc["info"]["buckets"] == est.info["buckets"]
    assert "# mechanism: dawa" in view.csv_text()
    assert len(session.ledger) == 2  # the simulation stayed outside


def test_data_dependent_with_gaussian_reports(session, view):
    session.noise = "Gaussian"
    view.mechanism = "dawa"
    assert view.run_release() is False
    assert "Laplace" in session.error and len(session.ledger) == 0


def test_budget_exceeded_is_reported(session, view):
    session.ledger.epsilon_budget = 0.5
    view.mechanism = "dawa"
    assert view.run_release() is False
    assert "budget" in session.error and len(session.ledger) == 0
    view.mechanism = "hb"
    assert view.run_release() is False and len(session.ledger) == 0


def test_answers_plot_and_layout(session, view):
    layout = view.panel()
    assert layout.get_root() is not None
    ledger_tables = [t for t in layout.select(pn.widgets.Tabulator) if "label" in t.value.columns]
    assert len(ledger_tables) == 1 and len(ledger_tables[0].value) == 0
    run = [b for b in layout.select(pn.widgets.Button)
           if getattr(b, release_view._LABEL) == "Run release"][0]
    run.clicks += 1
    assert view.last is not None and view.simulation is not None
    plot = view.answers_plot()
    assert {type(e) for e in plot} == {hv.Area, hv.Scatter, hv.Curve}
    scatter = [e for e in plot if isinstance(e, hv.Scatter)][0]
    assert len(scatter) == len(view.last.shown)
    np.testing.assert_allclose(np.sort(scatter.dimension_values("released")),
                               np.sort(view.last.release.answers[view.last.shown]))
    # the ledger table lists the release
    assert len(ledger_tables[0].value) == 1
    assert ledger_tables[0].value["seed"].iloc[0] == 0
    assert "ε = 1" in view.ledger_text()
    assert layout.get_root() is not None


def test_small_workload_shows_all_queries(session, view):
    session.workload = dpx.workloads.prefix(256)
    assert view.run_release(trials=5)
    np.testing.assert_array_equal(view.last.shown, np.arange(256))
    assert view._matches(view.simulation, view.last)


def test_ledger_table_follows_other_pages(session, view):
    from dpexplorer.ui.data_view import DataView

    layout = view.panel()
    table = [t for t in layout.select(pn.widgets.Tabulator) if "label" in t.value.columns][0]
    assert len(table.value) == 0
    assert DataView(session).run()  # the Data page spends from the same ledger
    assert len(table.value) == 2 and "ε = 1" in view.ledger_text()
