"""The Strategy page: what a mechanism measures, drawn as a matrix (HDMM Fig. 1).

:class:`StrategyView` takes the shared :class:`~dpexplorer.ui.session.Session`
and shows two strategies side by side, each chosen by registry name among the
data-independent mechanisms.  For the session's workload ``W`` and noise it
builds the strategy ``A`` (through ``session.cache.entry(W, name, noise)``,
so the Compare page and this page build every strategy once) and shows

* heatmaps of ``A`` (rows = strategy queries, columns = cells) and of the
  Gram matrix ``AᵀA`` (what the error depends on: ``TSE = v·Δ²·tr(WᵀW (AᵀA)⁺)``);
  for a Kronecker strategy ``A₁ ⊗ … ⊗ A_d`` one pair per factor;
* its number of rows, its L1 and L2 sensitivity and its analytic RMSE under
  the session's noise (rescaled when ε or δ change, nothing rebuilt).

Matrices larger than ``max_pixels × max_pixels`` are drawn block-averaged
(the title says so); a matrix too large to materialise at all (e.g. the
Workload strategy of All Range over 1024 cells has 524,800 rows) is replaced
by a message.  Strategies are built in a worker thread (``loading`` shows on
the side being built); errors are shown in the side and sent to
``session.report`` -- never a traceback.

Outputs, for tests and notebooks: ``view.left_info`` / ``view.right_info``
(:class:`StrategyInfo`), :meth:`StrategyView.wait`.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import numpy as np
import panel as pn
import param
import scipy.sparse

import dpexplorer as dpx
from dpexplorer.matrix import Dense, Identity, Kronecker, Matrix, Sparse, VStack, Weighted

from .compare_view import _LABEL, Jobs, _message, build_lock, check_workload
from .session import Session

__all__ = ["StrategyView", "StrategyInfo", "Heatmap", "drawable", "block_mean",
           "DRAW_DENSE_LIMIT"]

log = logging.getLogger(__name__)

#: Largest number of entries materialised densely to draw one matrix (128 MiB).
DRAW_DENSE_LIMIT = 2**24
#: Largest number of nonzeros of a range-query matrix turned sparse to draw it.
DRAW_SPARSE_LIMIT = 50_000_000

SIDES = ("left", "right")

HEADER = """\
## Strategies

