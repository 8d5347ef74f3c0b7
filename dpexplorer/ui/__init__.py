"""Panel/HoloViews user interface of dpexplorer.

The engine (``dpexplorer/*.py``) never imports this package; it is the only
place that depends on panel, holoviews and bokeh widgets.

Components
----------
CompareView
    Side-by-side analytic comparison of the registered mechanisms for one
    workload and one noise model (RMSE bar chart, SVD bound, table).
"""

from .compare_view import WORKLOADS, CompareView

__all__ = ["CompareView", "WORKLOADS"]
