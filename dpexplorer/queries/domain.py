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
data reveal which values occur, and a range ``[min, max]`` read from the data
publishes the smallest and largest value (``dpexplorer/docs/public_domain.md``).
Every domain says where it comes from (:attr:`Domain.source`):

* ``"declared"`` -- written by the data owner: ``Domain(...)`` in code or a
  schema file (:meth:`Domain.from_file`, YAML or JSON);
* ``"discovered"`` -- found by a DP measurement on the records
  (:func:`dpexplorer.privacy.discovery.discover_domain`), with the ε and δ it spent;
* ``"data"`` -- read from the records (:meth:`Table.from_dataframe`): fine for
  simulations and teaching, refused by :func:`dpexplorer.release`.

Records whose values fall outside the domain are dropped by the privacy
kernel in releases (never counted, never reported).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import limits

__all__ = ["Attribute", "Domain", "Table", "PublicTable", "SOURCES", "DATA_DOMAIN_REFUSAL"]

#: Where a domain comes from (:attr:`Domain.source`).
SOURCES = ("declared", "discovered", "data")

#: Why a release refuses a domain read from the records, and what to do instead.
DATA_DOMAIN_REFUSAL = (
    "its domain was read from the records (categories and min/max ranges seen in the data are "
    "themselves private: a release on them would publish a rare category or the largest value). "
    "Declare the public domain -- dpx.Domain([dpx.Attribute('dept', categories=[...]), "
    "dpx.Attribute('salary', edges=[...])]) or dpx.Domain.from_file('schema.yaml') -- and "
    "build the table with dpx.Table(records, domain), or discover it privately with "
    "dpx.discover_domain(records, spec, epsilon=..., delta=..., ledger=...), which spends "
    "from the ledger. dpx.simulate still accepts this table.")


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
    def _bin_edges(self) -> tuple[float, ...]:
        """``edges`` of a numeric attribute (one without categories)."""
        assert self.edges is not None  # __post_init__ refuses an attribute with neither
        return self.edges

    @property
    def size(self) -> int:
        """Number of cells."""
        return len(self.categories) if self.categories is not None else len(self._bin_edges) - 1

    @property
    def kind(self) -> str:
        """``"categorical"`` or ``"numeric"``."""
        return "categorical" if self.categories is not None else "numeric"

    def labels(self) -> list[str]:
        """A short label per cell (the category, or ``"[lo, hi)"``)."""
        if self.categories is not None:
            return [str(c) for c in self.categories]
        e = self._bin_edges
        return [f"[{e[k]:g}, {e[k + 1]:g}{']' if k == len(e) - 2 else ')'}" for k in range(len(e) - 1)]

    def codes(self, values) -> tuple[np.ndarray, np.ndarray]:
        """Cell index of every value and whether it is inside the attribute's cells.

        Returns
        -------
        codes : ndarray of int64, shape (len(values),)
            The cell of every value (0 where it is outside).
        inside : ndarray of bool, shape (len(values),)
            ``False`` for a missing value, a category not listed, or a number
            outside ``[e_0, e_last]`` (or not a finite number).
        """
        s = pd.Series(values)
        if self.categories is not None:
            codes = pd.Index(list(self.categories)).get_indexer(s).astype(np.int64)
            inside = (codes >= 0) & ~s.isna().to_numpy()
            return np.where(inside, codes, 0), inside
        v = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
        e = np.asarray(self.edges)
        with np.errstate(invalid="ignore"):
            inside = np.isfinite(v) & (v >= e[0]) & (v <= e[-1])
        codes = np.clip(np.searchsorted(e, np.where(inside, v, e[0]), side="right") - 1, 0, self.size - 1)
        return codes.astype(np.int64), inside

    def encode(self, values) -> np.ndarray:
        """Cell index of every value, shape ``(len(values),)``, int64.

        Raises
        ------
        ValueError
            If a value is missing or outside the attribute's cells (nothing is
            clipped: widen the domain or filter the records first).  The
            message names the attribute and the number of such values, never a value.
        """
        s = pd.Series(values)
        if s.isna().any():
            raise ValueError(f"attribute {self.name!r} has {int(s.isna().sum())} missing value(s); "
                             "drop or recode them before releasing")
        codes, inside = self.codes(s)
        if not inside.all():
            where = (f"its {self.size} categories" if self.categories is not None
                     else f"[{self._bin_edges[0]:g}, {self._bin_edges[-1]:g}] or not numeric")
            raise ValueError(f"attribute {self.name!r} has {int((~inside).sum())} value(s) outside {where}")
        return codes

    def to_dict(self) -> dict:
        """``{"name", "categories"}`` or ``{"name", "edges"}``: plain JSON/YAML values."""
        if self.categories is not None:
            return {"name": self.name,
                    "categories": [c.item() if isinstance(c, np.generic) else c for c in self.categories]}
        return {"name": self.name, "edges": list(self._bin_edges)}


