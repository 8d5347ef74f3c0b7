"""A HoloViews chart that follows new data, in place when only numbers change.

HoloViews redraws a Compare figure for an ε change in 35-65 ms on the server (n = 256);
setting the same Bokeh sources, spans and ranges takes 0.5 ms.  So a frame with the drawn
layers (type, label, columns, categories, title) is copied into the Bokeh models
(:func:`copy_plan`); other frames go through HoloViews.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable

import holoviews as hv
import numpy as np
import panel as pn

from .serving import freeze_models

__all__ = ["LivePlot", "copy_plan"]


class _WeakHook:
    """A plot hook calling a bound method weakly: hooks in HoloViews' process-wide ``Store``
    kept every closed session's Compare page alive in a server soak."""

    __slots__ = ("_method",)

    def __init__(self, method) -> None:
        self._method = weakref.WeakMethod(method)

    def __call__(self, plot, element) -> None:
        method = self._method()
        if method is not None:
            method(plot, element)


class LivePlot:
    """A HoloViews pane drawing ``make(data)``: while ``key`` (the structure) stays, new data are
    copied in place or sent through a Pipe; a new key rebuilds, None draws nothing.
    ``pane_params`` go to ``pn.pane.HoloViews``."""

    def __init__(self, make: Callable, data, key: Hashable | None, **pane_params):
        self.make = make
        self.key = key
        #: how many updates were drawn each way: "copied" (in place) or "holoviews"
        self.counts = {"copied": 0, "holoviews": 0}
        self._plots: weakref.WeakSet = weakref.WeakSet()
        self.pane = pn.pane.HoloViews(None if key is None else self._dmap(data),
                                      sizing_mode="stretch_width", **pane_params)

    def _dmap(self, data):
        self.pipe = hv.streams.Pipe(data=data)
        self._plots = weakref.WeakSet()
        # The charts give each frame explicit limits and `framewise` layers themselves: options
        # on the DynamicMap re-apply to every frame (17 % of an ε change's server time at
        # n = 256).  The hook keeps every drawn view's plot, for the copies in place.
        self._map = hv.DynamicMap(self._frame, streams=[self.pipe])
        return self._map

    def _frame(self, data):
        return self.make(data).opts(hooks=[_WeakHook(self._drawn)])

    def _drawn(self, plot, element) -> None:
        self._plots.add(plot)

    def copy(self, data, key: Hashable | None) -> bool:
        """Copy ``data`` in place if only numbers change; False (nothing changed) if not."""
        if key == self.key and key is not None and self._copy(data):
            self.counts["copied"] += 1
            return True
        return False

    def update(self, data, key: Hashable | None, copy: bool = True) -> None:
        """Show ``data``: copied, redrawn, or a new chart for a new ``key`` (None clears);
        ``copy=False`` skips the copy (:meth:`copy` has just said no)."""
        if key is None:
            self.key = None
            if self.pane.object is not None:
                self.pane.object = None
            return
        if key == self.key and copy and self.copy(data, key):
            return
        self.counts["holoviews"] += 1
        freeze_models()  # the redraw batch's models are indexed once, when it ends
        if key == self.key:
            self.pipe.send(data)
        else:
            self.key = key
            self.pane.object = self._dmap(data)

    def _copy(self, data) -> bool:
        """Copy the chart of ``data`` into every drawn view if only its numbers differ."""
        plots = list(self._plots)
        if not plots:
            return False
        obj = self._frame(data)
        plans = [copy_plan(plot, obj) for plot in plots]
        if any(plan is None for plan in plans):
            return False
        for plan in plans:
            plan()
        # a later view draws the latest frame: the stream's data (no redraw now), the map's cache
        self.pipe.update(data=data)
        self._map[()] = obj
        return True


def _explicit_limits(options: list[dict], axis: str) -> tuple[float, float] | None:
    """The first finite ``xlim``/``ylim`` (``axis``) of ``options``, or None."""
    for opts in options:
        lim = opts.get(axis)
        if lim is not None and all(v is not None and np.isfinite(v) for v in lim):
            return tuple(float(v) for v in lim)
    return None


def copy_plan(plot, obj) -> Callable[[], None] | None:
    """A function copying the frame ``obj`` (element or overlay) into the drawn HoloViews
    ``plot``, or None when it is not the drawn picture with other numbers (other layers,
    title or categories, an axis without explicit limits)."""
    layers = list(obj.values()) if isinstance(obj, hv.Overlay) else [obj]
    subplots = list(plot.subplots.values()) if getattr(plot, "subplots", None) else [plot]
    if len(layers) != len(subplots):
        return None
    figure = plot.state
    # the bokeh plot options of the chart: its overlay's first, then each layer's
    options = [hv.Store.lookup_options("bokeh", o, "plot").kwargs for o in [obj, *layers]]
    title = next((o["title"] for o in options if o.get("title") is not None), None)
    if title is not None and (figure.title is None or figure.title.text != title):
        return None
    steps = []
    for layer, sub in zip(layers, subplots, strict=True):
        drawn = sub.current_frame
        if type(drawn) is not type(layer) or drawn.label != layer.label:
            return None
        glyph, source = sub.handles.get("glyph"), sub.handles.get("source")
        if isinstance(layer, hv.VLine | hv.HLine):
            if glyph is None or not hasattr(glyph, "location"):
                return None
            steps.append((glyph, "location", float(layer.data)))
        elif isinstance(layer, hv.Text):
            if source is None or set(source.data) != {"x", "y", "text"}:
                return None
            steps.append((source, "data", {"x": [layer.x], "y": [layer.y], "text": [layer.text]}))
        elif isinstance(layer, hv.Dataset):
            if source is None:
                return None
            dims = [d.name for d in layer.dimensions()]
            if not set(source.data) <= set(dims) or dims != [d.name for d in drawn.dimensions()]:
                return None
            if isinstance(layer, hv.Bars):  # a categorical axis: the same categories
                x = layer.kdims[0].name
                if list(layer.dimension_values(x)) != list(drawn.dimension_values(x)):
                    return None
            steps.append((source, "data", {c: layer.dimension_values(c) for c in source.data}))
        else:
            return None
    for axis, rng in (("xlim", figure.x_range), ("ylim", figure.y_range)):
        if not hasattr(rng, "factors"):  # a continuous axis: its explicit limits
            lim = _explicit_limits(options, axis)
            if lim is None or not hasattr(rng, "start"):
                return None
            steps += [(rng, "start", lim[0]), (rng, "end", lim[1])]

    # only what changed is set: each property set is one message and one redraw in every browser
    steps = [(model, attr, value) for model, attr, value in steps if not _equal(getattr(model, attr), value)]

    def apply() -> None:
        for model, attr, value in steps:
            setattr(model, attr, value)
    return apply


def _equal(old, new) -> bool:
    """Whether a property's value ``old`` equals ``new`` (data sources column by column)."""
    if isinstance(new, dict):
        return (isinstance(old, dict) and set(old) == set(new)
                and all(_same_column(old[k], new[k]) for k in new))
    return old == new


def _same_column(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc" and b.dtype.kind in "fc"))
