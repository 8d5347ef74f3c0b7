"""The "Learn" page: four short guided lessons with live plots.

Every lesson explains one idea in a few sentences and draws it with the
engine's own numbers, for the session's ε and δ (the sidebar) and a few
widgets of its own:

1. :class:`NoiseLesson`: Laplace vs Gaussian noise and sensitivity.
2. :class:`StrategyLesson`: why measuring a strategy beats answering the
   workload directly (All Range queries, RMSE vs n).
3. :class:`BoundLesson`: what the SVD lower bound means.
4. :class:`DataLesson`: data-independent strategies vs DAWA (data-dependent),
   on an "easy" and a "hard" histogram (a seeded simulation).

Usage, in a notebook or a served app::

    from dpexplorer.ui.session import Session
    from dpexplorer.ui.learn import LearnView

    view = LearnView(Session())
    view                      # displays the page (after pn.extension(inline=True))
    view.lesson("bound").result["table"]   # what the plot shows

A lesson recomputes when one of its inputs changes, but only while it is
the open tab (others are marked stale and recomputed when opened), so
changing ε never waits for a hidden simulation.  Every number a lesson shows
comes from :mod:`dpexplorer.lessons` (tested without Panel, cached per
process); this module holds the text, the widgets and the figures.  A failed update never raises into the page: the
message goes to :meth:`Session.report` and the lesson's alert, and the last
good plot stays.
"""

from __future__ import annotations

import logging
import math
import threading

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import numpy as np
import panel as pn
import param

import dpexplorer as dpx
from dpexplorer import lessons
from dpexplorer.lessons import SIM_MECHANISMS, STRATEGIES

from .exports import FigureExport
from .serving import LazyCard
from .session import Page, Session
from .tasks import Task

__all__ = [
    "LearnView",
    "Lesson",
    "NoiseLesson",
    "StrategyLesson",
    "BoundLesson",
    "DataLesson",
    "docs_panel",
]

log = logging.getLogger(__name__)

COLORS = {"laplace": "#30a2da", "gaussian": "#fc4f30", "workload": "#8b8b8b",
          "identity": "#30a2da", "h2": "#e5ae38", "hb": "#6d904f", "dawa": "#fc4f30",
          "bound": "#d62728", "data": "#b0b0b0"}

