"""The privacy ledger: every measurement on one dataset, its composed guarantee, its budget.

A :class:`Spend` records one measurement (ε, δ, its zCDP cost ρ, the noise,
the mode); a :class:`PrivacyLedger` keeps them, reports the best guarantee
that sequential composition of ε (and δ) or zCDP composition of ρ proves
(:mod:`dpexplorer.privacy.accounting`), and checks its
:class:`~dpexplorer.privacy.accounting.Budget` *before* the kernel draws any
noise (:class:`BudgetExceededError`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import pandas as pd

from . import accounting
from .accounting import Budget

__all__ = ["Spend", "PrivacyLedger", "BudgetExceededError", "SIMULATION", "RELEASE"]

#: The two modes of a measurement: seeded simulation, or a release (OS CSPRNG).
SIMULATION, RELEASE = "simulation", "release"


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
    within (ε, δ); a zCDP budget is checked as Σρ.
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
        if budget is not None and not isinstance(budget, Budget):
            raise TypeError(f"budget must be a dpexplorer.privacy.accounting.Budget, got {type(budget).__name__}")
        self.budget = budget
        self.entries: list[Spend] = []

    # --------------------------------------------------------------- totals
    @staticmethod
    def _sums(entries) -> tuple[float, float, float]:
        return (math.fsum(e.epsilon for e in entries), math.fsum(e.delta for e in entries),
                math.fsum(e.rho for e in entries))

    @classmethod
    def _epsilon_at(cls, entries, delta: float) -> tuple[float, str]:
        """Smallest ε at ``delta`` any valid accounting proves for ``entries``, and which one."""
        eps, dlt, rho = cls._sums(entries)
        best = (math.inf, "none")
        if dlt <= delta * (1 + 1e-12) or dlt == 0.0:
            best = (eps, "pure ε-DP, sequential composition" if dlt == 0.0
                    else "sequential composition of (ε, δ)")
        if 0.0 < delta < 1.0 and 0 < rho < math.inf:  # ρ = ∞: an (ε, δ) step without a zCDP bound
            conv = accounting.epsilon_from_rho(rho, delta)
            if conv < best[0]:
                best = (conv, "zCDP (ρ adds up), converted to (ε, δ)")
        return best

    @property
    def rho(self) -> float:
        """Total zCDP cost Σρ."""
        return self._sums(self.entries)[2]

    @property
    def delta(self) -> float:
        """The δ the headline ε is stated at: the budget's δ, else the sum of δ spent (0 if pure)."""
        if self.budget is not None and self.budget.kind == "approx":
            return float(self.budget.delta)
        return self._sums(self.entries)[1]

    @property
    def epsilon(self) -> float:
        """Headline ε at :attr:`delta`: the best of sequential composition and zCDP conversion."""
        return float(self._epsilon_at(self.entries, self.delta)[0]) if self.entries else 0.0

    @property
    def accounting(self) -> str:
        """Which accounting gives the headline (ε, δ)."""
        if not self.entries:
            return "nothing spent"
        return self._epsilon_at(self.entries, self.delta)[1]

    def basic(self) -> tuple[float, float]:
        """``(Σε, Σδ)``: sequential composition of every measurement's own (ε, δ)."""
        eps, dlt, _ = self._sums(self.entries)
        return eps, dlt

    def epsilon_at(self, delta: float) -> float:
        """Smallest ε at ``delta`` proved for the whole ledger (``inf`` if none)."""
        return float(self._epsilon_at(self.entries, float(delta))[0]) if self.entries else 0.0

    # --------------------------------------------------------------- budget
    def _fits(self, entries) -> bool:
        b = self.budget
        if b is None:
            return True
        eps, dlt, rho = self._sums(entries)
        tol = 1 + 1e-12
        if b.kind == "pure":
            return dlt == 0.0 and eps <= b.epsilon * tol
        if b.kind == "zcdp":
            return rho <= b.rho * tol
        return self._epsilon_at(entries, b.delta)[0] <= b.epsilon * tol

    def remaining(self) -> str:
        """What is left of the budget, in plain words (``"no budget set"`` without one)."""
        b = self.budget
        if b is None:
            return "no budget set"
        eps, dlt, rho = self._sums(self.entries)
        if b.kind == "pure":
            return f"ε = {max(b.epsilon - eps, 0.0):.4g} left of {b.label}"
        if b.kind == "zcdp":
            left = max(b.rho - rho, 0.0)
            return (f"ρ = {left:.4g} left of {b.label} (a pure ε-DP step of ε ≤ "
                    f"{math.sqrt(2 * left):.4g} still fits)")
        rho_cap = accounting.rho_from_epsilon(b.epsilon, b.delta)
        parts = []
        if dlt <= b.delta:
            parts.append(f"ε = {max(b.epsilon - eps, 0.0):.4g} (adding up ε)")
        parts.append(f"ρ = {max(rho_cap - rho, 0.0):.4g} of ρ = {rho_cap:.4g} (zCDP)")
        return f"left of {b.label}: " + " or ".join(parts)

    def check(self, spend: Spend) -> None:
        """Raise :class:`BudgetExceededError` if recording ``spend`` would exceed the budget.

        Raises
        ------
        BudgetExceededError
            With what the measurement costs and what is left.
        """
        if self._fits(self.entries + [spend]):
            return
        cost = f"ε = {spend.epsilon:g}" + (f", δ = {spend.delta:g}" if spend.delta else "")
        cost += f" (ρ = {spend.rho:.4g})"
        raise BudgetExceededError(
            f"refused before any noise was drawn: {spend.label!r} costs {cost}, which would go "
            f"above the budget {self.budget.label}; {self.remaining()}")

    def check_cost(self, epsilon: float, delta: float = 0.0, rho: float | None = None,
                   label: str = "this release") -> None:
        """Raise :class:`BudgetExceededError` if a whole release of this cost would not fit."""
        rho = accounting.rho_pure(epsilon) if rho is None else float(rho)
        self.check(Spend(label, RELEASE, float(epsilon), float(delta), rho, "", 0, math.nan, ""))

    def record(self, spend: Spend) -> None:
        """Check the budget, then append ``spend``.

        Raises
        ------
        BudgetExceededError
            If it does not fit (the ledger is unchanged).
        """
        self.check(spend)
        self.entries.append(spend)

    # ------------------------------------------------------------ reporting
    def to_frame(self) -> pd.DataFrame:
        """The ledger as a table, one row per measurement (columns of :class:`Spend`)."""
        cols = list(Spend.__dataclass_fields__)
        return pd.DataFrame([asdict(e) for e in self.entries], columns=cols)

    def summary(self) -> str:
        """One line: the composed guarantee, its accounting, Σρ and the budget left."""
        if not self.entries:
            text = "nothing spent yet"
        elif all(e.delta == 0.0 for e in self.entries):
            text = (f"ε = {self.basic()[0]:.4g} (pure ε-DP, sequential composition; ρ = "
                    f"{self.rho:.4g}) over {len(self)} measurements")
        else:
            d = self.delta
            text = (f"ε = {self.epsilon:.4g} at δ = {d:.3g} ({self.accounting}); ρ = {self.rho:.4g} "
                    f"over {len(self)} measurements")
        if self.budget is not None:
            text += f"; {self.remaining()}"
        return text

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"<PrivacyLedger {len(self)} measurements: {self.summary()}>"
