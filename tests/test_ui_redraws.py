"""The server-wide redraw queue: one page's redraw at a time on the loop, a user's own change first."""

from __future__ import annotations

import logging

import pytest

from dpexplorer.ui import serving
from dpexplorer.ui.serving import RedrawQueue

# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


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
    return RedrawQueue(schedule=loop, check_seconds=None), loop, ran


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
    q = RedrawQueue(schedule=schedule, check_seconds=None)
    q.submit("a", Doc(), redraw(ran, "a"))
    with caplog.at_level(logging.ERROR, logger="dpexplorer.ui.serving"):
        q.submit("b", Doc(), redraw(ran, "b"))
    assert ran == ["b"] and "could not be scheduled" in caplog.text


def test_a_lost_redraw_stops_holding_the_loop_after_the_stall_limit(monkeypatch, caplog):
    q, loop, ran = queue_and_log()
    now = [1000.0]
    monkeypatch.setattr(serving.time, "monotonic", lambda: now[0])
    q.submit("a", Doc(), redraw(ran, "a"))
    loop.scheduled.pop(0)  # lost: never run, never forgotten, its session still open
    q.submit("b", Doc(), redraw(ran, "b"))
    assert not loop.scheduled  # a is taken as running
    now[0] += serving.STALL_SECONDS - 0.1
    assert not q.release_lost() and not loop.scheduled
    now[0] += 0.2
    with caplog.at_level(logging.WARNING, logger="dpexplorer.ui.serving"):
        assert q.release_lost()  # no other submit needed: the watch thread calls this
    while loop.scheduled:
        loop.run_next()
    assert ran == ["b"] and "not done after" in caplog.text


def test_a_session_closed_while_its_redraw_is_scheduled_releases_the_queue(caplog):
    """The stall that failed CI at 83544c4: a redraw handed to the loop of a session that is
    then destroyed never runs (Bokeh drops the callbacks of destroyed sessions)."""
    q, loop, ran = queue_and_log()
    closing = Doc()
    q.submit("a", closing, redraw(ran, "a"))
    loop.scheduled.pop(0)  # dropped with its session
    q.submit("b", Doc(), redraw(ran, "b"), urgent=True)
    assert not loop.scheduled
    closing.session_context = None  # destroyed; its page was never forgotten
    with caplog.at_level(logging.WARNING, logger="dpexplorer.ui.serving"):
        assert q.release_lost()
    loop.run_next()
    assert ran == ["b"] and "not done after" not in caplog.text  # a closed session is no stall


def test_the_watch_thread_releases_a_lost_redraw_without_another_submit(monkeypatch):
    """Nothing else submitted after the lost redraw (an idle page waiting for its ε change):
    the queue's own thread hands the waiting redraw over."""
    import threading

    monkeypatch.setattr(serving, "STALL_SECONDS", 0.05)
    handed = threading.Event()
    calls = []

    def schedule(doc, fn):
        calls.append(fn)
        if len(calls) > 1:
            handed.set()
    q = RedrawQueue(schedule=schedule, check_seconds=0.01)
    q.submit("a", Doc(), lambda: None)  # handed over, never run
    q.submit("b", Doc(), lambda: None, urgent=True)
    assert handed.wait(10), "the waiting redraw was never handed to the loop"
    assert len(calls) == 2 and q.pending() == 0


def test_a_late_report_of_a_released_redraw_does_not_release_the_next(monkeypatch):
    q, loop, ran = queue_and_log()
    now = [1000.0]
    monkeypatch.setattr(serving.time, "monotonic", lambda: now[0])
    q.submit("a", Doc(), redraw(ran, "a"))
    slow = loop.scheduled.pop(0)[1]
    q.submit("b", Doc(), redraw(ran, "b"))
    now[0] += serving.STALL_SECONDS + 1
    assert q.release_lost()  # a is slow, not lost: b is handed over behind it
    q.submit("c", Doc(), redraw(ran, "c"))
    slow()  # a finally runs and reports done: b still holds the queue
    assert len(loop.scheduled) == 1  # only b; c waits for b
    loop.run_next()
    loop.run_next()
    assert ran == ["a", "b", "c"]


def test_on_session_loop_runs_at_once_outside_a_server():
    ran = []
    serving.on_session_loop(lambda: ran.append(1))
    assert ran == [1]


def test_a_release_is_drawn_on_the_event_loop_not_by_the_thread_that_made_it(monkeypatch):
    """Regression: the document held from a worker thread sends its changes Bokeh's way, which
    can overtake Panel's queued messages ("reference … isn't known").  The Release page's
    redraw (it holds the document) must run as an event-loop callback instead."""
    import contextlib

    import panel as pn
    from panel.io.state import set_curdoc
    from ui_fakes import served_document

    from dpexplorer.ui.release_view import ReleaseView
    from dpexplorer.ui.session import Session

    doc, context = served_document()
    scheduled, held = [], []
    monkeypatch.setattr(pn.state, "execute", lambda fn, schedule="auto": scheduled.append(fn))
    real_hold = pn.io.hold

    @contextlib.contextmanager
    def spy_hold(*args, **kwargs):
        held.append(len(scheduled))
        with real_hold(*args, **kwargs):
            yield
    monkeypatch.setattr(pn.io, "hold", spy_hold)
    view = ReleaseView(Session(), trials=10, background=True)  # a task, as served
    view.panel()
    with set_curdoc(doc):
        assert view.run_release() is True, view.error
    assert view.wait(60)
    assert held == [] and scheduled, "the release was drawn (the document held) off the loop"
    assert view.last is None, "the release was shown from the task's thread"
    with set_curdoc(doc):
        while scheduled:  # the event loop
            scheduled.pop(0)()
    assert view.last is not None and view.error == ""
    assert held, "the redraw never ran on the loop"


def test_served_document_is_the_current_document_of_a_server_session_only():
    from bokeh.document import Document
    from panel.io.state import set_curdoc
    from ui_fakes import served_document as fake_served

    from dpexplorer.ui.serving import served_document

    assert served_document() is None  # a test, a script
    with set_curdoc(Document()):
        assert served_document() is None  # a document with no session (a notebook's)
    doc, context = fake_served()
    with set_curdoc(doc):
        assert served_document() is doc
    del context


def test_an_entered_epsilon_is_handled_at_once_not_after_panels_debounce(monkeypatch):
    """The sidebar's ε and δ boxes skip Panel's 50 ms hold on a browser's change (an
    ε change's redraw starts sooner); a plain FloatInput still waits."""
    import panel as pn
    from ui_fakes import served_document

    from dpexplorer.ui.session import EnteredFloatInput, Session

    doc, _context = served_document()
    executed, timed = [], []
    monkeypatch.setattr(pn.state, "execute", lambda fn, schedule="auto": executed.append(fn))
    monkeypatch.setattr(doc, "add_timeout_callback", lambda fn, ms: timed.append(ms))
    for widget in (EnteredFloatInput(value=1.0), pn.widgets.FloatInput(value=1.0)):
        widget._server_change(doc, "ref", None, "value", 1.0, 0.5)  # the browser's change
    assert len(executed) == 1 and timed == [50]
    # the sidebar's ε and δ (and budget caps) are such boxes
    from dpexplorer.ui.session import _LABEL
    boxes = {getattr(b, _LABEL): b.value for b in Session().controls().select(EnteredFloatInput)}
    assert boxes["ε (> 0)"] == Session().epsilon and boxes["δ (0 < δ < 1)"] == Session().delta
