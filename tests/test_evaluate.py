"""dpx.evaluate: empirical evaluation (DAWA Sec. 5.1): tidy output, reproducibility, CIs, errors."""

import math

import numpy as np
import pandas as pd
import pytest

import dpexplorer as dpx
from dpexplorer import evaluate as ev
from dpexplorer.core import registry
from dpexplorer.evaluate import RAW_COLUMNS, SUMMARY_COLUMNS, evaluate, uniform_ranges
from dpexplorer.queries import workloads

MECHS = ["identity", "h2", "hb", "greedy_h"]


def _data(n=128, seed=1):
    return np.random.default_rng(seed).integers(0, 100, size=n)


def _kw(**over):
    kw = dict(mechanisms=MECHS, datasets={"a": _data(128), "b": _data(64, 2)},
              workloads=[uniform_ranges(100)], epsilons=[0.5, 1.0], trials=2,
              workload_seeds=range(2), progress=False, n_jobs=1)
    kw.update(over)
    return kw


def _numbers(df):
    return df.drop(columns=["seconds"])


@pytest.fixture
def temp_mechanism():
    """Register throw-away mechanisms; removed again after the test."""
    added = []

    def add(mech):
        registry.register(mech)
        added.append(mech.name)
        return mech.name

    yield add
    for name in added:
        registry.REGISTRY.pop(name, None)


def test_tidy_shape_columns_and_attrs():
    df = evaluate(**_kw())
    assert list(df.columns) == SUMMARY_COLUMNS
    assert len(df) == 4 * 2 * 1 * 2
    assert list(df["mechanism"].unique()) == MECHS  # input order kept
    assert (df["runs"] == 2 * 2).all()
    assert df["note"].isna().all()
    assert set(df["n"]) == {128, 64}
    assert set(df["workload"]) == {"uniform_ranges(m=100)"}
    assert (df[["l1", "rmse", "rel", "seconds"]] > 0).all().all()
    assert df.attrs["seed"] == 0 and df.attrs["trials"] == 2
    assert df.attrs["workload_seeds"] == [0, 1] and df.attrs["gamma"] == 1.0
    # error falls with ε for every mechanism and dataset
    piv = df.pivot_table(index=["mechanism", "dataset"], columns="epsilon", values="l1")
    assert (piv[0.5] > piv[1.0]).all()


def test_raw_rows():
    raw = evaluate(**_kw(raw=True))
    assert list(raw.columns) == RAW_COLUMNS
    assert len(raw) == 4 * 2 * 2 * 2 * 2  # mechanisms × datasets × ε × workload seeds × trials
    assert (raw["epsilon_spent"] == raw["epsilon"]).all()
    assert (raw["m"] == 100).all()
    np.testing.assert_allclose(raw["rmse"], np.sqrt(raw["mse"]))
    assert raw.attrs["seed"] == 0


def test_reproducible_and_identical_across_execution_modes():
    a = evaluate(**_kw())
    b = evaluate(**_kw())
    c = evaluate(**_kw(n_jobs=2))
    pd.testing.assert_frame_equal(_numbers(a), _numbers(b))
    pd.testing.assert_frame_equal(_numbers(a), _numbers(c))
    d = evaluate(**_kw(seed=1))
    assert not np.allclose(a["l1"], d["l1"])


def test_cell_numbers_do_not_depend_on_the_rest_of_the_call():
    full = evaluate(**_kw(raw=True))
    alone = evaluate(**_kw(mechanisms=["hb"], datasets={"b": _data(64, 2)}, epsilons=[1.0],
                           raw=True))
    sub = full[(full["mechanism"] == "hb") & (full["dataset"] == "b") & (full["epsilon"] == 1.0)]
    pd.testing.assert_frame_equal(_numbers(sub).reset_index(drop=True), _numbers(alone))


def test_identity_rmse_matches_analytic():
    """``evaluate``'s per-run MSEs of Identity average to the analytic MSE.

    Tolerance: 5 standard errors of the mean of the 60 runs (2 workload seeds × 30 trials, from the
    runs' own spread); with N = 60 this is a two-sided z of 5 (Student t, 59 d.o.f.), a
    false-failure rate of about 6e-6 per run for a fresh seed (the seeds are fixed, so the run is
    deterministic).  Power: se < 0.1·analytic is asserted, so the tolerance is under 50 % of the MSE
    and a 2× noise scale (4× MSE) fails.
    """
    eps, seeds, trials = 1.0, [0, 1], 30
    noise = dpx.Laplace(eps)
    raw = evaluate(["identity"], {"x": _data(64)}, [uniform_ranges(100)], [eps], trials=trials,
                   workload_seeds=seeds, progress=False, n_jobs=1, raw=True)
    mse = raw["mse"].to_numpy()
    assert mse.size == len(seeds) * trials
    # every instance has `trials` runs, so the expected mean is the mean of the analytic MSEs
    analytic = np.mean([dpx.rmse(W, dpx.strategies.identity(64), noise) ** 2
                        for W in (workloads.random_ranges(64, 100, "uniform", s) for s in seeds)])
    se = mse.std(ddof=1) / math.sqrt(mse.size)
    assert abs(mse.mean() - analytic) < 5 * se
    assert se < 0.1 * analytic  # the test has power: 5 se is under 50 % of the MSE
    summary = evaluate(["identity"], {"x": _data(64)}, [uniform_ranges(100)], [eps], trials=trials,
                       workload_seeds=seeds, progress=False, n_jobs=1)
    assert summary["rmse"].iloc[0] == pytest.approx(math.sqrt(mse.mean()))


