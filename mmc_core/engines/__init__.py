"""Engines behind the descent's seam (:class:`mmc_core.descent.CellStats`).

The numpy engine is :class:`mmc_core.descent.CellState` (the default, in memory). Other engines live in
their own modules here and are imported lazily: importing ``mmc_core`` never imports them or their
dependencies. ``mmc_core.engines.dask_engine`` runs the descent, prediction and audit tables on a Dask
DataFrame (``pip install 'mmc-audit[dask]'``).
"""

ENGINES = ("numpy", "dask")

__all__ = ["ENGINES"]
