"""When the Compare page's figures are redrawn: once shown, one per turn of the server's loop
(:class:`CompareRedraws`, a mixin of :class:`~dpexplorer.ui.compare_view.ComparePage`)."""

from __future__ import annotations

import logging
import time

from panel.io.state import set_curdoc

from .serving import REDRAWS, models_batch, run_redraws, served_document

__all__ = ["CompareRedraws"]

log = logging.getLogger("dpexplorer.ui.compare_view")  # the page's log (DPEXPLORER_LOG_LEVEL)


class CompareRedraws:
    """The Compare page's redraw scheduling (the page sets ``_urgent``, ``_queued``,
    ``_queued_guard``, ``_figures_after`` and ``_figures_timer``)."""

    #: Seconds between the table's first rows and the first figures (served pages), and the
    #: table's next rows wait as long: Panel 1.9's Tabulator drops data reaching the browser
    #: while it initialises (headless chromium, 2 cores: 4.4-4.9 s → 2.8-3.0 s at n = 256, 1024).
    first_figures_delay = 1.0

    def _forget_redraws(self) -> None:
        """Drop the page's redraws waiting in the server's queue (its session has ended)."""
        REDRAWS.forget(self)

    def _redraw(self, key: str, fn) -> None:
        """Run the redraw ``fn`` once the page is shown: served, on the session's loop one per turn
        (:data:`~dpexplorer.ui.serving.REDRAWS`), a waiting one of the same ``key`` replaced."""
        self.gate.run(key, lambda: self._on_loop(key, fn))

    def _draw_each(self, name: str, charts) -> None:
        """Update the live plots ``charts``, ``[(plot, data, key), ...]`` (callables of the page's
        state): number copies at once, the first HoloViews redraw now, each other its own redraw
        (a figure takes 0.1-0.3 s, more with eight sessions: ``benchmarks/bench_browser.py``)."""
        drawn = False
        for i, (plot, data, key) in enumerate(charts):
            if plot.copy(data(), key()):
                continue
            if not drawn:
                drawn = True
                plot.update(data(), key(), copy=False)
            else:
                self._redraw(f"{name}:{i}", lambda plot=plot, data=data, key=key:
                             plot.update(data(), key()))

    def _figures_wait(self) -> None:
        """The table has just joined a served page: its first figures wait (:meth:`_later`)."""
        if served_document() is not None and self.first_figures_delay > 0:
            self._figures_after = time.monotonic() + self.first_figures_delay

    def _later(self, key: str, fn) -> bool:
        """``True`` if ``fn`` is put off (redrawn later) within :attr:`first_figures_delay` of the
        table's first rows (:meth:`_figures_wait`)."""
        after = self._figures_after
        if after is None:
            return False
        wait = after - time.monotonic()
        if wait <= 0:
            self._figures_after = None
            return False
        doc = served_document()
        if doc is None:
            return False
        if key not in self._figures_timer:
            self._figures_timer.add(key)

            def due():
                self._figures_timer.discard(key)
                with set_curdoc(doc):
                    self._redraw(key, fn)
            doc.add_timeout_callback(due, int(wait * 1000) + 1)
        return True

    def _on_loop(self, key: str, fn) -> None:
        doc = served_document()
        if doc is None:
            fn()  # a notebook, a script, a test: at once
            return
        urgent = self._urgent
        with self._queued_guard:
            self._queued.pop(key, None)
            self._queued[key] = fn
        posted = time.perf_counter()

        def run():
            # one redraw per turn (the oldest first), so that another user's ε change goes in
            # between (the first figures took 0.6-4 s in one turn, 2 cores)
            with self._queued_guard:
                if not self._queued:  # an earlier run took them
                    return
                if self._closed():  # nobody to see them
                    self._queued.clear()
                    return
                key = next(iter(self._queued))
                todo = {key: self._queued.pop(key)}
                more = bool(self._queued)
            # not under the page's lock: a worker holding it would hold every session's loop
            t0 = time.perf_counter()
            with models_batch(doc):
                run_redraws(todo)
            log.debug("redraws %s%s done on the event loop in %.2f s, %.2f s after they were "
                      "posted (%d other pages waiting)", key,
                      " (urgent)" if urgent else "", time.perf_counter() - t0, t0 - posted,
                      REDRAWS.pending())
            if more:  # the next waits its turn
                REDRAWS.submit(self, doc, run, urgent=urgent)
        # submitted every time, so that no lost run can hold this page's redraws
        REDRAWS.submit(self, doc, run, urgent=urgent)
