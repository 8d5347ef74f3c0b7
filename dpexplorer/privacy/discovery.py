"""Private domain discovery: a table's public domain found by DP measurements on its records.

A release on records needs a public domain (``dpexplorer/docs/public_domain.md``).
When the data owner cannot declare it, :func:`discover_domain` finds one
inside the privacy kernel, each attribute spending an explicit ε (and δ)
recorded in the ledger before anything is drawn:

* **categories** by private partition selection with the Laplace threshold
  (Korolova, Kenthapadi, Mishra & Ntoulas, WWW 2009, Sec. 4; Gopi, Gulhane,
  Kulkarni, Shen, Shokouhi & Yekhanin, ICML 2020, Sec. 1; opendp's
  ``make_laplace_threshold``, Rogers 2023): every category present in the
  records gets its count plus ``Laplace(b)`` and is kept if the noisy count
  reaches ``τ``.  A record adds 1 to one count, so with ``b = 1/ε`` and
  ``τ = 1 + b·ln(1/(2δ))`` it is (ε, δ)-DP: ε from the Laplace mechanism on
  the categories both neighbours have, δ = P(1 + Lap(b) ≥ τ) = ½·e^{−(τ−1)/b}
  the chance that a category only one record has is kept.  Only the set of
  kept categories leaves the kernel (never their counts).
* **numeric ranges** by two DP quantiles over a public candidate grid (the
  exponential-mechanism quantile of Smith, STOC 2011, Sec. 3, as opendp's
  ``make_private_quantile``), drawn by report-noisy-max with exponential
  noise (McKenna & Sheldon, NeurIPS 2020, Thm 2; the kernel's
  :func:`~dpexplorer.privacy.samplers.noisy_max`).  The utility of candidate
  ``c`` for the ``α``-quantile is ``u(c) = −|#{x ≤ c} − α·N|`` over the
  ``N`` finite values; adding or removing one record changes it by at most
  ``Δu = max(α, 1 − α)``, so ``scale = 2Δu/ε`` is ε-DP.  The range is
  ``[q_lo, q_hi]`` (default quantiles 0.01 and 0.99, ε/2 each), cut in
  ``bins`` equal-width bins; records outside it are dropped by releases.
  This needs public ``bounds`` (or ``candidates``) the values lie in.
* **numeric ranges without public bounds** by a noisy histogram over
  power-of-two bins (the approximate-bounds method of Google's DP library,
  Wilson, Zhang, Lam, Desfontaines, Simmons-Marengo & Gipson, PoPETs 2020):
  each finite value falls in one bin ``[2^k, 2^(k+1))`` (or its negative, or
  the two bins next to 0), so the whole histogram has L1 sensitivity 1 and
  Laplace noise of scale ``b = 1/ε`` on every one of the public bins is ε-DP
  (Dwork, McSherry, Nissim & Smith, TCC 2006).  The range runs from the lowest
  to the highest bin whose noisy count reaches ``τ = b·ln(K/(2p))``, ``K`` the
  number of bins: an empty bin passes with probability at most ``p/K``, so any
  of them with at most ``p`` (:data:`BOUNDS_FAILURE`).  A quantile over a wide
  grid does badly here: the exponential mechanism spreads over the many
  candidates outside the data, whose utilities differ by only ``α·N``.

Release mode (:data:`~dpexplorer.privacy.samplers.OS_CSPRNG`) draws through
opendp after opendp's own privacy map confirms the (ε, δ) recorded; a
simulation (a seeded ``numpy.random.Generator``) gives a domain marked as
read from the data (a seeded draw protects nothing, so releases refuse it).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..queries import limits
from ..queries.domain import Attribute, Domain, Table
from . import samplers
from .kernel import _Boundary
from .ledger import PrivacyLedger
from .samplers import RandomSource

if TYPE_CHECKING:
    import dask.dataframe as dd
    from opendp.mod import Measurement

__all__ = ["discover_domain", "PrivateRecords", "threshold_for", "threshold_delta",
           "quantile_sensitivity", "bounds_threshold", "DEFAULT_QUANTILES", "DEFAULT_GRID",
           "POWER_OF_TWO_EDGES", "BOUNDS_FAILURE"]

#: Quantiles a discovered numeric range spans by default.
DEFAULT_QUANTILES = (0.01, 0.99)
#: Candidates of the public grid between a numeric attribute's public bounds by default.
DEFAULT_GRID = 1001
#: The public bins of a range found without bounds: edges 0 and ±2^k for k from −10 to 50 (122 bins,
#: values beyond ±2^50 in the end bins): chosen without the data, for values of any sign and scale.
POWER_OF_TWO_EDGES = np.concatenate([-(2.0 ** np.arange(50, -11, -1)), [0.0], 2.0 ** np.arange(-10, 51)])
#: Probability that some empty power-of-two bin passes the threshold (and stretches the range).
BOUNDS_FAILURE = 0.01
#: Slack on ``ln(1/(2δ))`` so that opendp's rounding-aware privacy map stays within the δ recorded.
_TAU_SLACK = 1e-6


def threshold_for(epsilon: float, delta: float) -> tuple[float, float]:
    """``(b, τ)`` of Laplace-threshold partition selection: ``b = 1/ε``, ``τ = 1 + b·(ln(1/(2δ)) + 10⁻⁶)``.

    (ε, δ)-DP when one record adds 1 to one category's count (module
    docstring; Korolova et al. WWW 2009, Sec. 4; Gopi et al. ICML 2020).  The
    slack of 10⁻⁶ keeps the real δ (:func:`threshold_delta`) just below ``δ``.

    Raises
    ------
    ValueError
        If ε is not positive and finite or δ not in (0, 1/2).
    """
    eps, dlt = float(epsilon), float(delta)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"partition selection needs ε > 0, got {epsilon!r}")
    if not 0.0 < dlt < 0.5:
        raise ValueError(f"partition selection needs 0 < δ < 1/2 (δ bounds the chance a category "
                         f"of one record is kept), got {delta!r}")
    b = 1.0 / eps
    return b, 1.0 + b * (math.log(1.0 / (2.0 * dlt)) + _TAU_SLACK)


def threshold_delta(scale: float, threshold: float) -> float:
    """δ of the Laplace threshold: ``P(1 + Lap(b) ≥ τ) = ½·exp(−(τ − 1)/b)`` for ``τ ≥ 1``."""
    return 0.5 * math.exp(-(float(threshold) - 1.0) / float(scale))


def bounds_threshold(epsilon: float, bins: int, failure: float = BOUNDS_FAILURE) -> tuple[float, float]:
    """``(b, τ)`` of the noisy power-of-two histogram: ``b = 1/ε``, ``τ = b·ln(bins/(2·failure))``.

    An empty bin's noisy count ``Lap(b)`` reaches ``τ`` with probability
    ``½·e^{−τ/b} = failure/bins``, so some empty bin does with probability at
    most ``failure`` (union bound; module docstring).

    Raises
    ------
    ValueError
        If ε is not positive and finite, ``bins`` < 1 or ``failure`` not in (0, 1).
    """
    eps, p = float(epsilon), float(failure)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"a noisy histogram needs ε > 0, got {epsilon!r}")
    if int(bins) < 1 or not 0.0 < p < 1.0:
        raise ValueError(f"need bins >= 1 and 0 < failure < 1, got bins={bins!r}, failure={failure!r}")
    b = 1.0 / eps
    return b, b * math.log(int(bins) / (2.0 * p))


def quantile_sensitivity(alpha: float) -> float:
    """``Δu = max(α, 1 − α)``: sensitivity of ``u(c) = −|#{x ≤ c} − α·N|`` to adding or removing a record."""
    return max(float(alpha), 1.0 - float(alpha))


