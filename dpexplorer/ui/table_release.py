"""Releases from a record table on the Release page, and the parts both kinds of release share.

When the workload is over the domain of :attr:`Session.table`, the Release page releases from
its records with ResidualPlanner (Xiao, He, Zhang & Kifer, NeurIPS 2023): the privacy kernel
(:class:`dpexplorer.privacy.PrivateTable`) counts the marginals by group-by, adds Gaussian noise
from the OS CSPRNG (no seed) and spends from the table's ledger, refused over the budget before
any draw.  **Simulate** runs ``dpx.simulate`` seeded, with a throwaway ledger (never downloadable);
downloads hold the last release, with no seed and no true answer (none is computed).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import dataclass

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import numpy as np
import pandas as pd
import panel as pn
import param
from bokeh.models.widgets.tables import NumberFormatter

import dpexplorer as dpx
from dpexplorer import figures
from dpexplorer.privacy import PrivacyLedger

from .exports import FigureExport
from .serving import COLOR as _BUTTON
from .serving import LABEL as _LABEL
from .serving import TableSlot, on_session_loop
from .session import Page, Session, download_bytes, readable_headers, release_stamp
from .tasks import Task

__all__ = ["TableRelease", "TableResult", "TABLE_MECHANISM", "MAX_BARS"]

#: Keywords of a read-only output parameter.
OUT = {"constant": True, "precedence": -1}

#: The mechanism of table releases: the first registered that measures marginal counts
#: (``Mechanism.tables``: ResidualPlanner).
TABLE_MECHANISM = dpx.registry.names(tables=True)[0]
#: Most cells drawn as bars for one marginal (a heatmap has no limit below the kernel's).
MAX_BARS = 400

#: Columns of a ledger table on the Release page: what, when, ε/δ/ρ, mode, state
#: (of :meth:`dpexplorer.PrivacyLedger.history`).
LEDGER_COLUMNS = ["id", "time", "label", "kind", "part_of", "mode", "epsilon", "delta", "rho",
                  "state", "noise", "queries", "sensitivity"]

#: Their shares of the width left over once each has its header's width (they fill the
#: width and long text wraps: nothing, e.g. the time, is cut off).
_LEDGER_GROW = {"time": 2, "label": 4, "noise": 3}

#: Titles of the released answers' columns in the page's tables.
_ANSWER_TITLES = {"answer": "released answer", "std": "std error", "ci_low": "95 % low",
                  "ci_high": "95 % high", "ci_method": "interval"}


def ledger_table(frame: pd.DataFrame, page_size: int = 10) -> pn.widgets.Tabulator:
    """A read-only table of a ledger's :data:`LEDGER_COLUMNS` (``frame``: one row per entry)."""
    titles = {"part_of": "part of", "epsilon": "ε", "delta": "δ", "rho": "ρ",
              "sensitivity": "sensi\u00adtivity"}
    return pn.widgets.Tabulator(
        frame, show_index=False, disabled=True, sizing_mode="stretch_width", layout="fit_columns",
        pagination="local", page_size=page_size, titles=titles,
        configuration=readable_headers(LEDGER_COLUMNS, titles, sortable=False, grow=_LEDGER_GROW),
        formatters={c: {"type": "textarea"} for c in ("label", "noise", "time")})


def answers_table(frame: pd.DataFrame, layout: str, **formatters) -> pn.widgets.Tabulator:
    """A read-only table of released answers (10 a page), numbers to three decimals."""
    number = NumberFormatter(format="0,0.000")
    return pn.widgets.Tabulator(
        frame, show_index=False, disabled=True, sizing_mode="stretch_width", layout=layout,
        pagination="local", page_size=10, titles=_ANSWER_TITLES,
        configuration=readable_headers(frame.columns, _ANSWER_TITLES),
        formatters={**{c: number for c in ("answer", "std", "ci_low", "ci_high")}, **formatters})


