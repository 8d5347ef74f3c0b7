"""ResidualPlanner (Xiao, He, Zhang, Kifer, NeurIPS 2023): basis, dense equality, optimality, reconstruction."""

import itertools
import math

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer.core import error, registry
from dpexplorer.queries import workloads
from dpexplorer.queries.matrix import Dense, Identity, Kronecker, Ones, Prefix, Weighted
from dpexplorer.strategies import marginals, residual

GAUSSIAN = dpx.Gaussian(1.0, 1e-6)
LAPLACE = dpx.Laplace(1.0)
CPS = (50, 100, 7, 4, 2)
ADULT = (100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2)


def cps_all_marginals():
    return Kronecker([workloads.identity_total(n) for n in CPS])


def dense_variances(W, A):
    """``diag(W (AᵀA)⁺ Wᵀ)`` and ``(AᵀA)⁺`` of the dense matrix mechanism (numpy only)."""
    D = A.dense()
    X = np.linalg.pinv(D.T @ D, rcond=1e-10, hermitian=True)
    Wd = W.dense()
    return np.einsum("ij,jk,ik->i", Wd, X, Wd), X


def all_sets(d, orders):
    return [c for k in orders for c in itertools.combinations(range(d), k)]


SMALL_WORKLOADS = {
    "marginals 1-2 way": lambda: workloads.marginals((3, 4, 5), [1, 2]),
    "all marginals [I;1ᵀ]": lambda: Kronecker([workloads.identity_total(n) for n in (3, 4, 2)]),
    "weighted union": lambda: workloads.union(
        [workloads.marginal((3, 4, 2), [0, 1]), workloads.marginal((3, 4, 2), [2])], [2.0, 0.5]),
    "size-1 attribute": lambda: workloads.marginals((3, 1, 4), [1, 2]),
    "marginal strategy": lambda: marginals.MarginalStrategy((3, 4), [0.5, 1.0, 0.0, 2.0]),
    "1D all range": lambda: workloads.all_range(8),
    "1D prefix": lambda: workloads.prefix(6),
    "range marginals": lambda: workloads.range_marginals((4, 5), [1]),
    "prefix ⊗ [I;1ᵀ]": lambda: Kronecker([Prefix(4), workloads.identity_total(3)]),
    "ones ⊗ identity": lambda: Kronecker([Ones(3, 4), Identity(3)]),
}

MARGINAL_WORKLOADS = {
    "1-2 way of 3×4×5": lambda: workloads.marginals((3, 4, 5), [1, 2]),
    "0-2 way of 2×3×4×2": lambda: workloads.marginals((2, 3, 4, 2), [0, 1, 2]),
    "all marginals 3×4×2": lambda: Kronecker([workloads.identity_total(n) for n in (3, 4, 2)]),
    "weighted": lambda: workloads.union(
        [workloads.marginal((3, 4, 2), [0, 1]), workloads.marginal((3, 4, 2), [2]),
         workloads.marginal((3, 4, 2), [])], [2.0, 0.5, 3.0]),
    "2-way of 4×4×3": lambda: workloads.marginals((4, 4, 3), 2),
}


# ==================================================================== basis
@pytest.mark.parametrize("n", range(1, 9))
def test_residual_basis_is_the_orthonormalised_subtraction_matrix(n):
    S = residual.subtraction_matrix(n)
    assert S.shape == (n - 1, n)
    if n > 1:
        np.testing.assert_array_equal(S[:, 0], 1.0)
        np.testing.assert_array_equal(S[:, 1:], -np.eye(n - 1))
    H = residual.residual_basis(n)
    assert H.shape == (n - 1, n)
    np.testing.assert_allclose(H @ H.T, np.eye(n - 1), atol=1e-13)
    np.testing.assert_allclose(H.T @ H, np.eye(n) - 1.0 / n, atol=1e-13)  # projector on 1^⊥
    if n > 1:  # (Sub Subᵀ)^{-1/2} Sub, by a dense matrix square root
        ref = np.linalg.inv(scipy.linalg.sqrtm(S @ S.T)).real @ S
        np.testing.assert_allclose(H, ref, atol=1e-12)


