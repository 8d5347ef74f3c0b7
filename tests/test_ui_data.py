"""Tests of the "Data & DAWA" page (DataView), driven without a browser."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from dpexplorer.adaptive.dawa import dawa  # noqa: E402
from dpexplorer.adaptive.partition import optimal_partition  # noqa: E402
from dpexplorer.ui import data_view  # noqa: E402
from dpexplorer.ui.data_view import DataView  # noqa: E402
from dpexplorer.ui.session import Session  # noqa: E402
from dpexplorer.ui.uploads import Upload  # noqa: E402

# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


@pytest.fixture
def session():
    return Session()


@pytest.fixture
def view(session):
    return DataView(session)


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(arr), allow_pickle=False)
    return buf.getvalue()


def _rects(overlay) -> hv.Rectangles:
    found = [e for e in overlay if isinstance(e, hv.Rectangles)]
    assert len(found) == 1
    return found[0]


# ------------------------------------------------------------------ DAWA run
def test_run_is_a_simulation_that_spends_nothing(session, view):
    session.epsilon, session.seed = 0.8, 5
    view.ratio = 0.4
    assert view.run() is True
    assert session.error == "" and view.error == ""
    run = view.last
    res = run.result
    assert res.epsilon1 == pytest.approx(0.4 * 0.8) and res.epsilon2 == pytest.approx(0.6 * 0.8)
    assert len(session.ledger) == 0  # the dataset's budget is untouched
    entries = run.spends  # what a release would spend, from the run's throwaway ledger
    assert len(entries) == 2 and all(e.mode == "simulation" for e in entries)
    assert [e.epsilon for e in entries] == pytest.approx([res.epsilon1, res.epsilon2])
    assert sum(e.epsilon for e in entries) == pytest.approx(0.8)
    assert "stage 1" in entries[0].label and "stage 2" in entries[1].label
    assert "Simulation" in view.summary() and "nothing was spent" in view.summary()


def test_run_uses_session_workload_and_matches_engine(session, view):
    ds = session.data()
    assert ds.x.shape == (256,) and session.workload.n == 256
    session.seed = 3
    assert view.run()
    run = view.last
    assert run.workload is session.workload and "session workload" in run.workload_note
    # the same seed gives the same partition and estimate directly from the engine
    ref = dawa(dpx.PrivateData(ds.x), session.workload, session.epsilon,
               np.random.default_rng(3), ratio=0.25, candidates="pow2")
    np.testing.assert_array_equal(run.result.partition.edges, ref.partition.edges)
    np.testing.assert_allclose(run.result.x_hat, ref.x_hat)


def test_drawn_partition_matches_result_edges(session, view):
    assert view.run()
    run, ds = view.last, session.data()
    edges = ds.edges[0]
    rects = _rects(view.private_partition_plot())
    p = run.result.partition
    np.testing.assert_allclose(rects.dimension_values("x0"), edges[p.edges[:-1]])
    np.testing.assert_allclose(rects.dimension_values("x1"), edges[p.edges[1:]])
    assert len(rects) == p.k
    np.testing.assert_array_equal(rects.dimension_values("cells"), p.sizes)
    # the step line is x̂ (noisy bucket means)
    curve = [e for e in view.private_partition_plot() if isinstance(e, hv.Curve)][0]
    np.testing.assert_allclose(curve.dimension_values(1)[:-1], run.result.x_hat)


def test_exact_partition_is_optimal_partition(session, view):
    view.candidates = "all"
    assert view.run()
    run, x = view.last, session.data().x
    exact, cost = optimal_partition(x, run.result.epsilon2, "all")
    np.testing.assert_array_equal(run.exact.edges, exact.edges)
    assert run.exact_cost == pytest.approx(cost)
    rects = _rects(view.exact_partition_plot())
    np.testing.assert_allclose(rects.dimension_values("x0"), session.data().edges[0][exact.edges[:-1]])
    assert "NOT PRIVATE" in view.exact_partition_plot().opts.get().kwargs["title"]
    assert "not private" in view.summary().lower()


def test_2d_run_uses_random_rectangles_and_hilbert_order(session, view):
    session.dataset = dpx.datasets.DEFAULT_2D
    assert view.run(), session.error
    run = view.last
    x = session.data().x
    assert x.ndim == 2 and run.result.order is not None
    assert run.workload.m == data_view.RANDOM_WORKLOAD["m"] and "rectangles" in run.workload_note
    # bucket image: every cell carries the id of the bucket bucket_edges_cells puts it in
    ids = run.result.partition.bucket_grid(run.result.order, x.shape)
    for b, cells in enumerate(run.result.bucket_edges_cells()[:50]):
        assert np.all(ids.ravel()[cells] == b)
    img = [e for e in view.private_partition_plot() if isinstance(e, hv.Image)][0]
    np.testing.assert_array_equal(img.dimension_values("bucket", flat=False), ids.T)
    # exact partition along the same Hilbert order
    exact, _ = optimal_partition(x.ravel()[run.result.order], run.result.epsilon2, "pow2")
    np.testing.assert_array_equal(run.exact.edges, exact.edges)
    assert isinstance(view.estimate_plot(), hv.Layout) and view.hilbert_plot() is not None


def test_gaussian_session_runs_laplace(session, view):
    session.noise = "Gaussian"
    assert view.run()
    assert sum(e.delta for e in view.last.spends) == 0.0
    assert sum(e.epsilon for e in view.last.spends) == pytest.approx(session.epsilon)
    assert "ε-DP" in view.last.noise_note and "Laplace" in view.summary()


def test_rerun_with_new_seed_advances_seed(session, view):
    session.seed = 10
    assert view.run()
    first = view.last
    assert session.seed == 10  # a plain run keeps the seed (reproducible)
    assert view.rerun_with_new_seed()
    assert session.seed == 11 and view.last.seed == 11 and view.last is not first
    assert first.seed == 10 and len(session.ledger) == 0


def test_failed_run_keeps_last_result(session, view):
    assert view.run()
    good = view.last
    big = np.zeros(5000)
    big[::7] = 3
    assert view.load_npy(_npy(big), "big.npy") is not None
    view.candidates = "all"  # not offered above 4096 cells
    assert view.run() is False
    assert "4096" in session.error and view.error == session.error
    assert view.last is good


def test_penalty_option_is_passed(session, view):
    view.penalty = 3.0
    assert view.run()
    assert view.last.penalty == 3.0
    ref = dawa(dpx.PrivateData(session.data().x), session.workload, 1.0,
               np.random.default_rng(0), penalty=3.0)
    np.testing.assert_array_equal(view.last.result.partition.edges, ref.partition.edges)


# ------------------------------------------------------------------ uploads
CSV = b"age,city,score\n23,Lyon,1.5\n35,Paris,2.0\n41,Nice,\n29,Lyon,3.5\n60,Paris,1.0\n"


def test_csv_upload_adds_dataset_with_right_counts(session, view):
    assert view.load_csv(CSV, "people.csv")
    assert view.csv_columns == ["age", "city", "score"] and view.csv_column == "age"
    ds = view.add_csv_dataset("age", bins=4)
    assert ds is not None and session.error == ""
    assert session.dataset == ds.name and session.data() is ds
    counts, edges = np.histogram([23, 35, 41, 29, 60], bins=4)
    np.testing.assert_array_equal(ds.x, counts)
    np.testing.assert_allclose(ds.edges[0], edges)
    assert ds.n_records == 5 and ds.attributes == ("age",)
    # the page runs DAWA on it (random ranges: the session workload is over 256 cells)
    assert view.run(), session.error
    assert view.last.dataset is ds and "random ranges" in view.last.workload_note


def test_csv_upload_with_fixed_range(session, view):
    assert view.load_csv(CSV, "people.csv")
    view.range_lo, view.range_hi = 0.0, 100.0
    ds = view.add_csv_dataset("age", bins=10)
    np.testing.assert_allclose(ds.edges[0], np.linspace(0, 100, 11))
    assert ds.x.sum() == 5



def test_a_column_with_negative_values_is_drawn_over_its_own_range(session, view):
    """64 bins over [-10, 7]: every drawn data source has columns of one length (a report had
    Bokeh's source with 65 and 64 entries: one bar at x ≈ 1 on a 0-1.6 axis), and the bars
    span the bins' edges, on the Data page and in the Workload page's histogram."""
    import holoviews as hv

    from dpexplorer.ui.builder import WorkloadBuilder

    values = np.random.default_rng(0).uniform(-10, 7, 500)
    csv = ("v,w\n" + "\n".join(f"{v:.3f},{i}" for i, v in enumerate(values))).encode()
    assert view.load_csv(csv, "neg.csv")
    ds = view.add_csv_dataset("v", bins=64)
    assert ds is not None and "64 equal-width bins over [-9.99" in ds.description
    builder = WorkloadBuilder(session)
    builder.use_dataset_size()
    for element in (view.data_plot(), builder._histogram()):
        fig = hv.render(element)
        quads = []
        for r in fig.renderers:
            data = r.data_source.data
            assert len({len(v) for v in data.values()}) <= 1, {k: len(v) for k, v in data.items()}
            if type(r.glyph).__name__ == "Quad":
                quads.append(data)
        assert len(quads) == 1 and len(quads[0]["left"]) == 64
        np.testing.assert_allclose(quads[0]["left"][0], ds.edges[0][0])
        np.testing.assert_allclose(quads[0]["right"][-1], ds.edges[0][-1])

@pytest.mark.parametrize("column, words", [("city", "numeric"), ("score", "missing"),
                                           ("nope", "not found")])
def test_bad_csv_column_reports_and_keeps_state(session, view, column, words):
    assert view.run()
    good, name = view.last, session.dataset
    options = list(session.param.dataset.objects)
    assert view.load_csv(CSV, "people.csv")
    assert view.add_csv_dataset(column, bins=4) is None
    assert words in session.error and view.error == session.error
    assert session.dataset == name and list(session.param.dataset.objects) == options
    assert view.last is good
    # still usable: a good column works afterwards and clears the error
    assert view.add_csv_dataset("age", bins=4) is not None and view.error == ""


@pytest.mark.parametrize("data", [b"", b"\xff\xfe\x00garbage\x00\x01", b"a,b\n"])
def test_unreadable_csv_reports(session, view, data):
    name = session.dataset
    assert view.load_csv(data, "bad.csv") is False
    assert "bad.csv" in session.error
    assert session.dataset == name
    assert view.add_csv_dataset("a", bins=4) is None  # nothing uploaded
    assert "upload a CSV" in session.error


def test_csv_bad_bins_reported(session, view):
    assert view.load_csv(CSV, "people.csv")
    assert view.add_csv_dataset("age", bins=0) is None
    assert "bins" in session.error


def test_npy_upload_adds_dataset(session, view):
    grid = np.arange(12).reshape(3, 4)
    ds = view.load_npy(_npy(grid), "grid.npy")
    assert ds is not None and session.dataset == "grid" and ds.x.shape == (3, 4)
    np.testing.assert_array_equal(session.data().x, grid)
    assert ds.n_records == grid.sum()
    # same file name again: a distinct dataset name
    assert view.load_npy(_npy(grid), "grid.npy").name == "grid (2)"


@pytest.mark.parametrize("arr, words", [
    (np.array([1.0, -2.0, 3.0]), "negative"),
    (np.array([1.0, np.nan, 3.0]), "NaN"),
    (np.ones((2, 2, 2)), "shape"),
    (np.array([0.5, 1.0]), "non-integer"),
    (np.array([], dtype=float), "empty"),
])
def test_bad_npy_reports_and_keeps_state(session, view, arr, words):
    assert view.run()
    good, name = view.last, session.dataset
    options = list(session.param.dataset.objects)
    assert view.load_npy(_npy(arr), "bad.npy") is None
    assert words in session.error and "bad.npy" in session.error
    assert session.dataset == name and list(session.param.dataset.objects) == options
    assert view.last is good


def test_garbage_npy_reports(session, view):
    assert view.load_npy(b"this is not numpy", "junk.npy") is None
    assert "junk.npy" in session.error
    assert view.load_npy(b"", "empty.npy") is None and "empty" in session.error


# ------------------------------------------------------------------ layout
def test_layout_renders_and_redraws(session, view):
    layout = view.panel()
    assert layout.get_root() is not None
    buttons = {getattr(b, data_view._LABEL): b for b in layout.select(pn.widgets.Button)}
    assert {"Run DAWA", "Re-run with the next simulation seed"} <= set(buttons)
    buttons["Run DAWA"].clicks += 1  # the button drives run()
    assert view.last is not None and len(session.ledger) == 0
    panes = [p for p in layout.select(pn.pane.HoloViews) if p.visible and p.object is not None]
    assert len(panes) >= 4
    session.dataset = dpx.datasets.DEFAULT_2D  # the data pane follows the session
    assert any(isinstance(p.object, hv.Image) for p in layout.select(pn.pane.HoloViews))
    assert "us_cities_lonlat" in view.summary()  # the result is for the old dataset
    assert view.run()
    assert layout.get_root() is not None
    tips = [w for w in layout.select(pn.widgets.FloatInput) if getattr(w, data_view._LABEL) == "penalty"]
    assert tips and "sensitivity" in tips[0].description


def test_upload_widgets_drive_the_component(session, view):
    card = view.upload_card()
    inputs = card.select(Upload)
    csv_in, npy_in = inputs[0], inputs[1]
    csv_in.receive(CSV, "people.csv", "text/csv")
    assert view.csv_column == "age"
    column = card.select(pn.widgets.Select)[0]
    assert list(column.options) == ["age", "city", "score"]
    add = [b for b in card.select(pn.widgets.Button) if not b.disabled][0]
    add.clicks += 1
    assert session.dataset == "people: age"
    npy_in.receive(_npy(np.array([1, 2, 3])), "v.npy")
    assert session.dataset == "v"


def test_session_updates_wait_while_the_page_is_hidden(session, view):
    """Sidebar-driven redraws are deferred while the page's tab is hidden (ExplorerApp tells it)."""
    layout = view.panel()
    view.gate.show(False)
    info = [p for p in layout.select(pn.pane.Markdown) if "Elevation" in str(p.object)][0]
    session.dataset = dpx.datasets.DEFAULT_2D
    assert "Elevation" in info.object  # not redrawn while hidden
    assert "data" in view.gate.pending
    view.gate.show(True)  # shown again: the pending redraw is applied
    assert "cities" in info.object and not view.gate.pending


# ----------------------------------------------- DAWA on smooth data: what the user sees
def _smooth_npy(session, view, n=1024):
    """A smooth histogram (a few long plateaus) that needs few buckets, added as a dataset."""
    x = np.repeat(np.array([400, 100, 900, 50]), n // 4)
    assert view.load_npy(_npy(x), "plateaus.npy") is not None
    return x


def test_explanation_states_private_exact_and_published_partitions(session, view):
    x = _smooth_npy(session, view)
    session.epsilon, session.seed = 1.0, 4
    assert view.explanation() == ""  # nothing before a run
    assert view.run(), session.error
    run = view.last
    p, exact = run.result.partition, run.exact
    # the smooth data needs few buckets; the private partition at the paper's settings has many
    assert exact.k <= 8 and p.k > 4 * exact.k
    # the authors' (NOT private) partition on the same data and seed, as the engine draws it
    ref = dpx.dawa.published_partition(dpx.PrivateData(x), run.result.epsilon1,
                                       run.result.epsilon2, np.random.default_rng(4), "pow2")
    np.testing.assert_array_equal(run.published.edges, ref.edges)
    text = view.explanation()
    assert f"private partition has {p.k:,} buckets" in text
    assert f"{int(np.sum(p.sizes == 1)):,} of them single cells" in text
    assert f"exact least-cost partition** of the same data has **{exact.k:,}**" in text
    assert f"{run.published.k:,} buckets** (exact: {exact.k:,})" in text
    # why: the noise scales of DAWA's stage 1 (Remark after Thm 2) against the bucket cost 1/ε₂
    eps1, eps2 = run.result.epsilon1, run.result.epsilon2
    assert f"1/ε₂ = {1 / eps2:.3g}" in text
    assert f"scale {2 / eps1:.3g} (single cells) to {(4 - 2 / x.size) / eps1:.3g} counts" in text
    assert "Why so many more" in text and "ε₁-DP" in text
    assert "NOT private" in text and "Audit" in text and "not differentially private" in text
    # the header no longer promises few buckets; it points at the explanation
    assert "few buckets are\nneeded" not in data_view.HEADER and "What you see" in data_view.HEADER


def test_explanation_follows_the_penalty(session, view):
    _smooth_npy(session, view)
    assert view.run(), session.error
    k0 = view.last.result.partition.k
    view.penalty = 3.0  # what the page says brings the number of buckets down
    assert view.run(), session.error
    text = view.explanation()
    k3 = view.last.result.partition.k
    assert "penalty 3" in text and f"has {k3:,} buckets" in text
    assert k3 < k0 / 2


def test_explanation_pane_in_the_layout(session, view):
    layout = view.panel()
    panes = [m for m in layout.select(pn.pane.Markdown) if str(m.object).startswith("### What you see")
             or (m.object == "" and not m.visible)]
    assert len(panes) == 1 and not panes[0].visible  # hidden and empty before a run
    assert view.run()
    panes = [m for m in layout.select(pn.pane.Markdown) if str(m.object).startswith("### What you see")]
    assert len(panes) == 1 and panes[0].visible
    assert panes[0].object == view.explanation()


# ------------------------------------------------------------------ dataset sources
def _texts(layout) -> str:
    return "\n".join(str(p.object) for p in layout.select(pn.pane.Markdown))


def test_every_listed_dataset_says_where_it_comes_from(monkeypatch):
    shared = dpx.datasets.default_dpbench_dir()
    session = Session(dpbench_dir="" if shared is None else str(shared))
    for name in dpx.datasets.bundled():
        assert session.dataset_source(name) == dpx.datasets.BUNDLED_SOURCES[name]
    assert "bokeh-sampledata" in session.dataset_source("superstore")
    dpbench = [d for d in session.param.dataset.objects if d.startswith("DPBench: ")]
    if shared is not None and shared.is_dir():
        assert dpbench
        assert session.dataset_source("DPBench: ADULT") == (
            "DPBench histogram ADULT: UCI Adult census data; prepared for DPBench "
            "(Hay et al., SIGMOD 2016)")
        session.dataset = "DPBench: ADULT"
        assert session.data().source == session.dataset_source()
    for name in session.param.dataset.objects:
        assert session.dataset_source(name) not in ("", "origin not recorded"), name
    # the sidebar says it next to the select, and follows the selection
    sidebar = session.controls()
    assert session.source_text() in _texts(sidebar)
    session.dataset = "superstore"
    assert dpx.datasets.BUNDLED_SOURCES["superstore"] in _texts(sidebar)
    # an upload is the user's own, named by its file
    DataView(session).load_npy(_npy([1, 2, 3]), "mine.npy")
    assert session.dataset == "mine"
    assert session.dataset_source() == "your upload (mine.npy), held in this session only"
    assert "your upload (mine.npy)" in _texts(sidebar)


def test_data_release_and_table_pages_show_the_source(session, view):
    from dpexplorer.ui.release_view import ReleaseView
    from dpexplorer.ui.table_workload import TableMarginals

    session.dataset = "airports_elevation"
    assert dpx.datasets.BUNDLED_SOURCES["airports_elevation"] in view._data_text()
    release = ReleaseView(session)
    assert session.source_text() in release._summary()
    tables = TableMarginals(SimpleNamespace(session=session))
    assert "bokeh-sampledata" in tables._description(tables.table_name)


def test_dpbench_source_names_the_original_data():
    assert dpx.datasets.dpbench_source("hepth.n4096").startswith("DPBench histogram HEPTH: arXiv")
    assert dpx.datasets.dpbench_source("ADULT") == dpx.datasets.dpbench_source("ADULTFRANK.n4096")
    assert "not part of the public DPBench release" in dpx.datasets.dpbench_source("mine")
    for f in dpx.datasets.DPBENCH_FILES:
        assert "Hay et al., SIGMOD 2016" in dpx.datasets.dpbench_source(f.paper_name)


def test_csv_uploads_take_the_types_browsers_give_csv_files():
    """A CSV saved by Excel on Windows arrives as application/vnd.ms-excel (first-contact sweep)."""
    up = Upload(accepted_filetypes=[".csv", "text/csv"])
    assert {"text/csv", "application/vnd.ms-excel", "text/plain"} <= set(up.accepted_filetypes)
    assert up.accepted_filetypes[:2] == [".csv", "text/csv"]          # the given ones first
    # Chromium gives a .npy (or .parquet) file no type at all: FilePond must accept "" too
    assert Upload(accepted_filetypes=[".npy"]).accepted_filetypes == [".npy", "application/octet-stream", ""]
    assert "" in Upload(accepted_filetypes=[".parquet"]).accepted_filetypes


def test_dawa_runs_as_a_task_and_the_page_stays_responsive(monkeypatch, session):
    """Run DAWA returns at once (a task of the page, not the click's thread); the page is busy
    meanwhile, a second run is refused in words, and the run is shown when it ends."""
    import threading
    import time

    from dpexplorer.ui import data_view as module

    started, go = threading.Event(), threading.Event()
    real_study = module.study

    def held_study(**inputs):
        started.set()
        go.wait(10)
        return real_study(**inputs)
    monkeypatch.setattr(module, "study", held_study)
    view = DataView(session, background=True)  # as served
    t0 = time.monotonic()
    assert view.run() is True
    assert time.monotonic() - t0 < 5, "DAWA ran in the caller's thread"
    assert started.wait(10) and view.busy and view.last is None
    assert view.run() is False and "already running" in view.error
    go.set()
    assert view.wait(60)
    assert not view.busy and view.last is not None and view.error == ""
