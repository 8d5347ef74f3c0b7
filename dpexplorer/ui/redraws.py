"""The pages' redraws, one at a time on the server's event loop, a user's own action first.

Every session of a Panel server shares one event loop, and a page's redraw (a
HoloViews plot built or updated, a table replaced) holds that loop for 0.1-2 s,
more on a loaded machine.  Posted straight to the loop, the redraws of all
sessions queue there first come, first served: with eight sessions opening the
Compare page at once, one user's ε change waited 30-180 s behind the other
sessions' plots (``benchmarks/bench_browser.py``, 2 cores, issue 14), while a
py-spy profile of the server showed its loop busy almost all the time, 38 %
of it in the Compare pages' redraws.

:data:`REDRAWS` is one queue for the whole server.  A page posts its redraw
with :meth:`RedrawQueue.submit`; the queue hands the loop one redraw at a
time (the next is scheduled when the last is done), so whatever else the
loop has to do -- an ε change arriving from a browser, a message to send --
waits for at most one redraw, not for every session's.  A redraw caused by
the user's own action (``urgent``: an ε, δ or noise change) goes before the
redraws waiting for background results, and a page has at most one redraw
waiting (a newer one replaces it: it reads the page's latest state).

Nothing here runs outside a server: a notebook or a script redraws at once.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Hashable

import panel as pn
from panel.io.state import set_curdoc

__all__ = ["RedrawQueue", "REDRAWS", "STALL_SECONDS", "on_loop"]

log = logging.getLogger(__name__)

#: A redraw handed to the loop and not reported done after this many seconds is taken as
#: lost (its session closed before the loop ran it), and the next one goes.
STALL_SECONDS = 120.0


def on_loop(doc, fn: Callable[[], None]) -> None:
    """Schedule ``fn`` on the event loop of ``doc``'s session (Panel: document lock, curdoc set)."""
    with set_curdoc(doc):
        pn.state.execute(fn, schedule=True)


class RedrawQueue:
    """Redraws of many pages, handed to the event loop one at a time (see the module docstring).

    Parameters
    ----------
    schedule : callable
        ``schedule(doc, fn)`` runs ``fn`` later on ``doc``'s event loop
        (:func:`on_loop`; tests pass their own).
    """

    def __init__(self, schedule: Callable = on_loop):
        self._schedule = schedule
        self._guard = threading.Lock()
        self._waiting: collections.OrderedDict = collections.OrderedDict()  # owner -> (doc, run)
        self._running: tuple | None = None  # (owner, since) of the redraw on the loop

    def submit(self, owner: Hashable, doc, run: Callable[[], None], urgent: bool = False) -> None:
        """Run ``run()`` on ``doc``'s event loop once the redraws before it are done.

        Parameters
        ----------
        owner : hashable
            The page: it has at most one redraw waiting, and a newer one takes
            the older one's place in the queue (or the front, when ``urgent``).
        doc : bokeh.document.Document
            The page's session document (``run`` runs with it as ``pn.state.curdoc``).
        run : callable
            The redraw; it reads the page's state when it runs.
        urgent : bool
            The user's own action asked for it: it goes before the waiting redraws.
        """
        with self._guard:
            self._waiting[owner] = (doc, run)  # an owner already waiting keeps its place
            if urgent:
                self._waiting.move_to_end(owner, last=False)
            if self._running is not None:
                if time.monotonic() - self._running[1] < STALL_SECONDS:
                    return
                log.warning("a redraw was not done after %.0f s: the next one goes",
                            STALL_SECONDS)
                self._running = None
        self._next()

    def forget(self, owner: Hashable) -> None:
        """Drop ``owner``'s waiting redraw (its session closed); if it was running, go on."""
        with self._guard:
            self._waiting.pop(owner, None)
            running = self._running is not None and self._running[0] is owner
        if running:
            self._done(owner)

    def pending(self) -> int:
        """Redraws waiting (not counting the one on the loop)."""
        with self._guard:
            return len(self._waiting)

    def _next(self) -> None:
        with self._guard:
            if self._running is not None:
                return
            while self._waiting:
                owner, (doc, run) = self._waiting.popitem(last=False)
                if doc.session_context is not None:  # None: the session was closed
                    self._running = (owner, time.monotonic())
                    break
            else:
                return

        def step():
            try:
                run()
            finally:
                self._done(owner)
        try:
            self._schedule(doc, step)
        except Exception:  # noqa: BLE001 - a session closing meanwhile: the others go on
            log.exception("a redraw could not be scheduled")
            self._done(owner)

    def _done(self, owner: Hashable) -> None:
        with self._guard:
            if self._running is not None and self._running[0] is owner:
                self._running = None
        self._next()


#: The server's queue, shared by every session's pages.
REDRAWS = RedrawQueue()
