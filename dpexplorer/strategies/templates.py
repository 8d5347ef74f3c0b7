"""HDMM's strategy optimisers OPT0, OPT⊗ and OPT+ (McKenna, Miklau, Hay, Machanavajjhala).

All three minimise the matrix mechanism's unit-noise total squared error

    Δ_p(A)² · tr(WᵀW (AᵀA)⁺)

(HDMM, McKenna et al., Prop. 4) over a restricted family of
strategies ``A``, working on public things only (the workload), never on data:

* :func:`opt0` -- an explicit strategy for a workload given by its dense
  ``n × n`` Gram matrix (HDMM Sec. 4), or, for Laplace noise, by the fast
  products of a structured Gram (ranges, prefixes, width-k, permuted ranges
  and unions with Identity/Total; :mod:`dpexplorer.queries.gram_ops`).  Laplace: the
  p-Identity family ``A(Θ) = [I; Θ]·D`` (Def. 13-14) optimised with L-BFGS-B,
  an analytic gradient and random restarts.  Gaussian: the convex problem over
  ``X = AᵀA`` with ``diag(X) ≤ 1`` (Def. 12), parametrised by an upper
  triangular Cholesky factor and started from the SVD-bound strategy.
* :func:`opt_kron` -- OPT⊗ (Def. 17-18): one Kronecker product
  ``A_1 ⊗ ... ⊗ A_d`` for a Kronecker workload or a union of weighted
  Kronecker products, by block-coordinate descent with OPT0 as the 1D oracle
  on surrogate Gram matrices (HDMM Eq. 5).
* :func:`opt_plus` -- OPT+ (Def. 19): one OPT⊗ strategy per product term (or
  per user group of terms), stacked with closed-form budget weights, as a
  :class:`KronStack` answered by local least squares (HDMM Sec. 10 item 3).

Every optimiser is deterministic given ``seed`` (randomness only from
``numpy.random.default_rng``), returns an
:class:`~dpexplorer.core.optimization.OptimizationResult` whose ``objective``
equals ``error.unit_tse(W, result.strategy, norm)`` and whose ``trace`` is the
objective after every iteration, and calls
:func:`dpexplorer.core.optimization.report` as it goes.  The registry entries
``opt0``, ``opt_kron`` and ``opt_plus`` are defined here; ``hdmm`` in
:mod:`dpexplorer.strategies.hdmm`.

Conventions (documented choices)
--------------------------------
* Strategies are normalised to sensitivity 1 in the noise's norm.
* p-Identity default ``p``: 1 when the Gram matrix lies in ``span{I, J}``
  (workloads made of Identity and Total only), else ``⌈n/16⌉`` (HDMM Sec. 9).
* Special cases solved exactly: a Gram proportional to ``I`` gives Identity,
  one proportional to ``J = 11ᵀ`` gives Total (both meet the SVD bound), and
  any other rank-one Gram ``g gᵀ`` (a single query) gives that query.
* Singular Gram matrices (workloads that do not span the domain, e.g. Total,
  or Width 32 whose ``n - 31`` queries cannot span ``n`` cells): p-Identity
  strategies contain ``D·I`` and always have full column rank, so they support
  every workload.  The Gaussian optimiser keeps a full-rank ``X``: it
  optimises ``G + η·(tr G / n)·I`` (``η = 1e-6``, a tiny extra weight on the
  Identity workload that keeps ``X`` well conditioned) and starts from the
  SVD-bound strategy of ``G + η₀·(tr G / n)·I`` with ``η₀`` the best of
  ``{1e-4, 1e-3, 1e-2}``; the reported objective is always the exact one on
  ``G``.  (The HDMM reference code regularises with ``η = 1e-3``.)
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Literal, overload

import numba
import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse
from scipy.linalg import blas, lapack
from threadpoolctl import threadpool_limits

from ..core import error, optimization, registry
from ..core.error import GramInverse, UnsupportedWorkloadError
from ..privacy.noise import NoiseModel
from ..queries import gram_ops
from ..queries.gram_ops import gram_operator
from ..queries.intervals import SegmentInverse, interval_variances
from ..queries.matrix import (
    Dense,
    Identity,
    Kronecker,
    Matrix,
    MatrixTooLargeError,
    Total,
    VStack,
    _check_limit,
    as_matrix,
)
from .kron_stack import FactorInverse, KronStack, product_terms, term_matrix

__all__ = [
    "OPT0_MAX_CELLS",
    "OPT0_MAX_CELLS_STRUCTURED",
    "opt0",
    "opt0_scope",
    "opt_kron",
    "opt_plus",
    "KronStack",
    "product_terms",
    "p_identity",
    "PIdentity",
    "default_p",
    "plus_weights",
    "FactorInverse",
]

#: Largest domain (cells) on which OPT0 builds and optimises a dense strategy,
#: per sensitivity norm: Laplace costs O(p n²) per iteration, Gaussian O(n³).
OPT0_MAX_CELLS = {1: 4096, 2: 2048}

#: Largest domain on which Laplace OPT0 runs for a workload with a structured Gram
#: (:func:`dpexplorer.queries.gram_ops.gram_operator`: ranges, prefixes, width-k, permuted ranges,
#: their unions): O(p² n) per iteration with p = n/16.  One restart at 16384 cells (1500
#: iterations) took 56 min of CPU with a peak of 9.8 GB (``benchmarks/bench_opt0.py 16384``).
OPT0_MAX_CELLS_STRUCTURED = 16384

#: Upper bound on p-Identity parameters: keeps ``AᵀA`` reasonably conditioned
#: (condition number ≲ (1 + p·Θ_max)²) for low-rank workloads, where the
#: unbounded optimum drifts to infinity; optimised strategies for the HDMM
#: benchmark workloads have entries of order one.
THETA_MAX = 1e3

#: Relative extra Identity weight that keeps the Gaussian optimiser's X full rank.
GAUSSIAN_ETA = 1e-6


# ============================================================== small helpers
def _norm_of(noise) -> int:
    if not isinstance(noise, NoiseModel):
        raise ValueError(
            f"noise must be a NoiseModel such as dpx.Laplace(1.0) or dpx.Gaussian(1.0, 1e-6), "
            f"got {type(noise).__name__}")
    return int(noise.norm)


@overload
def _check_count(value: object, what: str, allow_none: Literal[False]) -> int: ...
@overload
def _check_count(value: object, what: str, allow_none: bool = True) -> int | None: ...
def _check_count(value: object, what: str, allow_none: bool = True) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{what} must be a positive whole number, got {value!r}")
    return int(value)


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative whole number, got {seed!r}")
    return int(seed)


def _default_restarts(n: int) -> int:
    """Restarts of the p-Identity optimiser when not given: 3 up to 512 cells, else 1."""
    return 3 if n <= 512 else 1


def default_p(G: np.ndarray) -> int:
    """HDMM's default number of p-Identity queries for a Gram matrix ``G: (n, n)``.

    1 when ``G`` lies in ``span{I, J}`` (a workload of Identity and Total
    queries, where more queries do not help), else ``⌈n/16⌉`` (HDMM Sec. 9).
    """
    n = G.shape[0]
    return 1 if _gram_kind(G) != "general" else max(1, math.ceil(n / 16))


def _gram_kind(G: np.ndarray) -> str:
    """``"zero"``, ``"identity"`` (∝ I), ``"total"`` (∝ J), ``"ij"`` (a I + b J) or ``"general"``."""
    n = G.shape[0]
    scale = float(np.abs(G).max()) if G.size else 0.0
    if scale == 0.0:
        return "zero"
    tol = 1e-12 * scale * max(n, 1)
    d = np.diag(G)
    if np.ptp(d) > tol:
        return "general"
    if n == 1:
        return "identity"
    off = G[~np.eye(n, dtype=bool)]
    if np.ptp(off) > tol:
        return "general"
    a, b = float(d[0] - off[0]), float(off[0])
    if abs(b) <= tol:
        return "identity"
    if abs(a) <= tol:
        return "total"
    return "ij"


#: Seeded probe vectors deciding the kind of a structured Gram (see :func:`_operator_kind`).
_PROBES = 3


def _operator_kind(op) -> str:
    """:func:`_gram_kind` of a structured Gram from its diagonal and a few products.

    ``G ∈ span{I, J}`` iff its diagonal is constant, its first column is
    ``a e_0 + b 1`` and ``G x = a x + b (1ᵀx) 1`` for every ``x``; the last
    condition is checked on seeded Gaussian probes, which a Gram outside that
    span fails with probability one.  Tolerances as in :func:`_gram_kind`.
    """
    n = op.n
    d = op.diag()
    scale = float(np.abs(d).max()) if n else 0.0  # PSD: the largest entry is on the diagonal
    if scale == 0.0:
        return "zero"
    tol = 1e-12 * scale * max(n, 1)
    if np.ptp(d) > tol:
        return "general"
    if n == 1:
        return "identity"
    X = np.zeros((n, 1 + _PROBES))
    X[0, 0] = 1.0
    X[:, 1:] = np.random.default_rng(0).standard_normal((n, _PROBES))
    Y = op.matmat(X)
    off = Y[1:, 0]
    if np.ptp(off) > tol:
        return "general"
    a, b = float(d[0] - off[0]), float(off[0])
    P = X[:, 1:]
    resid = Y[:, 1:] - a * P - b * P.sum(axis=0)
    if np.abs(resid).max() > tol * np.abs(P).sum(axis=0).max():
        return "general"
    if abs(b) <= tol:
        return "identity"
    if abs(a) <= tol:
        return "total"
    return "ij"


def _operator_rank_one(op) -> np.ndarray | None:
    """:func:`_rank_one` of a structured Gram: ``G x = g (gᵀx)`` on seeded probes."""
    d = op.diag()
    k = int(np.argmax(d))
    if d[k] <= 0:
        return None
    e = np.zeros((op.n, 1))
    e[k] = 1.0
    g = op.matmat(e)[:, 0] / math.sqrt(d[k])
    P = np.random.default_rng(1).standard_normal((op.n, _PROBES))
    resid = op.matmat(P) - np.outer(g, g @ P)
    if np.abs(resid).max() > 1e-10 * float(d.max()) * np.abs(P).sum(axis=0).max():
        return None
    return g


def _rank_one(G: np.ndarray) -> np.ndarray | None:
    """``g`` with ``G = g gᵀ`` if ``G`` has rank one (a single query), else ``None``.

    For a single query ``g`` the strategy ``g / max|g_j|`` (sensitivity 1 in
    both norms) has unit TSE ``max_j g_j²``, which is optimal: if ``g = uᵀA``
    then ``|g_j| ≤ ‖u‖₂ ‖A e_j‖₂ ≤ ‖u‖₂ Δ_p(A)`` for ``p = 1, 2``, so
    ``Δ_p(A)² ‖u‖₂² ≥ max_j g_j²``.  (p-Identity could only approach it with
    unbounded, ill-conditioned parameters.)
    """
    k = int(np.argmax(np.diag(G)))
    if G[k, k] <= 0:
        return None
    g = G[:, k] / math.sqrt(G[k, k])
    scale = float(np.abs(G).max())
    if np.abs(G - np.outer(g, g)).max() > 1e-10 * scale:
        return None
    return g


def _dense_gram(W: Matrix, what: str) -> np.ndarray:
    try:
        return np.asarray(W.gram().dense(), dtype=float)
    except MatrixTooLargeError as exc:
        raise registry.NotApplicableError(
            f"{what} needs a dense n × n Gram matrix; this workload has n = {W.n:,} cells "
            f"({exc})") from exc


def _check_gram(G) -> np.ndarray:
    G = np.asarray(G, dtype=float)
    if G.ndim != 2 or G.shape[0] != G.shape[1] or G.shape[0] == 0:
        raise ValueError(f"a Gram matrix must be a non-empty square (n, n) array, got shape {G.shape}")
    if not np.all(np.isfinite(G)):
        raise ValueError("the Gram matrix has NaN or infinite entries")
    scale = max(float(np.abs(G).max()), 1e-300)
    if np.abs(G - G.T).max() > 1e-9 * scale:
        raise ValueError("the Gram matrix WᵀW must be symmetric")
    G = 0.5 * (G + G.T)
    n = G.shape[0]
    shift = 1e-9 * max(float(np.trace(G)), scale) / n
    _, info = lapack.dpotrf(G + shift * np.eye(n), lower=1, clean=0)
    if info != 0:  # a Cholesky factor exists iff G + shift·I is positive definite
        raise ValueError("the Gram matrix WᵀW must be positive semi-definite (it has a "
                         "clearly negative eigenvalue)")
    return G


def _unit_tse_dense(A: np.ndarray, G: np.ndarray, norm: int) -> float:
    """Exact ``Δ_p(A)² · tr(G (AᵀA)⁺)`` of a dense strategy (as :func:`error.unit_tse`)."""
    inv = GramInverse(A.T @ A)
    if not inv.supports(G):
        raise UnsupportedWorkloadError("the optimised strategy does not support the workload")
    cn = np.abs(A).sum(axis=0) if norm == 1 else np.sqrt((A * A).sum(axis=0))
    return float(cn.max()) ** 2 * inv.trace(G)


class _Monitor:
    """L-BFGS callback: records the objective, reports progress, stops on stagnation.

    Stops (``StopIteration``) when the objective improved by less than ``tol``
    (relative) over the last ``window`` iterations since the start or the last
    :meth:`hold` (``stalled`` then says so).
    """

    def __init__(self, stage: str, maxiter: int, scale: float, window: int, tol: float):
        self.stage, self.maxiter, self.scale = stage, maxiter, scale
        self.window, self.tol = window, tol
        self.trace: list[float] = []
        self.start = 0
        self.stalled = False

    def hold(self):
        """Judge stagnation only on the iterations from now on (a new working set)."""
        self.start, self.stalled = len(self.trace), False

    def callback(self, intermediate_result):
        f = float(intermediate_result.fun) * self.scale
        self.trace.append(f)
        k = len(self.trace)
        optimization.report(self.stage, k, self.maxiter, f)
        if k - self.start > self.window:
            old = self.trace[-1 - self.window]
            if old - f <= self.tol * abs(f):
                self.stalled = True
                raise StopIteration


def _lbfgs(fun, x0, bounds, maxiter: int, monitor: _Monitor, maxcor: int = 10):
    return scipy.optimize.minimize(
        fun, x0, jac=True, method="L-BFGS-B", bounds=bounds, callback=monitor.callback,
        options={"maxiter": maxiter, "ftol": 1e-13, "gtol": 1e-12, "maxcor": maxcor})


#: Fewest p-Identity parameters (``p·n``) for which the Laplace optimiser runs L-BFGS-B on a
#: working set (:func:`_lbfgs_working_set`) instead of on all of Θ: from n = 2048 (p = 128).
#: There L-BFGS-B's own work on every variable took about 48 ms of each ~75 ms iteration at
#: n = 4096 once Θ was sparse, and over seeds 0-4 at n = 2048 the working set gave a lower mean
#: RMSE (All Range 12.557 vs 12.592) in 19 % less CPU; at n = 1024 it gave a mean RMSE 0.14 %
#: higher over seeds 0-2 for no saving (2 cores;
#: ``python benchmarks/bench_opt0.py 1024 2048 4096 --seeds 0 1 2 3 4``).
WORKING_SET_MIN_VARIABLES = 2**18

#: Most zero variables violating the KKT conditions that enter a working set at once, when
#: fewer than this many are non-zero (else ``nnz``): from a sparse start, only the most
#: violating ones enter at first.
WORKING_SET_MIN_NEW = 1024

#: Iterations on all of Θ before the first working set is formed (Θ is dense at the random
#: start, so every variable is in the first set).
WORKING_SET_WARMUP = 30

#: Most iterations of L-BFGS-B on one working set before the set is formed again.
WORKING_SET_PHASE = 100

#: Default stagnation tolerance of the working-set optimiser: its iterations cost less, so it
#: stops later than the full one (``tol`` 1e-3); at n = 2048 and 4096 this is what gives the
#: lower RMSE above.
WORKING_SET_TOL = 1e-4


def _lbfgs_working_set(fun, x0: np.ndarray, maxiter: int, monitor: _Monitor, maxcor: int):
    """L-BFGS-B on ``0 ≤ x ≤ THETA_MAX`` over a working set of variables, the rest held at 0.

    An active-set strategy (Nocedal & Wright, *Numerical Optimization*, 2nd ed., Sec. 16.5,
    applied to bound constraints): L-BFGS-B itself (scipy) minimises over the variables of the
    working set, so its own O(m·N) work per iteration (Byrd, Lu, Nocedal & Zhu 1995) runs on
    the working set's N instead of all ``p·n`` parameters, 94-97 % of which sit at 0 at the
    optima of the HDMM workloads.  The set is formed from the full gradient ``g`` at the start
    and after each phase: the non-zero variables, then the zero ones with the smallest ``g`` --
    as many as violate the KKT conditions (``g < 0``: the objective decreases by moving them
    up), at most ``max(nnz, WORKING_SET_MIN_NEW)`` of them, plus ``nnz`` more (they are likely
    to enter next).  From a dense start (the random Θ) the first set is every variable, for
    :data:`WORKING_SET_WARMUP` iterations (while more than half the variables are non-zero, the
    set is every variable anyway); every later phase runs at most
    :data:`WORKING_SET_PHASE` iterations.  When ``fun`` has a ``restricted(work)`` method (the
    p-Identity objective), a phase evaluates ``restricted(work)``, which never touches the
    variables outside the set; otherwise it evaluates ``fun`` on all variables and keeps the
    gradient on the set.  The run ends at ``maxiter`` iterations in all, or when a phase
    stagnates (``monitor``) or converges while the KKT violation outside the set is at most
    the projected gradient inside it (the set is then not what holds the objective back):
    then no variable outside the set can improve the objective by more than one inside, and
    the minimiser of the bound-constrained problem is reached (tested against
    ``scipy.optimize.nnls``, also from sparse starts where several sets are needed).

    Parameters
    ----------
    fun : callable
        ``x ↦ (f, ∇f)`` over all variables, ``x: (N,)``; optionally with a method
        ``restricted(work)`` returning ``z ↦ (f, ∂f/∂z)`` for ``x`` equal to ``z`` on the
        sorted indices ``work`` and 0 elsewhere.
    x0 : ndarray, shape (N,)
        Start, within the bounds.
    maxiter : int
        L-BFGS-B iterations in all.
    monitor : _Monitor
        Records every iteration; its stagnation test ends a phase.
    maxcor : int
        L-BFGS-B memory.

    Returns
    -------
    (x, iterations, evaluations)
    """
    x = np.clip(x0, 0.0, THETA_MAX)
    N = x.size
    nit = nfev = 0
    nnz = int(np.count_nonzero(x))
    steps = WORKING_SET_WARMUP if nnz > N // 2 else WORKING_SET_PHASE
    if nnz == N:  # the first set is every variable, whatever the gradient
        g = np.zeros(N)
    else:
        _, g = fun(x)
        nfev = 1
    while nit < maxiter:
        work = _working_set(x, g)
        if not work.size:  # x = 0 and no variable violates the KKT conditions: a minimum
            break
        calls = [0]
        restricted = fun.restricted(work) if hasattr(fun, "restricted") else _Scatter(fun, work, N)

        def reduced(z, restricted=restricted, calls=calls):
            calls[0] += 1
            return restricted(z)

        limit = min(steps, maxiter - nit)
        bounds = scipy.optimize.Bounds(np.zeros(work.size), np.full(work.size, THETA_MAX))
        res = _lbfgs(reduced, x[work], bounds, limit, monitor, maxcor=maxcor)
        x = np.zeros(N)
        x[work] = np.clip(res.x, 0.0, THETA_MAX)
        nit += int(res.nit)
        nfev += calls[0] + 1
        _, g = fun(x)
        if res.nit == 0:  # no step possible (line search failed at once): a new set will not help
            break
        if monitor.stalled or int(res.nit) < limit:  # the phase ended on its own
            zero = x == 0.0
            violation = zero & (g < 0)
            pg_out = float(-g[violation].min()) if violation.any() else 0.0
            free = ~zero & (x < THETA_MAX)
            pg_in = float(np.abs(g[free]).max()) if free.any() else 0.0
            if pg_out <= pg_in:
                break
            monitor.hold()
        steps = WORKING_SET_PHASE
    return x, nit, nfev


class _Scatter:
    """``z ↦ (f, ∂f/∂z)`` of ``fun`` with the variables ``work`` set to ``z`` and the others 0."""

    def __init__(self, fun, work: np.ndarray, size: int):
        self.fun, self.work, self.full = fun, work, np.zeros(size)

    def __call__(self, z):
        self.full[self.work] = z
        f, g = self.fun(self.full)
        return f, g[self.work]


def _working_set(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Indices of the working set at ``x`` with full gradient ``g``: see :func:`_lbfgs_working_set`."""
    zero = x == 0.0
    nnz = x.size - int(np.count_nonzero(zero))
    candidates = np.flatnonzero(zero)
    violators = int(np.count_nonzero(g[candidates] < 0))
    extra = min(candidates.size, nnz + min(violators, max(nnz, WORKING_SET_MIN_NEW)))
    keep = ~zero
    if extra:
        if extra < candidates.size:
            candidates = candidates[np.argpartition(g[candidates], extra - 1)[:extra]]
        keep[candidates] = True
    return np.flatnonzero(keep)


