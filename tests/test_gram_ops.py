"""Structured Gram products (dpexplorer.queries.gram_ops) against the dense Gram matrices."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpexplorer.queries import workloads
from dpexplorer.queries.gram_ops import gram_operator, paired, segment_sums, segmented_cumsum
from dpexplorer.queries.matrix import Dense, Diagonal, Kronecker, Product


def structured(n, rng):
    ar, pr, I, T = workloads.all_range, workloads.prefix, workloads.identity, workloads.total
    return [
        ar(n), pr(n), workloads.width_range(n, int(rng.integers(1, n + 1))),
        workloads.random_ranges(n, 30, seed=int(rng.integers(100))), I(n), T(n),
        workloads.identity_total(n), 3.0 * pr(n),
        workloads.union([ar(n), I(n), T(n)], [1.0, 2.0, 0.5]),
        workloads.permuted(ar(n), seed=int(rng.integers(100))),
        Product(pr(n), Diagonal(rng.random(n) + 0.5)),
    ]


def random_intervals(n, rng):
    """Sorted disjoint intervals of [0, n), some cells left in gaps."""
    cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, int(rng.integers(0, n))),
                              replace=False)) if n > 1 else np.zeros(0, dtype=int)
    lo = np.r_[0, cuts]
    hi = np.r_[cuts - 1, n - 1]
    keep = rng.random(lo.size) < 0.8
    keep[0] = True
    return lo[keep], hi[keep]


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**31))
def test_operator_matches_dense_gram(n, seed):
    rng = np.random.default_rng(seed)
    lo, hi = random_intervals(n, rng)
    for W in structured(n, rng):
        op = gram_operator(W)
        G = W.gram().dense()
        X = rng.normal(size=(n, 3))
        scale = max(np.abs(G).max(), 1.0) * np.abs(X).sum(axis=0).max()
        np.testing.assert_allclose(op.matmat(X), G @ X, atol=1e-12 * scale)
        np.testing.assert_allclose(op.rows(X.T), X.T @ G, atol=1e-12 * scale)
        np.testing.assert_allclose(op.diag(), np.diag(G), rtol=1e-13)
        assert op.trace() == pytest.approx(np.trace(G), rel=1e-12)
        if op.intervals:
            u = rng.normal(size=n)
            ref = [u[s:e + 1] @ G[s:e + 1, s:e + 1] @ u[s:e + 1] for s, e in zip(lo, hi, strict=True)]
            np.testing.assert_allclose(op.interval_forms(u, lo, hi), ref,
                                       atol=1e-12 * max(np.abs(G).max(), 1.0) * n * n)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**31))
def test_paired_gram_is_the_workload_on_pairs_of_cells(n, seed):
    # PᵀGP with P adding cells 2i and 2i + 1 (the last alone for odd n): the Gram of W·P
    rng = np.random.default_rng(seed)
    nc = (n + 1) // 2
    P = np.zeros((n, nc))
    P[np.arange(n), np.arange(n) // 2] = 1.0
    lo, hi = random_intervals(nc, rng)
    for W in structured(n, rng):
        op = gram_operator(W)
        if not op.intervals:
            continue
        G = P.T @ W.gram().dense() @ P
        coarse = paired(op)
        assert coarse.n == nc and coarse.intervals
        X = rng.normal(size=(nc, 3))
        scale = max(np.abs(G).max(), 1.0) * np.abs(X).sum(axis=0).max()
        np.testing.assert_allclose(coarse.matmat(X), G @ X, atol=1e-12 * scale)
        np.testing.assert_allclose(coarse.rows(X.T), X.T @ G, atol=1e-12 * scale)
        np.testing.assert_allclose(coarse.diag(), np.diag(G), rtol=1e-12)
        u = rng.normal(size=nc)
        ref = [u[s:e + 1] @ G[s:e + 1, s:e + 1] @ u[s:e + 1] for s, e in zip(lo, hi, strict=True)]
        np.testing.assert_allclose(coarse.interval_forms(u, lo, hi), ref,
                                   atol=1e-12 * max(np.abs(G).max(), 1.0) * n * n)
        np.testing.assert_allclose(paired(coarse).diag(), np.diag(
            P[:nc, : (nc + 1) // 2].T @ G @ P[:nc, : (nc + 1) // 2]), rtol=1e-12)


def test_a_permuted_gram_is_its_workloads_relabelled():
    # G = QᵀG_inner Q: a strategy's columns permuted by ``cols`` keep its error (HDMM Sec. 11.1)
    rng = np.random.default_rng(5)
    W = workloads.all_range(12)
    op = gram_operator(workloads.permuted(W, seed=2))
    inner, cols = op.relabelled()
    G, G_inner = op.matmat(np.eye(12)), inner.matmat(np.eye(12))
    np.testing.assert_allclose(G, G_inner[np.ix_(cols, cols)], atol=1e-12)
    A = rng.random((15, 12))
    X, Y = A.T @ A, A[:, cols].T @ A[:, cols]
    assert np.trace(G @ np.linalg.inv(Y)) == pytest.approx(np.trace(G_inner @ np.linalg.inv(X)))
    assert gram_operator(W).relabelled() is None


def test_pairing_needs_ordered_cells():
    with pytest.raises(ValueError, match="permuted"):
        paired(gram_operator(workloads.permuted(workloads.prefix(6))))


def test_unstructured_workloads_have_no_operator():
    assert gram_operator(Dense(np.ones((2, 3)))) is None
    assert gram_operator(Kronecker([workloads.prefix(3), workloads.prefix(2)])) is None
    assert gram_operator(workloads.union([workloads.prefix(4), Dense(np.eye(4))])) is None
    assert not gram_operator(workloads.permuted(workloads.prefix(5))).intervals


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 50), seed=st.integers(0, 2**31))
def test_segmented_sums(n, seed):
    rng = np.random.default_rng(seed)
    lo, hi = random_intervals(n, rng)
    v = rng.normal(size=n)
    C = segmented_cumsum(v, lo, hi)
    inside = np.zeros(n, dtype=bool)
    for s, e in zip(lo, hi, strict=True):
        np.testing.assert_allclose(C[s:e + 1], np.cumsum(v[s:e + 1]), rtol=1e-12, atol=1e-12)
        inside[s:e + 1] = True
    assert np.all(C[~inside] == 0)
    np.testing.assert_allclose(segment_sums(v, lo, hi),
                               [v[s:e + 1].sum() for s, e in zip(lo, hi, strict=True)], atol=1e-12)


def test_segmented_cumsum_of_very_unequal_intervals():
    # one long interval and many single cells: summed interval by interval, not padded
    n = 300
    v = np.random.default_rng(3).normal(size=n)
    lo = np.r_[0, np.arange(200, n)]
    hi = np.r_[199, np.arange(200, n)]
    C = segmented_cumsum(v, lo, hi)
    np.testing.assert_allclose(C[:200], np.cumsum(v[:200]))
    np.testing.assert_allclose(C[200:], v[200:])
