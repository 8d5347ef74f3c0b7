"""Releases with the matrix mechanism: SELECT, MEASURE, RECONSTRUCT, answer.

``release(x, W, "h2", Laplace(1.0))`` selects the strategy ``A`` (from the
registry, or a given matrix), MEASUREs ``y = A x + noise`` through the
privacy boundary (:class:`~dpexplorer.privacy.PrivateData`, which checks the
budget and records the spend), RECONSTRUCTs ``x̂ = A⁺ y`` by least squares,
and answers ``W x̂`` (HDMM Sec. 10; Li et al. 2010 "matrix mechanism").
Only MEASURE sees ``x``; reconstruction and answers are post-processing of
``y``.

Two modes that never mix (:mod:`dpexplorer.privacy.samplers`):

* :func:`release` -- a **release**: noise from the OS CSPRNG through opendp's
  vetted samplers; no seed exists, and nothing in the result or its
  downloads lets anyone regenerate the noise;
* :func:`simulate` -- a **simulation**: the same computation with a seeded
  ``numpy.random.Generator``, reproducible bit for bit from ``seed``,
  labelled ``"simulation"``; never a release.

Every answer of a data-independent release comes with its analytic standard
error and a confidence interval (:meth:`Release.confidence_intervals`).

The inference is a choice (``inference=``, :mod:`dpexplorer.core.inference`,
``dpexplorer/docs/inference.md``): least squares (the default, analytic
error) or non-negative least squares (Lawson & Hanson 1974), whose error is
estimated by a parametric bootstrap of the noise instead.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse

from .core import error, registry
from .core import inference as _inference
from .core.confidence import CI_TEXT as _CI_TEXT
from .core.confidence import EXACT_CI_LIMIT, confidence_half_widths
from .core.inference import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED, DEFAULT_INFERENCE
from .core.reconstruct import DENSE_RECONSTRUCT_LIMIT, Reconstructor, reconstruct
from .privacy import (
    OS_CSPRNG,
    RELEASE,
    SIMULATION,
    PrivacyLedger,
    PrivateData,
    check_noise,
    check_shape,
    noise_sampler,
    variance_factor,
)
from .privacy.noise import NoiseModel
from .privacy.samplers import check_source, is_release
from .privacy.tables import PrivateTable, check_out_of_domain
from .queries import limits
from .queries.domain import DATA_DOMAIN_REFUSAL, PublicTable, Table
from .queries.matrix import Identity, Matrix, Ones, as_matrix, check_has_queries
from .strategies import marginal_inference

__all__ = ["Reconstructor", "reconstruct", "run", "Release", "release", "simulate",
           "confidence_half_widths", "DENSE_RECONSTRUCT_LIMIT", "EXACT_CI_LIMIT",
           "AnswerBands", "answer_bands", "TRIAL_SEED_TAG", "inferences", "NATIVE",
           "LEAST_SQUARES_STAGE", "INTERVAL_METHODS"]

#: ``inference`` of a data-dependent mechanism that has no least-squares stage (MWEM's
#: multiplicative weights, EFPA's inverse Fourier transform, Uniform's spread total):
#: its estimate is its own, and no other inference applies.
NATIVE = "native"
#: Inferences of a release from a record table (never an ``x̂`` over every cell):
#: least squares, GReM-LNN and Private-PGM (:mod:`dpexplorer.strategies.marginal_inference`).
TABLE_INFERENCES = marginal_inference.METHODS

#: Data-dependent mechanisms whose last stage measures a strategy and reconstructs it by
#: least squares (DAWA stage 2 on the partition's buckets, Li et al. PVLDB 2014, Sec. 4):
#: every registered inference applies to that stage.
LEAST_SQUARES_STAGE = frozenset({"dawa", "partition_laplace", "partition_uniform",
                                 "partition_geometric", "dawa_as_published"})

#: ``interval_method`` of a release: how its std and intervals are made.
INTERVAL_METHODS = {
    "analytic": "the matrix mechanism's analytic error of least squares (HDMM Prop. 4)",
    "parametric bootstrap": ("a parametric bootstrap of the noise: the release's noise model "
                             "redrawn with a seeded simulation Generator around the estimate, "
                             "re-inferred each time (Efron & Tibshirani 1993, Sec. 6.5)"),
    "none": "none: no analytic error (a data-dependent mechanism, or consistent marginals of a table)",
}

#: What the interval method key of a bootstrap interval means (in ``Release.CI_METHODS``).
_BOOT_CI_TEXT = ("parametric bootstrap: basic interval [2a - q(1-α/2), 2a - q(α/2)] of the "
                 "re-inferred answers under redrawn noise (Davison & Hinkley 1997, Sec. 5.2); "
                 "approximate")

#: Strategies and their factorisations kept for repeated runs (evaluate's trials).
_PLANS: OrderedDict = OrderedDict()
_PLAN_CACHE_SIZE = 8


def _plan(mech: registry.Mechanism, W: Matrix, noise: NoiseModel, params: dict):
    """``(A, Reconstructor, solvers)`` for a data-independent mechanism, built once per key.

    ``solvers`` maps an inference name to its prepared ``y -> x̂`` (filled on first use).
    """
    try:
        key = (mech.name, W, noise.norm, tuple(sorted(params.items())))
        hash(key)
    except TypeError:  # unhashable parameter values: no caching
        A = mech.strategy(W, noise, **params)
        return A, Reconstructor(A), {}
    if key in _PLANS:
        _PLANS.move_to_end(key)
        return _PLANS[key]
    A = mech.strategy(W, noise, **params)
    _PLANS[key] = (A, Reconstructor(A), {})
    while len(_PLANS) > _PLAN_CACHE_SIZE:
        _PLANS.popitem(last=False)
    return _PLANS[key]


def _json_safe(value):
    """``value`` with numpy arrays/scalars and dataclasses made JSON-serialisable."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "edges") and isinstance(getattr(value, "edges"), np.ndarray):
        return {"edges": value.edges.tolist()}  # a Partition
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return repr(value)


def inferences(mechanism) -> tuple[str, ...]:
    """The inferences that apply to ``mechanism``, its default first.

    * a data-independent mechanism (a registry name or a strategy matrix)
      and a data-dependent one with a least-squares stage
      (:data:`LEAST_SQUARES_STAGE`: DAWA and its partition variants, whose
      stage 2 measures a strategy on the buckets): every registered inference
      (:data:`dpexplorer.core.inference.INFERENCES`), least squares first;
    * any other data-dependent mechanism (MWEM, EFPA, Uniform, ...):
      ``(NATIVE,)`` -- its estimate is its own.

    Parameters
    ----------
    mechanism : str or Matrix
        Registry name or strategy.

    Returns
    -------
    tuple of str

    Raises
    ------
    KeyError
        If the name is not registered.
    """
    names = (DEFAULT_INFERENCE, *(k for k in _inference.INFERENCES if k != DEFAULT_INFERENCE))
    if not isinstance(mechanism, str):
        return names
    mech = registry.get(mechanism)
    if mech.data_dependent and mech.name not in LEAST_SQUARES_STAGE:
        return (NATIVE,)
    return names


