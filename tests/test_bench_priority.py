"""The browser benchmark's priority helpers: the other sessions' browser really runs last.

``benchmarks/bench_browser.py`` draws the seven other pages of its eight-session
measure in a second chromium that must not take the processor from the server
(their users' browsers would run on their own machines).  Chromium resets its
processes' nice values, and Linux shares the processor between scheduler
autogroups before it looks at nice values (seen with ``top`` during
``python benchmarks/bench_browser.py``, 2 cores): these tests check, on
plain child processes, that the helpers reach every thread of a process tree
and the tree's autogroup.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_browser_priority",
                                               ROOT / "benchmarks" / "bench_browser.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

if not Path("/proc/self/task").is_dir():
    pytest.skip("needs Linux /proc", allow_module_level=True)

# a parent that starts a child and a second thread, then waits: a small process tree
TREE = """
import subprocess, sys, threading, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print(child.pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def tree():
    """(parent pid, child pid) of a fresh process tree in a session (and autogroup) of its own."""
    proc = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    child = None
    try:
        child = int(proc.stdout.readline())
        yield proc.pid, child
    finally:
        proc.kill()
        proc.wait()
        if child is not None:
            with contextlib.suppress(OSError):  # ended with its parent already
                os.kill(child, signal.SIGKILL)


def threads_nice(pid: int) -> set[int]:
    return {os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir(f"/proc/{pid}/task")}


def test_the_process_tree_holds_the_children(tree):
    parent, child = tree
    assert bench._process_tree({parent}) == {parent, child}


def test_renice_reaches_every_thread_of_the_tree(tree):
    parent, child = tree
    deadline = time.monotonic() + 10
    while len(os.listdir(f"/proc/{parent}/task")) < 2:  # the parent's second thread
        assert time.monotonic() < deadline, "the parent's thread did not start"
        time.sleep(0.01)
    assert threads_nice(parent) == {0} and threads_nice(child) == {0}
    changed = bench.renice_tree({parent})
    assert changed >= 3  # the parent's two threads and the child's main thread
    assert threads_nice(parent) == {19} and threads_nice(child) == {19}
    assert bench.renice_tree({parent}) == 0  # already there: nothing to change


def autogroup(pid) -> tuple[str, str] | None:
    """``(group, nice)`` from ``/proc/<pid>/autogroup``, or None where it reads as nothing.

    Some containers show the file but leave it empty (the CI's sandbox does).
    """
    try:
        fields = Path(f"/proc/{pid}/autogroup").read_text().split()
    except OSError:
        return None
    return (fields[0], fields[-1]) if len(fields) == 3 and fields[1] == "nice" else None


def test_the_trees_autogroup_gets_the_lowest_priority(tree):
    parent, _ = tree
    enabled = Path("/proc/sys/kernel/sched_autogroup_enabled")
    if not enabled.exists() or enabled.read_text().strip() != "1":
        pytest.skip("this kernel schedules without autogroups")
    ours, theirs = autogroup("self"), autogroup(parent)
    if ours is None or theirs is None:
        pytest.skip("this sandbox does not show the processes' autogroups")
    assert theirs[0] != ours[0]  # a new session: an autogroup of its own
    assert bench.lower_autogroup(parent)
    assert autogroup(parent) == (theirs[0], "19")
    assert autogroup("self") == ours  # ours untouched
    assert not bench.lower_autogroup(2**22 + 12345)  # no such process: False, no error


def test_native_only_is_refused_for_another_process(tree):
    from dpexplorer.ui.workers import lower_threads

    parent, _ = tree
    with pytest.raises(ValueError, match="native_only"):
        lower_threads(19, native_only=True, pid=parent)
    assert threads_nice(parent) == {0}  # nothing lowered
    assert lower_threads(19, pid=2**22 + 12345) == []  # no such process: nothing, no error
