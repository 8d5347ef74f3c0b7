"""The explorer in a real browser: first paint, Compare table, ε change, CPS preset, 8 sessions.

Serves ``apps/explorer.py`` with ``panel serve`` and drives Debian's headless
chromium through Playwright.  Run by hand (figures depend on the machine and
its load; report ``uptime`` with them)::

    python benchmarks/bench_browser.py                 # n = 256 and 1024, 8 sessions
    python benchmarks/bench_browser.py --n 1024 --sessions 8 --json out.json

Measured, each from a new browser context (no cache) on one warm server:

* ``first_paint``: the browser's first contentful paint (Performance API),
  opening the Compare page (``?page=1&n=…``, All Range over ``n`` cells);
  with the navigation's ``response_start`` (the server builds the session's
  document before it answers), ``response_end`` and ``dom_content_loaded``;
* ``table``: seconds from navigation until the Compare table shows an RMSE;
* ``epsilon``: per ε change, seconds from pressing Enter on a new ε until
  the Identity row shows ``RMSE(1) / ε`` (``table``, exact under Laplace
  noise, polled from here) and until the privacy–accuracy chart's ε line is
  at the new ε (``chart``: timed in the page itself, from the Enter keydown
  to the first animation frame with the line moved; ``chart_polled``: seen
  from here, which adds Playwright's round trips and the polls' own work in
  the page, 0-180 ms in one run, to what the user sees);
* ``cps_structure``: seconds from "Load preset" (CPS, 280,000 cells) until the
  Workload page shows the product structure;
* ``card_expand``: seconds from a click on the collapsed "Upload data" card
  (Data & DAWA page) until its contents show, and the browser's longest task
  (ms) meanwhile (a card expand once froze a loaded browser for 4-7 s, 2 cores);
* ``concurrent``: ``sessions`` pages opened at once, each starting its own
  comparison (and optimisers); meanwhile the first page's ε change latency.
  The other pages are drawn by a second chromium at the lowest CPU priority
  (their users' browsers would run on their own machines).

``tests/test_browser_timing.py`` runs the same functions once and reports
the figures without failing on them (performance lives here, not in tests).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("DPEXPLORER_CHROMIUM", "/usr/bin/chromium")
#: ``--disable-gpu-compositing`` and ``--disable-software-rasterizer``: no emulated GPU for a
#: page that draws on 2D canvases: a scripted tour of every page took 26-27 s of Chromium's
#: processor time with them, 29-32 s without (2 cores, quiet).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-gpu-compositing",
         "--disable-software-rasterizer", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
#: Longest wait for any one step (ms): a loaded machine is slow, never wrong.
READY_MS = int(os.environ.get("DPEXPLORER_BROWSER_READY_MS", "240000"))


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a server started next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_process(log_path: Path | str = os.devnull, env: dict | None = None):
    """``panel serve apps/explorer.py`` on a free port; yields ``(url, process)`` once the app
    answers (warm: one request made).  ``env`` adds to the environment; output goes to
    ``log_path``."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BOKEH_RESOURCES": "server", **(env or {})}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "panel", "serve", "apps/explorer.py", "--port", str(port),
             "--address", "127.0.0.1", f"--allow-websocket-origin=127.0.0.1:{port}"],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}/explorer"
        try:
            deadline = time.monotonic() + READY_MS / 1000
            while True:
                try:
                    with urllib.request.urlopen(url, timeout=READY_MS / 1000) as r:
                        if r.status == 200:
                            break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError("panel serve did not answer") from None
                    time.sleep(0.5)
            yield url, proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


@contextlib.contextmanager
def serve(log_path: Path | str = os.devnull):
    """``panel serve apps/explorer.py`` on a free port; yields the app's URL (warm: one request made)."""
    with serve_process(log_path) as (url, _):
        yield url


_ROWS = """(rows, field) => rows.filter(r => r.checkVisibility()).map(r => {
    const cell = f => r.querySelector(`.tabulator-cell[tabulator-field='${f}']`);
    const label = cell("label"), value = cell(field);
    return [label ? label.innerText : null, value ? value.innerText : null];
})"""


