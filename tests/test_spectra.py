"""Structured spectra and the SVD bound (dpexplorer.core.spectra) against dense decompositions."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer.core import error, spectra
from dpexplorer.queries import workloads
from dpexplorer.queries.matrix import Dense, MatrixTooLargeError
from dpexplorer.strategies import marginals


def dense_svdb(W):
    """(Σ σ_i)² / n from numpy's SVD of the dense workload (zero σ to rounding, unlike eigvalsh)."""
    s = np.linalg.svd(W.dense(), compute_uv=False).sum()
    return s * s / W.n


def box(n, w):
    N = n - w + 1
    W = np.zeros((N, n))
    for i in range(N):
        W[i, i:i + w] = 1.0
    return W


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 90))
def test_closed_form_eigenvalues(n):
    for lam, W in ((spectra.all_range_eigenvalues(n), workloads.all_range(n)),
                   (spectra.prefix_eigenvalues(n), workloads.prefix(n))):
        dense = np.linalg.eigvalsh(W.gram().dense())
        np.testing.assert_allclose(np.sort(lam), dense, rtol=1e-12, atol=1e-12 * dense.max())


@pytest.mark.parametrize("n,w,shift", [
    (600, 2, 0.0), (601, 3, 0.0), (700, 32, 0.0), (640, 32, 0.0),  # gcd(n, w) = 2, 1, 4, 32
    (999, 17, 2.5), (600, 64, 0.0), (530, 5, 1.0), (800, 7, 1e-6)])
def test_width_sum_sqrt_structured(n, w, shift):
    # large enough for the residue method (N, n ≥ 512, w ≤ 128); reference: dense SVD / eigh
    assert min(n - w + 1, n) >= spectra.WIDTH_DENSE_BELOW
    W = box(n, w)
    if shift == 0:
        expected = np.linalg.svd(W, compute_uv=False).sum()
    else:
        expected = np.sqrt(np.clip(np.linalg.eigvalsh(W.T @ W), 0, None) + shift).sum()
    assert spectra.width_sum_sqrt(n, w, shift) == pytest.approx(expected, rel=1e-10)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 60), data=st.data())
def test_width_sum_sqrt_small(n, data):
    w = data.draw(st.integers(1, n))
    expected = np.linalg.svd(box(n, w), compute_uv=False).sum()
    assert spectra.width_sum_sqrt(n, w) == pytest.approx(expected, rel=1e-11)
    np.testing.assert_allclose(np.sort(spectra.width_eigenvalues(n, w)),
                               np.clip(np.linalg.eigvalsh(box(n, w).T @ box(n, w)), 0, None),
                               atol=1e-9 * w * w)


def test_width_bad_input():
    with pytest.raises(ValueError, match="width"):
        spectra.width_sum_sqrt(10, 11)
    with pytest.raises(ValueError, match="shift"):
        spectra.width_sum_sqrt(10, 3, -1.0)


def _cases(n):
    ar, pr, I, T = workloads.all_range, workloads.prefix, workloads.identity, workloads.total
    k = max(2, n // 2)
    return [
        ar(n), pr(n), workloads.width_range(n, min(3, n)), workloads.permuted(ar(n), seed=2),
        2.5 * ar(n), workloads.union([ar(n), I(n)], [1.0, 3.0]),
        workloads.union([workloads.width_range(n, min(2, n)), I(n)]),
        workloads.union([workloads.permuted(pr(n), 1), I(n)], [2.0, 1.0]),
        workloads.kron([ar(n), pr(k)]),
        workloads.kron([workloads.union([ar(n), I(n)]), workloads.identity_total(k)]),
        workloads.union([workloads.kron([ar(n), I(k)]), workloads.kron([I(n), ar(k)]),
                         workloads.kron([ar(n), ar(k)])], [1.0, 2.0, 0.5]),
        workloads.union([workloads.kron([pr(n), T(k)]), workloads.kron([I(n), T(k)]),
                         workloads.kron([pr(n), I(k)])]),
        workloads.union([workloads.kron([workloads.width_range(n, 1), I(k)]),
                         workloads.kron([I(n), pr(k)])]),
    ]


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 16))
def test_svdb_structured_equals_dense(n):
    for W in _cases(n):
        value = spectra.svdb_structured(W)
        assert value is not None, W.name
        assert value == pytest.approx(dense_svdb(W), rel=1e-10, abs=1e-12), W.name
        assert error.svdb(W) == pytest.approx(value, rel=1e-12)


