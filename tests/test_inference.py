"""Inference as a choice (dpexplorer.core.inference): NNLS correctness, implicit strategies,
releases with inference="nonnegative", bootstrap intervals, DAWA's stage 2, evaluate's column."""

import math
import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.optimize
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer.core import inference as inf
from dpexplorer.core.inference import NonNegativeLeastSquares
from dpexplorer.evaluate import evaluate, uniform_ranges
from dpexplorer.queries.domain import Attribute, Domain, Table
from dpexplorer.queries.matrix import Dense, Identity, Kronecker, MatrixTooLargeError
from dpexplorer.strategies.classic import h2


def _sparse(n, seed, share=0.03):
    """A DPBench-like sparse histogram (seeded, synthetic): ``share`` of the cells non-empty,
    heavy-tailed counts (geometric), the rest zeros."""
    rng = np.random.default_rng(seed)
    x = np.zeros(n, dtype=np.int64)
    cells = rng.choice(n, max(1, int(share * n)), replace=False)
    x[cells] = rng.geometric(0.01, cells.size)
    return x


def _kkt_ok(A, y, x, tol):
    """KKT of min ½‖Ax − y‖² s.t. x ≥ 0 (Lawson & Hanson 1974, Ch. 23), g = Aᵀ(Ax − y)."""
    g = A.T @ (A @ x - y)
    scale = max(1.0, float(np.abs(g).max()), float(np.abs(x).max()))
    return (x >= 0).all() and (g >= -tol * scale).all() and abs(float(x @ g)) <= tol * scale * max(
        1.0, float(np.abs(x).sum()))


# ----------------------------------------------------------------- NNLS correctness
@settings(max_examples=40, deadline=None)
@given(extra=st.integers(0, 13), n=st.integers(1, 12), seed=st.integers(0, 2**31 - 1),
       shift=st.floats(-3.0, 3.0))
def test_nnls_matches_scipy_and_satisfies_kkt(extra, n, seed, shift):
    """At least as many strategy rows as cells, as a strategy supporting its workload has
    (rank-deficient strategies: the marginal case below)."""
    rng = np.random.default_rng(seed)
    p = n + extra
    A = rng.standard_normal((p, n))
    y = rng.standard_normal(p) * 3 + shift
    ref, _ = scipy.optimize.nnls(A, y)
    res = NonNegativeLeastSquares(Dense(A), tol=1e-10, max_iter=50000).solve(y)
    full_rank = np.linalg.matrix_rank(A) == n
    assert (res.x >= 0).all() and (res.converged or not full_rank)
    f_ref = 0.5 * float(np.sum((A @ ref - y) ** 2))
    # the objective is unique even when x is not (a rank-deficient A)
    assert res.objective <= f_ref + 1e-7 * max(1.0, f_ref)
    assert _kkt_ok(A, y, res.x, 1e-6)
    # never worse than least squares clipped at 0
    x_clip = np.maximum(np.linalg.lstsq(A, y, rcond=None)[0], 0)
    assert res.objective <= 0.5 * float(np.sum((A @ x_clip - y) ** 2)) + 1e-9
    if full_rank and np.linalg.cond(A) < 100:  # unique, and the KKT residual bounds ‖x − ref‖
        np.testing.assert_allclose(res.x, ref, atol=1e-5 * max(1.0, np.abs(ref).max()))


def test_weighted_nnls_is_nnls_of_the_scaled_rows():
    rng = np.random.default_rng(4)
    A, y, s = rng.standard_normal((20, 6)), rng.standard_normal(20) * 4, rng.uniform(0.5, 3, 20)
    ref, _ = scipy.optimize.nnls(A / s[:, None], y / s)
    x = NonNegativeLeastSquares(Dense(A), row_scale=s, tol=1e-8, max_iter=50000).solve(y).x
    np.testing.assert_allclose(x, ref, atol=1e-6)
    np.testing.assert_allclose(inf.nonnegative(A, y, row_scale=s), ref, atol=1e-4)
    # weighted least squares is the Gauss-Markov estimate
    np.testing.assert_allclose(inf.least_squares(A, y, row_scale=s),
                               np.linalg.lstsq(A / s[:, None], y / s, rcond=None)[0], atol=1e-8)
    with pytest.raises(ValueError, match="positive"):
        NonNegativeLeastSquares(Dense(A), row_scale=-s)


