"""Consistent, non-negative marginal tables from ResidualPlanner's noisy residual measurements.

ResidualPlanner (Xiao, He, Zhang & Kifer, NeurIPS 2023; :mod:`dpexplorer.strategies.residual`)
measures ``ω_b = R_b x + N(0, s_b² I)`` for every residual set ``b`` of the
workload's downward closure and rebuilds every marginal in closed form
(least squares).  Those marginals are mutually consistent but can have
negative cells.  This module post-processes the same measurements (no data,
no privacy cost) into marginals that are consistent *and* non-negative:

* ``"least_squares"``: the plan's own reconstruction,
  :meth:`~dpexplorer.strategies.residual.ResidualPlan.reconstruct`, unchanged;
* ``"grem_lnn"``: GReM-LNN of Mullins et al., "Efficient and private marginal
  reconstruction with local non-negativity" (NeurIPS 2024): the Gaussian
  residuals-to-marginals maximum-likelihood reconstruction (GReM-MLE)
  constrained to local non-negativity (LNN) of the requested marginals,
  written here from the paper's definitions;
* ``"pgm"``: Private-PGM (McKenna, Sheldon & Miklau, "Graphical-model based
  estimation and inference for differential privacy", ICML 2019) through
  the ``mbi`` package (optional extra ``pgm``), fed the same residual
  measurements.

The papers are not among the project's papers, so every step is restated
below and derived from ResidualPlanner's residual basis (equation (1) of
:mod:`dpexplorer.strategies.residual`, reused here as (1)); the tests in
``tests/test_marginal_inference.py`` check each step.

**Notation.**  Domain ``(n_0, ..., n_{d-1})``; attribute sets are sorted
tuples of indices.  ``H_n`` is the orthonormal residual basis
(:func:`~dpexplorer.strategies.residual.residual_basis`, ``H Hᵀ = I``,
``HᵀH = I − J/n``); ``R_b = ⊗_i (H_{n_i} if i ∈ b else 1ᵀ)``.  The marginal
on ``A`` is ``μ_A = Σ_{b⊆A} T_{A,b} α_b`` with ``α_b = R_b x`` and

    T_{A,b} = ⊗_{i∈b} Hᵀ_{n_i} ⊗_{i∈A∖b} 1_{n_i}/n_i                    (1)

(ResidualPlanner's reconstruction, Xiao et al. 2023; the GReM papers' "ReM"
map from residuals to marginals).  The images of different ``b`` are
orthogonal in ``ℝ^{cells of A}`` and ``T_{A,b}ᵀ T_{A,b} = Π_{i∈A∖b} (1/n_i) I``.

**Step 1: GReM-MLE** (Mullins et al. 2024, the Gaussian case of ReM).  Each
measurement ``ω_b^{(k)} ~ N(R_b x, s_{b,k}² I)`` is independent and the
residual blocks are orthogonal, so the log-likelihood separates by residual
set and the MLE of ``α_b = R_b x`` is the precision-weighted mean

    ω̂_b = Σ_k ω_b^{(k)} / s_{b,k}²  /  Σ_k 1/s_{b,k}²,     ŝ_b² = 1 / Σ_k 1/s_{b,k}²    (M1)

(ResidualPlanner measures each set once: ``ω̂_b = ω_b``, ``ŝ_b² = s_b²``), and
the MLE marginals are ``μ_A(ω̂)`` by (1).  An exact measurement
(``s_{b,k} = 0``) fixes ``ω̂_b`` to its value.

**Step 2: local non-negativity** (GReM-LNN, Mullins et al. 2024).  Among
residual vectors ``α`` whose marginals on the constrained sets ``𝒞`` (the
maximal requested sets) have no negative cell, take the most likely one:

    min_α  ½ Σ_b ‖α_b − ω̂_b‖² / ŝ_b²    s.t.  μ_A(α) ≥ 0  for every A ∈ 𝒞      (M2)

Every marginal is then built from the one ``α`` by (1): the tables are
consistent by construction, and the subsets of a set in ``𝒞`` are sums of
its non-negative cells.  (M2) is the projection of ``ω̂`` onto a convex set
in the norm ``Σ_b ‖·‖²/ŝ_b²``, and the true ``R x`` lies in that set, so
``α`` is never farther from the truth than ``ω̂`` in that norm.

*Solver* (our choice: (M2) is strictly convex in ``α``, so its one minimiser does
not depend on the solver beyond the solver's tolerance).
Its Lagrange dual, with multipliers ``λ_A ≥ 0`` shaped like the tables of
``𝒞`` and ``g_b(λ) = Σ_{A∈𝒞, A⊇b} T_{A,b}ᵀ λ_A``:

    α(λ) = ω̂ + ŝ² g(λ),     min_{λ≥0}  f(λ) = ½ Σ_b ŝ_b² ‖g_b(λ)‖² + Σ_A ⟨λ_A, μ_A(ω̂)⟩,
    ∇_{λ_A} f = μ_A(α(λ))                                                         (M3)

(stationarity of ``½Σ‖α_b−ω̂_b‖²/ŝ_b² − Σ_A⟨λ_A, μ_A(α)⟩`` in ``α``); a bound-
constrained quadratic solved matrix-free with scipy's L-BFGS-B.  Its KKT
conditions (``λ ≥ 0``, ``μ(α) ≥ 0``, ``λ·μ(α) = 0``) are those of (M2).

*Exact feasibility* (ours).  A solver stops with cells of order its tolerance
below 0.  The cells of every ``μ_A`` sum to ``α_∅`` (the total), and the
residuals of the uniform table are ``(α_∅, 0, ..., 0)``; shrinking every
non-total residual, ``α_b ← (1 − t) α_b`` for ``b ≠ ∅``, mixes each table
with the uniform one, ``(1 − t) μ_A + t α_∅/|A|``, and the smallest
``t ∈ [0, 1]`` that makes every cell non-negative keeps one ``α`` (consistency
exact).  ``t`` is reported (``info["mix"]``; of the order of the solver's
tolerance over the mean cell).  If ``α_∅ ≤ 0`` the only feasible tables are 0.

**Private-PGM** (McKenna, Sheldon & Miklau 2019).  Private-PGM
finds the distribution ``p`` over the full domain, times a total ``N``, that
minimises the same Gaussian negative log-likelihood
``Σ_b ‖R_b μ_b(p) − ω_b‖²/(2 s_b²)`` over the marginal polytope; its
solution is a graphical model whose cliques are the measured sets, so its
marginals are consistent and non-negative (*global* non-negativity: they
come from one non-negative data vector).  We give ``mbi`` one
``LinearMeasurement`` per residual set ``b ≠ ∅``: query ``R_b`` applied to
the marginal table of ``b`` (``H`` along each axis, a linear map with
orthonormal rows), the noisy answer ``ω_b`` and its standard deviation
``s_b``; the total ``N`` is the MLE ``ω̂_∅`` (at least 1), as ``mbi`` keeps the
total fixed.

In the code: :func:`infer_marginals` (the release path's entry point),
:func:`grem_mle`, :func:`grem_lnn`, :func:`pgm`, :class:`ResidualMeasurements`.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import scipy.optimize

from .residual import ResidualPlan, _basis_along, _basis_t_along

__all__ = [
    "METHODS",
    "available",
    "ResidualMeasurements",
    "grem_mle",
    "grem_lnn",
    "pgm",
    "infer_marginals",
]

#: The inference methods :func:`infer_marginals` knows.
METHODS = ("least_squares", "grem_lnn", "pgm")

_PGM_EXTRA = ("Private-PGM needs the optional extra 'pgm' (the mbi package and JAX, about 400 MB): "
              "pip install 'dpexplorer[pgm]'")


def available(method: str) -> bool:
    """Whether ``method`` (one of :data:`METHODS`) can run here: ``"pgm"`` needs the ``pgm`` extra
    (``mbi``), found without importing it; ValueError for another name."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r:.60}")
    return method != "pgm" or importlib.util.find_spec("mbi") is not None


