"""Matrices of the form ``diag(d) + Σ_q γ_q u_q u_qᵀ`` with ``u_q`` supported on intervals.

The inverse Grams ``(AᵀA)⁻¹`` of the tree strategies (H2, HB, GreedyH, Haar
wavelet; :mod:`dpexplorer.queries.trees` derives them) have the form

    M = diag(d) + Σ_levels Σ_{q ∈ level} γ_q u_q u_qᵀ,                 (*)

every level a partition of the cells into intervals ``q`` and ``u_q``
supported on ``q``.  What the matrix mechanism's error needs from ``M``
(HDMM Prop. 4; ``dpexplorer/docs/matrix_mechanism.md``) then costs ``O(n)`` or ``O(m)``
per level, and no ``n × n`` matrix is formed:

* ``tr(WᵀW M) = Σ_j d_j (WᵀW)_jj + Σ_q γ_q u_qᵀ (WᵀW) u_q``, with the interval
  forms of a structured Gram (:mod:`dpexplorer.queries.gram_ops`);
* for an interval query ``r``, ``1_rᵀ M 1_r = Σ_{j ∈ r} d_j +
  Σ_q γ_q (Σ_{j ∈ r ∩ q} u_q(j))²``: on every level the nodes strictly inside
  ``r`` form a run (a prefix sum over the level's nodes) and at most two nodes
  are cut (within-node cumulative sums): ``O(levels)`` per query.  The
  Identity strategy is ``M = I`` (``d = 1``, no levels).
"""

from __future__ import annotations

import numba
import numpy as np

from .gram_ops import gram_operator, segmented_cumsum
from .matrix import (
    Diagonal,
    Identity,
    MatrixTooLargeError,
    Ones,
    Permutation,
    Product,
    VStack,
    Weighted,
    _Ranges,
    as_matrix,
)

__all__ = ["MAX_QUERIES", "SegmentInverse", "interval_variances"]

#: Most interval queries whose variances are computed at once (2**27: 1 GiB of answers).
MAX_QUERIES = 2**27


