"""Tests of dpexplorer.sums and dpexplorer.sums.thresholds (Wu et al. 2019, Sec. 3; docs/sums.md)."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dpexplorer import datasets
from dpexplorer.core import registry
from dpexplorer.privacy import BudgetExceededError, PrivacyLedger, PrivateData
from dpexplorer.queries.matrix import Diagonal, Identity, Product
from dpexplorer.sums import mechanisms as sums
from dpexplorer.sums import thresholds
from dpexplorer.sums.thresholds import SVTParams

MECHS = sums.MECHANISMS


def _thr(mode, tau=6.5):
    """The run's ``threshold=`` for a mode of the tests: a declared-public τ for "user"."""
    return sums.public_threshold(tau) if mode == "user" else mode


# ------------------------------------------------------------------ fixtures
def _records(seed=0, n_records=300, n=12):
    """Records with a known value each: bucket index per record on n unit-width buckets [j, j+1)."""
    rng = np.random.default_rng(seed)
    buckets = rng.integers(0, n, size=n_records)
    return buckets


@pytest.fixture
def small():
    """12 buckets [j, j+1), upper-edge values 1..12, 300 records, 5 prefix queries."""
    n = 12
    b = _records(n=n)
    x = np.bincount(b, minlength=n).astype(float)
    edges = np.arange(n + 1, dtype=float)
    v = datasets.bucket_values(edges)
    S = sums.prefix_sums(v, cuts=np.array([1, 4, 6, 9, 11]))
    return b, x, v, S


class RecordingData(PrivateData):
    """PrivateData that remembers every matrix it measured (for brute-force sensitivity checks)."""

    def __init__(self, x, ledger=None):
        super().__init__(x, ledger)
        self.measured = []

    def measure(self, A, noise, rng, label="measure"):
        self.measured.append(A)
        return super().measure(A, noise, rng, label=label)


def _brute_l1_sensitivity(M, x):
    """max over add/remove-one-record neighbours of ‖M x' − M x‖₁."""
    base = M.matvec(x)
    worst = 0.0
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = 1.0
        worst = max(worst, np.abs(M.matvec(x + e) - base).sum())
        if x[j] > 0:
            worst = max(worst, np.abs(M.matvec(x - e) - base).sum())
    return worst


# ------------------------------------------------------------------ sensitivities
@pytest.mark.parametrize("mechanism", MECHS)
@pytest.mark.parametrize("mode", ["user", "none", "svt"])
def test_sensitivity_of_every_measurement_matches_brute_force(small, mechanism, mode):
    _, x, v, S = small
    data = RecordingData(x)
    sums.run(mechanism, data, S, 1.0, np.random.default_rng(3), threshold=_thr(mode))
    answer_entries = [e for e in data.ledger.entries if "AboveThreshold" not in e.label]
    assert len(answer_entries) == len(data.measured) >= 1
    for M, entry in zip(data.measured, answer_entries, strict=True):
        assert entry.sensitivity == pytest.approx(_brute_l1_sensitivity(M, x), rel=1e-12)


def test_weighted_vector_sensitivity_is_max_truncated_value(small):
    """Guidance: diag(v_τ)·x has L1 sensitivity max v_τ = τ (a record moves one bucket by v_τj)."""
    _, x, v, S = small
    for tau in (0.5, 3.0, 6.5, 12.0, 100.0):
        D = Product(Identity(v.size), Diagonal(np.minimum(v, tau)))
        assert D.sensitivity(1) == pytest.approx(min(tau, v.max()))
        assert _brute_l1_sensitivity(D, x) == pytest.approx(min(tau, v.max()))


def test_workload_measures_the_per_record_truncated_sums(small):
    """The statistic the Workload mechanism measures is Σ over records of min(value, τ), record by record."""
    b, x, v, S = small
    data = RecordingData(x)
    tau = 6.5
    sums.run("workload", data, S, 1.0, np.random.default_rng(0), threshold=sums.public_threshold(tau))
    stat = data.measured[0].matvec(x)
    by_record = [sum(min(v[j], tau) for j in b if v[j] <= t) for t in S.thresholds]
    np.testing.assert_allclose(stat, by_record)
    # and its sensitivity is max_j v_τj · (#queries covering j) (Table 1, 'Workload')
    cover = np.asarray(S.rows().sum(axis=0)).ravel()
    assert data.ledger.entries[0].sensitivity == pytest.approx((np.minimum(v, tau) * cover).max())


def test_timm_greedy_h_sensitivity_is_tau_as_in_the_paper(small):
    """App. A.3: noise Δ_A·τ with Δ_A = 1 for GreedyH (every column sums to 1)."""
    _, x, v, S = small
    data = PrivateData(x)
    sums.run("timm", data, S, 1.0, np.random.default_rng(0), threshold=sums.public_threshold(6.5))
    assert data.ledger.entries[0].sensitivity == pytest.approx(6.5)
    data = PrivateData(x)
    sums.run("tamm", data, S, 1.0, np.random.default_rng(0), threshold=sums.public_threshold(6.5))
    assert data.ledger.entries[0].sensitivity == pytest.approx(1.0)


def test_svt_query_sensitivity_brute_force():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 20, size=30).astype(float)
    v = np.arange(1, 31, dtype=float)
    for rho in (0.1, 0.5, 0.9, 0.99):
        theta = thresholds.svt_candidates(v, SVTParams(rho=rho, r=1.3))
        q0 = thresholds.svt_queries(x, v, theta, rho)
        worst = 0.0
        for j in range(v.size):
            for d in (1.0, -1.0):
                x2 = x.copy()
                x2[j] += d
                worst = max(worst, np.abs(thresholds.svt_queries(x2, v, theta, rho) - q0).max())
        assert worst == pytest.approx(thresholds.svt_sensitivity(rho))


