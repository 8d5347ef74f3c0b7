"""Classic data-independent strategies of the matrix mechanism.

Each builder returns a strategy ``A`` (a :class:`~dpexplorer.queries.matrix.Matrix`
over the workload's cells).  Strategies are not normalised: the analytic
error scales the noise to ``A``'s own sensitivity, so scaling ``A`` changes
nothing (HDMM, McKenna et al., Prop. 4; ``dpexplorer/docs/matrix_mechanism.md``).

Conventions are those under which HDMM Table 4 is reproduced to two decimals
(``dpexplorer/docs/strategies.md``; checked in ``tests/test_strategies.py``):

* :func:`identity` -- ``A = I``.
* :func:`hierarchical` -- all intervals of a complete b-ary tree, leaves to
  root (Hay et al. 2010 for b = 2, "H2").
* :func:`hb` -- Qardaji, Yang, Li (PVLDB 2013): branching ``b`` minimising
  ``(b−1)h³ − 2(b+1)h²/3`` with ``h = ⌈log_b n⌉``; levels of block sizes
  ``1, b, ..., b^(h−1)`` (the root level is not included).
* :func:`wavelet` -- the Haar matrix of Privelet (Xiao, Wang, Gehrke 2010).
* :func:`greedy_h` -- GreedyH (Li, Hay, Miklau, Wang, PVLDB 2014, Sec. 4.3-4.4,
  Eq. 5-9, Alg. 2, App. C.2): a binary tree whose query weights are chosen
  greedily, bottom-up, for the workload.

Multi-dimensional domains get the Kronecker product of the 1D strategy on
every attribute (the standard extension for identity, hierarchical, HB and
Privelet's wavelet); GreedyH is defined for ordered 1D domains only.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse

from ..core import registry
from ..queries.gram_ops import gram_operator
from ..queries.matrix import Identity, Kronecker, Matrix, Sparse, _check_cells, _check_size, as_matrix
from ..queries.trees import HaarWavelet, IntervalTree

__all__ = [
    "identity",
    "workload",
    "hierarchical",
    "h2",
    "hb",
    "hb_branching",
    "wavelet",
    "greedy_h",
    "greedy_h_gram",
    "greedy_h_factor",
    "GreedyHResult",
    "per_attribute",
]


def _tree(n: int, block_sizes, name: str) -> IntervalTree:
    """For every block size ``s`` (increasing), the unit-weight intervals ``[k s, min((k+1)s, n) − 1]``."""
    levels = []
    for size in block_sizes:
        lo = np.arange(0, n, size)
        levels.append((lo, np.minimum(lo + size, n) - 1, np.ones(lo.size)))
    return IntervalTree(n, levels, name=name)


def per_attribute(build, domain) -> Matrix:
    """Kronecker product of ``build(n_i)`` over the attributes of ``domain``."""
    domain = tuple(domain)
    if len(domain) == 1:
        return build(domain[0])
    return Kronecker([build(n) for n in domain])


def identity(domain) -> Matrix:
    """Identity strategy ``A = I`` over ``domain`` (an int or a shape tuple).

    For a d-dimensional domain it is ``I_{n_1} ⊗ ... ⊗ I_{n_d}``.
    """
    domain = (domain,) if isinstance(domain, int | np.integer) else tuple(domain)
    A = per_attribute(Identity, domain)
    A.name = "identity"
    return A


def workload(W) -> Matrix:
    """The workload itself as the strategy (``A = W``): answer every query directly."""
    return as_matrix(W)


def hierarchical(n: int, b: int = 2) -> Matrix:
    """Hierarchical strategy: every interval of a complete ``b``-ary tree over ``n`` cells.

    Levels have block sizes ``1, b, b², ..., b^h`` with ``h = ⌈log_b n⌉`` (leaves
    up to and including the root); the last block of a level may be short.
    ``L1`` sensitivity ``h + 1`` (number of levels).  Source: Hay, Rastogi,
    Miklau, Suciu (PVLDB 2010); ``dpexplorer/docs/strategies.md``.

    Shape ``(Σ_l ⌈n / b^l⌉, n)``.

    Raises
    ------
    ValueError
        If ``b < 2`` or ``n < 1``.
    LimitExceededError
        If ``n`` is above the ``cells`` limit (:mod:`dpexplorer.queries.limits`).
    """
    n = _check_cells(n, "hierarchical: n")
    b = _check_size(b, "b")
    if b < 2:
        raise ValueError(f"branching factor b must be at least 2, got {b}")
    sizes = [1]
    while sizes[-1] < n:
        sizes.append(sizes[-1] * b)
    A = _tree(n, sizes, name="h2" if b == 2 else f"hierarchical(b={b})")
    return A


def h2(n: int) -> Matrix:
    """H2: the binary hierarchical strategy (:func:`hierarchical` with ``b = 2``)."""
    return hierarchical(n, 2)


def hb_branching(n: int) -> tuple[int, int]:
    """HB's branching factor and height for ``n`` cells.

    Chooses ``b ∈ [2, n]`` minimising ``(b − 1)·h³ − 2(b + 1)·h²/3`` with
    ``h = ⌈log_b n⌉`` (Qardaji, Yang, Li, PVLDB 2013; ``dpexplorer/docs/strategies.md``); ties go
    to the smaller ``b``.  ``n = 64 → (64, 1)``, ``256 → (16, 2)``,
    ``1024 → (32, 2)``, ``4096 → (16, 3)``.

    For a given height the cost grows with ``b``, so only the smallest ``b``
    of every height is a candidate: ``O(log n)`` candidates, not ``n``.

    Returns
    -------
    (b, h) : tuple of int

    Raises
    ------
    LimitExceededError
        If ``n`` is above the ``cells`` limit.
    """
    n = _check_cells(n, "hb: n")
    if n == 1:
        return 2, 1
    candidates = set()
    for height in range(1, n.bit_length() + 1):  # smallest b >= 2 with b**height >= n
        b = max(2, int(round(n ** (1.0 / height))))
        while b > 2 and (b - 1) ** height >= n:
            b -= 1
        while b**height < n:
            b += 1
        candidates.add(b)
    best = None
    for b in sorted(candidates):
        cost, h = _hb_cost(n, b)
        if best is None or cost < best[0] - 1e-12:
            best = (cost, b, h)
    assert best is not None  # n >= 2 here, so the loop above found at least one branching factor
    return best[1], best[2]


def _hb_cost(n: int, b: int) -> tuple[float, int]:
    """HB's objective ``(b − 1)·h³ − 2(b + 1)·h²/3`` and the height ``h = ⌈log_b n⌉``."""
    h, p = 0, 1
    while p < n:
        p *= b
        h += 1
    return (b - 1) * h**3 - 2 * (b + 1) * h**2 / 3, h