def test_identity_is_clipping_and_bad_input_is_refused():
    y = np.array([-2.0, 0.5, 3.0, -0.1])
    np.testing.assert_array_equal(inf.nonnegative(Identity(4), y), [0, 0.5, 3.0, 0])
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        inf.nonnegative(Identity(4), np.ones(3))
    with pytest.raises(ValueError, match="finite"):
        inf.nonnegative(Identity(4), [1, np.nan, 0, 0])
    with pytest.raises(ValueError, match="tol"):
        NonNegativeLeastSquares(Identity(4), tol=0)
    with pytest.raises(ValueError, match="inference must be one of"):
        inf.check_inference("clip")


def test_not_converged_warns():
    A = h2(64)
    y = A.matvec(_sparse(64, 0).astype(float)) + np.random.default_rng(0).laplace(0, 7, A.m)
    with pytest.warns(RuntimeWarning, match="stopped after 1 iterations"):
        NonNegativeLeastSquares(A, tol=1e-14, max_iter=1)(y)


# ----------------------------------------------------------------- implicit strategies
def _no_dense(monkeypatch, A):
    def refuse(*args, **kwargs):
        raise AssertionError(f"{A.name} was materialised")
    monkeypatch.setattr(A, "dense", refuse)
    monkeypatch.setattr(A, "_dense", refuse)


def test_h2_above_the_dense_limit_is_solved_through_its_operators(monkeypatch):
    n = 8192
    A = h2(n)
    with pytest.raises(MatrixTooLargeError):
        A.dense()                                   # (16383 × 8192): refused by the project's limit
    _no_dense(monkeypatch, A)
    x = _sparse(n, 1).astype(float)
    y = A.matvec(x) + np.random.default_rng(1).laplace(0, A.sensitivity(1), A.m)
    res = NonNegativeLeastSquares(A, tol=1e-4, max_iter=400).solve(y)
    assert (res.x >= 0).all() and res.objective <= res.start_objective


@pytest.mark.parametrize("build", ["kron", "marginal"])
def test_kronecker_and_marginal_strategies_never_densified(monkeypatch, build):
    if build == "kron":
        A = Kronecker([h2(32), h2(32)])
        assert dpx.core.reconstruct.Reconstructor(A).method == "kron"
    else:
        W = dpx.workloads.marginals((8, 8, 8), 2)
        A = dpx.registry.get("datacube").strategy(W, dpx.Laplace(1.0))
        assert hasattr(A, "reconstructor")          # an implicit marginal strategy
    _no_dense(monkeypatch, A)
    rng = np.random.default_rng(2)
    x = _sparse(A.n, 2).astype(float)
    y = A.matvec(x) + rng.laplace(0, 3.0, A.m)
    res = NonNegativeLeastSquares(A, tol=1e-6, max_iter=5000).solve(y)
    assert res.converged and (res.x >= 0).all() and res.objective <= res.start_objective
    # KKT through the operators alone
    g = A.rmatvec(A.matvec(res.x) - y)
    assert np.max(np.abs(np.minimum(res.x, g / NonNegativeLeastSquares(A).lipschitz))) <= 1e-5 * max(
        1.0, np.abs(x).max() * 2)