def table_column(pg, field: str = "rmse") -> dict[str, str]:
    """Label -> text of the ``field`` cell, for every shown row of the page's tables.

    Read row by row in one step: the Compare table is sorted by RMSE and its
    rows reorder as optimisers land, so the labels and the values read in two
    steps could pair one row's label with another row's value (a
    misread base value once made an ε check wait forever).
    """
    pairs = pg.locator(".tabulator-row").evaluate_all(_ROWS, field)
    return {label: value for label, value in pairs if label is not None and value is not None}


def rmse_of(pg, label: str) -> float:
    """The shown RMSE of ``label``'s row (NaN when absent or blank)."""
    text = table_column(pg).get(label, "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return float("nan")


_TABLE_SOURCES = """() => {
    // [id, labels, rmse values] of every ColumnDataSource with those columns (the tables)
    const out = [];
    for (const doc of (window.Bokeh ? window.Bokeh.documents : [])) {
        for (const m of doc._all_models.values()) {
            if (m.constructor.__name__ === "ColumnDataSource" && m.data != null
                    && m.data.label != null && m.data.rmse != null) {
                out.push([m.id, Array.from(m.data.label), Array.from(m.data.rmse)]);
            }
        }
    }
    return out;
}"""


def _table_state(pg) -> str:
    """What the page shows and holds of the Compare table (for a failure's message)."""
    return (f"shown {table_column(pg)}, "
            f"sources {pg.evaluate(_TABLE_SOURCES)}, ε box {pg.locator('input').first.input_value()}")


def _wait(pg, predicate, what: str) -> float:
    """Seconds until ``predicate()`` holds (polled every 20 ms); raises after READY_MS."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < READY_MS / 1000:
        if predicate():
            return time.perf_counter() - t0
        pg.wait_for_timeout(20)
    raise TimeoutError(f"{what} not seen after {READY_MS / 1000:.0f} s")


def shown_rmse(pg, label: str) -> float:
    """``label``'s shown RMSE, once its row is drawn (a redrawing table can lack it briefly)."""
    seen = []
    _wait(pg, lambda: seen.append(rmse_of(pg, label)) or seen[-1] > 0, f"the {label} row")
    return seen[-1]


def open_compare(browser, url: str, n: int, wait_table: bool = True):
    """A new context on the Compare page (All Range over ``n`` cells); the page and its timings."""
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    pg = ctx.new_page()
    t0 = time.perf_counter()
    pg.goto(f"{url}?page=1&n={n}", wait_until="commit")
    out = {}
    if wait_table:
        pg.wait_for_selector(".tabulator-cell[tabulator-field='rmse']", timeout=READY_MS)
        shown_rmse(pg, "Identity")
        out["table"] = time.perf_counter() - t0
        paints = dict(pg.evaluate(
            "performance.getEntriesByType('paint').map(e => [e.name, e.startTime])"))
        out["first_paint"] = paints.get("first-contentful-paint", float("nan")) / 1000
        nav = pg.evaluate("(() => { const e = performance.getEntriesByType('navigation')[0];"
                          " return [e.responseStart, e.responseEnd, e.domContentLoadedEventEnd];"
                          " })()")
        # the server builds the session's document before it answers: responseStart
        out["response_start"], out["response_end"], out["dom_content_loaded"] = (
            v / 1000 for v in nav)
    return ctx, pg, out


_EPS_SPANS = """
    // the vertical Spans (HoloViews' VLine) of the figures titled "Privacy–accuracy…"
    // (the document may hold more than one such figure)
    const spans = [];
    for (const doc of (window.Bokeh ? window.Bokeh.documents : [])) {
        for (const m of doc._all_models.values()) {
            const title = m.title != null && m.title.text != null ? m.title.text : "";
            if (!title.startsWith("Privacy")) {
                continue;
            }
            for (const r of [...(m.center || []), ...(m.renderers || [])]) {
                if (r.constructor.__name__ === "Span" && r.dimension === "height") {
                    spans.push(r);
                }
            }
        }
    }"""

# id -> location of the ε lines
_EPS_LINES = "() => {" + _EPS_SPANS + """
    return Object.fromEntries(spans.map(s => [s.id, s.location]));
}"""

# in the page itself: the time (performance.now(), ms) of the Enter keydown, and of the first
# animation frame at which an ε line is at eps
_EPS_PROBE = "(eps) => {" + _EPS_SPANS + """
    const probe = window.__dpxEpsProbe = {enter: null, moved: null};
    window.addEventListener("keydown", (e) => {
        if (e.key === "Enter" && probe.enter === null) {
            probe.enter = performance.now();
        }
    }, {capture: true, once: true});
    const frame = () => {
        if (spans.some(s => Math.abs(s.location - eps) <= 1e-9 * eps)) {
            probe.moved = performance.now();
        } else if (window.__dpxEpsProbe === probe) {
            requestAnimationFrame(frame);
        }
    };
    requestAnimationFrame(frame);
    return spans.length;
}"""


def _line_moved(before: dict, now: dict, eps: float) -> bool:
    """Whether an ε line of ``before`` (id -> location) is now at ``eps`` (it moved there)."""
    return any(abs(loc - eps) <= 1e-9 * eps and abs(before.get(i, math.inf) - eps) > 1e-9 * eps
               for i, loc in now.items() if loc is not None)


def wait_for_chart(pg) -> None:
    """Wait until the Compare page's privacy–accuracy chart is drawn in the browser."""
    t0 = time.perf_counter()
    while not pg.evaluate(_EPS_LINES):
        if time.perf_counter() - t0 > READY_MS / 1000:
            raise TimeoutError("the privacy–accuracy chart was not drawn")
        pg.wait_for_timeout(20)


def epsilon_latency(pg, values=("0.5", "2", "0.25", "1")) -> list[dict]:
    """Per ε in ``values``: seconds from Enter until the Identity row is RMSE(ε = 1) / ε
    (``table``), and until the privacy–accuracy chart's ε line (a Bokeh ``Span``) is at the
    new ε in the browser (``chart``, timed in the page: Enter keydown to the first animation
    frame with the line moved; ``chart_polled``, seen from here, which ``chart`` falls back to,
    with ``chart_in_page`` False, when the chart was redrawn meanwhile).

    The changes start once the chart is drawn: a served Compare page draws its first
    figures a moment after its table (``ComparePage.first_figures_delay``), and a chart
    not drawn yet has nothing to update."""
    wait_for_chart(pg)
    box = pg.locator("input").first  # the sidebar's ε comes first
    current = float(box.input_value())
    base = shown_rmse(pg, "Identity") * current
    out = []
    for value in values:
        expected, eps = base / float(value), float(value)
        box.fill(value)
        before = pg.evaluate(_EPS_LINES)
        pg.evaluate(_EPS_PROBE, eps)
        t0 = time.perf_counter()
        box.press("Enter")
        table = polled = None
        while table is None or polled is None:
            now = time.perf_counter() - t0
            if now > READY_MS / 1000:
                raise TimeoutError(f"ε = {value}: table {table}, chart {polled} after {now:.0f} s;"
                                   f" expected Identity RMSE {expected:.3f}, {_table_state(pg)}")
            if table is None and abs(rmse_of(pg, "Identity") - expected) <= 1e-3 * expected:
                table = time.perf_counter() - t0
            if polled is None and _line_moved(before, pg.evaluate(_EPS_LINES), eps):
                polled = time.perf_counter() - t0
            pg.wait_for_timeout(10)
        seen = time.perf_counter()
        probe = pg.evaluate("() => window.__dpxEpsProbe")
        while probe["moved"] is None and time.perf_counter() - seen < 2.0:
            pg.wait_for_timeout(10)  # the line seen by a poll: its frame comes at once
            probe = pg.evaluate("() => window.__dpxEpsProbe")
        in_page = probe["moved"] is not None and probe["enter"] is not None
        # (a chart redrawn meanwhile has new lines, which the probe does not watch: polled)
        chart = (probe["moved"] - probe["enter"]) / 1000 if in_page else polled
        out.append({"table": table, "chart": chart, "chart_polled": polled,
                    "chart_in_page": in_page})
    return out


def cps_structure(browser, url: str) -> float:
    """Seconds from "Load preset" (CPS all marginals) until the product structure is shown."""
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    try:
        pg = ctx.new_page()
        pg.goto(f"{url}?page=0", wait_until="load")
        load = pg.get_by_role("button", name="Load preset (replaces the terms)")
        header = pg.locator(".card-header", has_text="Presets").first
        header.wait_for(timeout=READY_MS)
        for _ in range(20):  # a click on a card still being drawn can be lost
            header.click()
            with contextlib.suppress(Exception):
                load.wait_for(state="visible", timeout=3000)
                break
        t0 = time.perf_counter()
        load.click()
        pg.locator("text=Structure instead").first.wait_for(timeout=READY_MS)
        return time.perf_counter() - t0
    finally:
        ctx.close()


_LONG_TASKS = """() => { window.__longTasks = [];
    new PerformanceObserver(list => { for (const e of list.getEntries()) {
        window.__longTasks.push(e.duration); } }).observe({type: "longtask"}); }"""


def card_expand(browser, url: str) -> dict:
    """Seconds from a click on the collapsed "Upload data" card until its contents show, and
    the browser's longest task meanwhile (``longest_task_ms``, 0 when none took over 50 ms)."""
    ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
    try:
        pg = ctx.new_page()
        pg.goto(f"{url}?page=3", wait_until="load")
        header = pg.locator(".card-header", has_text="Upload data").first
        header.wait_for(timeout=READY_MS)
        contents = pg.get_by_role("button", name="Add column as dataset")
        pg.evaluate(_LONG_TASKS)
        seconds = math.nan
        for _ in range(20):  # a click on a card still being drawn can be lost
            t0 = time.perf_counter()
            header.click()
            with contextlib.suppress(Exception):
                contents.wait_for(state="visible", timeout=10000)
                seconds = time.perf_counter() - t0
                break
        if not math.isfinite(seconds):
            raise TimeoutError("the Upload data card never showed its contents")
        pg.wait_for_timeout(500)  # the last long task is reported after it ends
        return {"seconds": seconds, "longest_task_ms": max(pg.evaluate("window.__longTasks"),
                                                          default=0.0)}
    finally:
        ctx.close()


def concurrent(browser, url: str, n: int, sessions: int, others=None) -> dict:
    """``sessions`` pages opened at once; the first page's ε latency while the others work.

    ``others``: the browser drawing every page but the first (default ``browser``);
    :func:`measure` passes one at the lowest CPU priority (:func:`background_browser`).
    """
    opened = [open_compare(browser, url, n, wait_table=False)]
    opened += [open_compare(others or browser, url, n, wait_table=False)
               for _ in range(sessions - 1)]
    try:
        first = opened[0][1]
        t0 = time.perf_counter()
        first.wait_for_selector(".tabulator-cell[tabulator-field='rmse']", timeout=READY_MS)
        shown_rmse(first, "Identity")
        table = time.perf_counter() - t0
        eps = epsilon_latency(first)
        tables = []
        for _, pg, _ in opened[1:]:
            t1 = time.perf_counter()
            pg.wait_for_selector(".tabulator-cell[tabulator-field='rmse']", timeout=READY_MS)
            tables.append(time.perf_counter() - t1)
        return {"sessions": sessions, "first_table": table, "epsilon": eps,
                "others_table_after_first_done": tables}
    finally:
        for ctx, _, _ in opened:
            ctx.close()


#: Seconds between two passes of :func:`background_browser`'s priority keeper.
RENICE_SECONDS = 0.2


def _parent(pid: int | str) -> int:
    """The parent process of ``pid`` (``/proc/<pid>/stat``; OSError once it has ended)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])  # after "(comm)": state, ppid


def _process_tree(roots: set[int]) -> set[int]:
    """``roots`` and every process descending from them (Linux ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            ppid = _parent(entry.name)
        except OSError:  # ended meanwhile
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, ()))
    return tree


