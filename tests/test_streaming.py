"""Continual counting in the registry: the causal scope, the ``online`` fact, the compare
table's ``online`` column, and ``toeplitz_sqrt`` released through the matrix mechanism."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer import audit as aud
from dpexplorer.core import registry
from dpexplorer.queries.toeplitz import sqrt_prefix_column
from dpexplorer.streaming import workload

GAUSS = dpx.Gaussian(1.0, 1e-6)


def test_the_continual_workload_is_the_running_total():
    W = dpx.streaming.continual(6)
    assert W.name == "continual" and W.shape == (6, 6)
    np.testing.assert_array_equal(W.dense(), np.tril(np.ones((6, 6))))
    with pytest.raises(ValueError, match="number of steps"):
        dpx.streaming.continual(0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(0, 2**31 - 1), st.sampled_from(["lower", "upper", "zero_diag"]))
def test_causal_means_square_lower_triangular_with_a_nonzero_diagonal(T, seed, kind):
    rng = np.random.default_rng(seed)
    M = np.tril(rng.integers(1, 4, (T, T)).astype(float))
    if kind == "upper" and T > 1:
        M[0, T - 1] = 1.0
    if kind == "zero_diag":
        M[rng.integers(T), :] = 0.0
    expected = kind == "lower" or (kind == "upper" and T == 1)
    assert workload.is_causal(M) is expected
    assert workload.is_causal(M[:, :-1] if T > 1 else np.ones((2, 1))) is False  # not square


def test_the_scope_refuses_workloads_that_are_not_counts_over_time():
    for W in (dpx.workloads.all_range(8), dpx.workloads.marginals((2, 2), 1), dpx.workloads.total(4)):
        why = registry.get("toeplitz_sqrt").not_applicable(W, GAUSS)
        assert why and "lower-triangular" in why and repr(W.name) in why
        with pytest.raises(registry.NotApplicableError):
            registry.get("toeplitz_sqrt").strategy(W, GAUSS)
    for W in (dpx.workloads.prefix(8), dpx.workloads.identity(8), dpx.streaming.continual(2**20)):
        assert registry.get("toeplitz_sqrt").not_applicable(W, GAUSS) is None


def test_online_is_a_registry_fact_and_a_compare_column():
    online = registry.names(online=True)
    assert {"toeplitz_sqrt", "identity", "workload"} <= set(online)
    assert not {"h2", "hb", "wavelet", "greedy_h", "opt0", "dawa", "kary_tree"} & set(online)
    with pytest.raises(TypeError, match="online"):
        registry.register(registry.Mechanism("bad_online", "Bad", lambda W, noise: W, "d", "s", online=1))
    assert "bad_online" not in registry.REGISTRY
    names = ["toeplitz_sqrt", "h2", "identity", "workload"]
    df = dpx.compare(dpx.streaming.continual(64), GAUSS, mechanisms=names).set_index("mechanism")
    assert df["online"].to_dict() == {"toeplitz_sqrt": True, "h2": False, "identity": True, "workload": True}
    # a workload that is not causal: nothing is released step by step, and √L is out of scope
    df = dpx.compare(dpx.workloads.all_range(64), GAUSS, mechanisms=names).set_index("mechanism")
    assert not df["online"].any()
    assert math.isnan(df.loc["toeplitz_sqrt", "rmse"]) and "lower-triangular" in df.loc["toeplitz_sqrt", "note"]


def test_toeplitz_sqrt_is_the_square_root_and_its_per_step_error_is_the_closed_form():
    """Per-step variance σ²·Σ_{j≤t} f_j²·Σ_{j<T} f_j² (Fichtenberger, Henzinger & Upadhyay,
    ICML 2023, Sec. 3) through the registry, relative error 1e-9, at T = 2**10 and 2**20."""
    for T in (2**10, 2**20):
        W = dpx.streaming.continual(T)
        A = registry.get("toeplitz_sqrt").strategy(W, GAUSS)
        assert A.shape == (T, T) and A.name == "toeplitz_sqrt"
        f = sqrt_prefix_column(T)
        closed = GAUSS.variance_per_unit * np.cumsum(f * f) * (f * f).sum()
        np.testing.assert_allclose(dpx.error.per_query_variance(W, A, GAUSS), closed, rtol=1e-9)
    small = registry.get("toeplitz_sqrt").strategy(dpx.streaming.continual(32), GAUSS).dense()
    np.testing.assert_allclose(small @ small, np.tril(np.ones((32, 32))), atol=1e-12)


def test_a_seeded_simulation_of_toeplitz_sqrt_has_its_analytic_error():
    """400 seeded simulations (not releases) through dpx.simulate at T = 64: the mean total
    squared error within 6 standard errors (estimated from the trials) of the analytic TSE;
    fails by chance with probability about 2e-9 (normal approximation)."""
    T, trials = 64, 400
    W = dpx.streaming.continual(T)
    x = np.random.default_rng(7).integers(0, 30, T)
    truth = W.matvec(x.astype(float))
    sq = np.array([((dpx.simulate(x, W, "toeplitz_sqrt", GAUSS, seed=s).answers - truth) ** 2).sum()
                   for s in range(trials)])
    A = registry.get("toeplitz_sqrt").strategy(W, GAUSS)
    analytic = dpx.error.expected_tse(W, A, GAUSS)
    assert abs(sq.mean() - analytic) < 6 * sq.std(ddof=1) / math.sqrt(trials), (sq.mean(), analytic)


def test_streaming_audit_cases_run_on_the_running_total():
    spec = registry.AuditSpec(workload="prefix", cells=8)
    np.testing.assert_array_equal(aud.case_workload(spec).dense(), np.tril(np.ones((8, 8))))
    (case,) = aud.cases("toeplitz_sqrt")
    assert case.W.shape == (8, 8) and registry.get("toeplitz_sqrt").not_applicable(case.W, dpx.Laplace(1.0)) is None
    with pytest.raises(ValueError, match="workload"):
        registry.AuditSpec(workload="all")


def test_the_factorisation_lower_bound_holds_for_every_strategy_and_is_close_for_the_square_root():
    """γ₂(L) ≥ (2 + ln((2T+1)/3))/π (Matoušek, Nikolov & Talwar, IMRN 2020): the largest
    per-step std of every strategy (online or not) on the running total is at least
    sqrt(v)·bound; the square root's is within an additive constant of it (ln(T)/π + O(1):
    the gap stays below 0.6 from T = 2 to 2**20)."""
    from dpexplorer.streaming import bounds

    for T in (1, 2, 3, 16, 100, 256):
        W = dpx.streaming.continual(T)
        bound = bounds.max_std_lower_bound(T, GAUSS)
        for name in ("toeplitz_sqrt", "identity", "workload", "h2", "hb", "wavelet"):
            A = registry.get(name).strategy(W, GAUSS)
            worst = math.sqrt(dpx.error.per_query_variance(W, A, GAUSS).max())
            assert worst >= bound * (1 - 1e-12), (T, name, worst, bound)
    sigma = math.sqrt(GAUSS.variance_per_unit)
    gaps = []
    for k in range(1, 21):
        f = sqrt_prefix_column(2**k)
        gaps.append((f * f).sum() - bounds.gamma2_lower_bound(2**k))  # max std / σ = Σ f_j²
        assert math.isclose(bounds.max_std_lower_bound(2**k, GAUSS), sigma * bounds.gamma2_lower_bound(2**k))
    assert 0 < min(gaps) and max(gaps) < 0.6
    assert bounds.gamma2_lower_bound(1) == pytest.approx(2 / math.pi)
    with pytest.raises(ValueError, match="number of steps"):
        bounds.gamma2_lower_bound(0)


def test_compare_gives_the_factorisation_bound_of_the_running_total():
    df = dpx.compare(dpx.streaming.continual(128), GAUSS, ["toeplitz_sqrt", "h2"], objective="max")
    from dpexplorer.streaming import bounds

    assert df.attrs["max_std_bound"] == bounds.max_std_lower_bound(128, GAUSS)
    assert (df["max_std"] >= df.attrs["max_std_bound"]).all()
    assert math.isnan(dpx.compare(dpx.workloads.all_range(16), GAUSS, ["h2"]).attrs["max_std_bound"])


def test_step_errors_are_each_strategys_per_step_std_at_the_kept_steps():
    from dpexplorer.streaming import analysis

    T = 5000
    W = dpx.streaming.continual(T)
    names = ["toeplitz_sqrt", "h2", "identity"]
    strategies = {n: registry.get(n).strategy(W, GAUSS) for n in names}
    df = analysis.step_errors(W, GAUSS, strategies, max_points=100)
    assert list(df["mechanism"].unique()) == names and len(df) == 3 * 100
    for n in names:
        part = df[df["mechanism"] == n]
        full = dpx.per_query_rmse(W, strategies[n], GAUSS)
        np.testing.assert_allclose(part["std"], full[part["step"]])
        assert part["step"].iloc[0] == 0 and part["step"].iloc[-1] == T - 1
        assert df.attrs["worst"][n] == full.max()
        assert part["online"].all() == registry.get(n).online
    assert list(analysis.sampled_steps(5, 100)) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="count over time"):
        analysis.step_errors(dpx.workloads.all_range(4), GAUSS, {})


def test_blt_memory_against_error_approaches_the_square_root():
    """BLT with more buffers is never worse on the worst step and approaches √L (within 1 % of its
    std with 4-5 buffers at T = 4096; FOCS 2024's claim that a few buffers suffice)."""
    from dpexplorer.streaming import analysis

    df = analysis.blt_tradeoff(4096, GAUSS)
    assert list(df["buffers"]) == [1, 2, 3, 4, 5] and list(df["memory"]) == [2, 3, 4, 5, 6]
    assert (np.diff(df["max_std"]) <= 1e-9 * df["max_std"].iloc[0]).all()
    assert df["ratio"].iloc[-1] < 1.01 and df["ratio"].iloc[0] > 1.05
    A = registry.get("blt").strategy(dpx.streaming.continual(4096), GAUSS, buffers=3)
    worst = math.sqrt(dpx.error.per_query_variance(dpx.streaming.continual(4096), A, GAUSS).max())
    assert df.loc[df["buffers"] == 3, "max_std"].item() == pytest.approx(worst, rel=1e-12)
    with pytest.raises(ValueError, match="Gaussian"):
        analysis.blt_tradeoff(64, dpx.Laplace(1.0))


@pytest.mark.parametrize("objective", ["sum", "max"])
def test_lt_opt_is_at_or_below_every_online_mechanism_on_its_own_objective(objective):
    """LT-Opt (the optimal lower-triangular factorisation, Denisov et al., NeurIPS 2022) against
    every registered online mechanism on the running total, Gaussian noise, T = 64: the total
    (objective "sum") or the worst step's variance ("max")."""
    T = 64
    W = dpx.streaming.continual(T)
    A = registry.get("lt_opt").strategy(W, GAUSS, objective=objective)
    best = dpx.error.per_query_variance(W, A, GAUSS)
    value = best.sum() if objective == "sum" else best.max()
    others = [n for n in registry.names(online=True) if n != "lt_opt"]
    assert {"toeplitz_sqrt", "blt", "banded", "tree_online", "identity"} <= set(others)
    for name in others:
        mech = registry.get(name)
        params = {"objective": objective} if "objective" in mech.params else {}
        var = dpx.error.per_query_variance(W, mech.strategy(W, GAUSS, **params), GAUSS)
        assert value <= (var.sum() if objective == "sum" else var.max()) * (1 + 1e-6), name
