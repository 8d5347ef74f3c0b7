"""ReleaseView: the "Release" page.

One click makes **one real release** of the session workload's answers on the selected dataset,
``dpx.release(x, W, name, noise, ledger=session.ledger)`` with any registered mechanism: noise
from the OS CSPRNG through opendp (no seed), refused by the dataset's ledger before anything is
drawn if over the budget, every answer with its standard error and 95 % interval.  A
**simulation** (throwaway ledger, seeds derived from the simulation seed) shows the answers'
spread (5–95 % bands) and the empirical RMSE.  Both are tasks of the page (``view.run_release()``,
``view.last.release``, ``view.csv_text()``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import numpy as np
import pandas as pd
import panel as pn
import param
from bokeh.models.widgets.tables import NumberFormatter

import dpexplorer as dpx
from dpexplorer import mechanism as _mechanism
from dpexplorer.core import registry
from dpexplorer.queries.matrix import Matrix
from dpexplorer.strategies import marginal_inference

from .compare_view import too_large
from .exports import FigureExport
from .serving import COLOR as _BUTTON
from .serving import LABEL as _LABEL
from .serving import TableSlot, on_session_loop
from .session import Page, Session, readable_headers, release_stamp, side_by_side
from .session import exception_message as _message
from .table_release import (
    LEDGER_COLUMNS,
    OUT,
    TABLE_MECHANISM,
    Downloads,
    TableRelease,
    answers_table,
    charged,
    ledger_panes,
    metadata_csv,
    start_run,
)
from .tasks import Task, percent

__all__ = ["ReleaseView", "ReleaseRecord", "Simulation", "SimulationFailed", "DataDependentRelease",
           "MAX_SHOWN", "TRIAL_SEED_TAG"]

#: Most queries drawn in the answers chart; larger workloads show a fixed random sample.
MAX_SHOWN = 2000

#: Mixed into the simulation seed for the trials (``SeedSequence([seed, TRIAL_SEED_TAG]).spawn(trials)``).
TRIAL_SEED_TAG = _mechanism.TRIAL_SEED_TAG

HEADER = """\
## Release

Release the answers of the **current workload** (built on the Workload page) on the
selected dataset with one mechanism.  **Run release** spends the sidebar's ε (and δ
for Gaussian noise) once from the dataset's budget and records it in its privacy
ledger (below); a release that would go over the budget is refused before any noise
is drawn.  The noise comes from the operating system's secure random generator through
the vetted samplers of the OpenDP library: there is **no seed**, and nothing
in the downloads lets anyone regenerate it.  Every answer comes with its standard error
and a 95 % confidence interval.  The **simulation** repeats the mechanism on the same
data many times with the sidebar's *simulation seed*, *outside* the ledger, only to show
how much the answers vary: it is a teaching aid, not a release.  When the workload holds
**marginals of a record table** (Workload page, card *Record table*), the page releases them
from the table's records with ResidualPlanner (Gaussian noise) and draws each marginal with
its intervals; *Simulate* then makes one seeded simulated release instead.
"""

#: Data-dependent mechanisms release through :func:`dpexplorer.release` too (no ``strategy``,
#: ``analytic_rmse`` NaN).
DataDependentRelease = dpx.Release

#: Short names of the confidence-interval methods for the page's table (the downloads keep the keys).
_CI_SHORT = {"gaussian": "exact (Gaussian)", "laplace_single": "exact (Laplace)",
             "laplace_gauss": "bound (Gauss)", "discrete_laplace_single": "exact (discrete Laplace)",
             "discrete_laplace_chebyshev": "bound (Chebyshev)",
             "discrete_gaussian_subgaussian": "bound (sub-Gaussian)", "none": "none (data-dependent)"}


@dataclass
class ReleaseRecord:
    """The last real release (no seed) on the dataset named ``dataset``, and what the page draws:
    ``true_answers`` ``W x``, shape (m,), NOT private, shown only to compare; ``shown``, the
    queries drawn (all, or a fixed sample of :data:`MAX_SHOWN`); ``spent``, the ledger after it."""

    release: object
    dataset: str
    true_answers: np.ndarray
    shown: np.ndarray
    data_dependent: bool
    spent: str = ""

    @property
    def rmse(self) -> float:
        """Empirical RMSE of this one release over all its queries (counts)."""
        return dpx.error.empirical_rmse(self.release.answers, self.true_answers)


@dataclass(frozen=True)
class Simulation(_mechanism.AnswerBands):
    """Trials of a mechanism on the same data, outside the session ledger: the engine's
    :class:`~dpexplorer.mechanism.AnswerBands` and the ``dataset`` and ``workload`` they ran on."""

    dataset: str = ""
    workload: Matrix | None = None


class SimulationFailed(RuntimeError):
    """The release was made, but the simulation after it failed (the release is kept)."""


def _mechanism_options() -> dict[str, str]:
    return {f"{m.label} ({name}){' — data-dependent' if m.data_dependent else ''}": name
            for name, m in registry.REGISTRY.items() if m.private}  # study variants never release


def _released_layers(df: pd.DataFrame, kd, lo, hi, hover=("released",)) -> list:
    """95 % intervals ``lo .. hi`` (none if ``lo`` is None) and the points ``df["released"]``
    over ``df``'s first column (``kd``); ``hover``: the columns the points show."""
    key, released = df.columns[0], df["released"]
    layers = [] if lo is None else [hv.ErrorBars(
        pd.DataFrame({key: df[key], "released": released, "minus": released - lo,
                      "plus": hi - released}), kdims=[kd], vdims=["released", "minus", "plus"],
        label="95 % confidence interval").opts(color="#d95f02", alpha=0.35, line_width=1)]
    points = hv.Scatter(df, kdims=[kd], vdims=list(hover), label="released (noisy)").opts(
        color="#d95f02", size=2.5, alpha=0.6)
    return [*layers, points.opts(tools=["hover"]) if len(hover) > 1 else points]


