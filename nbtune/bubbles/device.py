"""Where a host stage or a guest computes: the CPU (a core is the "GPU") or a CUDA device.

On a GPU the bubble is idle SMs, not an idle core, and three things change:

* **asynchrony**: CUDA kernels run after the Python call that launched them
  returns. A stage's compute interval must end when its kernels end, and a
  guest must have no kernels in flight when it gives its slot back, so both
  :func:`synchronizer` at their boundaries (the guest at every checkpoint: that
  bounds what it has queued to one layer, which is what Hydro's interception
  of CUDA streams achieves, and it makes the SIGSTOP fallback mean something);
* **MPS**: with an MPS daemon running, :func:`use_mps_share` caps a process at
  a share of the GPU's SMs (``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``), read when
  the process creates its CUDA context. A guest gets its stage's share, so it
  can never take more of the GPU than the stage it fills in for;
* **transport**: the pipeline's activations cross between stage processes over
  gloo, which sends CPU tensors only. :class:`OnDevice` runs a stage's layers on
  the GPU and hands CPU tensors to the schedule (as a pipeline over PCIe does).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

__all__ = ["MPS_SHARE_ENV", "use_mps_share", "synchronizer", "OnDevice", "to_numpy",
           "peak_memory"]

MPS_SHARE_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


def use_mps_share(percentage: int | None) -> None:
    """Cap this process at ``percentage`` % of the GPU's SMs; call before CUDA is first used."""
    if percentage is None:
        return
    if not 0 < int(percentage) <= 100:
        raise ValueError(f"mps_percentage is a share of the GPU in (0, 100], got {percentage!r}")
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError("CUDA is initialised in this process already: the MPS share must be "
                           "set before its first CUDA call")
    os.environ[MPS_SHARE_ENV] = str(int(percentage))


def synchronizer(device: str) -> Callable[[], None] | None:
    """A function that waits for this process's kernels on ``device``; None on the CPU."""
    import torch

    dev = torch.device(device)
    if dev.type == "cpu":
        return None
    if dev.type != "cuda":
        raise ValueError(f"bubbles run on 'cpu' or a CUDA device, got {device!r}")
    return lambda: torch.cuda.synchronize(dev)


def peak_memory(device: str) -> int:
    """The memory that fits-beside checks compare, in bytes: on the CPU the process's peak
    RSS, on a GPU the device memory its caching allocator has held at most."""
    import resource

    import torch

    dev = torch.device(device)
    if dev.type == "cpu":
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return int(torch.cuda.max_memory_reserved(dev))


def to_numpy(t: Any) -> Any:
    return t.detach().cpu().numpy().copy()


@functools.cache
def _module_class() -> type:
    from torch import nn

    class _OnDevice(nn.Module):
        """``part`` computing on ``device`` between CPU tensors at its boundaries."""

        def __init__(self, part: Any, device: Any) -> None:
            super().__init__()
            self.part = part.to(device)
            self.device = device

        def forward(self, x: Any) -> Any:
            if x.is_meta:  # shape inference: the host's layers keep the width
                return x.new_empty(x.shape)
            return self.part(x.to(self.device, non_blocking=False)).cpu()

    return _OnDevice


def OnDevice(part: Any, device: str) -> Any:  # noqa: N802 - a class made on first use (torch)
    """``part`` on ``device`` behind CPU boundaries; its ``state_dict`` keys gain ``part.``."""
    import torch

    return _module_class()(part, torch.device(device))
