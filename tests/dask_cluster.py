"""One way to start the real LocalCluster the integration tests share (no mocks for Dask).

Two worker processes, one thread each, each standing for one GPU (resource
``GPU=1``), bound to 127.0.0.1 with no dashboard port to fight over.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import distributed
import pytest


@contextmanager
def local_client(n_workers: int = 2, **cluster_kwargs: Any) -> Iterator[distributed.Client]:
    """``cluster_kwargs`` go to the LocalCluster (``memory_limit="1GB"``...)."""
    cluster = distributed.LocalCluster(
        n_workers=n_workers, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=None, resources={"GPU": 1},
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},  # never fight over port 8787
        **cluster_kwargs,
    )
    with client_of(cluster) as client:
        yield client


@contextmanager
def client_of(cluster: Any) -> Iterator[distributed.Client]:
    """A client of ``cluster``; both are closed at the end (a dask-cuda one too: tests/gpu)."""
    client = distributed.Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.fixture(scope="module")
def client() -> Iterator[distributed.Client]:
    """One cluster per test module (import it into the module to use it)."""
    with local_client() as c:
        yield c


def watched_engine(algorithm, allocator=None):
    """An engine with ``validate=True`` and the list of every event it handled (for asserts)."""
    from nbtune.engine.engine import Engine

    eng = Engine(algorithm, allocator, validate=True)
    seen: list = []
    eng.subscribe(lambda events, cmds: seen.extend(events))
    return eng, seen


def wait_for_budget(engine, trial_id: int, budget: float, timeout: float) -> None:
    """Block until trial ``trial_id`` has used ``budget`` (fail the test after ``timeout`` s)."""
    import time

    deadline = time.monotonic() + timeout
    while trial_id not in engine.trials or engine.trials[trial_id].budget_used < budget:
        assert time.monotonic() < deadline, f"trial {trial_id} never reached budget {budget}"
        time.sleep(0.05)
