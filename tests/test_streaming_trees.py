"""Online trees for continual counting (``dpexplorer.streaming.trees``): the binary tree with
Honaker's online estimator (``tree_online``) and the k-ary tree with subtraction (``kary_tree``).

Every decoder is checked against a reference built here from the definitions, by another
route than the module's (Honaker's combination with weights from the numerical variances of
coefficient vectors, the greedy dyadic decomposition; the balanced digits of ``N`` as the
standard digits of ``N + (k^h − 1)/2`` minus ``(k − 1)/2``), on small ``T`` with dense matrices.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer.core import registry
from dpexplorer.queries.matrix import Identity, MatrixTooLargeError, Weighted
from dpexplorer.streaming import trees

LAPLACE = dpx.Laplace(1.0)
GAUSS = dpx.Gaussian(1.0, 1e-6)
SMALL_T = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 31, 32, 40]


# ------------------------------------------------------------------ references
def _prefix(T):
    return np.tril(np.ones((T, T)))


def _dyadic_nodes(T):
    """Every dyadic interval inside [0, T), by level then position: {(l, j): (lo, hi)}."""
    nodes, l = {}, 0
    while (1 << l) <= T:
        for j in range(T >> l):
            nodes[(l, j)] = (j << l, ((j + 1) << l) - 1)
        l += 1
    return nodes


def _honaker_reference(A):
    """Dense decoder of Honaker's online estimator from its definition: every node's estimate is
    the inverse-variance mean of its measurement (variance 1) and the sum of its children's
    estimates, the variances computed from the coefficient vectors themselves; the answer at t
    adds the estimates of the greedy dyadic decomposition of [0, t]."""
    T = A.steps
    index = {(int(l), int(lo) >> int(l)): i
             for i, (l, lo) in enumerate(zip(A.node_level, A.node_lo, strict=True))}
    coef = {}
    for (l, j) in sorted(_dyadic_nodes(T)):
        own = np.zeros(A.m)
        own[index[(l, j)]] = 1.0
        if l == 0:
            coef[(l, j)] = own
            continue
        s = coef[(l - 1, 2 * j)] + coef[(l - 1, 2 * j + 1)]
        var_s = float(s @ s)  # independent unit node noises
        coef[(l, j)] = (own / 1.0 + s / var_s) / (1.0 + 1.0 / var_s)
    B = np.zeros((T, A.m))
    for t in range(T):
        start = 0
        while start <= t:
            l = 0
            while start % (1 << (l + 1)) == 0 and start + (1 << (l + 1)) - 1 <= t:
                l += 1
            B[t] += coef[(l, start >> l)]
            start += 1 << l
    return B


def _kary_reference(A, k):
    """Dense decoder of the k-ary tree with subtraction from its definition, digits from the
    standard base-k digits of N + (k^h − 1)/2 (each minus (k − 1)/2)."""
    T = A.steps
    h = 1
    while (k**h - 1) // 2 < T:
        h += 1
    half, D = (k - 1) // 2, (k**h - 1) // 2
    index = {(int(l), int(lo) // k ** int(l)): i
             for i, (l, lo) in enumerate(zip(A.node_level, A.node_lo, strict=True))}
    B = np.zeros((T, A.m))
    for t in range(T):
        r, digits = t + 1 + D, []
        for _ in range(h):
            digits.append(r % k - half)
            r //= k
        assert r == 0 and sum(d * k**l for l, d in enumerate(digits)) == t + 1
        above = 0
        for l in range(h - 1, -1, -1):
            d, a = digits[l], above // k**l
            for j in (range(a, a + d) if d > 0 else range(a + d, a)):
                if (l, j) in index:  # a block entirely after the last step is not a node
                    B[t, index[(l, j)]] += 1 if d > 0 else -1
            above += d * k**l
    return h, B


# --------------------------------------------------------------- the strategies
@pytest.mark.parametrize("T", SMALL_T)
def test_tree_online_measures_the_dyadic_nodes_inside_the_horizon(T):
    A = trees.tree_online(T)
    nodes = _dyadic_nodes(T)
    got = {(int(l), int(lo) >> int(l)): (int(lo), int(hi))
           for l, lo, hi in zip(A.node_level, A.node_lo, A.node_hi, strict=True)}
    assert got == nodes and A.shape == (len(nodes), T)
    D = A.dense()
    for i, (lo, hi) in enumerate(zip(A.node_lo, A.node_hi, strict=True)):
        np.testing.assert_array_equal(D[i], (np.arange(T) >= lo) & (np.arange(T) <= hi))
    levels = math.floor(math.log2(T)) + 1
    assert A.levels == levels
    # sensitivity from the strategy's own column norms: one node per level over every step
    assert A.sensitivity(1) == levels == np.abs(D).sum(axis=0).max()
    assert A.sensitivity(2) == pytest.approx(math.sqrt(levels), rel=1e-15)


@pytest.mark.parametrize("k", [3, 5, 7, 19])
@pytest.mark.parametrize("T", SMALL_T)
def test_kary_tree_measures_the_aligned_blocks_cut_at_the_horizon(T, k):
    A = trees.kary_tree(T, k)
    h = trees.kary_height(T, k)
    assert (k**h - 1) // 2 >= T and (h == 1 or (k ** (h - 1) - 1) // 2 < T)
    assert A.levels == h and A.shape == (sum(-(-T // k**l) for l in range(h)), T)
    D = A.dense()
    for i, (l, lo, hi) in enumerate(zip(A.node_level, A.node_lo, A.node_hi, strict=True)):
        assert lo % k**l == 0 and hi == min(lo + k**l, T) - 1
        np.testing.assert_array_equal(D[i], (np.arange(T) >= lo) & (np.arange(T) <= hi))
    assert A.sensitivity(1) == h == np.abs(D).sum(axis=0).max()
    assert A.sensitivity(2) == pytest.approx(math.sqrt(h), rel=1e-15)


# ------------------------------------------------------------ B A = W, online
@pytest.mark.parametrize("T", SMALL_T)
def test_honakers_decoder_reconstructs_the_running_total_from_closed_nodes_only(T):
    A = trees.tree_online(T)
    B = A.decoder()
    np.testing.assert_allclose(B, _honaker_reference(A), atol=1e-13)
    np.testing.assert_allclose(B @ A.dense(), _prefix(T), atol=1e-12)  # B A = W
    used = np.abs(B) > 0
    closes = np.broadcast_to(A.node_hi, B.shape)
    steps = np.broadcast_to(np.arange(T)[:, None], B.shape)
    assert not (used & (closes > steps)).any()  # answer t: nodes closed by step t only
    assert used[T - 1].sum() == A.m or T & (T - 1)  # the last step of a full tree uses every node


@pytest.mark.parametrize("k", [3, 5, 7, 19])
@pytest.mark.parametrize("T", SMALL_T)
def test_the_kary_decoder_reconstructs_the_running_total_from_the_counts_so_far(T, k):
    A = trees.kary_tree(T, k)
    h, ref = _kary_reference(A, k)
    B = A.decoder()
    np.testing.assert_array_equal(B, ref)
    np.testing.assert_array_equal(B @ A.dense(), _prefix(T))  # B A = L: lower-triangular
    # online as a mechanism: the release at t is the exact running total plus fixed noise
    rng = np.random.default_rng(T * 100 + k)
    x, z = rng.integers(0, 50, T).astype(float), rng.laplace(size=A.m)
    W = dpx.streaming.continual(T)
    np.testing.assert_allclose(A.answer(W, A.matvec(x) + z), np.cumsum(x) + B @ z, atol=1e-9)
    assert np.abs(B).sum(axis=1).max() <= h * (k - 1) // 2


def test_the_kary_decoder_uses_noise_of_nodes_not_yet_closed():
    """The paper's subtraction is online as a mechanism, not in the strict sense: at k = 3,
    T = 13, the count N = 5 = 9 − 3 − 1 adds [0, 9) and subtracts [6, 9) and [5, 6), all
    closing after step 4 (module docstring)."""
    A = trees.kary_tree(13, 3)
    B = A.decoder()
    used = np.flatnonzero(B[4])
    assert sorted(zip(A.node_lo[used], A.node_hi[used], B[4, used], strict=True)) == [
        (0, 8, 1.0), (5, 5, -1.0), (6, 8, -1.0)]
    # cut at T = 5, the blocks after the last step are gone and [0, 9) keeps [0, 5)
    short = trees.kary_tree(5, 3)
    used = np.flatnonzero(short.decoder()[4])
    assert [(short.node_lo[i], short.node_hi[i]) for i in used] == [(0, 4)]


# ------------------------------------------------------------ per-step variances
@pytest.mark.parametrize("T", SMALL_T)
def test_honakers_per_step_variance_is_the_closed_form_and_the_dense_decoders(T):
    A = trees.tree_online(T)
    ref = _honaker_reference(A)
    var = A.step_variances()
    np.testing.assert_allclose(var, (ref**2).sum(axis=1), rtol=1e-12)
    N = np.arange(1, T + 1)
    closed = sum(2.0**l / (2.0 ** (l + 1) - 1) * ((N >> l) & 1) for l in range(A.levels))
    np.testing.assert_allclose(var, closed, rtol=1e-12)
    # the node variances follow the inverse-variance recursion v_l = 2 v_{l-1} / (1 + 2 v_{l-1})
    v = trees.honaker_variances(12)
    np.testing.assert_allclose(v[1:], 2 * v[:-1] / (1 + 2 * v[:-1]), rtol=1e-14)
    # through the error module: v · Δ² · Σ B², per step and in total
    W = dpx.streaming.continual(T)
    for noise in (LAPLACE, GAUSS):
        scale = noise.variance_per_unit * A.sensitivity(noise.norm) ** 2
        np.testing.assert_allclose(dpx.error.per_query_variance(W, A, noise), scale * (ref**2).sum(axis=1),
                                   rtol=1e-12)
        assert dpx.error.expected_tse(W, A, noise) == pytest.approx(scale * (ref**2).sum(), rel=1e-12)


@pytest.mark.parametrize("k", [3, 5, 19])
@pytest.mark.parametrize("T", SMALL_T)
def test_kary_per_step_variance_is_the_number_of_nodes_used(T, k):
    A = trees.kary_tree(T, k)
    _, ref = _kary_reference(A, k)
    np.testing.assert_array_equal(A.step_variances(), (ref**2).sum(axis=1))
    W = dpx.streaming.continual(T)
    scale = LAPLACE.variance_per_unit * A.levels**2
    np.testing.assert_allclose(dpx.error.per_query_variance(W, A, LAPLACE), scale * (ref**2).sum(axis=1),
                               rtol=1e-12)
    assert dpx.error.unit_tse(W, A, 1) == pytest.approx(A.levels**2 * (ref**2).sum(), rel=1e-12)


def test_a_weighted_running_total_scales_and_other_workloads_fall_back_to_least_squares():
    T = 12
    for A in (trees.tree_online(T), trees.kary_tree(T, 3)):
        W = dpx.streaming.continual(T)
        y = np.random.default_rng(3).normal(size=A.m)
        W3 = Weighted(W, 3.0)
        np.testing.assert_allclose(A.answer(W3, y), 3 * A.answer(W, y), rtol=1e-12)
        np.testing.assert_allclose(dpx.error.per_query_variance(W3, A, LAPLACE),
                                   9 * dpx.error.per_query_variance(W, A, LAPLACE), rtol=1e-12)
        # Identity (each step's own count): least squares, the error module's dense fallback
        I = Identity(T)
        assert A.workload_trace(I) is NotImplemented and A.workload_row_variances(I) is NotImplemented
        D = A.dense()
        pinv = np.linalg.pinv(D)
        np.testing.assert_allclose(A.answer(I, y), pinv @ y, atol=1e-6)
        np.testing.assert_allclose(dpx.error.per_query_variance(I, A, LAPLACE),
                                   2 * A.levels**2 * np.diag(pinv @ pinv.T), rtol=1e-9)


# ------------------------------------------------------------ answers
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 70), st.sampled_from([0, 3, 5, 7, 19]), st.integers(0, 2**31 - 1))
def test_answers_are_the_dense_decoder_on_any_noisy_node_answers(T, k, seed):
    A = trees.tree_online(T) if k == 0 else trees.kary_tree(T, k)
    y = np.random.default_rng(seed).normal(0, 10, A.m)
    ref = _honaker_reference(A) if k == 0 else _kary_reference(A, k)[1]
    np.testing.assert_allclose(A.answer(dpx.streaming.continual(T), y), ref @ y, atol=1e-9)


def test_honaker_is_between_the_plain_binary_mechanism_and_least_squares_at_every_step():
    """Per step, in units of one node's noise: Honaker's online estimate (same nodes, same
    sensitivity) is at least as good as the plain sum of the dyadic nodes (popcount(t + 1)),
    and never better than least squares over the whole tree: H2 itself when T is a power of
    two, least squares over the same nodes otherwise; at the last step of a full tree the
    root's upward estimate is the least-squares one."""
    for T in (2, 8, 13, 32, 48, 64, 100):
        A = trees.tree_online(T)
        W = dpx.streaming.continual(T)
        online = dpx.error.per_query_variance(W, A, LAPLACE)
        unit = LAPLACE.variance_per_unit * A.sensitivity(1) ** 2
        plain = unit * np.array([bin(t + 1).count("1") for t in range(T)], dtype=float)
        D = A.dense()
        ls = unit * np.diag(_prefix(T) @ np.linalg.inv(D.T @ D) @ _prefix(T).T)
        assert (online <= plain * (1 + 1e-12)).all() and (online >= ls * (1 - 1e-9)).all()
        assert (online < plain).any() == (T > 1)
        if T & (T - 1) == 0:
            H2 = registry.get("h2").strategy(W, LAPLACE)
            assert H2.sensitivity(1) == A.sensitivity(1) and H2.m == A.m
            h2 = dpx.error.per_query_variance(W, H2, LAPLACE)
            np.testing.assert_allclose(h2, ls, rtol=1e-9)
            assert online[-1] == pytest.approx(h2[-1], rel=1e-9)


