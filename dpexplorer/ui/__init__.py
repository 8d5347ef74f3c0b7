"""Panel/HoloViews user interface of dpexplorer.

The engine (``dpexplorer/*.py``) never imports this package; it is the only
place that depends on panel, holoviews and bokeh widgets.

Pages (each built from one shared :class:`Session`)
-----------------------------------------------------
WorkloadBuilder, ComparePage, StrategyView, DataView, ReleaseView, LearnView,
assembled by :class:`ExplorerApp` (``apps/explorer.py`` serves it).
CompareView is the standalone comparison component of the first release.
"""

from .app import ExplorerApp
from .compare_view import WORKLOADS, ComparePage, CompareView
from .session import Session

__all__ = ["ExplorerApp", "Session", "ComparePage", "CompareView", "WORKLOADS"]
