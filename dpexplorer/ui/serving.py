"""How the served explorer's work reaches the browser: three rules, each kept for a measurement.

Everything here acts only in a served app (``panel serve``); in a notebook, a
script or a test every page draws and computes at once, in the caller's thread.

1. **One redraw at a time, the user's own first** (:class:`RedrawQueue`,
   :data:`REDRAWS`).
   Every session of a Panel server shares one event loop, and a page's redraw (a
   HoloViews plot built or updated, a table replaced) holds that loop for 0.1-2 s,
   more on a loaded machine.  Posted straight to the loop, the redraws of all
   sessions queue there first come, first served, and a user's ε change waits
   behind every other session's plots: with eight sessions opening the Compare
   page at once (``python benchmarks/bench_browser.py --n 1024 --sessions 8``, 2
   cores), a py-spy profile of the server showed its loop busy almost all the time, 38 % of it in
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

2. **A hidden page waits** (:class:`ShownGate`, :class:`LazyCard`; and
   :class:`TableSlot`, new rows in a new table, as a table being drawn drops them).
   Every page of the explorer reacts to the shared :class:`~dpexplorer.ui.session.Session`
   (the sidebar, the workload built on another page).  A page in a hidden tab
   that redraws its plots anyway costs the server a second per redraw (building
   HoloViews/Bokeh models on the event loop, which serialises every session's
   updates) and the browser as much again, while the user waits for the page in
   front of them: loading the 280,000-cell CPS preset on the Workload page took
   15–40 s to show its query count because the hidden Compare and Strategy pages
   redrew first (measured with a served app in headless chromium driven by Playwright, 2 cores).

   A :class:`ShownGate` keeps the redraws of a hidden page (only the latest one
   per key: redraws read the page's current state) and runs them when the page
   is shown.  Widgets bound to a page's parameters (status lines, progress bars,
   busy overlays) bind to a :meth:`ShownGate.mirror` of them instead: in the
   browser every text or visibility change lays out the whole document again,
   hidden tabs included (≈ 0.3–1 s each in headless Chromium on 2 cores).  The app
   tells each page's gate when its tab becomes active
   (:meth:`ShownGate.show`); a page used on its own (a notebook cell, tests) is
   always shown, so nothing is ever deferred there.

3. **One session's events in the order the user made them** (:class:`SessionOrderedPool`,
   :func:`install`).
   The served explorer runs Panel's widget callbacks on a thread pool
   (``pn.extension(nthreads=2)``), so that a callback that computes (a release,
   a DAWA run, a CSV upload) does not stop the event loop every session shares.
   Panel 1.9 submits each event to that pool on its own: a value typed into a
   field and a button clicked a moment later go to two threads, and the click can
   be handled first.  A user who typed a weight of -2 and pressed "Add term" then
   got a term of weight 1 added and no message (seen in a full test run; the
   browser test waited 1.5 s between the two to stay green).

   :class:`SessionOrderedPool` is Panel's pool with one rule added: the events of
   one session (one Bokeh ``Document``) start in the order they were submitted,
   each after the previous one has finished.  Different sessions still run side by
   side on the pool's threads.  A handler that runs longer than
   :data:`HOLD_SECONDS` (a Run button's computation) stops holding the ones behind
   it, so an ε change made during a long run waits at most that long.  Work
   submitted without a session (periodic callbacks) runs as before.

   :func:`install` puts it in place of the pool ``pn.extension(nthreads=...)``
   made; ``apps/explorer.py`` calls it.  Panel keeps its pool in
   ``pn.state._thread_pool`` (a private name: :func:`install` checks it is there
   and raises otherwise, and ``tests/test_ui_event_order.py`` checks the order in a
   served page, so a Panel upgrade that moves it fails a test instead of silently
   bringing the race back).

   With a pool, :func:`install` also puts in :func:`install_echo_guard`: Panel
   1.9 sent a selection widget's older value back over a newer one the browser
   had sent meanwhile (five attributes removed quickly from a MultiChoice, one
   came back), because it matched its echo by identity.

The rules' tests: ``tests/test_ui_redraws.py``, ``tests/test_ui_shown.py`` and
``tests/test_ui_event_order.py`` (the last one also in a served page in headless
Chromium, with Panel's own pool beside this one).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import panel as pn
import param
from bokeh.document import Document
from panel.io.state import set_curdoc

if TYPE_CHECKING:
    import pandas as pd

#: Keyword of a widget's caption: ``label`` since Panel 1.9 (``name`` is deprecated there).
LABEL = "label" if "label" in pn.widgets.IntInput.param else "name"
#: Keyword of a button's colour: ``color`` since Panel 1.9 (``button_type`` is deprecated there).
COLOR = "color" if "color" in pn.widgets.Button.param else "button_type"

__all__ = [
    "LABEL",
    "COLOR",
    "RedrawQueue",
    "REDRAWS",
    "STALL_SECONDS",
    "CHECK_SECONDS",
    "on_loop",
    "on_session_loop",
    "served_document",
    "models_batch",
    "freeze_models",
    "no_connection",
    "held_on_loop",
    "on_event_loop",
    "LazyCard",
    "TableSlot",
    "ShownGate",
    "run_redraws",
    "HOLD_SECONDS",
    "SessionOrderedPool",
    "document_of",
    "install_echo_guard",
    "install",
]

log = logging.getLogger(__name__)


# ================================================================ 1. one redraw at a time
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


# ================================================================ 2. a hidden page waits
_MIRRORS = itertools.count(1)


class ShownGate:
    """Run UI updates at once while the page is shown, else once when it is next shown.

    Parameters
    ----------
    lock : threading.RLock, optional
        Held while deferred updates run (the page's own lock, so that they do
        not interleave with its worker's posted updates).  Must be reentrant
        if updates are requested while it is held.

    Notes
    -----
    Thread-safe: :meth:`run` may be called from the event loop or a worker,
    :meth:`show` from Panel's callback threads.  An update requested while the
    page becomes visible is either run by :meth:`show` or run at once, never
    lost.
    """

    def __init__(self, lock: threading.RLock | None = None):
        self._lock = lock
        self._guard = threading.Lock()
        self._pending: dict[str, Callable[[], None]] = {}
        self._shown = True

    @property
    def shown(self) -> bool:
        """Whether the page is on screen (``True`` until told otherwise)."""
        return self._shown

    @property
    def pending(self) -> tuple[str, ...]:
        """Keys of the updates waiting for the page to be shown (in request order)."""
        with self._guard:
            return tuple(self._pending)

    def run(self, key: str, fn: Callable[[], None]) -> None:
        """Call ``fn()`` now if the page is shown, else keep it (replacing an older ``key``)."""
        with self._guard:
            if not self._shown:
                self._pending.pop(key, None)  # keep the order of the latest requests
                self._pending[key] = fn
                return
        fn()

    def show(self, shown: bool = True) -> None:
        """Mark the page shown or hidden; when shown, run the updates kept meanwhile."""
        with self._guard:
            self._shown = bool(shown)
            if not shown or not self._pending:
                return
            pending, self._pending = self._pending, {}
        if self._lock is not None:
            with self._lock:
                run_redraws(pending)
        else:
            run_redraws(pending)

    def mirror(self, source: param.Parameterized, names: Sequence[str]) -> param.Parameterized:
        """A copy of ``source``'s parameters ``names`` that follows them only while shown.

        Bind widgets to ``mirror.param.<name>`` instead of
        ``source.param.<name>``: changes made while the page is hidden reach
        the mirror (all names at once, in one update) when it is shown.

        Parameters
        ----------
        source : param.Parameterized
            The page (or a component of it) owning the parameters.
        names : sequence of str
            Parameter names of ``source``.

        Raises
        ------
        KeyError
            If a name is not a parameter of ``source``.
        """
        names = list(names)
        missing = [n for n in names if n not in source.param]
        if missing:
            raise KeyError(f"{type(source).__name__} has no parameter(s) {missing}")
        cls = param.parameterized_class(
            f"Shown{type(source).__name__}",
            {n: param.Parameter(default=getattr(source, n), doc=source.param[n].doc)
             for n in names})
        view = cls()
        key = f"mirror-{next(_MIRRORS)}"

        def copy() -> None:
            with held_on_loop():  # the widgets' changes go to the browser in one message
                view.param.update(**{n: getattr(source, n) for n in names})
        source.param.watch(lambda *_: self.run(key, copy), names)
        return view


def run_redraws(pending: dict[str, Callable[[], None]]) -> None:
    """Call every redraw of ``pending`` (key -> function) in order; one that fails is logged
    and does not stop the others."""
    for key, fn in pending.items():
        try:
            fn()
        except Exception:  # noqa: BLE001 - one failed redraw must not stop the others
            log.exception("deferred update %r failed", key)


class TableSlot(pn.Column):
    """One table in a column, replaced by a new table on each :meth:`show` of new rows.

    Panel 1.9's Tabulator drops a data update that reaches the browser while it
    is (re)rendering the table -- just after the table joins the page or its
    container is shown -- and shows the old rows for good: the table release's
    ledger missed the release (1 run in 5), the "ε for this error" table stayed
    empty after the mode switch (once in a loaded browser tier).  A new table
    carries its rows from the start.  For read-only tables of results, whose
    rows all change together.

    Parameters
    ----------
    make : callable
        ``make(frame) -> pn.widgets.Tabulator``: the table of a ``pandas.DataFrame``.
    frame : pandas.DataFrame
        The first rows.
    **params
        ``pn.Column`` parameters (``visible``, ...); ``sizing_mode`` defaults to
        ``"stretch_width"``.
    """

    def __init__(self, make: Callable[[pd.DataFrame], pn.widgets.Tabulator], frame: pd.DataFrame,
                 **params):
        params.setdefault("sizing_mode", "stretch_width")
        super().__init__(make(frame), **params)
        self._make = make

    @property
    def table(self) -> pn.widgets.Tabulator:
        """The table shown now."""
        return self.objects[0]

    def show(self, frame: pd.DataFrame) -> None:
        """Show the rows of ``frame`` (a ``pandas.DataFrame``) in a new table."""
        self.objects = [self._make(frame)]


class LazyCard(pn.Card):
    """A ``pn.Card`` that starts collapsed and puts its contents in the page when first expanded.

    Until then the browser gets only the header: the contents' Bokeh models
    are not built, sent or walked on every later update of the document
    (Bokeh walks all of a document's models after each change of its
    structure).  :meth:`select` still finds the contents, so code that looks
    up a widget in the layout works before the first expansion.

    Parameters
    ----------
    *objects
        The card's contents.
    **params
        ``pn.Card`` parameters (``title``, ``sizing_mode``, ...); ``collapsed``
        defaults to True (False gives a plain card, contents drawn at once).
    """

    def __init__(self, *objects, **params):
        params.setdefault("collapsed", True)
        collapsed = params["collapsed"]
        super().__init__(*(() if collapsed else objects), **params)
        self._stash = [pn.panel(o) for o in objects] if collapsed else []
        self._watcher = (self.param.watch(self._expand, "collapsed") if self._stash else None)

    def _expand(self, event) -> None:
        if event.new or not self._stash:
            return
        stash, self._stash = self._stash, []
        self.param.unwatch(self._watcher)
        self.objects = stash

    def select(self, selector=None):
        """Like ``pn.Card.select``, also over contents not drawn yet."""
        found = super().select(selector)
        for obj in self._stash:
            found += obj.select(selector)
        return found


# ================================================================ 3. one session's events in order
#: Seconds a session's running event handler holds the session's later events back.  Panel's
#: own handlers of a typed value or a click take milliseconds (tens under load); a handler
#: running longer is computing, and the events behind it should not wait for the result.
HOLD_SECONDS = 1.5


#: A session's event handler that waited or ran longer than this (seconds) is logged (debug).
SLOW_SECONDS = 0.5


def document_of(fn, args=(), kwargs=None):
    """The Bokeh ``Document`` a task submitted by Panel belongs to, or None.

    Panel submits ``(handler, doc, ...)`` for widget changes and events,
    ``handler(doc)`` for on-load callbacks, and ``partial(run, doc, callback)``
    for ``pn.state.execute(..., schedule="thread")``.
    """
    candidates = list(args) + list((kwargs or {}).values())
    while isinstance(fn, functools.partial):
        candidates += list(fn.args) + list(fn.keywords.values())
        fn = fn.func
    for value in candidates:
        if isinstance(value, Document):
            return value
    return None


class _Lane:
    """One session's queue: the tasks waiting, which start holds the lane, and since when it
    runs (None while it waits for a free thread)."""

    __slots__ = ("waiting", "ticket", "since")

    def __init__(self):
        self.waiting: collections.deque = collections.deque()
        self.ticket = 0
        self.since: float | None = None


class SessionOrderedPool(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` that starts one session's tasks one after the other, in order.

    Parameters
    ----------
    max_workers : int, optional
        Threads shared by all sessions (Panel's ``nthreads``).
    hold_seconds : float
        How long a running task holds its session's later tasks back
        (:data:`HOLD_SECONDS`); after that the next one starts beside it.
    key : callable, optional
        ``key(fn, args, kwargs)`` -> the session a task belongs to, or None for
        a task with no order to keep (default :func:`document_of`).

    ``submit`` returns a ``Future`` that completes with the task, as the
    standard pool's does.
    """

    def __init__(self, max_workers: int | None = None, hold_seconds: float = HOLD_SECONDS,
                 key=document_of, thread_name_prefix: str = "dpexplorer-events"):
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        if not hold_seconds > 0:
            raise ValueError(f"hold_seconds must be a positive number of seconds, "
                             f"not {hold_seconds!r}")
        self.hold_seconds = float(hold_seconds)
        self._key = key
        self._guard = threading.Condition()
        self._lanes: dict = {}
        self._watcher: threading.Thread | None = None
        self._closed = False

    # ------------------------------------------------------------------ submitting
    def submit(self, fn, /, *args, **kwargs) -> Future:
        session = self._key(fn, args, kwargs)
        if session is None:
            return super().submit(fn, *args, **kwargs)
        outer: Future = Future()
        task = (fn, args, kwargs, outer, time.monotonic())
        with self._guard:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            lane = self._lanes.get(session)
            if lane is not None:
                lane.waiting.append(task)
                return outer
            lane = self._lanes[session] = _Lane()
        self._start(session, lane, task)
        return outer

    def _start(self, session, lane: _Lane, task) -> None:
        fn, args, kwargs, outer, submitted = task
        with self._guard:
            lane.ticket += 1
            ticket = lane.ticket
            lane.since = None  # the hold counts from when a thread runs it, not from now
            self._ensure_watcher()
        if not outer.set_running_or_notify_cancel():  # cancelled while it waited
            self._release(session, ticket)
            return
        try:
            inner = super().submit(self._run, lane, ticket, submitted, fn, *args, **kwargs)
        except BaseException as exc:  # the pool was shut down meanwhile
            outer.set_exception(exc)
            self._release(session, ticket)
            return
        inner.add_done_callback(functools.partial(self._finished, session, ticket, outer))

    def _run(self, lane: _Lane, ticket: int, submitted: float, fn, /, *args, **kwargs):
        start = time.monotonic()
        with self._guard:
            if lane.ticket == ticket:
                lane.since = start
                self._guard.notify_all()  # the watcher times the hold from now
        try:
            return fn(*args, **kwargs)
        finally:
            if start - submitted > SLOW_SECONDS or time.monotonic() - start > SLOW_SECONDS:
                log.debug("event handler %s started %.2f s after it was submitted, ran %.2f s",
                          getattr(fn, "__qualname__", fn), start - submitted,
                          time.monotonic() - start)

    def _finished(self, session, ticket: int, outer: Future, inner: Future) -> None:
        exc = inner.exception()
        if exc is None:
            outer.set_result(inner.result())
        else:
            outer.set_exception(exc)
        self._release(session, ticket)

    def _release(self, session, ticket: int) -> None:
        """Start the session's next task, if ``ticket`` still holds its lane."""
        with self._guard:
            lane = self._lanes.get(session)
            if lane is None or lane.ticket != ticket:
                return  # a late end of a task that stopped holding the lane
            if not lane.waiting:
                del self._lanes[session]
                return
            task = lane.waiting.popleft()
        self._start(session, lane, task)

    # ------------------------------------------------------------------ long handlers
    def _ensure_watcher(self) -> None:
        if self._watcher is None or not self._watcher.is_alive():
            self._watcher = threading.Thread(target=self._watch, name="dpexplorer-events-watch",
                                             daemon=True)
            self._watcher.start()

    def _watch(self) -> None:
        """Release the lanes whose task has held them longer than ``hold_seconds``."""
        while True:
            with self._guard:
                if self._closed and not self._lanes:
                    return
                now = time.monotonic()
                running = [(s, lane) for s, lane in self._lanes.items() if lane.since is not None]
                stale = [(s, lane.ticket) for s, lane in running
                         if now - lane.since >= self.hold_seconds]
                if not stale:
                    soonest = min((lane.since + self.hold_seconds - now
                                   for _, lane in running), default=None)
                    self._guard.wait(soonest)
                    continue
            for session, ticket in stale:
                log.debug("an event handler ran over %.1f s; the session's next event starts",
                          self.hold_seconds)
                self._release(session, ticket)

    def pending(self) -> int:
        """Tasks waiting for their session's earlier task (not counting running ones)."""
        with self._guard:
            return sum(len(lane.waiting) for lane in self._lanes.values())

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._guard:
            self._closed = True
            if cancel_futures:
                for lane in self._lanes.values():
                    for _fn, _args, _kwargs, outer, _submitted in lane.waiting:
                        outer.cancel()
                    lane.waiting.clear()
            self._guard.notify_all()
        super().shutdown(wait=wait, cancel_futures=cancel_futures)


def _equal(a, b) -> bool:
    """``a == b`` as one bool, False when the comparison fails or is ambiguous (arrays)."""
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - e.g. numpy's "truth value of an array is ambiguous"
        return False


def _keep_browser_values(update):
    """Wrap Panel's ``Syncable._scheduled_update_model``: a value equal to the one the browser
    sent is passed on as that very object, so Panel drops the echo (see :func:`install_echo_guard`)."""

    @functools.wraps(update)
    def scheduled_update_model(self, events, msg, root, model, doc, comm, curdoc_events):
        for attr, sent in (curdoc_events or {}).items():
            if attr in msg and msg[attr] is not sent and _equal(msg[attr], sent):
                msg[attr] = sent
        return update(self, events, msg, root, model, doc, comm, curdoc_events)

    scheduled_update_model.keeps_browser_values = True
    return scheduled_update_model


def install_echo_guard(syncable=None) -> None:
    """Stop Panel sending a widget's own older value back over a newer one the browser sent.

    With a thread pool, Panel sends a widget's model update made on a worker
    thread later, from the event loop, with the values the browser had sent
    (``curdoc_events``) so that it can drop their echo -- matched by identity
    (``is``).  Selection widgets (``Select``, ``MultiChoice``, ...) map the
    browser's labels to values and back, so the echo is an equal but new object
    and is not dropped; when the browser has meanwhile sent a newer value (a
    second attribute removed from a MultiChoice a moment after the first), Panel
    1.9 takes that pending value for a stale one, drops it, and sends the older
    value back: the removed attribute reappears in the browser and the server
    never sees the second removal.  Seen in a served page under load (3 of 12
    rounds of five quick removals, Chromium on 2 cores at load 5).

    The wrapper passes an equal value on as the browser's own object, so
    Panel's own echo rule applies; a different value (a handler that changed the
    widget's value) is sent as before.  Calling it again changes nothing.

    Raises
    ------
    RuntimeError
        If Panel's ``Syncable`` has no ``_scheduled_update_model`` (the private
        method this relies on has moved).
    """
    if syncable is None:
        from panel.reactive import Syncable as syncable
    update = getattr(syncable, "_scheduled_update_model", None)
    if update is None:
        raise RuntimeError("this Panel version has no Syncable._scheduled_update_model; the "
                           "guard against a widget's echoed older value cannot be installed")
    if not getattr(update, "keeps_browser_values", False):
        syncable._scheduled_update_model = _keep_browser_values(update)


def install(state=None) -> SessionOrderedPool | None:
    """Replace Panel's widget-callback pool by a :class:`SessionOrderedPool` of the same size.

    Call after ``pn.extension(nthreads=N)``.  Returns the pool in place, or
    None when Panel runs callbacks on the event loop (no ``nthreads``: already
    in order).  With a pool it also installs :func:`install_echo_guard` (a
    widget's echoed older value, a defect of Panel's threaded mode).  Calling it
    again changes nothing.

    Raises
    ------
    RuntimeError
        If this Panel keeps no ``_thread_pool`` on ``pn.state`` (the private
        attribute this relies on has moved), or :func:`install_echo_guard` cannot
        be installed.
    """
    if state is None:
        from panel.io.state import state
    if not hasattr(state, "_thread_pool"):
        raise RuntimeError("this Panel version keeps no pn.state._thread_pool; the "
                           "session-ordered event pool cannot be installed")
    pool = state._thread_pool
    if pool is not None:
        install_echo_guard()
    if pool is None or isinstance(pool, SessionOrderedPool):
        return pool
    ordered = SessionOrderedPool(max_workers=pool._max_workers)
    state._thread_pool = ordered
    pool.shutdown(wait=False)
    return ordered
