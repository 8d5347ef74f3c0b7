"""The Compare page (:class:`ComparePage`): every mechanism for the session's workload.

:class:`ComparePage` is the explorer's "Compare" tab.  It takes the shared
:class:`~dpexplorer.ui.session.Session` and reacts to its workload, ε, δ and
noise.  It shows the analytic RMSE of every registered data-independent
mechanism (bars, log y, SVD bound as a line, and a table that also lists the
data-dependent mechanisms with their note), the per-query RMSE of one chosen
mechanism against the query index (and the range length for range
workloads), and a privacy–accuracy curve (RMSE over ε in 0.01..10).

Strategies are built once per (workload, mechanism, noise norm) in a
background thread (progress bar over mechanisms, the results dimmed meanwhile)
and kept in ``session.cache``; the page then only stores unit-noise figures,
so a change of ε or δ rescales everything analytically (``TSE = v·unit TSE``,
per-query RMSE ∝ ``sqrt(v)``) without touching the cache.  Outputs are
parameters: ``table`` (same numbers as :func:`dpexplorer.compare`),
``curve``, ``per_query``, ``busy``, ``error``; :meth:`ComparePage.wait`
blocks until background work is done (tests, scripts).

Strategy optimisers (registry entries flagged ``optimizer``,
:func:`~dpexplorer.ui.workers.optimizers`: HDMM's OPT0, OPT⊗, OPT+, OPT_M and
HDMM, Eigen-Design) come last: the table of the other mechanisms is shown
first, then every optimiser's row (RMSE, ratio to the SVD bound) fills in as
soon as it is built, while a second progress bar follows the optimiser's
:func:`dpexplorer.core.optimization.report` calls (stage, iterations or
restarts, current objective) and a Cancel button stops it
(:meth:`ComparePage.cancel`).  Unticking ``auto_optimize`` leaves them out
("not run yet") until :meth:`ComparePage.run_optimizers`.  A new workload or
noise norm stops a running optimiser (its progress callback raises
:class:`~dpexplorer.ui.optimize_view.Cancelled`); coming back to it starts it
again.  Different strategies build side by side (one lock per cache entry,
:func:`build_lock`), so a long optimisation on this page never holds the
Strategy page.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import numpy as np
import pandas as pd
import panel as pn
import param
from bokeh.models.widgets.tables import NumberFormatter
from panel.io.state import set_curdoc

import dpexplorer as dpx
from dpexplorer.accuracy import EPSILON_GRID, rmse_curve
from dpexplorer.compare import OBJECTIVES, scale_comparison

from . import workers
from .accuracy_view import AccuracyFirst, epsilon_bars, target_curve_plot
from .exports import FigureExport
from .live_plot import LivePlot
from .optimize_view import SHUTDOWN, Cancelled, OptimizationProgress, ProgressRelay
from .redraws import REDRAWS, models_batch, no_connection, on_loop, served_document
from .session import Session, exception_message, readable_headers
from .shown import ShownGate, run_redraws

__all__ = ["ComparePage", "Jobs", "build_lock", "check_workload", "structured_1d", "table_patch",
           "too_large", "STRUCTURED_MAX_CELLS", "structured_mechanisms", "rmse_chart",
           "OPTIMIZER_THREADS", "cached_entry"]

log = logging.getLogger(__name__)

#: Columns of the comparison shown in the table widget.
TABLE_COLUMNS = ["label", "rmse", "ratio", "seconds", "description", "source", "note"]

# Widget captions: ``label`` since Panel 1.9 (``name`` is deprecated there), ``name`` before.
_LABEL = "label" if "label" in pn.widgets.IntInput.param else "name"
# Button colours: ``color`` since Panel 1.9 (``button_type`` is deprecated there).
_COLOR = "color" if "color" in pn.widgets.Button.param else "button_type"

def comparison_table(frame: pd.DataFrame) -> pn.widgets.Tabulator:
    """Read-only Tabulator of a :func:`dpexplorer.compare` table (RMSE, ratio, build time, ...).

    The columns share the page's width (``fit_columns``) and the long text
    columns wrap, so that ``source`` and ``note`` are never off-screen; headers
    wrap between words and no column is narrower than its header's longest
    word (:func:`~dpexplorer.ui.session.readable_headers`).
    """
    # the columns fill the width (the worst query's std of objective "max" too, so that
    # adding it never pushes ``note`` off the right edge), the text columns taking more
    grow = {"description": 4, "source": 2, "note": 3}
    titles = {"label": "mechanism", "rmse": "RMSE", "ratio": "RMSE / SVD bound",
              "seconds": "build (s)", "max_std": "worst query std"}
    # every header readable: wrapped between words, columns no narrower than its longest word
    columns = list(dict.fromkeys([*frame.columns, "max_std"]))  # the objective may add max_std
    return pn.widgets.Tabulator(
        frame, show_index=False, disabled=True, sizing_mode="stretch_width",
        layout="fit_columns", titles=titles,
        configuration=readable_headers(columns, titles, grow=grow),
        formatters={"rmse": NumberFormatter(format="0,0.000"),
                    "max_std": NumberFormatter(format="0,0.000"),
                    "ratio": NumberFormatter(format="0.000"),
                    "seconds": NumberFormatter(format="0.0000"),
                    "description": {"type": "textarea"}, "source": {"type": "textarea"},
                    "note": {"type": "textarea"}})


def rmse_chart(df: pd.DataFrame, title: str = "", slots=()) -> hv.Overlay:
    """hv.Bars of the finite ``rmse`` per mechanism (log y), the SVD bound as an hv.HLine.

    ``df`` is a :func:`dpexplorer.compare` table (``attrs['svd_bound']``).
    ``slots``: labels kept on the axis without a bar yet (optimisers still
    running), so that their bars can fill in without rebuilding the plot.
    """
    ok = df[df["rmse"].notna() | df["label"].isin(list(slots))]
    bound = float(df.attrs.get("svd_bound", math.nan))
    bars = hv.Bars(
        ok, kdims=[hv.Dimension("label", label="Mechanism")],
        vdims=[hv.Dimension("rmse", label="RMSE (counts)"), "ratio"],
    ).opts(logy=True, tools=["hover"], color="#30a2da", responsive=True, height=360,
           title=title, xrotation=0, default_tools=["save", "reset"], framewise=True)
    values = list(ok["rmse"].dropna())
    if math.isfinite(bound) and bound > 0:
        values.append(bound)
    if values:
        bars = bars.opts(ylim=(min(values) / 1.5, max(values) * 1.5))
    if not (math.isfinite(bound) and bound > 0):
        return hv.Overlay([bars])
    # Constant labels: a live plot (hv.streams.Pipe) matches layers by label, so a
    # label carrying the value would add one more line at every ε change.
    line = hv.HLine(bound, label="SVD bound").opts(
        color="#d62728", line_dash="dashed", line_width=2)
    text = hv.Text(ok["label"].iloc[0] if len(ok) else "", bound * 1.15,
                   f"SVD bound {bound:.4g}", label="SVD bound").opts(
        text_color="#d62728", text_font_size="10pt", text_align="left")
    return (bars * line * text).opts(title=title, show_legend=False)  # the text names the line


# =====================================================================
# Background work shared by the Compare and Strategy pages
# =====================================================================
#: CPU priority (nice) of the background threads: builds and optimisations yield the
#: processor to the threads that answer the browser (ε changes, redraws).
BACKGROUND_NICE = 10


def _background_thread() -> None:
    """Lower the CPU priority of the calling worker thread (Linux: nice is per thread).

    On a machine with few cores a running optimiser otherwise takes the
    processor from the server's event loop and Panel's callback threads, and an
    ε change (milliseconds of work) waits seconds behind it.
    """
    with contextlib.suppress(AttributeError, OSError):  # no per-thread nice here: keep going
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)


def lower_native_helper_threads(nice: int = BACKGROUND_NICE) -> list[int]:
    """Lower the priority of this process's threads that Python did not start (Linux).

    The BLAS libraries start their helper threads when numpy and scipy are
    imported, at the server's own priority; a background comparison (nice
    :data:`BACKGROUND_NICE`) runs half of its matrix products on them, in
    competition with the event loop.  Call once the imports are done (the
    served app does).  Python's own threads keep their priority.

    Returns
    -------
    list of int
        The thread ids lowered (empty without /proc).
    """
    return workers.lower_threads(nice, native_only=True)


#: Worker threads shared by all pages and sessions (strategy builds, per-query errors).
EXECUTOR = ThreadPoolExecutor(max_workers=4, thread_name_prefix="dpexplorer-ui",
                              initializer=_background_thread)
#: Threads that wait for the strategy optimisers, which compute in worker processes
#: (:mod:`dpexplorer.ui.workers`): they hold no processor, so there are enough of them for
#: every session's optimisers to wait their turn without taking :data:`EXECUTOR`'s threads
#: from the other sessions' comparisons.
OPTIMIZER_THREADS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="dpexplorer-opt",
                                       initializer=_background_thread)

_BUILD_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_BUILD_LOCKS_GUARD = threading.Lock()


def build_lock(cache: dpx.StrategyCache, key=None) -> threading.RLock:
    """The lock serialising the builds of one entry of ``cache`` (per session).

    ``key`` names the entry: ``(W, name, norm)`` for a strategy, ``("svdb", W)``
    for an SVD bound; the pages take it around :meth:`StrategyCache.entry` /
    ``svdb`` so that two pages never build the same strategy twice, while
    different strategies (a long optimisation on one page, a quick strategy
    on another) build side by side.  ``key=None`` gives one lock for the whole
    cache.  Reading figures already stored by a page never takes a lock.
    """
    with _BUILD_LOCKS_GUARD:
        locks = _BUILD_LOCKS.get(cache)
        if locks is None:
            locks = _BUILD_LOCKS[cache] = {}
        lock = locks.get(key)
        if lock is None:
            lock = locks[key] = threading.RLock()
        return lock


class Jobs:
    """Run functions on :data:`EXECUTOR` and post their results back to the page.

    ``submit(fn, *args)`` calls ``fn(post, *args)`` on a worker thread; the
    job hands UI updates to ``post(callback)``.  In a server session the
    callback runs on the document's event loop through
    ``pn.state.execute(..., schedule=True)`` (document lock taken,
    ``pn.state.curdoc`` set, so notifications work), together with the page's
    other callbacks waiting for the loop (:meth:`_poster`); without one (tests,
    scripts, notebooks) it runs at once under the page's lock.

    The strategy builds do not use Panel's own thread pool
    (``pn.config.nthreads``): that pool also runs every widget callback of
    every session, and an optimisation of minutes would hold it, so a
    separate :data:`EXECUTOR` runs them.  :meth:`wait` lets tests and
    scripts block until the page's work is done.
    """

    def __init__(self, lock: threading.RLock):
        self.lock = lock
        self._futures: set = set()
        self._guard = threading.Lock()
        self._posts: dict = {}  # document -> callbacks posted and not run yet, in order

    def submit(self, fn: Callable, *args, executor: ThreadPoolExecutor | None = None) -> None:
        """Run ``fn(post, *args)`` on ``executor`` (default :data:`EXECUTOR`)."""
        doc = pn.state.curdoc
        post = self._poster(doc)

        def run():
            ctx = set_curdoc(doc) if doc is not None else contextlib.nullcontext()
            with ctx:
                fn(post, *args)

        try:
            future = (executor or EXECUTOR).submit(run)
        except RuntimeError:  # the interpreter is shutting down: nothing more runs
            log.debug("job not started: the executor is shut down", exc_info=True)
            return
        with self._guard:
            self._futures.add(future)
        future.add_done_callback(self._done)

    def _done(self, future) -> None:
        with self._guard:
            self._futures.discard(future)
        exc = future.exception()
        if exc is not None:  # jobs catch their own errors; this is a bug
            log.error("background job failed", exc_info=exc)

    def _poster(self, doc):
        """``post(callback)`` for the jobs of ``doc``'s session (see the class docstring).

        The callbacks a page posts while an earlier one waits for the event loop join it
        and run with it, in order, in one turn of the loop under one document lock: a
        page's optimisers and comparisons post progress and status several times a second,
        and each callback scheduled on its own took the session's document lock for a turn
        of the loop shared by every session, so that with eight sessions an ε typed in the
        page waited behind its own page's queue of posts (19 s in one run; issue 14).
        """
        lock = self.lock
        if doc is not None and doc.session_context is not None:
            def run_posted():
                with self._guard:
                    batch = self._posts.pop(doc, [])
                with set_curdoc(doc), lock:
                    for callback in batch:
                        try:
                            callback()
                        except Exception:  # noqa: BLE001 - one failed update must not stop the rest
                            log.exception("a background job's update of the page failed")

            def post(callback):
                with self._guard:
                    waiting = doc in self._posts
                    self._posts.setdefault(doc, []).append(callback)
                if waiting:
                    return  # the run already scheduled takes this one too
                try:  # Panel schedules it on the session's event loop, with the document lock
                    on_loop(doc, run_posted)
                except Exception:  # noqa: BLE001 - the session was closed meanwhile
                    with self._guard:
                        self._posts.pop(doc, None)
                    log.debug("could not post to a closed session", exc_info=True)
            return post

        def post_now(callback):
            with lock:
                callback()
        return post_now

    @property
    def pending(self) -> int:
        with self._guard:
            return len(self._futures)

    def wait(self, timeout: float = 300.0) -> bool:
        """Block until no job is running or queued (jobs may start jobs); ``False`` on timeout."""
        import time

        deadline = time.monotonic() + timeout
        while True:
            with self._guard:
                futures = list(self._futures)
            if not futures:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            for f in futures:
                try:
                    f.result(timeout=max(remaining, 0.01))
                except Exception:  # noqa: BLE001 - logged in _done
                    pass


#: Largest 1D workload with interval structure (All Range, Prefix, Width-k, random or listed
#: ranges, and their weighted unions with Identity and Total) that the pages compare.  Its
#: analytic comparison uses no n × n matrix: at 2**16 cells the SVD bound and the error of each
#: of :func:`structured_mechanisms` took 0.01-0.4 s (2 cores, 1 BLAS thread), the SVD bound of
#: a union with Identity/Total is left out (it would need the n × n Gram matrix).
STRUCTURED_MAX_CELLS = 2**16



def structured_mechanisms() -> tuple[str, ...]:
    """Mechanisms built above ``max_cells`` for such a workload, in registration order.

    The registry entries flagged ``structured_1d`` (trees, Haar wavelet on a
    power-of-two domain, Identity): their strategies and errors need no
    ``n × n`` matrix.
    """
    return tuple(n for n, m in dpx.registry.REGISTRY.items() if m.structured_1d is not False)


def structured_1d(W) -> bool:
    """Whether ``W`` is a 1D workload whose comparison needs no ``n × n`` matrix.

    Interval rows (All Range, Prefix, Width-k, ranges), Identity, Total and
    weighted unions of these: the workloads with a structured Gram matrix
    (:func:`dpexplorer.gram_ops.gram_operator`) that has interval forms.
    """
    if not isinstance(W, dpx.matrix.Matrix) or len(W.domain) != 1:
        return False
    op = dpx.gram_ops.gram_operator(W)
    return op is not None and op.intervals


def check_workload(W, max_cells: int = 4096,
                   structured_max_cells: int = STRUCTURED_MAX_CELLS) -> dpx.matrix.Matrix:
    """``W`` if the pages can compare it, else ValueError with the reason.

    A 1D workload with interval structure (:func:`structured_1d`) may have up
    to ``structured_max_cells`` cells: above ``max_cells`` only
    :func:`structured_mechanisms` are built (:func:`too_large`).  A
    Kronecker-structured workload (a product, or a weighted union of
    products) is checked factor by factor: every attribute at most
    ``max_cells`` cells.  Any other workload must have ``n ≤ max_cells``
    (strategies such as GreedyH and the exact error need dense ``n × n``
    Gram matrices).
    """
    if W is None:
        raise ValueError("no workload yet: build one on the Workload page")
    if not isinstance(W, dpx.matrix.Matrix):
        raise ValueError(f"the workload must be a dpexplorer Matrix, got {type(W).__name__}")
    if W.n > max_cells and structured_1d(W):
        if W.n > structured_max_cells:
            raise ValueError(
                f"workload {W.name!r} over n = {W.n:,} cells is too large to compare here: at most "
                f"{structured_max_cells:,} cells for ranges, prefixes, identity and total; set a "
                f"smaller domain size on the Workload page")
        return W
    terms = dpx.error.kron_terms(W)
    sizes = None if terms is None else [f.n for _, factors in terms for f in factors]
    if sizes is None:
        if W.n > max_cells:
            raise ValueError(
                f"workload {W.name!r} over n = {W.n:,} cells is too large to compare here "
                f"(at most {max_cells:,} cells, or a Kronecker product of attributes of at "
                f"most {max_cells:,} cells each; workloads made only of ranges, prefixes, "
                f"identity and total may have up to {structured_max_cells:,} cells): set a "
                f"smaller domain size on the Workload page")
    elif max(sizes) > max_cells:
        raise ValueError(
            f"workload {W.name!r} has an attribute of {max(sizes):,} cells, too large to "
            f"compare here (at most {max_cells:,} cells per attribute; a single attribute of "
            f"ranges, prefixes, identity and total may have up to {structured_max_cells:,})")
    return W


def too_large(W, name: str, max_cells: int = 4096) -> str | None:
    """Why mechanism ``name`` is not built for ``W`` on the pages (plain words), or None.

    Only for a 1D structured workload above ``max_cells`` cells
    (:func:`check_workload` lets it through): mechanisms not flagged
    ``structured_1d`` in the registry would need an ``n × n`` matrix (the
    optimisers minutes to hours of work on it); one whose flag depends on
    the domain size (Privelet's fast error formula: power-of-two domains
    only) gives its own reason.
    """
    n = W.n
    if n <= max_cells or not structured_1d(W):
        return None
    smaller = "set a smaller domain size on the Workload page"
    mech = dpx.registry.get(name)
    reason = mech.structured_reason(n)
    if reason is None:
        return None
    if callable(mech.structured_1d):  # structured on some domain sizes: its own reason
        return f"{reason}; at most {max_cells:,} cells otherwise: set the domain size on the Workload page"
    if mech.optimizer:
        return (f"not run: needs an n × n matrix (its optimiser would take minutes to hours at "
                f"{n:,} cells); at most {max_cells:,} cells: {smaller}")
    return f"needs an n × n matrix; at most {max_cells:,} cells (this workload has {n:,}): {smaller}"


def _message(exc: BaseException) -> str:
    """An exception for the page, in the app's words (:func:`exception_message`)."""
    if isinstance(exc, ValueError):
        return exception_message(exc)
    return f"{type(exc).__name__}: {exc}"


