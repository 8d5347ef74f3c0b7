"""ResidualPlanner: the optimal Gaussian matrix mechanism for marginals (Xiao, He, Zhang, Kifer, NeurIPS 2023).

Xiao, He, Zhang, Kifer, "An optimal and scalable matrix mechanism for noisy
marginals under convex loss functions" (NeurIPS 2023).  The paper is not
among the project's papers, so every formula below is restated and derived
from the matrix mechanism (HDMM, McKenna et al., Prop. 4 and Thm 9) and
checked against a dense computation in ``tests/test_residual.py``.

**Domain and attribute sets.**  A domain ``(n_0, ..., n_{d-1})`` is flattened
in C order; an attribute set ``b`` is a sorted tuple of attribute indices
(internally a Python-int bitmask, attribute ``i`` the bit ``1 << i``, as in
:mod:`dpexplorer.strategies.marginals`; Python ints, so ``d`` may be 100).

**Residual basis.**  The paper's subtraction matrix ``Sub_n = [1, −I_{n−1}]``
(shape ``(n−1, n)``) spans the mean-zero vectors ``1^⊥`` of ``ℝⁿ``.  We use
its symmetric orthonormalisation ``H_n = (Sub Subᵀ)^{-1/2} Sub = (I + c_n J)
Sub`` with ``c_n = (1/√n − 1)/(n − 1)`` (``Sub Subᵀ = I + J`` has eigenvalue
``n`` on ``1`` and 1 elsewhere): orthonormal rows, ``H_nᵀ H_n = I − J/n``.
The residual of a set ``b`` is

    R_b = ⊗_i (H_{n_i} if i ∈ b else 1ᵀ_{n_i}),      rows: dim_b = Π_{i∈b}(n_i − 1),

whose rows span the eigenspace ``E_b`` of the marginal algebra (mean-zero in
the attributes of ``b``, constant in the others; HDMM Thm 9).  The marginal
on ``A`` (``Q_A = ⊗_i (I if i ∈ A else 1ᵀ)``) lives on ``⊕_{b⊆A} E_b``:
from ``I_n = J/n + HᵀH``,

    Q_A = Σ_{b⊆A} T_{A,b} R_b,     T_{A,b} = ⊗_{i∈b} Hᵀ_{n_i} ⊗_{i∈A∖b} 1_{n_i}/n_i      (1)

(the paper's reconstruction; with ``Sub`` in place of ``H`` it uses ``Sub⁺``).

**Base mechanisms and privacy cost.**  The plan measures every ``b`` of the
downward closure of the workload's marginals once: ``ω_b = R_b x + N(0, σ_b² I)``
(the paper adds ``N(0, σ_b² ⊗ Sub Subᵀ)`` to ``Sub``-residuals: the same
mechanism up to the invertible map ``⊗ (Sub Subᵀ)^{1/2}``).  As one Gaussian
mechanism this is the strategy ``A = [R_b / σ_b]_b`` with unit noise; every
column of ``R_b`` has squared norm ``p_b = Π_{i∈b}(1 − 1/n_i)``, so

    Δ₂(A)² = Σ_b p_b / σ_b²                                                      (2)

(the paper's privacy cost ``pcost = Σ_b Π_{i∈b}((n_i−1)/n_i) / σ_b²``).  Plans
are normalised to ``Σ_b p_b/σ_b² = 1`` (``Δ₂ = 1``); with a noise model,
every ``ω_b`` entry then has variance ``v·σ_b²`` counts², ``v`` =
``noise.variance_per_unit`` (``dpexplorer/docs/noise.md``).

**Variances.**  The rows of the blocks are orthogonal, so least squares
estimates each ``R_b x`` by ``ω_b`` and, by (1), the marginal ``A`` by
``Σ_{b⊆A} T_{A,b} ω_b``.  Its covariance with the marginal ``B`` is
``Σ_{b⊆A∩B} σ_b² T_{A,b} T_{B,b}ᵀ``: for cells ``x`` of ``A`` and ``y`` of ``B``

    Cov = Σ_{b⊆A∩B} σ_b² Π_{i∈b}(δ_{x_i y_i} − 1/n_i) Π_{i∈A∖b} 1/n_i Π_{i∈B∖b} 1/n_i,    (3)

and every cell of ``A`` has variance ``Σ_{b⊆A} σ_b² Π_{i∈b}(1 − 1/n_i)
Π_{i∈A∖b} 1/n_i²`` (the paper's variance formula).  More generally, a query
``r = w·⊗_i r_i`` of a union of Kronecker products has variance

    Var(r) = w² Σ_b σ_b² Π_{i∈b} α_i Π_{i∉b} γ_i,    α_i = ‖r_i‖² − (r_i·1)²/n_i,  γ_i = (r_i·1)²/n_i²   (4)

(``α_i``: the part of ``‖r_i‖²`` in ``1^⊥``; a marginal's rows have
``α = 1 − 1/n, γ = 1/n²`` on its attributes and ``α = 0, γ = 1`` elsewhere).
Every variance is linear in the ``σ_b²``; ``E_b`` is *needed* by the workload
iff some query has a positive coefficient (for marginals: the downward
closure).  The Gram ``AᵀA = Σ_b (Π_{i∉b} n_i / σ_b²) P_b`` lies in the marginal
algebra (``P_b`` the projector on ``E_b``), so (4) is also
``diag(W (AᵀA)⁺ Wᵀ)`` of the matrix mechanism (HDMM Prop. 4).

**Optimal noise scales** (``u_b`` = coefficient of ``σ_b²`` in the total
variance, ``C_{g,b}`` in the variance of query group ``g``):

* sum of variances: minimise ``Σ_b u_b σ_b²`` s.t. ``Σ_b p_b/σ_b² = 1``;
  Cauchy–Schwarz (Lagrange) gives ``σ_b² = T √(p_b/u_b)``,
  ``T = Σ_b √(p_b u_b)`` and the optimum ``T²`` (unit TSE).  For a marginal
  workload ``√(p_b u_b) = dim_b √λ_b / √n``, so ``T² = (Σ_b dim_b √λ_b)²/n``
  is the SVD bound (HDMM Thm 12): the bound is attained;
* max variance: minimise ``max_g (C σ²)_g`` s.t. ``Σ_b p_b/σ_b² ≤ 1``, a convex
  programme, solved through its Lagrange dual: with ``q = Cᵀλ``,
  ``max_{λ≥0} 2 Σ_b √(p_b q_b) − Σ_g λ_g``, a concave problem in the groups'
  multipliers, handed to scipy's L-BFGS-B as ``λ = ξ²`` (smooth where some
  ``q_b = 0``); the primal ``σ_b² ∝ √(p_b/q_b)`` and the duality gap (primal
  value over the dual bound ``(Σ_b √(p_b q_b))² / Σ_g λ_g``) certify the
  result (:func:`_solve_max`).

Both are optimal among *all* Gaussian matrix mechanisms for marginal
workloads (the paper's main theorem); for other unions of Kronecker products
they are the best strategies whose Gram lies in the marginal algebra.

**Census scale.**  Nothing here needs the ``n`` cells: a :class:`ResidualPlan`
says which marginal tables it needs (:attr:`ResidualPlan.needed`), maps
marginal count tables to the noiseless strategy answers
(:meth:`ResidualPlan.measure_answers`, L2 sensitivity 1) and noisy answers to
workload marginals in closed form (:meth:`ResidualPlan.reconstruct`,
:meth:`ResidualPlan.answer`).  For small domains :class:`ResidualStrategy`
is the same plan as an implicit :class:`~dpexplorer.queries.matrix.Matrix` with the
hooks :mod:`dpexplorer.core.error` and :mod:`dpexplorer.mechanism` use.

Registered mechanism: ``"residual_planner"`` (Gaussian noise only;
``objective="sum"`` or ``"max"``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn, cast

import numpy as np
import pandas as pd
import scipy.optimize
import scipy.sparse
from threadpoolctl import threadpool_limits

from ..core import error, optimization, registry
from ..privacy.noise import NoiseModel
from ..queries import workloads
from ..queries.matrix import (
    DENSE_LIMIT,
    Identity,
    Matrix,
    MatrixTooLargeError,
    Ones,
    VStack,
    Weighted,
    _check_size,
    as_matrix,
)
from . import marginals

__all__ = [
    "OBJECTIVES",
    "subtraction_matrix",
    "residual_basis",
    "ResidualPlan",
    "ResidualStrategy",
    "plan",
    "plan_marginals",
    "residual_planner",
]

#: Loss functions of the per-query variances that the planner optimises.
OBJECTIVES = ("sum", "max")

#: Largest number of attributes a single workload query may involve (its
#: ``2**s`` residual sets are enumerated).
MAX_QUERY_ATTRIBUTES = 24

#: Largest number of distinct query groups (rows with distinct variance
#: coefficients) the max-variance objective and per-query reports handle.
MAX_QUERY_GROUPS = 2**21


# ================================================================ residual basis
def subtraction_matrix(n: int) -> np.ndarray:
    """The paper's subtraction matrix ``Sub_n = [1, −I_{n−1}]``, shape ``(n − 1, n)``.

    Its rows span the mean-zero vectors of ``ℝⁿ`` (Xiao et al. 2023).

    Raises
    ------
    ValueError
        If ``n`` is not a whole number ≥ 1.
    """
    n = _check_size(n, "n")
    out = np.zeros((n - 1, n))
    out[:, 0] = 1.0
    out[:, 1:] = -np.eye(n - 1)
    return out


def _basis_constant(n: int) -> float:
    """``c_n`` of ``H_n = (I + c_n J) Sub_n``: ``(Sub Subᵀ)^{-1/2} = I + c_n J``."""
    return (1.0 / math.sqrt(n) - 1.0) / (n - 1)


def residual_basis(n: int) -> np.ndarray:
    """Orthonormal residual basis ``H_n = (Sub Subᵀ)^{-1/2} Sub``, shape ``(n − 1, n)``.

    ``Sub Subᵀ = I + J`` (eigenvalue ``n`` on ``1``, 1 elsewhere), so
    ``(Sub Subᵀ)^{-1/2} = I + c J`` with ``c = (1/√n − 1)/(n − 1)``.  Rows
    orthonormal, mean zero, spanning the same space as ``Sub``;
    ``HᵀH = I − J/n``.  Applied along an axis in ``O(n)``
    (see the module docstring).

    Raises
    ------
    ValueError
        If ``n`` is not a whole number ≥ 1.
    """
    S = subtraction_matrix(n)
    if n == 1:
        return S
    return S + _basis_constant(n) * S.sum(axis=0, keepdims=True)


def _basis_along(T: np.ndarray, axis: int, n: int) -> np.ndarray:
    """``H_n`` applied along ``axis`` (size ``n`` → ``n − 1``)."""
    T = np.moveaxis(T, axis, 0)
    D = T[:1] - T[1:]
    D = D + _basis_constant(n) * D.sum(axis=0, keepdims=True)
    return np.moveaxis(D, 0, axis)


def _basis_t_along(Z: np.ndarray, axis: int, n: int) -> np.ndarray:
    """``H_nᵀ`` applied along ``axis`` (size ``n − 1`` → ``n``)."""
    Z = np.moveaxis(Z, axis, 0)
    V = Z + _basis_constant(n) * Z.sum(axis=0, keepdims=True)
    out = np.concatenate([V.sum(axis=0, keepdims=True), -V], axis=0)
    return np.moveaxis(out, 0, axis)


# ============================================================ workload parsing
def _bits(mask: int) -> tuple[int, ...]:
    """Attribute indices of a bitmask, ascending."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)