def require(method: str) -> None:
    """ImportError naming the ``pgm`` extra if ``method`` cannot run here (:func:`available`)."""
    if not available(method):
        raise ImportError(_PGM_EXTRA)


# ================================================================ measurements
@dataclasses.dataclass(frozen=True)
class ResidualMeasurements:
    """Noisy ResidualPlanner measurements: the plan, its noisy answers and the noise variance.

    ``y`` is what :meth:`ResidualPlan.measure_answers` plus Gaussian noise
    gives (a release's ``Release.y``): block ``b`` is ``R_b x / σ_b + N(0, v I)``
    with ``σ_b²`` the plan's unit scale (``plan.sigma2``) and ``v`` the noise
    model's ``variance_per_unit``.  So ``ω_b = σ_b y_b`` estimates ``R_b x``
    with variance ``s_b² = v σ_b²`` counts² per entry (residual module,
    equation (2) and the ``ResidualPlan`` docstring).

    Parameters
    ----------
    plan : ResidualPlan
    y : ndarray, shape (plan.n_rows,)
        Noisy strategy answers (scaled counts), in the plan's row order.
    variance_per_unit : float
        ``v ≥ 0``: the noise variance of every entry of ``y`` (``noise.variance_per_unit``
        of a Gaussian model; 0 for exact measurements).

    Raises
    ------
    TypeError
        If ``plan`` is not a :class:`ResidualPlan`.
    ValueError
        If ``y`` has the wrong shape or non-finite entries, or ``v`` is negative or not finite.
    """

    plan: ResidualPlan
    y: np.ndarray
    variance_per_unit: float

    def __post_init__(self) -> None:
        if not isinstance(self.plan, ResidualPlan):
            raise TypeError(f"plan must be a ResidualPlan, got {type(self.plan).__name__}")
        y = np.asarray(self.y, dtype=float)
        if y.shape != (self.plan.n_rows,):
            raise ValueError(f"y must have shape ({self.plan.n_rows},) (one entry per strategy row of "
                             f"the plan), got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("y has NaN or infinite entries")
        v = float(self.variance_per_unit)
        if not (math.isfinite(v) and v >= 0):
            raise ValueError(f"variance_per_unit must be a finite number ≥ 0, got {self.variance_per_unit!r}")
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "variance_per_unit", v)

    @classmethod
    def from_release(cls, release: Any) -> ResidualMeasurements:
        """The measurements of a ResidualPlanner release (``dpx.release`` / ``dpx.simulate``).

        Reads ``release.strategy.plan``, ``release.y`` and
        ``release.noise.variance_per_unit``: public outputs of the release.

        Raises
        ------
        ValueError
            If the release was not made by a ResidualPlanner strategy or has no noisy answers ``y``.
        """
        plan = getattr(getattr(release, "strategy", None), "plan", None)
        if not isinstance(plan, ResidualPlan) or getattr(release, "y", None) is None:
            raise ValueError("marginal inference needs a ResidualPlanner release (mechanism "
                             "'residual_planner'), whose strategy has a plan and whose y holds the noisy "
                             f"residual answers; got mechanism {getattr(release, 'mechanism', None)!r}")
        noise = release.noise
        if getattr(noise, "norm", None) != 2:
            raise ValueError("ResidualPlanner measurements are Gaussian; the release's noise is not")
        return cls(plan, release.y, noise.variance_per_unit)

    @property
    def domain(self) -> tuple[int, ...]:
        """Attribute sizes ``(n_0, ..., n_{d-1})``."""
        return tuple(self.plan.domain)

    def residuals(self) -> dict[tuple[int, ...], tuple[np.ndarray, float]]:
        """``{b: (ω_b, s_b²)}``: residual estimates (counts, shape ``(n_i − 1 for i in b)``) and variances."""
        n = self.domain
        out = {}
        start = 0
        for b, rows, s2 in zip(self.plan.residuals, self.plan.rows, self.plan.sigma2, strict=True):
            block = self.y[start:start + rows].reshape(tuple(n[i] - 1 for i in b))
            out[tuple(b)] = (math.sqrt(float(s2)) * block, self.variance_per_unit * float(s2))
            start += rows
        return out


