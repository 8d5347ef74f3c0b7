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
#: Audits of private mechanisms that assert ``epsilon_lb ≤ claim`` (for the false-alarm budget).
PRIVATE_AUDITS = [(name, i) for name in registry.names(private=True)
                  for i in range(len(aud.cases(name)))] + [("svt", 0)]


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


def test_audit_is_not_vacuous_on_the_laplace_mechanism():
    # identity on one cell is exactly ε-DP: the bound gets close to the claim, never above it
    r = aud.audit("identity", [0], [1], 1.0, runs=20_000, seed=3, confidence=CONFIDENCE)
    assert 0.85 < r.epsilon_lb <= 1.0, r.summary()


def test_given_event_and_event_function():
    ev = aud.Event(">=", 1.0)  # no numerator: both orders, each at 1 − α/2
    r = aud.audit("identity", [0], [1], 1.0, event=ev, runs=5000, seed=1, n_jobs=1)
    assert r.selection_runs == 0 and r.event.numerator == 1 and 0.7 < r.epsilon_lb <= 1.0
    r2 = aud.audit("identity", [0], [1], 1.0, event=lambda est: est.x_hat[0] >= 1, runs=5000,
                   seed=1, n_jobs=1)
    assert r2.k0 == r.k0 and r2.k1 == r.k1  # the same set of outputs


# ------------------------------------------------ every registered mechanism
def _case_ids():
    return [f"{name}-{aud.cases(name)[i].statistic}" for name, i in PRIVATE_AUDITS if name != "svt"]


@pytest.mark.parametrize("name,i", [c for c in PRIVATE_AUDITS if c[0] != "svt"], ids=_case_ids())
def test_registered_mechanism_passes_its_audit(name, i):
    case = aud.cases(name)[i]
    r = case.run(name, 1.0, runs=RUNS, confidence=CONFIDENCE, seed=2024)
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
    r = aud.audit(_half_scale_laplace, [0], [1], 1.0, runs=5000, confidence=CONFIDENCE, seed=5)
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
    r = aud.audit(_svt_index, x0, x1, 4.0, runs=RUNS, confidence=CONFIDENCE, seed=7)
    print(r.summary())
    assert r.ledger_epsilon == pytest.approx(4.0)
    assert r.epsilon_lb <= r.claim, r.summary()
    assert r.epsilon_lb > 0.3  # the change is visible: the audit is not vacuous here


# ---------------------------------------------- DAWA as published (not private)
X0, X1 = (5, 5, 5, 5), (5, 6, 5, 5)


def test_published_all_singletons_probabilities_are_the_issues():
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


def test_simulation_agrees_with_the_exact_probabilities():
    # all singletons ⟺ k ≥ 4; the exact values must lie in the simulated 99.99 % intervals
    r = aud.audit(_published_partition_size, X0, X1, 0.025, event=aud.Event(">=", 4),
                  runs=20_000, confidence=CONFIDENCE, seed=9)
    for (est, lo, hi), x in ((r.p0, X0), (r.p1, X1)):
        exact = dawa.published_all_singletons_probability(x, 0.1, 0.25)
        assert lo <= exact <= hi, (est, lo, hi, exact)


def test_audit_catches_dawa_as_published():
    # ε = 4, ratio 0.25: the partition claims ε₁ = 1; its loss on this pair is ≈ 2.1·ε₁
    r = aud.audit("dawa_as_published", X0, X1, 4.0, statistic="buckets", claim=1.0, runs=4000,
                  confidence=CONFIDENCE, seed=1)
    print(r.summary())
    assert r.violated and r.epsilon_lb > 1.0, r.summary()
    exact = math.log(dawa.published_all_singletons_probability(X1, 4.0)
                     / dawa.published_all_singletons_probability(X0, 4.0))
    assert r.epsilon_lb <= exact + 1e-9  # a lower bound on the loss of the all-singletons event
    # the private default on the same pair and statistic: no violation of ε₁
    ok = aud.audit("dawa", X0, X1, 4.0, statistic="buckets",
                   claim=4.0 * registry.get("dawa").params["ratio"], runs=4000,
                   confidence=CONFIDENCE, seed=1)
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
