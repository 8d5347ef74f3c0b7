"""Redraw a page only while it is on screen.

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
hidden tabs included (≈ 0.3–1 s each in headless Chromium on 2 cores).  The app tells each page's gate when its tab becomes active
(:meth:`ShownGate.show`); a page used on its own (a notebook cell, tests) is
always shown, so nothing is ever deferred there.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Sequence

import panel as pn
import param

from .redraws import held_on_loop

__all__ = ["LazyCard", "ShownGate", "run_redraws"]

log = logging.getLogger(__name__)

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