def _as_list(measurements) -> list[ResidualMeasurements]:
    items = [measurements] if isinstance(measurements, ResidualMeasurements) else list(measurements)
    if not items or not all(isinstance(m, ResidualMeasurements) for m in items):
        raise TypeError("measurements must be a ResidualMeasurements or a non-empty sequence of them "
                        "(ResidualMeasurements.from_release(release) makes one)")
    dom = items[0].domain
    for m in items[1:]:
        if m.domain != dom:
            raise ValueError(f"all measurements must share one domain: {dom} and {m.domain}")
    return items


# ============================================================ the map (1) and its adjoint
def _positions(A: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(j for j, i in enumerate(A) if i not in b)


def _apply_T(alpha_b: np.ndarray, A: tuple[int, ...], b: tuple[int, ...], n) -> np.ndarray:
    """``T_{A,b} α_b`` (equation (1)), shape ``(n_i for i in A)``."""
    Z = alpha_b
    for ax, i in enumerate(b):
        Z = _basis_t_along(Z, ax, n[i])
    rest = _positions(A, b)
    if rest:
        Z = np.expand_dims(Z, rest) / math.prod(n[A[j]] for j in rest)
    return np.broadcast_to(Z, tuple(n[i] for i in A))


def _apply_Tt(lam_A: np.ndarray, A: tuple[int, ...], b: tuple[int, ...], n) -> np.ndarray:
    """``T_{A,b}ᵀ λ_A``, shape ``(n_i − 1 for i in b)``: sum out ``A∖b`` (÷ ``Π n_i``), ``H`` along ``b``."""
    rest = _positions(A, b)
    Z = lam_A.sum(axis=rest) / math.prod(n[A[j]] for j in rest) if rest else lam_A
    for ax, i in enumerate(b):
        Z = _basis_along(Z, ax, n[i])
    return Z


def _needs(A: tuple[int, ...], n) -> list[tuple[int, ...]]:
    """Residual sets ``b ⊆ A`` with at least one entry (``n_i ≥ 2`` on ``b``)."""
    live = [i for i in A if n[i] >= 2]
    out = []
    for mask in range(1 << len(live)):
        out.append(tuple(live[j] for j in range(len(live)) if mask >> j & 1))
    return out


def _marginal(alpha: dict, A: tuple[int, ...], n) -> np.ndarray:
    out = np.zeros(tuple(n[i] for i in A))
    for b in _needs(A, n):
        out += _apply_T(alpha[b], A, b, n)
    return out


def _check_sets(sets, plan_sets, n, have: dict) -> list[tuple[int, ...]]:
    """Requested sets as sorted index tuples, each covered by the measured residuals."""
    d = len(n)
    if sets is None:
        sets = plan_sets
    out = []
    for s in sets:
        try:
            t = tuple(sorted(int(i) for i in s))
        except (TypeError, ValueError):
            raise ValueError(f"an attribute set is a sequence of attribute indices, got {s!r:.60}") from None
        if len(set(t)) != len(t) or any(i < 0 or i >= d for i in t):
            raise ValueError(f"attribute set {s!r:.60} must hold distinct indices in [0, {d})")
        missing = [b for b in _needs(t, n) if b not in have]
        if missing:
            raise ValueError(f"the marginal on {t} needs the residual of {missing[0]}, which was not "
                             "measured; request marginals of the measured workload")
        out.append(t)
    if not out:
        raise ValueError("no marginal requested (sets is empty)")
    return out


def _maximal(sets: Iterable[tuple[int, ...]]) -> list[tuple[int, ...]]:
    uniq = sorted(set(sets), key=lambda s: (-len(s), s))
    keep: list[tuple[int, ...]] = []
    for s in uniq:
        if not any(set(s) <= set(k) for k in keep):
            keep.append(s)
    return keep


# ================================================================ GReM-MLE
def _mle(items: list[ResidualMeasurements]) -> dict[tuple[int, ...], tuple[np.ndarray, float]]:
    """Equation (M1): per residual set, the precision-weighted mean of its measurements."""
    acc: dict[tuple[int, ...], list] = {}
    for m in items:
        for b, (w, s2) in m.residuals().items():
            acc.setdefault(b, []).append((w, s2))
    out = {}
    for b, parts in acc.items():
        exact = [w for w, s2 in parts if s2 == 0.0]
        if exact:  # an exact measurement is the value (several: their mean)
            out[b] = (np.mean(exact, axis=0), 0.0)
            continue
        prec = sum(1.0 / s2 for _, s2 in parts)
        out[b] = (sum(w / s2 for w, s2 in parts) / prec, 1.0 / prec)
    return out


def grem_mle(measurements, sets: Iterable[Sequence[int]] | None = None) -> dict[tuple[int, ...], np.ndarray]:
    """GReM-MLE marginals (Mullins et al., NeurIPS 2024): MLE residuals (M1), then equation (1).

    For one ResidualPlanner measurement this is the plan's least-squares
    reconstruction (``ResidualPlan.reconstruct``); several measurements of the
    same residual sets are combined by their precisions.

    Parameters
    ----------
    measurements : ResidualMeasurements or sequence of ResidualMeasurements
        Over one domain ``(n_0, ..., n_{d-1})``.
    sets : iterable of sequence of int, optional
        Attribute sets of the marginals to return; default the first plan's
        ``needed`` sets (its workload's maximal marginals).

    Returns
    -------
    dict
        ``{attrs: table}``, tables of shape ``(n_i for i in attrs)`` (counts),
        consistent, possibly with negative cells.

    Raises
    ------
    TypeError
        If ``measurements`` are not :class:`ResidualMeasurements`.
    ValueError
        For a malformed set or a marginal whose residuals were not measured.
    """
    items = _as_list(measurements)
    n = items[0].domain
    est = _mle(items)
    chosen = _check_sets(sets, items[0].plan.needed, n, est)
    alpha = {b: w for b, (w, _) in est.items()}
    return {A: _marginal(alpha, A, n) for A in chosen}


# ================================================================ GReM-LNN
class _Dual:
    """The dual (M3) of (M2): ``f(λ)``, its gradient, and ``α(λ)``."""

    def __init__(self, est: dict, constrained: list[tuple[int, ...]], n):
        self.n = n
        self.sets = constrained
        self.omega = {b: w for b, (w, _) in est.items()}
        self.s2 = {b: s2 for b, (_, s2) in est.items()}
        self.shapes = [tuple(n[i] for i in A) for A in constrained]
        self.sizes = [math.prod(s) for s in self.shapes]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int)
        self.used = sorted({b for A in constrained for b in _needs(A, n)}, key=lambda b: (len(b), b))
        self.mu_hat = np.concatenate([_marginal(self.omega, A, n).ravel() for A in constrained])

    def split(self, lam: np.ndarray) -> list[np.ndarray]:
        return [lam[self.offsets[k]:self.offsets[k + 1]].reshape(self.shapes[k])
                for k in range(len(self.sets))]

    def alpha(self, lam: np.ndarray) -> dict:
        """``α(λ) = ω̂ + ŝ² g(λ)`` (M3); residual sets outside the constrained ones keep ``ω̂``."""
        parts = self.split(lam)
        g = {b: np.zeros(self.omega[b].shape) for b in self.used}
        for A, lam_A in zip(self.sets, parts, strict=True):
            for b in _needs(A, self.n):
                g[b] += _apply_Tt(lam_A, A, b, self.n)
        out = dict(self.omega)
        for b in self.used:
            out[b] = self.omega[b] + self.s2[b] * g[b]
        self._g = g
        return out

    def marginals(self, alpha: dict) -> np.ndarray:
        return np.concatenate([_marginal(alpha, A, self.n).ravel() for A in self.sets])

    def fun(self, lam: np.ndarray) -> tuple[float, np.ndarray]:
        alpha = self.alpha(lam)
        val = 0.5 * sum(self.s2[b] * float(np.vdot(gb, gb)) for b, gb in self._g.items())
        val += float(np.dot(lam, self.mu_hat))
        return val, self.marginals(alpha)            # ∇f = μ(α(λ)) (M3)


