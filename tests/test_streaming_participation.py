"""Sensitivity under several participations at least b steps apart (dpexplorer.streaming.participation).

Every exact case is checked against a brute force written here, independently of the module: every
set of 1..k steps pairwise >= b apart, ``max ‖C u‖_p`` over their indicator vectors ``u``.  Every
upper bound is checked never to fall below that maximum (a lower value would add too little noise).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer.queries.matrix import Dense, Identity, Prefix, Weighted
from dpexplorer.queries.toeplitz import LowerToeplitz, sqrt_prefix_column
from dpexplorer.streaming import participation
from dpexplorer.streaming.participation import (
    Participation,
    best_pattern_sum,
    max_participations,
    participation_sensitivity,
    pattern_count,
    sensitivity_details,
)

#: Relative slack for comparing two float computations of the same maximum (sums of at most 12² terms).
RTOL = 1e-10


def all_patterns(T: int, k: int, b: int):
    """Every non-empty set of at most k steps of 0..T-1 with consecutive steps at least b apart."""
    for m in range(1, k + 1):
        for P in itertools.combinations(range(T), m):
            if all(P[i + 1] - P[i] >= b for i in range(m - 1)):
                yield P


def brute_force(D: np.ndarray, k: int, b: int, p: int) -> float:
    T = D.shape[1]
    best = 0.0
    for P in all_patterns(T, k, b):
        u = np.zeros(T)
        u[list(P)] = 1.0
        best = max(best, float(np.linalg.norm(D @ u, ord=p)))
    return best


def lower_toeplitz_dense(c) -> np.ndarray:
    T = len(c)
    return np.array([[c[t - s] if s <= t else 0.0 for s in range(T)] for t in range(T)])


sizes = st.tuples(st.integers(1, 12), st.integers(1, 4), st.integers(1, 6))
unit = st.floats(0, 1, allow_nan=False, allow_subnormal=False)


# ------------------------------------------------------------------ exact cases
@settings(max_examples=80, deadline=None)
@given(sizes, st.lists(unit, min_size=12, max_size=12), st.sampled_from([1, 2]))
def test_monotone_toeplitz_is_exact_and_its_worst_pattern_is_0_b_2b(size, values, p):
    T, k, b = size
    c = np.sort(np.asarray(values[:T]))[::-1]  # non-negative, non-increasing
    C = LowerToeplitz(c)
    d = sensitivity_details(C, k, b, p)
    truth = brute_force(lower_toeplitz_dense(c), k, b, p)
    assert d.exact
    assert d.value == pytest.approx(truth, rel=RTOL, abs=1e-12)
    if d.participations > 1:
        assert d.method == "toeplitz_monotone"
        assert d.pattern == tuple(range(0, (d.participations - 1) * b + 1, b))


@settings(max_examples=80, deadline=None)
@given(sizes, st.lists(st.floats(-1, 1, allow_nan=False, allow_subnormal=False), min_size=12, max_size=12),
       st.sampled_from([1, 2]))
def test_any_toeplitz_on_small_T_is_exact(size, values, p):
    T, k, b = size
    c = np.asarray(values[:T])
    d = sensitivity_details(LowerToeplitz(c), k, b, p)
    assert d.exact  # few patterns: evaluated one by one when no closed form applies
    assert d.value == pytest.approx(brute_force(lower_toeplitz_dense(c), k, b, p), rel=RTOL, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(sizes, st.integers(1, 6), st.integers(1, 8), st.integers(0, 2**31 - 1), st.sampled_from([1, 2]))
def test_banded_random_C_with_bands_at_most_b_is_exact(size, bands, rows_extra, seed, p):
    T, k, b = size
    bands = min(bands, b)
    rng = np.random.default_rng(seed)
    D = np.tril(rng.normal(size=(T, T))) * (np.subtract.outer(np.arange(T), np.arange(T)) < bands)
    with pytest.MonkeyPatch.context() as mp:  # the structural rule, not the enumeration, must find it
        mp.setattr(participation, "BRUTE_FORCE_PATTERNS", 0)
        d = sensitivity_details(Dense(D), k, b, p)
    # a closed form found it (an L1 one-sign rule may come first when every column has one sign)
    assert d.exact and d.method in ("orthogonal_columns", "disjoint_columns", "single", "one_sign")
    assert d.value == pytest.approx(brute_force(D, k, b, p), rel=RTOL, abs=1e-12)


def test_banded_toeplitz_sensitivity_is_root_k_times_the_column_norm():
    # (k'−1)·b ≤ T − bands: k full-length columns fit, Δ₂ = √k·‖c‖₂ (Choquette-Choo et al. 2023, Sec. 4)
    rng = np.random.default_rng(3)
    T, bands = 4096, 16
    c = np.zeros(T)
    c[:bands] = rng.normal(size=bands)  # signs mixed: no Toeplitz monotone rule
    C = LowerToeplitz(c)
    for k, b in [(2, 16), (4, 1024), (3, 100)]:
        d = sensitivity_details(C, k, b, 2)
        assert d.exact and d.method == "orthogonal_columns"
        assert d.value == pytest.approx(math.sqrt(k) * np.linalg.norm(c[:bands]), rel=1e-12)
        d1 = sensitivity_details(C, k, b, 1)
        assert d1.exact and d1.value == pytest.approx(k * np.abs(c).sum(), rel=1e-12)


def test_k_equal_1_is_the_plain_sensitivity():
    rng = np.random.default_rng(0)
    mats = [LowerToeplitz(rng.normal(size=20)), Dense(rng.normal(size=(7, 20))), Prefix(20), Identity(20),
            Weighted(LowerToeplitz(sqrt_prefix_column(20)), -2.5), dpx.workloads.all_range(20)]
    for C in mats:
        for p in (1, 2):
            for b in (1, 3, 40):
                d = sensitivity_details(C, 1, b, p)
                assert d.exact and d.value == pytest.approx(C.sensitivity(p), rel=1e-12)
            # b ≥ T: only one participation fits whatever k is
            assert participation_sensitivity(C, 5, C.n, p) == pytest.approx(C.sensitivity(p), rel=1e-12)


def test_non_negative_but_increasing_column_is_not_0_b_2b():
    # the monotone theorem needs a non-increasing column: here {0, 3} beats {0, 2}
    c = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    d = sensitivity_details(LowerToeplitz(c), 2, 2, 2)
    assert d.exact and d.method == "brute_force" and d.pattern == (0, 3)
    assert d.value == pytest.approx(math.sqrt(5), rel=1e-14)
    assert d.value > np.linalg.norm(lower_toeplitz_dense(c) @ np.array([1, 0, 1, 0, 0, 0.]))


def test_large_monotone_toeplitz_matches_a_direct_sum_of_shifted_columns():
    T, k, b = 2**16, 4, 2**14
    c = sqrt_prefix_column(T)
    y = np.zeros(T)  # C (e_0 + e_b + e_2b + e_3b), shifted copies of c
    for l in range(k):
        y[l * b:] += c[:T - l * b]
    d = sensitivity_details(LowerToeplitz(c), k, b, 2)
    assert d.exact and d.method == "toeplitz_monotone"
    assert d.value == pytest.approx(np.linalg.norm(y), rel=1e-10)
    assert d.value > LowerToeplitz(c).sensitivity(2)


# ------------------------------------------------------------------ upper bounds
@settings(max_examples=80, deadline=None)
@given(sizes, st.integers(0, 2**31 - 1), st.sampled_from(["toeplitz", "dense", "wide"]),
       st.sampled_from([1, 2]))
def test_bounds_are_never_below_the_true_sensitivity(size, seed, kind, p):
    T, k, b = size
    rng = np.random.default_rng(seed)
    if kind == "toeplitz":
        C = LowerToeplitz(rng.normal(size=T))
    elif kind == "dense":
        C = Dense(np.tril(rng.normal(size=(T, T))))
    else:
        C = Dense(rng.normal(size=(2 * T + 1, T)))
    truth = brute_force(C.dense(), k, b, p)
    with pytest.MonkeyPatch.context() as mp:  # no enumeration: the bounds (or a structural rule)
        mp.setattr(participation, "BRUTE_FORCE_PATTERNS", 0)
        d = sensitivity_details(C, k, b, p)
    assert d.value >= truth * (1 - RTOL) - 1e-12
    if d.exact:
        assert d.value == pytest.approx(truth, rel=RTOL, abs=1e-12)
    else:
        assert d.method in ("toeplitz_majorant", "row_bound", "triangle_inequality") and d.pattern is None


def test_the_row_bound_is_below_the_papers_absolute_value_bound_and_above_the_truth():
    # Choquette-Choo et al. 2023, Algorithm 4 bounds with |CᵀC| (contributions of any sign); counts
    # (u ∈ {0, 1}^T) need no absolute values, which can only lower the bound -- never below the truth
    rng = np.random.default_rng(7)
    T, k, b = 11, 3, 2
    lower = 0
    for _ in range(20):
        D = rng.normal(size=(T + 3, T))
        G = D.T @ D

        def best(w):  # max over patterns (or none) of Σ w_j, by enumeration
            return max(0.0, max(sum(w[j] for j in P) for P in all_patterns(T, k, b)))

        paper = math.sqrt(best([best(np.abs(G[i])) for i in range(T)]))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(participation, "BRUTE_FORCE_PATTERNS", 0)
            d = sensitivity_details(Dense(D), k, b, 2)
        assert d.method == "row_bound" and not d.exact
        assert brute_force(D, k, b, 2) * (1 - RTOL) <= d.value <= paper * (1 + RTOL)
        lower += d.value < paper * (1 - 1e-6)
    assert lower > 0  # signed Gram entries: strictly tighter on some draws


def test_a_bound_is_labelled_and_above_the_value_on_a_large_oscillating_toeplitz():
    T, k, b = 2048, 3, 5
    c = np.zeros(T)
    c[:12] = [1, -0.6, 0.5, -0.4, 0.3, 0.25, -0.2, 0.1, 0.1, -0.05, 0.02, 0.01]  # 12 bands > b
    C = LowerToeplitz(c)
    d = sensitivity_details(C, k, b, 2)
    assert not d.exact and d.method == "toeplitz_majorant"
    # the true value is at least that of any one pattern, e.g. the best over patterns in the first 40 steps
    head = Dense(C.dense()[:, :40])
    assert d.value >= brute_force(head.dense(), k, b, 2)


# ------------------------------------------------------------------ helpers
@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False, allow_subnormal=False), min_size=1, max_size=12),
       st.integers(1, 4), st.integers(1, 5))
def test_best_pattern_sum_is_the_maximum_over_every_pattern(w, k, b):
    value, pattern = best_pattern_sum(w, k, b)
    truth = max(sum(w[i] for i in P) for P in all_patterns(len(w), k, b))
    assert value == pytest.approx(truth, rel=1e-12, abs=1e-12)
    assert 1 <= len(pattern) <= k and all(q - p >= b for p, q in zip(pattern, pattern[1:], strict=False))
    assert sum(w[i] for i in pattern) == pytest.approx(value, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("T,k,b", [(1, 1, 1), (12, 4, 1), (12, 3, 5), (10, 9, 2), (7, 2, 7), (30, 4, 6)])
def test_pattern_count_and_max_participations(T, k, b):
    pats = list(all_patterns(T, k, b))
    assert pattern_count(T, k, b) == len(pats)
    assert max_participations(T, k, b) == max(len(P) for P in pats)


# ------------------------------------------------------------------ the Participation wrapper
def test_participation_behaves_as_its_strategy_but_for_the_sensitivity():
    T, k, b = 64, 3, 8
    C = LowerToeplitz(sqrt_prefix_column(T), name="sqrt")
    A = Participation(C, k, b)
    x = np.random.default_rng(1).normal(size=T)
    assert A.shape == C.shape and A.name == "sqrt" and A.domain == C.domain
    np.testing.assert_array_equal(A.matvec(x), C.matvec(x))
    np.testing.assert_array_equal(A.rmatvec(x), C.rmatvec(x))
    np.testing.assert_array_equal(A.dense(), C.dense())
    for p in (1, 2):
        np.testing.assert_array_equal(A.column_norms(p), C.column_norms(p))
        assert A.sensitivity(p) == participation_sensitivity(C, k, b, p) > C.sensitivity(p)
    assert A.details(2).exact
    # error and per-step variance scale by (Δ_part / Δ_single)², through C's O(T log T) hooks
    W, noise = dpx.streaming.continual(T), dpx.Gaussian(1.0, 1e-6)
    ratio = A.sensitivity(2) / C.sensitivity(2)
    assert dpx.error.rmse(W, A, noise) == pytest.approx(ratio * dpx.error.rmse(W, C, noise), rel=1e-12)
    np.testing.assert_allclose(dpx.error.per_query_variance(W, A, noise),
                               ratio**2 * dpx.error.per_query_variance(W, C, noise), rtol=1e-12)
    # and the dense path agrees with the hooks
    assert dpx.error.rmse(W, Participation(Dense(C.dense()), k, b), noise) == \
        pytest.approx(dpx.error.rmse(W, A, noise), rel=1e-9)


def test_participation_at_large_T_needs_no_T_by_T_matrix():
    T = 2**16
    A = Participation(LowerToeplitz(sqrt_prefix_column(T)), 4, T // 4)
    W = dpx.streaming.continual(T)
    r = dpx.error.rmse(W, A, dpx.Gaussian(1.0, 1e-6))
    assert np.isfinite(r) and A.details(2).method == "toeplitz_monotone"


def test_a_simulation_calibrates_its_noise_to_the_participation_sensitivity():
    T, k, b = 8, 2, 3
    C = LowerToeplitz(sqrt_prefix_column(T))
    A = Participation(C, k, b)
    noise = dpx.Gaussian(1.0, 1e-6)
    rel = dpx.simulate(np.arange(T) % 4, dpx.streaming.continual(T), A, noise, seed=0)
    plain = dpx.simulate(np.arange(T) % 4, dpx.streaming.continual(T), C, noise, seed=0)
    ratio = A.sensitivity(2) / C.sensitivity(2)
    assert ratio > 1.2
    assert rel.analytic_rmse == pytest.approx(ratio * plain.analytic_rmse, rel=1e-12)
    truth = np.cumsum(np.arange(T) % 4)
    # same seed, same standard normal draws: the noise is the plain one times the ratio
    np.testing.assert_allclose(rel.answers - truth, ratio * (plain.answers - truth), rtol=1e-9, atol=1e-9)


# ------------------------------------------------------------------ bad input
def test_bad_arguments_are_refused_with_what_is_allowed():
    C = LowerToeplitz([1.0, 0.5])
    for k, b, exc, words in [(0, 1, ValueError, "k .*at least 1"), (1, 0, ValueError, "b .*at least 1"),
                             (1.5, 1, TypeError, "whole number"), (2, True, TypeError, "whole number")]:
        with pytest.raises(exc, match=words):
            participation_sensitivity(C, k, b)
        with pytest.raises(exc, match=words):
            Participation(C, k, b)
    with pytest.raises(ValueError, match="p must be 1"):
        participation_sensitivity(C, 2, 1, p=3)
    with pytest.raises(TypeError, match="already a Participation"):
        Participation(Participation(C, 2, 1), 2, 1)
    with pytest.raises(ValueError, match="finite non-empty"):
        best_pattern_sum([np.nan], 1, 1)


def test_compare_scales_every_strategy_to_a_persons_participations():
    """``dpx.compare(..., participations=k, separation=b)``: each data-independent mechanism's RMSE
    and worst step are those of ``Participation(A, k, b)`` (its strategy with the participation
    sensitivity), the data-dependent ones are refused in words, and the bounds stay one cell's
    (lower bounds still: a person's sensitivity is at least one cell's)."""
    T, k, b = 64, 3, 16
    W = dpx.streaming.continual(T)
    noise = dpx.Gaussian(1.0, 1e-6)
    one = dpx.compare(W, noise, ["toeplitz_sqrt", "h2", "dawa"], objective="max").set_index("mechanism")
    several = dpx.compare(W, noise, ["toeplitz_sqrt", "h2", "dawa"], objective="max",
                          participations=k, separation=b)
    assert several.attrs["participations"] == k and several.attrs["separation"] == b
    assert several.attrs["svd_bound"] == pytest.approx(one.attrs["svd_bound"])
    several = several.set_index("mechanism")
    for name in ("toeplitz_sqrt", "h2"):
        A = dpx.registry.get(name).strategy(W, noise)
        P = Participation(A, k, b)
        assert several.loc[name, "rmse"] == pytest.approx(dpx.error.rmse(W, P, noise), rel=1e-9)
        assert several.loc[name, "max_std"] == pytest.approx(dpx.per_query_rmse(W, P, noise).max(), rel=1e-9)
        assert several.loc[name, "sensitivity"] == pytest.approx(P.sensitivity(2), rel=1e-12)
        assert several.loc[name, "rmse"] > one.loc[name, "rmse"]
    assert several.loc["toeplitz_sqrt", "note"] == ""  # exact: a monotone Toeplitz column
    assert math.isnan(several.loc["dawa", "rmse"]) and "participations" in several.loc["dawa", "note"]
    same = dpx.compare(W, noise, ["toeplitz_sqrt"], participations=4, separation=T)  # one fits
    assert same.loc[0, "rmse"] == pytest.approx(one.loc["toeplitz_sqrt", "rmse"])
    with pytest.raises(ValueError, match="participations"):
        dpx.compare(W, noise, ["toeplitz_sqrt"], participations=0)
