"""Analytic error of the matrix mechanism and the SVD lower bound.

For a workload ``W: (m, n)``, a strategy ``A: (p, n)`` and a noise model with
variance ``v`` per unit sensitivity in norm ``p`` (Laplace: ``v = 2/ε²``,
L1; Gaussian: ``v = c(ε, δ)²``, L2), the matrix mechanism answers ``W x̂``
with ``x̂ = A⁺(A x + noise)``.  Its expected total squared error is

    TSE(W, A) = v · Δ_p(A)² · tr(WᵀW (AᵀA)⁺)

(HDMM Prop. 4; Li & Miklau 2012 Prop. 3-4; ``dpexplorer/docs/matrix_mechanism.md``),
``RMSE = sqrt(TSE / m)``, and the per-query variance is
``v · Δ_p(A)² · diag(W (AᵀA)⁺ Wᵀ)``.  The answer is unbiased only if ``A``
supports ``W`` (``W A⁺ A = W``); otherwise :class:`UnsupportedWorkloadError`.

SVD bound (Li & Miklau 2012 Thm 2; HDMM Def. 11, Prop. 5): for every ``A``
supporting ``W``, ``TSE ≥ v · (Σ σ_i(W))² / n``; for a Kronecker product the
bound is the product of the factors' bounds.

Implicit strategies plug in through two optional methods: ``A.workload_trace(W)``
(``tr(WᵀW (AᵀA)⁺)``, raising :class:`UnsupportedWorkloadError`, or
``NotImplemented`` to fall back) and ``A.workload_row_variances(W)``
(``diag(W (AᵀA)⁺ Wᵀ)``); implicit SVD bounds through :func:`register_svdb_rule`.

Kronecker structure is used wherever both sides have it:
``tr((⊗G_i)(⊗X_i)⁺) = Π tr(G_i X_i⁺)`` and a union of weighted products
sums ``w_j²`` times those products (HDMM Prop. 6, Thm 4 and Thm 6).
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np

from ..privacy.noise import NoiseModel, check_noise
from ..queries import limits
from ..queries.intervals import SegmentInverse, interval_variances
from ..queries.matrix import (
    DENSE_LIMIT,
    Dense,
    Identity,
    Kronecker,
    Matrix,
    MatrixTooLargeError,
    Weighted,
    as_matrix,
    check_has_queries,
    kron_terms,
)

__all__ = [
    "UnsupportedWorkloadError",
    "kron_terms",
    "GramInverse",
    "supports",
    "unit_tse",
    "expected_tse",
    "rmse",
    "rmse_from_unit",
    "empirical_rmse",
    "per_query_variance",
    "per_query_rmse",
    "svdb",
    "svd_bound",
    "register_svdb_rule",
]


class UnsupportedWorkloadError(ValueError):
    """The strategy does not support the workload (``W A⁺ A ≠ W``)."""


class GramInverse:
    """Factorisation of a strategy Gram matrix ``X = AᵀA`` for repeated traces.

    ``X⁺ = X⁻¹`` when ``X`` is positive definite and well conditioned (its
    Cholesky factor's diagonal within a factor 10⁷), else the pseudo-inverse
    from an eigendecomposition, which also gives the null space used by the
    support test.

    Computed with ``numpy.linalg`` (``cholesky``, ``inv``, ``eigh``), which
    releases the interpreter lock while LAPACK runs; ``scipy.linalg``'s LAPACK
    wrappers (1.17) hold it for the whole call.  The explorer builds strategies
    in background threads of its server, and there a held lock froze every
    session: with eight sessions opening the Compare page at n = 1024, one
    user's ε change waited 25-50 s while ``potrf``/``potri`` calls held the
    lock about 40 of 90 s (py-spy ``--gil`` on the served app during
    ``python benchmarks/bench_browser.py --n 1024 --sessions 8``, 2 cores).  ``inv`` costs about
    2.5 times ``potrf`` + ``potri`` (96 vs 39 ms at n = 1024, one thread).

    Parameters
    ----------
    X : ndarray, shape (n, n)
        Symmetric positive semi-definite Gram matrix.
    """

    def __init__(self, X: np.ndarray):
        X = np.asarray(X, dtype=float)
        self.n = X.shape[0]
        self.null = np.zeros((self.n, 0))
        try:
            d = np.diag(np.linalg.cholesky(X))
            ok = d.size == 0 or d.min() > 1e-7 * d.max()
        except np.linalg.LinAlgError:  # not (numerically) positive definite
            ok = False
        if ok:
            inv = np.linalg.inv(X)
            self._pinv = (inv + inv.T) / 2.0
            return
        w, V = np.linalg.eigh(X)
        tol = max(w.max(initial=0.0), 0.0) * self.n * 1e-12 + 1e-300
        keep = w > tol
        Vk = V[:, keep]
        self._pinv = (Vk / w[keep]) @ Vk.T
        self.null = V[:, ~keep]

    @property
    def pinv(self) -> np.ndarray:
        """``X⁺`` as a dense symmetric ``(n, n)`` array."""
        return self._pinv

    def supports(self, G: np.ndarray, rtol: float = 1e-8) -> bool:
        """Whether a workload with Gram ``G`` lies in the row space of ``A``."""
        if self.null.shape[1] == 0:
            return True
        scale = max(np.abs(G).max(), 1e-300)
        return bool(np.abs(G @ self.null).max() <= rtol * scale)

    def trace(self, G: np.ndarray) -> float:
        """``tr(G X⁺)`` for a symmetric ``G``."""
        return float(np.einsum("ij,ij->", G, self._pinv))


def _aligned(W: Matrix, A: Matrix):
    """Kronecker terms of ``W`` aligned factor by factor with ``A``, or ``None``."""
    if not isinstance(A, Kronecker):
        return None
    terms = kron_terms(W)
    if terms is None:
        return None
    sizes = [f.n for f in A.factors]
    for _, factors in terms:
        if [f.n for f in factors] != sizes:
            return None
    return terms


def _dense_gram(M: Matrix, what: str) -> np.ndarray:
    try:
        return M.gram().dense()
    except MatrixTooLargeError as exc:
        raise MatrixTooLargeError(
            f"{what}: the domain has n = {M.n:,} cells, too many for a dense n × n Gram "
            f"matrix; use Kronecker-structured workloads and strategies"
        ) from exc


def _squared_sensitivity(A: Matrix, p: int) -> float:
    """``Δ_p(A)²``, or a ValueError when it is not a finite float64 (entries near 1e154 and above)."""
    with np.errstate(over="ignore", invalid="ignore"):
        s = A.sensitivity(p)
    if math.isfinite(s) and s * s < math.inf:
        return s * s
    raise ValueError(f"strategy {A.name!r}: its L{p} sensitivity ({s:.3g}) squared overflows float64; "
                     f"scale the strategy down -- its error does not depend on its scale: "
                     f"Δ(cA)²·tr(WᵀW ((cA)ᵀcA)⁺) = Δ(A)²·tr(WᵀW (AᵀA)⁺)")


def _trace_and_support(W: Matrix, A: Matrix) -> float:
    """``tr(WᵀW (AᵀA)⁺)``, raising if ``A`` does not support ``W``."""
    check_has_queries(W, "expected error")
    if W.n != A.n:
        raise ValueError(
            f"workload has {W.n} cells but strategy has {A.n}: they must share the domain"
        )
    hook = getattr(A, "workload_trace", None)
    if hook is not None:  # implicit strategies (marginals, stacked Kronecker products)
        value = hook(W)
        if value is not NotImplemented:
            return float(value)
    if isinstance(A, Identity):
        return W.frobenius_squared()
    terms = _aligned(W, A)
    if terms is not None:
        # _aligned returns terms only for a Kronecker strategy
        invs = [GramInverse(f.gram().dense()) for f in cast(Kronecker, A).factors]
        total = 0.0
        for c, factors in terms:
            prod = c * c
            for inv, f in zip(invs, factors, strict=True):
                G = f.gram().dense()
                if not inv.supports(G):
                    raise UnsupportedWorkloadError(
                        f"strategy {A.name!r} does not support workload {W.name!r} "
                        f"(factor {f.name!r} is outside the strategy's row space)"
                    )
                prod *= inv.trace(G)
            total += prod
        return total
    G = _dense_gram(W, "expected error")
    inv = GramInverse(_dense_gram(A, "expected error"))
    if not inv.supports(G):
        raise UnsupportedWorkloadError(
            f"strategy {A.name!r} does not support workload {W.name!r}: some workload "
            f"queries are outside the strategy's row space (W A⁺ A ≠ W), so the "
            f"estimate would be biased"
        )
    return inv.trace(G)


def supports(W, A) -> bool:
    """Whether strategy ``A`` supports workload ``W`` (``W A⁺ A = W``, HDMM Prop. 4).

    Parameters
    ----------
    W : Matrix or array, shape (m, n)
    A : Matrix or array, shape (p, n)
    """
    try:
        _trace_and_support(as_matrix(W), as_matrix(A))
    except UnsupportedWorkloadError:
        return False
    return True


def unit_tse(W, A, norm: int = 1) -> float:
    """``Δ_p(A)² · tr(WᵀW (AᵀA)⁺)``: the TSE for unit noise variance.

    Multiply by a noise model's ``variance_per_unit`` to get the TSE, which is
    how the explorer rescales errors when ε or δ changes without recomputing.

    Parameters
    ----------
    W : Matrix or array, shape (m, n)
    A : Matrix or array, shape (p, n)
    norm : {1, 2}
        Sensitivity norm (1 for Laplace, 2 for Gaussian).

    Raises
    ------
    UnsupportedWorkloadError
        If ``A`` does not support ``W``.
    """
    W, A = as_matrix(W), as_matrix(A)
    trace = _trace_and_support(W, A)
    return _squared_sensitivity(A, norm) * trace


def expected_tse(W, A, noise: NoiseModel) -> float:
    """Expected total squared error ``v·Δ_p(A)²·tr(WᵀW (AᵀA)⁺)`` (HDMM Prop. 4).

    Units: squared counts, summed over the ``m`` queries.

    Raises
    ------
    UnsupportedWorkloadError
        If ``A`` does not support ``W``.
    TypeError
        If ``noise`` is not a noise model.
    """
    return check_noise(noise).variance_per_unit * unit_tse(W, A, noise.norm)


def rmse(W, A, noise: NoiseModel) -> float:
    """Root mean squared error per query, ``sqrt(TSE / m)``, in counts.

    Reproduces HDMM Table 4 (Laplace, ε = 1) and Table 5 (Gaussian, ε = 1,
    δ = 1e-6, analytic calibration); see ``tests/test_error.py``.

    Raises
    ------
    UnsupportedWorkloadError
        If ``A`` does not support ``W``.
    TypeError
        If ``noise`` is not a noise model.
    """
    W = as_matrix(W)
    return math.sqrt(expected_tse(W, A, noise) / W.m)


def rmse_from_unit(unit_tse, m: int, noise: NoiseModel):
    """RMSE per query from the unit-noise TSE: ``sqrt(v · unit_tse / m)`` (HDMM Prop. 4).

    ``unit_tse = Δ_p(A)² · tr(WᵀW (AᵀA)⁺)`` (:func:`unit_tse`) does not depend
    on ε or δ, so the RMSE at any noise of the same norm is this product:
    ``v = 2/ε²`` for Laplace, ``c(ε, δ)²`` for Gaussian noise.

    Parameters
    ----------
    unit_tse : float or array_like
        Squared counts per unit noise variance (NaN passes through).
    m : int
        Number of queries of the workload (>= 1).
    noise : NoiseModel

    Returns
    -------
    float or numpy.ndarray
        Counts per query, the shape of ``unit_tse``.

    Raises
    ------
    TypeError
        If ``noise`` is not a noise model.
    ValueError
        If ``m`` is not a whole number >= 1.
    """
    v = check_noise(noise).variance_per_unit
    m = limits.whole_number(m, "rmse_from_unit: m")
    if np.ndim(unit_tse) == 0:
        return math.sqrt(v * float(unit_tse) / m)
    return np.sqrt(v * np.asarray(unit_tse, dtype=float) / m)


def empirical_rmse(answers, truth) -> float:
    """``sqrt(mean((answers − truth)²))``: the error of released answers against the true ones.

    Parameters
    ----------
    answers, truth : array_like, shape (m,) or (trials, m)
        Noisy and exact answers (counts); with several trials, the mean is
        over every query of every trial.

    Returns
    -------
    float
        Counts per query.

    Raises
    ------
    ValueError
        If the shapes differ or there are no answers.
    """
    a, t = np.asarray(answers, dtype=float), np.asarray(truth, dtype=float)
    if a.shape != t.shape and a.shape[-1:] != t.shape:
        raise ValueError(f"answers of shape {a.shape} against true answers of shape {t.shape}")
    if a.size == 0:
        raise ValueError("no answers to measure the error of")
    err = a - t
    return float(np.sqrt(np.mean(err * err)))


def per_query_variance(W, A, noise: NoiseModel) -> np.ndarray:
    """Variance of every workload answer, ``v·Δ²·diag(W (AᵀA)⁺ Wᵀ)``, shape ``(m,)``.

    Raises
    ------
    UnsupportedWorkloadError
        If ``A`` does not support ``W``.
    TypeError
        If ``noise`` is not a noise model.
    LimitExceededError
        If ``W`` has more queries than the ``queries`` limit (the result has one per query).
    """
    check_noise(noise)
    W, A = as_matrix(W), as_matrix(A)
    limits.check("queries", W.m, f"per-query error: queries of workload {W.name!r}")
    check_has_queries(W, "per-query error")
    scale = noise.variance_per_unit * _squared_sensitivity(A, noise.norm)
    hook = getattr(A, "workload_row_variances", None)
    if hook is not None:  # implicit strategies: diag(W (AᵀA)⁺ Wᵀ) without n × n matrices
        value = hook(W)
        if value is not NotImplemented:
            return scale * np.asarray(value, dtype=float)
    if isinstance(A, Identity):
        value = interval_variances(W, SegmentInverse.identity(W.n))  # interval rows: lengths
        if value is not NotImplemented:
            return scale * value
        terms = kron_terms(W)
        if terms is not None:
            eye = Kronecker([Dense(np.eye(f.n)) for f in terms[0][1]])
            return scale * W.rows_quadratic(eye)
        return scale * W.rows_quadratic(np.eye(W.n))
    terms = _aligned(W, A)
    if terms is not None:
        _trace_and_support(W, A)
        Xinv = Kronecker([Dense(GramInverse(f.gram().dense()).pinv) for f in A.factors])
        return scale * W.rows_quadratic(Xinv)
    G = _dense_gram(W, "per-query error")
    inv = GramInverse(_dense_gram(A, "per-query error"))
    if not inv.supports(G):
        raise UnsupportedWorkloadError(
            f"strategy {A.name!r} does not support workload {W.name!r}"
        )
    return scale * W.rows_quadratic(inv.pinv)


def per_query_rmse(W, A, noise: NoiseModel) -> np.ndarray:
    """Root of :func:`per_query_variance`: standard error of every answer, in counts."""
    return np.sqrt(per_query_variance(W, A, noise))


#: Functions ``rule(W) -> float | None`` tried in order by :func:`svdb` before
#: the Kronecker and dense paths; ``None`` means "not my kind of workload".
_SVDB_RULES: list = []


def register_svdb_rule(rule) -> None:
    """Add an implicit SVD-bound rule ``rule(W) -> float | None`` (tried first by :func:`svdb`)."""
    if rule not in _SVDB_RULES:
        _SVDB_RULES.append(rule)


def svdb(W) -> float:
    """The SVD bound on unit-noise TSE: ``(Σ_i σ_i(W))² / n`` (Li & Miklau 2012, Thm 2).

    Singular values are the square roots of the eigenvalues of ``WᵀW``; for a
    Kronecker product the bound is the product of the factors' bounds, and a
    weight ``c`` multiplies it by ``c²`` (HDMM Thm 5; ``dpexplorer/docs/svd_bound.md``).

    Raises
    ------
    MatrixTooLargeError
        For a non-Kronecker workload whose domain is too large for a dense Gram.
    """
    W = as_matrix(W)
    check_has_queries(W, "SVD bound")
    for rule in _SVDB_RULES:  # implicit forms (e.g. marginal workloads, dpexplorer.strategies.marginals)
        value = rule(W)
        if value is not None:
            return float(value)
    if isinstance(W, Weighted):
        return W.weight**2 * svdb(W.base)
    if isinstance(W, Kronecker):
        return math.prod(svdb(f) for f in W.factors)
    lam = _dense_gram_eigenvalues(W)
    s = np.sqrt(np.clip(lam, 0.0, None)).sum()
    return float(s * s / W.n)


def _dense_gram_eigenvalues(W: Matrix) -> np.ndarray:
    """Eigenvalues of ``WᵀW`` (the nonzero ones from ``WWᵀ`` when ``m < n``), dense.

    An explicit matrix goes through the Gram on the smaller side (numpy's
    ``a.T @ a``, which BLAS computes as one symmetric product) and LAPACK's
    symmetric eigensolver, values only.  Both through numpy, which releases the
    interpreter lock (the explorer's server computes the bound in background
    threads; see :class:`GramInverse`).
    """
    if isinstance(W, Dense):
        small = min(W.m, W.n)
        if small * small > DENSE_LIMIT:
            raise MatrixTooLargeError(
                f"SVD bound: a dense {small} × {small} Gram is above the size limit")
        D = W.array
        with np.errstate(over="ignore", invalid="ignore"):
            C = D.T @ D if W.m >= W.n else D @ D.T
        if not np.isfinite(C).all():
            raise ValueError(f"SVD bound: the Gram matrix of {W.name!r} {W.shape} overflows float64 "
                             f"(entries above ~1.3e154 in magnitude); scale the workload down (the "
                             f"bound scales with the square of a weight)")
        return np.linalg.eigvalsh(C)
    return np.linalg.eigvalsh(_dense_gram(W, "SVD bound"))


def svd_bound(W, noise: NoiseModel) -> float:
    """SVD lower bound on the RMSE of any strategy: ``sqrt(v · SVDB(W) / m)``.

    HDMM reports it with the same ``v`` for Laplace noise (valid since
    ``Δ₁ ≥ Δ₂``).  Check: All Range, n = 64, Laplace ε = 1 gives 3.22
    (HDMM Table 4).

    Raises
    ------
    TypeError
        If ``noise`` is not a noise model.
    MatrixTooLargeError
        As :func:`svdb`.
    """
    check_noise(noise)
    W = as_matrix(W)
    return math.sqrt(noise.variance_per_unit * svdb(W) / W.m)

