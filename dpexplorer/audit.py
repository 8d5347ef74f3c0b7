"""Audit a privacy claim: a statistically valid lower bound on ε from simulated runs.

:func:`audit` runs a mechanism many times on two neighbouring data vectors
``x₀`` and ``x₁`` (one record added or removed) and returns a lower bound on
the ε it really has, at a stated confidence.  A mechanism that is (ε, δ)-DP
satisfies, for every set of outputs ``E`` and both orders of the pair,

    P[M(x₀) ∈ E] ≤ e^ε · P[M(x₁) ∈ E] + δ,

so estimating the two probabilities of one event gives
``ε ≥ ln((P₀(E) − δ)/P₁(E))``.  With one-sided Clopper–Pearson bounds
(``p₀ ≥ p₀_lo``, ``p₁ ≤ p₁_hi``, each at level ``1 − α/2``, jointly at
``1 − α`` by the union bound)

    ε_lb = ln((p₀_lo − δ)/p₁_hi)

is a lower bound that holds with probability at least ``1 − α`` (Jagielski,
Ullman & Oprea, "Auditing differentially private machine learning", NeurIPS
2020, Sec. 3; Nasr, Song, Thakurta, Papernot & Carlini, "Adversary
instantiation: lower bounds for differentially private machine learning",
IEEE S&P 2021, Sec. 3 and their (ε, δ) form).  If it exceeds the claimed ε,
the claim is refuted at that confidence.

**Events.**  The outputs are reduced to one number by a *statistic* (the
projection ``⟨x̂, x₁ − x₀⟩`` of the estimate by default; the number of DAWA
buckets; the size of the bucket holding the changed cell; any numeric entry
of the run's public ``info``; or a function) and the events are thresholds on
it, ``{s ≥ t}`` or ``{s ≤ t}``.  As in Ding, Wang, Wang, Zhang & Kifer,
"Detecting violations of differential privacy" (CCS 2018, Sec. 4), the event
is chosen on a first batch of runs (every threshold, both directions, both
orders of the pair; the one with the largest bound on that batch) and then
**fixed** before a second, independent batch on which the bound is computed --
so choosing the event costs no confidence.  An event can also be given
(:class:`Event`, or a function of the output returning a bool).

**Richer events.**  With ``features`` (:data:`FEATURES`: the partition's
bucket-boundary indicators, the estimate, the numeric entries of ``info``,
or a function), every run also yields a feature vector, and the first batch
chooses among thresholds on the statistic, on each feature (e.g. "the
partition has a boundary at position i"), on the score of a logistic
regression fitted to tell ``x₀``'s runs from ``x₁``'s (the classifier of
DP-Sniper: Bichsel, Steffen, Bogunovic & Vechev, IEEE S&P 2021) and, for
features with few distinct values, on their empirical likelihood ratio
(:func:`select_feature_event`, :class:`Score`).  The winner is fixed --
weights, table and threshold -- before the second batch is drawn, and the
bound is computed on the second batch alone, so it stays valid however many
candidates were tried.  The standard cases of the data-dependent mechanisms
use features (:func:`cases`); :meth:`AuditCase.run_weakened` audits a
variant with too little noise (:class:`Weakened`), the auditor's power check.

**The privacy loss.**  Every run keeps its transcript -- what the privacy
kernel returned: noisy strategy answers ``y``, noisy function values, noisy
choices -- and the statistic ``"loss"`` is the log-likelihood ratio
``ln(p(y | x₁)/p(y | x₀))`` of its noisy measurements (for Laplace noise of
scale ``b``, ``Σ(|y − A x₀| − |y − A x₁|)/b``), whose upper and lower sets
are the most powerful tests of ``x₀`` against ``x₁`` (Neyman & Pearson
1933; the optimal distinguisher of Nasr et al. 2021).  A data-independent
release holds ``y`` (``Release.y``): its standard cases threshold the loss.
The features ``"transcript"`` add the noisy choices (one-hot), so that a
logistic score on them is the transcript's log-likelihood ratio (MWEM's and
EFPA's cases).  An event on the transcript is an event on the output when
the output determines the transcript -- a release's ``y``, MWEM's
``info['selected']`` and ``info['measurements']``, EFPA's ``info['k']`` and
``rfft(x̂)[:k]`` -- as for every case here; for a mechanism whose output
discards part of it, the bound is one on the transcript's ε, the ε the
kernel's ledger accounts for.

**Runs.**  Every run is a simulation: a fresh
:class:`~dpexplorer.privacy.PrivateData` and a ``numpy.random.Generator``
seeded from ``SeedSequence([seed, tag, batch, side, chunk])``.  The
simulation samplers draw the same distributions as the release samplers
(:mod:`dpexplorer.privacy.samplers`, tested with KS / χ² tests), so the bound
is a bound for releases too.  Chunks of runs go through the parallel
machinery of :func:`dpexplorer.evaluate.evaluate` (inline, local processes,
or a Dask ``client``); results depend on ``seed`` and ``chunk`` only, not on
the number of workers.  Progress: a tqdm bar, or ``callback(done, total)``.

Example::

    import dpexplorer as dpx
    r = dpx.audit.audit("identity", [0, 0], [1, 0], epsilon=1.0, runs=20_000, seed=0)
    r.epsilon_lb, r.claim, r.event, r.p0, r.p1      # bound, claim, event, intervals
    r.violated                                       # True iff epsilon_lb > claim

An audit can only refute a claim, never prove one: a bound below the claim
says the simulation found no violation on that pair of inputs.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pandas as pd
import scipy.optimize
import scipy.special
import scipy.stats

from . import evaluate as _evaluate
from . import mechanism as _mechanism
from .core import registry
from .privacy import PrivateData
from .privacy.kernel import validate_counts
from .privacy.noise import Gaussian, Laplace, NoiseModel
from .queries import workloads as _workloads
from .queries.matrix import Dense, Matrix, as_matrix
from .streaming.participation import max_participations

__all__ = ["audit", "AuditResult", "AuditCase", "Event", "Score", "Weakened", "cases",
           "clopper_pearson", "epsilon_lower_bound", "select_event", "select_feature_event",
           "fit_logistic", "STATISTICS", "FEATURES", "CASE_DELTA", "CASE_KINDS", "DEFAULT_RUNS",
           "DEFAULT_CONFIDENCE", "DEFAULT_CHUNK", "case_workload"]

#: Runs per data vector in the second (bound) batch.
DEFAULT_RUNS = 10_000
#: Confidence of the lower bound (1 − α).
DEFAULT_CONFIDENCE = 0.95
#: Runs per chunk (one task of the parallel machinery; one Generator per chunk).
DEFAULT_CHUNK = 500
#: Mixed into every seed of an audit.
AUDIT_SEED_TAG = 0xA0D17
#: Most thresholds tried when choosing the event (quantiles of the first batch beyond that).
MAX_THRESHOLDS = 2000
#: Most distinct feature vectors ("atoms") for the atom classifier of :func:`select_feature_event`.
MAX_ATOMS = 512
#: The atom classifier needs this many first-batch runs (both data vectors) per distinct vector.
ATOM_RUNS = 10
#: Ridge penalty of :func:`fit_logistic` (on standardised features, per run).
LOGISTIC_RIDGE = 1e-3

#: Named statistics (what :func:`audit` accepts as ``statistic``, besides a function).
STATISTICS = {
    "auto": ("strategy_projection for a strategy's estimate, projection for other estimates and "
             "arrays, the value itself for numbers"),
    "projection": "⟨x̂, x₁ − x₀⟩: the estimate projected on the difference of the pair",
    "strategy_projection": ("⟨A(x₁ − x₀), A x̂⟩ with A = info['strategy']: the fitted strategy "
                            "answers weighted by how the pair moves them (the likelihood ratio "
                            "of Gaussian noise)"),
    "loss": ("the privacy loss ln(p(y | x₁)/p(y | x₀)) of the run's noisy strategy answers y = A x "
             "+ z (every matrix-mechanism measurement of the run: a data-independent mechanism's "
             "y): Σ(|y − A x₀| − |y − A x₁|)/b for Laplace noise of scale b, "
             "(‖y − A x₀‖² − ‖y − A x₁‖²)/(2σ²) for Gaussian -- the Neyman-Pearson statistic"),
    "bucket_size": "size of the DAWA bucket holding the first cell where x₀ and x₁ differ",
    "buckets": "number of DAWA buckets (info['buckets'])",
    "info:<key>": "a numeric entry of the run's public info (None counts as −∞)",
}

#: Named feature vectors (what :func:`audit` accepts as ``features``, besides a function).
FEATURES = {
    "boundaries": ("the partition's boundary indicators: entry i−1 is 1 iff a bucket starts at "
                   "position i (1 ≤ i < n) of info['partition'] (DAWA and its variants)"),
    "estimate": "the estimate x̂ itself, one feature per cell",
    "info": "every finite numeric scalar of the run's public info (sorted by key)",
    "all": "estimate, then boundaries (if the output has a partition), then info",
    "transcript": ("the run's privacy loss on its noisy measurements (statistic 'loss'), then "
                   "the one-hot indicator of every noisy-max choice, in order (MWEM's selected "
                   "queries, EFPA's number of coefficients): a logistic score on them is the "
                   "transcript's log-likelihood ratio when each choice's log-ratio depends on "
                   "the choice alone"),
}


# ================================================================ statistics
def clopper_pearson(k, n, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided Clopper–Pearson interval of a binomial proportion (Clopper & Pearson 1934).

    Each end is a one-sided bound at level ``1 − α/2`` (``α = 1 − confidence``):
    ``lo = Beta⁻¹(α/2; k, n − k + 1)`` (0 when ``k = 0``) and
    ``hi = Beta⁻¹(1 − α/2; k + 1, n − k)`` (1 when ``k = n``).

    Parameters
    ----------
    k : int or array of int
        Successes (events observed), ``0 ≤ k ≤ n``.
    n : int
        Trials (runs).
    confidence : float
        In (0, 1).

    Returns
    -------
    lo, hi : ndarray
        Same shape as ``k``.
    """
    k = np.asarray(k, dtype=float)
    a = 1.0 - float(confidence)
    with np.errstate(invalid="ignore"):
        lo = np.where(k > 0, scipy.stats.beta.ppf(a / 2, np.maximum(k, 1e-300), n - k + 1), 0.0)
        hi = np.where(k < n, scipy.stats.beta.ppf(1 - a / 2, k + 1, np.maximum(n - k, 1e-300)), 1.0)
    return lo, hi