def test_seeded_simulations_have_the_analytic_error():
    """300 seeded simulations (not releases) of each mechanism through dpx.simulate at T = 64,
    Laplace ε = 1 (discrete Laplace on counts: the release's analytic RMSE includes its variance
    factor): the mean total squared error within 6 standard errors (estimated from the trials)
    of the analytic TSE; each fails by chance with probability about 2e-9 (normal
    approximation of the mean of 300 trials)."""
    T, trials = 64, 300
    W = dpx.streaming.continual(T)
    x = np.random.default_rng(7).integers(0, 30, T)
    truth = np.cumsum(x).astype(float)
    for name in ("tree_online", "kary_tree"):
        runs = [dpx.simulate(x, W, name, LAPLACE, seed=s) for s in range(trials)]
        A = runs[0].strategy
        np.testing.assert_allclose(runs[0].answers, A.answer(W, runs[0].y), rtol=1e-12)
        sq = np.array([((r.answers - truth) ** 2).sum() for r in runs])
        analytic = runs[0].analytic_rmse**2 * T
        assert analytic == pytest.approx(dpx.error.expected_tse(W, A, LAPLACE)
                                         * dpx.privacy.variance_factor(A, LAPLACE), rel=1e-12)
        assert abs(sq.mean() - analytic) < 6 * sq.std(ddof=1) / math.sqrt(trials), (name, sq.mean(), analytic)


