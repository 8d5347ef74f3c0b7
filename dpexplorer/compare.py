"""Side-by-side analytic comparison of registered mechanisms against the SVD bound.

With ``objective="max"`` the table also reports every mechanism's largest
per-query standard deviation (the error of the worst query), and mechanisms
that take an ``objective`` parameter (ResidualPlanner) optimise it; the others
(OPT0, OPT⊗, OPT+, OPT_M, HDMM, Eigen-Design, ...) keep optimising the total
squared error, whatever the objective.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

import numpy as np
import pandas as pd

from . import mechanism
from .core import error, registry, spectra
from .privacy import PrivateData, check_noise, validate_counts
from .privacy.noise import NoiseModel
from .queries import limits
from .queries.matrix import Matrix, MatrixTooLargeError, Prefix, as_matrix
from .streaming.bounds import max_std_lower_bound
from .streaming.participation import max_participations, sensitivity_details
from .streaming.workload import is_causal

__all__ = ["compare", "scale_comparison", "StrategyCache", "OBJECTIVES", "UNIT_COLUMNS"]

#: What :func:`compare` ranks by: total squared error (RMSE) or the worst query's std.
OBJECTIVES = ("sum", "max")

#: Unit-noise columns :func:`scale_comparison` reads: the TSE and the largest per-query
#: variance per unit noise variance (counts² per unit of ``noise.variance_per_unit``).
UNIT_COLUMNS = ("unit_tse", "unit_max")


class StrategyCache:
    """Strategies and their unit-noise TSE, cached per (workload, mechanism, norm).

    The analytic error scales with the noise variance only
    (``TSE = v · Δ_p(A)² · tr(WᵀW (AᵀA)⁺)``, HDMM Prop. 4), so when ε or δ
    changes nothing is rebuilt: :meth:`unit_tse` is looked up and multiplied
    by the new ``v``.  The explorer keeps one cache per session.

    Parameters
    ----------
    build : callable, optional
        ``build(mechanism, W, noise, params) -> A`` builds a strategy (default:
        ``mechanism.strategy(W, noise, **params)``, in the calling thread).
        The explorer passes one that runs the strategy optimisers in worker
        processes (:func:`dpexplorer.ui.workers.build`).
    dense_cells : int, optional
        Largest 1D domain whose SVD bound may come from a dense ``n × n``
        Gram eigendecomposition; above it only closed-form or structured
        spectra are used (:func:`dpexplorer.core.spectra.svdb_structured`) and
        the bound is NaN without one.  Default: no limit of its own (the dense
        path stops at :data:`~dpexplorer.queries.matrix.DENSE_LIMIT` entries).

    Raises
    ------
    TypeError
        If ``build`` is not callable.
    ValueError
        If ``dense_cells`` is not a whole number >= 1.
    """

    def __init__(self, build=None, dense_cells: int | None = None):
        if build is not None and not callable(build):
            raise TypeError(f"build must be callable, got {type(build).__name__}")
        self.build = build or _build_here
        self.dense_cells = (None if dense_cells is None
                            else limits.whole_number(dense_cells, "StrategyCache: dense_cells"))
        self._entries: dict[tuple, tuple[Matrix | None, float, float, str]] = {}
        self._svdb: dict[Matrix, float] = {}
        self._max: dict[tuple, tuple[float, str]] = {}

    def __len__(self) -> int:
        """Number of (workload, mechanism, norm, parameters) entries built so far."""
        return len(self._entries)

    def svdb(self, W: Matrix) -> float:
        """``SVDB(W)`` (unit-noise TSE bound, :func:`dpexplorer.core.error.svdb`), computed once per workload.

        NaN when the workload is too large for a dense Gram matrix, or when it
        is 1D, above ``dense_cells`` and has no structured spectrum.
        """
        if W not in self._svdb:
            try:
                if self.dense_cells is not None and len(W.domain) == 1 and W.n > self.dense_cells:
                    value = spectra.svdb_structured(W)
                    self._svdb[W] = math.nan if value is None else float(value)
                else:
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
                A = self.build(mech, W, noise, params)
                built = time.perf_counter() - t0
                self._entries[key] = (A, error.unit_tse(W, A, noise.norm), built, "")
            except (registry.NotApplicableError, error.UnsupportedWorkloadError,
                    MatrixTooLargeError) as exc:
                self._entries[key] = (None, math.nan, time.perf_counter() - t0, str(exc))
        return self._entries[key]

    def max_variance(self, W: Matrix, name: str, noise: NoiseModel, params: dict | None = None):
        """``(unit max variance, note)``: the largest per-query variance of mechanism ``name`` on ``W``.

        Per unit noise variance: ``Δ_p(A)² · max_i (W (AᵀA)⁺ Wᵀ)_ii`` (HDMM,
        McKenna et al., Prop. 4; ``dpexplorer/docs/matrix_mechanism.md``; multiply by
        ``noise.variance_per_unit`` for counts²), from
        :func:`dpexplorer.core.error.per_query_variance`, whose hooks
        keep Kronecker and marginal strategies implicit (no ``n × n`` matrix).
        NaN, with the reason, when the strategy does not apply or is too large.
        """
        params = params or {}
        key = (W, name, noise.norm, tuple(sorted(params.items())))
        if key not in self._max:
            A, _, _, note = self.entry(W, name, noise, params)
            if A is None:
                self._max[key] = (math.nan, note)
            else:
                try:
                    var = error.per_query_variance(W, A, noise)
                    self._max[key] = (float(np.max(var)) / noise.variance_per_unit, "")
                except (MatrixTooLargeError, limits.LimitExceededError) as exc:
                    self._max[key] = (math.nan, f"max per-query error: {exc}")
        return self._max[key]

    def clear(self) -> None:
        self._entries.clear()
        self._svdb.clear()
        self._max.clear()


def _build_here(mechanism, W, noise: NoiseModel, params: dict) -> Matrix:
    return mechanism.strategy(W, noise, **params)


def compare(W, noise: NoiseModel, mechanisms: Iterable[str] | None = None,
            cache: StrategyCache | None = None, x=None, trials: int = 20,
            seed: int = 0, objective: str = "sum", participations: int = 1,
            separation: int = 1) -> pd.DataFrame:
    """RMSE of every (or the named) registered mechanism for ``W``, against the SVD bound.

    Data-independent mechanisms get their analytic RMSE (HDMM Prop. 4).
    Data-dependent ones (DAWA, MWEM, ...) have no analytic error: they are
    listed with NaN and a note, or -- when benchmark data ``x`` is given --
    with their empirical RMSE over ``trials`` seeded runs.  That is a
    simulation on data treated as public (as in DPBench), not a release.

    Parameters
    ----------
    W : Matrix or array, shape (m, n)
        The workload.
    noise : NoiseModel
        ``Laplace(epsilon)`` or ``Gaussian(epsilon, delta)``.
    mechanisms : str or iterable of str, optional
        Registry names (one name alone is one mechanism); default: every
        registered private mechanism (variants registered as not private,
        e.g. ``dawa_as_published``, only when named).
    cache : StrategyCache, optional
        Reuse strategies across calls (the app passes one per session).
    x : array_like, shape (n,) or the workload's domain shape, optional
        Benchmark counts for the empirical RMSE of data-dependent mechanisms,
        checked as a release checks its data
        (:func:`~dpexplorer.privacy.validate_counts`: non-negative whole numbers
        at most 2**53, the workload's domain shape or its flattening).
    trials : int
        Seeded runs per data-dependent mechanism when ``x`` is given (>= 1).
    seed : int
        Base seed of those runs (``SeedSequence([seed, trial])``), a whole number >= 0.
    objective : {"sum", "max"}
        ``"sum"`` (default): rank by RMSE.  ``"max"``: add ``max_std``, the
        largest per-query standard deviation (counts) of every
        data-independent mechanism, ``sqrt(v·Δ²·max_i (W (AᵀA)⁺ Wᵀ)_ii)``
        (computed implicitly for Kronecker and marginal strategies), and rank
        by it.  Mechanisms with an ``objective`` parameter (ResidualPlanner)
        are built for the chosen objective; OPT0, OPT⊗, OPT+, OPT_M, HDMM and
        Eigen-Design keep optimising the total squared error.
    participations, separation : int
        The privacy unit for counts over time (or any cells): one person adds 1
        to up to ``participations`` cells, any two at least ``separation``
        apart (default 1, 1: one cell).  Every strategy's error is then scaled
        by its participation sensitivity
        (:func:`dpexplorer.streaming.participation_sensitivity`, exact for
        Toeplitz and banded strategies, a safe upper bound otherwise;
        Choquette-Choo et al., NeurIPS 2023, Sec. 2); the data-dependent
        mechanisms, calibrated to one cell, are listed with NaN and a note.
        The SVD and factorisation bounds stay those of one cell: still lower
        bounds, since a person's sensitivity is at least one cell's.

    Returns
    -------
    pandas.DataFrame
        One row per mechanism, sorted by ``rmse`` (counts per query; NaN rows
        last, with the reason in ``note``), or by ``max_std`` for
        ``objective="max"``: ``mechanism``, ``label``, ``rmse``, (``max_std``),
        ``kind`` ("analytic", or "simulation" for the empirical RMSE of
        data-dependent mechanisms on ``x``), ``ratio`` (rmse over the SVD
        bound), ``seconds`` (time to build the strategy, or per empirical
        run), ``rows`` (strategy queries), ``sensitivity`` (in the noise's
        norm), ``data_dependent``, ``online`` (whether the mechanism releases
        the answers step by step: only on a causal workload -- square and
        lower-triangular, such as the running total
        :func:`dpexplorer.streaming.continual` -- and only for the
        mechanisms registered ``online``), ``description``, ``source``,
        ``note``.
        ``df.attrs`` holds ``svd_bound`` (RMSE lower bound, NaN if the
        workload is too large), ``max_std_bound`` (a lower bound on
        ``max_std`` for the running total, the prefix workload, from the
        factorisation norm: :func:`dpexplorer.streaming.bounds.max_std_lower_bound`;
        NaN for other workloads), ``noise`` (label), ``m``, ``n``,
        ``workload``, ``objective``, ``participations``, ``separation``.

    Raises
    ------
    KeyError
        If a named mechanism is not registered.
    TypeError
        If ``noise`` is not a noise model, ``cache`` not a :class:`StrategyCache`,
        a mechanism name not a string, or ``participations`` / ``separation``
        not a whole number.
    ValueError
        If ``x`` is not valid counts over the workload's domain, ``trials`` or
        ``seed`` is not a whole number (>= 1, >= 0), the objective is unknown,
        or ``participations`` / ``separation`` is below 1.
    """
    check_noise(noise)
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    W = as_matrix(W)
    if cache is not None and not isinstance(cache, StrategyCache):
        raise TypeError(f"cache must be a dpx.StrategyCache, got {type(cache).__name__}")
    cache = StrategyCache() if cache is None else cache
    if isinstance(mechanisms, str):
        mechanisms = [mechanisms]
    mechanisms = registry.names(private=True) if mechanisms is None else list(mechanisms)
    for name in mechanisms:
        registry.get(name)  # TypeError/KeyError for bad names, before any work
    trials = limits.whole_number(trials, "compare: trials")
    seed = limits.whole_number(seed, "compare: seed", minimum=0)
    if x is not None:
        x = validate_counts(x, "x", domain=W.domain)
    several = max_participations(W.n, participations, separation) > 1
    # SVD bound on the RMSE: sqrt(v · SVDB(W) / m) (HDMM Def. 11); SVDB is cached per workload
    bound = math.sqrt(noise.variance_per_unit * cache.svdb(W) / W.m)
    causal = is_causal(W)
    rows = []
    for name in mechanisms:
        mech = registry.get(name)
        row = {"mechanism": name, "label": mech.label, "data_dependent": mech.data_dependent,
               "online": bool(causal and mech.online),
               "description": mech.description, "source": mech.source,
               "rows": np.nan, "sensitivity": np.nan}
        if mech.data_dependent and several:
            row.update(rmse=math.nan, kind="", seconds=math.nan,
                       note=f"calibrated to one cell: not for {participations} participations")
        elif mech.data_dependent:
            r, seconds, note = _empirical(name, W, noise, x, trials, seed)
            row.update(rmse=r, kind="simulation" if x is not None else "", seconds=seconds, note=note)
        else:
            params = {"objective": objective} if "objective" in mech.params else {}
            A, value, seconds, note = cache.entry(W, name, noise, params)
            scale = 1.0  # (Δ_k / Δ_1)²: the unit error of a person's k cells over one cell's
            if A is not None and several:
                scale, why = _participation_scale(A, participations, separation, noise.norm)
                note = note or why
            r = error.rmse_from_unit(value * scale, W.m, noise) if A is not None else math.nan
            row.update(rmse=r, kind="analytic", seconds=seconds, note=note)
            if A is not None:
                row.update(rows=A.m, sensitivity=A.sensitivity(noise.norm) * math.sqrt(scale))
            if objective == "max":
                worst, why = cache.max_variance(W, name, noise, params)
                row["max_std"] = math.sqrt(noise.variance_per_unit * worst * scale)
                if why and not note:
                    row["note"] = why
        row["ratio"] = r / bound if bound and not math.isnan(bound) else math.nan
        rows.append(row)
    cols = ["mechanism", "label", "rmse", "kind", "ratio", "seconds", "rows", "sensitivity",
            "data_dependent", "online", "description", "source", "note"]
    if objective == "max":
        cols.insert(3, "max_std")
    df = pd.DataFrame(rows, columns=cols)
    key = "max_std" if objective == "max" else "rmse"
    df = df.sort_values(key, na_position="last", kind="stable").reset_index(drop=True)
    max_bound = max_std_lower_bound(W.n, noise) if isinstance(W, Prefix) else math.nan
    df.attrs.update(svd_bound=bound, max_std_bound=max_bound, noise=noise.label, m=W.m, n=W.n,
                    workload=W.name, objective=objective, participations=int(participations),
                    separation=int(separation))
    return df


def _participation_scale(A: Matrix, k: int, b: int, p: int) -> tuple[float, str]:
    """``(Δ_k(A)/Δ_1(A))²`` and a note (an upper bound, or why it is unknown: NaN)."""
    try:
        details = sensitivity_details(A, k, b, p)
    except (MatrixTooLargeError, MemoryError) as exc:
        return math.nan, f"sensitivity for {k} participations not computed: {exc}"
    scale = (details.value / A.sensitivity(p)) ** 2
    return scale, "" if details.exact else (
        f"sensitivity for {k} participations is an upper bound ({details.method}): error at most this")


def scale_comparison(table: pd.DataFrame, noise: NoiseModel, svdb: float, m: int, *,
                     n: int | None = None, workload: str | None = None,
                     objective: str = "sum") -> pd.DataFrame:
    """The :func:`compare` table at ``noise``, from unit-noise figures: no strategy is rebuilt.

    The matrix mechanism's error scales with the noise variance only (HDMM,
    McKenna et al. 2018, Prop. 4): ``TSE = v · Δ_p(A)² · tr(W (AᵀA)⁺ Wᵀ)``
    with ``v = noise.variance_per_unit`` (``2/ε²`` for Laplace, ``c(ε, δ)²``
    for Gaussian noise).  So, from the unit-noise TSE ``u`` of each strategy
    (:meth:`StrategyCache.entry`) and its largest unit per-query variance
    ``u_max`` (:meth:`StrategyCache.max_variance`)::

        rmse    = sqrt(v · u / m)           (counts per query)
        max_std = sqrt(v · u_max)           (counts; objective "max" only)
        bound   = sqrt(v · SVDB(W) / m)     (HDMM Def. 11; Li & Miklau 2012, Thm 2)
        ratio   = rmse / bound

    the same numbers as :func:`compare` at ``noise``, and the same order.

    Parameters
    ----------
    table : pandas.DataFrame, shape (mechanisms, columns)
        Rows of a comparison in registry order, with at least ``mechanism``,
        ``rmse`` and ``unit_tse`` (and ``unit_max`` for ``objective="max"``).
        Rows with a NaN ``unit_tse`` (data-dependent, not applicable, not
        built yet) keep their ``rmse`` as given (NaN, or a simulation's).
    noise : NoiseModel
        The noise to scale to (``Laplace(ε)`` or ``Gaussian(ε, δ)``) of the norm
        the unit figures were computed for.
    svdb : float
        ``SVDB(W)``, the unit-noise TSE lower bound (:func:`dpexplorer.core.error.svdb`);
        NaN when unknown (then ``ratio`` is NaN).
    m : int
        Number of queries of the workload.
    n, workload : optional
        Cells and name of the workload, stored in ``attrs``.
    objective : {"sum", "max"}
        Rank by ``rmse``, or add ``max_std`` and rank by it (as :func:`compare`).

    Returns
    -------
    pandas.DataFrame
        A copy of ``table`` with ``rmse``, ``ratio`` (and ``max_std``) at
        ``noise``, sorted by ``rmse`` (or ``max_std``; stable, NaN last).
        ``attrs``: ``svd_bound``, ``noise`` (label), ``m``, ``n``,
        ``workload``, ``objective``.

    Raises
    ------
    TypeError
        If ``noise`` is not a noise model.
    ValueError
        If ``m`` is not a whole number >= 1, the objective is unknown, or a
        needed column is missing.
    """
    check_noise(noise)
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    m = limits.whole_number(m, "scale_comparison: m")
    need = ["mechanism", "rmse", "unit_tse"] + (["unit_max"] if objective == "max" else [])
    missing = [c for c in need if c not in table.columns]
    if missing:
        raise ValueError(f"the comparison table lacks column(s) {missing}")
    v = noise.variance_per_unit
    bound = error.rmse_from_unit(float(svdb), m, noise)
    df = table.copy()
    units = df["unit_tse"].to_numpy(dtype=float)
    analytic = np.isfinite(units)
    if analytic.any():
        df.loc[analytic, "rmse"] = error.rmse_from_unit(units[analytic], m, noise)
    rmse = df["rmse"].to_numpy(dtype=float)
    df["ratio"] = rmse / bound if bound and not math.isnan(bound) else math.nan
    if objective == "max":  # the worst query's standard deviation
        df["max_std"] = np.sqrt(v * df["unit_max"].to_numpy(dtype=float))
    df = df.sort_values("max_std" if objective == "max" else "rmse", na_position="last",
                        kind="stable").reset_index(drop=True)
    df.attrs.update(svd_bound=bound, noise=noise.label, m=m, n=n, workload=workload,
                    objective=objective)
    return df


def _empirical(name, W, noise, x, trials, seed):
    """Empirical RMSE of a data-dependent mechanism over seeded runs on benchmark data."""
    if x is None:
        return (math.nan, math.nan,
                "data-dependent: its error depends on the data, so it has no formula; it is measured "
                "by simulation on a dataset (benchmark data x)")
    truth = W.matvec(x.ravel())
    sq, t0 = [], time.perf_counter()
    try:
        for t in range(trials):
            rng = np.random.default_rng(np.random.SeedSequence([seed, t]))
            est = mechanism.run(name, PrivateData(x), W, noise, rng)
            sq.append(np.mean((W.matvec(est.x_hat) - truth) ** 2))
    except registry.NotApplicableError as exc:
        return math.nan, math.nan, str(exc)
    sq = np.asarray(sq)
    se = sq.std(ddof=1) / math.sqrt(trials) if trials > 1 else math.nan
    return (math.sqrt(sq.mean()), (time.perf_counter() - t0) / trials,
            f"simulation: empirical over {trials} seeded runs, seed {seed} (MSE standard error "
            f"{se:.3g})")