# ----------------------------------------------------------------- lessons
class Lesson(param.Parameterized):
    """Base class of a lesson: text, its own widgets, a live plot.

    Subclasses define :attr:`title`, :attr:`text`, :attr:`session_inputs`
    (session parameters it depends on), their own parameters (listed in
    :attr:`inputs`) and :meth:`compute` / :meth:`figure` / :meth:`summary`.

    Parameters
    ----------
    session : Session
        The shared session (ε, δ, noise, seed, workload, ``report``).
    page : LearnView, optional
        The Learn page: served, a refresh is a task of the page (the lesson shows
        busy and the click's thread is not held: the SVD-bound lesson compares
        every data-independent strategy, optimisers included, 5-45 s on 2 cores
        the first time).  Without a page, or in a notebook or script, a refresh
        runs in the caller's thread.

    Attributes
    ----------
    result : dict or None
        What the plot shows, from the last successful :meth:`refresh`.
    error : str
        Message of the last failed refresh ("" after a success).
    stale : bool
        Whether an input changed since the last refresh.
    """

    title = "Lesson"
    text = ""
    inputs: tuple[str, ...] = ()
    session_inputs: tuple[str, ...] = ("epsilon", "delta", "noise")
    plot_height = 340
    #: Rows of plots in the lesson's figure (the pane is sized to hold them all).
    plot_rows = 1

    def __init__(self, session: Session, page: Page | None = None, **params):
        self.session = session
        self.page = page
        self.result: dict | None = None
        self.error = ""
        self.stale = True
        self._lock = threading.RLock()
        self._task: Task | None = None  # the running refresh (served)
        self._again = False  # an input changed while it ran: refresh once more when it ends
        self._layout = None
        self._plot = None
        self._summary = None
        self._alert = None
        super().__init__(**params)
        if self.inputs:
            self.param.watch(self._own_input_changed, list(self.inputs))

    # ------------------------------------------------------------ compute
    def compute(self) -> dict:  # pragma: no cover - abstract
        """Engine numbers for the current inputs (may raise)."""
        raise NotImplementedError

    def figure(self, result: dict | None = None):  # pragma: no cover - abstract
        """The HoloViews object drawn from ``result`` (default :attr:`result`)."""
        raise NotImplementedError

    def summary(self, result: dict | None = None) -> str:
        """Markdown sentences with the key numbers of ``result``."""
        return ""

    def refresh(self) -> bool:
        """Recompute and redraw; ``True`` on success (served: once started).

        Never raises: an error is reported through :meth:`Session.report`,
        kept in :attr:`error` and shown in the lesson's alert, and the last
        good plot stays.  Served (a page running in the background), the work
        is a task of the Learn page: this returns at once, the lesson shows
        busy, and a refresh asked for while one runs runs once after it, with
        the inputs of then.
        """
        page = self.page
        if page is None or not page.background:
            with self._lock:
                self._loading(True)
                try:
                    drawn = self._draw()
                except Exception as exc:  # noqa: BLE001 - shown in the page, never a traceback
                    self._fail(exc)
                    return False
                finally:
                    self._loading(False)
                self._show(drawn)
                return True
        with self._lock:
            if self._task is not None and not self._task.finished:
                self._again = True
                return True
            self._loading(True)
            self._task = page.start_task(lambda task: self._draw(), name=f"Learn: {self.title}",
                                         on_end=self._ended)
        return True

    def _draw(self) -> tuple[dict, object, str]:
        """The engine numbers, the figure and the summary of the current inputs (may raise)."""
        result = self.compute()
        return result, self.figure(result), self.summary(result)

    def _loading(self, busy: bool) -> None:
        if self._layout is not None:
            self._layout.loading = busy

    def _show(self, drawn: tuple[dict, object, str]) -> None:
        result, fig, text = drawn
        self.result, self.error, self.stale = result, "", False
        if self._plot is not None:
            self._plot.object = fig
            self._summary.object = text
            self._alert.visible = False

    def _ended(self, task: Task) -> None:
        """A served refresh ended (on the page's event loop): show it, or why it failed."""
        with self._lock:
            again, self._again = self._again, False
            self._task = None  # ended (its thread may still be finishing)
            self._loading(False)
            if task.status == "done":
                self._show(task.result)
            elif task.exception is not None:
                self._fail(task.exception)
        if again:
            self.refresh()

    def _fail(self, exc: BaseException) -> None:
        if isinstance(exc, ValueError | KeyError):
            msg = str(exc)
        else:
            log.exception("lesson %s failed", self.title)
            msg = f"{type(exc).__name__}: {exc}"
        self.error = msg
        self.stale = True
        if self._alert is not None:
            self._alert.object = f"**Could not update this lesson; showing the last result.** {msg}"
            self._alert.visible = True
        self.session.report(f"Learn, {self.title}: {msg}")

    def _own_input_changed(self, *events) -> None:
        self.refresh()

    # ----------------------------------------------------------------- UI
    def widgets(self) -> list:
        """Widgets of the lesson's own inputs."""
        return [pn.widgets.Select.from_param(self.param[p]) for p in self.inputs]

    def placeholder(self):
        """What the plot shows before the first refresh."""
        return hv.Curve([]).opts(responsive=True, height=self.plot_height)

    def panel(self) -> pn.Column:
        """The lesson's layout (built once): text, widgets, alert, plot, summary."""
        if self._layout is None:
            self._plot = pn.pane.HoloViews(
                self.figure() if self.result is not None else self.placeholder(),
                sizing_mode="stretch_width", height=self.plot_rows * (self.plot_height + 20))
            self._summary = pn.pane.Markdown(self.summary() if self.result is not None else "",
                                             sizing_mode="stretch_width")
            self._alert = pn.pane.Alert("", alert_type="danger", visible=bool(self.error),
                                        sizing_mode="stretch_width", disable_math=True)
            #: The plot's download control (PNG, SVG, CSV of the lesson's figure).
            self.export = FigureExport(
                "learn", self.title, lambda: self.figure() if self.result is not None else None,
                report=self.session.report)
            self._layout = pn.Column(
                pn.pane.Markdown(f"### {self.title}\n\n{self.text}", sizing_mode="stretch_width"),
                pn.Row(*self.widgets(), sizing_mode="stretch_width"),
                self._alert, self._plot, self.export, self._summary, sizing_mode="stretch_width")
        return self._layout

    def __panel__(self):
        return self.panel()


