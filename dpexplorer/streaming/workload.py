"""Continual-counting workloads and the scope check of the streaming mechanisms.

A running total published at every step ``t = 0 .. T−1`` is the prefix
workload ``L: (T, T)`` (row ``t`` sums the counts of steps ``0..t``) answered
one row at a time: the answer at step ``t`` may use only what was measured up
to step ``t``.  More generally a workload is *causal* when it is square and
lower-triangular with a non-zero diagonal: answer ``t`` depends on the counts
up to ``t`` only and on step ``t``'s own count (Identity -- each step's own
count -- is one).  Such a ``W`` is invertible, so least squares over an
invertible lower-triangular strategy ``A`` answers ``W A⁻¹ y``: row ``t``
uses the measurements up to ``t`` only.  The streaming mechanisms
(:mod:`dpexplorer.streaming`) apply to causal workloads only; their scope check
(:func:`scope`) says so before anything is built.
"""

from __future__ import annotations

import numpy as np

from ..core.registry import NotApplicableError
from ..privacy.noise import NoiseModel
from ..queries.matrix import DENSE_LIMIT, Identity, Matrix, Prefix, Weighted, _check_cells, as_matrix
from ..queries.toeplitz import LowerToeplitz

__all__ = ["continual", "is_causal", "scope", "running_total_scope", "steps", "unweighted"]


def continual(T: int) -> Matrix:
    """The continual-counting workload: the running total after each of ``T`` steps.

    The prefix workload ``L: (T, T)``, ``L[t, s] = 1`` for ``s ≤ t``, named
    ``"continual"``; answer ``t`` is released at step ``t``.

    Raises
    ------
    ValueError
        If ``T`` is not a positive whole number; ``LimitExceededError`` above the
        ``cells`` limit (:mod:`dpexplorer.queries.limits`).
    """
    return Prefix(_check_cells(T, "continual: T (the number of steps)"), name="continual")


def unweighted(W: Matrix) -> tuple[float, Matrix]:
    """``(c, B)`` with ``W = c · B`` and ``B`` not a :class:`~dpexplorer.queries.matrix.Weighted`.

    Unwraps nested scalar weights (their product is ``c``), so that a
    weighted running total is recognised as one.
    """
    c = 1.0
    while isinstance(W, Weighted):
        c *= W.weight
        W = W.base
    return c, W


def _base(W: Matrix) -> Matrix | None:
    """The matrix under scalar weights, or None if the weight is 0."""
    c, base = unweighted(W)
    return None if c == 0 else base


def is_causal(W) -> bool:
    """Whether ``W`` is square, lower-triangular with a non-zero diagonal, over one attribute.

    Answer ``t`` then uses the counts of steps ``0..t`` only.  Prefix,
    Identity and lower-triangular Toeplitz matrices (and their non-zero
    scalar multiples) are recognised by type, at any size; any other 1D
    matrix is checked entry by entry when it has at most the dense limit's
    entries, and is not causal above it.

    Raises
    ------
    TypeError
        If ``W`` is neither a :class:`~dpexplorer.queries.matrix.Matrix` nor an array.
    """
    W = as_matrix(W)  # TypeError for what is not a matrix
    if W.shape[0] != W.shape[1] or len(W.domain) != 1:
        return False
    base = _base(W)
    if base is None:
        return False
    if isinstance(base, Prefix | Identity):
        return True
    if isinstance(base, LowerToeplitz):
        return bool(base.column[0] != 0)
    if W.n * W.n > DENSE_LIMIT:
        return False
    M = W.dense()
    return not np.any(np.triu(M, 1)) and bool(np.all(np.diag(M) != 0))


def scope(W: Matrix, noise: NoiseModel) -> None:
    """Refuse, before any build, a workload that is not a continual count.

    Raises
    ------
    NotApplicableError
        If ``W`` is not square and lower-triangular with a non-zero diagonal over a 1D
        domain of steps.
    """
    W = as_matrix(W)
    if not is_causal(W):
        raise NotApplicableError(
            f"streaming mechanisms answer a count over time: one answer per step over one ordered "
            f"attribute, answer t using the counts of steps 0..t and step t's own (a square, "
            f"lower-triangular workload with a non-zero diagonal), such as the running total "
            f"(Prefix); {W.name!r} has shape {W.shape} over the domain {W.domain}")


def running_total_scope(W: Matrix, noise: NoiseModel) -> None:
    """Refuse, before any build, a workload that is not the running total (Prefix).

    For mechanisms whose decoder is built for the running total (the online
    trees): on another causal workload they would answer by least squares,
    which is not online.

    Raises
    ------
    NotApplicableError
        If ``W`` is not the prefix matrix (or a non-zero multiple of it).
    """
    scope(W, noise)
    if not isinstance(_base(as_matrix(W)), Prefix):
        raise NotApplicableError(
            f"this tree answers the running total (Prefix: answer t sums the counts of steps "
            f"0..t) with its own online decoder; {as_matrix(W).name!r} is another count over time")


def steps(W: Matrix) -> int:
    """``T``, the number of steps of a causal workload ``W: (T, T)`` (its number of cells).

    Raises
    ------
    TypeError
        If ``W`` is not a matrix.
    """
    return as_matrix(W).n
