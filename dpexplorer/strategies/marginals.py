"""The implicit marginal algebra, OPT_M and DataCube (HDMM Sec. 7-8).

A *marginal* of a d-attribute domain ``(n_0, ..., n_{d-1})`` (flattened in C
order) is a subset ``a`` of the attributes, written as a bitmask: attribute
``i`` (``i = 0`` the first, slowest-varying one) is bit ``1 << i``.  Its
query matrix is ``⊗_i (I_{n_i} if i ∈ a else 1ᵀ_{n_i})`` (one query per cell
of the attributes in ``a``; HDMM Def. 20).  Arrays over subsets have length
``2**d`` and are indexed by the bitmask.

Every weighted sum of marginal Grams ``G(u) = Σ_a u_a ⊗_i (I if i ∈ a else J)``
(``J = 1 1ᵀ``) has the same eigenspaces ``E_b``, ``b`` a subset (mean-zero in
the attributes of ``b``, constant in the others), of dimension
``dim_b = Π_{i∈b} (n_i − 1)``, with eigenvalue

    λ_b(u) = Σ_{a ⊇ b} u_a · Π_{i∉a} n_i                      (HDMM Thm 9)

(HDMM, McKenna et al., Sec. 7-8; ``dpexplorer/docs/hdmm.md``).  Hence, for a strategy of marginals with
weights ``θ`` (Gram ``G(θ²)``, ``Δ₁ = Σ θ_a``, ``Δ₂ = sqrt(Σ θ_a²)``, HDMM
Prop. 7-8):

* ``tr(G(u) G(θ²)⁺) = Σ_b dim_b λ_b(u) / λ_b(θ²)`` (HDMM Thm 11);
* ``G(θ²)⁺ = G(φ)`` with ``λ_b(φ) = 1/λ_b(θ²)`` (or 0), ``φ`` by Möbius
  inversion (HDMM Thm 8);
* the SVD bound of a workload with Gram ``G(u)`` is
  ``(Σ_b dim_b √λ_b(u))² / n`` (HDMM Thm 12);
* any (union of weighted) Kronecker product workload has a *marginal
  approximation* ``G(u)`` with the same error under every marginal strategy
  (HDMM Thm 10): each factor Gram ``G_i`` is replaced by ``a_i I + b_i J``
  with the same trace ``t_i`` and total sum ``s_i``.

All transforms are subset / superset sums over the ``2**d`` bitmasks,
``O(d·2^d)``; nothing of size ``n × n`` (or even ``n``, for the error) is
materialised.  MEASURE and RECONSTRUCT act on the data tensor marginal by
marginal.

Public API: :func:`dimensions`, :func:`eigenvalues`, :func:`marginal_weights`,
:func:`is_exact`, :class:`MarginalStrategy`, :class:`MarginalGram`,
:func:`svdb_marginal` (registered with :func:`dpexplorer.core.error.register_svdb_rule`),
:func:`opt_m` (OPT_M, HDMM Sec. 8, Def. 22) and :func:`datacube` (Ding,
Winslett, Han, Li, SIGMOD 2011, BMAX, as evaluated by HDMM Tables 6-7).
Registered mechanisms: ``"opt_m"`` and ``"datacube"``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.optimize
from threadpoolctl import threadpool_limits

from ..core import error, optimization, registry
from ..privacy.noise import NoiseModel
from ..queries.matrix import (
    DENSE_LIMIT,
    Identity,
    Kronecker,
    Matrix,
    MatrixTooLargeError,
    Ones,
    VStack,
    Weighted,
    _check_p,
    as_matrix,
)
from . import templates

__all__ = [
    "dimensions",
    "eigenvalues",
    "marginal_weights",
    "is_exact",
    "MarginalStrategy",
    "MarginalGram",
    "svdb_marginal",
    "opt_m",
    "datacube",
    "datacube_cuboids",
]

#: Largest number of attributes handled (arrays over subsets have 2**d entries).
MAX_ATTRIBUTES = 24

#: Largest factor size whose Gram is checked densely by :func:`is_exact`.
_EXACT_CHECK_LIMIT = 2048


# ==================================================================== domains
def _check_domain(domain) -> tuple[int, ...]:
    """Validate a domain: a non-empty sequence of positive whole numbers."""
    if isinstance(domain, int | np.integer) and not isinstance(domain, bool):
        domain = (int(domain),)
    try:
        dom = tuple(domain)
    except TypeError:
        raise ValueError(f"domain must be a sequence of attribute sizes, got {domain!r}") from None
    if not dom:
        raise ValueError("domain needs at least one attribute")
    out = []
    for v in dom:
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise ValueError(f"attribute sizes must be positive whole numbers, got {dom!r}")
        out.append(int(v))
    if len(out) > MAX_ATTRIBUTES:
        raise ValueError(
            f"{len(out)} attributes: at most {MAX_ATTRIBUTES} are supported "
            f"(arrays over subsets have 2**d entries)")
    return tuple(out)


def _check_subset_array(values, domain, what: str) -> np.ndarray:
    d = len(domain)
    arr = np.asarray(values, dtype=float)
    if arr.shape != (2**d,):
        raise ValueError(
            f"{what} must have shape (2**d,) = ({2**d},) for the {d}-attribute domain "
            f"{domain}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} must be finite (found NaN or inf)")
    return arr


def _attrs(mask: int, d: int) -> list[int]:
    return [i for i in range(d) if mask >> i & 1]


def _mask_sizes(domain) -> np.ndarray:
    """``Π_{i∈a} n_i`` for every mask ``a`` (as floats: n may exceed 2**53)."""
    d = len(domain)
    out = np.ones(2**d)
    idx = np.arange(2**d)
    for i, n in enumerate(domain):
        out *= np.where(idx >> i & 1, float(n), 1.0)
    return out


def _complement_sizes(domain) -> np.ndarray:
    """``Π_{i∉a} n_i`` for every mask ``a``: the number of cells a row of marginal ``a`` sums."""
    return _mask_sizes(domain)[::-1].copy()


# ======================================================== subset-sum transforms
# An array x over masks reshaped to (2,)*d in C order has axis j <-> bit d-1-j.
def _axis_views(X: np.ndarray, ax: int):
    lo: list[slice | int] = [slice(None)] * X.ndim
    hi: list[slice | int] = [slice(None)] * X.ndim
    lo[ax], hi[ax] = 0, 1
    return tuple(lo), tuple(hi)


def _superset_sum(x: np.ndarray, d: int) -> np.ndarray:
    """``y_b = Σ_{a ⊇ b} x_a`` (zeta transform over supersets), O(d·2^d)."""
    X = np.array(x, dtype=float).reshape((2,) * d)
    for ax in range(d):
        lo, hi = _axis_views(X, ax)
        X[lo] += X[hi]
    return X.reshape(-1)


def _subset_sum(x: np.ndarray, d: int) -> np.ndarray:
    """``y_a = Σ_{b ⊆ a} x_b`` (zeta transform over subsets; adjoint of :func:`_superset_sum`)."""
    X = np.array(x, dtype=float).reshape((2,) * d)
    for ax in range(d):
        lo, hi = _axis_views(X, ax)
        X[hi] += X[lo]
    return X.reshape(-1)


def _superset_moebius(y: np.ndarray, d: int) -> np.ndarray:
    """Inverse of :func:`_superset_sum`: ``x_a = Σ_{b ⊇ a} (−1)^{|b|−|a|} y_b``."""
    X = np.array(y, dtype=float).reshape((2,) * d)
    for ax in range(d):
        lo, hi = _axis_views(X, ax)
        X[lo] -= X[hi]
    return X.reshape(-1)


def _kron_bits(pairs: Sequence[npt.ArrayLike]) -> np.ndarray:
    """Array over masks with entry ``Π_i pairs[i][bit i of the mask]``.

    ``pairs[i] = (value if i ∉ a, value if i ∈ a)``; attribute 0 is the least
    significant bit, so the Kronecker product runs from the last attribute.
    """
    out = np.ones(1)
    for p in reversed(pairs):
        out = (out[:, None] * np.asarray(p, dtype=float)[None, :]).reshape(-1)
    return out


# =============================================================== public algebra
def dimensions(domain) -> np.ndarray:
    """Dimension of every eigenspace of the marginal algebra.

    ``dim_b = Π_{i∈b} (n_i − 1)`` (HDMM Thm 9).  The
    dimensions sum to ``n = Π n_i``.

    Parameters
    ----------
    domain : sequence of int, length d
        Attribute sizes ``(n_0, ..., n_{d-1})``.

    Returns
    -------
    ndarray, shape (2**d,)
        Indexed by the bitmask ``b`` (attribute ``i`` is bit ``1 << i``).

    Raises
    ------
    ValueError
        If the domain is empty or has a non-positive size.
    """
    domain = _check_domain(domain)
    return _kron_bits([(1.0, float(n - 1)) for n in domain])


def eigenvalues(domain, u) -> np.ndarray:
    """Eigenvalues of the marginal Gram ``G(u) = Σ_a u_a ⊗_i (I if i ∈ a else J)``.

    ``λ_b(u) = Σ_{a ⊇ b} u_a Π_{i∉a} n_i`` (HDMM Thm 9),
    computed by a superset-sum (zeta) transform in ``O(d·2^d)``.

    Parameters
    ----------
    domain : sequence of int, length d
        Attribute sizes.
    u : array_like, shape (2**d,)
        Marginal weights (of the Gram; a strategy ``θ`` has ``u = θ²``).

    Returns
    -------
    ndarray, shape (2**d,)
        ``λ_b`` on the eigenspace ``b`` of dimension :func:`dimensions`\\ ``[b]``.

    Raises
    ------
    ValueError
        If ``u`` does not have ``2**d`` finite entries.
    """
    domain = _check_domain(domain)
    u = _check_subset_array(u, domain, "u")
    return _superset_sum(u * _complement_sizes(domain), len(domain))


def _weights_from_eigenvalues(domain, lam: np.ndarray) -> np.ndarray:
    """``u`` with ``eigenvalues(domain, u) = lam`` (Möbius inversion of the zeta transform)."""
    return _superset_moebius(lam, len(domain)) / _complement_sizes(domain)


# ============================================================ workload spectrum
@dataclass(frozen=True)
class _Spectrum:
    """Marginal approximation of a workload: weights ``u`` and eigenvalues ``lam``."""

    domain: tuple[int, ...]
    u: np.ndarray
    lam: np.ndarray


def _flatten_factors(factors) -> tuple[float, list[Matrix]] | None:
    """Factors of a Kronecker term with nested (weighted) Kronecker factors expanded."""
    weight = 1.0
    out: list[Matrix] = []
    for f in factors:
        f = as_matrix(f)
        w = 1.0
        while isinstance(f, Weighted) and isinstance(f.base, Kronecker | Weighted):
            w *= f.weight
            f = f.base
        if isinstance(f, Kronecker):
            inner = _flatten_factors(f.factors)
            if inner is None:
                return None
            weight *= w * inner[0]
            out.extend(inner[1])
        else:
            weight *= w
            out.append(f)
    return weight, out


def _terms(W: Matrix):
    """``W`` as a list of ``(weight, [factors])`` with one factor per attribute, or None."""
    if isinstance(W, MarginalStrategy):
        return None  # handled directly
    terms = error.kron_terms(W)
    if terms is None:
        if len(W.domain) == 1:
            terms = [(1.0, [W])]
        else:
            return None
    out = []
    for c, factors in terms:
        flat = _flatten_factors(factors)
        if flat is None:
            return None
        out.append((c * flat[0], flat[1]))
    return out


def _factor_stats(f: Matrix, cache: dict) -> tuple[float, float, int]:
    """Trace ``t = ‖f‖_F²`` and total ``s = ‖f 1‖²`` of a factor's Gram, and its size."""
    if isinstance(f, Identity):
        return float(f.n), float(f.n), f.n
    if isinstance(f, Ones):  # m copies of the total: t = m n, s = m n²
        return float(f.m * f.n), float(f.m) * f.n * f.n, f.n
    key = id(f)
    hit = cache.get(key)
    if hit is not None and hit[0] is f:
        return hit[1]
    t = float(f.frobenius_squared())
    ones_answers = f.matvec(np.ones(f.n))
    s = float(np.dot(ones_answers, ones_answers))
    cache[key] = (f, (t, s, f.n))
    return t, s, f.n