# =====================================================================
# ComparePage
# =====================================================================
#: Columns of the comparison table on the Compare page.
PAGE_COLUMNS = TABLE_COLUMNS  # the table widget's columns
#: ε grid of the privacy–accuracy curve (the session's ε is added to it).
EPS_GRID = EPSILON_GRID

PAGE_HEADER = """\
## Compare mechanisms

**Error at this ε:** the analytic **RMSE per query** (counts; lower is better) of every
data-independent mechanism for the workload built on the *Workload* page,
under the sidebar's noise, against the **SVD lower bound** (dashed line):
no matrix mechanism can do better.  Data-dependent mechanisms have no
analytic error (their error depends on the data): they are listed with a
note.  Strategies are built once per workload and noise norm; changing ε or
δ only rescales the errors.  **ε for this error** turns the question around:
state the error you can accept and see the ε each mechanism needs (less ε is
more private).
"""


def _objective_note() -> str:
    """The note under the objective selector: which registered builders take the objective.

    An optimiser without an ``objective`` parameter optimises the total error; a mechanism
    with one (ResidualPlanner) optimises the chosen objective.
    """
    def listed(labels: list[str]) -> str:  # "A, B and C optimise" / "A optimises"
        if len(labels) == 1:
            return f"{labels[0]} optimises"
        return ", ".join(labels[:-1]) + f" and {labels[-1]} optimise"

    mechs = [dpx.registry.get(n) for n in dpx.registry.names(data_dependent=False)]
    total = [m.label for m in mechs if m.optimizer and "objective" not in m.params]
    chosen = [m.label for m in mechs if "objective" in m.params]
    text = ("**Objective.** *Total error* ranks by RMSE (the root of the mean squared error over all "
            "queries); *worst query* ranks by the largest per-query standard deviation and adds it "
            "to the table.")
    if total:
        text += f"  {listed(total)} the **total error**, whichever is chosen"
        text += f"; {listed(chosen)} the chosen objective." if chosen else "."
    elif chosen:
        text += f"  {listed(chosen)} the chosen objective."
    return text