def test_h2_small_agrees_with_scipy_nnls_on_the_dense_matrix():
    A = h2(64)
    x = _sparse(64, 3).astype(float)
    y = A.matvec(x) + np.random.default_rng(3).laplace(0, A.sensitivity(1), A.m)
    ref, _ = scipy.optimize.nnls(A.dense(), y)
    res = NonNegativeLeastSquares(A, tol=1e-8, max_iter=50000).solve(y)
    np.testing.assert_allclose(res.x, ref, atol=1e-5 * max(1.0, ref.max()))
    assert _kkt_ok(A.dense(), y, res.x, 1e-6)


# ----------------------------------------------------------------- releases
def test_simulate_nonnegative_release_is_labelled_and_bootstrapped():
    n = 32
    x, W = _sparse(n, 5, share=0.1), dpx.workloads.all_range(n)
    r = dpx.simulate(x, W, "h2", dpx.Laplace(1.0), seed=7, inference="nonnegative",
                     bootstrap_draws=20, bootstrap_seed=11)
    ls = dpx.simulate(x, W, "h2", dpx.Laplace(1.0), seed=7)
    np.testing.assert_array_equal(r.y, ls.y)                     # same measurement, other inference
    assert (r.x_hat >= 0).all() and r.inference == "nonnegative" and ls.inference == "least_squares"
    np.testing.assert_allclose(r.answers, W.matvec(r.x_hat))
    assert math.isnan(r.analytic_rmse) and r.interval_method == "parametric bootstrap"
    meta = r.metadata()
    assert meta["inference"] == "nonnegative" and meta["analytic_rmse"] is None
    assert meta["interval_method"] == "parametric bootstrap"
    assert meta["bootstrap"]["draws"] == 20 and meta["bootstrap"]["seed"] == 11
    assert meta["bootstrap"]["rmse"] > 0 and set(meta["confidence_methods"]) == {"parametric bootstrap"}
    frame = r.to_frame()
    assert list(frame.columns) == list(ls.to_frame().columns)  # the same shape as least squares
    assert (frame["ci_method"] == "parametric bootstrap").all()
    assert (frame["ci_low"] <= frame["ci_high"]).all()
    np.testing.assert_allclose(frame["std"], r.bootstrap().std())
    # the analytic std of least squares is not reported as if it held
    assert not np.allclose(frame["std"], ls.per_query_std(), rtol=0.05)
    assert ls.interval_method == "analytic" and ls.metadata()["inference"] == "least_squares"
    # reproducible from the bootstrap seed, another seed draws other noise
    again = dpx.simulate(x, W, "h2", dpx.Laplace(1.0), seed=7, inference="nonnegative",
                         bootstrap_draws=20, bootstrap_seed=11)
    np.testing.assert_array_equal(again.confidence_intervals()["ci_low"], frame["ci_low"])
    other = dpx.simulate(x, W, "h2", dpx.Laplace(1.0), seed=7, inference="nonnegative",
                         bootstrap_draws=20, bootstrap_seed=12)
    assert not np.array_equal(other.confidence_intervals()["ci_low"], frame["ci_low"])
    assert '"inference": "nonnegative"' in r.to_json()


def test_a_nonnegative_release_pickles_and_answer_bands_take_the_inference():
    W = dpx.workloads.marginals((4, 4, 4), 2)
    x = _sparse(64, 15)
    r = dpx.simulate(x, W, "datacube", dpx.Laplace(1.0), seed=2, inference="nonnegative",
                     bootstrap_draws=5)
    back = pickle.loads(pickle.dumps(r))
    np.testing.assert_array_equal(back.x_hat, r.x_hat)
    np.testing.assert_array_equal(back.per_query_std(), r.per_query_std())
    bands = dpx.mechanism.answer_bands(x, W, "datacube", dpx.Laplace(1.0), trials=3, seed=0,
                                       inference="nonnegative")
    assert bands.trials == 3 and (bands.q05 >= -1e-9).all()      # marginals of x̂ >= 0
    with pytest.raises(ValueError, match="native"):
        dpx.mechanism.answer_bands(x, W, "uniform", dpx.Laplace(1.0), trials=1, seed=0,
                                   inference="nonnegative")


