"""Accuracy first on the Compare page: the ε each mechanism needs for an error the user states.

For a target -- ±t counts on 95 % of queries (95 % interval half-widths), an RMSE per query, or
a std of at most t on every query -- :class:`AccuracyFirst` gives each mechanism's smallest ε,
the SVD bound's ε as a floor (RMSE and worst query: it bounds the mean squared error), and the
metric over ε, all from :mod:`dpexplorer.accuracy` (the RMSE in closed form from
``rmse(ε) = sqrt(unit TSE/m) · s(ε)``, HDMM Prop. 4; the others from each mechanism's
:func:`~dpexplorer.accuracy.error_profile`).  Data-dependent mechanisms are estimated by
:func:`dpexplorer.epsilon_for` on the session's dataset, treated as public (seeded, nothing spent).
"""

from __future__ import annotations

import logging
import math
import operator
import threading
from collections import OrderedDict

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn
import param
from bokeh.models.widgets.tables import NumberFormatter

import dpexplorer as dpx

from .live_plot import LivePlot
from .serving import COLOR as _COLOR
from .serving import LABEL as _LABEL
from .serving import TableSlot
from .tasks import Jobs, TaskCancelled, build_lock, percent

__all__ = ["AccuracyFirst", "PrivacySentence", "MODES", "TARGET_METRICS", "epsilon_bars", "target_curve_plot"]

log = logging.getLogger(__name__)


#: The page's two questions (widget label -> value).
MODES = {"Error at this ε": "error", "ε for this error": "epsilon"}
#: The targets a user can state (widget label -> dpexplorer.accuracy metric).
TARGET_METRICS = {"± counts on 95 % of queries": "ci95", "RMSE per query": "rmse",
                  "Std on every query (worst query)": "max"}

#: Read-only outputs.
_OUT = {"constant": True, "precedence": -1}

ADAPTIVE_NOTE = ("adapts to the data: its error has no formula, so the ε it needs depends on "
                 "the data ('Estimate by simulation' studies it on the selected dataset)")
NO_FLOOR = ("no floor for '± counts on 95 % of queries': the SVD bound limits the mean squared "
            "error, not the width of most intervals")


def _family_key(noise) -> tuple:
    """What the ε of a target depends on besides the strategy: the noise family, δ, calibration."""
    return (type(noise).__name__, getattr(noise, "delta", 0.0), getattr(noise, "calibration", None))


def _keep(cache: OrderedDict, key, value, size: int) -> None:
    """Store ``value`` as the newest entry of ``cache``, dropping the oldest beyond ``size``."""
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)


