"""Marginals over a record table: the Workload page's "Record table" card.

A record table (:class:`dpexplorer.Table`: records over a public domain of
named attributes, e.g. the bundled Superstore orders) is released through
its marginals: the privacy kernel counts them by group-by and never forms the
data vector of the full domain (:mod:`dpexplorer.privacy.tables`).
:class:`TableMarginals` builds the session's workload as marginals over the
attributes the user picks -- all ``k``-way marginals (``orders="1-2"``) or
listed attribute sets (``sets="Region, Segment; Category"``) -- over the
domain of those attributes, and sets :attr:`Session.table` so that the
Release page releases from the table's records.

Everything is checked before anything is built (:meth:`TableMarginals.plan`):
the domain's size (cells, attributes, cells per attribute), the number of
marginals and queries, and the largest marginal the kernel would count.  Bad
input is reported (``session.report``) and nothing changes.  Driven without
a browser::

    tm = builder.tables                      # on a WorkloadBuilder
    tm.attributes = ["Segment", "Region", "Category"]
    tm.orders = "1-2"
    tm.build()                               # True; session.workload, session.table set
"""

from __future__ import annotations

import logging
import math
import re

import panel as pn
import param

import dpexplorer as dpx

from .shown import LazyCard

__all__ = ["TableMarginals", "parse_sets", "MAX_MARGINALS", "MAX_QUERIES"]

log = logging.getLogger(__name__)

#: Most marginals in one table workload (Adult's 0–3-way marginals are 470).
MAX_MARGINALS = 5000
#: Most queries (cells of all marginals) in one table workload.
MAX_QUERIES = 5_000_000

_LABEL = "label" if "label" in pn.widgets.IntInput.param else "name"
_COLOR = "color" if "color" in pn.widgets.Button.param else "button_type"


def parse_sets(text: str, names) -> list[tuple[str, ...]]:
    """Attribute sets from text: sets separated by ``;`` or new lines, attributes by ``,``.

    ``"Region, Segment; Category"`` is the 2-way marginal on Region and
    Segment and the 1-way marginal on Category; ``total`` is the 0-way marginal.

    Parameters
    ----------
    text : str
    names : sequence of str
        The attributes that may be used.

    Raises
    ------
    ValueError
        If no set is given, an attribute is unknown or repeats within a set,
        or a set repeats.
    """
    names = list(names)
    out: list[tuple[str, ...]] = []
    for item in (s.strip() for s in re.split(r"[;\n]+", text or "")):
        if not item:
            continue
        if item.lower() in ("total", "()"):
            attrs: tuple[str, ...] = ()
        else:
            attrs = tuple(a.strip() for a in item.split(",") if a.strip())
            unknown = [a for a in attrs if a not in names]
            if unknown:
                raise ValueError(f"unknown attribute {unknown[0]!r} in {item!r}; the chosen "
                                 f"attributes are {names}")
            if len(set(attrs)) != len(attrs):
                raise ValueError(f"an attribute repeats in {item!r}")
        key = tuple(sorted(attrs, key=names.index))
        if key in out:
            raise ValueError(f"the attribute set {item!r} is given twice")
        out.append(key)
    if not out:
        raise ValueError("no attribute set given: write e.g. Region, Segment; Category "
                         "(sets separated by ';', attributes by ',')")
    return out


