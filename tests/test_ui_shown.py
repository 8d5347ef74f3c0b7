"""Pages in hidden tabs keep their redraws until shown (dpexplorer.ui.serving, ExplorerApp)."""

from __future__ import annotations

import threading

import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")

from dpexplorer.ui.app import PAGES, ExplorerApp  # noqa: E402
from dpexplorer.ui.serving import ShownGate  # noqa: E402

# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


# ------------------------------------------------------------------ the gate
def test_shown_gate_runs_at_once_while_shown():
    gate, calls = ShownGate(), []
    gate.run("a", lambda: calls.append("a"))
    assert calls == ["a"] and gate.shown and gate.pending == ()


def test_hidden_gate_keeps_the_latest_update_per_key_in_request_order():
    gate, calls = ShownGate(), []
    gate.show(False)
    gate.run("a", lambda: calls.append("a1"))
    gate.run("b", lambda: calls.append("b"))
    gate.run("a", lambda: calls.append("a2"))  # replaces a1 and moves after b
    assert calls == [] and gate.pending == ("b", "a")
    gate.show(False)  # still hidden: nothing runs
    assert calls == []
    gate.show(True)
    assert calls == ["b", "a2"] and gate.pending == ()
    gate.show(True)  # nothing left to run
    assert calls == ["b", "a2"]


def test_a_mirror_follows_its_source_only_while_shown():
    import param

    class Page(param.Parameterized):
        status = param.String("")
        busy = param.Boolean(False)

    page, gate = Page(), ShownGate()
    mirror = gate.mirror(page, ["status", "busy"])
    changes = []
    mirror.param.watch(lambda *events: changes.append(sorted(e.name for e in events)),
                       ["status", "busy"])
    page.status = "a"
    assert mirror.status == "a" and changes == [["status"]]
    gate.show(False)
    page.param.update(status="b", busy=True)
    page.status = "c"
    assert (mirror.status, mirror.busy) == ("a", False) and len(changes) == 1
    gate.show(True)  # the latest values, in one update
    assert (mirror.status, mirror.busy) == ("c", True) and changes[1:] == [["busy", "status"]]
    with pytest.raises(KeyError, match="no parameter"):
        gate.mirror(page, ["nope"])


def test_a_mirror_sends_its_changes_in_one_held_update_on_the_servers_loop(monkeypatch):
    # each message to the browser walks every model of the page (about 10 ms on a Compare
    # page): on the loop of a
    # served session a mirror's changes are made under one pn.io.hold (one message); in a
    # worker thread, or outside a server, never (a hold released from a thread sends Bokeh's
    # own messages, which can overtake Panel's)
    import asyncio
    import contextlib

    import param
    from panel.io.state import set_curdoc
    from ui_fakes import served_document

    from dpexplorer.ui import serving

    class Page(param.Parameterized):
        status = param.String("")
        busy = param.Boolean(False)

    holds, seen = [], []

    @contextlib.contextmanager
    def hold(doc=None, *args, **kwargs):
        holds.append(doc)
        yield
        holds.append("end")
    monkeypatch.setattr(pn.io, "hold", hold)
    doc, _context = served_document()
    page, gate = Page(), ShownGate()
    mirror = gate.mirror(page, ["status", "busy"])
    mirror.param.watch(lambda *events: seen.append((sorted(e.name for e in events), list(holds))),
                       ["status", "busy"])

    async def on_loop(status):
        assert serving.on_event_loop()
        page.param.update(status=status, busy=not page.busy)
    with set_curdoc(doc):
        asyncio.run(on_loop("loop"))
    assert seen == [(["busy", "status"], [doc])] and holds == [doc, "end"]
    seen.clear(), holds.clear()
    with set_curdoc(doc):
        assert not serving.on_event_loop()
        worker = threading.Thread(target=lambda: page.param.update(status="thread", busy=False))
        worker.start(), worker.join()
        page.status = "not on a loop"
    asyncio.run(on_loop("no server"))  # a loop, but no served document (a notebook's kernel)
    assert holds == [] and [names for names, _ in seen] == [["busy", "status"], ["status"],
                                                            ["busy", "status"]]