@functools.lru_cache(maxsize=64)
def _threshold_measurement(scale: float, threshold: float) -> Measurement:
    dp = samplers._dp()
    space = (dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=float, nan=False)),
             dp.l01inf_distance(dp.absolute_distance(T=float)))
    measurement: Measurement = dp.m.make_laplace_threshold(*space, scale=float(scale),
                                                           threshold=float(threshold))
    return measurement


def opendp_threshold_privacy(scale: float, threshold: float) -> tuple[float, float]:
    """``(ε, δ)`` opendp's own map gives its Laplace threshold when one record changes one count by 1."""
    eps, dlt = _threshold_measurement(float(scale), float(threshold)).map((1, 1.0, 1.0))
    return float(eps), float(dlt)


def _sorted(values: list[Any]) -> list[Any]:
    try:
        return sorted(values)
    except TypeError:  # mixed types
        return sorted(values, key=lambda v: (type(v).__name__, str(v)))


class PrivateRecords(_Boundary):
    """Record columns behind the privacy boundary, for domain discovery.

    Parameters
    ----------
    records : pandas.DataFrame or dask.dataframe.DataFrame
    ledger : PrivacyLedger, optional
        Where spends are recorded (a new, uncapped one by default).

    Raises
    ------
    TypeError
        If ``records`` is not a (dask) DataFrame or ``ledger`` not a PrivacyLedger.
    """

    def __init__(self, records: pd.DataFrame | dd.DataFrame, ledger: PrivacyLedger | None = None) -> None:
        if getattr(records, "columns", None) is None or not hasattr(records, "groupby"):
            raise TypeError(f"records must be a pandas or dask DataFrame, got {type(records).__name__}")
        if ledger is not None and not isinstance(ledger, PrivacyLedger):
            raise TypeError(f"ledger must be a dpexplorer.PrivacyLedger, got {type(ledger).__name__}")
        self._records = records
        self.columns = tuple(records.columns)
        self.ledger = ledger if ledger is not None else PrivacyLedger()

    def __reduce__(self) -> NoReturn:
        raise TypeError("PrivateRecords holds private records and is never pickled or copied")

    def _column(self, name: str) -> pd.Series:
        if name not in self.columns:
            raise ValueError(f"the records have no column {name!r}; columns: {list(self.columns)}")
        col = self._records[name]
        return col.compute() if hasattr(col, "compute") else col

    def select_categories(self, column: str, epsilon: float, delta: float, source: RandomSource,
                          label: str) -> list[Any]:
        """The categories of ``column`` whose noisy count reaches the threshold (partition selection).

        (ε, δ)-DP with ``(b, τ)`` = :func:`threshold_for` (module docstring).
        Missing values are no category.  Only the sorted list of kept
        categories leaves the kernel.

        Raises
        ------
        ValueError
            For a bad ε or δ, an unknown column, or if opendp's privacy map
            exceeds the (ε, δ) recorded (release mode; nothing drawn).
        BudgetExceededError
            If the ledger's budget would be exceeded (nothing drawn).
        """
        b, tau = threshold_for(epsilon, delta)
        counts = self._column(column).dropna().value_counts(sort=False)
        keys = [k.item() if isinstance(k, np.generic) else k for k in counts.index]
        values = counts.to_numpy(dtype=float)
        if samplers.is_release(source):
            eps_dp, dlt_dp = opendp_threshold_privacy(b, tau)
            if eps_dp > float(epsilon) * (1 + 1e-9) or dlt_dp > float(delta) * (1 + 1e-9):
                raise RuntimeError(f"opendp's privacy map gives (ε, δ) = ({eps_dp:.6g}, {dlt_dp:.6g}) "
                                   f"above the ({epsilon:.6g}, {delta:.6g}) recorded; nothing was drawn")
        self._record(label + " (partition selection)", source, epsilon, delta, math.inf,
                     f"Laplace threshold (b = {b:.4g}, τ = {tau:.4g})", 1, 1.0)
        if samplers.is_release(source):
            kept = _threshold_measurement(b, tau)({str(i): float(v) for i, v in enumerate(values)})
            chosen = [keys[int(i)] for i in kept]
        else:
            noisy = values + source.laplace(0.0, b, size=values.size)
            chosen = [k for k, v in zip(keys, noisy, strict=True) if v >= tau]
        return _sorted(chosen)

    def quantile(self, column: str, candidates: npt.ArrayLike, alpha: float, epsilon: float,
                 source: RandomSource, label: str) -> float:
        """A candidate near the ``alpha``-quantile of ``column``'s finite values (ε-DP).

        Report-noisy-max over the public, sorted ``candidates`` with utility
        ``−|#{x ≤ c} − α·N|`` and exponential noise of scale ``2Δu/ε``,
        ``Δu`` = :func:`quantile_sensitivity` (module docstring).  Values
        that are not finite numbers are ignored.

        Raises
        ------
        ValueError
            If ``alpha`` is not in (0, 1), the candidates are not finite and
            strictly increasing, or ε is bad.
        BudgetExceededError
            If the ledger's budget would be exceeded (nothing drawn).
        """
        a = float(alpha)
        if not 0.0 < a < 1.0:
            raise ValueError(f"the quantile α must be in (0, 1), got {alpha!r}")
        c = np.asarray(candidates, dtype=float)
        if c.ndim != 1 or c.size < 2 or not np.all(np.isfinite(c)) or np.any(np.diff(c) <= 0):
            raise ValueError("quantile candidates must be at least two finite, strictly increasing numbers")
        eps = float(epsilon)
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"a DP quantile needs ε > 0, got {epsilon!r}")
        sens = quantile_sensitivity(a)
        scale = 2.0 * sens / eps
        self._crosscheck(source, eps, lambda: samplers.opendp_noisy_max_epsilon(scale, sens), "ε")
        self._record(label + f" (DP quantile α = {a:g}, report noisy max)", source, eps, 0.0,
                     eps * eps / 2.0, f"report-noisy-max over {c.size} candidates, "
                     f"Exponential({scale:.4g})", 1, sens)
        v = pd.to_numeric(self._column(column), errors="coerce").to_numpy(dtype=float)
        v = np.sort(v[np.isfinite(v)])
        u = -np.abs(np.searchsorted(v, c, side="right") - a * v.size)
        return float(c[samplers.noisy_max(u, scale, source)])

    def approx_bounds(self, column: str, epsilon: float, source: RandomSource, label: str,
                      failure: float = BOUNDS_FAILURE) -> tuple[float, float]:
        """``(lo, hi)``: the lowest and highest power-of-two bin of ``column`` whose noisy count reaches ``τ``.

        Laplace noise of scale ``b = 1/ε`` on the counts of every bin of
        :data:`POWER_OF_TWO_EDGES` (one record is in one bin: L1 sensitivity 1,
        ε-DP), threshold ``τ`` from :func:`bounds_threshold` (module
        docstring).  Values that are not finite numbers are in no bin.  Only
        the two edges leave the kernel.

        Raises
        ------
        ValueError
            If ε is bad, no bin reaches the threshold (its ε was spent), or
            (release mode) opendp's privacy map exceeds the ε recorded.
        BudgetExceededError
            If the ledger's budget would be exceeded (nothing drawn).
        """
        edges = POWER_OF_TWO_EDGES
        k = edges.size - 1
        b, tau = bounds_threshold(epsilon, k, failure)
        self._crosscheck(source, float(epsilon), lambda: samplers.opendp_laplace_epsilon(b, 1.0), "ε")
        self._record(label + " (noisy histogram over powers of two)", source, float(epsilon), 0.0,
                     float(epsilon) ** 2 / 2.0, f"Laplace(b = {b:.4g}) on {k} bins, threshold τ = {tau:.4g}",
                     k, 1.0)
        v = pd.to_numeric(self._column(column), errors="coerce").to_numpy(dtype=float)
        v = v[np.isfinite(v)]
        index = np.clip(np.searchsorted(edges, v, side="right") - 1, 0, k - 1)
        counts = np.bincount(index, minlength=k).astype(float)
        kept = np.flatnonzero(samplers.laplace(counts, b, source) >= tau)
        if kept.size == 0:
            raise ValueError(f"no power-of-two bin of {column!r} reached the threshold (ε = {epsilon:.4g} "
                             "spent): give public bounds, more ε, or declare its range")
        return float(edges[kept[0]]), float(edges[kept[-1] + 1])


