"""The Dask engine: fit, predict and audit on a Dask DataFrame (partitioned Parquet, a LocalCluster or a
real scheduler). Imported lazily; needs ``pip install 'mmc-audit[dask]'`` (dask[dataframe] + distributed).

This module is the engine's public front; the work is in its sibling modules, by concept:
:mod:`~mmc_core.engines.dask_base` (the dask check, the client, the sums that cross the wire),
:mod:`~mmc_core.engines.dask_parts` (the partitions' state on the workers and the client's view of it),
:mod:`~mmc_core.engines.dask_fit` (the fit), :mod:`~mmc_core.engines.dask_quantiles` (exact quantiles, groups
from columns), :mod:`~mmc_core.engines.dask_apply` (predictions, audit tables),
:mod:`~mmc_core.engines.dask_compare` (comparisons, periods) and :mod:`~mmc_core.engines.dask_io` (Parquet in,
the client started and closed). Nothing else in mmc_core imports them.

How it maps onto the descent's seam (:class:`mmc_core.paper.descent.CellStats`):

* Every row partition becomes one :class:`~mmc_core.engines.dask_parts._Part` object that lives on a worker
  for the whole fit. It holds the partition's labels, its group membership (evaluated per partition from the
  same :class:`~mmc_core.groups.group_set.GroupSet`), its predictions and moment columns, and a numpy
  :class:`~mmc_core.paper.descent.CellState` that keeps the partition's (group x cell) sums up to date
  incrementally. The partitions (Dask's own: ``ddf.to_delayed()``) are assigned round robin to one Dask
  *actor* per worker (``client.submit(..., actor=True)``), which computes them there and keeps them: actor
  state is never spilled, moved or recomputed behind our back, and an actor call is one direct round trip.
  Rows never leave the workers.
* Per update the client ships the update (a group id, a few cell ids and deltas: a small array) to every
  worker; each applies it to its partitions' rows and returns the sum of their cell sums (the first level of
  the reduction, on the worker); the client adds the workers' sums (the second). The descent (audit, choice
  of the next update, stopping rules) runs on the client on those sums, exactly as with the numpy engine.
  Held-out rows (early stopping) sit in the same partition objects and are updated by the same call. The
  ratio step's denominators (per-cell sums of the moment predictions) are kept with the other sums, so an
  update is one round trip.
* Prediction is a replay of the model's log, which is row-local: ``map_partitions`` with the numpy replay,
  so predictions equal those of the numpy engine bit for bit, whichever engine fitted the model.

What differs from the numpy engine (and why):

* Sums are added in another order (per partition, then across partitions), so cell statistics and the
  update deltas computed from them may differ in the last bits; the update sequence is the same unless two
  cells tie to ~1e-15, and predictions agree to ~1e-12 (tests check 1e-9).
* The calibration split (``calibration_fraction > 0``) is drawn per partition (seeded by ``random_state``
  and the partition's index: round(fraction x rows) held-out rows in each partition), not by one global
  permutation: with held-out rows the two engines fit on different rows. Early stopping and held-out
  tracking run distributed; the interval calibration runs on the client on the held-out rows (a seeded
  sample of at most ``CAL_SAMPLE_CAP`` of them, recorded in ``info``). The numpy engine's
  ``interval_calibration="auto"`` cross-fits the calibration over every row (5 extra fits); here "auto" keeps the
  held-out calibration (the record says ``"rows": "held-out"``) and "cross-fit" is an MMCError.
* Quartile cuts of numeric group columns (:func:`groups_from_columns`) are *exact* (the same cut points as
  numpy's ``np.quantile``): an approximate sketch brackets each order statistic and the few values inside
  the bracket are brought to the client. ``mean_buckets="quantile"`` with a base prediction uses the same
  exact quantiles.
* The group-linear map of the base (``base_recalibration`` "auto") and the shrunken cell corrections are fitted
  on the client, on samples of at most ``recalibrate.CV_MAX_ROWS`` fitting and held-out rows brought from the
  workers (each row's groups, label and prediction): the numpy engine fits them on the same samples
  (``recalibrate.capped``), drawn here over the rows in partition order, so without held-out rows the map and
  the whole model are the numpy engine's. The map and the cells are then applied on the workers. The affine
  map is refused.
* Nothing of our own schedules, shards or pools: partitions, workers, actors and tasks are Dask's.
* A worker lost mid-fit loses its actor's partitions: the next update fails with a clear error (run again).
"""

from __future__ import annotations

from .dask_apply import audit_tables_dask, predict_dask
from .dask_base import is_dask_collection
from .dask_compare import check_interval_method, compare_dask, periods_dask
from .dask_fit import CAL_SAMPLE_CAP, fit_dask
from .dask_io import close_client, read_parquet, start_client
from .dask_quantiles import exact_quantiles, groups_from_columns

__all__ = [
    "fit_dask",
    "predict_dask",
    "audit_tables_dask",
    "groups_from_columns",
    "exact_quantiles",
    "read_parquet",
    "start_client",
    "close_client",
    "is_dask_collection",
    "check_interval_method",
    "compare_dask",
    "periods_dask",
    "CAL_SAMPLE_CAP",
]
