"""dpexplorer app entry point, fully offline::

    panel serve apps/explorer.py

No flags are needed: every JS/CSS file (BokehJS, Panel, Tabulator, the
notification area, font-awesome) is served by the Panel server itself from
its ``static/`` routes, and the plain Row/Column layout loads no web fonts.
This module forces Bokeh's resource mode to ``server`` (local files): under
``BOKEH_RESOURCES=cdn`` or ``inline`` Panel would point component
stylesheets at cdn.holoviz.org.  ``inline=True`` only matters when the page
is saved or shown in a notebook (resources embedded instead of linked).

One :class:`~dpexplorer.ui.CompareView` (and so one strategy cache) is built
per browser session; comparisons run in a worker thread so the loading
spinner shows while a large workload is being computed.
"""

import os

if os.environ.get("BOKEH_RESOURCES") not in ("server", "server-dev"):
    os.environ["BOKEH_RESOURCES"] = "server"

import panel as pn  # noqa: E402

from dpexplorer.ui import CompareView  # noqa: E402

pn.extension("tabulator", notifications=True, inline=True, nthreads=2)

view = CompareView()
pn.Column(
    pn.pane.Markdown("# dpexplorer", sizing_mode="stretch_width"),
    view.panel(),
    sizing_mode="stretch_width",
).servable(title="dpexplorer")
