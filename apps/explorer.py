"""dpexplorer app entry point, fully offline::

    panel serve apps/explorer.py

Every JS/CSS file is served by the Panel server itself (``BOKEH_RESOURCES``
is forced to ``server``: under ``cdn`` or ``inline`` Panel would point
component stylesheets at cdn.holoviz.org) and the Bootstrap template loads no
web fonts.  One :class:`~dpexplorer.ui.app.ExplorerApp` (and so one session
state, strategy cache and privacy ledger) is built per browser session.
"""

import os

if os.environ.get("BOKEH_RESOURCES") not in ("server", "server-dev"):
    os.environ["BOKEH_RESOURCES"] = "server"

import panel as pn  # noqa: E402

from dpexplorer.ui.app import ExplorerApp  # noqa: E402

pn.extension("tabulator", notifications=True, inline=True, nthreads=2)

ExplorerApp().template().servable(title="dpexplorer")
