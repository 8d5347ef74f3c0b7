"""The explorer's shared state: privacy parameters, dataset, budget, ledgers, workload.

One :class:`Session` per browser session (or notebook) drives every page.  Only public
things live here except the datasets' data vectors, which pages hand to the privacy kernel
(:class:`dpexplorer.privacy.PrivateData`).  Each dataset's ledger lives in one SQLite store
shared by every session (:func:`ledger_store_path`); a session may lower a budget, never
raise it (the data owner's act in Python, ``dpexplorer/docs/accounting.md``); a release
that would exceed it is refused before any noise is drawn.  The seed seeds simulations
only: releases draw from the OS CSPRNG.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import threading
import weakref
from pathlib import Path
from typing import ClassVar

import numpy as np
import panel as pn
import param
import platformdirs

import dpexplorer as dpx
from dpexplorer.datasets import Dataset

from . import workers
from .accuracy_view import PrivacySentence
from .messages import app_text, exception_message
from .serving import LABEL as _LABEL
from .serving import LazyCard, ShownGate, served_document
from .tasks import Jobs, Task

__all__ = ["Session", "Page", "ledger_store_path", "EnteredFloatInput", "number_text",
           "parse_number", "notify", "error_alert", "exception_message", "app_text",
           "side_by_side", "readable_headers", "download_bytes", "release_stamp"]

log = logging.getLogger(__name__)


def ledger_store_path() -> Path:
    """The SQLite file of every dataset's ledger: ``$DPEXPLORER_LEDGER``, else ``ledgers.sqlite``
    in ``platformdirs.user_data_dir("dpexplorer")`` (created when a ledger is first opened)."""
    env = os.environ.get("DPEXPLORER_LEDGER", "").strip()
    if env:
        return Path(env).expanduser()
    return Path(platformdirs.user_data_dir("dpexplorer")) / "ledgers.sqlite"


def _cap(text: str, **params) -> dict:
    return {_LABEL: text, **params}


def notify(message: str, level: str = "error") -> None:
    """Log ``message`` and show it in the notification area, if any; never raises."""
    log.info("%s: %s", level, message)
    with contextlib.suppress(Exception):  # no session or no notification area
        area = pn.state.notifications
        if area is not None:
            getattr(area, level)(message, duration=8000)


class Page:
    """What the pages share: set-up, tasks, read-only outputs, the error shown.  Mixed into a
    ``param.Parameterized`` page with an ``error`` parameter and a ``panel()`` method."""

    def _setup_page(self, session: Session | None = None, background: bool | None = True) -> None:
        """Set ``session`` (new if None), ``background`` (None: only when served), ``_lock``,
        ``_jobs``, ``gate``, ``_loaded`` (set once the browser drew the page) and ``_doc``
        (weak reference to the served document); call before ``super().__init__``."""
        doc = served_document()
        self.session = session if session is not None else Session()
        self.background = (doc is not None) if background is None else background
        self._lock = threading.RLock()
        self._jobs = Jobs(self._lock)
        self.gate = ShownGate(self._lock)
        self._loaded = threading.Event()
        self._doc = None if doc is None else weakref.ref(doc)
        if doc is None:
            self._loaded.set()
            return
        try:
            pn.state.onload(self._loaded.set)
        except Exception:  # noqa: BLE001 - no onload support: do not wait
            self._loaded.set()
        doc.on_session_destroyed(self._session_destroyed)

    def _session_destroyed(self, _context) -> None:
        """The page's tab has closed: its ``stop()``, if any, stops its work."""
        stop = getattr(self, "stop", None)
        if callable(stop):
            stop()

    def start_task(self, fn, *args, **options) -> Task:
        """Start ``fn(task, *args)`` as a task of this page (``options``: ``TaskRunner.start``'s)."""
        return self._jobs.start(fn, *args, background=self.background, **options)

    def _submit(self, fn, *args, executor=None) -> None:
        """Run the job ``fn(post, *args)`` in the background, or now (``background=False``)."""
        if self.background:
            self._jobs.submit(fn, *args, executor=executor)
        else:
            fn(lambda callback: callback(), *args)

    def wait(self, timeout: float = 300.0) -> bool:
        """Block until the page's tasks are done; ``False`` on timeout."""
        jobs = getattr(self, "_jobs", None)
        return True if jobs is None else jobs.wait(timeout)

    def _set(self, **values) -> None:
        """Set parameters, constant (read-only) outputs included."""
        with param.edit_constant(self):
            self.param.update(**values)

    def _fail(self, exc: BaseException) -> None:
        """Show ``exc`` in the page and as a notification; unexpected ones are logged."""
        if isinstance(exc, (ValueError, KeyError, RuntimeError)):
            msg = exception_message(exc)
        else:
            logging.getLogger(type(self).__module__).error(
                "%s action failed", type(self).__name__, exc_info=exc)
            msg = f"{type(exc).__name__}: {exc}"
        self._set(error=msg)
        self.session.report(msg)

    def error_alert(self) -> pn.pane.Alert:
        """A danger Alert showing the page's ``error``, hidden while there is none."""
        return error_alert(self.param.error)

    def __panel__(self):
        return self.panel()