class SegmentInverse:
    """``(AᵀA)⁻¹`` in the form (*) of the module docstring.

    Parameters
    ----------
    d : ndarray, shape (n,)
        Diagonal part.
    levels : list of (lo, hi, u, gamma)
        Per level: node intervals ``[lo_q, hi_q]`` that partition ``[0, n)``,
        sorted (int arrays, shape ``(k,)``); the values of every ``u_q`` on
        its interval (one array ``u``, shape ``(n,)``); the coefficients
        ``gamma``, shape ``(k,)``.

    Raises
    ------
    ValueError
        If a level does not partition the cells or the shapes disagree.
    """

    def __init__(self, d: np.ndarray, levels):
        self.d = np.asarray(d, dtype=float)
        self.n = self.d.size
        self.levels = [(np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64),
                        np.asarray(u, dtype=float), np.asarray(g, dtype=float))
                       for lo, hi, u, g in levels]
        for i, (lo, hi, u, g) in enumerate(self.levels):
            _check_partition(lo, hi, self.n, f"level {i}")
            if u.shape != (self.n,) or g.shape != lo.shape:
                raise ValueError(f"level {i} needs u of shape ({self.n},) and one γ per node")
        self._tab = None

    @classmethod
    def identity(cls, n: int) -> SegmentInverse:
        """``I``: the inverse Gram of the Identity strategy."""
        return cls(np.ones(n), [])

    def matvec(self, v: np.ndarray) -> np.ndarray:
        """``(AᵀA)⁻¹ v`` for ``v: (n,)``, shape ``(n,)``: ``d∘v + Σ_q γ_q u_q (u_qᵀ v)``.

        Every level partitions the cells, so a level costs two passes over
        ``n`` values (the node sums ``u_qᵀ v`` by :func:`numpy.add.reduceat`
        on the sorted starts, then ``u`` scaled node by node): ``O(n · levels)``,
        no factorisation.  With ``v = Aᵀy`` it is the least-squares estimate
        ``x̂ = (AᵀA)⁻¹Aᵀy`` of a full-column-rank tree strategy (RECONSTRUCT).
        """
        v = np.asarray(v, dtype=float)
        if v.shape != (self.n,):
            raise ValueError(f"v must have shape ({self.n},), got {v.shape}")
        out = self.d * v
        for lo, hi, u, g in self.levels:
            node = np.add.reduceat(u * v, lo)  # u_qᵀ v for every node q of the level
            out += np.repeat(g * node, hi - lo + 1) * u
        return out

    def trace(self, W) -> float | None:
        """``tr(WᵀW (AᵀA)⁻¹)`` for a workload with a structured Gram, else ``None``."""
        op = gram_operator(W)
        if op is None or not op.intervals or op.n != self.n:
            return None
        total = float(np.dot(self.d, op.diag()))
        for lo, hi, u, g in self.levels:
            total += float(np.dot(g, op.interval_forms(u, lo, hi)))
        return total

    def interval_variances(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``1_rᵀ (AᵀA)⁻¹ 1_r`` for the intervals ``r = [a_i, b_i]``, shape ``(m,)``.

        On every level the nodes meeting ``r`` are ``first..last``; those
        strictly between lie inside ``r`` (a prefix sum over the level's nodes),
        the two ends may be cut (within-node cumulative sums): ``O(levels)`` per
        interval, in a numba loop.
        """
        a = np.ascontiguousarray(a, dtype=np.int64)
        b = np.ascontiguousarray(b, dtype=np.int64)
        cd = np.concatenate([[0.0], np.cumsum(self.d)])
        if not self.levels:
            return cd[b + 1] - cd[a]
        node_of, C, lo, hi, g, run, offset = self._tables()
        return _interval_variances(a, b, cd, node_of, C, lo, hi, g, run, offset)

    def _tables(self):
        """Per level: the node of every cell, within-node cumulative sums of ``u``, node data."""
        if self._tab is None:
            L, n = len(self.levels), self.n
            node_of = np.empty((L, n), dtype=np.int64)
            C = np.empty((L, n))
            offset = np.zeros(L + 1, dtype=np.int64)
            runs = []
            for i, (lo, hi, u, g) in enumerate(self.levels):
                node_of[i] = np.repeat(np.arange(lo.size), hi - lo + 1)
                C[i] = segmented_cumsum(u, lo, hi)
                tot = C[i][hi]
                runs.append(np.cumsum(g * tot * tot))  # runs[i][q] = Σ_{q' ≤ q} γ M²
                offset[i + 1] = offset[i] + lo.size
            cat = np.concatenate
            self._tab = (node_of, C, cat([lv[0] for lv in self.levels]),
                         cat([lv[1] for lv in self.levels]), cat([lv[3] for lv in self.levels]),
                         cat(runs), offset)
        return self._tab


@numba.njit(cache=True)
def _interval_variances(a, b, cd, node_of, C, lo, hi, g, run, offset):
    """Kernel of :meth:`SegmentInverse.interval_variances` (levels partition the cells)."""
    m = a.size
    out = np.empty(m)
    for r in range(m):
        s, e = a[r], b[r]
        v = cd[e + 1] - cd[s]
        for lv in range(node_of.shape[0]):
            o = offset[lv]
            f = node_of[lv, s]
            t = node_of[lv, e]
            head = C[lv, s - 1] if s > lo[o + f] else 0.0
            if f == t:
                p = C[lv, e] - head
                v += g[o + f] * p * p
            else:
                pf = C[lv, hi[o + f]] - head
                pl = C[lv, e]
                v += g[o + f] * pf * pf + g[o + t] * pl * pl
                if t > f + 1:  # nodes f+1 .. t-1 lie inside the interval
                    v += run[o + t - 1] - run[o + f]
        out[r] = v
    return out


def interval_variances(W, inv: SegmentInverse):
    """``diag(W (AᵀA)⁻¹ Wᵀ)`` for interval-type workloads, or ``NotImplemented``.

    Interval rows (All Range, Prefix, Width-k, explicit ranges), Identity
    (one interval per cell), Total/Ones (the whole domain), weights and
    unions of these; when ``inv`` is diagonal (no levels) also their permuted
    (``W·P``) and value-weighted (``W·diag(v)``) versions, since
    ``P diag(d) Pᵀ = diag(P d)`` and ``diag(v) diag(d) diag(v) = diag(v² d)``.
    Any other workload gives ``NotImplemented``.

    Raises
    ------
    MatrixTooLargeError
        If an interval block has more than :data:`MAX_QUERIES` rows (All Range
        above 16,383 cells).
    """
    W = as_matrix(W)
    if W.n != inv.n:
        return NotImplemented
    if isinstance(W, _Ranges):
        if W.m > MAX_QUERIES:
            raise MatrixTooLargeError(
                f"per-query variances of {W.name!r}: {W.m:,} queries, above the limit of "
                f"{MAX_QUERIES:,} (the answers alone would take {8 * W.m / 2**30:.0f} GiB)")
        lo, hi = W.ranges()
        return inv.interval_variances(lo, hi)
    if isinstance(W, Identity):
        j = np.arange(W.n)
        return inv.interval_variances(j, j)
    if isinstance(W, Ones):
        v = inv.interval_variances(np.zeros(1, dtype=np.int64), np.full(1, W.n - 1))
        return np.full(W.m, float(v[0]))
    if isinstance(W, Weighted):
        inner = interval_variances(W.base, inv)
        return inner if inner is NotImplemented else W.weight**2 * inner
    if isinstance(W, VStack):
        parts = [interval_variances(blk, inv) for blk in W.blocks]
        if any(p is NotImplemented for p in parts):
            return NotImplemented
        return np.concatenate(parts)
    if isinstance(W, Product) and isinstance(W.right, Permutation | Diagonal) and not inv.levels:
        R = W.right
        d = R.matvec(inv.d) if isinstance(R, Permutation) else R.v * R.v * inv.d
        return interval_variances(W.left, SegmentInverse(d, []))
    return NotImplemented


def _check_partition(lo, hi, n, what):
    if lo.size == 0 or lo[0] != 0 or hi[-1] != n - 1 or np.any(lo[1:] != hi[:-1] + 1) \
            or np.any(hi < lo):
        raise ValueError(f"{what} does not partition [0, {n}) into sorted intervals")
