"""Data-dependent (adaptive) mechanisms: they look at the data to choose what to measure.

=============  ===============================================================
``dawa``       DAWA (1D and 2D) and its Partition+X variants
``partition``  DAWA's bucket costs, least-cost partitions, uniform expansion
``hilbert``    the Hilbert order DAWA lays 2D grids along
``mwem``       MWEM
``efpa``       EFPA
``uniform``    the Uniform baseline
=============  ===============================================================

Every noisy step goes through :class:`dpexplorer.privacy.PrivateData`; every
module registers its mechanisms when imported.  Imports the layers below
(queries, privacy, core) and the data-independent strategies.
"""

from . import dawa, efpa, hilbert, mwem, partition, uniform

__all__ = ["dawa", "efpa", "hilbert", "mwem", "partition", "uniform"]