def renice_tree(roots: set[int], nice: int = 19) -> int:
    """Put every thread of ``roots``' process trees at ``nice`` at least; the threads changed.

    Linux keeps a nice value per thread, and chromium sets its renderers' and
    its compositor threads' priorities itself (nice 0 or 5, some threads -8
    when run as root), whatever priority its browser process was started at.
    """
    from dpexplorer.ui.workers import lower_threads  # the explorer's own per-thread nice

    return sum(len(lower_threads(nice, pid=pid)) for pid in _process_tree(roots))


def lower_autogroup(pid: int, nice: int = 19) -> bool:
    """Give the scheduler autogroup of ``pid`` the CPU priority ``nice``; False where there is none.

    Linux shares the processor fairly between autogroups (one per session,
    ``/proc/sys/kernel/sched_autogroup_enabled``) before it looks at the nice
    values inside each, and Playwright starts every browser in a session of
    its own: the background browser's seven pages, all at nice 19 within
    their group, still took a third of the two cores from the server (whose
    event loop waited on the run queue 1.2-1.6 s of every 2 s).  Writing a
    nice value to ``/proc/<pid>/autogroup`` weighs the whole group.
    """
    try:
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))
        return True
    except OSError:  # no autogroups (kernel option off) or the process is gone
        return False


