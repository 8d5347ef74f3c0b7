"""WorkloadBuilder: the "Workload builder" page.

Build the workload ``W`` of the session (:attr:`Session.workload`) as a
weighted union of *terms*; every term is a family of linear counting queries
over the current domain:

* 1D families (identity, total, identity + total, prefix, all ranges, ranges
  of width k, DAWA's random ranges, custom ranges); over a multi-attribute
  domain such a family is applied to *every* attribute (a Kronecker product,
  e.g. Prefix ⊗ Prefix);
* ``product``: one 1D block per attribute, chosen attribute by attribute
  (HDMM's products, e.g. Prefix ⊗ Identity ⊗ Total);
* marginals and range marginals by order (multi-attribute domains): one
  order ``k`` or several, e.g. ``orders="0-3"`` for all 0- to 3-way
  marginals (HDMM Sec. 11.2), and prefix-marginals (``range_kind="prefix"``);
* predicates: a pasted or uploaded 0/1 matrix;
* custom ranges brushed on the data histogram (a
  :class:`holoviews.streams.BoundsX` stream; each brush adds one interval);
* a workload loaded from a declarative spec (:mod:`dpexplorer.queries.spec`);
* presets of the papers' schemas (:data:`PRESETS`, :meth:`WorkloadBuilder.load_preset`):
  CPS (income 50, age 100, marital 7, race 4, sex 2) with All Marginals
  ``⊗ [I; 1ᵀ]`` and All Prefix-Marginals ``[P50, P100, M7, M4, M2]``, and
  Adult (14 attributes, 6.4·10¹⁷ cells) with all 0–3-way marginals.

Domains have up to :data:`MAX_ATTRIBUTES` attributes and :data:`MAX_CELLS`
cells: workloads over them stay implicit (Kronecker products), their
sensitivities come from the factors (:func:`workload_sensitivity`), and no
``n × n`` preview is drawn beyond :data:`GRAM_MAX_N` cells -- the page says
why and lists the workload's products instead.

The terms are combined by :func:`dpexplorer.queries.workloads.union` with one weight
per term.  The component is a :class:`param.Parameterized` driven without a
browser through its methods (:meth:`WorkloadBuilder.add_term`,
:meth:`~WorkloadBuilder.add_ranges`, :meth:`~WorkloadBuilder.add_brush`,
:meth:`~WorkloadBuilder.set_weight`, :meth:`~WorkloadBuilder.remove_term`,
:meth:`~WorkloadBuilder.clear_terms`, :meth:`~WorkloadBuilder.set_domain`,
:meth:`~WorkloadBuilder.load_spec`, :meth:`~WorkloadBuilder.export_spec`,
:meth:`~WorkloadBuilder.load_preset`)::

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

import io
import json
import logging
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePath

import holoviews as hv
import holoviews.plotting.bokeh  # noqa: F401  (registers the bokeh backend for .opts)
import numpy as np
import pandas as pd
import panel as pn
import param

import dpexplorer as dpx
from dpexplorer.queries import spec as dspec
from dpexplorer.queries.matrix import Matrix, MatrixTooLargeError
from dpexplorer.queries.spec import parse_orders, parse_ranges, parse_whole

from .exports import FigureExport
from .serving import LazyCard
from .session import Session, error_alert, notify, side_by_side
from .table_workload import TableMarginals
from .uploads import Upload, size_text, upload_limit

__all__ = [
    "WorkloadBuilder",
    "Term",
    "URL_PARAMS",
    "FAMILIES",
    "BLOCK_TYPES",
    "parse_domain",
    "parse_matrix",
    "workload_sensitivity",
    "Preset",
    "PRESETS",
]

log = logging.getLogger(__name__)

#: Largest attribute size of a multi-attribute domain: W or WᵀW of a factor can always be drawn.
MAX_N = 4096
#: Largest 1D domain: workloads of ranges, prefixes, identity and total are compared up to this
#: size without n × n matrices (:data:`dpexplorer.ui.compare_view.STRUCTURED_MAX_CELLS`); other
#: 1D workloads above :data:`MAX_N` cells are built but refused by the Compare and Strategy pages.
MAX_N_1D = 2**16
#: Largest number of attributes of a multi-attribute domain (Adult, HDMM Sec. 11.2, has 14).
MAX_ATTRIBUTES = 16
#: Largest number of cells of a multi-attribute domain (Adult has 6.4·10¹⁷; the cell count must
#: fit a signed 64-bit integer).  Workloads over such domains stay implicit (Kronecker products):
#: nothing of size n is ever materialised by the builder.
MAX_CELLS = 10**18
#: Up to this many cells the sensitivity is the largest column norm computed cell by cell;
#: above, it is computed from the Kronecker factors (see :func:`workload_sensitivity`).
SENSITIVITY_CELLS = 2**22
#: Largest number of products listed in the structure table of a large workload.
MAX_PRODUCTS_SHOWN = 40
#: Largest number of random ranges in one term.
MAX_RANDOM = 1_000_000
#: Largest predicate matrix (entries).
MAX_PREDICATE_ENTRIES = 4_000_000
#: W itself is drawn up to this many entries, else WᵀW.
HEATMAP_ENTRIES = 200_000
#: WᵀW is drawn up to this many cells (n × n); beyond, a message is shown.
GRAM_MAX_N = 4096
#: A drawn WᵀW is averaged down to at most this many pixels per side.
HEATMAP_PIXELS = 512

#: Parameters of the builder synced to the URL: parameter -> query-string key.
URL_PARAMS = {"n": "n", "attributes": "attrs", "url_terms": "w"}

#: Longest workload a link carries (characters of its JSON); larger ones are not linked.
MAX_URL_TERMS = 4000

#: Query families a term can be built from: key -> label.
FAMILIES = {
    "identity": "Identity (one query per cell)",
    "total": "Total (sum of all cells)",
    "identity_total": "Identity + total",
    "prefix": "Prefix (CDF)",
    "all_range": "All ranges",
    "width_range": "Ranges of width k",
    "random_ranges": "Random ranges (DAWA)",
    "ranges": "Custom ranges (typed or brushed)",
    "predicates": "Predicates (0/1 matrix)",
    "product": "Product: one block per attribute",
    "marginals": "k-way marginals",
    "range_marginals": "k-way range marginals",
}

#: 1D blocks a family term or a product factor can use (named blocks of dpexplorer.queries.workloads).
BLOCK_TYPES = ["identity", "total", "identity_total", "prefix", "all_range", "width_range",
               "random_ranges", "ranges"]

_RANDOM_KINDS = ["uniform", "clustered", "large_clustered"]
_OPTIONS = ("k", "orders", "m", "kind", "seed", "range_kind", "ranges", "matrix", "blocks")

# Widget captions: ``label`` since Panel 1.9 (``name`` is deprecated there), ``name`` before.
_LABEL = "label" if "label" in pn.widgets.IntInput.param else "name"
# Button colours: ``color`` since Panel 1.9 (``button_type`` is deprecated there).
_COLOR = "color" if "color" in pn.widgets.Button.param else "button_type"

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


# ====================================================================== parsing
def _check_n(n, what: str = "the domain size n", limit: int = MAX_N) -> int:
    n = parse_whole(n, what)
    if n < 1:
        raise ValueError(f"{what} must be at least 1 cell, got {n}; allowed: 1 to {limit:,}")
    if n > limit:
        why = ("so that strategies can be compared" if limit == MAX_N_1D else
               "so that W (or WᵀW) can be drawn and strategies built")
        raise ValueError(f"{what} = {n:,} cells is too large: sizes are limited to {limit:,} cells "
                         f"{why}; use fewer cells")
    return n


def parse_domain(attributes: str = "", n=256) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The domain ``(sizes, names)`` given by the attributes text or the 1D size ``n``.

    Parameters
    ----------
    attributes : str
        ``"age:50, income:100, sex:2"`` (``name:size`` or ``name=size`` items
        separated by commas, semicolons or new lines; a bare size gets the name
        ``a<i>``).  Empty: a 1D domain of ``n`` cells without a name.
    n : int
        Size of the 1D domain when ``attributes`` is empty, 1 to :data:`MAX_N_1D`.

    Returns
    -------
    (tuple of int, tuple of str)
        Attribute sizes and names (names empty for an unnamed 1D domain).

    Raises
    ------
    ValueError
        For a size that is not a whole number in ``[1, MAX_N_1D]`` (1D) or ``[1, MAX_N]``
        (an attribute), a bad item,
        duplicate names, more than :data:`MAX_ATTRIBUTES` attributes or more
        than :data:`MAX_CELLS` cells in all.
    """
    text = (attributes or "").strip()
    if not text:
        return (_check_n(n, limit=MAX_N_1D),), ()
    sizes, names = dspec.parse_attributes(text)  # the spec's text form of a domain
    sizes = [_check_n(size, f"the size of attribute {name!r}") for size, name in zip(sizes, names, strict=True)]
    if len(sizes) > MAX_ATTRIBUTES:
        raise ValueError(f"{len(sizes)} attributes given; at most {MAX_ATTRIBUTES} are allowed")
    cells = math.prod(sizes)
    if cells > MAX_CELLS:
        raise ValueError(f"the domain {' × '.join(map(str, sizes))} has {cells:,} cells; at most "
                         f"{MAX_CELLS:,} are allowed")
    return tuple(sizes), tuple(names)


