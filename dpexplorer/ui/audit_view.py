"""The "Audit" page: check a mechanism's privacy claim by simulation.

Runs :func:`dpexplorer.audit.audit` for a mechanism, ε and case on its tightest
neighbouring pair (:func:`dpexplorer.audit.cases`) as a task with progress and Stop, and
shows the audited lower bound on ε against the claim, the event's Clopper–Pearson
intervals and the statistic's distribution.  A seeded simulation: no budget is spent.
Without a browser::

    view = AuditView(session, background=False)
    view.mechanism = "identity"; view.epsilon = 1.0; view.runs = 2000
    view.run_audit()                   # True on success
    view.result.epsilon_lb, view.result.claim
    view.teaching_example()            # dawa_as_published, ε = 4, the partition alone
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import numpy as np
import pandas as pd
import panel as pn
import param

from dpexplorer.audit import AuditResult, cases
from dpexplorer.core import registry

from .exports import FigureExport
from .serving import LABEL as _LABEL
from .serving import button, on_session_loop
from .session import Page, Session
from .tasks import Task, TaskCancelled, percent

__all__ = ["AuditView", "TEACHING", "PUBLISHED_NOTE", "Stopped"]

log = logging.getLogger(__name__)


#: The teaching example: the authors' DAWA partition at ε = 4 (ε₁ = 1), audited alone.
TEACHING = {"mechanism": "dawa_as_published", "epsilon": 4.0, "case": 1, "runs": 2000}

#: What the README and the app say about DAWA's published accuracy.
PUBLISHED_NOTE = (
    "DAWA's published accuracy (Li et al., PVLDB 2014) came from code that was not private: "
    "the authors' partition step draws half the noise the paper's proof needs, none on "
    "single-cell buckets, and clamps noisy costs at 1/ε₂. `dawa_as_published` reproduces it "
    "for study only (releases refuse it); the registered `dawa` is the private algorithm.")

HEADER = f"""\
## Audit

An **audit** checks a privacy claim by simulation.  It runs the mechanism many times on two
neighbouring datasets x₀ and x₁ (one record added), picks on a first batch of runs the event (a
threshold on a statistic of the output) whose probabilities differ most, then, on a second,
independent batch, bounds both probabilities with Clopper–Pearson intervals.  Differential
privacy requires P₀(E) ≤ e^ε·P₁(E) + δ for every event, so ln((P₀_low − δ)/P₁_high) is a
**lower bound on the true ε** at the stated confidence.  Above the claim, the claim is refuted;
below it, nothing is proved -- only that no violation was found on this pair.  Every run is a
simulation seeded by the sidebar's seed; no dataset's budget is touched.

