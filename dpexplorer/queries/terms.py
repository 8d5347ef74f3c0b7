"""Workload terms: the model of the explorer's Workload page, without any UI.

A workload ``W`` is built as a weighted union of *terms*; every term is a
family of linear counting queries over a domain of attribute sizes:

* 1D families (the named blocks of :data:`dpexplorer.queries.workloads.BLOCKS`
  listed in :data:`BLOCK_TYPES`); over a multi-attribute domain such a family
  is applied to *every* attribute (a Kronecker product, e.g. Prefix ⊗ Prefix);
* ``product``: one 1D block per attribute (HDMM's products, McKenna et al.,
  PVLDB 2018, Sec. 5, e.g. Prefix ⊗ Identity ⊗ Total);
* marginals and range marginals by order, one order ``k`` or several
  (``"0-3"``: all 0- to 3-way marginals, HDMM Sec. 11.2), ranges or prefixes;
* ``marginal_sets``: the marginals on listed attribute sets (a record table);
* ``predicates``: a 0/1 matrix, one column per cell.

A term's parameters are the spec's own (:mod:`dpexplorer.queries.spec`): the
parameters of a block family are those of its block spec
(``{"type": family, **params}``), a product's ``factors`` are block specs, and
the marginal orders and ranges use the spec's text forms
(:func:`~dpexplorer.queries.spec.parse_orders`,
:func:`~dpexplorer.queries.spec.parse_ranges`); :meth:`Term.build` builds block
factors with :func:`dpexplorer.queries.spec.factor`, and
:func:`terms_from_matrix` turns a workload's spec back into terms.

:class:`WorkloadTerms` is the page's state (terms, domain, attribute names)
with its transitions as pure methods returning a new state (``added``,
``with_ranges``, ``reweighted``, ``without``, ``over``), and
:meth:`WorkloadTerms.build` builds it: the union, its sensitivities
(:func:`workload_sensitivity`, exact or an upper bound from the Kronecker
factors) and whether it is expressible as a spec.  Every function raises
``ValueError`` with a message saying what was wrong and what is allowed::

    state = WorkloadTerms((), (256,))
    state = state.added(Term("prefix")).added(Term("width_range", {"w": 8}, 2.0))
    built = state.build()
    built.workload.name  # 'prefix ∪ 2·width8' (505 queries over 256 cells)
    built.stats["l1"]    # 265.0: cell 7 is in 249 prefixes and 8 ranges of weight 2

Domains have up to :data:`MAX_ATTRIBUTES` attributes and :data:`MAX_CELLS`
cells; workloads over them stay implicit (Kronecker products) and nothing of
``n`` entries is formed for them.
"""

from __future__ import annotations

import io
import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePath
from typing import Any

import numpy as np
import pandas as pd

from . import limits, workloads
from . import spec as dspec
from .matrix import Matrix, MatrixTooLargeError, kron_terms
from .spec import parse_orders, parse_ranges, parse_whole

__all__ = [
    "MAX_N", "MAX_N_1D", "MAX_ATTRIBUTES", "MAX_CELLS", "SENSITIVITY_CELLS", "MAX_PRODUCTS_SHOWN",
    "MAX_RANDOM", "MAX_PREDICATE_ENTRIES", "HEATMAP_ENTRIES", "GRAM_MAX_N", "HEATMAP_PIXELS",
    "MAX_URL_TERMS", "MAX_MARGINALS", "MAX_QUERIES", "FAMILIES", "BLOCK_TYPES", "RANDOM_KINDS",
    "OPTIONS", "DEFAULT_INPUTS", "Term", "WorkloadTerms", "BuiltWorkload", "Preset", "PRESETS",
    "check_n", "parse_domain", "describe_domain", "parse_matrix", "workload_sensitivity",
    "workload_stats", "spec_problem", "message", "term_params", "check_weight", "encode_terms",
    "options_from_params", "terms_from_link", "terms_from_matrix", "spec_workload", "spec_format",
    "brush_cells", "large_domain_note", "pool", "heatmap_data", "structure_frame", "summary_text",
    "parse_sets", "plan_marginals", "marginals_term",
]

log = logging.getLogger(__name__)

