"""Lower-triangular Toeplitz matrices: the factorisations of continual counting, never materialised.

A lower-triangular Toeplitz matrix ``C: (T, T)`` is fixed by its first column
``c``: ``C[t, s] = c[t - s]`` for ``s <= t`` and 0 above the diagonal.  Row
``t`` of ``C x`` uses ``x[0..t]`` only, so a strategy of this form can be
released step by step (it is *online*).  The prefix workload itself is one
(``c`` all ones), and its factorisations ``L = B C`` with ``B`` and ``C``
lower-triangular Toeplitz are the mechanisms studied for continual counting
(Denisov, McMahan, Rush, Smith & Thakurta, NeurIPS 2022; Fichtenberger,
Henzinger & Upadhyay, ICML 2023; Henzinger, Upadhyay & Upadhyay, SODA 2023).

These matrices form a commutative algebra isomorphic to power series
truncated at degree ``T``: the product of two is the causal convolution of
their columns, and the inverse of ``C`` (when ``c[0] != 0``) is the
truncated power-series inverse of ``c``.  Everything here costs
``O(T log T)`` (FFT convolutions, Newton's iteration for the inverse) or
``O(T)`` (column norms from running sums), so the analytic error of a
factorisation is exact at ``T = 2**20`` without a ``T × T`` matrix:

* the matrix mechanism with strategy ``A = C`` answers ``W`` through
  ``B = W C⁻¹``; for ``W`` the prefix workload (or Identity) ``B`` is again
  lower-triangular Toeplitz, with first column ``b``;
* row ``t`` of ``B`` holds ``b[0..t]``, so the variance of answer ``t`` is
  ``v · Δ(C)² · Σ_{j≤t} b_j²`` and the total squared error
  ``v · Δ(C)² · Σ_j (T − j) b_j²`` (the matrix mechanism's TSE, Li et al.,
  PODS 2010 / VLDB J. 2015; ``dpexplorer/docs/matrix_mechanism.md``);
* column ``s`` of ``C`` holds ``c[0..T-1-s]``, so the sensitivity (largest
  column norm) is the norm of ``c`` itself: ``Δ₂(C)² = Σ_j c_j²``,
  ``Δ₁(C) = Σ_j |c_j|``.

:func:`sqrt_prefix_column` gives the square root of the prefix matrix, the
factorisation ``B = C = L^{1/2}`` (Fichtenberger, Henzinger & Upadhyay, "Constant
matters: fine-grained error bound on differentially private continual observation",
ICML 2023; Henzinger, Upadhyay & Upadhyay, "Almost tight error bounds on differentially
private continual counting", SODA 2023).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import scipy.linalg
import scipy.signal
import scipy.sparse.linalg

from .matrix import Identity, Matrix, Prefix, _check_cells, _check_p

__all__ = ["LowerToeplitz", "BandedNoiseFilter", "StepFilter", "causal_convolve", "series_inverse", "sqrt_prefix_column",
           "FILTER_BANDS"]

#: Most non-zero diagonals of a strategy whose release noise is generated step by step
#: (:meth:`LowerToeplitz.noise_filter`): each step costs ``O(b)``.
FILTER_BANDS = 4096


def _column(values, what: str) -> np.ndarray:
    """``values`` as a finite 1D float64 array with a non-empty length, else ValueError."""
    c = np.asarray(values, dtype=float)
    if c.ndim != 1 or c.size == 0:
        raise ValueError(f"{what} must be a non-empty 1D array, got shape {c.shape}")
    if not np.isfinite(c).all():
        raise ValueError(f"{what} must be finite (no NaN or inf)")
    return c


def causal_convolve(a, b, length: int | None = None) -> np.ndarray:
    """The first ``length`` terms of the convolution of ``a`` and ``b`` (along axis 0).

    ``(a * b)[t] = Σ_{s≤t} a[t−s] b[s]``: the product of the lower-triangular
    Toeplitz matrix with first column ``a`` and the vector (or the columns of
    the matrix) ``b``.  FFT convolution, ``O(T log T)``.

    Parameters
    ----------
    a : array, shape (T,)
    b : array, shape (T,) or (T, k)
    length : int, optional
        Terms kept (default ``len(b)``).
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    length = b.shape[0] if length is None else int(length)
    a = a[:length]
    if b.ndim == 1:
        return scipy.signal.fftconvolve(a, b[:length])[:length]
    return scipy.signal.fftconvolve(a[:, None], b[:length], axes=0)[:length]


