"""One way to start the real LocalCluster the integration tests share (no mocks for Dask).

Two worker processes, one thread each, each standing for one GPU (resource
``GPU=1``), bound to 127.0.0.1 with no dashboard port to fight over.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import distributed


@contextmanager
def local_client(n_workers: int = 2) -> Iterator[distributed.Client]:
    cluster = distributed.LocalCluster(
        n_workers=n_workers, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=None, resources={"GPU": 1},
        scheduler_kwargs={"dashboard_address": ":0"},  # never fight over port 8787
    )
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()