def _mix_to_feasible(alpha: dict, constrained: list[tuple[int, ...]], n) -> tuple[dict, float]:
    """Shrink the non-total residuals by the smallest ``t`` that leaves no negative cell (module docstring)."""
    total = float(np.asarray(alpha[()]).reshape(-1)[0]) if () in alpha else math.nan
    if not total > 0:
        return {b: np.zeros_like(w) for b, w in alpha.items()}, 1.0
    t = 0.0
    for A in constrained:
        mu = _marginal(alpha, A, n)
        low = float(mu.min())
        if low < 0:
            u = total / mu.size                     # the uniform table's cell
            t = max(t, -low / (u - low))
    if t == 0.0:
        return alpha, 0.0
    t = min(1.0, t * (1 + 1e-12))
    return {b: (w if b == () else (1.0 - t) * w) for b, w in alpha.items()}, t


def _prepared(measurements, sets, method: str):
    """``(items, domain sizes, GReM-MLE residual estimates, chosen sets)`` for ``method``;
    ValueError if the plan does not measure the total (residual set ``()``)."""
    items = _as_list(measurements)
    n = items[0].domain
    est = _mle(items)
    if () not in est:
        raise ValueError(f"{method} needs the measured total (residual set ()); the plan does not "
                         f"measure it")
    return items, n, est, _check_sets(sets, items[0].plan.needed, n, est)


