"""``efpa_as_published``: the authors' EFPA code, which is not ε-DP (``dpexplorer.adaptive.efpa``).

Three defects, each shown on a small neighbouring pair: exact phases (the auditor refutes the
claim with certainty), magnitude noise calibrated to L2 sensitivity 1 of an unnormalised DFT,
and a selection run with sensitivity 1 on a score that moves by √(n − 1).  The variant is
registered for study, flagged not private, refused by releases and left out of comparisons
unless named.
"""

import math

import numpy as np
import pytest

import dpexplorer as dpx
from dpexplorer import audit as aud
from dpexplorer.adaptive import efpa
from dpexplorer.core import registry
from dpexplorer.mechanism import run
from dpexplorer.privacy import PrivateData

AUDIT = dict(runs=2000, selection_runs=500, seed=11, n_jobs=1, progress=False)


def test_registered_as_not_private():
    mech = registry.get("efpa_as_published")
    assert mech.private is False and mech.data_dependent
    assert "NOT PRIVATE" in mech.label
    assert "efpa_as_published" in registry.names(private=False)
    assert registry.get("efpa").private is True


def test_phases_are_released_exactly():
    # the estimate's kept coefficients have the data's phases, up to the sign a negative noisy
    # magnitude gives (the authors' cmath.rect): the defect the audit below exploits
    x = np.random.default_rng(0).poisson(30, 64).astype(float)
    est = run("efpa_as_published", PrivateData(x), dpx.workloads.all_range(64), dpx.Laplace(1.0),
              np.random.default_rng(1))
    k = est.info["k"]
    assert k >= 2
    got = np.angle(np.fft.rfft(est.x_hat)[1:k])
    want = np.angle(np.fft.rfft(x)[1:k])
    diff = (got - want) % np.pi
    assert np.all(np.minimum(diff, np.pi - diff) < 1e-9)
    assert est.info["noise_scale"] == pytest.approx(math.sqrt(est.info["kept"]) / 0.5)


def test_magnitude_noise_is_too_small_for_its_sensitivity():
    # a spike at cell 0: every unnormalised coefficient is real and positive, one more record
    # adds exactly 1 to each of the k magnitudes -- L1 change k against the authors' √(2k − 1)
    n = 16
    x0 = np.zeros(n)
    x0[0] = 40.0
    x1 = x0.copy()
    x1[0] += 1.0
    for k in range(2, n // 2 + 1):
        change = np.sum(np.abs(np.abs(np.fft.rfft(x1)[:k]) - np.abs(np.fft.rfft(x0)[:k])))
        assert change == pytest.approx(k)
        assert change > math.sqrt(2 * k - 1)  # privacy loss k/√(2k − 1)·ε₂ > ε₂


def test_selection_score_moves_by_root_n():
    # one record on an empty histogram moves the k = 1 score by √(n − 1), claimed 1
    for n in (8, 64, 4096):
        x1 = np.zeros(n)
        x1[5] = 1.0
        change = efpa.published_utilities(x1, 0.5) - efpa.published_utilities(np.zeros(n), 0.5)
        assert np.abs(change).max() == pytest.approx(math.sqrt(n - 1))


@pytest.mark.slow
def test_audit_refutes_the_claim():
    # the case's pair turns the phase of F_1 by 0.0175 rad; magnitude noise moves it by 0 or π
    # only, so {phase offset ≤ t} holds on every x₀ run that keeps F_1 (almost all: the score
    # prefers k = 2 by e^{~30}) and on no x₁ run: Clopper-Pearson on 2,000 runs per side gives
    # a bound of ln(0.998/0.0018) ≈ 6.3 against the claim ε = 1.
    (case,) = aud.cases("efpa_as_published")
    r = case.run("efpa_as_published", 1.0, **AUDIT)
    print(r.summary())
    assert r.violated and r.epsilon_lb > 5.0 and r.claim == 1.0


@pytest.mark.slow
def test_the_private_efpa_passes_the_same_audit():
    # the control: same pair, statistic, ε and runs -- noise on Re and Im moves the phase
    # continuously, and the bound stays below the claim
    case = aud.cases("efpa_as_published")[0]
    r = aud.audit("efpa", case.x0, case.x1, 1.0, W=case.W, statistic=case.statistic, **AUDIT)
    print(r.summary())
    assert not r.violated and r.epsilon_lb < 1.0


def test_release_refuses_it_and_compare_leaves_it_out():
    x = np.full(8, 5.0)
    W = dpx.workloads.all_range(8)
    with pytest.raises(ValueError, match="not differentially private"):
        dpx.release(x, W, "efpa_as_published", dpx.Laplace(0.5))
    with pytest.raises(ValueError, match="not differentially private"):
        run("efpa_as_published", PrivateData(x), W, dpx.Laplace(0.5), dpx.OS_CSPRNG)
    s = dpx.simulate(x, W, "efpa_as_published", dpx.Laplace(0.5), seed=0)  # a simulation may run it
    assert s.mode == "simulation" and s.x_hat.shape == (8,)
    assert "efpa_as_published" not in dpx.compare(W, dpx.Laplace(1.0))["mechanism"].tolist()


def test_ledger_records_the_claimed_epsilon():
    data = PrivateData(np.arange(32.0))
    run("efpa_as_published", data, dpx.workloads.all_range(32), dpx.Laplace(0.3), np.random.default_rng(0))
    assert data.ledger.epsilon == 0.3
    assert all("NOT" in e.label for e in data.ledger.entries)
