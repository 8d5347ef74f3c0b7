import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]



def pytest_configure(config):
    """Point the explorer's ledger store at a fresh temporary file for the whole run.

    Set in the environment at start, so the servers tests start in subprocesses inherit it:
    no test ever reads or writes the user's data folder (``ui.session.ledger_store_path``).
    """
    folder = tempfile.mkdtemp(prefix="dpexplorer-test-ledgers-")
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))  # none left in /tmp
    os.environ["DPEXPLORER_LEDGER"] = os.path.join(folder, "ledgers.sqlite")
    # Under pytest-xdist (-n 2), tests marked xdist_group("name") run on one worker, in order,
    # as with --dist loadgroup: the README's examples share one namespace, a browser module's
    # tests its served app.  Set here, not in addopts: a --dist there turns pytest-benchmark off
    # for `pytest benchmarks/... --benchmark-only`.  An explicit other --dist is kept.
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"  # the controller: its scheduler
    if getattr(config, "workerinput", {}).get("dpexplorer_loadgroup"):
        config.option.loadgroup = True    # a worker: its test ids carry their group


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """Tell each xdist worker whether the run groups tests (see :func:`pytest_configure`)."""
    node.workerinput["dpexplorer_loadgroup"] = node.config.getvalue("dist") == "loadgroup"


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, run the modules that hold ``slow`` tests first (each module's tests
    together and in their order): the long tests start while the short ones are still queued,
    so no worker is left alone at the end with a minute-long test while the other idles."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow_modules = {item.module.__name__ for item in items
                    if item.get_closest_marker("slow") is not None and getattr(item, "module", None)}
    items.sort(key=lambda item: getattr(item, "module", None) is None
               or item.module.__name__ not in slow_modules)  # stable: the order within stays


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (``item.rep_setup``, ``item.rep_call``): the
    browser tests' ``page`` fixture screenshots the page of a failed test."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(autouse=True)
def _fresh_ledger_store(tmp_path_factory, monkeypatch):
    """Each test's sessions share a ledger store of their own (a fresh file): a spend of one
    test never shows in another, while two sessions within a test share it, as two tabs do."""
    folder = tmp_path_factory.mktemp("ledger")
    monkeypatch.setenv("DPEXPLORER_LEDGER", str(folder / "ledgers.sqlite"))
    yield


@pytest.fixture(autouse=True)
def _process_limits_restored():
    """Each test leaves the process-wide size limits as it found them: the README's
    ``dpx.limits.configure(cells=2**28)`` example (run in-process, on an xdist worker shared with
    other modules) must not raise the limits seen by a later test of ``limits`` itself."""
    import dataclasses

    from dpexplorer.queries import limits

    before = limits.configure()  # no change: the limits in force
    yield
    limits.configure(**dataclasses.asdict(before))


@pytest.fixture(autouse=True)
def _no_optimiser_reporting():
    """Each test starts with no optimiser counted as reporting (the server-wide share of
    progress updates, ``optimize_view.ProgressRelay``): a relay of an earlier test would
    space out the updates of a test that expects every report."""
    module = sys.modules.get("dpexplorer.ui.optimize_view")
    if module is not None:
        with module.ProgressRelay._reporting_lock:
            module.ProgressRelay._reporting.clear()
    yield


@pytest.fixture
def fresh_strategies():
    """No strategy kept server-wide (``ui.workers.MEMO_SIZE``) at the test's start: for tests
    that watch an optimiser run (progress, Cancel), which an earlier test's strategy for the
    same workload would answer at once.  Other tests share the kept strategies, as a server's
    sessions do (the UI tests then optimise the default workload once per worker)."""
    module = sys.modules.get("dpexplorer.ui.workers")
    if module is not None:
        module.forget()
    yield


@pytest.fixture(scope="session")
def dpbench_dir():
    """The DPBench folder, read through ``fetch_dpbench``: every checksum is verified, and since
    every file is present nothing is downloaded (the suite stays offline).

    The folder is ``dpexplorer.datasets.default_dpbench_dir()``: ``$DPEXPLORER_DPBENCH`` if set
    (a folder holding ``1D/`` and ``2D/`` ``.npy`` files), else a development checkout's copy,
    else the download cache of ``dpx.datasets.fetch_dpbench()``.  Without one the DPBench
    tests skip and say how to give them a folder.
    """
    from dpexplorer.datasets import default_dpbench_dir, fetch_dpbench

    folder = default_dpbench_dir()
    if folder is None or not folder.is_dir():
        pytest.skip("DPBench histograms not found: set DPEXPLORER_DPBENCH to a folder holding "
                    "1D/ and 2D/ .npy files, or download them once with "
                    "python -c 'import dpexplorer as dpx; dpx.datasets.fetch_dpbench()'")
    return fetch_dpbench(folder)


