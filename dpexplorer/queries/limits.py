"""Size limits, checked from the arguments before anything is allocated; one place for engine and app.

A tiny input can ask for a huge allocation: ``all_range(10**9)`` needs
vectors of ``10**9`` cells, ``marginals((2,) * 40, 20)`` is a union of
``C(40, 20) ≈ 1.4·10¹¹`` Kronecker products, a 1 MB YAML spec can alias one
predicate row 300,000 times.  Every public entry point computes the size it
is asked for from its arguments (or the spec) and compares it with the limit
below *before* allocating, raising :class:`LimitExceededError` (a
``ValueError``) that names the argument, the size asked for, the limit and
how to raise it.

=====================  ==========  ================================================
limit                  default     what it bounds
=====================  ==========  ================================================
``cells``              2**24       cells of one attribute, of a 2D grid, of a
                                   histogram, and of any vector materialised over
                                   a domain (data, permutation); Kronecker domains
                                   may be larger (they stay factorised)
``queries``            2**24       queries whose rows or answers are materialised
                                   (random ranges, explicit ranges and rectangles,
                                   release answers, per-query errors)
``strategy_rows``      2**24       rows of a strategy measured (noisy answers ``y``)
``explicit_entries``   2**24       entries ``m·n`` of an explicit 0/1 predicate matrix
``attributes``         64          attributes of a domain (Kronecker factors per product)
``factors``            2**18       Kronecker factors summed over the products of a
                                   union (``C(d, k)·d`` for the k-way marginals)
``bins``               2**24       histogram bins (all axes multiplied)
``spec_depth``         32          nesting depth of a spec document (``permuted`` blocks)
``spec_bytes``         2**26       bytes of spec text (64 MiB)
``spec_nodes``         2**25       values of a spec document, YAML aliases expanded
``upload_bytes``       2**28       bytes of a data file read (CSV; 256 MiB)
=====================  ==========  ================================================

The defaults let a laptop answer with vectors of at most a few hundred MiB.
Raise them on a bigger machine, for the current thread (or asyncio task)::

    with dpx.limits.override(cells=2**28, queries=2**26):
        W = dpx.workloads.all_range(10**8)

for the whole process with :func:`configure`, or before starting Python with
the environment variable ``DPEXPLORER_LIMITS="cells=2**28,queries=1e8"``
(read once, at import).  A server (the explorer app) may lower them the same
way; :func:`current` is what every check reads.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import numbers
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields, replace

__all__ = ["Limits", "LimitExceededError", "ENV_VAR", "DEFAULTS", "current", "override", "configure",
           "parse_env", "check", "whole_number", "document", "as_dict"]

#: Environment variable read at import: comma-separated ``name=value`` pairs.
ENV_VAR = "DPEXPLORER_LIMITS"


@dataclass(frozen=True)
class Limits:
    """The size limits in force (see the module docstring for what each bounds)."""

    cells: int = 2**24
    queries: int = 2**24
    strategy_rows: int = 2**24
    explicit_entries: int = 2**24
    attributes: int = 64
    factors: int = 2**18
    bins: int = 2**24
    spec_depth: int = 32
    spec_bytes: int = 2**26
    spec_nodes: int = 2**25
    upload_bytes: int = 2**28


#: One line per limit, used in the messages.
_BOUNDS = {
    "cells": "cells of one attribute or of a vector over the domain",
    "queries": "queries whose rows or answers are materialised",
    "strategy_rows": "rows of a strategy whose noisy answers are drawn",
    "explicit_entries": "entries of an explicit 0/1 predicate matrix",
    "attributes": "attributes of a domain",
    "factors": "Kronecker factors summed over the products of a union",
    "bins": "histogram bins",
    "spec_depth": "nesting depth of a workload spec",
    "spec_bytes": "bytes of workload spec text",
    "spec_nodes": "values of a workload spec, YAML aliases expanded",
    "upload_bytes": "bytes of a data file",
}
_NAMES = tuple(f.name for f in fields(Limits))


class LimitExceededError(ValueError):
    """An argument asks for more than a size limit allows; nothing was allocated.

    Attributes
    ----------
    limit : str
        Name of the limit (a field of :class:`Limits`).
    value : int or None
        What was asked for (``None`` when a walk stopped as soon as it passed the limit).
    allowed : int
        The limit in force.
    what : str
        What was asked for, in the caller's terms (e.g. ``"column norms of 'W' (one per cell)"``).
    bounds : str
        What the limit counts, in words (e.g. ``"histogram bins"``): the message without
        the caller's terms and without the Python advice can be built from these.
    """

    def __init__(self, limit: str, what: str, value: int | None, allowed: int):
        self.limit, self.value, self.allowed = limit, value, allowed
        self.what, self.bounds = what, _BOUNDS[limit]
        asked = "is" if value is None else f"= {value:,} is"
        super().__init__(
            f"{what} {asked} above the `{limit}` limit of {allowed:,} ({_BOUNDS[limit]}); "
            f"nothing was allocated. On a machine with the memory for it, raise the limit: "
            f"`with dpx.limits.override({limit}=...)`, dpx.limits.configure({limit}=...) or "
            f"{ENV_VAR}='{limit}=...'")


def _validated(values: dict, where: str) -> dict:
    for name, v in values.items():
        if name not in _NAMES:
            raise TypeError(f"{where}: unknown limit {name!r}; the limits are {list(_NAMES)}")
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"{where}: limit {name} must be a whole number >= 1, got {v!r}")
    return {k: int(v) for k, v in values.items()}


def parse_env(text: str | None) -> dict[str, int]:
    """The limits set by a ``DPEXPLORER_LIMITS`` value such as ``"cells=2**28, queries=1e8"``.

    Values are whole numbers, written plainly (``1_000_000``), as a power
    (``2**28``) or in exponent notation (``1e8``).

    Raises
    ------
    ValueError
        For a malformed pair or a value that is not a whole number >= 1, naming
        the variable; TypeError for an unknown limit.
    """
    out: dict[str, int] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        name, sep, raw = (p.strip() for p in pair.partition("="))
        value: int | None = None
        try:
            if "**" in raw:
                base, _, exp = raw.partition("**")
                value = int(base) ** int(exp)
            else:
                try:
                    value = int(raw)
                except ValueError:
                    f = float(raw)
                    value = int(f) if f.is_integer() else None
        except (ValueError, OverflowError):
            value = None
        if not sep or value is None:
            raise ValueError(f"{ENV_VAR}: cannot read {pair.strip()!r}; write name=value pairs separated "
                             f"by commas, e.g. {ENV_VAR}='cells=2**28,queries=1e8'")
        out[name] = value
    return _validated(out, ENV_VAR)


#: The built-in defaults updated by ``DPEXPLORER_LIMITS`` (at import).
DEFAULTS = replace(Limits(), **parse_env(os.environ.get(ENV_VAR)))
_process = DEFAULTS
_scoped: contextvars.ContextVar[Limits | None] = contextvars.ContextVar("dpexplorer_limits", default=None)


def current() -> Limits:
    """The limits in force here: an :func:`override` of this context, else the process's."""
    scoped = _scoped.get()
    return _process if scoped is None else scoped


