"""Record tables in the app: Workload card, Compare objective, table releases."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd
import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from dpexplorer.queries import terms as tmod  # noqa: E402
from dpexplorer.ui import table_workload  # noqa: E402
from dpexplorer.ui.builder import WorkloadBuilder  # noqa: E402
from dpexplorer.ui.compare_view import OBJECTIVE_NOTE, ComparePage  # noqa: E402
from dpexplorer.ui.release_view import ReleaseView  # noqa: E402
from dpexplorer.ui.session import Session  # noqa: E402

SMALL = ["Segment", "Region", "Category"]  # 3 × 4 × 3 = 36 cells


# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


@pytest.fixture
def session():
    return Session()


@pytest.fixture
def builder(session):
    return WorkloadBuilder(session)


def _build(builder, attrs=SMALL, orders="1-2", mode="orders", sets=""):
    tm = builder.tables
    tm.param.update(attributes=list(attrs), orders=orders, mode=mode, sets=sets)
    return tm.build()


# ================================================================ Workload page
def test_table_card_shows_and_checks_the_domain_before_building(session, builder):
    tm = builder.tables
    W0 = session.workload
    assert list(tm.param.attributes.objects) == list(dpx.datasets.superstore_domain().names)
    text = tm.preview()  # every attribute: the 9.2e7-cell domain, shown before anything is built
    assert "92,123,136 cells" in text and "28" in text  # 28 two-way marginals of 8 attributes
    assert session.workload is W0 and session.table is None
    tm.attributes = SMALL
    assert "= **36 cells**" in tm.preview()


def test_k_way_marginals_over_chosen_attributes(session, builder):
    assert _build(builder) is True, session.error
    W = session.workload
    assert tuple(W.domain) == (3, 4, 3) and tuple(W.attributes) == tuple(SMALL)
    expected = dpx.workloads.marginals((3, 4, 3), [1, 2])
    np.testing.assert_array_equal(W.dense(), expected.dense())
    assert W.m == 3 + 4 + 3 + 12 + 9 + 12
    t = session.table
    assert t.shape == (3, 4, 3) and t.domain.names == tuple(SMALL) and t.name == "superstore_orders"
    assert builder.error == "" and "record table `superstore_orders`" in builder.summary()


def test_attribute_sets(session, builder):
    assert _build(builder, mode="sets", sets="Region, Segment; Category\ntotal") is True, session.error
    W = session.workload
    parts = [dpx.workloads.marginal((3, 4, 3), s) for s in [(0, 1), (2,), ()]]
    np.testing.assert_array_equal(W.dense(), np.vstack([p.dense() for p in parts]))
    assert builder.terms[0].family == "marginal_sets"


def test_single_attribute_table_workload(session, builder):
    assert _build(builder, attrs=["Region"], orders="0-1") is True, session.error
    np.testing.assert_array_equal(session.workload.dense(), np.vstack([np.ones((1, 4)), np.eye(4)]))


@pytest.mark.parametrize("change, message", [
    (dict(attributes=[]), "at least one attribute"),
    (dict(orders="4"), "must be in [0, 3]"),
    (dict(orders="x"), "cannot read"),
    (dict(mode="sets", sets="Region, Nope"), "unknown attribute 'Nope'"),
    (dict(mode="sets", sets="Region; Region"), "given twice"),
    (dict(mode="sets", sets=" ; "), "no attribute set"),
])
def test_bad_table_input_is_refused_and_nothing_changes(session, builder, change, message):
    assert _build(builder) is True
    W, table, terms = session.workload, session.table, list(builder.terms)
    tm = builder.tables
    tm.param.update(**change)
    assert "Not buildable" in tm.preview() and message in tm.preview()
    assert tm.build() is False
    assert message in session.error and message in tm.error
    assert session.workload is W and session.table is table and builder.terms == terms


def test_too_many_queries_is_refused(session, builder, monkeypatch):
    monkeypatch.setattr(tmod, "MAX_QUERIES", 40)
    assert _build(builder) is False  # 43 queries
    assert "43 queries" in session.error and session.table is None


# ================================================================= Compare page
def test_compare_lists_residual_planner_beside_the_optimisers(session, builder):
    assert _build(builder) is True
    session.noise = "Gaussian"
    page = ComparePage(session, background=False)
    assert page.error == "", page.error
    df = page.table
    rmse = dict(zip(df["mechanism"], df["rmse"], strict=True))
    for name in ("residual_planner", "opt_m", "eigen_design", "fourier", "datacube", "hdmm"):
        assert math.isfinite(rmse[name]), (name, df)
    bound = page.svd_bound
    assert math.isfinite(bound)
    # ResidualPlanner attains the SVD bound on a marginal workload; nothing beats it
    assert rmse["residual_planner"] == pytest.approx(bound, rel=1e-6)
    assert all(v >= bound * (1 - 1e-6) for v in rmse.values() if math.isfinite(v))
    assert "max_std" not in df and "max_std" not in page._table_value()
    ref = dpx.compare(session.workload, session.noise_model(), ["residual_planner", "opt_m"])
    for _, r in ref.iterrows():
        assert rmse[r["mechanism"]] == pytest.approx(r["rmse"], rel=1e-9)


def test_compare_objective_switch(session, builder):
    assert _build(builder) is True
    session.noise = "Gaussian"
    page = ComparePage(session, background=False)
    sum_rp = float(page.table.set_index("mechanism").loc["residual_planner", "rmse"])
    page.objective = "max"
    df = page.table
    assert df.attrs["objective"] == "max" and "max_std" in page._table_value()
    finite = df.dropna(subset=["max_std"])
    assert finite["max_std"].is_monotonic_increasing  # ranked by the worst query
    assert finite["mechanism"].iloc[0] == "residual_planner"
    W, noise = session.workload, session.noise_model()
    names = ["residual_planner", "opt_m", "eigen_design", "hdmm", "identity"]
    ref = dpx.compare(W, noise, names, objective="max").set_index("mechanism")
    got = df.set_index("mechanism")
    for n in names:
        assert got.loc[n, "max_std"] == pytest.approx(ref.loc[n, "max_std"], rel=1e-9), n
        assert got.loc[n, "rmse"] == pytest.approx(ref.loc[n, "rmse"], rel=1e-9), n
    # the worst query's std from a dense computation of the OPT_M strategy
    A = session.cache.entry(W, "opt_m", noise)[0]
    Wd, Ad = W.dense(), A.dense()
    var = np.diag(Wd @ np.linalg.pinv(Ad.T @ Ad, hermitian=True) @ Wd.T) * A.sensitivity(2) ** 2
    assert got.loc["opt_m", "max_std"] == pytest.approx(math.sqrt(noise.variance_per_unit * var.max()),
                                                        rel=1e-6)
    # ResidualPlanner (max objective) trades RMSE for the worst query; OPT_M keeps total error
    assert got.loc["residual_planner", "rmse"] >= sum_rp * (1 - 1e-9)
    assert got.loc["residual_planner", "max_std"] <= got["max_std"].min() * (1 + 1e-6)
    # ε rescales max_std like the RMSE (no rebuild)
    session.epsilon = 0.5
    again = page.table.set_index("mechanism")
    ratio = noise.with_epsilon(0.5).std_per_unit / noise.std_per_unit
    assert again.loc["opt_m", "max_std"] == pytest.approx(got.loc["opt_m", "max_std"] * ratio, rel=1e-9)
    page.mechanism = "residual_planner"  # per-query errors of the max-objective plan
    assert page.per_query["rmse"].max() == pytest.approx(again.loc["residual_planner", "max_std"],
                                                         rel=1e-6)
    page.objective = "sum"
    assert "max_std" not in page.table
    assert page.table.set_index("mechanism").loc["residual_planner", "rmse"] == pytest.approx(
        sum_rp * ratio, rel=1e-9)
    assert "OPT_M" in OBJECTIVE_NOTE and "total error" in OBJECTIVE_NOTE
    plot = page.bars()
    assert isinstance(plot, hv.Overlay)


def test_compare_panel_has_the_switch(session):
    page = ComparePage(session, background=False)
    root = page.panel()
    radios = [w for w in root.select(pn.widgets.RadioButtonGroup)]
    assert any(set(r.options.values() if isinstance(r.options, dict) else r.options) == {"sum", "max"}
               for r in radios)


# ================================================================= Release page
@pytest.fixture
def table_view(session, builder):
    assert _build(builder) is True
    view = ReleaseView(session)
    view.panel()
    return view


def test_table_mode_follows_the_workload(session, builder, table_view):
    assert table_view.tables.active
    session.workload = dpx.workloads.all_range(256)  # e.g. a 1D workload built afterwards
    assert not table_view.tables.active and session.table is not None
    assert _build(builder)
    assert table_view.tables.active


def test_table_release_needs_gaussian_noise(session, table_view):
    assert table_view.run_release() is False
    assert "Gaussian" in session.error and table_view.tables.last is None
    assert len(session.table_ledger(session.table)) == 0


def test_table_release_spends_from_the_table_ledger(session, table_view):
    session.noise = "Gaussian"
    tv = table_view.tables
    assert table_view.run_release() is True, session.error
    rel = tv.last.release
    assert rel.mode == "release" and rel.seed is None and rel.x_hat is None
    assert session.releases == [rel]
    led = session.table_ledger(session.table)
    assert len(led) == 1 and led.entries[0].mode == "release"
    assert len(session.ledger) == 0  # the dataset's ledger is not the table's
    assert "superstore_orders" in tv.ledger_text()
    # one marginal per workload term, std and exact Gaussian intervals per cell
    assert [p["attributes"] for p in tv.last.marginals] == [
        ("Segment",), ("Region",), ("Category",), ("Segment", "Region"), ("Segment", "Category"),
        ("Region", "Category")]
    std = rel.per_query_std()
    frame = tv.frame()
    np.testing.assert_allclose(frame["std"], std)
    np.testing.assert_allclose(frame["ci_high"] - frame["answer"], 1.959963984540054 * std, rtol=1e-9)
    assert frame["marginal"].iloc[3] == "Region" and frame["marginal"].iloc[10] == "Segment × Region"
    # another table workload of the same table spends from the same ledger
    assert table_view.run_release() is True
    assert len(led) == 2



def test_a_table_release_runs_as_a_task_of_the_release_page(monkeypatch, session, builder):
    """Served, Run release on a table workload returns at once (a task of the Release page: the
    click's thread is not held), the page part is busy meanwhile and a second run is refused in
    words; the release is shown and recorded once it ends.  (Before, the release ran in the
    click's thread: this test then waited for the held release and failed the 5 s check.)"""
    import threading
    import time

    assert _build(builder) is True
    session.noise = "Gaussian"
    started, go = threading.Event(), threading.Event()
    real_release = dpx.release

    def held_release(*args, **kwargs):
        started.set()
        go.wait(10)
        return real_release(*args, **kwargs)
    monkeypatch.setattr(dpx, "release", held_release)
    view = ReleaseView(session, background=True)  # as served
    tv = view.tables
    t0 = time.monotonic()
    assert view.run_release() is True, session.error
    assert time.monotonic() - t0 < 5, "the table release ran in the caller's thread"
    assert started.wait(10) and tv.busy and tv.last is None
    assert view.run_trials() is False and "already running" in tv.error
    go.set()
    assert view.wait(60)
    assert not tv.busy and tv.last is not None and tv.last.release.mode == "release"
    assert session.releases == [tv.last.release] and len(session.table_ledger(session.table)) == 1


def test_table_ledger_table_lists_the_stored_history_of_every_session(session, builder, table_view):
    session.noise = "Gaussian"
    layout = table_view.panel()
    # the table release's ledger table comes first; the dataset's (Release page card) last
    shown = [t for t in layout.select(pn.widgets.Tabulator) if "mode" in t.value.columns][0]
    assert len(shown.value) == 0 and list(shown.value.columns) == table_view.LEDGER_COLUMNS
    other = Session()  # a second tab on the same store, same table
    other_builder = WorkloadBuilder(other)
    assert _build(other_builder) is True
    other_view = ReleaseView(other)
    other_view.panel()
    other.noise = "Gaussian"
    assert other_view.run_release() is True, other.error
    frame = table_view.tables.ledger_frame()  # the first tab lists the second tab's release
    assert len(frame) == 1 and list(frame.columns) == table_view.LEDGER_COLUMNS
    row = frame.iloc[0]
    assert row["mode"] == "release" and row["kind"] == "spend" and row["state"] == "recorded"
    assert row["label"].startswith("residual_planner"), row["label"]
    assert row["time"].startswith("20") and row["rho"] > 0 and row["delta"] > 0
    table_view.tables._ledger_changed()  # what a release of this tab does: the shown table follows
    shown = [t for t in layout.select(pn.widgets.Tabulator) if "mode" in t.value.columns][0]
    assert len(shown.value) == 1 and shown.value["label"].iloc[0] == row["label"]
    # the sidebar says what the table spent too, under the dataset's line
    assert "**Spent on the table `superstore_orders`:** ε = " in session._ledger_text()


def test_table_release_refused_over_budget(session, table_view):
    session.noise = "Gaussian"
    session.budget, session.budget_epsilon = "pure", 0.5
    assert table_view.run_release() is False
    assert "budget" in session.error.lower()
    assert len(session.table_ledger(session.table)) == 0 and table_view.tables.last is None
    assert session.table_ledger(session.table).budget.epsilon == 0.5  # the sidebar's budget
    session.budget, session.budget_epsilon = "approx", 5.0  # raising: the owner's act, not a session's
    assert "raise" in session.error and ".set_budget(" in session.error
    assert session.table_ledger(session.table).budget.epsilon == 0.5
    dpx.PrivacyLedger.open(session.ledger_path, "table: superstore_orders").set_budget(
        dpx.Budget.approx(5.0, session.budget_delta))  # the owner raises it in Python
    assert table_view.run_release() is True
    session.budget_epsilon = 0.1  # below what the table spent: not applied to it
    assert "the table 'superstore_orders' has already spent" in session.error
    assert session.table_ledger(session.table).budget.epsilon == 5.0


def test_table_simulation_is_seeded_and_spends_nothing(session, table_view):
    session.noise, session.seed = "Gaussian", 11
    tv = table_view.tables
    assert table_view.run_trials() is True, session.error
    sim = tv.shown.release
    assert sim.mode == "simulation" and sim.seed == 11 and tv.last is None
    assert len(session.table_ledger(session.table)) == 0
    ref = dpx.simulate(session.table, session.workload, "residual_planner", session.noise_model(),
                       seed=11)
    np.testing.assert_array_equal(sim.answers, ref.answers)
    assert "Simulation" in tv.summary()
    with pytest.raises(ValueError, match="no table release"):
        tv.csv_text()


def test_table_release_max_objective(session, table_view):
    session.noise = "Gaussian"
    table_view.tables.objective = "max"
    assert table_view.run_release() is True, session.error
    rel = table_view.tables.last.release
    assert rel.params["objective"] == "max"
    ref = dpx.compare(session.workload, session.noise_model(), ["residual_planner"], objective="max")
    assert rel.per_query_std().max() == pytest.approx(ref["max_std"].iloc[0], rel=1e-6)


def test_marginal_plots(session, table_view):
    session.noise = "Gaussian"
    tv = table_view.tables
    assert table_view.run_release() is True
    one = tv.marginal_plot(1)  # Region: bars with error bars
    assert isinstance(one, hv.Overlay)
    bars = one.get(0)
    errs = one.get(1)
    assert isinstance(bars, hv.Bars) and isinstance(errs, hv.ErrorBars)
    part = tv.last.marginals[1]
    np.testing.assert_allclose(errs.dimension_values("plus"), part["ci_high"] - part["answer"])
    assert list(bars.dimension_values("cell")) == ["Central", "East", "South", "West"]
    heat = tv.marginal_plot(3)  # Segment × Region
    assert isinstance(heat, hv.HeatMap)
    assert heat.data.shape[0] == 12 and {"std", "ci_low", "ci_high"} <= set(heat.data.columns)
    assert "heatmap" in tv.marginal_caption(3) and "Segment × Region" in tv.marginal_caption(3)
    half = 1.959963984540054 * tv.last.marginals[1]["std"][0]
    assert f"± {half:.4g}" in tv.marginal_caption(1) and "bars" in tv.marginal_caption(1)
    tv.marginal = 5
    assert "Region × Category" in tv.marginal_plot().opts.get().kwargs["title"]


def test_table_downloads_hold_no_seed_and_no_truth(session, table_view):
    session.noise = "Gaussian"
    tv = table_view.tables
    assert table_view.run_release() is True
    text = tv.csv_text()
    assert "seed" not in text.lower() and "true" not in text.lower()
    assert f"# dpexplorer_version: {dpx.__version__}" in text
    assert "table_spent_after_release" in text and "OS CSPRNG via opendp" in text
    df = pd.read_csv(io.StringIO(text), comment="#")
    assert list(df.columns) == ["marginal", "label", "answer", "std", "ci_low", "ci_high", "ci_method"]
    assert len(df) == session.workload.m and df["label"].iloc[0] == "Segment=Consumer"
    np.testing.assert_allclose(df["answer"], tv.last.release.answers)
    doc = json.loads(tv.json_text())
    assert "seed" not in doc and doc["mode"] == "release" and doc["dpexplorer_version"] == dpx.__version__
    assert doc["table_spent_after_release"] == session.table_ledger(session.table).summary()
    assert [m["attributes"] for m in doc["marginals"]][3] == ["Segment", "Region"]
    assert doc["marginals"][3]["labels"][1] == ["Central", "East", "South", "West"]
    assert np.asarray(doc["marginals"][3]["answer"]).shape == (3, 4)
    assert tv.filename("csv").startswith("release_superstore_orders_eps1_")
    # a later simulation does not change what is downloaded
    assert table_view.run_trials() is True
    assert json.loads(tv.json_text())["mode"] == "release"


def test_table_results_layout_follows_releases(session, table_view):
    session.noise = "Gaussian"
    layout = table_view.panel()
    assert layout.get_root() is not None
    tv = table_view.tables
    assert table_view.run_release() is True
    picks = [s for s in layout.select(pn.widgets.Select) if "1. Segment (3 cells)" in s.options]
    assert len(picks) == 1 and len(picks[0].options) == 6
    captions = [m for m in layout.select(pn.pane.Markdown)
                if isinstance(m.object, str) and m.object.startswith("**Segment**")]
    assert len(captions) == 1
    picks[0].value = 3  # the user picks Segment × Region
    assert tv.marginal == 3 and captions[0].object.startswith("**Segment × Region**")
    cells = [t for t in layout.select(pn.widgets.Tabulator) if "marginal" in t.value.columns]
    assert len(cells) == 1 and len(cells[0].value) == session.workload.m
    downloads = [d for d in layout.select(pn.widgets.FileDownload)
                 if d.filename.startswith("release_superstore_orders")]
    assert len(downloads) == 2 and not any(d.disabled for d in downloads)


# ======================================================== your own CSV and its domain
def _csv_bytes(n=400, seed=0) -> bytes:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"dept": rng.choice(["a", "b", "c"], n), "salary": rng.uniform(2e4, 9e4, n).round(2)})
    df.loc[0, "dept"] = "ceo-only-dept"
    return df.to_csv(index=False).encode()


