"""Data-dependent baselines: Uniform (DPBench), MWEM (Hardt et al. 2012), EFPA (Ács et al. 2012)."""

import math
from pathlib import Path

import numpy as np
import pytest

import dpexplorer as dpx
from dpexplorer.adaptive import efpa, mwem, uniform
from dpexplorer.core import registry  # noqa: F401  (importing registers them)
from dpexplorer.mechanism import run
from dpexplorer.privacy import PrivateData
from dpexplorer.queries.matrix import (
    Dense,
    Kronecker,
    Permutation,
    Prefix,
    Product,
    Sparse,
    Transpose,
    VStack,
    Weighted,
)

NAMES = ("uniform", "mwem", "efpa")
N = 256
W_RANGES = dpx.workloads.random_ranges(N, 2000, seed=0)


def _ensure_registered():
    # the modules register themselves on import; guard a re-registration (register refuses twice)
    for name, mod in (("uniform", uniform), ("mwem", mwem), ("efpa", efpa)):
        if name not in registry.REGISTRY:  # pragma: no cover - only if someone cleared the registry
            registry.register(registry.Mechanism(
                name, name, None, "", "", data_dependent=True,
                runner=lambda d, W, nz, rng, _m=mod, _n=name, **p: getattr(_m, _n)(d, W, nz, rng, **p)))


_ensure_registered()


