"""Buffered Linear Toeplitz (BLT) factorisations of the running total: near-optimal noise in O(d) memory.

A BLT with ``d`` buffers is the lower-triangular Toeplitz matrix ``C: (T, T)``
whose first column is

    c_0 = 1,    c_k = Σ_{i<d} ω_i θ_i^{k−1}   (k ≥ 1),

with decays ``θ`` (real, ``|θ_i| ≤ 1``) and output scales ``ω`` (Dvijotham,
McMahan, Pillutla, Steinke & Thakurta, "Efficient and near-optimal noise
generation for streaming differential privacy", FOCS 2024, arXiv:2404.16706,
"DMPST" below: their BLT definition; the same parametrisation as ``BufferedToeplitz`` of the public
jax_privacy code: ``buf_decay = θ``, ``output_scale = ω``).  As a strategy of
the matrix mechanism (measure ``C x + σ Δ₂(C) z``, publish ``B y`` with ``B =
L C⁻¹``) it gives a streaming release of the running total whose noise needs
``d`` numbers of memory, whatever ``T``.

Formulas used here (each checked in ``tests/test_streaming_blt.py``):

* **Generating function.**  ``C(x) = 1 + Σ_i ω_i x / (1 − θ_i x) = p(x) / q(x)``
  with ``q(x) = Π_i (1 − θ_i x)`` and ``p(0) = 1``, ``deg p ≤ d``.  Its inverse
  ``q/p`` is again a BLT of degree ``d`` whose decays ``θ̂`` are the
  reciprocals of the zeros of ``p`` (DMPST 2024, Sec. 5 and Lemma 5.2; McMahan & Pillutla,
  "An inversion theorem for Buffered Linear Toeplitz (BLT) matrices and
  applications to streaming differential privacy", arXiv:2504.21413, 2025,
  Thm 1).  With ``y = 1/x`` the zeros solve ``1 + Σ_i ω_i / (y − θ_i) = 0``,
  the secular equation of the rank-one update ``Θ − 1 ωᵀ``, so ``θ̂ =
  eig(Θ − 1 ωᵀ)`` (``Θ = diag(θ)``): the state matrix of the recurrence that
  applies ``C⁻¹`` (below).
* **Scales from the two sets of decays** (DMPST 2024, Lemma 5.2):
  ``ω_i = Π_j (θ_i − θ̂_j) / Π_{k≠i} (θ_i − θ_k)`` and, by symmetry,
  ``ω̂_j = Π_i (θ̂_j − θ_i) / Π_{l≠j} (θ̂_j − θ̂_l)``: the partial fractions
  of ``p/q`` and ``q/p`` (both need distinct decays).
* **Interlacing** (a short proof from the secular equation, in line with
  McMahan & Pillutla 2025, Thm 1): if ``θ ∈ (0, 1)`` are distinct, ``ω > 0``
  and ``Σ_i ω_i / θ_i < 1``, then ``f(y) = 1 + Σ ω_i/(y − θ_i)`` decreases from
  ``+∞`` to ``−∞`` between consecutive ``θ``'s and from ``1`` to ``−∞`` on
  ``(−∞, θ_min)`` with ``f(0) = 1 − Σ ω_i/θ_i > 0``: the ``θ̂`` are real,
  ``0 < θ̂_1 < θ_1 < θ̂_2 < … < θ̂_d < θ_d < 1``, and counting signs in Lemma
  5.2 gives ``ω̂ < 0``.  Conversely interlaced decays give ``ω > 0``.
* **Streaming products** (McMahan, Xu & Zhang, "A hassle-free algorithm for
  private learning in practice: don't use tree aggregation, use BLTs", EMNLP
  2024 industry track, arXiv:2408.08868, Alg. 2-3): with buffers ``s ∈ R^d``
  starting at 0, ``y_t = x_t + ωᵀ s``, ``s ← Θ s + x_t`` computes ``y = C x``,
  and ``x_t = y_t − ωᵀ s``, ``s ← Θ s + x_t`` computes ``x = C⁻¹ y``.
  :class:`StreamingNoise` uses the second one.
* **Sensitivity** (DMPST 2024, Lemma 5.3; column ``s`` of ``C`` holds
  ``c_0..c_{T−1−s}``): ``Δ₂(C)² = Σ_{k<T} c_k² = 1 + Σ_{i,j} ω_i ω_j (1 −
  (θ_iθ_j)^{T−1}) / (1 − θ_iθ_j)``; ``Δ₁(C) = Σ_k |c_k|``.
* **Error on the running total** (DMPST 2024, Lemma 5.4; the matrix mechanism's
  per-query variance, ``dpexplorer/docs/matrix_mechanism.md``): with ``b =
  cumsum(ĉ)`` the first column of ``B = L C⁻¹``, answer ``t`` has variance
  ``σ² Δ₂(C)² Σ_{j≤t} b_j²`` -- increasing in ``t``, so the max error is the
  last answer's, ``σ² Δ₂(C)² Σ_{j<T} b_j²``, and the total squared error is
  ``σ² Δ₂(C)² Σ_j (T − j) b_j²``.  These are computed by the O(T log T) hooks
  of :class:`~dpexplorer.queries.toeplitz.LowerToeplitz`.

:func:`blt` optimises the ``2d`` decays ``(θ, θ̂)`` (the "pair of decays"
parametrisation: DMPST 2024, Lemma 5.2; the default of jax_privacy's BLT
optimiser) with scipy's L-BFGS-B, the objective evaluated in ``O(T d)`` by
first-order recursive filters (``C = Π_i (1 − θ̂_i x)/(1 − θ_i x)``), its
gradient in closed form.  The objective is not convex: several interlaced
starting points are run and the best kept.

Only the Gaussian (L2) mechanism is registered: under L1 sensitivity the
optimum degenerates to the identity strategy (``θ = θ̂``, ``ω = 0``; measured
at T = 64 and 4096 with 3 buffers), so ``blt`` refuses Laplace noise.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import scipy.optimize
import scipy.signal

from ..core import optimization, registry
from ..privacy.noise import NoiseModel
from ..queries.matrix import Matrix, Prefix, _check_cells
from ..queries.toeplitz import LowerToeplitz, StepFilter
from . import workload

__all__ = ["BLT", "blt", "blt_column", "blt_inverse_parameters", "blt_scales", "StreamingNoise",
           "MAX_BUFFERS"]

#: Most buffers :func:`blt` optimises (beyond ~10 the decays crowd near 1 and the
#: partial fractions of Lemma 5.2 lose precision; 3-5 buffers are near-optimal).
MAX_BUFFERS = 10

#: Smallest ``1 − θ`` the optimiser lets a decay reach (θ ≤ 1 − 1e-12).
_MIN_GAP_TO_ONE = 1e-12
#: Decays closer than this cannot be represented as a BLT (Lemma 5.2 divides by their gaps).
_MIN_DECAY_GAP = 1e-10


# ----------------------------------------------------------------------------- parameters
def _parameters(theta, omega) -> tuple[np.ndarray, np.ndarray]:
    """``(θ, ω)`` as equal-length finite float arrays with ``|θ| ≤ 1``, else ValueError."""
    th = np.atleast_1d(np.asarray(theta, dtype=float))
    om = np.atleast_1d(np.asarray(omega, dtype=float))
    if th.ndim != 1 or om.ndim != 1 or th.size == 0:
        raise ValueError(f"theta and omega must be non-empty 1D arrays (one entry per buffer), got shapes "
                         f"{np.shape(theta)} and {np.shape(omega)}")
    if th.shape != om.shape:
        raise ValueError(f"theta and omega need one entry per buffer each, got {th.size} decays and "
                         f"{om.size} scales")
    if not (np.isfinite(th).all() and np.isfinite(om).all()):
        raise ValueError("theta and omega must be finite (no NaN or inf)")
    if np.any(np.abs(th) > 1.0):
        raise ValueError(f"the decays theta must lie in [-1, 1] (a larger one makes the coefficients grow "
                         f"without bound), got {th.tolist()}")
    return th, om


def blt_column(theta, omega, T: int) -> np.ndarray:
    """First column ``c`` of the ``T × T`` BLT: ``c_0 = 1``, ``c_k = Σ_i ω_i θ_i^{k−1}``.

    Source: DMPST, FOCS 2024 (their BLT definition).  ``O(T d)``
    time, ``O(T)`` memory.

    Parameters
    ----------
    theta, omega : array, shape (d,)
        Decays (``|θ_i| ≤ 1``) and output scales, one per buffer.
    T : int
        Number of steps.

    Returns
    -------
    ndarray, shape (T,)

    Raises
    ------
    ValueError
        If ``theta``/``omega`` are not finite equal-length non-empty 1D arrays,
        a decay is outside ``[-1, 1]``, or ``T`` is not a positive whole number
        (or is above the ``cells`` limit).
    """
    th, om = _parameters(theta, omega)
    T = _check_cells(T, "T (the number of steps)")
    c = np.zeros(T)
    c[0] = 1.0
    k = np.arange(T - 1, dtype=float)
    for t_i, w_i in zip(th, om, strict=True):
        c[1:] += w_i * np.power(t_i, k)
    return c


def blt_scales(theta, theta_hat) -> tuple[np.ndarray, np.ndarray]:
    """Output scales ``(ω, ω̂)`` of the BLT ``C`` with decays ``θ`` and of ``C⁻¹`` with decays ``θ̂``.

    ``ω_i = Π_j (θ_i − θ̂_j) / Π_{k≠i} (θ_i − θ_k)`` and ``ω̂_j = Π_i (θ̂_j −
    θ_i) / Π_{l≠j} (θ̂_j − θ̂_l)``: the partial fractions of ``p/q`` and
    ``q/p`` with ``p = Π(1 − θ̂ x)``, ``q = Π(1 − θ x)`` (DMPST, FOCS 2024,
    Lemma 5.2).  Any two sets of ``d`` distinct decays define such a pair,
    and ``C C⁻¹ = I``.

    Parameters
    ----------
    theta, theta_hat : array, shape (d,)
        Decays of ``C`` and of ``C⁻¹`` (each set distinct, in ``[-1, 1]``).

    Returns
    -------
    omega, omega_hat : ndarray, shape (d,)

    Raises
    ------
    ValueError
        If the arrays are not finite, of equal length, within ``[-1, 1]``, or a
        set holds two decays closer than 1e-10 (no BLT has repeated decays:
        its coefficients would carry ``k θ^k`` terms).
    """
    th, thh = _parameters(theta, theta_hat)
    for name, v in (("theta", th), ("theta_hat", thh)):
        if v.size > 1 and np.min(np.abs(v[:, None] - v[None, :]) + np.eye(v.size)) < _MIN_DECAY_GAP:
            raise ValueError(f"{name} holds two decays closer than {_MIN_DECAY_GAP:g} ({v.tolist()}): a BLT "
                             f"needs distinct decays")

    def scales(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        num = np.prod(a[:, None] - b[None, :], axis=1)
        gaps = a[:, None] - a[None, :]
        np.fill_diagonal(gaps, 1.0)
        return num / np.prod(gaps, axis=1)

    return scales(th, thh), scales(thh, th)


def blt_inverse_parameters(theta, omega, imag_tol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    """Decays and scales ``(θ̂, ω̂)`` of the BLT ``C⁻¹``, the inverse of the BLT ``(θ, ω)``.

    ``θ̂ = eig(Θ − 1 ωᵀ)`` (the reciprocals of the zeros of the numerator of
    ``C(x)``; symmetric eigenproblem ``Θ − √ω √ωᵀ`` when ``ω > 0``), ``ω̂`` by
    DMPST, FOCS 2024, Lemma 5.2 (:func:`blt_scales`); the inverse of a BLT is a
    BLT of the same degree (McMahan & Pillutla, arXiv:2504.21413, 2025, Thm 1).
    If ``θ ∈ (0, 1)`` are distinct, ``ω > 0`` and ``Σ ω_i/θ_i < 1`` then ``θ̂ ∈
    (0, 1)`` interlace with ``θ`` and ``ω̂ < 0`` (module docstring).

    Parameters
    ----------
    theta, omega : array, shape (d,)
    imag_tol : float
        Largest imaginary part (relative to ``max(1, |θ̂|)``) treated as rounding.

    Returns
    -------
    theta_hat, omega_hat : ndarray, shape (d,)
        Decays sorted in decreasing order, with their scales.

    Raises
    ------
    ValueError
        If the parameters are invalid, if the inverse's decays are complex (an
        oscillating term: ``C⁻¹`` is then not a real BLT) or outside ``[-1, 1]``,
        or two of them coincide.
    """
    th, om = _parameters(theta, omega)
    if np.all(om > 0):
        r = np.sqrt(om)
        lam = np.linalg.eigvalsh(np.diag(th) - np.outer(r, r))
    else:
        ev = np.linalg.eigvals(np.diag(th) - np.outer(np.ones_like(om), om))
        if np.any(np.abs(ev.imag) > imag_tol * np.maximum(1.0, np.abs(ev))):
            raise ValueError(f"the inverse of the BLT with theta={th.tolist()}, omega={om.tolist()} has complex "
                             f"decays {ev.tolist()}: it is not a real BLT (choose omega > 0 with "
                             f"sum(omega/theta) < 1 for a real inverse)")
        lam = ev.real
    lam = np.sort(lam)[::-1]
    if np.any(np.abs(lam) > 1.0 + 1e-12):
        raise ValueError(f"the inverse of this BLT has decays {lam.tolist()} outside [-1, 1]: its coefficients "
                         f"grow without bound")
    lam = np.clip(lam, -1.0, 1.0)  # only rounding beyond ±1 (checked just above) is clipped
    _, omega_hat = blt_scales(th, lam)
    return lam, omega_hat


# ------------------------------------------------------------------------------- strategy
class BLT(LowerToeplitz):
    """A Buffered Linear Toeplitz strategy ``C: (T, T)`` with ``d`` buffers.

    First column ``c_0 = 1``, ``c_k = Σ_i ω_i θ_i^{k−1}`` (DMPST, FOCS 2024,
    their BLT definition).  Products, sensitivity and the analytic error on the prefix and
    Identity workloads of length ``T`` come from
    :class:`~dpexplorer.queries.toeplitz.LowerToeplitz` (O(T log T), no
    ``T × T`` matrix); :meth:`inverse` is the BLT of ``C⁻¹``.

    Parameters
    ----------
    theta, omega : array, shape (d,)
        Decays (``|θ_i| ≤ 1``) and output scales.
    T : int
        Number of steps.
    name : str

    Attributes
    ----------
    theta, omega : ndarray, shape (d,)
        Read-only copies of the parameters.

    Raises
    ------
    ValueError
        As :func:`blt_column`.
    """

    def __init__(self, theta, omega, T: int, name: str = "blt"):
        th, om = _parameters(theta, omega)
        super().__init__(blt_column(th, om, T), name=name)
        self.theta, self.omega = th.copy(), om.copy()
        self.theta.setflags(write=False)
        self.omega.setflags(write=False)

    @property
    def buffers(self) -> int:
        """``d``, the number of buffers (memory of the streaming noise, in numbers per coordinate)."""
        return int(self.theta.size)

    def inverse_parameters(self) -> tuple[np.ndarray, np.ndarray]:
        """``(θ̂, ω̂)`` of ``C⁻¹`` (:func:`blt_inverse_parameters`; ValueError if not a real BLT)."""
        return blt_inverse_parameters(self.theta, self.omega)

    def inverse(self) -> BLT:
        """``C⁻¹`` as a BLT with the parameters of :meth:`inverse_parameters`, shape ``(T, T)``."""
        theta_hat, omega_hat = self.inverse_parameters()
        return BLT(theta_hat, omega_hat, self.n, name=f"{self.name}⁻¹")

    def noise_filter(self, W: Matrix) -> StepFilter | None:
        """The noise of a stream release step by step (:class:`dpexplorer.privacy.PrivateStream`).

        For the running total over this BLT's ``T`` steps: a unit-scale
        :class:`StreamingNoise` (the kernel draws each step's ``z_t`` at the
        measurement's scale); None for any other workload (the noise is then
        drawn whole and decoded).
        """
        return StreamingNoise(self, 1.0) if isinstance(W, Prefix) and W.shape == self.shape else None

    def streaming_noise(self, scale: float = 1.0) -> StreamingNoise:
        """A :class:`StreamingNoise` for a release with this strategy (measurement noise ``scale · z``)."""
        return StreamingNoise(self, scale)

    def __repr__(self) -> str:
        return f"<BLT {self.name!r} T={self.n} buffers={self.buffers}>"


class StreamingNoise:
    """The noise a BLT release adds to the running total, one step at a time, in ``O(d)`` memory.

    The release measures ``y = C x + scale · z`` (``z`` i.i.d. standard normal,
    ``scale = σ·Δ₂(C)``) and publishes ``B y = L x + scale · L C⁻¹ z``.  Step
    ``t`` of this generator returns ``scale · (L C⁻¹ z)_t`` from ``z_t`` alone:
    ``u_t = z_t − ωᵀ s``, ``s ← Θ s + u_t`` gives ``u = C⁻¹ z`` (McMahan, Xu &
    Zhang, EMNLP 2024, arXiv:2408.08868, Alg. 3), and a running sum of ``u``
    gives ``L u``.  Memory: the ``d`` buffers and the running sum (each of
    ``z``'s shape), whatever ``T``.

    Parameters
    ----------
    strategy : BLT
        The strategy ``C`` of the release.
    scale : float
        Standard deviation of the measurement noise (``σ·Δ₂(C)``; 1 for unit noise).

    Attributes
    ----------
    t : int
        Steps taken so far.

    Raises
    ------
    TypeError
        If ``strategy`` is not a :class:`BLT`.
    ValueError
        If ``scale`` is not a finite number ``> 0``.
    """

    def __init__(self, strategy: BLT, scale: float = 1.0):
        if not isinstance(strategy, BLT):
            raise TypeError(f"StreamingNoise needs a BLT strategy, got {type(strategy).__name__}")
        try:
            scale = float(scale)
        except (TypeError, ValueError):
            raise ValueError(f"scale must be a positive number, got {scale!r}") from None
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"scale must be a finite number > 0, got {scale!r}")
        self._theta = np.asarray(strategy.theta, dtype=float)
        self._omega = np.asarray(strategy.omega, dtype=float)
        self.steps = strategy.n
        self.scale = scale
        self.t = 0
        self._buffers: np.ndarray | None = None
        self._total: np.ndarray | None = None

    def step(self, z) -> float | np.ndarray:
        """The noise of the running total at the next step, from this step's standard normal(s) ``z``.

        Parameters
        ----------
        z : float or array
            This step's i.i.d. standard normal draw(s) (any fixed shape: one per
            coordinate of a vector-valued stream).

        Returns
        -------
        float or ndarray
            ``scale · (L C⁻¹ z)_t``, ``z``'s shape, in counts.

        Raises
        ------
        ValueError
            If ``z`` is not finite, changes shape between steps, or the
            strategy's ``T`` steps have all been taken (its sensitivity, and
            so the privacy guarantee, holds for ``T`` steps only).
        """
        if self.t >= self.steps:
            raise ValueError(f"the BLT was built for T = {self.steps} steps and all have been taken; its "
                             f"sensitivity (and the privacy guarantee) covers those only -- build one for "
                             f"more steps")
        z = np.asarray(z, dtype=float)
        if not np.isfinite(z).all():
            raise ValueError("z must be finite standard normal draws (no NaN or inf)")
        if self._buffers is None:
            self._buffers = np.zeros((self._theta.size,) + z.shape)
            self._total = np.zeros(z.shape)
        elif z.shape != self._total.shape:  # type: ignore[union-attr]
            raise ValueError(f"z changed shape from {self._total.shape} to {z.shape} "  # type: ignore[union-attr]
                             f"between steps")
        expand = (slice(None),) + (None,) * z.ndim
        u = z - (self._omega[expand] * self._buffers).sum(axis=0)
        self._buffers = self._theta[expand] * self._buffers + u
        self._total = self._total + u
        self.t += 1
        out = self.scale * self._total
        return float(out) if out.ndim == 0 else out

    def run(self, normals: Iterable) -> np.ndarray:
        """:meth:`step` over every draw of ``normals``; the noises stacked, shape ``(steps, ...)``."""
        return np.array([self.step(z) for z in normals])


# ----------------------------------------------------------------------------- optimiser
def _cascade(num: np.ndarray, den: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``x`` through ``Π_i (1 − num_i q)/(1 − den_i q)`` (``q`` the delay): first-order sections."""
    for a, b in zip(num, den, strict=True):
        x = scipy.signal.lfilter([1.0, -a], [1.0, -b], x)
    return x


