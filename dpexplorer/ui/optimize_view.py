"""What the Compare and Strategy pages show of an optimiser: live progress, convergence
(unit-noise TSE ``Δ_p(A)² · tr(WᵀW (AᵀA)⁺)``, HDMM Prop. 4, against the SVD bound, HDMM
Def. 11, Prop. 5), marginal weights ``θ_a`` (HDMM Sec. 8) and stacked blocks (HDMM Def. 19).
"""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401  (registers its exit hook before ours, see below)
import math
import threading
import time
import weakref
from collections.abc import Callable, Sequence

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import numpy as np
import pandas as pd
import panel as pn
import param

from dpexplorer.queries.matrix import Kronecker, Matrix, Weighted

from .serving import button

__all__ = ["Cancelled", "SHUTDOWN", "ProgressRelay", "OptimizationProgress", "convergence_frame",
           "convergence_plot", "marginal_weights_frame", "marginal_weights_plot",
           "blocks_frame", "optimization_of", "marginal_label", "TOP_MARGINALS"]

#: Marginals drawn in the weights chart (largest weights first); the rest are counted.
TOP_MARGINALS = 30
#: Seconds between two progress updates posted to the page (the last one is always posted).
PROGRESS_INTERVAL = 0.15
#: While ``k > 1`` optimisers report, each posts once per ``max(PROGRESS_INTERVAL, k · SHARE)``
#: s: eight sessions' progress bars took 22 % of the loop (``bench_browser.py --sessions 8``).
PROGRESS_SHARE = 0.1
#: Seconds since its last report for which an optimiser counts as reporting.
PROGRESS_ACTIVE = 2.0


#: Set at interpreter shutdown: running optimisations are cancelled (workers are joined at exit).
SHUTDOWN = threading.Event()
_register_atexit = getattr(threading, "_register_atexit", None)
if _register_atexit is not None:  # run before ThreadPoolExecutor joins its workers
    _register_atexit(SHUTDOWN.set)


class Cancelled(BaseException):
    """Stops an optimisation (a BaseException: an optimiser's ``except Exception`` lets it by)."""


class ProgressRelay:
    """The progress callback of one build: posts ``sink(stage, done, total, objective, seconds)``
    at most every ``interval`` s (default shared, :data:`PROGRESS_SHARE`) and raises
    :class:`Cancelled` once ``stop()`` is true."""

    #: The relays with a default interval that reported lately: relay -> time of its last report.
    _reporting: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    _reporting_lock = threading.Lock()

    def __init__(self, post: Callable, sink: Callable, stop: Callable[[], bool] | None = None,
                 interval: float | None = None):
        self.post = post
        self.sink = sink
        self.stop = stop or (lambda: False)
        self.shared = interval is None
        self.interval = PROGRESS_INTERVAL if interval is None else interval
        self.start = time.monotonic()
        self.reports = 0
        self._last = -math.inf
        self._lock = threading.Lock()

    def __call__(self, stage: str, done: int, total: int, objective: float = math.nan) -> None:
        if self.stop() or SHUTDOWN.is_set():
            raise Cancelled(f"optimisation stopped at {stage!r} ({done}/{total})")
        now = time.monotonic()
        final = total > 0 and done >= total
        interval = self._interval(now, final) if self.shared else self.interval
        with self._lock:
            self.reports += 1
            if not final and now - self._last < interval:
                return
            self._last = now
        seconds = now - self.start
        self.post(lambda: self.sink(str(stage), int(done), int(total), float(objective), seconds))

    def _interval(self, now: float, final: bool) -> float:
        """Least interval now, given the relays that reported in the last :data:`PROGRESS_ACTIVE` s."""
        with ProgressRelay._reporting_lock:
            reporting = ProgressRelay._reporting
            reporting[self] = now
            active = sum(1 for t in reporting.values() if now - t < PROGRESS_ACTIVE)
            if final:
                del reporting[self]
        return PROGRESS_INTERVAL if active <= 1 else max(PROGRESS_INTERVAL, active * PROGRESS_SHARE)