class AccuracyFirst(param.Parameterized):
    """State and numbers of the Compare page's "ε for this error" mode: the page hands it each
    comparison it shows (:meth:`refresh`); it computes :attr:`table` and :attr:`curve` while the
    mode is ``"epsilon"``.  ``"ci95"``: ±target counts on ``share`` of the queries, each a
    ``level`` interval of a release."""

    mode = param.Selector(default="error", objects=list(MODES.values()), doc="""
        'error': the error at the sidebar's ε; 'epsilon': each mechanism's ε for the target.""")
    metric = param.Selector(default="ci95", objects=list(TARGET_METRICS.values()), doc="""
        'ci95': ±target counts on 95 % of queries (95 % intervals); 'rmse': RMSE per query;
        'max': the worst query's standard deviation.""")
    target = param.Number(default=50.0, bounds=(0, None), inclusive_bounds=(False, True),
                          doc="The error to meet, in counts (> 0).")
    table = param.DataFrame(None, allow_None=True, **_OUT, doc="""Per mechanism: label, epsilon, rho,
        error (at that ε), ratio (to the floor's ε), exact, note (:func:`dpexplorer.accuracy.target_table`).""")
    curve = param.DataFrame(None, allow_None=True, **_OUT, doc="""The metric over ε per mechanism:
        mechanism, label, epsilon, error (the floor as 'svd_bound'); attrs target, metric.""")
    busy = param.Boolean(False, **_OUT, doc="True while error profiles are being computed.")
    error = param.String("", **_OUT, doc="Last error of this mode ('' after a success).")
    sim_busy = param.Boolean(False, **_OUT, doc="True while a study of data-dependent mechanisms runs.")
    sim_done = param.Integer(0, **_OUT, doc="Data-dependent mechanisms simulated so far in the study.")
    sim_total = param.Integer(0, **_OUT, doc="Data-dependent mechanisms the running study simulates.")
    sim_status = param.String("", **_OUT, doc="What the simulation study is doing, or why it cannot run.")

    #: Share of queries and confidence level of the "ci95" target.
    share = 0.95
    level = 0.95
    #: Interval profiles kept (least recently used dropped).
    keep = 64
    #: Seeded runs per ε of a simulation and the relative precision of its ε (epsilon_for's).
    sim_trials = 20
    sim_rtol = 0.02
    #: Largest workload (cells) a simulation study is offered for.
    sim_max_cells = 4096

    def __init__(self, session, submit, lock, report, **params):
        self.session, self._submit, self._lock, self._report = session, submit, lock, report
        self._base = self._noise = self._pending = self._done = None
        self._profiles: OrderedDict = OrderedDict()
        self._sims: OrderedDict = OrderedDict()
        self._sim_jobs, self._sim_cancel = Jobs(lock), None
        super().__init__(**params)
        self.param.watch(lambda *_: self.update(), ["mode", "metric", "target"])
        # a simulation study is of one dataset and seed: their rows follow the sidebar
        session.param.watch(lambda *_: self.update(), ["dataset", "seed"])

    def _set(self, **values) -> None:
        with param.edit_constant(self):
            self.param.update(**values)

    def set_target(self, value) -> bool:
        """Set :attr:`target` from user input; ``False`` (and a message) if not a positive number."""
        try:
            self.target = float(value)
        except (TypeError, ValueError):
            message = (f"The error to meet must be a positive number of counts, got {value!r}: "
                       "type it in the 'Target error' box")
            self._set(error=message)
            self._report(message)
            return False
        return True

    def refresh(self, base, noise) -> None:
        """Take the comparison shown (``base``: W, frame with unit_tse, svdb) at ``noise``."""
        self._base, self._noise = base, noise
        self.update()

    def update(self) -> None:
        """Recompute :attr:`table` and :attr:`curve` if the mode asks for them and an input changed."""
        with self._lock:
            base, noise, metric = self._base, self._noise, self.metric
            if self.mode != "epsilon" or base is None or noise is None:
                return
            key = (id(base), base.W, _family_key(noise), metric, self.target,
                   self.session.dataset, self.session.seed)
            if key == self._done or key == self._pending:
                return
            missing = [] if metric == "rmse" else [n for n in self._built(base) if self._profile_key(
                base, n, noise, metric) not in self._profiles]
            if not missing:
                self._show(key, base, noise, self.target, metric)
                return
            self._pending = key
            self._set(busy=True)
            self._submit(self._profile_job, key, base, noise, missing, metric)

    @staticmethod
    def _built(base) -> list[str]:
        units = base.frame["unit_tse"].to_numpy(dtype=float)
        return list(base.frame["mechanism"][np.isfinite(units)])

    @staticmethod
    def _profile_key(base, name, noise, metric) -> tuple:
        return (base.W, name, type(noise).__name__, metric, getattr(base, "objective", "sum"))

    def _profile_job(self, post, key, base, noise, names, metric) -> None:
        """Worker: the ``metric`` profile of every built mechanism (strategies from the cache)."""
        made, cache = {}, self.session.cache
        for name in names:
            # the builder parameters of the strategy the comparison shows (its objective)
            try:
                params = ({"objective": getattr(base, "objective", "sum")}
                          if "objective" in dpx.registry.get(name).params else None)
                with build_lock(cache, (base.W, name, noise.norm)):
                    made[name] = dpx.accuracy.error_profile(
                        base.W, name, noise, metric, level=self.level, share=self.share,
                        params=params, cache=cache)
            except Exception as exc:  # noqa: BLE001 - one mechanism failing is shown in its row
                if not isinstance(exc, ValueError):
                    log.exception("error profile of %s failed", name)
                made[name] = f"no error profile: {exc}"

        def done():
            for name, prof in made.items():
                _keep(self._profiles, self._profile_key(base, name, noise, metric), prof, self.keep)
            if self._pending == key:
                self._pending = None
            self._set(busy=False)
            self.update()
        post(done)

    def _show(self, key, base, noise, t: float, metric: str) -> None:
        """Set :attr:`table` and :attr:`curve` from the profiles (RMSE: closed form); the SVD floor
        holds for the worst query's std too (``max_i Var_i ≥ TSE/m``)."""
        W = base.W
        if metric == "rmse":
            profs, failed = dpx.accuracy.rmse_profiles(base.frame, W.m, noise), {}
        else:
            found = {n: self._profiles.get(self._profile_key(base, n, noise, metric))
                     for n in self._built(base)}
            failed = {n: p for n, p in found.items() if isinstance(p, str)}
            profs = {n: p for n, p in found.items() if p is not None and n not in failed}
        sims, rows = self._sims.get(self._sim_key(base)) or {}, []
        for r in base.frame.itertuples():
            row = {"mechanism": r.mechanism, "label": r.label, "epsilon": math.nan,
                   "rho": math.nan, "error": math.nan, "exact": True, "note": "",
                   "kind": "analytic", "epsilon_low": math.nan, "epsilon_high": math.nan}
            if bool(getattr(r, "data_dependent", False)):
                row.update(exact=False, kind="simulation", note=ADAPTIVE_NOTE)
                if sims.get(r.mechanism) is not None:
                    row.update(dpx.accuracy.simulated_target_row(sims[r.mechanism], self.session.dataset))
            elif not math.isfinite(float(r.unit_tse)):
                row["note"] = r.note or "no analytic error for this workload"
            else:
                row.update(dpx.accuracy.analytic_target_row(
                    profs.get(r.mechanism), t, noise, failed.get(r.mechanism, "")))
                e = row["epsilon"] if math.isfinite(row["epsilon"]) else math.nan
                row.update(epsilon_low=e, epsilon_high=e)  # exact: a band of zero width
            rows.append(row)
        floor, _, note = dpx.accuracy.svd_floor(base.svdb, W.m, t, noise, metric)
        curves = dict(profs)
        if math.isfinite(floor):
            curves["svd_bound"] = dpx.accuracy.svd_bound_profile(base.svdb, W.m, noise)
        df = dpx.accuracy.target_table(rows, floor, NO_FLOOR if metric == "ci95" else note, t, metric,
                                       noise, W)
        grid = dpx.accuracy.epsilon_grid(df["epsilon"].to_numpy(dtype=float), floor)
        try:
            cv = dpx.accuracy.error_curves(curves, noise, grid)
        except Exception:  # noqa: BLE001 - curves that cannot be drawn are left out
            log.exception("target curves failed")
            cv = dpx.accuracy.error_curves({}, noise, grid)
        cv.attrs.update(target=t, metric=metric, points=dpx.accuracy.target_points(df, curves))
        self._done = key
        self._set(table=df, curve=cv, error="")

    def _sim_key(self, base) -> tuple | None:
        """What a simulation study's numbers depend on (its rows are shown only if it matches)."""
        if base is None or self._noise is None:
            return None
        return (base.W, self.session.dataset, self.metric, self.target,
                _family_key(self._noise), self.session.seed, self.sim_trials, self.sim_rtol)

    def simulation_data(self):
        """``(name, x)`` of the session's dataset for a study on the shown workload; ValueError
        without a comparison, for a dataset that cannot load or whose cells do not match, or a
        workload above :attr:`sim_max_cells`."""
        base = self._base
        if base is None:
            raise ValueError("there is no comparison yet: wait for the table to fill in")
        W = base.W
        if W.n > self.sim_max_cells:
            raise ValueError(f"the workload has {W.n:,} cells; a simulation study is offered up "
                             f"to {self.sim_max_cells:,} cells (each ε costs "
                             f"{self.sim_trials} runs of every mechanism)")
        ds = self.session.data()
        if ds.x.size != W.n:
            raise ValueError(f"the dataset {ds.name!r} has {ds.x.size:,} cells but the workload "
                             f"has {W.n:,}: pick a dataset of {W.n:,} cells in the sidebar, or "
                             f"build a workload over {ds.x.size:,} cells on the Workload page")
        return ds.name, ds.x

    def simulation_label(self) -> str:
        return f"Estimate by simulation on {self.session.dataset}"

    def simulate(self, names=None) -> bool:
        """Start the study of ``names`` (default: the data-dependent mechanisms) in the background:
        each one's ε with a 95 % band, :func:`dpexplorer.epsilon_for` with the sidebar's seed and
        :attr:`sim_trials` runs per ε.  ``False`` and a message if it cannot start."""
        with self._lock:
            if self.sim_busy:
                return self._sim_refuse("a simulation study is already running: wait for it or "
                                        "cancel it")
            if self.mode != "epsilon":
                return self._sim_refuse("switch the question to 'ε for this error' first")
            base, noise = self._base, self._noise
            try:
                dataset, x = self.simulation_data()
            except Exception as exc:  # noqa: BLE001 - a dataset that cannot be loaded, too
                return self._sim_refuse(f"Simulation not started: {exc}")
            frame = base.frame
            adaptive = frame["data_dependent"].astype(bool) if "data_dependent" in frame else []
            todo = list(frame["mechanism"][adaptive] if names is None else names)
            if not todo:
                return self._sim_refuse("Simulation not started: the comparison has no "
                                        "data-dependent mechanism")
            cancel = self._sim_cancel = threading.Event()
            self._set(sim_busy=True, sim_done=0, sim_total=len(todo),
                      sim_status=f"Simulating {len(todo)} mechanisms on {dataset} "
                                 f"(seed {self.session.seed}, {self.sim_trials} runs per ε)…")
            self._sim_jobs.submit(self._sim_job, self._sim_key(base), base, noise, dataset, x, todo,
                                  self.target, self.metric, self.session.seed, cancel)
            return True

    def _sim_refuse(self, message: str) -> bool:
        self._set(sim_status=message)
        self._report(message)
        return False

    def cancel_simulation(self) -> None:
        """Stop the study within one seeded run (the mechanisms finished before keep their rows)."""
        if self._sim_cancel is not None and self.sim_busy:
            self._sim_cancel.set()
            self._set(sim_status="Cancelling the simulation…")

    def stop(self) -> None:
        """The page's session ended: a study under way stops within its current run."""
        if self._sim_cancel is not None:
            self._sim_cancel.set()

    def wait_simulation(self, timeout: float = 600.0) -> bool:
        """Block until the simulation study is done (tests, scripts)."""
        return self._sim_jobs.wait(timeout)

    def _sim_job(self, post, key, base, noise, dataset, x, names, target, metric, seed,
                 cancel) -> None:
        """Worker: :func:`dpexplorer.epsilon_for` per mechanism; ``cancel`` checked before each run."""
        def check(_runs: int) -> None:
            if cancel.is_set():
                raise TaskCancelled("simulation study")

        found = {}
        for i, name in enumerate(names):
            if cancel.is_set():
                break
            try:
                found[name] = dpx.epsilon_for(
                    base.W, name, target, metric, noise=noise, level=self.level,
                    share=self.share, x=x, trials=self.sim_trials, seed=seed,
                    rtol=self.sim_rtol, cache=self.session.cache, callback=check)
            except TaskCancelled:  # cancelled during this mechanism: it is not simulated
                break
            except Exception as exc:  # noqa: BLE001 - one mechanism failing is shown in its row
                if not isinstance(exc, ValueError):
                    log.exception("simulation of %s failed", name)
                found[name] = f"simulation failed: {exc}"

            def progress(i=i, results=dict(found)):
                _keep(self._sims, key, results, 8)
                self._set(sim_done=i + 1)
                self._done = None  # the same target, new rows
                self.update()
            post(progress)
        missed = [dpx.registry.get(n).label for n in names if n not in found]
        stopped = cancel.is_set() and bool(missed)
        text = (f"Simulated {len(found)} of {len(names)} mechanisms on {dataset} "
                f"(seed {seed}, {self.sim_trials} runs per ε)"
                + (f": cancelled. Not simulated: {', '.join(missed)}." if stopped else "."))
        post(lambda: self._set(sim_busy=False, sim_status=text))

    def summary(self) -> str:
        """The mode's result in words (Markdown)."""
        df = self.table
        what = dpx.accuracy.target_words(self.target, self.metric, self.level, self.share)
        if df is None:
            return f"**ε for {what}:** computing…" if self.busy else f"**ε for {what}**"
        ok = df[np.isfinite(df["epsilon"].to_numpy(dtype=float))]
        text = f"**ε for {what}** ({df.attrs.get('noise', '')} noise): "
        if len(ok):
            best = ok.iloc[0]
            text += f"the least is **{best['label']}** with **ε = {best['epsilon']:.3g}**"
            if len(ok) > 1:
                text += f"; the most, {ok.iloc[-1]['label']} with ε = {ok.iloc[-1]['epsilon']:.3g}"
            text += ". Less ε is more private, so a smaller bar is better."
        else:
            text += "no mechanism has a computable ε yet."
        floor = df.attrs.get("floor_epsilon", math.nan)
        if math.isfinite(floor):
            text += (f" No strategy of the matrix mechanism can meet it with less than "
                     f"ε = {floor:.3g} (the SVD bound).")
        else:
            text += f" ({df.attrs.get('floor_note', '')}.)"
        if self._sims.get(self._sim_key(self._base)):
            text += (f" Data-dependent mechanisms: ε estimated by simulation on "
                     f"{self.session.dataset} (seed {self.session.seed}, {self.sim_trials} "
                     "trials), a study on data treated as public.")
        return text + (" Updating…" if self.busy else "")

    def controls(self) -> pn.Row:
        """The mode switch, the target's kind and the target box."""
        mode = pn.widgets.RadioButtonGroup(options=MODES, value=self.mode, **{_LABEL: "Question"})
        mode.link(self, value="mode", bidirectional=True)
        asked = pn.bind(lambda m: m == "epsilon", self.param.mode)
        metric = pn.widgets.RadioButtonGroup(options=TARGET_METRICS, value=self.metric, visible=asked,
                                             **{_LABEL: "Target kind"})
        metric.link(self, value="metric", bidirectional=True)
        box = pn.widgets.FloatInput(value=self.target, start=None, step=5.0, width=160, visible=asked,
                                    **{_LABEL: "Target error (counts)"})

        def typed(event):
            if event.new is None or event.new == self.target:
                return
            if not (isinstance(event.new, int | float) and event.new > 0
                    and math.isfinite(event.new)):
                self.set_target(f"{event.new}")
                box.value = self.target  # show the target still in use
                return
            self.set_target(event.new)
        box.param.watch(typed, "value")
        self.param.watch(lambda e: setattr(box, "value", e.new), "target")
        self._widgets = {"mode": mode, "metric": metric, "target": box}
        return pn.Row(mode, metric, box, sizing_mode="stretch_width")

    def simulation_panel(self) -> pn.Column:
        """The study of the data-dependent mechanisms: button, cancel, progress and status."""
        busy, small = self.param.sim_busy, {"font-size": "90%"}
        label = pn.bind(lambda _: self.simulation_label(), self.session.param.dataset)
        run = pn.widgets.Button(**{_LABEL: label, _COLOR: "primary"}, disabled=busy,
                                description="Runs DAWA, MWEM, … on the selected dataset with "
                                            "seeded noise to estimate the ε each needs (a study: "
                                            "nothing is released or spent)")
        cancel = pn.widgets.Button(**{_LABEL: "Cancel simulation", _COLOR: "light"}, visible=busy)
        progress = pn.indicators.Progress(
            value=pn.bind(percent, self.param.sim_done, self.param.sim_total), max=100,
            visible=busy, width=240, bar_color="primary")
        status = pn.pane.Markdown(self.param.sim_status, sizing_mode="stretch_width", styles=small)
        run.on_click(lambda e: self.simulate())
        cancel.on_click(lambda e: self.cancel_simulation())
        self._widgets_sim = {"run": run, "cancel": cancel, "progress": progress, "status": status}
        return pn.Column(
            pn.pane.Markdown(
                "**Data-dependent mechanisms** (DAWA, MWEM, …): their ε depends on the data. "
                "A seeded simulation on the selected dataset estimates it, with a 95 % band "
                "(a study on data treated as public: nothing is released or spent).",
                sizing_mode="stretch_width", styles=small),
            pn.Row(run, cancel, progress), status, sizing_mode="stretch_width")

    def figures(self, page, export) -> tuple[pn.Column, pn.Column, object]:
        """The mode's parts of the Compare ``page`` (its gate, redraws and panes): summary, ε bars,
        table and study; the metric over ε; and a binding, True while the mode is "error".
        ``export(name, make)``: a figure's download control."""
        shown = page.gate.mirror(self, ["busy", "mode"])

        def key():  # what fixes the charts' structure: the comparison, metric and mechanisms
            t = self.table
            if page._shown is None or t is None:
                return None
            drawn = t["mechanism"][np.isfinite(t["epsilon"].to_numpy(dtype=float))]
            return (page._shown, t.attrs.get("metric"), tuple(sorted(drawn)))
        summary = pn.pane.Markdown(self.summary(), sizing_mode="stretch_width")
        bars = LivePlot(epsilon_bars, self.table, key(), height=380)
        table = TableSlot(self.table_widget, self.table_value())
        curve = LivePlot(target_curve_plot, self.curve, key(), height=400)
        page._panes.update(target_summary=summary, target_bars=bars, target_table=table,
                           target_curve=curve)

        def redraw(*_):
            summary.object = self.summary()
            table.show(self.table_value())
            bars.update(self.table, key())
            curve.update(self.curve, key())
        self.param.watch(lambda *_: page._redraw("target", redraw), ["table", "curve", "busy"])
        asked = pn.bind(operator.eq, shown.param.mode, "epsilon")
        return (pn.Column(summary, bars.pane, export("epsilon-bars", lambda: epsilon_bars(self.table)),
                          table, self.simulation_panel(), loading=shown.param.busy, visible=asked,
                          sizing_mode="stretch_width"),
                pn.Column(curve.pane, export("target-curve", lambda: target_curve_plot(self.curve)),
                          visible=asked, sizing_mode="stretch_width"),
                pn.bind(operator.eq, shown.param.mode, "error"))

    def table_widget(self, frame: pd.DataFrame | None = None) -> pn.widgets.Tabulator:
        """Read-only table of ``frame`` (default :meth:`table_value`, the rows of :attr:`table`)."""
        return pn.widgets.Tabulator(
            self.table_value() if frame is None else frame, show_index=False, disabled=True,
            sizing_mode="stretch_width", layout="fit_data_table",
            titles={"label": "mechanism", "epsilon": "ε needed", "rho": "ρ (zCDP)",
                    "error": "error at that ε", "ratio": "ε / SVD-bound ε"},
            formatters={"epsilon": NumberFormatter(format="0.0000"),
                        "rho": NumberFormatter(format="0.00000"),
                        "error": NumberFormatter(format="0,0.00"),
                        "ratio": NumberFormatter(format="0.000"),
                        "note": {"type": "textarea"}},
            widths={"note": 360})

    def table_value(self) -> pd.DataFrame:
        """The columns of :attr:`table` the table widget shows."""
        cols = ["label", "epsilon", "rho", "error", "ratio", "note"]
        if self.table is None:
            return pd.DataFrame({c: pd.Series(dtype=object if c in ("label", "note") else float)
                                 for c in cols})
        return self.table[cols]