A data-independent mechanism answers the workload from noisy answers to its
**strategy** queries ``A`` (HDMM Fig. 1): each row of the first heatmap is one
query measured with noise, each column one cell of the histogram.  The error
of every workload answer depends on ``A`` only through its sensitivity (the
largest column norm: L1 for Laplace, L2 for Gaussian) and its Gram matrix
``AᵀA`` (second heatmap).  Pick two mechanisms to compare them.
"""


class TooLargeToDraw(ValueError):
    """The matrix cannot be materialised, even block-averaged."""


@dataclass
class Heatmap:
    """One matrix as drawn.

    Attributes
    ----------
    title : str
        Plot title (says when the matrix is block-averaged).
    kind : {"A", "gram"}
    factor : int or None
        Kronecker factor index (0-based), None for the whole strategy.
    shape : tuple of int
        Shape of the matrix itself.
    array : ndarray or None
        What is drawn: the matrix, or its block means; None with a message.
    block : tuple of int
        Rows × columns averaged per pixel ((1, 1): drawn exactly).
    message : str
        Why nothing is drawn (``array`` is None).
    """

    title: str
    kind: str
    factor: int | None
    shape: tuple
    array: np.ndarray | None
    block: tuple = (1, 1)
    message: str = ""

    @property
    def downsampled(self) -> bool:
        return self.block != (1, 1)


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

    def rmse(self, noise) -> float:
        """Analytic RMSE per query under ``noise`` (same norm): ``sqrt(v·unit TSE / m)``."""
        if self.A is None or noise.norm != self.norm:
            return math.nan
        return math.sqrt(noise.variance_per_unit * self.unit_tse / self.W.m)


# ---------------------------------------------------------------- drawing
def block_mean(D, rb: int, cb: int) -> np.ndarray:
    """Means of ``rb × cb`` blocks of a dense or scipy-sparse matrix (last blocks may be smaller)."""
    m, n = D.shape
    r0, c0 = np.arange(0, m, rb), np.arange(0, n, cb)
    rc = np.diff(np.append(r0, m)).astype(float)
    cc = np.diff(np.append(c0, n)).astype(float)
    if scipy.sparse.issparse(D):
        R = scipy.sparse.csr_array((1.0 / np.repeat(rc, rc.astype(int)),
                                    (np.arange(m) // rb, np.arange(m))), shape=(r0.size, m))
        C = scipy.sparse.csr_array((1.0 / np.repeat(cc, cc.astype(int)),
                                    (np.arange(n), np.arange(n) // cb)), shape=(n, c0.size))
        return np.asarray((R @ scipy.sparse.csr_array(D) @ C).toarray())
    D = np.asarray(D, dtype=float)
    S = np.add.reduceat(np.add.reduceat(D, r0, axis=0), c0, axis=1)
    return S / rc[:, None] / cc[None, :]


def _sparse_form(M: Matrix):
    """A scipy sparse form of ``M`` when one is cheap to get, else None."""
    if isinstance(M, Sparse):
        return M.matrix
    if isinstance(M, Identity):
        return M.sparse()
    if isinstance(M, Weighted):
        S = _sparse_form(M.base)
        return None if S is None else M.weight * S
    if isinstance(M, VStack):
        parts = [_sparse_form(b) for b in M.blocks]
        return None if any(p is None for p in parts) else scipy.sparse.vstack(parts, format="csr")
    lengths = getattr(M, "lengths", None)
    if callable(lengths) and float(np.sum(lengths())) <= DRAW_SPARSE_LIMIT:
        return M.sparse()
    return None


def drawable(M: Matrix, max_pixels: int = 512) -> tuple[np.ndarray, tuple[int, int]]:
    """``(array, (rb, cb))``: ``M`` itself, or its ``rb × cb`` block means, at most ``max_pixels``².

    Raises
    ------
    TooLargeToDraw
        If ``M`` is too large to materialise and has no cheap sparse form.
    """
    m, n = M.shape
    rb, cb = max(1, math.ceil(m / max_pixels)), max(1, math.ceil(n / max_pixels))
    if isinstance(M, Dense):
        D = M.array
    elif m * n <= DRAW_DENSE_LIMIT:
        D = M.dense()
    else:
        D = _sparse_form(M)
        if D is None:
            raise TooLargeToDraw(f"{m:,} × {n:,} = {m * n:,} entries: too large to draw")
    if rb == cb == 1:
        return (D.toarray() if scipy.sparse.issparse(D) else np.asarray(D, dtype=float)), (1, 1)
    return block_mean(D, rb, cb), (rb, cb)


def _factors(A: Matrix) -> list[Matrix] | None:
    """Factors of a (weighted) Kronecker strategy, the weight folded into the first; else None."""
    if isinstance(A, Kronecker) and len(A.factors) > 1:
        return list(A.factors)
    if isinstance(A, Weighted):
        inner = _factors(A.base)
        if inner is not None:
            return [Weighted(inner[0], A.weight)] + inner[1:]
    return None


def heatmaps(A: Matrix, max_pixels: int = 512) -> list[Heatmap]:
    """The heatmaps of ``A`` and ``AᵀA`` (one pair per factor for a Kronecker strategy)."""
    factors = _factors(A)
    parts = [(None, A)] if factors is None else list(enumerate(factors))
    out = []
    for i, M in parts:
        where = "" if i is None else f" factor {i + 1} of {len(parts)} ({M.name})"
        for kind in ("A", "gram"):
            what = f"A{where}" if kind == "A" else f"AᵀA{where}"
            try:
                X = M if kind == "A" else M.gram()
                shape = X.shape
                arr, block = drawable(X, max_pixels)
            except (TooLargeToDraw, dpx.MatrixTooLargeError) as exc:
                shape = M.shape if kind == "A" else (M.n, M.n)
                out.append(Heatmap(f"{what}: {shape[0]:,} × {shape[1]:,}", kind, i, shape, None,
                                   message=f"{what} is not drawn: {exc}"))
                continue
            title = f"{what}: {shape[0]:,} × {shape[1]:,}"
            if block != (1, 1):
                title += (f", block-averaged {block[0]}×{block[1]} → "
                          f"{arr.shape[0]:,} × {arr.shape[1]:,}")
            out.append(Heatmap(title, kind, i, shape, arr, block))
    return out


def heatmap_element(h: Heatmap, size: int = 300) -> hv.Image:
    """hv.Image of a heatmap in matrix orientation (row 0 at the top), in the matrix's own units."""
    rows, cols = h.shape
    arr = h.array
    neg = bool(np.nanmin(arr) < 0)
    top = float(np.nanmax(np.abs(arr))) or 1.0
    ydim = "row" if h.kind == "A" else "cell "
    img = hv.Image(arr[::-1], bounds=(0, 0, cols, rows),
                   kdims=[hv.Dimension("cell"), hv.Dimension(ydim)], vdims=["value"])
    return img.opts(
        invert_yaxis=True, cmap="RdBu_r" if neg else "Blues",
        clim=(-top, top) if neg else (0, top), colorbar=True, tools=["hover"],
        title=h.title, frame_width=size, frame_height=size, shared_axes=False,
        fontsize={"title": "9pt"})


