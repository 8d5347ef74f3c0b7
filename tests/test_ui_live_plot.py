"""LivePlot: frames that differ only in numbers are copied into the drawn figure.

The copy must leave every figure as HoloViews would have drawn the frame: each
test compares the drawn Bokeh models with a fresh ``hv.render`` of the same data.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("panel")
import holoviews as hv  # noqa: E402
import panel as pn  # noqa: E402
from bokeh.models import GlyphRenderer, Plot, Span  # noqa: E402

from dpexplorer.ui.compare_view import ComparePage  # noqa: E402
from dpexplorer.ui.live_plot import LivePlot  # noqa: E402
from dpexplorer.ui.session import Session  # noqa: E402

hv.extension("bokeh")


# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


def _state(fig: Plot) -> dict:
    """What a figure shows: title, ranges, and each renderer's data or location, in order."""
    out = {"title": fig.title.text if fig.title is not None else None}
    for axis, rng in (("x", fig.x_range), ("y", fig.y_range)):
        out[axis] = list(rng.factors) if hasattr(rng, "factors") else (rng.start, rng.end)
    layers = []
    for r in fig.renderers:
        if isinstance(r, GlyphRenderer):
            layers.append((type(r.glyph).__name__,
                           {k: list(np.asarray(v)) for k, v in r.data_source.data.items()}))
        elif isinstance(r, Span):
            layers.append(("Span", r.location))
    out["layers"] = layers
    return out