def hb(n: int) -> Matrix:
    """HB strategy (Qardaji, Yang, Li, PVLDB 2013): tree levels of sizes ``1, b, ..., b^(h−1)``.

    ``b, h`` from :func:`hb_branching`; ``h = 1`` gives the identity.
    ``L1`` sensitivity ``h``.
    """
    b, h = hb_branching(n)
    return _tree(n, [b**i for i in range(h)], name="hb")


def wavelet(n: int) -> Matrix:
    """Haar wavelet strategy of Privelet (Xiao, Wang, Gehrke, ICDE 2010).

    The total row, then for every level and every block the query ``+1`` on
    its left half and ``−1`` on its right half (unweighted, as in HDMM Table
    4; Xiao, Wang, Gehrke, ICDE 2010).  Built on ``2^⌈log₂ n⌉`` cells and restricted to the
    first ``n`` columns (rows left empty are dropped), which keeps full column
    rank.  ``L1`` sensitivity ``1 + log₂ n`` for ``n`` a power of two.

    Raises
    ------
    LimitExceededError
        If ``n`` is above the ``cells`` limit.
    """
    n = _check_cells(n, "wavelet: n")
    N = 1
    while N < n:
        N *= 2
    rows, cols, vals = [np.zeros(n, dtype=np.int64)], [np.arange(n)], [np.ones(n)]
    r = 1
    size = N
    while size > 1:
        j = np.arange(n)
        block = j // size
        half = (j % size) < size // 2
        rows.append(r + block)
        cols.append(j)
        vals.append(np.where(half, 1.0, -1.0))
        r += N // size
        size //= 2
    M = scipy.sparse.csr_array(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, n)
    )
    if N == n:  # orthogonal rows: the error has an O(n log n) form (dpexplorer.queries.trees)
        return HaarWavelet(M, name="wavelet")
    keep = np.flatnonzero(np.diff(M.indptr) > 0)
    return Sparse(M[keep], name="wavelet")


