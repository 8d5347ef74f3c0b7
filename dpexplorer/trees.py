"""Tree-structured strategies whose ``(AᵀA)⁻¹`` is a sum of interval-supported rank-one terms.

For H2, HB and GreedyH (a laminar family of weighted intervals: every level
partitions the cells and refines the level above, the bottom level is every
cell) and for Privelet's Haar wavelet, the inverse Gram has the form

    (AᵀA)⁻¹ = diag(d) + Σ_levels Σ_{q ∈ level} γ_q u_q u_qᵀ,          (*)

with ``u_q`` supported on the interval of node ``q``.  Everything the matrix
mechanism's error needs then costs ``O(n)`` or ``O(m)`` per level and no
``n × n`` matrix is formed:

* ``tr(WᵀW (AᵀA)⁻¹) = Σ_j d_j (WᵀW)_jj + Σ_q γ_q u_qᵀ (WᵀW) u_q`` with the
  interval forms of :mod:`dpexplorer.gram_ops` (HDMM Prop. 4);
* the variance of an interval query ``r``, ``1_rᵀ(AᵀA)⁻¹1_r =
  Σ_{j ∈ r} d_j + Σ_q γ_q (Σ_{j ∈ r ∩ q} u_q(j))²``: on every level the
  nodes inside ``r`` form a run (a prefix sum over the nodes) and at most two
  nodes are cut (within-node cumulative sums), ``O(levels)`` per query.

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

import numba
import numpy as np
import scipy.sparse

from .gram_ops import gram_operator, segment_sums, segmented_cumsum
from .matrix import Identity, Ones, Sparse, VStack, Weighted, _Ranges, as_matrix

__all__ = ["HaarWavelet", "IntervalTree", "SegmentInverse", "interval_variances"]


class SegmentInverse:
    """``(AᵀA)⁻¹`` in the form (*) of the module docstring.

    Parameters
    ----------
    d : ndarray, shape (n,)
        Diagonal part.
    levels : list of (lo, hi, u, gamma)
        Per level: node intervals ``[lo_q, hi_q]`` that partition ``[0, n)``,
        sorted (int arrays, shape ``(k,)``), the values ``u`` of every ``u_q`` on its interval
        (one array, shape ``(n,)``) and the coefficients ``gamma: (k,)``.
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
    unions of these; any other workload gives ``NotImplemented``.
    """
    W = as_matrix(W)
    if W.n != inv.n:
        return NotImplemented
    if isinstance(W, _Ranges):
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
    return NotImplemented


class _StructuredStrategy(Sparse):
    """A sparse strategy whose inverse Gram is a :class:`SegmentInverse` (hooks for :mod:`error`)."""

    def inverse(self) -> SegmentInverse:  # pragma: no cover - abstract
        raise NotImplementedError

    def workload_trace(self, W):
        """``tr(WᵀW (AᵀA)⁻¹)`` in ``O(n · levels)`` for structured workloads, else ``NotImplemented``.

        ``A`` has full column rank, so it supports every workload (module
        docstring); used by :func:`dpexplorer.error.unit_tse`.
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
        self._inv = None

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


def _check_partition(lo, hi, n, what):
    if lo.size == 0 or lo[0] != 0 or hi[-1] != n - 1 or np.any(lo[1:] != hi[:-1] + 1) \
            or np.any(hi < lo):
        raise ValueError(f"{what} does not partition [0, {n}) into sorted intervals")


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
            if not (np.all(np.isin(lo, plo)) and np.all(np.isin(hi, phi))):
                raise ValueError(f"level {i} of an interval tree does not coarsen level {i - 1}")


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
        self._inv = None

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