#: L-BFGS-B memory (correction pairs) of the p-Identity optimiser.  L-BFGS-B's own work
#: per iteration is O(m·N) on N = p·n variables (Byrd, Lu, Nocedal & Zhu, SIAM J. Sci.
#: Comput. 16, 1995), and on structured Grams it takes most of a restart (at n = 2048-4096,
#: p = n/16, about three quarters of the time; ``benchmarks/bench_opt0.py``).  With m = 5
#: instead of scipy's default 10, one restart on All Range / Prefix at n = 1024 and 2048
#: (seeds 0-4) took 17-26 % less CPU time with a lower or equal (within 0.01 %) mean RMSE:
#: All Range 11.054 vs 11.064 and 12.592 vs 12.633; Prefix 9.580 vs 9.584 and 10.7796 vs
#: 10.7793.  The Gaussian optimiser keeps 10.
PIDENTITY_MAXCOR = 5


# ================================================================ p-Identity
def p_identity(theta) -> PIdentity:
    """The p-Identity strategy ``A(Θ) = [I; Θ]·D`` (HDMM Def. 13).

    ``D = diag(1 / (1 + Σ_i Θ_ij))`` makes every column's L1 norm exactly 1,
    so ``Δ₁(A) = 1``.  All-zero rows of ``Θ`` are dropped (they add nothing).

    Parameters
    ----------
    theta : array_like, shape (p, n)
        Non-negative parameters.

    Returns
    -------
    PIdentity (a :class:`~dpexplorer.queries.matrix.Dense`), shape (n + p', n)
        ``p'`` the number of non-zero rows of ``Θ``; implicit until its
        ``array`` is asked for.

    Raises
    ------
    ValueError
        If ``Θ`` is not a finite non-negative 2D array.
    """
    return PIdentity(theta)