def _mask(attrs: Iterable[int]) -> int:
    m = 0
    for i in attrs:
        m |= 1 << i
    return m


class _FactorStats:
    """Per-row ``α, γ`` of a factor ``f: (m_f, n_f)`` (equation (4)) and its distinct row types."""

    __slots__ = ("alpha", "gamma", "types", "sum_alpha", "sum_gamma", "m", "matrix")

    def __init__(self, alpha: np.ndarray, gamma: np.ndarray, matrix: Matrix | None):
        self.alpha, self.gamma, self.matrix = alpha, gamma, matrix
        self.m = alpha.size
        self.sum_alpha = float(alpha.sum())
        self.sum_gamma = float(gamma.sum())
        if self.m and np.ptp(alpha) == 0 and np.ptp(gamma) == 0:
            self.types = (alpha[:1], gamma[:1], np.array([float(self.m)]))
        else:
            pairs, counts = np.unique(np.stack([alpha, gamma], axis=1), axis=0, return_counts=True)
            self.types = (pairs[:, 0], pairs[:, 1], counts.astype(float))


def _factor_stats(f: Matrix, cache: dict) -> _FactorStats:
    """``α_r = ‖r‖² − (r·1)²/n`` and ``γ_r = (r·1)²/n²`` for every row ``r`` of a factor."""
    key: tuple[str, int] | tuple[str, int, int] | int
    if type(f) is Identity:
        key = ("I", f.n)
    elif isinstance(f, Ones):
        key = ("1", f.m, f.n)
    else:
        key = id(f)
    hit = cache.get(key)
    if hit is not None and (not isinstance(key, int) or hit.matrix is f):
        return hit
    if type(f) is Identity:
        n = f.n
        st = _FactorStats(np.full(n, 1.0 - 1.0 / n), np.full(n, 1.0 / (n * n)), f)
    elif isinstance(f, Ones):  # rows 1ᵀ: α = n − n²/n = 0, γ = n²/n² = 1
        st = _FactorStats(np.zeros(f.m), np.ones(f.m), f)
    elif isinstance(f, Weighted):
        base = _factor_stats(f.base, cache)
        w2 = f.weight**2
        st = _FactorStats(w2 * base.alpha, w2 * base.gamma, f)
    elif isinstance(f, VStack):
        parts = [_factor_stats(b, cache) for b in f.blocks]
        st = _FactorStats(np.concatenate([p.alpha for p in parts]),
                          np.concatenate([p.gamma for p in parts]), f)
    else:
        M = marginals._factor_row_stats(f, {})  # [(f 1)², diag(f fᵀ)], dense only for small factors
        sums2, sq = M[0], M[1]
        alpha = sq - sums2 / f.n
        gamma = sums2 / (f.n * f.n)
        # rows proportional to 1ᵀ (α) or mean-zero (γ) up to rounding are exactly so
        alpha[alpha <= 1e-12 * np.maximum(sq, 1e-300)] = 0.0
        gamma[gamma <= 1e-12 * np.maximum(sq, 1e-300) / f.n] = 0.0
        st = _FactorStats(alpha, gamma, f)
    cache[key] = st
    return st


@dataclass(frozen=True)
class _Term:
    """One product ``w·⊗_i f_i`` of the workload; factors that are plain ``1ᵀ`` rows are left out."""

    weight: float
    factors: dict  # attribute -> _FactorStats
    rows: int


@dataclass
class _Groups:
    """Query groups and their variance coefficients over residual sets.

    Group ``g`` has active attributes ``S_g`` (``α > 0``) with values
    ``alpha[g], gamma[g]`` and ``scale_g = w² Π_{i∉S_g} γ_i``; its coefficient
    on ``σ_b²`` is ``scale_g Π_{i∈b} α_i Π_{i∈S_g∖b} γ_i`` for ``b ⊆ S_g``
    (equation (4)).  ``count_g`` queries share it.
    """

    attrs: list  # tuple of attributes per group
    alpha: list
    gamma: list
    scale: np.ndarray
    count: np.ndarray
    term: np.ndarray

    def __len__(self):
        return len(self.attrs)


def _pareto(ta: np.ndarray, tg: np.ndarray, tc: np.ndarray):
    """The row types not dominated by another (``α ≤ α'`` and ``γ ≤ γ'``, one strictly)."""
    ge = (ta[None, :] >= ta[:, None]) & (tg[None, :] >= tg[:, None])
    gt = (ta[None, :] > ta[:, None]) | (tg[None, :] > tg[:, None])
    keep = ~np.any(ge & gt, axis=1)
    return ta[keep], tg[keep], tc[keep]