# ===================================================================== GreedyH
class GreedyHResult:
    """Outcome of GreedyH on a Gram matrix.

    Attributes
    ----------
    lo, hi : ndarray of int
        Inclusive interval of every tree node (leaves first, level by level).
    weights : ndarray
        Scaling ``c_q`` of every node; every column's weights sum to 1, so the
        scaled strategy has L1 sensitivity 1 (DAWA Eq. 5).
    lambdas : ndarray
        The ``λ_q`` chosen for every node (1 for leaves).
    trace : float
        ``tr(G (AᵀA)⁻¹)`` of the scaled strategy ``A`` on the Gram ``G``.
    """

    def __init__(self, n, lo, hi, weights, lambdas, trace):
        self.n = n
        self.lo, self.hi = lo, hi
        self.weights, self.lambdas = weights, lambdas
        self.trace = trace

    def strategy(self) -> Matrix:
        """The scaled tree ``D_Y Y`` as a sparse strategy (rows with weight 0 dropped).

        An :class:`~dpexplorer.queries.trees.IntervalTree`, whose error on structured
        workloads needs no ``n × n`` matrix.
        """
        starts = np.flatnonzero(self.lo == 0)  # every level partitions the cells
        ends = np.r_[starts[1:], self.lo.size]
        levels = [(self.lo[s:e], self.hi[s:e], self.weights[s:e])
                  for s, e in zip(starts, ends, strict=True)]
        return IntervalTree(self.n, levels, name="greedy_h")


_R_MAX = 1e4  # λ = r/(1+r) ≤ 0.9999 when a node can take (almost) all the weight


def _best_ratio(S, M, a):
    """Minimise ``f(r) = (1+r)² (S + d r²) / (1 + M r²)`` over ``r = λ/(1−λ) ≥ 0``.

    ``d = SM − a ≥ 0`` (Cauchy-Schwarz); this is Eq. 9 after the Woodbury
    step, written without cancellation.  Vectorised over nodes.
    ``f'(r) = 0`` reduces to the quartic ``M d r⁴ + 2 d r² − a r + S = 0``;
    candidates are ``r = 0``, its positive real roots (eigenvalues of stacked
    companion matrices) and, when ``d = 0`` (the node's queries all lie along
    its own sum), ``r = _R_MAX`` whose value tends to ``S/M``.

    Returns
    -------
    r : ndarray
        The minimiser per node; ties go to the smaller ``r``.
    d : ndarray
        ``SM − a`` with rounding noise below ``1e-9·SM`` set to 0.
    """
    k = S.size
    d = M * S - a
    degenerate = d <= 1e-9 * np.maximum(M * S, 1e-300)
    d = np.where(degenerate, 0.0, d)
    dd = np.where(degenerate, 1.0, d)
    Ms = np.where(M > 0, M, 1.0)
    # monic quartic r^4 + c2 r^2 + c1 r + c0
    c2 = 2.0 / Ms
    c1 = -a / (Ms * dd)
    c0 = S / (Ms * dd)
    C = np.zeros((k, 4, 4))
    C[:, 1, 0] = C[:, 2, 1] = C[:, 3, 2] = 1.0
    C[:, 0, 3] = -c0
    C[:, 1, 3] = -c1
    C[:, 2, 3] = -c2
    roots = np.linalg.eigvals(C)
    real = np.abs(roots.imag) <= 1e-7 * np.maximum(1.0, np.abs(roots.real))
    r = np.where(real & (roots.real > 0) & ~degenerate[:, None], roots.real, 0.0)
    r = np.minimum(r, _R_MAX)
    cand = np.concatenate([np.zeros((k, 1)), r, np.full((k, 1), _R_MAX)], axis=1)
    vals = (1 + cand) ** 2 * (S[:, None] + d[:, None] * cand**2) / (1 + M[:, None] * cand**2)
    vals[~degenerate, -1] = np.inf
    # ties (flat objectives) go to the smallest r
    best = np.argmin(np.where(vals <= vals.min(axis=1, keepdims=True) * (1 + 1e-12), cand, np.inf), axis=1)
    return cand[np.arange(k), best], d


