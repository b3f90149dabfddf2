"""Cluster setup and the map between the engine's GPU ids and Dask workers.

The engine schedules GPUs by integer id; Dask runs tasks on workers by
address. :class:`Inventory` keeps that map: every worker contributes one
*slot* per GPU it owns (GPU mode: the devices in its ``CUDA_VISIBLE_DEVICES``;
CPU mode: its ``GPU`` resource, default one). Ids are keyed by the worker's
*name*, so a worker the nanny restarts after a crash gets its old GPU id back
and the engine sees the cluster shrink and then grow to what it was.

*Interim* slots stand for workers still starting (the kernel slot's extra lanes,
:mod:`.kernel_slot`): a Dask worker that joins takes over one's GPU id, so the
engine sees the same cluster throughout; the trial running there finishes where
it runs, and the next one placed on that id goes to the worker.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from nbtune.core.resources import GPU, ClusterSpec

__all__ = ["Slot", "Inventory", "connect", "local_worker_count", "DaskConnectError", "probe_worker", "pin_cores",
           "listen_all", "unlisten_all", "check_speeds"]


@dataclass(frozen=True)
class Slot:
    """One GPU (or CPU stand-in) as the engine sees it, and where it lives."""

    gpu_id: int
    worker: str
    index: int  # slot number on its worker
    node: str
    device: str | None  # the GPU's UUID, for the trial's CUDA_VISIBLE_DEVICES (GPU mode)
    threads: float  # CPU cores this slot stands for (thread limits for packed CPU trials)
    kind: str = "cpu"
    memory_gb: float = 16.0
    #: CPU stand-in slots: the cores its trial processes are pinned to (empty: not pinned)
    cores: tuple[int, ...] = ()


def probe_worker(gpus: bool, dask_worker: Any = None) -> dict[str, Any]:
    """Run on each worker (``client.run``): what it is and what it owns."""
    from nbtune.runtimes.dask import gpu as gpu_mod

    host = dask_worker.address.split("://")[-1].rsplit(":", 1)[0]
    state = dask_worker.state
    return {
        "name": str(dask_worker.name),
        "host": host,
        "nthreads": int(state.nthreads),
        "memory_limit": float(dask_worker.memory_manager.memory_limit or 0),
        "resources": {k: float(v) for k, v in state.total_resources.items()},
        "cores": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [],
        "devices": gpu_mod.nvml_devices(gpu_mod.worker_devices(dict(state.total_resources)))
        if gpus else [],
    }


def check_speeds(speeds: Mapping[str, float] | None) -> dict[str, float]:
    """``DaskRuntime(gpu_speeds=...)`` checked: names to relative speeds > 0."""
    out: dict[str, float] = {}
    for name, v in (speeds or {}).items():
        if (not isinstance(name, str) or not name or isinstance(v, bool)
                or not isinstance(v, int | float) or not v > 0):
            raise ValueError(f"gpu_speeds maps a GPU name (or part of one, e.g. 'A100') or a "
                             f"worker's name to a relative speed > 0; got {name!r}: {v!r}")
        out[name] = float(v)
    return out


class Inventory:
    """GPU id <-> (worker, slot), stable across worker restarts.

    ``speeds`` (``DaskRuntime(gpu_speeds=...)``) gives GPUs their relative speed in the
    cluster spec: a key is a worker's name (that worker's slots) or part of a GPU's NVML
    name, case-insensitive (``{"A100": 2.0, "V100": 1.0}``; the longest matching key
    wins); a GPU nothing matches has speed 1.0. Speeds are what tell GPU generations apart
    (Hydro §5.2's placement of target trials on older GPUs reads them); NVML reports names,
    not throughputs, so they are declared.
    """

    check_speeds = staticmethod(check_speeds)

    def __init__(self, gpus: bool, speeds: Mapping[str, float] | None = None) -> None:
        self.gpus = gpus
        self.speeds = check_speeds(speeds)
        self._ids: dict[tuple[str, int], int] = {}
        self.slots: dict[int, Slot] = {}
        self.workers: dict[str, dict[str, Any]] = {}
        #: workers that are not Dask's (the kernel slot, .kernel_slot): no probe finds them,
        #: every rebuild keeps them
        self.local: dict[str, dict[str, Any]] = {}
        #: local workers that stand in for Dask workers still starting, in the order joining
        #: workers take them over (:meth:`add`)
        self.interim: list[str] = []

    def set_local(self, local: dict[str, dict[str, Any]],
                  interim: list[str] | tuple[str, ...] = ()) -> bool:
        """The workers that are not Dask's (``address -> probe``), kept through every refresh;
        those given before and not now leave. ``interim``: those of them (one slot each) that
        the next Dask workers to join take over."""
        if any(a not in local for a in interim):
            raise ValueError("an interim worker must be one of the local workers")
        dask = {a: w for a, w in self.workers.items() if a not in self.local}
        self.local = dict(local)
        self.interim = list(interim)
        return self.adopt({**dask, **self.local})

    def refresh(self, client: Any, workers: list[str] | None = None) -> bool:
        """Probe all workers (or just the named new ones); True if the set of GPUs changed.

        Probing only the newcomers matters: a broadcast that includes a worker
        which died a moment ago waits out a 30 s connect timeout (the driver
        probes a newly linked worker off its thread: :class:`.membership.Membership`).
        """
        info = client.run(probe_worker, self.gpus, workers=workers, on_error="ignore")
        info = {a: w for a, w in info.items() if isinstance(w, dict)}
        if workers is None:
            return self.adopt({**self.local, **info})
        return self.adopt({**self.workers, **info})

    def add(self, info: dict[str, Any]) -> bool:
        """Adopt the probes of newly joined workers (``address -> probe``; errors skipped).

        Each new worker's slots take over interim slots while any are left: the same GPU
        ids, now on the worker (the interim workers leave)."""
        new = {a: w for a, w in info.items() if isinstance(w, dict)}
        current = dict(self.workers)
        for addr, w in sorted(new.items(), key=lambda kv: (kv[1]["host"], kv[1]["name"])):
            if addr in current or self.gpus:
                continue
            for k in range(self._slot_count(w)):
                if not self.interim or (w["name"], k) in self._ids:
                    break
                stand_in = self.interim.pop(0)
                gone = self.local.pop(stand_in)
                current.pop(stand_in, None)
                self._ids[(w["name"], k)] = self._ids[(gone["name"], 0)]
        return self.adopt({**current, **new})

    def _slot_count(self, w: dict[str, Any]) -> int:
        from nbtune.runtimes.dask.worker_side.cpu_meter import cpu_slots

        return len(w["devices"]) if self.gpus else cpu_slots(w["resources"])

    def adopt(self, info: dict[str, dict[str, Any]]) -> bool:
        """Rebuild the slots from ``address -> probe`` of every current worker."""
        from nbtune.runtimes.dask.worker_side.cpu_meter import cpu_slots

        slots: dict[int, Slot] = {}
        for addr, w in sorted(info.items(), key=lambda kv: (kv[1]["host"], kv[1]["name"])):
            if self.gpus:
                devs = w["devices"]
                entries = [(d["uuid"], d["name"], d["memory_gb"]) for d in devs]
            else:
                n = cpu_slots(w["resources"])
                mem = (w["memory_limit"] or 16e9) / 1e9 / n
                entries = [(None, "cpu", mem)] * n
            threads = max(w["nthreads"] / max(len(entries), 1), 1.0)
            for k, (dev, kind, mem_gb) in enumerate(entries):
                key = (w["name"], k)
                if key not in self._ids:  # (an id taken over is under two keys)
                    self._ids[key] = 1 + max(self._ids.values(), default=-1)
                gid = self._ids[key]
                slots[gid] = Slot(gid, addr, k, w["host"], dev, threads, kind, float(mem_gb))
        if not self.gpus:
            slots = pin_cores(slots, info)
        changed = set(slots) != set(self.slots) or any(
            slots[g].worker != self.slots[g].worker for g in slots if g in self.slots)
        self.slots, self.workers = slots, dict(info)
        return changed

    def drop_worker(self, address: str) -> bool:
        """Forget a worker the scheduler removed; True if it held GPUs."""
        if address not in self.workers or address in self.local:
            return False
        before = set(self.slots)
        self.adopt({a: w for a, w in self.workers.items() if a != address})
        return set(self.slots) != before

    def speed(self, slot: Slot) -> float:
        """The declared relative speed of ``slot`` (1.0 when nothing declared matches)."""
        name = (self.workers.get(slot.worker) or {}).get("name")
        if name is not None and str(name) in self.speeds:
            return self.speeds[str(name)]
        kind = slot.kind.lower()
        hits = [k for k in self.speeds if k.lower() in kind]
        return self.speeds[max(hits, key=len)] if hits else 1.0

    def spec(self) -> ClusterSpec:
        gpus = [GPU(s.gpu_id, s.node, s.kind, self.speed(s), s.memory_gb)
                for s in sorted(self.slots.values(), key=lambda s: s.gpu_id)]
        cpus: dict[str, float] = {}
        for w in self.workers.values():
            cpus[w["host"]] = cpus.get(w["host"], 0.0) + float(w["nthreads"])
        return ClusterSpec(tuple(gpus), cpus)


def pin_cores(slots: dict[int, Slot], info: dict[str, dict[str, Any]]) -> dict[int, Slot]:
    """Give each CPU stand-in slot its own cores, where a host has enough for all of them.

    A CPU worker stands for a GPU only if its trials cannot borrow compute
    from the neighbouring "GPU": unpinned, two trials packed on worker A and
    one on worker B share both cores, so a packing probe on A measures B's
    loss as A's gain (Fluid's O^2 came out 0.25 on two single-core workers,
    and ``auto`` packed where packing cannot pay). Pinned, A's trials
    time-slice A's cores, as trials packed on one GPU share its SMs. A host
    whose slots ask for more cores than it has is left unpinned.
    """
    by_host: dict[str, list[Slot]] = {}
    for s in sorted(slots.values(), key=lambda s: s.gpu_id):
        by_host.setdefault(s.node, []).append(s)
    out = dict(slots)
    for host, group in by_host.items():
        cores = next((list(w.get("cores") or []) for w in info.values()
                      if w["host"] == host), [])
        need = [max(int(round(s.threads)), 1) for s in group]
        if not cores or sum(need) > len(cores):
            continue
        at = 0
        for s, n in zip(group, need, strict=True):
            out[s.gpu_id] = dataclasses.replace(s, cores=tuple(cores[at:at + n]))
            at += n
    return out


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT while worker processes are spawned, so that they inherit it ignored.

    A kernel interrupt (SIGINT to the kernel's process group) must stop
    ``exp.wait()``, not the workers. Only the main thread may change signal
    handlers; elsewhere nothing changes (the workers' plugin still applies).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def connect(
    cluster: Any,
    *,
    gpus: bool,
    n_workers: int | None,
    threads_per_worker: int,
    host: str,
    dashboard_address: str | None,
    memory_limit: Any,
    security: Any = None,
    timeout: float = 30.0,
    plugins: list[Any] | None = None,
) -> tuple[Any, Any | None, bool]:
    """Return ``(client, cluster we created or None, whether we own the client)``.

    ``plugins``: worker plugins a local CPU cluster's workers start with (the warm
    pool), so that their trial processes import torch while the cluster is still
    coming up instead of after it; a GPU cluster gets them later, from
    :func:`.worker_setup.prepare_workers`, in the MPS daemon's order.

    ``security`` (a ``distributed.security.Security``, TLS certificates) and
    ``timeout`` apply to a remote scheduler given by address or Cluster; a
    scheduler that does not answer within ``timeout`` s is a
    :class:`DaskConnectError` saying what to check.
    """
    from distributed import Client

    if cluster is None:
        from nbtune.runtimes.dask.driver_side.main_guard import check_main_guard

        check_main_guard()  # workers re-import the script: an unguarded call would recurse
        with sigint_ignored():
            made = _local_cluster(gpus, n_workers, threads_per_worker, host,
                                  dashboard_address, memory_limit, plugins)
        client = Client(made, set_as_default=False)
        from nbtune.runtimes.dask.worker_side.plugin import IgnoreInterrupts

        client.register_plugin(IgnoreInterrupts())  # workers a nanny restarts later
        return client, made, True
    if isinstance(cluster, Client):
        return cluster, None, False
    if isinstance(cluster, str):
        if "://" not in cluster and ":" not in cluster:
            raise ValueError(
                f"cluster={cluster!r} is not a scheduler address; give 'tcp://host:port', "
                "a distributed.Client, a Cluster object, or None for a local cluster"
            )
        return _remote(cluster, security, timeout), None, True
    if hasattr(cluster, "scheduler_address"):
        return _remote(cluster, security, timeout), None, True
    raise TypeError(
        f"cluster must be None, a scheduler address, a distributed.Client or a Cluster, "
        f"got {type(cluster).__name__}"
    )


class DaskConnectError(ConnectionError):
    """No Dask scheduler answered at the address given; the message says what to check."""


def _remote(cluster: Any, security: Any, timeout: float) -> Any:
    from distributed import Client

    where = getattr(cluster, "scheduler_address", cluster)
    if security is None and str(where).startswith("tls://"):
        raise DaskConnectError(
            f"the scheduler at {where} speaks TLS: pass its certificates as "
            "security=distributed.security.Security(tls_ca_file=..., tls_client_cert=..., "
            "tls_client_key=...), see docs/reliability")
    kw: dict[str, Any] = {"set_as_default": False, "timeout": timeout}
    if security is not None:
        kw["security"] = security
    try:
        return Client(cluster, **kw)
    except OSError as exc:
        raise DaskConnectError(
            f"no Dask scheduler answered at {where} within {timeout:g} s ({exc}). Check that "
            "`dask scheduler` and its workers run there and the port is reachable; a TLS "
            "scheduler (tls://) needs security=distributed.security.Security(...); or pass "
            "cluster=None for a local cluster") from exc


def _local_cluster(gpus: bool, n_workers: int | None, threads_per_worker: int, host: str,
                   dashboard_address: str | None, memory_limit: Any,
                   plugins: list[Any] | None = None) -> Any:
    """Start the cluster nbtune owns: one worker per GPU, or CPU workers standing for GPUs.

    Every server it starts listens on ``host`` (127.0.0.1 unless configured):
    a dashboard address without a host (``":0"``, ``":8787"``) would make
    Dask bind it to every interface, open to the whole network.
    """
    from nbtune.runtimes.dask import dask_page

    dask_page.register()  # before the scheduler starts: Dask lists its pages then
    if dashboard_address is not None and dashboard_address.startswith(":"):
        dashboard_address = f"{host}{dashboard_address}"
    if gpus:
        from nbtune.runtimes.dask.gpu import make_cuda_cluster

        made = make_cuda_cluster(
            host, dashboard_address, memory_limit=memory_limit,
            threads_per_worker=threads_per_worker,
            scheduler_kwargs=None if dashboard_address else {"dashboard_address": f"{host}:0"},
        )
    else:
        from distributed import LocalCluster

        n = local_worker_count(n_workers, threads_per_worker)
        extra = {"plugins": list(plugins)} if plugins else {}  # Worker(plugins=...), via Nanny
        made = LocalCluster(
            n_workers=n, threads_per_worker=threads_per_worker, processes=True, host=host,
            dashboard_address=dashboard_address, resources={"GPU": 1},
            memory_limit=memory_limit,
            # no dashboard still means an HTTP server: on a free port, never 8787's owner's
            scheduler_kwargs=None if dashboard_address else {"dashboard_address": f"{host}:0"},
            **extra,
        )
    _quiet_at_exit()
    return made


def local_worker_count(n_workers: int | None, threads_per_worker: int) -> int:
    """Workers of the local CPU cluster nbtune starts: ``n_workers``, else one per
    ``threads_per_worker`` cores."""
    return n_workers or max((os.cpu_count() or 1) // max(threads_per_worker, 1), 1)


def _quiet_at_exit() -> None:
    """At exit, Dask closes every cluster itself (``distributed.deploy.spec.close_clusters``),
    workers first, and logs the scheduler's last broadcasts to them as ERRORs: the last line
    of a finished script. Registered after that handler, this one runs before it."""
    if not getattr(_quiet_at_exit, "done", False):
        _quiet_at_exit.done = True  # type: ignore[attr-defined]
        atexit.register(logging.getLogger("distributed.scheduler").setLevel, logging.CRITICAL)


# one "all"-topic subscription per client, fanned out to every runtime using it
_ALL_LOCK = threading.Lock()
_ALL: dict[str, list[Callable[[Any], None]]] = {}


def close_cluster(cluster: Any) -> None:
    """Close a local cluster nbtune started, even on a machine too loaded to close it in time.

    A nanny gives its worker 5 s to exit; on a heavily loaded machine a worker
    (with its warm trial processes) can take longer, and the timeout would reach
    the user as a ``TimeoutError`` at the end of a finished run. The nanny kills
    the worker anyway; what is left is said in a warning.
    """
    sched = logging.getLogger("distributed.scheduler")
    level = sched.level
    # its workers go first, so the scheduler's last broadcasts to them fail: a closing
    # cluster's expected noise, which Dask logs as an ERROR at the end of a finished run
    sched.setLevel(logging.CRITICAL)
    try:
        cluster.close()
    except TimeoutError as exc:
        logging.getLogger("nbtune.dask").warning(
            "the local Dask cluster did not close within its timeout (%r); its worker "
            "processes were told to exit", exc)
    finally:
        sched.setLevel(level)


def listen_all(client: Any, fn: Callable[[Any], None]) -> None:
    """Call ``fn`` with every event of the scheduler's "all" topic (worker arrivals, losses).

    A client can hold one subscription per topic, and several runtimes may share a client:
    one subscription per client fans out to all of them.
    """
    with _ALL_LOCK:
        subs = _ALL.get(client.id)
        if subs is None:
            subs = _ALL[client.id] = []
            cid = client.id

            def fan_out(event: Any) -> None:
                for f in list(_ALL.get(cid, ())):
                    f(event)

            client.subscribe_topic("all", fan_out)
        subs.append(fn)


def unlisten_all(client: Any, fn: Callable[[Any], None]) -> None:
    with _ALL_LOCK:
        subs = _ALL.get(client.id, [])
        if fn in subs:
            subs.remove(fn)
        if not subs and client.id in _ALL:
            del _ALL[client.id]
            with contextlib.suppress(Exception):
                client.unsubscribe_topic("all")
