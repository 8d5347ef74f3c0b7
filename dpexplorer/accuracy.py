"""Accuracy first: the smallest ε whose error meets a target, and what the numbers mean.

The usual question is "what error does ε = 1 give?".  People choosing ε more
often ask the inverse: "what ε do I need so that my answers are within ±50
counts?".  For the matrix mechanism that inverse is exact, because the
analytic error of a strategy ``A`` on a workload ``W`` is the noise's standard
deviation per unit sensitivity times a number that depends on ``W`` and ``A``
only (HDMM Prop. 4; :mod:`dpexplorer.core.error`)::

    error(ε) = u(W, A) · s(ε),       s(ε) = sqrt(variance_per_unit)

with ``s = √2/ε`` for Laplace noise and ``s = c(ε, δ)`` (σ per unit L2
sensitivity) for Gaussian noise.  So the ε for a target ``t`` is the ε with
``s(ε) = t/u``: ``ε = √2·u/t`` for Laplace, and for Gaussian noise the inverse
of the calibration in use (:class:`dpexplorer.privacy.noise.Gaussian`):

* ``"zcdp"`` (what releases use): ``ρ = 1/(2c²) = u²/(2t²)`` (Bun & Steinke
  2016, Prop. 1.6), and ε is the tight conversion of that ρ at δ
  (:func:`dpexplorer.privacy.accounting.epsilon_from_rho`; Canonne, Kamath &
  Steinke 2020, Cor. 13).  Without δ the answer is ρ alone.
* ``"analytic"`` (Balle & Wang 2018, Thm 8): the root in ε of
  ``analytic_gaussian_sigma(ε, δ) = c`` (σ decreases strictly with ε), found
  by :func:`scipy.optimize.brentq` on the calibration itself.
* ``"classical"`` (Dwork & Roth 2014, Thm A.1): ``ε = sqrt(2 ln(1.25/δ))/c``,
  valid only when that ε is below 1.
* ``"eigen_design"`` (Li & Miklau 2012, Prop. 4): ``ε = sqrt(2 ln(2/δ))/c``.

The three error metrics (all in counts):

``"rmse"``
    root mean squared error per query, ``sqrt(TSE/m)`` -- what
    :func:`dpexplorer.compare` reports.
``"max"``
    the worst query's standard deviation, ``max_i sqrt(Var_i)`` -- the
    ``max_std`` of ``compare(..., objective="max")``.
``"ci95"``
    "±t counts on 95 % of queries": the ``share``-quantile over the ``m``
    queries of the half-widths of the ``level`` confidence intervals a
    release reports (:func:`dpexplorer.mechanism.confidence_half_widths`,
    with the sampler a release of counts would use,
    :func:`dpexplorer.privacy.noise_sampler`).  Precisely: ``t`` is the
    smallest number such that at least ``⌈share·m⌉`` queries have a
    ``level`` interval of half-width ``≤ t`` (the ``⌈share·m⌉``-th smallest
    half-width).  With the defaults, at least 95 % of the answers have a 95 %
    confidence interval no wider than ``±t``.

The RMSE and max metrics are the matrix mechanism's analytic error with the
continuous noise variance, as :func:`dpexplorer.compare` reports it; the
discrete samplers a release of counts uses have a slightly smaller variance,
so the ε found is enough for them too.  Every interval rule is linear in the
noise scale except the discrete Laplace's (a whole-number half-width for an
answer that is one noisy measurement, Chebyshev with the discrete variance for
sums), whose ε is found by bisection on ``log ε`` to a relative 1e-12 -- still
the exact smallest ε up to that tolerance, since every half-width is
non-increasing in ε.

Data-dependent mechanisms (DAWA, MWEM, ...) have no analytic error.  Given
benchmark data ``x`` treated as public (as in DPBench), their error at ε is
estimated over ``trials`` seeded runs (``SeedSequence([seed, trial])``, the
same seeds at every ε), and the ε is found by bisection on ``log ε`` to a
relative ``rtol``; a percentile bootstrap over the runs gives a 95 % band for
the error at every ε, and the ε where the band's ends meet the target give a
band for ε.  Results say so (``kind = "simulation"``, ``seed``, ``trials``,
``epsilon_low``/``epsilon_high``).

Everything here is public computation on ``W`` and the strategy, except the
simulations, which run the mechanisms through
:class:`dpexplorer.privacy.PrivateData` on data the caller treats as public.

The documentation topic ``accuracy`` (:func:`dpexplorer.docs.topic`) explains
the same in words.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import cast

import numpy as np
import pandas as pd
import scipy.optimize
import scipy.special

from . import mechanism as _mechanism
from .core import error, registry
from .privacy import PrivacyLedger, PrivateData, accounting, noise_sampler
from .privacy.noise import Gaussian, Laplace, NoiseModel, analytic_gaussian_sigma
from .queries.matrix import Identity, Matrix, MatrixTooLargeError, as_matrix

__all__ = ["METRICS", "CALIBRATIONS", "EpsilonForTarget", "ErrorProfile", "epsilon_for",
           "error_at", "error_profile", "epsilon_table", "noise_for_std", "describe_privacy", "accuracy_sentence",
           "quantile_over_queries", "EPSILON_GRID", "rmse_curve", "unit_error_profile",
           "svd_floor", "epsilon_grid", "error_curves", "TARGET_COLUMNS", "target_words",
           "epsilon_note", "noise_label", "rmse_profiles", "target_table", "target_points",
           "simulated_target_row", "analytic_target_row", "svd_bound_profile", "count_text"]

#: The error metrics a target can be given in (see the module docstring).
METRICS = ("rmse", "max", "ci95")

#: Gaussian calibrations that can be inverted (those of :class:`~dpexplorer.privacy.noise.Gaussian`).
CALIBRATIONS = ("zcdp", "analytic", "classical", "eigen_design")

#: ε grid of a privacy–accuracy curve (:func:`rmse_curve`): 31 points, log-spaced over
#: [0.01, 10] (ε per release).
EPSILON_GRID = np.logspace(-2, 1, 31)

#: Relative tolerance of the bisections that make a step function's ε exact.
_EXACT_RTOL = 1e-12
#: Search range of ε for the bisections (analytic), and for simulations (each step costs runs).
_EPS_RANGE = (1e-9, 1e9)
_SIM_RANGE = (1e-3, 1e3)
#: Percentile-bootstrap resamples of the simulation bands.
_BOOTSTRAP = 200
#: Cells (resamples × queries) of the ci95 bootstrap's working arrays at a time (memory bound).
_BOOTSTRAP_CELLS = 4_000_000


# ====================================================================== helpers
def quantile_over_queries(values, share: float = 0.95, axis: int | None = None):
    """The smallest ``t`` such that at least ``⌈share·m⌉`` of the ``m`` values are ``≤ t``.

    The ``⌈share·m⌉``-th smallest value (the empirical quantile by inverting
    the CDF, ``numpy.quantile(..., method="inverted_cdf")``): "95 % of the
    queries have a half-width of at most ``t``" holds for it and for no
    smaller ``t``.

    Parameters
    ----------
    values : array_like, shape (m,), or any shape with ``axis``
    share : float
        In (0, 1].
    axis : int, optional
        None (default): over all values, returned as a float.  An axis: over
        that axis (``m`` = its length), one quantile per row, as an array of
        the other axes' shape (e.g. ``(resamples, m)`` with ``axis=1`` gives
        ``(resamples,)``).

    Raises
    ------
    ValueError
        For an empty array (or axis) or ``share`` outside (0, 1].
    """
    share = _share(share)
    a = np.asarray(values, dtype=float)
    if axis is None:
        a, along = a.ravel(), 0
    else:
        along = axis
    m = a.shape[along]
    if m == 0:
        raise ValueError("no values to take a quantile of")
    k = max(1, math.ceil(round(share * m, 9)))
    q = np.take(np.partition(a, k - 1, axis=along), k - 1, axis=along)
    return float(q) if axis is None else q


def _checked(value, name: str, ok, allowed: str) -> float:
    """``value`` as a finite float satisfying ``ok``, else a ValueError saying what is allowed."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {allowed}, got {value!r}") from None
    if not (math.isfinite(v) and ok(v)):
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return v


def _share(share) -> float:
    return _checked(share, "share (the fraction of queries)", lambda s: 0.0 < s <= 1.0,
                    "a number in (0, 1]")


def _level(level) -> float:
    return _checked(level, "the confidence level", lambda v: 2.0 / 3.0 < v < 1.0,
                    "a number in (2/3, 1)")


def _target(target) -> float:
    return _checked(target, "target", lambda t: t > 0, "a positive finite number of counts")


def _metric(metric) -> str:
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    return metric


# ================================================================ noise families
@dataclass(frozen=True)
class _Family:
    """A noise family without its ε: Laplace, or Gaussian with δ (or none: zCDP ρ) and a calibration."""

    kind: str
    delta: float | None = None
    calibration: str | None = None

    @property
    def norm(self) -> int:
        return 1 if self.kind == "laplace" else 2

    @property
    def label(self) -> str:
        if self.kind == "laplace":
            return "Laplace"
        d = "ρ only" if self.delta is None else f"δ={self.delta:g}"
        return f"Gaussian({d}, {self.calibration})"

    def noise(self, epsilon: float) -> NoiseModel:
        if self.kind == "laplace":
            return Laplace(epsilon)
        # δ is None for a ρ-only (zCDP) family, which Gaussian refuses with its own ValueError
        return Gaussian(epsilon, self.delta, self.calibration)  # type: ignore[arg-type]

    def reference(self) -> NoiseModel:
        """Some noise model of the family (the unit errors do not depend on which)."""
        if self.kind == "laplace":
            return Laplace(1.0)
        return Gaussian(1.0, 1e-6 if self.delta is None else self.delta, "analytic")

    def std(self, epsilon: float) -> float:
        """Noise standard deviation per unit sensitivity at ε: ``√2/ε`` or ``c(ε, δ)``."""
        return self.noise(epsilon).std_per_unit