@pytest.fixture
def own(session, builder):
    tm = builder.tables
    assert tm.upload_csv(_csv_bytes(), "staff.csv") is True, session.error
    return tm


def _release_view(session, builder):
    tm = builder.tables
    tm.param.update(attributes=["dept", "salary"], mode="orders", orders="1")
    assert tm.build() is True, session.error
    session.noise = "Gaussian"
    view = ReleaseView(session)
    view.panel()
    return view


def test_uploaded_csv_is_simulated_but_its_release_is_refused(session, builder, own):
    assert own.table_name == "uploaded: staff.csv" and own.table().domain.inferred
    assert "read from the records" in own.domain_status()
    assert own.schema_text.startswith(own.SCHEMA_NOTE) and "ceo-only-dept" in own.schema_text
    view = _release_view(session, builder)
    assert "domain was read from the records" in view.tables.summary()
    assert view.run_release() is False
    assert "read from the records" in session.error and "Domain.from_file" in session.error
    assert len(session.table_ledger(session.table)) == 0 and view.tables.last is None
    assert view.run_trials() is True, session.error  # a simulation is fine
    assert view.tables.shown.release.mode == "simulation"


def test_declaring_the_edited_schema_makes_it_releasable(session, builder, own):
    bad = own.schema_text.replace("categories:", "categoriez:", 1)
    before = own.table()
    assert own.declare(bad) is False and "schema attribute 0 ('dept')" in session.error
    assert own.table() is before
    edited = own.schema_text.replace("  - ceo-only-dept\n", "")  # the owner removes the private one
    assert own.declare(edited) is True, session.error
    d = own.table().domain
    assert d.source == "declared" and d.attributes[0].categories == ("a", "b", "c")
    assert "Domain declared" in own.domain_status() and not own.schema_text.startswith("#")
    view = _release_view(session, builder)
    assert view.run_release() is True, session.error
    assert len(session.table_ledger(session.table)) == 1