class NoiseLesson(Lesson):
    """Lesson 1: Laplace vs Gaussian noise for a sensitivity Δ (session's ε, δ)."""

    title = "1. Noise and sensitivity"
    text = """\
A private answer is the true answer plus random noise, scaled to the query's
**sensitivity** Δ: how much one person's record can change the answers.
The **Laplace** mechanism (ε-DP) uses the L1 sensitivity Δ₁: scale b = Δ₁/ε,
standard deviation √2·b.  The **Gaussian** mechanism ((ε, δ)-DP) uses the L2
sensitivity Δ₂: σ = Δ₂·c(ε, δ), with c from the sidebar's calibration: zCDP
(releases: the largest σ-budget whose zero-concentrated-DP guarantee converts
to exactly (ε, δ)) or the analytic Gaussian (Balle & Wang 2018, a slightly
smaller σ whose proof holds for ideal real-valued noise only).
When one record changes k answers by 1, Δ₁ = k but Δ₂ = √k,
which is why Gaussian noise pays off for large batches of queries.
The curves use the sidebar's ε and δ; dashed lines mark ± one standard deviation."""

    inputs = ("sensitivity",)
    session_inputs = ("epsilon", "delta", "noise", "calibration")

    sensitivity = param.Number(default=1.0, bounds=(0.1, 10.0), step=0.1, label="Sensitivity Δ",
                               doc="Δ, used as Δ₁ (Laplace) and Δ₂ (Gaussian).")

    def widgets(self):
        return [pn.widgets.FloatSlider.from_param(self.param.sensitivity, width=320)]

    def compute(self) -> dict:
        s = self.session
        return {**lessons.noise_lesson(self.sensitivity, s.epsilon, s.delta, s.calibration),
                "session_noise": s.noise}

    def figure(self, result=None):
        r = self.result if result is None else result
        f = r["frame"]
        elems = []
        for key, name, std in [("laplace", "Laplace", r["laplace_std"]),
                               ("gaussian", "Gaussian", r["gaussian_std"])]:
            sub = f[f["noise"] == key]
            elems.append(hv.Curve(sub, "z", "density", label=f"{name} (std {std:.3g})").opts(
                color=COLORS[key], line_width=2.5, tools=["hover"]))
        for key, std in [("laplace", r["laplace_std"]), ("gaussian", r["gaussian_std"])]:
            for sign in (-1, 1):
                elems.append(hv.VLine(sign * std).opts(color=COLORS[key], line_dash="dashed",
                                                       line_width=1))
        xmax = 4.0 * max(r["laplace_std"], r["gaussian_std"])
        title = (f"Noise added to one answer, Δ = {r['sensitivity']:g}, ε = {r['epsilon']:g}, "
                 f"δ = {r['delta']:g}")
        return hv.Overlay(elems).opts(
            title=title, responsive=True, height=self.plot_height, xlim=(-xmax, xmax),
            legend_position="top_right", xlabel="noise (counts)", ylabel="density")

    def summary(self, result=None) -> str:
        r = self.result if result is None else result
        ratio = r["ratio"]
        used = "Gaussian" if r["session_noise"] == "Gaussian" else "Laplace"
        return (f"**Laplace**: b = Δ/ε = {r['laplace_scale']:.4g}, std = √2·b = "
                f"{r['laplace_std']:.4g}.  **Gaussian**: c(ε, δ) = {r['c']:.4g}, σ = Δ·c = "
                f"{r['gaussian_sigma']:.4g}.  For a single query the Gaussian std is "
                f"{ratio:.2f}× the Laplace one; with k answers per record it is "
                f"{ratio:.2f}/√k×.  The sidebar currently uses **{used}** noise.")