@contextlib.contextmanager
def override(**limits: int) -> Iterator[Limits]:
    """Change limits inside a ``with`` block, for this thread or asyncio task only.

    Raises
    ------
    TypeError
        For an unknown limit name.
    ValueError
        For a value that is not a whole number >= 1.
    """
    new = replace(current(), **_validated(limits, "dpx.limits.override"))
    token = _scoped.set(new)
    try:
        yield new
    finally:
        _scoped.reset(token)


def configure(**limits: int) -> Limits:
    """Set limits for the whole process (e.g. a server at start-up); returns the previous ones.

    ``configure(**asdict(DEFAULTS))`` restores the defaults.

    Raises
    ------
    TypeError, ValueError
        As :func:`override`.
    """
    global _process
    previous = _process
    _process = replace(_process, **_validated(limits, "dpx.limits.configure"))
    return previous


def check(limit: str, value: int, what: str) -> int:
    """``value`` if it is within ``limit``, else :class:`LimitExceededError` naming ``what``.

    Parameters
    ----------
    limit : str
        A field of :class:`Limits`.
    value : int
        The size asked for, computed from the arguments (nothing allocated yet).
    what : str
        The argument or quantity, e.g. ``"all_range: n"``.
    """
    allowed = getattr(current(), limit)
    if value > allowed:
        raise LimitExceededError(limit, what, int(value), allowed)
    return value


