"""Tests of dpexplorer.queries.drawing: matrices as heatmap arrays (no plotting library)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

import dpexplorer as dpx
from dpexplorer.queries import drawing
from dpexplorer.queries.drawing import block_mean, drawable, heatmaps, kronecker_factors


def test_block_mean_by_hand_dense_and_sparse():
    D = np.arange(30, dtype=float).reshape(5, 6)
    # blocks of 2 rows × 4 columns: the last row block has 1 row, the last column block 2 columns
    expected = np.array([[D[:2, :4].mean(), D[:2, 4:].mean()],
                         [D[2:4, :4].mean(), D[2:4, 4:].mean()],
                         [D[4:, :4].mean(), D[4:, 4:].mean()]])
    np.testing.assert_allclose(block_mean(D, 2, 4), expected, rtol=1e-12)
    np.testing.assert_allclose(block_mean(scipy.sparse.csr_array(D), 2, 4), expected, rtol=1e-12)


def test_drawable_exact_block_averaged_and_sparse_path(monkeypatch):
    A = dpx.strategies.h2(64)  # 127 × 64
    arr, block = drawable(A, 512)
    assert block == (1, 1)
    np.testing.assert_array_equal(arr, A.dense())
    arr, block = drawable(A, 16)
    assert block == (8, 4) and arr.shape == (16, 16)
    np.testing.assert_allclose(arr, block_mean(A.dense(), 8, 4), rtol=1e-12)
    # above the dense limit a sparse strategy is averaged through scipy.sparse, same numbers
    monkeypatch.setattr(drawing, "DRAW_DENSE_LIMIT", 100)
    arr, block = drawable(A, 16)
    assert block == (8, 4)
    np.testing.assert_allclose(arr, block_mean(A.dense(), 8, 4), rtol=1e-12)
    with pytest.raises(drawing.TooLargeToDraw, match="too large to draw"):  # no sparse form
        drawable(dpx.matrix.Kronecker([dpx.matrix.AllRange(16), dpx.matrix.AllRange(4)]), 16)


def test_heatmaps_of_a_strategy_and_of_its_gram():
    A = dpx.strategies.h2(8)
    (a, g) = heatmaps(A)
    assert (a.kind, g.kind) == ("A", "gram") and a.factor is None and a.part is None
    np.testing.assert_array_equal(a.array, A.dense())
    np.testing.assert_array_equal(g.array, A.gram().dense())
    assert a.title == f"A: {A.m:,} × {A.n:,}" and not a.downsampled


def test_kronecker_strategy_gives_one_pair_per_factor_weight_in_the_first():
    F1, F2 = dpx.matrix.Prefix(4), dpx.matrix.Identity(3)
    A = dpx.matrix.Weighted(dpx.matrix.Kronecker([F1, F2]), 2.0)
    factors = kronecker_factors(A)
    assert len(factors) == 2
    np.testing.assert_allclose(factors[0].dense(), 2.0 * F1.dense())
    np.testing.assert_array_equal(factors[1].dense(), F2.dense())
    maps = heatmaps(A)
    assert [(h.kind, h.factor) for h in maps] == [("A", 0), ("gram", 0), ("A", 1), ("gram", 1)]
    assert kronecker_factors(F1) is None


def test_too_large_matrix_is_a_message():
    A = dpx.workloads.all_range(1024)  # 524,800 × 1,024: not materialised
    a, g = heatmaps(A)
    assert a.array is None and "A is not drawn" in a.message and "too large to draw" in a.message
    assert g.array is not None and g.block == (2, 2) and g.array.shape == (512, 512)
