"""Every figure of the app has a download control (PNG, SVG, CSV of its numbers):
each page's controls by figure, their CSV bytes against the figure drawn, the release's export
without true answers, and what the control says without a headless browser."""

from __future__ import annotations

import io
import re

import numpy as np
import pandas as pd
import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from dpexplorer import figures  # noqa: E402
from dpexplorer.ui import exports as exports_module  # noqa: E402
from dpexplorer.ui.audit_view import AuditView  # noqa: E402
from dpexplorer.ui.builder import WorkloadBuilder  # noqa: E402
from dpexplorer.ui.compare_view import ComparePage  # noqa: E402
from dpexplorer.ui.data_view import DataView  # noqa: E402
from dpexplorer.ui.exports import FigureExport  # noqa: E402
from dpexplorer.ui.learn import LearnView  # noqa: E402
from dpexplorer.ui.release_view import ReleaseView  # noqa: E402
from dpexplorer.ui.session import Session  # noqa: E402
from dpexplorer.ui.strategy_view import StrategyView  # noqa: E402
from dpexplorer.ui.sums_view import SumsView  # noqa: E402

W64 = dpx.workloads.all_range(64)


# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


def _csv(exp: FigureExport) -> pd.DataFrame:
    """The CSV the control's CSV button downloads (through the FileDownload callback)."""
    data = exp.buttons()["csv"].callback().getvalue()
    assert data, f"{exp.page}/{exp.figure}: empty CSV"
    return pd.read_csv(io.BytesIO(data))


#: Where an HTML page names a file to load: script src, link href, CSS @import and url(...).
_RESOURCE_URL = re.compile(
    r"""<script[^>]*\bsrc\s*=\s*["']?(?P<src>[^"'\s>]+)|<link[^>]*\bhref\s*=\s*["']?(?P<href>[^"'\s>]+)"""
    r"""|@import\s+(?:url\()?\s*["']?(?P<imp>[^"')\s;]+)|url\(\s*["']?(?P<url>[^"')\s]+)""", re.I)


def resource_urls(html: str) -> list[str]:
    """The files an HTML page asks the browser to load (``data:`` URIs are inline, not loaded)."""
    found = [next(v for v in m.groupdict().values() if v) for m in _RESOURCE_URL.finditer(html)]
    return [u for u in found if not u.lower().startswith("data:")]


def _styles_and_tags(html: str) -> str:
    """The HTML less its inline scripts' bodies (code may name URLs it never loads)."""
    return re.sub(r"(<script[^>]*>).*?(</script>)", r"\1\2", html, flags=re.S | re.I)


def _check(exports: dict, names: set, shown_figures: dict | None = None) -> None:
    """Every named figure has a control in the page's layout whose CSV holds the figure's numbers,
    and its standalone HTML loads nothing (no URL of any kind)."""
    assert names <= set(exports), sorted(names - set(exports))
    for name in names:
        exp = exports[name]
        assert set(exp.buttons()) == {"png", "svg", "csv"}
        assert exp.buttons()["csv"].filename == f"dpexplorer-{exp.page}-{name}.csv"
        fig = exp.figure_now()
        assert fig is not None, name
        html = figures.figure_html(fig)
        assert not resource_urls(_styles_and_tags(html)), (name, resource_urls(_styles_and_tags(html)))
        back = _csv(exp)
        want = figures.figure_frame(fig)
        pd.testing.assert_frame_equal(back, pd.read_csv(io.StringIO(want.to_csv(index=False))),
                                      check_dtype=False, obj=name)
        if shown_figures and name in shown_figures:  # the numbers the page draws
            drawn = figures.figure_frame(shown_figures[name]())
            pd.testing.assert_frame_equal(
                back, pd.read_csv(io.StringIO(drawn.to_csv(index=False))), check_dtype=False)


def _in_layout(layout, exports: dict) -> None:
    rows = {id(e.__panel__()) for e in exports.values()}
    found = {id(r) for r in layout.select(pn.Row) if id(r) in rows}
    assert found == rows


def test_compare_page_every_figure():
    session = Session(workload=W64)
    page = ComparePage(session, auto_optimize=False)
    assert page.wait(120)
    root = page.panel()
    page.accuracy_first.param.update(metric="rmse", target=5.0, mode="epsilon")
    assert page.wait(120)
    _check(page.exports, {"rmse-bars", "per-query", "per-query-by-length", "privacy-accuracy",
                          "epsilon-bars", "target-curve"},
           {"rmse-bars": page.bars, "privacy-accuracy": page.curve_plot})
    _in_layout(root, page.exports)
    bars = _csv(page.exports["rmse-bars"])
    shown = page.table.dropna(subset=["rmse"])
    got = bars[bars["element"] == "Bars"].set_index("label")["rmse"]
    np.testing.assert_allclose(got[shown["label"]].to_numpy(), shown["rmse"].to_numpy(), rtol=1e-12)
    eps = _csv(page.exports["epsilon-bars"])
    t = page.accuracy_first.table.dropna(subset=["epsilon"])
    got = eps[eps["element"] == "Bars"].set_index("label")["epsilon"]
    np.testing.assert_allclose(got[t["label"]].to_numpy(), t["epsilon"].to_numpy(), rtol=1e-12)


