"""The privacy boundary: the one module that touches the private data vector.

:class:`PrivateData` holds ``x`` and never hands it out.  Its methods return
*noisy* answers only, and each records what it spent in a
:class:`PrivacyLedger` (like a kernel with a budget ledger).  Everything else
in dpexplorer -- workloads, strategies, reconstruction, plots -- works on
public things: query matrices, noise models and noisy answers.

Accounting is basic sequential composition: the ε (and δ) of successive
measurements add up (Dwork & Roth 2014, Thm 3.16).  A ledger may carry a
budget; a measurement that would exceed it is refused before any noise is
drawn.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from .matrix import as_matrix
from .noise import Laplace, NoiseModel

__all__ = ["Spend", "PrivacyLedger", "BudgetExceededError", "PrivateData"]


class BudgetExceededError(RuntimeError):
    """A measurement would spend more ε or δ than the ledger's budget allows."""


@dataclass(frozen=True)
class Spend:
    """One measurement recorded in a ledger.

    Attributes
    ----------
    label : str
        What was measured (mechanism and stage).
    epsilon, delta : float
        Privacy cost of this measurement.
    noise : str
        Noise model label.
    queries : int
        Number of noisy answers released.
    sensitivity : float
        Sensitivity the noise was scaled to.
    seed : int or None
        Seed of the release the measurement belongs to.
    time : str
        ISO timestamp (UTC).
    """

    label: str
    epsilon: float
    delta: float
    noise: str
    queries: int
    sensitivity: float
    seed: int | None
    time: str


class PrivacyLedger:
    """Every ε/δ spent on a data vector, with totals under sequential composition.

    Parameters
    ----------
    epsilon_budget, delta_budget : float, optional
        Caps on the totals; ``None`` means uncapped.
    """

    def __init__(self, epsilon_budget: float | None = None, delta_budget: float | None = None):
        self.epsilon_budget = epsilon_budget
        self.delta_budget = delta_budget
        self.entries: list[Spend] = []

    @property
    def epsilon(self) -> float:
        """Total ε spent (sum over measurements)."""
        return float(math.fsum(e.epsilon for e in self.entries))

    @property
    def delta(self) -> float:
        """Total δ spent (sum over measurements)."""
        return float(math.fsum(e.delta for e in self.entries))

    def check(self, epsilon: float, delta: float) -> None:
        """Raise :class:`BudgetExceededError` if spending ``(ε, δ)`` would exceed the budget."""
        if self.epsilon_budget is not None and self.epsilon + epsilon > self.epsilon_budget * (1 + 1e-12):
            raise BudgetExceededError(
                f"spending ε = {epsilon:g} would bring the total to {self.epsilon + epsilon:g}, "
                f"above the budget ε = {self.epsilon_budget:g}"
            )
        if self.delta_budget is not None and self.delta + delta > self.delta_budget * (1 + 1e-12):
            raise BudgetExceededError(
                f"spending δ = {delta:g} would bring the total to {self.delta + delta:g}, "
                f"above the budget δ = {self.delta_budget:g}"
            )

    def record(self, spend: Spend) -> None:
        self.check(spend.epsilon, spend.delta)
        self.entries.append(spend)

    def to_frame(self) -> pd.DataFrame:
        """The ledger as a table, one row per measurement."""
        cols = list(Spend.__dataclass_fields__)
        return pd.DataFrame([asdict(e) for e in self.entries], columns=cols)

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"<PrivacyLedger {len(self)} measurements, ε = {self.epsilon:g}, δ = {self.delta:g}>"


