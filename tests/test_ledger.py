"""The privacy ledger as a transaction: atomic check-and-record, reservations, the SQLite store."""

from __future__ import annotations

import copy
import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import dpexplorer as dpx
from dpexplorer import workloads
from dpexplorer.privacy import Budget, BudgetExceededError, PrivacyLedger, PrivateData, Spend, samplers
from dpexplorer.privacy.ledger import budget_within
from dpexplorer.privacy.ledger_store import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]


def _spend(eps: float, label: str = "step", delta: float = 0.0, rho: float | None = None) -> Spend:
    return Spend(label, "release", eps, delta, eps * eps / 2 if rho is None else rho, "test", 1, 1.0, "t")


@pytest.fixture
def store(tmp_path) -> Path:
    return tmp_path / "ledgers.sqlite"


def _ledgers(store):
    """An in-memory ledger and a stored one, same budget (the ``kind`` parameter)."""
    return {"memory": lambda budget: PrivacyLedger(budget),
            "stored": lambda budget: PrivacyLedger.open(store, "data", budget=budget)}


# ------------------------------------------------------------ atomic record
@pytest.mark.parametrize("kind", ["memory", "stored"])
def test_concurrent_records_never_overspend(kind, store):
    # The reproduction: 32 threads call record(ε = 1) on a budget of ε = 1 with a 1 µs switch
    # interval; checking, then appending with nothing between, overspent in 2 of 30 trials.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for trial in range(30 if kind == "memory" else 5):
            led = (PrivacyLedger(Budget.pure(1.0)) if kind == "memory"
                   else PrivacyLedger.open(store, f"trial {trial}", budget=Budget.pure(1.0)))
            start = threading.Barrier(32)
            refused = []

            def one():
                start.wait()
                try:
                    led.record(_spend(1.0))
                except BudgetExceededError:
                    refused.append(1)

            threads = [threading.Thread(target=one) for _ in range(32)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(led) == 1 and len(refused) == 31 and led.epsilon == 1.0, trial
    finally:
        sys.setswitchinterval(old)
    assert sys.getswitchinterval() == old


def test_entries_and_budget_cannot_be_edited(store):
    led = PrivacyLedger(epsilon_budget=1.0)
    led.record(_spend(0.5))
    assert isinstance(led.entries, tuple)
    with pytest.raises(AttributeError):
        led.entries.append(_spend(0.1))  # a tuple: no append, no remove
    with pytest.raises(AttributeError):
        led.budget = Budget.pure(10.0)  # only set_budget / lower_budget
    with pytest.raises(AttributeError):
        led.entries = ()
    # a stored ledger's rows are protected in the file itself (triggers)
    st = PrivacyLedger.open(store, "d", budget=Budget.pure(1.0))
    st.record(_spend(0.5))
    con = sqlite3.connect(store)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        con.execute("DELETE FROM log")
    with pytest.raises(sqlite3.IntegrityError, match="settling an open reservation down"):
        con.execute("UPDATE log SET epsilon = 0")
    con.close()
    assert st.epsilon == 0.5


# ------------------------------------------------------------- reservations
def _counting_laplace(monkeypatch):
    """Count the kernel's Laplace draws per thread (monkeypatched sampler)."""
    calls: dict[int, int] = {}
    real = samplers.laplace
    lock = threading.Lock()

    def counted(*args, **kwargs):
        with lock:
            calls[threading.get_ident()] = calls.get(threading.get_ident(), 0) + 1
        return real(*args, **kwargs)
    monkeypatch.setattr(samplers, "laplace", counted)
    return calls


def test_reservation_refused_draws_and_records_nothing(monkeypatch):
    calls = _counting_laplace(monkeypatch)
    data = PrivateData(np.arange(8), PrivacyLedger(Budget.pure(1.0)))
    data.measure(workloads.identity(8), dpx.Laplace(0.5), np.random.default_rng(0))
    with pytest.raises(BudgetExceededError, match="refused before any noise"):
        with data.reserve(0.6, label="two stages"):
            pytest.fail("the block must not run")
    assert len(data.ledger) == 1 and len(data.ledger.history()) == 1 and sum(calls.values()) == 1


def test_stage_above_the_reservation_is_refused_before_drawing(monkeypatch):
    calls = _counting_laplace(monkeypatch)
    data = PrivateData(np.arange(8), PrivacyLedger(Budget.pure(5.0)))
    I8 = workloads.identity(8)
    with pytest.raises(RuntimeError, match="above the ε = 1 reserved"):
        with data.reserve(1.0, label="r"):
            data.measure(I8, dpx.Laplace(0.7), np.random.default_rng(0))
            data.measure(I8, dpx.Laplace(0.7), np.random.default_rng(0))
    assert sum(calls.values()) == 1  # the second stage drew nothing
    (res,) = [r for _, r in data.ledger.history().iterrows() if r["kind"] == "reservation"]
    # an exception after a stage was drawn: the whole reservation stays spent
    assert res["state"] == "kept" and res["epsilon"] == 1.0 and data.ledger.epsilon == 1.0
    assert [e.part_of for e in data.ledger.entries] == [f"#{res['id']} r"]


def test_reservation_released_when_nothing_drawn():
    led = PrivacyLedger(Budget.pure(1.0))
    with pytest.raises(KeyError):
        with led.reserve(0.8, label="fails before drawing"):
            assert led.epsilon == 0.8  # reserved: counted while open
            raise KeyError("boom")
    assert led.epsilon == 0.0 and led.history()["state"].tolist() == ["released"]
    led.record(_spend(1.0))  # the whole budget is free again


def test_reservation_counts_once_and_settles_down():
    # a Laplace(ε = 1) run split into ε1 + ε2 = 0.25 + 0.75 costs ρ = (ε1² + ε2²)/2 = 0.3125 < ε²/2
    led = PrivacyLedger(Budget.pure(1.0))
    with led.reserve(1.0, label="two stages") as res:
        assert led.totals() == (1.0, 0.0, 0.5)
        led.record(_spend(0.25))
        assert led.totals() == (1.0, 0.0, 0.5)  # the stage is inside the reservation, not added
        led.record(_spend(0.75))
        assert res.used == (1.0, 0.0, 0.3125)
    assert led.totals() == (1.0, 0.0, 0.3125) and res.state == "settled"
    assert len(led) == 2 and led.epsilon == 1.0
    hist = led.history()
    assert hist["kind"].tolist() == ["reservation", "stage", "stage"]
    assert hist["reserved_rho"].iloc[0] == 0.5 and hist["rho"].iloc[0] == 0.3125
    with pytest.raises(BudgetExceededError):
        led.record(_spend(1e-3))


def test_nested_reservation_is_charged_to_the_outer():
    led = PrivacyLedger(Budget.pure(2.0))
    with led.reserve(1.0, label="outer") as outer:
        with led.reserve(0.6, label="inner") as inner:
            led.record(_spend(0.4))
            with pytest.raises(RuntimeError, match="above the ε = 0.6 reserved"):
                led.record(_spend(0.3))
        assert inner.state == "settled" and outer.used[0] == pytest.approx(0.4)
        led.record(_spend(0.6))  # 0.4 + 0.6 fits the outer reservation
        with pytest.raises(RuntimeError, match="outer"):
            led.reserve(0.1, label="too much")
    assert led.epsilon == pytest.approx(1.0) and len(led) == 2
    assert led.history()["part_of"].tolist() == ["", "#1", "#2", "#1"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["memory", "stored"])
def test_concurrent_dawa_releases_refused_draw_nothing(kind, store, monkeypatch):
    # 200 threads release DAWA with ε = 0.25 each on a budget of ε = 1: four fit.  A refused
    # release must draw nothing (its thread never reaches the sampler) and record nothing.
    calls = _counting_laplace(monkeypatch)
    led = _ledgers(store)[kind](Budget.pure(1.0))
    x = np.random.default_rng(0).integers(0, 30, size=32)
    W = workloads.random_ranges(32, 20, seed=0)
    outcome: dict[int, str] = {}
    start = threading.Barrier(200)

    def one():
        start.wait()
        try:
            dpx.release(x, W, "dawa", dpx.Laplace(0.25), ledger=led)
            outcome[threading.get_ident()] = "released"
        except BudgetExceededError:
            outcome[threading.get_ident()] = "refused"

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=one) for _ in range(200)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    released = [t for t, o in outcome.items() if o == "released"]
    refused = [t for t, o in outcome.items() if o == "refused"]
    assert len(released) == 4 and len(refused) == 196
    assert all(calls.get(t, 0) == 0 for t in refused)
    assert all(calls[t] >= 2 for t in released)  # DAWA's two stages
    assert led.epsilon <= 1.0 + 1e-12 and len(led) == 2 * 4
    assert (led.history()["kind"] == "reservation").sum() == 4


