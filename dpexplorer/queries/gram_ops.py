"""Fast products with structured workload Gram matrices ``G = WᵀW``.

Error formulas and strategy optimisers need ``G`` only through products
``G X`` with thin blocks, its diagonal, and quadratic forms ``uᵀ G u`` of
vectors supported on an interval.  For the 1D range workloads these cost
``O(n)`` per column instead of ``O(n²)``, and nothing ``n × n`` is formed:

* **All Range** and **Prefix** Grams are *semiseparable*:
  ``G_ij = a_{min(i,j)} · b_{max(i,j)}`` with ``a_i = i + 1, b_j = n − j`` (All
  Range: ``(WᵀW)_ij`` counts the intervals ``[lo, hi]`` with ``lo ≤ min(i,j)`` and
  ``hi ≥ max(i,j)``) and ``a_i = 1, b_j = n − j`` (Prefix: the prefixes
  ``[0, hi]`` with ``hi ≥ max(i,j)``).  Hence
  ``(G x)_i = b_i Σ_{j≤i} a_j x_j + a_i Σ_{j>i} b_j x_j`` (two cumulative sums)
  and ``uᵀ G u = Σ_j a_j b_j u_j² + 2 Σ_j b_j u_j Σ_{i<j} a_i u_i``.
* **explicit ranges** (Width-k, random intervals; ``m`` rows): ``G X = Wᵀ(W X)``
  by prefix sums, ``O((m + n) k)``; the interval forms are
  ``uᵀ G u = Σ_rows (Σ_{j ∈ row} u_j)²``.
* **Identity** (``G = I``), **Total / Ones** (``G = m·J``), weights (``c²G``),
  unions (``Σ G_j``, HDMM Eq. 3), permuted workloads (``PᵀGP``, HDMM Sec. 11.1)
  and value-weighted ones (``DGD``) combine these.

:func:`gram_operator` returns a :class:`GramOperator` for such a workload or
``None`` (dense explicit workloads keep the dense paths).
"""

from __future__ import annotations

import numba
import numpy as np

from .matrix import (
    AllRange,
    Diagonal,
    Identity,
    Ones,
    Permutation,
    Prefix,
    Product,
    VStack,
    Weighted,
    _Ranges,
    as_matrix,
)

__all__ = ["GramOperator", "gram_operator", "paired", "segment_sums", "segmented_cumsum"]