def _spectrum(W) -> _Spectrum | None:
    """Marginal approximation (HDMM Thm 10) of ``W``, or None if ``W`` has no Kronecker form.

    Computed once per workload object and cached on it (like its Gram).
    """
    W = as_matrix(W)
    if "_marginal_spectrum" in W.__dict__:
        return W.__dict__["_marginal_spectrum"]
    sp = _compute_spectrum(W)
    W.__dict__["_marginal_spectrum"] = sp
    return sp


def _compute_spectrum(W: Matrix) -> _Spectrum | None:
    if isinstance(W, MarginalStrategy):
        u = W.theta**2
        return _Spectrum(W.domain, u, eigenvalues(W.domain, u))
    terms = _terms(W)
    if terms is None:
        return None
    domain = tuple(f.n for f in terms[0][1])
    if math.prod(domain) != W.n:
        return None
    d = len(domain)
    if d > MAX_ATTRIBUTES:
        return None
    u = np.zeros(2**d)
    lam = np.zeros(2**d)
    cache: dict = {}
    for c, factors in terms:
        if tuple(f.n for f in factors) != domain:
            return None  # products over different attribute splits
        u_pairs, lam_pairs = [], []
        for f in factors:
            t, s, n = _factor_stats(f, cache)
            if n == 1:
                a, b = t, 0.0
                alpha, beta = t, t
            else:
                b = (s - t) / (n * (n - 1))
                a = t / n - b
                # eigenvalues of a·I + b·J: on mean-zero vectors a, on constants a + n b = s/n;
                # a = (n t − s)/(n(n−1)) ≥ 0 since s = 1ᵀG1 ≤ n·tr(G).  Values that are zero
                # up to rounding (relative to this factor's own scale t/n) are set to exactly
                # 0, so that λ_b = 0 marks exactly the eigenspaces the workload misses.
                alpha = (n * t - s) / (n * (n - 1))
                beta = s / n
                if alpha <= 1e-12 * t / n:
                    alpha = 0.0
                if beta <= 1e-12 * t:
                    beta = 0.0
            u_pairs.append((b, a))
            lam_pairs.append((beta, alpha))
        u += c * c * _kron_bits(u_pairs)
        lam += c * c * _kron_bits(lam_pairs)
    return _Spectrum(domain, u, lam)


