"""Store backends for the contract suite: every one available here, PostgreSQL if reachable."""

from __future__ import annotations

import os
import uuid

import pytest

from nbtune.store import Store

PG_ENV = "NBTUNE_TEST_POSTGRES_URL"


def _postgres() -> Store:
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"no PostgreSQL server: set {PG_ENV}=postgresql+psycopg://user:pw@host/db "
                    "to run the contract suite against one")
    try:
        store = Store(url, checkpoint_root="memory://nbtune")
        with store.engine.connect():
            pass
    except Exception as exc:  # driver missing or server down: say which
        pytest.skip(f"PostgreSQL at {PG_ENV} is not usable here: {exc}")
    return store


@pytest.fixture(params=["sqlite-file", "sqlite-memory", "postgresql"])
def store(request, tmp_path):
    if request.param == "sqlite-file":
        s = Store(tmp_path / "contract.db")
    elif request.param == "sqlite-memory":
        s = Store("sqlite://", checkpoint_root=str(tmp_path / "ckpt"))
    else:
        s = _postgres()
    yield s
    s.close()


@pytest.fixture
def uname():
    """A fresh experiment name (a shared PostgreSQL database outlives one test)."""
    return lambda stem="exp": f"{stem}-{uuid.uuid4().hex[:8]}"
