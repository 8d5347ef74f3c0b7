"""Uniform: DPBench's simplest data-dependent baseline.

Spend the whole budget on one noisy count -- the total number of records --
and spread it evenly over the ``n`` cells (Hay, Machanavajjhala, Miklau,
Chen, Zhang, "Principled evaluation of differentially private algorithms
using DPBench", SIGMOD 2016: the "Uniform" baseline algorithm).

The Total query ``1ᵀ`` has L1 sensitivity 1 under add/remove-one-record
(its only column norm is 1), so the Laplace mechanism adds Laplace(1/ε) to
the total (Dwork, McSherry, Nissim, Smith 2006); every cell estimate is that
noisy total divided by ``n`` (post-processing, no further cost).
"""

from __future__ import annotations

import numpy as np

from ..core import registry
from ..privacy import PrivateData
from ..privacy.noise import Laplace, NoiseModel
from ..queries.matrix import Matrix, Total

__all__ = ["uniform"]


def uniform(data: PrivateData, W: Matrix, noise: NoiseModel, rng) -> registry.Estimate:
    """Noisy total spread uniformly over the cells (DPBench "Uniform").

    Parameters
    ----------
    data : PrivateData
        The private data vector ``x: (n,)`` (counts), behind the privacy boundary.
    W : Matrix, shape (m, n)
        Workload; only its number of cells ``n`` is used (the estimate does
        not depend on the queries).
    noise : Laplace
        ``noise.epsilon`` is the ε of the whole run, all of it spent on the total.
    rng : numpy.random.Generator or dpexplorer.privacy.OS_CSPRNG
        Source of the Laplace noise: seeded Generator (simulation) or the OS CSPRNG (release).

    Returns
    -------
    Estimate
        ``x_hat``, shape ``(n,)``: ``ŝ/n`` in every cell, with
        ``ŝ = 1ᵀx + Laplace(1/ε)`` (Total sensitivity Δ₁ = 1).  ``info``
        holds ``noisy_total`` (counts) and ``epsilon``.

    Raises
    ------
    NotApplicableError
        If ``noise`` is not :class:`~dpexplorer.privacy.noise.Laplace` (the baseline
        is defined for pure ε-DP).
    ValueError
        If ``W`` and ``data`` have different numbers of cells.
    BudgetExceededError
        If the ledger's budget would be exceeded.
    """
    if not isinstance(noise, Laplace):
        raise registry.NotApplicableError(
            f"uniform is a pure ε-DP (Laplace) baseline; got {type(noise).__name__} noise")
    if W.n != data.n:
        raise ValueError(f"the workload is over {W.n} cells but the data vector has {data.n}")
    n = data.n
    y = data.measure(Total(n), noise, rng, label="uniform: noisy total (all of ε)")
    s = float(y[0])
    return registry.Estimate(np.full(n, s / n), {"noisy_total": s, "epsilon": noise.epsilon})


def _runner(data, W, noise, rng, **params):
    return uniform(data, W, noise, rng, **params)


if "uniform" not in registry.REGISTRY:
    registry.register(registry.Mechanism(
        "uniform", "Uniform", None,
        "Noisy total (Laplace(1/ε)) spread evenly over the cells.",
        "Hay et al., DPBench, SIGMOD 2016 ('Uniform' baseline)",
        params={}, data_dependent=True, runner=_runner,
    ))
