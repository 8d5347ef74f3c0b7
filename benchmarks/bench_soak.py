"""A bounded soak of the served explorer: several sessions editing, switching pages and releasing.

Serves ``apps/explorer.py`` (its ledger store in a temporary file) and drives
``--sessions`` browser sessions of Debian's headless chromium for
``--minutes``.  Each session, in turn, does one scripted action drawn by a
seeded ``numpy.random.Generator`` (``--seed``, recorded in the output):
type a new ε, switch the noise, open a page, add terms to or clear the
workload, load a preset, run a release on the bundled data.  Every fifth round the first
session measures an ε change on the Compare page.  All sessions are drawn by one chromium on the server's own
cores (the worst case: a second browser at the lowest priority, as
``bench_browser.py`` uses, starves outright on a loaded 2-core machine).

Recorded (JSON on standard output, ``--json FILE`` too):

* ``tracebacks``: tracebacks in the server's log;
* ``page_errors``: uncaught errors in the pages (e.g. Bokeh's "reference
  pNNNN isn't known") and console errors;
* ``loading``: every spell during which a session's open page showed a
  loading spinner (Panel's ``pn-loading``) or a "Building…" line, seen by polling
  between actions (resolution: one round of the sessions); ``loading_over_10s``
  counts the spells longer than 10 s;
* ``epsilon_to_compare``: seconds from Enter on a new ε until the Compare
  table's Identity row shows the RMSE for it (median, p95, all); a check during
  which the page went over to the session's newer workload (its base was read
  from the older one's table) is counted in ``steps_skipped``, not timed;
* ``memory``: the server process's resident memory (MiB) when warm (one
  session has opened every page, taken every scripted action once and closed),
  during the soak (every ``--sample`` seconds) and after its sessions close
  (``--settle`` seconds later, once Panel has destroyed them); ``returned_within``
  is the final level over the warm one minus 1.  With ``--soaks K`` the soak is
  repeated K times on the same server (new sessions each time) and
  ``added_by_each_soak`` gives what each one left behind: a server whose memory
  levels off adds nothing after the first.

Run by hand (figures depend on the machine and its load; report ``uptime``
and the commit with them)::

    python benchmarks/bench_soak.py                       # 8 sessions, 10 minutes
    python benchmarks/bench_soak.py --sessions 2 --minutes 2 --json soak.json
    python benchmarks/bench_soak.py --sessions 4 --minutes 3 --soaks 3   # does memory level off?

This is a simulation on bundled data: its releases spend a throwaway ledger.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's dpexplorer (bench_browser imports it)
_spec = importlib.util.spec_from_file_location("bench_browser", ROOT / "benchmarks" / "bench_browser.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bench_browser", bench)
_spec.loader.exec_module(bench)

PAGES = ["Workload", "Compare", "Strategy", "Data & DAWA", "Release", "Audit", "Sum queries", "Learn"]
ACTIONS = ["epsilon", "noise", "page", "page", "add_term", "clear", "preset", "release"]
EPSILONS = ["0.25", "0.5", "1", "2"]
#: A loading spell longer than this is counted (the target: none).
LONG_LOADING_S = 10.0
#: Longest wait for one scripted step (ms): a step that cannot be done is skipped, not fatal.
STEP_MS = 15000


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (``/proc``; NaN when unreadable)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class Sampler:
    """The server's resident memory every ``every`` seconds, in a thread."""

    def __init__(self, pid: int, every: float):
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True, name="rss-sampler")

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append((round(time.monotonic() - self._t0, 1), round(rss_mib(self.pid), 1)))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class SoakSession:
    """One browser session of the soak: its page, its open tab and what it saw."""

    def __init__(self, index: int, browser, url: str):
        self.index = index
        self.ctx = browser.new_context(viewport={"width": 1500, "height": 1000})
        self.pg = self.ctx.new_page()
        self.problems: list[str] = []
        self.pg.on("pageerror", lambda e: self.problems.append(f"pageerror: {e}"))
        self.pg.on("console", lambda m: self.problems.append(f"console: {m.text}")
                   if m.type == "error" else None)
        self.pg.on("requestfailed", lambda r: self.problems.append(
            f"request failed: {r.url[:200]} ({r.failure})"))
        self.pg.goto(f"{url}?page=1", wait_until="commit", timeout=bench.READY_MS)
        self.pg.locator(".bk-tab").first.wait_for(timeout=bench.READY_MS)
        self.tab = "Compare"
        self.loading_since: float | None = None
        self.spells: list[float] = []

    def poll_loading(self) -> None:
        """Start or end this session's loading spell from what its page shows now."""
        try:
            busy = (self.pg.locator(".pn-loading:visible").count() > 0
                    or self.pg.get_by_text("Building…").locator("visible=true").count() > 0)
        except Exception:  # noqa: BLE001 - a page being redrawn: look again next round
            return
        now = time.monotonic()
        if busy and self.loading_since is None:
            self.loading_since = now
        elif not busy and self.loading_since is not None:
            self.spells.append(now - self.loading_since)
            self.loading_since = None

    def open_tab(self, title: str) -> None:
        self.pg.locator(".bk-tab", has_text=title).first.click(timeout=STEP_MS)
        self.tab = title

    def act(self, action: str, rng: np.random.Generator) -> None:
        """Do one scripted action (a step the page cannot take now is skipped)."""
        pg = self.pg
        if action == "epsilon":
            box = pg.locator("input").first
            box.fill(str(rng.choice(EPSILONS)), timeout=STEP_MS)
            box.press("Enter", timeout=STEP_MS)
        elif action == "noise":
            label = str(rng.choice(["Laplace", "Gaussian"]))
            pg.locator(".bk-btn", has_text=label).first.click(timeout=STEP_MS)
        elif action == "page":
            self.open_tab(str(rng.choice(PAGES)))
        elif action in ("add_term", "clear", "preset"):
            if self.tab != "Workload":
                self.open_tab("Workload")
            if action == "add_term":
                pg.get_by_role("button", name="Add term").click(timeout=STEP_MS)
            elif action == "clear":
                pg.get_by_role("button", name="Clear all").click(timeout=STEP_MS)
            else:
                header = pg.locator(".card-header", has_text="Presets").first
                load = pg.get_by_role("button", name="Load preset (replaces the terms)")
                if not load.is_visible():
                    header.click(timeout=STEP_MS)
                load.click(timeout=STEP_MS)
        elif action == "release":
            if self.tab != "Release":
                self.open_tab("Release")
            pg.get_by_role("button", name="Run release").click(timeout=STEP_MS)

    def close(self) -> None:
        if self.loading_since is not None:
            self.spells.append(time.monotonic() - self.loading_since)
        self.ctx.close()