@given(n=st.integers(2, 9), shape=st.lists(st.integers(1, 4), min_size=0, max_size=2),
       axis_seed=st.integers(0, 10))
@settings(max_examples=40, deadline=None)
def test_basis_along_an_axis_matches_dense(n, shape, axis_seed):
    rng = np.random.default_rng(axis_seed)
    axis = int(rng.integers(0, len(shape) + 1))
    full = list(shape)
    full.insert(axis, n)
    T = rng.normal(size=full)
    H = residual.residual_basis(n)
    ref = np.moveaxis(np.tensordot(H, T, axes=([1], [axis])), 0, axis)
    np.testing.assert_allclose(residual._basis_along(T, axis, n), ref, atol=1e-12)
    Z = rng.normal(size=ref.shape)
    ref_t = np.moveaxis(np.tensordot(H.T, Z, axes=([1], [axis])), 0, axis)
    np.testing.assert_allclose(residual._basis_t_along(Z, axis, n), ref_t, atol=1e-12)


# ===================================================== equality with dense MM
@pytest.mark.parametrize("objective", ["sum", "max"])
@pytest.mark.parametrize("name", list(SMALL_WORKLOADS))
def test_strategy_equals_dense_matrix_mechanism(name, objective):
    W = SMALL_WORKLOADS[name]()
    A = residual.residual_planner(W, GAUSSIAN, objective=objective)
    D = A.dense()
    # Δ₂ = 1: every column has unit L2 norm (equation (2))
    np.testing.assert_allclose(np.sqrt((D**2).sum(axis=0)), 1.0, rtol=1e-12)
    assert A.sensitivity(2) == pytest.approx(1.0, rel=1e-12)
    var, X = dense_variances(W, A)
    np.testing.assert_allclose(A.workload_row_variances(W), var, rtol=1e-10, atol=1e-12 * var.max())
    assert A.workload_trace(W) == pytest.approx(var.sum(), rel=1e-10)
    assert error.unit_tse(W, A, 2) == pytest.approx(var.sum(), rel=1e-10)
    np.testing.assert_allclose(error.per_query_variance(W, A, GAUSSIAN),
                               GAUSSIAN.variance_per_unit * var, rtol=1e-10, atol=1e-10)
    assert A.plan.unit_tse == pytest.approx(var.sum(), rel=1e-10)
    # the implicit products, Gram and least squares
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=A.n), rng.normal(size=A.m)
    np.testing.assert_allclose(A.matvec(x), D @ x, atol=1e-12)
    np.testing.assert_allclose(A.rmatvec(y), D.T @ y, atol=1e-12)
    np.testing.assert_allclose(A.gram().dense(), D.T @ D, atol=1e-12)
    np.testing.assert_allclose(A.reconstructor()(y), np.linalg.pinv(D) @ y, atol=1e-10)
    np.testing.assert_allclose(A.answer(W, y), W.dense() @ np.linalg.pinv(D) @ y, atol=1e-10)


@pytest.mark.parametrize("name", list(MARGINAL_WORKLOADS))
def test_marginal_variance_and_covariance_match_dense(name):
    W = MARGINAL_WORKLOADS[name]()
    A = residual.residual_planner(W, GAUSSIAN)
    plan = A.plan
    D = A.dense()
    X = np.linalg.pinv(D.T @ D, rcond=1e-10, hermitian=True)
    domain = plan.domain
    sets = [s for s in all_sets(len(domain), range(len(domain) + 1))
            if all(b in plan.residuals or math.prod(domain[i] - 1 for i in b) == 0
                   for b in (tuple(sorted(c)) for k in range(len(s) + 1)
                             for c in itertools.combinations(s, k)))]
    Q = {s: workloads.marginal(domain, s).dense() if s else np.ones((1, A.n)) for s in sets}
    for s in sets:
        cov = Q[s] @ X @ Q[s].T
        assert plan.marginal_variance(s) == pytest.approx(cov[0, 0], rel=1e-10)
        np.testing.assert_allclose(np.diag(cov), cov[0, 0], rtol=1e-10)  # every cell alike
        np.testing.assert_allclose(plan.covariance(s), cov, atol=1e-12 * cov.max())
        assert plan.marginal_variance(s, GAUSSIAN) == pytest.approx(
            GAUSSIAN.variance_per_unit * cov[0, 0], rel=1e-10)
    for s, t in itertools.combinations(sets, 2):
        ref = Q[s] @ X @ Q[t].T
        np.testing.assert_allclose(plan.covariance(s, t), ref, atol=1e-12 * max(abs(ref).max(), 1e-300))


