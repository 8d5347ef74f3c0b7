"""HDMM's meta-optimiser: run the applicable optimisers, keep the best strategy (HDMM Sec. 9).

Strategy selection is independent of the data and spends no privacy budget,
so HDMM runs every optimisation operator that applies to the workload --
OPT0 on the dense Gram matrix when the domain is small, OPT⊗, OPT+ when the
workload has several product terms, OPT_M (marginal strategies,
:func:`dpexplorer.strategies.marginals.opt_m`) -- each with random restarts, and keeps
the strategy with the lowest expected error (unit-noise TSE
``Δ_p(A)² · tr(WᵀW (AᵀA)⁺)``, HDMM Prop. 4).  Sub-results are memoised per
workload object (:func:`dpexplorer.strategies.templates.memoised`), so building
``"opt0"`` and then ``"hdmm"`` for the same workload optimises once.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..core import optimization, registry
from ..core.error import UnsupportedWorkloadError
from ..privacy.noise import NoiseModel
from ..queries.matrix import MatrixTooLargeError, as_matrix
from . import templates

__all__ = ["hdmm"]

_SKIPPED = (registry.NotApplicableError, MatrixTooLargeError, UnsupportedWorkloadError)


def _opt_m(W, noise, restarts, seed):
    from . import marginals  # written alongside; imported late so HDMM works without it

    opt_m = getattr(marginals, "opt_m", None)
    if opt_m is None:  # pragma: no cover - only while marginals.py is a placeholder
        raise registry.NotApplicableError("OPT_M is not available (dpexplorer.strategies.marginals.opt_m)")
    kwargs = {"seed": seed} if restarts is None else {"restarts": restarts, "seed": seed}
    return templates.memoised("opt_m", W, noise.norm, kwargs, lambda: opt_m(W, noise, **kwargs))


def hdmm(W, noise: NoiseModel, restarts: int | None = None, seed: int = 0,
         maxiter: int | None = None, include=None) -> optimization.OptimizationResult:
    """HDMM: the lowest-error strategy among OPT0, OPT⊗, OPT+ and OPT_M (HDMM Sec. 9).

    Candidates: OPT0 when the domain has at most
    ``templates.OPT0_MAX_CELLS[norm]`` cells (4096 Laplace, 2048 Gaussian;
    ``templates.OPT0_MAX_CELLS_STRUCTURED`` = 16384 for Laplace and a workload
    whose Gram has fast products, such as ranges); OPT⊗ (skipped for a 1D workload of
    one term, where it is OPT0); OPT+ when the workload has several product
    terms; OPT_M.  A candidate that does not apply (``NotApplicableError``,
    too large, unsupported) is skipped with its reason.  All candidates use
    the same ``restarts`` and ``seed``; the selection looks only at the
    public analytic error, never at data.

    Parameters
    ----------
    W : Matrix, shape (m, n)
        The workload.
    noise : NoiseModel
        ``Laplace(ε)`` or ``Gaussian(ε, δ)``; only its norm matters.
    restarts : int, optional
        Random restarts of every optimiser (default: each optimiser's own).
    seed : int
        Seed of every optimiser (deterministic given it).
    maxiter : int, optional
        Iterations per OPT0 run (default as in :func:`dpexplorer.strategies.templates.opt0`).
    include : iterable of str, optional
        Restrict the candidates to these of ``"opt0"``, ``"opt_kron"``,
        ``"opt_plus"``, ``"opt_m"``.

    Returns
    -------
    OptimizationResult
        The winner's strategy (a copy), objective, trace and restarts, with
        ``method="hdmm"`` and ``info``: ``winner``, ``candidates`` (objective
        of every candidate, NaN when skipped), ``skipped`` (reasons),
        ``seconds`` per candidate.

    Raises
    ------
    ValueError
        Bad parameters or an unknown name in ``include``.
    NotApplicableError
        If no candidate applies.
    """
    norm = templates._norm_of(noise)
    W = as_matrix(W)
    names = ["opt0", "opt_kron", "opt_plus", "opt_m"]
    if include is not None:
        include = list(include)
        bad = sorted(set(include) - set(names))
        if bad or not include:
            raise ValueError(f"include must name some of {names}, got {include!r}")
        names = [n for n in names if n in include]
    templates._check_count(restarts, "restarts")
    templates._check_count(maxiter, "maxiter")
    templates._check_seed(seed)
    t0 = time.perf_counter()
    terms = templates.product_terms(W)
    n_terms = len(terms)
    one_d = {len(f) for _, f in terms} == {1}
    runners = {
        "opt0": lambda: templates.cached_opt0(W, noise, restarts, seed, maxiter),
        "opt_kron": lambda: templates.cached_opt_kron(W, noise, restarts, seed, maxiter),
        "opt_plus": lambda: templates.cached_opt_plus(W, noise, None, restarts, seed, maxiter),
        "opt_m": lambda: _opt_m(W, noise, restarts, seed),
    }
    results: dict[str, optimization.OptimizationResult] = {}
    skipped: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for i, name in enumerate(names):
        if name == "opt_kron" and one_d and n_terms == 1 and "opt0" in results:
            skipped[name] = "a 1D workload of one term: OPT⊗ is OPT0"
            continue
        if name == "opt_plus" and n_terms == 1:
            skipped[name] = "one product term: OPT+ is OPT⊗"
            continue
        optimization.report(f"hdmm: {name}", i, len(names), float("nan"))
        t = time.perf_counter()
        try:
            results[name] = runners[name]()
        except _SKIPPED as exc:
            skipped[name] = str(exc)
        seconds[name] = time.perf_counter() - t
    if not results:
        raise registry.NotApplicableError(
            "HDMM found no applicable optimiser for this workload: "
            + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    winner = min(results, key=lambda k: (results[k].objective, names.index(k)))
    best = results[winner]
    optimization.report("hdmm", len(names), len(names), best.objective)
    info = {
        "norm": norm,
        "winner": winner,
        "candidates": {k: (results[k].objective if k in results else math.nan) for k in names},
        "skipped": skipped,
        "seconds": seconds,
        "winner_info": dict(best.info),
    }
    return optimization.OptimizationResult(
        strategy=best.strategy, objective=float(best.objective), trace=np.asarray(best.trace),
        restarts=np.asarray(best.restarts), seconds=time.perf_counter() - t0, seed=seed,
        method="hdmm", info=info)


def _build_hdmm(W, noise, restarts=None, seed=0, maxiter=None):
    W = as_matrix(W)
    params = {"restarts": restarts, "seed": seed, "maxiter": maxiter}
    result = templates.memoised("hdmm", W, noise.norm, params,
                                lambda: hdmm(W, noise, **params))
    return templates.fresh(result)


registry.register(registry.Mechanism(
    "hdmm", "HDMM", _build_hdmm,
    "Runs OPT0 (small domains), OPT⊗, OPT+ and OPT_M with restarts and keeps the strategy "
    "with the lowest expected error.",
    "McKenna et al., HDMM, Sec. 9",
    params={"restarts": None, "seed": 0, "maxiter": None}, optimizer=True))
