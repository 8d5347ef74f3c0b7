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

A table of one's own comes from a CSV upload (:meth:`TableMarginals.upload_csv`).
Its domain is first read from the records -- it can be simulated and
explored, but the Release page refuses it (``dpx.release`` does) -- until the
user either **declares** it (uploads a schema file, or edits and accepts the
schema shown, :meth:`TableMarginals.declare`) or **discovers** it privately
with a visible ε and δ charged to the table's ledger
(:meth:`TableMarginals.discover`, :func:`dpexplorer.discover_domain`).

Everything is checked before anything is built (:meth:`TableMarginals.plan`,
:func:`dpexplorer.queries.terms.plan_marginals`):
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

import io
import logging

import panel as pn
import param

import dpexplorer as dpx
from dpexplorer.queries.terms import marginals_term, plan_marginals

from .serving import COLOR as _COLOR
from .serving import LABEL as _LABEL
from .serving import LazyCard
from .uploads import Upload

__all__ = ["TableMarginals"]

log = logging.getLogger(__name__)



class TableMarginals(param.Parameterized):
    """Marginals over a record table's attributes, built into the builder's session.

    Parameters
    ----------
    builder : WorkloadBuilder
        The Workload page holding the card.  The card uses its ``session`` and
        ``commit_term(term, shape, names, what)``, which makes one term
        over a domain the workload.  This module imports nothing of the page's
        (the page imports this one): the dependency goes one way.
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
    schema_text = param.String(default="", doc="""
        The domain of the selected table as a schema (YAML): edit it and declare it public.""")
    domain_epsilon = param.Number(default=0.5, bounds=(0, None), inclusive_bounds=(False, True), doc="""
        ε that discovering the domain privately spends (split over the attributes).""")
    domain_delta = param.Number(default=1e-6, bounds=(0, 0.5), inclusive_bounds=(False, False), doc="""
        δ of the private partition selection of categories (split over categorical attributes).""")

    #: What the schema text says above the schema of a domain read from the records.
    SCHEMA_NOTE = ("# Read from your records: every category and range below becomes PUBLIC when you\n"
                   "# declare it. Review and edit (e.g. list the categories the schema allows and\n"
                   "# round ranges to public bounds), then 'Declare this domain'.\n")

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
            domain = self.table().domain
            names = list(domain.names)
        except ValueError as exc:
            self._fail(str(exc))
            domain, names = None, []
        self.param.attributes.objects = names
        self.attributes = list(names)
        self.schema_text = "" if domain is None else self._schema(domain)

    def _schema(self, domain) -> str:
        import yaml

        doc = {"attributes": domain.to_dict()["attributes"]}
        text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
        return (self.SCHEMA_NOTE + text) if domain.inferred else text

    def _replace(self, table) -> None:
        """Make ``table`` the selected table's new version (same name, so the same ledger)."""
        self._tables[self.table_name] = table
        self._on_table()
        if self.session.table is not None and self.session.table.name == table.name:
            self.session.table = None  # the workload must be rebuilt over the new domain

    # ----------------------------------------------------- your own table
    def upload_csv(self, data: bytes, filename: str) -> bool:
        """Load an uploaded CSV as a table over all its columns, its domain read from the records.

        The table can be simulated; releases refuse it until its domain is
        declared (:meth:`declare`) or discovered (:meth:`discover`).  ``True``
        on success; errors are reported and nothing changes.
        """
        try:
            df = dpx.datasets.read_csv(io.BytesIO(data))
            if df.empty:
                raise ValueError("the CSV file has no rows")
            name = f"uploaded: {filename}"
            table = dpx.Table.from_dataframe(df, [str(c) for c in df.columns], name=name,
                                             description="uploaded CSV")
        except (ValueError, TypeError, dpx.LimitExceededError) as exc:
            return self._fail(f"CSV not loaded as a table: {exc}")
        self._tables[name] = table
        if name not in self.param.table_name.objects:
            self.param.table_name.objects = [*self.param.table_name.objects, name]
        if self.table_name == name:
            self._on_table()
        else:
            self.table_name = name
        return True

    def declare(self, text: str | None = None) -> bool:
        """Declare the selected table's public domain from schema text (default: :attr:`schema_text`).

        Releases accept the table afterwards.  ``True`` on success; a bad
        schema is reported (where and what) and nothing changes.
        """
        try:
            domain = dpx.Domain.from_text(self.schema_text if text is None else text)
            if domain.source != "declared":
                raise ValueError("remove the 'source' line: a schema you declare is yours")
            full = self.table()
            missing = [a for a in domain.names if a not in list(full.records.columns)]
            if missing:
                raise ValueError(f"the records have no column(s) {missing}")
            table = dpx.Table(full.records, domain, full.name, "uploaded CSV over a declared domain")
        except (ValueError, TypeError, dpx.LimitExceededError) as exc:
            return self._fail(f"domain not declared: {exc}")
        self._replace(table)
        return True

    def load_schema(self, data: bytes, filename: str) -> bool:
        """Declare the domain from an uploaded schema file (YAML or JSON, :meth:`dpx.Domain.from_file`)."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return self._fail(f"domain not declared: {filename!r} is not UTF-8 text")
        if not self.declare(text):
            return False
        self.schema_text = self._schema(self.table().domain)
        return True

    def discovery_spec(self) -> dict:
        """What :meth:`discover` asks for: numeric columns (by dtype) a range, the others categories."""
        import pandas as pd

        full = self.table()
        spec = {}
        for name in full.domain.names:
            dtype = full.records[name].dtype
            numeric = pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)
            spec[name] = {"kind": "numeric", "bins": 16} if numeric else "categorical"
        return spec

    def discover(self) -> bool:
        """Discover the selected table's domain privately, charging ε (and δ) to the table's ledger.

        Categories by partition selection, numeric ranges by a noisy histogram
        over power-of-two bins (:func:`dpexplorer.discover_domain`); δ is spent only
        when a column is categorical.  ``True`` on success.
        """
        try:
            full = self.table()
            spec = self.discovery_spec()
            cats = any(v == "categorical" for v in spec.values())
            led = self.session.table_ledger(full)
            before = len(led)
            try:
                domain = dpx.discover_domain(full.records, spec, epsilon=float(self.domain_epsilon),
                                             delta=float(self.domain_delta) if cats else 0.0, ledger=led)
            finally:
                if len(led) != before and hasattr(self.session, "ledger_changed"):
                    self.session.ledger_changed()
            table = dpx.Table(full.records, domain, full.name, "uploaded CSV over a privately discovered domain")
        except (ValueError, TypeError, RuntimeError, dpx.LimitExceededError) as exc:
            return self._fail(f"domain not discovered: {exc}")
        self._replace(table)
        return True

    def domain_status(self) -> str:
        """Markdown: where the selected table's domain comes from, and what a release will do."""
        try:
            d = self.table().domain
        except ValueError:
            return ""
        if d.source == "declared":
            return "✅ **Domain declared** (public): the table can be released."
        if d.source == "discovered":
            eps = sum(e for _, e, _ in d.spent)
            dlt = sum(x for _, _, x in d.spent)
            return (f"✅ **Domain discovered privately** (ε = {eps:g}, δ = {dlt:g}, charged to the "
                    "table's ledger): the table can be released.")
        return ("⚠ **Domain read from the records**: simulate and explore only; the Release page "
                "refuses it. Declare it (upload a schema file, or edit and accept the schema below) "
                "or discover it privately with the ε shown.")

    def _fail(self, message: str) -> bool:
        with param.edit_constant(self):
            self.error = message
        self.session.report(message)
        return False

    # ------------------------------------------------------------- plan
    def plan(self) -> dict:
        """What :meth:`build` would build, checked (:func:`dpexplorer.queries.terms.plan_marginals`).

        Returns
        -------
        dict
            The plan of the marginals (``names``, ``shape``, ``cells``, ``sets``,
            ``queries``, ``largest``) and ``table``, the table over the chosen attributes.

        Raises
        ------
        ValueError
            No attribute chosen, a domain, orders, sets or marginals above the limits.
        """
        full = self.table()
        chosen = [a for a in full.domain.names if a in set(self.attributes)]
        sizes = [a.size for a in full.domain.select(chosen).attributes] if chosen else []
        plan = plan_marginals(chosen, sizes, self.mode, self.orders, self.sets)
        plan["table"] = dpx.Table(full.records, full.domain.select(chosen), full.name, full.description)
        return plan

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
        try:
            p = self.plan()
        except ValueError as exc:
            return self._fail(f"Table marginals not built: {exc}")
        old = self.session.table
        self.session.table = p["table"]  # first: the page's summary redraws on the commit
        if not self.builder.commit_term(marginals_term(p, self.mode), p["shape"], p["names"],
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
        own = self._own_panel()
        return LazyCard(table, about, own, attrs, mode, orders, sets, preview, go,
                        title="Record table: marginals", sizing_mode="stretch_width",
                        collapsed=True)

    def _own_panel(self) -> pn.Column:
        """Upload a CSV; declare (schema file or edited schema) or discover its domain."""
        w = pn.widgets
        csv_in = Upload(accepted_filetypes=[".csv", "text/csv"], on_error=self.session.report,
                        on_file=self.upload_csv)
        schema_in = Upload(accepted_filetypes=[".yaml", ".yml", ".json"], on_error=self.session.report,
                           on_file=self.load_schema, max_bytes=dpx.limits.current().spec_bytes)
        status = pn.pane.Markdown(pn.bind(lambda *_: self.domain_status(), self.param.table_name,
                                          self.param.schema_text), sizing_mode="stretch_width")
        text = w.TextAreaInput.from_param(self.param.schema_text, **{_LABEL: "Domain schema (YAML)"},
                                          height=160, sizing_mode="stretch_width")
        declare = w.Button(**{_LABEL: "Declare this domain (public)"}, **{_COLOR: "primary"})
        declare.on_click(lambda e: self.declare())
        eps = w.FloatInput.from_param(self.param.domain_epsilon, **{_LABEL: "Discovery ε"}, step=0.1)
        dlt = w.FloatInput.from_param(self.param.domain_delta, **{_LABEL: "Discovery δ"})
        discover = w.Button(**{_LABEL: "Discover privately (spends this ε and δ from the table's ledger)"},
                            **{_COLOR: "warning"})
        discover.on_click(lambda e: self.discover())
        return pn.Column(pn.pane.Markdown("**Your own CSV** (a table over all its columns)"), csv_in,
                         csv_in.note(), status, text, declare,
                         pn.pane.Markdown("or upload a schema file (YAML/JSON):"), schema_in,
                         pn.Row(eps, dlt), discover, sizing_mode="stretch_width")

    def _description(self, name) -> str:
        source = dpx.datasets.TABLE_SOURCES.get(name, "origin not recorded")
        try:
            return f"{self.table().description}. Source: {source}"
        except ValueError as exc:
            return f"{exc}. Source: {source}"