def _term_groups(terms: list[_Term], mode: str) -> _Groups:
    """Per-term totals, query groups, or the query groups that can hold the largest variance.

    ``mode="totals"``: one group per term whose coefficients give the term's
    summed variance; ``"queries"``: one group per distinct per-query variance
    coefficients (rows of a term whose factors' row types agree);
    ``"pareto"``: as ``"queries"`` without the groups a row type dominated
    in ``α`` and ``γ`` makes smaller (the coefficients (4) increase in both),
    enough for the largest variance.

    Raises
    ------
    NotApplicableError
        If a query involves more than :data:`MAX_QUERY_ATTRIBUTES` attributes,
        or (``"queries"``, ``"pareto"``) there are more than :data:`MAX_QUERY_GROUPS` groups.
    """
    attrs: list[tuple[int, ...]]
    attrs, alphas, gammas, scales, counts, term_of = [], [], [], [], [], []
    for t, term in enumerate(terms):
        w2 = term.weight**2
        if mode == "totals":
            members, a, g, K = [], [], [], w2
            for i, st in term.factors.items():
                if st.sum_alpha > 0:
                    members.append(i)
                    a.append(st.sum_alpha)
                    g.append(st.sum_gamma)
                else:
                    K *= st.sum_gamma
            choices = [(tuple(members), a, g, K, float(term.rows))]
        else:
            fixed, K, count, varying = [], w2, 1.0, []
            for i, st in term.factors.items():
                ta, tg, tc = st.types
                if mode == "pareto" and ta.size > 1:
                    ta, tg, tc = _pareto(ta, tg, tc)
                if ta.size == 1:  # one row type: folded into the group
                    if ta[0] > 0:
                        fixed.append((i, float(ta[0]), float(tg[0])))
                    else:
                        K *= float(tg[0])
                    count *= float(tc[0])
                else:
                    varying.append((i, ta, tg, tc))
            n_groups = math.prod(ta.size for _, ta, _, _ in varying)
            if len(attrs) + n_groups > MAX_QUERY_GROUPS:
                raise registry.NotApplicableError(
                    f"the workload has more than {MAX_QUERY_GROUPS:,} distinct query variances "
                    f"(term {t} alone {n_groups:,}); the max-variance objective and per-query "
                    f"reports handle fewer")
            choices = []
            for combo in np.ndindex(*[ta.size for _, ta, _, _ in varying]):
                items, k, c = list(fixed), K, count
                for (i, ta, tg, tc), j in zip(varying, combo, strict=True):
                    if ta[j] > 0:
                        items.append((i, float(ta[j]), float(tg[j])))
                    else:
                        k *= float(tg[j])
                    c *= float(tc[j])
                items.sort()
                choices.append((tuple(s for s, _, _ in items), [a for _, a, _ in items],
                                [g for _, _, g in items], k, c))
        for S, a, g, K, c in choices:
            if len(S) > MAX_QUERY_ATTRIBUTES:
                raise registry.NotApplicableError(
                    f"a workload query involves {len(S)} attributes; ResidualPlanner enumerates "
                    f"its 2**{len(S)} residual sets and handles at most {MAX_QUERY_ATTRIBUTES}")
            attrs.append(S)
            alphas.append(np.asarray(a, dtype=float))
            gammas.append(np.asarray(g, dtype=float))
            scales.append(K)
            counts.append(c)
            term_of.append(t)
    return _Groups(attrs, alphas, gammas, np.asarray(scales, dtype=float),
                   np.asarray(counts, dtype=float), np.asarray(term_of, dtype=np.int64))


def _subset_coefficients(S: tuple, alpha: np.ndarray, gamma: np.ndarray, scale: float):
    """``(masks, coefficients)`` of every ``b ⊆ S`` with a positive coefficient (equation (4))."""
    masks = [0]
    coef = np.array([scale])
    for i, a, g in zip(S, alpha, gamma, strict=True):
        bit = 1 << i
        masks = masks + [m | bit for m in masks]
        coef = np.concatenate([coef * g, coef * a])
    keep = np.flatnonzero(coef > 0)
    if keep.size == coef.size:
        return masks, coef
    return [masks[k] for k in keep], coef[keep]


class _Parsed:
    """A workload as products of per-attribute factors (one per attribute of ``domain``)."""

    def __init__(self, domain: tuple[int, ...], terms: list[_Term], name: str):
        self.domain = domain
        self.terms = terms
        self.name = name
        self.m = int(sum(t.rows for t in terms))
        self._groups: dict = {}
        self._enumerated: dict = {}

    def groups(self, mode: str) -> _Groups:
        """Groups of :func:`_term_groups` (``"totals"``, ``"queries"`` or ``"pareto"``), computed once."""
        if mode not in self._groups:
            self._groups[mode] = _term_groups(self.terms, mode)
        return self._groups[mode]

    def enumerated(self, mode: str):
        """``(row_index, masks, coefficients)`` of the groups' positive coefficients, flat."""
        if mode not in self._enumerated:
            G = self.groups(mode)
            rows, masks, coefs = [], [], []
            for g in range(len(G)):
                mk, cf = _subset_coefficients(G.attrs[g], G.alpha[g], G.gamma[g], G.scale[g])
                rows.append(np.full(len(mk), g, dtype=np.int64))
                masks.extend(mk)
                coefs.append(cf)
            self._enumerated[mode] = (np.concatenate(rows) if rows else np.zeros(0, np.int64),
                                      masks, np.concatenate(coefs) if coefs else np.zeros(0))
        return self._enumerated[mode]

    def coefficients(self, mode: str, index: dict,
                     unsupported: Callable[[int], NoReturn]) -> scipy.sparse.csr_array:
        """Sparse ``C``: groups × residual sets of ``index``; ``unsupported(mask)`` raises for others."""
        rows, masks, coefs = self.enumerated(mode)
        cols = np.empty(len(masks), dtype=np.int64)
        for k, mk in enumerate(masks):
            j = index.get(mk)
            if j is None:
                unsupported(mk)
            cols[k] = j
        return scipy.sparse.csr_array((coefs, (rows, cols)), shape=(len(self.groups(mode)), len(index)))


def _parse(W) -> _Parsed:
    """``W`` as a :class:`_Parsed`, cached on the workload object (like its Gram).

    Raises
    ------
    NotApplicableError
        If ``W`` is not a union of (weighted) Kronecker products over one
        attribute split (or a one-attribute workload, or a marginal strategy).
    """
    W = as_matrix(W)
    hit = W.__dict__.get("_residual_parse")
    if hit is not None:
        return hit
    if isinstance(W, ResidualStrategy):
        raise registry.NotApplicableError("a ResidualPlanner strategy is not a workload it plans for")
    terms = marginals._row_terms(W, W.domain) if isinstance(W, marginals.MarginalStrategy) \
        else marginals._terms(W)
    if not terms:
        raise registry.NotApplicableError(
            f"ResidualPlanner needs a union of Kronecker products (marginals, weighted marginals, "
            f"products of 1D workloads); {W.name!r} has no such form")
    domain = tuple(f.n for f in terms[0][1])
    if math.prod(domain) != W.n:
        raise registry.NotApplicableError(
            f"the factors of {W.name!r} cover {math.prod(domain)} cells, not its {W.n}")
    cache: dict = {}
    out = []
    for c, factors in terms:
        if tuple(f.n for f in factors) != domain:
            raise registry.NotApplicableError(
                f"ResidualPlanner: the products of {W.name!r} split the domain into different "
                f"attributes ({domain} and {tuple(f.n for f in factors)})")
        fs = {}
        rows = 1
        for i, f in enumerate(factors):
            if isinstance(f, Ones) and f.m == 1:
                continue  # a plain 1ᵀ row: α = 0, γ = 1
            st = _factor_stats(f, cache)
            fs[i] = st
            rows *= st.m
        out.append(_Term(float(c), fs, rows))
    parsed = _Parsed(domain, out, W.name)
    W.__dict__["_residual_parse"] = parsed
    return parsed


