"""dpexplorer app entry point, fully offline::

    panel serve apps/explorer.py

Every JS/CSS file is served by the Panel server itself: ``BOKEH_RESOURCES``
is forced to ``server`` and Panel's ``inline`` mode is not used.  Panel 1.9
keeps its resource mode in one process-wide variable that rendering a page
in ``inline`` (or ``cdn``) mode switches for a moment
(``panel.io.resources.set_resource_mode``); a component built meanwhile by
another session's thread then points its stylesheets at cdn.holoviz.org.
With every session in ``server`` mode there is nothing to race.  The
Bootstrap template loads no web fonts.  One
:class:`~dpexplorer.ui.app.ExplorerApp` (one session state, strategy cache
and set of privacy ledgers) is built per browser session; its pages are built
when first opened.  SIGTERM ends the process within seconds, even while a
session's optimiser runs (:mod:`dpexplorer.ui.server`); the optimisers run in
worker processes (:mod:`dpexplorer.ui.workers`), so that an ε change never
waits behind one, and BLAS computes with one thread on each of the server's
threads (:func:`dpexplorer.ui.server.one_blas_thread`).  Widget callbacks
run on Panel's thread pool, one session's in the order its user made them
(:mod:`dpexplorer.ui.serving`).
"""

import os

if os.environ.get("BOKEH_RESOURCES") not in ("server", "server-dev"):
    os.environ["BOKEH_RESOURCES"] = "server"

import holoviews as hv  # noqa: E402
import panel as pn  # noqa: E402

from dpexplorer.ui.app import ExplorerApp  # noqa: E402
from dpexplorer.ui.server import (  # noqa: E402
    exit_promptly_on_sigterm,
    freeze_startup_objects,
    log_from_env,
    one_blas_thread,
    return_freed_memory,
)
from dpexplorer.ui.serving import install as install_event_order  # noqa: E402
from dpexplorer.ui.tasks import lower_native_helper_threads  # noqa: E402
from dpexplorer.ui.workers import warm_up  # noqa: E402

log_from_env()  # DPEXPLORER_LOG_LEVEL=debug: the explorer's own log on stderr, timestamped
exit_promptly_on_sigterm()  # SIGTERM ends the server within seconds, even while optimisers run
warm_up()  # the optimisers' worker processes start now, not at the first optimiser
freeze_startup_objects()  # full garbage collections (they stop every session) skip the modules
one_blas_thread()  # the sessions' threads compute at once: OpenBLAS serves them best with one each
return_freed_memory()  # glibc gives back what closed sessions freed (fewer arenas, heap trimmed)
lower_native_helper_threads()  # BLAS helper threads yield to the event loop, as the job threads

pn.extension("tabulator", "filedropper", notifications=True, nthreads=2)
install_event_order()  # a session's widget events handled in the order the user made them
# HTML canvas, not HoloViews' default WebGL: the explorer's plots are small, and on a machine
# without a GPU (software WebGL) copying every plot out of the shared WebGL canvas stalled the
# browser for seconds after each update (Chrome profile: 6.6 s in drawImage of blit_webgl)
hv.renderer("bokeh").webgl = False

ExplorerApp().template().servable(title="dpexplorer")
