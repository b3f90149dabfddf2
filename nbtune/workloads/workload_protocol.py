"""The workload-model protocol the simulator runs trials against.

A workload model stands in for real training code: it says how fast a trial
progresses on a placement (Fluid's overhead model h(i,w), co-location
interference), what it measures at each budget unit (a learning curve or a
replayed trace), and what it needs of a GPU (HyperSack's compute share, memory
and CPU cores). Models are pure and deterministic under their seed; the
simulator never asks them what time it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbtune.core.overhead_model import OverheadModel
from nbtune.core.resources import GPU, Demand, Placement

__all__ = ["WorkloadModel", "OverheadModel", "Neighbor"]


@dataclass(frozen=True)
class Neighbor:
    """Another trial sharing a GPU: its share and its demand."""

    trial_id: int
    share: float
    demand: Demand


class WorkloadModel:
    """Base class; the simulator calls only these methods."""

    #: name of the metric the model reports (the algorithm's ``metric``)
    metric: str = "loss"
    #: True when a trial's speed depends on who else shares its GPU
    neighbor_sensitive: bool = False

    def unit_time(self, trial_id: int, config: Mapping[str, Any]) -> float:
        """Seconds for one budget unit alone on one reference GPU (h_i1 per unit)."""
        raise NotImplementedError

    def rate(
        self,
        trial_id: int,
        config: Mapping[str, Any],
        placement: Placement,
        gpus: Mapping[int, GPU],
        neighbors: Sequence[Neighbor] = (),
    ) -> float:
        """Budget units per second on ``placement`` (default: Fluid's overhead model).

        A fraction of one GPU is measured against the trial's compute demand: a
        lightweight trial (demand c < 1) holding share s ≥ c has all it uses and
        runs at full speed; only s < c pays Fluid's packing overhead, at width
        s / c. With the default demand (c = 1) this is Fluid's h(i, w) unchanged.
        """
        if len(placement) == 1:  # one GPU (most trials): the sum and min below, without loops
            g, w = placement[0]
            speed = gpus[g].speed
        else:
            w = sum(s for _, s in placement)
            speed = min(gpus[g].speed for g, _ in placement)
        if w < 1.0:
            c = self.demand(trial_id, config).compute
            if 0 < c < 1.0:
                w = min(1.0, w / c)
        return speed / (self.unit_time(trial_id, config) * self.overhead(config).factor(w))

    def overhead(self, config: Mapping[str, Any]) -> OverheadModel:
        return OverheadModel()

    def metrics(self, trial_id: int, config: Mapping[str, Any], budget: float) -> dict[str, float]:
        raise NotImplementedError

    def demand(self, trial_id: int, config: Mapping[str, Any]) -> Demand:
        return Demand()

    def fails_at(self, trial_id: int, config: Mapping[str, Any]) -> float | None:
        """Budget at which this trial raises (fault injection), or None."""
        return None

    @property
    def launch_overhead(self) -> float:
        """Seconds from launch to the first iteration (process start, data loading)."""
        return 0.0

    def launch_time(self, trial_id: int, config: Mapping[str, Any],
                    start_budget: float) -> float | None:
        """This launch's own start-up seconds, or None for the runtime's ``launch_overhead``.

        Replayed traces know each launch's measured cost (a cold first launch
        imports torch; a warm one does not); models leave it to the runtime.
        """
        return None

    @property
    def space(self) -> dict[str, Any] | None:
        """The search space the model was built for, if it has one."""
        return None
