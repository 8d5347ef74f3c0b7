"""DAWA studied on one dataset: the private run and the non-private references drawn beside it.

:func:`study` runs DAWA (Li, Hay & Miklau, "A Data- and Workload-Aware Algorithm
for Range Queries Under Differential Privacy", PVLDB 7(5), 2014) on
``PrivateData(x, <throwaway ledger>)`` -- a simulation: nothing is spent from the
dataset's ledger -- and puts beside its result, for comparison only and NOT
private, the exact least-cost partition of ``x`` for the same ε₂
(:func:`dpexplorer.adaptive.partition.optimal_partition`), the partition the
authors' public code draws for the same ε₁, ε₂, candidates and seed
(:func:`dpexplorer.adaptive.dawa.published_partition`) and the workload RMSE of
``W x̂`` against ``W x``.  :func:`study_workload` picks the workload DAWA's stage 2
is fitted to.  What the explorer's "Data & DAWA" page draws.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np

from .adaptive.dawa import DAWAResult, dawa, published_partition
from .adaptive.partition import Partition, optimal_partition
from .core import error
from .datasets import Dataset
from .privacy import PrivacyLedger, PrivateData, Spend
from .queries import workloads
from .queries.matrix import Matrix

__all__ = ["DAWARun", "study", "study_workload", "ALL_CANDIDATES_MAX_N", "RANDOM_WORKLOAD"]

log = logging.getLogger(__name__)

#: Largest domain for which the "all intervals" candidate set is offered (O(n²) candidates).
ALL_CANDIDATES_MAX_N = 4096

#: Workload used when the session's workload does not fit the data: DAWA Sec. 5.1's
#: 2000 uniform random ranges (1D) or rectangles (2D), with a fixed public seed.
RANDOM_WORKLOAD = {"m": 2000, "seed": 0}


@dataclass
class DAWARun:
    """One DAWA run: its public result, plus the non-private things drawn beside it.

    Attributes
    ----------
    dataset : Dataset
        The data the run was on (kept so a later dataset switch does not change the plots).
    workload : Matrix
        Workload DAWA's stage 2 was fitted to.
    workload_note : str
        Where the workload came from (session workload or random ranges/rectangles).
    result : DAWAResult
        What DAWA released (private partition, bucket counts, x̂, ε₁, ε₂).
    exact, exact_cost : Partition, float
        The exact least-cost partition of ``x`` (in DAWA's cell order) and its
        cost -- NOT private, for comparison only.
    epsilon, seed : float, int
        Total ε of the run and the simulation seed of its Generator.
    ratio, candidates, penalty
        The options used.
    noise_note : str
        Set when the session asked for Gaussian noise (DAWA is ε-DP: Laplace was used).
    spends : list of Spend
        What the run spent in its throwaway ledger (what a release would spend).
    workload_rmse : float
        RMSE of ``W x̂`` against ``W x`` over the workload (counts; computed from x, not private).
    published : Partition or None
        The partition the authors' public code draws for the same ε₁, ε₂,
        candidates and seed (:func:`dpexplorer.adaptive.dawa.published_partition`)
        -- NOT private, for comparison only.
    """

    dataset: Dataset
    workload: Matrix
    workload_note: str
    result: DAWAResult
    exact: Partition
    exact_cost: float
    epsilon: float
    seed: int
    ratio: float
    candidates: str
    penalty: float
    noise_note: str = ""
    spends: list[Spend] = field(default_factory=list)
    workload_rmse: float = math.nan
    published: Partition | None = None

    @property
    def ordered_x(self) -> np.ndarray:
        """``x`` in the cell order the partitions refer to (Hilbert order for 2D)."""
        x = self.dataset.x.ravel()
        return x if self.result.order is None else x[self.result.order]

    @property
    def ordered_x_hat(self) -> np.ndarray:
        x_hat = self.result.x_hat
        return x_hat if self.result.order is None else x_hat[self.result.order]


def study_workload(W: Matrix | None, x: np.ndarray) -> tuple[Matrix, str]:
    """``(workload, where it came from)``: ``W`` if it is over the cells of ``x``, else
    :data:`RANDOM_WORKLOAD` uniform random ranges (1D ``x``) or rectangles (2D).

    Parameters
    ----------
    W : Matrix, shape (m, n), or None
        The workload asked for (the session's).
    x : ndarray, shape (n,) or (n₁, n₂)
        The data vector (counts); only its shape is read.

    Returns
    -------
    (Matrix, str)
        The workload, shape ``(m', x.size)``, and a Markdown note of where it came from.
    """
    if W is not None and W.n == x.size and (len(W.domain) == 1 or tuple(W.domain) == x.shape):
        return W, f"the session workload `{W.name}` ({W.m:,} queries)"
    m, seed = RANDOM_WORKLOAD["m"], RANDOM_WORKLOAD["seed"]
    why = ("no session workload" if W is None
           else f"the session workload `{W.name}` is over {W.n:,} cells, not {x.size:,}")
    if x.ndim == 1:
        return (workloads.random_ranges(x.size, m, "uniform", seed),
                f"{m} uniform random ranges ({why})")
    return (workloads.random_rectangles(x.shape, m, seed),
            f"{m} uniform random rectangles ({why})")


def study(ds: Dataset, W: Matrix | None, epsilon: float, seed: int, ratio: float,
          candidates: str, penalty: float, noise_note: str = "") -> DAWARun:
    """Simulate DAWA on ``ds`` with ε = ``epsilon`` and a Generator of ``seed``.

    Parameters
    ----------
    ds : Dataset
        Its ``x``: counts, shape ``(n,)`` or ``(n₁, n₂)`` (2D runs along a Hilbert curve).
    W : Matrix, shape (m, n), or None
        The workload asked for (:func:`study_workload` picks the one used).
    epsilon : float
        ε of the whole run (partition and measurement), spent from a throwaway ledger.
    seed : int
        Seed of the simulation's ``numpy.random.Generator`` (kept on the run).
    ratio : float
        Share of ε spent on the partition, ``ε₁ = ratio·ε`` (:func:`~dpexplorer.adaptive.dawa.dawa`).
    candidates : {"pow2", "dyadic", "all"}
        Candidate buckets of the partition.
    penalty : float
        Public per-bucket cost offset (counts) of the partition.
    noise_note : str
        Kept on the run (e.g. why Laplace noise was used).

    Returns
    -------
    DAWARun
        The private result and the NOT private references beside it.

    Raises
    ------
    ValueError
        If the data are not 1D or 2D, or ``candidates="all"`` is asked for more than
        :data:`ALL_CANDIDATES_MAX_N` cells (O(n²) candidate buckets).
    """
    x = np.asarray(ds.x, dtype=float)
    if x.ndim not in (1, 2):
        raise ValueError(f"DAWA needs 1D or 2D data; {ds.name!r} has shape {x.shape}")
    if candidates == "all" and x.size > ALL_CANDIDATES_MAX_N:
        raise ValueError(f"'all' candidates need O(n²) work and are offered for n ≤ "
                         f"{ALL_CANDIDATES_MAX_N}; {ds.name!r} has n = {x.size:,} cells: "
                         "use 'pow2'")
    eps, seed = float(epsilon), int(seed)
    W, wnote = study_workload(W, x)
    ledger = PrivacyLedger()  # a simulation: the dataset's ledger is not touched
    res = dawa(PrivateData(x, ledger), W, eps, np.random.default_rng(seed), ratio=ratio,
               candidates=candidates, penalty=penalty)
    spends = list(ledger.entries)
    # Non-private, for comparison only: the exact least-cost partition of x in DAWA's order.
    xs = x.ravel() if res.order is None else x.ravel()[res.order]
    exact, cost = optimal_partition(xs, res.epsilon2, candidates)
    # Non-private, for comparison only: the authors' partition code on the same data and seed.
    published = published_partition(PrivateData(x.ravel(), PrivacyLedger()), res.epsilon1,
                                     res.epsilon2, np.random.default_rng(seed), candidates,
                                     res.order)
    try:
        wrmse = error.empirical_rmse(W.matvec(res.x_hat), W.matvec(x.ravel()))
    except Exception:  # noqa: BLE001 - a display extra only
        log.debug("workload RMSE unavailable", exc_info=True)
        wrmse = math.nan
    return DAWARun(ds, W, wnote, res, exact, float(cost), eps, seed, float(ratio), candidates,
                   float(penalty), noise_note, spends, wrmse, published)