def _compare_summary(pg) -> str | None:
    """The text of the shown Compare summary ("Workload `…`: … cells; noise Laplace(ε=0.25); …"),
    drawn in the same redraw as the table; None when none is shown."""
    summary = pg.locator("p:visible", has_text=re.compile(r"Laplace\(ε=")).first
    try:
        return summary.inner_text(timeout=1000)
    except Exception:  # noqa: BLE001 - none shown now, or the page is redrawing it
        return None


def compare_epsilon(pg) -> float | None:
    """The ε of the Laplace noise in the shown Compare summary ("**noise** Laplace(ε=0.25)");
    None when none is shown."""
    found = re.search(r"Laplace\(ε=([^)]+)\)", _compare_summary(pg) or "")
    return float(found.group(1)) if found else None


def compare_workload(pg) -> str | None:
    """The workload the shown Compare summary is for (its name, queries and cells); None when
    none is shown."""
    found = re.search(r"Workload\s*(.*?);\s*noise", _compare_summary(pg) or "", re.DOTALL)
    return found.group(1).strip() if found else None


def epsilon_change(session: SoakSession, rng: np.random.Generator) -> float | None:
    """Seconds from Enter on a new ε until the Compare table's Identity RMSE is the one for it."""
    pg = session.pg
    if session.tab != "Compare":
        session.open_tab("Compare")
    entered = "never"  # when the new ε was entered, to find the change in the server's debug log
    try:
        pg.wait_for_selector(".tabulator-cell[tabulator-field='rmse']", timeout=bench.READY_MS)
        # under Laplace noise Identity's RMSE is exactly RMSE(ε = 1) / ε
        pg.locator(".bk-btn", has_text="Laplace").first.click(timeout=STEP_MS)
        seen = [float("nan")]
        box = pg.locator("input").first
        current = float(box.input_value())

        def settled() -> bool:
            # the table must be the one for the ε in the box: a page shown again draws the
            # redraws it kept while hidden (dpexplorer.ui.serving), seconds later under load,
            # and an older table read as the base made the check wait for a wrong RMSE
            if compare_epsilon(pg) != current:
                return False
            seen.append(bench.rmse_of(pg, "Identity"))
            pg.wait_for_timeout(500)
            return (seen[-1] > 0 and seen[-1] == bench.rmse_of(pg, "Identity")
                    and compare_epsilon(pg) == current)

        bench._wait(pg, settled, f"the Compare table for Laplace noise at ε = {current}")
        base, workload = seen[-1] * current, compare_workload(pg)
        value = str(rng.choice([e for e in EPSILONS if float(e) != current]))
        expected = base / float(value)
        box.fill(value)
        box.press("Enter")
        entered = time.strftime("%H:%M:%S")
        moved: list[str] = []

        def reached() -> bool:
            # a page shown again draws the redraws it kept while hidden: the table read as the
            # base can be one of the session's previous workload, stable for half a second,
            # followed by the current workload's; the check's premise (one workload) is gone
            shown = compare_workload(pg)
            if shown is not None and workload is not None and shown != workload:
                moved.append(shown)
                return True
            return abs(bench.rmse_of(pg, "Identity") - expected) <= 1e-3 * expected

        seconds = bench._wait(pg, reached, f"Identity RMSE at ε = {value} ({expected:.4g}: "
                                           f"{seen[-1]:.4g} shown at ε = {current})")
        if moved:
            session.problems.append(f"step skipped: ε check inconclusive, the Compare page went "
                                    f"from workload {workload!r} to {moved[0]!r} meanwhile")
            return None
        return seconds
    except Exception as exc:  # noqa: BLE001 - recorded, the soak goes on
        try:
            state = bench._table_state(pg)  # what the browser shows and holds of the table
        except Exception as err:  # noqa: BLE001 - the page itself may be gone
            state = f"table state unread: {type(err).__name__}"
        session.problems.append(f"epsilon change: {exc}; {state}; "
                                f"entered at {entered}")
        return None