def test_a_failing_deferred_update_does_not_stop_the_others(caplog):
    gate, calls = ShownGate(), []
    gate.show(False)
    gate.run("bad", lambda: 1 / 0)
    gate.run("good", lambda: calls.append("good"))
    gate.show(True)
    assert calls == ["good"] and "deferred update 'bad' failed" in caplog.text


def test_deferred_updates_run_under_the_pages_lock():
    lock, seen = threading.RLock(), []
    gate = ShownGate(lock)
    gate.show(False)
    # RLock has no public "held by me"; acquiring with blocking=False from another thread tells
    gate.run("a", lambda: seen.append(_held_elsewhere(lock)))
    gate.show(True)
    assert seen == [True]


def _held_elsewhere(lock) -> bool:
    result = []
    t = threading.Thread(target=lambda: result.append(not lock.acquire(blocking=False)))
    t.start()
    t.join()
    return result[0]


def test_no_update_is_lost_when_requests_race_with_showing():
    """Requests from one thread while another toggles the gate: the last request always runs."""
    for _ in range(50):
        gate, ran = ShownGate(), []
        gate.show(False)
        start = threading.Barrier(2)

        def requests():
            start.wait()
            for i in range(200):
                gate.run("k", lambda i=i: ran.append(i))

        def toggles():
            start.wait()
            for _ in range(100):
                gate.show(False)
                gate.show(True)

        threads = [threading.Thread(target=requests), threading.Thread(target=toggles)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        gate.show(True)
        assert 199 in ran  # the latest request ran, whatever the interleaving


# ------------------------------------------------------------------ the app
TITLES = [t for t, _, _ in PAGES]


def _app(*opened):
    """An app with the pages ``opened`` built (opened once, then back to the Workload page)."""
    app = ExplorerApp()
    for title in opened:
        app.tabs.active = TITLES.index(title)
    app.tabs.active = 0
    for page in app.pages.values():
        if hasattr(page, "wait"):
            assert page.wait(300)
    return app


def test_pages_are_built_when_first_opened():
    app = ExplorerApp()
    assert list(app.pages) == ["Workload"]  # only the first page at load
    assert [len(app._slots[t]) for t in TITLES] == [0] * len(TITLES)
    app.__panel__()  # displayed: the open page is drawn
    assert [len(app._slots[t]) for t in TITLES] == [1] + [0] * (len(TITLES) - 1)
    app.tabs.active = TITLES.index("Release")
    assert list(app.pages) == ["Workload", "Release"] and len(app._slots["Release"]) == 1
    app.tabs.active = 0
    assert app.page_for("Release") is app.pages["Release"]  # built once


def test_a_page_built_for_a_link_is_drawn_when_opened():
    # a shared link opened on Compare builds the Workload page (its workload applies at
    # load) but only the Compare page goes into the first document
    app = ExplorerApp(page=TITLES.index("Compare"))
    workload = app.page_for("Workload")
    app.__panel__()
    assert set(app.pages) == {"Workload", "Compare"}
    assert len(app._slots["Workload"]) == 0 and len(app._slots["Compare"]) == 1
    app.pages["Compare"].cancel()
    app.tabs.active = 0
    assert len(app._slots["Workload"]) == 1
    app.tabs.active = TITLES.index("Compare")
    assert len(app._slots["Workload"]) == 1 and app.pages["Workload"] is workload  # kept


def test_only_the_active_tab_is_shown():
    titles = TITLES
    app = _app(*titles)
    gated = {t: p.gate for t, p in app.pages.items() if getattr(p, "gate", None) is not None}
    assert {"Compare", "Strategy", "Data & DAWA", "Release", "Learn"} <= set(gated)
    for active in range(len(titles)):
        app.tabs.active = active
        assert {t: g.shown for t, g in gated.items()} == {t: t == titles[active] for t in gated}
    assert app.page == len(titles) - 1  # the tab and the page parameter stay linked


def test_a_hidden_compare_page_redraws_when_it_is_shown():
    app = _app("Compare")
    compare = app.pages["Compare"]
    compare.auto_optimize = False  # the classic strategies are enough here
    compare.panel()
    assert app.tabs.active == 0  # the Workload page is in front
    table = compare._panes["table"]
    before = table.value.copy()
    app.session.workload = dpx.workloads.prefix(64)
    assert compare.wait(300)
    # the comparison is computed (the page's state) but its table widget is not redrawn
    assert compare.table.attrs["m"] == 64 and "results" in compare.gate.pending
    assert table.value.equals(before)
    app.tabs.active = TITLES.index("Compare")
    assert not compare.gate.pending
    assert table.value.equals(compare._table_value())
    assert not table.value.equals(before)


def test_a_hidden_strategy_page_redraws_when_it_is_shown():
    app = _app("Strategy")
    strategy = app.pages["Strategy"]
    strategy.panel()
    plot = strategy._panes["left_plot"]
    before = plot.object
    app.session.workload = dpx.workloads.prefix(32)
    assert strategy.wait(300)
    assert strategy.left_info.W.m == 32  # built (the page's state) but not drawn
    assert {"left", "right"} <= set(strategy.gate.pending) and plot.object is before
    app.tabs.active = TITLES.index("Strategy")
    assert plot.object is not before and not strategy.gate.pending


def test_the_learn_page_refreshes_its_lesson_only_when_shown():
    app = _app("Learn")
    learn = app.pages["Learn"]
    lesson = learn.current
    refreshes = []
    original = lesson.refresh

    def counted():
        refreshes.append(1)
        original()
    lesson.refresh = counted
    app.session.epsilon = 0.25
    assert refreshes == [] and lesson.stale
    app.tabs.active = TITLES.index("Learn")
    assert refreshes == [1] and not lesson.stale


def test_a_link_applies_what_it_can_and_says_what_it_could_not(monkeypatch):
    """Regression: a link's workload terms come back; bad values are named, not dropped."""
    import json
    from urllib.parse import quote

    from panel.io.location import Location

    terms = [["prefix", {}, 1.0], ["width_range", {"w": 4}, 2.0]]
    search = "?eps=-1&noise=Foo&delta=0.001&data=nope&page=1&n=64&w=" + quote(json.dumps(terms))
    monkeypatch.setattr(pn.state, "_location", Location(search=search))
    app = ExplorerApp()
    app.sync_url()
    s = app.session
    assert (s.epsilon, s.noise, s.delta, app.page) == (1.0, "Laplace", 0.001, 1)
    assert s.dataset == dpx.datasets.DEFAULT_1D
    (problem,) = app.url_problems
    for said in ("eps=-1", "ε must be a number above 0", "noise='Foo'", "Laplace or Gaussian",
                 "data='nope'", "no dataset of that name"):
        assert said in problem
    builder = app.pages["Workload"]  # built at load because the link carries a workload
    assert builder.domain == (64,) and [t.family for t in builder.terms] == ["prefix", "width_range"]
    assert s.workload.n == 64
    builder.add_term("total")
    assert "total" in pn.state.location.query_params["w"][-1]


def test_a_lazy_card_draws_its_contents_when_first_expanded():
    from dpexplorer.ui.serving import LazyCard

    button, text = pn.widgets.Button(name="Go"), pn.pane.Markdown("inside")
    card = LazyCard(button, text, title="More")
    assert card.collapsed and len(card.objects) == 0  # only the header is drawn
    assert card.select(pn.widgets.Button) == [button]  # the contents can be looked up
    root = card.get_root()
    assert not any(getattr(m, "label", None) == "Go" for m in root.references())
    card.collapsed = False
    assert list(card.objects) == [button, text]
    assert card.select(pn.widgets.Button) == [button]  # found once, not twice
    card.collapsed = True
    card.collapsed = False
    assert list(card.objects) == [button, text]
    open_card = LazyCard(button, title="Open", collapsed=False)
    assert list(open_card.objects) == [button]


def test_a_table_slot_shows_new_rows_in_a_new_table():
    import pandas as pd

    from dpexplorer.ui.serving import TableSlot

    made = []

    def make(frame):
        made.append(pn.widgets.Tabulator(frame, disabled=True))
        return made[-1]
    slot = TableSlot(make, pd.DataFrame({"a": [1]}), visible=False)
    first = slot.table
    assert not slot.visible and slot.sizing_mode == "stretch_width" and list(slot) == [first]
    assert first.get_root() is not None
    slot.show(pd.DataFrame({"a": [1, 2]}))
    # the browser gets a table with its rows from the start, never rows for a table it renders
    assert slot.table is made[-1] and slot.table is not first and list(slot) == [slot.table]
    assert slot.table.value["a"].tolist() == [1, 2] and first.value["a"].tolist() == [1]
