"""Online tree mechanisms for continual counting: the binary tree with Honaker's online estimator,
and the k-ary tree with subtraction for pure ε.

Both measure the *node queries* of a tree over the ``T`` steps (a strategy ``A: (nodes, T)``,
node ``v`` the count of an interval of steps ``[lo_v, hi_v]``) and answer the running total
through a decoder ``B: (T, nodes)`` of their own with ``B A = L`` (``L`` the prefix matrix), not
through least squares over the whole tree (which is what H2 does: its answer at step ``t``
mixes in nodes that close later, so it is not a streaming release).  The variance of answer
``t`` is ``v · Δ_p(A)² · Σ_v B[t, v]²`` (every node measured with the same noise; ``v`` the
noise's variance per unit sensitivity, ``Δ_p(A)`` the largest column norm of ``A``): ``B y =
L x + B z`` is unbiased because ``B A = L``, and independent node noises of variance ``σ²`` give
``Cov(B z) = σ² B Bᵀ`` (the decoder form of the error of :mod:`dpexplorer.core.error`, whose
hooks take ``‖B‖_F²`` for a strategy answering through its own ``B``;
``dpexplorer/docs/matrix_mechanism.md``).  Both hooks (``workload_trace``,
``workload_row_variances``) and :meth:`OnlineTree.answer` use ``B`` on the running total;
everything costs ``O(T log T)`` and never builds a ``T × T`` matrix.

``tree_online`` -- the binary tree mechanism (Dwork, Naor, Pitassi & Rothblum, "Differential
privacy under continual observation", STOC 2010; Chan, Shi & Song, "Private and continual
release of statistics", ACM TISSEC 14(3), 2011, the Binary Mechanism) with Honaker's online
estimator (Honaker, "Efficient use of differentially private binary trees", TPDP 2015, the
bottom-up pass).  Nodes: every dyadic interval ``[j 2^l, (j+1) 2^l − 1]`` that lies inside
``[0, T)``, levels ``l = 0 .. ⌊log₂ T⌋`` -- the binary tree over ``2^⌈log₂ T⌉`` steps cut at
``T``: a node is kept when it closes by the last step, so ``T`` need not be a power of two and
answer ``t`` does not depend on ``T``.  Each cell lies in one node per level:
``Δ₁(A) = ⌊log₂ T⌋ + 1`` and ``Δ₂(A) = √(⌊log₂ T⌋ + 1)``.  With unit node noise, a leaf's
estimate is its measurement (variance ``v₀ = 1``); a node at level ``l`` combines its
measurement ``y`` (variance 1) with the sum ``s`` of its two children's estimates (variance
``2 v_{l−1}``) by inverse variance, ``ŷ = v_l y + (1 − v_l) s`` with
``v_l = 2 v_{l−1} / (1 + 2 v_{l−1}) = 2^l / (2^{l+1} − 1)`` (induction: ``v_{l+1} = 2·2^l /
(2^{l+1} − 1 + 2^{l+1})``), which falls to 1/2 on tall trees.  The running total at step ``t``
adds the estimates of the dyadic decomposition of ``[0, t]`` -- one node at level ``l`` for
every bit ``l`` set in ``t + 1`` -- all closed by ``t``, and independent (disjoint subtrees):
its variance is ``Σ_{l : bit l of t+1} v_l`` (in units of one node's noise variance).  The
plain binary mechanism (the same nodes, unweighted) has ``popcount(t + 1)``; least squares over
the whole tree (H2, not online) is never worse than either (Gauss-Markov).

``kary_tree`` -- the k-ary tree with subtraction (Andersson, Pagh, Steiner & Torkamani, "Count
on your elders: Laplace vs Gaussian noise", FORC 2025, LIPIcs 329, paper 10, Sec. 3 and
Theorem 1; first circulated as "Improved counting under continual observation with pure
differential privacy", arXiv:2408.07021).  ``k`` odd; the count ``N = t + 1`` is written in the
balanced base-``k`` system, ``N = Σ_{l<h} e_l k^l`` with digits
``e_l ∈ {−(k−1)/2, …, (k−1)/2}``, and ``h = min{h ≥ 1 : (k^h − 1)/2 ≥ T}`` levels, so that
every ``N ≤ T`` has such a representation.  With ``N_l = Σ_{l' ≥ l} e_{l'} k^{l'}`` (the digits
from the top down to ``l``), the prefix ``[0, N)`` is the telescoping sum of the intervals between
``N_{l+1}`` and ``N_l``: ``e_l`` whole level-``l`` nodes (aligned blocks of ``k^l`` steps),
*added* when ``e_l > 0`` (the first ``e_l`` children of the level-``(l+1)`` block starting at
``N_{l+1}``: the younger siblings following the blocks already counted) and *subtracted* when
``e_l < 0`` (the last ``|e_l|`` children of the level-``(l+1)`` block ending at ``N_{l+1}``:
the levels above counted past ``N``, and these blocks take the excess back).  Answer ``t``
uses ``Σ_l |e_l|`` nodes, at most ``h (k − 1)/2``; ``Δ₁(A) = h``.  Over a whole balanced
range every digit is uniform on its ``k`` values, ``E|e_l| = (k² − 1)/(4k)``, so at
``T = (k^h − 1)/2`` the mean number of nodes per answer is exactly
``h (k² − 1)/(4k) · k^h/(k^h − 1)`` (``N`` and ``−N`` use as many nodes); the mean variance
under Laplace noise is ``≈ (k² − 1)/(2k ln³ k) · ln³ T / ε²``, least at ``k = 19`` among odd
``k`` (``DEFAULT_K``), about 4 times below the binary tree with Honaker's online estimator
(``ln³ T / (2 ln³ 2 ε²)``): the factor "about 4" of the paper's abstract.  The tree is cut at
``T``: a block reaching past the last step keeps its part inside ``[0, T)``, and a block
entirely after it (no data can reach it) is neither measured nor used.

**Online, and in which sense.**  ``tree_online`` is online in the strict sense: answer ``t`` is
a function of the nodes closed by step ``t`` (its decoder row has no entry on a later node).
``kary_tree`` is **not** registered as online: ``B A = L``, so its answer at step ``t`` is
``L_t x + B_t z`` -- the exact running total up to ``t`` plus a fixed combination of node noises
-- and depends on the counts of steps ``0..t`` only (as least squares over any tree does), but
the blocks counting past ``N`` and those taking the excess back close after ``t`` (some lie
entirely after it; their data parts cancel), so the answer is not computed from the
measurements taken by step ``t``.  That is what a release whose later counts may depend on
earlier answers needs, and what the registry's ``online`` fact means; the explorer compares the
k-ary tree (its error is exact) and releases it at once, not step by step.  No strictly online subtraction
can help on a k-ary tree: aligned blocks nest, so every block inside ``[0, N)`` lies in exactly
one maximal block of the standard decomposition of ``[0, N)``; a signed combination of closed
blocks equal to one on ``[0, N)`` restricts to a combination equal to one on each maximal block,
which costs at least one node, so the standard base-``k`` decomposition (``digit sum of N``
nodes) is already the cheapest among those using closed nodes only.

For a causal workload other than (a multiple of) the running total over the same ``T`` steps,
the hooks return ``NotImplemented`` and :meth:`OnlineTree.answer` answers by least squares over
the tree (the error module's fallback: the two agree), which is not a streaming release.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse

from ..core import registry
from ..core.reconstruct import reconstruct
from ..privacy.noise import NoiseModel
from ..queries.matrix import Matrix, Prefix, Sparse, _check_cells, _check_limit, as_matrix
from . import workload

__all__ = ["DEFAULT_K", "OnlineTree", "OnlineBinaryTree", "KaryTree", "tree_online", "kary_tree",
           "honaker_variances", "balanced_digits", "kary_height"]

#: Branching factor of ``kary_tree`` by default: the odd ``k`` minimising the leading constant
#: ``(k² − 1)/(2k ln³ k)`` of the mean variance (module docstring; Andersson, Pagh, Steiner &
#: Torkamani, FORC 2025, abstract: "using k = 19").
DEFAULT_K = 19

#: Largest branching factor accepted (digits are computed in 64-bit integers; any ``k > 2T`` is
#: the flat one-level tree, Identity).
_MAX_K = 2**31 - 1


def _steps(T, what: str) -> int:
    return _check_cells(T, f"{what}: T (the number of steps)")


# ====================================================================== base class
class OnlineTree(Sparse):
    """Node queries of a tree over ``T`` steps, answered by an online decoder of its own.

    A sparse 0/1 strategy, shape ``(nodes, T)``: node ``v`` counts the steps ``lo[v] .. hi[v]``
    (inclusive), nodes ordered by level (leaves first), then by position.  Subclasses give the
    decoder ``B: (T, nodes)`` (``B A = L``, ``L`` the prefix matrix) three ways: applied to
    noisy node answers (:meth:`_online_prefix`), as the squared norms of its rows
    (:meth:`step_variances`), and as a dense matrix for small ``T`` (:meth:`decoder`).

    Attributes
    ----------
    steps : int
        ``T``.
    node_lo, node_hi : ndarray of int, shape (nodes,)
        First and last step of every node's interval; node ``v`` is complete (*closed*) at
        step ``node_hi[v]``.
    node_level : ndarray of int, shape (nodes,)
        Level of every node (0: single steps).
    levels : int
        Number of levels, the L1 sensitivity of the strategy (every step lies in one node per
        level).
    """

    def __init__(self, T: int, lo: np.ndarray, hi: np.ndarray, level: np.ndarray, name: str):
        lengths = hi - lo + 1
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        indices = np.arange(indptr[-1]) + np.repeat(lo - indptr[:-1], lengths)
        M = scipy.sparse.csr_array((np.ones(indptr[-1]), indices, indptr), shape=(lo.size, T))
        super().__init__(M, name=name)
        self.steps = int(T)
        self.node_lo, self.node_hi, self.node_level = lo, hi, level
        for a in (lo, hi, level):
            a.setflags(write=False)
        self.levels = int(level.max()) + 1
        counts = np.bincount(level, minlength=self.levels)
        #: index of the first node of every level (and the number of nodes at the end)
        self._level_start = np.concatenate([[0], np.cumsum(counts)])

    # ------------------------------------------------------------ subclass parts
    def _online_prefix(self, Y: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """``B Y`` for node answers ``Y: (nodes, k)``, shape ``(T, k)``."""
        raise NotImplementedError

    def step_variances(self) -> np.ndarray:  # pragma: no cover - abstract
        """``Σ_v B[t, v]²`` for every step, shape ``(T,)``: the variance of answer ``t`` in units
        of one node's noise variance."""
        raise NotImplementedError

    def _decoder(self) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------------ public
    def decoder(self, max_entries: int | None = None) -> np.ndarray:
        """The decoder ``B`` as a dense array, shape ``(T, nodes)``, for small ``T``.

        Row ``t`` holds the weight of every node in the answer at step ``t``; ``B A = L``.

        Raises
        ------
        MatrixTooLargeError
            If ``T · nodes`` exceeds ``max_entries`` (default ``DENSE_LIMIT``).
        """
        _check_limit((self.steps, self.m), max_entries, f"decoder of {self.name!r}")
        return self._decoder()

    def _prefix_weight(self, W: Matrix) -> float | None:
        """``c`` when ``W`` is ``c ·`` the ``T × T`` running total (``Prefix``), else None."""
        c, W = workload.unweighted(W)
        if type(W) is Prefix and W.shape == (self.steps, self.steps):
            return c
        return None

    def answer(self, W, y) -> np.ndarray:
        """The answers to ``W`` from the noisy node answers ``y``: the online estimates on the running total.

        For ``W = c · L`` (the prefix workload over the ``T`` steps, e.g.
        :func:`~dpexplorer.streaming.workload.continual`) the answer at step ``t`` is
        ``c · (B y)_t``, the decoder of the module docstring.  For any other workload over the
        ``T`` steps: ``W x̂`` with ``x̂ = A⁺ y`` (least squares over the whole tree, not a
        streaming release), which is what the error module's fallback assumes.

        Parameters
        ----------
        W : Matrix or array, shape (m, T)
        y : array, shape (nodes,)
            Noisy node answers (counts).

        Returns
        -------
        ndarray, shape (m,)
            Counts.

        Raises
        ------
        ValueError
            If ``W`` is not over ``T`` cells, or ``y`` is not a finite vector of one answer per node.
        """
        W = as_matrix(W)
        if W.n != self.steps:
            raise ValueError(f"{self.name}: the workload has {W.n} cells but the tree is over "
                             f"{self.steps} steps")
        try:
            y = np.asarray(y, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"{self.name}: y must be numbers (the noisy node answers), "
                             f"got {type(y).__name__}") from None
        if y.shape != (self.m,):
            raise ValueError(f"{self.name}: y must have one answer per node, shape ({self.m},), "
                             f"got {y.shape}")
        if not np.isfinite(y).all():
            raise ValueError(f"{self.name}: y must be finite (no NaN or inf)")
        c = self._prefix_weight(W)
        if c is None:
            return W.matvec(reconstruct(self, y))
        return c * self._online_prefix(y[:, None])[:, 0]

    def workload_trace(self, W):
        """``‖B_W‖_F² = c² Σ_t Σ_v B[t, v]²`` for ``W = c · L`` (the running total), else
        ``NotImplemented``.

        The total squared error of :meth:`answer` per unit noise variance and squared
        sensitivity (:func:`dpexplorer.core.error.unit_tse` multiplies by ``Δ_p(A)²``).
        """
        c = self._prefix_weight(as_matrix(W))
        if c is None:
            return NotImplemented
        return float(c * c * self.step_variances().sum())

    def workload_row_variances(self, W):
        """``c² Σ_v B[t, v]²`` for every step ``t``, shape ``(T,)``, for ``W = c · L``; else
        ``NotImplemented``.

        The per-step variance of :meth:`answer` per unit noise variance and squared sensitivity
        (:func:`dpexplorer.core.error.per_query_variance` multiplies by ``v · Δ_p(A)²``).
        """
        c = self._prefix_weight(as_matrix(W))
        if c is None:
            return NotImplemented
        return c * c * self.step_variances()


