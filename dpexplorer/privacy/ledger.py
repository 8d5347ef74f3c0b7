"""The privacy ledger: every measurement on one dataset, its composed guarantee, its budget.

A :class:`Spend` records one measurement (ε, δ, its zCDP cost ρ, the noise,
the mode); a :class:`PrivacyLedger` keeps them, reports the best guarantee
that sequential composition of ε (and δ) or zCDP composition of ρ proves
(:mod:`dpexplorer.privacy.accounting`), and checks its
:class:`~dpexplorer.privacy.accounting.Budget` *before* the kernel draws any
noise (:class:`BudgetExceededError`).

The ledger is a transaction log (``dpexplorer/docs/accounting.md``, "The
ledger as a transaction"):

* checking the budget and appending a spend happen under one lock (and, for
  a stored ledger, in one SQLite ``BEGIN IMMEDIATE`` transaction), so
  concurrent measurements can never together go over the budget;
* a multi-stage mechanism first :meth:`PrivacyLedger.reserve`\\ s its whole
  cost, so a refusal comes before its first draw; its stages are then
  charged against the reservation;
* entries are only ever appended: :attr:`PrivacyLedger.entries` is a tuple and
  the budget changes only through :meth:`PrivacyLedger.set_budget` /
  :meth:`PrivacyLedger.lower_budget`.

``PrivacyLedger()`` keeps its entries in memory (simulations, one script);
``PrivacyLedger.open(path, dataset)`` keeps a dataset's ledger in a SQLite
file shared by every process and thread that opens it
(:mod:`dpexplorer.privacy.ledger_store`).
"""

from __future__ import annotations

import contextvars
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import pandas as pd

from . import accounting
from .accounting import Budget

if TYPE_CHECKING:
    import os
    from types import TracebackType

    from .ledger_store import SqliteStore

__all__ = ["Spend", "PrivacyLedger", "Reservation", "BudgetExceededError", "SIMULATION", "RELEASE",
           "budget_within"]

#: The two modes of a measurement: seeded simulation, or a release (OS CSPRNG).
SIMULATION, RELEASE = "simulation", "release"

_TOL = 1 + 1e-12  # relative slack of every budget comparison (rounding of sums)
_STAGE_TOL = 1 + 1e-9  # a stage's cost against its reservation (ρ of a Gaussian recomputed from σ)

#: A cost or a total: (ε, δ, ρ).
_Cost = tuple[float, float, float]


class BudgetExceededError(RuntimeError):
    """A measurement would spend more than the ledger's budget allows (nothing was drawn)."""


@dataclass(frozen=True)
class Spend:
    """One measurement recorded in a ledger.

    Attributes
    ----------
    label : str
        What was measured (mechanism and stage).
    mode : {"release", "simulation"}
        Release (OS CSPRNG via opendp) or simulation (seeded numpy Generator).
    epsilon, delta : float
        (ε, δ) guarantee of this measurement.
    rho : float
        Its zCDP cost ρ (``ε²/2`` for ε-DP steps, ``Δ₂²/(2σ²)`` for Gaussian noise).
    noise : str
        Noise model and sampler.
    queries : int
        Number of noisy values drawn (1 for a selection).
    sensitivity : float
        Sensitivity the noise was scaled to.
    time : str
        ISO timestamp (UTC).
    part_of : str
        ``""`` for a measurement charged to the budget itself; else the
        reservation it is a stage of (``"#<id> <label>"``): its cost is then
        counted in that reservation's, not a second time.
    """

    label: str
    mode: str
    epsilon: float
    delta: float
    rho: float
    noise: str
    queries: int
    sensitivity: float
    time: str
    part_of: str = ""


@dataclass
class _Row:
    """One row of a ledger's log: a spend, a reservation, or a stage of a reservation."""

    id: int
    kind: str  # "spend", "reservation" or "stage"
    parent: int | None
    label: str
    mode: str
    epsilon: float
    delta: float
    rho: float
    time: str
    noise: str = ""
    queries: int = 0
    sensitivity: float = math.nan
    reserved: tuple[float, float, float] | None = None
    state: str = "recorded"  # reservations: "open", "settled", "released", "kept"

    def spend(self, part_of: str = "") -> Spend:
        return Spend(self.label, self.mode, self.epsilon, self.delta, self.rho, self.noise,
                     self.queries, self.sensitivity, self.time, part_of)


HISTORY_COLUMNS = ["id", "kind", "part_of", "label", "mode", "time", "epsilon", "delta", "rho",
                   "reserved_epsilon", "reserved_delta", "reserved_rho", "state", "noise", "queries",
                   "sensitivity"]


