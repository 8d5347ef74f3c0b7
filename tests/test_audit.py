"""The privacy auditor (dpexplorer.audit) and the audit of every registered mechanism.

False alarms.  Every audit of a private mechanism below asserts ``epsilon_lb ≤ claim``.
Each bound holds with probability ≥ 1 − α (α = 1 − CONFIDENCE) when the claim is true,
so by the union bound the suite's ``K`` such audits raise a false alarm with probability
at most ``K·α``: with α = 10⁻⁴ and K ≤ 100 that is ≤ 1 % (``test_false_alarm_budget``
counts them).  The runs are seeded, so a given checkout passes or fails deterministically;
the 1 % is over the choice of seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

import dpexplorer as dpx
from dpexplorer import audit as aud
from dpexplorer.adaptive import dawa
from dpexplorer.core import registry
from dpexplorer.privacy import PrivateData
from dpexplorer.sums.thresholds import SVTParams, svt_threshold

CONFIDENCE = 1 - 1e-4
RUNS = 2000  # per data vector in the bound batch (+ 500 to choose the event)
#: Worker processes per audit: one (inline).  pytest-xdist already runs the tests on every core, and
#: a pool per audit only adds forks and pickling (about a fifth more CPU on 2 cores); an audit's
#: result depends on its seed and chunk, not on n_jobs (test_audit_is_reproducible_and_independent_of_workers).
JOBS = 1
#: Audits of private mechanisms that assert ``epsilon_lb ≤ claim`` (for the false-alarm budget).
PRIVATE_AUDITS = [(name, i) for name in registry.names(private=True)
                  for i in range(len(aud.cases(name)))] + [("svt", 0), ("dawa-partition-eps10", 1)]


def test_false_alarm_budget():
    # K audits at α = 1e-4 each: P(any false alarm) ≤ K·α < 1 %
    assert len(PRIVATE_AUDITS) * (1 - CONFIDENCE) < 0.01, len(PRIVATE_AUDITS)


# ------------------------------------------------------------------ statistics
@pytest.mark.parametrize("k,n", [(0, 10), (1, 10), (5, 10), (10, 10), (37, 2000), (1999, 2000)])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 1 - 1e-4])
def test_clopper_pearson_matches_scipy_exact_interval(k, n, confidence):
    lo, hi = aud.clopper_pearson(k, n, confidence)
    ref = scipy.stats.binomtest(k, n).proportion_ci(confidence, method="exact")
    assert float(lo) == pytest.approx(ref.low, abs=1e-12)
    assert float(hi) == pytest.approx(ref.high, abs=1e-12)


def test_clopper_pearson_ends_are_one_sided_bounds():
    # lo solves P(Binom(n, lo) ≥ k) = α/2 and hi solves P(Binom(n, hi) ≤ k) = α/2
    k, n, alpha = 40, 1000, 0.01
    lo, hi = aud.clopper_pearson(k, n, 1 - alpha)
    assert scipy.stats.binom.sf(k - 1, n, float(lo)) == pytest.approx(alpha / 2, rel=1e-6)
    assert scipy.stats.binom.cdf(k, n, float(hi)) == pytest.approx(alpha / 2, rel=1e-6)


def test_epsilon_lower_bound_formula():
    assert float(aud.epsilon_lower_bound(0.5, 0.1)) == pytest.approx(math.log(5))
    assert float(aud.epsilon_lower_bound(0.5, 0.1, delta=0.2)) == pytest.approx(math.log(3))
    assert float(aud.epsilon_lower_bound(0.1, 0.5)) == 0.0  # no evidence: 0, never negative
    assert float(aud.epsilon_lower_bound(0.1, 0.0)) == 0.0  # undefined ratio: no claim either
    assert float(aud.epsilon_lower_bound(0.1, 0.2, delta=0.5)) == 0.0


def test_select_event_finds_the_tail():
    rng = np.random.default_rng(0)
    v0 = rng.laplace(0.0, 1.0, 20_000)
    v1 = rng.laplace(1.0, 1.0, 20_000)
    ev, score = aud.select_event(v0, v1, 0.95)
    # the likelihood ratio of Laplace(1) vs Laplace(0) is e at every s ≥ 1 (and e⁻¹ at s ≤ 0)
    assert (ev.op, ev.numerator) in ((">=", 1), ("<=", 0))
    assert 0.6 < score <= 1.0
    ev2, _ = aud.select_event(-v0, -v1, 0.95)  # mirrored: the other tail
    assert (ev2.op, ev2.numerator) in (("<=", 1), (">=", 0))


def test_event_validation():
    with pytest.raises(ValueError, match="op"):
        aud.Event(">", 1.0)
    with pytest.raises(ValueError, match="threshold"):
        aud.Event(">=", float("nan"))
    with pytest.raises(ValueError, match="numerator"):
        aud.Event(">=", 1.0, numerator=2)
    assert aud.Event("<=", 2).contains([1, 2, 3]).tolist() == [True, True, False]


# ----------------------------------------------------------------- the auditor
def test_audit_input_errors():
    with pytest.raises(ValueError, match="neighbours"):
        aud.audit("identity", [0, 0], [1, 1], 1.0)
    with pytest.raises(ValueError, match="neighbours"):
        aud.audit("identity", [0, 0], [2, 0], 1.0)
    with pytest.raises(ValueError, match="same shape"):
        aud.audit("identity", [0, 0], [1], 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        aud.audit("identity", [0], [1], 0.0)
    with pytest.raises(ValueError, match="delta"):
        aud.audit("identity", [0], [1], 1.0, delta=1.0)
    with pytest.raises(ValueError, match="confidence"):
        aud.audit("identity", [0], [1], 1.0, confidence=1.0)
    with pytest.raises(ValueError, match="runs"):
        aud.audit("identity", [0], [1], 1.0, runs=0)
    with pytest.raises(ValueError, match="statistic"):
        aud.audit("identity", [0], [1], 1.0, statistic="nope")
    with pytest.raises(ValueError, match="claimed"):
        aud.audit("identity", [0], [1], 1.0, claim=-1.0)
    with pytest.raises(KeyError, match="no mechanism"):
        aud.audit("nope", [0], [1], 1.0)
    with pytest.raises(TypeError, match="registered name or a function"):
        aud.audit(3, [0], [1], 1.0)
    with pytest.raises(ValueError, match="counts"):
        aud.audit("identity", [0.5], [1.5], 1.0)
    with pytest.raises(registry.NotApplicableError):
        aud.audit("eigen_design", [0, 0], [1, 0], 1.0)  # an (ε, δ) mechanism under Laplace noise
    with pytest.raises(ValueError, match="bucket"):
        aud.audit("identity", [0, 0], [1, 0], 1.0, statistic="bucket_size", runs=10)


def test_audit_is_reproducible_and_independent_of_workers():
    kw = dict(runs=1000, selection_runs=300, seed=11, chunk=250)
    a = aud.audit("uniform", [0, 0], [1, 0], 1.0, n_jobs=1, **kw)
    b = aud.audit("uniform", [0, 0], [1, 0], 1.0, n_jobs=2, **kw)
    np.testing.assert_array_equal(a.values0, b.values0)
    np.testing.assert_array_equal(a.values1, b.values1)
    assert (a.epsilon_lb, a.event, a.k0, a.k1) == (b.epsilon_lb, b.event, b.k0, b.k1)
    c = aud.audit("uniform", [0, 0], [1, 0], 1.0, n_jobs=1, **{**kw, "seed": 12})
    assert not np.array_equal(a.values0, c.values0)


def test_audit_result_contents_and_progress():
    seen = []
    r = aud.audit("identity", [3], [4], 1.0, runs=800, selection_runs=200, seed=0, n_jobs=1,
                  chunk=100, callback=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (2000, 2000) and len(seen) == 20
    assert r.claim == 1.0 and r.epsilon == 1.0 and r.ledger_epsilon == pytest.approx(1.0)
    assert r.runs == 800 and r.selection_runs == 200 and r.total_runs == 2000
    assert r.p0[1] <= r.p0[0] <= r.p0[2] and r.p1[1] <= r.p1[0] <= r.p1[2]
    assert r.k0 == int(r.event.contains(r.values0).sum())
    h = r.histograms()
    assert int(h["count0"].sum()) == 800 and int(h["count1"].sum()) == 800
    assert "audited ε ≥" in r.summary() and r.to_dict()["runs"] == 800
    # a callback that raises stops the audit
    with pytest.raises(RuntimeError, match="stop"):
        aud.audit("identity", [3], [4], 1.0, runs=800, n_jobs=1, chunk=100,
                  callback=lambda d, t: (_ for _ in ()).throw(RuntimeError("stop")))


@pytest.mark.slow  # tens of seconds on 2 cores: the full suite's
def test_audit_is_not_vacuous_on_the_laplace_mechanism():
    # identity on one cell is exactly ε-DP: the bound gets close to the claim, never above it
    r = aud.audit("identity", [0], [1], 1.0, runs=20_000, seed=3, confidence=CONFIDENCE, n_jobs=JOBS)
    assert 0.85 < r.epsilon_lb <= 1.0, r.summary()


@pytest.mark.slow  # tens of seconds on 2 cores: the full suite's
def test_given_event_and_event_function():
    ev = aud.Event(">=", 1.0)  # no numerator: both orders, each at 1 − α/2
    r = aud.audit("identity", [0], [1], 1.0, event=ev, runs=5000, seed=1, n_jobs=1)
    assert r.selection_runs == 0 and r.event.numerator == 1 and 0.7 < r.epsilon_lb <= 1.0
    r2 = aud.audit("identity", [0], [1], 1.0, event=lambda est: est.x_hat[0] >= 1, runs=5000,
                   seed=1, n_jobs=1)
    assert r2.k0 == r.k0 and r2.k1 == r.k1  # the same set of outputs


# ------------------------------------------------ every registered mechanism
def _case_ids():
    return [f"{name}-{aud.cases(name)[i].statistic}" for name, i in PRIVATE_AUDITS
            if name in registry.REGISTRY]


#: Audited in the quick tier too (a data-independent, a data-dependent and a baseline mechanism,
#: a few seconds each); every other case is marked slow and runs in the full suite.
QUICK_AUDITS = {"identity", "mwem", "uniform"}


@pytest.mark.parametrize("name,i", [
    (n, i) if n in QUICK_AUDITS else pytest.param(n, i, marks=pytest.mark.slow)
    for n, i in PRIVATE_AUDITS if n in registry.REGISTRY], ids=_case_ids())
def test_registered_mechanism_passes_its_audit(name, i):
    case = aud.cases(name)[i]
    r = case.run(name, 1.0, runs=RUNS, confidence=CONFIDENCE, seed=2024, n_jobs=JOBS)
    print(r.summary())
    assert r.epsilon_lb <= r.claim, r.summary()
    assert r.ledger_epsilon == pytest.approx(1.0)  # the kernel recorded the whole run's ε


def test_every_registered_mechanism_has_an_audit_case():
    for name in registry.names():
        assert aud.cases(name), name
    assert "dawa_as_published" in registry.names(private=False)


# ------------------------------------------------------------- a broken variant
def _half_scale_laplace(data, rng):
    """Laplace on one counting query with the sensitivity halved: Laplace(0.5/ε), recorded as ε."""
    return data.measure_function(lambda x: np.array([x.sum()]), 0.5, 1.0, rng,
                                 label="broken: half the Laplace scale")


def test_half_laplace_scale_is_caught():
    r = aud.audit(_half_scale_laplace, [0], [1], 1.0, runs=5000, confidence=CONFIDENCE, seed=5,
                 n_jobs=JOBS)
    assert r.ledger_epsilon == pytest.approx(1.0)  # the kernel believes the claim ...
    assert r.violated and r.epsilon_lb > 1.0, r.summary()  # ... the audit refutes it (true ε = 2)


# --------------------------------------------------------- sum queries: SVT
SVT = SVTParams(alpha=0.5, rho=0.5, r=2.0, theta0=1.0)
VALUES = np.array([1.0, 2.0, 3.0, 4.0])


def _svt_index(data, rng):
    """The SVT threshold choice of the sum queries (ε_SVT = 4), as an index (None: no candidate)."""
    return svt_threshold(data, VALUES, 4.0, rng, SVT).index


def test_sum_query_svt_passes_its_audit():
    # candidates θ = 1, 2, 4; on x0 the first query c₀ − ρN = 2 − 2 sits exactly at the threshold 0
    # (a large ε_SVT keeps the noise, Laplace(2Δ/ε) and Laplace(4Δ/ε) with Δ = ½, near the change)
    x0, x1 = [2, 0, 0, 2], [3, 0, 0, 2]
    r = aud.audit(_svt_index, x0, x1, 4.0, runs=RUNS, confidence=CONFIDENCE, seed=7, n_jobs=JOBS)
    print(r.summary())
    assert r.ledger_epsilon == pytest.approx(4.0)
    assert r.epsilon_lb <= r.claim, r.summary()
    assert r.epsilon_lb > 0.3  # the change is visible: the audit is not vacuous here


# ---------------------------------------------- DAWA as published (not private)
X0, X1 = (5, 5, 5, 5), (5, 6, 5, 5)


def test_published_all_singletons_probabilities_on_the_flat_pair():
    p0 = dawa.published_all_singletons_probability(X0, 0.1, 0.25)
    p1 = dawa.published_all_singletons_probability(X1, 0.1, 0.25)
    assert p0 == pytest.approx(0.014418, abs=1e-6) and p1 == pytest.approx(0.015387, abs=1e-6)
    assert math.log(p1 / p0) / 0.025 == pytest.approx(2.60, abs=0.005)  # > 1: not ε₁-DP


def test_published_all_singletons_probability_by_brute_force():
    # the product formula against a direct integration of one case: n = 2 has one candidate
    # [0, 1] (scale (2 − ½ − ½)/ε₁ = 1/ε₁), all singletons iff dev + c + Z > 2c
    eps, ratio = 1.0, 0.25
    e1, e2 = ratio * eps, (1 - ratio) * eps
    for x in ([3, 3], [3, 4], [0, 9]):
        dev = abs(x[0] - x[1])
        t = 1 / e2 - dev
        z = np.linspace(-200, 200, 2_000_001)
        dens = np.exp(-np.abs(z) * e1) * e1 / 2
        p = float(np.sum(dens[z > t]) * (z[1] - z[0]))
        assert dawa.published_all_singletons_probability(x, eps, ratio) == pytest.approx(p, abs=1e-4)


def _published_partition_size(data, rng, epsilon=0.1, ratio=0.25):
    """The authors' partition stage alone (ε₁ = ratio·ε): its number of buckets."""
    return dawa.published_partition(data, ratio * epsilon, (1 - ratio) * epsilon, rng).k


