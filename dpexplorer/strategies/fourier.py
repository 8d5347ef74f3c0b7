"""The Fourier strategy for marginal workloads (Barak, Chaudhuri, Dwork, Kale, McSherry, Talwar, PODS 2007).

Barak et al. release a set of marginals of a contingency table by measuring,
with equal noise each, the Fourier coefficients the marginals depend on, and
answering the marginals from them (the least-squares reconstruction of the
matrix mechanism; Li & Miklau 2012 Sec. 5 use it as the "Fourier"
competitor, dropping the coefficients the workload does not need).

**Which coefficients.**  Over a domain ``(n_0, ..., n_{d-1})`` (C order;
attribute ``i`` is bit ``1 << i`` of a bitmask) the marginal on attributes
``a`` only depends on the data through the eigenspaces ``E_b``, ``b ⊆ a``,
of the marginal algebra (vectors mean-zero in the attributes of ``b``,
constant in the others; ``dim_b = Π_{i∈b}(n_i − 1)``; HDMM Thm 9).  The
strategy measures an orthonormal basis of ``E_b`` for every ``b`` in the
*downward closure* ``S`` of the workload's attribute
sets: for every ``b ∈ S`` the block

    ⊗_i ( F_{n_i}  if i ∈ b  else  1ᵀ_{n_i} / √n_i ),

``F_n`` (shape ``(n−1, n)``) an orthonormal basis of the mean-zero vectors
of ``ℝⁿ``.  We use the **real DFT basis** (what "Fourier" means for the
cyclic group ``Z_n``): ``√(2/n) cos(2πkj/n)`` and ``√(2/n) sin(2πkj/n)`` for
``k = 1 .. ⌈n/2⌉ − 1``, and for even ``n`` the alternating vector
``(−1)^j / √n``.  For binary attributes (``n = 2``) ``F = [1, −1]/√2`` and
the rows are exactly Barak et al.'s characters ``χ_b(x) = (−1)^{⟨b, x⟩}``
scaled by ``2^{−d/2}``.  All rows are orthonormal, so the Gram matrix is the
orthogonal projector

    AᵀA = Σ_{b∈S} P_b = Σ_{b∈S} ⊗_i (P_{n_i} if i ∈ b else J_{n_i}/n_i),  P = I − J/n,

with eigenvalue 1 on the ``E_b``, ``b ∈ S``, and 0 elsewhere; ``A⁺ = Aᵀ``.

**Error.**  For a workload with marginal weights ``u`` (Gram ``G(u)``, or
its marginal approximation, HDMM Thm 10: exact here since ``AᵀA`` lies in
the marginal algebra), ``tr(WᵀW (AᵀA)⁺) = Σ_{b∈S} dim_b · λ_b(u)`` with
``λ_b(u) = Σ_{a⊇b} u_a Π_{i∉a} n_i``; ``W`` is supported iff
``λ_b(u) = 0`` for every ``b ∉ S`` (:meth:`FourierStrategy.workload_trace`).

**Sensitivity** (add/remove one record, HDMM Def. 7-8: the largest column norm),
without any ``n × n`` matrix:

* L2: every column has squared norm ``Σ_{b∈S} Π_{i∈b}(1 − 1/n_i) Π_{i∉b} 1/n_i
  = Σ_{b∈S} dim_b / n`` (the diagonal of the projector is constant), so
  ``Δ₂ = sqrt(Σ_{b∈S} dim_b / n)`` -- independent of the basis chosen;
* L1: a Kronecker product's column L1 norms are the Kronecker product of its
  factors' column L1 norms (``|Π x_i| = Π |x_i|``) and a stack adds its
  blocks', so the ``n`` column norms cost ``O(|S|·n)`` and ``Δ₁`` is their
  maximum.  Unlike ``Δ₂``, ``Δ₁`` depends on the basis (the DFT basis here).

Registered mechanism: ``"fourier"`` (Laplace and Gaussian noise).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ..core import registry
from ..queries.matrix import Dense, Kronecker, VStack, as_matrix
from . import marginals

__all__ = ["fourier_basis", "downward_closure", "FourierStrategy", "fourier_strategy", "fourier"]

def fourier_basis(n: int) -> np.ndarray:
    """Real DFT basis of the mean-zero vectors of ``ℝⁿ``, shape ``(n − 1, n)``, orthonormal rows.

    Rows, in order: ``√(2/n) cos(2πkj/n)``, ``√(2/n) sin(2πkj/n)`` for
    ``k = 1, 2, ...`` while ``2k < n``, then ``(−1)^j/√n`` if ``n`` is even.

    Raises
    ------
    ValueError
        If ``n`` is not a whole number ≥ 1.
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"n must be a whole number ≥ 1, got {n!r}")
    n = int(n)
    j = np.arange(n)
    rows: list[npt.NDArray[np.floating[Any]]] = []
    for k in range(1, (n + 1) // 2):
        rows.append(math.sqrt(2.0 / n) * np.cos(2 * np.pi * k * j / n))
        rows.append(math.sqrt(2.0 / n) * np.sin(2 * np.pi * k * j / n))
    if n % 2 == 0:
        rows.append((-1.0) ** j / math.sqrt(n))
    return np.array(rows).reshape(n - 1, n)


def _as_mask(s, d: int) -> int:
    if isinstance(s, bool):
        raise ValueError(f"an attribute set is a bitmask or a sequence of attribute indices, got {s!r}")
    if isinstance(s, int | np.integer):
        if not 0 <= s < 2**d:
            raise ValueError(f"bitmask {s} is outside [0, 2**{d}) for a {d}-attribute domain")
        return int(s)
    try:
        attrs = [int(a) for a in s]
    except (TypeError, ValueError):
        raise ValueError(f"an attribute set is a bitmask or a sequence of attribute indices, got {s!r}") from None
    bad = [a for a in attrs if not 0 <= a < d]
    if bad:
        raise ValueError(f"attribute indices {bad} are out of range for a {d}-attribute domain")
    return sum(1 << a for a in set(attrs))


def downward_closure(sets: Iterable, d: int) -> tuple[int, ...]:
    """All subsets of the given attribute sets, as sorted bitmasks.

    Parameters
    ----------
    sets : iterable of int or sequence of int
        Attribute sets as bitmasks (attribute ``i`` is bit ``1 << i``) or as
        sequences of attribute indices.
    d : int
        Number of attributes.

    Raises
    ------
    ValueError
        For an attribute outside ``[0, d)`` or a malformed set.
    """
    out: set[int] = set()
    for s in sets:
        a = _as_mask(s, d)
        sub = a
        while True:  # enumerate the subsets of a
            out.add(sub)
            if sub == 0:
                break
            sub = (sub - 1) & a
    return tuple(sorted(out))


class FourierStrategy(VStack):
    """Orthonormal Fourier queries of the eigenspaces ``E_b``, ``b ∈ S`` (Barak et al. 2007).

    A stack of Kronecker products, one per ``b ∈ S`` with ``dim_b > 0``:
    ``⊗_i (F_{n_i} if i ∈ b else 1ᵀ/√n_i)`` (:func:`fourier_basis`).

    Parameters
    ----------
    domain : sequence of int
        Attribute sizes ``(n_0, ..., n_{d-1})``.
    masks : iterable of int or sequence of int
        The attribute sets ``b`` to measure (their downward closure is taken).

    Attributes
    ----------
    masks : tuple of int
        The measured ``b`` with ``dim_b > 0`` (ascending bitmasks).

    Raises
    ------
    ValueError
        For a bad domain or attribute set, or if nothing would be measured.
    """

    def __init__(self, domain, masks, name: str = "fourier"):
        dom = _check_domain(domain)
        d = len(dom)
        closure = downward_closure(masks, d)
        measured = tuple(b for b in closure if all(dom[i] > 1 for i in range(d) if b >> i & 1))
        if not measured:
            raise ValueError("a Fourier strategy needs at least one attribute set to measure")
        bases = [Dense(fourier_basis(n), name=f"F{n}") if n > 1 else None for n in dom]
        totals = [Dense(np.full((1, n), 1.0 / math.sqrt(n)), name=f"1/√{n}") for n in dom]
        blocks = []
        for b in measured:
            # bases[i] is None only where dom[i] == 1, an attribute no measured set contains
            factors = [cast(Dense, bases[i]) if b >> i & 1 else totals[i] for i in range(d)]
            blocks.append(Kronecker(factors, name=f"χ{_label(b, d)}"))
        super().__init__(blocks, name=name)
        self._domain = dom
        self.masks = measured
        self._dims = marginals.dimensions(dom)

    @property
    def domain(self):
        return self._domain

    @domain.setter
    def domain(self, value):
        if _check_domain(value) != self._domain:
            raise ValueError(f"a Fourier strategy's domain is fixed to {self._domain}")

    def reconstructor(self):
        """Least squares ``x̂ = A⁺ y = Aᵀ y`` (the rows are orthonormal, so ``A⁺ = Aᵀ``)."""
        return self.rmatvec

    def sensitivity(self, p: int = 1) -> float:
        """``Δ₂ = sqrt(Σ_{b∈S} dim_b / n)`` (p = 2); ``Δ₁`` the largest column L1 norm (p = 1).

        See the module docstring: both without ``n × n`` matrices; ``Δ₁`` from
        the ``n`` column norms (Kronecker products of the factors' column norms,
        summed over blocks).
        """
        if p == 2:
            return math.sqrt(float(sum(self._dims[b] for b in self.masks)) / self.n)
        return super().sensitivity(p)

    def _workload_spectrum(self, W):
        """``W``'s marginal approximation over this domain (:func:`marginals._spectrum`), or None.

        Its eigenvalues ``λ_b(u)`` are computed from the factors (sums of
        products of non-negative factor eigenvalues, exact zeros preserved),
        not from ``u`` (whose signed entries cancel only up to rounding).
        """
        sp = marginals._spectrum(W)
        if sp is None or tuple(sp.domain) != self._domain:
            return None
        return sp

    def _inverse_gram(self):
        """``(λ_b(φ), supported)`` of ``(AᵀA)⁺ = AᵀA = Σ_{b∈S} P_b = G(φ)``.

        ``λ_b(φ) = 1`` on the measured ``b ∈ S`` and 0 elsewhere; eigenspaces of
        dimension 0 (an attribute of size 1 in ``b``) hold nothing, so a
        workload may "need" them without their being measured.
        """
        lam_inv = np.zeros(self._dims.size)
        lam_inv[list(self.masks)] = 1.0
        return lam_inv, (lam_inv > 0) | (self._dims == 0)

    def _unsupported(self, W):
        d = len(self._domain)
        return lambda b: (
            f"strategy {self.name!r} does not support workload {W.name!r}: it needs "
            f"the Fourier coefficients of attributes {_attrs(b, d)}, which are "
            f"not measured")

    def workload_trace(self, W):
        """``tr(WᵀW (AᵀA)⁺) = Σ_{b∈S} dim_b · λ_b(u)``; see the module docstring.

        ``(AᵀA)⁺ = AᵀA = Σ_{b∈S} P_b = G(φ)``, ``λ_b(φ) = 1`` on ``S`` and 0
        elsewhere, and ``tr(G(u) P_b) = dim_b λ_b(u)`` (HDMM Thm 9-10): :func:`marginals._workload_trace`.

        Returns
        -------
        float or NotImplemented
            NotImplemented when ``W`` has no marginal form over this domain
            (the generic dense path of :mod:`dpexplorer.core.error` applies).

        Raises
        ------
        UnsupportedWorkloadError
            If ``W`` has a component in an eigenspace ``E_b`` with ``b ∉ S``.
        """
        W = as_matrix(W)
        sp = self._workload_spectrum(W)
        if sp is None:
            return NotImplemented
        lam_inv, supported = self._inverse_gram()
        return marginals._workload_trace(sp, lam_inv, supported, self._unsupported(W))

    def workload_row_variances(self, W):
        """``diag(W (AᵀA)⁺ Wᵀ)`` for a union of Kronecker products over this domain, shape ``(m,)``.

        ``(AᵀA)⁺ = G(φ)`` lies in the marginal algebra (see :meth:`workload_trace`),
        so this is :func:`marginals._workload_row_variances`: for a product
        ``c·⊗_i W_i`` a contraction of the ``φ`` tensor with the factors' squared
        row sums and row norms, no ``n × n`` matrix (nested Kronecker factors
        are expanded).

        Returns
        -------
        ndarray, shape (m,), or NotImplemented
            NotImplemented if ``W`` is not a union of Kronecker products with
            one factor per attribute of this domain.

        Raises
        ------
        UnsupportedWorkloadError
            If ``W`` is not supported.
        MatrixTooLargeError
            If a factor other than Identity or Ones has ``n_i² > DENSE_LIMIT``.
        """
        W = as_matrix(W)
        sp = self._workload_spectrum(W)
        if sp is None:
            return NotImplemented
        lam_inv, supported = self._inverse_gram()
        return marginals._workload_row_variances(W, sp, lam_inv, supported, self._unsupported(W))


def _attrs(mask: int, d: int) -> list[int]:
    return [i for i in range(d) if mask >> i & 1]


def _label(mask: int, d: int) -> str:
    return "{" + ",".join(str(i) for i in _attrs(mask, d)) + "}"


def _check_domain(domain) -> tuple[int, ...]:
    if isinstance(domain, int | np.integer) and not isinstance(domain, bool):
        domain = (int(domain),)
    try:
        dom = tuple(domain)
    except TypeError:
        raise ValueError(f"domain must be a sequence of attribute sizes, got {domain!r}") from None
    if not dom or any(isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1 for v in dom):
        raise ValueError(f"domain must be a non-empty sequence of positive whole numbers, got {domain!r}")
    return tuple(int(v) for v in dom)


def fourier_strategy(domain, sets) -> FourierStrategy:
    """The Fourier strategy measuring the eigenspaces of ``sets`` and all their subsets.

    Parameters
    ----------
    domain : sequence of int
        Attribute sizes.
    sets : iterable of int or sequence of int
        Marginals (attribute sets, as bitmasks or index sequences) to support.

    Returns
    -------
    FourierStrategy
        Shape ``(Σ_{b∈S} dim_b, n)``, ``S`` the downward closure of ``sets``.

    Raises
    ------
    ValueError
        For a bad domain or attribute set.
    """
    return FourierStrategy(domain, sets)


def fourier(W, scope: str = "marginal") -> FourierStrategy:
    """Fourier strategy for a marginal workload (Barak et al. 2007; Li & Miklau 2012 Sec. 5).

    Measures the eigenspaces ``E_b`` with ``λ_b(u) > 0`` for the workload's
    marginal weights ``u`` -- the downward closure of its marginals'
    attribute sets.

    Parameters
    ----------
    W : Matrix, shape (m, n)
        A marginal workload: a union of weighted Kronecker products whose
        factor Grams are ``a·I + b·J`` (marginals, ``[I; 1ᵀ]`` factors,
        weighted marginals; :func:`dpexplorer.strategies.marginals.is_exact`).
    scope : {"marginal", "kronecker"}
        ``"kronecker"`` also accepts any union of Kronecker products (e.g.
        range marginals, as in Li & Miklau's Table 2); the needed eigenspaces
        and the error are still exact (the strategy's Gram lies in the
        marginal algebra, HDMM Thm 10).

    Returns
    -------
    FourierStrategy

    Raises
    ------
    NotApplicableError
        If ``W`` is not a marginal workload (or, with ``scope="kronecker"``,
        has no Kronecker form).
    ValueError
        For an unknown ``scope``.
    """
    if scope not in ("marginal", "kronecker"):
        raise ValueError(f"scope must be 'marginal' or 'kronecker', got {scope!r}")
    W = as_matrix(W)
    if scope == "marginal" and not marginals.is_exact(W):
        raise registry.NotApplicableError(
            f"the Fourier strategy (Barak et al. 2007) is for marginal workloads (unions of "
            f"weighted marginals); {W.name!r} is not one (scope='kronecker' accepts any union of "
            f"Kronecker products)")
    sp = marginals._spectrum(W)
    if sp is None:
        raise registry.NotApplicableError(
            f"the Fourier strategy needs a union of Kronecker products over the attributes; "
            f"{W.name!r} has no such form")
    dom = tuple(sp.domain)
    needed = np.flatnonzero((sp.lam > 0) & (marginals.dimensions(dom) > 0))
    if needed.size == 0:
        raise registry.NotApplicableError(f"workload {W.name!r} has no non-zero query")
    return FourierStrategy(dom, [int(b) for b in needed])


def _build(W, noise, scope="marginal"):
    return fourier(W, scope=scope)


registry.register(registry.Mechanism(
    "fourier", "Fourier", _build,
    "Orthonormal Fourier coefficients of the marginals' eigenspaces (downward closure), equal noise.",
    "Barak, Chaudhuri, Dwork, Kale, McSherry, Talwar, PODS 2007; Li & Miklau 2012 Sec. 5",
    params={"scope": "marginal"}, audit=registry.AuditSpec(workload="marginals")))
