"""Banded Toeplitz factorisations of the running total, optimised with L-BFGS-B.

A strategy ``C: (T, T)`` that is lower-triangular Toeplitz with ``bands``
bands -- first column ``c`` with ``c_j = 0`` for ``j ≥ bands`` -- measures at
step ``t`` the combination ``Σ_{j<bands} c_j x_{t−j}`` of the last ``bands``
counts.  The running total is answered through ``B = L C⁻¹`` (lower-triangular
Toeplitz too: the mechanism is online), and:

* the L2 sensitivity under one participation is ``Δ₂(C)² = Σ_j c_j²`` (the
  first column is the longest); under ``k`` participations at least ``b ≥
  bands`` steps apart, columns ``b`` apart have disjoint supports and
  ``Δ₂ = √k' · ‖c‖₂`` while ``(k'−1) b ≤ T − bands`` (Choquette-Choo, Ganesh,
  McKenna, McMahan, Rush, Thakurta & Xu, "(Amplified) banded matrix
  factorization: a unified approach to private training", NeurIPS 2023,
  Sec. 4; :mod:`dpexplorer.streaming.participation`), so the coefficients
  optimised for one participation are optimal for such ``k`` too;
* answer ``t`` has variance ``v · Δ(C)² · Σ_{j≤t} β_j²`` with ``β =
  cumsum(C⁻¹ e₀)`` the first column of ``B`` (matrix mechanism, Li, Miklau,
  Hay, McGregor & Rastogi, VLDB J. 2015, Prop. 3; the Toeplitz form as in
  :mod:`dpexplorer.queries.toeplitz`), increasing in ``t``: the max error is
  the last step's, ``v · Δ² · Σ_{j<T} β_j²``; the mean variance (RMSE²) is
  ``v · Δ² · Σ_j (T − j) β_j² / T``.

:func:`banded` minimises either (``objective="max"``, or ``"sum"``: the
total, equivalently the mean or the RMSE) over the
``bands`` coefficients with ``c_0 = 1`` fixed (both are invariant to the
scale of ``c``), starting from the first ``bands`` coefficients of the square
root of the prefix matrix (the "banded square root" of Kalinin & Lampert,
"Banded square root matrix factorization for differentially private model
training", NeurIPS 2024), as DP-BandMF with Toeplitz strategies does
(McKenna, "Scaling up the banded matrix factorization mechanism for
differentially private ML", ICLR 2025).  An evaluation, gradient included
(derived below), costs ``O(T · bands)`` through the recurrence of ``C⁻¹``
(``scipy.signal.lfilter``) up to :data:`RECURRENCE_MAX_BANDS` bands and
``O(T log T)`` beyond (:func:`dpexplorer.queries.toeplitz.series_inverse`, FFT
convolutions), so ``T = 2**16`` is optimised without a ``T × T`` matrix.

The search is over **non-negative, non-increasing** columns, ``c_j = Π_{i≤j}
r_i`` with L-BFGS-B bounds ``r_i ∈ [0, 1]``.  Three reasons: (i) such a
polynomial ``c(z)`` has no zero inside the unit disc (Eneström-Kakeya
theorem), so ``C⁻¹``'s column never grows geometrically and no evaluation
overflows (an unconstrained step can cross into that region, where the
objective is ``~ρ^{2T}``: L-BFGS-B then stops at its first iteration); (ii) the
participation sensitivity of the result is then exact at every separation
(:mod:`dpexplorer.streaming.participation`, the Toeplitz case); (iii)
``Δ₁ = Σ_j c_j`` is smooth, so Laplace noise is optimised the same way.
Nothing was lost in our checks: at ``T = 64`` and ``256``, ``bands = 2..16``,
both objectives, the best of six unconstrained L-BFGS-B runs was itself
non-negative and non-increasing and equal to this optimum within ``3·10⁻¹⁴``
relative (``tests/test_streaming_banded.py`` re-checks one case).

Under Laplace noise the optimum is Identity (``c = e₀``): ``Δ₁ = Σ_j |c_j| ≥
|c(1)|`` while ``β_j → 1/c(1)``, so the last answer's variance tends to
``T · (Σ|c_j| / c(1))² ≥ T``, Identity's; a signed Nelder-Mead search (``T ≤
64``, ``bands ≤ 8``, both objectives) found nothing better either.  The entry
accepts Laplace noise and says so, rather than hide it.

Gradient.  With ``g = C⁻¹ e₀`` (the power-series inverse of ``c``), ``β =
cumsum(g)`` and ``E = Σ_j w_j β_j²`` (``w_j = 1`` for the max error,
``(T − j)/T`` for the mean): ``∂E/∂g_i = u_i = Σ_{j≥i} 2 w_j β_j``, and
``dg = −(g ∗ g) ∗ dc`` (``d(1/c) = −dc/c²`` for power series), so ``∂E/∂c_s =
−Σ_{t≥s} u_t h_{t−s}`` with ``h = g ∗ g`` (truncated convolutions).  The
objective ``F = S(c) · E`` with ``S = Σ c_j²`` (L2) or ``(Σ c_j)²`` (L1, with
``c ≥ 0``) has ``∂F/∂c = E ∂S/∂c + S ∂E/∂c``; ``tests/test_streaming_banded.py``
checks it against finite differences.

Chain rule through ``c_j = Π_{l≤j} r_l``: ``∂F/∂r_i = c_{i−1} A_i`` with
``A_i = ∂F/∂c_i + r_{i+1} A_{i+1}``.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.optimize
import scipy.signal

from ..core import optimization, registry
from ..privacy.noise import NoiseModel
from ..queries.matrix import Matrix, _check_cells
from ..queries.toeplitz import LowerToeplitz, causal_convolve, series_inverse, sqrt_prefix_column
from ..strategies import templates
from . import workload

__all__ = ["OBJECTIVES", "banded", "prefix_objective"]

#: The criteria :func:`banded` minimises (unit noise, one participation): the largest per-step
#: variance, the mean per-step variance, or their sum (the unit TSE, ``T`` times the mean: the same
#: minimiser; the name :func:`dpexplorer.compare` passes, as to ResidualPlanner).
OBJECTIVES = ("max", "sum")  # the names dpexplorer.compare passes


def _check_objective(objective) -> str:
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES} ('max': the largest per-step variance, "
                         f"'sum': the total (equivalently the mean, the RMSE)), got {objective!r}")
    return objective


def _check_norm(noise_norm) -> int:
    if isinstance(noise_norm, bool) or noise_norm not in (1, 2):
        raise ValueError(f"noise_norm must be 1 (Laplace, L1 sensitivity) or 2 (Gaussian, L2), "
                         f"got {noise_norm!r}")
    return int(noise_norm)


def _weights(T: int, objective: str) -> np.ndarray:
    """``w_j``: ``Σ_j w_j β_j²`` is the last step's variance (max) or the sum over the steps (sum)."""
    if objective == "max":
        return np.ones(T)
    return (T - np.arange(T)).astype(float)