def test_release_nonnegative_in_release_mode_records_inference_in_the_ledger():
    led = dpx.PrivacyLedger()
    x = _sparse(32, 6)
    r = dpx.release(x, dpx.workloads.identity(32), "hb", dpx.Laplace(1.0), ledger=led,
                    inference="nonnegative", bootstrap_draws=10)
    assert r.mode == "release" and r.seed is None and (r.x_hat >= 0).all()
    assert r.metadata()["bootstrap"]["seed"] == inf.BOOTSTRAP_SEED and "seed" not in r.metadata()
    assert "nonnegative inference" in led.entries[-1].label


def test_default_stays_least_squares():
    x, W = _sparse(64, 8), dpx.workloads.all_range(64)
    a = dpx.simulate(x, W, "hb", dpx.Laplace(1.0), seed=1)
    b = dpx.simulate(x, W, "hb", dpx.Laplace(1.0), seed=1, inference="least_squares")
    np.testing.assert_array_equal(a.answers, b.answers)
    assert a.inference == "least_squares" and math.isfinite(a.analytic_rmse)
    assert a.x_hat.min() < 0                                   # the reason for the choice


def test_inapplicable_inferences_are_refused_before_anything_is_spent():
    led = dpx.PrivacyLedger()
    x = _sparse(64, 9)
    with pytest.raises(ValueError, match=r"must be one of \['native'\]"):
        dpx.simulate(x, dpx.workloads.all_range(64), "mwem", dpx.Laplace(1.0), seed=0, ledger=led,
                     inference="nonnegative")
    with pytest.raises(ValueError, match="must be one of"):
        dpx.simulate(x, dpx.workloads.all_range(64), "h2", dpx.Laplace(1.0), seed=0, ledger=led,
                     inference="clipped")
    with pytest.raises(ValueError, match="bootstrap_draws"):
        dpx.simulate(x, dpx.workloads.all_range(64), "h2", dpx.Laplace(1.0), seed=0, ledger=led,
                     inference="nonnegative", bootstrap_draws=1)
    assert led.epsilon == 0 and not led.entries
    assert dpx.inferences("mwem") == ("native",) and dpx.inferences("dawa")[0] == "least_squares"
    assert dpx.simulate(x, dpx.workloads.all_range(64), "uniform", dpx.Laplace(1.0),
                        seed=0).inference == "native"


def test_a_record_table_refuses_an_inference_that_needs_x_hat():
    df = pd.DataFrame({"a": ["x", "y", "x"], "b": [0, 1, 1]})
    dom = Domain((Attribute("a", categories=("x", "y")), Attribute("b", categories=(0, 1))))
    W = dpx.workloads.marginals((2, 2), 1)
    with pytest.raises(ValueError, match="record table"):
        dpx.simulate(Table(df, dom, "t"), W, "residual_planner", dpx.Gaussian(1.0, 1e-6, "zcdp"), seed=0,
                     inference="nonnegative")


def test_dawa_stage_two_takes_nonnegative_inference():
    x, W = _sparse(256, 10), dpx.workloads.all_range(256)
    nn = dpx.simulate(x, W, "dawa", dpx.Laplace(0.5), seed=4, inference="nonnegative")
    ls = dpx.simulate(x, W, "dawa", dpx.Laplace(0.5), seed=4)
    np.testing.assert_array_equal(nn.info["partition"].edges, ls.info["partition"].edges)
    assert (nn.x_hat >= 0).all() and (nn.info["bucket_counts"] >= 0).all()
    assert nn.inference == "nonnegative" and nn.interval_method == "none"   # data-dependent: no interval
    assert nn.metadata()["inference"] == "nonnegative"
    assert math.isclose(nn.x_hat.sum(), nn.info["bucket_counts"].sum())


