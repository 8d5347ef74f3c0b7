"""SumsView: the "Sum queries" page (Wu, Pujol, Kotsogiannis, Machanavajjhala 2019).

Runs the five mechanisms of :mod:`dpexplorer.sums` (SQM, Identity, Workload, TiMM, TaMM) on
a bucketed numerical attribute: the trials' thresholds τ, the noisy answers against the
truth (paper Figs. 2–3), the relative error ``|ŷ − y| / max(y, γ)`` without and with
isotonic regression (Fig. 4), a small/large query table, and one mechanism's analytic
bias² and variance against τ.  **Run simulation** runs seeded trials on public data, each
from a throwaway ledger; **Release** makes one release from ``dpx.OS_CSPRNG``, charged to
the ledger of the dataset whose records are summed (it needs public buckets and a public
or SVT τ).  The mechanisms are ε-DP with Laplace noise.  The numbers come from
:mod:`dpexplorer.sums.study`, tested without Panel.  Driven without a browser::

    view = SumsView(session)
    view.trials = 20
    view.run(); view.wait()
    view.result.summary            # sums.summarize of the trials
    view.release(); view.wait()    # one release, charged to view.ledger()
    view.last_release.mode         # "release"
"""

from __future__ import annotations

import io
import logging
import math
from pathlib import Path, PurePath

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import numpy as np
import pandas as pd
import panel as pn
import param
from bokeh.models.widgets.tables import NumberFormatter

import dpexplorer as dpx
from dpexplorer import datasets
from dpexplorer.datasets import NumericalAttribute
from dpexplorer.privacy import PrivateData
from dpexplorer.sums import mechanisms as sums
from dpexplorer.sums import study
from dpexplorer.sums.study import SumsResult
from dpexplorer.sums.thresholds import SVTParams

from .exports import FigureExport
from .serving import COLOR as _BUTTON
from .serving import LABEL as _LABEL
from .serving import LazyCard, TableSlot
from .session import Page, Session, side_by_side
from .session import exception_message as _message
from .tasks import percent
from .uploads import Upload

__all__ = ["SumsView", "SumsResult", "ATTRIBUTES", "COLORS", "RECORDS"]

log = logging.getLogger(__name__)


#: Built-in attributes (label -> loader name); DPBench INCOME only when the folder is there.
ATTRIBUTES = {"Superstore Sales": "superstore_sales", "Superstore Profit": "superstore_profit",
              "DPBench INCOME": "dpbench_income"}

#: The dataset whose records each built-in attribute sums: its ledger pays for the page's releases
#: (Sales and Profit are columns of the same Superstore orders, so they share one budget).
RECORDS = {"Superstore Sales": "superstore", "Superstore Profit": "superstore",
           "DPBench INCOME": "DPBench: INCOME"}

#: One colour per mechanism, in every chart.
COLORS = {"sqm": "#8c564b", "identity": "#1f77b4", "workload": "#ff7f0e", "timm": "#2ca02c",
          "tamm": "#d62728"}

#: Smallest relative error drawn on the log axis.
_LOG_FLOOR = 1e-6
#: x ticks of the answer and error panels: about 5, slanted (so 15000 and 20000 stay apart).
_X_TICKS = {"xticks": 5, "xrotation": 30}

HEADER = """\
## Sum queries

A **sum query** adds up a numerical attribute ("total sales of the orders worth at most
t"). One record can change it by its whole value, so the noise must cover the largest
value. **Truncating** every value at τ caps that sensitivity at τ but biases large sums
downwards; τ is either given (data-independent) or chosen privately by the sparse vector
technique (SVT) with a share α of ε. The five mechanisms of Wu, Pujol, Kotsogiannis and
Machanavajjhala (2019) differ in where the noise goes: **SQM** answers each query alone
with ε/m, **Identity** adds noise to the bucket counts, **Workload** to the answers,
**TiMM** runs the matrix mechanism (strategy chosen for the counting workload) on the
value-weighted counts, **TaMM** chooses the strategy for the value-weighted workload.

*Simulation (mode: simulation):* every trial spends from its own throwaway ledger and nothing
from a budget (its tables show the true sums). *Release (mode: release):* one run of one
mechanism from the OS CSPRNG, charged to the ledger of the dataset the records belong to,
the same ledger the Release page shows.
"""

BUCKETING_HELP = ("equal_width: buckets of equal width over a fixed range (Superstore: its public "
                  "domain; CSV: the column's min..max, which is not private); quantile: about "
                  "equally many records per bucket (edges from the data: NOT private); edges: your "
                  "own comma-separated edges.")
VALUE_HELP = ("The value of a bucket: its upper edge (default; vector-form sums are then upper "
              "bounds of the raw sums), midpoint or lower edge.")
SHIFT_HELP = ("The sum mechanisms assume non-negative values (truncation caps values from above; "
              "the sensitivity of a sum is its largest value). An attribute with negative values "
              "(Superstore Profit) is refused unless you shift it: every value then gets + |lower "
              "edge of its domain| (Profit: + 6600 USD), and the page sums the shifted values.")
TAU_HELP = ("svt: τ chosen privately from geometrically growing candidates θ₀·rᵏ, the first whose "
            "count of records ≤ θ reaches ρ of all records (spends α·ε); user: your τ, declared "
            "public (no ε: choose it without looking at the records); none: no truncation.")