def epsilon_bars(df: pd.DataFrame | None) -> hv.Overlay:
    """Bars of each mechanism's ε for the target (log y), the SVD bound's ε as a dashed floor."""
    if df is None or not np.isfinite(df["epsilon"].to_numpy(dtype=float)).any():
        return hv.Overlay([hv.Text(0.5, 0.5, "No ε yet").opts(
            xaxis=None, yaxis=None, responsive=True, height=360, shared_axes=False,
            toolbar=None)])
    a = df.attrs
    ok = df[np.isfinite(df["epsilon"].to_numpy(dtype=float)) & (df["epsilon"] > 0)]
    floor = float(a.get("floor_epsilon", math.nan))
    has_floor = math.isfinite(floor) and floor > 0
    values = list(ok["epsilon"]) + ([floor] if has_floor else [])
    what = dpx.accuracy.target_words(a.get("target", 0), a.get("metric", "rmse"), 0.95, 0.95)
    bars = hv.Bars(ok, hv.Dimension("label", label="Mechanism"),
                   [hv.Dimension("epsilon", label="ε needed"), "error"]).opts(
        logy=True, tools=["hover"], color="#2ca02c", responsive=True, height=360,
        default_tools=["save", "reset"], shared_axes=False, framewise=True,
        ylim=(min(values) / 1.5, max(values) * 1.5), title=f"ε needed for {what}")
    if not has_floor:
        return hv.Overlay([bars])
    line = hv.HLine(floor, label=f"SVD bound's ε {floor:.3g}").opts(
        color="#d62728", line_dash="dashed", line_width=2)
    return (bars * line).opts(shared_axes=False)


