"""Noise models: Laplace (ε-DP) and Gaussian ((ε, δ)-DP).

A noise model turns a strategy's sensitivity into a per-answer noise scale.
Everything the analytic error needs is the *variance per unit sensitivity*
``v`` and the norm ``p`` in which sensitivity is measured (HDMM, McKenna et al., Def. 7-8
and Prop. 3; ``dpexplorer/docs/noise.md``):

* Laplace: scale ``b = Δ₁/ε``, variance ``2b²``, so ``v = 2/ε²`` and ``p = 1``
  (Dwork, McSherry, Nissim, Smith 2006).
* Gaussian: ``σ = Δ₂·c(ε, δ)``, ``v = c²`` and ``p = 2``.  ``c`` is by default
  the analytic Gaussian mechanism's (Balle & Wang, ICML 2018, Thm 8): the
  smallest ``σ`` for ``Δ = 1`` with
  ``Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ) ≤ δ``.  The classical calibration
  ``c = sqrt(2 ln(1.25/δ))/ε`` (Dwork & Roth 2014, Thm A.1, valid for
  ``ε < 1``) and the Eigen-Design paper's ``c² = 2 ln(2/δ)/ε²`` (Li & Miklau
  2012, Prop. 4) are options.  The ``"zcdp"`` calibration is the one releases
  use: ``c = 1/sqrt(2ρ)`` with ρ the largest zCDP cost whose tight conversion
  gives (ε, δ) (Bun & Steinke 2016, Prop. 1.6; Canonne, Kamath & Steinke 2020,
  Cor. 13; :mod:`dpexplorer.privacy.accounting`), because the vetted samplers a
  release draws from are proved private in zCDP, not through the analytic
  Gaussian's exact privacy profile.

Every model also states its zero-concentrated DP cost per unit sensitivity,
:attr:`NoiseModel.rho_per_unit` (``ε²/2`` for Laplace, ``1/(2c²)`` for
Gaussian), which the ledger composes.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import scipy.optimize
import scipy.special

from . import accounting

__all__ = ["NoiseModel", "Laplace", "Gaussian", "analytic_gaussian_sigma", "check_noise",
           "EPSILON_RANGE"]

#: The ε a noise model accepts.  Far beyond any meaningful privacy level on both
#: sides (ε = 1e-9 is noise about 1e9 times a count, ε = 1e9 no privacy at all),
#: and the range in which every formula of the package is checked to stay
#: finite: the variance 2/ε², the zCDP cost ε²/2, the analytic Gaussian σ, the
#: discrete samplers' parameters and the confidence intervals.  ε = 1e-320
#: (a subnormal) would make 2/ε² overflow.
EPSILON_RANGE = (1e-9, 1e9)


def _check_epsilon(epsilon: Any) -> float:
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise ValueError(f"epsilon must be a positive finite number (a float), got {epsilon!r}")
    eps = float(epsilon)
    if not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"epsilon must be a positive finite number (ε > 0), got {epsilon!r}")
    lo, hi = EPSILON_RANGE
    if not lo <= eps <= hi:
        raise ValueError(f"epsilon = {eps:g} is outside [{lo:g}, {hi:g}], the range of ε the noise "
                         "models support (see dpexplorer.privacy.noise.EPSILON_RANGE)")
    return eps


_check_delta = accounting._delta  # one check of δ ∈ (0, 1) for noise models and budgets


def check_noise(noise: Any, name: str = "noise") -> NoiseModel:
    """``noise`` if it is a noise model, else TypeError naming ``name`` and what is allowed."""
    if not isinstance(noise, NoiseModel):
        raise TypeError(f"{name} must be a noise model, dpx.Laplace(ε) or dpx.Gaussian(ε, δ), got "
                        f"{type(noise).__name__} {noise!r}")
    return noise


@functools.lru_cache(maxsize=1024)
def analytic_gaussian_sigma(epsilon: float, delta: float) -> float:
    """Noise multiplier ``σ`` of the analytic Gaussian mechanism for ``Δ₂ = 1``.

    Smallest ``σ`` with ``Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ) ≤ δ``
    (Balle & Wang, ICML 2018, Thm 8), found with :func:`scipy.optimize.brentq`
    on ``log σ`` in a bracket widened until the left side changes sign.  For
    ``ε = 1, δ = 1e-6`` it is ``4.2247`` (HDMM Tables 5, 7).

    The left side is evaluated as ``[Φ(u) − Φ(v)] − (e^ε − 1)·Φ(v)`` with
    ``u, v = −εσ ± 1/(2σ)``: for small ε, σ is large, ``u`` and ``v`` are
    close and ``Φ(u) − Φ(v)`` comes from the expansion
    ``h·φ(c)·(1 + (c² − 1)h²/24)`` (``c = −εσ``, ``h = 1/σ``) instead of a
    difference of two nearly equal probabilities, and ``(e^ε − 1)·Φ(v)`` in
    logarithms, so that σ keeps ~10 significant digits over
    :data:`EPSILON_RANGE` and δ down to 1e-100 (``tests/test_noise.py`` checks
    against 60-digit arithmetic).

    Parameters
    ----------
    epsilon : float
        ε > 0.
    delta : float
        δ in (0, 1).

    Returns
    -------
    float
        ``σ`` per unit L2 sensitivity.

    Raises
    ------
    ValueError
        If ε or δ is out of range.
    """
    eps = _check_epsilon(epsilon)
    d = _check_delta(delta)
    log_expm1_eps = eps + math.log(-math.expm1(-eps))  # log(e^ε − 1), finite for every ε > 0

    def excess(log_sigma: float) -> float:
        s = math.exp(log_sigma)
        h, c = 1.0 / s, -eps * s
        if h < 1e-5:  # Φ(c + h/2) − Φ(c − h/2) without cancellation; next term O(h⁴c⁴)
            gap = h * math.exp(-0.5 * c * c) / math.sqrt(2.0 * math.pi) * (1.0 + (c * c - 1.0) * h * h / 24.0)
        else:
            gap = scipy.special.ndtr(c + h / 2.0) - scipy.special.ndtr(c - h / 2.0)
        return gap - math.exp(log_expm1_eps + scipy.special.log_ndtr(c - h / 2.0)) - d

    # excess decreases in σ, from 1 − δ > 0 (σ → 0) to −δ (σ → ∞): widen until it changes sign
    lo, hi = -20.0, 20.0
    while excess(hi) > 0:
        hi += 20.0
    while excess(lo) <= 0:
        lo -= 20.0
    return math.exp(scipy.optimize.brentq(excess, lo, hi, xtol=1e-13, rtol=1e-14))


@dataclass(frozen=True)
class NoiseModel:
    """Base class of noise models.

    Attributes
    ----------
    epsilon : float
        ε per release.
    delta : float
        δ per release (0 for pure ε-DP).
    norm : int
        1 or 2: the norm of the sensitivity the noise is scaled to.
    """

    epsilon: float
    delta: float = 0.0
    norm: int = field(init=False, default=1)

    @property
    def variance_per_unit(self) -> float:  # pragma: no cover - abstract
        """Variance ``v`` of one noisy answer when the sensitivity is 1."""
        raise NotImplementedError

    @property
    def std_per_unit(self) -> float:
        """Standard deviation of one noisy answer when the sensitivity is 1."""
        return math.sqrt(self.variance_per_unit)

    def scale(self, sensitivity: float) -> float:  # pragma: no cover - abstract
        """The mechanism's scale parameter (Laplace ``b`` or Gaussian ``σ``)."""
        raise NotImplementedError

    def variance(self, sensitivity: float) -> float:
        """Variance of one noisy answer for a strategy of this sensitivity."""
        return self.variance_per_unit * float(sensitivity) ** 2

    def discrete_variance(self, sensitivity: float) -> float:  # pragma: no cover - abstract
        """Variance of one noisy answer when the discrete (integer) sampler is used."""
        raise NotImplementedError

    @property
    def rho_per_unit(self) -> float:  # pragma: no cover - abstract
        """zCDP cost ρ of one measurement of unit sensitivity (Bun & Steinke 2016)."""
        raise NotImplementedError

    def rho(self, sensitivity: float = 1.0) -> float:
        """zCDP cost ρ of one measurement of this sensitivity, scaled as the noise is.

        The noise scale is proportional to the sensitivity, so the ratio
        sensitivity/scale -- and ρ -- does not depend on it; the argument is
        kept for symmetry with :meth:`variance`.
        """
        return self.rho_per_unit

    def with_epsilon(self, epsilon: float) -> NoiseModel:  # pragma: no cover - abstract
        """The same model at another ε."""
        raise NotImplementedError

    @property
    def label(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Laplace(NoiseModel):
    """Laplace noise, ε-DP: scale ``b = Δ₁/ε``, variance ``2b²``.

    Source: Dwork, McSherry, Nissim, Smith (TCC 2006); HDMM Def. 10.

    Raises
    ------
    ValueError
        If ε is not a positive finite number.
    """

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _check_epsilon(self.epsilon))
        if self.delta != 0:
            raise ValueError("the Laplace mechanism is pure ε-DP: delta must be 0")
        object.__setattr__(self, "norm", 1)

    @property
    def variance_per_unit(self) -> float:
        return 2.0 / self.epsilon**2

    def scale(self, sensitivity: float) -> float:
        return float(sensitivity) / self.epsilon

    def discrete_variance(self, sensitivity: float) -> float:
        """Variance ``2q/(1−q)²`` (``q = e^{−ε/Δ₁}``) of the discrete Laplace at scale Δ₁/ε."""
        from .samplers import discrete_laplace_variance

        return discrete_laplace_variance(self.scale(sensitivity))

    @property
    def rho_per_unit(self) -> float:
        """``ε²/2``: an ε-DP measurement is ε²/2-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
        return accounting.rho_pure(self.epsilon)

    def with_epsilon(self, epsilon: float) -> Laplace:
        return Laplace(epsilon)

    @property
    def label(self) -> str:
        return f"Laplace(ε={self.epsilon:g})"


_CALIBRATIONS = ("analytic", "classical", "eigen_design", "zcdp")


@dataclass(frozen=True)
class Gaussian(NoiseModel):
    """Gaussian noise, (ε, δ)-DP: ``σ = Δ₂·c(ε, δ)``.

    Parameters
    ----------
    epsilon : float
        ε > 0.
    delta : float
        δ in (0, 1).
    calibration : {"analytic", "classical", "eigen_design", "zcdp"}
        ``"analytic"`` (default): Balle & Wang 2018, Thm 8.
        ``"classical"``: ``c = sqrt(2 ln(1.25/δ))/ε`` (Dwork & Roth 2014,
        Thm A.1), only for ε < 1.  ``"eigen_design"``: ``c² = 2 ln(2/δ)/ε²``
        (Li & Miklau 2012, Prop. 4).  ``"zcdp"``: ``c = 1/sqrt(2ρ)`` with
        ``ρ = accounting.rho_from_epsilon(ε, δ)``, the largest zCDP cost whose
        tight conversion (Canonne, Kamath & Steinke 2020, Cor. 13) is
        (ε, δ)-DP; the calibration releases use, since their vetted samplers
        are proved private in zCDP.  At ε = 1, δ = 1e-6 it gives c = 4.52
        where the analytic calibration gives 4.22.

    Raises
    ------
    ValueError
        If ε or δ is out of range, the calibration is unknown, or the
        classical calibration is asked for ε ≥ 1.
    """

    calibration: str = "analytic"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _check_epsilon(self.epsilon))
        object.__setattr__(self, "delta", _check_delta(self.delta))
        object.__setattr__(self, "norm", 2)
        if self.calibration not in _CALIBRATIONS:
            raise ValueError(
                f"calibration must be one of {_CALIBRATIONS}, got {self.calibration!r}"
            )
        if self.calibration == "classical" and self.epsilon >= 1:
            raise ValueError(
                f"the classical Gaussian calibration holds only for epsilon < 1 "
                f"(got {self.epsilon}); use calibration='analytic'"
            )

    @property
    def sigma_per_unit(self) -> float:
        """``c(ε, δ)``: σ for unit L2 sensitivity."""
        if self.calibration == "analytic":
            return analytic_gaussian_sigma(self.epsilon, self.delta)
        if self.calibration == "classical":
            return math.sqrt(2.0 * math.log(1.25 / self.delta)) / self.epsilon
        if self.calibration == "zcdp":
            return 1.0 / math.sqrt(2.0 * accounting.rho_from_epsilon(self.epsilon, self.delta))
        return math.sqrt(2.0 * math.log(2.0 / self.delta)) / self.epsilon

    @property
    def variance_per_unit(self) -> float:
        return self.sigma_per_unit**2

    def scale(self, sensitivity: float) -> float:
        return float(sensitivity) * self.sigma_per_unit

    def discrete_variance(self, sensitivity: float) -> float:
        """Variance of the discrete Gaussian with the same σ (slightly below σ²)."""
        from .samplers import discrete_gaussian_variance

        return discrete_gaussian_variance(self.scale(sensitivity))

    @property
    def rho_per_unit(self) -> float:
        """``1/(2c²)``: ``ρ = Δ₂²/(2σ²)`` with ``σ = Δ₂·c`` (Bun & Steinke 2016, Prop. 1.6)."""
        return accounting.rho_gaussian(1.0, self.sigma_per_unit)

    @classmethod
    def from_rho(cls, rho: float, delta: float) -> Gaussian:
        """The zCDP-calibrated Gaussian whose ρ is ``rho``, stated as (ε, δ) at ``delta``.

        ``ε = accounting.epsilon_from_rho(ρ, δ)``; the returned model's
        :attr:`rho_per_unit` equals ``rho`` to solver precision (1e-12 relative).

        Raises
        ------
        ValueError
            If ρ is not positive or δ not in (0, 1).
        """
        return cls(accounting.epsilon_from_rho(accounting._positive(rho, "rho"), delta), delta,
                   "zcdp")

    def with_epsilon(self, epsilon: float) -> Gaussian:
        return Gaussian(epsilon, self.delta, self.calibration)

    @property
    def label(self) -> str:
        return f"Gaussian(ε={self.epsilon:g}, δ={self.delta:g}, {self.calibration})"
