"""Co-location interference: what packing lightweight trials on one GPU really costs.

Fluid's overhead model charges a trial by the *share* it was given. With MPS
and no per-client limit, a trial's speed instead depends on *who else* is on
its GPU: lightweight models keep a GPU busy only 22–50 % of the time
(HyperSack §I-A, Fig. 1; the rest is data loading and launch gaps), so a few
of them overlap almost for free, and past the point where their busy time
adds up to more than the GPU can overlap they queue. The model, per GPU:

    slowdown_i = max(1, U / ρ) · (1 + γ·(k − 1)),   U = Σ_j u_j over the k trials there

``u_j`` is trial j's busy fraction alone (its ``Demand.compute``), ``ρ`` how
much busy time a GPU can overlap (ρ > 1: kernels from different MPS clients
run concurrently), ``γ`` the per-neighbour cost of sharing caches, memory
bandwidth and the scheduler. Calibrated on the Hydro artifact's measured
ResNet-18 packing (resnet18_mps.csv against resnet18_256.csv: 6.10 s/epoch
alone at 52.8 % utilization, 14.93 s with 5 processes, 39.73 s with 10),
which gives ρ ≈ 1.47 and γ ≈ 0.09 (:func:`calibrate`). A trial across w > 1
GPUs (share 1 each) runs w/β^(w−1) times faster, as in Fluid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nbtune.core.resources import GPU, Placement
from nbtune.workloads.synthetic import SyntheticWorkload
from nbtune.workloads.workload_protocol import Neighbor

__all__ = ["InterferenceWorkload", "calibrate"]


def calibrate(alone: float, util: float, packed: Mapping[int, float]) -> tuple[float, float]:
    """ρ and γ from a trial's epoch time ``alone`` at utilization ``util`` and packed times.

    ``packed[k]`` is the epoch time of each of k identical trials on one GPU.
    Needs two k with k·util above ρ (the queueing regime); solves
    (1 + γ(k−1))/ρ = t_k/(alone · k · util) for the two largest k.
    """
    ks = sorted(k for k in packed if k > 1)
    if len(ks) < 2:
        raise ValueError("need packed epoch times for at least two process counts > 1")
    (k1, k2) = ks[-2:]
    y1 = packed[k1] / (alone * k1 * util)
    y2 = packed[k2] / (alone * k2 * util)
    slope = (y2 - y1) / (k2 - k1)  # = γ/ρ
    inv_rho = y1 - slope * (k1 - 1)
    if inv_rho <= 0 or slope < 0:
        raise ValueError(f"measurements {packed} do not fit the interference model")
    return 1.0 / inv_rho, slope / inv_rho


class InterferenceWorkload(SyntheticWorkload):
    """A synthetic workload whose packed trials slow each other down by their demands.

    Takes every :class:`SyntheticWorkload` argument (``unit_time`` and
    ``demand`` usually depend on the config: the model and batch size), plus
    ``rho`` and ``gamma`` of the interference model above.
    """

    neighbor_sensitive = True

    def __init__(self, space: Mapping[str, Any], *, rho: float = 1.47, gamma: float = 0.09,
                 **kwargs: Any) -> None:
        if not rho > 0:
            raise ValueError(f"rho (busy time a GPU can overlap) must be > 0, got {rho}")
        if not gamma >= 0:
            raise ValueError(f"gamma (per-neighbour interference) must be >= 0, got {gamma}")
        super().__init__(space, **kwargs)
        self.rho, self.gamma = float(rho), float(gamma)

    def slowdown(self, own: float, neighbors: Sequence[float]) -> float:
        """Slowdown of a trial busy ``own`` alone sharing its GPU with trials busy ``neighbors``."""
        total = own + sum(neighbors)
        return max(1.0, total / self.rho) * (1.0 + self.gamma * len(neighbors))

    def rate(
        self,
        trial_id: int,
        config: Mapping[str, Any],
        placement: Placement,
        gpus: Mapping[int, GPU],
        neighbors: Sequence[Neighbor] = (),
    ) -> float:
        base = 1.0 / self.unit_time(trial_id, config)
        w = sum(s for _, s in placement)
        speed = min(gpus[g].speed for g, _ in placement)
        if len(placement) > 1 or w > 1:
            return speed * base / self.overhead(config).factor(w)
        own = self.demand(trial_id, config).compute
        return speed * base / self.slowdown(own, [n.demand.compute for n in neighbors])
