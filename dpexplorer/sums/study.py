"""A simulation study of the sum mechanisms on one bucketed attribute (Wu et al. 2019, Sec. 6).

What the explorer's "Sum queries" page shows, computed without any UI: the
trials of every mechanism (:func:`~dpexplorer.sums.mechanisms.evaluate`), their
summaries, the small/large query comparison and the analytic bias² and
variance as τ moves (:func:`~dpexplorer.sums.mechanisms.tau_curve`), gathered
in one :class:`SumsResult` by :func:`simulate`; :func:`sizes_table` and
:func:`best_by_size` are the numbers of its table and summary.

The trials are a **simulation** on data treated as public: they spend from
throwaway ledgers, and their tables hold the true sums.

Truncated or not: the bias/variance split
-----------------------------------------
Wu et al. (2019, Sec. 4, "Algorithms") run every mechanism without the
truncation step (NoTrunc: τ = the largest value, all of ε for the answers)
and with it (Trunc: τ by SVT with ``α·ε``, the answers with ``(1 − α)·ε``).
:func:`simulate` runs both on the same seeds and :func:`error_split` splits
each run's error per mechanism.  Given τ, a noisy answer ``ŷ_i`` of query
``i`` is the truncated sum plus zero-mean noise, so

    E[(ŷ_i − y_i)² | τ] = b_i(τ)² + σ_i²(τ),

``b_i(τ) = Σ_j W_ij (min(v_j, τ) − v_j) x_j ≤ 0`` the truncation bias (paper
Sec. 3.1; :func:`~dpexplorer.sums.mechanisms.truncation_bias`) and ``σ_i²(τ)``
the analytic noise variance of the mechanism (paper Table 1 and App. A.3-A.4;
:func:`~dpexplorer.sums.mechanisms.analytic_variance`).  An SVT τ is random
but independent of the answers' noise, so averaging over the trials' τ keeps
the identity: ``bias RMSE² + noise RMSE² = total MSE`` (mean over trials and
queries), checked against the trials' squared errors in the tests.  The bias
is read from the records: the split is a **simulation** on the user's own or
public data, never part of a release (a release holds no true sum).

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

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd

from ..queries import workloads
from . import mechanisms as sums
from .thresholds import SVTParams

__all__ = ["BucketedAttribute", "SumsResult", "SIZE_COLUMNS", "SPLIT_COLUMNS", "build_workload",
           "curve_taus", "simulate", "sizes_table", "best_by_size", "notes_for", "error_split",
           "truncation_split", "truncation_hurts", "split_table", "split_text"]

#: Columns of :func:`error_split` (RMSEs in attribute units; ``tau`` the trials' median τ).
SPLIT_COLUMNS = ["mechanism", "truncated", "tau", "bias_rmse", "noise_rmse", "total_rmse", "empirical_rmse",
                 "median_rel_error", "median_rel_error_isotonic"]

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
    split : DataFrame
        :func:`error_split` of this run and of :attr:`untruncated` (columns :data:`SPLIT_COLUMNS`).
    untruncated : SumsResult or None
        The same trials without truncation (τ = the largest value, all of ε for the answers;
        same seeds), or ``None`` when this run is untruncated or was asked without it.  Its
        ``curve`` is empty: the τ curve is this run's.
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
    split: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SPLIT_COLUMNS))
    untruncated: SumsResult | None = None

    def shown(self, untruncated: bool = False) -> SumsResult:
        """:attr:`untruncated` if asked for and present, else this result."""
        return self.untruncated if untruncated and self.untruncated is not None else self


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
             on_tau: Callable[[int, int], None] | None = None,
             untruncated: bool = True) -> SumsResult:
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
        ``(done, total)`` after each trial (``total`` counts the untruncated trials too) and
        each τ of the curve.
    untruncated : bool
        With a truncating ``tau_mode`` (``"svt"``, ``"user"``), also run the trials without
        truncation (:attr:`SumsResult.untruncated`, paper Sec. 4 "NoTrunc") for the split.

    Returns
    -------
    SumsResult
        With :attr:`~SumsResult.split` (:func:`error_split` of both runs).
    """
    t0 = time.perf_counter()
    both = untruncated and tau_mode != "none"
    steps = trials * (2 if both else 1)

    def progress(offset):
        return None if on_trial is None else (lambda done, _total: on_trial(offset + done, steps))

    df = sums.evaluate(attr.x, workload, epsilon, trials=trials, seed=seed, threshold=tau_mode,
                       tau=tau, svt=svt, strategy=strategy, gamma=gamma, progress=progress(0))
    eps_ans = sums.answer_epsilon(epsilon, tau_mode, svt)
    notes = [*notes, *notes_for(attr)]
    base = None
    if both:
        bdf = sums.evaluate(attr.x, workload, epsilon, trials=trials, seed=seed, threshold="none",
                            strategy=strategy, gamma=gamma, progress=progress(trials))
        base = SumsResult(attr, workload, epsilon, epsilon, seed, trials, "none", bdf, sums.summarize(bdf),
                          sums.compare_sizes(bdf), pd.DataFrame(columns=_CURVE_COLUMNS),
                          sums.trial_taus(bdf), strategy, None, notes, value_kind=value_kind,
                          spacing=spacing, split=error_split(bdf, truncated=False))
    curve = sums.tau_curve(workload, attr.x, eps_ans, taus=curve_taus(workload), strategy=strategy,
                           progress=on_tau)
    split = error_split(df, truncated=tau_mode != "none")
    if base is not None:
        split = pd.concat([split, base.split], ignore_index=True)
    res = SumsResult(attr, workload, epsilon, eps_ans, seed, trials, tau_mode, df, sums.summarize(df),
                     sums.compare_sizes(df), curve, sums.trial_taus(df), strategy, svt, notes,
                     time.perf_counter() - t0, value_kind=value_kind, spacing=spacing, split=split,
                     untruncated=base)
    if base is not None:
        base.seconds = res.seconds
    return res