# ===================================================================== binary tree
def honaker_variances(levels: int) -> np.ndarray:
    """Variance of Honaker's online estimate of a node at every level, shape ``(levels,)``.

    ``v_l = 2^l / (2^{l+1} − 1)`` in units of one node's noise variance: the inverse-variance
    combination of a node's measurement (variance 1) with its two children's estimates
    (variance ``2 v_{l−1}``), ``v_0 = 1`` (Honaker, TPDP 2015, bottom-up pass; the closed form by
    induction, module docstring).  The weight of the node's own measurement is ``v_l`` and that
    of its children's sum ``1 − v_l``.

    Raises
    ------
    ValueError
        If ``levels`` is not a whole number >= 1.
    """
    if isinstance(levels, bool) or not isinstance(levels, numbers.Integral) or levels < 1:
        raise ValueError(f"levels must be a whole number >= 1, got {levels!r}")
    l = np.arange(int(levels), dtype=float)
    return np.exp2(l) / (np.exp2(l + 1.0) - 1.0)


class OnlineBinaryTree(OnlineTree):
    """The binary tree over ``T`` steps with Honaker's online estimator (see :func:`tree_online`)."""

    def __init__(self, T: int, name: str = "tree_online"):
        T = _steps(T, "tree_online")
        L = T.bit_length()  # levels 0 .. ⌊log2 T⌋
        lo, hi, lev = [], [], []
        for l in range(L):
            size = 1 << l
            start = np.arange(T >> l, dtype=np.int64) * size
            lo.append(start)
            hi.append(start + size - 1)
            lev.append(np.full(start.size, l, dtype=np.int64))
        super().__init__(T, np.concatenate(lo), np.concatenate(hi), np.concatenate(lev), name)
        self.node_variances = honaker_variances(self.levels)
        self.node_variances.setflags(write=False)

    def _online_prefix(self, Y):
        T, v = self.steps, self.node_variances
        N = np.arange(1, T + 1)
        out = np.zeros((T, Y.shape[1]))
        est = None
        for l in range(self.levels):
            yl = Y[self._level_start[l]:self._level_start[l + 1]]
            if l == 0:
                est = yl
            else:
                children = est[0:2 * yl.shape[0]:2] + est[1:2 * yl.shape[0]:2]
                est = v[l] * yl + (1.0 - v[l]) * children
            used = ((N >> l) & 1) == 1  # bit l of t + 1: node (t+1 >> l) − 1 of level l
            out[used] += est[(N[used] >> l) - 1]
        return out

    def step_variances(self):
        N = np.arange(1, self.steps + 1)
        out = np.zeros(self.steps)
        for l, vl in enumerate(self.node_variances):
            out += vl * ((N >> l) & 1)
        return out

    def _decoder(self):
        """Row ``t``: for each node of the decomposition (level ``l``), weight
        ``w_m Π_{i=m+1..l} (1 − w_i)`` on each of its descendants at level ``m`` (``w_i = v_i``,
        ``w_0 = 1``)."""
        T, v = self.steps, self.node_variances
        w = v.copy()
        B = np.zeros((T, self.m))
        N = np.arange(1, T + 1)
        for l in range(self.levels):
            rows = np.flatnonzero((N >> l) & 1)
            j = (N[rows] >> l) - 1
            for m_ in range(l + 1):
                weight = w[m_] * np.prod(1.0 - w[m_ + 1:l + 1])
                span = 1 << (l - m_)
                cols = self._level_start[m_] + j[:, None] * span + np.arange(span)[None, :]
                B[rows[:, None], cols] += weight
        return B