class StrategyLesson(Lesson):
    """Lesson 2: identity vs hierarchies vs the workload itself on All Range queries."""

    title = "2. Why a strategy beats answering the workload"
    text = """\
Answering the workload W directly adds noise to each of its queries, scaled
to W's sensitivity: a cell in the middle of the domain is in about n²/4 of
the n(n+1)/2 ranges, so the noise explodes with n.  **Identity** measures each
cell once (Δ = 1) and adds cells up, so long ranges sum many noisy cells.
**Hierarchies** (H2: binary tree; HB: branching chosen for n) measure
intervals at a few levels: a record is in only a handful of them, and every
range is the sum of a few nodes.  These errors are exact (HDMM Prop. 4), not
simulated; they use the sidebar's noise, ε and δ."""

    inputs = ("n_max", "example_n")
    session_inputs = ("epsilon", "delta", "noise")

    n_max = param.Selector(default=1024, objects={"256": 256, "1024": 1024, "4096 (slow once)": 4096},
                           label="Largest n", doc="""
        Largest domain of the RMSE curve (4096 takes 10-40 s the first time, then is cached).""")
    example_n = param.Selector(default=64, objects=[16, 64, 256], label="n of the per-query example",
                               doc="Domain of the per-query error example.")

    def widgets(self):
        return [pn.widgets.RadioButtonGroup.from_param(self.param.n_max),
                pn.widgets.RadioButtonGroup.from_param(self.param.example_n)]

    def compute(self) -> dict:
        return lessons.strategy_lesson(self.session.noise_model(), self.n_max, int(self.example_n))

    def figure(self, result=None):
        r = self.result if result is None else result
        g = r["grid"]
        curves = []
        for name, label in STRATEGIES.items():
            sub = g[g["mechanism"] == name]
            curves.append(hv.Curve(sub, "n", "rmse", label=label).opts(color=COLORS[name], line_width=2))
            curves.append(hv.Scatter(sub, "n", ["rmse", "m"], label=label).opts(
                color=COLORS[name], size=6, tools=["hover"]))
        left = hv.Overlay(curves).opts(
            title=f"All Range: RMSE per query, {r['noise'].label}", logx=True, logy=True,
            responsive=True, height=self.plot_height, legend_position="top_left",
            xlabel="domain size n", ylabel="RMSE (counts)")
        pw = r["per_width"]
        right = hv.Overlay([
            hv.Curve(pw[pw["mechanism"] == name], "width", "rmse", label=label).opts(
                color=COLORS[name], line_width=2, tools=["hover"])
            for name, label in STRATEGIES.items()]).opts(
            title=f"Per query, n = {r['example_n']}: RMSE by range length", logx=True,
            logy=True, responsive=True, height=self.plot_height, legend_position="top_left",
            xlabel="range length (cells)", ylabel="RMSE of one query (counts)")
        return (left + right).cols(2)

    def summary(self, result=None) -> str:
        r = self.result if result is None else result
        n_big, at, best = r["n_big"], r["at"], r["best"]
        q, n = r["half_query"], r["example_n"]
        ex = ", ".join(f"{STRATEGIES[k]} ±{r['per_query'][k][q]:.3g}" for k in STRATEGIES)
        return (f"At n = {n_big}: answering W directly has RMSE {at['workload']:.4g}, "
                f"{STRATEGIES[best]} {at[best]:.4g} ({r['factor']:.0f}× smaller).  "
                f"Example query \"how many records in the first half\" ([0, {n // 2 - 1}], "
                f"n = {n}), standard error: {ex}.")