def test_non_commuting_factors_fall_back_to_dense():
    n = 12
    cases = [
        workloads.union([workloads.all_range(n), workloads.prefix(n)]),  # two bases on one attribute
        workloads.union([workloads.all_range(n), workloads.total(n)]),  # J does not commute with it
        workloads.union([workloads.permuted(workloads.all_range(n), 1),
                         workloads.permuted(workloads.all_range(n), 2)]),
    ]
    for W in cases:
        assert spectra.svdb_structured(W) is None
        assert error.svdb(W) == pytest.approx(dense_svdb(W), rel=1e-9)
    # a single product of plain matrices is left to the Kronecker and dense rules
    assert spectra.svdb_structured(Dense(np.ones((3, 4)))) is None


def test_same_permutation_is_one_basis():
    P1 = workloads.permuted(workloads.all_range(16), seed=4)
    P2 = workloads.permuted(workloads.all_range(16), seed=4)  # built again: equal permutation
    W = workloads.union([P1, P2, workloads.identity(16)], [1.0, 2.0, 1.0])
    assert spectra.svdb_structured(W) == pytest.approx(dense_svdb(W), rel=1e-10)


@pytest.mark.slow  # large domains: 10-80 s under load on 2 cores (the full suite runs it)
def test_large_domains_use_the_closed_forms():
    # n = 2**20 cells: no dense matrix could be formed (the timing is in benchmarks/)
    n = 2**20
    W = workloads.all_range(n)
    s = np.sqrt(spectra.all_range_eigenvalues(n)).sum()
    assert error.svdb(W) == pytest.approx(s * s / n, rel=1e-12)
    assert dpx.svd_bound(workloads.permuted(W, seed=1), dpx.Laplace(1.0)) == pytest.approx(
        dpx.svd_bound(W, dpx.Laplace(1.0)), rel=1e-12)
    assert np.isfinite(error.svdb(workloads.width_range(n, 32)))
    with pytest.raises(MatrixTooLargeError):  # a union over 2**30 multi-indices
        spectra.svdb_structured(workloads.union([
            workloads.kron([workloads.all_range(2**15), workloads.identity(2**15)]),
            workloads.kron([workloads.identity(2**15), workloads.all_range(2**15)])]))


def test_svd_bound_tables_still_match():
    # HDMM Table 4: All Range, n = 64, Laplace ε = 1 → 3.22; Width 32, n = 1024 → 3.36
    assert round(dpx.svd_bound(workloads.all_range(64), dpx.Laplace(1.0)), 2) == 3.22
    assert round(dpx.svd_bound(workloads.width_range(1024, 32), dpx.Laplace(1.0)), 2) == 3.36


def test_large_marginal_unions_are_left_to_the_marginal_algebra():
    # Identity/Total factors only over more multi-indices than the grid holds: the structured
    # rule declines (it is registered before strategies.marginals), and svdb gets the
    # marginal algebra's closed form (HDMM Thm 12), equal to the grid sum on a small domain
    big = workloads.marginals((2**9, 2**9, 2**9), 2)  # 2**27 cells
    assert spectra.svdb_structured(big) is None
    small = workloads.marginals((8, 6, 5), [1, 2])
    value = spectra.svdb_structured(small)
    assert value == pytest.approx(dense_svdb(small), rel=1e-10)
    assert error.svdb(big) == pytest.approx(marginals.svdb_marginal(big), rel=1e-12)
    assert np.isfinite(error.svdb(big))
