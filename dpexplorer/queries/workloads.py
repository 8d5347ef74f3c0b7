"""Workload builders.

A workload ``W`` (``m × n``) is a batch of linear counting queries over a
data vector ``x`` of ``n`` cells.  Every builder returns an implicit
:class:`~dpexplorer.queries.matrix.Matrix` that knows its ``name``, its ``domain``
shape and its number of queries ``m``.  1D building blocks carry a ``spec``
so that any union of weighted Kronecker products of them can be saved and
loaded as a declarative spec (:mod:`dpexplorer.queries.spec`).

Sources: HDMM (McKenna et al.) Sec. 3 and Sec. 11 for All Range, Prefix,
Width-k, Permuted Range, marginals and prefix-marginals; DAWA (Li et al.
2014) Sec. 5.1 for random interval workloads.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import numpy as np

from . import limits
from .matrix import (
    AllRange,
    Dense,
    Identity,
    Kronecker,
    Matrix,
    Permutation,
    Prefix,
    Product,
    RangeQueries,
    RectangleQueries,
    Sparse,
    Total,
    VStack,
    Weighted,
    _check_cells,
    _check_grid,
    _check_size,
    as_matrix,
)

__all__ = [
    "identity",
    "total",
    "identity_total",
    "prefix",
    "all_range",
    "width_range",
    "ranges",
    "random_ranges",
    "rectangles",
    "random_rectangles",
    "permuted",
    "predicates",
    "marginal",
    "marginals",
    "range_marginals",
    "kron",
    "union",
    "BLOCKS",
    "block",
]


def identity(n: int) -> Matrix:
    """Identity workload ``I_n`` (``n`` unit queries), shape ``(n, n)``."""
    return Identity(n)


def total(n: int) -> Matrix:
    """The single query summing all ``n`` cells, shape ``(1, n)``."""
    return Total(n)


def identity_total(n: int) -> Matrix:
    """``[I; 1ᵀ]``, shape ``(n + 1, n)``: the 1D block of all marginals (HDMM Table 6)."""
    W = VStack([Identity(n), Total(n)], name="identity_total")
    W.spec = {"type": "identity_total"}
    return W


def prefix(n: int) -> Matrix:
    """Prefix (empirical CDF) queries ``[0, i]``, shape ``(n, n)``."""
    return Prefix(n)


def all_range(n: int) -> Matrix:
    """All ``n(n+1)/2`` range queries ``[lo, hi]``, shape ``(n(n+1)/2, n)``.

    Implicit: its Gram matrix has a closed form and its rows are never
    materialised unless asked.
    """
    return AllRange(n)


def width_range(n: int, w: int) -> Matrix:
    """All ranges of width ``w``: ``[i, i + w - 1]`` for ``i = 0..n-w``, shape ``(n-w+1, n)``.

    Raises
    ------
    ValueError
        If ``w`` is not in ``[1, n]``.
    LimitExceededError
        If ``n`` is above the ``cells`` limit (:mod:`dpexplorer.queries.limits`).
    """
    n = _check_cells(n, "width_range: n")
    w = _check_size(w, "width_range: w")
    if w > n:
        raise ValueError(f"width w={w} is larger than the domain size n={n}")
    lo = np.arange(n - w + 1)
    W = RangeQueries(n, lo, lo + w - 1, name=f"width{w}")
    W.spec = {"type": "width_range", "w": w}
    return W


def ranges(n: int, intervals: Sequence[Sequence[int]], name: str = "ranges") -> Matrix:
    """An explicit list of inclusive intervals ``[(lo, hi), ...]`` over ``n`` cells.

    Raises
    ------
    ValueError
        If an interval is outside ``[0, n-1]``, has ``lo > hi`` or bounds that
        are not whole numbers, or the list is empty.
    LimitExceededError
        If ``n`` is above the ``cells`` limit or there are more intervals than
        the ``queries`` limit (checked before the list is converted).
    """
    n = _check_cells(n, f"{name}: n")
    arr = _explicit_rows(intervals, 2, f"{name}: intervals", "(lo, hi) pairs")
    return RangeQueries(n, arr[:, 0], arr[:, 1], name=name)


def _explicit_rows(rows, width: int, what: str, kind: str) -> np.ndarray:
    """An explicit list of ``width``-tuples of whole numbers as an ``(m, width)`` array.

    The number of rows is checked against the ``queries`` limit before any
    conversion (the list itself is the caller's).
    """
    try:
        count = len(rows)
    except TypeError:
        raise ValueError(f"{what} must be a list of {kind}, got {type(rows).__name__}") from None
    if count == 0:
        raise ValueError(f"{what}: a workload needs at least one query (got an empty list)")
    limits.check("queries", count, f"{what}: number of queries")
    try:
        arr = np.asarray(rows)
    except ValueError:
        raise ValueError(f"{what} must be a list of {kind} (rows of different lengths)") from None
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(f"{what} must be a list of {kind}, got an array of shape {arr.shape}")
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{what}: bounds must be whole numbers, got values of type {arr.dtype}")
    return arr


_RANDOM_KINDS = {"uniform": None, "clustered": 256.0, "large_clustered": 1024.0}


def random_ranges(n: int, m: int = 2000, kind: str = "uniform", seed: int = 0,
                  centers: int = 5) -> RangeQueries:
    """Random interval workloads of DAWA Sec. 5.1, seeded.

    Parameters
    ----------
    n : int
        Domain size.
    m : int
        Number of intervals (the paper uses 2000).
    kind : {"uniform", "clustered", "large_clustered"}
        ``uniform``: every interval of ``[0, n-1]`` equally likely.
        ``clustered``: ``centers`` (5) centres uniform on the domain, ``m /
        centers`` (400) intervals each, ``[c − |X_l|, c + |X_r|]`` with
        ``X ~ N(0, 256²)``; ``large_clustered``: the same with std 1024.
        Endpoints are rounded to cells and cut at the domain's ends (the
        paper's domain is ``[1, n]``).
    seed : int
        Seed of the ``numpy.random.Generator`` that draws the intervals.

    Returns
    -------
    Matrix
        ``(m, n)`` range workload whose ``spec`` records ``m``, ``kind`` and ``seed``.

    Raises
    ------
    ValueError
        For an unknown ``kind``, an ``m`` or ``centers`` that is not a positive
        whole number, or a ``seed`` that is not a whole number >= 0.
    LimitExceededError
        If ``n`` is above the ``cells`` limit or ``m`` above the ``queries`` limit.
    """
    n = _check_cells(n, "random_ranges: n")
    m = limits.whole_number(m, "random_ranges: m", limit="queries")
    seed = limits.whole_number(seed, "random_ranges: seed", minimum=0)
    if kind not in _RANDOM_KINDS:
        raise ValueError(f"random_ranges: kind must be one of {sorted(_RANDOM_KINDS)}, got {kind!r}")
    if kind != "uniform":
        centers = limits.whole_number(centers, "random_ranges: centers")
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        # index into the n(n+1)/2 intervals ordered by (lo, hi)
        total_count = n * (n + 1) // 2
        k = rng.integers(0, total_count, size=m)
        # row lo starts at offset lo*n - lo*(lo-1)/2
        starts = np.arange(n) * n - np.arange(n) * (np.arange(n) - 1) // 2
        lo = np.searchsorted(starts, k, side="right") - 1
        hi = lo + (k - starts[lo])
    else:
        std = cast(float, _RANDOM_KINDS[kind])  # None only for "uniform"
        per = int(math.ceil(m / centers))
        c = rng.integers(0, n, size=centers)
        cc = np.repeat(c, per)[:m]
        left = np.abs(rng.normal(0.0, std, size=m))
        right = np.abs(rng.normal(0.0, std, size=m))
        lo = np.clip(np.rint(cc - left), 0, n - 1).astype(np.int64)
        hi = np.clip(np.rint(cc + right), 0, n - 1).astype(np.int64)
    W = RangeQueries(n, lo, hi, name=f"random_{kind}_{m}")
    W.spec = {"type": "random_ranges", "m": m, "kind": kind, "seed": int(seed)}
    if kind != "uniform":
        W.spec["centers"] = int(centers)
    return W


def rectangles(shape, boxes, name: str = "rectangles") -> Matrix:
    """Rectangle queries on a 2D grid from ``[(r0, r1, c0, c1), ...]`` (inclusive bounds).

    Raises
    ------
    ValueError
        If a box is outside the grid or reversed, or the list is empty.
    LimitExceededError
        If the grid has more cells than the ``cells`` limit or there are more
        boxes than the ``queries`` limit.
    """
    _check_grid(shape, name)
    arr = _explicit_rows(boxes, 4, f"{name}: boxes", "(r0, r1, c0, c1) boxes")
    return RectangleQueries(shape, arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], name=name)


def random_rectangles(shape, m: int = 2000, seed: int = 0) -> Matrix:
    """``m`` random rectangles on a 2D grid: each side an interval uniform over all intervals.

    The 2D analogue of DAWA's uniform random intervals (Sec. 5.1, 5.4), seeded.

    Returns
    -------
    Matrix
        ``(m, n1·n2)`` :class:`~dpexplorer.queries.matrix.RectangleQueries`.

    Raises
    ------
    ValueError
        For a shape that is not 2D, or ``m``/``seed`` as :func:`random_ranges`.
    LimitExceededError
        If the grid has more cells than the ``cells`` limit or ``m`` is above
        the ``queries`` limit.
    """
    n1, n2 = _check_grid(shape, "random_rectangles")
    m = limits.whole_number(m, "random_rectangles: m", limit="queries")
    seed = limits.whole_number(seed, "random_rectangles: seed", minimum=0)
    rows = random_ranges(n1, m, "uniform", seed)
    cols = random_ranges(n2, m, "uniform", seed + 1_000_003)
    W = RectangleQueries((n1, n2), rows.lo, rows.hi, cols.lo, cols.hi, name=f"random_rectangles_{m}")
    return W


def permuted(W: Matrix, seed: int = 0) -> Matrix:
    """``W·P`` for a random permutation ``P`` of the cells (HDMM Sec. 11.1, Permuted Range).

    The Gram matrix is ``Pᵀ(WᵀW)P``; errors of data-independent strategies
    designed for ranges suffer, the SVD bound does not change.  Permuting a
    permuted workload composes the permutations (one product, however deep).

    Raises
    ------
    TypeError
        If ``W`` is not a query matrix.
    ValueError
        If ``seed`` is not a whole number >= 0.
    LimitExceededError
        If ``W`` has more cells than the ``cells`` limit (the permutation is a
        vector over them), or its spec would nest deeper than ``spec_depth``.
    """
    W = as_matrix(W)
    seed = limits.whole_number(seed, "permuted: seed", minimum=0)
    limits.check("cells", W.n, f"permuted: cells of {W.name!r}")
    spec = None
    if W.spec is not None:
        spec = {"type": "permuted", "base": W.spec, "seed": seed}
        limits.document(spec, "permuted: block spec", outer_depth=SPEC_BLOCK_DEPTH)
    perm = np.random.default_rng(seed).permutation(W.n)
    if isinstance(W, Product) and isinstance(W.right, Permutation) and W.right.n == W.n:
        # W = L·P1, so W·P2 = L·(P1 P2): (P1 P2 x)_i = x[perm2[perm1[i]]]
        out = Product(W.left, Permutation(perm[W.right.perm]), name=f"permuted({W.name})")
    else:
        out = Product(W, Permutation(perm), name=f"permuted({W.name})")
    out.spec = spec
    return out


def predicates(M, name: str = "predicates") -> Matrix:
    """Predicate (counting) queries from a 0/1 matrix ``M: (m, n)``.

    Raises
    ------
    ValueError
        If ``M`` is not 2D, is empty, has rows of different lengths, or has
        entries other than 0 and 1.
    LimitExceededError
        If ``m·n`` is above the ``explicit_entries`` limit (checked from the
        shape, before converting a list).
    """
    import scipy.sparse

    if isinstance(M, list | tuple):
        rows = len(M)
        cols = len(M[0]) if rows and isinstance(M[0], list | tuple) else 1
        limits.check("explicit_entries", rows * cols, f"{name}: entries of the {rows:,} × {cols:,} matrix")
    elif scipy.sparse.issparse(M) or isinstance(M, np.ndarray):
        # scipy's stubs narrow issparse to SparseABC, which declares no ndim or shape (nor does
        # sparray alone); every sparse matrix and array has both
        shaped = cast(Any, M)
        if shaped.ndim == 2:
            limits.check("explicit_entries", shaped.shape[0] * shaped.shape[1],
                         f"{name}: entries of the {shaped.shape[0]:,} × {shaped.shape[1]:,} matrix")
    else:
        raise ValueError(f"{name}: the predicate matrix must be a 2D 0/1 matrix (nested lists, a numpy "
                         f"array or a scipy sparse matrix), got {type(M).__name__}")
    W: Matrix
    if scipy.sparse.issparse(M):
        S = scipy.sparse.csr_array(cast(Any, M))  # as above: the stubs take no SparseABC
        if S.shape[0] == 0 or S.shape[1] == 0:
            raise ValueError("a predicate workload needs at least one query and one cell")
        if not np.all(np.isin(S.data, (0, 1))):
            raise ValueError("predicate queries must have 0/1 entries")
        W = Sparse(S, name=name)
    else:
        try:
            A = np.asarray(M, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: the predicate matrix must be a 2D 0/1 matrix with rows of one "
                             "length, holding only 0 and 1") from None
        if A.ndim != 2 or A.size == 0:
            raise ValueError(f"predicates need a non-empty 2D 0/1 matrix, got shape {A.shape}")
        if not np.all(np.isin(A, (0.0, 1.0))):
            raise ValueError("predicate queries must have 0/1 entries only")
        W = Dense(A, name=name)
    W.spec = {"type": "predicates", "matrix": W.dense().astype(int).tolist()}
    return W


# ----------------------------------------------------------------- blocks
#: Named 1D building blocks of the declarative spec: ``name -> builder(n, **params)``.
BLOCKS: dict[str, Callable[..., Matrix]] = {
    "identity": lambda n: identity(n),
    "total": lambda n: total(n),
    "identity_total": lambda n: identity_total(n),
    "prefix": lambda n: prefix(n),
    "all_range": lambda n: all_range(n),
    "width_range": lambda n, w: width_range(n, w),
    "ranges": lambda n, ranges: _ranges_block(n, ranges),
    "random_ranges": lambda n, m=2000, kind="uniform", seed=0, centers=5: random_ranges(
        n, m, kind, seed, centers),
    "predicates": lambda n, matrix: _predicates_checked(n, matrix),
    "permuted": lambda n, base, seed=0: permuted(_block(base, n), seed),
}

#: Levels of a workload spec above a block spec (mapping, products, product, factors):
#: a block nests at most ``spec_depth - SPEC_BLOCK_DEPTH`` levels deep.
SPEC_BLOCK_DEPTH = 4


def _ranges_block(n, intervals):
    return ranges(n, intervals)


def _predicates_checked(n, matrix):
    W = predicates(matrix)
    if W.n != n:
        raise ValueError(f"predicate matrix has {W.n} columns but the attribute has {n} cells")
    return W


def block(spec: dict | str, n: int) -> Matrix:
    """Build a named 1D block from its spec, e.g. ``{"type": "width_range", "w": 32}``.

    Raises
    ------
    ValueError
        If the type is unknown or its parameters are wrong.
    LimitExceededError
        If the spec nests deeper than the ``spec_depth`` limit allows a block
        (checked before building), or the block is too large.
    """
    if isinstance(spec, dict):
        limits.document(spec, "block spec", outer_depth=SPEC_BLOCK_DEPTH)
    return _block(spec, n)


def _block(spec: dict | str, n: int) -> Matrix:
    if isinstance(spec, str):
        spec = {"type": spec}
    if not isinstance(spec, dict) or "type" not in spec:
        raise ValueError(f"a block spec is a dict with a 'type' key, got {spec!r}")
    params = {k: v for k, v in spec.items() if k != "type"}
    kind = spec["type"]
    if kind not in BLOCKS:
        raise ValueError(f"unknown block type {kind!r}; known: {sorted(BLOCKS)}")
    try:
        return BLOCKS[kind](n, **params)
    except TypeError as exc:
        raise ValueError(f"bad parameters {params} for block {kind!r}: {exc}") from None


# --------------------------------------------------------------- products
def kron(factors: Sequence[Matrix], name: str | None = None) -> Matrix:
    """Kronecker product of 1D workloads, one per attribute, kept factorised.

    The domain is the concatenation of the factors' domains (C order).

    Raises
    ------
    TypeError
        If a factor is not a query matrix.
    ValueError
        If there is no factor.
    LimitExceededError
        If there are more factors than the ``attributes`` limit.
    """
    factors = list(factors)
    limits.check("attributes", len(factors), "kron: number of factors (attributes)")
    factors = [as_matrix(f) for f in factors]
    if not factors:
        raise ValueError("kron: a Kronecker product needs at least one factor")
    if len(factors) == 1:
        return factors[0]
    return Kronecker(factors, name=name)


def union(workloads: Sequence[Matrix], weights: Sequence[float] | None = None,
          name: str | None = None) -> Matrix:
    """Union (stacked rows) of workloads over the same domain, optionally weighted.

    A weight ``w`` multiplies the queries of that workload, so their squared
    error counts ``w²`` times in the TSE (HDMM Def. 17 weights).

    Raises
    ------
    ValueError
        If the workloads have different domains, the lists differ in length,
        or a weight is not a positive finite number.
    LimitExceededError
        If the union has more Kronecker factors, summed over its products,
        than the ``factors`` limit.
    """
    workloads = list(workloads)
    if not workloads:
        raise ValueError("a union needs at least one workload")
    # distinct objects are counted once per appearance, without walking repeats
    counts = {id(w): _factor_count(w) for w in workloads}
    limits.check("factors", sum(counts[id(w)] for w in workloads),
                 f"union of {len(workloads):,} workloads: Kronecker factors")
    workloads = [as_matrix(w) for w in workloads]
    doms = {w.domain for w in workloads}
    if len(doms) != 1:
        raise ValueError(f"cannot take the union of workloads over different domains: {sorted(doms)}")
    if weights is not None:
        weights = list(weights)
        if len(weights) != len(workloads):
            raise ValueError(f"{len(weights)} weights for {len(workloads)} workloads")
        for w in weights:
            if isinstance(w, bool) or not isinstance(w, numbers.Real) or not (math.isfinite(w) and w > 0):
                raise ValueError(f"weights must be positive finite numbers, got {w!r}")
        workloads = [W if c == 1 else Weighted(W, c) for W, c in zip(workloads, weights, strict=True)]
    if len(workloads) == 1:
        return workloads[0]
    out = VStack(workloads, name=name)
    out.domain = doms.pop()
    return out


def marginal(domain: Sequence[int], attrs: Iterable[int]) -> Matrix:
    """The marginal on attributes ``attrs`` of a d-dimensional domain.

    Query matrix ``⊗_i (I_{n_i} if i ∈ attrs else 1ᵀ_{n_i})`` (HDMM Sec. 7).

    Raises
    ------
    ValueError
        If an attribute index is out of range.
    LimitExceededError
        For more attributes than the ``attributes`` limit or an attribute
        with more cells than the ``cells`` limit.
    """
    domain = _check_domain(domain)
    attrs = set(attrs)
    bad = [a for a in attrs if isinstance(a, bool) or not isinstance(a, numbers.Integral)
           or not 0 <= a < len(domain)]
    if bad:
        raise ValueError(f"attribute indices {bad} out of range for a {len(domain)}-attribute domain")
    return Kronecker([Identity(n) if i in attrs else Total(n) for i, n in enumerate(domain)],
                     name="marginal(" + ",".join(str(a) for a in sorted(attrs)) + ")")


def marginals(domain: Sequence[int], k: int | Sequence[int]) -> Matrix:
    """All k-way marginals (``k`` an int, or a list of orders such as ``[0, 1, 2]``).

    Raises
    ------
    ValueError
        If an order is not a whole number in ``[0, d]``.
    LimitExceededError
        For more attributes than the ``attributes`` limit, an attribute with
        more cells than the ``cells`` limit, or more Kronecker factors in all
        (``Σ_k C(d, k)·d``, computed before building) than the ``factors`` limit.
    """
    domain = _check_domain(domain)
    orders = _orders(k, len(domain), "marginals")
    parts = [marginal(domain, c) for o in orders for c in itertools.combinations(range(len(domain)), o)]
    name = "marginals(" + ",".join(str(o) for o in orders) + "-way)"
    return union(parts, name=name) if len(parts) > 1 else _named(parts[0], name)


def range_marginals(domain: Sequence[int], k: int | Sequence[int], kind: str = "all_range") -> Matrix:
    """k-way range marginals: for every k attributes, ranges on them, totals elsewhere.

    ``kind="all_range"`` uses all ranges on each chosen attribute, ``"prefix"``
    its prefixes (HDMM's Prefix-Marginals use ``[P, ..., M]`` factors).

    Raises
    ------
    ValueError
        For an unknown kind or a bad order.
    LimitExceededError
        As :func:`marginals`.
    """
    domain = _check_domain(domain)
    if kind not in ("all_range", "prefix"):
        raise ValueError(f"range_marginals: kind must be 'all_range' or 'prefix', got {kind!r}")
    orders = _orders(k, len(domain), "range_marginals")
    make = AllRange if kind == "all_range" else Prefix
    parts = []
    for o in orders:
        for c in itertools.combinations(range(len(domain)), o):
            parts.append(Kronecker([make(n) if i in c else Total(n) for i, n in enumerate(domain)]))
    name = f"{kind}_marginals(" + ",".join(str(o) for o in orders) + "-way)"
    return union(parts, name=name) if len(parts) > 1 else _named(parts[0], name)


def _named(W: Matrix, name: str) -> Matrix:
    W.name = name
    return W


def _check_domain(domain) -> tuple[int, ...]:
    """Attribute sizes, each within the ``cells`` limit, at most ``attributes`` of them."""
    if isinstance(domain, int | np.integer):
        domain = (int(domain),)
    domain = tuple(domain)
    if not domain:
        raise ValueError("a domain needs at least one attribute")
    limits.check("attributes", len(domain), "domain: number of attributes")
    return tuple(_check_cells(n, f"domain[{i}]: attribute size") for i, n in enumerate(domain))


def _orders(k, d: int, what: str) -> list[int]:
    """Marginal orders in ``[0, d]``, their ``Σ C(d, k)·d`` Kronecker factors within the limit."""
    orders = [k] if isinstance(k, numbers.Integral) else k
    if not isinstance(orders, list | tuple | range | np.ndarray) or len(orders) == 0:
        raise ValueError(f"{what}: the order must be a whole number or a non-empty list of them, got {k!r}")
    for o in orders:
        # typeshed's numbers.Integral declares no comparison with int; every Integral has one
        if isinstance(o, bool) or not isinstance(o, numbers.Integral) or not 0 <= o <= d:  # type: ignore[operator]
            raise ValueError(f"{what}: marginal order {o!r} is not a whole number in [0, {d}]")
    terms = sum(math.comb(d, int(o)) for o in orders)
    limits.check("factors", terms * d, f"{what}: Kronecker factors ({terms:,} marginals × {d} attributes)")
    return [int(o) for o in orders]


def _factor_count(W) -> int:
    """Kronecker factors of a (union of weighted) product(s); 1 for any other matrix."""
    total, stack = 0, [W]
    while stack:
        M = stack.pop()
        if isinstance(M, VStack):
            stack.extend(M.blocks)
        elif isinstance(M, Weighted):
            stack.append(M.base)
        elif isinstance(M, Kronecker):
            total += len(M.factors)
        else:
            total += 1
    return total
