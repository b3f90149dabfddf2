"""What a guest in a pipeline host's bubbles costs the host and gets from it: measured, not assumed.

:class:`~nbtune.allocators.bubbles.PipelineHost` turns a host's idle shares
into ephemeral GPUs. Two numbers decide what those GPUs are worth, and neither
follows from the host's own timeline:

* the host's **slowdown** σ under a guest: on a GPU Hydro saw none; on CPU
  the guest shares its stage's core (caches, gloo's I/O thread, wake-ups), and
  gated iterations ran 8–40 % longer (``benchmarks/RESULTS.md``);
* the **fill** φ: guest progress (its steps × its solo step time) per second
  of bubble. The gate's pause/resume, kernel start-up and, on a shared
  machine, whoever else wants the core eat the rest.

So they are measured the way Fluid's packing probe measures c: a short
*co-location probe* (a few iterations with a guest, alternated with a few
held ones so both see the same machine load) gives :class:`CoLocation`, pure
numbers that cross the layer boundary (the probe's processes live in
:mod:`nbtune.bubbles`; nothing here reads a clock). The model then says, for
any later phase of a host whose no-guest timeline is known (iteration time T,
stage idle shares i): a gated iteration takes T(1 + σ); the stage's compute
takes κ(1 − i)T of it (κ, the compute stretch, measured too; 1 when the gate
keeps the guest out of the stage's compute), so it idles
T(1 + σ) − κ(1 − i)T: the slowdown *grows* the bubbles, it does not shrink
them; the guest turns φ of that into progress. With σ = 0, κ = 1 and φ the
old constant ``efficiency``, this is exactly the old model (speed i × efficiency).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CoLocation", "gated_idle"]


@dataclass(frozen=True)
class CoLocation:
    """A guest's measured effect on its host stage and its measured progress in the bubbles.

    ``slowdown`` σ: gated iteration time / held iteration time − 1 (> −1; a
    noisy probe may measure a small negative one and keeps it, unclamped).
    ``fill`` φ in [0, 1]: guest progress seconds per bubble second.
    ``compute_stretch`` κ > 0: the stage's compute seconds per iteration with a
    guest / without.
    """

    slowdown: float = 0.0
    fill: float = 1.0
    compute_stretch: float = 1.0

    def __post_init__(self) -> None:
        if not self.slowdown > -1:
            raise ValueError(f"slowdown must be > -1, got {self.slowdown}")
        if not 0 <= self.fill <= 1:
            raise ValueError(f"fill must be in [0, 1], got {self.fill}")
        if not self.compute_stretch > 0:
            raise ValueError(f"compute_stretch must be > 0, got {self.compute_stretch}")

    @classmethod
    def measure(cls, held_s: Sequence[float], gated_s: Sequence[float], *,
                held_busy_s: Sequence[float], gated_busy_s: Sequence[float],
                bubble_s: float, progress_s: float) -> CoLocation:
        """The numbers a co-location probe reads off its iterations.

        ``held_s``/``gated_s``: iteration times without / with the guest
        (medians are compared: one descheduled iteration on a shared machine
        must not set σ); ``held_busy_s``/``gated_busy_s``: the stage's compute
        seconds per iteration in each (medians again); ``bubble_s``: the
        stage's idle seconds summed over the gated iterations; ``progress_s``:
        the guest's steps finished in them × its solo step time. A fill above
        1 (a solo step time measured at a quieter moment) is clamped: a guest
        cannot progress faster in a bubble than alone.
        """
        if not held_s or not gated_s or not held_busy_s or not gated_busy_s:
            raise ValueError("a probe needs held and gated iterations")
        if not bubble_s > 0 or progress_s < 0:
            raise ValueError(f"need bubble_s > 0 and progress_s >= 0, got {bubble_s}, {progress_s}")
        med = statistics.median
        held_busy, gated_busy = med(held_busy_s), med(gated_busy_s)
        return cls(slowdown=med(gated_s) / med(held_s) - 1.0,
                   fill=min(progress_s / bubble_s, 1.0),
                   # a stage that never computed has nothing to stretch
                   compute_stretch=gated_busy / held_busy if held_busy > 0 and gated_busy > 0 else 1.0)

    def iteration_time(self, held: float) -> float:
        """A gated iteration's length, given the host's iteration time without a guest."""
        return held * (1.0 + self.slowdown)

    def idle_share(self, idle: float) -> float:
        """The stage's idle share of a gated iteration, given its share without a guest."""
        return gated_idle(idle, self)

    def bubble_seconds(self, held: float, idle: float, iterations: float = 1.0) -> float:
        """Idle seconds of one stage over ``iterations`` gated iterations."""
        return iterations * self.iteration_time(held) * self.idle_share(idle)

    def progress_seconds(self, held: float, idle: float, iterations: float = 1.0) -> float:
        """Guest progress (in its solo seconds) over ``iterations`` gated iterations."""
        return self.fill * self.bubble_seconds(held, idle, iterations)


def gated_idle(idle: float, c: CoLocation) -> float:
    """1 − κ(1 − i)/(1 + σ), floored at 0: the stage computes κ(1 − i)T of a T(1 + σ) iteration."""
    if not 0 <= idle <= 1:
        raise ValueError(f"idle must be in [0, 1], got {idle}")
    return max(1.0 - c.compute_stretch * (1.0 - idle) / (1.0 + c.slowdown), 0.0)
