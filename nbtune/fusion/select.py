"""Choosing a fused layer's implementation by measuring it on this machine.

Whether one batched kernel beats F ordinary calls depends on the layer, its shapes, F and the
hardware (on CPU, for instance, ``baddbmm`` can win for MLPs while a per-member loop wins for
some small convolutions), so the choice is measured, not fixed. The measurement runs the
candidate forward *and* backward on a detached copy of the input a few times and keeps the
fastest median; it costs a few milliseconds once per layer and input shape.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

#: repetitions per candidate (after one warm-up)
REPEATS = 5


def choose(fns: dict[str, Callable[[], torch.Tensor]], module: nn.Module,
           timer: Callable[[], float] = time.perf_counter) -> str:
    """The name of the fastest candidate; gradients and module state are left untouched."""
    saved = _snapshot(module)
    params = [p for p in module.parameters() if p.requires_grad]
    try:
        times: dict[str, list[float]] = {name: [] for name in fns}
        # candidates alternate within each repetition, so a burst of load hits all alike
        for rep in range(REPEATS + 1):
            for name, fn in fns.items():
                t0 = timer()
                out = fn()
                if out.requires_grad:
                    torch.autograd.grad(out.sum(), params, allow_unused=True)
                _sync(out)
                if rep:  # the first repetition warms up
                    times[name].append(timer() - t0)
        return min(times, key=lambda n: statistics.median(times[n]))
    finally:
        _restore(module, saved)


def _snapshot(module: nn.Module) -> dict[str, torch.Tensor]:
    """Buffers a forward may update in place (BatchNorm running statistics)."""
    return {n: b.detach().clone() for n, b in module.named_buffers()}


def _restore(module: nn.Module, saved: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for n, b in module.named_buffers():
            b.copy_(saved[n])


def _sync(t: torch.Tensor) -> None:
    if t.is_cuda:
        torch.cuda.synchronize(t.device)