def _history_frame(rows: Iterable[_Row]) -> pd.DataFrame:
    out = []
    for r in rows:
        res = r.reserved or (math.nan, math.nan, math.nan)
        out.append({"id": r.id, "kind": r.kind, "part_of": "" if r.parent is None else f"#{r.parent}",
                    "label": r.label, "mode": r.mode, "time": r.time, "epsilon": r.epsilon,
                    "delta": r.delta, "rho": r.rho, "reserved_epsilon": res[0],
                    "reserved_delta": res[1], "reserved_rho": res[2], "state": r.state,
                    "noise": r.noise, "queries": r.queries, "sensitivity": r.sensitivity})
    return pd.DataFrame(out, columns=HISTORY_COLUMNS)


class _MemoryStore:
    """The log of an in-memory ledger (the ledger's lock makes its transactions atomic)."""

    persistent: Literal[False] = False

    def __init__(self, budget: Budget | None):
        self._budget = budget
        self._rows: list[_Row] = []
        self._entries: list[Spend] = []
        self._by_id: dict[int, _Row] = {}

    def transaction(self, write: bool = True) -> _NullContext:
        return _NULL_CONTEXT

    def totals(self) -> tuple[float, float, float]:
        top = [r for r in self._rows if r.parent is None]
        return (math.fsum(r.epsilon for r in top), math.fsum(r.delta for r in top),
                math.fsum(r.rho for r in top))

    def get_budget(self) -> Budget | None:
        return self._budget

    def put_budget(self, budget: Budget | None) -> None:
        self._budget = budget

    def insert(self, row: _Row) -> int:
        row.id = len(self._rows) + 1
        self._rows.append(row)
        self._by_id[row.id] = row
        if row.kind != "reservation":
            part_of = "" if row.parent is None else _ref(self._by_id[row.parent])
            self._entries.append(row.spend(part_of))
        return row.id

    def settle(self, row_id: int, cost: tuple[float, float, float], state: str) -> None:
        row = self._by_id[row_id]
        row.epsilon, row.delta, row.rho = cost
        row.state = state

    def entries(self) -> tuple[Spend, ...]:
        return tuple(self._entries)

    def count(self) -> int:
        return len(self._entries)

    def rows(self) -> list[_Row]:
        return list(self._rows)


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


_NULL_CONTEXT = _NullContext()


def _ref(row: _Row) -> str:
    return f"#{row.id} {row.label}"


def budget_within(new: Budget | None, old: Budget | None) -> bool:
    """``True`` if every ledger ``new`` accepts is also accepted by ``old`` (``new`` only tightens).

    ``None`` is no budget (accepts everything).  Across kinds: a pure ε′
    budget is within (ε, δ) if ε′ ≤ ε and within zCDP ρ if ε′²/2 ≤ ρ (Σεᵢ ≤ ε′
    gives Σεᵢ²/2 ≤ ε′²/2; Bun & Steinke 2016, Prop. 1.4); (ε′, δ′) is within
    (ε, δ) if ε′ ≤ ε and δ′ ≤ δ (the zCDP conversion's ε falls as δ grows);
    zCDP ρ′ is within (ε, δ) if ρ′ converts to at most ε at δ (Canonne, Kamath
    & Steinke 2020, Cor. 13).  Any other pair is not comparable (``False``).
    """
    if old is None:
        return True
    if new is None:
        return False
    # the fields a budget's kind uses are set (Budget.pure / approx / zcdp): cast for mypy
    n_eps, n_dlt, n_rho = cast(float, new.epsilon), cast(float, new.delta), cast(float, new.rho)
    o_eps, o_dlt, o_rho = cast(float, old.epsilon), cast(float, old.delta), cast(float, old.rho)
    if new.kind == "pure":
        if old.kind in ("pure", "approx"):
            return n_eps <= o_eps
        return accounting.rho_pure(n_eps) <= o_rho
    if new.kind == "approx":
        return old.kind == "approx" and n_eps <= o_eps and n_dlt <= o_dlt
    if old.kind == "zcdp":
        return n_rho <= o_rho
    if old.kind == "approx":
        return accounting.epsilon_from_rho(n_rho, o_dlt) <= o_eps
    return False


#: The reservations open in the current thread / task, innermost last.
_ACTIVE: contextvars.ContextVar[tuple[Reservation, ...]] = contextvars.ContextVar("dpexplorer_reservations", default=())