def series_inverse(c, length: int | None = None) -> np.ndarray:
    """First column of ``C⁻¹`` for the lower-triangular Toeplitz ``C`` with first column ``c``.

    The truncated power-series inverse ``g`` of ``c`` (``c * g = e₀`` up to
    ``length`` terms), by Newton's iteration ``g ← g (2 − c g)``, which
    doubles the number of exact terms per step: ``O(T log T)`` in all.

    Parameters
    ----------
    c : array, shape (T,)
        ``c[0]`` must not be 0 (``C`` is invertible exactly then).
    length : int, optional
        Terms wanted (default ``len(c)``).

    Raises
    ------
    ValueError
        If ``c`` is not a finite non-empty 1D array or ``c[0] == 0``.
    """
    c = _column(c, "the first column")
    length = c.size if length is None else int(length)
    if c[0] == 0:
        raise ValueError("a lower-triangular Toeplitz matrix with c[0] = 0 is singular: no inverse")
    g = np.array([1.0 / c[0]])
    while g.size < length:
        k = min(2 * g.size, length)
        cg = causal_convolve(c[:k], np.pad(g, (0, k - g.size)))
        correction = -cg
        correction[0] += 2.0
        g = causal_convolve(np.pad(g, (0, k - g.size)), correction)
    return g[:length]


def sqrt_prefix_column(T: int) -> np.ndarray:
    """First column ``f`` of the square root of the ``T × T`` prefix matrix.

    ``f_0 = 1``, ``f_k = f_{k−1} (1 − 1/(2k))`` (so ``f_k = binom(2k, k) / 4^k``),
    the coefficients of ``(1 − x)^{−1/2}``: ``C = L^{1/2}`` is lower-triangular
    Toeplitz with first column ``f`` and ``C C = L`` (Fichtenberger, Henzinger &
    Upadhyay, ICML 2023; Henzinger, Upadhyay & Upadhyay, SODA 2023).

    Raises
    ------
    ValueError
        If ``T`` is not a positive whole number; ``LimitExceededError`` (a ValueError) above
        the ``cells`` limit of :mod:`dpexplorer.queries.limits`.
    """
    T = _check_cells(T, "T (the number of steps)")
    k = np.arange(1, T, dtype=float)
    return np.concatenate([[1.0], np.cumprod(1.0 - 1.0 / (2.0 * k))])