def test_every_registered_mechanism_reserves_its_whole_cost(monkeypatch):
    calls = _counting_laplace(monkeypatch)
    x = np.random.default_rng(3).integers(0, 30, size=64)
    W = workloads.random_ranges(64, 30, seed=1)
    for name in ["dawa", "mwem", "efpa", "uniform", "hb", "identity"]:
        led = PrivacyLedger(Budget.pure(0.5))
        data = PrivateData(x, led)
        before = sum(calls.values())
        with pytest.raises(BudgetExceededError):
            dpx.mechanism.run(name, data, W, dpx.Laplace(0.6), np.random.default_rng(0))
        assert sum(calls.values()) == before and len(led.history()) == 0, name
        dpx.mechanism.run(name, data, W, dpx.Laplace(0.5), np.random.default_rng(0))
        hist = led.history()
        assert hist["kind"].iloc[0] == "reservation" and hist["reserved_epsilon"].iloc[0] == 0.5, name
        assert led.epsilon == pytest.approx(0.5) and hist["state"].iloc[0] == "settled", name


# --------------------------------------------------------------- the store
def test_store_reopens_with_the_spend_and_budget(store):
    led = PrivacyLedger.open(store, "census", budget=Budget.approx(2.0, 1e-6))
    led.record(_spend(0.5, "first"))
    with led.reserve(1.0, label="dawa run"):
        led.record(_spend(0.2, "stage 1"))
        led.record(_spend(0.8, "stage 2"))
    again = PrivacyLedger.open(store, "census")
    assert again.budget == Budget.approx(2.0, 1e-6)
    assert [e.label for e in again.entries] == ["first", "stage 1", "stage 2"]
    assert again.entries[1].part_of == "#2 dawa run" and again.basic() == (1.5, 0.0)
    assert again.rho == pytest.approx((0.25 + 0.04 + 0.64) / 2)
    assert PrivacyLedger.open(store, "another").epsilon == 0.0  # datasets are separate
    # copies and pickles carry only the path and dataset, and share the spend
    blob = pickle.dumps(again)
    assert b"stage 1" not in blob and b"census" in blob
    clone, deep = pickle.loads(blob), copy.deepcopy(again)
    clone.record(_spend(0.1, "from the clone"))
    assert len(led) == len(deep) == 4 and deep.dataset == "census" and deep.path == store