def test_plan_marginals_equals_plan_of_the_matrix_workload():
    domain = (3, 4, 2, 5)
    sets = [(0, 1), (2,), (1, 3), ()]
    weights = [1.0, 2.0, 0.5, 3.0]
    W = workloads.union([workloads.marginal(domain, s) for s in sets], weights)
    for objective in residual.OBJECTIVES:
        a = residual.plan(W, objective)
        b = residual.plan_marginals(domain, sets, weights, objective)
        assert a.residuals == b.residuals
        np.testing.assert_allclose(a.sigma2, b.sigma2, rtol=1e-7)
        assert a.unit_tse == pytest.approx(b.unit_tse, rel=1e-9)


@given(data=st.data())
@settings(max_examples=30, deadline=None)
def test_random_marginal_workloads_attain_the_svd_bound(data):
    d = data.draw(st.integers(1, 3))
    domain = tuple(data.draw(st.lists(st.integers(1, 4), min_size=d, max_size=d)))
    subsets = [c for k in range(d + 1) for c in itertools.combinations(range(d), k)]
    sets = data.draw(st.lists(st.sampled_from(subsets), min_size=1, max_size=4, unique=True))
    weights = data.draw(st.lists(st.floats(0.25, 4.0), min_size=len(sets), max_size=len(sets)))
    W = workloads.union([workloads.marginal(domain, s) for s in sets], weights)
    plan = residual.plan_marginals(domain, sets, weights)
    A = plan.strategy()
    var, _ = dense_variances(W, A)
    assert plan.unit_tse == pytest.approx(var.sum(), rel=1e-9)
    # dense SVD bound (Σ σ_i)² / n (Li & Miklau 2012 Thm 2)
    s = np.linalg.svd(W.dense(), compute_uv=False).sum()
    assert plan.unit_tse == pytest.approx(s * s / W.n, rel=1e-8)
    # the measured sets are the downward closure (without sets of an attribute of size 1)
    closure = {tuple(sorted(c)) for t in sets for k in range(len(t) + 1)
               for c in itertools.combinations(t, k) if all(domain[i] > 1 for i in c)}
    assert set(plan.residuals) == closure
    # the max objective: no query worse than under the sum objective, same support
    worst = residual.plan_marginals(domain, sets, weights, "max")
    assert worst.max_variance() <= plan.max_variance() * (1 + 1e-7)
    assert worst.info["gap"] <= 1e-6


# ================================================================ optimality
@pytest.mark.parametrize("name", list(MARGINAL_WORKLOADS))
def test_sum_objective_at_or_below_opt_m_and_eigen_design(name):
    W = MARGINAL_WORKLOADS[name]()
    rp = dpx.rmse(W, registry.get("residual_planner").strategy(W, GAUSSIAN), GAUSSIAN)
    tried = []
    for other in ("opt_m", "eigen_design", "fourier", "opt0", "hdmm", "datacube"):
        try:
            A = registry.get(other).strategy(W, GAUSSIAN)
        except registry.NotApplicableError:  # DataCube: unweighted marginals only
            continue
        tried.append(other)
        assert rp <= dpx.rmse(W, A, GAUSSIAN) * (1 + 1e-9), other
    assert {"opt_m", "eigen_design"} <= set(tried)
    assert rp == pytest.approx(dpx.svd_bound(W, GAUSSIAN), rel=1e-10)