# ------------------------------------------------------------------ ledger
@pytest.mark.parametrize("mechanism", MECHS)
@pytest.mark.parametrize("mode", ["user", "none", "svt"])
def test_ledger_adds_up_to_epsilon(small, mechanism, mode):
    _, x, v, S = small
    data = PrivateData(x)
    rel = sums.run(mechanism, data, S, 0.7, np.random.default_rng(5), threshold=_thr(mode))
    assert data.ledger.epsilon == pytest.approx(0.7, rel=1e-12)
    assert rel.epsilon == pytest.approx(0.7, rel=1e-12)
    assert all(e.mode == "simulation" for e in data.ledger.entries)
    svt_entries = [e for e in data.ledger.entries if "AboveThreshold" in e.label]
    if mode == "svt":
        alpha = SVTParams().alpha
        assert math.fsum(e.epsilon for e in svt_entries) == pytest.approx(alpha * 0.7)
        assert rel.epsilon_threshold == pytest.approx(alpha * 0.7)
        assert len(svt_entries) == (S.m if mechanism == "sqm" else 1)
    else:
        assert not svt_entries and rel.epsilon_threshold == 0.0
    if mechanism == "sqm":
        answers = [e for e in data.ledger.entries if "AboveThreshold" not in e.label]
        assert len(answers) == S.m
        assert len({round(e.epsilon, 15) for e in answers}) == 1  # ε split evenly


def test_shared_threshold_is_charged_once(small):
    _, x, v, S = small
    data = PrivateData(x, PrivacyLedger(epsilon_budget=1.0))  # exactly enough for threshold + answers
    thr = thresholds.svt_threshold(data, v, 0.1, np.random.default_rng(0))
    rel = sums.run("tamm", data, S, 1.0, np.random.default_rng(1), threshold=thr)
    assert rel.epsilon_answers == pytest.approx(0.9) and rel.epsilon == pytest.approx(1.0)
    assert data.ledger.epsilon == pytest.approx(1.0)
    with pytest.raises(ValueError, match="nothing is left"):
        sums.run("tamm", data, S, 0.1, np.random.default_rng(1), threshold=thr)
    with pytest.raises(ValueError, match="another ledger"):  # found under data.ledger, not this one
        sums.run("tamm", PrivateData(x), S, 1.0, np.random.default_rng(1), threshold=thr)
    with pytest.raises(BudgetExceededError):  # the budget is used up
        sums.run("tamm", data, S, 1.0, np.random.default_rng(1), threshold=thr)


def test_budget_refused_before_anything_is_spent(small):
    _, x, v, S = small
    data = PrivateData(x, PrivacyLedger(epsilon_budget=0.5))
    with pytest.raises(BudgetExceededError):
        sums.run("identity", data, S, 1.0, np.random.default_rng(0))
    assert len(data.ledger) == 0


# ------------------------------------------------------------------ analytic vs empirical
@pytest.mark.parametrize("mechanism", MECHS)
def test_analytic_variance_matches_empirical(small, mechanism):
    """Unbiased for the truncated truth and E[Σ_i (ŷ_i − y_τi)²] = Σ_i var_i, within 5 standard errors.

    Tolerance: 5 standard errors (from the sample's own spread) for the total squared error, each
    of the 5 queries' means and each of their mean squares; with T = 600 trials each is a two-sided
    z of 5, a false-failure rate of at most 11 × 6e-7 ≈ 7e-6 per run for a fresh seed (the seeds
    are fixed, so the run is deterministic).  The standard error of a mean square is about
    sqrt(5/600) ≈ 9 % of it (Laplace), so a 2× noise scale (4× variance) fails.
    """
    _, x, v, S = small
    tau, eps, T = 6.5, 1.0, 600
    target = S.answers(x, tau)
    errs = np.empty((T, S.m))
    for t in range(T):
        rel = sums.run(mechanism, PrivateData(x), S, eps, np.random.default_rng([7, t]),
                       threshold=sums.public_threshold(tau))
        errs[t] = rel.raw_answers - target
    var = rel.variance
    # the run's variance is the discrete sampler's where the measurements are whole numbers
    np.testing.assert_allclose(var, sums.analytic_variance(mechanism, S, tau, eps, counts=True),
                               rtol=1e-12)
    continuous = sums.analytic_variance(mechanism, S, tau, eps)
    assert np.all(var <= continuous * (1 + 1e-12))
    sse = (errs**2).sum(axis=1)
    z = (sse.mean() - var.sum()) / (sse.std(ddof=1) / math.sqrt(T))
    assert abs(z) < 5, (mechanism, sse.mean(), var.sum())
    zq = errs.mean(axis=0) / np.sqrt(var / T)
    assert np.all(np.abs(zq) < 5), zq
    # per query too: the sample variance is within 5 SE of var_i (SE from the sample's 4th moment)
    s2 = errs**2
    zv = (s2.mean(axis=0) - var) / (s2.std(axis=0, ddof=1) / math.sqrt(T))
    assert np.all(np.abs(zv) < 5), zv


def test_variance_formulas_closed_form(small):
    """Identity / Workload / SQM from Table 1 by hand, and TiMM/TaMM reducing to them."""
    _, x, v, S = small
    tau, eps = 6.5, 0.8
    vt = np.minimum(v, tau)
    Wd = S.W.dense()
    np.testing.assert_allclose(sums.analytic_variance("identity", S, tau, eps),
                               2 / eps**2 * (Wd**2) @ vt**2)
    sens = np.max(np.abs(Wd).sum(axis=0) * vt)
    np.testing.assert_allclose(sums.analytic_variance("workload", S, tau, eps), 2 * sens**2 / eps**2)
    per_query = np.max(np.abs(Wd) * vt, axis=1)
    np.testing.assert_allclose(sums.analytic_variance("sqm", S, tau, eps),
                               2 * (S.m * per_query / eps) ** 2)
    # TaMM with A = I is Identity; TiMM with A = I adds Lap(max v_τ / ε) to every weighted count
    np.testing.assert_allclose(sums.analytic_variance("tamm", S, tau, eps, "identity"),
                               sums.analytic_variance("identity", S, tau, eps))
    np.testing.assert_allclose(sums.analytic_variance("timm", S, tau, eps, "identity"),
                               2 * vt.max() ** 2 / eps**2 * (Wd**2).sum(axis=1))
    # TaMM with A = W·diag(v_τ) (full row rank) is the Workload mechanism
    np.testing.assert_allclose(sums.analytic_variance("tamm", S, tau, eps, "workload"),
                               sums.analytic_variance("workload", S, tau, eps), rtol=1e-9)