def target_curve_plot(df: pd.DataFrame | None) -> hv.Overlay:
    """The chosen metric over ε per mechanism (log-log), the target as a line, each ε marked."""
    if df is None or df.empty:
        return hv.Overlay([hv.Curve([], "epsilon", "error")])
    t = float(df.attrs.get("target", math.nan))
    ylabel = {"rmse": "RMSE (counts)", "max": "worst query's std (counts)"}.get(
        df.attrs.get("metric", "rmse"), "± counts on 95 % of queries")
    eps, err = hv.Dimension("epsilon", label="ε"), hv.Dimension("error", label=ylabel)
    elems = []
    for name, part in df.groupby("mechanism", sort=False):
        c = hv.Curve(part, eps, [err], label=part["label"].iloc[0]).opts(
            logx=True, logy=True, tools=["hover"], line_width=2, framewise=True)
        elems.append(c.opts(color="#d62728", line_dash="dashed") if name == "svd_bound" else c)
    elems.append(hv.HLine(t).opts(color="black", line_dash="dotted", line_width=2))
    points = df.attrs.get("points")
    if points is not None and len(points):
        elems.append(hv.Scatter(points, eps, [err, "label"], label="ε needed").opts(
            color="black", size=7, tools=["hover"]))
    lo, hi = float(df["epsilon"].min()), float(df["epsilon"].max())
    elems.append(hv.Text(lo, t * 1.25, f"target {t:g}").opts(text_align="left", text_font_size="10pt"))
    e = df["error"].to_numpy(dtype=float)
    ylim = (min(e[e > 0].min(), t) / 1.5, max(e.max(), t) * 1.5) if (e > 0).any() else (None, None)
    return hv.Overlay(elems).opts(
        responsive=True, height=380, legend_position="right", logx=True, logy=True,
        shared_axes=False, ylim=ylim, xlim=(lo / 1.2, hi * 1.2),
        title=f"{ylabel} over ε; the target (dotted) is met where each curve crosses it")