def _blocks(n=N, scale=100_000.0):
    x = np.repeat([1.0, 4.0, 0.5, 2.0], n // 4)
    return np.round(x / x.sum() * scale)  # whole counts (the kernel refuses fractional data)


def _range_rmse(x_hat, x, W=W_RANGES):
    return float(np.sqrt(np.mean((W @ x_hat - W @ x) ** 2)))


def _mean_error(name, x, eps=1.0, seeds=range(5), W=W_RANGES, **params):
    return float(np.mean([
        _range_rmse(run(name, PrivateData(x), W, dpx.Laplace(eps), np.random.default_rng(s),
                        **params).x_hat, x, W)
        for s in seeds]))


# ------------------------------------------------------------------ registry
def test_registered_as_data_dependent():
    for name in NAMES:
        mech = registry.get(name)
        assert mech.data_dependent and mech.runner is not None and mech.build is None
        assert mech.source
        assert name in registry.names(data_dependent=True)
        with pytest.raises(ValueError, match="data-dependent"):
            mech.strategy(W_RANGES, dpx.Laplace(1.0))


def test_sources_never_touch_private_vector():
    root = Path(dpx.__file__).resolve().parent
    for name in NAMES:
        text = (root / "adaptive" / f"{name}.py").read_text()
        assert "_x" not in text, f"{name}.py mentions _x"


# ------------------------------------------------------------ privacy ledger
@pytest.mark.parametrize("eps", [1.0, 0.1, 0.3, 7 / 3, 1e-3])
@pytest.mark.parametrize("name,params", [
    ("uniform", {}),
    ("mwem", {"T": 10}),
    ("mwem", {"T": 7, "total_share": 0.13}),
    ("mwem", {"T": 3, "total": 100_000.0}),
    ("efpa", {}),
    ("efpa", {"selection_share": 0.3}),
])
def test_ledger_total_is_epsilon_exactly(name, params, eps):
    data = PrivateData(_blocks())
    run(name, data, W_RANGES, dpx.Laplace(eps), np.random.default_rng(1), **params)
    assert data.ledger.epsilon == eps
    assert all(e.delta == 0.0 for e in data.ledger.entries)
    assert all(name in e.label for e in data.ledger.entries)


def test_ledger_labels_and_counts():
    data = PrivateData(_blocks())
    est = run("mwem", data, W_RANGES, dpx.Laplace(1.0), np.random.default_rng(0), T=4)
    labels = [e.label for e in data.ledger.entries]
    assert len(labels) == 1 + 2 * 4
    assert "noisy total" in labels[0]
    assert sum("(report noisy max)" in lab for lab in labels) == 4
    assert sum("measure query" in lab for lab in labels) == 4
    assert math.isclose(est.info["epsilon_total"], 0.05, rel_tol=1e-12)
    assert math.isclose(est.info["epsilon_per_round"], 0.95 / 4, rel_tol=1e-12)
    assert est.info["T"] == 4 and len(est.info["selected"]) == 4

    data = PrivateData(_blocks())
    est = run("mwem", data, W_RANGES, dpx.Laplace(1.0), np.random.default_rng(0), T=4, total=1e5)
    assert len(data.ledger) == 8 and est.info["epsilon_total"] == 0.0 and est.info["total"] == 1e5

    data = PrivateData(_blocks())
    est = run("efpa", data, W_RANGES, dpx.Laplace(1.0), np.random.default_rng(0))
    labels = [e.label for e in data.ledger.entries]
    assert len(labels) == 2
    assert "(report noisy max)" in labels[0] and "perturb" in labels[1]
    assert data.ledger.entries[1].sensitivity == pytest.approx(est.info["sensitivity"])
    assert est.info["epsilon_select"] == pytest.approx(efpa.DEFAULT_SELECTION_SHARE)
    assert est.info["epsilon_perturb"] == pytest.approx(1 - efpa.DEFAULT_SELECTION_SHARE)

    data = PrivateData(_blocks())
    run("uniform", data, W_RANGES, dpx.Laplace(1.0), np.random.default_rng(0))
    (entry,) = data.ledger.entries
    assert entry.sensitivity == 1.0 and entry.queries == 1


def test_budget_cap_is_respected():
    ledger = dpx.PrivacyLedger(epsilon_budget=0.5)
    with pytest.raises(dpx.BudgetExceededError):
        run("mwem", PrivateData(_blocks(), ledger), W_RANGES, dpx.Laplace(1.0),
            np.random.default_rng(0), T=3)


# --------------------------------------------------- reproducibility, shapes
@pytest.mark.parametrize("name", NAMES)
def test_seeded_reproducibility_shape_finite(name):
    x = _blocks(scale=5000.0)
    a = run(name, PrivateData(x), W_RANGES, dpx.Laplace(0.5), np.random.default_rng(42))
    b = run(name, PrivateData(x), W_RANGES, dpx.Laplace(0.5), np.random.default_rng(42))
    c = run(name, PrivateData(x), W_RANGES, dpx.Laplace(0.5), np.random.default_rng(43))
    assert a.x_hat.shape == (N,) and np.all(np.isfinite(a.x_hat))
    np.testing.assert_array_equal(a.x_hat, b.x_hat)
    assert not np.array_equal(a.x_hat, c.x_hat)


@pytest.mark.parametrize("name", NAMES)
def test_gaussian_is_not_applicable(name):
    data = PrivateData(_blocks())
    with pytest.raises(registry.NotApplicableError, match="Gaussian"):
        run(name, data, W_RANGES, dpx.Gaussian(1.0, 1e-6), np.random.default_rng(0))
    assert len(data.ledger) == 0


def test_efpa_is_1d_only_and_mwem_is_not():
    W2 = dpx.workloads.marginals((8, 8), 1)
    x2 = np.random.default_rng(0).poisson(30, 64).astype(float)
    with pytest.raises(registry.NotApplicableError, match="1D"):
        run("efpa", PrivateData(x2.reshape(8, 8)), W2, dpx.Laplace(1.0), np.random.default_rng(0))
    est = run("mwem", PrivateData(x2.reshape(8, 8)), W2, dpx.Laplace(1.0), np.random.default_rng(0),
              T=5)
    assert est.x_hat.shape == (64,) and np.all(np.isfinite(est.x_hat))


def test_parameter_errors():
    data = PrivateData(_blocks())
    Lap = dpx.Laplace(1.0)
    rng = np.random.default_rng(0)
    for bad in ({"T": 0}, {"T": 2.5}, {"updates_per_round": 0}, {"total_share": 1.0},
                {"total": -5.0}, {"total": float("nan")}):
        with pytest.raises(ValueError):
            run("mwem", data, W_RANGES, Lap, rng, **bad)
    for bad in ({"selection_share": 0.0}, {"score": "mse"}):
        with pytest.raises(ValueError):
            run("efpa", data, W_RANGES, Lap, rng, **bad)
    for name in NAMES:
        with pytest.raises(ValueError, match="cells"):
            run(name, PrivateData(np.ones(10)), W_RANGES, Lap, rng)
    with pytest.raises(ValueError, match="non-zero"):
        run("mwem", PrivateData(np.ones(4)), Dense(np.zeros((2, 4))), Lap, rng)
    assert len(data.ledger) == 0


# ------------------------------------------------------------------ Uniform
@pytest.mark.slow  # many seeded releases: about 4 s on 2 cores (the full suite runs it)
def test_uniform_matches_its_analytic_noise():
    """Uniform's noisy total is the total plus Laplace(1/ε): mean, variance and per-cell error.

    Tolerance: 5 standard errors each (mean: sqrt(var/R); variance and mean square: var·sqrt(5/R),
    Laplace kurtosis 6, i.e. 18 % of the variance); with R = 4000 runs each is a two-sided z of 5,
    a false-failure rate of at most 3 × 6e-7 ≈ 2e-6 per run for a fresh seed (the seeds are
    fixed, so the run is deterministic).  A 2× noise scale (4× variance) fails.
    """
    n, S, eps, R = 64, 6400.0, 0.5, 4000
    x = np.full(n, S / n)
    W = dpx.workloads.identity(n)
    z = np.empty(R)
    for r in range(R):
        est = run("uniform", PrivateData(x), W, dpx.Laplace(eps), np.random.default_rng(r))
        assert np.all(est.x_hat == est.x_hat[0])  # exactly uniform
        assert est.info["noisy_total"] == pytest.approx(est.x_hat.sum())
        z[r] = est.info["noisy_total"] - S  # = n·(x̂_j − x_j), Laplace(1/ε)
    var = 2.0 / eps**2  # Laplace(b = Δ/ε = 1/ε): variance 2b²
    # standard errors of the sample mean and variance (Laplace: fourth moment 6σ⁴)
    assert abs(z.mean()) < 5 * math.sqrt(var / R)
    assert abs(z.var() / var - 1.0) < 5 * math.sqrt(5.0 / R)
    # per-cell error of x̂ is z/n: variance 2/(ε n)² per cell
    assert abs(np.mean((z / n) ** 2) / (var / n**2) - 1.0) < 5 * math.sqrt(5.0 / R)


# -------------------------------------------------------------------- MWEM
def test_max_abs_entry_matches_dense():
    rng = np.random.default_rng(0)
    D = Dense(rng.normal(size=(5, 6)))
    cases = [
        W_RANGES, dpx.workloads.all_range(16), dpx.workloads.prefix(9), dpx.workloads.total(5),
        dpx.workloads.identity(7), D, Sparse(D.array * (np.abs(D.array) > 1)), Weighted(D, -3.0),
        VStack([D, Weighted(Dense(np.ones((2, 6))), 7.0)]), Kronecker([D, Weighted(Prefix(3), 2.0)]),
        Transpose(D), Product(D, Permutation(rng.permutation(6))),
        Product(Prefix(5), Dense(rng.normal(size=(5, 4)))),  # generic: scanned column blocks
        dpx.workloads.marginals((3, 4), 1), dpx.workloads.random_rectangles((5, 6), 20, seed=1),
    ]
    for W in cases:
        assert mwem.max_abs_entry(W) == pytest.approx(np.max(np.abs(W.dense()))), W.name


def test_split_epsilon_is_exact():
    for eps in (1.0, 0.1, 1 / 3, 2.7, 1e-6):
        for k in (2, 3, 21, 41):
            parts = mwem.split_epsilon(eps, [0.05] + [0.95 / (k - 1)] * (k - 1))
            assert math.fsum(parts) == eps and min(parts) > 0
    with pytest.raises(ValueError):
        mwem.split_epsilon(1.0, [1.0, 0.0])


def test_mwem_weighted_workload_scales_sensitivities():
    W = Weighted(dpx.workloads.random_ranges(64, 50, seed=3), 3.0)
    data = PrivateData(np.random.default_rng(0).poisson(20, 64).astype(float))
    est = run("mwem", data, W, dpx.Laplace(1.0), np.random.default_rng(0), T=3)
    assert est.info["utility_sensitivity"] == 3.0
    assert all(e.sensitivity == 3.0 for e in data.ledger.entries[1:])
    assert est.x_hat.sum() == pytest.approx(est.info["total"])


def test_mwem_large_implicit_workload():
    # all ranges over 2048 cells: ~2.1M rows, far above the dense limit; MWEM only uses W @ v
    W = dpx.workloads.all_range(2048)
    x = np.random.default_rng(0).poisson(10, 2048).astype(float)
    with pytest.raises(dpx.MatrixTooLargeError):
        W.dense()
    est = run("mwem", PrivateData(x), W, dpx.Laplace(1.0), np.random.default_rng(0), T=3)
    assert est.x_hat.shape == (2048,) and np.all(np.isfinite(est.x_hat))


def test_mwem_options_and_public_total():
    x = _blocks(scale=1000.0)
    kw = dict(W=W_RANGES, eps=1.0, seeds=range(3))
    avg = _mean_error("mwem", x, T=20, total=1000.0, average=True, updates_per_round=1, **kw)
    last = _mean_error("mwem", x, T=20, total=1000.0, average=False, updates_per_round=1, **kw)
    reuse = _mean_error("mwem", x, T=20, total=1000.0, **kw)  # default: 100 passes, last iterate
    assert reuse < last < avg  # reusing past measurements and the last iterate help here
    est = run("mwem", PrivateData(x), W_RANGES, dpx.Laplace(1.0), np.random.default_rng(0),
              T=5, total=1000.0)
    assert est.x_hat.sum() == pytest.approx(1000.0) and np.all(est.x_hat > 0)


def test_mwem_error_shrinks_with_epsilon():
    x = _blocks(scale=1000.0)
    errs = [_mean_error("mwem", x, eps=eps, T=10) for eps in (0.01, 0.1, 1.0, 10.0)]
    assert all(a > b for a, b in zip(errs, errs[1:], strict=False)), errs


# -------------------------------------------------------------------- EFPA
def test_efpa_sensitivity_bound_is_correct():
    for n in (7, 16, 33):
        real_only, weight = efpa.coefficient_layout(n)
        K = n // 2 + 1
        bound = efpa.perturbation_sensitivity(n)
        for k in range(1, K + 1):
            # exact L1 change of the released reals for one record added to cell j
            F = np.fft.rfft(np.eye(n), axis=1, norm="ortho")[:, :k]  # row j: ΔF for cell j
            exact = np.max(np.abs(F.real).sum(axis=1) + (np.abs(F.imag) * ~real_only[:k]).sum(axis=1))
            assert exact <= bound[k - 1] * (1 + 1e-12)
            assert exact >= bound[k - 1] / math.sqrt(2) - 1e-12
        x = np.random.default_rng(n).normal(size=n)
        assert np.sum(weight * np.abs(np.fft.rfft(x, norm="ortho")) ** 2) == pytest.approx(x @ x)


def test_efpa_noise_energy_matches_simulation():
    """EFPA's expected noise energy after the inverse transform, against R simulated draws.

    Tolerance: 5 % of the energy.  The hardest case is k = 1 (one real Laplace coefficient): the
    relative sd of a mean of R squared Laplace draws is sqrt(5/R) (Var(X²) = 20b⁴, mean 2b²);
    with R = 80,000 runs the tolerance is a two-sided z of 6.3 (k = 5, 17 average more
    coefficients: larger z), a false-failure rate of about 3e-10 per run for a fresh seed (the
    seed is fixed, so the run is deterministic).  A 2× noise scale (4× energy) fails.
    """
    n, eps2, R = 32, 0.7, 80_000
    rng = np.random.default_rng(0)
    real_only, _ = efpa.coefficient_layout(n)
    lam = efpa.perturbation_sensitivity(n) / eps2
    expected = efpa.noise_energy(n, eps2)
    for k in (1, 5, n // 2 + 1):
        cplx = ~real_only[:k]
        G = np.zeros((R, n // 2 + 1), dtype=complex)
        G[:, :k] = rng.laplace(0, lam[k - 1], (R, k))
        G[:, :k][:, cplx] += 1j * rng.laplace(0, lam[k - 1], (R, int(cplx.sum())))
        energy = np.sum(np.fft.irfft(G, n=n, norm="ortho", axis=1) ** 2, axis=1)
        assert energy.mean() == pytest.approx(expected[k - 1], rel=0.05)


def test_efpa_huge_epsilon_returns_x():
    x = np.random.default_rng(3).poisson(50, N).astype(float)  # rough: needs all coefficients
    est = run("efpa", PrivateData(x), W_RANGES, dpx.Laplace(1e6), np.random.default_rng(0))
    assert est.info["k"] == est.info["n_coefficients"] == N // 2 + 1
    np.testing.assert_allclose(est.x_hat, x, atol=1e-2)


def test_efpa_keeps_few_coefficients_on_smooth_data():
    # the selection is noisy (report-noisy-max with Exponential(2/ε₁) noise on utilities whose gaps
    # are a few units), so the claim is about the typical run: the median k over 11 seeds
    t = np.arange(N)
    x = np.round(400.0 * (1 + 0.5 * np.cos(2 * np.pi * t / N)))
    runs = [run("efpa", PrivateData(x), W_RANGES, dpx.Laplace(1.0), np.random.default_rng(s))
            for s in range(11)]
    ks = [est.info["k"] for est in runs]
    assert np.median(ks) <= 6 and max(ks) <= 18  # of K = 129 (candidates 1-8, 12, 18, 27, ...)
    assert all(est.info["released"] == 2 * est.info["k"] - 1 for est in runs)


# ------------------------------------------------------- utility vs Identity
def test_easy_data_beats_identity():
    # The easiest data for both: uniform counts (scale 100,000).  At n = 256 and ε = 1 Identity's
    # range error is already small (RMSE ≈ 13); on a few uniform blocks at this scale neither
    # MWEM (learning rate 1/(2N)) nor EFPA (low-frequency noise adds up over long ranges) beat it.
    x = np.full(N, round(100_000.0 / N))
    ident = _mean_error("identity", x)
    for T in (10, 20):  # Algorithm 1 as printed: from the uniform start, one update per round
        assert _mean_error("mwem", x, T=T, updates_per_round=1, average=True) < ident
    assert _mean_error("efpa", x) < ident
    # EFPA also wins on smooth, low-frequency data once ranges are long enough for Identity's
    # noise to add up (n = 1024; at n = 256 the two are within a few per cent of each other)
    n = 1024
    t = np.arange(n)
    smooth = np.round(100_000.0 / n * (1 + 0.5 * np.cos(2 * np.pi * t / n)))
    W = dpx.workloads.random_ranges(n, 2000, seed=0)
    seeds = range(10)
    assert _mean_error("efpa", smooth, W=W, seeds=seeds) < _mean_error("identity", smooth, W=W, seeds=seeds)


def _mw_reference(logA, Q, m, N, passes):
    """Algorithm 1's update, one query at a time, in numpy (the definition)."""
    for _ in range(passes):
        for q, mi in zip(Q, m, strict=True):
            A = N * np.exp(logA - logA.max()) / np.exp(logA - logA.max()).sum()
            logA = logA + q * (mi - q @ A) / (2 * N)
            logA = logA - logA.max()
    return logA


@pytest.mark.parametrize("passes", [1, 3, 40])
def test_multiplicative_weights_kernel_matches_the_definition(passes):
    rng = np.random.default_rng(passes)
    n, N = 60, 5000.0
    logA = rng.normal(size=n)
    Q = (rng.random((6, n)) < 0.3).astype(float)
    Q[2] *= 2.5  # a weighted query
    m = rng.random(6) * 2000
    np.testing.assert_allclose(mwem.multiplicative_weights(logA, Q, m, N, passes),
                               _mw_reference(logA, Q, m, N, passes), atol=1e-9)


def test_multiplicative_weights_survives_extreme_weights():
    # noisy answers outside [0, N] push cells by ≥ ½ per update: after 5000 passes the weights
    # span e^5000, far beyond float64, and the log-weights stay exact (no underflow for good)
    n, N = 8, 1e6
    Q = np.zeros((2, n))
    Q[0, :4] = 1.0
    Q[1, 4:] = 1.0
    out = mwem.multiplicative_weights(np.zeros(n), Q, np.array([2 * N, -N]), N, 5000)
    assert np.all(np.isfinite(out)) and out[:4].max() == 0.0 and out[4:].max() < -1000
    np.testing.assert_allclose(out, _mw_reference(np.zeros(n), Q, np.array([2 * N, -N]), N, 5000))
    with pytest.raises(ValueError, match="do not match"):
        mwem.multiplicative_weights(np.zeros(n), Q, np.zeros(3), N, 1)


def test_mwem_defaults_are_the_public_implementations():
    # DPComp's mwemND_engine: updateround = 100 passes over all measurements, last iterate
    params = registry.get("mwem").params
    assert params["updates_per_round"] == mwem.DEFAULT_UPDATES_PER_ROUND == 100
    assert params["average"] is False and params["total"] is None
    assert params["total_share"] == mwem.DEFAULT_TOTAL_SHARE == 0.05