@pytest.mark.parametrize("strategy", ["greedy_h", "hb", "identity"]
                         + [s for s in ("opt0",) if s in registry.REGISTRY])
def test_timm_tamm_strategy_selectors(small, strategy):
    _, x, v, S = small
    for mech in ("timm", "tamm"):
        data = PrivateData(x)
        rel = sums.run(mech, data, S, 1.0, np.random.default_rng(0), threshold=sums.public_threshold(6.5),
                       strategy=strategy)
        assert rel.strategy_name == strategy and rel.strategy is not None
        assert rel.answers.shape == (S.m,) and np.all(np.isfinite(rel.answers))
        assert np.all(rel.variance > 0)


def test_dense_and_pinv_quadratic_forms_agree(small):
    _, x, v, S = small
    A = sums.select_strategy("greedy_h", S.W)
    fast = sums._diag_quadratic(S.W, A)
    slow = sums._error.per_query_variance(S.W, A, sums.Laplace(math.sqrt(2))) / A.sensitivity(1) ** 2
    np.testing.assert_allclose(fast, slow, rtol=1e-9)


# ------------------------------------------------------------------ truncation bias
def test_truncation_bias_exact_from_records(small):
    b, x, v, S = small
    for tau in (0.5, 2.0, 6.5, 11.0, 12.0, 50.0):
        bias = sums.truncation_bias(S, x, tau)
        by_record = [sum(min(v[j], tau) - v[j] for j in b if v[j] <= t) for t in S.thresholds]
        np.testing.assert_allclose(bias, by_record, atol=1e-9)
        assert np.all(bias <= 0)

def test_sqm_per_query_thresholds_variance_and_truncated_truth(small):
    """SQM with per-query SVT: variance from each measured query's brute-force sensitivity, and the
    truncated truth ``Σ_j W_ij min(v_j, τ_i) x_j`` query by query (Table 1 'SQM', Alg. 1-3)."""
    _, x, v, S = small
    data = RecordingData(x)
    rel = sums.run("sqm", data, S, 50.0, np.random.default_rng(4), threshold="svt",
                   svt=SVTParams(rho=0.6, r=1.5), truth=x)
    assert len(set(rel.taus)) > 1  # the per-query branch, not the common τ
    eps_q = rel.epsilon_answers / S.m
    brute = np.array([_brute_l1_sensitivity(M, x) for M in data.measured])
    np.testing.assert_allclose(rel.variance, 2 * (brute / eps_q) ** 2, rtol=1e-12)
    Wd = S.W.dense()
    by_query = [Wd[i] @ (np.minimum(v, rel.taus[i]) * x) for i in range(S.m)]
    np.testing.assert_allclose(rel.truncated_truth, by_query, rtol=1e-12)
    np.testing.assert_allclose(rel.bias, rel.truncated_truth - S.answers(x))

    assert np.all(sums.truncation_bias(S, x, v.max()) == 0)


def test_release_reports_truth_and_bias(small):
    _, x, v, S = small
    rel = sums.run("identity", PrivateData(x), S, 1.0, np.random.default_rng(0), threshold=sums.public_threshold(4.0), truth=x)
    np.testing.assert_allclose(rel.truth, S.answers(x))
    np.testing.assert_allclose(rel.truncated_truth, S.answers(x, 4.0))
    np.testing.assert_allclose(rel.bias, sums.truncation_bias(S, x, 4.0))
    frame = rel.to_frame()
    assert list(frame.columns[:6]) == ["query", "threshold", "answer", "raw_answer", "tau", "std"]
    np.testing.assert_allclose(rel.relative_error(1.0),
                               np.abs(rel.answers - rel.truth) / np.maximum(rel.truth, 1.0))


# ------------------------------------------------------------------ SVT
def _laplace_cdf(u, b):
    return np.where(u < 0, 0.5 * np.exp(u / b), 1 - 0.5 * np.exp(-u / b))


def _above_threshold_probabilities(q, sens, eps):
    """Exact P(first index = k) and P(none) of AboveThreshold (threshold 0), by quadrature over T̂."""
    bt, bq = 2 * sens / eps, 4 * sens / eps
    s = np.linspace(-60 * bt + min(q.min(), 0), 60 * bt + max(q.max(), 0), 400_001)
    ds = s[1] - s[0]
    dens = np.exp(-np.abs(s) / bt) / (2 * bt)
    fail = _laplace_cdf(s[None, :] - q[:, None], bq)  # P(q_i + ν_i < s)
    before = np.cumprod(np.vstack([np.ones_like(s), fail]), axis=0)
    probs = [np.sum(dens * before[k] * (1 - fail[k])) * ds for k in range(q.size)]
    probs.append(np.sum(dens * before[-1]) * ds)
    return np.array(probs)


def test_svt_index_distribution_matches_exact_probabilities():
    """Known distribution: 200 records, values 1..10; frequencies of SVT's index vs exact quadrature.

    Tolerance: each of the 8 outcomes' frequency within 5 binomial sds plus 1e-3 (the quadrature's
    slack); with T = 4000 runs the two cells that carry the mass (p = 0.984, 0.013) sit at z ≈ 5.5
    and the rare ones need ≥ 8 (p = 1e-4) or ≥ 32 (p = 0.003) hits, so the false-failure rate is
    about 1e-6 per run for a fresh seed (the seeds are fixed, so the run is deterministic).  At
    half the ε (2× noise) the exact probabilities move by 10× this tolerance, so that fails.
    """
    x = np.array([5, 10, 20, 40, 50, 40, 20, 10, 4, 1], dtype=float)
    v = np.arange(1.0, 11.0)
    params = SVTParams(rho=0.8, r=1.5, theta0=1.0)
    eps = 0.5
    theta = thresholds.svt_candidates(v, params)
    q = thresholds.svt_queries(x, v, theta, params.rho)
    p = _above_threshold_probabilities(q, thresholds.svt_sensitivity(params.rho), eps)
    assert p.sum() == pytest.approx(1.0, abs=1e-6)
    T = 4000
    counts = np.zeros(theta.size + 1)
    data = PrivateData(x)
    for t in range(T):
        thr = thresholds.svt_threshold(data, v, eps, np.random.default_rng([1, t]), params)
        counts[theta.size if thr.index is None else thr.index] += 1
    freq = counts / T
    se = np.sqrt(np.maximum(p * (1 - p), 1e-6) / T)
    assert np.all(np.abs(freq - p) < 5 * se + 1e-3), (freq, p)
    assert len(data.ledger) == T and data.ledger.epsilon == pytest.approx(T * eps)


