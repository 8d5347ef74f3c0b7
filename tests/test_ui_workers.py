"""Strategy optimisers in worker processes (dpexplorer.ui.workers): same strategies, progress, Cancel.

The explorer builds the optimisers (registry entries flagged ``optimizer``: OPT0,
OPT⊗, OPT+, OPT_M, HDMM, Eigen-Design) in worker processes so that a page's ε change never waits behind one
(an ε change waited 3-15 s behind eight sessions' optimisers, 2 cores).  These tests check
that a strategy built there
is the one built in the calling thread, that progress reaches the calling
thread's callback, that Cancel stops the worker (which then builds the next
strategy), that errors keep their type and message, and that the optimiser's
CPU time is not spent in the server's process.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import ui_fakes
from processes import still_alive

import dpexplorer as dpx
from dpexplorer.ui import workers
from dpexplorer.ui.optimize_view import Cancelled

ROOT = Path(__file__).resolve().parents[1]


# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
# each test optimises anew (its progress and Cancel are what it checks)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fresh_strategies")]


@pytest.fixture(scope="module", autouse=True)
def pool():
    workers.warm_up()
    yield
    workers.shutdown()


def _entry(W, name, noise, params=None, build=workers.build):
    return dpx.StrategyCache(build=build).entry(W, name, noise, params)


def test_the_optimisers_and_only_they_run_in_a_worker(monkeypatch):
    assert workers.optimizers() == ("opt0", "opt_kron", "opt_plus", "opt_m", "hdmm", "eigen_design",
                                   "lt_opt", "blt", "banded")
    for name in workers.optimizers():
        assert workers.in_worker(dpx.registry.get(name)), name
    for name in ("identity", "h2", "hb", "greedy_h"):
        assert not workers.in_worker(dpx.registry.get(name)), name
    # an optimiser registered at run time whose builder no worker can import (a callable
    # object here) is built in the calling thread
    with ui_fakes.registered(monkeypatch, ui_fakes.FakeOptimizer(iters=3), name="opt0_user") as mech:
        assert mech.optimizer and "opt0_user" in workers.optimizers()
        assert not workers.in_worker(mech)
        A = _entry(dpx.workloads.prefix(8), "opt0_user", dpx.Laplace(1.0))[0]
        assert A.optimization.method == "fake_opt"


@pytest.mark.parametrize("W, name, noise", [
    (dpx.workloads.all_range(64), "opt0", dpx.Laplace(1.0)),
    (dpx.workloads.prefix(48), "opt0", dpx.Gaussian(1.0, 1e-6)),
    (dpx.workloads.kron([dpx.workloads.prefix(8), dpx.workloads.identity(6)]), "opt_kron",
     dpx.Laplace(0.5)),
    (dpx.workloads.all_range(32), "eigen_design", dpx.Gaussian(1.0, 1e-6)),
])
def test_a_worker_builds_the_strategy_the_thread_builds(W, name, noise):
    A, unit, _, note = _entry(W, name, noise)
    B, unit_here, _, note_here = _entry(W, name, noise, build=None)
    assert note == note_here == ""
    assert type(A) is type(B) and A.shape == B.shape and A.name == B.name == name
    assert unit == pytest.approx(unit_here, rel=1e-9)
    np.testing.assert_allclose(A.dense(), B.dense(), rtol=1e-9, atol=1e-12)
    assert A.optimization.objective == pytest.approx(B.optimization.objective, rel=1e-9)


def test_progress_reaches_the_calling_threads_callback():
    W, noise = dpx.workloads.all_range(128), dpx.Laplace(1.0)
    there, here = [], []
    with dpx.optimization.progress(lambda *a: there.append(a)):
        _entry(W, "opt0", noise)
    with dpx.optimization.progress(lambda *a: here.append(a)):
        _entry(W, "opt0", noise, build=None)
    assert there, "no progress report came back from the worker"
    # throttled to one report a tenth of a second, but the last one always comes
    assert len(there) <= len(here)
    assert there[-1][:3] == here[-1][:3] and there[-1][3] == pytest.approx(here[-1][3], rel=1e-9)
    steps = {h[:3] for h in here}
    assert all(r[:3] in steps for r in there)  # every relayed report is one the optimiser made


class _StopAfter:
    """A progress callback whose ``stop()`` says yes after ``n`` reports (as a page's Cancel)."""

    def __init__(self, n: int):
        self.n, self.reports = n, 0

    def __call__(self, *report):
        self.reports += 1

    def stop(self) -> bool:
        return self.reports >= self.n


def test_cancel_stops_the_worker_which_then_builds_the_next_strategy():
    W = dpx.workloads.all_range(1024)  # OPT0 runs for seconds here
    with pytest.raises(Cancelled), dpx.optimization.progress(_StopAfter(1)):
        _entry(W, "opt0", dpx.Laplace(1.0))
    # the worker stopped: the next strategy is built (a fixed timeout, not a timing assertion)
    done = threading.Event()
    result = {}

    def build():
        result["A"] = _entry(dpx.workloads.prefix(32), "opt0", dpx.Laplace(1.0))[0]
        done.set()

    threading.Thread(target=build, daemon=True).start()
    assert done.wait(120), "the worker did not stop the cancelled optimisation"
    assert result["A"].shape[1] == 32


def test_a_second_session_gets_the_kept_strategy_at_once_as_its_own_copy():
    """Two sessions' workloads built from the same blocks: one optimisation, server-wide."""
    noise = dpx.Laplace(1.0)
    first, second = [], []
    with dpx.optimization.progress(lambda *a: first.append(a)):
        A = _entry(dpx.workloads.all_range(96), "opt0", noise)[0]
    with dpx.optimization.progress(lambda *a: second.append(a)):
        B = _entry(dpx.workloads.all_range(96), "opt0", dpx.Gaussian(1.0, 1e-6))[0]  # L2: anew
        C = _entry(dpx.workloads.all_range(96), "opt0", dpx.Laplace(0.1))[0]  # same norm: kept
    assert first and second, "the first and the Gaussian builds optimise"
    reports = len(second)
    with dpx.optimization.progress(lambda *a: second.append(a)):
        D = _entry(dpx.workloads.all_range(96), "opt0", noise)[0]
    assert len(second) == reports, "the kept strategy is not optimised again"
    assert C is not A and D is not A and C.optimization is not A.optimization
    np.testing.assert_array_equal(C.dense(), A.dense())
    assert C.optimization.objective == A.optimization.objective
    C.name = "renamed"
    C.optimization.info["note"] = "annotated"
    assert D.name == "opt0" and "note" not in D.optimization.info
    assert B.optimization.objective != A.optimization.objective
    # other parameters are another strategy
    with dpx.optimization.progress(lambda *a: second.append(a)):
        _entry(dpx.workloads.all_range(96), "opt0", noise, {"restarts": 1})
    assert len(second) > reports


def test_a_second_sessions_first_table_has_the_kept_optimisers_rows(monkeypatch):
    """The optimisers the server keeps are built with the other mechanisms, not after them:
    their rows landing a moment after the table joined a served page were dropped by the
    browser's table (Panel's Tabulator, still initialising), which said "optimising…" for good."""
    from dpexplorer.ui.compare_view import ComparePage
    from dpexplorer.ui.session import Session

    def page_of():
        session = Session()
        session.workload = dpx.workloads.prefix(32)
        page = ComparePage(session)
        page._loaded.set()  # no browser here: nothing to wait for
        assert page.wait(300)
        return page

    first = page_of().table
    optimisers = [n for n, rmse in zip(first["mechanism"], first["rmse"], strict=True)
                  if dpx.registry.get(n).optimizer and np.isfinite(rmse)]  # those that apply
    assert {"opt0", "hdmm"} <= set(optimisers)
    shown = []
    original = ComparePage._job_done

    def first_table(self, token, key, base, running=False):
        shown.append((base, running))
        return original(self, token, key, base, running)

    monkeypatch.setattr(ComparePage, "_job_done", first_table)
    second = page_of()
    (base, running), = shown
    rows = base.frame.set_index("mechanism")
    assert not running and base.pending == []
    assert np.isfinite(rows.loc[optimisers, "unit_tse"]).all(), rows.loc[optimisers, "note"]
    assert np.isfinite(second.table.set_index("mechanism").loc[optimisers, "rmse"]).all()
    # a workload no session optimised: its optimisers come after the first table, as before
    shown.clear()
    second.session.workload = dpx.workloads.prefix(48)
    assert second.wait(300)
    assert shown[0][1] and set(optimisers) <= set(shown[0][0].pending)


def test_a_workload_without_a_spec_is_optimised_for_each_session():
    W = dpx.matrix.Dense(dpx.workloads.prefix(24).dense())  # no spec: equal only to itself
    counts = []
    for _ in range(2):
        reports = []
        with dpx.optimization.progress(lambda *a, reports=reports: reports.append(a)):
            _entry(dpx.matrix.Dense(W.dense()), "opt0", dpx.Laplace(1.0))
        counts.append(len(reports))
    assert all(counts), counts


def test_a_callback_that_raises_stops_the_build_with_its_exception():
    def refuse(*report):
        raise Cancelled("the workload changed")

    with pytest.raises(Cancelled, match="workload changed"), dpx.optimization.progress(refuse):
        _entry(dpx.workloads.all_range(512), "opt0", dpx.Laplace(1.0))


def test_errors_keep_their_type_and_message():
    W, noise = dpx.workloads.prefix(32), dpx.Laplace(1.0)
    with pytest.raises(ValueError) as here:
        _entry(W, "opt0", noise, {"p": -3}, build=None)
    with pytest.raises(ValueError) as there:
        _entry(W, "opt0", noise, {"p": -3})
    assert str(there.value) == str(here.value)
    # an error raised inside the worker (Gaussian OPT0 needs a dense Gram; too large here)
    big = dpx.workloads.all_range(20000)
    gauss = dpx.Gaussian(1.0, 1e-6)
    here_note = _entry(big, "opt0", gauss, build=None)[3]
    there_note = _entry(big, "opt0", gauss)[3]
    assert there_note == here_note != ""


def test_the_optimisers_cpu_time_is_not_spent_in_this_process():
    W = dpx.workloads.all_range(512)
    noise = dpx.Laplace(1.0)
    cpu0, t0 = time.process_time(), time.perf_counter()
    _entry(W, "opt0", noise, {"restarts": 2, "seed": 7})
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    c0 = time.process_time()
    _entry(W, "opt0", noise, {"restarts": 2, "seed": 7}, build=None)
    here = time.process_time() - c0
    # the same optimisation costs `here` seconds of CPU in this process; through a worker
    # this process only waits (it polls twice a tenth of a second)
    assert cpu < 0.5 * here, (cpu, here, wall)


def test_optimisers_wait_on_their_own_threads_not_the_build_threads(monkeypatch):
    """Eight sessions' queued optimisers must not hold the four threads comparisons build on."""
    from dpexplorer.ui.compare_view import ComparePage
    from dpexplorer.ui.session import Session

    seen = []
    original = ComparePage._optimize_job

    def recording(self, *args):
        seen.append(threading.current_thread().name)
        return original(self, *args)

    monkeypatch.setattr(ComparePage, "_optimize_job", recording)
    session = Session()
    session.workload = dpx.workloads.prefix(32)
    page = ComparePage(session)
    page._loaded.set()  # no browser here: nothing to wait for
    assert page.wait(300)
    assert seen and all(name.startswith("dpexplorer-opt") for name in seen), seen
    assert np.isfinite(page.table.set_index("mechanism").loc["opt0", "rmse"])


def test_a_worker_ends_with_the_process_that_started_it(tmp_path):
    """Idle workers and the manager of a server killed without shutdown (SIGKILL) do not live on."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "server.py"
    script.write_text(
        "import os, sys, time\n"
        "from dpexplorer.ui import workers\n"
        "workers.warm_up()\n"
        "pool = workers._get_pool()\n"
        "pids = [pool.executor.submit(os.getpid).result(timeout=120) for _ in range(4)]\n"
        "pids.append(pool.manager._process.pid)\n"
        "print(' '.join(map(str, sorted(set(pids)))), flush=True)\n"
        "time.sleep(600)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env=env)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert pids and proc.pid not in pids
        proc.send_signal(signal.SIGKILL)  # no shutdown, no exit hooks
        proc.wait(timeout=30)
        assert not still_alive(pids, 30.0), "a worker outlived its server"
    finally:
        if proc.poll() is None:
            proc.kill()



def _thread_nices(pid: int) -> list[int]:
    """Nice value of every thread of process ``pid`` (field 19 of /proc/<pid>/task/<tid>/stat)."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            stat = f.read()
        out.append(int(stat[stat.rindex(")") + 2:].split()[16]))
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_every_thread_of_a_worker_runs_at_the_workers_priority():
    """The BLAS helper threads too: they start at numpy's import, before the worker lowers
    its priority, and an optimiser's matrix products run on them."""
    pool = workers._get_pool()
    pids = {pool.executor.submit(os.getpid).result(timeout=120) for _ in range(4)}
    for pid in pids:
        nices = _thread_nices(pid)
        assert len(nices) > 1 and min(nices) >= workers.WORKER_NICE, (pid, nices)


def test_the_workers_priority_is_set_by_the_environment_or_refused_in_words(monkeypatch):
    # read once, when the module is imported (the served explorer's start)
    assert workers.WORKER_NICE == workers._nice_from_environment()
    for value, nice in (("", 10), ("0", 0), (" 19 ", 19)):
        monkeypatch.setenv("DPEXPLORER_WORKER_NICE", value)
        assert workers._nice_from_environment() == nice
    for bad in ("20", "-1", "low", "2.5"):
        monkeypatch.setenv("DPEXPLORER_WORKER_NICE", bad)
        with pytest.raises(ValueError, match=f"from 0 .* to 19 .*got {bad!r}"):
            workers._nice_from_environment()


_EXIT_WHILE_OPTIMISING = """
import time
import dpexplorer as dpx
from dpexplorer.ui.compare_view import ComparePage
from dpexplorer.ui.session import Session
session = Session()
session.workload = dpx.workloads.all_range(512)
page = ComparePage(session)
page.panel()
deadline = time.time() + 120
while not page.optimizing and time.time() < deadline:
    time.sleep(0.05)
time.sleep(0.3)
print("optimising:", page.optimizing, flush=True)
"""


def test_a_script_ending_while_optimisers_run_exits():
    """The exit hook stops the pool, and the page's optimiser threads cannot start a new one
    (that one was never stopped: the interpreter waited for its threads forever)."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _EXIT_WHILE_OPTIMISING], env=env,
                          capture_output=True, text=True, timeout=240)
    assert "optimising: True" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 0, done.stderr[-3000:]
