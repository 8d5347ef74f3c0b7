"""The sum-query simulation study (dpexplorer.sums.study): the numbers of the Sum queries page,
checked against the engine's own calls without Panel."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpexplorer import datasets
from dpexplorer.sums import mechanisms as sums
from dpexplorer.privacy import PrivateData
from dpexplorer.sums import study
from dpexplorer.sums import thresholds as thr
from dpexplorer.sums.thresholds import SVTParams


@pytest.fixture(scope="module")
def attr():
    return datasets.superstore_sales(bins=128)


@pytest.fixture(scope="module")
def result(attr):
    S = study.build_workload(attr.bucket_values(), "prefix", 20)
    seen = {"trial": [], "tau": []}
    res = study.simulate(attr, S, 0.5, seed=5, trials=4, tau_mode="svt", svt=SVTParams(),
                         strategy="greedy_h", notes=["a note"],
                         on_trial=lambda d, t: seen["trial"].append((d, t)),
                         on_tau=lambda d, t: seen["tau"].append((d, t)))
    return res, seen


def test_the_workloads(attr):
    S = study.build_workload(attr.bucket_values(), "prefix", 20, "geometric")
    ref = sums.prefix_sums(attr.bucket_values(), m=20, spacing="geometric")
    np.testing.assert_array_equal(S.thresholds, ref.thresholds)
    assert S.m == ref.m <= 20 and S.is_prefix  # geometric cuts can coincide: fewer queries
    R = study.build_workload(attr.bucket_values("midpoint"), "ranges", 30)
    assert R.m == 30 and R.n == attr.n and R.name == "30 random range sums" and not R.is_prefix
    np.testing.assert_array_equal(R.values, attr.bucket_values("midpoint"))
    assert len(study.curve_taus(S)) == 30
    big = sums.prefix_sums(np.arange(1.0, 2049.0), m=10)
    assert len(study.curve_taus(big)) == 8  # TaMM re-optimises per τ: fewer points above 1024 buckets


def test_simulate_equals_the_engine(attr, result):
    res, seen = result
    S = sums.prefix_sums(attr.bucket_values(), m=20)
    ref = sums.evaluate(attr.x, S, 0.5, trials=4, seed=5, svt=SVTParams(), strategy="greedy_h")
    pd.testing.assert_frame_equal(res.evaluation, ref)
    pd.testing.assert_frame_equal(res.summary, sums.summarize(ref))
    pd.testing.assert_frame_equal(res.sizes, sums.compare_sizes(ref))
    curve = sums.tau_curve(S, attr.x, 0.5 * (1 - SVTParams().alpha), taus=sums.tau_grid(S.values, 30),
                           strategy="greedy_h")
    pd.testing.assert_frame_equal(res.curve, curve)
    assert res.epsilon_answers == pytest.approx(0.45)
    np.testing.assert_array_equal(res.taus, sums.trial_taus(ref))
    assert res.taus.shape == (4,) and np.all(res.taus > 0)
    assert (res.epsilon, res.seed, res.trials, res.tau_mode, res.strategy) == (0.5, 5, 4, "svt", "greedy_h")
    assert res.notes == ["a note"] and res.seconds > 0
    assert seen["trial"][-1] == (8, 8) and seen["tau"][-1] == (30, 30)  # 4 truncated + 4 untruncated
    assert [d for d, _ in seen["trial"]] == list(range(1, 9))


def test_the_size_table_and_the_winners(result):
    res, _ = result
    t = study.sizes_table(res.sizes)
    assert len(t) == 5 * 2 and list(t.columns) == study.SIZE_COLUMNS
    tamm = res.sizes[(res.sizes.mechanism == "tamm") & ~res.sizes.isotonic].set_index("size")
    row = t[(t.mechanism == "TaMM") & ~t.isotonic].iloc[0]
    assert row["small median"] == tamm.loc["small", "median"]
    assert row["large 95%"] == tamm.loc["large", "q95"]
    assert row["small 5%"] == tamm.loc["small", "q05"]
    best = study.best_by_size(res.sizes)
    assert [size for size, _, _ in best] == ["small", "large"]
    for size, mech, median in best:
        plain = res.sizes[(res.sizes["size"] == size) & ~res.sizes.isotonic]
        assert median == plain["median"].min() and mech in sums.MECHANISMS
        assert plain.set_index("mechanism").loc[mech, "median"] == median
    assert study.sizes_table(res.sizes.iloc[0:0]).columns.tolist() == study.SIZE_COLUMNS
    assert study.best_by_size(res.sizes.iloc[0:0]) == []


def test_user_threshold_and_no_truncation(attr):
    S = study.build_workload(attr.bucket_values(), "prefix", 10)
    res = study.simulate(attr, S, 1.0, seed=0, trials=2, tau_mode="user", tau=500.0)
    assert np.all(res.taus == 500.0) and np.all(res.evaluation["tau"] == 500.0)
    assert res.untruncated is not None and list(res.split["truncated"]) == [True] * 5 + [False] * 5
    res = study.simulate(attr, S, 1.0, seed=0, trials=2, tau_mode="none")
    assert res.evaluation["bias"].abs().max() == 0 and res.epsilon_answers == 1.0
    assert res.untruncated is None and res.shown(True) is res  # nothing to compare with
    assert not res.split["truncated"].any() and (res.split["bias_rmse"] == 0).all()
    assert study.split_text(res.split) == "" and study.truncation_hurts(res.split) == []


def test_notes_name_data_dependent_edges_and_shifts():
    values = np.array([-3.0, 1.0, 2.0, 5.0, 7.0, 9.0])
    shifted = datasets.numerical_attribute(values, 3, "quantile", name="v", shift=3.0)
    notes = study.notes_for(shifted)
    assert any("computed from the data" in n for n in notes)
    assert any("shifted by +3" in n for n in notes)
    plain = datasets.numerical_attribute(np.abs(values), 3, "equal_width", range=(0.0, 9.0), name="v")
    assert study.notes_for(plain) == []


# ------------------------------------------------------------------ truncated or not: the split
def test_simulate_keeps_the_untruncated_run_on_the_same_seeds(attr, result):
    """The untruncated run is sums.evaluate(threshold="none") on the same seeds (paper Sec. 4, NoTrunc)."""
    res, _ = result
    S = res.workload
    ref = sums.evaluate(attr.x, S, 0.5, trials=4, seed=5, threshold="none", strategy="greedy_h")
    base = res.untruncated
    pd.testing.assert_frame_equal(base.evaluation, ref)
    pd.testing.assert_frame_equal(base.sizes, sums.compare_sizes(ref))
    assert base.tau_mode == "none" and base.epsilon_answers == 0.5 and base.curve.empty
    assert np.all(base.taus == S.values.max()) and res.shown(True) is base and res.shown(False) is res
    expected = pd.concat([study.error_split(res.evaluation, truncated=True),
                          study.error_split(ref, truncated=False)], ignore_index=True)
    pd.testing.assert_frame_equal(res.split, expected)
    assert list(res.split.columns) == study.SPLIT_COLUMNS and res.split.attrs["mode"] == "simulation"


def _synthetic():
    """12 buckets valued 1..12; 90 records of value ≤ 3 and 10 of value 12 (a heavy top)."""
    v = np.arange(1.0, 13.0)
    x = np.zeros(12)
    x[:3] = 30.0
    x[11] = 10.0
    S = sums.prefix_sums(v, cuts=np.array([2, 5, 8, 11]))
    return v, x, S


def test_tau_choice_follows_the_paper_on_a_synthetic_case():
    """Wu et al. 2019 Sec. 3.1-3.2, App. A.1-A.2 (thresholds module docstring), with a budget so
    large that SVT's noise (scale 4Δ/ε_SVT = 0.036 records) cannot move the answer.

    What is thresholded is the count of records ≤ θ_k against ρ·N: with ρ = 0.85, 90 of the
    100 records are ≤ 3, so τ = the first candidate ≥ 3, i.e. θ = 4 on θ_k = 2^k; a rule on the
    values' mass (85 % of Σ v x = 300 kept whole) would need τ = 12.  The batch mechanisms share that τ
    in every trial (Alg. 9); SQM selects one per query on the records it covers (Table 1, Alg. 2).
    """
    v, x, S = _synthetic()
    params = SVTParams(alpha=0.5, rho=0.85, r=2.0, theta0=1.0)
    theta = thr.svt_candidates(v, params)
    np.testing.assert_allclose(theta, [1.0, 2.0, 4.0, 8.0, 16.0])  # geometric, up to the largest value
    counts = np.array([(x * (v <= t)).sum() for t in theta])
    k = int(np.argmax(counts >= params.rho * x.sum()))
    assert theta[k] == 4.0
    kept = np.array([(x * v * (v <= t)).sum() for t in theta]) / (x * v).sum()  # share of the sum kept whole
    assert theta[int(np.argmax(kept >= params.rho))] == 16.0  # not what the paper thresholds
    df = sums.evaluate(x, S, 200.0, trials=3, seed=0, svt=params, isotonic=False)
    bqm = df[df.mechanism != "sqm"]
    assert (bqm["tau"] == 4.0).all()
    # SQM: query i counts the records it covers (values ≤ 3, 6, 9, 12) against ρ of them
    sqm = df[(df.mechanism == "sqm") & (df.trial == 0)].sort_values("query")
    per_query = []
    for cut in (2, 5, 8, 11):
        xs, vs = x[: cut + 1], v[: cut + 1]
        c = np.array([(xs * (vs <= t)).sum() for t in theta])
        per_query.append(min(theta[int(np.argmax(c >= params.rho * xs.sum()))], vs.max()))
    np.testing.assert_allclose(sqm["tau"], per_query)
    assert per_query == [3.0, 4.0, 4.0, 4.0]  # capped at the query's largest value, then θ = 4
    split = study.truncation_split(x, S, 200.0, trials=3, seed=0, svt=params)
    assert (split.loc[split.truncated & (split.mechanism != "sqm"), "tau"] == 4.0).all()
    assert (split.loc[~split.truncated, "tau"] == 12.0).all()
    assert (split.loc[~split.truncated, "bias_rmse"] == 0).all()
    bias = sums.truncation_bias(S, x, 4.0)  # 10 records of value 12 cut to 4: −80 on the last query
    np.testing.assert_allclose(bias, [0, 0, 0, -80.0])
    tamm = split[split.truncated & (split.mechanism == "tamm")].iloc[0]
    assert tamm["bias_rmse"] == pytest.approx(math.sqrt(np.mean(bias**2)))
    # ε is split α / 1 − α (Sec. 3.2): the answers of the truncated run had (1 − α)·ε
    data = PrivateData(x)
    rel = sums.run("identity", data, S, 200.0, np.random.default_rng(0), svt=params)
    assert rel.epsilon_threshold == pytest.approx(100.0) and rel.epsilon_answers == pytest.approx(100.0)


@pytest.mark.slow
def test_the_split_adds_up_over_seeded_trials():
    """bias RMSE² + noise RMSE² = the trials' mean squared error, per mechanism, public and SVT τ.

    For each mechanism the per-trial statistic D_t = mean_i (ŷ_ti − y_i)² − mean_i (b_i(τ_t)² +
    σ_i²(τ_t)) is i.i.d. over trials with mean 0 (given τ the noise is independent of τ's choice),
    so the mean of T = 400 of them is compared with 5 of its standard errors (the sample's own
    spread): a two-sided z of 5 for 5 mechanisms × 2 ways of choosing τ, a false-failure rate of
    at most 10 × 5.7e-7 ≈ 6e-6 per run for a fresh seed (the seeds are fixed, so the run is
    deterministic).  The bias² term is asserted to be over 10 standard errors, so a split that
    left it out (or counted the noise twice) would fail.
    """
    v, x, S = _synthetic()
    T, eps = 400, 2.0
    for mode, kw in (("user", dict(tau=4.0)), ("svt", dict(svt=SVTParams(alpha=0.2, rho=0.85, r=2.0)))):
        df = sums.evaluate(x, S, eps, trials=T, seed=11, threshold=mode, isotonic=False, **kw)
        split = study.error_split(df, truncated=True).set_index("mechanism")
        for mech, g in df.groupby("mechanism"):
            per_trial = g.assign(se=g["error"] ** 2, a=g["bias"] ** 2 + g["variance"]).groupby("trial")
            d = per_trial["se"].mean() - per_trial["a"].mean()
            se = d.std(ddof=1) / math.sqrt(T)
            row = split.loc[mech]
            assert row["total_rmse"] ** 2 == pytest.approx(row["bias_rmse"] ** 2 + row["noise_rmse"] ** 2)
            mse = row["empirical_rmse"] ** 2
            assert abs(mse - row["total_rmse"] ** 2) < 5 * se, (mode, mech, mse, row["total_rmse"] ** 2, se)
            assert row["bias_rmse"] ** 2 > 10 * se, (mode, mech)
            if mode == "user":  # given τ, the split is the engine's formulas (Table 1, App. A.3-A.4)
                var = sums.analytic_variance(mech, S, 4.0, eps, counts=True)
                assert row["noise_rmse"] == pytest.approx(math.sqrt(var.mean()))
                assert row["bias_rmse"] == pytest.approx(math.sqrt(np.mean(sums.truncation_bias(S, x, 4.0) ** 2)))


@settings(max_examples=15, deadline=None)
@given(counts=st.lists(st.integers(0, 20), min_size=12, max_size=12), tau=st.floats(0.5, 14.0))
def test_split_properties(counts, tau):
    """For any records and public τ: the parts add up, no truncation has no bias, truncation at
    the same ε never adds noise (Identity, Workload: sensitivities min(v, τ) ≤ v; up to 0.1 %, the
    discrete sampler's smaller variance on the whole-number answers of untruncated integer values,
    1 − 1/(12 b²) ≈ 0.9997 at b = Δ/ε = 18), and truncation_hurts names exactly the mechanisms
    whose total grew."""
    v, _, S = _synthetic()
    x = np.asarray(counts, dtype=float)
    split = study.truncation_split(x, S, 1.0, trials=2, seed=0, threshold="user", tau=tau,
                                   mechanisms=["identity", "workload"])
    np.testing.assert_allclose(split["total_rmse"] ** 2, split["bias_rmse"] ** 2 + split["noise_rmse"] ** 2)
    cut, full = (split[split.truncated == b].set_index("mechanism") for b in (True, False))
    assert (full["bias_rmse"] == 0).all() and (full["tau"] == 12.0).all()
    np.testing.assert_allclose(cut["bias_rmse"], math.sqrt(np.mean(sums.truncation_bias(S, x, tau) ** 2)))
    assert (cut["noise_rmse"] <= full["noise_rmse"] * (1 + 1e-3)).all()
    assert study.truncation_hurts(split) == [m for m in ("identity", "workload")
                                             if cut.loc[m, "total_rmse"] > full.loc[m, "total_rmse"]]


def test_split_text_says_where_truncation_hurts():
    rows = [("identity", True, 3.0, 4.0), ("identity", False, 0.0, 6.0),
            ("tamm", True, 4.0, 1.0), ("tamm", False, 0.0, 2.0)]
    split = pd.DataFrame([{"mechanism": m, "truncated": t, "tau": 1.0, "bias_rmse": b, "noise_rmse": n,
                           "total_rmse": math.hypot(b, n), "empirical_rmse": math.hypot(b, n),
                           "median_rel_error": 0.1, "median_rel_error_isotonic": math.nan}
                          for m, t, b, n in rows], columns=study.SPLIT_COLUMNS)
    assert study.truncation_hurts(split) == ["tamm"]  # √17 > 2; identity 5 < 6
    text = study.split_text(split, "USD")
    assert "Truncation hurts TaMM" in text and "4.12 vs 2 USD" in text and "94 %" in text
    assert "does not raise the total of Identity" in text and "never a release" in text
    assert "0.1 vs 0.1)" in text  # the median relative errors too
    assert "not raise the total RMSE of any mechanism" in study.split_text(split[split.mechanism == "identity"])
    table = study.split_table(split)
    assert list(table["truncated"]) == ["yes", "no", "yes", "no"] and table["mechanism"][2] == "TaMM"
    assert table["total RMSE"][2] == 4.123
    assert list(study.split_table(None).columns) == list(table.columns) and study.split_table(None).empty
    with pytest.raises(KeyError, match="missing columns"):
        study.error_split(split, truncated=True)
    with pytest.raises(ValueError, match="'svt' or 'user'"):
        study.truncation_split(np.ones(12), _synthetic()[2], 1.0, threshold="none")