@pytest.mark.slow  # tens of seconds on 2 cores: the full suite's
def test_simulation_agrees_with_the_exact_probabilities():
    # all singletons ⟺ k ≥ 4; the exact values must lie in the simulated 99.99 % intervals
    r = aud.audit(_published_partition_size, X0, X1, 0.025, event=aud.Event(">=", 4),
                  runs=20_000, confidence=CONFIDENCE, seed=9, n_jobs=JOBS)
    for (est, lo, hi), x in ((r.p0, X0), (r.p1, X1)):
        exact = dawa.published_all_singletons_probability(x, 0.1, 0.25)
        assert lo <= exact <= hi, (est, lo, hi, exact)


@pytest.mark.slow  # tens of seconds on 2 cores: the full suite's
def test_audit_catches_dawa_as_published():
    # ε = 4, ratio 0.25: the partition claims ε₁ = 1; its loss on this pair is ≈ 2.1·ε₁
    r = aud.audit("dawa_as_published", X0, X1, 4.0, statistic="buckets", claim=1.0, runs=4000,
                  confidence=CONFIDENCE, seed=1, n_jobs=JOBS)
    print(r.summary())
    assert r.violated and r.epsilon_lb > 1.0, r.summary()
    exact = math.log(dawa.published_all_singletons_probability(X1, 4.0)
                     / dawa.published_all_singletons_probability(X0, 4.0))
    assert r.epsilon_lb <= exact + 1e-9  # a lower bound on the loss of the all-singletons event
    # the private default on the same pair and statistic: no violation of ε₁
    ok = aud.audit("dawa", X0, X1, 4.0, statistic="buckets",
                   claim=4.0 * registry.get("dawa").params["ratio"], runs=4000,
                   confidence=CONFIDENCE, seed=1, n_jobs=JOBS)
    assert not ok.violated, ok.summary()


