"""One quiet local Dask cluster for a test module's command-line cases (a cluster per case takes seconds)."""

from __future__ import annotations

import logging
from contextlib import contextmanager

import pytest


@contextmanager
def quiet_cluster(processes: bool = False, memory_limit: str | None = "1GB"):
    """A one-worker cluster with its logs silenced (as `mmc` silences a cluster it starts itself); yields its
    scheduler's address for ``--scheduler``. ``processes=False`` runs the worker as a thread of this process: no
    process to spawn, which matters when an earlier test has left ``__main__`` a temporary script (a spawned
    worker process would run it). Such a worker has no memory limit (``memory_limit`` applies to worker
    processes only): its memory monitor would measure the whole test process, and a pytest worker past 80% of
    the limit paused it, so that the next task waited for ever (CI ran into its own time limit that way)."""
    distributed = pytest.importorskip("distributed", reason="the Dask engine needs distributed")
    pytest.importorskip("dask.dataframe", reason="the Dask engine needs dask[dataframe]")
    cluster = distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=processes,
        memory_limit=memory_limit if processes else 0,
        dashboard_address=None,
        silence_logs=logging.CRITICAL,
    )
    client = distributed.Client(cluster)
    try:
        yield client.scheduler.address
    finally:
        client.close()
        cluster.close()