def test_confidence_intervals_bracket_the_mean():
    df = evaluate(**_kw())
    for m in ("l1", "rmse", "rel"):
        assert (df[f"{m}_ci_low"] <= df[m]).all() and (df[m] <= df[f"{m}_ci_high"]).all()
        assert (df[f"{m}_ci_low"] < df[f"{m}_ci_high"]).all()
    wide = evaluate(**_kw(mechanisms=["identity"], confidence=0.99))
    narrow = evaluate(**_kw(mechanisms=["identity"], confidence=0.5))
    assert ((wide["l1_ci_high"] - wide["l1_ci_low"]) > (narrow["l1_ci_high"] - narrow["l1_ci_low"])).all()
    one = evaluate(**_kw(mechanisms=["identity"], trials=1, workload_seeds=[0]))
    assert (one["runs"] == 1).all() and one["l1_ci_low"].isna().all()


def test_relative_error_uses_gamma():
    raw = evaluate(**_kw(mechanisms=["identity"], gamma=1e9, raw=True))
    # all true answers are far below γ, so rel = l1 / γ
    np.testing.assert_allclose(raw["rel"], raw["l1"] / 1e9, rtol=1e-12)


def test_mechanism_parameters_and_labels():
    df = evaluate(**_kw(mechanisms=["h2", ("h4", "h2", {"b": 4})], datasets={"a": _data(128)}))
    assert list(df["mechanism"].unique()) == ["h2", "h4"]
    assert not np.allclose(df[df.mechanism == "h2"]["l1"], df[df.mechanism == "h4"]["l1"])
    via_params = evaluate(**_kw(mechanisms=["h2"], datasets={"a": _data(128)}, params={"h2": {"b": 4}}))
    # same label (so the same noise seeds) as plain h2, but the override changes the strategy
    assert list(via_params["mechanism"]) == ["h2", "h2"]
    assert not np.allclose(via_params["l1"], df[df.mechanism == "h2"]["l1"])


def test_invalid_input_raises_before_any_work(monkeypatch):
    def boom(*a, **k):  # pragma: no cover - must not be reached
        raise AssertionError("work started")

    monkeypatch.setattr(ev, "_run_chunk", boom)
    cases = [
        (dict(mechanisms=["identity", "nope"]), "unknown mechanism 'nope'"),
        (dict(mechanisms=[]), "mechanisms is empty"),
        (dict(datasets={}), "datasets is empty"),
        (dict(datasets=[]), "datasets is empty"),
        (dict(workloads=[]), "workloads is empty"),
        (dict(epsilons=[]), "epsilons is empty"),
        (dict(epsilons=[1.0, 0.0]), "ε > 0"),
        (dict(epsilons=[-1]), "ε > 0"),
        (dict(epsilons=[float("nan")]), "positive finite"),
        (dict(trials=0), "trials must be an integer >= 1"),
        (dict(trials=1.5), "trials must be an integer >= 1"),
        (dict(workload_seeds=[]), "workload_seeds is empty"),
        (dict(gamma=0), "gamma must be a positive"),
        (dict(seed=-1), "seed must be a whole number >= 0"),
        (dict(n_jobs=0), "n_jobs must be an integer >= 1"),
        (dict(datasets={"bad": [1, -2, 3]}), "negative"),
        (dict(mechanisms=["identity", "identity"]), "appears twice"),
        (dict(params={"wavelet": {}}), "not among the mechanisms"),
        (dict(params={"h2": {"nope": 1}}), "bad parameters"),
        (dict(mechanisms=[("h3", "h2", {"c": 3})]), "bad parameters"),
        (dict(workloads=[workloads.all_range(7)]), "fits none of the datasets"),
    ]
    for over, msg in cases:
        with pytest.raises(ValueError, match=msg):
            evaluate(**_kw(**over))


