"""dpx.compare: the side-by-side table of analytic RMSE against the SVD bound."""

import math

import numpy as np
import pandas as pd
import pytest

import dpexplorer as dpx
from dpexplorer.core import error, registry
from dpexplorer.queries import workloads


def test_compare_table():
    W = workloads.all_range(64)
    noise = dpx.Laplace(1.0)
    df = dpx.compare(W, noise)
    assert {"mechanism", "rmse", "ratio", "seconds", "description", "source"} <= set(df.columns)
    assert set(df["mechanism"]) == set(registry.names(private=True))  # study variants only when named
    independent = df[~df["data_dependent"]]
    assert set(independent["mechanism"]) == set(registry.names(data_dependent=False))
    # mechanisms that do not apply (e.g. marginal-only ones on 1D ranges) have NaN and a reason
    skipped = independent[independent["rmse"].isna()]
    assert (skipped["note"].str.len() > 0).all()
    analytic = independent[independent["rmse"].notna()]
    assert {"identity", "h2", "hb", "wavelet", "greedy_h", "workload"} <= set(analytic["mechanism"])
    assert analytic["rmse"].is_monotonic_increasing
    assert df[df["data_dependent"]]["rmse"].isna().all()  # no data given
    bound = df.attrs["svd_bound"]
    assert bound == pytest.approx(3.22, abs=0.005)
    for _, row in analytic.iterrows():
        A = registry.get(row["mechanism"]).strategy(W, noise)
        assert row["rmse"] == pytest.approx(dpx.rmse(W, A, noise), rel=1e-10)
        assert row["ratio"] == pytest.approx(row["rmse"] / bound)
        assert row["ratio"] >= 1 - 1e-9
        assert row["seconds"] >= 0
    by_name = df.set_index("mechanism")["rmse"]
    assert by_name["identity"] == pytest.approx(6.63, abs=0.005)
    assert by_name["h2"] == pytest.approx(11.28, abs=0.005)


def test_compare_subset_and_errors():
    W = workloads.prefix(32)
    df = dpx.compare(W, dpx.Gaussian(1.0, 1e-6), mechanisms=["identity", "h2"])
    assert list(df["mechanism"]) == ["h2", "identity"]
    with pytest.raises(KeyError, match="no mechanism"):
        dpx.compare(W, dpx.Laplace(1.0), mechanisms=["nope"])
    assert list(dpx.compare(W, dpx.Laplace(1.0), mechanisms="h2")["mechanism"]) == ["h2"]  # one name
    for bad in (1.0, None, "laplace"):  # an AttributeError before
        with pytest.raises(TypeError, match="noise must be a noise model"):
            dpx.compare(W, bad)
    with pytest.raises(TypeError, match="cache must be"):
        dpx.compare(W, dpx.Laplace(1.0), cache={})
    with pytest.raises(TypeError, match="mechanism name must be a str"):
        dpx.compare(W, dpx.Laplace(1.0), mechanisms=[["hb"]])


def test_not_applicable_listed_last():
    W = workloads.kron([workloads.prefix(8), workloads.prefix(8)])
    df = dpx.compare(W, dpx.Laplace(1.0), mechanisms=["identity", "greedy_h", "h2"])
    last = df.iloc[-1]
    assert last["mechanism"] == "greedy_h"
    assert math.isnan(last["rmse"])
    assert "1D" in last["note"]