def side_by_side(*columns, basis: int = 480) -> pn.FlexBox:
    """``columns`` side by side, wrapping on a narrow screen; a stretching one grows from
    ``basis`` pixels."""
    for col in columns:
        if getattr(col, "sizing_mode", None) in ("stretch_width", "stretch_both"):
            col.styles = {**(col.styles or {}), "flex": f"1 1 {basis}px", "min-width": "0"}
    return pn.FlexBox(*columns, flex_wrap="wrap", align_items="flex-start", sizing_mode="stretch_width")


#: Pixels per character of a Tabulator header word, around it (padding, borders) and of the
#: sort arrow (headless Chromium, 1500 px window: "mechanism" 102 px, "RMSE" 51 px).
_HEADER_CHAR_PX, _HEADER_PAD_PX, _HEADER_SORTER_PX = 13, 24, 26


def readable_headers(columns, titles: dict | None = None, sortable: bool = True,
                     grow: dict | None = None) -> dict:
    """Tabulator ``configuration`` cutting no header off: each field at least as wide as the
    longest word of its title (``titles``; U+00AD marks a break), plus the sort arrow when
    ``sortable``; ``grow``: share of the width left over, by field (``widthGrow``)."""
    grow, titles = grow or {}, titles or {}
    pad = _HEADER_PAD_PX + (_HEADER_SORTER_PX if sortable else 0)
    config = []
    for field in columns:
        words = str(titles.get(field, field)).replace("\u00ad", " ").split() or [""]
        column = {"field": str(field), "headerWordWrap": True,
                  "minWidth": int(max(len(w) for w in words) * _HEADER_CHAR_PX + pad)}
        if not sortable:
            column["headerSort"] = False
        if field in grow:
            column["widthGrow"] = grow[field]
        config.append(column)
    return {"columns": config}


def download_bytes(text_fn, fail) -> io.BytesIO:
    """``text_fn()`` as UTF-8 bytes for a FileDownload; on error ``fail(exc)`` and empty bytes."""
    try:
        return io.BytesIO(text_fn().encode("utf-8"))
    except Exception as exc:  # noqa: BLE001 - reported on the page, never a traceback
        fail(exc)
        return io.BytesIO(b"")


def release_stamp(release) -> str:
    """The release's creation time as ``YYYYMMDDhhmmss`` (for download file names)."""
    return "".join(ch for ch in release.created if ch.isdigit())[:14]


