"""The Strategy page: what a mechanism measures, drawn as a matrix (HDMM Fig. 1).

Two data-independent strategies side by side for the session's workload ``W`` and noise,
each built through ``session.cache.entry`` (shared with Compare) in a task: heatmaps of
``A`` and ``AᵀA`` (``TSE = v·Δ²·tr(WᵀW (AᵀA)⁺)``, HDMM Prop. 4; per Kronecker factor,
block-averaged above ``max_pixels``), rows, L1/L2 sensitivity, analytic RMSE, marginal
weights, blocks, and the optimiser's convergence and progress.  Outputs:
``view.left_info`` / ``view.right_info`` (:class:`StrategyInfo`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import numpy as np
import pandas as pd
import panel as pn
import param

import dpexplorer as dpx
from dpexplorer.queries.drawing import Heatmap, heatmaps, kronecker_factors
from dpexplorer.queries.matrix import Matrix

from . import optimize_view as ov
from . import workers
from .compare_view import _LABEL, _message, check_workload, structured_1d
from .exports import FigureExport
from .serving import TableSlot, button
from .session import Page, Session
from .tasks import Task, build_lock

__all__ = ["StrategyView", "StrategyInfo", "heatmap_element"]

log = logging.getLogger(__name__)

SIDES = ("left", "right")

HEADER = """\
## Strategies

A data-independent mechanism answers the workload from noisy answers to its **strategy** queries
``A`` (HDMM Fig. 1): each row of the first heatmap is one query measured with noise, each column
one cell of the histogram.  The error of every workload answer depends on ``A`` only through its
sensitivity (the largest column norm: L1 for Laplace, L2 for Gaussian) and its Gram matrix
``AᵀA`` (second heatmap).  Pick two mechanisms to compare them.
"""


@dataclass
class StrategyInfo:
    """A strategy built for one workload and noise norm, with what the page shows of it."""

    name: str
    label: str
    W: Matrix
    norm: int
    A: Matrix | None = None
    unit_tse: float = math.nan
    seconds: float = math.nan
    note: str = ""
    error: str = ""
    rows: int | None = None
    sensitivity_l1: float = math.nan
    sensitivity_l2: float = math.nan
    heatmaps: list = field(default_factory=list)
    optimization: object = None
    svdb: float = math.nan
    marginal_weights: object = None  # DataFrame of marginal_weights_frame, or None
    blocks: object = None  # DataFrame of blocks_frame, or None

    def rmse(self, noise) -> float:
        """Analytic RMSE per query under ``noise`` (same norm): ``sqrt(v·unit TSE / m)``."""
        if self.A is None or noise.norm != self.norm:
            return math.nan
        return dpx.error.rmse_from_unit(self.unit_tse, self.W.m, noise)


def heatmap_element(h: Heatmap, size: int = 300) -> hv.Image:
    """hv.Image of a heatmap, row 0 at the top, in the matrix's own units."""
    (rows, cols), arr = h.shape, h.array
    neg = bool(np.nanmin(arr) < 0)
    top = float(np.nanmax(np.abs(arr))) or 1.0
    ydim = "row" if h.kind == "A" else "cell "
    return hv.Image(arr[::-1], bounds=(0, 0, cols, rows), kdims=["cell", ydim],
                    vdims=["value"]).opts(
        invert_yaxis=True, cmap="RdBu_r" if neg else "Blues",
        clim=(-top, top) if neg else (0, top), colorbar=True, tools=["hover"],
        title=h.title, frame_width=size, frame_height=size, shared_axes=False,
        fontsize={"title": "9pt"})