# ------------------------------------------------------------ the published constants
@pytest.mark.parametrize("k,h", [(3, 6), (5, 4), (19, 2), (19, 3)])
def test_the_mean_number_of_kary_nodes_over_a_whole_balanced_range(k, h):
    """At T = (k^h − 1)/2 every digit of ±N is uniform on its k values: the mean number of nodes
    per answer is exactly h (k² − 1)/(4k) · k^h/(k^h − 1), the largest h (k − 1)/2."""
    T = (k**h - 1) // 2
    n = trees.kary_tree(T, k).step_variances()
    assert n.mean() == pytest.approx(h * (k * k - 1) / (4 * k) * k**h / (k**h - 1), rel=1e-12)
    assert n.max() == h * (k - 1) // 2


def test_the_kary_tree_is_about_4_times_below_honaker_and_19_is_the_best_odd_k():
    """Andersson, Pagh, Steiner & Torkamani (arXiv:2408.07021 v1 abstract; FORC 2025, abstract):
    the k-ary tree with subtraction reduces the mean squared error of Honaker's binary tree "by a
    factor of about 4, asymptotically", "using k = 19".  Both leading constants are read off the
    implementations: the mean variance is Δ² times the mean of Σ (node variances), with Δ = the
    number of levels; for the binary tree (log₂ T levels) half the steps use each level, with the
    node variance of a tall level v_∞ (Honaker's limit, read at level 15), so the mean is
    log₂³T · v_∞/2; for the k-ary tree (log_k T levels) it is log_k³T · c(k), c(k) the mean
    number of nodes per level over a whole balanced range.  Ratio (ln k/ln 2)³ · v_∞/(2 c(k)):
    4.05 at k = 19."""
    A = trees.tree_online(2**16)
    v_inf = A.step_variances()[2**15 - 1]  # t + 1 = 2**15: one node, at level 15
    assert v_inf == pytest.approx(0.5, rel=1e-4)
    c = {}
    for k in range(3, 43, 2):
        h = trees.kary_height(3000, k)
        T = (k**h - 1) // 2
        c[k] = trees.kary_tree(T, k).step_variances().mean() / h
    constant = {k: ck / math.log(k) ** 3 for k, ck in c.items()}  # mean variance / (Δ² ln³T)·ln³k
    assert min(constant, key=constant.get) == 19
    ratio = (math.log(19) / math.log(2)) ** 3 * v_inf / (2 * c[19])
    assert 3.9 < ratio < 4.2, ratio
    assert ratio == pytest.approx(4.05, abs=0.01)