def metadata_csv(title: str, meta: dict, frame: pd.DataFrame) -> str:
    """``frame`` as CSV under ``# title`` and ``# key: value`` lines of ``meta`` (``read_csv(comment="#")``)."""
    lines = [f"{k}: {v if isinstance(v, str) else json.dumps(v)}" for k, v in meta.items()]
    return figures.safe_csv(frame, comments=[title, *lines])


def charged(task: Task, session: Session, ledger: PrivacyLedger, release, *also):
    """``release()``, which spends from ``ledger``: an over-budget refusal becomes a
    ValueError in words; after any spend (also by a mechanism failing after a measurement)
    ``session.ledger_changed`` and ``also`` are posted to the page's event loop."""
    before = len(ledger)
    try:
        return release()
    except dpx.BudgetExceededError as exc:  # refused in words, not a failure to log
        raise ValueError(str(exc)) from None
    finally:
        if len(ledger) != before:
            for fn in (session.ledger_changed, *also):
                task.post(fn)


def ledger_panes(text, frame, page_size: int = 10) -> tuple:
    """A ledger's words and table, ``text()`` and ``frame()``, and the function redrawing both."""
    words = pn.pane.Markdown(text(), sizing_mode="stretch_width")
    table = TableSlot(lambda f: ledger_table(f, page_size), frame())

    def update():
        with pn.io.hold():  # one message to the browser for all its changes
            words.object = text()
            table.show(frame())
    return words, table, update


def start_run(part: Page, work, busy: str, *args, name: str, done, kept=None, **reset) -> bool:
    """Start ``work(task, part._inputs(), *args)`` as the one run of ``part``; ``done(result)`` shows it.

    ``part``: a :class:`Page` with ``busy`` and ``error`` parameters and ``_inputs()``.  A run
    under way (``busy`` is the message) or refused inputs are reported and give ``False``; else
    ``True`` once started in the background, or in the caller's thread whether it succeeded
    (or ``kept(task)``: a failure that keeps the result).  ``reset``: outputs set as it starts.
    """
    with part._lock:
        if part.busy:
            part._fail(RuntimeError(busy))
            return False
        try:
            inputs = part._inputs()
        except Exception as exc:  # noqa: BLE001 - reported on the page, never a traceback
            part._fail(exc)
            return False
        part._set(busy=True, **reset)

        def ended(task: Task) -> None:  # on the page's event loop
            part._set(busy=False)
            if task.status == "done":
                done(task.result)
            elif task.exception is not None:
                part._fail(task.exception)
        task = part.start_task(work, inputs, *args, name=name, on_end=ended)
    return part.background or task.status == "done" or bool(kept and kept(task))


class Downloads:
    """CSV and JSON downloads of the last release (``last``) of a :class:`Page` or a part of one,
    which has ``csv_text``, ``json_text`` and ``filename(ext)``."""

    #: What the downloads say when there is no release yet.
    _no_release = "no release yet"

    def _last_or_raise(self):
        if self.last is None:
            raise ValueError(f"{self._no_release}: click Run release first")
        return self.last

    def _download(self, text_fn):
        return download_bytes(text_fn, self._fail)

    def download_buttons(self, label: str) -> list[pn.widgets.FileDownload]:
        """CSV and JSON downloads; ``label`` is formatted with ``"CSV"`` or ``"JSON"``."""
        return [pn.widgets.FileDownload(
            callback=(lambda text=getattr(self, f"{ext}_text"): self._download(text)),
            filename=self.filename(ext), **{_LABEL: label.format(ext.upper())},
            **{_BUTTON: "default"}, disabled=self.last is None) for ext in ("csv", "json")]

    def show_downloads(self, buttons: list) -> None:
        """Give ``buttons`` (:meth:`download_buttons`) the name of the last release; off before one."""
        for w, ext in zip(buttons, ("csv", "json"), strict=True):
            w.param.update(filename=self.filename(ext), disabled=self.last is None)


@dataclass
class TableResult:
    """A release (no seed) or simulation (seeded) from a record table: its ``marginals``
    (:meth:`Release.marginals`), the table's ledger after a release (``spent``) and its ``seconds``."""

    release: object
    marginals: list
    spent: str = ""
    seconds: float = math.nan

    @property
    def simulated(self) -> bool:
        return self.release.mode != "release"


