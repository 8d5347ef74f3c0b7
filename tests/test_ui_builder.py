"""Tests of the Workload builder page (dpexplorer.ui.builder), without a browser."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from dpexplorer.queries import terms as tmod  # noqa: E402
from dpexplorer.ui import builder as bmod  # noqa: E402
from dpexplorer.ui.builder import URL_PARAMS, WorkloadBuilder  # noqa: E402
from dpexplorer.ui.session import Session  # noqa: E402
from dpexplorer.ui.uploads import Upload  # noqa: E402

wl = dpx.workloads


# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


def assert_same(W, V, gram=False):
    """Same shape, domain, sensitivities and entries (or Gram matrices)."""
    assert W.shape == V.shape
    assert tuple(W.domain) == tuple(V.domain)
    assert W.sensitivity(1) == pytest.approx(V.sensitivity(1), rel=1e-12)
    assert W.sensitivity(2) == pytest.approx(V.sensitivity(2), rel=1e-12)
    if gram:
        np.testing.assert_allclose(W.gram().dense(), V.gram().dense(), rtol=1e-12)
    else:
        np.testing.assert_array_equal(W.dense(), V.dense())


@pytest.fixture
def session():
    return Session()


@pytest.fixture
def builder(session):
    return WorkloadBuilder(session)


@pytest.fixture
def small(session):
    """A builder over 32 cells with no terms."""
    b = WorkloadBuilder(session, n=32)
    b.clear_terms()
    return b


def snapshot(b):
    return b.session.workload, list(b.terms), b.domain, b.n, b.attributes


# ------------------------------------------------------------------ start
def test_default_is_1d_dataset_size_and_adopts_session_workload(session, builder):
    assert session.data().x.size == 256
    assert builder.n == 256 and builder.domain == (256,) and builder.attributes == ""
    assert [t.family for t in builder.terms] == ["all_range"]
    assert_same(session.workload, wl.all_range(256), gram=True)
    assert builder.error == "" and session.error == ""
    s = builder.stats
    assert (s["m"], s["n"], s["domain"]) == (256 * 257 // 2, 256, (256,))
    assert s["l1"] == pytest.approx(wl.all_range(256).sensitivity(1))
    assert "L1 sensitivity" in builder.summary() and "32,896" in builder.summary()


def test_url_params_are_builder_parameters():
    assert URL_PARAMS and WorkloadBuilder.URL_PARAMS == URL_PARAMS
    for name, key in URL_PARAMS.items():
        assert name in WorkloadBuilder.param
        assert key not in ("eps", "delta", "noise", "data", "seed", "page")


# ------------------------------------------------------------------ terms
@pytest.mark.parametrize("family, options, expected", [
    ("identity", {}, lambda n: wl.identity(n)),
    ("total", {}, lambda n: wl.total(n)),
    ("identity_total", {}, lambda n: wl.identity_total(n)),
    ("prefix", {}, lambda n: wl.prefix(n)),
    ("all_range", {}, lambda n: wl.all_range(n)),
    ("width_range", {"k": 5}, lambda n: wl.width_range(n, 5)),
    ("random_ranges", {"m": 50, "kind": "clustered", "seed": 3},
     lambda n: wl.random_ranges(n, 50, "clustered", 3)),
    ("ranges", {"ranges": "0-3, 5, 10..20"}, lambda n: wl.ranges(n, [(0, 3), (5, 5), (10, 20)])),
    ("predicates", {"matrix": "1 0 1 " + "0 " * 29 + "\n" + "1 " * 32},
     lambda n: wl.predicates(np.vstack([np.r_[1, 0, 1, np.zeros(29)], np.ones(32)]))),
    ("product", {"blocks": ["prefix"]}, lambda n: wl.prefix(n)),
])
def test_each_family_matches_engine(small, family, options, expected):
    assert small.add_term(family, **options), small.error
    assert_same(small.session.workload, expected(32))
    assert len(small.terms) == 1 and small.terms[0].label


def test_union_with_weights_matches_engine(small):
    assert small.add_term("identity")
    assert small.add_term("width_range", k=8, weight=2.0)
    small.weight = 0.5
    small.family = "prefix"
    assert small.add_term()  # from the parameters
    expected = wl.union([wl.identity(32), wl.width_range(32, 8), wl.prefix(32)], [1.0, 2.0, 0.5])
    assert_same(small.session.workload, expected)
    assert list(small.terms_frame()["weight"]) == [1.0, 2.0, 0.5]
    # change a weight, then remove a term
    assert small.set_weight(0, 3.0)
    assert_same(small.session.workload,
                wl.union([wl.identity(32), wl.width_range(32, 8), wl.prefix(32)], [3.0, 2.0, 0.5]))
    assert small.remove_term(1)
    assert_same(small.session.workload, wl.union([wl.identity(32), wl.prefix(32)], [3.0, 0.5]))
    assert [t.family for t in small.terms] == ["identity", "prefix"]


def test_clear_all_keeps_last_workload(small):
    small.add_term("prefix")
    W = small.session.workload
    assert small.clear_terms()
    assert small.terms == [] and small.session.workload is W
    assert "No terms" in small.summary()
    small.add_term("identity")
    assert_same(small.session.workload, wl.identity(32))


def test_domain_change_rebuilds_terms(small):
    small.add_term("prefix")
    small.add_term("width_range", k=4, weight=2)
    small.n = 16
    assert small.domain == (16,)
    assert_same(small.session.workload, wl.union([wl.prefix(16), wl.width_range(16, 4)], [1, 2]))


# ------------------------------------------------------- multi-attribute
def test_multi_attribute_marginals_products_and_spec_roundtrip(small):
    small.attributes = "age:4, income:5, sex:2"
    assert small.error == ""
    assert small.domain == (4, 5, 2) and small.attribute_names == ("age", "income", "sex")
    assert small.blocks == ["identity"] * 3
    assert small.add_term("marginals", k=2)
    assert small.add_term("range_marginals", k=1, range_kind="prefix", weight=2.0)
    small.blocks = ["prefix", "width_range", "total"]
    assert small.add_term("product", k=3, weight=0.5)
    assert small.add_term("all_range")  # a 1D family applies to every attribute
    dom = (4, 5, 2)
    expected = wl.union(
        [wl.marginals(dom, 2), wl.range_marginals(dom, 1, "prefix"),
         wl.kron([wl.prefix(4), wl.width_range(5, 3), wl.total(2)]),
         wl.kron([wl.all_range(4), wl.all_range(5), wl.all_range(2)])],
        [1.0, 2.0, 0.5, 1.0])
    W = small.session.workload
    assert_same(W, expected)
    assert small.stats["domain"] == dom and small.stats["n"] == 40
    # export and load back: one "from spec" term, same workload
    text = small.export_spec("json")
    spec = json.loads(text)
    assert spec["domain"] == [4, 5, 2] and spec["attributes"] == ["age", "income", "sex"]
    other = WorkloadBuilder(Session())
    assert other.load_spec(text)
    assert [t.family for t in other.terms] == ["spec"]
    assert other.domain == dom and other.attributes == "age:4, income:5, sex:2"
    assert_same(other.session.workload, W)
    yaml_text = small.export_spec("yaml")
    assert other.load_spec(yaml_text.encode(), "w.yaml")
    assert_same(other.session.workload, W)


def test_predicates_over_a_multi_attribute_domain(small):
    small.attributes = "a:2, b:3"
    M = np.eye(6)[:4]
    text = "\n".join(" ".join(str(int(v)) for v in row) for row in M)
    assert small.load_predicates(text)
    W = small.session.workload
    assert W.domain == (2, 3)
    np.testing.assert_array_equal(W.dense(), M)
    assert small.spec_error  # a full-domain predicate matrix has no spec: export reports it
    assert small.export_spec("json") is None and "spec" in small.session.error


# ------------------------------------------------------------------ brush
def test_brush_adds_custom_ranges(builder, session):
    ds = session.data()
    edges = ds.edges[0]
    builder.clear_terms()
    builder.brush.event(boundsx=(edges[10] + 1, edges[20] + 1))  # centres of cells 10..19
    builder.brush.event(boundsx=(edges[50] - 0.5, edges[40] + 2))  # reversed span
    narrow = (edges[100] + edges[101]) / 2
    builder.brush.event(boundsx=(narrow, narrow + 0.1))  # narrower than a cell
    assert builder.error == "", builder.error
    assert builder.custom_ranges() == [(10, 19), (40, 49), (100, 100)]
    assert len(builder.terms) == 1 and builder.terms[0].family == "ranges"
    assert_same(session.workload, wl.ranges(256, [(10, 19), (40, 49), (100, 100)]))
    # typed ranges go to the same term
    assert builder.add_term("ranges", ranges="0-1")
    assert builder.custom_ranges()[-1] == (0, 1) and len(builder.terms) == 1
    # brushes are drawn on the histogram
    hist = builder._histogram()
    spans = [e for e in hist if isinstance(e, hv.VSpans)][0]
    assert len(spans) == 4


def test_brush_outside_or_mismatched_domain_is_reported(builder, session):
    W, terms = session.workload, list(builder.terms)
    builder.brush.event(boundsx=(1e6, 2e6))
    assert "outside" in session.error and session.workload is W and builder.terms == terms
    builder.n = 64
    W, terms = session.workload, list(builder.terms)
    builder.brush.event(boundsx=(0, 500))
    assert "256 cells" in session.error and session.workload is W and builder.terms == terms
    assert builder.use_dataset_size() and builder.domain == (256,)


# ----------------------------------------------------------- bad inputs
@pytest.mark.parametrize("action", [
    lambda b: setattr(b, "n", 0),
    lambda b: setattr(b, "n", -3),
    lambda b: setattr(b, "n", 10**6),
    lambda b: b.set_domain(n="many"),
    lambda b: setattr(b, "attributes", "age:50, age:3"),
    lambda b: setattr(b, "attributes", "age 50"),
    lambda b: setattr(b, "attributes", "a:5000, b:5"),
    lambda b: setattr(b, "attributes", "a:4096, b:4096, c:4096, d:4096, e:4096"),  # > 10**18 cells
    lambda b: setattr(b, "attributes", ", ".join(f"a{i}:2" for i in range(17))),  # 17 attributes
    lambda b: setattr(b, "n", 2**16 + 1),  # 1D: up to 2**16 cells (attributes: 4096)
    lambda b: b.add_term("width_range", k=33),
    lambda b: b.add_term("width_range", k=0),
    lambda b: b.add_term("ranges", ranges="5-40"),
    lambda b: b.add_term("ranges", ranges="9-3"),
    lambda b: b.add_term("ranges", ranges="a-b"),
    lambda b: b.add_term("ranges", ranges=""),
    lambda b: b.add_term("random_ranges", m=0),
    lambda b: b.add_term("marginals", k=1),
    lambda b: b.add_term("predicates", matrix="1 0 2"),
    lambda b: b.add_term("predicates", matrix="1 0 1"),
    lambda b: b.add_term("predicates", matrix="1 0\n1"),
    lambda b: b.load_predicates(b"1 0 x", "m.csv"),
    lambda b: b.load_predicates(b"\x00\xff\xfe", "m.csv"),
    lambda b: b.add_term("product", blocks=["prefix", "identity"]),
    lambda b: b.add_term("nonsense"),
    lambda b: b.add_term("prefix", weight=0),
    lambda b: b.add_term("prefix", weight=float("nan")),
    lambda b: b.add_term("prefix", bogus=1),
    lambda b: b.set_weight(0, -1),
    lambda b: b.set_weight(7, 1),
    lambda b: b.remove_term(7),
    lambda b: b.load_spec("{not json: ["),
    lambda b: b.load_spec(""),
    lambda b: b.load_spec('{"domain": [16], "products": [{"factors": ["nope"]}]}'),
    lambda b: b.load_spec('{"domain": [0], "products": [{"factors": ["prefix"]}]}'),
    lambda b: b.load_spec('{"domain": [100000], "products": [{"factors": ["prefix"]}]}'),
    lambda b: b.load_spec_file(b"\xff\xfe\x00garbage", "w.json"),
    lambda b: b.load_spec_file(b"domain: [4]\nproducts: 3\n", "w.yaml"),
])
def test_invalid_input_keeps_workload_and_reports(small, action):
    small.add_term("prefix")
    small.add_term("identity", weight=2)
    before = snapshot(small)
    small.session.error = ""
    action(small)
    assert small.session.error, "no message reported"
    assert small.error == small.session.error
    W, terms, domain, n, attrs = snapshot(small)
    assert W is before[0] and terms == before[1] and domain == before[2]
    assert (n, attrs) == (before[3], before[4])  # widgets show the domain still in use
    assert "Traceback" not in small.session.error
    # the next valid input works again and clears the builder's error
    assert small.add_term("total")
    assert small.error == ""
    assert_same(small.session.workload, wl.union([wl.prefix(32), wl.identity(32), wl.total(32)],
                                                 [1, 2, 1]))


def test_domain_change_that_breaks_a_term_is_refused(small):
    small.add_term("ranges", ranges="20-30")
    before = snapshot(small)
    small.n = 16
    assert "[20, 30]" in small.session.error or "20" in small.session.error
    assert snapshot(small)[0] is before[0] and small.n == 32 and small.domain == (32,)


def test_messages_say_what_is_allowed(small):
    small.n = 0
    assert "at least 1" in small.session.error and "65,536" in small.session.error
    small.add_term("width_range", k=40)
    assert "40" in small.session.error and "32" in small.session.error
    small.add_term("ranges", ranges="5-40")
    assert "0 <= lo <= hi <= 31" in small.session.error
    small.load_spec("{not json: [")
    assert "Spec not loaded" in small.session.error and "parse" in small.session.error


# ------------------------------------------------------------------ spec
def test_spec_load_replaces_terms_and_export_download(builder, session):
    spec = {"domain": [64], "name": "mine",
            "products": [{"weight": 1, "factors": ["prefix"]},
                         {"weight": 3, "factors": [{"type": "width_range", "w": 4}]}]}
    builder.spec_text = json.dumps(spec)
    assert builder.load_spec(builder.spec_text)
    assert [t.family for t in builder.terms] == ["spec"] and builder.n == 64
    expected = dpx.spec.from_spec(spec)
    assert_same(session.workload, expected)
    # downloads (the FileDownload callbacks) give the canonical spec
    layout = builder.panel()
    downloads = [d for d in layout.select(pn.widgets.FileDownload)
                 if not d.filename.startswith("dpexplorer-")]  # the figures' (test_ui_exports)
    assert {d.filename for d in downloads} == {"workload.json", "workload.yaml"}
    for d in downloads:
        text = d.callback().read()
        W = dpx.spec.loads(text, "yaml" if d.filename.endswith("yaml") else "json")
        assert_same(W, expected)
    # a term added after a spec is unioned with it
    assert builder.add_term("total", weight=2)
    assert_same(session.workload, wl.union([expected, wl.total(64)], [1, 2]))
    # the domain of a spec term cannot change: refused and kept
    W = session.workload
    builder.n = 32
    assert session.workload is W and builder.n == 64 and "spec" in session.error


def test_spec_file_input_widget_loads(builder, session):
    layout = builder.panel()
    spec_input = [w for w in layout.select(Upload) if w.accepted_filetypes[0] == ".json"][0]  # not the schema upload
    text = dpx.spec.dumps(wl.union([wl.identity(16), wl.prefix(16)], [1, 2]), "yaml")
    spec_input.receive(text.encode(), "w.yaml")
    assert builder.error == ""
    assert_same(session.workload, wl.union([wl.identity(16), wl.prefix(16)], [1, 2]))


def test_external_workload_is_adopted(builder, session):
    session.workload = wl.union([wl.prefix(40), wl.identity(40)], [1, 4])
    assert builder.domain == (40,) and builder.n == 40
    assert [(t.family, t.weight) for t in builder.terms] == [("prefix", 1.0), ("identity", 4.0)]
    assert builder.add_term("total")
    assert_same(session.workload, wl.union([wl.prefix(40), wl.identity(40), wl.total(40)], [1, 4, 1]))
    dense = dpx.matrix.Dense(np.ones((2, 40)))  # no spec: kept as one term
    session.workload = dense
    assert [t.family for t in builder.terms] == ["external"] and session.workload is dense
    assert builder.spec_error


# --------------------------------------------------------------- heatmap
def test_heatmap_switches_to_gram_for_large_w(small):
    small.add_term("prefix")
    img = small.heatmap()
    assert small.drawn == "W" and isinstance(img, hv.Image)
    # y = query index (drawn downwards), x = cell index
    np.testing.assert_array_equal(img.dimension_values(2, flat=False), np.tril(np.ones((32, 32))))
    assert img[5.5, 0.5] == 0 and img[0.5, 5.5] == 1
    small.set_domain(n=1024)  # all ranges... here prefix: 1024² > 200 000 entries
    img = small.heatmap()
    assert small.drawn == "WᵀW" and isinstance(img, hv.Image)
    assert "WᵀW" in small.heatmap_data()[2]
    assert img.dimension_values(2, flat=False).shape == (512, 512)  # block means
    # a short title that fits the plot; the explanation above it (it was cut off)
    assert img.opts.get().kwargs["title"] == "WᵀW (1,024 × 1,024)"
    page = small.panel()
    assert any("more than 200,000" in str(md.object) for md in page.select(pn.pane.Markdown))


def test_a_change_of_terms_updates_the_drawn_heatmap_in_place_without_an_overlay(small):
    """The page's heatmap is one Bokeh figure whose image, ranges, labels and title follow
    the workload (no new figure per change), and a quick build shows no loading overlay."""
    from bokeh.document import Document
    from bokeh.models import ColumnDataSource, Plot

    small.add_term("prefix")
    root = small.panel().get_root(Document())

    def heatmap_figure():
        found = [p for p in root.select({"type": Plot}) if p.title is not None
                 and p.title.text.startswith(("W (", "WᵀW ("))]
        assert len(found) == 1, [p.title.text for p in root.select({"type": Plot})]
        return found[0]
    before = heatmap_figure()
    assert before.title.text == "W (32 × 32)"
    busy = []
    small.param.watch(lambda e: busy.append(e.new), "busy")
    small.add_term("identity")
    after = heatmap_figure()
    assert after is before and after.title.text == "W (64 × 32)"
    image = [s for s in after.select({"type": ColumnDataSource}) if "image" in s.data][0]
    assert image.data["image"][0].shape == (64, 32)
    assert after.y_range.start == 64  # the range follows (drawn downwards)
    assert busy == []  # milliseconds: no overlay
    small.set_domain(n=1024)
    assert heatmap_figure().title.text == "WᵀW (1,024 × 1,024)"
    for dmap in small.panel().select(pn.pane.HoloViews):  # no frames kept for the session's life
        if isinstance(dmap.object, hv.DynamicMap):
            assert len(dmap.object.data) <= 1


def test_a_slow_build_shows_the_loading_overlay_until_it_ends(small, monkeypatch):
    monkeypatch.setattr(bmod, "BUSY_AFTER", 0.01)
    slow = tmod.WorkloadTerms.build

    def build(self, *args, **kwargs):
        import time
        time.sleep(0.2)
        return slow(self, *args, **kwargs)
    monkeypatch.setattr(tmod.WorkloadTerms, "build", build)
    busy = []
    small.param.watch(lambda e: busy.append(e.new), "busy")
    assert small.add_term("prefix")
    assert busy == [True, False] and not small.busy


def test_heatmap_message_when_gram_too_large(small):
    small.add_term("identity")
    assert small.set_domain(attributes="a:100, b:100")
    out = small.heatmap()
    assert small.drawn == "" and isinstance(out, pn.Column)
    alert = out.select(pn.pane.Alert)[0]
    assert "Too large to draw" in alert.object
    assert small.stats["n"] == 10_000 and small.stats["l1"] == 1.0
    # the structure is shown instead: one product, Identity on both attributes
    table = out.select(pn.widgets.Tabulator)[0].value
    assert list(table["product"]) == ["a: Identity ⊗ b: Identity"]
    assert list(table["queries"]) == [10_000] and list(table["weight"]) == [1.0]


def test_heatmap_gram_values(small):
    small.add_term("all_range")
    small.n = 700  # 245 350 rows × 700 > 200 000 entries, 700 ≤ 4096: WᵀW, pooled to 350×350
    which, A, _ = small.heatmap_data()
    assert which == "WᵀW" and A.shape == (350, 350)
    G = wl.all_range(700).gram().dense()
    np.testing.assert_allclose(A[0, 0], G[:2, :2].mean())


# -------------------------------------------------------------------- UI
def test_page_renders_and_widgets_drive_the_builder(builder, session):
    layout = pn.panel(builder)
    assert layout.get_root() is not None
    n_widget = [w for w in layout.select(pn.widgets.IntInput) if w.value == 256][0]
    n_widget.value = 128
    assert builder.domain == (128,)
    n_widget.value = -1
    assert builder.domain == (128,) and n_widget.value == 128 and session.error
    tab = layout.select(pn.widgets.Tabulator)[0]
    assert list(tab.value["term"]) == [t.label for t in builder.terms]
    builder.add_term("prefix")
    assert len(tab.value) == 2


def test_table_edits_and_buttons(small):
    from panel.models.tabulator import TableEditEvent

    layout = small.panel()
    root = layout.get_root()
    tab = layout.select(pn.widgets.Tabulator)[0]
    buttons = {b.label: b for b in layout.select(pn.widgets.Button)}
    family = [w for w in layout.select(pn.widgets.Select) if w.label == "Query family"][0]
    family.value = "prefix"
    buttons["Add term"].clicks += 1
    family.value = "identity"
    buttons["Add term"].clicks += 1
    assert [t.family for t in small.terms] == ["prefix", "identity"]
    model = tab._models[root.ref["id"]][0]

    def edit(row, value):  # what the browser sends: the new cell value, then the event
        tab.patch({"weight": [(row, value)]})
        tab._process_event(TableEditEvent(model=model, column="weight", row=row, pre=False))
    edit(1, 3.0)
    assert_same(small.session.workload, wl.union([wl.prefix(32), wl.identity(32)], [1, 3]))
    W = small.session.workload
    edit(0, -2.0)
    assert small.session.workload is W and "weight" in small.session.error
    assert list(tab.value["weight"]) == [1.0, 3.0]  # the table shows the weights in use
    tab.selection = [0]
    buttons["Remove selected"].clicks += 1
    assert_same(small.session.workload, wl.union([wl.identity(32)], [3]))
    buttons["Clear all"].clicks += 1
    assert small.terms == [] and len(tab.value) == 0


# ------------------------------------------------- multi-attribute
CPS_NAMES = ("income", "age", "marital", "race", "sex")


@pytest.mark.parametrize("key, domain, identity_rmse, svd_bound, l1, l2", [
    # HDMM Table 6 (Laplace, ε = 1): Identity column and SVDB column
    ("cps_all_marginals", (50, 100, 7, 4, 2), 5.38, 2.63, 32.0, 32 ** 0.5),
    ("cps_all_prefix_marginals", (50, 100, 7, 4, 2), 98.06, 9.32, 40000.0, 200.0),
    ("adult_marginals", (100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2), 5352117.26,
     None, 470.0, 470 ** 0.5),
])
def test_presets_reproduce_the_hdmm_workloads(session, key, domain, identity_rmse, svd_bound,
                                              l1, l2):
    b = WorkloadBuilder(session)
    assert b.load_preset(key), b.error
    W = session.workload
    assert b.domain == domain and tuple(W.domain) == domain and len(b.attribute_names) == len(domain)
    if key.startswith("cps"):
        assert b.attribute_names == CPS_NAMES
    noise = dpx.Laplace(1.0)
    I = dpx.strategies.identity(domain)
    assert round(dpx.rmse(W, I, noise), 2) == identity_rmse
    if svd_bound is not None:
        assert round(dpx.svd_bound(W, noise), 2) == svd_bound
    # sensitivities from the Kronecker factors (no vector of n entries; Adult has 6.4e17 cells)
    s = b.stats
    assert s["l1"] == pytest.approx(l1, rel=1e-12) and s["l1_exact"]
    assert s["l2"] == pytest.approx(l2, rel=1e-12) and s["l2_exact"]
    assert b.error == "" and session.error == ""
    # no n × n preview: said why, the structure is listed instead
    which, array, note = b.heatmap_data()
    assert which == "" and array is None and "Too large to draw" in note
    frame = b.structure_frame()
    assert frame.attrs["products"] == len(dpx.error.kron_terms(W))
    if key == "adult_marginals":
        assert frame.attrs["products"] == 470 and len(frame) == tmod.MAX_PRODUCTS_SHOWN
        assert frame["product"].iloc[0] == "Total (all cells)"
        assert frame["product"].iloc[1] == "capital_gain: Identity"
        assert [t.label for t in b.terms] == ["0–3-way marginals"]
    if key == "cps_all_prefix_marginals":
        assert frame["product"].iloc[0].startswith("income: Prefix ⊗ age: Prefix ⊗ marital:")
        assert W.m == 50 * 100 * 8 * 5 * 3


def test_preset_workloads_equal_the_engines(session):
    wl_ = dpx.workloads
    dom = (50, 100, 7, 4, 2)
    b = WorkloadBuilder(session)
    b.load_preset("cps_all_marginals")
    want = wl_.kron([wl_.identity_total(n) for n in dom])
    W = session.workload
    assert W.shape == want.shape
    assert [f.name for f in dpx.error.kron_terms(W)[0][1]] == [f.name for f in want.factors]
    b.load_preset("cps_all_prefix_marginals")
    assert dpx.spec.to_spec(session.workload)["products"] == [
        {"weight": 1.0, "factors": [{"type": "prefix"}, {"type": "prefix"},
                                    {"type": "identity_total"}, {"type": "identity_total"},
                                    {"type": "identity_total"}]}]
    assert dpx.spec.to_spec(session.workload)["attributes"] == list(CPS_NAMES)


def test_marginal_orders(small):
    small.attributes = "a:3, b:4, c:2"
    dom = (3, 4, 2)
    assert small.add_term("marginals", orders="0-2")
    assert_same(small.session.workload, wl.marginals(dom, [0, 1, 2]))
    assert small.terms[-1].label == "0–2-way marginals"
    small.clear_terms()
    small.orders = "1, 3"  # from the builder's input
    assert small.add_term("marginals")
    assert_same(small.session.workload, wl.marginals(dom, [1, 3]))
    assert small.terms[-1].label == "1, 3-way marginals"
    assert small.add_term("range_marginals", orders=[1], range_kind="prefix", weight=2.0)
    assert_same(small.session.workload, wl.union([wl.marginals(dom, [1, 3]),
                                                  wl.range_marginals(dom, 1, "prefix")], [1, 2]))
    small.orders = ""
    assert small.add_term("marginals", k=3)  # k when no orders are given
    assert small.terms[-1].params == {"k": 3}


@pytest.mark.parametrize("orders, message", [
    ("0-4", "must be in [0, 3]"), ("2-1", "reversed"), ("x", "cannot read"), ("", "k"),
    ([], "no marginal order"), ("5", "k = 5")])
def test_bad_marginal_orders_keep_the_workload(small, orders, message):
    small.attributes = "a:3, b:4, c:2"
    small.add_term("identity")
    before = snapshot(small)
    if orders == "":
        small.k = 2
        small.orders = ""
        assert small.add_term("marginals", k=9) is False
        message = "k = 9"
    else:
        assert small.add_term("marginals", orders=orders) is False
    assert message in small.session.error, small.session.error
    assert snapshot(small)[0] is before[0] and small.terms == before[1]


def test_presets_from_the_widgets_and_unknown_preset(builder, session):
    layout = builder.panel()
    assert layout.get_root() is not None
    select = [w for w in layout.select(pn.widgets.Select)
              if getattr(w, bmod._LABEL) == "Schema and workload"][0]
    assert set(select.options.values()) == set(tmod.PRESETS)
    select.value = "cps_all_prefix_marginals"
    assert builder.preset == "cps_all_prefix_marginals"
    button = [w for w in layout.select(pn.widgets.Button)
              if getattr(w, bmod._LABEL).startswith("Load preset")][0]
    button.clicks += 1
    assert builder.domain == (50, 100, 7, 4, 2) and builder.terms[0].family == "product"
    assert "HDMM" in tmod.PRESETS["cps_all_prefix_marginals"].source
    W, terms = session.workload, list(builder.terms)
    assert builder.load_preset("census_sf1") is False
    assert "unknown preset" in session.error and "cps_all_marginals" in session.error
    assert session.workload is W and builder.terms == terms
    preview = builder.panel()  # the preview of a large workload renders (an Alert and a table)
    assert any("Too large to draw" in str(a.object) for a in preview.select(pn.pane.Alert))


# ------------------------------------------------------------ the page's link keeps the terms
def test_link_carries_the_terms_and_rebuilds_them():
    b = WorkloadBuilder(Session())
    b.add_term("prefix")
    b.add_term("width_range", k=8, weight=2.0)
    link = json.loads(json.dumps(b.url_terms))  # what travels in the URL
    assert [f for f, _, _ in link] == ["all_range", "prefix", "width_range"]
    other = WorkloadBuilder(Session())
    other.param.update(n=128, url_terms=link)
    assert other.error == ""
    assert other.domain == (128,)
    assert [t.label for t in other.terms] == ["All ranges", "Prefix", "Ranges of width 8"]
    assert [t.weight for t in other.terms] == [1.0, 1.0, 2.0]
    W = other.session.workload
    assert W.n == 128 and W.m == 128 * 129 // 2 + 128 + (128 - 8 + 1)


def test_link_with_attributes_and_products():
    link = [["marginals", {"k": [1, 2]}, 1.0],
            ["product", {"factors": [{"type": "prefix"}, {"type": "width_range", "w": 2}]}, 0.5]]
    b = WorkloadBuilder(Session())
    b.param.update(attributes="a:4, b:5", url_terms=link)
    assert b.error == "" and b.domain == (4, 5)
    assert [t.family for t in b.terms] == ["marginals", "product"]
    assert b.url_terms == link  # the link is the canonical form


@pytest.mark.parametrize("link, reason", [
    ([["evil", {}, 1]], "cannot carry a 'evil' term"),
    ([["identity", {}, -1]], "weight must be a positive"),
    ([["random_ranges", {"m": 10**8, "kind": "uniform", "seed": 0}, 1]], "must be 1 to"),
    ([1, 2], "list of [family, parameters, weight]"),
    ([["ranges", {"ranges": [[0, 10**6]]}, 1]], "0 <= lo <= hi <= 255"),
    ([["identity", {}, 1]] * 400, "links carry at most"),
])
def test_a_bad_link_keeps_the_terms_and_says_why(link, reason):
    b = WorkloadBuilder(Session())
    before = list(b.terms)
    b.url_terms = link
    assert "Workload from the link not used" in b.error and reason in b.error
    assert b.terms == before and b.session.error == b.error
    assert b.url_terms == [["all_range", {}, 1.0]]  # the URL shows what is used


def test_terms_that_cannot_travel_leave_the_link_empty():
    b = WorkloadBuilder(Session())
    b.session.workload = dpx.workloads.prefix(256)  # set by another page: an external term...
    b.add_term("predicates", matrix=np.ones((200, 256)))  # ...or a long matrix
    assert b.url_terms == []


def test_terms_table_is_one_table_updated_in_place_with_stable_columns(small):
    """The Terms table lives for the page: every change of the terms (Clear all included)
    sets its value with the same columns and dtypes; the page's parts are updated in place,
    never re-made by a function Panel re-runs on its callback threads (such a re-run holds
    the whole document from a thread: the browser then got changes of plots it never
    received, "reference pNNNN isn't known")."""
    page = small.panel()
    tables = [t for t in page.select(pn.widgets.Tabulator) if "weight" in t.value.columns]
    assert len(tables) == 1
    table = tables[0]
    dtypes = {"term": np.dtype(object), "queries": np.dtype("int64"), "weight": np.dtype("float64")}
    hist, heat = small._hist_pane.object, page.select(pn.pane.HoloViews)[0]
    for change in (lambda: small.add_term("identity"), lambda: small.add_term("prefix"),
                   small.clear_terms, lambda: small.add_term("total")):
        change()
        assert [t for t in page.select(pn.widgets.Tabulator) if "weight" in t.value.columns] == [table]
        assert dict(table.value.dtypes) == dtypes, table.value.dtypes
        assert list(table.value["term"]) == [t.label for t in small.terms]
    assert page.select(pn.pane.HoloViews)[0] is heat and heat.object is not None
    # the data histogram shows no range term: it was not redrawn for these changes
    assert small._hist_pane.object is hist
    assert small.add_ranges([(0, 3)])
    assert small._hist_pane.object is not hist  # its ranges are shaded
    assert not page.select(pn.param.ParamMethod) and not page.select(pn.param.ParamFunction)


def test_a_browser_edit_of_rows_cleared_meanwhile_is_dropped():
    """A browser's data message for terms the server has just cleared: Panel read the empty
    text column as dates (TypeError: 'str' / 'int') and applied old rows to the new table."""
    import pandas as pd

    b = WorkloadBuilder(Session())
    b.clear_terms()
    empty = b.terms_frame()
    assert len(empty) == 0
    table = bmod.TermsTable(empty, show_index=True)
    stale = {"term": ["All ranges", "Prefix"], "queries": [10, 4], "weight": [1.0, 1.0]}
    table._process_data(stale)  # raised TypeError inside Panel before
    assert len(table.value) == 0
    # rows edited in the browser after the server added one (pandas' "Must have equal len
    # keys and value" before)
    table.value = b.terms_frame().iloc[:0]
    one = pd.DataFrame({"term": ["All ranges"], "queries": [10], "weight": [1.0]})
    table.value = one
    table._process_data(stale)
    assert table.value.equals(one)
    # an edit of the rows the table has is applied as before
    table.value = pd.DataFrame({"term": ["All ranges"], "queries": [10], "weight": [1.0]})
    table._process_data({"term": ["All ranges"], "queries": [10], "weight": [2.5]})
    assert table.value["weight"].tolist() == [2.5]