#: Up to this many coefficients, ``C⁻¹`` is applied by its recurrence (``scipy.signal.lfilter``,
#: ``O(T · bands)``), beyond by FFT (``O(T log T)``, :func:`~dpexplorer.queries.toeplitz.series_inverse`).
RECURRENCE_MAX_BANDS = 128


def _evaluate(coef: np.ndarray, T: int, w: np.ndarray, p: int, gradient: bool,
              recurrence: bool | None = None):
    """``(F, ∂F/∂coef, unit TSE)`` for the banded column ``coef`` (length ``bands``) over ``T`` steps.

    ``recurrence``: apply ``C⁻¹`` by its recurrence (``scipy.signal.lfilter``) or by FFT (default:
    the recurrence up to :data:`RECURRENCE_MAX_BANDS` coefficients); both are exact.
    """
    n = coef.size
    if recurrence is None:
        recurrence = n <= RECURRENCE_MAX_BANDS
    if recurrence:
        impulse = np.zeros(T)
        impulse[0] = 1.0
        g = scipy.signal.lfilter([1.0], coef, impulse)
    else:
        g = series_inverse(coef, T)
    beta = np.cumsum(g)
    E = float(np.dot(w, beta * beta))
    S = float(np.dot(coef, coef)) if p == 2 else float(np.sum(np.abs(coef))) ** 2
    tse = S * float(np.dot(T - np.arange(T), beta * beta))
    F = S * E
    if not gradient:
        return F, None, tse
    u = np.cumsum((2.0 * w * beta)[::-1])[::-1]
    # ∂E/∂c_s = −Σ_{t≥s} u_t h_{t−s}, h = g ∗ g: entry s of −(C⁻ᵀ)² u, C⁻ᵀ = R C⁻¹ R (R reverses)
    if recurrence:
        z = scipy.signal.lfilter([1.0], coef, u[::-1])  # C⁻¹ R u, so C⁻ᵀ u = R z
        corr = scipy.signal.lfilter([1.0], coef, z)[::-1][:n]  # C⁻ᵀ R z = R C⁻¹ z
    else:
        h = causal_convolve(g, g)
        corr = scipy.signal.fftconvolve(u[::-1], h)[T - n:T][::-1]
    dE = -corr
    dS = 2.0 * coef if p == 2 else 2.0 * float(np.sum(np.abs(coef))) * np.sign(coef)
    return F, E * dS + S * dE, tse