def whole_number(value, what: str, minimum: int = 1, limit: str | None = None) -> int:
    """``value`` as an int: a whole number (not a bool) >= ``minimum``, within ``limit`` if given.

    Used for sizes and seeds (``minimum=0``).

    Raises
    ------
    ValueError
        If ``value`` is not a whole number >= ``minimum`` (naming ``what``).
    LimitExceededError
        If it is above the limit.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{what} must be a whole number >= {minimum}, got {value!r}")
    value = int(value)
    return check(limit, value, what) if limit is not None else value


def document(obj, what: str, outer_depth: int = 0) -> tuple[int, int]:
    """Nesting depth and number of values of a document of dicts and lists, within the limits.

    Shared sub-documents (YAML aliases, a list repeated by reference) count
    as often as they appear -- what a consumer expanding them would build --
    but are walked once, so the cost is that of the objects that exist.  A
    numpy array counts ``ndim`` levels and ``size`` values; anything else is
    one value.

    Parameters
    ----------
    obj : dict, list or tuple
        E.g. a parsed workload spec.
    what : str
        Its name in messages.
    outer_depth : int
        Levels of the document ``obj`` will be nested in.

    Returns
    -------
    (int, int)
        Depth (a scalar has depth 0) and number of values, keys included.

    Raises
    ------
    LimitExceededError
        Deeper than ``spec_depth`` (also for a document containing itself) or
        more values than ``spec_nodes``; raised as soon as the walk finds it.
    """
    if not isinstance(obj, dict | list | tuple):
        return _leaf(obj)
    lim = current()
    memo: dict[int, tuple[int, int]] = {}
    path: set[int] = set()  # ids of the containers being walked: the current path from obj
    stack = [(obj, False)]
    while stack:
        o, finished = stack.pop()
        i = id(o)
        if finished:
            depth, nodes = 0, 1 + (len(o) if isinstance(o, dict) else 0)
            kids = list(o.values()) if isinstance(o, dict) else o
            plain = kids and set(map(type, kids)) <= _SCALARS
            if plain:  # a row of numbers or strings: no per-element work in Python
                nodes += len(kids)
            else:
                # distinct children and how often each appears, at C speed (repeats are common)
                distinct = dict(zip(map(id, kids), kids))
                for c_id, times in collections.Counter(map(id, kids)).items():
                    cd, cn = memo.get(c_id) or _leaf(distinct[c_id])
                    depth, nodes = max(depth, cd), nodes + cn * times
            memo[i] = (depth + 1, nodes)
            path.discard(i)
            if nodes > lim.spec_nodes:
                raise LimitExceededError("spec_nodes", f"{what}: number of values", nodes, lim.spec_nodes)
            continue
        if i in memo:
            continue
        if i in path:
            raise LimitExceededError("spec_depth", f"{what}: nesting depth (it contains itself)", None,
                                     lim.spec_depth)
        path.add(i)
        if len(path) + outer_depth > lim.spec_depth:
            raise LimitExceededError("spec_depth", f"{what}: nesting depth", None, lim.spec_depth)
        stack.append((o, True))
        kids = list(o.values()) if isinstance(o, dict) else o
        if not (kids and set(map(type, kids)) <= _SCALARS):
            distinct = dict(zip(map(id, kids), kids))
            stack.extend((c, False) for c_id, c in distinct.items()
                         if isinstance(c, dict | list | tuple) and c_id not in memo)
    return memo[id(obj)]


#: Types that are one value each (checked per container with ``set(map(type, ...))``).
_SCALARS = {int, float, str, bool, type(None)}


def _leaf(value) -> tuple[int, int]:
    """(depth, values) of a non-container: a numpy-like array counts its dimensions and entries."""
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple) and hasattr(value, "size"):
        return len(shape), int(value.size)
    return 0, 1


def as_dict() -> dict[str, int]:
    """The limits in force, as a plain dict (for display)."""
    return asdict(current())