def test_svt_is_epsilon_dp_on_neighbours():
    """P(index | x) ≤ e^ε P(index | x') for add/remove-one-record neighbours (exact probabilities)."""
    x = np.array([5, 10, 20, 40, 50, 40, 20, 10, 4, 1], dtype=float)
    v = np.arange(1.0, 11.0)
    for rho in (0.5, 0.8):
        params = SVTParams(rho=rho, r=1.5, theta0=1.0)
        eps = 0.5
        theta = thresholds.svt_candidates(v, params)
        sens = thresholds.svt_sensitivity(rho)
        p = _above_threshold_probabilities(thresholds.svt_queries(x, v, theta, rho), sens, eps)
        for j in (0, 4, 9):
            for d in (1.0, -1.0):
                x2 = x.copy()
                x2[j] += d
                p2 = _above_threshold_probabilities(thresholds.svt_queries(x2, v, theta, rho), sens, eps)
                assert np.all(p <= math.exp(eps) * p2 * (1 + 1e-6) + 1e-12)
                assert np.all(p2 <= math.exp(eps) * p * (1 + 1e-6) + 1e-12)


def test_svt_finds_the_rho_quantile_with_a_large_budget():
    """Uniform values 1..1000 (10 records each): with ρ = 0.9 and ε large, τ is the first θ_k ≥ 900."""
    v = np.arange(1.0, 1001.0)
    x = np.full(1000, 10.0)
    params = SVTParams(rho=0.9, r=1.05, theta0=1.0)
    theta = thresholds.svt_candidates(v, params)
    expected = theta[np.argmax(theta >= 900)]
    taus = [thresholds.svt_threshold(PrivateData(x), v, 50.0, np.random.default_rng(s), params).tau
            for s in range(20)]
    assert all(t == expected for t in taus)
    # a smaller ρ gives a smaller τ
    low = thresholds.svt_threshold(PrivateData(x), v, 50.0, np.random.default_rng(0),
                                   SVTParams(rho=0.5, r=1.05, theta0=1.0)).tau
    assert 500 / 1.05 <= low <= 500 * 1.05


def test_svt_candidates_and_params():
    v = np.array([0.0, 10.0, 20.0, 400.0])
    theta = thresholds.svt_candidates(v, SVTParams(r=2.0))
    assert theta[0] == 10.0 and theta[-1] >= 400 and theta[-2] < 400
    np.testing.assert_allclose(theta[:-1], 10.0 * 2.0 ** np.arange(theta.size - 1))
    for bad in (dict(alpha=0), dict(alpha=1), dict(rho=1.2), dict(r=1.0), dict(theta0=-1),
                dict(theta0=float("nan")), dict(alpha="x")):
        with pytest.raises(ValueError):
            SVTParams(**bad)
    with pytest.raises(ValueError, match="candidates"):
        thresholds.svt_candidates(v, SVTParams(r=1.0000001))


# ------------------------------------------------------------------ isotonic regression
@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float64, st.integers(1, 60), elements=st.floats(-1e6, 1e6)),
       hnp.arrays(np.float64, 60, elements=st.floats(0, 1e5)))
def test_isotonic_never_moves_answers_farther_from_a_monotone_truth(noisy, steps):
    truth = np.cumsum(steps[: noisy.size])
    fitted = sums.isotonic_fit(noisy)
    assert np.all(np.diff(fitted) >= -1e-9 * max(1.0, np.abs(fitted).max()))
    assert np.linalg.norm(fitted - truth) <= np.linalg.norm(noisy - truth) * (1 + 1e-12) + 1e-6


def test_isotonic_release_is_monotone_and_refused_for_non_prefix(small):
    _, x, v, S = small
    rel = sums.run("workload", PrivateData(x), S, 0.1, np.random.default_rng(0), isotonic=True,
                   threshold="none")
    assert rel.isotonic and np.all(np.diff(rel.answers) >= -1e-9)
    np.testing.assert_allclose(rel.answers, sums.isotonic_fit(rel.raw_answers))
    ranges = sums.SumWorkload(np.array([[0, 1, 1, 0] * 3, [1] * 6 + [0] * 6], dtype=float), v)
    assert not ranges.is_prefix
    with pytest.raises(ValueError, match="prefix"):
        sums.run("identity", PrivateData(x), ranges, 1.0, np.random.default_rng(0), isotonic=True)
    rel = sums.run("identity", PrivateData(x), ranges, 1.0, np.random.default_rng(0))
    assert rel.answers.shape == (2,)


# ------------------------------------------------------------------ workloads
def test_prefix_sums_builders():
    v = np.arange(1.0, 101.0)
    S = sums.prefix_sums(v, m=10)
    assert S.m == 10 and S.is_prefix and S.thresholds[-1] == 100.0
    np.testing.assert_allclose(np.diff(S.thresholds), 10.0)
    full = sums.prefix_sums(v, cuts=np.arange(100))
    x = np.arange(100.0)
    np.testing.assert_allclose(full.answers(x), np.cumsum(v * x))
    geo = sums.prefix_sums(v, m=20, spacing="geometric")
    assert geo.thresholds[0] == 1.0 and geo.thresholds[-1] == 100.0
    at = sums.prefix_sums(v, thresholds=[5.0, 50.5, 100.0])
    np.testing.assert_allclose(at.thresholds, [5.0, 50.0, 100.0])
    with pytest.raises(ValueError, match="exactly one"):
        sums.prefix_sums(v, m=3, thresholds=[1.0])
    with pytest.raises(ValueError, match="below every bucket value"):
        sums.prefix_sums(v, thresholds=[0.5, 3.0])
    with pytest.raises(ValueError, match="same buckets"):
        sums.prefix_sums(v, thresholds=[3.2, 3.7])
    with pytest.raises(ValueError, match="at least"):
        sums.prefix_cuts(v, 101)


