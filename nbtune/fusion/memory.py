"""Peak memory of a fused training step, measured at F = 1 and F = 2 (Hydro §4.3 step 3).

Hydro observes that a fused model's memory grows linearly in F (Fig. 8b), so two
measurements give the line and the largest F under a memory limit. What is measured:

* GPU (``device="cuda"``): ``torch.cuda.max_memory_allocated`` after a reset, in this
  process — the caching allocator's own peak of live tensors.
* CPU: the peak resident set of a *fresh* process (Linux ``VmHWM``; ``ru_maxrss``
  elsewhere) that builds the fused model and runs the steps. A fresh process per F
  because an allocator keeps freed pages, so a second measurement in the same process
  would see the first one's memory; the interpreter and torch are part of the intercept.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: build_step(F) returns a function running one fused training step (must be picklable
#: by reference — a module-level function — for the CPU measurement's fresh process)
StepBuilder = Callable[[int], Callable[[], object]]


@dataclass(frozen=True)
class MemoryProfile:
    """Measured peaks (bytes) at F = ``m1`` and F = ``m2`` (1 and 2 unless given) and the
    line through them. Online (``tune(..., fusion=True)``) the two sizes are the smallest
    and the largest fused units measured so far: the wider apart, the less a few pages of
    noise tilt the slope."""

    f1: int
    f2: int
    m1: int = 1
    m2: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.m1 < self.m2:
            raise ValueError(f"MemoryProfile: need sizes 1 <= m1 < m2, got {self.m1}, {self.m2}")

    @property
    def per_member(self) -> float:
        return max((self.f2 - self.f1) / (self.m2 - self.m1), 1)

    @property
    def base(self) -> float:
        return self.f1 - self.per_member * self.m1

    def predict(self, members: int) -> float:
        return self.base + self.per_member * members


def fusion_limit(profile: MemoryProfile, limit_bytes: int, margin: float = 0.1) -> int:
    """F_max: the largest F whose extrapolated peak stays under ``(1 - margin) * limit``.

    Raises if even one member does not fit (the trial cannot run there at all).
    """
    if not 0 <= margin < 1:
        raise ValueError(f"fusion_limit: margin must be in [0, 1), got {margin}")
    budget = limit_bytes * (1 - margin)
    if profile.predict(1) > budget:
        raise ValueError(f"fusion_limit: one member needs {profile.predict(1):,.0f} bytes, "
                         f"more than the {budget:,.0f} allowed ({limit_bytes:,} minus a "
                         f"{margin:.0%} margin)")
    return max(1, math.floor((budget - profile.base) / profile.per_member))


def measure_peak(build_step: StepBuilder, members: int, steps: int = 2,
                 device: str = "cpu") -> int:
    """Peak bytes of ``steps`` fused training steps at F = ``members`` (see module doc)."""
    if device.startswith("cuda"):
        return _cuda_peak(build_step, members, steps, device)
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(_cpu_peak, (build_step, members, steps))


def profile_memory(build_step: StepBuilder, steps: int = 2, device: str = "cpu"
                   ) -> MemoryProfile:
    """Measure F = 1 and F = 2."""
    return MemoryProfile(measure_peak(build_step, 1, steps, device),
                         measure_peak(build_step, 2, steps, device))


def _cuda_peak(build_step: StepBuilder, members: int, steps: int, device: str) -> int:
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    step = build_step(members)
    for _ in range(steps):
        step()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    del step
    torch.cuda.empty_cache()
    return peak


def _cpu_peak(build_step: StepBuilder, members: int, steps: int) -> int:
    step = build_step(members)
    for _ in range(steps):
        step()
    return process_peak()


def reset_process_peak() -> bool:
    """Start this process's peak resident set again from its current one (Linux >= 4.0:
    ``5`` into ``/proc/self/clear_refs``), so a reused trial process measures its next
    job's peak, not the biggest of every job it ran. False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def process_peak() -> int:
    """This process's peak resident set in bytes."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