class BoundLesson(Lesson):
    """Lesson 3: RMSE of every data-independent strategy against the SVD bound."""

    title = "3. The SVD lower bound"
    text = """\
For a workload W, Li & Miklau (2012) proved a lower bound on the error of
*every* strategy A the matrix mechanism can measure: the **SVD bound**,
computed from W's singular values.  No matrix-mechanism strategy, hand-made
or optimised, can go below the dashed line; the ratio RMSE / bound says how
much room is left for a better strategy.  Data-dependent algorithms such as
DAWA are not bound by it, since they adapt to the data (next lesson)."""

    inputs = ("workload", "n")
    session_inputs = ("epsilon", "delta", "noise", "workload")

    workload = param.Selector(default="all_range", objects={
        "All Range": "all_range", "Prefix": "prefix", "Ranges of width 32": "width_range",
        "Session workload (Workload page)": "session"}, label="Workload")
    n = param.Selector(default=256, objects=[64, 256, 1024], label="Domain size n",
                       doc="Domain size (not used for the session's workload).")

    def widgets(self):
        return [pn.widgets.Select.from_param(self.param.workload, width=260),
                pn.widgets.RadioButtonGroup.from_param(self.param.n)]

    def workload_matrix(self):
        """The workload of the lesson (built once per kind and n)."""
        if self.workload == "session":
            W = self.session.workload
            if W is None:
                raise ValueError("the session has no workload yet (build one on the Workload page)")
            return W
        return lessons.lesson_workload(self.workload, int(self.n))

    def compute(self) -> dict:
        return lessons.bound_lesson(self.workload_matrix(), self.session.noise_model(),
                                    cache=self.session.cache)

    def figure(self, result=None):
        r = self.result if result is None else result
        df = r["table"]
        ok = df.dropna(subset=["rmse"])
        bound = r["bound"]
        title = f"{r['workload']} ({r['m']:,} queries, n = {r['n']:,}), {r['noise'].label}"
        bars = hv.Bars(ok, kdims=[hv.Dimension("label", label="Strategy")],
                       vdims=[hv.Dimension("rmse", label="RMSE (counts)"), "ratio"]).opts(
            logy=True, tools=["hover"], color=COLORS["identity"], responsive=True,
            height=self.plot_height, default_tools=["save", "reset"])
        values = list(ok["rmse"]) + ([bound] if math.isfinite(bound) and bound > 0 else [])
        if values:
            bars = bars.opts(ylim=(min(values) / 2, max(values) * 2))
        elems = [bars]
        if math.isfinite(bound) and bound > 0:
            elems.append(hv.HLine(bound).opts(color=COLORS["bound"], line_dash="dashed",
                                              line_width=2))
            elems.append(hv.Text(ok["label"].iloc[-1] if len(ok) else "", bound * 1.2,
                                 f"SVD bound {bound:.4g}").opts(text_color=COLORS["bound"],
                                                                text_font_size="10pt"))
        return hv.Overlay(elems).opts(title=title)

    def summary(self, result=None) -> str:
        r = self.result if result is None else result
        ok = r["table"].dropna(subset=["rmse"])
        bound = r["bound"]
        if not math.isfinite(bound):
            return "The SVD bound cannot be computed for this workload (domain too large)."
        rows = "; ".join(f"{row.label} {row.rmse:.4g} ({row.ratio:.2f}×)"
                         for row in ok.itertuples())
        best = ok.iloc[0] if len(ok) else None
        text = f"**SVD bound {bound:.4g}**: no matrix-mechanism strategy can have a lower RMSE. "
        if best is not None:
            text += (f"The best strategy here, {best.label}, is {best.ratio:.2f}× the bound.  "
                     f"RMSE (ratio to the bound): {rows}.")
        return text