def _describe_domain(domain: Sequence[int], names: Sequence[str]) -> str:
    if names and len(names) == len(domain):
        return " × ".join(f"{a} ({n})" for a, n in zip(names, domain, strict=True))
    return " × ".join(str(n) for n in domain)


def parse_matrix(data, filename: str | None = None) -> np.ndarray:
    """A 2D numeric array from pasted text, an uploaded file's bytes, or an array.

    Text: one row per line (or ``;``), entries separated by commas or spaces,
    or a JSON list of lists.  Files: ``.npy`` (no pickles), else text/CSV.

    Raises
    ------
    ValueError
        If nothing can be read, rows have different lengths, an entry is not a
        number, or the matrix has more than :data:`MAX_PREDICATE_ENTRIES` entries.
    """
    if isinstance(data, bytes | bytearray):
        dpx.limits.check("upload_bytes", len(data), "the predicates file: bytes")
        if (filename or "").lower().endswith(".npy") or bytes(data[:6]) == b"\x93NUMPY":
            try:
                arr = np.load(io.BytesIO(bytes(data)), allow_pickle=False)
            except Exception as exc:  # noqa: BLE001 - any unreadable file
                raise ValueError(f"cannot read the .npy file: {exc}") from None
            return _check_matrix_array(arr)
        try:
            data = bytes(data).decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ValueError("the file is neither a .npy array nor UTF-8 text (CSV of 0/1)") from None
    if not isinstance(data, str):
        return _check_matrix_array(np.asarray(data))
    text = data.strip()
    if not text:
        raise ValueError("no matrix given: paste one query per line, 0/1 entries separated by "
                         "commas or spaces, e.g. 1 1 0 0 / 0 1 1 1")
    if text.startswith("["):
        try:
            return _check_matrix_array(np.asarray(json.loads(text), dtype=float))
        except (json.JSONDecodeError, ValueError, TypeError) as exc:
            raise ValueError(f"cannot read the matrix as a JSON list of rows: {exc}") from None
    rows = [r.strip() for r in re.split(r"[\n;]+", text) if r.strip()]
    parsed = []
    for i, row in enumerate(rows):
        entries = [e for e in re.split(r"[,\s]+", row) if e]
        try:
            parsed.append([float(e) for e in entries])
        except ValueError:
            bad = next(e for e in entries if not _is_float(e))
            raise ValueError(f"row {i + 1}: {bad!r} is not a number; predicate entries are 0 or 1") from None
        if len(parsed[-1]) != len(parsed[0]):
            raise ValueError(f"row {i + 1} has {len(parsed[-1])} entries but row 1 has "
                             f"{len(parsed[0])}; every query needs one entry per cell")
    return _check_matrix_array(np.asarray(parsed, dtype=float))


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def workload_sensitivity(W: Matrix, p: int = 1) -> tuple[float, bool]:
    """The L1 (``p=1``) or L2 (``p=2``) sensitivity of ``W`` and whether it is exact.

    The sensitivity is the largest column norm (docs topic "noise").  Up to
    :data:`SENSITIVITY_CELLS` cells (or when ``W`` is not a union of
    Kronecker products) it is ``W.sensitivity(p)``.  Above, for
    ``W = ∪_j w_j (W_j1 ⊗ … ⊗ W_jd)``, the column of cell ``(c_1, …, c_d)``
    has norm ``Σ_j |w_j| Π_i ‖W_ji[:, c_i]‖₁`` (L1) or
    ``(Σ_j w_j² Π_i ‖W_ji[:, c_i]‖₂²)^½`` (L2): column norms of a Kronecker
    product multiply (HDMM Thm 14) and a union stacks rows.
    When, for every attribute, one cell maximises the factor norms of every
    product at once (marginals, prefix-marginals, products of ranges), the
    maximum is at that cell and the value is exact, computed without any
    vector of ``n`` entries (Adult has 6.4·10¹⁷ cells).  Otherwise the sum of
    the products' maxima is returned, an upper bound, with ``False``.

    Parameters
    ----------
    W : Matrix, shape (m, n)
    p : {1, 2}

    Returns
    -------
    (float, bool)
        The sensitivity (counts per record) and whether it is exact.

    Raises
    ------
    ValueError
        If ``p`` is not 1 or 2, or ``W`` has more than
        :data:`SENSITIVITY_CELLS` cells and is not a union of Kronecker
        products.
    """
    if p not in (1, 2):
        raise ValueError(f"p must be 1 (L1) or 2 (L2), got {p!r}")
    if W.n <= SENSITIVITY_CELLS:
        return float(W.sensitivity(p)), True
    terms = dpx.error.kron_terms(W)
    if terms is None or any(len(f) != len(terms[0][1]) for _, f in terms):
        raise ValueError(f"{W.n:,} cells are too many to compute the column norms cell by cell, "
                         f"and the workload is not a union of Kronecker products")
    cache: dict[int, np.ndarray] = {}

    def norms(f):
        if id(f) not in cache:
            cache[id(f)] = np.asarray(f.column_norms(p), dtype=float)
        return cache[id(f)]

    d = len(terms[0][1])
    cell, exact = [], True
    for i in range(d):
        common = None
        for _, factors in terms:
            v = norms(factors[i])
            top = np.isclose(v, v.max(), rtol=1e-12, atol=0.0)
            common = top if common is None else common & top
        if not common.any():
            exact = False
            break
        cell.append(int(np.flatnonzero(common)[0]))
    total = 0.0
    for w, factors in terms:
        vals = [norms(f)[c] for f, c in zip(factors, cell, strict=True)] if exact else \
               [norms(f).max() for f in factors]
        total += abs(w) * math.prod(vals) if p == 1 else w * w * math.prod(v * v for v in vals)
    return (total if p == 1 else math.sqrt(total)), exact


