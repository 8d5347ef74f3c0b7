"""Numbers the explorer draws for a count over time: every mechanism's error step by step.

The analytic standard deviation of each step's answer (``sqrt(v · Δ(A)² ·
‖b_t‖²)``, :func:`dpexplorer.core.error.per_query_rmse`) for several
strategies, in one tidy table -- the data of the Compare page's "Error over
time" chart, and of a notebook's.  Public figures only: no data is read.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..core import error, registry
from ..privacy.noise import NoiseModel, check_noise
from ..queries.matrix import Matrix, as_matrix
from .factorisations import toeplitz_sqrt
from .workload import continual, is_causal

__all__ = ["step_errors", "sampled_steps", "blt_tradeoff"]


def sampled_steps(T: int, max_points: int = 2000) -> np.ndarray:
    """At most ``max_points`` steps of ``0..T−1``, evenly spaced, first and last included.

    Returns
    -------
    ndarray of int64, shape (min(T, max_points),) or fewer (rounding may merge two)
        Increasing step indices.

    Raises
    ------
    ValueError
        If ``T`` or ``max_points`` is below 1 (2 for ``max_points``).
    """
    if T < 1 or max_points < 2:
        raise ValueError(f"need T >= 1 and max_points >= 2, got T = {T}, max_points = {max_points}")
    if T <= max_points:
        return np.arange(T)
    return np.unique(np.linspace(0, T - 1, max_points).round().astype(np.int64))


def step_errors(W: Matrix, noise: NoiseModel, strategies: Mapping[str, Matrix],
                max_points: int = 2000) -> pd.DataFrame:
    """Per-step standard deviation of each strategy's answers on a count over time.

    Parameters
    ----------
    W : Matrix, shape (T, T)
        A causal workload (:func:`dpexplorer.streaming.is_causal`), e.g. the running total.
    noise : NoiseModel
    strategies : mapping of mechanism name -> strategy ``A: (p, T)``
        Registered names (for the label and the ``online`` fact).
    max_points : int
        Most steps kept per strategy (:func:`sampled_steps`), for drawing.

    Returns
    -------
    pandas.DataFrame
        Columns ``step``, ``mechanism``, ``label``, ``online``, ``std`` (counts),
        one row per strategy and kept step, in the order given.  ``attrs``:
        ``T``, ``noise`` (label), ``worst`` (name -> the largest std over all
        steps, not only the kept ones).

    Raises
    ------
    ValueError
        If ``W`` is not causal.
    KeyError
        If a name is not registered.
    UnsupportedWorkloadError
        If a strategy does not support ``W``.
    """
    check_noise(noise)
    W = as_matrix(W)
    if not is_causal(W):
        raise ValueError(f"{W.name!r} is not a count over time (a square, lower-triangular workload)")
    steps = sampled_steps(W.n, max_points)
    frames, worst = [], {}
    for name, A in strategies.items():
        mech = registry.get(name)
        std = error.per_query_rmse(W, A, noise)
        worst[name] = float(std.max())
        frames.append(pd.DataFrame({"step": steps, "mechanism": name, "label": mech.label,
                                    "online": mech.online, "std": std[steps]}))
    cols = ["step", "mechanism", "label", "online", "std"]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)
    df.attrs.update(T=W.n, noise=noise.label, worst=worst)
    return df


def blt_tradeoff(T: int, noise: NoiseModel, buffers=(1, 2, 3, 4, 5), objective: str = "max") -> pd.DataFrame:
    """Memory against error of BLT factorisations of the running total over ``T`` steps.

    For each number of buffers ``d``, the BLT optimised for ``objective``
    (:func:`dpexplorer.streaming.blt.blt`; Dvijotham, McMahan, Pillutla,
    Steinke & Thakurta, FOCS 2024): the numbers its release keeps between
    steps (``d`` buffers and the running sum, :class:`~dpexplorer.streaming.blt.StreamingNoise`),
    its worst-step and mean error, and the ratio of its worst-step standard
    deviation to the square root's (:func:`~dpexplorer.streaming.toeplitz_sqrt`,
    which keeps ``T`` numbers: all the noise).

    Parameters
    ----------
    T : int
    noise : NoiseModel
        Gaussian (BLT is a Gaussian-noise mechanism).
    buffers : iterable of int
        Numbers of buffers, each in 1..:data:`~dpexplorer.streaming.blt.MAX_BUFFERS`.
    objective : {"max", "sum"}

    Returns
    -------
    pandas.DataFrame
        Columns ``buffers``, ``memory`` (numbers kept), ``max_std``, ``rmse``
        (counts), ``ratio`` (``max_std`` over the square root's); ``attrs``:
        ``sqrt_max_std``, ``sqrt_rmse``, ``T``, ``noise``.

    Raises
    ------
    ValueError
        For Laplace noise, a bad ``T``, number of buffers or objective.
    """
    from . import blt as _blt

    check_noise(noise)
    if noise.norm != 2:
        raise ValueError("BLT is optimised for Gaussian noise (L2 sensitivity); choose Gaussian noise")
    W = continual(T)
    std = error.per_query_rmse(W, toeplitz_sqrt(W.n), noise)
    ref_max, ref_rmse = float(std.max()), float(np.sqrt(np.mean(std ** 2)))
    rows = []
    for d in buffers:
        A = _blt.blt(W.n, int(d), objective)
        s = error.per_query_rmse(W, A, noise)
        rows.append({"buffers": int(d), "memory": int(d) + 1, "max_std": float(s.max()),
                     "rmse": float(np.sqrt(np.mean(s ** 2))), "ratio": float(s.max()) / ref_max})
    df = pd.DataFrame(rows, columns=["buffers", "memory", "max_std", "rmse", "ratio"])
    df.attrs.update(sqrt_max_std=ref_max, sqrt_rmse=ref_rmse, T=W.n, noise=noise.label)
    return df