class DataLesson(Lesson):
    """Lesson 4: DAWA vs Identity and HB on an easy and a hard histogram (simulation)."""

    title = "4. Data-independent vs data-dependent"
    text = """\
A data-independent strategy has the same error on every dataset.  **DAWA**
(Li et al. 2014) spends a quarter of ε privately partitioning the domain into
buckets of similar counts, then measures the buckets: on **blocky, sparse**
data few buckets suffice and the error drops; on **spiky** data the buckets
are far from uniform and DAWA can lose to HB.  This is a **simulation** on
benchmark data treated as public (as in DPBench): mean absolute error over
All Range queries, over seeded runs with a throwaway ledger; nothing is spent
from the session.  DAWA is ε-DP, so every mechanism here uses Laplace noise
at the sidebar's ε.  The bucket penalty is an engine option (0 = DAWA's
Alg. 1 as printed in the paper; larger values give fewer buckets)."""

    inputs = ("pair", "n", "trials", "penalty")
    session_inputs = ("epsilon", "seed", "dpbench_dir")
    plot_height = 260
    plot_rows = 2  # the two histograms, then the error bars

    pair = param.Selector(default="synthetic", objects={"Synthetic: steps vs spikes": "synthetic"},
                          label="Datasets")
    n = param.Selector(default=256, objects=[256, 1024], label="Domain size n")
    trials = param.Integer(default=5, bounds=(1, 20), label="Runs per mechanism")
    penalty = param.Number(default=0.5, bounds=(0.0, 10.0), step=0.5, label="DAWA bucket penalty")

    def __init__(self, session: Session, **params):
        super().__init__(session, **params)
        self._update_pairs()
        session.param.watch(lambda e: self._update_pairs(), "dpbench_dir")

    def _update_pairs(self) -> None:
        objects = {"Synthetic: steps vs spikes": "synthetic"}
        if lessons.dpbench_available(lessons.dpbench_folder(self.session.dpbench_dir)):
            objects["DPBench: NETTRACE vs HEPTH"] = "dpbench"
        self.param.pair.objects = objects
        if self.pair not in objects.values():
            self.pair = "synthetic"

    def widgets(self):
        return [pn.widgets.Select.from_param(self.param.pair, width=240),
                pn.widgets.RadioButtonGroup.from_param(self.param.n),
                pn.widgets.IntSlider.from_param(self.param.trials, width=180),
                pn.widgets.FloatSlider.from_param(self.param.penalty, width=180)]

    def datasets(self) -> list[tuple[str, str, np.ndarray]]:
        """``[(role, name, x), ...]`` for the easy and the hard histogram at :attr:`n`.

        Raises
        ------
        ValueError
            If DPBench is asked for and not available.
        """
        return lessons.lesson_datasets(self.pair, int(self.n),
                                       lessons.dpbench_folder(self.session.dpbench_dir))

    def compute(self) -> dict:
        s = self.session
        return lessons.data_lesson(self.pair, int(self.n), s.epsilon, int(self.trials), int(s.seed),
                                   float(self.penalty), lessons.dpbench_folder(s.dpbench_dir))

    def figure(self, result=None):
        r = self.result if result is None else result
        hists = []
        for role in ("easy", "hard"):
            d = r["data"][role]
            n = d["x"].size
            edges = np.arange(n + 1, dtype=float)
            hist = hv.Histogram((edges, d["x"]), kdims=["cell"], vdims=["count"],
                                label="data").opts(color=COLORS["data"], line_color=None)
            est = hv.Curve((np.arange(n) + 0.5, d["x_hat"]), "cell", "count",
                           label=f"DAWA estimate ({d['buckets']} buckets)").opts(
                color=COLORS["dawa"], line_width=1.5, interpolation="steps-mid")
            hists.append((hist * est).opts(
                title=f"{role}: {d['name']}, {int(d['x'].sum()):,} records",
                responsive=True, height=self.plot_height, legend_position="top_right"))
        table = r["table"]
        bars = hv.Bars(table, kdims=[hv.Dimension("dataset", label="Dataset"),
                                     hv.Dimension("label", label="Mechanism")],
                       vdims=[hv.Dimension("mae", label="mean abs. error per query"), "se"]).opts(
            title=(f"Simulation: mean absolute error over {r['trials']} runs, Laplace ε = "
                   f"{r['epsilon']:g}, All Range, n = {r['n']}"),
            responsive=True, height=self.plot_height, tools=["hover"], xrotation=0,
            color=hv.dim("label").categorize({v: COLORS[k] for k, v in SIM_MECHANISMS.items()}))
        return (hists[0] + hists[1] + bars).cols(2)

    def summary(self, result=None) -> str:
        r = self.result if result is None else result
        t = r["table"]
        parts = []
        for role in ("easy", "hard"):
            sub = t[t["role"] == role].set_index("mechanism")
            factor = r["factor"][role]
            verdict = (f"{1 / factor:.1f}× smaller than" if factor < 1 else f"{factor:.1f}× that of")
            parts.append(f"**{r['data'][role]['name']}**: DAWA {sub.loc['dawa', 'mae']:.3g}, "
                         f"Identity {sub.loc['identity', 'mae']:.3g}, HB {sub.loc['hb', 'mae']:.3g} "
                         f"(DAWA's error is {verdict} the best data-independent mechanism)")
        return (f"Simulation, runs seeded with SeedSequence([{r['seed']}, run]) for run = 0.."
                f"{r['trials'] - 1} (the sidebar's seed): " + "; ".join(parts) + ".")