def test_empirical_rows_for_data_dependent_mechanisms():
    W = workloads.random_ranges(128, 300, seed=0)
    x = np.repeat([0.0, 40.0, 5.0, 100.0], 32)
    df = dpx.compare(W, dpx.Laplace(1.0), mechanisms=["identity", "dawa", "uniform"], x=x, trials=10)
    rows = df.set_index("mechanism")
    assert rows.loc["identity", "kind"] == "analytic"
    assert rows.loc["dawa", "kind"] == "simulation" and rows.loc["dawa", "rmse"] > 0
    assert "10 seeded runs" in rows.loc["dawa", "note"]
    # reproducible from the seed
    again = dpx.compare(W, dpx.Laplace(1.0), mechanisms=["dawa"], x=x, trials=10)
    assert again["rmse"].iloc[0] == rows.loc["dawa", "rmse"]
    # the Uniform baseline ignores the four blocks: far worse than DAWA
    assert rows.loc["dawa", "rmse"] < rows.loc["uniform", "rmse"]
    g = dpx.compare(W, dpx.Gaussian(1.0, 1e-6), mechanisms=["dawa"], x=x, trials=2)
    assert "Laplace" in g["note"].iloc[0] and math.isnan(g["rmse"].iloc[0])
    with pytest.raises(ValueError, match="cells"):
        dpx.compare(W, dpx.Laplace(1.0), x=np.ones(5))
    # the data is checked as a release checks it (accepted silently before)
    for bad, match in ((x - 1, "negative"), (x + 0.5, "whole numbers"), (x.reshape(8, 16), "shape"),
                       (np.where(x == 0, 1e300, x), r"2\*\*53")):
        with pytest.raises(ValueError, match=match):
            dpx.compare(W, dpx.Laplace(1.0), mechanisms=["uniform"], x=bad)
    for kw in (dict(seed=-1), dict(seed="abc"), dict(seed=2.5), dict(trials=0), dict(trials=2.5)):
        with pytest.raises(ValueError, match=next(iter(kw))):
            dpx.compare(W, dpx.Laplace(1.0), mechanisms=["uniform"], x=x, **kw)


def test_cache_rescales_without_rebuilding():
    W = workloads.all_range(128)
    cache = dpx.StrategyCache()
    a = dpx.compare(W, dpx.Laplace(1.0), cache=cache).set_index("mechanism")
    entries = len(cache)
    b = dpx.compare(W, dpx.Laplace(0.25), cache=cache).set_index("mechanism")
    assert len(cache) == entries
    np.testing.assert_allclose(b["rmse"], 4 * a.loc[b.index, "rmse"], rtol=1e-12)


def test_compare_does_not_rename_the_workload():
    W = workloads.prefix(16)
    df = dpx.compare(W, dpx.Laplace(1.0))
    assert W.name == "prefix"
    assert df.attrs["workload"] == "prefix"
    assert "workload" in set(df["mechanism"])


def test_compare_max_objective():
    """objective="max": the largest per-query std of every mechanism; ResidualPlanner optimises it."""
    W = workloads.marginals((3, 4, 5), [1, 2])
    noise = dpx.Gaussian(1.0, 1e-6)
    cache = dpx.StrategyCache()
    df = dpx.compare(W, noise, objective="max", cache=cache)
    assert df.attrs["objective"] == "max"
    assert list(df.columns[:4]) == ["mechanism", "label", "rmse", "max_std"]
    analytic = df[df["max_std"].notna()]
    assert analytic["max_std"].is_monotonic_increasing
    assert analytic.iloc[0]["mechanism"] == "residual_planner"
    assert len(analytic) >= 10
    for _, row in analytic.iterrows():
        mech = registry.get(row["mechanism"])
        params = {"objective": "max"} if "objective" in mech.params else {}
        A = mech.strategy(W, noise, **params)
        worst = error.per_query_variance(W, A, noise).max()
        assert row["max_std"] == pytest.approx(math.sqrt(worst), rel=1e-9)
        assert row["max_std"] >= row["rmse"] * (1 - 1e-9)  # the worst query is at least the mean
        assert row["rmse"] == pytest.approx(dpx.rmse(W, A, noise), rel=1e-10)
    assert df[df["data_dependent"]]["max_std"].isna().all()
    # the default objective keeps the table as it was, and ResidualPlanner minimises the total
    total = dpx.compare(W, noise, cache=cache)
    assert "max_std" not in total.columns and total.attrs["objective"] == "sum"
    by_name = total.set_index("mechanism")["rmse"]
    assert by_name["residual_planner"] == pytest.approx(total.attrs["svd_bound"], rel=1e-10)
    assert by_name["residual_planner"] <= df.set_index("mechanism").loc["residual_planner", "rmse"]
    # a workload with more queries than the `queries` limit: its worst query is not computed
    # (the per-query errors would be one value per query), and the note says why
    big = workloads.kron([workloads.all_range(300)] * 3)
    row = dpx.compare(big, dpx.Laplace(1.0), mechanisms=["identity"], objective="max").iloc[0]
    assert math.isfinite(row["rmse"]) and math.isnan(row["max_std"]) and "`queries` limit" in row["note"]
    with pytest.raises(ValueError, match="objective"):
        dpx.compare(W, noise, objective="worst")