OBJECTIVE_NOTE = _objective_note()


NOT_RUN = ("optimiser not run yet: press 'Run optimisers' (or tick 'Run optimisers "
           "automatically'); it may take a while")
OPTIMIZING = "optimising… (its row fills in when it is built; see the progress bar)"
CANCELLED = "cancelled: press 'Run optimisers' to build it"


def cached_entry(cache: dpx.StrategyCache, W, name: str, noise):
    """``cache.entry(W, name, noise)`` if it is already built, else None (never builds)."""
    entries = getattr(cache, "_entries", None)
    if entries is None:  # pragma: no cover - another cache implementation
        return None
    return entries.get((W, name, noise.norm, ()))


@dataclass
class _Base:
    """Unit-noise figures of one comparison: everything ε and δ rescale."""

    W: dpx.matrix.Matrix
    norm: int
    frame: pd.DataFrame  # dpx.compare columns + unit_tse, registry order
    svdb: float
    failures: list = field(default_factory=list)
    pending: list = field(default_factory=list)  # optimisers not run (deferred or cancelled)
    objective: str = "sum"  # what the table ranks by (dpx.compare's objective)

    @property
    def failed(self) -> bool:
        """Every analytic mechanism raised: nothing to show."""
        finite = np.isfinite(self.frame["unit_tse"].to_numpy(dtype=float)) if len(self.frame) else []
        return bool(self.failures) and not np.any(finite)


@dataclass
class _PerQuery:
    """Per-query errors of one (workload, mechanism, norm) for unit noise variance.

    Multiplying by ``sqrt(variance_per_unit)`` gives the per-query RMSE (and
    the mean RMSE per range length) at any ε, δ of that norm.
    """

    unit_std: np.ndarray | None  # sqrt(per-query variance / variance_per_unit)
    lengths: np.ndarray | None = None
    note: str = ""
    length_values: np.ndarray | None = None  # distinct range lengths
    length_means: np.ndarray | None = None  # mean unit_std per distinct length

    @property
    def size(self) -> int:
        return 0 if self.unit_std is None else self.unit_std.size