def test_dawa_as_published_is_never_released():
    x, W = np.array(X0), dpx.workloads.all_range(4)
    with pytest.raises(ValueError, match="not differentially private"):
        dpx.release(x, W, "dawa_as_published", dpx.Laplace(0.1))
    with pytest.raises(ValueError, match="not differentially private"):
        dpx.mechanism.run("dawa_as_published", PrivateData(x), W, dpx.Laplace(0.1), dpx.OS_CSPRNG)
    s = dpx.simulate(x, W, "dawa_as_published", dpx.Laplace(0.1), seed=0)  # a simulation may run it
    assert s.mode == "simulation" and s.x_hat.shape == (4,)
    assert "NOT PRIVATE" in registry.get("dawa_as_published").label
    assert "dawa_as_published" not in dpx.compare(W, dpx.Laplace(1.0))["mechanism"].tolist()


# ------------------------------------------------- richer events: features, classifiers
def test_fit_logistic_recovers_the_bayes_classifier():
    # two unit-covariance Gaussians: the log-odds are exactly linear, w = μ₁ − μ₀ and
    # b = (‖μ₀‖² − ‖μ₁‖²)/2; with 20,000 runs each the fit's standard error is ≈ 0.01, so a
    # tolerance of 0.06 (6 s.e.) fails with probability < 2e-9 per coordinate, < 1e-8 for the 4
    # (a two-sided z of 6 each, for a fresh seed; the seed is fixed, so the run is deterministic)
    rng = np.random.default_rng(0)
    mu0, mu1 = np.array([0.0, 0.0, 1.0]), np.array([1.0, -0.5, 1.0])
    F0 = rng.normal(mu0, 1.0, (20_000, 3))
    F1 = rng.normal(mu1, 1.0, (20_000, 3))
    w, b = aud.fit_logistic(F0, F1, ridge=0.0)
    np.testing.assert_allclose(w, mu1 - mu0, atol=0.06)
    assert b == pytest.approx((mu0 @ mu0 - mu1 @ mu1) / 2, abs=0.06)
    with pytest.raises(ValueError, match="finite"):
        aud.fit_logistic([[np.inf]], [[0.0]])
    with pytest.raises(ValueError, match="same columns"):
        aud.fit_logistic(np.zeros((3, 2)), np.zeros((3, 1)))