# ---------------------------------------------------------------- the page
class StrategyView(pn.viewable.Viewer):
    """Two strategies for ``session.workload`` side by side: heatmaps of A and AᵀA, figures.

    Parameters
    ----------
    session : Session, optional
        Shared state (a new one if omitted).
    background : bool
        Build in a worker thread (default); ``False`` builds in the caller's thread.
    """

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
    error = param.String(default="", constant=True, precedence=-1,
                         doc="Last error of this page (also sent to session.report()).")

    #: Largest non-Kronecker domain (cells); Kronecker: per attribute.
    max_cells = 4096

    def __init__(self, session: Session | None = None, background: bool = True, **params):
        self.session = session if session is not None else Session()
        self.background = background
        self._lock = threading.RLock()
        self._jobs = Jobs(self._lock)
        self._tokens = {s: 0 for s in SIDES}
        self._panes: dict = {}
        super().__init__(**params)
        names = self.mechanisms()
        for side, fallback in zip(SIDES, (names[:1], names[1:2] or names[:1]), strict=True):
            if getattr(self, side) not in names and fallback:
                setattr(self, side, fallback[0])
        self.session.param.watch(lambda *_: self.update(), ["workload", "noise"])
        self.session.param.watch(lambda *_: self._refresh_text(), ["epsilon", "delta"])
        self.param.watch(lambda *events: [self.update(e.name) for e in events], ["left", "right"])
        self.param.watch(lambda *_: self.update(), "max_pixels")
        self.update()

    @staticmethod
    def mechanisms() -> list[str]:
        """Registry names of the data-independent mechanisms."""
        return dpx.registry.names(data_dependent=False)

    def info(self, side: str) -> StrategyInfo | None:
        """The :class:`StrategyInfo` shown on ``side`` ("left" or "right")."""
        return getattr(self, f"{side}_info")

    def wait(self, timeout: float = 300.0) -> bool:
        """Block until the strategies being built are shown."""
        return self._jobs.wait(timeout)

    def _set(self, **values) -> None:
        with param.edit_constant(self):
            self.param.update(**values)

    def _fail(self, message: str) -> None:
        self._set(error=message)
        if self.session.error != message:  # e.g. a bad workload, already shown by Compare
            self.session.report(message)

    # ----------------------------------------------------------- update
    def update(self, side: str | None = None) -> bool:
        """(Re)build the strategies of ``side`` (default both) for the session's workload and noise."""
        with self._lock:
            try:
                W = check_workload(self.session.workload, self.max_cells)
                noise = self.session.noise_model()
            except ValueError as exc:
                for s in SIDES:  # builds under way are dropped; the last strategies stay
                    self._tokens[s] += 1
                self._set(left_busy=False, right_busy=False)
                self._fail(_message(exc))
                return False
            for s in SIDES if side is None else (side,):
                name = getattr(self, s)
                current = self.info(s)
                if (current is not None and current.W is W and current.norm == noise.norm
                        and current.name == name and current.heatmaps
                        and self._pixels == self.max_pixels and side is None):
                    continue
                self._tokens[s] += 1
                self._set(**{f"{s}_busy": True})
                self._submit(self._build_job, s, self._tokens[s], W, noise, name, self.max_pixels)
            self._pixels = self.max_pixels
            return True

    _pixels = None

    def _submit(self, fn, *args) -> None:
        if self.background:
            self._jobs.submit(fn, *args)
        else:
            fn(lambda callback: callback(), *args)

    def _build_job(self, post, side, token, W, noise, name, max_pixels) -> None:
        """Worker: build (or look up) the strategy and everything drawn of it."""
        try:
            mech = dpx.registry.get(name)
        except KeyError as exc:
            msg = str(exc).strip("'\"")
            post(lambda: self._done(side, token, None, msg))
            return
        info = StrategyInfo(name, mech.label, W, noise.norm)
        error = ""
        try:
            if mech.data_dependent:
                raise ValueError(f"{mech.label} is data-dependent: it has no fixed strategy")
            with build_lock(self.session.cache):
                A, unit, seconds, note = self.session.cache.entry(W, name, noise)
            info.A, info.unit_tse, info.seconds, info.note = A, unit, seconds, note
            if A is not None:
                info.rows = A.m
                info.sensitivity_l1 = A.sensitivity(1)
                info.sensitivity_l2 = A.sensitivity(2)
                info.heatmaps = heatmaps(A, max_pixels)
        except Exception as exc:  # noqa: BLE001 - shown in the page, never a traceback
            if not isinstance(exc, ValueError):
                log.exception("strategy %s failed", name)
            error = f"{mech.label}: {_message(exc)}"
            info.error = error
        post(lambda: self._done(side, token, info, error))

    def _done(self, side, token, info, error) -> None:
        if token != self._tokens[side]:
            return  # superseded by a newer choice
        values = {f"{side}_busy": False}
        if info is not None:
            values[f"{side}_info"] = info
        self._set(**values)
        if error:
            self._fail(error)
        else:
            self._set(error="")

    # --------------------------------------------------------------- UI
    def stats(self, side: str) -> str:
        """Markdown figures of the strategy on ``side`` (RMSE at the session's current noise)."""
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
        kron = _factors(A)
        shape = (" ⊗ ".join(f"{f.m:,}×{f.n:,}" for f in kron) if kron else "")
        return (f"{head}\n\n"
                f"| figure | value |\n|---|---|\n"
                f"| rows (queries measured) | {info.rows:,}{' = ' + shape if shape else ''} |\n"
                f"| cells | {A.n:,} |\n"
                f"| sensitivity L1 / L2 | {info.sensitivity_l1:.4g} / {info.sensitivity_l2:.4g} |\n"
                f"| analytic RMSE per query | {rmse} |\n"
                f"| workload | {W.name}: {W.m:,} queries |\n"
                f"| build time | {info.seconds:.3g} s |")

    def plot(self, side: str):
        """hv.Layout of the heatmaps on ``side`` (A and AᵀA, per factor), or None."""
        info = self.info(side)
        if info is None or not info.heatmaps:
            return None
        images = [heatmap_element(h, size=320) for h in info.heatmaps if h.array is not None]
        if not images:
            return None
        # one column: two sides of two heatmaps with colorbars do not fit a page's width
        return hv.Layout(images).cols(1).opts(shared_axes=False)

    def messages(self, side: str) -> str:
        info = self.info(side)
        if info is None:
            return ""
        return "\n\n".join(h.message for h in info.heatmaps if h.message)

    def _refresh_text(self) -> None:
        for side in SIDES:
            pane = self._panes.get(f"{side}_stats")
            if pane is not None:
                pane.object = self.stats(side)

    def _column(self, side: str) -> pn.Column:
        options = {dpx.registry.get(n).label: n for n in self.mechanisms()}
        select = pn.widgets.Select(options=options, value=getattr(self, side), width=240,
                                   **{_LABEL: f"{side.capitalize()} strategy"})
        select.link(self, value=side, bidirectional=True)
        stats = pn.pane.Markdown(self.stats(side), sizing_mode="stretch_width")
        note = pn.pane.Alert(self.messages(side), alert_type="info",
                             visible=bool(self.messages(side)), sizing_mode="stretch_width")
        plot = self.plot(side)
        pane = pn.pane.HoloViews(plot, visible=plot is not None, linked_axes=False)

        def redraw(*_):
            stats.object = self.stats(side)
            msg = self.messages(side)
            note.object, note.visible = msg, bool(msg)
            p = self.plot(side)
            pane.object, pane.visible = p, p is not None
        self.param.watch(redraw, [f"{side}_info"])
        self.param.watch(lambda *_: setattr(stats, "object", self.stats(side)), f"{side}_busy")
        self._panes.update({f"{side}_stats": stats, f"{side}_plot": pane,
                            f"{side}_select": select, f"{side}_note": note})
        return pn.Column(select, stats, note, pane, loading=self.param[f"{side}_busy"],
                         sizing_mode="stretch_width")

    def panel(self) -> pn.Column:
        """The page's layout (built once)."""
        if "root" not in self._panes:
            self._panes["root"] = pn.Column(
                pn.pane.Markdown(HEADER, sizing_mode="stretch_width"),
                pn.Row(self._column("left"), self._column("right"), sizing_mode="stretch_width"),
                sizing_mode="stretch_width")
        return self._panes["root"]

    def __panel__(self):
        return self.panel()
