"""Workload builders: shapes, names, domains, random ranges, and invalid inputs."""

import itertools

import numpy as np
import pytest

from dpexplorer.queries import workloads as wl


@pytest.mark.parametrize("W,shape,name", [
    (wl.identity(5), (5, 5), "identity"),
    (wl.total(5), (1, 5), "total"),
    (wl.identity_total(5), (6, 5), "identity_total"),
    (wl.prefix(5), (5, 5), "prefix"),
    (wl.all_range(5), (15, 5), "all_range"),
    (wl.width_range(10, 3), (8, 10), "width3"),
    (wl.ranges(10, [(0, 3), (4, 4)]), (2, 10), "ranges"),
])
def test_shapes_and_names(W, shape, name):
    assert W.shape == shape
    assert W.m == shape[0]
    assert W.name == name
    assert W.domain == (shape[1],)


def test_all_range_rows_are_every_interval():
    D = wl.all_range(6).dense()
    expected = [[1.0 if lo <= j <= hi else 0.0 for j in range(6)]
                for lo, hi in itertools.combinations_with_replacement(range(6), 2)]
    np.testing.assert_array_equal(D, expected)


def test_width_range_rows():
    D = wl.width_range(6, 3).dense()
    assert (D.sum(axis=1) == 3).all()
    assert D.shape == (4, 6)


def test_random_uniform_ranges_are_seeded_and_uniform():
    W1 = wl.random_ranges(8, 20000, "uniform", seed=3)
    W2 = wl.random_ranges(8, 20000, "uniform", seed=3)
    np.testing.assert_array_equal(W1.lo, W2.lo)
    assert not np.array_equal(W1.lo, wl.random_ranges(8, 20000, "uniform", seed=4).lo)
    # each of the 36 intervals of [0, 7] is equally likely: chi-square against uniform
    counts = np.zeros((8, 8))
    np.add.at(counts, (W1.lo, W1.hi), 1)
    observed = counts[np.triu_indices(8)]
    expected = 20000 / 36
    chi2 = ((observed - expected) ** 2 / expected).sum()
    assert chi2 < 80  # 35 degrees of freedom: P(χ² > 80) < 1e-4


def test_clustered_ranges_follow_dawa_51():
    n = 4096
    W = wl.random_ranges(n, 2000, "clustered", seed=1)
    assert W.shape == (2000, n)
    # 5 centres × 400 queries; each interval contains its centre
    centres = np.unique(np.concatenate([W.lo[i * 400:(i + 1) * 400] for i in range(5)]).size)
    assert centres > 5
    per_cluster = [(W.lo[i * 400:(i + 1) * 400], W.hi[i * 400:(i + 1) * 400]) for i in range(5)]
    for lo, hi in per_cluster:
        c = np.max(lo)  # the centre is ≥ every lo and ≤ every hi (before clipping)
        assert np.all(hi >= np.minimum(c, n - 1))
    # half-normal offsets with std 256: mean |X| = 256·sqrt(2/π) ≈ 204 (clipping only lowers it)
    widths = W.hi - W.lo
    assert 250 < widths.mean() < 420
    large = wl.random_ranges(n, 2000, "large_clustered", seed=1)
    assert (large.hi - large.lo).mean() > widths.mean()


def test_permuted_has_same_rows_permuted():
    W = wl.all_range(6)
    P = wl.permuted(W, seed=2)
    D, Dp = W.dense(), P.dense()
    perm = P.right.perm
    np.testing.assert_array_equal(Dp, D @ np.eye(6)[perm])
    assert P.spec["type"] == "permuted"


def test_predicates():
    M = np.array([[1, 0, 1], [0, 1, 1]])
    W = wl.predicates(M)
    np.testing.assert_array_equal(W.dense(), M)
    with pytest.raises(ValueError, match="0/1"):
        wl.predicates([[0, 2, 1]])
    with pytest.raises(ValueError, match="non-empty 2D"):
        wl.predicates([])


def test_marginals():
    dom = (3, 4, 2)
    W = wl.marginals(dom, 1)
    assert W.shape == (3 + 4 + 2, 24)
    assert W.domain == dom
    W2 = wl.marginals(dom, [0, 1, 2, 3])
    assert W2.m == sum(np.prod([dom[i] for i in c]) for k in range(4)
                       for c in itertools.combinations(range(3), k))
    # the 2-way marginal on (0, 2) sums x over attribute 1
    x = np.random.default_rng(0).integers(0, 9, size=dom)
    M = wl.marginal(dom, [0, 2])
    np.testing.assert_array_equal(M @ x.ravel(), x.sum(axis=1).ravel())
    RM = wl.range_marginals((4, 5), 1, kind="prefix")
    assert RM.shape == (4 + 5, 20)
    RA = wl.range_marginals((4, 5), 2)
    assert RA.shape == (10 * 15, 20)


def test_union_and_kron():
    K = wl.kron([wl.prefix(3), wl.identity_total(2)])
    assert K.domain == (3, 2) and K.shape == (9, 6)
    U = wl.union([K, wl.kron([wl.total(3), wl.identity(2)])], weights=[1.0, 3.0])
    assert U.shape == (11, 6)
    np.testing.assert_array_equal(U.dense()[9:], 3 * np.kron(np.ones((1, 3)), np.eye(2)))


@pytest.mark.parametrize("call,match", [
    (lambda: wl.width_range(5, 6), "larger than the domain"),
    (lambda: wl.width_range(5, 0), "at least 1"),
    (lambda: wl.ranges(5, [(2, 1)]), "invalid"),
    (lambda: wl.ranges(5, [(0, 5)]), "invalid"),
    (lambda: wl.ranges(5, []), "at least one"),
    (lambda: wl.ranges(5, [(0.5, 2)]), "whole numbers"),
    (lambda: wl.random_ranges(5, 10, "weird"), "kind"),
    (lambda: wl.prefix(-1), "at least 1"),
    (lambda: wl.prefix(3.5), "whole number"),
    (lambda: wl.marginals((3, 4), 3), "order"),
    (lambda: wl.marginal((3, 4), [2]), "out of range"),
    (lambda: wl.union([wl.prefix(3), wl.prefix(4)]), "different domains"),
    (lambda: wl.union([wl.prefix(3)], weights=[-1]), "positive"),
    (lambda: wl.union([wl.prefix(3)], weights=[1, 2]), "weights"),
    (lambda: wl.range_marginals((3, 4), 1, kind="x"), "kind"),
    (lambda: wl.block({"type": "nope"}, 4), "unknown block"),
])
def test_invalid_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()