def test_store_budget_rules(store):
    led = PrivacyLedger.open(store, "d")
    assert led.budget is None
    led = PrivacyLedger.open(store, "d", budget=Budget.pure(1.0))  # none stored: set
    assert PrivacyLedger.open(store, "d", budget=Budget.pure(1.0)).budget == Budget.pure(1.0)
    with pytest.raises(ValueError, match=r"already has the budget ε = 1 \(pure DP\).*set_budget"):
        PrivacyLedger.open(store, "d", budget=Budget.pure(2.0))
    led.record(_spend(0.6))
    with pytest.raises(ValueError, match="only lowering.*set_budget"):
        led.lower_budget(Budget.pure(3.0))
    with pytest.raises(ValueError, match="already spent more"):
        led.lower_budget(Budget.pure(0.5))
    led.lower_budget(Budget.pure(0.8))
    assert PrivacyLedger.open(store, "d").budget == Budget.pure(0.8)
    led.set_budget(Budget.pure(3.0))  # the owner's act: any change that fits what was spent
    with pytest.raises(ValueError, match="already spent more"):
        led.set_budget(Budget.zcdp(0.1))
    assert led.budget == Budget.pure(3.0)
    led.set_budget(None)
    assert PrivacyLedger.open(store, "d").budget is None


def test_budget_within():
    assert budget_within(Budget.pure(1.0), None) and not budget_within(None, Budget.pure(1.0))
    assert budget_within(Budget.pure(1.0), Budget.approx(1.0, 1e-6))
    assert not budget_within(Budget.approx(1.0, 1e-6), Budget.pure(5.0))
    assert budget_within(Budget.pure(1.0), Budget.zcdp(0.5)) and not budget_within(Budget.pure(1.1), Budget.zcdp(0.5))
    assert budget_within(Budget.approx(1.0, 1e-7), Budget.approx(2.0, 1e-6))
    assert not budget_within(Budget.approx(1.0, 1e-5), Budget.approx(2.0, 1e-6))
    eps = dpx.accounting.epsilon_from_rho(0.1, 1e-6)
    assert budget_within(Budget.zcdp(0.1), Budget.approx(eps * 1.001, 1e-6))
    assert not budget_within(Budget.zcdp(0.1), Budget.approx(eps * 0.999, 1e-6))
    assert not budget_within(Budget.zcdp(0.1), Budget.pure(100.0))