class Reservation:
    """The whole cost of a multi-stage mechanism, recorded before its first draw.

    Made by :meth:`PrivacyLedger.reserve` (or the kernel's ``data.reserve``),
    which has already checked the cost against the budget and recorded it.
    Use it as a context manager: inside the block every measurement recorded
    on the same ledger (in this thread or task) is a *stage* of the
    reservation, charged against it and not against the budget a second time.

    A stage that would take the stages' total above what was reserved -- in
    ε, δ or ρ, each compared on its own -- is refused with ``RuntimeError``
    before anything is drawn.  The reservation's (ε, δ, ρ) therefore bounds
    its stages under each accounting: Σε and Σδ by sequential composition
    (Dwork & Roth 2014, Thm 3.16), Σρ by zCDP composition (Bun & Steinke
    2016, Lemma 2.3).

    On leaving the block:

    * normally: the reservation is *settled* to what its stages spent,
      ``min(reserved, Σ stages)`` in each of ε, δ, ρ -- it only ever goes down
      (e.g. a Laplace(ε) run split into ε₁ + ε₂ = ε costs ρ = (ε₁² + ε₂²)/2 <
      ε²/2); nothing drawn settles at 0;
    * on an exception: if no stage was recorded (nothing drawn), the
      reservation is released (cost 0); otherwise the whole reserved cost
      stays spent (``state = "kept"``): a failed run may waste budget, never
      leak it.

    A process killed inside the block leaves the reservation ``"open"`` at its
    full reserved cost.
    """

    def __init__(self, ledger: PrivacyLedger, row: _Row, parent: Reservation | None):
        self.ledger = ledger
        self.parent = parent
        self._row = row
        self.reserved: _Cost = cast(_Cost, row.reserved)  # set for every reservation row
        self._parts: list[tuple[float, float, float]] = []  # the stages' costs (added up with fsum)
        self._stages = 0
        self._lock = threading.RLock()
        self._token: contextvars.Token[tuple[Reservation, ...]] | None = None
        self._index_in_parent = -1

    @property
    def id(self) -> int:
        return self._row.id

    @property
    def label(self) -> str:
        return self._row.label

    @property
    def state(self) -> str:
        return self._row.state

    @property
    def used(self) -> tuple[float, float, float]:
        """``(Σε, Σδ, Σρ)`` charged by its stages so far."""
        with self._lock:
            return self._sum(self._parts)

    @staticmethod
    def _sum(parts: Sequence[_Cost]) -> _Cost:
        return cast(_Cost, tuple(math.fsum(p[i] for p in parts) for i in range(3)))

    def _charge(self, cost: tuple[float, float, float], label: str) -> int:
        """Add ``cost`` to the stages' total (its index returned), or raise RuntimeError if it would exceed the reservation."""
        if self._row.state != "open":
            raise RuntimeError(f"the reservation {_ref(self._row)!r} is {self._row.state}: "
                               f"{label!r} cannot be charged to it; nothing was drawn")
        new = self._sum(self._parts + [cost])
        for name, n, r in zip(("ε", "δ", "ρ"), new, self.reserved, strict=True):
            if n > r * _STAGE_TOL + 1e-300:
                raise RuntimeError(
                    f"refused by the privacy accounting, nothing was drawn: {label!r} would take the "
                    f"stages of the reservation {_ref(self._row)!r} to {name} = {n:.6g}, above the "
                    f"{name} = {r:.6g} reserved for the whole run")
        self._parts.append(cost)
        return len(self._parts) - 1

    def _replace(self, index: int, cost: tuple[float, float, float]) -> None:
        """The part ``index`` now costs ``cost`` (a failed stage: 0; a settled nested reservation)."""
        self._parts[index] = cost

    def record(self, spend: Spend) -> None:
        """Charge ``spend`` as a stage of this reservation, then log it.

        Raises
        ------
        RuntimeError
            If it would take the stages above what was reserved (nothing is recorded).
        """
        cost = (float(spend.epsilon), float(spend.delta), float(spend.rho))
        with self._lock:
            index = self._charge(cost, spend.label)
            try:
                self.ledger._log_stage(self, spend)
            except BaseException:
                self._replace(index, (0.0, 0.0, 0.0))
                raise
            self._stages += 1

    def __enter__(self) -> Reservation:
        if self._token is not None:
            raise RuntimeError("a reservation is entered once")
        self._token = _ACTIVE.set(_ACTIVE.get() + (self,))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        try:
            _ACTIVE.reset(cast("contextvars.Token[tuple[Reservation, ...]]", self._token))  # set by __enter__
        except ValueError:  # left in another context: drop it from this one
            _ACTIVE.set(tuple(r for r in _ACTIVE.get() if r is not self))
        self.close(failed=exc_type is not None)
        return False

    def close(self, failed: bool = False) -> None:
        """Settle (``failed=False``) or end after a failure; see the class notes.  Idempotent."""
        cost: _Cost
        with self._lock:
            if self._row.state != "open":
                return
            if self._stages == 0:
                cost, state = (0.0, 0.0, 0.0), "released" if failed else "settled"
            elif failed:
                cost, state = self.reserved, "kept"
            else:
                cost = cast(_Cost, tuple(min(r, u) for r, u in zip(self.reserved, self._sum(self._parts),
                                                                strict=True)))
                state = "settled"
            self.ledger._settle(self, cost, state)
            if self.parent is not None:
                with self.parent._lock:
                    self.parent._replace(self._index_in_parent, cost)
                    if self._stages:
                        self.parent._stages += 1

    def __repr__(self) -> str:
        return (f"<Reservation {_ref(self._row)!r} {self._row.state}: reserved ε = {self.reserved[0]:g}, "
                f"δ = {self.reserved[1]:g}, ρ = {self.reserved[2]:.4g}>")