def _rows(stat, feats):
    return np.column_stack([stat, feats])


def test_select_feature_event_finds_a_boundary_indicator():
    # statistic uninformative; feature 2 is 1 with probability 0.1 under x0 and 0.5 under x1
    # (log-ratio ln 5 ≈ 1.61); the others are noise.  4,000 runs: the coordinate's first-batch
    # bound at 95 % is ≈ 1.4 while any noise feature's is ≈ 0 (its plug-in log-ratio has s.e. 0.07)
    rng = np.random.default_rng(1)
    N = 4000
    f0 = (rng.random((N, 4)) < [0.3, 0.3, 0.1, 0.3]).astype(float)
    f1 = (rng.random((N, 4)) < [0.3, 0.3, 0.5, 0.3]).astype(float)
    s0, s1 = rng.normal(size=N), rng.normal(size=N)
    ev, score, kinds = aud.select_feature_event(_rows(s0, f0), _rows(s1, f1), 0.95,
                                                features="boundaries")
    assert score > 1.2 and kinds["statistic"] < 0.3
    assert ev.score is not None and ev.numerator == 1
    # on a fresh batch the event keeps its log-ratio: every event built from feature 2 (alone or
    # with the independent noise features) has ratio 5 (ln 5 = 1.61); the plug-in estimate on
    # 4,000 runs has s.e. ≤ 0.1, so > 1.2 fails with probability < 1e-4
    g0 = (rng.random((N, 4)) < [0.3, 0.3, 0.1, 0.3]).astype(float)
    g1 = (rng.random((N, 4)) < [0.3, 0.3, 0.5, 0.3]).astype(float)
    p0 = ev.contains(ev.values(_rows(rng.normal(size=N), g0))).mean()
    p1 = ev.contains(ev.values(_rows(rng.normal(size=N), g1))).mean()
    assert math.log(p1 / p0) > 1.2, (p0, p1, ev.label)
    assert set(kinds) == {"statistic", "coordinate", "logistic", "atoms"}