#: Largest attribute size of a multi-attribute domain: W or WᵀW of a factor can always be drawn.
MAX_N = 4096
#: Largest 1D domain: workloads of ranges, prefixes, identity and total are compared up to this
#: size without n × n matrices (the Compare page's structured path); other 1D workloads above
#: :data:`MAX_N` cells are built but refused by the Compare and Strategy pages.
MAX_N_1D = 2**16
#: Largest number of attributes of a multi-attribute domain (Adult, HDMM Sec. 11.2, has 14).
MAX_ATTRIBUTES = 16
#: Largest number of cells of a multi-attribute domain (Adult has 6.4·10¹⁷; the cell count must
#: fit a signed 64-bit integer).  Workloads over such domains stay implicit (Kronecker products):
#: nothing of size n is ever materialised.
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
#: Longest workload a link carries (characters of its JSON); larger ones are not linked.
MAX_URL_TERMS = 4000
#: Most marginals in one record-table workload (Adult's 0–3-way marginals are 470).
MAX_MARGINALS = 5000
#: Most queries (cells of all marginals) in one record-table workload.
MAX_QUERIES = 5_000_000

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
#: Kinds of random ranges (DAWA, Li et al., PVLDB 2014, Sec. 6.1).
RANDOM_KINDS = ["uniform", "clustered", "large_clustered"]
#: Options a new term accepts besides its family and weight (:func:`term_params`).
OPTIONS = ("k", "orders", "m", "kind", "seed", "range_kind", "ranges", "matrix", "blocks")
#: The inputs a new term falls back on for an option not given (the page's controls' defaults).
DEFAULT_INPUTS: dict[str, Any] = {"k": 2, "m": 2000, "kind": "uniform", "seed": 0, "orders": "",
                                  "range_kind": "all_range", "ranges": "", "matrix": "", "blocks": []}


# ====================================================================== parsing
def check_n(n, what: str = "the domain size n", limit: int = MAX_N) -> int:
    """``n`` as a whole number of cells in ``[1, limit]``, or ValueError naming ``what``."""
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
        return (check_n(n, limit=MAX_N_1D),), ()
    sizes, names = dspec.parse_attributes(text)  # the spec's text form of a domain
    checked = tuple(check_n(size, f"the size of attribute {name!r}")
                    for size, name in zip(sizes, names, strict=True))
    if len(checked) > MAX_ATTRIBUTES:
        raise ValueError(f"{len(checked)} attributes given; at most {MAX_ATTRIBUTES} are allowed")
    cells = math.prod(checked)
    if cells > MAX_CELLS:
        raise ValueError(f"the domain {' × '.join(map(str, checked))} has {cells:,} cells; at most "
                         f"{MAX_CELLS:,} are allowed")
    return checked, tuple(names)


def describe_domain(domain: Sequence[int], names: Sequence[str]) -> str:
    """``"age (50) × sex (2)"``, or ``"50 × 2"`` without names."""
    if names and len(names) == len(domain):
        return " × ".join(f"{a} ({n})" for a, n in zip(names, domain, strict=True))
    return " × ".join(str(n) for n in domain)


def parse_matrix(data, filename: str | None = None) -> np.ndarray:
    """A 2D numeric array from pasted text, an uploaded file's bytes, or an array.

    Text: one row per line (or ``;``), entries separated by commas or spaces,
    or a JSON list of lists.  Files: ``.npy`` (no pickles), else text/CSV.

    Returns
    -------
    ndarray, shape (queries, cells), float64

    Raises
    ------
    ValueError
        If nothing can be read, rows have different lengths, an entry is not a
        number, or the matrix has more than :data:`MAX_PREDICATE_ENTRIES` entries.
    LimitExceededError
        If the bytes are above the ``upload_bytes`` limit.
    """
    if isinstance(data, bytes | bytearray):
        limits.check("upload_bytes", len(data), "the predicates file: bytes")
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


def message(exc: BaseException) -> str:
    """A user-facing message for an exception (ValueError text as is)."""
    if isinstance(exc, ValueError):
        return str(exc).replace("WorkloadBuilder.", "")
    return f"{type(exc).__name__}: {exc}"


# ================================================================= sensitivity
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
    terms = kron_terms(W)
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
        common = np.ones(terms[0][1][i].n, dtype=bool)
        for _, factors in terms:
            v = norms(factors[i])
            common &= np.isclose(v, v.max(), rtol=1e-12, atol=0.0)
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


def workload_stats(W: Matrix) -> dict:
    """``name, m, n, domain, l1, l2`` of ``W`` (and ``l1_exact``/``l2_exact``, or
    ``l1_error``/``l2_error`` with ``l1``/``l2`` NaN when a sensitivity cannot be computed)."""
    out = {"name": W.name, "m": W.m, "n": W.n, "domain": tuple(W.domain)}
    for p in (1, 2):
        try:
            out[f"l{p}"], out[f"l{p}_exact"] = workload_sensitivity(W, p)
        except Exception as exc:  # noqa: BLE001 - shown as n/a
            out[f"l{p}"] = math.nan
            out[f"l{p}_error"] = message(exc)
    return out


def spec_problem(W: Matrix) -> str:
    """Why ``W`` cannot be written as a spec (:func:`dpexplorer.queries.spec.to_spec`); ``''`` if it can."""
    try:
        dspec.to_spec(W)
    except Exception as exc:  # noqa: BLE001 - shown next to the download buttons
        return message(exc)
    return ""