def _family(noise, delta, calibration) -> _Family:
    """Normalise the ``noise``/``delta``/``calibration`` arguments of the public functions."""
    if isinstance(noise, NoiseModel):
        if delta is not None or calibration is not None:
            raise ValueError("give δ and the calibration either in the noise model or as "
                             "delta=/calibration=, not both")
        if isinstance(noise, Laplace):
            return _Family("laplace")
        if isinstance(noise, Gaussian):
            return _Family("gaussian", noise.delta, noise.calibration)
        raise TypeError(f"no ε inversion for {type(noise).__name__} noise")
    if noise is None:
        noise = "laplace" if delta is None else "gaussian"
    if noise not in ("laplace", "gaussian"):
        raise ValueError(f"noise must be 'laplace', 'gaussian' or a noise model, got {noise!r}")
    if noise == "laplace":
        if delta is not None:
            raise ValueError("the Laplace mechanism is pure ε-DP: do not pass delta")
        if calibration is not None:
            raise ValueError("a calibration applies to Gaussian noise only")
        return _Family("laplace")
    calibration = "zcdp" if calibration is None else calibration
    if calibration not in CALIBRATIONS:
        raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    if delta is None:
        if calibration != "zcdp":
            raise ValueError(f"the {calibration!r} calibration needs δ; without δ only the zCDP "
                             "ρ can be given (calibration='zcdp')")
        return _Family("gaussian", None, "zcdp")
    return _Family("gaussian", accounting._delta(delta), calibration)


@dataclass(frozen=True)
class _Solved:
    epsilon: float
    rho: float
    method: str
    note: str = ""


def _sigma_zero(delta: float) -> float:
    """``σ`` of the analytic calibration as ε → 0: ``2Φ(1/(2σ)) − 1 = δ`` (Balle & Wang 2018, Thm 8 at ε = 0)."""
    return 1.0 / (2.0 * scipy.special.ndtri(0.5 + 0.5 * delta))


def _solve_std(fam: _Family, std: float) -> _Solved:
    """The smallest ε of the family whose noise std per unit sensitivity is at most ``std``."""
    if fam.kind == "laplace":
        eps = math.sqrt(2.0) / std  # s = √2/ε (Laplace: variance 2b², b = Δ₁/ε)
        return _Solved(_guard(fam, eps, std), 0.5 * eps * eps, "closed form: ε = √2·u/t")
    rho = 0.5 / (std * std)  # ρ = Δ₂²/(2σ²) with σ = Δ₂·c (Bun & Steinke 2016, Prop. 1.6)
    if fam.delta is None:
        return _Solved(math.nan, rho, "closed form: ρ = u²/(2t²)",
                       "no δ given: the zCDP cost ρ is the answer (pass delta for ε)")
    d = fam.delta
    if fam.calibration == "zcdp":
        eps = accounting.epsilon_from_rho(rho, d)
        return _Solved(_guard(fam, eps, std), rho,
                       "closed form: ρ = u²/(2t²), ε = tight zCDP conversion of ρ at δ")
    if fam.calibration == "classical":
        eps = math.sqrt(2.0 * math.log(1.25 / d)) / std
        if eps >= 1.0:
            return _Solved(math.nan, rho, "closed form: ε = sqrt(2 ln(1.25/δ))·u/t",
                           f"the target needs ε = {eps:.4g}, but the classical calibration holds "
                           "only for ε < 1: use the 'analytic' or 'zcdp' calibration")
        return _Solved(_guard(fam, eps, std), rho, "closed form: ε = sqrt(2 ln(1.25/δ))·u/t")
    if fam.calibration == "eigen_design":
        eps = math.sqrt(2.0 * math.log(2.0 / d)) / std
        return _Solved(_guard(fam, eps, std), rho, "closed form: ε = sqrt(2 ln(2/δ))·u/t")
    # analytic Gaussian: σ(ε, δ) decreases strictly from σ(0⁺, δ) = _sigma_zero(δ) to 0
    method = "root in ε of the analytic calibration σ(ε, δ) = t/u (brentq)"
    if std >= _sigma_zero(d):
        return _Solved(0.0, rho, method, "any ε > 0 meets the target: δ alone already allows "
                       "less noise than the target tolerates")
    lo, hi = _EPS_RANGE

    def f(log_eps: float) -> float:
        return math.log(analytic_gaussian_sigma(math.exp(log_eps), d)) - math.log(std)

    if f(math.log(lo)) <= 0:
        return _Solved(0.0, rho, method, f"any ε ≥ {lo:g} meets the target")
    if f(math.log(hi)) > 0:
        return _Solved(math.nan, rho, method, f"the target needs ε above {hi:g}")
    le = scipy.optimize.brentq(f, math.log(lo), math.log(hi), xtol=1e-14, rtol=1e-15)
    return _Solved(_guard(fam, math.exp(le), std), rho, method)


def _guard(fam: _Family, eps: float, std: float, ok=None) -> float:
    """Nudge ``eps`` up by solver round-off until its noise std is at most ``std`` (or ``ok(eps)``).

    Steps of one unit in the last place, doubling: the ε returned is within twice the
    round-off of the smallest one that meets the target (Laplace's ``√2/std``, one rounding
    away, comes back within a few ulps, not the 1e-12 of a fixed relative step).
    """
    ok = (lambda e: fam.std(e) <= std) if ok is None else ok
    step = math.ulp(eps)
    for _ in range(64):
        if ok(eps):
            return eps
        eps += step
        step *= 2.0
    return eps  # pragma: no cover - 2**64 ulps: far beyond any solver's round-off


def noise_for_std(std: float, noise=None, delta: float | None = None,
                  calibration: str | None = None) -> tuple[float, float]:
    """The smallest ε (and its ρ) whose noise std per unit sensitivity is at most ``std``.

    The inverse of ``noise.std_per_unit`` as a function of ε, for Laplace
    (``√2/ε``) and every Gaussian calibration (see the module docstring).

    Parameters
    ----------
    std : float
        Noise standard deviation per unit sensitivity (Laplace: ``√2·b``
        with ``b`` per unit Δ₁; Gaussian: ``c = σ/Δ₂``).
    noise, delta, calibration
        The family, as for :func:`epsilon_for`.

    Returns
    -------
    epsilon : float
        NaN for a zCDP Gaussian without δ (then ρ is the answer) or a classical
        calibration that would need ε ≥ 1; 0 when any ε > 0 meets it.
    rho : float
        The zCDP cost of that noise (``ε²/2`` for Laplace, ``1/(2c²)`` for Gaussian).

    Raises
    ------
    ValueError
        For a non-positive ``std`` or an invalid family.
    """
    s = _target(std)
    solved = _solve_std(_family(noise, delta, calibration), s)
    return solved.epsilon, solved.rho


# ===================================================================== profiles
class _Linear:
    """Error = ``u · s(ε)``: every metric of a data-independent mechanism but discrete-Laplace intervals."""

    exact = True

    def __init__(self, unit: float, sampler: str | None = None):
        self.unit = float(unit)
        self.sampler = sampler

    def error(self, fam: _Family, epsilon: float) -> float:
        return self.unit * fam.std(epsilon)


class _DiscreteLaplaceIntervals:
    """``ci95`` of a release measured with the discrete Laplace: a non-linear, non-increasing step function.

    From :func:`~dpexplorer.mechanism.confidence_half_widths` at ε = 1 (its
    two rules, Chebyshev with the discrete variance for sums of noisy
    measurements and the whole-number half-width ``|c|·k(b)`` for answers
    that are one noisy measurement), every half-width at another ε follows:
    Chebyshev half-widths scale with the discrete Laplace's standard
    deviation at ``b = Δ₁/ε``, single-measurement ones with ``k(b)``, which is
    read off the same rule on one cell.
    """

    exact = True
    sampler = "discrete"

    def __init__(self, W: Matrix, A: Matrix, level: float, share: float):
        self.level, self.share = level, share
        self.sens = A.sensitivity(1)
        ref = Laplace(1.0)
        h_disc, method = _mechanism.confidence_half_widths(W, A, ref, "discrete", level)
        self.single = method == "discrete_laplace_single"
        self.cheb = h_disc[~self.single]
        self.ref_var = ref.discrete_variance(self.sens)
        if self.single.any():
            h_cont, _ = _mechanism.confidence_half_widths(W, A, ref, "continuous", level)
            # continuous single rule: h = |c|·b·ln(1/α), b = Δ₁ at ε = 1
            self.coef = h_cont[self.single] / (self.sens * math.log(1.0 / (1.0 - level)))
        else:
            self.coef = np.zeros(0)

    def _k(self, b: float) -> float:
        """Whole-number half-width of ONE discrete Laplace variable of scale ``b`` (the release's rule)."""
        one = Identity(1)
        h, _ = _mechanism.confidence_half_widths(one, one, Laplace(1.0 / b), "discrete", self.level)
        return float(h[0])

    def half_widths(self, epsilon: float) -> np.ndarray:
        noise = Laplace(epsilon)
        out = np.empty(self.single.size)
        out[~self.single] = self.cheb * math.sqrt(noise.discrete_variance(self.sens) / self.ref_var)
        if self.coef.size:
            out[self.single] = self.coef * self._k(noise.scale(self.sens))
        return out

    def error(self, fam: _Family, epsilon: float) -> float:
        return quantile_over_queries(self.half_widths(epsilon), self.share)


