"""Domains of record tables: named attributes, each categorical or binned numeric.

A :class:`Domain` is the public schema of a data set: which attributes there
are and which cells each has.  A categorical attribute lists its categories; a
numeric one its bin edges.  The cells of the domain are the product of the
attributes' cells, flattened in C order (:mod:`dpexplorer.queries.matrix`):
the same convention as every workload over ``(n_1, ..., n_d)``.

A :class:`Table` pairs records (a pandas or dask DataFrame) with a domain.  Its
records are private: releases hand the table to the privacy kernel
(:class:`dpexplorer.privacy.PrivateTable`), which counts the marginals a
strategy needs by group-by and never builds the full-domain data vector.

The domain must be public, i.e. chosen without looking at the records (or
from documented, public knowledge of the schema): categories read from the
data reveal which values occur.  :func:`Table.from_dataframe` says so when it
infers them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import limits

__all__ = ["Attribute", "Domain", "Table"]


def _name(value, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{what} must be a non-empty string, got {value!r}")
    return value


@dataclass(frozen=True)
class Attribute:
    """One attribute of a domain: categorical (``categories``) or numeric (bin ``edges``).

    Parameters
    ----------
    name : str
        Column name in the records.
    categories : sequence, optional
        The values of a categorical attribute, in cell order (strings or numbers).
    edges : sequence of float, optional
        Increasing bin edges of a numeric attribute (``size = len(edges) − 1``);
        bins are ``[e_k, e_{k+1})``, the last one closed.

    Raises
    ------
    ValueError
        If neither or both of ``categories`` and ``edges`` are given, categories
        repeat, or edges are not finite and strictly increasing.
    LimitExceededError
        If the attribute has more cells than the ``cells`` limit.
    """

    name: str
    categories: tuple | None = None
    edges: tuple[float, ...] | None = None

    def __post_init__(self):
        _name(self.name, "an attribute name")
        if (self.categories is None) == (self.edges is None):
            raise ValueError(f"attribute {self.name!r}: give either categories or bin edges")
        if self.categories is not None:
            if isinstance(self.categories, str | bytes) or not hasattr(self.categories, "__len__"):
                raise TypeError(f"attribute {self.name!r}: categories must be a list or tuple of values, "
                                f"got {type(self.categories).__name__} {self.categories!r:.80}")
            limits.check("cells", len(self.categories), f"attribute {self.name!r}: categories")
            cats = tuple(self.categories)
            if not cats:
                raise ValueError(f"attribute {self.name!r} has no categories")
            if len(set(cats)) != len(cats):
                raise ValueError(f"attribute {self.name!r} repeats a category")
            object.__setattr__(self, "categories", cats)
        else:
            if isinstance(self.edges, str | bytes) or not hasattr(self.edges, "__len__"):
                raise TypeError(f"attribute {self.name!r}: edges must be a list or tuple of numbers, "
                                f"got {type(self.edges).__name__} {self.edges!r:.80}")
            limits.check("cells", len(self.edges) - 1, f"attribute {self.name!r}: bins (edges − 1)")
            try:
                e = np.asarray(self.edges, dtype=float)
            except (TypeError, ValueError):
                raise ValueError(f"attribute {self.name!r}: edges must be numbers, got "
                                 f"{self.edges!r:.80}") from None
            if e.ndim != 1 or e.size < 2 or not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0):
                raise ValueError(f"attribute {self.name!r}: edges must be at least two finite, "
                                 f"strictly increasing numbers, got {self.edges!r}")
            object.__setattr__(self, "edges", tuple(float(v) for v in e))

    @property
    def size(self) -> int:
        """Number of cells."""
        return len(self.categories) if self.categories is not None else len(self.edges) - 1

    @property
    def kind(self) -> str:
        """``"categorical"`` or ``"numeric"``."""
        return "categorical" if self.categories is not None else "numeric"

    def labels(self) -> list[str]:
        """A short label per cell (the category, or ``"[lo, hi)"``)."""
        if self.categories is not None:
            return [str(c) for c in self.categories]
        e = self.edges
        return [f"[{e[k]:g}, {e[k + 1]:g}{']' if k == len(e) - 2 else ')'}" for k in range(len(e) - 1)]

    def encode(self, values) -> np.ndarray:
        """Cell index of every value, shape ``(len(values),)``, int64.

        Raises
        ------
        ValueError
            If a value is missing or outside the attribute's cells (nothing is
            clipped: widen the domain or filter the records first).
        """
        s = pd.Series(values)
        if s.isna().any():
            raise ValueError(f"attribute {self.name!r} has {int(s.isna().sum())} missing value(s); "
                             "drop or recode them before releasing")
        if self.categories is not None:
            codes = pd.Index(list(self.categories)).get_indexer(s).astype(np.int64)
            bad = codes < 0
            if bad.any():
                raise ValueError(f"attribute {self.name!r} has {int(bad.sum())} value(s) outside its "
                                 f"{self.size} categories, e.g. {s[bad].iloc[0]!r}")
            return codes
        v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
        e = np.asarray(self.edges)
        bad = ~np.isfinite(v) | (v < e[0]) | (v > e[-1])
        if bad.any():
            raise ValueError(f"attribute {self.name!r} has {int(bad.sum())} value(s) outside "
                             f"[{e[0]:g}, {e[-1]:g}] or not numeric")
        return np.clip(np.searchsorted(e, v, side="right") - 1, 0, self.size - 1).astype(np.int64)


@dataclass(frozen=True)
class Domain:
    """The public schema of a table: its attributes, in axis order.

    Attributes
    ----------
    attributes : tuple of Attribute

    Raises
    ------
    TypeError
        If ``attributes`` is not a non-empty sequence of :class:`Attribute`.
    ValueError
        If attribute names repeat.
    LimitExceededError
        If there are more attributes than the ``attributes`` limit (the
        number of cells, their product, stays factorised and is not bounded).
    """

    attributes: tuple[Attribute, ...]

    def __post_init__(self):
        if isinstance(self.attributes, str | bytes | Attribute) or not hasattr(self.attributes, "__len__"):
            raise TypeError(f"a domain needs a non-empty sequence of Attribute objects, got "
                            f"{type(self.attributes).__name__}")
        limits.check("attributes", len(self.attributes), "Domain: attributes")
        attrs = tuple(self.attributes)
        if not attrs or not all(isinstance(a, Attribute) for a in attrs):
            raise TypeError("a domain needs a non-empty sequence of Attribute objects")
        names = [a.name for a in attrs]
        if len(set(names)) != len(names):
            raise ValueError(f"attribute names repeat: {names}")
        object.__setattr__(self, "attributes", attrs)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @property
    def shape(self) -> tuple[int, ...]:
        """Cells per attribute ``(n_1, ..., n_d)``: the shape workloads over this domain use."""
        return tuple(a.size for a in self.attributes)

    @property
    def cells(self) -> int:
        """Number of cells of the full domain (a Python int, never allocated)."""
        return math.prod(self.shape)

    def index(self, attrs) -> tuple[int, ...]:
        """Axis indices of attribute names or indices, sorted (the order marginal tables use).

        Raises
        ------
        ValueError
            If an attribute is unknown or repeated.
        """
        out = []
        for a in attrs:
            if isinstance(a, str):
                if a not in self.names:
                    raise ValueError(f"unknown attribute {a!r}; the domain has {list(self.names)}")
                out.append(self.names.index(a))
            elif isinstance(a, int | np.integer) and not isinstance(a, bool) and 0 <= a < len(self.names):
                out.append(int(a))
            else:
                raise ValueError(f"attribute {a!r} is neither a name nor an index in 0..{len(self.names) - 1}")
        if len(set(out)) != len(out):
            raise ValueError(f"an attribute repeats in {list(attrs)}")
        return tuple(sorted(out))

    def __len__(self) -> int:
        return len(self.attributes)


@dataclass
class Table:
    """Records (pandas or dask DataFrame) over a public :class:`Domain`.

    Parameters
    ----------
    records : pandas.DataFrame or dask.dataframe.DataFrame
        One row per record; at least the domain's columns.
    domain : Domain
    name : str
        Shown in the app and in release metadata.
    description : str
        Where the data come from.

    Raises
    ------
    TypeError
        If ``records`` is not a (dask) DataFrame or ``domain`` not a Domain.
    ValueError
        If a domain attribute is not a column of the records.
    """

    records: object
    domain: Domain
    name: str = "table"
    description: str = ""
    source: str = field(default="", repr=False)

    def __post_init__(self):
        if not isinstance(self.domain, Domain):
            raise TypeError(f"domain must be a dpexplorer Domain, got {type(self.domain).__name__}")
        cols = getattr(self.records, "columns", None)
        if cols is None or not hasattr(self.records, "groupby"):
            raise TypeError(f"records must be a pandas or dask DataFrame, got {type(self.records).__name__}")
        missing = [a for a in self.domain.names if a not in list(cols)]
        if missing:
            raise ValueError(f"the records have no column(s) {missing}; columns: {list(cols)}")

    @property
    def shape(self) -> tuple[int, ...]:
        """The domain's shape (cells per attribute)."""
        return self.domain.shape

    @classmethod
    def from_dataframe(cls, df: pd.DataFrame, attributes: Sequence[str], bins: dict | None = None,
                       ranges: dict | None = None, name: str = "table", description: str = "") -> Table:
        """A table over ``attributes`` of ``df``: numeric columns binned, others categorical.

        Categories are the sorted distinct values found in the column; numeric
        bins are ``bins[col]`` (default 16) equal-width bins over
        ``ranges[col]`` (default: the column's min and max).  Both read the
        data: that is fine when the result is public knowledge, otherwise
        declare the :class:`Domain` yourself (the docstring of this module).

        Raises
        ------
        TypeError
            If ``df`` is not a DataFrame, ``attributes`` not a list of column
            names, or ``bins``/``ranges`` not dicts.
        ValueError
            If an attribute is missing, a column is empty, or a range or bin count is invalid.
        LimitExceededError
            If a bin count is above the ``bins`` limit or there are more
            attributes than the ``attributes`` limit.
        """
        if not isinstance(df, pd.DataFrame):
            raise TypeError(f"df must be a pandas DataFrame, got {type(df).__name__}")
        if isinstance(attributes, str) or not all(isinstance(a, str) for a in attributes):
            raise TypeError(f"attributes must be a list of column names, got {attributes!r:.80}")
        limits.check("attributes", len(attributes), "from_dataframe: attributes")
        for arg, value in (("bins", bins), ("ranges", ranges)):
            if value is not None and not isinstance(value, dict):
                raise TypeError(f"{arg} must be a dict keyed by column name, got {type(value).__name__}")
        bins, ranges = dict(bins or {}), dict(ranges or {})
        attrs = []
        for col in attributes:
            if col not in df.columns:
                raise ValueError(f"no column {col!r}; columns: {list(df.columns)}")
            s = df[col].dropna()
            if s.empty:
                raise ValueError(f"column {col!r} has no values")
            if pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s) and col not in bins \
                    and s.nunique() <= 32 and np.all(s == np.round(s)):
                attrs.append(Attribute(col, categories=tuple(sorted(s.unique().tolist()))))
            elif pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
                k = limits.whole_number(bins.get(col, 16), f"bins for {col!r}", limit="bins")
                rng = ranges.get(col, (float(s.min()), float(s.max())))
                try:
                    lo, hi = (float(v) for v in rng)
                except (TypeError, ValueError):
                    raise ValueError(f"range for {col!r} must be two numbers (lo, hi), got {rng!r:.80}") from None
                if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
                    hi = lo + 1.0 if np.isfinite(lo) and hi == lo else hi
                    if not (np.isfinite(lo) and np.isfinite(hi) and hi > lo):
                        raise ValueError(f"range for {col!r} must be finite with hi > lo, got {(lo, hi)}")
                attrs.append(Attribute(col, edges=tuple(np.linspace(lo, hi, int(k) + 1))))
            else:
                attrs.append(Attribute(col, categories=tuple(sorted(map(str, s.unique())))))
        frame = df[list(attributes)].copy()
        for a in attrs:
            if a.categories is not None and all(isinstance(c, str) for c in a.categories):
                frame[a.name] = frame[a.name].astype(str)
        return cls(frame, Domain(tuple(attrs)), name, description)