def _chromium_roots() -> set[int]:
    """The running chromium browser processes (a chromium whose parent is no chromium)."""
    roots = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if not Path(entry.path, "comm").read_text().startswith("chromium"):
                continue
            if not Path(f"/proc/{_parent(entry.name)}/comm").read_text().startswith("chromium"):
                roots.add(int(entry.name))
        except (OSError, ValueError):
            continue
    return roots


@contextlib.contextmanager
def background_browser(p):
    """A second chromium at the lowest CPU priority (``nice 19``), for the other sessions.

    Eight pages drawn by a browser on the server's own two cores took the
    processor from the server and from the page measured; other users'
    browsers run on their own machines.  The browser is started under
    ``nice -n 19``, and a thread puts every thread of its process tree back at
    nice 19 every :data:`RENICE_SECONDS` (:func:`renice_tree`): chromium sets
    its renderers' priorities itself, and before this keeper the seven
    background pages' renderers ran at nice 0 or 5, and the browser process
    itself and its GPU process at -8 (``top``, ``/proc``; 2 cores, 8 sessions).  Its
    scheduler autogroup is put at nice 19 too (:func:`lower_autogroup`):
    Linux shares the processor between autogroups first.  ``p``: the running
    ``sync_playwright()`` instance; the browser is closed on exit.
    """
    with tempfile.TemporaryDirectory() as tmp:
        wrapper = Path(tmp) / "chromium-nice"
        wrapper.write_text(f'#!/bin/sh\nexec nice -n 19 "{CHROMIUM}" "$@"\n')
        wrapper.chmod(0o755)
        before = _chromium_roots()
        browser = p.chromium.launch(executable_path=str(wrapper), args=FLAGS)
        roots = _chromium_roots() - before  # this browser's own process
        stop = threading.Event()

        def keep_nice():
            while not stop.wait(RENICE_SECONDS):
                renice_tree(roots)

        keeper = threading.Thread(target=keep_nice, daemon=True, name="renice-background")
        if roots:
            for pid in roots:
                lower_autogroup(pid)
            renice_tree(roots)
            keeper.start()
        try:
            yield browser
        finally:
            stop.set()
            browser.close()


def measure(url: str, ns=(256, 1024), sessions: int = 8) -> dict:
    """Every figure of the module docstring (one browser, one warm server at ``url``)."""
    from playwright.sync_api import sync_playwright

    out = {"load": os.getloadavg(), "cpus": os.cpu_count(),
           "blas_threads": os.environ.get("OMP_NUM_THREADS", "default")}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            # warm the server's imports, figures included (closed at once, the page would
            # still draw its first figures, a moment after its table, during the next one)
            ctx, pg, _ = open_compare(browser, url, ns[0])
            wait_for_chart(pg)
            ctx.close()
            for n in ns:
                ctx, pg, first = open_compare(browser, url, n)
                first["epsilon"] = epsilon_latency(pg)
                out[f"n={n}"] = first
                ctx.close()
            out["cps_structure"] = cps_structure(browser, url)
            out["card_expand"] = card_expand(browser, url)
            if sessions:
                with background_browser(p) as others:
                    out["concurrent"] = concurrent(browser, url, ns[-1], sessions, others)
        finally:
            browser.close()
    out["load_after"] = os.getloadavg()
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    with serve() as url:
        out = measure(url, tuple(args.n), args.sessions)
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