def epsilon_lower_bound(p_num_lo, p_den_hi, delta: float = 0.0) -> np.ndarray:
    """``max(0, ln((p_num_lo − δ)/p_den_hi))``: the ε an (ε, δ) claim needs (0 if no evidence).

    From ``P_num(E) ≤ e^ε P_den(E) + δ`` (Jagielski et al. 2020; Nasr et al.
    2021) with a lower bound on the larger probability and an upper bound on
    the smaller one.
    """
    num = np.asarray(p_num_lo, dtype=float) - float(delta)
    den = np.asarray(p_den_hi, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where((num > 0) & (den > 0), np.log(np.maximum(num, 1e-300) / np.maximum(den, 1e-300)),
                       0.0)
    return np.maximum(out, 0.0)


# ==================================================================== events
@dataclass(frozen=True)
class Event:
    """A threshold event on the statistic: ``{s ≥ threshold}`` or ``{s ≤ threshold}``.

    Attributes
    ----------
    op : {">=", "<="}
    threshold : float
    numerator : {0, 1} or None
        The data vector (``x₀`` or ``x₁``) under which the event is claimed to
        be more likely: the bound is ``ln((P_num − δ)/P_other)``.  ``None``
        (a given event): both orders are bounded, each at confidence
        ``1 − α/2``, and the larger is reported.
    """

    op: str
    threshold: float
    numerator: int | None = None
    score: Score | None = None

    def __post_init__(self):
        if self.op not in (">=", "<="):
            raise ValueError(f"an event's op must be '>=' or '<=', got {self.op!r}")
        if not isinstance(self.threshold, int | float | np.number) or math.isnan(float(self.threshold)):
            raise ValueError(f"an event's threshold must be a number, got {self.threshold!r}")
        if self.numerator not in (None, 0, 1):
            raise ValueError(f"numerator must be 0, 1 or None, got {self.numerator!r}")
        if self.score is not None and not isinstance(self.score, Score):
            raise ValueError(f"an event's score must be a Score or None, got {self.score!r}")

    def contains(self, values) -> np.ndarray:
        """Whether each statistic value (or score, for an event with one) is in the event (bool array)."""
        v = np.asarray(values, dtype=float)
        return v >= self.threshold if self.op == ">=" else v <= self.threshold

    def values(self, rows) -> np.ndarray:
        """What the threshold applies to, from a batch's rows (statistic, then the features).

        Parameters
        ----------
        rows : ndarray, shape (runs, 1 + d)
            Column 0 the statistic, columns 1.. the features (if any).

        Returns
        -------
        ndarray, shape (runs,)
            The statistic, or this event's :class:`Score` of the features.
        """
        rows = np.asarray(rows, dtype=float)
        rows = rows.reshape(rows.shape[0], -1)
        return rows[:, 0] if self.score is None else self.score(rows[:, 1:])

    @property
    def label(self) -> str:
        what = "s" if self.score is None else self.score.label
        return f"{what} {'≥' if self.op == '>=' else '≤'} {self.threshold:g}"


def select_event(v0, v1, confidence: float, delta: float = 0.0,
                 max_thresholds: int = MAX_THRESHOLDS) -> tuple[Event, float]:
    """The threshold event with the largest ε lower bound on a (first) batch of statistic values.

    Tries ``{s ≥ t}`` and ``{s ≤ t}`` for every distinct value ``t`` of the
    pooled batch (at most ``max_thresholds`` quantiles), with either data
    vector as the numerator, and scores each by :func:`epsilon_lower_bound`
    of its Clopper–Pearson bounds at ``confidence``; ties (e.g. all 0) go to
    the largest smoothed log-ratio ``ln((k_num + ½)/(k_den + ½))``.

    Parameters
    ----------
    v0, v1 : array_like of float
        The statistic on runs with ``x₀`` and with ``x₁``.
    confidence, delta : float
        As :func:`audit`.
    max_thresholds : int

    Returns
    -------
    (Event, float)
        The event (with its numerator) and its score on this batch.
    """
    a = np.sort(np.asarray(v0, dtype=float))
    b = np.sort(np.asarray(v1, dtype=float))
    pooled = np.unique(np.concatenate([a, b]))
    if pooled.size > max_thresholds:
        pooled = np.unique(np.quantile(pooled, np.linspace(0, 1, max_thresholds)))
    counts = {}
    for name, s in (("a", a), ("b", b)):
        counts[(name, ">=")] = s.size - np.searchsorted(s, pooled, side="left")
        counts[(name, "<=")] = np.searchsorted(s, pooled, side="right")
    best = None
    for op in (">=", "<="):
        ka, kb = counts[("a", op)], counts[("b", op)]
        lo_a, hi_a = clopper_pearson(ka, a.size, confidence)
        lo_b, hi_b = clopper_pearson(kb, b.size, confidence)
        for num, (lo_n, hi_d, kn, nn, kd, nd) in enumerate(
                [(lo_a, hi_b, ka, a.size, kb, b.size), (lo_b, hi_a, kb, b.size, ka, a.size)]):
            score = epsilon_lower_bound(lo_n, hi_d, delta)
            smooth = np.log((kn + 0.5) / (nn + 1.0)) - np.log((kd + 0.5) / (nd + 1.0))
            i = int(np.lexsort((smooth, score))[-1])
            key = (float(score[i]), float(smooth[i]))
            if best is None or key > best[0]:
                best = (key, Event(op, float(pooled[i]), num))
    assert best is not None  # the loops above run (two directions, two ratios) and set it
    return best[1], best[0][0]


@dataclass(frozen=True, eq=False)
class Score:
    """A score of a run's feature vector, fixed on the first batch: the event thresholds it.

    Three kinds (:func:`select_feature_event` builds them):

    * ``"coordinate"``: feature ``index`` itself (a per-coordinate threshold,
      or, on a 0/1 feature such as a DAWA boundary indicator, "the
      partition has a boundary at position i");
    * ``"logistic"``: ``w·φ + b`` of a logistic regression of the data
      vector's label (0 for ``x₀``, 1 for ``x₁``) on the features φ, the
      classifier of DP-Sniper (Bichsel, Steffen, Bogunovic & Vechev,
      "DP-Sniper: black-box discovery of differential privacy violations
      using classifiers", IEEE S&P 2021, Sec. IV-V);
    * ``"atoms"``: for features with few distinct values (a partition of a
      small domain), the first batch's smoothed log-ratio
      ``ln((k₁ + ½)/(N + 1)) − ln((k₀ + ½)/(N + 1))`` of each distinct vector
      (0 for one not seen there) -- the empirical likelihood-ratio
      classifier, whose upper sets are the Neyman-Pearson events.

    Attributes
    ----------
    kind : {"coordinate", "logistic", "atoms"}
    features : str
        Name of the feature vector (for labels).
    index : int
        The coordinate (kind ``"coordinate"``).
    weights : ndarray, shape (d,)
        ``w`` (kind ``"logistic"``, on the raw features).
    intercept : float
        ``b`` (kind ``"logistic"``).
    atoms : ndarray, shape (a, d); atom_scores : ndarray, shape (a,)
        The distinct feature vectors and their scores (kind ``"atoms"``).
    """

    kind: str
    features: str
    index: int = -1
    weights: np.ndarray | None = None
    intercept: float = 0.0
    atoms: np.ndarray | None = None
    atom_scores: np.ndarray | None = None

    def __post_init__(self):
        if self.kind not in ("coordinate", "logistic", "atoms"):
            raise ValueError(f"a score's kind must be 'coordinate', 'logistic' or 'atoms', got {self.kind!r}")

    def __call__(self, F) -> np.ndarray:
        """The score of every row of ``F`` (shape ``(runs, d)``), shape ``(runs,)``."""
        F = np.asarray(F, dtype=float)
        if self.kind == "coordinate":
            return F[:, self.index]
        if self.kind == "logistic":
            return F @ self.weights + self.intercept
        out = np.zeros(F.shape[0])
        if self.atoms is None or self.atom_scores is None:  # zip would raise a TypeError too
            raise TypeError("an 'atoms' score needs its atoms and atom_scores")
        lookup = {row.tobytes(): v for row, v in zip(self.atoms, self.atom_scores, strict=True)}
        for i, row in enumerate(np.ascontiguousarray(F)):
            out[i] = lookup.get(row.tobytes(), 0.0)
        return out

    @property
    def label(self) -> str:
        if self.kind == "coordinate":
            return f"{self.features}[{self.index}]"
        if self.kind == "logistic":
            return f"logistic score on {self.features}"
        if self.atoms is None:  # len would raise a TypeError too
            raise TypeError("an 'atoms' score needs its atoms")
        return f"likelihood-ratio score of {self.features} ({len(self.atoms)} atoms)"


def fit_logistic(F0, F1, ridge: float = LOGISTIC_RIDGE) -> tuple[np.ndarray, float]:
    """Logistic regression of the label (0: rows of ``F0``, 1: rows of ``F1``) on the features.

    Minimises the mean log-loss plus ``ridge/2·‖w‖²`` on standardised
    features with L-BFGS (:func:`scipy.optimize.minimize`), as DP-Sniper's
    classifier (Bichsel et al., IEEE S&P 2021, Sec. V-A) fitted on the first batch.

    Parameters
    ----------
    F0, F1 : array_like, shape (N0, d) and (N1, d)
        Finite features of the runs on ``x₀`` and on ``x₁``.
    ridge : float
        L2 penalty (≥ 0) on the standardised weights; keeps separable batches finite.

    Returns
    -------
    (w, b) : (ndarray, shape (d,), float)
        ``P(x₁ | φ) = expit(w·φ + b)`` on the raw features.

    Raises
    ------
    ValueError
        If the features are not finite or the shapes do not match.
    """
    F0 = np.asarray(F0, dtype=float)
    F1 = np.asarray(F1, dtype=float)
    if F0.ndim != 2 or F1.ndim != 2 or F0.shape[1] != F1.shape[1]:
        raise ValueError(f"features must be two 2D arrays with the same columns, got {F0.shape}, {F1.shape}")
    X = np.vstack([F0, F1])
    if not np.all(np.isfinite(X)):
        raise ValueError("the features must be finite")
    y = np.concatenate([np.zeros(len(F0)), np.ones(len(F1))])
    mu = X.mean(axis=0)
    sd = X.std(axis=0)
    sd[sd == 0] = 1.0
    Z = (X - mu) / sd
    sign = 2.0 * y - 1.0
    n = len(y)

    def loss(theta):
        w, b = theta[:-1], theta[-1]
        m = sign * (Z @ w + b)
        f = -np.sum(scipy.special.log_expit(m)) / n + 0.5 * ridge * (w @ w)
        g = -sign * scipy.special.expit(-m) / n
        return f, np.concatenate([Z.T @ g + ridge * w, [g.sum()]])

    res = scipy.optimize.minimize(loss, np.zeros(Z.shape[1] + 1), jac=True, method="L-BFGS-B")
    w = res.x[:-1] / sd
    return w, float(res.x[-1] - w @ mu)


def select_feature_event(rows0, rows1, confidence: float, delta: float = 0.0,
                         features: str = "features", statistic: bool = True,
                         max_atoms: int = MAX_ATOMS) -> tuple[Event, float, dict]:
    """The event with the largest ε lower bound on a first batch of statistics and features.

    The candidates are threshold events (:func:`select_event`) on: the
    statistic (column 0, if ``statistic``); every feature coordinate (the
    per-coordinate thresholds, e.g. "a DAWA bucket boundary at position i");
    the score of a logistic regression fitted on the batch (:func:`fit_logistic`,
    DP-Sniper); and, when the features take at most ``max_atoms`` distinct
    values and at least :data:`ATOM_RUNS` runs per value, the batch's
    likelihood-ratio score of each value (see :class:`Score`).
    The winner is fixed before the second batch is drawn, so choosing among
    them costs no confidence (Ding et al., CCS 2018, Sec. 4; Bichsel et al.
    2021, Sec. IV): the bound is computed on the second batch only.

    Parameters
    ----------
    rows0, rows1 : array_like, shape (N, 1 + d)
        Column 0 the statistic, columns 1.. the features, of runs with ``x₀``
        and with ``x₁``.
    confidence, delta : float
        As :func:`audit`.
    features : str
        Name of the features (labels).
    statistic : bool
        Consider thresholds on the statistic too.
    max_atoms : int

    Returns
    -------
    (Event, float, dict)
        The event, its score on this batch, and the best score of each kind
        of candidate (``"statistic"``, ``"coordinate"``, ``"logistic"``, ``"atoms"``).
    """
    R0 = np.asarray(rows0, dtype=float)
    R1 = np.asarray(rows1, dtype=float)
    R0, R1 = R0.reshape(R0.shape[0], -1), R1.reshape(R1.shape[0], -1)
    F0, F1 = R0[:, 1:], R1[:, 1:]
    cands: list[tuple[str, Score | None]] = [("statistic", None)] if statistic else []
    varying = [j for j in range(F0.shape[1])
               if np.ptp(np.concatenate([F0[:, j], F1[:, j]])) > 0]
    cands += [("coordinate", Score("coordinate", features, index=j)) for j in varying]
    if varying:
        w, b = fit_logistic(F0[:, varying], F1[:, varying])
        full = np.zeros(F0.shape[1])
        full[varying] = w
        cands.append(("logistic", Score("logistic", features, weights=full, intercept=b)))
        both = np.ascontiguousarray(np.vstack([F0, F1]))
        atoms, inverse = np.unique(both, axis=0, return_inverse=True)
        if len(atoms) <= min(max_atoms, len(both) // ATOM_RUNS):
            inverse = inverse.ravel()
            k0 = np.bincount(inverse[:len(F0)], minlength=len(atoms))
            k1 = np.bincount(inverse[len(F0):], minlength=len(atoms))
            lr = np.log((k1 + 0.5) / (len(F1) + 1.0)) - np.log((k0 + 0.5) / (len(F0) + 1.0))
            cands.append(("atoms", Score("atoms", features, atoms=atoms, atom_scores=lr)))
    kinds: dict[str, float]
    best, kinds = None, {}
    for kind, score in cands:
        v0 = R0[:, 0] if score is None else score(F0)
        v1 = R1[:, 0] if score is None else score(F1)
        ev, sc = select_event(v0, v1, confidence, delta)
        kinds[kind] = max(kinds.get(kind, 0.0), sc)
        if best is None or sc > best[1]:  # ties keep the earlier (simpler) candidate
            best = (Event(ev.op, ev.threshold, ev.numerator, score), sc)
    if best is None:
        raise ValueError("no candidate events: give a statistic or features that vary")
    return best[0], best[1], kinds


# ==================================================================== result
@dataclass
class AuditResult:
    """What :func:`audit` found.

    Attributes
    ----------
    mechanism : str
        Registry name, or the function's name.
    epsilon, delta : float
        The privacy parameters the mechanism ran with.
    claim : float
        The ε claimed for the audited output (``epsilon`` unless a part of
        the output with its own guarantee was audited, e.g. DAWA's partition).
    epsilon_lb : float
        Lower bound on the mechanism's ε (≥ 0), valid with probability ``confidence``.
    confidence : float
        1 − α.
    statistic : str
        What was thresholded.
    event : Event
        The event of the bound (chosen on the first batch unless given).
    k0, k1 : int
        Runs of the second batch inside the event, with ``x₀`` and ``x₁``.
    runs : int
        Runs per data vector in the second batch (the bound's sample).
    selection_runs : int
        Runs per data vector in the first batch (0 for a given event).
    p0, p1 : tuple of float
        ``(estimate, lo, hi)``: the event's probability under ``x₀`` and
        ``x₁`` with its Clopper–Pearson interval at ``confidence`` (each end
        a one-sided bound at ``1 − α/2``; for a given event without a
        numerator, at ``1 − α/2`` and ``1 − α/4``, since both orders are bounded).
    seconds : float
        Wall-clock time of the audit.
    seed : int
        Seed of all the runs (simulation mode).
    x0, x1 : ndarray
        The neighbouring pair.
    values0, values1 : ndarray
        The statistic on every run of the second batch (for the histograms).
    selection_score : float
        The chosen event's bound on the first batch (NaN for a given event).
    ledger_epsilon : float
        ε the privacy kernel recorded for one run (the mechanism's own accounting).
    features : str or None
        The features the event could be chosen on (see :data:`FEATURES`).
    candidates : dict
        With features: the best first-batch bound of each kind of candidate
        event (``"statistic"``, ``"coordinate"``, ``"logistic"``, ``"atoms"``).
    """

    mechanism: str
    epsilon: float
    delta: float
    claim: float
    epsilon_lb: float
    confidence: float
    statistic: str
    event: Event
    k0: int
    k1: int
    runs: int
    selection_runs: int
    p0: tuple[float, float, float]
    p1: tuple[float, float, float]
    seconds: float
    seed: int
    x0: np.ndarray
    x1: np.ndarray
    values0: np.ndarray = field(repr=False)
    values1: np.ndarray = field(repr=False)
    selection_score: float = math.nan
    ledger_epsilon: float = math.nan
    features: str | None = None
    candidates: dict = field(default_factory=dict)

    @property
    def violated(self) -> bool:
        """Whether the audit refutes the claim: ``epsilon_lb > claim``."""
        return self.epsilon_lb > self.claim

    @property
    def total_runs(self) -> int:
        """Mechanism runs of the whole audit (both batches, both data vectors)."""
        return 2 * (self.runs + self.selection_runs)

    def summary(self) -> str:
        """One paragraph: the bound against the claim, the event and its two intervals."""
        verdict = ("VIOLATION: the claim is refuted" if self.violated
                   else "no violation found (an audit cannot prove a claim)")
        num = self.event.numerator
        return (f"{self.mechanism}: audited ε ≥ {self.epsilon_lb:.4g} at {self.confidence:.4g} "
                f"confidence vs claimed ε = {self.claim:g}"
                + (f", δ = {self.delta:g}" if self.delta else "")
                + f" — {verdict}. Event {self.event.label} on {self.statistic}"
                + (f" (more likely under x{num})" if num is not None else "")
                + f": P0 = {self.p0[0]:.4g} [{self.p0[1]:.4g}, {self.p0[2]:.4g}], "
                f"P1 = {self.p1[0]:.4g} [{self.p1[1]:.4g}, {self.p1[2]:.4g}] over {self.runs:,} runs "
                f"each (+{self.selection_runs:,} to choose the event); {self.seconds:.1f} s, seed {self.seed}.")

    def histograms(self, bins: int = 40) -> pd.DataFrame:
        """The statistic's distribution under ``x₀`` and ``x₁`` (second batch).

        Returns
        -------
        DataFrame
            Columns ``left``, ``right`` (bin edges; equal for a discrete
            statistic with at most ``bins`` values, one bin per value),
            ``count0``, ``count1``.  Values ±∞ are counted in the first/last bin.
        """
        v0, v1 = np.asarray(self.values0, float), np.asarray(self.values1, float)
        both = np.concatenate([v0, v1])
        finite = both[np.isfinite(both)]
        if finite.size == 0:
            finite = np.zeros(1)
        uniq = np.unique(finite)
        if uniq.size <= bins:
            left = right = uniq
            idx0 = np.searchsorted(uniq, np.clip(v0, uniq[0], uniq[-1]))
            idx1 = np.searchsorted(uniq, np.clip(v1, uniq[0], uniq[-1]))
            # values between distinct ones cannot happen (uniq holds every finite value)
            c0 = np.bincount(idx0, minlength=uniq.size)
            c1 = np.bincount(idx1, minlength=uniq.size)
        else:
            edges = np.linspace(finite.min(), finite.max(), bins + 1)
            if edges[0] == edges[-1]:
                edges = edges + np.linspace(-0.5, 0.5, bins + 1)
            c0, _ = np.histogram(np.clip(v0, edges[0], edges[-1]), edges)
            c1, _ = np.histogram(np.clip(v1, edges[0], edges[-1]), edges)
            left, right = edges[:-1], edges[1:]
        return pd.DataFrame({"left": left, "right": right, "count0": c0, "count1": c1})

    def to_dict(self) -> dict:
        """The figures of the audit as plain numbers (a table row)."""
        return {"mechanism": self.mechanism, "epsilon": self.epsilon, "delta": self.delta,
                "claim": self.claim, "epsilon_lb": self.epsilon_lb, "violated": self.violated,
                "confidence": self.confidence, "statistic": self.statistic,
                "event": self.event.label, "numerator": self.event.numerator,
                "p0": self.p0[0], "p0_lo": self.p0[1], "p0_hi": self.p0[2],
                "p1": self.p1[0], "p1_lo": self.p1[1], "p1_hi": self.p1[2],
                "runs": self.runs, "selection_runs": self.selection_runs,
                "total_runs": self.total_runs, "seconds": self.seconds, "seed": self.seed,
                "features": self.features}


# ============================================================== what one run does
def _check_pattern(diff: np.ndarray, changed: np.ndarray, participations, mechanism) -> None:
    """Refuse a pair that is not one person's participation pattern (up to k steps >= b apart)."""
    if isinstance(mechanism, str):
        raise ValueError("participations= audits a function that measures with "
                         "dpx.streaming.Participation(A, k, b); a registered mechanism is calibrated "
                         "to one cell")
    try:
        k, b = participations
    except (TypeError, ValueError):
        raise ValueError(f"participations must be a pair (k, b), got {participations!r}") from None
    max_participations(diff.size, k, b)  # TypeError/ValueError unless whole numbers >= 1
    values = diff[changed]
    gaps = np.diff(changed)
    if not (1 <= changed.size <= k and (np.all(values == 1) or np.all(values == -1))
            and np.all(gaps >= b)):
        raise ValueError(f"x0 and x1 must differ by one person's records: +1 (or -1) at 1 to {k} "
                         f"cells at least {b} apart; they differ at {changed.tolist()[:10]} by "
                         f"{values.tolist()[:10]}")


def _first_difference(x0: np.ndarray, x1: np.ndarray) -> int:
    return int(np.flatnonzero(x0.ravel() != x1.ravel())[0])


@dataclass(frozen=True)
class _Statistic:
    """A picklable statistic ``output -> float`` (named, or the user's function)."""

    name: str
    diff: np.ndarray
    cell: int
    fn: Callable | None = None
    features: str | Callable | None = None
    x0: np.ndarray | None = None
    #: ``[(A, A x₀, A x₁)]`` of the last strategy the loss read: a data-independent mechanism
    #: measures the same (immutable) strategy on every run, so its exact answers on the pair are
    #: computed once (public: the auditor's own pair, not the run's data)
    _answers: list = field(default_factory=list, repr=False, compare=False)

    @property
    def features_name(self) -> str | None:
        """The features' name for labels (``None`` without features)."""
        f = self.features
        return f if f is None or isinstance(f, str) else getattr(f, "__name__", type(f).__name__)

    def row(self, out, measured: tuple = ()) -> np.ndarray:
        """The statistic, then the features: shape ``(1 + d,)``.

        ``measured`` holds the run's matrix-mechanism measurements ``(A, noise, y)``
        (:class:`_Tapped`), which the statistic ``"loss"`` reads.
        """
        s = self.loss(measured) if self.name == "loss" else self(out)
        if self.features is None:
            return np.array([s])
        return np.concatenate([[s], self.feature_vector(out, measured)])

    def feature_vector(self, out, measured: tuple = ()) -> np.ndarray:
        """The run's features (see :data:`FEATURES`), shape ``(d,)``, finite."""
        f = self.features
        if callable(f):
            v = np.asarray(f(out), dtype=float).ravel()
            what = f"features {self.features_name!r}"
        elif f == "all":
            parts = [self._named("estimate", out)]
            if isinstance(getattr(out, "info", None), dict) and out.info.get("partition") is not None:
                parts.append(self._named("boundaries", out))
            parts.append(self._named("info", out))
            v, what = np.concatenate(parts), "features 'all'"
        else:
            # a name here: row calls this only with features (a name, "all" or a function)
            v, what = self._named(cast(str, f), out, measured), f"features {f!r}"
        if v.size == 0 or not np.all(np.isfinite(v)):
            raise ValueError(f"{what} must be a non-empty vector of finite numbers (got {v.size} "
                             "values, some not finite)" if v.size else f"{what} are empty for this output")
        return v

    def _named(self, f: str, out, measured: tuple = ()) -> np.ndarray:
        if f == "transcript":
            parts: list[list[float] | np.ndarray] = [[self.loss(measured)]]
            x0 = np.asarray(self.x0, dtype=float).ravel()
            for m in measured:
                if m[0] == "choice":
                    onehot = np.zeros(np.size(m[1](x0.copy())))
                    onehot[m[2]] = 1.0
                    parts.append(onehot)
            return np.concatenate(parts)
        if f == "estimate":
            x_hat = out.x_hat if isinstance(out, registry.Estimate) else out
            return np.asarray(x_hat, dtype=float).ravel()
        info = _info(out, f"features {f!r}")
        if f == "boundaries":
            part = info.get("partition")
            if part is None:
                raise ValueError("features 'boundaries' need a DAWA-style output with info['partition']")
            ind = np.zeros(part.n - 1)
            ind[np.asarray(part.edges[1:-1], dtype=int) - 1] = 1.0
            return ind
        if f == "info":
            vals = [float(info[k]) for k in sorted(info)
                    if isinstance(info[k], int | float | np.number) and not isinstance(info[k], bool)
                    and math.isfinite(float(info[k]))]
            return np.asarray(vals, dtype=float)
        raise ValueError(f"unknown features {f!r}; use one of {sorted(FEATURES)} or a function "
                         "output -> 1D array")

    def loss(self, measured) -> float:
        """The privacy loss ``ln(p(y | x₁)/p(y | x₀))`` of a run's noisy strategy answers.

        For each measurement ``y = A x + z`` of the run (:class:`_Tapped`; a
        Laplace measurement ``f(x) + z`` of a function likewise, with
        ``f(x₀)``, ``f(x₁)`` in place of ``A x₀``, ``A x₁``) with
        i.i.d. noise ``z`` -- Laplace of scale ``b = Δ₁(A)/ε`` or Gaussian of
        standard deviation ``σ = Δ₂(A)·c`` (:meth:`PrivateData.measure
        <dpexplorer.privacy.PrivateData.measure>`), continuous or discrete on
        ℤ (the discrete densities have the same exponents, Canonne, Kamath &
        Steinke 2020) -- the log-ratio of the two densities is
        ``(Σ_i |y_i − (A x₀)_i| − |y_i − (A x₁)_i|)/b`` (Laplace) or
        ``(‖y − A x₀‖² − ‖y − A x₁‖²)/(2σ²)`` (Gaussian); independent
        measurements add.  Its upper and lower sets are the most powerful
        tests of ``x₀`` against ``x₁`` (Neyman & Pearson, Phil. Trans. R. Soc.
        A 231, 1933): the events an optimal distinguisher uses (Nasr, Song,
        Thakurta, Papernot & Carlini, IEEE S&P 2021, Sec. 3; DP as hypothesis
        testing: Kairouz, Oh & Viswanath, ICML 2015, Sec. 2).  A variant with
        every scale divided by the same factor multiplies it by that factor,
        so its order -- the events -- stays the same.  Rounded to 1e-9 so
        that the atoms of a sum of clipped terms stay atoms.

        Raises
        ------
        ValueError
            If the run measured no strategy answers through the kernel.
        """
        steps = [m for m in measured if m[0] in ("measure", "function")]
        if not steps:
            raise ValueError("statistic 'loss' needs a run that measures noisy answers through the "
                             "privacy kernel (data.measure or data.measure_function); this run "
                             "measured none")
        x0 = np.asarray(self.x0, dtype=float).ravel()
        x1 = x0 + self.diff
        total = 0.0
        for kind, what, noise, y in steps:
            if kind == "measure":
                a0, a1 = self._pair_answers(what, x0, x1)
                r0, r1 = y - a0, y - a1
                scale = noise.scale(what.sensitivity(noise.norm))
                norm = noise.norm
            else:  # Laplace(scale) on f(x), PrivateData.measure_function
                f0 = np.asarray(what(x0.copy()), dtype=float).ravel()
                f1 = np.asarray(what(x1.copy()), dtype=float).ravel()
                r0, r1, scale, norm = y.ravel() - f0, y.ravel() - f1, noise, 1
            if norm == 1:
                total += float(np.abs(r0).sum() - np.abs(r1).sum()) / scale
            else:
                total += float(r0 @ r0 - r1 @ r1) / (2.0 * scale**2)
        return float(np.round(total, 9))

    def _pair_answers(self, A: Matrix, x0: np.ndarray, x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(A x₀, A x₁)``, kept for the last strategy ``A`` (the same object on every run of a
        data-independent mechanism)."""
        entry = self._answers[-1] if self._answers else None  # one read: threads may share it
        if entry is None or entry[0] is not A:
            entry = (A, A.matvec(x0), A.matvec(x1))
            self._answers[:] = [entry]
        return entry[1], entry[2]

    def resolved(self, out) -> str:
        """The statistic's name for results: ``"auto"`` becomes what it means for ``out``."""
        if self.name != "auto":
            return self.name
        if isinstance(out, registry.Estimate):
            return "strategy_projection" if self._strategy(out) is not None else "projection"
        if isinstance(out, np.ndarray) and out.size > 1:
            return "projection"
        return "output"

    def _strategy(self, out):
        """The estimate's strategy ``A`` over the cells (``info['strategy']``), or ``None``."""
        A = getattr(out, "info", {}).get("strategy") if isinstance(out, registry.Estimate) else None
        return A if isinstance(A, Matrix) and A.n == self.diff.size else None

    def __call__(self, out) -> float:
        if self.fn is not None:
            return _number(self.fn(out), self.name)
        name = self.resolved(out) if self.name == "auto" else self.name
        if name == "loss":
            raise ValueError("statistic 'loss' reads the run's measurements, not its output: use row()")
        if name == "output":
            return _number(out, "the output (give statistic=...)")
        if name == "strategy_projection":
            A = self._strategy(out)
            if A is None:
                raise ValueError("statistic 'strategy_projection' needs an estimate with "
                                 "info['strategy'] over the data's cells (a data-independent mechanism)")
            return float(A.matvec(self.diff) @ A.matvec(np.asarray(out.x_hat, dtype=float).ravel()))
        if name == "projection":
            x_hat = out.x_hat if isinstance(out, registry.Estimate) else out
            x_hat = np.asarray(x_hat, dtype=float).ravel()
            if x_hat.size != self.diff.size:
                raise ValueError(f"the output has {x_hat.size} values but the data {self.diff.size} "
                                 "cells: give statistic=... for this mechanism")
            return float(x_hat @ self.diff)
        info = _info(out, name)
        if name == "bucket_size":
            part = info.get("partition")
            if part is None:
                raise ValueError("statistic 'bucket_size' needs a DAWA-style output with "
                                 "info['partition']")
            order = info.get("order")
            pos = self.cell if order is None else int(np.flatnonzero(np.asarray(order) == self.cell)[0])
            return float(part.sizes[part.bucket_of[pos]])
        key = "buckets" if name == "buckets" else name[len("info:"):]
        if key not in info:
            raise ValueError(f"statistic {self.name!r}: the output's info has no {key!r} "
                             f"(keys: {sorted(info)})")
        return _number(info[key], f"info[{key!r}]")


def _info(out, name: str) -> dict:
    info = getattr(out, "info", None)
    if not isinstance(info, dict):
        raise ValueError(f"statistic {name!r} needs an output with an info dict (a registered "
                         f"data-dependent mechanism), got {type(out).__name__}")
    return info


def _number(value, what: str) -> float:
    if value is None:
        return -math.inf
    if isinstance(value, bool | np.bool_):
        return float(value)
    arr = np.asarray(value, dtype=float) if isinstance(value, int | float | np.ndarray | np.number) else None
    if arr is None or arr.size != 1:
        raise ValueError(f"{what} is not a single number (got {type(value).__name__}); give "
                         "statistic=... (a function of the output returning a float)")
    return float(arr.ravel()[0])


@dataclass(frozen=True)
class _Runner:
    """One run: a registered mechanism (``W``, noise, params) or a function ``f(data, rng)``."""

    name: str
    fn: Callable | None
    W: Matrix | None
    noise: NoiseModel | None
    params: dict
    statistic: _Statistic
    counts: bool

    def output(self, x: np.ndarray, rng: np.random.Generator):
        """One run's output, the ε its ledger recorded and its measurements ``(A, noise, y)``."""
        data = _Tapped(x, counts=self.counts)
        if self.fn is None:
            # a runner without fn is built for a registered mechanism, always with its noise
            out = _mechanism.run(self.name, data, self.W, cast(NoiseModel, self.noise), rng, **self.params)
        else:
            out = self.fn(data, rng)
        return out, data.ledger.epsilon, tuple(data.measured)

    def __call__(self, x: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, float]:
        out, spent, measured = self.output(x, rng)
        return self.statistic.row(out, measured), spent


class _Tapped(PrivateData):
    """:class:`~dpexplorer.privacy.PrivateData` that also keeps what its noisy steps returned.

    The run's transcript, in order, for the statistic ``"loss"`` and the
    features ``"transcript"``: every matrix-mechanism measurement
    (``("measure", A, noise, y)``: its public strategy, noise model and noisy
    answers ``y``), every Laplace measurement of a function
    (``("function", f, scale, values)``: the mechanism's public function, to
    be evaluated by the auditor on its own pair only, the scale and the noisy
    values) and every noisy-max choice (``("choice", scores_fn, index)``).
    These are outputs of the kernel -- public: a data-independent release
    holds ``y`` (``Release.y``), MWEM's ``info`` its choices and measurements,
    EFPA's its choice and (through ``x̂``) its noisy coefficients.  Nothing
    else changes: the same draws, the same ledger; nothing here reads the data.
    """

    def __init__(self, x, ledger=None, *, counts: bool = True):
        super().__init__(x, ledger, counts=counts)
        self.measured: list[tuple] = []

    def measure(self, A, noise: NoiseModel, source, label: str = "measure") -> np.ndarray:
        y = super().measure(A, noise, source, label)
        self.measured.append(("measure", as_matrix(A), noise, np.array(y, dtype=float, copy=True)))
        return y

    def measure_function(self, f, sensitivity: float, epsilon: float, source, label: str) -> np.ndarray:
        values = super().measure_function(f, sensitivity, epsilon, source, label)
        self.measured.append(("function", f, float(sensitivity) / float(epsilon),
                              np.array(values, dtype=float, copy=True)))
        return values

    def noisy_max(self, scores_fn, sensitivity: float, epsilon: float, source, label: str) -> int:
        index = super().noisy_max(scores_fn, sensitivity, epsilon, source, label)
        self.measured.append(("choice", scores_fn, int(index)))
        return index


@dataclass(frozen=True)
class _Chunk:
    """One task: ``size`` runs on ``x_side`` of batch ``batch``."""

    batch: int
    side: int
    index: int
    size: int
    seed: int
    name: str

    def context(self) -> str:
        return (f"while auditing {self.name!r}: batch {self.batch}, runs on x{self.side}, "
                f"chunk {self.index}")


def _audit_chunk(chunk: _Chunk, runner: _Runner, x: np.ndarray) -> tuple[np.ndarray, float]:
    """Run one chunk (a pure function of its arguments: shipped to processes or Dask).

    Returns the rows (statistic, then features), shape ``(size, 1 + d)``, and
    the ε the last run's ledger recorded.
    """
    from .core.registry import REGISTRY

    if runner.fn is None and runner.name not in REGISTRY:
        _evaluate._ensure_registered(runner.name, ())
    rng = np.random.default_rng(np.random.SeedSequence(
        [int(chunk.seed), AUDIT_SEED_TAG, chunk.batch, chunk.side, chunk.index]))
    rows: list[np.ndarray] = []
    spent = math.nan
    for _ in range(chunk.size):
        row, spent = runner(x, rng)
        if rows and row.size != rows[0].size:
            raise ValueError(f"the features have {row.size - 1} values on one run and "
                             f"{rows[0].size - 1} on another: they must have a fixed length")
        rows.append(row)
    return np.vstack(rows), spent


def _batch(runner, x0, x1, runs, batch, seed, chunk, client, n_jobs, progress, callback,
           done, total, name):
    """The statistic on ``runs`` runs with each of ``x0`` and ``x1`` (one batch)."""
    tasks = []
    for side in (0, 1):
        for i, start in enumerate(range(0, runs, chunk)):
            tasks.append(_Chunk(batch, side, i, min(chunk, runs - start), seed, name))
    xs = (x0, x1)
    out = {0: [None] * len(tasks), 1: [None] * len(tasks)}
    spent = math.nan
    for task, (values, eps) in _evaluate._execute(
            tasks, lambda t: (runner, xs[t.side]), client, n_jobs, progress, None, 1,
            worker=_audit_chunk, keys=lambda t: (("audit-runner", id(runner)), ("audit-x", t.side)),
            desc=f"audit {name} ({'choose event' if batch == 0 else 'bound'})", unit="run",
            weight=lambda t: t.size):
        out[task.side][task.index] = values
        spent = eps if math.isnan(spent) else spent
        done[0] += task.size
        if callback is not None:
            callback(done[0], total)
    rows = [np.concatenate([v for v in out[side] if v is not None]) for side in (0, 1)]
    if rows[0].shape[1] != rows[1].shape[1]:
        raise ValueError("the features have a different length on x0 and on x1: they must have a "
                         "fixed length")
    return rows[0], rows[1], spent


# ============================================================ standard cases
@dataclass(frozen=True)
class AuditCase:
    """A neighbouring pair on which a mechanism's privacy is tightest, and how to audit it.

    Attributes
    ----------
    x0, x1 : tuple of int
        The pair (one record added in one cell).
    W : Matrix
        Workload the mechanism runs on.
    statistic : str or callable
        What the events threshold (see :data:`STATISTICS`), or a function
        ``output -> float`` (module level, so that it pickles).
    claim_share : float
        The claim is ``claim_share·ε``: 1 for the whole output; the partition
        stage's share for DAWA's partition alone (Thm 2: ε₁-DP).
    delta : float
        δ of the claim (Gaussian mechanisms).
    params : dict
        Parameters of the mechanism for the audit.
    label : str
        What is audited, in words.
    why : str
        Why this pair.
    features : str or None
        Features the event may also be chosen on (see :data:`FEATURES`,
        :func:`select_feature_event`); ``None``: thresholds on the statistic only.
    """

    x0: tuple
    x1: tuple
    W: Matrix
    statistic: str | Callable = "auto"
    claim_share: float = 1.0
    delta: float = 0.0
    params: dict = field(default_factory=dict)
    label: str = "the whole output"
    why: str = ""
    features: str | None = None

    def run(self, mechanism: str, epsilon: float, **kwargs) -> AuditResult:
        """:func:`audit` of ``mechanism`` at ``epsilon`` on this case (``kwargs`` passed on)."""
        params = {**self.params, **kwargs.pop("params", {})}
        kwargs.setdefault("features", self.features)
        return audit(mechanism, self.x0, self.x1, epsilon, self.delta, W=self.W,
                     statistic=self.statistic, claim=self.claim_share * epsilon,
                     params=params or None, **kwargs)

    def run_weakened(self, mechanism: str, epsilon: float, factor: float = 2.0,
                     **kwargs) -> AuditResult:
        """Audit a broken variant: ``mechanism`` with ``1/factor`` of its noise, claiming ``epsilon``.

        A power check of the auditor: the variant (:class:`Weakened`) runs
        with every noise scale divided by ``factor`` (Laplace at
        ``factor·ε``, the exponential mechanism's ε multiplied the same way;
        Gaussian with σ divided by ``factor``) while the claim stays this
        case's ``claim_share·epsilon``.  The result's ``ledger_epsilon`` is
        what the kernel recorded for the variant's runs.

        Raises
        ------
        ValueError
            If ``factor`` is not a finite number > 1.
        """
        params = {**self.params, **kwargs.pop("params", {})}
        kwargs.setdefault("features", self.features)
        weak = Weakened(mechanism, self.W, epsilon, self.delta, factor, params)
        return audit(weak, self.x0, self.x1, epsilon, self.delta, statistic=self.statistic,
                     claim=self.claim_share * epsilon, **kwargs)


@dataclass(frozen=True)
class Weakened:
    """A registered mechanism run with ``1/factor`` of its noise: a planted privacy bug.

    ``Weakened(name, W, epsilon, delta, factor)(data, rng)`` runs ``name``
    on ``W`` with ``Laplace(factor·ε)`` (every Laplace scale ``Δ/ε`` and
    every exponential-mechanism temperature divided by ``factor``) or, when
    ``delta > 0``, the analytic Gaussian whose σ is ``1/factor`` of
    ``Gaussian(ε, δ)``'s (Balle & Wang 2018, Thm 8, solved for ε with
    :func:`scipy.optimize.brentq`).  Not private at the claimed ε: for
    auditing the auditor (a picklable module-level callable, so it runs on
    worker processes).

    Raises
    ------
    ValueError
        If ``factor`` is not a finite number > 1.
    """

    mechanism: str
    W: Matrix
    epsilon: float
    delta: float = 0.0
    factor: float = 2.0
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        if not (isinstance(self.factor, int | float) and math.isfinite(self.factor) and self.factor > 1):
            raise ValueError(f"factor must be a finite number > 1, got {self.factor!r}")
        registry.get(self.mechanism)  # KeyError for an unknown name

    @property
    def __name__(self) -> str:  # the result's mechanism label
        return f"{self.mechanism} with 1/{self.factor:g} of its noise"

    @functools.cached_property
    def noise(self) -> NoiseModel:
        """The weakened noise model."""
        if self.delta <= 0:
            return Laplace(self.factor * self.epsilon)
        target = Gaussian(self.epsilon, self.delta).sigma_per_unit / self.factor
        hi = self.epsilon
        while Gaussian(hi, self.delta).sigma_per_unit > target:
            hi *= 2.0
        eps = scipy.optimize.brentq(lambda e: Gaussian(e, self.delta).sigma_per_unit - target,
                                    self.epsilon, hi, xtol=1e-12, rtol=1e-12)
        return Gaussian(eps, self.delta)

    def __call__(self, data: PrivateData, rng: np.random.Generator):
        from .core.registry import REGISTRY

        if self.mechanism not in REGISTRY:
            _evaluate._ensure_registered(self.mechanism, ())
        return _mechanism.run(self.mechanism, data, self.W, self.noise, rng, **self.params)


#: Gaussian mechanisms are audited at this δ.
CASE_DELTA = 1e-6

_ONE_CELL = ("one record added to the cell whose column of the strategy has the largest norm "
             "(the one that sets the sensitivity), on a tiny domain")
_DAWA_PAIR = ((5, 5, 5, 5), (5, 6, 5, 5))
_DAWA_PARTITION_PAIR = ((5,) * 8, (5, 6) + (5,) * 6)
_DAWA_PARTITION_WHY = ("a flat histogram of 8 cells, one record added to cell 1: every candidate "
                       "bucket over cell 1 (lengths 2, 4, 8) costs more, by as much as a record "
                       "can move it (2 − 2/L), so boundaries at 1 and 2 become likelier together; "
                       "the event is read from the partition's boundaries")
_MWEM_WHY = ("one round and a public total N = 10 (the whole ε in one selection and one measurement, "
             "ε/2 each); workload: cell 0 and the total over 2 cells, both answered off by 1 "
             "by A = (5, 5) on x₀ = (6, 3); the added record raises the first error to 2 and lowers "
             "the second to 0 -- the selection's utilities move in opposite directions, where the "
             "exponential mechanism's loss is largest -- and moves the first query's answer by 1; "
             "the event is read from the transcript (the choice and the measurement)")
_EFPA_WHY = ("9/10 of ε on the coefficients (selection_share 0.1: the measurement's loss dominates); "
             "a spike of 8 records in the last of 3 cells and one more there: the last cell "
             "attains the maximum that sets the exact sensitivity of the kept coefficients "
             "(k = 1 and k = 2: (1/a₀ + 1.37/a₁)/√3), so they move by all of it, and the two "
             "candidates' utilities move apart; the event is read from the transcript (k and "
             "the noisy coefficients)")
_DAWA_WHY = ("the teaching pair: a flat histogram where one extra record changes the cost of every "
             "candidate bucket holding cell 1, so the partition is as sensitive as it gets")


def cases(name: str) -> list[AuditCase]:
    """The standard audit cases of a registered mechanism (the first is the default).

    Built once per registry entry (a data-independent mechanism's strategy
    is built to choose the pair), by the case kind the entry names
    (:attr:`dpexplorer.core.registry.Mechanism.audit`, :data:`CASE_KINDS`).

    Hand-picked neighbouring pairs where the mechanism's privacy is tightest:
    a single-cell change on a tiny domain (data-independent strategies, whose
    columns all have the same norm; their events threshold the privacy loss
    of the noisy strategy answers ``y``, statistic ``"loss"``, the
    Neyman-Pearson test of the pair), DAWA's flat histogram where one record
    changes every candidate bucket over that cell (also audited for the
    partition alone against ε₁, on 8 cells, with events read from the
    partition's boundaries), a count at the threshold of the sparse
    vector (sum queries, in the tests), and so on.  Gaussian mechanisms use
    δ = :data:`CASE_DELTA`.  The data-dependent mechanisms' cases choose
    their events on features too (:attr:`AuditCase.features`); a case with
    its own claim (a stage's share of ε) reads only features of that stage.
    ``dawa_as_published`` (not private) keeps the 4-cell pair and the
    number of buckets, the event whose exact probabilities are known.

    Raises
    ------
    KeyError
        For an unregistered name.
    ValueError
        If the entry names an audit case kind not in :data:`CASE_KINDS`.
    """
    registry.get(name)  # KeyError for an unknown name
    return list(_cases(name))


_built: dict[str, tuple[registry.Mechanism, tuple[AuditCase, ...]]] = {}
_built_lock = threading.Lock()


def _cases(name: str) -> tuple[AuditCase, ...]:
    """The cases of ``name``, built once per registry entry (a replaced entry gets its own)."""
    mech = registry.get(name)
    with _built_lock:
        hit = _built.get(name)
    if hit is not None and hit[0] is mech:
        return hit[1]
    spec = mech.audit_spec()
    try:
        # spec.case None (no case kind) raises the KeyError handled here
        kind = CASE_KINDS[spec.case]  # type: ignore[index]
    except KeyError:
        raise ValueError(f"mechanism {name!r} names the audit case kind {spec.case!r}; the kinds "
                         f"are {sorted(CASE_KINDS)}") from None
    built = tuple(kind(mech, spec))
    with _built_lock:
        _built[name] = (mech, built)
    return built


def _dawa_cases(mech: registry.Mechanism, spec: registry.AuditSpec) -> tuple[AuditCase, ...]:
    """DAWA and its Partition+X variants: the flat histogram, whole run and partition alone."""
    ranges4 = _workloads.all_range(4)
    share = float(mech.params["ratio"])
    if not mech.private:  # the teaching case: the flat pair and its all-singletons event
        return (AuditCase(*_DAWA_PAIR, ranges4, why=_DAWA_WHY, features=None),
                AuditCase(*_DAWA_PAIR, ranges4, statistic="buckets", claim_share=share,
                          label="the partition alone (claim ε₁ = ratio·ε, Thm 2)",
                          why=_DAWA_WHY))
    return (AuditCase(*_DAWA_PAIR, ranges4, why=_DAWA_WHY, features="all"),
            AuditCase(*_DAWA_PARTITION_PAIR, _workloads.all_range(8), statistic="buckets",
                      claim_share=share, features="boundaries",
                      label="the partition alone (claim ε₁ = ratio·ε, Thm 2)",
                      why=_DAWA_PARTITION_WHY))


def _mwem_cases(mech: registry.Mechanism, spec: registry.AuditSpec) -> tuple[AuditCase, ...]:
    """MWEM: one round, a public total, the selection's utilities moving apart."""
    return (AuditCase((6, 3), (7, 3), Dense(np.array([[1.0, 0.0], [1.0, 1.0]])),
                      statistic="loss", params={"T": 1, "total": 10.0},
                      features="transcript", why=_MWEM_WHY),)


def phase_offset(out) -> float:
    """Distance (radians, in ``[0, π/2]``) of the phase of ``rfft(x̂)[1]`` from a multiple of π.

    ``π/2`` when that coefficient is 0 (an estimate that kept only the
    constant).  The statistic of ``efpa_as_published``'s case: on
    ``x₀ = (50, 0, 0)`` every coefficient is real, on ``x₁ = (50, 1, 0)`` the
    phase of ``F_1`` is −0.0175, and noise on the magnitude alone moves the
    phase by 0 or π only.
    """
    x_hat = np.asarray(out.x_hat if isinstance(out, registry.Estimate) else out, dtype=float).ravel()
    F = np.fft.rfft(x_hat)
    if F.size < 2 or abs(F[1]) <= 1e-9 * (1.0 + abs(F[0])):
        return math.pi / 2
    angle = float(np.angle(F[1])) % math.pi
    return min(angle, math.pi - angle)


_EFPA_PUBLISHED_WHY = ("every coefficient of x₀ = (50, 0, 0) is real; one record in cell 1 turns "
                       "the phase of F_1 by −0.0175; the authors' noise on the magnitudes only "
                       "leaves the phase (up to π), so every run that keeps F_1 tells x₀ from x₁")


def _efpa_cases(mech: registry.Mechanism, spec: registry.AuditSpec) -> tuple[AuditCase, ...]:
    """EFPA: a spike in the last of 3 cells; the choice of k alone against its share of ε.

    ``efpa_as_published`` (not private): the phase of the estimate's first
    Fourier coefficient (:func:`phase_offset`) on a pair that turns it.
    """
    if not mech.private:
        return (AuditCase((50, 0, 0), (50, 1, 0), _workloads.all_range(3),
                          statistic=phase_offset, why=_EFPA_PUBLISHED_WHY),)
    share = float(mech.params.get("selection_share", 0.5))
    return (AuditCase((0, 0, 8), (0, 0, 9), _workloads.all_range(3), statistic="loss",
                      params={"selection_share": 0.1}, features="transcript",
                      why=_EFPA_WHY),
            AuditCase(*_DAWA_PAIR, _workloads.all_range(4), statistic="info:k", claim_share=share,
                      features="info",  # every numeric info entry is a function of k
                      label="the number of coefficients alone (claim ε₁ = share·ε)",
                      why="the exponential mechanism's choice on a flat histogram"))


def _one_record_cases(mech: registry.Mechanism, spec: registry.AuditSpec) -> tuple[AuditCase, ...]:
    """A data-dependent mechanism without a case of its own: one record on a tiny domain."""
    return (AuditCase((0, 0, 0, 0), (1, 0, 0, 0), _workloads.all_range(4), features="all",
                      why="one record on a tiny domain: the noisy total moves by one"),)


def case_workload(spec: registry.AuditSpec) -> Matrix:
    """The small workload of a ``"one_cell"`` case: ``spec.workload`` over ``spec.cells`` cells.

    All Range (``"ranges"``), the 1-way marginal of a 2 × 2 table
    (``"marginals"``) or the prefix workload (``"prefix"``, continual counting).
    """
    if spec.workload == "marginals":
        return _workloads.marginals((2, 2), [1])
    if spec.workload == "prefix":
        return _workloads.prefix(spec.cells)
    return _workloads.all_range(spec.cells)


def _one_cell_cases(mech: registry.Mechanism, spec: registry.AuditSpec) -> tuple[AuditCase, ...]:
    """A data-independent strategy: one record in the cell of its largest column norm.

    The workload and noise are the entry's :class:`~dpexplorer.core.registry.AuditSpec`
    (All Range over ``spec.cells`` cells or a 2 × 2 table's 1-way marginal; Laplace, or
    Gaussian at δ = :data:`CASE_DELTA`).
    """
    if mech.data_dependent:
        raise ValueError(f"the 'one_cell' audit case needs a strategy; {mech.name!r} is data-dependent")
    W = case_workload(spec)
    gaussian = spec.noise == "gaussian"
    delta = CASE_DELTA if gaussian else 0.0
    noise = Gaussian(1.0, CASE_DELTA) if gaussian else Laplace(1.0)
    A = mech.strategy(W, noise, **mech.params)  # public: the pair is chosen from the strategy
    cell = int(np.argmax(np.round(A.column_norms(noise.norm), 12)))
    x0 = (0,) * W.n
    x1 = tuple(int(i == cell) for i in range(W.n))
    return (AuditCase(x0, x1, W, statistic="loss", delta=delta, why=_ONE_CELL),)


#: The kinds of standard audit case a registry entry may name
#: (:attr:`dpexplorer.core.registry.AuditSpec.case`): ``kind(mechanism, spec) -> cases``.
CASE_KINDS: dict[str, Callable[[registry.Mechanism, registry.AuditSpec], tuple[AuditCase, ...]]] = {
    "one_cell": _one_cell_cases,
    "one_record": _one_record_cases,
    "dawa": _dawa_cases,
    "mwem": _mwem_cases,
    "efpa": _efpa_cases,
}


# ===================================================================== audit
def _vector(x, name: str, counts: bool) -> np.ndarray:
    if counts:
        return validate_counts(x, name)
    arr = np.asarray(x, dtype=float)
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be a non-empty vector of finite numbers")
    return arr


def _positive_int(value, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def audit(mechanism, x0, x1, epsilon: float, delta: float = 0.0, *, W=None,
          statistic="auto", event="auto", runs: int = DEFAULT_RUNS,
          selection_runs: int | None = None, confidence: float = DEFAULT_CONFIDENCE,
          seed: int = 0, claim: float | None = None, client=None, n_jobs: int | None = None,
          params: dict | None = None, progress: bool = True,
          callback: Callable[[int, int], None] | None = None, chunk: int = DEFAULT_CHUNK,
          counts: bool = True, features: str | Callable | None = None,
          participations: tuple[int, int] | None = None) -> AuditResult:
    """Audit a mechanism's privacy claim on a neighbouring pair: a lower bound on its ε.

    Parameters
    ----------
    mechanism : str or callable
        A registered name (run with ``Laplace(epsilon)``, or
        ``Gaussian(epsilon, delta)`` when ``delta > 0``, on workload ``W``),
        or a function ``f(data, rng) -> output`` whose noisy steps all go
        through the privacy kernel (``data`` is a
        :class:`~dpexplorer.privacy.PrivateData`, ``rng`` a seeded Generator);
        with local processes it must be picklable (a module-level function).
    x0, x1 : array_like, shape (n,)
        Neighbouring data vectors: counts that differ by one record in one
        cell (add/remove-one-record, the neighbouring relation of every
        mechanism here), or by one person's records under ``participations``.
    epsilon : float
        ε the mechanism runs with (> 0); the claim unless ``claim`` is given.
    delta : float
        δ of the claim (0 for pure ε-DP; ``0 < δ < 1`` selects Gaussian noise
        for a registered mechanism, with the analytic calibration).
    W : Matrix, shape (m, n), optional
        Workload of a registered mechanism (default: all ranges over ``n``
        cells).
    statistic : str or callable
        What the events threshold: ``"auto"``, ``"projection"``,
        ``"strategy_projection"``, ``"loss"`` (the privacy loss of the run's
        noisy strategy answers ``y``, the Neyman-Pearson statistic of a
        data-independent mechanism), ``"bucket_size"``, ``"buckets"``, ``"info:<key>"`` (see
        :data:`STATISTICS`) or a function ``output -> float``.
    event : "auto", Event, or callable
        ``"auto"``: chosen on a first batch of ``selection_runs`` runs per
        data vector and then fixed (see the module docstring; with
        ``features``, by :func:`select_feature_event`).  An :class:`Event`
        on the statistic (or, with ``features``, one with a :class:`Score`),
        or a function ``output -> bool`` (the set of outputs), skips the first batch.
    runs : int
        Runs per data vector in the batch the bound is computed on.
    selection_runs : int, optional
        Runs per data vector of the first batch (default ``runs // 4``, at least 100).
    confidence : float
        Confidence ``1 − α`` of the bound, in (0, 1).  To keep a suite of
        ``K`` audits of private mechanisms under a false-alarm rate ``r``, use
        ``α ≤ r/K`` (union bound).
    seed : int
        Base seed of every run (≥ 0); recorded in the result.
    claim : float, optional
        The ε claimed for the audited output (default ``epsilon``).  Give the
        guarantee of the part the statistic reads when it has its own: e.g.
        DAWA's partition (``statistic="buckets"`` or ``"bucket_size"``) is
        ε₁-DP with ``ε₁ = ratio·ε`` (Li et al. 2014, Thm 2).
    client : dask.distributed.Client, optional
        Run the chunks on a Dask cluster.
    n_jobs : int, optional
        Local worker processes (default ``os.cpu_count()``; 1 runs inline).
    params : dict, optional
        Parameters of the registered mechanism.
    progress : bool
        Show a tqdm bar over the runs.
    callback : callable, optional
        ``callback(done, total)`` after every chunk (runs done so far, in
        both batches); raising from it stops the audit.
    chunk : int
        Runs per task (one Generator per task).
    counts : bool
        ``x0``, ``x1`` hold counts (default); ``False`` allows real weights.
    features : str or callable, optional
        A feature vector of every run (see :data:`FEATURES`: ``"boundaries"``,
        ``"estimate"``, ``"info"``, ``"all"``, ``"transcript"``; or a function
        ``output -> 1D array`` of fixed length).  The event is then chosen among thresholds
        on the statistic, on every feature, on a logistic-regression score
        (DP-Sniper, Bichsel et al. 2021) and on the likelihood-ratio score of
        the feature vector, all fitted on the first batch only.
    participations : (k, b), optional
        Audit the neighbouring relation of a stream in which one person adds
        1 to the counts of up to ``k`` steps, any two at least ``b`` apart
        (:mod:`dpexplorer.streaming.participation`): ``x1 − x0`` is then such a
        pattern (all +1 or all −1).  Only for a function ``mechanism`` (one
        that measures with :class:`dpexplorer.streaming.Participation`): a
        registered mechanism is calibrated to one cell.

    Returns
    -------
    AuditResult

    Raises
    ------
    ValueError
        If ``x0`` and ``x1`` are not neighbours (shapes differ, or they do not
        differ by exactly 1 in exactly one cell, or by a pattern of
        ``participations``), ``participations`` is not a pair of whole numbers
        >= 1 (TypeError for a non-whole number), ε, δ, the claim, the runs or
        the confidence are out of range, the statistic or the features are
        unknown or do not apply to the output, or the mechanism is unknown.
    TypeError
        If ``mechanism`` is neither a name nor a callable.
    NotApplicableError
        If the registered mechanism cannot run on ``W`` with this noise.
    RuntimeError
        If the kernel recorded, for a registered mechanism, another ε than ``epsilon``.

    References
    ----------
    Ding, Wang, Wang, Zhang, Kifer. Detecting violations of differential
    privacy. CCS 2018.  Jagielski, Ullman, Oprea. Auditing differentially
    private machine learning: how private is private SGD? NeurIPS 2020.
    Nasr, Song, Thakurta, Papernot, Carlini. Adversary instantiation: lower
    bounds for differentially private machine learning. IEEE S&P 2021.
    Clopper, Pearson. The use of confidence or fiducial limits illustrated in
    the case of the binomial. Biometrika 1934.  Bichsel, Steffen, Bogunovic,
    Vechev. DP-Sniper: black-box discovery of differential privacy
    violations using classifiers. IEEE S&P 2021.
    """
    t0 = time.perf_counter()
    x0 = _vector(x0, "x0", counts)
    x1 = _vector(x1, "x1", counts)
    if x0.shape != x1.shape:
        raise ValueError(f"x0 and x1 must have the same shape, got {x0.shape} and {x1.shape}")
    diff = (x1 - x0).ravel()
    changed = np.flatnonzero(diff)
    if participations is not None:
        _check_pattern(diff, changed, participations, mechanism)
    elif changed.size != 1 or abs(diff[changed[0]]) != 1:
        raise ValueError("x0 and x1 must be neighbours: differ by exactly one record (±1) in exactly "
                         f"one cell; they differ in {changed.size} cell(s)"
                         + (f" by {diff[changed].tolist()}" if 0 < changed.size <= 5 else ""))
    try:
        epsilon = float(epsilon)
        delta = float(delta)
    except (TypeError, ValueError):
        raise ValueError(f"epsilon and delta must be numbers, got {epsilon!r}, {delta!r}") from None
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    claim = epsilon if claim is None else claim
    if not (isinstance(claim, int | float | np.number) and math.isfinite(claim) and claim > 0):
        raise ValueError(f"the claimed ε must be a positive finite number, got {claim!r}")
    if not (isinstance(confidence, float | int) and 0 < confidence < 1):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    runs = _positive_int(runs, "runs")
    if selection_runs is None:
        selection_runs = max(100, runs // 4)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    chunk = _positive_int(chunk, "chunk")
    n_jobs = _positive_int((os.cpu_count() or 1) if n_jobs is None else n_jobs, "n_jobs")

    # ---- the statistic and the event
    given_event = None
    if isinstance(event, Event):
        given_event = event
    elif callable(event):
        statistic, given_event = event, Event(">=", 0.5)  # the indicator of the set
    elif event != "auto":
        raise ValueError(f"event must be 'auto', an Event or a function output -> bool, got {event!r}")
    if not (features is None or callable(features) or (isinstance(features, str) and features in FEATURES)):
        raise ValueError(f"unknown features {features!r}; use one of {sorted(FEATURES)}, None or a "
                         "function output -> 1D array")
    if given_event is not None and given_event.score is not None and features is None:
        raise ValueError("an event with a score applies to features: give features=... too")
    if callable(statistic):
        stat_name = getattr(statistic, "__name__", type(statistic).__name__)
        stat = _Statistic(stat_name, diff, int(changed[0]), statistic, features, x0.ravel())
    elif isinstance(statistic, str) and (statistic in STATISTICS or statistic.startswith("info:")) \
            and statistic != "info:<key>":
        stat_name = statistic
        stat = _Statistic(statistic, diff, int(changed[0]), None, features, x0.ravel())
    else:
        raise ValueError(f"unknown statistic {statistic!r}; use one of {sorted(STATISTICS)} "
                         "(info:<key> with a key of the run's info) or a function output -> float")

    # ---- what one run does
    if isinstance(mechanism, str):
        mech = registry.get(mechanism)  # KeyError with the registered names
        noise = Gaussian(epsilon, delta) if delta > 0 else Laplace(epsilon)
        if W is None:
            if x0.ndim != 1:
                raise ValueError(f"give W for data of shape {x0.shape} (the default is all ranges "
                                 "over a 1D domain)")
            W = _workloads.all_range(x0.size)
        W = as_matrix(W)
        if W.n != x0.size:
            raise ValueError(f"the workload is over {W.n} cells but the data vectors have {x0.size}")
        runner = _Runner(mech.name, None, W, noise, dict(params or {}), stat, counts)
        name = mech.name
    elif callable(mechanism):
        if params:
            raise ValueError("params apply to registered mechanisms; bind them into your function")
        runner = _Runner(getattr(mechanism, "__name__", type(mechanism).__name__), mechanism, None,
                         None, {}, stat, counts)
        name = runner.name
    else:
        raise TypeError(f"mechanism must be a registered name or a function f(data, rng), got "
                        f"{type(mechanism).__name__}")
    # one run in this process first: clear errors (not applicable, bad statistic) before any pool
    out, _, measured = runner.output(x0, np.random.default_rng(
        np.random.SeedSequence([seed, AUDIT_SEED_TAG, 99])))
    stat.row(out, measured)
    stat_name = stat.resolved(out)

    total = 2 * (runs + (0 if given_event is not None else selection_runs))
    done = [0]
    common = (seed, chunk, client, n_jobs, progress, callback, done, total, name)
    kinds: dict[str, float]
    score, kinds = math.nan, {}
    if given_event is None:
        s0, s1, _ = _batch(runner, x0, x1, selection_runs, 0, *common)
        if features is None:
            chosen, score = select_event(s0[:, 0], s1[:, 0], confidence, delta)
        else:
            # features is not None here, so its name is a str
            chosen, score, kinds = select_feature_event(s0, s1, confidence, delta,
                                                        cast(str, stat.features_name))
    else:
        chosen, selection_runs = given_event, 0
    # the event is fixed: the second, independent batch gives the bound
    r0, r1, spent = _batch(runner, x0, x1, runs, 1, *common)
    v0, v1 = chosen.values(r0), chosen.values(r1)
    if chosen.score is not None:
        stat_name = chosen.score.label
    if runner.fn is None and not math.isclose(spent, epsilon, rel_tol=1e-9, abs_tol=1e-12):
        raise RuntimeError(f"privacy accounting mismatch while auditing {name!r}: the kernel recorded "
                           f"ε = {spent!r} per run, the mechanism was run with ε = {epsilon!r}")

    k0, k1 = int(chosen.contains(v0).sum()), int(chosen.contains(v1).sum())
    level = confidence if chosen.numerator is not None else 1.0 - (1.0 - confidence) / 2
    lo0, hi0 = (float(v) for v in clopper_pearson(k0, runs, level))
    lo1, hi1 = (float(v) for v in clopper_pearson(k1, runs, level))
    if chosen.numerator == 0:
        lb = float(epsilon_lower_bound(lo0, hi1, delta))
    elif chosen.numerator == 1:
        lb = float(epsilon_lower_bound(lo1, hi0, delta))
    else:  # a given event: both orders, each at 1 − α/2 (union bound)
        lb0, lb1 = float(epsilon_lower_bound(lo0, hi1, delta)), float(epsilon_lower_bound(lo1, hi0, delta))
        chosen = Event(chosen.op, chosen.threshold, 0 if lb0 >= lb1 else 1, chosen.score)
        lb = max(lb0, lb1)
    return AuditResult(
        mechanism=name, epsilon=epsilon, delta=delta, claim=float(claim), epsilon_lb=lb,
        confidence=float(confidence), statistic=stat_name, event=chosen, k0=k0, k1=k1, runs=runs,
        selection_runs=int(selection_runs), p0=(k0 / runs, lo0, hi0), p1=(k1 / runs, lo1, hi1),
        seconds=time.perf_counter() - t0, seed=int(seed), x0=x0, x1=x1, values0=v0, values1=v1,
        selection_score=float(score), ledger_epsilon=float(spent),
        features=stat.features_name, candidates=dict(kinds))
