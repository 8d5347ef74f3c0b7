"""Lower-triangular Toeplitz matrices (dpexplorer.queries.toeplitz): products, norms, inverse,
the square root of the prefix matrix, and the matrix mechanism's analytic error through them."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer.core import error
from dpexplorer.queries.matrix import Dense, Identity, Prefix
from dpexplorer.queries.toeplitz import LowerToeplitz, causal_convolve, series_inverse, sqrt_prefix_column

columns = st.integers(1, 40).flatmap(lambda T: st.lists(
    st.floats(-3, 3, allow_nan=False, allow_subnormal=False), min_size=T, max_size=T))


@settings(max_examples=60, deadline=None)
@given(columns, st.integers(0, 2**31 - 1))
def test_products_and_norms_equal_the_dense_matrix(column, seed):
    C = LowerToeplitz(column)
    D = np.tril(np.array([[column[t - s] if s <= t else 0.0 for s in range(len(column))]
                          for t in range(len(column))]))
    np.testing.assert_array_equal(C.dense(), D)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(C.n, 3))
    scale = 1 + np.abs(D).sum()
    np.testing.assert_allclose(C.matvec(X[:, 0]), D @ X[:, 0], atol=1e-10 * scale)
    np.testing.assert_allclose(C.rmatvec(X[:, 1]), D.T @ X[:, 1], atol=1e-10 * scale)
    np.testing.assert_allclose(C._matmat(X), D @ X, atol=1e-10 * scale)
    np.testing.assert_allclose(C._rmatmat(X), D.T @ X, atol=1e-10 * scale)
    for p in (1, 2):
        np.testing.assert_allclose(C.column_norms(p), np.linalg.norm(D, ord=p, axis=0), rtol=1e-12,
                                   atol=1e-300)
        assert C.sensitivity(p) == pytest.approx(np.linalg.norm(D, ord=p, axis=0).max(), rel=1e-12)
    assert C.trace() == pytest.approx(np.trace(D), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 64), st.integers(0, 2**31 - 1))
def test_series_inverse_is_the_inverse_matrix(T, seed):
    # diagonally dominant (|c0| > Σ|c_j|, j ≥ 1): 1/c(x) is analytic on the closed unit disc, so the
    # inverse's entries stay bounded and the product can be checked to round-off
    rng = np.random.default_rng(seed)
    tail = rng.uniform(-1, 1, T - 1)
    c0 = (np.abs(tail).sum() + 0.5) * rng.choice([-1, 1])
    C = LowerToeplitz(np.concatenate([[c0], tail]))
    Cinv = C.inverse()
    np.testing.assert_allclose(C.dense() @ Cinv.dense(), np.eye(T), atol=1e-10)
    np.testing.assert_allclose(series_inverse(C.column, 5 * T)[:T], Cinv.column, rtol=1e-9, atol=1e-12)


def test_singular_and_bad_columns_are_refused():
    with pytest.raises(ValueError, match="singular"):
        series_inverse([0.0, 1.0])
    with pytest.raises(ValueError, match="finite"):
        LowerToeplitz([1.0, np.nan])
    with pytest.raises(ValueError, match="non-empty 1D"):
        LowerToeplitz([])
    with pytest.raises(ValueError, match=r"T \(the number of steps\) must be"):
        sqrt_prefix_column(0)


def test_causal_convolution_is_the_triangular_product():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    np.testing.assert_allclose(causal_convolve(a, b), [4.0, 13.0, 28.0])


@pytest.mark.parametrize("T", [1, 2, 7, 64, 300])
def test_sqrt_prefix_column_squares_to_the_prefix_matrix(T):
    f = sqrt_prefix_column(T)
    # f_k = binom(2k, k) / 4^k, exactly for the first terms
    for k in range(min(T, 30)):
        assert f[k] == pytest.approx(float(Fraction(math.comb(2 * k, k), 4 ** k)), rel=1e-14)
    C = LowerToeplitz(f).dense()
    np.testing.assert_allclose(C @ C, np.tril(np.ones((T, T))), atol=1e-12)


@pytest.mark.parametrize("noise", [dpx.Gaussian(1.0, 1e-6), dpx.Laplace(0.5)], ids=["gaussian", "laplace"])
def test_sqrt_factorisation_error_equals_the_closed_form_and_the_generic_path(noise):
    """Per-step variance σ²·Σ_{j≤t} f_j²·Σ_{j<T} f_j² (Gaussian; Δ₂(C)² = Σ f_j²), the Laplace
    analogue with Δ₁(C)² = (Σ f_j)², and the same numbers from the dense generic path."""
    T = 128
    f = sqrt_prefix_column(T)
    C = LowerToeplitz(f, name="toeplitz_sqrt")
    W = Prefix(T)
    squared_sensitivity = (f * f).sum() if noise.norm == 2 else f.sum() ** 2
    closed = noise.variance_per_unit * np.cumsum(f * f) * squared_sensitivity
    fast = error.per_query_variance(W, C, noise)
    np.testing.assert_allclose(fast, closed, rtol=1e-9)
    dense = error.per_query_variance(W, Dense(C.dense()), noise)
    np.testing.assert_allclose(fast, dense, rtol=1e-9)
    assert error.expected_tse(W, C, noise) == pytest.approx(closed.sum(), rel=1e-9)
    assert error.expected_tse(W, C, noise) == pytest.approx(error.expected_tse(W, Dense(C.dense()), noise),
                                                            rel=1e-9)


def test_identity_workload_and_other_workloads_take_the_right_path():
    T = 32
    C = LowerToeplitz(sqrt_prefix_column(T))
    noise = dpx.Gaussian(1.0, 1e-6)
    ident = error.per_query_variance(Identity(T), C, noise)
    np.testing.assert_allclose(ident, error.per_query_variance(Identity(T), Dense(C.dense()), noise),
                               rtol=1e-9)
    ranges = dpx.workloads.all_range(T)
    assert C.workload_trace(ranges) is NotImplemented  # the generic path answers it
    assert error.rmse(ranges, C, noise) == pytest.approx(error.rmse(ranges, Dense(C.dense()), noise),
                                                         rel=1e-9)


def test_sqrt_factorisation_max_error_beats_the_trees_on_prefix_sums():
    """Max per-step error of the square-root factorisation below H2's and HB's on the prefix
    workload (continual counting's measure of error), at T = 2**10 and 2**16, under Gaussian
    noise, and its RMSE at or above the SVD bound."""
    noise = dpx.Gaussian(1.0, 1e-6)
    for T in (2**10, 2**16):
        W = Prefix(T)
        C = LowerToeplitz(sqrt_prefix_column(T))
        worst = error.per_query_variance(W, C, noise).max()
        for name in ("h2", "hb"):
            A = dpx.registry.get(name).strategy(W, noise)
            assert worst < error.per_query_variance(W, A, noise).max(), (T, name)
        assert error.rmse(W, C, noise) >= dpx.svd_bound(W, noise) * (1 - 1e-9)


def test_empirical_error_of_the_factorisation_matches_the_analytic_error():
    """Seeded simulation (not a release): x_hat = C⁻¹(C x + z), answers W x_hat, z Gaussian with
    σ = Δ₂(C)·c(ε, δ).  The mean over 400 trials of the total squared error has a standard error
    estimated from the trials; |mean − TSE| < 6 standard errors fails by chance with probability
    about 2e-9 (normal approximation)."""
    T, trials = 256, 400
    rng = np.random.default_rng(20261128)
    noise = dpx.Gaussian(1.0, 1e-6)
    C = LowerToeplitz(sqrt_prefix_column(T))
    W = Prefix(T)
    x = rng.integers(0, 50, T).astype(float)
    sigma = math.sqrt(noise.variance_per_unit) * C.sensitivity(2)
    Cinv = C.inverse()
    z = rng.normal(0.0, sigma, (T, trials))
    x_hat = Cinv._matmat(C.matvec(x)[:, None] + z)
    sq = ((W._matmat(x_hat) - W.matvec(x)[:, None]) ** 2).sum(axis=0)
    analytic = error.expected_tse(W, C, noise)
    assert abs(sq.mean() - analytic) < 6 * sq.std(ddof=1) / math.sqrt(trials), (sq.mean(), analytic)


@pytest.mark.parametrize("first", [1.0, -0.5, 0.0])
def test_reconstruction_is_least_squares_without_a_dense_matrix(first):
    """RECONSTRUCT through the strategy's own reconstructor: C⁻¹ y (FFT) when c[0] ≠ 0, the
    minimum-norm least-squares solution (lsmr) when C is singular; equal to the dense pinv."""
    rng = np.random.default_rng(3)
    # a decaying column (well conditioned; random columns give exponentially growing inverses)
    column = np.concatenate([[first], 0.5 ** np.arange(1, 48) * rng.uniform(0.5, 1.0, 47)])
    C = LowerToeplitz(column)
    y = rng.normal(size=48)
    from dpexplorer.core.reconstruct import Reconstructor

    rec = Reconstructor(C)
    assert rec.method == "custom"
    np.testing.assert_allclose(rec(y), np.linalg.pinv(C.dense()) @ y, rtol=1e-6, atol=1e-6)
