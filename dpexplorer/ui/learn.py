"""The "Learn" page: four lessons drawn with :mod:`dpexplorer.lessons`'s numbers for the
session's ε and δ, and the project's documentation (:mod:`dpexplorer.docs`).  Only the open
lesson recomputes; a failed update is reported and the last good plot stays::

    view = LearnView(Session())
    view.show("bound").result["table"]   # what the plot shows
"""

from __future__ import annotations

import functools
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
from .tasks import Task, TaskRunner

__all__ = ["LearnView", "Lesson", "NoiseLesson", "StrategyLesson", "BoundLesson", "DataLesson", "docs_panel"]

COLORS = {"laplace": "#30a2da", "gaussian": "#fc4f30", "workload": "#8b8b8b",
          "identity": "#30a2da", "h2": "#e5ae38", "hb": "#6d904f", "dawa": "#fc4f30",
          "bound": "#d62728", "data": "#b0b0b0"}


class Lesson(param.Parameterized):
    """A lesson: text, widgets of its :attr:`inputs` (:attr:`widget_types`), a live plot.

    Subclasses define :attr:`title`, :attr:`text`, :attr:`session_inputs`, :meth:`compute`,
    :meth:`figure` and :meth:`summary`.  A refresh is a task of ``page`` (the SVD-bound
    lesson takes 5-45 s the first time).  ``result``: what the plot shows; ``error``: the
    last failure; ``stale``: an input changed since.
    """

    title = "Lesson"
    text = ""
    inputs: tuple[str, ...] = ()
    session_inputs: tuple[str, ...] = ("epsilon", "delta", "noise")
    #: Widget class and options of each input (default: a Select).
    widget_types: dict = {}
    plot_height = 340
    plot_rows = 1  # rows of plots in the figure (the pane is sized to hold them all)

    def __init__(self, session: Session, page: Page | None = None, **params):
        self.session = session
        self.page = page
        self.result: dict | None = None
        self.error = ""
        self.stale = True
        self._lock = threading.RLock()
        self._task: Task | None = None  # the running refresh (served)
        self._again = False  # an input changed while it ran: refresh once more when it ends
        self._layout = self._plot = self._summary = self._alert = None
        super().__init__(**params)
        if self.inputs:
            self.param.watch(lambda *_: self.refresh(), list(self.inputs))

    def compute(self) -> dict:  # pragma: no cover - abstract
        """Engine numbers for the current inputs (may raise)."""
        raise NotImplementedError

    def figure(self, result: dict | None = None):  # pragma: no cover - abstract
        """The HoloViews object of ``result`` (default :attr:`result`)."""
        raise NotImplementedError

    def summary(self, result: dict | None = None) -> str:
        """Markdown with the key numbers of ``result``."""
        return ""

    def refresh(self) -> bool:
        """Recompute and redraw; ``True`` on success (served: once started; one asked for while
        one runs runs after it).  Never raises: errors go to :attr:`error` and the alert."""
        background = self.page is not None and self.page.background
        with self._lock:
            if self._task is not None and not self._task.finished:
                self._again = True
                return True
            self._loading(True)
            inline = functools.partial(TaskRunner(self._lock).start, background=False)
            start = inline if self.page is None else self.page.start_task
            self._task = task = start(lambda _: self._draw(), name=f"Learn: {self.title}", on_end=self._ended)
        return background or task.status == "done"

    def _draw(self) -> tuple[dict, object, str]:
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
        """A refresh ended (on the page's event loop): show it, or why it failed."""
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
        # the task logged an unexpected exception
        msg = str(exc) if isinstance(exc, ValueError | KeyError) else f"{type(exc).__name__}: {exc}"
        self.error, self.stale = msg, True
        if self._alert is not None:
            self._alert.object = f"**Could not update this lesson; showing the last result.** {msg}"
            self._alert.visible = True
        self.session.report(f"Learn, {self.title}: {msg}")

    def widgets(self) -> list:
        types = {p: self.widget_types.get(p, (pn.widgets.Select, {})) for p in self.inputs}
        return [w.from_param(self.param[p], **kw) for p, (w, kw) in types.items()]

    def panel(self) -> pn.Column:
        """The lesson's layout (built once): text, widgets, alert, plot, summary."""
        if self._layout is None:
            empty = hv.Curve([]).opts(responsive=True, height=self.plot_height)
            self._plot = pn.pane.HoloViews(
                self.figure() if self.result is not None else empty,
                sizing_mode="stretch_width", height=self.plot_rows * (self.plot_height + 20))
            self._summary = pn.pane.Markdown(self.summary() if self.result is not None else "",
                                             sizing_mode="stretch_width")
            self._alert = pn.pane.Alert("", alert_type="danger", visible=bool(self.error),
                                        sizing_mode="stretch_width", disable_math=True)
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
A private answer is the true answer plus random noise, scaled to the query's **sensitivity** Δ:
how much one person's record can change the answers. The **Laplace** mechanism (ε-DP) uses the
L1 sensitivity Δ₁: scale b = Δ₁/ε, standard deviation √2·b.  The **Gaussian** mechanism ((ε,
δ)-DP) uses the L2 sensitivity Δ₂: σ = Δ₂·c(ε, δ), with c from the sidebar's calibration: zCDP
(releases: the largest σ-budget whose zero-concentrated-DP guarantee converts to exactly (ε, δ))
or the analytic Gaussian (Balle & Wang 2018, a slightly smaller σ whose proof holds for ideal
real-valued noise only). When one record changes k answers by 1, Δ₁ = k but Δ₂ = √k, which is
why Gaussian noise pays off for large batches of queries. The curves use the sidebar's ε and δ;
dashed lines mark ± one standard deviation."""

    inputs = ("sensitivity",)
    session_inputs = ("epsilon", "delta", "noise", "calibration")

    sensitivity = param.Number(default=1.0, bounds=(0.1, 10.0), step=0.1, label="Sensitivity Δ",
                               doc="Δ, used as Δ₁ (Laplace) and Δ₂ (Gaussian).")
    widget_types = {"sensitivity": (pn.widgets.FloatSlider, {"width": 320})}

    def compute(self) -> dict:
        s = self.session
        return {**lessons.noise_lesson(self.sensitivity, s.epsilon, s.delta, s.calibration),
                "session_noise": s.noise}

    def figure(self, result=None):
        r = self.result if result is None else result
        f = r["frame"]
        curves, lines = [], []
        for key in ("laplace", "gaussian"):
            std = r[f"{key}_std"]
            curves.append(hv.Curve(f[f["noise"] == key], "z", "density",
                                   label=f"{key.capitalize()} (std {std:.3g})").opts(
                color=COLORS[key], line_width=2.5, tools=["hover"]))
            lines += [hv.VLine(sign * std).opts(color=COLORS[key], line_dash="dashed", line_width=1)
                      for sign in (-1, 1)]
        xmax = 4.0 * max(r["laplace_std"], r["gaussian_std"])
        title = (f"Noise added to one answer, Δ = {r['sensitivity']:g}, ε = {r['epsilon']:g}, "
                 f"δ = {r['delta']:g}")
        return hv.Overlay(curves + lines).opts(
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
Answering the workload W directly adds noise to each of its queries, scaled to W's sensitivity:
a cell in the middle of the domain is in about n²/4 of the n(n+1)/2 ranges, so the noise
explodes with n.  **Identity** measures each cell once (Δ = 1) and adds cells up, so long ranges
sum many noisy cells. **Hierarchies** (H2: binary tree; HB: branching chosen for n) measure
intervals at a few levels: a record is in only a handful of them, and every range is the sum of
a few nodes.  These errors are exact (HDMM Prop. 4), not simulated; they use the sidebar's
noise, ε and δ."""

    inputs = ("n_max", "example_n")

    n_max = param.Selector(default=1024, objects={"256": 256, "1024": 1024, "4096 (slow once)": 4096},
                           label="Largest n", doc="""
        Largest domain of the RMSE curve (4096 takes 10-40 s the first time, then is cached).""")
    example_n = param.Selector(default=64, objects=[16, 64, 256], label="n of the per-query example",
                               doc="Domain of the per-query error example.")
    widget_types = dict.fromkeys(inputs, (pn.widgets.RadioButtonGroup, {}))

    def compute(self) -> dict:
        return lessons.strategy_lesson(self.session.noise_model(), self.n_max, int(self.example_n))

    def figure(self, result=None):
        r = self.result if result is None else result
        g, pw = r["grid"], r["per_width"]
        curves, widths = [], []
        for name, label in STRATEGIES.items():
            sub = g[g["mechanism"] == name]
            curves.append(hv.Curve(sub, "n", "rmse", label=label).opts(color=COLORS[name], line_width=2))
            curves.append(hv.Scatter(sub, "n", ["rmse", "m"], label=label).opts(
                color=COLORS[name], size=6, tools=["hover"]))
            widths.append(hv.Curve(pw[pw["mechanism"] == name], "width", "rmse", label=label).opts(
                color=COLORS[name], line_width=2, tools=["hover"]))
        axes = dict(logx=True, logy=True, responsive=True, height=self.plot_height,
                    legend_position="top_left")
        left = hv.Overlay(curves).opts(title=f"All Range: RMSE per query, {r['noise'].label}",
                                       xlabel="domain size n", ylabel="RMSE (counts)", **axes)
        right = hv.Overlay(widths).opts(
            title=f"Per query, n = {r['example_n']}: RMSE by range length",
            xlabel="range length (cells)", ylabel="RMSE of one query (counts)", **axes)
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
For a workload W, Li & Miklau (2012) proved a lower bound on the error of *every* strategy A the
matrix mechanism can measure: the **SVD bound**, computed from W's singular values.  No
matrix-mechanism strategy, hand-made or optimised, can go below the dashed line; the ratio RMSE
/ bound says how much room is left for a better strategy.  Data-dependent algorithms such as
DAWA are not bound by it, since they adapt to the data (next lesson)."""

    inputs = ("workload", "n")
    session_inputs = ("epsilon", "delta", "noise", "workload")

    workload = param.Selector(default="all_range", objects={
        "All Range": "all_range", "Prefix": "prefix", "Ranges of width 32": "width_range",
        "Session workload (Workload page)": "session"}, label="Workload")
    n = param.Selector(default=256, objects=[64, 256, 1024], label="Domain size n",
                       doc="Domain size (not used for the session's workload).")
    widget_types = {"workload": (pn.widgets.Select, {"width": 260}), "n": (pn.widgets.RadioButtonGroup, {})}

    def compute(self) -> dict:
        if self.workload != "session":
            W = lessons.lesson_workload(self.workload, int(self.n))
        elif (W := self.session.workload) is None:
            raise ValueError("the session has no workload yet (build one on the Workload page)")
        return lessons.bound_lesson(W, self.session.noise_model(), cache=self.session.cache)

    def figure(self, result=None):
        r = self.result if result is None else result
        ok, bound = r["table"].dropna(subset=["rmse"]), r["bound"]
        drawn = math.isfinite(bound) and bound > 0
        title = f"{r['workload']} ({r['m']:,} queries, n = {r['n']:,}), {r['noise'].label}"
        bars = hv.Bars(ok, kdims=[hv.Dimension("label", label="Strategy")],
                       vdims=[hv.Dimension("rmse", label="RMSE (counts)"), "ratio"]).opts(
            logy=True, tools=["hover"], color=COLORS["identity"], responsive=True,
            height=self.plot_height, default_tools=["save", "reset"])
        values = list(ok["rmse"]) + ([bound] if drawn else [])
        if values:
            bars = bars.opts(ylim=(min(values) / 2, max(values) * 2))
        elems = [bars]
        if drawn:
            elems.append(hv.HLine(bound).opts(color=COLORS["bound"], line_dash="dashed", line_width=2))
            elems.append(hv.Text(ok["label"].iloc[-1] if len(ok) else "", bound * 1.2,
                                 f"SVD bound {bound:.4g}").opts(text_color=COLORS["bound"],
                                                                text_font_size="10pt"))
        return hv.Overlay(elems).opts(title=title)

    def summary(self, result=None) -> str:
        r = self.result if result is None else result
        ok, bound = r["table"].dropna(subset=["rmse"]), r["bound"]
        if not math.isfinite(bound):
            return "The SVD bound cannot be computed for this workload (domain too large)."
        rows = "; ".join(f"{t.label} {t.rmse:.4g} ({t.ratio:.2f}×)" for t in ok.itertuples())
        text = f"**SVD bound {bound:.4g}**: no matrix-mechanism strategy can have a lower RMSE. "
        if len(ok):
            best = ok.iloc[0]
            text += (f"The best strategy here, {best.label}, is {best.ratio:.2f}× the bound.  "
                     f"RMSE (ratio to the bound): {rows}.")
        return text


class DataLesson(Lesson):
    """Lesson 4: DAWA vs Identity and HB on an easy and a hard histogram (simulation)."""

    title = "4. Data-independent vs data-dependent"
    text = """\
