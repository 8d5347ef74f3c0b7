"""Implicit query matrices.

A query matrix ``M`` of shape ``(m, n)`` holds one linear counting query per
row over a data vector ``x`` of ``n`` cells.  Workloads ``W`` and strategies
``A`` are both query matrices.  The classes here compute what the matrix
mechanism needs -- products with vectors, the Gram matrix ``MᵀM``, column
norms (sensitivities), pseudo-inverses -- without materialising rows that
have a closed form: :class:`AllRange` has ``n(n+1)/2`` rows but an ``n × n``
Gram matrix, and a :class:`Kronecker` product is never expanded.

Conventions (HDMM, McKenna et al., Def. 7-8; Li & Miklau, PVLDB 2012, Prop. 1;
``dpexplorer/docs/noise.md``):

* the L1 sensitivity of ``M`` under add/remove-one-record neighbours is its
  largest column L1 norm, the L2 sensitivity its largest column L2 norm;
* a multi-dimensional domain ``(n_1, ..., n_d)`` is flattened in C order, so
  a Kronecker product ``M_1 ⊗ ... ⊗ M_d`` acts on ``x.reshape(n_1, ..., n_d)``
  factor by factor (HDMM, Thm 14).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cached_property
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg

from . import limits

__all__ = [
    "DENSE_LIMIT",
    "kron_terms",
    "MatrixTooLargeError",
    "Matrix",
    "Dense",
    "Sparse",
    "Identity",
    "Ones",
    "Total",
    "Prefix",
    "AllRange",
    "RangeQueries",
    "RectangleQueries",
    "Weighted",
    "VStack",
    "Kronecker",
    "Diagonal",
    "Permutation",
    "Grouping",
    "Product",
    "Transpose",
    "as_matrix",
]

#: Largest number of entries :meth:`Matrix.dense` materialises by default
#: (2**26 float64 entries = 512 MiB).
DENSE_LIMIT = 2**26


class MatrixTooLargeError(ValueError):
    """Raised when a matrix would be materialised above the size limit."""


def _check_limit(shape: tuple[int, int], max_entries: int | None, what: str) -> None:
    limit = DENSE_LIMIT if max_entries is None else max_entries
    entries = int(shape[0]) * int(shape[1])
    if entries > limit:
        raise MatrixTooLargeError(
            f"{what} has shape {shape} = {entries:,} entries, above the limit of "
            f"{limit:,} entries; use its implicit form (gram(), @, sensitivity()) "
            f"or pass a larger max_entries explicitly"
        )


class Matrix:
    """Base class of implicit query matrices, shape ``(m, n)``.

    Subclasses implement ``_matmat`` (``M @ X`` for ``X: (n, k)``) and
    ``_rmatmat`` (``Mᵀ @ Y`` for ``Y: (m, k)``); everything else has a generic
    fallback through them or through :meth:`dense`, and is overridden where a
    closed form exists.

    Attributes
    ----------
    shape : tuple of int
        ``(m, n)``: number of queries and number of cells.
    name : str
        Short name shown in tables and plots.
    domain : tuple of int
        Shape of the data domain; ``prod(domain) == n``.
    """

    shape: tuple[int, int]
    _name: str | None = None
    _domain: tuple[int, ...] | None = None
    #: declarative description of a named 1D building block (see dpexplorer.queries.spec)
    spec: dict | None = None
    # Attributes other modules attach to some instances; declared (without a value, so an instance
    # that was not given one still has none: ``getattr(M, name, None)`` finds nothing) for the type
    # checker.  An optimised strategy's run (dpexplorer.core.optimization.attach):
    optimization: Any  # a core.optimization.OptimizationResult (a higher layer)
    #: the GreedyH run that built a strategy (dpexplorer.strategies.classic.greedy_h, DAWA stage 2)
    greedy: Any  # a strategies.classic.GreedyHResult (a higher layer)
    #: attribute names of a multi-dimensional workload, one per domain axis (dpexplorer.queries.spec)
    attributes: tuple[str, ...]

    # ----------------------------------------------------------------- basics
    @property
    def name(self) -> str:
        return self._name if self._name is not None else type(self).__name__.lower()

    @name.setter
    def name(self, value: str) -> None:
        self._name = value

    @property
    def domain(self) -> tuple[int, ...]:
        return self._domain if self._domain is not None else (self.shape[1],)

    @domain.setter
    def domain(self, value: Sequence[int]) -> None:
        value = tuple(int(v) for v in value)
        if math.prod(value) != self.shape[1]:
            raise ValueError(
                f"domain {value} has {math.prod(value)} cells but the matrix has "
                f"{self.shape[1]} columns"
            )
        self._domain = value

    @property
    def m(self) -> int:
        """Number of queries (rows)."""
        return int(self.shape[0])

    @property
    def n(self) -> int:
        """Number of cells (columns)."""
        return int(self.shape[1])

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} shape={self.shape}>"

    #: Whether every entry is known to be a whole number (public, from the
    #: structure; ``False`` when unknown, never found by materialising).  The
    #: privacy kernel measures such a strategy on counts with the discrete
    #: samplers (:func:`dpexplorer.privacy.noise_sampler`).
    integral: bool = False

    # ------------------------------------------------------------ products
    def _matmat(self, X: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def matvec(self, x: np.ndarray) -> np.ndarray:
        """Answers ``M @ x`` for ``x: (n,)`` or ``(n, k)``."""
        x = np.asarray(x, dtype=float)
        if x.shape[0] != self.n:
            raise ValueError(
                f"{self.name}: cannot multiply a matrix with {self.n} columns by an "
                f"array with {x.shape[0]} rows"
            )
        if x.ndim == 1:
            return self._matmat(x[:, None])[:, 0]
        return self._matmat(x)

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        """``Mᵀ @ y`` for ``y: (m,)`` or ``(m, k)``."""
        y = np.asarray(y, dtype=float)
        if y.shape[0] != self.m:
            raise ValueError(
                f"{self.name}: cannot multiply the transpose of a matrix with {self.m} "
                f"rows by an array with {y.shape[0]} rows"
            )
        if y.ndim == 1:
            return self._rmatmat(y[:, None])[:, 0]
        return self._rmatmat(y)

    def __matmul__(self, other):
        if isinstance(other, Matrix):
            return Product(self, other)
        return self.matvec(other)

    def __mul__(self, c):
        if np.isscalar(c):
            return Weighted(self, float(c))
        return NotImplemented

    __rmul__ = __mul__

    @property
    def T(self) -> Matrix:
        """Lazy transpose."""
        return Transpose(self)

    def as_linear_operator(self) -> scipy.sparse.linalg.LinearOperator:
        """This matrix as a :class:`scipy.sparse.linalg.LinearOperator`."""
        return scipy.sparse.linalg.LinearOperator(
            self.shape,
            matvec=self.matvec,
            rmatvec=self.rmatvec,
            matmat=self.matvec,
            rmatmat=self.rmatvec,
            dtype=float,
        )

    # ---------------------------------------------------------- materialise
    def dense(self, max_entries: int | None = None) -> np.ndarray:
        """The matrix as a dense ``(m, n)`` array.

        Raises
        ------
        MatrixTooLargeError
            If ``m * n`` exceeds ``max_entries`` (default :data:`DENSE_LIMIT`).
        """
        _check_limit(self.shape, max_entries, f"matrix {self.name!r}")
        return self._dense()

    def _dense(self) -> np.ndarray:
        return self._matmat(np.eye(self.n))

    def sparse(self) -> scipy.sparse.csr_array:
        """The matrix as a scipy sparse CSR array (materialises all nonzeros)."""
        return scipy.sparse.csr_array(self.dense())

    # ------------------------------------------------------------- algebra
    def gram(self) -> Matrix:
        """Gram matrix ``MᵀM``, shape ``(n, n)`` (computed once, then cached).

        Raises
        ------
        MatrixTooLargeError
            If a dense ``n × n`` Gram would exceed :data:`DENSE_LIMIT` entries
            and no implicit form exists.
        """
        cached = self.__dict__.get("_gram_cache")
        if cached is None:
            cached = self._gram()
            self.__dict__["_gram_cache"] = cached
        return cached

    def _gram(self) -> Matrix:
        _check_limit((self.n, self.n), None, f"Gram matrix of {self.name!r}")
        if self.m * self.n <= DENSE_LIMIT:
            D = self.dense()
            return _finite_gram(lambda: D.T @ D, self)
        return _finite_gram(lambda: self._rmatmat(self._matmat(np.eye(self.n))), self)

    def column_norms(self, p: int = 1) -> np.ndarray:
        """Norm of every column, shape ``(n,)``.

        Parameters
        ----------
        p : {1, 2}
            1 for the L1 norm (Laplace), 2 for the L2 norm (Gaussian).
        """
        _check_p(p)
        if p == 2:
            return np.sqrt(np.maximum(np.diag(self.gram().dense()), 0.0))
        return np.abs(self.dense()).sum(axis=0)

    def sensitivity(self, p: int = 1) -> float:
        """L1 (``p=1``) or L2 (``p=2``) sensitivity: the largest column norm.

        Source: HDMM Def. 7-8, Li & Miklau 2012 Prop. 1 (add/remove-one-record).
        """
        return float(np.max(self.column_norms(p))) if self.n else 0.0

    def trace(self) -> float:
        """Trace of a square matrix.

        Raises
        ------
        ValueError
            If the matrix is not square.
        """
        if self.m != self.n:
            raise ValueError(f"trace needs a square matrix, {self.name!r} is {self.shape}")
        return float(np.trace(self.dense()))

    def frobenius_squared(self) -> float:
        """``‖M‖_F² = tr(MᵀM)``."""
        return self.gram().trace()

    def pinv(self) -> Matrix:
        """Moore-Penrose pseudo-inverse, shape ``(n, m)``."""
        return Dense(np.linalg.pinv(self.dense()))

    def rows_quadratic(self, M: np.ndarray) -> np.ndarray:
        """``diag(self @ M @ selfᵀ)`` for a dense symmetric ``M: (n, n)``, shape ``(m,)``.

        Used for per-query variances ``v·Δ²·diag(W (AᵀA)⁺ Wᵀ)``.
        """
        out = np.empty(self.m)
        step = max(1, DENSE_LIMIT // (8 * max(self.n, 1)))
        Id = np.eye(self.m) if self.m <= step else None
        for start in range(0, self.m, step):
            stop = min(self.m, start + step)
            if Id is not None:
                E = Id[:, start:stop]
            else:
                E = np.zeros((self.m, stop - start))
                E[np.arange(start, stop), np.arange(stop - start)] = 1.0
            R = self._rmatmat(E).T  # rows start..stop of M, shape (k, n)
            out[start:stop] = np.einsum("ij,ij->i", R @ M, R)
        return out


def check_has_queries(W: Matrix, what: str) -> None:
    """ValueError naming ``what`` if the workload ``W`` has no rows (shape ``(0, n)``).

    Its error (a mean over queries) is undefined and a release would spend
    budget to answer nothing.
    """
    if W.m == 0:
        raise ValueError(f"{what}: the workload {W.name!r} has no queries (shape {W.shape}); "
                         f"a workload needs at least one query row")


def _finite_gram(product, M: Matrix) -> Dense:
    """``Dense(product())`` for a Gram matrix ``MᵀM``, or a ValueError saying that it overflows.

    Entries of ``M`` are finite (checked when it is built), but a product of
    two entries above ~1.3e154 in magnitude is not: ``MᵀM`` then holds inf and
    every error, sensitivity or reconstruction built on it would be meaningless.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        G = np.asarray(product(), dtype=float)
    if not np.isfinite(G).all():
        raise ValueError(f"the Gram matrix MᵀM of {M.name!r} {M.shape} overflows float64: products of its "
                         f"entries exceed 1.8e308 (entries above ~1.3e154 in magnitude); scale the "
                         f"matrix down (errors and releases do not depend on a strategy's scale, and a "
                         f"workload's error scales with its weight)")
    return Dense(G)


