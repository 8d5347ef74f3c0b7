"""Tree-form inverse Grams (dpexplorer.queries.trees, dpexplorer.queries.intervals): H2, HB, GreedyH and Privelet errors against dense."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer.core import error, registry
from dpexplorer.queries import workloads
from dpexplorer.queries.intervals import SegmentInverse
from dpexplorer.queries.matrix import Dense
from dpexplorer.queries.trees import HaarWavelet, IntervalTree
from dpexplorer.strategies import classic as strategies

LAPLACE = dpx.Laplace(1.0)
GAUSSIAN = dpx.Gaussian(1.0, 1e-6)


def range_workloads(n, seed):
    ar, pr, I, T = workloads.all_range, workloads.prefix, workloads.identity, workloads.total
    return [
        ar(n), pr(n), workloads.width_range(n, min(3, n)),
        workloads.random_ranges(n, 25, seed=seed), I(n), T(n),
        workloads.union([ar(n), I(n), T(n)], [1.0, 2.0, 3.0]),
    ]


def tree_strategies(n):
    out = [strategies.h2(n), strategies.hb(n), strategies.hierarchical(n, 3),
           strategies.greedy_h(workloads.all_range(n)), strategies.greedy_h(workloads.prefix(n))]
    if n & (n - 1) == 0:
        out.append(strategies.wavelet(n))
    return out


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 48), seed=st.integers(0, 1000), gaussian=st.booleans())
def test_structured_errors_equal_dense(n, seed, gaussian):
    noise = GAUSSIAN if gaussian else LAPLACE
    for A in tree_strategies(n):
        assert hasattr(A, "workload_trace")
        Ad = Dense(A.dense())
        for W in range_workloads(n, seed):
            Wd = Dense(W.dense())
            assert error.expected_tse(W, A, noise) == pytest.approx(
                error.expected_tse(Wd, Ad, noise), rel=1e-10), (A.name, W.name)
            pq = error.per_query_variance(W, A, noise)
            np.testing.assert_allclose(pq, error.per_query_variance(Wd, Ad, noise), rtol=1e-9)


@pytest.mark.parametrize("n", [1, 2, 7, 16, 33])
def test_tree_reconstruction_is_least_squares(n):
    # RECONSTRUCT through the closed-form inverse Gram: x̂ = (AᵀA)⁻¹Aᵀy, the least-squares
    # solution numpy's SVD-based lstsq finds (every tree strategy has full column rank)
    rng = np.random.default_rng(n)
    for A in tree_strategies(n) + [strategies.hierarchical(n, 4)]:
        R = dpx.core.reconstruct.Reconstructor(A)
        assert R.method == "tree", A.name
        y = A.matvec(rng.integers(0, 20, n).astype(float)) + rng.laplace(0.0, 3.0, A.m)
        ref = np.linalg.lstsq(A.dense(), y, rcond=None)[0]
        np.testing.assert_allclose(R(y), ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())
        np.testing.assert_allclose(A.inverse().matvec(A.rmatvec(y)), ref, rtol=1e-9,
                                   atol=1e-9 * np.abs(ref).max())
    with pytest.raises(ValueError, match="tree"):
        dpx.core.reconstruct.Reconstructor(Dense(np.eye(n)), method="tree")
    with pytest.raises(ValueError, match="shape"):
        strategies.h2(n).inverse().matvec(np.ones(n + 1))


@pytest.mark.parametrize("n", [1, 5, 64, 100])
def test_identity_per_query_variances_are_lengths(n):
    W = workloads.union([workloads.all_range(n), workloads.total(n)])
    v = error.per_query_variance(W, strategies.identity(n), LAPLACE)
    lengths = np.r_[W.blocks[0].lengths(), n]
    np.testing.assert_allclose(v, 2.0 * lengths)


@pytest.mark.parametrize("n", [1, 2, 7, 16, 33, 100])
def test_tree_rows_are_the_hierarchy(n):
    # the classic construction: every block of every level, leaves first
    for b in (2, 3):
        sizes = [1]
        while sizes[-1] < n:
            sizes.append(sizes[-1] * b)
        rows = [np.isin(np.arange(n), np.arange(k * s, min((k + 1) * s, n))).astype(float)
                for s in sizes for k in range(-(-n // s))]
        np.testing.assert_array_equal(strategies.hierarchical(n, b).dense(), np.array(rows))


@pytest.mark.parametrize("n", [3, 64, 200])
def test_greedy_h_structured_equals_dense(n):
    for W in (workloads.all_range(n), workloads.prefix(n), workloads.width_range(n, 3),
              workloads.random_ranges(n, 40, seed=1)):
        A = strategies.greedy_h(W)  # structured Gram: O(n) node forms
        ref = strategies.greedy_h_gram(W.gram().dense())  # dense Gram (DAWA's path)
        np.testing.assert_allclose(A.dense(), ref.strategy().dense(), atol=1e-12)
        assert A.greedy.trace == pytest.approx(ref.trace, rel=1e-10)
        assert A.sensitivity(1) == pytest.approx(1.0)
        # a node may take weight 1 − 1e-4 (_R_MAX), leaves 1e-4: cond(AᵀA) ~ 1e8 limits
        # every evaluation of tr(G (AᵀA)⁻¹) (dense or tree form) to ~1e-8
        assert error.unit_tse(W, A) == pytest.approx(ref.trace, rel=1e-7)


def test_large_domain_without_dense_matrices():
    # 2**16 cells: a dense Gram would have 2**32 entries (timings in benchmarks/bench_error.py)
    n = 2**16
    W = workloads.all_range(n)
    for name in ("h2", "hb", "wavelet", "greedy_h", "identity"):
        A = registry.get(name).strategy(W, LAPLACE)
        assert np.isfinite(dpx.rmse(W, A, LAPLACE))
    pq = dpx.per_query_rmse(workloads.prefix(n), strategies.h2(n), LAPLACE)
    assert pq.shape == (n,) and np.all(pq > 0)
    # 2**31 All Range answers would take 16 GiB: refused before anything is allocated (the queries limit)
    with pytest.raises((dpx.MatrixTooLargeError, dpx.LimitExceededError), match="queries"):
        dpx.per_query_rmse(W, strategies.h2(n), LAPLACE)
    with pytest.raises((dpx.MatrixTooLargeError, dpx.LimitExceededError), match="queries"):
        dpx.per_query_rmse(W, strategies.identity(n), LAPLACE)


def test_segment_inverse_and_tree_validation():
    with pytest.raises(ValueError, match="bottom level"):
        IntervalTree(3, [([0, 1], [0, 2], [1.0, 1.0])], name="t")
    with pytest.raises(ValueError, match="positive"):
        IntervalTree(2, [([0, 1], [0, 1], [1.0, 0.0])], name="t")
    with pytest.raises(ValueError, match="partition"):
        IntervalTree(3, [([0, 1, 2], [0, 1, 2], [1.0] * 3), ([0], [1], [1.0])], name="t")
    with pytest.raises(ValueError, match="coarsen"):
        IntervalTree(4, [([0, 1, 2, 3], [0, 1, 2, 3], [1.0] * 4), ([0, 2], [1, 3], [1.0] * 2),
                         ([0, 1], [0, 3], [1.0] * 2)], name="t")
    with pytest.raises(ValueError, match="partition"):
        SegmentInverse(np.ones(4), [([0, 2], [0, 3], np.ones(4), [1.0, 1.0])])
    with pytest.raises(ValueError, match="power of two"):
        HaarWavelet(np.ones((1, 3)))
    # n not a power of two: the wavelet keeps the plain sparse form (dense error path)
    assert not hasattr(strategies.wavelet(6), "workload_trace")


def test_workloads_without_structure_fall_back():
    n = 16
    A = strategies.h2(n)
    W = workloads.permuted(workloads.all_range(n), seed=3)  # Gram mixes far-apart cells
    assert A.workload_trace(W) is NotImplemented
    assert A.workload_row_variances(W) is NotImplemented
    assert error.expected_tse(W, A, LAPLACE) == pytest.approx(
        error.expected_tse(Dense(W.dense()), Dense(A.dense()), LAPLACE), rel=1e-10)


def test_compare_takes_the_structured_paths():
    # dpx.compare (the Compare page) at 2**14 cells: a dense Gram (2**28 entries) is above the
    # size limit, so every finite figure below came from a structured path
    n = 2**14
    W = workloads.all_range(n)
    names = ["identity", "h2", "hb", "wavelet", "greedy_h"]
    df = dpx.compare(W, LAPLACE, mechanisms=names).set_index("mechanism")
    for name in names:
        A = registry.get(name).strategy(W, LAPLACE)
        assert df.loc[name, "rmse"] == pytest.approx(dpx.rmse(W, A, LAPLACE), rel=1e-12)
    assert df.attrs["svd_bound"] == pytest.approx(dpx.svd_bound(W, LAPLACE), rel=1e-12)
    s = np.sqrt(dpx.spectra.all_range_eigenvalues(n)).sum()  # closed-form spectrum
    assert df.attrs["svd_bound"] == pytest.approx(np.sqrt(2.0 * s * s / n / W.m), rel=1e-12)
    # per-query errors through the tree forms (objective="max" ranks by the worst query)
    P = workloads.prefix(n)
    worst = dpx.compare(P, LAPLACE, mechanisms=names, objective="max").set_index("mechanism")
    for name in names:
        A = registry.get(name).strategy(P, LAPLACE)
        assert worst.loc[name, "max_std"] == pytest.approx(dpx.per_query_rmse(P, A, LAPLACE).max(),
                                                           rel=1e-12)
    # OPT0 through the registry (what compare and HDMM build) uses the structured Gram
    small = workloads.all_range(256)
    cache = dpx.StrategyCache()
    dpx.compare(small, LAPLACE, mechanisms=["opt0"], cache=cache)
    A, _, _, note = cache.entry(small, "opt0", LAPLACE)
    assert note == "" and A.optimization.info["gram"] == "structured"