def grem_lnn(measurements, sets: Iterable[Sequence[int]] | None = None, *, maxiter: int = 20000,
             tol: float = 1e-10, return_info: bool = False):
    """GReM-LNN marginals (Mullins et al., NeurIPS 2024): GReM-MLE (M1), then local non-negativity (M2).

    The variant built: the MLE residuals ``ω̂`` (M1), projected in the
    likelihood's norm ``Σ_b ‖·‖²/ŝ_b²`` onto the residual vectors whose
    requested marginals have no negative cell (M2), solved through its dual
    (M3) with L-BFGS-B, then made exactly feasible by mixing with the uniform
    table (module docstring).  Every returned table comes from one residual
    vector by (1): consistent (shared sub-marginals agree to rounding) and
    non-negative.  Post-processing only: it costs no privacy.

    Parameters
    ----------
    measurements : ResidualMeasurements or sequence of ResidualMeasurements
        Over one domain; the total (residual ``()``) must be measured.
    sets : iterable of sequence of int, optional
        Marginals to return and to constrain (their maximal sets carry the
        constraints; smaller ones are sums of those); default the first
        plan's ``needed`` sets.
    maxiter : int
        L-BFGS-B iteration limit.
    tol : float
        Stopping tolerance: projected gradient (cells of ``μ(α)``, counts)
        below ``tol × max(1, ω̂_∅)``.
    return_info : bool
        Also return a dict: ``iterations``, ``seconds``, ``mix`` (the
        feasibility ``t``), ``min_cell_before_mix`` (counts), ``converged``
        and ``residuals`` (the final ``α``, ``{b: array}``).

    Returns
    -------
    dict or (dict, dict)
        ``{attrs: table}`` with tables of shape ``(n_i for i in attrs)``
        (counts, ≥ 0); with ``return_info``, also the info dict.

    Raises
    ------
    TypeError
        If ``measurements`` are not :class:`ResidualMeasurements`.
    ValueError
        For a malformed set, a marginal whose residuals were not measured,
        an unmeasured total, or a bad ``maxiter``/``tol``.
    """
    if isinstance(maxiter, bool) or not isinstance(maxiter, int) or maxiter < 1:
        raise ValueError(f"maxiter must be a whole number ≥ 1, got {maxiter!r}")
    if not (isinstance(tol, int | float) and 0 < tol < 1):
        raise ValueError(f"tol must be a number in (0, 1), got {tol!r}")
    t0 = time.perf_counter()
    items, n, est, chosen = _prepared(measurements, sets, "GReM-LNN")
    constrained = _maximal(chosen)
    dual = _Dual(est, constrained, n)
    scale = max(1.0, abs(float(est[()][0].reshape(-1)[0])))
    info: dict[str, Any] = {"iterations": 0, "converged": True}
    if any(dual.s2[b] > 0 for b in dual.used) and dual.mu_hat.min() < 0:
        res = scipy.optimize.minimize(
            dual.fun, np.zeros(dual.mu_hat.size), jac=True, method="L-BFGS-B",
            bounds=scipy.optimize.Bounds(0.0, np.inf),
            options={"maxiter": maxiter, "maxfun": 2 * maxiter, "gtol": tol * scale, "ftol": 1e-15,
                     "maxcor": 20})
        alpha = dual.alpha(res.x)
        info.update(iterations=int(res.nit), converged=bool(res.success), message=str(res.message))
    else:  # ω̂ already satisfies (M2), or every residual is exact: nothing moves
        alpha = dict(dual.omega)
    info["min_cell_before_mix"] = float(min(_marginal(alpha, A, n).min() for A in constrained))
    alpha, t = _mix_to_feasible(alpha, constrained, n)
    info["mix"] = t
    info["residuals"] = alpha
    out = {}
    for A in chosen:
        mu = _marginal(alpha, A, n)
        out[A] = np.maximum(mu, 0.0)  # the mix leaves rounding-level negatives only (|·| ≲ 1e-12 × cell)
    info["seconds"] = time.perf_counter() - t0
    return (out, info) if return_info else out