@dataclass(frozen=True)
class Domain:
    """The public schema of a table: its attributes, in axis order.

    Attributes
    ----------
    attributes : tuple of Attribute
    source : {"declared", "discovered", "data"}
        Where the domain comes from (module docstring): written by the data
        owner (default), found by a DP measurement
        (:func:`dpexplorer.privacy.discovery.discover_domain`), or read from
        the records (:meth:`Table.from_dataframe`; refused by releases).
    spent : tuple of (str, float, float)
        For a discovered domain: ``(attribute, ε, δ)`` its discovery spent
        (also recorded in the ledger it was charged to).

    Raises
    ------
    TypeError
        If ``attributes`` is not a non-empty sequence of :class:`Attribute`.
    ValueError
        If attribute names repeat or ``source`` is not one of :data:`SOURCES`.
    LimitExceededError
        If there are more attributes than the ``attributes`` limit (the
        number of cells, their product, stays factorised and is not bounded).
    """

    attributes: tuple[Attribute, ...]
    source: str = field(default="declared", compare=False)
    spent: tuple = field(default=(), compare=False)

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"a domain's source is one of {list(SOURCES)}, got {self.source!r:.40}")
        object.__setattr__(self, "spent", tuple((str(a), float(e), float(d)) for a, e, d in self.spent))
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

    @property
    def inferred(self) -> bool:
        """Whether the domain was read from the records (``source == "data"``)."""
        return self.source == "data"

    def select(self, names) -> Domain:
        """The domain of the attributes ``names`` (in this domain's order), same source.

        Raises
        ------
        ValueError
            If a name is unknown.
        """
        keep = set(self.index(names))
        attrs = tuple(a for i, a in enumerate(self.attributes) if i in keep)
        return Domain(attrs, self.source, tuple(s for s in self.spent if s[0] in {a.name for a in attrs}))

    # ------------------------------------------------------------ schema files
    def to_dict(self) -> dict:
        """The schema as plain values: ``{"attributes": [{"name", "categories" | "edges"}, ...]}``.

        A domain not declared also carries its ``source`` (and what its
        discovery spent), so that a round trip keeps the mark.
        """
        out: dict = {"attributes": [a.to_dict() for a in self.attributes]}
        if self.source != "declared":
            out["source"] = self.source
        if self.spent:
            out["spent"] = [{"attribute": a, "epsilon": e, "delta": d} for a, e, d in self.spent]
        return out

    @classmethod
    def from_dict(cls, doc) -> Domain:
        """A domain from :meth:`to_dict`'s form (what a schema file holds).

        Every attribute is a mapping with ``name`` and exactly one of
        ``categories`` (a list of values), ``edges`` (increasing numbers) or
        ``range: [lo, hi]`` with ``bins: k`` (``k`` equal-width bins).  A
        missing ``source`` means ``"declared"``.

        Raises
        ------
        ValueError
            Naming the attribute (by position and name) and what is wrong.
        """
        if not isinstance(doc, dict) or not isinstance(doc.get("attributes"), list):
            raise ValueError("a domain schema is a mapping with a list 'attributes', e.g. "
                             "{'attributes': [{'name': 'dept', 'categories': ['a', 'b']}, "
                             "{'name': 'salary', 'range': [0, 200000], 'bins': 20}]}")
        unknown = sorted(set(doc) - {"attributes", "source", "spent"})
        if unknown:
            raise ValueError(f"a domain schema has only the keys 'attributes', 'source', 'spent'; "
                             f"got also {unknown!r:.200}")
        limits.check("attributes", len(doc["attributes"]), "domain schema: attributes")
        attrs = []
        for i, item in enumerate(doc["attributes"]):
            where = f"schema attribute {i}"
            if not isinstance(item, dict):
                raise ValueError(f"{where} must be a mapping with 'name' and 'categories', 'edges' "
                                 f"or 'range' + 'bins'; got {type(item).__name__}")
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise ValueError(f"{where} needs a non-empty string 'name'")
            where = f"{where} ({name!r:.80})"
            keys = set(item) - {"name"}
            if keys not in ({"categories"}, {"edges"}, {"range", "bins"}):
                raise ValueError(f"{where} needs exactly one of 'categories', 'edges' or 'range' with "
                                 f"'bins'; got keys {sorted(keys)!r:.200}")
            try:
                if "categories" in item:
                    cats = item["categories"]
                    if not isinstance(cats, list) or not all(
                            isinstance(c, str | int | float) and not isinstance(c, bool) for c in cats):
                        raise ValueError("'categories' must be a list of strings or numbers")
                    attrs.append(Attribute(name, categories=tuple(cats)))
                elif "edges" in item:
                    attrs.append(Attribute(name, edges=_numbers(item["edges"], "'edges'")))
                else:
                    rng = _numbers(item["range"], "'range'")
                    if len(rng) != 2:
                        raise ValueError("'range' must be two numbers [lo, hi]")
                    lo, hi = rng
                    k = limits.whole_number(item["bins"], "'bins'", limit="bins")
                    if not hi > lo:
                        raise ValueError(f"'range' must have hi > lo, got [{lo:g}, {hi:g}]")
                    attrs.append(Attribute(name, edges=tuple(np.linspace(lo, hi, int(k) + 1))))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{where}: {exc}") from None
        source = doc.get("source", "declared")
        spent = doc.get("spent", [])
        try:
            spent = tuple((s["attribute"], s["epsilon"], s["delta"]) for s in spent)
        except (TypeError, KeyError):
            raise ValueError("'spent' must be a list of {attribute, epsilon, delta}") from None
        if not attrs:
            raise ValueError("a domain schema needs at least one attribute")
        return cls(tuple(attrs), source, spent)

    def to_file(self, path, format: str | None = None) -> None:
        """Write the schema (:meth:`to_dict`) to ``path``: YAML for ``.yaml``/``.yml``, else JSON.

        Raises
        ------
        ValueError
            If ``format`` is not ``"yaml"`` or ``"json"``.
        """
        fmt = format or ("yaml" if str(path).lower().endswith((".yaml", ".yml")) else "json")
        if fmt == "yaml":
            import yaml

            text = yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)
        elif fmt == "json":
            text = json.dumps(self.to_dict(), indent=2, ensure_ascii=False)
        else:
            raise ValueError(f"format must be 'yaml' or 'json', got {format!r:.40}")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)

    @classmethod
    def from_text(cls, text: str | bytes) -> Domain:
        """A domain from schema text, YAML or JSON (JSON is YAML too).

        Raises
        ------
        ValueError
            If the text is not YAML/JSON or not a valid schema (:meth:`from_dict`).
        LimitExceededError
            If the text is above the ``spec_bytes`` limit or nests flow
            brackets deeper than ``spec_depth`` (:func:`dpexplorer.queries.spec.check_text`).
        """
        import yaml

        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError:
                raise ValueError("a domain schema file must be UTF-8 text") from None
        if not isinstance(text, str):
            raise TypeError(f"schema text must be a str, got {type(text).__name__}")
        from .spec import check_text

        check_text(text, "domain schema")  # size and nesting depth, before the parser reads it
        try:
            doc = yaml.safe_load(text)
        except (yaml.YAMLError, ValueError, RecursionError) as exc:
            raise ValueError(f"the domain schema is not valid YAML or JSON ({type(exc).__name__})") from None
        return cls.from_dict(doc)

    @classmethod
    def from_file(cls, path) -> Domain:
        """A declared domain from a schema file (YAML or JSON).

        For example::

            attributes:
              - name: dept
                categories: [sales, engineering, legal]
              - name: salary
                range: [0, 500000]
                bins: 25

        Raises
        ------
        ValueError
            If the file is not a valid schema (the message says where).
        OSError
            If it cannot be read.
        LimitExceededError
            If the file is above the ``spec_bytes`` limit (checked before reading).
        """
        limits.check("spec_bytes", os.path.getsize(path), "domain schema file: bytes")
        with open(path, "rb") as fh:
            return cls.from_text(fh.read())