def _check_attrs(attrs, d: int, what: str = "an attribute set") -> tuple[int, ...]:
    if isinstance(attrs, str) or not isinstance(attrs, Iterable):
        raise ValueError(f"{what} is a sequence of attribute indices, got {attrs!r}")
    out = []
    for a in attrs:
        if isinstance(a, bool) or not isinstance(a, int | np.integer) or not 0 <= a < d:
            raise ValueError(f"{what} {tuple(attrs)!r} has an attribute index outside [0, {d})")
        out.append(int(a))
    if len(set(out)) != len(out):
        raise ValueError(f"{what} {tuple(attrs)!r} repeats an attribute")
    return tuple(sorted(out))


def _parse_marginals(domain, sets, weights) -> _Parsed:
    domain = workloads._check_domain(domain)
    d = len(domain)
    sets = [_check_attrs(s, d, "marginal") for s in sets]
    if not sets:
        raise ValueError("the workload needs at least one marginal")
    if weights is None:
        weights = [1.0] * len(sets)
    else:
        weights = [float(w) for w in weights]
        if len(weights) != len(sets):
            raise ValueError(f"{len(weights)} weights for {len(sets)} marginals")
        for w in weights:
            if not (math.isfinite(w) and w > 0):
                raise ValueError(f"marginal weights must be positive finite numbers, got {w}")
    cache: dict = {}
    stats = {}
    terms = []
    for s, w in zip(sets, weights, strict=True):
        fs = {}
        for i in s:
            if i not in stats:
                stats[i] = _factor_stats(Identity(domain[i]), cache)
            fs[i] = stats[i]
        terms.append(_Term(w, fs, math.prod(domain[i] for i in s)))
    return _Parsed(domain, terms, f"{len(sets)} marginals")


# ======================================================= optimal noise scales
def _solve_sum(u: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, float]:
    """``σ² = T √(p/u)``, ``T = Σ √(p u)``: minimises ``Σ u σ²`` s.t. ``Σ p/σ² = 1``; returns (σ², T²)."""
    r = np.sqrt(p * u)
    T = float(r.sum())
    return T * np.sqrt(p / u), T * T


def _solve_max(C: scipy.sparse.csr_array, p: np.ndarray, sigma2_start: np.ndarray, maxiter: int,
               tol: float) -> tuple[np.ndarray, dict]:
    """Minimise ``max_g (C σ²)_g`` s.t. ``Σ_b p_b/σ_b² ≤ 1`` through the Lagrange dual.

    Lagrangian in ``v = σ²``: ``Σ_b p_b/v_b + λᵀ(C v − 1)``; minimising over
    ``v > 0`` gives ``v_b = √(p_b/q_b)`` with ``q = Cᵀλ`` and the dual
    ``g(λ) = 2 Σ_b √(p_b q_b) − Σ_g λ_g``, concave, maximised over ``λ ≥ 0``.
    ``g`` has an infinite slope where some ``q_b = 0`` (a residual set only
    group ``g`` needs, at ``λ_g = 0``), which breaks line searches on the
    bound; with ``λ = ξ²`` (``ξ`` free) the objective is smooth there, so
    scipy's L-BFGS-B runs unconstrained on ``−g(ξ²)``, gradient
    ``2ξ ⊙ (1 − C v)``.  Every ``λ`` certifies the lower bound
    ``(Σ_b √(p_b q_b))² / Σ_g λ_g`` (``g`` maximised along the ray through
    ``λ``); ``v`` rescaled to unit privacy cost is the plan, its max variance
    the upper bound.  ``ξ_g = 0`` is stationary for every ``g``, so after a run
    the groups with ``ξ_g ≈ 0`` whose variance exceeds the bound are re-seeded
    and L-BFGS-B runs again, until the relative gap is below ``tol`` or a round
    no longer improves it.  Variances are scaled by the start's (the sum
    solution's) largest one.
    """
    G, K = C.shape
    scale = float((C @ sigma2_start).max())
    Cs = C / scale
    Cst = Cs.T.tocsr()
    sq_p = np.sqrt(p)

    def bounds(lam):
        """``(v at unit privacy cost, upper, lower)`` for multipliers ``λ``."""
        q = Cst @ lam
        if np.any(q <= 0):
            return None, math.inf, 0.0
        v = np.sqrt(p / q)
        v = v * float(np.dot(p, 1.0 / v))
        return v, float((Cs @ v).max()), float(np.dot(sq_p, np.sqrt(q)) ** 2 / lam.sum())

    def fun(xi):
        lam = xi * xi
        r = np.sqrt(np.maximum(cast(np.ndarray, Cst @ lam), 1e-300))  # sparse @ vector: a dense vector
        return float(lam.sum() - 2.0 * np.dot(sq_p, r)), 2.0 * xi * (1.0 - Cs @ (sq_p / r))

    # start: the sum objective's multipliers (every group alike), scaled optimally on their ray
    lam = np.ones(G)
    lam *= (float(np.dot(sq_p, np.sqrt(cast(np.ndarray, Cst @ lam)))) / G) ** 2  # sparse @ vector: dense
    best = (lam, *bounds(lam))
    rounds = evaluations = iterations = 0
    while rounds < 10 and best[2] / best[3] - 1.0 > tol:
        rounds += 1
        res = scipy.optimize.minimize(fun, np.sqrt(lam), jac=True, method="L-BFGS-B",
                                      options={"maxiter": maxiter, "ftol": 1e-15, "gtol": 1e-12,
                                               "maxcor": 20})
        evaluations += int(res.nfev)
        iterations += int(res.nit)
        lam = res.x * res.x
        cand = (lam, *bounds(lam))
        if cand[1] is None or cand[2] / cand[3] >= (best[2] / best[3]) * (1.0 - 1e-12):
            break
        best = cand
        # re-seed the groups stuck at ξ_g = 0 although their variance is at the bound
        stuck = (lam < 1e-12 * lam.max()) & (Cs @ best[1] > best[2] * (1.0 - 1e-6))
        lam = lam.copy()
        lam[stuck] = lam.mean()
    lam, v, upper, lower = best
    return v, {"upper": upper * scale, "lower": lower * scale, "gap": max(upper / lower - 1.0, 0.0),
               "rounds": rounds, "evaluations": evaluations, "iterations": iterations,
               "active_groups": int(np.sum(lam > 1e-9 * lam.max()))}


