"""Noise samplers of the privacy kernel, in two modes that never mix.

**Simulation** -- the source of randomness is an explicit, seeded
:class:`numpy.random.Generator`: reproducible bit for bit from its seed, fast,
what comparisons, bands, evaluations, tests and benchmarks use.  Its output is
never a release.

**Release** -- the source is :data:`OS_CSPRNG`: the operating system's
cryptographically secure generator behind the vetted samplers of the
``opendp`` package (``opendp.measurements.make_laplace`` /
``make_gaussian`` / ``make_noisy_max``).  No seed exists.  The float samplers
of opendp draw exactly from a discrete distribution on a fine grid and round
the input onto it, which closes the floating-point attack of Mironov
(CCS 2012) on textbook Laplace noise; the integer samplers draw the discrete
Laplace and discrete Gaussian exactly (Canonne, Kamath & Steinke, NeurIPS
2020).

Both modes draw from the same distributions:

======================  ===========================================  ============================
noise                   distribution                                  numpy path (simulation)
======================  ===========================================  ============================
``laplace``             Laplace(0, b)                                 ``Generator.laplace``
``laplace`` discrete    P(k) ∝ exp(−|k|/b), k ∈ ℤ                      difference of two geometrics
``gaussian``            N(0, σ²)                                      ``Generator.normal``
``gaussian`` discrete   P(k) ∝ exp(−k²/(2σ²)), k ∈ ℤ                   CKS 2020, Alg. 3 (rejection)
``noisy_max``           argmax(u + Exponential(scale))                ``Generator.exponential``
======================  ===========================================  ============================

``noisy_max`` with exponential noise is report-noisy-max, equal in
distribution to permute-and-flip (McKenna & Sheldon, NeurIPS 2020, Thm 2); it
is ε-DP for ``scale = 2Δu/ε`` like the exponential mechanism and never less
accurate.  Only :mod:`dpexplorer.privacy` calls these functions.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from types import ModuleType

    from opendp.mod import Measurement
    from typing_extensions import TypeIs

__all__ = ["CSPRNG", "OS_CSPRNG", "is_release", "check_source", "laplace", "gaussian",
           "noisy_max", "opendp_laplace_epsilon", "opendp_gaussian_rho",
           "opendp_noisy_max_epsilon", "discrete_laplace_variance", "discrete_gaussian_variance",
           "MAX_EXACT_INTEGER"]

#: Integers above this are not exact in float64; the discrete samplers refuse them.
MAX_EXACT_INTEGER = 2**53


class CSPRNG:
    """The release-mode source of randomness: the OS CSPRNG through opendp's samplers.

    It has no seed and no state a caller can see or set.  Use the module's
    :data:`OS_CSPRNG` instance.
    """

    _instance: CSPRNG | None = None

    def __new__(cls) -> CSPRNG:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "OS CSPRNG via opendp"

    def __reduce__(self) -> tuple[type[CSPRNG], tuple[()]]:  # pickles (e.g. to a worker) as the same singleton, never as state
        return (CSPRNG, ())


#: The one release-mode source of randomness.
OS_CSPRNG = CSPRNG()

#: A source of randomness: a seeded Generator (simulation) or :data:`OS_CSPRNG` (release).
RandomSource = np.random.Generator | CSPRNG


def is_release(source: object) -> TypeIs[CSPRNG]:
    """Whether ``source`` is the release-mode CSPRNG (else a simulation Generator)."""
    return isinstance(source, CSPRNG)


def check_source(source: object) -> None:
    """Raise TypeError unless ``source`` is a ``numpy.random.Generator`` or :data:`OS_CSPRNG`."""
    if not (isinstance(source, np.random.Generator) or is_release(source)):
        raise TypeError(
            "the source of randomness must be a seeded numpy.random.Generator (simulation) or "
            f"dpexplorer.privacy.OS_CSPRNG (release), got {type(source).__name__}")


# ------------------------------------------------------------------ opendp
@functools.cache
def _dp() -> ModuleType:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    return dp


@functools.lru_cache(maxsize=256)
def _laplace_measurement(scale: float, discrete: bool) -> Measurement:
    dp = _dp()
    if discrete:
        space = dp.vector_domain(dp.atom_domain(T="i64")), dp.l1_distance(T="i64")
    else:
        space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float)
    measurement: Measurement = dp.m.make_laplace(*space, scale=float(scale))
    return measurement


@functools.lru_cache(maxsize=256)
def _gaussian_measurement(sigma: float, discrete: bool) -> Measurement:
    dp = _dp()
    atom = dp.atom_domain(T="i64") if discrete else dp.atom_domain(T=float, nan=False)
    measurement: Measurement = dp.m.make_gaussian(dp.vector_domain(atom), dp.l2_distance(T=float),
                                                  scale=float(sigma))
    return measurement


@functools.lru_cache(maxsize=256)
def _noisy_max_measurement(scale: float) -> Measurement:
    dp = _dp()
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float)
    measurement: Measurement = dp.m.make_noisy_max(*space, dp.max_divergence(), scale=float(scale))
    return measurement


def opendp_laplace_epsilon(scale: float, sensitivity: float, discrete: bool = False) -> float:
    """ε that opendp's own privacy map gives Laplace(``scale``) noise at L1 sensitivity Δ₁.

    The kernel checks it against its own accounting (``Δ₁/b``) before drawing.
    For the discrete sampler Δ₁ is rounded up to a whole number (the answers
    are integers, so neighbours differ by whole numbers).

    Raises
    ------
    ValueError
        For the discrete sampler, if Δ₁ is above 2**53 (opendp's distance is an
        ``i64``, and the answers it perturbs must be exact in float64).
    """
    if discrete and not sensitivity <= MAX_EXACT_INTEGER:  # opendp's i64 distance; answers stay below 2**53
        raise ValueError(f"the discrete samplers need a whole-number L1 sensitivity below 2**53, got "
                         f"{sensitivity:.3g}; scale the strategy down (its error does not depend on its scale)")
    d_in = int(math.ceil(sensitivity - 1e-9)) if discrete else float(sensitivity)
    return float(_laplace_measurement(float(scale), discrete).map(d_in))


def opendp_gaussian_rho(sigma: float, sensitivity: float, discrete: bool = False) -> float:
    """ρ (zCDP) that opendp's privacy map gives N(0, σ²) noise at L2 sensitivity Δ₂."""
    return float(_gaussian_measurement(float(sigma), discrete).map(float(sensitivity)))


