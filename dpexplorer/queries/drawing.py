"""Matrices as pictures: a query or strategy matrix, or its Gram, as a heatmap array.

:func:`heatmaps` gives what the explorer's Strategy page draws of a strategy
``A`` (HDMM, McKenna et al., PVLDB 11(10), 2018, Fig. 1): ``A`` and its Gram
matrix ``AᵀA`` (what the error depends on), one pair per factor of a Kronecker
strategy ``A₁ ⊗ … ⊗ A_d``, and the factors of the first blocks of a stacked
strategy (a ``blocks`` attribute, e.g. OPT+).  A matrix of more than
``max_pixels`` rows or columns is drawn as the means of ``rb × cb`` blocks
(:func:`block_mean`), through :mod:`scipy.sparse` when the dense matrix would be
too large (:func:`drawable`); a matrix too large for both is a message, not an
array.  Pure numpy/scipy: no plotting library is imported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import scipy.sparse

from .matrix import Dense, Identity, Kronecker, Matrix, MatrixTooLargeError, Sparse, VStack, Weighted

__all__ = ["Heatmap", "TooLargeToDraw", "block_mean", "drawable", "heatmaps", "kronecker_factors",
           "DRAW_DENSE_LIMIT", "DRAW_SPARSE_LIMIT", "MAX_BLOCKS_DRAWN"]

#: Largest number of entries materialised densely to draw one matrix (128 MiB).
DRAW_DENSE_LIMIT = 2**24
#: Largest number of nonzeros of a range-query matrix turned sparse to draw it.
DRAW_SPARSE_LIMIT = 50_000_000
#: Blocks of a stacked strategy (OPT+) whose Kronecker factors are drawn.
MAX_BLOCKS_DRAWN = 3

class TooLargeToDraw(ValueError):
    """The matrix cannot be materialised, even block-averaged."""


@dataclass
class Heatmap:
    """One matrix as drawn.

    Attributes
    ----------
    title : str
        Plot title (says when the matrix is block-averaged).
    kind : {"A", "gram"}
    factor : int or None
        Kronecker factor index (0-based), None for the whole strategy.
    part : int or None
        Block of a stacked strategy (OPT+) the factor belongs to, None otherwise.
    shape : tuple of int
        Shape of the matrix itself.
    array : ndarray or None
        What is drawn: the matrix, or its block means; None with a message.
    block : tuple of int
        Rows × columns averaged per pixel ((1, 1): drawn exactly).
    message : str
        Why nothing is drawn (``array`` is None).
    """

    title: str
    kind: str
    factor: int | None
    shape: tuple
    array: np.ndarray | None
    block: tuple = (1, 1)
    message: str = ""
    part: int | None = None  # block of a stacked strategy (0-based), None for the whole

    @property
    def downsampled(self) -> bool:
        return self.block != (1, 1)


def block_mean(D, rb: int, cb: int) -> np.ndarray:
    """Means of ``rb × cb`` blocks of a dense or scipy-sparse matrix (last blocks may be smaller).

    ``D``: shape ``(m, n)``; returns shape ``(⌈m/rb⌉, ⌈n/cb⌉)``, each entry the mean of
    its block's entries (a sparse ``D`` is never made dense).
    """
    m, n = D.shape
    r0, c0 = np.arange(0, m, rb), np.arange(0, n, cb)
    rc = np.diff(np.append(r0, m)).astype(float)
    cc = np.diff(np.append(c0, n)).astype(float)
    if scipy.sparse.issparse(D):
        R = scipy.sparse.csr_array((1.0 / np.repeat(rc, rc.astype(int)),
                                    (np.arange(m) // rb, np.arange(m))), shape=(r0.size, m))
        C = scipy.sparse.csr_array((1.0 / np.repeat(cc, cc.astype(int)),
                                    (np.arange(n), np.arange(n) // cb)), shape=(n, c0.size))
        return np.asarray((R @ scipy.sparse.csr_array(cast(Any, D)) @ C).toarray())
    D = np.asarray(D, dtype=float)
    S = np.add.reduceat(np.add.reduceat(D, r0, axis=0), c0, axis=1)
    return S / rc[:, None] / cc[None, :]


def _sparse_form(M: Matrix):
    """A scipy sparse form of ``M`` when one is cheap to get, else None."""
    if isinstance(M, Sparse):
        return M.matrix
    if isinstance(M, Identity):
        return M.sparse()
    if isinstance(M, Weighted):
        S = _sparse_form(M.base)
        return None if S is None else M.weight * S
    if isinstance(M, VStack):
        parts = [_sparse_form(b) for b in M.blocks]
        return None if any(p is None for p in parts) else scipy.sparse.vstack(parts, format="csr")
    lengths = getattr(M, "lengths", None)
    if callable(lengths) and float(np.sum(lengths())) <= DRAW_SPARSE_LIMIT:
        return M.sparse()
    return None


def drawable(M: Matrix, max_pixels: int = 512) -> tuple[np.ndarray, tuple[int, int]]:
    """``(array, (rb, cb))``: ``M`` itself, or its ``rb × cb`` block means, at most ``max_pixels``².

    ``M``: shape ``(m, n)``; ``rb = ⌈m / max_pixels⌉``, ``cb = ⌈n / max_pixels⌉`` and the
    array has shape ``(⌈m/rb⌉, ⌈n/cb⌉)`` (``(m, n)`` when ``rb = cb = 1``).

    Raises
    ------
    TooLargeToDraw
        If ``M`` is too large to materialise and has no cheap sparse form.
    """
    m, n = M.shape
    rb, cb = max(1, math.ceil(m / max_pixels)), max(1, math.ceil(n / max_pixels))
    if isinstance(M, Dense):
        D = M.array
    elif m * n <= DRAW_DENSE_LIMIT:
        D = M.dense()
    else:
        D = _sparse_form(M)
        if D is None:
            raise TooLargeToDraw(f"{m:,} × {n:,} = {m * n:,} entries: too large to draw")
    if rb == cb == 1:
        return (cast(Any, D).toarray() if scipy.sparse.issparse(D) else np.asarray(D, dtype=float)), (1, 1)
    return block_mean(D, rb, cb), (rb, cb)


def kronecker_factors(A: Matrix) -> list[Matrix] | None:
    """Factors of a (weighted) Kronecker strategy, the weight folded into the first; else None."""
    if isinstance(A, Kronecker) and len(A.factors) > 1:
        return list(A.factors)
    if isinstance(A, Weighted):
        inner = kronecker_factors(A.base)
        if inner is not None:
            return [Weighted(inner[0], A.weight)] + inner[1:]
    return None


def _block_heatmaps(A: Matrix, max_pixels: int) -> list[Heatmap]:
    """The factors ``A_j`` of the first :data:`MAX_BLOCKS_DRAWN` Kronecker blocks of a stacked strategy."""
    out = []
    blocks = getattr(A, "blocks", None) or []
    for j, B in enumerate(blocks[:MAX_BLOCKS_DRAWN]):
        factors = kronecker_factors(B)
        if factors is None:
            continue
        for i, F in enumerate(factors):
            what = f"block {j + 1} of {len(blocks)}, factor {i + 1} of {len(factors)} ({F.name})"
            try:
                arr, blk = drawable(F, max_pixels)
            except (TooLargeToDraw, MatrixTooLargeError) as exc:
                out.append(Heatmap(f"{what}: {F.m:,} × {F.n:,}", "A", i, F.shape, None,
                                   message=f"{what} is not drawn: {exc}", part=j))
                continue
            title = f"{what}: {F.m:,} × {F.n:,}"
            if blk != (1, 1):
                title += f", block-averaged {blk[0]}×{blk[1]}"
            out.append(Heatmap(title, "A", i, F.shape, arr, blk, part=j))
    return out


def heatmaps(A: Matrix, max_pixels: int = 512) -> list[Heatmap]:
    """The heatmaps of ``A`` and ``AᵀA`` (one pair per factor for a Kronecker strategy).

    A stacked strategy (a ``blocks`` attribute, e.g. OPT+) also gets the
    factors of its first :data:`MAX_BLOCKS_DRAWN` Kronecker blocks.
    """
    factors = kronecker_factors(A)
    parts = [(None, A)] if factors is None else list(enumerate(factors))
    out = []
    for i, M in parts:
        where = "" if i is None else f" factor {i + 1} of {len(parts)} ({M.name})"
        for kind in ("A", "gram"):
            what = f"A{where}" if kind == "A" else f"AᵀA{where}"
            try:
                X = M if kind == "A" else M.gram()
                shape = X.shape
                arr, block = drawable(X, max_pixels)
            except (TooLargeToDraw, MatrixTooLargeError) as exc:
                shape = M.shape if kind == "A" else (M.n, M.n)
                out.append(Heatmap(f"{what}: {shape[0]:,} × {shape[1]:,}", kind, i, shape, None,
                                   message=f"{what} is not drawn: {exc}"))
                continue
            title = f"{what}: {shape[0]:,} × {shape[1]:,}"
            if block != (1, 1):
                title += (f", block-averaged {block[0]}×{block[1]} → "
                          f"{arr.shape[0]:,} × {arr.shape[1]:,}")
            out.append(Heatmap(title, kind, i, shape, arr, block))
    if factors is None and getattr(A, "blocks", None) is not None:
        out.extend(_block_heatmaps(A, max_pixels))
    return out