def tree_online(T: int) -> OnlineBinaryTree:
    """The binary tree mechanism's strategy with Honaker's online estimator as its decoder.

    Nodes: every dyadic interval ``[j 2^l, (j+1) 2^l − 1]`` inside ``[0, T)``, levels
    ``0 .. ⌊log₂ T⌋`` (``T`` need not be a power of two: the tree over ``2^⌈log₂ T⌉`` steps
    cut at ``T``), shape ``(Σ_l ⌊T / 2^l⌋, T)``.  Sensitivity: ``Δ₁ = ⌊log₂ T⌋ + 1`` levels,
    ``Δ₂ = √(⌊log₂ T⌋ + 1)`` (from the column norms).  The answer at step ``t`` adds Honaker's
    estimates of the dyadic decomposition of ``[0, t]`` (closed nodes only), variance
    ``Σ_{l : bit l of t+1} 2^l/(2^{l+1} − 1)`` per unit node noise.  Sources: Dwork, Naor,
    Pitassi & Rothblum, STOC 2010; Chan, Shi & Song, ACM TISSEC 2011 (Binary Mechanism);
    Honaker, TPDP 2015 (the estimator); module docstring.

    Raises
    ------
    ValueError
        If ``T`` is not a positive whole number (``LimitExceededError`` above the ``cells`` limit).
    """
    return OnlineBinaryTree(T)