def test_bad_input_gives_clear_errors(small):
    _, x, v, S = small
    with pytest.raises(ValueError, match="negative.*shift"):
        sums.SumWorkload(S.W, v - 5)
    with pytest.raises(ValueError, match="NaN"):
        sums.SumWorkload(S.W, np.where(v == 3, np.nan, v))
    with pytest.raises(ValueError, match="value 0"):
        sums.prefix_sums(datasets.bucket_values(np.arange(13.0), "lower"), cuts=np.array([0, 5]))
    for tau in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="τ"):
            sums.public_threshold(tau)
    with pytest.raises(ValueError, match="public_threshold"):
        sums.run("identity", PrivateData(x), S, 1.0, np.random.default_rng(0), threshold="user")
    with pytest.raises(ValueError, match="epsilon"):
        sums.run("identity", PrivateData(x), S, 0.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown sum mechanism"):
        sums.run("mm", PrivateData(x), S, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="threshold must be"):
        sums.run("identity", PrivateData(x), S, 1.0, np.random.default_rng(0), threshold="recursive")
    with pytest.raises(ValueError, match="buckets"):
        sums.run("identity", PrivateData(x[:-1]), S, 1.0, np.random.default_rng(0))
    if "dawa" in registry.REGISTRY:
        with pytest.raises(ValueError, match="data-dependent"):
            sums.run("tamm", PrivateData(x), S, 1.0, np.random.default_rng(0), strategy="dawa")
    with pytest.raises(ValueError, match="γ"):
        sums.relative_error([1.0], [1.0], gamma=0)
    with pytest.raises(ValueError, match="trials"):
        sums.evaluate(x, S, 1.0, trials=0)


# ------------------------------------------------------------------ datasets
def test_numerical_attributes():
    sales = datasets.superstore_sales()
    assert sales.n == 2304 and sales.x.sum() == 9994 and sales.n_records == 9994
    assert not sales.has_negative_values and not sales.private_edges
    np.testing.assert_allclose(sales.bucket_values()[:3], [10, 20, 30])
    np.testing.assert_allclose(sales.bucket_values("midpoint")[:2], [5, 15])
    np.testing.assert_allclose(sales.bucket_values("lower")[:2], [0, 10])
    # vector-form sums with upper-edge values bound the raw sums from above
    S = sums.prefix_sums(sales.bucket_values(), m=10)
    raw = [sales.raw_sum(t) for t in S.thresholds]
    assert np.all(S.answers(sales.x) >= np.array(raw) - 1e-6)
    profit = datasets.superstore_profit()
    assert profit.has_negative_values
    with pytest.raises(ValueError, match="negative"):
        sums.prefix_sums(profit.bucket_values(), m=10)
    shifted = datasets.superstore_profit(shift=6600)
    assert not shifted.has_negative_values and "shifted by +6600" in shifted.description
    assert shifted.x.sum() == 9994
    sums.prefix_sums(shifted.bucket_values(), m=10)
    with pytest.raises(ValueError, match="bucket value kind"):
        sales.bucket_values("mean")


def test_dpbench_income(dpbench_dir):
    inc = datasets.dpbench_income(dpbench_dir)
    assert inc.n == 4096 and inc.x.sum() == inc.n_records and inc.unit == "bin"
    np.testing.assert_allclose(inc.bucket_values()[:2], [1, 2])
    scaled = datasets.dpbench_income(dpbench_dir, bin_width=100.0)
    np.testing.assert_allclose(scaled.bucket_values()[:2], [100, 200])
    with pytest.raises(ValueError, match="bin_width"):
        datasets.dpbench_income(dpbench_dir, bin_width=0)


def test_bucketing_and_csv():
    vals = np.array([1.0, 1.0, 1.0, 1.0, 2.0, 3.0, 50.0])
    with pytest.raises(ValueError, match="empty"):
        datasets.bucket_edges(vals, 6, "quantile")
    q = datasets.numerical_attribute([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 50.0], 2, "quantile")
    assert q.private_edges and "NOT private" in q.description and q.x.sum() == 7
    with pytest.raises(ValueError, match="strictly increasing"):
        datasets.bucket_values([0.0, 1.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="NaN"):
        datasets.numerical_attribute([1.0, np.nan], 2)
    with pytest.raises(ValueError, match="outside"):
        datasets.numerical_attribute([1.0, 20.0], 4, range=(0, 10))
    csv = io.StringIO("a,b\n1,x\n2,y\n,z\n")
    with pytest.raises(ValueError, match="missing"):
        datasets.numerical_from_csv(csv, "a", 2)
    csv = io.StringIO("a,b\n1,x\n2,y\n")
    with pytest.raises(ValueError, match="numeric"):
        datasets.numerical_from_csv(csv, "b", 2)
    attr = datasets.numerical_from_csv(io.StringIO("a\n1\n2\n9\n"), "a", [0, 5, 10])
    np.testing.assert_array_equal(attr.x, [2, 1])
    with pytest.raises(datasets.UnknownDatasetError):
        datasets.load_numerical("nope")


# ------------------------------------------------------------------ evaluation
def test_evaluate_is_tidy_reproducible_and_shares_the_threshold(small):
    _, x, v, S = small
    kw = dict(trials=4, seed=3, gamma=1.0)
    df = sums.evaluate(x, S, 1.0, **kw)
    assert list(df.columns) == sums.EVALUATION_COLUMNS
    assert len(df) == 4 * len(MECHS) * 2 * S.m
    pd.testing.assert_frame_equal(df, sums.evaluate(x, S, 1.0, **kw))
    bqm = df[(df.mechanism != "sqm") & (df.query == 0)]
    assert (bqm.groupby("trial")["tau"].nunique() == 1).all()  # Alg. 9: one τ per trial
    np.testing.assert_allclose(df["rel_error"], np.abs(df["answer"] - df["truth"]) / np.maximum(df["truth"], 1))
    assert np.allclose(df["epsilon"], 1.0)
    iso = df[df.isotonic]
    assert (iso.groupby(["trial", "mechanism"])["answer"].apply(lambda a: np.all(np.diff(a) >= -1e-6))).all()
    summ = sums.summarize(df)
    assert len(summ) == len(MECHS) * 2 * S.m
    assert (summ["answer_q05"] <= summ["answer_q95"]).all()
    sizes = sums.compare_sizes(df, 0.2)
    assert set(sizes["size"]) == {"small", "large"} and (sizes["q05"] <= sizes["q95"]).all()
    own = sums.evaluate(x, S, 1.0, mechanisms=["identity", "tamm"], trials=3, shared_threshold=False)
    assert set(own.mechanism) == {"identity", "tamm"}


def test_trial_taus_and_their_band(small):
    _, x, v, S = small
    df = sums.evaluate(x, S, 1.0, trials=5, seed=2, gamma=1.0)
    taus = sums.trial_taus(df)
    assert taus.shape == (5,)
    for t in range(5):  # every non-SQM mechanism's query of trial t carries that trial's τ
        rows = df[(df.trial == t) & (df.mechanism != "sqm")]
        assert set(rows["tau"]) == {taus[t]}
    lo, med, hi = sums.tau_band(taus)
    srt = np.sort(taus)  # linear quantiles of 5 values: positions 0.2, 2, 3.8
    assert med == srt[2]
    assert lo == pytest.approx(srt[0] + 0.2 * (srt[1] - srt[0]))
    assert hi == pytest.approx(srt[3] + 0.8 * (srt[4] - srt[3]))
    only_sqm = sums.evaluate(x, S, 1.0, mechanisms=["sqm"], trials=2, seed=2, gamma=1.0)
    assert sums.trial_taus(only_sqm).size == 0
    assert all(math.isnan(q) for q in sums.tau_band([]))


def test_tau_curve_tradeoff(small):
    _, x, v, S = small
    curve = sums.tau_curve(S, x, 1.0, taus=[1.0, 3.0, 6.0, 12.0], mechanisms=["identity", "workload", "tamm"])
    for mech, c in curve.groupby("mechanism"):
        assert np.all(np.diff(c["bias2"]) <= 1e-9)        # less truncation, less bias
        assert c["bias2"].iloc[-1] == 0.0                  # τ = max value: no bias
        np.testing.assert_allclose(c["total"], c["bias2"] + c["variance"])
        if mech in ("identity", "workload"):
            assert np.all(np.diff(c["variance"]) >= -1e-9)  # more sensitivity, more noise
    row = curve[(curve.mechanism == "identity") & (curve.tau == 6.0)]
    assert row["variance"].iloc[0] == pytest.approx(sums.analytic_variance("identity", S, 6.0, 1.0).mean())


# ------------------------------------------------------------------ review fixes
def test_svt_candidates_theta0_above_the_largest_value_falls_back_to_no_truncation(small):
    _, x, v, _ = small
    params = SVTParams(theta0=100.0)  # v.max() == 12
    np.testing.assert_array_equal(thresholds.svt_candidates(v, params), [100.0])
    data = PrivateData(x)
    thr = thresholds.svt_threshold(data, v, 0.5, np.random.default_rng(0), params)
    assert thr.tau == float(v.max())  # capped at the largest value: nothing truncated
    assert thr.epsilon == pytest.approx(0.5) and data.ledger.epsilon == pytest.approx(0.5)


@pytest.mark.parametrize("mechanism", MECHS)
@pytest.mark.parametrize("mode", ["user", "none", "svt"])
def test_answer_epsilon_is_the_runs_answer_budget(small, mechanism, mode):
    _, x, v, S = small
    params = SVTParams(alpha=0.25)
    rel = sums.run(mechanism, PrivateData(x), S, 0.8, np.random.default_rng(2), threshold=_thr(mode),
                   svt=params)
    assert rel.epsilon_answers == pytest.approx(sums.answer_epsilon(0.8, mode, params), rel=1e-12)
    assert sums.answer_epsilon(0.8, "svt", params) == pytest.approx(0.6)
    assert sums.answer_epsilon(0.8, "svt") == pytest.approx(0.8 * (1 - SVTParams().alpha))
    assert sums.answer_epsilon(0.8, mode if mode != "svt" else "user") == 0.8


def test_answer_epsilon_bad_input():
    with pytest.raises(ValueError, match="threshold mode"):
        sums.answer_epsilon(1.0, "median")
    for bad in (0.0, -1.0, float("nan"), float("inf"), None, "x"):
        with pytest.raises(ValueError, match="epsilon"):
            sums.answer_epsilon(bad, "svt")


@pytest.mark.parametrize("sensitivity", [float("inf"), float("-inf"), float("nan"), 0.0, -1.0, None, "x"])
def test_above_threshold_refuses_a_bad_sensitivity(small, sensitivity):
    _, x, _, _ = small
    data = PrivateData(x)
    with pytest.raises(ValueError, match="sensitivity"):
        data.above_threshold(lambda z: z, 0.0, sensitivity, 1.0, np.random.default_rng(0), "svt")
    assert data.ledger.epsilon == 0.0  # refused before anything is spent


# ------------------------------------------------------------------ release or simulation
def test_mode_and_seed_as_release_and_simulate(small):
    """A release (OS CSPRNG) says so and has no seed; seed= is a recorded simulation; a bare
    Generator is a simulation whose seed is unknown -- as dpx.release / dpx.simulate."""
    import json

    from dpexplorer.privacy import OS_CSPRNG

    _, x, v, S = small
    led = PrivacyLedger(epsilon_budget=10.0)
    rel = sums.run("tamm", PrivateData(x, led), S, 1.0, OS_CSPRNG)
    assert rel.mode == "release" and rel.seed is None
    meta = rel.metadata()
    assert meta["mode"] == "release" and "seed" not in meta and "OS CSPRNG" in meta["randomness"]
    doc = json.loads(rel.to_json())
    assert doc["mode"] == "release" and "seed" not in doc and len(doc["answer"]) == S.m
    assert rel.to_frame().attrs == {"mode": "release"}
    assert {e.mode for e in led.entries} == {"release"}

    sim = sums.run("tamm", PrivateData(x), S, 1.0, seed=11)
    again = sums.run("tamm", PrivateData(x), S, 1.0, seed=11)
    np.testing.assert_array_equal(sim.answers, again.answers)  # reproducible from the seed
    assert sim.mode == "simulation" and sim.seed == 11
    assert sim.metadata()["seed"] == 11 and json.loads(sim.to_json())["seed"] == 11
    assert sim.to_frame().attrs == {"mode": "simulation", "seed": 11}

    gen = sums.run("tamm", PrivateData(x), S, 1.0, np.random.default_rng(11))
    assert gen.mode == "simulation" and gen.seed is None
    assert "seed unknown" in gen.metadata()["randomness"] and gen.metadata()["seed"] is None

    with pytest.raises(TypeError, match="a release has no seed"):
        sums.run("tamm", PrivateData(x), S, 1.0, OS_CSPRNG, seed=3)
    with pytest.raises(ValueError, match="either a Generator"):
        sums.run("tamm", PrivateData(x), S, 1.0, np.random.default_rng(0), seed=3)
    with pytest.raises(ValueError, match="OS_CSPRNG for a release"):
        sums.run("tamm", PrivateData(x), S, 1.0)
    for bad in (-1, 1.5, "0"):
        with pytest.raises(ValueError, match="seed"):
            sums.run("tamm", PrivateData(x), S, 1.0, seed=bad)
    with pytest.raises(TypeError, match="source of randomness"):
        sums.run("tamm", PrivateData(x), S, 1.0, 42)
    with pytest.raises(ValueError, match="truth= is for simulations"):
        sums.run("tamm", PrivateData(x), S, 1.0, OS_CSPRNG, truth=x)


def test_the_callers_ledger_is_charged(small):
    """A PrivateData charges its own ledger; an array is charged to ledger=; a release on an array
    without a ledger is refused (nothing would show its spend)."""
    from dpexplorer.privacy import OS_CSPRNG

    _, x, v, S = small
    led = PrivacyLedger(epsilon_budget=1.0)
    rel = sums.run("identity", x, S, 0.6, OS_CSPRNG, ledger=led)
    assert rel.mode == "release" and led.epsilon == pytest.approx(0.6)
    with pytest.raises(BudgetExceededError):
        sums.run("identity", x, S, 0.6, OS_CSPRNG, ledger=led)
    assert led.epsilon == pytest.approx(0.6)
    with pytest.raises(ValueError, match="charged to the dataset's ledger"):
        sums.run("identity", x, S, 0.6, OS_CSPRNG)
    with pytest.raises(ValueError, match="data.ledger"):
        sums.run("identity", PrivateData(x, PrivacyLedger()), S, 0.6, OS_CSPRNG, ledger=led)
    data = PrivateData(x, led)
    with pytest.raises(BudgetExceededError):  # ledger=data.ledger is the same ledger
        sums.run("identity", data, S, 0.6, OS_CSPRNG, ledger=led)
    assert sums.run("identity", x, S, 0.5, seed=0).mode == "simulation"  # a fresh throwaway ledger


# ------------------------------------------------------------------ thresholds and their ledgers
def test_a_bare_tau_is_refused_and_a_public_one_costs_nothing(small):
    _, x, v, S = small
    data = PrivateData(x)
    for kw in (dict(threshold=6.5), dict(threshold=np.float64(6.5)), dict(tau=6.5),
               dict(threshold="user", tau=6.5), dict(threshold="user")):
        with pytest.raises(ValueError, match=r"public_threshold\(τ\).*threshold='svt'"):
            sums.run("identity", data, S, 1.0, seed=0, **kw)
    assert len(data.ledger) == 0
    with pytest.raises(ValueError, match="public_threshold"):
        thresholds.Threshold(6.5, "user")
    with pytest.raises(ValueError, match="costs no ε"):
        thresholds.Threshold(6.5, "public", epsilon=0.1)
    thr = sums.public_threshold(6.5)
    same = thresholds.Threshold.public(6.5)
    assert (same.tau, same.method) == (thr.tau, thr.method) == (6.5, "public") and thr.epsilon == 0
    assert "declared public" in thr.label
    rel = sums.run("identity", data, S, 1.0, seed=0, threshold=thr)
    assert rel.tau == 6.5 and rel.epsilon_answers == 1.0 and data.ledger.epsilon == pytest.approx(1.0)


def test_an_svt_threshold_is_accepted_only_on_the_ledger_that_paid_for_it(small):
    import copy
    import pickle

    _, x, v, S = small
    home = PrivateData(x, PrivacyLedger(epsilon_budget=2.0))
    thr = thresholds.svt_threshold(home, v, 0.2, np.random.default_rng(0))
    assert thr.charged and thr.charged_to(home.ledger) and home.ledger.epsilon == pytest.approx(0.2)
    # another dataset's ledger (or none the user sees): refused before anything is recorded
    other = PrivateData(x, PrivacyLedger())
    with pytest.raises(ValueError, match="another ledger"):
        sums.run("tamm", other, S, 1.0, seed=0, threshold=thr)
    assert len(other.ledger) == 0
    # a pickled copy carries no ledger: refused even on the home ledger, never charged twice
    unpickled = pickle.loads(pickle.dumps(thr))
    assert unpickled.charged and not unpickled.charged_to(home.ledger)
    with pytest.raises(ValueError, match="another ledger"):
        sums.run("tamm", home, S, 1.0, seed=0, threshold=unpickled)
    # the home ledger: the threshold is not charged again, the run adds up to ε
    rel = sums.run("tamm", home, S, 1.0, seed=0, threshold=copy.deepcopy(thr))
    assert rel.epsilon_threshold == pytest.approx(0.2) and rel.epsilon_answers == pytest.approx(0.8)
    assert home.ledger.epsilon == pytest.approx(1.0)


def test_an_svt_threshold_never_charged_is_charged_on_use(small):
    _, x, v, S = small
    data = PrivateData(x, PrivacyLedger(epsilon_budget=1.5))
    made = thresholds.Threshold(7.0, "svt", epsilon=0.25)  # by hand: no ledger recorded its ε
    assert not made.charged
    rel = sums.run("workload", data, S, 1.0, seed=1, threshold=made)
    charged = [e for e in data.ledger.entries if "charged now" in e.label]
    assert len(charged) == 1 and charged[0].epsilon == pytest.approx(0.25)
    assert charged[0].rho == pytest.approx(0.25**2 / 2)
    assert rel.epsilon == pytest.approx(1.0) and data.ledger.epsilon == pytest.approx(1.0)
    assert made.charged_to(data.ledger)  # a second run on this ledger pays only for its answers
    sums.run("workload", data, S, 0.5, seed=2, threshold=made)
    assert data.ledger.epsilon == pytest.approx(1.25)
    # on a ledger that cannot hold the whole run, nothing is charged (not even the threshold)
    poor = PrivateData(x, PrivacyLedger(epsilon_budget=0.5))
    with pytest.raises(BudgetExceededError):
        sums.run("workload", poor, S, 1.0, seed=1, threshold=thresholds.Threshold(7.0, "svt", epsilon=0.25))
    assert len(poor.ledger) == 0


class CountingData(PrivateData):
    """PrivateData counting the draws of its noisy primitives (SVT and MEASURE)."""

    def __init__(self, x, ledger=None):
        super().__init__(x, ledger)
        self.draws = 0

    def above_threshold(self, *args, **kwargs):
        self.draws += 1
        return super().above_threshold(*args, **kwargs)

    def measure(self, *args, **kwargs):
        self.draws += 1
        return super().measure(*args, **kwargs)


@pytest.mark.parametrize("mechanism", MECHS)
def test_the_whole_run_is_checked_before_the_svt_draws(small, mechanism):
    """SVT (α·ε) fits the budget but SVT + answers (ε) does not: refused before SVT draws."""
    _, x, v, S = small
    data = CountingData(x, PrivacyLedger(epsilon_budget=0.99))
    with pytest.raises(BudgetExceededError, match="threshold and answers"):
        sums.run(mechanism, data, S, 1.0, seed=0, threshold="svt")
    assert data.draws == 0 and len(data.ledger) == 0
    sums.run(mechanism, data, S, 0.99, seed=0, threshold="svt")  # the same run within the budget
    assert data.draws >= 2 and data.ledger.epsilon == pytest.approx(0.99)


def test_evaluate_takes_a_public_tau_not_a_found_one(small):
    _, x, v, S = small
    a = sums.evaluate(x, S, 1.0, mechanisms=["identity"], trials=2, threshold="user", tau=6.5)
    b = sums.evaluate(x, S, 1.0, mechanisms=["identity"], trials=2, threshold=sums.public_threshold(6.5))
    pd.testing.assert_frame_equal(a, b)
    assert (a["tau"] == 6.5).all()
    thr = thresholds.svt_threshold(PrivateData(x), v, 0.1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="own SVT"):
        sums.evaluate(x, S, 1.0, trials=2, threshold=thr)
    with pytest.raises(ValueError, match="tau is only"):
        sums.evaluate(x, S, 1.0, trials=2, threshold="svt", tau=6.5)


# ------------------------------------------------------------------ nothing private in a release
PLANTED = 1_234_567.0  # a count no noisy answer or public value equals


def _planted():
    """40 buckets of non-integer values (continuous noise: a noisy sum never equals the true one)
    with one bucket holding PLANTED records; prefix queries of at least 20 buckets."""
    x = np.random.default_rng(9).integers(0, 30, size=40).astype(float)
    x[25] = PLANTED
    v = np.arange(1, 41) + 0.37
    S = sums.prefix_sums(v, cuts=np.array([19, 25, 31, 39]))
    return x, v, S


# False-failure rate of the search below: the bucket values are not whole numbers, so every
# measurement gets continuous Laplace noise and a noisy answer equals a true sum with probability
# 0; a 7-byte ASCII or 8-byte float pattern turning up by chance in a few kB of pickled floats has
# probability below 1e-12.
def _secrets(x, S, taus):
    """Byte strings that would betray the data: the planted count and the true (truncated) sums."""
    out = [np.float64(PLANTED).tobytes(), repr(PLANTED).encode(), b"1234567"]
    for t in (None, *sorted(set(taus))):
        out += [np.float64(a).tobytes() for a in S.answers(x, t)]
    return out


@pytest.mark.parametrize("mechanism", MECHS)
@pytest.mark.parametrize("mode", ["svt", "user", "none"])
def test_a_pickled_release_carries_nothing_private(mechanism, mode):
    """Plant a unique count; neither it nor any true sum is in the pickled release (but a
    simulation given truth= holds them, which shows the search finds what is there)."""
    import pickle

    from dpexplorer.privacy import OS_CSPRNG

    x, v, S = _planted()
    thr = _thr(mode, 20.0)
    data = PrivateData(x, PrivacyLedger(epsilon_budget=5.0))
    rel = sums.run(mechanism, data, S, 0.05, OS_CSPRNG, threshold=thr, isotonic=True)
    blob = pickle.dumps(rel)
    assert rel.truth is None and rel.truncated_truth is None and rel.bias is None
    found = [s for s in _secrets(x, S, rel.taus) if s in blob]
    assert not found, found
    for text in (rel.to_json(), rel.to_frame().to_csv(), repr(rel.metadata())):
        assert "1234567" not in text
    sim = sums.run(mechanism, PrivateData(x), S, 0.05, seed=0, threshold=thr, truth=x)
    assert any(s in pickle.dumps(sim) for s in _secrets(x, S, sim.taus))
