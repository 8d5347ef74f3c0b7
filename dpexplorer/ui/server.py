"""What the served explorer needs from its process: a prompt exit on SIGTERM.

``panel serve`` stops its IOLoop on SIGTERM, but the interpreter then waits
for every worker thread (Panel's thread pool, the pages' job threads) to
finish what it is computing: a long computation started by a session can keep a
stopped server alive for many seconds (10.5 s measured, 15 s and more in
issue 16).  The computations are simulations on public data that the
stopped server will never show, so nothing is lost by not waiting:
:func:`exit_promptly_on_sigterm` chains a handler to the server's that, after
:data:`GRACE_SECONDS` for the server's own shutdown, ends the process with
``os._exit`` after killing the optimisers' worker processes
(:func:`dpexplorer.ui.workers.shutdown`) -- and, should that thread not get
to run (it needs the GIL, which busy worker threads hold), SIGALRM's default
action ends it
:data:`HARD_EXTRA_SECONDS` later (exit status 128 + 14).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

__all__ = ["exit_promptly_on_sigterm", "GRACE_SECONDS"]

log = logging.getLogger(__name__)

#: Seconds the server gets to shut down by itself after SIGTERM before the process ends.
GRACE_SECONDS = 1.0

#: After the grace, seconds more before the kernel ends the process (SIGALRM) if it still runs.
HARD_EXTRA_SECONDS = 1.5

_installed = False


def exit_promptly_on_sigterm(grace: float = GRACE_SECONDS) -> bool:
    """Make SIGTERM end the process within ``grace`` seconds (plus the time to run the handler).

    Call it from the app script; it installs the handler once per process
    and only from the main thread (where Python runs signal handlers).
    Returns ``True`` once the handler is installed.
    """
    global _installed
    if _installed:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum, frame):
        if previous == signal.SIG_IGN:
            return
        log.warning("SIGTERM: the process ends in %.1f s at the latest", grace)
        timer = threading.Timer(grace, _exit_now)
        timer.daemon = True
        timer.start()
        # the kernel's backstop, needing no Python thread: SIGALRM's default action ends the
        # process (the timer thread may wait for the GIL behind busy worker threads)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_REAL, grace + HARD_EXTRA_SECONDS)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            _exit_now()

    signal.signal(signal.SIGTERM, handler)
    _installed = True
    return True


def _exit_now() -> None:
    try:
        from . import workers

        workers.shutdown()  # the optimisers' worker processes end with the server
        sys.stderr.write("SIGTERM: ending the process without waiting for running computations\n")
        sys.stderr.flush()
    finally:
        os._exit(0)