def _numbers(values, what: str) -> tuple[float, ...]:
    if not isinstance(values, list | tuple) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{what} must be a list of numbers")
    return tuple(float(v) for v in values)


@dataclass(frozen=True)
class PublicTable:
    """The public part of a :class:`Table`: its name and domain (what a release keeps).

    Attributes
    ----------
    name : str
    domain : Domain
    """

    name: str
    domain: Domain

    @property
    def shape(self) -> tuple[int, ...]:
        return self.domain.shape


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

    records: object = field(repr=False)  # private: never in a repr, message or log line
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

    def public(self) -> PublicTable:
        """The table's public part (name and domain), without the records."""
        return PublicTable(self.name, self.domain)

    @classmethod
    def from_dataframe(cls, df: pd.DataFrame, attributes: Sequence[str], bins: dict | None = None,
                       ranges: dict | None = None, name: str = "table", description: str = "") -> Table:
        """A table over ``attributes`` of ``df``: numeric columns binned, others categorical.

        Categories are the sorted distinct values found in the column; numeric
        bins are ``bins[col]`` (default 16) equal-width bins over
        ``ranges[col]`` (default: the column's min and max).  Both read the
        data, so the domain is marked ``source="data"`` (:attr:`Domain.source`)
        unless every attribute was numeric with its range given: such a table
        can be simulated (:func:`dpexplorer.simulate`) but not released --
        declare the :class:`Domain` (``Domain(...)``, :meth:`Domain.from_file`)
        or discover it privately (:func:`dpexplorer.privacy.discovery.discover_domain`).

        Raises
        ------
        TypeError
            If ``df`` is not a DataFrame, ``attributes`` not a list of column
            names, or ``bins``/``ranges`` not dicts.
        ValueError
            If an attribute is missing, a column is empty, a numeric column
            holds ``inf`` (the message gives the number of rows, not their
            values), or a range or bin count is invalid.
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
        attrs, read = [], False
        for col in attributes:
            if col not in df.columns:
                raise ValueError(f"no column {col!r}; columns: {list(df.columns)}")
            s = df[col].dropna()
            if s.empty:
                raise ValueError(f"column {col!r} has no values")
            numeric = pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)
            if numeric:
                infinite = int(np.isinf(s.to_numpy(dtype=float)).sum())
                if infinite:
                    raise ValueError(f"numeric column {col!r} has {infinite} infinite value(s); "
                                     "recode or drop them (inf is neither a number bin nor a category)")
            if numeric and col not in bins and col not in ranges \
                    and s.nunique() <= 32 and np.all(s == np.round(s)):
                read = True
                attrs.append(Attribute(col, categories=tuple(sorted(s.unique().tolist()))))
            elif numeric:
                k = limits.whole_number(bins.get(col, 16), f"bins for {col!r}", limit="bins")
                read = read or col not in ranges
                rng = ranges[col] if col in ranges else (float(s.min()), float(s.max()))
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
                read = True
                attrs.append(Attribute(col, categories=tuple(sorted(map(str, s.unique())))))
        frame = df[list(attributes)].copy()
        for a in attrs:
            if a.categories is not None and all(isinstance(c, str) for c in a.categories):
                frame[a.name] = frame[a.name].where(frame[a.name].isna(), frame[a.name].astype(str))
        return cls(frame, Domain(tuple(attrs), "data" if read else "declared"), name, description)