# ===================================================================== presets
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
        The terms of the workload.
    source : str
        Where the schema and the workload come from.
    """

    label: str
    attributes: str
    terms: tuple
    source: str

    def workload_terms(self) -> WorkloadTerms:
        """The preset as a (not yet built) state: its domain and fresh copies of its terms."""
        domain, names = parse_domain(self.attributes)
        terms = tuple(Term(f, json.loads(json.dumps(params)), w) for f, params, w in self.terms)
        return WorkloadTerms(terms, domain, names)


#: CPS schema of HDMM Sec. 11.2 (sizes 50, 100, 7, 4, 2; income and age are numeric).
CPS = "income:50, age:100, marital:7, race:4, sex:2"
#: Adult schema of HDMM Sec. 11.2 (sizes only in the paper: the 5 numeric attributes first,
#: then the 9 categorical ones; the names are ours, from the UCI Adult columns of those sizes).
ADULT = ("capital_gain:100, capital_loss:100, fnlwgt:100, hours_per_week:99, age:85, "
         "native_country:42, education:16, occupation:15, workclass:9, marital_status:7, "
         "relationship:6, race:5, sex:2, income:2")

#: Presets of the papers' workloads (multi-attribute schemas, and a count over time): key -> :class:`Preset`.
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
    "counts_over_time": Preset(
        "Counts over time: running total of 1,024 days", "day:1024", (("prefix", {}, 1.0),),
        "Continual counting: the total so far, published every day from the counts up to that "
        "day (Fichtenberger, Henzinger & Upadhyay, ICML 2023; Denisov et al., NeurIPS 2022); "
        "Compare marks the mechanisms that release it day by day as online"),
}


# ======================================================================== terms
@dataclass(eq=False)
class Term:
    """One weighted family of queries of the union.

    Attributes
    ----------
    family : str
        A key of :data:`FAMILIES`, ``"marginal_sets"`` (listed attribute
        sets), ``"spec"`` (loaded from a spec) or ``"external"`` (a workload
        set elsewhere, kept as it is).
    params : dict
        Parameters of the family, the spec's: the block parameters (``w``;
        ``m``, ``kind``, ``seed``; ``ranges``; ``matrix``), ``factors`` (block
        specs of a product), ``k`` and ``kind`` (marginals), ``sets``
        (attribute index lists), ``spec`` and ``name`` (a spec term).
    weight : float
        Positive weight of the term in the union.
    matrix : Matrix or None
        The term built for :attr:`domain`.
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
            return f"Predicates ({np.shape(p.get('matrix', ()))[0]} queries)"
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

        Returns
        -------
        Matrix, shape (queries, prod(domain))

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
            return workloads.kron([_block(spec, n, a, d) for n, a in zip(domain, names, strict=True)])
        if f == "product":
            factors = p["factors"]
            if len(factors) != d:
                raise ValueError(f"this product has {len(factors)} factor(s) but the domain has {d} "
                                 f"attribute(s); a product needs one block per attribute")
            return workloads.kron([_block(s, n, a, d) for s, n, a in zip(factors, domain, names, strict=True)])
        if f in ("marginals", "range_marginals"):
            if d < 2:
                raise ValueError("k-way marginals need a multi-attribute domain (e.g. age:50, "
                                 "income:100); over a 1D domain use Identity or Total")
            orders = parse_orders(p["k"], d)
            k = orders[0] if len(orders) == 1 else orders
            if f == "marginals":
                return workloads.marginals(domain, k)
            return workloads.range_marginals(domain, k, p.get("kind", "all_range"))
        if f == "marginal_sets":  # listed attribute sets (a record table)
            parts = [workloads.marginal(domain, axes) for axes in p["sets"]]
            return workloads.union(parts, name=f"marginals({len(parts)} sets)") \
                if len(parts) > 1 else parts[0]
        if f == "predicates":
            M = np.asarray(p["matrix"], dtype=float)
            cells = math.prod(domain)
            if M.ndim != 2 or M.shape[1] != cells:
                raise ValueError(f"the predicate matrix has shape {M.shape} but the domain has "
                                 f"{cells:,} cells; it needs one column per cell ({cells:,} columns)")
            W = workloads.predicates(M)
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


def check_weight(weight) -> float:
    """``weight`` as a positive finite float, or ValueError."""
    if isinstance(weight, bool) or not isinstance(weight, int | float | np.number):
        raise ValueError(f"the weight must be a positive number, got {weight!r}")
    w = float(weight)
    if not (math.isfinite(w) and w > 0):
        raise ValueError(f"the weight must be a positive finite number, got {w:g}")
    return w


