"""Panel/HoloViews user interface of dpexplorer.

The engine (``dpexplorer/`` outside ``ui/``) never imports this package; it
is the only place that depends on panel, holoviews and bokeh widgets, and it
uses only the engine's public API.

Pages (each a view on one shared :class:`Session`)
---------------------------------------------------
WorkloadBuilder, ComparePage, StrategyView, DataView, ReleaseView, SumsView,
LearnView, assembled by :class:`ExplorerApp` (``apps/explorer.py`` serves it):
each page is built when its tab is first opened.
"""

from .app import ExplorerApp
from .compare_view import ComparePage
from .session import Session

__all__ = ["ExplorerApp", "Session", "ComparePage"]