def marginal_weights(W) -> tuple[tuple[int, ...], np.ndarray] | None:
    """Marginal approximation ``G(u)`` of a workload (HDMM Thm 10).

    Each factor Gram ``G_i`` of every product ``w_j·(W_j1 ⊗ ... ⊗ W_jd)`` is
    replaced by ``a_i I + b_i J`` with the same trace ``t = ‖W_i‖_F²`` and
    total sum ``s = ‖W_i 1‖²``: ``b_i = (s − t)/(n_i(n_i − 1))``,
    ``a_i = t/n_i − b_i`` (``n_i = 1``: ``a_i = t``, ``b_i = 0``); the product
    expands into ``u_a = Σ_j w_j² Π_{i∈a} a_i Π_{i∉a} b_i``.  Every marginal
    strategy has the same expected error on ``W`` and on ``G(u)``.  Only
    ``t`` and ``s`` of every factor are computed (no ``n × n`` Gram).

    Parameters
    ----------
    W : Matrix, shape (m, n)
        A Kronecker product, a union of weighted Kronecker products, a
        workload over a 1-attribute domain (a 1-factor product), or a
        :class:`MarginalStrategy`.

    Returns
    -------
    (domain, u) or None
        ``domain`` the attribute sizes of the factors (length d), ``u`` of
        shape ``(2**d,)`` (entries may be negative; the eigenvalues are not).
        None if ``W`` has no such form.
    """
    sp = _spectrum(W)
    return None if sp is None else (sp.domain, sp.u.copy())


def _factor_is_exact(f: Matrix) -> bool:
    """Whether the Gram of a factor is ``a·I + b·J`` exactly."""
    if isinstance(f, Identity | Ones):
        return True
    if isinstance(f, Weighted):
        return _factor_is_exact(f.base)
    if isinstance(f, VStack):
        return all(_factor_is_exact(b) for b in f.blocks)
    if isinstance(f, MarginalStrategy) and len(f.domain) == 1:
        return True
    if f.n > _EXACT_CHECK_LIMIT:
        return False
    try:
        if f.n > 1:
            # cheap first look: one row of the Gram, f^T (f e_1)
            e = np.zeros(f.n)
            e[1] = 1.0
            row = f.rmatvec(f.matvec(e))
            off = np.delete(row, 1)
            if not np.allclose(off, off[0], rtol=1e-10, atol=1e-12 * max(abs(row).max(), 1e-300)):
                return False
        G = f.gram().dense()
    except MatrixTooLargeError:
        return False
    n = f.n
    if n == 1:
        return True
    diag = np.diag(G)
    off = G[~np.eye(n, dtype=bool)]
    scale = max(np.abs(G).max(), 1e-300)
    return bool(np.ptp(diag) <= 1e-10 * scale and np.ptp(off) <= 1e-10 * scale)


def is_exact(W) -> bool:
    """Whether ``WᵀW`` lies exactly in the marginal algebra.

    True when ``W`` is a :class:`MarginalStrategy` or a union of weighted
    Kronecker products whose every factor Gram is ``a·I + b·J`` (Identity,
    Total, ``[I; 1ᵀ]``, Ones, their weighted stacks; other factors up to
    2048 cells are checked densely).  Then the marginal approximation of
    :func:`marginal_weights` is exact: ``WᵀW = G(u)`` (HDMM Thm 10 proof).

    Parameters
    ----------
    W : Matrix, shape (m, n)

    Returns
    -------
    bool
        True if ``WᵀW`` is a marginal Gram ``G(u)``; False otherwise, also for
        workloads with no Kronecker form and factors too large to check.
    """
    W = as_matrix(W)
    if isinstance(W, MarginalStrategy):
        return True
    terms = _terms(W)
    if terms is None:
        return False
    return all(_factor_is_exact(f) for _, factors in terms for f in factors)


# ============================================================ tensor helpers
def _marginalize(T: np.ndarray, domain, masks) -> dict[int, np.ndarray]:
    """Marginal tables ``{a: T summed over the attributes not in a}`` of a data tensor.

    ``T`` has shape ``domain + (k,)``; the table of ``a`` has shape
    ``(n_i for i in a) + (k,)``.  Through the data-cube lattice: table ``a``
    is summed from table ``a ∪ {i}``, ``i`` the largest attribute not in
    ``a`` (so intermediate tables shrink fastest), and every intermediate
    table is computed once.
    """
    d = len(domain)
    full = 2**d - 1
    tables: dict[int, np.ndarray] = {full: T}

    def get(a: int) -> np.ndarray:
        if a not in tables:
            i = max((j for j in range(d) if not a >> j & 1), key=lambda j: (domain[j], -j))
            parent = a | (1 << i)
            src = get(parent)
            pos = sum(1 for j in range(i) if parent >> j & 1)
            tables[a] = src.sum(axis=pos)
        return tables[a]

    return {int(a): get(int(a)) for a in masks}


def _broadcast_sum(domain, tables: dict[int, np.ndarray], k: int) -> np.ndarray:
    """``Σ_a ⊗_i (I if i ∈ a else 1) table_a`` over the full domain, shape ``domain + (k,)``.

    Tables are pushed up the lattice one attribute at a time, level by level
    (smallest attribute first, so intermediate tables stay small), each
    broadcast once into a slightly larger table instead of into the full
    domain.
    """
    d = len(domain)
    levels: list[dict[int, np.ndarray]] = [{} for _ in range(d + 1)]
    for a, t in tables.items():
        level = levels[int(a).bit_count()]
        if a in level:
            level[a] = level[a] + t
        else:
            level[a] = np.array(t, dtype=float, copy=True)
    for size in range(d):
        for a, t in levels[size].items():
            i = min((j for j in range(d) if not a >> j & 1), key=lambda j: (domain[j], j))
            parent = a | (1 << i)
            pos = sum(1 for j in range(i) if a >> j & 1)
            shape = list(t.shape)
            shape.insert(pos, domain[i])
            t = np.broadcast_to(np.expand_dims(t, pos), shape)
            up = levels[size + 1]
            if parent in up:
                up[parent] += t
            else:
                up[parent] = np.array(t, dtype=float, copy=True)
        levels[size] = {}
    full = 2**d - 1
    if full not in levels[d]:
        return np.zeros(tuple(domain) + (k,))
    return levels[d][full]


# ================================================================ marginal Gram
class MarginalGram(Matrix):
    """The marginal Gram matrix ``G(u) = Σ_a u_a ⊗_i (I if i ∈ a else J)``, shape ``(n, n)``.

    Kept implicit: products go marginal by marginal over the data tensor,
    eigenvalues come from :func:`eigenvalues` (HDMM Thm 9), the
    pseudo-inverse is again a marginal Gram ``G(φ)`` with
    ``λ_b(φ) = 1/λ_b(u)`` where ``λ_b(u) > 0`` and 0 elsewhere (HDMM Thm 8).

    Parameters
    ----------
    domain : sequence of int, length d
    u : array_like, shape (2**d,)

    Raises
    ------
    ValueError
        If ``u`` has the wrong length or non-finite entries.
    """

    def __init__(self, domain, u, name: str = "marginal_gram"):
        self._dom = _check_domain(domain)
        self.u = _check_subset_array(u, self._dom, "u")
        n = math.prod(self._dom)
        self.shape = (n, n)
        self._name = name
        self._domain = self._dom

    @property
    def eigenvalues(self) -> np.ndarray:
        """``λ_b(u)``, shape ``(2**d,)``."""
        return eigenvalues(self._dom, self.u)

    def _matmat(self, X):
        k = X.shape[1]
        T = X.reshape(self._dom + (k,))
        nz = [int(a) for a in np.flatnonzero(self.u)]
        tabs = _marginalize(T, self._dom, nz)
        out = _broadcast_sum(self._dom, {a: self.u[a] * tabs[a] for a in nz}, k)
        return out.reshape(-1, k)

    _rmatmat = _matmat

    def trace(self):
        # tr ⊗(I or J) = n for every marginal
        return float(self.n * self.u.sum())

    def _pinv_eigenvalues(self) -> np.ndarray:
        """``λ_b(φ)`` of ``G(u)⁺ = G(φ)``: ``1/λ_b(u)`` where ``λ_b(u) > 0``, else 0 (HDMM Thm 8)."""
        lam = self.eigenvalues
        inv = np.zeros_like(lam)
        if np.all(self.u >= 0):  # sums of non-negative terms: zero means exactly zero
            pos = lam > 0
        else:  # cancellation possible: eigenvalues below rounding level count as zero
            pos = lam > 1e-12 * max(np.abs(lam).max(initial=0.0), 1e-300)
        inv[pos] = 1.0 / lam[pos]
        return inv

    def pinv(self):
        inv = self._pinv_eigenvalues()
        return MarginalGram(self._dom, _weights_from_eigenvalues(self._dom, inv), name="marginal_gram⁺")

    def _gram(self):
        # G(u)ᵀ G(u) = G(u)²: eigenvalues squared
        lam = self.eigenvalues
        return MarginalGram(self._dom, _weights_from_eigenvalues(self._dom, lam**2))


