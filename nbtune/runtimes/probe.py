"""Short probes of a simulated model, for :meth:`nbtune.runtimes.profiler.Profiler.probe`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from nbtune.allocators.profile_summary import summarize
from nbtune.allocators.profiling import Profile
from nbtune.core.resources import GPU, Demand, Placement
from nbtune.runtimes.model_key import model_key
from nbtune.workloads.base import Neighbor

__all__ = ["probe_workload"]


def probe_workload(self: Any, workload: Any, configs: Iterable[Mapping[str, Any]],
                   gpu: GPU | None = None) -> list[Profile]:
    """Time one budget unit of each signature on simulated GPUs; store the profiles (see Profiler.probe)."""
    if not self.model:
        self.model = model_key(workload)
    gpu = gpu or GPU(0)
    gpus = {i: replace(gpu, gpu_id=i) for i in range(4)}
    seen: dict[str, Mapping[str, Any]] = {}
    for cfg in configs:
        seen.setdefault(self.signature(cfg), cfg)
    out = []
    for sig, cfg in seen.items():
        dem = workload.demand(-1, cfg)

        def unit(pl: Placement, nb: int, cfg: Mapping[str, Any] = cfg, dem: Demand = dem) -> float:
            share = pl[0][1]
            others = tuple(Neighbor(-2 - i, share, dem) for i in range(nb))
            return 1.0 / workload.rate(-1, cfg, pl, gpus, others)

        pack = {p: unit(((0, 1.0 / p),), p - 1) for p in (1, 2, 3, 4)}
        scale = {w: unit(tuple((g, 1.0) for g in range(w)), 0) for w in (1, 2, 4)}
        util = Demand(min(dem.compute, 1.0), dem.memory_gb, dem.cpus)
        prof = summarize(Profile(sig), pack, scale, util, None, self.threshold, self.min_gain)
        self.put(prof)
        out.append(prof)
    return out
