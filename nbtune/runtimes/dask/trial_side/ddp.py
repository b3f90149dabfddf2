"""Multi-worker trials: rendezvous through Dask, torch.distributed process groups, DDP wrapping.

A trial placed on ``w`` GPUs runs ``w`` ranks, one per GPU, on the worker
owning it. The driver launches rank 0 first; its worker picks a free port on
its own host and answers with ``host:port``, which the driver passes to the
other ranks' launches (:mod:`.links`, :mod:`.handlers`). No fixed port is ever
assumed, so concurrent multi-worker trials (and several experiments) cannot
collide. Each rank's
process then joins the group with ``gloo`` on CPU or ``nccl`` on GPU.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any, Protocol


class RankHandle(Protocol):
    """What DDP needs of the user's trial handle (:class:`nbtune.runtimes.dask.trial_side.trial_api.Trial`).

    A protocol, not an import: the handle uses this module, so importing it back would loop.
    """

    world_size: int
    device: Any
    device_kind: str

__all__ = ["free_port", "init_group", "destroy_group", "wrap_model", "agree_any"]


def free_port(host: str) -> int:
    """A port on ``host`` that nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        return int(s.getsockname()[1])


def init_group(job: dict[str, Any]) -> None:
    """Join the trial's process group (in the trial's own process, before user code runs)."""
    import torch
    import torch.distributed as dist

    backend = "nccl" if job.get("device") == "cuda" and torch.cuda.is_available() else "gloo"
    dist.init_process_group(
        backend,
        init_method=f"tcp://{job['master_addr']}:{job['master_port']}",
        rank=int(job["rank"]),
        world_size=int(job["world_size"]),
        timeout=timedelta(seconds=float(job.get("ddp_timeout", 300.0))),
    )


def destroy_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def wrap_model(model: Any, trial: RankHandle, **kwargs: Any) -> Any:
    """``DistributedDataParallel(model)`` for multi-rank trials; the model itself otherwise."""
    if trial.world_size <= 1:
        return model.to(trial.device)
    from torch.nn.parallel import DistributedDataParallel

    model = model.to(trial.device)
    if trial.device_kind == "cuda":
        kwargs.setdefault("device_ids", [0])  # each rank sees only its own GPU
    return DistributedDataParallel(model, **kwargs)


def agree_any(flag: bool, trial: RankHandle) -> bool:
    """All-reduce a boolean with MAX: True on every rank if it is True on any."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([1.0 if flag else 0.0], device=trial.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0.5)
