"""The Dask runtime: the engine's commands carried out on a real Dask cluster.

One background *driver* thread owns the :class:`~nbtune.engine.Engine`. It
takes everything that happens from one inbox, in arrival order (trial
messages streamed by the workers over direct links, worker arrivals and
losses from the scheduler's ``all`` topic, launches that failed, events a
person submits), turns the batch into engine events, calls ``engine.handle`` once
and carries out the commands:

* Launch: one direct call per rank to the worker owning each GPU of the
  placement, which runs it on a thread of its own (see :mod:`.handlers` and
  :mod:`.executor`); a trial whose previous process is still writing its last
  checkpoint is launched when that process exits.
* Stop / Pause / Resize: a control message to each rank; the trial leaves at
  its next ``report`` boundary. After a resize the driver relaunches it on the
  engine's new placement from its checkpoint.
* Finish: wait for the last processes to leave, then the experiment is done.

Faults: a trial that raises becomes ``TrialFailed(error=traceback)``; a dead
worker becomes ``TrialFailed(worker_lost=True)`` for each trial on it followed
by ``ResourcesChanged``; a trial past ``trial_memory_limit`` (or killed by
the kernel) fails with ``out_of_memory=True``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import tempfile
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from nbtune.core import events as ev
from nbtune.core.commands import Launch
from nbtune.runtimes.base import check_trainable
from nbtune.runtimes.dask import checkpoints as ck
from nbtune.runtimes.dask.cluster import Inventory, close_cluster, connect, listen_all, unlisten_all
from nbtune.runtimes.dask.dask_page import Publisher, page_link
from nbtune.runtimes.dask.fused_job import FusedDriver, FusedState
from nbtune.runtimes.dask.links import WorkerLinks
from nbtune.runtimes.dask.membership import Membership, scheduler_item
from nbtune.runtimes.dask.runs import Run, WallClock, check_timeout
from nbtune.runtimes.dask.trainable import check_signature, pickled
from nbtune.runtimes.dask.worker_setup import preload_trainable, prepare_workers, worker_plugins
from nbtune.runtimes.dask.worker_setup import tolerate_lost_workers as tolerant

if TYPE_CHECKING:
    from nbtune.engine.engine import Engine

__all__ = ["DaskRuntime", "DaskRuntimeError", "WallClock"]

log = logging.getLogger("nbtune.dask")


class DaskRuntimeError(RuntimeError):
    """The driver thread stopped on an error (shown with its cause)."""


class DaskRuntime(FusedDriver):
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
    processes per worker are kept started with ``preload`` imported;
    ``reuse_processes`` (default: on CPU yes, on GPU no) lets a process that
    ended a trial cleanly run the next one: imports are paid once, but module
    globals the training function sets persist into the next trial (pass
    False for full isolation).
    A runtime runs any number of experiments, one after another, on the same
    cluster and warm processes. A cluster it started itself is shut down when
    an experiment ends unless ``keep=True`` (then on :meth:`close`, as
    :func:`shared_runtime`'s is at exit); a client or cluster it was given
    stays open.
    """

    name = "dask"
    virtual_clock = False
    keeps_checkpoints = True
    live_workers = True

    def __init__(
        self,
        cluster: Any = None,
        *,
        gpus: bool | None = None,
        n_workers: int | None = None,
        threads_per_worker: int = 1,
        host: str = "127.0.0.1",
        dashboard_address: str | None = ":0",
        memory_limit: Any = "auto",
        checkpoint_dir: str | Path | None = None,
        sample_interval: float = 1.0,
        trial_memory_limit: int | str | None = None,
        trial_timeout: float | None = None,
        security: Any = None,
        connect_timeout: float = 30.0,
        warm_processes: int = 2,
        preload: tuple[str, ...] = ("torch",),
        mps: bool | None = None,
        reuse_processes: bool | None = None,
        shutdown_grace: float = 30.0,
        profiler: Any = None,
        keep: bool = False,
    ) -> None:
        if threads_per_worker < 1:
            raise ValueError(f"threads_per_worker must be >= 1, got {threads_per_worker}")
        if n_workers is not None and n_workers < 1:
            raise ValueError(f"n_workers must be >= 1 or None, got {n_workers}")
        if not sample_interval > 0:
            raise ValueError(f"sample_interval must be > 0 seconds, got {sample_interval}")
        if warm_processes < 0:
            raise ValueError(f"warm_processes must be >= 0, got {warm_processes}")
        if isinstance(trial_memory_limit, str):
            from dask.utils import parse_bytes

            trial_memory_limit = parse_bytes(trial_memory_limit)
        if trial_memory_limit is not None and trial_memory_limit <= 0:
            raise ValueError(f"trial_memory_limit must be > 0, got {trial_memory_limit}")
        self.cluster_arg = cluster
        self.gpus = gpus
        self.n_workers = n_workers
        self.threads_per_worker = int(threads_per_worker)
        self.host = host
        self.dashboard_address = dashboard_address
        self.memory_limit = memory_limit
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.sample_interval = float(sample_interval)
        self.trial_memory_limit = trial_memory_limit
        self.trial_timeout = check_timeout(trial_timeout)
        self.security, self.connect_timeout = security, float(connect_timeout)
        self.warm_processes = int(warm_processes)
        self.preload = tuple(preload)
        self.mps = mps
        self.reuse_processes = reuse_processes
        self.shutdown_grace = float(shutdown_grace)
        self.profiler = profiler  # measures c, d, α, β, ε, demands (nbtune.runtimes.profiler)
        #: keep a cluster this runtime started up after an experiment, for the next one
        self.keep = bool(keep)
        #: latest checkpoint per trial, ``trial_id -> (step, path)``, as the trials wrote them
        self.checkpoints: dict[int, tuple[float, str]] = {}
        self.client: Any = None
        self.inventory: Inventory | None = None
        self._cluster: Any = None
        self._owns_client = False
        self._run_ids = itertools.count(1)
        self._closed = False
        self._experiments = 0
        self._own_ckpt = checkpoint_dir is None
        self._new_experiment()

    def _new_experiment(self) -> None:
        """Per-experiment state: a runtime runs experiments one after another on one cluster."""
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._local: list[ev.Event] = []
        self._engine: Engine | None = None
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._halt = threading.Event()
        self._error: BaseException | None = None
        self._runs: dict[int, Run] = {}
        self._by_id: dict[int, Run] = {}
        self._deferred: dict[int, Launch] = {}
        self._clones: dict[int, list[Launch]] = {}
        self._fusion = FusedState()  # fused units' runs (tune(fusion=F))
        self._finish_at: float | None = None
        self._members: Membership | None = None  # type: ignore[assignment]
        self._topic = f"nbtune-{uuid.uuid4().hex[:12]}"
        self._sampler_name: str | None = None
        self._fn: bytes = b""
        self._checkpointing = False
        self._links: WorkerLinks | None = None  # type: ignore[assignment]
        self._clock = WallClock()
        self._page = Publisher()  # the Dask dashboard's nbtune page (dask_page)

    # ----------------------------------------------------------- Runtime API
    @property
    def clock(self) -> WallClock:
        return self._clock

    @property
    def done(self) -> bool:
        return self._done.is_set()

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
        self.client, self._cluster, self._owns_client = connect(
            self.cluster_arg, gpus=bool(gpus), n_workers=self.n_workers,
            threads_per_worker=self.threads_per_worker, host=self.host,
            dashboard_address=self.dashboard_address, memory_limit=self.memory_limit,
            security=self.security, timeout=self.connect_timeout)
        try:
            self.gpus, self.mps, self.inventory = prepare_workers(
                self.client, gpus, self.mps, self.warm_processes, self.preload)
        except BaseException:
            self._shutdown_cluster()
            self.client = None
            raise
        return self

    def _worker_plugins(self) -> list[Any]:
        """The worker plugins, in the order they must run on every worker."""
        return worker_plugins(self.gpus, self.mps, self.warm_processes, self.preload)

    def start(self, engine: Engine, trainable: Any) -> None:
        """Connect, then run the experiment in a background thread; returns at once."""
        check_trainable(trainable, self)
        check_signature(trainable)
        if self._closed:
            raise RuntimeError("this DaskRuntime is closed (a cluster it starts ends with its "
                               "experiment): make a new one, with keep=True to run several")
        if self._engine is not None:
            if not self._done.is_set():
                raise RuntimeError("this DaskRuntime is running an experiment; wait() for it "
                                   "to end before starting the next one")
            self._release_experiment()  # the last one's subscriptions (kept until now)
            self._new_experiment()  # the cluster and its warm processes stay up
            self.checkpoints = {}
            if self._own_ckpt:
                self.checkpoint_dir = None  # trial ids start again at 0: a fresh directory
            elif self.checkpoint_dir is not None:
                self.checkpoint_dir = Path(self.checkpoint_dir) / f"experiment-{self._experiments}"
        self._experiments += 1
        from nbtune.runtimes.dask.sampling import UtilizationSampler
        from nbtune.runtimes.dask.trial_api import uses_checkpoints
        from nbtune.runtimes.profiler import attach_profiler

        self._fn = pickled(trainable)
        self._checkpointing = uses_checkpoints(trainable)
        preload_trainable(self.connect().client, trainable)  # its modules, in warm processes
        assert self.inventory is not None
        self._engine = engine
        if self.checkpoint_dir is None:
            self.checkpoint_dir = Path(tempfile.mkdtemp(prefix="nbtune-ckpt-"))
        self.checkpoint_dir = Path(self.checkpoint_dir)  # a store may have set a str
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        self.client.subscribe_topic(self._topic, self._on_topic)
        listen_all(self.client, self._on_all)
        self.inventory.refresh(self.client)  # a worker that came or went before we listened
        self._links = WorkerLinks(self.client, self._topic, self._inbox)
        workers = sorted({s.worker for s in self.inventory.slots.values()})
        self._links.open_all(workers)  # a worker it cannot reach goes through the scheduler
        self._members = Membership(self.client, self.inventory, self._links, self._end_runs_on)
        sampler = UtilizationSampler(self._topic, self.sample_interval, bool(self.gpus))
        self._sampler_name = sampler.name
        tolerant(lambda: self.client.register_plugin(sampler, name=sampler.name), "sampler")
        attach_profiler(self, engine, trainable)
        self._clock.start()
        self._inbox.put(("event", ev.ExperimentStarted(0.0, self.inventory.spec())))
        self._thread = threading.Thread(target=self._loop, name="nbtune-dask-driver", daemon=True)
        self._thread.start()

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
        if self.client is not None and self._links is not None:
            for run in list(self._runs.values()):
                self._signal(run, {"k": "kill", "reason": "the runtime was closed"})
            self._links.close()
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.unsubscribe_topic(self._topic)
            unlisten_all(self.client, self._on_all)
            if self._sampler_name is not None:
                with contextlib.suppress(Exception):
                    self.client.unregister_worker_plugin(self._sampler_name)
                self._sampler_name = None  # released once: close() after an experiment's end
        self._runs.clear()
        self._by_id.clear()

    def _shutdown_cluster(self) -> None:
        if self.client is not None and self._owns_client:
            self.client.close()
        if self._cluster is not None:
            close_cluster(self._cluster)
            self._cluster = None

    def __enter__(self) -> DaskRuntime:
        return self.connect()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        n = len(self.inventory.slots) if self.inventory else 0
        return f"<DaskRuntime {'gpu' if self.gpus else 'cpu'} {n} slots, {len(self._runs)} live>"

    # -------------------------------------------------------------- inbox
    def _on_topic(self, event: Any) -> None:
        self._inbox.put(("msgs", event[1]))

    def _on_all(self, event: Any) -> None:
        item = scheduler_item(event)
        if item is not None:
            self._inbox.put(item)

    def _loop(self) -> None:
        engine = self._engine
        assert engine is not None
        try:
            while not self._halt.is_set():
                items: list[tuple[str, Any]] = []
                try:
                    items.append(self._inbox.get(timeout=0.05))
                    while len(items) < 2000:
                        items.append(self._inbox.get_nowait())
                except queue.Empty:
                    pass
                events, self._local = self._local, []
                if items and log.isEnabledFor(logging.DEBUG):
                    log.debug("t=%.3f inbox %s", self._clock.now(), [k for k, _ in items])
                for kind, payload in items:
                    events.extend(self._translate(kind, payload))
                events.extend(self._housekeeping())
                if events:
                    self._execute(engine.handle(*events))
                if self._finish_at is not None and not self._runs and not self._local:
                    break
        except BaseException as exc:  # surfaced by wait(); the trials must not outlive it
            log.exception("nbtune Dask driver failed")
            self._error = exc
            if self._links is not None:
                for run in list(self._runs.values()):
                    self._signal(run, {"k": "kill", "reason": f"driver error: {exc!r}"})
        finally:
            if self._cluster is not None and not self._halt.is_set() and not self.keep:
                self.close()  # a cluster we started ends with its experiment; else the
            # subscriptions stay until the next experiment or close() (releasing them here
            # raced the last messages of the ending runs)
            self._done.set()