def _weights(T: int, objective: str) -> np.ndarray:
    """Weights ``w_t`` of ``Σ_t w_t b_t²``: 1 (max: the last answer's variance) or ``(T − t)/T`` (mean)."""
    if objective == "max":
        return np.ones(T)
    return (T - np.arange(T, dtype=float)) / T


def _log_criterion(s: np.ndarray, T: int, d: int, weights: np.ndarray, norm: int):
    """``log(Δ_p(C)² · Σ_t w_t b_t²)`` and its gradient in ``s = log(1 − (θ, θ̂))``.

    ``C = Π_i (1 − θ̂_i x)/(1 − θ_i x)`` and ``C⁻¹ = Π_i (1 − θ_i x)/(1 − θ̂_i
    x)`` by recursive filters (``O(T d)``), ``b = cumsum(ĉ)``.  Derivatives:
    ``∂C/∂θ_i = C·x/(1 − θ_i x)``, ``∂C/∂θ̂_i = −C·x/(1 − θ̂_i x)`` and the
    opposite signs for ``C⁻¹``; ``∂/∂b`` of ``Σ w b²`` is pulled back through the
    cumulative sum by a reverse cumulative sum.  Dot products are elementwise
    sums (no BLAS call: a threaded BLAS dot of 2**16 terms took 8 ms on the
    shared 2-core machine, 35 times the plain sum).
    """
    gap = np.exp(s)
    decay = -np.expm1(s)
    th, thh = decay[:d], decay[d:]
    impulse = np.zeros(T)
    impulse[0] = 1.0
    c = _cascade(thh, th, impulse)
    ch = _cascade(th, thh, impulse)
    b = np.cumsum(ch)
    if norm == 2:
        S = float((c * c).sum())
        dS = 2.0 * c / S  # ∂ log Δ₂² / ∂c
    else:
        a = float(np.abs(c).sum())
        S = a * a
        dS = 2.0 * np.sign(c) / a  # ∂ log Δ₁² / ∂c (c_k ≠ 0 almost everywhere)
    wb = weights * b
    E = float((wb * b).sum())
    dE = 2.0 * np.cumsum(wb[::-1])[::-1] / E  # ∂ log Σ w b² / ∂ĉ
    both = np.vstack([c, ch])
    grad = np.empty(2 * d)
    for k in range(2 * d):
        h = scipy.signal.lfilter([0.0, 1.0], [1.0, -decay[k]], both, axis=1)
        sign = 1.0 if k < d else -1.0
        grad[k] = sign * float((dS * h[0]).sum()) - sign * float((dE * h[1]).sum())
    return math.log(S) + math.log(E), grad * (-gap)