def _check_p(p: int) -> None:
    if p not in (1, 2):
        raise ValueError(f"p must be 1 (L1, Laplace) or 2 (L2, Gaussian), got {p!r}")


#: A query matrix as the public functions take it (:func:`as_matrix` wraps it): a :class:`Matrix`,
#: a 2D array (or nested sequence) or a scipy sparse matrix.
MatrixLike: TypeAlias = "Matrix | npt.ArrayLike | scipy.sparse.sparray | scipy.sparse.spmatrix"


def as_matrix(M: object) -> Matrix:
    """Wrap a numpy array, scipy sparse matrix or :class:`Matrix` as a :class:`Matrix`.

    Raises
    ------
    TypeError
        If ``M`` is none of those.
    ValueError
        If ``M`` is not two-dimensional or has non-finite entries.
    """
    if isinstance(M, Matrix):
        return M
    if scipy.sparse.issparse(M):
        return Sparse(M)
    if isinstance(M, np.ndarray | list | tuple):
        return Dense(np.asarray(M, dtype=float))
    raise TypeError(f"cannot use an object of type {type(M).__name__} as a query matrix")


# ===================================================================== leaves
class Dense(Matrix):
    """A query matrix stored as a dense numpy array ``(m, n)``."""

    def __init__(self, array, name: str | None = None):
        A = np.asarray(array, dtype=float)
        if A.ndim != 2:
            raise ValueError(f"a query matrix must be 2-dimensional, got shape {A.shape}")
        if not np.all(np.isfinite(A)):
            raise ValueError("a query matrix must have finite entries (found NaN or inf)")
        self.array = A
        self.shape = A.shape
        self._name = name or "dense"

    @cached_property
    def integral(self) -> bool:  # type: ignore[override]  # computed here; a plain attribute elsewhere
        return bool(np.all(self.array == np.round(self.array)))

    def _matmat(self, X):
        return self.array @ X

    def _rmatmat(self, Y):
        return self.array.T @ Y

    def _dense(self):
        return self.array

    def sparse(self):
        return scipy.sparse.csr_array(self.array)

    def _gram(self):
        return _finite_gram(lambda: self.array.T @ self.array, self)

    def column_norms(self, p=1):
        _check_p(p)
        if p == 1:
            return np.abs(self.array).sum(axis=0)
        return np.sqrt((self.array**2).sum(axis=0))

    def trace(self):
        if self.m != self.n:
            return super().trace()
        return float(np.trace(self.array))

    def rows_quadratic(self, M):
        return np.einsum("ij,ij->i", self.array @ M, self.array)


