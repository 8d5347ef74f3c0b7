"""The "ε for this error" table (dpexplorer.accuracy.target_table and its helpers), without Panel."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

import dpexplorer as dpx
from dpexplorer import accuracy


def test_targets_in_words():
    assert accuracy.target_words(50, "rmse") == "an RMSE of 50 counts per query"
    assert accuracy.target_words(2.5, "max") == ("a standard deviation of at most 2.5 counts on every "
                                                 "query (the worst query's)")
    assert accuracy.target_words(50, "ci95", 0.9, 0.99) == (
        "±50 counts on 99 % of queries (each a 90 % confidence interval)")
    assert accuracy.epsilon_note(0.0, 5) == "any ε > 0 meets the target"
    assert accuracy.epsilon_note(math.inf, 5) == accuracy.epsilon_note(math.nan, 5) == "no ε meets ±5 counts"
    assert accuracy.epsilon_note(0.3, 5) == ""
    assert accuracy.noise_label(dpx.Laplace(1.0)) == "Laplace"
    assert accuracy.noise_label(dpx.Gaussian(1.0, 1e-6, "zcdp")) == "Gaussian (δ = 1e-06, zcdp)"


def test_rmse_profiles_solve_to_the_engines_epsilon():
    W = dpx.workloads.prefix(64)
    units = [dpx.error.unit_tse(W, dpx.registry.get(n).strategy(W, dpx.Laplace(1.0)), 1)
             for n in ("identity", "h2")]
    frame = pd.DataFrame({"mechanism": ["identity", "h2", "dawa"], "label": ["Identity", "H2", "DAWA"],
                          "unit_tse": [*units, math.nan]})
    profs = accuracy.rmse_profiles(frame, W.m, dpx.Laplace(1.0))
    assert set(profs) == {"identity", "h2"}  # DAWA has no analytic error
    for name, prof in profs.items():
        res = prof.epsilon_for(10.0, dpx.Laplace(1.0))
        want = dpx.epsilon_for(W, name, 10.0, "rmse", noise=dpx.Laplace(1.0))
        assert res.epsilon == pytest.approx(want.epsilon, rel=1e-9)
        # the profile's error at its ε is the target: RMSE ∝ 1/ε for Laplace noise
        assert prof.error(dpx.Laplace(res.epsilon)) == pytest.approx(10.0, rel=1e-9)
        assert prof.label == frame.set_index("mechanism").loc[name, "label"]


def test_the_target_table_sorts_and_compares_with_the_floor():
    W = dpx.workloads.all_range(32)
    row = dict.fromkeys(accuracy.TARGET_COLUMNS, math.nan)
    del row["ratio"]
    rows = [{**row, "mechanism": "b", "label": "B", "epsilon": 2.0},
            {**row, "mechanism": "n", "label": "N", "epsilon": math.nan},
            {**row, "mechanism": "a", "label": "A", "epsilon": 0.5}]
    df = accuracy.target_table(rows, 0.25, "", 10.0, "rmse", dpx.Gaussian(1.0, 1e-5, "zcdp"), W)
    assert list(df.columns) == accuracy.TARGET_COLUMNS
    assert list(df["mechanism"]) == ["a", "b", "n"]  # least ε first, NaN last
    np.testing.assert_allclose(df["ratio"].to_numpy(dtype=float), [2.0, 8.0, np.nan])
    assert df.attrs == {"floor_epsilon": 0.25, "floor_note": "", "target": 10.0, "metric": "rmse",
                        "noise": "Gaussian (δ = 1e-05, zcdp)", "m": W.m, "workload": W.name}
    none = accuracy.target_table(rows, math.nan, "no floor", 10.0, "ci95", dpx.Laplace(1.0), W)
    assert none["ratio"].isna().all() and none.attrs["floor_note"] == "no floor"
    df.loc[df["mechanism"] == "b", "error"] = 10.0
    df.loc[df["mechanism"] == "a", "error"] = 9.5
    points = accuracy.target_points(df, {"b": None, "n": None})
    pd.testing.assert_frame_equal(points, pd.DataFrame({"epsilon": [2.0], "error": [10.0], "label": ["B"]}))


def test_a_simulated_row_names_its_seed_runs_data_and_band():
    W = dpx.workloads.prefix(16)
    exact = dpx.epsilon_for(W, "identity", 5.0, "rmse", noise=dpx.Laplace(1.0))
    sim = dataclasses.replace(exact, kind="simulation", exact=False, seed=3, trials=20,
                              epsilon_low=exact.epsilon * 0.9, epsilon_high=exact.epsilon * 1.1)
    row = accuracy.simulated_target_row(sim, "NETTRACE")
    assert row["epsilon"] == exact.epsilon and row["rho"] == exact.rho and row["error"] == exact.error
    assert (row["epsilon_low"], row["epsilon_high"]) == (sim.epsilon_low, sim.epsilon_high)
    assert row["note"].startswith("simulation (seed 3, 20 trials) on NETTRACE: 95 % band for ε ")
    assert "not a release" in row["note"]
    unbanded = dataclasses.replace(sim, epsilon_high=math.nan)
    assert "95 % band for ε not found in range" in accuracy.simulated_target_row(unbanded, "x")["note"]
    none = dataclasses.replace(sim, epsilon=math.nan, note="out of range")
    row = accuracy.simulated_target_row(none, "x")
    assert math.isnan(row["rho"]) and row["note"].endswith(": out of range")
    assert accuracy.simulated_target_row("simulation failed: boom", "x") == {
        "note": "simulation failed: boom"}


def test_an_analytic_row_and_the_svd_bound_profile():
    W = dpx.workloads.all_range(32)
    noise = dpx.Gaussian(1.0, 1e-6, "zcdp")
    prof = dpx.accuracy.error_profile(W, "hb", noise, "rmse")
    row = accuracy.analytic_target_row(prof, 3.0, noise)
    want = dpx.epsilon_for(W, "hb", 3.0, "rmse", noise=noise)
    assert row["epsilon"] == pytest.approx(want.epsilon, rel=1e-9)
    assert row["rho"] == pytest.approx(want.rho, rel=1e-9) and row["error"] <= 3.0 * (1 + 1e-9)
    assert row["note"] == ""
    assert accuracy.analytic_target_row(None, 3.0, noise) == {"note": "no error profile"}
    assert accuracy.analytic_target_row(None, 3.0, noise, "no error profile: too big") == {
        "note": "no error profile: too big"}
    svdb = dpx.error.svdb(W)
    bound = accuracy.svd_bound_profile(svdb, W.m, noise)
    assert (bound.mechanism, bound.label) == ("svd_bound", "SVD bound")
    # the bound's RMSE at the noise is the SVD bound itself
    assert bound.error(noise) == pytest.approx(dpx.svd_bound(W, noise), rel=1e-9)
    floor, _, _ = accuracy.svd_floor(svdb, W.m, 3.0, noise, "rmse")
    assert bound.epsilon_for(3.0, noise).epsilon == pytest.approx(floor, rel=1e-9)
    assert floor <= row["epsilon"]  # no strategy needs less ε than the bound
