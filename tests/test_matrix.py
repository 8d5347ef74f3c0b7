"""Implicit matrices against their dense forms, and Kronecker properties."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpexplorer.queries import matrix as mx
from dpexplorer.queries import workloads
from dpexplorer.strategies import classic as strategies


def _cases():
    rng = np.random.default_rng(0)
    return {
        "dense": mx.Dense(rng.normal(size=(5, 7))),
        "sparse": mx.Sparse(np.eye(7)[:3] * 2.0),
        "identity": mx.Identity(7),
        "ones": mx.Ones(3, 7),
        "total": mx.Total(7),
        "prefix": mx.Prefix(7),
        "all_range": mx.AllRange(7),
        "ranges": mx.RangeQueries(7, [0, 2, 6], [3, 2, 6]),
        "weighted": mx.Weighted(mx.Prefix(7), -2.5),
        "vstack": mx.VStack([mx.Identity(7), mx.Total(7), mx.Prefix(7)]),
        "kron": mx.Kronecker([mx.Prefix(7)]),
        "diag": mx.Diagonal(np.arange(7.0) - 3),
        "permutation": mx.Permutation(rng.permutation(7)),
        "product": mx.Product(mx.AllRange(7), mx.Permutation(rng.permutation(7))),
        "product_diag": mx.Product(mx.Prefix(7), mx.Diagonal(np.arange(1.0, 8.0))),
        "product_dense": mx.Product(mx.Prefix(7), mx.Dense(rng.normal(size=(7, 7)))),
        "transpose": mx.Transpose(mx.Dense(rng.normal(size=(7, 4)))),
        "wavelet": strategies.wavelet(7),
        "h2": strategies.h2(7),
    }


CASES = _cases()


def test_sparse_column_norms_and_transpose_read_the_stored_entries():
    # column norms from the CSR entries (duplicates add up first), Mᵀy from a transposed view
    import scipy.sparse

    rng = np.random.default_rng(0)
    data, rows, cols = rng.normal(size=40), rng.integers(0, 9, 40), rng.integers(0, 6, 40)
    S = scipy.sparse.coo_array((data, (rows, cols)), shape=(9, 6)).tocsr()
    dup = scipy.sparse.csr_array((np.array([1.0, -3.0, 2.0]), np.array([0, 0, 1]),
                                  np.array([0, 2, 3])), shape=(2, 2))  # (0, 0) stored twice
    for M in (S, dup):
        D = M.toarray()
        A = mx.Sparse(M)
        np.testing.assert_allclose(A.column_norms(1), np.abs(D).sum(axis=0), atol=1e-12)
        np.testing.assert_allclose(A.column_norms(2), np.sqrt((D**2).sum(axis=0)), atol=1e-12)
        assert A.sensitivity(1) == pytest.approx(np.abs(D).sum(axis=0).max())
        y = rng.normal(size=D.shape[0])
        np.testing.assert_allclose(A.rmatvec(y), D.T @ y, atol=1e-12)
        np.testing.assert_allclose(A.rmatvec(np.c_[y, 2 * y]), D.T @ np.c_[y, 2 * y], atol=1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_implicit_matches_dense(name):
    M = CASES[name]
    D = M.dense()
    assert D.shape == M.shape
    rng = np.random.default_rng(1)
    x = rng.normal(size=M.n)
    X = rng.normal(size=(M.n, 3))
    y = rng.normal(size=M.m)
    np.testing.assert_allclose(M @ x, D @ x, atol=1e-10)
    np.testing.assert_allclose(M @ X, D @ X, atol=1e-10)
    np.testing.assert_allclose(M.rmatvec(y), D.T @ y, atol=1e-10)
    np.testing.assert_allclose(M.T @ y, D.T @ y, atol=1e-10)
    np.testing.assert_allclose(M.gram().dense(), D.T @ D, atol=1e-9)
    np.testing.assert_allclose(M.column_norms(1), np.abs(D).sum(axis=0), atol=1e-10)
    np.testing.assert_allclose(M.column_norms(2), np.sqrt((D**2).sum(axis=0)), atol=1e-10)
    assert M.sensitivity(1) == pytest.approx(np.abs(D).sum(axis=0).max())
    assert M.sensitivity(2) == pytest.approx(np.sqrt((D**2).sum(axis=0)).max())
    assert M.frobenius_squared() == pytest.approx((D**2).sum())
    S = rng.normal(size=(M.n, M.n))
    S = S + S.T
    np.testing.assert_allclose(M.rows_quadratic(S), np.diag(D @ S @ D.T), atol=1e-8)
    np.testing.assert_allclose(M.pinv().dense(), np.linalg.pinv(D), atol=1e-8)
    np.testing.assert_allclose(M.sparse().toarray(), D, atol=1e-12)
    op = M.as_linear_operator()
    np.testing.assert_allclose(op.matvec(x), D @ x, atol=1e-10)


def test_all_range_closed_forms():
    n = 9
    W = mx.AllRange(n)
    assert W.shape == (n * (n + 1) // 2, n)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    np.testing.assert_allclose(W.gram().dense(), (np.minimum(i, j) + 1) * (n - np.maximum(i, j)))
    assert W.frobenius_squared() == n * (n + 1) * (n + 2) / 6


def test_dense_refuses_above_limit():
    W = mx.AllRange(4096)  # 8.4 million rows
    with pytest.raises(mx.MatrixTooLargeError, match="above the limit"):
        W.dense()
    # its implicit parts still work
    assert W.sensitivity(1) == 2048 * 2049


def test_large_all_range_gram_is_cheap():
    G = mx.AllRange(2048).gram()
    assert G.shape == (2048, 2048)
    assert G.dense()[0, 0] == 2048


def test_invalid_inputs():
    with pytest.raises(ValueError, match="positive whole number"):
        mx.Identity(2.5)
    with pytest.raises(ValueError, match="at least 1"):
        mx.Prefix(0)
    with pytest.raises(ValueError, match="inclusive"):
        mx.RangeQueries(5, [3], [2])
    with pytest.raises(ValueError, match="inclusive"):
        mx.RangeQueries(5, [0], [5])
    with pytest.raises(ValueError, match="finite"):
        mx.Dense([[np.nan, 1.0]])
    with pytest.raises(ValueError, match="2-dimensional"):
        mx.Dense(np.ones(3))
    with pytest.raises(ValueError, match="different numbers of cells"):
        mx.VStack([mx.Identity(3), mx.Identity(4)])
    with pytest.raises(ValueError, match="columns"):
        mx.Identity(3) @ np.ones(4)
    with pytest.raises(ValueError, match="p must be"):
        mx.Identity(3).sensitivity(3)
    with pytest.raises(ValueError, match="permutation"):
        mx.Permutation([0, 0, 1])
    with pytest.raises(TypeError):
        mx.as_matrix("abc")


small_matrix = st.integers(1, 4).flatmap(
    lambda m: st.integers(1, 4).flatmap(
        lambda n: st.lists(st.integers(-3, 3), min_size=m * n, max_size=m * n).map(
            lambda v, m=m, n=n: mx.Dense(np.array(v, dtype=float).reshape(m, n))
        )
    )
)


@settings(max_examples=60, deadline=None)
@given(factors=st.lists(small_matrix, min_size=1, max_size=3), seed=st.integers(0, 1000))
def test_kronecker_properties(factors, seed):
    K = mx.Kronecker(factors)
    D = K.dense()
    expected = np.ones((1, 1))
    for f in factors:
        expected = np.kron(expected, f.dense())
    np.testing.assert_allclose(D, expected)
    # norms multiply: sensitivities are the product of the factors'
    for p in (1, 2):
        assert K.sensitivity(p) == pytest.approx(np.prod([f.sensitivity(p) for f in factors]), abs=1e-9)
        np.testing.assert_allclose(K.column_norms(p), np.linalg.norm(D, ord=p, axis=0), atol=1e-9)
    # pinv of a Kronecker product is the product of pinvs
    np.testing.assert_allclose(K.pinv().dense(), np.linalg.pinv(D), atol=1e-7)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=K.n)
    np.testing.assert_allclose(K @ x, D @ x, atol=1e-9)
    y = rng.normal(size=K.m)
    np.testing.assert_allclose(K.rmatvec(y), D.T @ y, atol=1e-9)
    np.testing.assert_allclose(K.gram().dense(), D.T @ D, atol=1e-9)
    assert K.frobenius_squared() == pytest.approx((D**2).sum(), abs=1e-9)


def test_kronecker_workload_domain():
    K = workloads.kron([workloads.prefix(3), workloads.identity_total(4), workloads.total(2)])
    assert K.domain == (3, 4, 2)
    assert K.shape == (3 * 5 * 1, 24)


# ------------------------------------------------------------ overflow and empty workloads
@pytest.mark.parametrize("make", [lambda A: mx.Dense(A), lambda A: mx.Sparse(A)])
def test_gram_that_overflows_is_a_clear_error(make):
    M = make(np.full((3, 4), 1e200))  # finite entries, products of 1e400
    with pytest.raises(ValueError, match="overflows float64"):
        M.gram()
    assert np.isfinite(make(np.full((3, 4), 1e150)).gram().dense()).all()  # 3e300 still fits


def test_check_has_queries():
    mx.check_has_queries(mx.Dense(np.ones((1, 4))), "x")
    with pytest.raises(ValueError, match=r"release: the workload 'dense' has no queries \(shape \(0, 4\)\)"):
        mx.check_has_queries(mx.Dense(np.zeros((0, 4))), "release")