class StrategyView(Page, pn.viewable.Viewer):
    """Two strategies for ``session.workload`` side by side (``background=False``: built in the
    caller's thread)."""

    left = param.String(default="h2", doc="Registry name of the left strategy.")
    right = param.String(default="hb", doc="Registry name of the right strategy.")
    max_pixels = param.Integer(default=512, bounds=(8, 2048), doc="""
        Largest heatmap side in pixels; larger matrices are block-averaged.""")

    left_info = param.ClassSelector(class_=StrategyInfo, default=None, allow_None=True,
                                    constant=True, precedence=-1)
    right_info = param.ClassSelector(class_=StrategyInfo, default=None, allow_None=True,
                                     constant=True, precedence=-1)
    left_busy = param.Boolean(default=False, constant=True, precedence=-1)
    right_busy = param.Boolean(default=False, constant=True, precedence=-1)
    left_status = param.String(default="", constant=True, precedence=-1)
    right_status = param.String(default="", constant=True, precedence=-1)
    error = param.String(default="", constant=True, precedence=-1, doc="Last error, or ''.")

    #: Largest non-Kronecker domain (cells); Kronecker: per attribute.
    max_cells = 4096

    def __init__(self, session: Session | None = None, background: bool = True, **params):
        self._setup_page(session, background)  # session, lock, tasks, tab gate
        self._tokens = {s: 0 for s in SIDES}
        self._tasks: dict[str, Task | None] = {s: None for s in SIDES}
        self._panes: dict = {}
        #: Progress of the optimiser building each side.
        self.progress = {s: ov.OptimizationProgress() for s in SIDES}
        super().__init__(**params)
        names = self.mechanisms()
        for side, fallback in zip(SIDES, (names[:1], names[1:2] or names[:1]), strict=True):
            if getattr(self, side) not in names and fallback:
                setattr(self, side, fallback[0])
        self.session.param.watch(lambda *_: self.update(), ["workload", "noise"])
        self.session.param.watch(lambda *_: self.gate.run("text", self._refresh_text), ["epsilon", "delta"])
        self.param.watch(lambda *events: [self.update(e.name) for e in events], ["left", "right"])
        self.param.watch(lambda *_: self.update(), "max_pixels")
        self.update()

    @staticmethod
    def mechanisms() -> list[str]:
        """Registry names of the data-independent mechanisms."""
        return dpx.registry.names(data_dependent=False)

    def cancel(self, side: str) -> None:
        """Stop the optimisation building ``side`` (:meth:`update` restarts it)."""
        if (task := self._tasks[side]) is not None:
            task.cancel()

    def stop(self) -> None:
        """Stop both sides' optimisations (the tab closed)."""
        for side in SIDES:
            self.cancel(side)

    def info(self, side: str) -> StrategyInfo | None:
        """The :class:`StrategyInfo` shown on ``side``."""
        return getattr(self, f"{side}_info")

    def _show_error(self, message: str) -> None:
        """Show and report ``message``, unless the session shows it already."""
        self._set(error=message)
        if self.session.error != message:  # e.g. a bad workload, already shown by Compare
            self.session.report(message)

    # ----------------------------------------------------------- update
    def update(self, side: str | None = None) -> bool:
        """(Re)build the strategies of ``side`` (default both) for the session's workload and noise."""
        with self._lock:
            try:
                W = self.session.workload
                if structured_1d(W) and W.n > self.max_cells:
                    raise ValueError(
                        f"the workload is too large for this page: it draws strategies over at "
                        f"most {self.max_cells:,} cells and the workload has {W.n:,}; compare its "
                        f"mechanisms on the Compare page, or set a smaller domain size on the "
                        f"Workload page")
                W = check_workload(W, self.max_cells)
                noise = self.session.noise_model()
            except ValueError as exc:
                for s in SIDES:  # builds under way are dropped; the last strategies stay
                    self._tokens[s] += 1
                self._set(left_busy=False, right_busy=False, left_status="", right_status="")
                self._show_error(_message(exc))
                return False
            for s in SIDES if side is None else (side,):
                name = getattr(self, s)
                current = self.info(s)
                if (current is not None and current.W is W and current.norm == noise.norm
                        and current.name == name and current.heatmaps
                        and self._pixels == self.max_pixels and side is None):
                    continue
                self._tokens[s] += 1
                if self._tasks[s] is not None:  # superseded: its optimiser stops
                    self._tasks[s].cancel()
                self._set(**{f"{s}_busy": True, f"{s}_status": ""})
                optimiser = workers.in_worker(dpx.registry.REGISTRY.get(name))
                self._tasks[s] = self.start_task(
                    self._build, s, self._tokens[s], W, noise, name, self.max_pixels,
                    name=f"strategy {s}", optimizer=optimiser)
            self._pixels = self.max_pixels
            return True

    _pixels = None

    def _build(self, task: Task, side, token, W, noise, name, max_pixels) -> None:
        """Build (or look up) one side's strategy and its drawings; post the result."""
        post = task.post
        try:
            mech = dpx.registry.get(name)
        except KeyError as exc:
            msg = str(exc).strip("'\"")
            post(lambda: self._done(side, token, None, msg))
            return
        info = StrategyInfo(name, mech.label, W, noise.norm)
        error = ""
        cache = self.session.cache
        progress = self.progress[side]
        post(lambda: progress.begin(token, mech.label))
        relay = ov.ProgressRelay(post, lambda *a: progress.update(token, *a),
                              stop=lambda: token != self._tokens[side] or task.cancel_requested)
        try:
            if mech.data_dependent:
                raise ValueError(f"{mech.label} is data-dependent: it has no fixed strategy")
            lock = build_lock(cache, (W, name, noise.norm))
            if not lock.acquire(blocking=False):  # another page is building it
                self._status(post, side, token, f"Waiting for {mech.label}: it is being built "
                             f"for this workload on another page (its progress shows there)")
                lock.acquire()
            try:
                with dpx.optimization.progress(relay):
                    A, unit, seconds, note = cache.entry(W, name, noise)
            finally:
                lock.release()
            info.A, info.unit_tse, info.seconds, info.note = A, unit, seconds, note
            if A is not None:
                self._status(post, side, token, f"Drawing {mech.label}…")
                info.rows, info.sensitivity_l1, info.sensitivity_l2 = (
                    A.m, A.sensitivity(1), A.sensitivity(2))
                info.heatmaps = heatmaps(A, max_pixels)
                info.optimization = ov.optimization_of(A)
                if info.optimization is not None:
                    with build_lock(cache, ("svdb", W)):
                        info.svdb = cache.svdb(W)
                if getattr(A, "theta", None) is not None:
                    names = getattr(W, "attributes", None)
                    info.marginal_weights = ov.marginal_weights_frame(A, names)
                if getattr(A, "blocks", None) is not None and kronecker_factors(A) is None:
                    info.blocks = ov.blocks_frame(A)
        except ov.Cancelled:
            if token != self._tokens[side]:
                post(lambda: progress.end(token))
                return  # superseded: a newer build of this side runs
            error = info.error = f"{mech.label}: optimisation cancelled; press 'Build again' to rebuild it"
        except Exception as exc:  # noqa: BLE001 - shown in the page, never a traceback
            if not isinstance(exc, ValueError):
                log.exception("strategy %s failed", name)
            error = info.error = f"{mech.label}: {_message(exc)}"
        post(lambda: progress.end(token))
        post(lambda: self._done(side, token, info, error))

    def _status(self, post, side, token, text) -> None:
        """Post ``side``'s status line unless superseded (posts may reorder)."""
        def show():
            if token == self._tokens[side] and getattr(self, f"{side}_busy"):
                self._set(**{f"{side}_status": text})
        post(show)

    def _done(self, side, token, info, error) -> None:
        if token != self._tokens[side]:
            return  # superseded by a newer choice
        values = {f"{side}_busy": False, f"{side}_status": ""}
        if info is not None:
            values[f"{side}_info"] = info
        self._set(**values)
        if error:
            self._show_error(error)
        else:
            self._set(error="")

    # --------------------------------------------------------------- UI
    def stats(self, side: str) -> str:
        """Markdown figures of ``side``'s strategy (RMSE at the session's noise)."""
        info = self.info(side)
        if info is None:
            return "Building…" if getattr(self, f"{side}_busy") else "No strategy yet."
        mech = dpx.registry.REGISTRY.get(info.name)
        head = f"**{info.label}** — {mech.description if mech else ''}  \n*{mech.source if mech else ''}*"
        if info.error:
            return f"{head}\n\nNot available: {info.error}"
        if info.A is None:
            return f"{head}\n\nDoes not apply to this workload: {info.note}"
        try:
            noise = self.session.noise_model()
            r = info.rmse(noise)
            rmse = (f"**{r:.4g}**" if math.isfinite(r) else "being rebuilt for this noise") + \
                   f" ({noise.label})"
        except ValueError as exc:
            rmse = f"unavailable ({_message(exc)})"
        W, A = info.W, info.A
        kron = kronecker_factors(A)
        shape = (" ⊗ ".join(f"{f.m:,}×{f.n:,}" for f in kron) if kron else "")
        text = (f"{head}\n\n"
                f"| figure | value |\n|---|---|\n"
                f"| rows (queries measured) | {info.rows:,}{' = ' + shape if shape else ''} |\n"
                f"| cells | {A.n:,} |\n"
                f"| sensitivity L1 / L2 | {info.sensitivity_l1:.4g} / {info.sensitivity_l2:.4g} |\n"
                f"| analytic RMSE per query | {rmse} |\n"
                f"| workload | {W.name}: {W.m:,} queries |\n"
                f"| build time | {info.seconds:.3g} s |")
        opt = info.optimization
        if opt is not None:
            ratio = (f" = {opt.objective / info.svdb:.3g} × the SVD bound {info.svdb:.4g} "
                     f"(RMSE {math.sqrt(opt.objective / info.svdb):.3g}×)"
                     if math.isfinite(info.svdb) and info.svdb > 0 and opt.objective >= 0 else "")
            text += (f"\n| optimiser | {opt.method or info.label}, "
                     f"{len(np.atleast_1d(opt.restarts))} restart(s), seed {opt.seed}, "
                     f"{opt.seconds:.3g} s |\n"
                     f"| objective (unit-noise TSE) | {opt.objective:.6g}{ratio} |")
        if info.marginal_weights is not None:
            mw = info.marginal_weights
            text += f"\n| marginals measured | {mw.attrs.get('count', len(mw)):,} |"
        if info.blocks is not None:
            text += f"\n| blocks (stacked sub-strategies) | {len(info.blocks):,} |"
        return text

    def plot(self, side: str):
        """One hv.Layout column of ``side``'s convergence, marginal weights and heatmaps, or None
        (separate HoloViews panes upset the Bokeh layout, Panel 1.9)."""
        return self.heatmaps_plot(side, [self.convergence(side), self.marginals_plot(side)])

    def heatmaps_plot(self, side: str, first=()):
        """``side``'s heatmaps (A and AᵀA, per factor, per block), or None."""
        info = self.info(side)
        if info is None:
            return None
        parts = [p for p in first if p is not None]
        parts += [heatmap_element(h, size=320) for h in info.heatmaps if h.array is not None]
        return hv.Layout(parts).cols(1).opts(shared_axes=False) if parts else None

    def _optimised(self, side: str) -> StrategyInfo | None:
        info = self.info(side)
        ok = info is not None and info.optimization is not None and info.A is not None
        return info if ok else None

    def convergence(self, side: str):
        """The convergence plot of ``side``'s optimiser, or None."""
        info = self._optimised(side)
        return ov.convergence_plot(info.optimization, info.svdb) if info else None

    def convergence_data(self, side: str):
        """``(trace, restarts)`` frames drawn by :meth:`convergence`, or None."""
        info = self._optimised(side)
        return ov.convergence_frame(info.optimization) if info else None

    def marginals_plot(self, side: str):
        """Bars of ``side``'s marginal weights θ, or None."""
        info = self.info(side)
        if info is None or info.marginal_weights is None or not len(info.marginal_weights):
            return None
        return ov.marginal_weights_plot(info.marginal_weights)

    def messages(self, side: str) -> str:
        info = self.info(side)
        return "" if info is None else "\n\n".join(h.message for h in info.heatmaps if h.message)

    def _refresh_text(self) -> None:
        for side in SIDES:
            if (pane := self._panes.get(f"{side}_stats")) is not None:
                pane.object = self.stats(side)

    def _column(self, side: str) -> pn.Column:
        options = {dpx.registry.get(n).label: n for n in self.mechanisms()}
        select = pn.widgets.Select(options=options, value=getattr(self, side), width=240,
                                   **{_LABEL: f"{side.capitalize()} strategy"})
        select.link(self, value=side, bidirectional=True)
        rebuild = button("Build again", "default", lambda: self.update(side), width=120)
        progress = self.progress[side].panel(cancel=lambda: self.cancel(side), gate=self.gate)
        # widgets follow the page's state through the gate: nothing changes while hidden
        shown = self.gate.mirror(self, [f"{side}_status", f"{side}_busy"])
        status = pn.pane.Markdown(shown.param[f"{side}_status"], sizing_mode="stretch_width")
        stats = pn.pane.Markdown(sizing_mode="stretch_width")
        note = pn.pane.Alert(alert_type="info", sizing_mode="stretch_width")
        btable = TableSlot(lambda frame: pn.widgets.Tabulator(
            frame, disabled=True, show_index=False, sizing_mode="stretch_width",
            layout="fit_data_table", height=200), pd.DataFrame())
        # visibility toggles on a wrapping Column: toggling a rendered HoloViews pane's own
        # `visible` raises in Panel 1.9 (its Bokeh stylesheets are re-validated as strings)
        pane = pn.pane.HoloViews(None, linked_axes=False)
        makes = {"convergence": lambda: self.convergence(side),
                 "marginal-weights": lambda: self.marginals_plot(side),
                 "heatmaps": lambda: self.heatmaps_plot(side)}
        exports = [FigureExport("strategy", f"{side}-{name}", make, report=self.session.report,
                                into=self.exports) for name, make in makes.items()]
        box = pn.Column(pane, *exports)

        def redraw(*_):
            # no pn.io.hold: a plot replaced twice in one held message leaves the browser a
            # dangling model reference ('reference … isn't known')
            info = self.info(side)
            stats.object = self.stats(side)
            msg = self.messages(side)
            note.object, note.visible = msg, bool(msg)
            b = info.blocks if info is not None else None
            if b is not None:
                btable.show(b)
            btable.visible = b is not None
            rebuild.visible = bool(info is not None and info.error)
            p = self.plot(side)
            pane.object, box.visible = p, p is not None
            for exp in exports:
                exp.show(exp.make() is not None)
        redraw()
        # a hidden page keeps its redraws until shown (dpexplorer.ui.serving)
        self.param.watch(lambda *_: self.gate.run(side, redraw), [f"{side}_info"])
        self.param.watch(lambda *_: self.gate.run(f"{side}_stats", lambda: setattr(
            stats, "object", self.stats(side))), f"{side}_busy")
        panes = {"stats": stats, "plot": pane, "select": select, "note": note, "plot_box": box,
                 "blocks": btable, "progress": progress, "rebuild": rebuild}
        self._panes.update({f"{side}_{k}": v for k, v in panes.items()})
        body = pn.Column(stats, note, btable, box,
                         loading=shown.param[f"{side}_busy"], sizing_mode="stretch_width")
        # the progress stays outside the loading overlay so that it can be seen (and cancelled)
        return pn.Column(pn.Row(select, rebuild), progress, status, body, sizing_mode="stretch_width")

    def panel(self) -> pn.Column:
        """The page (built once, under the lock: a build ending between drawing a side and
        watching it left it "Building…")."""
        with self._lock:
            if "root" not in self._panes:
                self.exports: dict = {}
                self._panes["root"] = pn.Column(
                    pn.pane.Markdown(HEADER, sizing_mode="stretch_width"),
                    pn.Row(self._column("left"), self._column("right"), sizing_mode="stretch_width"),
                    sizing_mode="stretch_width")
            return self._panes["root"]