def greedy_h_gram(G: np.ndarray, b: int = 2) -> GreedyHResult:
    """GreedyH (DAWA Sec. 4.3-4.4, Alg. 2) on a workload Gram matrix ``G: (n, n)``.

    Template: a tree over the ``n`` cells with branching ``b``; level 0 holds
    the ``n`` unit queries, each higher level groups ``b`` consecutive nodes of
    the level below (the last group may be smaller) up to a single root.
    Leaves start with weight 1, all other nodes 0.  Bottom-up, every node
    ``q`` picks ``λ_q ∈ [0, 1)`` minimising Eq. 9,
    ``tr((μ Ĝ_q + (1 − μ) blockdiag(Ĝ_children)) (Y_qᵀ D_q² Y_q)⁻¹)`` with decay
    ``μ = b^(−l/2)`` at depth ``l`` (root depth 0); its weight becomes ``λ_q``
    and every descendant's weight is multiplied by ``1 − λ_q``.

    The trace is evaluated in O(1) per ``λ`` by Woodbury (App. C.2).  With
    ``B = blockdiag(X_c)``, ``v = B⁻¹1``, ``M = 1ᵀv``, ``S = Σ tr(G_c X_c⁻¹)``
    and ``a = vᵀ G' v``:
    ``tr(G' X_q⁻¹) = (1 − λ)⁻² [S − a λ² / ((1 − λ)² + λ² M)]``.
    (App. C.2, Eq. 17 prints ``(λ⁻² + M)⁻¹`` where Woodbury gives
    ``(λ⁻² + (1 − λ)⁻² M)⁻¹``; the test suite checks our form against a dense
    inverse.)

    Parameters
    ----------
    G : ndarray, shape (n, n)
        Gram matrix ``WᵀW`` of the workload (for DAWA: of the transformed
        workload ``Ŵ`` over buckets).
    b : int
        Branching factor ``t`` (2 in the paper).

    Returns
    -------
    GreedyHResult
        Node intervals, weights (L1 sensitivity exactly 1) and the trace
        ``tr(G (AᵀA)⁻¹)`` of the scaled tree.

    Raises
    ------
    ValueError
        If ``G`` is not square or ``b < 2``.
    """
    G = np.asarray(G, dtype=float)
    if G.ndim != 2 or G.shape[0] != G.shape[1]:
        raise ValueError(f"G must be a square Gram matrix, got shape {G.shape}")
    return _greedy_h(_DenseGram(G), G.shape[0], b)


def greedy_h_factor(What, b: int = 2) -> GreedyHResult:
    """GreedyH from a workload matrix ``Ŵ: (m, n)`` (dense or scipy sparse) instead of its Gram.

    Same algorithm as :func:`greedy_h_gram` with ``G = ŴᵀŴ`` never formed:
    every quadratic form ``v_qᵀ G_q v_q`` is ``‖Ŵ_q v_q‖²``, computed for all
    nodes of a level at once with one sparse product.  Used by DAWA on large
    bucket domains (2D data), where a dense ``k × k`` Gram would not fit.
    """
    gram = _FactorGram(What)
    return _greedy_h(gram, gram.n, b)


class _OperatorGram:
    """Quadratic forms of node blocks of a structured Gram (:mod:`dpexplorer.queries.gram_ops`)."""

    def __init__(self, op):
        self.op = op

    def diag(self):
        return self.op.diag()

    def blocks(self, v, lo, hi):
        return self.op.interval_forms(v, lo, hi)


class _DenseGram:
    """Quadratic forms of node blocks of a dense Gram matrix."""

    def __init__(self, G):
        self.G = G

    def diag(self):
        return np.diag(self.G).copy()

    def blocks(self, v, lo, hi):
        out = np.empty(lo.size)
        for q in range(lo.size):
            s, e = lo[q], hi[q] + 1
            vq = v[s:e]
            out[q] = vq @ self.G[s:e, s:e] @ vq
        return out


@numba.njit(cache=True)
def _row_node_squares(indptr, indices, data, v, node_of_col, k):
    """``out[q] = Σ_r (Σ_{j∈q} W_rj v_j)²`` over the CSR rows of ``W`` (any column order)."""
    out = np.zeros(k)
    acc = np.zeros(k)
    touched = np.empty(k, np.int64)
    for r in range(indptr.size - 1):
        nt = 0
        for t in range(indptr[r], indptr[r + 1]):
            j = indices[t]
            q = node_of_col[j]
            if acc[q] == 0.0:
                touched[nt] = q
                nt += 1
            acc[q] += data[t] * v[j]
            if acc[q] == 0.0:  # exact cancellation: keep q marked as touched
                acc[q] = 1e-300
        for i in range(nt):
            q = touched[i]
            out[q] += acc[q] * acc[q]
            acc[q] = 0.0
    return out


