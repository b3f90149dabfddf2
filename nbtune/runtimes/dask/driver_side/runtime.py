"""The Dask runtime: the engine's commands carried out on a real Dask cluster.

One background *driver* thread owns the :class:`~nbtune.engine.Engine`. It takes
everything that happens from one :class:`~.inbox.Inbox`, in arrival order (trial
messages streamed by the workers over direct links, worker arrivals and losses,
launches that failed, events a person submits), routes each item (worker arrivals
and losses to :class:`~.membership.Membership`, trial messages and failed launches to
the experiment's :class:`~.driver.RunDriver`), calls ``engine.handle`` once on the
batch and hands the commands to the driver: a Launch becomes one direct call per rank
to the worker owning each GPU (:mod:`.handlers`, :mod:`.rank_runner`); Stop, Pause and
Resize a control message to each rank, which leaves at its next ``report``; after
Finish the experiment is done once the last processes have left. ``ExperimentStarted``
says which resizes restart a loop with no checkpoint (hint ``"resize_restarts"``).

Faults: a trial that raises becomes ``TrialFailed(error=traceback)``; a dead worker
becomes ``TrialFailed(worker_lost=True)`` for each trial on it followed by
``ResourcesChanged``; one past ``trial_memory_limit`` (or killed) ``out_of_memory=True``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pandas as pd

from nbtune.core import events as ev
from nbtune.runtimes.dask import checkpoints as ck
from nbtune.runtimes.dask.dask_page import Publisher, page_link
from nbtune.runtimes.dask.driver_side import worker_setup as ws
from nbtune.runtimes.dask.driver_side.cluster import (
    Inventory,
    close_cluster,
    connect,
    listen_all,
    local_worker_count,
    unlisten_all,
)
from nbtune.runtimes.dask.driver_side.driver import RunDriver
from nbtune.runtimes.dask.driver_side.execution_mode import (
    ExecutionChoice,
    check_execution,
    check_thread_limits,
    for_experiment,
)
from nbtune.runtimes.dask.driver_side.fused_job import FusedUnits
from nbtune.runtimes.dask.driver_side.inbox import Inbox, route_batch
from nbtune.runtimes.dask.driver_side.jobs import (
    RunSettings,
    check_signature,
    pickled,
    resize_restarts,
)
from nbtune.runtimes.dask.driver_side.kernel_slot import FIRST_REPORT_WAIT, KernelSlot, usable
from nbtune.runtimes.dask.driver_side.links import WorkerLinks
from nbtune.runtimes.dask.driver_side.membership import Membership
from nbtune.runtimes.dask.driver_side.runs import Run, WallClock, check_memory_limit, check_timeout
from nbtune.runtimes.dask.driver_side.worker_setup import tolerate_lost_workers as tolerant
from nbtune.runtimes.dask.forkserver_side.forkserver import DEFAULT_PRELOAD, ForkServer
from nbtune.runtimes.runtime_protocol import check_trainable

if TYPE_CHECKING:
    from nbtune.engine.engine import Engine

__all__ = ["DaskRuntime", "DaskRuntimeError", "WallClock"]

log = logging.getLogger("nbtune.dask")


class DaskRuntimeError(RuntimeError):
    """The driver thread stopped on an error (shown with its cause)."""


class DaskRuntime:
    """Run training functions ``train(config, trial)`` on a Dask cluster.

    ``cluster``: None (start a local cluster: dask-cuda's ``LocalCUDACluster``
    when NVML reports GPUs, else a ``LocalCluster`` whose workers each stand
    for one GPU), a scheduler address, a ``distributed.Client`` or a Cluster.
    ``gpus`` forces GPU mode on or off (None: ask NVML). ``checkpoint_dir``
    holds ``trial-<id>/budget-<step>.pt`` files (default: a new temporary
    directory). ``trial_memory_limit`` (bytes or "2GB") fails a trial whose
    processes grow past it with ``out_of_memory``; ``trial_timeout`` (seconds)
    kills and fails a launch still running that long after it started (a hung
    trial). ``security`` (``distributed.security.Security``) and
    ``connect_timeout`` are for a remote scheduler. ``warm_processes`` trial
    processes per worker are kept started with ``preload`` imported (on a local
    CPU cluster, forked from one process that imported it once: .forkserver);
    ``reuse_processes`` (default: on CPU yes, on GPU no) lets a process that ended a
    trial cleanly run the next one: imports are paid once (on a GPU the CUDA context too,
    so it serves only trials of its GPU and MPS share), but module globals the training
    function sets persist. ``gpu_speeds``: relative speeds by GPU name.
    ``execution``: a trial runs in a ``"process"``, a ``"thread"`` of its worker (stopped only
    at a report) or ``"auto"``: threads where steps are tiny, measured (:mod:`.execution_mode`).
    It runs experiments one after another on one cluster and its warm processes; a cluster
    it started ends with an experiment unless ``keep=True`` (then on :meth:`close`).
    ``kernel_slot``: on a local CPU cluster it starts, the calling process is one of the
    ``n_workers`` and runs trials in threads (:mod:`.kernel_slot`): ``start`` returns at once
    and the first trial trains while the other workers start.

    The keywords also come grouped, as :class:`~.dask_options.DaskClusterOptions` and
    :class:`~.dask_options.DaskTrialOptions`, which unpack into them:
    ``DaskRuntime(**DaskClusterOptions(n_workers=4), **DaskTrialOptions(warm_processes=4))``.
    """

    name = "dask"
    virtual_clock = False
    keeps_checkpoints = True
    live_workers = True
    time_sliced_gpus = property(lambda self: self.gpus is False)  # CPU stand-ins (.profiler)

    def __init__(
        self,
        cluster: Any = None,
        *,
        gpus: bool | None = None, n_workers: int | None = None,
        threads_per_worker: int = 1, host: str = "127.0.0.1",
        dashboard_address: str | None = ":0",
        memory_limit: Any = "auto",
        checkpoint_dir: str | Path | None = None,
        sample_interval: float = 1.0,
        trial_memory_limit: int | str | None = None,
        trial_timeout: float | None = None,
        security: Any = None, connect_timeout: float = 30.0,
        warm_processes: int = 2, preload: tuple[str, ...] = DEFAULT_PRELOAD,
        mps: bool | None = None, reuse_processes: bool | None = None,
        shutdown_grace: float = 30.0,
        profiler: Any = None, execution: str = "auto",
        keep: bool = False, gpu_speeds: dict[str, float] | None = None,
        kernel_slot: bool = False,
    ) -> None:
        if threads_per_worker < 1:
            raise ValueError(f"threads_per_worker must be >= 1, got {threads_per_worker}")
        if n_workers is not None and n_workers < 1:
            raise ValueError(f"n_workers must be >= 1 or None, got {n_workers}")
        if not sample_interval > 0:
            raise ValueError(f"sample_interval must be > 0 seconds, got {sample_interval}")
        if warm_processes < 0:
            raise ValueError(f"warm_processes must be >= 0, got {warm_processes}")
        self.cluster_arg, self.gpu_speeds = cluster, Inventory.check_speeds(gpu_speeds)
        self.gpus, self.n_workers, self.threads_per_worker = gpus, n_workers, int(threads_per_worker)
        self.host, self.dashboard_address, self.memory_limit = host, dashboard_address, memory_limit
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.sample_interval = float(sample_interval)
        self.trial_memory_limit, self.trial_timeout = (check_memory_limit(trial_memory_limit),
                                                       check_timeout(trial_timeout))
        self.security, self.connect_timeout = security, float(connect_timeout)
        self.warm_processes, self.preload = int(warm_processes), tuple(preload)
        self.mps, self.reuse_processes = mps, reuse_processes
        self.shutdown_grace = float(shutdown_grace)
        self.profiler = profiler  # measures c, d, α, β, ε, demands (nbtune.runtimes.profiler)
        self.execution = check_execution(execution)
        self.process_overhead: float | None = None  # s per report, measured once (.overhead)
        #: keep a cluster this runtime started up after an experiment, for the next one
        self.keep = bool(keep)
        #: this process is one of the workers, running trials in threads from the start, where
        #: the runtime starts a local CPU cluster (.kernel_slot)
        self.kernel_slot = bool(kernel_slot)
        self.client: Any = None
        self.inventory: Inventory | None = None
        self._cluster: Any = None
        self._forks: ForkServer | None = None  # a local CPU cluster's (.forkserver)
        #: starts the cluster while the kernel slot runs the first trials (:meth:`_connect_later`)
        self._connector: threading.Thread | None = None
        #: the cluster was started one worker short, for the kernel slot (:meth:`connect`)
        self._sized_for_kernel = False
        self._owns_client = False
        self._run_ids = itertools.count(1)
        self._closed, self._experiments = False, 0
        self._own_ckpt = checkpoint_dir is None
        self._new_experiment()

    def _new_experiment(self) -> None:
        """Per-experiment state: a runtime runs experiments one after another on one cluster."""
        self._inbox = Inbox()
        self._engine: Engine | None = None
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._halt = threading.Event()
        self._error: BaseException | None = None
        self._driver: RunDriver | None = None  # owns the experiment's runs (.driver)
        self._members: Membership | None = None
        self._topic = f"nbtune-{uuid.uuid4().hex[:12]}"
        self._sampler_name: str | None = None
        self._links: WorkerLinks | None = None
        self._kernel: KernelSlot | None = None
        self._clock = WallClock()
        self._page = Publisher()  # the Dask dashboard's nbtune page (dask_page)
        #: running placements after the driver's last batch, republished whole (:meth:`_drive`)
        self._placed: Mapping[int, tuple[tuple[int, float], ...]] = MappingProxyType({})

    # ----------------------------------------------------------- Runtime API
    @property
    def clock(self) -> WallClock:
        return self._clock

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def drives(self, engine: Engine) -> bool:
        """The driver thread may handle ``engine``: it is this runtime's running experiment's."""
        return self._engine is engine and not self._done.is_set()

    @property
    def runs(self) -> Mapping[int, Run]:
        """The experiment's live runs (process groups) by trial id, a fused unit's under a
        negative key; read-only. The driver thread changes it: copy it to read elsewhere."""
        return MappingProxyType(self._driver.runs if self._driver is not None else {})

    @property
    def engine(self) -> Engine | None:
        """The engine of the experiment attached last (None before the first one). Only the
        driver thread changes it: read its plain fields elsewhere, never iterate its
        mappings while the experiment runs."""
        return self._engine

    @property
    def dask_cluster(self) -> Any:
        """The Dask cluster object this runtime started (None when it joined one)."""
        return self._cluster

    @property
    def ended(self) -> threading.Event:
        """Set once the current experiment is over (:attr:`done`), for a thread to wait on."""
        return self._done

    closed = property(lambda self: self._closed, doc="Closed: make a new runtime to run more.")
    busy = property(lambda self: self._engine is not None and not self.done,
                    doc="An experiment is attached and has not ended.")

    def placements(self) -> Mapping[int, tuple[tuple[int, float], ...]]:
        """The running placements (trial id -> (gpu id, share)...) after the driver's last
        batch: a snapshot it published, safe to read from any thread."""
        return self._placed

    @property
    def finishing(self) -> bool:
        """The engine said Finish: the runs are ending (within ``shutdown_grace``)."""
        return self._driver is not None and self._driver.finishing

    @property
    def checkpoints(self) -> Mapping[int, tuple[float, str]]:
        """Latest checkpoint per trial, ``trial_id -> (step, path)``, as the trials wrote them."""
        return MappingProxyType(self._driver.checkpoints if self._driver is not None else {})

    @property
    def dashboard_link(self) -> str | None:
        return getattr(self.client, "dashboard_link", None)

    @property
    def trials_page_link(self) -> str | None:
        """The nbtune page on the Dask dashboard, where the scheduler serves it (dask_page)."""
        return page_link(self.client) if self.client is not None else None

    def connect(self) -> DaskRuntime:
        """Start or join the cluster now (``start`` does it when needed)."""
        if self.client is not None:
            return self
        from nbtune.runtimes.dask import gpu

        gpus = self.gpus
        if gpus is None and self.cluster_arg is None:
            gpus = gpu.nvml_gpu_count() > 0
        self._forks, early = ws.local_cpu_start(  # torch imported while the cluster starts
            self.cluster_arg, gpus, self.warm_processes, self.preload)
        n_workers = self.n_workers
        self._sized_for_kernel = self._kernel_slot_applies(gpus)
        if self._sized_for_kernel:
            n_workers = self._local_workers() - 1  # the kernel is one of them
        try:
            self.client, self._cluster, self._owns_client = connect(
                self.cluster_arg, gpus=bool(gpus), n_workers=n_workers,
                threads_per_worker=self.threads_per_worker, host=self.host,
                dashboard_address=self.dashboard_address, memory_limit=self.memory_limit,
                security=self.security, timeout=self.connect_timeout, plugins=early)
            self.gpus, self.mps, inventory = ws.prepare_workers(
                self.client, gpus, self.mps, self.warm_processes, self.preload, self.gpu_speeds,
                fork_server=self._forks and self._forks.address)
            if self.inventory is None:  # else the kernel slot's, which its workers join
                self.inventory = inventory
        except BaseException:
            self._shutdown_cluster()
            self.client = None
            raise
        return self

    def _local_workers(self) -> int:
        """How many workers a local CPU cluster this runtime starts has (the kernel slot
        counts as one)."""
        return local_worker_count(self.n_workers, self.threads_per_worker)

    def _kernel_slot_applies(self, gpus: bool | None) -> bool:
        return self.kernel_slot and usable(
            own_cluster=self.cluster_arg is None and (self.client is None or self._cluster
                                                      is not None),
            gpus=gpus, execution=self.execution, n_workers=self._local_workers(),
            trial_timeout=self.trial_timeout, memory_limit=self.trial_memory_limit)

    def _worker_plugins(self) -> list[Any]:  # in the order they must run on every worker
        return ws.worker_plugins(self.gpus, self.mps, self.warm_processes, self.preload)

    def start(self, engine: Engine, trainable: Any) -> None:
        """Connect, then run the experiment in a background thread; returns at once."""
        check_trainable(trainable, self)
        check_signature(trainable)
        check_thread_limits(self.execution, gpus=bool(self.gpus), trial_timeout=self.trial_timeout,
                            memory_limit=self.trial_memory_limit)  # before anything starts
        if self._closed:
            raise RuntimeError("this DaskRuntime is closed (a cluster it starts ends with its "
                               "experiment): make a new one, with keep=True to run several")
        if self._engine is not None:
            if not self._done.is_set():
                raise RuntimeError("this DaskRuntime is running an experiment; wait() for it "
                                   "to end before starting the next one")
            self._release_experiment()  # the last one's subscriptions (kept until now)
            self._new_experiment()  # the cluster and its warm processes stay up
            if self._own_ckpt:
                self.checkpoint_dir = None  # trial ids start again at 0: a fresh directory
            elif self.checkpoint_dir is not None:
                self.checkpoint_dir = Path(self.checkpoint_dir) / f"experiment-{self._experiments}"
        self._experiments += 1
        from nbtune.runtimes.dask.trial_side.trial_api import uses_checkpoints
        from nbtune.runtimes.profiler import attach_profiler

        fn, checkpointing = pickled(trainable), uses_checkpoints(trainable)
        kernel = self._new_kernel_slot(engine)
        cold = kernel is not None and self.client is None  # trials start before the cluster
        if cold:
            from nbtune.runtimes.dask.driver_side.main_guard import check_main_guard

            check_main_guard()  # on the caller's thread: its stack shows an unguarded script
            self.gpus = False
            self.inventory = Inventory(False, self.gpu_speeds)
            execution = ExecutionChoice(self.execution)  # a first experiment: processes
        else:
            ws.preload_trainable(self.connect().client, trainable)  # modules, in warm processes
            execution = for_experiment(self)  # process or thread per launch (.execution_mode)
        assert self.inventory is not None
        self.inventory.set_local({} if kernel is None else kernel.probes(),
                                 () if kernel is None else kernel.interim)
        self._engine, self._kernel = engine, kernel
        self.checkpoint_dir = ck.experiment_dir(self.checkpoint_dir)
        self._links = WorkerLinks(None, self._topic, self._inbox, kernel)
        reuse = not self.gpus if self.reuse_processes is None else self.reuse_processes
        settings = RunSettings(
            self._topic, fn, self.checkpoint_dir, checkpointing, bool(self.gpus), bool(self.mps),
            bool(reuse), self.trial_memory_limit, self.trial_timeout, self.shutdown_grace, execution)
        self._driver = RunDriver(engine, self._clock, self.inventory, self._links, settings,
                                 self._run_ids, FusedUnits)
        if not cold:
            self._attach_cluster(opened=True)
        attach_profiler(self, engine, trainable)
        self._clock.start()
        hints = {"resize_restarts": resize_restarts(settings)}  # a replay must decide alike
        self._inbox.put(("event", ev.ExperimentStarted(0.0, self.inventory.spec(), hints)))
        self._thread = threading.Thread(target=self._drive, name="nbtune-dask-driver",
                                        daemon=True)
        self._thread.start()
        if cold and (self._connector is None or not self._connector.is_alive()):
            # (one still starting the cluster from the last experiment tells this one)
            self._connector = threading.Thread(target=self._connect_later,
                                               args=(trainable, kernel), daemon=True,
                                               name="nbtune-dask-connect")
            self._connector.start()

    def _new_kernel_slot(self, engine: Engine) -> KernelSlot | None:
        """The experiment's kernel slot, where it applies (:mod:`.kernel_slot`; not for fused
        units, which run in processes), else None."""
        if not self.kernel_slot or engine.fusion is not None:
            return None
        if self.client is not None and not self._sized_for_kernel:
            return None  # its cluster has a worker per core already
        gpus = self.gpus
        if gpus is None and self.cluster_arg is None and self.client is None:
            # no NVIDIA driver, no GPU: said without importing NVML's module (`distributed`)
            gpus = os.path.exists("/proc/driver/nvidia") and _nvml_gpus() > 0
        if not self._kernel_slot_applies(gpus):
            return None
        # no cluster yet: the kernel also runs the lanes of the workers still to come
        interim = self._local_workers() - 1 if self.client is None else 0
        return KernelSlot(self.host, self._inbox.put, self.threads_per_worker,
                          self.sample_interval, interim=interim)

    def _connect_later(self, trainable: Any, kernel: KernelSlot) -> None:
        """Start the cluster once the kernel slot's first trial has reported (within
        :data:`~.kernel_slot.FIRST_REPORT_WAIT` s); its workers join the experiment as they
        come (``("cluster", error)`` on the inbox of the experiment running when it is up)."""
        kernel.first_report.wait(FIRST_REPORT_WAIT)
        try:
            if self._closed:
                return
            self.connect()
            if self._closed:  # closed while the cluster started: nothing may outlive close()
                self._shutdown_cluster()
                return
            ws.preload_trainable(self.client, trainable)
        except BaseException as exc:  # noqa: BLE001 - the driver thread raises it
            self._inbox.put(("cluster", exc))
            return
        self._inbox.put(("cluster", None))

    def _attach_cluster(self, *, opened: bool = False) -> None:
        """Listen to the cluster and hand its workers to the experiment.

        ``opened``: at :meth:`start` on a cluster that is up (the workers become GPUs now,
        their streams opened before the first launch); otherwise on the driver thread once
        :meth:`_connect_later` has it, and they join the way any new worker does
        (:class:`~.membership.Membership`: stream, probe, ``ResourcesChanged``).
        """
        from nbtune.runtimes.dask.worker_side.sampling import UtilizationSampler

        assert self._links is not None and self._driver is not None and self.inventory
        client = self.client
        client.subscribe_topic(self._topic, self._inbox.on_topic)
        listen_all(client, self._inbox.on_all)
        self._links.attach(client)
        self._members = Membership(client, self.inventory, self._links,
                                   self._driver.end_runs_on)
        sampler = UtilizationSampler(self._topic, self.sample_interval, bool(self.gpus))
        self._sampler_name = sampler.name
        tolerant(lambda: client.register_plugin(sampler, name=sampler.name), "sampler")
        if opened:
            self.inventory.refresh(client)  # a worker that came or went before we listened
            workers = sorted({s.worker for s in self.inventory.slots.values()
                              if s.worker not in self.inventory.local})
            self._links.open_all(workers)  # a worker it cannot reach goes through the scheduler
            return
        for_experiment(self)  # measures the process overhead for the next experiment
        for address in client.scheduler_info().get("workers", {}):
            self._inbox.put(("joined", address))

    def _drive(self) -> None:
        """The driver thread: the one owner of the engine while the experiment runs.

        Everything that happens reaches it through the :class:`~.inbox.Inbox`; it routes
        each item (worker arrivals and losses to membership, trial messages to the run
        driver), calls ``engine.handle`` once on the batch and hands the commands to the
        run driver. After each batch it publishes what other threads may read as new
        immutable objects (:meth:`placements`), never the engine's own mappings, which
        only this thread changes. It ends on Finish, :meth:`close` or a failure.
        """
        engine, driver = self._engine, self._driver
        assert engine is not None and driver is not None
        try:
            while not self._halt.is_set():
                items = self._inbox.batch()
                if any(kind == "cluster" for kind, _ in items):
                    items = self._cluster_up(items)
                events = driver.take_pending()
                if items and log.isEnabledFor(logging.DEBUG):
                    log.debug("t=%.3f inbox %s", self._clock.now(), [k for k, _ in items])
                # to membership or the run driver (.inbox), stamped with one time
                events.extend(route_batch(items, self._members, driver, self._clock))
                driver.enforce_deadlines()
                if events:
                    driver.execute(engine.handle(*events))
                    # a new one: readers keep theirs
                    self._placed = MappingProxyType(dict(engine.running))
                    # the engine just changed: the Dask dashboard's page may show it
                    self._page.tick(self.client, engine, self.inventory, self._topic,
                                    self._clock.now(), force=engine.done)
                if driver.finished:
                    break
        except BaseException as exc:  # surfaced by wait(); the trials must not outlive it
            log.exception("nbtune Dask driver failed")
            self._error = exc
            if self._links is not None:
                driver.kill_all(f"driver error: {exc!r}")
        finally:
            starts = self._cluster is not None or self._connector is not None
            if starts and not self._halt.is_set() and not self.keep:
                self.close()  # a cluster we started ends with its experiment; else the
            # subscriptions stay until the next experiment or close() (releasing them here
            # raced the last messages of the ending runs)
            if self._kernel is not None:
                self._kernel.close()
            self._done.set()

    def _cluster_up(self, items: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        """The cluster :meth:`_connect_later` started is up (or failed: raised here, on the
        driver thread, which ends the experiment with it); the other items, in order."""
        for kind, error in items:
            if kind != "cluster":
                continue
            if error is not None:
                raise DaskRuntimeError(f"the local Dask cluster did not start: {error!r}"
                                       ) from error
            attached = self._members is not None  # start() found the cluster up already
            if not attached and not (self._driver is not None and self._driver.finishing):
                self._attach_cluster()
        return [it for it in items if it[0] != "cluster"]

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the experiment is over (True) or ``timeout`` passes (False)."""
        if self._thread is None:
            raise RuntimeError("the runtime has not started an experiment")
        finished = self._done.wait(timeout)
        if self._error is not None:
            raise DaskRuntimeError(f"the Dask runtime stopped: {self._error!r}") from self._error
        return finished

    def submit(self, *events: ev.Event) -> None:
        """Hand outside events to the engine (thread-safe; handled in arrival order)."""
        for e in events:
            self._inbox.put(("event", e))

    def utilization(self, engine: Engine) -> pd.DataFrame:
        """Measured per-GPU utilization: columns time, gpu_id, util, memory_gb."""
        return pd.DataFrame(list(engine.utilization),
                            columns=["time", "gpu_id", "util", "memory_gb"])

    def latest_checkpoint(self, trial_id: int) -> tuple[float, str] | None:
        """``(step, path)`` of the trial's newest checkpoint, for a store to record."""
        if trial_id in self.checkpoints:
            return self.checkpoints[trial_id]
        if self.checkpoint_dir is None:
            return None
        found = ck.latest_checkpoint(self.checkpoint_dir, trial_id)
        return None if found is None else (found[0], str(found[1]))

    def close(self) -> None:
        """Stop the driver, kill live trial processes, release what this runtime created."""
        if self._closed:
            return
        self._closed = True
        self._halt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._release_experiment()
        try:
            self._shutdown_cluster()
        finally:
            self._done.set()

    def _release_experiment(self) -> None:
        """Kill the experiment's live trial processes, drop its subscriptions and streams."""
        if self._links is not None:
            if self._driver is not None:  # the kernel slot's trials too, with no cluster yet
                self._driver.kill_all("the runtime was closed")
            self._links.close()
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.unsubscribe_topic(self._topic)
            unlisten_all(self.client, self._inbox.on_all)
            if self._sampler_name is not None:
                with contextlib.suppress(Exception):
                    self.client.unregister_worker_plugin(self._sampler_name)
                self._sampler_name = None  # released once: close() after an experiment's end
        if self._driver is not None:
            self._driver.runs.clear()
            self._driver.by_id.clear()

    def _shutdown_cluster(self) -> None:
        if self.client is not None and self._owns_client:
            self.client.close()
        if self._cluster is not None:
            close_cluster(self._cluster)
            self._cluster = None
        if self._forks is not None:
            self._forks.close()
            self._forks = None

    def __enter__(self) -> DaskRuntime:
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        n = len(self.inventory.slots) if self.inventory else 0
        return f"<DaskRuntime {'gpu' if self.gpus else 'cpu'} {n} slots, {len(self.runs)} live>"


def _nvml_gpus() -> int:
    from nbtune.runtimes.dask import gpu

    return gpu.nvml_gpu_count()