# ====================================================================== k-ary tree
def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"kary_tree: the branching factor k must be an odd whole number >= 3, "
                        f"got {type(k).__name__} {k!r}")
    k = int(k)
    if k < 3 or k % 2 == 0:
        raise ValueError(f"kary_tree: the branching factor k must be an odd whole number >= 3 "
                         f"(balanced digits -(k-1)/2 .. (k-1)/2; even k is not implemented), got {k}")
    if k > _MAX_K:
        raise ValueError(f"kary_tree: the branching factor k must be at most {_MAX_K:,}, got {k:,} "
                         f"(any k above 2T gives the one-level tree, Identity)")
    return k


def kary_height(T: int, k: int) -> int:
    """Levels of the k-ary tree for ``T`` steps: the least ``h ≥ 1`` with ``(k^h − 1)/2 ≥ T``.

    Every count ``1 .. T`` then has a balanced base-``k`` representation with ``h`` digits
    (Andersson, Pagh, Steiner & Torkamani, FORC 2025, Sec. 3).  The L1 sensitivity of the
    strategy.

    Raises
    ------
    ValueError, TypeError
        As :func:`kary_tree`.
    """
    T, k = _steps(T, "kary_tree"), _check_k(k)
    h = 1
    while (k**h - 1) // 2 < T:
        h += 1
    return h


