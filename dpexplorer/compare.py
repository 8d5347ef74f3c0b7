"""Side-by-side analytic comparison of registered mechanisms against the SVD bound."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

import numpy as np
import pandas as pd

from . import error, registry
from .matrix import Matrix, MatrixTooLargeError, as_matrix
from .noise import NoiseModel

__all__ = ["compare", "StrategyCache"]


class StrategyCache:
    """Strategies and their unit-noise TSE, cached per (workload, mechanism, norm).

    The analytic error scales with the noise variance only
    (``TSE = v · Δ_p(A)² · tr(WᵀW (AᵀA)⁺)``, HDMM Prop. 4), so when ε or δ
    changes nothing is rebuilt: :meth:`unit_tse` is looked up and multiplied
    by the new ``v``.  The explorer keeps one cache per session.
    """

    def __init__(self):
        self._entries: dict[tuple, tuple[Matrix | None, float, float, str]] = {}
        self._svdb: dict[Matrix, float] = {}

    def __len__(self) -> int:
        """Number of (workload, mechanism, norm, parameters) entries built so far."""
        return len(self._entries)

    def svdb(self, W: Matrix) -> float:
        """``SVDB(W)`` (unit-noise TSE bound, :func:`dpexplorer.error.svdb`), computed once per workload.

        NaN when the workload is too large for a dense Gram matrix.
        """
        if W not in self._svdb:
            try:
                self._svdb[W] = error.svdb(W)
            except MatrixTooLargeError:
                self._svdb[W] = math.nan
        return self._svdb[W]

    def entry(self, W: Matrix, name: str, noise: NoiseModel, params: dict | None = None):
        """``(A, unit_tse, seconds, note)`` for mechanism ``name`` on ``W``.

        ``A`` is ``None`` and ``unit_tse`` NaN when the mechanism does not
        apply (the reason is in ``note``).
        """
        params = params or {}
        # Matrix objects hash by identity: the key holds the workload itself
        key = (W, name, noise.norm, tuple(sorted(params.items())))
        if key not in self._entries:
            mech = registry.get(name)
            t0 = time.perf_counter()
            try:
                A = mech.strategy(W, noise, **params)
                built = time.perf_counter() - t0
                self._entries[key] = (A, error.unit_tse(W, A, noise.norm), built, "")
            except (registry.NotApplicableError, error.UnsupportedWorkloadError,
                    MatrixTooLargeError) as exc:
                self._entries[key] = (None, math.nan, time.perf_counter() - t0, str(exc))
        return self._entries[key]

    def clear(self) -> None:
        self._entries.clear()
        self._svdb.clear()


def compare(W, noise: NoiseModel, mechanisms: Iterable[str] | None = None,
            cache: StrategyCache | None = None) -> pd.DataFrame:
    """Analytic RMSE of every (or the named) data-independent mechanism for ``W``.

    Parameters
    ----------
    W : Matrix or array, shape (m, n)
        The workload.
    noise : NoiseModel
        ``Laplace(epsilon)`` or ``Gaussian(epsilon, delta)``.
    mechanisms : iterable of str, optional
        Registry names; default: every registered data-independent mechanism.
    cache : StrategyCache, optional
        Reuse strategies across calls (the app passes one per session).

    Returns
    -------
    pandas.DataFrame
        One row per mechanism, sorted by ``rmse`` (counts per query; NaN for
        mechanisms that do not apply, listed last with the reason in
        ``note``): ``mechanism``, ``label``, ``rmse``, ``ratio`` (rmse over
        the SVD bound), ``seconds`` (time to build the strategy), ``rows``
        (strategy queries), ``sensitivity`` (in the noise's norm),
        ``description``, ``source``, ``note``.  ``df.attrs`` holds
        ``svd_bound`` (RMSE lower bound, NaN if the workload is too large),
        ``noise`` (label), ``m`` and ``n``.

    Raises
    ------
    KeyError
        If a named mechanism is not registered.
    ValueError
        If a named mechanism is data-dependent (it has no analytic error).
    """
    W = as_matrix(W)
    cache = StrategyCache() if cache is None else cache
    if mechanisms is None:
        mechanisms = registry.names(data_dependent=False)
    mechanisms = list(mechanisms)
    for name in mechanisms:
        if registry.get(name).data_dependent:
            raise ValueError(f"{name!r} is data-dependent and has no analytic error; use dpx.evaluate")
    # SVD bound on the RMSE: sqrt(v · SVDB(W) / m) (HDMM Def. 11); SVDB is cached per workload
    bound = math.sqrt(noise.variance_per_unit * cache.svdb(W) / W.m)
    rows = []
    for name in mechanisms:
        mech = registry.get(name)
        A, value, seconds, note = cache.entry(W, name, noise)
        r = math.sqrt(noise.variance_per_unit * value / W.m) if A is not None else math.nan
        rows.append({
            "mechanism": name,
            "label": mech.label,
            "rmse": r,
            "ratio": r / bound if bound and not math.isnan(bound) else math.nan,
            "seconds": seconds,
            "rows": A.m if A is not None else np.nan,
            "sensitivity": A.sensitivity(noise.norm) if A is not None else np.nan,
            "description": mech.description,
            "source": mech.source,
            "note": note,
        })
    df = pd.DataFrame(rows).sort_values("rmse", na_position="last", kind="stable").reset_index(drop=True)
    df.attrs.update(svd_bound=bound, noise=noise.label, m=W.m, n=W.n, workload=W.name)
    return df