class _FactorGram:
    """Quadratic forms ``‖Ŵ_q v_q‖²`` of node blocks, from a sparse ``Ŵ`` (one pass over its nonzeros)."""

    def __init__(self, W):
        W = scipy.sparse.csr_array(W)
        self.indptr = W.indptr.astype(np.int64)
        self.indices = W.indices.astype(np.int64)
        self.data = np.asarray(W.data, dtype=float)
        self.n = W.shape[1]

    def diag(self):
        return np.bincount(self.indices, weights=self.data**2, minlength=self.n)

    def blocks(self, v, lo, hi):
        node_of_col = np.repeat(np.arange(lo.size), hi - lo + 1)
        return _row_node_squares(self.indptr, self.indices, self.data, v, node_of_col, lo.size)


def _greedy_h(gram, n: int, b: int) -> GreedyHResult:
    """Bottom-up greedy scaling (DAWA Alg. 2) given node quadratic forms of ``G``."""
    b = _check_size(b, "b")
    if b < 2:
        raise ValueError(f"branching factor must be at least 2, got {b}")

    # levels of (lo, hi) intervals, bottom-up
    levels = [(np.arange(n), np.arange(n))]
    while levels[-1][0].size > 1:
        lo, hi = levels[-1]
        groups = np.arange(lo.size) // b
        first = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
        last = np.r_[first[1:] - 1, lo.size - 1]
        levels.append((lo[first], hi[last]))
    depth_of_level = [len(levels) - 1 - i for i in range(len(levels))]

    # state per cell position: v (B^{-1} 1) restricted to the node that covers it
    v = np.ones(n)
    m_node = np.ones(n)  # m of each node at the current level
    t_node = gram.diag()  # tr(G_q X_q^{-1}) at the current level
    a_prev = t_node.copy()  # v_cᵀ G_c v_c of the children (leaves: v = 1)
    lambdas = [np.ones(n)]
    for li in range(1, len(levels)):
        lo, hi = levels[li]
        clo, chi = levels[li - 1]
        mu = float(b) ** (-depth_of_level[li] / 2.0)
        parent_of_child = np.searchsorted(lo, clo, side="right") - 1
        k = lo.size
        S = np.bincount(parent_of_child, weights=t_node, minlength=k)
        Msum = np.bincount(parent_of_child, weights=m_node, minlength=k)
        a_full = gram.blocks(v, lo, hi)
        a_block = np.bincount(parent_of_child, weights=a_prev, minlength=k)
        a_mu = mu * a_full + (1.0 - mu) * a_block
        r, _ = _best_ratio(S, Msum, a_mu)
        lam = r / (1.0 + r)
        # with β = λ²/((1-λ)² + λ²M) = r²/(1 + M r²) and (1-λ)⁻² = (1+r)²:
        # X_q⁻¹ = (1+r)² (B⁻¹ − β v vᵀ), so v_q = coef·v, m_q = coef·M and
        # t_q = tr(G_q X_q⁻¹) = (1+r)² (S − β a) = (1+r)² (S + (SM − a) r²)/(1 + M r²)
        coef = (1.0 + r) ** 2 / (1.0 + Msum * r**2)
        d_full = np.maximum(Msum * S - a_full, 0.0)
        t_node = coef * (S + d_full * r**2)
        m_node = coef * Msum
        cell_parent = np.repeat(np.arange(k), hi - lo + 1)
        v = v * coef[cell_parent]
        a_prev = coef**2 * a_full  # the new v_q is coef_q times the old one on q
        lambdas.append(lam)

    # weights: c_q = λ_q Π_{ancestors}(1 − λ_a)
    weights = []
    down = np.ones(1)  # product of (1-λ) of strict ancestors, for nodes of the current level
    for li in range(len(levels) - 1, -1, -1):
        lo, hi = levels[li]
        lam = lambdas[li]
        weights.append(lam * down)
        if li > 0:
            clo, _ = levels[li - 1]
            parent_of_child = np.searchsorted(lo, clo, side="right") - 1
            down = (down * (1.0 - lam))[parent_of_child]
    weights = weights[::-1]
    return GreedyHResult(
        n,
        np.concatenate([lv[0] for lv in levels]),
        np.concatenate([lv[1] for lv in levels]),
        np.concatenate(weights),
        np.concatenate(lambdas),
        float(t_node[0]),
    )