def term_params(family: str, options: Mapping, inputs: Mapping | None = None, d: int = 1) -> dict:
    """The checked parameters of a new ``family`` term over a domain of ``d`` attributes.

    Parameters
    ----------
    family : str
        A key of :data:`FAMILIES`.
    options : dict
        Given values (keys of :data:`OPTIONS`); ``orders`` as text (``"0-3"``) or a list,
        ``ranges`` as text (``"0-9, 20-29"``) or pairs, ``matrix`` as text, bytes or an array.
    inputs : dict, optional
        What an option not in ``options`` falls back on (default :data:`DEFAULT_INPUTS`):
        the page's controls.
    d : int
        Attributes of the domain (the number of blocks of a product).

    Raises
    ------
    ValueError
        For a value out of its range (the message says which is allowed).
    """
    inputs = DEFAULT_INPUTS if inputs is None else inputs

    def get(key):
        return options.get(key, inputs.get(key))

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
        if kind not in RANDOM_KINDS:
            raise ValueError(f"the random range kind must be one of {RANDOM_KINDS}, got {kind!r}")
        seed = parse_whole(get("seed"), "the seed")
        if seed < 0:
            raise ValueError(f"the seed must be >= 0, got {seed}")
        return {"m": m, "kind": kind, "seed": seed}
    if family == "ranges":
        return {"ranges": parse_ranges(get("ranges"))}
    if family == "predicates":
        return {"matrix": parse_matrix(get("matrix"))}
    if family in ("marginals", "range_marginals"):
        text = options.get("orders", None if "k" in options else inputs.get("orders"))
        if text is not None and (not isinstance(text, str) or text.strip()):
            orders = parse_orders(text)
            params: dict = {"k": orders[0] if len(orders) == 1 else orders}
        else:
            params = {"k": parse_whole(get("k"), "the marginal order k")}
        if family == "range_marginals":
            kind = options.get("range_kind", options.get("kind", inputs.get("range_kind")))
            if kind not in ("all_range", "prefix"):
                raise ValueError(f"range marginals use 'all_range' or 'prefix' ranges, got {kind!r}")
            params["kind"] = kind
        return params
    if family == "product":
        blocks = list(get("blocks") or [])
        if len(blocks) != d:
            raise ValueError(f"{len(blocks)} block type(s) given for a domain of {d} attribute(s); "
                             f"choose one block per attribute")
        factors = []
        for b in blocks:
            if b not in BLOCK_TYPES:
                raise ValueError(f"unknown block type {b!r}; allowed: {BLOCK_TYPES}")
            factors.append({"type": b, **term_params(b, options, inputs, d)})
        return {"factors": factors}
    raise ValueError(f"unknown query family {family!r}; allowed: {list(FAMILIES)}")


def terms_from_matrix(W: Matrix) -> list[Term]:
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


# ========================================================================= link
def encode_terms(terms: Sequence[Term]) -> list:
    """``terms`` as ``[[family, params, weight], ...]`` for a link; ``[]`` if one cannot travel
    (a family not in :data:`FAMILIES`, or more than :data:`MAX_URL_TERMS` characters of JSON)."""
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


def options_from_params(family: str, params: dict) -> dict:
    """The input options (:func:`term_params`) that make a term with ``params`` (a link's, unchecked)."""
    p = dict(params)
    if family == "width_range":
        return {"k": p.get("w")}
    if family in ("marginals", "range_marginals"):
        k = p.get("k")
        options: dict[str, Any] = {"orders": k} if isinstance(k, list) else {"k": k}
        if family == "range_marginals":
            options["range_kind"] = p.get("kind")
        return options
    if family == "product":
        factors = p.get("factors")
        if not isinstance(factors, list) or not all(isinstance(f, dict) for f in factors):
            raise ValueError("a product term needs a list of factors")
        options = {"blocks": [f.get("type") for f in factors]}
        for f in factors:
            options.update(options_from_params(f.get("type"), f) if f.get("type") in (
                "width_range",) else {k: v for k, v in f.items() if k in ("m", "kind", "seed")})
        return options
    if family == "predicates":
        return {"matrix": np.asarray(p.get("matrix"), dtype=float)}
    return {k: v for k, v in p.items() if k in ("m", "kind", "seed", "ranges")}


