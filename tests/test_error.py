"""Analytic error and SVD bound against HDMM Tables 4-5 (ε = 1; Gaussian δ = 1e-6)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer.core import error
from dpexplorer.queries import workloads
from dpexplorer.queries.matrix import Dense, Kronecker
from dpexplorer.strategies import classic as strategies

LAPLACE = dpx.Laplace(1.0)
GAUSSIAN = dpx.Gaussian(1.0, 1e-6)

WORKLOADS = {
    "all_range": workloads.all_range,
    "prefix": workloads.prefix,
    "width32": lambda n: workloads.width_range(n, 32),
}
STRATEGIES = {
    "identity": strategies.identity,
    "h2": strategies.h2,
    "wavelet": strategies.wavelet,
    "hb": strategies.hb,
}

# HDMM (McKenna et al.) Table 4, Laplace, ε = 1: Identity, H2, Wavelet, HB, SVDB
TABLE4 = {
    ("all_range", 64): (6.63, 11.28, 10.11, 6.63, 3.22),
    ("all_range", 256): (13.11, 16.27, 14.87, 8.90, 4.07),
    ("all_range", 1024): (26.15, 21.83, 20.26, 12.82, 4.94),
    ("prefix", 64): (8.06, 9.42, 9.37, 8.06, 2.89),
    ("prefix", 256): (16.03, 13.16, 13.09, 8.97, 3.50),
    ("prefix", 1024): (32.02, 17.29, 17.20, 12.87, 4.11),
    ("width32", 64): (8.00, 12.02, 11.09, 8.00, 2.75),
    ("width32", 256): (8.00, 15.50, 13.57, 7.41, 3.26),
    ("width32", 1024): (8.00, 18.98, 16.56, 9.50, 3.36),
}
# HDMM Table 5, Gaussian, ε = 1, δ = 1e-6 (analytic calibration): Identity, H2, Wavelet, HB, SVDB
TABLE5 = {
    ("all_range", 64): (19.82, 12.74, 11.42, 19.82, 9.62),
    ("all_range", 256): (39.18, 16.20, 14.81, 18.80, 12.15),
    ("all_range", 1024): (78.13, 19.66, 18.24, 27.07, 14.75),
    ("prefix", 64): (24.08, 10.64, 10.58, 24.08, 8.62),
    ("prefix", 256): (47.89, 13.11, 13.03, 18.95, 10.44),
    ("prefix", 1024): (95.64, 15.57, 15.49, 27.18, 12.29),
    ("width32", 64): (23.90, 13.57, 12.52, 23.90, 8.23),
    ("width32", 256): (23.90, 15.44, 13.52, 15.65, 9.73),
    ("width32", 1024): (23.90, 17.10, 14.92, 20.08, 10.02),
}


def _cells(table):
    for (wname, n), values in table.items():
        for sname, value in zip(list(STRATEGIES) + ["svdb"], values, strict=True):
            yield pytest.param(wname, n, sname, value, id=f"{wname}-{n}-{sname}")


@pytest.mark.parametrize("wname,n,sname,expected", list(_cells(TABLE4)))
def test_hdmm_table4_laplace(wname, n, sname, expected):
    W = WORKLOADS[wname](n)
    if sname == "svdb":
        value = dpx.svd_bound(W, LAPLACE)
    else:
        value = dpx.rmse(W, STRATEGIES[sname](n), LAPLACE)
    assert round(value, 2) == pytest.approx(expected, abs=0.0051)


@pytest.mark.parametrize("wname,n,sname,expected", list(_cells(TABLE5)))
def test_hdmm_table5_gaussian(wname, n, sname, expected):
    W = WORKLOADS[wname](n)
    if sname == "svdb":
        value = dpx.svd_bound(W, GAUSSIAN)
    else:
        value = dpx.rmse(W, STRATEGIES[sname](n), GAUSSIAN)
    assert round(value, 2) == pytest.approx(expected, abs=0.0051)


def test_identity_closed_form():
    # All Range with A = I: TSE = v · Σ_ranges length = v · n(n+1)(n+2)/6
    n = 37
    W = workloads.all_range(n)
    expected = np.sqrt(2 * (n * (n + 1) * (n + 2) / 6) / (n * (n + 1) / 2))
    assert dpx.rmse(W, strategies.identity(n), LAPLACE) == pytest.approx(expected, rel=1e-12)


def test_error_scales_with_noise_variance():
    W, A = workloads.prefix(32), strategies.h2(32)
    r1 = dpx.rmse(W, A, dpx.Laplace(1.0))
    assert dpx.rmse(W, A, dpx.Laplace(0.1)) == pytest.approx(10 * r1, rel=1e-12)
    # a rescaled strategy has the same error (the noise scales with Δ(A): HDMM Prop. 4)
    assert dpx.rmse(W, A * 3.7, dpx.Laplace(1.0)) == pytest.approx(r1, rel=1e-10)


def test_unsupported_strategy_raises():
    W = workloads.prefix(8)
    A = Dense(np.eye(8)[:4])  # measures only the first four cells
    with pytest.raises(dpx.UnsupportedWorkloadError, match="does not support"):
        dpx.rmse(W, A, LAPLACE)
    assert not error.supports(W, A)
    # but it supports queries in its row space
    assert error.supports(Dense(np.eye(8)[:2]), A)
    assert dpx.rmse(Dense(np.eye(8)[:2]), A, LAPLACE) == pytest.approx(np.sqrt(2.0))


def test_domain_mismatch_raises():
    with pytest.raises(ValueError, match="cells"):
        dpx.rmse(workloads.prefix(8), strategies.identity(9), LAPLACE)


def test_per_query_variance_sums_to_tse():
    W, A = workloads.all_range(16), strategies.hb(16)
    pq = error.per_query_variance(W, A, LAPLACE)
    assert pq.shape == (W.m,)
    assert pq.sum() == pytest.approx(error.expected_tse(W, A, LAPLACE), rel=1e-10)
    # brute force on the dense matrices
    Wd, Ad = W.dense(), A.dense()
    direct = 2 * A.sensitivity(1) ** 2 * np.diag(Wd @ np.linalg.pinv(Ad.T @ Ad, rcond=1e-10, hermitian=True) @ Wd.T)
    np.testing.assert_allclose(pq, direct, rtol=1e-8)


def test_kronecker_error_equals_dense_error():
    W = workloads.kron([workloads.prefix(6), workloads.identity_total(5)])
    A = Kronecker([strategies.h2(6), strategies.identity(5)])
    tse_kron = error.expected_tse(W, A, GAUSSIAN)
    tse_dense = error.expected_tse(Dense(W.dense()), Dense(A.dense()), GAUSSIAN)
    assert tse_kron == pytest.approx(tse_dense, rel=1e-9)
    pq = error.per_query_variance(W, A, GAUSSIAN)
    pq_dense = error.per_query_variance(Dense(W.dense()), Dense(A.dense()), GAUSSIAN)
    np.testing.assert_allclose(pq, pq_dense, rtol=1e-8)
    U = workloads.union([W, workloads.kron([workloads.total(6), workloads.prefix(5)])], [1.0, 2.0])
    assert error.expected_tse(U, A, LAPLACE) == pytest.approx(
        error.expected_tse(Dense(U.dense()), Dense(A.dense()), LAPLACE), rel=1e-9)


def test_svd_bound_of_kronecker_is_product():
    W1, W2 = workloads.prefix(7), workloads.all_range(5)
    K = workloads.kron([W1, W2])
    assert error.svdb(K) == pytest.approx(error.svdb(W1) * error.svdb(W2), rel=1e-12)
    assert error.svdb(K) == pytest.approx(error.svdb(Dense(K.dense())), rel=1e-9)


def test_svd_bound_is_permutation_invariant():
    W = workloads.all_range(32)
    P = workloads.permuted(W, seed=1)
    assert dpx.svd_bound(P, LAPLACE) == pytest.approx(dpx.svd_bound(W, LAPLACE), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 12), n=st.integers(1, 8), seed=st.integers(0, 2**32 - 1),
    which=st.sampled_from(["identity", "h2", "hb", "wavelet", "greedy_h", "random"]),
    gaussian=st.booleans(),
)
def test_svd_bound_below_every_strategy(m, n, seed, which, gaussian):
    rng = np.random.default_rng(seed)
    W = Dense(rng.normal(size=(m, n)))
    noise = GAUSSIAN if gaussian else LAPLACE
    if which == "random":
        A = Dense(rng.normal(size=(n + 2, n)))
    elif which == "greedy_h":
        A = strategies.greedy_h(W)
    else:
        A = getattr(strategies, which)(n)
    bound = dpx.svd_bound(W, noise)
    assert bound <= dpx.rmse(W, A, noise) * (1 + 1e-9)


@pytest.mark.parametrize("rank", [12, 7])
def test_gram_inverse_is_the_pseudo_inverse_without_scipys_lapack(monkeypatch, rank):
    """GramInverse gives X⁺ (and the null space) through numpy.linalg, which releases the
    interpreter lock (scipy.linalg's LAPACK wrappers hold it: the explorer's server froze)."""
    import scipy.linalg

    def held(*args, **kwargs):
        raise AssertionError("scipy.linalg LAPACK holds the interpreter lock")
    for name in ("dpotrf", "dpotri"):
        monkeypatch.setattr(scipy.linalg.lapack, name, held)
    for name in ("eigh", "inv", "cholesky", "pinvh"):
        monkeypatch.setattr(scipy.linalg, name, held)
    rng = np.random.default_rng(0)
    B = rng.standard_normal((rank, 12))
    X = B.T @ B
    inv = error.GramInverse(X)
    expected = np.linalg.pinv(X, rcond=1e-10, hermitian=True)
    np.testing.assert_allclose(inv.pinv, expected, atol=1e-9 * np.abs(expected).max())
    np.testing.assert_allclose(inv.pinv, inv.pinv.T)
    assert inv.null.shape == (12, 12 - rank)
    G = rng.standard_normal((12, 12))
    G = G @ G.T
    assert inv.trace(G) == pytest.approx(np.trace(G @ expected), rel=1e-9)
    assert inv.supports(X) and inv.supports(G) == (rank == 12)


@pytest.mark.parametrize("shape", [(30, 12), (8, 12)])
def test_dense_svd_bound_goes_through_numpy(monkeypatch, shape):
    """An explicit workload's SVD bound (the Gram on the smaller side, its eigenvalues) is
    computed by numpy, which releases the interpreter lock, and equals the singular values'."""
    import scipy.linalg

    def held(*args, **kwargs):
        raise AssertionError("scipy.linalg holds the interpreter lock")
    monkeypatch.setattr(scipy.linalg, "eigvalsh", held)
    monkeypatch.setattr(scipy.linalg.blas, "dsyrk", held)
    D = np.random.default_rng(1).standard_normal(shape)
    s = np.linalg.svd(D, compute_uv=False)
    assert error.svdb(Dense(D)) == pytest.approx(s.sum() ** 2 / shape[1], rel=1e-10)


