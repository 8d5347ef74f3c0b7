"""LT-Opt: the optimal lower-triangular factorisation of a causal workload (Gaussian noise).

For a causal workload ``W: (T, T)`` (square, lower-triangular, invertible:
the running total ``L`` is the main case) a streaming factorisation is
``W = B C`` with ``B`` and ``C`` lower-triangular: measure ``C x`` with
Gaussian noise, one row per step, and publish ``B (C x + z)``.  Under single
participation (one record changes one step's count by 1) the L2
sensitivity is ``Δ₂(C)``, the largest column norm of ``C``, and with ``C``
square and invertible the best decoder is ``B = W C⁻¹`` (the matrix
mechanism's least squares).  In terms of ``X = CᵀC`` the unit-noise errors
are (McKenna, Miklau, Hay & Machanavajjhala, HDMM, PVLDB 2018, Prop. 4;
``dpexplorer/docs/matrix_mechanism.md``; Denisov, McMahan, Rush, Smith &
Thakurta, "Improved differential privacy for SGD via optimal private linear
operators on adaptive streams", NeurIPS 2022, Sec. 3)::

    "sum"   total squared error   Δ₂(C)² · tr(WᵀW X⁻¹)          (= ‖B‖_F² when Δ₂ = 1)
    "max"   largest step variance Δ₂(C)² · max_t (W X⁻¹ Wᵀ)_tt   (= max_t ‖B_t‖² when Δ₂ = 1)

and ``Δ₂(C)² = max_j X_jj``.  Both are invariant to scaling ``C``, so the
problem is over ``X ≻ 0`` with ``diag(X) ≤ 1``:

* it is **convex**: each ``(W X⁻¹ Wᵀ)_tt = w_tᵀ X⁻¹ w_t`` is a matrix
  fractional function, convex in ``X ≻ 0`` (Boyd & Vandenberghe, *Convex
  Optimization*, 2004, Sec. 3.1.7, Example 3.4), so are their sum
  ``tr(WᵀW X⁻¹)`` and their maximum, and the constraints are linear (the
  convex program of Yuan, Yang, Zhang & Hao, "Convex optimization for linear
  query processing under approximate differential privacy", KDD 2016);
* **lower-triangular costs nothing**: every ``X ≻ 0`` is ``CᵀC`` for a
  lower-triangular ``C`` (:func:`lower_factor`: the Cholesky factor of the
  time-reversed ``X``, reversed back), so the optimum over all
  factorisations is reached by an online one (Denisov et al. 2022, Sec. 3:
  their optimal factorisations are streaming ones).

Solved through its Lagrange dual, a problem over one multiplier ``v_j ≥ 0``
per column constraint ``X_jj ≤ 1`` (Denisov et al. 2022, Sec. 3, Thm 3.2: the
optimal ``v`` is the fixed point of ``φ(v) = diag((V^{1/2} WᵀW V^{1/2})^{1/2})``,
``V = diag(v)``).  For ``Λ = diag(λ)``, ``λ ≥ 0`` weights of the rows (``λ = 1``
for ``"sum"``) and ``M = Λ^{1/2} W V^{1/2}``::

    min_{X ≻ 0}  tr(WᵀΛW X⁻¹) + Σ_j v_j X_jj  =  2 ‖M‖_*        (nuclear norm)
    attained at  X(λ, v) = V^{-1/2} (MᵀM)^{1/2} V^{-1/2}

(the stationarity condition ``X V X = WᵀΛW``; Denisov et al. 2022, Thm
3.2).  As an infimum of functions affine in ``(λ, v)`` the dual function is
jointly **concave** (Boyd & Vandenberghe 2004, Sec. 5.1.2) and Slater's
condition holds (``X = I/2``), so the duality gap is zero (ibid., Sec. 5.2.3):

* ``"sum"``: ``OPT = max_{v ≥ 0} 2‖W V^{1/2}‖_* − Σ_j v_j``;
* ``"max"``: writing ``max_t f_t(X) = max_{λ ∈ simplex} Σ_t λ_t f_t(X)`` and
  exchanging min and max (Sion's minimax theorem: convex in ``X``, linear in
  ``λ`` over a compact set), ``OPT = max_{λ ∈ simplex, v ≥ 0} 2‖M‖_* − Σv``.
  The simplex is replaced by the penalty ``−(Σλ)²/2`` (concave): the
  maximum of ``Ψ(λ, v) = 2‖M‖_* − Σv − (Σλ)²/2`` over ``λ, v ≥ 0`` is
  ``OPT²/2``, reached with ``Σλ = OPT`` (``‖M‖_*`` is of degree ½ in ``λ``
  and in ``v``).  With ``a = √λ``, ``b = √v`` on unit spheres this reads
  ``OPT = max ‖diag(a) W diag(b)‖_*²``: the squared factorisation norm
  ``γ₂(W)²`` in its dual form (e.g. Lee, Shraibman & Špalek, "A direct
  product theorem for discrepancy", CCC 2008), the quantity the bounds for
  the running total are stated in (tests: Matoušek, Nikolov & Talwar, IMRN
  2020; Mathias, SIAM J. Matrix Anal. Appl. 1993).

Both are maximised with ``scipy.optimize.minimize`` (L-BFGS-B, bounds
``λ, v ≥ 0``: bound constraints only) from the gradient given by the envelope
theorem: ``∂/∂v_j = X_jj − 1`` and ``∂(2‖M‖_*)/∂λ_t = (W X⁻¹ Wᵀ)_tt``, with
``diag((MᵀM)^{1/2}) / v`` and ``diag((MMᵀ)^{1/2}) / λ`` their closed forms.
Every iterate is certified (weak duality): ``‖M‖_*² / Σv`` (``"sum"``) and
``‖M‖_*² / (Σλ Σv)`` (``"max"``) are lower bounds on ``OPT`` at *any*
positive ``λ, v`` (:func:`dual_bound`: the dual value optimised along the
ray ``c·v``), and ``X(λ, v) / max_j X_jj`` is feasible, with value
``‖M‖_* · max_j X_jj`` (``"sum"``) or ``max_t (W X⁻¹ Wᵀ)_tt · max_j X_jj``.
The optimiser stops when the relative gap between the two is below ``tol``;
the returned strategy's objective is within that gap of the optimum (the
record's ``relative_gap``, computed from the strategy's exact objective and
a lower bound recomputed by a dense SVD when ``T ≤`` :data:`MAX_STEPS_DENSE`).

Degenerate duals (``"max"`` on some workloads): when the best ``X`` leaves
rows below the maximum, their weights ``λ_t`` are 0 at the optimum, ``WᵀΛW``
is singular, some ``v_j`` go to 0 with them and the dual optimum is reached
only on the boundary, where ``X(λ, v)`` is ill-determined.  The gap then
falls slowly (about 1e-3 to 1e-4 after a few hundred iterations on random
causal workloads of 10-30 steps); the optimiser stops when it fell by less
than 1 % in 100 iterations and says so in the record.  The running total is
not degenerate (measured: every ``λ_t`` and ``v_j`` above ``0.36/T`` for ``T ≤ 256``, with
``λ = reversed v``, as the persymmetry ``J L J = Lᵀ`` suggests), nor is
``"sum"`` for any invertible ``W`` (``WᵀW ≻ 0`` forces ``v ≻ 0``).

Cost: the spectrum of ``M`` per iteration.  When ``W⁻¹`` is bidiagonal (the
running total: ``L⁻¹`` is the first difference; Identity) ``M⁻¹ =
V^{-1/2} W⁻¹ Λ^{-1/2}`` is bidiagonal and ``(MᵀM)⁻¹``'s tridiagonal
eigenproblem (LAPACK ``stevd``) gives everything in ``O(T²)`` memory and about
``O(T²)``-``O(T³)`` time with a small constant; otherwise a dense SVD,
``O(T³)``.  Hence the limits :data:`MAX_STEPS` and :data:`MAX_STEPS_DENSE`.

Registered as ``"lt_opt"`` (online, Gaussian noise only).
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.optimize
from scipy.linalg import lapack

from ..core import optimization, registry
from ..core.parallel import blas_limit
from ..core.registry import NotApplicableError
from ..privacy.noise import NoiseModel
from ..queries import limits
from ..queries.matrix import Dense, Identity, Matrix, Prefix, as_matrix
from . import workload

__all__ = ["lt_opt", "lower_factor", "dual_bound", "strategy_objective", "scope", "OBJECTIVES",
           "MAX_STEPS", "MAX_STEPS_DENSE", "DEFAULT_TOL", "DEFAULT_MAXITER"]

#: The objectives: total squared error, largest per-step variance.
OBJECTIVES = ("sum", "max")
#: Largest ``T`` by default when ``W⁻¹`` is bidiagonal (the running total, Identity).  Measured on
#: 2 shared cores, running total: 1.4 s (``"sum"``) and 2.7 s (``"max"``) at T = 1024 (about 20
#: and 30 evaluations of a T × T tridiagonal eigenproblem, then one dense Cholesky); 8 s and 34 s
#: at T = 2048.
MAX_STEPS = 2048
#: Largest ``T`` by default for any other causal workload: a dense SVD per evaluation, O(T³).
#: Measured (the square root of the running total as the workload, T = 512): 0.7 s (``"sum"``,
#: 6 evaluations), 9 s (``"max"``, 139 evaluations).
MAX_STEPS_DENSE = 512
#: Default relative duality gap at which the optimiser stops.
DEFAULT_TOL = 1e-5
#: Default number of L-BFGS-B iterations.
DEFAULT_MAXITER = 500

#: Lower bound of the scaled multipliers (``λ / λ₀``, ``v / v₀``): keeps ``M`` invertible.  Any
#: positive multipliers give a valid certificate, so the bound costs at most what the gap shows.
_LOWER = 1e-9
#: Stop when the relative gap fell by less than ``1 − _STALL`` over the last ``_WINDOW`` iterations
#: (a degenerate dual, module docstring: the gap then creeps down by ~1 % per hundred iterations).
_WINDOW, _STALL = 100, 0.99


# ============================================================ checks
def _check_objective(objective) -> str:
    if not isinstance(objective, str) or objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES} (total squared error, or the largest "
                         f"per-step variance), got {objective!r}")
    return objective


def _check_tol(tol) -> float:
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not 0 < float(tol) < 1:
        raise ValueError(f"tol (the relative duality gap at which to stop) must be a number in (0, 1), "
                         f"got {tol!r}")
    return float(tol)


def _causal_dense(W) -> np.ndarray:
    """``W`` as a dense, square, lower-triangular, invertible ``(T, T)`` array, else ValueError."""
    if not isinstance(W, Matrix | np.ndarray | list | tuple):
        raise TypeError(f"W must be a query matrix (dpexplorer Matrix or 2D array), got {type(W).__name__}")
    W = as_matrix(W)
    if W.m != W.n:
        raise ValueError(f"lt_opt factorises a causal workload: W must be square (one answer per step), "
                         f"got shape {W.shape}")
    D = np.asarray(W.dense(), dtype=float)
    if np.any(np.triu(D, 1)):
        raise ValueError("lt_opt factorises a causal workload: W must be lower-triangular (answer t uses "
                         "the counts of steps 0..t), but W has non-zero entries above the diagonal")
    if not np.all(np.diag(D)):
        zero = np.flatnonzero(np.diag(D) == 0)
        raise NotApplicableError(
            f"lt_opt needs an invertible causal workload (W[t, t] != 0 for every step t: answer t "
            f"depends on step t's own count); W[t, t] = 0 at steps {zero[:5].tolist()}"
            f"{' ...' if zero.size > 5 else ''}")
    return D


def _too_long(T: int, limit: int, path: str | None) -> str:
    why = {"bidiagonal": " for a workload whose inverse is bidiagonal (the running total, Identity: a "
                         "tridiagonal eigenproblem per iteration)",
           "dense": " for this workload (its inverse is not bidiagonal: a dense SVD, O(T³), per "
                    "iteration)",
           None: ""}[path]
    return (f"lt_opt optimises a dense T × T strategy; this workload has T = {T:,} steps, above the "
            f"limit of {limit:,}{why}. Pass a larger max_steps to try anyway, or use toeplitz_sqrt "
            f"(within 1 + o(1) of the optimal max error, no T × T matrix)")


def _bidiagonal_inverse(D: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(a, c)``: diagonal and sub-diagonal of ``W⁻¹`` when it is lower-bidiagonal, else None.

    ``B W = I`` with ``B`` lower-bidiagonal fixes ``a_t = 1 / W_tt`` and
    ``c_t = −a_{t+1} W_{t+1,t} / W_tt``; the product ``B W`` (``O(T²)``) says
    whether ``B`` is the inverse.
    """
    T = D.shape[0]
    a = 1.0 / np.diag(D)
    if T == 1:
        return a, np.zeros(0)
    c = -a[1:] * np.diag(D, -1) / np.diag(D)[:-1]
    R = a[:, None] * D
    R[1:] += c[:, None] * D[:-1]
    scale = np.abs(a[:, None] * D).max()
    if np.abs(R - np.eye(T)).max() <= 1e-12 * max(scale, 1.0) * T:
        return a, c
    return None