def marginal_name(part: dict) -> str:
    """``"Region × Segment"`` (``"total"`` for the 0-way marginal)."""
    return " × ".join(part["attributes"]) or "total"


def _spread(part: dict, digits: int, to: str = " to ") -> str:
    """The marginal's 95 % half-widths: ``± w``, or ``± lo<to>hi`` when they differ."""
    half = (part["ci_high"] - part["ci_low"]).ravel() / 2
    lo, hi = f"{half.min():.{digits}g}", f"{half.max():.{digits}g}"
    return f"± {lo}" if np.allclose(half, half.min(), rtol=1e-9) else f"± {lo}{to}{hi}"


class TableRelease(Downloads, Page, param.Parameterized):
    """Table releases of the Release page around one :class:`Session`.

    A part of the Release page (``page``, set up by :meth:`Page._setup_page`): it shares the
    page's session, gate (redraws wait while the tab is hidden) and tasks (one run at a time).
    """

    objective = param.Selector(default="sum", objects=["sum", "max"], doc="""
        ResidualPlanner's objective: total variance ('sum') or the worst query's ('max').""")
    marginal = param.Integer(default=0, bounds=(0, None), doc="Index of the marginal drawn.")
    active = param.Boolean(default=False, **OUT, doc="""
        Whether the session's workload is over the session's record table (table mode).""")
    last = param.ClassSelector(class_=TableResult, default=None, allow_None=True, **OUT,
                               doc="The last real release (what the downloads hold).")
    shown = param.ClassSelector(class_=TableResult, default=None, allow_None=True, **OUT,
                                doc="What is drawn: the last release or simulation.")
    busy = param.Boolean(default=False, **OUT)
    error = param.String(default="", **OUT)

    _no_release = "no table release yet"

    def __init__(self, page: Page, **params):
        self.session, self.gate, self.background = page.session, page.gate, page.background
        self._lock, self._jobs, self._hooks = page._lock, page._jobs, []
        super().__init__(**params)
        self._refresh_active()
        self.session.param.watch(lambda *_: self._refresh_active(), ["workload", "table"])

    def table(self):
        """The session's record table if the workload is over its domain, else ``None``."""
        t, W = self.session.table, self.session.workload
        if t is None or W is None or tuple(W.domain) != tuple(t.shape):
            return None
        return t

    def _refresh_active(self) -> None:
        self._set(active=self.table() is not None)

    def ledger(self) -> PrivacyLedger | None:
        """The ledger of the session's table (``None`` without one)."""
        t = self.session.table
        return None if t is None else self.session.table_ledger(t)

    def _inputs(self):
        table = self.table()
        if table is None:
            raise ValueError("the workload is not over a record table: build table marginals on "
                             "the Workload page (card 'Record table: marginals')")
        noise = self.session.noise_model()
        if noise.norm != 2:
            raise ValueError("a table release uses ResidualPlanner, a Gaussian mechanism: choose "
                             "Gaussian noise in the sidebar")
        return table, self.session.workload, noise

    def run(self, release: bool = True, inference: str = "least_squares") -> bool:
        """A real release (``release=True``) or a seeded simulation, as a task of the page.

        A release spends ε, δ (zCDP ρ) from the table's ledger, refused before any noise is drawn
        over the budget; a simulation uses the simulation seed and a throwaway ledger.  Returns
        as :func:`start_run` (no table workload, Laplace noise: refused).
        """
        return start_run(self, self._work, "a release is already running; wait for it to finish",
                         release, self.objective, int(self.session.seed), inference,
                         name="table release", done=self._show)

    def _work(self, task: Task, inputs, release: bool, objective: str, seed: int,
              inference: str) -> TableResult:
        """The release or simulation (a task): the counts by group-by, the noise, the answers."""
        table, W, noise = inputs
        params = {"objective": objective}
        t0 = time.perf_counter()
        if not release:
            rel = dpx.simulate(table, W, TABLE_MECHANISM, noise, seed=seed,
                               ledger=PrivacyLedger(), params=params, inference=inference)
            return TableResult(rel, rel.marginals(), "", time.perf_counter() - t0)
        led = self.session.table_ledger(table)
        rel = charged(task, self.session, led, lambda: dpx.release(
            table, W, TABLE_MECHANISM, noise, ledger=led, params=params, inference=inference),
            self._ledger_changed)
        return TableResult(rel, rel.marginals(), led.summary(), time.perf_counter() - t0)

    def _show(self, result: TableResult) -> None:
        values = {"shown": result, "error": ""}
        if result.release.mode == "release":
            self.session.releases.append(result.release)
            values["last"] = result
        values["marginal"] = self.marginal if self.marginal < len(result.marginals) else 0
        self._set(**values)  # one update: the page redraws once

    def metadata(self) -> dict:
        """The last table release's metadata, the table and what it has spent in all (no seed)."""
        last = self._last_or_raise()
        return {**last.release.metadata(), "dataset": last.release.table.name,
                "table_spent_after_release": last.spent,
                "marginals": [marginal_name(p) for p in last.marginals]}

    def frame(self, result: TableResult | None = None) -> pd.DataFrame:
        """Per answer: ``marginal``, ``label``, ``answer``, ``std``, ``ci_low``, ``ci_high``, ``ci_method``."""
        result = self.shown if result is None else result
        if result is None:
            return pd.DataFrame(columns=["marginal", "label", "answer", "std", "ci_low", "ci_high",
                                         "ci_method"])
        df = result.release.to_frame()
        names = np.concatenate([np.full(p["answer"].size, marginal_name(p), dtype=object)
                                for p in result.marginals])
        df.insert(1, "marginal", names)
        return df.drop(columns=["query"])

    def csv_text(self) -> str:
        """The last release's answers as CSV under ``# key: value`` metadata lines (:func:`metadata_csv`)."""
        last = self._last_or_raise()
        return metadata_csv("dpexplorer release from a record table", self.metadata(),
                            self.frame(last))

    def json_text(self) -> str:
        """Metadata and one entry per marginal (attributes, labels, answers, std, intervals)."""
        last = self._last_or_raise()
        marginals = [{"attributes": list(p["attributes"]), "shape": list(p["shape"]),
                      "labels": p["labels"],
                      **{k: p[k].tolist() for k in ("answer", "std", "ci_low", "ci_high")}}
                     for p in last.marginals]
        return json.dumps({**self.metadata(), "marginals": marginals})

    def filename(self, ext: str) -> str:
        """Name of a download of the last release (``table_release.<ext>`` before one)."""
        if self.last is None:
            return f"table_release.{ext}"
        rel = self.last.release
        return f"release_{rel.table.name}_eps{rel.epsilon:g}_{release_stamp(rel)}.{ext}"

    def _part(self, result: TableResult, index: int | None) -> dict:
        index = self.marginal if index is None else index
        return result.marginals[min(max(int(index), 0), len(result.marginals) - 1)]

    def marginal_plot(self, index: int | None = None, result: TableResult | None = None):
        """The drawn marginal: bars with 95 % error bars, or a heatmap for two attributes."""
        result = self.shown if result is None else result
        if result is None or not result.marginals:
            return hv.Curve([]).opts(title="No table release yet", responsive=True, height=380)
        part = self._part(result, index)
        what = (f"SIMULATION (seed {result.release.seed}, not a release)" if result.simulated
                else "released")
        title = f"{marginal_name(part)}: {what} counts with 95 % intervals"
        values = {k: part[k].ravel() for k in ("answer", "std", "ci_low", "ci_high")}
        if len(part["shape"]) == 2:
            (row, col), cells = part["attributes"], list(itertools.product(*part["labels"]))
            df = pd.DataFrame({col: [c for _, c in cells], row: [r for r, _ in cells], **values})
            return hv.HeatMap(df, kdims=[col, row], vdims=["answer", "std", "ci_low", "ci_high"]).opts(
                cmap="Blues", colorbar=True, tools=["hover"], responsive=True, height=460,
                xrotation=60, title=f"{title} ({_spread(part, 3)} per cell)",
                fontsize={"title": "9pt"}, clabel="released count")
        labels = ([", ".join(t) for t in itertools.product(*part["labels"])] if part["shape"]
                  else ["total"])
        df = pd.DataFrame({"cell": labels, **values})
        note = ""
        if len(df) > MAX_BARS:
            note = f" (first {MAX_BARS} of {len(df):,} cells; all are in the table and downloads)"
            df = df.iloc[:MAX_BARS]
        err = pd.DataFrame({"cell": df["cell"], "answer": df["answer"],
                            "minus": df["answer"] - df["ci_low"], "plus": df["ci_high"] - df["answer"]})
        kd = hv.Dimension("cell", label=marginal_name(part))
        bars = hv.Bars(df, kdims=[kd], vdims=["answer", "std", "ci_low", "ci_high"]).opts(
            color="#4c72b0", tools=["hover"], alpha=0.8)
        bars_err = hv.ErrorBars(err, kdims=[kd], vdims=["answer", "minus", "plus"]).opts(
            color="#d95f02", line_width=2)
        return (bars * bars_err).opts(responsive=True, height=400, xrotation=60 if len(df) > 6 else 0,
                                      title=title + note, fontsize={"title": "9pt"},
                                      ylabel="count", shared_axes=False)

    def marginal_caption(self, index: int | None = None) -> str:
        """Markdown under the chart: which marginal, how it is drawn, its 95 % half-widths."""
        res = self.shown
        if res is None or not res.marginals:
            return ""
        part = self._part(res, index)
        k = len(part["shape"])
        how = ("heatmap (hover a cell for its std and interval)" if k == 2 else
               "bar with its 95 % error bar" if k == 0 else "bars with 95 % error bars")
        what = f"simulated (seed {res.release.seed})" if res.simulated else "released"
        return (f"**{marginal_name(part)}**: {part['answer'].size:,} {what} cells, drawn as a "
                f"{how}; 95 % interval {_spread(part, 4, ' to ± ')} "
                f"(std {part['std'].ravel().max():.4g}).")

    def summary(self) -> str:
        table = self.table()
        if table is None:
            return ""
        lead = (f"**Record table** `{table.name}` over {', '.join(table.domain.names)} "
                f"({table.domain.cells:,} cells, never formed): the workload's marginals are "
                f"released with **ResidualPlanner** ({self.objective} objective), measured from "
                "marginal counts of the records.")
        if self.session.noise != "Gaussian":
            lead += "  ⚠ It needs **Gaussian** noise: choose it in the sidebar."
        if table.domain.inferred:
            lead += ("  ⚠ Its **domain was read from the records**: it can be simulated, but a "
                     "release is refused until the domain is declared or discovered privately "
                     "(Workload page, card 'Record table').")
        res = self.shown
        if res is None:
            return lead + f"  No table release yet; budget of the table: {self.ledger().remaining()}."
        r = res.release
        if res.simulated:
            what = (f"**Simulation** (seed {r.seed}, throwaway ledger, nothing spent; not a "
                    "release and not downloadable)")
        else:
            what = f"**Released** (OS CSPRNG via opendp, no seed; table spent: {res.spent})"
        error = (f"analytic RMSE {r.analytic_rmse:.4g}, {res.seconds:.2f} s.  95 % intervals: "
                 f"{r.CI_METHODS['gaussian']}." if r.interval_method == "analytic" else
                 f"{res.seconds:.2f} s; {r.inference} inference: consistent, non-negative marginals, "
                 f"no analytic error and no intervals (simulate to measure the error).")
        return (lead + f"\n\n{what}: {r.answers.size:,} answers in {len(res.marginals)} marginals, "
                f"{r.noise.label} (ρ = {r.rho:.4g}), {error}")

    def ledger_text(self) -> str:
        led, t = self.ledger(), self.session.table
        return "" if led is None else f"**Spent on the table `{t.name}`:** {led.summary()}."

    def ledger_frame(self) -> pd.DataFrame:
        """The table's whole stored ledger (every session's spends), one row per spend,
        reservation and stage: ``history()``'s :data:`LEDGER_COLUMNS` (empty without a table)."""
        led = self.ledger()
        if led is None:
            return pd.DataFrame(columns=LEDGER_COLUMNS)
        return led.history()[LEDGER_COLUMNS]

    def _ledger_changed(self) -> None:
        self.gate.run("table-ledger", lambda: on_session_loop(lambda: [h() for h in self._hooks]))

    def controls(self) -> pn.Column:
        objective = pn.widgets.RadioButtonGroup.from_param(
            self.param.objective, options={"total variance": "sum", "worst query": "max"})
        return pn.Column(pn.pane.Markdown("**Table release:** ResidualPlanner objective"),
                         objective, visible=self.param.active, sizing_mode="stretch_width")

    def _options(self) -> dict:
        res = self.shown
        if res is None:
            return {"(no release yet)": 0}
        return {f"{i + 1}. {marginal_name(p)} ({p['answer'].size:,} cells)": i
                for i, p in enumerate(res.marginals)}

    def results(self) -> pn.Column:
        """Summary, marginal picker, the marginal's chart, its cells, downloads, the table's ledger."""
        summary = pn.pane.Markdown(self.summary(), sizing_mode="stretch_width")
        self.exports: dict = {}
        pick = pn.widgets.Select(**{_LABEL: "Marginal"}, options=self._options(),
                                 value=self.marginal, width=360)
        pick.param.watch(lambda e: setattr(self, "marginal", e.new), "value")
        plot = pn.pane.HoloViews(self.marginal_plot(), sizing_mode="stretch_width", height=480)
        caption = pn.pane.Markdown(self.marginal_caption(), sizing_mode="stretch_width")
        drawn = {"key": (id(self.shown), id(self.last), self.objective)}
        cells = TableSlot(lambda frame: answers_table(frame, "fit_data_stretch"), self.frame())
        downloads = self.download_buttons("Download table release ({})")
        ledger, table, ledger_update = ledger_panes(self.ledger_text, self.ledger_frame, 5)

        def redraw(*_):
            # one redraw per change, each model replaced once (two replacements of the chart in
            # one message left the browser with a reference to a model it never received)
            key = (id(self.shown), id(self.last), self.objective)
            with pn.io.hold():  # one message to the browser for all its changes
                if key != drawn["key"]:  # a new result: everything; else only the marginal
                    drawn["key"] = key
                    summary.object = self.summary()
                    options = self._options()
                    if options != pick.options:
                        pick.options = options
                    cells.show(self.frame())
                    self.show_downloads(downloads)
                if pick.value != self.marginal:
                    pick.value = self.marginal
                plot.object = self.marginal_plot()
                caption.object = self.marginal_caption()
        self._hooks.append(ledger_update)
        # held and drawn on the event loop, never from the thread that set `last`
        self.param.watch(lambda *_: self.gate.run("table", lambda: on_session_loop(redraw)),
                         ["shown", "last", "objective", "marginal"])
        self.session.param.watch(lambda *_: self.gate.run("table-summary", lambda: on_session_loop(
            lambda: (setattr(summary, "object", self.summary()), ledger_update()))),
            ["noise", "epsilon", "delta", "workload", "table"])
        return pn.Column(
            self.error_alert(), summary, pick, caption, plot,
            FigureExport("table-release", "marginal", self.marginal_plot,
                         report=self.session.report, into=self.exports),
            pn.pane.Markdown("**Released cells** of every marginal with their analytic standard "
                             "error and 95 % interval (exactly what the downloads hold; no true "
                             "answer is computed)."), cells, pn.Row(*downloads),
            pn.pane.Markdown("**Privacy ledger of the table**"), ledger, table,
            loading=self.param.busy, sizing_mode="stretch_width")