def _coefficients(r: np.ndarray) -> np.ndarray:
    """``c_0 = 1``, ``c_j = Π_{i≤j} r_i``: non-negative and non-increasing for ``r ∈ [0, 1]``."""
    return np.concatenate([[1.0], np.cumprod(r)])


def _ratio_gradient(r: np.ndarray, coef: np.ndarray, grad_c: np.ndarray) -> np.ndarray:
    """``∂F/∂r_i = c_{i−1} A_i`` with ``A_i = ∂F/∂c_i + r_{i+1} A_{i+1}`` (chain rule through the
    products ``c_j = Π_{l≤j} r_l``; no division, so exact at ``r_i = 0``)."""
    n = coef.size
    A = np.empty(n)
    acc = 0.0
    for i in range(n - 1, 0, -1):
        acc = grad_c[i] + (r[i] * acc if i < n - 1 else 0.0)  # r[i] is r_{i+1}
        A[i] = acc
    return coef[:-1] * A[1:]


def prefix_objective(column, T: int | None = None, objective: str = "max", noise_norm: int = 2) -> float:
    """Unit-noise error on the running total of the lower-triangular Toeplitz strategy with column ``column``.

    ``Δ_p(C)² · max_t Σ_{j≤t} β_j²`` (``"max"``: the largest per-step
    variance, at the last step) or ``Δ_p(C)² · Σ_j (T − j) β_j²``
    (``"sum"``: the unit TSE, ``T`` times the mean per-step variance, the RMSE²), ``β = cumsum(C⁻¹ e₀)``, one
    participation; multiply by the noise's ``variance_per_unit`` for squared
    counts.  Matrix mechanism: Li, Miklau, Hay, McGregor & Rastogi, VLDB J.
    2015, Prop. 3 (see :mod:`dpexplorer.queries.toeplitz`).

    Parameters
    ----------
    column : array, shape (n,)
        ``c``; ``c_0 ≠ 0``.  Padded with zeros to ``T``.
    T : int, optional
        Number of steps (default ``len(column)``; at least ``len(column)``).
    objective : {"max", "sum"}
    noise_norm : {1, 2}

    Raises
    ------
    ValueError
        If ``column`` is not finite and non-empty, ``c_0 = 0``, ``T <
        len(column)``, or the objective or norm is unknown.
    """
    c = np.asarray(column, dtype=float)
    if c.ndim != 1 or c.size == 0 or not np.isfinite(c).all():
        raise ValueError(f"column must be a finite non-empty 1D array, got shape {c.shape}")
    T = c.size if T is None else _check_cells(T, "T (the number of steps)")
    if T < c.size:
        raise ValueError(f"T = {T} steps is fewer than the column's {c.size} coefficients")
    if c[0] == 0:
        raise ValueError("c_0 = 0: the strategy is singular and cannot answer the running total")
    F, _, _ = _evaluate(c, T, _weights(T, _check_objective(objective)), _check_norm(noise_norm), False)
    return F


