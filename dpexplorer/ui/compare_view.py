"""The Compare page (:class:`ComparePage`): every mechanism for the session's workload.

The analytic RMSE of every data-independent mechanism (bars, the SVD bound as a line, a table
also listing the data-dependent ones), one mechanism's per-query RMSE and the RMSE over ε.
Outputs are parameters (``table`` as :func:`dpexplorer.compare`, ``curve``, ``per_query``,
``busy``, ``error``; scripts call :meth:`ComparePage.wait`).  Work: :mod:`.compare_tasks`,
charts: :mod:`.compare_charts`, redraws: :mod:`.compare_redraws`.
"""

from __future__ import annotations

import itertools
import logging
import math
import operator
import threading
import time
from collections import OrderedDict

import pandas as pd
import panel as pn
import param
from bokeh.models.widgets.tables import NumberFormatter

import dpexplorer as dpx
from dpexplorer.accuracy import rmse_curve
from dpexplorer.compare import OBJECTIVES, scale_comparison

from .accuracy_view import AccuracyFirst
from .compare_charts import TABLE_COLUMNS, CompareCharts, rmse_chart, table_patch
from .compare_redraws import CompareRedraws
from .compare_tasks import EPS_GRID, OPTIMIZING, CompareWork, _Base, cached_entry
from .continual_view import StepErrors
from .exports import FigureExport
from .live_plot import LivePlot
from .optimize_view import SHUTDOWN, OptimizationProgress
from .serving import COLOR as _COLOR
from .serving import LABEL as _LABEL
from .session import Page, Session, readable_headers
from .tasks import OPTIMIZER_THREADS, Jobs, build_lock, percent
from .tasks import task_message as _message

__all__ = ["ComparePage", "Jobs", "build_lock", "check_workload", "structured_1d", "table_patch",
           "too_large", "STRUCTURED_MAX_CELLS", "structured_mechanisms", "rmse_chart",
           "OPTIMIZER_THREADS", "cached_entry", "TABLE_COLUMNS"]

log = logging.getLogger(__name__)

_NUMBER = {"rmse": "0,0.000", "max_std": "0,0.000", "ratio": "0.000", "seconds": "0.0000"}


def comparison_table(frame: pd.DataFrame) -> pn.widgets.Tabulator:
    """Read-only Tabulator of a :func:`dpexplorer.compare` table: columns share the width, long
    text wraps, no header is cut (:func:`~dpexplorer.ui.session.readable_headers`)."""
    titles = {"label": "mechanism", "rmse": "RMSE", "ratio": "RMSE / SVD bound",
              "seconds": "build (s)", "max_std": "worst query std", "online": "online"}
    # max_std too (objective "max"), so that adding it never pushes `note` off the right edge
    columns = list(dict.fromkeys([*frame.columns, "max_std"]))
    formatters = {c: NumberFormatter(format=f) for c, f in _NUMBER.items()}
    formatters.update({c: {"type": "textarea"} for c in ("description", "source", "note")},
                      online={"type": "tickCross", "crossElement": False})  # ✓ if online
    return pn.widgets.Tabulator(
        frame, show_index=False, disabled=True, sizing_mode="stretch_width",
        layout="fit_columns", titles=titles, formatters=formatters,
        configuration=readable_headers(columns, titles,
                                       grow={"description": 4, "source": 2, "note": 3}))


#: Largest 1D interval workload (ranges, prefixes, Width-k, weighted unions with Identity and
#: Total) compared with no n × n matrix: at 2**16 cells the SVD bound and each
#: :func:`structured_mechanisms` error took 0.01-0.4 s (2 cores, 1 BLAS thread).
STRUCTURED_MAX_CELLS = 2**16


def structured_mechanisms() -> tuple[str, ...]:
    """The registry's mechanisms flagged ``structured_1d`` (no ``n × n`` matrix), built above
    ``max_cells`` for a :func:`structured_1d` workload."""
    return tuple(n for n, m in dpx.registry.REGISTRY.items() if m.structured_1d is not False)


def structured_1d(W) -> bool:
    """Whether ``W`` is a 1D workload of intervals, Identity, Total and weighted unions of these
    (:func:`dpexplorer.gram_ops.gram_operator` with interval forms): no ``n × n`` matrix needed."""
    if not isinstance(W, dpx.matrix.Matrix) or len(W.domain) != 1:
        return False
    op = dpx.gram_ops.gram_operator(W)
    return op is not None and op.intervals


def check_workload(W, max_cells: int = 4096,
                   structured_max_cells: int = STRUCTURED_MAX_CELLS) -> dpx.matrix.Matrix:
    """``W`` if the pages can compare it, else ValueError with the reason: at most
    ``structured_max_cells`` cells for a :func:`structured_1d` workload, ``max_cells`` per attribute
    for a Kronecker product, else ``max_cells`` (dense ``n × n`` Gram matrices)."""
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
    """Why ``name`` is not built for ``W`` (a :func:`structured_1d` workload above ``max_cells``
    cells) in plain words, or None; a flag depending on the size (Privelet) gives its own reason."""
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
    """The note under the objective selector: which registered builders take the objective."""
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


