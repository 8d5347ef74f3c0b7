"""The Workload page's "Record table" card: marginals over a :class:`dpexplorer.Table`.

Makes the session's workload the marginals (all ``k``-way or listed sets) over the chosen
attributes and sets :attr:`Session.table` for the Release page.  An uploaded CSV's domain,
read from its records, is for simulation only until declared or discovered privately
(:func:`dpexplorer.discover_domain`).  Bad input is reported and nothing changes::

    tm = builder.tables                      # on a WorkloadBuilder
    tm.attributes = ["Segment", "Region", "Category"]
    tm.orders = "1-2"
    tm.build()                               # True; session.workload, session.table set
"""

from __future__ import annotations

import io

import pandas as pd
import panel as pn
import param

import dpexplorer as dpx
from dpexplorer.queries.terms import marginals_term, plan_marginals

from .serving import LABEL as _LABEL
from .serving import LazyCard, button
from .uploads import Upload

__all__ = ["TableMarginals"]

#: Errors of a user's table, schema or discovery: reported, never raised into the UI.
INPUT_ERRORS = (ValueError, TypeError, dpx.LimitExceededError)


class TableMarginals(param.Parameterized):
    """Marginals over a record table, built through ``builder`` (its ``session`` and
    ``commit_term(term, shape, names, what)``)."""

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

    SCHEMA_NOTE = ("# Read from your records: every category and range below becomes PUBLIC when you\n"
                   "# declare it. Review and edit (e.g. list the categories the schema allows and\n"
                   "# round ranges to public bounds), then 'Declare this domain'.\n")

    def __init__(self, builder, **params):
        self.builder = builder
        self.session = builder.session
        self._tables: dict[str, dpx.Table] = {}
        super().__init__(**params)
        self._on_table()

    def table(self) -> dpx.Table:
        """The selected table (loaded once); ValueError if it cannot be loaded."""
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
        except ValueError as exc:
            self._fail(str(exc))
            domain = None
        names = [] if domain is None else list(domain.names)
        self.param.attributes.objects = names
        self.attributes = list(names)
        self.schema_text = "" if domain is None else self._schema(domain)

    def _schema(self, domain) -> str:
        import yaml

        text = yaml.safe_dump({"attributes": domain.to_dict()["attributes"]}, sort_keys=False,
                              allow_unicode=True)
        return (self.SCHEMA_NOTE + text) if domain.inferred else text

    def _replace(self, table) -> bool:
        """Make ``table`` the selected table's new version (same name: same ledger)."""
        self._tables[self.table_name] = table
        self._on_table()
        if self.session.table is not None and self.session.table.name == table.name:
            self.session.table = None  # the workload must be rebuilt over the new domain
        return True

    def upload_csv(self, data: bytes, filename: str) -> bool:
        """Load an uploaded CSV as a table over all its columns, its domain read from the records
        (releases refuse it until :meth:`declare` or :meth:`discover`)."""
        try:
            df = dpx.datasets.read_csv(io.BytesIO(data))
            if df.empty:
                raise ValueError("the CSV file has no rows")
            name = f"uploaded: {filename}"
            table = dpx.Table.from_dataframe(df, [str(c) for c in df.columns], name=name,
                                             description="uploaded CSV")
        except INPUT_ERRORS as exc:
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
        """Declare the table's public domain from schema ``text`` (default :attr:`schema_text`)."""
        try:
            domain = dpx.Domain.from_text(self.schema_text if text is None else text)
            if domain.source != "declared":
                raise ValueError("remove the 'source' line: a schema you declare is yours")
            full = self.table()
            missing = [a for a in domain.names if a not in list(full.records.columns)]
            if missing:
                raise ValueError(f"the records have no column(s) {missing}")
            table = dpx.Table(full.records, domain, full.name, "uploaded CSV over a declared domain")
        except INPUT_ERRORS as exc:
            return self._fail(f"domain not declared: {exc}")
        return self._replace(table)

    def load_schema(self, data: bytes, filename: str) -> bool:
        """Declare the domain from an uploaded YAML or JSON schema file."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return self._fail(f"domain not declared: {filename!r} is not UTF-8 text")
        return self.declare(text)  # which shows the declared schema (_on_table)

    def discovery_spec(self) -> dict:
        """What :meth:`discover` asks: numeric columns a range, the others categories."""
        full = self.table()
        spec = {}
        for name in full.domain.names:
            dtype = full.records[name].dtype
            numeric = pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)
            spec[name] = {"kind": "numeric", "bins": 16} if numeric else "categorical"
        return spec

    def discover(self) -> bool:
        """Discover the table's domain privately (:func:`dpexplorer.discover_domain`), charging ε
        (and δ, with a categorical column) to the table's ledger."""
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
                if len(led) != before:
                    self.session.ledger_changed()
            table = dpx.Table(full.records, domain, full.name, "uploaded CSV over a privately discovered domain")
        except (*INPUT_ERRORS, RuntimeError) as exc:
            return self._fail(f"domain not discovered: {exc}")
        return self._replace(table)

    def domain_status(self) -> str:
        """Markdown: where the table's domain comes from, and what a release will do."""
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

    def plan(self) -> dict:
        """What :meth:`build` builds (:func:`dpexplorer.queries.terms.plan_marginals`) and
        ``table`` over the chosen attributes; ValueError for no attribute or a limit passed."""
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

    def build(self) -> bool:
        """Make the marginals the session's workload and :attr:`Session.table` the table."""
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

    def panel(self) -> pn.Card:
        w, p = pn.widgets, self.param

        def mode_is(mode):
            return pn.bind(lambda m: m == mode, p.mode)
        preview = pn.pane.Markdown(pn.bind(lambda *_: self.preview(), p.table_name, p.attributes,
                                           p.mode, p.orders, p.sets),
                                   sizing_mode="stretch_width", styles={"font-size": "90%"})
        about = pn.pane.Markdown(pn.bind(lambda n: f"*{self._description(n)}*", p.table_name),
                                 sizing_mode="stretch_width", styles={"font-size": "85%"})
        return LazyCard(
            w.Select.from_param(p.table_name, **{_LABEL: "Table"}), about, self._own_panel(),
            w.MultiChoice.from_param(p.attributes, **{_LABEL: "Attributes (the domain)"}),
            w.RadioButtonGroup.from_param(p.mode, options={"all k-way": "orders",
                                                           "attribute sets": "sets"}),
            w.TextInput.from_param(p.orders, **{_LABEL: "Orders k (e.g. 2 or 1-2)"},
                                   placeholder="k, e.g. 2 or 1-2", visible=mode_is("orders")),
            w.TextAreaInput.from_param(p.sets, **{_LABEL: "Attribute sets"}, height=80,
                                       placeholder="Region, Segment; Category", visible=mode_is("sets")),
            preview, button("Build table marginals (replaces the terms)", "primary", self.build),
            title="Record table: marginals", sizing_mode="stretch_width", collapsed=True)

    def _own_panel(self) -> pn.Column:
        """Upload a CSV; declare (schema file or edited schema) or discover its domain."""
        w, p = pn.widgets, self.param
        csv_in = Upload(accepted_filetypes=[".csv", "text/csv"], on_error=self.session.report,
                        on_file=self.upload_csv)
        schema_in = Upload(accepted_filetypes=[".yaml", ".yml", ".json"], on_error=self.session.report,
                           on_file=self.load_schema, max_bytes=dpx.limits.current().spec_bytes)
        status = pn.pane.Markdown(pn.bind(lambda *_: self.domain_status(), p.table_name,
                                          p.schema_text), sizing_mode="stretch_width")
        text = w.TextAreaInput.from_param(p.schema_text, **{_LABEL: "Domain schema (YAML)"},
                                          height=160, sizing_mode="stretch_width")
        eps = w.FloatInput.from_param(p.domain_epsilon, **{_LABEL: "Discovery ε"}, step=0.1)
        dlt = w.FloatInput.from_param(p.domain_delta, **{_LABEL: "Discovery δ"})
        discover = button("Discover privately (spends this ε and δ from the table's ledger)",
                          "warning", self.discover)
        return pn.Column(pn.pane.Markdown("**Your own CSV** (a table over all its columns)"), csv_in,
                         csv_in.note(), status, text,
                         button("Declare this domain (public)", "primary", self.declare),
                         pn.pane.Markdown("or upload a schema file (YAML/JSON):"), schema_in,
                         pn.Row(eps, dlt), discover, sizing_mode="stretch_width")

    def _description(self, name) -> str:
        source = dpx.datasets.TABLE_SOURCES.get(name, "origin not recorded")
        try:
            return f"{self.table().description}. Source: {source}"
        except ValueError as exc:
            return f"{exc}. Source: {source}"