@dataclass(frozen=True)
class Preset:
    """A workload of the papers over a named multi-attribute schema.

    Attributes
    ----------
    label : str
        Shown in the presets selector.
    attributes : str
        The domain as ``name:size`` items (:func:`parse_domain`).
    terms : tuple of (family, params, weight)
        The builder terms of the workload.
    source : str
        Where the schema and the workload come from.
    """

    label: str
    attributes: str
    terms: tuple
    source: str


#: CPS schema of HDMM Sec. 11.2 (sizes 50, 100, 7, 4, 2; income and age are numeric).
CPS = "income:50, age:100, marital:7, race:4, sex:2"
#: Adult schema of HDMM Sec. 11.2 (sizes only in the paper: the 5 numeric attributes first,
#: then the 9 categorical ones; the names are ours, from the UCI Adult columns of those sizes).
ADULT = ("capital_gain:100, capital_loss:100, fnlwgt:100, hours_per_week:99, age:85, "
         "native_country:42, education:16, occupation:15, workclass:9, marital_status:7, "
         "relationship:6, race:5, sex:2, income:2")

#: Presets of the papers' multi-attribute workloads: key -> :class:`Preset`.
PRESETS = {
    "cps_all_marginals": Preset(
        "CPS: All Marginals (⊗ [I; 1ᵀ])", CPS, (("identity_total", {}, 1.0),),
        "HDMM Sec. 11.2 and Tables 6–7: ⊗ᵢ [I; 1ᵀ] holds all 2⁵ = 32 marginals "
        "(Identity RMSE 5.38, SVD bound 2.63 for Laplace ε = 1, HDMM Table 6)"),
    "cps_all_prefix_marginals": Preset(
        "CPS: All Prefix-Marginals ([P50, P100, M7, M4, M2])", CPS,
        (("product", {"factors": [{"type": "prefix"}, {"type": "prefix"},
                                  {"type": "identity_total"}, {"type": "identity_total"},
                                  {"type": "identity_total"}]}, 1.0),),
        "HDMM Example 7, Sec. 11.2 and Tables 6–7: Prefix on the numeric attributes (its last "
        "query is the total), M = [I; 1ᵀ] on the others (Identity RMSE 98.06, SVD bound 9.32 "
        "for Laplace ε = 1)"),
    "adult_marginals": Preset(
        "Adult: all 0–3-way marginals", ADULT, (("marginals", {"k": [0, 1, 2, 3]}, 1.0),),
        "HDMM Sec. 11.2 and Tables 6–7 ('3D Marginals': the 470 marginals on at most 3 of the "
        "14 attributes; Identity RMSE 5,352,117.26 for Laplace ε = 1)"),
}


def _check_matrix_array(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"the matrix must hold numbers 0/1, got dtype {arr.dtype}")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"the matrix must be a non-empty 2D array (queries × cells), got shape {arr.shape}")
    if arr.size > MAX_PREDICATE_ENTRIES:
        raise ValueError(f"the matrix has {arr.size:,} entries; at most {MAX_PREDICATE_ENTRIES:,} are allowed")
    return np.asarray(arr, dtype=float)


def _message(exc: BaseException) -> str:
    """A user-facing message for an exception (ValueError text as is)."""
    if isinstance(exc, ValueError):
        return str(exc).replace("WorkloadBuilder.", "")
    return f"{type(exc).__name__}: {exc}"


# ======================================================================== link
def _encode_terms(terms) -> list:
    """``terms`` as ``[[family, params, weight], ...]`` for a link; ``[]`` if one cannot travel."""
    items = []
    for t in terms:
        if t.family not in FAMILIES:
            return []
        params = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in t.params.items()}
        items.append([t.family, params, t.weight])
    try:
        text = json.dumps(items, separators=(",", ":"))
    except (TypeError, ValueError):
        return []
    return json.loads(text) if items and len(text) <= MAX_URL_TERMS else []


def _options_from_params(family: str, params: dict) -> dict:
    """The builder's input options that make a term with ``params`` (a link's, unchecked)."""
    p = dict(params)
    if family == "width_range":
        return {"k": p.get("w")}
    if family in ("marginals", "range_marginals"):
        k = p.get("k")
        options = {"orders": k} if isinstance(k, list) else {"k": k}
        if family == "range_marginals":
            options["range_kind"] = p.get("kind")
        return options
    if family == "product":
        factors = p.get("factors")
        if not isinstance(factors, list) or not all(isinstance(f, dict) for f in factors):
            raise ValueError("a product term needs a list of factors")
        options = {"blocks": [f.get("type") for f in factors]}
        for f in factors:
            options.update(_options_from_params(f.get("type"), f) if f.get("type") in (
                "width_range",) else {k: v for k, v in f.items() if k in ("m", "kind", "seed")})
        return options
    if family == "predicates":
        return {"matrix": np.asarray(p.get("matrix"), dtype=float)}
    return {k: v for k, v in p.items() if k in ("m", "kind", "seed", "ranges")}