def test_store_schema_version_is_checked(store, tmp_path):
    PrivacyLedger.open(store, "d")
    con = sqlite3.connect(store)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.execute("PRAGMA user_version = 99")
    con.close()
    with pytest.raises(ValueError, match="schema version 99; this dpexplorer reads version 1"):
        PrivacyLedger.open(store, "d")
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (a)")
    con.close()
    with pytest.raises(ValueError, match="not a dpexplorer ledger store"):
        PrivacyLedger.open(other, "d")
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all " * 100)
    with pytest.raises(ValueError, match="not a dpexplorer ledger store|cannot be written"):
        PrivacyLedger.open(text, "d")
    with pytest.raises(ValueError, match="non-empty"):
        PrivacyLedger.open(store.parent / "x.sqlite", "  ")


def _python(code: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_processes_never_overspend(store):
    # each process tries 400 spends of ε = 1/1024 on a budget of ε = 600/1024: exactly 600 fit
    # in all (the sums are exact in binary), however the two processes' records interleave
    PrivacyLedger.open(store, "shared", budget=Budget.pure(600 / 1024))
    code = f"""
        import os, sys, time
        from dpexplorer.privacy import PrivacyLedger, Spend, BudgetExceededError
        led = PrivacyLedger.open({str(store)!r}, "shared")
        open(os.path.join({str(store.parent)!r}, "ready-%d" % os.getpid()), "w").close()
        while len([f for f in os.listdir({str(store.parent)!r}) if f.startswith("ready-")]) < 2:
            time.sleep(0.001)  # both processes start recording at once
        done = 0
        for i in range(400):
            try:
                led.record(Spend("p", "release", 1 / 1024, 0.0, 2.0**-21, "", 1, 1.0, "t"))
                done += 1
            except BudgetExceededError:
                pass
        print(done)
    """
    procs = [_python(code) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    done = [int(o[0]) for o in outs]
    led = PrivacyLedger.open(store, "shared")
    assert sum(done) == 600 == len(led) and led.epsilon == 600 / 1024 and led.rho == 600 * 2.0**-21


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["identity", "dawa"])
def test_kill_between_commit_and_draw_keeps_the_spend(store, mechanism):
    # the child's sampler kills its own process (SIGKILL): the spend was committed before the
    # draw, so it survives; a reservation killed before its stage's draw stays "open", spent
    PrivacyLedger.open(store, "victim", budget=Budget.pure(1.0))
    code = f"""
        import os, signal
        import numpy as np
        import dpexplorer as dpx
        from dpexplorer.privacy import samplers
        def die(*a, **k):
            os.kill(os.getpid(), signal.SIGKILL)
        samplers.laplace = die
        led = dpx.PrivacyLedger.open({str(store)!r}, "victim")
        x = np.arange(16)
        dpx.release(x, dpx.workloads.prefix(16), {mechanism!r}, dpx.Laplace(0.75), ledger=led)
        print("drew")
    """
    proc = _python(code)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, (out, err)
    assert "drew" not in out
    led = PrivacyLedger.open(store, "victim")
    assert led.epsilon == 0.75
    hist = led.history()
    if mechanism == "dawa":
        assert hist["kind"].tolist() == ["reservation", "stage"] and hist["state"].iloc[0] == "open"
    else:
        assert hist["kind"].tolist() == ["spend"] and len(led) == 1
    with pytest.raises(BudgetExceededError):
        led.record(_spend(0.5))


# ------------------------------------------------------------------- the app
def test_sessions_share_the_store_and_only_lower_budgets(tmp_path, monkeypatch):
    pytest.importorskip("panel")
    from dpexplorer.ui import session as session_mod

    path = tmp_path / "app" / "ledgers.sqlite"
    monkeypatch.setenv("DPEXPLORER_LEDGER", str(path))
    first, second = session_mod.Session(), session_mod.Session()
    assert first.ledger_path == second.ledger_path == path
    x = np.asarray(first.data().x).ravel()
    dpx.release(x, workloads.identity(x.size), "identity", dpx.Laplace(0.5), ledger=first.ledger)
    assert len(second.ledger) == 1 and second.ledger.epsilon == 0.5  # the second tab sees it
    from dpexplorer.ui.release_view import ReleaseView

    listed = ReleaseView(second).ledger_frame()  # the Release page lists the stored ledger
    assert listed["label"].tolist() == [f"identity: measure {x.size} strategy queries"]
    assert listed["mode"].tolist() == ["release"] and listed["epsilon"].tolist() == [0.5]
    assert {"time", "delta", "rho", "kind", "part_of"} <= set(listed.columns)
    assert len(session_mod.Session().ledger) == 1  # and so does a session after a restart
    second.budget, second.budget_epsilon = "pure", 2.0  # lowering (ε, δ) = (5, 1e-5) to ε = 2
    assert first.ledger.budget == Budget.pure(2.0)
    first.budget_epsilon = 3.0  # raising: refused, with the owner's way
    assert "raise" in first.error and "set_budget" in first.error and str(path) in first.error
    assert second.ledger.budget == Budget.pure(2.0)


def test_ledger_store_path_default_and_tests_never_use_it(monkeypatch):
    pytest.importorskip("panel")
    import platformdirs

    from dpexplorer.ui.session import ledger_store_path

    user = Path(platformdirs.user_data_dir("dpexplorer")) / "ledgers.sqlite"
    assert ledger_store_path() != user  # conftest points every test at a temporary file
    monkeypatch.delenv("DPEXPLORER_LEDGER")
    assert ledger_store_path() == user
    monkeypatch.setenv("DPEXPLORER_LEDGER", "/tmp/x/l.sqlite")
    assert ledger_store_path() == Path("/tmp/x/l.sqlite")