def test_a_schema_file_declares_the_domain(session, builder, own):
    schema = b'{"attributes": [{"name": "dept", "categories": ["a", "b"]}, ' \
             b'{"name": "salary", "range": [0, 100000], "bins": 4}]}'
    assert own.load_schema(schema, "schema.json") is True, session.error
    assert own.table().domain.shape == (2, 4) and own.table().domain.source == "declared"
    assert own.load_schema(b"\xff", "x.yaml") is False and "UTF-8" in session.error


def test_discovering_the_domain_charges_the_tables_ledger(session, builder, own):
    own.domain_epsilon, own.domain_delta = 1.0, 1e-6
    assert own.discovery_spec() == {"dept": "categorical", "salary": {"kind": "numeric", "bins": 16}}
    assert own.discover() is True, session.error
    d = own.table().domain
    assert d.source == "discovered" and "ceo-only-dept" not in d.attributes[0].categories
    led = session.table_ledger(own.table())
    assert led.basic() == pytest.approx((1.0, 1e-6)) and len(led) == 2  # partition selection, histogram
    assert "discovered privately" in own.domain_status() and "ε = 1" in own.domain_status()
    view = _release_view(session, builder)
    assert view.run_release() is True, session.error
    assert len(led) == 3 and view.tables.last.release.table.domain == d