# ================================================================ Private-PGM
@dataclasses.dataclass(frozen=True)
class _ResidualQuery:
    """``R_b`` on the marginal table of ``b``: ``H_{n_i}`` along every axis (orthonormal rows).

    A hashable, static callable, as ``mbi.LinearMeasurement`` requires.
    """

    sizes: tuple[int, ...]

    def __call__(self, factor):
        jnp = importlib.import_module("jax.numpy")  # the pgm extra; imported by name (no stubs needed)
        Z = factor.values
        for ax, n in enumerate(self.sizes):
            Z = jnp.moveaxis(Z, ax, 0)
            D = Z[:1] - Z[1:]
            D = D + (1.0 / math.sqrt(n) - 1.0) / (n - 1) * D.sum(axis=0, keepdims=True)
            Z = jnp.moveaxis(D, 0, ax)
        return Z.reshape(-1)

    def op_norm_sq(self) -> float:
        return 1.0                                   # H H^T = I along every axis


def _import_mbi():
    """``(mbi, jax.numpy)``, or an ImportError naming the ``pgm`` extra (imported by name: no stubs needed)."""
    try:
        jax = importlib.import_module("jax")
        jax.config.update("jax_enable_x64", True)        # mbi stalls in float32 (its own warning)
        jax.config.update("jax_enable_compilation_cache", False)  # mbi's advice: many small programs
        return importlib.import_module("mbi"), importlib.import_module("jax.numpy")
    except ImportError as exc:
        raise ImportError(_PGM_EXTRA) from exc


