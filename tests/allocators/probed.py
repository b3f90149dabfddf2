"""A simulator whose profiler was seeded by short probes of the model (a previous run's job history).

The allocator tests below check the papers' policies on known runtimes and
demands; a real run knows them only after profiling, so these runs start with
the profiles a profiling run of the same model would have stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nbtune.allocators.profiling import InMemoryProfileStore
from nbtune.core.space import Domain, grid_configs
from nbtune.runtimes.profiler import Profiler
from nbtune.runtimes.sim import SimRuntime


def probed_sim(workload: Any, configs: Iterable[Mapping[str, Any]] | None = None,
               signature_keys: Iterable[str] | None = None, **sim: Any) -> SimRuntime:
    prof = Profiler(InMemoryProfileStore(), signature_keys=signature_keys)
    if configs is None:  # the grid's points; other domains are floats the signature ignores
        configs = [{k: v for k, v in cfg.items() if not isinstance(v, Domain)}
                   for cfg in grid_configs(workload.space)]
    prof.probe(workload, configs)
    return SimRuntime(profiler=prof, **sim)
