"""CompareView: the analytic RMSE of every data-independent mechanism for one workload.

The component is a :class:`param.Parameterized`; its inputs are parameters
(``workload``, ``n``, ``width``, ``epsilon``, ``delta``, ``noise``) and its
outputs are the parameters ``table`` (the :func:`dpexplorer.compare`
DataFrame of the last successful update), ``error`` (message of the last
failed update, ``""`` after a success) and ``busy``.  It can be driven and
tested without a browser::

    view = CompareView(workload="prefix", n=512)
    view.epsilon = 0.5                # or view.set_inputs(epsilon=0.5)
    view.table[["mechanism", "rmse"]]

:meth:`set_inputs` is the error-safe way to change inputs (the sidebar
widgets use it): a value the parameters reject (``epsilon <= 0``, ``delta``
outside (0, 1), ``n`` outside 2..4096) or that the engine rejects (``width >
n``) never raises; it sets ``error``, shows a notification when a
notification area is available, and leaves the last good ``table`` (and the
chart and table drawn from it) in place.

One :class:`dpexplorer.StrategyCache` and one memo of built workloads are
held per component (one component per browser session), so changing ε or
δ re-uses the strategies already built for the workload (they are built once
per workload and noise norm: L1 for Laplace, L2 for Gaussian).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from functools import lru_cache

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import pandas as pd
import panel as pn
import param
from bokeh.models.widgets.tables import NumberFormatter

import dpexplorer as dpx

__all__ = ["CompareView", "CompareInputs", "WORKLOADS", "RANDOM_RANGES"]

log = logging.getLogger(__name__)

#: Parameters of the ``random_ranges`` workload (DAWA Sec. 5.1: 2000 uniform intervals).
RANDOM_RANGES = {"m": 2000, "kind": "uniform", "seed": 0}

#: Workload name -> (display label, builder(n, width) -> Matrix).
WORKLOADS: dict[str, tuple[str, Callable]] = {
    "all_range": ("All ranges", lambda n, w: dpx.workloads.all_range(n)),
    "prefix": ("Prefix (CDF)", lambda n, w: dpx.workloads.prefix(n)),
    "width_range": ("Ranges of width w", lambda n, w: dpx.workloads.width_range(n, w)),
    "identity": ("Identity (histogram)", lambda n, w: dpx.workloads.identity(n)),
    "random_ranges": ("Random ranges (2000, uniform)",
                      lambda n, w: dpx.workloads.random_ranges(n, **RANDOM_RANGES)),
}

#: Columns of the comparison shown in the table widget.
TABLE_COLUMNS = ["label", "rmse", "ratio", "seconds", "description", "source", "note"]

_INPUTS = ("workload", "n", "width", "epsilon", "delta", "noise")

# Widget captions: ``label`` since Panel 1.9 (``name`` is deprecated there), ``name`` before.
_LABEL = "label" if "label" in pn.widgets.IntInput.param else "name"

HEADER = """\
## Compare mechanisms