#: The inferences the page offers, in words (``dpexplorer/docs/inference.md``).
INFERENCE_LABELS = {
    "least_squares": "Least squares (analytic error)",
    "nonnegative": "Non-negative least squares (bootstrap intervals)",
    "grem_lnn": "GReM-LNN: consistent, non-negative marginals (no intervals)",
    "pgm": "Private-PGM: consistent, non-negative marginals (no intervals)",
    "native": "The mechanism's own estimate",
}


class ReleaseView(Downloads, Page, param.Parameterized):
    """The "Release" page around one :class:`~dpexplorer.ui.session.Session` (``session``, a new
    one if omitted); ``background``: releases and simulations in worker threads (True), in the
    caller's thread (False), or the first only in a served page (None, the default).
    """

    mechanism = param.Selector(default="hb", objects=registry.names(private=True), doc="""
        Registered mechanism to release with (data-dependent ones run through mechanism.run).""")
    inference = param.Selector(default="least_squares", objects=list(INFERENCE_LABELS), doc="""
        How x̂ (or a table's marginals) is inferred from the noisy answers (post-processing);
        only the ones that apply to the running mechanism are offered.""")
    trials = param.Integer(default=50, bounds=(0, 2000), doc="""
        Trials of the simulation (0: none).  Run on the data outside the session ledger.""")

    last = param.ClassSelector(class_=ReleaseRecord, default=None, allow_None=True, **OUT,
                               doc="The last real release (kept on errors).")
    simulation = param.ClassSelector(class_=Simulation, default=None, allow_None=True, **OUT,
                                     doc="The last simulation.")
    busy = param.Boolean(default=False, **OUT)
    progress = param.Integer(default=0, bounds=(0, None), **OUT,
                             doc="Trials done in the running simulation.")
    error = param.String(default="", **OUT, doc="Message of the last failed action ('' after a success).")

    #: Columns of the ledger table: what, when, ε/δ/ρ, mode (of ``PrivacyLedger.history()``).
    LEDGER_COLUMNS = LEDGER_COLUMNS

    def __init__(self, session: Session | None = None, background: bool | None = None,
                 **params):
        self._setup_page(session, background)  # session, lock, tasks, tab gate
        self._layout, self._ledger_hooks = None, []
        type(self).param.mechanism.objects = registry.names(private=True)  # registered later too
        super().__init__(**params)
        #: Releases from the session's record table (when the workload is over its domain).
        self.tables = TableRelease(self)
        # refresh when other pages spend too
        self.session.param.watch(lambda *_: self._ledger_refreshed(), ["ledger_version", "dataset"])

    def _inputs(self):
        """``(dataset, x, W, noise)`` for a run; ValueError with a clear message if they don't fit."""
        ds = self.session.data()
        x = np.asarray(ds.x, dtype=float)
        W = self.session.workload
        if W is None:
            raise ValueError("there is no workload yet: build one on the Workload page")
        if W.n != x.size:
            raise ValueError(
                f"the workload `{W.name}` is over {W.n:,} cells (domain {_shape(W.domain)}) but "
                f"the dataset {ds.name!r} has {x.size:,} cells (shape {_shape(x.shape)}); build a workload "
                f"over {x.size:,} cells on the Workload page or pick a dataset with {W.n:,} cells")
        if len(W.domain) > 1 and tuple(W.domain) != x.shape:
            raise ValueError(f"the workload's domain {tuple(W.domain)} does not match the shape "
                             f"{x.shape} of the dataset {ds.name!r}")
        mech = registry.get(self.mechanism)
        reason = None if mech.data_dependent else too_large(W, mech.name)
        if reason is not None:  # a big 1D workload: only the mechanisms without n × n matrices
            raise ValueError(f"{mech.label} {reason}; or choose Identity, H2, HB, Privelet or "
                             f"GreedyH above")
        return ds, x, W, self.session.noise_model()

    def run_release(self, trials: int | None = None) -> bool:
        """Make one real release (recorded in the session ledger), then simulate ``trials``.

        A task of the page; returns as :func:`~dpexplorer.ui.table_release.start_run` (a failing
        simulation keeps the release).  Over the session's record table the release is made from
        its records (:meth:`TableRelease.run`).
        """
        if self.tables.active:
            return self.tables.run(release=True, inference=self.inference)
        return self._start(self._release_work, "a release is already running; wait for it to finish",
                           self.trials if trials is None else trials, int(self.session.seed))

    def run_trials(self, trials: int | None = None, seed: int | None = None) -> bool:
        """Only the simulation (nothing recorded), a task as :meth:`run_release`; over a record
        table one simulated release seeded by the simulation seed."""
        if self.tables.active:
            return self.tables.run(release=False, inference=self.inference)
        shown = self.last.shown if self.last is not None else None
        seed = int(self.session.seed) if seed is None else int(seed)
        return self._start(self._simulate, "a run is in progress; wait for it to finish",
                           self.trials if trials is None else trials, seed, shown)

    def _start(self, work, busy: str, *args) -> bool:
        def done(sim):
            if sim is not None:
                self._set(simulation=sim, error="")
        return start_run(self, work, busy, self.mechanism, *args, name=work.__name__, done=done,
                         kept=lambda task: isinstance(task.exception, SimulationFailed), progress=0)

    def _release_work(self, task: Task, inputs, name: str, trials: int, seed: int) -> Simulation | None:
        """The release, then its simulation (a task); the release is shown before the simulation runs."""
        ds, x, W, noise = inputs
        ledger = self.session.ledger
        # one call for every mechanism: dpx.release runs data-dependent ones through
        # mechanism.run and draws from the OS CSPRNG (no seed)
        rel = charged(task, self.session, ledger,
                      lambda: dpx.release(x, W, name, noise, ledger=ledger, inference=self.inference))
        if rel.interval_method == "parametric bootstrap":
            rel.bootstrap()  # its intervals (seconds of solves) here, not in the page's redraw
        record = ReleaseRecord(rel, ds.name, W.matvec(x.ravel()), self.shown_queries(W.m),
                               registry.get(name).data_dependent, ledger.summary())
        task.post(lambda: self._released(record))
        if not trials:
            return None
        try:
            return self._simulate(task, inputs, name, trials, seed, record.shown)
        except Exception as exc:
            raise SimulationFailed(f"the release succeeded but the simulation failed: "
                                   f"{_message(exc)}") from exc

    def _released(self, record: ReleaseRecord) -> None:
        """Show a release just made (on the page's event loop)."""
        self.session.releases.append(record.release)
        self._ledger_refreshed()
        self._set(last=record, simulation=None, error="")

    @staticmethod
    def shown_queries(m: int, limit: int = MAX_SHOWN) -> np.ndarray:
        """All queries if ``m <= limit``, else a fixed (public, seed 0) sample of ``limit``."""
        if m <= limit:
            return np.arange(m)
        return np.sort(np.random.default_rng(0).choice(m, size=limit, replace=False))

    def _simulate(self, task: Task, inputs, name: str, trials: int, seed: int,
                  shown=None) -> Simulation:
        """Trials on ``PrivateData(x)`` with a throwaway ledger (:func:`dpx.mechanism.answer_bands`);
        the trials done are posted to :attr:`progress`."""
        if not isinstance(trials, (int, np.integer)) or trials < 1:
            raise ValueError(f"the number of trials must be a positive integer, got {trials!r}")
        ds, x, W, noise = inputs
        shown = self.shown_queries(W.m) if shown is None or len(shown) > W.m else np.asarray(shown)

        def progress(t):
            task.report(t / trials)
            task.post(lambda: self._set(progress=t))
        b = _mechanism.answer_bands(x, W, name, noise, int(trials), int(seed), shown,
                                    progress=progress, inference=self.inference)
        fields = {f.name: getattr(b, f.name) for f in dataclasses.fields(b)}  # shallow: the ledger
        return Simulation(**fields, dataset=ds.name, workload=W)

    def metadata(self) -> dict:
        """The last release's metadata plus the dataset name and what the dataset has spent in all."""
        rec = self._last_or_raise()
        return {**rec.release.metadata(), "dataset": rec.dataset,
                "dataset_spent_after_release": rec.spent}

    def csv_text(self) -> str:
        """Answers as CSV (``release.to_frame()``) under ``# key: value`` metadata lines (:func:`metadata_csv`)."""
        return metadata_csv("dpexplorer release", self.metadata(), self.last.release.to_frame())

    def json_text(self) -> str:
        """``release.to_json()`` with the dataset name added."""
        rec = self._last_or_raise()
        return json.dumps({**json.loads(rec.release.to_json()), "dataset": rec.dataset,
                           "dataset_spent_after_release": rec.spent})

    def filename(self, ext: str) -> str:
        """Name of a download of the last release (``release.<ext>`` before one)."""
        if self.last is None:
            return f"release.{ext}"
        rel = self.last.release
        return f"release_{rel.mechanism}_eps{rel.epsilon:g}_{release_stamp(rel)}.{ext}"

    def rmse_table(self) -> pd.DataFrame:
        """Empirical vs analytic RMSE of the last release and simulation (counts)."""
        rec, sim = self.last, self.simulation
        rows = []
        if rec is not None:
            rows.append((f"this release ({rec.release.mechanism})", rec.rmse,
                         "empirical, 1 release"))
        if sim is not None:
            rows.append((f"simulation: {sim.trials} trials ({sim.mechanism})", sim.empirical_rmse,
                         "empirical, simulation"))
        if rec is not None:
            a = float(rec.release.analytic_rmse)
            rows.append(("analytic (expected)", a if math.isfinite(a) else math.nan,
                         "n/a: data-dependent mechanism" if rec.data_dependent else "HDMM Prop. 4"))
        return pd.DataFrame(rows, columns=["what", "rmse", "kind"])

    def ledger_frame(self) -> pd.DataFrame:
        """The selected dataset's whole stored ledger (every session's spends), one row per
        spend, reservation and stage: ``session.ledger.history()``'s :attr:`LEDGER_COLUMNS`."""
        return self.session.ledger.history()[self.LEDGER_COLUMNS]

    def ledger_text(self) -> str:
        led = self.session.ledger
        return (f"**Spent on `{self.session.dataset}`:** {led.summary()}.\n\n"
                "This is the dataset's whole ledger, shared by every session of this explorer and "
                f"kept across restarts (in `{led.path}`).  Every measurement is listed below with "
                "its ε, δ and zCDP cost ρ (ε²/2 for an ε-DP step, Δ₂²/(2σ²) for Gaussian noise); a "
                "multi-stage mechanism first *reserves* its whole cost (kind `reservation`), then "
                "lists its stages as `part_of` it, counted once.  The total is the better of two "
                "valid accountings: adding up ε (and δ), or adding up ρ and converting to (ε, δ) "
                "(Canonne, Kamath & Steinke 2020).  Simulations spend nothing.  A session may lower "
                "the budget, never raise it: raising is the data owner's act, in Python, "
                "`dpx.PrivacyLedger.open(path, dataset).set_budget(...)`.")

    def answers_plot(self):
        """True vs released answers of the shown queries (sorted by true answer) with 5–95 % bands."""
        rec, sim = self.last, self.simulation
        if rec is None:
            return hv.Curve([]).opts(title="No release yet", responsive=True, height=380)
        shown = rec.shown
        true = rec.true_answers[shown]
        # a count over time (the running total): drawn in time order, its band widening
        over_time = dpx.streaming.is_causal(rec.release.workload)
        order = np.argsort(shown if over_time else true, kind="stable")
        rank = np.arange(len(shown))
        df = pd.DataFrame({"rank": rank, "query": shown[order], "true": true[order],
                           "released": np.asarray(rec.release.answers)[shown][order]})
        kd = hv.Dimension("rank", label="step" if over_time else "query, sorted by true answer")
        layers = []
        if self._matches(sim, rec):
            band = pd.DataFrame({"rank": rank, "q05": sim.q05[order], "q95": sim.q95[order]})
            layers.append(hv.Area(band, kdims=[kd], vdims=["q05", "q95"],
                                  label=f"5–95 % over {sim.trials} simulated trials").opts(
                color="#4c72b0", alpha=0.35, line_alpha=0))
        lo = hi = None
        if not rec.data_dependent:
            ci = rec.release.confidence_intervals(0.95)
            lo = df["ci_low"] = ci["ci_low"].to_numpy()[shown][order]
            hi = df["ci_high"] = ci["ci_high"].to_numpy()[shown][order]
        layers += _released_layers(df, kd, lo, hi, [c for c in ("released", "query", "true", "ci_low",
                                                                 "ci_high") if c in df])
        layers.append(hv.Curve(df, kdims=[kd], vdims=["true", "query"],
                               label="true answer (not private)").opts(color="black", line_width=2))
        return self._overlay(layers, "released vs true answers", "random sample")

    def export_plot(self):
        """What a figure export of the release holds: released answers and their 95 % intervals.

        Only what the downloads hold (:meth:`answers_frame`), by query index: no true answer,
        order by it, simulated band, seed or generator state.  ``None`` before a release.
        """
        rec = self.last
        if rec is None:
            return None
        frame = rec.release.to_frame().iloc[rec.shown]
        df = pd.DataFrame({"query": frame["query"].to_numpy(),
                           "released": frame["answer"].to_numpy(dtype=float)})
        lo, hi = (None, None) if rec.data_dependent else (
            frame[c].to_numpy(dtype=float) for c in ("ci_low", "ci_high"))
        return self._overlay(_released_layers(df, hv.Dimension("query", label="query index"), lo, hi),
                             "released answers", "sample")

    def _overlay(self, layers: list, what: str, sample: str) -> hv.Overlay:
        n, shown = self.last.true_answers.size, len(self.last.shown)
        note = "" if shown == n else f" ({sample} of {shown:,} of {n:,} queries)"
        return hv.Overlay(layers).opts(
            title=f"{self.last.release.mechanism}: {what}{note}", responsive=True,
            height=380, legend_position="top_left", ylabel="answer (counts)")

    @staticmethod
    def _matches(sim: Simulation | None, rec: ReleaseRecord | None) -> bool:
        """Whether the simulation is of the release's mechanism, data, workload and queries."""
        return (sim is not None and rec is not None and sim.mechanism == rec.release.mechanism
                and sim.dataset == rec.dataset and sim.workload is rec.release.workload
                and np.array_equal(sim.shown, rec.shown))

    def _summary(self) -> str:
        rec = self.last
        if rec is None:
            s = self.session
            return (f"No release yet. **Run release** spends ε = {s.epsilon:g}"
                    + (f", δ = {s.delta:g}" if s.noise == "Gaussian" else "")
                    + f" from the budget of `{s.dataset}` ({s.ledger.remaining()}).\n\n"
                    + s.source_text())
        r = rec.release
        text = (f"**Released** {r.answers.size:,} answers of `{r.workload.name}` on `{rec.dataset}` "
                f"with **{r.mechanism}**, {r.noise.label} (ρ = {r.rho:.4g}); randomness: OS CSPRNG "
                f"via opendp ({r.sampler or 'per stage'} sampler)"
                f"{'; data-dependent: answers = W x̂, no analytic error' if rec.data_dependent else ''}; "
                f"inference: {INFERENCE_LABELS.get(r.inference, r.inference)}.")
        if not rec.data_dependent:
            methods = sorted(set(r.confidence_intervals(0.95)["ci_method"]))
            text += ("  95 % intervals: " + "; ".join(r.CI_METHODS[m] for m in methods) + ".")
        if dpx.streaming.is_causal(r.workload):  # a count over time: could it be published daily?
            text += ("  **Online:** answer t uses only the counts up to step t, so these answers "
                     "could be published step by step (in Python, `dpx.streaming.release`)."
                     if registry.get(r.mechanism).online else
                     "  **Not online:** least squares lets later steps correct earlier answers, "
                     "so these answers exist only once the whole stream is in.")
        if self.simulation is not None:
            text += (f"  *Simulation: {self.simulation.trials} trials with seeds derived from the "
                     f"simulation seed {self.simulation.seed}, outside the ledger.*")
        return text + "\n\n" + self.session.source_text(rec.dataset)

    def answers_frame(self) -> pd.DataFrame:
        """The last release's answers with std and 95 % interval (what the downloads hold)."""
        if self.last is None:
            return pd.DataFrame(columns=["query", "label", "answer", "std", "ci_low", "ci_high",
                                         "ci_method"])
        return self.last.release.to_frame()

    def _answers_shown(self) -> pd.DataFrame:
        """:meth:`answers_frame` with the interval methods in short words (for the page's table)."""
        df = self.answers_frame()
        df["ci_method"] = df["ci_method"].map(lambda k: _CI_SHORT.get(k, k))
        return df

    def controls(self) -> pn.Column:
        options = _mechanism_options()
        mech = pn.widgets.Select(**{_LABEL: "Mechanism"}, options=options, value=self.mechanism)
        about = pn.pane.Markdown(self._about(), sizing_mode="stretch_width")
        infer = pn.widgets.Select(**{_LABEL: "Inference"}, options=self.inference_options(),
                                  description="Post-processing of the noisy answers "
                                              "(Learn: Inference)")

        def show_mechanism(*_):
            """The box shows the mechanism that runs: over a record table only ResidualPlanner."""
            # no pn.io.hold: this runs in whichever thread changed the mechanism or the table
            # (a release's), and a hold there sends the document's changes from that thread
            table = self.tables.active
            mech.options = ({registry.get(TABLE_MECHANISM).label: TABLE_MECHANISM} if table
                            else options)
            mech.value = self.running_mechanism()
            mech.disabled = table
            about.object = self._about()
            infer.options = self.inference_options()
            if self.inference not in infer.options.values():  # shown: the box changes with it
                self.inference = next(iter(infer.options.values()))
            infer.value = self.inference

        def picked(e):
            if not self.tables.active and e.new in options.values():
                self.mechanism = e.new
        show_mechanism()
        mech.param.watch(picked, "value")
        infer.param.watch(lambda e: setattr(self, "inference", e.new), "value")
        self.param.watch(show_mechanism, "mechanism")
        self.gate.mirror(self.tables, ["active"]).param.watch(show_mechanism, "active")
        trials = pn.widgets.IntInput.from_param(
            self.param.trials, start=0, end=2000, **{_LABEL: "Simulation trials"},
            description="Repeated runs outside the ledger (for bands and the empirical RMSE).")
        busy = pn.bind(lambda a, b: a or b, self.param.busy, self.tables.param.busy)
        run = pn.widgets.Button(**{_LABEL: "Run release"}, **{_BUTTON: "primary"}, disabled=busy)
        sim = pn.widgets.Button(**{_LABEL: "Simulate only (no release)"}, disabled=busy)
        run.on_click(lambda _: self.run_release())
        sim.on_click(lambda _: self.run_trials())
        progress = pn.indicators.Progress(
            value=pn.bind(percent, self.param.progress, self.param.trials), max=100,
            active=self.param.busy, sizing_mode="stretch_width", visible=self.param.busy)
        return pn.Column(pn.pane.Markdown("### Release"), mech, about, infer, self.tables.controls(),
                         trials, run, sim, progress, width=300)

    def running_mechanism(self) -> str:
        """Name of the mechanism a release runs now: ResidualPlanner over a record table, else :attr:`mechanism`."""
        return TABLE_MECHANISM if self.tables.active else self.mechanism

    def inference_options(self) -> dict[str, str]:
        """``{label: name}`` of the inferences that apply to the running mechanism (its default first)."""
        if self.tables.active:
            names = [n for n in _mechanism.TABLE_INFERENCES if marginal_inference.available(n)]
        else:
            names = list(_mechanism.inferences(self.running_mechanism()))
        return {INFERENCE_LABELS[n]: n for n in names}

    def _about(self) -> str:
        try:
            m = registry.get(self.running_mechanism())
        except KeyError:
            return ""
        if self.tables.active:
            return (f"*{m.description}* ({m.source}). The workload is over a record table: its "
                    "marginals are released from the records with this mechanism only.")
        kind = "data-dependent, ε-DP (Laplace only)" if m.data_dependent else "matrix mechanism"
        return f"*{m.description}* ({kind}; {m.source})"

    def results(self) -> pn.Column:
        summary = pn.pane.Markdown(self._summary(), sizing_mode="stretch_width")
        plot = pn.pane.HoloViews(self.answers_plot(), sizing_mode="stretch_width", height=400)
        rmse = TableSlot(lambda frame: pn.widgets.Tabulator(
            frame, show_index=False, disabled=True, sizing_mode="stretch_width",
            layout="fit_data_stretch", titles={"rmse": "RMSE (counts)"},
            configuration=readable_headers(frame.columns, {"rmse": "RMSE (counts)"}),
            formatters={"rmse": NumberFormatter(format="0,0.000")}), self.rmse_table())
        downloads = self.download_buttons("Download {}")
        answers = TableSlot(lambda frame: answers_table(  # every column on screen
            frame, "fit_columns", label={"type": "textarea"}, ci_method={"type": "textarea"}),
            self._answers_shown())

        def redraw(*_):
            with pn.io.hold():  # one message to the browser for all its changes
                summary.object = self._summary()
                plot.object = self.answers_plot()
                rmse.show(self.rmse_table())
                answers.show(self._answers_shown())
                self.show_downloads(downloads)
        # held and drawn on the event loop, never from the thread that set `last`
        self.param.watch(lambda *_: on_session_loop(redraw), ["last", "simulation"])
        self.exports: dict = {}
        figure_export = pn.Column(
            pn.pane.Markdown("**The figure's export** holds the released answers and their 95 % "
                             "intervals only (no true answer, no simulation).",
                             styles={"font-size": "85%"}, sizing_mode="stretch_width"),
            FigureExport("release", "released-answers", self.export_plot,
                         report=self.session.report, into=self.exports),
            visible=pn.bind(lambda rec: rec is not None, self.param.last),
            sizing_mode="stretch_width")
        self.session.param.watch(
            lambda *_: self.gate.run("summary", lambda: setattr(summary, "object", self._summary())),
            ["epsilon", "delta", "noise", "dataset"])
        return pn.Column(summary, plot, pn.pane.Markdown(
            "**Released answers** with their analytic standard error and 95 % confidence interval "
            "(exactly what the downloads hold; the true answers never leave)."), answers,
            pn.pane.Markdown(
                "**RMSE per query** (empirical: against the true answers; analytic: expected value "
                "for data-independent mechanisms)."), rmse, pn.Row(*downloads), figure_export,
            loading=self.param.busy, sizing_mode="stretch_width")

    def ledger_card(self) -> pn.Card:
        text, table, update = ledger_panes(self.ledger_text, self.ledger_frame)
        refresh = pn.widgets.Button(**{_LABEL: "Refresh"}, **{_BUTTON: "light"}, width=100)
        refresh.on_click(lambda *_: on_session_loop(update))
        self._ledger_hooks.append(update)
        return pn.Card(text, table, refresh, title="Privacy ledger (the selected dataset, every session)",
                       sizing_mode="stretch_width", collapsed=False)

    def _ledger_refreshed(self) -> None:
        self.gate.run("ledger", lambda: on_session_loop(lambda: [h() for h in self._ledger_hooks]))

    def panel(self) -> pn.Column:
        """The whole page (built once per component)."""
        if self._layout is None:
            # the vector release or the table release, whichever the workload is over
            shown = self.gate.mirror(self.tables, ["active"])
            vector = pn.Column(self.results(), visible=pn.bind(lambda a: not a, shown.param.active),
                               sizing_mode="stretch_width")
            table = pn.Column(self.tables.results(), visible=shown.param.active,
                              sizing_mode="stretch_width")
            self._layout = pn.Column(
                pn.pane.Markdown(HEADER, sizing_mode="stretch_width"), self.error_alert(),
                side_by_side(self.controls(), pn.Column(vector, table, sizing_mode="stretch_width")),
                self.ledger_card(), sizing_mode="stretch_width")
        return self._layout


def _shape(shape) -> str:
    return " × ".join(str(int(v)) for v in shape)
