"""Stacked Kronecker strategies answered by local least squares (HDMM Sec. 6.2, 10).

OPT+ (:func:`dpexplorer.strategies.templates.opt_plus`, HDMM Def. 19) measures one
strategy per group of workload product terms and scales group ``g`` by a
budget weight ``c_g``.  :class:`KronStack` is that strategy as an implicit
matrix: products act block by block (Kronecker blocks factor by factor, HDMM
Thm 14), the sensitivity is exact without forming the ``n`` columns when the
blocks have constant column norms, and the expected error is that of *local
least squares* (HDMM Sec. 10 item 3), which the closed-form weights optimise
and which :func:`dpexplorer.mechanism.release` uses for the answers.

Also here: :func:`product_terms` (a workload as a list of weighted products,
HDMM Eq. 3) and :class:`FactorInverse` (``(AᵀA)⁺`` of a 1D factor strategy,
closed form for Identity and Total).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..core.error import GramInverse, UnsupportedWorkloadError, kron_terms
from ..queries.matrix import (
    DENSE_LIMIT,
    Dense,
    Identity,
    Kronecker,
    Matrix,
    MatrixTooLargeError,
    Ones,
    VStack,
    Weighted,
    as_matrix,
)

if TYPE_CHECKING:
    from ..core.reconstruct import Reconstructor

__all__ = ["product_terms", "term_matrix", "FactorInverse", "KronStack"]


def product_terms(W) -> list[tuple[float, list[Matrix]]]:
    """``W`` as a list of weighted products ``(w_j, [W_j1, ..., W_jd])`` in row order.

    :func:`dpexplorer.core.error.kron_terms` with ``leaves=True``: a Kronecker
    product is one term, ``Weighted`` multiplies the weight, ``VStack``
    concatenates its blocks' terms, and any other matrix is a single
    one-factor term (HDMM Eq. 3).

    Parameters
    ----------
    W : Matrix or array, shape (m, n)

    Returns
    -------
    list of (float, list of Matrix)
        Term ``j`` has factors ``W_ji: (m_ji, n_i)``; ``Σ_j Π_i m_ji = m``.

    Raises
    ------
    ValueError
        If ``W`` is not a matrix (:func:`~dpexplorer.queries.matrix.as_matrix`).
    """
    return [(c, list(f)) for c, f in kron_terms(as_matrix(W), leaves=True)]


def term_matrix(weight: float, factors: list[Matrix]) -> Matrix:
    """The product term ``weight · (F_1 ⊗ ... ⊗ F_d)``, shape ``(Π m_i, Π n_i)`` (one factor: ``weight · F_1``)."""
    M = factors[0] if len(factors) == 1 else Kronecker(factors)
    return M if weight == 1.0 else Weighted(M, weight)


class FactorInverse:
    """``X⁺`` of a factor strategy's Gram ``X = AᵀA``, with the interface of :class:`error.GramInverse`.

    Closed forms for Identity (``X⁺ = I``) and Total/Ones with ``m`` rows
    (``X = m·J``, ``X⁺ = J/(m n²)``, which supports exactly the Grams ∝ ``J``);
    any other factor goes through :class:`~dpexplorer.core.error.GramInverse`.
    """

    def __init__(self, A: Matrix):
        self.n = A.n
        self._inv: GramInverse | None  # None for the closed forms (kind "identity" or "ones")
        if isinstance(A, Identity):
            self.kind, self._inv = "identity", None
        elif isinstance(A, Ones):
            self.kind, self._inv, self.rows = "ones", None, A.m
        else:
            self.kind, self._inv = "general", GramInverse(np.asarray(A.gram().dense(), dtype=float))

    @property
    def pinv(self) -> np.ndarray:
        """``X⁺``, shape ``(n, n)``."""
        if self.kind == "identity":
            return np.eye(self.n)
        if self.kind == "ones":
            return np.full((self.n, self.n), 1.0 / (self.rows * self.n * self.n))
        assert self._inv is not None  # kind "general"
        return self._inv.pinv

    def supports(self, G: np.ndarray) -> bool:
        """Whether a factor workload with Gram ``G: (n, n)`` lies in the row space of ``A``."""
        if self.kind == "identity":
            return True
        if self.kind == "ones":
            scale = max(float(np.abs(G).max()), 1e-300)
            return bool(np.ptp(G) <= 1e-8 * scale)
        assert self._inv is not None  # kind "general"
        return self._inv.supports(G)

    def trace(self, G: np.ndarray) -> float:
        """``tr(G X⁺)`` for a symmetric ``G: (n, n)``."""
        if self.kind == "identity":
            return float(np.trace(G))
        if self.kind == "ones":
            return float(G.sum()) / (self.rows * self.n * self.n)
        assert self._inv is not None  # kind "general"
        return self._inv.trace(G)


def _factors_of(M: Matrix) -> list[Matrix]:
    return list(M.factors) if isinstance(M, Kronecker) else [M]


#: Largest factor whose column norms are scanned for a common value (O(n_i) each).
SCAN_FACTOR_CELLS = 2**22
#: Largest stack whose full column-norm vector is computed for an exact sensitivity.
EXACT_NORMS_CELLS = 2**27


def _constant_column_norm(M: Matrix, p: int) -> float | None:
    """The common column norm of ``M`` if all its columns share it, else ``None``."""
    out = 1.0
    for f in _factors_of(M):
        if f.n > SCAN_FACTOR_CELLS:
            return None
        v = f.column_norms(p)
        if v.size and np.ptp(v) > 1e-12 * max(float(v.max()), 1e-300):
            return None
        out *= float(v[0]) if v.size else 0.0
    return out


class KronStack(VStack):
    """Stacked strategies ``[c_1 A_1; ...; c_k A_k]`` answered by local least squares (OPT+).

    Block ``g`` is strategy ``A_g`` (a Kronecker product or any matrix over
    the ``n`` cells) scaled by ``c_g``, measured for the workload terms in
    ``groups[g]``.  Products act block by block (Kronecker blocks factor by
    factor, HDMM Thm 14); no ``n × n`` matrix is formed.

    Local least squares (HDMM Sec. 10 item 3): term ``j`` of group ``g`` is
    answered as ``W_j x̂_g`` with ``x̂_g = A_g⁺ y_g / c_g`` from its own
    block's answers ``y_g`` only.  Its unit-noise TSE is
    ``Δ(stack)² · Σ_g Σ_{j ∈ g} w_j² Π_i tr(G_ji (A_giᵀA_gi)⁺) / c_g²``
    (:meth:`workload_trace` gives the sum, :func:`error.unit_tse` multiplies by
    ``Δ²``); this is what OPT+'s weights minimise.  It applies to workloads
    whose product terms (:func:`product_terms`) have the shapes the stack was
    built for; for any other workload the hooks return ``NotImplemented`` and
    the generic global least-squares error (dense Gram) is used instead.

    ``x̂`` (:meth:`reconstructor`, for display) is the *global* least-squares
    estimate ``A⁺y`` of the whole stack (dense pseudo-inverse up to 4096
    cells, else scipy lsmr); :meth:`answer` gives the local answers, which
    :func:`dpexplorer.mechanism.release` reports, so the two generally differ.

    Sensitivity: ``Δ₁ = max_x Σ_g c_g‖A_g e_x‖₁`` and
    ``Δ₂² = max_x Σ_g c_g²‖A_g e_x‖₂²``.  When every block has constant
    column norms (OPT0/OPT⊗ strategies are normalised so), this is exact in
    O(Σ n_i); otherwise the full column-norm vector is computed when
    ``n ≤ EXACT_NORMS_CELLS`` (2**27) and above that the upper bound ``Σ c_g Δ(A_g)`` (resp.
    ``sqrt(Σ c_g² Δ₂(A_g)²)``) is used (``sensitivity_is_bound`` is then
    true): more noise, still private.

    Parameters
    ----------
    strategies : sequence of Matrix, each shape (p_g, n)
    weights : array_like, shape (k,)
        Positive ``c_g``.
    groups : list of list of int
        Workload term indices (row order of :func:`product_terms`) per block.
    signature : list of tuple
        Per workload term, the ``(m_i, n_i)`` shapes of its factors.
    name : str

    Raises
    ------
    ValueError
        Mismatched lengths, non-positive weights, blocks over different cells.
    """

    def __init__(self, strategies: Sequence[Matrix], weights, groups, signature, name="kron_stack"):
        strategies = [as_matrix(A) for A in strategies]
        weights = np.asarray(weights, dtype=float)
        if weights.shape != (len(strategies),) or not np.all(np.isfinite(weights)) \
                or np.any(weights <= 0):
            raise ValueError("weights must be positive finite numbers, one per strategy")
        if len(groups) != len(strategies):
            raise ValueError(f"{len(groups)} groups for {len(strategies)} strategies")
        flat = sorted(int(j) for g in groups for j in g)
        if flat != list(range(len(signature))) or any(len(g) == 0 for g in groups):
            raise ValueError(f"groups must partition the {len(signature)} workload terms of the "
                             f"signature (indices 0..{len(signature) - 1}, each exactly once)")
        super().__init__([Weighted(A, float(c)) for A, c in zip(strategies, weights, strict=True)],
                         name=name)
        self.strategies = strategies
        self.weights = weights
        self.groups = [list(g) for g in groups]
        self.signature = [tuple(s) for s in signature]
        self.sensitivity_is_bound = False
        self._inv_cache: dict = {}
        self._pinv_cache: dict = {}
        self._recon: Reconstructor | None = None

    # ----------------------------------------------------------- sensitivity
    def sensitivity(self, p: int = 1) -> float:
        """L1 (``p=1``) or L2 (``p=2``) sensitivity of the stack (see the class notes).

        Source: HDMM Def. 7-8, Li & Miklau 2012 Prop. 1 (the largest column norm of
        the stacked strategy, add/remove one record).

        Raises
        ------
        ValueError
            If ``p`` is not 1 or 2.
        """
        if p not in (1, 2):
            raise ValueError(f"p must be 1 (L1, Laplace) or 2 (L2, Gaussian), got {p!r}")
        consts = [_constant_column_norm(A, p) for A in self.strategies]
        if all(v is not None for v in consts):
            if p == 1:
                return float(sum(c * v for c, v in zip(self.weights, consts, strict=True)))
            return math.sqrt(sum((c * v) ** 2 for c, v in zip(self.weights, consts, strict=True)))
        if self.n <= EXACT_NORMS_CELLS:
            return float(self.column_norms(p).max())
        self.sensitivity_is_bound = True
        sens = [A.sensitivity(p) for A in self.strategies]
        if p == 1:
            return float(sum(c * s for c, s in zip(self.weights, sens, strict=True)))
        return math.sqrt(sum((c * s) ** 2 for c, s in zip(self.weights, sens, strict=True)))

    # ------------------------------------------------------ local least squares
    def _matching_terms(self, W):
        terms = product_terms(W)
        sig = [tuple((f.m, f.n) for f in factors) for _, factors in terms]
        return terms if sig == self.signature else None

    def _factor_inverse(self, f: Matrix) -> FactorInverse:
        key = id(f)
        if key not in self._inv_cache:
            self._inv_cache[key] = (f, FactorInverse(f))
        return self._inv_cache[key][1]

    def _term_trace(self, factors, A: Matrix) -> float:
        out = 1.0
        for Wf, Af in zip(factors, _factors_of(A), strict=True):
            G = np.asarray(Wf.gram().dense(), dtype=float)
            inv = self._factor_inverse(Af)
            if not inv.supports(G):
                raise UnsupportedWorkloadError(
                    f"block {A.name!r} of {self.name!r} does not support workload factor "
                    f"{Wf.name!r}")
            out *= inv.trace(G)
        return out

    def workload_trace(self, W):
        """``Σ_g Σ_{j∈g} w_j² Π_i tr(G_ji (A_giᵀA_gi)⁺) / c_g²`` (local least squares).

        Returns ``NotImplemented`` for a workload whose product terms do not
        match the stack's signature.

        Raises
        ------
        UnsupportedWorkloadError
            If a block does not support one of its terms.
        """
        terms = self._matching_terms(W)
        if terms is None:
            return NotImplemented
        total = 0.0
        for A, c, idx in zip(self.strategies, self.weights, self.groups, strict=True):
            for j in idx:
                w, factors = terms[j]
                total += w * w * self._term_trace(factors, A) / (c * c)
        return total

    def workload_row_variances(self, W):
        """``diag`` of the local least-squares covariance per unit noise, shape ``(m,)``.

        ``W: (m, n)``; ``NotImplemented`` if its terms do not match the stack.

        Raises
        ------
        UnsupportedWorkloadError
            If a block does not support one of its terms.
        """
        terms = self._matching_terms(W)
        if terms is None:
            return NotImplemented
        block_of = {j: g for g, idx in enumerate(self.groups) for j in idx}
        out = []
        for j, (w, factors) in enumerate(terms):
            g = block_of[j]
            A, c = self.strategies[g], self.weights[g]
            self._term_trace(factors, A)  # support check
            pinvs = [Dense(self._factor_inverse(Af).pinv) for Af in _factors_of(A)]
            M = term_matrix(1.0, factors)
            if len(factors) == 1:
                out.append(w * w * M.rows_quadratic(pinvs[0].array) / (c * c))
            else:
                out.append(w * w * M.rows_quadratic(Kronecker(pinvs)) / (c * c))
        return np.concatenate(out)

    def _block_pinv(self, g: int) -> Matrix:
        if g not in self._pinv_cache:  # Kronecker.pinv works factor by factor
            self._pinv_cache[g] = self.strategies[g].pinv()
        return self._pinv_cache[g]

    def local_estimates(self, y) -> list[np.ndarray]:
        """``x̂_g = A_g⁺ y_g / c_g`` for every block ``g``, each shape ``(n,)``.

        Raises
        ------
        ValueError
            If ``y`` does not have one entry per strategy row.
        """
        y = np.asarray(y, dtype=float)
        if y.shape != (self.m,):
            raise ValueError(f"y must have shape ({self.m},) to match the strategy, got {y.shape}")
        off = self._offsets()
        return [self._block_pinv(g).matvec(y[off[g]:off[g + 1]]) / self.weights[g]
                for g in range(len(self.strategies))]

    def answer(self, W, y) -> np.ndarray:
        """Workload answers by local least squares (HDMM Sec. 10 item 3), shape ``(m,)``, counts.

        ``W: (m, n)``; ``y: (p,)`` the noisy strategy answers (counts).

        Term ``j`` of group ``g`` is answered ``w_j (⊗ W_ji) x̂_g``: unbiased,
        with the error of :meth:`workload_trace`, but answers of different
        groups need not be consistent.  For a workload that does not match
        the stack's terms, ``W x̂`` with the global least-squares ``x̂``.

        Raises
        ------
        ValueError
            If ``y`` does not have shape ``(p,)``.
        """
        W = as_matrix(W)
        terms = self._matching_terms(W)
        if terms is None:
            return W.matvec(self.reconstructor()(y))
        xs = self.local_estimates(y)
        block_of = {j: g for g, idx in enumerate(self.groups) for j in idx}
        return np.concatenate([term_matrix(w, f).matvec(xs[block_of[j]])
                               for j, (w, f) in enumerate(terms)])

    def reconstructor(self) -> Callable[[np.ndarray], np.ndarray]:
        """``y: (p,) ↦ x̂: (n,)`` (counts): global least squares ``A⁺y`` over the whole stack.

        :class:`dpexplorer.mechanism.Reconstructor` with its generic paths:
        dense pseudo-inverse of the Gram matrix up to
        ``DENSE_RECONSTRUCT_LIMIT`` cells, else scipy lsmr (minimum-norm
        least squares).
        """
        if self._recon is None:
            from ..core.reconstruct import DENSE_RECONSTRUCT_LIMIT, Reconstructor

            method = "dense" if self.n <= DENSE_RECONSTRUCT_LIMIT else "lsmr"
            self._recon = Reconstructor(self, method=method)
        return self._recon

    def _gram(self):
        if self.n * self.n > DENSE_LIMIT:
            raise MatrixTooLargeError(
                f"Gram matrix of {self.name!r} would have {self.n:,}² entries, above the limit "
                f"of {DENSE_LIMIT:,}; its error is computed term by term (workload_trace)")
        grams = [A.gram() for A in self.strategies]
        total = np.zeros((self.n, self.n))
        for G, c in zip(grams, self.weights, strict=True):
            total += c * c * np.asarray(G.dense(), dtype=float)
        return Dense(total)