_CURVE_COLUMNS = ["tau", "mechanism", "bias2", "variance", "total", "rmse"]


# ======================================================================= bias / variance split
def error_split(evaluation: pd.DataFrame, truncated: bool) -> pd.DataFrame:
    """Per mechanism: the error of the raw answers split into truncation bias and noise (a simulation).

    From :func:`dpexplorer.sums.evaluate`'s table (rows without isotonic regression; the
    projection is not linear, so the split holds for the raw answers only).  Over all trials
    ``t`` and queries ``i`` (module docstring, "Truncated or not")::

        bias RMSE  = sqrt(mean b_i(τ_t)²)       (truncated minus true sum, from the records)
        noise RMSE = sqrt(mean σ_i²(τ_t))       (analytic, Wu et al. 2019 Table 1, App. A.3-A.4)
        total RMSE = sqrt(bias RMSE² + noise RMSE²)
        empirical RMSE = sqrt(mean (ŷ_ti − y_i)²)   (the trials' own; → total RMSE as trials grow)

    NOT private: the bias needs the true records.  For a study on public data or on the
    user's own data, never for a release.

    Parameters
    ----------
    evaluation : DataFrame
        :func:`dpexplorer.sums.evaluate`'s table (columns
        :data:`~dpexplorer.sums.mechanisms.EVALUATION_COLUMNS`).
    truncated : bool
        Whether the run had the truncation step (recorded in the ``truncated`` column).

    Returns
    -------
    DataFrame
        One row per mechanism (in :data:`~dpexplorer.sums.mechanisms.MECHANISMS` order),
        columns :data:`SPLIT_COLUMNS`: ``tau`` the median τ over trials and queries (SQM has one
        per query), RMSEs in attribute units,
        ``median_rel_error`` of the raw answers and ``median_rel_error_isotonic`` after isotonic
        regression (NaN if not evaluated).  ``attrs["mode"] = "simulation"``.

    Raises
    ------
    KeyError
        If ``evaluation`` lacks a column of :data:`~dpexplorer.sums.mechanisms.EVALUATION_COLUMNS`.
    """
    missing = [c for c in sums.EVALUATION_COLUMNS if c not in evaluation.columns]
    if missing:
        raise KeyError(f"error_split needs sums.evaluate's table; missing columns {missing}")
    rows = []
    for mech in sums.MECHANISMS:
        sub = evaluation[evaluation["mechanism"] == mech]
        raw = sub[~sub["isotonic"].astype(bool)]
        if raw.empty:
            continue
        iso = sub.loc[sub["isotonic"].astype(bool), "rel_error"]
        b2, var = float(np.mean(raw["bias"] ** 2)), float(np.mean(raw["variance"]))
        rows.append({"mechanism": mech, "truncated": bool(truncated), "tau": float(raw["tau"].median()),
                     "bias_rmse": math.sqrt(b2), "noise_rmse": math.sqrt(var),
                     "total_rmse": math.sqrt(b2 + var),
                     "empirical_rmse": math.sqrt(float(np.mean(raw["error"] ** 2))),
                     "median_rel_error": float(raw["rel_error"].median()),
                     "median_rel_error_isotonic": float(iso.median()) if len(iso) else math.nan})
    out = pd.DataFrame(rows, columns=SPLIT_COLUMNS)
    out.attrs["mode"] = "simulation"
    return out


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