class OptimizationProgress(param.Parameterized):
    """Progress of the optimisation running for a page (or one side of a page)."""

    active = param.Boolean(default=False, doc="An optimisation is running.")
    label = param.String(default="", doc="Mechanism being optimised.")
    stage = param.String(default="", doc="The optimiser's description of its current step.")
    done = param.Integer(default=0, bounds=(0, None), doc="Units of work done.")
    total = param.Integer(default=0, bounds=(0, None), doc="Units of work in all (0: unknown).")
    objective = param.Number(default=math.nan, allow_None=True, doc="Current unit-noise TSE.")
    seconds = param.Number(default=0.0, doc="Seconds since the optimisation started.")
    reports = param.Integer(default=0, doc="Progress updates received (for tests).")

    def __init__(self, **params):
        super().__init__(**params)
        self._serial = None
        self._label = ""
        self._ended: set = set()  # builds whose end was seen (callbacks may come out of order)

    def begin(self, serial: int, label: str) -> None:
        """A build of ``label`` starts; it shows once its optimiser reports (``update``)."""
        if serial not in self._ended:
            self._serial, self._label = serial, label

    def update(self, serial: int, stage: str, done: int, total: int, objective: float,
               seconds: float) -> None:
        """One report of build ``serial`` (the relay's sink); late ones are ignored."""
        if serial != self._serial:
            return
        # ``active`` set last: a thread that sees it also sees the report's other values
        self.param.update(label=self._label, stage=stage, done=max(0, done),
                          total=max(0, total), objective=objective, seconds=seconds,
                          reports=self.reports + 1, active=True)

    def end(self, serial: int) -> None:
        """Build ``serial`` ended (built, failed or cancelled): hide the progress."""
        self._ended.add(serial)
        if len(self._ended) > 1000:  # keep the most recent ones (serials increase)
            self._ended = set(sorted(self._ended)[-500:])
        if serial == self._serial or self._serial is None:
            self._serial = None
            self.param.update(active=False)

    def text(self) -> str:
        """Markdown status line: mechanism, stage, count, objective, elapsed time."""
        if not self.active:
            return ""
        count = f"{self.done:,}/{self.total:,}" if self.total else f"{self.done:,}"
        obj = self.objective
        objective = f", objective (unit TSE) {obj:.6g}" if obj is not None and math.isfinite(obj) else ""
        return f"**Optimising {self.label}:** {self.stage} — {count}{objective} ({self.seconds:.1f} s)"

    def value(self) -> int:
        """Progress bar value in percent; -1 (indeterminate) while the total is unknown."""
        return int(round(100 * min(self.done, self.total) / self.total)) if self.total else -1

    def panel(self, cancel: Callable[[], None] | None = None, gate=None,
              visible=None) -> pn.Column:
        """Progress bar, status line and Cancel, visible while :attr:`active` (or ``visible``),
        changing only while the page is shown with its ``gate``."""
        src = self if gate is None else gate.mirror(self, ["active", "stage", "done", "total", "objective"])
        bar = pn.indicators.Progress(value=pn.bind(lambda *_: self.value(), src.param.done,
                                                   src.param.total, src.param.active),
                                     max=100, bar_color="info", height=16,
                                     sizing_mode="stretch_width")
        line = pn.pane.Markdown(pn.bind(lambda *_: self.text(), src.param.stage, src.param.done,
                                        src.param.objective, src.param.active),
                                sizing_mode="stretch_width", margin=(0, 10))
        parts = [bar, line]
        if cancel is not None:
            parts.append(button("Cancel optimisation", "warning", cancel, width=180))
        return pn.Column(*parts, visible=src.param.active if visible is None else visible,
                         sizing_mode="stretch_width")


def optimization_of(A: Matrix | None):
    """The :class:`~dpexplorer.core.optimization.OptimizationResult` attached to ``A``, or None."""
    result = getattr(A, "optimization", None)
    if result is None and isinstance(A, Weighted):
        result = getattr(A.base, "optimization", None)
    return result