def _starting_points(T: int, d: int, count: int) -> list[np.ndarray]:
    """``count`` interlaced starts ``θ_1 > θ̂_1 > θ_2 > … > θ̂_d`` in ``s = log(1 − decay)``.

    The ``2d`` gaps ``1 − decay`` are log-spaced from ``lo/T'`` to ``hi`` (``T' =
    max(T, 64)``), ``lo`` in [0.5, 8] and ``hi`` in [0.3, 0.7] across starts:
    decays near 1 reach back ~T steps, the others shape the first coefficients.
    """
    T_eff = max(T, 64)
    los = np.geomspace(0.5, 8.0, count) if count > 1 else np.array([2.0])
    his = np.linspace(0.7, 0.3, count) if count > 1 else np.array([0.5])
    out = []
    for lo, hi in zip(los, his, strict=True):
        u = np.geomspace(lo / T_eff, hi, 2 * d)
        x = np.log(u)
        out.append(np.concatenate([x[0::2], x[1::2]]))
    return out


def _criterion(A: LowerToeplitz, objective: str, norm: int) -> float:
    """Unit-noise criterion of a strategy on the prefix workload, from the O(T log T) hooks.

    ``"max"``: ``Δ_p(C)² · max_t Σ_{j≤t} b_j²``; ``"sum"``: ``Δ_p(C)² · Σ_j (T −
    j) b_j² / T`` (the mean variance: unit TSE / T).
    """
    P = Prefix(A.n)
    sens2 = A.sensitivity(norm) ** 2
    if objective == "max":
        return sens2 * float(np.max(A.workload_row_variances(P)))
    return sens2 * A.workload_trace(P) / A.n


