"""Accuracy first on the Compare page: the ε each mechanism needs for an error the user states.

The Compare page shows "the error at this ε".  Its switch turns the question
around ("ε for this error"): the user types a target -- "±50 counts on 95 %
of queries" (the half-widths of the 95 % confidence intervals a release
reports), an RMSE per query, or a standard deviation of at most t counts on
every query (the worst query's) -- and :class:`AccuracyFirst` gives every
mechanism's smallest ε meeting it, with the SVD bound's ε as the floor
(RMSE and worst query: the bound limits the mean squared error, which neither
exceeds, but not a percentile of the interval widths), a bar chart of those ε
and the privacy–accuracy curve of the chosen metric with the target marked.

The numbers are :mod:`dpexplorer.accuracy`'s, exact for every
data-independent mechanism:

* RMSE: ``rmse(ε) = sqrt(unit TSE/m) · s(ε)`` from the comparison's stored
  unit-noise TSE (HDMM Prop. 4), inverted in closed form for the sidebar's
  noise (:func:`dpexplorer.accuracy.noise_for_std`) -- arithmetic only.
* ±t on 95 % of queries, and the worst query's std (``max_i sqrt(Var_i)``,
  metric ``"max"``): each mechanism's
  :func:`dpexplorer.accuracy.error_profile` (its per-query interval
  half-widths or variances, computed once per workload, mechanism, metric and
  noise family in a background job, strategies from the session's cache),
  then ``ErrorProfile.epsilon_for`` per target.

Data-dependent mechanisms (DAWA, MWEM, ...) have no formula for their error,
so none for ε: their rows say so until the user asks for a study on the
session's dataset (:meth:`AccuracyFirst.simulate`, the button "Estimate by
simulation on <dataset>"): :func:`dpexplorer.epsilon_for` with ``x`` the
dataset's counts, treated as public benchmark data, ``seed`` the sidebar's
simulation seed and :attr:`AccuracyFirst.sim_trials` seeded runs per ε, which
gives ε and a 95 % band for it.  It runs in a background job, one mechanism
after another with the progress shown, and can be cancelled (it stops
within one seeded run); the rows of the mechanisms simulated say
"simulation (seed …, … trials) on <dataset>".
Nothing is released and nothing is spent.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn
import param
from bokeh.models.widgets.tables import NumberFormatter

import dpexplorer as dpx

from .serving import COLOR as _COLOR
from .serving import LABEL as _LABEL
from .tasks import Jobs, TaskCancelled, build_lock, percent

__all__ = ["AccuracyFirst", "PrivacySentence", "MODES", "TARGET_METRICS", "epsilon_bars", "target_curve_plot"]

log = logging.getLogger(__name__)


#: The page's two questions (widget label -> value).
MODES = {"Error at this ε": "error", "ε for this error": "epsilon"}
#: The targets a user can state (widget label -> dpexplorer.accuracy metric).
TARGET_METRICS = {"± counts on 95 % of queries": "ci95", "RMSE per query": "rmse",
                  "Std on every query (worst query)": "max"}

#: Columns of the target table (:func:`dpexplorer.accuracy.target_table`).
TARGET_COLUMNS = dpx.accuracy.TARGET_COLUMNS

ADAPTIVE_NOTE = ("adapts to the data: its error has no formula, so the ε it needs depends on "
                 "the data ('Estimate by simulation' studies it on the selected dataset)")
NO_FLOOR = ("no floor for '± counts on 95 % of queries': the SVD bound limits the mean squared "
            "error, not the width of most intervals")


def _family_key(noise) -> tuple:
    """What the ε of a target depends on besides the strategy: the noise family, δ, calibration."""
    return (type(noise).__name__, getattr(noise, "delta", 0.0), getattr(noise, "calibration", None))


class AccuracyFirst(param.Parameterized):
    """State and numbers of the Compare page's "ε for this error" mode.

    The page hands it every comparison it shows (:meth:`refresh`: the
    unit-noise figures and the sidebar's noise); it computes :attr:`table`
    and :attr:`curve` when the mode is ``"epsilon"``.

    Parameters
    ----------
    mode : {"error", "epsilon"}
        The page's question: the error at the sidebar's ε, or the ε for :attr:`target`.
    metric : {"ci95", "rmse", "max"}
        ``"ci95"``: ±target counts on ``share`` of the queries, each a
        ``level`` confidence interval of a release; ``"rmse"``: RMSE per
        query; ``"max"``: the worst query's standard deviation (every query's
        std at most the target).
    target : float
        The error to meet, in counts (> 0).
    """

    mode = param.Selector(default="error", objects=list(MODES.values()), doc="""
        'error': the error at the sidebar's ε; 'epsilon': each mechanism's ε for the target.""")
    metric = param.Selector(default="ci95", objects=list(TARGET_METRICS.values()), doc="""
        'ci95': ±target counts on 95 % of queries (95 % intervals); 'rmse': RMSE per query;
        'max': the worst query's standard deviation.""")
    target = param.Number(default=50.0, bounds=(0, None), inclusive_bounds=(False, True),
                          doc="The error to meet, in counts (> 0).")
    table = param.DataFrame(default=None, allow_None=True, constant=True, precedence=-1, doc="""
        Per mechanism: label, epsilon, rho, error (the metric at that ε), ratio (ε over the
        floor's ε), exact, note; attrs floor_epsilon, floor_note, target, metric, noise.""")
    curve = param.DataFrame(default=None, allow_None=True, constant=True, precedence=-1, doc="""
        The chosen metric over ε per mechanism: mechanism, label, epsilon, error
        (the floor as mechanism 'svd_bound' for the RMSE); attrs target, metric.""")
    busy = param.Boolean(default=False, constant=True, precedence=-1,
                         doc="True while error profiles are being computed.")
    error = param.String(default="", constant=True, precedence=-1,
                         doc="Last error of this mode ('' after a success).")
    sim_busy = param.Boolean(default=False, constant=True, precedence=-1,
                             doc="True while a simulation of the data-dependent mechanisms runs.")
    sim_done = param.Integer(default=0, constant=True, precedence=-1,
                             doc="Data-dependent mechanisms simulated so far in the running study.")
    sim_total = param.Integer(default=0, constant=True, precedence=-1,
                              doc="Data-dependent mechanisms the running study simulates.")
    sim_status = param.String(default="", constant=True, precedence=-1,
                              doc="What the simulation study is doing, or why it cannot run.")

    #: Share of queries and confidence level of the "ci95" target.
    share = 0.95
    level = 0.95
    #: Interval profiles kept (least recently used dropped).
    keep = 64
    #: Seeded runs per ε of a simulation (enough for the 95 % quantile of "ci95"), and the
    #: relative precision of its ε (dpx.epsilon_for's ``trials`` and ``rtol``).
    sim_trials = 20
    sim_rtol = 0.02
    #: Largest workload (cells) a simulation study is offered for.
    sim_max_cells = 4096

    def __init__(self, session, submit, lock, report, **params):
        self.session = session
        self._submit = submit
        self._lock = lock
        self._report = report
        self._base = None
        self._noise = None
        self._profiles: OrderedDict = OrderedDict()
        self._pending = None
        self._done = None
        self._sims: OrderedDict = OrderedDict()
        self._sim_jobs = None
        self._sim_cancel = None
        super().__init__(**params)
        self.param.watch(lambda *_: self.update(), ["mode", "metric", "target"])
        # a simulation study is of one dataset and seed: their rows follow the sidebar
        session.param.watch(lambda *_: self.update(), ["dataset", "seed"])

    def _set(self, **values) -> None:
        with param.edit_constant(self):
            self.param.update(**values)

    def set_target(self, value) -> bool:
        """Set :attr:`target` from user input; ``False`` (and a message) if it is not a positive number."""
        try:
            self.target = float(value)
        except (TypeError, ValueError):
            message = (f"The error to meet must be a positive number of counts, got {value!r}: "
                       "type it in the 'Target error' box")
            self._set(error=message)
            self._report(message)
            return False
        return True

    # ------------------------------------------------------------ numbers
    def refresh(self, base, noise) -> None:
        """Take the comparison the page shows (``base``: W, frame with unit_tse, svdb) at ``noise``."""
        self._base, self._noise = base, noise
        self.update()

    def update(self) -> None:
        """Recompute :attr:`table` and :attr:`curve` if the mode asks for them and an input changed."""
        with self._lock:
            base, noise = self._base, self._noise
            if self.mode != "epsilon" or base is None or noise is None:
                return
            key = (id(base), base.W, _family_key(noise), self.metric, self.target,
                   self.session.dataset, self.session.seed)
            if key == self._done or key == self._pending:
                return
            if self.metric == "rmse":
                self._show(key, *self._rmse(base, noise, self.target))
                return
            metric = self.metric
            names = self._built(base)
            missing = [n for n in names
                       if self._profile_key(base, n, noise, metric) not in self._profiles]
            if not missing:
                self._show(key, *self._profiled(base, noise, self.target, metric))
                return
            self._pending = key
            self._set(busy=True)
            self._submit(self._profile_job, key, base, noise, missing, metric)

    @staticmethod
    def _built(base) -> list[str]:
        units = base.frame["unit_tse"].to_numpy(dtype=float)
        return list(base.frame["mechanism"][np.isfinite(units)])

    @staticmethod
    def _params(base, name) -> dict:
        """The builder parameters of the strategy the comparison shows (its objective)."""
        mech = dpx.registry.get(name)
        objective = getattr(base, "objective", "sum")
        return {"objective": objective} if "objective" in mech.params else {}

    @staticmethod
    def _profile_key(base, name, noise, metric) -> tuple:
        return (base.W, name, type(noise).__name__, metric, getattr(base, "objective", "sum"))

    def _profile_job(self, post, key, base, noise, names, metric) -> None:
        """Worker: the ``metric`` profile of every built mechanism (strategies from the cache)."""

        made = {}
        cache = self.session.cache
        for name in names:
            try:
                with build_lock(cache, (base.W, name, noise.norm)):
                    made[name] = dpx.accuracy.error_profile(
                        base.W, name, noise, metric, level=self.level, share=self.share,
                        params=self._params(base, name) or None, cache=cache)
            except Exception as exc:  # noqa: BLE001 - one mechanism failing is shown in its row
                if not isinstance(exc, ValueError):
                    log.exception("error profile of %s failed", name)
                made[name] = f"no error profile: {exc}"

        def done():
            for name, prof in made.items():
                self._profiles[self._profile_key(base, name, noise, metric)] = prof
            while len(self._profiles) > self.keep:
                self._profiles.popitem(last=False)
            if self._pending == key:
                self._pending = None
            self._set(busy=False)
            self.update()
        post(done)

    def _rows(self, base, solve) -> list[dict]:
        """One row per mechanism of the comparison; ``solve(name, row)`` gives the analytic ones.

        Data-dependent rows take the simulation study of the current
        workload, target, noise, dataset and seed, if one was run.
        """
        sims = self._sims.get(self._sim_key(base))
        rows = []
        for r in base.frame.itertuples():
            row = {"mechanism": r.mechanism, "label": r.label, "epsilon": math.nan,
                   "rho": math.nan, "error": math.nan, "exact": True, "note": "",
                   "kind": "analytic", "epsilon_low": math.nan, "epsilon_high": math.nan}
            if bool(getattr(r, "data_dependent", False)):
                row.update(exact=False, kind="simulation", note=ADAPTIVE_NOTE)
                row.update(self._simulated_row(r.mechanism, sims))
            elif not math.isfinite(float(r.unit_tse)):
                row["note"] = r.note or "no analytic error for this workload"
            else:
                row.update(solve(r), epsilon_low=math.nan, epsilon_high=math.nan)
                if math.isfinite(row["epsilon"]):
                    row.update(epsilon_low=row["epsilon"], epsilon_high=row["epsilon"])
            rows.append(row)
        return rows

    def _rmse(self, base, noise, t: float):
        """ε for an RMSE target: each mechanism's profile from its unit TSE (closed form)."""
        profs = dpx.accuracy.rmse_profiles(base.frame, base.W.m, noise)
        return self._solved(base, noise, t, "rmse", profs, {})

    def _profiled(self, base, noise, t: float, metric: str):
        """ε for '±t on 95 % of queries' or the worst query's std from each mechanism's profile.

        The worst query's std has the SVD bound's floor too: ``max_i Var_i``
        is at least the mean variance ``TSE/m``, which the bound limits.
        """
        profs, failed = {}, {}
        for name in self._built(base):
            prof = self._profiles.get(self._profile_key(base, name, noise, metric))
            if isinstance(prof, str):
                failed[name] = prof
            elif prof is not None:
                profs[name] = prof
        return self._solved(base, noise, t, metric, profs, failed)

    def _solved(self, base, noise, t: float, metric: str, profs: dict, failed: dict):
        """Rows, floor and curves of the profiles (``dpx.accuracy``'s solvers, SVD-bound floor)."""
        rows = self._rows(base, lambda r: dpx.accuracy.analytic_target_row(
            profs.get(r.mechanism), t, noise, failed.get(r.mechanism, "")))
        W = base.W
        floor, _, note = dpx.accuracy.svd_floor(base.svdb, W.m, t, noise, metric)
        if metric == "ci95":
            note = NO_FLOOR
        curves = dict(profs)
        if math.isfinite(floor):
            curves["svd_bound"] = dpx.accuracy.svd_bound_profile(base.svdb, W.m, noise)
        return rows, floor, note, curves

    def _show(self, key, rows, floor, floor_note, curves) -> None:
        t, metric, noise = self.target, self.metric, self._noise
        df = dpx.accuracy.target_table(rows, floor, floor_note, t, metric, noise, self._base.W)
        grid = dpx.accuracy.epsilon_grid(df["epsilon"].to_numpy(dtype=float), floor)
        try:
            cv = dpx.accuracy.error_curves(curves, noise, grid)
        except Exception:  # noqa: BLE001 - curves that cannot be drawn are left out
            log.exception("target curves failed")
            cv = dpx.accuracy.error_curves({}, noise, grid)
        cv.attrs.update(target=t, metric=metric, points=dpx.accuracy.target_points(df, curves))
        self._done = key
        self._set(table=df, curve=cv, error="")

    # -------------------------------------------------- simulation study
    def _sim_key(self, base) -> tuple | None:
        """What a simulation study's numbers depend on (the rows show a study only if it matches)."""
        if base is None or self._noise is None:
            return None
        return (base.W, self.session.dataset, self.metric, self.target,
                _family_key(self._noise), self.session.seed, self.sim_trials, self.sim_rtol)

    def _data_dependent(self, base) -> list[str]:
        frame = base.frame
        if "data_dependent" not in frame:
            return []
        return list(frame["mechanism"][frame["data_dependent"].astype(bool)])

    def simulation_data(self):
        """``(name, x)`` of the session's dataset for a study on the shown workload.

        Raises
        ------
        ValueError
            If there is no comparison yet, the dataset cannot be loaded, its
            cells do not match the workload's, or the workload is larger than
            :attr:`sim_max_cells`.
        """
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
        """The button's words: "Estimate by simulation on <dataset>"."""
        return f"Estimate by simulation on {self.session.dataset}"

    def simulate(self, names=None) -> bool:
        """Start the simulation study of the data-dependent mechanisms (background job).

        For each mechanism, :func:`dpexplorer.epsilon_for` with the
        session's dataset as ``x`` (treated as public benchmark data), the
        sidebar's simulation seed and :attr:`sim_trials` runs per ε: its ε
        for the current target with a 95 % band.  Nothing is released or
        spent.  ``names`` restricts the study (default every data-dependent
        mechanism of the comparison).  ``False`` and a message if it cannot
        start (no comparison, a dataset that does not fit, a study running).
        """
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
            todo = self._data_dependent(base) if names is None else list(names)
            if not todo:
                return self._sim_refuse("Simulation not started: the comparison has no "
                                        "data-dependent mechanism")
            key = self._sim_key(base)
            cancel = self._sim_cancel = threading.Event()
            self._set(sim_busy=True, sim_done=0, sim_total=len(todo),
                      sim_status=f"Simulating {len(todo)} mechanisms on {dataset} "
                                 f"(seed {self.session.seed}, {self.sim_trials} runs per ε)…")
            if self._sim_jobs is None:
                self._sim_jobs = Jobs(self._lock)
            self._sim_jobs.submit(self._sim_job, key, base, noise, dataset, x, todo,
                                  self.target, self.metric, self.session.seed, cancel)
            return True

    def _sim_refuse(self, message: str) -> bool:
        self._set(sim_status=message)
        self._report(message)
        return False

    def cancel_simulation(self) -> None:
        """Stop the study within one seeded run of the mechanism being simulated (the rows
        of the mechanisms finished before stay; that mechanism is not simulated)."""
        if self._sim_cancel is not None and self.sim_busy:
            self._sim_cancel.set()
            self._set(sim_status="Cancelling the simulation…")

    def stop(self) -> None:
        """The page's session ended: a study under way stops within its current run (nothing
        is shown any more; a closed tab's study held the server's threads for minutes)."""
        if self._sim_cancel is not None:
            self._sim_cancel.set()

    def wait_simulation(self, timeout: float = 600.0) -> bool:
        """Block until the simulation study is done (tests, scripts)."""
        return True if self._sim_jobs is None else self._sim_jobs.wait(timeout)

    def _sim_job(self, post, key, base, noise, dataset, x, names, target, metric, seed,
                 cancel) -> None:
        """Worker: :func:`dpexplorer.epsilon_for` by simulation, one mechanism after another.

        ``cancel`` (a :class:`threading.Event`) is checked before every seeded run, through
        ``epsilon_for``'s ``callback``: a mechanism's study is :attr:`sim_trials` runs at
        each of the ε its bisection tries (hundreds of runs), so a Cancel waits for one run,
        not for the whole mechanism.
        """
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
                self._sims[key] = results
                self._sims.move_to_end(key)
                while len(self._sims) > 8:
                    self._sims.popitem(last=False)
                self._set(sim_done=i + 1)
                self._done = None  # the same target, new rows
                self.update()
            post(progress)
        stopped = cancel.is_set() and len(found) < len(names)

        def done():
            label = dpx.registry.get
            text = (f"Simulated {len(found)} of {len(names)} mechanisms on {dataset} "
                    f"(seed {seed}, {self.sim_trials} runs per ε)"
                    + (": cancelled." if stopped else ".")
                    + (" Not simulated: " + ", ".join(label(n).label for n in names
                                                        if n not in found) + "."
                       if stopped else ""))
            self._set(sim_busy=False, sim_status=text)
        post(done)

    def _simulated_row(self, name: str, sims: dict | None) -> dict:
        """The row of a data-dependent mechanism from the matching study, or nothing."""
        res = None if sims is None else sims.get(name)
        return {} if res is None else dpx.accuracy.simulated_target_row(res, self.session.dataset)

    # ------------------------------------------------------------- text
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
                worst = ok.iloc[-1]
                text += f"; the most, {worst['label']} with ε = {worst['epsilon']:.3g}"
            text += ". Less ε is more private, so a smaller bar is better."
        else:
            text += "no mechanism has a computable ε yet."
        floor = df.attrs.get("floor_epsilon", math.nan)
        if math.isfinite(floor):
            text += (f" No strategy of the matrix mechanism can meet it with less than "
                     f"ε = {floor:.3g} (the SVD bound).")
        else:
            text += f" ({df.attrs.get('floor_note', '')}.)"
        sims = self._sims.get(self._sim_key(self._base))
        if sims:
            text += (f" Data-dependent mechanisms: ε estimated by simulation on "
                     f"{self.session.dataset} (seed {self.session.seed}, {self.sim_trials} "
                     "trials), a study on data treated as public.")
        if self.busy:
            text += " Updating…"
        return text

    # --------------------------------------------------------------- UI
    def controls(self) -> pn.Row:
        """The mode switch, the target's kind and the target box."""
        mode = pn.widgets.RadioButtonGroup(options=MODES, value=self.mode, **{_LABEL: "Question"})
        mode.link(self, value="mode", bidirectional=True)
        metric = pn.widgets.RadioButtonGroup(options=TARGET_METRICS, value=self.metric,
                                             visible=self.mode == "epsilon",
                                             **{_LABEL: "Target kind"})
        metric.link(self, value="metric", bidirectional=True)
        box = pn.widgets.FloatInput(value=self.target, start=None, step=5.0, width=160,
                                    visible=self.mode == "epsilon",
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

        def shown(e):
            metric.visible = box.visible = e.new == "epsilon"
        self.param.watch(shown, "mode")
        self._widgets = {"mode": mode, "metric": metric, "target": box}
        return pn.Row(mode, metric, box, sizing_mode="stretch_width")

    def simulation_panel(self) -> pn.Column:
        """The study of the data-dependent mechanisms: button, cancel, progress and status."""
        run = pn.widgets.Button(**{_LABEL: self.simulation_label()}, **{_COLOR: "primary"},
                                description="Runs DAWA, MWEM, … on the selected dataset with "
                                            "seeded noise to estimate the ε each needs (a study: "
                                            "nothing is released or spent)")
        cancel = pn.widgets.Button(**{_LABEL: "Cancel simulation"}, **{_COLOR: "light"},
                                   visible=False)
        progress = pn.indicators.Progress(
            value=pn.bind(percent, self.param.sim_done, self.param.sim_total), max=100,
            visible=False, width=240, bar_color="primary")
        status = pn.pane.Markdown(self.sim_status, sizing_mode="stretch_width",
                                  styles={"font-size": "90%"})
        run.on_click(lambda e: self.simulate())
        cancel.on_click(lambda e: self.cancel_simulation())

        def follow(*_):
            run.disabled = self.sim_busy
            cancel.visible = progress.visible = self.sim_busy
            status.object = self.sim_status
        self.param.watch(follow, ["sim_busy", "sim_done", "sim_total", "sim_status"])
        self.session.param.watch(
            lambda *_: setattr(run, _LABEL, self.simulation_label()), "dataset")
        self._widgets_sim = {"run": run, "cancel": cancel, "progress": progress, "status": status}
        return pn.Column(
            pn.pane.Markdown(
                "**Data-dependent mechanisms** (DAWA, MWEM, …): their ε depends on the data. "
                "A seeded simulation on the selected dataset estimates it, with a 95 % band "
                "(a study on data treated as public: nothing is released or spent).",
                sizing_mode="stretch_width", styles={"font-size": "90%"}),
            pn.Row(run, cancel, progress), status, sizing_mode="stretch_width")

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
        df = self.table
        cols = ["label", "epsilon", "rho", "error", "ratio", "note"]
        if df is None:
            return pd.DataFrame({c: pd.Series(dtype=float if c not in ("label", "note")
                                              else object) for c in cols})
        return df[cols]


def epsilon_bars(df: pd.DataFrame | None) -> hv.Overlay:
    """Bars of each mechanism's ε for the target (log y), the SVD bound's ε as a dashed floor."""
    if df is None or not np.isfinite(df["epsilon"].to_numpy(dtype=float)).any():
        return hv.Overlay([hv.Text(0.5, 0.5, "No ε yet").opts(
            xaxis=None, yaxis=None, responsive=True, height=360, shared_axes=False,
            toolbar=None)])
    a = df.attrs
    ok = df[np.isfinite(df["epsilon"].to_numpy(dtype=float)) & (df["epsilon"] > 0)]
    floor = float(a.get("floor_epsilon", math.nan))
    values = list(ok["epsilon"]) + ([floor] if math.isfinite(floor) and floor > 0 else [])
    bars = hv.Bars(ok, hv.Dimension("label", label="Mechanism"),
                   [hv.Dimension("epsilon", label="ε needed"), "error"]).opts(
        logy=True, tools=["hover"], color="#2ca02c", responsive=True, height=360,
        default_tools=["save", "reset"], shared_axes=False, framewise=True,
        ylim=(min(values) / 1.5, max(values) * 1.5),
        title=f"ε needed for {dpx.accuracy.target_words(a.get('target', 0), a.get('metric', 'rmse'), 0.95, 0.95)}")
    if not (math.isfinite(floor) and floor > 0):
        return hv.Overlay([bars])
    line = hv.HLine(floor, label=f"SVD bound's ε {floor:.3g}").opts(
        color="#d62728", line_dash="dashed", line_width=2)
    return (bars * line).opts(shared_axes=False)


def target_curve_plot(df: pd.DataFrame | None) -> hv.Overlay:
    """The chosen metric over ε per mechanism (log-log), the target as a line, each ε marked."""
    if df is None or df.empty:
        return hv.Overlay([hv.Curve([], "epsilon", "error")])
    t = float(df.attrs.get("target", math.nan))
    metric = df.attrs.get("metric", "rmse")
    ylabel = {"rmse": "RMSE (counts)", "max": "worst query's std (counts)"}.get(
        metric, "± counts on 95 % of queries")
    elems = []
    for name, part in df.groupby("mechanism", sort=False):
        c = hv.Curve(part, hv.Dimension("epsilon", label="ε"),
                     [hv.Dimension("error", label=ylabel)], label=part["label"].iloc[0]).opts(
            logx=True, logy=True, tools=["hover"], line_width=2, framewise=True)
        if name == "svd_bound":
            c = c.opts(color="#d62728", line_dash="dashed")
        elems.append(c)
    elems.append(hv.HLine(t).opts(color="black", line_dash="dotted", line_width=2))
    points = df.attrs.get("points")
    if points is not None and len(points):
        elems.append(hv.Scatter(points, hv.Dimension("epsilon", label="ε"),
                                [hv.Dimension("error", label=ylabel), "label"],
                                label="ε needed").opts(color="black", size=7, tools=["hover"]))
    elems.append(hv.Text(float(df["epsilon"].min()), t * 1.25, f"target {t:g}").opts(
        text_align="left", text_font_size="10pt"))
    err = df["error"].to_numpy(dtype=float)
    ylim = (min(err[err > 0].min(), t) / 1.5, max(err.max(), t) * 1.5) if (err > 0).any() \
        else (None, None)
    return hv.Overlay(elems).opts(
        responsive=True, height=380, legend_position="right", logx=True, logy=True,
        shared_axes=False, ylim=ylim,
        xlim=(float(df["epsilon"].min()) / 1.2, float(df["epsilon"].max()) * 1.2),
        title=f"{ylabel} over ε; the target (dotted) is met where each curve crosses it")


class PrivacySentence:
    """The sidebar's plain words: what ε (and δ) mean, and what they buy on the current workload.

    :func:`dpexplorer.accuracy.describe_privacy` for the settings, then one
    sentence in the manner of :func:`dpexplorer.accuracy.accuracy_sentence`:
    "With HB and Laplace noise at ε = 1, 95 % of your 32,896 range answers
    are within ±43 counts of the truth (each with 95 % confidence)."  The
    number is the ``ci95`` metric of HB's :class:`~dpexplorer.accuracy.ErrorProfile`
    (Identity where HB does not apply), computed once per workload and noise
    family in the background (the sentence follows when it is ready), so a
    change of ε or δ is arithmetic.  Workloads larger than
    :attr:`max_queries` queries or :attr:`max_cells` cells get the first part
    only (their interval widths are not worth computing on every change).
    """

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
        """HB's (or Identity's) interval profile, or ``"pending"`` while it is computed in the background."""
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
            self._profiles[key] = prof
            while len(self._profiles) > 4:
                self._profiles.popitem(last=False)
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
