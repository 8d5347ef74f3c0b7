"""The numbers of the guided lessons (dpexplorer.lessons), checked against the engine without Panel."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dpexplorer as dpx
from dpexplorer import lessons


def test_the_lessons_need_no_ui():
    """The module is engine: importing it loads no Panel, param, HoloViews or Bokeh."""
    code = ("import sys, dpexplorer.lessons; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'panel', 'param', 'holoviews', 'bokeh'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(lessons.__file__).parents[1])
    assert out.stdout.strip() == "[]"
    assert dpx.lessons is lessons


# ---------------------------------------------------------------- lesson 1: noise
@pytest.mark.parametrize("eps,delta,sens,calibration",
                         [(1.0, 1e-6, 1.0, "zcdp"), (0.3, 1e-5, 2.5, "analytic"), (4.0, 0.01, 0.2, "zcdp")])
def test_noise_densities_have_the_engine_variances(eps, delta, sens, calibration):
    r = lessons.noise_lesson(sens, eps, delta, calibration)
    lap, gau = dpx.Laplace(eps), dpx.Gaussian(eps, delta, calibration)
    assert r["laplace_std"] ** 2 == pytest.approx(lap.variance(sens), rel=1e-12)
    assert r["gaussian_std"] ** 2 == pytest.approx(gau.variance(sens), rel=1e-12)
    assert r["laplace_scale"] == pytest.approx(sens / eps, rel=1e-12)
    assert r["gaussian_sigma"] == pytest.approx(sens * gau.sigma_per_unit, rel=1e-12)
    assert r["ratio"] == pytest.approx(r["gaussian_std"] / r["laplace_std"], rel=1e-12)
    if calibration == "analytic":
        assert r["gaussian_sigma"] == pytest.approx(
            sens * dpx.noise.analytic_gaussian_sigma(eps, delta), rel=1e-12)
    frame = r["frame"]
    assert len(frame) == 2 * 801
    for key, noise in [("laplace", lap), ("gaussian", gau)]:
        sub = frame[frame["noise"] == key]
        z, f = sub["z"].to_numpy(), sub["density"].to_numpy()
        assert np.trapezoid(f, z) == pytest.approx(1.0, rel=2e-3)
        # tails beyond ±8 std are cut
        assert np.trapezoid(z**2 * f, z) == pytest.approx(noise.variance(sens), rel=5e-3)
        assert np.trapezoid(z * f, z) == pytest.approx(0.0, abs=1e-9 * noise.variance(sens))


@pytest.mark.parametrize("sens", [0.0, -1.0, math.nan, math.inf])
def test_a_bad_sensitivity_is_refused(sens):
    with pytest.raises(ValueError, match="sensitivity must be a positive number"):
        lessons.noise_densities(sens, 1.0, 1e-6)


# ----------------------------------------------------------- lesson 2: strategies
@pytest.mark.parametrize("noise", [dpx.Laplace(0.8), dpx.Gaussian(0.8, 1e-6, "zcdp")])
def test_rmse_grid_equals_the_engine(noise):
    grid = lessons.rmse_grid(lessons.domain_sizes(256), noise)
    assert sorted(grid["n"].unique()) == [16, 32, 64, 128, 256]
    assert list(grid.columns) == ["n", "mechanism", "label", "m", "rmse"]
    assert len(grid) == 5 * len(lessons.STRATEGIES)
    for row in grid.itertuples():
        W = dpx.workloads.all_range(row.n)
        A = dpx.registry.get(row.mechanism).strategy(W, noise)
        assert row.m == W.m and row.label == lessons.STRATEGIES[row.mechanism]
        assert row.rmse == pytest.approx(dpx.rmse(W, A, noise), rel=1e-12), row


def test_per_query_errors_equal_the_engine():
    noise = dpx.Laplace(1.0)
    r = lessons.per_query_errors(16, noise)
    W = dpx.workloads.all_range(16)
    lo, hi = W.ranges()
    for name in lessons.STRATEGIES:
        A = dpx.registry.get(name).strategy(W, noise)
        want = dpx.per_query_rmse(W, A, noise)
        np.testing.assert_allclose(r["per_query"][name], want, rtol=1e-12)
        pw = r["per_width"]
        got = pw[pw["mechanism"] == name].set_index("width")["rmse"]
        assert list(got.index) == list(range(1, 17))
        for w in (1, 5, 16):
            assert got[w] == pytest.approx(math.sqrt(np.mean(want[hi - lo + 1 == w] ** 2)), rel=1e-12)
    q = r["half_query"]  # the "first half" example is the range [0, n/2 - 1]
    assert (lo[q], hi[q]) == (0, 7)


def test_a_hierarchy_beats_the_workload():
    r = lessons.strategy_lesson(dpx.Laplace(1.0), n_max=1024, example_n=16)
    grid = r["grid"].set_index(["n", "mechanism"])["rmse"]
    for n in (256, 1024):
        assert grid[(n, "hb")] < grid[(n, "identity")] < grid[(n, "workload")]
    at = {name: grid[(1024, name)] for name in lessons.STRATEGIES}
    assert r["n_big"] == 1024 and r["at"] == pytest.approx(at)
    assert r["best"] == min((k for k in at if k != "workload"), key=at.get)
    assert r["factor"] == pytest.approx(at["workload"] / at[r["best"]], rel=1e-12) and r["factor"] > 10


# ---------------------------------------------------------------- lesson 3: bound
@pytest.mark.parametrize("kind,noise", [("all_range", dpx.Laplace(0.6)), ("prefix", dpx.Gaussian(0.6, 1e-6)),
                                        ("width_range", dpx.Laplace(0.6))])
def test_svd_bound_lesson_equals_the_engine(kind, noise):
    W = lessons.lesson_workload(kind, 64)
    assert W is lessons.lesson_workload(kind, 64)  # built once: engine caches key on identity
    want_W = {"all_range": dpx.workloads.all_range(64), "prefix": dpx.workloads.prefix(64),
              "width_range": dpx.workloads.width_range(64, 32)}[kind]
    assert (W.m, W.n, W.name) == (want_W.m, want_W.n, want_W.name)
    r = lessons.bound_lesson(W, noise)
    assert r["bound"] == pytest.approx(dpx.svd_bound(want_W, noise), rel=1e-12)
    assert (r["m"], r["n"], r["workload"]) == (W.m, 64, W.name)
    want = dpx.compare(want_W, noise, mechanisms=dpx.registry.names(data_dependent=False))
    want = want.set_index("mechanism")["rmse"]
    table = r["table"].dropna(subset=["rmse"])
    assert len(table) >= 4
    for row in table.itertuples():
        assert row.rmse == pytest.approx(want[row.mechanism], rel=1e-12)
        assert row.rmse >= r["bound"] * (1 - 1e-9)  # nothing goes below the bound
        assert row.ratio == pytest.approx(row.rmse / r["bound"], rel=1e-12)


def test_an_unknown_lesson_workload_is_named():
    with pytest.raises(KeyError, match="unknown lesson workload 'rows'"):
        lessons.lesson_workload("rows", 64)


# ----------------------------------------------------------------- lesson 4: data
def test_the_synthetic_histograms():
    x = lessons.easy_histogram(256)
    assert x.shape == (256,) and x.dtype == np.float64
    assert set(np.unique(x)) <= {0.0, 2.0, 4.0, 12.0} and np.count_nonzero(np.diff(x)) <= 5
    np.testing.assert_array_equal(x, lessons.easy_histogram(256))  # seeded
    y = lessons.hard_histogram(256)
    assert y.shape == (256,) and np.all(y >= 0) and np.all(y == np.round(y))
    with pytest.raises(ValueError, match="multiple of 16"):
        lessons.easy_histogram(100)


def test_coarsen_sums_neighbours_or_names_the_data():
    np.testing.assert_array_equal(lessons.coarsen(np.arange(8.0), 4, "x"), [1.0, 5.0, 9.0, 13.0])
    with pytest.raises(ValueError, match="HEPTH has 10 cells, not a multiple of n = 4"):
        lessons.coarsen(np.ones(10), 4, "HEPTH")


def test_the_simulation_matches_the_engine_with_the_documented_seeds():
    lessons.clear_cache()
    r = lessons.data_lesson("synthetic", 256, epsilon=1.0, trials=2, seed=3, penalty=0.5)
    table = r["table"]
    assert len(table) == 2 * len(lessons.SIM_MECHANISMS) and set(table["role"]) == {"easy", "hard"}
    assert (r["epsilon"], r["n"], r["trials"], r["seed"], r["penalty"]) == (1.0, 256, 2, 3, 0.5)
    W = dpx.workloads.all_range(256)
    x = lessons.easy_histogram(256)
    np.testing.assert_array_equal(r["data"]["easy"]["x"], x)
    for name, params in [("identity", {}), ("dawa", {"penalty": 0.5})]:
        errs, first = [], None
        for t in range(2):
            rng = np.random.default_rng(np.random.SeedSequence([3, t]))
            est = dpx.mechanism.run(name, dpx.PrivateData(x), W, dpx.Laplace(1.0), rng, **params)
            errs.append(np.mean(np.abs(W.matvec(est.x_hat) - W.matvec(x))))
            first = est if first is None else first
        row = table[(table["role"] == "easy") & (table["mechanism"] == name)]
        assert row["mae"].item() == pytest.approx(np.mean(errs), rel=1e-9)
        assert row["se"].item() == pytest.approx(np.std(errs, ddof=1) / math.sqrt(2), rel=1e-9)
        if name == "dawa":
            np.testing.assert_allclose(r["data"]["easy"]["x_hat"], first.x_hat, rtol=1e-12)
            assert r["data"]["easy"]["buckets"] == first.info["buckets"]
    for role in ("easy", "hard"):
        mae = table[table["role"] == role].set_index("mechanism")["mae"]
        assert r["factor"][role] == pytest.approx(mae["dawa"] / min(mae["identity"], mae["hb"]))
    # cached: the same inputs give the same objects' numbers without rerunning
    again = lessons.data_lesson("synthetic", 256, epsilon=1.0, trials=2, seed=3, penalty=0.5)
    np.testing.assert_array_equal(again["table"]["mae"], table["mae"])
    other = lessons.data_lesson("synthetic", 256, epsilon=1.0, trials=2, seed=11, penalty=0.5)
    assert not np.array_equal(other["table"]["mae"], table["mae"])


def test_dawa_wins_on_easy_data_and_loses_on_hard():
    r = lessons.data_lesson("synthetic", 256, epsilon=1.0, trials=5, seed=0, penalty=0.5)
    t = r["table"].set_index(["role", "mechanism"])["mae"]
    assert t[("easy", "dawa")] < min(t[("easy", "identity")], t[("easy", "hb")])
    assert t[("hard", "dawa")] > t[("hard", "hb")]
    assert r["factor"]["easy"] < 1 < r["factor"]["hard"]


def test_dpbench_needs_a_folder(monkeypatch, tmp_path):
    monkeypatch.setattr(dpx.datasets, "default_dpbench_dir", lambda: None)
    assert lessons.dpbench_folder("  ") is None and lessons.dpbench_folder(None) is None
    assert lessons.dpbench_folder(str(tmp_path)) == str(tmp_path)
    assert not lessons.dpbench_available(None) and not lessons.dpbench_available(str(tmp_path))
    with pytest.raises(ValueError, match="DPBench data not found"):
        lessons.data_lesson("dpbench", 256, epsilon=1.0, trials=1, seed=0, penalty=0.5, folder=None)


def test_the_dpbench_pair(dpbench_dir):
    assert lessons.dpbench_available(str(dpbench_dir))
    sets = lessons.lesson_datasets("dpbench", 256, str(dpbench_dir))
    assert [(role, name) for role, name, _ in sets] == list(lessons.DPBENCH_PAIR)
    for _, name, x in sets:
        assert x.shape == (256,) and x.sum() == dpx.datasets.load_dpbench(name, dpbench_dir).sum()