For a batch of linear counting queries (the **workload**) over a histogram of
*n* cells, every data-independent mechanism of the registry picks a
*strategy*, measures it with **Laplace** (ε-DP) or **Gaussian** ((ε, δ)-DP)
noise and reconstructs the answers.  The chart shows the analytic **RMSE per
query** (in counts, log scale; lower is better) of each mechanism; the dashed
line is the **SVD lower bound**: no such (matrix) mechanism can do better.
The error does not depend on the data, so nothing private is touched here; the
*Data* card shows the bundled histogram the explorer runs on.  Changing ε or δ
reuses the strategies already built (switching Laplace/Gaussian builds once
per noise norm).
"""


@lru_cache(maxsize=4)
def _bundled(name: str):
    """The bundled dataset ``name`` (loaded once per process)."""
    return dpx.datasets.load_bundled(name)


class CompareInputs(param.Parameterized):
    """The inputs of :class:`CompareView` (also used to validate values before they are set)."""

    # ------------------------------------------------------------- inputs
    workload = param.Selector(default="all_range", objects=list(WORKLOADS), doc="""
        Workload family: all_range, prefix, width_range, identity or random_ranges.""")
    n = param.Integer(default=256, bounds=(2, 4096), doc="Domain size (cells of the histogram).")
    width = param.Integer(default=32, bounds=(1, 4096), doc="""
        Range width w, for the width_range workload only (must be <= n).""")
    epsilon = param.Number(default=1.0, bounds=(0, None), inclusive_bounds=(False, True),
                           doc="Privacy parameter ε > 0.")
    delta = param.Number(default=1e-6, bounds=(0, 1), inclusive_bounds=(False, False),
                         doc="Privacy parameter δ in (0, 1), for Gaussian noise only.")
    noise = param.Selector(default="Laplace", objects=["Laplace", "Gaussian"], doc="""
        Laplace (ε-DP, L1 sensitivity) or analytic Gaussian ((ε, δ)-DP, L2 sensitivity).""")


class CompareView(CompareInputs):
    """Analytic comparison of mechanisms for one workload and one noise model."""

    # ------------------------------------------------------------ outputs
    table = param.DataFrame(default=None, allow_None=True, constant=True, precedence=-1, doc="""
        dpexplorer.compare() result of the last successful update (attrs hold svd_bound).""")
    error = param.String(default="", constant=True, precedence=-1, doc="""
        Message of the last failed update; empty when the last update succeeded.""")
    busy = param.Boolean(default=False, constant=True, precedence=-1, doc="""
        True while a comparison is being computed.""")

    #: Distinct workloads kept built; beyond this the caches are cleared (bounds memory).
    max_workloads = 8

    def __init__(self, **params):
        self.cache = dpx.StrategyCache()
        self._workloads: dict[tuple, object] = {}
        self._lock = threading.RLock()
        self._key = None  # inputs of the current table
        super().__init__(**params)

    # ------------------------------------------------------------- engine
    @property
    def svd_bound(self) -> float:
        """SVD lower bound on the RMSE for the current table (NaN if none)."""
        if self.table is None:
            return math.nan
        return float(self.table.attrs.get("svd_bound", math.nan))

    def _inputs_key(self) -> tuple:
        """The inputs that determine the table (width/δ only where they matter)."""
        return (self.workload, self.n,
                self.width if self.workload == "width_range" else None,
                self.noise, self.epsilon,
                self.delta if self.noise == "Gaussian" else None)

    def workload_matrix(self):
        """The workload for the current inputs, built once and memoised.

        Raises
        ------
        ValueError
            From the workload builder (e.g. ``width > n``).
        """
        key = (self.workload, self.n, self.width if self.workload == "width_range" else None)
        if key not in self._workloads:
            W = WORKLOADS[self.workload][1](self.n, self.width)
            if len(self._workloads) >= self.max_workloads:
                self._workloads.clear()
                self.cache.clear()
            self._workloads[key] = W
        return self._workloads[key]

    def noise_model(self):
        """``dpx.Laplace(ε)`` or ``dpx.Gaussian(ε, δ)`` (ValueError on bad ε/δ)."""
        if self.noise == "Gaussian":
            return dpx.Gaussian(self.epsilon, self.delta)
        return dpx.Laplace(self.epsilon)

    @param.depends(*_INPUTS, watch=True, on_init=True)
    def _recompute(self) -> None:
        with self._lock:
            key = self._inputs_key()
            if key == self._key and self.table is not None:
                self._set(error="")  # back to the inputs of the table shown
                return
            self._set(busy=True)
            try:
                df = dpx.compare(self.workload_matrix(), self.noise_model(), cache=self.cache)
            except Exception as exc:  # noqa: BLE001 - shown in the page, never a traceback
                self._set(busy=False)
                self._fail(exc)
                return
            self._key = key
            self._set(table=df, error="", busy=False)

    def _set(self, **values) -> None:
        with param.edit_constant(self):
            self.param.update(**values)

    def _fail(self, exc: BaseException) -> None:
        if isinstance(exc, ValueError):
            msg = str(exc)
        else:
            log.exception("comparison failed")
            msg = f"{type(exc).__name__}: {exc}"
        self._set(error=msg)
        notify_error(msg)

    def set_inputs(self, **values) -> bool:
        """Set inputs by name without ever raising; ``True`` on success.

        A value rejected by a parameter (e.g. ``epsilon=0``) or by the engine
        (e.g. ``width > n``) sets :attr:`error`, notifies, and keeps the last
        good :attr:`table`.
        """
        with self._lock:
            unknown = sorted(set(values) - set(_INPUTS))
            if unknown:
                self._fail(ValueError(f"unknown input(s) {unknown}; inputs are {list(_INPUTS)}"))
                return False
            try:  # validate on a scratch copy first: no watcher runs on rejected values
                CompareInputs(**{k: getattr(self, k) for k in _INPUTS}).param.update(**values)
            except (ValueError, TypeError) as exc:
                self._fail(ValueError(_param_message(exc)))
                return False
            self.param.update(**values)
            return not self.error

    # ----------------------------------------------------------------- UI
    def controls(self) -> pn.Column:
        """Sidebar widgets; each change goes through :meth:`set_inputs`."""
        widgets = {
            "workload": pn.widgets.Select(
                **{_LABEL: "Workload"}, value=self.workload,
                options={label: key for key, (label, _) in WORKLOADS.items()}),
            "n": pn.widgets.IntInput(**{_LABEL: "Domain size n (2..4096)"}, value=self.n, step=1),
            "width": pn.widgets.IntInput(
                **{_LABEL: "Range width w (<= n)"}, value=self.width, step=1,
                visible=pn.bind(lambda w: w == "width_range", self.param.workload)),
            "noise": pn.widgets.RadioButtonGroup(
                **{_LABEL: "Noise"}, value=self.noise, options=list(self.param.noise.objects)),
            "epsilon": pn.widgets.FloatInput(**{_LABEL: "ε (> 0)"}, value=self.epsilon, step=0.1),
            "delta": pn.widgets.FloatInput(
                **{_LABEL: "δ (0 < δ < 1)"}, value=self.delta, step=1e-6,
                visible=pn.bind(lambda v: v == "Gaussian", self.param.noise)),
        }
        for name, widget in widgets.items():
            widget.param.watch(lambda event, name=name: self.set_inputs(**{name: event.new}),
                               "value")

        def to_widget(*events):
            for event in events:
                widgets[event.name].value = event.new
        self.param.watch(to_widget, list(widgets))
        return pn.Column(pn.pane.Markdown("### Inputs"), *widgets.values(),
                         sizing_mode="stretch_width")

    def error_alert(self) -> pn.pane.Alert:
        """A danger Alert showing :attr:`error`, hidden while there is none."""
        return pn.pane.Alert(
            pn.bind(lambda e: f"**Input rejected, showing the last valid result.** {e}",
                    self.param.error),
            alert_type="danger", sizing_mode="stretch_width", disable_math=True,
            visible=pn.bind(bool, self.param.error))

    def current_table(self) -> pd.DataFrame:
        """:attr:`table`, or an empty table with its columns before the first success."""
        if self.table is not None:
            return self.table
        empty = pd.DataFrame({c: pd.Series(dtype=float if c in ("rmse", "ratio", "seconds")
                                           else object) for c in TABLE_COLUMNS})
        empty.attrs.update(svd_bound=math.nan, noise="")
        return empty

    def chart(self, df: pd.DataFrame | None = None) -> hv.Overlay:
        """hv.Bars of RMSE per mechanism (log y) with the SVD bound as an hv.HLine."""
        df = self.current_table() if df is None else df
        ok = df.dropna(subset=["rmse"])
        bound = float(df.attrs.get("svd_bound", math.nan))
        title = f"RMSE per query, {df.attrs.get('noise', '')}, {self.describe_workload(df)}"
        bars = hv.Bars(
            ok, kdims=[hv.Dimension("label", label="Mechanism")],
            vdims=[hv.Dimension("rmse", label="RMSE (counts)"), "ratio"],
        ).opts(logy=True, tools=["hover"], color="#30a2da", responsive=True, height=360,
               title=title, xrotation=0, default_tools=["save", "reset"])
        values = list(ok["rmse"])
        if math.isfinite(bound) and bound > 0:
            values.append(bound)
        if values:
            bars = bars.opts(ylim=(min(values) / 1.5, max(values) * 1.5))
        if not (math.isfinite(bound) and bound > 0):
            return hv.Overlay([bars])
        line = hv.HLine(bound, label=f"SVD bound {bound:.4g}").opts(
            color="#d62728", line_dash="dashed", line_width=2)
        text = hv.Text(ok["label"].iloc[-1] if len(ok) else "", bound * 1.15,
                       f"SVD bound {bound:.4g}").opts(text_color="#d62728",
                                                       text_font_size="10pt")
        return (bars * line * text).opts(title=title)

    @staticmethod
    def describe_workload(df: pd.DataFrame) -> str:
        a = df.attrs
        return f"{a.get('m', '?')} queries over n = {a.get('n', '?')} cells"

    def results(self) -> pn.Column:
        """Chart + table, redrawn from :attr:`table` (kept on errors)."""
        plot = pn.pane.HoloViews(self.chart(), sizing_mode="stretch_width", height=380)
        tab = pn.widgets.Tabulator(
            self.current_table()[TABLE_COLUMNS], show_index=False, disabled=True,
            sizing_mode="stretch_width", layout="fit_data_table",
            titles={"label": "mechanism", "rmse": "RMSE", "ratio": "RMSE / SVD bound",
                    "seconds": "build (s)"},
            formatters={"rmse": NumberFormatter(format="0,0.000"),
                        "ratio": NumberFormatter(format="0.000"),
                        "seconds": NumberFormatter(format="0.0000"),
                        "description": {"type": "textarea"}, "note": {"type": "textarea"}},
            widths={"description": 380, "note": 200})
        summary = pn.pane.Markdown(self._summary(), sizing_mode="stretch_width")

        def redraw(*_):
            df = self.current_table()
            plot.object = self.chart(df)
            tab.value = df[TABLE_COLUMNS]
            summary.object = self._summary()
        self.param.watch(redraw, "table")
        return pn.Column(summary, plot, tab, loading=self.param.busy,
                         sizing_mode="stretch_width")

    def _summary(self) -> str:
        if self.table is None:
            return "No result yet: fix the inputs (see the message above)."
        df = self.table
        best = df.dropna(subset=["rmse"])
        text = (f"**Workload** `{self.workload}`: {self.describe_workload(df)}; "
                f"**noise** {df.attrs.get('noise', '')}; "
                f"**SVD bound** {self.svd_bound:.4g}")
        if len(best):
            text += (f"; **best** {best['label'].iloc[0]} "
                     f"(RMSE {best['rmse'].iloc[0]:.4g}, {best['ratio'].iloc[0]:.2f}× the bound)")
        return text

    def data_card(self, name: str = dpx.datasets.DEFAULT_1D) -> pn.Card:
        """Card with a bundled 1D histogram (bokeh-sampledata) the page runs on."""
        try:
            ds = _bundled(name)
            edges = ds.edges[0]
            hist = hv.Histogram((edges, ds.x), kdims=[ds.attributes[0]], vdims=["count"]).opts(
                responsive=True, height=220, color="#6d904f", line_color=None,
                tools=["hover"], title=f"{ds.name}: {ds.n_records} records, n = {ds.x.size}")
            body = [pn.pane.HoloViews(hist, sizing_mode="stretch_width", height=240),
                    pn.pane.Markdown(ds.description, sizing_mode="stretch_width")]
        except Exception as exc:  # noqa: BLE001 - e.g. bokeh-sampledata missing
            body = [pn.pane.Alert(f"Bundled data {name!r} unavailable: {exc}",
                                  alert_type="warning")]
        return pn.Card(*body, title=f"Data: {name}", collapsed=False,
                       sizing_mode="stretch_width")

    def main(self) -> pn.Column:
        """Main area: header, error alert, results, data card."""
        return pn.Column(pn.pane.Markdown(HEADER, sizing_mode="stretch_width"),
                         self.error_alert(), self.results(), self.data_card(),
                         sizing_mode="stretch_width")

    def panel(self) -> pn.Row:
        """The whole page: sidebar widgets and main area."""
        return pn.Row(pn.Column(self.controls(), width=280), self.main(),
                      sizing_mode="stretch_width")

    def __panel__(self):
        return self.panel()


def notify_error(message: str) -> None:
    """``pn.state.notifications.error(message)`` when a notification area exists."""
    try:
        notifications = pn.state.notifications
        if notifications is not None:
            notifications.error(message, duration=8000)
    except Exception:  # noqa: BLE001 - no session / no area: the Alert still shows it
        log.debug("no notification area", exc_info=True)


def _param_message(exc: BaseException) -> str:
    """Param's validation message with the class prefix dropped."""
    msg = str(exc)
    for cls in (CompareInputs, CompareView):
        msg = msg.replace(f"{cls.__name__}.", "")
    return msg
