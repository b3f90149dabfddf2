"""GPU id <-> worker mapping and per-rank environments, from worker probes (no cluster needed).

The probes are the dictionaries :func:`nbtune.runtimes.dask.driver_side.cluster.probe_worker`
returns; feeding them directly exercises the GPU-mode mapping that cannot run
on this CPU-only machine.
"""

from __future__ import annotations

import pytest

from nbtune.runtimes.dask.driver_side.cluster import Inventory, Slot, connect
from nbtune.runtimes.dask.driver_side.runs import rank_env


def cpu_probe(name, host="10.0.0.1", gpus=None, nthreads=2):
    res = {} if gpus is None else {"GPU": float(gpus)}
    return {"name": name, "host": host, "nthreads": nthreads, "memory_limit": 8e9,
            "resources": res, "devices": []}


def gpu_probe(name, host, uuids):
    return {"name": name, "host": host, "nthreads": 4, "memory_limit": 64e9, "resources": {},
            "devices": [{"index": i, "uuid": u, "name": "A100", "memory_gb": 80.0}
                        for i, u in enumerate(uuids)]}


def test_cpu_workers_stand_for_one_gpu_each_unless_they_say_more():
    inv = Inventory(gpus=False)
    assert inv.adopt({"tcp://a:1": cpu_probe("w0"), "tcp://b:1": cpu_probe("w1", gpus=2)})
    assert sorted(inv.slots) == [0, 1, 2]
    assert [inv.slots[g].worker for g in (0, 1, 2)] == ["tcp://a:1", "tcp://b:1", "tcp://b:1"]
    assert inv.slots[0].threads == 2.0 and inv.slots[1].threads == 1.0
    spec = inv.spec()
    assert spec.n_gpus == 3 and spec.node_cpus == {"10.0.0.1": 4.0}


def test_a_restarted_worker_gets_its_gpu_ids_back_and_a_loss_shrinks_the_cluster():
    inv = Inventory(gpus=True)
    inv.adopt({"tcp://n1:1": gpu_probe("w0", "n1", ["GPU-a"]),
               "tcp://n2:1": gpu_probe("w1", "n2", ["GPU-b", "GPU-c"])})
    assert {g: s.device for g, s in inv.slots.items()} == {0: "GPU-a", 1: "GPU-b", 2: "GPU-c"}
    assert inv.drop_worker("tcp://n2:1")
    assert sorted(inv.slots) == [0] and inv.spec().n_gpus == 1
    assert not inv.drop_worker("tcp://n2:1")  # already gone
    # the nanny restarts w1 on a new port: same name, same ids
    changed = inv.adopt({**inv.workers, "tcp://n2:9": gpu_probe("w1", "n2", ["GPU-b", "GPU-c"])})
    assert changed and sorted(inv.slots) == [0, 1, 2]
    assert inv.slots[1].worker == "tcp://n2:9"
    nodes = {g.gpu_id: g.node for g in inv.spec().gpus}
    assert nodes == {0: "n1", 1: "n2", 2: "n2"}


def test_joining_workers_take_over_the_interim_slots_ids_and_the_cluster_stays_the_same():
    kernel = {"kernel://h/1": cpu_probe("kernel", nthreads=1),
              "kernel://h/1/lane-1": cpu_probe("kernel-lane-1", nthreads=1),
              "kernel://h/1/lane-2": cpu_probe("kernel-lane-2", nthreads=1)}
    inv = Inventory(gpus=False)
    with pytest.raises(ValueError, match="interim"):
        inv.set_local(kernel, ["kernel://h/9"])
    inv.set_local(kernel, ["kernel://h/1/lane-1", "kernel://h/1/lane-2"])
    assert {g: s.worker for g, s in inv.slots.items()} == {
        0: "kernel://h/1", 1: "kernel://h/1/lane-1", 2: "kernel://h/1/lane-2"}
    before = inv.spec()
    # a worker joins: it takes the first interim lane's id, the spec is what it was
    assert inv.add({"tcp://a:1": cpu_probe("0", nthreads=1), "tcp://x:1": "an error"})
    assert {g: s.worker for g, s in inv.slots.items()} == {
        0: "kernel://h/1", 1: "tcp://a:1", 2: "kernel://h/1/lane-2"}
    assert "kernel://h/1/lane-1" not in inv.local and inv.interim == ["kernel://h/1/lane-2"]
    assert [g.gpu_id for g in inv.spec().gpus] == [g.gpu_id for g in before.gpus]
    assert inv.spec().node_cpus == before.node_cpus
    # one with two slots takes the last lane and adds a slot of its own
    inv.add({"tcp://b:1": cpu_probe("1", gpus=2, nthreads=2)})
    assert {g: s.worker for g, s in inv.slots.items()} == {
        0: "kernel://h/1", 1: "tcp://a:1", 2: "tcp://b:1", 3: "tcp://b:1"}
    assert inv.interim == [] and list(inv.local) == ["kernel://h/1"]
    # a worker the nanny restarts gets its own ids back; a lost one leaves, the kernel stays
    assert inv.drop_worker("tcp://a:1") and sorted(inv.slots) == [0, 2, 3]
    assert not inv.drop_worker("kernel://h/1")
    inv.add({"tcp://a:2": cpu_probe("0", nthreads=1)})
    assert inv.slots[1].worker == "tcp://a:2" and sorted(inv.slots) == [0, 1, 2, 3]


@pytest.mark.parametrize(("share", "threads"), [(1.0, 4), (0.5, 2), (0.25, 1), (0.1, 1)])
def test_cpu_rank_threads_follow_the_share(share, threads):
    slot = Slot(0, "tcp://a:1", 0, "a", None, 4.0)
    n, env = rank_env(3, slot, share, gpus=False, mps=False)
    assert n == threads and env["OMP_NUM_THREADS"] == str(threads)
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_gpu_rank_sees_only_its_gpu_and_packed_ranks_get_an_mps_share():
    slot = Slot(5, "tcp://n1:1", 0, "n1", "GPU-1234", 8.0, "A100", 80.0)
    _, whole = rank_env(1, slot, 1.0, gpus=True, mps=True)
    assert whole["CUDA_VISIBLE_DEVICES"] == "GPU-1234"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in whole
    _, packed = rank_env(1, slot, 0.33, gpus=True, mps=True)
    assert packed["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "33"
    _, no_mps = rank_env(1, slot, 0.33, gpus=True, mps=False)
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in no_mps


def test_bad_cluster_arguments_fail_early():
    with pytest.raises(ValueError, match="not a scheduler address"):
        connect("my-cluster", gpus=False, n_workers=None, threads_per_worker=1,
                host="127.0.0.1", dashboard_address=None, memory_limit="auto")
    with pytest.raises(TypeError, match="cluster must be"):
        connect(3.5, gpus=False, n_workers=None, threads_per_worker=1,
                host="127.0.0.1", dashboard_address=None, memory_limit="auto")


def test_gpu_mode_without_dask_cuda_says_what_to_install():
    try:
        import dask_cuda  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("dask-cuda is installed: the GPU cluster path would really start")
    from nbtune.runtimes.dask import DaskRuntime

    rt = DaskRuntime(gpus=True)
    with pytest.raises(ImportError, match=r"nbtune\[cuda\]"):
        rt.connect()
    assert rt.client is None