def _mechanism_box(view):
    return [w for w in view.panel().select(pn.widgets.Select) if w.name == "Mechanism"
            or getattr(w, "label", None) == "Mechanism"][0]


def test_release_mechanism_box_shows_the_mechanism_that_runs(session, builder, table_view):
    """Over a record table the release runs ResidualPlanner: the box said HB (the vector
    release's choice) and let the user pick mechanisms that would not run."""
    box = _mechanism_box(table_view)
    assert box.value == "residual_planner" and box.disabled
    assert table_view.running_mechanism() == "residual_planner"
    assert list(box.options.values()) == ["residual_planner"]
    assert "ResidualPlanner" in [lbl for lbl in box.options][0]
    # back to a vector workload: the user's own choice again, and it can be changed
    session.workload = dpx.workloads.all_range(256)
    assert box.value == table_view.mechanism == "hb" and not box.disabled
    box.value = "identity"
    assert table_view.mechanism == "identity" == table_view.running_mechanism()
    assert _build(builder)
    assert box.value == "residual_planner" and box.disabled and table_view.mechanism == "identity"


def _header_config(table) -> dict:
    """The Tabulator column options a table sends (its ``configuration``, as the browser gets it)."""
    config = table._get_configuration(table._get_columns())
    return {c["field"]: c for c in config.get("columns", [])}


