"""The "Workload builder" page: the view of :mod:`dpexplorer.queries.terms` (the model).

Builds the session's workload ``W`` as a weighted union of terms.  Without a browser::

    builder = WorkloadBuilder(session)
    builder.clear_terms()
    builder.add_term("prefix")
    builder.add_term("width_range", k=8, weight=2.0)
    session.workload          # union([prefix(256), width_range(256, 8)], [1, 2])

Bad input is reported (saying what is allowed); the terms, domain and workload stay.
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
from dpexplorer.queries import terms as wt
from dpexplorer.queries.matrix import Matrix
from dpexplorer.queries.terms import PRESETS, Term, WorkloadTerms

from .exports import FigureExport
from .serving import COLOR as _COLOR
from .serving import LABEL as _LABEL
from .serving import LazyCard, button
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


class TermsTable(pn.widgets.Tabulator):
    """The Terms table, dropping a browser's edit of rows since changed (Panel 1.9 applied it
    to the new rows, after a clear reading text as dates: ``tests/test_browser_new_user.py``)."""

    def _process_data(self, data):
        rows = len(self.value)
        for values in data.values():
            stale = any(int(k) >= rows for k in values) if isinstance(values, dict) else len(values) != rows
            if stale:
                log.debug("Terms table: a browser edit of %s rows dropped (the table has %d)",
                          len(values), rows)
                return None
        return super()._process_data(data)


class WorkloadBuilder(param.Parameterized):
    """Edits ``session.workload`` (a new session if omitted) as a weighted union of terms.

    Starts over the 1D domain of the dataset's cells (else 256), adopting ``session.workload``
    when it is over it, else All Range.  :attr:`brush`: each box-select adds one range;
    :attr:`stats`: ``name, m, n, domain, l1, l2`` of the built workload.
    """

    URL_PARAMS = URL_PARAMS

    n = param.Integer(default=256, doc="""
        Size of the 1D domain (cells, 1 to MAX_N_1D = 65,536); used when `attributes` is empty.""")
    attributes = param.String(default="", doc="""
        Multi-attribute domain as name:size items, e.g. "age:50, income:100, sex:2";
        empty for a 1D domain of n cells.""")
    # the next term to add
    family = param.Selector(default="all_range", objects=list(wt.FAMILIES), doc="Family of the next term.")
    k = param.Integer(default=2, bounds=(0, wt.MAX_N), doc="""
        Width k of 'width_range', order k of 'marginals' and 'range_marginals'.""")
    m = param.Integer(default=2000, bounds=(1, wt.MAX_RANDOM), doc="Number of random ranges.")
    random_kind = param.Selector(default="uniform", objects=wt.RANDOM_KINDS, doc="""
        Random ranges: uniform over all intervals, or clustered (5 centres, std 256 / 1024).""")
    seed = param.Integer(default=0, bounds=(0, None), doc="Seed of the random ranges.")
    orders = param.String(default="", doc="""
        Orders of 'marginals' and 'range_marginals' terms as text, e.g. "0-3" (all 0- to
        3-way marginals) or "1, 2"; empty: the single order k.""")
    preset = param.Selector(default="cps_all_marginals", objects=list(PRESETS), doc="""
        Preset (a workload of the papers over a named schema) loaded by load_preset().""")
    range_kind = param.Selector(default="all_range", objects=["all_range", "prefix"], doc="""
        Ranges on the chosen attributes of range marginals: all ranges or prefixes.""")
    blocks = param.List(default=[], item_type=str, doc="Block type per attribute of 'product' terms.")
    weight = param.Number(default=1.0, doc="Weight (> 0) of the next term.")
    ranges_text = param.String(default="", doc="Custom ranges, e.g. '0-9, 20-29' (cells, inclusive).")
    predicates_text = param.String(default="", doc="Pasted 0/1 predicate matrix, one query per line.")
    spec_text = param.String(default="", doc="Pasted workload spec (JSON or YAML).")
    url_terms = param.List(default=[], precedence=-1, doc="""
        The terms as ``[[family, params, weight], ...]`` (URL key ``w``; empty when one cannot
        travel in a link); setting it rebuilds them.""")

    # outputs
    terms = param.List(default=[], constant=True, precedence=-1, doc="The terms of the union.")
    error = param.String(default="", constant=True, precedence=-1, doc="Last rejected input, or ''.")
    busy = param.Boolean(default=False, constant=True, precedence=-1, doc="True while building.")
    version = param.Integer(default=0, constant=True, precedence=-1, doc="+1 per change of the terms.")
    drawn = param.String(default="", constant=True, precedence=-1, doc="Heatmap of 'W', 'WᵀW' or ''.")
    spec_error = param.String(default="", constant=True, precedence=-1, doc="Why no spec, or ''.")

    def __init__(self, session: Session | None = None, **params):
        self.session = session if session is not None else Session()
        self._lock = threading.RLock()
        self._syncing = False
        self._domain: tuple[int, ...] = (256,)
        self._names: tuple[str, ...] = ()
        self._workload: Matrix | None = None
        self._hist_key: tuple | None = None
        self.stats: dict = {}
        self._layout = None
        default_n = self._dataset_cells()
        params.setdefault("n", default_n if default_n is not None else 256)
        super().__init__(**params)
        try:
            domain, names = wt.parse_domain(self.attributes, self.n)
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
        # a plain element, redrawn with a fresh stream: a BoundsX stream on a DynamicMap never
        # received the browser's box-select geometry (Panel 1.9/HoloViews 1.23)
        self._hist_pane = pn.pane.HoloViews(sizing_mode="stretch_width", height=240)
        self._redraw_histogram()
        self.session.param.watch(self._redraw_histogram, "dataset")
        self.param.watch(lambda e: self._redraw_histogram(if_changed=True), "version")

    @property
    def domain(self) -> tuple[int, ...]:
        """Attribute sizes of the current domain (``(n,)`` in 1D)."""
        return self._domain

    @property
    def attribute_names(self) -> tuple[str, ...]:
        """Attribute names of the current domain (empty in 1D)."""
        return self._names

    @property
    def state(self) -> WorkloadTerms:
        return WorkloadTerms(tuple(self.terms), self._domain, self._names)

    def _inputs(self) -> dict:
        """The controls a new term reads (:func:`dpexplorer.queries.terms.term_params`)."""
        return {"k": self.k, "m": self.m, "kind": self.random_kind, "seed": self.seed,
                "orders": self.orders, "range_kind": self.range_kind, "ranges": self.ranges_text,
                "matrix": self.predicates_text, "blocks": self.blocks}

    def _set(self, **values) -> None:
        with param.edit_constant(self):
            self.param.update(**values)

    def _set_quietly(self, **values) -> None:
        """Set parameters without rebuilding the workload from them."""
        syncing, self._syncing = self._syncing, True
        try:
            self.param.update(**values)
        finally:
            self._syncing = syncing

    def _fail(self, text: str) -> bool:
        """Report ``text`` (notification and :attr:`error`); ``False``."""
        self._set(error=text)
        self.session.report(text)
        return False

    def _dataset_cells(self) -> int | None:
        """Number of cells of the selected dataset when it is 1D (and not too large)."""
        try:
            x = self.session.data().x
        except Exception:  # noqa: BLE001 - dataset unavailable: fall back to 256
            return None
        return int(x.size) if x.ndim == 1 and 1 <= x.size <= wt.MAX_N else None

    def _commit(self, state: WorkloadTerms, what: str, workload: Matrix | None = None) -> bool:
        """Build ``state`` (with ``workload`` as its matrix, when adopting one) and make it
        current; on error keep everything and report ``what: why``."""
        with self._lock:
            try:
                with self._busy_if_slow():
                    built = state.build(workload)
            except Exception as exc:  # noqa: BLE001 - never raise into the UI
                if not isinstance(exc, ValueError):
                    log.exception("building the workload failed")
                return self._fail(f"{what}: {wt.message(exc)}")
            self._domain, self._names = built.domain, built.names
            if built.stats is not None:  # None after "Clear all": the last workload's stats stay
                self.stats = built.stats
            self._sync_params()
            if built.workload is not None and built.workload is not self.session.workload:
                self._workload = self.session.workload = built.workload
            self._workload = self.session.workload
            spec_error = self.spec_error if built.spec_error is None else built.spec_error
            self._set(terms=list(built.terms), error="", spec_error=spec_error, version=self.version + 1)
            self._sync_url_terms()
            return True

    @contextlib.contextmanager
    def _busy_if_slow(self):
        """:attr:`busy` once a build has run :data:`BUSY_AFTER` s: an overlay per build lost 1-3
        of 40 "Clear all" clicks (Playwright, two sessions, 2 cores)."""
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
        """Make ``term`` over ``shape`` (attributes ``names``) the whole workload; on error nothing
        changes and ``what: why`` is reported."""
        return self._commit(WorkloadTerms((term,), tuple(shape), tuple(names)), what)

    def _sync_url_terms(self) -> None:
        """Write the current terms into ``url_terms`` (without rebuilding them)."""
        text = wt.encode_terms(self.terms)
        if text != self.url_terms:
            self._set_quietly(url_terms=text)

    def _sync_params(self) -> None:
        """Show the committed domain in ``n``/``attributes`` and size ``blocks`` to it."""
        d = len(self._domain)
        values = {"attributes": dspec.format_attributes(self._domain, self._names)}
        if d == 1:
            values["n"] = self._domain[0]
        self._set_quietly(**values, blocks=(list(self.blocks) + ["identity"] * d)[:d])

    def _apply_link(self) -> bool:
        """Build the link's domain (``n``/``attributes``) and terms (``url_terms``) together."""
        what = "Workload from the link not used"
        try:
            domain, names = wt.parse_domain(self.attributes, self.n)
            terms = wt.terms_from_link(self.url_terms, self._inputs(), len(domain))
        except ValueError as exc:
            ok = self._fail(f"{what}: {wt.message(exc)}")
        else:
            ok = self._commit(WorkloadTerms(tuple(terms), domain, names), what)
        if not ok:
            self._sync_params()
            self._sync_url_terms()
        return ok

    def _adopt(self, W: Matrix) -> bool:
        """Make ``W`` (set on the session elsewhere) the builder's terms, keeping the object."""
        domain = tuple(int(n) for n in W.domain)
        attrs = getattr(W, "attributes", None)
        names = tuple(str(a) for a in attrs) if attrs is not None and len(attrs) == len(domain) else ()
        what = "Session workload not adopted"
        if self._commit(WorkloadTerms(tuple(wt.terms_from_matrix(W)), domain, names), what, workload=W):
            return True
        external = Term("external", {"name": W.name}, 1.0, W, domain)
        return self._commit(WorkloadTerms((external,), domain, names), what, workload=W)

    def _on_session_workload(self, event) -> None:
        if event.new is not None and event.new is not self._workload:
            self._adopt(event.new)

    def set_domain(self, n=None, attributes: str | None = None) -> bool:
        """Rebuild every term over ``n`` cells (``attributes`` "") or ``"name:size, ..."``; a bad
        domain or a term not fitting it is reported and everything is kept."""
        n = self.n if n is None else n
        attributes = self.attributes if attributes is None else attributes
        try:
            domain, names = wt.parse_domain(attributes, n)
        except ValueError as exc:
            self._sync_params()
            return self._fail(f"Domain not changed: {exc}")
        if (domain, names) == (self._domain, self._names):
            self._sync_params()
            return True
        if not self._commit(self.state.over(domain, names),
                            f"Domain not changed to {wt.describe_domain(domain, names)}"):
            self._sync_params()
            return False
        if self.large_domain_note():
            notify(self.large_domain_note(), "warning")
        return True

    def large_domain_note(self) -> str:
        """What the domain's size means for the pages ('' for a small one)."""
        return wt.large_domain_note(self._domain)

    @param.depends("n", "attributes", "url_terms", watch=True)
    def _on_domain_params(self) -> None:
        if self._syncing:
            return
        if self.url_terms and self.url_terms != wt.encode_terms(self.terms):
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

    def add_term(self, family: str | None = None, weight=None, **options) -> bool:
        """Add a term (``family`` of ``FAMILIES``, ``weight`` > 0; defaults: the parameters).

        ``options`` override the inputs for this term (:data:`dpexplorer.queries.terms.OPTIONS`);
        ``"ranges"`` appends to the one custom-ranges term, like a brush.
        """
        family = self.family if family is None else family
        unknown = sorted(set(options) - set(wt.OPTIONS))
        if unknown:
            return self._fail(f"Term not added: unknown option(s) {unknown}; allowed: {list(wt.OPTIONS)}")
        if family not in wt.FAMILIES:
            return self._fail(f"Term not added: unknown query family {family!r}; "
                              f"allowed: {list(wt.FAMILIES)}")
        what = f"Term not added ({wt.FAMILIES[family]})"
        try:
            w = wt.check_weight(self.weight if weight is None else weight)
            params = wt.term_params(family, options, self._inputs(), len(self._domain))
        except ValueError as exc:
            return self._fail(f"{what}: {wt.message(exc)}")
        if family == "ranges":
            return self.add_ranges(params["ranges"], weight=w)
        return self._commit(self.state.added(Term(family, params, w)), what)

    def _change(self, what: str, change, *args) -> bool:
        """Commit ``change(*args)`` (a method of the state); report ``what`` on error."""
        try:
            state = change(*args)
        except ValueError as exc:
            return self._fail(f"{what}: {wt.message(exc)}")
        return self._commit(state, what)

    def add_ranges(self, ranges, weight=None) -> bool:
        """Append cell intervals (``"0-9, 20-29"`` or pairs, inclusive) to the custom-ranges term."""
        weight = self.weight if weight is None else weight
        return self._change("Ranges not added", self.state.with_ranges, ranges, weight)

    def load_preset(self, name: str | None = None) -> bool:
        """Replace domain and terms by the papers' workload ``name`` (default ``preset``)."""
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
        return self._change("Weight not changed", self.state.reweighted, index, weight)

    def remove_term(self, index: int) -> bool:
        """Remove term ``index`` (0-based); ``True`` on success."""
        return self.remove_terms([index])

    def remove_terms(self, indices: Sequence[int]) -> bool:
        """Remove the terms at ``indices`` (0-based); all of them is :meth:`clear_terms`."""
        try:
            state = self.state.without(indices)
        except ValueError as exc:
            return self._fail(f"Term not removed: {wt.message(exc)}")
        return self._commit(state, "Term not removed") if state.terms else self.clear_terms()

    def clear_terms(self) -> bool:
        """Remove all terms; ``session.workload`` keeps the last one (the other pages need one)."""
        with self._lock:  # as every change of the terms: the views redraw one change at a time
            self._set(terms=[], error="", version=self.version + 1)
            self._sync_url_terms()
        return True

    def _on_brush(self, boundsx=None, **_) -> None:
        try:
            if boundsx is not None:
                self.add_brush(*boundsx)
        except Exception as exc:  # noqa: BLE001 - never raise into the UI
            log.exception("brush failed")
            self._fail(f"Brushed range not added: {wt.message(exc)}")

    def add_brush(self, x0: float, x1: float) -> bool:
        """Add the cells under a brushed span ``[x0, x1]`` (histogram units) as one range."""
        what = "Brushed range not added"
        try:
            ds = self.session.data()
        except Exception as exc:  # noqa: BLE001
            return self._fail(f"{what}: no data histogram ({wt.message(exc)})")
        if ds.x.ndim != 1:
            return self._fail(f"{what}: brushing adds 1D ranges, but the dataset "
                              f"{ds.name!r} is {ds.x.shape}; select a 1D dataset or type the ranges")
        cells = ds.x.size
        if self._domain != (cells,):
            return self._fail(f"{what}: the histogram has {cells} cells but the domain "
                              f"is {wt.describe_domain(self._domain, self._names)}; set n = {cells} "
                              f"('Use the dataset's size') to brush ranges")
        try:
            cell_range = wt.brush_cells(ds.edges[0], x0, x1)
        except ValueError as exc:
            return self._fail(f"{what}: {exc}")
        return self.add_ranges([cell_range])

    def load_spec(self, text, filename: str | None = None) -> bool:
        """Replace the terms by one "from spec" term of JSON/YAML ``text`` (str, or UTF-8 bytes;
        ``filename``'s extension fixes the format, else JSON then YAML)."""
        what = f"Spec not loaded{f' from {filename!r}' if filename else ''}"
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
            W = wt.spec_workload(text, wt.spec_format(filename))
        except Exception as exc:  # noqa: BLE001 - parse errors, invalid specs
            if not isinstance(exc, ValueError):
                log.exception("loading a spec failed")
            return self._fail(f"{what}: {wt.message(exc)}")
        domain = tuple(int(n) for n in W.domain)
        attrs = getattr(W, "attributes", None)
        term = Term("spec", {"name": W.name, "spec": dspec.to_spec(W)}, 1.0, W, domain)
        return self._commit(WorkloadTerms((term,), domain, tuple(attrs) if attrs is not None else ()), what)

    def load_spec_file(self, data: bytes, filename: str | None = None) -> bool:
        """:meth:`load_spec` for an uploaded file's bytes."""
        return self.load_spec(data if data is not None else b"", filename or "uploaded file")

    def export_spec(self, format: str = "json") -> str | None:
        """``session.workload``'s spec as JSON or YAML text (None, reported, on error)."""
        W = self.session.workload
        try:
            if W is None:
                raise ValueError("there is no workload yet")
            return dspec.dumps(W, format)
        except Exception as exc:  # noqa: BLE001
            self._fail(f"Spec not exported: {wt.message(exc)}")
            return None

    def _download(self, fmt: str) -> io.StringIO:
        text = self.export_spec(fmt)
        if text is None:
            text = f"# the workload cannot be written as a spec: {self.error}\n"
        return io.StringIO(text)

    def load_predicates(self, data, filename: str | None = None, weight=None) -> bool:
        """Add a predicates term from an uploaded file (``.npy`` or CSV/text of 0/1) or text."""
        try:
            M = wt.parse_matrix(data, filename)
        except ValueError as exc:
            where = f" from {filename!r}" if filename else ""
            return self._fail(f"Predicates not added{where}: {wt.message(exc)}")
        return self.add_term("predicates", weight=weight, matrix=M)

    def heatmap_data(self) -> tuple[str, np.ndarray | None, str]:
        """What the heatmap draws (:func:`dpexplorer.queries.terms.heatmap_data`)."""
        return wt.heatmap_data(self.session.workload)

    def heatmap(self, data: tuple | None = None):
        """The ``hv.Image`` of W or WᵀW (sets :attr:`drawn`), or an Alert when too large."""
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
            text = (f"**Structure instead:** the workload is a union of weighted Kronecker products "
                    f"(one 1D block per attribute; attributes with Total are omitted); {shown}:")
            table = pn.widgets.Tabulator(frame, show_index=False, disabled=True,
                                         height=min(400, 80 + 36 * len(frame)),
                                         sizing_mode="stretch_width", layout="fit_data_stretch")
            return pn.Column(alert, pn.pane.Markdown(text, sizing_mode="stretch_width"), table,
                             sizing_mode="stretch_width")
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
        """The workload's products: ``weight, product, queries``."""
        return wt.structure_frame(self.session.workload, self._names, limit)

    def _heatmap_panes(self) -> pn.Column:
        """The heatmap (note, plot, Alert box), updated in place by a watcher of ``version``.

        A bound method broke merged updates (2-7 browser errors in 15 rounds of Add term, Add
        term, Clear all, 2 cores: ``tests/test_browser_new_user.py -k forty``); one figure fed
        by a Pipe took 10 rounds 12.3 s of JavaScript, 29.2 s with a new figure per change.
        """
        note = pn.pane.Markdown("", styles={"font-size": "0.9em"}, margin=(0, 10),
                                sizing_mode="stretch_width")
        data = self.heatmap_data()
        out = self.heatmap(data)
        # the first frame: a 1 × 1 placeholder while the workload is too large (the plot hidden)
        blank = hv.Image(np.zeros((1, 1)), bounds=(0, 0, 1, 1)).opts(
            framewise=True, responsive=True, min_height=320, max_height=520)
        frames = hv.streams.Pipe(data=out if isinstance(out, hv.Element) else blank)
        # cache_size=1: a DynamicMap keeps its last 500 frames (images of up to 200,000 entries)
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

    def _redraw_histogram(self, *_, if_changed: bool = False) -> None:
        """Draw the data histogram with a new box-select stream (``if_changed``: only if its
        domain or custom ranges changed)."""
        key = (self._domain, tuple(self.custom_ranges()))
        if if_changed and key == self._hist_key:
            return
        self._hist_key = key
        element = self._histogram()
        old = getattr(self, "brush", None)
        if old is not None:
            old.clear()
        self.brush = hv.streams.BoundsX(source=element, boundsx=None)
        self.brush.add_subscriber(self._on_brush)
        self._hist_pane.object = element

    def _histogram(self):
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
            title = f"No data histogram: {wt.message(exc)}"
        hist = hv.Histogram((edges, x), kdims=[hv.Dimension("x", label=label)],
                            vdims=[hv.Dimension("count")]).opts(
            tools=["xbox_select", "hover"], active_tools=["xbox_select"], responsive=True,
            height=220, color="#6d904f", line_color=None, title=title, fontsize={"title": "9pt"})
        shade = hv.VSpans(spans, kdims=[hv.Dimension("x", label=label), "x1"]).opts(
            color="#ff7f0e", alpha=0.25)
        return hist * shade

    # ================================================================= UI
    def terms_frame(self) -> pd.DataFrame:
        """``term, queries, weight``, the same columns and dtypes with no term (updated in place)."""
        return pd.DataFrame({
            "term": pd.Series([t.label for t in self.terms], dtype=object),
            "queries": pd.Series([t.matrix.m if t.matrix is not None else 0 for t in self.terms],
                                 dtype="int64"),
            "weight": pd.Series([float(t.weight) for t in self.terms], dtype="float64")})

    def summary(self) -> str:
        """Markdown: domain, m, n, L1 and L2 sensitivity of the workload, and any mismatch."""
        return wt.summary_text(self.stats, self.state, self.session.workload, self.session.dataset,
                            self._dataset_cells(), self.session.table)

    def _controls(self) -> pn.Column:
        w, p = pn.widgets, self.param

        def shown(*families):
            return pn.bind(lambda f: f in families, p.family)

        def field(cls, parameter, label=None, *families, **kw):
            if label:
                kw[_LABEL] = label
            if families:
                kw["visible"] = shown(*families)
            return cls.from_param(parameter, **kw)

        domain = pn.Card(
            field(w.IntInput, p.n, f"1D domain size n (1..{wt.MAX_N_1D:,})",
                  disabled=pn.bind(bool, p.attributes)),
            field(w.TextInput, p.attributes, "Attributes (name:size, …)",
                  placeholder="age:50, income:100, sex:2 (empty: 1D)"),
            button("Use the dataset's size", "light", self.use_dataset_size),
            title="Domain", sizing_mode="stretch_width")
        presets = LazyCard(
            field(w.Select, p.preset, "Schema and workload",
                  options={v.label: k for k, v in PRESETS.items()}),
            pn.pane.Markdown(pn.bind(lambda k: f"*{PRESETS[k].source}*", p.preset),
                             sizing_mode="stretch_width", styles={"font-size": "85%"}),
            button("Load preset (replaces the terms)", "primary", self.load_preset),
            title="Presets (papers' schemas)", sizing_mode="stretch_width", collapsed=True)

        random = ("random_ranges", "product")
        pred_file = Upload(accepted_filetypes=[".npy", ".csv", ".txt"], visible=shown("predicates"),
                           on_file=lambda data, name: self.load_predicates(data, name),
                           on_error=self.session.report)
        # the block types of a product term: one Select per attribute, rebuilt when the domain
        # changes (not by a bound function: see _heatmap_panes)
        blocks = pn.Column(visible=shown("product"), sizing_mode="stretch_width")
        drawn_for: list = [None]

        def refresh_blocks(*_):
            if (self._domain, self._names) != drawn_for[0]:
                drawn_for[0] = (self._domain, self._names)
                blocks.objects = self._block_selectors()
        refresh_blocks()
        self.param.watch(refresh_blocks, "version")
        adder = pn.Card(
            field(w.Select, p.family, "Query family", options={v: k for k, v in wt.FAMILIES.items()}),
            blocks,
            field(w.IntInput, p.k, "k (width / marginal order)",
                  "width_range", "marginals", "range_marginals", "product"),
            field(w.TextInput, p.orders, "Orders (e.g. 0-3 or 1, 2; empty: k)",
                  "marginals", "range_marginals", placeholder="0-3"),
            field(w.IntInput, p.m, "m (number of ranges)", *random),
            field(w.Select, p.random_kind, "Random ranges", *random),
            field(w.IntInput, p.seed, "Seed", *random),
            field(w.RadioButtonGroup, p.range_kind, None, "range_marginals"),
            field(w.TextInput, p.ranges_text, "Ranges (cells lo-hi)", "ranges", "product",
                  placeholder="0-9, 20-29"),
            field(w.TextAreaInput, p.predicates_text, "0/1 matrix (one query per line)",
                  "predicates", placeholder="1 1 0 0\n0 1 1 1", height=100),
            pred_file, pred_file.note(visible=shown("predicates")),
            field(w.FloatInput, p.weight, "Weight (> 0)", step=0.5),
            button("Add term", "primary", self.add_term),
            title="Add a term", sizing_mode="stretch_width")

        downloads = [w.FileDownload(callback=lambda f=fmt: self._download(f),
                                    filename=f"workload.{fmt}", label=f"Download {fmt.upper()}",
                                    disabled=pn.bind(bool, p.spec_error), **{_COLOR: "success"})
                     for fmt in ("json", "yaml")]
        why = pn.pane.Markdown(pn.bind(lambda e: f"*Not expressible as a spec:* {e}" if e else "",
                                       p.spec_error), sizing_mode="stretch_width")
        upload = Upload(accepted_filetypes=[".json", ".yaml", ".yml"],
                        max_bytes=upload_limit("spec_bytes"),
                        on_file=self.load_spec_file, on_error=self.session.report)
        text = field(w.TextAreaInput, p.spec_text, "Paste a spec (JSON or YAML)", height=140,
                     placeholder='{"domain": [256], "products": [{"weight": 1, "factors": ["prefix"]}]}')

        def copy_spec():
            out = self.export_spec("yaml")
            if out is not None:
                self.spec_text = out
        specs = LazyCard(pn.Row(*downloads), why, pn.pane.Markdown("**Load a spec file**"),
                         upload, upload.note(), text,
                         pn.Row(button("Load pasted spec", "primary",
                                        lambda: self.load_spec(self.spec_text)),
                                button("Copy current spec here", "light", copy_spec)),
                         title="Import / export spec", sizing_mode="stretch_width", collapsed=True)
        return pn.Column(domain, presets, self.tables.panel(), adder, specs, width=360)

    def _block_selectors(self) -> list[pn.widgets.Select]:
        """One block-type Select per attribute (product terms)."""
        names = self._names or tuple(f"a{i + 1}" for i in range(len(self._domain)))
        selects = []
        for i, (name, n) in enumerate(zip(names, self._domain, strict=True)):
            value = self.blocks[i] if i < len(self.blocks) else "identity"
            sel = pn.widgets.Select(**{_LABEL: f"{name} ({n})"}, options=wt.BLOCK_TYPES, value=value)

            def pick(event, i=i):
                blocks = list(self.blocks)
                blocks[i] = event.new
                self.blocks = blocks
            sel.param.watch(pick, "value")
            selects.append(sel)
        return selects

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
        # one table, its value set in place (same columns and dtypes) on every change of the
        # terms, one change at a time (under the builder's lock)
        self.param.watch(lambda e: setattr(tab, "value", self.terms_frame()), "version")

        def remove():
            if tab.selection:
                return self.remove_terms(list(tab.selection))
            return self._fail("Term not removed: select the terms to remove first (checkboxes)")
        # the buttons above the table: they stay put as it grows and shrinks (a click aimed
        # below a table being redrawn landed on the table)
        buttons = pn.Row(pn.pane.Markdown("### Terms (union)"),
                         button("Remove selected", "warning", remove),
                         button("Clear all", "danger", self.clear_terms), align="center")
        return pn.Column(buttons, tab, sizing_mode="stretch_width")

    def panel(self) -> pn.Column:
        """The whole page (built once)."""
        if self._layout is not None:
            return self._layout
        summary = pn.pane.Markdown(pn.bind(lambda v, d: self.summary(), self.param.version,
                                           self.session.param.dataset), sizing_mode="stretch_width")
        hist = self._hist_pane
        self.exports: dict = {}

        def heatmap_now():
            out = self.heatmap()
            return out if isinstance(out, hv.Element) else None

        def export(name, figure):
            return FigureExport("workload", name, figure, report=self.session.report, into=self.exports)
        # the terms first: the summary above them would move their buttons as its lines change
        heat = self._heatmap_panes()  # before the table: its watcher of `version` runs first
        main = pn.Column(self._terms_table(), summary, heat,
                         export("heatmap", heatmap_now),
                         pn.pane.Markdown("### Brush custom ranges on the data"), hist,
                         export("data-histogram", lambda: hist.object),
                         sizing_mode="stretch_width", loading=self.param.busy)
        alert = error_alert(self.param.error, "**Input rejected, your workload is unchanged.**")
        self._layout = pn.Column(pn.pane.Markdown(HEADER, sizing_mode="stretch_width"), alert,
                                 side_by_side(self._controls(), main), sizing_mode="stretch_width")
        return self._layout

    def __panel__(self):
        return self.panel()
