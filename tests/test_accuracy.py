"""Tests of dpexplorer.accuracy: the smallest ε for an error target, and the plain words.

The reference for every analytic ε is a brute-force bisection written here on the
forward error functions the rest of the engine uses (``dpx.rmse``,
``dpx.per_query_rmse``, ``mechanism.confidence_half_widths``), independent of the
closed forms under test.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer import accuracy
from dpexplorer.mechanism import confidence_half_widths
from dpexplorer.privacy import noise_sampler

W32 = dpx.workloads.all_range(32)
P16 = dpx.workloads.prefix(16)
I16 = dpx.workloads.identity(16)


def _strategy(W, name, norm=1):
    noise = dpx.Laplace(1.0) if norm == 1 else dpx.Gaussian(1.0, 1e-6)
    return dpx.registry.get(name).strategy(W, noise)


def _noise(eps, delta=None, calibration=None):
    return dpx.Laplace(eps) if delta is None else dpx.Gaussian(eps, delta, calibration)


def _forward(W, A, metric, eps, delta=None, calibration=None, counts=True, level=0.95, share=0.95):
    """The metric at ε from the engine's forward functions (no accuracy.py code)."""
    noise = _noise(eps, delta, calibration)
    if metric == "rmse":
        return dpx.rmse(W, A, noise)
    if metric == "max":
        return float(np.max(dpx.per_query_rmse(W, A, noise)))
    h, _ = confidence_half_widths(W, A, noise, noise_sampler(A, noise, counts), level)
    return float(np.quantile(h, share, method="inverted_cdf"))