def _resolve_inference(mechanism, inference) -> str:
    """The inference a run uses: ``inference`` if it applies, the mechanism's default for ``None``.

    Raises
    ------
    ValueError
        If ``inference`` is not one of :func:`inferences` ``(mechanism)``.
    """
    allowed = inferences(mechanism)
    if inference is None:
        return allowed[0]
    if not isinstance(inference, str) or inference not in allowed:
        name = mechanism if isinstance(mechanism, str) else as_matrix(mechanism).name
        why = (f" ({name!r} is data-dependent without a least-squares stage: its estimate is its own)"
               if allowed == (NATIVE,) else "")
        raise ValueError(f"inference for {name!r} must be one of {list(allowed)}{why}, got {inference!r}")
    return inference


def _stage_inference(est: registry.Estimate, inference: str) -> registry.Estimate:
    """Re-infer the least-squares stage of a DAWA-family estimate (post-processing only).

    Stage 2 measured ``y`` with the bucket strategy ``A: (p, k)`` and kept
    ``s = A⁺y`` (``info["bucket_counts"]``).  Since ``y − A s`` is orthogonal
    to the range of ``A``, ``‖A s' − y‖² = ‖A s' − A s‖² + ‖A s − y‖²`` for
    every ``s'``: least squares and non-negative least squares of ``A s`` give
    the same bucket counts as of ``y``.  The bucket counts are spread over
    their cells uniformly, as DAWA does (Li et al. PVLDB 2014, uniform expansion).
    """
    info = dict(est.info)
    A, s, part = info["strategy"], np.asarray(info["bucket_counts"], dtype=float), info["partition"]
    s_new = _inference.make_solver(inference, A)(A.matvec(s))
    x_ordered = part.expand(s_new)
    order = info.get("order")
    x_hat = x_ordered if order is None else np.empty_like(x_ordered)
    if order is not None:
        x_hat[order] = x_ordered
    info.update(bucket_counts=s_new, inference=inference)
    return registry.Estimate(x_hat, info, answers=None)


def run(mechanism: str, data: PrivateData, W, noise: NoiseModel, rng, *, inference: Any = None,
        **params) -> registry.Estimate:
    """Run any registered mechanism on private data: the uniform entry point.

    Data-independent mechanisms build their strategy ``A``, MEASURE it
    through ``data`` (which checks the budget and records the spend) and
    RECONSTRUCT ``x̂ = A⁺y``; data-dependent ones call their registered ``runner``.
    Either way the whole cost (``noise``'s ε, δ and ρ) is first reserved in
    ``data``'s ledger (``data.reserve``, :class:`~dpexplorer.privacy.ledger.Reservation`):
    a run the budget refuses draws nothing, and each stage is charged against
    the reservation, which is settled down to what the stages spent.

    Parameters
    ----------
    mechanism : str
        Registry name.
    data : PrivateData
        The private data vector behind the privacy boundary.
    W : Matrix, shape (m, n)
        Workload (public).
    noise : NoiseModel
        Privacy parameters (ε, and δ for Gaussian noise) of the whole run.
    rng : numpy.random.Generator or OS_CSPRNG
        A seeded Generator (simulation) or :data:`~dpexplorer.privacy.OS_CSPRNG` (release).
    inference : str, optional
        How ``x̂`` is inferred from the noisy answers, one of
        :func:`inferences` ``(mechanism)``: ``"least_squares"`` (default) or
        ``"nonnegative"`` (:mod:`dpexplorer.core.inference`); for DAWA and its
        partition variants it applies to stage 2's bucket counts.  Checked
        before anything is reserved or drawn.
    **params
        Overrides of the mechanism's default parameters.

    Returns
    -------
    Estimate
        ``x_hat`` (shape ``(n,)``) and public ``info`` (``info["inference"]``
        names the inference used); ``answers`` (shape ``(m,)``) when the
        strategy answers the workload itself by least squares (OPT+'s local
        least squares, ``A.answer(W, y)``), else ``None`` (the answers are ``W x̂``).

    Raises
    ------
    KeyError
        Unknown mechanism.
    TypeError
        If ``rng`` is not a source of randomness or ``noise`` not a noise model.
    ValueError
        For a parameter the mechanism does not take, an inference that does
        not apply to it, or if ``rng`` is the OS CSPRNG (a release) and the
        mechanism is registered as not private (``Mechanism.private`` false,
        e.g. ``dawa_as_published``).
    NotApplicableError
        If the mechanism cannot handle this workload or noise model.
    BudgetExceededError
        If the whole cost does not fit the ledger's budget (nothing is drawn or recorded).
    """
    W = as_matrix(W)
    check_source(rng)
    check_noise(noise)
    mech = registry.get(mechanism)
    if is_release(rng):
        _refuse_non_private(mech)
    mech.check_params(params)
    inference = _resolve_inference(mechanism, inference)
    if mech.runner is not None:
        # the whole cost is reserved before the first stage draws (refused: nothing drawn)
        with data.reserve(noise.epsilon, noise.delta, noise.rho_per_unit, label=f"{mechanism} run",
                          source=rng):
            est = mech.runner(data, W, noise, rng, **{**mech.params, **params})
        if inference not in (NATIVE, DEFAULT_INFERENCE):
            return _stage_inference(est, inference)  # post-processing of stage 2's answers
        return registry.Estimate(est.x_hat, {**est.info, "inference": inference}, answers=est.answers)
    A, recon, solvers = _plan(mech, W, noise, params)  # public work, cached across trials
    with data.reserve(noise.epsilon, noise.delta, noise.rho_per_unit, label=f"{mechanism} run",
                      source=rng):
        y = data.measure(A, noise, rng, label=f"{mechanism}: measure {A.m} strategy queries"
                         + _ledger_note(inference))
    if inference == DEFAULT_INFERENCE:
        return registry.Estimate(recon(y), {"strategy": A, "inference": inference},
                                 answers=_strategy_answers(A, W, y))
    if inference not in solvers:
        solvers[inference] = _inference.make_solver(inference, A, recon)
    return registry.Estimate(solvers[inference](y), {"strategy": A, "inference": inference})


def _ledger_note(inference: str) -> str:
    """What the ledger label adds for an inference other than least squares (post-processing)."""
    return "" if inference in (DEFAULT_INFERENCE, NATIVE) else f", then {inference} inference"