class Sparse(Matrix):
    """A query matrix stored as a scipy sparse CSR array ``(m, n)``."""

    def __init__(self, matrix, name: str | None = None):
        S = scipy.sparse.csr_array(matrix, dtype=float)
        if not np.all(np.isfinite(S.data)):
            raise ValueError("a query matrix must have finite entries (found NaN or inf)")
        self.matrix = S
        self.shape = S.shape
        self._name = name or "sparse"

    @cached_property
    def integral(self) -> bool:  # type: ignore[override]  # computed here; a plain attribute elsewhere
        return bool(np.all(self.matrix.data == np.round(self.matrix.data)))

    def _matmat(self, X):
        return np.asarray(self.matrix @ X)

    def _rmatmat(self, Y):
        return np.asarray(self._transposed @ Y)

    @cached_property
    def _transposed(self) -> scipy.sparse.csc_array:
        """``Mᵀ``, a CSC view of the stored arrays built once: ``matrix.T`` builds one and checks
        its format on every call (about 0.1 ms, which lsmr and Monte Carlo runs pay per product)."""
        return self.matrix.T

    def _dense(self):
        return self.matrix.toarray()

    def sparse(self):
        return self.matrix

    def _gram(self):
        _check_limit((self.n, self.n), None, f"Gram matrix of {self.name!r}")
        if self.m * self.n <= DENSE_LIMIT:
            # sparse × dense costs nnz·n, far less than a sparse × sparse product
            # whose result is nearly dense (hierarchical strategies)
            return _finite_gram(lambda: np.asarray(self.matrix.T @ self.matrix.toarray()), self)
        return _finite_gram(lambda: (self.matrix.T @ self.matrix).toarray(), self)

    def column_norms(self, p=1):
        _check_p(p)
        # straight from the stored entries (a CSR array's column indices), no transposed copy:
        # the privacy kernel calls this on every measurement, so it is never cached
        S = self.matrix
        if not S.has_canonical_format:  # duplicate entries add up first
            S = S.copy()
            S.sum_duplicates()
        weights = np.abs(S.data) if p == 1 else S.data * S.data
        sums = np.bincount(S.indices, weights=weights, minlength=self.n).astype(float, copy=False)
        return sums if p == 1 else np.sqrt(sums)

    def rows_quadratic(self, M):
        R = self.matrix
        return np.asarray((R @ M) * R.toarray()).sum(axis=1) if self.m * self.n <= DENSE_LIMIT else super().rows_quadratic(M)


class Identity(Matrix):
    """Identity ``I_n``: one query per cell."""

    integral = True

    def __init__(self, n: int, name: str = "identity"):
        n = _check_cells(n, "identity: n")
        self.shape = (n, n)
        self._name = name
        self.spec = {"type": "identity"}

    def _matmat(self, X):
        return np.array(X, dtype=float, copy=True)

    def _rmatmat(self, Y):
        return np.array(Y, dtype=float, copy=True)

    def _dense(self):
        return np.eye(self.n)

    def sparse(self):
        return scipy.sparse.csr_array(scipy.sparse.identity(self.n, format="csr"))

    def _gram(self):
        return Identity(self.n)

    def column_norms(self, p=1):
        _check_p(p)
        return np.ones(self.n)

    def trace(self):
        return float(self.n)

    def pinv(self):
        return Identity(self.n)

    def rows_quadratic(self, M):
        return np.diag(M).copy()


