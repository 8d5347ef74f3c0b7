"""Stream releases (dpx.streaming.release / simulate through dpx.privacy.PrivateStream): the whole
stream charged before the first draw, answers equal to the matrix mechanism's, causal, with the
analytic per-step error."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dpexplorer as dpx
from dpexplorer.privacy import PrivateStream

GAUSS = dpx.Gaussian(1.0, 1e-6)
ZCDP = dpx.Gaussian(1.0, 1e-6, calibration="zcdp")


def _counts(T, seed=0):
    return np.random.default_rng(seed).integers(0, 20, T)


def test_the_whole_stream_is_charged_before_the_first_step_and_refused_over_budget():
    ledger = dpx.PrivacyLedger(epsilon_budget=1.5)
    pulled = []

    def counts():
        for value in _counts(32):
            pulled.append(value)
            yield int(value)

    lap = dpx.Laplace(1.0)
    s = dpx.streaming.simulate(counts(), 32, "toeplitz_sqrt", lap, seed=0, ledger=ledger)
    assert len(ledger.entries) == 1 and ledger.totals()[0] == pytest.approx(1.0) and pulled == []
    assert ledger.entries[0].queries == 32 and ledger.entries[0].mode == "simulation"
    next(s)
    assert len(pulled) == 1 and len(ledger.entries) == 1  # one count read per step, no new charge
    with pytest.raises(dpx.BudgetExceededError):
        dpx.streaming.simulate(counts(), 32, "toeplitz_sqrt", lap, seed=0, ledger=ledger)
    assert len(ledger.entries) == 1


@pytest.mark.parametrize("name", ["toeplitz_sqrt", "identity", "workload", "tree_online"])
def test_stream_answers_are_the_matrix_mechanisms_answers(name):
    """Same seed, same noise draws: the stream's answers equal dpx.simulate's W x̂ (the batch
    release of the same strategy), so the stream adds exactly the audited mechanism's noise."""
    T = 64
    x = _counts(T, 1)
    noise = dpx.Laplace(0.7) if name != "toeplitz_sqrt" else GAUSS
    stream = [s.answer for s in dpx.streaming.simulate(x, T, name, noise, seed=5, counts_only=False)]
    batch = dpx.simulate(x, dpx.streaming.continual(T), name, noise, seed=5, counts=False).answers
    np.testing.assert_allclose(stream, batch, rtol=1e-9, atol=1e-7)


def test_an_answer_never_depends_on_later_counts():
    T, k = 48, 20
    x = _counts(T, 2)
    y = x.copy()
    y[k + 1:] += 7
    a = [s.answer for s in dpx.streaming.simulate(x, T, "toeplitz_sqrt", GAUSS, seed=9)]
    b = [s.answer for s in dpx.streaming.simulate(y, T, "toeplitz_sqrt", GAUSS, seed=9)]
    assert a[:k + 1] == b[:k + 1] and a[k + 1:] != b[k + 1:]


def test_mechanisms_that_are_not_online_are_refused():
    for name in ("h2", "kary_tree"):  # least squares over a tree; subtracted nodes closing later
        with pytest.raises(ValueError, match="not online.*toeplitz_sqrt"):
            dpx.streaming.simulate([1, 2], 2, name, GAUSS, seed=0)
    with pytest.raises(ValueError, match="zCDP"):
        dpx.streaming.release([1, 2], 2, "toeplitz_sqrt", GAUSS)
    with pytest.raises(ValueError, match="seed"):
        dpx.streaming.simulate([1, 2], 2, "toeplitz_sqrt", GAUSS)
    with pytest.raises(ValueError, match="noise"):
        dpx.streaming.simulate([1, 2], 2, "toeplitz_sqrt", seed=0)
    with pytest.raises(ValueError, match="answers"):
        dpx.streaming.simulate([1, 2], 2, "toeplitz_sqrt", GAUSS, seed=0, answers="totals")


def test_a_release_uses_the_os_csprng_and_says_so():
    ledger = dpx.PrivacyLedger()
    s = dpx.streaming.release(_counts(16), 16, "toeplitz_sqrt", ZCDP, ledger=ledger)
    steps = list(s)
    assert s.mode == "release" and s.seed is None and ledger.entries[0].mode == "release"
    assert len(steps) == 16 and all(st.low < st.answer < st.high for st in steps)
    assert list(s.to_frame().columns) == ["t", "answer", "std", "low", "high"]