# ------------------------------------------------------------ registry and errors
def test_the_registry_entries():
    T = 64
    W = dpx.streaming.continual(T)
    for name, label in (("tree_online", "Tree (online)"), ("kary_tree", "k-ary tree")):
        mech = registry.get(name)
        assert mech.label == label and mech.structured_1d is True
        assert mech.online == (name == "tree_online")  # k-ary: subtracted nodes close later
        assert mech.audit == registry.AuditSpec(workload="prefix", cells=8, noise="laplace")
        assert (name in registry.names(online=True)) == mech.online
        assert "lower-triangular" in mech.not_applicable(dpx.workloads.all_range(8), LAPLACE)
        # their decoders answer the running total: another count over time is refused
        assert "running total" in mech.not_applicable(dpx.workloads.identity(8), LAPLACE)
        A = mech.strategy(W, LAPLACE)
        assert A.name == name and isinstance(A, trees.OnlineTree)
    assert registry.get("kary_tree").params == {"k": 19}
    assert registry.get("kary_tree").strategy(W, LAPLACE, k=3).k == 3
    with pytest.raises(ValueError, match="odd"):
        registry.get("kary_tree").strategy(W, LAPLACE, k=4)
    df = dpx.compare(W, LAPLACE, mechanisms=["tree_online", "kary_tree", "h2"]).set_index("mechanism")
    assert df["online"].to_dict() == {"tree_online": True, "kary_tree": False, "h2": False}
    # the online tree pays for being online: H2's least squares over the same tree is better
    assert df.loc["h2", "rmse"] < df.loc["tree_online", "rmse"]
    A = registry.get("tree_online").strategy(W, LAPLACE)
    assert df.loc["tree_online", "rmse"] == pytest.approx(dpx.error.rmse(W, A, LAPLACE), rel=1e-12)