@pytest.mark.parametrize("build", [
    pytest.param(lambda: workloads.marginals((8, 16, 16), 2), id="2-way 8x16x16"),
    pytest.param(cps_all_marginals, id="CPS all marginals"),
])
@pytest.mark.slow  # full ResidualPlanner plans: 10-80 s under load on 2 cores (the full suite runs it)
def test_sum_objective_equals_the_svd_bound_where_attained(build):
    """The SVD bound is attained by marginal workloads; RP reaches it (rel. tolerance 1e-10)."""
    W = build()
    A = registry.get("residual_planner").strategy(W, GAUSSIAN)
    assert dpx.rmse(W, A, GAUSSIAN) == pytest.approx(dpx.svd_bound(W, GAUSSIAN), rel=1e-10)
    Am = registry.get("opt_m").strategy(W, GAUSSIAN)
    assert dpx.rmse(W, A, GAUSSIAN) <= dpx.rmse(W, Am, GAUSSIAN)
    if W.n <= 4096:
        Ae = registry.get("eigen_design").strategy(W, GAUSSIAN)
        assert dpx.rmse(W, A, GAUSSIAN) <= dpx.rmse(W, Ae, GAUSSIAN) * (1 + 1e-9)


def test_cps_value_matches_hdmm_table_7_svd_bound():
    """CPS All Marginals, Gaussian ε = 1, δ = 1e-6: SVD bound 7.85 (HDMM Table 7)."""
    plan = residual.plan(cps_all_marginals())
    assert plan.rmse(GAUSSIAN) == pytest.approx(7.85, abs=0.005)


def _primal_max(plan):
    """Independent solve of min max_g (C σ²)_g s.t. Σ p/σ² ≤ 1: SLSQP on min Σ p e^{−t} s.t. C e^t ≤ 1."""
    C = plan._parsed.coefficients("queries", plan._index, None).toarray()
    p = plan.pcost
    cons = {"type": "ineq", "fun": lambda t: 1 - C @ np.exp(t), "jac": lambda t: -C * np.exp(t)[None, :]}
    t0 = np.log(0.5 * plan.sigma2 / (C @ plan.sigma2).max())
    res = scipy.optimize.minimize(lambda t: (p @ np.exp(-t), -p * np.exp(-t)), t0, jac=True,
                                  constraints=[cons], method="SLSQP",
                                  options={"maxiter": 2000, "ftol": 1e-14})
    return float(res.fun)


@pytest.mark.parametrize("name", list(SMALL_WORKLOADS))
def test_max_objective_matches_an_independent_primal_solve(name):
    W = SMALL_WORKLOADS[name]()
    plan = residual.plan(W, "max")
    assert plan.info["gap"] <= 1e-6
    assert plan.info["lower"] <= plan.max_variance() * (1 + 1e-12)
    assert plan.max_variance() == pytest.approx(_primal_max(plan), rel=1e-6)
    assert plan.sensitivity() == pytest.approx(1.0, rel=1e-12)
    # the largest per-query variance is the max of the dense diagonal
    var, _ = dense_variances(W, plan.strategy())
    assert plan.max_variance() == pytest.approx(var.max(), rel=1e-10)


@pytest.mark.parametrize("name", list(MARGINAL_WORKLOADS))
def test_max_objective_at_or_below_every_registered_mechanism(name):
    W = MARGINAL_WORKLOADS[name]()
    rp = registry.get("residual_planner").strategy(W, GAUSSIAN, objective="max")
    best = error.per_query_variance(W, rp, GAUSSIAN).max()
    tried = 0
    for other in registry.names(data_dependent=False):
        try:
            A = registry.get(other).strategy(W, GAUSSIAN)
            worst = error.per_query_variance(W, A, GAUSSIAN).max()
        except (registry.NotApplicableError, error.UnsupportedWorkloadError):
            continue
        tried += 1
        assert best <= worst * (1 + 1e-6), other
    assert tried >= 10


