"""Truncation thresholds for sum queries: none, given by the user, or chosen privately by SVT.

A sum query over a numerical attribute has sensitivity as large as the
largest value.  Truncating every value at ``τ`` (``v ↦ min(v, τ)``) bounds it
by ``τ`` at the price of a bias (Wu, Pujol, Kotsogiannis, Machanavajjhala
2019, "Answering Summation Queries for Numerical Attributes under
Differential Privacy", Sec. 3.1; ``dpexplorer/docs/sums.md``).  ``τ`` must be
public: either declared public by the caller (:func:`public_threshold`,
:meth:`Threshold.public`: a number not read from these records),
:func:`no_truncation` (the largest public bucket value), or chosen under
differential privacy (:func:`svt_threshold`).

Who paid for a private threshold
--------------------------------
A :class:`Threshold` found by :func:`svt_threshold` is charged, by the
kernel, to the ledger of the :class:`~dpexplorer.privacy.PrivateData` it was
found on, and remembers that ledger (a weak reference, never pickled or
copied into another process).  :func:`dpexplorer.sums.run` accepts it only on
data charging that same ledger (the threshold's ε is then not charged again);
an SVT threshold made by hand (never charged) is charged there before
anything is drawn; one found under another ledger, or unpickled, is refused.

How Wu et al. choose τ (paper Sec. 3.1-3.2, Sec. 4, App. A.1-A.2)
-------------------------------------------------------------------
The extracted text lost its formulas and numbers; what it still says, and what
this module does:

* **What is thresholded** (Sec. 3.1, "Sparse Vector Technique"): a sequence
  of *counting* queries ``c_k`` = the number of records whose value is at
  most ``θ_k`` -- records, not their values' mass -- against the SVT
  threshold ``T = ρ·|D|``, ``ρ`` "the ratio of the database we would like
  not to be truncated".  SVT returns the first ``k`` whose count exceeds
  ``T`` and ``τ = θ_k``.  Here: :func:`svt_queries`, with ``|D|`` moved into
  the query (below), and ``τ`` capped at the largest public value.
* **Candidate grid** (Sec. 3.1): ``θ₀`` "far below the expected τ", then a
  strictly increasing sequence; linear steps were "very slow" and gave too
  small a τ, so the paper grows them exponentially, ``θ_k = θ₀·r^k``.
  Here: :func:`svt_candidates`, from ``θ₀`` up to the first candidate at or
  above the largest bucket value.  If none passes, no truncation (App. A.1,
  Alg. 2's "else" branch: NoTrunc, Alg. 1).
* **Budget share** (Sec. 3.2, "Truncation"; Sec. 4, "Algorithms"): a
  parameter ``α`` splits ε, ``α·ε`` to SVT (or Recursive) for ``τ`` and
  ``(1 − α)·ε`` to the answers.  Here: :attr:`SVTParams.alpha`,
  :func:`dpexplorer.sums.answer_epsilon`.
* **Once or per mechanism** (App. A.2, Alg. 4 and Alg. 9; Table 1 "SQM";
  App. A.1, Alg. 2): the batch mechanisms (Identity, Workload, TiMM, TaMM)
  share one ``τ`` per run, found once on the whole dataset "to control the
  effect of truncation"; SQM splits the budget equally over the ``m`` queries
  and selects a threshold independently for each (``α·ε/m`` per query's SVT,
  over the records that query covers -- the text does not say which records
  Alg. 2 counts; the query's own is the reading under which "independently"
  means anything).  Here: :func:`dpexplorer.sums.evaluate`
  (``shared_threshold=True``) and :func:`dpexplorer.sums.run` for SQM.
* **No truncation** (Sec. 4, "NoTrunc", Alg. 1): τ = the largest value and
  all of ε for the answers, the baseline every truncated run is compared with
  (:func:`dpexplorer.sums.study.truncation_split`).

These match the paper's description point for point; the one change is forced
by privacy.  ``|D| = N`` is private (neighbours add or remove a record), so
``ρ·N`` cannot be SVT's public threshold as written.  We ask the equivalent
queries ``q_k(x) = c_k(x) − ρ·N(x)`` against the public threshold 0.  Adding or
removing one record changes ``c_k`` by 0 or 1 and ``N`` by 1, hence ``q_k``
by ``1 − ρ`` or ``−ρ``: the queries have sensitivity ``max(ρ, 1 − ρ) ≤ 1``
(tested by brute force).  AboveThreshold (Dwork & Roth 2014, Alg. 1, Thm
3.23; :meth:`dpexplorer.privacy.PrivateData.above_threshold`, which records
the spend in the ledger) then releases the index ``k`` with ε_SVT-DP,
``ε_SVT = α·ε`` (tested exactly: the output probabilities of neighbours
differ by at most a factor ``e^ε_SVT``).

What the rule costs.  ``ρ`` bounds the share of *records* truncated, not the
share of the *sum*: on a heavy-tailed attribute the few records above ``τ``
carry much of it.  On Superstore Sales (9994 orders) the exact ρ = 0.99
candidate is τ ≈ 2516 USD, above which 1 % of the orders hold 8.6 % of all
sales, so every batch mechanism's largest prefix sums are biased by about
9 %; :func:`dpexplorer.sums.study.error_split` shows that bias next to the
noise it saves.

Defaults.  The extracted text of the paper lost the numbers of its
experimental settings (Sec. 4: "for the SVT subroutine we chose ... and
..."), so the defaults here are ours and exposed: ``α = 0.1`` of ε for the
threshold, ``ρ = 0.99`` (keep 99 % of the records untruncated; with ρ = 0.95
the truncation bias dominated the error of every mechanism on Superstore
Sales), ``r = 1.1`` (θ grows by 10 % per step; the paper
found linear steps too slow and too small, Sec. 3.1), and ``θ₀`` = the
smallest positive bucket value (far below any useful ``τ``, and public since
bucket values come from the public edges).

The Recursive mechanism (Chen & Zhou 2013), the paper's other private
threshold, is not implemented: its formulas are lost from our copy of the
paper and the paper only shows (App. A.5) that its second stage equals
truncation, not how its threshold is chosen; an unfaithful version would
mislead.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..privacy import PrivateData

__all__ = ["SVTParams", "Threshold", "THRESHOLD_METHODS", "svt_candidates", "svt_queries",
           "svt_sensitivity", "svt_threshold", "public_threshold", "no_truncation", "check_values"]

#: How a :class:`Threshold` was chosen: privately by SVT, declared public by the caller, or
#: no truncation (τ = the largest public bucket value).
THRESHOLD_METHODS = ("svt", "public", "none")


def _positive(value, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive finite number ({name} > 0), got {value!r}")
    return v


def check_values(values, name: str = "bucket values") -> np.ndarray:
    """Bucket values as a float array, refusing what the sum mechanisms cannot handle.

    Raises
    ------
    ValueError
        If the values are empty, not 1D, NaN/inf, or negative (truncation at
        ``τ`` and the sensitivity ``max v`` assume non-negative values: shift
        the attribute explicitly, e.g. ``superstore_profit(shift=6600)``), or
        all zero (every sum is 0).
    """
    try:
        v = np.asarray(values, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a 1D array of numbers, got {type(values).__name__}") from None
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"{name} must be a non-empty 1D array, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} have {int((~np.isfinite(v)).sum())} NaN/inf entries; values must be finite")
    if (v < 0).any():
        raise ValueError(
            f"{int((v < 0).sum())} of {v.size} {name} are negative (smallest {v.min():g}); sum queries with "
            "truncation assume non-negative values (the sensitivity of a sum is its largest value and "
            "truncation caps values from above). Shift the attribute by a public constant first "
            "(e.g. datasets.superstore_profit(shift=6600)) or use a non-negative attribute")
    if not (v > 0).any():
        raise ValueError(f"all {name} are 0: every sum is 0 and there is nothing to release")
    return v


@dataclass(frozen=True)
class SVTParams:
    """Parameters of the SVT threshold (paper Sec. 3.1 and 3.2, Alg. 2).

    Attributes
    ----------
    alpha : float
        Share of ε spent on choosing ``τ`` (0 < α < 1); the answers get ``(1 − α)·ε``.
    rho : float
        Share of the records that should not be truncated (0 < ρ < 1).
    r : float
        Growth of the candidates ``θ_k = θ₀·r^k`` (r > 1).
    theta0 : float or None
        First candidate (> 0); ``None``: the smallest positive bucket value.
    max_candidates : int
        Cap on the number of candidates (guards against r very close to 1).

    Raises
    ------
    ValueError
        If a parameter is out of range.
    """

    alpha: float = 0.1
    rho: float = 0.99
    r: float = 1.1
    theta0: float | None = None
    max_candidates: int = 10_000

    def __post_init__(self):
        for name in ("alpha", "rho"):
            v = getattr(self, name)
            try:
                ok = 0.0 < float(v) < 1.0
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"SVT parameter {name} must be in the open interval (0, 1), got {v!r}")
        try:
            ok = float(self.r) > 1.0 and math.isfinite(float(self.r))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"SVT growth r must be a finite number > 1 (θ_k = θ₀·r^k), got {self.r!r}")
        if self.theta0 is not None:
            _positive(self.theta0, "SVT start θ₀")
        if not (isinstance(self.max_candidates, int) and self.max_candidates >= 1):
            raise ValueError(f"max_candidates must be a positive int, got {self.max_candidates!r}")


@dataclass
class Threshold:
    """A truncation threshold, how it was chosen, and (if private) the ledger that paid for it.

    Make one with :func:`svt_threshold` (private), :meth:`Threshold.public` /
    :func:`public_threshold` (a τ you declare public) or :func:`no_truncation`.

    Attributes
    ----------
    tau : float
        The threshold (attribute units), > 0.
    method : {"svt", "public", "none"}
    epsilon : float
        ε spent choosing it (> 0 for SVT, 0 otherwise).
    candidates : ndarray
        SVT's ``θ_k`` (empty otherwise; public, from the public bucket values).
    index : int or None
        Index of the candidate SVT released (``None``: none passed, or not SVT).
    params : SVTParams or None

    Raises
    ------
    ValueError
        If ``method`` is not one of :data:`THRESHOLD_METHODS`, ``τ`` is not a
        positive finite number, or ``epsilon`` does not fit the method (> 0
        for SVT, 0 for a public τ or no truncation).
    """

    tau: float
    method: str
    epsilon: float = 0.0
    candidates: np.ndarray = field(default_factory=lambda: np.zeros(0))
    index: int | None = None
    params: SVTParams | None = None
    # the ledger charged with ``epsilon`` (weak reference; never pickled) and whether one was
    _ledger: weakref.ref[object] | None = field(default=None, init=False, repr=False, compare=False)
    _charged: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.method not in THRESHOLD_METHODS:
            hint = (" (a τ you give is declared with dpx.sums.public_threshold(τ))"
                    if self.method == "user" else "")
            raise ValueError(f"a threshold's method must be one of {THRESHOLD_METHODS}, got "
                             f"{self.method!r}{hint}")
        self.tau = _positive(self.tau, "the truncation threshold τ")
        if self.method == "svt":
            self.epsilon = _positive(self.epsilon, "the ε of an SVT threshold")
        elif self.epsilon != 0.0:
            raise ValueError(f"a {self.method!r} threshold costs no ε, got epsilon={self.epsilon!r}")

    @classmethod
    def public(cls, tau: float) -> Threshold:
        """A τ the caller declares public: chosen without looking at these records (costs no ε).

        Raises
        ------
        ValueError
            If ``τ ≤ 0``, NaN or infinite.
        """
        return cls(tau, "public")

    # ------------------------------------------------------------- who paid
    @property
    def charged(self) -> bool:
        """Whether ``epsilon`` was recorded in a ledger (always for :func:`svt_threshold`'s)."""
        return self._charged

    def charged_to(self, ledger) -> bool:
        """Whether ``epsilon`` was recorded in exactly this ledger object (still alive)."""
        return self._ledger is not None and self._ledger() is ledger

    def _bind(self, ledger) -> None:
        """Remember that ``ledger`` recorded this threshold's ε (weakly: it may be collected)."""
        self._ledger = weakref.ref(ledger)
        self._charged = True

    def __getstate__(self):
        # a pickle carries no ledger (nor a reference to one): unpickled, a charged threshold
        # is refused by sums.run rather than charged again or trusted
        state = self.__dict__.copy()
        state["_ledger"] = None
        return state

    def __deepcopy__(self, memo):
        import copy

        new = object.__new__(type(self))  # not copy.copy: that goes through __getstate__
        new.__dict__.update(self.__dict__)  # the same ledger reference: paid for by the same ledger
        for name in ("candidates", "params"):
            setattr(new, name, copy.deepcopy(getattr(self, name), memo))
        return new

    @property
    def label(self) -> str:
        """One line saying τ and how it was chosen (SVT candidate and ε, declared public, or no truncation)."""
        if self.method == "svt":
            how = (f"SVT candidate {self.index}" if self.index is not None
                   else "SVT found none: no truncation")
            return f"τ = {self.tau:g} ({how}, ε = {self.epsilon:g})"
        if self.method == "public":
            return f"τ = {self.tau:g} (declared public, data-independent)"
        return f"no truncation (τ = max value = {self.tau:g})"


def public_threshold(tau: float) -> Threshold:
    """A τ declared public by the caller (not read from the records; costs no ε).

    The only way :func:`dpexplorer.sums.run` accepts a τ you give: a bare
    number is refused, since a τ read from the records (a maximum, a
    percentile) would be a release of them without noise.

    Raises
    ------
    ValueError
        If ``τ ≤ 0``, NaN or infinite.
    """
    return Threshold.public(tau)


def no_truncation(values) -> Threshold:
    """``τ = max v``: nothing is truncated (the paper's NoTrunc, Alg. 1); ``v`` are the public bucket values."""
    return Threshold(float(check_values(values).max()), "none")


def svt_candidates(values, params: SVTParams = SVTParams(), support=None) -> np.ndarray:
    """``θ_k = θ₀·r^k`` for k = 0 .. K, K the first index with ``θ_K ≥ max v`` (over ``support``).

    If ``θ₀`` is above the largest value the candidates are just ``[θ₀]``
    (no error); :func:`svt_threshold` caps the released τ at the largest
    value, so that case gives ``τ = max v`` (no truncation).

    Parameters
    ----------
    values : array_like, shape (n,)
        Bucket values (public).
    params : SVTParams
    support : array_like of bool, shape (n,), optional
        Buckets that count (SQM: the buckets one query sums over).

    Returns
    -------
    ndarray, shape (K + 1,)
        ``[θ₀]`` alone when ``θ₀`` exceeds the largest value.

    Raises
    ------
    ValueError
        If no bucket (of ``support``) has a positive value, or more than
        ``max_candidates`` would be needed.
    """
    v = check_values(values)
    vs = v if support is None else v[np.asarray(support, dtype=bool)]
    if vs.size == 0 or not (vs > 0).any():
        raise ValueError("the query covers no bucket with a positive value")
    top = float(vs.max())
    theta0 = float(vs[vs > 0].min()) if params.theta0 is None else float(params.theta0)
    if theta0 > top:
        return np.array([theta0])
    K = math.ceil(math.log(top / theta0) / math.log(params.r) - 1e-12)
    if K + 1 > params.max_candidates:
        raise ValueError(f"θ₀ = {theta0:g} and r = {params.r:g} need {K + 1:,} candidates to reach the "
                         f"largest value {top:g}; raise r or θ₀ (limit {params.max_candidates:,})")
    theta = theta0 * params.r ** np.arange(K + 1)
    theta[-1] = max(theta[-1], top)  # guard against rounding just below the top
    return theta


def svt_queries(x, values, candidates, rho: float, support=None) -> np.ndarray:
    """``q_k(x) = c_k(x) − ρ·N(x)``: SVT's queries (computed inside the privacy boundary).

    ``c_k`` counts the records (of ``support``) whose bucket value is at most
    ``θ_k``; ``N`` counts all records (of ``support``).

    Returns
    -------
    ndarray, shape (K + 1,)
    """
    x = np.asarray(x, dtype=float)
    v = np.asarray(values, dtype=float)
    if support is not None:
        mask = np.asarray(support, dtype=bool)
        x, v = x[mask], v[mask]
    order = np.argsort(v, kind="stable")
    cum = np.concatenate([[0.0], np.cumsum(x[order])])
    c = cum[np.searchsorted(v[order], candidates, side="right")]
    return c - rho * cum[-1]


def svt_sensitivity(rho: float) -> float:
    """Sensitivity ``max(ρ, 1 − ρ)`` of the queries ``c_k − ρN`` (one record moves ``c_k`` by ≤ 1 and ``N`` by 1)."""
    return max(float(rho), 1.0 - float(rho))


def svt_threshold(data: PrivateData, values, epsilon: float, rng,
                  params: SVTParams = SVTParams(), support=None,
                  label: str = "SVT threshold") -> Threshold:
    """Choose ``τ`` privately with the sparse vector technique (paper Sec. 3.1; module docstring).

    Parameters
    ----------
    data : PrivateData
        Records per bucket (the vector form x), behind the privacy boundary.
    values : array_like, shape (n,)
        Public bucket values ``v_j`` (non-negative).
    epsilon : float
        ε spent on the threshold (the caller passes ``α·ε``).
    rng : numpy.random.Generator or dpexplorer.privacy.OS_CSPRNG
        Simulation or release randomness.
    params : SVTParams
        ``ρ``, ``r``, ``θ₀`` (``α`` is the caller's business).
    support : array_like of bool, shape (n,), optional
        Restrict to the buckets of one query (SQM).
    label : str
        Recorded in the ledger.

    Returns
    -------
    Threshold
        ``method = "svt"``, ``epsilon`` = what was spent, charged to
        ``data.ledger`` (which :func:`dpexplorer.sums.run` then requires).

    Raises
    ------
    ValueError
        Invalid values, ε or parameters.
    BudgetExceededError
        If the ledger's budget would be exceeded.
    """
    v = check_values(values)
    if v.size != data.n:
        raise ValueError(f"{v.size} bucket values but the data vector has {data.n} buckets")
    eps = _positive(epsilon, "the SVT budget ε")
    theta = svt_candidates(v, params, support)
    k = data.above_threshold(lambda x: svt_queries(x, v, theta, params.rho, support), 0.0,
                             svt_sensitivity(params.rho), eps, rng, label)
    top = float((v if support is None else v[np.asarray(support, dtype=bool)]).max())
    tau = top if k is None else float(min(theta[k], top))
    thr = Threshold(tau, "svt", eps, theta, k, params)
    thr._bind(data.ledger)  # above_threshold recorded ε there
    return thr