class ComparePage(pn.viewable.Viewer):
    """The Compare page: all mechanisms for ``session.workload`` under the session's noise.

    Parameters
    ----------
    session : Session, optional
        Shared state (a new one if omitted).
    background : bool
        Build strategies in a worker thread (default).  ``False`` runs
        everything in the caller's thread (scripts).

    Attributes
    ----------
    optimization : OptimizationProgress
        Progress of the optimiser being built (stage, done/total, objective).
    """

    mechanism = param.String(default="hb", doc="""
        Registry name of the mechanism whose per-query error is plotted.""")
    table = param.DataFrame(default=None, allow_None=True, constant=True, precedence=-1, doc="""
        dpexplorer.compare() numbers for the current noise (attrs: svd_bound, noise, m, n,
        workload); the last good table stays on errors.""")
    curve = param.DataFrame(default=None, allow_None=True, constant=True, precedence=-1, doc="""
        Privacy-accuracy curve: mechanism, label, epsilon, rmse (the SVD bound as
        mechanism 'svd_bound'), for EPS_GRID plus the session's ε.""")
    per_query = param.DataFrame(default=None, allow_None=True, constant=True, precedence=-1,
                                doc="""Per-query RMSE of `mechanism`: query, rmse (and length
        for range workloads).""")
    busy = param.Boolean(default=False, constant=True, precedence=-1,
                         doc="True while strategies are being built.")
    per_query_busy = param.Boolean(default=False, constant=True, precedence=-1)
    progress = param.Integer(default=0, constant=True, precedence=-1,
                             doc="Mechanisms done in the running comparison.")
    total = param.Integer(default=1, constant=True, precedence=-1,
                          doc="Mechanisms in the running comparison.")
    status = param.String(default="", constant=True, precedence=-1)
    objective = param.Selector(default="sum", objects=list(OBJECTIVES), doc="""
        What the comparison ranks by: 'sum' (total squared error, shown as RMSE) or 'max'
        (the worst query's standard deviation, dpx.compare(objective='max')).  Mechanisms with
        an objective (ResidualPlanner) are built for it; OPT0, OPT⊗, OPT+, OPT_M, HDMM and
        Eigen-Design always optimise the total squared error.""")
    auto_optimize = param.Boolean(default=True, doc="""
        Build the strategy optimisers (registry entries flagged ``optimizer``) in every comparison; when False they
        are listed as 'not run yet' until run_optimizers() (the 'Run optimisers' button).""")
    pending = param.List(default=[], constant=True, precedence=-1, doc="""
        Optimisers of the shown comparison that have not been run (deferred or cancelled).""")
    optimizing = param.Boolean(default=False, constant=True, precedence=-1, doc="""
        True while run_optimizers() builds the pending optimisers.""")
    per_query_note = param.String(default="", constant=True, precedence=-1)
    error = param.String(default="", constant=True, precedence=-1, doc="""
        Last error of this page ('' after a success); also sent to session.report().""")

    #: Largest non-Kronecker domain (cells) compared; Kronecker: per attribute.  1D workloads of
    #: ranges, prefixes, identity and total: up to :data:`STRUCTURED_MAX_CELLS`, with only
    #: :func:`structured_mechanisms` built above ``max_cells`` (:func:`too_large`).
    max_cells = 4096
    #: Largest workload (queries) whose per-query errors are computed.
    max_per_query_rows = 10_000_000
    #: Points drawn in the per-query scatter plots (evenly spaced queries beyond it).
    max_points = 5000
    #: Workload comparisons and per-query vectors kept (least recently used dropped).
    keep = 8
    #: Per-query errors kept in memory, summed over the cached vectors.
    max_cached_queries = 20_000_000
    #: Least seconds between two partial updates while optimisers run (rows built meanwhile
    #: are shown together; every update redraws the table and charts in the browser).
    merge_interval = 1.5
    #: Most seconds the first comparison and optimisers wait for the browser to draw the
    #: page, and seconds the optimisers wait after it says it is loaded (it is still laying
    #: the page out): their work and updates would otherwise slow down the first render
    #: (measured: ~4 s → 5-10 s page load).
    load_wait = 30.0
    load_grace = 1.5
    #: Seconds between the table's first rows and the page's first figures (served pages
    #: only): the browser builds the table before the four figures, instead of after them.
    #: Measured in headless chromium (an A/B of the Compare table's time, 2 cores, 4
    #: pages each, medians): n = 256 4.6-4.9 s at once, 3.4 s with the per-query and
    #: privacy–accuracy figures 1.5 s later, 2.9-3.0 s with the bars too (0.8-1.5 s later);
    #: n = 1024 4.4-4.7 s, 3.1-3.2 s, 2.8-3.0 s.
    first_figures_delay = 1.0

    def __init__(self, session: Session | None = None, background: bool = True, **params):
        self.session = session if session is not None else Session()
        self.background = background
        self._lock = threading.RLock()
        self._jobs = Jobs(self._lock)
        #: Redraws wait while the page's tab is hidden (told by ExplorerApp).
        self.gate = ShownGate(self._lock)
        self._bases: OrderedDict = OrderedDict()
        self._pq: OrderedDict = OrderedDict()
        self._token = 0
        self._pending = None  # key of the comparison being built
        self._pq_pending = None
        self._shown = None  # key of the base behind `table`
        self._opt_pending = None  # key whose optimisers run_optimizers() is building
        self._curve_layers = {}  # mechanism -> (key, curve) of the privacy–accuracy chart drawn
        self._pq_view = None  # (key, noise, data) of the per-query errors shown
        self._cancel = False  # set by cancel(): the running optimisation stops
        self._serials = itertools.count(1)  # build numbers (next() is atomic in CPython)
        self._panes: dict = {}
        self._queued: dict = {}  # redraws waiting for the event loop (_redraw)
        self._statuses: dict = {}  # the status waiting for the event loop, per kind (_post_status)
        self._urgent = False  # set while update() shows the user's own change (REDRAWS)
        self._queued_guard = threading.Lock()
        self._figures_after = None  # time.monotonic() before which no first figure is drawn
        self._figures_timer = set()  # redraw keys waiting for that time
        #: Progress of the optimiser being built (fed by dpexplorer.core.optimization.report).
        self.optimization = OptimizationProgress()
        # in a server session the optimisers wait until the browser has drawn the page: their
        # work and updates would otherwise compete with the page's first render
        self._loaded = threading.Event()
        self._grace = 0.0
        doc = served_document()
        self._doc = None if doc is None else weakref.ref(doc)
        if doc is not None:
            try:
                pn.state.onload(self._loaded.set)
                self._grace = self.load_grace
            except Exception:  # noqa: BLE001 - no onload support: do not wait
                self._loaded.set()
            # a closed browser tab stops its optimisers (they could run for minutes)
            doc.on_session_destroyed(self._session_destroyed)
        else:
            self._loaded.set()
        super().__init__(**params)
        #: The "ε for this error" mode (accuracy first): fed every comparison shown.
        self.accuracy_first = AccuracyFirst(self.session, submit=self._submit, lock=self._lock,
                                            report=self.session.report)
        self.param.watch(lambda e: e.new and self.run_optimizers(), "auto_optimize")
        if self.mechanism not in self.mechanisms():
            self.mechanism = self.mechanisms()[0]
        self.session.param.watch(lambda *_: self.update(), ["workload", "epsilon", "delta", "noise"])
        self.param.watch(lambda *_: self._refresh_per_query(), "mechanism")
        self.param.watch(lambda *_: self.update(), "objective")
        self.update()

    # ------------------------------------------------------------ state
    @property
    def cache(self) -> dpx.StrategyCache:
        return self.session.cache

    @property
    def svd_bound(self) -> float:
        """SVD lower bound on the RMSE of the current table (NaN if none)."""
        return math.nan if self.table is None else float(self.table.attrs.get("svd_bound", math.nan))

    def _set(self, **values) -> None:
        with param.edit_constant(self):
            self.param.update(**values)

    def _fail(self, message: str) -> None:
        self._set(error=message)
        self.session.report(message)

    def wait(self, timeout: float = 300.0) -> bool:
        """Block until background builds and per-query computations are done."""
        return self._jobs.wait(timeout)

    def _submit(self, fn, *args, executor=None) -> None:
        if self.background:
            self._jobs.submit(fn, *args, executor=executor)
        else:
            fn(lambda callback: callback(), *args)

    @staticmethod
    def mechanisms() -> list[str]:
        """Registry names of the data-independent mechanisms (the per-query choices)."""
        return dpx.registry.names(data_dependent=False)

    # ------------------------------------------------------------ update
    def update(self, *, urgent: bool = True) -> bool:
        """Bring the outputs up to date with the session; ``False`` if an input was refused.

        Cheap when the strategies for the workload and noise norm are built:
        the stored unit-noise figures are rescaled.  Otherwise starts a
        background comparison (the current outputs stay until it is done).

        ``urgent``: a change the user made (ε, δ, noise, objective), whose
        redraw of a comparison already shown goes before the other pages'
        redraws (:data:`~dpexplorer.ui.redraws.REDRAWS`).  False for a
        background result landing (an optimiser's row), which waits its turn.
        """
        t0 = time.perf_counter()
        with self._lock:
            waited = time.perf_counter() - t0
            if waited > 0.05:
                log.debug("update (ε = %s) waited %.2f s for the page's lock",
                          self.session.epsilon, waited)
            try:
                W = check_workload(self.session.workload, self.max_cells)
                noise = self.session.noise_model()
            except ValueError as exc:
                # the running comparison (if any) is only stored, not shown
                self._token += 1
                self._pending = None
                self._set(busy=False, status="")
                self._fail(_message(exc))
                return False
            key = (W, noise.norm, tuple(dpx.registry.names(private=True)), self.objective)
            base = self._bases.get(key)
            if base is None:
                if self._pending != key:
                    self._start(key, W, noise)
                return True
            self._bases.move_to_end(key)
            # a change to the comparison shown (ε, δ, noise, objective), not the page's first
            # one: redrawn before the redraws waiting for background results (REDRAWS)
            self._urgent = urgent and self._shown is not None
            try:
                self._show(key, base, noise)
            finally:
                self._urgent = False
            if (base.pending and self.auto_optimize and self._opt_pending != key
                    and not SHUTDOWN.is_set()):
                self.run_optimizers()  # e.g. back to a comparison whose optimisers were stopped
            return True

    def _start(self, key, W, noise) -> None:
        self._token += 1
        self._pending = key
        self._cancel = False
        indep = [n for n in key[2] if not dpx.registry.get(n).data_dependent
                 and self._not_built(W, n, noise) is None]
        later = [n for n in indep if dpx.registry.get(n).optimizer
                 and cached_entry(self.cache, W, n, noise) is None]
        self._set(busy=True, progress=0, total=max(1, len(indep) - len(later)),
                  status=f"Building strategies for {W.name} ({W.m:,} queries × {W.n:,} cells)…")
        self._submit(self._compare_job, self._token, key, W, noise, list(key[2]),
                     self.auto_optimize)

    def _not_built(self, W, name: str, noise) -> str | None:
        """Why the data-independent mechanism ``name`` is not built for ``W`` here, or None.

        A big 1D workload's rows that need an ``n × n`` matrix (:func:`too_large`), and
        what the registry's cheap scope check refuses (Eigen-Design under Laplace noise):
        said at once, instead of an optimiser's slot that would end in the same message
        (and a rebuilt chart when its slot went).
        """
        return too_large(W, name, self.max_cells) or dpx.registry.get(name).not_applicable(W, noise)

    def _stopped(self, token) -> bool:
        """Whether the build under ``token`` must stop: superseded, cancelled by the user, or
        its browser tab closed (:meth:`_closed`)."""
        return token != self._token or self._cancel or self._closed()

    def _closed(self) -> bool:
        """Whether the page's browser tab has gone; the page's work then stops (:meth:`stop`).

        A served page whose browser drew it and that has no connection left
        (:func:`~dpexplorer.ui.redraws.no_connection`): its optimisers stop at
        their next progress report and its redraws are dropped at once, not
        when Bokeh ends the session 15-32 s later.  The explorer leaves Panel's
        ``reconnect`` off, so a session that lost its browser never gets one
        back; were one to reconnect, its next change would start the page's
        work again.
        """
        doc = self._doc() if self._doc is not None else None
        if doc is None or not self._loaded.is_set() or not no_connection(doc):
            return False
        if not self._cancel:
            log.debug("the browser tab of a Compare page closed: its work stops")
            self.stop()
        return True

    def _post_status(self, post, token, key=None, **values) -> None:
        """Post ``values`` (status, progress) unless a newer comparison started meanwhile or
        the work it describes is over (posted callbacks are not always run in order): the
        comparison of ``key`` (``busy``) or, without ``key``, the optimisers (``optimizing``).

        At most one status is waiting for the event loop per page and kind (``key`` or
        not): a newer one replaces it, so a busy loop (many sessions) shows the latest
        status once instead of every one a quick series of strategies posted.
        """
        slot = key is None
        with self._queued_guard:
            waiting = slot in self._statuses
            self._statuses[slot] = (token, key, values)
        if waiting:
            return  # the callback already posted applies these values

        def apply():
            with self._queued_guard:
                token, key, values = self._statuses.pop(slot)
            if token != self._token:
                return
            if key is not None and self._pending != key:
                return  # the comparison is already shown
            if key is None and not self.optimizing:
                return  # the optimisers are done
            self._set(**values)
        post(apply)

    def _build_row(self, post, token, W, noise, name, cancellable: bool = True,
                   objective: str = "sum") -> tuple[pd.DataFrame, str | None]:
        """Worker: the :func:`dpexplorer.compare` row of ``name`` (built in session.cache).

        Optimisers report progress to :attr:`optimization`; a superseded build
        (or, when ``cancellable``, one the user cancelled) raises
        :class:`Cancelled` out of here.  Returns the row (``unit_tse`` added)
        and the failure message (None on success).
        """
        cache, mech = self.cache, dpx.registry.get(name)
        serial = next(self._serials)
        progress = self.optimization
        stop = ((lambda: self._stopped(token)) if cancellable else
                (lambda: token != self._token or self._closed()))
        post(lambda: progress.begin(serial, mech.label))
        relay = ProgressRelay(post, lambda *a: progress.update(serial, *a), stop=stop)
        try:
            with dpx.optimization.progress(relay), build_lock(cache, (W, name, noise.norm)):
                if stop():  # stopped while waiting for the lock
                    raise Cancelled(name)
                df = dpx.compare(W, noise, [name], cache=cache, objective=objective)
                params = _params(mech, objective)
                df["unit_tse"] = cache.entry(W, name, noise, params)[1]
                df["unit_max"] = (cache.max_variance(W, name, noise, params)[0]
                                  if objective == "max" else math.nan)
            return df, None
        except Exception as exc:  # noqa: BLE001 - one mechanism failing is reported
            if not isinstance(exc, ValueError):
                log.exception("mechanism %s failed", name)
            return _row(mech, math.nan, f"failed: {_message(exc)}"), f"{mech.label}: {_message(exc)}"
        finally:
            post(lambda: progress.end(serial))

    def _compare_job(self, post, token, key, W, noise, names, auto=True) -> None:
        """Worker: build every strategy (in session.cache), keep the unit-noise figures.

        The optimisers (registry entries flagged ``optimizer``) not built yet come last: the
        comparison of the others is shown first, then -- when ``auto`` -- each
        optimiser's row is added as soon as it is built (:meth:`_optimize_job`),
        so a slow optimiser never holds the page.
        """
        t0 = time.perf_counter()
        if not self._loaded.is_set():  # a first load: the browser fetches the page's scripts
            # from this server's event loop meanwhile, slowed down by a computing thread
            # (measured at n = 1024: first paint 3.3-6.4 s while computing, 1.0-2.0 s after)
            self._loaded.wait(timeout=self.load_wait)
        # where a comparison's time goes (the table's time in a browser varied from 2 to 9 s
        # between runs): logged at DEBUG (DPEXPLORER_LOG_LEVEL=debug, dpexplorer.ui.server)
        timings = {"load wait": time.perf_counter() - t0}
        try:
            cache = self.cache
            indep = [n for n in names if not dpx.registry.get(n).data_dependent]
            dep = [n for n in names if dpx.registry.get(n).data_dependent]
            rows, failures = {}, []
            for name in indep:  # rows not built, with the reason (see _not_built)
                reason = self._not_built(W, name, noise)
                if reason is not None:
                    rows[name] = _row(dpx.registry.get(name), math.nan, reason)
            indep = [n for n in indep if n not in rows]
            later = [n for n in indep if dpx.registry.get(n).optimizer
                     and cached_entry(cache, W, n, noise) is None]
            now = [n for n in indep if n not in later]
            t1 = time.perf_counter()
            with build_lock(cache, ("svdb", W)):
                svdb = cache.svdb(W)
            timings["SVD bound"] = time.perf_counter() - t1
            for i, name in enumerate(now):
                if token != self._token or self._closed():
                    return  # superseded or tab closed: the strategies built so far stay cached
                mech = dpx.registry.get(name)
                self._post_status(post, token, key, progress=i,
                                  status=f"Building {mech.label} ({i + 1}/{len(now)})…")
                t1 = time.perf_counter()
                try:
                    rows[name], failure = self._build_row(post, token, W, noise, name,
                                                          cancellable=False, objective=key[3])
                    timings[name] = time.perf_counter() - t1
                except Cancelled:
                    if token != self._token:
                        return  # superseded (new workload or noise norm)
                    rows[name] = _row(mech, math.nan, CANCELLED)
                    later.append(name)
                    continue
                if failure:
                    failures.append(failure)
            for name in later:
                rows[name] = _row(dpx.registry.get(name), math.nan, OPTIMIZING if auto else NOT_RUN)
            frames = [rows[n] for n in names if n in rows]
            if dep:
                try:
                    df = dpx.compare(W, noise, dep, cache=cache, objective=key[3])
                    order = {n: i for i, n in enumerate(dep)}
                    df = df.sort_values("mechanism", key=lambda s: s.map(order), kind="stable")
                    df["unit_tse"] = df["unit_max"] = math.nan
                    frames.append(df)
                except Exception as exc:  # noqa: BLE001
                    failures.append(f"data-dependent mechanisms: {_message(exc)}")
            frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
            if len(frame):  # registry order, as dpx.compare before its (stable) sort
                order = {n: i for i, n in enumerate(names)}
                frame = frame.sort_values("mechanism", key=lambda s: s.map(order),
                                          kind="stable").reset_index(drop=True)
            base = _Base(W, noise.norm, frame, svdb, failures, later, key[3])
        except Exception as exc:  # noqa: BLE001 - e.g. the SVD bound failing
            log.exception("comparison failed")
            message = _message(exc)  # `exc` is unbound once the except block ends
            post(lambda: self._job_failed(token, key, message))
            return
        run = (auto and bool(later) and token == self._token and not self._cancel
               and not base.failed)
        timings["total"] = time.perf_counter() - t0
        log.debug("comparison of %s (n = %d) built: %s", W.name, W.n,
                  ", ".join(f"{k} {v:.2f} s" for k, v in timings.items()))
        posted = time.perf_counter()

        def done():
            log.debug("comparison of %s shown %.2f s after it was built", W.name,
                      time.perf_counter() - posted)
            self._job_done(token, key, base, running=run)
        post(done)
        if run:  # then the optimisers, the table already shown (a thread that only waits)
            self._submit(self._optimize_after_load, token, key, base, noise, list(later),
                         executor=OPTIMIZER_THREADS)

    def _optimize_after_load(self, post, token, key, base: _Base, noise, names) -> None:
        """Worker: :meth:`_optimize_job`, once the browser has drawn the page (first load)."""
        if not self._loaded.is_set():
            self._loaded.wait(timeout=self.load_wait)
            time.sleep(self._grace)
        t0 = time.perf_counter()
        log.debug("optimisers of %s start: %s", base.W.name, ", ".join(names))
        self._optimize_job(post, token, key, base, noise, names)
        log.debug("optimisers of %s done in %.2f s", base.W.name, time.perf_counter() - t0)

    def _job_failed(self, token, key, message) -> None:
        if self._pending == key:
            self._pending = None
        if token == self._token:
            self._set(busy=False, status="")
            self._fail(f"Comparison failed: {message}")

    def _job_done(self, token, key, base: _Base, running: bool = False) -> None:
        if self._pending == key:
            self._pending = None
        self._bases[key] = base
        while len(self._bases) > self.keep:
            self._bases.popitem(last=False)
        if running:
            self._opt_pending = key
        if token != self._token:
            return
        self._set(busy=False, progress=self.total, status="",
                  **({"optimizing": True} if running else {}))
        if base.failures:
            self._fail("Every mechanism failed, showing the last result: "
                       + "; ".join(base.failures) if base.failed else
                       "Some mechanisms failed (showing the others): " + "; ".join(base.failures))
        self.update()

    def _show(self, key, base: _Base, noise) -> None:
        """Outputs for ``base`` at ``noise``: pure arithmetic on stored unit figures."""
        if base.failed:  # every mechanism raised: keep the last good results
            return
        W = base.W
        table = scale_comparison(base.frame, noise, base.svdb, W.m, n=W.n,
                                 workload=W.name, objective=base.objective)
        running = base.frame["mechanism"][base.frame["note"] == OPTIMIZING]
        curve = rmse_curve(base.frame, noise, base.svdb, W.m, EPS_GRID, running)
        self._shown = key
        running = self._opt_pending == key
        values = dict(table=table, curve=curve, pending=[] if running else list(base.pending))
        if not base.failures:
            values["error"] = ""
        self._set(**values)
        self.accuracy_first.refresh(base, noise)
        self._refresh_per_query()

    # -------------------------------------------------------- optimisers
    def run_optimizers(self) -> bool:
        """Build the optimisers left out of the shown comparison (:attr:`pending`).

        Runs in the background with progress in :attr:`optimization`; the
        table keeps showing the other mechanisms, and each optimiser's row
        appears when it is built.  ``False`` (and a message) when there is no
        comparison to complete.
        """
        with self._lock:
            key = self._shown
            base = self._bases.get(key) if key is not None else None
            if base is None:
                if self._pending is not None:
                    return True  # the comparison being built runs them (auto_optimize)
                self._fail("Optimisers not run: there is no comparison yet")
                return False
            if not base.pending or self._opt_pending == key or self._pending is not None:
                return True  # nothing to run, already running, or a comparison is starting
            try:
                noise = self.session.noise_model()
            except ValueError as exc:
                self._fail(_message(exc))
                return False
            if noise.norm != base.norm:
                return True  # the comparison for the other norm is being built
            self._cancel = False
            self._opt_pending = key
            frame = base.frame.copy()
            frame.loc[frame["mechanism"].isin(base.pending), "note"] = OPTIMIZING
            base = self._bases[key] = _Base(base.W, base.norm, frame, base.svdb,
                                            list(base.failures), list(base.pending),
                                            base.objective)
            self._set(optimizing=True, pending=[],
                      status=f"Running {len(base.pending)} optimiser(s)…")
            self._show(key, base, noise)
            self._submit(self._optimize_job, self._token, key, base, noise, list(base.pending),
                         executor=OPTIMIZER_THREADS)
            return True

    def _session_destroyed(self, _context) -> None:
        try:
            self.stop()
        finally:  # its redraws are dropped (the queue also notices a closed session itself)
            REDRAWS.forget(self)

    def stop(self) -> None:
        """Stop all background work of the page (its session ended): nothing more is shown."""
        self._token += 1
        self._cancel = True
        self._loaded.set()

    def cancel(self) -> None:
        """Stop the optimisation that is running; the optimisers not built stay pending.

        Also unticks :attr:`auto_optimize`, so that they are not started again
        by the next change; 'Run optimisers' (:meth:`run_optimizers`) builds them.
        """
        self._cancel = True
        if self.auto_optimize:
            self.auto_optimize = False

    def _optimize_job(self, post, token, key, base: _Base, noise, names) -> None:
        """Worker: build the pending optimisers of ``base``, adding each row when it is built."""
        done, failures, final_failure = {}, list(base.failures), None
        last, unreported = time.monotonic(), []

        def merged(pending):
            old = base.frame
            frame = pd.concat([done[m].reindex(columns=old.columns) if m in done
                               else old.iloc[[i]] for i, m in enumerate(old["mechanism"])],
                              ignore_index=True)
            return _Base(base.W, base.norm, frame, base.svdb, list(failures), pending,
                         base.objective)

        try:
            for i, name in enumerate(names):
                if self._stopped(token):
                    break
                mech = dpx.registry.get(name)
                self._post_status(post, token, status=(
                    f"Optimising {mech.label} ({i + 1}/{len(names)}); the table shows the "
                    f"other mechanisms meanwhile"))
                try:
                    done[name], failure = self._build_row(post, token, base.W, noise, name,
                                                          objective=key[3])
                except Cancelled:
                    break
                if failure:
                    failures.append(failure)
                    unreported.append(failure)
                if i + 1 < len(names):  # show the rows built so far, the others still running
                    if time.monotonic() - last >= self.merge_interval:
                        step, message = merged([n for n in names if n not in done]), \
                            "; ".join(unreported) or None
                        post(lambda step=step, message=message: self._merge(
                            token, key, step, message, final=False))
                        last, unreported = time.monotonic(), []
                else:
                    final_failure = "; ".join(unreported) or None  # with the final merge
            rest = [n for n in names if n not in done]
            if rest:
                final_failure = "; ".join(unreported) or None
            for name in rest:
                done[name] = _row(dpx.registry.get(name), math.nan,
                                  CANCELLED if token == self._token else NOT_RUN)
            final = merged(rest)
        except Exception as exc:  # noqa: BLE001 - never a traceback in the page
            log.exception("running the optimisers failed")
            final, final_failure = None, f"Optimisers failed: {_message(exc)}"
        post(lambda: self._merge(token, key, final, final_failure, final=True))

    def _merge(self, token, key, base: _Base | None, failure: str | None, final: bool) -> None:
        """Store (and show) a comparison with more optimisers built."""
        if final and self._opt_pending == key:
            self._opt_pending = None
        if base is not None and key in self._bases:
            self._bases[key] = base
        if final and self._opt_pending is None:  # (another comparison's optimisers may run)
            self._set(optimizing=False, **({} if self.busy else {"status": ""}))
        if token != self._token:
            return
        if failure:
            self._fail(failure if base is None else
                       f"Some mechanisms failed (showing the others): {failure}")
        self.update(urgent=False)  # a background result: other pages' redraws go first

    # --------------------------------------------------------- per query
    def _refresh_per_query(self) -> None:
        with self._lock:
            if self._shown is None:
                return
            W, norm = self._shown[0], self._shown[1]
            name = self.mechanism
            if name not in self.mechanisms():
                self._set(per_query=None, per_query_note=f"{name!r} is not a data-independent "
                          f"mechanism; choose one of {self.mechanisms()}")
                return
            try:
                noise = self.session.noise_model()
            except ValueError:
                return  # reported by update()
            if noise.norm != norm:
                return  # the comparison for this norm is being built
            base = self._bases.get(self._shown)
            if base is not None and name in base.pending:
                label = dpx.registry.get(name).label
                self._set(per_query=None, per_query_note=(
                    f"{label} is being optimised: its per-query errors follow when it is built"
                    if self._opt_pending == self._shown else
                    f"{label} has not been built for this workload yet: run the optimisers first"))
                return
            reason = self._not_built(W, name, noise)
            if reason is not None:
                self._set(per_query=None, per_query_note=f"{dpx.registry.get(name).label}: {reason}")
                return
            mech = dpx.registry.get(name)
            pkey = (W, name, norm, self._shown[3] if "objective" in mech.params else "sum")
            pq = self._pq.get(pkey)
            if pq is None:
                if self._pq_pending != pkey:
                    self._pq_pending = pkey
                    self._set(per_query_busy=True)
                    self._submit(self._per_query_job, pkey, noise)
                return
            self._pq.move_to_end(pkey)
            if pq.unit_std is None:
                self._set(per_query=None, per_query_note=pq.note)
                return
            view = (pkey, noise.label, id(pq))
            if view == self._pq_view and self.per_query is not None:
                return  # already shown (e.g. an optimiser's row came in): nothing to redraw
            self._pq_view = view
            std = noise.std_per_unit
            data = {"query": np.arange(pq.size), "rmse": std * pq.unit_std}
            if pq.lengths is not None:
                data["length"] = pq.lengths
            df = pd.DataFrame(data, copy=False)
            df.attrs.update(mechanism=name, label=dpx.registry.get(name).label,
                            noise=noise.label, workload=W.name, workload_id=id(W), norm=norm)
            if pq.length_values is not None:
                df.attrs["mean_by_length"] = pd.Series(std * pq.length_means,
                                                       index=pq.length_values, name="rmse")
            self._set(per_query=df, per_query_note="")

    def _per_query_job(self, post, pkey, noise) -> None:
        W, name, _, objective = pkey
        try:
            if W.m > self.max_per_query_rows:
                pq = _PerQuery(None, None, f"{W.m:,} queries: too many to compute the error of "
                               f"each (at most {self.max_per_query_rows:,})")
            else:
                with build_lock(self.cache, (W, name, noise.norm)):
                    A, _, _, note = self.cache.entry(
                        W, name, noise, _params(dpx.registry.get(name), objective))
                if A is None:
                    pq = _PerQuery(None, None, f"{dpx.registry.get(name).label} does not apply "
                                   f"to this workload: {note}")
                else:
                    var = dpx.error.per_query_variance(W, A, noise)
                    pq = _PerQuery(np.sqrt(var / noise.variance_per_unit))
                    if callable(getattr(W, "lengths", None)):
                        same = [p for (w, _, _, _), p in list(self._pq.items())
                                if w is W and p.lengths is not None]
                        pq.lengths = same[0].lengths if same else np.asarray(W.lengths())
                        values, inverse, counts = np.unique(pq.lengths, return_inverse=True,
                                                            return_counts=True)
                        pq.length_values = values
                        pq.length_means = np.bincount(inverse, pq.unit_std) / counts
        except Exception as exc:  # noqa: BLE001 - shown as a note, never a traceback
            if not isinstance(exc, ValueError):
                log.exception("per-query error failed")
            pq = _PerQuery(None, None, f"Per-query error unavailable: {_message(exc)}")

        def done():
            if self._pq_pending == pkey:
                self._pq_pending = None
            self._pq[pkey] = pq
            while len(self._pq) > 1 and (len(self._pq) > self.keep or sum(
                    p.size for p in self._pq.values()) > self.max_cached_queries):
                self._pq.popitem(last=False)
            self._set(per_query_busy=False)
            self._refresh_per_query()
        post(done)

    # ----------------------------------------------------------- charts
    # Every chart is a function of its data alone (a DataFrame), so that the
    # page can feed new numbers to a live plot (hv.streams.Pipe) when only ε
    # or δ changed, instead of rebuilding the Bokeh figure.
    def bars(self, df: pd.DataFrame | None = None) -> hv.Overlay:
        """Bars of the analytic RMSE (log y) with the SVD bound line."""
        df = (self.table if self.table is not None else _empty_table()) if df is None else df
        a = df.attrs
        # short enough for the plot's width; the workload's name is in the summary above
        title = (f"RMSE per query: {a.get('m', 0):,} queries over n = {a.get('n', 0):,} cells"
                 if a.get("m") else "No result yet")
        if not df["rmse"].notna().any():
            return hv.Overlay([hv.Text(0.5, 0.5, "Computing…" if self.busy else "No result yet")
                               .opts(xaxis=None, yaxis=None, responsive=True, height=360,
                                     shared_axes=False, toolbar=None)])
        running = df.loc[df["note"] == OPTIMIZING, "label"] if "note" in df else []
        if "max_std" in df and df["max_std"].notna().any():
            # objective "max": bars of the worst query's std (the SVD bound bounds the RMSE only)
            worst = df.assign(rmse=df["max_std"])
            worst.attrs = dict(df.attrs, svd_bound=math.nan)
            title = title.replace("RMSE per query", "Largest per-query std")
            return rmse_chart(worst, title, slots=list(running)).opts(
                shared_axes=False, ylabel="worst query's std (counts)")
        return rmse_chart(df, title, slots=list(running)).opts(shared_axes=False)

    def curve_plot(self, df: pd.DataFrame | None = None) -> hv.Overlay:
        """RMSE over ε (log x, log y) per mechanism, the SVD bound dashed, the session's ε marked."""
        df = self.curve if df is None else df
        if df is None or df.empty:
            return hv.Overlay([hv.Curve([], "epsilon", "rmse")])
        eps = df.attrs.get("epsilon", self.session.epsilon)
        # the curves are drawn over the fixed ε grid, so that an ε change leaves them as they
        # are (and an optimiser's curve filling in changes only its own): each curve element
        # is kept while its numbers stay the same, and HoloViews sends only what changed
        grid = df[df["epsilon"].isin(EPS_GRID)]
        kept, elems = self._curve_layers, []
        for mech, part in grid.groupby("mechanism", sort=False):
            key = (part["label"].iloc[0], part["rmse"].to_numpy(dtype=float).tobytes())
            c = kept.get(mech, (None, None))
            if c[0] != key:
                curve = hv.Curve(part, hv.Dimension("epsilon", label="ε"),
                                 [hv.Dimension("rmse", label="RMSE (counts)")],
                                 label=key[0]).opts(
                    logx=True, logy=True, tools=["hover"], line_width=2, framewise=True)
                if mech == "svd_bound":
                    curve = curve.opts(color="#d62728", line_dash="dashed")
                c = (key, curve)
            elems.append((mech, c))
        self._curve_layers = dict(elems)
        now = df[df["epsilon"] == eps]
        marker = hv.Scatter(now, "epsilon", ["rmse", "label"], label="current ε").opts(
            color="black", size=7, tools=["hover"], framewise=True)
        layers = [c[1] for _, c in elems]
        # explicit limits: with live updates the axes must follow every frame
        return hv.Overlay([*layers, marker, hv.VLine(eps).opts(color="gray", line_width=1)]).opts(
            responsive=True, height=380, legend_position="right", logx=True, logy=True,
            shared_axes=False, ylim=_limits(df["rmse"], log=True),
            xlim=_limits(df["epsilon"], log=True, pad=1.2),
            title="Privacy–accuracy: RMSE over ε (the current ε is marked)")

    def per_query_sample(self, df: pd.DataFrame | None = None) -> pd.DataFrame:
        """The rows of ``per_query`` that are drawn (at most ``max_points``, evenly spaced)."""
        df = self.per_query if df is None else df
        if df is None:
            return pd.DataFrame({"query": [], "rmse": [], "length": []})
        out = df.iloc[_sample(len(df), self.max_points)]
        out.attrs = dict(df.attrs, total=len(df))
        return out

    def per_query_plot(self, sample: pd.DataFrame | None = None) -> hv.Scatter:
        """Per-query RMSE against the query index (hv.Scatter)."""
        s = self.per_query_sample() if sample is None else sample
        a = s.attrs
        note = f" ({len(s):,} of {a['total']:,} queries drawn)" if a.get("total", 0) > len(s) else ""
        return hv.Scatter(s, hv.Dimension("query", label="query index"),
                          [hv.Dimension("rmse", label="RMSE (counts)")]).opts(
            responsive=True, height=320, size=3, alpha=0.6, tools=["hover"], framewise=True,
            shared_axes=False, ylim=_limits(s["rmse"]), xlim=_limits(s["query"], pad=0),
            title=f"{a.get('label', '')}: per-query RMSE{note}")

    def length_plot(self, sample: pd.DataFrame | None = None) -> hv.Overlay:
        """Per-query RMSE against the range length, with the mean per length (range workloads)."""
        s = self.per_query_sample() if sample is None else sample
        a = s.attrs
        if "length" not in s or not len(s):
            return (hv.Scatter([], "length", "rmse") * hv.Curve([], "length", "rmse"))
        mean = a.get("mean_by_length")
        if mean is None:
            mean = s.groupby("length", sort=True)["rmse"].mean()
        note = f" ({len(s):,} of {a['total']:,} queries drawn)" if a.get("total", 0) > len(s) else ""
        return (hv.Scatter(s, hv.Dimension("length", label="range length"),
                           [hv.Dimension("rmse", label="RMSE (counts)"), "query"]).opts(
                    size=3, alpha=0.4, tools=["hover"], framewise=True)
                * hv.Curve((mean.index.to_numpy(), mean.to_numpy()), "length", "rmse",
                           label="mean over ranges of this length").opts(
                    color="black", line_width=2, framewise=True)).opts(
            responsive=True, height=320, legend_position="top_left", shared_axes=False,
            ylim=_limits(s["rmse"]), xlim=_limits(s["length"], pad=0),
            title=f"{a.get('label', '')}: per-query RMSE by range length{note}")

    # --------------------------------------------------------------- UI
    def _summary(self) -> str:
        df = self.table
        if df is None:
            return "No result yet." if not self.busy else "Computing the first comparison…"
        best = df.dropna(subset=["rmse"])
        bound = self.svd_bound
        text = (f"**Workload** `{df.attrs.get('workload', '')}`: {df.attrs.get('m', 0):,} "
                f"queries over n = {df.attrs.get('n', 0):,} cells; **noise** "
                f"{df.attrs.get('noise', '')}; **SVD bound** " +
                (f"{bound:.4g}" if math.isfinite(bound) else
                 "not computable for this workload (it needs a dense n × n Gram matrix; "
                 "single Kronecker products and marginal workloads have closed forms)"))
        if "max_std" in df:
            worst = df.dropna(subset=["max_std"])
            if len(worst):
                text += (f"; **best worst-query std** {worst['label'].iloc[0]} "
                         f"({worst['max_std'].iloc[0]:.4g}, RMSE {worst['rmse'].iloc[0]:.4g})")
        elif len(best):
            ratio = best["ratio"].iloc[0]
            text += (f"; **best** {best['label'].iloc[0]} (RMSE {best['rmse'].iloc[0]:.4g}"
                     + (f", {ratio:.2f}× the bound)" if math.isfinite(ratio) else ")"))
        analytic = df[~df["data_dependent"].astype(bool)] if "data_dependent" in df else df
        skipped = analytic[analytic["rmse"].isna() & ~analytic["mechanism"].isin(self.pending)
                           & (analytic["note"] != OPTIMIZING)]
        if len(skipped):
            text += "\n\n**No analytic error:** " + "; ".join(
                f"{r.label} — {r.note}" for r in skipped.itertuples())
        running = analytic[analytic["note"] == OPTIMIZING]
        if len(running):
            text += ("\n\n**Optimising** (rows fill in when built): "
                     + ", ".join(running["label"]) + ".")
        if self.pending:
            labels = ", ".join(dpx.registry.get(n).label for n in self.pending
                               if n in dpx.registry.REGISTRY)
            text += f"\n\n**Optimisers not run yet:** {labels}."
        return text

    def _table_value(self) -> pd.DataFrame:
        df = self.table if self.table is not None else _empty_table()
        if "max_std" in df:  # the worst query's std beside the RMSE (objective "max")
            return df[PAGE_COLUMNS[:2] + ["max_std"] + PAGE_COLUMNS[2:]]
        return df[PAGE_COLUMNS]

    def _pq_sample_with_means(self) -> pd.DataFrame:
        s = self.per_query_sample()
        df = self.per_query
        if df is not None and "length" in df and "mean_by_length" not in s.attrs:
            s.attrs["mean_by_length"] = df.groupby("length", sort=True)["rmse"].mean()
        return s

    def panel(self) -> pn.Column:
        """The page's layout (built once; outputs update it in place)."""
        if "root" in self._panes:
            return self._panes["root"]
        # widgets follow the page's state through the gate: nothing changes while hidden
        shown = self.gate.mirror(self, ["progress", "total", "busy", "status", "pending",
                                        "optimizing", "per_query_note", "per_query_busy"])
        # Busy shown by styles (hidden bar, dimmed results), not by `visible` or `loading`:
        # in the browser, every change of a layout's `visible` or CSS classes re-lays out the
        # whole page (Bokeh 3.9 `invalidate_layout`, 0.1-0.2 s each with the Compare page's
        # figures, measured in headless chromium), a style change does not
        progress = pn.indicators.Progress(
            value=shown.param.progress, max=shown.param.total,
            styles=pn.bind(_hidden_unless, shown.param.busy),
            bar_color="primary", sizing_mode="stretch_width", height=20)
        status = pn.pane.Markdown(shown.param.status, sizing_mode="stretch_width")
        # shown for the whole optimiser run, not hidden and shown again between optimisers
        optimizing = self.optimization.panel(cancel=self.cancel, gate=self.gate,
                                             visible=shown.param.optimizing)
        objective = pn.widgets.RadioButtonGroup.from_param(
            self.param.objective, options={"Total error (RMSE)": "sum", "Worst query (max std)": "max"})
        objective_note = pn.pane.Markdown(OBJECTIVE_NOTE, sizing_mode="stretch_width",
                                          styles={"font-size": "90%"})
        auto = pn.widgets.Checkbox.from_param(
            self.param.auto_optimize, **{_LABEL: "Run optimisers automatically (HDMM, "
                                         "Eigen-Design, …: slower)"})
        run = pn.widgets.Button(
            **{_LABEL: "Run optimisers"}, **{_COLOR: "primary"}, width=200,
            visible=pn.bind(bool, shown.param.pending),
            disabled=pn.bind(lambda b, o: b or o, shown.param.busy, shown.param.optimizing))
        run.on_click(lambda e: self.run_optimizers())
        summary = pn.pane.Markdown(self._summary(), sizing_mode="stretch_width")
        # the state the widgets are built from: a result landing while they are built (before
        # the watchers below exist) is drawn by the catch-up redraw after them
        built_from = (self.table, self.curve, self.per_query)
        bars = LivePlot(self.bars, self.table if self.table is not None else _empty_table(),
                        self._plot_key(), height=380)
        curve = LivePlot(self.curve_plot, self.curve, self._plot_key(), height=400)
        table = comparison_table(self._table_value())
        # The table joins the page with its first rows, not empty before them: Panel 1.9's
        # Tabulator drops a data update that reaches the browser while the table is still
        # initialising (asynchronously, after the page's first render), and the first
        # comparison lands in that window, so the table stayed empty until the next update
        # (the first optimiser's row, seconds later: the Compare table's time in a browser)
        table_slot = pn.Column(*([table] if len(table.value) else []),
                               sizing_mode="stretch_width")
        options = {dpx.registry.get(n).label: n for n in self.mechanisms()}
        select = pn.widgets.Select(options=options, value=self.mechanism, width=220,
                                   **{_LABEL: "Mechanism"})
        select.link(self, value="mechanism", bidirectional=True)
        pq_note = pn.pane.Alert(shown.param.per_query_note, alert_type="info",
                                visible=pn.bind(bool, shown.param.per_query_note),
                                sizing_mode="stretch_width")
        sample = self._pq_sample_with_means()
        pq_key = self._pq_view_key()
        by_index = LivePlot(self.per_query_plot, sample, pq_key, height=340)
        by_length = LivePlot(self.length_plot, sample, pq_key, height=340)
        # visibility toggles on wrapping Columns: toggling a rendered HoloViews pane's own
        # `visible` raises in Panel 1.9 (its Bokeh stylesheets are re-validated as strings)
        index_box = pn.Column(by_index.pane, visible=len(sample) > 0,
                              sizing_mode="stretch_width")
        length_box = pn.Column(by_length.pane, visible="length" in sample and len(sample) > 0,
                               sizing_mode="stretch_width")
        self._panes.update(summary=summary, bars=bars, table=table, curve=curve,
                           select=select, by_index=by_index, by_length=by_length,
                           index_box=index_box, length_box=length_box,
                           optimizing=optimizing, auto=auto, run=run)

        def on_results(*_):
            # no pn.io.hold here: a live plot replaced (new key) and updated in one held
            # message left the browser a dangling model reference ('reference … isn't known')
            options = {dpx.registry.get(n).label: n for n in self.mechanisms()}
            if options != select.options:  # mechanisms registered since
                select.options = options
            drawn = False
            if len(table_slot) and not self._later("figures", on_figures):
                on_figures()  # the figures' numbers reach the browser before the table's
                drawn = True
            summary.object = self._summary()
            value = self._table_value()
            patch = table_patch(table.value, value)
            if patch is None:
                table.value = value
            elif patch:
                table.patch(patch)
            if len(table.value) and not len(table_slot):
                table_slot.objects = [table]  # placed once it has rows (see table_slot)
                self._figures_wait()
            if not drawn and not self._later("figures", on_figures):
                on_figures()

        def on_figures(*_):
            self._draw_each("figures", [(bars, lambda: self.table, self._plot_key),
                                        (curve, lambda: self.curve, self._plot_key)])

        def on_per_query(*_):
            if self._later("per_query", on_per_query):
                return
            s = self._pq_sample_with_means()
            self._draw_each("per_query", [(by_index, lambda: s, self._pq_view_key),
                                          (by_length, lambda: s, self._pq_view_key)])
            index_box.visible = len(s) > 0
            length_box.visible = "length" in s and len(s) > 0
        # a hidden page keeps its redraws until shown (dpexplorer.ui.shown)
        self.param.watch(lambda *_: self._redraw("results", on_results), ["table", "curve"])
        self.param.watch(lambda *_: self._redraw("per_query", on_per_query), "per_query")
        if self.table is not built_from[0] or self.curve is not built_from[1]:
            self._redraw("results", on_results)
        if self.per_query is not built_from[2]:
            self._redraw("per_query", on_per_query)

        # a download control (PNG, SVG, CSV) under every figure, made from the shown numbers
        self.exports: dict = {}

        def export(name, make):
            return FigureExport("compare", name, make, report=self.session.report,
                                into=self.exports)
        results = pn.Column(summary, bars.pane, export("rmse-bars", self.bars), table_slot,
                            styles=pn.bind(_dimmed_if, shown.param.busy),
                            sizing_mode="stretch_width")
        first = self.accuracy_first
        target_shown = self.gate.mirror(first, ["busy", "mode"])
        t_summary = pn.pane.Markdown(first.summary(), sizing_mode="stretch_width")
        t_bars = LivePlot(epsilon_bars, first.table, self._target_key(), height=380)
        t_table = first.table_widget()
        t_curve = LivePlot(target_curve_plot, first.curve, self._target_key(), height=400)
        self._panes.update(target_summary=t_summary, target_bars=t_bars, target_table=t_table,
                           target_curve=t_curve)

        def on_target(*_):
            t_summary.object = first.summary()
            t_table.value = first.table_value()
            key = self._target_key()
            t_bars.update(first.table, key)
            t_curve.update(first.curve, key)
        first.param.watch(lambda *_: self._redraw("target", on_target),
                          ["table", "curve", "busy"])
        by_epsilon = pn.Column(t_summary, t_bars.pane,
                               export("epsilon-bars", lambda: epsilon_bars(first.table)), t_table,
                               first.simulation_panel(),
                               loading=target_shown.param.busy,
                           visible=first.mode == "epsilon", sizing_mode="stretch_width")
        results.visible = first.mode == "error"

        def switch(e):
            results.visible = e.new == "error"
            by_epsilon.visible = target_curve_box.visible = e.new == "epsilon"
            accuracy_box.visible = e.new == "error"
        target_shown.param.watch(switch, "mode")
        per_query = pn.Column(
            pn.pane.Markdown("### Per-query error\nStandard error of every workload answer "
                             "for the chosen mechanism (it depends on the query, not on the "
                             "data)."),
            select, pq_note, index_box, length_box,
            styles=pn.bind(_dimmed_if, shown.param.per_query_busy), sizing_mode="stretch_width")
        index_box.append(export("per-query",
                                lambda: self.per_query_plot(self._pq_sample_with_means())))
        length_box.append(export("per-query-by-length",
                                 lambda: self.length_plot(self._pq_sample_with_means())))
        accuracy_box = pn.Column(curve.pane, export("privacy-accuracy", self.curve_plot),
                                 visible=first.mode == "error", sizing_mode="stretch_width")
        target_curve_box = pn.Column(t_curve.pane,
                                     export("target-curve", lambda: target_curve_plot(first.curve)),
                                     visible=first.mode == "epsilon", sizing_mode="stretch_width")
        accuracy = pn.Column(
            pn.pane.Markdown("### Privacy–accuracy\nThe error of each mechanism as ε varies "
                             "(same strategies: the error scales with the noise's standard "
                             "deviation, 1/ε for Laplace)."),
            accuracy_box, target_curve_box, styles=pn.bind(_dimmed_if, shown.param.busy),
            sizing_mode="stretch_width")
        root = pn.Column(pn.pane.Markdown(PAGE_HEADER, sizing_mode="stretch_width"),
                         first.controls(),
                         pn.Row(objective, objective_note, sizing_mode="stretch_width"),
                         pn.Row(auto, run, sizing_mode="stretch_width"),
                         progress, status, optimizing, results, by_epsilon, per_query, accuracy,
                         sizing_mode="stretch_width")
        self._panes["root"] = root
        return root

    def _redraw(self, key: str, fn) -> None:
        """Run the redraw ``fn`` (it reads the page's current state) once the page is shown.

        In a server session the redraws run on the session's event loop, one per
        turn, in the order they were asked, each in a
        :func:`~dpexplorer.ui.redraws.models_batch`: a HoloViews redraw
        freezes the document's model index, and Bokeh walks the document's
        models once at the end instead of once per plot; a redraw that only
        copies numbers into the drawn figures
        (:class:`~dpexplorer.ui.live_plot.LivePlot`) and patches the table
        walks nothing.  A redraw of a ``key`` already waiting replaces it: both
        read the latest state.  The server's loop takes the pages' redraws one
        at a time, those of a user's own change first
        (:data:`dpexplorer.ui.redraws.REDRAWS`), so a page drawing its first
        figures holds the loop for one redraw, not for all of them.
        """
        self.gate.run(key, lambda: self._on_loop(key, fn))

    def _draw_each(self, name: str, charts) -> None:
        """Update the live plots ``charts``, one HoloViews redraw per turn of the server's loop.

        ``charts``: ``[(plot, data, key), ...]``, a :class:`LivePlot` with two
        callables reading the page's current state: ``data()`` what the plot
        draws, ``key()`` its structure (see :meth:`LivePlot.update`).

        Updates that only copy numbers (an ε change) are done at once; of those that
        need HoloViews (a first draw, a new structure), the first is done now and
        each other one is its own redraw (``name:i``), reading the page's state when
        it runs.  A HoloViews figure takes 0.1-0.3 s on a quiet machine and several
        times that with eight sessions drawing (issue 14), and another user's ε
        change waits for whatever the loop is running.  Outside a server every
        redraw runs at once, as before.
        """
        drawn = False
        for i, (plot, data, key) in enumerate(charts):
            if plot.copy(data(), key()):
                continue
            if not drawn:
                drawn = True
                plot.update(data(), key(), copy=False)
            else:
                self._redraw(f"{name}:{i}", lambda plot=plot, data=data, key=key:
                             plot.update(data(), key()))

    def _figures_wait(self) -> None:
        """The table has just joined a served page: its first figures wait (:meth:`_later`)."""
        if served_document() is not None and self.first_figures_delay > 0:
            self._figures_after = time.monotonic() + self.first_figures_delay

    def _later(self, key: str, fn) -> bool:
        """Put off the redraw ``fn`` until :attr:`first_figures_delay` after the table's first rows.

        Only the page's first figures wait (the window opened by :meth:`_figures_wait` when
        the table joins a served page): ``True`` when ``fn`` was put off, and it is then
        requested again (:meth:`_redraw`, reading the page's state then) when the time comes.
        """
        after = self._figures_after
        if after is None:
            return False
        wait = after - time.monotonic()
        if wait <= 0:
            self._figures_after = None
            return False
        doc = served_document()
        if doc is None:
            return False
        if key not in self._figures_timer:
            self._figures_timer.add(key)

            def due():
                self._figures_timer.discard(key)
                with set_curdoc(doc):
                    self._redraw(key, fn)
            doc.add_timeout_callback(due, int(wait * 1000) + 1)
        return True

    def _on_loop(self, key: str, fn) -> None:
        doc = served_document()
        if doc is None:
            fn()  # a notebook, a script, a test: at once
            return
        urgent = self._urgent
        with self._queued_guard:
            self._queued.pop(key, None)
            self._queued[key] = fn
        posted = time.perf_counter()

        def run():
            # the page's redraws one per turn on the loop (the oldest first): a page drawing
            # its first four figures holds the loop for one redraw at a time, and another
            # user's ε change goes in between (issue 14: no session's work may hold another's
            # ε change for more than 1 s; the first figures took 0.6-4 s in one turn)
            with self._queued_guard:
                if not self._queued:  # an earlier run took them
                    return
                if self._closed():  # nobody to see them
                    self._queued.clear()
                    return
                key = next(iter(self._queued))
                todo = {key: self._queued.pop(key)}
                more = bool(self._queued)
            # not under the page's lock: a worker holding it would hold every session's loop
            t0 = time.perf_counter()
            with models_batch(doc):
                run_redraws(todo)
            log.debug("redraws %s%s done on the event loop in %.2f s, %.2f s after they were "
                      "posted (%d other pages waiting)", key,
                      " (urgent)" if urgent else "", time.perf_counter() - t0, t0 - posted,
                      REDRAWS.pending())
            if more:  # the next waits its turn (a user's own change: before other pages')
                REDRAWS.submit(self, doc, run, urgent=urgent)
        # one page's redraw at a time on the server's loop, the user's own changes first (a
        # redraw of this page already waiting is replaced in its place, or moved to the front
        # if urgent; submitted every time, so that no lost run can hold this page's redraws)
        REDRAWS.submit(self, doc, run, urgent=urgent)

    def _plot_key(self):
        """What fixes the structure of the bars and curve plots: the comparison and its bars.

        Optimisers still running keep a slot (a label without a bar, a curve
        without points), so their results update the plots in place.
        """
        if self._shown is None or self.table is None:
            return None
        t = self.table
        drawn = t["mechanism"][t["rmse"].notna() | (t["note"] == OPTIMIZING)]
        return (self._shown, tuple(sorted(drawn)))

    def _target_key(self):
        """What fixes the structure of the target charts: the comparison, metric and mechanisms."""
        t = self.accuracy_first.table
        if self._shown is None or t is None:
            return None
        drawn = t["mechanism"][np.isfinite(t["epsilon"].to_numpy(dtype=float))]
        return (self._shown, t.attrs.get("metric"), tuple(sorted(drawn)))

    def _pq_view_key(self):
        df = self.per_query
        if df is None:
            return None
        return (df.attrs.get("workload_id"), df.attrs.get("mechanism"), df.attrs.get("norm"))

    def __panel__(self):
        return self.panel()


