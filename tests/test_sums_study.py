"""The sum-query simulation study (dpexplorer.sums.study): the numbers of the Sum queries page,
checked against the engine's own calls without Panel."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpexplorer import datasets
from dpexplorer.sums import mechanisms as sums
from dpexplorer.sums import study
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
    assert seen["trial"][-1] == (4, 4) and seen["tau"][-1] == (30, 30)


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
    res = study.simulate(attr, S, 1.0, seed=0, trials=2, tau_mode="none")
    assert res.evaluation["bias"].abs().max() == 0 and res.epsilon_answers == 1.0


def test_notes_name_data_dependent_edges_and_shifts():
    values = np.array([-3.0, 1.0, 2.0, 5.0, 7.0, 9.0])
    shifted = datasets.numerical_attribute(values, 3, "quantile", name="v", shift=3.0)
    notes = study.notes_for(shifted)
    assert any("computed from the data" in n for n in notes)
    assert any("shifted by +3" in n for n in notes)
    plain = datasets.numerical_attribute(np.abs(values), 3, "equal_width", range=(0.0, 9.0), name="v")
    assert study.notes_for(plain) == []