class Ones(Matrix):
    """The all-ones matrix ``(m, n)``; ``Ones(1, n)`` is the Total query."""

    integral = True

    def __init__(self, m: int, n: int, name: str | None = None):
        m, n = _check_size(m, "m"), _check_cells(n, "ones: n")
        self.shape = (m, n)
        self._name = name or ("total" if m == 1 else "ones")

    def _matmat(self, X):
        return np.repeat(X.sum(axis=0, keepdims=True), self.m, axis=0)

    def _rmatmat(self, Y):
        return np.repeat(Y.sum(axis=0, keepdims=True), self.n, axis=0)

    def _dense(self):
        return np.ones(self.shape)

    def _gram(self):
        return Ones(self.n, self.n, name="ones") * float(self.m)

    def column_norms(self, p=1):
        _check_p(p)
        return np.full(self.n, float(self.m) if p == 1 else math.sqrt(self.m))

    def trace(self):
        if self.m != self.n:
            return super().trace()
        return float(self.n)

    def pinv(self):
        return Ones(self.n, self.m) * (1.0 / (self.m * self.n))

    def rows_quadratic(self, M):
        return np.full(self.m, float(np.sum(M)))


class Total(Ones):
    """The Total query ``1ᵀ`` (one row, the sum of all cells)."""

    def __init__(self, n: int, name: str = "total"):
        super().__init__(1, n, name=name)
        self.spec = {"type": "total"}


# ---------------------------------------------------------- range matrices
class _Ranges(Matrix):
    """Matrices whose rows are intervals ``[lo, hi]`` (inclusive) of a 1D domain."""

    integral = True

    def ranges(self) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover - abstract
        """Arrays ``(lo, hi)`` of the inclusive interval of every row."""
        raise NotImplementedError

    def _matmat(self, X):
        lo, hi = self.ranges()
        S = np.vstack([np.zeros((1, X.shape[1])), np.cumsum(X, axis=0)])
        return S[hi + 1] - S[lo]

    def _rmatmat(self, Y):
        lo, hi = self.ranges()
        D = np.zeros((self.n + 1, Y.shape[1]))
        np.add.at(D, lo, Y)
        np.add.at(D, hi + 1, -Y)
        return np.cumsum(D, axis=0)[: self.n]

    def _dense(self):
        lo, hi = self.ranges()
        cols = np.arange(self.n)
        return ((cols[None, :] >= lo[:, None]) & (cols[None, :] <= hi[:, None])).astype(float)

    def sparse(self):
        lo, hi = self.ranges()
        lengths = hi - lo + 1
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        starts = np.repeat(lo - indptr[:-1], lengths)
        indices = np.arange(indptr[-1]) + starts
        return scipy.sparse.csr_array(
            (np.ones(indptr[-1]), indices, indptr), shape=self.shape
        )

    def _gram(self):
        _check_limit((self.n, self.n), None, f"Gram matrix of {self.name!r}")
        lo, hi = self.ranges()
        n = self.n
        D = np.zeros((n + 1, n + 1))
        np.add.at(D, (lo, lo), 1.0)
        np.add.at(D, (lo, hi + 1), -1.0)
        np.add.at(D, (hi + 1, lo), -1.0)
        np.add.at(D, (hi + 1, hi + 1), 1.0)
        G = np.cumsum(np.cumsum(D, axis=0), axis=1)[:n, :n]
        return Dense(G)

    def column_norms(self, p=1):
        _check_p(p)
        lo, hi = self.ranges()
        d = np.zeros(self.n + 1)
        np.add.at(d, lo, 1.0)
        np.add.at(d, hi + 1, -1.0)
        counts = np.cumsum(d)[: self.n]
        return counts if p == 1 else np.sqrt(counts)

    def rows_quadratic(self, M):
        """``qᵀ M q`` for every interval ``q`` by a 2D prefix sum of ``M``."""
        lo, hi = self.ranges()
        n = self.n
        S = np.zeros((n + 1, n + 1))
        S[1:, 1:] = np.cumsum(np.cumsum(M, axis=0), axis=1)
        return S[hi + 1, hi + 1] - S[lo, hi + 1] - S[hi + 1, lo] + S[lo, lo]

    def frobenius_squared(self):
        return float(self.lengths().sum())

    def lengths(self) -> np.ndarray:
        """Length ``hi - lo + 1`` of every interval, shape ``(m,)``."""
        lo, hi = self.ranges()
        return hi - lo + 1


class Prefix(_Ranges):
    """Prefix (CDF) queries: row ``i`` sums cells ``0..i``; shape ``(n, n)``."""

    def __init__(self, n: int, name: str = "prefix"):
        n = _check_cells(n, "prefix: n")
        self.shape = (n, n)
        self._name = name
        self.spec = {"type": "prefix"}

    def ranges(self):
        return np.zeros(self.n, dtype=np.int64), np.arange(self.n, dtype=np.int64)

    def _matmat(self, X):
        return np.cumsum(X, axis=0)

    def _rmatmat(self, Y):
        return np.cumsum(Y[::-1], axis=0)[::-1]

    def _dense(self):
        return np.tril(np.ones(self.shape))

    def _gram(self):
        """Closed form ``(PᵀP)_ij = n - max(i, j)``."""
        _check_limit((self.n, self.n), None, f"Gram matrix of {self.name!r}")
        c = self.n - np.arange(self.n, dtype=float)
        return Dense(np.minimum.outer(c, c))

    def column_norms(self, p=1):
        _check_p(p)
        counts = (self.n - np.arange(self.n)).astype(float)
        return counts if p == 1 else np.sqrt(counts)


