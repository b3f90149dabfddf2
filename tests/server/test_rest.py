"""The server extension's REST endpoint, served by a real in-process Jupyter server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tornado.httpclient import HTTPClientError

from tests.server.stores import finished_run, interrupted_run

ENABLED = {"ServerApp": {"jpserver_extensions": {"nbtune.server": True}}}


@pytest.fixture
def jp_server_config() -> dict:
    """Enable the extension; the store is the default one under the server's root dir."""
    return ENABLED


async def test_lists_the_default_store_under_root_dir(jp_fetch, jp_root_dir: Path) -> None:
    store = jp_root_dir / "nbtune-store"
    interrupted_run(store, "live", gpus=3)
    finished_run(store, "done")
    resp = await jp_fetch("nbtune", "api", "experiments")
    assert resp.code == 200 and resp.headers["Content-Type"].startswith("application/json")
    reply = json.loads(resp.body)
    assert reply["store"] == str((store / "nbtune.db").resolve())
    assert [e["name"] for e in reply["experiments"]] == ["live", "done"]
    assert [e["state"] for e in reply["experiments"]] == ["running", "done"]
    assert reply["totals"] == {"experiments": 2, "trials_running": 3, "gpus_in_use": 3,
                               "device": "GPU", "in_use_by_device": {"GPU": 3},
                               "in_use": "3 GPUs"}
    assert {e["device"] for e in reply["experiments"]} == {"GPU"}


async def test_missing_store_is_reported_and_not_created(jp_fetch, jp_root_dir: Path) -> None:
    resp = await jp_fetch("nbtune", "api", "experiments")
    reply = json.loads(resp.body)
    assert reply["available"] is False and reply["experiments"] == []
    assert not (jp_root_dir / "nbtune-store").exists()
    # the store appears later (a notebook ran tune(store=True)): the next poll sees it
    finished_run(jp_root_dir / "nbtune-store", "late")
    reply = json.loads((await jp_fetch("nbtune", "api", "experiments")).body)
    assert reply["available"] is True and [e["name"] for e in reply["experiments"]] == ["late"]
    # and it may go away again (rm -rf nbtune-store): reported, not re-created empty
    shutil.rmtree(jp_root_dir / "nbtune-store")
    reply = json.loads((await jp_fetch("nbtune", "api", "experiments")).body)
    assert reply["available"] is False and reply["experiments"] == []
    assert not (jp_root_dir / "nbtune-store").exists()


async def test_requires_jupyter_auth(jp_serverapp, http_server_client, jp_base_url) -> None:
    with pytest.raises(HTTPClientError) as err:
        await http_server_client.fetch(f"{jp_base_url}nbtune/api/experiments")
    assert err.value.code == 403


class TestConfiguredStore:
    """``c.NbtuneServer.store`` (here a relative path) wins over the default location."""

    @pytest.fixture
    def jp_server_config(self) -> dict:
        return {**ENABLED, "NbtuneServer": {"store": "runs/custom.db"}}

    async def test_configured_store(self, jp_fetch, jp_root_dir: Path) -> None:
        finished_run(jp_root_dir / "runs" / "custom.db", "custom")
        reply = json.loads((await jp_fetch("nbtune", "api", "experiments")).body)
        assert reply["store"] == str((jp_root_dir / "runs" / "custom.db").resolve())
        assert [e["name"] for e in reply["experiments"]] == ["custom"]


@pytest.fixture
def env_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """NBTUNE_STORE is read when the extension loads, so it is set before the server starts."""
    store = tmp_path / "env-store"
    finished_run(store, "from-env")
    monkeypatch.setenv("NBTUNE_STORE", str(store))
    return store


async def test_env_var_names_the_store(env_store: Path, jp_fetch) -> None:
    reply = json.loads((await jp_fetch("nbtune", "api", "experiments")).body)
    assert reply["store"] == str(env_store / "nbtune.db")
    assert [e["name"] for e in reply["experiments"]] == ["from-env"]


async def test_unreadable_store_is_an_error_naming_it_on_its_source(jp_fetch,
                                                                   jp_root_dir: Path) -> None:
    """A corrupt store says so on its own line of the list; the other sources still show."""
    bad = jp_root_dir / "nbtune-store" / "nbtune.db"
    bad.parent.mkdir()
    bad.write_bytes(b"this is not a database" * 100)
    reply = json.loads((await jp_fetch("nbtune", "api", "experiments")).body)
    (source,) = reply["sources"]
    assert source["configured"] and source["available"] is False
    assert source["error"].startswith(f"nbtune cannot read the store at {bad}")
    assert reply["available"] is False and reply["experiments"] == []


async def test_one_experiment_and_a_clear_404(jp_fetch, jp_root_dir: Path) -> None:
    finished_run(jp_root_dir / "nbtune-store", "one")
    reply = json.loads((await jp_fetch("nbtune", "api", "experiments", "one")).body)
    assert reply["summary"]["name"] == "one" and reply["trials"] and reply["curves"]
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("nbtune", "api", "experiments", "missing")
    assert err.value.code == 404


async def test_a_kernels_experiments_with_a_source_to_pick(
        jp_fetch, jp_serverapp, jp_root_dir: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel of this server (here: the test process, writing where the server reads) with a
    store outside the root and a memory-only experiment of the same name."""
    from nbtune.kernels import writer
    from tests.kernels.test_kernel_files import sim_run

    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(jp_serverapp.runtime_dir))
    monkeypatch.setenv(writer.ENV, "1")
    monkeypatch.setattr(writer, "_current", None)
    try:
        stored = sim_run(tmp_path / "tmp-store", name="twin", seed=1)
        memory = sim_run(name="twin", seed=2)
        reply = json.loads((await jp_fetch("nbtune", "api", "experiments")).body)
        ids = {e["source"]: e for e in reply["experiments"]}
        assert len(ids) == 2 and reply["totals"]["experiments"] == 2
        for source, exp in zip(sorted(ids), [memory, stored], strict=True):
            one = json.loads((await jp_fetch("nbtune", "api", "experiments", "twin",
                                             params={"source": source})).body)
            assert one["summary"]["source"] == source
            assert one["summary"]["best_trial"] == exp.best["trial_id"] == ids[source]["best_trial"]
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("nbtune", "api", "experiments", "twin", params={"source": "kernel:1"})
        assert err.value.code == 404
    finally:
        if writer._current is not None:
            writer._current.close()