def _spec_items(spec: dict[str, Any], columns: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """``[(name, {"kind", ...})]`` from the user's spec, checked (no records read)."""
    if not isinstance(spec, dict) or not spec:
        raise TypeError("spec must be a non-empty dict: attribute -> 'categorical' or "
                        "{'kind': 'numeric', 'bounds': (lo, hi), 'bins': 16}")
    limits.check("attributes", len(spec), "discover_domain: attributes")
    out: list[tuple[str, dict[str, Any]]] = []
    for name, item in spec.items():
        if not isinstance(name, str) or name not in columns:
            raise ValueError(f"spec names {name!r:.80}, which is not a column; columns: {list(columns)}")
        item = {"kind": item} if isinstance(item, str) else item
        if not isinstance(item, dict) or item.get("kind") not in ("categorical", "numeric"):
            raise ValueError(f"spec for {name!r}: 'categorical' or a dict with kind 'categorical' or "
                             "'numeric'")
        if item["kind"] == "categorical":
            extra = set(item) - {"kind"}
            if extra:
                raise ValueError(f"spec for {name!r}: a categorical attribute takes no {sorted(extra)}")
            out.append((name, {"kind": "categorical"}))
            continue
        extra = set(item) - {"kind", "bounds", "candidates", "bins", "quantiles", "grid"}
        if extra:
            raise ValueError(f"spec for {name!r}: unknown keys {sorted(extra)}; numeric attributes take "
                             "bounds (public lo, hi) or candidates, bins, quantiles, grid")
        if "bounds" in item and "candidates" in item:
            raise ValueError(f"spec for {name!r}: give the public 'bounds' (lo, hi) the range lies in, "
                             "or an explicit list of 'candidates', not both")
        cands: npt.NDArray[np.float64] | None
        if "bounds" not in item and "candidates" not in item:
            if "quantiles" in item or "grid" in item:
                raise ValueError(f"spec for {name!r}: quantiles and grid go with public 'bounds' or "
                                 "'candidates'; without them the range comes from a noisy histogram over "
                                 "powers of two")
            cands = None
        elif "bounds" in item:
            try:
                lo, hi = (float(v) for v in item["bounds"])
            except (TypeError, ValueError):
                raise ValueError(f"spec for {name!r}: bounds must be two numbers (lo, hi)") from None
            if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
                raise ValueError(f"spec for {name!r}: bounds must be finite with hi > lo")
            k = limits.whole_number(item.get("grid", DEFAULT_GRID), f"grid for {name!r}", minimum=2,
                                    limit="cells")
            cands = np.linspace(lo, hi, k)
        else:
            cands = np.asarray(item["candidates"], dtype=float)
            limits.check("cells", cands.size, f"candidates for {name!r}")
        bins = limits.whole_number(item.get("bins", 16), f"bins for {name!r}", limit="bins")
        q = tuple(float(v) for v in item.get("quantiles", DEFAULT_QUANTILES))
        if len(q) != 2 or not 0.0 < q[0] < q[1] < 1.0:
            raise ValueError(f"spec for {name!r}: quantiles must be two numbers 0 < lo < hi < 1")
        if cands is not None and (cands.ndim != 1 or cands.size < 2 or not np.all(np.isfinite(cands))
                                  or np.any(np.diff(cands) <= 0)):
            raise ValueError(f"spec for {name!r}: candidates must be finite and strictly increasing")
        out.append((name, {"kind": "numeric", "candidates": cands, "bins": int(bins), "quantiles": q}))
    return out


def discover_domain(records: pd.DataFrame | dd.DataFrame | Table, spec: dict[str, Any], *, epsilon: float,
                    delta: float = 0.0, ledger: PrivacyLedger | None = None,
                    rng: RandomSource | None = None) -> Domain:
    """A public domain for ``records`` found by DP measurements (module docstring), charged to ``ledger``.

    ``epsilon`` is split equally over the attributes of ``spec`` (a numeric
    one spends half on each end of its range); ``delta`` equally over the
    categorical ones (partition selection needs δ > 0; numeric ranges are
    pure ε-DP).  The whole cost is checked against the ledger's budget
    before the first draw; each measurement is then recorded before its noise.

    Parameters
    ----------
    records : pandas.DataFrame, dask.dataframe.DataFrame or Table
        The private records (a Table's records are used; its domain is ignored).
    spec : dict
        ``{column: "categorical"}`` or ``{column: {"kind": "numeric", "bounds":
        (lo, hi), "bins": 16, "quantiles": (0.01, 0.99), "grid": 1001}}``
        (``bounds``: a public range the values are known to lie in, e.g.
        ``(0, 10**7)`` for salaries; or ``candidates``: an explicit public
        grid; with neither, the range is found by a noisy histogram over the
        power-of-two bins of :data:`POWER_OF_TWO_EDGES`, and ``quantiles`` and
        ``grid`` do not apply).
    epsilon : float
        Total ε of the discovery.
    delta : float
        Total δ (needed when an attribute is categorical).
    ledger : PrivacyLedger, optional
        The dataset's ledger (a new, uncapped one if ``None``).
    rng : None, OS_CSPRNG or numpy.random.Generator
        ``None``/OS_CSPRNG: a release (opendp's samplers); a seeded Generator:
        a simulation, whose domain is marked ``source="data"``.

    Returns
    -------
    Domain
        Attributes in ``spec`` order; ``source="discovered"`` (or ``"data"``
        for a simulation) and ``spent`` = ``(attribute, ε, δ)`` per attribute.

    Raises
    ------
    TypeError, ValueError
        For a bad spec, ε, δ (e.g. δ = 0 with a categorical attribute), or
        if no category of an attribute reaches the threshold (its ε was spent).
    BudgetExceededError
        If the whole discovery does not fit the budget (nothing drawn).
    """
    # a Table's records are a pandas or dask DataFrame (Table checks them)
    frame = cast("pd.DataFrame | dd.DataFrame", records.records) if isinstance(records, Table) else records
    source = samplers.OS_CSPRNG if rng is None else rng
    samplers.check_source(source)
    data = PrivateRecords(frame, ledger)
    items = _spec_items(spec, data.columns)
    eps = float(epsilon)
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"discovery needs a total ε > 0, got {epsilon!r}")
    dlt = float(delta)
    n_cat = sum(1 for _, it in items if it["kind"] == "categorical")
    if n_cat and not 0.0 < dlt < 0.5:
        raise ValueError(f"discovering categories needs 0 < δ < 1/2 (partition selection is (ε, δ)-DP), "
                         f"got delta={delta!r}")
    if not n_cat and dlt != 0.0:
        raise ValueError("delta is spent only on categorical attributes; give delta=0 for numeric ones")
    eps_a, dlt_a = eps / len(items), (dlt / n_cat if n_cat else 0.0)
    # the whole cost is reserved (checked and recorded) before the first draw: a refusal draws nothing;
    # partition selection has no zCDP bound (ρ = ∞), so a zCDP budget refuses it
    with data.reserve(eps, dlt, math.inf if n_cat else None,
                      label=f"domain discovery of {len(items)} attribute(s)", source=source):
        attrs: list[Attribute] = []
        spent: list[tuple[str, float, float]] = []
        for name, it in items:
            label = f"domain discovery: {name!r}"
            if it["kind"] == "categorical":
                cats = data.select_categories(name, eps_a, dlt_a, source, label)
                spent.append((name, eps_a, dlt_a))
                if not cats:
                    raise ValueError(f"no category of {name!r} reached the partition-selection threshold "
                                     f"(ε = {eps_a:.4g} spent): give more ε or δ, or declare its categories")
                attrs.append(Attribute(name, categories=tuple(cats)))
            elif it["candidates"] is None:  # no public bounds: the noisy power-of-two histogram
                lo, hi = data.approx_bounds(name, eps_a, source, label)
                spent.append((name, eps_a, 0.0))
                attrs.append(Attribute(name, edges=tuple(np.linspace(lo, hi, it["bins"] + 1))))
            else:
                c = it["candidates"]
                lo = data.quantile(name, c, it["quantiles"][0], eps_a / 2.0, source, label)
                hi = data.quantile(name, c, it["quantiles"][1], eps_a / 2.0, source, label)
                spent.append((name, eps_a, 0.0))
                lo, hi = min(lo, hi), max(lo, hi)
                if hi == lo:  # post-processing: widen to the next public candidate
                    k = int(np.searchsorted(c, lo))
                    lo, hi = (lo, float(c[k + 1])) if k + 1 < c.size else (float(c[k - 1]), hi)
                attrs.append(Attribute(name, edges=tuple(np.linspace(lo, hi, it["bins"] + 1))))
    return Domain(tuple(attrs), "discovered" if samplers.is_release(source) else "data", tuple(spent))
