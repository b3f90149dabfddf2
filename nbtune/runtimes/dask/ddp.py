"""Multi-worker trials: rendezvous through Dask, torch.distributed process groups, DDP wrapping.

A trial placed on ``w`` GPUs runs ``w`` ranks, one task per GPU pinned to the
worker owning it. Rank 0's relay picks a free port on its own host and
publishes ``host:port`` in a :class:`distributed.Variable` named after the run;
the other ranks read it. No fixed port is ever assumed, so concurrent
multi-worker trials (and several experiments) cannot collide. Each rank's
process then joins the group with ``gloo`` on CPU or ``nccl`` on GPU.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbtune.runtimes.dask.trial_api import Trial

__all__ = ["free_port", "publish_rendezvous", "await_rendezvous", "init_group", "destroy_group",
           "wrap_model", "agree_any"]

RENDEZVOUS_TIMEOUT = 120.0


def free_port(host: str) -> int:
    """A port on ``host`` that nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _variable(run_key: str) -> Any:
    from distributed import Variable, get_client

    return Variable(f"nbtune-rdv-{run_key}", client=get_client())


def publish_rendezvous(run_key: str, host: str) -> tuple[str, int]:
    """Rank 0 (on a worker): choose the master address and tell the other ranks."""
    port = free_port(host)
    _variable(run_key).set(f"{host}:{port}")
    return host, port


def await_rendezvous(
    run_key: str, cancelled: Callable[[], bool] = lambda: False,
    timeout: float = RENDEZVOUS_TIMEOUT,
) -> tuple[str, int]:
    """Ranks > 0 (on a worker): wait for rank 0's address, giving up if the run is killed."""
    var = _variable(run_key)
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = var.get(timeout=1.0)
            break
        except TimeoutError:
            if cancelled():
                raise RuntimeError(f"run {run_key} was cancelled during rendezvous") from None
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"rank 0 of run {run_key} did not publish its address in {timeout:.0f} s"
                ) from None
    host, port = str(value).rsplit(":", 1)
    return host, int(port)


def forget_rendezvous(run_key: str) -> None:
    # the scheduler may be gone at shutdown; nothing to clean then
    with contextlib.suppress(Exception):
        _variable(run_key).delete()


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


def wrap_model(model: Any, trial: Trial, **kwargs: Any) -> Any:
    """``DistributedDataParallel(model)`` for multi-rank trials; the model itself otherwise."""
    if trial.world_size <= 1:
        return model.to(trial.device)
    from torch.nn.parallel import DistributedDataParallel

    model = model.to(trial.device)
    if trial.device_kind == "cuda":
        kwargs.setdefault("device_ids", [0])  # each rank sees only its own GPU
    return DistributedDataParallel(model, **kwargs)


def agree_any(flag: bool, trial: Trial) -> bool:
    """All-reduce a boolean with MAX: True on every rank if it is True on any."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([1.0 if flag else 0.0], device=trial.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0.5)