def _params(mech, objective: str) -> dict:
    """The builder parameters of ``mech`` for ``objective`` (as :func:`dpexplorer.compare` passes them)."""
    return {"objective": objective} if "objective" in mech.params else {}


def _row(mech, unit_tse: float, note: str) -> pd.DataFrame:
    """A :func:`dpexplorer.compare` row without an analytic error (failed, not run, ...)."""
    return pd.DataFrame([{
        "mechanism": mech.name, "label": mech.label, "rmse": math.nan, "kind": "analytic",
        "ratio": math.nan, "seconds": math.nan, "rows": math.nan, "sensitivity": math.nan,
        "data_dependent": False, "description": mech.description, "source": mech.source,
        "note": note, "unit_tse": unit_tse, "unit_max": math.nan}])


def table_patch(old: pd.DataFrame | None, new: pd.DataFrame) -> dict | None:
    """The cells of ``old`` to change to make it ``new``, as ``Tabulator.patch`` takes them.

    ``old``, ``new``: comparison tables, ``(mechanisms, columns)`` (numbers in counts).
    Returns ``{column: [(index, value), ...]}`` when the two tables have the same rows, columns
    and text, and differ only in numbers (an ε change rescales the RMSE: the rows keep
    their order); ``{}`` when they are equal; ``None`` when the table must be replaced.
    A replaced table is sent whole and redrawn whole by the browser (every row with its
    description, source and note); a patch sends and redraws the changed cells only.
    NaN equals NaN here.
    """
    if (old is None or old.shape != new.shape or not old.columns.equals(new.columns)
            or not old.index.equals(new.index) or not old.dtypes.equals(new.dtypes)):
        return None
    patch = {}
    for col in new.columns:
        a, b = old[col], new[col]
        if b.dtype.kind not in "fiu":
            if not a.equals(b):
                return None
            continue
        x, y = a.to_numpy(dtype=float), b.to_numpy(dtype=float)
        changed = ~((x == y) | (np.isnan(x) & np.isnan(y)))
        if changed.any():
            values = b.to_numpy()
            patch[col] = [(i, values[k].item()) for k, i in zip(np.flatnonzero(changed),
                                                                new.index[changed], strict=True)]
    return patch


