"""DAWA (Li, Hay, Miklau, Wang, PVLDB 2014): partition, workload transformation, privacy accounting."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer.adaptive import dawa
from dpexplorer.adaptive import partition as pt
from dpexplorer.adaptive.hilbert import hilbert_order
from dpexplorer.privacy import PrivateData
from dpexplorer.queries import workloads
from dpexplorer.strategies import classic as strategies

X_EXAMPLE = np.array([2, 3, 8, 1, 0, 2, 0, 4, 2, 4], dtype=float)  # DAWA Example 1 (Fig. 1)
B_EXAMPLE = pt.Partition(np.array([0, 2, 3, 7, 10]))  # b1=[1,2], b2=[3,3], b3=[4,7], b4=[8,10]


def test_example_bucket_deviations():
    # Sec. 3.1: dev(b1) = 1, dev(b2) = 0, dev(b3) = 3, dev(b4) = 2⅔
    devs = [pt.deviation(X_EXAMPLE, a, b) for a, b in zip(B_EXAMPLE.lo, B_EXAMPLE.hi)]
    np.testing.assert_allclose(devs, [1.0, 0.0, 3.0, 8 / 3])
    assert B_EXAMPLE.counts(X_EXAMPLE).tolist() == [5, 8, 3, 10]


def test_example_partition_costs():
    # pcost = 6⅔ + 4/ε₂: 10⅔ at ε₂ = 1; one bucket: dev 17.2, pcost 18.2
    assert pt.partition_cost(X_EXAMPLE, B_EXAMPLE, 1.0) == pytest.approx(10 + 2 / 3)
    single = pt.Partition(np.array([0, 10]))
    assert pt.deviation(X_EXAMPLE, 0, 9) == pytest.approx(17.2)
    assert pt.partition_cost(X_EXAMPLE, single, 1.0) == pytest.approx(18.2)
    # at ε₂ = 0.1: 46⅔ for B against 27.2 for a single bucket, which wins
    assert pt.partition_cost(X_EXAMPLE, B_EXAMPLE, 0.1) == pytest.approx(46 + 2 / 3)
    assert pt.partition_cost(X_EXAMPLE, single, 0.1) == pytest.approx(27.2)
    best, cost = pt.optimal_partition(X_EXAMPLE, 0.1, "all")
    assert best.k == 1 and cost == pytest.approx(27.2)
    best1, cost1 = pt.optimal_partition(X_EXAMPLE, 1.0, "all")
    assert cost1 <= 10 + 2 / 3  # the optimum is at most B's cost


def test_example_uniform_expansion():
    # Sec. 2: s = (6.3, 7.1, 3.6, 8.4) expands to (3.15, 3.15, 7.1, .9, .9, .9, .9, 2.8, 2.8, 2.8)
    x_hat = B_EXAMPLE.expand([6.3, 7.1, 3.6, 8.4])
    np.testing.assert_allclose(x_hat, [3.15, 3.15, 7.1, .9, .9, .9, .9, 2.8, 2.8, 2.8])


def test_example_query_transformation():
    # Example 4.5: q = x2 + ... + x6 becomes ½ s1 + s2 + ¾ s3
    q = workloads.ranges(10, [(1, 5)])
    np.testing.assert_allclose(B_EXAMPLE.transform(q).toarray(), [[0.5, 1.0, 0.75, 0.0]])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 30), seed=st.integers(0, 10**6))
def test_transformation_proposition_4_6(n, seed):
    # W · expand(B, s) = Ŵ s for any workload, partition and bucket statistics
    rng = np.random.default_rng(seed)
    cuts = np.flatnonzero(rng.random(n - 1) < 0.4) + 1
    B = pt.Partition(np.concatenate([[0], cuts, [n]]))
    W = dpx.matrix.Dense(rng.normal(size=(7, n)))
    s = rng.normal(size=B.k)
    np.testing.assert_allclose(W @ B.expand(s), B.transform(W) @ s, atol=1e-9)
    Ghat = B.transform_gram(W.gram().dense())
    What = B.transform(W).toarray()
    np.testing.assert_allclose(Ghat, What.T @ What, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(x=st.lists(st.integers(0, 20), min_size=1, max_size=40), eps2=st.floats(0.05, 5))
def test_candidate_costs_match_direct_deviation(x, eps2):
    x = np.array(x, dtype=float)
    for cand in ("pow2", "dyadic", "all"):
        lo, hi, cost = pt.candidate_costs(x, eps2, cand)
        plo, phi = dawa.candidate_intervals(x.size, cand)
        np.testing.assert_array_equal(lo, plo)
        np.testing.assert_array_equal(hi, phi)
        direct = [pt.deviation(x, a, b) + 1 / eps2 for a, b in zip(lo, hi)]
        np.testing.assert_allclose(cost, direct, atol=1e-8)


def _all_partitions(n):
    for mask in range(2 ** (n - 1)):
        cuts = [i + 1 for i in range(n - 1) if mask >> i & 1]
        yield pt.Partition(np.array([0] + cuts + [n]))


@settings(max_examples=40, deadline=None)
@given(x=st.lists(st.integers(0, 12), min_size=1, max_size=8), eps2=st.floats(0.1, 3))
def test_exact_partition_against_brute_force(x, eps2):
    x = np.array(x, dtype=float)
    best = min(pt.partition_cost(x, p, eps2) for p in _all_partitions(x.size))
    p_all, c_all = pt.optimal_partition(x, eps2, "all")
    assert c_all == pytest.approx(best)
    # power-of-two buckets: the best partition using only such buckets
    pow2 = [p for p in _all_partitions(x.size) if all((s & (s - 1)) == 0 for s in p.sizes)]
    best2 = min(pt.partition_cost(x, p, eps2) for p in pow2)
    assert pt.optimal_partition(x, eps2, "pow2")[1] == pytest.approx(best2)
    # dyadic buckets: power-of-two lengths starting at a multiple of their length
    dyadic = [p for p in pow2 if all(a % s == 0 for a, s in zip(p.lo, p.sizes, strict=True))]
    best3 = min(pt.partition_cost(x, p, eps2) for p in dyadic)
    assert pt.optimal_partition(x, eps2, "dyadic")[1] == pytest.approx(best3)


def test_noise_scales():
    # Alg. 1: 2Δbcost/ε₁ = 4/ε₁; the Remark: (Δbcost + Δ_b)/ε₁ with Δ_b = 2 − 2/L
    L = np.array([1, 2, 4, 1024])
    np.testing.assert_allclose(dawa.noise_scales(L, 0.5, refined=False), 8.0)
    np.testing.assert_allclose(dawa.noise_scales(L, 0.5), (2 + 2 - 2 / L) / 0.5)


@settings(max_examples=50, deadline=None)
@given(x=st.lists(st.integers(0, 30), min_size=2, max_size=30), j=st.integers(0, 29))
def test_bucket_cost_sensitivity(x, j):
    # moving one record changes dev(x, b) by at most Δ_b = 2 − 2/|b| ≤ Δbcost = 2
    x = np.array(x, dtype=float)
    j = j % x.size
    y = x.copy()
    y[j] += 1
    lo, hi, c0 = pt.candidate_costs(x, 1.0, "all")
    _, _, c1 = pt.candidate_costs(y, 1.0, "all")
    L = hi - lo + 1
    assert np.all(np.abs(c1 - c0) <= 2 - 2 / L + 1e-9)


def test_partition_noise_distribution():
    """The partition kernel's noisy costs carry Laplace(scale) noise: variance 2·scale².

    Tolerance: 5 standard errors of the sample variance, se = 2·scale²·sqrt(5/N) (Laplace:
    Var(X²) = 20b⁴ against a mean 2b²), i.e. 5 % of the variance; with N = 50,000 draws this is a
    two-sided z of 5, a false-failure rate of about 6e-7 per run for a fresh seed (the seed is
    fixed, so the run is deterministic).  A 2× scale (4× variance) fails.
    """
    # the kernel adds Laplace(scale) to each cost: variance 2·scale²
    data = PrivateData(np.zeros(4))
    scale = 3.0
    noisy = data.noisy_optimum(lambda x: np.zeros(50_000), scale, lambda c: c, 1.0,
                               np.random.default_rng(0), label="test")
    assert abs(noisy.var() - 2 * scale**2) < 5 * 2 * scale**2 * math.sqrt(5 / noisy.size)


@pytest.mark.parametrize("scaling", dawa.SCALINGS)
def test_privacy_accounting(scaling):
    x = np.random.default_rng(1).integers(0, 50, size=128)
    data = PrivateData(x)
    W = workloads.random_ranges(128, 200, seed=3)
    res = dawa.dawa(data, W, 0.8, np.random.default_rng(2), scaling=scaling)
    entries = data.ledger.entries
    assert [e.epsilon for e in entries] == pytest.approx([0.2, 0.6])
    assert data.ledger.epsilon == pytest.approx(0.8)
    assert res.epsilon1 == pytest.approx(0.2) and res.epsilon2 == pytest.approx(0.6)
    # stage 2 measures a strategy over the buckets with L1 sensitivity 1 (Eq. 5); the
    # unweighted hierarchy of Partition+Uniform has one unit per level instead
    levels = math.ceil(math.log2(res.partition.k)) + 1 if res.partition.k > 1 else 1
    # HB's tree over the buckets (Qardaji et al. 2013) has one unit per level, h levels
    expected = {"uniform": levels, "hb": strategies.hb_branching(res.partition.k)[1]}.get(scaling, 1.0)
    assert entries[1].sensitivity == pytest.approx(expected)
    assert res.strategy.sensitivity(1) == pytest.approx(expected)
    assert res.x_hat.shape == (128,)
    assert res.partition.n == 128


def test_ratio_and_inputs_are_validated():
    data = PrivateData(np.ones(16))
    W = workloads.prefix(16)
    with pytest.raises(ValueError, match="ratio"):
        dawa.dawa(data, W, 1.0, np.random.default_rng(0), ratio=1.0)
    with pytest.raises(ValueError, match="scaling"):
        dawa.dawa(data, W, 1.0, np.random.default_rng(0), scaling="magic")
    with pytest.raises(ValueError, match="cells"):
        dawa.dawa(data, workloads.prefix(8), 1.0, np.random.default_rng(0))
    with pytest.raises(dpx.registry.NotApplicableError, match="Laplace"):
        dpx.mechanism.run("dawa", data, W, dpx.Gaussian(1.0, 1e-6), np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown parameter"):
        dpx.mechanism.run("dawa", data, W, dpx.Laplace(1.0), np.random.default_rng(0), ratoi=0.5)


def test_seeded_runs_reproduce():
    x = np.random.default_rng(1).integers(0, 50, size=256)
    W = workloads.random_ranges(256, 300, seed=1)
    a = dpx.mechanism.run("dawa", PrivateData(x), W, dpx.Laplace(0.5), np.random.default_rng(7))
    b = dpx.mechanism.run("dawa", PrivateData(x), W, dpx.Laplace(0.5), np.random.default_rng(7))
    np.testing.assert_array_equal(a.x_hat, b.x_hat)
    np.testing.assert_array_equal(a.info["partition"].edges, b.info["partition"].edges)


def test_large_epsilon_partition_respects_uniform_regions():
    # with ε → ∞ bucket deviations dominate the (scale-free) noise: no bucket straddles a
    # jump of the data, and x̂ → x
    x = np.repeat([5.0, 50.0, 0.0, 20.0], [40, 24, 30, 34])
    data = PrivateData(x)
    res = dawa.dawa(data, workloads.identity(x.size), 1e7, np.random.default_rng(0))
    devs = [pt.deviation(x, a, b) for a, b in zip(res.partition.lo, res.partition.hi)]
    assert max(devs) == 0.0
    np.testing.assert_allclose(res.x_hat, x, atol=1e-3)


def test_identity_workload_greedy_keeps_leaves():
    # Sec. 5.3.3: on the identity workload the greedy stage keeps the initial allocation
    # (leaves only), i.e. DAWA equals Partition+Laplace
    B = pt.Partition(np.array([0, 3, 4, 9, 16]))
    Ghat = B.transform_gram(np.eye(16))
    res = strategies.greedy_h_gram(Ghat)
    assert np.all(res.lambdas[B.k:] == 0)


def test_hilbert_order_is_a_curve():
    for shape in [(8, 8), (16, 16), (5, 7)]:
        perm = hilbert_order(shape)
        assert np.array_equal(np.sort(perm), np.arange(shape[0] * shape[1]))
        r, c = np.divmod(perm, shape[1])
        steps = np.abs(np.diff(r)) + np.abs(np.diff(c))
        if shape[0] == shape[1]:
            assert np.all(steps == 1)  # consecutive cells are neighbours on a full square


def test_dawa_2d_rectangles():
    grid = np.zeros((32, 32))
    grid[4:12, 4:20] = 30
    grid[20:30, 10:14] = 80
    W = workloads.random_rectangles((32, 32), 300, seed=2)
    data = PrivateData(grid)
    res = dawa.dawa(data, W, 1.0, np.random.default_rng(3))
    assert res.order is not None and res.x_hat.shape == (1024,)
    assert data.ledger.epsilon == pytest.approx(1.0)
    # the transformed workload over Hilbert buckets matches a dense computation
    What, _ = dawa._transformed_workload(W, res.order, res.partition)
    P = np.zeros((1024, res.partition.k))
    P[np.arange(1024), res.partition.bucket_of] = 1.0 / res.partition.sizes[res.partition.bucket_of]
    np.testing.assert_allclose(What.toarray(), W.dense()[:, res.order] @ P)
    # DAWA beats Identity on this blocky grid (averaged over seeds)
    truth = W @ grid.ravel()
    err = {m: np.mean([np.abs(W @ dpx.mechanism.run(m, PrivateData(grid), W, dpx.Laplace(1.0),
                                                    np.random.default_rng(s)).x_hat - truth).mean()
                       for s in range(5)]) for m in ("dawa", "identity")}
    assert err["dawa"] < err["identity"]


def test_variants_registered():
    for name in ["dawa", "partition_laplace", "partition_uniform", "partition_geometric"]:
        mech = dpx.registry.get(name)
        assert mech.data_dependent and mech.runner is not None and "PVLDB 2014" in mech.source


def test_geometric_levels_have_unit_sensitivity():
    A = dawa._tree_over_buckets(37, "geometric", 2)
    np.testing.assert_allclose(A.column_norms(1), 1.0)
    B = dawa._tree_over_buckets(37, "uniform", 2)
    assert B.sensitivity(1) == 7  # levels 1..64


def test_penalty_is_a_public_offset():
    # the penalty shifts every candidate's cost by a data-independent amount: same ε, fewer buckets
    x = np.repeat([5.0, 50.0, 0.0, 20.0], [40, 24, 30, 34])
    ks = {}
    for pen in (0.0, 3.0):
        data = PrivateData(x)
        p = dawa.private_partition(data, 0.25, 0.75, np.random.default_rng(0), penalty=pen)
        assert data.ledger.epsilon == pytest.approx(0.25)
        ks[pen] = p.k
    assert ks[3.0] < ks[0.0]
    with pytest.raises(ValueError, match="penalty"):
        dawa.private_partition(PrivateData(x), 0.25, 0.75, np.random.default_rng(0), penalty=-1)


def test_dyadic_candidates_are_aligned_and_few():
    for n in (1, 5, 16, 100):
        lo, hi = dawa.candidate_intervals(n, "dyadic")
        L = hi - lo + 1
        assert np.all(lo % L == 0) and np.all((L & (L - 1)) == 0) and np.all(hi < n)
        assert lo.size < 2 * n and np.sum(L == 1) == n  # every cell is a candidate


def test_published_noise_scales_are_the_authors():
    # DPComp cutil.cpp: (2 − 1/L − 1/n)/ε₁ for L > 1, none for single cells
    L = np.array([1, 2, 4, 8])
    np.testing.assert_allclose(dawa.published_noise_scales(L, 8, 0.5),
                               [0.0, (2 - 0.5 - 0.125) / 0.5, (2 - 0.25 - 0.125) / 0.5,
                                (2 - 0.125 - 0.125) / 0.5])
    # about half the Remark's (Δbcost + Δ_b)/ε₁ = (4 − 2/L)/ε₁ for long buckets
    assert dawa.published_noise_scales(np.array([1024]), 4096, 1.0)[0] == pytest.approx(
        dawa.noise_scales(np.array([1024]), 1.0)[0] / 2, rel=1e-3)


def test_published_partition_has_noise_free_singletons_and_clamped_costs(monkeypatch):
    seen = []
    real = dawa.least_cost_partition

    def spy(n, lo, hi, cost):
        seen.append((np.asarray(hi) - np.asarray(lo) + 1, np.array(cost)))
        return real(n, lo, hi, cost)
    monkeypatch.setattr(dawa, "least_cost_partition", spy)
    x = np.random.default_rng(0).integers(0, 20, size=64)
    data = PrivateData(x)
    eps1, eps2 = 0.1, 0.3
    p = dawa.published_partition(data, eps1, eps2, np.random.default_rng(1))
    (L, cost), = seen
    assert np.all(cost[L == 1] == 1 / eps2)  # dev = 0 and no noise: exactly 1/ε₂
    assert cost.min() >= 1 / eps2 and np.any(cost[L > 1] == 1 / eps2)  # the clamp bites
    assert p.n == 64
    (spend,) = data.ledger.entries
    assert spend.epsilon == pytest.approx(eps1) and "NOT ε₁-DP" in spend.label


def test_as_published_options_and_registration():
    data, W = PrivateData(np.ones(8)), workloads.prefix(8)
    with pytest.raises(ValueError, match="partition"):
        dawa.dawa(data, W, 1.0, np.random.default_rng(0), partition="magic")
    with pytest.raises(ValueError, match="private"):
        dawa.dawa(data, W, 1.0, np.random.default_rng(0), partition="as_published", penalty=1.0)
    mech = dpx.registry.get("dawa_as_published")
    assert not mech.private and "NOT PRIVATE" in mech.label and mech.data_dependent
    assert all(dpx.registry.get(n).private for n in ("dawa", "partition_laplace", "mwem", "efpa"))
    # the registered dawa runs with the tuned defaults; its stage 2 can be chosen
    assert dpx.registry.get("dawa").params == {**dawa.DEFAULTS, "scaling": dawa.DEFAULT_SCALING}
    assert dpx.registry.get("partition_laplace").params == dawa.DEFAULTS
    est = dpx.mechanism.run("dawa", PrivateData(np.arange(16)), workloads.prefix(16), dpx.Laplace(1.0),
                            np.random.default_rng(0), scaling="greedy")
    assert est.x_hat.shape == (16,)


def test_partition_bucket_grid_follows_the_cell_order():
    p = pt.Partition(np.array([0, 1, 3, 6]))  # buckets {0}, {1, 2}, {3, 4, 5}
    np.testing.assert_array_equal(p.bucket_grid(), [0, 1, 1, 2, 2, 2])
    order = np.array([5, 0, 4, 1, 3, 2])  # the partition's cell i is the data's cell order[i]
    grid = p.bucket_grid(order, (2, 3))
    want = np.empty(6, dtype=int)
    for i, cell in enumerate(order):
        want[cell] = p.bucket_of[i]
    np.testing.assert_array_equal(grid, want.reshape(2, 3))
    assert grid.ravel()[5] == 0 and set(grid.ravel()[[0, 4]]) == {1}
    with pytest.raises(ValueError, match="permutation"):
        p.bucket_grid([0, 0, 1, 2, 3, 4])
    with pytest.raises(ValueError, match="shape"):
        p.bucket_grid(None, (4, 2))
