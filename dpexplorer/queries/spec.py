"""Declarative workload specs: load and save workloads built from named 1D blocks.

A spec is a plain dict (JSON / YAML serialisable) describing a union of
weighted Kronecker products of the named 1D blocks of
:data:`dpexplorer.queries.workloads.BLOCKS`::

    {"version": 1,
     "name": "my workload",                      # optional
     "domain": [50, 100, 7],                     # attribute sizes
     "attributes": ["age", "income", "sex"],     # optional attribute names
     "products": [
        {"weight": 1.0, "factors": [{"type": "prefix"}, "identity", "total"]},
        {"weight": 2.0, "factors": ["all_range", {"type": "width_range", "w": 8}, "total"]}]}

A factor is a block spec (``{"type": ..., **params}``) or, for a
parameter-free block, its type name.  Instead of ``products`` a spec may
give ``"marginals": [orders]`` or ``"range_marginals": {"orders": [...],
"kind": "all_range" | "prefix"}``; :func:`to_spec` always writes ``products``.

The parts of a spec also have short text forms, the ones people type in the
explorer and that a spec accepts where it says so: the domain as
``"age:50, income:100, sex:2"`` (:func:`parse_attributes`,
:func:`format_attributes`), marginal orders as ``2``, ``"1, 3"`` or ``"0-3"``
(:func:`parse_orders`, :func:`format_orders`; ``"marginals": "0-3"`` in a
spec), the intervals of a ``ranges`` block as ``"0-9, 20-29"``
(:func:`parse_ranges`, :func:`format_ranges`), and a block spec printed as
``Prefix`` or ``Width8`` (:func:`factor_text`).

Specs come from users (files, uploads), so loading checks sizes before
building anything (:mod:`dpexplorer.queries.limits`): the bytes of the text
(``spec_bytes``), its nesting depth (``spec_depth``; ``permuted`` blocks nest)
and its number of values with YAML aliases expanded (``spec_nodes``) before or
while parsing, then the attributes, cells and Kronecker factors the spec asks
for (``attributes``, ``cells``, ``factors``) and each block's own limits
(``queries`` for random ranges, ``explicit_entries`` for predicates).
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from . import limits, workloads
from .matrix import Kronecker, Matrix, RangeQueries, VStack, Weighted

__all__ = ["VERSION", "from_spec", "to_spec", "fingerprint", "dumps", "loads", "save", "load", "factor",
           "parse_attributes", "format_attributes", "parse_orders", "format_orders",
           "parse_ranges", "format_ranges", "factor_text", "parse_whole"]

#: Version of the spec format written by :func:`to_spec`.
VERSION = 1
_TOP_KEYS = ("version", "name", "domain", "attributes", "products", "marginals", "range_marginals")
_FORMATS = {"json": "json", "yaml": "yaml", "yml": "yaml"}
#: to_spec checks that a block's spec rebuilds it exactly up to this many entries
_CHECK_ENTRIES = 2**20


# ------------------------------------------------------------------ helpers
def _is_int(v) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def _orders(value, where: str, d: int) -> list[int]:
    if isinstance(value, str):  # the text form, e.g. "0-3"
        try:
            return parse_orders(value, d)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    orders = [value] if _is_int(value) else value
    if not isinstance(orders, list | tuple) or not orders or not all(_is_int(o) for o in orders):
        raise ValueError(f"{where}: orders must be a whole number or a non-empty list of them, got {value!r}")
    bad = [int(o) for o in orders if not 0 <= o <= d]
    if bad:
        raise ValueError(f"{where}: marginal orders {bad} are not in [0, {d}] for a {d}-attribute domain")
    return [int(o) for o in orders]


def factor(f: Mapping | str, n: int, where: str = "") -> Matrix:
    """Build one 1D block of ``n`` cells from a factor of a spec (a block spec or a type name).

    Parameters
    ----------
    f : dict or str
        ``{"type": ..., **params}`` of a block of
        :data:`dpexplorer.queries.workloads.BLOCKS`, or the type name of a
        parameter-free block.
    n : int
        Cells of the attribute.
    where : str
        Prefix of the error messages (``"products[0].factors[1]"``, or an
        attribute's name); none when empty.

    Returns
    -------
    Matrix, shape (m, n)

    Raises
    ------
    ValueError
        For an unknown type, unknown or missing parameters, or parameters the
        block refuses.
    LimitExceededError
        If the block is above its limits.
    """
    return _factor(f, n, where)


def _at(where: str, message: str) -> str:
    """``message`` prefixed by the location ``where`` (none when empty)."""
    return f"{where}: {message}" if where else message


def _factor(f, n: int, where: str) -> Matrix:
    """Build one 1D block of ``n`` cells, raising ValueError prefixed by ``where``."""
    if isinstance(f, str):
        f = {"type": f}
    if not isinstance(f, Mapping) or not isinstance(f.get("type"), str):
        raise ValueError(_at(where, f"a factor is a block type name or a dict with a string 'type' "
                                    f"key, got {f!r}; known types: {sorted(workloads.BLOCKS)}"))
    kind = f["type"]
    if kind in workloads.BLOCKS:
        sig = inspect.signature(workloads.BLOCKS[kind]).parameters
        allowed = [p for p in sig if p != "n"]
        unknown = sorted(set(f) - {"type"} - set(allowed))
        if unknown:
            raise ValueError(_at(where, f"unknown parameter(s) {unknown} for block {kind!r}; "
                                        f"allowed: {allowed}"))
        missing = [p for p in allowed if sig[p].default is inspect.Parameter.empty and p not in f]
        if missing:
            raise ValueError(_at(where, f"block {kind!r} needs parameter(s) {missing}"))
    if kind == "permuted":  # validate the base with its own path
        _factor(f["base"], n, f"{where}.base" if where else "base")
    try:
        W = workloads.block(dict(f), n)
    except limits.LimitExceededError as exc:
        exc.args = (_at(where, str(exc)),)  # keep the type (and its limit) with the location
        raise
    except (ValueError, TypeError) as exc:
        raise ValueError(_at(where, str(exc))) from None
    if W.n != n:  # pragma: no cover - blocks check their own sizes
        raise ValueError(_at(where, f"block {kind!r} has {W.n} cells but the attribute has {n}"))
    return W


# ------------------------------------------------------------- text forms
def parse_whole(value, what: str) -> int:
    """``value`` as an int: an integral number or its text (``"12"``), or ValueError naming ``what``."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return int(value)
    raise ValueError(f"{what} must be a whole number, got {value!r}")


def parse_attributes(text: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The ``domain`` and ``attributes`` of a spec from text such as ``"age:50, income:100, sex:2"``.

    Items are ``name:size`` or ``name=size``, separated by commas, semicolons
    or new lines; a bare size gets the name ``a<i>`` (1-based position).
    Sizes are read, not checked (callers apply their own limits, e.g.
    :func:`from_spec`'s or a page's).

    Returns
    -------
    (tuple of int, tuple of str)
        Attribute sizes (may be < 1: check them) and distinct names; both
        empty for empty text.

    Raises
    ------
    ValueError
        For an item that is not ``name:size`` or duplicate names.
    """
    if not isinstance(text, str):
        raise ValueError(f"the attributes must be text such as 'age:50, income:100', got {text!r}")
    items = [t.strip() for t in re.split(r"[,;\n]+", text.strip()) if t.strip()]
    sizes, names = [], []
    for i, item in enumerate(items):
        match = re.fullmatch(r"(?:([^:=]+?)\s*[:=]\s*)?([+-]?\d+)", item)
        if match is None:
            raise ValueError(f"cannot read attribute {item!r}: write name:size items separated by "
                             f"commas, e.g. age:50, income:100, sex:2")
        names.append((match.group(1) or f"a{i + 1}").strip())
        sizes.append(int(match.group(2)))
    if len(set(names)) != len(names):
        raise ValueError(f"attribute names must be distinct, got {names}")
    return tuple(sizes), tuple(names)


def format_attributes(domain, names=()) -> str:
    """``"age:50, income:100"``: the text :func:`parse_attributes` reads back; ``""`` without names."""
    if not names:
        return ""
    if len(names) != len(domain):
        raise ValueError(f"{len(names)} attribute name(s) for {len(domain)} attribute(s)")
    return ", ".join(f"{a}:{int(n)}" for a, n in zip(names, domain, strict=True))


def parse_orders(value, d: int | None = None) -> list[int]:
    """Marginal orders from ``2``, ``"0-3"``, ``"1, 3"`` or ``[0, 1, 2]``, sorted and distinct.

    ``"0-3"`` (also ``0..3``, ``0–3``) means every order from 0 to 3: "all
    0–3-way marginals" (HDMM, McKenna et al. 2018, Sec. 11.2, uses the 0- to
    3-way marginals of Adult).

    Parameters
    ----------
    value : int, str or sequence of int
        The orders.
    d : int, optional
        Number of attributes; when given, every order must be in ``[0, d]``.

    Raises
    ------
    ValueError
        If the text cannot be read, no order is given, or an order is
        negative or above ``d``.
    """
    if isinstance(value, str):
        orders: list[int] = []
        items = [t for t in re.split(r"[,;\s]+", value.strip()) if t]
        if not items:
            raise ValueError("no marginal order given: write k, a list such as 1, 2 or a span such as 0-3")
        for tok in items:
            match = re.fullmatch(r"(\d+)(?:(?:-|\.\.|–)(\d+))?", tok)
            if match is None:
                raise ValueError(f"cannot read {tok!r} as a marginal order: write k, a list such as "
                                 f"1, 2 or a span such as 0-3")
            lo = int(match.group(1))
            hi = int(match.group(2)) if match.group(2) is not None else lo
            if lo > hi:
                raise ValueError(f"the span of orders {tok!r} is reversed: write lo-hi with lo <= hi")
            orders.extend(range(lo, hi + 1))
    elif isinstance(value, int | np.integer | float | np.floating) and not isinstance(value, bool):
        orders = [parse_whole(value, "the marginal order k")]
    elif isinstance(value, list | tuple | np.ndarray):
        orders = [parse_whole(v, "a marginal order") for v in value]
        if not orders:
            raise ValueError("no marginal order given: give at least one order k")
    else:
        raise ValueError(f"marginal orders are a whole number, a list or a text such as 0-3, got {value!r}")
    orders = sorted(set(orders))
    if d is not None:
        bad = [o for o in orders if not 0 <= o <= d]
        if bad:
            what = f"the marginal order k = {bad[0]}" if len(orders) == 1 else f"the marginal orders {bad}"
            raise ValueError(f"{what} must be in [0, {d}] for a {d}-attribute domain")
    elif orders[0] < 0:
        raise ValueError(f"marginal orders must be >= 0, got {orders[0]}")
    return orders


def format_orders(value) -> str:
    """``"2"``, ``"0–3"`` or ``"1, 3"``: marginal orders as :func:`parse_orders` reads them.

    A value that is not orders is shown as it is (``str(value)``).
    """
    try:
        orders = parse_orders(value)
    except ValueError:
        return str(value)
    if len(orders) > 2 and orders == list(range(orders[0], orders[-1] + 1)):
        return f"{orders[0]}–{orders[-1]}"
    return ", ".join(map(str, orders))


def parse_ranges(text) -> list[tuple[int, int]]:
    """The ``ranges`` parameter of a ``ranges`` block from text such as ``"0-9, 20-29; 40..47 60"``.

    Items are inclusive 0-based cell intervals ``lo-hi``, ``lo..hi``,
    ``lo:hi`` or a single cell ``i``, separated by commas, semicolons,
    spaces or new lines; a list of ``(lo, hi)`` pairs is accepted as well.
    Whether they fit a domain is the block's check.

    Raises
    ------
    ValueError
        If an item cannot be read, ``lo > hi``, or no interval is given.
    """
    if isinstance(text, str):
        tokens = [t for t in re.split(r"[,;\s]+", text.strip().strip("[]()")) if t]
        out = []
        for tok in tokens:
            match = re.fullmatch(r"(\d+)(?:(?:-|\.\.|:|–)(\d+))?", tok.strip("[]()"))
            if match is None:
                raise ValueError(f"cannot read {tok!r} as a range: write inclusive, 0-based cell "
                                 f"intervals lo-hi, e.g. 0-9, 20-29")
            lo = int(match.group(1))
            hi = int(match.group(2)) if match.group(2) is not None else lo
            out.append((lo, hi))
    else:
        arr = np.asarray(text)
        if arr.ndim == 1 and arr.size == 2:
            arr = arr[None, :]
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise ValueError(f"ranges must be (lo, hi) pairs, got an array of shape {arr.shape}")
        out = [(parse_whole(lo, "a range bound"), parse_whole(hi, "a range bound")) for lo, hi in arr.tolist()]
    if not out:
        raise ValueError("no ranges given: write inclusive cell intervals lo-hi, e.g. 0-9, 20-29")
    for lo, hi in out:
        if lo > hi:
            raise ValueError(f"range [{lo}, {hi}] is reversed: write lo-hi with lo <= hi")
    return out


def format_ranges(ranges, limit: int | None = None) -> str:
    """``"0-9, 20-29, 40"``: inclusive intervals as :func:`parse_ranges` reads them.

    Only the first ``limit`` intervals when given, then ``…``.
    """
    ranges = list(ranges)
    shown = ranges if limit is None else ranges[:limit]
    text = ", ".join(f"{int(lo)}" if lo == hi else f"{int(lo)}-{int(hi)}" for lo, hi in shown)
    return text + (", …" if len(shown) < len(ranges) else "")


#: Short names of the blocks for :func:`factor_text`.
_SHORT = {"identity": "Identity", "total": "Total", "identity_total": "Identity+Total",
          "prefix": "Prefix", "all_range": "AllRange", "width_range": "Width",
          "random_ranges": "Random", "ranges": "Ranges", "predicates": "Predicates",
          "permuted": "Permuted"}


def factor_text(f: Mapping | str) -> str:
    """A factor of a spec in a few characters: ``Prefix``, ``Width8``, ``Random2000``, ``Ranges(3)``.

    For products written as ``Prefix ⊗ Width8 ⊗ Total``.
    """
    if isinstance(f, str):
        f = {"type": f}
    kind = f.get("type", "?")
    if kind == "width_range":
        return f"Width{f.get('w')}"
    if kind == "random_ranges":
        return f"Random{f.get('m', 2000)}"
    if kind == "ranges":
        return f"Ranges({len(f.get('ranges', []))})"
    return _SHORT.get(kind, kind)


# ---------------------------------------------------------------- from_spec
def from_spec(spec: Mapping) -> Matrix:
    """Build the workload described by a spec.

    Parameters
    ----------
    spec : dict
        ``{"version": 1, "name": str, "domain": [n_1, ..., n_d], "attributes":
        [str, ...], "products": [{"weight": w, "factors": [f_1, ..., f_d]}, ...]}``
        (``version``, ``name``, ``attributes`` and ``weight`` optional), or the
        ``marginals`` / ``range_marginals`` shorthand instead of ``products``.

    Returns
    -------
    Matrix
        ``(m, n_1·...·n_d)`` workload with ``domain == tuple(spec["domain"])``:
        the bare block for one product of one factor with weight 1, a
        :class:`~dpexplorer.queries.matrix.Kronecker` for one product, else the
        (weighted) union of the products in their order.

    Raises
    ------
    ValueError
        If the spec is not a mapping, has unknown top-level keys, an
        unsupported version, a missing or invalid domain, bad attribute names,
        not exactly one of ``products``/``marginals``/``range_marginals``, a
        product with unknown keys, a number of factors other than the number of
        attributes, a weight that is not a positive finite number, or a factor
        with an unknown block type or bad parameters.  The message names the
        offending part, e.g. ``products[1].factors[0]``.
    LimitExceededError
        If the spec nests deeper than ``spec_depth`` (or contains itself), has
        more values than ``spec_nodes`` (shared sub-lists counted as often as
        they appear), more attributes than ``attributes``, an attribute above
        ``cells``, more Kronecker factors than ``factors``, or a block above its
        own limits -- all checked before the workload is built.
    """
    if not isinstance(spec, Mapping):
        raise ValueError(f"a workload spec must be a mapping (dict), got {type(spec).__name__}")
    limits.document(spec if isinstance(spec, dict) else dict(spec), "spec")
    unknown = sorted(str(k) for k in spec if k not in _TOP_KEYS)
    if unknown:
        raise ValueError(f"unknown top-level key(s) {unknown}; allowed: {list(_TOP_KEYS)}")
    version = spec.get("version", VERSION)
    if not _is_int(version) or version != VERSION:
        raise ValueError(f"version: unsupported spec version {version!r}; supported: [{VERSION}]")
    if "domain" not in spec:
        raise ValueError("domain: missing; give the attribute sizes, e.g. \"domain\": [50, 100]")
    domain = spec["domain"]
    if not isinstance(domain, list | tuple) or not domain:
        raise ValueError(f"domain: must be a non-empty list of attribute sizes, got {domain!r}")
    limits.check("attributes", len(domain), "domain: number of attributes")
    for i, n in enumerate(domain):
        if not _is_int(n) or n < 1:
            raise ValueError(f"domain[{i}]: attribute sizes must be positive whole numbers, got {n!r}")
        limits.check("cells", n, f"domain[{i}]: attribute size")
    domain = [int(n) for n in domain]
    d = len(domain)
    attributes = spec.get("attributes")
    if attributes is not None:
        if (not isinstance(attributes, list | tuple) or len(attributes) != d
                or not all(isinstance(a, str) for a in attributes) or len(set(attributes)) != d):
            raise ValueError(f"attributes: must be {d} distinct names, one per domain attribute, got {attributes!r}")
    name = spec.get("name")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"name: must be a string, got {name!r}")
    given = [k for k in ("products", "marginals", "range_marginals") if k in spec]
    if len(given) != 1:
        raise ValueError(f"a spec needs exactly one of 'products', 'marginals', 'range_marginals'; got {given}")

    if given[0] == "marginals":
        W = workloads.marginals(domain, _orders(spec["marginals"], "marginals", d))
    elif given[0] == "range_marginals":
        rm = spec["range_marginals"]
        if not isinstance(rm, Mapping):
            rm = {"orders": rm}
        bad = sorted(str(k) for k in rm if k not in ("orders", "kind"))
        if bad or "orders" not in rm:
            raise ValueError(f"range_marginals: expected keys 'orders' (required) and 'kind', got {sorted(map(str, rm))}")
        kind = rm.get("kind", "all_range")
        if kind not in ("all_range", "prefix"):
            raise ValueError(f"range_marginals.kind: must be 'all_range' or 'prefix', got {kind!r}")
        W = workloads.range_marginals(domain, _orders(rm["orders"], "range_marginals.orders", d), kind)
    else:
        W = _products(spec["products"], domain)
    if name is not None:
        W.name = name
    if attributes is not None:
        W.attributes = tuple(attributes)
    return W


def _products(products, domain: list[int]) -> Matrix:
    if not isinstance(products, list | tuple) or not products:
        raise ValueError(f"products: must be a non-empty list of {{'weight', 'factors'}} dicts, got {products!r}")
    terms, weights = [], []
    for i, p in enumerate(products):
        where = f"products[{i}]"
        if not isinstance(p, Mapping):
            raise ValueError(f"{where}: must be a dict with keys 'factors' and optional 'weight', got {p!r}")
        bad = sorted(str(k) for k in p if k not in ("weight", "factors"))
        if bad:
            raise ValueError(f"{where}: unknown key(s) {bad}; allowed: ['weight', 'factors']")
        w = p.get("weight", 1.0)
        if isinstance(w, bool) or not isinstance(w, int | float | np.number) or not (math.isfinite(w) and w > 0):
            raise ValueError(f"{where}.weight: must be a positive finite number, got {w!r}")
        factors = p.get("factors")
        if not isinstance(factors, list | tuple):
            raise ValueError(f"{where}.factors: missing or not a list; give one 1D block per attribute")
        if len(factors) != len(domain):
            raise ValueError(f"{where}.factors: {len(factors)} factor(s) for a domain of {len(domain)} "
                             f"attribute(s) {domain}; give one 1D block per attribute")
        if i == 0:  # every product has one factor per attribute: check them all before building any
            limits.check("factors", len(products) * len(domain),
                         f"products: Kronecker factors ({len(products):,} products × {len(domain)} attributes)")
        terms.append(workloads.kron([_factor(f, n, f"{where}.factors[{j}]")
                                     for j, (f, n) in enumerate(zip(factors, domain, strict=True))]))
        weights.append(float(w))
    if len(terms) == 1 and weights[0] == 1.0:
        return terms[0]
    return workloads.union(terms, weights)


# ------------------------------------------------------------------ to_spec
def _plain(x):
    """A JSON/YAML-safe deep copy: numpy scalars/arrays and tuples become Python types."""
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple | np.ndarray):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return copy.deepcopy(x)


def _terms(W: Matrix, where: str) -> list[tuple[float, list[tuple[dict, int]]]]:
    """``[(weight, [(block spec, n), ...]), ...]``: ``W`` as a union of weighted products."""
    if W.spec is not None and len(W.domain) == 1:
        spec = W.spec if isinstance(W.spec, Mapping) else {"type": W.spec}
        try:
            B = workloads.block(_plain(spec), W.n)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{where}: the spec {spec!r} of {W!r} does not build a block: {exc}") from None
        same = B.shape == W.shape
        if same and W.m * W.n <= _CHECK_ENTRIES:
            same = np.array_equal(B.dense(), W.dense())
        elif same and isinstance(W, RangeQueries) and isinstance(B, RangeQueries):
            same = np.array_equal(B.lo, W.lo) and np.array_equal(B.hi, W.hi)
        if not same:
            raise ValueError(f"{where}: the spec {spec!r} of {W!r} does not rebuild it "
                             f"(got {B!r}); its spec is incomplete or stale")
        return [(1.0, [(_plain(spec), W.n)])]
    if W.spec is not None and not isinstance(W, Weighted | VStack | Kronecker):
        raise ValueError(f"{where}: {W!r} has the 1D spec {W.spec!r} but the {len(W.domain)}-attribute "
                         f"domain {W.domain}; a block spec describes one attribute")
    if isinstance(W, Weighted):
        if not (math.isfinite(W.weight) and W.weight > 0):
            raise ValueError(f"{where}: weight {W.weight} is not positive; a spec holds positive finite weights only")
        return [(W.weight * w, fs) for w, fs in _terms(W.base, f"{where}.base")]
    if isinstance(W, VStack):
        return [t for j, b in enumerate(W.blocks) for t in _terms(b, f"{where}.blocks[{j}]")]
    if isinstance(W, Kronecker):
        weight, factors = 1.0, []
        for j, f in enumerate(W.factors):
            ts = _terms(f, f"{where}.factors[{j}]")
            if len(ts) != 1:
                raise ValueError(f"{where}.factors[{j}]: a union of {len(ts)} products inside a Kronecker "
                                 f"factor cannot be written as a spec; expand it into a union of products")
            weight *= ts[0][0]
            factors += ts[0][1]
        return [(weight, factors)]
    raise ValueError(f"{where}: {type(W).__name__} matrix {W.name!r} of shape {W.shape} has no spec; only "
                     f"named 1D blocks {sorted(workloads.BLOCKS)}, their Kronecker products, weighted "
                     f"versions and unions can be written as a spec")


def to_spec(W: Matrix) -> dict:
    """The canonical spec of a workload built from named 1D blocks (inverse of :func:`from_spec`).

    Parameters
    ----------
    W : Matrix
        ``(m, n)`` workload: a 1D block with a ``spec``, a ``Kronecker`` of
        such blocks, a ``Weighted`` of those or a ``VStack`` of those (nested
        unions are flattened in row order, nested weights multiplied).

    Returns
    -------
    dict
        ``{"version", "name", "domain", ["attributes",] "products"}`` with one
        ``{"weight": float, "factors": [block spec, ...]}`` per product, such
        that ``from_spec(to_spec(W)).dense()`` equals ``W.dense()``.

    Raises
    ------
    ValueError
        If a part of ``W`` has no spec (e.g. a ``Dense`` matrix built by hand;
        the message gives its path such as ``W.blocks[1].factors[0]``), a weight
        is not positive, a Kronecker factor is a union, or the products'
        attribute sizes do not match ``W.domain``.
    """
    if not isinstance(W, Matrix):
        raise ValueError(f"to_spec needs a dpexplorer Matrix, got {type(W).__name__}")
    domain = [int(n) for n in W.domain]
    products = []
    for i, (w, fs) in enumerate(_terms(W, "W")):
        sizes = [n for _, n in fs]
        if sizes != domain:
            raise ValueError(f"product {i} has attribute sizes {sizes} but the workload's domain is "
                             f"{domain}; a spec needs one 1D block per attribute")
        products.append({"weight": float(w), "factors": [s for s, _ in fs]})
    out = {"version": VERSION, "name": W.name, "domain": domain}
    attributes = getattr(W, "attributes", None)
    if attributes is not None and len(attributes) == len(domain):
        out["attributes"] = [str(a) for a in attributes]
    out["products"] = products
    return out


def fingerprint(W: Matrix) -> str | None:
    """A digest two workloads share when :func:`to_spec` describes them as the same matrix.

    The canonical spec without its ``name`` and ``attributes`` (they label the
    matrix, they do not change it), as sorted JSON, hashed (SHA-256, hex).
    Matrix objects compare by identity; this lets a cache of strategies serve
    two objects built from the same blocks (two sessions' ``all_range(256)``).

    Parameters
    ----------
    W : Matrix
        ``(m, n)`` workload.

    Returns
    -------
    str or None
        64 hex digits, or ``None`` when ``W`` has no spec (a ``Dense`` matrix
        built by hand, ...): such a workload is only ever equal to itself.
    """
    try:
        spec = to_spec(W)
    except (ValueError, TypeError):
        return None
    spec.pop("name", None)
    spec.pop("attributes", None)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------- text / IO
def _format(fmt: str) -> str:
    if fmt not in _FORMATS:
        raise ValueError(f"unknown spec format {fmt!r}; use 'json' or 'yaml'")
    return _FORMATS[fmt]


def dumps(W: Matrix | Mapping, format: str = "json") -> str:
    """The canonical spec of ``W`` (a workload, or a spec dict to normalise) as JSON or YAML text.

    Raises
    ------
    ValueError
        For an unknown ``format`` or a workload/spec that :func:`to_spec` /
        :func:`from_spec` rejects.
    """
    fmt = _format(format)
    spec = to_spec(from_spec(W) if isinstance(W, Mapping) else W)
    if fmt == "json":
        return json.dumps(spec, indent=2) + "\n"
    return yaml.safe_dump(spec, sort_keys=False, default_flow_style=None, allow_unicode=True)


def loads(text: str, format: str | None = None) -> Matrix:
    """Build a workload from JSON or YAML spec text (``format=None``: JSON if it parses, else YAML).

    The size of the text, its nesting depth and (YAML) its number of values
    with aliases expanded are checked before the document is built, so a
    small text cannot make a huge document (see the module docstring); the
    depth of its flow brackets is measured before any parser reads it
    (:func:`_flow_depth`), so a parser's own depth limit never answers first.

    Raises
    ------
    ValueError
        If the text does not parse (with the parser's reason), has a YAML alias
        inside its own anchor (a recursive document), or the spec is invalid.
    LimitExceededError
        Above the ``spec_bytes``, ``spec_depth`` or ``spec_nodes`` limits, or
        as :func:`from_spec`.
    """
    fmt = None if format is None else _format(format)
    if not isinstance(text, str):
        raise ValueError(f"spec text must be a string, got {type(text).__name__}")
    check_text(text)
    data: Any = None  # whatever the parser returns; from_spec checks it
    reason: str | None = None
    if fmt in (None, "json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            reason = f"cannot parse the spec as JSON: {exc}"
        except RecursionError:  # the decoder nests one call per level
            raise limits.LimitExceededError("spec_depth", "spec text: nesting depth", None,
                                            limits.current().spec_depth) from None
    if fmt == "yaml" or (fmt is None and reason is not None):
        try:
            _scan_yaml(text)
            data, reason = yaml.load(text, Loader=_YAML_LOADER), None
        except yaml.YAMLError as exc:
            reason = f"cannot parse the spec as {'YAML' if fmt else 'JSON or YAML'}: {exc}"
    if reason is not None:
        raise ValueError(reason)
    return from_spec(data)


#: libyaml's loader when PyYAML was built with it (fast); the pure-Python one otherwise.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def check_text(text: str, what: str = "spec text") -> None:
    """The ``spec_bytes`` and ``spec_depth`` limits on YAML/JSON ``text``, checked before any parser reads it.

    The depth is that of flow brackets (:func:`_flow_depth`): libyaml refuses
    deep flow nesting with its own error, and Python's JSON decoder recurses
    once per level, before a limit on the parsed object could apply.

    Raises
    ------
    LimitExceededError
        If ``text`` is above the ``spec_bytes`` limit or nests flow brackets
        deeper than ``spec_depth``.
    """
    _check_bytes(text)
    if _flow_depth(text) > limits.current().spec_depth:
        raise limits.LimitExceededError("spec_depth", f"{what}: nesting depth (flow brackets)", None,
                                        limits.current().spec_depth)


def _check_bytes(text: str) -> None:
    """The ``spec_bytes`` limit on the UTF-8 size of ``text`` (1 to 4 bytes a character)."""
    limit = limits.current().spec_bytes
    if 4 * len(text) > limit:
        size = len(text) if len(text) > limit else len(text.encode("utf-8", "surrogatepass"))
        limits.check("spec_bytes", size, "spec text: bytes")


#: what the flow-depth scan stops at: quotes, comments, brackets, block-scalar indicators
_FLOW_MARKS = re.compile(r"[\[\]{}'\"#|>]")


def _flow_depth(text: str) -> int:
    """Deepest nesting of flow collections (``[``, ``{``) in JSON or YAML text, read before parsing.

    A parser may refuse deep text with its own error before any limit of
    ours sees a node: libyaml (as bundled with PyYAML 6.0.4) stops at 1,000
    flow levels with a ``ScannerError``, because its scanner reads a whole line
    of ``[[[...`` ahead, looking for an implicit key (the YAML spec keeps
    one on a single line of at most 1024 characters), before it emits the
    first event that :func:`_scan_yaml` could count.  Block nesting
    (indentation, ``- ``, ``? ``) is rolled one token at a time, so the event
    count of :func:`_scan_yaml` measures it exactly.

    The scan follows the YAML 1.2 spec's token rules (chapter 7, flow styles)
    closely enough for this bound: quoted scalars (``'...'`` with ``''``
    escapes, ``"..."`` with backslash escapes) begin only at the start of a
    token; ``#`` starts a comment only after white space or at a line start;
    outside flow collections a bracket opens one only at the start of a node
    (line start, or after ``- ``, ``? ``, ``: ``, an anchor or a tag), elsewhere
    it is part of a plain scalar such as ``name: a[1]``; the lines of a block
    scalar (``|``, ``>``) are skipped.  One pass over the text; cost O(length).

    Returns
    -------
    int
        Flow levels open at the deepest point (0 for block-only YAML).
    """
    depth = deepest = 0
    pos, n = 0, len(text)
    while True:
        m = _FLOW_MARKS.search(text, pos)
        if m is None:
            return deepest
        i, c = m.start(), m.group()
        pos = i + 1
        j = i - 1  # the last character before i on this line that is not a space or tab
        while j >= 0 and text[j] in " \t":
            j -= 1
        prev = "\n" if j < 0 else text[j]
        spaced = j < i - 1
        if c == "#":
            if spaced or prev == "\n":
                end = text.find("\n", i)
                pos = n if end < 0 else end
            continue
        if depth:  # flow context: brackets always count; a quote begins a scalar after an indicator
            start = prev in "[{,:?\n" or (spaced and _after_property(text, j))
        else:  # block context: only at the start of a node
            start = prev == "\n" or (spaced and prev in "-?:") or (spaced and _after_property(text, j))
        if c in "'\"":
            if start:
                pos = _quoted_end(text, i)
        elif c in "[{":
            if depth or start:
                depth += 1
                deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(depth - 1, 0)
        elif not depth and start:  # "|" or ">": a block scalar; skip its more-indented lines
            line = text.rfind("\n", 0, i) + 1
            indent = len(text[line:i]) - len(text[line:i].lstrip(" "))
            end = text.find("\n", i)
            while end >= 0:
                nxt = text.find("\n", end + 1)
                body = text[end + 1:n if nxt < 0 else nxt]
                if body.strip() and len(body) - len(body.lstrip(" ")) <= indent:
                    break
                end = nxt
            pos = n if end < 0 else end


def _after_property(text: str, j: int) -> bool:
    """Whether the word ending at ``text[j]`` is an anchor (``&a``) or a tag (``!t``, ``!!seq``)."""
    k = j
    while k >= 0 and text[k] not in " \t\n[]{},":
        k -= 1
    return text[k + 1:k + 2] in ("&", "!")


def _quoted_end(text: str, i: int) -> int:
    """Index just past the quoted scalar opening at ``text[i]`` (the end of the text if unterminated)."""
    q = text[i]
    k = i + 1
    while True:
        k = text.find(q, k)
        if k < 0:
            return len(text)
        if q == "'":
            if text[k + 1:k + 2] == "'":  # '' is an escaped quote
                k += 2
                continue
            return k + 1
        b = k - 1  # a double quote preceded by an odd number of backslashes is escaped
        while text[b] == "\\":
            b -= 1
        if (k - 1 - b) % 2 == 0:
            return k + 1
        k += 1


def _scan_yaml(text: str) -> tuple[int, int]:
    """Nesting depth and values (aliases expanded) of YAML text, from its events, before composing.

    The events come from an iterative parser, so neither a deep nesting (which
    would overflow a recursive composer) nor aliases repeated many times (a
    "billion laughs" document) cost more than the text's length.

    Returns
    -------
    (int, int)
        Depth and values as :func:`dpexplorer.queries.limits.document` counts them.

    Raises
    ------
    LimitExceededError
        Deeper than ``spec_depth`` or more values than ``spec_nodes``.
    ValueError
        For an alias used inside its own anchor (a document containing itself).
    yaml.YAMLError
        If the text does not parse.
    """
    lim = limits.current()
    nodes = depth = 0
    sizes: dict[str, tuple[int, int]] = {}  # anchor -> (values, levels) of the anchored node
    open_: list[list] = [[None, 0, 0]]  # per open collection: anchor, values before it, deepest level below
    for ev in yaml.parse(text, Loader=_YAML_LOADER):
        level = len(open_) - 1  # collections open around this event
        if isinstance(ev, yaml.AliasEvent):
            if ev.anchor not in sizes:
                if any(a == ev.anchor for a, _, _ in open_):
                    raise ValueError(f"the spec's YAML alias *{ev.anchor} is inside its own anchor "
                                     f"&{ev.anchor}: a recursive document cannot be a spec")
                continue  # an undefined alias: composing reports it
            values, levels = sizes[ev.anchor]
            nodes += values
            open_[-1][2] = max(open_[-1][2], level + levels)
        elif isinstance(ev, yaml.ScalarEvent):
            nodes += 1
            if ev.anchor is not None:
                sizes[ev.anchor] = (1, 0)
        elif isinstance(ev, yaml.CollectionStartEvent):
            open_.append([ev.anchor, nodes, level + 1])
            nodes += 1
        elif isinstance(ev, yaml.CollectionEndEvent):
            anchor, before, deepest = open_.pop()  # this collection is `level` deep
            if anchor is not None:
                sizes[anchor] = (nodes - before, deepest - level + 1)
            open_[-1][2] = max(open_[-1][2], deepest)
        depth = max(depth, open_[-1][2], len(open_) - 1)
        if depth > lim.spec_depth:
            raise limits.LimitExceededError("spec_depth", "spec text: nesting depth", None, lim.spec_depth)
        if nodes > lim.spec_nodes:
            raise limits.LimitExceededError("spec_nodes", "spec text: number of values (YAML aliases "
                                            "expanded)", None, lim.spec_nodes)
    return depth, nodes


def save(W: Matrix | Mapping, path: str | Path) -> Path:
    """Write the spec of ``W`` to ``path``; the format comes from its suffix (.json, .yaml, .yml).

    Raises
    ------
    ValueError
        For another suffix, or a workload :func:`to_spec` rejects.
    OSError
        If the file cannot be written.
    """
    path = Path(path)
    fmt = _FORMATS.get(path.suffix.lower().lstrip("."))
    if fmt is None:
        raise ValueError(f"cannot tell the spec format from the suffix of {str(path)!r}; use .json, .yaml or .yml")
    path.write_text(dumps(W, fmt), encoding="utf-8")
    return path


def load(path: str | Path) -> Matrix:
    """Read a workload spec file (.json, .yaml/.yml; other suffixes: auto-detected).

    Raises
    ------
    ValueError
        If the file is not UTF-8 text, does not parse or the spec is invalid
        (the message names the file).
    LimitExceededError
        If the file is larger than the ``spec_bytes`` limit (checked before
        reading it), or as :func:`loads`.
    OSError
        If the file cannot be read.
    """
    path = Path(path)
    fmt = _FORMATS.get(path.suffix.lower().lstrip("."))
    limits.check("spec_bytes", path.stat().st_size, f"{path}: bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: a spec file must be UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return loads(text, fmt)
    except limits.LimitExceededError as exc:
        exc.args = (f"{path}: {exc}",)
        raise
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
