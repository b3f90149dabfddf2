"""The runtime protocol: the only code that reads time and carries commands out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pandas as pd

    from nbtune.core.clock import Clock
    from nbtune.engine.engine import Engine

__all__ = ["Runtime", "check_trainable"]


@runtime_checkable
class Runtime(Protocol):
    """What the engine's callers may rely on; the capabilities say what else a runtime offers.

    Callers ask the capabilities instead of probing (``hasattr``, ``isinstance``):
    a new runtime states what it can do and every caller sees it at once.
    """

    name: str
    #: its clock can be wound on (``clock.advance_to``) and runs workload models, not code
    virtual_clock: bool
    #: trials write checkpoints under ``checkpoint_dir``; ``latest_checkpoint(trial_id)`` finds them
    keeps_checkpoints: bool
    #: trials run on worker processes that can come and go (a cluster to connect and close);
    #: such a runtime also has ``dashboard_link``: its cluster's dashboard URL, or None
    live_workers: bool

    @property
    def clock(self) -> Clock: ...

    def start(self, engine: Engine, trainable: Any) -> None:
        """Feed ``ExperimentStarted`` and begin carrying out the engine's commands."""
        ...

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the experiment is over (True) or ``timeout`` passes (False)."""
        ...

    @property
    def done(self) -> bool: ...

    def submit(self, *events: Any) -> None:
        """Hand outside events (a person stopping a trial) to the engine."""
        ...

    def drives(self, engine: Engine) -> bool:
        """Whether this runtime may call ``engine.handle`` now: from :meth:`start` until it
        let the engine go at the experiment's end. Before and after, no thread of the
        runtime changes the engine, so any thread may read it."""
        ...

    def utilization(self, engine: Engine) -> pd.DataFrame:
        """Per-GPU utilization over time: columns time, gpu_id, util, memory_gb."""
        ...


def check_trainable(trainable: Any, runtime: Runtime | type) -> None:
    """Fail early, saying what to pass, when ``trainable`` is not what ``runtime`` runs.

    ``runtime`` may be the class: the capabilities are class attributes, so a
    caller can check before it builds the runtime (the CLI, before a cluster starts).

    A runtime with a virtual clock runs workload models (it has no code to
    run); the others run training functions ``train(config, trial)``.
    """
    from nbtune.workloads.workload_protocol import WorkloadModel  # a lower layer, on demand

    model = isinstance(trainable, WorkloadModel)
    what = type(trainable).__name__
    if runtime.virtual_clock and not model:
        raise TypeError(
            "runtime='sim' needs a workload model: the simulator runs workload models "
            f"(nbtune.workloads.SyntheticWorkload, TraceWorkload), and the trainable is a {what}; "
            "to run a training function use runtime='dask' (--runtime dask)")
    if not runtime.virtual_clock and (model or not callable(trainable)):
        raise TypeError(
            f"runtime {runtime.name!r} runs training functions train(config, trial), and the "
            f"trainable is a {what}: run workload models with runtime='sim' (--runtime sim)")
