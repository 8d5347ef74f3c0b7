"""Privacy accounting: zero-concentrated DP (ρ), pure ε-DP and (ε, δ), and conversions.

Three ways to add up what measurements spend, each valid on its own:

* **pure ε-DP**, sequential composition: the ε of ε-DP measurements add up
  (Dwork & Roth 2014, Thm 3.16);
* **basic (ε, δ) composition**: ε and δ add up (Dwork & Roth 2014, Thm 3.16);
* **zero-concentrated DP** (Bun & Steinke, TCC 2016): a Gaussian measurement of
  L2 sensitivity Δ₂ with noise σ is ρ-zCDP with ``ρ = Δ₂²/(2σ²)`` (Prop. 1.6),
  an ε-DP measurement is ``ε²/2``-zCDP (Prop. 1.4), and the ρ of successive
  measurements add up (Lemma 1.7).  ρ-zCDP implies (ε, δ)-DP for every δ > 0
  with the tight conversion of Canonne, Kamath & Steinke (NeurIPS 2020,
  Prop. 12 / Cor. 13)::

      ε(ρ, δ) = inf_{α > 1}  αρ + (log(1/δ) + (α − 1) log(1 − 1/α) − log α) / (α − 1)

  which is never larger than Bun & Steinke's ``ρ + 2·sqrt(ρ log(1/δ))``
  (Prop. 1.3).

A ledger (:class:`dpexplorer.privacy.PrivacyLedger`) keeps every measurement's
ε, δ and ρ and reports the best guarantee any of these accountings proves.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass
from typing import Any

import scipy.optimize

__all__ = ["rho_gaussian", "rho_pure", "epsilon_from_rho", "delta_from_rho", "rho_from_epsilon",
           "Budget"]


def _positive(value: Any, name: str, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    ok = v >= 0 if allow_zero else v > 0
    if not (math.isfinite(v) and ok):
        bound = "≥ 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return v


#: Smallest δ accepted (noise models and budgets): below it 1/δ nears overflow
#: (δ = 1e-320 is subnormal) and the conversions are not checked.
DELTA_MIN = 1e-100


def _delta(delta: Any) -> float:
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real):
        raise ValueError(f"delta must be a number in (0, 1), got {delta!r}")
    d = float(delta)
    if not 0.0 < d < 1.0:
        raise ValueError(f"delta must be in the open interval (0, 1), got {delta!r}")
    if d < DELTA_MIN:
        raise ValueError(f"delta = {d:g} is below {DELTA_MIN:g}, the smallest δ supported "
                         "(dpexplorer.privacy.accounting.DELTA_MIN)")
    return d


def rho_gaussian(sensitivity: float, sigma: float) -> float:
    """zCDP cost ``ρ = Δ₂²/(2σ²)`` of Gaussian noise ``N(0, σ²)`` on a query of L2 sensitivity Δ₂.

    Source: Bun & Steinke (TCC 2016), Prop. 1.6; for the discrete Gaussian the
    same ρ holds (Canonne, Kamath & Steinke, NeurIPS 2020, Thm 4 and 14).

    Raises
    ------
    ValueError
        If Δ₂ is negative or σ not positive.
    """
    d = _positive(sensitivity, "the L2 sensitivity", allow_zero=True)
    s = _positive(sigma, "sigma")
    return d * d / (2.0 * s * s)


def rho_pure(epsilon: float) -> float:
    """zCDP cost ``ρ = ε²/2`` of an ε-DP measurement (Bun & Steinke 2016, Prop. 1.4).

    Raises
    ------
    ValueError
        If ε is negative or not finite.
    """
    e = _positive(epsilon, "epsilon", allow_zero=True)
    return 0.5 * e * e


def _cks_epsilon(alpha: float, rho: float, log_inv_delta: float) -> float:
    return alpha * rho + (log_inv_delta + (alpha - 1.0) * math.log1p(-1.0 / alpha)
                          - math.log(alpha)) / (alpha - 1.0)


@functools.lru_cache(maxsize=4096)
def epsilon_from_rho(rho: float, delta: float) -> float:
    """Smallest ε such that ρ-zCDP implies (ε, δ)-DP (Canonne, Kamath & Steinke 2020, Cor. 13).

    The infimum over the Rényi order α > 1 is found with
    :func:`scipy.optimize.minimize_scalar` on ``log(α − 1)`` (the objective is
    unimodal in α).

    Parameters
    ----------
    rho : float
        ρ ≥ 0 (0 gives ε = 0).
    delta : float
        δ in (0, 1).

    Returns
    -------
    float
        ε ≥ 0.

    Raises
    ------
    ValueError
        If ρ or δ is out of range.
    """
    r = _positive(rho, "rho", allow_zero=True)
    d = _delta(delta)
    if r == 0.0:
        return 0.0
    lid = math.log(1.0 / d)
    # the unconstrained optimum of the Bun–Steinke form sits at α ≈ 1 + sqrt(log(1/δ)/ρ)
    guess = math.log(max(math.sqrt(lid / r), 1e-12))
    res = scipy.optimize.minimize_scalar(
        lambda la: _cks_epsilon(1.0 + math.exp(la), r, lid),
        bounds=(guess - 25.0, guess + 25.0), method="bounded", options={"xatol": 1e-12})
    return max(float(res.fun), 0.0)


def delta_from_rho(rho: float, epsilon: float) -> float:
    """Smallest δ with ρ-zCDP ⟹ (ε, δ)-DP (Canonne, Kamath & Steinke 2020, Prop. 12).

    ``δ = inf_{α>1} exp((α−1)(αρ−ε)) / α · (1 − 1/α)^(α−1)``, computed in logs.

    Raises
    ------
    ValueError
        If ρ or ε is out of range.
    """
    r = _positive(rho, "rho", allow_zero=True)
    e = _positive(epsilon, "epsilon", allow_zero=True)
    if r == 0.0:
        return 0.0

    def log_delta(la: float) -> float:
        a = 1.0 + math.exp(la)
        return (a - 1.0) * (a * r - e) - math.log(a) + (a - 1.0) * math.log1p(-1.0 / a)

    guess = math.log(max((e + r) / (2.0 * r), 1e-12))
    res = scipy.optimize.minimize_scalar(log_delta, bounds=(guess - 25.0, guess + 25.0),
                                         method="bounded", options={"xatol": 1e-12})
    return min(1.0, math.exp(min(float(res.fun), 0.0)))


@functools.lru_cache(maxsize=4096)
def rho_from_epsilon(epsilon: float, delta: float) -> float:
    """Largest ρ whose zCDP guarantee converts to (ε, δ)-DP: the inverse of :func:`epsilon_from_rho`.

    ``ε(ρ, δ)`` increases strictly with ρ, so the root of ``ε(ρ, δ) = ε`` is
    found with :func:`scipy.optimize.brentq` (relative tolerance 1e-13).  Used
    by the ``"zcdp"`` calibration of :class:`dpexplorer.privacy.noise.Gaussian`.

    Raises
    ------
    ValueError
        If ε or δ is out of range.
    """
    e = _positive(epsilon, "epsilon")
    d = _delta(delta)
    lo, hi = 1e-300, max(1.0, e)
    while epsilon_from_rho(hi, d) < e:
        hi *= 4.0
    rho = scipy.optimize.brentq(lambda r: epsilon_from_rho(r, d) - e, lo, hi,
                                xtol=1e-300, rtol=1e-13, maxiter=500)
    # never above the target: step down by the solver's tolerance if needed
    while epsilon_from_rho(rho, d) > e * (1.0 + 1e-12):
        rho *= 1.0 - 1e-12
    return float(rho)


@dataclass(frozen=True)
class Budget:
    """What a dataset may spend in all: pure ε, (ε, δ), or zCDP ρ.

    Build with :meth:`pure`, :meth:`approx` or :meth:`zcdp`.

    Attributes
    ----------
    kind : {"pure", "approx", "zcdp"}
    epsilon : float or None
        ε cap (pure and approx).
    delta : float or None
        δ cap (approx).
    rho : float or None
        ρ cap (zcdp).
    """

    kind: str
    epsilon: float | None = None
    delta: float | None = None
    rho: float | None = None

    @classmethod
    def pure(cls, epsilon: float) -> Budget:
        """A pure ε-DP budget: only ε-DP measurements, whose ε add up to at most ``epsilon``."""
        return cls("pure", epsilon=_positive(epsilon, "the ε budget"))

    @classmethod
    def approx(cls, epsilon: float, delta: float) -> Budget:
        """An (ε, δ) budget: the whole ledger must be (ε, δ)-DP by some valid accounting."""
        return cls("approx", epsilon=_positive(epsilon, "the ε budget"), delta=_delta(delta))

    @classmethod
    def zcdp(cls, rho: float) -> Budget:
        """A ρ-zCDP budget: the ρ of all measurements add up to at most ``rho``."""
        return cls("zcdp", rho=_positive(rho, "the ρ budget"))

    @property
    def label(self) -> str:
        """Plain text, e.g. ``"ε = 1, δ = 1e-06"``."""
        if self.kind == "pure":
            return f"ε = {self.epsilon:g} (pure DP)"
        if self.kind == "approx":
            return f"ε = {self.epsilon:g}, δ = {self.delta:g}"
        return f"ρ = {self.rho:g} (zCDP)"