# ============================================================ marginal strategy
class MarginalStrategy(Matrix):
    """A strategy of weighted marginals (HDMM Def. 20, Prop. 7-8).

    Rows: for every marginal ``a`` with ``θ_a > 0`` (ascending bitmask), the
    block ``θ_a · ⊗_i (I_{n_i} if i ∈ a else 1ᵀ_{n_i})``, one row per cell
    of the attributes in ``a`` (C order).  Every cell lies in exactly one
    row of each block, so every column has L1 norm ``Σ θ_a`` and L2 norm
    ``sqrt(Σ θ_a²)`` (HDMM Prop. 7), and the Gram is ``G(θ²)`` (Prop. 8).

    Parameters
    ----------
    domain : sequence of int, length d
        Attribute sizes ``(n_0, ..., n_{d-1})``; ``n = Π n_i`` cells.
    theta : array_like, shape (2**d,)
        Non-negative weights indexed by bitmask (attribute ``i`` is bit
        ``1 << i``), at least one positive.

    Attributes
    ----------
    domain : tuple of int
    theta : ndarray, shape (2**d,)
    marginals : list of (int, float)
        ``(bitmask, weight)`` of every measured marginal.

    Raises
    ------
    ValueError
        If the domain is invalid, ``theta`` has the wrong length, a negative
        or non-finite entry, or no positive entry.
    """

    def __init__(self, domain, theta, name: str | None = None):
        dom = _check_domain(domain)
        th = _check_subset_array(theta, dom, "theta")
        if np.any(th < 0):
            bad = int(np.flatnonzero(th < 0)[0])
            raise ValueError(
                f"theta must be non-negative (marginal weights); theta[{bad}] = {th[bad]:g}")
        if not np.any(th > 0):
            raise ValueError("theta needs at least one positive weight (a strategy must measure something)")
        self.theta = th
        self._dom = dom
        self._domain = dom
        self.marginals = [(int(a), float(th[a])) for a in np.flatnonzero(th > 0)]
        self._rows = [int(math.prod(dom[i] for i in _attrs(a, len(dom)))) for a, _ in self.marginals]
        self.shape = (int(sum(self._rows)), int(math.prod(dom)))
        self._name = name or f"marginals(θ, {len(self.marginals)} of {2**len(dom)})"

    @property
    def domain(self):
        return self._dom

    @domain.setter
    def domain(self, value):
        if _check_domain(value) != self._dom:
            raise ValueError(f"a marginal strategy's domain is fixed to {self._dom}")

    # ------------------------------------------------------------ products
    def _matmat(self, X):
        k = X.shape[1]
        T = X.reshape(self._dom + (k,))
        tabs = _marginalize(T, self._dom, [a for a, _ in self.marginals])
        return np.concatenate([w * tabs[a].reshape(-1, k) for a, w in self.marginals], axis=0)

    def _rmatmat(self, Y):
        k = Y.shape[1]
        d = len(self._dom)
        tables = {}
        start = 0
        for (a, w), rows in zip(self.marginals, self._rows, strict=True):
            shape = tuple(self._dom[i] for i in _attrs(a, d)) + (k,)
            tables[a] = w * Y[start:start + rows].reshape(shape)
            start += rows
        return _broadcast_sum(self._dom, tables, k).reshape(-1, k)

    # --------------------------------------------------------- sensitivity
    def column_norms(self, p=1):
        _check_p(p)
        return np.full(self.n, self.sensitivity(p))

    def sensitivity(self, p=1):
        """``Δ₁ = Σ θ_a`` (``p = 1``) or ``Δ₂ = sqrt(Σ θ_a²)`` (``p = 2``), HDMM Prop. 7.

        Raises
        ------
        ValueError
            If ``p`` is not 1 or 2.
        """
        _check_p(p)
        if p == 1:
            return float(self.theta.sum())
        return float(math.sqrt(np.dot(self.theta, self.theta)))

    def frobenius_squared(self):
        return float(self.n * np.dot(self.theta, self.theta))

    def _gram(self):
        return MarginalGram(self._dom, self.theta**2, name=f"gram({self.name})")

    # ---------------------------------------------------- error hooks
    def _workload_spectrum(self, W) -> _Spectrum | None:
        W = as_matrix(W)
        if W.n != self.n:
            raise ValueError(
                f"workload has {W.n} cells but the marginal strategy has {self.n}: "
                f"they must share the domain {self._dom}")
        sp = _spectrum(W)
        if sp is None:
            return None
        if sp.domain != self._dom:
            raise ValueError(
                f"workload attributes {sp.domain} do not match the marginal strategy's "
                f"domain {self._dom}; build the strategy over the workload's domain")
        return sp

    def _inverse_gram(self):
        """``(λ_b(φ), supported)``: eigenvalues of ``G(θ²)⁺ = G(φ)`` and the eigenspaces in its range."""
        gram = self.gram()
        return gram._pinv_eigenvalues(), gram.eigenvalues > 0

    def _unsupported(self, W: Matrix):
        """Message of the UnsupportedWorkloadError for a needed eigenspace ``b`` not measured."""
        d = len(self._dom)
        return lambda b: (
            f"strategy {self.name!r} does not support workload {W.name!r}: the workload "
            f"has a component in the eigenspace of attributes {_attrs(b, d)} "
            f"(mean-zero in them), which no measured marginal covers; add a marginal "
            f"containing those attributes")

    def workload_trace(self, W):
        """``tr(WᵀW G(θ²)⁺) = Σ_b dim_b λ_b(u) / λ_b(θ²)`` (HDMM Thm 10-11).

        Exact for every workload with a marginal approximation ``G(u)``
        (:func:`marginal_weights`): ``G(θ²)⁺`` lies in the marginal algebra,
        where ``tr(WᵀW M) = tr(G(u) M)``.

        Support check (exact, not a tolerance on a residual): the row space
        of ``A`` is the range of ``G(θ²)``, the direct sum of the *whole*
        eigenspaces ``E_b`` with ``λ_b(θ²) > 0`` (``λ_b(θ²)`` is a sum of
        non-negative terms, so it is 0 exactly when no measured marginal
        contains ``b``).  ``W`` is supported iff ``W P_b = 0`` for the others,
        ``P_b`` the projector on ``E_b``; and ``‖W P_b‖_F² = tr(WᵀW P_b) =
        dim_b λ_b(u)`` because ``P_b`` is in the algebra.  ``λ_b(u)`` is
        computed as a sum of products of non-negative factor eigenvalues, so
        no cancellation hides a needed eigenspace.

        Parameters
        ----------
        W : Matrix, shape (m, n)

        Returns
        -------
        float or NotImplemented
            NotImplemented when ``W`` has no marginal approximation (the
            generic dense path of :mod:`dpexplorer.core.error` then applies).

        Raises
        ------
        UnsupportedWorkloadError
            If ``λ_b(θ²) = 0`` for some ``b`` with ``λ_b(u) > 0``.
        ValueError
            If ``W`` is over another domain.
        """
        sp = self._workload_spectrum(W)
        if sp is None:
            return NotImplemented
        lam_inv, supported = self._inverse_gram()
        return _workload_trace(sp, lam_inv, supported, self._unsupported(as_matrix(W)))

    def workload_row_variances(self, W):
        """``diag(W G(θ²)⁺ Wᵀ)`` for a union of Kronecker products, shape ``(m,)``.

        ``G(θ²)⁺ = Σ_c φ_c ⊗_i K_{c,i}`` with ``K = I`` (``i ∈ c``) or ``J``
        (HDMM Thm 8), so for a product ``w·⊗_i W_i`` the row variances are
        ``w² Σ_c φ_c ⊗_i v_{c,i}`` with ``v = diag(W_i W_iᵀ)`` (row squared
        norms) or ``(W_i 1)²`` (squared row sums): a multilinear contraction
        of the ``φ`` tensor, never an ``n × n`` matrix.  Multiply by
        ``v·Δ²`` for the variance in squared counts (HDMM Prop. 4).

        Parameters
        ----------
        W : Matrix, shape (m, n)
            The workload, over the strategy's domain.

        Returns
        -------
        ndarray, shape (m,) or NotImplemented
            In the row order of ``W``; NotImplemented if ``W`` has no
            Kronecker form.

        Raises
        ------
        UnsupportedWorkloadError
            If the strategy does not support ``W``.
        ValueError
            If ``W`` is over another domain (other number of cells or other
            attribute sizes).
        MatrixTooLargeError
            If a factor ``W_i`` other than Identity or Ones has
            ``n_i² > DENSE_LIMIT`` (its row norms are computed densely).
        """
        W = as_matrix(W)
        sp = self._workload_spectrum(W)
        if sp is None:
            return NotImplemented
        lam_inv, supported = self._inverse_gram()
        return _workload_row_variances(W, sp, lam_inv, supported, self._unsupported(W))

    def reconstructor(self):
        """RECONSTRUCT ``y ↦ x̂ = G(θ²)⁺ Aᵀ y`` (least squares, ``x̂ = A⁺ y``), applied implicitly.

        ``Aᵀ y`` broadcasts every marginal block onto the data tensor;
        ``G(θ²)⁺ = G(φ)`` (HDMM Thm 8) is applied as ``Σ_c φ_c``
        (broadcast of the marginal table ``c``), with all marginal tables
        computed through the data-cube lattice: about ``O(2^d · n)`` at
        worst, far less for skewed domains.  Among least-squares solutions
        it returns the minimum-norm one (``A⁺ = (AᵀA)⁺Aᵀ``).

        Returns
        -------
        callable
            ``y: (m,) -> x̂: (n,)``: noisy answers of the ``m`` strategy rows to
            estimated cell counts.  The callable raises ``ValueError`` if ``y``
            does not have shape ``(m,)``.
        """
        gram_pinv = self.gram().pinv()  # G(θ²)⁺ = G(φ), HDMM Thm 8

        def apply(y):
            y = np.asarray(y, dtype=float)
            if y.shape != (self.m,):
                raise ValueError(f"y must have shape ({self.m},), got {y.shape}")
            return gram_pinv.matvec(self._rmatmat(y[:, None])).reshape(-1)

        return apply


