"""Fourier strategy (Barak et al., PODS 2007) for marginal workloads: basis, Gram, error, sensitivity."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer import mechanism
from dpexplorer.core import error, registry
from dpexplorer.privacy import PrivateData
from dpexplorer.queries import workloads
from dpexplorer.queries.matrix import Dense, Kronecker, VStack, Weighted
from dpexplorer.strategies import fourier

GAUSSIAN = dpx.Gaussian(1.0, 1e-6)
LAPLACE = dpx.Laplace(1.0)


def _projector(domain, masks):
    """Reference Gram Σ_{b∈S} ⊗_i (P if i ∈ b else J/n_i), P = I − J/n (dense)."""
    n = math.prod(domain)
    out = np.zeros((n, n))
    for b in masks:
        M = np.ones((1, 1))
        for i, k in enumerate(domain):
            J = np.ones((k, k)) / k
            M = np.kron(M, np.eye(k) - J if b >> i & 1 else J)
        out += M
    return out


def _dense_trace(W, A):
    """tr(WᵀW (AᵀA)⁺) through the generic dense path (no hook)."""
    return error.unit_tse(W, Dense(A.dense()), 2) / Dense(A.dense()).sensitivity(2) ** 2


# ------------------------------------------------------------------ basis
@pytest.mark.parametrize("n", range(1, 10))
def test_fourier_basis_is_orthonormal_and_mean_zero(n):
    F = fourier.fourier_basis(n)
    assert F.shape == (n - 1, n)
    np.testing.assert_allclose(F @ F.T, np.eye(n - 1), atol=1e-13)
    np.testing.assert_allclose(F.sum(axis=1), 0.0, atol=1e-13)
    if n == 2:
        np.testing.assert_allclose(F, [[1 / math.sqrt(2), -1 / math.sqrt(2)]])  # Barak's ±1 character


@pytest.mark.parametrize("domain,k", [((2, 3, 4), [1, 2]), ((2, 2, 2, 2), 2), ((3, 1, 4), [0, 1])])
def test_strategy_rows_orthonormal_and_gram_is_the_projector(domain, k):
    W = workloads.marginals(domain, k)
    A = fourier.fourier(W)
    D = A.dense()
    np.testing.assert_allclose(D @ D.T, np.eye(A.m), atol=1e-12)
    orders = [k] if isinstance(k, int) else k
    sets = [c for o in orders for c in itertools.combinations(range(len(domain)), o)]
    S = fourier.downward_closure(sets, len(domain))
    np.testing.assert_allclose(D.T @ D, _projector(domain, S), atol=1e-12)
    # rows: Σ_{b∈S} dim_b
    dims = [math.prod(domain[i] - 1 for i in range(len(domain)) if b >> i & 1) for b in S]
    assert A.m == sum(dims)


def test_downward_closure():
    assert fourier.downward_closure([(0, 2)], 3) == (0, 1, 4, 5)
    assert fourier.downward_closure([0b011, (2,)], 3) == (0, 1, 2, 3, 4)
    assert fourier.downward_closure([()], 2) == (0,)


# ------------------------------------------------------------------ error
@pytest.mark.parametrize("W", [
    workloads.marginals((2, 3, 4), [1, 2]),
    workloads.marginals((2, 2, 2, 2), 2),
    workloads.marginals((2, 3, 4), [0, 1, 2, 3]),
    workloads.union([workloads.marginal((3, 4, 2), [0, 1]), workloads.marginal((3, 4, 2), [2])],
                    weights=[2.0, 0.5]),
    workloads.kron([workloads.identity_total(3), workloads.identity_total(4)]),  # all marginals
], ids=["2x3x4_1-2way", "binary_2way", "2x3x4_all", "weighted", "kron_identity_total"])
def test_workload_trace_equals_dense(W):
    A = fourier.fourier(W)
    assert A.workload_trace(W) == pytest.approx(_dense_trace(W, A), rel=1e-10)
    # row variances diag(W (AᵀA)⁺ Wᵀ) against the dense computation
    Wd, P = W.dense(), A.dense().T @ A.dense()
    np.testing.assert_allclose(A.workload_row_variances(W), np.einsum("ij,jk,ik->i", Wd, P, Wd),
                               rtol=1e-10, atol=1e-12)
    for noise in (GAUSSIAN, LAPLACE):
        assert error.rmse(W, A, noise) == pytest.approx(error.rmse(W, Dense(A.dense()), noise), rel=1e-10)


def test_trace_of_other_workloads_and_support():
    dom = (2, 3, 4)
    A = fourier.fourier(workloads.marginals(dom, 1))  # S = {∅, {0}, {1}, {2}}
    # a workload inside the span: totals and 1-way marginals of a sub-domain
    W = workloads.marginal(dom, [2])
    assert A.workload_trace(W) == pytest.approx(_dense_trace(W, A), rel=1e-10)
    # a 2-way marginal needs the coefficients of {0, 1}: refused, by the hook and the dense path
    W2 = workloads.marginal(dom, [0, 1])
    with pytest.raises(error.UnsupportedWorkloadError, match=r"\[0, 1\]"):
        A.workload_trace(W2)
    with pytest.raises(error.UnsupportedWorkloadError):
        error.unit_tse(W2, Dense(A.dense()), 2)
    # a workload over a different attribute split: the hook defers to the generic path
    flat = Dense(workloads.marginal(dom, [0]).dense())
    assert A.workload_trace(flat) is NotImplemented
    assert error.unit_tse(flat, A, 2) == pytest.approx(error.unit_tse(flat, Dense(A.dense()), 2), rel=1e-10)


def test_row_variances_with_nested_kronecker_factors_equal_dense():
    """Nested (weighted) Kronecker factors are expanded (marginals._terms), not left to the dense path."""
    dom = (2, 3, 4)
    inner = Kronecker([workloads.identity_total(2), workloads.prefix(3)])
    W = VStack([
        Kronecker([inner, workloads.identity_total(4)]),                        # (2 ⊗ 3) ⊗ 4
        Weighted(Kronecker([workloads.total(2),
                            Weighted(Kronecker([workloads.identity(3), workloads.all_range(4)]), 0.5)]),
                 3.0),                                                          # 2 ⊗ 0.5·(3 ⊗ 4)
    ])
    W.domain = dom
    A = fourier.fourier(W, scope="kronecker")
    assert A.domain == dom
    Wd, P = W.dense(), A.dense().T @ A.dense()  # (AᵀA)⁺ = AᵀA, a projector
    dense = np.einsum("ij,jk,ik->i", Wd, P, Wd)
    rv = A.workload_row_variances(W)
    assert rv is not NotImplemented
    np.testing.assert_allclose(rv, dense, rtol=1e-10, atol=1e-12)
    assert A.workload_trace(W) == pytest.approx(dense.sum(), rel=1e-10)
    # a strategy missing coefficients the workload needs: the hook refuses, with Fourier's message
    B = fourier.fourier_strategy(dom, [(0, 1)])
    with pytest.raises(error.UnsupportedWorkloadError, match=r"Fourier coefficients of attributes \[2\]"):
        B.workload_row_variances(W)


@pytest.mark.parametrize("d,k", [(4, 1), (5, 2), (5, 3), (6, 2)])
def test_binary_k_way_marginals_closed_form(d, k):
    # binary domain, all k-way marginals: S = {b : |b| ≤ k}, dim_b = 1, λ_b = C(d−|b|, k−|b|)·2^(d−k)
    # ⇒ tr = C(d,k)·2^d, m = C(d,k)·2^k, so tr/m = 2^(d−k); Δ₂² = |S|/2^d and Δ₁ = |S|·2^(−d/2)
    # (every entry of a character row is ±2^(−d/2)).  MSE: Gaussian v·|S|/2^k, Laplace v·|S|²/2^k.
    W = workloads.marginals((2,) * d, k)
    A = fourier.fourier(W)
    size = sum(math.comb(d, j) for j in range(k + 1))
    assert A.m == size
    assert A.sensitivity(2) == pytest.approx(math.sqrt(size / 2**d), rel=1e-12)
    assert A.sensitivity(1) == pytest.approx(size * 2 ** (-d / 2), rel=1e-12)
    assert error.rmse(W, A, GAUSSIAN) == pytest.approx(
        math.sqrt(GAUSSIAN.variance_per_unit * size / 2**k), rel=1e-12)
    assert error.rmse(W, A, LAPLACE) == pytest.approx(
        math.sqrt(LAPLACE.variance_per_unit * size**2 / 2**k), rel=1e-12)


@settings(max_examples=20, deadline=None)
@given(domain=st.lists(st.integers(1, 5), min_size=1, max_size=3),
       seed=st.integers(0, 10**6))
def test_sensitivities_match_dense_column_norms(domain, seed):
    rng = np.random.default_rng(seed)
    d = len(domain)
    sets = [int(m) for m in rng.integers(0, 2**d, size=2)]
    A = fourier.fourier_strategy(domain, sets)
    D = A.dense()
    assert A.sensitivity(1) == pytest.approx(np.abs(D).sum(axis=0).max(), rel=1e-12)
    assert A.sensitivity(2) == pytest.approx(np.sqrt((D**2).sum(axis=0)).max(), rel=1e-12)
    # every column has the same L2 norm: the projector's diagonal is constant
    assert np.ptp(np.sqrt((D**2).sum(axis=0))) < 1e-12


# ------------------------------------------------------- reconstruction
def test_reconstruction_is_the_transpose_and_empirical_error_matches():
    """Reconstruction is least squares, and the empirical MSE over 400 seeded runs is the analytic one.

    Tolerance: |mean − analytic| < 5·se, se the sample standard error of the 400 i.i.d. trial MSEs;
    with N = 400 trials this is a two-sided z of 5, a false-failure rate of about 6e-7 per run for
    a fresh seed (the seeds are fixed, so the run is deterministic).  Power: se < 0.1·analytic is
    asserted, so the tolerance is under 50 % of the MSE and a 2× noise scale (4× MSE) fails.
    """
    W = workloads.marginals((2, 3, 4), 1)
    A = registry.get("fourier").strategy(W, LAPLACE)
    rng = np.random.default_rng(0)
    y = rng.normal(size=A.m)
    np.testing.assert_allclose(mechanism.reconstruct(A, y), np.linalg.lstsq(A.dense(), y, rcond=None)[0],
                               atol=1e-12)
    x = rng.integers(0, 50, size=W.n).astype(float)
    truth = W @ x
    np.testing.assert_allclose(W @ mechanism.reconstruct(A, A @ x), truth, atol=1e-9)  # supported
    trials = 400
    sq = []
    for t in range(trials):
        est = mechanism.run("fourier", PrivateData(x), W, LAPLACE, np.random.default_rng(t))
        sq.append(np.mean((W @ est.x_hat - truth) ** 2))
    sq = np.asarray(sq)
    analytic = error.rmse(W, A, LAPLACE) ** 2
    se = sq.std(ddof=1) / math.sqrt(trials)
    assert abs(sq.mean() - analytic) < 5 * se
    assert se < 0.1 * analytic


# --------------------------------------------------------- applicability
def test_registry_and_scope():
    mech = registry.get("fourier")
    assert mech.label == "Fourier" and "Barak" in mech.source
    with pytest.raises(registry.NotApplicableError, match="marginal workloads"):
        mech.strategy(workloads.all_range(16), GAUSSIAN)
    W = workloads.range_marginals((4, 5), 1)
    with pytest.raises(registry.NotApplicableError):
        mech.strategy(W, GAUSSIAN)
    A = mech.strategy(W, GAUSSIAN, scope="kronecker")  # Li & Miklau Table 2: range marginals
    assert A.masks == (0, 1, 2)
    assert A.workload_trace(W) == pytest.approx(_dense_trace(W, A), rel=1e-10)
    with pytest.raises(ValueError, match="scope"):
        fourier.fourier(W, scope="all")
    table = dpx.compare(workloads.all_range(16), GAUSSIAN, mechanisms=["fourier", "identity"])
    assert "marginal workloads" in table.set_index("mechanism").loc["fourier", "note"]


def test_bad_input():
    with pytest.raises(ValueError, match="whole number"):
        fourier.fourier_basis(0)
    with pytest.raises(ValueError, match="out of range"):
        fourier.fourier_strategy((2, 3), [(0, 2)])
    with pytest.raises(ValueError, match="outside"):
        fourier.fourier_strategy((2, 3), [4])
    with pytest.raises(ValueError, match="domain"):
        fourier.fourier_strategy((2, 0), [1])
    with pytest.raises(ValueError, match="at least one"):
        fourier.fourier_strategy((2, 3), [])
    # attributes of size 1 have no mean-zero vectors (dim_b = 0): only the total is measured
    assert fourier.fourier_strategy((1, 1), [3]).masks == (0,)
    with pytest.raises(ValueError, match="bitmask"):
        fourier.fourier_strategy((2, 3), [True])


def test_a_tiny_but_nonzero_marginal_is_measured_and_supported():
    """Needed coefficients come from exact factor eigenvalues, not a relative tolerance."""
    W = dpx.workloads.union([dpx.workloads.marginal((10, 10), [0]),
                             dpx.workloads.marginal((10, 10), [1])], [1e-7, 1])
    A = fourier.fourier(W)
    assert 0b01 in A.masks and 0b10 in A.masks
    # the error is the dense one (exact support, no eigenspace left out)
    G, Ad = W.gram().dense(), A.dense()
    dense = np.trace(G @ np.linalg.pinv(Ad.T @ Ad, rcond=1e-10, hermitian=True))
    assert A.workload_trace(W) == pytest.approx(dense, rel=1e-9)
