"""The pages' redraws, one at a time on the server's event loop, a user's own action first.

Every session of a Panel server shares one event loop, and a page's redraw (a
HoloViews plot built or updated, a table replaced) holds that loop for 0.1-2 s,
more on a loaded machine.  Posted straight to the loop, the redraws of all
sessions queue there first come, first served, and a user's ε change waits
behind every other session's plots: with eight sessions opening the Compare
page at once (``python benchmarks/bench_browser.py --n 1024 --sessions 8``, 2 cores), a py-spy
profile of the server showed its loop busy almost all the time, 38 % of it in
the Compare pages' redraws.

:data:`REDRAWS` is one queue for the whole server.  A page posts its redraw
with :meth:`RedrawQueue.submit`; the queue hands the loop one redraw at a
time (the next is scheduled when the last is done, its session closed, or
:data:`STALL_SECONDS` passed), so whatever else the
loop has to do -- an ε change arriving from a browser, a message to send --
waits for at most one redraw, not for every session's.  A redraw caused by
the user's own action (``urgent``: an ε, δ or noise change) goes before the
redraws waiting for background results, and a page has at most one redraw
waiting (a newer one replaces it: it reads the page's latest state).

Nothing here runs outside a server: a notebook or a script redraws at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator

import panel as pn
from panel.io.state import set_curdoc

__all__ = ["RedrawQueue", "REDRAWS", "STALL_SECONDS", "CHECK_SECONDS", "on_loop", "on_session_loop",
           "served_document", "models_batch", "freeze_models", "no_connection", "held_on_loop",
           "on_event_loop"]

log = logging.getLogger(__name__)

#: A redraw handed to the loop and not done after this many seconds no longer holds the
#: queue: the next one is handed over too.  A redraw normally takes 0.1-2 s; one can be lost
#: (never run: Bokeh drops the callbacks of a session destroyed before the loop ran them), and
#: one that is only slow then merely has the next queued behind it on the loop, as without
#: this queue.
STALL_SECONDS = 5.0
#: Seconds between two checks, by the queue's watch thread, for a lost or stalled redraw.
CHECK_SECONDS = 0.5


def served_document():
    """The current Bokeh document if it belongs to a server session, else None.

    None in a notebook, a script or a test (no document, or one with no session
    context): the pages then draw and compute at once, in the caller's thread.
    """
    doc = pn.state.curdoc
    return doc if doc is not None and doc.session_context is not None else None


def no_connection(doc) -> bool:
    """Whether the server session of ``doc`` has no browser connected (or has ended).

    A closed browser tab closes its websocket at once, but Bokeh destroys the
    session only once it has had no connection for ``unused_session_lifetime``
    (15 s by default, checked every 17 s): meanwhile a page would go on
    computing and redrawing for nobody (``python benchmarks/bench_browser.py``: with eight sessions, the
    tabs closed one round before kept the loop and the optimisers' workers busy
    for half a minute).  Also True before the browser's websocket has
    connected: ask only once the page has loaded (``pn.state.onload``).

    Parameters
    ----------
    doc : bokeh.document.Document
        A page's document.

    Returns
    -------
    bool
        True when its server session is destroyed or has no connection; False
        for a document with no server session (a notebook, a test).  Reads
        Bokeh's public ``session_context.session.connection_count`` and
        ``destroyed``; raises nothing.
    """
    context = getattr(doc, "session_context", None)
    session = getattr(context, "session", None)  # Bokeh's ServerSession (None: not set up yet)
    if session is None:
        return False
    return bool(session.destroyed) or session.connection_count == 0


#: The redraw batch running in this context: [document, its exit stack, frozen yet].
_BATCH: contextvars.ContextVar = contextvars.ContextVar("redraw_batch", default=None)


@contextlib.contextmanager
def models_batch(doc) -> Iterator[None]:
    """Run redraws together; the first that calls :func:`freeze_models` freezes ``doc``'s models.

    Bokeh indexes a document's models again (walking all of them: 20-45 ms for
    the explorer's pages) after every change of its structure, or once at the
    end of a ``doc.models.freeze()`` block, changed or not.  Redraws that only
    set numbers (a live plot copied in place, a table patched) change no
    structure and need no index; a HoloViews redraw calls
    :func:`freeze_models`, and the batch's models are then indexed once, when
    the batch ends.
    """
    with contextlib.ExitStack() as stack:
        token = _BATCH.set([doc, stack, False])
        try:
            yield
        finally:
            _BATCH.reset(token)


def freeze_models() -> None:
    """Freeze the running batch's document models until the batch ends (no batch: nothing)."""
    batch = _BATCH.get()
    if batch is None or batch[2]:
        return
    doc, stack, _ = batch
    stack.enter_context(doc.models.freeze())
    batch[2] = True


