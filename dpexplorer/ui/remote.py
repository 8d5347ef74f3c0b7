"""The worker processes' side of :mod:`dpexplorer.ui.workers`: what runs in an optimiser's process.

Kept apart from ``workers`` (which imports the pages) and from Panel: a worker imports only
this module, the standard library and the engine.  When it imported Panel, Bokeh and
HoloViews as well, starting the pool took 4.2 s and 6.8 s of processor time before the
first optimiser ran (quiet 2-core machine).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time

import dpexplorer as dpx

__all__ = ["lower_threads"]

#: Least seconds between two progress reports sent by a worker (the last one always goes).
REPORT_SECONDS = 0.1
#: Seconds between two checks, in a worker, that the server that started it still runs.
PARENT_CHECK_SECONDS = 1.0

_reports = None  # the queue of progress reports (worker -> server)
_parent = None


def _start_worker(reports, parent: int, nice: int) -> None:
    """A worker's initializer: every thread at ``nice`` (Linux: a thread's nice value is its
    own, and the BLAS helper threads started at import ran half of an optimiser's matrix
    products at the server's own priority), ending with ``parent``."""
    global _reports, _parent
    _reports, _parent = reports, parent
    with contextlib.suppress(OSError, AttributeError):
        os.nice(nice)
    lower_threads(nice)
    _watch_parent(parent)


def lower_threads(nice: int, native_only: bool = False, pid: int | None = None) -> list[int]:
    """Give a process's threads (or only those Python did not start) at least ``nice``.

    ``pid``: the process (default this one); ``native_only``: leave Python's own threads
    as they are (this process only).  A thread already at ``nice`` or above keeps its own.
    Returns the native thread ids lowered (empty without Linux's /proc, or when the process
    has ended).

    Raises
    ------
    ValueError
        If ``native_only`` is asked for another process (its Python threads are not known here).
    """
    if native_only and pid is not None and pid != os.getpid():
        raise ValueError("native_only applies to this process's threads only, not to pid "
                         f"{pid}")
    try:
        tasks = {int(t) for t in os.listdir(f"/proc/{'self' if pid is None else pid}/task")}
    except OSError:  # no /proc, or the process has ended: nothing to do per thread
        return []
    if native_only:
        tasks -= {t.native_id for t in threading.enumerate()}
    lowered = []
    for tid in sorted(tasks):
        with contextlib.suppress(OSError, AttributeError):
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
                lowered.append(tid)
    return lowered


def _watch_parent(parent: int) -> None:
    """End this process within a second of ``parent`` (worker and manager initializer): both
    would outlive a server that ended without shutting them down (os._exit, SIGKILL)."""
    def exit_with_parent() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_CHECK_SECONDS)
        os._exit(0)

    threading.Thread(target=exit_with_parent, daemon=True, name="dpexplorer-parent-watch").start()


#: The last message of a task: its reports are all delivered.
_DONE = "__done__"


class _Stopped(Exception):
    """Raised inside a worker when the page stopped the optimisation."""


def _remote_build(task: int, stop, mechanism, W, noise, params: dict):
    """In the worker: build ``mechanism``'s strategy (a registry entry, its functions imported
    here), sending throttled progress, stopping on request."""
    name = mechanism.name
    last = [-math.inf]
    held = []  # the latest report not sent (throttled): sent at the end

    def relay(stage, done, total, objective=math.nan):
        msg = (task, str(stage), int(done), int(total), float(objective))
        now = time.monotonic()
        final = total > 0 and done >= total
        if not final and now - last[0] < REPORT_SECONDS:
            held[:] = [msg]
            return
        last[0] = now
        held.clear()
        if os.getppid() != _parent:  # the server is gone: nobody waits for this
            os._exit(0)
        if stop.is_set():
            raise _Stopped(name)
        _reports.put(msg)

    try:
        with dpx.optimization.progress(relay):
            return mechanism.strategy(W, noise, **params)
    finally:
        for msg in held:
            _reports.put(msg)
        _reports.put((task, _DONE))  # after every report of this task (one queue, in order)