def pgm(measurements, sets: Iterable[Sequence[int]] | None = None, *, names: Sequence[str] | None = None,
        iters: int = 2000, return_info: bool = False):
    """Private-PGM marginals (McKenna, Sheldon & Miklau, ICML 2019) via ``mbi`` (extra ``pgm``).

    One ``mbi.LinearMeasurement`` per measured residual set ``b ≠ ∅``
    (query ``R_b`` on the marginal of ``b``, answer ``ω̂_b`` from (M1), standard
    deviation ``ŝ_b``), the total fixed at ``max(1, ω̂_∅)``, estimated with
    ``mbi``'s mirror descent (the paper's Algorithm 1) for ``iters`` steps.
    Marginals of the fitted model: consistent and non-negative.  With exact
    measurements (every ``ŝ_b = 0``) every standard deviation is taken as 1
    (the exact fit minimises the loss for any weights).  Sets JAX to 64-bit
    floats and turns its persistent compilation cache off for the process
    (``mbi``'s advice: it loses precision in 32-bit and compiles many small programs).

    Parameters
    ----------
    measurements : ResidualMeasurements or sequence of ResidualMeasurements
    sets : iterable of sequence of int, optional
        Default the first plan's ``needed`` sets.
    names : sequence of str, optional
        Attribute names for ``mbi``'s domain (default ``a0, a1, ...``).
    iters : int
        Mirror-descent iterations.
    return_info : bool
        Also return ``{"seconds", "iters", "total"}``.

    Returns
    -------
    dict or (dict, dict)
        ``{attrs: table}`` (counts, ≥ 0), keys as :func:`grem_lnn`.

    Raises
    ------
    ImportError
        If ``mbi`` (the ``pgm`` extra) is not installed.
    ValueError
        For a malformed set, an unmeasured residual or total, some but not
        all residuals exact, or a bad ``iters``.
    """
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be a whole number ≥ 1, got {iters!r}")
    items, n, est, chosen = _prepared(measurements, sets, "Private-PGM")
    names = tuple(f"a{i}" for i in range(len(n))) if names is None else tuple(str(s) for s in names)
    if len(names) != len(n) or len(set(names)) != len(names):
        raise ValueError(f"names must be {len(n)} distinct attribute names, got {names!r:.80}")
    exact = [b for b, (_, s2) in est.items() if s2 == 0.0]
    if exact and len(exact) != len(est):
        raise ValueError("Private-PGM weighs measurements by 1/std: some residuals are exact (variance 0) "
                         "and others noisy; give them all a variance")
    mbi, jnp = _import_mbi()

    t0 = time.perf_counter()
    domain = mbi.Domain(names, n)
    total = max(1.0, float(est[()][0].reshape(-1)[0]))
    ms = []
    for b, (w, s2) in sorted(est.items(), key=lambda kv: (len(kv[0]), kv[0])):
        if b == () or w.size == 0:
            continue
        std = 1.0 if exact else math.sqrt(s2)
        ms.append(mbi.LinearMeasurement(jnp.asarray(w.reshape(-1)), tuple(names[i] for i in b), std,
                                        query=_ResidualQuery(tuple(n[i] for i in b))))
    if ms:
        model = mbi.estimation.MirrorDescent().estimate(domain, ms, known_total=total, iters=iters)
    out = {}
    for A in chosen:
        if not A:
            out[A] = np.array(total)
        elif not ms:  # nothing but the total measured: the uniform table
            out[A] = np.full(tuple(n[i] for i in A), total / math.prod(n[i] for i in A))
        else:
            out[A] = np.asarray(model.project(tuple(names[i] for i in A)).datavector(flatten=False),
                                dtype=float)
    info = {"seconds": time.perf_counter() - t0, "iters": iters, "total": total}
    return (out, info) if return_info else out