def test_workload_page_every_figure():
    session = Session()
    page = WorkloadBuilder(session)
    root = page.panel()
    _check(page.exports, {"heatmap", "data-histogram"})
    _in_layout(root, page.exports)
    hist = _csv(page.exports["data-histogram"])
    bars = hist[hist["element"] == "Histogram"]
    np.testing.assert_array_equal(bars["count"], session.data().x)   # the data vector drawn
    heat = _csv(page.exports["heatmap"])
    assert (heat["element"] == "Image").all() and len(heat) > 0


def test_strategy_page_every_figure():
    session = Session(workload=dpx.workloads.all_range(32))
    page = StrategyView(session, left="hb", right="hdmm")
    assert page.wait(300)
    root = page.panel()
    _check(page.exports, {"left-heatmaps", "right-heatmaps", "right-convergence"},
           {"right-convergence": lambda: page.convergence("right")})
    _in_layout(root, page.exports)
    # no convergence for HB: its control is hidden, not empty
    assert not page.exports["left-convergence"].__panel__().visible
    assert page.exports["right-convergence"].__panel__().visible


def test_data_page_every_figure():
    session = Session()
    page = DataView(session)
    root = page.panel()
    assert page.exports["data"].__panel__().visible
    assert not page.exports["private-partition"].__panel__().visible   # no run yet
    assert page.run() is True
    _check(page.exports, {"data", "private-partition", "exact-partition", "estimate"})
    assert page.exports["private-partition"].__panel__().visible
    _in_layout(root, page.exports)


def test_release_export_holds_only_what_is_released():
    session = Session()
    page = ReleaseView(session)
    root = page.panel()
    assert page.run_release() is True, session.error
    assert page.run_trials(5, seed=3) is True
    _check(page.exports, {"released-answers"})
    _in_layout(root, page.exports)
    df = _csv(page.exports["released-answers"])
    rec = page.last
    frame = rec.release.to_frame()
    # the page's figure draws the true answers and the simulation; the export never
    shown_figure = figures.figure_frame(page.answers_plot())
    assert "true" in shown_figure.columns
    assert not {"true", "q05", "q95", "rank"} & set(df.columns)
    assert set(df["element"]) == {"ErrorBars", "Scatter"}
    scatter = df[df["element"] == "Scatter"]
    np.testing.assert_array_equal(scatter["query"], frame["query"].to_numpy()[rec.shown])
    np.testing.assert_allclose(scatter["released"], frame["answer"].to_numpy()[rec.shown])
    text = page.exports["released-answers"].buttons()["csv"].callback().getvalue().decode()
    assert set(df.columns) == {"element", "element_group", "element_label", "query", "released",
                               "minus", "plus"}
    true = rec.true_answers[rec.shown]
    for col in ("query", "released", "minus", "plus"):   # no column is (or orders) the truth
        for part in (df[df["element"] == e][col].to_numpy() for e in ("ErrorBars", "Scatter")):
            assert not np.allclose(part, true) and not np.allclose(part, np.sort(true))
    assert "seed" not in text.lower() and "simulat" not in text.lower()


def test_sums_page_every_figure():
    session = Session()
    page = SumsView(session, bins=128, queries=20, trials=4)
    root = page.panel()
    assert page.run() is True, session.error
    assert page.wait(120)
    _check(page.exports, {"answers", "relative-error", "relative-error-isotonic", "tau-curve"},
           {"tau-curve": page.curve_plot})
    _in_layout(root, page.exports)


def test_audit_page_every_figure():
    session = Session()
    page = AuditView(session, background=False, runs=200)
    root = page.panel()
    assert page.run_audit() is True, session.error
    _check(page.exports, {"bound", "histogram"}, {"bound": page.bound_plot})
    _in_layout(root, page.exports)


def test_learn_page_every_lesson():
    session = Session()
    page = LearnView(session)
    assert set(page.exports) == set(page.lessons)
    key = next(iter(page.lessons))
    assert page.lessons[key].result is not None
    exp = page.exports[key]
    pd.testing.assert_frame_equal(
        _csv(exp), pd.read_csv(io.StringIO(figures.figure_frame(
            page.lessons[key].figure()).to_csv(index=False))), check_dtype=False)