def _same(a, b, path="") -> None:
    """``a`` equals ``b``: floats to 1e-12 relative, NaN equal to NaN."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, float | np.floating) and isinstance(b, float | np.floating | int):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12), path
    else:
        assert a == b, path


def _drawn(live: LivePlot) -> list[Plot]:
    return [plot.state for plot in live._plots]


def test_an_epsilon_change_is_copied_into_the_compare_figures_as_holoviews_would_draw_it():
    session = Session()  # All Range, n = 256, Laplace ε = 1
    page = ComparePage(session)
    assert page.wait(120)
    page.mechanism = "identity"
    assert page.wait(60)
    page.panel().get_root()
    assert page.wait(60)
    names = ("bars", "curve", "by_index", "by_length")
    lives = {name: page._panes[name] for name in names}
    before = {name: dict(live.counts) for name, live in lives.items()}
    # what reaches the browser first: the figures' numbers, then the table's
    order, table = [], page._panes["table"]

    def spy(name, fn):
        def call(*args, **kwargs):
            order.append(name)
            return fn(*args, **kwargs)
        return call
    table.patch = spy("table", table.patch)
    for name in ("bars", "curve"):
        lives[name].copy = spy(name, lives[name].copy)
    for eps in (0.5, 0.005, 3.0):  # 0.005: below the privacy–accuracy chart's ε grid
        order.clear()
        session.epsilon = eps
        assert page.wait(60)
        assert order[:3] == ["bars", "curve", "table"], order
        for name, live in lives.items():
            figures = _drawn(live)
            assert len(figures) == 1, name
            fresh = hv.render(live.make(live.pipe.data), backend="bokeh")
            _same(_state(figures[0]), _state(fresh), f"{name} at ε = {eps}")
    for name, live in lives.items():  # every change copied, none redrawn by HoloViews
        assert live.counts["copied"] == before[name]["copied"] + 3, name
        assert live.counts["holoviews"] == before[name]["holoviews"], name
    # the curve's marker and the ε line moved with ε, the bars scaled by 1/ε
    curve = _state(_drawn(lives["curve"])[0])
    assert ("Span", 3.0) in curve["layers"]
    bars = _drawn(lives["bars"])[0]
    top = dict(zip(bars.renderers[0].data_source.data["label"],
                   bars.renderers[0].data_source.data["rmse"], strict=True))
    table = page.table.set_index("label")["rmse"]
    assert top["Identity"] == pytest.approx(table["Identity"]) and table["Identity"] > 0


def _curves(data: pd.DataFrame, title: str = "t", ylim=True) -> hv.Overlay:
    layers = [hv.Curve(part, "x", "y", label=label).opts(framewise=True)
              for label, part in data.groupby("label", sort=True)]
    overlay = hv.Overlay([*layers, hv.VLine(float(data.attrs.get("line", 1.0)))])
    opts = {"title": title, "xlim": (0.0, 10.0)}
    if ylim:
        opts["ylim"] = (0.0, float(data["y"].max()) * 1.1)
    return overlay.opts(**opts)


def _data(scale: float, labels=("a", "b"), line: float = 1.0) -> pd.DataFrame:
    rows = [(label, x, scale * (i + 1) * x) for i, label in enumerate(labels) for x in range(5)]
    df = pd.DataFrame(rows, columns=["label", "x", "y"])
    df.attrs["line"] = line
    return df


def _render(live: LivePlot):
    from bokeh.document import Document

    doc = Document()
    doc.add_root(live.pane.get_root(doc))
    (fig,) = _drawn(live)
    return fig


def _changes(fig, update) -> list[str]:
    """The document changes (model type.property) that ``update()`` makes."""
    seen = []

    def record(event):
        seen.append(f"{type(event.model).__name__}.{getattr(event, 'attr', '')}")
    fig.document.callbacks.on_change(record)
    try:
        update()
    finally:
        fig.document.callbacks.remove_on_change(record)
    return seen


def test_a_live_plot_copies_numbers_and_redraws_anything_else():
    live = LivePlot(_curves, _data(1.0), key="k")
    fig = _render(live)
    # other numbers and another line: copied, the same figure as HoloViews would draw
    live.update(_data(3.0, line=4.0), "k")
    assert live.counts == {"copied": 1, "holoviews": 0}
    _same(_state(fig), _state(hv.render(_curves(_data(3.0, line=4.0)))))
    assert live.pipe.data["y"].max() == _data(3.0)["y"].max()  # later views draw the latest data
    # only what changed is sent: the line alone, then nothing
    assert _changes(fig, lambda: live.update(_data(3.0, line=5.0), "k")) == ["Span.location"]
    assert _changes(fig, lambda: live.update(_data(3.0, line=5.0), "k")) == []
    assert live.counts == {"copied": 3, "holoviews": 0}
    # another view drawn now shows the latest data
    second = pn.panel(live.pane).get_root()
    figures = [p for p in second.select({"type": Plot})]
    assert figures and _state(figures[0])["layers"] == _state(fig)["layers"]
    # another layer (label), another title, no explicit y limits: HoloViews draws them
    for data, make in [(_data(2.0, labels=("a", "c")), _curves),
                       (_data(2.0), lambda d: _curves(d, title="other")),
                       (_data(2.0), lambda d: _curves(d, ylim=False))]:
        live.make = make
        n = live.counts["holoviews"]
        live.update(data, "k")
        assert live.counts["holoviews"] == n + 1


def test_bars_with_other_categories_are_redrawn():
    def bars(df):
        return hv.Bars(df, "label", "rmse").opts(ylim=(0, 10), title="b")

    live = LivePlot(bars, pd.DataFrame({"label": ["A", "B"], "rmse": [1.0, 2.0]}), key=1)
    fig = _render(live)
    live.update(pd.DataFrame({"label": ["A", "B"], "rmse": [3.0, 4.0]}), 1)
    assert live.counts == {"copied": 1, "holoviews": 0}
    assert list(fig.renderers[0].data_source.data["rmse"]) == [3.0, 4.0]
    live.update(pd.DataFrame({"label": ["A", "C"], "rmse": [3.0, 4.0]}), 1)
    assert live.counts == {"copied": 1, "holoviews": 1}
    assert list(fig.x_range.factors) == ["A", "C"]
    # a new key: a new chart; None: nothing drawn
    live.update(pd.DataFrame({"label": ["A"], "rmse": [1.0]}), 2)
    assert live.counts["holoviews"] == 2 and live.key == 2
    live.update(None, None)
    assert live.pane.object is None


def test_an_option_tree_holoviews_leaves_behind_does_not_keep_the_chart():
    # HoloViews keeps each element's custom options (here the drawn-view hook) in a tree of its
    # process-wide Store, dropped when the last element using it is collected -- except while
    # any thread is inside an options context, when the drop is skipped for good.  In a served
    # explorer (sessions drawing in several threads) such trees outlived every closed session,
    # and through the hook's bound method kept its Compare page, session and figures alive.
    import gc
    import weakref

    from holoviews.core.options import Store

    live = LivePlot(_curves, _data(1.0), key="k")
    element = live._frame(_data(2.0))  # a frame as the pane draws it
    assert element.id in Store.custom_options(backend="bokeh")  # the hook is in a tree
    chart = weakref.ref(live)
    Store._options_context = True  # another thread inside an options context
    try:
        del live, element
        gc.collect()
    finally:
        Store._options_context = False
    assert chart() is None, [type(r).__name__ for r in gc.get_referrers(chart())]