def test_max_objective_on_cps_and_adult():
    G = GAUSSIAN
    W = cps_all_marginals()
    mx = registry.get("residual_planner").strategy(W, G, objective="max")
    sm = registry.get("residual_planner").strategy(W, G)
    am = registry.get("opt_m").strategy(W, G)
    worst = {k: math.sqrt(error.per_query_variance(W, A, G).max()) for k, A in
             [("max", mx), ("sum", sm), ("opt_m", am)]}
    assert worst["max"] <= worst["opt_m"] and worst["max"] <= worst["sum"]
    assert mx.optimization.info["gap"] <= 1e-6
    assert dpx.rmse(W, sm, G) <= dpx.rmse(W, mx, G)
    plan = residual.plan_marginals(ADULT, all_sets(14, range(4)), objective="max")
    assert plan.info["gap"] <= 1e-6
    assert plan.max_std(G) < residual.plan_marginals(ADULT, all_sets(14, range(4))).max_std(G)


# ========================================================== reconstruction
def _tables(x, domain, sets):
    T = np.asarray(x, dtype=float).reshape(domain)
    return {s: T.sum(axis=tuple(i for i in range(len(domain)) if i not in s)) for s in sets}


@pytest.mark.parametrize("objective", ["sum", "max"])
def test_noiseless_measurements_reconstruct_the_true_marginals(objective):
    domain = (3, 4, 2, 5)
    sets = all_sets(4, [0, 1, 2])
    plan = residual.plan_marginals(domain, sets, objective=objective)
    x = np.random.default_rng(3).integers(0, 20, size=math.prod(domain)).astype(float)
    truth = _tables(x, domain, all_sets(4, range(5)))
    # MEASURE from the needed tables only (sub-marginals summed down), flat tables accepted
    needed = {s: truth[s].ravel() for s in plan.needed}
    assert set(plan.needed) == {s for s in sets if len(s) == 2}
    y = plan.measure_answers(needed)
    A = plan.strategy()
    np.testing.assert_allclose(y, A.matvec(x), atol=1e-10)
    rec = plan.reconstruct(y, sets)
    for s in sets:
        np.testing.assert_allclose(rec[s], truth[s], atol=1e-9)
    W = workloads.union([workloads.marginal(domain, s) for s in sets])
    np.testing.assert_allclose(plan.answer(W, y), W.matvec(x), atol=1e-9)
    np.testing.assert_allclose(W.matvec(A.reconstructor()(y)), W.matvec(x), atol=1e-9)
    # a marginal the plan does not measure is refused
    with pytest.raises(error.UnsupportedWorkloadError, match=r"\(0, 1, 2\)"):
        plan.reconstruct(y, [(0, 1, 2)])


def test_many_attributes_without_the_domain():
    """30 binary attributes (n = 2**30 cells): plan, variances and reconstruction from tables only."""
    d = 30
    domain = (2,) * d
    sets = all_sets(d, [0, 1, 2])
    plan = residual.plan_marginals(domain, sets)
    assert len(plan.residuals) == len(sets)
    # total variance: Σ_A |A| Var_A with the closed-form per-cell variance (equation (3))
    tse = sum(2 ** len(s) * plan.marginal_variance(s) for s in sets)
    assert plan.unit_tse == pytest.approx(tse, rel=1e-10)
    groups = plan.group_variances()
    assert len(groups) == len(sets) and groups["queries"].sum() == plan.m
    # records → tables by counting, then noiseless reconstruction of a few marginals
    rng = np.random.default_rng(0)
    records = rng.integers(0, 2, size=(500, d))
    tables = {}
    for s in plan.needed:
        t = np.zeros((2,) * len(s))
        np.add.at(t, tuple(records[:, i] for i in s), 1.0)
        tables[s] = t
    y = plan.measure_answers(tables)
    rec = plan.reconstruct(y, [(), (4,), (3, 17)])
    assert rec[()] == pytest.approx(500.0)
    np.testing.assert_allclose(rec[(4,)], np.bincount(records[:, 4], minlength=2), atol=1e-9)
    ref = np.zeros((2, 2))
    np.add.at(ref, (records[:, 3], records[:, 17]), 1.0)
    np.testing.assert_allclose(rec[(3, 17)], ref, atol=1e-9)
    # the strategy's error hooks work without the 2**d marginal algebra
    W = workloads.union([workloads.marginal(domain, s) for s in sets[:40]])
    A = plan.strategy()
    assert error.unit_tse(W, A, 2) == pytest.approx(
        sum(2 ** len(s) * plan.marginal_variance(s) for s in sets[:40]), rel=1e-10)