def test_counts_are_checked_and_the_stream_ends_where_it_was_opened():
    s = dpx.streaming.simulate(iter([1, 2, -1]), 3, "identity", GAUSS, seed=0)
    next(s), next(s)
    with pytest.raises(ValueError, match=r"the count of step 2 has 1 negative entry") as info:
        next(s)
    assert "-1" not in str(info.value)  # messages name the step, never a value
    short = list(dpx.streaming.simulate([1, 2], 5, "identity", GAUSS, seed=0))
    assert len(short) == 2  # the counts ran out: the whole stream was charged all the same
    long = dpx.streaming.simulate([1, 2, 3], 2, "identity", GAUSS, seed=0)
    next(long), next(long)
    with pytest.raises(ValueError, match="more counts"):
        next(long)
    kernel = PrivateStream([5, 6], 2)
    assert "5" not in repr(kernel) and "6" not in repr(kernel)
    kernel.release(dpx.streaming.toeplitz_sqrt(2), GAUSS, np.random.default_rng(0),
                   decode=lambda z: z)
    with pytest.raises(RuntimeError, match="released once"):
        kernel.release(dpx.streaming.toeplitz_sqrt(2), GAUSS, np.random.default_rng(0), decode=lambda z: z)


def test_stream_errors_have_the_analytic_standard_deviation_per_step():
    """300 seeded simulations at T = 128: the per-step standardised errors e_t/std_t have mean
    square 1.  Over 300·128 standardised Gaussian values (correlated across steps, independent
    across trials), the mean square's standard error is estimated from the 300 per-trial means;
    |mean − 1| < 6 standard errors fails by chance with probability about 2e-9."""
    T, trials = 128, 300
    x = _counts(T, 3)
    truth = np.cumsum(x)
    per_trial = []
    for seed in range(trials):
        s = dpx.streaming.simulate(x, T, "toeplitz_sqrt", GAUSS, seed=seed)
        z = (np.array([st.answer for st in s]) - truth) / s.std
        per_trial.append(np.mean(z * z))
    per_trial = np.asarray(per_trial)
    se = per_trial.std(ddof=1) / math.sqrt(trials)
    assert abs(per_trial.mean() - 1.0) < 6 * se, (per_trial.mean(), se)
    A = dpx.registry.get("toeplitz_sqrt").strategy(dpx.streaming.continual(T), GAUSS)
    np.testing.assert_allclose(s.std, dpx.per_query_rmse(dpx.streaming.continual(T), A, GAUSS))


def _step_by_step_equals_the_batch_release(name: str, params: dict, T: int, seed: int) -> None:
    """The stream's noise is made step by step and its answers equal the batch release's."""
    x = _counts(T, 4)
    s = dpx.streaming.simulate(x, T, name, GAUSS, seed=seed, params=params, counts_only=False)
    assert s.noise_generation == "step by step"
    stream = [st.answer for st in s]
    batch = dpx.simulate(x, dpx.streaming.continual(T), name, GAUSS, seed=seed, counts=False,
                         params=params).answers
    np.testing.assert_allclose(stream, batch, rtol=1e-9, atol=1e-6)


def test_blt_noise_is_generated_step_by_step_and_equals_the_batch_release():
    """A BLT stream draws one z_t per step through its d-buffer filter (memory independent of T);
    its answers equal the batch matrix mechanism's on the same seed (numpy draws the same
    normals one at a time as at once)."""
    _step_by_step_equals_the_batch_release("blt", {"buffers": 2}, T=200, seed=11)
    s = dpx.streaming.simulate(_counts(200, 4), 200, "blt", GAUSS, seed=11, params={"buffers": 2},
                               answers="counts")
    assert s.noise_generation == "at once"  # the filter is for the running total only


def test_banded_noise_is_generated_step_by_step_in_the_memory_of_its_bands():
    from dpexplorer.queries.toeplitz import BandedNoiseFilter, LowerToeplitz

    rng = np.random.default_rng(8)
    column = np.concatenate([[1.0], 0.5 ** np.arange(1, 6)])
    C = LowerToeplitz(np.concatenate([column, np.zeros(94)]))
    f = C.noise_filter(dpx.streaming.continual(100))
    assert isinstance(f, BandedNoiseFilter) and f._past.size == 5
    z = rng.normal(size=100)
    got = [f.step(v) for v in z]
    np.testing.assert_allclose(got, np.cumsum(np.linalg.solve(C.dense(), z)), rtol=1e-10, atol=1e-10)
    assert C.noise_filter(dpx.workloads.identity(100)) is None
    assert dpx.streaming.toeplitz_sqrt(100).noise_filter(dpx.streaming.continual(100)) is None  # full column
    _step_by_step_equals_the_batch_release("banded", {"bands": 4}, T=300, seed=2)