def _contract(Phi: np.ndarray, mats: list[np.ndarray]) -> np.ndarray:
    """``out[r_0..r_{d-1}] = Σ_c Phi[c_0..c_{d-1}] Π_i mats[i][c_i, r_i]``, flattened in C order."""
    d = Phi.ndim
    T = Phi
    labels: list[int | tuple[str, int]] = list(range(d))  # current axis -> attribute (or ('r', i) once contracted)
    order = sorted(range(d), key=lambda i: mats[i].shape[1])
    for i in order:
        pos = labels.index(i)
        T = np.tensordot(T, mats[i], axes=([pos], [0]))
        labels.pop(pos)
        labels.append(("r", i))
    perm = [labels.index(("r", i)) for i in range(d)]
    return np.ascontiguousarray(T.transpose(perm)).reshape(-1)


# ================================================= error under an inverse Gram G(φ)
# Shared by MarginalStrategy and fourier.FourierStrategy, whose (AᵀA)⁺ lie in the
# marginal algebra: G(θ²)⁺ = G(φ) with λ_b(φ) = 1/λ_b(θ²) (or 0), and Fourier's
# (AᵀA)⁺ = Σ_{b∈S} P_b with λ_b(φ) = 1 on the measured b ∈ S, 0 elsewhere.
def _check_support(sp: _Spectrum, supported: np.ndarray, unsupported) -> np.ndarray:
    """The eigenspaces ``W`` needs (``λ_b(u) > 0``), raising if one is not ``supported``.

    ``unsupported(b)`` gives the message of the :class:`~dpexplorer.core.error.UnsupportedWorkloadError`
    for the first (smallest bitmask) needed ``b`` outside ``supported``.
    """
    needed = sp.lam > 0
    missing = needed & ~supported
    if np.any(missing):
        raise error.UnsupportedWorkloadError(unsupported(int(np.flatnonzero(missing)[0])))
    return needed


def _workload_trace(sp: _Spectrum, lam_inv: np.ndarray, supported: np.ndarray, unsupported) -> float:
    """``tr(WᵀW G(φ)) = Σ_b dim_b λ_b(u) λ_b(φ)`` after the support check (HDMM Thm 9-11).

    Parameters
    ----------
    sp : _Spectrum
        The workload's marginal approximation ``G(u)`` over the domain ``sp.domain``.
    lam_inv : ndarray, shape (2**d,)
        ``λ_b(φ)``, the eigenvalues of the strategy's ``(AᵀA)⁺ = G(φ)``.
    supported : ndarray of bool, shape (2**d,)
        The eigenspaces ``W`` may have a component in.
    unsupported : callable
        ``b -> str``, the message if a needed ``b`` is not supported.
    """
    needed = _check_support(sp, supported, unsupported)
    dims = dimensions(sp.domain)
    return float(np.sum(dims[needed] * sp.lam[needed] * lam_inv[needed]))


def _row_terms(W: Matrix, domain) -> list:
    """``W`` as ``(weight, [one factor per attribute])`` terms (a MarginalStrategy expanded)."""
    if isinstance(W, MarginalStrategy):
        return [(w, [Identity(n) if a >> i & 1 else Ones(1, n) for i, n in enumerate(domain)])
                for a, w in W.marginals]
    return _terms(W)


