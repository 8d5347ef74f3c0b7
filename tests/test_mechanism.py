"""Releases: MEASURE through the privacy boundary, RECONSTRUCT, ledger, empirical vs analytic error."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer import mechanism
from dpexplorer.mechanism import reconstruct
from dpexplorer.privacy import PrivacyLedger, PrivateData
from dpexplorer.queries import workloads
from dpexplorer.queries.matrix import Dense, Kronecker
from dpexplorer.strategies import classic as strategies


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 24), seed=st.integers(0, 10**6),
       which=st.sampled_from(["identity", "h2", "hb", "wavelet", "random"]),
       method=st.sampled_from(["auto", "dense", "lsmr"]))
def test_noiseless_reconstruction_returns_x(n, seed, which, method):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 50, size=n).astype(float)
    A = Dense(rng.normal(size=(n + 3, n))) if which == "random" else getattr(strategies, which)(n)
    x_hat = reconstruct(A, A @ x, method=method)
    np.testing.assert_allclose(x_hat, x, atol=1e-6 * max(1.0, x.max()))


def test_kronecker_reconstruction():
    rng = np.random.default_rng(0)
    A = Kronecker([strategies.h2(6), strategies.wavelet(4), strategies.identity(3)])
    x = rng.integers(0, 9, size=A.n).astype(float)
    np.testing.assert_allclose(reconstruct(A, A @ x), x, atol=1e-9)
    y = rng.normal(size=A.m)
    np.testing.assert_allclose(reconstruct(A, y), reconstruct(A, y, method="dense"), atol=1e-8)


def test_rank_deficient_strategy_minimum_norm():
    A = Dense(np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]))
    y = np.array([4.0, 3.0])
    np.testing.assert_allclose(reconstruct(A, y), [2.0, 2.0, 3.0])


def test_reconstruct_errors():
    with pytest.raises(ValueError, match="shape"):
        reconstruct(strategies.h2(4), np.ones(3))
    with pytest.raises(ValueError, match="method"):
        reconstruct(strategies.h2(4), np.ones(7), method="magic")
    for bad in (np.nan, np.inf, -np.inf):  # NaN/inf answers were once passed through
        y = np.ones(7)
        y[3] = bad
        with pytest.raises(ValueError, match="finite.*index 3"):
            reconstruct(strategies.h2(4), y)


def test_noise_free_extremes_have_finite_intervals():
    """ε = 1e6 (noise-free checks): the discrete Laplace is 0 surely (q = e^{-1/b} = 0), the
    interval has width 0; ε at the bottom of the range gives finite, huge intervals."""
    x = np.arange(16.0)
    W = workloads.all_range(16)
    r = dpx.simulate(x, W, "identity", dpx.Laplace(1e6), seed=0)
    df = r.to_frame()
    np.testing.assert_array_equal(r.answers, W.matvec(x))
    assert (df["ci_method"] == "discrete_laplace_single").sum() == 16  # the 16 one-cell ranges
    single = df["ci_method"] == "discrete_laplace_single"
    np.testing.assert_array_equal(df.loc[single, "ci_low"], df.loc[single, "answer"])
    low = dpx.simulate(x, W, "hb", dpx.Laplace(dpx.noise.EPSILON_RANGE[0]), seed=0).to_frame()
    assert np.isfinite(low[["answer", "std", "ci_low", "ci_high"]].to_numpy()).all()
    assert low["std"].min() > 1e8


@pytest.mark.parametrize("mechanism,noise", [
    ("identity", dpx.Laplace(1.0)),
    ("h2", dpx.Laplace(0.5)),
    ("hb", dpx.Gaussian(1.0, 1e-6)),
    ("greedy_h", dpx.Laplace(1.0)),
    ("wavelet", dpx.Gaussian(0.5, 1e-5)),
])
def test_empirical_rmse_matches_analytic(mechanism, noise):
    """Mean of 400 i.i.d. trial MSEs against the analytic MSE, within 5 of its standard errors.

    Tolerance: |mean − analytic| < 5·se, se the sample standard error of the 400 trial means; with
    N = 400 trials this is a two-sided z of 5, a false-failure rate of about 6e-7 per run for a
    fresh seed (the seeds are fixed, so the run is deterministic).  Power: se < 0.1·analytic is
    asserted, so the tolerance is under 50 % of the MSE and a 2× noise scale (4× MSE) fails.
    """
    n, trials = 64, 400
    W = workloads.all_range(n)
    x = np.random.default_rng(1).integers(0, 100, size=n).astype(float)
    truth = W @ x
    A = dpx.registry.get(mechanism).strategy(W, noise)  # selected once, measured many times
    sq = []
    for t in range(trials):
        r = dpx.simulate(x, W, A, noise, seed=1000 + t)
        sq.append(np.mean((r.answers - truth) ** 2))
    sq = np.asarray(sq)
    analytic = r.analytic_rmse**2  # expected mean squared error per query
    # the trial means are i.i.d.; their standard error sets the tolerance (5 standard errors)
    se = sq.std(ddof=1) / math.sqrt(trials)
    assert abs(sq.mean() - analytic) < 5 * se
    assert se < 0.1 * analytic  # the test has power: 5 se is well under 50% of the value


@pytest.mark.slow  # many seeded releases: about 6 s on 2 cores (the full suite runs it)
def test_per_query_error_bands():
    """Each query's empirical noise sd over 600 seeded runs against ``per_query_std``.

    Tolerance: |emp/std − 1| < 5·sqrt(5/(4N)) = 0.32 per query; with N = 300 trials this is a
    two-sided z of 5 per query (relative sd of a sample sd ≈ sqrt((κ−1)/(4N)), κ ≤ 6 for sums of
    Laplace variables), a false-failure rate of at most 32 × 6e-7 ≈ 2e-5 per run for a fresh
    seed (the seeds are fixed, so the run is deterministic).  A 2× noise scale (ratio 2) fails.
    (It was 600 trials, 0.23: more than a 2× error needs.)
    """
    n, trials = 32, 300
    W = workloads.prefix(n)
    x = np.arange(n, dtype=float)
    noise = dpx.Laplace(1.0)
    A = dpx.registry.get("h2").strategy(W, noise)  # selected once, measured many times
    answers = np.array([dpx.simulate(x, W, A, noise, seed=s).answers for s in range(trials)])
    r = dpx.simulate(x, W, "h2", noise, seed=0)
    np.testing.assert_array_equal(r.answers, answers[0])  # by name: the same strategy, same draws
    std = r.per_query_std()
    emp = answers.std(axis=0, ddof=1)
    # relative standard error of a sample std ≈ sqrt((κ−1)/(4N)); answers are sums of Laplace
    # variables (κ ≤ 6), so 5·sqrt(5/(4N)) bounds the deviation
    np.testing.assert_array_less(np.abs(emp / std - 1), 5 * math.sqrt(5 / (4 * trials)))


def test_simulation_reproduces_and_records():
    W = workloads.prefix(16)
    x = np.arange(16.0)
    ledger = PrivacyLedger()
    r1 = dpx.simulate(x, W, "hb", dpx.Laplace(0.5), seed=42, ledger=ledger)
    r2 = dpx.simulate(x, W, "hb", dpx.Laplace(0.5), seed=42, ledger=ledger)
    np.testing.assert_array_equal(r1.answers, r2.answers)  # bit for bit from the seed
    assert r1.seed == 42 and r1.mode == "simulation"
    assert ledger.epsilon == pytest.approx(1.0)
    assert ledger.to_frame()["mode"].tolist() == ["simulation", "simulation"]
    assert "seed" not in ledger.to_frame().columns
    meta = r1.metadata()
    assert meta["mode"] == "simulation" and meta["seed"] == 42 and "NOT a release" in meta["randomness"]


def test_release_metadata_has_no_seed():
    W = workloads.prefix(16)
    x = np.arange(16.0)
    ledger = PrivacyLedger()
    r3 = dpx.release(x, W, "hb", dpx.Gaussian(0.5, 1e-6, "zcdp"), ledger=ledger)
    assert r3.seed is None and r3.mode == "release"
    assert ledger.delta == pytest.approx(1e-6)
    meta = r3.metadata()
    assert "seed" not in meta and meta["randomness"] == "OS CSPRNG via opendp"
    assert meta["epsilon"] == 0.5 and meta["delta"] == 1e-6
    assert meta["rho"] == pytest.approx(dpx.Gaussian(0.5, 1e-6, "zcdp").rho_per_unit)
    assert meta["workload_spec"]["products"][0]["factors"] == [{"type": "prefix"}]
    assert meta["dpexplorer_version"] == dpx.__version__
    doc = json.loads(r3.to_json())
    assert len(doc["answers"]) == 16 and len(doc["ci_low"]) == 16
    df = r3.to_frame()
    assert list(df.columns) == ["query", "label", "answer", "std", "ci_low", "ci_high", "ci_method"]
    assert df["label"].iloc[3] == "[0, 3]"  # prefix query 3: cells 0..3
    assert (df["ci_method"] == "discrete_gaussian_subgaussian").all()
    with pytest.raises(TypeError, match="no seed"):
        dpx.release(x, W, "hb", dpx.Laplace(1.0), seed=3)
    with pytest.raises(ValueError, match="zCDP"):
        dpx.release(x, W, "hb", dpx.Gaussian(0.5, 1e-6))  # analytic calibration: not for releases
    with pytest.raises(ValueError, match="explicit seed"):
        dpx.simulate(x, W, "hb", dpx.Laplace(1.0))


def test_measure_noise_scale_is_sensitivity_over_epsilon():
    """The kernel's noise on A = 3·I has the discrete Laplace variance of scale Δ₁(A)/ε.

    Tolerance: 5 standard errors of the sample variance, se = var·sqrt(5/N) (Laplace kurtosis 6),
    i.e. 7.9 % of the variance; with N = 20,000 draws this is a two-sided z of 5, a false-failure
    rate of about 6e-7 per run for a fresh seed (the seeds are fixed, so the run is deterministic).
    A 2× noise scale (4× variance) fails.
    """
    # Laplace scale b = Δ₁(A)/ε: with A = 3·I the noise on each answer has variance 2(3/ε)²
    eps, trials = 0.5, 20000
    data = PrivateData(np.zeros(4))
    A = Dense(3 * np.eye(4))
    y = np.concatenate([data.measure(A, dpx.Laplace(eps), np.random.default_rng(s)) for s in range(trials // 4)])
    # A = 3·I has whole entries: discrete Laplace with b = 6, variance 2q/(1−q)², q = e^{−1/6}
    q = math.exp(-eps / 3)
    expected = 2 * q / (1 - q) ** 2
    assert expected == pytest.approx(2 * (3 / eps) ** 2 - 1 / 6, rel=1e-3)
    se = expected * math.sqrt(5 / y.size)
    assert abs(y.var() - expected) < 5 * se
    assert data.ledger.epsilon == pytest.approx(eps * (trials // 4))


def test_private_data_hides_x_and_validates():
    d = PrivateData([1, 2, 3])
    assert "hidden" in repr(d)
    assert not hasattr(d, "x")
    with pytest.raises(ValueError, match="NaN"):
        PrivateData([1, np.nan])
    with pytest.raises(ValueError, match="empty"):
        PrivateData([])
    with pytest.raises(TypeError, match="Generator"):
        d.measure(np.eye(3), dpx.Laplace(1.0), np.random.RandomState(0))
    with pytest.raises(ValueError, match="columns"):
        d.measure(np.eye(4), dpx.Laplace(1.0), np.random.default_rng(0))
    with pytest.raises(ValueError, match="sensitivity 0"):
        d.measure(np.zeros((2, 3)), dpx.Laplace(1.0), np.random.default_rng(0))
    with pytest.raises(ValueError, match="non-integer"):
        PrivateData([1.5, 2])
    with pytest.raises(ValueError, match="negative"):
        PrivateData([1, -2])
    w = PrivateData([1.5, -2.0], counts=False)  # fractional or signed weights, when asked for
    assert w.counts is False


def test_release_input_errors():
    W = workloads.prefix(8)
    with pytest.raises(ValueError, match="cells"):
        dpx.release(np.ones(9), W, "identity", dpx.Laplace(1.0))
    with pytest.raises(ValueError, match="noise model"):
        dpx.release(np.ones(8), W, "identity", None)
    with pytest.raises(TypeError, match="noise must be"):
        dpx.release(np.ones(8), W, "identity", 1.0)
    with pytest.raises(dpx.UnsupportedWorkloadError):
        dpx.release(np.ones(8), W, Dense(np.eye(8)[:3]), dpx.Laplace(1.0))
    with pytest.raises(ValueError, match="shape"):
        dpx.release(np.ones((2, 4)), W, "identity", dpx.Laplace(1.0))
    W2 = workloads.marginals((4, 4), [1])
    with pytest.raises(ValueError, match="shape"):
        dpx.release(np.ones((2, 8)), W2, "identity", dpx.Laplace(1.0))
    assert dpx.simulate(np.ones(16), W2, "identity", dpx.Laplace(1.0), seed=0).answers.shape == (8,)
    with pytest.raises(ValueError, match="shape"):  # (4, 4) transposed cells would be silently wrong
        dpx.simulate(np.ones((16, 1)), W2, "identity", dpx.Laplace(1.0), seed=0)
    with pytest.raises(TypeError, match="mechanism must be"):
        dpx.release(np.ones(8), W, ["identity"], dpx.Laplace(1.0))
    with pytest.raises(TypeError, match="params must be a dict"):
        dpx.release(np.ones(8), W, "hb", dpx.Laplace(1.0), params="b=2")
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['bogus'\]"):
        dpx.release(np.ones(8), W, "hb", dpx.Laplace(1.0), params={"bogus": 1})
    big = np.zeros(2**20)
    with pytest.raises(dpx.LimitExceededError, match="strategy_rows"):  # 5.5e11 noisy answers
        dpx.release(big, workloads.identity(2**20), workloads.all_range(2**20), dpx.Laplace(1.0))
    with pytest.raises(dpx.LimitExceededError, match="queries"):  # 5.5e11 answers
        dpx.simulate(big, workloads.all_range(2**20), "identity", dpx.Laplace(1.0), seed=0)
    x = np.ones(8)
    x[0] = 1e300  # once gave all-NaN answers; refused above 2**53 (also for weights)
    for counts in (True, False):
        with pytest.raises(ValueError, match=r"2\*\*53"):
            dpx.simulate(x, W, "identity", dpx.Laplace(1.0), seed=0, counts=counts)


def test_multidimensional_release():
    W = workloads.marginals((4, 5, 3), [1, 2])
    x = np.random.default_rng(2).integers(0, 20, size=(4, 5, 3))
    r = dpx.release(x, W, "h2", dpx.Gaussian(1.0, 1e-6, "zcdp"))
    assert isinstance(r.strategy, Kronecker)
    assert r.answers.shape == (W.m,)
    assert r.per_query_std().shape == (W.m,)


@pytest.mark.parametrize("which", ["h2", "wavelet", "greedy_h"])
def test_lsmr_matches_exact_least_squares_on_noisy_answers(which):
    n = 512
    A = strategies.greedy_h(workloads.all_range(n)) if which == "greedy_h" else getattr(strategies, which)(n)
    rng = np.random.default_rng(4)
    y = A @ rng.integers(0, 100, size=n).astype(float) + rng.laplace(0, 5, size=A.m)
    np.testing.assert_allclose(reconstruct(A, y, method="lsmr"), reconstruct(A, y, method="dense"), atol=1e-6)


def test_data_dependent_release_metadata_and_budget():
    x = np.random.default_rng(0).integers(0, 50, size=128)
    W = workloads.random_ranges(128, 100, seed=0)
    ledger = PrivacyLedger(epsilon_budget=1.5)
    r = dpx.release(x, W, "dawa", dpx.Laplace(1.0), ledger=ledger)
    assert r.data_dependent and r.strategy is None and math.isnan(r.analytic_rmse)
    assert [e.mode for e in ledger.entries] == ["release", "release"]  # both DAWA stages
    assert ledger.epsilon == pytest.approx(1.0)
    meta = json.loads(r.to_json())
    assert meta["mechanism"] == "dawa" and meta["data_dependent"] and meta["analytic_rmse"] is None
    assert "info" not in meta and "seed" not in meta  # only the answers leave, with the metadata
    assert meta["ci_low"][0] is None and list(meta["confidence_methods"]) == ["none"]
    assert "partition" in r.info  # the Python object keeps the public by-products
    np.testing.assert_allclose(r.answers, W @ r.x_hat)
    with pytest.raises(ValueError, match="no analytic error"):
        r.per_query_std()
    # the whole release is refused before any stage measures when the budget is short
    with pytest.raises(dpx.BudgetExceededError, match="refused before any noise"):
        dpx.release(x, W, "dawa", dpx.Laplace(1.0), ledger=ledger)
    assert len(ledger) == 2


# ------------------------------------------------------------------ answer_bands
def test_answer_bands_recomputed_by_hand():
    x = np.arange(16, dtype=float)
    W = dpx.workloads.prefix(16)
    noise = dpx.Laplace(2.0)
    b = mechanism.answer_bands(x, W, "hb", noise, trials=7, seed=5, shown=[0, 15])
    # trial t ran with SeedSequence([seed, TRIAL_SEED_TAG]).spawn(trials)[t], outside any ledger
    children = np.random.SeedSequence([5, mechanism.TRIAL_SEED_TAG]).spawn(7)
    runs = np.array([W.matvec(mechanism.run("hb", dpx.PrivateData(x), W, noise,
                                             np.random.default_rng(c)).x_hat) for c in children])
    truth = np.cumsum(x)
    np.testing.assert_allclose(b.trial_rmse, np.sqrt(np.mean((runs - truth) ** 2, axis=1)), rtol=1e-12)
    assert b.empirical_rmse == pytest.approx(np.sqrt(np.mean((runs - truth) ** 2)), rel=1e-12)
    for q, band in ((0.05, b.q05), (0.5, b.q50), (0.95, b.q95)):
        np.testing.assert_allclose(band, np.quantile(runs[:, [0, 15]], q, axis=0), rtol=1e-12)
    assert len(b.ledger) == 7 and (b.trials, b.seed, list(b.shown)) == (7, 5, [0, 15])
    # at ε = 0.1 (the discrete Laplace's variance within 0.1 % of the continuous one) the
    # empirical RMSE is near the analytic one (HDMM Prop. 4).  Tolerance: 20 %; the relative sd
    # of the empirical RMSE over 200 trials here is 0.038 (measured over 30 seeds at 400 trials:
    # 0.027, times √2), so this is a two-sided z of 5.3, a false-failure rate of about 1e-7 per
    # run for a fresh seed (the seed is fixed, so the run is deterministic).  A 2× noise scale
    # (+100 %) or a 2× variance (+41 %) fails.  (It was 10 % on 400 trials: z 3.7, 2e-4.)
    small = dpx.Laplace(0.1)
    many = mechanism.answer_bands(x, W, "hb", small, trials=200, seed=0, shown=[])
    A = dpx.registry.get("hb").strategy(W, small)
    assert many.empirical_rmse == pytest.approx(dpx.error.rmse(W, A, small), rel=0.2)


def test_answer_bands_refuses_bad_input():
    W, x = dpx.workloads.prefix(8), np.ones(8)
    with pytest.raises(ValueError, match="trials"):
        mechanism.answer_bands(x, W, "identity", dpx.Laplace(1.0), 0, 0)
    with pytest.raises(ValueError, match="seed"):
        mechanism.answer_bands(x, W, "identity", dpx.Laplace(1.0), 2, -1)
    with pytest.raises(ValueError, match="shown"):
        mechanism.answer_bands(x, W, "identity", dpx.Laplace(1.0), 2, 0, shown=[8])
    with pytest.raises(ValueError, match="cells"):
        mechanism.answer_bands(np.ones(4), W, "identity", dpx.Laplace(1.0), 2, 0)