#: Read-only outputs.
_OUT = {"constant": True, "precedence": -1}

#: Notes under the attribute selector.
ATTRIBUTE_NOTES = {
    "Superstore Profit": "*1871 orders have a negative profit: tick the shift to sum profit + 6600 USD.*",
    "DPBench INCOME": ("*A fixed histogram of 4096 buckets in bucket units (bucketing options do not "
                       "apply); TaMM re-optimises its strategy for every τ, so a run takes about a "
                       "minute.*")}


def _positive(value, empty: str, bad: str) -> float:
    """``value`` as a positive finite float; ValueError ``empty`` if it is None, ``bad`` if not positive."""
    if value is None:
        raise ValueError(empty)
    if not (math.isfinite(float(value)) and float(value) > 0):
        raise ValueError(f"{bad}, got {value!r}")
    return float(value)


class SumsView(Page, pn.viewable.Viewer):
    """The "Sum queries" page around one :class:`~dpexplorer.ui.session.Session`.

    Parameters
    ----------
    session : Session, optional
        Shared state (ε and seed come from it; a new one if omitted).
    background : bool
        Simulate in a worker thread (default); ``False`` runs in the caller's thread.
    """

    # ------------------------------------------------------------ data
    attribute = param.Selector(default="Superstore Sales", objects=list(ATTRIBUTES)[:2],
                               doc="Numerical attribute to sum.")
    shift_negative = param.Boolean(default=False, doc=SHIFT_HELP)
    bucketing = param.Selector(default="equal_width", objects=["equal_width", "quantile", "edges"],
                               doc=BUCKETING_HELP)
    bins = param.Integer(512, allow_None=True, doc="Number of buckets (equal-width or quantile), 2 .. 4096.")
    edges_text = param.String(default="", doc="Your bucket edges, comma-separated, strictly increasing.")
    value_kind = param.Selector(default="upper", objects=list(datasets.BUCKET_VALUE_KINDS), doc=VALUE_HELP)
    # -------------------------------------------------------- workload
    workload_kind = param.Selector(default="prefix", objects=["prefix", "ranges"], doc="""
        prefix: sums of the values ≤ t at m thresholds t (the paper's P-workloads);
        ranges: m random ranges of buckets (seed 0), summed by value.""")
    queries = param.Integer(default=100, allow_None=True, doc="Number of queries m, 1 .. 2000.")
    spacing = param.Selector(default="linear", objects=["linear", "geometric"], doc="""
        Thresholds of the prefix queries: evenly spaced over the buckets, or log-spaced (more small queries).""")
    # -------------------------------------------------------- threshold
    tau_mode = param.Selector(default="svt", objects=list(sums.THRESHOLD_MODES), doc=TAU_HELP)
    tau = param.Number(default=2000.0, allow_None=True, doc="τ for tau_mode = user (attribute units, > 0).")
    alpha = param.Number(SVTParams().alpha, allow_None=True, doc="SVT: share α of ε spent on τ (0 < α < 1).")
    rho = param.Number(SVTParams().rho, allow_None=True,
                       doc="SVT: share ρ of records kept untruncated (0 < ρ < 1).")
    r = param.Number(SVTParams().r, allow_None=True, doc="SVT: growth r > 1 of the candidates θ₀·rᵏ.")
    theta0 = param.Number(default=None, allow_None=True, doc="""
        SVT: first candidate θ₀ > 0 (empty: the smallest positive bucket value).""")
    # -------------------------------------------------------- mechanisms
    strategy = param.Selector(default="greedy_h", objects=["greedy_h"], doc="""
        Strategy selector of TiMM and TaMM (any registered data-independent mechanism).""")
    trials = param.Integer(default=30, allow_None=True, doc="Simulated trials, 1 .. 500.")
    gamma = param.Number(default=1.0, allow_None=True, doc="γ > 0 of the relative error |ŷ − y| / max(y, γ).")
    show_isotonic = param.Boolean(default=False, doc="Draw the answers after isotonic regression.")
    untruncated = param.Boolean(default=False, doc="Draw the run without truncation (same seeds, all of ε).")
    curve_mechanism = param.Selector(default="tamm", objects=list(sums.MECHANISMS), doc="""
        Mechanism whose bias² / variance / total is drawn against τ.""")
    release_mechanism = param.Selector(default="tamm", objects=list(sums.MECHANISMS), doc="""
        Mechanism of a release (one run, charged to the dataset's ledger).""")
    # -------------------------------------------------------- outputs
    last_release = param.ClassSelector(class_=sums.SumRelease, **_OUT,
                                       doc="The last release (mode 'release'; nothing private in it).")
    result = param.ClassSelector(class_=SumsResult, **_OUT, doc="The last simulation (kept on errors).")
    busy = param.Boolean(False, **_OUT)
    progress = param.Integer(0, bounds=(0, None), **_OUT)
    progress_total = param.Integer(1, bounds=(1, None), **_OUT)
    error = param.String("", **_OUT, doc="Message of the last failed action ('' after a success).")

    #: Allowed range of the integer controls (checked when a run starts, reported on the page).
    LIMITS = {"bins": ("number of buckets", 2, 4096), "queries": ("number of queries m", 1, 2000),
              "trials": ("number of trials", 1, 500)}
    #: Columns of :meth:`sizes_table`.
    SIZE_COLUMNS = study.SIZE_COLUMNS

    def __init__(self, session: Session | None = None, background: bool = True, **params):
        self._setup_page(session, background)  # session, lock, tasks, tab gate
        self._uploads: dict[str, tuple[np.ndarray, str]] = {}  # attribute -> (values, file name)
        self._csv: tuple[str, pd.DataFrame] | None = None
        self._attr_cache: dict = {}
        self._layout = None
        super().__init__(**params)
        strategies = dpx.registry.names(data_dependent=False)
        self.param.strategy.objects = strategies
        if self.strategy not in strategies and strategies:
            self.strategy = "greedy_h" if "greedy_h" in strategies else strategies[0]
        self._refresh_attributes()
        if "dpbench_dir" in self.session.param:
            self.session.param.watch(lambda *_: self._refresh_attributes(), "dpbench_dir")

    # ================================================================ inputs
    def _dpbench_dir(self):
        folder = str(getattr(self.session, "dpbench_dir", "") or "").strip()
        d = folder or datasets.default_dpbench_dir()
        return None if d is None else str(d)

    def _refresh_attributes(self) -> None:
        names = list(ATTRIBUTES)[:2]
        d = self._dpbench_dir()
        if d is not None and (Path(d) / "1D" / "INCOME.n4096.npy").is_file():
            names.append("DPBench INCOME")
        names += list(self._uploads)
        self.param.attribute.objects = names
        if self.attribute not in names:
            self.attribute = names[0]

    def _integer(self, name: str) -> int:
        """The integer control ``name`` checked against :attr:`LIMITS` (ValueError if empty or outside)."""
        what, lo, hi = self.LIMITS[name]
        value = getattr(self, name)
        if value is None:
            raise ValueError(f"the {what} is empty: enter a whole number from {lo} to {hi}")
        if not lo <= value <= hi:
            raise ValueError(f"the {what} must be a whole number from {lo} to {hi}, got {value}")
        return int(value)

    def svt_params(self) -> SVTParams:
        """The SVT parameters of the controls.

        Raises
        ------
        ValueError
            If α, ρ or r is empty or out of range (0 < α < 1, 0 < ρ < 1, r > 1), or θ₀ ≤ 0.
        """
        for name, symbol, allowed in (("alpha", "α", "0 < α < 1"), ("rho", "ρ", "0 < ρ < 1"),
                                      ("r", "r", "r > 1")):
            if getattr(self, name) is None:
                raise ValueError(f"SVT parameter {name} ({symbol}) is empty: enter a number with {allowed}")
        return SVTParams(alpha=self.alpha, rho=self.rho, r=self.r, theta0=self.theta0)

    def _edges(self):
        text = self.edges_text.strip()
        if not text:
            raise ValueError("bucketing 'edges' needs your bucket edges, e.g. 0, 50, 100, 500, 23040")
        try:
            return [float(t) for t in text.replace(";", ",").split(",") if t.strip()]
        except ValueError:
            raise ValueError(f"bucket edges must be numbers separated by commas, got {text!r}") from None

    def load_attribute(self) -> NumericalAttribute:
        """The selected attribute, bucketed as the controls say (cached).

        Raises
        ------
        ValueError
            Negative values without the shift, bad edges, empty buckets, NaN, ...
        """
        name = self.attribute
        method = "equal_width" if self.bucketing == "edges" else self.bucketing
        bins = self._edges() if self.bucketing == "edges" else self._integer("bins")
        key = (name, self.bucketing, tuple(bins) if isinstance(bins, list) else bins, self.shift_negative,
               self._dpbench_dir() if name == "DPBench INCOME" else None)
        if key in self._attr_cache:
            return self._attr_cache[key]
        if name == "Superstore Sales":
            attr = datasets.superstore_sales(bins=bins, method=method)
        elif name == "Superstore Profit":
            shift = -datasets.SUPERSTORE_PROFIT_RANGE[0] if self.shift_negative else 0.0
            attr = datasets.superstore_profit(bins=bins, method=method, shift=shift)
        elif name == "DPBench INCOME":
            attr = datasets.dpbench_income(self._dpbench_dir())
        elif name in self._uploads:
            values = self._uploads[name][0]
            shift = -float(values.min()) if self.shift_negative and values.min() < 0 else 0.0
            attr = datasets.numerical_attribute(values, bins, method, name=name, shift=shift,
                                                description=f"uploaded column {name!r}")
        else:
            raise ValueError(f"attribute {name!r} is not available")
        if attr.has_negative_values:
            raise ValueError(
                f"{name} has negative values (its buckets start at {attr.edges[0]:g} {attr.unit}); the sum "
                "mechanisms assume non-negative values (truncation caps values from above and the "
                "sensitivity of a sum is its largest value). Tick 'shift negative values' to sum "
                "value + |lower edge| instead, or pick another attribute.")
        self._attr_cache[key] = attr
        if len(self._attr_cache) > 8:
            self._attr_cache.pop(next(iter(self._attr_cache)))
        return attr

    def build_workload(self, attr: NumericalAttribute) -> sums.SumWorkload:
        """The sum workload of the controls over ``attr``'s buckets.

        Raises
        ------
        ValueError
            If the number of queries is empty or outside :attr:`LIMITS`, or the
            workload cannot be built (e.g. more prefix queries than buckets allow).
        """
        return study.build_workload(attr.bucket_values(self.value_kind), self.workload_kind,
                                    self._integer("queries"), self.spacing)

    def _snapshot(self) -> dict:
        """Everything a run needs, read now (so later control changes do not mix into it)."""
        svt = self.svt_params() if self.tau_mode == "svt" else None
        tau = None if self.tau_mode != "user" else _positive(
            self.tau, "the truncation threshold τ is empty: enter a positive finite number (τ > 0) in "
            "attribute units", "the truncation threshold τ must be a positive finite number (τ > 0)")
        gamma = _positive(self.gamma, "γ of the relative error is empty: enter a positive number (γ > 0)",
                          "γ must be a positive number")
        notes = [] if self.session.noise == "Laplace" else [
            "The sum mechanisms are ε-DP with Laplace noise: Laplace(ε) was used, δ ignored."]
        return dict(epsilon=float(self.session.epsilon), seed=int(self.session.seed), svt=svt,
                    tau_mode=self.tau_mode, tau=tau, strategy=self.strategy,
                    trials=self._integer("trials"), gamma=gamma, notes=notes,
                    value_kind=self.value_kind, spacing=self.spacing)

    # ================================================================ running
    def _start(self, job, busy: str, release: bool = False) -> bool:
        """Check the inputs and start ``job(post, attr, workload, snapshot)`` (``False`` if refused)."""
        with self._lock:
            if self.busy:
                return self._fail(busy)
            try:
                snap, attr = self._snapshot(), self.load_attribute()
                if release and (attr.private_edges or (self.attribute in self._uploads and attr.shift)):
                    raise ValueError(
                        "a release needs public buckets, but these bucket edges (or the shift) were "
                        "read from the records (quantile bucketing, or a CSV column's min..max): "
                        "choose equal_width on a Superstore attribute (its public domain) or give "
                        "your own edges")
                workload = self.build_workload(attr)
            except Exception as exc:  # noqa: BLE001 - reported, state kept
                return self._fail(exc)
            total = 1 if release else self._steps(snap) + len(study.curve_taus(workload))
            self._set(busy=True, progress=0, progress_total=max(total, 1))
        self._submit(job, attr, workload, snap)
        return True

    def run(self) -> bool:
        """Start a simulation (returns ``False``, with a message, if it cannot start)."""
        return self._start(self._job, "a simulation is already running; wait for it to finish")

    def _job(self, post, attr, workload, snap) -> None:
        """Worker: the trials, the summaries and the τ curve; results posted to the page."""
        try:
            result = self.simulate(attr, workload, snap, post)
        except Exception as exc:  # noqa: BLE001 - shown on the page, never a traceback
            post(lambda exc=exc: self._done(exc))  # bound now: `exc` is cleared after except
            return
        post(lambda: self._done(result=result, progress=self.progress_total))

    def simulate(self, attr, workload, snap, post=lambda cb: cb()) -> SumsResult:
        """The engine calls behind a run (:func:`dpexplorer.sums.study.simulate`), progress posted."""
        steps = self._steps(snap)  # the untruncated trials too, before the τ curve
        return study.simulate(
            attr, workload, snap["epsilon"], snap["seed"], snap["trials"], snap["tau_mode"], snap["tau"],
            snap["svt"], snap["strategy"], snap["gamma"], notes=snap["notes"],
            value_kind=snap.get("value_kind", self.value_kind), spacing=snap.get("spacing", self.spacing),
            on_trial=lambda done, total: post(lambda: self._set(progress=done)),
            on_tau=lambda done, total: post(lambda: self._set(progress=steps + done)))

    @staticmethod
    def _steps(snap: dict) -> int:
        return snap["trials"] * (1 + (snap["tau_mode"] != "none"))

    def _done(self, exc: BaseException | None = None, spent: bool = False, **outputs) -> None:
        """A job's end, on the page: its outputs, or its error (and the ledger shown, if ``spent``)."""
        self._set(busy=False)
        if spent:
            self.session.ledger_changed()
        if exc is not None:
            self._fail(exc)
        else:
            self._set(error="", **outputs)

    # ================================================================ releases
    def ledger_key(self) -> str:
        """Name of the dataset whose records the selected attribute sums (its ledger pays)."""
        name = self.attribute
        return f"upload: {self._uploads[name][1]}" if name in self._uploads else RECORDS.get(name, name)

    def ledger(self) -> dpx.PrivacyLedger:
        """The ledger of :meth:`ledger_key` in the store every session shares
        (:meth:`Session.stored_ledger`: the sidebar's budget when none is stored)."""
        return self.session.stored_ledger(self.ledger_key())

    def release(self) -> bool:
        """One release of :attr:`release_mechanism`, charged to :meth:`ledger` (``False`` if refused)."""
        return self._start(self._release_job, "a run is in progress; wait for it to finish", release=True)

    def _release_job(self, post, attr, workload, snap) -> None:
        ledger = self.ledger()
        before = len(ledger)
        thr = {"svt": "svt", "none": "none"}.get(snap["tau_mode"])
        if thr is None:  # the page's τ box: declared public by the user (TAU_HELP)
            thr = sums.public_threshold(snap["tau"])
        try:
            rel = sums.run(self.release_mechanism, PrivateData(attr.x, ledger), workload, snap["epsilon"],
                           dpx.OS_CSPRNG, threshold=thr, svt=snap["svt"], strategy=snap["strategy"],
                           isotonic=workload.is_prefix)
        except Exception as exc:  # noqa: BLE001 - shown on the page
            post(lambda exc=exc: self._done(exc, spent=len(ledger) != before))
            return
        post(lambda: self._done(spent=True, last_release=rel, progress=1))

    def release_text(self) -> str:
        """Markdown: the mode, what the last release spent and the dataset's ledger."""
        rel, led = self.last_release, self.ledger()
        where = f"the ledger of `{self.ledger_key()}`: {led.summary()}"
        if rel is None:
            return (f"No release yet. **Release** runs {sums.LABELS[self.release_mechanism]} once "
                    f"(mode: release, OS CSPRNG, no seed), charged to {where}.")
        thr = (f"{len(rel.threshold)} per-query SVT thresholds" if isinstance(rel.threshold, list)
               else rel.threshold.label)
        return (f"**Release** (mode: **{rel.mode}**, OS CSPRNG via opendp, no seed) — "
                f"{sums.LABELS[rel.mechanism]}, {rel.workload.name}, ε = {rel.epsilon:g} "
                f"({rel.epsilon_threshold:g} for τ, {rel.epsilon_answers:g} for the answers); {thr}"
                f"{'; isotonic regression' if rel.isotonic else ''}. Charged to {where}.")

    def release_card(self) -> pn.Card:
        """Mechanism, **Release** button, the mode and spend of the last release and its answers."""
        mech = pn.widgets.Select.from_param(self.param.release_mechanism, **{_LABEL: "Mechanism"},
                                            width=200)
        button = pn.widgets.Button(**{_LABEL: "Release (spends ε)", _BUTTON: "danger"},
                                   disabled=self.param.busy)
        button.on_click(lambda _: self.release())
        p = self.param
        text = pn.pane.Markdown(pn.bind(lambda *_: self.release_text(), p.last_release, p.release_mechanism,
                                        p.attribute, self.session.param.ledger_version),
                                sizing_mode="stretch_width")
        table = TableSlot(lambda frame: pn.widgets.Tabulator(
            frame, show_index=False, disabled=True, sizing_mode="stretch_width",
            layout="fit_data_stretch"), pd.DataFrame(), visible=False)

        def show(*_):
            if self.last_release is not None:
                table.show(self.last_release.to_frame())
                table.visible = True
        self.param.watch(show, ["last_release", "release_mechanism", "attribute"])
        return pn.Card(pn.Row(mech, button), text, table, title="Release (one run, spends ε)",
                       collapsed=True, sizing_mode="stretch_width")

    # ================================================================ uploads
    def load_csv(self, data: bytes, filename: str = "upload.csv") -> list[str]:
        """Read an uploaded CSV; returns its numeric columns ([] after reporting an error)."""
        try:
            if not data:
                raise ValueError("the file is empty: a CSV needs a header row and data rows")
            buffer = io.BytesIO(data)
            buffer.name = filename
            df = dpx.datasets.read_csv(buffer)  # the upload_bytes limit, pandas' errors in words
            numeric = [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c])
                       and not pd.api.types.is_bool_dtype(df[c])]
            if not numeric:
                raise ValueError(f"no numeric column among {list(df.columns)}")
        except Exception as exc:  # noqa: BLE001 - any parser error
            self._fail(exc, f"could not use {filename!r}: ")
            return []
        self._csv = (filename, df)
        self._set(error="")
        return [str(c) for c in numeric]

    def add_csv_column(self, column: str) -> bool:
        """Offer a numeric column of the uploaded CSV as an attribute (and select it)."""
        try:
            if self._csv is None:
                raise ValueError("upload a CSV file first")
            filename, df = self._csv
            values = dpx.datasets.numeric_column(df, column)
            if not np.isfinite(values).all():
                raise ValueError(f"column {column!r} has infinite values")
            name = f"CSV {PurePath(filename).stem}: {column}"
            self._uploads[name] = (values, filename)
            # the cache is keyed on the name: a re-upload under the same name must not reuse it
            for key in [k for k in self._attr_cache if k[0] == name]:
                del self._attr_cache[key]
            self._refresh_attributes()
            self.attribute = name
        except Exception as exc:  # noqa: BLE001
            return self._fail(exc)
        self._set(error="")
        return True

    #: Errors reported in their own words; others are logged and named by their type.
    _EXPECTED = (ValueError, KeyError, RuntimeError, ImportError, FileNotFoundError)

    def _fail(self, exc: BaseException | str, prefix: str = "") -> bool:
        """Show ``exc`` (or a message) on the page and as a notification; returns ``False``."""
        message = exc if isinstance(exc, str) else prefix + _message(exc)
        if not isinstance(exc, (str, *self._EXPECTED)):
            log.error("SumsView action failed", exc_info=exc)
            message = f"{type(exc).__name__}: {message}"
        self._set(error=message)
        self.session.report(message)
        return False

    # ================================================================ plots
    def _shown(self) -> SumsResult | None:
        return self.result and self.result.shown(self.untruncated)

    def _x(self, res: SumsResult):
        if res.workload.thresholds is not None:
            return hv.Dimension("threshold", label=f"query threshold t ({res.attribute.unit or 'value'})")
        return hv.Dimension("query", label="query")

    @staticmethod
    def _per_mechanism(summ: pd.DataFrame):
        """``(mechanism, its rows by query)`` for every mechanism with rows in ``summ``."""
        for mech in sums.MECHANISMS:
            s = summ[summ.mechanism == mech].sort_values("query")
            if not s.empty:
                yield mech, s

    def answers_plot(self, res: SumsResult | None = None):
        """An ``hv.Layout`` of :meth:`answer_panels`: answers vs the truth (paper Figs. 2–3)."""
        return hv.Layout(self.answer_panels(res)).cols(3).opts(shared_axes=False)

    def answer_panels(self, res: SumsResult | None = None) -> list:
        """One overlay per mechanism: 5–95 % band, mean answer and truth against the query threshold."""
        res = res or self._shown()
        if res is None:
            return [hv.Curve([]).opts(title="No simulation yet", responsive=True, height=250)]
        kd = self._x(res)
        summ = res.summary[res.summary.isotonic == (self.show_isotonic and res.workload.is_prefix)]
        panels = []
        for mech, s in self._per_mechanism(summ):
            band = hv.Area(s, kdims=[kd], vdims=["answer_q05", "answer_q95"], label="5–95 %").opts(
                color=COLORS[mech], alpha=0.25, line_alpha=0)
            mean = hv.Curve(s, kdims=[kd], vdims=["answer_mean", "query"], label="mean answer").opts(
                color=COLORS[mech], line_width=2, tools=["hover"])
            truth = hv.Curve(s, kdims=[kd], vdims=["truth", "query"], label="truth").opts(
                color="black", line_width=1.5, line_dash="dashed")
            first = mech == sums.MECHANISMS[0]
            # the one legend goes under its panel, outside the narrow plot: that panel is taller
            panels.append((band * mean * truth).opts(
                title=f"{sums.LABELS[mech]}", responsive=True, height=250 + 40 * first,
                logx=res.spacing == "geometric" and kd.name == "threshold",
                ylabel=f"sum ({res.attribute.unit})", show_legend=first,
                legend_position="bottom", legend_cols=3, **_X_TICKS))
        return panels

    def relative_error_plot(self, isotonic: bool, res: SumsResult | None = None):
        """Relative error per query, log y: mean and 5–95 % band per mechanism (paper Figs. 3–4)."""
        res = res or self._shown()
        title = "With isotonic regression" if isotonic else "Without isotonic regression"
        if res is None:
            return hv.Curve([]).opts(title=title, responsive=True, height=320)
        summ = res.summary[res.summary.isotonic == isotonic]
        if summ.empty:
            return hv.Curve([]).opts(
                title=f"{title}: applies to prefix workloads only", responsive=True, height=320)
        kd = self._x(res)
        layers = []
        for mech, s in self._per_mechanism(summ):
            s = s.assign(**s[["rel_q05", "rel_median", "rel_q95", "rel_mean"]].clip(lower=_LOG_FLOOR))
            layers.append(hv.Area(s, kdims=[kd], vdims=["rel_q05", "rel_q95"]).opts(
                color=COLORS[mech], alpha=0.15, line_alpha=0))
            layers.append(hv.Curve(s, kdims=[kd], vdims=["rel_mean", "query", "rel_median"],
                                   label=sums.LABELS[mech]).opts(color=COLORS[mech], line_width=2,
                                                                 tools=["hover"]))
        return hv.Overlay(layers).opts(
            title=title, responsive=True, height=340, logy=True,
            logx=res.spacing == "geometric" and kd.name == "threshold",
            ylabel="|ŷ − y| / max(y, γ)  (mean, 5–95 %)", legend_position="right", **_X_TICKS)

    def curve_plot(self, res: SumsResult | None = None):
        """Analytic bias², variance and total (MSE per query) of one mechanism vs τ, SVT τ marked."""
        res = res or self.result
        if res is None:
            return hv.Curve([]).opts(title="Bias and variance vs τ", responsive=True, height=320)
        mech = self.curve_mechanism
        c = res.curve[res.curve.mechanism == mech].sort_values("tau")
        kd = hv.Dimension("tau", label=f"τ ({res.attribute.unit})")
        floor = max(float(c[["bias2", "variance", "total"]].to_numpy().max()) * 1e-12, 1e-300)
        c = c.assign(bias2_shown=np.maximum(c["bias2"], floor))
        layers = [hv.Curve(c, kdims=[kd], vdims=[v], label=label).opts(color=color, line_width=2)
                  for v, label, color in (("bias2_shown", "bias² (from the data)", "#9467bd"),
                                          ("variance", "variance (analytic)", "#17becf"))]
        layers.append(hv.Curve(c, kdims=[kd], vdims=["total"], label="total = bias² + variance").opts(
            color="black", line_width=2.5, tools=["hover"]))
        best = c.loc[c["total"].idxmin()]
        layers.append(hv.Scatter([(best["tau"], best["total"])], kdims=[kd], vdims=["total"],
                                 label=f"best τ = {best['tau']:.4g} (not private)").opts(
            color="black", size=9, marker="diamond"))
        if res.tau_mode in ("svt", "user") and res.taus.size:
            lo, med, hi = sums.tau_band(res.taus)
            if hi > lo:  # after the curves, which give the axes their labels
                layers.append(hv.VSpan(lo, hi).opts(color="#d62728", alpha=0.12))
            layers.append(hv.VLine(med).opts(color="#d62728", line_dash="dashed", line_width=2))
        title = (f"{sums.LABELS[mech]}: mean squared error per query vs τ "
                 f"(answers with ε = {res.epsilon_answers:.3g}); red: τ of the trials")
        return hv.Overlay(layers).opts(title=title, responsive=True, height=340, logx=True, logy=True,
                                       ylabel="squared error per query", legend_position="bottom_right")

    def sizes_table(self, res: SumsResult | None = None) -> pd.DataFrame:
        """Median and 5–95 % relative error of the smallest and largest 20 % of queries, per mechanism."""
        res = res or self._shown()
        return pd.DataFrame(columns=self.SIZE_COLUMNS) if res is None else study.sizes_table(res.sizes)

    def summary_text(self, res: SumsResult | None = None) -> str:
        """Markdown: what ran, the thresholds, the winners."""
        res = res or self.result
        if res is None:
            s = self.session
            return (f"No simulation yet. **Run simulation** runs the five mechanisms "
                    f"{self.trials} times with ε = {s.epsilon:g} and seeds derived from {s.seed} "
                    "(simulation on public data, nothing spent from the session).")
        a, S = res.attribute, res.workload
        if res.tau_mode == "svt":
            p = res.svt
            lo, med, hi = sums.tau_band(res.taus)
            tau = (f"**τ chosen by SVT** (α = {p.alpha:g}, ρ = {p.rho:g}, r = {p.r:g}, θ₀ = "
                   f"{'smallest value' if p.theta0 is None else f'{p.theta0:g}'}): trial 0 τ = "
                   f"{res.taus[0]:.4g}; over the trials median {med:.4g}, 5–95 % {lo:.4g} .. {hi:.4g} "
                   f"{a.unit} (SQM picks one τ per query with α·ε/m)")
        elif res.tau_mode == "user":
            tau = f"**τ = {res.taus[0]:.4g} {a.unit}** (declared public: given, data-independent)"
        else:
            tau = "**no truncation**"
        best = [f"{size} queries: **{sums.LABELS[mech]}** (median relative error {median:.3g})"
                for size, mech, median in study.best_by_size(res.sizes)]
        text = [f"**Simulation on public data** (mode: simulation, not a release) — {res.trials} "
                f"trials, seeds from {res.seed}, "
                f"ε = {res.epsilon:g} per mechanism and trial ({res.seconds:.1f} s).",
                f"**{a.name}**: {a.description}. {a.n:,} buckets, values = "
                f"{res.value_kind} edges; **{S.name}** ({S.m} queries); TiMM/TaMM strategy "
                f"`{res.strategy}`.", tau + ".", "Best " + "; ".join(best) + "." if best else ""]
        text += [f"*{n}*" for n in res.notes]
        return "\n\n".join(t for t in text if t)

    # ================================================================ layout
    def controls(self) -> pn.Column:
        """The sidebar: data, bucketing, workload, threshold τ and run widgets, plus the CSV upload."""
        w = pn.widgets

        def box(widget, name, label=None, **options):
            if label:
                options[_LABEL] = label
            if name in self.LIMITS:
                options.update(start=self.LIMITS[name][1], end=self.LIMITS[name][2])
            return widget.from_param(self.param[name], **options)

        run = w.Button(**{_LABEL: "Run simulation", _BUTTON: "primary"}, disabled=self.param.busy)
        run.on_click(lambda _: self.run())
        # the running task's progress, through the tab gate (nothing changes while hidden)
        shown = self.gate.mirror(self, ["busy", "progress", "progress_total"])
        progress = pn.indicators.Progress(
            value=pn.bind(percent, shown.param.progress, shown.param.progress_total), max=100,
            visible=shown.param.busy, sizing_mode="stretch_width")
        mode = self.param.tau_mode
        svt_box = pn.Column(box(w.FloatInput, "alpha", "α (ε share for τ)", step=0.05),
                            box(w.FloatInput, "rho", "ρ (kept share)", step=0.01),
                            box(w.FloatInput, "r", "r (growth)", step=0.05),
                            box(w.FloatInput, "theta0", "θ₀ (empty: smallest value)"),
                            visible=pn.bind(lambda m: m == "svt", mode))
        return pn.Column(
            pn.pane.Markdown("### Data"), box(w.Select, "attribute", "Attribute"),
            pn.pane.Markdown(pn.bind(ATTRIBUTE_NOTES.get, self.param.attribute, ""),
                             sizing_mode="stretch_width"),
            box(w.Checkbox, "shift_negative", "Shift negative values"),
            pn.pane.Markdown("Buckets"), box(w.RadioButtonGroup, "bucketing"),
            box(w.IntInput, "bins", "Buckets"),
            box(w.TextInput, "edges_text", "Edges (for 'edges')", placeholder="0, 50, 100, 1000, 23040"),
            pn.pane.Markdown("Bucket value"), box(w.RadioButtonGroup, "value_kind"),
            pn.pane.Markdown("### Workload"), box(w.RadioButtonGroup, "workload_kind"),
            box(w.IntInput, "queries", "Queries m"), box(w.RadioButtonGroup, "spacing"),
            pn.pane.Markdown("### Threshold τ"), box(w.RadioButtonGroup, "tau_mode"),
            box(w.FloatInput, "tau", "τ (user)", visible=pn.bind(lambda m: m == "user", mode)), svt_box,
            pn.pane.Markdown("### Run"), box(w.Select, "strategy", "TiMM/TaMM strategy"),
            box(w.IntInput, "trials", "Trials"), box(w.FloatInput, "gamma", "γ (relative error)"),
            run, progress, self.upload_card(), width=320)

    def upload_card(self) -> pn.Card:
        """A collapsed card to upload a CSV file and offer one of its numeric columns as an attribute."""
        column = pn.widgets.Select(**{_LABEL: "Column"}, options=[], disabled=True)
        add = pn.widgets.Button(**{_LABEL: "Use column", _BUTTON: "success"}, disabled=True)

        def on_csv(data, name):
            cols = self.load_csv(data, name)
            column.options = cols
            column.disabled = add.disabled = not cols
        csv_in = Upload(accepted_filetypes=[".csv", "text/csv"], on_file=on_csv,
                        on_error=self.session.report)
        add.on_click(lambda _: column.value is not None and self.add_csv_column(column.value))
        return LazyCard(pn.pane.Markdown("One record per row; pick a numeric column. Its values are "
                                         "bucketed with the settings above (equal-width over "
                                         "the column's min..max)."),
                        csv_in, csv_in.note(), column, add, title="Upload a CSV column",
                        collapsed=True, sizing_mode="stretch_width")

    def results(self) -> pn.Column:
        """The result panes (summary, answers, relative errors, size table, τ curve), kept drawn."""
        p, s, wide = self.param, self.session.param, {"sizing_mode": "stretch_width"}
        # before a run, the summary says what Run simulation will do (trials, ε, seed)
        summary = pn.pane.Markdown(pn.bind(lambda *_: self.summary_text(), p.result, p.trials,
                                           s.epsilon, s.seed), **wide)
        answers = pn.GridBox(objects=pn.bind(lambda *_: [
            pn.pane.HoloViews(fig, linked_axes=False, height=260, **wide)
            for fig in self.answer_panels()], p.result, p.show_isotonic, p.untruncated), ncols=3, **wide)
        rel = pn.Row(*(pn.pane.HoloViews(pn.bind(lambda *_, iso=iso: self.relative_error_plot(iso), p.result,
                                                 p.untruncated), **wide) for iso in (False, True)), **wide)
        sizes = pn.widgets.Tabulator(pn.bind(lambda *_: self.sizes_table(), p.result, p.untruncated),
                                     show_index=False, disabled=True, layout="fit_data_stretch", **wide,
                                     formatters={c: NumberFormatter(format="0.0000")
                                                 for c in self.SIZE_COLUMNS[2:]})
        curve = pn.pane.HoloViews(pn.bind(lambda *_: self.curve_plot(), p.result, p.curve_mechanism),
                                  height=360, **wide)
        self.exports: dict = {}
        figures = {"answers": lambda: hv.Layout(self.answer_panels()).cols(3),
                   "relative-error": lambda: self.relative_error_plot(False),
                   "relative-error-isotonic": lambda: self.relative_error_plot(True),
                   "tau-curve": self.curve_plot}
        exports = {name: FigureExport("sums", name, lambda f=f: f() if self.result is not None else None,
                                      report=self.session.report, into=self.exports)
                   for name, f in figures.items()}
        split = pn.widgets.Tabulator(pn.bind(lambda r: study.split_table(r and r.split), p.result),
                                     show_index=False, disabled=True, layout="fit_data_stretch", **wide)
        return pn.Column(
            self.release_card(), summary,
            pn.pane.Markdown("#### Error with and without truncation (bias from the data, noise analytic)"),
            pn.pane.Markdown(pn.bind(lambda r: r and study.split_text(r.split, r.attribute.unit) or "",
                                     p.result), **wide), split,
            pn.pane.Markdown("#### Noisy answers against the truth (mean and 5–95 % over the trials)"),
            pn.Row(*(pn.widgets.Checkbox.from_param(p[k], **{_LABEL: v}) for k, v in (
                ("show_isotonic", "answers after isotonic regression"),
                ("untruncated", "the run without truncation")))),
            answers, exports["answers"],
            pn.pane.Markdown("#### Relative error per query (log scale)"), rel,
            pn.Row(exports["relative-error"], exports["relative-error-isotonic"], **wide),
            pn.pane.Markdown("**Small and large queries** (smallest / largest 20 % of true answers; "
                             "relative error over trials and queries)."), sizes,
            pn.pane.Markdown("#### Bias–variance trade-off of τ\nBias² is computed from the data "
                             "(not private, shown to explain the trade-off); the variance is "
                             "analytic. Dashed red: median τ of the trials; shaded: their 5–95 %."),
            pn.widgets.Select.from_param(p.curve_mechanism, **{_LABEL: "Mechanism for the τ curve"},
                                         width=240),
            curve, exports["tau-curve"], loading=p.busy, **wide)

    def panel(self) -> pn.Column:
        """The whole page (built once)."""
        if self._layout is None:
            self._layout = pn.Column(
                pn.pane.Markdown(HEADER, sizing_mode="stretch_width"), self.error_alert(),
                side_by_side(self.controls(), self.results()),
                sizing_mode="stretch_width")
        return self._layout
