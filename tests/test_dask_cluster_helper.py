"""The tests' in-process Dask cluster (tests/dask_cluster.quiet_cluster) must run tasks whatever the test process
holds: with a 1 GB memory limit its thread worker measured the whole pytest worker, paused past 80% of it, and
the next task waited for ever (a battery of Dask cases held CI until its time limit)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.dask_cluster import quiet_cluster


def test_an_in_process_worker_is_never_paused_by_the_test_process_memory():
    distributed = pytest.importorskip("distributed", reason="the Dask engine needs distributed")
    held = np.ones(int(1.1e9 / 8))  # the test process past the old limit, as a long pytest worker gets
    with quiet_cluster() as address, distributed.Client(address) as client:
        statuses: list = []
        for _ in range(30):  # the memory monitor looks every 100 ms: give it several looks
            statuses = list(client.run(lambda dask_worker: str(dask_worker.status)).values())
            if any("paused" in s for s in statuses):
                break
            time.sleep(0.1)
        assert statuses and all("running" in s for s in statuses), statuses
        assert client.submit(sum, [1, 2], pure=False).result(timeout=120) == 3
    assert held[0] == 1.0