def test_rmse_from_unit_is_sqrt2_b_for_laplace_and_rho_for_gaussian():
    W = np.tril(np.ones((8, 8)))  # prefix(8); with A = I the unit TSE is the sum of squares
    u, m = float((W ** 2).sum()), 8
    eps = 0.25
    b = 1 / eps  # Laplace scale per unit L1 sensitivity: variance 2b²
    assert error.rmse_from_unit(u, m, dpx.Laplace(eps)) == pytest.approx(
        math.sqrt(2) * b * math.sqrt(u / m), rel=1e-14)
    assert error.rmse_from_unit(u, m, dpx.Laplace(eps)) == pytest.approx(
        error.rmse(W, np.eye(8), dpx.Laplace(eps)), rel=1e-12)
    rho = 0.4  # zCDP Gaussian: σ² = 1/(2ρ) per unit L2 sensitivity (Bun & Steinke 2016, Prop. 1.6)
    g = dpx.Gaussian.from_rho(rho, 1e-6)
    got = error.rmse_from_unit(np.array([u, 4 * u, np.nan]), m, g)
    np.testing.assert_allclose(got[:2], [math.sqrt(u / (2 * rho * m)), 2 * math.sqrt(u / (2 * rho * m))],
                               rtol=1e-9)
    assert np.isnan(got[2]) and math.isnan(error.rmse_from_unit(math.nan, m, g))
    with pytest.raises(ValueError, match="m must be"):
        error.rmse_from_unit(u, 0, g)


def test_empirical_rmse():
    assert error.empirical_rmse([1.0, 5.0], [0.0, 2.0]) == pytest.approx(math.sqrt((1 + 9) / 2))
    trials = np.array([[1.0, 2.0], [3.0, 2.0]])  # two trials of two answers
    assert error.empirical_rmse(trials, [1.0, 2.0]) == pytest.approx(math.sqrt(4 / 4))
    with pytest.raises(ValueError, match="shape"):
        error.empirical_rmse([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="no answers"):
        error.empirical_rmse([], [])