# ==================================================================== the plan
class ResidualPlan:
    """A ResidualPlanner plan: residual sets measured, their noise, and closed-form reconstruction.

    Build one with :func:`plan` (a workload matrix) or :func:`plan_marginals`
    (a list of marginals, no matrix at all).  Unit quantities are for unit
    noise variance with the plan normalised to L2 sensitivity 1
    (``Σ_b p_b/σ_b² = 1``, equation (2)); multiply by
    ``noise.variance_per_unit`` (Gaussian ``c(ε, δ)²``) for counts², or pass
    ``noise=``.

    Attributes
    ----------
    domain : tuple of int
        Attribute sizes ``(n_0, ..., n_{d-1})``.
    objective : {"sum", "max"}
        The loss the noise scales minimise: total variance (TSE) or the
        largest per-query variance.
    residuals : tuple of tuple of int
        The measured residual sets ``b`` (the workload's needed sets: for
        marginals their downward closure), in strategy row order (by size,
        then bitmask).
    sigma2 : ndarray, shape (K,)
        Unit ``σ_b²`` per residual set (variance of each residual entry per
        unit noise variance).
    pcost : ndarray, shape (K,)
        ``p_b = Π_{i∈b}(1 − 1/n_i)``: squared column norm of ``R_b``.
    rows : tuple of int, length K
        ``dim_b = Π_{i∈b}(n_i − 1)``: strategy rows (residual entries) per set.
    m : int
        Number of workload queries.
    unit_tse : float
        ``Σ_queries Var`` per unit noise variance (equals
        :func:`dpexplorer.core.error.unit_tse` of the strategy, norm 2).
    info : dict
        Solver details: ``seconds``; for ``"max"`` also ``upper`` (its unit
        largest variance), ``lower`` (the dual bound), ``gap`` (relative),
        ``query_groups``, ``active_groups``, L-BFGS-B ``rounds``,
        ``iterations`` and ``evaluations``.

    Raises
    ------
    NotApplicableError
        If the workload has no non-zero query.
    ValueError
        For an unknown objective, ``maxiter < 1`` or ``tol`` outside (0, 1).
    """

    def __init__(self, parsed: _Parsed, objective: str = "sum", maxiter: int = 5000, tol: float = 1e-9):
        t0 = time.perf_counter()
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        if isinstance(maxiter, bool) or not isinstance(maxiter, int | np.integer) or maxiter < 1:
            raise ValueError(f"maxiter must be a whole number ≥ 1, got {maxiter!r}")
        if not (isinstance(tol, int | float) and 0 < tol < 1):
            raise ValueError(f"tol must be a number in (0, 1), got {tol!r}")
        self.domain = parsed.domain
        self.objective = objective
        self._parsed = parsed
        d = len(self.domain)
        _, masks, _ = parsed.enumerated("totals")
        closure = sorted(set(masks), key=lambda mk: (mk.bit_count(), mk))
        if not closure:
            raise registry.NotApplicableError(f"workload {parsed.name!r} has no non-zero query")
        self._masks = closure
        self._index = {mk: k for k, mk in enumerate(closure)}
        self.residuals = tuple(_bits(mk) for mk in closure)
        n = self.domain
        self.pcost = np.array([math.prod(1.0 - 1.0 / n[i] for i in b) for b in self.residuals])
        self.rows = tuple(math.prod(n[i] - 1 for i in b) for b in self.residuals)
        self.m = parsed.m
        Ct = parsed.coefficients("totals", self._index, self._unsupported(parsed.name))
        u = np.asarray(Ct.sum(axis=0)).ravel()  # coefficient of σ_b² in the TSE
        sigma2, tse = _solve_sum(u, self.pcost)
        self.info: dict = {"residual_sets": len(closure), "attributes": d}
        if objective == "max":
            Cq = parsed.coefficients("pareto", self._index, self._unsupported(parsed.name))
            with threadpool_limits(limits=1, user_api="blas"):
                sigma2, details = _solve_max(Cq, self.pcost, sigma2, maxiter, tol)
            self.info.update({"query_groups": Cq.shape[0], **details})
            tse = float(np.dot(u, sigma2))
        self.sigma2 = sigma2
        self.unit_tse = float(tse)
        self.info["seconds"] = time.perf_counter() - t0

    # ------------------------------------------------------------- basics
    def __repr__(self) -> str:
        return (f"<ResidualPlan objective={self.objective!r} domain={self.domain} "
                f"residual_sets={len(self.residuals)} m={self.m}>")

    @property
    def n_rows(self) -> int:
        """Number of strategy rows (residual entries measured), ``Σ_b dim_b``."""
        return sum(self.rows)

    def sensitivity(self, p: int = 2) -> float:
        """L2 sensitivity ``sqrt(Σ_b p_b/σ_b²)`` of the measurement (equation (2)); 1 after planning.

        Raises
        ------
        ValueError
            If ``p`` is not 2 (the plan is a Gaussian mechanism; L1 is not defined here).
        """
        if p != 2:
            raise ValueError("a ResidualPlanner plan has an L2 sensitivity only (p = 2): it is Gaussian")
        return math.sqrt(float(np.dot(self.pcost, 1.0 / self.sigma2)))

    @property
    def needed(self) -> tuple[tuple[int, ...], ...]:
        """Attribute sets whose marginal count tables MEASURE needs: the maximal measured sets.

        Every measured residual set is a subset of one of them, and its
        marginal is a sum of theirs.
        """
        supports = {_mask(S) for S in self._parsed.groups("totals").attrs if S}
        covered: set[int] = set()
        for mk in supports:  # the closure's maximal sets are the maximal supports
            covered.update(sub for sub in _submasks(mk) if sub != mk)
        maximal = [mk for mk in self._masks if mk in supports and mk not in covered]
        return tuple(_bits(mk) for mk in maximal) or ((),)

    def _unsupported(self, name: str):
        def raise_(mk):
            raise error.UnsupportedWorkloadError(
                f"ResidualPlanner plan does not support workload {name!r}: it needs the residual "
                f"of attributes {_bits(mk)}, which the plan does not measure")
        return raise_

    def _scale(self, noise: NoiseModel | None) -> float:
        if noise is None:
            return 1.0
        if getattr(noise, "norm", None) != 2:
            raise registry.NotApplicableError(_LAPLACE_MESSAGE)
        return noise.variance_per_unit

    def residual_variance(self, noise: NoiseModel | None = None) -> dict:
        """Variance of every residual entry: ``{b: σ_b²}`` (unit, or counts² with ``noise``)."""
        s = self._scale(noise)
        return {b: s * float(v) for b, v in zip(self.residuals, self.sigma2, strict=True)}

    # -------------------------------------------------------- variances
    def _coefficients_for(self, W, mode: str):
        parsed = self._parsed if W is None else _parse(W)
        if parsed.domain != self.domain:
            raise ValueError(f"workload attributes {parsed.domain} do not match the plan's domain "
                             f"{self.domain}")
        return parsed, parsed.coefficients(mode, self._index, self._unsupported(parsed.name))

    def tse(self, noise: NoiseModel | None = None, W=None) -> float:
        """Expected total squared error of the workload answers (unit, or counts² with ``noise``).

        Parameters
        ----------
        noise : Gaussian, optional
        W : Matrix, shape (m, n), optional
            Another union of Kronecker products over the domain (default: the planned workload).

        Raises
        ------
        UnsupportedWorkloadError
            If ``W`` needs a residual set the plan does not measure.
        NotApplicableError
            For Laplace noise, or a ``W`` with no Kronecker form.
        """
        if W is None:
            return self._scale(noise) * self.unit_tse
        _, C = self._coefficients_for(W, "totals")
        return self._scale(noise) * float(np.sum(C @ self.sigma2))

    def rmse(self, noise: NoiseModel | None = None, W=None) -> float:
        """Root mean squared error per query, ``sqrt(TSE / m)`` (counts with ``noise``)."""
        m = self.m if W is None else as_matrix(W).m
        return math.sqrt(self.tse(noise, W) / m)

    def group_variances(self, noise: NoiseModel | None = None, W=None) -> pd.DataFrame:
        """Per-query variance of every group of queries that share it.

        Returns
        -------
        pandas.DataFrame
            One row per group: ``attributes`` (tuple: the attributes the
            queries depend on; for marginals, the marginal), ``term`` (index
            of the product in the workload), ``queries`` (how many),
            ``variance`` (each query's, unit or counts²), ``std``.

        Raises
        ------
        NotApplicableError
            If there are more than :data:`MAX_QUERY_GROUPS` groups, or for Laplace noise.
        """
        parsed, C = self._coefficients_for(W, "queries")
        G = parsed.groups("queries")
        var = self._scale(noise) * (C @ self.sigma2)
        return pd.DataFrame({"attributes": G.attrs, "term": G.term, "queries": G.count.astype(np.int64),
                             "variance": var, "std": np.sqrt(var)})

    def max_variance(self, noise: NoiseModel | None = None, W=None) -> float:
        """Largest per-query variance (unit, or counts² with ``noise``), equation (4)."""
        _, C = self._coefficients_for(W, "pareto")
        return self._scale(noise) * float((C @ self.sigma2).max())

    def max_std(self, noise: NoiseModel | None = None, W=None) -> float:
        """Largest per-query standard deviation (counts with ``noise``)."""
        return math.sqrt(self.max_variance(noise, W))

    def marginal_variance(self, attrs: Sequence[int], noise: NoiseModel | None = None) -> float:
        """Variance of every cell of the (unweighted) marginal on ``attrs``.

        ``Σ_{b⊆A} σ_b² Π_{i∈b}(1 − 1/n_i) Π_{i∈A∖b} 1/n_i²`` (equation (3) with
        ``x = y``).

        Raises
        ------
        UnsupportedWorkloadError
            If a residual set ``b ⊆ A`` with ``dim_b > 0`` is not measured.
        ValueError
            For a bad attribute set.
        """
        A = _check_attrs(attrs, len(self.domain))
        n = self.domain
        total = 0.0
        for b_mask in _submasks(_mask(A)):
            b = _bits(b_mask)
            k = self._index.get(b_mask)
            if k is None:
                if math.prod(n[i] - 1 for i in b) > 0:
                    self._unsupported(f"marginal{A}")(b_mask)
                continue
            total += self.sigma2[k] * math.prod(1.0 - 1.0 / n[i] for i in b) \
                * math.prod(1.0 / n[i] ** 2 for i in A if i not in b)
        return self._scale(noise) * total

    def covariance(self, attrs: Sequence[int], other: Sequence[int] | None = None,
                   noise: NoiseModel | None = None, max_entries: int | None = None) -> np.ndarray:
        """Covariance of the reconstructed marginals on ``attrs`` and ``other``, equation (3).

        Parameters
        ----------
        attrs, other : sequence of int
            Attribute sets ``A`` and ``B`` (``other`` defaults to ``A``).
        noise : Gaussian, optional
            Counts² instead of unit values.
        max_entries : int, optional
            Size limit (default :data:`~dpexplorer.queries.matrix.DENSE_LIMIT`).

        Returns
        -------
        ndarray, shape (Π_{i∈A} n_i, Π_{i∈B} n_i)
            Rows and columns in C order over the sorted attributes.

        Raises
        ------
        MatrixTooLargeError
            Above the size limit.
        UnsupportedWorkloadError
            If a needed residual set ``b ⊆ A`` or ``b ⊆ B`` is not measured.
        """
        d = len(self.domain)
        A = _check_attrs(attrs, d)
        B = A if other is None else _check_attrs(other, d)
        n = self.domain
        shape = (math.prod(n[i] for i in A), math.prod(n[i] for i in B))
        limit = DENSE_LIMIT if max_entries is None else max_entries
        if shape[0] * shape[1] > limit:
            raise MatrixTooLargeError(f"covariance of marginals {A} and {B} has shape {shape}, above "
                                      f"the limit of {limit:,} entries")
        for X in (A, B):  # support of both marginals
            self.marginal_variance(X)
        out = np.zeros(shape)
        union = sorted(set(A) | set(B))
        for b_mask in _submasks(_mask(set(A) & set(B))):
            k = self._index.get(b_mask)
            if k is None:
                continue
            b = set(_bits(b_mask))
            M: np.ndarray = np.ones((1, 1))
            for i in union:
                k_i = n[i]
                if i in b:
                    f = np.eye(k_i) - 1.0 / k_i
                elif i in A and i in B:
                    f = np.full((k_i, k_i), 1.0 / k_i**2)
                elif i in A:
                    f = np.full((k_i, 1), 1.0 / k_i)
                else:
                    f = np.full((1, k_i), 1.0 / k_i)
                M = np.kron(M, f)
            out += self.sigma2[k] * M
        return self._scale(noise) * out

    def query_variances(self, W=None, noise: NoiseModel | None = None) -> np.ndarray:
        """Variance of every workload query in ``W``'s row order, shape ``(m,)``, equation (4).

        Per product term a sum over the needed residual sets of Kronecker
        products of the factors' per-row ``α`` or ``γ`` (no ``n × n``
        matrix); equals ``diag(W (AᵀA)⁺ Wᵀ)`` of the strategy.

        Raises
        ------
        UnsupportedWorkloadError
            If ``W`` needs a residual set the plan does not measure.
        """
        parsed = self._parsed if W is None else _parse(W)
        if parsed.domain != self.domain:
            raise ValueError(f"workload attributes {parsed.domain} do not match the plan's domain "
                             f"{self.domain}")
        parsed.coefficients("totals", self._index, self._unsupported(parsed.name))  # support check
        out = []
        for term in parsed.terms:
            attrs = sorted(term.factors)
            active = [i for i in attrs if term.factors[i].sum_alpha > 0]
            v = np.zeros(term.rows)
            for b_mask in _submasks(_mask(active)):
                k = self._index.get(b_mask)
                if k is None:
                    continue
                row = np.ones(1)
                for i in attrs:
                    st = term.factors[i]
                    row = np.kron(row, st.alpha if b_mask >> i & 1 else st.gamma)
                v += self.sigma2[k] * row
            out.append(term.weight**2 * v)
        return self._scale(noise) * np.concatenate(out)

    # ----------------------------------------------- MEASURE / RECONSTRUCT
    def _marginal_tables(self, tables: Mapping) -> dict:
        """``{mask: table}`` for every measured residual set, each summed from the smallest table covering it.

        Sets are visited from the largest down; every table (given or
        computed) offers itself to its subsets, so a 1-way table is summed
        from a 2-way one rather than from the largest given table.
        """
        n = self.domain
        d = len(n)
        cover: dict[int, tuple[int, tuple, np.ndarray]] = {}  # mask -> (cells, attrs, table)

        def offer(attrs, T):
            cells = T.size
            for sub in _submasks(_mask(attrs)):
                hit = cover.get(sub)
                if hit is None or cells < hit[0]:
                    cover[sub] = (cells, attrs, T)

        for key, value in tables.items():
            attrs = _check_attrs(key, d, "a table's attribute set")
            T = np.asarray(value, dtype=float)
            full = tuple(n[i] for i in attrs)
            if T.shape != full:
                if T.size != math.prod(full):
                    raise ValueError(f"the table of attributes {attrs} must have shape {full} "
                                     f"(or {math.prod(full)} entries in C order), got shape {T.shape}")
                T = T.reshape(full)
            offer(attrs, T)
        out = {}
        for mk in sorted(self._masks, key=lambda m: -m.bit_count()):
            hit = cover.get(mk)
            if hit is None:
                raise ValueError(f"no marginal table covers attributes {_bits(mk)}; pass the tables "
                                 f"of plan.needed = {self.needed}")
            b = _bits(mk)
            _, attrs, T = hit
            drop = tuple(j for j, i in enumerate(attrs) if not mk >> i & 1)
            if drop:
                T = T.sum(axis=drop)
                offer(b, T)
            out[mk] = T
        return out

    def measure_answers(self, tables: Mapping) -> np.ndarray:
        """Noiseless strategy answers ``A x`` from marginal count tables, shape ``(Σ_b dim_b,)``.

        Block ``b`` (in :attr:`residuals` order) is ``R_b x / σ_b``: the table
        of ``b`` with ``H`` applied along every axis, C order.  The map
        ``x ↦ A x`` has L2 sensitivity :meth:`sensitivity` ``= 1`` under
        add/remove one record (equation (2)), so a Gaussian mechanism adds
        i.i.d. ``N(0, c(ε, δ)²)`` to every entry (Li & Miklau 2012,
        Prop. 2; ``dpexplorer/docs/noise.md``).  Equal to :class:`ResidualStrategy` ``.matvec(x)``.

        Parameters
        ----------
        tables : mapping of tuple of int to array_like
            Marginal counts keyed by attribute tuples (any order; the table's
            axes follow the sorted attributes), each of shape
            ``(n_i for i in sorted(key))`` (or flat in C order); at least
            the :attr:`needed` sets (subsets are summed from them).

        Returns
        -------
        ndarray, shape (Σ_b dim_b,)
            Counts scaled by ``1/σ_b`` per block, in strategy row order.

        Raises
        ------
        ValueError
            If a needed table is missing, has the wrong size, or a key is malformed.
        """
        marg = self._marginal_tables(tables)
        n = self.domain
        out = []
        for mk, b, s2 in zip(self._masks, self.residuals, self.sigma2, strict=True):
            T = marg[mk]
            for ax, i in enumerate(b):
                T = _basis_along(T, ax, n[i])
            out.append(np.ravel(T) / math.sqrt(s2))
        return np.concatenate(out)

    def _residual_estimates(self, y) -> list[np.ndarray]:
        """``ω̂_b = σ_b y_b`` (estimates of ``R_b x``), each shaped ``(n_i − 1 for i in b)``."""
        y = np.asarray(y, dtype=float)
        if y.shape != (self.n_rows,):
            raise ValueError(f"y must have shape ({self.n_rows},) (one entry per strategy row), "
                             f"got {y.shape}")
        n = self.domain
        out = []
        start = 0
        for b, rows, s2 in zip(self.residuals, self.rows, self.sigma2, strict=True):
            out.append(math.sqrt(s2) * y[start:start + rows].reshape(tuple(n[i] - 1 for i in b)))
            start += rows
        return out

    def _marginal(self, attrs: tuple[int, ...], omega: list[np.ndarray], strict: bool) -> np.ndarray:
        """Marginal table ``Σ_{b⊆A} T_{A,b} ω̂_b`` (equation (1))."""
        n = self.domain
        out = np.zeros(tuple(n[i] for i in attrs))
        for b_mask in _submasks(_mask(attrs)):
            b = _bits(b_mask)
            k = self._index.get(b_mask)
            if k is None:
                if strict and math.prod(n[i] - 1 for i in b) > 0:
                    self._unsupported(f"marginal{attrs}")(b_mask)
                continue
            Z = omega[k]
            for ax, i in enumerate(b):
                Z = _basis_t_along(Z, ax, n[i])
            rest = [j for j, i in enumerate(attrs) if i not in b]
            Z = np.expand_dims(Z, tuple(rest)) if rest else Z
            out += Z / math.prod(n[attrs[j]] for j in rest)
        return out

    def reconstruct(self, y, sets: Iterable[Sequence[int]] | None = None) -> dict:
        """Closed-form RECONSTRUCT of marginals from noisy strategy answers (equation (1)).

        The least-squares estimate ``Q_A A⁺ y`` of every requested marginal:
        unbiased, mutually consistent, variance :meth:`marginal_variance`.

        Parameters
        ----------
        y : ndarray, shape (Σ_b dim_b,)
            Noisy answers to :meth:`measure_answers` (counts).
        sets : iterable of sequence of int, optional
            Marginals to return; default :attr:`needed` (every measured
            marginal can be summed from them).

        Returns
        -------
        dict
            ``{attrs: table}`` with tables of shape ``(n_i for i in attrs)``.

        Raises
        ------
        ValueError
            If ``y`` has the wrong shape or a set is malformed.
        UnsupportedWorkloadError
            If a requested marginal needs a residual set that is not measured.
        """
        omega = self._residual_estimates(y)
        sets = self.needed if sets is None else [_check_attrs(s, len(self.domain)) for s in sets]
        return {tuple(s): self._marginal(tuple(s), omega, True) for s in sets}

    def answer(self, W, y) -> np.ndarray:
        """Answers of any union of Kronecker products over the domain, ``W A⁺ y``, shape ``(m,)``.

        Term ``w·⊗_i f_i`` with active attributes ``S`` (factors not
        proportional to ``1ᵀ``): the reconstructed marginal of ``S``
        (equation (1); unmeasured sets contribute 0, as in the minimum-norm
        ``x̂``) with ``f_i`` applied along its axes and the other factors'
        rows ``(f_i 1 / n_i)`` times the total.

        Raises
        ------
        UnsupportedWorkloadError
            If ``W`` needs a residual set the plan does not measure.
        """
        parsed = _parse(W)
        if parsed.domain != self.domain:
            raise ValueError(f"workload attributes {parsed.domain} do not match the plan's domain "
                             f"{self.domain}")
        parsed.coefficients("totals", self._index, self._unsupported(parsed.name))
        omega = self._residual_estimates(y)
        n = self.domain
        out = []
        for term in parsed.terms:
            attrs = sorted(term.factors)
            active = tuple(i for i in attrs if term.factors[i].sum_alpha > 0)
            T = self._marginal(active, omega, False)
            for pos, i in enumerate(attrs):  # axes before pos are done, in attribute order
                st = term.factors[i]
                if i in active:
                    T = _apply_factor(st.matrix, T, pos)
                else:
                    col = st.matrix.matvec(np.ones(n[i])) / n[i]
                    T = np.expand_dims(T, pos) * col.reshape([-1 if j == pos else 1
                                                               for j in range(T.ndim + 1)])
            out.append(term.weight * np.ravel(T))
        return np.concatenate(out)

    # ---------------------------------------------------------- as a matrix
    def strategy(self, name: str = "residual_planner") -> ResidualStrategy:
        """This plan as an implicit strategy matrix (small domains: it has ``n = Π n_i`` columns)."""
        return ResidualStrategy(self, name=name)