def _strategy(W: Matrix, mechanism, fam: _Family, params, cache):
    """``(A, name, label)`` for a registry name or a strategy matrix (``A`` None: data-dependent)."""
    if isinstance(mechanism, str):
        mech = registry.get(mechanism)
        if mech.data_dependent:
            return None, mechanism, mech.label
        ref = fam.reference()
        if cache is not None:
            A, _, _, note = cache.entry(W, mechanism, ref, params or {})
            if A is None:
                raise registry.NotApplicableError(note)
        else:
            A = mech.strategy(W, ref, **(params or {}))
        return A, mechanism, mech.label
    A = as_matrix(mechanism)
    return A, A.name, A.name


def _profile(W: Matrix, A: Matrix, fam: _Family, metric: str, level: float, share: float,
             counts: bool):
    """The error of strategy ``A`` on ``W`` as a function of ε."""
    ref = fam.reference()
    s_ref = ref.std_per_unit
    if metric == "rmse":
        return _Linear(math.sqrt(error.unit_tse(W, A, fam.norm) / W.m))
    if metric == "max":
        var = error.per_query_variance(W, A, ref)
        return _Linear(math.sqrt(float(np.max(var))) / s_ref)
    sampler = noise_sampler(A, ref, counts)
    if fam.kind == "laplace" and sampler == "discrete":
        return _DiscreteLaplaceIntervals(W, A, level, share)
    h, _ = _mechanism.confidence_half_widths(W, A, ref, sampler, level)
    return _Linear(quantile_over_queries(h, share) / s_ref, sampler)


