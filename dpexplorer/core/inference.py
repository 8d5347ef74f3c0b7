"""INFERENCE: the estimate ``x̂`` of the data vector from noisy strategy answers ``y``, as a choice.

Every data-independent release measures ``y = A x + z`` and then infers
``x̂``.  The inference is post-processing of the noisy answers (no data, no
privacy cost); this module names the methods:

=================  ===========================================================
``least_squares``  ``x̂ = A⁺ y`` (:class:`~dpexplorer.core.reconstruct.Reconstructor`):
                   linear in ``y``, unbiased, with the analytic error of the
                   matrix mechanism (Li, Hay, Rastogi, Miklau & McGregor,
                   PODS 2010, Prop. 4; HDMM Prop. 4).
``nonnegative``    non-negative least squares ``min ‖A x − y‖₂ s.t. x ≥ 0``
                   (Lawson & Hanson, *Solving Least Squares Problems*, 1974,
                   Ch. 23): counts are never negative; it trades bias for
                   variance (McKenna, Miklau, Hay & Machanavajjhala, HDMM,
                   journal version, Sec. 10), and on sparse data, where
                   enforcing non-negativity reorders the algorithms (Hay,
                   Machanavajjhala, Miklau, Chen & Zhang, "Principled
                   evaluation of differentially private algorithms using
                   DPBench", SIGMOD 2016), it removes most of the noise on
                   the empty cells.  Not linear in ``y``: no analytic error;
                   intervals come from a parametric bootstrap of the noise
                   (:func:`parametric_bootstrap`).
=================  ===========================================================

:data:`INFERENCES` maps each name to its function ``f(A, y, *, reconstructor=None,
row_scale=None) -> x̂`` (the first line of its docstring describes it);
:func:`register_inference` adds a method.  See ``dpexplorer/docs/inference.md``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..privacy import samplers
from ..privacy.noise import Gaussian, Laplace, NoiseModel
from ..queries.matrix import Identity, Matrix, as_matrix
from .reconstruct import Reconstructor

__all__ = ["INFERENCES", "ANALYTIC", "DEFAULT_INFERENCE", "register_inference", "check_inference",
           "describe", "least_squares", "nonnegative", "NonNegativeLeastSquares", "NNLSResult",
           "make_solver", "noise_draws", "parametric_bootstrap", "BootstrapAnswers",
           "BOOTSTRAP_DRAWS", "BOOTSTRAP_SEED", "BOOTSTRAP_LIMIT", "NNLS_TOL"]

#: The inference of a release unless another is asked for.
DEFAULT_INFERENCE = "least_squares"
#: Default number of bootstrap draws of :func:`parametric_bootstrap`.
BOOTSTRAP_DRAWS = 200
#: Default seed of the bootstrap's simulation Generator (a public noise model is redrawn: no release).
BOOTSTRAP_SEED = 0
#: Largest ``draws × m`` bootstrap answers kept in memory.
BOOTSTRAP_LIMIT = 5 * 10**7
#: Default relative KKT tolerance of :class:`NonNegativeLeastSquares` (see its docstring).
NNLS_TOL = 1e-9

#: name -> inference function ``f(A, y, *, reconstructor=None, row_scale=None) -> x̂``.
INFERENCES: dict[str, Callable[..., np.ndarray]] = {}
#: Names of the inferences whose estimate is linear in ``y`` (analytic error holds).
ANALYTIC: set[str] = set()


def register_inference(name: str, analytic: bool = False):
    """Decorator: register ``f(A, y, *, reconstructor=None, row_scale=None) -> x̂`` under ``name``.

    Parameters
    ----------
    name : str
        The value of ``inference=`` that selects it.
    analytic : bool
        Whether ``x̂`` is ``A⁺ y`` (then the matrix mechanism's analytic error
        holds); any other method gets bootstrap intervals.

    Raises
    ------
    ValueError
        If ``name`` is taken or the function has no docstring (its first line describes it).
    """
    def add(f):
        if name in INFERENCES:
            raise ValueError(f"inference {name!r} is already registered")
        if not (f.__doc__ or "").strip():
            raise ValueError(f"inference {name!r} needs a docstring: its first line describes it")
        INFERENCES[name] = f
        if analytic:
            ANALYTIC.add(name)
        return f
    return add


def check_inference(name, allowed=None) -> str:
    """``name`` if it is a registered inference (and among ``allowed``), else a ValueError.

    Raises
    ------
    ValueError
        If ``name`` is not a string naming a registered inference, or not in ``allowed``.
    """
    allowed = tuple(INFERENCES) if allowed is None else tuple(allowed)
    if not isinstance(name, str) or name not in INFERENCES or name not in allowed:
        raise ValueError(f"inference must be one of {list(allowed)}, got {name!r}")
    return name


def describe() -> dict[str, str]:
    """``{name: first line of its docstring}`` of every registered inference."""
    return {k: (f.__doc__ or "").strip().splitlines()[0] for k, f in INFERENCES.items()}


# ================================================================ least squares
@register_inference("least_squares", analytic=True)
def least_squares(A, y, *, reconstructor: Reconstructor | None = None,
                  row_scale=None) -> np.ndarray:
    """Least squares ``x̂ = A⁺y``: linear and unbiased, with the matrix mechanism's analytic error.

    Parameters
    ----------
    A : Matrix or array, shape (p, n)
        The strategy.
    y : ndarray, shape (p,)
        Noisy strategy answers (counts).
    reconstructor : Reconstructor, optional
        A factorisation of ``A`` made before (reused across calls).
    row_scale : ndarray, shape (p,), optional
        Noise standard deviation of every row when they differ: weighted
        least squares ``min ‖(A x − y)/σ‖₂`` (Gauss-Markov: the best linear
        unbiased estimate).  ``None``: i.i.d. noise.

    Returns
    -------
    ndarray, shape (n,)

    Raises
    ------
    ValueError
        If ``y`` or ``row_scale`` does not fit ``A`` or is not finite (positive).
    """
    A = as_matrix(A)
    if row_scale is not None:
        s = _row_scale(row_scale, A.m)
        return Reconstructor(_scaled(A, s))(np.asarray(y, dtype=float) / s)
    return (reconstructor or Reconstructor(A))(y)


# ================================================================ non-negative
@dataclass(frozen=True)
class NNLSResult:
    """One solve of :class:`NonNegativeLeastSquares`.

    Attributes
    ----------
    x : ndarray, shape (n,)
        The estimate, every entry ``>= 0`` (counts).
    objective : float
        ``½‖A x − y‖²`` (weighted by ``1/σ²`` per row when given).
    start_objective : float
        The same at the start, least squares clipped at 0; ``objective <= start_objective``.
    kkt : float
        ``max_j |min(x_j, g_j / L)|`` with ``g = Aᵀ(A x − y)``: 0 exactly at
        the NNLS solution (KKT: ``x ≥ 0``, ``g ≥ 0``, ``x·g = 0``).
    iterations : int
    converged : bool
        Whether ``kkt <= tol · max(1, max_j x_j)`` was reached.
    """

    x: np.ndarray
    objective: float
    start_objective: float
    kkt: float
    iterations: int
    converged: bool


#: Iterations between two fresh products ``A z`` (between them ``A z`` is updated by linearity).
REFRESH_EVERY = 50
#: Most backtracking steps (each multiplies ``L`` by 1.5, 10^17 in all) before the solve stops.
BACKTRACK_LIMIT = 100


class NonNegativeLeastSquares:
    """Non-negative least squares ``min ½‖A x − y‖₂² s.t. x ≥ 0`` on an implicit strategy.

    Accelerated projected gradient (FISTA, Beck & Teboulle, SIAM J. Imaging
    Sciences 2(1), 2009, Sec. 4, with backtracking) with gradient-based
    adaptive restart (O'Donoghue & Candès, Found. Comput. Math. 15, 2015,
    Sec. 3), using only ``A.matvec`` and ``A.rmatvec``: the strategy is
    never materialised.  Started from the least-squares estimate clipped at 0
    (``A⁺y`` by the strategy's own :class:`Reconstructor`); the last iterate
    is returned if its objective is not above the start's, else the start,
    so the objective is never above that of clipped least squares.
    Stops when the KKT residual of NNLS (Lawson & Hanson 1974, Ch. 23:
    ``x ≥ 0``, ``g = Aᵀ(Ax − y) ≥ 0``, ``x_j g_j = 0``),
    measured in counts as ``max_j |min(x_j, g_j/L)|`` (``L`` the Lipschitz
    constant of the gradient, ``≈ ‖A‖₂²``), is at most ``tol · max(1, max_j x_j)``;
    the distance to the solution is then of the order of that residual times
    the condition number of ``AᵀA`` on the free cells (about ``2n`` for H2).
    Strategies without full column rank (some marginal strategies) make the
    problem not strongly convex and convergence sublinear: such a solve may
    stop at ``max_iter`` (it warns).

    Parameters
    ----------
    A : Matrix or array, shape (p, n)
    reconstructor : Reconstructor, optional
        Least squares for the start (built from ``A`` if not given).
    row_scale : ndarray, shape (p,), optional
        Noise standard deviation per row when the rows' noise differs: the
        objective becomes ``½‖(A x − y)/σ‖²``.  ``None``: i.i.d. noise.
    tol : float
        Relative KKT tolerance (default :data:`NNLS_TOL`).
    max_iter : int
        Iteration cap (default 20000); a solve that reaches it warns.

    Raises
    ------
    ValueError
        If ``tol`` or ``max_iter`` is not positive, or ``row_scale`` does not fit.
    """

    def __init__(self, A, reconstructor: Reconstructor | None = None, row_scale=None,
                 tol: float = NNLS_TOL, max_iter: int = 20000):
        A = as_matrix(A)
        if not (isinstance(tol, float | int) and math.isfinite(tol) and tol > 0):
            raise ValueError(f"tol must be a positive number, got {tol!r}")
        if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
            raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
        self.A, self.tol, self.max_iter = A, float(tol), max_iter
        self.row_scale = None if row_scale is None else _row_scale(row_scale, A.m)
        self._op = A if self.row_scale is None else _scaled(A, self.row_scale)
        if reconstructor is None or self.row_scale is not None:
            reconstructor = Reconstructor(self._op)
        self.reconstructor = reconstructor
        self._L: float | None = None

    @property
    def lipschitz(self) -> float:
        """Upper estimate of ``‖A‖₂²`` (power iteration on ``AᵀA``, 1.05 margin; raised by backtracking)."""
        if self._L is None:
            self._L = _power_norm2(self._op)
        return self._L

    def __call__(self, y, start=None) -> np.ndarray:
        """``x̂ >= 0`` (shape ``(n,)``, counts) for noisy answers ``y: (p,)``; warns if not converged.

        Raises
        ------
        ValueError
            If ``y`` does not fit the strategy or is not finite.
        """
        res = self.solve(y, start)
        if not res.converged:
            warnings.warn(f"non-negative least squares on {self.A.name!r} stopped after "
                          f"{res.iterations} iterations with KKT residual {res.kkt:.3g} counts "
                          f"(tolerance {self.tol:g} relative)", RuntimeWarning, stacklevel=2)
        return res.x

    def solve(self, y, start=None) -> NNLSResult:
        """Solve for ``y: (p,)``; ``start`` (shape ``(n,)``) replaces the least-squares start.

        Raises
        ------
        ValueError
            If ``y`` or ``start`` does not fit the strategy or is not finite.
        """
        op = self._op
        y = _check_vector(y, op.m, "y (the noisy strategy answers)")
        if self.row_scale is not None:
            y = y / self.row_scale
        if start is None:
            x_ls = self.reconstructor(y)
        else:
            x_ls = _check_vector(start, op.n, "start")
        x = np.maximum(x_ls, 0.0)
        if isinstance(op, Identity):  # separable: the projection of A⁺y is the solution
            r = x - y
            return NNLSResult(x, 0.5 * _dot(r, r), 0.5 * _dot(r, r), 0.0, 0, True)
        Ax = op.matvec(x)
        r = Ax - y
        f = 0.5 * _dot(r, r)
        x0, f0 = x, f
        L = self.lipschitz
        # buffers updated in place: vectors of 16,384 cells and more are allocated by mmap, and
        # a fresh one per operation costs more than the products with A
        x, z, Az, t = x.copy(), x.copy(), Ax.copy(), 1.0
        x_new, d, step = np.empty(op.n), np.empty(op.n), np.empty(op.n)
        rz, r_new = np.empty(op.m), np.empty(op.m)
        kkt, it, converged = math.inf, 0, False
        for it in range(1, self.max_iter + 1):
            if it % REFRESH_EVERY == 0:  # A z kept by linearity drifts by rounding: recompute it
                Az = op.matvec(z)
            np.subtract(Az, y, out=rz)
            fz = 0.5 * _dot(rz, rz)
            g = op.rmatvec(rz)
            for _ in range(BACKTRACK_LIMIT):  # L must majorise f along the step (Beck & Teboulle, Sec. 4)
                np.multiply(g, -1.0 / L, out=x_new)
                x_new += z
                np.maximum(x_new, 0.0, out=x_new)          # projection onto x >= 0
                np.subtract(x_new, z, out=d)
                Ax_new = op.matvec(x_new)
                np.subtract(Ax_new, y, out=r_new)
                f_new = 0.5 * _dot(r_new, r_new)
                if f_new <= fz + _dot(g, d) + 0.5 * L * _dot(d, d) + 1e-12 * max(fz, 1.0):
                    break
                L *= 1.5
            else:  # no step is accepted: f is flat to rounding here (seen with Privelet's strategy
                L = self.lipschitz  # on DPBench's PATENT, ε = 0.1: L grew to inf, the step to 0)
                kkt = _kkt(op, x, y, L)
                converged = kkt <= _goal(self.tol, x)
                break
            np.subtract(x_new, x, out=step)
            if -_dot(d, step) > 0:  # (z − x_new)·(x_new − x) > 0: restart (O'Donoghue & Candès)
                t_new, beta = 1.0, 0.0
            else:
                t_new = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
                beta = (t - 1.0) / t_new
            np.multiply(step, beta, out=z)
            z += x_new                                     # z = x_new + β (x_new − x)
            np.subtract(Ax_new, Ax, out=Az)
            Az *= beta
            Az += Ax_new                                   # A z, by linearity
            x, x_new = x_new, x
            Ax, f, t = Ax_new, f_new, t_new
            if it % 10 == 0 or it == self.max_iter:
                kkt = _kkt(op, x, y, L)
                if kkt <= _goal(self.tol, x):
                    converged = True
                    break
        self._L = L
        if f <= f0:  # the last iterate: its KKT residual is the one measured
            return NNLSResult(x, f, f0, kkt, it, converged)
        kkt = _kkt(op, x0, y, L)  # never above the start (clipped least squares)
        return NNLSResult(x0, f0, f0, kkt, it, kkt <= _goal(self.tol, x0))


@register_inference("nonnegative")
def nonnegative(A, y, *, reconstructor: Reconstructor | None = None, row_scale=None) -> np.ndarray:
    """Non-negative least squares ``min ‖A x − y‖₂ s.t. x ≥ 0`` (Lawson & Hanson 1974): no analytic error.

    See :class:`NonNegativeLeastSquares` (the algorithm, tolerance and start).

    Parameters
    ----------
    A : Matrix or array, shape (p, n)
    y : ndarray, shape (p,)
    reconstructor : Reconstructor, optional
        Least squares of ``A`` for the start.
    row_scale : ndarray, shape (p,), optional
        Noise standard deviation per row (weighted NNLS); ``None``: i.i.d. noise.

    Returns
    -------
    ndarray, shape (n,)
        ``x̂ >= 0``, counts.

    Raises
    ------
    ValueError
        If ``y`` does not fit ``A`` or is not finite.
    """
    return NonNegativeLeastSquares(A, reconstructor, row_scale)(y)


def make_solver(name: str, A,
                reconstructor: Reconstructor | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """A reusable ``y -> x̂`` for inference ``name`` on strategy ``A: (p, n)`` (i.i.d. noise).

    Least squares reuses ``reconstructor``; non-negative least squares keeps
    its Lipschitz estimate across calls (bootstrap draws, evaluation trials).

    Raises
    ------
    ValueError
        If ``name`` is not a registered inference.
    """
    check_inference(name)
    A = as_matrix(A)
    recon = reconstructor or Reconstructor(A)
    if name == "least_squares":
        return recon
    if name == "nonnegative":
        return NonNegativeLeastSquares(A, recon)
    f = INFERENCES[name]
    return lambda y: f(A, y, reconstructor=recon)


# ================================================================ bootstrap
def noise_draws(noise: NoiseModel, A: Matrix, discrete: bool) -> Callable[[np.random.Generator], np.ndarray]:
    """``draw(rng) -> z: (p,)``: the measurement noise of ``A`` under ``noise``, from a seeded Generator.

    The same distribution as MEASURE's (:meth:`dpexplorer.privacy.PrivateData.measure`):
    i.i.d. Laplace with ``b = Δ₁(A)/ε`` or Gaussian with ``σ = Δ₂(A)·c(ε, δ)``
    (HDMM Def. 10, Prop. 4; ``noise.scale``), on ℤ when the release used the
    discrete samplers.  For simulations of a public noise model only (a
    parametric bootstrap): never a release's noise.

    Raises
    ------
    TypeError
        If ``noise`` is neither Laplace nor Gaussian.
    """
    if not isinstance(noise, Laplace | Gaussian):
        raise TypeError(f"no noise draw for {type(noise).__name__}")
    scale = float(noise.scale(A.sensitivity(noise.norm)))
    add = samplers.laplace if isinstance(noise, Laplace) else samplers.gaussian
    zeros = np.zeros(A.m)

    def draw(rng: np.random.Generator) -> np.ndarray:
        if not isinstance(rng, np.random.Generator):
            raise TypeError("the bootstrap draws from a seeded numpy Generator only")
        return add(zeros, scale, rng, discrete)
    return draw


@dataclass(frozen=True)
class BootstrapAnswers:
    """Workload answers of a parametric bootstrap (:func:`parametric_bootstrap`).

    Attributes
    ----------
    answers : ndarray, shape (draws, m)
        ``W x̂*`` for every redrawn noise (counts).
    center : ndarray, shape (m,)
        The released answers ``W x̂`` the noise was redrawn around.
    draws, seed : int
    """

    answers: np.ndarray
    center: np.ndarray
    draws: int
    seed: int

    def std(self) -> np.ndarray:
        """Bootstrap standard error of every answer, shape ``(m,)`` (counts; ``ddof=1``)."""
        return self.answers.std(axis=0, ddof=1)

    def rmse(self) -> float:
        """Bootstrap RMSE of the answers ``sqrt(mean((W x̂* − W x̂)²))`` (counts; bias included)."""
        d = self.answers - self.center
        return float(np.sqrt(np.mean(d * d)))

    def interval(self, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Basic bootstrap interval ``[2a − q_{1−α/2}, 2a − q_{α/2}]`` of every answer ``a``.

        The quantiles ``q`` are those of ``W x̂*`` (numpy's linear); the
        interval reflects them about the released answer, which corrects the
        bias of the non-linear estimate to first order (Davison & Hinkley,
        *Bootstrap Methods and their Application*, 1997, Sec. 5.2).

        Raises
        ------
        ValueError
            If ``level`` is outside (0, 1).
        """
        level = float(level)
        if not 0.0 < level < 1.0:
            raise ValueError(f"the confidence level must be in (0, 1), got {level!r}")
        alpha = 1.0 - level
        lo, hi = np.quantile(self.answers, [alpha / 2, 1 - alpha / 2], axis=0)
        return 2 * self.center - hi, 2 * self.center - lo


def parametric_bootstrap(W, A, x_hat, solver: Callable[[np.ndarray], np.ndarray],
                         draw: Callable[[np.random.Generator], np.ndarray],
                         draws: int = BOOTSTRAP_DRAWS, seed: int = BOOTSTRAP_SEED) -> BootstrapAnswers:
    """Parametric bootstrap of the noise: ``y* = A x̂ + z*``, ``x̂* = solver(y*)``, answers ``W x̂*``.

    The noise ``z*`` is redrawn from the release's own public noise model
    (``draw``, :func:`noise_draws`) with ``numpy.random.default_rng(seed)``:
    post-processing of public quantities, reproducible from ``seed``, never
    a release (Efron & Tibshirani, *An Introduction to the Bootstrap*, 1993,
    Sec. 6.5, the parametric bootstrap).

    Parameters
    ----------
    W : Matrix, shape (m, n)
    A : Matrix, shape (p, n)
    x_hat : ndarray, shape (n,)
        The released estimate (the plug-in truth of the simulation), counts.
    solver : callable
        ``y: (p,) -> x̂: (n,)``, the release's inference.
    draw : callable
        ``rng -> z: (p,)``.
    draws : int
        Bootstrap draws (>= 2, default :data:`BOOTSTRAP_DRAWS`).
    seed : int
        Seed (>= 0) of the simulation Generator.

    Returns
    -------
    BootstrapAnswers

    Raises
    ------
    ValueError
        If ``draws`` < 2, ``seed`` < 0, or ``draws × m`` exceeds :data:`BOOTSTRAP_LIMIT`.
    """
    W, A = as_matrix(W), as_matrix(A)
    if isinstance(draws, bool) or not isinstance(draws, int | np.integer) or draws < 2:
        raise ValueError(f"bootstrap draws must be an integer >= 2, got {draws!r}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"the bootstrap seed must be an integer >= 0, got {seed!r}")
    if int(draws) * W.m > BOOTSTRAP_LIMIT:
        raise ValueError(f"{draws} bootstrap draws of {W.m:,} answers exceed {BOOTSTRAP_LIMIT:,} "
                         f"kept values; ask for at most {BOOTSTRAP_LIMIT // W.m} draws")
    x_hat = _check_vector(x_hat, A.n, "x_hat")
    rng = np.random.default_rng(int(seed))
    Ax = A.matvec(x_hat)
    out = np.empty((int(draws), W.m))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a draw stopping near tolerance is fine
        for k in range(int(draws)):
            out[k] = W.matvec(solver(Ax + draw(rng)))
    return BootstrapAnswers(out, W.matvec(x_hat), int(draws), int(seed))


# ================================================================ helpers
def _check_vector(v, size: int, what: str) -> np.ndarray:
    try:
        v = np.asarray(v, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be numbers, got {type(v).__name__}") from None
    if v.shape != (size,):
        raise ValueError(f"{what} must have shape ({size},) to match the strategy, got {v.shape}")
    if not np.isfinite(v).all():
        raise ValueError(f"{what} must be finite: {int((~np.isfinite(v)).sum())} entries are NaN or inf")
    return v


def _row_scale(s, p: int) -> np.ndarray:
    s = _check_vector(s, p, "row_scale (the noise std of every strategy row)")
    if not (s > 0).all():
        raise ValueError("row_scale must be positive: the noise standard deviation of every row")
    return s


def _scaled(A: Matrix, s: np.ndarray) -> Matrix:
    from ..queries.matrix import Diagonal, Product

    return Product(Diagonal(1.0 / s), A, name=f"{A.name} / noise std")


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """``a · b`` without BLAS, whose threads only contend on this memory-bound product (one
    solve over 16,384 cells: 52 s with BLAS's dot, 7 s without, on a loaded 2-core machine)."""
    return float(np.einsum("i,i->", a, b))


def _goal(tol: float, x: np.ndarray) -> float:
    """The KKT residual to reach, in counts: ``tol · max(1, max_j x_j)``."""
    return tol * max(1.0, float(x.max())) if x.size else tol


def _kkt(op: Matrix, x: np.ndarray, y: np.ndarray, L: float) -> float:
    g = op.rmatvec(op.matvec(x) - y)
    return float(np.max(np.abs(np.minimum(x, g / L)))) if x.size else 0.0


def _power_norm2(op: Matrix, iters: int = 60) -> float:
    """``‖op‖₂²`` from below by power iteration on ``opᵀop``, times 1.05 (backtracking covers the rest)."""
    v = np.random.default_rng(0).standard_normal(op.n) + 1.0  # fixed start: deterministic, not noise
    v /= np.linalg.norm(v)
    lam = 0.0
    for _ in range(iters):
        w = op.rmatvec(op.matvec(v))
        lam = float(np.linalg.norm(w))
        if lam == 0.0:
            return 1.0
        v = w / lam
    return 1.05 * lam
