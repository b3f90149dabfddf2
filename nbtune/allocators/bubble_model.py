"""What a guest in a pipeline host's bubbles costs the host and gets from it: measured, not assumed.

:class:`~nbtune.allocators.bubbles.PipelineHostModel` turns a host's idle shares
into ephemeral GPUs. Two numbers decide what those GPUs are worth, and neither
follows from the host's own timeline:

* the host's **slowdown** σ under a guest: on a GPU Hydro saw none; on CPU
  the guest shares its stage's core (caches, gloo's I/O thread, wake-ups), and
  gated iterations run longer (by how much: ``benchmarks/RESULTS.md``);
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
host's constant ``efficiency``, this is the probe-less model (speed i × efficiency).

σ is a ratio of iteration times, but a guest's cost is paid per compute chunk
(each chunk that resumes after an idle gap may find the guest holding the
core: a wake-up, a handoff, up to one ``grace`` before its SIGSTOP). A host
with twice the microbatches has twice the chunks at half the length, so σ
does not carry over (it under-predicts the cost at more microbatches,
``benchmarks/RESULTS.md``). The probe therefore also measures δ, the seconds a
gated iteration grows per *resumption* (a compute chunk that starts after an
idle gap, counted on the host's own no-guest timeline: :func:`resumptions`),
and :meth:`CoLocation.at` rescales it to any configuration:
σ' = δ·n'/T', with n' the resumptions and T' the iteration time there.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

__all__ = ["CoLocation", "gated_idle", "resumptions"]


@dataclass(frozen=True)
class CoLocation:
    """A guest's measured effect on its host stage and its measured progress in the bubbles.

    ``slowdown`` σ: gated iteration time / held iteration time − 1 (> −1; a
    noisy probe may measure a small negative one and keeps it, unclamped).
    ``fill`` φ in [0, 1]: guest progress seconds per bubble second.
    ``compute_stretch`` κ > 0: the stage's compute seconds per iteration with a
    guest / without.
    ``chunk_delay`` δ (seconds, or None when not measured): how much longer a
    gated iteration is per resumption of the stage's compute; with it,
    :meth:`at` gives the slowdown of another configuration.
    """

    slowdown: float = 0.0
    fill: float = 1.0
    compute_stretch: float = 1.0
    chunk_delay: float | None = None

    def __post_init__(self) -> None:
        if not self.slowdown > -1:
            raise ValueError(f"slowdown must be > -1, got {self.slowdown}")
        if not 0 <= self.fill <= 1:
            raise ValueError(f"fill must be in [0, 1], got {self.fill}")
        if not self.compute_stretch > 0:
            raise ValueError(f"compute_stretch must be > 0, got {self.compute_stretch}")
        if self.chunk_delay is not None and not math.isfinite(self.chunk_delay):
            raise ValueError(f"chunk_delay must be finite, got {self.chunk_delay}")

    @classmethod
    def measure(cls, held_s: Sequence[float], gated_s: Sequence[float], *,
                held_busy_s: Sequence[float], gated_busy_s: Sequence[float],
                bubble_s: float, progress_s: float,
                held_resumptions: Sequence[float] | None = None) -> CoLocation:
        """The numbers a co-location probe reads off its iterations.

        ``held_s``/``gated_s``: iteration times without / with the guest
        (medians are compared: one descheduled iteration on a shared machine
        must not set σ); ``held_busy_s``/``gated_busy_s``: the stage's compute
        seconds per iteration in each (medians again); ``bubble_s``: the
        stage's idle seconds summed over the gated iterations; ``progress_s``:
        the guest's steps finished in them × its solo step time. A fill above
        1 (a solo step time measured at a quieter moment) is clamped: a guest
        cannot progress faster in a bubble than alone. ``held_resumptions``:
        the stage's :func:`resumptions` per held iteration; with it δ is the
        median gated − median held iteration time over their median.
        """
        if not held_s or not gated_s or not held_busy_s or not gated_busy_s:
            raise ValueError("a probe needs held and gated iterations")
        if not bubble_s > 0 or progress_s < 0:
            raise ValueError(f"need bubble_s > 0 and progress_s >= 0, got {bubble_s}, {progress_s}")
        med = statistics.median
        held_busy, gated_busy = med(held_busy_s), med(gated_busy_s)
        n = med(held_resumptions) if held_resumptions else 0.0
        return cls(slowdown=med(gated_s) / med(held_s) - 1.0,
                   fill=min(progress_s / bubble_s, 1.0),
                   # a stage that never computed has nothing to stretch
                   compute_stretch=gated_busy / held_busy if held_busy > 0 and gated_busy > 0 else 1.0,
                   chunk_delay=(med(gated_s) - med(held_s)) / n if n > 0 else None)

    def at(self, held: float, resumptions: float) -> CoLocation:
        """This probe carried to a configuration whose no-guest iteration takes ``held``
        seconds with ``resumptions`` resumptions per iteration: σ' = δ·n'/T' (floored just
        above −1). Without a measured δ, unchanged (σ is all there is)."""
        if self.chunk_delay is None:
            return self
        if not held > 0 or resumptions < 0:
            raise ValueError(f"need held > 0 and resumptions >= 0, got {held}, {resumptions}")
        return replace(self, slowdown=max(self.chunk_delay * resumptions / held, -1.0 + 1e-6))

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


def resumptions(spans: Iterable[tuple[float, float]], gap: float = 0.0) -> int:
    """How often a stage's compute starts after idling longer than ``gap`` seconds: the
    chunks a guest can be in the way of. ``spans``: one iteration's merged compute spans
    (:func:`nbtune.bubbles.timeline.merge`), sorted; the first always counts (the
    iteration starts after the previous one's idle end)."""
    out, end = 0, None
    for s, e in spans:
        if end is None or s - end > gap:
            out += 1
        end = e if end is None else max(end, e)
    return out
