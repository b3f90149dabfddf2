"""Allocators: pure policies deciding each trial's GPU share and placement."""

from __future__ import annotations

from typing import Any

from nbtune.allocators.allocator_protocol import Allocation, BaseAllocator, SchedulingView
from nbtune.allocators.auto import AutoAllocator
from nbtune.allocators.bubble_windows import BubblesAllocator, bubbles_over, use_registry
from nbtune.allocators.fifo import FifoAllocator
from nbtune.allocators.fluid import DynamicFluidAllocator, StaticFluidAllocator
from nbtune.allocators.fluid_knapsack import FluidKnapsackAllocator
from nbtune.allocators.hetero import HeterogeneityAware
from nbtune.allocators.knapsack import (
    KnapsackAllocator,
    KnapsackFF,
    KnapsackFFD,
    KnapsackWF,
    KnapsackWFD,
)

__all__ = ["Allocation", "BaseAllocator", "SchedulingView", "FifoAllocator", "ALLOCATORS",
           "make_allocator", "StaticFluidAllocator", "DynamicFluidAllocator",
           "KnapsackAllocator", "KnapsackFF", "KnapsackFFD", "KnapsackWF", "KnapsackWFD",
           "FluidKnapsackAllocator", "AutoAllocator", "HeterogeneityAware", "BubblesAllocator"]

ALLOCATORS: dict[str, type[BaseAllocator]] = {"fifo": FifoAllocator}
# Fluid = StaticFluid + DynamicFluid: "waterfill" is the dynamic one (it includes static)
ALLOCATORS["waterfill"] = DynamicFluidAllocator
ALLOCATORS["waterfill-static"] = StaticFluidAllocator
# HyperSack's knapsack policies (one trial per GPU share, oversubscription per GPU kind)
ALLOCATORS.update({"knapsack-ff": KnapsackFF, "knapsack-ffd": KnapsackFFD,
                   "knapsack-wf": KnapsackWF, "knapsack-wfd": KnapsackWFD,
                   "fluid+knapsack": FluidKnapsackAllocator})
# FIFO until the runtime's profiler measures that packing or scaling pays (nbtune.allocators.auto)
ALLOCATORS["auto"] = AutoAllocator
# Hydro §5.2: "auto", with target trials that under-use a fast GPU moved to an older one
ALLOCATORS["hetero"] = HeterogeneityAware
# shortest remaining work into the shortest idle window, over FIFO or any allocator above
# (nbtune.allocators.bubble_windows): "bubbles", "bubbles+waterfill", "bubbles+knapsack-wfd", ...
_BASES = list(ALLOCATORS)
ALLOCATORS["bubbles"] = BubblesAllocator
ALLOCATORS.update({f"bubbles+{name}": bubbles_over(name) for name in _BASES})


def make_allocator(spec: str | BaseAllocator, **options: Any) -> BaseAllocator:
    """Build an allocator from its registry name, or pass an instance through."""
    if isinstance(spec, BaseAllocator):
        return spec
    try:
        cls = ALLOCATORS[spec]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown allocator {spec!r}; choose one of {sorted(ALLOCATORS)}"
        ) from None
    return cls(**options)


use_registry(make_allocator)  # BubblesAllocator(base="waterfill") builds its base by name