def test_several_participations_scale_the_noise_to_a_persons_whole_contribution():
    """One person at up to k = 3 steps, 16 or more apart: the stream's noise is scaled to the
    strategy's participation sensitivity (for the square root, a non-negative non-increasing
    Toeplitz column, the worst pattern is {0, 16, 32}: checked against the dense matrix), its
    per-step std is that of ``Participation(A, 3, 16)``, the ledger records that sensitivity, and
    on the same seed every answer's noise is the one-participation stream's times Δ₃/Δ₁."""
    T, k, b = 64, 3, 16
    x = _counts(T, 5)
    truth = np.cumsum(x)
    one = dpx.streaming.simulate(x, T, "toeplitz_sqrt", GAUSS, seed=4)
    s = dpx.streaming.simulate(x, T, "toeplitz_sqrt", GAUSS, seed=4, participations=k, separation=b)
    A = dpx.registry.get("toeplitz_sqrt").strategy(dpx.streaming.continual(T), GAUSS)
    u = np.zeros(T)
    u[[0, b, 2 * b]] = 1
    assert s.sensitivity == pytest.approx(np.linalg.norm(A.dense() @ u), rel=1e-12)
    assert s.sensitivity == pytest.approx(dpx.streaming.participation_sensitivity(A, k, b), rel=1e-12)
    assert one.sensitivity == pytest.approx(A.sensitivity(2)) and (s.participations, s.separation) == (k, b)
    ratio = s.sensitivity / one.sensitivity
    assert ratio > 1.5
    np.testing.assert_allclose(s.std, one.std * ratio, rtol=1e-12)
    noisy = np.array([st.answer for st in s]) - truth
    np.testing.assert_allclose(noisy, (np.array([st.answer for st in one]) - truth) * ratio,
                               rtol=1e-9, atol=1e-9)
    assert s.ledger.entries[0].sensitivity == pytest.approx(s.sensitivity)
    assert "up to 3 steps 16 apart" in s.ledger.entries[0].label
    # a filter-generated stream keeps its step-by-step noise; one that fits once is one participation
    blt = dpx.streaming.simulate(x, T, "blt", GAUSS, seed=4, params={"buffers": 2}, participations=2,
                                 separation=8)
    C_blt = dpx.registry.get("blt").strategy(dpx.streaming.continual(T), GAUSS, buffers=2)
    assert blt.noise_generation == "step by step"
    assert blt.sensitivity == pytest.approx(dpx.streaming.participation_sensitivity(C_blt, 2, 8), rel=1e-12)
    wide = dpx.streaming.simulate(x, T, "toeplitz_sqrt", GAUSS, seed=4, participations=5, separation=T)
    assert wide.sensitivity == pytest.approx(one.sensitivity)
    for bad, error in ((0, ValueError), (1.5, TypeError)):
        with pytest.raises(error, match="participations"):
            dpx.streaming.simulate(x, T, "toeplitz_sqrt", GAUSS, seed=4, participations=bad)


# ------------------------------------------------- the participation claim, audited
AUDIT_T, AUDIT_K, AUDIT_B = 2, 2, 1
#: The worst pattern of the square root C = [[1, 0], [1/2, 1]] under Laplace noise: both steps
#: (‖C(1, 1)‖₁ = 5/2 against 3/2 for one step).  Two steps: the loss reaches its maximum on an
#: event of probability ≈ 1/3 (with more rows it spreads over many small terms and the audit
#: would need far more runs to see it).
AUDIT_X0 = np.zeros(AUDIT_T, dtype=np.int64)
AUDIT_X1 = np.array([1, 1])


def _stream_measurement(data, rng, participations=True):
    """The stream's measurement, y = C x + z, with the noise scaled for one person's 2 steps (or,
    ``participations=False``, for one step only: the bug the audit must catch)."""
    C = dpx.streaming.toeplitz_sqrt(AUDIT_T)
    A = dpx.streaming.Participation(C, AUDIT_K, AUDIT_B) if participations else C
    return data.measure(A, dpx.Laplace(1.0), rng, label="stream")


def _stream_measurement_one_step(data, rng):
    return _stream_measurement(data, rng, participations=False)


@pytest.mark.slow
def test_a_stream_calibrated_to_several_participations_passes_its_audit_and_one_step_is_caught():
    """The claim "ε = 1 for a person at up to 2 steps" audited on the pair that differs at both
    steps (the privacy-loss statistic, the Neyman-Pearson test of a Laplace release): no
    violation at 99.99 % confidence; the same measurement scaled for one step (Δ₁ = 3/2 instead
    of 5/2: ε = 5/3 really) is refuted.  On 5,000 runs per side (seeds 7-11): the correct
    measurement's bound 0.73-0.78, the one-step scale's 1.30-1.40 (se ≈ 0.05): a miss of the
    violation has probability far below 1e-4, a false alarm at most 1e-4."""
    from dpexplorer import audit as aud

    kw = dict(runs=5000, selection_runs=1000, confidence=1 - 1e-4, seed=7, n_jobs=1, progress=False,
              statistic="loss", participations=(AUDIT_K, AUDIT_B))
    ok = aud.audit(_stream_measurement, AUDIT_X0, AUDIT_X1, 1.0, **kw)
    assert ok.epsilon_lb <= ok.claim, ok.summary()
    bad = aud.audit(_stream_measurement_one_step, AUDIT_X0, AUDIT_X1, 1.0, **kw)
    assert bad.violated and bad.epsilon_lb > 1.1, bad.summary()
    with pytest.raises(ValueError, match="one person's records"):
        aud.audit(_stream_measurement, AUDIT_X0, np.array([2, 0]), 1.0, **kw)
    with pytest.raises(ValueError, match="registered mechanism"):
        aud.audit("identity", AUDIT_X0, AUDIT_X1, 1.0, **kw)
