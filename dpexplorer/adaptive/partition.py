"""Partitions of an ordered domain into buckets, and DAWA's least-cost partition.

A partition ``B = {b_1, ..., b_k}`` splits the cells ``0..n-1`` into ``k``
contiguous buckets.  DAWA (Li, Hay, Miklau, Wang, PVLDB 2014, Sec. 3) scores
a bucket by its L1 deviation from uniformity plus the noise it will get::

    bcost(x, b) = dev(x, b) + 1/ε₂,   dev(x, b) = Σ_{j∈b} |x_j − b(x)/|b||   (Eq. 2)

and a partition by the sum of its bucket costs.  This module computes the
costs of all candidate buckets (lengths that are powers of two at every start
-- O(n log² n) -- or all intervals -- O(n² log n), App. A), finds the
least-cost partition by dynamic programming (Alg. 1, App. A), and provides
the uniform expansion (Def. 1) and the workload transformation ``Ŵ``
(Def. 4.4) that stage 2 of DAWA needs.  Nothing here is private: the private
partition adds noise to the costs inside
:meth:`dpexplorer.privacy.PrivateData.noisy_optimum` (see :mod:`dpexplorer.adaptive.dawa`).

Hot loops use numba.  Costs are computed with a Fenwick tree over the ranks
of the values: for a window with mean ``a``, ``dev = 2 (Σ_{x_j ≥ a} x_j − a·#{x_j ≥ a})``
(Sec. 3.2), the same quantity DevTree reads off a balanced search tree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse

from ..queries.matrix import Grouping, as_matrix

__all__ = [
    "Partition",
    "candidate_costs",
    "deviation",
    "least_cost_partition",
    "optimal_partition",
    "partition_cost",
]


# --------------------------------------------------------------- numba kernels
@numba.njit(cache=True)
def _fenwick_add(tree_c, tree_s, i, c, s):
    n = tree_c.size
    i += 1
    while i <= n:
        tree_c[i - 1] += c
        tree_s[i - 1] += s
        i += i & (-i)


@numba.njit(cache=True)
def _fenwick_prefix(tree_c, tree_s, i):
    """Count and sum of the entries with rank < i."""
    c = 0.0
    s = 0.0
    while i > 0:
        c += tree_c[i - 1]
        s += tree_s[i - 1]
        i -= i & (-i)
    return c, s


@numba.njit(cache=True)
def _window_devs(x, rank, sorted_vals, lengths):
    """dev of every window of every length in ``lengths`` (sliding windows, Alg. 3)."""
    n = x.size
    total = 0
    for L in lengths:
        total += n - L + 1
    lo = np.empty(total, np.int64)
    hi = np.empty(total, np.int64)
    dev = np.empty(total, np.float64)
    tree_c = np.zeros(n, np.float64)
    tree_s = np.zeros(n, np.float64)
    out = 0
    for L in lengths:
        tree_c[:] = 0.0
        tree_s[:] = 0.0
        wsum = 0.0
        for j in range(L):
            _fenwick_add(tree_c, tree_s, rank[j], 1.0, x[j])
            wsum += x[j]
        for i in range(n - L + 1):
            if i > 0:
                _fenwick_add(tree_c, tree_s, rank[i - 1], -1.0, -x[i - 1])
                _fenwick_add(tree_c, tree_s, rank[i + L - 1], 1.0, x[i + L - 1])
                wsum += x[i + L - 1] - x[i - 1]
            a = wsum / L
            r = np.searchsorted(sorted_vals, a)  # ranks >= r hold values >= a
            cb, sb = _fenwick_prefix(tree_c, tree_s, r)
            above = (wsum - sb) - a * (L - cb)
            d = 2.0 * above
            lo[out] = i
            hi[out] = i + L - 1
            dev[out] = d if d > 0.0 else 0.0
            out += 1
    return lo, hi, dev


@numba.njit(cache=True)
def _all_interval_devs(x, rank, sorted_vals):
    """dev of every interval [i, j], extending j for each start i."""
    n = x.size
    total = n * (n + 1) // 2
    lo = np.empty(total, np.int64)
    hi = np.empty(total, np.int64)
    dev = np.empty(total, np.float64)
    tree_c = np.zeros(n, np.float64)
    tree_s = np.zeros(n, np.float64)
    out = 0
    for i in range(n):
        tree_c[:] = 0.0
        tree_s[:] = 0.0
        wsum = 0.0
        for j in range(i, n):
            _fenwick_add(tree_c, tree_s, rank[j], 1.0, x[j])
            wsum += x[j]
            L = j - i + 1
            a = wsum / L
            r = np.searchsorted(sorted_vals, a)
            cb, sb = _fenwick_prefix(tree_c, tree_s, r)
            d = 2.0 * ((wsum - sb) - a * (L - cb))
            lo[out] = i
            hi[out] = j
            dev[out] = d if d > 0.0 else 0.0
            out += 1
    return lo, hi, dev


@numba.njit(cache=True)
def _dp(n, hi_order_lo, hi_order_hi, cost, starts_by_hi):
    """Least total cost of partitions of 0..j for every j; back-pointers to the chosen bucket."""
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    choice = np.full(n + 1, -1, np.int64)
    for j in range(n):
        for t in range(starts_by_hi[j], starts_by_hi[j + 1]):
            i = hi_order_lo[t]
            v = best[i] + cost[t]
            if v < best[j + 1]:
                best[j + 1] = v
                choice[j + 1] = t
    return best, choice


def _ranks(x: np.ndarray):
    order = np.argsort(x, kind="stable")
    rank = np.empty(x.size, np.int64)
    rank[order] = np.arange(x.size)
    return rank, x[order]


def _check_x(x) -> np.ndarray:
    x = np.asarray(x, dtype=float).ravel()
    if x.size == 0:
        raise ValueError("the data vector is empty")
    if not np.all(np.isfinite(x)):
        raise ValueError("the data vector has NaN or infinite entries")
    return x


def deviation(x, lo: int, hi: int) -> float:
    """``dev(x, [lo, hi]) = Σ_{j=lo}^{hi} |x_j − mean|`` (DAWA Eq. 2), by direct summation."""
    seg = np.asarray(x, dtype=float)[lo:hi + 1]
    return float(np.abs(seg - seg.mean()).sum())


def candidate_costs(x, epsilon2: float, candidates: str = "pow2"):
    """Costs ``bcost = dev + 1/ε₂`` of every candidate bucket (DAWA Sec. 3.2, Alg. 3).

    Parameters
    ----------
    x : array_like, shape (n,)
        Data vector (counts).
    epsilon2 : float
        Budget of DAWA's second stage; each bucket costs ``1/ε₂`` of noise.
    candidates : {"pow2", "dyadic", "all"}
        ``pow2``: intervals whose length is a power of two, at every start
        (``Σ_L (n − L + 1)`` buckets, O(n log² n)); ``dyadic``: those whose
        start is a multiple of their length (the nodes of a binary tree,
        fewer than ``2n``); ``all``: every interval (``n(n+1)/2`` buckets,
        O(n² log n)).

    Returns
    -------
    lo, hi : ndarray of int
        Inclusive bounds of every candidate bucket.
    cost : ndarray of float
        Its cost (counts).

    Raises
    ------
    ValueError
        For an empty/non-finite ``x``, ``ε₂ ≤ 0`` or an unknown ``candidates``.
    """
    x = _check_x(x)
    if not (np.isfinite(epsilon2) and epsilon2 > 0):
        raise ValueError(f"epsilon2 must be a positive number, got {epsilon2}")
    rank, sorted_vals = _ranks(x)
    if candidates in ("pow2", "dyadic"):
        lengths = []
        L = 1
        while L <= x.size:
            lengths.append(L)
            L *= 2
        lo, hi, dev = _window_devs(x, rank, sorted_vals, np.array(lengths, dtype=np.int64))
        if candidates == "dyadic":  # aligned: start a multiple of the length
            keep = lo % (hi - lo + 1) == 0
            lo, hi, dev = lo[keep], hi[keep], dev[keep]
    elif candidates == "all":
        lo, hi, dev = _all_interval_devs(x, rank, sorted_vals)
    else:
        raise ValueError(f"candidates must be 'pow2', 'dyadic' or 'all', got {candidates!r}")
    return lo, hi, dev + 1.0 / epsilon2


def least_cost_partition(n: int, lo, hi, cost) -> Partition:
    """The partition of ``0..n-1`` into candidate buckets with the least total cost.

    Dynamic programming over bucket ends (DAWA Alg. 1 LeastCostPartition, App. A):
    ``best[j+1] = min_{[i, j] candidate} best[i] + cost([i, j])``; linear in
    the number of candidates.

    Raises
    ------
    ValueError
        If the candidates do not cover a partition of the domain (every
        single cell must be a candidate for that to be guaranteed).
    """
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    cost = np.asarray(cost, dtype=float)
    order = np.argsort(hi, kind="stable")
    lo_s, hi_s = lo[order], hi[order]
    starts = np.searchsorted(hi_s, np.arange(n + 1), side="left").astype(np.int64)
    best, choice = _dp(n, lo_s, hi_s, cost[order], starts)
    if not np.isfinite(best[n]):
        raise ValueError("the candidate buckets do not cover a partition of the domain")
    edges = []
    j = n
    while j > 0:
        j = int(lo_s[choice[j]])
        edges.append(j)
    return Partition(np.array(sorted(edges) + [n], dtype=np.int64))


def partition_cost(x, partition: Partition, epsilon2: float) -> float:
    """``pcost(x, B) = Σ_b dev(x, b) + k/ε₂`` (DAWA Sec. 3.1)."""
    x = _check_x(x)
    return float(sum(deviation(x, a, b) for a, b in zip(partition.lo, partition.hi, strict=True))
                 + partition.k / epsilon2)


def optimal_partition(x, epsilon2: float, candidates: str = "pow2") -> tuple[Partition, float]:
    """The exact (non-private) least-cost partition and its cost.

    The "optimal partition" of DAWA Table 1: its number of buckets measures
    how hard a dataset is for data-dependent mechanisms (Sec. 5.2).  Not
    differentially private -- for analysis and teaching only.

    Returns
    -------
    (Partition, float)
        The partition and ``pcost`` (counts).
    """
    x = _check_x(x)
    lo, hi, cost = candidate_costs(x, epsilon2, candidates)
    p = least_cost_partition(x.size, lo, hi, cost)
    return p, partition_cost(x, p, epsilon2)


@dataclass(frozen=True)
class Partition:
    """Contiguous buckets of ``0..n-1``, given by their edges.

    Attributes
    ----------
    edges : ndarray of int, shape (k + 1,)
        ``edges[0] = 0 < edges[1] < ... < edges[k] = n``; bucket ``j`` is
        cells ``edges[j] .. edges[j+1] − 1``.
    """

    edges: np.ndarray

    def __post_init__(self):
        e = np.asarray(self.edges, dtype=np.int64)
        if e.ndim != 1 or e.size < 2 or e[0] != 0 or np.any(np.diff(e) <= 0):
            raise ValueError("edges must increase strictly from 0 to n")
        object.__setattr__(self, "edges", e)

    @property
    def n(self) -> int:
        return int(self.edges[-1])

    @property
    def k(self) -> int:
        """Number of buckets."""
        return int(self.edges.size - 1)

    @property
    def lo(self) -> np.ndarray:
        return self.edges[:-1]

    @property
    def hi(self) -> np.ndarray:
        return self.edges[1:] - 1

    @property
    def sizes(self) -> np.ndarray:
        """``|b_j|``, shape ``(k,)``."""
        return np.diff(self.edges)

    @property
    def bucket_of(self) -> np.ndarray:
        """Bucket index of every cell, shape ``(n,)``."""
        return np.repeat(np.arange(self.k), self.sizes)

    def bucket_grid(self, order=None, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """Bucket index of every cell of the data, in the data's own cell order and shape.

        The partition refers to cells in ``order`` (DAWA orders the cells of a
        2D domain along a Hilbert curve, Li et al. PVLDB 2014, Sec. 3.3): cell
        ``order[i]`` (C order of the data) is the partition's cell ``i``.

        Parameters
        ----------
        order : array_like of int, shape (n,), optional
            A permutation of ``0..n-1``; ``None`` for the identity.
        shape : tuple of int, optional
            The data's shape (product ``n``); default ``(n,)``.

        Returns
        -------
        numpy.ndarray of int, shape ``shape``

        Raises
        ------
        ValueError
            If ``order`` is not a permutation of ``0..n-1`` or ``shape`` has another size.
        """
        ids = self.bucket_of
        if order is not None:
            order = np.asarray(order, dtype=np.int64).ravel()
            if order.size != self.n or not np.array_equal(np.sort(order), np.arange(self.n)):
                raise ValueError(f"order must be a permutation of 0..{self.n - 1}")
            cells = np.empty_like(ids)
            cells[order] = ids
            ids = cells
        shape = (self.n,) if shape is None else tuple(int(s) for s in shape)
        if math.prod(shape) != self.n:
            raise ValueError(f"shape {shape} has {math.prod(shape):,} cells, the partition {self.n:,}")
        return ids.reshape(shape)

    def grouping(self) -> Grouping:
        """The ``(k, n)`` matrix ``P`` summing the cells of every bucket (``s = P x``)."""
        return Grouping(self.bucket_of, self.k)

    def counts(self, x) -> np.ndarray:
        """Bucket totals ``b_j(x)``, shape ``(k,)`` (public inputs only)."""
        return np.add.reduceat(np.asarray(x, dtype=float).ravel(), self.lo)

    def expand(self, s) -> np.ndarray:
        """Uniform expansion (DAWA Def. 1): ``x̂_i = s_j / |b_j|`` for ``i ∈ b_j``, shape ``(n,)``."""
        s = np.asarray(s, dtype=float)
        if s.shape != (self.k,):
            raise ValueError(f"s must have shape ({self.k},), got {s.shape}")
        return np.repeat(s / self.sizes, self.sizes)

    def transform(self, W) -> scipy.sparse.csr_array | np.ndarray:
        """``Ŵ = W Pᵀ diag(1/|b|)`` (DAWA Def. 4.4): ``ŵ_j = (1/|b_j|) Σ_{i∈b_j} q_i``, shape ``(m, k)``.

        Returns a scipy sparse array (rows of ``W`` materialised as sparse).
        By Prop. 4.6, ``W · expand(s) = Ŵ s``.
        """
        W = as_matrix(W)
        if W.n != self.n:
            raise ValueError(f"workload has {W.n} cells but the partition covers {self.n}")
        S = scipy.sparse.csr_array(W.sparse())
        P = self.grouping().sparse()
        return scipy.sparse.csr_array((S @ P.T) @ scipy.sparse.diags_array(1.0 / self.sizes))

    def transform_gram(self, G) -> np.ndarray:
        """``ŴᵀŴ = D⁻¹ P (WᵀW) Pᵀ D⁻¹`` from a dense Gram ``G: (n, n)``, shape ``(k, k)``."""
        G = np.asarray(G, dtype=float)
        R = np.add.reduceat(np.add.reduceat(G, self.lo, axis=0), self.lo, axis=1)
        inv = 1.0 / self.sizes
        return R * np.outer(inv, inv)