def test_every_table_header_wraps_and_its_column_fits_its_longest_word(session, table_view):
    """Headers were cut to "mech…", "R…", "b…": fixed shares of the width, no wrapping."""
    from dpexplorer.ui.compare_view import _dimmed_if, comparison_table
    from dpexplorer.ui.session import readable_headers
    from dpexplorer.ui.table_release import LEDGER_COLUMNS, ledger_table

    frame = pd.DataFrame(columns=["label", "rmse", "ratio", "seconds", "description", "source", "note"])
    tables = {"compare": comparison_table(frame),
              "ledger": ledger_table(pd.DataFrame(columns=LEDGER_COLUMNS))}
    release = ReleaseView(Session())
    tables.update({f"release-{i}": t for i, t in
                   enumerate(release.panel().select(pn.widgets.Tabulator))})
    for name, table in tables.items():
        config = _header_config(table)
        for field in table.value.columns:
            title = table.titles.get(field, field)
            col = config.get(field)
            assert col is not None and col["headerWordWrap"], (name, field)
            longest = max(len(w) for w in str(title).replace("\u00ad", " ").split())
            arrow = 26 if col.get("headerSort", True) else 0
            assert col["minWidth"] >= 12 * longest + 22 + arrow, (name, field, col)
    assert readable_headers(["x"], {"x": "worst query std"})["columns"][0]["minWidth"] < 120
    # results are dimmed while recomputed and explicitly undimmed after (a style left out
    # is kept by the browser: the finished table stayed grey)
    assert _dimmed_if(True) == {"opacity": "0.5"} and _dimmed_if(False) == {"opacity": "1"}


def _ui_imports(module) -> set[str]:
    """The ``dpexplorer.ui`` modules ``module`` imports, at its top or inside functions."""
    import ast
    import inspect

    found = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 1:  # from .x import y / from . import x
                found |= {base} if base else {a.name for a in node.names}
            elif base.startswith("dpexplorer.ui."):
                found.add(base.split(".")[2])
            elif base == "dpexplorer.ui":
                found |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[2] for a in node.names if a.name.startswith("dpexplorer.ui.")}
    return found


def test_the_record_table_card_does_not_import_the_workload_page():
    """The Workload page (builder) imports its Record table card (table_workload), never the
    reverse, not even inside a function: the card gets what it needs from the page object."""
    from dpexplorer.ui import builder as builder_module

    assert "table_workload" in _ui_imports(builder_module)
    assert "builder" not in _ui_imports(table_workload)