def _apply_factor(f: Matrix, T: np.ndarray, axis: int) -> np.ndarray:
    """``f`` applied along ``axis`` of ``T``."""
    T = np.moveaxis(T, axis, 0)
    shp = T.shape
    out = f.matvec(T.reshape(shp[0], -1))
    return np.moveaxis(out.reshape((out.shape[0],) + shp[1:]), 0, axis)


def _submasks(mask: int):
    """Every submask of ``mask`` (including 0 and ``mask``)."""
    sub = mask
    while True:
        yield sub
        if sub == 0:
            return
        sub = (sub - 1) & mask


_LAPLACE_MESSAGE = (
    "ResidualPlanner is a Gaussian mechanism: its optimality (Xiao et al. 2023) is for Gaussian "
    "noise, whose privacy cost is the L2 sensitivity Σ_b p_b/σ_b²; under Laplace noise (L1 "
    "sensitivity) the residual noise scales are not optimal and the closed forms do not hold. "
    "Choose Gaussian noise, or OPT_M or HDMM under Laplace noise")


# ======================================================= the implicit strategy
class ResidualStrategy(Matrix):
    """A :class:`ResidualPlan` as an implicit strategy ``A = [R_b / σ_b]_b``, shape ``(Σ_b dim_b, n)``.

    Blocks in :attr:`ResidualPlan.residuals` order, each ``R_b/σ_b`` with
    rows in C order over ``b``'s residual coordinates.  Δ₂ = 1
    (equation (2)), so :mod:`dpexplorer.core.error` multiplies unit values by
    ``noise.variance_per_unit`` as for every strategy.  Hooks (no ``n × n``
    matrix): :meth:`workload_trace`, :meth:`workload_row_variances`,
    :meth:`reconstructor` and :meth:`answer`.  Products with ``x`` go
    through marginal tables of the data tensor.

    Parameters
    ----------
    plan : ResidualPlan
    name : str
    """

    def __init__(self, plan: ResidualPlan, name: str = "residual_planner"):
        if not isinstance(plan, ResidualPlan):
            raise TypeError(f"plan must be a ResidualPlan, got {type(plan).__name__}")
        self.plan = plan
        self.shape = (plan.n_rows, math.prod(plan.domain))
        self._name = name
        self._dom = plan.domain
        self._domain = plan.domain

    def _plans_for(self, W) -> bool:
        """Whether ``W`` is a union of Kronecker products over this domain (else: generic paths)."""
        try:
            return _parse(W).domain == self._dom
        except registry.NotApplicableError:
            return False

    def _matmat(self, X):
        k = X.shape[1]
        T = X.reshape(self._dom + (k,))
        tabs = marginals._marginalize(T, self._dom, self.plan._masks)
        out = []
        for mk, b, s2 in zip(self.plan._masks, self.plan.residuals, self.plan.sigma2, strict=True):
            Z = tabs[mk]
            for ax, i in enumerate(b):
                Z = _basis_along(Z, ax, self._dom[i])
            out.append(Z.reshape(-1, k) / math.sqrt(s2))
        return np.concatenate(out, axis=0)

    def _transpose_weighted(self, Y, weights):
        """``Σ_b weights_b R_bᵀ Y_b`` (full domain), shape ``(n, k)``."""
        k = Y.shape[1]
        tables = {}
        start = 0
        n = self._dom
        for mk, b, rows, w in zip(self.plan._masks, self.plan.residuals, self.plan.rows, weights,
                                  strict=True):
            Z = Y[start:start + rows].reshape(tuple(n[i] - 1 for i in b) + (k,))
            for ax, i in enumerate(b):
                Z = _basis_t_along(Z, ax, n[i])
            tables[mk] = w * Z
            start += rows
        return marginals._broadcast_sum(n, tables, k).reshape(-1, k)

    def _rmatmat(self, Y):
        return self._transpose_weighted(Y, 1.0 / np.sqrt(self.plan.sigma2))

    def sensitivity(self, p: int = 1) -> float:
        """``Δ₂ = sqrt(Σ_b p_b/σ_b²)`` (``p = 2``, equation (2)); ``Δ₁``: largest column L1 norm (dense)."""
        if p == 2:
            return self.plan.sensitivity(2)
        return super().sensitivity(p)

    def column_norms(self, p: int = 1):
        if p == 2:  # every column of R_b has squared norm p_b
            return np.full(self.n, self.plan.sensitivity(2))
        return super().column_norms(p)

    def _gram(self):
        # AᵀA = Σ_b (Π_{i∉b} n_i / σ_b²) P_b: eigenvalue Π_{i∉b} n_i/σ_b² on E_b (marginal algebra)
        if len(self._dom) > marginals.MAX_ATTRIBUTES:
            return super()._gram()
        lam = np.zeros(2 ** len(self._dom))
        total = math.prod(self._dom)
        for mk, b, s2 in zip(self.plan._masks, self.plan.residuals, self.plan.sigma2, strict=True):
            lam[mk] = total / math.prod(self._dom[i] for i in b) / s2
        u = marginals._weights_from_eigenvalues(self._dom, lam)
        return marginals.MarginalGram(self._dom, u, name=f"gram({self.name})")

    # ---------------------------------------------------- error hooks
    def workload_trace(self, W):
        """``tr(WᵀW (AᵀA)⁺)``: the summed variance (4) of ``W``'s queries per unit noise.

        Returns NotImplemented if ``W`` is not a union of Kronecker products
        over this domain (the generic dense path then applies).

        Raises
        ------
        UnsupportedWorkloadError
            If ``W`` needs a residual set that is not measured.
        """
        return self.plan.tse(W=W) if self._plans_for(W) else NotImplemented

    def workload_row_variances(self, W):
        """``diag(W (AᵀA)⁺ Wᵀ)`` per unit noise, shape ``(m,)``: equation (4), row by row.

        Raises
        ------
        UnsupportedWorkloadError
            If ``W`` needs a residual set that is not measured.
        """
        return self.plan.query_variances(W) if self._plans_for(W) else NotImplemented

    def reconstructor(self):
        """RECONSTRUCT ``y ↦ x̂ = A⁺ y = Σ_b (σ_b / Π_{i∉b} n_i) R_bᵀ y_b`` (minimum-norm least squares).

        The rows of ``A`` are orthogonal (``R_b R_bᵀ = Π_{i∉b} n_i · I``,
        different ``b`` span orthogonal ``E_b``), so ``A⁺ = Aᵀ (A Aᵀ)⁻¹``
        rescales every block.
        """
        n = self._dom
        total = math.prod(n)
        weights = np.array([math.sqrt(s2) * math.prod(n[i] for i in b) / total
                            for b, s2 in zip(self.plan.residuals, self.plan.sigma2, strict=True)])

        def apply(y):
            y = np.asarray(y, dtype=float)
            if y.shape != (self.m,):
                raise ValueError(f"y must have shape ({self.m},), got {y.shape}")
            return self._transpose_weighted(y[:, None], weights).reshape(-1)

        return apply

    def marginal_measure(self):
        """``(sets, answers)``: the marginals MEASURE needs and ``tables -> A x`` (:meth:`ResidualPlan.measure_answers`).

        Lets the privacy kernel measure this strategy from marginal counts of
        records (:class:`dpexplorer.privacy.PrivateTable`) without the full
        data vector.
        """
        return self.plan.needed, self.plan.measure_answers

    def answer(self, W, y) -> np.ndarray:
        """Workload answers ``W A⁺ y``, shape ``(m,)``: closed form per product (:meth:`ResidualPlan.answer`).

        A workload without a Kronecker form over this domain is answered
        ``W x̂`` from :meth:`reconstructor` (the same least-squares answers).
        """
        if self._plans_for(W):
            return self.plan.answer(W, y)
        return as_matrix(W).matvec(self.reconstructor()(y))


