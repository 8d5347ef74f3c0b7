"""The numbers of the explorer's four guided lessons, computed without any UI.

The Learn page (:mod:`dpexplorer.ui.learn`) explains four ideas and draws each
with the numbers of this module; a notebook or a test gets the same numbers by
calling it directly:

1. :func:`noise_lesson`: densities of Laplace and Gaussian noise for one
   sensitivity Δ (Dwork & Roth 2014, Def. 3.3 and Thm A.1; the analytic
   Gaussian of Balle & Wang 2018, Thm 8; the zCDP calibration of Bun &
   Steinke 2016, Prop. 1.6).
2. :func:`strategy_lesson`: analytic RMSE per query of the workload itself,
   Identity, H2 and HB on All Range queries (HDMM, McKenna et al. 2018,
   Prop. 4), against the domain size and by range length.
3. :func:`bound_lesson`: every data-independent strategy against the SVD
   lower bound of Li & Miklau (2012), via :func:`dpexplorer.compare`.
4. :func:`data_lesson`: a seeded simulation of DAWA (Li et al. 2014) against
   Identity and HB on an "easy" and a "hard" histogram (synthetic, or the
   DPBench pair NETTRACE/HEPTH of Hay et al. 2016), data treated as public.

Example::

    import dpexplorer as dpx
    from dpexplorer import lessons

    r = lessons.strategy_lesson(dpx.Laplace(1.0), n_max=256, example_n=64)
    r["grid"]            # n, mechanism, label, m, rmse (counts)
    r["factor"]          # how many times smaller the best strategy's RMSE is than W's

The heavy, data-independent numbers (strategies' unit-noise errors, per-query
variances) and the simulations are cached per process: they depend on nothing
private, and ε only rescales analytic errors.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from . import datasets
from .compare import StrategyCache, compare
from .core import error, registry
from .mechanism import run
from .privacy import Gaussian, Laplace, PrivacyLedger, PrivateData
from .privacy.noise import NoiseModel
from .queries import workloads
from .queries.matrix import AllRange, Matrix

__all__ = [
    "STRATEGIES", "SIM_MECHANISMS", "BOUND_WORKLOADS", "DPBENCH_PAIR",
    "lesson_workload", "noise_densities", "noise_lesson", "rmse_grid", "domain_sizes",
    "per_query_errors", "strategy_lesson", "bound_lesson", "easy_histogram", "hard_histogram",
    "dpbench_folder", "dpbench_available", "coarsen", "lesson_datasets", "simulate_all_range",
    "data_lesson", "clear_cache",
]

#: Registry name -> label of the strategies compared in lesson 2.
STRATEGIES = {"workload": "Workload (A = W)", "identity": "Identity", "h2": "H2", "hb": "HB"}

#: Registry name -> label of the mechanisms simulated in lesson 4.
SIM_MECHANISMS = {"dawa": "DAWA", "identity": "Identity", "hb": "HB"}

#: Workload kinds of lesson 3 (besides the session's own workload), by key.
BOUND_WORKLOADS = ("all_range", "prefix", "width_range")

#: The DPBench histograms of lesson 4: (role, name) for the easy and the hard one.
DPBENCH_PAIR = (("easy", "NETTRACE"), ("hard", "HEPTH"))

_SIM_CACHE: OrderedDict = OrderedDict()
_SIM_CACHE_SIZE = 32
_CACHE_LOCK = threading.RLock()


# ------------------------------------------------------------------ workloads
@lru_cache(maxsize=16)
def _all_range(n: int) -> AllRange:
    """``workloads.all_range(n)``, one object per ``n`` (engine caches key on identity)."""
    W = workloads.all_range(n)
    assert isinstance(W, AllRange)
    return W


@lru_cache(maxsize=16)
def _prefix(n: int) -> Matrix:
    return workloads.prefix(n)


@lru_cache(maxsize=16)
def _width_range(n: int) -> Matrix:
    return workloads.width_range(n, min(32, n))


_BUILDERS: dict[str, Callable[[int], Matrix]] = {
    "all_range": _all_range, "prefix": _prefix, "width_range": _width_range}


def lesson_workload(kind: str, n: int) -> Matrix:
    """A workload of lesson 3, built once per ``(kind, n)`` (the same object every call).

    Parameters
    ----------
    kind : str
        ``"all_range"`` (all ``n(n+1)/2`` ranges), ``"prefix"`` (the ``n`` prefixes) or
        ``"width_range"`` (every range of width ``min(32, n)``).
    n : int
        Domain size (cells).

    Raises
    ------
    KeyError
        For another ``kind``.
    """
    if kind not in _BUILDERS:
        raise KeyError(f"unknown lesson workload {kind!r}; expected one of {list(_BUILDERS)}")
    return _BUILDERS[kind](int(n))


def _unit_noise(norm: int) -> NoiseModel:
    return Laplace(1.0) if norm == 1 else Gaussian(1.0, 0.5)


@lru_cache(maxsize=256)
def _unit_tse(n: int, mechanism: str, norm: int) -> float:
    """``Δ_p(A)²·tr(WᵀW (AᵀA)⁺)`` for All Range over ``n`` cells (noise-free part of the TSE)."""
    W = _all_range(n)
    A = registry.get(mechanism).strategy(W, _unit_noise(norm))
    return float(error.unit_tse(W, A, norm))


@lru_cache(maxsize=64)
def _unit_per_query_variance(n: int, mechanism: str, norm: int) -> np.ndarray:
    """Per-query variance of All Range over ``n`` cells for unit noise variance (read-only)."""
    W = _all_range(n)
    noise = _unit_noise(norm)
    A = registry.get(mechanism).strategy(W, noise)
    out = error.per_query_variance(W, A, noise) / noise.variance_per_unit
    out.setflags(write=False)
    return out


# ------------------------------------------------------------------ lesson 1
def noise_densities(sensitivity: float, epsilon: float, delta: float, points: int = 801,
                    width: float = 8.0, calibration: str = "analytic") -> tuple[pd.DataFrame, dict]:
    """Densities of Laplace and Gaussian noise for one sensitivity.

    Laplace (ε-DP; Dwork & Roth 2014, Def. 3.3): scale ``b = Δ₁/ε``, standard
    deviation ``√2·b``.  Gaussian ((ε, δ)-DP): ``σ = Δ₂·c(ε, δ)`` with
    ``calibration`` (the analytic one of Balle & Wang 2018 by default, or
    ``"zcdp"``, what releases use).  The same number ``Δ`` is used as Δ₁ and Δ₂.

    Parameters
    ----------
    sensitivity : float
        Δ > 0.
    epsilon, delta : float
        Privacy parameters (ε > 0, 0 < δ < 1).
    points : int
        Grid points per density.
    width : float
        Each density is tabulated on ``±width`` of its own standard deviations.
    calibration : str
        Calibration of the Gaussian noise (:class:`dpexplorer.privacy.noise.Gaussian`).

    Returns
    -------
    frame : pandas.DataFrame
        ``2·points`` rows, columns ``z`` (noise value, counts), ``density`` (per count)
        and ``noise`` (``"laplace"`` or ``"gaussian"``).
    stats : dict
        ``laplace`` and ``gaussian`` noise models, ``laplace_scale`` (b),
        ``laplace_std``, ``gaussian_sigma``, ``gaussian_std`` (counts), ``c`` (σ per
        unit Δ₂) and ``sensitivity``.

    Raises
    ------
    ValueError
        If Δ, ε or δ is out of range.
    """
    delta_ = float(sensitivity)
    if not (math.isfinite(delta_) and delta_ > 0):
        raise ValueError(f"sensitivity must be a positive number, got {sensitivity!r}")
    lap = Laplace(epsilon)
    gau = Gaussian(epsilon, delta, calibration)
    b = lap.scale(delta_)
    sigma = gau.scale(delta_)
    stats: dict[str, Any] = {"laplace": lap, "gaussian": gau, "sensitivity": delta_, "laplace_scale": b,
             "laplace_std": math.sqrt(lap.variance(delta_)), "gaussian_sigma": sigma,
             "gaussian_std": math.sqrt(gau.variance(delta_)), "c": gau.sigma_per_unit}
    zl = np.linspace(-width, width, points) * stats["laplace_std"]
    zg = np.linspace(-width, width, points) * stats["gaussian_std"]
    fl = np.exp(-np.abs(zl) / b) / (2.0 * b)
    fg = np.exp(-0.5 * (zg / sigma) ** 2) / (sigma * math.sqrt(2.0 * math.pi))
    frame = pd.concat([pd.DataFrame({"z": zl, "density": fl, "noise": "laplace"}),
                       pd.DataFrame({"z": zg, "density": fg, "noise": "gaussian"})],
                      ignore_index=True)
    return frame, stats


def noise_lesson(sensitivity: float, epsilon: float, delta: float,
                 calibration: str = "zcdp") -> dict[str, Any]:
    """Lesson 1: :func:`noise_densities` plus the ratio of the two standard deviations.

    Returns
    -------
    dict
        ``frame`` and the stats of :func:`noise_densities`, ``epsilon``, ``delta`` and
        ``ratio`` (Gaussian std / Laplace std for one query).
    """
    frame, stats = noise_densities(sensitivity, epsilon, delta, calibration=calibration)
    return {"frame": frame, **stats, "epsilon": epsilon, "delta": delta,
            "ratio": stats["gaussian_std"] / stats["laplace_std"]}


# ------------------------------------------------------------------ lesson 2
def rmse_grid(ns: Iterable[int], noise: NoiseModel,
              mechanisms: Iterable[str] = tuple(STRATEGIES)) -> pd.DataFrame:
    """RMSE per query of strategies on All Range queries, for every ``n`` in ``ns``.

    Equal to ``dpx.rmse(all_range(n), A, noise)``: the unit-noise TSE of each
    ``(n, strategy, norm)`` is computed once per process and multiplied by the
    noise's variance, exactly as :func:`dpexplorer.core.error.rmse` does (HDMM,
    McKenna et al. 2018, Prop. 4).

    Parameters
    ----------
    ns : iterable of int
        Domain sizes.
    noise : NoiseModel
        ``Laplace(ε)`` or ``Gaussian(ε, δ)``.
    mechanisms : iterable of str
        Registry names of data-independent mechanisms.

    Returns
    -------
    pandas.DataFrame
        One row per (mechanism, n); columns ``n``, ``mechanism``, ``label``, ``m``
        (number of queries), ``rmse`` (counts per query).
    """
    rows = []
    for name in mechanisms:
        for n in ns:
            n = int(n)
            m = n * (n + 1) // 2
            unit = _unit_tse(n, name, noise.norm)
            rmse = math.sqrt(noise.variance_per_unit * unit / m)
            rows.append({"n": n, "mechanism": name, "label": STRATEGIES.get(name, name), "m": m,
                         "rmse": rmse})
    return pd.DataFrame(rows, columns=["n", "mechanism", "label", "m", "rmse"])


def domain_sizes(n_max: int) -> list[int]:
    """Domain sizes of lesson 2's curve: 16, 32, ..., ``n_max`` (powers of two)."""
    return [2**k for k in range(4, int(math.log2(n_max)) + 1)]


