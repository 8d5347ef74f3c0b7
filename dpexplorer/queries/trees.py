"""Tree-structured strategies whose ``(AᵀA)⁻¹`` is a sum of interval-supported rank-one terms.

For H2, HB and GreedyH (a laminar family of weighted intervals: every level
partitions the cells and refines the level above, the bottom level is every
cell) and for Privelet's Haar wavelet, the inverse Gram has the form

    (AᵀA)⁻¹ = diag(d) + Σ_levels Σ_{q ∈ level} γ_q u_q u_qᵀ

with ``u_q`` supported on the interval of node ``q``: a
:class:`~dpexplorer.queries.intervals.SegmentInverse`, whose traces against
structured Grams and interval-query variances cost ``O(n)`` or ``O(m)`` per
level.  The strategies plug into :mod:`dpexplorer.core.error` through the
``workload_trace`` and ``workload_row_variances`` hooks.

**Weighted trees** (Sherman-Morrison, as in GreedyH, DAWA App. C.2): a node
``q`` with weight ``c_q`` over children with Gram ``B = blockdiag(X_c)`` has
``X_q = B + c_q² 1 1ᵀ``, so ``X_q⁻¹ = B⁻¹ − β_q v vᵀ`` with ``v = B⁻¹1``,
``M = 1ᵀv``, ``β_q = c_q² / (1 + c_q² M)``, and ``X_q⁻¹1 = v / (1 + c_q² M)``.
Unrolled from the leaves (``X_leaf = c_j²``): ``d_j = 1/c_j²``,
``γ_q = −β_q`` and ``u_q`` the current ``v`` on ``q``.  Leaves have positive
weights, so ``A`` has full column rank and supports every workload.

**Haar wavelet** on ``n = 2^k`` cells: the rows ``r_q`` (the total and
``+1/−1`` halves of every dyadic block of size ``s``) are orthogonal with
``‖r_q‖² = s``, so ``(AᵀA)⁻¹ = Σ_q r_q r_qᵀ / s_q²``: ``d = 0``,
``γ_q = 1/s_q²``, ``u_q = r_q``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse

from .gram_ops import segment_sums
from .intervals import SegmentInverse, _check_partition, interval_variances
from .matrix import Sparse, as_matrix

__all__ = ["HaarWavelet", "IntervalTree"]


class _StructuredStrategy(Sparse):
    """A sparse strategy whose inverse Gram is a :class:`SegmentInverse` (hooks for :mod:`error`)."""

    def inverse(self) -> SegmentInverse:  # pragma: no cover - abstract
        raise NotImplementedError

    def workload_trace(self, W):
        """``tr(WᵀW (AᵀA)⁻¹)`` in ``O(n · levels)`` for structured workloads, else ``NotImplemented``.

        ``A`` has full column rank, so it supports every workload (module
        docstring); used by :func:`dpexplorer.core.error.unit_tse`.
        """
        if self.n != as_matrix(W).n:
            return NotImplemented
        value = self.inverse().trace(W)
        return NotImplemented if value is None else value

    def workload_row_variances(self, W):
        """``diag(W (AᵀA)⁻¹ Wᵀ)`` in ``O(m · levels)`` for interval workloads, else ``NotImplemented``."""
        return interval_variances(W, self.inverse())


class IntervalTree(_StructuredStrategy):
    """A weighted tree of intervals as a sparse strategy (H2, HB, GreedyH).

    Rows ``c_q·1_q`` for the nodes of ``levels`` (bottom-up), nodes of
    weight 0 left out; shape ``(#nodes with c_q ≠ 0, n)``.

    Parameters
    ----------
    n : int
        Number of cells.
    levels : list of (lo, hi, weights)
        Bottom-up; level 0 is every cell ``[j, j]`` with positive weights;
        every level partitions ``[0, n)`` into sorted intervals and every node
        is a union of nodes of the level below.
    name : str

    Raises
    ------
    ValueError
        If the levels are not such a tree.
    """

    def __init__(self, n: int, levels, name: str):
        levels = [(np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64),
                   np.asarray(c, dtype=float)) for lo, hi, c in levels]
        _check_tree(n, levels)
        self.tree_levels = levels
        rows = [(lo[c != 0], hi[c != 0], c[c != 0]) for lo, hi, c in levels]
        lo = np.concatenate([r[0] for r in rows])
        hi = np.concatenate([r[1] for r in rows])
        c = np.concatenate([r[2] for r in rows])
        lengths = hi - lo + 1
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        indices = np.arange(indptr[-1]) + np.repeat(lo - indptr[:-1], lengths)
        M = scipy.sparse.csr_array((np.repeat(c, lengths), indices, indptr), shape=(lo.size, n))
        super().__init__(M, name=name)
        self._inv: SegmentInverse | None = None

    def inverse(self) -> SegmentInverse:
        """``(AᵀA)⁻¹`` by the bottom-up Sherman-Morrison recursion (module docstring), O(n · levels)."""
        if self._inv is None:
            lo0, _, c0 = self.tree_levels[0]
            d = np.zeros(self.n)
            d[lo0] = 1.0 / c0**2
            v = d.copy()  # X_c⁻¹ 1 on every current node c
            out = []
            for lo, hi, c in self.tree_levels[1:]:
                M = segment_sums(v, lo, hi)
                c2 = c * c
                beta = c2 / (1.0 + c2 * M)
                out.append((lo, hi, v.copy(), -beta))
                v = v * np.repeat(1.0 / (1.0 + c2 * M), hi - lo + 1)
            self._inv = SegmentInverse(d, out)
        return self._inv


def _check_tree(n, levels):
    lo, hi, c = levels[0]
    if not (np.array_equal(lo, np.arange(n)) and np.array_equal(hi, lo)):
        raise ValueError("the bottom level of an interval tree must be every cell [j, j]")
    if np.any(c <= 0) or not np.all(np.isfinite(c)):
        raise ValueError("the cells of an interval tree need positive finite weights")
    for i, (lo, hi, c) in enumerate(levels):
        _check_partition(lo, hi, n, f"level {i} of an interval tree")
        if c.shape != lo.shape or np.any(c < 0) or not np.all(np.isfinite(c)):
            raise ValueError(f"level {i} needs one non-negative finite weight per node")
        if i:
            plo, phi = levels[i - 1][0], levels[i - 1][1]
            if not (_sorted_subset(lo, plo) and _sorted_subset(hi, phi)):
                raise ValueError(f"level {i} of an interval tree does not coarsen level {i - 1}")


def _sorted_subset(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether every entry of ``a`` is in the sorted array ``b`` (``np.isin`` by binary search:
    DAWA builds a tree on every run, and ``np.isin`` sorts both arrays each time)."""
    if b.size == 0:
        return a.size == 0
    idx = np.minimum(np.searchsorted(b, a), b.size - 1)
    return bool(np.array_equal(b[idx], a))


class HaarWavelet(_StructuredStrategy):
    """Privelet's Haar strategy on ``n = 2^k`` cells with its orthogonal-row inverse.

    Same rows as :func:`dpexplorer.strategies.wavelet` (the total, then every
    level of ``+1/−1`` dyadic halves, coarse to fine).
    """

    def __init__(self, matrix, name: str = "wavelet"):
        super().__init__(matrix, name=name)
        n = self.n
        if n & (n - 1):
            raise ValueError(f"the orthogonal Haar form needs n a power of two, got {n}")
        self._inv: SegmentInverse | None = None

    def inverse(self) -> SegmentInverse:
        """``Σ_q r_q r_qᵀ / s_q²`` (module docstring)."""
        if self._inv is None:
            n = self.n
            levels = [(np.zeros(1, dtype=np.int64), np.full(1, n - 1), np.ones(n),
                       np.full(1, 1.0 / n**2))]
            size = n
            j = np.arange(n)
            while size > 1:
                lo = np.arange(0, n, size)
                u = np.where((j % size) < size // 2, 1.0, -1.0)
                levels.append((lo, lo + size - 1, u, np.full(lo.size, 1.0 / size**2)))
                size //= 2
            self._inv = SegmentInverse(np.zeros(n), levels)
        return self._inv