# ================================================================ entry points
def plan(W, objective: str = "sum", maxiter: int = 5000, tol: float = 1e-9) -> ResidualPlan:
    """ResidualPlanner's plan for a workload matrix (Xiao et al. 2023).

    Parameters
    ----------
    W : Matrix, shape (m, n)
        A union of weighted Kronecker products (marginals, weighted
        marginals, ``[I; 1ᵀ]`` products, range marginals, ...) or a
        one-attribute workload.  Only per-factor row sums and norms are read.
    objective : {"sum", "max"}
        Minimise the total variance (closed form) or the largest per-query
        variance (convex programme, L-BFGS-B on its dual).
    maxiter : int
        L-BFGS-B iteration limit per round (``"max"``).
    tol : float
        Relative duality gap at which ``"max"`` stops.

    Returns
    -------
    ResidualPlan

    Raises
    ------
    NotApplicableError
        If ``W`` has no Kronecker form, no non-zero query, or too many
        attributes per query (:data:`MAX_QUERY_ATTRIBUTES`).
    ValueError
        For an unknown objective or bad ``maxiter``/``tol``.
    """
    return ResidualPlan(_parse(W), objective, maxiter, tol)


def plan_marginals(domain, sets: Iterable[Sequence[int]], weights: Sequence[float] | None = None,
                   objective: str = "sum", maxiter: int = 5000, tol: float = 1e-9) -> ResidualPlan:
    """ResidualPlanner's plan for a list of marginals, without any workload matrix.

    The same plan as :func:`plan` of ``union([w·marginal(domain, s)])``; use it
    for domains with many attributes (100 binary attributes: all 0–3-way
    marginals are 166,751 marginals).

    Parameters
    ----------
    domain : sequence of int
        Attribute sizes.
    sets : iterable of sequence of int
        The marginals' attribute sets (``()`` is the total).
    weights : sequence of float, optional
        Positive weight per marginal: its queries are multiplied by it, so
        their variance counts ``w²`` times (HDMM Def. 17 weights).
    objective, maxiter, tol
        See :func:`plan`.

    Raises
    ------
    ValueError
        For a bad domain, attribute set or weight.
    """
    return ResidualPlan(_parse_marginals(domain, sets, weights), objective, maxiter, tol)