def per_query_errors(n: int, noise: NoiseModel) -> dict[str, Any]:
    """Standard error of every All Range query over ``n`` cells, for each of :data:`STRATEGIES`.

    Returns
    -------
    dict
        ``per_query``: mechanism -> ndarray of shape ``(n(n+1)/2,)``, the standard
        deviation of each query's answer (counts, All Range order); ``per_width``: a
        DataFrame with columns ``width`` (range length, cells), ``rmse`` (root of the
        mean variance of the ranges of that length), ``mechanism`` and ``label``;
        ``half_query``: the row of the range ``[0, n/2 - 1]``.
    """
    n = int(n)
    lo, hi = _all_range(n).ranges()
    width = hi - lo + 1
    per_query, per_width = {}, []
    for name in STRATEGIES:
        var = noise.variance_per_unit * _unit_per_query_variance(n, name, noise.norm)
        per_query[name] = np.sqrt(var)
        by_w = pd.Series(var).groupby(width).mean()
        per_width.append(pd.DataFrame({"width": by_w.index.to_numpy(),
                                       "rmse": np.sqrt(by_w.to_numpy()),
                                       "mechanism": name, "label": STRATEGIES[name]}))
    return {"per_query": per_query, "per_width": pd.concat(per_width, ignore_index=True),
            "half_query": n // 2 - 1}  # row of [0, n/2 - 1] in All Range order


def strategy_lesson(noise: NoiseModel, n_max: int = 1024, example_n: int = 64) -> dict[str, Any]:
    """Lesson 2: :func:`rmse_grid` over :func:`domain_sizes` and :func:`per_query_errors`.

    Returns
    -------
    dict
        ``grid``, ``noise``, ``example_n``, ``per_query``, ``per_width``, ``half_query``,
        and at the largest ``n`` (``n_big``): ``at`` (mechanism -> RMSE), ``best`` (the
        strategy other than the workload with the smallest RMSE) and ``factor``
        (workload RMSE / best RMSE).
    """
    grid = rmse_grid(domain_sizes(n_max), noise)
    n_big = int(grid["n"].max())
    at = grid[grid["n"] == n_big].set_index("mechanism")["rmse"]
    best = str(at.drop("workload").idxmin())
    return {"grid": grid, "noise": noise, "example_n": int(example_n),
            **per_query_errors(example_n, noise), "n_big": n_big, "at": at.to_dict(),
            "best": best, "factor": float(at["workload"] / at[best])}


# ------------------------------------------------------------------ lesson 3
def bound_lesson(W: Matrix, noise: NoiseModel, cache: StrategyCache | None = None) -> dict[str, Any]:
    """Lesson 3: every data-independent strategy's RMSE on ``W`` against the SVD bound.

    The SVD bound (Li & Miklau 2012, Thm 2) is the least RMSE any matrix-mechanism
    strategy can have; :func:`dpexplorer.compare` computes both.

    Returns
    -------
    dict
        ``table`` (the :func:`dpexplorer.compare` frame: ``mechanism``, ``label``,
        ``rmse`` and ``ratio`` to the bound, ...), ``bound`` (counts; ``inf`` or NaN when
        it cannot be computed), ``noise``, ``workload`` (its name), ``m`` and ``n``.
    """
    names = registry.names(data_dependent=False)
    df = compare(W, noise, mechanisms=names, cache=cache)
    return {"table": df, "bound": float(df.attrs["svd_bound"]), "noise": noise,
            "workload": W.name, "m": W.m, "n": W.n}


# ------------------------------------------------------------------ lesson 4
def easy_histogram(n: int = 256, seed: int = 1) -> np.ndarray:
    """A synthetic "easy" histogram: six flat blocks, three of them empty (blocky, sparse).

    Block edges are multiples of ``n/16``, levels 0, 4, 0, 12, 0, 2 records per cell.

    Parameters
    ----------
    n : int
        Number of cells, a multiple of 16.
    seed : int
        Seed of the block edges.

    Returns
    -------
    ndarray, shape (n,)
        Counts (float64).
    """
    if n < 16 or n % 16:
        raise ValueError(f"n must be a positive multiple of 16, got {n}")
    rng = np.random.default_rng(seed)
    edges = np.sort(rng.choice(np.arange(1, 16), 5, replace=False)) * (n // 16)
    levels = np.array([0.0, 4.0, 0.0, 12.0, 0.0, 2.0])
    return np.repeat(levels, np.diff(np.r_[0, edges, n]))


def hard_histogram(n: int = 256, seed: int = 2) -> np.ndarray:
    """A synthetic "hard" histogram: Poisson counts around log-normal rates (spiky, noisy).

    Parameters
    ----------
    n : int
        Number of cells.
    seed : int
        Seed of the rates and counts.

    Returns
    -------
    ndarray, shape (n,)
        Counts (float64).
    """
    rng = np.random.default_rng(seed)
    return rng.poisson(rng.lognormal(1.0, 1.2, int(n))).astype(float)


def dpbench_folder(configured: str | None = None) -> str | None:
    """The DPBench folder: ``configured`` if not blank, else the default one if it exists, else None."""
    folder = (configured or "").strip()
    if folder:
        return folder
    d = datasets.default_dpbench_dir()
    return str(d) if d is not None and d.is_dir() else None


def dpbench_available(folder: str | None) -> bool:
    """Whether ``folder`` holds both histograms of :data:`DPBENCH_PAIR` (never raises)."""
    if folder is None:
        return False
    try:
        names = set(datasets.list_dpbench(folder)["paper_name"])
    except (OSError, ValueError):
        return False
    return {name for _, name in DPBENCH_PAIR} <= names


def coarsen(x: np.ndarray, n: int, name: str) -> np.ndarray:
    """Sum adjacent cells of ``x`` into ``n`` cells (shape ``(n,)``).

    Raises
    ------
    ValueError
        If the number of cells of ``x`` (called ``name`` in the message) is not a
        multiple of ``n``.
    """
    x = np.asarray(x, dtype=float).ravel()
    if x.size % n:
        raise ValueError(f"{name} has {x.size} cells, not a multiple of n = {n}")
    return x.reshape(n, -1).sum(axis=1)


def lesson_datasets(pair: str, n: int, folder: str | None = None) -> list[tuple[str, str, np.ndarray]]:
    """``[(role, name, x), ...]`` for the easy and the hard histogram of lesson 4, shape ``(n,)``.

    Parameters
    ----------
    pair : str
        ``"synthetic"`` (:func:`easy_histogram`, :func:`hard_histogram`) or ``"dpbench"``
        (:data:`DPBENCH_PAIR` from ``folder``, coarsened to ``n`` cells).
    n : int
        Domain size.
    folder : str or None
        The DPBench folder (:func:`dpbench_folder`).

    Raises
    ------
    ValueError
        If DPBench is asked for and ``folder`` is None.
    """
    n = int(n)
    if pair == "dpbench":
        if folder is None:
            raise ValueError("DPBench data not found; set its folder in the sidebar settings")
        return [(role, name, coarsen(datasets.load_dpbench(name, folder), n, name))
                for role, name in DPBENCH_PAIR]
    return [("easy", "steps (synthetic)", easy_histogram(n)),
            ("hard", "spikes (synthetic)", hard_histogram(n))]


def simulate_all_range(x: np.ndarray, n: int, epsilon: float, trials: int, seed: int,
                       penalty: float) -> tuple[pd.DataFrame, dict[str, Any]]:
    """MAE per query of every mechanism of :data:`SIM_MECHANISMS` on All Range queries.

    Each run gets ``PrivateData(x)`` with a throwaway ledger and the Generator
    ``default_rng(SeedSequence([seed, trial]))`` (same seeds for every mechanism), Laplace
    noise at ``epsilon``; DAWA gets its bucket ``penalty``.

    Returns
    -------
    table : pandas.DataFrame
        One row per mechanism: ``mechanism``, ``label``, ``mae`` (mean over runs of the
        mean absolute error per query, counts), ``se`` (its standard error; NaN for one
        run), ``trials``.
    dawa : dict
        DAWA's first run: ``x_hat`` (shape ``(n,)``) and ``buckets``.
    """
    W = _all_range(n)
    truth = W.matvec(x)
    noise = Laplace(epsilon)
    rows, first = [], {}
    for name in SIM_MECHANISMS:
        params = {"penalty": penalty} if name == "dawa" else {}
        errs_ = []
        for t in range(trials):
            rng = np.random.default_rng(np.random.SeedSequence([seed, t]))
            est = run(name, PrivateData(x, PrivacyLedger()), W, noise, rng, **params)
            errs_.append(float(np.mean(np.abs(W.matvec(est.x_hat) - truth))))
            if t == 0:
                first[name] = est
        errs = np.asarray(errs_)
        se = float(errs.std(ddof=1) / math.sqrt(trials)) if trials > 1 else math.nan
        rows.append({"mechanism": name, "label": SIM_MECHANISMS[name], "mae": float(errs.mean()),
                     "se": se, "trials": trials})
    dawa = first["dawa"]
    return pd.DataFrame(rows), {"x_hat": dawa.x_hat, "buckets": int(dawa.info["buckets"])}


def data_lesson(pair: str, n: int, epsilon: float, trials: int, seed: int, penalty: float,
                folder: str | None = None) -> dict[str, Any]:
    """Lesson 4: :func:`simulate_all_range` on both histograms of :func:`lesson_datasets`.

    Simulations are cached per process (the 32 latest inputs).

    Returns
    -------
    dict
        ``table`` (the simulations' rows with ``role`` and ``dataset``), ``data`` (role ->
        ``name``, ``x``, ``x_hat``, ``buckets``), ``factor`` (role -> DAWA's MAE / the best
        data-independent one's), ``epsilon``, ``n``, ``trials``, ``seed``, ``penalty``.
    """
    eps = Laplace(epsilon).epsilon
    n, trials, seed, penalty = int(n), int(trials), int(seed), float(penalty)
    folder = folder if pair == "dpbench" else None
    frames, data, factor = [], {}, {}
    for role, name, x in lesson_datasets(pair, n, folder):
        key = (pair, folder, role, n, eps, trials, seed, penalty)
        with _CACHE_LOCK:
            hit = _SIM_CACHE.get(key)
            if hit is not None:
                _SIM_CACHE.move_to_end(key)
        if hit is None:
            hit = simulate_all_range(x, n, eps, trials, seed, penalty)
            with _CACHE_LOCK:
                _SIM_CACHE[key] = hit
                while len(_SIM_CACHE) > _SIM_CACHE_SIZE:
                    _SIM_CACHE.popitem(last=False)
        df, dawa = hit
        frames.append(df.assign(role=role, dataset=name))
        data[role] = {"name": name, "x": x, **dawa}
        mae = df.set_index("mechanism")["mae"]
        factor[role] = float(mae["dawa"] / mae.drop("dawa").min())
    table = pd.concat(frames, ignore_index=True)
    return {"table": table, "data": data, "factor": factor, "epsilon": eps, "n": n,
            "trials": trials, "seed": seed, "penalty": penalty}


def clear_cache() -> None:
    """Forget the cached simulations of :func:`data_lesson`."""
    with _CACHE_LOCK:
        _SIM_CACHE.clear()