def test_table_release_figure():
    from dpexplorer.ui.table_workload import TableMarginals  # noqa: F401

    session = Session(noise="Gaussian")
    builder = WorkloadBuilder(session)
    tm = builder.tables
    tm.param.update(attributes=["Region", "Segment"], orders="1-2", mode="orders")
    assert tm.build() is True, session.error
    page = ReleaseView(session)
    page.panel()
    assert page.run_release() is True, session.error
    tables = page.tables
    _check(tables.exports, {"marginal"}, {"marginal": tables.marginal_plot})


# ------------------------------------------------------------------ without a headless browser
def test_without_a_browser_csv_still_works_and_the_control_says_why(monkeypatch):
    reasons = []
    monkeypatch.setattr(exports_module, "_BROKEN", [])
    monkeypatch.setattr(figures, "image_export_missing", lambda: "no browser here (test)")
    exp = FigureExport("test", "curve", lambda: hv.Curve(([1, 2], [3, 4]), "x", "y"),
                       report=reasons.append)
    b = exp.buttons()
    assert b["png"].disabled and b["svg"].disabled and not b["csv"].disabled
    note = exp.__panel__().objects[-1]
    assert note.visible and "no browser here (test)" in note.object and "CSV" in note.object
    assert b["png"].callback().getvalue() == b""
    assert reasons and "PNG not made" in reasons[0] and "CSV" in reasons[0]
    assert list(_csv(exp)["y"]) == [3, 4]


def test_a_failing_browser_turns_images_off_with_a_message(monkeypatch):
    reasons = []
    monkeypatch.setattr(exports_module, "_BROKEN", [])
    monkeypatch.setattr(figures, "image_export_missing", lambda: "")

    def broken(*a, **k):
        raise RuntimeError("PNG/SVG export needs a headless browser: chromium crashed")
    monkeypatch.setattr(figures, "figure_bytes", lambda fig, fmt: (
        broken() if fmt != "csv" else figures.figure_frame(fig).to_csv(index=False).encode()))
    exp = FigureExport("test", "curve", lambda: hv.Curve(([1, 2], [3, 4]), "x", "y"),
                       report=reasons.append)
    b = exp.buttons()
    assert not b["png"].disabled
    assert b["svg"].callback().getvalue() == b""
    assert "SVG not made" in reasons[-1] and "chromium crashed" in reasons[-1]
    assert b["png"].disabled and b["svg"].disabled and exp.__panel__().objects[-1].visible
    assert list(_csv(exp)["x"]) == [1, 2]


def test_no_figure_yet_is_a_message_not_a_traceback():
    reasons = []
    exp = FigureExport("test", "nothing-yet", lambda: None, report=reasons.append)
    assert exp.buttons()["csv"].callback().getvalue() == b""
    assert "no nothing yet figure to export yet" in reasons[0]


@pytest.mark.skipif(figures.image_export_missing() != "", reason="no headless browser")
def test_png_and_svg_of_a_page_figure():
    session = Session(workload=W64)
    page = ComparePage(session, auto_optimize=False)
    assert page.wait(120)
    page.panel()
    png = page.exports["rmse-bars"].buttons()["png"].callback().getvalue()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    svg = page.exports["privacy-accuracy"].buttons()["svg"].callback().getvalue()
    assert svg.lstrip().startswith(b"<svg")


def test_csv_download_neutralises_formula_labels():
    """The CSV button writes through figures.safe_csv: labels that start like a formula get a quote."""
    bars = hv.Bars(pd.DataFrame({"mechanism": ["=cmd|calc!A1", "+1", "@x", "-x", "HB"],
                                 "rmse": [1.5, -2.0, 3.0, 4.0, 5.0]}), "mechanism", "rmse")
    exp = FigureExport("test", "bars", lambda: bars)
    text = exp.buttons()["csv"].callback().getvalue().decode()
    back = pd.read_csv(io.StringIO(text))
    assert back["mechanism"].tolist() == ["'=cmd|calc!A1", "'+1", "'@x", "'-x", "HB"]
    assert back["rmse"].tolist() == [1.5, -2.0, 3.0, 4.0, 5.0] and ",-2.0" in text


def test_bokehs_own_export_page_lists_panels_files_and_the_figure_page_does_not():
    """Why the exports use :func:`figures.inline_resources`: with Panel imported (and an
    extension loaded, as in a notebook), Bokeh's INLINE page for the same figure lists Panel's
    bundles by server path (not loadable from a file) and a CDN's MathJax (not offline)."""
    from bokeh.io.export import get_layout_html

    pn.extension("tabulator", "mathjax")
    fig = hv.Curve([1, 3, 2]).opts(title="offline")
    model = figures.to_bokeh(fig, 300, 200)
    assert any("static/extensions/panel" in u or u.startswith("http")
               for u in resource_urls(_styles_and_tags(get_layout_html(model))))
    assert resource_urls(_styles_and_tags(get_layout_html(model, resources=figures.inline_resources()))) == []
    assert resource_urls(_styles_and_tags(figures.figure_html(fig))) == []