def _output(kind, default, doc: str | None = None) -> param.Parameter:
    """A read-only output parameter of the page (``allow_None`` when ``default`` is None)."""
    return kind(default=default, constant=True, precedence=-1, doc=doc)


class ComparePage(CompareWork, CompareCharts, CompareRedraws, Page, pn.viewable.Viewer):
    """The Compare page: all mechanisms for ``session.workload`` under the session's noise
    (``session``: new if omitted; ``background=False``: built in the caller's thread).
    :attr:`optimization` follows the optimiser being built."""

    mechanism = param.String(default="hb", doc="The mechanism whose per-query error is plotted.")
    table = _output(param.DataFrame, None, "dpexplorer.compare() at the current noise (kept on errors).")
    curve = _output(param.DataFrame, None, "RMSE over EPS_GRID and the session's ε (rmse_curve).")
    per_query = _output(param.DataFrame, None, "Per-query RMSE of `mechanism`: query, rmse (, length).")
    busy = _output(param.Boolean, False, "True while strategies are being built.")
    per_query_busy = _output(param.Boolean, False)
    progress = _output(param.Integer, 0, "Mechanisms done in the running comparison.")
    total = _output(param.Integer, 1, "Mechanisms in the running comparison.")
    status = _output(param.String, "")
    objective = param.Selector(default="sum", objects=list(OBJECTIVES), doc="""
        What the comparison ranks by: 'sum' (total squared error, shown as RMSE) or 'max'
        (the worst query's standard deviation, dpx.compare(objective='max')).  Mechanisms with
        an objective (ResidualPlanner) are built for it; OPT0, OPT⊗, OPT+, OPT_M, HDMM and
        Eigen-Design always optimise the total squared error.""")
    auto_optimize = param.Boolean(default=True, doc="""
        Build the optimisers in every comparison (False: 'not run yet' until run_optimizers()).""")
    pending = _output(param.List, [], "Optimisers of the shown comparison not run (deferred, cancelled).")
    optimizing = _output(param.Boolean, False, "True while run_optimizers() builds them.")
    per_query_note = _output(param.String, "")
    error = _output(param.String, "", "Last error of this page ('' after a success).")

    #: Largest domain compared (Kronecker: per attribute; see :func:`check_workload`).
    max_cells = 4096

    def __init__(self, session: Session | None = None, background: bool = True, **params):
        self._setup_page(session, background)  # session, lock, tasks, tab gate, load
        self._bases, self._pq = OrderedDict(), OrderedDict()  # unit-noise figures by key (LRU)
        self._token = 0
        # keys of the comparison being built, of the per-query errors being computed, of the base
        # behind `table`, of the optimisers run_optimizers() builds; the per-query view shown
        self._pending = self._pq_pending = self._shown = self._opt_pending = self._pq_view = None
        self._curve_layers = {}  # mechanism -> (key, curve) of the privacy–accuracy chart drawn
        self._cancel = False  # set by cancel(): the running optimisation stops
        self._serials = itertools.count(1)  # build numbers (next() is atomic in CPython)
        # panes; redraws (_redraw) and the status per kind (_post_status) waiting for the loop
        self._panes, self._queued, self._statuses = {}, {}, {}
        self._urgent = False  # set while update() shows the user's own change (REDRAWS)
        self._queued_guard = threading.Lock()
        self._figures_after = None  # time.monotonic() before which no first figure is drawn
        self._figures_timer = set()  # redraw keys waiting for that time
        #: Progress of the optimiser being built (fed by dpexplorer.core.optimization.report).
        self.optimization = OptimizationProgress()
        # a served page's optimisers wait until the browser has drawn it (its first render)
        self._grace = 0.0 if self._doc is None else self.load_grace
        super().__init__(**params)
        #: The "ε for this error" mode (accuracy first): fed every comparison shown.
        self.accuracy_first = AccuracyFirst(self.session, submit=self._submit, lock=self._lock,
                                            report=self.session.report)
        #: "Error over time" (a count over time): per-step errors of the compared strategies.
        self.step_errors = StepErrors(self, submit=self._submit)
        self.param.watch(lambda e: e.new and self.run_optimizers(), "auto_optimize")
        if self.mechanism not in self.mechanisms():
            self.mechanism = self.mechanisms()[0]
        self.session.param.watch(lambda *_: self.update(), ["workload", "epsilon", "delta", "noise"])
        self.param.watch(lambda *_: self._refresh_per_query(), "mechanism")
        self.param.watch(lambda *_: self.update(), "objective")
        self.update()

    @property
    def cache(self) -> dpx.StrategyCache:
        return self.session.cache

    @property
    def shown_workload(self):
        """The workload of the comparison shown (None before the first)."""
        return None if self._shown is None else self._shown[0]

    @property
    def svd_bound(self) -> float:
        """SVD lower bound on the RMSE of the current table (NaN if none)."""
        return math.nan if self.table is None else float(self.table.attrs.get("svd_bound", math.nan))

    @staticmethod
    def mechanisms() -> list[str]:
        """Registry names of the data-independent mechanisms (the per-query choices)."""
        return dpx.registry.names(data_dependent=False)

    def _options(self) -> dict:
        return {dpx.registry.get(n).label: n for n in self.mechanisms()}

    def update(self, *, urgent: bool = True) -> bool:
        """Bring the outputs up to date with the session (rescaled, or a background comparison
        started); ``False`` if an input was refused.  ``urgent``: the user's own change, redrawn
        before other pages' (:data:`~dpexplorer.ui.serving.REDRAWS`)."""
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
            self._urgent = urgent and self._shown is not None  # not the page's first comparison
            log.debug("Compare shows %s at ε = %s, %s noise%s", W.name, self.session.epsilon,
                      self.session.noise, " (urgent)" if self._urgent else "")
            try:
                self._show(key, base, noise)
            finally:
                self._urgent = False
            if (base.pending and self.auto_optimize and self._opt_pending != key
                    and not SHUTDOWN.is_set()):
                self.run_optimizers()  # e.g. back to a comparison whose optimisers were stopped
            return True

    def _not_built(self, W, name: str, noise) -> str | None:
        """Why ``name`` is not built for ``W`` here (:func:`too_large`, the registry's scope), or None."""
        return too_large(W, name, self.max_cells) or dpx.registry.get(name).not_applicable(W, noise)

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
        values = dict(table=table, curve=curve,
                      pending=[] if self._opt_pending == key else list(base.pending))
        if not base.failures:
            values["error"] = ""
        self._set(**values)
        self.accuracy_first.refresh(base, noise)
        self._refresh_per_query()

    def panel(self) -> pn.Column:
        """The page's layout (built once; outputs update it in place)."""
        if "root" in self._panes:
            return self._panes["root"]
        # widgets follow the page's state through the gate: nothing changes while hidden
        shown = self.gate.mirror(self, ["progress", "total", "busy", "status", "pending",
                                        "optimizing", "per_query_note", "per_query_busy"])
        # busy shown by styles, not `visible`: a change of a layout's `visible` re-lays out the
        # whole page in the browser (0.1-0.2 s each, Bokeh 3.9), a style change does not.
        # One bound value over a fixed max: a bar bound to two parameters rejects a value above
        # the max it has not received yet
        progress = pn.indicators.Progress(
            value=pn.bind(percent, shown.param.progress, shown.param.total), max=100,
            styles=pn.bind(_hidden_unless, shown.param.busy),
            bar_color="primary", sizing_mode="stretch_width", height=20)
        status = pn.pane.Markdown(shown.param.status, sizing_mode="stretch_width")
        # shown for the whole optimiser run, not hidden and shown again between optimisers
        optimizing = self.optimization.panel(cancel=self.cancel, gate=self.gate,
                                             visible=shown.param.optimizing)
        objective = pn.widgets.RadioButtonGroup.from_param(self.param.objective, options={
            "Total error (RMSE)": "sum", "Worst query (max std)": "max"})
        objective_note = pn.pane.Markdown(OBJECTIVE_NOTE, sizing_mode="stretch_width",
                                          styles={"font-size": "90%"})
        auto = pn.widgets.Checkbox.from_param(
            self.param.auto_optimize, **{_LABEL: "Run optimisers automatically (HDMM, "
                                         "Eigen-Design, …: slower)"})
        run = pn.widgets.Button(
            **{_LABEL: "Run optimisers"}, **{_COLOR: "primary"}, width=200,
            visible=pn.bind(bool, shown.param.pending),
            disabled=pn.bind(operator.or_, shown.param.busy, shown.param.optimizing))
        run.on_click(lambda e: self.run_optimizers())
        summary = pn.pane.Markdown(self._summary(), sizing_mode="stretch_width")
        # a result landing while the widgets are built is drawn by the catch-up redraw below
        built_from = (self.table, self.curve, self.per_query)
        bars = LivePlot(self.bars, self._full_table(), self._plot_key(), height=380)
        curve = LivePlot(self.curve_plot, self.curve, self._plot_key(), height=400)
        table = comparison_table(self._table_value())
        # the table joins the page with its first rows: Panel 1.9's Tabulator drops a data
        # update reaching the browser while it is still initialising the table
        table_slot = pn.Column(*([table] if len(table.value) else []),
                               sizing_mode="stretch_width")
        select = pn.widgets.Select(options=self._options(), value=self.mechanism, width=220,
                                   **{_LABEL: "Mechanism"})
        select.link(self, value="mechanism", bidirectional=True)
        pq_note = pn.pane.Alert(shown.param.per_query_note, alert_type="info",
                                visible=pn.bind(bool, shown.param.per_query_note),
                                sizing_mode="stretch_width")
        sample = self.per_query_sample()
        by_index = LivePlot(self.per_query_plot, sample, self._pq_view_key(), height=340)
        by_length = LivePlot(self.length_plot, sample, self._pq_view_key(), height=340)
        # visibility toggled on wrapping Columns: toggling a rendered HoloViews pane's own
        # `visible` raises in Panel 1.9
        index_box = pn.Column(by_index.pane, visible=len(sample) > 0,
                              sizing_mode="stretch_width")
        length_box = pn.Column(by_length.pane, visible="length" in sample and len(sample) > 0,
                               sizing_mode="stretch_width")
        self._panes.update(summary=summary, bars=bars, table=table, curve=curve,
                           select=select, by_index=by_index, by_length=by_length,
                           index_box=index_box, length_box=length_box,
                           optimizing=optimizing, auto=auto, run=run)

        def on_results(*_):
            # no pn.io.hold here: a live plot replaced and updated in one held message left the
            # browser a dangling model reference.  Rows landing just after the table joined the
            # page wait too (see table_slot)
            if len(table_slot) and self._later("results", on_results):
                return
            if (options := self._options()) != select.options:  # mechanisms registered since
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
            s = self.per_query_sample()
            self._draw_each("per_query", [(by_index, lambda: s, self._pq_view_key),
                                          (by_length, lambda: s, self._pq_view_key)])
            index_box.visible = len(s) > 0
            length_box.visible = "length" in s and len(s) > 0
        # a hidden page keeps its redraws until shown (dpexplorer.ui.serving)
        self.param.watch(lambda *_: self._redraw("results", on_results), ["table", "curve"])
        self.param.watch(lambda *_: self._redraw("per_query", on_per_query), "per_query")
        if self.table is not built_from[0] or self.curve is not built_from[1]:
            self._redraw("results", on_results)
        if self.per_query is not built_from[2]:
            self._redraw("per_query", on_per_query)

        self.exports: dict = {}  # a download control (PNG, SVG, CSV) under every figure

        def export(name, make):
            return FigureExport("compare", name, make, report=self.session.report,
                                into=self.exports)

        first = self.accuracy_first
        by_epsilon, target_curve, in_error = first.figures(self, export)
        results = pn.Column(summary, bars.pane, export("rmse-bars", self.bars), table_slot,
                            styles=pn.bind(_dimmed_if, shown.param.busy), visible=in_error,
                            sizing_mode="stretch_width")
        index_box.append(export("per-query", lambda: self.per_query_plot(self.per_query_sample())))
        length_box.append(export("per-query-by-length",
                                 lambda: self.length_plot(self.per_query_sample())))
        per_query = pn.Column(
            pn.pane.Markdown("### Per-query error\nStandard error of every workload answer "
                             "for the chosen mechanism (it depends on the query, not on the "
                             "data)."),
            select, pq_note, index_box, length_box,
            styles=pn.bind(_dimmed_if, shown.param.per_query_busy), sizing_mode="stretch_width")
        accuracy = pn.Column(
            pn.pane.Markdown("### Privacy–accuracy\nThe error of each mechanism as ε varies "
                             "(same strategies: the error scales with the noise's standard "
                             "deviation, 1/ε for Laplace)."),
            pn.Column(curve.pane, export("privacy-accuracy", self.curve_plot), visible=in_error,
                      sizing_mode="stretch_width"), target_curve,
            styles=pn.bind(_dimmed_if, shown.param.busy), sizing_mode="stretch_width")
        root = pn.Column(pn.pane.Markdown(PAGE_HEADER, sizing_mode="stretch_width"),
                         first.controls(),
                         pn.Row(objective, objective_note, sizing_mode="stretch_width"),
                         pn.Row(auto, run, sizing_mode="stretch_width"),
                         progress, status, optimizing, results, by_epsilon, per_query,
                         self.step_errors.panel(), accuracy, sizing_mode="stretch_width")
        self._panes["root"] = root
        return root


def _hidden_unless(shown: bool) -> dict:
    """CSS of an element that keeps its place on the page and shows only when ``shown``."""
    return {} if shown else {"visibility": "hidden"}


def _dimmed_if(busy: bool) -> dict:
    """CSS of results being recomputed: dimmed while ``busy`` ("1", not {}: the browser keeps
    a style that is no longer given)."""
    return {"opacity": "0.5" if busy else "1"}