def convergence_frame(result) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(trace, restarts)``, finite values only: ``iteration, objective`` (unit-noise TSE) and
    ``restart`` (1-based), ``objective``, ``iteration`` (the trace's last), ``best``."""
    trace = np.asarray(getattr(result, "trace", np.zeros(0)), dtype=float).ravel()
    restarts = np.asarray(getattr(result, "restarts", np.zeros(0)), dtype=float).ravel()
    t = pd.DataFrame({"iteration": np.arange(trace.size), "objective": trace})
    t = t[np.isfinite(t["objective"])].reset_index(drop=True)
    end = int(t["iteration"].iloc[-1]) if len(t) else 0
    r = pd.DataFrame({"restart": np.arange(1, restarts.size + 1), "objective": restarts, "iteration": end})
    r = r[np.isfinite(r["objective"])].reset_index(drop=True)
    r["best"] = r["objective"] == r["objective"].min() if len(r) else []
    return t, r


def convergence_plot(result, svdb: float = math.nan, title: str = "",
                     width: int = 560, height: int = 300) -> hv.Overlay:
    """Objective vs iteration of the best restart, the restarts' final values and ``svdb`` (the
    unit-noise TSE lower bound, Li & Miklau 2012 Thm 2; HDMM Prop. 5; NaN: not drawn)."""
    trace, restarts = convergence_frame(result)
    values = np.concatenate([trace["objective"].to_numpy(), restarts["objective"].to_numpy(),
                             [svdb] if math.isfinite(svdb) else []])
    logy = bool(values.size) and bool(np.all(values > 0))
    it = hv.Dimension("iteration", label="iteration (best restart)")
    obj = hv.Dimension("objective", label="objective: unit-noise TSE")
    elems = [hv.Curve(trace, it, obj, label="objective").opts(color="#30a2da", line_width=2,
                                                               tools=["hover"])]
    if len(restarts):
        elems.append(hv.Scatter(restarts, it, [obj, "restart"],
                                label=f"final value of each restart ({len(restarts)})").opts(
            color="#e5ae38", size=8, marker="circle", tools=["hover"]))
    if math.isfinite(svdb):  # a curve over the iterations (an HLine has no legend entry)
        end = max(1, int(trace["iteration"].max()) if len(trace) else 1)
        elems.append(hv.Curve(([0, end], [svdb, svdb]), it, obj,
                              label=f"SVD bound {svdb:.4g} (no strategy goes below)").opts(
            color="#d62728", line_dash="dashed", line_width=2))
    ylim = (None, None)
    if values.size:
        lo, hi = float(values.min()), float(values.max())
        ylim = (lo / 1.3, hi * 1.3) if logy else (min(0.0, lo), hi * 1.1 if hi > 0 else 1.0)
    best = getattr(result, "objective", math.nan)
    ratio = (f" (TSE {best / svdb:.3g}×, RMSE {math.sqrt(best / svdb):.3g}× the SVD bound)"
             if math.isfinite(svdb) and svdb > 0 and best >= 0 else "")
    levels = (getattr(result, "info", None) or {}).get("levels") or []
    start = f"; started from the optimum on {levels[-1]['cells']} paired cells" if levels else ""
    method, seconds = getattr(result, "method", "") or "optimiser", getattr(result, "seconds", math.nan)
    title = title or (f"{method}: objective {best:.5g}{ratio}; {len(restarts)} restart(s), "
                      f"{seconds:.2g} s{start}")
    return hv.Overlay(elems).opts(
        logy=logy, ylim=ylim, width=width, height=height, legend_position="top_right",
        title=title, fontsize={"title": "9pt"}, shared_axes=False)


def marginal_label(mask: int, names: Sequence[str]) -> str:
    """``"sex×age"`` for the marginal of bitmask ``mask`` (bit i ↔ attribute i); 0 is the total."""
    attrs = [str(a) for i, a in enumerate(names) if mask >> i & 1]
    return "×".join(attrs) if attrs else "total (0-way)"


def _marginals(A) -> list[tuple[int, float]]:
    pairs = getattr(A, "marginals", None)
    if pairs is not None:
        return [(int(m), float(w)) for m, w in pairs]
    theta = np.asarray(A.theta, dtype=float).ravel()
    return [(int(m), float(theta[m])) for m in np.flatnonzero(theta)]


def marginal_weights_frame(A, names: Sequence[str] | None = None,
                           top: int | None = TOP_MARGINALS) -> pd.DataFrame:
    """The non-zero weights ``θ_a`` (``A.theta``: ``(2**d,)``, HDMM Sec. 8), largest first:
    ``marginal, mask, order, weight``; ``attrs``: ``count``, ``shown``, ``l1``, ``l2``.
    ValueError without ``theta`` of length ``2**d``."""
    theta = getattr(A, "theta", None)
    if theta is None:
        raise ValueError(f"{type(A).__name__} is not a marginal strategy (it has no theta)")
    d = len(A.domain)
    theta = np.asarray(theta, dtype=float).ravel()
    if theta.size != 2**d:
        raise ValueError(f"theta has {theta.size} entries but a {d}-attribute domain has "
                         f"2**{d} = {2**d} marginals")
    names = list(names) if names is not None and len(names) == d else [f"a{i + 1}" for i in range(d)]
    rows = [(marginal_label(m, names), m, bin(m).count("1"), w) for m, w in _marginals(A) if w != 0]
    frame = pd.DataFrame(rows, columns=["marginal", "mask", "order", "weight"])
    frame = frame.sort_values(["weight", "mask"], ascending=[False, True],
                              kind="stable").reset_index(drop=True)
    count = len(frame)
    if top is not None:
        frame = frame.head(top)
    frame.attrs.update(count=count, shown=len(frame), l1=float(np.abs(theta).sum()),
                       l2=float(np.sqrt((theta ** 2).sum())))
    return frame


def marginal_weights_plot(frame: pd.DataFrame, height: int = 320) -> hv.Bars:
    """Bars of ``θ_a`` per marginal (largest first), from :func:`marginal_weights_frame`."""
    count, shown = frame.attrs.get("count", len(frame)), frame.attrs.get("shown", len(frame))
    note = f" (top {shown} of {count})" if count > shown else f" ({count})"
    return hv.Bars(frame, hv.Dimension("marginal", label="marginal"),
                   [hv.Dimension("weight", label="weight θ"), "order"]).opts(
        xrotation=45, responsive=True, height=height, tools=["hover"], color="#6d904f",
        title=f"Marginal weights θ{note}: each marginal is measured with weight θ",
        fontsize={"title": "9pt"}, shared_axes=False, default_tools=["save", "reset"])


def _unweighted(B: Matrix) -> tuple[float, Matrix]:
    w = 1.0
    while isinstance(B, Weighted):
        w *= B.weight
        B = B.base
    return w, B


def blocks_frame(A: Matrix) -> pd.DataFrame:
    """A stacked strategy's blocks: ``block, weight, rows, structure`` (factor shapes), ``name``;
    ValueError if ``A`` has no ``blocks``."""
    blocks = getattr(A, "blocks", None)
    if blocks is None:
        raise ValueError(f"{type(A).__name__} has no blocks")
    weights = getattr(A, "weights", None)
    rows = []
    for j, B in enumerate(blocks):
        w, inner = _unweighted(B)
        if weights is not None and len(weights) == len(blocks):
            w = float(weights[j])
        factors = inner.factors if isinstance(inner, Kronecker) else [inner]
        rows.append((j + 1, w, B.m, " ⊗ ".join(f"{f.m:,}×{f.n:,}" for f in factors), B.name))
    return pd.DataFrame(rows, columns=["block", "weight", "rows", "structure", "name"])