class AllRange(_Ranges):
    """All ``n(n+1)/2`` range queries ``[lo, hi]``, ordered by ``lo`` then ``hi``.

    The rows are never materialised unless asked: the Gram matrix has the
    closed form ``(WᵀW)_ij = (min(i,j) + 1)(n - max(i,j))`` (0-based), the
    number of intervals that contain both ``i`` and ``j``.
    """

    def __init__(self, n: int, name: str = "all_range"):
        n = _check_cells(n, "all_range: n")
        self.shape = (n * (n + 1) // 2, n)
        self._name = name
        self.spec = {"type": "all_range"}

    def ranges(self):
        lo, hi = np.triu_indices(self.n)
        return lo.astype(np.int64), hi.astype(np.int64)

    def _gram(self):
        _check_limit((self.n, self.n), None, f"Gram matrix of {self.name!r}")
        idx = np.arange(self.n, dtype=float)
        # for i <= j, (i+1)(n-j) <= (j+1)(n-i): the elementwise minimum of the
        # outer product and its transpose is (min+1)(n-max)
        O = np.outer(idx + 1, self.n - idx)
        return Dense(np.minimum(O, O.T))

    def column_norms(self, p=1):
        _check_p(p)
        j = np.arange(self.n, dtype=float)
        counts = (j + 1) * (self.n - j)
        return counts if p == 1 else np.sqrt(counts)

    def frobenius_squared(self):
        n = self.n
        return n * (n + 1) * (n + 2) / 6.0


class RangeQueries(_Ranges):
    """An explicit list of inclusive intervals ``[lo_k, hi_k]`` over ``n`` cells.

    Parameters
    ----------
    n : int
        Domain size.
    lo, hi : array_like of int, shape (m,)
        Inclusive interval bounds, ``0 <= lo <= hi < n``.

    Raises
    ------
    ValueError
        If a bound is outside ``[0, n)``, ``lo > hi``, or the list is empty.
    """

    def __init__(self, n: int, lo, hi, name: str = "ranges"):
        n = _check_cells(n, f"{name}: n")
        lo = np.asarray(lo)
        hi = np.asarray(hi)
        if lo.shape != hi.shape or lo.ndim != 1:
            raise ValueError("lo and hi must be 1D arrays of the same length")
        if lo.size == 0:
            raise ValueError("a range workload needs at least one interval")
        if not (np.issubdtype(lo.dtype, np.integer) and np.issubdtype(hi.dtype, np.integer)):
            if not (np.all(np.mod(lo, 1) == 0) and np.all(np.mod(hi, 1) == 0)):
                raise ValueError("interval bounds must be whole numbers")
        lo = lo.astype(np.int64)
        hi = hi.astype(np.int64)
        bad = (lo < 0) | (hi >= n) | (lo > hi)
        if np.any(bad):
            k = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"interval {k} = [{lo[k]}, {hi[k]}] is invalid: intervals are inclusive "
                f"[lo, hi] with 0 <= lo <= hi <= {n - 1}"
            )
        self.lo, self.hi = lo, hi
        self.shape = (lo.size, n)
        self._name = name
        self.spec = {"type": "ranges", "ranges": np.column_stack([lo, hi]).tolist()}

    def ranges(self):
        return self.lo, self.hi


class RectangleQueries(Matrix):
    """Axis-aligned rectangle queries ``[r0, r1] × [c0, c1]`` (inclusive) on a 2D grid.

    Over the grid ``(n1, n2)`` flattened in C order; answers come from a
    summed-area table (O(n + m)), so the ``m × n`` matrix is never formed
    for products.  The 2D analogue of :class:`RangeQueries` (DAWA Sec. 5.4).

    Parameters
    ----------
    shape : (int, int)
        Grid shape ``(n1, n2)``.
    r0, r1, c0, c1 : array_like of int, shape (m,)
        Inclusive row and column bounds.

    Raises
    ------
    ValueError
        If a bound is outside the grid, a range is reversed, or the list is empty.
    """

    integral = True

    def __init__(self, shape, r0, r1, c0, c1, name: str = "rectangles"):
        n1, n2 = _check_grid(shape, name)
        arrs = [np.asarray(a) for a in (r0, r1, c0, c1)]
        if len({a.shape for a in arrs}) != 1 or arrs[0].ndim != 1 or arrs[0].size == 0:
            raise ValueError("r0, r1, c0, c1 must be non-empty 1D arrays of one length")
        r0, r1, c0, c1 = (a.astype(np.int64) for a in arrs)
        bad = (r0 < 0) | (r1 >= n1) | (r0 > r1) | (c0 < 0) | (c1 >= n2) | (c0 > c1)
        if np.any(bad):
            k = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"rectangle {k} = rows [{r0[k]}, {r1[k]}] × cols [{c0[k]}, {c1[k]}] is invalid: "
                f"need 0 <= r0 <= r1 <= {n1 - 1} and 0 <= c0 <= c1 <= {n2 - 1}")
        self.r0, self.r1, self.c0, self.c1 = r0, r1, c0, c1
        self.grid = (n1, n2)
        self.shape = (r0.size, n1 * n2)
        self._domain = (n1, n2)
        self._name = name

    def areas(self) -> np.ndarray:
        """Number of cells of every rectangle, shape ``(m,)``."""
        return (self.r1 - self.r0 + 1) * (self.c1 - self.c0 + 1)

    def _matmat(self, X):
        n1, n2 = self.grid
        k = X.shape[1]
        S = np.zeros((n1 + 1, n2 + 1, k))
        S[1:, 1:] = np.cumsum(np.cumsum(X.reshape(n1, n2, k), axis=0), axis=1)
        r0, r1, c0, c1 = self.r0, self.r1 + 1, self.c0, self.c1 + 1
        return S[r1, c1] - S[r0, c1] - S[r1, c0] + S[r0, c0]

    def _rmatmat(self, Y):
        n1, n2 = self.grid
        k = Y.shape[1]
        D = np.zeros((n1 + 1, n2 + 1, k))
        np.add.at(D, (self.r0, self.c0), Y)
        np.add.at(D, (self.r0, self.c1 + 1), -Y)
        np.add.at(D, (self.r1 + 1, self.c0), -Y)
        np.add.at(D, (self.r1 + 1, self.c1 + 1), Y)
        return np.cumsum(np.cumsum(D, axis=0), axis=1)[:n1, :n2].reshape(n1 * n2, k)

    def column_norms(self, p=1):
        _check_p(p)
        counts = self._rmatmat(np.ones((self.m, 1)))[:, 0]
        return counts if p == 1 else np.sqrt(counts)

    def sparse(self):
        n1, n2 = self.grid
        rows, cols = [], []
        for q in range(self.m):
            rr, cc = np.meshgrid(np.arange(self.r0[q], self.r1[q] + 1),
                                 np.arange(self.c0[q], self.c1[q] + 1), indexing="ij")
            cols.append((rr * n2 + cc).ravel())
            rows.append(np.full(cols[-1].size, q))
        rows, cols = np.concatenate(rows), np.concatenate(cols)
        return scipy.sparse.csr_array((np.ones(rows.size), (rows, cols)), shape=self.shape)

    def _dense(self):
        return self.sparse().toarray()