class LowerToeplitz(Matrix):
    """The lower-triangular Toeplitz matrix with first column ``column``; shape ``(T, T)``.

    Products by FFT convolution, column norms from running sums, inverse by
    :func:`series_inverse`; nothing of size ``T × T`` unless :meth:`dense` is
    asked for.  As a strategy ``A`` of the matrix mechanism it gives the
    analytic error on the prefix and Identity workloads of the same length in
    ``O(T log T)`` (:meth:`workload_trace`, :meth:`workload_row_variances`).

    Parameters
    ----------
    column : array, shape (T,)
        ``C[t, s] = column[t − s]`` for ``s ≤ t``.
    name : str

    Raises
    ------
    ValueError
        If ``column`` is not a finite non-empty 1D array.
    """

    def __init__(self, column, name: str = "lower_toeplitz"):
        self.column = _column(column, "the first column")
        self.column.setflags(write=False)
        T = self.column.size
        self.shape = (T, T)
        self._name = name
        # whole-number entries (e.g. the prefix matrix's ones): the kernel's discrete samplers apply
        self.integral = bool(np.all(np.floor(self.column) == self.column))

    def _matmat(self, X):
        return causal_convolve(self.column, X)

    def _rmatmat(self, Y):
        # Cᵀ = R C R with R the reversal: an anti-causal convolution
        return causal_convolve(self.column, Y[::-1])[::-1]

    def _dense(self):
        return scipy.linalg.toeplitz(self.column, np.zeros(self.n))

    def column_norms(self, p=1):
        _check_p(p)
        # column s holds column[0 .. T-1-s]
        running = np.cumsum(np.abs(self.column) if p == 1 else self.column ** 2)[::-1]
        return running if p == 1 else np.sqrt(running)

    def trace(self):
        return float(self.n * self.column[0])

    def inverse(self) -> LowerToeplitz:
        """``C⁻¹``, again lower-triangular Toeplitz (ValueError if ``column[0] == 0``)."""
        return LowerToeplitz(series_inverse(self.column), name=f"{self.name}⁻¹")

    def reconstructor(self):
        """Least squares ``x̂ = C⁺ y`` as a function of ``y: (T,)`` (RECONSTRUCT).

        ``C`` invertible (``column[0] != 0``): ``C⁻¹ y`` by one FFT convolution
        with the power-series inverse, ``O(T log T)``.  Singular ``C``: the
        minimum-norm least-squares solution by scipy's lsmr.
        """
        if self.column[0] == 0:
            op = self.as_linear_operator()
            return lambda y: scipy.sparse.linalg.lsmr(op, y, atol=1e-10, btol=1e-10,
                                                      maxiter=max(10 * self.n, 1000))[0]
        return self.inverse().matvec

    def noise_filter(self, W: Matrix) -> StepFilter | None:
        """The noise of a stream release of the running total step by step, for a banded ``C``.

        When ``C`` has fewer than ``T`` and at most :data:`FILTER_BANDS` non-zero
        diagonals (``column[b:] == 0``) and ``W`` is the prefix matrix over its ``T``
        steps: a :class:`BandedNoiseFilter` (memory ``O(b)``, whatever ``T``);
        None otherwise (the noise is then drawn whole and decoded).
        """
        nonzero = np.flatnonzero(self.column)
        bands = int(nonzero[-1]) + 1 if nonzero.size else 0
        if (not isinstance(W, Prefix) or W.shape != self.shape or self.column[0] == 0
                or bands > FILTER_BANDS or bands >= self.n):  # a full column: one FFT at once
            return None
        return BandedNoiseFilter(self.column[:bands])

    def _answer_column(self, W: Matrix) -> np.ndarray | None:
        """First column ``b`` of ``B = W C⁻¹`` when ``W`` is Prefix or Identity over ``T`` cells."""
        if W.shape != self.shape or type(W) not in (Prefix, Identity):
            return None
        g = series_inverse(self.column)
        return np.cumsum(g) if isinstance(W, Prefix) else g

    def workload_trace(self, W: Matrix):
        """``tr(WᵀW (CᵀC)⁻¹) = ‖W C⁻¹‖_F² = Σ_j (T − j) b_j²`` for Prefix/Identity ``W``.

        ``NotImplemented`` for any other workload (the generic path then
        applies).  ``C`` is invertible, so it supports every workload.
        """
        b = self._answer_column(W)
        if b is None:
            return NotImplemented
        return float(np.dot(self.n - np.arange(self.n), b * b))

    def workload_row_variances(self, W: Matrix):
        """``diag(W (CᵀC)⁻¹ Wᵀ)``: ``Σ_{j≤t} b_j²`` for answer ``t`` (Prefix/Identity ``W``).

        ``NotImplemented`` for any other workload.
        """
        b = self._answer_column(W)
        if b is None:
            return NotImplemented
        return np.cumsum(b * b)


class StepFilter(Protocol):
    """A public causal linear filter of noise: ``step(z_t)`` returns the correlated noise of step ``t``."""

    def step(self, z: Any) -> Any:
        """The correlated noise of the next step from that step's i.i.d. noise ``z`` (same shape)."""
        ...  # pragma: no cover - a protocol


class BandedNoiseFilter:
    """``(L C⁻¹ z)_t`` step by step for a banded lower-triangular Toeplitz ``C``, in ``O(b)`` memory.

    ``u = C⁻¹ z`` by forward substitution, ``u_t = (z_t − Σ_{1≤j<b} c_j
    u_{t−j}) / c_0``, keeping the last ``b − 1`` values of ``u``, and a running
    sum of ``u`` (``L u``): the correlated noise of the running total when the
    release measures ``C x + z`` (:class:`dpexplorer.privacy.PrivateStream`;
    banded strategies: Choquette-Choo et al., NeurIPS 2023).  Public: it sees
    only the noise.

    Parameters
    ----------
    column : array, shape (b,)
        The non-zero head of ``C``'s first column; ``column[0] != 0``.

    Raises
    ------
    ValueError
        If ``column`` is not a finite non-empty 1D array or ``column[0] == 0``.
    """

    def __init__(self, column):
        self.column = _column(column, "the band of the first column")
        if self.column[0] == 0:
            raise ValueError("a banded filter needs column[0] != 0 (an invertible strategy)")
        self._past = np.zeros(self.column.size - 1)  # u_{t-1}, u_{t-2}, ...
        self._total = 0.0

    def step(self, z: float) -> float:
        """``(L C⁻¹ z)_t`` given this step's noise ``z_t``."""
        u = (float(z) - float(np.dot(self.column[1:], self._past))) / self.column[0]
        if self._past.size:
            self._past = np.roll(self._past, 1)
            self._past[0] = u
        self._total += u
        return self._total