# ================================================================== simulations
class _Simulated:
    """Empirical error of a data-dependent mechanism at ε over seeded runs, with a bootstrap band."""

    exact = False
    sampler = None

    def __init__(self, W: Matrix, name: str, x, metric: str, level: float, share: float,
                 trials: int, seed: int, counts: bool, params,
                 callback: Callable[[int], None] | None = None):
        self.W, self.name, self.metric = W, name, metric
        self.callback, self.done = callback, 0
        self.level, self.share, self.trials, self.seed = level, share, trials, seed
        self.counts, self.params = counts, dict(params or {})
        self.x = x
        self.truth = W.matvec(np.asarray(x, dtype=float).ravel())
        self._cache: dict[float, tuple[float, float, float]] = {}
        boot = np.random.default_rng(np.random.SeedSequence([seed, 2**31 - 1]))
        # multiplicities of the runs in each bootstrap resample, the same at every ε
        self.weights = boot.multinomial(trials, np.full(trials, 1.0 / trials), size=_BOOTSTRAP)

    def runs(self, fam: _Family, epsilon: float) -> np.ndarray:
        """Errors ``W x̂ − W x`` of every run, shape ``(trials, m)`` (counts)."""
        noise = fam.noise(epsilon)
        out = np.empty((self.trials, self.W.m))
        for t in range(self.trials):
            if self.callback is not None:  # before each run: a callback that raises stops here
                self.callback(self.done)
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, t]))
            data = PrivateData(self.x, PrivacyLedger(), counts=self.counts)
            est = _mechanism.run(self.name, data, self.W, noise, rng, **self.params)
            answers = self.W.matvec(est.x_hat) if est.answers is None else est.answers
            out[t] = answers - self.truth
            self.done += 1
        return out

    def _stat(self, E: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """The metric of the runs (weights: bootstrap multiplicities, shape (B, trials))."""
        w = np.ones((1, self.trials)) if weights is None else weights
        if self.metric == "rmse":
            mse = np.mean(E * E, axis=1)                        # per run
            return np.sqrt(w @ mse / self.trials)
        if self.metric == "max":
            return np.sqrt(np.max(w @ (E * E) / self.trials, axis=1))
        # ci95: per query the level-quantile over runs of |error|, then the share-quantile over
        # queries.  A resample's k-th smallest |error| of a query (runs weighted by their
        # multiplicities) is its g-th largest, g = trials − k + 1: walk each query's sorted runs
        # from the top, adding the weights, until g is reached -- a few steps at level 0.95,
        # where a cumulative sum from the bottom takes all of them (5× faster on 33,152
        # queries, 20 runs, 200 resamples)
        a = np.abs(E)
        trials, m = a.shape
        order = np.argsort(a, axis=0)
        sorted_a = np.take_along_axis(a, order, axis=0)
        k = max(1, math.ceil(round(self.level * trials, 9)))
        g = trials - k + 1
        counts = w.astype(np.min_scalar_type(trials))             # every partial sum ≤ trials
        out = np.empty(w.shape[0])
        step = max(1, _BOOTSTRAP_CELLS // m)
        for s in range(0, w.shape[0], step):
            if self.callback is not None:  # a callback that raises stops here too
                self.callback(self.done)
            wb = counts[s:s + step]
            above = np.zeros((wb.shape[0], m), dtype=counts.dtype)  # weight of the runs above
            first = np.zeros((wb.shape[0], m), dtype=np.intp)
            todo = np.ones((wb.shape[0], m), dtype=bool)
            for i in range(trials - 1, -1, -1):
                above += wb[:, order[i]]
                hit = todo & (above >= g)
                first[hit] = i
                todo &= ~hit
                if not todo.any():
                    break
            q = sorted_a[first, np.arange(m)]                      # (resamples, m)
            out[s:s + step] = quantile_over_queries(q, self.share, axis=1)
        return out

    def evaluate(self, fam: _Family, epsilon: float) -> tuple[float, float, float]:
        """``(estimate, band_low, band_high)`` of the metric at ε (counts)."""
        key = float(epsilon)
        if key not in self._cache:
            E = self.runs(fam, key)
            est = float(self._stat(E)[0])
            boot = self._stat(E, self.weights)
            lo, hi = np.quantile(boot, [0.025, 0.975])
            self._cache[key] = (est, float(min(lo, est)), float(max(hi, est)))
        return self._cache[key]

    def error(self, fam: _Family, epsilon: float) -> float:
        return self.evaluate(fam, epsilon)[0]


# ================================================================== bisections
def _bisect(ok, lo: float, hi: float, rtol: float) -> float:
    """Smallest ε in ``(lo, hi]`` with ``ok(ε)`` to a relative ``rtol`` (``ok(lo)`` false, ``ok(hi)`` true)."""
    while hi > lo * (1.0 + rtol):
        mid = math.sqrt(lo * hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _bracket(ok, start: float, factor: float = 4.0, limits=_EPS_RANGE) -> tuple[float, float] | None:
    """``(lo, hi)`` with ``ok(lo)`` false and ``ok(hi)`` true, by expanding from ``start``; None if none.

    ``(0, limits[0])`` when even the smallest ε searched meets the target.
    """
    lo_lim, hi_lim = limits
    if ok(start):
        hi = start
        while True:
            lo = hi / factor
            if lo < lo_lim:
                return (0.0, lo_lim) if ok(lo_lim) else None
            if not ok(lo):
                return lo, hi
            hi = lo
    lo = start
    while True:
        hi = lo * factor
        if hi > hi_lim:
            return None
        if ok(hi):
            return lo, hi
        lo = hi


# ====================================================================== results
@dataclass(frozen=True)
class EpsilonForTarget:
    """The smallest ε whose error meets a target, for one mechanism.

    Attributes
    ----------
    mechanism, label : str
        Registry name (or the strategy's name) and display name.
    metric : {"rmse", "max", "ci95"}
    target : float
        The error asked for, in counts.
    epsilon : float
        The smallest ε per release meeting the target; NaN if none can (not
        applicable, out of range, or a zCDP Gaussian without δ, whose answer
        is ``rho``); 0 when any ε > 0 does.
    delta : float
        δ of the noise (0 for Laplace; NaN for a zCDP Gaussian without δ).
    rho : float
        zCDP cost ρ of the noise at that ε (Laplace: ``ε²/2``; Gaussian:
        ``1/(2c²)``); for a zCDP Gaussian the exact answer even without δ.
    error : float
        The metric at ``epsilon`` (≤ ``target``; for a simulation, the
        estimate over the runs).
    noise : NoiseModel or None
        The noise model at ``epsilon`` (ready for ``dpx.release``).
    kind : {"analytic", "simulation"}
    method : str
        How ε was found (closed form, root of the calibration, bisection).
    exact : bool
        Whether ε is exact (to solver precision, 1e-12 relative) rather than
        estimated by simulation.
    sampler : str or None
        For ``ci95``: the sampler whose interval rules were used.
    level, share : float
        For ``ci95``: the confidence level of each interval and the fraction
        of queries whose half-width is at most the target.
    seed, trials : int or None
        For a simulation: base seed (runs seeded ``SeedSequence([seed, run])``)
        and number of runs per ε.
    rtol : float or None
        For a simulation: relative precision of the bisection on ε.
    epsilon_low, epsilon_high : float
        For a simulation: the ε at which the 95 % bootstrap band of the error
        meets the target (its upper end gives ``epsilon_high``); equal to
        ``epsilon`` for exact results.
    note : str
        Why ε is NaN or 0, or what else to know.
    """

    mechanism: str
    label: str
    metric: str
    target: float
    epsilon: float
    delta: float
    rho: float
    error: float
    noise: NoiseModel | None
    kind: str
    method: str
    exact: bool
    sampler: str | None = None
    level: float | None = None
    share: float | None = None
    seed: int | None = None
    trials: int | None = None
    rtol: float | None = None
    epsilon_low: float = math.nan
    epsilon_high: float = math.nan
    note: str = ""

    def to_dict(self) -> dict:
        """The fields as a dict (``noise`` as its label)."""
        d = asdict(self)
        d["noise"] = None if self.noise is None else self.noise.label
        return d

    def __str__(self) -> str:
        what = {"rmse": "RMSE", "max": "worst query's std", "ci95": "interval half-width"}[self.metric]
        if math.isnan(self.epsilon):
            head = (f"ρ = {self.rho:.4g}" if not math.isnan(self.rho) and math.isnan(self.delta)
                    else "no ε")
        else:
            head = f"ε = {self.epsilon:.4g}"
        band = ""
        if self.kind == "simulation" and not math.isnan(self.epsilon_low):
            band = (f" (95 % band {self.epsilon_low:.3g}–{self.epsilon_high:.3g}, simulation, "
                    f"{self.trials} runs, seed {self.seed})")
        tail = f"; {self.note}" if self.note else ""
        return f"{self.label}: {head} for {what} ≤ {self.target:g} counts{band}{tail}"


def _not_applicable(name, label, metric, t, fam, kind, note, **extra) -> EpsilonForTarget:
    return EpsilonForTarget(name, label, metric, t, math.nan, _delta_of(fam), math.nan, math.nan,
                            None, kind, "", kind == "analytic", note=note, **extra)


def _delta_of(fam: _Family) -> float:
    if fam.kind == "laplace":
        return 0.0
    return math.nan if fam.delta is None else fam.delta


# ================================================================== public API
def epsilon_for(W, mechanism, target, metric: str = "rmse", delta: float | None = None, *,
                noise=None, calibration: str | None = None, level: float = 0.95,
                share: float = 0.95, counts: bool = True, x=None, trials: int = 20,
                seed: int = 0, rtol: float = 0.02, params: dict | None = None,
                cache=None, callback: Callable[[int], None] | None = None) -> EpsilonForTarget:
    """The smallest ε whose error for workload ``W`` with ``mechanism`` meets ``target``.

    Exact for data-independent mechanisms (closed-form inversion of the
    error's dependence on the noise scale, see the module docstring); from a
    seeded simulation with a confidence band for data-dependent ones.

    Parameters
    ----------
    W : Matrix or array, shape (m, n)
        The workload.
    mechanism : str or Matrix
        A registry name, or a strategy ``A: (p, n)``.
    target : float
        The error to meet, in counts (> 0).
    metric : {"rmse", "max", "ci95"}
        RMSE per query, the worst query's std, or the ``share``-quantile over
        queries of the ``level`` confidence half-widths ("±t on 95 % of
        queries").
    delta : float, optional
        δ of Gaussian noise; giving it selects Gaussian noise.
    noise : {"laplace", "gaussian"} or NoiseModel, optional
        The noise family: default Laplace (or Gaussian when ``delta`` is
        given); ``"gaussian"`` without δ returns the zCDP ρ only; a noise
        model is used for its family, δ and calibration (its ε is ignored).
    calibration : {"zcdp", "analytic", "classical", "eigen_design"}, optional
        Gaussian calibration; default ``"zcdp"``, the one releases use.
    level : float
        Confidence level of each interval for ``ci95`` (in (2/3, 1)).
    share : float
        Fraction of queries for ``ci95`` (in (0, 1]).
    counts : bool
        Whether the data are counts (a release then measures whole-number
        strategies with the discrete samplers, whose interval rules ``ci95``
        uses), as in :func:`dpexplorer.release`.
    x : array_like, shape (n,) or the domain shape, optional
        Benchmark data for a data-dependent mechanism (treated as public).
    trials, seed, rtol
        Simulation: runs per ε, base seed, relative precision of ε.
    params : dict, optional
        The mechanism's parameters.
    cache : StrategyCache, optional
        Reuse strategies (e.g. the app's session cache).
    callback : callable, optional
        Simulation only: ``callback(runs_done)`` before each seeded run of
        the mechanism and before each block of a ``ci95`` bootstrap
        (``runs_done`` counts the runs of every ε searched so far).  An
        exception it raises stops the simulation within one run (or block)
        and propagates: that is how a caller cancels (the explorer's Cancel
        button).  Not called for data-independent mechanisms.

    Returns
    -------
    EpsilonForTarget

    Raises
    ------
    ValueError
        For a bad target, metric, family, level or share; a data-dependent
        mechanism without ``x`` or with too few ``trials`` for ``ci95``
        (``⌈1/(1 − level)⌉``); ``x`` not matching ``W``.
    KeyError
        For an unknown mechanism.
    NotApplicableError, UnsupportedWorkloadError
        If the strategy cannot be built for ``W`` or does not support it.
    """
    W = as_matrix(W)
    t, metric = _target(target), _metric(metric)
    level, share = _level(level), _share(share)
    fam = _family(noise, delta, calibration)
    A, name, label = _strategy(W, mechanism, fam, params, cache)
    if A is None:
        return _simulated(W, name, label, t, metric, fam, level, share, counts, x, trials, seed,
                          rtol, params, callback)
    return ErrorProfile(name, label, metric, level, share, fam.kind,
                        _profile(W, A, fam, metric, level, share, counts))._solve(t, fam)


class ErrorProfile:
    """The error of one data-independent mechanism on ``W`` as a function of the noise's ε.

    What :func:`epsilon_for` solves, kept so that many targets (or many ε)
    cost only arithmetic: the strategy, its per-query variances and interval
    half-widths are computed once by :func:`error_profile`.  Every metric is
    ``u · s(ε)`` (``s`` the noise std per unit sensitivity; HDMM Prop. 4)
    except the intervals of a discrete-Laplace release, a step function of ε
    (see the module docstring).  The profile depends on the noise family
    (Laplace or Gaussian) but not on δ or the Gaussian calibration, which are
    given at each call.

    Attributes
    ----------
    mechanism, label : str
    metric : {"rmse", "max", "ci95"}
    level, share : float
        For ``ci95`` (see :func:`epsilon_for`).
    family : {"laplace", "gaussian"}
    """

    def __init__(self, mechanism, label, metric, level, share, family, prof):
        self.mechanism, self.label, self.metric = mechanism, label, metric
        self.level, self.share, self.family = level, share, family
        self._prof = prof

    def _fam(self, noise, delta=None, calibration=None) -> _Family:
        fam = _family(noise, delta, calibration)
        if fam.kind != self.family:
            raise ValueError(f"this profile is for {self.family} noise, got {fam.label}")
        return fam

    def error(self, noise: NoiseModel) -> float:
        """The metric (counts) at the noise model ``noise`` (of the profile's family)."""
        if not isinstance(noise, NoiseModel):
            raise TypeError(f"noise must be dpx.Laplace(ε) or dpx.Gaussian(ε, δ), got {noise!r}")
        return float(self._prof.error(self._fam(noise), noise.epsilon))

    def epsilon_for(self, target, noise=None, delta: float | None = None,
                    calibration: str | None = None) -> EpsilonForTarget:
        """The smallest ε meeting ``target`` (counts), as :func:`epsilon_for`.

        ``noise``, ``delta``, ``calibration`` give the family as for
        :func:`epsilon_for` (a noise model's ε is ignored); it must be the
        profile's family.

        Raises
        ------
        ValueError
            For a bad target, or noise of another family.
        """
        return self._solve(_target(target), self._fam(noise, delta, calibration))

    def _solve(self, t: float, fam: _Family) -> EpsilonForTarget:
        return _solve(self._prof, fam, self.mechanism, self.label, t, self.metric, self.level,
                      self.share)


def error_profile(W, mechanism, noise, metric: str = "rmse", *, level: float = 0.95,
                  share: float = 0.95, counts: bool = True, params: dict | None = None,
                  cache=None) -> ErrorProfile:
    """The :class:`ErrorProfile` of a data-independent ``mechanism`` on ``W`` for ``noise``'s family.

    Parameters
    ----------
    W : Matrix or array, shape (m, n)
    mechanism : str or Matrix
        A registry name (data-independent) or a strategy ``A: (p, n)``.
    noise : {"laplace", "gaussian"} or NoiseModel
        The family (a noise model's ε, δ and calibration do not matter).
    metric, level, share, counts, params, cache
        As for :func:`epsilon_for`.

    Raises
    ------
    ValueError
        For a data-dependent mechanism (its error has no profile: use
        :func:`epsilon_for` with benchmark data), a bad metric, level or share.
    KeyError, NotApplicableError, UnsupportedWorkloadError
        As :func:`epsilon_for`.
    """
    metric, level, share = _metric(metric), _level(level), _share(share)
    fam = _family(noise, None, None)
    W = as_matrix(W)
    A, name, label = _strategy(W, mechanism, fam, params, cache)
    if A is None:
        raise ValueError(f"{label} adapts to the data: its error has no formula, only a "
                         "simulation on data")
    return ErrorProfile(name, label, metric, level, share, fam.kind,
                        _profile(W, A, fam, metric, level, share, counts))


def _solve(prof, fam: _Family, name, label, t, metric, level, share) -> EpsilonForTarget:
    """ε of an analytic profile."""
    ci = dict(sampler=prof.sampler, level=level, share=share) if metric == "ci95" else {}
    if isinstance(prof, _Linear):
        if prof.unit == 0.0:
            return EpsilonForTarget(name, label, metric, t, 0.0, _delta_of(fam), 0.0, 0.0, None,
                                    "analytic", "closed form", True,
                                    note="the error is 0 at every ε (no noise reaches the answers)",
                                    **ci)
        solved = _solve_std(fam, t / prof.unit)
    else:  # discrete Laplace intervals: bisection on log ε of a non-increasing step function
        def ok(e: float) -> bool:
            return prof.error(fam, e) <= t

        start = math.sqrt(2.0) * prof.error(fam, 1.0) / t  # the ε if it were linear in 1/ε
        found = _bracket(ok, start)
        if found is None:
            return _not_applicable(name, label, metric, t, fam, "analytic",
                                   f"no ε in [{_EPS_RANGE[0]:g}, {_EPS_RANGE[1]:g}] meets the "
                                   "target", **ci)
        eps = _bisect(ok, *found, _EXACT_RTOL) if found[0] > 0 else found[1]
        solved = _Solved(eps, 0.5 * eps * eps, "bisection on log ε (discrete Laplace intervals "
                         "are a step function of ε), relative 1e-12")
    eps = solved.epsilon
    err, model = math.nan, None
    if eps > 0 and math.isfinite(eps):
        eps = _guard(fam, eps, math.nan, lambda e: prof.error(fam, e) <= t)  # round-off of u·t/u
        model = fam.noise(eps)
        err = prof.error(fam, eps)
    elif fam.kind == "gaussian" and fam.delta is None:
        err = prof.unit / math.sqrt(2.0 * solved.rho)  # zCDP Gaussian of that ρ: c = 1/sqrt(2ρ)
    return EpsilonForTarget(name, label, metric, t, eps, _delta_of(fam), solved.rho, err, model,
                            "analytic", solved.method, True, epsilon_low=eps, epsilon_high=eps,
                            note=solved.note, **ci)


def _simulated(W, name, label, t, metric, fam, level, share, counts, x, trials, seed, rtol,
               params, callback=None) -> EpsilonForTarget:
    """ε of a data-dependent mechanism from seeded runs on benchmark data."""
    if x is None:
        raise ValueError(f"{name!r} is data-dependent: its error depends on the data; pass x= "
                         "(benchmark data treated as public) for a seeded simulation")
    x = np.asarray(x, dtype=float)
    if x.size != W.n:
        raise ValueError(f"x has {x.size} cells but the workload is over {W.n}")
    if isinstance(trials, bool) or not isinstance(trials, int | np.integer) or trials < 2:
        raise ValueError(f"trials must be an integer ≥ 2 (the band needs several runs), got {trials!r}")
    need = math.ceil(round(1.0 / (1.0 - level), 9))
    if metric == "ci95" and trials < need:
        raise ValueError(f"ci95 at level {level:g} needs at least {need} runs per ε (each query's "
                         f"{level:.0%} error quantile is an order statistic of the runs), got {trials}")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if not (isinstance(rtol, float | int) and 0 < rtol < 1):
        raise ValueError(f"rtol must be in (0, 1), got {rtol!r}")
    if fam.kind == "gaussian" and fam.delta is None:
        raise ValueError(f"simulating {name!r} needs a complete noise model: pass delta")
    sim = _Simulated(W, name, x, metric, level, share, int(trials), int(seed), counts, params,
                     callback)
    extra = dict(seed=int(seed), trials=int(trials), rtol=float(rtol),
                 **(dict(level=level, share=share) if metric == "ci95" else {}))
    method = (f"bisection on log ε of the simulated error ({trials} seeded runs per ε), "
              f"relative {rtol:g}; band: 95 % percentile bootstrap over the runs")
    points: dict[str, float] = {}
    try:
        for which, col in (("estimate", 0), ("low", 1), ("high", 2)):
            def ok(e: float, c: int = col) -> bool:
                return sim.evaluate(fam, e)[c] <= t

            found = _bracket(ok, points.get("estimate", 1.0), 2.0, _SIM_RANGE)
            if found is None:
                if which == "estimate":
                    return _not_applicable(
                        name, label, metric, t, fam, "simulation",
                        f"the simulated error does not meet the target for any ε in "
                        f"[{_SIM_RANGE[0]:g}, {_SIM_RANGE[1]:g}] (a data-dependent approximation "
                        f"can have an error that more ε does not remove)", **extra)
                points[which] = math.nan
                continue
            points[which] = _bisect(ok, *found, rtol) if found[0] > 0 else found[1]
    except registry.NotApplicableError as exc:
        return _not_applicable(name, label, metric, t, fam, "simulation", str(exc), **extra)
    eps = points["estimate"]
    model = fam.noise(eps)
    # where the band's upper end meets the target is the larger ε, its lower end the smaller
    return EpsilonForTarget(name, label, metric, t, eps, _delta_of(fam), model.rho_per_unit,
                            sim.error(fam, eps), model, "simulation", method, False,
                            epsilon_low=points["low"], epsilon_high=points["high"],
                            note="simulation on data treated as public; not a release", **extra)


def _at_noise(W, mechanism, noise, params, cache):
    """``(W, family, A, name, label)`` for the functions that take a noise model at some ε."""
    if not isinstance(noise, NoiseModel):
        raise TypeError(f"noise must be dpx.Laplace(ε) or dpx.Gaussian(ε, δ), got {noise!r}")
    W = as_matrix(W)
    fam = _family(noise, None, None)
    return (W, fam, *_strategy(W, mechanism, fam, params, cache))


def error_at(W, mechanism, noise: NoiseModel, metric: str = "rmse", *, level: float = 0.95,
             share: float = 0.95, counts: bool = True, x=None, trials: int = 20, seed: int = 0,
             params: dict | None = None, cache=None) -> float:
    """The error metric of ``mechanism`` on ``W`` at a noise model (the forward of :func:`epsilon_for`).

    Parameters
    ----------
    W, mechanism, metric, level, share, counts, x, trials, seed, params, cache
        As for :func:`epsilon_for`.
    noise : NoiseModel
        ``Laplace(ε)`` or ``Gaussian(ε, δ, calibration)``.

    Returns
    -------
    float
        In counts: the analytic metric, or for a data-dependent mechanism its
        estimate over ``trials`` seeded runs on ``x``.

    Raises
    ------
    TypeError
        If ``noise`` is not a noise model.
    ValueError, KeyError, NotApplicableError, UnsupportedWorkloadError
        As :func:`epsilon_for`.
    """
    metric, level, share = _metric(metric), _level(level), _share(share)
    W, fam, A, name, _ = _at_noise(W, mechanism, noise, params, cache)
    if A is None:
        if x is None:
            raise ValueError(f"{name!r} is data-dependent: pass x= for a seeded simulation")
        x = np.asarray(x, dtype=float)
        if x.size != W.n:
            raise ValueError(f"x has {x.size} cells but the workload is over {W.n}")
        sim = _Simulated(W, name, x, metric, level, share, int(trials), int(seed), counts, params)
        return sim.error(fam, noise.epsilon)
    return _profile(W, A, fam, metric, level, share, counts).error(fam, noise.epsilon)


def epsilon_table(W, target, metric: str = "rmse", noise=None, delta: float | None = None, *,
                  calibration: str | None = None, mechanisms=None, level: float = 0.95,
                  share: float = 0.95, counts: bool = True, x=None, trials: int = 20,
                  seed: int = 0, rtol: float = 0.02, cache=None) -> pd.DataFrame:
    """The comparison table turned around: every mechanism's smallest ε for an error target.

    One row per (registered, or named) mechanism, by :func:`epsilon_for`,
    sorted by ε, with the SVD bound's ε as the floor: no strategy of the
    matrix mechanism reaches the target with less (Li & Miklau 2012, Thm 2;
    HDMM Def. 11).  The bound limits the mean squared error, hence the RMSE
    and the worst query's std, but no percentile of the interval widths: for
    ``ci95`` there is no floor (NaN, said in ``attrs["floor_note"]``).

    Parameters
    ----------
    W : Matrix or array, shape (m, n)
    target, metric, noise, delta, calibration, level, share, counts, x, trials, seed, rtol
        As for :func:`epsilon_for` (``noise`` may be the session's noise
        model: its family, δ and calibration are used).
    mechanisms : iterable of str, optional
        Registry names; default every registered mechanism.
    cache : StrategyCache, optional
        Reuse strategies across calls.

    Returns
    -------
    pandas.DataFrame
        Columns ``mechanism``, ``label``, ``epsilon``, ``delta``, ``rho``,
        ``error`` (the metric at ε, counts), ``ratio`` (ε over the floor's ε),
        ``kind``, ``method``, ``exact``, ``epsilon_low``, ``epsilon_high``,
        ``data_dependent``, ``description``, ``source``, ``note``; rows that
        cannot meet the target (or are not applicable) last, with the reason.
        ``attrs``: ``floor_epsilon``, ``floor_rho``, ``floor_note``,
        ``target``, ``metric``, ``noise`` (the family), ``level``, ``share``,
        ``m``, ``n``, ``workload``.

    Raises
    ------
    ValueError, KeyError
        As :func:`epsilon_for`, before any work.
    """
    from .compare import StrategyCache

    W = as_matrix(W)
    t, metric = _target(target), _metric(metric)
    level, share = _level(level), _share(share)
    fam = _family(noise, delta, calibration)
    names = registry.names() if mechanisms is None else list(mechanisms)
    for name in names:
        registry.get(name)
    cache = StrategyCache() if cache is None else cache
    rows = []
    for name in names:
        mech = registry.get(name)
        base = {"mechanism": name, "label": mech.label, "data_dependent": mech.data_dependent,
                "description": mech.description, "source": mech.source}
        params = {"objective": "max"} if metric == "max" and "objective" in mech.params else None
        try:
            if mech.data_dependent and x is None:
                raise ValueError("data-dependent: its error depends on the data; pass x= for a "
                                 "seeded simulation")
            res = epsilon_for(W, name, t, metric, noise=_template(fam), level=level, share=share,
                              counts=counts, x=x, trials=trials, seed=seed, rtol=rtol, params=params,
                              cache=cache)
            row = {**res.to_dict(), **base}
        except (registry.NotApplicableError, error.UnsupportedWorkloadError,
                MatrixTooLargeError, ValueError) as exc:
            row = {**base, "epsilon": math.nan, "delta": _delta_of(fam), "rho": math.nan,
                   "error": math.nan, "kind": "simulation" if mech.data_dependent else "analytic",
                   "method": "", "exact": not mech.data_dependent, "note": str(exc)}
        rows.append(row)
    floor = _floor(W, fam, metric, cache, t)
    cols = ["mechanism", "label", "epsilon", "delta", "rho", "error", "ratio", "kind", "method",
            "exact", "epsilon_low", "epsilon_high", "data_dependent", "description", "source",
            "note"]
    df = pd.DataFrame(rows)
    for c in cols:
        if c not in df.columns:
            df[c] = math.nan
    key = "rho" if fam.kind == "gaussian" and fam.delta is None else "epsilon"
    with np.errstate(divide="ignore", invalid="ignore"):
        df["ratio"] = df[key] / floor[key]
    df = df[cols].sort_values(key, na_position="last", kind="stable").reset_index(drop=True)
    df.attrs.update(floor_epsilon=floor["epsilon"], floor_rho=floor["rho"],
                    floor_note=floor["note"], target=t, metric=metric, noise=fam.label,
                    level=level, share=share, m=W.m, n=W.n, workload=W.name)
    return df


def _template(fam: _Family):
    """A noise argument for :func:`epsilon_for` that reproduces ``fam``."""
    if fam.kind == "laplace":
        return "laplace"
    if fam.delta is None:
        return "gaussian"
    # a Gaussian family always has a calibration (_family)
    return Gaussian(1.0, fam.delta, cast(str, fam.calibration)) if fam.calibration != "classical" \
        else Gaussian(0.5, fam.delta, "classical")


def _floor(W: Matrix, fam: _Family, metric: str, cache, t: float) -> dict:
    """ε (and ρ) at which the SVD bound on the RMSE equals the target: the floor of the table."""
    svdb = math.nan if metric == "ci95" else cache.svdb(W)  # no bound needed for ci95
    return _svd_floor(svdb, W.m, fam, metric, t)


_FLOOR_NOTE = "SVD bound (Li & Miklau 2012, Thm 2): no strategy needs less ε"


def _svd_floor(svdb: float, m: int, fam: _Family, metric: str, t: float) -> dict:
    if metric == "ci95":
        return {"epsilon": math.nan, "rho": math.nan,
                "note": "no floor for ci95: the SVD bound limits the mean squared error, not a "
                        "percentile of the interval widths"}
    if not math.isfinite(svdb):
        return {"epsilon": math.nan, "rho": math.nan,
                "note": "the workload is too large for the SVD bound"}
    if svdb <= 0:
        return {"epsilon": math.nan, "rho": math.nan,
                "note": "the SVD bound is 0 (no noise reaches the answers): no floor"}
    s = _solve_std(fam, t / math.sqrt(svdb / m))
    return {"epsilon": s.epsilon, "rho": s.rho, "note": _FLOOR_NOTE}


def svd_floor(svdb: float, m: int, target: float, noise=None, metric: str = "rmse", *,
              delta: float | None = None, calibration: str | None = None
              ) -> tuple[float, float, str]:
    """The smallest ε (and ρ) at which the SVD bound meets an error target: no strategy needs less.

    The SVD bound ``sqrt(v · SVDB(W) / m)`` is a lower bound on the RMSE of
    every strategy of the matrix mechanism (Li & Miklau 2012, Thm 2; HDMM
    Def. 11), hence also on the worst query's standard deviation (the largest
    variance is at least the mean); its ε for ``target`` is the floor of
    :func:`epsilon_table`.  It bounds no percentile of interval widths: for
    ``metric="ci95"`` there is no floor.

    Parameters
    ----------
    svdb : float
        ``SVDB(W)``: unit-noise TSE bound (:func:`dpexplorer.core.error.svdb`); NaN if unknown.
    m : int
        Number of queries of ``W``.
    target : float
        The error (counts, > 0).
    noise, delta, calibration
        The family, as for :func:`epsilon_for` (a noise model's ε is ignored).
    metric : {"rmse", "max", "ci95"}

    Returns
    -------
    (epsilon, rho, note)
        ε per release and its zCDP ρ; NaN (with the reason in ``note``) for
        ``ci95``, an unknown or zero bound, or a zCDP Gaussian without δ (then
        ρ is the answer).

    Raises
    ------
    ValueError
        For a bad target, metric, ``m`` or family.
    """
    t, metric = _target(target), _metric(metric)
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
        raise ValueError(f"m must be a whole number >= 1, got {m!r}")
    floor = _svd_floor(float(svdb), int(m), _family(noise, delta, calibration), metric, t)
    return floor["epsilon"], floor["rho"], floor["note"]


def unit_error_profile(unit: float, noise, *, mechanism: str = "", label: str = "",
                       metric: str = "rmse") -> ErrorProfile:
    """The :class:`ErrorProfile` ``error(ε) = unit · s(ε)`` of a known unit error: no strategy needed.

    For the matrix mechanism every RMSE and worst-query error is the noise's
    standard deviation per unit sensitivity ``s(ε)`` (``√2/ε`` for Laplace,
    ``c(ε, δ)`` for Gaussian) times a number of ``W`` and ``A`` only (HDMM
    Prop. 4): ``unit = sqrt(unit TSE / m)`` for the RMSE, ``sqrt(unit max
    variance)`` for the worst query, ``sqrt(SVDB(W) / m)`` for the SVD bound,
    with the unit-noise figures of :class:`dpexplorer.StrategyCache`.  The
    page that already holds those figures solves targets and draws curves
    from them without building a strategy again.

    Parameters
    ----------
    unit : float
        Counts per unit noise standard deviation (>= 0, finite).
    noise : {"laplace", "gaussian"} or NoiseModel
        The family.
    mechanism, label : str
        Names carried into the results.
    metric : {"rmse", "max"}
        What ``unit`` measures (``ci95`` needs the interval rules:
        :func:`error_profile`).

    Raises
    ------
    ValueError
        For a negative or non-finite ``unit``, ``metric="ci95"`` or a bad family.
    """
    u = _checked(unit, "unit", lambda v: v >= 0, "a non-negative finite number of counts")
    if _metric(metric) == "ci95":
        raise ValueError("a ci95 profile needs the release's interval rules: use error_profile")
    fam = _family(noise, None, None)
    return ErrorProfile(mechanism, label, metric, 0.95, 0.95, fam.kind, _Linear(u))


def epsilon_grid(found=(), floor: float = math.nan, points: int = 41) -> np.ndarray:
    """ε (per release) to draw error curves over: log-spaced, and around the ε found for a target.

    From ``min(0.01, found/3, floor/3)`` to ``max(10, 3·found)``, ``points``
    log-spaced values, with the positive finite ``found`` added (so that every
    curve passes exactly through its solution point).

    Parameters
    ----------
    found : array_like of float
        ε found for a target (non-positive and non-finite values are ignored).
    floor : float
        The SVD bound's ε (:func:`svd_floor`), NaN for none.
    points : int
        Log-spaced points (>= 2).

    Returns
    -------
    numpy.ndarray, shape (k,)
        Sorted distinct ε.
    """
    if isinstance(points, bool) or not isinstance(points, int | np.integer) or points < 2:
        raise ValueError(f"points must be a whole number >= 2, got {points!r}")
    f = np.asarray(found, dtype=float).ravel()
    f = f[np.isfinite(f) & (f > 0)]
    lows = [0.01, *(f / 3)] + ([floor / 3] if math.isfinite(floor) and floor > 0 else [])
    lo, hi = min(lows), max([10.0, *(f * 3)])
    return np.unique(np.concatenate([np.logspace(math.log10(lo), math.log10(hi), points), f]))


def error_curves(profiles, noise: NoiseModel, grid) -> pd.DataFrame:
    """The error of each profile over ε: the curves of an "ε for this error" chart.

    Parameters
    ----------
    profiles : mapping of str to ErrorProfile
        Curve name -> profile (of ``noise``'s family); the label is the
        profile's, else the name.
    noise : NoiseModel
        The noise whose δ and calibration are kept along the curve.
    grid : array_like of float
        ε per release (e.g. :func:`epsilon_grid`); an ε the noise cannot be
        calibrated at (the classical Gaussian calibration at ε >= 1, a
        non-positive ε) is left out.

    Returns
    -------
    pandas.DataFrame, shape (curves · ε, 4)
        ``mechanism``, ``label``, ``epsilon``, ``error`` (the profile's metric,
        counts); points with a non-finite error are dropped.

    Raises
    ------
    TypeError
        If ``noise`` is not a noise model.
    ValueError
        If a profile is of another noise family.
    """
    if not isinstance(noise, NoiseModel):
        raise TypeError(f"noise must be dpx.Laplace(ε) or dpx.Gaussian(ε, δ), got {noise!r}")
    eps, models = [], []
    for e in np.asarray(grid, dtype=float).ravel():
        try:
            models.append(noise.with_epsilon(float(e)))
        except ValueError:  # e.g. the classical Gaussian calibration at ε >= 1: no point there
            continue
        eps.append(float(e))
    parts = [pd.DataFrame({"mechanism": name, "label": prof.label or name, "epsilon": eps,
                           "error": [prof.error(n) for n in models]})
             for name, prof in profiles.items()]
    cv = (pd.concat(parts, ignore_index=True) if parts else
          pd.DataFrame({"mechanism": [], "label": [], "epsilon": [], "error": []}))
    return cv[np.isfinite(cv["error"].to_numpy(dtype=float))].reset_index(drop=True)


# ========================================================== the target table
#: Columns of :func:`target_table`.
TARGET_COLUMNS = ["mechanism", "label", "epsilon", "rho", "error", "ratio", "exact", "note",
                  "kind", "epsilon_low", "epsilon_high"]


def target_words(target: float, metric: str = "rmse", level: float = 0.95, share: float = 0.95) -> str:
    """A target in words: "an RMSE of 50 counts per query", "±50 counts on 95 % of queries (...)".

    Parameters
    ----------
    target : float
        The error (counts).
    metric : {"rmse", "max", "ci95"}
    level, share : float
        Confidence level and share of queries of ``"ci95"`` (fractions).
    """
    if metric == "rmse":
        return f"an RMSE of {target:g} counts per query"
    if metric == "max":
        return f"a standard deviation of at most {target:g} counts on every query (the worst query's)"
    return (f"±{target:g} counts on {share * 100:g} % of queries "
            f"(each a {level * 100:g} % confidence interval)")


def epsilon_note(epsilon: float, target: float) -> str:
    """Why an ε found for ``target`` is special: ``0`` (any ε meets it), not finite (none does), else ""."""
    if epsilon == 0.0:
        return "any ε > 0 meets the target"
    if not math.isfinite(epsilon):
        return f"no ε meets ±{target:g} counts"
    return ""


def noise_label(noise: NoiseModel) -> str:
    """The noise family of a target in words: "Laplace" or "Gaussian (δ = 1e-06, zcdp)"."""
    if isinstance(noise, Gaussian):
        return f"Gaussian (δ = {noise.delta:g}, {noise.calibration})"
    return "Laplace"


def rmse_profiles(frame: pd.DataFrame, m: int, noise: NoiseModel) -> dict[str, ErrorProfile]:
    """RMSE profiles of every mechanism of a comparison with a finite unit-noise TSE (closed form).

    Parameters
    ----------
    frame : pandas.DataFrame
        One row per mechanism: ``mechanism``, ``label`` and ``unit_tse``, the unit-noise TSE
        (:func:`dpexplorer.core.error.unit_tse`; NaN for a mechanism without an analytic error).
    m : int
        Number of queries of the workload.
    noise : NoiseModel
        The family of the profiles.

    Returns
    -------
    dict
        Mechanism -> :func:`unit_error_profile` of ``sqrt(unit_tse / m)``.
    """
    units = frame["unit_tse"].to_numpy(dtype=float)
    return {str(name): unit_error_profile(math.sqrt(u / m), noise, mechanism=str(name), label=str(label))
            for name, label, u in zip(frame["mechanism"], frame["label"], units, strict=True)
            if math.isfinite(u)}


def target_table(rows: list[dict], floor: float, floor_note: str, target: float, metric: str,
                 noise: NoiseModel, W: Matrix) -> pd.DataFrame:
    """The table of an "ε for this error" question: one row per mechanism, least ε first.

    Parameters
    ----------
    rows : list of dict
        Per mechanism, the columns of :data:`TARGET_COLUMNS` but ``ratio`` (``epsilon``
        per release, ``rho``, ``error`` in counts, ...).
    floor, floor_note
        The SVD bound's ε for the target (:func:`svd_floor`; NaN with a reason for none).
    target, metric
        The target (counts) and its metric.
    noise : NoiseModel
        The noise family.
    W : Matrix
        The workload.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`TARGET_COLUMNS`; ``ratio`` is ε over the floor's ε; sorted by ε (NaN
        last, stable); attrs ``floor_epsilon``, ``floor_note``, ``target``, ``metric``,
        ``noise`` (:func:`noise_label`), ``m`` and ``workload`` (its name).
    """
    df = pd.DataFrame(rows, columns=[c for c in TARGET_COLUMNS if c != "ratio"])
    with np.errstate(divide="ignore", invalid="ignore"):
        df.insert(5, "ratio", df["epsilon"].to_numpy(dtype=float) / floor)
    df = df.sort_values("epsilon", na_position="last", kind="stable").reset_index(drop=True)
    df.attrs.update(floor_epsilon=floor, floor_note=floor_note, target=target, metric=metric,
                    noise=noise_label(noise), m=W.m, workload=W.name)
    return df


def analytic_target_row(profile: ErrorProfile | None, target: float, noise: NoiseModel,
                        failed: str = "") -> dict:
    """The columns of a :func:`target_table` row for a mechanism with an error profile.

    Parameters
    ----------
    profile : ErrorProfile or None
        The mechanism's profile (None: it has none; ``failed`` says why).
    target : float
        The error to meet (counts).
    noise : NoiseModel
        The noise family (its ε is ignored).
    failed : str
        Why there is no profile ("" for "no error profile").

    Returns
    -------
    dict
        ``epsilon``, ``rho``, ``error`` (:meth:`ErrorProfile.epsilon_for`) and a ``note``
        (its note, else :func:`epsilon_note`); only ``note`` without a profile.
    """
    if profile is None:
        return {"note": failed or "no error profile"}
    res = profile.epsilon_for(target, noise)
    return {"epsilon": res.epsilon, "rho": res.rho, "error": res.error,
            "note": res.note or epsilon_note(res.epsilon, target)}


def svd_bound_profile(svdb: float, m: int, noise: NoiseModel) -> ErrorProfile:
    """The RMSE profile of the SVD bound (Li & Miklau 2012, Thm 2): ``sqrt(SVDB(W)/m)`` per unit noise.

    ``svdb`` is the unit-noise TSE bound (:func:`dpexplorer.core.error.svdb`), ``m`` the number
    of queries; the profile is named ``"svd_bound"``, labelled "SVD bound".
    """
    return unit_error_profile(math.sqrt(svdb / m), noise, mechanism="svd_bound", label="SVD bound")


def simulated_target_row(result: EpsilonForTarget | str, dataset: str) -> dict:
    """The columns of a :func:`target_table` row for a mechanism whose ε was found by simulation.

    Parameters
    ----------
    result : EpsilonForTarget or str
        :func:`epsilon_for` with benchmark data ``x`` (``kind == "simulation"``), or the
        message of its failure.
    dataset : str
        Name of the data the simulation ran on (for the note).

    Returns
    -------
    dict
        ``epsilon``, ``rho`` (NaN without an ε), ``error``, ``epsilon_low``, ``epsilon_high`` and a
        ``note`` naming the seed, the runs, the data and the 95 % band for ε; only ``note`` for a
        failure.
    """
    if isinstance(result, str):
        return {"note": result}
    what = f"simulation (seed {result.seed}, {result.trials} trials) on {dataset}"
    if math.isfinite(result.epsilon):
        band = (f"95 % band for ε {result.epsilon_low:.3g}–{result.epsilon_high:.3g}"
                if math.isfinite(result.epsilon_low) and math.isfinite(result.epsilon_high)
                else "95 % band for ε not found in range")
        note = (f"{what}: {band}; a study on the data treated as public, not a release "
                "(the ε another dataset needs differs)")
    else:
        note = f"{what}: {result.note}"
    return {"epsilon": result.epsilon, "rho": result.rho if math.isfinite(result.epsilon) else math.nan,
            "error": result.error, "note": note, "epsilon_low": result.epsilon_low,
            "epsilon_high": result.epsilon_high}


def target_points(table: pd.DataFrame, drawn) -> pd.DataFrame:
    """The solution points of a :func:`target_table` on its curves: ``epsilon``, ``error``, ``label``.

    Only mechanisms in ``drawn`` (the curves' names) with a positive finite ε.
    """
    eps = table["epsilon"].to_numpy(dtype=float)
    ok = table[np.isfinite(eps) & (eps > 0) & table["mechanism"].isin(list(drawn))]
    return pd.DataFrame({"epsilon": ok["epsilon"], "error": ok["error"],
                         "label": ok["label"]}).reset_index(drop=True)


# ======================================================== privacy–accuracy curve
def rmse_curve(table: pd.DataFrame, noise: NoiseModel, svdb: float, m: int,
               grid=EPSILON_GRID, pending: Iterable[str] = ()) -> pd.DataFrame:
    """The RMSE of every analytic mechanism (and the SVD bound) over ε: a privacy–accuracy curve.

    The forward of :func:`epsilon_for` for the RMSE metric, from unit-noise
    figures only (HDMM, McKenna et al. 2018, Prop. 4)::

        rmse(ε) = sqrt(v(ε) · u / m)

    with ``u`` the mechanism's unit-noise TSE (:meth:`dpexplorer.StrategyCache.entry`),
    or ``SVDB(W)`` for the bound (HDMM Def. 11), and ``v(ε)`` the variance per
    unit sensitivity of ``noise`` at ε, δ fixed (``noise.with_epsilon(ε).variance_per_unit``):
    ``2/ε²`` for Laplace (``b = 1/ε``, variance ``2b²``), ``c(ε, δ)²`` for Gaussian noise in
    its calibration (zCDP: ``c² = 1/(2ρ)`` with ρ the zCDP cost whose conversion
    is (ε, δ)-DP; Bun & Steinke 2016, Prop. 1.6; Canonne, Kamath & Steinke 2020, Cor. 13).

    Parameters
    ----------
    table : pandas.DataFrame, shape (mechanisms, columns)
        ``mechanism``, ``label`` and ``unit_tse`` (counts² per unit noise
        variance; NaN for a mechanism without an analytic error), as the
        table :func:`dpexplorer.compare.scale_comparison` scales.
    noise : NoiseModel
        The current noise; its ε is added to ``grid``, its family, δ and
        calibration are kept along the curve.
    svdb : float
        ``SVDB(W)`` (unit-noise TSE bound); NaN leaves the bound out.
    m : int
        Number of queries of the workload.
    grid : array_like of float
        ε per release (> 0), default :data:`EPSILON_GRID`.
    pending : iterable of str
        Mechanisms without a unit TSE yet (being built) that keep their rows,
        with NaN RMSE, so that a chart can reserve their curves.

    Returns
    -------
    pandas.DataFrame, shape (curves · ε, 4)
        Long format: ``mechanism`` (``"svd_bound"`` for the bound), ``label``,
        ``epsilon`` (sorted, ``grid ∪ {noise.epsilon}``), ``rmse`` (counts per
        query); rows without a finite RMSE are dropped unless pending.
        ``attrs``: ``noise`` (label), ``epsilon`` (the current ε).

    Raises
    ------
    TypeError
        If ``noise`` is not a noise model.
    ValueError
        If ``m`` is not a whole number >= 1, an ε of the grid is not positive
        and finite (or not valid for the noise, e.g. ε >= 1 for the classical
        Gaussian calibration), or a needed column is missing.
    """
    if not isinstance(noise, NoiseModel):
        raise TypeError(f"noise must be dpx.Laplace(ε) or dpx.Gaussian(ε, δ), got {noise!r}")
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
        raise ValueError(f"m must be a whole number >= 1, got {m!r}")
    missing = [c for c in ("mechanism", "label", "unit_tse") if c not in table.columns]
    if missing:
        raise ValueError(f"the comparison table lacks column(s) {missing}")
    eps = np.unique(np.append(np.asarray(grid, dtype=float).ravel(), noise.epsilon))
    if not np.all(np.isfinite(eps) & (eps > 0)):
        raise ValueError(f"the ε grid must hold positive finite numbers, got {grid!r}")
    v = np.array([noise.variance_per_unit if e == noise.epsilon
                  else noise.with_epsilon(float(e)).variance_per_unit for e in eps])
    pending = set(pending)
    units = table["unit_tse"].to_numpy(dtype=float)
    waiting = table["mechanism"].isin(pending).to_numpy()
    f = table[np.isfinite(units) | waiting]
    names = list(f["mechanism"]) + ["svd_bound"]
    labels = list(f["label"]) + ["SVD bound"]
    u = np.append(f["unit_tse"].to_numpy(dtype=float), float(svdb))
    rmse = np.sqrt(np.outer(u, v) / m)
    k = eps.size
    df = pd.DataFrame({"mechanism": np.repeat(names, k), "label": np.repeat(labels, k),
                       "epsilon": np.tile(eps, len(names)), "rmse": rmse.ravel()})
    df = df[np.isfinite(df["rmse"]) | df["mechanism"].isin(pending)].reset_index(drop=True)
    df.attrs.update(noise=noise.label, epsilon=noise.epsilon)
    return df


# ================================================================ plain words
def count_text(v: float) -> str:
    """A number of counts (float, ≥ 0) for a sentence: ``22``, ``3.4``, ``0.52``, ``1,234``, ``∞``.

    Whole counts from 10 up, one decimal from 1 to 10, two significant digits
    below 1.  Raises nothing.
    """
    if not math.isfinite(v):
        return "∞"
    if v >= 10:
        return f"{v:,.0f}"
    if v >= 1:
        return f"{v:.1f}"
    return f"{v:.2g}"


def describe_privacy(epsilon: float, delta: float = 0.0, rho: float | None = None) -> str:
    """What ε (and δ, or ρ) promise, in plain words, and which way is more private.

    Differential privacy with ``ε`` (Dwork, McSherry, Nissim & Smith 2006):
    adding or removing any one record changes the probability of every
    possible result by at most a factor ``e^ε``; with ``δ > 0`` (Dwork &
    Roth 2014, Def. 2.4) that may fail with probability up to ``δ``; a zCDP
    cost ρ (Bun & Steinke 2016) is stated as what it is.

    Parameters
    ----------
    epsilon : float
        ε > 0 per release.
    delta : float
        δ in [0, 1) (0: pure ε-DP).
    rho : float, optional
        The zCDP cost of the same noise, shown alongside.

    Returns
    -------
    str
        Two to four sentences of plain text.

    Raises
    ------
    ValueError
        If ε is not positive and finite, δ not in [0, 1), or ρ negative.
    """
    eps = accounting._positive(epsilon, "epsilon")
    d = accounting._positive(delta, "delta", allow_zero=True)
    if d >= 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta!r}")
    if eps < 700:
        factor = math.exp(eps)
        ftxt = f"{factor:.3g}" if factor < 1e6 else f"{factor:.2e}"
    else:  # e^ε overflows a float (ε up to 1e9 is accepted): give its power of ten
        ftxt = f"10^{eps / math.log(10):.3g}"
    text = (f"ε = {eps:.3g}: adding or removing any one person's record changes the chance of "
            f"every possible result by at most a factor e^ε ≈ {ftxt}, which bounds what the "
            f"results reveal about any one person. Smaller ε is more private (more noise, less "
            f"accurate answers); larger ε is more accurate and less private.")
    if d > 0:
        one_in = 1.0 / d
        text += (f" δ = {d:g}: with probability at most {d:g} (about 1 in {one_in:,.0f}) "
                 f"the factor may be exceeded; keep δ well below one over the number of people "
                 f"in the data.")
    if rho is not None:
        r = accounting._positive(rho, "rho", allow_zero=True)
        text += (f" In zero-concentrated DP this noise costs ρ = {r:.4g}; the ρ of successive "
                 f"releases add up.")
    return text


#: Plain names of the queries of common workloads (by the workload's name).
_NOUNS = (("all_range", "range answers"), ("width", "range answers"),
          ("random_uniform", "range answers"), ("range", "range answers"),
          ("prefix", "prefix answers"), ("marginal", "marginal counts"),
          ("identity", "counts"))


def _noun(W: Matrix) -> str:
    name = (W.name or "").lower()
    for key, noun in _NOUNS:
        if name.startswith(key):
            return noun
    return "answers"


def accuracy_sentence(W, mechanism, noise: NoiseModel, *, level: float = 0.95,
                      share: float = 0.95, counts: bool = True, noun: str | None = None,
                      x=None, trials: int = 20, seed: int = 0, params: dict | None = None,
                      cache=None) -> str:
    """One sentence on what a mechanism's answers are worth, from the release's interval rules.

    E.g. "With HB and Laplace noise at ε = 1, 95 % of your 32,896 range
    answers are within ±52 counts of the truth, each with 95 % confidence
    (the widest interval is ±58)."  The number is the ``ci95`` metric of
    :func:`error_at` (the ``share``-quantile over queries of the ``level``
    half-widths a release reports); the widest is the maximum half-width.
    For a data-dependent mechanism, the same from a seeded simulation on
    ``x`` (said in the sentence), or a sentence saying its error depends on
    the data.

    Parameters
    ----------
    W, mechanism, level, share, counts, x, trials, seed, params, cache
        As for :func:`epsilon_for`.
    noise : NoiseModel
        The noise at the current ε.
    noun : str, optional
        What the answers are ("range answers"); default from the workload's name.

    Returns
    -------
    str

    Raises
    ------
    TypeError, ValueError, KeyError, NotApplicableError, UnsupportedWorkloadError
        As :func:`error_at`.
    """
    level, share = _level(level), _share(share)
    W, fam, A, name, label = _at_noise(W, mechanism, noise, params, cache)
    noun = noun or _noun(W)
    kind = "Laplace" if isinstance(noise, Laplace) else "Gaussian"
    at = f"ε = {noise.epsilon:.3g}" + (f", δ = {noise.delta:g}" if noise.delta else "")
    m = f"{W.m:,}"
    pct, conf = f"{share * 100:g} %", f"{level * 100:g} %"
    if A is None:
        if x is None:
            return (f"{label} adapts to the data, so its error has no formula: with {kind} noise "
                    f"at {at}, how close your {m} {noun} are depends on the data (run a "
                    f"simulation on similar public data to see).")
        t = error_at(W, name, noise, "ci95", level=level, share=share, counts=counts, x=x,
                     trials=trials, seed=seed, params=params)
        return (f"In a simulation on this data ({trials} seeded runs), with {label} and {kind} "
                f"noise at {at}, {pct} of your {m} {noun} were within ±{count_text(t)} counts of "
                f"the truth in {conf} of the runs.")
    prof = _profile(W, A, fam, "ci95", level, share, counts)
    t = prof.error(fam, noise.epsilon)
    if isinstance(prof, _Linear):
        assert prof.sampler is not None  # a "ci95" profile carries its sampler (_profile)
        h, _ = _mechanism.confidence_half_widths(W, A, noise, prof.sampler, level)
    else:
        h = prof.half_widths(noise.epsilon)
    widest = float(np.max(h))
    if W.m == 1:
        return (f"With {label} and {kind} noise at {at}, your answer is within ±{count_text(t)} "
                f"counts of the truth with {conf} confidence.")
    every = share >= 1.0 or widest <= t
    lead = f"all {m}" if every else f"{pct} of your {m}"
    tail = "" if every else f" (the widest interval is ±{count_text(widest)})"
    return (f"With {label} and {kind} noise at {at}, {lead} {noun} are within ±{count_text(t)} "
            f"counts of the truth, each with {conf} confidence{tail}.")