# ============================================================ spectra of M = Λ^{1/2} W V^{1/2}
@dataclass
class _Spectrum:
    """What one evaluation at ``(λ, v)`` gives.

    ``nuclear = ‖M‖_*``; ``col = diag((MᵀM)^{1/2})`` (so ``X_jj = col_j / v_j``);
    ``row = diag((MMᵀ)^{1/2})`` (so ``(W X⁻¹ Wᵀ)_tt = row_t / λ_t``), None if not asked for;
    ``factor``: ``Z`` with ``(MᵀM)^{1/2} = Z Zᵀ`` (``P Σ^{1/2}``).
    """

    nuclear: float
    col: np.ndarray
    row: np.ndarray | None
    factor: np.ndarray


class _BidiagonalSpectrum:
    """Spectra of ``M`` when ``W⁻¹`` is lower-bidiagonal (diagonal ``a``, sub-diagonal ``c``).

    ``M⁻¹ = V^{-1/2} W⁻¹ Λ^{-1/2} =: K`` is lower-bidiagonal, so ``K Kᵀ = (MᵀM)⁻¹``
    is tridiagonal: its eigenvectors ``P`` are the right singular vectors of ``M``
    and its eigenvalues ``μ = σ⁻²``.  The left singular vectors are ``U = K⁻¹ P Σ⁻¹``
    (a bidiagonal solve), so ``diag((MMᵀ)^{1/2}) = Σ_k (K⁻¹P)_{tk}² / σ_k``.
    """

    path = "bidiagonal"

    def __init__(self, a: np.ndarray, c: np.ndarray):
        self.a, self.c = a, c

    def __call__(self, lam: np.ndarray, v: np.ndarray, rows: bool) -> _Spectrum:
        sl, sv = np.sqrt(lam), np.sqrt(v)
        kd = self.a / (sv * sl)
        ke = self.c / (sv[1:] * sl[:-1])
        d = kd * kd
        d[1:] += ke * ke
        off = kd[:-1] * ke
        mu, P = _tridiagonal_eigh(d, off)
        if mu[0] <= 0:
            raise FloatingPointError("the multipliers make M numerically singular")
        sigma = 1.0 / np.sqrt(mu)
        col = (P * P) @ sigma
        row = None
        if rows:
            ab = np.zeros((2, kd.size))
            ab[0] = kd
            ab[1, :-1] = ke
            Y = scipy.linalg.solve_banded((1, 0), ab, P, check_finite=False)  # K⁻¹ P = U Σ
            row = (Y * Y) @ np.sqrt(mu)
        return _Spectrum(float(sigma.sum()), col, row, P * np.sqrt(sigma))