def test_not_applicable_is_a_note():
    grid = _data(64).reshape(8, 8)
    W2 = workloads.kron([workloads.all_range(8), workloads.all_range(8)])
    df = evaluate(["identity", "greedy_h"], {"grid": grid, "line": _data(64)},
                  {"rect": W2, "uniform": uniform_ranges(50)}, [1.0], trials=2,
                  workload_seeds=[0, 1], progress=False, n_jobs=1)
    assert list(df.columns) == SUMMARY_COLUMNS and len(df) == 2 * 2 * 2
    row = df.set_index(["mechanism", "dataset", "workload"])
    assert row.loc[("identity", "grid", "rect"), "runs"] == 2 and pd.isna(row.loc[("identity", "grid", "rect"), "note"])
    assert row.loc[("greedy_h", "grid", "rect"), "runs"] == 0
    assert "1D" in row.loc[("greedy_h", "grid", "rect"), "note"]
    assert np.isnan(row.loc[("greedy_h", "grid", "rect"), "l1"])
    assert "not applicable" in row.loc[("identity", "grid", "uniform"), "note"]  # 1D ranges on 2D data
    assert row.loc[("greedy_h", "line", "uniform"), "runs"] == 4
    # a fixed 64-cell workload over the 1D data is fine; over the grid it is reused as is
    assert row.loc[("identity", "line", "rect"), "runs"] == 2


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_other_exceptions_propagate_with_context(temp_mechanism, n_jobs):
    def build(W, noise):
        raise ZeroDivisionError("boom")

    name = temp_mechanism(registry.Mechanism("test_broken", "Broken", build, "raises", "test"))
    with pytest.raises(ZeroDivisionError, match="boom") as info:
        evaluate(**_kw(mechanisms=["identity", name], n_jobs=n_jobs))
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "mechanism 'test_broken'" in notes and "dataset 'a'" in notes and "ε = " in notes
    assert len(info.value.__notes__) == 1


def test_ledger_must_record_epsilon(temp_mechanism):
    def runner(data, W, noise, rng):
        data.measure(dpx.strategies.identity(W.n), noise, rng)
        y = data.measure(dpx.strategies.identity(W.n), noise, rng)  # spends 2ε
        return registry.Estimate(y)

    name = temp_mechanism(registry.Mechanism("test_greedy_spender", "Spender", None, "2ε", "test",
                                             data_dependent=True, runner=runner))
    with pytest.raises(RuntimeError, match="privacy accounting"):
        evaluate(**_kw(mechanisms=[name]))


def test_workload_forms():
    W = workloads.random_ranges(64, 40, "uniform", 3)
    x = {"x": _data(64)}
    df = evaluate(["identity"], x, {"fixed": W, "lam": lambda n, s: workloads.prefix(n)}, [1.0],
                  trials=3, workload_seeds=[0, 1], progress=False, n_jobs=1)
    assert list(df["workload"]) == ["fixed", "lam"]
    assert list(df["runs"]) == [3, 6]  # a fixed workload is one instance
    listed = evaluate(["identity"], x, [W, lambda n, s: workloads.prefix(n)], [1.0], trials=3,
                      workload_seeds=[0, 1], progress=False, n_jobs=2)
    assert list(listed["workload"]) == [W.name, "workload1"]
    assert (listed["runs"] == df["runs"]).all()


def test_directory_of_histograms(tmp_path):
    np.save(tmp_path / "one.npy", _data(64))
    np.save(tmp_path / "two.npy", _data(32, 5))
    np.save(tmp_path / "grid.npy", _data(64).reshape(8, 8))  # 2D: skipped
    df = evaluate(["identity"], tmp_path, [uniform_ranges(20)], [1.0], trials=2, workload_seeds=[0],
                  progress=False, n_jobs=1)
    assert list(df["dataset"]) == ["one", "two"] and list(df["n"]) == [64, 32]
    with pytest.raises(ValueError, match="not a directory"):
        evaluate(["identity"], str(tmp_path / "missing"), [uniform_ranges(20)], [1.0], progress=False)


def test_dpbench_names():
    d = dpx.datasets.default_dpbench_dir()
    if d is None or not d.is_dir():
        pytest.skip("DPBench data not found")
    df = evaluate(["identity"], ["ADULT", "NETTRACE"], [uniform_ranges(100)], [0.1], trials=2,
                  workload_seeds=[0], progress=False, n_jobs=1)
    assert list(df["dataset"]) == ["ADULT", "NETTRACE"] and (df["n"] == 4096).all()
    assert (df["runs"] == 2).all() and df["note"].isna().all() and (df["l1"] > 0).all()
    with pytest.raises(ValueError, match="unknown DPBench dataset"):
        evaluate(["identity"], ["NOPE"], [uniform_ranges(100)], [0.1], progress=False)


def test_progress_bar(capsys):
    evaluate(**_kw(mechanisms=["identity"], progress=True))
    assert "evaluate" in capsys.readouterr().err


def test_dask_gives_the_same_numbers():
    distributed = pytest.importorskip("dask.distributed")
    local = evaluate(**_kw())
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                            dashboard_address=None) as client:
        remote = evaluate(**_kw(client=client))
    pd.testing.assert_frame_equal(_numbers(local), _numbers(remote))