@pytest.fixture
def kernel_name(tmp_path, monkeypatch):
    """A Jupyter kernelspec running ipykernel in this interpreter, found through JUPYTER_PATH.

    The kernel imports this checkout's ``dpexplorer`` (``PYTHONPATH`` = the repository root),
    whatever copy is installed.  Skips when ipykernel or nbclient is missing.
    """
    pytest.importorskip("ipykernel")
    pytest.importorskip("nbclient")
    name = "dpexplorer-test"
    spec = tmp_path / "kernels" / name
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "dpexplorer tests", "language": "python",
        "env": {"PYTHONPATH": str(ROOT), "PYDEVD_DISABLE_FILE_VALIDATION": "1"}}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return name


def execute_notebook(path: Path, kernel_name: str, cell_timeout: float):
    """Run a notebook top to bottom with nbclient; ``(notebook, seconds)``.

    Skips when no kernel can start; fails with the cell's traceback when a cell fails.
    """
    import time

    import nbformat
    from jupyter_client.kernelspec import NoSuchKernel
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=cell_timeout, startup_timeout=60, kernel_name=kernel_name,
                            resources={"metadata": {"path": str(path.parent)}})
    t0 = time.perf_counter()
    try:
        client.execute()
    except NoSuchKernel as exc:
        pytest.skip(f"no Jupyter kernel available: {exc}")
    except (CellExecutionError, CellTimeoutError) as exc:
        pytest.fail(f"{path.name}: cell failed:\n{exc}")
    except RuntimeError as exc:
        if "Kernel" in str(exc) and ("died" in str(exc) or "didn't respond" in str(exc)):
            pytest.skip(f"the Jupyter kernel could not start: {exc}")
        raise
    return nb, time.perf_counter() - t0


#: Panel's and Bokeh's notebook loader: the lists of files it makes the browser fetch.
_LOADER_LISTS = re.compile(r"const (?:js_urls|css_urls|js_modules) = (\[.*?\]);")


def notebook_external_loads(nb) -> list[str]:
    """URLs on another host that a run notebook's outputs make the browser load.

    Reads the loader lists (``js_urls``, ``css_urls``, ``js_modules``) of Panel's notebook
    loader and the ``src``/``href`` of HTML outputs' ``<script>``/``<link>``/``<img>`` tags.  A
    URL inside inlined library code (e.g. a RequireJS path that no browser fetches unless
    RequireJS runs) is not a load and is not listed.
    """
    found: list[str] = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            for mime, data in (out.get("data") or {}).items():
                text = data if isinstance(data, str) else json.dumps(data)
                for listed in _LOADER_LISTS.findall(text):
                    found += [u for u in json.loads(listed) if re.match(r"(https?:)?//", u)]
                if mime == "text/html":
                    found += re.findall(r"<(?:script|link|img)[^>]*?(?:src|href)=[\"']"
                                        r"((?:https?:)?//[^\"']+)", text)
    return sorted(set(found))


# ---------------------------------------------------------------- the explorer's pages
@pytest.fixture
def session():
    """A fresh explorer :class:`~dpexplorer.ui.session.Session` (the pages' shared state)."""
    from dpexplorer.ui.session import Session

    return Session()


@pytest.fixture
def reported(monkeypatch):
    """Messages the pages sent to ``Session.report`` (and so to the notification area)."""
    from dpexplorer.ui.session import Session

    messages: list[str] = []
    original = Session.report

    def report(self, message):
        messages.append(message)
        original(self, message)
    monkeypatch.setattr(Session, "report", report)
    return messages


def _settle(page, timeout: float = 120.0):
    """``page`` once its background tasks are done (the test fails if they are not in time)."""
    assert page.wait(timeout), (
        f"{type(page).__name__}: background work still running after {timeout:g} s")
    return page


@pytest.fixture
def settle():
    """``settle(page, timeout=120)``: wait for a page's tasks (fail on timeout); returns the page."""
    return _settle


@pytest.fixture
def compare_page():
    """``compare_page(workload=None, page_options=None, **session_params)``: a new Session
    (with ``workload`` and the session parameters) and its ComparePage, its first comparison
    built."""
    from dpexplorer.ui.compare_view import ComparePage
    from dpexplorer.ui.session import Session

    def make(workload=None, page_options=None, **session_params):
        session = Session(**session_params)
        if workload is not None:
            session.workload = workload
        return session, _settle(ComparePage(session, **(page_options or {})))
    return make


