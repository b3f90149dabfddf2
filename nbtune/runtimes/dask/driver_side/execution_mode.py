"""Where a trial runs on its worker: a trial process (``"process"``), a thread (``"thread"``),
or whichever measurement says pays (``"auto"``, the default).

The decision (:func:`choose`) compares two measured numbers:

* ``overhead``: seconds the process path costs per report more than the
  thread path, measured once per runtime on a worker by :mod:`.overhead`
  when its first experiment has ended (so a runtime's first experiment runs
  every trial in a process; a notebook's next ones choose)
  (probe trials that report and wait for a verdict, as a trial at an ASHA rung
  does, run both ways, alternating; the launch is spread over the reports);
* ``work``: the median seconds a trial's loop works between two reports
  (:attr:`Trial._work <nbtune.runtimes.dask.trial_side.trial_api.Trial>`: from the end
  of one ``report`` to the start of the next, so waiting for verdicts is not
  counted), from the reports of the first trials, which run in processes.

Thread when ``overhead >= THRESHOLD * work`` (and every measured interval is
under ``MAX_INTERVAL``), else process. ``THRESHOLD = 0.25``: the process
boundary then costs at least a fifth of a trial's time, which is where it
"costs more than the work" in practice; below it, the isolation a process
gives (a kill that always works, ``trial_memory_limit``, a crash that cannot
take the worker) is worth more than the saving, and a normal trial (steps of
a tenth of a second and more) never leaves its process. ``MAX_INTERVAL``
(1 s): a thread cannot be killed, only stopped at a ``report``, so only a
loop that reports often may run in one. Until ``MIN_SAMPLES`` intervals are
measured, and where the overhead could not be measured, trials run in
processes. Multi-worker (DDP) trials, fused units and GPU runtimes always
use processes (a thread cannot have its own ``CUDA_VISIBLE_DEVICES``), and
``auto`` keeps processes where workers are threads of one process
(:func:`share_a_process`).
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbtune.runtimes.dask.protocol import Report

__all__ = ["EXECUTIONS", "THRESHOLD", "MAX_INTERVAL", "MIN_SAMPLES", "check_execution",
           "check_thread_limits", "choose", "ExecutionChoice", "share_a_process",
           "for_experiment"]

EXECUTIONS = ("auto", "process", "thread")
THRESHOLD = 0.25  #: thread when the process path's overhead per report >= this x the work
MAX_INTERVAL = 1.0  #: seconds: a loop working longer between reports stays in a process
MIN_SAMPLES = 3  #: work intervals measured before auto may choose a thread
WINDOW = 64  #: the latest work intervals the median is taken over


def check_execution(value: Any) -> str:
    """``execution`` as given by a user: one of :data:`EXECUTIONS`, else ValueError at once."""
    if value not in EXECUTIONS:
        raise ValueError(f"execution must be one of {', '.join(map(repr, EXECUTIONS))} "
                         f"(where a trial runs on its worker), got {value!r}")
    return str(value)


def check_thread_limits(execution: str, *, gpus: bool, trial_timeout: float | None,
                        memory_limit: int | None) -> None:
    """``execution="thread"`` with what only a process can do: ValueError before anything runs."""
    if execution != "thread":
        return
    why = ("GPU trials (each process sees its own GPU)" if gpus else
           "trial_timeout (a thread cannot be killed)" if trial_timeout is not None else
           "trial_memory_limit (a thread's memory cannot be told from its worker's)"
           if memory_limit is not None else None)
    if why is not None:
        raise ValueError(f"execution='thread' cannot enforce {why}; use execution='process' "
                         "or 'auto'")


def choose(work: list[float], overhead: float | None, *, threshold: float = THRESHOLD,
           max_interval: float = MAX_INTERVAL, min_samples: int = MIN_SAMPLES) -> str:
    """``"thread"`` or ``"process"`` from measured work intervals and per-report overhead (s).

    See the module docstring for why these inputs and this threshold.
    """
    if overhead is None or len(work) < min_samples or max(work) > max_interval:
        return "process"
    return "thread" if overhead >= threshold * statistics.median(work) else "process"


class ExecutionChoice:
    """The runtime's ``execution`` for one experiment: per launch, ``"process"`` or ``"thread"``.

    The driver hands it every report (:meth:`observe`); :func:`.jobs.rank_jobs`
    asks :meth:`mode` for each job. ``overhead`` is :mod:`.overhead`'s
    measurement (None: not measured, so ``auto`` keeps processes).
    """

    def __init__(self, execution: str = "process", overhead: float | None = None,
                 *, gpus: bool = False) -> None:
        self.execution = check_execution(execution)
        self.overhead = overhead
        self.gpus = gpus
        self.work: deque[float] = deque(maxlen=WINDOW)
        #: how many launches went each way (for the benchmark and the tests)
        self.launched = {"process": 0, "thread": 0}

    def observe(self, msg: Report) -> None:
        """A report from a trial: its work interval, when it says one."""
        if msg.work is not None:
            self.work.append(float(msg.work))

    def decided(self) -> str:
        """What ``auto`` would choose now (``execution`` itself when fixed)."""
        if self.execution != "auto":
            return self.execution
        if self.gpus:
            return "process"
        return choose(list(self.work), self.overhead)

    def mode(self, world_size: int = 1, fused: bool = False) -> str:
        """The mode for a job of a ``world_size``-rank (or fused) run launched now."""
        m = "process" if world_size > 1 or fused else self.decided()
        self.launched[m] += 1
        return m


def share_a_process(workers: dict[str, dict[str, Any]]) -> bool:
    """True when workers (``scheduler_info()["workers"]``) live in one process: ``inproc://``
    addresses, or one host and pid twice (where the scheduler reports pids).

    ``LocalCluster(processes=False)`` runs its workers as threads of one process:
    trial threads on all of them would take turns on one GIL, so ``auto`` keeps
    processes there (its measurements come from trial processes and would not show it).
    """
    if any(str(a).startswith("inproc://") for a in workers):  # in the client's own process
        return True
    pids = [(w.get("host"), w.get("pid")) for w in workers.values() if w.get("pid") is not None]
    return len(set(pids)) < len(pids)


def for_experiment(runtime: Any) -> ExecutionChoice:
    """The :class:`ExecutionChoice` of the experiment ``runtime`` (a DaskRuntime) starts now.

    Checked here, not in the constructor, because ``tune(trial_timeout=...)`` sets
    the timeout on a shared runtime per experiment. ``auto`` measures the process
    overhead once per runtime (:mod:`.overhead`, a fraction of a second, after the runtime's first
    experiment: the first runs every trial in a process), on
    a CPU runtime with no limit that needs a process; otherwise it keeps processes.
    """
    ex, gpus = runtime.execution, bool(runtime.gpus)
    timeout, memory = runtime.trial_timeout, runtime.trial_memory_limit
    check_thread_limits(ex, gpus=gpus, trial_timeout=timeout, memory_limit=memory)
    if ex != "auto" or gpus or timeout is not None or memory is not None:
        return ExecutionChoice("process" if ex == "auto" else ex, gpus=gpus)
    if share_a_process(runtime.client.scheduler_info().get("workers", {})):
        return ExecutionChoice("process")  # threads of every worker would share one GIL
    if runtime.process_overhead is None and runtime.inventory is not None:
        # measured once this experiment has ended, on a worker it left idle, for the next
        # experiment on this runtime: before the first trials it would delay start-up (it
        # needs an idle warm process), and beside them it would take theirs
        dask = [s.worker for s in runtime.inventory.slots.values()
                if s.worker not in runtime.inventory.local]  # not the kernel slot
        if not dask:
            return ExecutionChoice("auto", runtime.process_overhead)
        worker = min(dask)
        threading.Thread(target=_measure_after, args=(runtime, runtime.ended, worker),
                         daemon=True, name="nbtune-overhead").start()
    return ExecutionChoice("auto", runtime.process_overhead)


def _measure_after(runtime: Any, done: threading.Event, worker: str) -> None:
    from nbtune.runtimes.dask.worker_side.overhead import probe_overhead

    done.wait()
    if runtime.client is not None and not runtime.closed:
        runtime.process_overhead = probe_overhead(runtime.client, worker)