class PrivacyLedger:
    """Every measurement on one dataset, its composed guarantee, and an optional budget.

    Parameters
    ----------
    budget : Budget, optional
        What may be spent in all (``Budget.pure(ε)``, ``Budget.approx(ε, δ)``
        or ``Budget.zcdp(ρ)``); ``None`` means uncapped.
    epsilon_budget, delta_budget, rho_budget : float, optional
        Shorthands: ``epsilon_budget`` alone is a pure ε budget, with
        ``delta_budget`` an (ε, δ) budget; ``rho_budget`` a zCDP budget.

    Raises
    ------
    ValueError
        If both ``budget`` and a shorthand are given, or the shorthands mix ρ with ε/δ.

    Notes
    -----
    The composed guarantee is the best one of two valid accountings:

    * sequential composition: Σε, Σδ (Dwork & Roth 2014, Thm 3.16);
    * zCDP: Σρ, converted to (ε, δ) with Canonne, Kamath & Steinke (2020),
      Cor. 13 (:func:`~dpexplorer.privacy.accounting.epsilon_from_rho`).

    A pure budget is checked as Σε (δ-spending measurements are refused); an
    (ε, δ) budget accepts a measurement when either accounting keeps the total
    within (ε, δ); a zCDP budget is checked as Σρ.  The sums run over what is
    charged to the budget: measurements made outside any reservation, and
    reservations (at their reserved cost while open, settled cost after).

    ``PrivacyLedger(...)`` lives in memory (one process; simulations).  Use
    :meth:`open` for a dataset's ledger kept in a SQLite file and shared by
    every process.  Either way, checking and recording is atomic (one
    ``threading.RLock``; for a stored ledger also one ``BEGIN IMMEDIATE``
    transaction).
    """

    def __init__(self, budget: Budget | None = None, *, epsilon_budget: float | None = None,
                 delta_budget: float | None = None, rho_budget: float | None = None):
        shorthand = any(v is not None for v in (epsilon_budget, delta_budget, rho_budget))
        if budget is not None and shorthand:
            raise ValueError("give either budget= or the epsilon/delta/rho_budget shorthands, not both")
        if budget is None and shorthand:
            if rho_budget is not None:
                if epsilon_budget is not None or delta_budget is not None:
                    raise ValueError("a zCDP budget (rho_budget) cannot be combined with epsilon/delta budgets")
                budget = Budget.zcdp(rho_budget)
            elif epsilon_budget is None:
                raise ValueError("delta_budget needs an epsilon_budget too")
            elif delta_budget is None or float(delta_budget) == 0.0:
                budget = Budget.pure(epsilon_budget)
            else:
                budget = Budget.approx(epsilon_budget, delta_budget)
        _check_budget(budget)
        self._lock = threading.RLock()
        self._store: _MemoryStore | SqliteStore = _MemoryStore(budget)

    # ------------------------------------------------------------ stored
    @classmethod
    def open(cls, path: str | os.PathLike[str], dataset: str, budget: Budget | None = None) -> PrivacyLedger:
        """The ledger of ``dataset`` kept in the SQLite file ``path`` (created if missing).

        Every process or thread that opens the same ``(path, dataset)`` shares
        one spend: each check-and-record is one ``BEGIN IMMEDIATE`` transaction
        (read the dataset's totals, check the budget, insert, commit), and a
        measurement's spend is committed before its noise is drawn, so a
        crash can waste budget but never leak it.  The store is described in
        :mod:`dpexplorer.privacy.ledger_store` and ``dpexplorer/docs/accounting.md``.

        Parameters
        ----------
        path : str or os.PathLike
            The SQLite file (WAL mode; its folder must exist).
        dataset : str
            The dataset's key in the store (any non-empty text).
        budget : Budget, optional
            Stored as the dataset's budget when none is stored yet.

        Returns
        -------
        PrivacyLedger
            Pickling or copying it carries only ``path`` and ``dataset``.

        Raises
        ------
        ValueError
            If the file is not a ledger store or has a schema version this
            dpexplorer does not read; if ``dataset`` is empty; if a different
            budget is already stored (change it with :meth:`set_budget`); if
            the dataset already spent more than ``budget``.
        """
        from .ledger_store import SqliteStore

        _check_budget(budget)
        self = cls.__new__(cls)
        self._lock = threading.RLock()
        self._store = SqliteStore(path, dataset)
        with self._lock, self._store.transaction():
            stored = self._store.get_budget()
            if budget is not None and stored is None:
                if not self._fits_totals(self._store.totals(), budget):
                    raise ValueError(f"the dataset {dataset!r} has already spent more than {budget.label} "
                                     f"({self.summary()})")
                self._store.put_budget(budget)
            elif budget is not None and stored != budget:
                raise ValueError(
                    f"the dataset {dataset!r} in {str(path)!r} already has the budget {cast(Budget, stored).label}; "
                    f"open it without budget= to use it.  Changing a stored budget is the owner's act: "
                    f"dpx.PrivacyLedger.open(path, dataset).set_budget(...) (or lower_budget(...) to "
                    f"only tighten it)")
        return self

    @property
    def path(self) -> Path | None:
        """The SQLite file of a stored ledger (``None`` in memory)."""
        return getattr(self._store, "path", None)

    @property
    def dataset(self) -> str | None:
        """The dataset's key in the store (``None`` in memory)."""
        return getattr(self._store, "dataset", None)

    @property
    def persistent(self) -> bool:
        """``True`` for a ledger kept in a SQLite file (:meth:`open`)."""
        return self._store.persistent

    def __getstate__(self) -> dict[str, Any]:
        if self._store.persistent:
            return {"stored": (str(self._store.path), self._store.dataset)}
        return {"memory": self._store}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.RLock()
        if "stored" in state:
            from .ledger_store import SqliteStore

            self._store = SqliteStore(*state["stored"])
        else:
            self._store = state["memory"]

    # ------------------------------------------------------------ budget
    @property
    def budget(self) -> Budget | None:
        """The budget (read-only: change it with :meth:`set_budget` or :meth:`lower_budget`)."""
        return self._store.get_budget()

    def set_budget(self, budget: Budget | None) -> None:
        """Set the dataset's budget to ``budget`` (any change; ``None`` removes the cap).

        For a stored ledger this is the data owner's act, done in Python: the
        explorer's sessions can only :meth:`lower_budget`.

        Raises
        ------
        ValueError
            If what is already spent does not fit ``budget`` (the budget is unchanged).
        """
        _check_budget(budget)
        with self._lock, self._store.transaction():
            self._put_budget(budget)

    def lower_budget(self, budget: Budget) -> None:
        """Tighten the budget to ``budget``: refused unless it only lowers it (:func:`budget_within`).

        From no budget, any budget is a tightening.

        Raises
        ------
        ValueError
            If ``budget`` would raise (or loosen) the current budget -- raising a
            stored dataset's budget is the owner's act, :meth:`set_budget` -- or
            what is already spent does not fit it.
        """
        _check_budget(budget)
        if budget is None:
            raise ValueError("lower_budget needs a budget; removing the cap is set_budget(None)")
        with self._lock, self._store.transaction():
            old = self._store.get_budget()
            if not budget_within(budget, old):
                where = (f"dpx.PrivacyLedger.open({str(self.path)!r}, {self.dataset!r}).set_budget(...)"
                         if self.persistent else "ledger.set_budget(...)")
                raise ValueError(f"{budget.label} would raise the budget {cast(Budget, old).label}: only lowering is "
                                 f"allowed here; raising a dataset's budget is its owner's act, in "
                                 f"Python: {where}")
            self._put_budget(budget)

    def _put_budget(self, budget: Budget | None) -> None:
        totals = self._store.totals()
        if not self._fits_totals(totals, budget):
            raise ValueError(f"not applied: already spent more than {cast(Budget, budget).label} "
                             f"({self._summary(totals, self._store.count(), budget)})")
        self._store.put_budget(budget)

    # --------------------------------------------------------------- totals
    @property
    def entries(self) -> tuple[Spend, ...]:
        """Every measurement, in order (read-only): spends and the stages of reservations."""
        return self._store.entries()

    def history(self) -> pd.DataFrame:
        """The whole log, one row per spend, reservation and stage (ids, what, when, ε/δ/ρ, mode, state).

        ``part_of`` names the reservation a stage (or nested reservation)
        belongs to; ``reserved_*`` is what a reservation reserved, ``epsilon``
        etc. what it is charged now.
        """
        return _history_frame(self._store.rows())

    def totals(self) -> tuple[float, float, float]:
        """``(Σε, Σδ, Σρ)`` charged to the budget (spends and reservations, stages not twice)."""
        return self._store.totals()

    @staticmethod
    def _sums(entries: Iterable[Spend]) -> _Cost:
        return (math.fsum(e.epsilon for e in entries), math.fsum(e.delta for e in entries),
                math.fsum(e.rho for e in entries))

    @staticmethod
    def _epsilon_at_totals(totals: _Cost, delta: float) -> tuple[float, str]:
        """Smallest ε at ``delta`` any valid accounting proves for ``totals`` = (Σε, Σδ, Σρ), and which one."""
        eps, dlt, rho = totals
        best = (math.inf, "none")
        if dlt <= delta * (1 + 1e-12) or dlt == 0.0:
            best = (eps, "pure ε-DP, sequential composition" if dlt == 0.0
                    else "sequential composition of (ε, δ)")
        if 0.0 < delta < 1.0 and 0 < rho < math.inf:  # ρ = ∞: an (ε, δ) step without a zCDP bound
            conv = accounting.epsilon_from_rho(rho, delta)
            if conv < best[0]:
                best = (conv, "zCDP (ρ adds up), converted to (ε, δ)")
        return best

    @classmethod
    def _epsilon_at(cls, entries: Iterable[Spend], delta: float) -> tuple[float, str]:
        """Smallest ε at ``delta`` any valid accounting proves for ``entries``, and which one."""
        return cls._epsilon_at_totals(cls._sums(entries), delta)

    @property
    def rho(self) -> float:
        """Total zCDP cost Σρ."""
        return self.totals()[2]

    @staticmethod
    def _delta_of(totals: _Cost, budget: Budget | None) -> float:
        if budget is not None and budget.kind == "approx":
            return float(cast(float, budget.delta))
        return totals[1]

    @property
    def delta(self) -> float:
        """The δ the headline ε is stated at: the budget's δ, else the sum of δ spent (0 if pure)."""
        return self._delta_of(self.totals(), self.budget)

    @property
    def epsilon(self) -> float:
        """Headline ε at :attr:`delta`: the best of sequential composition and zCDP conversion."""
        totals = self.totals()
        if not any(totals):
            return 0.0
        return float(self._epsilon_at_totals(totals, self._delta_of(totals, self.budget))[0])

    @property
    def accounting(self) -> str:
        """Which accounting gives the headline (ε, δ)."""
        totals = self.totals()
        if not any(totals):
            return "nothing spent"
        return self._epsilon_at_totals(totals, self._delta_of(totals, self.budget))[1]

    def basic(self) -> tuple[float, float]:
        """``(Σε, Σδ)``: sequential composition of every measurement's own (ε, δ)."""
        eps, dlt, _ = self.totals()
        return eps, dlt

    def epsilon_at(self, delta: float) -> float:
        """Smallest ε at ``delta`` proved for the whole ledger (``inf`` if none)."""
        totals = self.totals()
        return float(self._epsilon_at_totals(totals, float(delta))[0]) if any(totals) else 0.0

    # --------------------------------------------------------------- budget
    @classmethod
    def _fits_totals(cls, totals: _Cost, b: Budget | None) -> bool:
        if b is None:
            return True
        eps, dlt, rho = totals
        # the fields a budget's kind uses are set (Budget.pure / approx / zcdp): cast for mypy
        b_eps, b_dlt, b_rho = cast(float, b.epsilon), cast(float, b.delta), cast(float, b.rho)
        if b.kind == "pure":
            return dlt == 0.0 and eps <= b_eps * _TOL
        if b.kind == "zcdp":
            return rho <= b_rho * _TOL
        return cls._epsilon_at_totals(totals, b_dlt)[0] <= b_eps * _TOL

    def _fits(self, entries: Iterable[Spend]) -> bool:
        """Whether these spends (added up, as :meth:`_sums`) fit the budget."""
        return self._fits_totals(self._sums(entries), self.budget)

    @staticmethod
    def _remaining(totals: _Cost, b: Budget | None) -> str:
        if b is None:
            return "no budget set"
        eps, dlt, rho = totals
        # the fields a budget's kind uses are set (Budget.pure / approx / zcdp): cast for mypy
        b_eps, b_dlt, b_rho = cast(float, b.epsilon), cast(float, b.delta), cast(float, b.rho)
        if b.kind == "pure":
            return f"ε = {max(b_eps - eps, 0.0):.4g} left of {b.label}"
        if b.kind == "zcdp":
            left = max(b_rho - rho, 0.0)
            return (f"ρ = {left:.4g} left of {b.label} (a pure ε-DP step of ε ≤ "
                    f"{math.sqrt(2 * left):.4g} still fits)")
        rho_cap = accounting.rho_from_epsilon(b_eps, b_dlt)
        parts = []
        if dlt <= b_dlt:
            parts.append(f"ε = {max(b_eps - eps, 0.0):.4g} (adding up ε)")
        if math.isinf(rho):  # a step with no zCDP bound (partition selection): only adding up ε, δ holds
            return f"left of {b.label}: " + (parts[0] if parts else "nothing")
        parts.append(f"ρ = {max(rho_cap - rho, 0.0):.4g} of ρ = {rho_cap:.4g} (zCDP)")
        return f"left of {b.label}: " + " or ".join(parts)

    def remaining(self) -> str:
        """What is left of the budget, in plain words (``"no budget set"`` without one)."""
        return self._remaining(self.totals(), self.budget)

    def _refusal(self, label: str, cost: _Cost, totals: _Cost, budget: Budget) -> BudgetExceededError:
        text = f"ε = {cost[0]:g}" + (f", δ = {cost[1]:g}" if cost[1] else "") + f" (ρ = {cost[2]:.4g})"
        return BudgetExceededError(
            f"refused before any noise was drawn: {label!r} costs {text}, which would go above the "
            f"budget {budget.label}; {self._remaining(totals, budget)}")

    def _check_locked(self, label: str, cost: _Cost) -> None:
        """Inside a transaction: raise BudgetExceededError unless ``cost`` fits on top of the totals."""
        budget = self._store.get_budget()
        if budget is None:
            return
        totals = self._store.totals()
        new = cast(_Cost, tuple(t + c for t, c in zip(totals, cost, strict=True)))
        if not self._fits_totals(new, budget):
            raise self._refusal(label, cost, totals, budget)

    def check(self, spend: Spend) -> None:
        """Raise :class:`BudgetExceededError` if recording ``spend`` would exceed the budget.

        Only a look: another thread or process may spend in between; what
        reserves is :meth:`record` or :meth:`reserve`.

        Raises
        ------
        BudgetExceededError
            With what the measurement costs and what is left.
        """
        with self._lock, self._store.transaction(write=False):
            self._check_locked(spend.label, (float(spend.epsilon), float(spend.delta), float(spend.rho)))

    def check_cost(self, epsilon: float, delta: float = 0.0, rho: float | None = None,
                   label: str = "this release") -> None:
        """Raise :class:`BudgetExceededError` if a whole release of this cost would not fit (a look only)."""
        rho = accounting.rho_pure(epsilon) if rho is None else float(rho)
        self.check(Spend(label, RELEASE, float(epsilon), float(delta), rho, "", 0, math.nan, ""))

    def active(self) -> Reservation | None:
        """The innermost reservation of this ledger open in the current thread or task, if any."""
        for res in reversed(_ACTIVE.get()):
            if res.ledger is self and res.state == "open":
                return res
        return None

    def record(self, spend: Spend) -> None:
        """Check the budget and append ``spend``, atomically.

        Inside a ``with`` block of a reservation of this ledger (same thread
        or task) the spend is a stage of that reservation instead
        (:meth:`Reservation.record`).

        Raises
        ------
        BudgetExceededError
            If it does not fit (the ledger is unchanged).
        RuntimeError
            If it is a stage that would exceed its reservation.
        """
        res = self.active()
        if res is not None:
            res.record(spend)
            return
        cost = (float(spend.epsilon), float(spend.delta), float(spend.rho))
        row = _Row(0, "spend", None, spend.label, spend.mode, *cost, spend.time, spend.noise,
                   int(spend.queries), float(spend.sensitivity))
        with self._lock, self._store.transaction():
            self._check_locked(spend.label, cost)
            self._store.insert(row)

    def reserve(self, epsilon: float, delta: float = 0.0, rho: float | None = None, *,
                label: str = "reservation", mode: str = RELEASE) -> Reservation:
        """Check and record the whole cost of a multi-stage mechanism before its first draw.

        Atomic (one lock; one transaction for a stored ledger): once it
        returns, the cost is recorded (committed) and no concurrent spend can
        take it.  Inside an open reservation of this ledger the new one is
        nested: charged against the outer one instead of the budget.

        Parameters
        ----------
        epsilon, delta : float
            (ε, δ) of the whole mechanism (sequential composition of its stages).
        rho : float, optional
            Its zCDP cost; default ``ε²/2`` (pure ε-DP, Bun & Steinke 2016, Prop. 1.4);
            ``math.inf`` for an (ε, δ) mechanism with no zCDP bound (the ledger then
            composes by adding up ε and δ).
        label : str
            What is reserved for.
        mode : {"release", "simulation"}

        Returns
        -------
        Reservation
            A context manager; see :class:`Reservation` for what happens on exit.

        Raises
        ------
        BudgetExceededError
            If the cost does not fit the budget (nothing recorded, nothing drawn).
        RuntimeError
            If nested and the cost does not fit the outer reservation.
        ValueError
            If a cost is negative or not finite (ρ may be ``inf``), or ``mode`` unknown.
        """
        eps = accounting._positive(epsilon, "epsilon", allow_zero=True)
        dlt = float(delta)
        if not (math.isfinite(dlt) and 0.0 <= dlt < 1.0):
            raise ValueError(f"delta must be in [0, 1), got {delta!r}")
        if rho is None:
            r = accounting.rho_pure(eps)
        elif isinstance(rho, int | float) and rho == math.inf:
            r = math.inf  # an (ε, δ) mechanism with no zCDP bound (e.g. partition selection)
        else:
            r = accounting._positive(rho, "rho", allow_zero=True)
        if mode not in (RELEASE, SIMULATION):
            raise ValueError(f"mode must be {RELEASE!r} or {SIMULATION!r}, got {mode!r}")
        cost = (eps, dlt, r)
        import datetime as _dt

        row = _Row(0, "reservation", None, str(label), mode, *cost,
                   _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), reserved=cost, state="open")
        parent = self.active()
        if parent is not None:
            with parent._lock:
                index = parent._charge(cost, str(label))
                row.parent = parent.id
                try:
                    with self._lock, self._store.transaction():
                        self._store.insert(row)
                except BaseException:
                    parent._replace(index, (0.0, 0.0, 0.0))
                    raise
            res = Reservation(self, row, parent)
            res._index_in_parent = index
            return res
        with self._lock, self._store.transaction():
            self._check_locked(str(label), cost)
            self._store.insert(row)
        return Reservation(self, row, None)

    def _log_stage(self, res: Reservation, spend: Spend) -> None:
        row = _Row(0, "stage", res.id, spend.label, spend.mode, float(spend.epsilon), float(spend.delta),
                   float(spend.rho), spend.time, spend.noise, int(spend.queries), float(spend.sensitivity))
        with self._lock, self._store.transaction():
            self._store.insert(row)

    def _settle(self, res: Reservation, cost: _Cost, state: str) -> None:
        if any(c > r * _TOL for c, r in zip(cost, res.reserved, strict=True)):
            raise AssertionError("a reservation is only ever settled down")
        with self._lock, self._store.transaction():
            self._store.settle(res.id, cast(_Cost, tuple(float(c) for c in cost)), state)
        res._row.epsilon, res._row.delta, res._row.rho = cost
        res._row.state = state

    # ------------------------------------------------------------ reporting
    def to_frame(self) -> pd.DataFrame:
        """The measurements as a table, one row per :attr:`entries` item (columns of :class:`Spend`)."""
        cols = list(Spend.__dataclass_fields__)
        return pd.DataFrame([asdict(e) for e in self.entries], columns=cols)

    @staticmethod
    def _summary(totals: _Cost, count: int, budget: Budget | None) -> str:
        eps, dlt, rho = totals
        if not any(totals):
            text = "nothing spent yet"
        elif dlt == 0.0:
            text = (f"ε = {eps:.4g} (pure ε-DP, sequential composition; ρ = "
                    f"{rho:.4g}) over {count} measurements")
        else:
            d = PrivacyLedger._delta_of(totals, budget)
            best, how = PrivacyLedger._epsilon_at_totals(totals, d)
            text = f"ε = {best:.4g} at δ = {d:.3g} ({how}); ρ = {rho:.4g} over {count} measurements"
        if budget is not None:
            text += f"; {PrivacyLedger._remaining(totals, budget)}"
        return text

    def summary(self) -> str:
        """One line: the composed guarantee, its accounting, Σρ and the budget left."""
        with self._lock, self._store.transaction(write=False):
            return self._summary(self._store.totals(), self._store.count(), self._store.get_budget())

    def __len__(self) -> int:
        return self._store.count()

    def __repr__(self) -> str:
        where = f" {self.dataset!r} in {str(self.path)!r}" if self.persistent else ""
        return f"<PrivacyLedger{where} {len(self)} measurements: {self.summary()}>"


def _check_budget(budget: object) -> None:
    if budget is not None and not isinstance(budget, Budget):
        raise TypeError(f"budget must be a dpexplorer.privacy.accounting.Budget, got {type(budget).__name__}")