def _brute(f, target, lo=1e-4, hi=1e4, rtol=1e-11):
    """Smallest ε with f(ε) ≤ target by plain bisection on log ε (f non-increasing)."""
    assert f(hi) <= target < f(lo)
    while hi > lo * (1 + rtol):
        mid = math.sqrt(lo * hi)
        if f(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


# ------------------------------------------------------------------ brute force
CASES = [(W32, "identity"), (W32, "hb"), (W32, "h2"), (W32, "greedy_h"), (P16, "identity"),
         (P16, "wavelet"), (I16, "identity"), (I16, "hb")]


@pytest.mark.parametrize("W,name", CASES, ids=[f"{w.name}-{n}" for w, n in CASES])
@pytest.mark.parametrize("metric,counts", [("rmse", True), ("max", True), ("ci95", True),
                                           ("ci95", False)])   # counts changes the interval rules
def test_laplace_matches_brute_force_bisection(W, name, metric, counts):
    A = _strategy(W, name)
    target = 0.7 * _forward(W, A, metric, 1.0, counts=counts)   # needs ε somewhat above 1
    res = dpx.epsilon_for(W, name, target, metric, counts=counts)
    ref = _brute(lambda e: _forward(W, A, metric, e, counts=counts), target)
    assert res.epsilon == pytest.approx(ref, rel=1e-9)
    assert res.error <= target
    assert res.exact and res.kind == "analytic" and res.delta == 0.0
    assert res.rho == pytest.approx(res.epsilon**2 / 2, rel=1e-12)
    assert isinstance(res.noise, dpx.Laplace) and res.noise.epsilon == res.epsilon


@pytest.mark.parametrize("calibration", ["zcdp", "analytic", "eigen_design", "classical"])
@pytest.mark.parametrize("metric", ["rmse", "max", "ci95"])
@pytest.mark.parametrize("name", ["identity", "hb", "greedy_h"])
def test_gaussian_matches_brute_force_bisection(calibration, metric, name):
    delta = 1e-6
    A = _strategy(W32, name, norm=2)
    lo_eps = 0.3 if calibration == "classical" else 1.0         # classical holds only for ε < 1
    target = 0.8 * _forward(W32, A, metric, lo_eps, delta, calibration)
    res = dpx.epsilon_for(W32, name, target, metric, delta=delta, calibration=calibration)
    hi = 0.999 if calibration == "classical" else 1e4
    ref = _brute(lambda e: _forward(W32, A, metric, e, delta, calibration), target, lo=1e-3, hi=hi)
    assert res.epsilon == pytest.approx(ref, rel=1e-9)
    assert res.error <= target and res.error == pytest.approx(target, rel=1e-9)
    assert res.noise == dpx.Gaussian(res.epsilon, delta, calibration)
    assert res.rho == pytest.approx(res.noise.rho_per_unit, rel=1e-9)


def test_zcdp_without_delta_gives_rho():
    A = _strategy(W32, "hb", norm=2)
    unit = dpx.rmse(W32, A, dpx.Gaussian(1.0, 1e-6, "zcdp")) / dpx.Gaussian(1.0, 1e-6, "zcdp").sigma_per_unit
    res = dpx.epsilon_for(W32, "hb", 5.0, noise="gaussian")
    # ρ = Δ₂²/(2σ²) with σ = c·Δ₂ and c = target/unit (Bun & Steinke 2016, Prop. 1.6)
    assert res.rho == pytest.approx(unit**2 / (2 * 25.0), rel=1e-12)
    assert math.isnan(res.epsilon) and res.noise is None and math.isnan(res.delta)
    assert res.error == pytest.approx(5.0, rel=1e-12)
    assert "ρ" in str(res)
    # with δ, the zCDP result is the conversion of the same ρ
    with_delta = dpx.epsilon_for(W32, "hb", 5.0, delta=1e-6)
    assert with_delta.rho == pytest.approx(res.rho, rel=1e-9)
    assert with_delta.epsilon == pytest.approx(dpx.accounting.epsilon_from_rho(res.rho, 1e-6), rel=1e-9)


def test_classical_calibration_out_of_range_says_so():
    res = dpx.epsilon_for(W32, "hb", 0.5, delta=1e-6, calibration="classical")
    assert math.isnan(res.epsilon) and "ε < 1" in res.note


def test_hdmm_table_value_round_trips():
    # HDMM Table 4: HB on All Range, n = 256, Laplace ε = 1 gives RMSE 8.90 (see README);
    # asking for exactly that RMSE gives back ε = 1
    W = dpx.workloads.all_range(256)
    r1 = dpx.compare(W, dpx.Laplace(1.0), mechanisms=["hb"])["rmse"].iloc[0]
    assert round(r1, 2) == 8.90
    assert dpx.epsilon_for(W, "hb", r1).epsilon == pytest.approx(1.0, rel=1e-12)


def test_a_strategy_matrix_works_like_its_name():
    A = _strategy(W32, "h2")
    by_matrix = dpx.epsilon_for(W32, A, 3.0)
    by_name = dpx.epsilon_for(W32, "h2", 3.0)
    assert by_matrix.epsilon == pytest.approx(by_name.epsilon, rel=1e-12)


def test_session_noise_model_sets_the_family():
    g = dpx.Gaussian(0.3, 1e-5, "analytic")
    res = dpx.epsilon_for(W32, "identity", 4.0, "max", noise=g)
    assert res.noise.delta == 1e-5 and res.noise.calibration == "analytic"
    with pytest.raises(ValueError, match="not both"):
        dpx.epsilon_for(W32, "identity", 4.0, noise=g, delta=1e-6)


# ------------------------------------------------------------ discrete intervals
@settings(max_examples=40, deadline=None)
@given(eps=st.floats(0.01, 30.0), which=st.sampled_from([(P16, "identity"), (I16, "identity"),
                                                         (I16, "hb"), (W32, "hb")]))
def test_discrete_laplace_intervals_equal_the_release_rule(eps, which):
    W, name = which
    A = _strategy(W, name)
    prof = accuracy._DiscreteLaplaceIntervals(W, A, 0.95, 0.95)
    h, _ = confidence_half_widths(W, A, dpx.Laplace(eps), "discrete", 0.95)
    np.testing.assert_allclose(prof.half_widths(eps), h, rtol=1e-12, atol=1e-12)


def test_discrete_laplace_single_answers_give_a_step():
    # Identity on Identity: each answer is one discrete Laplace variable, half-width k(b) whole;
    # ε for ±3 is where k drops to 3: 2q^4/(1+q) = 0.05 with q = e^{-ε} (CKS 2020 tail)
    res = dpx.epsilon_for(I16, "identity", 3.0, "ci95")
    q = math.exp(-res.epsilon)
    assert 2 * q**4 / (1 + q) == pytest.approx(0.05, rel=1e-9)
    assert res.error == 3.0
    assert _forward(I16, _strategy(I16, "identity"), "ci95", res.epsilon * (1 - 1e-9)) > 3.0


# ------------------------------------------------------------------- properties
MECHS = ["identity", "hb", "h2", "greedy_h", "wavelet"]
FAMILIES = [dict(), dict(delta=1e-6), dict(delta=1e-8, calibration="analytic"),
            dict(delta=1e-5, calibration="eigen_design")]


@settings(max_examples=60, deadline=None)
@given(t=st.floats(0.5, 500.0), name=st.sampled_from(MECHS),
       metric=st.sampled_from(accuracy.METRICS), fam=st.sampled_from(FAMILIES),
       counts=st.booleans())
def test_round_trip_error_at_epsilon_for_is_the_target(t, name, metric, fam, counts):
    res = dpx.epsilon_for(W32, name, t, metric, counts=counts, **fam)
    back = accuracy.error_at(W32, name, res.noise, metric, counts=counts)
    assert back == res.error and back <= t
    discrete_laplace = (metric == "ci95" and counts and not fam)
    if discrete_laplace:   # a step function: just below ε the target is missed
        below = res.noise.with_epsilon(res.epsilon * (1 - 1e-10))
        assert accuracy.error_at(W32, name, below, metric, counts=counts) > t
    else:                  # continuous in ε: the target is met with equality
        assert back == pytest.approx(t, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(eps=st.floats(0.05, 20.0), name=st.sampled_from(MECHS),
       metric=st.sampled_from(["rmse", "max"]), fam=st.sampled_from(FAMILIES))
def test_round_trip_epsilon_for_error_at_is_epsilon(eps, name, metric, fam):
    noise = _noise(eps, fam.get("delta"), fam.get("calibration", "zcdp") if fam else None)
    t = accuracy.error_at(W32, name, noise, metric)
    assert dpx.epsilon_for(W32, name, t, metric, **fam).epsilon == pytest.approx(eps, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(t1=st.floats(0.5, 200.0), factor=st.floats(1.0, 10.0), name=st.sampled_from(MECHS),
       metric=st.sampled_from(accuracy.METRICS), fam=st.sampled_from(FAMILIES))
def test_a_looser_target_never_costs_more_epsilon(t1, factor, name, metric, fam):
    e1 = dpx.epsilon_for(W32, name, t1, metric, **fam).epsilon
    e2 = dpx.epsilon_for(W32, name, t1 * factor, metric, **fam).epsilon
    assert e2 <= e1 * (1 + 1e-11)          # up to the solvers' relative 1e-12


@settings(max_examples=50, deadline=None)
@given(eps=st.floats(0.01, 50.0), delta=st.sampled_from([1e-3, 1e-6, 1e-9]),
       calibration=st.sampled_from(["zcdp", "analytic", "eigen_design"]))
@example(eps=49.34146669037041, delta=1e-3, calibration="zcdp")  # Laplace's √2/std: 1e-12 off once
def test_noise_for_std_inverts_every_calibration(eps, delta, calibration):
    c = dpx.Gaussian(eps, delta, calibration).sigma_per_unit
    got, rho = accuracy.noise_for_std(c, delta=delta, calibration=calibration)
    assert got == pytest.approx(eps, rel=1e-8)
    assert rho == pytest.approx(1 / (2 * c * c), rel=1e-12)
    assert accuracy.noise_for_std(math.sqrt(2) / eps)[0] == pytest.approx(eps, rel=1e-14)


def test_analytic_gaussian_with_huge_noise_meets_any_epsilon():
    # σ(ε → 0, δ) is finite for the analytic calibration: 2Φ(1/(2σ)) − 1 = δ
    s0 = accuracy._sigma_zero(1e-3)
    assert dpx.Gaussian(1e-8, 1e-3).sigma_per_unit == pytest.approx(s0, rel=1e-5)
    eps, _ = accuracy.noise_for_std(2 * s0, delta=1e-3, calibration="analytic")
    assert eps == 0.0


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.floats(0, 1e6), min_size=1, max_size=60), share=st.floats(0.01, 1.0))
def test_quantile_over_queries_is_the_inverted_cdf(values, share):
    t = accuracy.quantile_over_queries(values, share)
    v = np.asarray(values)
    assert t == np.quantile(v, share, method="inverted_cdf")
    assert (v <= t).sum() >= math.ceil(round(share * v.size, 9))
    smaller = v[v < t]
    if smaller.size:
        assert (v <= smaller.max()).sum() < share * v.size



@settings(max_examples=50, deadline=None)
@given(rows=st.integers(1, 5), m=st.integers(1, 30), share=st.floats(0.01, 1.0),
       seed=st.integers(0, 2**32 - 1))
def test_quantile_over_queries_along_an_axis_is_one_per_row(rows, m, share, seed):
    values = np.random.default_rng(seed).exponential(size=(rows, m))
    got = accuracy.quantile_over_queries(values, share, axis=1)
    assert got.shape == (rows,)
    assert list(got) == [accuracy.quantile_over_queries(r, share) for r in values]
    assert list(accuracy.quantile_over_queries(values.T, share, axis=0)) == list(got)

# ------------------------------------------------------------------ simulations
def test_data_dependent_epsilon_is_a_seeded_simulation_with_a_band():
    W = dpx.workloads.all_range(32)
    x = np.random.default_rng(3).poisson(30, 32).astype(float)
    res = dpx.epsilon_for(W, "dawa", 6.0, x=x, trials=8, seed=1, rtol=0.05)
    assert res.kind == "simulation" and not res.exact
    assert (res.seed, res.trials, res.rtol) == (1, 8, 0.05)
    assert res.epsilon_low <= res.epsilon <= res.epsilon_high
    assert res.error <= 6.0 and "simulated" in res.method and "bootstrap" in res.method
    again = dpx.epsilon_for(W, "dawa", 6.0, x=x, trials=8, seed=1, rtol=0.05)
    assert again == res                                   # reproducible from the seed
    assert accuracy.error_at(W, "dawa", res.noise, x=x, trials=8, seed=1) == res.error
    assert "band" in str(res) and "seed 1" in str(res)


def test_simulation_agrees_with_the_analytic_epsilon():
    """The simulation path, run on a data-independent mechanism, finds the exact ε within its error.

    Identity on Identity(64): 64 independent answers per run, T = 20 runs; the relative standard
    error of the RMSE is about sqrt(Var(e²))/(2σ² sqrt(Tm)) = sqrt(20)/2/sqrt(1280) ≈ 0.063 for
    Laplace noise (E e⁴ = 24 b⁴); ε ∝ 1/RMSE, so 4 standard errors plus the bisection's 2 %.
    That is a two-sided z of 4, a false-failure rate of about 6e-5 per run for a fresh seed (the
    seed is fixed, so the run is deterministic); a 2× noise scale (ε off by 2×) fails.
    """
    W = dpx.workloads.identity(64)
    x = np.full(64, 10.0)
    fam = accuracy._family(None, None, None)
    sim = accuracy._simulated(W, "identity", "Identity", 4.0, "rmse", fam, 0.95, 0.95, True, x,
                              20, 0, 0.02, None)
    exact = dpx.epsilon_for(W, "identity", 4.0).epsilon
    assert sim.kind == "simulation"
    assert abs(sim.epsilon / exact - 1) <= 4 * 0.063 + 0.02
    assert sim.epsilon_low <= sim.epsilon <= sim.epsilon_high


def test_a_simulation_callback_sees_every_run_and_stops_it_by_raising():
    """``callback(runs_done)`` before each seeded run (and each block of a ci95 bootstrap);
    raising stops within one run."""
    W = dpx.workloads.all_range(32)
    x = np.random.default_rng(3).poisson(30, 32).astype(float)
    seen: list[int] = []
    res = dpx.epsilon_for(W, "dawa", 6.0, x=x, trials=8, seed=1, rtol=0.05, callback=seen.append)
    assert seen == list(range(len(seen))) and len(seen) % 8 == 0 and len(seen) >= 16
    assert res == dpx.epsilon_for(W, "dawa", 6.0, x=x, trials=8, seed=1, rtol=0.05)  # no effect
    seen.clear()
    dpx.epsilon_for(W, "dawa", 6.0, "ci95", x=x, trials=20, seed=1, callback=seen.append)
    assert sorted(set(seen)) == list(range(max(seen) + 1)) and seen == sorted(seen)
    assert len(seen) > max(seen) + 1                        # the bootstraps' blocks too

    class Stop(Exception):
        pass

    def stop_at_the_third(done: int) -> None:
        if done == 3:
            raise Stop
    runs = []
    with pytest.raises(Stop):
        dpx.epsilon_for(W, "dawa", 6.0, x=x, trials=8, seed=1, rtol=0.05,
                        callback=lambda done: (runs.append(done), stop_at_the_third(done)))
    assert runs == [0, 1, 2, 3]                             # stopped before the fourth run
    # a data-independent mechanism has no runs: the callback is not called
    def never(done: int) -> None:
        raise AssertionError(f"called after {done} runs")
    assert dpx.epsilon_for(W, "identity", 6.0, callback=never).exact


@pytest.mark.parametrize("trials, level, share", [(20, 0.95, 0.95), (23, 0.9, 0.5), (40, 0.99, 1.0)])
def test_ci95_bootstrap_takes_each_resamples_order_statistics(trials, level, share, monkeypatch):
    """The ci95 statistic of every bootstrap resample, against its definition: per query the
    ⌈level·runs⌉-th smallest |error| of the resample (each run repeated by its multiplicity),
    then the ⌈share·m⌉-th smallest over the queries -- in blocks of resamples too."""
    rng = np.random.default_rng(trials)
    m = 37
    E = np.round(rng.laplace(size=(trials, m)), 1)            # ties between runs as well
    sim = accuracy._Simulated(dpx.workloads.identity(m), "uniform", np.ones(m), "ci95", level,
                              share, trials, 0, True, None)
    monkeypatch.setattr(accuracy, "_BOOTSTRAP_CELLS", 5 * m)   # blocks of 5 resamples
    got = sim._stat(E, sim.weights)
    k = math.ceil(round(level * trials, 9))
    for b, w in enumerate(sim.weights):
        per_query = np.sort(np.repeat(np.abs(E), w, axis=0), axis=0)[k - 1]
        assert got[b] == accuracy.quantile_over_queries(per_query, share), b
    plain = np.sort(np.abs(E), axis=0)[k - 1]
    assert sim._stat(E)[0] == accuracy.quantile_over_queries(plain, share)


def test_simulated_ci95_needs_enough_runs():
    x = np.ones(32)
    with pytest.raises(ValueError, match="at least 20 runs"):
        dpx.epsilon_for(W32, "dawa", 5.0, "ci95", x=x, trials=10)
    with pytest.raises(ValueError, match="data-dependent"):
        dpx.epsilon_for(W32, "dawa", 5.0)
    with pytest.raises(ValueError, match="5 cells but the workload is over 32"):
        dpx.epsilon_for(W32, "dawa", 5.0, x=np.ones(5))


# ------------------------------------------------------------------------ table
def test_epsilon_table_every_mechanism_and_the_svd_floor():
    W = dpx.workloads.prefix(32)
    df = dpx.epsilon_table(W, 5.0)
    assert set(df["mechanism"]) == set(dpx.registry.names())
    floor = df.attrs["floor_epsilon"]
    # the floor: the ε at which the SVD bound on the RMSE equals the target
    assert dpx.svd_bound(W, dpx.Laplace(floor)) == pytest.approx(5.0, rel=1e-12)
    ok = df.dropna(subset=["epsilon"])
    assert len(ok) >= 5 and (ok["epsilon"] >= floor * (1 - 1e-9)).all()
    assert list(ok["epsilon"]) == sorted(ok["epsilon"])
    assert df["epsilon"].isna().sum() == len(df) - len(ok)      # NaN rows last
    for _, row in ok.iterrows():                                 # the comparison at that ε agrees
        cmp = dpx.compare(W, dpx.Laplace(row["epsilon"]), mechanisms=[row["mechanism"]])
        assert cmp["rmse"].iloc[0] == pytest.approx(5.0, rel=1e-9)
        assert row["ratio"] == pytest.approx(row["epsilon"] / floor)
    dawa = df.set_index("mechanism").loc["dawa"]
    assert math.isnan(dawa["epsilon"]) and "pass x=" in dawa["note"]
    assert df.attrs["metric"] == "rmse" and df.attrs["target"] == 5.0


def test_epsilon_table_gaussian_rho_and_ci95_have_no_floor():
    W = dpx.workloads.marginals((4, 5, 3), [1, 2])
    df = dpx.epsilon_table(W, 2.0, noise="gaussian", mechanisms=["identity", "residual_planner",
                                                                   "opt_m"])
    assert df["epsilon"].isna().all() and (df["rho"] > 0).all()
    assert list(df["rho"]) == sorted(df["rho"])          # the cheapest mechanism first
    assert df.attrs["floor_rho"] > 0
    ci = dpx.epsilon_table(W, 2.0, "ci95", delta=1e-6, mechanisms=["identity", "opt_m"])
    assert math.isnan(ci.attrs["floor_epsilon"]) and "no floor" in ci.attrs["floor_note"]
    assert ci["epsilon"].notna().all()


def test_epsilon_table_max_metric_builds_residual_planner_for_the_worst_query():
    W = dpx.workloads.marginals((4, 5, 3), [1, 2])
    df = dpx.epsilon_table(W, 2.0, "max", delta=1e-6, mechanisms=["residual_planner"])
    cmp = dpx.compare(W, dpx.Gaussian(df["epsilon"].iloc[0], 1e-6, "zcdp"),
                      mechanisms=["residual_planner"], objective="max")
    assert cmp["max_std"].iloc[0] == pytest.approx(2.0, rel=1e-8)


def test_epsilon_table_simulates_data_dependent_mechanisms_with_x():
    W = dpx.workloads.all_range(16)
    x = np.random.default_rng(0).poisson(20, 16).astype(float)
    df = dpx.epsilon_table(W, 4.0, x=x, trials=4, rtol=0.1, mechanisms=["dawa", "identity"])
    kinds = dict(zip(df["mechanism"], df["kind"], strict=True))
    assert kinds == {"dawa": "simulation", "identity": "analytic"}


# ------------------------------------------------------------------ plain words
def test_accuracy_sentence_uses_the_release_interval_rules():
    W = dpx.workloads.all_range(64)
    noise = dpx.Laplace(1.0)
    A = _strategy(W, "hb")
    h, _ = confidence_half_widths(W, A, noise, noise_sampler(A, noise, True), 0.95)
    t = float(np.quantile(h, 0.95, method="inverted_cdf"))
    text = dpx.accuracy_sentence(W, "hb", noise)
    assert f"±{t:,.0f} counts" in text and "2,080 range answers" in text
    assert "95 % of your" in text and f"±{h.max():,.0f})" in text
    assert "HB" in text and "ε = 1" in text
    g = dpx.accuracy_sentence(W, "hb", dpx.Gaussian(1.0, 1e-6, "zcdp"), noun="ranges")
    assert "Gaussian" in g and "δ = 1e-06" in g and "ranges" in g


def test_accuracy_sentence_single_answer_and_all_equal_widths():
    one = dpx.accuracy_sentence(dpx.workloads.identity(1), "identity", dpx.Laplace(1.0))
    assert one.startswith("With Identity") and "your answer is within ±3.0 counts" in one
    all16 = dpx.accuracy_sentence(I16, "identity", dpx.Laplace(1.0))
    assert "all 16 counts are within ±3.0 counts" in all16


def test_accuracy_sentence_data_dependent():
    x = np.random.default_rng(0).poisson(20, 32).astype(float)
    assert "depends on the data" in dpx.accuracy_sentence(W32, "dawa", dpx.Laplace(1.0))
    sim = dpx.accuracy_sentence(W32, "dawa", dpx.Laplace(1.0), x=x, trials=20)
    assert sim.startswith("In a simulation on this data (20 seeded runs)")


def test_describe_privacy():
    text = dpx.describe_privacy(1.0)
    assert "e^ε ≈ 2.72" in text and "Smaller ε is more private" in text and "δ" not in text
    with_delta = dpx.describe_privacy(0.5, 1e-6, rho=0.01)
    assert "1 in 1,000,000" in with_delta and "ρ = 0.01" in with_delta and "1.65" in with_delta
    for bad in [dict(epsilon=0), dict(epsilon=-1), dict(epsilon=1, delta=1.0),
                dict(epsilon=float("nan"))]:
        with pytest.raises(ValueError):
            dpx.describe_privacy(**bad)


# ------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs,match", [
    (dict(target=0), "positive"), (dict(target=float("inf")), "positive"),
    (dict(target="a lot"), "positive"), (dict(metric="mae"), "metric"),
    (dict(delta=1e-6, noise="laplace"), "pure"), (dict(noise="cauchy"), "noise must be"),
    (dict(noise="gaussian", calibration="analytic"), "needs δ"),
    (dict(delta=1e-6, calibration="fancy"), "calibration"), (dict(delta=2.0), "delta"),
    (dict(level=0.5, metric="ci95"), "level"), (dict(share=0, metric="ci95"), "share"),
])
def test_bad_input_is_refused_clearly(kwargs, match):
    args = dict(target=5.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        dpx.epsilon_for(W32, "hb", **args)


def test_unknown_mechanism_and_unsupported_scope():
    with pytest.raises(KeyError, match="registered"):
        dpx.epsilon_for(W32, "nope", 5.0)
    with pytest.raises(dpx.registry.NotApplicableError):
        dpx.epsilon_for(W32, "eigen_design", 5.0)     # Gaussian-only mechanism under Laplace
    with pytest.raises(TypeError):
        accuracy.error_at(W32, "hb", 1.0)


def test_error_profile_is_reused_for_many_targets_and_epsilons():
    W = dpx.workloads.all_range(32)
    for noise in (dpx.Laplace(1.0), dpx.Gaussian(1.0, 1e-6, "zcdp")):
        prof = dpx.accuracy.error_profile(W, "hb", noise, "ci95")
        for eps in (0.1, 0.7, 3.0):
            at = noise.with_epsilon(eps)
            assert prof.error(at) == pytest.approx(dpx.accuracy.error_at(W, "hb", at, "ci95"),
                                                   rel=1e-12)
        for t in (3.0, 10.0, 40.0):
            got, want = prof.epsilon_for(t, noise), dpx.epsilon_for(W, "hb", t, "ci95", noise=noise)
            assert got.epsilon == pytest.approx(want.epsilon, rel=1e-12)
            assert prof.error(noise.with_epsilon(got.epsilon)) <= t
    with pytest.raises(ValueError, match="laplace noise"):
        dpx.accuracy.error_profile(W, "hb", dpx.Laplace(1.0)).epsilon_for(5.0, delta=1e-6)
    with pytest.raises(ValueError, match="adapts to the data"):
        dpx.accuracy.error_profile(W, "dawa", dpx.Laplace(1.0))


# ------------------------------------------------------------------- rmse_curve
def _units():
    return pd.DataFrame({"mechanism": ["identity", "hb", "mwem", "opt0"],
                         "label": ["Identity", "HB", "MWEM", "OPT0"],
                         "unit_tse": [120.0, 80.0, math.nan, math.nan]})


def test_rmse_curve_laplace_is_sqrt2_b_over_the_grid():
    m, svdb = 10, 50.0
    df = accuracy.rmse_curve(_units(), dpx.Laplace(0.7), svdb, m, grid=[0.1, 1.0, 5.0])
    assert sorted(set(df["epsilon"])) == [0.1, 0.7, 1.0, 5.0]  # the current ε is added
    assert set(df["mechanism"]) == {"identity", "hb", "svd_bound"}  # no analytic error: no curve
    for name, u in (("identity", 120.0), ("hb", 80.0), ("svd_bound", svdb)):
        c = df[df["mechanism"] == name]
        b = 1.0 / c["epsilon"].to_numpy()  # Laplace scale per unit L1 sensitivity
        np.testing.assert_allclose(c["rmse"], math.sqrt(2) * b * math.sqrt(u / m), rtol=1e-12)
    assert df.attrs["epsilon"] == 0.7 and df[df["mechanism"] == "svd_bound"]["label"].iloc[0] == "SVD bound"


def test_rmse_curve_gaussian_follows_the_zcdp_rho():
    delta, m = 1e-6, 4
    df = accuracy.rmse_curve(_units(), dpx.Gaussian(1.0, delta, "zcdp"), math.nan, m,
                             grid=[0.2, 2.0], pending=["opt0"])
    hb = df[df["mechanism"] == "hb"]
    rho = np.array([dpx.privacy.accounting.rho_from_epsilon(e, delta) for e in hb["epsilon"]])
    np.testing.assert_allclose(hb["rmse"], np.sqrt(80.0 / (2 * rho * m)), rtol=1e-9)
    assert "svd_bound" not in set(df["mechanism"])  # NaN bound: left out
    opt0 = df[df["mechanism"] == "opt0"]  # still being built: rows kept, NaN
    assert len(opt0) == 3 and opt0["rmse"].isna().all()


def test_rmse_curve_refuses_bad_input():
    with pytest.raises(ValueError, match="grid"):
        accuracy.rmse_curve(_units(), dpx.Laplace(1.0), 1.0, 4, grid=[0.0, 1.0])
    with pytest.raises(ValueError, match="m must be"):
        accuracy.rmse_curve(_units(), dpx.Laplace(1.0), 1.0, 0)
    with pytest.raises(ValueError, match="unit_tse"):
        accuracy.rmse_curve(_units().drop(columns="unit_tse"), dpx.Laplace(1.0), 1.0, 4)
    with pytest.raises(TypeError):
        accuracy.rmse_curve(_units(), "laplace", 1.0, 4)


# ------------------------------------------- unit profiles, floor, curves (the page's numbers)
def test_unit_error_profile_inverts_sqrt2_over_epsilon():
    u, t = 3.0, 0.5  # RMSE per unit noise std, target in counts
    prof = accuracy.unit_error_profile(u, "laplace", mechanism="hb", label="HB")
    res = prof.epsilon_for(t, dpx.Laplace(1.0))
    assert res.epsilon == pytest.approx(math.sqrt(2) * u / t, rel=1e-12)  # u·√2/ε = t
    assert res.error <= t and res.error == pytest.approx(t, rel=1e-12)
    assert prof.error(dpx.Laplace(2.0)) == pytest.approx(u * math.sqrt(2) / 2.0, rel=1e-15)
    assert (res.mechanism, res.label, res.metric) == ("hb", "HB", "rmse")
    zero = accuracy.unit_error_profile(0.0, "laplace").epsilon_for(t, "laplace")
    assert zero.epsilon == 0.0  # no noise reaches the answers


def test_unit_error_profile_gaussian_meets_the_target_tightly():
    u, t, delta = 2.0, 0.25, 1e-6
    prof = accuracy.unit_error_profile(u, dpx.Gaussian(1.0, delta, "zcdp"), metric="max")
    res = prof.epsilon_for(t, dpx.Gaussian(1.0, delta, "zcdp"))
    assert res.rho == pytest.approx(u * u / (2 * t * t), rel=1e-12)  # σ = u/√(2ρ) = t
    sigma = dpx.Gaussian(res.epsilon, delta, "zcdp").sigma_per_unit
    assert u * sigma <= t * (1 + 1e-12)
    assert u * dpx.Gaussian(res.epsilon * (1 - 1e-6), delta, "zcdp").sigma_per_unit > t
    with pytest.raises(ValueError, match="ci95"):
        accuracy.unit_error_profile(u, "gaussian", metric="ci95")
    with pytest.raises(ValueError, match="unit"):
        accuracy.unit_error_profile(-1.0, "laplace")
    with pytest.raises(ValueError, match="gaussian"):  # another family than the profile's
        prof.epsilon_for(t, dpx.Laplace(1.0))


def test_svd_floor_closed_form_and_the_table_floor():
    svdb, m, t = 400.0, 25, 2.0
    eps, rho, note = accuracy.svd_floor(svdb, m, t, "laplace")
    assert eps == pytest.approx(math.sqrt(2) * math.sqrt(svdb / m) / t, rel=1e-12)
    assert rho == pytest.approx(eps * eps / 2, rel=1e-12) and "SVD bound" in note
    table = dpx.epsilon_table(W32, 3.0, mechanisms=["identity"])
    got, _, _ = accuracy.svd_floor(dpx.error.svdb(W32), W32.m, 3.0, "laplace")
    assert got == pytest.approx(table.attrs["floor_epsilon"], rel=1e-12)
    for args, why in (((svdb, m, t, "laplace", "ci95"), "no floor"),
                      ((math.nan, m, t, "laplace"), "too large"),
                      ((0.0, m, t, "laplace"), "is 0")):
        eps, _, note = accuracy.svd_floor(*args)
        assert math.isnan(eps) and why in note
    with pytest.raises(ValueError, match="m must be"):
        accuracy.svd_floor(svdb, 0, t)


def test_epsilon_grid_holds_the_solutions():
    g = accuracy.epsilon_grid([0.5, math.nan, 0.0, 60.0], floor=0.003)
    assert np.all(np.diff(g) > 0)
    assert {0.5, 60.0} <= set(g)
    assert g[0] == pytest.approx(0.001) and g[-1] == pytest.approx(180.0)
    assert accuracy.epsilon_grid().size == 41 and accuracy.epsilon_grid()[0] == pytest.approx(0.01)


def test_error_curves_are_unit_times_sqrt2_over_epsilon():
    profs = {"a": accuracy.unit_error_profile(1.5, "laplace", label="A"),
             "b": accuracy.unit_error_profile(4.0, "laplace")}
    cv = accuracy.error_curves(profs, dpx.Laplace(1.0), [0.1, 1.0, 10.0])
    for name, u in (("a", 1.5), ("b", 4.0)):
        c = cv[cv["mechanism"] == name]
        np.testing.assert_allclose(c["error"], u * math.sqrt(2) / c["epsilon"], rtol=1e-15)
    assert set(cv["label"]) == {"A", "b"}
    # the classical Gaussian calibration exists only for ε < 1: those points are left out
    g = accuracy.unit_error_profile(1.0, "gaussian")
    cv = accuracy.error_curves({"g": g}, dpx.Gaussian(0.5, 1e-6, "classical"), [0.1, 0.9, 2.0])
    assert list(cv["epsilon"]) == [0.1, 0.9]
    want = math.sqrt(2 * math.log(1.25 / 1e-6)) / 0.1  # Dwork & Roth 2014, Thm A.1
    assert cv["error"].iloc[0] == pytest.approx(want, rel=1e-12)