def opendp_noisy_max_epsilon(scale: float, sensitivity: float) -> float:
    """ε that opendp's map gives report-noisy-max (exponential noise) at utility sensitivity Δu."""
    return float(_noisy_max_measurement(float(scale)).map(float(sensitivity)))


# ---------------------------------------------------------------- helpers
def _as_integers(values: npt.ArrayLike) -> npt.NDArray[np.int64]:
    v = np.asarray(values, dtype=float)
    r: npt.NDArray[np.float64] = np.rint(v)
    if v.size and (np.max(np.abs(v - r)) > 1e-6 * max(1.0, float(np.max(np.abs(v))))
                   or float(np.max(np.abs(r))) > MAX_EXACT_INTEGER):
        raise ValueError("the discrete samplers need whole-number answers below 2**53")
    return r.astype(np.int64)


def _discrete_laplace_numpy(rng: np.random.Generator, scale: float,
                            size: int | tuple[int, ...]) -> npt.NDArray[np.int64]:
    p = -math.expm1(-1.0 / scale)  # 1 − e^{−1/b}
    return (rng.geometric(p, size=size) - rng.geometric(p, size=size)).astype(np.int64)


def _discrete_gaussian_numpy(rng: np.random.Generator, sigma: float,
                             size: int | tuple[int, ...]) -> npt.NDArray[np.int64]:
    """Canonne, Kamath & Steinke (2020), Alg. 3: rejection from a discrete Laplace with t = ⌊σ⌋ + 1."""
    # np.ndim(size) == 0: size is an int (mypy does not narrow through np.ndim)
    n = int(np.prod(size)) if np.ndim(size) else int(size)  # type: ignore[arg-type]
    out = np.empty(n, dtype=np.int64)
    t = math.floor(sigma) + 1
    s2 = sigma * sigma
    todo = np.arange(n)
    while todo.size:
        y = _discrete_laplace_numpy(rng, float(t), todo.size)
        accept = rng.random(todo.size) < np.exp(-((np.abs(y) - s2 / t) ** 2) / (2.0 * s2))
        out[todo[accept]] = y[accept]
        todo = todo[~accept]
    return out.reshape(size)


def discrete_laplace_variance(scale: float) -> float:
    """Variance ``2q/(1−q)²``, ``q = e^{−1/b}``, of the discrete Laplace (below ``2b²`` by about 1/6).

    ``1 − q`` is computed as ``−expm1(−1/b)``, exact for large ``b`` too.
    """
    p = -math.expm1(-1.0 / scale)  # 1 − q
    return 2.0 * (1.0 - p) / (p * p)