def residual_planner(W, noise: NoiseModel | None = None, objective: str = "sum", maxiter: int = 5000,
                     tol: float = 1e-9) -> ResidualStrategy:
    """The ResidualPlanner strategy for ``W`` (registered as ``"residual_planner"``).

    Parameters
    ----------
    W : Matrix, shape (m, n)
        See :func:`plan`.
    noise : Gaussian, optional
        Checked only: ResidualPlanner is a Gaussian mechanism.
    objective : {"sum", "max"}

    Returns
    -------
    ResidualStrategy
        Normalised to ``Δ₂ = 1``; ``A.plan`` is the :class:`ResidualPlan` and
        ``A.optimization`` an :class:`~dpexplorer.core.optimization.OptimizationResult`
        (``objective`` its unit TSE; ``info["max_variance"]`` its unit largest
        per-query variance when the objective is ``"max"``).

    Raises
    ------
    NotApplicableError
        Under Laplace noise (the optimality is for Gaussian noise, L2 cost),
        or for a workload :func:`plan` rejects.
    """
    if noise is not None and getattr(noise, "norm", None) != 2:
        raise registry.NotApplicableError(_LAPLACE_MESSAGE)
    p = plan(W, objective=objective, maxiter=maxiter, tol=tol)
    A = p.strategy()
    info = dict(p.info)
    if objective == "max":
        info["max_variance"] = info["upper"]
    # attach returns the strategy it is given, here p.strategy(), a ResidualStrategy
    return cast(ResidualStrategy, optimization.attach(optimization.OptimizationResult(
        strategy=A, objective=p.unit_tse, seconds=p.info["seconds"], method="residual_planner",
        info=info)))


def _build(W, noise, objective="sum"):
    return residual_planner(W, noise, objective=objective)


registry.register(registry.Mechanism(
    "residual_planner", "ResidualPlanner", _build,
    "Optimal Gaussian noise on the residuals of the marginals' downward closure; closed-form "
    "reconstruction (objective: total or max variance).",
    "Xiao, He, Zhang, Kifer, NeurIPS 2023 (ResidualPlanner)", params={"objective": "sum"},
    tables=True, audit=registry.AuditSpec(workload="marginals", noise="gaussian")))