class TableMarginals(param.Parameterized):
    """Marginals over a record table's attributes, built into the builder's session.

    Parameters
    ----------
    builder : WorkloadBuilder
        The Workload page (its :meth:`_commit` makes the workload current).
    """

    table_name = param.Selector(default=next(iter(dpx.datasets.TABLES)),
                                objects=list(dpx.datasets.TABLES), doc="Bundled record table.")
    attributes = param.ListSelector(default=[], objects=[], doc="""
        Attributes of the table the workload is over (its domain); the others are left out.""")
    mode = param.Selector(default="orders", objects=["orders", "sets"], doc="""
        'orders': all k-way marginals of the chosen attributes; 'sets': the listed attribute sets.""")
    orders = param.String(default="2", doc="Marginal orders, e.g. '2', '1-2' or '0, 2'.")
    sets = param.String(default="", doc="Attribute sets, e.g. 'Region, Segment; Category'.")
    error = param.String(default="", constant=True, precedence=-1, doc="Last rejected input.")

    def __init__(self, builder, **params):
        self.builder = builder
        self.session = builder.session
        self._tables: dict[str, dpx.Table] = {}
        super().__init__(**params)
        self._on_table()

    # ------------------------------------------------------------ state
    def table(self) -> dpx.Table:
        """The selected bundled table (loaded once).

        Raises
        ------
        ValueError
            If it cannot be loaded.
        """
        name = self.table_name
        if name not in self._tables:
            try:
                self._tables[name] = dpx.datasets.TABLES[name]()
            except Exception as exc:  # noqa: BLE001 - e.g. bokeh sample data missing
                raise ValueError(f"the table {name!r} could not be loaded: {exc}") from None
        return self._tables[name]

    @param.depends("table_name", watch=True)
    def _on_table(self) -> None:
        try:
            names = list(self.table().domain.names)
        except ValueError as exc:
            self._fail(str(exc))
            names = []
        self.param.attributes.objects = names
        self.attributes = list(names)

    def _fail(self, message: str) -> bool:
        with param.edit_constant(self):
            self.error = message
        self.session.report(message)
        return False

    # ------------------------------------------------------------- plan
    def plan(self) -> dict:
        """What :meth:`build` would build, checked: the domain and the marginals.

        Returns
        -------
        dict
            ``table`` (the table over the chosen attributes), ``names``,
            ``shape``, ``cells`` (of the domain), ``sets`` (attribute index
            tuples), ``queries`` (cells of all marginals), ``largest`` (cells
            of the largest marginal).

        Raises
        ------
        ValueError
            No attribute chosen, more than ``MAX_ATTRIBUTES`` attributes, an
            attribute above ``MAX_N`` cells, more than ``MAX_CELLS`` cells,
            bad orders or sets, more than :data:`MAX_MARGINALS` marginals or
            :data:`MAX_QUERIES` queries, or a marginal above the kernel's
            the ``cells`` limit (``dpx.limits``).
        """
        from . import builder as b

        full = self.table()
        chosen = [a for a in full.domain.names if a in set(self.attributes)]
        if not chosen:
            raise ValueError("choose at least one attribute of the table")
        if len(chosen) > b.MAX_ATTRIBUTES:
            raise ValueError(f"{len(chosen)} attributes chosen; at most {b.MAX_ATTRIBUTES} are allowed")
        attrs = tuple(a for a in full.domain.attributes if a.name in chosen)
        for a in attrs:
            if a.size > b.MAX_N:
                raise ValueError(f"attribute {a.name!r} has {a.size:,} cells; at most {b.MAX_N:,} "
                                 "per attribute are allowed")
        shape = tuple(a.size for a in attrs)
        cells = math.prod(shape)
        if cells > b.MAX_CELLS:
            raise ValueError(f"the domain of {len(shape)} attributes has {cells:,} cells; at most "
                             f"{b.MAX_CELLS:,} are allowed")
        d = len(chosen)
        if self.mode == "orders":
            orders = b.parse_orders(self.orders, d)
            n_sets = sum(math.comb(d, k) for k in orders)
            if n_sets > MAX_MARGINALS:
                raise ValueError(f"the {', '.join(map(str, orders))}-way marginals of {d} attributes "
                                 f"are {n_sets:,} marginals; at most {MAX_MARGINALS:,} are allowed")
            import itertools
            sets = [c for k in orders for c in itertools.combinations(range(d), k)]
        else:
            sets = [tuple(chosen.index(a) for a in s) for s in parse_sets(self.sets, chosen)]
            if len(sets) > MAX_MARGINALS:
                raise ValueError(f"{len(sets):,} marginals; at most {MAX_MARGINALS:,} are allowed")
        sizes = [math.prod(shape[i] for i in s) for s in sets]
        queries, largest = sum(sizes), max(sizes)
        if queries > MAX_QUERIES:
            raise ValueError(f"these marginals hold {queries:,} queries (cells); at most "
                             f"{MAX_QUERIES:,} are allowed: choose fewer attributes or lower orders")
        cap = dpx.limits.current().cells
        if largest > cap:
            raise ValueError(f"the largest marginal has {largest:,} cells; the privacy kernel counts "
                             f"marginals of at most {cap:,} cells (the cells limit, dpx.limits)")
        table = dpx.Table(full.records, dpx.Domain(attrs), full.name, full.description)
        return {"table": table, "names": tuple(chosen), "shape": shape, "cells": cells,
                "sets": sets, "queries": queries, "largest": largest}

    def preview(self) -> str:
        """Markdown: the domain's size and the marginals that would be built (or why not)."""
        try:
            p = self.plan()
        except ValueError as exc:
            return f"⚠ **Not buildable:** {exc}"
        dims = " × ".join(f"{n} ({s})" for n, s in zip(p["names"], p["shape"], strict=True))
        return (f"**Domain:** {dims} = **{p['cells']:,} cells** (never materialised: releases "
                f"count marginals from the records)  \n**Marginals:** {len(p['sets']):,}, "
                f"**queries:** {p['queries']:,} (largest marginal {p['largest']:,} cells)")

    # ------------------------------------------------------------ build
    def build(self) -> bool:
        """Make the marginals the session's workload over the chosen attributes; ``True`` on success.

        Sets :attr:`Session.table` to the table over those attributes.  On a
        bad input nothing changes and the reason is reported.
        """
        from .builder import Term

        try:
            p = self.plan()
        except ValueError as exc:
            return self._fail(f"Table marginals not built: {exc}")
        if self.mode == "orders" and len(p["shape"]) > 1:
            orders = sorted({len(s) for s in p["sets"]})
            term = Term("marginals", {"k": orders[0] if len(orders) == 1 else orders})
        else:  # listed sets (and the marginals of a single attribute: identity and/or total)
            term = Term("marginal_sets", {"sets": [list(s) for s in p["sets"]]})
        old = self.session.table
        self.session.table = p["table"]  # first: the page's summary redraws on the commit
        if not self.builder._commit([term], p["shape"], p["names"],
                                    f"Table marginals over {self.table_name!r} not built"):
            self.session.table = old
            return False
        with param.edit_constant(self):
            self.error = ""
        return True

    # --------------------------------------------------------------- UI
    def panel(self) -> pn.Card:
        """The "Record table" card of the Workload page."""
        w = pn.widgets
        table = w.Select.from_param(self.param.table_name, **{_LABEL: "Table"})
        attrs = w.MultiChoice.from_param(self.param.attributes, **{_LABEL: "Attributes (the domain)"})
        mode = w.RadioButtonGroup.from_param(self.param.mode, options={"all k-way": "orders",
                                                                        "attribute sets": "sets"})
        orders = w.TextInput.from_param(self.param.orders, **{_LABEL: "Orders k (e.g. 2 or 1-2)"},
                                        placeholder="k, e.g. 2 or 1-2",
                                        visible=pn.bind(lambda m: m == "orders", self.param.mode))
        sets = w.TextAreaInput.from_param(self.param.sets, **{_LABEL: "Attribute sets"}, height=80,
                                          placeholder="Region, Segment; Category",
                                          visible=pn.bind(lambda m: m == "sets", self.param.mode))
        preview = pn.pane.Markdown(pn.bind(lambda *_: self.preview(), self.param.table_name,
                                           self.param.attributes, self.param.mode,
                                           self.param.orders, self.param.sets),
                                   sizing_mode="stretch_width", styles={"font-size": "90%"})
        go = w.Button(**{_LABEL: "Build table marginals (replaces the terms)"}, **{_COLOR: "primary"})
        go.on_click(lambda e: self.build())
        about = pn.pane.Markdown(pn.bind(lambda n: f"*{self._description(n)}*", self.param.table_name),
                                 sizing_mode="stretch_width", styles={"font-size": "85%"})
        return LazyCard(table, about, attrs, mode, orders, sets, preview, go,
                        title="Record table: marginals", sizing_mode="stretch_width",
                        collapsed=True)

    def _description(self, name) -> str:
        source = dpx.datasets.TABLE_SOURCES.get(name, "origin not recorded")
        try:
            return f"{self.table().description}. Source: {source}"
        except ValueError as exc:
            return f"{exc}. Source: {source}"
