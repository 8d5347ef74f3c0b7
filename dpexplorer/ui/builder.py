"""WorkloadBuilder: the "Workload builder" page, the view of :mod:`dpexplorer.queries.terms`.

Build the workload ``W`` of the session (:attr:`Session.workload`) as a
weighted union of terms.  The model -- query families, term parameters, the
domain, links, presets, sensitivities, what the heatmap and the summary show --
is :mod:`dpexplorer.queries.terms` (tested without Panel); this module holds
the page's layout, its widgets' bindings, the data histogram whose box-select
brush adds custom ranges, and the spec upload/download.  The component is a
:class:`param.Parameterized` driven without a browser through its methods
(:meth:`WorkloadBuilder.add_term`, :meth:`~WorkloadBuilder.add_ranges`,
:meth:`~WorkloadBuilder.add_brush`, :meth:`~WorkloadBuilder.set_weight`,
:meth:`~WorkloadBuilder.remove_term`, :meth:`~WorkloadBuilder.clear_terms`,
:meth:`~WorkloadBuilder.set_domain`, :meth:`~WorkloadBuilder.load_spec`,
:meth:`~WorkloadBuilder.export_spec`, :meth:`~WorkloadBuilder.load_preset`)::

    builder = WorkloadBuilder(session)
    builder.clear_terms()
    builder.add_term("prefix")
    builder.add_term("width_range", k=8, weight=2.0)
    session.workload          # union([prefix(256), width_range(256, 8)], [1, 2])

Bad input never raises into the UI: it calls :meth:`Session.report` with a
message saying what was wrong and what is allowed, and keeps the current
terms, domain and workload.
"""

from __future__ import annotations

import contextlib
import io
import logging
import threading
from collections.abc import Sequence

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import numpy as np
import pandas as pd
import panel as pn
import param

from dpexplorer.queries import spec as dspec
from dpexplorer.queries.matrix import Matrix
from dpexplorer.queries.terms import (
    BLOCK_TYPES,
    FAMILIES,
    MAX_N,
    MAX_N_1D,
    MAX_RANDOM,
    OPTIONS,
    PRESETS,
    RANDOM_KINDS,
    Term,
    WorkloadTerms,
    brush_cells,
    check_weight,
    describe_domain,
    encode_terms,
    heatmap_data,
    large_domain_note,
    message,
    parse_domain,
    parse_matrix,
    spec_format,
    spec_workload,
    structure_frame,
    summary_text,
    term_params,
    terms_from_link,
    terms_from_matrix,
)

from .exports import FigureExport
from .serving import COLOR as _COLOR
from .serving import LABEL as _LABEL
from .serving import LazyCard
from .session import Session, error_alert, notify, side_by_side
from .table_workload import TableMarginals
from .uploads import Upload, size_text, upload_limit

# PRESETS: the papers' workloads (dpexplorer.queries.terms), as the gallery notebook imports them
__all__ = ["WorkloadBuilder", "TermsTable", "URL_PARAMS", "PRESETS"]

log = logging.getLogger(__name__)

#: Parameters of the builder synced to the URL: parameter -> query-string key.
URL_PARAMS = {"n": "n", "attributes": "attrs", "url_terms": "w"}

#: Seconds a workload build runs before the page shows its loading overlay.
BUSY_AFTER = 0.3


HEADER = """\
## Workload builder

A **workload** *W* is the batch of linear counting queries to answer (one row
per query, one column per cell of the data vector).  Build it as a **union of
terms**, each a family of queries with a **weight** (a weight *c* makes the
term's squared errors count *c²* times).  Over a multi-attribute domain a
1D family applies to every attribute (a Kronecker product); a *product* term
picks one block per attribute.  Brush the histogram (box-select) to add custom
ranges.  Every page of the explorer uses the workload built here.
"""


# ====================================================================== builder
class TermsTable(pn.widgets.Tabulator):
    """The Workload page's Terms table: a browser's edit of rows the server has since changed is
    dropped.

    The browser sends the table's data back when the user edits a weight; a
    message sent just before the server's own change of the terms (Add term,
    Clear all) arrives for rows that no longer exist.  Panel applies it to the
    new rows -- and, when the terms were cleared, reads the old text column as
    dates (Panel 1.9's ``_convert_column`` takes an empty object column for a
    date column), a server traceback seen with two sessions adding and clearing
    terms quickly (``tests/test_browser_new_user.py``).  Such a message is
    dropped: the server's newer table is already on its way to the browser.
    """

    def _process_data(self, data):
        rows = len(self.value)
        for values in data.values():
            stale = (any(int(k) >= rows for k in values) if isinstance(values, dict)
                     else len(values) != rows)
            if stale:
                log.debug("Terms table: a browser edit of %s rows dropped (the table has %d)",
                          len(values), rows)
                return None
        return super()._process_data(data)