@functools.lru_cache(maxsize=1024)
def discrete_gaussian_variance(sigma: float) -> float:
    """Variance of the discrete Gaussian ``P(k) ∝ exp(−k²/(2σ²))`` (below σ², CKS 2020, Prop. 19).

    Summed over ``|k| ≤ 40σ + 40`` (the rest is below double precision).  For
    ``σ ≥ 10`` it is σ² to double precision (the gap is below
    ``σ²·4π²σ²/(e^{4π²σ²} − 1)``, CKS 2020 Prop. 19, i.e. 1e-1700 relative),
    and σ² is returned without a sum over ``80σ`` points.
    """
    if sigma >= 10.0:
        return float(sigma) * float(sigma)
    k = np.arange(0, int(40 * sigma) + 41, dtype=float)
    w = np.exp(-k * k / (2.0 * sigma * sigma))
    w[1:] *= 2.0
    return float((w * k * k).sum() / w.sum())


# ----------------------------------------------------------------- noise
def _add(kind: str, values: npt.ArrayLike, scale: float, source: RandomSource,
         discrete: bool) -> npt.NDArray[np.float64]:
    """``values`` plus i.i.d. noise of ``kind`` ("laplace"/"gaussian") at ``scale`` (b or σ)."""
    check_source(source)
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"the {kind} noise scale must be a positive finite number, got {scale!r}")
    v = np.asarray(values, dtype=float).ravel()
    measurement = _laplace_measurement if kind == "laplace" else _gaussian_measurement
    if discrete:
        iv = _as_integers(v)
        if is_release(source):
            return np.asarray(measurement(scale, True)(iv.tolist()), dtype=np.int64).astype(float)
        draw = _discrete_laplace_numpy if kind == "laplace" else _discrete_gaussian_numpy
        return (iv + draw(source, scale, iv.size)).astype(float)
    if is_release(source):
        return np.asarray(measurement(scale, False)(v.tolist()), dtype=float)
    noise = source.laplace if kind == "laplace" else source.normal
    return v + noise(0.0, scale, size=v.size)


def laplace(values: npt.ArrayLike, scale: float, source: RandomSource,
            discrete: bool = False) -> npt.NDArray[np.float64]:
    """``values`` plus i.i.d. Laplace(0, ``scale``) noise (discrete Laplace on integers if ``discrete``).

    Parameters
    ----------
    values : array_like, shape (k,)
        Exact answers (whole numbers if ``discrete``).
    scale : float
        Laplace scale b > 0 (``Δ₁/ε`` for an ε-DP measurement, Dwork et al. 2006).
    source : numpy.random.Generator or CSPRNG
        Simulation or release randomness.
    discrete : bool
        Discrete Laplace on ℤ (the geometric mechanism, Ghosh, Roughgarden &
        Sundararajan 2009) instead of the continuous one.

    Returns
    -------
    ndarray, shape (k,)
        Noisy answers (float64; whole numbers if ``discrete``).

    Raises
    ------
    ValueError
        If ``scale`` is not positive, or ``discrete`` answers are not whole numbers.
    """
    return _add("laplace", values, scale, source, discrete)


def gaussian(values: npt.ArrayLike, sigma: float, source: RandomSource,
             discrete: bool = False) -> npt.NDArray[np.float64]:
    """``values`` plus i.i.d. N(0, σ²) noise (discrete Gaussian on integers if ``discrete``).

    Parameters
    ----------
    values : array_like, shape (k,)
        Exact answers (whole numbers if ``discrete``).
    sigma : float
        σ > 0.
    source : numpy.random.Generator or CSPRNG
    discrete : bool
        Discrete Gaussian on ℤ (Canonne, Kamath & Steinke 2020).

    Returns
    -------
    ndarray, shape (k,)

    Raises
    ------
    ValueError
        If ``sigma`` is not positive, or ``discrete`` answers are not whole numbers.
    """
    return _add("gaussian", values, sigma, source, discrete)


def noisy_max(scores: npt.ArrayLike, scale: float, source: RandomSource) -> int:
    """Index of the largest ``score + Exponential(scale)`` (report-noisy-max, permute-and-flip).

    ε-DP with ``scale = 2Δu/ε`` for utilities of sensitivity Δu (McKenna &
    Sheldon 2020, Thm 2 and Sec. 4; opendp ``make_noisy_max`` over
    ``MaxDivergence``).

    Raises
    ------
    ValueError
        If ``scale`` is not positive or the scores are empty or not finite.
    """
    check_source(source)
    u = np.asarray(scores, dtype=float).ravel()
    if u.size == 0 or not np.all(np.isfinite(u)):
        raise ValueError("noisy max needs a non-empty vector of finite scores")
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"the noisy-max scale must be a positive finite number, got {scale!r}")
    if is_release(source):
        return int(_noisy_max_measurement(scale)(u.tolist()))
    return int(np.argmax(u + source.exponential(scale, size=u.size)))
