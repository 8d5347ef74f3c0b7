"""A closed browser session leaves nothing behind in the server (its session state and pages).

A served explorer lives for days; each browser tab builds one
:class:`~dpexplorer.ui.session.Session` and its pages.  Anything server-wide
that keeps a reference to them (a queue, a cache, a callback, a thread) keeps
every plot and table of a closed tab alive, and the server's memory grows with
every visitor.  Here a server in this process opens sessions (Bokeh's client,
no browser), builds every page in each, closes them, and checks that Panel's
clean-up of unused sessions frees every Session and page.
"""

from __future__ import annotations

import gc
import socket
import time
import weakref

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_closed_sessions_are_freed():
    import panel as pn
    from bokeh.client import pull_session

    from dpexplorer.ui.app import PAGES, ExplorerApp

    alive: weakref.WeakSet = weakref.WeakSet()
    made: list[str] = []  # every object built (``alive`` loses a closed session's at once)

    def make():
        app = ExplorerApp()
        objects = [app.session] + [app.page_for(title) for title, _, _ in PAGES]
        alive.update(objects)
        made.extend(type(o).__name__ for o in objects)
        return app.template()

    port = _free_port()
    pn.extension("tabulator", "filedropper", notifications=True)
    server = pn.serve({"app": make}, port=port, address="127.0.0.1", threaded=True, show=False,
                      check_unused_sessions_milliseconds=500, unused_session_lifetime_milliseconds=500,
                      websocket_origin=[f"127.0.0.1:{port}"])
    try:
        deadline = time.monotonic() + 60
        while not getattr(server, "_started", True) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
        for _ in range(3):
            with pull_session(url=f"http://127.0.0.1:{port}/app"):
                time.sleep(3.0)  # the pages start their work (comparisons, figures)
        # counted as built, not as alive: a session closed 0.5 s ago may be freed already
        built = len(made)
        assert built == 3 * (1 + len(PAGES)), f"{built} session objects built"
        deadline = time.monotonic() + 120
        while alive and time.monotonic() < deadline:
            time.sleep(1.0)
            gc.collect()
        left = sorted({type(o).__name__ for o in alive})
        assert not alive, (f"{len(alive)} of {built} sessions/pages still alive 120 s after their "
                           f"sessions closed: {left}")
    finally:
        server.stop()
