"""A simulation study of the sum mechanisms on one bucketed attribute (Wu et al. 2019, Sec. 6).

What the explorer's "Sum queries" page shows, computed without any UI: the
trials of every mechanism (:func:`~dpexplorer.sums.mechanisms.evaluate`), their
summaries, the small/large query comparison and the analytic bias² and
variance as τ moves (:func:`~dpexplorer.sums.mechanisms.tau_curve`), gathered
in one :class:`SumsResult` by :func:`simulate`; :func:`sizes_table` and
:func:`best_by_size` are the numbers of its table and summary.

The trials are a **simulation** on data treated as public: they spend from
throwaway ledgers, and their tables hold the true sums.

Example::

    import dpexplorer as dpx
    from dpexplorer.sums import study

    x = np.random.default_rng(0).lognormal(4.0, 1.0, 5000)          # treated as public
    attr = dpx.datasets.numerical_attribute(x, 64, "equal_width", name="sales")
    S = study.build_workload(attr.bucket_values("upper"), "prefix", 16)
    res = study.simulate(attr, S, epsilon=1.0, seed=0, trials=10)
    study.sizes_table(res.sizes)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd

from ..queries import workloads
from . import mechanisms as sums
from .thresholds import SVTParams

__all__ = ["BucketedAttribute", "SumsResult", "SIZE_COLUMNS", "build_workload", "curve_taus",
           "simulate", "sizes_table", "best_by_size", "notes_for"]

#: Columns of :func:`sizes_table`.
SIZE_COLUMNS = ["mechanism", "isotonic", "small median", "small 5%", "small 95%", "large median",
                "large 5%", "large 95%"]


class BucketedAttribute(Protocol):
    """What a study needs of a numerical attribute (e.g. :class:`dpexplorer.datasets.NumericalAttribute`)."""

    name: str
    x: np.ndarray
    unit: str
    description: str
    shift: float
    private_edges: bool

    @property
    def n(self) -> int: ...

    def bucket_values(self, kind: str = "upper") -> np.ndarray: ...


@dataclass
class SumsResult:
    """One simulation: what it ran on and what the page draws.

    Attributes
    ----------
    attribute : BucketedAttribute
    workload : SumWorkload
    epsilon : float
        Total ε of every mechanism's run.
    epsilon_answers : float
        ε of the answers (:func:`dpexplorer.sums.answer_epsilon`: ``(1 − α)·ε`` with an SVT threshold).
    seed : int
        Trials draw from ``SeedSequence([seed, trial])``.
    trials : int
    tau_mode : str
    evaluation : DataFrame
        :func:`dpexplorer.sums.evaluate`'s tidy table.
    summary : DataFrame
        :func:`dpexplorer.sums.summarize` of it.
    sizes : DataFrame
        :func:`dpexplorer.sums.compare_sizes` of it.
    curve : DataFrame
        :func:`dpexplorer.sums.tau_curve` (bias², variance, total vs τ).
    taus : ndarray, shape (trials,)
        The common τ of Identity/Workload/TiMM/TaMM in every trial.
    strategy : str
    notes : list of str
    seconds : float
    value_kind : str
        Bucket value the workload was built with (``upper``, ``midpoint``, ``lower``).
    spacing : str
        Spacing of the prefix thresholds the workload was built with (``linear``, ``geometric``).
    """

    attribute: BucketedAttribute
    workload: sums.SumWorkload
    epsilon: float
    epsilon_answers: float
    seed: int
    trials: int
    tau_mode: str
    evaluation: pd.DataFrame
    summary: pd.DataFrame
    sizes: pd.DataFrame
    curve: pd.DataFrame
    taus: np.ndarray
    strategy: str
    svt: SVTParams | None = None
    notes: list = field(default_factory=list)
    seconds: float = 0.0
    value_kind: str = "upper"
    spacing: str = "linear"


def build_workload(values: np.ndarray, kind: str, m: int, spacing: str = "linear") -> sums.SumWorkload:
    """A sum workload of ``m`` queries over buckets of value ``values`` (shape ``(n,)``).

    ``kind = "prefix"``: :func:`~dpexplorer.sums.mechanisms.prefix_sums` ("sum of the values ≤ t"
    for ``m`` thresholds, ``spacing`` linear or geometric); else ``m`` random ranges, drawn
    uniformly with seed 0 (:func:`dpexplorer.queries.workloads.random_ranges`).

    Raises
    ------
    ValueError
        If the workload cannot be built (e.g. more prefix queries than buckets allow).
    """
    if kind == "prefix":
        return sums.prefix_sums(values, m=m, spacing=spacing)
    W = workloads.random_ranges(len(values), m, "uniform", seed=0)
    return sums.SumWorkload(W, values, name=f"{m} random range sums")


def curve_taus(workload: sums.SumWorkload) -> np.ndarray:
    """Thresholds of the τ curve: 30 (8 above 1024 buckets, where TaMM's re-optimisation per τ is slow)."""
    return sums.tau_grid(workload.values, 30 if workload.n <= 1024 else 8)


def notes_for(attr: BucketedAttribute) -> list[str]:
    """Caveats a study on ``attr`` carries: data-dependent bucket edges, shifted values."""
    notes = []
    if attr.private_edges:
        notes.append("The bucket edges were computed from the data (quantiles or min..max): "
                     "fine for public data, not covered by any privacy guarantee.")
    if attr.shift:
        notes.append(f"Values were shifted by {attr.shift:+g} {attr.unit}: the sums are of the "
                     "shifted values.")
    return notes


def simulate(attr: BucketedAttribute, workload: sums.SumWorkload, epsilon: float, seed: int,
             trials: int, tau_mode: str = "svt", tau: float | None = None, svt: SVTParams | None = None,
             strategy: str = "hb", gamma: float = 1.0, notes: Sequence[str] = (),
             value_kind: str = "upper", spacing: str = "linear",
             on_trial: Callable[[int, int], None] | None = None,
             on_tau: Callable[[int, int], None] | None = None) -> SumsResult:
    """Run the trials of every mechanism and the τ curve on ``attr`` (a simulation).

    Parameters
    ----------
    attr : BucketedAttribute
        Its ``x`` (shape ``(n,)``, records per bucket) is treated as public.
    workload : SumWorkload
        The sum queries, over ``attr``'s buckets.
    epsilon : float
        Total ε of every mechanism's run (Laplace noise).
    seed, trials : int
        Trial ``t`` draws from ``SeedSequence([seed, t])``.
    tau_mode, tau, svt, strategy, gamma
        As in :func:`dpexplorer.sums.evaluate`.
    notes : sequence of str
        Caveats to keep with the result (:func:`notes_for` is appended).
    value_kind, spacing : str
        How the workload was built (recorded in the result).
    on_trial, on_tau : callable, optional
        ``(done, total)`` after each trial and each τ of the curve.

    Returns
    -------
    SumsResult
    """
    t0 = time.perf_counter()
    df = sums.evaluate(attr.x, workload, epsilon, trials=trials, seed=seed, threshold=tau_mode,
                       tau=tau, svt=svt, strategy=strategy, gamma=gamma, progress=on_trial)
    eps_ans = sums.answer_epsilon(epsilon, tau_mode, svt)
    curve = sums.tau_curve(workload, attr.x, eps_ans, taus=curve_taus(workload), strategy=strategy,
                           progress=on_tau)
    return SumsResult(attr, workload, epsilon, eps_ans, seed, trials, tau_mode, df, sums.summarize(df),
                      sums.compare_sizes(df), curve, sums.trial_taus(df), strategy, svt,
                      [*notes, *notes_for(attr)], time.perf_counter() - t0, value_kind=value_kind,
                      spacing=spacing)


def sizes_table(sizes: pd.DataFrame) -> pd.DataFrame:
    """Median and 5–95 % relative error of the smallest and largest 20 % of queries, per mechanism.

    Parameters
    ----------
    sizes : DataFrame
        :func:`dpexplorer.sums.compare_sizes`'s table (:attr:`SumsResult.sizes`).

    Returns
    -------
    DataFrame
        One row per (mechanism, isotonic), columns :data:`SIZE_COLUMNS` (mechanism by its label).
    """
    rows = []
    for (mech, iso), g in sizes.groupby(["mechanism", "isotonic"], sort=False):
        row = {"mechanism": sums.LABELS[str(mech)], "isotonic": bool(iso)}
        for _, r in g.iterrows():
            row[f"{r['size']} median"] = r["median"]
            row[f"{r['size']} 5%"] = r["q05"]
            row[f"{r['size']} 95%"] = r["q95"]
        rows.append(row)
    return pd.DataFrame(rows, columns=SIZE_COLUMNS)


def best_by_size(sizes: pd.DataFrame) -> list[tuple[str, str, float]]:
    """``[(size, mechanism, median relative error), ...]``: the best mechanism without isotonic
    regression for the ``"small"`` and the ``"large"`` queries (sizes absent are left out)."""
    best = []
    for size in ("small", "large"):
        sub = sizes[(sizes["size"] == size) & (~sizes["isotonic"])]
        if len(sub):
            b = sub.sort_values("median").iloc[0]
            best.append((size, str(b["mechanism"]), float(b["median"])))
    return best