def greedy_h(W, b: int = 2) -> Matrix:
    """GreedyH strategy for a workload on an ordered 1D domain (DAWA Sec. 4.3-4.4).

    Parameters
    ----------
    W : Matrix or array, shape (m, n)
        Workload over a 1D domain.
    b : int
        Branching factor of the tree template (2 in the paper).

    Returns
    -------
    Matrix
        Scaled tree strategy with L1 sensitivity 1 (DAWA Eq. 5), shape ``(≤ 2n, n)``.

    Raises
    ------
    ValueError
        If the workload's domain is not one-dimensional.
    """
    W = as_matrix(W)
    if len(W.domain) != 1:
        raise ValueError(
            f"GreedyH is defined for ordered 1D domains; this workload's domain is {W.domain}"
        )
    op = gram_operator(W)
    if op is not None and op.intervals:  # structured Gram: O(n) node forms, no n × n matrix
        result = _greedy_h(_OperatorGram(op), W.n, b)
    else:
        result = greedy_h_gram(W.gram().dense(), b)
    A = result.strategy()
    A.greedy = result
    return A


# ------------------------------------------------------------ registration
def _one_dimensional(W: Matrix, what: str) -> int:
    if len(W.domain) != 1:
        raise registry.NotApplicableError(f"{what} is defined for 1D domains; this workload's domain is {W.domain}")
    return W.n


def _build_identity(W, noise):
    return identity(W.domain)


def _build_workload(W, noise):
    return workload(W)


def _build_hierarchical(W, noise, b=2):
    return per_attribute(lambda n: hierarchical(n, b), W.domain)


def _build_hb(W, noise):
    return per_attribute(hb, W.domain)


def _build_wavelet(W, noise):
    return per_attribute(wavelet, W.domain)


def _build_greedy_h(W, noise, b=2):
    _one_dimensional(W, "GreedyH")
    return greedy_h(W, b)


def _wavelet_structured(n: int) -> str | None:
    """None if Privelet's strategy and error need no ``n × n`` matrix on ``n`` cells, else why.

    The Haar wavelet keeps its implicit form (:class:`~dpexplorer.queries.trees.HaarWavelet`,
    fast error formula) on power-of-two domains only; elsewhere it is a sparse matrix whose
    error goes through the dense Gram matrix.
    """
    if n & (n - 1) == 0:
        return None
    return (f"needs an n × n matrix unless the domain size is a power of two "
            f"({1 << (n.bit_length() - 1):,} or {1 << n.bit_length():,} cells)")


_TREE_AUDIT = registry.AuditSpec(cells=8)  # 8 cells: trees with more than one inner level


for _m in [
    registry.Mechanism("identity", "Identity", _build_identity,
                       "Noisy count of every cell (A = I), answers summed from them.",
                       "Dwork et al. 2006; HDMM Table 4 'Identity'", structured_1d=True,
                       online=True),
    registry.Mechanism("workload", "Workload", _build_workload,
                       "Answer every workload query directly (A = W).",
                       "Laplace/Gaussian mechanism on W; HDMM Table 4 'Laplace'/'Gaussian'",
                       online=True),
    registry.Mechanism("h2", "H2", _build_hierarchical,
                       "Binary hierarchy of intervals, leaves to root (Kronecker per attribute).",
                       "Hay, Rastogi, Miklau, Suciu, PVLDB 2010; docs: strategies", params={"b": 2},
                       structured_1d=True, audit=_TREE_AUDIT),
    registry.Mechanism("hb", "HB", _build_hb,
                       "Hierarchy with the branching factor chosen for the domain size.",
                       "Qardaji, Yang, Li, PVLDB 2013; docs: strategies",
                       structured_1d=True, audit=_TREE_AUDIT),
    registry.Mechanism("wavelet", "Privelet", _build_wavelet,
                       "Haar wavelet queries (Kronecker per attribute).",
                       "Xiao, Wang, Gehrke, ICDE 2010 (Privelet); docs: strategies",
                       structured_1d=_wavelet_structured, audit=_TREE_AUDIT),
    registry.Mechanism("greedy_h", "GreedyH", _build_greedy_h,
                       "Binary hierarchy with query weights chosen greedily for the workload (1D).",
                       "Li, Hay, Miklau, Wang, PVLDB 2014, Sec. 4.3-4.4, Alg. 2", params={"b": 2},
                       structured_1d=True, audit=_TREE_AUDIT),
]:
    registry.register(_m)