def balanced_digits(N, k: int, h: int) -> np.ndarray:
    """Balanced base-``k`` digits of the counts ``N``, shape ``(len(N), h)``, least significant first.

    ``N = Σ_l e_l k^l`` with ``e_l ∈ {−(k−1)/2, …, (k−1)/2}`` (``k`` odd; Andersson, Pagh,
    Steiner & Torkamani, FORC 2025, Sec. 3).

    Raises
    ------
    ValueError
        If some ``|N| > (k^h − 1)/2`` (no ``h``-digit representation), ``N`` is not integers,
        ``h < 1``, or ``k`` is not an odd whole number >= 3 (TypeError if not a whole number).
    """
    k = _check_k(k)
    if isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1:
        raise ValueError(f"h must be a whole number >= 1, got {h!r}")
    N = np.asarray(N)
    if N.ndim != 1 or not np.issubdtype(N.dtype, np.integer):
        raise ValueError(f"N must be a 1D array of integers, got dtype {N.dtype} and shape {N.shape}")
    top = (k ** int(h) - 1) // 2
    if N.size and int(np.abs(N).max()) > top:
        raise ValueError(f"counts up to {int(np.abs(N).max())} need more than {h} balanced base-{k} "
                         f"digits (at most {top:,})")
    half = (k - 1) // 2
    r = N.astype(np.int64)
    out = np.empty((N.size, int(h)), dtype=np.int64)
    for l in range(int(h)):
        d = (r + half) % k - half
        out[:, l] = d
        r = (r - d) // k
    return out