def _workload_row_variances(W: Matrix, sp: _Spectrum, lam_inv: np.ndarray, supported: np.ndarray,
                            unsupported) -> np.ndarray:
    """``diag(W G(φ) Wᵀ)``, shape ``(m,)``, after the support check (see :func:`_workload_trace`).

    ``G(φ) = Σ_c φ_c ⊗_i K_{c,i}`` with ``K = I`` (``i ∈ c``) or ``J`` and
    ``φ`` from ``λ(φ)`` by Möbius inversion (HDMM Thm 8), so for a product
    ``w·⊗_i W_i`` the row variances are ``w² Σ_c φ_c ⊗_i v_{c,i}`` with
    ``v = diag(W_i W_iᵀ)`` (row squared norms) or ``(W_i 1)²`` (squared row
    sums): a multilinear contraction of the ``φ`` tensor, never an ``n × n``
    matrix.  ``W`` must have the Kronecker form ``sp`` was computed from.

    Raises
    ------
    UnsupportedWorkloadError
        If a needed eigenspace is not supported.
    MatrixTooLargeError
        If a factor ``W_i`` other than Identity or Ones has
        ``n_i² > DENSE_LIMIT`` (its row norms are computed densely).
    """
    _check_support(sp, supported, unsupported)
    domain = sp.domain
    d = len(domain)
    phi = _weights_from_eigenvalues(domain, lam_inv)
    # axis i of Phi <-> attribute i; index 0: J (i ∉ c), 1: I (i ∈ c)
    Phi = phi.reshape((2,) * d).transpose(tuple(range(d - 1, -1, -1)))
    cache: dict = {}
    out = []
    for c, factors in _row_terms(W, domain):
        mats = [_factor_row_stats(f, cache) for f in factors]
        out.append(c * c * _contract(Phi, mats))
    return np.concatenate(out)


def _factor_row_stats(f: Matrix, cache: dict) -> np.ndarray:
    """``[(f 1)²; diag(f fᵀ)]``, shape ``(2, m_f)``."""
    hit = cache.get(id(f))
    if hit is not None and hit[0] is f:
        return hit[1]
    sums = f.matvec(np.ones(f.n))
    if isinstance(f, Identity):
        sq = np.ones(f.m)
    elif isinstance(f, Ones):
        sq = np.full(f.m, float(f.n))
    else:
        if f.n * f.n > DENSE_LIMIT:
            raise MatrixTooLargeError(
                f"factor {f.name!r} has {f.n} cells: too many for its row norms")
        sq = f.rows_quadratic(np.eye(f.n))
    M = np.vstack([sums**2, sq])
    cache[id(f)] = (f, M)
    return M


# ==================================================================== SVD bound
def svdb_marginal(W) -> float | None:
    """SVD bound of a workload whose Gram lies in the marginal algebra.

    ``SVDB(W) = (Σ_b dim_b √λ_b(u))² / n`` (HDMM Thm 12):
    the singular values of ``W`` are ``√λ_b(u)`` with multiplicity ``dim_b``
    (Li & Miklau 2012, Thm 2).  Registered with
    :func:`dpexplorer.core.error.register_svdb_rule`, so :func:`dpexplorer.core.error.svdb`
    uses it for marginal workloads such as all 3-way marginals of Adult.

    Parameters
    ----------
    W : Matrix, shape (m, n)

    Returns
    -------
    float or None
        The unit-noise bound on the TSE; None unless :func:`is_exact` (other
        workloads keep the Kronecker-product and dense rules).
    """
    W = as_matrix(W)
    if not is_exact(W):
        return None
    sp = _spectrum(W)
    if sp is None:
        return None
    n = float(math.prod(sp.domain))
    s = float(np.dot(dimensions(sp.domain), np.sqrt(np.clip(sp.lam, 0.0, None))))
    return s * s / n


error.register_svdb_rule(svdb_marginal)


# ======================================================================== OPT_M
def _check_noise(noise) -> int:
    # Not templates._norm_of: that one requires a NoiseModel instance and says
    # "NoiseModel" (tests match "noise model"); this accepts any object with norm 1 or 2.
    norm = getattr(noise, "norm", None)
    if norm not in (1, 2):
        raise ValueError(f"noise must be a noise model (dpx.Laplace or dpx.Gaussian), got {noise!r}")
    return norm


class _MarginalObjective:
    """``f(θ) = Δ(θ)² · Σ_b dim_b λ_b(u)/λ_b(θ²)`` and its gradient (HDMM Def. 22).

    ``λ(θ²) = Z(P θ²)`` with ``Z`` the superset sum and ``P_a = Π_{i∉a} n_i``;
    the gradient of the trace term is ``2 θ P ⊙ Zᵀ(−dim λ(u)/λ(θ²)²)`` with
    ``Zᵀ`` the subset sum, so one evaluation is ``O(d·2^d)``.
    Laplace: ``Δ = Σ θ``; Gaussian: ``Δ² = Σ θ²`` (HDMM Prop. 7).
    """

    def __init__(self, sp: _Spectrum, norm: int):
        self.d = len(sp.domain)
        self.P = _complement_sizes(sp.domain)
        self.mask = sp.lam > 0
        self.c = np.where(self.mask, dimensions(sp.domain) * sp.lam, 0.0)
        self.norm = norm
        self.evaluations = 0

    def trace_term(self, theta):
        lam = _superset_sum(self.P * theta**2, self.d)
        lm = lam[self.mask]
        if np.any(lm <= 0):
            return math.inf, lam
        return float(np.sum(self.c[self.mask] / lm)), lam

    def __call__(self, theta):
        self.evaluations += 1
        T, lam = self.trace_term(theta)
        if not math.isfinite(T):
            return 1e300, np.zeros_like(theta)
        g_lam = np.zeros_like(lam)
        g_lam[self.mask] = -self.c[self.mask] / lam[self.mask] ** 2
        gT = 2.0 * theta * self.P * _subset_sum(g_lam, self.d)
        if self.norm == 1:
            D = float(theta.sum())
            return D * D * T, 2.0 * D * T + D * D * gT
        D2 = float(np.dot(theta, theta))
        return D2 * T, 2.0 * theta * T + D2 * gT


def _progress_callback(trace: list, stage: str, total: int):
    """An L-BFGS-B callback recording the objective per iteration and reporting progress."""

    def callback(intermediate_result):
        trace.append(float(intermediate_result.fun))
        optimization.report(stage, len(trace), total, trace[-1])

    return callback


def _opt_m_restart(fun, x0, bounds, r: int, restarts: int, maxiter: int, best, finals: list):
    """One L-BFGS-B run of OPT_M from ``x0``; returns the better of it and ``best``."""
    trace: list[float] = []
    callback = _progress_callback(trace, f"opt_m restart {r + 1}/{restarts}", maxiter)
    res = scipy.optimize.minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=bounds,
                                  callback=callback, options={"maxiter": int(maxiter)})
    theta = np.clip(res.x, 0.0, None)
    value = fun(theta)[0]
    finals.append(value)
    optimization.report("opt_m", r + 1, restarts, value)
    if best is None or value < best[0]:
        return (value, theta, np.asarray(trace), res)
    return best


