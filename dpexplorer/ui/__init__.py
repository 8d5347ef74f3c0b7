"""Panel/HoloViews user interface of dpexplorer.

The engine (``dpexplorer/`` outside ``ui/``) never imports this package; it
is the only place that depends on panel, holoviews and bokeh widgets, and it
uses only the engine's public API.

Pages (each a view on one shared :class:`Session`)
---------------------------------------------------
WorkloadBuilder, ComparePage, StrategyView, DataView, ReleaseView, SumsView,
LearnView, assembled by :class:`ExplorerApp` (``apps/explorer.py`` serves it):
each page is built when its tab is first opened.

The three names below are imported when first used (PEP 562): an optimiser's worker
process imports :mod:`dpexplorer.ui.remote` alone, without Panel.
"""

import importlib

__all__ = ["ExplorerApp", "Session", "ComparePage"]

_WHERE = {"ExplorerApp": ".app", "ComparePage": ".compare_view", "Session": ".session"}


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
