"""Allocators: pure policies deciding each trial's GPU share and placement."""

from __future__ import annotations

from typing import Any

from nbtune.allocators.base import Allocation, BaseAllocator, SchedulingView
from nbtune.allocators.fifo import FifoAllocator

__all__ = ["Allocation", "BaseAllocator", "SchedulingView", "FifoAllocator", "ALLOCATORS",
           "make_allocator"]

ALLOCATORS: dict[str, type[BaseAllocator]] = {"fifo": FifoAllocator}


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