# ================================================================ composites
class Weighted(Matrix):
    """``c · M`` for a scalar weight ``c``."""

    def __init__(self, base: Matrix, weight: float):
        if not np.isfinite(weight):
            raise ValueError(f"weight must be finite, got {weight}")
        self.base = as_matrix(base)
        self.weight = float(weight)
        self.shape = self.base.shape

    @property
    def integral(self) -> bool:  # type: ignore[override]  # computed here; a plain attribute elsewhere
        return self.weight == round(self.weight) and self.base.integral

    @property
    def name(self):
        if self._name is not None:
            return self._name
        return self.base.name if self.weight == 1 else f"{self.weight:g}·{self.base.name}"

    @name.setter
    def name(self, value):
        self._name = value

    @property
    def domain(self):
        return self._domain or self.base.domain

    @domain.setter
    def domain(self, value):
        Matrix.domain.fset(self, value)

    def _matmat(self, X):
        return self.weight * self.base._matmat(X)

    def _rmatmat(self, Y):
        return self.weight * self.base._rmatmat(Y)

    def _dense(self):
        return self.weight * self.base._dense()

    def sparse(self):
        return scipy.sparse.csr_array(self.weight * self.base.sparse())

    def _gram(self):
        return Weighted(self.base.gram(), self.weight**2)

    def column_norms(self, p=1):
        return abs(self.weight) * self.base.column_norms(p)

    def sensitivity(self, p=1):
        return abs(self.weight) * self.base.sensitivity(p)

    def trace(self):
        return self.weight * self.base.trace()

    def frobenius_squared(self):
        return self.weight**2 * self.base.frobenius_squared()

    def pinv(self):
        if self.weight == 0:
            return Dense(np.zeros((self.n, self.m)))
        return Weighted(self.base.pinv(), 1.0 / self.weight)

    def rows_quadratic(self, M):
        return self.weight**2 * self.base.rows_quadratic(M)


class VStack(Matrix):
    """Rows of several matrices over the same cells, stacked (a union of workloads)."""

    def __init__(self, blocks: Sequence[Matrix], name: str | None = None):
        blocks = [as_matrix(b) for b in blocks]
        if not blocks:
            raise ValueError("VStack needs at least one block")
        n = blocks[0].n
        for b in blocks:
            if b.n != n:
                raise ValueError(
                    f"cannot stack blocks over different numbers of cells: "
                    f"{[b.n for b in blocks]}"
                )
        self.blocks = blocks
        self.shape = (sum(b.m for b in blocks), n)
        self.integral = all(b.integral for b in blocks)
        self._name = name
        doms = {b.domain for b in blocks}
        if len(doms) == 1:
            self._domain = doms.pop()

    @property
    def name(self):
        return self._name or " ∪ ".join(b.name for b in self.blocks)

    @name.setter
    def name(self, value):
        self._name = value

    def _offsets(self):
        return np.cumsum([0] + [b.m for b in self.blocks])

    def _matmat(self, X):
        return np.vstack([b._matmat(X) for b in self.blocks])

    def _rmatmat(self, Y):
        off = self._offsets()
        out = np.zeros((self.n, Y.shape[1]))
        for b, s, e in zip(self.blocks, off[:-1], off[1:], strict=True):
            out += b._rmatmat(Y[s:e])
        return out

    def _dense(self):
        return np.vstack([b._dense() for b in self.blocks])

    def sparse(self):
        return scipy.sparse.csr_array(scipy.sparse.vstack([b.sparse() for b in self.blocks]))

    def _gram(self):
        grams = [b.gram() for b in self.blocks]
        if all(isinstance(g, Kronecker) for g in grams):
            return _GramSum(grams)
        total = grams[0].dense().astype(float, copy=True)
        for g in grams[1:]:
            total += g.dense()
        return Dense(total)

    def column_norms(self, p=1):
        _check_p(p)
        if p == 1:
            return sum(b.column_norms(1) for b in self.blocks)
        return np.sqrt(sum(b.column_norms(2) ** 2 for b in self.blocks))

    def frobenius_squared(self):
        return float(sum(b.frobenius_squared() for b in self.blocks))

    def rows_quadratic(self, M):
        return np.concatenate([b.rows_quadratic(M) for b in self.blocks])


class _GramSum(Matrix):
    """A sum of Gram matrices ``Σ_j G_j`` kept implicit (e.g. of Kronecker products)."""

    def __init__(self, terms: Sequence[Matrix]):
        self.terms = list(terms)
        self.shape = self.terms[0].shape
        self._name = "gram"
        doms = {t.domain for t in self.terms}
        if len(doms) == 1:
            self._domain = doms.pop()

    def _matmat(self, X):
        return sum(t._matmat(X) for t in self.terms)

    def _rmatmat(self, Y):
        return sum(t._rmatmat(Y) for t in self.terms)

    def _dense(self):
        return sum(t._dense() for t in self.terms)

    def trace(self):
        return float(sum(t.trace() for t in self.terms))