def number_text(value) -> str:
    """The shortest text reading back as ``value`` (``1``, ``0.5``, ``1e-06``); '' for None, NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def parse_number(text) -> float | None:
    """The number ``text`` holds (None when blank); ValueError if it is none ("1,5")."""
    if text is None or not str(text).strip():
        return None
    try:
        return float(str(text).strip())
    except ValueError:
        raise ValueError(f"{str(text).strip()!r} is not a number") from None


class EnteredFloatInput(pn.widgets.FloatInput):
    """A number box read on the server (Bokeh's silently drops keys): a text box whose text
    that is not a number keeps :attr:`value`, goes to :attr:`refused` (an event each time)
    and shows the value in use again; a priority change, without Panel's 50 ms hold."""

    refused = param.String(default="", precedence=-1, doc="""
        The last text entered that is not a number ('' until one is).""")

    _priority_changes: ClassVar[list[str]] = ["value"]
    _widget_type = pn.widgets.TextInput._widget_type
    _rename: ClassVar[dict] = {
        **pn.widgets.FloatInput._rename, "start": None, "end": None, "step": None,
        "format": None, "mode": None, "page_step_multiplier": None, "wheel_wait": None,
        "value_throttled": None, "refused": None}

    @property
    def _linked_properties(self) -> tuple[str, ...]:
        # the text box has no value_throttled (a FloatInput's spinner has)
        return tuple(p for p in super()._linked_properties if p != "value_throttled")

    def _process_param_change(self, params: dict) -> dict:
        params = super()._process_param_change(params)
        if "value" in params:
            params["value"] = number_text(params["value"])
        return params

    def _process_property_change(self, props: dict) -> dict:
        if "value" in props:
            text = props.pop("value")
            try:
                props["value"] = parse_number(text)
            except ValueError:
                with param.discard_events(self):
                    self.refused = str(text)
                self.param.trigger("refused")
                # the box shows the value in use again (the browser still shows the text)
                self.param.trigger("value")
        return super()._process_property_change(props)


def error_alert(error, lead: str = "**Not done, the page keeps its last result.**") -> pn.pane.Alert:
    """A danger Alert of ``lead`` and the ``error`` parameter's text in the app's words,
    hidden while it is ''."""
    return pn.pane.Alert(pn.bind(lambda e: f"{lead} {app_text(e)}", error), alert_type="danger",
                         sizing_mode="stretch_width", disable_math=True,
                         visible=pn.bind(bool, error))


class Session(param.Parameterized):
    """The sidebar's inputs shared by all pages, and the session's ledgers."""

    epsilon = param.Number(default=1.0, bounds=(0, None), inclusive_bounds=(False, True),
                           softbounds=(0.01, 5.0), doc="Privacy parameter ε > 0 (per release).")
    delta = param.Number(default=1e-6, bounds=(0, 1), inclusive_bounds=(False, False),
                         doc="Privacy parameter δ in (0, 1), Gaussian noise only.")
    noise = param.Selector(default="Laplace", objects=["Laplace", "Gaussian"],
                           doc="Laplace (ε-DP) or analytic Gaussian ((ε, δ)-DP).")
    dataset = param.Selector(default=dpx.datasets.DEFAULT_1D, objects=[dpx.datasets.DEFAULT_1D],
                             doc="Dataset the data pages and releases run on.")
    seed = param.Integer(default=0, bounds=(0, None), doc="""
        Simulation seed (comparisons on data, bands, DAWA and sum simulations); releases have none.""")
    calibration = param.Selector(default="zcdp", objects=["zcdp", "analytic"], doc="""
        Gaussian calibration: zCDP (what releases use) or analytic (Balle & Wang, study only).""")
    budget = param.Selector(default="approx", objects=["none", "pure", "approx", "zcdp"], doc="""
        Budget of each dataset: none, pure ε, (ε, δ), or ρ (zCDP).""")
    budget_epsilon = param.Number(default=5.0, bounds=(0, None), inclusive_bounds=(False, True),
                                  doc="ε each dataset may spend in all (pure and (ε, δ) budgets).")
    budget_delta = param.Number(default=1e-5, bounds=(0, 1), inclusive_bounds=(False, False),
                                doc="δ each dataset may spend in all ((ε, δ) budget).")
    budget_rho = param.Number(default=1.0, bounds=(0, None), inclusive_bounds=(False, True),
                              doc="ρ each dataset may spend in all (zCDP budget).")
    dpbench_dir = param.String(default="", doc="Folder of DPBench histograms (optional).")
    workload = param.ClassSelector(class_=dpx.matrix.Matrix, default=None, allow_None=True, doc="""
        The current workload W (built on the Workload page; All Range over 256 cells at start).""")
    table = param.ClassSelector(class_=dpx.Table, default=None, allow_None=True, doc="""
        The record table whose marginals the workload was built over (Workload page); the
        Release page releases from it when the workload's domain is the table's.  Its records
        stay behind the privacy kernel (dpx.privacy.PrivateTable).""")

    error = param.String(default="", doc="Last error shown to the user (for tests).")
    ledger_version = param.Integer(default=0, doc="Bumped whenever the ledger gains entries.")

    def __init__(self, **params):
        self._datasets: dict[str, Dataset] = {}
        self._loaders: dict[str, object] = {}
        self._sources: dict[str, str] = {}
        # optimisers in worker processes; no dense n × n SVD bound above 4096 cells
        self.cache = dpx.StrategyCache(build=workers.build, dense_cells=4096)
        self.ledgers: dict[str, dpx.PrivacyLedger] = {}
        self.ledger_path = ledger_store_path()
        self.releases: list = []
        self._sentence = PrivacySentence(self, on_ready=self._explain)
        if "dpbench_dir" not in params:  # $DPEXPLORER_DPBENCH, a checkout's copy, the download cache
            found = dpx.datasets.default_dpbench_dir()
            params["dpbench_dir"] = "" if found is None else str(found)
        self._showing_budget = False
        super().__init__(**params)
        if self.workload is None:
            self.workload = dpx.workloads.all_range(256)
        self._refresh_datasets()
        self.show_budget_in_force()

    def noise_model(self) -> dpx.noise.NoiseModel:
        """``Laplace(ε)`` or ``Gaussian(ε, δ)``; ValueError for ε or δ out of range."""
        if self.noise == "Gaussian":
            return dpx.Gaussian(self.epsilon, self.delta, self.calibration)
        return dpx.Laplace(self.epsilon)

    # ---------------------------------------------------------------- ledgers
    def budget_object(self) -> dpx.Budget | None:
        """The sidebar's budget as a :class:`dpexplorer.Budget` (``None`` for no budget)."""
        if self.budget == "pure":
            return dpx.Budget.pure(self.budget_epsilon)
        if self.budget == "approx":
            return dpx.Budget.approx(self.budget_epsilon, self.budget_delta)
        if self.budget == "zcdp":
            return dpx.Budget.zcdp(self.budget_rho)
        return None

    def stored_ledger(self, key: str) -> dpx.PrivacyLedger:
        """The ledger of ``key`` in the shared store (the sidebar's budget if none is stored)."""
        led = self.ledgers.get(key)
        if led is None:
            self.ledger_path.parent.mkdir(parents=True, exist_ok=True)
            led = dpx.PrivacyLedger.open(self.ledger_path, key)
            new = self.budget_object()
            if led.budget is None and new is not None:
                try:
                    led.lower_budget(new)
                except ValueError as exc:  # it already spent more: the store's state stands
                    log.info("budget of %r not set: %s", key, exc)
            self.ledgers[key] = led
        return led

    @property
    def ledger(self) -> dpx.PrivacyLedger:
        """The selected dataset's ledger (key: its name), from the shared store."""
        return self.stored_ledger(self.dataset)

    def table_ledger(self, table: dpx.Table) -> dpx.PrivacyLedger:
        """The ledger of a record table, ``"table: <name>"`` in the shared store; every release
        from the table's records spends from it."""
        return self.stored_ledger(f"table: {table.name}")

    @param.depends("budget", "budget_epsilon", "budget_delta", "budget_rho", watch=True)
    def _apply_budget(self) -> None:
        """Lower the dataset's (and record table's) budget to the sidebar's; raising, removing
        or going below what was spent is refused; another kind starts from its largest budget
        within the one in force (:func:`_largest_within`)."""
        if self._showing_budget:
            return  # the fields are being set to the budget in force: nothing to apply
        new = self.budget_object()
        in_force = self.ledger.budget
        if (new is not None and in_force is not None and new.kind != in_force.kind
                and not dpx.privacy.ledger.budget_within(new, in_force)):
            near = _largest_within(new.kind, in_force)
            if near is not None:
                notify(f"{near.label}: the largest budget of this kind within the budget in force, "
                       f"{in_force.label}; lower it from here.", "info")
                new = near
        ledgers = [(f"the dataset {self.dataset!r}", self.dataset, self.ledger)]
        if self.table is not None:
            key = f"table: {self.table.name}"
            ledgers.append((f"the table {self.table.name!r}", key, self.table_ledger(self.table)))
        for what, key, led in ledgers:
            old = led.budget
            if new == old:
                continue
            if not dpx.privacy.ledger.budget_within(new, old):
                self.report(
                    f"not applied: {new.label if new else 'no budget'} would raise the budget of "
                    f"{what}, {old.label}.  A session may only lower a dataset's budget; raising it "
                    f"is its owner's act, in Python: dpx.PrivacyLedger.open({str(self.ledger_path)!r}, "
                    f"{key!r}).set_budget(dpx.Budget...)")
                continue
            try:
                led.lower_budget(new)
            except ValueError:
                self.report(f"not applied: {what} has already spent more than {new.label} "
                            f"({led.summary()}); its budget stays {old.label if old else 'unset'}")
        self.show_budget_in_force()
        self.ledger_changed()

    @param.depends("dataset", watch=True)
    def show_budget_in_force(self) -> None:
        """Set the budget fields to the selected dataset's budget in force (applying nothing)."""
        b = self.ledger.budget
        values = {"budget": "none" if b is None else b.kind}
        if b is not None:
            values.update({f"budget_{k}": float(getattr(b, k)) for k in ("epsilon", "delta", "rho")
                           if getattr(b, k) is not None})
        values = {k: v for k, v in values.items() if getattr(self, k) != v}
        if not values:
            return
        self._showing_budget = True
        try:
            self.param.update(**values)
        finally:
            self._showing_budget = False

    # -------------------------------------------------------------- datasets
    @param.depends("dpbench_dir", watch=True)
    def _refresh_datasets(self) -> None:
        loaders: dict[str, object] = dict(dpx.datasets.bundled())
        sources = dict(dpx.datasets.BUNDLED_SOURCES)
        folder = self.dpbench_dir.strip()
        if folder:
            try:
                for _, row in dpx.datasets.list_dpbench(folder).iterrows():
                    name = f"DPBench: {row['paper_name']}"
                    loaders[name] = _dpbench_loader(row["path"], row["paper_name"])
                    sources[name] = dpx.datasets.dpbench_source(row["name"])
            except (FileNotFoundError, ValueError) as exc:
                self.report(f"DPBench folder not usable: {exc}")
        for name, ds in self._datasets.items():
            loaders.setdefault(name, None)
            sources.setdefault(name, ds.source)
        self._loaders, self._sources = loaders, sources
        self.param.dataset.objects = list(loaders)
        if self.dataset not in loaders:
            self.dataset = dpx.datasets.DEFAULT_1D

    def add_dataset(self, dataset: Dataset, select: bool = True) -> None:
        """Add an uploaded dataset (CSV column or .npy) to the selector."""
        self._datasets[dataset.name] = dataset
        self._loaders[dataset.name] = None
        self._sources[dataset.name] = dataset.source
        self.param.dataset.objects = list(self._loaders)
        if select:
            self.dataset = dataset.name

    def dataset_source(self, name: str | None = None) -> str:
        """Where a listed dataset (default the selected one) comes from, in words; never loads it."""
        return self._sources.get(self.dataset if name is None else name) or "origin not recorded"

    def source_text(self, name: str | None = None) -> str:
        """The line shown next to every dataset list: "*Source:* …" (Markdown)."""
        return f"*Source:* {self.dataset_source(name)}"

    def data(self) -> Dataset:
        """The selected dataset (loaded once); ValueError if it cannot be loaded."""
        name = self.dataset
        if name not in self._datasets:
            loader = self._loaders.get(name)
            if loader is None:
                raise ValueError(f"dataset {name!r} is not available")
            self._datasets[name] = loader()
        return self._datasets[name]

    # ---------------------------------------------------------------- errors and inputs
    def report(self, message: str) -> None:
        """Record and show an error message (in the app's words, :func:`app_text`)."""
        message = app_text(message)
        self.error = message
        notify(message, "error")

    def set_input(self, name: str, value) -> bool:
        """Set a sidebar input after checking it; ``True`` if used.  A refused value is reported
        (what was wrong, what is allowed, the value kept); an extreme ε or δ warns."""
        label = _INPUT_LABELS.get(name, name)
        kept = f"it stays {_shown(getattr(self, name, None))}."
        if isinstance(value, str) and name in _NUMBER_INPUTS and value.strip():
            try:
                value = parse_number(value)
            except ValueError as exc:  # e.g. "abc" typed as ε
                self.report(f"{label} = {exc}{_INPUT_RULES[name]}; {kept}")
                return False
        if value is None or (isinstance(value, str) and not value.strip()
                             and name != "dpbench_dir"):
            self.report(f"{label} needs a value{_INPUT_RULES.get(name, '')}; {kept}")
            return False
        self.error = ""
        try:
            if name in ("epsilon", "delta"):
                eps = value if name == "epsilon" else self.epsilon
                delta = value if name == "delta" else self.delta
                dpx.Laplace(eps)
                dpx.Gaussian(eps, delta, "zcdp")
            setattr(self, name, value)
            log.debug("sidebar input %s = %r used", name, value)
        except (ValueError, TypeError) as exc:
            rule = _INPUT_RULES.get(name)
            self.report(f"{label} = {_shown(value)} was not used{rule}; {kept}" if rule
                        else str(exc).replace("Session.", ""))
            return False
        if name.startswith("budget") and self.error:
            return True  # used, but the budget it asked for was refused: its message stays
        if name in ("epsilon", "delta", "noise", "dataset") and self.privacy_note():
            notify(self.privacy_note(), "warning")
        return True

    def privacy_note(self) -> str:
        """What an extreme ε or δ means, in words ('' for ordinary values).

        Above ε ≈ 10 the factor ``e^ε`` exceeds 20,000 and protects almost nothing; below
        0.01 the noise (scale ``Δ/ε``) is over 100 times the sensitivity.  δ must be far
        below ``1/N`` for ``N`` records, or a mechanism could publish one record in full and
        still meet it (Dwork & Roth 2014, Sec. 2.3).
        """
        notes = []
        eps = self.epsilon
        if eps > 10:
            notes.append(f"ε = {eps:g} gives almost no privacy: one person's data may make an "
                         f"output e^{eps:g} times more likely. Usual values are 0.1 to 2.")
        elif eps < 0.01:
            notes.append(f"ε = {eps:g} adds noise {1 / eps:,.0f} times the sensitivity: most "
                         "answers will be noise. Usual values are 0.1 to 2.")
        if self.noise == "Gaussian":
            records = getattr(self._datasets.get(self.dataset), "n_records", None)
            if records:
                if self.delta >= 0.1 / records:
                    example = 10 ** math.floor(math.log10(0.01 / records))
                    notes.append(f"δ = {self.delta:g} is not far below 1/N = 1/{records:,} for the "
                                 f"{records:,} records of {self.dataset!r}: with probability δ the "
                                 "guarantee may fail outright, enough to publish a record. Use "
                                 f"δ well below {1 / records:.1g}, e.g. {example:g}.")
            elif self.delta > 1e-3:
                notes.append(f"δ = {self.delta:g} is large: with probability δ the guarantee may "
                             "fail outright. δ should be far below 1/N for N records, e.g. 1e-6.")
        return " ".join(f"⚠ {n}" for n in notes)

    # ------------------------------------------------------------------- UI
    def controls(self) -> pn.Column:
        """Sidebar widgets bound to the session (invalid values are refused with a message)."""
        wide = {"sizing_mode": "stretch_width"}
        widgets = {
            "noise": pn.widgets.RadioButtonGroup(**_cap("Noise"), options=["Laplace", "Gaussian"]),
            "epsilon": EnteredFloatInput(**_cap("ε (> 0)", **wide)),
            "delta": EnteredFloatInput(**_cap("δ (0 < δ < 1)", **wide),
                                       visible=pn.bind(lambda n: n == "Gaussian", self.param.noise)),
            "dataset": pn.widgets.Select(**_cap("Dataset", **wide),
                                         options=self.param.dataset.objects),
            "seed": pn.widgets.IntInput(
                **_cap("Simulation seed", **wide), start=0,
                description="Seeds simulations only (bands, comparisons on data, DAWA and "
                            "sum-query simulations). Releases have no seed: their noise comes "
                            "from the OS CSPRNG."),
            "budget": pn.widgets.Select(**_cap("Budget of each dataset", **wide),
                                        options={"none": "none", "pure ε-DP": "pure",
                                                 "(ε, δ)": "approx", "ρ (zCDP)": "zcdp"}),
            "budget_epsilon": EnteredFloatInput(**_cap("Budget ε", **wide), visible=pn.bind(
                lambda b: b in ("pure", "approx"), self.param.budget)),
            "budget_delta": EnteredFloatInput(**_cap("Budget δ", **wide), visible=pn.bind(
                lambda b: b == "approx", self.param.budget)),
            "budget_rho": EnteredFloatInput(**_cap("Budget ρ", **wide), visible=pn.bind(
                lambda b: b == "zcdp", self.param.budget)),
            "dpbench_dir": pn.widgets.TextInput(
                **_cap("DPBench folder", **wide),
                placeholder="folder holding the 1D/ and 2D/ .npy files"),
            "calibration": pn.widgets.RadioButtonGroup(
                **_cap("Gaussian calibration"),
                options={"zCDP (releases)": "zcdp", "analytic (study)": "analytic"}),
        }

        def setter(name, widget):
            def apply(event):
                if event.new == getattr(self, name):
                    return  # the widget was reset to the value in use: nothing to do
                if not self.set_input(name, event.new):
                    widget.value = getattr(self, name)  # show the value still in use
            widget.param.watch(apply, "value")
            if isinstance(widget, EnteredFloatInput):  # a text that is not a number: say so
                widget.param.watch(lambda event: self.set_input(name, event.new), "refused")

        for name, widget in widgets.items():
            widget.value = getattr(self, name)
            setter(name, widget)

        def sync(*events):
            for e in events:
                # the value now, not the event's: a watcher before this one may have set it
                # again (a refused budget goes back to the one in force)
                widgets[e.name].value = getattr(self, e.name)
        self.param.watch(sync, [n for n in widgets if n != "dpbench_dir"])
        dataset = widgets["dataset"]
        self.param.watch(lambda e: setattr(dataset, "options", list(e.new)), "dataset", what="objects")
        source = pn.pane.Markdown(self.source_text(), margin=(0, 10), styles={"font-size": "0.9em"}, **wide)
        for what in ("value", "objects"):
            self.param.watch(lambda *_: setattr(source, "object", self.source_text()), "dataset", what=what)
        advice = pn.pane.Markdown(pn.bind(lambda *_: self.privacy_note(), self.param.epsilon,
                                          self.param.delta, self.param.noise, self.param.dataset),
                                  margin=(0, 10), **wide)
        self._meaning_pane = pn.pane.Markdown(self._sentence.text(), styles={"font-size": "0.9em"}, **wide)
        self.param.watch(self._explain, ["epsilon", "delta", "noise", "calibration", "workload"])
        ledger = self._ledger_pane = pn.pane.Markdown(pn.bind(
            lambda *_: self._ledger_text(), self.param.dataset, self.param.table,
            self.param.ledger_version), **wide)
        w = widgets
        return pn.Column(
            pn.pane.Markdown("### Privacy"), w["noise"], w["epsilon"], w["delta"], advice,
            self._meaning_pane,
            pn.pane.Markdown("### Data"), dataset, source, w["seed"],
            pn.pane.Markdown("### Budget"), w["budget"], w["budget_epsilon"], w["budget_delta"],
            w["budget_rho"], ledger,
            LazyCard(w["dpbench_dir"], w["calibration"], title="Settings", collapsed=True, **wide),
            **wide)

    def _explain(self, *_) -> None:
        """Refresh the sidebar's plain words on the privacy settings (:class:`PrivacySentence`)."""
        pane = getattr(self, "_meaning_pane", None)
        if pane is not None:
            pane.object = self._sentence.text()

    def privacy_text(self) -> str:
        """What the sidebar says the privacy settings mean (Markdown)."""
        return self._sentence.text()

    def _ledger_text(self) -> str:
        text = (f"**Spent on `{self.dataset}`:** {self.ledger.summary()}. Releases only; "
                "simulations spend nothing.")
        if self.table is not None:
            text += (f"\n\n**Spent on the table `{self.table.name}`:** "
                     f"{self.table_ledger(self.table).summary()}.")
        return text + ("\n\nThe budget shown is the one in force for every session. A session "
                       "may lower it; raising it is the data owner's act, in Python: "
                       "`dpx.PrivacyLedger.open(path, dataset).set_budget(...)`.")

    def ledger_changed(self) -> None:
        """Refresh the sidebar's ledger summary (pages call this after a release)."""
        self.ledger_version += 1


def _largest_within(kind: str, old: dpx.Budget) -> dpx.Budget | None:
    """The largest budget of ``kind`` that only lowers ``old``, or None when none lies within.

    Pure ε′ within (ε, δ) or ε-DP: ε′ = ε; within ρ-zCDP: ε′ = √(2ρ) (ε-DP is ε²/2-zCDP,
    Bun & Steinke 2016, Prop. 1.4; shrunk by 1e-12 against rounding).  ρ within (ε, δ): the
    largest ρ converting to at most ε at δ (Canonne, Kamath & Steinke 2020, Cor. 13;
    :func:`~dpexplorer.privacy.accounting.rho_from_epsilon`, shrunk by 1e-9 for the root
    finder's tolerance).  None: (ε, δ) within a pure or zCDP budget, zCDP within a pure one.
    """
    if kind == old.kind:
        return old
    if kind == "pure":
        eps = (old.epsilon if old.kind in ("pure", "approx")
               else math.sqrt(2.0 * old.rho) * (1.0 - 1e-12))  # never above ρ by rounding
        near = dpx.Budget.pure(eps)
    elif kind == "zcdp" and old.kind == "approx":
        rho = dpx.privacy.accounting.rho_from_epsilon(old.epsilon, old.delta) * (1.0 - 1e-9)
        near = dpx.Budget.zcdp(rho)
    else:
        return None
    return near if dpx.privacy.ledger.budget_within(near, old) else None


def _dpbench_loader(path, name):
    def load():
        x = dpx.datasets.check_counts(np.load(Path(path), allow_pickle=False), name=name)
        return Dataset(name=f"DPBench: {name}", x=x,
                       edges=tuple(np.arange(s + 1, dtype=float) for s in x.shape),
                       attributes=("bin",) if x.ndim == 1 else ("row", "col"),
                       description=f"DPBench histogram {name} (Hay et al. SIGMOD 2016), shape {x.shape}",
                       n_records=int(x.sum()), source=dpx.datasets.dpbench_source(Path(path).stem))
    return load


#: Plain words for the sidebar's inputs: their names, and what each allows.
_INPUT_LABELS = {"epsilon": "ε", "delta": "δ", "seed": "The seed", "budget_epsilon": "Budget ε",
                 "budget_delta": "Budget δ", "budget_rho": "Budget ρ", "dataset": "The dataset",
                 "noise": "The noise", "calibration": "The Gaussian calibration",
                 "budget": "The budget kind", "dpbench_dir": "The DPBench folder"}
#: Sidebar inputs that are numbers: a text given for one is read as a number first.
_NUMBER_INPUTS = ("epsilon", "delta", "budget_epsilon", "budget_delta", "budget_rho")
_INPUT_RULES = {
    "epsilon": ": ε must be a number above 0, from 1e-9 to 1e9 (usual values 0.1 to 2)",
    "delta": ": δ is a probability, a number strictly between 0 and 1, and should be far below "
             "1/N for N records (e.g. 1e-6)",
    "seed": ": the simulation seed is a whole number, 0 or more",
    "budget_epsilon": ": the budget ε is a number above 0",
    "budget_delta": ": the budget δ is a number strictly between 0 and 1",
    "budget_rho": ": the budget ρ is a number above 0",
}


def _shown(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value) if isinstance(value, str) else str(value)
