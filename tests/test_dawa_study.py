"""Tests of dpexplorer.dawa_study: DAWA on a dataset with its non-private references (no Panel)."""

from __future__ import annotations

import numpy as np
import pytest

import dpexplorer as dpx
from dpexplorer.adaptive.dawa import dawa
from dpexplorer.adaptive.partition import optimal_partition
from dpexplorer.dawa_study import ALL_CANDIDATES_MAX_N, RANDOM_WORKLOAD, study, study_workload
from dpexplorer.privacy import PrivacyLedger, PrivateData


def _dataset(x, name="toy"):
    x = np.asarray(x, dtype=float)
    edges = tuple(np.arange(s + 1, dtype=float) for s in x.shape)
    attrs = tuple(f"a{i}" for i in range(x.ndim))
    return dpx.datasets.Dataset(name, x, edges, attrs, "a test histogram", int(x.sum()))


def test_study_workload_keeps_a_fitting_workload_else_random_ranges_or_rectangles():
    x = np.zeros(16)
    W = dpx.workloads.prefix(16)
    assert study_workload(W, x) == (W, f"the session workload `{W.name}` ({W.m:,} queries)")
    R, note = study_workload(dpx.workloads.prefix(8), x)
    assert R.m == RANDOM_WORKLOAD["m"] and R.n == 16 and "over 8 cells, not 16" in note
    R2, note2 = study_workload(None, np.zeros((4, 4)))
    assert R2.m == RANDOM_WORKLOAD["m"] and "rectangles (no session workload)" in note2


def test_study_is_dawa_with_the_seed_and_spends_only_its_throwaway_ledger():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 50, size=64).astype(float)
    ds, W = _dataset(x), dpx.workloads.all_range(64)
    run = study(ds, W, 0.8, 5, 0.25, "pow2", 0.0, noise_note="why")
    same = dawa(PrivateData(x, PrivacyLedger()), W, 0.8, np.random.default_rng(5), ratio=0.25,
                candidates="pow2", penalty=0.0)
    np.testing.assert_array_equal(run.result.x_hat, same.x_hat)
    assert [e.epsilon for e in run.spends] == pytest.approx([0.2, 0.6])
    exact, cost = optimal_partition(x, run.result.epsilon2, "pow2")
    np.testing.assert_array_equal(run.exact.edges, exact.edges)
    assert run.exact_cost == pytest.approx(cost)
    assert run.workload is W and run.noise_note == "why" and run.published is not None
    expected = dpx.error.empirical_rmse(W.matvec(run.result.x_hat), W.matvec(x))
    assert run.workload_rmse == pytest.approx(expected)


def test_study_refuses_what_it_cannot_run_in_words():
    with pytest.raises(ValueError, match="1D or 2D data"):
        study(_dataset(np.zeros((2, 2, 2))), None, 1.0, 0, 0.25, "pow2", 0.0)
    big = _dataset(np.zeros(ALL_CANDIDATES_MAX_N + 1))
    with pytest.raises(ValueError, match="use 'pow2'"):
        study(big, None, 1.0, 0, 0.25, "all", 0.0)