class Kronecker(Matrix):
    """Kronecker product ``M_1 ⊗ ... ⊗ M_d`` kept factorised.

    Acts on a data vector over the domain ``(n_1, ..., n_d)`` flattened in C
    order.  Products, Gram, pseudo-inverse and sensitivity are computed factor
    by factor (HDMM Prop. 6, Thm 3 and Thm 14):
    ``(A⊗B)⁺ = A⁺⊗B⁺``, ``(A⊗B)ᵀ(A⊗B) = AᵀA ⊗ BᵀB``, column norms multiply.
    """

    def __init__(self, factors: Sequence[Matrix], name: str | None = None):
        factors = [as_matrix(f) for f in factors]
        if not factors:
            raise ValueError("a Kronecker product needs at least one factor")
        limits.check("attributes", len(factors), "kron: number of factors (attributes)")
        self.factors = factors
        self.shape = (math.prod(f.m for f in factors), math.prod(f.n for f in factors))
        self._name = name

    @property
    def integral(self) -> bool:  # type: ignore[override]  # computed here; a plain attribute elsewhere
        return all(f.integral for f in self.factors)

    @property
    def name(self):
        return self._name or " ⊗ ".join(f.name for f in self.factors)

    @name.setter
    def name(self, value):
        self._name = value

    @property
    def domain(self):
        if self._domain is not None:
            return self._domain
        return tuple(d for f in self.factors for d in f.domain)

    @domain.setter
    def domain(self, value):
        Matrix.domain.fset(self, value)

    def _apply(self, X, transpose: bool):
        k = X.shape[1]
        sizes_in = [f.m if transpose else f.n for f in self.factors]
        T = X.reshape(*sizes_in, k)
        for axis, f in enumerate(self.factors):
            T = np.moveaxis(T, axis, 0)
            shp = T.shape
            flat = T.reshape(shp[0], -1)
            out = f._rmatmat(flat) if transpose else f._matmat(flat)
            T = np.moveaxis(out.reshape(out.shape[0], *shp[1:]), 0, axis)
        return T.reshape(-1, k)

    def _matmat(self, X):
        return self._apply(X, transpose=False)

    def _rmatmat(self, Y):
        return self._apply(Y, transpose=True)

    def _dense(self):
        out = np.ones((1, 1))
        for f in self.factors:
            out = np.kron(out, f._dense())
        return out

    def sparse(self):
        out = scipy.sparse.csr_array(np.ones((1, 1)))
        for f in self.factors:
            out = scipy.sparse.kron(out, f.sparse(), format="csr")
        return scipy.sparse.csr_array(out)

    def _gram(self):
        return Kronecker([f.gram() for f in self.factors])

    def column_norms(self, p=1):
        _check_p(p)
        limits.check("cells", self.n, f"column norms of {self.name!r} (one per cell)")
        out = np.ones(1)
        for f in self.factors:
            out = np.kron(out, f.column_norms(p))
        return out

    def sensitivity(self, p=1):
        return float(math.prod(f.sensitivity(p) for f in self.factors))

    def trace(self):
        return float(math.prod(f.trace() for f in self.factors))

    def frobenius_squared(self):
        return float(math.prod(f.frobenius_squared() for f in self.factors))

    def pinv(self):
        return Kronecker([f.pinv() for f in self.factors])

    def rows_quadratic(self, M):
        if isinstance(M, Kronecker):
            out = np.ones(1)
            for f, Mf in zip(self.factors, M.factors, strict=True):
                out = np.kron(out, f.rows_quadratic(Mf.dense()))
            return out
        return super().rows_quadratic(M)


class Diagonal(Matrix):
    """``diag(v)``, shape ``(n, n)``: scales every cell by ``v_j``."""

    def __init__(self, v, name: str = "diag"):
        v = np.asarray(v, dtype=float)
        if v.ndim != 1:
            raise ValueError("a diagonal needs a 1D vector")
        if not np.all(np.isfinite(v)):
            raise ValueError("diagonal entries must be finite")
        self.v = v
        self.shape = (v.size, v.size)
        self._name = name
        self.integral = bool(np.all(v == np.round(v)))

    def _matmat(self, X):
        return self.v[:, None] * X

    _rmatmat = _matmat

    def _dense(self):
        return np.diag(self.v)

    def sparse(self):
        return scipy.sparse.csr_array(scipy.sparse.diags(self.v))

    def _gram(self):
        return Diagonal(self.v**2)

    def column_norms(self, p=1):
        _check_p(p)
        return np.abs(self.v)

    def trace(self):
        return float(self.v.sum())

    def pinv(self):
        inv = np.zeros_like(self.v)
        nz = self.v != 0
        inv[nz] = 1.0 / self.v[nz]
        return Diagonal(inv)


class Permutation(Matrix):
    """Permutation matrix ``P`` with ``(P x)_i = x[perm[i]]``, shape ``(n, n)``."""

    def __init__(self, perm, name: str = "permutation"):
        perm = np.asarray(perm)
        n = perm.size
        if perm.ndim != 1 or not np.array_equal(np.sort(perm), np.arange(n)):
            raise ValueError("perm must be a permutation of 0..n-1")
        self.perm = perm.astype(np.int64)
        self.inverse = np.argsort(self.perm)
        self.shape = (n, n)
        self._name = name
        self.integral = True

    def _matmat(self, X):
        return X[self.perm]

    def _rmatmat(self, Y):
        return Y[self.inverse]

    def _dense(self):
        return np.eye(self.n)[self.perm]

    def _gram(self):
        return Identity(self.n)

    def column_norms(self, p=1):
        _check_p(p)
        return np.ones(self.n)

    def pinv(self):
        return Permutation(self.inverse)