class PrivacySentence:
    """The sidebar's plain words: :func:`dpexplorer.accuracy.describe_privacy`, then how close 95 %
    of the answers are from HB's (else Identity's) ``ci95`` profile, computed once per workload
    and noise family in the background; none above :attr:`max_queries` or :attr:`max_cells`."""

    #: Mechanisms tried, in order, for the sentence.
    mechanisms = ("hb", "identity")
    max_queries = 50_000
    max_cells = 4096

    def __init__(self, session, on_ready=None):
        self.session = session
        #: Called (on the session's event loop) when a profile computed in the background is ready.
        self.on_ready = on_ready
        self._profiles: OrderedDict = OrderedDict()
        self._lock = threading.RLock()
        self._jobs = Jobs(self._lock)
        self._pending: set = set()

    def wait(self, timeout: float = 120.0) -> bool:
        """Block until the profiles being computed are ready (tests, scripts)."""
        return self._jobs.wait(timeout)

    def _profile(self, W, noise):
        """HB's (or Identity's) interval profile, or ``"pending"`` while it is computed."""
        key = (W, type(noise).__name__)
        with self._lock:
            if key in self._profiles:
                self._profiles.move_to_end(key)
                return self._profiles[key]
            if key not in self._pending:
                self._pending.add(key)
                self._jobs.submit(self._job, key, W, noise)
        return "pending"

    def _job(self, post, key, W, noise) -> None:
        prof = None
        for name in self.mechanisms:
            try:
                prof = dpx.accuracy.error_profile(W, name, noise, "ci95", cache=self.session.cache)
                break
            except Exception:  # noqa: BLE001 - try the next mechanism; none: no sentence
                log.debug("no interval profile of %s for %s", name, W.name, exc_info=True)

        def done():
            self._pending.discard(key)
            _keep(self._profiles, key, prof, 4)
            if self.on_ready is not None:
                self.on_ready()
        post(done)

    def text(self) -> str:
        """Markdown for the sidebar (never raises: bad settings give a short note)."""
        s = self.session
        try:
            noise = s.noise_model()
        except ValueError as exc:
            return f"*These settings are not valid: {exc}*"
        delta = noise.delta if isinstance(noise, dpx.Gaussian) else 0.0
        words = dpx.describe_privacy(noise.epsilon, delta)
        W = s.workload
        if W is None:
            return words
        if W.m > self.max_queries or W.n > self.max_cells:
            return words + (f"\n\nYour workload has {W.m:,} queries: see the Compare page for "
                            "what this ε buys.")
        prof = self._profile(W, noise)
        if prof == "pending":
            return words + "\n\n*Working out what this ε buys on your workload…*"
        if prof is None:
            return words
        t = prof.error(noise)
        kind = "Laplace" if isinstance(noise, dpx.Laplace) else "Gaussian"
        at = f"ε = {noise.epsilon:.3g}" + (f", δ = {delta:g}" if delta else "")
        answers = f"your {W.m:,} answers" if W.m > 1 else "your answer"
        share = f"{prof.share * 100:g} % of " if W.m > 1 else ""
        return (words + f"\n\n**On this workload:** with {prof.label} and {kind} noise at {at}, "
                f"{share}{answers} fall within **±{dpx.accuracy.count_text(t)} counts** of the truth, "
                f"each with {prof.level * 100:g} % confidence.")