def _check_choice(value, allowed: tuple, what: str):
    if isinstance(value, bool) or value not in allowed:
        raise ValueError(f"{what} must be one of {list(allowed)}, got {value!r}")
    return value


def blt(T: int, buffers: int = 3, objective: str = "max", noise_norm: int = 2, *,
        starts: int = 3, maxiter: int = 1000) -> BLT:
    """The BLT with ``buffers`` buffers minimising the max (or mean) error of the running total.

    Minimises ``Δ_p(C)² · Σ_t w_t b_t²`` (``b = cumsum`` of the first column of
    ``C⁻¹``; ``w = 1`` for ``"max"``: the variance of the last, largest, answer;
    ``w_t = (T − t)/T`` for ``"sum"``: the mean variance) over the ``2d`` decays
    ``(θ, θ̂)`` of ``C`` and ``C⁻¹`` ("Opt-BLT" of DMPST, FOCS 2024, with
    the scales of Lemma 5.2; sensitivity Lemma 5.3, error Lemma 5.4), with
    ``scipy.optimize.minimize(method="L-BFGS-B")`` on ``s = log(1 − decay)``
    bounded to ``[log 1e-12, 0]``, i.e. every decay in ``[0, 1 − 10⁻¹²]``
    (decays near 1 then move as easily as the others).  The objective and
    its exact gradient cost ``O(T d)``.  It is not convex: ``starts``
    interlaced starting points are run and the best result kept.  The result
    is checked: its column from ``(θ, ω)`` matches the optimised filter, and its
    reported errors come from :class:`~dpexplorer.queries.toeplitz.LowerToeplitz`.

    Under ``noise_norm=1`` (Laplace) the optimum degenerates towards the
    identity strategy (``θ̂ ≈ θ``): a BLT is a Gaussian-noise mechanism.

    Parameters
    ----------
    T : int
        Number of steps.
    buffers : int
        ``d``, between 1 and :data:`MAX_BUFFERS`.
    objective : {"max", "sum"}
        Largest per-step variance, or the total (equivalently mean) per-step variance: the
        RMSE; the names of :data:`dpexplorer.compare.OBJECTIVES`, which the comparison passes.
    noise_norm : {1, 2}
        Sensitivity norm (2: Gaussian noise).
    starts : int
        Starting points (>= 1).
    maxiter : int
        L-BFGS-B iterations per start (>= 1).

    Returns
    -------
    BLT, shape (T, T)
        With ``A.optimization`` (:class:`~dpexplorer.core.optimization.OptimizationResult`):
        ``objective`` its unit-noise TSE on the prefix workload (``Δ_p(C)² ·
        Σ_j (T − j) b_j²``), ``trace`` the optimised criterion (unit-noise max
        or mean variance, ``info["criterion"]``) per iteration of the best
        start, ``restarts`` every start's final criterion, ``info`` the
        parameters ``theta``, ``omega``, ``theta_inverse``, ``omega_inverse``
        and ``max_variance``/``mean_variance`` (unit noise).

    Raises
    ------
    ValueError
        For a bad ``T``, ``buffers``, ``objective``, ``noise_norm``, ``starts`` or ``maxiter``.
    RuntimeError
        If no start ends at a BLT with distinct decays (none did in testing).
    """
    T = _check_cells(T, "T (the number of steps)")
    if isinstance(buffers, bool) or not isinstance(buffers, int | np.integer) or not 1 <= buffers <= MAX_BUFFERS:
        raise ValueError(f"buffers must be a whole number from 1 to {MAX_BUFFERS}, got {buffers!r}")
    _check_choice(objective, ("max", "sum"), "objective")
    _check_choice(noise_norm, (1, 2), "noise_norm")
    for value, what in ((starts, "starts"), (maxiter, "maxiter")):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise ValueError(f"{what} must be a whole number >= 1, got {value!r}")
    d, norm = int(buffers), int(noise_norm)
    t0 = time.perf_counter()
    weights = _weights(T, objective)
    bounds = [(math.log(_MIN_GAP_TO_ONE), 0.0)] * (2 * d)
    criterion = "max_variance" if objective == "max" else "mean_variance"
    best: tuple[BLT, float, list[float], Any] | None = None  # (strategy, criterion, trace, OptimizeResult)
    finals: list[float] = []
    for r, x0 in enumerate(_starting_points(T, d, int(starts))):
        stage = f"blt ({d} buffers): start {r + 1}/{starts}"
        trace: list[float] = []
        callback = _progress(stage, trace, int(maxiter))
        optimization.report(stage, 0, int(maxiter))
        res = scipy.optimize.minimize(
            _log_criterion, x0, args=(T, d, weights, norm), jac=True, method="L-BFGS-B",
            bounds=bounds, callback=callback,
            options={"maxiter": int(maxiter), "ftol": 1e-13, "gtol": 1e-10})
        candidate = _candidate(res.x, T, d, objective, norm)
        finals.append(math.nan if candidate is None else candidate[1])
        if candidate is not None and (best is None or candidate[1] < best[1]):
            best = (candidate[0], candidate[1], trace, res)
    if best is None:
        raise RuntimeError(f"blt: no start of the optimiser ended at a BLT with distinct decays (T = {T}, "
                           f"{d} buffers); try another number of buffers")
    A, best_value, trace, res = best
    inv_theta = _decays(res.x, d)[1]
    omega_hat = blt_scales(A.theta, inv_theta)[1]
    P = Prefix(T)
    sens2 = A.sensitivity(norm) ** 2
    unit_tse = sens2 * A.workload_trace(P)
    info = {
        "T": T, "buffers": d, "objective": objective, "norm": norm, "criterion": criterion,
        "theta": A.theta.tolist(), "omega": A.omega.tolist(),
        "theta_inverse": inv_theta.tolist(), "omega_inverse": omega_hat.tolist(),
        "max_variance": sens2 * float(np.max(A.workload_row_variances(P))),
        "mean_variance": unit_tse / T,
        "iterations": int(res.nit), "message": str(res.message),
    }
    optimization.report(f"blt ({d} buffers)", int(starts), int(starts), best_value)
    result = optimization.OptimizationResult(
        strategy=A, objective=float(unit_tse), trace=np.asarray(trace, dtype=float),
        restarts=np.asarray(finals, dtype=float), seconds=time.perf_counter() - t0, seed=None,
        method="blt", info=info)
    return optimization.attach(result)  # type: ignore[return-value]


