"""Structured spectra of 1D workload Grams and the SVD bound they give.

The SVD bound ``SVDB(W) = (Σ_i σ_i(W))² / n`` (Li & Miklau 2012, Thm 2; HDMM
Def. 11, Prop. 5; ``dpexplorer/docs/svd_bound.md``) needs only the eigenvalues of the Gram
``WᵀW``.  For the 1D range workloads they have closed forms or a structure that
needs no ``n × n`` eigendecomposition:

* **All Range**: ``(WᵀW)_ij = (min(i,j)+1)(n−max(i,j)) = (n+1)·[T⁻¹]_ij``, with
  ``T = tridiag(−1, 2, −1)`` the ``n × n`` second-difference (Dirichlet
  Laplacian) matrix, whose Green's function this is.  ``T`` has eigenvalues
  ``4 sin²(kπ / (2(n+1)))``, ``k = 1..n`` (eigenvectors
  ``sin((i+1)kπ/(n+1))``, DST-I), so ``λ_k = (n+1) / (4 sin²(kπ / (2(n+1))))``.
* **Prefix**: ``P`` (lower triangular ones) has ``P⁻¹ = I − S`` (first
  differences), so ``(PᵀP)⁻¹ = P⁻¹P⁻ᵀ`` is ``tridiag(−1, 2, −1)`` with the
  first diagonal entry 1 (one free end): eigenvalues
  ``4 sin²((2k−1)π / (2(2n+1)))``, hence
  ``λ_k = 1 / (4 sin²((2k−1)π / (2(2n+1))))``, ``k = 1..n``.
* **Width w** (the ``N = n−w+1`` windows ``[i, i+w−1]``): no closed form.  ``W``
  is the first ``N`` rows of the ``n × n`` circulant ``C`` of the cyclic
  window sums, so ``WᵀW = CᵀC − UᵀU`` with ``U`` the ``w−1`` wrap-around rows.
  ``CᵀC`` has eigenvalues ``μ_k = |p(ω^k)|² = sin²(πkw/n) / sin²(πk/n)``
  (``μ_0 = w²``), ``p(z) = 1 + z + … + z^{w−1}``, ``ω = e^{2πi/n}``.  With
  ``φ(x) = log det(WᵀW + x) − log det(CᵀC + x)`` and
  ``√λ = (1/π)∫₀^∞ λ/(λ+s) s^{−1/2} ds``, integration by parts gives
  ``Σ_i √(λ_i + t) = Σ_k √(μ_k + t) + (1/(2π)) ∫₀^∞ s^{−1/2} φ(s + t) ds``.
  By the matrix determinant lemma ``φ(x) = log det(x · [(CᵀC + x)⁻¹]_UU)``, the
  ``(w−1) × (w−1)`` Toeplitz block with entries
  ``g_d(x) = (1/n) Σ_k ω^{kd} / (μ_k + x)``.  On the unit circle
  ``1/(μ(z) + x) = z^{w−1} / Q(z)``, ``Q(z) = p(z)² + x z^{w−1}`` (degree
  ``2w−2``), and summing a rational function over the ``n``-th roots of unity
  by residues gives the exact finite-``n`` value
  ``g_d(x) = Σ_j r_j^{d+w−2} / Q'(r_j) · r_j^n / (1 − r_j^n)`` over the roots
  ``r_j`` of ``Q``.  The integral runs on ``s = e^{2u}`` with the trapezoidal
  rule (geometric convergence: the integrand is analytic in the strip
  ``|Im u| < π/2``) and the asymptotic forms of ``φ`` at both ends.  Cost:
  ``O(n)`` for the ``μ_k`` plus ``O(w³)`` per node, independent of ``n``.

Workloads built from such blocks combine exactly when their Grams commute:
on every attribute all factor Grams must be ``a·G + c·I`` for one base Gram
``G`` (identity factors commute with anything; a Total factor's ``J`` has the
eigenbasis ``{1, 1⊥}``).  Then the union ``∪_j w_j (W_j1 ⊗ … ⊗ W_jd)`` has the
eigenvalues ``Σ_j w_j² Π_i (a_ji λ_i(k_i) + c_ji)`` over all multi-indices
``k`` (HDMM Thm 6 for the Kronecker products; the Grams of the terms share the
eigenvectors ``⊗_i v_i(k_i)``).  :func:`svdb_structured` is registered with
:func:`dpexplorer.core.error.register_svdb_rule`; workloads outside this family
keep the other rules and the dense path.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import cast

import numpy as np
import scipy.linalg

from ..queries.matrix import (
    DENSE_LIMIT,
    AllRange,
    Identity,
    Matrix,
    MatrixTooLargeError,
    Ones,
    Permutation,
    Prefix,
    Product,
    RangeQueries,
    VStack,
    Weighted,
    as_matrix,
)
from . import error

__all__ = [
    "all_range_eigenvalues",
    "prefix_eigenvalues",
    "svdb_structured",
    "width_eigenvalues",
    "width_sum_sqrt",
]

#: Widths up to this use the structured (residue) method for large domains;
#: it costs O(w³) per quadrature node.
WIDTH_MAX_STRUCTURED = 128
#: Below this many windows the width spectrum is computed densely (from ``WWᵀ``).
WIDTH_DENSE_BELOW = 512
#: Largest number of multi-indices a union of products is summed over.
GRID_LIMIT = DENSE_LIMIT


# ================================================================ closed forms
def all_range_eigenvalues(n: int) -> np.ndarray:
    """Eigenvalues of the All Range Gram, ``λ_k = (n+1) / (4 sin²(kπ/(2(n+1))))``, ``k = 1..n``.

    Derivation in the module docstring (Green's function of the Dirichlet
    second-difference matrix).  Returned in the order ``k = 1..n``
    (decreasing), shape ``(n,)``.
    """
    k = np.arange(1, n + 1)
    return (n + 1) / (4.0 * np.sin(k * np.pi / (2.0 * (n + 1))) ** 2)


def prefix_eigenvalues(n: int) -> np.ndarray:
    """Eigenvalues of the Prefix Gram, ``λ_k = 1 / (4 sin²((2k−1)π/(2(2n+1))))``, ``k = 1..n``.

    ``(PᵀP)⁻¹`` is the second-difference matrix with one free end (module
    docstring).  Shape ``(n,)``, decreasing.
    """
    k = np.arange(1, n + 1)
    return 1.0 / (4.0 * np.sin((2 * k - 1) * np.pi / (2.0 * (2 * n + 1))) ** 2)


def _width_dense(n: int, w: int) -> np.ndarray:
    """Eigenvalues of the width-``w`` Gram: those of the ``N × N`` Toeplitz ``WWᵀ``
    (entries ``max(0, w − |i − j|)``, ``N = n − w + 1``) and ``w − 1`` zeros."""
    N = n - w + 1
    _check_dense(N, f"the width-{w} Gram over {n} cells")
    col = np.maximum(0, w - np.arange(N)).astype(float)
    lam = np.linalg.eigvalsh(scipy.linalg.toeplitz(col))
    return np.concatenate([np.zeros(n - N), np.clip(lam, 0.0, None)])


def _check_dense(k: int, what: str) -> None:
    if k * k > DENSE_LIMIT:
        raise MatrixTooLargeError(f"{what} would need a dense {k} × {k} eigendecomposition")


def width_eigenvalues(n: int, w: int) -> np.ndarray:
    """Eigenvalues of the Gram of the width-``w`` ranges over ``n`` cells (dense; ascending).

    Computed from the ``N × N`` Toeplitz ``WWᵀ``, ``N = n − w + 1``.

    Raises
    ------
    MatrixTooLargeError
        If that Gram is too large to decompose densely.
    """
    return _width_dense(*_check_width(n, w))


def _check_width(n, w) -> tuple[int, int]:
    n, w = int(n), int(w)
    if not 1 <= w <= n:
        raise ValueError(f"width w = {w} must lie in [1, n] (n = {n})")
    return n, w


# ========================================================= width: residue method
def _circulant_eigenvalues(n: int, w: int) -> np.ndarray:
    """``μ_k = sin²(πkw/n) / sin²(πk/n)``, ``μ_0 = w²``: eigenvalues of the cyclic window Gram ``CᵀC``."""
    k = np.arange(1, n)
    num = np.sin(np.pi * ((k * w) % n) / n)  # exact argument reduction
    den = np.sin(np.pi * k / n)
    return np.concatenate([[float(w * w)], (num / den) ** 2])


class _WidthBoundary:
    """``φ(x) = log det(x·[(CᵀC + x)⁻¹]_UU)`` for the width-``w`` windows over ``n`` cells (module docstring)."""

    def __init__(self, n: int, w: int):
        self.n, self.w = n, w
        self.p = np.ones(w)  # p(z) = 1 + z + ... + z^{w-1} (all coefficients one)
        self.dp = np.arange(w - 1, 0, -1, dtype=float)  # p'(z), highest power first
        self.q0 = np.convolve(self.p, self.p)  # p(z)², degree 2w − 2
        self.d = np.arange(w - 1)

    def _roots(self, x: float) -> np.ndarray:
        q = self.q0.copy()
        q[self.w - 1] += x  # + x z^{w-1} (the middle coefficient: p² is palindromic)
        r = np.roots(q)
        for _ in range(3):  # Newton polish with p evaluated directly (accurate near |z| = 1)
            pz, dpz = np.polyval(self.p, r), np.polyval(self.dp, r)
            zw = r ** (self.w - 2)
            r = r - (pz * pz + x * zw * r) / (2.0 * pz * dpz + x * (self.w - 1) * zw)
        return r

    def g(self, x: float) -> np.ndarray:
        """``g_d(x) = (1/n) Σ_k ω^{kd} / (μ_k + x)`` for ``d = 0..w−2``, by residues."""
        w, n = self.w, self.n
        r = self._roots(x)
        pz, dpz = np.polyval(self.p, r), np.polyval(self.dp, r)
        dQ = 2.0 * pz * dpz + x * (w - 1) * r ** (w - 2)
        out = np.abs(r) > 1.0
        alias = np.empty_like(r)
        with np.errstate(over="ignore", under="ignore"):
            rn = r[~out] ** n
            alias[~out] = rn / (1.0 - rn)
            alias[out] = -1.0 / (1.0 - r[out] ** (-n))
        coef = alias / dQ * r ** (w - 2)
        return (coef[None, :] * r[None, :] ** self.d[:, None]).sum(axis=1).real

    def phi(self, x: float) -> float:
        """``φ(x)`` (NaN if the Toeplitz block is numerically singular)."""
        col = x * self.g(x)
        c, info = scipy.linalg.lapack.dpotrf(scipy.linalg.toeplitz(col), lower=1)
        if info != 0:
            return math.nan
        return float(2.0 * np.log(np.diag(c)).sum())


def width_sum_sqrt(n: int, w: int, shift: float = 0.0, h: float = 0.3) -> float:
    """``Σ_i √(λ_i + shift)`` over the ``n`` eigenvalues ``λ_i`` of the width-``w`` Gram.

    The structured (residue) method of the module docstring when the domain
    is large and ``w ≤`` :data:`WIDTH_MAX_STRUCTURED`, else dense.
    ``shift = 0`` gives the nuclear norm ``Σ σ_i(W)``.  Relative accuracy
    1e-11 or better (tests compare with dense singular values).

    Parameters
    ----------
    n, w : int
        Domain size and window width, ``1 ≤ w ≤ n``.
    shift : float
        Non-negative ``t`` (a union with ``t``·Identity has Gram ``WᵀW + t I``).
    h : float
        Trapezoidal step in ``u = log(s)/2``.

    Raises
    ------
    ValueError
        Bad ``n``, ``w`` or a negative shift.
    MatrixTooLargeError
        If the structured method does not apply (or loses precision) and the
        dense ``N × N`` Gram is too large.
    """
    n, w = _check_width(n, w)
    t = float(shift)
    if not (math.isfinite(t) and t >= 0):
        raise ValueError(f"shift must be a non-negative number, got {shift!r}")
    N = n - w + 1
    if w == 1:
        return n * math.sqrt(1.0 + t)
    if N >= WIDTH_DENSE_BELOW and w <= WIDTH_MAX_STRUCTURED:
        value = _width_structured(n, w, t, h)
        if value is not None:
            return value
    return float(np.sqrt(_width_dense(n, w) + t).sum())


def _width_structured(n: int, w: int, t: float, h: float) -> float | None:
    """The residue method of :func:`width_sum_sqrt`; None if rounding defeats it."""
    N = n - w + 1
    mu = _circulant_eigenvalues(n, w)
    base = float(np.sqrt(mu + t).sum())
    bnd = _WidthBoundary(n, w)
    # φ(x) ~ b·log x as x → 0 (t = 0): WᵀW has w − 1 zero eigenvalues, CᵀC gcd(n, w) − 1
    b = (w - math.gcd(n, w)) if t == 0 else 0
    # φ(x) = c1/x + c2/x² + O(x⁻³) as x → ∞, c1 = tr WᵀW − tr CᵀC, 2·c2 = ‖CᵀC‖² − ‖WᵀW‖²
    d = np.arange(1, min(w, N))
    frob_w = N * w * w + 2.0 * float(((N - d) * (w - d) ** 2.0).sum())  # ‖WWᵀ‖_F², Toeplitz
    c1 = float(N * w - n * w)
    c2 = 0.5 * (float((mu * mu).sum()) - frob_w)
    tol = 1e-15 * base
    total = 0.0
    k_top = math.ceil(math.log(w * w + t + 1.0) / (2 * h))  # the spectrum lies below w²
    k = k_top
    last, falling = math.inf, 0
    while True:  # upwards until φ follows its asymptote (or rounding would dominate)
        u = k * h
        x = math.exp(2 * u) + t
        ph = bnd.phi(x)
        if not math.isfinite(ph):
            return None
        gap = math.exp(u) * abs(ph - c1 / x - c2 / x**2)
        if gap > last and falling >= 3:  # rounding dominates: the asymptote is better
            u -= h
            break
        total += math.exp(u) * ph
        if gap < tol or k > k_top + 200:
            break
        falling = falling + 1 if gap < last else 0
        last = gap
        k += 1
    for j in range(1, 200):  # upper tail from the asymptote
        v = u + j * h
        x = math.exp(2 * v) + t
        total += math.exp(v) * (c1 / x + c2 / x**2)
    low: list[tuple[float, float]] = []
    last, falling = math.inf, 0
    k = k_top - 1
    while k > k_top - 400:  # downwards until φ is b·log x + const + O(x) and the rest negligible
        u = k * h
        ph = bnd.phi(math.exp(2 * u) + t)
        if not math.isfinite(ph):  # numerically singular block: the tail model takes over
            break
        if low:
            # the O(x) part of φ shrinks by e^{-2h} per step; when it grows, rounding
            # (the block is near-singular for tiny x) dominates: stop before this node
            step = abs(low[-1][1] - ph - 2 * b * h)
            if step > last and falling >= 3:
                break
            falling = falling + 1 if step < last else 0
            last = step
        low.append((u, ph))
        total += math.exp(u) * ph
        if len(low) >= 2 and math.exp(u) * last < tol:
            break
        k -= 1
    if len(low) < 2:
        return None
    (u0, p0), (u1, p1) = low[-1], low[-2]
    s0, s1 = math.exp(2 * u0), math.exp(2 * u1)
    slope = (p1 - p0 - 2 * b * h) / (s1 - s0)
    for j in range(1, 200):  # lower tail: φ ≈ p0 + 2b(u − u0) + slope·(e^{2u} − s0)
        v = u0 - j * h
        total += math.exp(v) * (p0 + 2 * b * (v - u0) + slope * (math.exp(2 * v) - s0))
    return base + h * total / math.pi


# ====================================================== factor spectra and rule
class _Base:
    """Eigenvalues of a base Gram ``G`` in a fixed order of its eigenbasis."""

    def eigenvalues(self) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def sum_sqrt(self, a: float, c: float) -> float:
        """``Σ_k √(a λ_k + c)``."""
        return float(np.sqrt(np.clip(a * self.eigenvalues() + c, 0.0, None)).sum())


class _Closed(_Base):
    def __init__(self, fn, n):
        self.fn, self.n = fn, n

    def eigenvalues(self):
        return self.fn(self.n)


class _Ones(_Base):
    """``J = 11ᵀ``: eigenvalue ``n`` on ``1``, 0 on ``1⊥``."""

    def __init__(self, n):
        self.n = n

    def eigenvalues(self):
        out = np.zeros(self.n)
        out[0] = self.n
        return out

    def sum_sqrt(self, a, c):
        return math.sqrt(max(a * self.n + c, 0.0)) + (self.n - 1) * math.sqrt(max(c, 0.0))


class _Width(_Base):
    def __init__(self, n, w):
        self.n, self.w = n, w

    def eigenvalues(self):
        return _width_dense(self.n, self.w)

    def sum_sqrt(self, a, c):
        if a <= 0:
            return self.n * math.sqrt(max(c, 0.0))
        return math.sqrt(a) * width_sum_sqrt(self.n, self.w, c / a)


class _DenseBase(_Base):
    def __init__(self, M: Matrix):
        self.M = M
        self._lam = None

    def eigenvalues(self):
        if self._lam is None:
            M = self.M
            _check_dense(min(M.m, M.n), f"the Gram of {M.name!r}")
            if M.m < M.n:  # the nonzero eigenvalues of WᵀW are those of WWᵀ
                D = M.dense()
                lam = np.linalg.eigvalsh(D @ D.T)
                lam = np.concatenate([np.zeros(M.n - M.m), lam])
            else:
                lam = np.linalg.eigvalsh(M.gram().dense())
            self._lam = np.clip(lam, 0.0, None)
        return self._lam


@dataclass
class _Factor:
    """A factor Gram ``a·G_key + c·I`` (``key = None``: a multiple of the identity)."""

    key: tuple | None
    base: _Base | None
    a: float
    c: float


def _width_of(W: RangeQueries) -> int | None:
    lo, hi = W.ranges()
    N = lo.size
    w = int(hi[0] - lo[0] + 1)
    if N == W.n - w + 1 and np.array_equal(lo, np.arange(N)) and np.array_equal(hi, lo + (w - 1)):
        return w
    return None


def _factor(f: Matrix) -> _Factor | None:
    """The Gram of ``f`` as ``a·G + c·I`` over a named base, or None if it is not of that form."""
    if isinstance(f, Identity | Permutation):
        return _Factor(None, None, 0.0, 1.0)
    if isinstance(f, Ones):
        return _Factor(("ones", f.n), _Ones(f.n), float(f.m), 0.0)
    if isinstance(f, AllRange):
        return _Factor(("all_range", f.n), _Closed(all_range_eigenvalues, f.n), 1.0, 0.0)
    if isinstance(f, Prefix):
        return _Factor(("prefix", f.n), _Closed(prefix_eigenvalues, f.n), 1.0, 0.0)
    if isinstance(f, RangeQueries):
        w = _width_of(f)
        if w is not None:
            return _Factor(("width", f.n, w), _Width(f.n, w), 1.0, 0.0)
    if isinstance(f, Weighted):
        inner = _factor(f.base)
        if inner is None:
            return None
        c2 = f.weight**2
        return _Factor(inner.key, inner.base, c2 * inner.a, c2 * inner.c)
    if isinstance(f, VStack):
        found_parts = [_factor(b) for b in f.blocks]
        if any(p is None for p in found_parts):
            return None
        parts = cast(list[_Factor], found_parts)  # none is None (checked above)
        keys = {p.key for p in parts} - {None}
        if len(keys) > 1:
            return None  # Grams over different eigenbases need not commute
        key = keys.pop() if keys else None
        base = next((p.base for p in parts if p.key == key), None)
        return _Factor(key, base, sum(p.a for p in parts if p.key is not None),
                       sum(p.c for p in parts))
    if isinstance(f, Product) and isinstance(f.right, Permutation):
        inner = _factor(f.left)  # Gram Pᵀ(aG + cI)P = a·PᵀGP + cI
        if inner is None:
            return None
        if inner.key is None:
            return inner
        digest = hashlib.blake2b(f.right.perm.tobytes(), digest_size=20).hexdigest()
        return _Factor(("permuted", inner.key, digest), inner.base, inner.a, inner.c)
    return _Factor(("matrix", id(f)), _DenseBase(f), 1.0, 0.0)


def svdb_structured(W) -> float | None:
    """SVD bound of a union of Kronecker products whose factor Grams commute attribute by attribute.

    Handles All Range, Prefix, Width-k (closed-form or structured spectra,
    module docstring), their weighted and permuted forms, and unions and
    Kronecker products of them with Identity and Total factors, at any domain
    size the spectra allow (All Range and Prefix at ``n = 2**20`` and beyond).
    ``SVDB = (Σ_k √λ_k)² / n`` (Li & Miklau 2012, Thm 2) over the exact
    eigenvalues ``λ_k = Σ_j w_j² Π_i (a_ji λ_i(k_i) + c_ji)``; a single product
    factorises into per-attribute sums (HDMM Def. 11).  Registered with
    :func:`dpexplorer.core.error.register_svdb_rule`.

    Parameters
    ----------
    W : Matrix, shape (m, n)

    Returns
    -------
    float or None
        The unit-noise TSE bound; None when the factor Grams on some
        attribute do not share an eigenbasis, nothing structured is in
        ``W``, or ``W`` is a union of Identity/Total products (a marginal
        workload) over more multi-indices than :data:`GRID_LIMIT` (the other
        rules -- the marginal algebra's closed form -- and the dense path then
        apply).

    Raises
    ------
    MatrixTooLargeError
        If a structured workload still needs a spectrum that cannot be computed
        at this size (e.g. a union over a 2D grid of very large factors).
    """
    W = as_matrix(W)
    terms = error.kron_terms(W, leaves=True)
    if terms is None:
        return None
    size_set = {tuple(f.n for f in factors) for _, factors in terms}
    if len(size_set) != 1:
        return None
    sizes = size_set.pop()
    table: list[tuple[float, list[_Factor]]] = []
    for weight, factors in terms:
        found_row = [_factor(f) for f in factors]
        if any(r is None for r in found_row):
            return None
        table.append((weight, cast(list[_Factor], found_row)))  # none is None (checked above)
    d = len(sizes)
    keys: list[tuple | None] = []
    bases: list[_Base | None] = []
    for i in range(d):
        found = {row[i].key for _, row in table} - {None}
        if len(found) > 1:
            return None  # two different non-identity Grams on one attribute need not commute
        key = found.pop() if found else None
        keys.append(key)
        bases.append(next(row[i].base for _, row in table if row[i].key == key)
                     if key is not None else None)
    if len(table) == 1 and all(k is None or k[0] == "matrix" for k in keys):
        return None  # one product of plain matrices: the Kronecker and dense rules do this
    n = math.prod(sizes)

    def attr_sum(i, a, c):
        if bases[i] is None:
            return sizes[i] * math.sqrt(max(c, 0.0))
        return bases[i].sum_sqrt(a, c)

    if len(table) == 1:  # one product: Σσ factorises over the attributes
        weight, row = table[0]
        s = abs(weight) * math.prod(attr_sum(i, row[i].a, row[i].c) for i in range(d))
        return s * s / n
    if d == 1:  # a 1D union: Gram (Σ w² a)·G + (Σ w² c)·I
        A = sum(wt * wt * row[0].a for wt, row in table)
        C = sum(wt * wt * row[0].c for wt, row in table)
        s = attr_sum(0, A, C)
        return s * s / n
    if n > GRID_LIMIT:
        if all(k is None or k[0] == "ones" for k in keys):
            # Identity/Total factors only: a marginal workload, whose bound the marginal
            # algebra gives in closed form at any size (strategies.marginals.svdb_marginal)
            return None
        raise MatrixTooLargeError(
            f"SVD bound of a union of products over {n:,} cells: summing its eigenvalues "
            f"needs an array of that size (limit {GRID_LIMIT:,})")
    lams = [np.ones(sizes[i]) if (base := bases[i]) is None else base.eigenvalues() for i in range(d)]
    total = np.zeros(sizes)
    for weight, row in table:
        term = np.full((1,) * d, weight * weight)
        for i in range(d):
            shape = [1] * d
            shape[i] = sizes[i]
            term = term * (row[i].a * lams[i] + row[i].c).reshape(shape)
        total = total + term
    s = float(np.sqrt(np.clip(total, 0.0, None)).sum())
    return s * s / n


error.register_svdb_rule(svdb_structured)