# ====================================================== empirical vs analytic
@pytest.mark.slow  # 400 seeded releases per objective: 5-20 s on 2 cores (the full suite runs it)
@pytest.mark.parametrize("objective", ["sum", "max"])
def test_empirical_error_matches_analytic(objective):
    """TSE over seeded releases: |mean − TSE| ≤ 5 sd/√T with Var(Σ err²) = 2‖Cov‖_F² (Gaussian).

    Tolerance: the TSE within a two-sided z of 5 (false-failure rate 6e-7); each of the 59 per-query
    sample variances inside its exact χ²_{T−1} interval at 1e-6 (Gaussian errors: (T−1)s²/σ² is
    χ²).  With T = 400 trials that is a false-failure rate of at most 59 × 1e-6 + 6e-7 ≈ 6e-5 per
    run for a fresh seed (the seeds are fixed, so the run is deterministic).  The intervals are
    −31 %/+39 % of each variance, so a 2× noise variance fails.  (Before: 5·sqrt(2/(T−1)) per query, an
    exact tail of 2.9e-6 each, 1.7e-4 in all.)
    """
    W = workloads.marginals((3, 4, 5), [1, 2])
    x = np.random.default_rng(1).integers(0, 50, size=W.n).astype(float)
    truth = W.matvec(x)
    A = registry.get("residual_planner").strategy(W, GAUSSIAN, objective=objective)
    _, X = dense_variances(W, A)
    Wd = W.dense()
    cov = GAUSSIAN.variance_per_unit * Wd @ X @ Wd.T
    tse = error.expected_tse(W, A, GAUSSIAN)
    assert tse == pytest.approx(np.trace(cov), rel=1e-10)
    T = 400
    sq = np.empty(T)
    errs = np.empty((T, W.m))
    # the registered mechanism's release is the planned strategy's (same seed, same answers), so
    # the trials measure the strategy planned once (a by-name run re-plans: 3× slower for "max")
    by_name = dpx.simulate(x, W, "residual_planner", GAUSSIAN, seed=0, params={"objective": objective})
    np.testing.assert_array_equal(by_name.answers, dpx.simulate(x, W, A, GAUSSIAN, seed=0).answers)
    for t in range(T):
        r = dpx.simulate(x, W, A, GAUSSIAN, seed=t)
        errs[t] = r.answers - truth
        sq[t] = np.sum(errs[t] ** 2)
    sd = math.sqrt(2.0 * np.sum(cov**2))
    assert abs(sq.mean() - tse) <= 5 * sd / math.sqrt(T)
    # the largest per-query variance, for the max objective, from the per-query sample variances
    var = errs.var(axis=0, ddof=1)
    analytic = np.diag(cov)
    # (T−1)·s²/σ² of T Gaussians is χ²_{T−1}: the exact two-sided interval at 1e-6 per query
    lo, hi = scipy.stats.chi2.ppf([0.5e-6, 1 - 0.5e-6], T - 1) / (T - 1)
    assert np.all((lo * analytic <= var) & (var <= hi * analytic))


