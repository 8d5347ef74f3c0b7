"""Tests of the "Sum queries" page (SumsView), driven without a browser."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from dpexplorer import datasets  # noqa: E402
from dpexplorer.sums import mechanisms as sums  # noqa: E402
from dpexplorer.sums import study  # noqa: E402
from dpexplorer.sums.thresholds import SVTParams  # noqa: E402
from dpexplorer.ui import app  # noqa: E402
from dpexplorer.ui import session as session_module  # noqa: E402
from dpexplorer.ui.session import Session  # noqa: E402
from dpexplorer.ui.sums_view import SumsView  # noqa: E402

# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


@pytest.fixture
def view(session):
    """A small, fast configuration: 128 buckets, 20 prefix queries, 4 trials."""
    return SumsView(session, bins=128, queries=20, trials=4)


def _run(view):
    assert view.run() is True, view.session.error
    assert view.wait(120)
    assert not view.busy


def test_page_is_registered_before_learn():
    titles = [t for t, _, _ in app.PAGES]
    assert titles.index("Sum queries") == titles.index("Learn") - 1
    assert ("Sum queries", "dpexplorer.ui.sums_view", "SumsView") in app.PAGES


def test_defaults_and_attributes(session):
    v = SumsView(session)
    assert v.attribute == "Superstore Sales" and v.tau_mode == "svt" and v.strategy == "greedy_h"
    assert {"Superstore Sales", "Superstore Profit"} <= set(v.param.attribute.objects)
    assert v.alpha == SVTParams().alpha and v.rho == SVTParams().rho and v.r == SVTParams().r
    assert v.result is None and "No simulation yet" in v.summary_text()


def test_dpbench_income_is_offered_when_the_folder_exists(dpbench_dir):
    v = SumsView(Session(dpbench_dir=str(dpbench_dir)))
    assert "DPBench INCOME" in v.param.attribute.objects
    v.attribute = "DPBench INCOME"
    attr = v.load_attribute()
    assert attr.n == 4096 and attr.unit == "bin"


def test_run_matches_the_engine_and_spends_nothing_from_the_session(session, view):
    session.seed, session.epsilon = 5, 0.5
    _run(view)
    res = view.result
    assert session.error == "" and view.error == ""
    assert len(session.ledger) == 0  # a simulation, not a release
    attr = datasets.superstore_sales(bins=128)
    S = sums.prefix_sums(attr.bucket_values(), m=20)
    ref = sums.evaluate(attr.x, S, 0.5, trials=4, seed=5, svt=SVTParams())
    pd.testing.assert_frame_equal(res.evaluation, ref)
    pd.testing.assert_frame_equal(res.summary, sums.summarize(ref))
    curve = sums.tau_curve(S, attr.x, 0.5 * (1 - SVTParams().alpha), taus=sums.tau_grid(S.values, 30))
    pd.testing.assert_frame_equal(res.curve, curve)
    assert res.epsilon_answers == pytest.approx(0.45)
    assert res.taus.shape == (4,) and np.all(res.taus > 0)
    assert view.progress == view.progress_total
    text = view.summary_text()
    assert "Simulation on public data" in text and "τ chosen by SVT" in text
    for fn in (view.answers_plot, lambda: view.relative_error_plot(False),
               lambda: view.relative_error_plot(True), view.curve_plot):
        hv.render(fn())  # draws without error
    t = view.sizes_table()
    assert len(t) == 5 * 2 and list(t.columns) == SumsView.SIZE_COLUMNS
    ref_sizes = sums.compare_sizes(ref)
    tamm = ref_sizes[(ref_sizes.mechanism == "tamm") & ~ref_sizes.isotonic].set_index("size")
    row = t[(t.mechanism == "TaMM") & ~t.isotonic].iloc[0]
    assert row["small median"] == tamm.loc["small", "median"]
    assert row["large 95%"] == tamm.loc["large", "q95"]


def test_user_threshold_and_no_truncation(session, view):
    view.tau_mode = "user"
    view.tau = 500.0
    _run(view)
    assert np.all(view.result.taus == 500.0)
    assert np.all(view.result.evaluation["tau"] == 500.0)
    assert "given, data-independent" in view.summary_text()
    view.tau_mode = "none"
    _run(view)
    assert view.result.evaluation["bias"].abs().max() == 0
    assert view.result.epsilon_answers == session.epsilon


def test_bad_input_notifies_and_keeps_the_last_result(session, view, monkeypatch):
    shown = []
    monkeypatch.setattr(session_module, "notify", lambda msg, level="error": shown.append(msg))
    _run(view)
    good = view.result
    view.attribute = "Superstore Profit"  # negative values without the shift
    assert view.run() is False
    assert "negative" in session.error and "shift" in session.error.lower()
    assert view.error == session.error and shown and shown[-1] == session.error
    assert view.result is good and not view.busy
    view.attribute = "Superstore Sales"
    view.tau_mode, view.tau = "user", -3.0
    assert view.run() is False and "τ" in session.error and view.result is good
    view.tau_mode = "svt"
    view.rho = 1.5
    assert view.run() is False and "rho" in session.error and view.result is good
    view.rho = 0.99
    view.bucketing, view.edges_text = "edges", "0, 100, 50, 23040"
    assert view.run() is False and "increasing" in session.error
    view.edges_text = "0, abc"
    assert view.run() is False and "numbers" in session.error
    view.bucketing = "quantile"
    view.bins = 4000  # Superstore has repeated sales values: some quantile buckets would be empty
    assert view.run() is False and "empty" in session.error
    view.bucketing, view.bins = "equal_width", 128
    view.gamma = 0.0
    assert view.run() is False and "γ" in session.error
    assert view.result is good


def test_engine_error_in_the_worker_is_reported(session, view, monkeypatch):
    _run(view)
    good = view.result

    def boom(*args, **kwargs):
        raise ValueError("the strategy does not apply to this workload")
    monkeypatch.setattr(sums, "evaluate", boom)
    # post UI updates later, as a server session does (next tick), not inside the job
    deferred = []
    monkeypatch.setattr(type(view._jobs), "_poster", lambda self, doc: deferred.append)
    assert view.run() is True  # inputs are fine: the failure happens in the worker
    assert view.wait(60) and view.busy
    for callback in deferred:
        callback()
    assert not view.busy
    assert "does not apply" in session.error and view.error == session.error
    assert view.result is good


def test_shifted_profit(session, view):
    view.attribute = "Superstore Profit"
    view.shift_negative = True
    _run(view)
    attr = view.result.attribute
    assert attr.shift == 6600 and not attr.has_negative_values
    assert "shifted" in view.summary_text()


def test_csv_column_upload(session, view):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"salary": rng.gamma(2.0, 2e4, size=500).round(2), "name": ["a"] * 500})
    cols = view.load_csv(frame.to_csv(index=False).encode(), "people.csv")
    assert cols == ["salary"]
    assert view.add_csv_column("salary")
    assert view.attribute == "CSV people: salary"
    _run(view)
    assert view.result.attribute.n_records == 500
    assert "not covered by any privacy guarantee" in view.summary_text()
    assert view.add_csv_column("name") is False and "numeric" in session.error
    assert view.load_csv(b"", "empty.csv") == [] and "empty" in session.error
    bad = pd.DataFrame({"v": [1.0, None, 3.0]}).to_csv(index=False).encode()
    assert view.load_csv(bad, "bad.csv") == ["v"]
    assert view.add_csv_column("v") is False and "missing" in session.error


def test_ranges_workload_has_no_isotonic_variant(session, view):
    view.workload_kind = "ranges"
    _run(view)
    assert set(view.result.evaluation["isotonic"]) == {False}
    assert not view.result.workload.is_prefix
    hv.render(view.relative_error_plot(True))


def test_results_posted_later_as_in_a_server(session, view, monkeypatch):
    deferred = []
    monkeypatch.setattr(type(view._jobs), "_poster", lambda self, doc: deferred.append)
    assert view.run() is True
    assert view.wait(120) and view.busy and view.result is None
    for callback in deferred:
        callback()
    assert not view.busy and view.result is not None and view.progress == view.progress_total
    assert view.run() is True  # a second run may start once the first is shown
    view.wait(120)
    for callback in deferred:
        callback()


def test_gaussian_session_uses_laplace_with_a_note(session, view):
    session.noise = "Gaussian"
    view.trials = 2
    _run(view)
    assert "Laplace" in view.summary_text()


def test_panel_builds_and_redraws(session, view):
    layout = view.panel()
    assert isinstance(layout, pn.Column)
    _run(view)
    view.curve_mechanism = "identity"
    view.show_isotonic = True
    hv.render(view.answers_plot())
    assert view.panel() is layout


# ------------------------------------------------------------------ review fixes
def test_reupload_of_a_same_named_csv_uses_the_new_file(session, view):
    rng = np.random.default_rng(1)
    first = pd.DataFrame({"salary": rng.gamma(2.0, 2e4, size=100).round(2)})
    second = pd.DataFrame({"salary": rng.gamma(2.0, 5e4, size=1000).round(2)})
    assert view.load_csv(first.to_csv(index=False).encode(), "people.csv") == ["salary"]
    assert view.add_csv_column("salary")
    assert view.load_attribute().n_records == 100  # cached under "CSV people: salary"
    assert view.load_csv(second.to_csv(index=False).encode(), "people.csv") == ["salary"]
    assert view.add_csv_column("salary")
    assert view.attribute == "CSV people: salary"
    assert view.load_attribute().n_records == 1000
    _run(view)
    assert view.result.attribute.n_records == 1000


@pytest.mark.parametrize("name, tau_mode, words", [
    ("tau", "user", "τ"), ("alpha", "svt", "alpha"), ("rho", "svt", "rho"), ("r", "svt", "r"),
    ("gamma", "svt", "γ"), ("bins", "svt", "buckets"), ("queries", "svt", "queries"),
    ("trials", "svt", "trials"),
])
def test_emptied_number_box_gives_a_clear_error_and_keeps_the_result(session, view, monkeypatch, name,
                                                                     tau_mode, words):
    shown = []
    monkeypatch.setattr(session_module, "notify", lambda msg, level="error": shown.append(msg))
    _run(view)
    good = view.result
    view.tau_mode = tau_mode
    setattr(view, name, None)  # an emptied widget box: accepted by the parameter, no traceback
    assert view.run() is False
    assert view.error and view.error == session.error and shown[-1] == view.error
    assert "empty" in view.error and words in view.error
    assert view.result is good and not view.busy


@pytest.mark.parametrize("name, value, allowed", [
    ("bins", 1, "from 2 to 4096"), ("bins", 5000, "from 2 to 4096"), ("queries", 0, "from 1 to 2000"),
    ("queries", 2001, "from 1 to 2000"), ("trials", 0, "from 1 to 500"), ("trials", 501, "from 1 to 500"),
])
def test_out_of_range_counts_give_a_clear_error(session, view, name, value, allowed):
    _run(view)
    good = view.result
    setattr(view, name, value)
    assert view.run() is False
    assert allowed in view.error and str(value) in view.error
    assert view.result is good


def test_shown_result_keeps_the_value_kind_and_spacing_it_ran_with(session, view):
    view.value_kind, view.spacing = "midpoint", "geometric"
    _run(view)
    assert view.result.value_kind == "midpoint" and view.result.spacing == "geometric"
    view.value_kind, view.spacing = "lower", "linear"  # changed after the run, not rerun
    assert "midpoint edges" in view.summary_text() and "lower edges" not in view.summary_text()
    panels = view.answer_panels()
    assert panels and all(p.opts.get().kwargs.get("logx") for p in panels)


def test_simulation_answer_epsilon_comes_from_the_engine(session, view):
    session.epsilon = 0.4
    view.alpha = 0.3
    _run(view)
    assert view.result.epsilon_answers == sums.answer_epsilon(0.4, "svt", SVTParams(alpha=0.3))


def test_error_split_and_the_run_without_truncation(session, view):
    """The page shows sums.study's split and verdict, and switches its plots and table to the
    untruncated run of the same seeds."""
    layout = view.panel()
    _run(view)
    res = view.result
    texts = [str(m.object) for m in layout.select(pn.pane.Markdown)]
    verdict = study.split_text(res.split, res.attribute.unit)
    assert verdict and verdict in texts
    tables = [t.value for t in layout.select(pn.widgets.Tabulator) if "bias RMSE" in t.value.columns]
    assert len(tables) == 1
    pd.testing.assert_frame_equal(tables[0].reset_index(drop=True), study.split_table(res.split))
    truncated = view.sizes_table()
    view.untruncated = True
    pd.testing.assert_frame_equal(view.sizes_table(), study.sizes_table(res.untruncated.sizes))
    assert not view.sizes_table().equals(truncated)
    assert view.summary_text() == view.summary_text(res)  # the summary stays the truncated run's
    for fn in (view.answers_plot, lambda: view.relative_error_plot(False), view.curve_plot):
        hv.render(fn())
    view.tau_mode = "none"
    _run(view)
    assert view.result.untruncated is None and view.sizes_table().equals(study.sizes_table(view.result.sizes))


# ------------------------------------------------------------------ releases
def _release(view):
    assert view.release() is True, view.session.error
    assert view.wait(120)
    assert not view.busy


def test_simulation_says_its_mode(session, view):
    _run(view)
    assert "mode: simulation" in view.summary_text()
    assert "mode: release" not in view.summary_text()


def test_release_is_charged_to_the_datasets_ledger(session, view):
    """One release from the OS CSPRNG, charged to the Superstore ledger the Release page shows."""
    session.epsilon = 0.5
    before = session.ledger_version
    card = view.release_card()
    assert "No release yet" in card[1].object and not card[2].visible
    _release(view)
    rel = view.last_release
    assert "mode: **release**" in card[1].object and card[2].visible
    assert list(card[2].table.value["answer"]) == list(rel.answers)  # a new table per release
    assert view.error == "" and rel.mode == "release" and rel.seed is None
    assert rel.truth is None and rel.epsilon == pytest.approx(0.5)
    led = session.ledgers["superstore"]
    assert view.ledger() is led and view.ledger_key() == "superstore"
    assert {e.mode for e in led.entries} == {"release"} and led.epsilon == pytest.approx(0.5)
    assert any("AboveThreshold" in e.label for e in led.entries)  # the SVT τ is charged there too
    assert session.ledger_version > before
    text = view.release_text()
    assert "mode: **release**" in text and "`superstore`" in text
    if "superstore" in session.param.dataset.objects:  # the Release page's ledger of the dataset
        session.dataset = "superstore"
        assert session.ledger is led
    # Profit sums the same orders: the same ledger, the spend adds up
    view.attribute, view.shift_negative = "Superstore Profit", True
    view.tau_mode, view.tau = "user", 5000.0
    view.release_mechanism = "identity"
    _release(view)
    assert view.last_release.threshold.method == "public"
    assert led.epsilon == pytest.approx(1.0)
    # charged nowhere else (the sidebar's dataset's ledger is open since the session started,
    # to show its budget, but holds nothing)
    assert all(len(other) == 0 for key, other in session.ledgers.items() if key != "superstore")


def test_release_over_the_budget_is_refused_before_any_draw(session, view):
    session.budget, session.budget_epsilon = "pure", 0.5
    session.epsilon = 1.0
    _release(view)
    assert view.last_release is None
    assert "refused before any noise was drawn" in session.error
    assert len(view.ledger()) == 0  # not even the SVT threshold was drawn


def test_release_needs_public_buckets(session, view):
    view.bucketing = "quantile"
    assert view.release() is False
    assert "public buckets" in session.error and view.last_release is None
    assert len(view.ledger()) == 0


def _plots(element):
    from bokeh.models import Plot

    return list(hv.render(element, backend="bokeh").select({"type": Plot}))


def test_answer_panels_keep_their_legend_outside_and_their_x_ticks_apart(session, view):
    """The SQM panel's legend sat inside its narrow plot, over the curves, and the thresholds'
    tick labels (e.g. 15000 20000) ran together in panels a third of the page wide."""
    _run(view)
    plots = _plots(view.answers_plot()) + _plots(view.relative_error_plot(False))
    legends = [(pl.title.text, lg) for pl in plots for lg in pl.legend if lg.items]
    assert [t for t, _ in legends] == ["SQM", "Without isotonic regression"]
    for title, lg in legends:
        placed = [pl for pl in plots if pl.title.text == title][0]
        assert lg not in placed.center, f"{title}: legend drawn over the plot"
    for pl in plots:
        axis = pl.xaxis[0]
        assert axis.major_label_orientation not in ("horizontal", 0), pl.title.text
        assert axis.ticker.desired_num_ticks <= 5, pl.title.text


def test_the_summary_before_a_run_follows_the_trials_and_the_sidebar(session, view):
    """Before any run the summary says what Run simulation will do: the trials typed, the
    sidebar's ε and seed (it kept saying the trials it was built with until a run)."""
    layout = view.panel()

    def intro():
        texts = [m.object for m in layout.select(pn.pane.Markdown)
                 if str(m.object).startswith("No simulation yet")]
        assert len(texts) == 1
        return texts[0]
    assert "five mechanisms 4 times" in intro()   # the fixture's trials
    view.trials = 5
    assert "five mechanisms 5 times" in intro()
    session.param.update(epsilon=0.25, seed=7)
    assert "with ε = 0.25 and seeds derived from 7" in intro()