def tracebacks(log: str) -> list[str]:
    """The tracebacks in a server log, each cut to its last line (the exception)."""
    out = []
    for chunk in log.split("Traceback (most recent call last):")[1:]:
        lines = [ln for ln in chunk.splitlines() if ln and not ln.startswith(" ")]
        out.append(lines[0] if lines else chunk[:200])
    return out


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def soak(sessions: int = 8, minutes: float = 10.0, seed: int = 0, sample: float = 5.0,
         settle: float = 60.0, server_log: str = "", soaks: int = 1) -> dict:
    """Run the soak described in the module docstring; the figures as a dict.

    ``server_log``: a file to keep the server's log in (with ``DPEXPLORER_LOG_LEVEL=debug``
    in the environment, the explorer's own debug log too); by default it is thrown away.
    """
    from playwright.sync_api import sync_playwright

    rng = np.random.default_rng(seed)
    out: dict = {"sessions": sessions, "minutes": minutes, "soaks": soaks, "seed": seed,
                 "cpus": os.cpu_count(),
                 "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(server_log) if server_log else Path(tmp) / "server.log"
        env = {"DPEXPLORER_LEDGER": str(Path(tmp) / "ledgers.sqlite")}
        with bench.serve_process(log_path, env) as (url, proc), sync_playwright() as p:
            browser = p.chromium.launch(executable_path=bench.CHROMIUM, args=bench.FLAGS)
            try:
                # warm: one session opens every page and takes every scripted action once, then
                # closes, so that one-time costs (modules imported on first use, numba kernels
                # compiled by the first release, caches of the default workload) are in the warm
                # level and what the soak adds after it is what its sessions keep
                warm = SoakSession(0, browser, url)
                warm_rng = np.random.default_rng([seed, 1])
                for step in [("page", title) for title in PAGES] + [("act", a) for a in ACTIONS]:
                    with contextlib.suppress(Exception):
                        if step[0] == "page":
                            warm.open_tab(step[1])
                        else:
                            warm.act(step[1], warm_rng)
                        warm.pg.wait_for_timeout(2000)
                warm.close()
                time.sleep(settle)
                out["memory_warm"] = rss_mib(proc.pid)
                opened: list[SoakSession] = []
                eps_seconds: list[float] = []
                rounds = 0
                out["memory_closed"], out["memory_settled"] = [], []
                with Sampler(proc.pid, sample) as sampler:
                    for _ in range(soaks):
                        these = [SoakSession(i, browser, url) for i in range(sessions)]
                        opened += these
                        end = time.monotonic() + 60 * minutes
                        while time.monotonic() < end:
                            for s in these:
                                s.poll_loading()
                                try:
                                    s.act(str(rng.choice(ACTIONS)), rng)
                                except Exception as exc:  # noqa: BLE001 - a step not taken
                                    s.problems.append(f"step skipped: {type(exc).__name__}")
                            rounds += 1
                            if rounds % 5 == 0:
                                seconds = epsilon_change(these[0], rng)
                                if seconds is not None:
                                    eps_seconds.append(seconds)
                        for s in these:
                            s.poll_loading()
                            s.close()
                        out["memory_closed"].append(rss_mib(proc.pid))
                        time.sleep(settle)
                        out["memory_settled"].append(rss_mib(proc.pid))
                out["memory_samples"] = sampler.samples
            finally:
                browser.close()
        log = log_path.read_text(errors="replace")
    spells = [t for s in opened for t in s.spells]
    page_errors = [e for s in opened for e in s.problems if not e.startswith("step skipped")]
    out.update({
        "rounds": rounds,
        "tracebacks": tracebacks(log),
        "page_errors": page_errors,
        "reference_not_known": sum(bool(re.search(r"isn't known", e)) for e in page_errors),
        "steps_skipped": sum(e.startswith("step skipped") for s in opened for e in s.problems),
        "loading": {"spells": len(spells), "longest": max(spells, default=0.0),
                    "over_10s": sum(t > LONG_LOADING_S for t in spells)},
        "epsilon_to_compare": {"median": statistics.median(eps_seconds) if eps_seconds else None,
                               "p95": _percentile(eps_seconds, 95), "all": eps_seconds},
        "returned_within": out["memory_settled"][-1] / out["memory_warm"] - 1,
        "added_by_each_soak": [b - a for a, b in zip([out["memory_warm"]] + out["memory_settled"],
                                                      out["memory_settled"])],
        "load_after": os.getloadavg(),
    })
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0, help="seed of the scripted actions")
    ap.add_argument("--sample", type=float, default=5.0, help="seconds between memory samples")
    ap.add_argument("--settle", type=float, default=60.0,
                    help="seconds to wait for Panel to destroy closed sessions")
    ap.add_argument("--soaks", type=int, default=1,
                    help="soaks one after the other on the same server (memory settled after each: "
                         "a server that levels off adds nothing after the first)")
    ap.add_argument("--json", default="")
    ap.add_argument("--server-log", default="", help="keep the server's log in this file")
    args = ap.parse_args(argv)
    out = soak(args.sessions, args.minutes, args.seed, args.sample, args.settle, args.server_log,
               args.soaks)
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)


if __name__ == "__main__":
    main()
