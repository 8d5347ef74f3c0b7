"""The privacy kernel for record tables: marginals counted by group-by, never the full domain.

:class:`PrivateTable` holds a :class:`~dpexplorer.queries.domain.Table` (records
in a pandas or dask DataFrame over a public domain) and, like
:class:`~dpexplorer.privacy.PrivateData`, returns only noisy answers.  A
strategy it can measure tells it which marginals it needs and how its answers
follow from their count tables (``A.marginal_measure()``, e.g. ResidualPlanner's
plan); the kernel counts those marginals (group-by over the records' cell
codes), forms the exact strategy answers, and adds the noise through the same
path as :meth:`PrivateData.measure` (sensitivity of the strategy, budget
checked before drawing, opendp's privacy map asked in release mode).  The
data vector of the full domain -- up to 10¹⁵ cells for census schemas -- is
never formed.

With a ``dask.dataframe`` the counts are computed on its cluster (one
bincount per partition, summed): the same numbers as with pandas.

Records outside the public domain (a category not listed, a number outside
the bin edges, a missing value in any of the domain's attributes) are dropped
before counting (``out_of_domain="drop"``, the default): a record-wise
filter, so every marginal keeps sensitivity 1 per record, and neither their
number nor their values leave the kernel except through the noisy counts.
``out_of_domain="error"`` raises instead (naming the attribute and how many
rows) and is allowed only in simulations, where nothing is released.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NoReturn, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..queries import limits
from ..queries.domain import DATA_DOMAIN_REFUSAL, Domain, Table
from ..queries.matrix import MatrixLike, as_matrix
from . import samplers
from .kernel import _Boundary
from .ledger import PrivacyLedger
from .noise import NoiseModel
from .samplers import RandomSource

__all__ = ["PrivateTable", "OUT_OF_DOMAIN"]

#: What to do with records outside the public domain: drop them (releases), or raise (simulations only).
OUT_OF_DOMAIN = ("drop", "error")


def check_out_of_domain(value: str, release: bool) -> str:
    """``value`` if it is an allowed ``out_of_domain`` policy for a release (``release``) or a simulation.

    Raises
    ------
    ValueError
        If it is not ``"drop"`` or ``"error"``, or is ``"error"`` in a release
        (the error would publish that such records exist).
    """
    if value not in OUT_OF_DOMAIN:
        raise ValueError(f"out_of_domain must be 'drop' or 'error', got {value!r:.40}")
    if value == "error" and release:
        raise ValueError("out_of_domain='error' is allowed only in simulations: in a release the "
                         "error itself would say that records outside the domain exist. Releases "
                         "drop them (out_of_domain='drop')")
    return value


def _bincount_frame(frame: pd.DataFrame, domain: Domain, axes: Sequence[int], sizes: Sequence[int],
                    out_of_domain: str = "drop") -> npt.NDArray[np.int64]:
    """Counts of every cell of the marginal on ``axes`` in a pandas frame, flat C order (``()``: the total).

    Only records inside the whole domain (every attribute) are counted.
    """
    inside = np.ones(len(frame), dtype=bool)
    codes: dict[int, npt.NDArray[np.int64]] = {}
    for ax, attr in enumerate(domain.attributes):
        c, ok = attr.codes(frame[attr.name].to_numpy())
        if out_of_domain == "error" and not ok.all():
            raise ValueError(f"attribute {attr.name!r}: {int((~ok).sum())} record(s) are outside the "
                             "domain (missing, unlisted category or outside the bin edges)")
        codes[ax], inside = c, inside & ok
    flat = np.zeros(int(inside.sum()), dtype=np.int64)
    for ax, size in zip(axes, sizes, strict=True):
        flat = flat * size + codes[ax][inside]
    return np.bincount(flat, minlength=math.prod(sizes)).astype(np.int64)


class PrivateTable(_Boundary):
    """Records of a :class:`~dpexplorer.queries.domain.Table` behind the privacy boundary.

    Parameters
    ----------
    table : Table
        Records (pandas or dask DataFrame) and their public domain.
    ledger : PrivacyLedger, optional
        Where spends are recorded (a new, uncapped one by default).
    out_of_domain : {"drop", "error"}
        Records outside the domain are dropped (default) or, in simulations
        only, an error (module docstring).

    Raises
    ------
    TypeError
        If ``table`` is not a Table or ``ledger`` not a PrivacyLedger.
    ValueError
        If ``out_of_domain`` is not ``"drop"`` or ``"error"``.
    """

    counts = True  # marginal counts are whole numbers

    def __init__(self, table: Table, ledger: PrivacyLedger | None = None,
                 out_of_domain: str = "drop") -> None:
        check_out_of_domain(out_of_domain, release=False)
        if not isinstance(table, Table):
            raise TypeError(f"table must be a dpexplorer Table, got {type(table).__name__}")
        if ledger is not None and not isinstance(ledger, PrivacyLedger):
            raise TypeError(f"ledger must be a dpexplorer.PrivacyLedger, got {type(ledger).__name__}")
        self._table = table
        self.domain = table.domain
        self.shape = table.domain.shape
        self.name = table.name
        self.ledger = ledger if ledger is not None else PrivacyLedger()
        self.out_of_domain = out_of_domain
        self._cache: dict[tuple[int, ...], npt.NDArray[np.float64]] = {}

    def __reduce__(self) -> NoReturn:
        raise TypeError("a PrivateTable holds private records and is never pickled or copied")

    @property
    def n(self) -> int:
        """Cells of the full domain (never allocated)."""
        return self.domain.cells

    def _marginal(self, axes: tuple[int, ...]) -> npt.NDArray[np.float64]:
        """Exact counts of the marginal on ``axes``, shape ``(n_i for i in axes)`` (inside the kernel)."""
        axes = tuple(sorted(axes))
        if axes in self._cache:
            return self._cache[axes]
        sizes = tuple(self.shape[i] for i in axes)
        limits.check("cells", math.prod(sizes),
                     f"the marginal on {[self.domain.names[i] for i in axes]}: cells")
        records = self._table.records
        domain = self.domain
        if hasattr(records, "to_delayed") and hasattr(records, "npartitions"):  # dask: one bincount per partition
            from dask.base import compute  # dask.compute and dask.delayed, from where dask defines them
            from dask.delayed import delayed

            parts = [delayed(_bincount_frame)(part, domain, axes, sizes, self.out_of_domain)
                     for part in records.to_delayed()]
            counts = np.sum(np.stack(compute(*parts)), axis=0)
        else:
            # a pandas DataFrame (Table checks its records are a pandas or dask frame)
            counts = _bincount_frame(cast(pd.DataFrame, records), domain, axes, sizes, self.out_of_domain)
        out: npt.NDArray[np.float64] = counts.reshape(sizes).astype(float)
        self._cache[axes] = out
        return out

    def measure(self, A: MatrixLike, noise: NoiseModel, source: RandomSource,
                label: str = "measure") -> npt.NDArray[np.float64]:
        """Noisy strategy answers ``y = A x + z`` from marginal counts of the records.

        ``A`` must tell which marginals it needs, ``A.marginal_measure()`` →
        ``(sets, answers)`` with ``answers({attrs: table}) = A x``; the noise is
        that of :meth:`dpexplorer.privacy.PrivateData.measure` (same
        sensitivity, same budget check, same samplers).

        Parameters
        ----------
        A : Matrix, shape (p, n)
            A strategy over the table's domain with ``marginal_measure``
            (e.g. ResidualPlanner's).
        noise : NoiseModel
        source : numpy.random.Generator or OS_CSPRNG
        label : str

        Returns
        -------
        ndarray, shape (p,)

        Raises
        ------
        NotImplementedError
            If ``A`` cannot be measured from marginals (it needs the full data vector).
        ValueError
            If ``A``'s domain is not the table's, or as :meth:`PrivateData.measure`.
        LimitExceededError
            If a marginal it needs has more cells than the ``cells`` limit, or
            ``A`` more rows than ``strategy_rows`` (nothing is counted).
        BudgetExceededError
            If the ledger's budget would be exceeded (nothing is drawn).
        ValueError
            In release mode, if the table's domain was read from the records
            (``domain.source == "data"``) or ``out_of_domain`` is ``"error"``.
        """
        A = as_matrix(A)
        samplers.check_source(source)
        check_out_of_domain(self.out_of_domain, samplers.is_release(source))
        if samplers.is_release(source) and self.domain.inferred:
            raise ValueError(f"the table {self.name!r} cannot be released: {DATA_DOMAIN_REFUSAL}")
        hook = getattr(A, "marginal_measure", None)
        if hook is None:
            raise NotImplementedError(
                f"strategy {A.name!r} cannot be measured from marginal counts of the records; on a "
                f"table use ResidualPlanner (residual_planner), or release from the full data vector")
        if tuple(A.domain) != tuple(self.shape):
            raise ValueError(f"the strategy is over a domain of shape {tuple(A.domain)}, the table's "
                             f"is {tuple(self.shape)}")
        limits.check("strategy_rows", A.m, f"measure: rows of strategy {A.name!r}")
        sets, answers = hook()
        for s in sets:
            limits.check("cells", math.prod(self.shape[i] for i in s),
                         f"the marginal on {[self.domain.names[i] for i in s]}: cells")

        def exact() -> npt.NDArray[np.float64]:
            return np.asarray(answers({tuple(s): self._marginal(tuple(s)) for s in sets}), dtype=float)

        # the answers of marginal-based strategies here are real-valued (orthonormal bases,
        # weights): the continuous samplers
        return self._noisy(A, noise, source, label, False, exact)

    def __repr__(self) -> str:
        return (f"<PrivateTable {self.name!r}: {len(self.domain)} attributes, {self.n:,} cells "
                f"(records hidden); {self.ledger!r}>")