def _progress(stage: str, trace: list[float], maxiter: int):
    """L-BFGS-B callback: appends the criterion to ``trace`` and reports it (a raising report cancels)."""

    def callback(intermediate_result):  # scipy passes the OptimizeResult to a parameter of this name
        value = math.exp(float(intermediate_result.fun))
        trace.append(value)
        optimization.report(stage, len(trace), maxiter, value)

    return callback


def _decays(s: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    decay = -np.expm1(np.asarray(s, dtype=float))
    return decay[:d], decay[d:]


def _candidate(s: np.ndarray, T: int, d: int, objective: str, norm: int) -> tuple[BLT, float] | None:
    """The BLT at the optimiser's point and its criterion, or None if it is not a faithful BLT.

    ``ω`` from Lemma 5.2 needs distinct decays; the column from ``(θ, ω)`` must
    match the filter the optimiser evaluated (to 1e-8 of its largest entry),
    else the partial fractions lost the precision to represent it.
    """
    th, thh = _decays(s, d)
    try:
        omega, _ = blt_scales(th, thh)
    except ValueError:
        return None
    if not np.isfinite(omega).all():
        return None
    A = BLT(th, omega, T)
    impulse = np.zeros(T)
    impulse[0] = 1.0
    c = _cascade(thh, th, impulse)
    if np.max(np.abs(A.column - c)) > 1e-8 * max(1.0, float(np.max(np.abs(c)))):
        return None
    return A, _criterion(A, objective, norm)


# ------------------------------------------------------------------------------ registry
@functools.lru_cache(maxsize=32)
def _optimised(T: int, buffers: int, objective: str) -> BLT:
    return blt(T, buffers, objective, 2)


def _fresh(A: BLT) -> BLT:
    """A shallow copy of a cached strategy with a copy of its optimisation record (renaming is safe)."""
    result = A.optimization
    B = copy.copy(A)
    return optimization.attach(dataclasses.replace(result, strategy=B, info=dict(result.info)))  # type: ignore[return-value]


def _scope(W: Matrix, noise: NoiseModel) -> None:
    """:func:`workload.scope`, and Gaussian noise only (a BLT is optimised for L2 sensitivity).

    Raises
    ------
    NotApplicableError
        If ``W`` is not a causal workload, or ``noise`` is not Gaussian (L2).
    """
    workload.scope(W, noise)
    if noise.norm != 2:
        raise registry.NotApplicableError(
            "BLT is a Gaussian-noise (L2 sensitivity) mechanism: under Laplace noise the best BLT is the "
            "identity strategy; use Gaussian noise, or a tree for Laplace")


def _build_blt(W: Matrix, noise: NoiseModel, buffers: int = 3, objective: str = "max") -> Matrix:
    T = workload.steps(W)
    if isinstance(buffers, bool) or not isinstance(buffers, int | np.integer):
        raise ValueError(f"buffers must be a whole number from 1 to {MAX_BUFFERS}, got {buffers!r}")
    _check_choice(objective, ("max", "sum"), "objective")
    hit = _optimised.cache_info().hits
    A = _fresh(_optimised(T, int(buffers), objective))
    if _optimised.cache_info().hits > hit:  # built earlier: say so to whoever follows the progress
        info = A.optimization.info
        optimization.report(f"blt ({buffers} buffers, cached)", 1, 1, info[info["criterion"]])
    return A


registry.register(registry.Mechanism(
    "blt", "BLT", _build_blt,
    "Buffered Linear Toeplitz factorisation L = (L C⁻¹)·C with d buffers, optimised for the running "
    "total: near the square root's error, noise generated step by step in O(d) memory (online).",
    "Dvijotham, McMahan, Pillutla, Steinke & Thakurta, FOCS 2024 (Lemmas 5.2-5.4); "
    "McMahan, Xu & Zhang, EMNLP 2024 (Alg. 2-3); docs: continual",
    params={"buffers": 3, "objective": "max"}, scope=_scope, optimizer=True, structured_1d=True,
    online=True, audit=registry.AuditSpec(workload="prefix", cells=8, noise="gaussian")))