def opt_m(W, noise: NoiseModel, restarts: int = 5, seed: int = 0, maxiter: int = 2000,
          theta0=None) -> optimization.OptimizationResult:
    """OPT_M: the best weighted marginal strategy for a workload (HDMM Sec. 8, Def. 22).

    Minimises the unit-noise TSE ``Δ_p(θ)² · Σ_b dim_b λ_b(u)/λ_b(θ²)`` over
    ``θ ≥ 0`` (``2**d`` weights), where ``G(u)`` is the marginal
    approximation of ``W`` (HDMM Thm 10-11): Laplace
    ``Δ₁ = Σ θ_a``, Gaussian ``Δ₂² = Σ θ_a²`` (HDMM Prop. 7).  scipy's
    L-BFGS-B with the analytic gradient (subset-sum transforms, ``O(d·2^d)``
    per evaluation; the domain of ``n`` cells is never touched); initial
    weights uniform on ``[0, 1)`` from ``numpy.random.default_rng(seed)``
    (as HDMM's reference code), ``restarts`` runs, the best kept.

    Parameters
    ----------
    W : Matrix, shape (m, n)
        A union of weighted Kronecker products (or a 1-attribute workload).
    noise : NoiseModel
        ``Laplace`` (L1 sensitivity) or ``Gaussian`` (L2).
    restarts : int
        Number of random initialisations (≥ 1).
    seed : int
        Seed (≥ 0) of the Generator drawing the initialisations.
    maxiter : int
        L-BFGS-B iteration limit per restart (≥ 1).
    theta0 : array_like, shape (2**d,), optional
        A first initialisation tried before the random ones (e.g. a DataCube
        selection); counts as one restart.

    Returns
    -------
    OptimizationResult
        ``strategy`` a :class:`MarginalStrategy` normalised to ``Δ_p = 1``,
        ``objective`` its unit TSE ``Δ_p(A)² tr(WᵀW (AᵀA)⁺)`` (multiply by
        ``noise.variance_per_unit`` for squared counts), ``trace`` the
        objective per iteration of the best restart, ``restarts`` every
        restart's final objective.

    Raises
    ------
    NotApplicableError
        If ``W`` has no marginal approximation (not a union of Kronecker products).
    ValueError
        For a bad noise model, ``restarts < 1``, ``maxiter < 1`` (or not whole
        numbers) or a negative or non-integer ``seed``.
    """
    t0 = time.perf_counter()
    norm = _check_noise(noise)
    restarts = templates._check_count(restarts, "restarts", allow_none=False)
    maxiter = templates._check_count(maxiter, "maxiter", allow_none=False)
    seed = templates._check_seed(seed)
    W = as_matrix(W)
    sp = _spectrum(W)
    if sp is None:
        raise registry.NotApplicableError(
            f"OPT_M needs a union of Kronecker products (or a 1-attribute workload); "
            f"{W.name!r} has no marginal approximation")
    d = len(sp.domain)
    rng = np.random.default_rng(seed)
    fun = _MarginalObjective(sp, norm)
    starts = []
    if theta0 is not None:
        th0 = _check_subset_array(theta0, sp.domain, "theta0")
        if np.any(th0 < 0):
            raise ValueError("theta0 must be non-negative")
        starts.append(th0)
    bounds = [(0.0, None)] * (2**d)
    best: tuple | None = None  # (value, theta, trace, result) of the best restart so far
    finals: list[float] = []
    # the loop is sequential work on vectors of 2**d entries: BLAS threads only
    # add contention (L-BFGS-B ran 100x slower with them on a loaded 2-core machine)
    with threadpool_limits(limits=1, user_api="blas"):
        for r in range(restarts):
            x0 = starts[r] if r < len(starts) else rng.random(2**d)
            best = _opt_m_restart(fun, x0, bounds, r, restarts, maxiter, best, finals)
    assert best is not None  # restarts >= 1 (checked above), so the loop ran
    value, theta, trace, res = best
    scale = MarginalStrategy(sp.domain, theta).sensitivity(norm)
    strategy = MarginalStrategy(sp.domain, theta / scale, name="opt_m")
    return optimization.OptimizationResult(
        strategy=strategy, objective=float(value), trace=trace, restarts=np.asarray(finals),
        seconds=time.perf_counter() - t0, seed=seed, method="opt_m",
        info={"norm": norm, "marginals": len(strategy.marginals), "parameters": 2**d,
              "evaluations": fun.evaluations, "iterations": int(res.nit),
              "converged": bool(res.success), "message": str(res.message)})


# ===================================================================== DataCube
def datacube_cuboids(W) -> tuple[tuple[int, ...], list[int]]:
    """The cuboids (marginals) of an unweighted marginal workload, in HDMM's order.

    Parameters
    ----------
    W : Matrix, shape (m, n)
        A union of Kronecker products with weight 1 whose factors are
        Identity, Total (``1ᵀ``) or ``[I; 1ᵀ]`` (which expands into both),
        or a :class:`MarginalStrategy` with weights 0 or 1.

    Returns
    -------
    (domain, cuboids)
        ``domain`` : tuple of int, the attribute sizes (length d);
        ``cuboids`` : list of int, the cuboid bitmasks, each once, ordered as HDMM's reference code
        lists them (key with attribute 0 as the most significant bit).

    Raises
    ------
    NotApplicableError
        For weighted, repeated or non-marginal queries (e.g. prefix-marginals).
    """
    W = as_matrix(W)
    if isinstance(W, MarginalStrategy):
        if not np.all(np.isin(W.theta, (0.0, 1.0))):
            raise registry.NotApplicableError("DataCube needs unweighted marginals (weights 0 or 1)")
        domain, cuboids = W.domain, [a for a, _ in W.marginals]
    else:
        terms = _terms(W)
        if terms is None:
            raise registry.NotApplicableError(
                f"DataCube applies to (unweighted) marginal workloads; {W.name!r} is not a "
                f"union of Kronecker products")
        domain = tuple(f.n for f in terms[0][1])
        cuboids = []
        for c, factors in terms:
            if not math.isclose(c, 1.0, rel_tol=1e-12):
                raise registry.NotApplicableError(
                    f"DataCube applies to unweighted marginals; a product has weight {c:g}")
            if tuple(f.n for f in factors) != domain:
                raise registry.NotApplicableError("DataCube: products over different attribute splits")
            options = [_cuboid_options(f) for f in factors]
            if any(o is None for o in options):
                raise registry.NotApplicableError(
                    f"DataCube applies to (unweighted) marginal workloads only: every factor must "
                    f"be Identity, Total or [I; 1ᵀ] ({W.name!r} is not; HDMM Tables 6-7 give '-')")
            masks = [0]
            for i, opts in enumerate(options):
                masks = [m | (bit << i) for m in masks for bit in opts]
            cuboids.extend(masks)
        if len(set(cuboids)) != len(cuboids):
            raise registry.NotApplicableError("DataCube needs a set of distinct marginals (one repeats)")
    d = len(domain)
    hdmm_key = [sum(1 << (d - 1 - i) for i in _attrs(a, d)) for a in cuboids]
    order = np.argsort(hdmm_key, kind="stable")
    return domain, [cuboids[j] for j in order]


def _cuboid_options(f: Matrix):
    """Bits a factor contributes: Identity (1,), Total (0,), [I; 1ᵀ] (1, 0)."""
    if isinstance(f, Weighted):
        return _cuboid_options(f.base) if f.weight == 1 else None
    if isinstance(f, Identity):
        return (1,)
    if isinstance(f, Ones) and f.m == 1:
        return (0,)
    if isinstance(f, VStack):
        out = []
        for b in f.blocks:
            o = _cuboid_options(b)
            if o is None:
                return None
            out.extend(o)
        return tuple(out) if len(set(out)) == len(out) else None
    return None