def segmented_cumsum(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sums of ``values`` restarted at every segment ``[lo_q, hi_q]``.

    Segments are disjoint and sorted; entries outside every segment are 0.
    Each segment is summed on its own (no subtraction of large running
    totals), so the sums are as accurate as the segment's own.
    ``values`` may be ``(n,)`` or ``(n, k)``.
    """
    values = np.asarray(values, dtype=float)
    lengths = hi - lo + 1
    out = np.zeros_like(values)
    if lo.size == 0:
        return out
    L = int(lengths.max())
    if lo.size * L <= 4 * values.shape[0] + 64:  # pad into (segments, L) and sum along rows
        cells = np.repeat(lo, lengths) + _ranks(lengths)
        pos = cells - np.repeat(lo, lengths)
        seg = np.repeat(np.arange(lo.size), lengths)
        pad = np.zeros((lo.size, L) + values.shape[1:])
        pad[seg, pos] = values[cells]
        np.cumsum(pad, axis=1, out=pad)
        out[cells] = pad[seg, pos]
        return out
    for s, e in zip(lo, hi, strict=True):  # few, very unequal segments
        out[s:e + 1] = np.cumsum(values[s:e + 1], axis=0)
    return out


def _ranks(lengths: np.ndarray) -> np.ndarray:
    """``[0, 1, ..., l_0 − 1, 0, 1, ..., l_1 − 1, ...]``."""
    total = int(lengths.sum())
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.arange(total) - starts


def segment_sums(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``Σ_{j ∈ [lo_q, hi_q]} values_j`` for disjoint sorted segments, shape ``(q,)``."""
    values = np.asarray(values, dtype=float)
    if lo.size == 0:
        return np.zeros(0)
    inside = np.zeros(values.shape[0] + 1)
    np.add.at(inside, lo, 1.0)
    np.add.at(inside, hi + 1, -1.0)
    masked = np.where(np.cumsum(inside)[:-1] > 0, values, 0.0)  # cells in gaps do not count
    return np.add.reduceat(masked, lo)


class GramOperator:
    """``G = WᵀW`` of a structured workload, as products and interval forms.

    Attributes
    ----------
    n : int
        Number of cells.
    intervals : bool
        Whether :meth:`interval_forms` is available (not for permuted workloads,
        whose Gram mixes cells far apart).
    self_similar : bool
        Whether the workload asked of pairs of adjacent cells (:func:`paired`)
        is the same kind of workload on half the cells: All Range, Prefix,
        Identity, Total and their weighted unions, which have no length scale
        of their own.  Explicit ranges (Width-k: a fixed width in cells),
        permuted and value-weighted workloads are not.  OPT0 starts large
        self-similar domains from the optimum on pairs of cells.
    """

    n: int
    intervals: bool = True
    self_similar: bool = False

    def matmat(self, X: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """``G X`` for ``X: (n, k)``, shape ``(n, k)``."""
        raise NotImplementedError

    def diag(self) -> np.ndarray:  # pragma: no cover - abstract
        """``diag(G)``, shape ``(n,)``."""
        raise NotImplementedError

    def rows(self, Y: np.ndarray) -> np.ndarray:
        """``Y G`` for ``Y: (k, n)``, shape ``(k, n)`` (row-major work for wide blocks)."""
        return self.matmat(np.asarray(Y, dtype=float).T).T

    def interval_forms(self, u: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """``u_qᵀ G u_q`` with ``u_q = u`` on ``[lo_q, hi_q]`` and 0 elsewhere, shape ``(q,)``.

        The intervals are disjoint and sorted by ``lo``.
        """
        raise NotImplementedError  # pragma: no cover - abstract

    def trace(self) -> float:
        """``tr(G) = ‖W‖_F²``."""
        return float(self.diag().sum())

    def relabelled(self) -> tuple[GramOperator, np.ndarray] | None:
        """``(inner, cols)`` when this is ``inner``'s Gram with its cells relabelled, else None.

        ``G = QᵀG_inner Q`` for a permutation ``Q``: a strategy ``A`` for ``inner``
        gives ``A[:, cols]`` for ``G``, with the same error (``tr(G (AᵀA)⁻¹)`` is
        invariant when the workload and the strategy are permuted together).
        """
        return None


class _Semiseparable(GramOperator):
    """``G_ij = a_{min(i,j)} b_{max(i,j)}`` (All Range, Prefix; module docstring)."""

    self_similar = True

    def __init__(self, a: np.ndarray, b: np.ndarray):
        self.a, self.b = a, b
        self.n = a.size

    def matmat(self, X):
        return _semiseparable_cols(np.ascontiguousarray(X, dtype=float), self.a, self.b)

    def diag(self):
        return self.a * self.b

    def rows(self, Y):
        return _semiseparable_rows(np.ascontiguousarray(Y, dtype=float), self.a, self.b)

    def interval_forms(self, u, lo, hi):
        u = np.asarray(u, dtype=float)
        before = segmented_cumsum(self.a * u, lo, hi) - self.a * u  # Σ_{i<j, i ∈ q} a_i u_i
        per_cell = self.b * u * (self.a * u + 2.0 * before)
        return segment_sums(per_cell, lo, hi)


@numba.njit(cache=True)
def _semiseparable_cols(X, a, b):
    """``G X`` for ``G_ij = a_min(i,j) b_max(i,j)``, ``X: (n, k)`` row-major: two passes over the rows."""
    n, k = X.shape
    out = np.empty((n, k))
    acc = np.zeros(k)
    for i in range(n):  # Σ_{j ≤ i} a_j x_j
        x, o, ai, bi = X[i], out[i], a[i], b[i]
        for c in range(k):
            t = acc[c] + ai * x[c]
            acc[c] = t
            o[c] = bi * t
    acc = np.zeros(k)
    for i in range(n - 1, -1, -1):  # Σ_{j > i} b_j x_j
        x, o, ai, bi = X[i], out[i], a[i], b[i]
        for c in range(k):
            o[c] += ai * acc[c]
            acc[c] += bi * x[c]
    return out


@numba.njit(cache=True)
def _semiseparable_rows(Y, a, b):
    """``Y G`` for ``G_ij = a_min(i,j) b_max(i,j)``: one forward and one backward pass per row."""
    k, n = Y.shape
    out = np.empty((k, n))
    for r in range(k):
        acc = 0.0
        for i in range(n):  # Σ_{j ≤ i} a_j y_j
            acc += a[i] * Y[r, i]
            out[r, i] = b[i] * acc
        acc = 0.0
        for i in range(n - 1, -1, -1):  # Σ_{j > i} b_j y_j
            out[r, i] += a[i] * acc
            acc += b[i] * Y[r, i]
    return out


class _RangesGram(GramOperator):
    """Explicit intervals ``[lo_r, hi_r]`` (``m`` rows): ``G = WᵀW`` through prefix sums."""

    def __init__(self, W: _Ranges):
        self.W = W
        self.n = W.n
        self.lo, self.hi = W.ranges()

    def matmat(self, X):  # rows(Y) is GramOperator's matmat(Yᵀ)ᵀ: G is symmetric
        return _ranges_cols(np.ascontiguousarray(X, dtype=float), self.lo, self.hi)

    def diag(self):
        return self.W.column_norms(1).astype(float)

    def interval_forms(self, u, lo, hi):
        """``Σ_r (Σ_{j ∈ r ∩ q} u_j)²`` per interval ``q``: ``O(m + n)``.

        A row ``r = [a, b]`` covers whole intervals ``q`` (each adding
        ``(Σ_q u)²``; counted with a difference array over the intervals) and
        cuts at most two (their partial sums come from cumulative sums).
        """
        u = np.asarray(u, dtype=float)
        k = lo.size
        C = segmented_cumsum(u, lo, hi)  # within-interval inclusive sums
        tot = C[hi]
        first = np.searchsorted(hi, self.lo, side="left")  # first interval with hi_q >= a
        last = np.searchsorted(lo, self.hi, side="right") - 1  # last interval with lo_q <= b
        meets = first <= last
        a, b, first, last = self.lo[meets], self.hi[meets], first[meets], last[meets]
        out = np.zeros(k)
        np.add.at(out, first, _partial_sums(C, lo, hi, first, a, b) ** 2)
        many = last > first
        np.add.at(out, last[many], _partial_sums(C, lo, hi, last[many], a[many], b[many]) ** 2)
        cnt = np.zeros(k + 1)  # intervals first+1 .. last-1 lie inside the row
        np.add.at(cnt, first[many] + 1, 1.0)
        np.add.at(cnt, last[many], -1.0)
        return out + np.cumsum(cnt)[:k] * tot * tot


def _ranges_cols(X, lo, hi):
    """``WᵀW X`` for ``W``'s rows the intervals ``[lo_r, hi_r]``, ``X: (n, k)`` row-major.

    ``W X`` by prefix sums (``S[hi + 1] − S[lo]``), then ``Wᵀ Z`` by a
    difference array (``+z`` at ``lo``, ``−z`` at ``hi + 1``) and a running
    sum down the cells: ``O((n + m) k)``, in three numba passes.  The numpy
    form (cumsum, gather, a sparse product, cumsum) made OPT0 on Width 32 at
    n = 4096 spend 28.4 s of a 35.6 s restart in the objective; with these
    passes 7.0 s of 15.0 s, same iterates (``benchmarks/bench_opt0.py 4096
    --workload width32``).  One product at k = 256 takes 1.6-3 ms, or up to
    10 ms when the allocator hands out fresh pages for every call.
    """
    D = _range_differences(_prefix_rows(X), lo, hi)
    return _running_sum(D)[: X.shape[0]]


@numba.njit(cache=True)
def _prefix_rows(X):
    """``S: (n + 1, k)`` with ``S[i] = Σ_{j<i} X[j]``."""
    n, k = X.shape
    S = np.empty((n + 1, k))
    S[0] = 0.0
    for i in range(n):
        s0, s1, x = S[i], S[i + 1], X[i]
        for c in range(k):
            s1[c] = s0[c] + x[c]
    return S


@numba.njit(cache=True)
def _range_differences(S, lo, hi):
    """The difference array of ``Wᵀ (W X)``: ``z_r = S[hi_r + 1] − S[lo_r]`` added at ``lo_r``, taken at ``hi_r + 1``."""
    D = np.zeros(S.shape)
    for r in range(lo.size):
        a, b = lo[r], hi[r] + 1
        sa, sb, da, db = S[a], S[b], D[a], D[b]
        for c in range(S.shape[1]):
            z = sb[c] - sa[c]
            da[c] += z
            db[c] -= z
    return D


@numba.njit(cache=True)
def _running_sum(D):
    """``D`` summed down its rows, in place."""
    for i in range(1, D.shape[0]):
        d0, d1 = D[i - 1], D[i]
        for c in range(D.shape[1]):
            d1[c] += d0[c]
    return D


def _partial_sums(C, lo, hi, q, a, b):
    """``Σ u_j`` over ``[a, b] ∩ [lo_q, hi_q]`` from within-interval cumulative sums ``C`` (0 if empty)."""
    s, e = np.maximum(a, lo[q]), np.minimum(b, hi[q])
    head = np.where(s > lo[q], C[np.maximum(s - 1, 0)], 0.0)
    return np.where(s <= e, C[np.maximum(e, 0)] - head, 0.0)


class _IdentityGram(GramOperator):
    self_similar = True

    def __init__(self, n):
        self.n = n

    def matmat(self, X):
        return np.array(X, dtype=float, copy=True)

    rows = matmat

    def diag(self):
        return np.ones(self.n)

    def interval_forms(self, u, lo, hi):
        u = np.asarray(u, dtype=float)
        return segment_sums(u * u, lo, hi)


class _OnesGram(GramOperator):
    """``m·J`` (``m`` copies of the Total query)."""

    self_similar = True

    def __init__(self, n, m):
        self.n, self.m = n, float(m)

    def matmat(self, X):
        X = np.asarray(X, dtype=float)
        return np.repeat(self.m * X.sum(axis=0, keepdims=True), self.n, axis=0)

    def rows(self, Y):
        Y = np.asarray(Y, dtype=float)
        return np.repeat(self.m * Y.sum(axis=1, keepdims=True), self.n, axis=1)

    def diag(self):
        return np.full(self.n, self.m)

    def interval_forms(self, u, lo, hi):
        return self.m * segment_sums(np.asarray(u, dtype=float), lo, hi) ** 2


class _Scaled(GramOperator):
    def __init__(self, inner: GramOperator, c2: float):
        self.inner, self.c2 = inner, c2
        self.n, self.intervals = inner.n, inner.intervals
        self.self_similar = inner.self_similar

    def matmat(self, X):
        return self.c2 * self.inner.matmat(X)

    def rows(self, Y):
        return self.c2 * self.inner.rows(Y)

    def diag(self):
        return self.c2 * self.inner.diag()

    def interval_forms(self, u, lo, hi):
        return self.c2 * self.inner.interval_forms(u, lo, hi)


class _Sum(GramOperator):
    def __init__(self, parts):
        self.parts = parts
        self.n = parts[0].n
        self.intervals = all(p.intervals for p in parts)
        self.self_similar = all(p.self_similar for p in parts)

    def matmat(self, X):
        return sum(p.matmat(X) for p in self.parts)

    def rows(self, Y):
        return sum(p.rows(Y) for p in self.parts)

    def diag(self):
        return sum(p.diag() for p in self.parts)

    def interval_forms(self, u, lo, hi):
        return sum(p.interval_forms(u, lo, hi) for p in self.parts)


class _Permuted(GramOperator):
    """``PᵀGP`` with ``(P x)_i = x[perm[i]]``."""

    intervals = False

    def __init__(self, inner: GramOperator, P: Permutation):
        self.inner, self.P = inner, P
        self.n = inner.n

    def matmat(self, X):
        X = np.asarray(X, dtype=float)
        return self.inner.matmat(X[self.P.perm])[self.P.inverse]

    def rows(self, Y):
        Y = np.asarray(Y, dtype=float)
        return self.inner.rows(Y[:, self.P.perm])[:, self.P.inverse]

    def diag(self):
        return self.inner.diag()[self.P.inverse]

    def relabelled(self):
        return self.inner, self.P.inverse


class _DiagScaled(GramOperator):
    """``D G D`` with ``D = diag(v)``."""

    def __init__(self, inner: GramOperator, v: np.ndarray):
        self.inner, self.v = inner, v
        self.n, self.intervals = inner.n, inner.intervals

    def matmat(self, X):
        X = np.asarray(X, dtype=float)
        return self.v[:, None] * self.inner.matmat(self.v[:, None] * X)

    def rows(self, Y):
        return self.inner.rows(np.asarray(Y, dtype=float) * self.v) * self.v

    def diag(self):
        return self.v**2 * self.inner.diag()

    def interval_forms(self, u, lo, hi):
        return self.inner.interval_forms(self.v * np.asarray(u, dtype=float), lo, hi)


class _Paired(GramOperator):
    """``PᵀGP``: the Gram on pairs of adjacent cells (see :func:`paired`)."""

    def __init__(self, inner: GramOperator):
        if not inner.intervals:
            raise ValueError("pairing adjacent cells needs a Gram whose cells are ordered "
                             "(interval forms); a permuted workload has none")
        self.inner, self.fine = inner, inner.n
        self.n, self.self_similar = (inner.n + 1) // 2, inner.self_similar
        self._diag = None

    def _spread(self, X):
        """``P X``: every coarse row copied to its (one or two) cells, shape ``(fine, k)``."""
        return np.repeat(np.asarray(X, dtype=float), 2, axis=0)[: self.fine]

    def _gather(self, Y):
        """``Pᵀ Y``: the rows of each pair added, shape ``(n, k)``."""
        if self.fine % 2:
            Y = np.concatenate([Y, np.zeros((1, Y.shape[1]))])
        return Y.reshape(self.n, 2, Y.shape[1]).sum(axis=1)

    def matmat(self, X):
        return self._gather(self.inner.matmat(self._spread(X)))

    def diag(self):
        if self._diag is None:  # (PᵀGP)_ii = 1ᵀ G 1 over the pair's cells: interval forms
            lo = np.arange(self.n)
            self._diag = self.interval_forms(np.ones(self.n), lo, lo)
        return self._diag

    def interval_forms(self, u, lo, hi):  # u on [lo, hi] of pairs = u spread on their cells
        lo, hi = np.asarray(lo), np.asarray(hi)
        u = np.repeat(np.asarray(u, dtype=float), 2)[: self.fine]
        return self.inner.interval_forms(u, 2 * lo, np.minimum(2 * hi + 1, self.fine - 1))


def paired(G: GramOperator) -> GramOperator:
    """The Gram ``PᵀGP`` of the workload on pairs of adjacent cells, ``⌈n/2⌉ × ⌈n/2⌉``.

    ``P: (n, ⌈n/2⌉)`` adds cells ``2i`` and ``2i + 1`` into coarse cell ``i``
    (the last cell alone when ``n`` is odd), so ``W·P`` is the workload asked
    of the coarser histogram and ``PᵀGP = (WP)ᵀ(WP)`` its Gram.  Products cost
    one product with ``G`` and ``O(n k)`` more; nothing ``n × n`` is formed.
    The OPT0 optimiser starts large domains from a solution on pairs of cells
    (:func:`dpexplorer.strategies.templates.opt0`).

    Parameters
    ----------
    G : GramOperator
        A Gram whose cells are ordered (``G.intervals``).

    Returns
    -------
    GramOperator
        ``n = ⌈G.n / 2⌉``, with interval forms.

    Raises
    ------
    ValueError
        If ``G`` has no interval forms (a permuted workload: adjacent cells
        there are not neighbours in the workload's order).
    """
    return _Paired(G)


def gram_operator(W) -> GramOperator | None:
    """A fast :class:`GramOperator` for ``WᵀW``, or ``None`` if ``W`` has no such structure.

    Structured: All Range, Prefix, explicit ranges (Width-k, random
    intervals), Identity, Total/Ones, and weighted forms, unions, permuted
    (``W·P``) and value-weighted (``W·diag(v)``) versions of them.  Dense and
    sparse explicit workloads, Kronecker products and anything else give
    ``None``.

    Parameters
    ----------
    W : Matrix, shape (m, n)
    """
    W = as_matrix(W)
    if isinstance(W, AllRange):
        i = np.arange(W.n, dtype=float)
        return _Semiseparable(i + 1.0, W.n - i)
    if isinstance(W, Prefix):
        i = np.arange(W.n, dtype=float)
        return _Semiseparable(np.ones(W.n), W.n - i)
    if isinstance(W, _Ranges):
        return _RangesGram(W)
    if isinstance(W, Identity):
        return _IdentityGram(W.n)
    if isinstance(W, Ones):
        return _OnesGram(W.n, W.m)
    if isinstance(W, Weighted):
        inner = gram_operator(W.base)
        return None if inner is None else _Scaled(inner, W.weight**2)
    if isinstance(W, VStack):
        parts = [gram_operator(b) for b in W.blocks]
        return None if any(p is None for p in parts) else _Sum(parts)
    if isinstance(W, Product) and isinstance(W.right, Permutation | Diagonal):
        inner = gram_operator(W.left)
        if inner is None:
            return None
        if isinstance(W.right, Permutation):
            return _Permuted(inner, W.right)
        return _DiagScaled(inner, W.right.v)
    return None

