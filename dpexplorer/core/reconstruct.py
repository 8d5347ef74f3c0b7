"""RECONSTRUCT of the matrix mechanism: least squares ``x̂ = A⁺ y`` for any strategy.

Used by every family that measures with a strategy (the matrix mechanism's
releases, DAWA's bucket counts, the sum mechanisms, stacked OPT+ strategies):
Kronecker strategies factor by factor (HDMM Thm 14), tree strategies (H2, HB,
GreedyH, Haar wavelet) through their closed-form inverse Gram, other sparse
and large ones with scipy's lsmr, small dense ones through the Gram
pseudo-inverse, implicit strategies with their own ``reconstructor()``.  Public post-processing of
noisy answers: it never sees ``x``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse.linalg

from ..queries.matrix import Dense, Identity, Kronecker, Matrix, Sparse, as_matrix
from ..queries.trees import HaarWavelet, IntervalTree
from .error import GramInverse

__all__ = ["Reconstructor", "reconstruct", "DENSE_RECONSTRUCT_LIMIT"]

#: Largest number of cells reconstructed through a dense Gram pseudo-inverse;
#: larger non-Kronecker strategies use scipy's lsmr.
DENSE_RECONSTRUCT_LIMIT = 4096


class Reconstructor:
    """Least squares ``x̂ = A⁺ y`` for one strategy, factorised once (RECONSTRUCT).

    Parameters
    ----------
    A : Matrix or array, shape (p, n)
        The strategy.
    method : {"auto", "kron", "tree", "dense", "lsmr", "custom"}
        ``kron``: ``(⊗A_i)⁺ = ⊗A_i⁺`` applied factor by factor (HDMM Thm 14);
        ``tree``: ``(AᵀA)⁻¹ Aᵀ y`` with the closed-form inverse Gram of an
        :class:`~dpexplorer.queries.trees.IntervalTree` or
        :class:`~dpexplorer.queries.trees.HaarWavelet`
        (:meth:`SegmentInverse.matvec <dpexplorer.queries.intervals.SegmentInverse.matvec>`,
        ``O(n · levels)`` per call; these strategies have full column rank);
        ``dense``: ``(AᵀA)⁺ Aᵀ y``; ``lsmr``: scipy.sparse.linalg.lsmr from 0,
        which converges to the minimum-norm least-squares solution.
        ``custom``: the strategy's own ``A.reconstructor()`` (implicit
        marginal or stacked strategies).
        ``auto`` picks custom when the strategy has one, kron for Kronecker strategies, tree for
        tree strategies, lsmr for other sparse ones and above
        :data:`DENSE_RECONSTRUCT_LIMIT` cells, dense otherwise.
    atol, btol : float
        lsmr stopping tolerances.

    Raises
    ------
    ValueError
        If the method is unknown, or ``kron`` is asked for a non-Kronecker strategy.
    """

    def __init__(self, A, method: str = "auto", atol: float = 1e-10, btol: float = 1e-10):
        A = as_matrix(A)
        if method not in ("auto", "kron", "tree", "dense", "lsmr", "custom"):
            raise ValueError(f"method must be 'auto', 'kron', 'tree', 'dense', 'lsmr' or 'custom', "
                             f"got {method!r}")
        if method == "auto" and hasattr(A, "reconstructor"):
            method = "custom"  # implicit strategies bring their own least squares
        if method == "auto":
            if isinstance(A, Identity):
                method = "identity"
            elif isinstance(A, Kronecker):
                method = "kron"
            elif isinstance(A, IntervalTree | HaarWavelet):
                method = "tree"
            elif A.n <= DENSE_RECONSTRUCT_LIMIT and not isinstance(A, Sparse):
                method = "dense"
            else:
                method = "lsmr"
        if method == "kron" and not isinstance(A, Kronecker):
            raise ValueError("method='kron' needs a Kronecker strategy")
        if method == "tree" and not isinstance(A, IntervalTree | HaarWavelet):
            raise ValueError("method='tree' needs an IntervalTree or HaarWavelet strategy")
        self.A, self.method, self.atol, self.btol = A, method, atol, btol
        if method == "custom":
            self._op = A.reconstructor()
        elif method == "kron":
            self._op = Kronecker([_factor_pinv(f) for f in A.factors])
        elif method == "tree":
            self._op = A.inverse()
        elif method == "dense":
            self._op = GramInverse(A.gram().dense()).pinv

    def __call__(self, y) -> np.ndarray:
        """``x̂`` (shape ``(n,)``, counts) for noisy answers ``y: (p,)``.

        Raises
        ------
        ValueError
            If ``y`` is not numbers, has the wrong shape, or has NaN/inf entries.
        """
        A = self.A
        try:
            y = np.asarray(y, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"y must be numbers (the noisy strategy answers), got {type(y).__name__}") from None
        if y.shape != (A.m,):
            raise ValueError(f"y must have shape ({A.m},) to match the strategy, got {y.shape}")
        if not np.isfinite(y).all():
            bad = int((~np.isfinite(y)).sum())
            raise ValueError(f"y must be finite: {bad} of its {y.size} entries are NaN or inf (first at "
                             f"index {int(np.flatnonzero(~np.isfinite(y))[0])})")
        if self.method == "identity":
            return y.copy()
        if self.method == "custom":
            return np.asarray(self._op(y), dtype=float)
        if self.method == "kron":
            return self._op.matvec(y)
        if self.method == "tree":
            return self._op.matvec(A.rmatvec(y))
        if self.method == "dense":
            return self._op @ A.rmatvec(y)
        result = scipy.sparse.linalg.lsmr(A.as_linear_operator(), y, atol=self.atol, btol=self.btol,
                                          maxiter=max(10 * A.n, 1000))
        return result[0]


def reconstruct(A, y, method: str = "auto", atol: float = 1e-10, btol: float = 1e-10) -> np.ndarray:
    """Least-squares estimate ``x̂ = A⁺ y`` (RECONSTRUCT); see :class:`Reconstructor`.

    Parameters
    ----------
    A : Matrix or array, shape (p, n)
    y : ndarray, shape (p,)
    method : {"auto", "kron", "tree", "dense", "lsmr", "custom"}

    Returns
    -------
    ndarray, shape (n,)
        ``x̂``, in counts.

    Raises
    ------
    ValueError
        If ``y`` is not finite numbers of the right length, or the method is unknown.
    TypeError
        If ``A`` is not a query matrix.
    """
    return Reconstructor(A, method, atol, btol)(y)


def _factor_pinv(f: Matrix) -> Matrix:
    if isinstance(f, Identity):
        return f
    return Dense(GramInverse(f.gram().dense()).pinv @ f.dense().T)