# ------------------------------------------------------------------- docs
def docs_panel(initial: str = "overview") -> pn.Column:
    """The project's documentation (:mod:`dpexplorer.docs`): a topic selector and the topic's text.

    The Select's value is the topic name; the Markdown pane shows
    ``dpx.docs.topic(name)``.
    """
    options = {title: name for name, title in dpx.docs.topics()}
    select = pn.widgets.Select(options=options, value=initial, width=360)
    text = pn.pane.Markdown(dpx.docs.topic(initial), sizing_mode="stretch_width")
    select.param.watch(lambda event: setattr(text, "object", dpx.docs.topic(event.new)), "value")
    return pn.Column(select, text, sizing_mode="stretch_width")


# ------------------------------------------------------------------- page
class LearnView(pn.viewable.Viewer, Page):
    """The Learn page: four lessons in tabs, driven by one :class:`Session`.

    Parameters
    ----------
    session : Session, optional
        The shared session (a new one if omitted).
    background : bool or None
        Whether a lesson's refresh runs as a task in the background (None: when
        served; in a notebook or a script it runs in the caller's thread).

    Attributes
    ----------
    lessons : dict[str, Lesson]
        ``noise``, ``strategy``, ``bound`` and ``data``, in tab order.
    tabs : panel.Tabs
        One tab per lesson; the open one is refreshed when the session changes.
    """

    active = param.Integer(default=0, bounds=(0, 3), doc="Index of the open lesson.")

    LESSONS = {"noise": NoiseLesson, "strategy": StrategyLesson, "bound": BoundLesson,
               "data": DataLesson}

    def __init__(self, session: Session | None = None, background: bool | None = None, **params):
        # session, lock, tasks and the tab gate (the open lesson's refresh waits while the
        # page's tab is hidden, told by ExplorerApp)
        self._setup_page(session, background)
        super().__init__(**params)
        self.lessons: dict[str, Lesson] = {k: cls(self.session, page=self)
                                           for k, cls in self.LESSONS.items()}
        #: Every lesson's figure download control, by lesson key (built with the tabs).
        self.exports: dict = {}
        self.tabs = pn.Tabs(*[(ls.title, ls.panel()) for ls in self.lessons.values()],
                            dynamic=True, sizing_mode="stretch_width", active=self.active)
        self.exports.update({k: ls.export for k, ls in self.lessons.items()})
        self.tabs.link(self, active="active", bidirectional=True)
        watched = sorted({p for ls in self.lessons.values() for p in ls.session_inputs})
        self.session.param.watch(self._session_changed, watched)
        #: The formulas and conventions the code relies on (:func:`docs_panel`).
        self.docs = docs_panel()
        self.current.refresh()

    @property
    def current(self) -> Lesson:
        """The open lesson."""
        return list(self.lessons.values())[self.active]

    def lesson(self, key: str | int) -> Lesson:
        """A lesson by key (``"noise"``, ``"strategy"``, ``"bound"``, ``"data"``) or index."""
        if isinstance(key, int):
            return list(self.lessons.values())[key]
        return self.lessons[key]

    def show(self, key: str | int) -> Lesson:
        """Open a lesson (refreshing it if an input changed while it was hidden)."""
        index = key if isinstance(key, int) else list(self.lessons).index(key)
        self.active = index
        lesson = self.current
        if lesson.stale:  # e.g. already the active tab but never drawn
            lesson.refresh()
        return lesson

    @param.depends("active", watch=True)
    def _active_changed(self) -> None:
        lesson = self.current
        if lesson.stale:
            lesson.refresh()

    def _session_changed(self, *events) -> None:
        names = {e.name for e in events}
        for lesson in self.lessons.values():
            if names & set(lesson.session_inputs):
                lesson.stale = True
        self.gate.run("refresh", self._refresh_current)

    def _refresh_current(self) -> None:
        if self.current.stale:
            self.current.refresh()

    def __panel__(self):
        return pn.Column(
            pn.pane.Markdown(
                "## Learn\n\nFour short lessons on the ideas behind the explorer.  Every plot "
                "uses the sidebar's ε and δ (and its noise, for the analytic errors) and updates "
                "when they change.", sizing_mode="stretch_width"),
            self.tabs,
            LazyCard(self.docs, title="Formulas and conventions", collapsed=True,
                     sizing_mode="stretch_width"),
            sizing_mode="stretch_width")
