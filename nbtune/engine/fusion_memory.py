"""F_max from measured memory, online (Hydro §4.3 step 3; ``tune(..., fusion=True)``).

Hydro's planner measures a group's peak memory at F = 1 and F = 2 before it fuses, fits
the line (memory grows linearly in F, its Fig. 8b) and takes the largest F under the GPU's
memory. Here the measurements come from the run itself: each fused unit's process reports
its peak (:class:`~nbtune.core.events.UnitMemoryMeasured`), and per *shape group* (the
values of the shape keys: what sets the operator shapes, hence the memory) this keeps the
highest peak seen for every unit size. Until two sizes are measured a group is probed: one
unit of one member and one of two are offered, the group's other pending trials wait (the
first report of a unit carries its peak, one step after it starts). From then on the line
through the smallest and the largest sizes measured gives F_max under the worker's memory
less a margin (:func:`nbtune.fusion.memory.fusion_limit`), and every unit launched is
measured too, so the line is refitted as wider units report. A unit's size is its member
count at launch: its process's peak is a high-water mark, reached with every member in.

Pure, like the engine: measurements arrive as events, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nbtune.engine.state import InvariantError
from nbtune.fusion.memory import MemoryProfile, fusion_limit

__all__ = ["PROBES", "Key", "MemoryFit", "shape_key"]

#: unit sizes measured before a group fuses wider (the paper's planner: F = 1 and F = 2)
PROBES = (1, 2)

#: a shape group: ``((key, value), ...)`` over the shape keys
Key = tuple[tuple[str, Hashable], ...]


def shape_key(config: Mapping[str, Any], keys: Sequence[str]) -> Key:
    """The shape group of a config (lists become tuples, as in ``group_trials``)."""
    return tuple((k, tuple(v) if isinstance(v, list) else v)
                 for k, v in ((k, config[k]) for k in keys))


@dataclass
class MemoryFit:
    """Measured peaks per shape group and the F_max they give."""

    #: share of the worker's memory kept free (the CUDA context, allocator slack, noise)
    margin: float = 0.1
    #: shape group -> unit size -> highest peak (bytes) measured at that size
    peaks: dict[Key, dict[int, int]] = field(default_factory=dict)
    #: unit -> (its shape group, its size at launch, the F_max it was sized under;
    #: None for a probe)
    units: dict[int, tuple[Key, int, int | None]] = field(default_factory=dict)
    #: unit -> highest peak it reported
    unit_peak: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.margin < 1:
            raise ValueError(f"fusion: the memory margin must be in [0, 1), got {self.margin}")

    def launched(self, unit: int, key: Key, size: int, limit: int | None) -> None:
        self.units[unit] = (key, size, limit)

    def measured(self, unit: int, peak: int) -> bool:
        """Record a unit's peak; True when it raised its group's peak at that size (the
        line, and so F_max, may have moved). A unit not launched under fusion=True is
        ignored."""
        if unit not in self.units or peak <= self.unit_peak.get(unit, -1):
            return False
        self.unit_peak[unit] = peak
        key, size, _ = self.units[unit]
        sizes = self.peaks.setdefault(key, {})
        if peak <= sizes.get(size, -1):
            return False
        sizes[size] = peak
        return True

    def profile(self, key: Key) -> MemoryProfile | None:
        """The line through the group's smallest and largest measured sizes; None until
        two sizes are measured."""
        sizes = self.peaks.get(key, {})
        if len(sizes) < 2:
            return None
        lo, hi = min(sizes), max(sizes)
        return MemoryProfile(sizes[lo], sizes[hi], lo, hi)

    def limit(self, key: Key, limit_bytes: float) -> int | None:
        """F_max for the group under ``limit_bytes`` less the margin; None while it is
        still probed. 1 when not even one member fits (it runs alone, and may fail out of
        memory: no fusion would help it)."""
        prof = self.profile(key)
        if prof is None:
            return None
        try:
            return fusion_limit(prof, int(limit_bytes), self.margin)
        except ValueError:
            return 1

    def probes(self, key: Key, running: Sequence[int]) -> list[int]:
        """The probe sizes to offer now: those of :data:`PROBES` neither measured for the
        group nor running unmeasured (``running``: the sizes of its units in flight)."""
        have = set(self.peaks.get(key, {})) | set(running)
        return [s for s in PROBES if s not in have]

    def in_flight(self, key: Key, alive: Any) -> list[int]:
        """Sizes of the group's units not measured yet whose process still runs
        (``alive(unit)``)."""
        return [size for u, (k, size, _) in self.units.items()
                if k == key and u not in self.unit_peak and alive(u)]

    def check(self) -> None:
        """A probe has at most two members; every other unit at most its F_max."""
        for u, (_, size, lim) in self.units.items():
            if size > (max(PROBES) if lim is None else lim):
                raise InvariantError(f"unit {u} has {size} members, over the "
                                     f"{'probe size' if lim is None else 'F_max'} "
                                     f"{max(PROBES) if lim is None else lim}")