# ------------------------------------------------------------------ served explorer (browser tests)
def _free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a server started next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(log_path, wait_path: str | None = None, app: str = "apps/explorer.py",
                 env: dict | None = None):
    """``panel serve app`` on a free 127.0.0.1 port: ``(process, app URL, log file)``.

    Waits (90 s at most) until ``wait_path`` answers (default: the app's own
    path, which builds one session).  ``env``: more environment variables.  The
    server's ledger store is a fresh file beside ``log_path`` unless ``env`` sets
    ``DPEXPLORER_LEDGER``.
    The server's output (stdout and stderr) goes to ``log_path``.
    """
    import urllib.error
    import urllib.request

    port = _free_port()
    # a ledger store of the server's own (unless ``env`` names one): module-scoped servers start
    # before any test's fresh store is set, and one module's releases must not spend another's budget
    store = str(Path(log_path).parent / f"ledgers-{port}.sqlite")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BOKEH_RESOURCES": "server",
           "DPEXPLORER_LEDGER": store, **(env or {})}
    # the server's log goes to a file: an unread pipe fills up and blocks the server
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "panel", "serve", app, "--port", str(port),
         "--address", "127.0.0.1", f"--allow-websocket-origin=127.0.0.1:{port}"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/{Path(app).stem}"
    wait_path = f"/{Path(app).stem}" if wait_path is None else wait_path
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            # a long timeout: every retried request builds one more session (and comparison)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{wait_path}", timeout=120) as r:
                if r.status == 200:
                    break
        except urllib.error.HTTPError:
            break  # the server answers
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        log.close()
        pytest.fail(f"panel serve did not answer within 90 s:\n{open(log.name).read()[-3000:]}")
    return proc, url, log


def stop_server(proc, log) -> None:
    """Stop a served explorer started by :func:`start_server` (terminate, then kill after
    10 s) and close its log."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


#: A traceback of Panel 1.9 / Bokeh 3's own teardown race, not the explorer's: a busy indicator
#: updated from a worker thread after the browser closed its session.
PANEL_TEARDOWN_RACE = "'DocumentCallbackManager' object has no attribute '_change_callbacks'"


#: Tornado's own log of a message written to a websocket the browser had closed (a tab
#: closed, e.g. the previous test's, while the server still wrote to it): "Task exception was
#: never retrieved ... WebSocketClosedError", from tornado's ``write_message`` wrapper.
TORNADO_CLOSED_SOCKET = "raise WebSocketClosedError()\ntornado.websocket.WebSocketClosedError"
#: The first of its two chained tracebacks ends so.
TORNADO_STREAM_CLOSED = "tornado.iostream.StreamClosedError: Stream is closed\n\nDuring handling"


def server_tracebacks(text: str) -> list[str]:
    """The tracebacks in a served explorer's log ``text`` (each from its "Traceback" line),
    less Panel's known teardown race (:data:`PANEL_TEARDOWN_RACE`) and Tornado's write to a
    closed websocket (:data:`TORNADO_CLOSED_SOCKET`, which comes with two tracebacks).  Every
    other one counts, Panel's and pandas' included: a traceback the user's clicks caused is a
    defect."""
    found = ["Traceback" + t for t in text.split("Traceback")[1:]]
    closed = [i for i, t in enumerate(found) if TORNADO_CLOSED_SOCKET in t]
    closed += [i - 1 for i in closed if i > 0 and TORNADO_STREAM_CLOSED in found[i - 1]]
    return [t for i, t in enumerate(found) if PANEL_TEARDOWN_RACE not in t and i not in closed]


class ServerLog:
    """The log file of a served explorer, read from a mark on (the part one test caused)."""

    def __init__(self, path):
        self.path = Path(path)
        self._mark = 0

    def mark(self) -> None:
        """Read from the log's current end on."""
        self._mark = self.path.stat().st_size

    def text(self) -> str:
        """The log written since the last :meth:`mark`."""
        with open(self.path, errors="replace") as f:
            f.seek(self._mark)
            return f.read()

    def tracebacks(self, settle: float = 3.0) -> list[str]:
        """:func:`server_tracebacks` since the mark, after ``settle`` seconds of quiet (the
        server handles the last clicks after the browser has sent them)."""
        size, deadline = self.path.stat().st_size, time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(settle)
            now = self.path.stat().st_size
            if now == size:
                break
            size = now
        return server_tracebacks(self.text())


def reference_errors(problems) -> list[str]:
    """Bokeh's "reference pNNNN isn't known" among a page's recorded problems: the server sent
    a change of a model the browser never received."""
    return [p for p in problems if re.search(r"reference p\d+ isn't known", p)]