class Grouping(Matrix):
    """Bucket sums ``P: (k, n)``: ``(P x)_b = Σ_{j : bucket_of[j] = b} x_j``.

    Every cell belongs to exactly one bucket, so ``L·P`` has the column norms
    of ``L`` indexed by ``bucket_of`` (used for strategies over DAWA buckets).

    Raises
    ------
    ValueError
        If a bucket index is outside ``[0, k)``.
    """

    def __init__(self, bucket_of, k: int, name: str = "grouping"):
        b = np.asarray(bucket_of)
        k = _check_size(k, "k")
        if b.ndim != 1 or b.size == 0 or not np.issubdtype(b.dtype, np.integer):
            raise ValueError("bucket_of must be a non-empty 1D integer array")
        if b.min() < 0 or b.max() >= k:
            raise ValueError(f"bucket indices must lie in [0, {k}), got [{b.min()}, {b.max()}]")
        self.bucket_of = b.astype(np.int64)
        self.shape = (k, b.size)
        self.integral = True
        self._name = name

    def _matmat(self, X):
        out = np.zeros((self.m, X.shape[1]))
        np.add.at(out, self.bucket_of, X)
        return out

    def _rmatmat(self, Y):
        return Y[self.bucket_of]

    def sparse(self):
        return scipy.sparse.csr_array(
            (np.ones(self.n), (self.bucket_of, np.arange(self.n))), shape=self.shape)

    def _dense(self):
        return self.sparse().toarray()

    def _gram(self):
        _check_limit((self.n, self.n), None, f"Gram matrix of {self.name!r}")
        b = self.bucket_of
        return Dense((b[:, None] == b[None, :]).astype(float))

    def column_norms(self, p=1):
        _check_p(p)
        return np.ones(self.n)


class Product(Matrix):
    """Product ``L @ R`` of two query matrices, kept lazy.

    The Gram ``RᵀLᵀLR`` and column norms are exact and cheap when ``R`` is a
    :class:`Permutation` or :class:`Diagonal` (permuted and value-weighted
    workloads); otherwise they are computed densely.
    """

    def __init__(self, left: Matrix, right: Matrix, name: str | None = None):
        left, right = as_matrix(left), as_matrix(right)
        if left.n != right.m:
            raise ValueError(f"cannot multiply {left.shape} by {right.shape}")
        self.left, self.right = left, right
        self.shape = (left.m, right.n)
        self._name = name

    @property
    def integral(self) -> bool:  # type: ignore[override]  # computed here; a plain attribute elsewhere
        return self.left.integral and self.right.integral

    @property
    def name(self):
        return self._name or f"{self.left.name}·{self.right.name}"

    @name.setter
    def name(self, value):
        self._name = value

    def _matmat(self, X):
        return self.left._matmat(self.right._matmat(X))

    def _rmatmat(self, Y):
        return self.right._rmatmat(self.left._rmatmat(Y))

    def _dense(self):
        return self.left._matmat(self.right._dense())

    def _gram(self):
        G = self.left.gram()
        R = self.right
        if isinstance(R, Permutation):
            Gd = G.dense()
            return Dense(Gd[np.ix_(R.inverse, R.inverse)])
        if isinstance(R, Diagonal):
            return Dense(R.v[:, None] * G.dense() * R.v[None, :])
        Rd = R.dense()
        return Dense(Rd.T @ G._matmat(Rd))

    def column_norms(self, p=1):
        R = self.right
        if isinstance(R, Permutation):
            return self.left.column_norms(p)[R.inverse]
        if isinstance(R, Grouping):
            return self.left.column_norms(p)[R.bucket_of]
        if isinstance(R, Diagonal):
            return self.left.column_norms(p) * np.abs(R.v)
        return super().column_norms(p)

    def rows_quadratic(self, M):
        R = self.right
        if isinstance(R, Permutation | Diagonal):
            Rd = R.dense()
            return self.left.rows_quadratic(Rd @ M @ Rd.T)
        return super().rows_quadratic(M)


class Transpose(Matrix):
    """Lazy transpose ``Mᵀ``."""

    def __init__(self, base: Matrix):
        self.base = base
        self.shape = (base.n, base.m)

    @property
    def integral(self) -> bool:  # type: ignore[override]  # computed here; a plain attribute elsewhere
        return self.base.integral

    @property  # type: ignore[misc]  # a transpose's name is its base's: read-only
    def name(self):
        return f"{self.base.name}ᵀ"

    @property
    def T(self):
        return self.base

    def _matmat(self, X):
        return self.base._rmatmat(X)

    def _rmatmat(self, Y):
        return self.base._matmat(Y)

    def _dense(self):
        return self.base._dense().T


def _check_size(n, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer):
        raise ValueError(f"{what} must be a positive whole number, got {n!r}")
    if n < 1:
        raise ValueError(f"{what} must be at least 1, got {n}")
    return int(n)


def _check_cells(n, what: str) -> int:
    """A number of cells: a positive whole number within the ``cells`` limit (nothing allocated)."""
    return limits.check("cells", _check_size(n, what), what)


def _check_grid(shape, what: str) -> tuple[int, int]:
    """A 2D grid shape ``(n1, n2)`` whose ``n1·n2`` cells are within the ``cells`` limit."""
    try:
        n1, n2 = shape
    except (TypeError, ValueError):
        raise ValueError(f"{what}: a 2D grid shape (n1, n2) is needed, got {shape!r}") from None
    n1, n2 = _check_size(n1, f"{what}: grid rows"), _check_size(n2, f"{what}: grid columns")
    limits.check("cells", n1 * n2, f"{what}: grid of {n1:,} × {n2:,} cells")
    return n1, n2


def kron_terms(W: Matrix, leaves: bool = False):
    """``W`` as a list of ``(weight, [factors])`` if it is a (union of) Kronecker products, else ``None``.

    A plain Kronecker product is one term of weight 1; ``Weighted`` multiplies
    the weights; ``VStack`` concatenates the terms of its blocks (HDMM Eq. 3),
    in ``W``'s row order.  With ``leaves=True`` any other matrix is a
    one-factor term instead of making the answer ``None``.
    """
    if isinstance(W, Weighted):
        inner = kron_terms(W.base, leaves)
        return None if inner is None else [(W.weight * c, f) for c, f in inner]
    if isinstance(W, Kronecker):
        return [(1.0, W.factors)]
    if isinstance(W, VStack):
        out = []
        for b in W.blocks:
            t = kron_terms(b, leaves)
            if t is None:
                return None
            out.extend(t)
        return out
    return [(1.0, [W])] if leaves else None
