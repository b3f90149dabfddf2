"""GPUs, nodes and placements.

A :data:`Placement` lists ``(gpu_id, share)`` pairs: one pair with a share
below 1 is a trial packed with others on a GPU (NVIDIA MPS); several pairs of
share 1 is a distributed trial. A trial's *width* is the sum of its shares
(Fluid's ``w``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["GPU", "ClusterSpec", "Placement", "Demand", "width", "placement_gpus", "device_of",
           "device_noun"]

Placement = tuple[tuple[int, float], ...]


def width(placement: Placement) -> float:
    if len(placement) == 1:  # one GPU (most placements): no generator
        return placement[0][1]
    return sum(s for _, s in placement)


def placement_gpus(placement: Placement) -> tuple[int, ...]:
    return tuple(g for g, _ in placement)


@dataclass(frozen=True)
class GPU:
    """One GPU (or, on a CPU-only machine, one worker standing for one)."""

    gpu_id: int
    node: str = "node0"
    kind: str = "generic"
    speed: float = 1.0  # relative throughput against the reference GPU
    memory_gb: float = 16.0


@dataclass(frozen=True)
class Demand:
    """What one trial needs of a GPU alone (HyperSack §III): compute share, memory, CPU cores."""

    compute: float = 1.0
    memory_gb: float = 0.0
    cpus: float = 0.0


@dataclass(frozen=True)
class ClusterSpec:
    gpus: tuple[GPU, ...]
    node_cpus: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = [g.gpu_id for g in self.gpus]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate GPU ids in cluster: {ids}")

    @classmethod
    def homogeneous(
        cls,
        n_gpus: int,
        *,
        gpus_per_node: int = 8,
        kind: str = "generic",
        speed: float = 1.0,
        memory_gb: float = 16.0,
        cpus_per_node: float = 32.0,
    ) -> ClusterSpec:
        if n_gpus < 1:
            raise ValueError(f"a cluster needs at least one GPU, got {n_gpus}")
        gpus = tuple(
            GPU(i, f"node{i // gpus_per_node}", kind, speed, memory_gb) for i in range(n_gpus)
        )
        nodes = {g.node for g in gpus}
        return cls(gpus, {n: cpus_per_node for n in sorted(nodes)})

    @classmethod
    def of(cls, gpus: Iterable[GPU], node_cpus: dict[str, float] | None = None) -> ClusterSpec:
        gpus = tuple(gpus)
        return cls(gpus, node_cpus or {g.node: 32.0 for g in gpus})

    @property
    def n_gpus(self) -> int:
        return len(self.gpus)

    @property
    def cpu_stand_ins(self) -> bool:
        """Every "GPU" is a CPU worker standing in for one (kind ``"cpu"``, the Dask runtime
        without GPUs): time-sliced, measured by CPU share, shown and named as workers."""
        return bool(self.gpus) and all(g.kind == "cpu" for g in self.gpus)

    def by_id(self) -> dict[int, GPU]:
        return {g.gpu_id: g for g in self.gpus}


def device_of(cluster: ClusterSpec | None) -> str | None:
    """What the cluster's lanes are, for the words people read: ``"CPU"`` when every one is a
    CPU worker standing in for a GPU (:attr:`ClusterSpec.cpu_stand_ins`), ``"GPU"`` when not,
    ``None`` while no cluster is known (the experiment has not started)."""
    if cluster is None or not cluster.gpus:
        return None
    return "CPU" if cluster.cpu_stand_ins else "GPU"


def device_noun(device: str | None, n: int) -> str:
    """``n`` lanes of ``device`` in words: ``2 GPUs`` only on GPUs, ``2 CPU workers`` on CPU
    stand-ins, ``2 workers`` when unknown or mixed (never GPUs where there may be none)."""
    noun = {"GPU": "GPU", "CPU": "CPU worker"}.get(device or "", "worker")
    return f"{n} {noun}{'' if n == 1 else 's'}"
