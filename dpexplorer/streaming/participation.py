"""Sensitivity of a strategy when one person contributes at several steps ("min-separation" participation).

In continual counting the data vector ``x: (T,)`` holds the count of every
step.  When one person may contribute a count of 1 at up to ``k`` steps, any
two of them at least ``b`` steps apart, neighbouring data vectors differ by
``u ∈ {0, 1}^T`` supported on a *participation pattern*

    π = {p_1 < … < p_m},   1 ≤ m ≤ k,   p_{l+1} − p_l ≥ b,

(the "b-min-separation" participation of Choquette-Choo, Ganesh, McKenna,
McMahan, Rush, Thakurta & Xu, "(Amplified) banded matrix factorization: a
unified approach to private training", NeurIPS 2023, Sec. 2; the multi-epoch
setting of Choquette-Choo, McMahan, Rush & Thakurta, "Multi-epoch matrix
factorization mechanisms for private machine learning", ICML 2023, Sec. 2).
The sensitivity of a strategy ``C: (m, T)`` is then

    Δ₂(C)² = max_π ‖C u_π‖₂² = max_π Σ_{i,j∈π} (CᵀC)_ij,     Δ₁(C) = max_π ‖C u_π‖₁,

which for ``k = 1`` is the largest column norm (the plain sensitivity,
:meth:`dpexplorer.queries.matrix.Matrix.sensitivity`).  At most
``k' = min(k, ⌊(T − 1)/b⌋ + 1)`` participations fit in ``T`` steps
(:func:`max_participations`).

The maximum over patterns is a quadratic maximisation over constrained
subsets, hard in general.  :func:`sensitivity_details` computes it **exactly**
in these cases (``exact=True``):

* ``k' = 1``: the largest column norm;
* ``C`` lower-triangular Toeplitz (:class:`~dpexplorer.queries.toeplitz.LowerToeplitz`,
  ``Prefix``, ``Identity``, their multiples, or a dense matrix of that form)
  with a **non-negative, non-increasing** first column ``c``: the worst
  pattern is ``{0, b, 2b, …, (k'−1)b}`` (Kalinin & Lampert, "Banded square
  root matrix factorization for differentially private model training",
  NeurIPS 2024, Thm 2; also used by McKenna, "Scaling up the banded matrix
  factorization mechanism for differentially private ML", ICLR 2025).  Proof,
  in our notation: ``(CᵀC)_ij = Σ_{m=0}^{T−1−max(i,j)} c_m c_{m+|i−j|}`` is
  non-negative, non-increasing in ``max(i, j)`` (fewer non-negative terms)
  and in ``|i − j|`` (``c`` non-increasing); the compressed pattern
  ``q_l = (l−1)b`` has ``q_l ≤ p_l`` and ``q_{l'} − q_l ≤ p_{l'} − p_l``, so
  every term of its sum is at least the corresponding term of any pattern's,
  and adding participations adds non-negative terms.  For ``p = 1`` the same
  holds with the column L1 norms whenever ``c ≥ 0`` (no cancellation; the
  column norms are non-increasing);
* columns ``b`` or more apart orthogonal (``(CᵀC)_ij = 0`` for ``|i − j| ≥ b``),
  e.g. ``C`` lower-triangular with at most ``b`` bands: ``‖C u_π‖₂² =
  Σ_{j∈π} ‖C_{:,j}‖²``, maximised exactly by the dynamic programme
  :func:`best_pattern_sum` (Choquette-Choo et al., NeurIPS 2023, Sec. 4 and
  Algorithm 3, "VecSens"); when ``k'`` equally good columns fit, this is
  ``√k' · max_j ‖C_{:,j}‖₂``.  For ``p = 1`` the same with disjoint column
  supports, or with ``C`` of one sign (no cancellation: ``‖C u_π‖₁ =
  Σ_{j∈π} ‖C_{:,j}‖₁``);
* any ``C`` whose patterns number at most :data:`BRUTE_FORCE_PATTERNS`
  over at most :data:`BRUTE_FORCE_MAX_STEPS` steps: every pattern is evaluated.

Otherwise it returns a **safe upper bound** (``exact=False``; a larger
sensitivity only adds noise, a smaller one would break the privacy
guarantee): the smaller of

* for a Toeplitz ``C``, the exact value for the non-negative, non-increasing
  majorant ``ĉ_j = max_{i≥j} |c_i|`` (``|(CᵀC)_ij| ≤ (ĈᵀĈ)_ij`` entry by entry);
* for ``p = 2``, ``max_π Σ_{i∈π} max(0, max_{π'} Σ_{j∈π'} (CᵀC)_ij)``: the row
  relaxation of Choquette-Choo et al., NeurIPS 2023, Algorithm 4 (two 1-D
  dynamic programmes; ``Δ₂² = max_π Σ_{i∈π} (CᵀC u_π)_i`` and each row's term
  is at most its best pattern sum), without the absolute values of their
  Eq. 5, which contributions of any sign need but a count (``u ∈ {0, 1}^T``)
  does not; for ``p = 1``, ``max_π Σ_{j∈π} ‖C_{:,j}‖₁`` (triangle inequality).

:class:`Participation` wraps a strategy so that its ``sensitivity(p)`` is the
participation sensitivity: :func:`dpexplorer.error.rmse`, simulations and
releases then calibrate the noise to it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..queries.matrix import (
    DENSE_LIMIT,
    Dense,
    Identity,
    Matrix,
    MatrixTooLargeError,
    Prefix,
    Weighted,
    _check_p,
    as_matrix,
)
from ..queries.toeplitz import LowerToeplitz

__all__ = [
    "BRUTE_FORCE_MAX_STEPS",
    "BRUTE_FORCE_PATTERNS",
    "ParticipationSensitivity",
    "Participation",
    "best_pattern_sum",
    "max_participations",
    "pattern_count",
    "participation_sensitivity",
    "sensitivity_details",
]

#: Largest number of participation patterns evaluated one by one (an exact answer for any ``C``).
BRUTE_FORCE_PATTERNS = 200_000
#: Most steps for that enumeration (it needs the dense ``T × T`` Gram ``CᵀC``, ``O(m T²)`` to form).
BRUTE_FORCE_MAX_STEPS = 2048


@dataclass(frozen=True)
class ParticipationSensitivity:
    """The participation sensitivity of a strategy, and how it was found.

    Attributes
    ----------
    value : float
        ``Δ_p``: exact when :attr:`exact`, else an upper bound (safe for privacy).
    exact : bool
        Whether :attr:`value` is the maximum over every pattern.
    method : str
        ``"single"`` (``k' = 1``), ``"toeplitz_monotone"``, ``"orthogonal_columns"``
        (``p = 2``) / ``"disjoint_columns"`` / ``"one_sign"`` (``p = 1``),
        ``"brute_force"`` (exact); ``"toeplitz_majorant"``, ``"row_bound"``,
        ``"triangle_inequality"`` (upper bounds).
    pattern : tuple of int or None
        A worst pattern (steps, 0-based) when the method finds one.
    participations : int
        ``k' = min(k, ⌊(T−1)/b⌋ + 1)``, the most participations that fit.
    """

    value: float
    exact: bool
    method: str
    pattern: tuple[int, ...] | None
    participations: int


def _whole(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{what} must be a whole number, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{what} must be at least 1, got {value}")
    return int(value)


def max_participations(T: int, k: int, b: int) -> int:
    """``k' = min(k, ⌊(T − 1)/b⌋ + 1)``: the most steps, pairwise ``≥ b`` apart, among ``T`` steps.

    Raises
    ------
    TypeError, ValueError
        If ``T``, ``k`` or ``b`` is not a whole number ``≥ 1``.
    """
    T, k, b = _whole(T, "T (the number of steps)"), _whole(k, "k (participations)"), \
        _whole(b, "b (the minimum separation)")
    return min(k, (T - 1) // b + 1)


def pattern_count(T: int, k: int, b: int) -> int:
    """Number of participation patterns: non-empty sets of ``≤ k`` steps of ``0..T−1`` pairwise ``≥ b`` apart.

    ``Σ_{m=1}^{k'} binom(T − (m−1)(b−1), m)`` (a pattern of ``m`` steps, shifted
    left by ``(l−1)(b−1)`` at its ``l``-th step, is any ``m``-subset of
    ``T − (m−1)(b−1)`` steps).
    """
    kk = max_participations(T, k, b)
    return sum(math.comb(T - (m - 1) * (b - 1), m) for m in range(1, kk + 1))


def _patterns(T: int, m: int, b: int) -> np.ndarray:
    """Every pattern of exactly ``m`` steps, pairwise ``≥ b`` apart, shape ``(count, m)``."""
    free = T - (m - 1) * (b - 1)
    combos = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(free), m)),
                         dtype=np.int64).reshape(-1, m)
    return combos + (b - 1) * np.arange(m)


def _best_sums(w: np.ndarray, k: int, b: int) -> np.ndarray:
    """Row by row, ``max_π Σ_{j∈π} w[r, j]`` over patterns of ``≤ k`` steps ``≥ b`` apart (empty allowed).

    ``F_m[i]``: the best sum of ``≤ m`` picks in ``i..T−1``; ``F_m[i] = max(w_i +
    F_{m−1}[i + b], F_m[i + 1])`` (Choquette-Choo et al., NeurIPS 2023, Algorithm 3).
    ``w: (r, T)``; ``O(r T k)``.
    """
    r, T = w.shape
    f = np.zeros((r, T + b))
    for _ in range(k):
        g = np.zeros_like(f)
        g[:, :T] = w + f[:, b:b + T]
        f = np.maximum.accumulate(g[:, ::-1], axis=1)[:, ::-1]
    return f[:, 0]


def best_pattern_sum(w, k: int, b: int) -> tuple[float, tuple[int, ...]]:
    """``max_π Σ_{j∈π} w_j`` over patterns of ``1..k`` steps pairwise ``≥ b`` apart, and a best pattern.

    A dynamic programme in ``O(T k)`` (Choquette-Choo, Ganesh, McKenna,
    McMahan, Rush, Thakurta & Xu, NeurIPS 2023, Algorithm 3 "VecSens"):
    ``F_m[i] = max(w_i + F_{m−1}[i + b], F_m[i + 1])``.  With negative weights
    a pattern of fewer than ``k`` steps may win; the pattern is never empty.

    Parameters
    ----------
    w : array, shape (T,)
        Weights of the steps (finite).
    k, b : int
        Participations (``≥ 1``) and minimum separation (``≥ 1``).

    Returns
    -------
    (float, tuple of int)

    Raises
    ------
    ValueError
        If ``w`` is not a finite non-empty 1D array, or ``k``/``b`` below 1.
    TypeError
        If ``k`` or ``b`` is not a whole number.
    """
    w = np.asarray(w, dtype=float)
    if w.ndim != 1 or w.size == 0 or not np.isfinite(w).all():
        raise ValueError(f"the weights must be a finite non-empty 1D array, got shape {w.shape}")
    T = w.size
    kk = max_participations(T, k, b)
    b = int(b)
    # best[m][i]: the best sum of a pattern of 1..m steps within i..T-1 (-inf past the end);
    # pick[m][i]: the best such pattern that starts at i (i, then the best continuation from
    # i + b with m - 1 steps, or none when that is not positive)
    best = [np.full(T + b, -np.inf)]
    pick = [np.zeros(T)]  # pick[0] is never read
    for m in range(1, kk + 1):
        cont = np.maximum(best[m - 1][b:b + T], 0.0)
        pm = w + cont
        bm = np.full(T + b, -np.inf)
        bm[:T] = np.maximum.accumulate(pm[::-1])[::-1]
        best.append(bm)
        pick.append(pm)
    pattern, i, m = [], 0, kk
    while i < T:
        if pick[m][i] == best[m][i]:  # starting here is optimal (exact: best is a max of picks)
            pattern.append(i)
            if m == 1 or not best[m - 1][i + b] > 0.0:
                break
            i, m = i + b, m - 1
        else:
            i += 1
    return float(best[kk][0]), tuple(pattern)


# ------------------------------------------------------------------ structure
def _toeplitz_column(C: Matrix) -> np.ndarray | None:
    """First column ``c`` when ``C`` is a ``T × T`` lower-triangular Toeplitz matrix (known by type
    or, for a dense matrix, checked entry by entry), else None."""
    if isinstance(C, Weighted):
        inner = _toeplitz_column(C.base)
        return None if inner is None else C.weight * inner
    if isinstance(C, LowerToeplitz):
        return np.array(C.column)
    if isinstance(C, Prefix) and C.m == C.n:
        return np.ones(C.n)
    if isinstance(C, Identity):
        return np.eye(1, C.n, 0)[0]
    if isinstance(C, Dense) and C.m == C.n:
        D = C.array
        c = D[:, 0]
        T = C.n
        idx = np.subtract.outer(np.arange(T), np.arange(T))
        expected = np.where(idx >= 0, c[np.clip(idx, 0, None)], 0.0)
        if np.array_equal(D, expected):
            return np.array(c)
    return None


def _toeplitz_pattern_value(c: np.ndarray, kk: int, b: int, p: int) -> tuple[float, tuple[int, ...]]:
    """``‖C u‖_p`` for the pattern ``{0, b, …, (kk−1)b}``, ``C`` lower-triangular Toeplitz, column ``c``."""
    T = c.size
    pattern = tuple(range(0, (kk - 1) * b + 1, b))
    u = np.zeros(T)
    u[list(pattern)] = 1.0
    y = LowerToeplitz(c).matvec(u)
    return float(np.linalg.norm(y, ord=p)), pattern


def _dense_gram(C: Matrix) -> np.ndarray:
    try:
        return C.gram().dense()
    except MatrixTooLargeError as exc:
        raise MatrixTooLargeError(
            f"participation sensitivity of {C.name!r} ({C.n:,} steps): this strategy has no structure "
            f"the computation knows (lower-triangular Toeplitz, Prefix, Identity) and its T × T Gram "
            f"matrix is above the size limit; use a Toeplitz strategy") from exc


def _dense(C: Matrix) -> np.ndarray:
    try:
        return C.dense()
    except MatrixTooLargeError as exc:
        raise MatrixTooLargeError(
            f"participation sensitivity (L1) of {C.name!r} {C.shape}: the strategy has no structure "
            f"the computation knows (lower-triangular Toeplitz, Prefix, Identity) and is above the "
            f"size limit as a dense matrix") from exc


def _brute_force(C: Matrix, k: int, b: int, p: int) -> tuple[float, tuple[int, ...]]:
    """The maximum over every pattern (the count is checked by the caller)."""
    T = C.n
    kk = max_participations(T, k, b)
    best, arg = -math.inf, tuple[int, ...]()
    M = _dense_gram(C) if p == 2 else _dense(C)
    for m in range(1, kk + 1):
        P = _patterns(T, m, b)
        step = max(1, DENSE_LIMIT // (8 * max(m * (m if p == 2 else M.shape[0]), 1)))
        for s in range(0, P.shape[0], step):
            Q = P[s:s + step]
            if p == 2:
                vals = M[Q[:, :, None], Q[:, None, :]].sum(axis=(1, 2))
            else:
                vals = np.abs(M[:, Q].sum(axis=2)).sum(axis=0)
            i = int(np.argmax(vals))
            if vals[i] > best:
                best, arg = float(vals[i]), tuple(int(j) for j in Q[i])
    return (math.sqrt(max(best, 0.0)) if p == 2 else best), arg


def _row_bound(G: np.ndarray, k: int, b: int) -> float:
    """``sqrt(max_π Σ_{i∈π} r_i)``, ``r_i = max(0, max_π' Σ_{j∈π'} G_ij)``: an upper bound on ``Δ₂``.

    Algorithm 4 of Choquette-Choo et al., NeurIPS 2023, without its absolute
    values, which a count does not need: for the pattern ``π`` itself,
    ``u_πᵀ G u_π = Σ_{i∈π} (G u_π)_i ≤ Σ_{i∈π} r_i`` because ``u_π ∈ {0, 1}^T``
    (there, a contribution ``u`` may take any signs in ``[−1, 1]``, hence ``|G|``).
    Rows in blocks of bounded memory.
    """
    T = G.shape[0]
    step = max(1, DENSE_LIMIT // (8 * (T + b)))
    r = np.concatenate([_best_sums(G[s:s + step], k, b) for s in range(0, T, step)])
    return math.sqrt(float(_best_sums(r[None, :], k, b)[0]))


def sensitivity_details(C, k: int, b: int, p: int = 2) -> ParticipationSensitivity:
    """The L``p`` sensitivity of ``C`` under ``k`` participations ``≥ b`` steps apart, and how it was found.

    ``Δ_p = max_π ‖C u_π‖_p`` over the participation patterns ``π`` (``1..k``
    steps, pairwise ``≥ b`` apart), exact or a labelled upper bound; see the
    module docstring for the cases and their sources.

    Parameters
    ----------
    C : Matrix or array, shape (m, T)
        Strategy over ``T`` steps (one column per step).
    k : int
        Most participations of one person (``≥ 1``).
    b : int
        Minimum separation between two participations, in steps (``≥ 1``;
        ``b = 1`` allows consecutive steps).
    p : {1, 2}
        1 for Laplace noise, 2 for Gaussian.

    Returns
    -------
    ParticipationSensitivity

    Raises
    ------
    TypeError
        If ``k`` or ``b`` is not a whole number, or ``C`` not a matrix.
    ValueError
        If ``k`` or ``b`` is below 1 or ``p`` not 1 or 2.
    MatrixTooLargeError
        If ``C`` has no known structure, needs its exact or bounding computation
        through a dense ``T × T`` Gram (or dense ``C``), and that is above the size limit.
    """
    C = as_matrix(C)
    if isinstance(C, Participation):
        raise TypeError("C is already a Participation; pass its strategy (Participation.base)")
    _check_p(p)
    T = C.n
    kk = max_participations(T, k, b)
    k, b = int(k), int(b)
    if kk == 1:
        norms = C.column_norms(p)
        j = int(np.argmax(norms))
        return ParticipationSensitivity(float(norms[j]), True, "single", (j,), 1)
    c = _toeplitz_column(C)
    bounds: list[tuple[float, str, tuple[int, ...] | None]] = []
    if c is not None:
        nz = np.flatnonzero(c)
        bands = int(nz[-1]) + 1 if nz.size else 0
        one_sign = bool(np.all(c >= 0) or np.all(c <= 0))
        monotone = one_sign and bool(np.all(np.diff(np.abs(c)) <= 0))
        if (p == 2 and monotone) or (p == 1 and one_sign):
            value, pattern = _toeplitz_pattern_value(np.abs(c), kk, b, p)
            return ParticipationSensitivity(value, True, "toeplitz_monotone", pattern, kk)
        if bands <= b:  # columns b apart have disjoint supports
            w = C.column_norms(p)
            value, pattern = best_pattern_sum(w ** 2 if p == 2 else w, kk, b)
            return ParticipationSensitivity(math.sqrt(value) if p == 2 else value, True,
                                            "orthogonal_columns" if p == 2 else "disjoint_columns",
                                            pattern, kk)
        # a safe bound from the non-negative, non-increasing majorant of |c|
        majorant = np.maximum.accumulate(np.abs(c)[::-1])[::-1]
        if p == 2:
            value, pattern = _toeplitz_pattern_value(majorant, kk, b, 2)
            bounds.append((value, "toeplitz_majorant", None))
        else:
            value, pattern = best_pattern_sum(C.column_norms(1), kk, b)
            bounds.append((value, "triangle_inequality", None))
    if T <= BRUTE_FORCE_MAX_STEPS and pattern_count(T, kk, b) <= BRUTE_FORCE_PATTERNS:
        value, pattern = _brute_force(C, kk, b, p)
        return ParticipationSensitivity(value, True, "brute_force", pattern, kk)
    if c is None:
        if p == 2:
            G = _dense_gram(C)
            far = np.abs(np.subtract.outer(np.arange(T), np.arange(T))) >= b
            if not np.any(G[far]):
                value, pattern = best_pattern_sum(np.diag(G).copy(), kk, b)
                return ParticipationSensitivity(math.sqrt(max(value, 0.0)), True,
                                                "orthogonal_columns", pattern, kk)
            bounds.append((_row_bound(G, kk, b), "row_bound", None))
        else:
            D = _dense(C)
            w = np.abs(D).sum(axis=0)
            value, pattern = best_pattern_sum(w, kk, b)
            if np.all(D >= 0) or np.all(D <= 0):
                return ParticipationSensitivity(value, True, "one_sign", pattern, kk)
            nzm = (D != 0).astype(float)
            overlap = nzm.T @ nzm
            far = np.abs(np.subtract.outer(np.arange(T), np.arange(T))) >= b
            if not np.any(overlap[far]):
                return ParticipationSensitivity(value, True, "disjoint_columns", pattern, kk)
            bounds.append((value, "triangle_inequality", None))
    value, method, _ = min(bounds, key=lambda t: t[0])
    return ParticipationSensitivity(float(value), False, method, None, kk)


def participation_sensitivity(C, k: int, b: int, p: int = 2) -> float:
    """``Δ_p`` of ``C: (m, T)`` when one person contributes 1 at up to ``k`` steps pairwise ``≥ b`` apart.

    ``Δ₂² = max_π Σ_{i,j∈π} (CᵀC)_ij``, ``Δ₁ = max_π ‖C u_π‖₁``; exact in the
    cases of :func:`sensitivity_details`, else a safe upper bound (never
    below the true value).  Sources: Choquette-Choo, McMahan, Rush & Thakurta,
    ICML 2023, Sec. 2 (definition); Choquette-Choo et al., NeurIPS 2023,
    Sec. 4, Algorithms 3-4 (banded strategies, bounds); Kalinin &
    Lampert, NeurIPS 2024, Thm 2 (Toeplitz, non-negative non-increasing).

    Raises
    ------
    As :func:`sensitivity_details`.
    """
    return sensitivity_details(C, k, b, p).value


#: Hooks of the base strategy a :class:`Participation` offers as its own (public decoders).
_DELEGATED = frozenset({"answer", "noise_filter", "reconstructor"})


class Participation(Matrix):
    """Strategy ``C`` whose sensitivity counts ``k`` participations ``≥ b`` steps apart; shape of ``C``.

    Products, Gram, column norms, name and the analytic-error hooks
    (``workload_trace``, ``workload_row_variances``) are ``C``'s; only
    :meth:`sensitivity` differs: it is :func:`participation_sensitivity`, so
    :func:`dpexplorer.error.rmse`, :func:`dpexplorer.simulate` and releases
    calibrate the noise to a person's whole contribution.

    Parameters
    ----------
    C : Matrix or array, shape (m, T)
    k : int
        Most participations of one person (``≥ 1``).
    b : int
        Minimum separation in steps (``≥ 1``).

    Raises
    ------
    TypeError, ValueError
        As :func:`sensitivity_details` for ``k`` and ``b``; TypeError if ``C``
        is already a :class:`Participation`.
    """

    def __init__(self, C, k: int, b: int):
        C = as_matrix(C)
        if isinstance(C, Participation):
            raise TypeError("C is already a Participation; wrap its strategy (Participation.base)")
        self.participations = max_participations(C.n, k, b)
        self.k, self.b = int(k), int(b)
        self.base = C
        self.shape = C.shape
        self._details: dict[int, ParticipationSensitivity] = {}

    @property
    def integral(self) -> bool:  # type: ignore[override]  # the base's
        return self.base.integral

    @property
    def name(self):
        return self._name if self._name is not None else self.base.name

    @name.setter
    def name(self, value):
        self._name = value

    @property
    def domain(self):
        return self._domain or self.base.domain

    @domain.setter
    def domain(self, value):
        Matrix.domain.fset(self, value)

    def __repr__(self) -> str:
        return f"<Participation {self.name!r} shape={self.shape} k={self.k} b={self.b}>"

    def __getattr__(self, attr: str):
        # The base's decoders, which do not depend on the sensitivity: its own answers
        # (``answer(W, y)``), its streaming noise filter (``noise_filter(W)``: the kernel scales
        # the noise by this wrapper's sensitivity) and its reconstructor.  Nothing else: a hook
        # that measures (``marginal_measure``) would calibrate to the base's smaller sensitivity.
        if attr in _DELEGATED:
            return getattr(self.__dict__.get("base"), attr)  # AttributeError before __init__
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")

    def _matmat(self, X):
        return self.base._matmat(X)

    def _rmatmat(self, Y):
        return self.base._rmatmat(Y)

    def _dense(self):
        return self.base._dense()

    def gram(self) -> Matrix:
        return self.base.gram()

    def column_norms(self, p: int = 1) -> np.ndarray:
        return self.base.column_norms(p)

    def trace(self) -> float:
        return self.base.trace()

    def frobenius_squared(self) -> float:
        return self.base.frobenius_squared()

    def pinv(self) -> Matrix:
        return self.base.pinv()

    def rows_quadratic(self, M: np.ndarray) -> np.ndarray:
        return self.base.rows_quadratic(M)

    def details(self, p: int = 2) -> ParticipationSensitivity:
        """:func:`sensitivity_details` of the base for norm ``p`` (computed once per ``p``)."""
        _check_p(p)
        if p not in self._details:
            self._details[p] = sensitivity_details(self.base, self.k, self.b, p)
        return self._details[p]

    def sensitivity(self, p: int = 1) -> float:
        """The participation sensitivity ``Δ_p`` (exact or a safe upper bound; see :meth:`details`)."""
        return self.details(p).value

    def workload_trace(self, W: Matrix):
        """The base's ``tr(WᵀW (CᵀC)⁺)`` hook, or ``NotImplemented`` (the generic path)."""
        hook = getattr(self.base, "workload_trace", None)
        return NotImplemented if hook is None else hook(W)

    def workload_row_variances(self, W: Matrix):
        """The base's ``diag(W (CᵀC)⁺ Wᵀ)`` hook, or ``NotImplemented``."""
        hook = getattr(self.base, "workload_row_variances", None)
        return NotImplemented if hook is None else hook(W)
