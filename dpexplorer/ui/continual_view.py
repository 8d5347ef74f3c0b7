"""The Compare page's "Error over time" for a count over time: each step's standard
deviation (:func:`dpexplorer.streaming.analysis.step_errors`) per mechanism, against the
lower bound on the running total's worst step."""

from __future__ import annotations

import logging
import math

import holoviews as hv
import pandas as pd
import panel as pn
import param

import dpexplorer as dpx

from .messages import exception_message

__all__ = ["StepErrors", "step_plot", "memory_plot"]

log = logging.getLogger(__name__)

HEADER = ("### Error over time\nThe standard deviation of each step's answer (counts): how the "
          "noise of the running total grows as the days go by.  Solid lines: the **online** "
          "mechanisms, which can publish each day's answer that day; dashed: H2, least squares "
          "over the binary tree of all the days, known only at the end.")

#: Most steps for which BLT's memory against error is drawn (its five optimisations run here).
MAX_TRADEOFF_STEPS = 4096

#: The mechanism drawn beside the online ones: the classic tree with least squares (not online).
REFERENCE = "h2"


MEMORY_TEXT = ("**BLT: memory against error.**  A BLT release makes each step's correlated "
               "noise from that step's fresh noise and a few numbers kept from the step before; "
               "√L needs all the noise drawn so far.  Each point is a BLT optimised for the worst "
               "step with 1–5 buffers.")


def step_plot(frame: pd.DataFrame | None, bound: float = math.nan) -> hv.Overlay:
    """hv.Curve per mechanism of ``frame`` (:func:`~dpexplorer.streaming.analysis.step_errors`)."""
    if frame is None or not len(frame):
        return hv.Overlay([hv.Curve([], "step", "std")]).opts(
            title="No count over time compared yet", responsive=True, height=360)
    y = hv.Dimension("std", label="std of the answer (counts)")
    curves = [hv.Curve(part, hv.Dimension("step", label="step"), [y], label=str(label)).opts(
        line_dash="solid" if bool(part["online"].iloc[0]) else "dashed", line_width=2, tools=["hover"])
        for label, part in frame.groupby("label", sort=False)]
    if math.isfinite(bound):
        curves.append(hv.HLine(bound, label="bound on the worst step").opts(
            color="#d62728", line_dash="dotted", line_width=2))
    return hv.Overlay(curves).opts(
        title=f"Per-step error over {frame.attrs.get('T', 0):,} steps, {frame.attrs.get('noise', '')}",
        responsive=True, height=360, legend_position="right", logy=True, shared_axes=False)


def memory_plot(tradeoff: pd.DataFrame | None) -> hv.Overlay:
    """BLT's worst-step std against the numbers its release keeps, beside the square root's."""
    if tradeoff is None or not len(tradeoff):
        return hv.Overlay([hv.Curve([], "memory", "max_std")]).opts(
            title="BLT: Gaussian noise only", responsive=True, height=300)
    x = hv.Dimension("memory", label="numbers kept between steps (buffers + 1)")
    y = hv.Dimension("max_std", label="worst-step std (counts)")
    curve = hv.Curve(tradeoff, x, [y, "buffers", "ratio"], label="BLT").opts(line_width=2, tools=["hover"])
    points = hv.Scatter(tradeoff, x, [y, "buffers", "ratio"], label="BLT").opts(size=8, tools=["hover"])
    ref = hv.HLine(tradeoff.attrs["sqrt_max_std"], label="√L (keeps all T)").opts(
        color="#2ca02c", line_dash="dashed", line_width=2)
    T = tradeoff.attrs["T"]
    return (curve * points * ref).opts(
        title=f"Memory against error: BLT over {T:,} steps (√L keeps all {T:,})", responsive=True,
        height=300, legend_position="top_right", shared_axes=False)


class StepErrors(param.Parameterized):
    """The compared strategies' per-step errors, recomputed when ``page``'s table changes;
    ``submit`` runs a background job ``fn(post, *args)``."""

    frame = param.DataFrame(default=None, allow_None=True, constant=True, precedence=-1)
    bound = param.Number(default=math.nan, constant=True, precedence=-1)
    tradeoff = param.DataFrame(default=None, allow_None=True, constant=True, precedence=-1)
    note = param.String(default="", constant=True, precedence=-1)

    def __init__(self, page, submit, **params):
        super().__init__(**params)
        self.page, self._submit = page, submit
        page.param.watch(lambda *_: self.refresh(), "table")

    def _update(self, **values) -> None:
        with param.edit_constant(self):
            self.param.update(**values)

    def refresh(self) -> None:
        """Compute the chart's data for the page's current table in the background."""
        table, W = self.page.table, self.page.shown_workload
        if table is None or W is None or not dpx.streaming.is_causal(W):
            self._update(frame=None, tradeoff=None, note="")
            return
        try:
            noise = self.page.session.noise_model()
        except ValueError:
            return  # the page reports it
        names = [r.mechanism for r in table.itertuples()
                 if (bool(r.online) or r.mechanism == REFERENCE) and not r.data_dependent
                 and isinstance(r.rmse, float) and math.isfinite(r.rmse)]
        self._update(note="Computing the error over time…" if self.frame is None else self.note)
        self._submit(self._job, W, noise, names, table)

    def _job(self, post, W, noise, names, table) -> None:
        def params(name):
            return {"objective": self.page.objective} if "objective" in dpx.registry.get(name).params else {}

        running_total = isinstance(W, dpx.matrix.Prefix)
        try:
            built = {n: self.page.cache.entry(W, n, noise, params(n))[0] for n in names}
            built = {n: A for n, A in built.items() if A is not None}
            frame = dpx.streaming.analysis.step_errors(W, noise, built)
            bound = dpx.streaming.bounds.max_std_lower_bound(W.n, noise) if running_total else math.nan
            # BLT's memory against error (Gaussian noise): 0.02-0.35 s of optimisation per number of
            # buffers at 4,096 steps (measured), seconds at 2**16
            tradeoff = (dpx.streaming.analysis.blt_tradeoff(W.n, noise)
                        if running_total and noise.norm == 2 and W.n <= MAX_TRADEOFF_STEPS else None)
            note = ""
        except Exception as exc:  # noqa: BLE001 - shown as a note, never a traceback
            log.info("per-step errors failed: %s", exc)
            frame, bound, tradeoff = None, math.nan, None
            note = f"Error over time unavailable: {exception_message(exc)}"

        def done():
            if self.page.table is table:  # not superseded meanwhile
                self._update(frame=frame, bound=bound, tradeoff=tradeoff, note=note)
        post(done)

    def panel(self) -> pn.Column:
        """The section: header, note, chart and BLT's memory chart."""
        p = self.param
        return pn.Column(pn.pane.Markdown(HEADER, sizing_mode="stretch_width"),
                         pn.pane.Alert(p.note, alert_type="info", visible=pn.bind(bool, p.note)),
                         pn.pane.HoloViews(pn.bind(step_plot, p.frame, p.bound), sizing_mode="stretch_width",
                                           height=380),
                         pn.Column(pn.pane.Markdown(MEMORY_TEXT, sizing_mode="stretch_width"),
                                   pn.pane.HoloViews(pn.bind(memory_plot, p.tradeoff),
                                                     sizing_mode="stretch_width", height=320),
                                   visible=pn.bind(lambda t: t is not None, self.param.tradeoff),
                                   sizing_mode="stretch_width"),
                         visible=pn.bind(lambda f, n: f is not None or bool(n),
                                         self.param.frame, self.param.note),
                         sizing_mode="stretch_width")