def _tridiagonal_eigh(d: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending) and eigenvectors of the symmetric tridiagonal matrix (``d``, ``off``)."""
    if d.size == 1:
        return d.copy(), np.ones((1, 1))
    mu, P, info = lapack.dstevd(d, off, compute_v=1)
    if info != 0:  # pragma: no cover - divide and conquer failed to converge: the MRRR driver
        mu, P = scipy.linalg.eigh_tridiagonal(d, off, lapack_driver="stemr")
    return mu, P


class _DenseSpectrum:
    """Spectra of ``M = Λ^{1/2} W V^{1/2}`` from its SVD (any invertible ``W``), ``O(T³)``."""

    path = "dense"

    def __init__(self, D: np.ndarray):
        self.D = D

    def __call__(self, lam: np.ndarray, v: np.ndarray, rows: bool) -> _Spectrum:
        M = np.sqrt(lam)[:, None] * self.D * np.sqrt(v)[None, :]
        U, sigma, Pt = np.linalg.svd(M)
        if sigma[-1] <= 0:
            raise FloatingPointError("the multipliers make M numerically singular")
        col = (Pt * Pt).T @ sigma
        row = (U * U) @ sigma if rows else None
        return _Spectrum(float(sigma.sum()), col, row, Pt.T * np.sqrt(sigma))


def _spectrum_for(D: np.ndarray):
    bi = _bidiagonal_inverse(D)
    return _BidiagonalSpectrum(*bi) if bi is not None else _DenseSpectrum(D)


# ============================================================ public helpers
def lower_factor(X) -> np.ndarray:
    """The lower-triangular ``C: (T, T)`` with ``CᵀC = X`` for a positive definite ``X: (T, T)``.

    With ``J`` the reversal, ``J X J = R Rᵀ`` (Cholesky, ``R`` lower-triangular)
    gives ``X = (J R J)(J R J)ᵀ`` with ``J R J`` upper-triangular, so ``C = J Rᵀ J``
    is lower-triangular and ``CᵀC = X``: every positive definite Gram matrix
    has an online (causal) strategy (Golub & Van Loan, *Matrix Computations*,
    4th ed., 2013, Thm 4.2.7 for the Cholesky factor; the use for streaming:
    Denisov et al., NeurIPS 2022, Sec. 3).

    Raises
    ------
    ValueError
        If ``X`` is not a finite, square, symmetric positive definite array.
    """
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[0] != X.shape[1] or X.size == 0:
        raise ValueError(f"X must be a non-empty square 2D array, got shape {X.shape}")
    if not np.isfinite(X).all():
        raise ValueError("X must be finite (no NaN or inf)")
    if not np.allclose(X, X.T, rtol=1e-10, atol=1e-12 * np.abs(X).max()):
        raise ValueError("X must be symmetric (a Gram matrix CᵀC)")
    try:
        R = np.linalg.cholesky(X[::-1, ::-1])
    except np.linalg.LinAlgError:
        raise ValueError("X must be positive definite (its Cholesky factorisation failed)") from None
    return np.ascontiguousarray(R.T[::-1, ::-1])


def dual_bound(W, objective: str, v, lam=None) -> float:
    """A certified lower bound on the optimum of ``objective`` from any positive multipliers.

    Weak duality (module docstring; Denisov et al., NeurIPS 2022, Thm 3.2 for the
    dual function): with ``M = Λ^{1/2} W V^{1/2}``,

    * ``"sum"``: ``‖W V^{1/2}‖_*² / Σ_j v_j ≤ min_C Δ₂(C)² tr(WᵀW (CᵀC)⁻¹)``;
    * ``"max"``: ``‖M‖_*² / (Σ_t λ_t · Σ_j v_j) ≤ min_C Δ₂(C)² max_t (W (CᵀC)⁻¹ Wᵀ)_tt``
      (``= γ₂(W)²`` at the best ``λ, v``);

    for every ``C`` (any number of rows, with ``W`` in its row space), in
    unit-noise squared counts.  Equality at the optimal multipliers.

    Parameters
    ----------
    W : Matrix or array, shape (T, T)
        Square, lower-triangular, invertible.
    objective : {"sum", "max"}
    v : array, shape (T,)
        Positive column multipliers.
    lam : array, shape (T,), optional
        Positive row weights (``"max"`` only; required there).

    Raises
    ------
    ValueError
        Bad workload, objective or multipliers (not finite and positive, wrong shape).
    """
    objective = _check_objective(objective)
    D = _causal_dense(W)
    T = D.shape[0]
    v = _check_multipliers(v, T, "v")
    if objective == "sum":
        if lam is not None:
            raise ValueError("lam (row weights) is for objective='max' only")
        lam = np.ones(T)
    else:
        if lam is None:
            raise ValueError("objective='max' needs the row weights lam, shape (T,)")
        lam = _check_multipliers(lam, T, "lam")
    return _accurate_bound(D, objective, lam, v)


def _accurate_bound(D: np.ndarray, objective: str, lam: np.ndarray, v: np.ndarray) -> float:
    """``‖M‖_*² / (Σv · Σλ)`` (``Σλ`` for ``"max"`` only), from the dense SVD when ``T ≤``
    :data:`MAX_STEPS_DENSE` (each singular value within ``ε·σ_max``, so ``‖M‖_*`` to ``T·ε``
    relative); above, from the structured spectrum (the tridiagonal path's small eigenvalues of
    ``(MᵀM)⁻¹`` lose accuracy as the condition number of ``M`` squared: about 1e-10 relative for the
    running total at T = 1024)."""
    spectrum = _DenseSpectrum(D) if D.shape[0] <= MAX_STEPS_DENSE else _spectrum_for(D)
    nuclear = spectrum(lam, v, rows=False).nuclear
    return nuclear ** 2 / (v.sum() * (lam.sum() if objective == "max" else 1.0))


def _check_multipliers(x, T: int, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if x.shape != (T,):
        raise ValueError(f"{what} must have shape ({T},), got {x.shape}")
    if not np.isfinite(x).all() or np.any(x <= 0):
        raise ValueError(f"{what} must be finite and positive")
    return x


def strategy_objective(W, C, objective: str) -> float:
    """Unit-noise ``objective`` of the strategy ``C: (T, T)`` (invertible) for ``W: (T, T)``.

    ``Δ₂(C)² · ‖W C⁻¹‖_F²`` (``"sum"``) or ``Δ₂(C)² · max_t ‖(W C⁻¹)_t‖²``
    (``"max"``): the matrix mechanism's error with decoder ``B = W C⁻¹`` (HDMM,
    PVLDB 2018, Prop. 4: ``Δ₂(C)² tr(WᵀW (CᵀC)⁻¹)`` and its diagonal), by one
    triangular solve when ``C`` is lower-triangular.

    Raises
    ------
    ValueError
        Bad objective or shapes, or a singular ``C``.
    """
    objective = _check_objective(objective)
    D = np.asarray(as_matrix(W).dense(), dtype=float)
    C = np.asarray(as_matrix(C).dense(), dtype=float)
    if D.shape != C.shape or D.shape[0] != D.shape[1]:
        raise ValueError(f"W and C must be square of the same shape, got {D.shape} and {C.shape}")
    lower = not np.any(np.triu(C, 1))
    try:
        if lower:
            if not np.all(np.diag(C)):
                raise np.linalg.LinAlgError
            Bt = scipy.linalg.solve_triangular(C, D.T, trans="T", lower=True)  # (W C⁻¹)ᵀ
        else:
            Bt = np.linalg.solve(C.T, D.T)
    except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):
        raise ValueError("C is singular: it does not support W") from None
    rows = (Bt * Bt).sum(axis=0)
    sens2 = float((C * C).sum(axis=0).max())
    return sens2 * float(rows.sum() if objective == "sum" else rows.max())


# ============================================================ the optimiser
class _Dual:
    """``−Ψ`` (``"max"``) or ``−F`` (``"sum"``) and its gradient in scaled variables, with certificates.

    Variables ``x``: ``v = v₀ x`` (``"sum"``), ``(λ, v) = (λ₀ x[:T], v₀ x[T:])``
    (``"max"``): a diagonal rescaling (keeps concavity) that starts at ``x = 1``.
    Every evaluation records the certified lower bound and the feasible upper
    bound (module docstring); the best of each are kept.
    """

    def __init__(self, spectrum, T: int, objective: str, lam0, v0, norm: float):
        self.spectrum, self.T, self.objective = spectrum, T, objective
        self.lam0, self.v0, self.norm = lam0, v0, norm
        self.lower = -math.inf
        self.upper = math.inf
        self.best: tuple[np.ndarray, np.ndarray] | None = None  # (λ, v) of the lowest upper bound
        self.certificate: tuple[np.ndarray, np.ndarray] | None = None  # (λ, v) of the highest lower bound
        self.upper_tse = math.nan
        self.evaluations = 0
        self._last = None

    def split(self, x):
        if self.objective == "sum":
            return np.ones(self.T), self.v0 * x
        return self.lam0 * x[:self.T], self.v0 * x[self.T:]

    def __call__(self, x):
        if self._last is not None and np.array_equal(x, self._last[0]):
            return self._last[1]
        out = self._evaluate(x)
        self._last = (np.array(x, copy=True), out)
        return out

    def _evaluate(self, x):
        self.evaluations += 1
        lam, v = self.split(x)
        try:
            s = self.spectrum(lam, v, rows=self.objective == "max")
        except FloatingPointError:
            return math.inf, np.zeros_like(x)
        xjj = s.col / v
        m = float(xjj.max())
        if self.objective == "sum":
            lower = s.nuclear ** 2 / v.sum()
            upper = s.nuclear * m
            tse = upper
            value = 2.0 * s.nuclear - v.sum()
            grad = self.v0 * (xjj - 1.0)
        else:
            f = s.row / lam  # (W X⁻¹ Wᵀ)_tt
            lower = s.nuclear ** 2 / (lam.sum() * v.sum())
            upper = float(f.max()) * m
            tse = float(f.sum()) * m
            value = 2.0 * s.nuclear - v.sum() - 0.5 * lam.sum() ** 2
            grad = np.concatenate([self.lam0 * (f - lam.sum()), self.v0 * (xjj - 1.0)])
        if lower > self.lower:
            self.lower, self.certificate = lower, (lam, v)
        if upper < self.upper:
            self.upper, self.upper_tse, self.best = upper, tse, (lam, v)
        return -value / self.norm, -grad / self.norm

    def gap(self) -> float:
        return (self.upper - self.lower) / self.upper


def _start(spectrum, T: int, objective: str):
    """Scales ``(λ₀, v₀)`` of the starting point and the objective's normaliser.

    Directions: one fixed-point step from ``λ = v = 1`` (``v̂ = diag((MᵀM)^{1/2})``,
    Denisov et al. 2022, Thm 3.2; ``λ̂ = diag((MMᵀ)^{1/2})``), then the best
    multiple of each along its ray (closed forms: ``c = (‖M‖_*/Σv̂)²`` for
    ``"sum"``; ``a = ‖M‖_*²/(Σv̂ (Σλ̂)²)``, ``c = a ‖M‖_*²/(Σv̂)²`` for ``"max"``).
    """
    one = np.ones(T)
    first = spectrum(one, one, rows=objective == "max")
    v_dir = first.col / first.col.mean()
    if objective == "sum":
        n = spectrum(one, v_dir, rows=False).nuclear
        v0 = v_dir * (n / v_dir.sum()) ** 2
        return one, v0, n * n / v_dir.sum()
    lam_dir = first.row / first.row.mean()
    n = spectrum(lam_dir, v_dir, rows=False).nuclear
    a = n * n / (v_dir.sum() * lam_dir.sum() ** 2)
    c = a * n * n / v_dir.sum() ** 2
    bound = n * n / (v_dir.sum() * lam_dir.sum())
    return a * lam_dir, c * v_dir, 0.5 * bound * bound


def lt_opt(W, objective: str = "sum", *, tol: float = DEFAULT_TOL, maxiter: int = DEFAULT_MAXITER,
           max_steps: int | None = None, blas_threads: int | None = 1, name: str = "lt_opt") -> Dense:
    """The optimal lower-triangular strategy ``C: (T, T)`` for the causal workload ``W: (T, T)``.

    Minimises the unit-noise ``"sum"`` objective ``Δ₂(C)² tr(WᵀW (CᵀC)⁻¹)``
    (total squared error of the ``T`` answers) or the ``"max"`` objective
    ``Δ₂(C)² max_t (W (CᵀC)⁻¹ Wᵀ)_tt`` (largest per-step variance), single
    participation, L2 sensitivity (Gaussian noise), over ``X = CᵀC`` by its
    Lagrange dual with L-BFGS-B (Denisov, McMahan, Rush, Smith & Thakurta,
    NeurIPS 2022, Sec. 3, Thm 3.2; convexity and duality: module docstring).
    ``C = lower_factor(X̂)`` with ``X̂`` the dual's primal point scaled to
    ``diag(X̂) = 1``, so ``Δ₂(C) = 1``; the answers ``W C⁻¹ (C x + z)`` are
    released online (row ``t`` of ``W C⁻¹`` uses measurements ``0..t``).

    Parameters
    ----------
    W : Matrix or array, shape (T, T)
        Causal workload: square, lower-triangular, with a non-zero diagonal.
    objective : {"sum", "max"}
    tol : float in (0, 1)
        Stop when the relative duality gap of the iterates is below this.
    maxiter : int
        L-BFGS-B iterations at most.  The optimiser also stops when the gap
        fell by less than 1 % in 100 iterations (a degenerate dual, module
        docstring); the record says why it stopped and the gap reached.
    max_steps : int, optional
        Refuse ``T`` above this (default :data:`MAX_STEPS` when ``W⁻¹`` is
        bidiagonal, e.g. the running total, else :data:`MAX_STEPS_DENSE`).
    blas_threads : int or None
        Limit of the BLAS thread pools while running (threadpoolctl; default
        1: on a busy machine the multi-threaded tridiagonal eigensolver and
        Cholesky factorisation were 3-40 times slower at T = 1024 here).
        ``None`` leaves them alone.
    name : str
        Name of the returned strategy.

    Returns
    -------
    Dense, shape (T, T)
        Lower-triangular ``C`` with column norms at most 1 and ``Δ₂(C) = 1``,
        carrying ``C.optimization`` (:class:`~dpexplorer.core.optimization.OptimizationResult`):
        ``objective`` = its unit-noise TSE ``tr(WᵀW (CᵀC)⁻¹)``; ``trace`` = unit
        TSE of the feasible iterate after each iteration; ``info``:
        ``objective`` (name), ``value`` (its value for ``C``, unit-noise squared
        counts scaled as ``W``), ``lower_bound`` (certified: no strategy does
        better), ``relative_gap`` (``(value − lower_bound) / value``),
        ``max_variance``, ``tse``, ``path`` (``"bidiagonal"`` or ``"dense"``),
        ``iterations``, ``evaluations``, ``message``, ``value_trace`` and
        ``bound_trace`` (the iterates' upper and lower bounds on the optimum),
        ``multipliers`` (``v`` of the lower bound, normalised to sum 1) and, for
        ``"max"``, ``row_weights`` (``λ``, normalised: the steps whose variance is
        the maximum), so that ``dual_bound(W, objective, multipliers,
        row_weights)`` gives ``lower_bound`` back.

    Raises
    ------
    ValueError
        ``W`` not square or not lower-triangular; bad ``objective``, ``tol``,
        ``maxiter``, ``max_steps`` or ``blas_threads``.
    NotApplicableError
        (a ValueError) ``T`` above the limit, or ``W`` singular (a zero on its diagonal).
    TypeError
        ``W`` not a matrix.
    """
    t0 = time.perf_counter()
    objective = _check_objective(objective)
    tol = _check_tol(tol)
    maxiter = limits.whole_number(maxiter, "maxiter")
    if max_steps is not None:
        max_steps = limits.whole_number(max_steps, "max_steps")
    if blas_threads is not None:
        blas_threads = limits.whole_number(blas_threads, "blas_threads")
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not isinstance(W, Matrix | np.ndarray | list | tuple):
        raise TypeError(f"W must be a query matrix (dpexplorer Matrix or 2D array), got {type(W).__name__}")
    W = as_matrix(W)
    hard = max_steps if max_steps is not None else MAX_STEPS
    if W.m == W.n and W.n > hard:  # before anything T × T is built
        raise NotApplicableError(_too_long(W.n, hard, None))
    D = _causal_dense(W)
    T = D.shape[0]
    scale = float(np.abs(D).max())
    D = D / scale  # X does not depend on W's scale; the values scale by scale²
    spectrum = _spectrum_for(D)
    limit = max_steps if max_steps is not None else (
        MAX_STEPS if spectrum.path == "bidiagonal" else MAX_STEPS_DENSE)
    if T > limit:
        raise NotApplicableError(_too_long(T, limit, spectrum.path))
    with blas_limit(blas_threads):
        return _solve(D, scale, spectrum, objective, tol, maxiter, name, t0)


def _solve(D, scale, spectrum, objective, tol, maxiter, name, t0) -> Dense:
    T = D.shape[0]
    optimization.report(f"lt_opt ({objective}): start", 0, maxiter)
    if T == 1:
        return _finish(D, scale, np.ones((1, 1)), objective, None, [], [], [], 0, 0, "T = 1: C = [1]",
                       spectrum.path, None, None, t0, name, tol)
    lam0, v0, norm = _start(spectrum, T, objective)
    dual = _Dual(spectrum, T, objective, lam0, v0, norm)
    n = T if objective == "sum" else 2 * T
    x0 = np.ones(n)
    dual(x0)
    value_trace, bound_trace, tse_trace = [dual.upper], [dual.lower], [dual.upper_tse]
    gaps = [dual.gap()]

    def callback(intermediate_result):
        value_trace.append(dual.upper)
        bound_trace.append(dual.lower)
        tse_trace.append(dual.upper_tse)
        gaps.append(dual.gap())
        k = len(value_trace) - 1
        optimization.report(f"lt_opt ({objective}): iteration {k}, gap {dual.gap():.1e}", k, maxiter,
                            dual.upper_tse * scale * scale)
        if gaps[-1] <= tol or (k >= _WINDOW and gaps[-1] > _STALL * gaps[-1 - _WINDOW]):
            raise StopIteration

    iterations, message = 0, "converged: relative gap below tol (at the start)"
    if gaps[0] > tol:
        res = scipy.optimize.minimize(
            dual, x0, jac=True, method="L-BFGS-B", bounds=[(_LOWER, None)] * n, callback=callback,
            options={"maxiter": maxiter, "ftol": 1e-15, "gtol": 1e-12, "maxcor": 10})
        iterations = int(res.nit)
        if gaps[-1] <= tol:
            message = "converged: relative gap below tol"
        elif len(gaps) > _WINDOW and gaps[-1] > _STALL * gaps[-1 - _WINDOW]:
            message = (f"stopped: the gap fell by less than {1 - _STALL:.0%} in {_WINDOW} iterations "
                       f"(a degenerate dual: some rows or columns carry no weight at the optimum)")
        else:
            message = str(res.message)
    if dual.best is None or dual.certificate is None:  # every evaluation found M singular
        raise ValueError("lt_opt: W is too ill-conditioned for the dual (M = Λ^{1/2} W V^{1/2} is "
                         "numerically singular at every point tried); rescale its rows or columns")
    lam, v = dual.best
    spec = spectrum(lam, v, rows=False)
    X = spec.factor @ spec.factor.T / np.sqrt(v)[:, None] / np.sqrt(v)[None, :]
    X = (X + X.T) / 2.0
    d = np.sqrt(np.diag(X))
    X_unit = X / d[:, None] / d[None, :]  # diag(X̂) = 1
    C = lower_factor(X_unit)
    value = strategy_objective(D, C, objective)
    if value > dual.upper * (1 + 1e-12):  # X / max X_jj (the certified one) did better
        C = lower_factor(X / float(np.diag(X).max()))
        C /= np.sqrt((C * C).sum(axis=0).max())
    cert_lam, cert_v = dual.certificate
    lower = _accurate_bound(D, objective, cert_lam, cert_v)
    return _finish(D, scale, C, objective, lower, value_trace, bound_trace, tse_trace, iterations,
                   dual.evaluations, message, spectrum.path, cert_v,
                   cert_lam if objective == "max" else None, t0, name, tol)


def _finish(D, scale, C, objective, lower, value_trace, bound_trace, tse_trace, iterations, evaluations,
            message, path, v, lam, t0, name, tol) -> Dense:
    s2 = scale * scale
    tse = strategy_objective(D, C, "sum") * s2
    max_variance = strategy_objective(D, C, "max") * s2
    value = tse if objective == "sum" else max_variance
    lower = value if lower is None else lower * s2
    gap = (value - lower) / value
    if message.startswith("converged") and gap > tol * (1 + 1e-6):
        message = (f"converged by the iterates' gap estimate (below tol = {tol:g}); the strategy's "
                   f"certified gap is {gap:.2e}")
    info = {
        "objective": objective,
        "value": value,
        "lower_bound": lower,
        "relative_gap": gap,
        "tse": tse,
        "max_variance": max_variance,
        "path": path,
        "iterations": iterations,
        "evaluations": evaluations,
        "message": message,
        "value_trace": np.asarray(value_trace) * s2,
        "bound_trace": np.asarray(bound_trace) * s2,
        "multipliers": None if v is None else np.asarray(v) / np.sum(v),
        "row_weights": None if lam is None else np.asarray(lam) / np.sum(lam),
    }
    A = Dense(C, name=name)
    optimization.report(f"lt_opt ({objective}): done", max(iterations, 1), max(iterations, 1), tse)
    result = optimization.OptimizationResult(
        strategy=A, objective=float(tse), trace=np.asarray(tse_trace, dtype=float) * s2,
        restarts=np.asarray([tse]), seconds=time.perf_counter() - t0, seed=None, method="lt_opt",
        info=info)
    optimization.attach(result)
    return A


# ============================================================ registry
def scope(W: Matrix, noise: NoiseModel) -> None:
    """Refuse, before any work, what LT-Opt cannot do (the registry's scope check).

    A workload that is not causal (:func:`dpexplorer.streaming.workload.scope`),
    Laplace noise (the optimisation is for L2 sensitivity), or more steps than
    :data:`MAX_STEPS` (:data:`MAX_STEPS_DENSE` for a workload whose inverse is
    not bidiagonal).

    Raises
    ------
    NotApplicableError
        Naming which of those and what to choose instead.
    """
    workload.scope(W, noise)
    if getattr(noise, "norm", None) != 2:
        raise NotApplicableError(
            "LT-Opt is an (ε,δ) mechanism: it minimises the error under L2 sensitivity, which only "
            "Gaussian noise uses (Denisov et al., NeurIPS 2022, Sec. 3: single participation, Gaussian "
            "noise); choose Gaussian noise")
    W = as_matrix(W)
    T = W.n
    if T > MAX_STEPS:
        raise NotApplicableError(_too_long(T, MAX_STEPS, None))
    if T > MAX_STEPS_DENSE:
        base = workload._base(W)
        if not isinstance(base, Prefix | Identity) and _bidiagonal_inverse(np.asarray(W.dense())) is None:
            raise NotApplicableError(_too_long(T, MAX_STEPS_DENSE, "dense"))


def _build(W: Matrix, noise: NoiseModel, objective: str = "sum") -> Matrix:
    return lt_opt(W, objective)


registry.register(registry.Mechanism(
    "lt_opt", "LT-Opt", _build,
    "Optimal lower-triangular factorisation W = B·C for Gaussian noise: total or worst-step error "
    "minimised through the convex dual over column multipliers (online).",
    "Denisov, McMahan, Rush, Smith & Thakurta, NeurIPS 2022, Sec. 3 (Thm 3.2); Yuan et al., KDD "
    "2016; docs: continual",
    params={"objective": "sum"}, scope=scope, optimizer=True, online=True,
    audit=registry.AuditSpec(workload="prefix", cells=8, noise="gaussian")))