def truncation_split(x, workload: sums.SumWorkload, epsilon: float, trials: int = 100, seed: int = 0, *,
                     threshold: str = "svt", tau: float | None = None, svt: SVTParams | None = None,
                     strategy: str = "greedy_h", gamma: float = 1.0,
                     mechanisms: Sequence[str] = sums.MECHANISMS) -> pd.DataFrame:
    """:func:`error_split` of the mechanisms with and without truncation, on the same seeds (a simulation).

    The truncated run chooses τ as ``threshold`` says (``"svt"``: one SVT per trial with
    ``α·ε``, shared by Identity/Workload/TiMM/TaMM, SQM one per query, Wu et al. 2019 Alg. 9
    and Alg. 2; ``"user"`` with ``tau``: that public τ); the untruncated run is the paper's
    NoTrunc (τ = the largest bucket value, all of ε for the answers; Sec. 4, Alg. 1).

    Parameters
    ----------
    x : array_like, shape (n,)
        True records per bucket (NOT private here: the bias is read from them).
    workload : SumWorkload, shape (m, n)
    epsilon : float
        Total ε of every run.
    trials, seed, tau, svt, strategy, gamma, mechanisms
        As in :func:`dpexplorer.sums.evaluate`.
    threshold : {"svt", "user"}
        How the truncated run sets τ.

    Returns
    -------
    DataFrame
        Columns :data:`SPLIT_COLUMNS`: the truncated rows, then the untruncated ones.

    Raises
    ------
    ValueError
        ``threshold`` not ``"svt"`` or ``"user"``, or as :func:`dpexplorer.sums.evaluate`.
    """
    if threshold not in ("svt", "user"):
        raise ValueError(f"threshold must be 'svt' or 'user' (the truncated run; the untruncated one "
                         f"is always run), got {threshold!r}")
    cut, full = (sums.evaluate(x, workload, epsilon, mechanisms, trials, seed, threshold=mode, tau=t,
                               svt=svt, strategy=strategy, gamma=gamma)
                 for mode, t in ((threshold, tau), ("none", None)))
    return pd.concat([error_split(cut, truncated=True), error_split(full, truncated=False)],
                     ignore_index=True)


def truncation_hurts(split: pd.DataFrame) -> list[str]:
    """Mechanisms whose total RMSE is larger with truncation than without (in paper Table 1 order).

    Parameters
    ----------
    split : DataFrame
        :func:`error_split` rows of both runs (:func:`truncation_split`, :attr:`SumsResult.split`);
        mechanisms with only one of the two runs are left out.
    """
    total = split.pivot_table(index="mechanism", columns="truncated", values="total_rmse")
    if True not in total.columns or False not in total.columns:
        return []
    worse = total[True] > total[False]
    return [m for m in sums.MECHANISMS if m in worse.index and bool(worse[m])]


def _sig(v: float) -> float:
    return float(f"{v:.4g}") if math.isfinite(v) else v


def split_table(split: pd.DataFrame | None) -> pd.DataFrame:
    """:func:`error_split` rows for display: mechanism labels, "yes"/"no", 4 significant digits.

    ``None`` (no run yet) gives the empty table with the display columns.
    """
    if split is None:
        split = pd.DataFrame(columns=SPLIT_COLUMNS)
    out = pd.DataFrame({
        "mechanism": split["mechanism"].map(sums.LABELS), "truncated": split["truncated"].map(
            {True: "yes", False: "no"}), "τ": split["tau"].map(_sig)})
    for col, label in (("bias_rmse", "bias RMSE"), ("noise_rmse", "noise RMSE"),
                       ("total_rmse", "total RMSE"), ("empirical_rmse", "trials' RMSE"),
                       ("median_rel_error", "median rel. error"),
                       ("median_rel_error_isotonic", "median rel. error (isotonic)")):
        out[label] = split[col].map(_sig)
    return out


def split_text(split: pd.DataFrame, unit: str = "") -> str:
    """Markdown: where truncation hurts (total RMSE truncated > untruncated) and how much of it is bias.

    Returns ``""`` when ``split`` lacks one of the two runs.
    """
    if split.empty or split["truncated"].nunique() < 2:
        return ""
    rows = split.set_index(["mechanism", "truncated"])
    hurt = truncation_hurts(split)
    mechs = [m for m in sums.MECHANISMS if (m, True) in rows.index and (m, False) in rows.index]

    def numbers(m):
        cut, full = rows.loc[(m, True)], rows.loc[(m, False)]
        share = cut["bias_rmse"] ** 2 / cut["total_rmse"] ** 2 if cut["total_rmse"] > 0 else 0.0
        return (f"{sums.LABELS[m]} {cut['total_rmse']:.3g} vs {full['total_rmse']:.3g} {unit}".rstrip()
                + f" (bias {100 * share:.0f} % of its squared error; median relative error "
                f"{cut['median_rel_error']:.3g} vs {full['median_rel_error']:.3g})")
    if hurt:
        helped = [sums.LABELS[m] for m in mechs if m not in hurt]
        text = (f"**Truncation hurts {', '.join(sums.LABELS[m] for m in hurt)} here**: total RMSE with "
                f"vs without truncation: {'; '.join(numbers(m) for m in hurt)}. The bias from "
                "truncation costs more than the noise it saves; compare with the run without "
                "truncation.")
        if helped:
            text += f" It does not raise the total of {', '.join(helped)}."
    else:
        text = ("**Truncation does not raise the total RMSE of any mechanism here**: "
                f"{'; '.join(numbers(m) for m in mechs)}.")
    return text + (" *The bias is read from the records: a simulation on data treated as public, "
                   "never a release.*")
