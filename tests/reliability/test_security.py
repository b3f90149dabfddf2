"""Safe defaults: localhost-only servers, TLS to a remote cluster, checkpoint loading.

The REST endpoint's authentication is checked where the endpoint is tested:
tests/server/test_rest.py::test_requires_jupyter_auth (403 without Jupyter's token).
"""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys

import cloudpickle
import psutil
import pytest

from nbtune.runtimes.dask import checkpoints as ck

cloudpickle.register_pickle_by_value(sys.modules[__name__])

LOCAL = {"127.0.0.1", "::1"}


def listening(proc: psutil.Process) -> list[tuple[int, str, int]]:
    out = []
    for p in [proc, *proc.children(recursive=True)]:
        try:
            conns = p.net_connections(kind="inet")
        except psutil.Error:
            continue
        out += [(p.pid, c.laddr.ip, c.laddr.port) for c in conns
                if c.status == psutil.CONN_LISTEN]
    return out


@pytest.mark.integration
@pytest.mark.slow
def test_every_server_of_the_default_local_cluster_listens_on_localhost_only():
    """Scheduler, dashboard, workers, nannies: a dashboard at ':0' bound 0.0.0.0 before the fix."""
    from nbtune.runtimes.dask import DaskRuntime

    before = set(listening(psutil.Process()))  # another test's server is not this one's
    with DaskRuntime(n_workers=1, warm_processes=0, preload=()) as rt:
        socks = [s for s in listening(psutil.Process()) if s not in before]
        assert rt.dashboard_link and rt.dashboard_link.startswith("http://127.0.0.1:")
    assert len(socks) >= 4  # scheduler, its dashboard, a worker, its nanny
    exposed = [s for s in socks if s[1] not in LOCAL]
    assert not exposed, f"servers listening beyond localhost: {exposed}"


def make_certs(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return str(cert), str(key)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_a_tls_cluster_is_joined_with_the_security_given(tmp_path):
    import distributed
    from distributed.security import Security

    from nbtune.runtimes.dask import DaskRuntime
    from nbtune.runtimes.dask.driver_side.cluster import DaskConnectError

    cert, key = make_certs(tmp_path)
    sec = Security(tls_ca_file=cert, tls_client_cert=cert, tls_client_key=key,
                   tls_scheduler_cert=cert, tls_scheduler_key=key, tls_worker_cert=cert,
                   tls_worker_key=key, require_encryption=True)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  protocol="tls://", host="127.0.0.1", security=sec,
                                  dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tls://")
        with pytest.raises(DaskConnectError, match="security=distributed.security.Security"):
            DaskRuntime(address, connect_timeout=3, warm_processes=0, preload=()).connect()
        with DaskRuntime(address, security=sec, warm_processes=0, preload=()) as rt:
            assert rt.client.scheduler.address.startswith("tls://")
            assert len(rt.inventory.slots) == 1


class Boom:
    def __reduce__(self):
        return (print, ("this ran while loading",))


def test_a_checkpoint_outside_the_experiments_directory_is_never_loaded(tmp_path):
    own = tmp_path / "ckpt"
    evil = tmp_path / "elsewhere" / "budget-1.pt"
    evil.parent.mkdir()
    evil.write_bytes(pickle.dumps(Boom()))
    with pytest.raises(ck.CheckpointLocationError, match="not inside this experiment"):
        ck.load_state(evil, root=own)
    sneaky = own / "trial-0" / ".." / ".." / "elsewhere" / "budget-1.pt"
    with pytest.raises(ck.CheckpointLocationError):
        ck.load_state(sneaky, root=own)
    path = ck.save_state({"w": [1.0, 2.0]}, ck.checkpoint_path(own, 0, 1))
    assert ck.load_state(path, root=own) == {"w": [1.0, 2.0]}


def test_a_torch_checkpoint_of_tensors_loads_with_weights_only(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    path = ck.checkpoint_path(tmp_path, 0, 2)
    state = {"model": torch.nn.Linear(2, 1).state_dict(), "step": 2}
    ck.save_state(state, path)
    calls = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k["weights_only"])
                        or real(*a, **k))
    out = ck.load_state(path, root=tmp_path)
    assert calls == [True] and out["step"] == 2
    assert torch.equal(out["model"]["weight"], state["model"]["weight"])