def test_bad_input_is_refused_with_what_is_allowed():
    for bad in (0, -3, 2.5, True, "8"):
        with pytest.raises(ValueError, match="T"):
            trees.tree_online(bad)
        with pytest.raises(ValueError, match="T"):
            trees.kary_tree(bad)
    for bad in (1, 2, 4, 20, 2**31 + 1):
        with pytest.raises(ValueError, match="k"):
            trees.kary_tree(8, bad)
    for bad in (3.0, True, "3", None):
        with pytest.raises(TypeError, match="k"):
            trees.kary_tree(8, bad)
    with pytest.raises(ValueError, match="levels"):
        trees.honaker_variances(0)
    with pytest.raises(ValueError, match="digits"):
        trees.balanced_digits(np.array([5]), 3, 1)
    with pytest.raises(ValueError, match="integers"):
        trees.balanced_digits(np.array([1.0]), 3, 2)
    np.testing.assert_array_equal(trees.balanced_digits(np.array([0, 1, 2, 4, -4]), 3, 2),
                                  [[0, 0], [1, 0], [-1, 1], [1, 1], [-1, -1]])
    A = trees.tree_online(8)
    W = dpx.streaming.continual(8)
    with pytest.raises(ValueError, match=r"shape \(15,\)"):
        A.answer(W, np.zeros(14))
    with pytest.raises(ValueError, match="finite"):
        A.answer(W, np.full(15, np.nan))
    with pytest.raises(ValueError, match="numbers"):
        A.answer(W, ["a"] * 15)
    with pytest.raises(ValueError, match="9 cells"):
        A.answer(dpx.streaming.continual(9), np.zeros(15))
    with pytest.raises(MatrixTooLargeError):
        A.decoder(max_entries=100)