def _check_bands(bands) -> int:
    if isinstance(bands, bool) or not isinstance(bands, int | np.integer):
        raise TypeError(f"bands must be a whole number, got {type(bands).__name__} {bands!r}")
    if bands < 1:
        raise ValueError(f"bands must be at least 1 (1 band is Identity), got {bands}")
    return int(bands)


def banded(T: int, bands: int, objective: str = "max", noise_norm: int = 2, *,
           maxiter: int = 1000) -> LowerToeplitz:
    """The ``bands``-banded lower-triangular Toeplitz strategy that minimises the running total's error.

    Minimises :func:`prefix_objective` (``"max"``: the largest per-step
    variance; ``"sum"``: the total, equivalently the mean and the RMSE; unit noise, one
    participation) over the first ``min(bands, T)`` coefficients of the
    first column, ``c_0 = 1`` fixed, with ``scipy.optimize.minimize``
    (L-BFGS-B, exact gradient) over non-negative, non-increasing columns
    (``c_j = Π_{i≤j} r_i``, ``r_i ∈ [0, 1]``; see the module docstring), from
    the banded square root ``c_j = binom(2j, j)/4^j``.  Sources:
    Choquette-Choo et al., NeurIPS 2023 (banded strategies and their
    sensitivity); McKenna, ICLR 2025 (Toeplitz banded strategies,
    ``O(T log T)`` error); Kalinin & Lampert, NeurIPS 2024 (the start).  With
    ``bands ≥ T`` there is no band constraint (every lower-triangular ``T × T``
    matrix has at most ``T`` bands).

    Under ``k`` participations at least ``b ≥ bands`` steps apart the
    sensitivity is ``√k' ·`` the single one (``(k'−1)b ≤ T − bands``), so the
    same coefficients are optimal; wrap the result in
    :class:`dpexplorer.streaming.participation.Participation` to account for them.

    Parameters
    ----------
    T : int
        Number of steps.
    bands : int
        Number of non-zero diagonals of ``C`` (``≥ 1``; 1 is Identity).
    objective : {"max", "sum"}
        The names of :data:`dpexplorer.compare.OBJECTIVES` (the comparison passes its own).
    noise_norm : {1, 2}
        Sensitivity norm of the noise (1: Laplace, 2: Gaussian).
    maxiter : int
        Most L-BFGS-B iterations.

    Returns
    -------
    LowerToeplitz, shape (T, T)
        Named ``"banded"``, scaled to ``Δ_p = 1`` for one participation, with
        the run attached as ``.optimization``
        (:class:`~dpexplorer.core.optimization.OptimizationResult`: ``objective``
        is the unit-noise TSE on the running total ``Δ_p² · Σ_j (T−j) β_j²``,
        ``trace`` the same at the start and after every iteration, ``info`` the minimised
        criterion, its start and final values and scipy's message).

    Raises
    ------
    ValueError
        If ``T`` or ``bands`` is not a positive whole number, the objective or
        norm is unknown, or ``maxiter < 1``.
    TypeError
        If ``bands`` is not a whole number.
    """
    T = _check_cells(T, "T (the number of steps)")
    bands = _check_bands(bands)
    objective, p = _check_objective(objective), _check_norm(noise_norm)
    if isinstance(maxiter, bool) or not isinstance(maxiter, int | np.integer) or maxiter < 1:
        raise ValueError(f"maxiter must be a whole number >= 1, got {maxiter!r}")
    t0 = time.perf_counter()
    n = min(bands, T)
    w = _weights(T, objective)
    start = sqrt_prefix_column(n)
    memo: dict[str, object] = {}

    def evaluate(r):
        key = r.tobytes()
        if memo.get("key") != key:
            coef = _coefficients(r)
            F, grad, tse = _evaluate(coef, T, w, p, True)
            memo.update(key=key, F=F, tse=tse, grad=_ratio_gradient(r, coef, grad))
        return memo

    def fun(r):
        m = evaluate(r)
        return m["F"], m["grad"]

    F0, _, tse0 = _evaluate(start, T, w, p, False)
    trace, criterion = [tse0], [F0]  # iteration 0: the start
    optimization.report("banded: L-BFGS-B", 0, maxiter, tse0)
    if n == 1:
        coef, message, nit = start, "one band: Identity, nothing to optimise", 0
    else:
        def callback(rk):
            m = evaluate(np.asarray(rk, dtype=float))
            criterion.append(float(m["F"]))
            trace.append(float(m["tse"]))
            optimization.report("banded: L-BFGS-B", len(trace) - 1, maxiter, trace[-1])

        r0 = start[1:] / start[:-1]
        res = scipy.optimize.minimize(
            fun, r0, jac=True, method="L-BFGS-B", callback=callback, bounds=[(0.0, 1.0)] * (n - 1),
            options={"maxiter": int(maxiter), "ftol": 1e-13, "gtol": 1e-10})
        coef = _coefficients(res.x)
        message, nit = str(res.message), int(res.nit)
        if not _evaluate(coef, T, w, p, False)[0] <= F0:  # never return worse than the start
            coef = start
    F, _, tse = _evaluate(coef, T, w, p, False)
    scale = float(np.linalg.norm(coef, ord=p))
    column = np.zeros(T)
    column[:n] = coef / scale
    C = LowerToeplitz(column, name="banded")
    optimization.report("banded: L-BFGS-B", maxiter, maxiter, tse)
    info = {"bands": bands, "coefficients": n, "objective": objective, "norm": p,
            "criterion": {"max": "max per-step unit variance",
                          "sum": "total unit variance (unit TSE)"}[objective],
            "criterion_start": F0, "criterion_final": F, "criterion_trace": np.asarray(criterion),
            "iterations": nit, "message": message, "start": "banded square root (Kalinin & Lampert 2024)"}
    optimization.attach(optimization.OptimizationResult(
        strategy=C, objective=float(tse), trace=np.asarray(trace),
        restarts=np.asarray([tse]), seconds=time.perf_counter() - t0, seed=None,
        method="banded", info=info))
    return C


def _build_banded(W: Matrix, noise: NoiseModel, bands: int = 8, objective: str = "max") -> Matrix:
    T = workload.steps(W)
    params = {"bands": bands, "objective": objective}
    result = templates.memoised("banded", W, noise.norm, params,
                                lambda: banded(T, bands, objective, noise.norm).optimization)
    return templates.fresh(result)


registry.register(registry.Mechanism(
    "banded", "Banded", _build_banded,
    "Lower-triangular Toeplitz strategy with a few bands, optimised for the running total "
    "(L-BFGS-B over its coefficients); online, and its sensitivity grows only as √k with k "
    "participations at least `bands` steps apart. Under Laplace noise the optimum is Identity.",
    "Choquette-Choo et al., NeurIPS 2023, Sec. 4, Algorithm 3; McKenna, ICLR 2025; Kalinin & Lampert, "
    "NeurIPS 2024; docs: continual",
    params={"bands": 8, "objective": "max"}, scope=workload.scope, optimizer=True,
    structured_1d=True, online=True,
    audit=registry.AuditSpec(workload="prefix", cells=8, noise="gaussian")))