# ======================================================================== terms
@dataclass(eq=False)
class Term:
    """One weighted family of queries of the union.

    Attributes
    ----------
    family : str
        A key of :data:`FAMILIES`, or ``"spec"`` (loaded from a spec) or
        ``"external"`` (a workload set on the session by another page).
    params : dict
        Parameters of the family: the block parameters (``w``; ``m``, ``kind``,
        ``seed``; ``ranges``; ``matrix``), ``factors`` (block specs of a
        product), ``k`` and ``kind`` (marginals), ``spec`` (a spec term).
    weight : float
        Positive weight of the term in the union.
    matrix : Matrix or None
        The term built for :attr:`domain` (set by the builder).
    domain : tuple of int or None
        The domain :attr:`matrix` was built for.
    """

    family: str
    params: dict = field(default_factory=dict)
    weight: float = 1.0
    matrix: Matrix | None = field(default=None, repr=False, compare=False)
    domain: tuple[int, ...] | None = None

    def __eq__(self, other) -> bool:
        if not isinstance(other, Term):
            return NotImplemented
        return (self.family == other.family and self.weight == other.weight
                and self.domain == other.domain and _same_params(self.params, other.params))

    @property
    def label(self) -> str:
        """Short description shown in the terms table."""
        f, p = self.family, self.params
        if f == "width_range":
            return f"Ranges of width {p.get('w')}"
        if f == "random_ranges":
            return f"Random ranges ({p.get('kind', 'uniform')}, m={p.get('m', 2000)}, seed {p.get('seed', 0)})"
        if f == "ranges":
            iv = p.get("ranges", [])
            return f"Custom ranges ({len(iv)}): {dspec.format_ranges(iv, 4)}"
        if f == "predicates":
            return f"Predicates ({np.shape(p.get('matrix'))[0]} queries)"
        if f == "product":
            return "Product: " + " ⊗ ".join(dspec.factor_text(s) for s in p.get("factors", []))
        if f == "marginals":
            return f"{dspec.format_orders(p.get('k'))}-way marginals"
        if f == "range_marginals":
            return f"{dspec.format_orders(p.get('k'))}-way range marginals ({p.get('kind', 'all_range')})"
        if f == "marginal_sets":
            return f"Marginals on {len(p.get('sets', []))} attribute set(s)"
        if f == "spec":
            return f"from spec: {p.get('name', '')}"
        if f == "external":
            return f"from session: {p.get('name', '')}"
        return FAMILIES.get(f, f).split(" (")[0]

    def build(self, domain: Sequence[int], names: Sequence[str] = ()) -> Matrix:
        """The term's queries over ``domain`` (reuses :attr:`matrix` when built for it).

        Raises
        ------
        ValueError
            If the term does not fit the domain (e.g. a width above an
            attribute's size, a range past its end, a predicate matrix with
            another number of columns) or a spec/session term would move to
            another domain.
        """
        domain = tuple(int(n) for n in domain)
        names = tuple(names) or tuple(f"a{i + 1}" for i in range(len(domain)))
        if self.matrix is not None and self.domain == domain:
            return self.matrix
        f, p = self.family, self.params
        d = len(domain)
        if f in BLOCK_TYPES:
            spec = {"type": f, **p}
            return dpx.workloads.kron([_block(spec, n, a, d) for n, a in zip(domain, names, strict=True)])
        if f == "product":
            factors = p["factors"]
            if len(factors) != d:
                raise ValueError(f"this product has {len(factors)} factor(s) but the domain has {d} "
                                 f"attribute(s); a product needs one block per attribute")
            return dpx.workloads.kron([_block(s, n, a, d)
                                       for s, n, a in zip(factors, domain, names, strict=True)])
        if f in ("marginals", "range_marginals"):
            if d < 2:
                raise ValueError("k-way marginals need a multi-attribute domain (e.g. age:50, "
                                 "income:100); over a 1D domain use Identity or Total")
            orders = parse_orders(p["k"], d)
            k = orders[0] if len(orders) == 1 else orders
            if f == "marginals":
                return dpx.workloads.marginals(domain, k)
            return dpx.workloads.range_marginals(domain, k, p.get("kind", "all_range"))
        if f == "marginal_sets":  # listed attribute sets (the Record table card)
            parts = [dpx.workloads.marginal(domain, axes) for axes in p["sets"]]
            return dpx.workloads.union(parts, name=f"marginals({len(parts)} sets)") \
                if len(parts) > 1 else parts[0]
        if f == "predicates":
            M = np.asarray(p["matrix"], dtype=float)
            cells = math.prod(domain)
            if M.ndim != 2 or M.shape[1] != cells:
                raise ValueError(f"the predicate matrix has shape {M.shape} but the domain has "
                                 f"{cells:,} cells; it needs one column per cell ({cells:,} columns)")
            W = dpx.workloads.predicates(M)
            if d > 1:
                W.domain = domain
            return W
        if f in ("spec", "external"):
            raise ValueError(f"it was built over the domain {self.domain} and cannot move to "
                             f"{domain}; remove it (or Clear all) before changing the domain")
        raise ValueError(f"unknown query family {f!r}; known: {sorted(FAMILIES)}")