def terms_from_link(items, inputs: Mapping | None = None, d: int = 1) -> list[Term]:
    """The terms of a link's ``[[family, params, weight], ...]``, checked like new terms.

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
        options = options_from_params(family, params)
        terms.append(Term(family, term_params(family, options, inputs, d), check_weight(weight)))
    return terms


# ========================================================================= spec
def spec_format(filename: str | None) -> str | None:
    """``"json"`` or ``"yaml"`` for a ``.json`` / ``.yaml`` / ``.yml`` file name, else ``None``."""
    if not filename:
        return None
    return {".json": "json", ".yaml": "yaml", ".yml": "yaml"}.get(PurePath(filename).suffix.lower())


def spec_workload(text: str, format: str | None = None) -> Matrix:
    """The workload of JSON/YAML spec text (:func:`dpexplorer.queries.spec.loads`), its domain
    checked: a 1D domain of at most :data:`MAX_N_1D` cells, any domain of at most :data:`MAX_CELLS`.

    Raises
    ------
    ValueError
        For a bad spec or a domain above those sizes (and the spec's own errors).
    """
    W = dspec.loads(text, format)
    domain = tuple(int(n) for n in W.domain)
    if len(domain) == 1:
        check_n(domain[0], limit=MAX_N_1D)
    elif math.prod(domain) > MAX_CELLS:
        raise ValueError(f"the domain {domain} has {math.prod(domain):,} cells; at most "
                         f"{MAX_CELLS:,} are allowed")
    return W


# ======================================================================== state
@dataclass(frozen=True)
class BuiltWorkload:
    """What :meth:`WorkloadTerms.build` built.

    Attributes
    ----------
    terms : tuple of Term
        The terms, each with its :attr:`Term.matrix` over :attr:`domain`.
    domain, names : tuple
        The domain; ``names`` are ``a1 … ad`` for an unnamed multi-attribute domain.
    workload : Matrix or None
        The weighted union (``None`` with no term and no given workload).
    stats : dict or None
        :func:`workload_stats` of the workload plus ``names`` (``None`` without a workload).
    spec_error : str or None
        :func:`spec_problem` of the workload (``None`` without a workload).
    """

    terms: tuple[Term, ...]
    domain: tuple[int, ...]
    names: tuple[str, ...]
    workload: Matrix | None
    stats: dict | None
    spec_error: str | None


@dataclass(frozen=True)
class WorkloadTerms:
    """A workload as terms over a domain: the Workload page's state, its changes pure methods.

    Attributes
    ----------
    terms : tuple of Term
    domain : tuple of int
        Attribute sizes (``(n,)`` in 1D).
    names : tuple of str
        Attribute names (empty for an unnamed domain).
    """

    terms: tuple[Term, ...] = ()
    domain: tuple[int, ...] = (256,)
    names: tuple[str, ...] = ()

    def check_index(self, index) -> int:
        """``index`` as the 0-based number of an existing term, or ValueError."""
        i = parse_whole(index, "the term index")
        if not 0 <= i < len(self.terms):
            raise ValueError(f"there is no term {i}; terms are numbered 0 to {len(self.terms) - 1}")
        return i

    def added(self, term: Term) -> WorkloadTerms:
        """With ``term`` appended."""
        return replace(self, terms=(*self.terms, term))

    def over(self, domain: Sequence[int], names: Sequence[str] = ()) -> WorkloadTerms:
        """The same terms over another domain (built by :meth:`build`)."""
        return replace(self, domain=tuple(domain), names=tuple(names))

    def reweighted(self, index, weight) -> WorkloadTerms:
        """With term ``index`` weighted ``weight`` (ValueError for a bad index or weight)."""
        i, w = self.check_index(index), check_weight(weight)
        terms = list(self.terms)
        terms[i] = replace(terms[i], weight=w)
        return replace(self, terms=tuple(terms))

    def without(self, indices: Sequence[int]) -> WorkloadTerms:
        """Without the terms at ``indices`` (ValueError for an index of no term)."""
        drop = {self.check_index(i) for i in indices}
        return replace(self, terms=tuple(t for i, t in enumerate(self.terms) if i not in drop))

    def custom_ranges(self) -> list[tuple[int, int]]:
        """The intervals of the custom-ranges term (empty when there is none)."""
        for t in self.terms:
            if t.family == "ranges":
                return [tuple(r) for r in t.params["ranges"]]
        return []

    def with_ranges(self, ranges, weight=1.0) -> WorkloadTerms:
        """With inclusive cell intervals appended to the one custom-ranges term.

        Parameters
        ----------
        ranges : str or sequence of (int, int)
            ``"0-9, 20-29"`` or ``[(0, 9), (20, 29)]`` (0-based cells, inclusive).
        weight : float
            Weight of the custom-ranges term if it is created now.

        Raises
        ------
        ValueError
            For bad text, a bad weight, or a range outside an attribute.
        """
        intervals = parse_ranges(ranges)
        w = check_weight(weight)
        top = min(self.domain) - 1
        for lo, hi in intervals:
            if lo < 0 or hi > top:
                where = "every attribute has" if len(self.domain) > 1 else "the domain has"
                raise ValueError(f"range [{lo}, {hi}] is outside the domain: ranges are inclusive "
                                 f"cell indices with 0 <= lo <= hi <= {top} ({where} {top + 1} cells "
                                 "or more)")
        terms = list(self.terms)
        idx = next((i for i, t in enumerate(terms) if t.family == "ranges"), None)
        if idx is None:
            terms.append(Term("ranges", {"ranges": intervals}, w))
        else:
            old = terms[idx]
            terms[idx] = Term("ranges", {"ranges": list(old.params["ranges"]) + intervals}, old.weight)
        return replace(self, terms=tuple(terms))

    def build(self, workload: Matrix | None = None) -> BuiltWorkload:
        """Build every term over the domain, their weighted union and its statistics.

        ``workload``: this matrix is the result instead of the union of the
        terms (a workload adopted from elsewhere, kept as the same object).

        Raises
        ------
        ValueError
            ``term #i (label): why`` for a term that does not fit the domain.
        """
        domain, names = tuple(self.domain), tuple(self.names)
        built, matrices = [], []
        for i, t in enumerate(self.terms):
            try:
                M = t.build(domain, names)
            except Exception as exc:  # noqa: BLE001 - reported with the term
                if not isinstance(exc, ValueError):
                    log.exception("building a term failed")
                raise ValueError(f"term #{i} ({t.label}): {message(exc)}") from None
            built.append(replace(t, matrix=M, domain=domain))
            matrices.append(M)
        W = workload
        if W is None and built:
            W = workloads.union(matrices, [t.weight for t in built])
            foreign = any(W is t.matrix for t in built if t.family == "external")
            if (len(domain) > 1 or names) and not foreign:
                W.attributes = names or tuple(f"a{i + 1}" for i in range(len(domain)))
        # the names of the workload's own domain go with its stats
        stats = ({**workload_stats(W), "names": names if len(names) == len(W.domain) else ()}
                 if W is not None else None)
        spec_error = spec_problem(W) if W is not None else None
        if len(domain) > 1 and not names:
            names = tuple(f"a{i + 1}" for i in range(len(domain)))
        return BuiltWorkload(tuple(built), domain, names, W, stats, spec_error)


# ======================================================================= brush
def brush_cells(edges, x0, x1) -> tuple[int, int]:
    """The inclusive cell range under a brushed span ``[x0, x1]`` of a histogram with ``edges``.

    Cells whose centre lies in the span are taken (the cell under the span's
    middle when it is narrower than a cell).

    Parameters
    ----------
    edges : array, shape (cells + 1,)
        Bin edges in the histogram's units.
    x0, x1 : float
        The brushed bounds, in any order.

    Raises
    ------
    ValueError
        For bounds that are not finite numbers or a span outside the histogram.
    """
    try:
        lo_x, hi_x = sorted((float(x0), float(x1)))
    except (TypeError, ValueError):
        raise ValueError(f"bounds {x0!r}, {x1!r} are not numbers") from None
    if not (math.isfinite(lo_x) and math.isfinite(hi_x)):
        raise ValueError("the brushed bounds are not finite")
    edges = np.asarray(edges, dtype=float)
    if hi_x < edges[0] or lo_x > edges[-1]:
        raise ValueError(f"[{lo_x:.4g}, {hi_x:.4g}] is outside the histogram's range "
                         f"[{edges[0]:.4g}, {edges[-1]:.4g}]")
    centers = (edges[:-1] + edges[1:]) / 2
    inside = np.flatnonzero((centers >= lo_x) & (centers <= hi_x))
    if inside.size:
        return int(inside[0]), int(inside[-1])
    mid = min(max((lo_x + hi_x) / 2, edges[0]), edges[-1])
    cell = int(np.clip(np.searchsorted(edges, mid, side="right") - 1, 0, len(centers) - 1))
    return cell, cell


# ===================================================================== display
def large_domain_note(domain: Sequence[int]) -> str:
    """What a domain above the ``cells`` limit means for the pages ('' for a smaller one).

    The domain's cell count is checked by :func:`parse_domain` before
    anything is built (at most :data:`MAX_CELLS`); up to there the workload
    stays factorised, and every size derived from it (a vector over the
    domain, per-query errors, strategy rows) is checked against
    :mod:`dpexplorer.queries.limits` where it would be allocated.
    """
    cells, limit = math.prod(domain), limits.current().cells
    if cells <= limit:
        return ""
    return (f"The domain has {cells:,} cells, more than the {limit:,} one vector over it may "
            "hold. The workload stays factorised (Kronecker products), and strategies built "
            "from its factors work; anything that needs one value per cell (a data vector, a "
            "release, the identity-like strategies of the Compare page) is refused with a "
            "message on its page.")


def pool(A: np.ndarray, pixels: int) -> np.ndarray:
    """Block means of ``A`` so that each side has at most ``pixels`` entries."""
    r, c = A.shape
    fr, fc = math.ceil(r / pixels), math.ceil(c / pixels)
    if fr == 1 and fc == 1:
        return A
    ir, ic = np.arange(0, r, fr), np.arange(0, c, fc)
    S = np.add.reduceat(np.add.reduceat(A, ir, axis=0), ic, axis=1)
    counts = np.outer(np.diff(np.append(ir, r)), np.diff(np.append(ic, c)))
    return S / counts


def heatmap_data(W: Matrix | None) -> tuple[str, np.ndarray | None, str]:
    """What a heatmap of ``W`` draws: ``(which, array, note)``.

    ``which`` is ``"W"`` when ``W`` has at most :data:`HEATMAP_ENTRIES`
    entries (``array`` of shape (m, n)), ``"WᵀW"`` when its ``n ≤ GRAM_MAX_N``
    (averaged down to at most :data:`HEATMAP_PIXELS` per side), else ``""``
    with ``array`` ``None`` and ``note`` saying why nothing is drawn.
    """
    if W is None:
        return "", None, "No workload yet: add a term."
    m, n = W.shape
    try:
        if m * n <= HEATMAP_ENTRIES:
            return "W", W.dense(), f"W itself: {m:,} queries (rows) × {n:,} cells (columns)"
        if n <= GRAM_MAX_N:
            G = pool(np.asarray(W.gram().dense(), dtype=float), HEATMAP_PIXELS)
            note = (f"WᵀW ({n:,} × {n:,} cells): W has {m:,} × {n:,} = {m * n:,} entries, more "
                    f"than {HEATMAP_ENTRIES:,}, so its Gram matrix is drawn")
            if G.shape[0] < n:
                note += f" (block means, {G.shape[0]} × {G.shape[1]} pixels)"
            return "WᵀW", G, note
    except (MatrixTooLargeError, MemoryError) as exc:
        return "", None, f"Too large to draw: {message(exc)}"
    return "", None, (f"Too large to draw: W is {m:,} × {n:,} and WᵀW is {n:,} × {n:,} "
                      f"(W is drawn up to {HEATMAP_ENTRIES:,} entries, WᵀW up to "
                      f"{GRAM_MAX_N:,} cells). The workload is still valid: its size and "
                      f"sensitivities are shown above.")


def structure_frame(W: Matrix | None, names: Sequence[str] = (),
                    limit: int | None = None) -> pd.DataFrame | None:
    """The products of a (union of) Kronecker workload(s): ``weight, product, queries``.

    At most ``limit`` rows (default :data:`MAX_PRODUCTS_SHOWN`);
    ``attrs["products"]`` holds the total number.  Attributes whose factor is
    the total are omitted.  ``None`` when the workload is not built from
    Kronecker products of 1D blocks.
    """
    if W is None:
        return None
    terms = kron_terms(W)
    if not terms:
        return None
    limit = MAX_PRODUCTS_SHOWN if limit is None else limit
    names = tuple(names) or tuple(f"a{i + 1}" for i in range(len(W.domain)))
    rows = []
    for w, factors in terms[:limit]:
        parts = [f"{a}: {dspec.factor_text(f.spec or {'type': f.name})}" for a, f in zip(names, factors, strict=False)
                 if not (f.m == 1 and np.allclose(f.column_norms(1), 1.0))]
        rows.append({"weight": w, "product": " ⊗ ".join(parts) or "Total (all cells)",
                     "queries": math.prod(f.m for f in factors)})
    frame = pd.DataFrame(rows, columns=["weight", "product", "queries"])
    frame.attrs["products"] = len(terms)
    return frame


def summary_text(stats: Mapping | None, state: WorkloadTerms, workload: Matrix | None,
                 dataset: str = "", dataset_cells: int | None = None, table=None) -> str:
    """Markdown: domain, m, n, L1 and L2 sensitivity of the workload (and any mismatch).

    Parameters
    ----------
    stats : dict or None
        :attr:`BuiltWorkload.stats` of the last workload built.
    state : WorkloadTerms
        The current terms and domain.
    workload : Matrix or None
        The workload in use (the last one built while there is no term).
    dataset, dataset_cells : str, int or None
        The selected dataset and its cells when 1D.
    table : Table or None
        The record table in use (``name``, ``shape``, ``domain.names``).
    """
    s, W, domain, names = stats or {}, workload, state.domain, state.names
    lines = []
    if not state.terms:
        lines.append("**No terms:** add a query family. The other pages keep using the last "
                     f"workload built{f' ({W.name!r}, {W.m:,} × {W.n:,})' if W is not None else ''}.")
        if s and tuple(s.get("domain", ())) != domain:
            lines.append(f"The domain is now {describe_domain(domain, names)}; the "
                         "workload below is over the old one until a term is added.")
    if s:
        def sens(p):
            v = s.get(f"l{p}", math.nan)
            if not math.isfinite(v):
                return f"n/a ({s.get(f'l{p}_error', '')})"
            return f"{v:.6g}" if s.get(f"l{p}_exact", True) else f"≤ {v:.6g} (upper bound)"
        lines.append(f"**W** = `{s['name'][:120]}`  \n**m** = {s['m']:,} queries, **n** = "
                     f"{s['n']:,} cells, **domain** = {describe_domain(s['domain'], s.get('names', ()))}  \n"
                     f"**L1 sensitivity** = {sens(1)}, **L2 sensitivity** = {sens(2)}")
    note = large_domain_note(domain)
    if note:
        lines.append("⚠ " + note)
    if table is not None and tuple(table.shape) == domain:
        lines.append(f"Over the record table `{table.name}` ({', '.join(table.domain.names)}): "
                     "the Release page releases its marginals from the records.")
    elif dataset_cells is not None and domain != (dataset_cells,):
        lines.append(f"⚠ The dataset {dataset!r} has {dataset_cells} cells but the domain is "
                     f"{describe_domain(domain, names)}: releases need n = {dataset_cells}.")
    return "\n\n".join(lines)


# ================================================================ record tables
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


def plan_marginals(names: Sequence[str], sizes: Sequence[int], mode: str = "orders",
                   orders="2", sets: str = "") -> dict:
    """The marginals over attributes ``names`` of ``sizes`` cells, checked before anything is built.

    Parameters
    ----------
    names, sizes : sequence
        The chosen attributes and their numbers of cells.
    mode : {"orders", "sets"}
        All marginals of the ``orders`` (``"2"``, ``"1-2"``), or the listed
        attribute ``sets`` (:func:`parse_sets`).

    Returns
    -------
    dict
        ``names``, ``shape``, ``cells`` (of the domain), ``sets`` (attribute
        index tuples), ``queries`` (cells of all marginals), ``largest`` (cells
        of the largest marginal).

    Raises
    ------
    ValueError
        No attribute, more than :data:`MAX_ATTRIBUTES` attributes, an
        attribute above :data:`MAX_N` cells, more than :data:`MAX_CELLS`
        cells, bad orders or sets, more than :data:`MAX_MARGINALS` marginals
        or :data:`MAX_QUERIES` queries, or a marginal above the ``cells`` limit
        (:mod:`dpexplorer.queries.limits`).
    """
    chosen = list(names)
    if not chosen:
        raise ValueError("choose at least one attribute of the table")
    if len(chosen) > MAX_ATTRIBUTES:
        raise ValueError(f"{len(chosen)} attributes chosen; at most {MAX_ATTRIBUTES} are allowed")
    for name, size in zip(chosen, sizes, strict=True):
        if size > MAX_N:
            raise ValueError(f"attribute {name!r} has {size:,} cells; at most "
                             f"{MAX_N:,} per attribute are allowed")
    shape = tuple(int(s) for s in sizes)
    cells = math.prod(shape)
    if cells > MAX_CELLS:
        raise ValueError(f"the domain of {len(shape)} attributes has {cells:,} cells; at most "
                         f"{MAX_CELLS:,} are allowed")
    d = len(chosen)
    if mode == "orders":
        ks = parse_orders(orders, d)
        n_sets = sum(math.comb(d, k) for k in ks)
        if n_sets > MAX_MARGINALS:
            raise ValueError(f"the {', '.join(map(str, ks))}-way marginals of {d} attributes "
                             f"are {n_sets:,} marginals; at most {MAX_MARGINALS:,} are allowed")
        import itertools
        index_sets = [c for k in ks for c in itertools.combinations(range(d), k)]
    else:
        index_sets = [tuple(chosen.index(a) for a in s) for s in parse_sets(sets, chosen)]
        if len(index_sets) > MAX_MARGINALS:
            raise ValueError(f"{len(index_sets):,} marginals; at most {MAX_MARGINALS:,} are allowed")
    cell_counts = [math.prod(shape[i] for i in s) for s in index_sets]
    queries, largest = sum(cell_counts), max(cell_counts)
    if queries > MAX_QUERIES:
        raise ValueError(f"these marginals hold {queries:,} queries (cells); at most "
                         f"{MAX_QUERIES:,} are allowed: choose fewer attributes or lower orders")
    cap = limits.current().cells
    if largest > cap:
        raise ValueError(f"the largest marginal has {largest:,} cells; the privacy kernel counts "
                         f"marginals of at most {cap:,} cells (the cells limit, dpx.limits)")
    return {"names": tuple(chosen), "shape": shape, "cells": cells, "sets": index_sets,
            "queries": queries, "largest": largest}


def marginals_term(plan: Mapping, mode: str = "orders") -> Term:
    """The one term of a :func:`plan_marginals` plan: ``marginals`` of its orders (all
    ``k``-way marginals of two or more attributes), else ``marginal_sets``."""
    if mode == "orders" and len(plan["shape"]) > 1:
        orders = sorted({len(s) for s in plan["sets"]})
        return Term("marginals", {"k": orders[0] if len(orders) == 1 else orders})
    # listed sets (and the marginals of a single attribute: identity and/or total)
    return Term("marginal_sets", {"sets": [list(s) for s in plan["sets"]]})
