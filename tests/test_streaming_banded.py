"""Banded Toeplitz strategies optimised for the running total (dpexplorer.streaming.banded).

The optimised error is checked against the matrix mechanism's dense path, against the square root
of the prefix matrix (bands = T), Identity (1 band), an unconstrained search, a seeded simulation,
and under several participations at least ``bands`` steps apart.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer.core import optimization, registry
from dpexplorer.queries.matrix import Dense, Identity, Prefix
from dpexplorer.queries.toeplitz import LowerToeplitz, sqrt_prefix_column
from dpexplorer.streaming import banded as banded_module
from dpexplorer.streaming.banded import banded, prefix_objective
from dpexplorer.streaming.participation import Participation

GAUSS = dpx.Gaussian(1.0, 1e-6)
LAPLACE = dpx.Laplace(1.0)


def dense_criterion(c, T: int, objective: str, p: int) -> float:
    """The objective from dense matrices: Δ_p(C)² · (max or sum) of diag(B Bᵀ), B = L C⁻¹."""
    c = np.concatenate([c, np.zeros(T - len(c))])
    C = np.array([[c[t - s] if s <= t else 0.0 for s in range(T)] for t in range(T)])
    B = np.tril(np.ones((T, T))) @ np.linalg.inv(C)
    var = (B * B).sum(axis=1)
    sens = np.linalg.norm(C, ord=p, axis=0).max()
    return float(sens**2 * (var.max() if objective == "max" else var.sum()))


# ------------------------------------------------------------------ the objective and its gradient
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 30), st.lists(st.floats(0.05, 1, allow_nan=False), min_size=30, max_size=30),
       st.integers(1, 30))
def test_prefix_objective_is_the_dense_matrix_mechanism_error(T, values, bands):
    c = np.concatenate([[1.0], values[:min(bands, T) - 1]])  # any column with c_0 ≠ 0
    C = Dense(LowerToeplitz(np.concatenate([c, np.zeros(T - c.size)])).dense())
    W = Prefix(T)
    for noise in (LAPLACE, GAUSS):
        var = dpx.error.per_query_variance(W, C, noise) / noise.variance_per_unit  # generic dense path
        assert prefix_objective(c, T, "max", noise.norm) == pytest.approx(var.max(), rel=1e-9)
        assert prefix_objective(c, T, "sum", noise.norm) == pytest.approx(var.sum(), rel=1e-9)
        assert prefix_objective(c, T, "sum", noise.norm) == pytest.approx(var.sum(), rel=1e-9)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("objective", ["max", "sum"])
@pytest.mark.parametrize("recurrence", [True, False])
def test_gradient_matches_finite_differences(p, objective, recurrence):
    rng = np.random.default_rng(5)
    T, n = 60, 7
    r = rng.uniform(0.3, 0.95, n - 1)
    w = banded_module._weights(T, objective)

    def F(r):
        return banded_module._evaluate(banded_module._coefficients(r), T, w, p, False, recurrence)[0]

    c = banded_module._coefficients(r)
    _, grad_c, _ = banded_module._evaluate(c, T, w, p, True, recurrence)
    grad = banded_module._ratio_gradient(r, c, grad_c)
    h = 1e-6
    fd = np.array([(F(r + h * e) - F(r - h * e)) / (2 * h) for e in np.eye(n - 1)])
    # central differences: error O(h²·F''') + O(ε·F/h) ≈ 1e-8 relative here
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())


def test_recurrence_and_fft_paths_agree():
    rng = np.random.default_rng(2)
    for T, n in [(5, 5), (300, 9), (1000, 130)]:
        c = banded_module._coefficients(rng.uniform(0.2, 1.0, n - 1))
        w = banded_module._weights(T, "sum")
        a = banded_module._evaluate(c, T, w, 2, True, recurrence=True)
        b = banded_module._evaluate(c, T, w, 2, True, recurrence=False)
        assert a[0] == pytest.approx(b[0], rel=1e-12) and a[2] == pytest.approx(b[2], rel=1e-12)
        np.testing.assert_allclose(a[1], b[1], rtol=1e-9, atol=1e-12 * np.abs(a[1]).max())


# ------------------------------------------------------------------ the optimised strategy
@pytest.mark.parametrize("objective", ["max", "sum"])
@pytest.mark.parametrize("noise", [GAUSS, LAPLACE], ids=["gaussian", "laplace"])
def test_banded_structure_scale_and_record(objective, noise):
    T, bands = 200, 6
    reports = []
    with optimization.progress(lambda *r: reports.append(r)):
        C = banded(T, bands, objective, noise.norm)
    c = C.column
    assert isinstance(C, LowerToeplitz) and C.name == "banded" and C.shape == (T, T)
    assert np.all(c[bands:] == 0) and np.all(c >= 0) and np.all(np.diff(c[:bands]) <= 0)
    if noise.norm == 2:
        assert np.all(c[:bands] > 0)  # every band used
    else:  # under Laplace noise the best banded strategy is Identity (next test)
        np.testing.assert_array_equal(c, np.eye(1, T, 0)[0])
    assert C.sensitivity(noise.norm) == pytest.approx(1.0, rel=1e-12)
    D = C.dense()
    assert np.array_equal(D, np.tril(D)) and not np.any(np.tril(D, -bands))  # lower-triangular, banded
    opt = C.optimization
    W = dpx.streaming.continual(T)
    assert opt.objective == pytest.approx(dpx.error.unit_tse(W, C, noise.norm), rel=1e-10)
    assert opt.trace[-1] == pytest.approx(opt.objective, rel=1e-10)
    assert opt.info["criterion_final"] <= opt.info["criterion_start"]
    if noise.norm == 2:
        assert opt.info["criterion_final"] < 0.9 * opt.info["criterion_start"]  # the start is not optimal
    assert opt.info["criterion_final"] == pytest.approx(
        prefix_objective(c[:bands], T, objective, noise.norm), rel=1e-10)
    assert reports and reports[-1][1] == reports[-1][2]


def test_under_laplace_noise_the_best_banded_strategy_is_identity():
    # Δ₁ = Σ|c_j| ≥ |c(1)| while the running total's last answer has variance → T / c(1)²: the L1
    # objective cannot fall below Identity's T; a signed search from several starts finds nothing better
    T, bands = 32, 4
    rng = np.random.default_rng(4)
    for objective in ("max", "sum"):
        ours = banded(T, bands, objective, 1).optimization.info["criterion_final"]
        assert ours == pytest.approx(T if objective == "max" else T * (T + 1) / 2, rel=1e-12)  # Identity's

        def f(x, objective=objective):
            with np.errstate(all="ignore"):
                v = dense_criterion(np.concatenate([[1.0], x]), T, objective, 1)
            return v if np.isfinite(v) and v < 1e12 else 1e12

        found = min(scipy.optimize.minimize(f, x0, method="Nelder-Mead",
                                            options={"xatol": 1e-10, "fatol": 1e-12}).fun
                    for x0 in rng.uniform(-1, 1, (4, bands - 1)))
        assert ours <= found * (1 + 1e-9)


def test_all_bands_match_or_beat_toeplitz_sqrt_on_its_objective():
    for T in (64, 128):
        sqrt = dpx.streaming.toeplitz_sqrt(T)
        var = dpx.error.per_query_variance(dpx.streaming.continual(T), sqrt, GAUSS) / GAUSS.variance_per_unit
        best_max = banded(T, T, "max").optimization.info["criterion_final"]
        best_sum = banded(T, T, "sum").optimization.info["criterion_final"]
        assert best_max <= var.max() * (1 + 1e-12)
        # the square root is optimal for the max error (Dvijotham, McMahan, Pillutla, Steinke &
        # Thakurta 2024): the search finds nothing better
        assert best_max == pytest.approx(var.max(), rel=1e-9)
        assert best_sum < var.sum() * (1 - 1e-3)  # but not for the total (mean) error


def test_one_band_is_identity():
    T = 50
    for noise in (GAUSS, LAPLACE):
        C = banded(T, 1, noise_norm=noise.norm)
        np.testing.assert_array_equal(C.column, np.eye(1, T, 0)[0])
        W = dpx.streaming.continual(T)
        assert dpx.error.rmse(W, C, noise) == pytest.approx(dpx.error.rmse(W, Identity(T), noise), rel=1e-12)
        assert C.optimization.info["criterion_final"] == pytest.approx(T, rel=1e-12)  # max: Var of step T-1


def test_compare_can_ask_for_either_objective():
    T = 128
    b = banded(T, 6, "sum")
    assert b.optimization.info["criterion_final"] == pytest.approx(b.optimization.objective, rel=1e-12)
    for objective in ("sum", "max"):  # dpx.compare passes its objective to builders that take one
        table = dpx.compare(dpx.streaming.continual(32), GAUSS, mechanisms=["banded", "identity"],
                            objective=objective).set_index("mechanism")
        assert table.loc["banded", "rmse"] < table.loc["identity", "rmse"]


def test_more_bands_than_steps_is_no_constraint():
    a, b = banded(8, 20), banded(8, 8)
    np.testing.assert_array_equal(a.column, b.column)
    assert a.optimization.info["coefficients"] == 8 and a.optimization.info["bands"] == 20


def test_error_decreases_with_bands():
    T = 512
    values = [banded(T, n).optimization.info["criterion_final"] for n in (1, 2, 4, 8, 16)]
    assert all(b < a for a, b in zip(values, values[1:], strict=False))


@pytest.mark.parametrize("objective", ["max", "sum"])
def test_the_monotone_search_loses_nothing_against_an_unconstrained_one(objective):
    # the banded search keeps c non-negative and non-increasing; an unconstrained search over
    # (c_1, c_2, c_3) from several starts, on the dense objective, finds nothing better
    T, bands = 64, 4
    ours = banded(T, bands, objective).optimization.info["criterion_final"]
    rng = np.random.default_rng(11)

    def f(x):
        with np.errstate(all="ignore"):
            v = dense_criterion(np.concatenate([[1.0], x]), T, objective, 2)
        return v if np.isfinite(v) and v < 1e12 else 1e12

    found = min(scipy.optimize.minimize(f, x0, method="L-BFGS-B").fun
                for x0 in [sqrt_prefix_column(bands)[1:], *rng.uniform(-1, 1, (3, bands - 1))])
    assert ours <= found * (1 + 1e-7)  # L-BFGS-B with finite differences stops ~1e-8 short


def test_k_participations_at_separation_at_least_bands_scale_the_sensitivity_by_root_k():
    T, bands = 256, 8
    C = banded(T, bands)
    W = dpx.streaming.continual(T)
    for k, b in [(2, 8), (4, 64), (3, 100), (5, 8)]:
        assert (k - 1) * b <= T - bands  # k full-length columns fit
        A = Participation(C, k, b)
        assert A.sensitivity(2) == pytest.approx(math.sqrt(k) * C.sensitivity(2), rel=1e-12)
        assert A.sensitivity(1) == pytest.approx(k * C.sensitivity(1), rel=1e-12)
        assert A.details(2).exact and A.details(1).exact
        assert dpx.error.rmse(W, A, GAUSS) == pytest.approx(math.sqrt(k) * dpx.error.rmse(W, C, GAUSS),
                                                            rel=1e-12)
    # closer participations overlap: more than √k, still exact (non-negative, non-increasing column)
    d = Participation(C, 4, 3).details(2)
    assert d.exact and d.value > 2 * C.sensitivity(2)


def test_analytic_error_matches_a_seeded_simulation():
    T, bands, trials = 16, 4, 1000
    W = dpx.streaming.continual(T)
    x = np.arange(T) % 5
    truth = np.cumsum(x)
    errors = np.array([dpx.simulate(x, W, "banded", GAUSS, seed=s, params={"bands": bands}).answers - truth
                       for s in range(trials)])
    A = registry.get("banded").strategy(W, GAUSS, bands=bands)
    # error vector per trial: B z with z ~ N(0, σ² I), B = L C⁻¹; Σ = σ² B Bᵀ exactly
    B = np.tril(np.ones((T, T))) @ np.linalg.inv(A.dense())
    sigma2 = GAUSS.variance_per_unit * A.sensitivity(2) ** 2
    Sigma = sigma2 * B @ B.T
    mse = np.trace(Sigma) / T
    assert mse == pytest.approx(dpx.error.rmse(W, A, GAUSS) ** 2, rel=1e-10)
    # the empirical MSE over trials has variance 2 tr(Σ²) / (trials · T²) (Gaussian quadratic form);
    # 4.5 standard deviations: false failure ≈ 7e-6 (normal approximation over 1000 trials)
    sd = math.sqrt(2 * np.trace(Sigma @ Sigma) / (trials * T * T))
    assert abs(np.mean(errors**2) - mse) <= 4.5 * sd
    # the last (worst) step: its variance estimate has variance 2 σ_T⁴ / trials; same 4.5
    last = Sigma[-1, -1]
    assert abs(np.mean(errors[:, -1] ** 2) - last) <= 4.5 * last * math.sqrt(2 / trials)
    assert last == pytest.approx(dpx.error.per_query_variance(W, A, GAUSS).max(), rel=1e-10)


# ------------------------------------------------------------------ the registry entry
def test_registry_entry():
    mech = registry.get("banded")
    assert mech.label == "Banded" and mech.params == {"bands": 8, "objective": "max"}
    assert mech.optimizer and mech.online and mech.structured_1d is True and not mech.data_dependent
    spec = mech.audit_spec()
    assert (spec.workload, spec.cells, spec.noise, spec.case) == ("prefix", 8, "gaussian", "one_cell")
    assert mech.not_applicable(dpx.workloads.all_range(8), GAUSS) is not None
    for noise in (GAUSS, LAPLACE):
        assert mech.not_applicable(dpx.streaming.continual(8), noise) is None
        A = mech.strategy(dpx.streaming.continual(64), noise, bands=4, objective="sum")
        assert A.name == "banded" and A.sensitivity(noise.norm) == pytest.approx(1.0, rel=1e-12)
        assert A.optimization.info["objective"] == "sum" and A.optimization.info["norm"] == noise.norm
    with pytest.raises(ValueError, match="unknown parameter"):
        mech.strategy(dpx.streaming.continual(8), GAUSS, band=3)


# ------------------------------------------------------------------ bad input
def test_bad_arguments_are_refused_with_what_is_allowed():
    for kwargs, exc, words in [({"bands": 0}, ValueError, "at least 1"),
                               ({"bands": 2.5}, TypeError, "whole number"),
                               ({"bands": True}, TypeError, "whole number"),
                               ({"bands": 2, "objective": "mean"}, ValueError, "'max'.*'sum'"),
                               ({"bands": 2, "noise_norm": 3}, ValueError, "1 \\(Laplace"),
                               ({"bands": 2, "maxiter": 0}, ValueError, "maxiter")]:
        with pytest.raises(exc, match=words):
            banded(16, **kwargs)
    with pytest.raises(ValueError, match="T"):
        banded(0, 2)
    with pytest.raises(ValueError, match="singular"):
        prefix_objective([0.0, 1.0])
    with pytest.raises(ValueError, match="fewer than"):
        prefix_objective([1.0, 0.5, 0.2], T=2)