class KaryTree(OnlineTree):
    """The k-ary tree over ``T`` steps with subtraction (see :func:`kary_tree`)."""

    def __init__(self, T: int, k: int = DEFAULT_K, name: str = "kary_tree"):
        T, k = _steps(T, "kary_tree"), _check_k(k)
        h = kary_height(T, k)
        lo, hi, lev = [], [], []
        for l in range(h):
            size = k**l
            start = np.arange(-(-T // size), dtype=np.int64) * size  # blocks meeting [0, T)
            lo.append(start)
            hi.append(np.minimum(start + size, T) - 1)
            lev.append(np.full(start.size, l, dtype=np.int64))
        super().__init__(T, np.concatenate(lo), np.concatenate(hi), np.concatenate(lev), name)
        self.k = k

    def _ranges(self):
        """Per level ``l`` (top first): ``(l, sign, start, stop)``, arrays over the steps: answer
        ``t`` uses the level-``l`` blocks ``start .. stop − 1`` (cut to the blocks that exist)
        with ``sign``."""
        T, k = self.steps, self.k
        N = np.arange(1, T + 1, dtype=np.int64)
        e = balanced_digits(N, k, self.levels)
        above = np.zeros(T, dtype=np.int64)  # N_{l+1}
        out = []
        for l in range(self.levels - 1, -1, -1):
            size = k**l
            count = self._level_start[l + 1] - self._level_start[l]
            a = above // size
            d = e[:, l]
            start = np.where(d > 0, a, a + d)
            stop = np.where(d > 0, a + d, a)
            out.append((l, np.sign(d), np.minimum(start, count), np.minimum(stop, count)))
            above = above + d * size
        return out

    def _online_prefix(self, Y):
        out = np.zeros((self.steps, Y.shape[1]))
        for l, sign, start, stop in self._ranges():
            yl = Y[self._level_start[l]:self._level_start[l + 1]]
            S = np.concatenate([np.zeros((1, Y.shape[1])), np.cumsum(yl, axis=0)])
            out += sign[:, None] * (S[stop] - S[start])
        return out

    def step_variances(self):
        out = np.zeros(self.steps)
        for _, _, start, stop in self._ranges():
            out += stop - start
        return out

    def _decoder(self):
        B = np.zeros((self.steps, self.m))
        for l, sign, start, stop in self._ranges():
            for t in np.flatnonzero(stop > start):
                B[t, self._level_start[l] + start[t]:self._level_start[l] + stop[t]] = sign[t]
        return B


def kary_tree(T: int, k: int = DEFAULT_K) -> KaryTree:
    """The k-ary tree mechanism's strategy with subtraction, for pure ε (Laplace noise).

    Nodes: the aligned blocks ``[j k^l, (j+1) k^l)`` of levels ``l = 0 .. h−1`` cut to
    ``[0, T)`` (blocks entirely after the last step left out), ``h`` = :func:`kary_height`;
    shape ``(Σ_l ⌈T / k^l⌉, T)``; ``Δ₁ = h``, ``Δ₂ = √h``.  The answer at step ``t`` adds or
    subtracts ``|e_l|`` blocks per level from the balanced base-``k`` digits ``e`` of ``t + 1``
    (module docstring; Andersson, Pagh, Steiner & Torkamani, "Count on your elders: Laplace vs
    Gaussian noise", FORC 2025, Sec. 3, Theorem 1).  Online as a mechanism (``B A = L``: answer
    ``t`` depends on the counts up to ``t`` only), but a subtracted block may close after ``t``
    (module docstring, "Online, and in which sense").

    Parameters
    ----------
    T : int
        Number of steps.
    k : int
        Odd branching factor >= 3 (default 19, the paper's choice).

    Raises
    ------
    ValueError
        If ``T`` is not a positive whole number, or ``k`` is even, below 3 or above 2**31 − 1.
    TypeError
        If ``k`` is not a whole number.
    """
    return KaryTree(T, k)


# ==================================================================== registration
def _build_tree_online(W: Matrix, noise: NoiseModel) -> Matrix:
    return tree_online(workload.steps(W))


def _build_kary_tree(W: Matrix, noise: NoiseModel, k: int = DEFAULT_K) -> Matrix:
    return kary_tree(workload.steps(W), k)


_AUDIT = registry.AuditSpec(workload="prefix", cells=8, noise="laplace")

registry.register(registry.Mechanism(
    "tree_online", "Tree (online)", _build_tree_online,
    "Binary tree of dyadic nodes; each running total from the nodes closed so far, every node "
    "combined with its children by inverse variance (Honaker's online estimator).",
    "Dwork, Naor, Pitassi & Rothblum, STOC 2010; Chan, Shi & Song, ACM TISSEC 2011; Honaker, "
    "TPDP 2015; docs: continual",
    scope=workload.running_total_scope, structured_1d=True, online=True, audit=_AUDIT))

registry.register(registry.Mechanism(
    "kary_tree", "k-ary tree", _build_kary_tree,
    "k-ary tree for pure ε: each running total adds or subtracts whole nodes by the balanced "
    "base-k digits of the step (not online: a subtracted node may close after the step).",
    "Andersson, Pagh, Steiner & Torkamani, FORC 2025, Sec. 3, Theorem 1; docs: continual",
    params={"k": DEFAULT_K}, scope=workload.running_total_scope, structured_1d=True, audit=_AUDIT))
