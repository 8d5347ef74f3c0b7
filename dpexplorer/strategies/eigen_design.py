"""Eigen-Design: optimally weighted eigen-queries (Li & Miklau, PVLDB 2012).

The (ε, δ) matrix mechanism answers a workload ``W: (m, n)`` from a strategy
``A`` with expected total squared error ``v · Δ₂(A)² · tr(WᵀW (AᵀA)⁺)``
(Li & Miklau, PVLDB 2012, Prop. 4), ``v = c(ε, δ)²`` the
Gaussian noise variance per unit L2 sensitivity.  Eigen-Design (Program 2,
Sec. 3.3) restricts ``A`` to weighted *eigen-queries* of the workload:

1. eigen-decompose ``WᵀW = Qᵀ D Q`` (``D = diag(σ_1 ≥ ... ≥ σ_r > 0)``; rows
   of ``Q`` are the eigen-queries; zero eigenvalues are dropped, Sec. 4.1).
   When ``W`` has fewer rows than cells (low rank, e.g. low-order
   marginals) the thin SVD ``W = U Σ Vᵀ`` gives them (``σ = Σ²``, ``Q = Vᵀ``)
   in ``O(m²n)``, the saving of Sec. 4.1; otherwise the dense Gram is
   eigen-decomposed (``O(n³)``);
2. solve Program 1 (Sec. 3.1, Thm 1) for weights ``u_i = λ_i²``::

       minimise    Σ_i σ_i / u_i
       subject to  (Q∘Q)ᵀ u ≤ 1   (every column's squared L2 norm ≤ 1),  u ≥ 0

   -- the unit TSE of ``A' = diag(√u) Q``, since ``tr(WᵀW (A'ᵀA')⁺) =
   Σ σ_i/u_i`` and ``Δ₂(A')² = max_j ((Q∘Q)ᵀu)_j``;
3. ``A' = diag(√u) Q``;
4. completion (steps 4-5): append diagonal rows ``d_j e_j`` with
   ``d_j² = max_k ‖A'_k‖² − ‖A'_j‖²`` so that every column has the largest
   column norm: the sensitivity does not change and ``AᵀA`` only grows, so
   the error can only fall;
5. normalise to ``Δ₂(A) = 1``.

**How Program 1 is solved here.**  Program 1 is a convex program in ``u``
(the paper solves it as an SDP with cvxopt/DSDP).  Its Lagrangian with
multipliers ``y ≥ 0`` (one per column constraint) is
``L(u, y) = Σ_i σ_i/u_i + yᵀ((Q∘Q)ᵀu − 1)``.  For fixed ``y``, with
``z = (Q∘Q) y``, each ``σ_i/u_i + u_i z_i`` is minimised at
``u_i = sqrt(σ_i / z_i)`` with value ``2 sqrt(σ_i z_i)``, so the dual is the
concave maximisation

    max_{y ≥ 0}  g(y) = 2 Σ_i sqrt(σ_i ((Q∘Q) y)_i) − Σ_j y_j,
    ∇g(y) = (Q∘Q)ᵀ u(y) − 1   (the constraint residual of u(y)).

Slater's condition holds (a small ``u > 0`` is strictly feasible), so the
dual optimum equals the primal optimum.  We maximise ``g`` with scipy's
L-BFGS-B (bounds ``y ≥ 0``, analytic gradient; ``O(r·n)`` per evaluation),
recover ``u(y)``, rescale it by ``1 / max_j ((Q∘Q)ᵀu)_j`` to make it
feasible, and report the duality gap ``f(u) − g(y) ≥ 0`` (a certificate:
``f(u)`` is within the gap of the optimum of Program 1).  Two numerical
details: the bound is ``y ≥ 10⁻¹²·t`` rather than 0 (``g`` has an infinite
slope where ``(Q∘Q)y`` has a zero entry), and L-BFGS-B is restarted from
its last point while the gap exceeds ``1e-9`` (it can stall on this dual,
which is flat in ``n − r`` directions).  Typical gaps are ``1e-8`` or less.  The start is
``y = t·1`` with the best ``t``: since the rows of ``Q`` are unit vectors,
``g(t·1)`` is exactly ``(Σ_i √σ_i)² / n = SVDB(W)`` (Thm 2) -- the SVD
bound is the dual value of the uniform multiplier, and the optimiser only
climbs from there.  No randomness is involved: the optimiser is
deterministic (the OptimizationResult's ``seed`` is None).

The same solver handles the generalised problem ``min Σ_k c_k/u_k`` s.t.
``Sᵀu ≤ 1`` (:func:`optimal_weights`) used by the two reductions of
Sec. 4.2:

* **eigen-query separation** (``group_size=g``): eigen-queries in order of
  decreasing eigenvalue are cut into groups of ``g``; Program 1 is solved for
  each group alone (the other eigenvalues set to zero), then once more over
  one factor ``f_t`` per group with ``c_t = Σ_{i∈t} σ_i/u_i`` and
  ``S_t = Σ_{i∈t} u_i (Q_i∘Q_i)``;
* **principal vectors** (``principal=k`` or a fraction such as ``0.1`` of
  the rank): the top ``k`` eigen-queries get their own weights and all the
  others (non-zero eigenvalues) one shared weight: ``k + 1`` design rows with
  ``c_rest = Σ_{i>k} σ_i`` and ``S_rest = Σ_{i>k} Q_i∘Q_i``.

With the dual solver the full problem already costs only ``O(r·n)`` per
iteration, so these reductions save little time here (the eigendecomposition
dominates); they are kept because the paper evaluates them (Sec. 5.2, Fig. 4).

**Relative error** (Sec. 3.4): every workload row is scaled to unit L2 norm
before the design, ``Ŵ = diag(1/‖w_i‖) W``, which assumes a uniform data
distribution.  Only ``ŴᵀŴ = Σ_i w_iw_iᵀ/‖w_i‖²`` is needed
(:func:`row_normalized_gram`); it is computed without materialising the
rows of implicit workloads (see that function).

**Noise.**  Eigen-Design is an (ε, δ) mechanism: it optimises the L2
sensitivity, which is a function of ``AᵀA`` alone; the L1 sensitivity is
not, the eigen-queries ignore it and the paper gives no ε-DP version
(Sec. 3.5).  Laplace noise is therefore refused with
:class:`~dpexplorer.core.registry.NotApplicableError`.

Registered mechanism: ``"eigen_design"``.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize
from threadpoolctl import threadpool_limits

from ..core import error, optimization, registry
from ..privacy.noise import NoiseModel
from ..queries.matrix import (
    DENSE_LIMIT,
    AllRange,
    Dense,
    Diagonal,
    Identity,
    Kronecker,
    Matrix,
    MatrixTooLargeError,
    Ones,
    Permutation,
    Prefix,
    Product,
    RangeQueries,
    Sparse,
    VStack,
    Weighted,
    as_matrix,
)
from . import templates

__all__ = [
    "MAX_CELLS",
    "WeightsResult",
    "EigenDesignStrategy",
    "optimal_weights",
    "eigen_queries",
    "row_normalized_gram",
    "eigen_design",
    "scope",
]

#: Largest domain (number of cells ``n``) Eigen-Design accepts: it needs a dense
#: ``n × n`` Gram matrix and its full eigendecomposition (512 MiB and minutes at 8192).
MAX_CELLS = 8192

#: Lower bound of the scaled dual variables ``y / t0`` (instead of 0): keeps every
#: ``(S y)_k > 0``, where ``g`` has an infinite slope, so the line search never
#: stalls on the boundary; it moves the dual optimum by a relative ``O(1e-12)``.
_FLOOR = 1e-12

#: Most L-BFGS-B runs (restarts from the last point) of one Program-1 solve.
_MAX_RUNS = 10

#: Size ``K·n`` of ``S`` from which the dual iterations use all BLAS threads.
_THREADED_SIZE = 2**22

#: Rows of an implicit workload streamed by :func:`row_normalized_gram` when it
#: has no closed form: at most this many entries ``m·n`` are visited.
_STREAM_LIMIT = 16 * DENSE_LIMIT


# ===================================================================== Program 1
@dataclass
class WeightsResult:
    """Solution of ``min Σ_k c_k/u_k`` s.t. ``Sᵀu ≤ 1``, ``u ≥ 0`` (Program 1, generalised).

    Attributes
    ----------
    u : ndarray, shape (K,)
        Feasible weights (``max_j (Sᵀu)_j = 1``): squared weights of the design rows.
    primal : float
        ``Σ_k c_k/u_k`` at ``u`` (an upper bound on the optimum).
    dual : float
        Dual value ``g(y)`` at the final multipliers (a lower bound on the optimum).
    gap : float
        Relative duality gap ``(primal − dual) / primal``.
    trace : ndarray
        Primal value of the recovered feasible ``u`` after every L-BFGS-B iteration.
    dual_trace : ndarray
        Dual value after every iteration (non-decreasing).
    iterations : int
    converged : bool
        Whether the relative duality gap is at most ``1e-6`` (the L-BFGS-B
        stopping reason is in ``message``).
    message : str
    """

    u: np.ndarray
    primal: float
    dual: float
    gap: float
    trace: np.ndarray = field(default_factory=lambda: np.zeros(0))
    dual_trace: np.ndarray = field(default_factory=lambda: np.zeros(0))
    iterations: int = 0
    converged: bool = True
    message: str = ""


def optimal_weights(c, S, *, maxiter: int = 5000, tol: float = 0.0, gap_tol: float = 1e-9,
                    stage: str = "eigen_design") -> WeightsResult:
    """Optimal query weighting (Li & Miklau 2012, Program 1), through its concave dual.

    Solves ``minimise Σ_k c_k / u_k  subject to  Sᵀu ≤ 1, u ≥ 0``.  With
    ``c = σ`` (eigenvalues of ``WᵀW``) and ``S = Q∘Q`` (squared entries of
    the eigen-queries) this is Program 1: ``u_k`` is the squared weight of
    design query ``k`` and ``(Sᵀu)_j`` the squared L2 norm of column ``j`` of
    the weighted design.  The dual ``max_{y≥0} 2 Σ_k sqrt(c_k (S y)_k) − Σ_j y_j``
    (derived in the module docstring) is maximised with scipy's L-BFGS-B;
    ``u_k = sqrt(c_k / (S y)_k)`` is recovered and rescaled to feasibility.

    Parameters
    ----------
    c : array_like, shape (K,)
        Positive costs (eigenvalues ``σ_k``).
    S : array_like, shape (K, n)
        Non-negative column contributions; every row must have a positive entry.
    maxiter : int
        L-BFGS-B iteration limit.
    tol : float
        Relative tolerance on the dual value (L-BFGS-B ``ftol``).  The default
        0 runs until the projected gradient vanishes (``1e-12``) or the line
        search can make no more progress in double precision: the dual is
        flat in ``n − K`` directions when ``K < n`` (its Hessian has rank
        ``≤ K``), and a looser ``ftol`` can stop with a duality gap of
        ``1e-3``; with 0 the gaps are ``1e-8`` or less.
    gap_tol : float
        L-BFGS-B is restarted from its last point (at most 10 runs in all)
        while the relative duality gap is above this.
    stage : str
        Label passed to :func:`dpexplorer.core.optimization.report` every iteration.

    Returns
    -------
    WeightsResult
        Feasible ``u``, primal and dual values, the duality gap and the traces.

    Raises
    ------
    ValueError
        If ``c`` is not positive and finite, ``S`` is not a non-negative finite
        ``(K, n)`` array with a positive entry in every row, or ``maxiter < 1``.
    """
    c = np.asarray(c, dtype=float)
    S = np.asarray(S, dtype=float)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"c must be a non-empty 1D array of costs, got shape {c.shape}")
    if not np.all(np.isfinite(c)) or np.any(c <= 0):
        raise ValueError("c must be positive and finite (drop zero eigenvalues first)")
    if S.ndim != 2 or S.shape[0] != c.size:
        raise ValueError(f"S must have shape (K, n) = ({c.size}, n), got {S.shape}")
    if not np.all(np.isfinite(S)) or np.any(S < 0):
        raise ValueError("S must be non-negative and finite (squared column contributions)")
    if np.any(S.max(axis=1) <= 0):
        raise ValueError("every design row needs a positive entry in S (a zero row cannot be weighted)")
    maxiter = templates._check_count(maxiter, "maxiter", allow_none=False)
    K, n = S.shape
    sqrt_c = np.sqrt(c)
    row_sums = S.sum(axis=1)
    # best uniform multiplier y = t·1: g(t) = 2√t Σ sqrt(c_k s_k) − n t, maximised at √t = Σ/n
    t0 = (np.sum(sqrt_c * np.sqrt(row_sums)) / n) ** 2
    g0 = np.sum(sqrt_c * np.sqrt(row_sums)) ** 2 / n  # g(t0·1); the SVD bound for eigen-queries
    tiny = 1e-300

    def u_of(y):
        z = np.maximum(S @ y, tiny)
        return sqrt_c / np.sqrt(z), z

    # optimise the scaled variables x = y / t0 and the scaled value g / g0 (both O(1))
    def negdual(x):
        y = t0 * x
        u, z = u_of(y)
        g = 2.0 * np.dot(sqrt_c, np.sqrt(z)) - y.sum()
        grad = (S.T @ u - 1.0) * (t0 / g0)
        return -g / g0, -grad

    def primal_of(y):
        u, _ = u_of(y)
        top = float(np.max(S.T @ u))
        u = u / top
        return u, float(np.sum(c / u))

    trace: list[float] = []
    dual_trace: list[float] = []

    def callback(x):
        y = t0 * x
        _, p = primal_of(y)
        trace.append(p)
        dual_trace.append(-negdual(x)[0] * g0)
        optimization.report(stage, len(trace), maxiter, p)

    # small products S @ y run faster on one BLAS thread (no thread wake-ups per iteration)
    limit = threadpool_limits(limits=1, user_api="blas") if K * n < _THREADED_SIZE else nullcontext()
    x = np.ones(n)
    iterations = runs = 0
    with limit:
        while True:
            # L-BFGS-B can stall (no decrease along its quasi-Newton direction) on this dual,
            # which is flat in n − K directions; a fresh run from the last point (new memory)
            # moves on, so runs are repeated while the duality gap is above gap_tol
            res = scipy.optimize.minimize(
                negdual, x, jac=True, method="L-BFGS-B", bounds=[(_FLOOR, None)] * n,
                callback=callback,
                options={"maxiter": int(maxiter) - iterations, "maxcor": 20, "ftol": float(tol),
                         "gtol": 1e-12},
            )
            x = res.x
            iterations += int(res.nit)
            runs += 1
            u, primal = primal_of(t0 * x)
            dual = float(-res.fun * g0)
            gap = max(primal - dual, 0.0) / primal
            if gap <= gap_tol or iterations >= maxiter or runs >= _MAX_RUNS or res.nit == 0:
                break
    if not trace:  # converged at the start point
        trace.append(primal)
        dual_trace.append(dual)
    return WeightsResult(u=u, primal=primal, dual=dual, gap=gap, trace=np.asarray(trace),
                         dual_trace=np.asarray(dual_trace), iterations=iterations,
                         converged=bool(gap <= 1e-6), message=f"{res.message} ({runs} run(s))")


# ============================================================== eigen-queries
def eigen_queries(G, rtol: float = 1e-10) -> tuple[np.ndarray, np.ndarray]:
    """Eigen-queries of a workload from its Gram matrix (Li & Miklau Def. 6, Program 2 step 1).

    Parameters
    ----------
    G : array_like, shape (n, n)
        ``WᵀW`` (symmetric positive semi-definite).
    rtol : float
        Eigenvalues at most ``rtol · σ_max`` are treated as zero and dropped
        (they play no part in Program 1, Sec. 4.1).

    Returns
    -------
    sigma : ndarray, shape (r,)
        The non-zero eigenvalues in decreasing order (``r = rank(W)``).
    Q : ndarray, shape (r, n)
        Orthonormal rows: the matching eigenvectors.

    Raises
    ------
    ValueError
        If ``G`` is not square and finite, or has no positive eigenvalue.
    """
    G = np.asarray(G, dtype=float)
    if G.ndim != 2 or G.shape[0] != G.shape[1]:
        raise ValueError(f"a Gram matrix must be square, got shape {G.shape}")
    if not np.all(np.isfinite(G)):
        raise ValueError("the Gram matrix has NaN or inf entries")
    w, V = np.linalg.eigh(G)
    top = w.max(initial=0.0)
    if not top > 0:
        raise ValueError("the workload has no non-zero eigenvalue: every query is zero")
    keep = w > rtol * top
    order = np.flatnonzero(keep)[::-1]
    return w[order], np.ascontiguousarray(V[:, order].T)


def _workload_eigen(W: Matrix, relative: bool, rtol: float):
    """``(σ, Q, G)`` for ``W`` (or its row-normalised form): eigen-queries by the cheapest route.

    Few queries (``m < n``, rows materialisable): the thin SVD ``W = U Σ Vᵀ``
    gives ``σ = Σ²`` and ``Q = Vᵀ`` in ``O(m² n)`` without an ``n × n``
    eigendecomposition -- the low-rank saving of Li & Miklau Sec. 4.1 (e.g.
    low-order marginals).  Otherwise the dense Gram is eigen-decomposed.
    ``G`` is the Gram of the row-normalised workload when ``relative`` (else None).
    """
    if W.m < W.n and W.m * W.n <= DENSE_LIMIT:
        D = W.dense()
        if relative:
            norms = np.sqrt(np.einsum("ij,ij->i", D, D))
            D = D[norms > 0] / norms[norms > 0, None]
        if not np.any(D):
            raise ValueError("the workload has no non-zero eigenvalue: every query is zero")
        _, sv, Vt = np.linalg.svd(D, full_matrices=False)
        sigma = sv**2
        keep = sigma > rtol * sigma[0]
        return sigma[keep], np.ascontiguousarray(Vt[keep]), (D.T @ D if relative else None)
    G = row_normalized_gram(W) if relative else W.gram().dense()
    sigma, Q = eigen_queries(G, rtol)
    return sigma, Q, (G if relative else None)


# ======================================================== relative-error scaling
def _ranges_normalized_gram(M, n: int) -> np.ndarray:
    """``Σ_q 1_q 1_qᵀ / |q|`` over inclusive intervals by a 2D difference array, ``O(m + n²)``."""
    lo, hi = M.ranges()
    w = 1.0 / (hi - lo + 1).astype(float)
    D = np.zeros((n + 1, n + 1))
    np.add.at(D, (lo, lo), w)
    np.add.at(D, (lo, hi + 1), -w)
    np.add.at(D, (hi + 1, lo), -w)
    np.add.at(D, (hi + 1, hi + 1), w)
    return np.cumsum(np.cumsum(D, axis=0), axis=1)[:n, :n]


def _scaled_rows_gram(R: np.ndarray) -> np.ndarray:
    norms = np.einsum("ij,ij->i", R, R)
    keep = norms > 0
    Rk = R[keep]
    return (Rk / norms[keep, None]).T @ Rk


def _normalized_gram(M: Matrix) -> np.ndarray:
    n = M.n
    if isinstance(M, Weighted):  # a weight scales rows and norms alike
        return np.zeros((n, n)) if M.weight == 0 else _normalized_gram(M.base)
    if isinstance(M, VStack):
        total = _normalized_gram(M.blocks[0]).copy()
        for b in M.blocks[1:]:
            total += _normalized_gram(b)
        return total
    if isinstance(M, Kronecker):  # rows ⊗ r_i have norms Π ‖r_i‖: normalise factor by factor
        out = np.ones((1, 1))
        for f in M.factors:
            out = np.kron(out, _normalized_gram(f))
        return out
    if isinstance(M, Identity | Permutation):
        return np.eye(n)
    if isinstance(M, Ones):  # m rows 1ᵀ of norm² n
        return np.full((n, n), M.m / n)
    if isinstance(M, Diagonal):
        return np.diag((M.v != 0).astype(float))
    if isinstance(M, Prefix | AllRange | RangeQueries):
        return _ranges_normalized_gram(M, n)
    if isinstance(M, Product) and isinstance(M.right, Permutation):
        inv = M.right.inverse  # a column permutation keeps row norms
        return _normalized_gram(M.left)[np.ix_(inv, inv)]
    if isinstance(M, Dense):
        return _scaled_rows_gram(M.array)
    if isinstance(M, Sparse):
        S = M.matrix
        norms = np.asarray(S.multiply(S).sum(axis=1)).ravel()
        scale = np.zeros_like(norms)
        scale[norms > 0] = 1.0 / norms[norms > 0]
        return np.asarray((S.T @ (S.multiply(scale[:, None]).tocsr())).toarray())
    # generic: stream the rows in chunks (rows i..j are Mᵀ applied to unit vectors)
    if M.m * n > _STREAM_LIMIT:
        raise registry.NotApplicableError(
            f"relative-error scaling needs the rows of {M.name!r} ({type(M).__name__}, "
            f"{M.m:,} × {n:,}), which has no closed form for its row-normalised Gram and is too "
            f"large to stream ({M.m * n:,} entries > {_STREAM_LIMIT:,})")
    out = np.zeros((n, n))
    step = max(1, DENSE_LIMIT // (8 * max(n, 1)))
    for start in range(0, M.m, step):
        stop = min(M.m, start + step)
        E = np.zeros((M.m, stop - start))
        E[np.arange(start, stop), np.arange(stop - start)] = 1.0
        out += _scaled_rows_gram(M._rmatmat(E).T)
    return out


def row_normalized_gram(W) -> np.ndarray:
    """``ŴᵀŴ`` for the workload with every row scaled to unit L2 norm (Li & Miklau Sec. 3.4).

    ``ŴᵀŴ = Σ_i w_i w_iᵀ / ‖w_i‖²`` (zero rows are left out).  Implicit
    workloads are never expanded into rows: a weight cancels; a union sums
    its blocks; a Kronecker product's rows have norms that multiply, so its
    normalised Gram is the Kronecker product of the factors'; Identity and
    permutations give ``I``; ``Ones(m, n)`` gives ``(m/n) J``; interval
    workloads (Prefix, All Range, explicit ranges) give
    ``Σ_q 1_q1_qᵀ/|q|`` by a 2D difference array in ``O(m + n²)``; a
    column-permuted workload permutes its base's.  Dense and sparse
    workloads are scaled directly; any other implicit workload is streamed
    row-chunk by row-chunk (up to ``16·2**26`` visited entries).

    Parameters
    ----------
    W : Matrix or array, shape (m, n)

    Returns
    -------
    ndarray, shape (n, n)

    Raises
    ------
    NotApplicableError
        If ``n > MAX_CELLS`` or an implicit workload without a closed form is
        too large to stream.
    """
    W = as_matrix(W)
    if W.n > MAX_CELLS:
        raise registry.NotApplicableError(
            f"Eigen-Design needs a dense n × n Gram matrix; n = {W.n:,} cells is above {MAX_CELLS:,}")
    return _normalized_gram(W)


# ================================================================== strategy
class EigenDesignStrategy(Dense):
    """The Eigen-Design strategy ``A = [diag(√u) Q; D'] / √top`` as a dense matrix.

    A :class:`~dpexplorer.queries.matrix.Dense` that remembers its factorisation so
    that, when no completion rows were needed (``D' = 0``, e.g. marginal
    workloads, whose eigen-designs have equal column norms already), the
    error trace needs no ``n × n`` factorisation:
    ``(AᵀA)⁺ = top · Qᵀ diag(1/u) Q`` (rows of ``Q`` orthonormal), so
    ``tr(WᵀW (AᵀA)⁺) = top · Σ_i ‖W q_i‖² / u_i``.

    Parameters
    ----------
    sigma : ndarray, shape (r,)
        Eigenvalues of the workload Gram the design was made for.
    Q : ndarray, shape (r, n)
        Its eigen-queries (orthonormal rows).
    u : ndarray, shape (r,)
        Positive squared weights of the eigen-queries (Program 1's solution).
    complete : bool
        Append the completion rows of Program 2 steps 4-5: ``d_j e_j`` with
        ``d_j² = top − ‖A'_j‖²``, ``top`` the largest squared column norm of
        ``A' = diag(√u) Q`` (columns within ``1e-12·top`` of it get none).
    name : str

    Attributes
    ----------
    top : float
        Largest squared column norm of ``A'``; the matrix is ``[A'; D'] / √top``
        (``Δ₂ = 1``).
    completion_rows : int
        Number of completion rows.
    sigma : ndarray, shape (r,)
        Eigenvalues of the (possibly row-normalised) workload Gram.
    Q : ndarray, shape (r, n)
        Eigen-queries.
    u : ndarray, shape (r,)
        Squared weights (feasible for Program 1: largest column norm² 1).
    completion : ndarray, shape (n,)
        Squared completion entries ``d_j²`` (before normalisation).
    """

    def __init__(self, sigma, Q, u, complete: bool = True, name: str = "eigen_design"):
        A1 = np.sqrt(u)[:, None] * Q
        col2 = np.einsum("ij,ij->j", A1, A1)
        top = float(col2.max())
        d2 = top - col2
        keep = d2 > 1e-12 * top if complete else np.zeros(col2.size, dtype=bool)
        idx = np.flatnonzero(keep)
        D = np.zeros((idx.size, Q.shape[1]))
        D[np.arange(idx.size), idx] = np.sqrt(d2[idx])
        super().__init__(np.vstack([A1, D]) / math.sqrt(top), name=name)
        self.sigma, self.Q, self.u = sigma, Q, u
        self.completion = np.where(keep, d2, 0.0)
        self.top = top
        self.completion_rows = int(idx.size)

    def workload_trace(self, W):
        """``tr(WᵀW (AᵀA)⁺)`` without an ``n × n`` factorisation when ``A`` has no completion rows.

        Support: ``A`` (rows ``√u_i q_i``) supports ``W`` iff ``W`` has no
        component outside ``span(q_i)``, i.e. ``‖W‖_F² = Σ_i ‖W q_i‖²``
        (checked to a relative ``1e-8``).

        Parameters
        ----------
        W : Matrix, shape (m, n)
            The workload (``n`` the strategy's number of cells).

        Returns
        -------
        float or NotImplemented
            NotImplemented when completion rows are present or ``W`` has
            another number of cells (the generic path of :mod:`dpexplorer.core.error`
            then applies or reports the mismatch).

        Raises
        ------
        UnsupportedWorkloadError
            If ``W`` has a component outside the span of the eigen-queries.
        """
        if self.completion_rows:
            return NotImplemented
        W = as_matrix(W)
        if W.n != self.n:
            return NotImplemented
        GQ = W.gram().matvec(self.Q.T)  # (n, r)
        inside = np.einsum("ij,ji->i", self.Q, GQ)  # ‖W q_i‖²
        total = W.frobenius_squared()
        if total - inside.sum() > 1e-8 * max(total, 1e-300):
            raise error.UnsupportedWorkloadError(
                f"strategy {self.name!r} does not support workload {W.name!r}: the workload has a "
                f"component outside the span of the eigen-queries it was designed from")
        return float(self.top * np.sum(inside / self.u))


# =============================================================== main entry
def scope(W, noise) -> None:
    """Refuse, before any work, what Eigen-Design cannot take: Laplace noise, ``n > MAX_CELLS``.

    ``W``: workload ``(m, n)`` (a Matrix or array); ``noise``: a Gaussian noise model or
    None.  The registry's cheap check (:attr:`dpexplorer.core.registry.Mechanism.scope`),
    also the first step of :func:`eigen_design`.

    Raises
    ------
    NotApplicableError
        For Laplace noise (Li & Miklau 2012, Sec. 3.5: an (ε, δ) mechanism) or
        ``n > MAX_CELLS`` (the dense ``n × n`` eigendecomposition).
    ValueError
        For a noise object that is neither Gaussian nor None.
    """
    _check_noise(noise)
    n = as_matrix(W).n
    if n > MAX_CELLS:
        raise registry.NotApplicableError(
            f"Eigen-Design needs a dense n × n Gram matrix and its eigendecomposition; "
            f"n = {n:,} cells is above the limit of {MAX_CELLS:,} (use HDMM's Kronecker or "
            f"marginal optimisers for large multi-dimensional domains)")


def _check_noise(noise) -> None:
    if noise is None:
        return
    norm = getattr(noise, "norm", None)
    if norm == 1:
        raise registry.NotApplicableError(
            "Eigen-Design is an (ε,δ) mechanism: it optimises the L2 sensitivity, which only "
            "Gaussian noise uses (Li & Miklau 2012, Sec. 3.5 gives no ε-DP version); "
            "choose Gaussian noise")
    if norm != 2:
        raise ValueError(f"noise must be a Gaussian noise model (or None), got {noise!r}")


def _check_group_size(group_size, n: int):
    if group_size is None:
        return None
    if isinstance(group_size, bool) or not isinstance(group_size, int | np.integer):
        raise ValueError(f"group_size must be a whole number ≥ 1 (or None), got {group_size!r}")
    if not 1 <= group_size <= n:
        raise ValueError(f"group_size must be in [1, n] = [1, {n}], got {group_size}")
    return int(group_size)


def _principal_count(principal, r: int, n: int):
    """Number ``k`` of principal eigen-queries from an int ``k`` or a fraction in ``(0, 1]``."""
    if principal is None:
        return None
    if isinstance(principal, bool):
        raise ValueError(f"principal must be a count k ≥ 1 or a fraction in (0, 1], got {principal!r}")
    if isinstance(principal, int | np.integer):
        if not 1 <= principal <= n:
            raise ValueError(f"principal = {principal}: a count of eigen-queries must be in [1, n] = [1, {n}]")
        return min(int(principal), r)
    if isinstance(principal, float | np.floating):
        if not (0.0 < principal <= 1.0):
            raise ValueError(f"principal as a fraction of the eigen-queries must be in (0, 1], got {principal!r}")
        return max(1, math.ceil(float(principal) * r))
    raise ValueError(f"principal must be a count k ≥ 1 or a fraction in (0, 1], got {principal!r}")


def eigen_design(W, noise: NoiseModel | None = None, group_size: int | None = None,
                 principal: int | float | None = None, relative: bool = False, *,
                 complete: bool = True, eig_rtol: float = 1e-10, maxiter: int = 5000,
                 tol: float = 0.0) -> optimization.OptimizationResult:
    """Eigen-Design strategy for ``W`` under (ε, δ)-DP (Li & Miklau 2012, Program 2, Sec. 3-4).

    See the module docstring for the method, the dual solver of Program 1,
    the reductions and the relative-error scaling.

    Parameters
    ----------
    W : Matrix or array, shape (m, n)
        The workload; ``n ≤ MAX_CELLS`` (8192).
    noise : NoiseModel, optional
        ``Gaussian(ε, δ)`` or None (the strategy does not depend on ε, δ).
    group_size : int, optional
        Eigen-query separation (Sec. 4.2): groups of this many eigen-queries.
    principal : int or float, optional
        Principal vectors (Sec. 4.2): the top ``k`` eigen-queries (an int in
        ``[1, n]``, capped at the rank) or that fraction of the rank (a float
        in ``(0, 1]``) get their own weights; the rest share one.
    relative : bool
        Design for relative error: scale every workload row to unit L2 norm
        first (Sec. 3.4; :func:`row_normalized_gram`).
    complete : bool
        Append the completion rows of Program 2 steps 4-5 (default).
    eig_rtol : float
        Eigenvalues at most ``eig_rtol · σ_max`` count as zero.
    maxiter, tol
        L-BFGS-B iteration limit and relative tolerance of every Program-1 solve.

    Returns
    -------
    OptimizationResult
        ``strategy``: an :class:`EigenDesignStrategy` (a ``matrix.Dense``,
        shape ``(r + c, n)``, ``r`` the rank of ``W`` and ``c`` the completion
        rows) with ``Δ₂ = 1``; ``objective``: its unit TSE on ``W``
        (``error.unit_tse(W, A, 2)``; multiply by ``noise.variance_per_unit``
        for squared counts); ``trace``: Program-1 objective (of the final
        solve: the whole problem, or the combination of groups) after every
        L-BFGS-B iteration; ``method`` ``"eigen_design"``; ``info``: rank,
        ``program1`` (its primal value), ``duality_gap``, iterations, variant,
        ``completion_rows``, ``svdb``, ``relative_objective`` (unit TSE on the
        row-normalised workload, if ``relative``).

    Raises
    ------
    NotApplicableError
        For Laplace noise (Eigen-Design is an (ε, δ) mechanism) or
        ``n > MAX_CELLS``.
    ValueError
        For bad parameters (both ``group_size`` and ``principal``, values out
        of range), a non-Gaussian noise object, or an all-zero workload.
    """
    t_start = time.perf_counter()
    W = as_matrix(W)
    scope(W, noise)
    if group_size is not None and principal is not None:
        raise ValueError("choose one reduction: group_size (eigen-query separation) or principal "
                         "(principal vectors), not both")
    group_size = _check_group_size(group_size, W.n)
    if not isinstance(relative, bool | np.bool_):
        raise ValueError(f"relative must be True or False, got {relative!r}")
    if not (isinstance(eig_rtol, float | int) and 0 <= eig_rtol < 1):
        raise ValueError(f"eig_rtol must be in [0, 1), got {eig_rtol!r}")

    optimization.report("eigen_design: eigendecomposition", 0, 0)
    try:
        sigma, Q, G = _workload_eigen(W, bool(relative), eig_rtol)
    except MatrixTooLargeError as exc:  # pragma: no cover - n ≤ MAX_CELLS fits the limit
        raise registry.NotApplicableError(str(exc)) from exc
    r = sigma.size
    k = _principal_count(principal, r, W.n)
    S = Q * Q
    info: dict = {"rank": r, "n": W.n, "relative": bool(relative), "complete": bool(complete)}

    if k is not None and k < r:
        variant = f"principal vectors (k = {k} of {r})"
        c = np.append(sigma[:k], sigma[k:].sum())
        Sk = np.vstack([S[:k], S[k:].sum(axis=0)])
        res = optimal_weights(c, Sk, maxiter=maxiter, tol=tol, stage="eigen_design principal vectors")
        u = np.append(res.u[:k], np.full(r - k, res.u[k]))
        info["principal"] = k
    elif group_size is not None and group_size < r:
        groups = [np.arange(s, min(s + group_size, r)) for s in range(0, r, group_size)]
        variant = f"eigen-query separation ({len(groups)} groups of ≤ {group_size})"
        inner = np.empty(r)
        costs, rows, group_gaps = [], [], []
        for t, idx in enumerate(groups):
            gres = optimal_weights(sigma[idx], S[idx], maxiter=maxiter, tol=tol,
                                   stage=f"eigen_design group {t + 1}/{len(groups)}")
            inner[idx] = gres.u
            costs.append(gres.primal)
            rows.append(gres.u @ S[idx])
            group_gaps.append(gres.gap)
        res = optimal_weights(np.asarray(costs), np.vstack(rows), maxiter=maxiter, tol=tol,
                              stage="eigen_design combine groups")
        u = inner * np.repeat(res.u, [idx.size for idx in groups])
        info.update(group_size=group_size, groups=len(groups), group_gaps=np.asarray(group_gaps))
    else:
        variant = "full"
        res = optimal_weights(sigma, S, maxiter=maxiter, tol=tol, stage="eigen_design Program 1")
        u = res.u

    strategy = EigenDesignStrategy(sigma, Q, u, complete)
    objective = error.unit_tse(W, strategy, 2)
    info.update(variant=variant, program1=res.primal, dual=res.dual, duality_gap=res.gap,
                iterations=res.iterations, converged=res.converged, message=res.message,
                dual_trace=res.dual_trace, completion_rows=strategy.completion_rows)
    # SVD bound (Thm 2) of the workload the design was made for (row-normalised if relative)
    info["svdb"] = float(np.sum(np.sqrt(sigma)) ** 2 / W.n)
    if relative:  # unit TSE on the row-normalised workload, the objective actually optimised
        info["relative_objective"] = _trace_with_gram(G, strategy)
    optimization.report("eigen_design", 1, 1, objective)
    return optimization.OptimizationResult(
        strategy=strategy, objective=float(objective), trace=np.asarray(res.trace),
        restarts=np.asarray([objective]), seconds=time.perf_counter() - t_start, seed=None,
        method="eigen_design", info=info)


def _trace_with_gram(G: np.ndarray, A: Matrix) -> float:
    """``Δ₂(A)² · tr(G (AᵀA)⁺)`` for a dense workload Gram ``G`` (unit TSE of that workload)."""
    inv = error.GramInverse(A.gram().dense())
    return A.sensitivity(2) ** 2 * inv.trace(G)


# ================================================================== registry
def _build(W, noise, group_size=None, principal=None, relative=False):
    return optimization.attach(eigen_design(W, noise, group_size=group_size, principal=principal,
                                            relative=relative))


registry.register(registry.Mechanism(
    "eigen_design", "Eigen-Design", _build,
    "Eigen-queries of WᵀW weighted by convex optimisation (Program 1), completed to equal "
    "column norms ((ε,δ) only).",
    "Li & Miklau, PVLDB 2012, Sec. 3-4 (Program 1-2, Thm 1-3, Sec. 4.2 reductions)",
    params={"group_size": None, "principal": None, "relative": False}, scope=scope,
    optimizer=True, audit=registry.AuditSpec(noise="gaussian")))