@pytest.mark.slow  # many seeded releases: about 5 s on 2 cores (the full suite runs it)
def test_census_path_noise_matches_analytic_marginal_variance():
    """Noise added to measure_answers as the kernel will (i.i.d. N(0, c²), Δ₂ = 1) → marginal variances.

    Tolerance: each of the 71 cells' sample variance inside its exact χ²_{T−1} interval at 1e-6
    (Gaussian errors), each of the 6 marginals' mean error within a two-sided z of 5 (6e-7); with
    T = 800 trials that is a false-failure rate of at most 71 × 1e-6 + 6 × 6e-7 ≈ 8e-5 per run for
    a fresh seed (the seed is fixed, so the run is deterministic).  The intervals are −23 %/+26 % of
    each variance, so a 2× noise variance fails.  (Before: 5·sqrt(2/(T−1)) per cell, 1.2e-4 in all.)
    """
    domain = (4, 3, 5, 2)
    sets = all_sets(4, [2])
    plan = residual.plan_marginals(domain, sets, objective="max")
    x = np.random.default_rng(2).integers(0, 9, size=math.prod(domain)).astype(float)
    tables = _tables(x, domain, plan.needed)
    truth = _tables(x, domain, sets)
    y0 = plan.measure_answers(tables)
    T = 800
    rng = np.random.default_rng(11)
    errs = {s: np.empty((T, truth[s].size)) for s in sets}
    for t in range(T):
        y = dpx.samplers.gaussian(y0, GAUSSIAN.scale(plan.sensitivity()), rng)
        rec = plan.reconstruct(y, sets)
        for s in sets:
            errs[s][t] = (rec[s] - truth[s]).ravel()
    for s in sets:
        v = plan.marginal_variance(s, GAUSSIAN)
        emp = errs[s].var(axis=0, ddof=1)
        # per cell: (T−1)·s²/v is χ²_{T−1} (exact interval at 1e-6); the mean over cells
        # (correlated: its sd is at most sqrt(v/T)) within 5 of those
        lo, hi = scipy.stats.chi2.ppf([0.5e-6, 1 - 0.5e-6], T - 1) / (T - 1)
        assert np.all((lo * v <= emp) & (emp <= hi * v))
        assert abs(errs[s].mean()) <= 5 * math.sqrt(v / T)


# ============================================================ registry, errors
def test_registered_and_releases_through_the_kernel():
    assert "residual_planner" in registry.names(data_dependent=False)
    mech = registry.get("residual_planner")
    assert mech.params == {"objective": "sum"}
    W = workloads.marginals((3, 4, 5), [1, 2])
    x = np.arange(W.n, dtype=float)
    r = dpx.simulate(x, W, "residual_planner", GAUSSIAN, seed=5)
    assert r.analytic_rmse == pytest.approx(dpx.svd_bound(W, GAUSSIAN), rel=1e-10)
    # a release (OS CSPRNG) needs the zCDP calibration, and its error is the analytic one
    zcdp = dpx.Gaussian(1.0, 1e-6, "zcdp")
    rel = dpx.release(x, W, "residual_planner", zcdp)
    assert rel.mode == "release" and rel.sampler == "continuous"
    assert rel.analytic_rmse == pytest.approx(dpx.svd_bound(W, zcdp), rel=1e-10)
    np.testing.assert_allclose(r.answers, W.matvec(r.x_hat), atol=1e-8)
    np.testing.assert_allclose(r.per_query_std(),
                               np.sqrt(error.per_query_variance(W, r.strategy, GAUSSIAN)))
    res = r.strategy.optimization
    assert res.method == "residual_planner" and res.objective == pytest.approx(r.strategy.plan.unit_tse)
    # a workload over the same cells without the plan's Kronecker form: generic dense paths, W x̂
    Wd = Dense(np.random.default_rng(0).normal(size=(7, W.m)) @ W.dense())  # in the row space
    A = r.strategy
    D = A.dense()
    X = np.linalg.pinv(D.T @ D, rcond=1e-10, hermitian=True)
    assert error.unit_tse(Wd, A, 2) == pytest.approx(np.trace(Wd.array @ X @ Wd.array.T), rel=1e-9)
    y = np.random.default_rng(1).normal(size=A.m)
    np.testing.assert_allclose(A.answer(Wd, y), Wd.array @ np.linalg.pinv(D) @ y, atol=1e-9)