class PrivateData:
    """The private data vector ``x`` behind the privacy boundary.

    Parameters
    ----------
    x : array_like, shape (n,) or a d-dimensional grid
        Counts; flattened in C order.
    ledger : PrivacyLedger, optional
        Where spends are recorded (a new, uncapped one by default).

    Raises
    ------
    ValueError
        If ``x`` is empty or has NaN/inf entries.
    """

    def __init__(self, x, ledger: PrivacyLedger | None = None):
        arr = np.asarray(x, dtype=float)
        if arr.size == 0:
            raise ValueError("the data vector is empty")
        if not np.all(np.isfinite(arr)):
            raise ValueError("the data vector has NaN or infinite entries")
        self._x = arr.ravel()
        self.domain = arr.shape
        self.ledger = ledger if ledger is not None else PrivacyLedger()

    @property
    def n(self) -> int:
        """Number of cells."""
        return self._x.size

    def measure(self, A, noise: NoiseModel, rng: np.random.Generator, label: str = "measure",
                seed: int | None = None) -> np.ndarray:
        """Noisy strategy answers ``y = A x + z`` (MEASURE of the matrix mechanism).

        ``z`` is i.i.d. Laplace with scale ``Δ₁(A)/ε`` (ε-DP) or Gaussian with
        ``σ = Δ₂(A)·c(ε, δ)`` ((ε, δ)-DP), ``Δ`` the sensitivity of ``A``
        under add/remove-one-record (HDMM Def. 10, Prop. 4; MATH.md "Noise
        and sensitivity").  Records ``(ε, δ)`` in the ledger.

        Parameters
        ----------
        A : Matrix or array, shape (p, n)
            Strategy queries.
        noise : NoiseModel
        rng : numpy.random.Generator
            Explicit, seeded source of randomness.
        label, seed
            Recorded in the ledger.

        Returns
        -------
        ndarray, shape (p,)
            Noisy answers, in counts.

        Raises
        ------
        ValueError
            If ``A`` does not have ``n`` columns or has zero sensitivity.
        BudgetExceededError
            If the ledger's budget would be exceeded (nothing is measured).
        """
        A = as_matrix(A)
        if A.n != self.n:
            raise ValueError(f"strategy has {A.n} columns but the data vector has {self.n} cells")
        if not isinstance(rng, np.random.Generator):
            raise TypeError("rng must be a numpy.random.Generator (seeded explicitly)")
        sens = A.sensitivity(noise.norm)
        if not sens > 0:
            raise ValueError(f"strategy {A.name!r} has sensitivity 0: it measures nothing")
        self.ledger.record(self._spend(label, noise, A.m, sens, seed))
        return A.matvec(self._x) + noise.sample(rng, A.m, sens)

    def measure_function(self, f, sensitivity: float, epsilon: float, rng: np.random.Generator,
                         label: str, seed: int | None = None) -> np.ndarray:
        """Laplace mechanism on any vector-valued ``f(x)`` with known L1 sensitivity.

        Returns ``f(x) + Laplace(sensitivity/ε)`` per entry (Dwork et al.
        2006), recording ε.  Used by data-dependent mechanisms for their
        non-linear statistics (e.g. EFPA's retained Fourier coefficients).

        Raises
        ------
        ValueError
            If ``sensitivity`` is not positive.
        BudgetExceededError
            If the ledger's budget would be exceeded.
        """
        if not sensitivity > 0:
            raise ValueError(f"sensitivity must be positive, got {sensitivity}")
        noise = Laplace(epsilon)
        values = np.asarray(f(self._x.copy()), dtype=float)
        self.ledger.record(self._spend(label, noise, values.size, sensitivity, seed))
        return values + noise.sample(rng, values.shape, sensitivity)

    def exponential_mechanism(self, scores_fn, sensitivity: float, epsilon: float,
                              rng: np.random.Generator, label: str, seed: int | None = None) -> int:
        """Exponential mechanism: pick index ``i`` with probability ∝ ``exp(ε·u_i / (2Δu))``.

        ``u = scores_fn(x)`` are utilities (higher is better) whose every entry
        changes by at most ``sensitivity`` (Δu) between neighbouring data
        vectors; only the chosen index leaves the boundary (McSherry & Talwar,
        FOCS 2007, Thm 6).  Records ε.

        Returns
        -------
        int
            The selected index.

        Raises
        ------
        ValueError
            If ``sensitivity`` is not positive or the utilities are empty or not finite.
        BudgetExceededError
            If the ledger's budget would be exceeded.
        """
        if not sensitivity > 0:
            raise ValueError(f"sensitivity must be positive, got {sensitivity}")
        noise = Laplace(epsilon)  # validates ε; the mechanism itself is not Laplace noise
        u = np.asarray(scores_fn(self._x.copy()), dtype=float).ravel()
        if u.size == 0 or not np.all(np.isfinite(u)):
            raise ValueError("the exponential mechanism needs a non-empty vector of finite utilities")
        self.ledger.record(self._spend(label + " (exponential mechanism)", noise, 1, sensitivity,
                                       seed, f"exponential mechanism over {u.size} candidates"))
        logits = noise.epsilon * u / (2.0 * sensitivity)
        p = np.exp(logits - logits.max())
        return int(rng.choice(u.size, p=p / p.sum()))

    def noisy_optimum(self, costs_fn, scale, select_fn, epsilon: float,
                      rng: np.random.Generator, label: str, seed: int | None = None,
                      sensitivity: float = float("nan")):
        """Release only ``select_fn(costs_fn(x) + Z)``, ``Z`` i.i.d. Laplace(``scale``).

        The noisy costs never leave this method; only what ``select_fn`` makes
        of them (e.g. the least-cost partition) does.  The caller states the
        theorem that makes this ``epsilon``-DP for its ``scale``: DAWA's
        private partition (Li et al. PVLDB 2014, Alg. 1, Thm 2) uses
        ``scale = 2·Δbcost/ε₁`` with ``Δbcost = 2``.  Records ``epsilon``.

        Parameters
        ----------
        costs_fn : callable
            ``x -> costs`` (ndarray).
        scale : float or ndarray
            Laplace scale of the noise on every cost (one per cost, or one for all).
        select_fn : callable
            ``noisy_costs -> output``; must not return the noisy costs themselves.
        epsilon : float
            Privacy cost of the release, per the caller's theorem.
        sensitivity : float
            Sensitivity of one cost (recorded in the ledger).

        Raises
        ------
        ValueError
            If ``scale`` is not positive.
        BudgetExceededError
            If the ledger's budget would be exceeded.
        """
        scale = np.asarray(scale, dtype=float)
        if scale.size == 0 or not np.all(scale > 0):
            raise ValueError("noise scales must be positive")
        noise = Laplace(epsilon)
        costs = np.asarray(costs_fn(self._x.copy()), dtype=float)
        self.ledger.record(self._spend(
            label, noise, 1, sensitivity, seed,
            f"Laplace(scale ≤ {scale.max():g}) on {costs.size} costs, argmin released"))
        return select_fn(costs + rng.laplace(0.0, scale, size=costs.shape))

    def above_threshold(self, queries_fn, threshold: float, sensitivity: float, epsilon: float,
                        rng: np.random.Generator, label: str, seed: int | None = None) -> int | None:
        """Sparse vector technique, AboveThreshold: the first query whose noisy answer reaches a noisy threshold.

        With ``q = queries_fn(x)`` (every entry changing by at most
        ``sensitivity`` = Δ between neighbouring data vectors), draws
        ``T̂ = threshold + Lap(2Δ/ε)`` and ``ν_i ~ Lap(4Δ/ε)`` and returns the
        first ``i`` with ``q_i + ν_i ≥ T̂`` (``None`` if there is none).  Only
        that index leaves the boundary; it is ε-DP however many queries there
        are (Dwork & Roth 2014, Alg. 1 "AboveThreshold", Thm 3.23).  The
        threshold must be public (data-independent).  Records ε.

        Parameters
        ----------
        queries_fn : callable
            ``x -> q``, a 1D array of query answers in the order they are asked.
        threshold : float
            Public threshold ``T``.
        sensitivity : float
            Δ > 0: bound on ``|q_i(x) − q_i(x')|`` for neighbours ``x, x'``.
        epsilon : float
            ε spent.
        rng : numpy.random.Generator
        label, seed
            Recorded in the ledger.

        Returns
        -------
        int or None
            Index of the first query above the threshold, or ``None``.

        Raises
        ------
        ValueError
            If ``sensitivity`` is not a positive finite number, ``threshold`` is not finite, or
            the queries are empty or not finite.
        BudgetExceededError
            If the ledger's budget would be exceeded.
        """
        try:
            delta = float(sensitivity)
        except (TypeError, ValueError):
            raise ValueError(f"the sensitivity Δ must be a positive finite number, got {sensitivity!r}") from None
        if not (math.isfinite(delta) and delta > 0):
            raise ValueError(f"the sensitivity Δ must be a positive finite number (0 < Δ < ∞), got "
                             f"{sensitivity!r}")
        sensitivity = delta
        if not math.isfinite(float(threshold)):
            raise ValueError(f"the threshold must be a finite number, got {threshold!r}")
        noise = Laplace(epsilon)  # validates ε
        q = np.asarray(queries_fn(self._x.copy()), dtype=float).ravel()
        if q.size == 0 or not np.all(np.isfinite(q)):
            raise ValueError("AboveThreshold needs a non-empty vector of finite query answers")
        self.ledger.record(self._spend(
            label + " (sparse vector, AboveThreshold)", noise, 1, sensitivity, seed,
            f"AboveThreshold over {q.size} queries: Laplace({2 * sensitivity / noise.epsilon:g}) "
            f"on the threshold, Laplace({4 * sensitivity / noise.epsilon:g}) per query"))
        t_hat = float(threshold) + rng.laplace(0.0, 2.0 * sensitivity / noise.epsilon)
        above = np.flatnonzero(q + rng.laplace(0.0, 4.0 * sensitivity / noise.epsilon, size=q.size) >= t_hat)
        return int(above[0]) if above.size else None

    @staticmethod
    def _spend(label, noise: NoiseModel, queries: int, sensitivity: float, seed,
               description: str | None = None) -> Spend:
        return Spend(
            label=label,
            epsilon=noise.epsilon,
            delta=noise.delta,
            noise=description or noise.label,
            queries=int(queries),
            sensitivity=float(sensitivity),
            seed=seed,
            time=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        )

    def __repr__(self) -> str:
        return f"<PrivateData n={self.n} (hidden); {self.ledger!r}>"


