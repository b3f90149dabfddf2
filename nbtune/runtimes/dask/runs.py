"""What the Dask driver knows of one run (a process group training one trial) and its ranks.

Kept apart from :mod:`.driver` (the state machine that moves runs along) so
that both stay readable; :func:`rank_env` is the per-rank environment (CPU
threads by share, the visible GPU, the MPS thread percentage).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nbtune.core.resources import Placement
from nbtune.core.tolerance import EPS

if TYPE_CHECKING:
    from nbtune.runtimes.dask.cluster import Slot

__all__ = ["Run", "RunRank", "rank_env", "EPS"]


@dataclass
class RunRank:
    worker: str
    exited: bool = False


@dataclass
class Run:
    """One process group running one trial from ``start_step`` toward ``budget``."""

    trial_id: int
    run_id: int
    run_key: str
    config: dict[str, Any]
    placement: Placement
    start_step: float
    budget: float
    ranks: list[RunRank] = field(default_factory=list)
    cancelled: str | None = None  # "stop" | "pause" | "lost" | "killed" | "released"
    resize: bool = False
    last_step: float = 0.0
    started: bool = False
    error: dict[str, Any] | None = None
    #: its process waits in place at the segment's end (no checkpoint to resume from)
    held: bool = False


def rank_env(tid: int, slot: Slot, share: float, *, gpus: bool,
             mps: bool) -> tuple[int, dict[str, str]]:
    """Thread count and environment of one rank's process.

    CPU threads follow the share of the slot's cores (at least one), so
    packed CPU trials do not oversubscribe, and a CPU stand-in's process runs
    on the slot's own cores (``NBTUNE_CPU_CORES``). On GPUs the process sees only its
    GPU (by UUID); a packed rank under MPS gets the matching
    ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``.
    """
    threads = max(int(round(slot.threads * min(share, 1.0))), 1)
    env = {"NBTUNE_TRIAL_ID": str(tid), "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    if slot.cores and not gpus:  # a CPU stand-in's own cores (cluster.pin_cores)
        env["NBTUNE_CPU_CORES"] = ",".join(map(str, slot.cores))
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = str(slot.device)
        if mps and share < 1.0 - EPS:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(int(round(share * 100)), 1))
    return threads, env