def _empty_table() -> pd.DataFrame:
    empty = pd.DataFrame({c: pd.Series(dtype=float if c in ("rmse", "ratio", "seconds")
                                       else object) for c in TABLE_COLUMNS})
    empty.attrs.update(svd_bound=math.nan, noise="")
    return empty


def _hidden_unless(shown: bool) -> dict:
    """CSS of an element that keeps its place on the page and shows only when ``shown``."""
    return {} if shown else {"visibility": "hidden"}


def _dimmed_if(busy: bool) -> dict:
    """CSS of results being recomputed: dimmed while ``busy``."""
    # "1", not {}: the browser keeps a style that is no longer given, so the finished results
    # stayed at half opacity, grey as if disabled
    return {"opacity": "0.5" if busy else "1"}


def _limits(values, log: bool = False, pad: float = 1.5):
    """Axis limits around the finite (positive, on a log axis) ``values``; ``(None, None)`` if none."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)] if log else v[np.isfinite(v)]
    if not v.size:
        return (None, None)
    lo, hi = float(v.min()), float(v.max())
    if log:
        return (lo / pad, hi * pad)
    if pad == 0:  # an index or a length: its own range, half a step of margin
        return (lo - 0.5, hi + 0.5)
    return (min(0.0, lo), hi * 1.08 if hi > 0 else 1.0)


def _sample(size: int, limit: int) -> np.ndarray:
    """Indices of at most ``limit`` evenly spaced rows out of ``size``."""
    if size <= limit:
        return np.arange(size)
    return np.unique(np.linspace(0, size - 1, limit).round().astype(np.int64))