def on_event_loop() -> bool:
    """Whether the caller runs as a callback of a running event loop (the server's loop).

    Returns
    -------
    bool
        True inside a callback or coroutine run by an asyncio loop (Tornado's, in a
        served app); False in Panel's worker threads, the pages' background threads,
        a script or a notebook cell's plain code.  Raises nothing.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@contextlib.contextmanager
def held_on_loop() -> Iterator[None]:
    """Send the current session's document changes made in the block as one message.

    On the server's event loop the block runs under ``pn.io.hold()``: Bokeh
    builds one PATCH-DOC message for all its changes when the block ends,
    instead of one per widget or pane changed, and each message costs the loop
    a walk over every model of the page (Bokeh's serializer indexes the
    document's references: about 10 ms for the 540 models of a Compare page,
    more under load; 2 cores).  Elsewhere (a worker thread, a notebook, a test
    without a server) the block runs as it is: a hold released from a thread
    would send its changes through Bokeh's own messages, which can overtake
    Panel's (see :func:`on_session_loop`).  Not for a block that replaces a
    HoloViews plot: one held message replacing and updating a plot left the
    browser a model reference it never received (seen as an intermittent browser-console error).

    A context manager with no value; raises what the block raises (the
    changes made before are still sent).
    """
    doc = served_document()
    if doc is None or not on_event_loop():
        yield
        return
    with pn.io.hold(doc):
        yield


def on_loop(doc, fn: Callable[[], None]) -> None:
    """Schedule ``fn`` on the event loop of ``doc``'s session (Panel: document lock, curdoc set)."""
    with set_curdoc(doc):
        pn.state.execute(fn, schedule=True)


def on_session_loop(fn: Callable[[], None]) -> None:
    """Run ``fn`` on the current session's event loop; at once outside a server.

    For a page's redraw that holds the document (``pn.io.hold()``) and may be
    asked for from a worker thread (a background job, Panel's callback
    threads).  Held from a thread, the document's changes reach the browser
    through Bokeh's own messages once the hold ends, while the changes made on
    the loop go through Panel's: the two can overtake each other, and a message
    naming a model the browser has not received yet leaves it with a dangling
    reference ("reference … isn't known" in the browser's console).  Held on the loop, every
    change goes Panel's way, in order.
    """
    doc = served_document()
    if doc is None:
        fn()  # a notebook, a script, a test
        return
    on_loop(doc, fn)


class RedrawQueue:
    """Redraws of many pages, handed to the event loop one at a time (see the module docstring).

    The redraw handed to the loop holds the queue until it reports done, its
    page is :meth:`forget`-ten, its session closes, or :data:`STALL_SECONDS`
    pass, whichever comes first.  A watch thread checks the last two every
    ``check_seconds``, so a redraw that never runs cannot stop the others,
    even when no page submits anything after it.

    Parameters
    ----------
    schedule : callable
        ``schedule(doc, fn)`` runs ``fn`` later on ``doc``'s event loop
        (:func:`on_loop`; tests pass their own).
    check_seconds : float or None
        Seconds between two checks of the watch thread; None starts no
        thread (tests call :meth:`release_lost` themselves).
    """

    def __init__(self, schedule: Callable = on_loop, check_seconds: float | None = CHECK_SECONDS):
        self._schedule = schedule
        self._guard = threading.Lock()
        self._waiting: collections.OrderedDict = collections.OrderedDict()  # owner -> (doc, run)
        # (ticket, owner, doc, since) of the redraw handed to the loop
        self._running: tuple | None = None
        self._tickets = itertools.count(1)
        self._check_seconds = check_seconds
        self._watch: threading.Thread | None = None

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
            if self._watch is None and self._check_seconds is not None:
                self._watch = threading.Thread(target=self._watch_loop, daemon=True,
                                               name="dpexplorer-redraws")
                self._watch.start()
        self.release_lost()
        self._next()

    def forget(self, owner: Hashable) -> None:
        """Drop ``owner``'s waiting redraw (its session closed); if it was running, go on."""
        with self._guard:
            self._waiting.pop(owner, None)
            running = self._running is not None and self._running[1] is owner
            ticket = self._running[0] if running else None
        if running:
            self._done(ticket)

    def pending(self) -> int:
        """Redraws waiting (not counting the one on the loop)."""
        with self._guard:
            return len(self._waiting)

    def release_lost(self) -> bool:
        """Stop waiting for the redraw on the loop if its session closed or it stalled.

        Returns True when the queue was released (the next redraw is then handed over).
        """
        with self._guard:
            if self._running is None:
                return False
            ticket, _, doc, since = self._running
            closed = doc.session_context is None
            waited = time.monotonic() - since
            if not closed and waited < STALL_SECONDS:
                return False
            self._running = None
        if not closed:
            log.warning("a redraw was not done after %.1f s: the next one goes", waited)
        self._next()
        return True

    def _watch_loop(self) -> None:
        while True:
            time.sleep(self._check_seconds)
            try:
                self.release_lost()
            except Exception:  # noqa: BLE001 - the watch must outlive any one failure
                log.exception("the redraw queue's check failed")

    def _next(self) -> None:
        with self._guard:
            if self._running is not None:
                return
            while self._waiting:
                owner, (doc, run) = self._waiting.popitem(last=False)
                if doc.session_context is not None:  # None: the session was closed
                    ticket = next(self._tickets)
                    self._running = (ticket, owner, doc, time.monotonic())
                    break
            else:
                return

        def step():
            try:
                run()
            finally:
                self._done(ticket)
        try:
            self._schedule(doc, step)
        except Exception:  # noqa: BLE001 - a session closing meanwhile: the others go on
            log.exception("a redraw could not be scheduled")
            self._done(ticket)

    def _done(self, ticket: int) -> None:
        """The redraw ``ticket`` is over: hand the next over (unless one is already on the loop)."""
        with self._guard:
            if self._running is not None and self._running[0] == ticket:
                self._running = None
        self._next()


#: The server's queue, shared by every session's pages.
REDRAWS = RedrawQueue()
