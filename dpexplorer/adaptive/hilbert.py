"""Hilbert-curve ordering of a 2D grid (DAWA Sec. 5.4).

DAWA runs on 2D data by laying the grid out along a Hilbert curve, which
keeps cells that are close in the plane close in the 1D order, so that
contiguous buckets are compact regions.  Grids of any shape are handled by
running the curve over the enclosing ``2^h × 2^h`` square and keeping the
cells inside the grid, in curve order (the padding cells are skipped, not
filled).
"""

from __future__ import annotations

import numpy as np

__all__ = ["hilbert_index", "hilbert_order"]


def hilbert_index(rows: np.ndarray, cols: np.ndarray, side: int) -> np.ndarray:
    """Position along the Hilbert curve of cells ``(rows, cols)`` of a ``side × side`` square.

    The classical iterative conversion (rotate and flip per quadrant, from the
    coarsest level down), vectorised over cells.

    Parameters
    ----------
    rows, cols : ndarray of int, same shape
        Cell coordinates, ``0 <= rows, cols < side``.
    side : int
        A power of two.

    Returns
    -------
    ndarray of int64, same shape
        Curve positions in ``[0, side²)``; adjacent positions are adjacent cells.

    Raises
    ------
    ValueError
        If ``side`` is not a power of two or a coordinate is outside the square.
    """
    if side < 1 or side & (side - 1):
        raise ValueError(f"side must be a power of two, got {side}")
    x = np.array(cols, dtype=np.int64, copy=True)
    y = np.array(rows, dtype=np.int64, copy=True)
    if x.shape != y.shape:
        raise ValueError("rows and cols must have the same shape")
    if x.size and (x.min() < 0 or y.min() < 0 or x.max() >= side or y.max() >= side):
        raise ValueError(f"coordinates must lie in [0, {side})")
    d = np.zeros_like(x)
    s = side // 2
    while s > 0:
        rx = ((x & s) > 0).astype(np.int64)
        ry = ((y & s) > 0).astype(np.int64)
        d += s * s * ((3 * rx) ^ ry)
        # rotate the quadrant so the sub-curve has the standard orientation
        flip = ry == 0
        swap_flip = flip & (rx == 1)
        x = np.where(swap_flip, side - 1 - x, x)
        y = np.where(swap_flip, side - 1 - y, y)
        x, y = np.where(flip, y, x), np.where(flip, x, y)
        s //= 2
    return d


def hilbert_order(shape: tuple[int, int]) -> np.ndarray:
    """Permutation of the C-order cells of a ``(n1, n2)`` grid along a Hilbert curve.

    Returns
    -------
    perm : ndarray of int64, shape (n1·n2,)
        ``x.ravel()[perm]`` lists the cells in curve order.

    Raises
    ------
    ValueError
        If ``shape`` is not two positive sizes.
    """
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"a 2D grid shape (n1, n2) is needed, got {shape}")
    n1, n2 = (int(s) for s in shape)
    side = 1
    while side < max(n1, n2):
        side *= 2
    rows, cols = np.divmod(np.arange(n1 * n2, dtype=np.int64), n2)
    return np.argsort(hilbert_index(rows, cols, side), kind="stable")