def test_score_kinds_and_labels():
    F = np.array([[0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
    assert aud.Score("coordinate", "f", index=1)(F).tolist() == [1.0, 1.0, 0.0]
    assert aud.Score("logistic", "f", weights=np.array([1.0, -1.0]), intercept=0.5)(F).tolist() == \
        [-0.5, 0.5, 2.5]
    atoms = aud.Score("atoms", "f", atoms=np.array([[0.0, 1.0]]), atom_scores=np.array([3.0]))
    assert atoms(F).tolist() == [3.0, 0.0, 0.0]  # unseen vectors score 0
    ev = aud.Event(">=", 1.0, 1, aud.Score("coordinate", "boundaries", index=0))
    assert ev.label == "boundaries[0] ≥ 1"
    assert ev.values(np.array([[9.0, 0.0], [9.0, 1.0]])).tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="kind"):
        aud.Score("nope", "f")
    with pytest.raises(ValueError, match="score"):
        aud.Event(">=", 1.0, score="nope")


def test_feature_errors():
    with pytest.raises(ValueError, match="unknown features"):
        aud.audit("identity", [0], [1], 1.0, features="nope")
    with pytest.raises(ValueError, match="partition"):
        aud.audit("identity", [0, 0], [1, 0], 1.0, features="boundaries", runs=10)
    ev = aud.Event(">=", 1.0, 1, aud.Score("coordinate", "estimate", index=0))
    with pytest.raises(ValueError, match="features"):
        aud.audit("identity", [0], [1], 1.0, event=ev)
    with pytest.raises(ValueError, match="factor"):
        aud.Weakened("identity", dpx.workloads.all_range(2), 1.0, factor=1.0)


def test_boundaries_features_read_the_partition():
    case = aud.cases("dawa")[1]
    stat = aud._Statistic("buckets", np.zeros(8), 1, None, "boundaries")
    from dpexplorer.adaptive.partition import Partition

    out = registry.Estimate(np.zeros(8), {"partition": Partition(np.array([0, 1, 2, 8])), "buckets": 3})
    assert stat.row(out).tolist() == [3.0, 1, 1, 0, 0, 0, 0, 0]  # buckets start at 1 and 2
    assert case.features == "boundaries" and case.statistic == "buckets" and len(case.x0) == 8


def test_the_bound_batch_does_not_depend_on_the_selection():
    # the second batch is seeded apart from the first: auditing with the chosen event given
    # (no first batch at all) counts exactly the same runs inside it
    kw = dict(runs=600, seed=4, n_jobs=1, progress=False, features="all", chunk=300)
    case = aud.cases("uniform")[0]
    r = case.run("uniform", 1.0, selection_runs=300, **kw)
    g = case.run("uniform", 1.0, event=r.event, **kw)
    assert g.selection_runs == 0 and (g.k0, g.k1) == (r.k0, r.k1)
    np.testing.assert_array_equal(g.values0, r.values0)


def test_weakened_noise_models():
    W = dpx.workloads.all_range(4)
    assert aud.Weakened("identity", W, 1.0, factor=2.0).noise == dpx.Laplace(2.0)
    g = aud.Weakened("eigen_design", W, 1.0, aud.CASE_DELTA, factor=2.0).noise
    full = dpx.Gaussian(1.0, aud.CASE_DELTA).sigma_per_unit
    assert g.sigma_per_unit == pytest.approx(full / 2, rel=1e-9)


# ------------------------------------------ power: planted too-little-noise variants
# Each test below plants a broken variant and expects ``violated``.  A miss is a false failure;
# the runs are seeded (a checkout passes or fails deterministically), and the rate quoted is
# over the choice of seed: P(miss) ≈ Φ(−(L − c − slack)/se), with L the variant's plug-in loss on
# the chosen event (measured here), c the claim, se the standard error of the log-ratio at these
# runs and slack the Clopper–Pearson margin (≈ 2.2·se at the default 95 %, ≈ 3.9·se at α = 1e-4).
# The data-dependent ones use the auditor's default confidence (95 %): a planted bug has no
# false alarm to guard against, and the correct mechanisms' losses on the same cases are far
# below their claims (their bound exceeds the claim with probability far below 5 %).
DATA_INDEPENDENT = registry.names(data_dependent=False, private=True)
GAUSSIAN_ONLY = {n for n in DATA_INDEPENDENT if registry.get(n).audit_spec().noise == "gaussian"}


#: More runs where the bound needs them.  The events threshold the privacy loss of the noisy
#: strategy answers y (statistic "loss"); with discrete Laplace noise it is a sum of ±1/b terms,
#: one per strategy row over the changed cell, so its upper atoms shrink with the number of such
#: rows L: L = 6 (workload: all ranges over 4 cells, a middle cell) needs 4,000 runs, L = 4
#: (h2, wavelet over 8 cells) and fourier (continuous noise) 2,000.  Gaussian mechanisms: see the test.
DI_RUNS = {"workload": 4000, "h2": 2000, "wavelet": 2000, "fourier": 2000,
           "eigen_design": 4000, "residual_planner": 4000}


@pytest.mark.slow
@pytest.mark.parametrize("name", DATA_INDEPENDENT)
def test_halved_noise_is_caught_on_every_data_independent_mechanism(name):
    # The events threshold the privacy loss of y (statistic "loss").  Laplace mechanisms:
    # Laplace(2ε) claimed as ε at the default 95 %.  Where the changed cell is in one strategy row
    # (identity, hb's and the OPT strategies' cases) the event {loss = 2} has ratio e² and the
    # bound on 1,000 runs is ≈ 1.8 (se ≈ 0.1: P(miss) < 1e-6); opt_m 1.66, datacube ≈ 1.8 on
    # 1,000.  With L rows over the cell and discrete noise of scale b = L/(2ε), the atom {all L
    # terms +1/b} has P₁ = (1/(1+q))^L, P₀ = (q/(1+q))^L, q = e^(−1/b): workload (L = 6) P₁ =
    # 0.039, P₀ = 0.0053, bound 1.24 on 4,000 runs (plug-in 2, se ≈ 0.15 for the atom and 0.08
    # for {≥ 5 terms} (plug-in 1.43): P(miss) ≈ 1e-3); h2, wavelet (L = 4) P₁ = 0.15, P₀ = 0.020,
    # bounds ≈ 1.77 on 2,000 runs (se ≈ 0.17: P(miss) ≈ 1e-4); fourier 1.75 on 2,000.
    # Gaussian mechanisms (audited at δ = 1e-6): σ/4 instead of σ/2 -- at δ = 1e-6 a halved σ
    # shows a loss above ε only on events of probability ≈ 1e-3 (the loss statistic is already
    # the exact likelihood ratio there: ⟨A(x₁ − x₀), y⟩ up to a constant), which needs ~10⁵
    # runs; σ/4 gives bounds 1.9-2.0 on 4,000 runs at 95 % (P(miss) < 1e-4).  The Gaussian
    # mechanisms are those whose registry entry audits them under Gaussian noise (ResidualPlanner,
    # Eigen-Design, the continual-counting factorisations).
    factor = 4.0 if name in GAUSSIAN_ONLY else 2.0
    runs = DI_RUNS.get(name, 4000 if name in GAUSSIAN_ONLY else 1000)
    case = aud.cases(name)[0]
    r = case.run_weakened(name, 1.0, factor, runs=runs, selection_runs=runs // 2, seed=31, n_jobs=1,
                          progress=False)
    print(r.summary())
    assert r.violated and r.epsilon_lb > r.claim, r.summary()


#: (mechanism, case): a data-dependent mechanism's whole output claimed at ε, run at 2ε.
DATA_DEPENDENT_CASES = [(n, 0) for n in registry.names(data_dependent=True, private=True)] + [("efpa", 1)]
#: Cases where a 2× variant is NOT caught in the time a test has, and why.
NOT_CAUGHT_YET = {
    # the choice of k alone (claim ε₁ = share·ε): on the flat 4-cell pair the 2× variant's choice
    # of k moves little (P(k ≥ 2) 0.44 vs 0.48 on 1,500 runs): no event on k refutes ε₁ = 0.2
    ("efpa", 1): "the 2× variant's choice of k is not separated on the flat pair (claim ε₁ = 0.2)",
}


@pytest.mark.slow
@pytest.mark.parametrize("name,i", [
    pytest.param(n, i, marks=pytest.mark.xfail(strict=True, reason=NOT_CAUGHT_YET[(n, i)]))
    if (n, i) in NOT_CAUGHT_YET else (n, i) for n, i in DATA_DEPENDENT_CASES],
    ids=[f"{n}-{i}" for n, i in DATA_DEPENDENT_CASES])
def test_twice_too_little_noise_is_caught_on_data_dependent_mechanisms(name, i):
    # whole output, every noise scale halved (Laplace at 2ε, exponential mechanism at 2ε).
    # DAWA, Partition+Laplace: plug-in loss ≈ 1.96 on the projection, bound ≈ 1.49 on 1,500 runs
    # (se ≈ 0.12: P(miss) < 1e-4).  Uniform (fast): 4,000 runs, where a large event {s ≤ 0}
    # wins with plug-in ≈ 1.9 (se ≈ 0.06: P(miss) < 1e-6).  Partition+Uniform/Geometric: the
    # logistic score on the estimate wins, plug-in ≈ 1.31-1.40, bound ≈ 1.21-1.29 on 3,000 runs
    # (+1,500 to choose; se ≈ 0.05: P(miss) < 1 %, the selection's own variation included; on
    # 1,500 runs Geometric's bound was 0.68).  MWEM (one round, public total, the case's pair):
    # the logistic score on the transcript (the measurement's loss and the chosen query) wins,
    # plug-in ≈ 2.2 (P0 ≈ 0.28, P1 ≈ 0.033), bound ≈ 1.8 on 1,500-2,000 runs (se ≈ 0.15:
    # P(miss) < 1e-6); the correct MWEM's bound on the same case is ≈ 0.69.  EFPA (9/10 of ε on
    # the coefficients, the case's spike): the logistic score on the transcript, plug-in ≈ 1.76
    # (P0 ≈ 0.047, P1 ≈ 0.28), bound 1.45 on 1,500 runs (se ≈ 0.13: P(miss) ≈ 1e-3); the correct
    # EFPA's bound there is 0.59 (4,000 runs, confidence 0.9999).
    runs = {"partition_uniform": 3000, "partition_geometric": 3000, "uniform": 4000}.get(name, 1500)
    case = aud.cases(name)[i]
    r = case.run_weakened(name, 1.0, 2.0, runs=runs, selection_runs=runs // 2, seed=2024, n_jobs=1,
                          progress=False)
    print(r.summary())
    assert r.violated, r.summary()


@pytest.fixture
def quarter_partition_noise(monkeypatch):
    """DAWA's partition noise at a quarter of the Remark's scale (Li et al. 2014, Thm 2) -- a
    planted bug, inline only (``n_jobs=1``: worker processes would not see the patch)."""
    scales = dawa.noise_scales
    monkeypatch.setattr(dawa, "noise_scales", lambda *a, **k: scales(*a, **k) / 4)


PARTITION_RUNS = dict(runs=6000, selection_runs=3000, seed=2024, n_jobs=1, progress=False)


@pytest.mark.slow
def test_dawa_partition_with_a_quarter_of_its_noise_is_caught(quarter_partition_noise):
    # ε = 10, ratio 0.1: the partition claims ε₁ = 1 (measured: the number of buckets
    # alone gave 0.944-0.96 < 1 on this variant).  Partition+Laplace: the same partition stage as
    # DAWA (test below) with the fastest stage 2.  The event is chosen on the 7 boundary
    # indicators; plug-in loss ≈ 1.4, se ≈ 0.08 and slack ≈ 0.17 on 6,000 runs: bound ≈ 1.2,
    # P(miss) ≈ 1 %.
    case = aud.cases("partition_laplace")[1]
    r = case.run("partition_laplace", 10.0, **PARTITION_RUNS)
    print(r.summary())
    assert r.claim == pytest.approx(1.0) and r.violated, r.summary()
    assert r.event.score is not None  # a boundary event, not the number of buckets


@pytest.mark.slow
def test_correct_dawa_partition_is_not_flagged_at_the_same_settings():
    # the correct scale on the same case, ε and runs: plug-in loss ≈ 0.35 ≪ 1 = claim, so a bound
    # above the claim has probability far below the 5 % of a tight claim (seeded)
    case = aud.cases("partition_laplace")[1]
    r = case.run("partition_laplace", 10.0, **PARTITION_RUNS)
    print(r.summary())
    assert r.epsilon_lb <= r.claim, r.summary()


@pytest.mark.parametrize("name", [n for n in registry.names(data_dependent=True, private=True)
                                  if registry.get(n).audit_spec().case == "dawa" and n != "partition_laplace"])
def test_the_dawa_family_shares_the_partition_stage(name):
    # the partition test above runs Partition+Laplace: every DAWA variant draws its partition
    # first, from the same stream, so with one Generator per run (chunk=1; stage 2 consumes the
    # stream differently) its partitions are identical run for run
    case = aud.cases(name)[1]
    kw = dict(event=aud.Event(">=", 4.0), runs=40, seed=5, n_jobs=1, progress=False, chunk=1)
    a = case.run(name, 10.0, **kw)
    b = aud.cases("partition_laplace")[1].run("partition_laplace", 10.0, **kw)
    np.testing.assert_array_equal(a.values0, b.values0)
    np.testing.assert_array_equal(a.values1, b.values1)
    assert np.unique(a.values0).size > 1  # the partition varies: the comparison is not vacuous


# ------------------------------------------------ the privacy loss of the transcript
def test_loss_statistic_is_the_log_likelihood_ratio():
    # one Laplace and one Gaussian matrix measurement and a Laplace measurement of a function:
    # the statistic is the sum of the three log-density ratios ln p(· | x₁) − ln p(· | x₀)
    x0, x1 = np.array([2.0, 0.0, 1.0]), np.array([2.0, 1.0, 1.0])
    A = dpx.workloads.all_range(3)
    lap, gau = dpx.Laplace(0.5), dpx.Gaussian(1.0, 1e-6)
    b, sigma = lap.scale(A.sensitivity(1)), gau.scale(A.sensitivity(2))
    y1 = np.array([1.5, -0.2, 3.0, 0.7, 4.1, 2.2])
    y2 = np.array([0.3, 2.2, 1.0, -1.7, 5.0, 0.1])
    v = np.array([2.5, -1.0])

    def f(x):
        return np.array([x.sum(), x[1] - x[0]])

    measured = (("measure", A, lap, y1), ("measure", A, gau, y2), ("function", f, 0.8, v),
                ("choice", lambda x: np.zeros(4), 2))
    stat = aud._Statistic("loss", x1 - x0, 1, None, "transcript", x0)
    L = scipy.stats.laplace.logpdf
    N = scipy.stats.norm.logpdf
    Ad = A.dense()
    expected = (np.sum(L(y1, Ad @ x1, b) - L(y1, Ad @ x0, b))
                + np.sum(N(y2, Ad @ x1, sigma) - N(y2, Ad @ x0, sigma))
                + np.sum(L(v, f(x1), 0.8) - L(v, f(x0), 0.8)))
    row = stat.row(None, measured)
    assert row[0] == pytest.approx(expected, abs=1e-8)
    assert row[1:].tolist() == [expected.round(9), 0.0, 0.0, 1.0, 0.0]  # the loss, one-hot choice
    with pytest.raises(ValueError, match="measures"):
        stat.loss((("choice", lambda x: np.zeros(4), 2),))


def _choice_only(data, rng):
    """A run with a noisy choice and no measurement (the loss statistic does not apply)."""
    return data.noisy_max(lambda x: np.asarray(x, dtype=float), 1.0, 1.0, rng, label="choice")


def test_loss_statistic_needs_a_measurement_and_the_tap_changes_nothing():
    with pytest.raises(ValueError, match="measures"):
        aud.audit(_choice_only, [0, 0], [1, 0], 1.0, statistic="loss", runs=10, n_jobs=1)
    # the tapped data draws exactly what the plain data draws, and records what it returned
    W = dpx.workloads.all_range(4)
    plain = dpx.mechanism.run("h2", PrivateData([1, 0, 2, 0]), W, dpx.Laplace(1.0),
                              np.random.default_rng(3))
    tapped = aud._Tapped([1, 0, 2, 0])
    out = dpx.mechanism.run("h2", tapped, W, dpx.Laplace(1.0), np.random.default_rng(3))
    np.testing.assert_array_equal(plain.x_hat, out.x_hat)
    (kind, A, noise, y), = tapped.measured
    assert kind == "measure" and noise == dpx.Laplace(1.0) and y.shape == (A.m,)
    assert tapped.ledger.epsilon == pytest.approx(1.0)


def test_data_independent_cases_threshold_the_loss():
    for name in DATA_INDEPENDENT:
        assert aud.cases(name)[0].statistic == "loss", name
    mw = aud.cases("mwem")[0]
    assert (mw.statistic, mw.features, mw.params["T"]) == ("loss", "transcript", 1)