@settings(max_examples=30, deadline=None)
@given(p=st.integers(3, 20), k=st.integers(1, 8), seed=st.integers(0, 2**31 - 1))
def test_stage_inference_from_bucket_counts_equals_inference_from_y(p, k, seed):
    """‖A s' − y‖² = ‖A s' − A s‖² + const for s = A⁺y: NNLS of ``A s`` is NNLS of ``y``."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((max(p, k), k))
    y = rng.standard_normal(A.shape[0]) * 2
    s = np.linalg.lstsq(A, y, rcond=None)[0]
    direct, _ = scipy.optimize.nnls(A, y)
    via_s, _ = scipy.optimize.nnls(A, A @ s)
    np.testing.assert_allclose(via_s, direct, atol=1e-6 * max(1.0, np.abs(direct).max()))


# ----------------------------------------------------------------- the bootstrap
def test_bootstrap_of_least_squares_reproduces_the_analytic_variance():
    """A linear inference's bootstrap variance is its analytic variance (Gaussian noise, identity).

    The mean over ``m`` independent answers of a sample variance from ``D`` draws has relative
    standard error ``sqrt(2 / ((D − 1) m))``; the tolerance is 4.42 of them (two-sided false
    failure 1e-5, normal approximation)."""
    m, D = 512, 100
    A, W = Identity(m), Identity(m)
    noise = dpx.Gaussian(1.0, 1e-6)
    draw = inf.noise_draws(noise, A, discrete=False)
    boot = inf.parametric_bootstrap(W, A, np.full(m, 5.0), inf.make_solver("least_squares", A), draw,
                                    draws=D, seed=3)
    analytic = dpx.per_query_rmse(W, A, noise) ** 2
    rel = float(np.mean(boot.std() ** 2) / np.mean(analytic))
    assert abs(rel - 1) <= 4.42 * math.sqrt(2 / ((D - 1) * m))
    with pytest.raises(ValueError, match="draws"):
        inf.parametric_bootstrap(W, A, np.zeros(m), inf.make_solver("least_squares", A), draw, draws=1)


def test_a_registered_inference_plugs_in():
    @inf.register_inference("clipped_test")
    def clipped(A, y, *, reconstructor=None, row_scale=None):
        """Least squares clipped at 0 (for this test)."""
        return np.maximum(inf.least_squares(A, y, reconstructor=reconstructor), 0)

    try:
        assert inf.describe()["clipped_test"] == "Least squares clipped at 0 (for this test)."
        assert "clipped_test" in dpx.inferences("h2")
        r = dpx.simulate(_sparse(32, 12), Identity(32), "h2", dpx.Laplace(1.0), seed=0,
                         inference="clipped_test", bootstrap_draws=5)
        assert (r.x_hat >= 0).all() and r.interval_method == "parametric bootstrap"
        with pytest.raises(ValueError, match="already registered"):
            inf.register_inference("clipped_test")(clipped)
    finally:
        inf.INFERENCES.pop("clipped_test", None)


# ----------------------------------------------------------------- error on sparse data
@pytest.mark.parametrize("mech", ["identity", "h2"])
def test_nonnegative_has_lower_rmse_on_sparse_data(mech):
    """Empirical RMSE of x̂ over seeded paired trials (same noise for both inferences).

    The data: n = 1024, 3 % of the cells non-empty.  Least squares' mean squared error must
    match its analytic value (two-sided t test, false failure 1e-3), and the mean reduction of
    the squared error by non-negative least squares must have a one-sided 99.9 % lower
    confidence bound above 0 (t with T − 1 degrees of freedom, t = 4.02).  Measured on these
    seeds: RMSE 1.35 → 0.97 counts (identity), 12.1 → 2.6 (H2), the reduction 30 and 40
    standard errors above 0, so a false failure needs the reduction to come out ~26 standard
    errors low (probability far below 1e-6 under the t model).
    """
    n, T = 1024, 12
    x = _sparse(n, 13)
    W, noise = Identity(n), dpx.Laplace(1.0)
    mse_ls, mse_nn = np.empty(T), np.empty(T)
    for t in range(T):
        ls = dpx.simulate(x, W, mech, noise, seed=100 + t)
        with warnings.catch_warnings():
            warnings.simplefilter("error")             # every solve converges
            nn = dpx.simulate(x, W, mech, noise, seed=100 + t, inference="nonnegative",
                              bootstrap_draws=2)
        assert np.array_equal(ls.y, nn.y)
        mse_ls[t] = np.mean((ls.x_hat - x) ** 2)
        mse_nn[t] = np.mean((nn.x_hat - x) ** 2)
    analytic = ls.analytic_rmse ** 2
    se = mse_ls.std(ddof=1) / math.sqrt(T)
    assert abs(mse_ls.mean() - analytic) <= scipy.stats.t.ppf(1 - 0.0005, T - 1) * se
    d = mse_ls - mse_nn
    lower = d.mean() - scipy.stats.t.ppf(0.999, T - 1) * d.std(ddof=1) / math.sqrt(T)
    assert lower > 0


# ----------------------------------------------------------------- evaluate
def test_evaluate_reports_each_mechanism_with_each_applicable_inference():
    data = {"sparse": _sparse(64, 14)}
    kw = dict(datasets=data, workloads=[uniform_ranges(50)], epsilons=[1.0], trials=2,
              workload_seeds=range(1), progress=False, n_jobs=1)
    df = evaluate(["identity", "h2", "uniform"], inferences=["least_squares", "nonnegative"], **kw)
    assert list(zip(df["mechanism"], df["inference"], strict=True)) == [
        ("identity", "least_squares"), ("identity", "nonnegative"), ("h2", "least_squares"),
        ("h2", "nonnegative"), ("uniform", "native")]
    assert df["note"].isna().all() and (df["runs"] == 2).all()
    base = evaluate(["identity", "h2", "uniform"], **kw)             # the default: unchanged numbers
    assert list(base["inference"]) == ["least_squares", "least_squares", "native"]
    ls = df[df["inference"] != "nonnegative"].reset_index(drop=True)
    pd.testing.assert_frame_equal(ls.drop(columns="seconds"), base.drop(columns="seconds"))
    with pytest.raises(ValueError, match="inference must be one of"):
        evaluate(["identity"], inferences=["clip"], **kw)


def test_a_solve_where_no_step_is_accepted_stops_and_keeps_the_best(monkeypatch):
    """FISTA's backtracking gives up after BACKTRACK_LIMIT steps (f flat to rounding) instead of
    looping for ever; the result is never worse than the clipped start."""
    x, W = _sparse(256, 3), dpx.workloads.all_range(256)
    A = h2(W.n)
    y = A.matvec(x) + np.random.default_rng(0).laplace(0, 20.0, A.m)
    monkeypatch.setattr(inf, "BACKTRACK_LIMIT", 0)  # no step is ever accepted
    r = NonNegativeLeastSquares(A).solve(y)
    assert r.iterations == 1 and r.objective <= r.start_objective and (r.x >= 0).all()


@pytest.mark.slow
def test_privelet_on_patent_terminates(dpbench_dir):
    """The case that looped for ever (Privelet's strategy, PATENT, ε = 0.1, seed 0): the bound's
    constant grew to infinity with a zero step, A z having drifted by rounding."""
    x = np.asarray(dpx.datasets.load_dpbench("PATENT", dpbench_dir), dtype=float)
    W = dpx.workloads.random_ranges(x.size, 2000, seed=0)
    A = dpx.registry.get("wavelet").strategy(W, dpx.Laplace(0.1))
    y = A.matvec(x) + np.random.default_rng(0).laplace(0, A.sensitivity(1) / 0.1, A.m)
    r = NonNegativeLeastSquares(A).solve(y)
    assert (r.x >= 0).all() and r.objective < r.start_objective and r.kkt < 1e-3