def test_compare_max_objective_is_implicit_for_kronecker_and_marginal_strategies():
    """CPS (n = 280,000): max per-query std without any n × n matrix (it would not fit)."""
    W = workloads.kron([workloads.identity_total(n) for n in (50, 100, 7, 4, 2)])
    noise = dpx.Gaussian(1.0, 1e-6)
    names = ["identity", "h2", "wavelet", "opt_m", "datacube", "fourier", "residual_planner"]
    df = dpx.compare(W, noise, mechanisms=names, objective="max").set_index("mechanism")
    assert df["max_std"].notna().all(), df["note"].to_dict()
    assert df["max_std"].idxmin() == "residual_planner"


def test_strategy_cache_builds_through_its_builder():
    calls = []

    def build(mech, W, noise, params):
        calls.append((mech.name, W, params))
        return mech.strategy(W, noise, **params)

    cache = dpx.StrategyCache(build=build)
    W, noise = dpx.workloads.prefix(16), dpx.Laplace(1.0)
    A, unit, _, note = cache.entry(W, "hb", noise)
    cache.entry(W, "hb", noise)  # cached: not built again
    assert calls == [("hb", W, {})] and note == ""
    assert unit == pytest.approx(dpx.StrategyCache().entry(W, "hb", noise)[1], rel=1e-12)
    with pytest.raises(TypeError, match="build must be callable"):
        dpx.StrategyCache(build="hb")


def test_strategy_cache_dense_cells_keeps_only_structured_svd_bounds(monkeypatch):
    # above dense_cells a 1D SVD bound comes from a structured spectrum or is NaN: never from
    # a dense n × n eigendecomposition
    n = 300
    cache = dpx.StrategyCache(dense_cells=256)
    monkeypatch.setattr(error, "_dense_gram_eigenvalues", lambda W: pytest.fail("dense eigenvalues"))
    P = workloads.prefix(n)
    assert cache.svdb(P) == pytest.approx(dpx.spectra.svdb_structured(P), rel=1e-12)
    U = workloads.union([workloads.prefix(n), workloads.identity(n), workloads.total(n)])
    assert math.isnan(cache.svdb(U))
    monkeypatch.undo()
    assert not math.isnan(dpx.StrategyCache().svdb(U))  # without the limit: the dense bound
    assert dpx.StrategyCache().svdb(U) == pytest.approx(error.svdb(U.dense()), rel=1e-9)
    for bad in (0, 1.5, "many"):
        with pytest.raises(ValueError, match="dense_cells"):
            dpx.StrategyCache(dense_cells=bad)


# ----------------------------------------------------------- scale_comparison
def _unit_frame():
    """Unit-noise figures of the identity strategy on Prefix(16), from the matrix itself.

    For A = I (Δ₁ = Δ₂ = 1) the unit TSE is ``tr(W Wᵀ)`` (the sum of squared entries) and
    query i's unit variance is ``‖w_i‖²`` (HDMM Prop. 4 with (AᵀA)⁺ = I).
    """
    W = np.tril(np.ones((16, 16)))  # prefix queries, one per row
    return W, pd.DataFrame({
        "mechanism": ["identity", "dawa", "total_only"], "label": ["Identity", "DAWA", "T"],
        "rmse": [math.nan, 7.0, math.nan], "note": ["", "simulation", "not applicable"],
        "unit_tse": [float((W ** 2).sum()), math.nan, math.nan],
        "unit_max": [float((W ** 2).sum(axis=1).max()), math.nan, math.nan]})