def _refuse_non_private(mech: registry.Mechanism) -> None:
    """Raise ValueError for a mechanism registered as not private (study variants never release)."""
    if not mech.private:
        raise ValueError(
            f"{mech.name!r} ({mech.label}) is registered as not differentially private, a variant "
            f"kept for study and audits only: it cannot make a release. Study it with "
            f"dpx.simulate(...) or dpx.audit.audit(...), or release with a private mechanism")


def _strategy_answers(A: Matrix, W: Matrix, y: np.ndarray) -> np.ndarray | None:
    """The strategy's own workload answers (``A.answer(W, y)``), or ``None`` for ``W x̂``.

    Stacked OPT+ strategies answer every workload term from its own block
    (local least squares, HDMM Sec. 10 item 3): unbiased, with the analytic
    error of :func:`dpexplorer.core.error.expected_tse`, which ``W x̂`` would not have.
    """
    hook = getattr(A, "answer", None)
    if hook is None:
        return None
    answers = np.asarray(hook(W, y), dtype=float)
    if answers.shape != (W.m,):
        raise ValueError(f"strategy {A.name!r} returned answers of shape {answers.shape}, "
                         f"expected ({W.m},)")
    return answers


# ================================================================== releases
@dataclass
class Release:
    """Differentially private answers to a workload, from :func:`release` or :func:`simulate`.

    Attributes
    ----------
    mechanism : str
        Registry name (or the strategy's name).
    workload : Matrix
        ``W: (m, n)``.
    strategy : Matrix or None
        ``A: (p, n)``; ``None`` for data-dependent mechanisms.
    noise : NoiseModel
    mode : {"release", "simulation"}
        A release (OS CSPRNG via opendp, no seed) or a simulation (seeded).
    y : ndarray, shape (p,), or None
        Noisy strategy answers (``None`` for data-dependent mechanisms).
    x_hat : ndarray, shape (n,), or None
        Estimate of the data vector by :attr:`inference`: least squares
        ``A⁺y`` by default (for a stacked OPT+ strategy: the global
        least-squares estimate of the whole stack), ``>= 0`` everywhere with
        ``"nonnegative"``; ``None`` for a release from a record table, whose
        full domain is never formed.
    answers : ndarray, shape (m,)
        The noisy workload answers, in counts: ``W x̂``, or the strategy's own
        ``A.answer(W, y)`` when it has one (OPT+ answers every workload term
        from its own block by local least squares, HDMM Sec. 10 item 3, so
        ``answers`` then differs from ``W x̂`` and has the analytic error).
    epsilon, delta, rho : float
        What this release spent: (ε, δ) and its zCDP cost ρ.
    analytic_rmse : float
        Expected RMSE of the answers (HDMM Prop. 4, with the sampler's exact
        variance); NaN for data-dependent mechanisms and for an inference
        that is not linear in ``y`` (``"nonnegative"``: see :meth:`bootstrap`).
    sampler : str or None
        ``"discrete"`` or ``"continuous"`` (the MEASURE of a data-independent mechanism).
    params : dict
        The mechanism's parameters.
    info : dict
        Public by-products of a data-dependent mechanism (e.g. DAWA's
        partition); kept in the object, never written to the downloads.
    seed : int or None
        Only for a simulation: the seed of its Generator.  ``None`` for a release.
    table : PublicTable or None
        For a release from a record table: the table's public part only
        (:meth:`Table.public`: its name and domain); the records never leave
        the kernel, and no release keeps a reference to them, to ``x`` or to
        any exact answer (``pickle.dumps(release)`` carries none).
    inference : str
        How ``x̂`` was inferred (:mod:`dpexplorer.core.inference`):
        ``"least_squares"``, ``"nonnegative"``, or ``"native"`` for a
        data-dependent mechanism without a least-squares stage (MWEM, EFPA, ...);
        for a record table, how its marginals were made: ``"least_squares"``,
        ``"grem_lnn"`` or ``"pgm"`` (:data:`TABLE_INFERENCES`).
    bootstrap_draws, bootstrap_seed : int
        Draws and seed of the parametric bootstrap that gives the std and
        intervals of a non-linear inference (:meth:`bootstrap`).  The seed
        drives a simulation of the public noise model only; it cannot
        regenerate a release's noise.
    created : str
        ISO time (UTC).
    """

    mechanism: str
    workload: Matrix
    strategy: Matrix | None
    noise: NoiseModel
    mode: str
    y: np.ndarray | None
    x_hat: np.ndarray | None
    answers: np.ndarray
    epsilon: float
    delta: float
    rho: float
    analytic_rmse: float
    sampler: str | None = None
    params: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    seed: int | None = None
    table: PublicTable | None = field(default=None, repr=False)
    inference: str = DEFAULT_INFERENCE
    bootstrap_draws: int = BOOTSTRAP_DRAWS
    bootstrap_seed: int = BOOTSTRAP_SEED
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))
    _intervals: dict = field(default_factory=dict, repr=False, compare=False)
    _boot: dict = field(default_factory=dict, repr=False, compare=False)
    _solver: Callable | None = field(default=None, repr=False, compare=False)

    #: What each confidence-interval method key means.
    CI_METHODS = {**_CI_TEXT, "parametric bootstrap": _BOOT_CI_TEXT}

    @property
    def data_dependent(self) -> bool:
        """Whether a data-dependent mechanism made the release (no analytic error)."""
        return self.strategy is None

    @property
    def interval_method(self) -> str:
        """How :meth:`per_query_std` and :meth:`confidence_intervals` are made (:data:`INTERVAL_METHODS`).

        ``"analytic"`` for least squares, ``"parametric bootstrap"`` for a
        non-linear inference of a data-independent release, ``"none"`` for a
        data-dependent mechanism.
        """
        if self.strategy is None or (self.x_hat is None and self.inference not in _inference.ANALYTIC):
            return "none"  # data-dependent, or consistent marginals of a table (no bootstrap yet)
        return "analytic" if self.inference in _inference.ANALYTIC else "parametric bootstrap"

    def __getstate__(self) -> dict:
        """Pickled without the prepared inference (it may hold a strategy's closures; rebuilt on use)."""
        state = self.__dict__.copy()
        state["_solver"] = None
        return state

    def bootstrap(self) -> _inference.BootstrapAnswers:
        """The parametric bootstrap of this release's answers (computed once, then kept).

        ``bootstrap_draws`` times: the release's noise model (same scale,
        same sampler: discrete on ℤ if MEASURE used it) is redrawn with
        ``numpy.random.default_rng(bootstrap_seed)`` around the released
        estimate, ``y* = A x̂ + z*``, and ``x̂*`` inferred again with the
        same inference (:func:`dpexplorer.core.inference.parametric_bootstrap`).
        Post-processing of public quantities: a simulation, not a release.

        Raises
        ------
        ValueError
            For a data-dependent release or one without ``x_hat`` (record tables).
        """
        if self.strategy is None or self.x_hat is None:
            raise ValueError(f"{self.mechanism!r}: a parametric bootstrap needs a data-independent "
                             "release with an estimate x_hat")
        if "answers" not in self._boot:
            if self._solver is None:
                self._solver = _inference.make_solver(self.inference, self.strategy)
            draw = _inference.noise_draws(self.noise, self.strategy, self.sampler == "discrete")
            self._boot["answers"] = _inference.parametric_bootstrap(
                self.workload, self.strategy, self.x_hat, self._solver, draw,
                self.bootstrap_draws, self.bootstrap_seed)
        return self._boot["answers"]

    def per_query_std(self) -> np.ndarray:
        """Standard error of every answer, shape ``(m,)`` (counts).

        Least squares: the matrix mechanism's analytic per-query variance
        (HDMM Prop. 4) times the sampler's variance factor (1, or slightly
        less for discrete noise).  A non-linear inference: the bootstrap
        standard deviation (:meth:`bootstrap`).

        Raises
        ------
        ValueError
            For a data-dependent release, whose error depends on the data.
        """
        if self.strategy is None:
            raise ValueError(f"{self.mechanism!r} is data-dependent: its answers have no analytic error")
        if self.interval_method == "none":
            raise ValueError(f"{self.inference!r} inference is not linear in the noisy answers: the "
                             f"table's marginals have no analytic error (simulate to measure it)")
        if self.interval_method == "parametric bootstrap":
            return self.bootstrap().std()
        factor = variance_factor(self.strategy, self.noise) if self.sampler == "discrete" else 1.0
        return error.per_query_rmse(self.workload, self.strategy, self.noise) * math.sqrt(factor)

    def confidence_intervals(self, level: float = 0.95) -> pd.DataFrame:
        """Per answer: ``ci_low``, ``ci_high`` and the ``ci_method`` key (see :data:`CI_METHODS`).

        Data-dependent releases get NaN bounds and method ``"none"``; a
        non-linear inference gets the basic intervals of its parametric
        bootstrap (method ``"parametric bootstrap"``, :meth:`bootstrap`).

        Raises
        ------
        ValueError
            If ``level`` is outside (2/3, 1).
        """
        if self.interval_method == "none" or self.strategy is None:
            nan = np.full(self.answers.size, np.nan)
            return pd.DataFrame({"ci_low": nan, "ci_high": nan, "ci_method": "none"})
        if self.interval_method == "parametric bootstrap":
            if not 2.0 / 3.0 < float(level) < 1.0:
                raise ValueError(f"the confidence level must be in (2/3, 1), got {level!r}")
            low, high = self.bootstrap().interval(level)
            return pd.DataFrame({"ci_low": low, "ci_high": high, "ci_method": "parametric bootstrap"})
        if level not in self._intervals:
            self._intervals[level] = confidence_half_widths(
                self.workload, self.strategy, self.noise, self.sampler or "continuous", level)
        h, method = self._intervals[level]
        return pd.DataFrame({"ci_low": self.answers - h, "ci_high": self.answers + h,
                             "ci_method": method})

    def metadata(self, level: float = 0.95) -> dict:
        """JSON-ready description of the release (no seed, no true answers, nothing else from ``x``).

        Mechanism and parameters, noise model, calibration and sampler,
        ε/δ/ρ spent, sensitivity, workload spec, package version, time, the
        source of randomness, the inference and how the confidence intervals
        were made (a bootstrap adds its draws, seed and RMSE).  A simulation
        adds its ``seed`` and says it is not a release.
        """
        from . import __version__
        from .queries import spec as _spec

        try:
            wspec = _spec.to_spec(self.workload)
        except ValueError:
            wspec = None
        sens = None if self.strategy is None else self.strategy.sensitivity(self.noise.norm)
        if self.mode == RELEASE:
            randomness = "OS CSPRNG via opendp"
        else:
            randomness = "numpy PCG64 Generator seeded by `seed` (simulation, NOT a release)"
        meta = {
            "dpexplorer_version": __version__,
            "mode": self.mode,
            "randomness": randomness,
            "mechanism": self.mechanism,
            "params": _json_safe(self.params),
            "data_dependent": self.data_dependent,
            "noise": type(self.noise).__name__,
            "noise_label": self.noise.label,
            "calibration": getattr(self.noise, "calibration", None),
            "sampler": (self.sampler if self.sampler else "per stage, see the privacy ledger"),
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho,
            "sensitivity": sens,
            "sensitivity_norm": f"L{self.noise.norm}",
            "strategy_rows": None if self.strategy is None else self.strategy.m,
            "workload": self.workload.name,
            "workload_spec": wspec,
            "m": self.workload.m,
            "n": self.workload.n,
            "domain": list(self.workload.domain),
            "analytic_rmse": None if math.isnan(self.analytic_rmse) else self.analytic_rmse,
            "confidence_level": level,
            "confidence_methods": {k: v for k, v in self.CI_METHODS.items()
                                   if k in set(self.confidence_intervals(level)["ci_method"])},
            "inference": self.inference,
            "interval_method": self.interval_method,
            "created": self.created,
        }
        if self.interval_method == "parametric bootstrap":
            boot = self.bootstrap()
            meta["bootstrap"] = {"draws": boot.draws, "seed": boot.seed, "interval": "basic",
                                 "rmse": boot.rmse(),
                                 "randomness": "numpy PCG64 Generator seeded by `seed` (simulation "
                                               "of the public noise model, not a release)"}
        if self.table is not None:
            meta["table"] = {"name": self.table.name, "attributes": list(self.table.domain.names),
                             "cells": [a.size for a in self.table.domain.attributes]}
        if self.mode == SIMULATION:
            meta["seed"] = self.seed
        return meta

    def marginals(self, level: float = 0.95) -> list[dict]:
        """The answers as one table per workload marginal, with std and interval per cell.

        For a workload that is a union of Kronecker products of identity and
        total factors (marginals): one dict per term with ``attributes``
        (names, or axis indices without a table), ``shape``, ``answer``,
        ``std``, ``ci_low``, ``ci_high`` (arrays of that shape) and ``labels``
        (per axis, the cell labels when the release is from a table).

        Raises
        ------
        ValueError
            If the workload is not a union of marginals.
        """
        terms = marginal_terms(self.workload)
        if terms is None:
            raise ValueError(f"workload {self.workload.name!r} is not a union of marginals")
        frame = self.to_frame(level=level)
        dom = self.table.domain if self.table is not None else None
        out = []
        for axes, rows in terms:
            shape = tuple(self.workload.domain[i] for i in axes)
            part = {"attributes": tuple(dom.names[i] for i in axes) if dom else axes, "shape": shape,
                    "labels": [dom.attributes[i].labels() for i in axes] if dom else None}
            for col in ("answer", "std", "ci_low", "ci_high"):
                part[col] = frame[col].to_numpy()[rows].reshape(shape)
            out.append(part)
        return out

    def query_labels(self) -> list[str] | None:
        """A plain description of every answer, e.g. ``"Region=South, Segment=Consumer"`` or ``"[3, 17]"``.

        ``None`` when the workload has no such structure (explicit rows).
        """
        terms = marginal_terms(self.workload)
        if terms is not None:
            names = (self.table.domain.names if self.table is not None
                     else tuple(f"a{i}" for i in range(len(self.workload.domain))))
            labels = ([a.labels() for a in self.table.domain.attributes] if self.table is not None
                      else [[str(c) for c in range(n)] for n in self.workload.domain])
            out = []
            for axes, _ in terms:
                if not axes:
                    out.append("total")
                    continue
                grids = np.meshgrid(*[np.arange(self.workload.domain[i]) for i in axes], indexing="ij")
                for cell in zip(*(g.ravel() for g in grids), strict=True):
                    out.append(", ".join(f"{names[i]}={labels[i][c]}" for i, c in zip(axes, cell, strict=True)))
            return out
        ranges = getattr(self.workload, "ranges", None)
        if callable(ranges) and len(self.workload.domain) == 1:
            lo, hi = ranges()
            return [f"[{a}, {b}]" for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
        return None

    def to_frame(self, with_std: bool = True, level: float = 0.95) -> pd.DataFrame:
        """Answers as a table: ``query``, ``answer`` and (with ``with_std``) ``std``, ``ci_low``, ``ci_high``, ``ci_method``.

        A ``label`` column after ``query`` says what each answer counts
        (:meth:`query_labels`) when the workload has that structure.
        """
        df = pd.DataFrame({"query": np.arange(self.answers.size), "answer": self.answers})
        labels = self.query_labels() if self.answers.size <= 10**6 else None
        if labels is not None:
            df.insert(1, "label", labels)
        if with_std:
            df["std"] = (np.full(self.answers.size, np.nan) if self.interval_method == "none"
                         else self.per_query_std())
            df = pd.concat([df, self.confidence_intervals(level)], axis=1)
        return df

    def to_json(self, level: float = 0.95) -> str:
        """Metadata and, per answer, value, std and confidence interval, as one JSON document."""
        frame = self.to_frame(level=level)
        rows = {("answers" if c == "answer" else c): _json_safe(frame[c].to_numpy())
                for c in frame.columns if c not in ("query", "label")}
        if "label" in frame:
            rows["labels"] = frame["label"].tolist()
        rows = {c: [None if isinstance(v, float) and math.isnan(v) else v for v in vals]
                for c, vals in rows.items()}
        return json.dumps({**self.metadata(level), **rows})


def marginal_terms(W: Matrix):
    """``[(axes, rows)]`` if ``W`` is a union of marginals (Kronecker products of identity and total factors).

    ``axes`` are the attributes a term keeps (its identity factors), ``rows``
    the slice of ``W``'s rows it answers (C order over ``axes``); ``None``
    for any other workload.
    """
    terms = error.kron_terms(W)
    if terms is None:
        return None
    out, start = [], 0
    for _weight, factors in terms:
        axes = []
        for i, f in enumerate(factors):
            if isinstance(f, Identity):
                axes.append(i)
            elif not (isinstance(f, Ones) and f.m == 1):
                return None
        rows = math.prod(factors[i].m for i in axes) if axes else 1
        out.append((tuple(axes), slice(start, start + rows)))
        start += rows
    return out if start == W.m else None


def _make_table(table, W, mechanism, noise, source, ledger, params, seed,
                out_of_domain: str = "drop", inference: str = DEFAULT_INFERENCE) -> Release:
    """:func:`_make` for a record table: MEASURE from marginal counts, answers without ``x̂``.

    A release refuses a domain read from the records (``domain.source ==
    "data"``) and ``out_of_domain="error"`` before anything is counted or spent.
    ``inference`` (:data:`TABLE_INFERENCES`): ``"grem_lnn"`` and ``"pgm"``
    (:func:`dpexplorer.strategies.marginal_inference.infer_marginals`:
    consistent, non-negative marginals; post-processing of ``y``) apply to a
    ResidualPlanner strategy answering a union of unweighted marginals, and
    are checked before anything is spent.
    """
    check_out_of_domain(out_of_domain, release=source is OS_CSPRNG)
    if source is OS_CSPRNG and table.domain.inferred:
        raise ValueError(f"dpx.release refuses the table {table.name!r}: {DATA_DOMAIN_REFUSAL}")
    data = PrivateTable(table, ledger, out_of_domain)
    if tuple(W.domain) != tuple(table.shape):
        raise ValueError(f"the workload's domain is {tuple(W.domain)} but the table {table.name!r} has "
                         f"attributes {list(table.domain.names)} with {tuple(table.shape)} cells; build "
                         "the workload over the table's domain")
    use = " or ".join(registry.names(tables=True)) or "a mechanism registered with tables=True"
    if isinstance(mechanism, str):
        mech = registry.get(mechanism)
        if mech.data_dependent:
            raise registry.NotApplicableError(
                f"{mechanism!r} is data-dependent and needs the full data vector; a table release "
                f"measures marginals: use {use}")
        if not mech.tables:  # the registry says so: refused before any strategy is built
            raise registry.NotApplicableError(
                f"{mechanism!r} cannot be measured from marginal counts (it needs the data vector "
                f"of all {table.domain.cells:,} cells); use {use} with Gaussian noise")
        A = mech.strategy(W, noise, **dict(params or {}))
        name, params = mechanism, {**mech.params, **dict(params or {})}
    else:
        A, name = as_matrix(mechanism), as_matrix(mechanism).name
    limits.check("strategy_rows", A.m, f"release: rows of strategy {name!r}")
    if getattr(A, "marginal_measure", None) is None or getattr(A, "answer", None) is None:
        raise registry.NotApplicableError(
            f"{name!r} cannot be measured from marginal counts (it needs the data vector of all "
            f"{table.domain.cells:,} cells); use {use} with Gaussian noise")
    tse = error.expected_tse(W, A, noise)  # raises if A does not support W
    terms = _check_table_inference(inference, A, W, name)
    y = data.measure(A, noise, source, label=f"{name}: measure {A.m} strategy queries from "
                                              f"marginals of {table.name!r}"
                                              + _ledger_note(inference))
    # a strategy measured from marginals (ResidualPlanner's) answers W itself: not None
    answers: np.ndarray = _strategy_answers(A, W, y)  # type: ignore[assignment]
    rmse = math.sqrt(tse / W.m)
    if inference != DEFAULT_INFERENCE:
        names = tuple(table.domain.names)
        sets = [tuple(names[i] for i in axes) for axes, _ in terms]
        plan = A.plan  # type: ignore[attr-defined]  # ResidualPlanner's (checked above)
        measured = marginal_inference.ResidualMeasurements(plan, y, noise.variance_per_unit)
        tables = marginal_inference.infer_marginals(measured, table.domain, inference, sets=sets)
        answers = np.empty(W.m)
        for key, (_, rows) in zip(sets, terms, strict=True):
            answers[rows] = tables[key].ravel()
        rmse = math.nan  # not linear in y: no analytic error
    return Release(mechanism=name, workload=W, strategy=A, noise=noise,
                   mode=RELEASE if source is OS_CSPRNG else SIMULATION, y=y, x_hat=None,
                   answers=answers, epsilon=noise.epsilon, delta=noise.delta,
                   rho=noise.rho_per_unit, analytic_rmse=rmse, sampler="continuous",
                   params=dict(params or {}), seed=seed, table=table.public(), inference=inference)


def _check_table_inference(inference: str, A, W: Matrix, name: str) -> list:
    """The marginal terms of ``W`` when ``inference`` needs them (``[]`` for least squares).

    Raises
    ------
    NotApplicableError
        If ``"grem_lnn"``/``"pgm"`` is asked of a strategy other than
        ResidualPlanner's or a workload other than a union of unweighted marginals.
    ImportError
        For ``"pgm"`` without the ``pgm`` extra (``mbi``).
    """
    if inference == DEFAULT_INFERENCE:
        return []
    terms = marginal_terms(W)
    weights = error.kron_terms(W) or []
    if getattr(A, "plan", None) is None or terms is None or any(w != 1 for w, _ in weights):
        raise registry.NotApplicableError(
            f"inference={inference!r} makes consistent non-negative marginals from ResidualPlanner's "
            f"measurements of a union of unweighted marginals; {name!r} on workload {W.name!r} is not "
            f"that: use mechanism='residual_planner' with a marginal workload, or inference="
            f"{DEFAULT_INFERENCE!r}")
    marginal_inference.require(inference)
    return terms


def _make(x, W, mechanism, noise, source, ledger, params, counts, seed,
          out_of_domain: str = "drop", inference: str | None = None,
          bootstrap_draws: int = BOOTSTRAP_DRAWS, bootstrap_seed: int = BOOTSTRAP_SEED) -> Release:
    """The one computation behind :func:`release` (``source`` = OS CSPRNG) and :func:`simulate`.

    Every argument is checked before the data is looked at or anything large
    is built: the noise model, the mechanism and its parameters, the sizes
    of the answers and of the strategy (limits ``queries``, ``strategy_rows``),
    then the data (:func:`~dpexplorer.privacy.validate_counts`, the
    workload's domain shape exactly).
    """
    if noise is None:
        raise ValueError("a release needs a noise model, e.g. dpx.Laplace(1.0)")
    noise = check_noise(noise)
    W = as_matrix(W)
    check_has_queries(W, "release")
    if params is not None and not isinstance(params, dict):
        raise TypeError(f"params must be a dict of the mechanism's parameters, got {type(params).__name__} "
                        f"{params!r}")
    params = dict(params or {})
    if isinstance(mechanism, str):
        registry.get(mechanism).check_params(params)
    elif isinstance(mechanism, Matrix | np.ndarray) or scipy.sparse.issparse(mechanism):
        mechanism = as_matrix(mechanism)  # ValueError for NaN/inf entries
    else:
        given = mechanism
        try:  # nested lists of numbers are a strategy matrix; ['hb'] or 12 are mistakes
            mechanism = as_matrix(given) if isinstance(given, list | tuple) else None
        except (TypeError, ValueError):
            mechanism = None
        if mechanism is None:
            raise TypeError("mechanism must be a registered name (str, e.g. 'hb'; see dpx.registry.names()) "
                            f"or a strategy matrix of numbers, got {type(given).__name__} {given!r:.80}")
    limits.check("queries", W.m, f"release: answers (queries of workload {W.name!r})")
    bootstrap_draws = limits.whole_number(bootstrap_draws, "release: bootstrap_draws", minimum=2)
    bootstrap_seed = limits.whole_number(bootstrap_seed, "release: bootstrap_seed", minimum=0)
    if isinstance(x, Table):
        if inference not in (None, *TABLE_INFERENCES):
            raise ValueError(f"inference for a release from a record table must be one of "
                             f"{list(TABLE_INFERENCES)} (it never forms the estimate x_hat over every "
                             f"cell that {inference!r} needs), got {inference!r:.60}")
        return _make_table(x, W, mechanism, noise, source, ledger, params, seed, out_of_domain,
                           inference or DEFAULT_INFERENCE)
    inference = _resolve_inference(mechanism, inference)
    if out_of_domain != "drop":
        raise ValueError("out_of_domain applies to record tables only (a data vector has no records "
                         "outside its domain)")
    data = PrivateData(x, ledger, counts=counts)
    check_shape(data.domain, W.domain, "x")
    mode = RELEASE if source is OS_CSPRNG else SIMULATION
    common = dict(noise=noise, mode=mode, epsilon=noise.epsilon, delta=noise.delta,
                  rho=noise.rho_per_unit, seed=seed, inference=inference,
                  bootstrap_draws=bootstrap_draws, bootstrap_seed=bootstrap_seed)
    if isinstance(mechanism, str) and registry.get(mechanism).data_dependent:
        mech = registry.get(mechanism)
        # reserves the whole cost first
        est = run(mechanism, data, W, noise, source, inference=inference, **params)
        x_hat = np.asarray(est.x_hat, dtype=float)
        answers = W.matvec(x_hat) if est.answers is None else np.asarray(est.answers, dtype=float)
        return Release(mechanism=mechanism, workload=W, strategy=None, y=None, x_hat=x_hat,
                       answers=answers, analytic_rmse=math.nan, sampler=None,
                       params={**mech.params, **params},
                       info={k: v for k, v in est.info.items() if k not in ("strategy", "inference")},
                       **common)
    if isinstance(mechanism, str):
        name = mechanism
        mech = registry.get(name)
        A = mech.strategy(W, noise, **params)
        params = {**mech.params, **params}
    else:
        A = as_matrix(mechanism)
        name = A.name
    limits.check("strategy_rows", A.m, f"release: rows of strategy {name!r}")
    tse = error.expected_tse(W, A, noise)  # raises if A does not support W
    sampler = noise_sampler(A, noise, data.counts)
    y = data.measure(A, noise, source, label=f"{name}: measure {A.m} strategy queries"
                     + _ledger_note(inference))
    if inference == DEFAULT_INFERENCE:
        x_hat = reconstruct(A, y)
        answers = _strategy_answers(A, W, y)
        factor = variance_factor(A, noise, data.counts)
        return Release(mechanism=name, workload=W, strategy=A, y=y, x_hat=x_hat,
                       answers=W.matvec(x_hat) if answers is None else answers,
                       analytic_rmse=math.sqrt(tse * factor / W.m), sampler=sampler,
                       params=params, **common)
    # a non-linear inference (post-processing of y): no analytic error, bootstrap intervals
    solver = _inference.make_solver(inference, A)
    x_hat = solver(y)
    return Release(mechanism=name, workload=W, strategy=A, y=y, x_hat=x_hat, answers=W.matvec(x_hat),
                   analytic_rmse=math.nan, sampler=sampler, params=params, _solver=solver, **common)


def release(x, W, mechanism="identity", noise: NoiseModel | None = None,
            ledger: PrivacyLedger | None = None, params: dict | None = None, *,
            counts: bool = True, out_of_domain: str = "drop", inference: str | None = None,
            bootstrap_draws: int = BOOTSTRAP_DRAWS, bootstrap_seed: int = BOOTSTRAP_SEED,
            **unexpected) -> Release:
    """Release DP answers of workload ``W`` on data ``x`` (OS CSPRNG via opendp; no seed).

    Parameters
    ----------
    x : array_like, shape (n,) or the workload's domain shape, or Table
        Private counts (non-negative whole numbers at most 2**53; see
        ``counts``; a grid of another shape with as many cells is refused), or a
        record :class:`~dpexplorer.queries.domain.Table` (pandas or dask):
        the kernel then counts the marginals the strategy needs by group-by
        and never forms ``x`` (strategies with ``marginal_measure``, i.e.
        ``residual_planner``; the release has ``x_hat = None`` and
        :meth:`Release.marginals`).
    W : Matrix or array, shape (m, n)
        Workload (over the table's domain for a table).
    mechanism : str or Matrix
        A registry name (``identity``, ``h2``, ``hb``, ``wavelet``,
        ``greedy_h``, ...; data-dependent ones such as ``dawa`` run through
        :func:`run`) or a strategy matrix ``A: (p, n)``.
    noise : NoiseModel
        ``Laplace(ε)`` or ``Gaussian(ε, δ, calibration="zcdp")`` (a release's
        Gaussian noise is accounted in zCDP).
    ledger : PrivacyLedger, optional
        The dataset's ledger: its budget is checked before any noise is drawn
        and the spend recorded there.
    params : dict, optional
        Parameters for the registered mechanism's builder.
    counts : bool
        ``True`` (default): ``x`` must hold counts.  ``False`` accepts
        fractional or signed weights of magnitude at most 2**53 (continuous
        samplers only).
    out_of_domain : {"drop"}
        For a table: records outside its public domain are dropped before
        counting (neither their number nor their values are reported);
        ``"error"`` is refused here (it would publish that such records exist;
        :func:`simulate` allows it).
    inference : {"least_squares", "nonnegative", "grem_lnn", "pgm"}, optional
        How ``x̂`` is inferred from the noisy answers (post-processing; see
        :mod:`dpexplorer.core.inference` and ``dpexplorer/docs/inference.md``).
        Default: least squares, with analytic error (``"native"`` for a
        data-dependent mechanism without a least-squares stage).  For a
        record table with ResidualPlanner and a marginal workload,
        ``"grem_lnn"`` (Mullins et al., NeurIPS 2024) or ``"pgm"``
        (Private-PGM, McKenna, Sheldon & Miklau, ICML 2019; extra ``pgm``)
        make the marginals consistent and non-negative (no analytic error, no
        intervals).
        ``"nonnegative"``: non-negative least squares, ``x̂ >= 0``; its std
        and intervals come from a parametric bootstrap of the noise
        (``analytic_rmse`` is NaN).  For DAWA and its partition variants it
        applies to stage 2's bucket counts.  :func:`inferences` lists what
        applies to a mechanism.
    bootstrap_draws : int
        Draws of that bootstrap (>= 2, default 200).
    bootstrap_seed : int
        Seed (>= 0) of the bootstrap's simulation Generator, recorded in the
        metadata (it redraws the public noise model, never the release's noise).

    Returns
    -------
    Release
        ``mode = "release"``, no seed; answers with standard errors and
        confidence intervals (data-independent mechanisms: analytic for least
        squares, bootstrap otherwise).

    Raises
    ------
    TypeError
        If a ``seed`` is passed (a release has none: use :func:`simulate`), or
        ``noise``, ``ledger``, ``mechanism`` or ``params`` have the wrong type.
    ValueError
        If ``x`` is a Table whose domain was read from its records
        (``Domain.source == "data"``: declare one with ``dpx.Domain(...)`` /
        ``dpx.Domain.from_file`` or discover one with
        ``dpx.discover_domain``), ``out_of_domain`` is not ``"drop"``,
        if ``x`` is not valid counts (:func:`~dpexplorer.privacy.validate_counts`),
        does not have the workload's domain shape (or its flattening), no
        noise model is given, a parameter is unknown to the mechanism, the
        inference does not apply to it (:func:`inferences`; a record table
        allows :data:`TABLE_INFERENCES`), ``bootstrap_draws`` < 2 or ``bootstrap_seed`` < 0,
        Gaussian noise is not zCDP-calibrated, or the mechanism is registered
        as not private (``registry.Mechanism.private``, e.g. ``dawa_as_published``).
    KeyError
        If the mechanism name is not registered.
    LimitExceededError
        If the workload has more queries than the ``queries`` limit (its
        answers are materialised) or the strategy more rows than
        ``strategy_rows`` -- checked before any noise is drawn.
    UnsupportedWorkloadError
        If the strategy does not support the workload.
    BudgetExceededError
        If the ledger's budget would be exceeded (nothing is drawn).
    """
    if "seed" in unexpected:
        raise TypeError("a release has no seed: its noise comes from the OS CSPRNG. For a "
                        "reproducible run use dpx.simulate(x, W, mechanism, noise, seed=...)")
    if unexpected:
        raise TypeError(f"release() got unexpected argument(s) {sorted(unexpected)}")
    if isinstance(mechanism, str):
        _refuse_non_private(registry.get(mechanism))  # before anything is validated or drawn
    return _make(x, W, mechanism, noise, OS_CSPRNG, ledger, params, counts, None, out_of_domain,
                 inference, bootstrap_draws, bootstrap_seed)


def simulate(x, W, mechanism="identity", noise: NoiseModel | None = None, seed: int | None = None,
             ledger: PrivacyLedger | None = None, params: dict | None = None, *,
             counts: bool = True, out_of_domain: str = "drop", inference: str | None = None,
             bootstrap_draws: int = BOOTSTRAP_DRAWS, bootstrap_seed: int = BOOTSTRAP_SEED) -> Release:
    """A **simulation** of :func:`release`: the same mechanism with a seeded numpy Generator.

    Reproducible bit for bit from ``seed``; labelled ``mode = "simulation"``
    (its metadata carries the seed and says it is not a release).  For
    empirical error, bands and teaching -- never for publication.

    Parameters
    ----------
    x, W, mechanism, noise, ledger, params, counts, inference, bootstrap_draws, bootstrap_seed
        As for :func:`release` (any Gaussian calibration is allowed here; a
        table whose domain was read from its records is accepted).
    out_of_domain : {"drop", "error"}
        For a table: drop records outside its domain (default), or raise a
        ValueError naming the attribute and the number of such records.
    seed : int
        Seed of ``numpy.random.default_rng`` (required, ≥ 0).

    Returns
    -------
    Release
        ``mode = "simulation"``, ``seed`` set.

    Raises
    ------
    ValueError
        If ``seed`` is missing or not a non-negative integer, or as :func:`release`.
    """
    if seed is None:
        raise ValueError("a simulation needs an explicit seed, a whole number >= 0 (seed=0, 1, ...)")
    seed = limits.whole_number(seed, "simulate: seed", minimum=0)
    return _make(x, W, mechanism, noise, np.random.default_rng(seed), ledger, params, counts, seed,
                 out_of_domain, inference, bootstrap_draws, bootstrap_seed)


# =================================================================== answer bands
#: Mixed into the seed of :func:`answer_bands` (``SeedSequence([seed, TRIAL_SEED_TAG]).spawn(trials)``).
TRIAL_SEED_TAG = 0x7E1A15


@dataclass(frozen=True)
class AnswerBands:
    """Seeded trials of a mechanism on the same data: the spread of each answer and the error.

    Attributes
    ----------
    mechanism : str
    trials : int
    seed : int
        Trial ``t`` ran with ``default_rng(SeedSequence([seed, TRIAL_SEED_TAG]).spawn(trials)[t])``.
    shown : numpy.ndarray of int, shape (k,)
        Queries whose bands are kept.
    q05, q50, q95 : numpy.ndarray, shape (k,)
        5 %, 50 % and 95 % quantiles (numpy's default, linear) of each shown
        query's answer over the trials, in counts.
    empirical_rmse : float
        ``sqrt(mean((W x̂_t − W x)²))`` over all ``m`` queries and all trials (counts).
    trial_rmse : numpy.ndarray, shape (trials,)
        RMSE of every trial over all ``m`` queries (counts).
    ledger : PrivacyLedger
        The throwaway ledger the trials spent from (``trials`` charges).
    """

    mechanism: str
    trials: int
    seed: int
    shown: np.ndarray
    q05: np.ndarray
    q50: np.ndarray
    q95: np.ndarray
    empirical_rmse: float
    trial_rmse: np.ndarray
    ledger: PrivacyLedger


def answer_bands(x, W, mechanism: str, noise: NoiseModel, trials: int, seed: int,
                 shown=None, progress: Callable[[int], None] | None = None,
                 inference: str | None = None) -> AnswerBands:
    """Run ``mechanism`` ``trials`` times on ``x`` (a simulation) and summarise the answers.

    What a release of the same mechanism would show, trial after trial: the
    5–95 % band of each answer and the empirical RMSE, for data-dependent
    mechanisms too (DAWA, MWEM, ...), whose error has no formula.  The trials
    spend from a new :class:`~dpexplorer.privacy.PrivacyLedger` of their own:
    this is a simulation on data treated as public (as in DPBench), never a
    release.  Answers are ``W x̂`` of each run (or the mechanism's own answers,
    e.g. OPT+'s local least squares).

    Parameters
    ----------
    x : array_like, shape (n,) or the workload's domain shape
        Counts.
    W : Matrix, shape (m, n)
    mechanism : str
        Registry name.
    noise : NoiseModel
    trials : int
        Runs (>= 1).
    seed : int
        Base seed (>= 0); see :attr:`AnswerBands.seed`.
    shown : array_like of int, optional
        Queries whose bands to keep (default all ``m``; keep it small for a
        large workload: the bands hold ``len(shown) × trials`` answers).
    progress : callable, optional
        ``progress(t)`` after trial ``t`` (1-based).
    inference : str, optional
        As for :func:`run` (default: the mechanism's default, least squares).

    Returns
    -------
    AnswerBands

    Raises
    ------
    ValueError
        If ``trials`` or ``seed`` is not a whole number (>= 1, >= 0), ``shown``
        has an index outside ``[0, m)``, or ``x`` does not fit ``W``.
    KeyError, NotApplicableError
        As :func:`run`.
    """
    check_noise(noise)
    _resolve_inference(mechanism, inference)  # before any work
    W = as_matrix(W)
    trials = limits.whole_number(trials, "answer_bands: trials")
    seed = limits.whole_number(seed, "answer_bands: seed", minimum=0)
    x = np.asarray(x, dtype=float)
    if x.size != W.n:
        raise ValueError(f"x has {x.size:,} cells but the workload is over {W.n:,}")
    shown = np.arange(W.m) if shown is None else np.asarray(shown, dtype=np.int64).ravel()
    if shown.size and (shown.min() < 0 or shown.max() >= W.m):
        raise ValueError(f"shown queries must be in [0, {W.m}), got {shown.min()}..{shown.max()}")
    true = W.matvec(x.ravel())
    ledger = PrivacyLedger()
    data = PrivateData(x, ledger)
    children = np.random.SeedSequence([seed, TRIAL_SEED_TAG]).spawn(trials)
    kept = np.empty((shown.size, trials))
    trial_rmse = np.empty(trials)
    sse = 0.0
    for t, child in enumerate(children):
        est = run(mechanism, data, W, noise, np.random.default_rng(child), inference=inference)
        answers = (W.matvec(np.asarray(est.x_hat, dtype=float)) if est.answers is None
                   else np.asarray(est.answers, dtype=float))  # OPT+: local least squares
        err = answers - true
        sse += float(err @ err)
        trial_rmse[t] = error.empirical_rmse(answers, true)
        kept[:, t] = answers[shown]
        if progress is not None:
            progress(t + 1)
    q05, q50, q95 = np.quantile(kept, [0.05, 0.5, 0.95], axis=1)
    return AnswerBands(mechanism, trials, seed, shown, q05, q50, q95,
                       math.sqrt(sse / (W.m * trials)), trial_rmse, ledger)