class WorkloadBuilder(param.Parameterized):
    """The "Workload builder" page: edits ``session.workload`` as a weighted union of terms.

    Parameters
    ----------
    session : Session, optional
        The shared session (a new one if omitted).  At start the builder uses
        a 1D domain of the selected dataset's number of cells (256 when the
        dataset is not 1D) and adopts ``session.workload`` as its terms when
        it is over that domain, else starts from All Range.
    **params
        Initial values of the parameters below (e.g. ``n=64``).

    Attributes
    ----------
    session : Session
    brush : holoviews.streams.BoundsX
        Box-select stream of the data histogram; each event adds one range.
    terms : list of Term
        The terms of the union (read-only; use the methods to change them).
    domain : tuple of int
        Attribute sizes of the current domain.
    attribute_names : tuple of str
        Attribute names (empty for an unnamed 1D domain).
    stats : dict
        ``name, m, n, domain, l1, l2`` of the built workload.
    """

    URL_PARAMS = URL_PARAMS

    # -------------------------------------------------------------- domain
    n = param.Integer(default=256, doc="""
        Size of the 1D domain (cells, 1 to MAX_N_1D = 65,536); used when `attributes` is empty.""")
    attributes = param.String(default="", doc="""
        Multi-attribute domain as name:size items, e.g. "age:50, income:100, sex:2";
        empty for a 1D domain of n cells.""")

    # ----------------------------------------------------- next term to add
    family = param.Selector(default="all_range", objects=list(FAMILIES), doc="Family of the next term.")
    k = param.Integer(default=2, bounds=(0, MAX_N), doc="""
        Width k of 'width_range', order k of 'marginals' and 'range_marginals'.""")
    m = param.Integer(default=2000, bounds=(1, MAX_RANDOM), doc="Number of random ranges.")
    random_kind = param.Selector(default="uniform", objects=RANDOM_KINDS, doc="""
        Random ranges: uniform over all intervals, or clustered (5 centres, std 256 / 1024).""")
    seed = param.Integer(default=0, bounds=(0, None), doc="Seed of the random ranges.")
    orders = param.String(default="", doc="""
        Orders of 'marginals' and 'range_marginals' terms as text, e.g. "0-3" (all 0- to
        3-way marginals) or "1, 2"; empty: the single order k.""")
    preset = param.Selector(default="cps_all_marginals", objects=list(PRESETS), doc="""
        Preset (a workload of the papers over a named schema) loaded by load_preset().""")
    range_kind = param.Selector(default="all_range", objects=["all_range", "prefix"], doc="""
        Ranges on the chosen attributes of range marginals: all ranges or prefixes.""")
    blocks = param.List(default=[], item_type=str, doc="""
        Block type per attribute for 'product' terms (one of BLOCK_TYPES each).""")
    weight = param.Number(default=1.0, doc="Weight (> 0) of the next term.")
    ranges_text = param.String(default="", doc="Custom ranges, e.g. '0-9, 20-29' (cells, inclusive).")
    predicates_text = param.String(default="", doc="Pasted 0/1 predicate matrix, one query per line.")
    spec_text = param.String(default="", doc="Pasted workload spec (JSON or YAML).")

    url_terms = param.List(default=[], precedence=-1, doc="""
        The terms as ``[[family, params, weight], ...]`` for the page's link (URL key
        ``w``, as JSON); empty when a term cannot travel in a link (a workload set by
        another page, a loaded spec, or more than MAX_URL_TERMS characters of JSON).
        Setting it (e.g. from a shared link) rebuilds those terms over the domain of
        ``n``/``attributes``, after the same checks as the controls; a refused link
        keeps the current terms and says why.""")

    # ------------------------------------------------------------- outputs
    terms = param.List(default=[], constant=True, precedence=-1, doc="The terms of the union.")
    error = param.String(default="", constant=True, precedence=-1, doc="""
        Message of the last rejected input ('' after a successful change).""")
    busy = param.Boolean(default=False, constant=True, precedence=-1, doc="True while building.")
    version = param.Integer(default=0, constant=True, precedence=-1, doc="""
        Incremented whenever the terms or the workload change (views redraw on it).""")
    drawn = param.String(default="", constant=True, precedence=-1, doc="""
        What the heatmap draws: 'W', 'WᵀW' or '' (too large to draw).""")
    spec_error = param.String(default="", constant=True, precedence=-1, doc="""
        Why the workload cannot be written as a spec ('' when it can).""")

    def __init__(self, session: Session | None = None, **params):
        self.session = session if session is not None else Session()
        self._lock = threading.RLock()
        self._syncing = False
        self._domain: tuple[int, ...] = (256,)
        self._names: tuple[str, ...] = ()
        self._workload: Matrix | None = None
        self.stats: dict = {}
        self._layout = None
        default_n = self._dataset_cells()
        params.setdefault("n", default_n if default_n is not None else 256)
        super().__init__(**params)
        try:
            domain, names = parse_domain(self.attributes, self.n)
        except ValueError as exc:
            self._fail(f"Domain not used: {exc}; using a 1D domain of 256 cells")
            domain, names = (256,), ()
        W = self.session.workload
        if W is not None and tuple(W.domain) == domain and not names:
            self._adopt(W)
        elif not self._commit(WorkloadTerms((Term("all_range"),), domain, names), "Start"):
            self._commit(WorkloadTerms((Term("identity"),), (256,)), "Start")
        self.session.param.watch(self._on_session_workload, "workload")
        self.tables = TableMarginals(self)  # the "Record table: marginals" card
        # A plain element, redrawn with a fresh stream on every change: a BoundsX stream on a
        # DynamicMap never received the browser's box-select geometry (Panel 1.9/HoloViews 1.23)
        self._hist_pane = pn.pane.HoloViews(sizing_mode="stretch_width", height=240)
        self._redraw_histogram()
        self.session.param.watch(self._redraw_histogram, "dataset")
        self.param.watch(self._histogram_changed, "version")

    # ============================================================== state
    @property
    def domain(self) -> tuple[int, ...]:
        """Attribute sizes of the current domain (``(n,)`` in 1D)."""
        return self._domain

    @property
    def attribute_names(self) -> tuple[str, ...]:
        """Attribute names of the current domain (empty for an unnamed 1D domain)."""
        return self._names

    @property
    def workload(self) -> Matrix | None:
        """The session's current workload ``W``."""
        return self.session.workload

    @property
    def state(self) -> WorkloadTerms:
        """The current terms and domain, the page's model (:class:`~dpexplorer.queries.terms.WorkloadTerms`)."""
        return WorkloadTerms(tuple(self.terms), self._domain, self._names)

    def _inputs(self) -> dict:
        """The controls a new term reads (:func:`dpexplorer.queries.terms.term_params`)."""
        return {"k": self.k, "m": self.m, "kind": self.random_kind, "seed": self.seed,
                "orders": self.orders, "range_kind": self.range_kind, "ranges": self.ranges_text,
                "matrix": self.predicates_text, "blocks": self.blocks}

    def _set(self, **values) -> None:
        with param.edit_constant(self):
            self.param.update(**values)

    def _fail(self, text: str) -> bool:
        """Report ``text`` (session notification + :attr:`error`); always ``False``."""
        self._set(error=text)
        self.session.report(text)
        return False

    def _dataset_cells(self) -> int | None:
        """Number of cells of the selected dataset when it is 1D (and not too large)."""
        try:
            x = self.session.data().x
        except Exception:  # noqa: BLE001 - dataset unavailable: fall back to 256
            return None
        if x.ndim == 1 and 1 <= x.size <= MAX_N:
            return int(x.size)
        return None

    def _commit(self, state: WorkloadTerms, what: str, workload: Matrix | None = None) -> bool:
        """Build ``state`` and make it current; on error keep everything and report ``what: why``.

        ``workload``: use this matrix as the session's workload instead of the
        union of the terms (when adopting a workload set elsewhere).
        """
        with self._lock:
            try:
                with self._busy_if_slow():
                    built = state.build(workload)
            except Exception as exc:  # noqa: BLE001 - never raise into the UI
                if not isinstance(exc, ValueError):
                    log.exception("building the workload failed")
                return self._fail(f"{what}: {message(exc)}")
            self._domain, self._names = built.domain, built.names
            # after "Clear all" the domain may change while the stats still describe the last
            # workload built
            if built.stats is not None:
                self.stats = built.stats
            self._sync_params()
            W = built.workload
            if W is not None and W is not self.session.workload:
                self._workload = W
                self.session.workload = W
            self._workload = self.session.workload
            spec_error = self.spec_error if built.spec_error is None else built.spec_error
            self._set(terms=list(built.terms), error="", spec_error=spec_error,
                      version=self.version + 1)
            self._sync_url_terms()
            return True

    @contextlib.contextmanager
    def _busy_if_slow(self):
        """:attr:`busy` (the page's loading overlay) while a build runs, once it has taken
        :data:`BUSY_AFTER` seconds: a build of milliseconds (most terms) shows no overlay.

        An overlay per change made the page lay out its main column twice per click, and
        a click landing as it appeared was swallowed: in a served page driven by Playwright
        (2 cores), Add term, Add term, Clear all, 20 times in two sessions at once, lost
        1-3 of the 40 Clear all clicks in one run of two.
        """
        timer = threading.Timer(BUSY_AFTER, lambda: self._set(busy=True))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            timer.join()  # a timer already setting busy has set it: it is cleared next
            if self.busy:
                self._set(busy=False)

    def commit_term(self, term: Term, shape: Sequence[int], names: Sequence[str], what: str) -> bool:
        """Make ``term`` over the domain ``shape`` (attribute sizes) named ``names`` the whole
        workload; ``True`` on success, else the reason is reported (starting with ``what``)
        and nothing changes."""
        return self._commit(WorkloadTerms((term,), tuple(shape), tuple(names)), what)

    # ================================================================ link
    def _sync_url_terms(self) -> None:
        """Write the current terms into ``url_terms`` (without rebuilding them)."""
        text = encode_terms(self.terms)
        if text != self.url_terms:
            syncing, self._syncing = self._syncing, True
            try:
                self.url_terms = text
            finally:
                self._syncing = syncing

    def _apply_link(self) -> bool:
        """Build the link's domain (``n``/``attributes``) and terms (``url_terms``) together."""
        try:
            domain, names = parse_domain(self.attributes, self.n)
            terms = terms_from_link(self.url_terms, self._inputs(), len(domain))
        except ValueError as exc:
            self._sync_params()
            self._sync_url_terms()
            return self._fail(f"Workload from the link not used: {message(exc)}")
        if self._commit(WorkloadTerms(tuple(terms), domain, names), "Workload from the link not used"):
            return True
        self._sync_params()
        self._sync_url_terms()
        return False

    def _sync_params(self) -> None:
        """Show the committed domain in ``n``/``attributes`` and size ``blocks`` to it."""
        d = len(self._domain)
        values = {"attributes": dspec.format_attributes(self._domain, self._names)}
        if d == 1:
            values["n"] = self._domain[0]
        blocks = list(self.blocks)[:d]
        blocks += ["identity"] * (d - len(blocks))
        values["blocks"] = blocks
        self._syncing = True
        try:
            self.param.update(**values)
        finally:
            self._syncing = False

    def _adopt(self, W: Matrix) -> bool:
        """Make ``W`` (set on the session elsewhere) the builder's terms, keeping the object."""
        domain = tuple(int(n) for n in W.domain)
        attrs = getattr(W, "attributes", None)
        names = tuple(str(a) for a in attrs) if attrs is not None and len(attrs) == len(domain) else ()
        what = "Session workload not adopted"
        if self._commit(WorkloadTerms(tuple(terms_from_matrix(W)), domain, names), what, workload=W):
            return True
        external = Term("external", {"name": W.name}, 1.0, W, domain)
        return self._commit(WorkloadTerms((external,), domain, names), what, workload=W)

    def _on_session_workload(self, event) -> None:
        if event.new is None or event.new is self._workload:
            return
        self._adopt(event.new)

    # ============================================================= domain
    def set_domain(self, n=None, attributes: str | None = None) -> bool:
        """Change the domain and rebuild every term over it; ``True`` on success.

        Parameters
        ----------
        n : int, optional
            New 1D domain size (used when ``attributes`` is empty).
        attributes : str, optional
            New multi-attribute domain ``"name:size, ..."`` (``""`` for 1D).

        A bad domain, or a term that does not fit it (e.g. a custom range past
        the new end), is reported and the previous domain, terms and workload
        are kept.
        """
        n = self.n if n is None else n
        attributes = self.attributes if attributes is None else attributes
        try:
            domain, names = parse_domain(attributes, n)
        except ValueError as exc:
            self._sync_params()
            return self._fail(f"Domain not changed: {exc}")
        if domain == self._domain and names == self._names:
            self._sync_params()
            return True
        ok = self._commit(self.state.over(domain, names),
                          f"Domain not changed to {describe_domain(domain, names)}")
        if not ok:
            self._sync_params()
        elif self.large_domain_note():
            notify(self.large_domain_note(), "warning")
        return ok

    def large_domain_note(self) -> str:
        """What the domain's size means for the pages ('' for a small one;
        :func:`dpexplorer.queries.terms.large_domain_note`)."""
        return large_domain_note(self._domain)

    @param.depends("n", "attributes", "url_terms", watch=True)
    def _on_domain_params(self) -> None:
        if self._syncing:
            return
        if self.url_terms and self.url_terms != encode_terms(self.terms):
            self._apply_link()  # a link's domain and terms, applied together
        else:
            self.set_domain(self.n, self.attributes)

    def use_dataset_size(self) -> bool:
        """Set the 1D domain size to the selected dataset's number of cells."""
        cells = self._dataset_cells()
        if cells is None:
            return self._fail(f"The dataset {self.session.dataset!r} is not 1D (or not available); "
                              "its size cannot be used as a 1D domain")
        return self.set_domain(n=cells, attributes="")

    # ============================================================== terms
    def add_term(self, family: str | None = None, weight=None, **options) -> bool:
        """Add a term to the union and rebuild ``session.workload``; ``True`` on success.

        Parameters
        ----------
        family : str, optional
            A key of :data:`~dpexplorer.queries.terms.FAMILIES` (default: the ``family`` parameter).
        weight : float, optional
            Positive weight of the term (default: the ``weight`` parameter).
        **options
            Override the builder's inputs for this term only: ``k``,
            ``orders`` (marginal orders, e.g. ``"0-3"`` or ``[1, 2]``), ``m``,
            ``kind`` (random ranges), ``seed``, ``range_kind``, ``ranges``
            (text or pairs), ``matrix`` (text, bytes or array), ``blocks``
            (one block type per attribute).

        Notes
        -----
        ``"ranges"`` appends its intervals to the one custom-ranges term
        (created with ``weight`` when there is none), like a brush.
        """
        family = self.family if family is None else family
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            return self._fail(f"Term not added: unknown option(s) {unknown}; allowed: {list(OPTIONS)}")
        if family not in FAMILIES:
            return self._fail(f"Term not added: unknown query family {family!r}; allowed: {list(FAMILIES)}")
        try:
            w = check_weight(self.weight if weight is None else weight)
            params = term_params(family, options, self._inputs(), len(self._domain))
        except ValueError as exc:
            return self._fail(f"Term not added ({FAMILIES[family]}): {message(exc)}")
        if family == "ranges":
            return self.add_ranges(params["ranges"], weight=w)
        return self._commit(self.state.added(Term(family, params, w)), f"Term not added ({FAMILIES[family]})")

    def add_ranges(self, ranges, weight=None) -> bool:
        """Append inclusive cell intervals to the custom-ranges term; ``True`` on success.

        Parameters
        ----------
        ranges : str or sequence of (int, int)
            ``"0-9, 20-29"`` or ``[(0, 9), (20, 29)]`` (0-based cells, inclusive).
        weight : float, optional
            Weight of the custom-ranges term if it is created now.
        """
        try:
            state = self.state.with_ranges(ranges, self.weight if weight is None else weight)
        except ValueError as exc:
            return self._fail(f"Ranges not added: {message(exc)}")
        return self._commit(state, "Ranges not added")

    def load_preset(self, name: str | None = None) -> bool:
        """Replace the domain and the terms by a workload of the papers; ``True`` on success.

        Parameters
        ----------
        name : str, optional
            A key of :data:`PRESETS` (default: the ``preset`` parameter):
            ``"cps_all_marginals"``, ``"cps_all_prefix_marginals"``,
            ``"adult_marginals"``.

        On error (an unknown name) nothing changes and the reason is reported.
        """
        name = self.preset if name is None else name
        if name not in PRESETS:
            return self._fail(f"Preset not loaded: unknown preset {name!r}; allowed: {list(PRESETS)}")
        preset = PRESETS[name]
        return self._commit(preset.workload_terms(), f"Preset {preset.label!r} not loaded")

    def custom_ranges(self) -> list[tuple[int, int]]:
        """The intervals of the custom-ranges term (empty when there is none)."""
        return self.state.custom_ranges()

    def set_weight(self, index: int, weight) -> bool:
        """Set the weight of term ``index`` (0-based); ``True`` on success."""
        try:
            state = self.state.reweighted(index, weight)
        except ValueError as exc:
            return self._fail(f"Weight not changed: {message(exc)}")
        return self._commit(state, "Weight not changed")

    def remove_term(self, index: int) -> bool:
        """Remove term ``index`` (0-based); ``True`` on success."""
        return self.remove_terms([index])

    def remove_terms(self, indices: Sequence[int]) -> bool:
        """Remove the terms at ``indices`` (0-based).

        Removing every term leaves ``session.workload`` unchanged (the other
        pages need a workload) until a term is added again.
        """
        try:
            state = self.state.without(indices)
        except ValueError as exc:
            return self._fail(f"Term not removed: {message(exc)}")
        if not state.terms:
            return self.clear_terms()
        return self._commit(state, "Term not removed")

    def clear_terms(self) -> bool:
        """Remove all terms; ``session.workload`` keeps the last built workload."""
        with self._lock:  # as every change of the terms: the views redraw one change at a time
            self._set(terms=[], error="", version=self.version + 1)
            self._sync_url_terms()
        return True

    # ============================================================== brush
    def _on_brush(self, boundsx=None, **_) -> None:
        if boundsx is None:
            return
        try:
            self.add_brush(*boundsx)
        except Exception as exc:  # noqa: BLE001 - never raise into the UI
            log.exception("brush failed")
            self._fail(f"Brushed range not added: {message(exc)}")

    def add_brush(self, x0: float, x1: float) -> bool:
        """Add the cells under a brushed span ``[x0, x1]`` (histogram units) as one range
        (:func:`dpexplorer.queries.terms.brush_cells`).  Needs a 1D dataset and a 1D
        domain with as many cells as its histogram.
        """
        what = "Brushed range not added"
        try:
            ds = self.session.data()
        except Exception as exc:  # noqa: BLE001
            return self._fail(f"{what}: no data histogram ({message(exc)})")
        if ds.x.ndim != 1:
            return self._fail(f"{what}: brushing adds 1D ranges, but the dataset "
                              f"{ds.name!r} is {ds.x.shape}; select a 1D dataset or type the ranges")
        cells = ds.x.size
        if self._domain != (cells,):
            return self._fail(f"{what}: the histogram has {cells} cells but the domain "
                              f"is {describe_domain(self._domain, self._names)}; set n = {cells} "
                              f"('Use the dataset's size') to brush ranges")
        try:
            cell_range = brush_cells(ds.edges[0], x0, x1)
        except ValueError as exc:
            return self._fail(f"{what}: {exc}")
        return self.add_ranges([cell_range])

    # =============================================================== spec
    def load_spec(self, text, filename: str | None = None) -> bool:
        """Replace the terms by one "from spec" term built from JSON/YAML spec text.

        Parameters
        ----------
        text : str or bytes
            The spec (bytes from an upload are decoded as UTF-8).
        filename : str, optional
            ``.json`` / ``.yaml`` / ``.yml`` fixes the format; otherwise JSON
            is tried, then YAML.

        Returns
        -------
        bool
            ``True`` when the spec was loaded (it sets the domain and
            ``session.workload``); on error the current work is kept.
        """
        where = f" from {filename!r}" if filename else ""
        what = f"Spec not loaded{where}"
        if isinstance(text, bytes | bytearray):
            limit = upload_limit("spec_bytes")
            if len(text) > limit:
                return self._fail(f"{what}: the file has {size_text(len(text))}, above the limit of "
                                  f"{size_text(limit)} for a spec file")
            try:
                text = bytes(text).decode("utf-8-sig")
            except UnicodeDecodeError:
                return self._fail(f"{what}: the file is not UTF-8 text; a spec is a JSON or YAML file")
        if not isinstance(text, str) or not text.strip():
            return self._fail(f"{what}: the spec is empty; give JSON or YAML such as "
                              '{"domain": [256], "products": [{"factors": ["prefix"]}]}')
        try:
            W = spec_workload(text, spec_format(filename))
        except Exception as exc:  # noqa: BLE001 - parse errors, invalid specs
            if not isinstance(exc, ValueError):
                log.exception("loading a spec failed")
            return self._fail(f"{what}: {message(exc)}")
        domain = tuple(int(n) for n in W.domain)
        attrs = getattr(W, "attributes", None)
        term = Term("spec", {"name": W.name, "spec": dspec.to_spec(W)}, 1.0, W, domain)
        return self._commit(WorkloadTerms((term,), domain, tuple(attrs) if attrs is not None else ()), what)

    def load_spec_file(self, data: bytes, filename: str | None = None) -> bool:
        """:meth:`load_spec` for an uploaded file's bytes."""
        return self.load_spec(data if data is not None else b"", filename or "uploaded file")

    def export_spec(self, format: str = "json") -> str | None:
        """The spec of ``session.workload`` as JSON or YAML text (``None`` and a report on error)."""
        W = self.session.workload
        if W is None:
            self._fail("Spec not exported: there is no workload yet")
            return None
        try:
            return dspec.dumps(W, format)
        except Exception as exc:  # noqa: BLE001
            self._fail(f"Spec not exported: {message(exc)}")
            return None

    def _download(self, fmt: str) -> io.StringIO:
        text = self.export_spec(fmt)
        if text is None:
            text = f"# the workload cannot be written as a spec: {self.error}\n"
        return io.StringIO(text)

    def load_predicates(self, data, filename: str | None = None, weight=None) -> bool:
        """Add a predicates term from an uploaded file (``.npy`` or CSV/text of 0/1) or text."""
        try:
            M = parse_matrix(data, filename)
        except ValueError as exc:
            where = f" from {filename!r}" if filename else ""
            return self._fail(f"Predicates not added{where}: {message(exc)}")
        return self.add_term("predicates", weight=weight, matrix=M)

    # ============================================================ drawing
    def heatmap_data(self) -> tuple[str, np.ndarray | None, str]:
        """What the heatmap draws (:func:`dpexplorer.queries.terms.heatmap_data` of the workload)."""
        return heatmap_data(self.session.workload)

    def heatmap(self, data: tuple | None = None):
        """The heatmap of W or WᵀW (:class:`holoviews.Image`), or an Alert when too large.

        Sets :attr:`drawn` to ``"W"``, ``"WᵀW"`` or ``""``.  ``data``: what
        :meth:`heatmap_data` returned, when already computed.
        """
        which, A, note = self.heatmap_data() if data is None else data
        self._set(drawn=which)
        if A is None:
            alert = pn.pane.Alert(note, alert_type="warning", sizing_mode="stretch_width")
            frame = self.structure_frame()
            if frame is None:
                return alert
            total = frame.attrs["products"]
            shown = (f"the first {len(frame)} of {total:,} products" if total > len(frame)
                     else f"its {total:,} product{'s' if total > 1 else ''}")
            return pn.Column(alert, pn.pane.Markdown(
                f"**Structure instead:** the workload is a union of weighted Kronecker products "
                f"(one 1D block per attribute; attributes with Total are omitted); {shown}:",
                sizing_mode="stretch_width"),
                pn.widgets.Tabulator(frame, show_index=False, disabled=True, height=min(
                    400, 80 + 36 * len(frame)), sizing_mode="stretch_width",
                    layout="fit_data_stretch"), sizing_mode="stretch_width")
        rows, cols = self.session.workload.shape if which == "W" else (self.session.workload.n,) * 2
        ydim = hv.Dimension("row", label="query i" if which == "W" else "cell i")
        img = hv.Image(np.flipud(A), bounds=(0, 0, cols, rows),
                       kdims=[hv.Dimension("col", label="cell j"), ydim],
                       vdims=[hv.Dimension("value", label=which)])
        return img.opts(cmap="Blues", colorbar=True, invert_yaxis=True, tools=["hover"],
                        responsive=True, min_height=320, max_height=520,
                        title=f"{which} ({rows:,} × {cols:,})",  # short: the note goes above the plot
                        fontsize={"title": "10pt"}, default_tools=["save", "reset", "wheel_zoom", "pan"],
                        framewise=True)  # ranges and colours follow each workload (in-place updates)

    def structure_frame(self, limit: int | None = None) -> pd.DataFrame | None:
        """The products of the workload: ``weight, product, queries``
        (:func:`dpexplorer.queries.terms.structure_frame`)."""
        return structure_frame(self.session.workload, self._names, limit)

    def _heatmap_panes(self) -> pn.Column:
        """The page's heatmap: a note, the plot and a box for an Alert (too large to draw),
        made once and updated in place on every change of the terms.

        Not a method bound to ``version`` (``pn.panel``): Panel re-runs a bound method on the thread
        handling the user's click and holds the whole document until the server's event
        loop next runs (``pn.io.hold`` from a thread, Panel 1.9).  Every update the loop
        made meanwhile was held with it and merged: a plot replaced twice reached the
        browser as the second plot plus a style change of the first, which the browser
        never received ("reference pNNNN isn't known"), and the Terms table's own new
        data came back to it as if the browser had edited the table (pandas
        ``ValueError`` in Tabulator's ``_update_column``).  Measured on 2 cores (load
        10-20), served page driven by Playwright: Add term, Add term, Clear all, 15
        times, gave 2-7 such browser errors and 2-4 server tracebacks with a bound
        method here, none without (``python -m pytest tests/test_browser_new_user.py
        -k forty``).

        The plot is a :class:`holoviews.DynamicMap` fed by a ``Pipe`` stream (each
        element ``framewise``): a new workload changes the one Bokeh figure's image,
        ranges, axis labels and title in place instead of sending the browser a new
        figure to lay out and paint.  Measured with Chromium's profiler (2 cores, quiet),
        10 rounds of Add term, Add term, Clear all: the page's JavaScript took 29.2 s
        with a new figure per change and a loading overlay per build, 12.3 s with the
        figure updated in place and the overlay only for slow builds (:meth:`_busy_if_slow`).
        """
        note = pn.pane.Markdown("", styles={"font-size": "0.9em"}, margin=(0, 10),
                                sizing_mode="stretch_width")
        data = self.heatmap_data()
        out = self.heatmap(data)
        first = out if isinstance(out, hv.Element) else self._blank_heatmap()
        frames = hv.streams.Pipe(data=first)
        # cache_size=1: a DynamicMap keeps its last 500 frames by default (images of up to
        # 200,000 entries each, for as long as the session lives)
        plot = pn.pane.HoloViews(hv.DynamicMap(lambda data: data, streams=[frames], cache_size=1),
                                 sizing_mode="stretch_width")
        # visibility toggles on wrapping Columns: toggling a rendered HoloViews pane's own
        # `visible` raises in Panel 1.9 (its Bokeh stylesheets are re-validated as strings)
        drawn = pn.Column(note, plot, sizing_mode="stretch_width")
        other = pn.Column(sizing_mode="stretch_width", visible=False)

        def show(data, out):
            if isinstance(out, hv.Element):
                note.object = data[2]
                if out is not frames.data:
                    frames.send(out)
                drawn.visible, other.visible = True, False
                other.objects = []
            else:
                other.objects = [out]
                drawn.visible, other.visible = False, True
        show(data, out)

        def redraw(*_):
            data = self.heatmap_data()
            show(data, self.heatmap(data))
        self.param.watch(redraw, "version")
        return pn.Column(drawn, other, sizing_mode="stretch_width")

    @staticmethod
    def _blank_heatmap() -> hv.Image:
        """A 1 × 1 placeholder image: the first frame of the heatmap while the workload is
        too large to draw (the plot is hidden until a workload it can draw)."""
        return hv.Image(np.zeros((1, 1)), bounds=(0, 0, 1, 1)).opts(
            framewise=True, responsive=True, min_height=320, max_height=520)

    def _histogram_key(self) -> tuple:
        """What the data histogram shows besides the data: the domain and the custom ranges."""
        return self._domain, tuple(self.custom_ranges())

    def _histogram_changed(self, *_) -> None:
        """Redraw the data histogram after a change of the terms only if it shows something else.

        Each redraw replaces the plot (a new Bokeh figure) and its box-select
        stream: redrawn on every change of the terms, a quick run of them (Add
        term, Add term, Clear all) replaced it many times a second for nothing.
        """
        if self._histogram_key() != self._hist_key:
            self._redraw_histogram()

    _hist_key: tuple | None = None

    def _redraw_histogram(self, *_) -> None:
        """Draw the data histogram and attach a new box-select stream to it."""
        self._hist_key = self._histogram_key()
        element = self._histogram()
        old = getattr(self, "brush", None)
        if old is not None:
            old.clear()
        self.brush = hv.streams.BoundsX(source=element, boundsx=None)
        self.brush.add_subscriber(self._on_brush)
        self._hist_pane.object = element

    def _histogram(self, dataset=None, version=None, **_):
        """The selected dataset's histogram with the custom ranges shaded."""
        spans = []
        try:
            ds = self.session.data()
            x = ds.x if ds.x.ndim == 1 else ds.x.sum(axis=tuple(range(1, ds.x.ndim)))
            edges = np.asarray(ds.edges[0], dtype=float)
            label = ds.attributes[0]
            if ds.x.ndim == 1:
                title = f"{ds.name}: {x.size} cells — box-select a span to add a range"
                if self._domain == (x.size,):
                    spans = [(edges[lo], edges[hi + 1]) for lo, hi in self.custom_ranges()]
                else:
                    title += f" (needs n = {x.size})"
            else:
                title = (f"{ds.name} is {ds.x.shape}: marginal of {label} shown; "
                         "brushing adds ranges on 1D datasets only")
        except Exception as exc:  # noqa: BLE001 - dataset unavailable
            x, edges, label = np.zeros(1), np.array([0.0, 1.0]), "cell"
            title = f"No data histogram: {message(exc)}"
        hist = hv.Histogram((edges, x), kdims=[hv.Dimension("x", label=label)],
                            vdims=[hv.Dimension("count")]).opts(
            tools=["xbox_select", "hover"], active_tools=["xbox_select"], responsive=True,
            height=220, color="#6d904f", line_color=None, title=title, fontsize={"title": "9pt"})
        shade = hv.VSpans(spans, kdims=[hv.Dimension("x", label=label), "x1"]).opts(
            color="#ff7f0e", alpha=0.25)
        return hist * shade

    # ================================================================= UI
    def terms_frame(self) -> pd.DataFrame:
        """The terms as a table: ``term`` (text), ``queries`` (rows over the domain, int64),
        ``weight`` (float64); the same columns and dtypes with no term (the Terms table is
        updated in place, its columns never change)."""
        return pd.DataFrame({
            "term": pd.Series([t.label for t in self.terms], dtype=object),
            "queries": pd.Series([t.matrix.m if t.matrix is not None else 0 for t in self.terms],
                                 dtype="int64"),
            "weight": pd.Series([float(t.weight) for t in self.terms], dtype="float64")})

    def summary(self) -> str:
        """Markdown: domain, m, n, L1 and L2 sensitivity of the workload (and any mismatch;
        :func:`dpexplorer.queries.terms.summary_text`)."""
        return summary_text(self.stats, self.state, self.session.workload, self.session.dataset,
                            self._dataset_cells(), self.session.table)

    def _controls(self) -> pn.Column:
        w = pn.widgets

        def lab(text):
            return {_LABEL: text}

        n_in = w.IntInput.from_param(self.param.n, **lab(f"1D domain size n (1..{MAX_N_1D:,})"),
                                     disabled=pn.bind(bool, self.param.attributes))
        attrs = w.TextInput.from_param(self.param.attributes, **lab("Attributes (name:size, …)"),
                                       placeholder="age:50, income:100, sex:2 (empty: 1D)")
        match = w.Button(**lab("Use the dataset's size"), **{_COLOR: "light"})
        match.on_click(lambda e: self.use_dataset_size())
        domain = pn.Card(n_in, attrs, match, title="Domain", sizing_mode="stretch_width")

        preset = w.Select.from_param(self.param.preset, **lab("Schema and workload"),
                                     options={p.label: k for k, p in PRESETS.items()})
        source = pn.pane.Markdown(pn.bind(lambda k: f"*{PRESETS[k].source}*", self.param.preset),
                                  sizing_mode="stretch_width", styles={"font-size": "85%"})
        load_preset = w.Button(**lab("Load preset (replaces the terms)"), **{_COLOR: "primary"})
        load_preset.on_click(lambda e: self.load_preset())
        presets = LazyCard(preset, source, load_preset, title="Presets (papers' schemas)",
                           sizing_mode="stretch_width", collapsed=True)

        fam = w.Select.from_param(self.param.family, **lab("Query family"),
                                  options={v: k for k, v in FAMILIES.items()})

        def shown(*families):
            return pn.bind(lambda f: f in families, self.param.family)

        k_in = w.IntInput.from_param(self.param.k, **lab("k (width / marginal order)"),
                                     visible=shown("width_range", "marginals", "range_marginals", "product"))
        orders = w.TextInput.from_param(self.param.orders, **lab("Orders (e.g. 0-3 or 1, 2; empty: k)"),
                                        placeholder="0-3", visible=shown("marginals", "range_marginals"))
        m_in = w.IntInput.from_param(self.param.m, **lab("m (number of ranges)"),
                                     visible=shown("random_ranges", "product"))
        kind = w.Select.from_param(self.param.random_kind, **lab("Random ranges"),
                                   visible=shown("random_ranges", "product"))
        seed = w.IntInput.from_param(self.param.seed, **lab("Seed"), visible=shown("random_ranges", "product"))
        rkind = w.RadioButtonGroup.from_param(self.param.range_kind, visible=shown("range_marginals"))
        ranges = w.TextInput.from_param(self.param.ranges_text, **lab("Ranges (cells lo-hi)"),
                                        placeholder="0-9, 20-29", visible=shown("ranges", "product"))
        preds = w.TextAreaInput.from_param(self.param.predicates_text, **lab("0/1 matrix (one query per line)"),
                                           placeholder="1 1 0 0\n0 1 1 1", height=100,
                                           visible=shown("predicates"))
        pred_file = Upload(accepted_filetypes=[".npy", ".csv", ".txt"], visible=shown("predicates"),
                           on_file=lambda data, name: self.load_predicates(data, name),
                           on_error=self.session.report)
        # the block types of a product term: one Select per attribute, rebuilt when the domain
        # changes (not by a bound function: Panel re-runs those on its callback threads and
        # holds the whole document meanwhile, see _heatmap_panes)
        blocks = pn.Column(visible=shown("product"), sizing_mode="stretch_width")
        drawn_for: list = [None]

        def refresh_blocks(*_):
            key = (self._domain, self._names)
            if key != drawn_for[0]:
                drawn_for[0] = key
                blocks.objects = self._block_selectors().objects
        refresh_blocks()
        self.param.watch(refresh_blocks, "version")
        weight = w.FloatInput.from_param(self.param.weight, **lab("Weight (> 0)"), step=0.5)
        add = w.Button(**lab("Add term"), **{_COLOR: "primary"})
        add.on_click(lambda e: self.add_term())
        adder = pn.Card(fam, blocks, k_in, orders, m_in, kind, seed, rkind, ranges, preds, pred_file,
                        pred_file.note(visible=shown("predicates")),
                        weight, add,
                        title="Add a term", sizing_mode="stretch_width")

        dl_json = w.FileDownload(callback=lambda: self._download("json"), filename="workload.json",
                                 label="Download JSON", **{_COLOR: "success"},
                                 disabled=pn.bind(bool, self.param.spec_error))
        dl_yaml = w.FileDownload(callback=lambda: self._download("yaml"), filename="workload.yaml",
                                 label="Download YAML", **{_COLOR: "success"},
                                 disabled=pn.bind(bool, self.param.spec_error))
        why = pn.pane.Markdown(pn.bind(lambda e: f"*Not expressible as a spec:* {e}" if e else "",
                                       self.param.spec_error), sizing_mode="stretch_width")
        upload = Upload(accepted_filetypes=[".json", ".yaml", ".yml"], max_bytes=upload_limit("spec_bytes"),
                        on_file=self.load_spec_file, on_error=self.session.report)
        text = w.TextAreaInput.from_param(self.param.spec_text, **lab("Paste a spec (JSON or YAML)"),
                                          height=140, placeholder='{"domain": [256], "products": '
                                          '[{"weight": 1, "factors": ["prefix"]}]}')
        load = w.Button(**lab("Load pasted spec"), **{_COLOR: "primary"})
        load.on_click(lambda e: self.load_spec(self.spec_text))
        copy = w.Button(**lab("Copy current spec here"), **{_COLOR: "light"})

        def copy_spec(_):
            out = self.export_spec("yaml")
            if out is not None:
                self.spec_text = out
        copy.on_click(copy_spec)
        specs = LazyCard(pn.Row(dl_json, dl_yaml), why, pn.pane.Markdown("**Load a spec file**"),
                         upload, upload.note(), text, pn.Row(load, copy),
                         title="Import / export spec", sizing_mode="stretch_width", collapsed=True)
        return pn.Column(domain, presets, self.tables.panel(), adder, specs, width=360)

    def _block_selectors(self, version=None) -> pn.Column:
        """One block-type Select per attribute (product terms)."""
        names = self._names or tuple(f"a{i + 1}" for i in range(len(self._domain)))
        selects = []
        for i, (name, n) in enumerate(zip(names, self._domain, strict=True)):
            value = self.blocks[i] if i < len(self.blocks) else "identity"
            sel = pn.widgets.Select(**{_LABEL: f"{name} ({n})"}, options=BLOCK_TYPES, value=value)

            def pick(event, i=i):
                blocks = list(self.blocks)
                blocks[i] = event.new
                self.blocks = blocks
            sel.param.watch(pick, "value")
            selects.append(sel)
        return pn.Column(*selects, sizing_mode="stretch_width")

    def _terms_table(self) -> pn.Column:
        from bokeh.models.widgets.tables import NumberFormatter

        tab = TermsTable(self.terms_frame(), show_index=True, selectable="checkbox",
                                   sizing_mode="stretch_width", layout="fit_data_stretch",
                                   editors={"term": None, "queries": None,
                                            "weight": {"type": "number", "min": 0, "step": 0.5}},
                                   formatters={"queries": NumberFormatter(format="0,0")},
                                   titles={"weight": "weight (edit)"})

        def edited(event):
            if event.column == "weight" and not self.set_weight(event.row, event.value):
                with self._lock:
                    tab.value = self.terms_frame()  # the weight in use
        tab.on_edit(edited)
        # one table for the page, its value set in place (same columns and dtypes) on every
        # change of the terms, one change at a time (under the builder's lock)
        self.param.watch(lambda e: setattr(tab, "value", self.terms_frame()), "version")
        self._terms_tab = tab
        remove = pn.widgets.Button(**{_LABEL: "Remove selected"}, **{_COLOR: "warning"})
        remove.on_click(lambda e: self.remove_terms(list(tab.selection)) if tab.selection else
                        self._fail("Term not removed: select the terms to remove first (checkboxes)"))
        clear = pn.widgets.Button(**{_LABEL: "Clear all"}, **{_COLOR: "danger"})
        clear.on_click(lambda e: self.clear_terms())
        # the buttons above the table, not below: they stay put as the table grows and shrinks
        # (a click aimed below a table being redrawn landed on the table)
        return pn.Column(pn.Row(pn.pane.Markdown("### Terms (union)"), remove, clear, align="center"),
                         tab, sizing_mode="stretch_width")

    def error_alert(self) -> pn.pane.Alert:
        """A danger Alert with :attr:`error`, hidden while there is none."""
        return error_alert(self.param.error, "**Input rejected, your workload is unchanged.**")

    def panel(self) -> pn.Column:
        """The whole page (built once)."""
        if self._layout is not None:
            return self._layout
        summary = pn.pane.Markdown(pn.bind(lambda v, d: self.summary(), self.param.version,
                                           self.session.param.dataset), sizing_mode="stretch_width")
        heat = self._heatmap_panes()
        hist = self._hist_pane
        self.exports: dict = {}

        def heatmap_now():
            out = self.heatmap()
            return out if isinstance(out, hv.Element) else None
        # the terms first: the summary above them would move their buttons as its lines change
        main = pn.Column(self._terms_table(), summary, heat,
                         FigureExport("workload", "heatmap", heatmap_now,
                                      report=self.session.report, into=self.exports),
                         pn.pane.Markdown("### Brush custom ranges on the data"), hist,
                         FigureExport("workload", "data-histogram", lambda: hist.object,
                                      report=self.session.report, into=self.exports),
                         sizing_mode="stretch_width", loading=self.param.busy)
        self._layout = pn.Column(pn.pane.Markdown(HEADER, sizing_mode="stretch_width"),
                                 self.error_alert(), side_by_side(self._controls(), main),
                                 sizing_mode="stretch_width")
        return self._layout

    def __panel__(self):
        return self.panel()