**Teaching example.**  {PUBLISHED_NOTE}  One click below audits its partition at
ε = 4 (claim ε₁ = 1): a small implementation change breaks the proof.
"""


class Stopped(TaskCancelled):
    """Raised from the progress callback to stop a running audit (the Stop button)."""


def _mechanism_options() -> dict[str, str]:
    return {f"{m.label} ({name})": name for name, m in registry.REGISTRY.items()}


class AuditView(Page, param.Parameterized):
    """The "Audit" page around one :class:`~dpexplorer.ui.session.Session`."""

    mechanism = param.Selector(default="identity", objects=list(registry.REGISTRY), doc="""
        Registered mechanism to audit (including variants registered as not private).""")
    epsilon = param.Number(default=1.0, bounds=(0, None), inclusive_bounds=(False, True),
                           softbounds=(0.05, 8.0), doc="ε the mechanism runs with.")
    case = param.Integer(default=0, bounds=(0, None), doc="""
        Which standard case of the mechanism (dpexplorer.audit.cases): 0 the whole output,
        1 a part with its own claim (e.g. DAWA's partition, claim ε₁).""")
    runs = param.Integer(default=2000, bounds=(100, 200_000), doc="""
        Runs per dataset of the batch the bound is computed on (a quarter more choose the event).""")
    confidence = param.Number(default=0.95, bounds=(0.5, 0.999999), doc="Confidence of the bound.")

    result = param.ClassSelector(class_=AuditResult, default=None, allow_None=True, constant=True,
                                 precedence=-1, doc="The last audit (kept on errors).")
    busy = param.Boolean(default=False, constant=True, precedence=-1)
    done = param.Integer(default=0, constant=True, precedence=-1, doc="Runs done in the running audit.")
    total = param.Integer(default=0, constant=True, precedence=-1, doc="Runs of the running audit.")
    error = param.String(default="", constant=True, precedence=-1, doc="Last failure, or ''.")
    task = param.ClassSelector(class_=Task, default=None, allow_None=True, constant=True,
                               precedence=-1, doc="The running (or last) audit; stop() cancels it.")

    def __init__(self, session: Session | None = None, background: bool = True, **params):
        self._setup_page(session, background)  # session, lock, tasks, tab gate
        self._layout = None
        type(self).param.mechanism.objects = list(registry.REGISTRY)  # registered later too
        super().__init__(**params)

    def cases(self):
        return cases(self.mechanism)

    @param.depends("mechanism", watch=True)
    def _clamp_case(self):
        if self.case >= len(self.cases()):
            self.case = 0

    def _case(self):
        return self.cases()[min(self.case, len(self.cases()) - 1)]

    def claim(self) -> float:
        """The ε claimed for what the case audits."""
        return self._case().claim_share * float(self.epsilon)

    def run_audit(self) -> bool:
        """Start the audit; ``True`` once started (background) or done, ``False`` (reported) if
        one runs or the inputs are refused."""
        with self._lock:
            if self.busy:
                self._fail(RuntimeError("an audit is already running; stop it or wait"))
                return False
            try:
                audit, total = self._inputs()
            except Exception as exc:  # noqa: BLE001 - reported on the page
                self._fail(exc)
                return False
            self._set(busy=True, done=0, total=total, error="")
            task = self.start_task(self._work, audit, name="audit", on_end=self._ended)
            self._set(task=task)
        return task.status == "done" if not self.background else True

    def _inputs(self) -> tuple[Callable[..., AuditResult], int]:
        """The audit to run (``audit(callback=...)``) and its runs in all."""
        mech = registry.get(self.mechanism)
        eps = float(self.epsilon)
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"ε must be a positive number, got {eps}")
        all_cases = self.cases()
        if not 0 <= self.case < len(all_cases):
            raise ValueError(f"{mech.label} has {len(all_cases)} audit case(s); got case {self.case}")
        runs = int(self.runs)
        audit = functools.partial(all_cases[self.case].run, mech.name, eps, runs=runs, n_jobs=1,
                                  confidence=float(self.confidence), seed=int(self.session.seed),
                                  progress=False)
        return audit, 2 * (runs + max(100, runs // 4))

    def _work(self, task: Task, audit) -> AuditResult:
        last = [0.0]

        def progress(done, total):
            if task.cancel_requested:
                raise Stopped("the audit was stopped")
            now = time.monotonic()
            if now - last[0] > 0.2 or done >= total:
                last[0] = now
                task.report(done / max(total, 1), f"{int(done):,} of {int(total):,} runs…")
                task.post(lambda: self._set(done=int(done), total=int(total)))

        return audit(callback=progress)

    def _ended(self, task: Task) -> None:
        if task.status == "done":
            self._set(result=task.result, busy=False, error="")
        elif task.status == "cancelled":
            self._set(busy=False, error="stopped: the page keeps the last audit")
        else:
            self._set(busy=False)
            self._fail(task.exception or RuntimeError(task.error))

    def stop(self) -> None:
        """Stop the running audit at its next chunk of runs."""
        if self.task is not None:
            self.task.cancel()

    def teaching_example(self) -> bool:
        """Audit the authors' DAWA partition (``dawa_as_published``) at ε = 4, claim ε₁ = 1."""
        self.param.update(**TEACHING)
        return self.run_audit()

    def summary(self) -> str:
        """The last audit's verdict (Markdown)."""
        r = self.result
        if r is None:
            c = self._case()
            return (f"No audit yet. **Run audit** checks {registry.get(self.mechanism).label} at "
                    f"ε = {float(self.epsilon):g} on x₀ = {_vec(c.x0)}, x₁ = {_vec(c.x1)} "
                    f"({c.label}; claim ε = {self.claim():g}).")
        mech = registry.get(r.mechanism) if r.mechanism in registry.REGISTRY else None
        label = mech.label if mech else r.mechanism
        verdict = ("**VIOLATION** — the claim is refuted at this confidence" if r.violated
                   else "no violation found (an audit can refute a claim, never prove it)")
        num = r.event.numerator
        text = (f"**{label}** at ε = {r.epsilon:g}"
                + (f", δ = {r.delta:g}" if r.delta else "")
                + f": audited **ε ≥ {r.epsilon_lb:.3g}** at {100 * r.confidence:.4g} % confidence "
                f"vs the claim **ε = {r.claim:g}** — {verdict}.\n\n"
                f"Pair: x₀ = {_vec(r.x0)}, x₁ = {_vec(r.x1)}.  Statistic: `{r.statistic}`; event "
                f"{r.event.label}" + (f" (more likely under x{num})" if num is not None else "")
                + f", chosen on {r.selection_runs:,} runs per dataset, then counted on "
                f"{r.runs:,} new runs each: P₀ = {r.p0[0]:.4g} [{r.p0[1]:.4g}, {r.p0[2]:.4g}], "
                f"P₁ = {r.p1[0]:.4g} [{r.p1[1]:.4g}, {r.p1[2]:.4g}].  {r.total_runs:,} runs in "
                f"{r.seconds:.1f} s, seed {r.seed} (simulation).")
        if mech is not None and not mech.private:
            text += f"\n\n*{mech.label}: {mech.description}*"
        return text

    def bound_frame(self) -> pd.DataFrame:
        """The claim, the audited lower bound and the plug-in estimate of the log-ratio."""
        r = self.result
        if r is None:
            return pd.DataFrame(columns=["what", "epsilon"])
        pn_, pd_ = (r.p0[0], r.p1[0]) if r.event.numerator == 0 else (r.p1[0], r.p0[0])
        plug = math.log((pn_ - r.delta) / pd_) if pn_ > r.delta and pd_ > 0 else math.nan
        return pd.DataFrame({"what": ["claimed ε", "audited lower bound", "plug-in estimate"],
                             "epsilon": [r.claim, r.epsilon_lb, plug]})

    def bound_plot(self):
        """Bars of :meth:`bound_frame` (the bound red if above the claim)."""
        r = self.result
        if r is None:
            return hv.Bars([]).opts(title="No audit yet", responsive=True, height=260)
        df = self.bound_frame().dropna()
        colors = {"claimed ε": "#4c72b0",
                  "audited lower bound": "#d62728" if r.violated else "#55a868",
                  "plug-in estimate": "#bbbbbb"}
        df["color"] = df["what"].map(colors)
        bars = hv.Bars(df, kdims=["what"], vdims=["epsilon", "color"]).opts(
            color="color", tools=["hover"], ylabel="ε", xlabel="")
        return (bars * hv.HLine(r.claim).opts(color="#4c72b0", line_dash="dashed")).opts(
            title=f"Audited ε ≥ {r.epsilon_lb:.3g} vs claim {r.claim:g}", responsive=True,
            height=260)

    def histogram_plot(self):
        """The statistic's distribution under x₀ and x₁, with the event's threshold."""
        r = self.result
        if r is None:
            return hv.Curve([]).opts(title="No audit yet", responsive=True, height=300)
        h = r.histograms()
        discrete = bool(np.all(h["left"] == h["right"]))
        layers = []
        for side, color in ((0, "#4c72b0"), (1, "#dd8452")):
            counts = h[f"count{side}"].to_numpy()
            if discrete:
                df = pd.DataFrame({"value": h["left"].to_numpy(), "count": counts})
                layers.append(hv.Curve(df, "value", "count", label=f"x{side}").opts(
                    interpolation="steps-mid", color=color, line_width=2))
                layers.append(hv.Scatter(df, "value", "count").opts(color=color, size=6, tools=["hover"]))
            else:
                edges = np.append(h["left"].to_numpy(), h["right"].to_numpy()[-1])
                layers.append(hv.Histogram((edges, counts), label=f"x{side}").opts(
                    color=color, alpha=0.45, line_alpha=0))
        layers.append(hv.VLine(r.event.threshold).opts(color="#d62728", line_dash="dashed"))
        return hv.Overlay(layers).opts(
            title=f"`{r.statistic}` over {r.runs:,} runs on each dataset (event {r.event.label})",
            responsive=True, height=300, legend_position="top_right", xlabel=r.statistic,
            ylabel="runs")

    def controls(self) -> pn.Column:
        mech = pn.widgets.Select(**{_LABEL: "Mechanism"}, options=_mechanism_options(), value=self.mechanism)
        mech.link(self, value="mechanism", bidirectional=True)
        eps = pn.widgets.FloatInput(**{_LABEL: "ε"}, value=self.epsilon, step=0.5, start=None)

        def set_eps(e):
            try:
                self.epsilon = e.new
            except ValueError as exc:
                self._fail(exc)
                eps.value = self.epsilon
        eps.param.watch(set_eps, "value")
        self.param.watch(lambda e: setattr(eps, "value", e.new), "epsilon")
        case = pn.widgets.RadioBoxGroup(options=self._case_options(), value=self.case)
        case.param.watch(lambda e: setattr(self, "case", e.new), "value")

        def on_mechanism(*_):
            case.options = self._case_options()
            case.value = self.case
        self.param.watch(on_mechanism, ["mechanism", "case"])
        runs = pn.widgets.IntInput.from_param(self.param.runs, **{_LABEL: "Runs per dataset"}, step=1000)
        conf = pn.widgets.FloatInput.from_param(self.param.confidence, **{_LABEL: "Confidence"}, step=0.01)
        # bound to the audit task's state, through the tab gate (nothing changes while hidden)
        shown = self.gate.mirror(self, ["busy", "done", "total"])
        run = button("Run audit", "primary", self.run_audit, disabled=shown.param.busy)
        stop = button("Stop", "default", self.stop, disabled=pn.bind(lambda b: not b, shown.param.busy))
        teach = button("Teaching example: DAWA as published", "warning", self.teaching_example,
                       disabled=shown.param.busy)
        progress = pn.indicators.Progress(
            value=pn.bind(percent, shown.param.done, shown.param.total), max=100,
            visible=shown.param.busy, sizing_mode="stretch_width")
        status = pn.pane.Markdown(
            pn.bind(lambda b, d, t: f"{int(d):,} of {int(t):,} runs…" if b else "",
                    shown.param.busy, shown.param.done, shown.param.total),
            sizing_mode="stretch_width")
        about = pn.pane.Markdown(pn.bind(lambda *_: self._about(), self.param.mechanism,
                                         self.param.case), sizing_mode="stretch_width")
        return pn.Column(pn.pane.Markdown("### Audit"), mech, about, eps, case, runs, conf,
                         pn.Row(run, stop), teach, progress, status, width=320)

    def _case_options(self) -> dict[str, int]:
        return {c.label: i for i, c in enumerate(self.cases())}

    def _about(self) -> str:
        try:
            m, c = registry.get(self.mechanism), self._case()
        except (KeyError, ValueError):
            return ""
        warn = "**NOT PRIVATE** (study only). " if not m.private else ""
        return (f"{warn}*{m.description}* ({m.source}).  Pair: x₀ = {_vec(c.x0)}, "
                f"x₁ = {_vec(c.x1)}; {c.why}.")

    def results(self) -> pn.Column:
        summary = pn.pane.Markdown(self.summary(), sizing_mode="stretch_width")
        bound = pn.pane.HoloViews(self.bound_plot(), sizing_mode="stretch_width", height=280)
        hist = pn.pane.HoloViews(self.histogram_plot(), sizing_mode="stretch_width", height=320)

        def redraw(*_):
            with pn.io.hold():  # one message to the browser for all its changes
                summary.object = self.summary()
                bound.object = self.bound_plot()
                hist.object = self.histogram_plot()
        # held and drawn on the event loop, never from the audit's thread
        self.param.watch(lambda *_: self.gate.run("result", lambda: on_session_loop(redraw)), ["result"])
        self.param.watch(lambda *_: self.gate.run(
            "summary", lambda: setattr(summary, "object", self.summary())),
            ["mechanism", "epsilon", "case"])
        self.exports: dict = {}
        exports = [FigureExport("audit", name, make, report=self.session.report, into=self.exports)
                   for name, make in (("bound", self.bound_plot), ("histogram", self.histogram_plot))]
        return pn.Column(summary, bound, exports[0], hist, exports[1], sizing_mode="stretch_width")

    def panel(self) -> pn.Column:
        """The whole page (built once)."""
        if self._layout is None:
            self._layout = pn.Column(
                pn.pane.Markdown(HEADER, sizing_mode="stretch_width"), self.error_alert(),
                pn.Row(self.controls(), self.results(), sizing_mode="stretch_width"),
                sizing_mode="stretch_width")
        return self._layout


def _vec(x) -> str:
    return "(" + ", ".join(f"{float(v):g}" for v in np.asarray(x).ravel()) + ")"