def test_laplace_is_not_applicable_with_the_reason():
    W = workloads.marginals((3, 4), 1)
    with pytest.raises(registry.NotApplicableError, match="Gaussian"):
        registry.get("residual_planner").strategy(W, LAPLACE)
    df = dpx.compare(W, LAPLACE, mechanisms=["residual_planner", "identity"])
    row = df.set_index("mechanism").loc["residual_planner"]
    assert math.isnan(row["rmse"]) and "Gaussian" in row["note"]
    with pytest.raises(registry.NotApplicableError, match="Gaussian"):
        residual.plan(W).tse(LAPLACE)


def test_unsupported_workloads_and_bad_input():
    domain = (3, 4, 5)
    plan = residual.plan_marginals(domain, [(0,), (1,)])
    with pytest.raises(error.UnsupportedWorkloadError, match=r"\(0, 1\)"):
        plan.tse(W=workloads.marginal(domain, [0, 1]))
    A = plan.strategy()
    assert not error.supports(workloads.marginal(domain, [0, 1]), A)
    assert error.supports(workloads.marginal(domain, [1]), A)
    with pytest.raises(error.UnsupportedWorkloadError):
        plan.marginal_variance((0, 2))
    with pytest.raises(ValueError, match="outside"):
        residual.plan_marginals(domain, [(0, 3)])
    with pytest.raises(ValueError, match="repeats"):
        residual.plan_marginals(domain, [(1, 1)])
    with pytest.raises(ValueError, match="weights"):
        residual.plan_marginals(domain, [(1,)], weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        residual.plan_marginals(domain, [(1,)], weights=[-1.0])
    with pytest.raises(ValueError, match="objective"):
        residual.plan_marginals(domain, [(1,)], objective="mean")
    with pytest.raises(ValueError, match="at least one"):
        residual.plan_marginals(domain, [])
    with pytest.raises(ValueError, match="attribute size"):
        residual.plan_marginals((3, 0), [(1,)])
    with pytest.raises(ValueError, match="shape"):
        plan.reconstruct(np.zeros(3))
    with pytest.raises(ValueError, match="covers"):
        plan.measure_answers({(0,): np.zeros(3)})
    with pytest.raises(ValueError, match="shape"):
        plan.measure_answers({(0,): np.zeros(3), (1,): np.zeros(5)})
    with pytest.raises(ValueError, match="L2"):
        plan.sensitivity(1)
    with pytest.raises(registry.NotApplicableError, match="Kronecker"):
        residual.plan(workloads.random_rectangles((4, 4), m=5))
    with pytest.raises(registry.NotApplicableError, match="no non-zero"):
        residual.plan(Weighted(workloads.marginal(domain, [0]), 0.0))
    with pytest.raises(ValueError, match="domain"):
        plan.tse(W=workloads.marginal((3, 4), [0]))


def test_group_variances_of_a_kronecker_workload():
    """CPS-like [I;1ᵀ] products: one group per marginal, counts and variances consistent with the rows."""
    W = Kronecker([workloads.identity_total(n) for n in (3, 4, 2)])
    plan = residual.plan(W)
    g = plan.group_variances(GAUSSIAN)
    assert len(g) == 8 and g["queries"].sum() == W.m
    rows = plan.query_variances(noise=GAUSSIAN)
    assert np.sum(g["queries"] * g["variance"]) == pytest.approx(rows.sum(), rel=1e-12)
    assert g["variance"].max() == pytest.approx(rows.max(), rel=1e-12)
    assert plan.max_variance(GAUSSIAN) == pytest.approx(rows.max(), rel=1e-12)
    for _, row in g.iterrows():
        assert row["variance"] == pytest.approx(plan.marginal_variance(row["attributes"], GAUSSIAN))
    assert isinstance(plan.strategy().gram(), marginals.MarginalGram)
    assert Dense(plan.strategy().dense()).sensitivity(2) == pytest.approx(1.0)