def _same_params(a, b) -> bool:
    """Equality of term parameters, numpy arrays compared by value."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_params(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a, dtype=float), np.asarray(b, dtype=float))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same_params(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _block(spec: dict, n: int, name: str, d: int) -> Matrix:
    """One named 1D block of ``n`` cells (a spec factor); errors name the attribute when there are several."""
    return dspec.factor(spec, n, f"attribute {name!r} ({n} cells)" if d > 1 else "")


def _terms_from_matrix(W: Matrix) -> list[Term]:
    """``W`` as editable terms: one per product of its spec, else one ``external`` term."""
    try:
        spec = dspec.to_spec(W)
    except Exception:  # noqa: BLE001 - no spec: keep the matrix as it is
        return [Term("external", {"name": W.name}, 1.0, W, tuple(W.domain))]
    terms = []
    for prod in spec["products"]:
        factors = [{"type": s} if isinstance(s, str) else dict(s) for s in prod["factors"]]
        first = factors[0]
        same = all(f == first for f in factors)
        if same and first["type"] in BLOCK_TYPES:
            params = {k: v for k, v in first.items() if k != "type"}
            if first["type"] == "ranges":
                params["ranges"] = [tuple(r) for r in params["ranges"]]
            terms.append(Term(first["type"], params, float(prod["weight"])))
        elif len(factors) == 1 and first["type"] == "predicates":
            terms.append(Term("predicates", {"matrix": np.asarray(first["matrix"], dtype=float)},
                              float(prod["weight"])))
        else:
            terms.append(Term("product", {"factors": factors}, float(prod["weight"])))
    return terms


def _pool(A: np.ndarray, pixels: int) -> np.ndarray:
    """Block means of ``A`` so that each side has at most ``pixels`` entries."""
    r, c = A.shape
    fr, fc = math.ceil(r / pixels), math.ceil(c / pixels)
    if fr == 1 and fc == 1:
        return A
    ir, ic = np.arange(0, r, fr), np.arange(0, c, fc)
    S = np.add.reduceat(np.add.reduceat(A, ir, axis=0), ic, axis=1)
    counts = np.outer(np.diff(np.append(ir, r)), np.diff(np.append(ic, c)))
    return S / counts


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

    #: The domain limits, for the Record table card (:class:`~dpexplorer.ui.table_workload.TableMarginals`).
    max_attributes = MAX_ATTRIBUTES
    max_attribute_cells = MAX_N
    max_cells = MAX_CELLS
    parse_orders = staticmethod(parse_orders)

    # -------------------------------------------------------------- domain
    n = param.Integer(default=256, doc="""
        Size of the 1D domain (cells, 1..8192); used when `attributes` is empty.""")
    attributes = param.String(default="", doc="""
        Multi-attribute domain as name:size items, e.g. "age:50, income:100, sex:2";
        empty for a 1D domain of n cells.""")

    # ----------------------------------------------------- next term to add
    family = param.Selector(default="all_range", objects=list(FAMILIES), doc="Family of the next term.")
    k = param.Integer(default=2, bounds=(0, MAX_N), doc="""
        Width k of 'width_range', order k of 'marginals' and 'range_marginals'.""")
    m = param.Integer(default=2000, bounds=(1, MAX_RANDOM), doc="Number of random ranges.")
    random_kind = param.Selector(default="uniform", objects=_RANDOM_KINDS, doc="""
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
        self._domain_for_params: tuple[int, ...] | None = None  # a link's domain while checking it
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
        else:
            if not self._commit([Term("all_range")], domain, names, "Start"):
                self._commit([Term("identity")], (256,), (), "Start")
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

    def _set(self, **values) -> None:
        with param.edit_constant(self):
            self.param.update(**values)

    def _fail(self, message: str) -> bool:
        """Report ``message`` (session notification + :attr:`error`); always ``False``."""
        self._set(error=message)
        self.session.report(message)
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

    def _commit(self, terms: Sequence[Term], domain: tuple[int, ...], names: tuple[str, ...],
                what: str, workload: Matrix | None = None) -> bool:
        """Build ``terms`` over ``domain`` and make them current; on error keep everything.

        ``workload``: use this matrix as the session's workload instead of the
        union of the terms (when adopting a workload set elsewhere).
        """
        with self._lock:
            self._set(busy=True)
            try:
                built = []
                for i, t in enumerate(terms):
                    try:
                        M = t.build(domain, names)
                    except Exception as exc:  # noqa: BLE001 - reported below with the term
                        if not isinstance(exc, ValueError):
                            log.exception("building a term failed")
                        raise ValueError(f"term #{i} ({t.label}): {_message(exc)}") from None
                    built.append(replace(t, matrix=M, domain=domain))
                W = workload
                if W is None and built:
                    W = dpx.workloads.union([t.matrix for t in built], [t.weight for t in built])
                    foreign = any(W is t.matrix for t in built if t.family == "external")
                    if (len(domain) > 1 or names) and not foreign:
                        W.attributes = tuple(names) or tuple(f"a{i + 1}" for i in range(len(domain)))
                # the names of the workload's own domain go with its stats: after "Clear all"
                # the domain may change while the stats still describe the last workload built
                stats = ({**self._stats(W), "names": tuple(names) if len(names) == len(W.domain) else ()}
                         if W is not None else self.stats)
                spec_error = self._spec_problem(W) if W is not None else self.spec_error
            except Exception as exc:  # noqa: BLE001 - never raise into the UI
                if not isinstance(exc, ValueError):
                    log.exception("building the workload failed")
                self._set(busy=False)
                return self._fail(f"{what}: {_message(exc)}")
            self._domain, self._names = tuple(domain), tuple(names)
            if len(domain) > 1 and not names:
                self._names = tuple(f"a{i + 1}" for i in range(len(domain)))
            self.stats = stats
            self._sync_params()
            if W is not None and W is not self.session.workload:
                self._workload = W
                self.session.workload = W
            self._workload = self.session.workload
            self._set(terms=built, error="", spec_error=spec_error, busy=False,
                      version=self.version + 1)
            self._sync_url_terms()
            return True

    def commit_term(self, family: str, params: dict, shape: Sequence[int], names: Sequence[str],
                    what: str) -> bool:
        """Make one term of ``family`` (with ``params``) over the domain ``shape`` (attribute
        sizes) named ``names`` the whole workload; ``True`` on success, else the reason is
        reported (starting with ``what``) and nothing changes."""
        return self._commit([Term(family, dict(params))], tuple(shape), tuple(names), what)

    # ================================================================ link
    def _sync_url_terms(self) -> None:
        """Write the current terms into ``url_terms`` (without rebuilding them)."""
        text = _encode_terms(self.terms)
        if text != self.url_terms:
            syncing, self._syncing = self._syncing, True
            try:
                self.url_terms = text
            finally:
                self._syncing = syncing

    def _terms_from_link(self, items) -> list[Term]:
        """The terms of a link's ``w`` value, checked like the controls' inputs.

        Raises
        ------
        ValueError
            If ``items`` is not a list of ``[family, params, weight]``, is longer
            than :data:`MAX_URL_TERMS` characters of JSON, names a family a link
            cannot carry, or a parameter or weight is not allowed.
        """
        try:
            size = len(json.dumps(items))
        except (TypeError, ValueError):
            raise ValueError("the workload in the link is not readable (it was cut or edited)") from None
        if size > MAX_URL_TERMS:
            raise ValueError(f"the workload in the link is {size:,} characters long; "
                             f"links carry at most {MAX_URL_TERMS:,}")
        if not isinstance(items, list) or not items or not all(
                isinstance(it, list) and len(it) == 3 and isinstance(it[0], str)
                and isinstance(it[1], dict) for it in items):
            raise ValueError("the workload in the link must be a list of [family, parameters, weight]")
        terms = []
        for family, params, weight in items:
            if family not in FAMILIES:
                raise ValueError(f"a link cannot carry a {family!r} term; families: {list(FAMILIES)}")
            options = _options_from_params(family, params)
            terms.append(Term(family, self._term_params(family, options), self._check_weight(weight)))
        return terms

    def _apply_link(self) -> bool:
        """Build the link's domain (``n``/``attributes``) and terms (``url_terms``) together."""
        try:
            domain, names = parse_domain(self.attributes, self.n)
            self._domain_for_params = domain
            terms = self._terms_from_link(self.url_terms)
        except ValueError as exc:
            self._sync_params()
            self._sync_url_terms()
            return self._fail(f"Workload from the link not used: {_message(exc)}")
        finally:
            self._domain_for_params = None
        if self._commit(terms, domain, names, "Workload from the link not used"):
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

    @staticmethod
    def _stats(W: Matrix) -> dict:
        """``name, m, n, domain, l1, l2`` (and ``l1_exact``/``l2_exact``, or ``l1_error``...)."""
        out = {"name": W.name, "m": W.m, "n": W.n, "domain": tuple(W.domain)}
        for p in (1, 2):
            try:
                out[f"l{p}"], out[f"l{p}_exact"] = workload_sensitivity(W, p)
            except Exception as exc:  # noqa: BLE001 - shown as n/a
                out[f"l{p}"] = math.nan
                out[f"l{p}_error"] = _message(exc)
        return out

    @staticmethod
    def _spec_problem(W: Matrix) -> str:
        try:
            dspec.to_spec(W)
        except Exception as exc:  # noqa: BLE001 - shown next to the download buttons
            return _message(exc)
        return ""

    def _adopt(self, W: Matrix) -> bool:
        """Make ``W`` (set on the session elsewhere) the builder's terms, keeping the object."""
        domain = tuple(int(n) for n in W.domain)
        attrs = getattr(W, "attributes", None)
        names = tuple(str(a) for a in attrs) if attrs is not None and len(attrs) == len(domain) else ()
        terms = _terms_from_matrix(W)
        if self._commit(terms, domain, names, "Session workload not adopted", workload=W):
            return True
        return self._commit([Term("external", {"name": W.name}, 1.0, W, domain)], domain, names,
                            "Session workload not adopted", workload=W)

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
        ok = self._commit(self.terms, domain, names,
                          f"Domain not changed to {_describe_domain(domain, names)}")
        if not ok:
            self._sync_params()
        elif self.large_domain_note():
            notify(self.large_domain_note(), "warning")
        return ok

    def large_domain_note(self) -> str:
        """What a domain above the ``cells`` limit means for the pages ('' for a smaller one).

        The domain's cell count is checked by :func:`parse_domain` before
        anything is built (at most :data:`MAX_CELLS`); up to there the workload
        stays factorised, and every size derived from it (a vector over the
        domain, per-query errors, strategy rows) is checked against
        :mod:`dpexplorer.queries.limits` where it would be allocated.
        """
        cells, limit = math.prod(self._domain), dpx.limits.current().cells
        if cells <= limit:
            return ""
        return (f"The domain has {cells:,} cells, more than the {limit:,} one vector over it may "
                "hold. The workload stays factorised (Kronecker products), and strategies built "
                "from its factors work; anything that needs one value per cell (a data vector, a "
                "release, the identity-like strategies of the Compare page) is refused with a "
                "message on its page.")

    @param.depends("n", "attributes", "url_terms", watch=True)
    def _on_domain_params(self) -> None:
        if self._syncing:
            return
        if self.url_terms and self.url_terms != _encode_terms(self.terms):
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
    def _term_params(self, family: str, options: dict) -> dict:
        """The parameters of a new ``family`` term from ``options`` or the builder's inputs."""
        def get(key):
            return options.get(key, getattr(self, {"kind": "random_kind"}.get(key, key)))

        if family in ("identity", "total", "identity_total", "prefix", "all_range"):
            return {}
        if family == "width_range":
            k = parse_whole(get("k"), "the width k")
            if k < 1:
                raise ValueError(f"the width k must be at least 1, got {k}; allowed: 1 to the domain size")
            return {"w": k}
        if family == "random_ranges":
            m = parse_whole(get("m"), "the number of random ranges m")
            if not 1 <= m <= MAX_RANDOM:
                raise ValueError(f"the number of random ranges m must be 1 to {MAX_RANDOM:,}, got {m}")
            kind = get("kind")
            if kind not in _RANDOM_KINDS:
                raise ValueError(f"the random range kind must be one of {_RANDOM_KINDS}, got {kind!r}")
            seed = parse_whole(get("seed"), "the seed")
            if seed < 0:
                raise ValueError(f"the seed must be >= 0, got {seed}")
            return {"m": m, "kind": kind, "seed": seed}
        if family == "ranges":
            return {"ranges": parse_ranges(options.get("ranges", self.ranges_text))}
        if family == "predicates":
            return {"matrix": parse_matrix(options.get("matrix", self.predicates_text))}
        if family in ("marginals", "range_marginals"):
            text = options.get("orders", None if "k" in options else self.orders)
            if text is not None and (not isinstance(text, str) or text.strip()):
                orders = parse_orders(text)
                params = {"k": orders[0] if len(orders) == 1 else orders}
            else:
                params = {"k": parse_whole(get("k"), "the marginal order k")}
            if family == "range_marginals":
                kind = options.get("range_kind", options.get("kind", self.range_kind))
                if kind not in ("all_range", "prefix"):
                    raise ValueError(f"range marginals use 'all_range' or 'prefix' ranges, got {kind!r}")
                params["kind"] = kind
            return params
        if family == "product":
            blocks = list(options.get("blocks", self.blocks))
            d = len(self._domain_for_params or self._domain)
            if len(blocks) != d:
                raise ValueError(f"{len(blocks)} block type(s) given for a domain of {d} attribute(s); "
                                 f"choose one block per attribute")
            factors = []
            for b in blocks:
                if b not in BLOCK_TYPES:
                    raise ValueError(f"unknown block type {b!r}; allowed: {BLOCK_TYPES}")
                factors.append({"type": b, **self._term_params(b, options)})
            return {"factors": factors}
        raise ValueError(f"unknown query family {family!r}; allowed: {list(FAMILIES)}")

    @staticmethod
    def _check_weight(weight) -> float:
        if isinstance(weight, bool) or not isinstance(weight, int | float | np.number):
            raise ValueError(f"the weight must be a positive number, got {weight!r}")
        w = float(weight)
        if not (math.isfinite(w) and w > 0):
            raise ValueError(f"the weight must be a positive finite number, got {w:g}")
        return w

    def add_term(self, family: str | None = None, weight=None, **options) -> bool:
        """Add a term to the union and rebuild ``session.workload``; ``True`` on success.

        Parameters
        ----------
        family : str, optional
            A key of :data:`FAMILIES` (default: the ``family`` parameter).
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
        unknown = sorted(set(options) - set(_OPTIONS))
        if unknown:
            return self._fail(f"Term not added: unknown option(s) {unknown}; allowed: {list(_OPTIONS)}")
        if family not in FAMILIES:
            return self._fail(f"Term not added: unknown query family {family!r}; allowed: {list(FAMILIES)}")
        try:
            w = self._check_weight(self.weight if weight is None else weight)
            params = self._term_params(family, options)
        except ValueError as exc:
            return self._fail(f"Term not added ({FAMILIES[family]}): {_message(exc)}")
        if family == "ranges":
            return self.add_ranges(params["ranges"], weight=w)
        return self._commit(list(self.terms) + [Term(family, params, w)], self._domain, self._names,
                            f"Term not added ({FAMILIES[family]})")

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
            intervals = parse_ranges(ranges)
            w = self._check_weight(self.weight if weight is None else weight)
        except ValueError as exc:
            return self._fail(f"Ranges not added: {_message(exc)}")
        top = min(self._domain) - 1
        for lo, hi in intervals:
            if lo < 0 or hi > top:
                where = "every attribute has" if len(self._domain) > 1 else "the domain has"
                return self._fail(f"Ranges not added: range [{lo}, {hi}] is outside the domain: ranges "
                                  f"are inclusive cell indices with 0 <= lo <= hi <= {top} ({where} "
                                  f"{top + 1} cells or more)")
        terms = list(self.terms)
        idx = next((i for i, t in enumerate(terms) if t.family == "ranges"), None)
        if idx is None:
            terms.append(Term("ranges", {"ranges": intervals}, w))
        else:
            old = terms[idx]
            terms[idx] = Term("ranges", {"ranges": list(old.params["ranges"]) + intervals}, old.weight)
        return self._commit(terms, self._domain, self._names, "Ranges not added")

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
        try:
            domain, names = parse_domain(preset.attributes)
        except ValueError as exc:  # pragma: no cover - the presets are valid
            return self._fail(f"Preset not loaded: {exc}")
        terms = [Term(f, json.loads(json.dumps(params)), w) for f, params, w in preset.terms]
        return self._commit(terms, domain, names, f"Preset {preset.label!r} not loaded")

    def custom_ranges(self) -> list[tuple[int, int]]:
        """The intervals of the custom-ranges term (empty when there is none)."""
        for t in self.terms:
            if t.family == "ranges":
                return [tuple(r) for r in t.params["ranges"]]
        return []

    def set_weight(self, index: int, weight) -> bool:
        """Set the weight of term ``index`` (0-based); ``True`` on success."""
        try:
            index = self._check_index(index)
            w = self._check_weight(weight)
        except ValueError as exc:
            return self._fail(f"Weight not changed: {_message(exc)}")
        terms = list(self.terms)
        terms[index] = replace(terms[index], weight=w)
        return self._commit(terms, self._domain, self._names, "Weight not changed")

    def _check_index(self, index) -> int:
        i = parse_whole(index, "the term index")
        if not 0 <= i < len(self.terms):
            raise ValueError(f"there is no term {i}; terms are numbered 0 to {len(self.terms) - 1}")
        return i

    def remove_term(self, index: int) -> bool:
        """Remove term ``index`` (0-based); ``True`` on success."""
        return self.remove_terms([index])

    def remove_terms(self, indices: Sequence[int]) -> bool:
        """Remove the terms at ``indices`` (0-based).

        Removing every term leaves ``session.workload`` unchanged (the other
        pages need a workload) until a term is added again.
        """
        try:
            drop = {self._check_index(i) for i in indices}
        except ValueError as exc:
            return self._fail(f"Term not removed: {_message(exc)}")
        terms = [t for i, t in enumerate(self.terms) if i not in drop]
        if not terms:
            return self.clear_terms()
        return self._commit(terms, self._domain, self._names, "Term not removed")

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
            self._fail(f"Brushed range not added: {_message(exc)}")

    def add_brush(self, x0: float, x1: float) -> bool:
        """Add the cells under a brushed span ``[x0, x1]`` (histogram units) as one range.

        Cells whose centre lies in the span are taken (the cell under the
        span's middle when it is narrower than a cell).  Needs a 1D dataset and
        a 1D domain with as many cells as its histogram.
        """
        try:
            ds = self.session.data()
        except Exception as exc:  # noqa: BLE001
            return self._fail(f"Brushed range not added: no data histogram ({_message(exc)})")
        if ds.x.ndim != 1:
            return self._fail(f"Brushed range not added: brushing adds 1D ranges, but the dataset "
                              f"{ds.name!r} is {ds.x.shape}; select a 1D dataset or type the ranges")
        cells = ds.x.size
        if self._domain != (cells,):
            return self._fail(f"Brushed range not added: the histogram has {cells} cells but the domain "
                              f"is {_describe_domain(self._domain, self._names)}; set n = {cells} "
                              f"('Use the dataset's size') to brush ranges")
        try:
            lo_x, hi_x = sorted((float(x0), float(x1)))
        except (TypeError, ValueError):
            return self._fail(f"Brushed range not added: bounds {x0!r}, {x1!r} are not numbers")
        if not (math.isfinite(lo_x) and math.isfinite(hi_x)):
            return self._fail("Brushed range not added: the brushed bounds are not finite")
        edges = np.asarray(ds.edges[0], dtype=float)
        if hi_x < edges[0] or lo_x > edges[-1]:
            return self._fail(f"Brushed range not added: [{lo_x:.4g}, {hi_x:.4g}] is outside the "
                              f"histogram's range [{edges[0]:.4g}, {edges[-1]:.4g}]")
        centers = (edges[:-1] + edges[1:]) / 2
        inside = np.flatnonzero((centers >= lo_x) & (centers <= hi_x))
        if inside.size:
            lo, hi = int(inside[0]), int(inside[-1])
        else:
            mid = min(max((lo_x + hi_x) / 2, edges[0]), edges[-1])
            lo = hi = int(np.clip(np.searchsorted(edges, mid, side="right") - 1, 0, cells - 1))
        return self.add_ranges([(lo, hi)])

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
        fmt = None
        if filename:
            fmt = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}.get(PurePath(filename).suffix.lower())
        try:
            W = dspec.loads(text, fmt)
            domain = tuple(int(n) for n in W.domain)
            if len(domain) == 1:
                _check_n(domain[0], limit=MAX_N_1D)
            elif math.prod(domain) > MAX_CELLS:
                raise ValueError(f"the domain {domain} has {math.prod(domain):,} cells; at most "
                                 f"{MAX_CELLS:,} are allowed")
        except Exception as exc:  # noqa: BLE001 - parse errors, invalid specs
            if not isinstance(exc, ValueError):
                log.exception("loading a spec failed")
            return self._fail(f"{what}: {_message(exc)}")
        attrs = getattr(W, "attributes", None)
        names = tuple(attrs) if attrs is not None else ()
        term = Term("spec", {"name": W.name, "spec": dspec.to_spec(W)}, 1.0, W, domain)
        return self._commit([term], domain, names, what)

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
            self._fail(f"Spec not exported: {_message(exc)}")
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
            return self._fail(f"Predicates not added{where}: {_message(exc)}")
        return self.add_term("predicates", weight=weight, matrix=M)

    # ============================================================ drawing
    def heatmap_data(self) -> tuple[str, np.ndarray | None, str]:
        """What the heatmap draws: ``(which, array, note)``.

        ``which`` is ``"W"`` when ``W`` has at most :data:`HEATMAP_ENTRIES`
        entries, ``"WᵀW"`` when its ``n ≤ GRAM_MAX_N`` (averaged down to at
        most :data:`HEATMAP_PIXELS` per side), else ``""`` with ``array``
        ``None`` and ``note`` saying why nothing is drawn.
        """
        W = self.session.workload
        if W is None:
            return "", None, "No workload yet: add a term."
        m, n = W.shape
        try:
            if m * n <= HEATMAP_ENTRIES:
                return "W", W.dense(), f"W itself: {m:,} queries (rows) × {n:,} cells (columns)"
            if n <= GRAM_MAX_N:
                G = _pool(np.asarray(W.gram().dense(), dtype=float), HEATMAP_PIXELS)
                note = (f"WᵀW ({n:,} × {n:,} cells): W has {m:,} × {n:,} = {m * n:,} entries, more "
                        f"than {HEATMAP_ENTRIES:,}, so its Gram matrix is drawn")
                if G.shape[0] < n:
                    note += f" (block means, {G.shape[0]} × {G.shape[1]} pixels)"
                return "WᵀW", G, note
        except (MatrixTooLargeError, MemoryError) as exc:
            return "", None, f"Too large to draw: {_message(exc)}"
        return "", None, (f"Too large to draw: W is {m:,} × {n:,} and WᵀW is {n:,} × {n:,} "
                          f"(W is drawn up to {HEATMAP_ENTRIES:,} entries, WᵀW up to "
                          f"{GRAM_MAX_N:,} cells). The workload is still valid: its size and "
                          f"sensitivities are shown above.")

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
                        fontsize={"title": "10pt"}, default_tools=["save", "reset", "wheel_zoom", "pan"])

    def structure_frame(self, limit: int | None = None) -> pd.DataFrame | None:
        """The products of a (union of) Kronecker workload(s): ``weight, product, queries``.

        At most ``limit`` rows (default :data:`MAX_PRODUCTS_SHOWN`);
        ``attrs["products"]`` holds the total number.  ``None`` when the
        workload is not built from Kronecker products of 1D blocks.
        """
        W = self.session.workload
        terms = dpx.error.kron_terms(W) if W is not None else None
        if not terms:
            return None
        limit = MAX_PRODUCTS_SHOWN if limit is None else limit
        names = self._names or tuple(f"a{i + 1}" for i in range(len(W.domain)))
        rows = []
        for w, factors in terms[:limit]:
            parts = [f"{a}: {dspec.factor_text(f.spec or {'type': f.name})}" for a, f in zip(names, factors, strict=False)
                     if not (f.m == 1 and np.allclose(f.column_norms(1), 1.0))]
            rows.append({"weight": w, "product": " ⊗ ".join(parts) or "Total (all cells)",
                         "queries": math.prod(f.m for f in factors)})
        frame = pd.DataFrame(rows, columns=["weight", "product", "queries"])
        frame.attrs["products"] = len(terms)
        return frame

    @param.depends("version")
    def heatmap_view(self):
        """:meth:`heatmap` under its note (what is drawn and why), redrawn when the workload changes."""
        data = self.heatmap_data()
        out = self.heatmap(data)
        if isinstance(out, hv.Element):
            return pn.Column(pn.pane.Markdown(data[2], styles={"font-size": "0.9em"}, margin=(0, 10),
                                              sizing_mode="stretch_width"),
                             pn.pane.HoloViews(out, sizing_mode="stretch_width"),
                             sizing_mode="stretch_width")
        return out

    def _heatmap_panes(self) -> pn.Column:
        """The page's heatmap: a note, the plot and a box for an Alert (too large to draw),
        made once and updated in place on every change of the terms.

        Not ``pn.panel(self.heatmap_view)``: Panel re-runs a bound method on the thread
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
        """
        note = pn.pane.Markdown("", styles={"font-size": "0.9em"}, margin=(0, 10),
                                sizing_mode="stretch_width")
        plot = pn.pane.HoloViews(None, sizing_mode="stretch_width")
        # visibility toggles on wrapping Columns: toggling a rendered HoloViews pane's own
        # `visible` raises in Panel 1.9 (its Bokeh stylesheets are re-validated as strings)
        drawn = pn.Column(note, plot, sizing_mode="stretch_width")
        other = pn.Column(sizing_mode="stretch_width", visible=False)

        def redraw(*_):
            data = self.heatmap_data()
            out = self.heatmap(data)
            if isinstance(out, hv.Element):
                note.object, plot.object = data[2], out
                drawn.visible, other.visible = True, False
                other.objects = []
            else:
                other.objects = [out]
                drawn.visible, other.visible = False, True
        redraw()
        self.param.watch(redraw, "version")
        return pn.Column(drawn, other, sizing_mode="stretch_width")

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
            title = f"No data histogram: {_message(exc)}"
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
        """Markdown: domain, m, n, L1 and L2 sensitivity of the workload (and any mismatch)."""
        s = self.stats
        W = self.session.workload
        lines = []
        if not self.terms:
            lines.append("**No terms:** add a query family. The other pages keep using the last "
                         f"workload built{f' ({W.name!r}, {W.m:,} × {W.n:,})' if W is not None else ''}.")
            if s and tuple(s.get("domain", ())) != self._domain:
                lines.append(f"The domain is now {_describe_domain(self._domain, self._names)}; the "
                             "workload below is over the old one until a term is added.")
        if s:
            def sens(p):
                v = s.get(f"l{p}", math.nan)
                if not math.isfinite(v):
                    return f"n/a ({s.get(f'l{p}_error', '')})"
                return f"{v:.6g}" if s.get(f"l{p}_exact", True) else f"≤ {v:.6g} (upper bound)"
            lines.append(f"**W** = `{s['name'][:120]}`  \n**m** = {s['m']:,} queries, **n** = "
                         f"{s['n']:,} cells, **domain** = {_describe_domain(s['domain'], s.get('names', ()))}  \n"
                         f"**L1 sensitivity** = {sens(1)}, **L2 sensitivity** = {sens(2)}")
        if self.large_domain_note():
            lines.append("⚠ " + self.large_domain_note())
        cells = self._dataset_cells()
        table = self.session.table
        if table is not None and tuple(table.shape) == self._domain:
            lines.append(f"Over the record table `{table.name}` ({', '.join(table.domain.names)}): "
                         "the Release page releases its marginals from the records.")
        elif cells is not None and self._domain != (cells,):
            lines.append(f"⚠ The dataset {self.session.dataset!r} has {cells} cells but the domain is "
                         f"{_describe_domain(self._domain, self._names)}: releases need n = {cells}.")
        return "\n\n".join(lines)

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
        return pn.Column(pn.pane.Markdown("### Terms (union)"), tab, pn.Row(remove, clear),
                         sizing_mode="stretch_width")

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
        main = pn.Column(summary, self._terms_table(), heat,
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
