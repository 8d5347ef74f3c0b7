"""The server-wide redraw queue: one page's redraw at a time on the loop, a user's own change first."""

from __future__ import annotations

import logging

import pytest

from dpexplorer.ui import redraws
from dpexplorer.ui.redraws import RedrawQueue


class Doc:
    """A session document: ``session_context`` is None once the session is closed."""

    def __init__(self):
        self.session_context = object()


class Loop:
    """Records what the queue schedules; ``run_next()`` plays the event loop."""

    def __init__(self):
        self.scheduled: list = []

    def __call__(self, doc, fn):
        self.scheduled.append((doc, fn))

    def run_next(self):
        _, fn = self.scheduled.pop(0)
        fn()


def queue_and_log():
    loop, ran = Loop(), []
    return RedrawQueue(schedule=loop), loop, ran


def redraw(ran, name, fail=False):
    def run():
        ran.append(name)
        if fail:
            raise RuntimeError(f"{name} failed")
    return run


def test_one_redraw_at_a_time_on_the_loop():
    q, loop, ran = queue_and_log()
    q.submit("a", Doc(), redraw(ran, "a"))
    q.submit("b", Doc(), redraw(ran, "b"))
    assert len(loop.scheduled) == 1 and q.pending() == 1  # b waits for a to be done
    loop.run_next()
    assert ran == ["a"] and len(loop.scheduled) == 1 and q.pending() == 0
    loop.run_next()
    assert ran == ["a", "b"] and not loop.scheduled


def test_a_users_own_change_goes_before_the_waiting_redraws():
    q, loop, ran = queue_and_log()
    for name in "abc":
        q.submit(name, Doc(), redraw(ran, name))
    q.submit("d", Doc(), redraw(ran, "d"), urgent=True)
    while loop.scheduled:
        loop.run_next()
    assert ran == ["a", "d", "b", "c"]


def test_a_pages_newer_redraw_replaces_its_waiting_one_in_place():
    q, loop, ran = queue_and_log()
    doc = Doc()
    q.submit("a", Doc(), redraw(ran, "a"))
    q.submit("b", doc, redraw(ran, "b1"))
    q.submit("c", Doc(), redraw(ran, "c"))
    q.submit("b", doc, redraw(ran, "b2"))
    while loop.scheduled:
        loop.run_next()
    assert ran == ["a", "b2", "c"]


def test_a_closed_sessions_redraw_is_skipped():
    q, loop, ran = queue_and_log()
    closed = Doc()
    q.submit("a", Doc(), redraw(ran, "a"))
    q.submit("b", closed, redraw(ran, "b"))
    q.submit("c", Doc(), redraw(ran, "c"))
    closed.session_context = None
    while loop.scheduled:
        loop.run_next()
    assert ran == ["a", "c"]


def test_forgetting_a_page_drops_its_redraw_and_frees_the_loop():
    q, loop, ran = queue_and_log()
    q.submit("a", Doc(), redraw(ran, "a"))
    q.submit("b", Doc(), redraw(ran, "b"))
    q.submit("c", Doc(), redraw(ran, "c"))
    q.forget("b")  # waiting: dropped
    q.forget("a")  # on the loop, its session closed before the loop ran it: the next goes
    assert len(loop.scheduled) == 2
    loop.scheduled.pop(0)  # a's step never runs (its session is gone)
    loop.run_next()
    assert ran == ["c"] and not loop.scheduled and q.pending() == 0


def test_a_failing_redraw_does_not_stop_the_others():
    q, loop, ran = queue_and_log()
    q.submit("a", Doc(), redraw(ran, "a", fail=True))
    q.submit("b", Doc(), redraw(ran, "b"))
    with pytest.raises(RuntimeError, match="a failed"):  # Panel reports it in the app
        loop.run_next()
    loop.run_next()
    assert ran == ["a", "b"]


def test_a_redraw_that_cannot_be_scheduled_lets_the_next_go(caplog):
    ran = []
    calls = []

    def schedule(doc, fn):
        calls.append(doc)
        if len(calls) == 1:
            raise RuntimeError("session closing")
        fn()
    q = RedrawQueue(schedule=schedule)
    q.submit("a", Doc(), redraw(ran, "a"))
    with caplog.at_level(logging.ERROR, logger="dpexplorer.ui.redraws"):
        q.submit("b", Doc(), redraw(ran, "b"))
    assert ran == ["b"] and "could not be scheduled" in caplog.text


def test_a_lost_redraw_stops_holding_the_loop_after_the_stall_limit(monkeypatch, caplog):
    q, loop, ran = queue_and_log()
    now = [1000.0]
    monkeypatch.setattr(redraws.time, "monotonic", lambda: now[0])
    q.submit("a", Doc(), redraw(ran, "a"))
    loop.scheduled.pop(0)  # lost: never run, never forgotten
    q.submit("b", Doc(), redraw(ran, "b"))
    assert not loop.scheduled  # a is taken as running
    now[0] += redraws.STALL_SECONDS + 1
    with caplog.at_level(logging.WARNING, logger="dpexplorer.ui.redraws"):
        q.submit("c", Doc(), redraw(ran, "c"))
    while loop.scheduled:
        loop.run_next()
    assert ran == ["b", "c"] and "not done after" in caplog.text
