"""Sum queries on a numerical attribute under differential privacy (Wu et al. 2019).

Source: Wu, Pujol, Kotsogiannis, Machanavajjhala, "Answering Summation
Queries for Numerical Attributes under Differential Privacy" (2019; the
formulas restated in ``dpexplorer/docs/sums.md``).

Vector form (paper Sec. 2)
--------------------------
The records' values are bucketed; ``x`` (shape ``(n,)``) counts the records
per bucket and bucket ``j`` has a public value ``v_j`` (by default its upper
edge: :func:`dpexplorer.datasets.bucket_values`).  A workload ``W`` (m, n)
of counting queries over the buckets becomes the sum workload ``W·diag(v)``:
query ``i`` sums the values of the records it covers.  The prefix-sum
workload (the paper's P-workloads) has the rows of the lower-triangular ones
matrix at chosen thresholds: query ``i`` sums the values ``≤ t_i``.

Neighbours are datasets differing by one record (add/remove, paper Sec. 1).
A record in bucket ``j`` adds ``e_j`` to ``x`` and ``v_j e_j`` to the weighted
vector ``diag(v)·x``.  Truncation at ``τ`` replaces ``v`` by
``v_τ = min(v, τ)`` (Sec. 3.1), so ``diag(v_τ)·x`` has L1 sensitivity
``max_j v_τj ≤ τ``; the truncated answers ``W·diag(v_τ)·x`` have a bias
``−W·diag(v − v_τ)·x ≤ 0`` (:func:`truncation_bias`).

Mechanisms (paper Table 1, App. A; all Laplace, ε-DP)
-----------------------------------------------------
With ``ε'`` the budget of the answers (``(1 − α)·ε`` after an SVT threshold,
else ε), ``D = diag(v_τ)``, and the noisy answers' variance conditional on
``τ`` (derived here from Laplace variance ``2b²``; App. A.3-A.4 for TiMM and
TaMM):

* ``sqm`` (Alg. 1-3): ε' split evenly over the m queries, each query ``i``
  answered alone with its own threshold ``τ_i`` (per-query SVT over the
  records it covers, spending ``α·ε/m``, or the common ``τ``):
  ``W_i D_i x + Lap(m·Δ_i/ε')``, ``Δ_i = max_j |W_ij| v_{τ_i j}``;
  variance ``2 m² Δ_i² / ε'²``.
* ``identity`` (Alg. 5): ``x̃ = x + Lap(1/ε')ⁿ`` (Δ₁(I) = 1), answers
  ``W D x̃``; variance ``(2/ε'²) Σ_j W_ij² v_τj²``.
* ``workload`` (Alg. 6): ``W D x + Lap(Δ₁(W D)/ε')^m`` with
  ``Δ₁(W D) = max_j v_τj Σ_i |W_ij|`` (max column L1 norm); variance
  ``2 Δ₁(W D)²/ε'²`` for every query.
* ``timm`` (Alg. 7, App. A.3): strategy ``A`` chosen for ``W`` (truncation
  independent), matrix mechanism on the weighted vector ``z = D x``:
  ``y = A D x + Lap(Δ₁(A D)/ε')``, ``ẑ = A⁺ y``, answers ``W ẑ``;
  ``Δ₁(A D) = max_j v_τj ‖a_j‖₁`` (≤ τ·Δ₁(A), the paper's bound, with
  equality for GreedyH, whose columns all have L1 norm 1);
  variance ``2 Δ₁(A D)²/ε'² · diag(W (AᵀA)⁺ Wᵀ)``.
* ``tamm`` (Alg. 8, App. A.4): strategy ``A`` chosen for the weighted
  workload ``W D`` (truncation aware), matrix mechanism on ``x``:
  ``y = A x + Lap(Δ₁(A)/ε')``, ``x̂ = A⁺ y``, answers ``W D x̂``; variance
  ``2 Δ₁(A)²/ε'² · diag(W D (AᵀA)⁺ D Wᵀ)``.

TiMM and TaMM take any registered data-independent strategy selector
(``greedy_h`` as in the paper Sec. 4, ``hb``, ``identity``, ``opt0`` once
registered, ...).  All measurements go through
:class:`~dpexplorer.privacy.PrivateData` (each recorded in its ledger); the
SVT threshold spends ``α·ε`` there too, so a run's ledger adds up to ε.

Release or simulation (as :func:`dpexplorer.release` / :func:`dpexplorer.simulate`)
------------------------------------------------------------------------------------
``run(..., rng=dpx.OS_CSPRNG)`` is a **release**: noise from the OS CSPRNG
through opendp's samplers, no seed (``seed=`` is refused), ``mode =
"release"``, and the result holds nothing private (no ``x``, no true sums).
``run(..., seed=s)`` is a **simulation** drawn from
``numpy.random.default_rng(s)`` (``mode = "simulation"``, ``seed = s``); a
Generator passed as ``rng`` is a simulation whose seed is unknown to the
result (``seed = None``, and its metadata says so).  Only a simulation may
keep the truth (``truth=``) for evaluation.  The whole cost of a run (SVT and
answers) is checked against the ledger before its first draw, so a refusal
draws nothing.  Answers that are whole numbers (identity on counts, whole bucket
values) get discrete Laplace noise, and ``variance`` is then the discrete
sampler's (:func:`dpexplorer.privacy.variance_factor`).

Post-processing: prefix sums of non-negative values are non-decreasing, so
the noisy answers of a prefix workload can be projected on the monotone cone
(isotonic regression, :func:`scipy.optimize.isotonic_regression`; paper
Sec. 4 "Effects of isotonic regression").  A projection onto a convex set
containing the truth never moves the answers farther from it in L2.

Evaluation: relative error ``|ŷ − y| / max(y, γ)`` (paper Sec. 4, "Error")
with ``y`` the true, untruncated answer; :func:`evaluate` returns a tidy
table over seeded trials and :func:`summarize` the means and 5-95 %
percentile bands of Figs. 2-4.

Example::

    from dpexplorer import datasets, sums
    attr = datasets.superstore_sales()
    S = sums.prefix_sums(attr.bucket_values(), m=100)
    df = sums.evaluate(attr.x, S, epsilon=1.0, trials=100, seed=0)
    sums.summarize(df)
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.linalg
import scipy.optimize
import scipy.sparse

from ..core import error as _error
from ..core import registry
from ..core.parallel import blas_limit
from ..core.reconstruct import Reconstructor
from ..privacy import (
    RELEASE,
    SIMULATION,
    PrivacyLedger,
    PrivateData,
    Spend,
    accounting,
    samplers,
    variance_factor,
)
from ..privacy.noise import Laplace, _check_epsilon
from ..queries import limits
from ..queries.matrix import (
    Diagonal,
    Identity,
    Matrix,
    Prefix,
    Product,
    RangeQueries,
    Sparse,
    as_matrix,
)
from .thresholds import (
    SVTParams,
    Threshold,
    _positive,
    check_values,
    no_truncation,
    public_threshold,
    svt_threshold,
)

__all__ = [
    "MECHANISMS", "LABELS", "SOURCES", "THRESHOLD_MODES", "SumWorkload", "prefix_sums", "prefix_cuts",
    "SumRelease", "run", "select_strategy", "analytic_variance", "truncation_bias",
    "isotonic_fit", "relative_error", "evaluate", "summarize", "compare_sizes", "tau_curve", "tau_grid",
    "EVALUATION_COLUMNS", "answer_epsilon", "public_threshold", "Threshold", "trial_taus",
    "tau_band",
]

#: The five mechanisms of the paper's Table 1, in its order.
MECHANISMS = ("sqm", "identity", "workload", "timm", "tamm")

LABELS = {"sqm": "SQM", "identity": "Identity", "workload": "Workload", "timm": "TiMM", "tamm": "TaMM"}

SOURCES = {
    "sqm": "Wu et al. 2019, Table 1 'SQM', App. A.1 Alg. 1-3",
    "identity": "Wu et al. 2019, Table 1 'Identity', App. A.2 Alg. 5",
    "workload": "Wu et al. 2019, Table 1 'Workload', App. A.2 Alg. 6",
    "timm": "Wu et al. 2019, Table 1 'TiMM', App. A.3 Alg. 7",
    "tamm": "Wu et al. 2019, Table 1 'TaMM', App. A.4 Alg. 8",
}

#: How ``τ`` is set: chosen by SVT (spends α·ε), given by the user, or no truncation.
THRESHOLD_MODES = ("svt", "user", "none")


# ======================================================================= workloads
class SumWorkload:
    """The sum workload ``W·diag(v)``: counting queries over buckets, each bucket with a value.

    Parameters
    ----------
    W : Matrix or array, shape (m, n)
        Counting queries over the ``n`` buckets (prefixes, ranges, any).
    values : array_like, shape (n,)
        Bucket values ``v_j ≥ 0`` (attribute units, e.g. USD).
    thresholds : array_like, shape (m,), optional
        For prefix workloads: query ``i`` sums the values ``≤ thresholds[i]`` (for plots).
    name : str, optional
    prefix : bool, optional
        Whether the queries are nested prefixes in increasing order (so the
        true answers are non-decreasing and isotonic regression applies).
        Detected for :class:`~dpexplorer.queries.matrix.Prefix` and prefix
        :class:`~dpexplorer.queries.matrix.RangeQueries` when not given.

    Raises
    ------
    ValueError
        If the shapes do not match, a value is negative or NaN
        (:func:`dpexplorer.sums.thresholds.check_values`), or a query covers only
        buckets of value 0 (its sum is 0 whatever the data).
    """

    def __init__(self, W, values, thresholds=None, name: str | None = None, prefix: bool | None = None):
        self.W = as_matrix(W)
        v = check_values(values)
        if v.size != self.W.n:
            raise ValueError(f"the workload is over {self.W.n} buckets but {v.size} bucket values were given")
        self.values = v
        if thresholds is not None:
            thresholds = np.asarray(thresholds, dtype=float)
            if thresholds.shape != (self.W.m,):
                raise ValueError(f"thresholds must have shape ({self.W.m},), got {thresholds.shape}")
        self.thresholds = thresholds
        self.name = name or f"{self.W.name}·diag(v)"
        self.is_prefix = _detect_prefix(self.W) if prefix is None else bool(prefix)
        rows = self.rows()
        if rows.shape[0] and not rows.nnz:
            raise ValueError("the workload has no nonzero entry")
        covered = abs(rows) @ (v > 0).astype(float)
        if (covered == 0).any():
            i = int(np.argmax(covered == 0))
            raise ValueError(f"query {i} covers only buckets of value 0: its sum is 0 whatever the data; "
                             "drop it or use other bucket values")

    @property
    def m(self) -> int:
        """Number of queries."""
        return self.W.m

    @property
    def n(self) -> int:
        """Number of buckets."""
        return self.W.n

    def rows(self) -> scipy.sparse.csr_array:
        """``W`` as a sparse CSR array (computed once)."""
        cached = self.__dict__.get("_rows")
        if cached is None:
            cached = scipy.sparse.csr_array(self.W.sparse())
            self.__dict__["_rows"] = cached
        return cached

    def truncated(self, tau: float | None = None) -> np.ndarray:
        """``v_τ = min(v, τ)`` (``v`` if ``τ`` is None), shape ``(n,)``."""
        if tau is None:
            return self.values.copy()
        return np.minimum(self.values, _positive(tau, "the truncation threshold τ"))

    def weighted(self, tau: float | None = None) -> Matrix:
        """``W·diag(v_τ)``, shape ``(m, n)`` (lazy)."""
        return Product(self.W, Diagonal(self.truncated(tau), name="diag(v_τ)"), name=f"{self.W.name}·diag(v_τ)")

    def answers(self, x, tau: float | None = None) -> np.ndarray:
        """``W·diag(v_τ)·x``: the (truncated) sums, shape ``(m,)``, attribute units. NOT private."""
        x = np.asarray(x, dtype=float).ravel()
        if x.size != self.n:
            raise ValueError(f"the data has {x.size} buckets but the workload is over {self.n}")
        return self.W.matvec(self.truncated(tau) * x)

    def __repr__(self) -> str:
        return f"<SumWorkload {self.name!r} m={self.m} n={self.n}{' prefix' if self.is_prefix else ''}>"


def _detect_prefix(W: Matrix) -> bool:
    if isinstance(W, Prefix):
        return True
    if isinstance(W, RangeQueries):
        lo, hi = W.ranges()
        return bool((lo == 0).all() and (np.diff(hi) >= 0).all())
    return False


def prefix_cuts(values, m: int, spacing: str = "linear") -> np.ndarray:
    """Indices of the last bucket of ``m`` prefix queries, spread over the buckets.

    Parameters
    ----------
    values : array_like, shape (n,)
        Bucket values (non-decreasing, as from bucket edges).
    m : int
        Number of queries (at most the number of buckets with a positive value).
    spacing : {"linear", "geometric"}
        ``"linear"``: evenly spaced bucket indices (evenly spaced thresholds
        for equal-width buckets, the paper's P-workloads); ``"geometric"``:
        log-spaced indices, more small queries.  Both end at the last bucket.

    Returns
    -------
    ndarray of int, shape (m',)
        Strictly increasing; ``m' < m`` only for geometric spacing on few buckets.

    Raises
    ------
    ValueError
        If ``m`` is not a positive int, exceeds the buckets available, or the spacing is unknown.
    """
    v = check_values(values)
    if (np.diff(v) < 0).any():
        raise ValueError("prefix queries need non-decreasing bucket values (buckets in value order)")
    if not isinstance(m, (int, np.integer)) or isinstance(m, bool) or m < 1:
        raise ValueError(f"the number of queries m must be a positive int, got {m!r}")
    first = int(np.argmax(v > 0))  # the first query must cover a positive value
    avail = v.size - first
    if m > avail:
        raise ValueError(f"m = {m} prefix queries need at least {m} buckets with a positive value; "
                         f"there are {avail}")
    if spacing == "linear":
        cuts = first + np.round(np.arange(1, m + 1) * (avail / m)).astype(np.int64) - 1
    elif spacing == "geometric":
        cuts = np.round(np.geomspace(1, avail, m)).astype(np.int64) - 1 + first
    else:
        raise ValueError(f"spacing must be 'linear' or 'geometric', got {spacing!r}")
    return np.unique(cuts)


def prefix_sums(values, cuts=None, *, m: int | None = None, spacing: str = "linear",
                thresholds=None, name: str | None = None) -> SumWorkload:
    """Prefix-sum workload: query ``i`` sums the values of the records in buckets ``0..cuts[i]``.

    Give exactly one of ``cuts`` (last bucket index of every query), ``m``
    (with ``spacing``, see :func:`prefix_cuts`; the paper's P_m workloads) or
    ``thresholds`` (query ``i`` covers the buckets whose value is
    ``≤ thresholds[i]``).  With all cuts ``0..n−1`` this is ``Prefix(n)·diag(v)``.

    Parameters
    ----------
    values : array_like, shape (n,)
        Non-decreasing bucket values.

    Returns
    -------
    SumWorkload
        ``W`` a :class:`~dpexplorer.queries.matrix.RangeQueries` with ``lo = 0``,
        ``thresholds`` = value of each query's last bucket, ``is_prefix``.

    Raises
    ------
    ValueError
        No or several of cuts/m/thresholds, cuts not strictly increasing or
        out of range, a threshold below every positive value.
    """
    v = check_values(values)
    if (np.diff(v) < 0).any():
        raise ValueError("prefix queries need non-decreasing bucket values (buckets in value order)")
    given = sum(a is not None for a in (cuts, m, thresholds))
    if given != 1:
        raise ValueError("give exactly one of cuts, m or thresholds")
    if m is not None:
        cuts = prefix_cuts(v, m, spacing)
    elif thresholds is not None:
        t = np.asarray(thresholds, dtype=float).ravel()
        if t.size == 0 or not np.isfinite(t).all():
            raise ValueError("thresholds must be a non-empty sequence of finite numbers")
        if (np.diff(t) <= 0).any():
            raise ValueError("thresholds must be strictly increasing")
        cuts = np.searchsorted(v, t, side="right") - 1
        if (cuts < 0).any():
            raise ValueError(f"threshold {t[int(np.argmax(cuts < 0))]:g} is below every bucket value "
                             f"(smallest {v[0]:g}): that query would be empty")
        if (np.diff(cuts) <= 0).any():
            i = int(np.argmax(np.diff(cuts) <= 0))
            raise ValueError(f"thresholds {t[i]:g} and {t[i + 1]:g} cover the same buckets; "
                             "use thresholds at distinct bucket values")
    cuts = np.asarray(cuts)
    if cuts.ndim != 1 or cuts.size == 0 or not np.issubdtype(cuts.dtype, np.integer):
        raise ValueError("cuts must be a non-empty 1D sequence of bucket indices")
    if cuts.min() < 0 or cuts.max() >= v.size or (np.diff(cuts) <= 0).any():
        raise ValueError(f"cuts must be strictly increasing bucket indices in [0, {v.size - 1}]")
    W = RangeQueries(v.size, np.zeros(cuts.size, dtype=np.int64), cuts.astype(np.int64),
                     name=f"P{cuts.size}")
    return SumWorkload(W, v, thresholds=v[cuts], name=name or f"P{cuts.size} prefix sums", prefix=True)


# ======================================================================= strategies and plans
def select_strategy(name: str, W) -> Matrix:
    """The strategy of the registered data-independent mechanism ``name`` for workload ``W``.

    Used by TiMM (on ``W``) and TaMM (on ``W·diag(v_τ)``); any registered
    selector works (``greedy_h`` as in the paper, ``hb``, ``identity``,
    ``opt0``, ...).  The Laplace norm (L1) is asked for.

    Raises
    ------
    KeyError
        Unknown name (listing the registered ones).
    ValueError
        If the mechanism is data-dependent; :class:`~dpexplorer.core.registry.NotApplicableError`
        if it does not apply to ``W``.
    """
    mech = registry.get(name)
    if mech.data_dependent or mech.build is None:
        raise ValueError(f"{name!r} is data-dependent: TiMM/TaMM need a data-independent strategy selector; "
                         f"choose one of {registry.names(data_dependent=False)}")
    return mech.strategy(as_matrix(W), Laplace(1.0))


@dataclass
class _Plan:
    """Everything public a (mechanism, workload, τ, strategy) run needs."""

    measure: Matrix                    # what PrivateData measures
    post: Callable[[np.ndarray], np.ndarray]  # noisy measurement -> answers (m,)
    unit_variance: np.ndarray          # per-query variance at ε' = 1
    strategy: Matrix | None = None


_PLANS: OrderedDict = OrderedDict()
_STRATEGIES: OrderedDict = OrderedDict()
_CACHE_LOCK = threading.RLock()
_PLAN_CACHE_SIZE = 32


def _cached(cache: OrderedDict, key, build):
    """LRU memo shared by threads (the app's workers); ``build`` runs outside the lock."""
    with _CACHE_LOCK:
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
    value = build()
    with _CACHE_LOCK:
        cache[key] = value
        while len(cache) > _PLAN_CACHE_SIZE:
            cache.popitem(last=False)
    return value


#: Largest ``m·n`` for which ``diag(W (AᵀA)⁻¹ Wᵀ)`` is computed from a dense ``W`` and a
#: Cholesky factor of ``AᵀA`` (one triangular solve per query); above, or when ``AᵀA``
#: is singular, :func:`dpexplorer.core.error.per_query_variance` (pseudo-inverse) is used.
_DENSE_QUADRATIC_LIMIT = 2**24


def _diag_quadratic(W: Matrix, A: Matrix, rows=None) -> np.ndarray:
    """``diag(W (AᵀA)⁺ Wᵀ)``, shape ``(m,)`` (raises UnsupportedWorkloadError if ``A`` does not support ``W``).

    ``rows``: optional callable returning ``W`` as a dense ``(m, n)`` array (cheaper than
    ``W.dense()`` for lazy products).
    """
    if A.n <= 4096 and W.m * W.n <= _DENSE_QUADRATIC_LIMIT:
        had_gram = "_gram_cache" in A.__dict__
        X = A.gram().dense()
        if not had_gram:  # do not keep an n × n array alive with the cached strategy
            A.__dict__.pop("_gram_cache", None)
        try:
            c, lower = scipy.linalg.cho_factor(X, lower=True, check_finite=False)
            d = np.abs(np.diag(c))
            ok = d.min() > 1e-7 * d.max()
        except np.linalg.LinAlgError:
            ok = False
        if ok:  # AᵀA ≻ 0: A has full column rank and supports every W
            Wd = rows() if rows is not None else W.dense()
            Z = scipy.linalg.cho_solve((c, lower), Wd.T, check_finite=False)
            return np.einsum("ij,ji->i", Wd, Z)
    unit = Laplace(math.sqrt(2.0))  # variance per unit sensitivity 2/ε² = 1
    return _error.per_query_variance(W, A, unit) / A.sensitivity(1) ** 2


def _rows_squared(S: scipy.sparse.csr_array, w: np.ndarray) -> np.ndarray:
    """``Σ_j S_ij² w_j`` for every row ``i``."""
    return np.asarray(S.multiply(S) @ w, dtype=float).ravel()


def _strategy(strategy: str, W: Matrix, key, rows=None) -> tuple[Matrix, np.ndarray, Reconstructor]:
    """``(A, diag(W (AᵀA)⁺ Wᵀ), RECONSTRUCT)`` for the selector ``strategy`` on ``W`` (memoised on ``key``)."""
    def build():
        A = select_strategy(strategy, W)
        return A, _diag_quadratic(W, A, rows), Reconstructor(A)
    return _cached(_STRATEGIES, (strategy, *key), build)


def _plan(mechanism: str, workload: SumWorkload, tau: float, strategy: str) -> _Plan:
    key = (mechanism, workload, float(tau), strategy if mechanism in ("timm", "tamm") else None)
    return _cached(_PLANS, key, lambda: _build_plan(mechanism, workload, float(tau), strategy))


def _build_plan(mechanism: str, workload: SumWorkload, tau: float, strategy: str) -> _Plan:
    W = workload.W
    vt = workload.truncated(tau)
    if mechanism == "identity":  # Alg. 5: noise on the counts, Δ₁(I) = 1
        unit = 2.0 * _rows_squared(workload.rows(), vt**2)
        return _Plan(Identity(workload.n), lambda y: W.matvec(vt * y), unit)
    if mechanism == "workload":  # Alg. 6: noise on the answers, Δ₁(W D) = max_j v_τj ‖w_j‖₁
        M = workload.weighted(tau)
        sens = M.sensitivity(1)
        return _Plan(M, lambda y: np.asarray(y, dtype=float), np.full(workload.m, 2.0 * sens**2))
    if mechanism == "timm":  # Alg. 7, App. A.3: A for W (any τ), measured on the weighted vector D x
        A, quad, recon = _strategy(strategy, W, (workload, None), lambda: workload.rows().toarray())
        M = Product(A, Diagonal(vt, name="diag(v_τ)"), name=f"{A.name}·diag(v_τ)")
        sens = M.sensitivity(1)
        return _Plan(M, lambda y: W.matvec(recon(y)), 2.0 * sens**2 * quad, A)
    if mechanism == "tamm":  # Alg. 8, App. A.4: A for W D, measured on x
        WD = workload.weighted(tau)
        A, quad, recon = _strategy(strategy, WD, (workload, tau), lambda: workload.rows().toarray() * vt)
        sens = A.sensitivity(1)
        return _Plan(A, lambda y: WD.matvec(recon(y)), 2.0 * sens**2 * quad, A)
    raise ValueError(f"unknown sum mechanism {mechanism!r}; choose one of {MECHANISMS}")


# ======================================================================= releases
@dataclass
class SumRelease:
    """Noisy answers of a sum workload and their public by-products.

    A release (``mode = "release"``) holds only public things: the workload
    (public bucket values), the noisy answers, analytic variances, the
    thresholds and the strategy -- no data vector, no true sum, no record.
    Only a simulation made with ``truth=`` keeps the true answers, for
    evaluation.

    Attributes
    ----------
    mechanism : str
        One of :data:`MECHANISMS`.
    workload : SumWorkload
    answers : ndarray, shape (m,)
        Released answers (after isotonic regression if asked), attribute units.
    raw_answers : ndarray, shape (m,)
        Answers before post-processing.
    isotonic : bool
        Whether ``answers`` were projected on the monotone cone.
    variance : ndarray, shape (m,)
        Analytic variance of ``raw_answers`` given the threshold(s) (squared units).
    taus : ndarray, shape (m,)
        Threshold each query was truncated at (all equal except SQM with per-query SVT).
    threshold : Threshold or list of Threshold
        How ``τ`` was chosen (one per query for SQM with per-query SVT).
    epsilon : float
        Total ε of the release (threshold + answers).
    epsilon_threshold, epsilon_answers : float
        Its two parts.
    strategy : Matrix or None
        TiMM/TaMM's strategy ``A``.
    strategy_name : str or None
    truth, truncated_truth, bias : ndarray or None, shape (m,)
        Only in a simulation given the true data (``truth=``; NOT private, for
        evaluation): ``W·diag(v)·x``, ``W·diag(v_τ)·x`` and their difference
        ``truncated − truth ≤ 0``.  Always ``None`` in a release.
    mode : {"release", "simulation"}
        A release (OS CSPRNG via opendp, no seed) or a simulation (numpy Generator).
    seed : int or None
        A simulation's seed when :func:`run` was given ``seed=``; ``None`` for
        a release, and for a simulation from a Generator whose seed is unknown.
    created : str
        ISO time (UTC).
    """

    mechanism: str
    workload: SumWorkload
    answers: np.ndarray
    raw_answers: np.ndarray
    isotonic: bool
    variance: np.ndarray
    taus: np.ndarray
    threshold: Threshold | list[Threshold]
    epsilon: float
    epsilon_threshold: float
    epsilon_answers: float
    strategy: Matrix | None = None
    strategy_name: str | None = None
    truth: np.ndarray | None = None
    truncated_truth: np.ndarray | None = None
    bias: np.ndarray | None = None
    mode: str = SIMULATION
    seed: int | None = None
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))

    @property
    def tau(self) -> float:
        """The common threshold (the median of the per-query ones for SQM with per-query SVT)."""
        return float(np.median(self.taus))

    def relative_error(self, gamma: float = 1.0, post_processed: bool = True) -> np.ndarray:
        """``|ŷ − y| / max(y, γ)`` per query (needs the truth; paper Sec. 4 "Error").

        Raises
        ------
        ValueError
            Without the truth (a release, or a simulation without ``truth=``), or for ``γ ≤ 0``.
        """
        if self.truth is None:
            raise ValueError("the result was made without the true data (a release never has it): "
                             "no relative error")
        est = self.answers if post_processed else self.raw_answers
        return relative_error(est, self.truth, gamma)

    def metadata(self) -> dict:
        """JSON-ready description: mode and randomness (a simulation's seed), mechanism, ε, τ, workload.

        Nothing from the data: the thresholds are public (declared, or
        released by SVT), the rest is the run's parameters.
        """
        thr = self.threshold
        if isinstance(thr, list):
            how = f"per-query SVT ({len(thr)} thresholds)"
        else:
            how = thr.label
        if self.mode == RELEASE:
            randomness = "OS CSPRNG via opendp"
        elif self.seed is not None:
            randomness = "numpy PCG64 Generator seeded by `seed` (simulation, NOT a release)"
        else:
            randomness = ("numpy Generator passed by the caller, seed unknown (simulation, NOT a "
                          "release; run(..., seed=...) records it)")
        meta = {"dpexplorer_version": _version(), "mode": self.mode, "randomness": randomness,
                "mechanism": self.mechanism, "source": SOURCES[self.mechanism],
                "epsilon": self.epsilon, "epsilon_threshold": self.epsilon_threshold,
                "epsilon_answers": self.epsilon_answers, "delta": 0.0, "tau_choice": how,
                "tau": self.tau, "strategy": self.strategy_name, "isotonic": self.isotonic,
                "workload": self.workload.name, "m": self.workload.m, "n": self.workload.n,
                "created": self.created}
        if self.mode == SIMULATION:
            meta["seed"] = self.seed
            meta["holds_truth"] = self.truth is not None
        return meta

    def to_frame(self) -> pd.DataFrame:
        """One row per query: threshold, answer, raw answer, τ, analytic std (and truth, bias in a simulation given them).

        ``frame.attrs`` carries ``mode`` (and a simulation's ``seed``).
        """
        S = self.workload
        df = pd.DataFrame({
            "query": np.arange(S.m),
            "threshold": S.thresholds if S.thresholds is not None else np.full(S.m, np.nan),
            "answer": self.answers, "raw_answer": self.raw_answers, "tau": self.taus,
            "std": np.sqrt(self.variance)})
        if self.truth is not None:
            df["truth"] = self.truth
            df["truncated_truth"] = self.truncated_truth
            df["bias"] = self.bias
        df.attrs["mode"] = self.mode
        if self.mode == SIMULATION:
            df.attrs["seed"] = self.seed
        return df

    def to_json(self) -> str:
        """:meth:`metadata` and the per-query columns of :meth:`to_frame` as one JSON document."""
        frame = self.to_frame()
        cols = {c: [None if isinstance(v, float) and math.isnan(v) else v for v in frame[c].tolist()]
                for c in frame.columns if c != "query"}
        return json.dumps({**self.metadata(), **cols})


def _version() -> str | None:
    """The installed package's version (the top level is above this layer), ``None`` if not installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version("dpexplorer")
    except importlib.metadata.PackageNotFoundError:
        return None


def answer_epsilon(epsilon: float, threshold_mode: str = "svt", svt_params: SVTParams | None = None) -> float:
    """The ε left for the answers of a run with total ``epsilon``.

    With ``threshold_mode="svt"`` the threshold spends the share ``α`` of ε
    (:class:`~dpexplorer.sums.thresholds.SVTParams` ``alpha``) and the answers get
    ``(1 − α)·ε`` (Wu, Pujol, Kotsogiannis, Machanavajjhala 2019, Alg. 9 and
    Sec. 3.1-3.2, restated in ``dpexplorer/docs/sums.md``; for SQM the same total,
    split evenly over the m queries, Alg. 2); with ``"user"`` or ``"none"``
    the threshold costs nothing and the answers get all of ε.

    Parameters
    ----------
    epsilon : float
        Total ε of the run (threshold and answers), > 0.
    threshold_mode : {"svt", "user", "none"}
    svt_params : SVTParams, optional
        Its ``alpha`` is used with ``"svt"`` (default :class:`SVTParams`).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ε is not a positive finite number or the mode is unknown.
    """
    epsilon = _check_epsilon(epsilon)
    if threshold_mode == "svt":
        alpha = (svt_params if svt_params is not None else SVTParams()).alpha
        return (1.0 - alpha) * epsilon
    if threshold_mode in THRESHOLD_MODES:
        return epsilon
    raise ValueError(f"threshold mode must be one of {THRESHOLD_MODES}, got {threshold_mode!r}")


_GIVE_TAU = ("declare a τ you choose without looking at these records public: "
             "threshold=dpx.sums.public_threshold(τ) (or dpx.sums.Threshold.public(τ)); or let the "
             "sparse vector technique find one privately: threshold='svt' (spends α·ε); or "
             "threshold='none' (no truncation)")


def _source(rng, seed) -> tuple[object, str, int | None]:
    """``(source of randomness, mode, seed)`` from :func:`run`'s ``rng`` and ``seed``.

    Raises
    ------
    TypeError
        A seed with the OS CSPRNG (a release has none), or an ``rng`` that is not a source.
    ValueError
        Neither or both of a Generator and a seed, or a seed that is not a whole number ≥ 0.
    """
    if rng is None:
        if seed is None:
            raise ValueError("sums.run needs its randomness: rng=dpx.OS_CSPRNG for a release, or "
                             "seed=<whole number >= 0> for a simulation")
        seed = limits.whole_number(seed, "sums.run: seed", minimum=0)
        return np.random.default_rng(seed), SIMULATION, int(seed)
    samplers.check_source(rng)
    if samplers.is_release(rng):
        if seed is not None:
            raise TypeError("a release has no seed: its noise comes from the OS CSPRNG. For a "
                            "reproducible run use sums.run(..., seed=...) without rng")
        return rng, RELEASE, None
    if seed is not None:
        raise ValueError("give either a Generator (rng=) or a seed (seed=), not both: with seed= "
                         "the run makes its own Generator and records the seed")
    return rng, SIMULATION, None


def _resolve_threshold(threshold, tau, ledger) -> tuple[object, float]:
    """The threshold mode or object of a run, and the ε of it already recorded in ``ledger``.

    A bare number (or ``tau=`` / ``threshold="user"``) is refused: a τ must
    be declared public or found privately.  A :class:`Threshold` found by SVT
    must have been charged to this very ledger (then its ε is not charged
    again); one never charged is charged by :func:`run`; one charged
    elsewhere (another ledger, or unpickled) is refused.

    Raises
    ------
    ValueError
        As above, or for an unknown mode.
    """
    if tau is not None or (isinstance(threshold, str) and threshold == "user"):
        given = f"tau={tau!r}" if tau is not None else "threshold='user'"
        raise ValueError(f"sums.run does not take a bare τ ({given}): {_GIVE_TAU}")
    if isinstance(threshold, (int, float, np.integer, np.floating)) and not isinstance(threshold, bool):
        raise ValueError(f"threshold={threshold!r} is a bare number: {_GIVE_TAU}")
    if isinstance(threshold, Threshold):
        if threshold.method != "svt":
            return threshold, 0.0
        if threshold.charged_to(ledger):
            return threshold, threshold.epsilon
        if threshold.charged:
            raise ValueError(
                f"this SVT threshold ({threshold.label}) was charged to another ledger (or the "
                "threshold was copied out of the process that found it): use it only on data "
                "charging the ledger it was found under, or find a threshold on this data with "
                "threshold='svt'")
        return threshold, 0.0  # never charged: run charges it before anything is drawn
    if isinstance(threshold, str) and threshold in ("svt", "none"):
        return threshold, 0.0
    raise ValueError(f"threshold must be 'svt', 'none' or a Threshold (sums.public_threshold(τ), "
                     f"thresholds.svt_threshold(...)), got {threshold!r}")


def _threshold(data, workload, epsilon, rng, threshold, svt, label):
    """``(Threshold, ε of the answers)`` for the common-threshold mechanisms (threshold resolved)."""
    if isinstance(threshold, Threshold):
        rest = epsilon - threshold.epsilon
        if not rest > 1e-12 * epsilon:
            raise ValueError(f"the threshold already spent ε = {threshold.epsilon:g} of the total "
                             f"ε = {epsilon:g}: nothing is left for the answers")
        return threshold, rest
    if threshold == "svt":
        thr = svt_threshold(data, workload.values, svt.alpha * epsilon, rng, svt,
                            label=f"{label}: threshold")
        return thr, answer_epsilon(epsilon, "svt", svt)
    return no_truncation(workload.values), answer_epsilon(epsilon, "none")


def _charge_threshold(data: PrivateData, thr: Threshold, mode: str, label: str) -> None:
    """Record a never-charged SVT threshold's ε in ``data.ledger`` (ε-DP, ρ = ε²/2) and bind it there."""
    data.ledger.record(Spend(
        label=f"{label}: SVT threshold found outside this ledger, charged now", mode=mode,
        epsilon=float(thr.epsilon), delta=0.0, rho=accounting.rho_pure(thr.epsilon),
        noise="sparse vector (AboveThreshold), charged on use", queries=1,
        sensitivity=float("nan"), time=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")))
    thr._bind(data.ledger)


def run(mechanism: str, data, workload: SumWorkload, epsilon: float,
        rng=None, *, seed: int | None = None, ledger: PrivacyLedger | None = None,
        threshold="svt", tau: float | None = None,
        svt: SVTParams | None = None, strategy: str = "greedy_h", isotonic: bool = False,
        truth=None) -> SumRelease:
    """Answer a sum workload with one of the paper's five mechanisms (module docstring).

    Parameters
    ----------
    mechanism : {"sqm", "identity", "workload", "timm", "tamm"}
    data : PrivateData or array_like, shape (n,)
        Records per bucket ``x`` behind the privacy boundary; every
        measurement is recorded in ``data.ledger``.  An array is wrapped in
        ``PrivateData(x, ledger)``.
    workload : SumWorkload, shape (m, n)
    epsilon : float
        Total ε of the run (threshold and answers), > 0.
    rng : dpexplorer.OS_CSPRNG or numpy.random.Generator, optional
        ``OS_CSPRNG``: a **release** (no seed).  A Generator: a simulation
        whose seed the result does not know (``seed = None``).
    seed : int, optional
        A **simulation** drawn from ``numpy.random.default_rng(seed)``, the
        seed recorded in the result.  Give exactly one of ``rng`` and ``seed``.
    ledger : PrivacyLedger, optional
        The dataset's ledger.  With a PrivateData it must be ``data.ledger``
        (or omitted): the PrivateData's ledger is the one charged (for
        ``PrivateData(x)`` made without one, its own uncapped ledger, which
        the caller holds as ``data.ledger``).  With an array: charged with
        the run; a release on an array without a ledger is refused (its spend
        would be recorded where no one sees it), a simulation gets a fresh
        throwaway ledger.
    threshold : {"svt", "none"} or Threshold
        ``"svt"`` (default): τ chosen privately with ``α·ε``
        (:func:`dpexplorer.sums.thresholds.svt_threshold`, Dwork & Roth 2014
        Alg. 1 / Thm 3.23), answers get ``(1 − α)·ε``; for SQM every query
        runs its own SVT on the records it covers with ``α·ε/m`` (Alg. 2).
        ``"none"``: no truncation (τ = the largest public bucket value).  A
        :class:`Threshold`: ``public_threshold(τ)`` (a τ you declare public,
        costs nothing) or an SVT threshold found on data charging this same
        ledger (e.g. one SVT shared by several mechanisms, as in the paper's
        Alg. 9; answers get ``ε − threshold.epsilon``).  A hand-made SVT
        Threshold never charged is charged here.
    tau : None
        Refused with a message: a bare τ must be declared public
        (``threshold=public_threshold(τ)``).
    svt : SVTParams, optional
        α, ρ, r, θ₀ (defaults: :class:`~dpexplorer.sums.thresholds.SVTParams`).
    strategy : str
        Registered strategy selector for TiMM/TaMM (default ``"greedy_h"``, paper Sec. 4).
    isotonic : bool
        Project the answers on non-decreasing sequences (prefix workloads only).
    truth : array_like, shape (n,), optional
        Simulations only: the true counts, to report truth, truncated truth
        and bias next to the answers (NOT private; refused in a release).

    Returns
    -------
    SumRelease
        ``mode`` ``"release"`` or ``"simulation"``, ``seed`` as above.

    Raises
    ------
    ValueError
        Unknown mechanism or threshold, a bare τ, an SVT threshold charged to
        another ledger, ε ≤ 0, mismatched sizes, isotonic regression on a
        non-prefix workload, bad SVT parameters, neither or both of a
        Generator and a seed, ``truth`` in a release, a ledger other than
        ``data.ledger``, a release on an array without a ledger.
    TypeError
        A seed with ``rng=OS_CSPRNG``, or an ``rng`` that is not a source of randomness.
    UnsupportedWorkloadError
        If the strategy does not support the workload.
    BudgetExceededError
        If the ledger's budget cannot hold the whole run (SVT and answers);
        checked before the first draw, so nothing is drawn.
    """
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown sum mechanism {mechanism!r}; choose one of {MECHANISMS}")
    if not isinstance(workload, SumWorkload):
        raise TypeError("workload must be a SumWorkload (see sums.prefix_sums)")
    if ledger is not None and not isinstance(ledger, PrivacyLedger):
        raise TypeError(f"ledger must be a dpexplorer.PrivacyLedger, got {type(ledger).__name__}")
    source, mode, seed = _source(rng, seed)
    if mode == RELEASE and truth is not None:
        raise ValueError("a release holds nothing private: truth= is for simulations only "
                         "(sums.run(..., seed=...) or sums.evaluate)")
    if isinstance(data, PrivateData):
        if ledger is not None and ledger is not data.ledger:
            raise ValueError("data is a PrivateData charging its own ledger; ledger= must be that "
                             "ledger (data.ledger) or omitted")
    elif mode == RELEASE and ledger is None:
        raise ValueError("a release must be charged to the dataset's ledger: pass ledger=dpx."
                         "PrivacyLedger(...) (or a PrivateData(x, ledger))")
    else:
        data = PrivateData(data, ledger)
    epsilon = _check_epsilon(epsilon)
    if data.n != workload.n:
        raise ValueError(f"the data has {data.n} buckets but the workload is over {workload.n}")
    if isotonic and not workload.is_prefix:
        raise ValueError("isotonic regression needs a prefix workload (nested queries in increasing order, "
                         "whose true answers are non-decreasing)")
    threshold, paid = _resolve_threshold(threshold, tau, data.ledger)
    svt = svt if svt is not None else SVTParams()
    label = LABELS[mechanism]
    if isinstance(threshold, Threshold) and not epsilon - threshold.epsilon > 1e-12 * epsilon:
        raise ValueError(f"the threshold already spent ε = {threshold.epsilon:g} of the total "
                         f"ε = {epsilon:g}: nothing is left for the answers")
    # the whole run (SVT threshold + answers, less a threshold this ledger already paid) is reserved
    # before the first draw: a refusal draws nothing
    with data.reserve(epsilon - paid, 0.0, label=f"{label} sum release (threshold and answers)",
                      source=source):
        if isinstance(threshold, Threshold) and threshold.method == "svt" and not paid:
            _charge_threshold(data, threshold, mode, label)
        if mechanism == "sqm":
            raw, variance, taus, thr, eps_thr, eps_ans = _run_sqm(data, workload, epsilon, source, threshold,
                                                                  svt)
            plan = None
        else:
            thr, eps_ans = _threshold(data, workload, epsilon, source, threshold, svt, label)
            eps_thr = thr.epsilon
            plan = _plan(mechanism, workload, thr.tau, strategy)
            noise = Laplace(eps_ans)
            y = data.measure(plan.measure, noise, source, label=f"{label}: {plan.measure.m} noisy queries")
            raw = plan.post(y)
            # exact for the sampler MEASURE used (discrete Laplace on whole-number answers)
            variance = plan.unit_variance / eps_ans**2 * variance_factor(plan.measure, noise, data.counts)
            taus = np.full(workload.m, thr.tau)
    answers = isotonic_fit(raw) if isotonic else raw.copy()
    rel = SumRelease(mechanism, workload, answers, np.asarray(raw, dtype=float), bool(isotonic),
                     np.asarray(variance, dtype=float), taus, thr, float(eps_thr + eps_ans),
                     float(eps_thr), float(eps_ans),
                     None if plan is None else plan.strategy,
                     strategy if mechanism in ("timm", "tamm") else None, mode=mode, seed=seed)
    if truth is not None:
        rel.truth = workload.answers(truth)
        rel.truncated_truth = _truncated_truth(workload, truth, taus)
        rel.bias = rel.truncated_truth - rel.truth
    return rel


def _sqm_measures(workload: SumWorkload, taus: np.ndarray) -> list[Matrix]:
    """SQM's one-row measurement per query: ``row_i · diag(min(v, τ_i))`` (Alg. 1)."""
    rows, v = workload.rows(), workload.values
    return [Product(Sparse(rows[[i]], name=f"query {i}"), Diagonal(np.minimum(v, taus[i])),
                    name=f"query {i}·diag(v_τ)") for i in range(workload.m)]


def _run_sqm(data, workload, epsilon, rng, threshold, svt):
    """SQM (Alg. 1-3): every query alone with ε/m (and its own SVT threshold with ``threshold="svt"``)."""
    m = workload.m
    rows = workload.rows()
    v = workload.values
    taus = np.empty(m)
    thresholds: list | Threshold
    if threshold == "svt":
        eps_ans = answer_epsilon(epsilon, "svt", svt)
        eps_thr_q = svt.alpha * epsilon / m
        eps_ans_q = eps_ans / m
        thresholds = []
        for i in range(m):
            support = np.zeros(workload.n, dtype=bool)
            support[rows.indices[rows.indptr[i]:rows.indptr[i + 1]]] = True
            t = svt_threshold(data, v, eps_thr_q, rng, svt, support=support,
                              label=f"SQM: query {i} threshold")
            thresholds.append(t)
            taus[i] = t.tau
        eps_thr = math.fsum(t.epsilon for t in thresholds)
    else:
        thr, eps_ans = _threshold(data, workload, epsilon, rng, threshold, svt, "SQM")
        thresholds, eps_thr = thr, thr.epsilon
        taus[:] = thr.tau
        eps_ans_q = eps_ans / m
    noise = Laplace(eps_ans_q)
    raw = np.empty(m)
    factor = np.ones(m)
    for i, M in enumerate(_sqm_measures(workload, taus)):
        raw[i] = data.measure(M, noise, rng, label=f"SQM: query {i}")[0]
        factor[i] = variance_factor(M, noise, data.counts)  # the sampler MEASURE used
    variance = factor * np.array([noise.variance(s) for s in _sqm_sensitivities(workload, taus)])
    return raw, variance, taus, thresholds, eps_thr, eps_ans


# ======================================================================= analysis
def _per_query_truncated(workload: SumWorkload, taus: np.ndarray) -> scipy.sparse.csr_array:
    """``W_ij · min(v_j, τ_i)``: row ``i`` of ``W`` weighted by ``v`` truncated at its own ``τ_i``.

    Sparse ``(m, n)``, same sparsity as ``W`` (SQM's per-query truncation,
    Wu et al. 2019, Table 1 'SQM', App. A.1 Alg. 1-3).
    """
    weighted = workload.rows().copy()
    weighted.sum_duplicates()
    query_of = np.repeat(np.arange(workload.m), np.diff(weighted.indptr))  # query of every stored entry
    weighted.data = weighted.data * np.minimum(workload.values[weighted.indices], taus[query_of])
    return weighted


def _sqm_sensitivities(workload: SumWorkload, taus: np.ndarray) -> np.ndarray:
    """L1 sensitivity of every SQM query alone, ``Δ_i = max_j |W_ij| v_{τ_i j}``, shape ``(m,)``.

    Source: Wu et al. 2019, Table 1 'SQM', App. A.1 Alg. 1-3 (module
    docstring, "Mechanisms"): query ``i`` is answered alone on the values
    truncated at its own ``τ_i``; a record in bucket ``j`` changes it by
    ``|W_ij| min(v_j, τ_i)`` (values are non-negative).
    """
    return np.asarray(abs(_per_query_truncated(workload, taus)).max(axis=1).todense(), dtype=float).ravel()


def _truncated_truth(workload: SumWorkload, x, taus: np.ndarray) -> np.ndarray:
    """``Σ_j W_ij min(v_j, τ_i) x_j`` for every query ``i`` (NOT private)."""
    x = np.asarray(x, dtype=float).ravel()
    if np.all(taus == taus[0]):
        return workload.answers(x, taus[0])
    return np.asarray(_per_query_truncated(workload, taus) @ x, dtype=float)


def truncation_bias(workload: SumWorkload, x, tau: float) -> np.ndarray:
    """Bias of truncation at ``τ``: ``W·diag(v_τ)·x − W·diag(v)·x`` (≤ 0), shape ``(m,)``.

    Exact (no noise); NOT private: it needs the true counts ``x``.  Source:
    paper Sec. 3.1 (truncation lowers the true answer even without noise).

    Raises
    ------
    ValueError
        If ``τ ≤ 0`` or ``x`` does not match.
    """
    return workload.answers(x, tau) - workload.answers(x)


def analytic_variance(mechanism: str, workload: SumWorkload, tau: float, epsilon: float,
                      strategy: str = "greedy_h", counts: bool = False) -> np.ndarray:
    """Variance of every noisy answer given ``τ``, for answers paid with ``epsilon`` (module docstring).

    ``epsilon`` is the budget of the answers (``(1 − α)·ε`` after an SVT
    threshold).  SQM: the common ``τ`` for every query, ``ε/m`` each.
    ``counts=False`` (default) gives the continuous Laplace's variance, the
    planning formula of the paper; ``counts=True`` the exact variance of a
    run on counts, whose whole-number measurements get discrete Laplace
    noise (:func:`dpexplorer.privacy.variance_factor`).

    Returns
    -------
    ndarray, shape (m,)
        Squared attribute units.

    Raises
    ------
    ValueError
        Unknown mechanism, ``τ ≤ 0`` or ``ε ≤ 0``.
    """
    epsilon = _check_epsilon(epsilon)
    tau = _positive(tau, "the truncation threshold τ")
    if mechanism == "sqm":
        taus = np.full(workload.m, tau)
        noise = Laplace(epsilon / workload.m)
        var = np.array([noise.variance(s) for s in _sqm_sensitivities(workload, taus)])
        if counts:
            var *= [variance_factor(M, noise) for M in _sqm_measures(workload, taus)]
        return var
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown sum mechanism {mechanism!r}; choose one of {MECHANISMS}")
    plan = _plan(mechanism, workload, tau, strategy)
    factor = variance_factor(plan.measure, Laplace(epsilon)) if counts else 1.0
    return plan.unit_variance / epsilon**2 * factor


def isotonic_fit(answers) -> np.ndarray:
    """Least-squares projection of ``answers`` on non-decreasing sequences (PAVA).

    :func:`scipy.optimize.isotonic_regression`; paper Sec. 4.  Since the set
    of non-decreasing sequences is convex and contains the true prefix sums,
    the result is never farther from them in L2 than ``answers``.

    Raises
    ------
    ValueError
        If ``answers`` is not a 1D array of finite numbers.
    """
    a = np.asarray(answers, dtype=float)
    if a.ndim != 1 or not np.isfinite(a).all():
        raise ValueError("isotonic regression needs a finite 1D array of answers")
    return np.asarray(scipy.optimize.isotonic_regression(a, increasing=True).x, dtype=float)



def relative_error(estimate, truth, gamma: float = 1.0) -> np.ndarray:
    """``|ŷ − y| / max(y, γ)`` elementwise (paper Sec. 4, "Error").

    Parameters
    ----------
    estimate, truth : array_like, same shape
        Noisy and true answers (attribute units; the truth is non-negative).
    gamma : float
        Smoothing γ > 0 (attribute units) for answers near 0.  The paper's
        value was lost in extraction; default 1.

    Raises
    ------
    ValueError
        If ``γ ≤ 0`` or the shapes differ.
    """
    gamma = _positive(gamma, "gamma (γ)")
    est, y = np.asarray(estimate, dtype=float), np.asarray(truth, dtype=float)
    if est.shape != y.shape:
        raise ValueError(f"estimate and truth must have the same shape, got {est.shape} and {y.shape}")
    return np.abs(est - y) / np.maximum(y, gamma)


# ======================================================================= evaluation
#: Columns of :func:`evaluate`'s tidy table.
EVALUATION_COLUMNS = [
    "trial", "mechanism", "isotonic", "query", "threshold", "truth", "truncated_truth", "answer",
    "error", "rel_error", "tau", "variance", "bias", "epsilon", "seed",
]


def evaluate(x, workload: SumWorkload, epsilon: float, mechanisms: Sequence[str] = MECHANISMS,
             trials: int = 100, seed: int = 0, *, threshold: str | Threshold = "svt", tau: float | None = None,
             svt: SVTParams | None = None, strategy: str = "greedy_h", isotonic=None,
             gamma: float = 1.0, shared_threshold: bool = True,
             progress: Callable[[int, int], None] | None = None,
             blas_threads: int | None = 1) -> pd.DataFrame:
    """Run the mechanisms ``trials`` times on ``x`` (throwaway ledgers) and tabulate every answer.

    Not a release, and charged to no ledger on purpose: the table holds the
    true answers next to the noisy ones, so no privacy guarantee covers it
    and charging a dataset's ledger would only suggest one.  Every run is a
    simulation (seeded Generators); each trial's spends go to a throwaway
    ledger the kernel needs for its bookkeeping.  To spend a dataset's
    budget, make one release with :func:`run` and ``rng=dpx.OS_CSPRNG``.

    Parameters
    ----------
    x : array_like, shape (n,)
        True counts per bucket (the evaluation knows them; nothing here is a release).
    workload : SumWorkload
    epsilon : float
        Total ε of each mechanism's run.
    mechanisms : sequence of str
        Subset of :data:`MECHANISMS`.
    trials : int
        Number of trials (the paper uses 100).
    seed : int
        Trial ``t`` draws from ``SeedSequence([seed, t])`` (children per mechanism).
    threshold : {"svt", "user", "none"} or Threshold
        As in :func:`run`; here (an evaluation, not a release) ``"user"``
        with ``tau`` means ``public_threshold(tau)``.  A Threshold must be
        public or no truncation (an SVT one was charged to another ledger).
    tau : float, optional
        τ > 0 for ``threshold="user"``.
    svt, strategy
        As in :func:`run`.
    isotonic : bool, sequence of bool or None
        Post-processing variants to report; ``None``: both for prefix workloads, none otherwise.
    gamma : float
        γ of the relative error.
    shared_threshold : bool
        With ``threshold="svt"``, run SVT once per trial and give its ``τ``
        to Identity, Workload, TiMM and TaMM (the paper's Alg. 9, which
        shares ``τ`` "to control the effect of truncation"); SQM keeps its
        per-query SVT.  ``False``: every mechanism runs its own SVT.
    progress : callable, optional
        ``progress(done, total)`` after every trial; raising stops the evaluation.
    blas_threads : int or None
        Limit of the BLAS thread pools while running (threadpoolctl; default
        1: multi-threaded BLAS on a busy machine is many times slower for the
        small dense factorisations here).  ``None`` leaves them alone.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`EVALUATION_COLUMNS`, one row per (trial, mechanism,
        isotonic, query); ``seed`` is the base seed (trial ``t`` drew from
        ``SeedSequence([seed, t])``), ``tau`` the threshold of the query,
        ``variance`` its analytic variance given ``tau``, ``bias`` its
        truncation bias (attribute units).

    Raises
    ------
    ValueError
        As :func:`run`, or ``trials < 1``, an unknown mechanism, isotonic on a non-prefix workload.
    """
    if not isinstance(trials, (int, np.integer)) or isinstance(trials, bool) or trials < 1:
        raise ValueError(f"trials must be a positive int, got {trials!r}")
    seed = limits.whole_number(seed, "sums.evaluate: seed", minimum=0)
    mechanisms = list(mechanisms)
    unknown = [m for m in mechanisms if m not in MECHANISMS]
    if unknown or not mechanisms:
        raise ValueError(f"unknown or no mechanisms {unknown}; choose among {MECHANISMS}")
    x = np.asarray(x, dtype=float).ravel()
    if x.size != workload.n:
        raise ValueError(f"the data has {x.size} buckets but the workload is over {workload.n}")
    epsilon = _check_epsilon(epsilon)
    svt = svt if svt is not None else SVTParams()
    if isotonic is None:
        variants = [False, True] if workload.is_prefix else [False]
    elif isinstance(isotonic, bool):
        variants = [isotonic]
    else:
        variants = sorted({bool(b) for b in isotonic})
    if any(variants) and not workload.is_prefix:
        raise ValueError("isotonic regression needs a prefix workload")
    if isinstance(threshold, str) and threshold == "user":
        if tau is None:
            raise ValueError("threshold='user' needs tau (a data-independent τ > 0)")
        threshold = public_threshold(tau)
    elif tau is not None:
        raise ValueError("tau is only for threshold='user'")
    if isinstance(threshold, Threshold) and threshold.method == "svt":
        raise ValueError("evaluate runs its own SVT per trial (threshold='svt'); a found SVT "
                         "Threshold belongs to the ledger it was charged to")
    with blas_limit(None if blas_threads is None else int(blas_threads)):
        return _evaluate(x, workload, epsilon, mechanisms, int(trials), int(seed), threshold, tau, svt,
                         strategy, variants, gamma, shared_threshold, progress)


def _evaluate(x, workload, epsilon, mechanisms, trials, seed, threshold, tau, svt, strategy, variants,
              gamma, shared_threshold, progress) -> pd.DataFrame:
    truth = workload.answers(x)
    thr_vals = workload.thresholds if workload.thresholds is not None else np.full(workload.m, np.nan)
    q = np.arange(workload.m)
    parts = []
    for t in range(trials):
        ss = np.random.SeedSequence([seed, t])
        children = ss.spawn(len(MECHANISMS) + 1)
        data = PrivateData(x, PrivacyLedger())
        shared = threshold
        svt_mode = isinstance(threshold, str) and threshold == "svt"
        if svt_mode and shared_threshold and any(m != "sqm" for m in mechanisms):
            shared = svt_threshold(data, workload.values, svt.alpha * epsilon,
                                   np.random.default_rng(children[-1]), svt,
                                   label="shared SVT threshold")
        for name in mechanisms:
            rng = np.random.default_rng(children[MECHANISMS.index(name)])
            thr_arg = threshold if name == "sqm" and svt_mode else shared
            rel = run(name, data, workload, epsilon, rng, threshold=thr_arg, svt=svt,
                      strategy=strategy, truth=x)
            for iso in variants:
                ans = isotonic_fit(rel.raw_answers) if iso else rel.raw_answers
                parts.append(pd.DataFrame({
                    "trial": t, "mechanism": name, "isotonic": iso, "query": q, "threshold": thr_vals,
                    "truth": truth, "truncated_truth": rel.truncated_truth, "answer": ans,
                    "error": ans - truth, "rel_error": relative_error(ans, truth, gamma),
                    "tau": rel.taus, "variance": rel.variance, "bias": rel.bias,
                    "epsilon": rel.epsilon, "seed": int(seed)}))
        if progress is not None:
            progress(t + 1, trials)
    return pd.concat(parts, ignore_index=True)[EVALUATION_COLUMNS]


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per (mechanism, isotonic, query): truth, mean and 5/50/95 % of answers and relative errors.

    Also the empirical MSE against the truth, the analytic MSE given the
    thresholds (mean over trials of variance + bias²) and the median τ.  The
    5-95 % bands are those of the paper's Figs. 2-4.

    Raises
    ------
    KeyError
        If ``df`` lacks a column of :func:`evaluate`'s table (mechanism,
        isotonic, query, threshold, truth, answer, rel_error, tau, trial,
        error, variance, bias).
    """
    g = df.groupby(["mechanism", "isotonic", "query"], sort=False)

    def q(p):
        return lambda s: s.quantile(p)

    out = g.agg(threshold=("threshold", "first"), truth=("truth", "first"),
                answer_mean=("answer", "mean"), answer_q05=("answer", q(0.05)),
                answer_q50=("answer", "median"), answer_q95=("answer", q(0.95)),
                rel_mean=("rel_error", "mean"), rel_q05=("rel_error", q(0.05)),
                rel_median=("rel_error", "median"), rel_q95=("rel_error", q(0.95)),
                tau_median=("tau", "median"), trials=("trial", "nunique")).reset_index()
    sq = df.assign(se=df["error"] ** 2, amse=df["variance"] + df["bias"] ** 2)
    extra = sq.groupby(["mechanism", "isotonic", "query"], sort=False).agg(
        empirical_mse=("se", "mean"), analytic_mse=("amse", "mean")).reset_index()
    return out.merge(extra, on=["mechanism", "isotonic", "query"])


def trial_taus(df: pd.DataFrame) -> np.ndarray:
    """The truncation threshold τ each trial of :func:`evaluate` used (attribute units), in trial order.

    The mechanisms other than SQM share one τ per trial (chosen by SVT, given,
    or none: ``inf``), read off query 0; SQM picks one τ per query (Wu et
    al. 2019, App. A.1) and is left out.

    Returns
    -------
    numpy.ndarray, shape (trials,)
        Empty when only SQM ran.

    Raises
    ------
    KeyError
        If ``df`` lacks the columns mechanism, query, trial, tau.
    """
    common = df[(df["mechanism"] != "sqm") & (df["query"] == 0)].groupby("trial")["tau"].first()
    return common.to_numpy(dtype=float) if len(common) else np.zeros(0)


def tau_band(taus) -> tuple[float, float, float]:
    """``(q05, median, q95)`` of the trials' thresholds (numpy's linear quantiles; NaN when none)."""
    t = np.asarray(taus, dtype=float).ravel()
    if not t.size:
        return (math.nan, math.nan, math.nan)
    lo, med, hi = np.quantile(t, [0.05, 0.5, 0.95])
    return float(lo), float(med), float(hi)


def compare_sizes(df: pd.DataFrame, fraction: float = 0.2) -> pd.DataFrame:
    """Relative error of small and large queries: median and 5/95 % over trials and queries.

    "Small" queries are the ``fraction`` of queries with the smallest true
    answer (among positive ones), "large" the ``fraction`` with the largest.

    Returns
    -------
    pandas.DataFrame
        Columns mechanism, isotonic, size, queries, median, q05, q95, mean.

    Raises
    ------
    ValueError
        If ``fraction`` is not in (0, 0.5].
    """
    if not (0 < fraction <= 0.5):
        raise ValueError(f"fraction must be in (0, 0.5], got {fraction!r}")
    truths = df.groupby("query")["truth"].first()
    truths = truths[truths > 0].sort_values(kind="stable")
    k = max(1, int(round(fraction * truths.size)))
    groups = {"small": set(truths.index[:k]), "large": set(truths.index[-k:])}
    rows = []
    for (mech, iso), sub in df.groupby(["mechanism", "isotonic"], sort=False):
        for size, qs in groups.items():
            r = sub.loc[sub["query"].isin(qs), "rel_error"]
            rows.append({"mechanism": mech, "isotonic": iso, "size": size, "queries": len(qs),
                         "median": r.median(), "q05": r.quantile(0.05), "q95": r.quantile(0.95),
                         "mean": r.mean()})
    return pd.DataFrame(rows)


def tau_grid(values, points: int = 30) -> np.ndarray:
    """Geometric grid of ``points`` thresholds from the smallest positive value to the largest.

    Raises
    ------
    ValueError
        If ``points`` is not an int ≥ 2, or the values are empty, not finite,
        negative or all zero (:func:`dpexplorer.sums.thresholds.check_values`).
    """
    v = check_values(values)
    if not isinstance(points, (int, np.integer)) or points < 2:
        raise ValueError(f"points must be an int >= 2, got {points!r}")
    lo, hi = float(v[v > 0].min()), float(v.max())
    if hi <= lo:
        return np.array([hi])
    return np.unique(np.geomspace(lo, hi, points))


def tau_curve(workload: SumWorkload, x, epsilon: float, taus=None,
              mechanisms: Sequence[str] = MECHANISMS, strategy: str = "greedy_h",
              progress: Callable[[int, int], None] | None = None,
              blas_threads: int | None = 1) -> pd.DataFrame:
    """Bias² / variance / total of every mechanism as ``τ`` moves (NOT private: uses ``x``).

    For each ``τ`` and mechanism: ``bias2`` = mean over queries of the
    squared truncation bias (:func:`truncation_bias`), ``variance`` = mean
    analytic variance (:func:`analytic_variance`, answers paid with
    ``epsilon``: pass ``(1 − α)·ε`` to match an SVT run), ``total = bias2 +
    variance`` (the MSE), ``rmse = sqrt(total)``.

    Parameters
    ----------
    taus : array_like, optional
        Thresholds (default :func:`tau_grid` of the bucket values).
    progress : callable, optional
        ``progress(done, total)`` after every ``τ``.
    blas_threads : int or None
        As in :func:`evaluate`.

    Returns
    -------
    pandas.DataFrame
        Columns tau, mechanism, bias2, variance, total, rmse.
    """
    epsilon = _check_epsilon(epsilon)
    taus = tau_grid(workload.values) if taus is None else np.asarray(taus, dtype=float).ravel()
    for t in taus:
        _positive(t, "the truncation threshold τ")
    truth = workload.answers(x)
    rows: list[dict[str, object]] = []
    with blas_limit(None if blas_threads is None else int(blas_threads)):
        for k, t in enumerate(taus):
            _tau_row(rows, workload, x, truth, t, mechanisms, epsilon, strategy)
            if progress is not None:
                progress(k + 1, len(taus))
    return pd.DataFrame(rows, columns=["tau", "mechanism", "bias2", "variance", "total", "rmse"])


def _tau_row(rows, workload, x, truth, t, mechanisms, epsilon, strategy):
    b2 = float(np.mean((workload.answers(x, t) - truth) ** 2))
    for name in mechanisms:
        var = float(np.mean(analytic_variance(name, workload, t, epsilon, strategy)))
        rows.append({"tau": float(t), "mechanism": name, "bias2": b2, "variance": var,
                     "total": b2 + var, "rmse": math.sqrt(b2 + var)})