class PIdentity(Dense):
    """``A(Θ) = [I; Θ]·D`` kept implicit (HDMM Def. 13): ``O((n + p') n)`` storage is never needed.

    A :class:`~dpexplorer.queries.matrix.Dense` whose ``array`` is materialised only
    when asked for.  Products cost ``O(p' n)``; column norms are closed-form;
    the matrix mechanism's error on a workload with a structured Gram
    (:func:`dpexplorer.queries.gram_ops.gram_operator`) is the Woodbury form of
    :class:`_PIdentityObjective` (``O(p'² n)``, no ``n × n`` matrix), and its
    per-query variances come from thin products with the workload
    (:meth:`workload_row_variances`); other workloads use the dense path of
    :mod:`dpexplorer.core.error`.  ``A`` has full
    column rank (it contains ``D``), so it supports every workload.

    Parameters
    ----------
    theta : array_like, shape (p, n)
        Non-negative parameters; all-zero rows are dropped.
    name : str

    Attributes
    ----------
    Theta : ndarray, shape (p', n)
        The non-zero rows of ``Θ`` (named apart from the marginal weights
        ``theta`` of :class:`~dpexplorer.strategies.marginals.MarginalStrategy`).
    s : ndarray, shape (n,)
        ``1 + Σ_i Θ_ij``, so ``D = diag(1/s)``.

    Raises
    ------
    ValueError
        If ``Θ`` is not a finite non-negative 2D array.
    """

    def __init__(self, theta, name: str = "p_identity"):
        T = np.asarray(theta, dtype=float)
        if T.ndim != 2 or not np.all(np.isfinite(T)) or np.any(T < 0):
            raise ValueError("Θ must be a finite non-negative 2D array of shape (p, n)")
        T = T[T.max(axis=1) > 0] if T.shape[0] else T
        self.Theta = T
        self.s = 1.0 + T.sum(axis=0)
        n = T.shape[1]
        self.shape = (n + T.shape[0], n)
        self._name = name

    @functools.cached_property
    def array(self) -> np.ndarray:  # type: ignore[override]  # computed here; a plain attribute in Dense
        """``[I; Θ]·D`` as a dense ``(n + p', n)`` array (materialised on first use)."""
        return np.vstack([np.eye(self.n), self.Theta]) / self.s

    def _matmat(self, X):
        Y = np.asarray(X, dtype=float) / self.s[:, None]
        return np.vstack([Y, self.Theta @ Y])

    def _rmatmat(self, Y):
        Y = np.asarray(Y, dtype=float)
        n = self.n
        return (Y[:n] + self.Theta.T @ Y[n:]) / self.s[:, None]

    def _dense(self):
        return self.array

    def _gram(self):
        _check_limit((self.n, self.n), None, f"Gram matrix of {self.name!r}")
        T = self.Theta
        return Dense((np.eye(self.n) + T.T @ T) / np.outer(self.s, self.s))

    def column_norms(self, p=1):
        if p == 1:
            return (1.0 + self.Theta.sum(axis=0)) / self.s
        if p == 2:
            return np.sqrt(1.0 + (self.Theta * self.Theta).sum(axis=0)) / self.s
        return super().column_norms(p)

    def workload_trace(self, W):
        """``tr(WᵀW (AᵀA)⁻¹)`` by Woodbury for a structured Gram, else ``NotImplemented``."""
        op = gram_operator(W)
        if op is None or op.n != self.n:
            return NotImplemented
        return _PIdentityObjective(op, self.Theta.shape[0], 1.0).value(self.Theta)

    @property
    def integral(self) -> bool:  # type: ignore[override]  # computed here; a plain attribute elsewhere
        """Whether every entry is a whole number: only when ``Θ`` has no non-zero row (``A = I``).

        A non-zero row of ``Θ`` makes some ``s_j > 1``, so the entry ``1/s_j`` of
        ``D`` lies strictly between 0 and 1; closed form, ``A`` is never materialised.
        """
        return self.Theta.shape[0] == 0

    def workload_row_variances(self, W):
        """``diag(W (AᵀA)⁻¹ Wᵀ)`` from thin products with ``W``: no ``n × n`` matrix, shape ``(m,)``.

        With ``S = diag(s)``, ``(AᵀA)⁻¹ = S (I − Θᵀ R Θ) S`` and
        ``R = (I_p + ΘΘᵀ)⁻¹`` (Woodbury; HDMM Def. 13-14 and the proof of
        Thm 17, App. B).  Writing ``I_p + ΘΘᵀ = C Cᵀ`` (Cholesky) and
        ``B = S Θᵀ C⁻ᵀ`` (``n × p'``, so ``S Θᵀ R Θ S = B Bᵀ``), row ``i`` of
        the workload has

            ``(W (AᵀA)⁻¹ Wᵀ)_ii = Σ_j W_ij² s_j² − ‖(W B)_i‖²``.

        The first term is the variance under the diagonal matrix ``S²``
        (:func:`~dpexplorer.queries.intervals.interval_variances`: interval
        rows, Identity, Total, weights, unions, permuted and value-weighted
        versions); the second costs ``p'`` products ``W b`` (prefix sums for
        interval rows), taken a block of columns of ``B`` at a time so that at
        most :data:`ROW_VARIANCE_BLOCK` answers are held.  Cost ``O(p'² n)``
        for ``B`` plus ``p'`` workload products; memory ``O(p' n)``.

        Returns
        -------
        ndarray, shape (m,), or NotImplemented
            ``NotImplemented`` (the caller's dense path then applies) for
            workloads the diagonal term does not cover (dense or sparse
            explicit rows, Kronecker products) and when ``m·p'`` is above
            :data:`ROW_VARIANCE_WORK`.
        """
        W = as_matrix(W)
        T = self.Theta
        p = T.shape[0]
        if W.n != self.n or W.m * p > ROW_VARIANCE_WORK:
            return NotImplemented
        out = interval_variances(W, SegmentInverse(self.s * self.s, []))
        if out is NotImplemented or p == 0:
            return out
        M = _ThetaProducts(np.ascontiguousarray(T.T)).gram()  # ΘΘᵀ
        M[np.diag_indices_from(M)] += 1.0
        C = _cholesky_spd(M)
        B = scipy.linalg.solve_triangular(C, T, lower=True, check_finite=False)  # C⁻¹ Θ: (p', n)
        B = np.ascontiguousarray((B * self.s).T)  # S Θᵀ C⁻ᵀ: (n, p')
        step = max(1, min(p, ROW_VARIANCE_BLOCK // max(W.m, 1)))
        for start in range(0, p, step):
            WB = W.matvec(B[:, start:start + step])
            out -= np.einsum("ij,ij->i", WB, WB)
        return out


#: Most workload answers (``m`` times a block of columns of ``B``) held at once by
#: :meth:`PIdentity.workload_row_variances` (2**23 doubles = 64 MiB).
ROW_VARIANCE_BLOCK = 2**23

#: Largest ``m·p'`` (workload queries times rows of ``Θ``) for which
#: :meth:`PIdentity.workload_row_variances` runs its thin products; above, it returns
#: ``NotImplemented`` and the dense path of :mod:`dpexplorer.core.error` applies (where ``n × n``
#: fits).  The thin products run at about 7·10⁷ (query, column) pairs per second (1 BLAS
#: thread): All Range at n = 4096 with p' = 256 (m·p' = 2.1·10⁹) took 29-30 s against 4.7 s
#: densely, Prefix at n = 16384 with p' = 1024 (m·p' = 1.7·10⁷) about 1 s (dense: refused).
ROW_VARIANCE_WORK = 2**28


class _PIdentityObjective:
    """``f(Θ) = tr(G (A(Θ)ᵀA(Θ))⁻¹)`` and its gradient (HDMM Def. 14).

    With ``s = 1 + Σ_i Θ_i``, ``S = diag(s)`` and ``C = S G S``:
    ``(AᵀA)⁻¹ = S (I + ΘᵀΘ)⁻¹ S`` and, by Woodbury (HDMM App. B, proof of Thm 17),
    ``f = tr(C) − tr(C Θᵀ R Θ)`` with ``R = (I_p + ΘΘᵀ)⁻¹``.  Writing
    ``X = (I + ΘᵀΘ)⁻¹ = I − Θᵀ R Θ`` (never formed), the gradient is
    ``∂f/∂Θ = −2 R Θ C X + 1·(2 diag(C X) / s)ᵀ``, and everything follows from
    ``V = R Θ`` and ``H = V C`` (the only product with ``G``):
    ``R Θ C X = H − Z Θ`` with ``Z = R (Θ C Θᵀ) R = (H Θᵀ) R``, and
    ``diag(C X) = diag(C) − q``, ``q = colsum(H ∘ Θ) = diag(C Θᵀ R Θ)``, so
    ``f = Σ diag(C) − Σ q``.

    Cost per evaluation: the four products with ``Θ`` (``ΘΘᵀ``, ``RΘ``,
    ``HΘᵀ``, ``ZΘ``; ``O(p² n)`` dense) and one product ``V C`` (``O(p n²)``
    for a dense Gram, ``O(p n)`` for a structured one,
    :mod:`dpexplorer.queries.gram_ops`).  L-BFGS-B keeps most entries of
    ``Θ`` exactly at their bound 0 after the first iterations (the optimised
    strategies of the HDMM workloads have 3-6 % non-zero entries), so once
    at most :data:`SPARSE_THETA` of ``Θ`` is non-zero the four products use
    a sparse ``Θ`` (``O(p · nnz(Θ))``); both ways compute the same numbers
    up to rounding.

    :meth:`restricted` gives the objective over a working set of entries of ``Θ``, the others
    held at 0 (:class:`_RestrictedPIdentityObjective`, :func:`_lbfgs_working_set`).

    The parameters are laid out as ``Θᵀ`` (``n × p``, row-major, flattened):
    the products with ``G`` then run down the cells with ``p`` contiguous
    columns.  The value is divided by ``scale`` (the Identity strategy's
    ``tr G``) so that L-BFGS-B works on numbers of order one.

    Parameters
    ----------
    G : ndarray, shape (n, n), or GramOperator
    p : int
    scale : float
    """

    def __init__(self, G, p: int, scale: float):
        self.G, self.p, self.scale = G, p, scale
        if isinstance(G, np.ndarray):
            self.n, self.diagG = G.shape[0], np.diag(G).copy()
            self.cols = lambda X: G @ X  # G X for X: (n, k)
        else:
            self.n, self.diagG = G.n, G.diag()
            self.cols = G.matmat

    def _parts(self, Tt: np.ndarray):
        """``(f, s, Θ products, R, Hᵀ, q, diag C)`` at ``Θᵀ = Tt`` (shape ``(n, p)``); ``f`` unscaled."""
        s = 1.0 + Tt.sum(axis=1)
        th = _ThetaProducts(Tt)
        M = th.gram()  # ΘΘᵀ
        M[np.diag_indices_from(M)] += 1.0
        R = _inv_spd(M)
        Vt = th.times(R)  # Θᵀ R = (R Θ)ᵀ
        Vt *= s[:, None]
        Ht = self.cols(Vt)  # G S Θᵀ R
        Ht *= s[:, None]  # Hᵀ = C Θᵀ R = (R Θ C)ᵀ
        q = np.einsum("ij,ij->i", Ht, Tt)  # colsum(H ∘ Θ) = diag(C Θᵀ R Θ)
        diagC = s * s * self.diagG
        return float(diagC.sum() - q.sum()), s, th, R, Ht, q, diagC

    def value(self, theta: np.ndarray) -> float:
        """``f(Θ)`` (unscaled) for ``Θ: (p, n)``."""
        return self._parts(np.ascontiguousarray(np.asarray(theta, dtype=float).T))[0]

    def restricted(self, work: np.ndarray) -> _RestrictedPIdentityObjective:
        """The objective over the entries ``work`` of ``Θᵀ`` (flat, sorted), the others held at 0."""
        return _RestrictedPIdentityObjective(self, work)

    def __call__(self, flat: np.ndarray):
        """``(f / scale, ∂f/∂Θ / scale)`` at ``Θᵀ = flat.reshape(n, p)``; the gradient in the same layout."""
        Tt = flat.reshape(self.n, self.p)
        f, s, th, R, Ht, q, diagC = self._parts(Tt)
        Z = R @ th.t_times(Ht)  # R (Θ C Θᵀ) R = Z
        grad = th.times(Z.T)  # Θᵀ Zᵀ = (Z Θ)ᵀ
        grad -= Ht
        grad *= 2.0 / self.scale
        grad += ((2.0 / self.scale) * (diagC - q) / s)[:, None]
        return f / self.scale, grad.ravel()


class _RestrictedPIdentityObjective:
    """:class:`_PIdentityObjective` on a working set: ``z ↦ (f, ∂f/∂z)`` with ``Θᵀ`` zero outside ``work``.

    ``z`` holds the entries ``work`` (flat indices into ``Θᵀ``, ``n × p``
    row-major, sorted) of ``Θᵀ``; every other entry is 0.  The same formulas
    as :class:`_PIdentityObjective` (HDMM Def. 14 and App. B, Thm 17),
    with the non-zero entries of ``z`` held as a CSR matrix ``Θᵀ`` (so an
    evaluation never scans the ``p·n`` entries of ``Θ``; numba kernels): ``ΘΘᵀ`` costs
    ``Σ_j nnz(Θᵀ_j)²``, ``RΘ`` and ``Θ Hᵀ`` ``O(p·nnz(Θ))``, ``q`` and the
    gradient on ``work`` (``(ZΘ)ᵀ`` entry by entry) ``O(|work| · nnz per cell)``;
    what remains is ``O(n·p)`` for the product ``G·V`` and ``O(p³)`` for ``R``
    and ``Z``.  Equal to the full objective and its gradient restricted to
    ``work`` up to rounding (tested).  All Range at n = 4096, p = 256, a set of 3.6 % of
    ``Θ`` half non-zero: about 10 ms per evaluation against 15-19 ms for the full objective
    with sparse products (1 BLAS thread); one restart took 49 s of CPU instead of 60 s
    (``benchmarks/bench_opt0.py 4096``, seed 0, same RMSE to 0.003 %).

    Parameters
    ----------
    objective : _PIdentityObjective
    work : ndarray of int, shape (K,)
        Sorted flat indices into ``Θᵀ``.
    """

    def __init__(self, objective: _PIdentityObjective, work: np.ndarray):
        self.objective, self.work = objective, work
        self.rows, self.cols = np.divmod(work, objective.p)
        self.dense: _Scatter | None = None  # the full objective scattered to ``work``, for a dense Θ

    def __call__(self, z: np.ndarray):
        obj, rows, cols = self.objective, self.rows, self.cols
        n, p = obj.n, obj.p
        if np.count_nonzero(z) > SPARSE_THETA * n * p:  # dense Θ: BLAS products on all of Θᵀ
            if self.work.size == n * p:  # every entry (``work`` is sorted and unique)
                return obj(z)
            if self.dense is None:
                self.dense = _Scatter(obj, self.work, n * p)
            return self.dense(z)
        indptr, indices, data, scaled, s = _work_csr(z, rows, cols, n)  # Θᵀ, S Θᵀ, s
        M = _csr_gram(indptr, indices, data, p)  # ΘΘᵀ
        M[np.diag_indices_from(M)] += 1.0
        R = np.ascontiguousarray(_inv_spd(M))  # rows of R are read by _csr_product
        Y = obj.cols(_csr_product(indptr, indices, scaled, R, False, n))  # G S Θᵀ R: Hᵀ = S Y
        h, q = _work_h_q(Y, s, rows, cols, z, n)  # Hᵀ on work, diag(C Θᵀ R Θ)
        diagC = s * s * obj.diagG
        f = float(diagC.sum() - q.sum())
        Z = R @ _csr_product(indptr, indices, scaled, Y, True, p)  # R (Θ S G S Θᵀ) R = R (Θ C Θᵀ) R
        grad = _csr_rows_dot(indptr, indices, data, rows, cols, Z)  # (Θᵀ Zᵀ) on work
        grad -= h
        grad += ((diagC - q) / s)[rows]
        grad *= 2.0 / obj.scale
        return f / obj.scale, grad


def _csr_indptr(rows: np.ndarray, n: int) -> np.ndarray:
    """CSR row pointers ``(n + 1,)`` of entries listed row by row (``rows`` sorted, in ``[0, n)``)."""
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr


@numba.njit(cache=True)
def _work_csr(z, rows, cols, n):
    """``Θᵀ`` in CSR form from its entries ``z`` on a working set, with ``S Θᵀ`` and ``s``.

    Entry ``k`` of ``z`` is ``Θᵀ[rows[k], cols[k]]`` (``rows`` sorted); the
    others are 0.  Returns ``(indptr, indices, data, scaled, s)``: the CSR
    arrays of the non-zero entries, ``scaled`` their values times
    ``s[row]``, and ``s = 1 + Σ_i Θ_ij`` (shape ``(n,)``).  One pass over the
    set, in place of a ``flatnonzero``, two gathers and a ``bincount``
    (same sums, in the same order: the same iterates).  With :func:`_work_h_q`,
    one OPT0 restart on Prefix at n = 4096 (seed 1) took 27.4-28.7 s against
    30.4-31.3 s (1 BLAS thread, ``benchmarks/bench_opt0.py``).
    """
    nnz = 0
    for k in range(z.size):
        if z[k] != 0.0:
            nnz += 1
    indptr = np.zeros(n + 1, dtype=np.int64)
    indices = np.empty(nnz, dtype=np.int64)
    data = np.empty(nnz)
    total = np.zeros(n)
    t = 0
    for k in range(z.size):
        v = z[k]
        if v != 0.0:
            j = rows[k]
            indptr[j + 1] += 1
            indices[t] = cols[k]
            data[t] = v
            total[j] += v
            t += 1
    for j in range(n):
        indptr[j + 1] += indptr[j]
    s = 1.0 + total
    scaled = np.empty(nnz)
    for j in range(n):
        for t in range(indptr[j], indptr[j + 1]):
            scaled[t] = data[t] * s[j]
    return indptr, indices, data, scaled, s


@numba.njit(cache=True)
def _work_h_q(Y, s, rows, cols, z, n):
    """``h = (S Y)`` on the working set and ``q = Σ_k h_k z_k`` per cell (shapes ``(K,)``, ``(n,)``)."""
    h = np.empty(z.size)
    q = np.zeros(n)
    for k in range(z.size):
        j = rows[k]
        h[k] = s[j] * Y[j, cols[k]]
        q[j] += h[k] * z[k]
    return h, q


@numba.njit(cache=True)
def _csr_gram(indptr, indices, data, p):
    """``ΘΘᵀ: (p, p)`` from ``Θᵀ`` in CSR form (``n`` rows of ``p`` columns)."""
    M = np.zeros((p, p))
    for j in range(indptr.size - 1):
        for t in range(indptr[j], indptr[j + 1]):
            a, va = indices[t], data[t]
            for u in range(indptr[j], indptr[j + 1]):
                M[a, indices[u]] += va * data[u]
    return M


@numba.njit(cache=True)
def _csr_product(indptr, indices, data, X, transpose, rows):
    """``Θᵀ X: (n, k)`` for ``X: (p, k)``, or with ``transpose`` ``Θ X: (p, k)`` for ``X: (n, k)``.

    ``Θᵀ`` in CSR form (``n`` rows of ``p`` columns); ``rows`` is the result's row count.
    """
    out = np.zeros((rows, X.shape[1]))
    for j in range(indptr.size - 1):
        for t in range(indptr[j], indptr[j + 1]):
            a, b = (indices[t], j) if transpose else (j, indices[t])
            o, x, v = out[a], X[b], data[t]
            for c in range(x.size):
                o[c] += v * x[c]
    return out


@numba.njit(cache=True)
def _csr_rows_dot(indptr, indices, data, rows, cols, Z):
    """``(Θᵀ Zᵀ)[rows[k], cols[k]] = Σ_l Θᵀ[rows[k], l] · Z[cols[k], l]`` for every ``k``."""
    out = np.empty(rows.size)
    for k in range(rows.size):
        j, i = rows[k], cols[k]
        acc = 0.0
        for t in range(indptr[j], indptr[j + 1]):
            acc += data[t] * Z[i, indices[t]]
        out[k] = acc
    return out


#: Largest fraction of non-zero entries of Θ for which :class:`_ThetaProducts` uses sparse
#: products: at n = 4096, p = 256 (1 BLAS thread) one evaluation took 44 ms sparse vs 61 ms
#: dense at 10 % non-zero, 31 vs 57 ms at 5 %, and about the same at 20 %.
SPARSE_THETA = 0.1

#: Fewest entries of Θ for sparse products: below, scipy.sparse's overhead outweighs the
#: savings (n = 64, p = 4, 5 % non-zero: 148 µs sparse vs 58 µs dense per evaluation).
SPARSE_MIN_ENTRIES = 4096


class _ThetaProducts:
    """Products with ``Θ`` given ``Θᵀ: (n, p)``: dense BLAS, or CSR when few entries are non-zero.

    ``gram()`` is ``ΘΘᵀ: (p, p)``, ``times(X)`` is ``Θᵀ X: (n, k)`` for
    ``X: (p, k)``, ``t_times(Y)`` is ``Θ Y: (p, k)`` for ``Y: (n, k)``.
    """

    def __init__(self, Tt: np.ndarray):
        self.Tt = Tt
        flat = Tt.reshape(-1)
        self.sparse = (flat.size >= SPARSE_MIN_ENTRIES
                       and np.count_nonzero(flat) <= SPARSE_THETA * flat.size)
        if self.sparse:
            nz = np.flatnonzero(flat)
            n, p = Tt.shape
            self.S = scipy.sparse.csr_array((flat[nz], nz % p, _csr_indptr(nz // p, n)),
                                            shape=(n, p))

    def gram(self) -> np.ndarray:
        if self.sparse:
            return np.asarray(self.S.T @ self.Tt)
        if self.Tt.shape[1] == 0:  # p = 0 (every row of Θ pruned): LAPACK refuses empty sizes
            return np.zeros((0, 0))
        M = blas.dsyrk(1.0, self.Tt.T, lower=1)  # Θ Θᵀ, Θ = Tt.T is Fortran-ordered: no copy
        return M + np.tril(M, -1).T

    def times(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.S @ X) if self.sparse else self.Tt @ X

    def t_times(self, Y: np.ndarray) -> np.ndarray:
        return np.asarray(self.S.T @ Y) if self.sparse else self.Tt.T @ Y


def _cholesky_spd(M: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of ``M = I + ΘΘᵀ`` from its lower triangle (LAPACK potrf).

    Raises
    ------
    numpy.linalg.LinAlgError
        If ``M`` is not positive definite.
    """
    if M.shape[0] == 0:  # nothing to factor (p = 0); LAPACK refuses empty sizes
        return np.zeros((0, 0))
    c, info = lapack.dpotrf(M, lower=1, clean=1)
    if info != 0:
        raise np.linalg.LinAlgError("I + ΘΘᵀ is not positive definite")
    return c


def _inv_spd(M: np.ndarray) -> np.ndarray:
    """Inverse of a small symmetric positive definite matrix from its lower triangle (LAPACK potrf/potri)."""
    if M.shape[0] == 0:
        return np.zeros((0, 0))
    inv, info = lapack.dpotri(_cholesky_spd(M), lower=1)
    return inv + np.tril(inv, -1).T


def _p_identity_value(theta, G) -> float:
    """Exact unit TSE of ``p_identity(theta)``: Cholesky for a dense Gram, Woodbury for a structured one.

    The structured value is what :meth:`PIdentity.workload_trace` (hence
    :func:`error.unit_tse`) computes for the workload.
    """
    A = p_identity(theta)
    if isinstance(G, np.ndarray):
        return _unit_tse_dense(A.array, G, 1)
    return _PIdentityObjective(G, A.Theta.shape[0], 1.0).value(A.Theta)


#: Fewest cells from which the Laplace optimiser on a structured Gram starts from the optimum
#: on pairs of cells instead of a random Θ (:func:`_laplace_start`).  The random start
#: ``Θ ~ U[0, 1)`` is dense, and at n = 4096 (p·n = 2²⁰) its first 130 iterations on all of Θ
#: took 27 of a restart's 46 s, while every smaller start tried lost RMSE.  With the paired
#: start (1 BLAS thread, seeds 0-2, quiet machine, :data:`MULTILEVEL_COARSE_TOL`): All Range
#: 16.5-19.6 s and RMSE 14.180-14.193 against 32.8-36.7 s and 14.217-14.296; Prefix 27.0-29.3 s
#: and 11.979-12.032 against 60.7-64.5 s and 12.036-12.061: a lower RMSE for every seed.
#: Below 4096 cells the random start is kept: at n = 2048 the paired start gave All Range a
#: mean RMSE about equal to it (12.564 over seeds 0-2 against 12.556 over 0-4), not lower,
#: and the target there is the same or lower.  ``benchmarks/bench_opt0.py --start``.
MULTILEVEL_MIN_CELLS = 4096

#: Stagnation tolerance of the coarser runs of a multilevel start (:func:`_laplace_start`), or
#: the run's own ``tol`` when that is larger: the full optimiser's default rather than the
#: working set's :data:`WORKING_SET_TOL`.  A coarser run only supplies a start, and its last
#: digits are blurred by the lift.  At n = 4096 (1 BLAS thread, seeds 0-2, one restart) Prefix
#: took 26.4-27.5 s against 26.6-29.9 s with 1e-4, its coarse run 685-856 iterations against
#: 1236-1404, for RMSE 11.9787, 12.0322, 11.9987 against 12.0021, 12.0408, 11.9816; All Range
#: 14.1928, 14.1888, 14.1803 against 14.1839, 14.1896, 14.1846 (``opt0`` with one restart as
#: ``benchmarks/bench_opt0.py`` runs it, without its clocks; the benchmark itself: 27.0-29.3 s).
MULTILEVEL_COARSE_TOL = 1e-3


def _lift_theta(theta_c: np.ndarray, p: int, n: int) -> np.ndarray:
    """A p-Identity ``Θ: (p, n)`` from one on pairs of cells ``Θ_c: (p_c, ⌈n/2⌉)``, ``2 p_c ≥ p``.

    Every row of ``Θ_c`` asks the same aggregate of the finer histogram: its
    weight on coarse cell ``i`` goes to both cells ``2i`` and ``2i + 1``.  The
    first ``min(p, p_c)`` rows of ``Θ`` are these rows; the next ``p − p_c``
    (the rest of the finer ``p``) are the first coarse rows on the other
    pairing of cells, shifted by one cell (cells ``2i + 1, 2i + 2``).  Rows
    left at 0 would stay there: with ``Θ`` zero on a row the objective's
    gradient on it is ``2 diag(C X)/s > 0`` (:class:`_PIdentityObjective`),
    so the optimiser could never use them.
    """
    p_c = theta_c.shape[0]
    if 2 * p_c < p:
        raise ValueError(f"{p_c} coarse rows cannot start {p} finer ones")
    fine = np.repeat(np.asarray(theta_c, dtype=float), 2, axis=1)[:, :n]
    theta = np.zeros((p, n))
    aligned = min(p, p_c)
    theta[:aligned] = fine[:aligned]
    shifted = p - aligned
    theta[aligned:, 1:] = fine[:shifted, :-1]
    return theta


def _laplace_run(G, p, theta0, maxiter, window, tol, stage):
    """One L-BFGS-B run of the p-Identity objective from ``Θ₀: (p, n)``.

    Returns ``(Θ, trace, iterations, evaluations, working_set)``; ``trace``
    is the objective after every iteration.
    """
    n = G.shape[0] if isinstance(G, np.ndarray) else G.n
    scale = float(np.trace(G)) if isinstance(G, np.ndarray) else G.trace()
    fun = _PIdentityObjective(G, p, scale)
    working_set = p * n >= WORKING_SET_MIN_VARIABLES
    if tol is None:
        tol = WORKING_SET_TOL if working_set else 1e-3
    x0 = np.ascontiguousarray(theta0.T).ravel()  # laid out as Θᵀ (see _PIdentityObjective)
    mon = _Monitor(stage, maxiter, scale, window, tol)
    if working_set:
        x, nit, nfev = _lbfgs_working_set(fun, x0, maxiter, mon, PIDENTITY_MAXCOR)
    else:
        bounds = scipy.optimize.Bounds(np.zeros(p * n), np.full(p * n, THETA_MAX))
        res = _lbfgs(fun, x0, bounds, maxiter, mon, maxcor=PIDENTITY_MAXCOR)
        x, nit, nfev = res.x, int(res.nit), int(res.nfev)
    theta = np.maximum(x.reshape(n, p).T, 0.0)
    return theta, np.asarray(mon.trace), nit, nfev, working_set


def _laplace_start(G, p, rng, maxiter, window, tol, stage, levels):
    """The start ``Θ₀: (p, n)`` of one restart: random, or lifted from the optimum on pairs of cells.

    A multilevel (coarse-to-fine) start, as in multigrid optimisation (Nash,
    *A multigrid approach to discretized optimization problems*, Optim.
    Methods Softw. 14, 2000): from :data:`MULTILEVEL_MIN_CELLS` cells on, for
    a self-similar structured Gram (``G.self_similar``: All Range, Prefix and
    their unions with Identity/Total, whose workload on pairs of cells is the
    same kind of workload on half the cells), OPT0 first solves the workload
    on pairs of adjacent cells (:func:`gram_ops.paired`, ``⌈p/2⌉`` rows; itself
    started the same way while it is large enough) and lifts that Θ
    (:func:`_lift_theta`).  The lifted Θ is as sparse as an optimum (2-4 %
    non-zero), so the run on the full domain works on a small working set
    from its first iteration.  A permuted workload (``G.relabelled()``, HDMM
    Sec. 11.1) is started in its own cell order, then relabelled: its
    adjacent cells are not neighbours, but the error is invariant when the
    workload and the strategy are permuted together.  Smaller or dense Grams,
    and the other structured ones, start from ``Θ ~ U[0, 1)`` (HDMM Sec. 4
    draws random starts): for Width 32 at n = 4096 (seeds 0-1) the paired
    start took as long (14-15 s against 15-17 s) for a higher RMSE (6.417 and
    6.424 against 6.4126 and 6.4128).  ``levels`` receives
    ``{"cells", "p", "iterations"}`` of every coarser run, coarsest first.
    The random numbers are drawn only at the coarsest level, so a seed gives
    one start.  The coarser runs stop at the looser tolerance
    :data:`MULTILEVEL_COARSE_TOL` (or ``tol`` when larger).
    """
    if isinstance(G, np.ndarray) or G.n < MULTILEVEL_MIN_CELLS:
        return rng.random((p, G.shape[0] if isinstance(G, np.ndarray) else G.n))
    n = G.n
    relabelled = G.relabelled()
    if relabelled is not None:  # start in the workload's own cell order
        inner, cols = relabelled
        return _laplace_start(inner, p, rng, maxiter, window, tol, stage, levels)[:, cols]
    if not G.self_similar:
        return rng.random((p, n))
    coarse = gram_ops.paired(G)
    p_c = -(-p // 2)
    theta0 = _laplace_start(coarse, p_c, rng, maxiter, window, tol, stage, levels)
    coarse_tol = MULTILEVEL_COARSE_TOL if tol is None else max(tol, MULTILEVEL_COARSE_TOL)
    theta_c, _, nit, _, _ = _laplace_run(coarse, p_c, theta0, maxiter, window, coarse_tol,
                                         f"{stage}, {coarse.n} paired cells")
    levels.append({"cells": coarse.n, "p": p_c, "iterations": nit})
    return _lift_theta(theta_c, p, n)


def _opt0_laplace(G, p, restarts, rng, maxiter, window, tol, stage):
    best = None
    finals = []
    for r in range(restarts):
        name = f"{stage} restart {r + 1}/{restarts}"
        levels: list[dict] = []
        theta0 = _laplace_start(G, p, rng, maxiter, window, tol, name, levels)
        theta, trace, nit, nfev, working_set = _laplace_run(G, p, theta0, maxiter, window, tol, name)
        value = _p_identity_value(theta, G)
        finals.append(value)
        if best is None or value < best[0]:
            best = (value, theta, trace, nit, nfev, working_set, levels)
    value, theta, trace, nit, nfev, working_set, levels = best
    A = p_identity(theta)
    info = {"p": p, "iterations": nit, "evaluations": nfev, "working_set": working_set,
            "nonzero_queries": int(A.m - A.n)}
    if levels:
        info["levels"] = levels
    return A, value, trace, np.asarray(finals), info


# ============================================================ Gaussian OPT0
class _CholeskyObjective:
    """``f(R) = tr(G X⁻¹)`` with ``X = AᵀA``, ``A = R·diag(1/‖r_j‖)`` (HDMM Def. 12).

    ``R`` is upper triangular (the Cholesky factor of ``X`` up to column
    scaling), so ``diag(X) = 1`` by construction and the convex problem
    ``min tr(G X⁻¹) s.t. diag(X) ≤ 1`` becomes unconstrained.  With
    ``c_j = ‖r_j‖``, ``P = R⁻¹`` and ``H = diag(c) G diag(c)``:
    ``f = tr(Pᵀ H P)`` and ``∂f/∂R = triu(−2 (PᵀHP) Pᵀ + R·diag(2 (H P Pᵀ)_jj / c_j²))``:
    three triangular products, O(n³).
    """

    def __init__(self, G: np.ndarray, scale: float):
        self.G, self.n, self.scale = G, G.shape[0], scale
        self.iu = np.triu_indices(self.n)

    def unpack(self, flat):
        R = np.zeros((self.n, self.n))
        R[self.iu] = flat
        return R

    def __call__(self, flat):
        R = self.unpack(flat)
        c2 = (R * R).sum(axis=0)
        if np.any(c2 <= 0):
            return np.inf, np.zeros_like(flat)
        c = np.sqrt(c2)
        P, info = lapack.dtrtri(R, lower=0)
        if info != 0 or not np.all(np.isfinite(P)):
            return np.inf, np.zeros_like(flat)
        H = self.G * c[:, None] * c[None, :]
        HP = blas.dtrmm(1.0, P, H, side=1, lower=0)  # H P
        T1 = blas.dtrmm(1.0, P, HP, side=0, lower=0, trans_a=1)  # Pᵀ H P
        f = float(np.trace(T1))
        grad = blas.dtrmm(-2.0, P, T1, side=1, lower=0, trans_a=1)  # −2 (PᵀHP) Pᵀ
        grad += R * (2.0 * (HP * P).sum(axis=1) / c2)[None, :]
        return f / self.scale, grad[self.iu] / self.scale


def _svd_strategy_factor(lam, Q, eta):
    """Upper Cholesky factor ``R`` of ``X₀ = AᵀA``, ``A`` the normalised SVD-bound strategy.

    ``B = Λ^{1/4} Qᵀ`` (eigenvectors weighted by the fourth root of the
    eigenvalues of ``G + η·mean(λ)·I``, Li & Miklau 2012; HDMM Sec. 4.2),
    columns scaled to unit L2 norm.
    """
    lam = np.clip(lam, 0.0, None)
    lam = lam + eta * lam.mean()
    B = (lam ** 0.25)[:, None] * Q.T
    B /= np.linalg.norm(B, axis=0)
    X = B.T @ B
    try:
        return np.linalg.cholesky(X).T
    except np.linalg.LinAlgError:
        return None


def _opt0_gaussian(G, maxiter, window, tol, stage):
    n = G.shape[0]
    lam, Q = np.linalg.eigh(G)
    singular = lam.min() <= 1e-10 * max(lam.max(), 1e-300) * n
    etas = (1e-4, 1e-3, 1e-2) if singular else (0.0,)
    best0 = None
    for eta in etas:
        R0 = _svd_strategy_factor(lam, Q, eta)
        if R0 is None:
            continue
        value = _unit_tse_dense(R0 / np.linalg.norm(R0, axis=0), G, 2)
        if best0 is None or value < best0[0]:
            best0 = (value, R0, eta)
    if best0 is None:  # pragma: no cover - eigh of a PSD matrix plus η·I is positive definite
        R0, eta0, init_value = np.eye(n), None, float(np.trace(G))
    else:
        init_value, R0, eta0 = best0
    Gopt = G + GAUSSIAN_ETA * float(np.trace(G)) / n * np.eye(n) if singular else G
    scale = float(np.trace(G))
    fun = _CholeskyObjective(Gopt, scale)
    mon = _Monitor(f"{stage}", maxiter, scale, window, tol)
    res = _lbfgs(fun, R0[fun.iu], None, maxiter, mon)
    R = fun.unpack(res.x)
    A = R / np.linalg.norm(R, axis=0)
    value = _unit_tse_dense(A, G, 2)
    if value > init_value:  # never worse than the initialisation
        A, value = R0 / np.linalg.norm(R0, axis=0), init_value
    info = {"iterations": int(res.nit), "init_objective": float(init_value),
            "singular_gram": bool(singular), "eta_init": eta0,
            "eta": GAUSSIAN_ETA if singular else 0.0}
    trace = np.concatenate([[init_value], np.asarray(mon.trace) * 1.0])
    if singular:  # the optimiser's trace is on G + ηI; report the exact final value last
        trace = np.append(trace, value)
    return Dense(A, name="opt0"), value, trace, np.asarray([value]), info


# ===================================================================== OPT0
def _opt0_gram(G, norm, p=None, restarts=None, rng=None, maxiter=None, window=None, tol=None,
               stage="opt0"):
    """OPT0 on a dense Gram matrix or a structured one (a GramOperator, Laplace only).

    Returns ``(A, objective, trace, finals, info)``.
    """
    dense = isinstance(G, np.ndarray)
    n = G.shape[0] if dense else G.n
    kind = _gram_kind(G) if dense else _operator_kind(G)
    trace_g = float(np.trace(G)) if dense else G.trace()
    if kind == "zero":
        raise ValueError("the workload's Gram matrix is zero: there is nothing to answer")
    if kind == "identity":  # SVDB = tr(G): Identity is optimal
        return Identity(n), trace_g, np.asarray([trace_g]), np.asarray([trace_g]), \
            {"exact": "identity"}
    if kind == "total":  # G = b·J: Total has Δ = 1 and tr(bJ (11ᵀ)⁺) = b = SVDB, optimal
        v = trace_g / n
        return Total(n), v, np.asarray([v]), np.asarray([v]), {"exact": "total"}
    g = _rank_one(G) if dense else _operator_rank_one(G)
    if g is not None:  # one query g: answering it directly is optimal (see _rank_one)
        M = float(np.abs(g).max())
        v = M * M
        return Dense((g / M)[None, :], name="opt0"), v, np.asarray([v]), np.asarray([v]), \
            {"exact": "single query"}
    if norm == 1:
        if p is None:
            p = 1 if kind == "ij" else max(1, math.ceil(n / 16))
        restarts = _default_restarts(n) if restarts is None else restarts
        maxiter = 1500 if maxiter is None else maxiter
        A, value, trace, finals, info = _opt0_laplace(
            G, p, restarts, rng, maxiter, 50 if window is None else window, tol, stage)
        identity_value = trace_g
        if identity_value < value:  # Θ = 0 is in the family: keep Identity when it is better
            A, value, info = Identity(n), identity_value, {**info, "exact": "identity"}
        return A, value, trace, finals, info
    if maxiter is None:
        maxiter = int(min(1000, max(25, 3e10 / float(n) ** 3)))
    return _opt0_gaussian(G, maxiter, 20 if window is None else window,
                          1e-5 if tol is None else tol, stage)


def opt0(W, noise: NoiseModel, p: int | None = None, restarts: int | None = None, seed: int = 0,
         maxiter: int | None = None, tol: float | None = None,
         threads: int | None = 1) -> optimization.OptimizationResult:
    """OPT0: optimise an explicit strategy for a workload (HDMM Sec. 4).

    Laplace noise (L1): p-Identity strategies ``A(Θ) = [I; Θ]·D`` (Def.
    13-14), objective ``tr(WᵀW (AᵀA)⁻¹)`` evaluated by Woodbury in O(p n²)
    with its analytic gradient -- in O(p² n) when ``W``'s Gram has fast
    products (:func:`dpexplorer.queries.gram_ops.gram_operator`; ``info["gram"]`` says
    which; both give the same iterates up to rounding) -- scipy L-BFGS-B with bounds ``Θ ≥ 0``
    (bounded above by :data:`THETA_MAX` for conditioning; from
    :data:`WORKING_SET_MIN_VARIABLES` parameters ``p·n`` on, on a working set of Θ grown by the
    KKT conditions, :func:`_lbfgs_working_set`, ``info["working_set"]``), random
    initialisation ``Θ ~ U[0, 1)`` from ``numpy.random.default_rng(seed)``,
    ``restarts`` runs keeping the best.  From :data:`MULTILEVEL_MIN_CELLS`
    cells on, a self-similar structured Gram (All Range, Prefix, their unions
    with Identity/Total, or a permutation of one) starts each restart from the
    optimum of the workload on pairs of adjacent cells (recursively; the
    random ``Θ`` is drawn at the coarsest level), lifted to the full domain
    (:func:`_laplace_start`; ``info["levels"]`` lists the coarser runs, which
    stop at the tolerance ``max(tol, 1e-3)``).
    Gaussian noise (L2): the convex form
    (Def. 12), ``min tr(WᵀW X⁻¹)`` over ``X = AᵀA`` with ``diag(X) ≤ 1``,
    parametrised by an upper-triangular factor with unit-norm columns and
    started from the SVD-bound strategy (eigenvectors of ``WᵀW`` weighted by
    the fourth root of the eigenvalues); the problem is convex, so it runs
    once from that deterministic start and ``restarts``/``seed`` are unused.
    Singular ``WᵀW``: see the module notes (the strategy always has full
    column rank, so it supports ``W``).

    Parameters
    ----------
    W : Matrix, shape (m, n), or ndarray, shape (n, n)
        The workload, or directly its Gram matrix ``WᵀW`` (symmetric PSD;
        OPT⊗ passes surrogate Grams).
    noise : NoiseModel
        Only its norm matters (1: Laplace, 2: Gaussian); ε and δ scale the
        error but not the optimal strategy.
    p : int, optional
        Number of extra p-Identity queries (Laplace).  Default: 1 when
        ``WᵀW ∈ span{I, J}``, else ``⌈n/16⌉`` (HDMM Sec. 9).
    restarts : int, optional
        Random restarts (Laplace).  Default: 3 up to 512 cells, else 1.
    seed : int
        Seed of the Generator drawing the initialisations.
    maxiter : int, optional
        L-BFGS iterations per restart (per level of a multilevel start).  Default: 1500 (Laplace);
        ``clip(3e10 / n³, 25, 1000)`` (Gaussian, whose iterations cost O(n³)).
    tol : float, optional
        Stop a run when the objective improved by less than ``tol``
        (relative) over the last 50 (Laplace; default 1e-3, or
        :data:`WORKING_SET_TOL` = 1e-4 from :data:`WORKING_SET_MIN_VARIABLES`
        parameters on, where L-BFGS-B runs on a working set of Θ) or 20
        (Gaussian; default 1e-5) iterations.
    threads : int or None
        BLAS threads while optimising (threadpoolctl); 1 by default because
        the products are small and a loaded machine makes threads spin.
        ``None`` leaves the pools alone.

    Returns
    -------
    OptimizationResult
        ``strategy``: :class:`~dpexplorer.queries.matrix.Dense`, shape ``(n + p', n)``
        (Laplace: a :class:`PIdentity`, implicit until its ``array`` is used)
        or ``(n, n)`` (Gaussian), sensitivity 1 in the noise's norm
        (:class:`~dpexplorer.queries.matrix.Identity` or
        :class:`~dpexplorer.queries.matrix.Total` when the Gram is ∝ ``I`` or ∝ ``J``,
        which are optimal); ``objective`` = ``error.unit_tse(W, strategy,
        norm)``; ``trace`` of the best restart; ``restarts`` the final
        objective of each restart; ``info`` with ``p``, iterations, ...

    Raises
    ------
    ValueError
        Bad ``noise``, ``p``, ``restarts``, ``seed``, ``maxiter`` or a Gram
        that is not square, symmetric, finite and PSD, or is zero.
    NotApplicableError
        If the domain has more than ``OPT0_MAX_CELLS[norm]`` cells (4096 for
        Laplace, 2048 for Gaussian), or more than
        :data:`OPT0_MAX_CELLS_STRUCTURED` (16384) for Laplace noise and a
        structured Gram: use :func:`opt_kron` / :func:`opt_plus`.
    """
    norm = _norm_of(noise)
    p = _check_count(p, "p")
    restarts = _check_count(restarts, "restarts")
    maxiter = _check_count(maxiter, "maxiter")
    seed = _check_seed(seed)
    if tol is not None and not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a non-negative number, got {tol!r}")
    if not isinstance(W, np.ndarray):
        W = as_matrix(W)
    n, op = _opt0_domain(W, norm)
    t0 = time.perf_counter()
    if isinstance(W, np.ndarray):
        G = _check_gram(W)
    elif op is not None:
        G = op
    else:
        G = _dense_gram(W, "OPT0")
    if p is not None and norm == 1 and p > 4 * n:
        raise ValueError(f"p = {p} is far above the domain size n = {n}; use p <= n")
    rng = np.random.default_rng(seed)
    with _blas_threads(threads):
        A, value, trace, finals, info = _opt0_gram(G, norm, p, restarts, rng, maxiter, tol=tol)
    A.name = "opt0"
    info = {"norm": norm, "gram": "dense" if op is None else "structured", **info}
    return optimization.OptimizationResult(
        strategy=A, objective=float(value), trace=np.asarray(trace, dtype=float),
        restarts=np.asarray(finals, dtype=float), seconds=time.perf_counter() - t0, seed=seed,
        method="opt0", info=info)


def _blas_threads(threads):
    """Context limiting the BLAS thread pools to ``threads`` (``None``: leave them alone)."""
    if threads is None:
        return contextlib.nullcontext()
    threads = _check_count(threads, "threads", allow_none=False)
    return threadpool_limits(limits=threads, user_api="blas")


# =================================================================== OPT⊗
def _sizes(terms, what: str) -> tuple[int, ...]:
    sizes = {tuple(f.n for f in factors) for _, factors in terms}
    if len(sizes) != 1:
        raise registry.NotApplicableError(
            f"{what} needs every product term to factor over the same attributes; found "
            f"factor sizes {sorted(sizes)} (use opt_plus with groups of compatible terms)")
    return sizes.pop()


def _group_workload(terms, idx: Sequence[int]) -> Matrix:
    mats = [term_matrix(*terms[j]) for j in idx]
    return mats[0] if len(mats) == 1 else VStack(mats)


def _factor_trace(G: np.ndarray, inv) -> float:
    if not inv.supports(G):
        raise UnsupportedWorkloadError("a factor strategy does not support its workload factor")
    return inv.trace(G)


def opt_kron(W, noise: NoiseModel, restarts: int | None = None, seed: int = 0,
             maxiter: int | None = None, p=None, cycles: int = 10, tol: float = 1e-6,
             threads: int | None = 1) -> optimization.OptimizationResult:
    """OPT⊗: one Kronecker strategy ``A_1 ⊗ ... ⊗ A_d`` (HDMM Def. 17-18).

    For ``W = ∪_j w_j (W_j1 ⊗ ... ⊗ W_jd)`` and ``A = ⊗ A_i`` (Thm 6):
    ``TSE/v = Π_i Δ(A_i)² · Σ_j w_j² Π_i tr(G_ji (A_iᵀA_i)⁺)`` with
    ``G_ji = W_jiᵀW_ji``.  Every factor is normalised to ``Δ(A_i) = 1``.
    Block-coordinate descent (Sec. 6.2): start from ``A_i = I``; to update
    factor ``i`` run OPT0 on the surrogate Gram ``Σ_j c_j G_ji`` with
    ``c_j = w_j² Π_{k≠i} tr(G_jk (A_kᵀA_k)⁺)`` (HDMM Sec. 6.2, Thm 6, Eq. 5 and Def. 18),
    keep the new factor only if it lowers the objective, and cycle until a
    cycle improves it by less than ``tol`` (relative).  A single product
    decomposes exactly (Def. 17), so one cycle suffices.  Attributes whose
    sub-workloads are all ∝ ``I`` keep Identity, all ∝ ``J`` get Total
    (both optimal); those in ``span{I, J}`` use p = 1 (HDMM Sec. 9).

    Parameters
    ----------
    W : Matrix, shape (m, n)
        A Kronecker product, a union of weighted Kronecker products over the
        same attribute sizes, or any 1D workload (then this is OPT0).
    noise : NoiseModel
        Its norm selects the Laplace or Gaussian OPT0 oracle.
    restarts : int, optional
        Restarts of every OPT0 call (default as in :func:`opt0`).
    seed : int
        Seed; factor ``i`` in cycle ``c`` uses ``default_rng([seed, c, i])``.
    maxiter : int, optional
        Iterations per OPT0 call (default as in :func:`opt0`).
    p : int or sequence of int, optional
        p-Identity size per attribute (default: 1 for Identity/Total-only
        attributes, else ``⌈n_i/16⌉``).
    cycles : int
        Maximum block-coordinate cycles.
    tol : float
        Relative improvement below which cycling stops.
    threads : int or None
        BLAS threads while optimising (see :func:`opt0`).

    Returns
    -------
    OptimizationResult
        ``strategy``: :class:`~dpexplorer.queries.matrix.Kronecker` (a
        :class:`~dpexplorer.queries.matrix.Dense` for 1D workloads), sensitivity 1;
        ``objective`` = ``error.unit_tse(W, strategy, norm)``; ``trace``: the
        objective after every factor update; ``info["factors"]``: per
        attribute, the kind of strategy and ``p``.

    Raises
    ------
    ValueError
        Bad parameters.
    NotApplicableError
        If the product terms do not share the attribute sizes.
    """
    norm = _norm_of(noise)
    restarts = _check_count(restarts, "restarts")
    maxiter = _check_count(maxiter, "maxiter")
    seed = _check_seed(seed)
    cycles = _check_count(cycles, "cycles", allow_none=False)
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be a non-negative number, got {tol!r}")
    W = as_matrix(W)
    terms = product_terms(W)
    sizes = _sizes(terms, "OPT⊗")
    d = len(sizes)
    if isinstance(p, int | np.integer) and not isinstance(p, bool):
        ps = [_check_count(p, "p")] * d
    elif p is None:
        ps = [None] * d
    else:
        ps = [_check_count(v, "p") for v in p]
        if len(ps) != d:
            raise ValueError(f"p has {len(ps)} entries for {d} attributes")
    t0 = time.perf_counter()
    if d == 1:  # a 1D workload: OPT⊗ is OPT0 on its Gram
        res = opt0(W, noise, p=ps[0], restarts=restarts, seed=seed, maxiter=maxiter,
                   threads=threads)
        return dataclasses.replace(res, method="opt_kron", info={**res.info, "oracle": "opt0"},
                                   seconds=time.perf_counter() - t0)
    for i, ni in enumerate(sizes):
        if ni > OPT0_MAX_CELLS[norm]:
            raise registry.NotApplicableError(
                f"OPT⊗ runs OPT0 on every attribute; attribute {i} has {ni:,} values, above "
                f"{OPT0_MAX_CELLS[norm]:,}")
    w2 = np.array([c * c for c, _ in terms])
    grams = [[np.asarray(f.gram().dense(), dtype=float) for f in factors] for _, factors in terms]
    k = len(terms)
    kinds = []
    for i in range(d):
        ks = {_gram_kind(grams[j][i]) for j in range(k)} - {"zero"}
        if not ks:
            raise ValueError(f"every workload term is zero on attribute {i}")
        kinds.append(ks.pop() if len(ks) == 1 else ("ij" if ks <= {"identity", "total", "ij"}
                                                     else "general"))
    factors: list[Matrix] = []
    C = np.empty((k, d))
    for i, ni in enumerate(sizes):
        A_i = Total(ni) if kinds[i] == "total" else Identity(ni)
        factors.append(A_i)
        inv = FactorInverse(A_i)
        C[:, i] = [_factor_trace(grams[j][i], inv) for j in range(k)]
    free = [i for i in range(d) if kinds[i] not in ("identity", "total")]
    objective = float(w2 @ C.prod(axis=1))
    trace = [objective]
    details: dict[int, dict] = {i: {"kind": kinds[i], "strategy": factors[i].name} for i in range(d)}
    with _blas_threads(threads):
        for cycle in range(cycles):
            start = objective
            for i in free:
                others = np.prod(np.delete(C, i, axis=1), axis=1)
                cj = w2 * others
                Ghat = sum(c * grams[j][i] for j, c in enumerate(cj))
                Ghat = Ghat / max(float(np.trace(Ghat)), 1e-300)
                Ghat = 0.5 * (Ghat + Ghat.T)
                rng = np.random.default_rng([seed, cycle, i])
                p_i = ps[i] if ps[i] is not None else (1 if kinds[i] == "ij"
                                                       else max(1, math.ceil(sizes[i] / 16)))
                A_i, _, _, _, info = _opt0_gram(
                    Ghat, norm, p_i, restarts, rng, maxiter,
                    stage=f"opt⊗ cycle {cycle + 1} attribute {i + 1}/{d}")
                inv = FactorInverse(A_i)
                new_C = np.array([_factor_trace(grams[j][i], inv) for j in range(k)])
                new_obj = float(w2 @ (others * new_C))
                if new_obj < objective:
                    factors[i], C[:, i], objective = A_i, new_C, new_obj
                    details[i] = {"kind": kinds[i], "strategy": A_i.name, "p": p_i, **info}
                trace.append(objective)
                optimization.report("opt⊗", cycle + 1, cycles, objective)
            if k == 1 or start - objective <= tol * objective:
                break
    for i, f in enumerate(factors):
        if isinstance(f, Dense):
            f.name = f"opt0[{i}]"
    A = Kronecker(factors, name="opt_kron")
    return optimization.OptimizationResult(
        strategy=A, objective=objective, trace=np.asarray(trace), restarts=np.asarray([objective]),
        seconds=time.perf_counter() - t0, seed=seed, method="opt_kron",
        info={"norm": norm, "cycles": cycle + 1 if free else 0, "terms": k,
              "factors": [details[i] for i in range(d)]})


# ===================================================================== OPT+
def plus_weights(errors, norm: int) -> tuple[np.ndarray, float]:
    """Closed-form budget weights of OPT+ (HDMM Def. 19).

    Block ``g`` (a strategy with unit sensitivity and unit-budget error
    ``e_g``) is scaled by ``c_g``; the stack's unit TSE is
    ``Δ(c)² · Σ_g e_g / c_g²``.  Laplace: ``Δ₁ = Σ c_g``, minimised by
    ``c_g ∝ e_g^(1/3)`` with value ``(Σ e_g^(1/3))³``.  Gaussian:
    ``Δ₂² = Σ c_g²``, minimised by ``c_g² ∝ √e_g`` with value
    ``(Σ √e_g)²`` (Lagrange multipliers).

    Parameters
    ----------
    errors : array_like, shape (k,)
        Positive unit-budget errors ``e_g``.
    norm : {1, 2}

    Returns
    -------
    weights : ndarray, shape (k,)
        ``c``, normalised to ``Δ(c) = 1``.
    objective : float
        The minimal unit TSE.

    Raises
    ------
    ValueError
        If an error is not positive and finite, or ``norm`` is not 1 or 2.
    """
    e = np.asarray(errors, dtype=float)
    if e.ndim != 1 or e.size == 0 or not np.all(np.isfinite(e)) or np.any(e <= 0):
        raise ValueError("errors must be a non-empty 1D array of positive finite numbers")
    if norm == 1:
        c = np.cbrt(e)
        return c / c.sum(), float(np.cbrt(e).sum() ** 3)
    if norm == 2:
        c = e ** 0.25
        return c / math.sqrt(float((c * c).sum())), float(np.sqrt(e).sum() ** 2)
    raise ValueError(f"norm must be 1 or 2, got {norm!r}")


def _check_groups(groups, k: int) -> list[list[int]]:
    if groups is None:
        return [[j] for j in range(k)]
    try:
        out = [[int(j) for j in g] for g in groups]
    except TypeError:
        raise ValueError("groups must be a list of lists of term indices") from None
    flat = sorted(j for g in out for j in g)
    if any(len(g) == 0 for g in out) or flat != list(range(k)):
        raise ValueError(
            f"groups must partition the workload's {k} product terms (indices 0..{k - 1}, each "
            f"exactly once, no empty group); got {groups!r}")
    return out


def opt_plus(W, noise: NoiseModel, groups=None, restarts: int | None = None, seed: int = 0,
             maxiter: int | None = None, p=None,
             threads: int | None = 1) -> optimization.OptimizationResult:
    """OPT+: one OPT⊗ strategy per product term or group, stacked (HDMM Def. 19).

    Each group ``g`` of terms of ``W = ∪_j w_j (W_j1 ⊗ ... ⊗ W_jd)`` gets its
    own :func:`opt_kron` strategy ``A_g`` (sensitivity 1, unit-budget error
    ``e_g`` on its terms); the strategy stacks ``c_g·A_g`` with the
    closed-form weights of :func:`plus_weights`.  Each term is answered from
    its own group's measurements only (local least squares, HDMM Sec. 10
    item 3), which is what the weights optimise; see :class:`KronStack`.

    Parameters
    ----------
    W : Matrix, shape (m, n)
        A union of (weighted) products; groups may factor differently.
    noise : NoiseModel
    groups : list of list of int, optional
        A partition of the term indices of :func:`product_terms` (in row
        order); default one group per term.
    restarts, seed, maxiter, p, threads
        As in :func:`opt_kron`; group ``g`` uses seed ``[seed, g]``.

    Returns
    -------
    OptimizationResult
        ``strategy``: a :class:`KronStack` (or the single group's strategy
        when there is one group); ``objective`` = ``error.unit_tse(W,
        strategy, norm)``; ``info``: per-group errors and weights.

    Raises
    ------
    ValueError
        Bad parameters or groups that do not partition the terms.
    NotApplicableError
        If a group's terms do not share attribute sizes.
    """
    norm = _norm_of(noise)
    seed = _check_seed(seed)
    W = as_matrix(W)
    terms = product_terms(W)
    groups = _check_groups(groups, len(terms))
    t0 = time.perf_counter()
    if len(groups) == 1:
        res = opt_kron(W, noise, restarts=restarts, seed=seed, maxiter=maxiter, p=p,
                       threads=threads)
        return dataclasses.replace(res, method="opt_plus", seconds=time.perf_counter() - t0,
                                   info={**res.info, "groups": groups})
    blocks, errors, sub_info = [], [], []
    for g, idx in enumerate(groups):
        optimization.report("opt+ group", g, len(groups), float("nan"))
        Wg = _group_workload(terms, idx)
        sub_seed = int(np.random.SeedSequence([seed, g]).generate_state(1)[0])
        rg = opt_kron(Wg, noise, restarts=restarts, seed=sub_seed, maxiter=maxiter, p=p,
                      threads=threads)
        blocks.append(rg.strategy)
        errors.append(rg.objective / rg.strategy.sensitivity(norm) ** 2)
        sub_info.append({"terms": idx, "error": errors[-1], "method": rg.method,
                         "seconds": rg.seconds})
    weights, _ = plus_weights(errors, norm)
    signature = [tuple((f.m, f.n) for f in factors) for _, factors in terms]
    A = KronStack(blocks, weights, groups, signature, name="opt_plus")
    objective = error.unit_tse(W, A, norm)
    for info, c in zip(sub_info, weights, strict=True):
        info["weight"] = float(c)
    optimization.report("opt+ group", len(groups), len(groups), objective)
    return optimization.OptimizationResult(
        strategy=A, objective=float(objective), trace=np.asarray([objective]),
        restarts=np.asarray([objective]), seconds=time.perf_counter() - t0, seed=seed,
        method="opt_plus", info={"norm": norm, "groups": sub_info})


# ================================================================ memo, registry
_MEMO: OrderedDict = OrderedDict()
_MEMO_SIZE = 16
_MEMO_LOCK = threading.Lock()


def memoised(method: str, W: Matrix, norm: int, params: dict, compute: Callable[[], optimization.OptimizationResult]):
    """Result of ``compute()`` cached per (method, workload object, norm, params) (small LRU).

    Keys hold the workload itself (Matrix objects hash by identity), so the
    app's Compare page building "opt0" and then "hdmm" for the same workload
    and parameters optimises once.  Unhashable parameters skip the cache.
    """
    try:
        key = (method, W, norm, tuple(sorted((k, _freeze(v)) for k, v in params.items())))
        hash(key)
    except TypeError:
        return compute()
    with _MEMO_LOCK:
        if key in _MEMO:
            _MEMO.move_to_end(key)
            return _MEMO[key]
    result = compute()  # outside the lock: other threads may use the memo meanwhile
    with _MEMO_LOCK:
        _MEMO[key] = result
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return result


def _freeze(v):
    if isinstance(v, list | tuple):
        return tuple(_freeze(u) for u in v)
    return v


def fresh(result: optimization.OptimizationResult) -> Matrix:
    """A shallow copy of ``result.strategy`` with a copy of ``result`` attached.

    Registered builders return this, so renaming the strategy (the registry
    does) or re-attaching never touches a cached result.
    """
    A = copy.copy(result.strategy)
    return optimization.attach(dataclasses.replace(result, strategy=A, info=dict(result.info)))


def _opt0_domain(W, norm: int):
    """``(n, structured Gram or None)`` of ``W`` (a Matrix, or an ``(n, n)`` Gram array) for OPT0.

    Raises
    ------
    NotApplicableError
        Above ``OPT0_MAX_CELLS[norm]`` cells, or :data:`OPT0_MAX_CELLS_STRUCTURED` for
        Laplace noise and a structured Gram.
    """
    op = None
    if isinstance(W, np.ndarray):
        n = W.shape[1]
    else:
        n = W.n
        if norm == 1:  # structured Gram: O(p² n) iterations, no n × n matrix
            op = gram_operator(W)
    limit = OPT0_MAX_CELLS[norm] if op is None else OPT0_MAX_CELLS_STRUCTURED
    if n > limit:
        raise registry.NotApplicableError(
            f"OPT0 optimises an explicit strategy over every cell; this workload has n = {n:,} "
            f"cells, above {limit:,} for {'Laplace' if norm == 1 else 'Gaussian'} noise"
            f"{' and this workload' if op is not None else ''}: use OPT⊗, OPT+ or HDMM, "
            f"which work factor by factor")
    return n, op


def opt0_scope(W, noise: NoiseModel) -> None:
    """Refuse, before any work, a domain too large for OPT0 (the registry's scope check).

    ``W``: workload ``(m, n)`` (a Matrix or array); ``noise``: the noise model.  The same
    limits as :func:`opt0`: ``OPT0_MAX_CELLS[norm]`` cells (4096 Laplace, 2048 Gaussian),
    :data:`OPT0_MAX_CELLS_STRUCTURED` for Laplace noise and a structured Gram.

    Raises
    ------
    NotApplicableError
        For a domain above the limit.
    ValueError
        For a noise that is not a noise model.
    """
    _opt0_domain(as_matrix(W), _norm_of(noise))


def _build_opt0(W, noise, p=None, restarts=None, seed=0, maxiter=None):
    return fresh(cached_opt0(as_matrix(W), noise, restarts, seed, maxiter, p=p))


def _build_opt_kron(W, noise, restarts=None, seed=0, maxiter=None):
    return fresh(cached_opt_kron(as_matrix(W), noise, restarts, seed, maxiter))


def _build_opt_plus(W, noise, groups=None, restarts=None, seed=0, maxiter=None):
    return fresh(cached_opt_plus(as_matrix(W), noise, groups, restarts, seed, maxiter))


def cached_opt0(W, noise, restarts=None, seed=0, maxiter=None, p=None):
    """:func:`opt0` through the memo (shared by the builders and HDMM); arguments as :func:`opt0`."""
    params = {"p": p, "restarts": restarts, "seed": seed, "maxiter": maxiter}
    return memoised("opt0", W, noise.norm, params, lambda: opt0(W, noise, **params))


def cached_opt_kron(W, noise, restarts=None, seed=0, maxiter=None):
    """:func:`opt_kron` through the memo; a 1D workload reuses the memoised OPT0."""
    params = {"restarts": restarts, "seed": seed, "maxiter": maxiter}

    def compute():
        terms = product_terms(W)
        if len(_sizes(terms, "OPT⊗")) == 1:
            res = cached_opt0(W, noise, restarts, seed, maxiter)
            return dataclasses.replace(res, method="opt_kron", info={**res.info, "oracle": "opt0"})
        return opt_kron(W, noise, **params)

    return memoised("opt_kron", W, noise.norm, params, compute)


def cached_opt_plus(W, noise, groups=None, restarts=None, seed=0, maxiter=None):
    """:func:`opt_plus` through the memo; one group reuses the memoised OPT⊗."""
    params = {"groups": groups, "restarts": restarts, "seed": seed, "maxiter": maxiter}

    def compute():
        k = len(product_terms(W))
        if len(_check_groups(groups, k)) == 1:
            res = cached_opt_kron(W, noise, restarts, seed, maxiter)
            return dataclasses.replace(res, method="opt_plus",
                                       info={**res.info, "groups": [list(range(k))]})
        return opt_plus(W, noise, groups=groups, restarts=restarts, seed=seed, maxiter=maxiter)

    return memoised("opt_plus", W, noise.norm, params, compute)


for _m in [
    registry.Mechanism(
        "opt0", "OPT0", _build_opt0,
        "HDMM's explicit optimiser: p-Identity strategy (Laplace) or convex optimum over AᵀA "
        "(Gaussian) for a dense Gram matrix (up to 4096 cells; Laplace on range workloads, "
        "whose Gram has fast products, up to 16,384 cells).",
        "McKenna et al., HDMM, Sec. 4, Def. 12-14",
        params={"p": None, "restarts": None, "seed": 0, "maxiter": None}, scope=opt0_scope,
        optimizer=True),
    registry.Mechanism(
        "opt_kron", "OPT⊗", _build_opt_kron,
        "One Kronecker product of per-attribute OPT0 strategies, by block-coordinate descent.",
        "McKenna et al., HDMM, Sec. 6, Def. 17-18",
        params={"restarts": None, "seed": 0, "maxiter": None}, optimizer=True),
    registry.Mechanism(
        "opt_plus", "OPT+", _build_opt_plus,
        "One OPT⊗ strategy per product term, stacked with closed-form budget weights; local "
        "least squares.",
        "McKenna et al., HDMM, Sec. 6.2, Def. 19; Sec. 10 item 3",
        params={"groups": None, "restarts": None, "seed": 0, "maxiter": None}, optimizer=True),
]:
    registry.register(_m)
