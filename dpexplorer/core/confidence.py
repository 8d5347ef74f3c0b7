"""Confidence intervals of the matrix mechanism's answers, from the analytic error alone.

Every answer's error is a fixed linear combination of the i.i.d. strategy
noise; :func:`confidence_half_widths` turns its standard deviation
(:func:`dpexplorer.core.error.per_query_rmse`) into an interval half-width,
exact where the noise's distribution is known in closed form and a stated
bound elsewhere (``CI_TEXT`` says which).  Public post-processing: no data.
Used by releases (:mod:`dpexplorer.mechanism`), stream releases
(:mod:`dpexplorer.streaming.releases`) and accuracy-first budgeting.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.stats

from ..privacy import variance_factor
from ..privacy.noise import Gaussian, Laplace, NoiseModel
from ..queries.matrix import Matrix
from . import error

__all__ = ["confidence_half_widths", "single_terms", "CI_TEXT", "EXACT_CI_LIMIT"]

#: Largest ``m·p`` (and ``n·p``) for which a release finds the answers whose noise
#: is one noisy strategy answer (exact Laplace intervals); larger ones use the bound.
EXACT_CI_LIMIT = 2**22

CI_TEXT = {
    "gaussian": "exact: Gaussian noise (answer ± z·std)",
    "laplace_single": "exact: the answer's noise is one Laplace variable",
    "laplace_gauss": ("bound: Gauss's inequality -- a sum of Laplace variables is symmetric and "
                      "unimodal, so P(|error| ≥ λ·std) ≤ 4/(9λ²)"),
    "discrete_laplace_single": "exact: the answer's noise is one discrete Laplace variable",
    "discrete_laplace_chebyshev": "bound: Chebyshev -- P(|error| ≥ λ·std) ≤ 1/λ² (sums of discrete Laplace)",
    "discrete_gaussian_subgaussian": ("bound: sub-Gaussian tail -- discrete Gaussian noise is "
                                      "σ²-sub-Gaussian (Canonne, Kamath & Steinke 2020), so "
                                      "P(|error| ≥ t) ≤ 2·exp(−t²/(2s²)) with s the continuous std"),
    "none": "none: no analytic error (a data-dependent mechanism, or consistent marginals of a table)",
}


def single_terms(W: Matrix, A: Matrix) -> np.ndarray | None:
    """Per query, ``|c|`` when its noise is ``c`` times ONE strategy answer's noise, else 0.

    ``c`` is the row of ``W A⁺`` (the map from strategy noise to answer
    noise).  Computed densely only when ``m·p`` and ``n·p`` are at most
    :data:`EXACT_CI_LIMIT`; ``None`` otherwise (or for strategies answering
    the workload themselves).
    """
    if getattr(A, "answer", None) is not None or getattr(A, "reconstructor", None) is not None:
        return None
    if max(W.m * A.m, W.n * A.m) > EXACT_CI_LIMIT:
        return None
    try:
        C = W.dense() @ np.linalg.pinv(A.dense())
    except Exception:  # noqa: BLE001 - only an upgrade from the bound to exact
        return None
    mags = np.abs(C)
    top = mags.max(axis=1, keepdims=True)
    single = (mags > 1e-9 * np.maximum(top, 1e-300)).sum(axis=1) == 1
    return np.where(single, top[:, 0], 0.0)


def confidence_half_widths(W: Matrix, A: Matrix, noise: NoiseModel, sampler: str,
                           level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Half-widths of level-``level`` intervals ``answer ± h`` for a release of ``W`` with ``A``.

    The error of every answer is a fixed linear combination ``Σ_j c_j z_j``
    of the i.i.d. strategy noise ``z`` (``c`` = row of ``W A⁺``), with standard
    deviation ``s`` = :func:`dpexplorer.core.error.per_query_rmse` (times the
    discrete sampler's variance factor).  With ``α = 1 − level``:

    * Gaussian noise: exact, ``h = Φ⁻¹(1 − α/2)·s``.
    * Laplace noise, one term: exact, ``h = |c|·b·ln(1/α)``.
    * Laplace noise, a sum: Laplace densities are symmetric and unimodal and so
      is any sum of them (Wintner 1938), so Gauss's inequality (Gauss 1823;
      Pukelsheim 1994) gives ``P(|e| ≥ λs) ≤ 4/(9λ²)`` for ``λ ≥ 2/√3``:
      ``h = 2s/(3√α)`` (2.98·s at 95 %), a valid bound.
    * discrete Laplace, one term: exact, ``h = |c|·k`` with the smallest
      whole ``k`` such that ``P(|Z| > k) = 2q^{k+1}/(1+q) ≤ α``.
    * discrete Laplace, a sum: Chebyshev, ``h = s/√α``.
    * discrete Gaussian: each term is σ²-sub-Gaussian (Canonne, Kamath &
      Steinke 2020), so the sum is sub-Gaussian with the continuous
      variance ``s_c²``: ``h = s_c·sqrt(2 ln(2/α))``.

    Parameters
    ----------
    W : Matrix, shape (m, n)
    A : Matrix, shape (p, n)
    noise : NoiseModel
    sampler : {"continuous", "discrete"}
        The sampler MEASURE used (:func:`dpexplorer.privacy.noise_sampler`).
    level : float
        Coverage in (2/3, 1) (default 0.95).

    Returns
    -------
    half_width : ndarray, shape (m,)
        In counts.
    method : ndarray of str, shape (m,)
        Key of the method per answer (``Release.CI_METHODS`` explains them).

    Raises
    ------
    ValueError
        If ``level`` is outside (2/3, 1) or the sampler unknown.
    """
    level = float(level)
    if not 2.0 / 3.0 < level < 1.0:
        raise ValueError(f"the confidence level must be in (2/3, 1), got {level!r}")
    if sampler not in ("continuous", "discrete"):
        raise ValueError(f"sampler must be 'continuous' or 'discrete', got {sampler!r}")
    alpha = 1.0 - level
    s_cont = error.per_query_rmse(W, A, noise)
    sens = A.sensitivity(noise.norm)
    m = W.m
    if isinstance(noise, Gaussian):
        if sampler == "continuous":
            return scipy.stats.norm.ppf(1 - alpha / 2) * s_cont, np.full(m, "gaussian")
        return s_cont * math.sqrt(2.0 * math.log(2.0 / alpha)), np.full(m, "discrete_gaussian_subgaussian")
    if not isinstance(noise, Laplace):
        raise TypeError(f"no interval rule for {type(noise).__name__} noise")
    b = noise.scale(sens)
    single = single_terms(W, A)
    if sampler == "continuous":
        h = 2.0 * s_cont / (3.0 * math.sqrt(alpha))
        method = np.full(m, "laplace_gauss", dtype=object)
        if single is not None:
            one = single > 0
            h = np.where(one, single * b * math.log(1.0 / alpha), h)
            method[one] = "laplace_single"
        return h, method.astype(str)
    s = s_cont * math.sqrt(variance_factor(A, noise))
    h = s / math.sqrt(alpha)
    method = np.full(m, "discrete_laplace_chebyshev", dtype=object)
    if single is not None:
        q = math.exp(-1.0 / b)
        # smallest whole k with 2 q^{k+1} / (1 + q) ≤ α (k = 0 when q underflows: b ≪ 1)
        k = 0 if q == 0.0 else max(0, math.ceil(math.log(alpha * (1 + q) / 2.0) / math.log(q)
                                                - 1.0 - 1e-12))
        while k > 0 and 2.0 * q ** k / (1.0 + q) <= alpha:
            k -= 1
        one = single > 0
        h = np.where(one, single * k, h)
        method[one] = "discrete_laplace_single"
    return h, method.astype(str)