class _GreedyCover:
    """Greedy set cover of the workload's cuboids (the inner step of BMAX).

    Cuboid ``C`` can answer ``c`` if ``c ⊆ C``, by aggregating
    ``agg(C, c) = |C|/|c| = Π_{i ∈ C∖c} n_i`` noisy cells.  For an
    aggregation limit the greedy picks, until every cuboid is covered, the
    cuboid covering most uncovered ones (first maximum in list order, as
    HDMM's reference code).  The pick sequence depends on the limit only, so
    it is computed once per distinct effective limit.
    """

    def __init__(self, cuboids, domain):
        d = len(domain)
        L = len(cuboids)
        agg = np.full((L, L), np.inf)
        for j, C in enumerate(cuboids):
            for k, c in enumerate(cuboids):
                if c & C == c:
                    agg[j, k] = math.prod(domain[i] for i in _attrs(C & ~c, d))
        self.agg = agg
        self.values = np.unique(agg[np.isfinite(agg)])
        self.cuboids = list(cuboids)
        self._cache: dict[int, list[int] | None] = {}

    def picks(self, limit: float) -> list[int] | None:
        """Greedy picks (cuboid bitmasks) covering all with ``agg ≤ limit``, or None."""
        key = int(np.searchsorted(self.values, limit, side="right"))
        if key not in self._cache:
            self._cache[key] = self._greedy(self.values[key - 1] if key else -1.0)
        return self._cache[key]

    def _greedy(self, limit: float) -> list[int] | None:
        B = self.agg <= limit  # B[j, k]: cuboid j covers cuboid k
        L = B.shape[0]
        if not np.all(B.any(axis=0)):
            return None
        uncovered = np.ones(L, dtype=bool)
        gains = B.sum(axis=1).astype(np.int64)
        chosen = []
        while uncovered.any():
            j = int(np.argmax(gains))
            new = B[j] & uncovered
            gains -= B[:, new].sum(axis=1)
            uncovered &= ~new
            chosen.append(self.cuboids[j])
        return chosen


def datacube(W, noise: NoiseModel | None = None, selection_norm: int = 2) -> MarginalStrategy:
    """DataCube: BMAX selection of cuboids to materialise (Ding, Winslett, Han, Li, SIGMOD 2011).

    Chooses a subset ``S`` of the workload's cuboids to measure (equal
    budget each) so that the largest noise variance over the workload's
    cuboids, each answered by aggregating the smallest measured cuboid
    containing it, is small: binary search on the bound ``θ`` and, for
    every ``s``, a greedy set cover with at most ``s`` cuboids where ``C``
    covers ``c ⊆ C`` if ``s^k·|C|/|c| ≤ θ`` (Ding et al. 2011, BMAX; its
    greedy cover gives a max error within ``(ln|L| + 1)²`` of the optimum).

    Conventions of HDMM's evaluation (reference code of McKenna et al.,
    ``experiments/journal/datacube.py``; HDMM Sec. 11, Tables 6-7): the
    candidates are the workload's cuboids, listed with attribute 0 as the
    most significant bit; the variance exponent is ``k = 1``
    (``selection_norm=2``, used for both tables; see below for ``k``); the search runs ``θ`` over
    ``[0, 2|L|²]`` until the bracket is at most 1 wide, trying every ``s``
    at each midpoint (the bracket moves with the result of the largest
    ``s``; the selection kept is the last feasible one found).  The
    selected cuboids become a :class:`MarginalStrategy` with equal weights,
    answered by least squares (the matrix mechanism), whose error HDMM
    reports.

    The exponent ``k = 2/p = 3 − p`` (``p = selection_norm``).  Ding et al.
    2011's selection rule is not restated from that paper; ``k`` is derived
    here instead: ``s`` cuboids measured with
    weight 1 have ``Δ₁ = s`` and ``Δ₂ = √s`` (HDMM Prop. 7); the noise
    variance of one measured cell is ``2Δ₁²/ε²`` (Laplace) or ``Δ₂²c²``
    (Gaussian) (HDMM Def. 7-8; ``dpexplorer/docs/noise.md``), i.e. ``∝ Δ_p² = s^(2/p)``; answering ``c``
    from ``C ⊇ c`` sums ``|C|/|c|`` independent noisy cells, so the variance
    of a cuboid is ``∝ s^(2/p)·|C|/|c|``: ``s²·|C|/|c|`` for Laplace (BMAX's
    ε-DP setting, ``selection_norm=1``) and ``s·|C|/|c|`` for Gaussian (the
    L2 adaptation of Li & Miklau, PVLDB 2012, Sec. 5 "Competing Approaches":
    "sensitivity is measured under L_2 instead of L_1"; ``selection_norm=2``,
    HDMM's reference evaluation convention).  Note: with ``k = 2`` the first
    midpoint ``θ = |L|²`` is already feasible for ``s = |L|`` (limit 1: every
    cuboid measured), the last ``s`` tried; if some smaller ``s`` is
    infeasible there the bracket closes (``lo = hi = θ``) and every cuboid is
    selected (e.g. all 32 of CPS All Marginals), not the BMAX optimum.

    Parameters
    ----------
    W : Matrix, shape (m, n)
        An unweighted marginal workload (see :func:`datacube_cuboids`).
    noise : NoiseModel, optional
        Unused by the selection (kept for the registry's builder signature,
        which passes it).
    selection_norm : {1, 2}
        ``p`` of the sensitivity the budget split is measured in: 2: variance
        ``∝ s·|C|/|c|`` (Gaussian, HDMM's setting); 1: ``∝ s²·|C|/|c|``
        (Laplace, as in Ding et al.).

    Returns
    -------
    MarginalStrategy
        Weight 1 on every selected cuboid.

    Raises
    ------
    NotApplicableError
        If ``W`` is not an unweighted marginal workload.
    ValueError
        If ``selection_norm`` is not 1 or 2.
    """
    if selection_norm not in (1, 2):
        raise ValueError(f"selection_norm must be 1 or 2, got {selection_norm!r}")
    domain, cuboids = datacube_cuboids(W)
    exponent = 3 - selection_norm  # k = 2/p for p ∈ {1, 2}: variance ∝ Δ_p² = s^(2/p)
    cover = _GreedyCover(cuboids, domain)
    lo, hi = 0.0, 2.0 * len(cuboids) ** 2
    selected = None
    while abs(hi - lo) > 1:
        mid = (lo + hi) / 2
        for s in range(1, len(cuboids) + 1):
            picks = cover.picks(math.floor(mid / float(s) ** exponent))
            if picks is not None and len(picks) <= s:  # feasible with at most s cuboids
                selected = picks
                hi = mid
            else:
                lo = mid
    if selected is None:  # pragma: no cover - s = |L| at θ = 2|L|² is always feasible
        selected = list(cuboids)
    theta = np.zeros(2 ** len(domain))
    theta[list(set(selected))] = 1.0
    return MarginalStrategy(domain, theta, name="datacube")


# ================================================================== registry
def _build_opt_m(W, noise, restarts=5, seed=0, maxiter=2000):
    return optimization.attach(opt_m(W, noise, restarts=restarts, seed=seed, maxiter=maxiter))


def _build_datacube(W, noise, selection_norm=2):
    return datacube(W, noise, selection_norm=selection_norm)


registry.register(registry.Mechanism(
    "opt_m", "OPT_M", _build_opt_m,
    "Weighted marginals optimised for the workload's marginal approximation (L-BFGS-B, restarts).",
    "McKenna et al., HDMM, Sec. 8, Def. 22, Thm 10-11", params={"restarts": 5, "seed": 0},
    optimizer=True, audit=registry.AuditSpec(workload="marginals")))

registry.register(registry.Mechanism(
    "datacube", "DataCube",
    _build_datacube,
    "Greedy (BMAX) choice of cuboids to measure for a marginal workload, answered by least squares.",
    "Ding, Winslett, Han, Li, SIGMOD 2011 (BMAX); HDMM Sec. 11, Tables 6-7",
    params={"selection_norm": 2}, audit=registry.AuditSpec(workload="marginals")))