# ================================================================ entry point
def infer_marginals(measurements, domain, method: str, sets: Iterable[Sequence[Any]] | None = None
                    ) -> dict[tuple[str, ...], np.ndarray]:
    """Marginal tables from noisy ResidualPlanner measurements, by name.

    Parameters
    ----------
    measurements : ResidualMeasurements or sequence of ResidualMeasurements
        E.g. ``ResidualMeasurements.from_release(release)`` for a release of
        mechanism ``"residual_planner"`` (``release.strategy.plan``,
        ``release.y``, ``release.noise``).
    domain : Domain or sequence of str
        The table's domain (``release.table.domain``) or its attribute names,
        in axis order; sizes must match the plan's.
    method : {"least_squares", "grem_lnn", "pgm"}
        ``"least_squares"``: ``ResidualPlan.reconstruct`` (unbiased,
        consistent, may be negative); ``"grem_lnn"``: :func:`grem_lnn`
        (consistent, non-negative); ``"pgm"``: :func:`pgm` (consistent,
        non-negative; extra ``pgm``).
    sets : iterable of sequence of str or int, optional
        Marginals to return (attribute names or indices); default the plan's
        workload marginals (``plan.needed``).

    Returns
    -------
    dict
        ``{(name, ...): table}``, each table of shape ``(n_i for i in attrs)``
        in counts, axes in the domain's attribute order.

    Raises
    ------
    ValueError
        For an unknown method (the message lists :data:`METHODS`), a domain
        that does not match, or an unknown attribute name.
    ImportError
        For ``"pgm"`` without the ``pgm`` extra.
    """
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r:.60}")
    items = _as_list(measurements)
    n = items[0].domain
    names_attr = getattr(domain, "names", None)
    if names_attr is not None:
        names = tuple(names_attr)
        shape = tuple(getattr(domain, "shape", n))
        if shape != n:
            raise ValueError(f"the domain has sizes {shape} but the measurements' plan has {n}")
    elif isinstance(domain, str) or not isinstance(domain, Sequence):
        raise ValueError("domain must be a dpexplorer Domain or a sequence of attribute names")
    else:
        names = tuple(str(a) for a in domain)
    if len(names) != len(n) or len(set(names)) != len(names):
        raise ValueError(f"the domain must name {len(n)} distinct attributes, got {names!r:.80}")
    index = {a: i for i, a in enumerate(names)}
    idx_sets = None
    if sets is not None:
        idx_sets = []
        for s in sets:
            if isinstance(s, str):
                raise ValueError(f"an attribute set is a sequence of names, got the string {s!r:.40}; "
                                 f"write ({s!r},)")
            row = []
            for a in s:
                if isinstance(a, str):
                    if a not in index:
                        raise ValueError(f"unknown attribute {a!r:.40}; the domain has {list(names)}")
                    row.append(index[a])
                else:
                    row.append(a)
            idx_sets.append(row)
    if method == "least_squares":
        if len(items) == 1:
            m = items[0]
            chosen = _check_sets(idx_sets, m.plan.needed, n, {tuple(b): None for b in m.plan.residuals})
            raw = m.plan.reconstruct(m.y, chosen)
        else:
            raw = grem_mle(items, idx_sets)
    elif method == "grem_lnn":
        raw = grem_lnn(items, idx_sets)
    else:
        raw = pgm(items, idx_sets, names=names)
    return {tuple(names[i] for i in A): np.asarray(T, dtype=float) for A, T in raw.items()}