A data-independent strategy has the same error on every dataset.  **DAWA** (Li et al. 2014)
spends a quarter of ε privately partitioning the domain into buckets of similar counts, then
measures the buckets: on **blocky, sparse** data few buckets suffice and the error drops; on
**spiky** data the buckets are far from uniform and DAWA can lose to HB.  This is a
**simulation** on benchmark data treated as public (as in DPBench): mean absolute error over All
Range queries, over seeded runs with a throwaway ledger; nothing is spent from the session. DAWA
is ε-DP, so every mechanism here uses Laplace noise at the sidebar's ε.  The bucket penalty is
an engine option (0 = DAWA's Alg. 1 as printed in the paper; larger values give fewer buckets)."""

    inputs = ("pair", "n", "trials", "penalty")
    session_inputs = ("epsilon", "seed", "dpbench_dir")
    plot_height = 260
    plot_rows = 2  # the two histograms, then the error bars

    pair = param.Selector(default="synthetic", objects={"Synthetic: steps vs spikes": "synthetic"},
                          label="Datasets")
    n = param.Selector(default=256, objects=[256, 1024], label="Domain size n")
    trials = param.Integer(default=5, bounds=(1, 20), label="Runs per mechanism")
    penalty = param.Number(default=0.5, bounds=(0.0, 10.0), step=0.5, label="DAWA bucket penalty")
    widget_types = {"pair": (pn.widgets.Select, {"width": 240}),
                    "n": (pn.widgets.RadioButtonGroup, {}),
                    "trials": (pn.widgets.IntSlider, {"width": 180}),
                    "penalty": (pn.widgets.FloatSlider, {"width": 180})}

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
        bars = hv.Bars(r["table"], kdims=[hv.Dimension("dataset", label="Dataset"),
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


def docs_panel(initial: str = "overview") -> pn.Column:
    """The project's documentation: a topic Select and its Markdown."""
    options = {title: name for name, title in dpx.docs.topics()}
    select = pn.widgets.Select(options=options, value=initial, width=360)
    text = pn.pane.Markdown(pn.bind(dpx.docs.topic, select), sizing_mode="stretch_width")
    return pn.Column(select, text, sizing_mode="stretch_width")


class LearnView(pn.viewable.Viewer, Page):
    """The Learn page: the :attr:`lessons` in tabs (``background``: refreshes as tasks; None:
    when served)."""

    active = param.Integer(default=0, bounds=(0, 3), doc="Index of the open lesson.")

    LESSONS = {"noise": NoiseLesson, "strategy": StrategyLesson, "bound": BoundLesson, "data": DataLesson}

    def __init__(self, session: Session | None = None, background: bool | None = None, **params):
        self._setup_page(session, background)  # session, lock, tasks, tab gate
        super().__init__(**params)
        self.lessons: dict[str, Lesson] = {k: cls(self.session, page=self) for k, cls in self.LESSONS.items()}
        self.tabs = pn.Tabs(*[(ls.title, ls.panel()) for ls in self.lessons.values()],
                            dynamic=True, sizing_mode="stretch_width", active=self.active)
        #: Every lesson's figure download control, by lesson key.
        self.exports = {k: ls.export for k, ls in self.lessons.items()}
        self.tabs.link(self, active="active", bidirectional=True)
        watched = sorted({p for ls in self.lessons.values() for p in ls.session_inputs})
        self.session.param.watch(self._session_changed, watched)
        self.docs = docs_panel()
        self.current.refresh()

    @property
    def current(self) -> Lesson:
        return self.lesson(self.active)

    def lesson(self, key: str | int) -> Lesson:
        """A lesson by key (``"noise"``, ``"strategy"``, ``"bound"``, ``"data"``) or index."""
        return list(self.lessons.values())[key] if isinstance(key, int) else self.lessons[key]

    def show(self, key: str | int) -> Lesson:
        """Open a lesson, refreshing it if stale."""
        self.active = key if isinstance(key, int) else list(self.lessons).index(key)
        self._refresh_current()  # e.g. already the active tab but never drawn
        return self.current

    def _session_changed(self, *events) -> None:
        names = {e.name for e in events}
        for lesson in self.lessons.values():
            if names & set(lesson.session_inputs):
                lesson.stale = True
        self.gate.run("refresh", self._refresh_current)

    @param.depends("active", watch=True)
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