def test_scale_comparison_laplace_matches_the_scale_b():
    from dpexplorer.compare import scale_comparison

    W, frame = _unit_frame()
    eps, svdb, m = 0.5, 40.0, W.shape[0]
    df = scale_comparison(frame, dpx.Laplace(eps), svdb, m, n=16, workload="prefix")
    b = 1 / eps  # Laplace scale per unit L1 sensitivity; variance 2b²
    ident = df.set_index("mechanism").loc["identity"]
    assert ident["rmse"] == pytest.approx(math.sqrt(2) * b * math.sqrt((W ** 2).sum() / m), rel=1e-12)
    bound = math.sqrt(2) * b * math.sqrt(svdb / m)
    assert df.attrs["svd_bound"] == pytest.approx(bound, rel=1e-12)
    assert ident["ratio"] == pytest.approx(ident["rmse"] / bound, rel=1e-12)
    # a simulation's RMSE is kept, NaN rows last, sorted by RMSE
    assert ident["rmse"] == pytest.approx(8.246, abs=1e-3)  # above the simulation's 7
    assert list(df["mechanism"]) == ["dawa", "identity", "total_only"]
    assert df.set_index("mechanism").loc["dawa", "rmse"] == 7.0
    assert math.isnan(df.set_index("mechanism").loc["total_only", "rmse"])
    assert df.attrs["m"] == m and df.attrs["n"] == 16 and df.attrs["workload"] == "prefix"
    assert math.isnan(frame.loc[0, "rmse"])  # the input is not changed


def test_scale_comparison_gaussian_and_worst_query_via_rho():
    from dpexplorer.compare import scale_comparison

    W, frame = _unit_frame()
    rho, m = 0.3, W.shape[0]
    noise = dpx.Gaussian.from_rho(rho, 1e-6)  # σ² = 1/(2ρ) per unit L2 sensitivity
    df = scale_comparison(frame, noise, math.nan, m, objective="max").set_index("mechanism")
    assert df.loc["identity", "rmse"] == pytest.approx(math.sqrt((W ** 2).sum() / (2 * rho * m)), rel=1e-9)
    assert df.loc["identity", "max_std"] == pytest.approx(math.sqrt(16 / (2 * rho)), rel=1e-9)
    assert math.isnan(df.loc["identity", "ratio"])  # no bound
    assert df.attrs["objective"] == "max"


def test_scale_comparison_equals_compare():
    from dpexplorer.compare import scale_comparison

    W, cache = workloads.all_range(32), dpx.StrategyCache()
    names = ["identity", "h2", "hb", "wavelet"]
    noise = dpx.Laplace(1.0)
    units = [cache.entry(W, n, noise)[1] for n in names]
    frame = pd.DataFrame({"mechanism": names, "rmse": math.nan, "unit_tse": units})
    for other in (dpx.Laplace(0.3), dpx.Laplace(4.0)):
        got = scale_comparison(frame, other, cache.svdb(W), W.m).set_index("mechanism")
        want = dpx.compare(W, other, names, cache=cache).set_index("mechanism")
        np.testing.assert_allclose(got.loc[names, "rmse"], want.loc[names, "rmse"], rtol=1e-12)
        np.testing.assert_allclose(got.loc[names, "ratio"], want.loc[names, "ratio"], rtol=1e-12)


def test_scale_comparison_refuses_bad_input():
    from dpexplorer.compare import scale_comparison

    _, frame = _unit_frame()
    with pytest.raises(ValueError, match="unit_max"):
        scale_comparison(frame.drop(columns="unit_max"), dpx.Laplace(1.0), 1.0, 16, objective="max")
    with pytest.raises(ValueError, match="m must be"):
        scale_comparison(frame, dpx.Laplace(1.0), 1.0, 0)
    with pytest.raises(ValueError, match="objective"):
        scale_comparison(frame, dpx.Laplace(1.0), 1.0, 16, objective="mean")
    with pytest.raises(TypeError):
        scale_comparison(frame, 1.0, 1.0, 16)
